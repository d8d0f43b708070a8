/* Stopping a proxy with work outstanding. Rank 0 sends, rank 1 receives and checks the data.
 *
 *  1. Requests pushed while the proxy is not running: stop reports them (CCHAN_ERR_TIMEOUT, with
 *     the channel and how many are queued); once started, the proxy performs them all.
 *  2. A tiny drain timeout while the proxy is busy with large copies (queued before it starts, so
 *     that it is still busy when stop comes even on an oversubscribed machine): stop reports what
 *     is left and no thread serves the FIFO afterwards; a restart drains the rest and stop then
 *     returns 0.
 */
#include "port_test.h"

#define BIG (16u << 20)
#define BIG_PUTS 64
#define SMALL 4096u
#define QUEUED 5

typedef struct sender_ctx {
    const cchan_port_channel_t *ch;
    int count;
    size_t bytes;
} sender_ctx_t;

/* Pushes `count` put_signal requests of `bytes` each, to consecutive dst offsets; never waits. */
static void *push_puts(void *arg) {
    const sender_ctx_t *s = arg;
    for (int k = 0; k < s->count; k++)
        PT_OK(cchan_port_channel_put_signal(s->ch, (uint64_t)k * s->bytes % BIG, 0, s->bytes));
    return NULL;
}

static void expect_outstanding(int r, const char *what) {
    const char *msg = cchan_last_error();
    PT_CHECK(r == CCHAN_ERR_TIMEOUT, "%s: stop returned %d (%s)", what, r, cchan_strerror(r));
    PT_CHECK(strstr(msg, "channel 0 (peer 1)") && strstr(msg, "queued"), "%s: message '%s'", what,
             msg);
    printf("rank 0: %s: %s\n", what, msg);
}

static void sender_stopped_proxy(pt_t *t, const cchan_port_channel_t *ch) {
    pt_fill(t->src_ptr, SMALL, pt_seed(0, 3, 0));
    sender_ctx_t s = {ch, QUEUED, SMALL};
    pt_run(1, push_puts, &s, sizeof s);
    int r = cchan_proxy_stop(t->proxy, 10);
    expect_outstanding(r, "stop of a proxy that never ran");
    char want[64];
    snprintf(want, sizeof want, "channel 0 (peer 1) %d queued", QUEUED);
    PT_CHECK(strstr(cchan_last_error(), want) != NULL, "wanted '%s'", want);
    PT_OK(cchan_proxy_start(t->proxy));
    PT_OK(cchan_proxy_stop(t->proxy, 10000)); /* drains the five */
}

static void sender_busy_proxy(pt_t *t, const cchan_port_channel_t *ch) {
    pt_fill(t->src_ptr, BIG, pt_seed(0, 4, 0));
    sender_ctx_t s = {ch, BIG_PUTS, BIG};
    pt_run(1, push_puts, &s, sizeof s);
    PT_OK(cchan_proxy_start(t->proxy));
    double t0 = pt_now_s();
    int r = cchan_proxy_stop(t->proxy, 1);
    double took = pt_now_s() - t0;
    expect_outstanding(r, "stop with 1 ms to drain 1 GiB of copies");
    PT_CHECK(took < 5.0, "stop took %.2f s", took);
    /* Stopped means stopped: nothing takes triggers any more. */
    uint64_t tail = __atomic_load_n(ch->fifo.tail, __ATOMIC_ACQUIRE);
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    PT_CHECK(__atomic_load_n(ch->fifo.tail, __ATOMIC_ACQUIRE) == tail, "tail moved after stop");
    PT_OK(cchan_proxy_start(t->proxy));
    PT_OK(cchan_proxy_stop(t->proxy, 60000));
}

static void receive(pt_t *t, const cchan_port_channel_t *ch, int count, size_t bytes,
                    uint64_t seed) {
    for (int k = 0; k < count; k++) PT_OK(cchan_port_channel_wait(ch));
    for (int k = 0; k < count && (k == 0 || bytes < BIG); k++) {
        size_t bad = pt_mismatch(t->dst_ptr + (size_t)k * bytes % BIG, bytes, seed);
        PT_CHECK(bad == bytes, "transfer %d: byte %zu differs", k, bad);
    }
}

int main(void) {
    pt_t t;
    pt_init(&t, BIG, 1, 512, 0);
    PT_CHECK(t.nranks == 2, "needs 2 ranks, got %d", t.nranks);
    cchan_port_channel_t ch;
    pt_channel(&t, 1 - t.rank, 0, &ch);
    pt_barrier(&t);
    if (t.rank == 0)
        sender_stopped_proxy(&t, &ch);
    else
        receive(&t, &ch, QUEUED, SMALL, pt_seed(0, 3, 0));
    pt_barrier(&t);
    if (t.rank == 0)
        sender_busy_proxy(&t, &ch);
    else
        receive(&t, &ch, BIG_PUTS, BIG, pt_seed(0, 4, 0));
    PT_OK(cchan_proxy_start(t.proxy)); /* pt_fini stops it and expects nothing left */
    pt_fini(&t);
    return 0;
}
