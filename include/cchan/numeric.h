/* cchan element types for reductions: f32, f16, bf16 (16-bit types stored as uint16_t bit patterns
 * so the same structs work in C, C++, CUDA and HIP), with round-to-nearest-even conversions.
 * Sums are computed in f32 and rounded once per output element.
 */
#ifndef CCHAN_NUMERIC_H
#define CCHAN_NUMERIC_H

#include "cchan/arch/arch.h"

#if defined(CCHAN_BACKEND_CUDA) && CCHAN_DEVICE_PASS
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

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

/* Element types of a packed 32-bit word: one f32, or two f16 or bf16 (the lower address first). */
enum cchan_elem_type { CCHAN_ELEM_F32 = 0, CCHAN_ELEM_F16 = 1, CCHAN_ELEM_BF16 = 2 };

/* The elements of word w as f32: *lo, and *hi (0 for an f32 word). The GPU pass of CUDA uses the
 * hardware conversions, every other pass the functions above (the same values). */
CCHAN_HOST_DEVICE_INLINE void cchan_unpack_w32(uint32_t w, int type, float *lo, float *hi) {
#if defined(CCHAN_BACKEND_CUDA) && CCHAN_DEVICE_PASS
    if (type == CCHAN_ELEM_F32) {
        *lo = __uint_as_float(w);
        *hi = 0.0f;
    } else if (type == CCHAN_ELEM_F16) {
        __half2 h = *(const __half2 *)(const void *)&w;
        float2 f = __half22float2(h);
        *lo = f.x;
        *hi = f.y;
    } else {
        __nv_bfloat162 h = *(const __nv_bfloat162 *)(const void *)&w;
        float2 f = __bfloat1622float2(h);
        *lo = f.x;
        *hi = f.y;
    }
#else
    if (type == CCHAN_ELEM_F32) {
        *lo = cchan_f32_from_bits(w);
        *hi = 0.0f;
    } else if (type == CCHAN_ELEM_F16) {
        cchan_f16_t a = {(uint16_t)w}, b = {(uint16_t)(w >> 16)};
        *lo = cchan_f16_to_f32(a);
        *hi = cchan_f16_to_f32(b);
    } else {
        cchan_bf16_t a = {(uint16_t)w}, b = {(uint16_t)(w >> 16)};
        *lo = cchan_bf16_to_f32(a);
        *hi = cchan_bf16_to_f32(b);
    }
#endif
}

/* lo and hi rounded (to nearest even) into one word of `type` (hi ignored for f32). */
CCHAN_HOST_DEVICE_INLINE uint32_t cchan_pack_w32(float lo, float hi, int type) {
#if defined(CCHAN_BACKEND_CUDA) && CCHAN_DEVICE_PASS
    if (type == CCHAN_ELEM_F32) return __float_as_uint(lo);
    uint32_t w;
    if (type == CCHAN_ELEM_F16) {
        __half2 h = __floats2half2_rn(lo, hi);
        w = *(const uint32_t *)(const void *)&h;
    } else {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        w = *(const uint32_t *)(const void *)&h;
    }
    return w;
#else
    if (type == CCHAN_ELEM_F32) return cchan_f32_bits(lo);
    if (type == CCHAN_ELEM_F16)
        return (uint32_t)cchan_f32_to_f16(lo).bits | ((uint32_t)cchan_f32_to_f16(hi).bits << 16);
    return (uint32_t)cchan_f32_to_bf16(lo).bits | ((uint32_t)cchan_f32_to_bf16(hi).bits << 16);
#endif
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_NUMERIC_H */
