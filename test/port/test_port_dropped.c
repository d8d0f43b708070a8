/* A request the proxy drops is reported at the next flush of its channel, not only at stop.
 *
 * Rank 0 pushes, as a device caller that skips the put's own range check would, a 3 GiB put past
 * its 64 KiB registration (three 1 GiB triggers, with a signal on the last). The proxy drops them;
 * the next flush of that channel fails with CCHAN_ERR_RANGE, cchan_comm_check_device names the
 * channel and the count, and cchan_proxy_get_error names the request while the proxy still runs.
 * The flush after that succeeds, and the channel still moves data. The same put through
 * cchan_port_channel_put fails at the call. Rank 1 checks that nothing but the valid data and one
 * signal arrived. */
#include "port_test.h"

#define BYTES (64u << 10)
#define VALID 4096u
#define GiB (1ull << 30)

static void expect(int got, int want, const char *what, const char *part) {
    const char *msg = cchan_last_error();
    printf("rank %d: %s: %d (%s): %s\n", pt_rank, what, got, cchan_strerror(got), msg);
    PT_CHECK(got == want, "%s: returned %d (%s), expected %d (%s)", what, got, cchan_strerror(got),
             want, cchan_strerror(want));
    PT_CHECK(part == NULL || strstr(msg, part) != NULL, "%s: message lacks '%s'", what, part);
}

static void sender(pt_t *t, const cchan_port_channel_t *ch) {
    pt_fill(t->src_ptr, BYTES, pt_seed(0, 9, 0));
    PT_OK(cchan_proxy_get_error(t->proxy));
    for (int i = 0; i < 3; i++) {
        uint32_t type = CCHAN_TRIGGER_PUT | (i == 2 ? (uint32_t)CCHAN_TRIGGER_SIGNAL : 0u);
        PT_CHECK(cchan_fifo_push(&ch->fifo, cchan_trigger_encode(type, ch->id, (uint64_t)i * GiB,
                                                                 (uint64_t)i * GiB, GiB)) >= 0,
                 "push");
    }
    expect(cchan_port_channel_flush(ch), CCHAN_ERR_RANGE, "flush after dropped puts", NULL);
    expect(cchan_comm_check_device(t->comm), CCHAN_ERR_RANGE, "check_device",
           "the proxy dropped 3 request(s) of this channel");
    expect(cchan_proxy_get_error(t->proxy), CCHAN_ERR_RANGE, "proxy_get_error", "out of range");
    PT_CHECK(strstr(cchan_last_error(), "3 request(s) failed") != NULL, "count");
    /* Reported once: the next flush has nothing new to report. */
    PT_OK(cchan_port_channel_flush(ch));
    PT_OK(cchan_port_channel_put_signal_flush(ch, 0, 0, VALID));
    /* Judged at the call: nothing reaches the proxy. */
    expect(cchan_port_channel_put(ch, 0, 0, 3 * GiB), CCHAN_ERR_RANGE, "put of 3 GiB", NULL);
    expect(cchan_port_channel_put_signal_flush(ch, BYTES - 8, 0, 16), CCHAN_ERR_RANGE,
           "put_signal_flush past dst", NULL);
    PT_OK(cchan_port_channel_flush(ch));
    int r = cchan_proxy_stop(t->proxy, 10000);
    expect(r, CCHAN_ERR_RANGE, "stop", "3 request(s) failed");
    PT_OK(cchan_proxy_start(t->proxy));
}

static void receiver(pt_t *t, const cchan_port_channel_t *ch) {
    PT_OK(cchan_port_channel_wait(ch));
    size_t bad = pt_mismatch(t->dst_ptr, VALID, pt_seed(0, 9, 0));
    PT_CHECK(bad == VALID, "byte %zu of the valid transfer differs", bad);
    for (size_t k = VALID; k < BYTES; k++)
        PT_CHECK(t->dst_ptr[k] == PT_POISON, "byte %zu written by a dropped put", k);
}

int main(void) {
    pt_t t;
    pt_init(&t, BYTES, 1, 64, 1);
    PT_CHECK(t.nranks == 2, "needs 2 ranks, got %d", t.nranks);
    cchan_port_channel_t ch;
    pt_channel(&t, 1 - t.rank, 0, &ch);
    pt_barrier(&t);
    if (t.rank == 0)
        sender(&t, &ch);
    else
        receiver(&t, &ch);
    pt_barrier(&t);
    if (t.rank == 1)
        PT_CHECK(__atomic_load_n(ch.inbound, __ATOMIC_ACQUIRE) == 1, "%llu signals arrived",
                 (unsigned long long)__atomic_load_n(ch.inbound, __ATOMIC_ACQUIRE));
    pt_fini(&t);
    return 0;
}
