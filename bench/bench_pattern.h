/* cchan-bench: the data every benchmark moves, and how the receiver checks it.
 *
 * Byte i of a buffer filled with seed s is byte (i % 4) of cb_pattern_word(s, i / 4): a hash, so
 * the data is random-looking (never zeros, never a repeating pattern a wrong offset could satisfy),
 * and any rank can recompute what it should have received without a second transfer. Destinations
 * are "poisoned" with another seed before each checked transfer, so an unwritten byte is caught.
 * The same inline code runs in CUDA kernels and in host C.
 */
#ifndef CCHAN_BENCH_PATTERN_H
#define CCHAN_BENCH_PATTERN_H

#include <stdint.h>

#if defined(__CUDACC__)
#define CB_HD static __host__ __device__ __forceinline__
#else
#define CB_HD static inline
#endif

#define CB_POISON_SEED 0x5eedbad1u

CB_HD uint32_t cb_pattern_word(uint32_t seed, uint64_t word) {
    uint64_t x = word * 0x9e3779b97f4a7c15ull + (((uint64_t)seed << 32) | seed);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

CB_HD uint8_t cb_pattern_byte(uint32_t seed, uint64_t i) {
    return (uint8_t)(cb_pattern_word(seed, i / 4) >> (8 * (i % 4)));
}

#endif /* CCHAN_BENCH_PATTERN_H */
