/* Misuse is an error, not a crash: proxy configs, channel arguments, and requests the proxy must
 * refuse (a put beyond the registered buffers, a trigger for no channel, a trigger of no type).
 * Refused requests perform nothing; cchan_proxy_stop reports them (with the channel) and the
 * channel keeps working. Two ranks: rank 0 sends the bad requests, rank 1 checks that nothing
 * but the valid transfer arrived. */
#include "port_test.h"

#define BYTES (64u << 10)
#define VALID 4096u

static void expect_status(int got, int want, const char *what) {
    PT_CHECK(got == want, "%s: returned %d (%s), expected %d (%s)", what, got, cchan_strerror(got),
             want, cchan_strerror(want));
    PT_CHECK(want == 0 || cchan_last_error()[0] != '\0', "%s: no message", what);
}

static void check_configs(pt_t *t) {
    cchan_proxy_t *p = NULL;
    cchan_proxy_config_t c = CCHAN_PROXY_CONFIG_INIT;
    c.magic = 0;
    expect_status(cchan_proxy_create(t->comm, &c, &p), -EINVAL, "bad magic");
    c = (cchan_proxy_config_t)CCHAN_PROXY_CONFIG_INIT;
    c.version = 10000 * (CCHAN_VERSION_MAJOR + 1);
    expect_status(cchan_proxy_create(t->comm, &c, &p), CCHAN_ERR_VERSION, "other major version");
    c = (cchan_proxy_config_t)CCHAN_PROXY_CONFIG_INIT;
    c.size = sizeof c + 8;
    expect_status(cchan_proxy_create(t->comm, &c, &p), CCHAN_ERR_VERSION, "config from the future");
    c.size = sizeof(size_t);
    expect_status(cchan_proxy_create(t->comm, &c, &p), -EINVAL, "truncated config");
    const uint32_t bad_slots[] = {0, 1, 3, 768, 1u << 21};
    for (size_t i = 0; i < sizeof bad_slots / sizeof bad_slots[0]; i++) {
        c = (cchan_proxy_config_t)CCHAN_PROXY_CONFIG_INIT;
        c.fifo_slots = bad_slots[i];
        expect_status(cchan_proxy_create(t->comm, &c, &p), -EINVAL, "fifo_slots");
    }
    c = (cchan_proxy_config_t)CCHAN_PROXY_CONFIG_INIT;
    c.numa_node = -3;
    expect_status(cchan_proxy_create(t->comm, &c, &p), -EINVAL, "numa_node -3");
    expect_status(cchan_proxy_create(NULL, NULL, &p), -EINVAL, "no comm");
    PT_CHECK(p == NULL, "output written on failure");
    /* Defaults; a proxy that never ran, with nothing queued, stops cleanly. */
    PT_OK(cchan_proxy_create(t->comm, NULL, &p));
    PT_OK(cchan_proxy_stop(p, 0));
    PT_OK(cchan_proxy_destroy(p));
    PT_OK(cchan_proxy_destroy(NULL));
    expect_status(cchan_proxy_start(t->proxy), -EBUSY, "second start");
}

static void check_channel_args(pt_t *t) {
    cchan_port_channel_t ch;
    int peer = 1 - t->rank;
    cchan_mem_t *pdst = t->peers[peer];
    expect_status(cchan_port_channel_create(t->proxy, CCHAN_TRANSPORT_HOST, t->sems, -1, 0, pdst,
                                            t->src, &ch),
                  -EINVAL, "peer -1");
    expect_status(
        cchan_port_channel_create(t->proxy, CCHAN_TRANSPORT_HOST, t->sems, 2, 0, pdst, t->src, &ch),
        -EINVAL, "peer 2 of 2");
    expect_status(cchan_port_channel_create(t->proxy, CCHAN_TRANSPORT_HOST, t->sems, peer, 0,
                                            t->dst, t->src, &ch),
                  -EINVAL, "dst of this rank");
    expect_status(cchan_port_channel_create(t->proxy, CCHAN_TRANSPORT_HOST, t->sems, peer, 0, pdst,
                                            pdst, &ch),
                  -EINVAL, "src of the peer");
    expect_status(cchan_port_channel_create(t->proxy, CCHAN_TRANSPORT_DMA, t->sems, peer, 0, pdst,
                                            t->src, &ch),
                  CCHAN_ERR_UNSUPPORTED, "dma on host");
    expect_status(cchan_port_channel_create(t->proxy, (cchan_transport_t)99, t->sems, peer, 0, pdst,
                                            t->src, &ch),
                  -EINVAL, "transport 99");
    PT_CHECK(cchan_port_channel_create(t->proxy, CCHAN_TRANSPORT_HOST, t->sems, peer, 2, pdst,
                                       t->src, &ch) < 0,
             "semaphore 2 of 2");
    expect_status(
        cchan_port_channel_create(NULL, CCHAN_TRANSPORT_HOST, t->sems, peer, 0, pdst, t->src, &ch),
        -EINVAL, "no proxy");
}

