/* LL8 and LL16 packets on the host backend: round trips for every payload size 0..70, a buffer
 * reused over 100 epochs without clearing, and readers that must not complete on stale flags. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cchan/packet.h"

#define MAX_PAYLOAD 70
#define POISON 0x5au
#define EPOCHS 100

typedef enum { LL8, LL16 } proto_t;

static uint64_t packet_bytes(proto_t p, uint64_t n) {
    return p == LL8 ? cchan_ll8_buffer_bytes(n) : cchan_ll16_buffer_bytes(n);
}

static void put(proto_t p, void *pkts, const void *src, uint64_t n, uint32_t flag,
                uint32_t nthreads) {
    for (uint32_t t = 0; t < nthreads; t++) {
        if (p == LL8)
            cchan_ll8_put((cchan_vec8_t *)pkts, src, n, flag, t, nthreads);
        else
            cchan_ll16_put((cchan_vec16_t *)pkts, src, n, flag, t, nthreads);
    }
}

static int read_all(proto_t p, const void *pkts, void *dst, uint64_t n, uint32_t flag,
                    uint32_t nthreads, const cchan_wait_ctl_t *ctl) {
    for (uint32_t t = 0; t < nthreads; t++) {
        int r = p == LL8
                    ? cchan_ll8_read((const cchan_vec8_t *)pkts, dst, n, flag, t, nthreads, ctl)
                    : cchan_ll16_read((const cchan_vec16_t *)pkts, dst, n, flag, t, nthreads, ctl);
        if (r) return r;
    }
    return 0;
}

static void fill(uint8_t *p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed * 131u + i * 7u + 1u);
}

static void check_round_trips(proto_t proto) {
    cchan_wait_ctl_t ctl;
    memset(&ctl, 0, sizeof ctl);
    static const uint32_t splits[] = {1, 3, 8};
    for (uint64_t n = 0; n <= MAX_PAYLOAD; n++) {
        /* One packet buffer per size, zeroed once and then reused without clearing: the epoch flag
         * alone tells new packets from old. Payload starts at an odd offset to exercise unaligned
         * sources and destinations. */
        void *pkts = aligned_alloc(16, packet_bytes(proto, MAX_PAYLOAD) + 16);
        assert_non_null(pkts);
        memset(pkts, 0, packet_bytes(proto, MAX_PAYLOAD) + 16);
        uint8_t src[MAX_PAYLOAD + 8], dst[MAX_PAYLOAD + 8];
        for (uint32_t epoch = 1; epoch <= EPOCHS; epoch++) {
            uint32_t nt = splits[epoch % 3];
            fill(src, sizeof src, epoch);
            memset(dst, POISON, sizeof dst);
            put(proto, pkts, src + 1, n, epoch, nt);
            assert_int_equal(read_all(proto, pkts, dst + 1, n, epoch, nt, &ctl), 0);
            if (memcmp(dst + 1, src + 1, n) != 0)
                fail_msg("size %llu epoch %u: payload differs", (unsigned long long)n, epoch);
            assert_int_equal(dst[0], POISON);
            for (size_t i = n + 1; i < sizeof dst; i++)
                if (dst[i] != POISON)
                    fail_msg("size %llu epoch %u: byte %zu past the payload written",
                             (unsigned long long)n, epoch, i);
        }
        free(pkts);
    }
}

static void test_ll8_round_trips(void **state) {
    (void)state;
    check_round_trips(LL8);
}

static void test_ll16_round_trips(void **state) {
    (void)state;
    check_round_trips(LL16);
}

/* A reader waiting for epoch e + 1 over packets of epoch e must time out, not complete. */
static void check_stale(proto_t proto, uint64_t n) {
    cchan_diag_t diag;
    memset(&diag, 0, sizeof diag);
    cchan_wait_ctl_t ctl = {&diag, 2000000ull /* 2 ms */, 0, 1, 7, 0};
    uint8_t src[MAX_PAYLOAD], dst[MAX_PAYLOAD];
    void *pkts = aligned_alloc(16, packet_bytes(proto, MAX_PAYLOAD));
    assert_non_null(pkts);
    memset(pkts, 0, packet_bytes(proto, MAX_PAYLOAD));
    fill(src, sizeof src, 9);
    put(proto, pkts, src, n, 41, 1);
    assert_int_equal(read_all(proto, pkts, dst, n, 42, 1, &ctl), CCHAN_ERR_DEVICE_TIMEOUT);
    assert_int_equal(diag.state, CCHAN_DIAG_COMPLETE);
    assert_int_equal(diag.kind, CCHAN_WAIT_PACKET);
    assert_int_equal(diag.expected, 42);
    assert_int_equal(diag.observed, 41);
    assert_int_equal(diag.peer, 1);
    assert_int_equal(diag.id, 7);
    free(pkts);
}

static void test_stale_flags_do_not_complete(void **state) {
    (void)state;
    static const uint64_t sizes[] = {1, 4, 5, 8, 9, 70};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        check_stale(LL8, sizes[i]);
        check_stale(LL16, sizes[i]);
    }
}

/* LL16 packets may arrive as two 8-byte writes: a packet whose second half still has the old flag
 * is not complete. */
static void test_ll16_half_packet_does_not_complete(void **state) {
    (void)state;
    cchan_diag_t diag;
    memset(&diag, 0, sizeof diag);
    cchan_wait_ctl_t ctl = {&diag, 2000000ull, 0, 1, 7, 0};
    cchan_vec16_t pkt = {{0, 5, 0, 5}};
    uint8_t src[8] = {1, 2, 3, 4, 5, 6, 7, 8}, dst[8];
    cchan_ll16_put(&pkt, src, 8, 6, 0, 1);
    pkt.w[2] = 0; /* second half not yet delivered: old data, old flag */
    pkt.w[3] = 5;
    assert_int_equal(cchan_ll16_read(&pkt, dst, 8, 6, 0, 1, &ctl), CCHAN_ERR_DEVICE_TIMEOUT);
    assert_int_equal(diag.observed, 5);
    pkt.w[2] = 0x08070605u;
    pkt.w[3] = 6;
    memset(&diag, 0, sizeof diag);
    assert_int_equal(cchan_ll16_read(&pkt, dst, 8, 6, 0, 1, &ctl), 0);
    assert_memory_equal(dst, src, 8);
}

static void test_buffer_sizes(void **state) {
    (void)state;
    assert_int_equal(cchan_ll8_buffer_bytes(0), 0);
    assert_int_equal(cchan_ll8_buffer_bytes(1), 8);
    assert_int_equal(cchan_ll8_buffer_bytes(4), 8);
    assert_int_equal(cchan_ll8_buffer_bytes(5), 16);
    assert_int_equal(cchan_ll16_buffer_bytes(8), 16);
    assert_int_equal(cchan_ll16_buffer_bytes(9), 32);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buffer_sizes),
        cmocka_unit_test(test_ll8_round_trips),
        cmocka_unit_test(test_ll16_round_trips),
        cmocka_unit_test(test_stale_flags_do_not_complete),
        cmocka_unit_test(test_ll16_half_packet_does_not_complete),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
