/* FIFO trigger wire format (impl/fifo_wire.h): encode/decode round trips at every field's limits,
 * fields that never bleed into each other, and the lap-parity rule of an empty ring. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cchan/fifo.h"

static const uint32_t all_types[] = {
    CCHAN_TRIGGER_PUT,
    CCHAN_TRIGGER_SIGNAL,
    CCHAN_TRIGGER_FLUSH,
    CCHAN_TRIGGER_PUT | CCHAN_TRIGGER_SIGNAL,
    CCHAN_TRIGGER_PUT | CCHAN_TRIGGER_FLUSH,
    CCHAN_TRIGGER_SIGNAL | CCHAN_TRIGGER_FLUSH,
    CCHAN_TRIGGER_PUT | CCHAN_TRIGGER_SIGNAL | CCHAN_TRIGGER_FLUSH,
};
#define NTYPES (sizeof all_types / sizeof all_types[0])

#define MAX_BYTES 0x7fffffffull /* the 31-bit size field */

static void assert_roundtrip(uint32_t type, uint32_t channel, uint64_t dst, uint64_t src,
                             uint64_t bytes) {
    cchan_trigger_t t = cchan_trigger_encode(type, channel, dst, src, bytes);
    /* The parity bit belongs to the FIFO, never to the encoder. */
    assert_int_equal(t.word0 & CCHAN_TRIGGER_PARITY_BIT, 0);
    assert_int_equal(t.word1 & CCHAN_TRIGGER_PARITY_BIT, 0);
    cchan_trigger_fields_t f = cchan_trigger_decode(t);
    assert_int_equal(f.type, type);
    assert_int_equal(f.channel, channel);
    assert_int_equal(f.dst_off, dst);
    assert_int_equal(f.src_off, src);
    assert_int_equal(f.bytes, bytes);
    /* The consumer strips the parity bit it finds: decoding must not depend on it. */
    t.word0 |= CCHAN_TRIGGER_PARITY_BIT;
    t.word1 |= CCHAN_TRIGGER_PARITY_BIT;
    cchan_trigger_fields_t g = cchan_trigger_decode(t);
    assert_memory_equal(&f, &g, sizeof f);
}

static void test_layout(void **state) {
    (void)state;
    assert_int_equal(sizeof(cchan_trigger_t), 16);
    assert_int_equal(offsetof(cchan_trigger_t, word0), 0);
    assert_int_equal(offsetof(cchan_trigger_t, word1), 8);
    assert_int_equal(_Alignof(cchan_trigger_t), 16);
    assert_int_equal(CCHAN_FIFO_WIRE_VERSION, 2);
    assert_int_equal(CCHAN_TRIGGER_MAX_CHANNELS, 4096);
    assert_int_equal(CCHAN_TRIGGER_MAX_OFFSET, (1ull << 40) - 1);
    assert_true(CCHAN_TRIGGER_MAX_CHUNK <= MAX_BYTES);
    assert_int_equal(CCHAN_TRIGGER_MAX_CHUNK % 16, 0);
}

static void test_each_type_roundtrips(void **state) {
    (void)state;
    for (size_t i = 0; i < NTYPES; i++) {
        assert_roundtrip(all_types[i], 0, 0, 0, 0);
        assert_roundtrip(all_types[i], 17, 4096, 8192, 64);
    }
}

static void test_limits_roundtrip(void **state) {
    (void)state;
    const uint64_t max_off = CCHAN_TRIGGER_MAX_OFFSET;
    for (size_t i = 0; i < NTYPES; i++) {
        uint32_t ty = all_types[i];
        assert_roundtrip(ty, CCHAN_TRIGGER_MAX_CHANNELS - 1, max_off, max_off, MAX_BYTES);
        assert_roundtrip(ty, CCHAN_TRIGGER_MAX_CHANNELS - 1, 0, 0, 0);
        assert_roundtrip(ty, 0, max_off, 0, 0);
        assert_roundtrip(ty, 0, 0, max_off, 0);
        assert_roundtrip(ty, 0, 0, 0, MAX_BYTES);
        /* Offsets just past 4 GiB exercise the src offset's split across both words. */
        assert_roundtrip(ty, 1, (1ull << 32) + 3, (1ull << 32) + 5, CCHAN_TRIGGER_MAX_CHUNK);
        assert_roundtrip(ty, 2, (1ull << 32) - 1, (1ull << 32) - 1, 1);
    }
}

