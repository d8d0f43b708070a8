/* Memory-channel synchronization between rank pairs (r, r ^ 1): signal/wait round trips carrying
 * data, poll, relaxed_signal, and LL8/LL16 packet ping-pong with the flag buffers reused every
 * iteration without clearing (a group of threads per rank, each owning its packets). */
#include "mc_common.h"

#define ROUND_TRIPS 10000
#define LL_ITERS 10000
#define LL_THREADS 2
#define LL_BYTES 61 /* odd: the last packet is partial */

static mc_fixture_t fx;
static int partner;

static int leads(void) { return fx.me % 2 == 0; }

/* Round trips whose signal carries a value written just before it (HB ordering). */
static void signal_wait(void) {
    const cchan_memory_channel_t *ch = &fx.ch[partner];
    const uint64_t *mine = (const uint64_t *)(void *)(mc_local(&fx) + mc_inbox(&fx, partner));
    uint64_t theirs = mc_inbox(&fx, fx.me);
    for (uint64_t i = 1; i <= ROUND_TRIPS; i++) {
        if (leads()) {
            cchan_memory_channel_write_u64(ch, theirs, 2 * i);
            cchan_memory_channel_signal(ch);
            MT_OK(cchan_memory_channel_wait(ch));
            MT_CHECK(*mine == 2 * i + 1);
        } else {
            MT_OK(cchan_memory_channel_wait(ch));
            MT_CHECK(*mine == 2 * i);
            cchan_memory_channel_write_u64(ch, theirs, 2 * i + 1);
            cchan_memory_channel_signal(ch);
        }
    }
}

/* Round trips with the expected count in a register (wait_value), then plain waits again: the
 * stored-back count keeps both forms in step. */
static void wait_value_in_step(void) {
    const cchan_memory_channel_t *ch = &fx.ch[partner];
    uint64_t expected = cchan_semaphore_expected(&ch->sem);
    for (int i = 0; i < 1000; i++) {
        if (leads()) {
            cchan_memory_channel_signal(ch);
            MT_OK(cchan_memory_channel_wait_value(ch, ++expected));
        } else {
            MT_OK(cchan_memory_channel_wait_value(ch, ++expected));
            cchan_memory_channel_signal(ch);
        }
    }
    cchan_semaphore_set_expected(&ch->sem, expected);
    for (int i = 0; i < 100; i++) {
        if (leads()) {
            cchan_memory_channel_signal(ch);
            MT_OK(cchan_memory_channel_wait(ch));
        } else {
            MT_OK(cchan_memory_channel_wait(ch));
            cchan_memory_channel_signal(ch);
        }
    }
    MT_CHECK(cchan_semaphore_expected(&ch->sem) == expected + 100);
}

static void poll_until(const cchan_memory_channel_t *ch) {
    for (uint32_t spins = 0; !cchan_memory_channel_poll(ch); spins++) cchan_spin_pause(spins);
}

static void poll_and_relaxed(void) {
    const cchan_memory_channel_t *ch = &fx.ch[partner];
    /* The follower signalled last and waits for the leader now: nothing is pending at the leader
     * (the follower may already see the leader's next signal). */
    if (leads()) MT_CHECK(cchan_memory_channel_poll(ch) == 0);
    for (int i = 0; i < 1000; i++) {
        if (leads()) {
            cchan_memory_channel_signal(ch);
            poll_until(ch);
        } else {
            poll_until(ch);
            cchan_memory_channel_signal(ch);
        }
    }
    for (int i = 0; i < 1000; i++) {
        if (leads()) {
            cchan_memory_channel_relaxed_signal(ch);
            MT_OK(cchan_memory_channel_wait(ch));
        } else {
            MT_OK(cchan_memory_channel_wait(ch));
            cchan_memory_channel_relaxed_signal(ch);
        }
    }
    cchan_memory_channel_flush(ch);
    mc_rank_barrier(&fx);
    MT_CHECK(cchan_memory_channel_poll(ch) == 0);
}

