/* Helpers shared by the port-channel tests: host backend, one process per rank (cchan-run), a proxy
 * per rank serving channels whose device side runs on "kernel" threads (pthreads standing in for
 * GPU threads, calling the same inline device functions).
 *
 * Every rank allocates `src` and `dst` of the same size; dst is exchanged so that a channel to peer
 * p puts from this rank's src into p's dst. Semaphores come from one CCHAN_SEM_HOST_MAPPED set.
 * Device-side waits have a deadline (PT_DEVICE_TIMEOUT_MS) so that a lost signal fails the test
 * with CCHAN_ERR_DEVICE_TIMEOUT instead of hanging.
 *
 * Test data: pt_fill/pt_mismatch generate bytes from (seed, index) 8 bytes at a time, so a
 * transfer's content names its sender and iteration and sanitizer builds stay fast. */
#ifndef CCHAN_TEST_PORT_TEST_H
#define CCHAN_TEST_PORT_TEST_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cchan/cchan.h"

#define PT_DEVICE_TIMEOUT_MS 30000ull
#define PT_MAX_RANKS 8
#define PT_MAX_SEMS 32
#define PT_POISON 0xA5u

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define PT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define PT_SANITIZED 1
#endif
#endif

static int pt_rank = -1; /* for failure messages */

#define PT_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", pt_rank, __FILE__, __LINE__,     \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " (last error: %s)\n", cchan_last_error());                            \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define PT_OK(call)                                                                                \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_) {                                                                                 \
            fprintf(stderr, "rank %d: %s:%d: %s returned %d (%s): %s\n", pt_rank, __FILE__,        \
                    __LINE__, #call, rc_, cchan_strerror(rc_), cchan_last_error());                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct pt {
    int rank, nranks;
    cchan_comm_t *comm;
    size_t bytes;
    cchan_mem_t *src, *dst;
    cchan_mem_t *peers[PT_MAX_RANKS]; /* peers[r]: rank r's dst, mapped here */
    uint8_t *src_ptr, *dst_ptr;
    cchan_sem_set_t *sems;
    cchan_proxy_t *proxy;
} pt_t;

/* A count from the environment, with a smaller default under sanitizers (which slow every
 * handoff between threads by an order of magnitude). */
static inline uint64_t pt_env_count(const char *name, uint64_t dflt, uint64_t sanitized_dflt) {
    const char *v = getenv(name);
    if (v) return strtoull(v, NULL, 0);
#ifdef PT_SANITIZED
    (void)dflt;
    return sanitized_dflt;
#else
    (void)sanitized_dflt;
    return dflt;
#endif
}

static inline double pt_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void pt_barrier(pt_t *t) {
    PT_OK(cchan_bootstrap_barrier(cchan_comm_bootstrap(t->comm)));
}

/* Communicator, buffers, semaphores and a proxy (started when `start`) on every rank. */
static inline void pt_init(pt_t *t, size_t bytes, int nsems, uint32_t fifo_slots, int start) {
    memset(t, 0, sizeof *t);
    cchan_bootstrap_t *bs;
    PT_OK(cchan_bootstrap_create_from_env(&bs));
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST;
    cfg.timeout_ms = PT_DEVICE_TIMEOUT_MS;
    PT_OK(cchan_comm_create(bs, &cfg, &t->comm));
    t->rank = pt_rank = cchan_comm_rank(t->comm);
    t->nranks = cchan_comm_size(t->comm);
    PT_CHECK(t->nranks <= PT_MAX_RANKS && nsems <= PT_MAX_SEMS, "%d ranks, %d semaphores",
             t->nranks, nsems);
    t->bytes = bytes;
    PT_OK(cchan_mem_alloc(t->comm, bytes, 0, &t->src));
    PT_OK(cchan_mem_alloc(t->comm, bytes, 0, &t->dst));
    t->src_ptr = cchan_mem_ptr(t->src);
    t->dst_ptr = cchan_mem_ptr(t->dst);
    memset(t->dst_ptr, PT_POISON, bytes);
    PT_OK(cchan_mem_exchange(t->comm, t->dst, t->peers));
    PT_OK(cchan_sem_set_create(t->comm, nsems, CCHAN_SEM_HOST_MAPPED, &t->sems));
    cchan_proxy_config_t pcfg = CCHAN_PROXY_CONFIG_INIT;
    pcfg.fifo_slots = fifo_slots;
    PT_OK(cchan_proxy_create(t->comm, &pcfg, &t->proxy));
    if (start) PT_OK(cchan_proxy_start(t->proxy));
    pt_barrier(t);
}

