/* Several channels on one proxy, each driven by its own kernel thread: 8 data channels (plus 8 for
 * acknowledgements) between two ranks, all pushing into the same FIFO at once. Channel c owns
 * region c of the buffers; every transfer carries random data of random size and offsets, so a
 * request applied to the wrong channel, out of its channel's order, or a signal counted on the
 * wrong semaphore fails the check.
 *
 * Iterations per channel: CCHAN_TEST_PORT_CHANNEL_ITERS (default 300; 60 under sanitizers). */
#include "port_test.h"

#define NCHANNELS 8
#define REGION (256u << 10)
#define SLACK 64u

typedef struct lane {
    pt_t *t;
    int peer;
    int index;
    uint64_t iters;
    cchan_port_channel_t data, ack;
} lane_t;

typedef struct lane_transfer {
    size_t bytes, src_off, dst_off;
} lane_transfer_t;

static lane_transfer_t transfer_of(int sender, int lane, uint64_t i) {
    uint64_t s = pt_seed(sender, 50 + lane, i) | 1;
    lane_transfer_t x;
    x.src_off = pt_random(&s) % SLACK;
    x.dst_off = pt_random(&s) % SLACK;
    x.bytes = pt_random_size(&s, REGION - 2 * SLACK);
    return x;
}

static void *lane_main(void *arg) {
    lane_t *l = arg;
    uint8_t *src = l->t->src_ptr + (size_t)l->index * REGION;
    uint8_t *dst = l->t->dst_ptr + (size_t)l->index * REGION;
    uint64_t base = (uint64_t)l->index * REGION;
    for (uint64_t i = 0; i < l->iters; i++) {
        lane_transfer_t x = transfer_of(l->t->rank, l->index, i);
        pt_fill(src + x.src_off, x.bytes, pt_seed(l->t->rank, l->index, i));
        if (i % 2) {
            PT_OK(cchan_port_channel_put_signal_flush(&l->data, base + x.dst_off, base + x.src_off,
                                                      x.bytes));
        } else {
            PT_OK(cchan_port_channel_put(&l->data, base + x.dst_off, base + x.src_off, x.bytes));
            PT_OK(cchan_port_channel_signal(&l->data));
        }
        lane_transfer_t y = transfer_of(l->peer, l->index, i);
        PT_OK(cchan_port_channel_wait(&l->data));
        size_t bad = pt_mismatch(dst + y.dst_off, y.bytes, pt_seed(l->peer, l->index, i));
        PT_CHECK(bad == y.bytes, "channel %d iteration %llu: byte %zu of %zu differs", l->index,
                 (unsigned long long)i, bad, y.bytes);
        PT_CHECK(dst[y.dst_off + y.bytes] == PT_POISON, "channel %d iteration %llu: overrun",
                 l->index, (unsigned long long)i);
        memset(dst + y.dst_off, PT_POISON, y.bytes);
        PT_OK(cchan_port_channel_signal(&l->ack));
        PT_OK(cchan_port_channel_wait(&l->ack));
        if (i % 2 == 0)
            PT_OK(cchan_port_channel_flush(&l->data)); /* before the source is refilled */
    }
    return NULL;
}

int main(void) {
    pt_t t;
    pt_init(&t, (size_t)NCHANNELS * REGION, 2 * NCHANNELS, 512, 1);
    PT_CHECK(t.nranks == 2, "needs 2 ranks, got %d", t.nranks);
    lane_t lanes[NCHANNELS];
    uint64_t iters = pt_env_count("CCHAN_TEST_PORT_CHANNEL_ITERS", 300, 60);
    for (int c = 0; c < NCHANNELS; c++) {
        lanes[c] = (lane_t){.t = &t, .peer = 1 - t.rank, .index = c, .iters = iters};
        pt_channel(&t, 1 - t.rank, c, &lanes[c].data);
        pt_channel(&t, 1 - t.rank, NCHANNELS + c, &lanes[c].ack);
    }
    /* What moves each channel's puts, and no answer for a handle the proxy does not own. */
    const char *path = cchan_port_channel_path(t.proxy, &lanes[0].data);
    PT_CHECK(path && strcmp(path, "host") == 0, "channel path '%s', want 'host'",
             path ? path : "(null)");
    cchan_port_channel_t stranger = lanes[0].data;
    stranger.id = 4000;
    PT_CHECK(cchan_port_channel_path(t.proxy, &stranger) == NULL, "a path for an unknown id");
    stranger = lanes[0].data;
    stranger.fifo.slots = NULL;
    PT_CHECK(cchan_port_channel_path(t.proxy, &stranger) == NULL, "a path for another FIFO");
    PT_CHECK(cchan_port_channel_path(NULL, &lanes[0].data) == NULL, "a path without a proxy");
    pt_barrier(&t);
    double t0 = pt_now_s();
    pt_run(NCHANNELS, lane_main, lanes, sizeof lanes[0]);
    for (int c = 0; c < NCHANNELS; c++)
        PT_CHECK(*lanes[c].data.expected == iters && *lanes[c].ack.expected == iters,
                 "channel %d: %llu data and %llu ack signals consumed", c,
                 (unsigned long long)*lanes[c].data.expected,
                 (unsigned long long)*lanes[c].ack.expected);
    if (t.rank == 0)
        printf("port channels: %d channels x %llu transfers on one proxy per rank in %.2f s\n",
               NCHANNELS, (unsigned long long)iters, pt_now_s() - t0);
    pt_fini(&t);
    return 0;
}
