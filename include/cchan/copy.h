/* cchan cooperative copy: the bulk data mover behind memory-channel put/get.
 *
 * cchan_copy(dst, src, bytes, tid, nthreads) copies `bytes` bytes with threads tid = 0..nthreads-1
 * of the calling group each doing a share. Any size and any alignment are correct: when dst and src
 * have the same alignment modulo 16, the body moves in 16-byte vector accesses (four in flight per
 * thread) with byte-wise head and tail; same alignment modulo 4 uses 4-byte words; otherwise bytes.
 * The copy gives no ordering by itself: follow it with a barrier of the group and a signal.
 */
#ifndef CCHAN_COPY_H
#define CCHAN_COPY_H

#include "cchan/arch/arch.h"

CCHAN_EXTERN_C_BEGIN

#if defined(CCHAN_BACKEND_CUDA) || defined(CCHAN_BACKEND_HIP)
typedef uint4 cchan_raw16_t;
#else
typedef cchan_vec16_t cchan_raw16_t;
#endif

#define CCHAN_COPY_UNROLL 4

CCHAN_DEVICE_INLINE void cchan_copy_bytes(uint8_t *d, const uint8_t *s, uint64_t n, uint32_t tid,
                                          uint32_t nthreads) {
    for (uint64_t i = tid; i < n; i += nthreads) d[i] = s[i];
}

CCHAN_DEVICE_INLINE void cchan_copy_words(uint32_t *d, const uint32_t *s, uint64_t n, uint32_t tid,
                                          uint32_t nthreads) {
    for (uint64_t i = tid; i < n; i += nthreads) d[i] = s[i];
}

/* n 16-byte vectors; d and s 16-byte aligned. */
CCHAN_DEVICE_INLINE void cchan_copy_vec16(cchan_raw16_t *d, const cchan_raw16_t *s, uint64_t n,
                                          uint32_t tid, uint32_t nthreads) {
    uint64_t i = tid;
    const uint64_t stride = (uint64_t)nthreads * CCHAN_COPY_UNROLL;
    for (; i + (CCHAN_COPY_UNROLL - 1) * (uint64_t)nthreads < n; i += stride) {
        cchan_raw16_t v[CCHAN_COPY_UNROLL];
#if defined(__CUDACC__) || defined(__HIPCC__)
#pragma unroll
#endif
        for (int u = 0; u < CCHAN_COPY_UNROLL; u++) v[u] = s[i + (uint64_t)u * nthreads];
#if defined(__CUDACC__) || defined(__HIPCC__)
#pragma unroll
#endif
        for (int u = 0; u < CCHAN_COPY_UNROLL; u++) d[i + (uint64_t)u * nthreads] = v[u];
    }
    for (; i < n; i += nthreads) d[i] = s[i];
}

CCHAN_DEVICE_INLINE void cchan_copy(void *dst, const void *src, uint64_t bytes, uint32_t tid,
                                    uint32_t nthreads) {
    uint8_t *d = (uint8_t *)dst;
    const uint8_t *s = (const uint8_t *)src;
    uintptr_t mis = ((uintptr_t)d ^ (uintptr_t)s);
    if ((mis & 15) == 0) {
        uint64_t head = (16 - ((uintptr_t)d & 15)) & 15;
        if (head > bytes) head = bytes;
        uint64_t nvec = (bytes - head) / 16;
        uint64_t body = nvec * 16;
        cchan_copy_bytes(d, s, head, tid, nthreads);
        cchan_copy_vec16((cchan_raw16_t *)(void *)(d + head), (const cchan_raw16_t *)(const void *)(s + head),
                         nvec, tid, nthreads);
        cchan_copy_bytes(d + head + body, s + head + body, bytes - head - body, tid, nthreads);
    } else if ((mis & 3) == 0) {
        uint64_t head = (4 - ((uintptr_t)d & 3)) & 3;
        if (head > bytes) head = bytes;
        uint64_t nw = (bytes - head) / 4;
        cchan_copy_bytes(d, s, head, tid, nthreads);
        cchan_copy_words((uint32_t *)(void *)(d + head), (const uint32_t *)(const void *)(s + head), nw,
                         tid, nthreads);
        cchan_copy_bytes(d + head + nw * 4, s + head + nw * 4, bytes - head - nw * 4, tid, nthreads);
    } else {
        cchan_copy_bytes(d, s, bytes, tid, nthreads);
    }
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_COPY_H */