/* Device-side calls return a status; the message comes from cchan_comm_check_device. */
static void expect_device(int got, int want, const char *what) {
    PT_CHECK(got == want, "%s: returned %d (%s), expected %d (%s)", what, got, cchan_strerror(got),
             want, cchan_strerror(want));
}

typedef struct bad_ctx {
    const cchan_port_channel_t *ch;
} bad_ctx_t;

/* Refused requests, then one valid transfer. Puts beyond the buffers fail at the call (the
 * handle knows the sizes); the same put pushed as a raw trigger, a trigger for no channel and a
 * trigger of no type reach the proxy, which refuses them, and the next flush reports the drop. */
static void *push_bad_requests(void *arg) {
    const cchan_port_channel_t *ch = ((bad_ctx_t *)arg)->ch;
    expect_device(cchan_port_channel_put_signal_flush(ch, BYTES - 8, 0, 16), CCHAN_ERR_RANGE,
                  "put_signal_flush beyond dst");
    expect_device(cchan_port_channel_put(ch, 0, BYTES - 4, 8), CCHAN_ERR_RANGE, "put beyond src");
    /* Beyond dst, with signal and flush: nothing is copied or signalled, the flush completes and
     * fails with the cause. */
    PT_CHECK(
        cchan_fifo_push(&ch->fifo, cchan_trigger_encode(CCHAN_TRIGGER_PUT | CCHAN_TRIGGER_SIGNAL,
                                                        ch->id, BYTES - 8, 0, 16)) >= 0,
        "push");
    expect_device(cchan_port_channel_flush(ch), CCHAN_ERR_RANGE, "flush after a dropped put");
    PT_CHECK(cchan_fifo_push(&ch->fifo, cchan_trigger_encode(CCHAN_TRIGGER_SIGNAL, 77, 0, 0, 0)) >=
                 0,
             "push");
    PT_CHECK(cchan_fifo_push(&ch->fifo, cchan_trigger_encode(0, ch->id, 0, 0, 8)) >= 0, "push");
    PT_OK(cchan_port_channel_put_signal_flush(ch, 0, 0, VALID));
    return NULL;
}

static void send_bad_requests(pt_t *t, const cchan_port_channel_t *ch) {
    pt_fill(t->src_ptr, BYTES, pt_seed(0, 5, 0));
    bad_ctx_t b = {ch};
    pt_run(1, push_bad_requests, &b, sizeof b);
    int r = cchan_proxy_stop(t->proxy, 10000);
    const char *msg = cchan_last_error();
    printf("rank 0: stop after refused requests: %s\n", msg);
    expect_status(r, CCHAN_ERR_RANGE, "stop after a put out of range");
    PT_CHECK(strstr(msg, "3 request(s) failed") && strstr(msg, "channel 0 (peer 1") &&
                 strstr(msg, "out of range"),
             "message '%s'", msg);
    /* The failures were reported once: a restarted proxy starts clean. */
    PT_OK(cchan_proxy_start(t->proxy));
    PT_OK(cchan_proxy_stop(t->proxy, 10000));
    PT_OK(cchan_proxy_start(t->proxy));
}

static void receive_valid_only(pt_t *t, const cchan_port_channel_t *ch) {
    PT_OK(cchan_port_channel_wait(ch));
    size_t bad = pt_mismatch(t->dst_ptr, VALID, pt_seed(0, 5, 0));
    PT_CHECK(bad == VALID, "byte %zu of the valid transfer differs", bad);
    for (size_t k = VALID; k < BYTES; k++)
        PT_CHECK(t->dst_ptr[k] == PT_POISON, "byte %zu written by a refused put", k);
}

int main(void) {
    pt_t t;
    pt_init(&t, BYTES, 2, 512, 1);
    PT_CHECK(t.nranks == 2, "needs 2 ranks, got %d", t.nranks);
    check_configs(&t);
    cchan_port_channel_t ch;
    pt_channel(&t, 1 - t.rank, 0, &ch);
    cchan_port_channel_t again;
    expect_status(cchan_port_channel_create(t.proxy, CCHAN_TRANSPORT_HOST, t.sems, 1 - t.rank, 0,
                                            t.peers[1 - t.rank], t.src, &again),
                  -EBUSY, "second channel on one semaphore");
    check_channel_args(&t);
    pt_barrier(&t);
    if (t.rank == 0)
        send_bad_requests(&t, &ch);
    else
        receive_valid_only(&t, &ch);
    pt_barrier(&t);
    /* Exactly one signal arrived at rank 1: the refused put_signal's was dropped. */
    if (t.rank == 1)
        PT_CHECK(__atomic_load_n(ch.inbound, __ATOMIC_ACQUIRE) == 1, "%llu signals arrived",
                 (unsigned long long)__atomic_load_n(ch.inbound, __ATOMIC_ACQUIRE));
    pt_fini(&t);
    return 0;
}
