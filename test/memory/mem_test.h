/* Helpers shared by the multi-process memory tests (run through cchan-run). */
#ifndef CCHAN_TEST_MEM_TEST_H
#define CCHAN_TEST_MEM_TEST_H

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cchan/cchan.h"

static int mt_rank = -1;

#define MT_CHECK(cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s (last error: %s)\n", mt_rank,        \
                    __FILE__, __LINE__, #cond, cchan_last_error());                                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define MT_OK(call)                                                                                \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_) {                                                                                 \
            fprintf(stderr, "rank %d: %s:%d: %s returned %d (%s): %s\n", mt_rank, __FILE__,        \
                    __LINE__, #call, rc_, cchan_strerror(rc_), cchan_last_error());                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Expects `call` to fail with `status` and a last error containing `part`. */
#define MT_FAILS(call, status, part)                                                               \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != (status) || !strstr(cchan_last_error(), (part))) {                              \
            fprintf(stderr, "rank %d: %s:%d: %s returned %d (%s), want %d with '%s'; error: %s\n", \
                    mt_rank, __FILE__, __LINE__, #call, rc_, cchan_strerror(rc_), (int)(status),   \
                    (part), cchan_last_error());                                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* A host-platform communicator from the cchan-run environment. */
static inline cchan_comm_t *mt_comm(void) {
    cchan_bootstrap_t *bs = NULL;
    MT_OK(cchan_bootstrap_create_from_env(&bs));
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST;
    cchan_comm_t *comm = NULL;
    MT_OK(cchan_comm_create(bs, &cfg, &comm));
    mt_rank = cchan_comm_rank(comm);
    return comm;
}

static inline void mt_barrier(cchan_comm_t *comm) {
    MT_OK(cchan_bootstrap_barrier(cchan_comm_bootstrap(comm)));
}

static inline double mt_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Deterministic bytes for (seed, index): any rank can regenerate what another wrote. */
static inline uint8_t mt_byte(uint64_t seed, uint64_t i) {
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint8_t)(z ^ (z >> 31));
}

static inline void mt_fill(uint8_t *p, uint64_t n, uint64_t seed) {
    for (uint64_t i = 0; i < n; i++) p[i] = mt_byte(seed, i);
}

/* First index where p differs from the seed's bytes, or n. */
static inline uint64_t mt_mismatch(const uint8_t *p, uint64_t n, uint64_t seed) {
    for (uint64_t i = 0; i < n; i++)
        if (p[i] != mt_byte(seed, i)) return i;
    return n;
}

/* Resources a test must give back: open fds and cchan memfd mappings of this process. */
static inline int mt_open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

static inline int mt_cchan_mappings(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "memfd:cchan:")) n++;
    fclose(f);
    return n;
}

/* ---- a group of CPU threads acting as one thread block */

typedef struct mt_group {
    pthread_barrier_t barrier;
    uint32_t nthreads;
    void *arg;
    void (*fn)(struct mt_group *g, uint32_t tid);
} mt_group_t;

typedef struct mt_thread {
    mt_group_t *g;
    uint32_t tid;
} mt_thread_t;

static inline void mt_group_sync(mt_group_t *g) { pthread_barrier_wait(&g->barrier); }

static inline void *mt_group_main(void *arg) {
    mt_thread_t *t = (mt_thread_t *)arg;
    t->g->fn(t->g, t->tid);
    return NULL;
}

/* Runs fn(g, tid) on nthreads threads and joins them. */
static inline void mt_group_run(uint32_t nthreads, void (*fn)(mt_group_t *, uint32_t), void *arg) {
    mt_group_t g;
    g.nthreads = nthreads;
    g.arg = arg;
    g.fn = fn;
    pthread_barrier_init(&g.barrier, NULL, nthreads);
    pthread_t th[64];
    mt_thread_t ts[64];
    MT_CHECK(nthreads >= 1 && nthreads <= 64);
    for (uint32_t t = 0; t < nthreads; t++) {
        ts[t].g = &g;
        ts[t].tid = t;
        MT_CHECK(pthread_create(&th[t], NULL, mt_group_main, &ts[t]) == 0);
    }
    for (uint32_t t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&g.barrier);
}

#endif /* CCHAN_TEST_MEM_TEST_H */
