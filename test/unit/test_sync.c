/* Semaphores, deadlines and the grid barrier on the host backend, with CPU threads as the two sides
 * of a semaphore or as the blocks of a grid. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cchan/barrier.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- a semaphore pair in one process
 */

typedef struct side {
    uint64_t inbound, expected, outbound;
} side_t;

typedef struct pair {
    side_t a, b;
    cchan_semaphore_t sa, sb; /* sa: a's view (signal raises b.inbound), sb: b's */
    uint64_t data;            /* written before a signal, read after the matching wait */
} pair_t;

static void pair_init(pair_t *p) {
    memset(p, 0, sizeof *p);
    p->sa = (cchan_semaphore_t){&p->a.inbound, &p->a.expected, &p->b.inbound, &p->a.outbound, {0}};
    p->sb = (cchan_semaphore_t){&p->b.inbound, &p->b.expected, &p->a.inbound, &p->b.outbound, {0}};
}

#define ROUNDS 20000

/* b echoes data + 1 back to a. Plain (non-atomic) data accesses: the semaphore's release/acquire
 * must order them, which ThreadSanitizer checks. */
static void *echo(void *arg) {
    pair_t *p = arg;
    for (uint64_t i = 0; i < ROUNDS; i++) {
        if (cchan_semaphore_wait(&p->sb) != 0) return (void *)1;
        if (p->data != 2 * i) return (void *)2;
        p->data = 2 * i + 1;
        cchan_semaphore_signal(&p->sb);
    }
    return NULL;
}

static void test_signal_wait_ping_pong(void **state) {
    (void)state;
    pair_t p;
    pair_init(&p);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, echo, &p), 0);
    for (uint64_t i = 0; i < ROUNDS; i++) {
        p.data = 2 * i;
        cchan_semaphore_signal(&p.sa);
        assert_int_equal(cchan_semaphore_wait(&p.sa), 0);
        assert_int_equal(p.data, 2 * i + 1);
    }
    void *ret;
    pthread_join(t, &ret);
    assert_null(ret);
    /* Counters never reset: each side sent and consumed ROUNDS signals. */
    assert_int_equal(p.a.outbound, ROUNDS);
    assert_int_equal(p.b.inbound, ROUNDS);
    assert_int_equal(p.b.expected, ROUNDS);
    assert_int_equal(p.a.inbound, ROUNDS);
}

static void *poll_echo(void *arg) {
    pair_t *p = arg;
    for (uint64_t i = 0; i < ROUNDS; i++) {
        while (!cchan_semaphore_poll(&p->sb)) cchan_spin_pause(64);
        if (p->data != 2 * i) return (void *)2;
        p->data = 2 * i + 1;
        cchan_semaphore_signal(&p->sb);
    }
    return NULL;
}

static void test_poll(void **state) {
    (void)state;
    pair_t p;
    pair_init(&p);
    assert_int_equal(cchan_semaphore_poll(&p.sb), 0);
    assert_int_equal(p.b.expected, 0); /* a failed poll consumes nothing */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, poll_echo, &p), 0);
    for (uint64_t i = 0; i < ROUNDS; i++) {
        p.data = 2 * i;
        cchan_semaphore_signal(&p.sa);
        while (!cchan_semaphore_poll(&p.sa)) cchan_spin_pause(64);
        assert_int_equal(p.data, 2 * i + 1);
    }
    void *ret;
    pthread_join(t, &ret);
    assert_null(ret);
    assert_int_equal(cchan_semaphore_poll(&p.sa), 0);
}

