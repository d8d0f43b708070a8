/* f16 and bf16 conversions against a reference computed in double precision: every 16-bit pattern
 * to f32 and back, and f32 inputs (random bit patterns, exact ties, edges) rounded to nearest even.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cchan/numeric.h"

/* ---------------------------------------------------------------- reference */

/* Value of a binary16 or bfloat16 pattern, from its fields. */
static double ref_value(uint16_t bits, int exp_bits, int man_bits) {
    int bias = (1 << (exp_bits - 1)) - 1;
    int e = (bits >> man_bits) & ((1 << exp_bits) - 1);
    int m = bits & ((1 << man_bits) - 1);
    double sign = (bits >> 15) ? -1.0 : 1.0;
    if (e == (1 << exp_bits) - 1) return m ? NAN : sign * INFINITY;
    if (e == 0) return sign * ldexp((double)m, 1 - bias - man_bits);
    return sign * ldexp((double)((1 << man_bits) | m), e - bias - man_bits);
}

/* Rounds x (finite) to the format with round-to-nearest-even and encodes it. */
static uint16_t ref_round(double x, int exp_bits, int man_bits) {
    int bias = (1 << (exp_bits - 1)) - 1;
    uint16_t sign = signbit(x) ? 0x8000u : 0u;
    double a = fabs(x);
    uint16_t inf = (uint16_t)(sign | (((1u << exp_bits) - 1u) << man_bits));
    if (a == 0) return sign;
    int e;
    frexp(a, &e);
    int lead = e - 1;                     /* a in [2^lead, 2^(lead+1)) */
    if (lead < 1 - bias) lead = 1 - bias; /* subnormals share the smallest normal's quantum */
    double quantum = ldexp(1.0, lead - man_bits);
    double r = rint(a / quantum) * quantum; /* exact scaling; rint rounds to nearest even */
    double max = ldexp((double)((2 << man_bits) - 1), bias - man_bits);
    if (r > max) return inf;
    frexp(r, &e);
    if (r < ldexp(1.0, 1 - bias))
        return (uint16_t)(sign | (uint16_t)(r / ldexp(1.0, 1 - bias - man_bits)));
    uint16_t be = (uint16_t)(e - 1 + bias);
    uint16_t bm = (uint16_t)(ldexp(r, man_bits - (e - 1)) - ldexp(1.0, man_bits));
    return (uint16_t)(sign | (be << man_bits) | bm);
}

static int is_nan16(uint16_t bits, int man_bits) {
    uint16_t exp_mask = (uint16_t)(0x7fffu & ~((1u << man_bits) - 1u));
    return (bits & exp_mask) == exp_mask && (bits & ((1u << man_bits) - 1u));
}

static uint16_t f16(float f) { return cchan_f32_to_f16(f).bits; }
static uint16_t bf16(float f) { return cchan_f32_to_bf16(f).bits; }

/* ---------------------------------------------------------------- 16 -> 32 bits, every pattern */

static void test_f16_every_pattern(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 65536; b++) {
        cchan_f16_t h = {(uint16_t)b};
        float f = cchan_f16_to_f32(h);
        double want = ref_value(h.bits, 5, 10);
        if (isnan(want)) {
            if (!isnan(f)) fail_msg("f16 0x%04x: want NaN, got %a", b, f);
            if (!is_nan16(f16(f), 10)) fail_msg("f16 NaN 0x%04x did not stay NaN", b);
            continue;
        }
        if ((double)f != want || !signbit(f) != !signbit(want))
            fail_msg("f16 0x%04x: got %a, want %a", b, f, want);
        if (f16(f) != h.bits) fail_msg("f16 0x%04x: round trip gives 0x%04x", b, f16(f));
    }
}

