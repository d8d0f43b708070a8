/* Flush: once flush() (or put_signal_flush()) returns, the sender overwrites the source at once;
 * the peer must still receive the data as it was before the overwrite. Two ranks, both directions
 * at once, many iterations alternating the two forms, sizes around 64 KiB.
 *
 * Iterations: CCHAN_TEST_PORT_FLUSH_ITERS (default 3000; 600 under sanitizers). */
#include "port_test.h"

#define XFER_MAX (64u << 10)
#define SEM_DATA 0
#define SEM_ACK 1

typedef struct flush_ctx {
    pt_t *t;
    int peer;
    uint64_t iters;
    cchan_port_channel_t data, ack;
} flush_ctx_t;

static size_t size_of(uint64_t i) { return XFER_MAX - (size_t)(i % 61); }

static void *kernel(void *arg) {
    flush_ctx_t *c = arg;
    uint8_t *src = c->t->src_ptr, *dst = c->t->dst_ptr;
    for (uint64_t i = 0; i < c->iters; i++) {
        size_t n = size_of(i);
        pt_fill(src, n, pt_seed(c->t->rank, 1, i));
        if (i % 2) {
            PT_OK(cchan_port_channel_put_signal_flush(&c->data, 0, 0, n));
            memset(src, 0xFF, n);
        } else {
            PT_OK(cchan_port_channel_put(&c->data, 0, 0, n));
            PT_OK(cchan_port_channel_flush(&c->data));
            memset(src, 0xFF, n);
            PT_OK(cchan_port_channel_signal(&c->data));
        }
        PT_OK(cchan_port_channel_wait(&c->data));
        size_t bad = pt_mismatch(dst, n, pt_seed(c->peer, 1, i));
        PT_CHECK(bad == n,
                 "iteration %llu: byte %zu of %zu differs from the data before the "
                 "overwrite",
                 (unsigned long long)i, bad, n);
        PT_OK(cchan_port_channel_signal(&c->ack));
        PT_OK(cchan_port_channel_wait(&c->ack));
    }
    return NULL;
}

int main(void) {
    pt_t t;
    pt_init(&t, XFER_MAX, 2, 512, 1);
    PT_CHECK(t.nranks == 2, "needs 2 ranks, got %d", t.nranks);
    flush_ctx_t c = {.t = &t,
                     .peer = 1 - t.rank,
                     .iters = pt_env_count("CCHAN_TEST_PORT_FLUSH_ITERS", 3000, 600)};
    pt_channel(&t, c.peer, SEM_DATA, &c.data);
    pt_channel(&t, c.peer, SEM_ACK, &c.ack);
    pt_barrier(&t);
    double t0 = pt_now_s();
    pt_run(1, kernel, &c, sizeof c);
    PT_CHECK(*c.data.flush_done == c.iters && *c.data.flush_issued == c.iters,
             "flushes issued %llu, done %llu", (unsigned long long)*c.data.flush_issued,
             (unsigned long long)*c.data.flush_done);
    if (t.rank == 0)
        printf(
            "port flush: %llu transfers each way, source overwritten after every flush, %.2f s\n",
            (unsigned long long)c.iters, pt_now_s() - t0);
    pt_fini(&t);
    return 0;
}