static void test_relaxed_signal_counts(void **state) {
    (void)state;
    pair_t p;
    pair_init(&p);
    for (int i = 0; i < 5; i++) cchan_semaphore_relaxed_signal(&p.sa);
    assert_int_equal(p.b.inbound, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(cchan_semaphore_poll(&p.sb), 1);
    assert_int_equal(cchan_semaphore_poll(&p.sb), 0);
}

/* ---------------------------------------------------------------- deadlines */

static void test_wait_deadline_fills_diag(void **state) {
    (void)state;
    pair_t p;
    pair_init(&p);
    cchan_diag_t diag;
    memset(&diag, 0, sizeof diag);
    p.sa.ctl = (cchan_wait_ctl_t){&diag, 50000000ull /* 50 ms */, 3, 5, 11, 0};
    p.a.inbound = 4; /* four signals arrived and were consumed; the fifth never comes */
    p.a.expected = 4;
    double t0 = now_s();
    assert_int_equal(cchan_semaphore_wait(&p.sa), CCHAN_ERR_DEVICE_TIMEOUT);
    double waited = now_s() - t0;
    assert_true(waited >= 0.050);
    assert_true(waited < 5.0);
    assert_int_equal(diag.state, CCHAN_DIAG_COMPLETE);
    assert_int_equal(diag.kind, CCHAN_WAIT_SEMAPHORE);
    assert_int_equal(diag.rank, 3);
    assert_int_equal(diag.peer, 5);
    assert_int_equal(diag.id, 11);
    assert_int_equal(diag.expected, 5);
    assert_int_equal(diag.observed, 4);
    assert_true(diag.waited_ns >= 50000000ull);
}

static void test_no_deadline_by_default(void **state) {
    (void)state;
    pair_t p;
    pair_init(&p);
    p.a.inbound = 1;
    assert_int_equal(cchan_semaphore_wait(&p.sa), 0); /* ctl all zero: no record, no deadline */
}

/* Threads that time out together leave one whole record, from one of them. */
typedef struct racer {
    cchan_diag_t *diag;
    int id;
    int result;
} racer_t;

static void *time_out(void *arg) {
    racer_t *r = arg;
    uint64_t never = 0;
    cchan_wait_ctl_t ctl = {r->diag, 5000000ull, r->id, r->id, (uint32_t)r->id, 0};
    r->result = cchan_wait_geq_u64(&never, 1, &ctl, CCHAN_WAIT_SEMAPHORE);
    return NULL;
}

static void test_concurrent_timeouts_one_record(void **state) {
    (void)state;
    cchan_diag_t diag;
    memset(&diag, 0, sizeof diag);
    racer_t r[8];
    pthread_t t[8];
    for (int i = 0; i < 8; i++) {
        r[i] = (racer_t){&diag, i, 0};
        assert_int_equal(pthread_create(&t[i], NULL, time_out, &r[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(r[i].result, CCHAN_ERR_DEVICE_TIMEOUT);
    }
    assert_int_equal(diag.state, CCHAN_DIAG_COMPLETE);
    assert_true(diag.rank >= 0 && diag.rank < 8);
    assert_int_equal(diag.peer, diag.rank); /* all fields from the same thread */
    assert_int_equal(diag.id, (uint32_t)diag.rank);
    assert_true(diag.claim >= 1 && diag.claim <= 8);
}

/* ---------------------------------------------------------------- grid barrier */

#define BLOCKS 8
#define BARRIER_ROUNDS 1000

typedef struct grid {
    cchan_grid_barrier_t barrier;
    uint64_t count;
    uint32_t arrived[BLOCKS]; /* round each block reached */
    int bad;
} grid_t;

typedef struct block {
    grid_t *grid;
    uint32_t id;
} block_t;

static void *block_main(void *arg) {
    block_t *b = arg;
    grid_t *g = b->grid;
    for (uint32_t round = 1; round <= BARRIER_ROUNDS; round++) {
        __atomic_store_n(&g->arrived[b->id], round, __ATOMIC_RELAXED);
        if (cchan_grid_barrier(&g->barrier, 0) != 0) __atomic_store_n(&g->bad, 1, __ATOMIC_RELAXED);
        /* Past barrier `round`, every block has reached it, and none can be past the next one. */
        for (int j = 0; j < BLOCKS; j++) {
            uint32_t a = __atomic_load_n(&g->arrived[j], __ATOMIC_RELAXED);
            if (a < round || a > round + 1) __atomic_store_n(&g->bad, 1, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

static void test_grid_barrier(void **state) {
    (void)state;
    grid_t g;
    memset(&g, 0, sizeof g);
    g.barrier.count = &g.count;
    g.barrier.nblocks = BLOCKS;
    pthread_t t[BLOCKS];
    block_t b[BLOCKS];
    for (uint32_t i = 0; i < BLOCKS; i++) {
        b[i] = (block_t){&g, i};
        assert_int_equal(pthread_create(&t[i], NULL, block_main, &b[i]), 0);
    }
    for (int i = 0; i < BLOCKS; i++) pthread_join(t[i], NULL);
    assert_int_equal(g.bad, 0);
    assert_int_equal(g.count, (uint64_t)BLOCKS * BARRIER_ROUNDS);
}

static void test_grid_barrier_deadline(void **state) {
    (void)state;
    cchan_diag_t diag;
    memset(&diag, 0, sizeof diag);
    uint64_t count = 0;
    cchan_grid_barrier_t b = {&count, 2, 0, {&diag, 5000000ull, 0, -1, 9, 0}};
    assert_int_equal(cchan_grid_barrier_arrive_wait(&b), CCHAN_ERR_DEVICE_TIMEOUT); /* alone */
    assert_int_equal(diag.kind, CCHAN_WAIT_BARRIER);
    assert_int_equal(diag.expected, 2);
    assert_int_equal(diag.observed, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signal_wait_ping_pong),
        cmocka_unit_test(test_poll),
        cmocka_unit_test(test_relaxed_signal_counts),
        cmocka_unit_test(test_wait_deadline_fills_diag),
        cmocka_unit_test(test_no_deadline_by_default),
        cmocka_unit_test(test_concurrent_timeouts_one_record),
        cmocka_unit_test(test_grid_barrier),
        cmocka_unit_test(test_grid_barrier_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