static void test_bf16_every_pattern(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 65536; b++) {
        cchan_bf16_t h = {(uint16_t)b};
        float f = cchan_bf16_to_f32(h);
        double want = ref_value(h.bits, 8, 7);
        if (isnan(want)) {
            if (!isnan(f)) fail_msg("bf16 0x%04x: want NaN, got %a", b, f);
            if (!is_nan16(bf16(f), 7)) fail_msg("bf16 NaN 0x%04x did not stay NaN", b);
            continue;
        }
        if ((double)f != want || !signbit(f) != !signbit(want))
            fail_msg("bf16 0x%04x: got %a, want %a", b, f, want);
        if (bf16(f) != h.bits) fail_msg("bf16 0x%04x: round trip gives 0x%04x", b, bf16(f));
    }
}

/* ---------------------------------------------------------------- 32 -> 16 bits, rounding */

static void check_f32(float f) {
    if (isnan(f)) {
        assert_true(is_nan16(f16(f), 10));
        assert_true(is_nan16(bf16(f), 7));
        return;
    }
    uint16_t want16 = ref_round(f, 5, 10), wantb = ref_round(f, 8, 7);
    if (f16(f) != want16)
        fail_msg("f32 %a (0x%08x) -> f16 0x%04x, want 0x%04x", f, cchan_f32_bits(f), f16(f),
                 want16);
    if (bf16(f) != wantb)
        fail_msg("f32 %a (0x%08x) -> bf16 0x%04x, want 0x%04x", f, cchan_f32_bits(f), bf16(f),
                 wantb);
}

static void test_random_f32(void **state) {
    (void)state;
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < 2000000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        check_f32(cchan_f32_from_bits((uint32_t)x));
    }
}

/* Values exactly halfway between neighbours (ties go to the even one), and one f32 step either
 * side of them, for every f16 and bf16 pattern below infinity. */
static void test_ties(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 0x7bffu; b++) {
        float lo = cchan_f16_to_f32((cchan_f16_t){(uint16_t)b});
        float hi = cchan_f16_to_f32((cchan_f16_t){(uint16_t)(b + 1)});
        float mid = (float)(((double)lo + (double)hi) / 2); /* exact: 12 significant bits */
        check_f32(mid);
        check_f32(-mid);
        check_f32(nextafterf(mid, 0));
        check_f32(nextafterf(mid, INFINITY));
    }
    for (uint32_t b = 0; b < 0x7f7fu; b++) {
        float lo = cchan_bf16_to_f32((cchan_bf16_t){(uint16_t)b});
        float hi = cchan_bf16_to_f32((cchan_bf16_t){(uint16_t)(b + 1)});
        float mid = (float)(((double)lo + (double)hi) / 2);
        check_f32(mid);
        check_f32(-mid);
        check_f32(nextafterf(mid, 0));
        check_f32(nextafterf(mid, INFINITY));
    }
}

static void test_edges(void **state) {
    (void)state;
    assert_int_equal(f16(65504.0f), 0x7bff);
    assert_int_equal(f16(65519.99f), 0x7bff);
    assert_int_equal(f16(65520.0f), 0x7c00); /* tie between 65504 (odd) and 65536: infinity */
    assert_int_equal(f16(-INFINITY), 0xfc00);
    assert_int_equal(f16(ldexpf(1, -24)), 0x0001);
    assert_int_equal(f16(ldexpf(1, -25)), 0x0000); /* tie with zero: even */
    assert_int_equal(f16(ldexpf(3, -26)), 0x0001); /* 0.75 ulp */
    assert_int_equal(f16(-0.0f), 0x8000);
    assert_int_equal(bf16(3.3895313892515355e38f), 0x7f7f);
    assert_int_equal(bf16(INFINITY), 0x7f80);
    assert_int_equal(bf16(-0.0f), 0x8000);
    assert_int_equal(bf16(1.00390625f), 0x3f80); /* 1 + 2^-8: tie, to even */
    assert_int_equal(bf16(1.01171875f), 0x3f82); /* 1 + 3 * 2^-8: tie, to even (up) */
    float big = FLT_MAX;
    check_f32(big);
    check_f32(-big);
    check_f32(FLT_MIN);
    check_f32(ldexpf(1, -149));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_every_pattern),
        cmocka_unit_test(test_bf16_every_pattern),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_ties),
        cmocka_unit_test(test_random_f32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
