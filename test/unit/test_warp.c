/* The portability layer's warp width (include/cchan/arch/warp.h) on the host backend: lane and
 * warp of a thread, lane masks of the width, shuffle groups, and the ballot-and-count scan the MoE
 * kernels run per warp, on simulated warps (a ballot is the OR of every lane's vote). Built twice:
 * here at the default width and in test/wave64 at CCHAN_HOST_WARP_SIZE=64, where a mask or shift
 * sized for 32 lanes loses lanes 32..63. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cchan/device.h"

#ifndef WARP_EXPECTED
#define WARP_EXPECTED 32
#endif

static void test_width(void **state) {
    (void)state;
    assert_int_equal(CCHAN_WARP_SIZE, WARP_EXPECTED);
    assert_int_equal(sizeof(cchan_lane_mask_t) * 8, CCHAN_WARP_SIZE);
    assert_int_equal(cchan_lane_popc(CCHAN_LANE_MASK_ALL), CCHAN_WARP_SIZE);
    /* the host backend's warp is its one thread: lane 0 */
    assert_true(cchan_warp_ballot(1) == 1u && cchan_warp_ballot(0) == 0u);
    assert_true(cchan_warp_shfl_xor_f32(CCHAN_LANE_MASK_ALL, 2.5f, 1, CCHAN_WARP_SIZE) == 2.5f);
}

static void test_lane_and_warp(void **state) {
    (void)state;
    for (uint32_t tid = 0; tid < 1024; tid++) {
        uint32_t lane = cchan_lane_id(tid), warp = cchan_warp_id(tid);
        assert_true(lane < CCHAN_WARP_SIZE);
        assert_int_equal(warp * CCHAN_WARP_SIZE + lane, tid);
    }
}

static void test_lanes_below(void **state) {
    (void)state;
    for (uint32_t lane = 0; lane < CCHAN_WARP_SIZE; lane++) {
        cchan_lane_mask_t m = cchan_lanes_below(lane);
        assert_int_equal(cchan_lane_popc(m), lane);
        for (uint32_t l = 0; l < CCHAN_WARP_SIZE; l++)
            if (((m >> l) & 1u) != (l < lane))
                fail_msg("lanes_below(%u) has lane %u wrong", lane, l);
    }
}

/* Groups of every power-of-two width partition the warp, and each lane is in its own group. */
static void test_group_masks(void **state) {
    (void)state;
    for (uint32_t width = 1; width <= CCHAN_WARP_SIZE; width *= 2) {
        cchan_lane_mask_t seen = 0;
        for (uint32_t lane = 0; lane < CCHAN_WARP_SIZE; lane++) {
            cchan_lane_mask_t g = cchan_lane_group_mask(lane, width);
            assert_int_equal(cchan_lane_popc(g), width);
            assert_true((g >> lane) & 1u);
            if (lane % width == 0) {
                assert_true((seen & g) == 0);
                seen |= g;
            } else {
                assert_true(g == cchan_lane_group_mask(lane - 1, width));
            }
        }
        assert_true(seen == CCHAN_LANE_MASK_ALL);
    }
}

/* The per-warp scan of moe_block_scan_bits: a lane's exclusive prefix is the voters below it in
 * its warp's ballot plus the voters of the warps before it. Every thread count that is a multiple
 * of the width, random and all-ones votes (all-ones puts a voter in lane CCHAN_WARP_SIZE - 1). */
static void test_ballot_scan(void **state) {
    (void)state;
    static const uint32_t counts[] = {CCHAN_WARP_SIZE, 2 * CCHAN_WARP_SIZE, 256, 1024};
    uint32_t vote[1024], ref[1024];
    cchan_lane_mask_t bal[1024 / CCHAN_WARP_SIZE];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (int pattern = 0; pattern < 3; pattern++) {
            const uint32_t n = counts[c];
            uint32_t run = 0;
            for (uint32_t t = 0; t < n; t++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                vote[t] = pattern == 0 ? 1u : pattern == 1 ? (uint32_t)(x >> 40) & 1u : t % 3 == 2;
                ref[t] = run;
                run += vote[t];
            }
            memset(bal, 0, sizeof bal);
            for (uint32_t t = 0; t < n; t++)
                bal[cchan_warp_id(t)] |= (cchan_lane_mask_t)vote[t] << cchan_lane_id(t);
            for (uint32_t t = 0; t < n; t++) {
                uint32_t before = 0;
                for (uint32_t w = 0; w < cchan_warp_id(t); w++) before += cchan_lane_popc(bal[w]);
                uint32_t pre =
                    cchan_lane_popc(bal[cchan_warp_id(t)] & cchan_lanes_below(cchan_lane_id(t)));
                if (before + pre != ref[t])
                    fail_msg("%u threads, pattern %d: thread %u counts %u voters before it, not %u",
                             n, pattern, t, before + pre, ref[t]);
            }
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_width),       cmocka_unit_test(test_lane_and_warp),
        cmocka_unit_test(test_lanes_below), cmocka_unit_test(test_group_masks),
        cmocka_unit_test(test_ballot_scan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
