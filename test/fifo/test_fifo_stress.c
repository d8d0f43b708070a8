/* FIFO stress: producer threads run the device code (cchan_fifo_push, host backend) against one
 * consumer thread (cchan_fifo_peek + cchan_fifo_publish_tail) through a ring of 8 slots that is
 * kept full. Every trigger carries its producer and a per-producer sequence number; the consumer
 * checks that nothing is lost, duplicated, reordered or torn (word0 and word1 from different
 * pushes).
 *
 * Triggers per run: CCHAN_TEST_FIFO_TRIGGERS (default 10^6; 10^5 under ThreadSanitizer, which slows
 * each handoff ~10x). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cchan/fifo.h"

#if defined(__SANITIZE_THREAD__)
#define FIFO_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FIFO_TSAN 1
#endif
#endif
#ifdef FIFO_TSAN
#define DEFAULT_TRIGGERS 100000ull
#else
#define DEFAULT_TRIGGERS 1000000ull
#endif

#define RING_SLOTS 8u
#define MAX_PRODUCERS 4u
#define PUBLISH_BATCH 2u                 /* the proxy may batch tail updates: exercise that */
#define STALL_NS (20ull * 1000000000ull) /* consumer gives up after this long without a trigger */

typedef struct ring {
    cchan_fifo_t fifo;
    cchan_trigger_t *slots;
    uint64_t head;
    uint64_t tail_cache;
    uint64_t tail;
    cchan_diag_t diag;
} ring_t;

typedef struct producer {
    ring_t *ring;
    uint32_t id;
    uint64_t count;
    int status; /* first failing push status, 0 if none */
} producer_t;

static uint64_t triggers_per_run(void) {
    const char *v = getenv("CCHAN_TEST_FIFO_TRIGGERS");
    return v ? strtoull(v, NULL, 0) : DEFAULT_TRIGGERS;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static ring_t *ring_create(uint32_t slots, uint64_t timeout_ns) {
    ring_t *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->slots = aligned_alloc(16, slots * sizeof(cchan_trigger_t));
    assert_non_null(r->slots);
    memset(r->slots, 0, slots * sizeof(cchan_trigger_t));
    r->fifo.slots = r->slots;
    r->fifo.head = &r->head;
    r->fifo.tail_cache = &r->tail_cache;
    r->fifo.tail = &r->tail;
    r->fifo.size = slots;
    r->fifo.ctl.diag = &r->diag;
    r->fifo.ctl.timeout_ns = timeout_ns;
    r->fifo.ctl.rank = 3;
    r->fifo.ctl.peer = -1;
    r->fifo.ctl.id = 42;
    return r;
}

static void ring_destroy(ring_t *r) {
    free(r->slots);
    free(r);
}

/* word1 is derived from (producer, seq) so a torn read (word0 of one push, word1 of another) shows
 * (its top 31 bits fill the 31-bit size field).
 */
static uint64_t check_word(uint32_t producer, uint64_t seq) {
    uint64_t x = (seq + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)producer << 56);
    return x ^ (x >> 29);
}

static cchan_trigger_t make_trigger(uint32_t producer, uint64_t seq) {
    uint64_t w = check_word(producer, seq);
    return cchan_trigger_encode(CCHAN_TRIGGER_PUT, producer, seq & CCHAN_TRIGGER_MAX_OFFSET,
                                w & CCHAN_TRIGGER_MAX_OFFSET, w >> 33);
}

static void *producer_main(void *arg) {
    producer_t *p = arg;
    for (uint64_t seq = 0; seq < p->count; seq++) {
        int64_t r = cchan_fifo_push(&p->ring->fifo, make_trigger(p->id, seq));
        if (r < 0) {
            p->status = (int)r;
            break;
        }
    }
    return NULL;
}

typedef struct consume_result {
    uint64_t consumed;
    uint64_t full_seen; /* times the consumer saw every slot claimed: producers were waiting */
    int stalled;
} consume_result_t;

/* The proxy's side: peek at the tail, verify, advance, publish in small batches. Fails the test on
 * the first trigger that breaks per-producer order or does not match its check word. */
