/* cchan_copy on the host backend: every small size and alignment, large sizes, any thread split;
 * bytes outside the destination range must stay untouched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cchan/copy.h"

#define POISON 0xa5u
#define GUARD 64 /* poisoned bytes kept after the largest destination range */

/* aligned_alloc wants a multiple of the alignment. */
static uint8_t *alloc64(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64); }

static void fill_random(uint8_t *p, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)(x >> 24);
    }
}

static uint8_t poison[(8u << 20) + 256];

/* Copies `size` bytes from src + soff to dst + doff, as `nthreads` cooperating threads run one
 * after the other (each thread's share does not depend on the others), then checks every byte of
 * the destination buffer. */
static void check_copy(uint8_t *dst, const uint8_t *src, size_t cap, size_t size, size_t doff,
                       size_t soff, uint32_t nthreads) {
    memset(dst, POISON, cap);
    for (uint32_t t = 0; t < nthreads; t++) cchan_copy(dst + doff, src + soff, size, t, nthreads);
    if (memcmp(dst + doff, src + soff, size) != 0)
        fail_msg("copy of %zu bytes (dst+%zu, src+%zu, %u threads) differs", size, doff, soff,
                 nthreads);
    if (memcmp(dst, poison, doff) != 0 || memcmp(dst + doff + size, poison, cap - doff - size) != 0)
        fail_msg("copy of %zu bytes (dst+%zu, src+%zu, %u threads) wrote outside its range", size,
                 doff, soff, nthreads);
}

static void test_small_sizes_all_offsets(void **state) {
    (void)state;
    const size_t cap = 300 + 17 + GUARD;
    uint8_t *src = alloc64(cap), *dst = alloc64(cap);
    assert_non_null(src);
    assert_non_null(dst);
    fill_random(src, cap, 1);
    for (size_t size = 0; size <= 300; size++)
        for (size_t doff = 0; doff <= 17; doff++)
            for (size_t soff = 0; soff <= 17; soff++)
                check_copy(dst, src, cap, size, doff, soff,
                           1 + (uint32_t)((size + doff + soff) % 3));
    free(src);
    free(dst);
}

static void test_small_sizes_many_threads(void **state) {
    (void)state;
    const size_t cap = 300 + 17 + GUARD;
    uint8_t *src = alloc64(cap), *dst = alloc64(cap);
    assert_non_null(src);
    assert_non_null(dst);
    fill_random(src, cap, 2);
    static const uint32_t splits[] = {2, 4, 5, 16, 64, 300, 1024};
    for (size_t size = 0; size <= 300; size += 7)
        for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++) {
            check_copy(dst, src, cap, size, 0, 0, splits[s]);
            check_copy(dst, src, cap, size, 3, 3, splits[s]);
            check_copy(dst, src, cap, size, 4, 8, splits[s]);
            check_copy(dst, src, cap, size, 5, 2, splits[s]);
        }
    free(src);
    free(dst);
}

static void test_large_sizes(void **state) {
    (void)state;
    static const size_t sizes[] = {4096, 65536 + 7, (1u << 20) + 13, (8u << 20) + 5};
    static const size_t offs[][2] = {{0, 0}, {3, 3}, {1, 2}, {4, 8}, {15, 1}, {16, 0}};
    static const uint32_t splits[] = {1, 4, 7, 256};
    const size_t cap = (8u << 20) + 5 + 16 + GUARD;
    uint8_t *src = alloc64(cap), *dst = alloc64(cap);
    assert_non_null(src);
    assert_non_null(dst);
    fill_random(src, cap, 3);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++)
            for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++)
                check_copy(dst, src, sizes[i] + 16 + GUARD, sizes[i], offs[o][0], offs[o][1],
                           splits[s]);
    free(src);
    free(dst);
}

int main(void) {
    memset(poison, POISON, sizeof poison);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_sizes_all_offsets),
        cmocka_unit_test(test_small_sizes_many_threads),
        cmocka_unit_test(test_large_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