/* One field at its maximum, the others zero: nothing leaks into a neighbour. */
static void test_fields_are_independent(void **state) {
    (void)state;
    cchan_trigger_fields_t f;
    f = cchan_trigger_decode(cchan_trigger_encode(0, CCHAN_TRIGGER_MAX_CHANNELS - 1, 0, 0, 0));
    assert_int_equal(f.type, 0);
    assert_int_equal(f.dst_off | f.src_off | f.bytes, 0);
    f = cchan_trigger_decode(cchan_trigger_encode(0, 0, CCHAN_TRIGGER_MAX_OFFSET, 0, 0));
    assert_int_equal(f.type | f.channel, 0);
    assert_int_equal(f.src_off | f.bytes, 0);
    f = cchan_trigger_decode(cchan_trigger_encode(0, 0, 0, CCHAN_TRIGGER_MAX_OFFSET, 0));
    assert_int_equal(f.type | f.channel, 0);
    assert_int_equal(f.dst_off | f.bytes, 0);
    f = cchan_trigger_decode(cchan_trigger_encode(0, 0, 0, 0, MAX_BYTES));
    assert_int_equal(f.type | f.channel, 0);
    assert_int_equal(f.dst_off | f.src_off, 0);
    f = cchan_trigger_decode(cchan_trigger_encode(7, 0, 0, 0, 0));
    assert_int_equal(f.type, 7);
    assert_int_equal(f.channel, 0);
    assert_int_equal(f.dst_off | f.src_off | f.bytes, 0);
}

/* xorshift64*: reproducible random fields. */
static uint64_t next_random(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

static void test_random_roundtrip(void **state) {
    (void)state;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 200000; i++) {
        uint32_t ty = all_types[next_random(&s) % NTYPES];
        uint32_t ch = (uint32_t)(next_random(&s) % CCHAN_TRIGGER_MAX_CHANNELS);
        uint64_t dst = next_random(&s) & CCHAN_TRIGGER_MAX_OFFSET;
        uint64_t src = next_random(&s) & CCHAN_TRIGGER_MAX_OFFSET;
        uint64_t bytes = next_random(&s) & MAX_BYTES;
        assert_roundtrip(ty, ch, dst, src, bytes);
    }
}

static void test_lap_parity(void **state) {
    (void)state;
    const uint32_t size = 8;
    /* A zeroed ring is empty: lap 0 expects the parity bit set. */
    assert_int_equal(cchan_fifo_parity(0, size), CCHAN_TRIGGER_PARITY_BIT);
    assert_int_equal(cchan_fifo_parity(size - 1, size), CCHAN_TRIGGER_PARITY_BIT);
    assert_int_equal(cchan_fifo_parity(size, size), 0);
    assert_int_equal(cchan_fifo_parity(2 * size - 1, size), 0);
    assert_int_equal(cchan_fifo_parity(2 * size, size), CCHAN_TRIGGER_PARITY_BIT);
    cchan_trigger_t ring[8];
    memset(ring, 0, sizeof ring);
    cchan_trigger_t out = {0, 0};
    for (uint64_t i = 0; i < size; i++) assert_int_equal(cchan_fifo_peek(ring, size, i, &out), 0);
    /* A lap-0 trigger is seen at index 0 but not at index 8 (lap 1): no stale re-read. */
    ring[0] = cchan_trigger_encode(CCHAN_TRIGGER_SIGNAL, 5, 0, 0, 0);
    ring[0].word0 |= cchan_fifo_parity(0, size);
    /* Half a trigger (word1 still of the previous lap) is not taken: the halves may land apart. */
    assert_int_equal(cchan_fifo_peek(ring, size, 0, &out), 0);
    ring[0].word1 |= cchan_fifo_parity(0, size);
    assert_int_equal(cchan_fifo_peek(ring, size, 0, &out), 1);
    assert_int_equal(out.word0 & CCHAN_TRIGGER_PARITY_BIT, 0);
    assert_int_equal(out.word1 & CCHAN_TRIGGER_PARITY_BIT, 0);
    assert_int_equal(cchan_trigger_decode(out).channel, 5);
    assert_int_equal(cchan_fifo_peek(ring, size, size, &out), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),           cmocka_unit_test(test_each_type_roundtrips),
        cmocka_unit_test(test_limits_roundtrip), cmocka_unit_test(test_fields_are_independent),
        cmocka_unit_test(test_random_roundtrip), cmocka_unit_test(test_lap_parity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