static consume_result_t consume_all(ring_t *r, uint32_t nproducers, uint64_t total) {
    uint64_t next_seq[MAX_PRODUCERS] = {0};
    consume_result_t res = {0, 0, 0};
    uint64_t tail = 0, last_progress = now_ns();
    uint32_t spins = 0;
    while (tail < total) {
        cchan_trigger_t t;
        if (!cchan_fifo_peek(r->slots, RING_SLOTS, tail, &t)) {
            cchan_fifo_publish_tail(&r->tail, tail);
            cchan_spin_pause(++spins);
            if ((spins & 1023u) == 0 && now_ns() - last_progress > STALL_NS) {
                res.stalled = 1;
                break;
            }
            continue;
        }
        spins = 0;
        cchan_trigger_fields_t f = cchan_trigger_decode(t);
        assert_int_equal(f.type, CCHAN_TRIGGER_PUT);
        assert_true(f.channel < nproducers);
        uint64_t want = next_seq[f.channel]++;
        if (f.dst_off != (want & CCHAN_TRIGGER_MAX_OFFSET))
            fail_msg("producer %u: got sequence %llu, expected %llu (trigger %llu)", f.channel,
                     (unsigned long long)f.dst_off, (unsigned long long)want,
                     (unsigned long long)tail);
        uint64_t w = check_word(f.channel, want);
        if (f.src_off != (w & CCHAN_TRIGGER_MAX_OFFSET) || f.bytes != (w >> 33))
            fail_msg("producer %u seq %llu: torn trigger", f.channel, (unsigned long long)want);
        if (__atomic_load_n(&r->head, __ATOMIC_RELAXED) >= tail + RING_SLOTS) res.full_seen++;
        tail++;
        if (tail % PUBLISH_BATCH == 0) cchan_fifo_publish_tail(&r->tail, tail);
        last_progress = (tail & 4095u) ? last_progress : now_ns();
    }
    cchan_fifo_publish_tail(&r->tail, tail);
    for (uint32_t p = 0; p < nproducers; p++)
        if (!res.stalled && next_seq[p] != total / nproducers)
            fail_msg("producer %u: %llu triggers arrived, %llu pushed", p,
                     (unsigned long long)next_seq[p], (unsigned long long)(total / nproducers));
    res.consumed = tail;
    return res;
}

static void run_stress(uint32_t nproducers) {
    uint64_t per_producer = triggers_per_run() / nproducers;
    uint64_t total = per_producer * nproducers;
    ring_t *r = ring_create(RING_SLOTS, 0);
    producer_t prod[MAX_PRODUCERS];
    pthread_t threads[MAX_PRODUCERS];
    uint64_t t0 = now_ns();
    for (uint32_t i = 0; i < nproducers; i++) {
        prod[i] = (producer_t){r, i, per_producer, 0};
        assert_int_equal(pthread_create(&threads[i], NULL, producer_main, &prod[i]), 0);
    }
    consume_result_t res = consume_all(r, nproducers, total);
    if (res.stalled)
        fail_msg("no trigger for %llu s after %llu of %llu", STALL_NS / 1000000000ull,
                 (unsigned long long)res.consumed, (unsigned long long)total);
    for (uint32_t i = 0; i < nproducers; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(prod[i].status, 0);
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    print_message("%u producer(s): %llu triggers through %u slots in %.2f s (%.2f M/s), ring full "
                  "at %llu of them\n",
                  nproducers, (unsigned long long)total, RING_SLOTS, secs,
                  (double)total / secs / 1e6, (unsigned long long)res.full_seen);
    assert_int_equal(__atomic_load_n(&r->head, __ATOMIC_RELAXED), total);
    assert_int_equal(res.consumed, total);
    /* Producers outran the consumer: the full-ring path (tail reread) was exercised. */
    assert_true(res.full_seen > 0);
    assert_int_equal(r->diag.state, 0);
    ring_destroy(r);
}

static void test_stress_1_producer(void **state) {
    (void)state;
    run_stress(1);
}

static void test_stress_4_producers(void **state) {
    (void)state;
    run_stress(4);
}

/* A full ring with a deadline: the push gives up with CCHAN_ERR_DEVICE_TIMEOUT, the diagnostic
 * names the wait (FIFO full, index awaited, tail seen, who waited), and no slot was overwritten. */
static void test_full_ring_times_out(void **state) {
    (void)state;
    const uint64_t timeout_ns = 20ull * 1000000;
    ring_t *r = ring_create(RING_SLOTS, timeout_ns);
    for (uint32_t i = 0; i < RING_SLOTS; i++)
        assert_int_equal(cchan_fifo_push(&r->fifo, make_trigger(0, i)), i);
    uint64_t t0 = now_ns();
    int64_t st = cchan_fifo_push(&r->fifo, make_trigger(0, RING_SLOTS));
    uint64_t elapsed = now_ns() - t0;
    assert_int_equal(st, CCHAN_ERR_DEVICE_TIMEOUT);
    assert_true(elapsed >= timeout_ns);
    assert_int_equal(r->diag.state, 1);
    assert_int_equal(r->diag.kind, CCHAN_WAIT_FIFO_FULL);
    assert_int_equal(r->diag.rank, 3);
    assert_int_equal(r->diag.peer, -1);
    assert_int_equal(r->diag.id, 42);
    assert_int_equal(r->diag.expected, RING_SLOTS); /* the index it claimed */
    assert_int_equal(r->diag.observed, 0);          /* the tail it last saw */
    assert_true(r->diag.waited_ns >= timeout_ns);
    for (uint64_t i = 0; i < RING_SLOTS; i++) {
        cchan_trigger_t t;
        assert_int_equal(cchan_fifo_peek(r->slots, RING_SLOTS, i, &t), 1);
        assert_int_equal(cchan_trigger_decode(t).dst_off, i);
    }
    ring_destroy(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_ring_times_out),
        cmocka_unit_test(test_stress_1_producer),
        cmocka_unit_test(test_stress_4_producers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
