/* A wait that is never satisfied ends at the deadline with CCHAN_ERR_DEVICE_TIMEOUT, and
 * cchan_comm_check_device names what was awaited: rank 0 waits for a signal rank 1 never sends;
 * rank 1 waits for LL packets rank 0 never sends. */
#include "mc_common.h"

#define TIMEOUT_MS 300

static mc_fixture_t fx;

static void expect_message(const char *part) {
    if (!strstr(cchan_last_error(), part)) {
        fprintf(stderr, "rank %d: message '%s' lacks '%s'\n", fx.me, cchan_last_error(), part);
        exit(1);
    }
}

int main(void) {
    mc_setup(&fx, 4096, TIMEOUT_MS);
    MT_CHECK(fx.n == 2);
    int peer = 1 - fx.me;
    const cchan_memory_channel_t *ch = &fx.ch[peer];
    MT_OK(cchan_comm_check_device(fx.comm));
    double t0 = mt_now_s();
    if (fx.me == 0) {
        MT_CHECK(cchan_memory_channel_wait(ch) == CCHAN_ERR_DEVICE_TIMEOUT);
        MT_CHECK(mt_now_s() - t0 >= TIMEOUT_MS / 1000.0);
        MT_CHECK(cchan_comm_check_device(fx.comm) == CCHAN_ERR_DEVICE_TIMEOUT);
        expect_message("rank 0 timed out after ");
        expect_message("waiting for semaphore ");
        expect_message("from peer 1: expected 1, observed 0");
    } else {
        MT_CHECK(cchan_memory_channel_read_packets_ll16(ch, 0, mc_scratch(&fx), 100, 7, 0, 1) ==
                 CCHAN_ERR_DEVICE_TIMEOUT);
        MT_CHECK(mt_now_s() - t0 >= TIMEOUT_MS / 1000.0);
        MT_CHECK(cchan_comm_check_device(fx.comm) == CCHAN_ERR_DEVICE_TIMEOUT);
        expect_message("rank 1 timed out after ");
        expect_message("waiting for LL packets from peer 0");
        expect_message("expected flag 7, observed flag 0");
    }
    printf("rank %d: %s\n", fx.me, cchan_last_error());
    mc_teardown(&fx);
    return 0;
}