/* ---------------------------------------------------------------- LL ping-pong */

typedef struct ll_run {
    int ll16;
} ll_run_t;

static uint64_t payload_seed(uint64_t iter, int sender) { return iter * 8 + (uint64_t)sender; }

/* Flags must differ from whatever the packet area last held: the LL16 run reuses the LL8 run's
 * area, so its epochs continue after the LL8 ones instead of starting again at 1. */
static uint32_t flag_of(const ll_run_t *r, uint64_t iter) {
    return (uint32_t)(iter + 1 + (r->ll16 ? LL_ITERS : 0));
}

/* Thread tid owns packets tid, tid + LL_THREADS, ...: it writes their source bytes, sends them,
 * receives the same packets of the reply and checks their bytes. No thread waits for another. */
static int owns(uint64_t byte, int ll16, uint32_t tid) {
    return (byte / (ll16 ? CCHAN_LL16_PAYLOAD : CCHAN_LL8_PAYLOAD)) % LL_THREADS == tid;
}

static void ll_send(const ll_run_t *r, uint32_t tid, uint64_t iter) {
    uint8_t *src = mc_local(&fx) + mc_outbox(&fx);
    for (uint64_t b = 0; b < LL_BYTES; b++)
        if (owns(b, r->ll16, tid)) src[b] = mt_byte(payload_seed(iter, fx.me), b);
    uint64_t at = mc_inbox(&fx, fx.me);
    uint32_t flag = flag_of(r, iter);
    if (r->ll16)
        cchan_memory_channel_put_packets_ll16(&fx.ch[partner], at, mc_outbox(&fx), LL_BYTES, flag,
                                              tid, LL_THREADS);
    else
        cchan_memory_channel_put_packets_ll8(&fx.ch[partner], at, mc_outbox(&fx), LL_BYTES, flag,
                                             tid, LL_THREADS);
}

static void ll_receive(const ll_run_t *r, uint32_t tid, uint64_t iter) {
    uint64_t at = mc_inbox(&fx, partner), dst = mc_scratch(&fx);
    uint32_t flag = flag_of(r, iter);
    if (r->ll16)
        MT_OK(cchan_memory_channel_read_packets_ll16(&fx.ch[partner], at, dst, LL_BYTES, flag, tid,
                                                     LL_THREADS));
    else
        MT_OK(cchan_memory_channel_read_packets_ll8(&fx.ch[partner], at, dst, LL_BYTES, flag, tid,
                                                    LL_THREADS));
    const uint8_t *got = mc_local(&fx) + dst;
    for (uint64_t b = 0; b < LL_BYTES; b++)
        if (owns(b, r->ll16, tid)) MT_CHECK(got[b] == mt_byte(payload_seed(iter, partner), b));
}

static void ll_thread(mt_group_t *g, uint32_t tid) {
    const ll_run_t *r = g->arg;
    for (uint64_t iter = 0; iter < LL_ITERS; iter++) {
        if (leads()) {
            ll_send(r, tid, iter);
            ll_receive(r, tid, iter);
        } else {
            ll_receive(r, tid, iter);
            ll_send(r, tid, iter);
        }
    }
}

static void ll_ping_pong(int ll16) {
    ll_run_t r = {ll16};
    mt_group_run(LL_THREADS, ll_thread, &r);
    mc_rank_barrier(&fx);
}

int main(void) {
    mc_setup(&fx, 4096, 60000);
    MT_CHECK(fx.n % 2 == 0);
    partner = fx.me ^ 1;
    double t0 = mt_now_s();
    signal_wait();
    wait_value_in_step();
    poll_and_relaxed();
    ll_ping_pong(0);
    ll_ping_pong(1);
    MT_OK(cchan_comm_check_device(fx.comm));
    mc_teardown(&fx);
    printf("rank %d: mc_pingpong ok (%.1f s)\n", mt_rank, mt_now_s() - t0);
    return 0;
}