static inline void pt_channel(pt_t *t, int peer, int sem, cchan_port_channel_t *out) {
    PT_OK(cchan_port_channel_create(t->proxy, CCHAN_TRANSPORT_HOST, t->sems, peer, sem,
                                    t->peers[peer], t->src, out));
}

/* Every rank stops its proxy (which must have nothing left and no failed request) and frees
 * everything. The barrier first: a peer may still be waiting for this rank's signals. */
static inline void pt_fini(pt_t *t) {
    pt_barrier(t);
    PT_OK(cchan_proxy_stop(t->proxy, 10000));
    PT_OK(cchan_proxy_destroy(t->proxy));
    pt_barrier(t); /* no peer writes into our memory any more */
    PT_OK(cchan_sem_set_destroy(t->sems));
    for (int r = 0; r < t->nranks; r++)
        if (r != t->rank) PT_OK(cchan_mem_destroy(t->peers[r]));
    PT_OK(cchan_mem_destroy(t->dst));
    PT_OK(cchan_mem_destroy(t->src));
    PT_OK(cchan_comm_destroy(t->comm));
}

/* Runs fn(args + i * arg_size) on n threads and joins them: the "kernel". */
static inline void pt_run(int n, void *(*fn)(void *), void *args, size_t arg_size) {
    pthread_t th[64];
    PT_CHECK(n <= 64, "%d threads", n);
    for (int i = 0; i < n; i++)
        PT_CHECK(pthread_create(&th[i], NULL, fn, (char *)args + (size_t)i * arg_size) == 0,
                 "pthread_create");
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

static inline uint64_t pt_mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Seed of what `sender` sends in iteration `iter` of stream `stream`. */
static inline uint64_t pt_seed(int sender, int stream, uint64_t iter) {
    return pt_mix(((uint64_t)sender << 56) ^ ((uint64_t)stream << 40) ^ iter);
}

/* Writes the pattern of `seed` into p[0..n): byte k is byte (k % 8) of pt_mix(seed + k / 8). */
static inline void pt_fill(uint8_t *p, size_t n, uint64_t seed) {
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
        uint64_t w = pt_mix(seed + k / 8);
        memcpy(p + k, &w, 8);
    }
    if (k < n) {
        uint64_t w = pt_mix(seed + k / 8);
        memcpy(p + k, &w, n - k);
    }
}

/* Index of the first byte of p[0..n) that differs from the pattern of `seed`, or n. */
static inline size_t pt_mismatch(const uint8_t *p, size_t n, uint64_t seed) {
    for (size_t k = 0; k < n; k += 8) {
        uint64_t w = pt_mix(seed + k / 8);
        size_t len = n - k < 8 ? n - k : 8;
        if (memcmp(p + k, &w, len) != 0) {
            const uint8_t *wb = (const uint8_t *)&w;
            for (size_t j = 0; j < len; j++)
                if (p[k + j] != wb[j]) return k + j;
        }
    }
    return n;
}

/* xorshift64*: per-thread reproducible randomness. */
static inline uint64_t pt_random(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

/* Sizes from 1 B to max, log-uniform, usually odd. */
static inline size_t pt_random_size(uint64_t *s, size_t max) {
    int bits = 0;
    while (((size_t)1 << (bits + 1)) <= max) bits++;
    size_t n = (size_t)1 << (pt_random(s) % (uint64_t)(bits + 1));
    n += pt_random(s) % n;
    return n > max ? max : n;
}

#endif /* CCHAN_TEST_PORT_TEST_H */
