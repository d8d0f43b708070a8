/* cchan element types for reductions: f32, f16, bf16 (16-bit types stored as uint16_t bit patterns
 * so the same structs work in C, C++, CUDA and HIP), with round-to-nearest-even conversions.
 * Sums are computed in f32 and rounded once per output element.
 */
#ifndef CCHAN_NUMERIC_H
#define CCHAN_NUMERIC_H

#include "cchan/arch/arch.h"

CCHAN_EXTERN_C_BEGIN

typedef struct cchan_f16 {
    uint16_t bits;
} cchan_f16_t;
typedef struct cchan_bf16 {
    uint16_t bits;
} cchan_bf16_t;
CCHAN_STATIC_ASSERT(sizeof(cchan_f16_t) == 2 && sizeof(cchan_bf16_t) == 2, "16-bit types");

CCHAN_HOST_DEVICE_INLINE uint32_t cchan_f32_bits(float f) {
    union {
        float f;
        uint32_t u;
    } c;
    c.f = f;
    return c.u;
}
CCHAN_HOST_DEVICE_INLINE float cchan_f32_from_bits(uint32_t u) {
    union {
        float f;
        uint32_t u;
    } c;
    c.u = u;
    return c.f;
}

CCHAN_HOST_DEVICE_INLINE float cchan_bf16_to_f32(cchan_bf16_t h) {
    return cchan_f32_from_bits((uint32_t)h.bits << 16);
}
CCHAN_HOST_DEVICE_INLINE cchan_bf16_t cchan_f32_to_bf16(float f) {
    uint32_t u = cchan_f32_bits(f);
    cchan_bf16_t r;
    if ((u & 0x7fffffffu) > 0x7f800000u) { /* NaN stays a quiet NaN */
        r.bits = (uint16_t)((u >> 16) | 0x40u);
        return r;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    r.bits = (uint16_t)(u >> 16);
    return r;
}

CCHAN_HOST_DEVICE_INLINE float cchan_f16_to_f32(cchan_f16_t h) {
    uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16;
    uint32_t exp = (h.bits >> 10) & 0x1fu;
    uint32_t man = h.bits & 0x3ffu;
    if (exp == 0x1fu) return cchan_f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return cchan_f32_from_bits(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return cchan_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

CCHAN_HOST_DEVICE_INLINE cchan_f16_t cchan_f32_to_f16(float f) {
    uint32_t u = cchan_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    cchan_f16_t r;
    if (a > 0x7f800000u) { /* NaN */
        r.bits = (uint16_t)(sign | 0x7e00u);
        return r;
    }
    if (a >= 0x477ff000u) { /* rounds to >= 65520: infinity */
        r.bits = (uint16_t)(sign | 0x7c00u);
        return r;
    }
    if (a < 0x38800000u) { /* below the smallest normal (2^-14): subnormal or zero */
        /* half subnormal unit is 2^-24; round a to nearest multiple, ties to even */
        uint32_t exp = a >> 23;
        if (exp < 102) { /* < 2^-25: rounds to zero */
            r.bits = (uint16_t)sign;
            return r;
        }
        uint32_t man = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exp; /* 14..24 */
        uint32_t q = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        r.bits = (uint16_t)(sign | q);
        return r;
    }
    uint32_t v = a - 0x38000000u; /* rebias exponent 127 -> 15 */
    v += 0xfffu + ((v >> 13) & 1u);
    r.bits = (uint16_t)(sign | (v >> 13));
    return r;
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_NUMERIC_H */
