/* cchan switch channel: element-wise reduce and broadcast over one symmetric buffer of every member
 * of a group (switch-mapped I/O: docs/switch_channel.md).
 *
 * Every member registered a buffer `buf` of the same size; the channel also names one local buffer
 * `local` per member (it may be `buf` itself):
 *   reduce_<T>(dst_off, src_off, bytes):     local[dst_off ..+bytes) = sum over members m of
 *                                            buf_m[src_off ..+bytes), element-wise in type T;
 *   broadcast_<T>(dst_off, src_off, bytes):  buf_m[dst_off ..+bytes) = local[src_off ..+bytes) for
 *                                            every member m, this one included.
 *
 * Two paths with the same semantics; the host chose one when it built the channel (`path`):
 *   CCHAN_SWITCH_PATH_PORTABLE   every member's buf is mapped here (member[]); reduce loads 16
 * bytes from each member and sums in registers, broadcast stores 16 bytes into each member. CUDA,
 * HIP and the host backend. CCHAN_SWITCH_PATH_MULTICAST  NVLink SHARP: `mc` is buf's multicast
 * address; the 16-byte body of a reduce is one multimem.ld_reduce per vector (the switch adds), of
 * a broadcast one multimem.st. Only in code compiled for sm_90 or newer; the unaligned head and
 * tail bytes, and code compiled for an older arch, use the member[] pointers, which the multicast
 * path maps as well. Created only on explicit opt-in (docs/switch_channel.md).
 *
 * Types and arithmetic: f32, f16 and bf16 sums are computed in f32 and rounded once per element
 * (f16 and bf16 through numeric.h, round to nearest even; multimem with .acc::f32 does the same in
 * the switch). The order in which members are added may differ between the paths, so float results
 * may differ in the last bit. i32 and u32 sums wrap modulo 2^32.
 *
 * Arguments: offsets are bytes from the buffers' starts, `bytes` a multiple of the element size,
 * offsets multiples of the element size. Bounds are the caller's job (the host checked the
 * buffers). The body moves in 16-byte vectors when local + dst_off and every member's buf + src_off
 * (reduce; the other way round for broadcast) have the same alignment modulo 16; otherwise element
 * by element.
 *
 * Threads: cooperative over (tid, nthreads): every thread of the group calls with its own tid and
 * the same other arguments. Which elements a thread handles depends only on `bytes`, the element
 * size, the addresses modulo 16, tid and nthreads. So a reduce into local[off ..+bytes) followed by
 * a broadcast of that same local range, by the same group, with member offsets of the same
 * alignment modulo 16, has every thread broadcast only elements it reduced itself: the two calls
 * may follow each other in one kernel with no barrier between them.
 *
 * Ordering is the caller's job, as for memory-channel put/get: neither call synchronizes. A reduce
 * may start only when every member's input at src_off is written and visible (for example, after a
 * rank barrier, cchan_rank_barrier, in which each member signalled after writing); a member may
 * overwrite its input, or read what others broadcast into its buf, only after a second barrier once
 * every member's reduce (or broadcast) is done. Stores of a broadcast become visible to a peer when
 * a later signal (a release at system scope) of this thread, or of a thread that synchronized with
 * it, is observed by that peer's wait.
 */
#ifndef CCHAN_SWITCH_CHANNEL_H
#define CCHAN_SWITCH_CHANNEL_H

#include "cchan/arch/arch.h"
#include "cchan/numeric.h"

CCHAN_EXTERN_C_BEGIN

/* Most members one channel can have (the handle holds one pointer per member). */
#define CCHAN_SWITCH_MAX_MEMBERS 8

#define CCHAN_SWITCH_PATH_PORTABLE 1u
#define CCHAN_SWITCH_PATH_MULTICAST 2u

/* 1 when this compilation can issue multimem instructions (CUDA device code for sm_90 or newer). */
#if defined(CCHAN_BACKEND_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CCHAN_SWITCH_HAVE_MULTIMEM 1
#else
#define CCHAN_SWITCH_HAVE_MULTIMEM 0
#endif

typedef struct cchan_switch_channel {
    uint8_t *member[CCHAN_SWITCH_MAX_MEMBERS]; /* member m's buf mapped here; [rank] = own buf */
    uint8_t *mc;        /* buf's multicast address; NULL on the portable path */
    uint8_t *local;     /* this member's source/destination buffer */
    uint64_t buf_bytes; /* size of buf (equal on every member) */
    uint64_t local_bytes;
    uint32_t nmembers;
    uint32_t rank; /* this member's index, 0..nmembers-1 */
    uint32_t path; /* CCHAN_SWITCH_PATH_PORTABLE or CCHAN_SWITCH_PATH_MULTICAST */
    uint32_t reserved;
} cchan_switch_channel_t;

/* ------------------------------------------------------------------ internals (cchani_sw_*) */

/* One 16-byte vector as four 32-bit words. */
CCHAN_DEVICE_INLINE cchan_vec16_t cchani_sw_load16(const uint8_t *p) {
#if defined(CCHAN_BACKEND_CUDA) || defined(CCHAN_BACKEND_HIP)
    uint4 v = *(const uint4 *)(const void *)p;
    cchan_vec16_t r;
    r.w[0] = v.x;
    r.w[1] = v.y;
    r.w[2] = v.z;
    r.w[3] = v.w;
    return r;
#else
    return *(const cchan_vec16_t *)(const void *)p;
#endif
}

CCHAN_DEVICE_INLINE void cchani_sw_store16(uint8_t *p, cchan_vec16_t v) {
#if defined(CCHAN_BACKEND_CUDA) || defined(CCHAN_BACKEND_HIP)
    uint4 r;
    r.x = v.w[0];
    r.y = v.w[1];
    r.z = v.w[2];
    r.w = v.w[3];
    *(uint4 *)(void *)p = r;
#else
    *(cchan_vec16_t *)(void *)p = v;
#endif
}

/* Per-type element access and 16-byte lanes. A type's sum is accumulated in acc_t: f32 for the
 * float types, u32 for the integer types (wrapping). */
CCHAN_DEVICE_INLINE float cchani_sw_get_f32(const uint8_t *p) {
    return *(const float *)(const void *)p;
}
CCHAN_DEVICE_INLINE void cchani_sw_put_f32(uint8_t *p, float v) { *(float *)(void *)p = v; }
CCHAN_DEVICE_INLINE float cchani_sw_get_f16(const uint8_t *p) {
    return cchan_f16_to_f32(*(const cchan_f16_t *)(const void *)p);
}
CCHAN_DEVICE_INLINE void cchani_sw_put_f16(uint8_t *p, float v) {
    *(cchan_f16_t *)(void *)p = cchan_f32_to_f16(v);
}
CCHAN_DEVICE_INLINE float cchani_sw_get_bf16(const uint8_t *p) {
    return cchan_bf16_to_f32(*(const cchan_bf16_t *)(const void *)p);
}
CCHAN_DEVICE_INLINE void cchani_sw_put_bf16(uint8_t *p, float v) {
    *(cchan_bf16_t *)(void *)p = cchan_f32_to_bf16(v);
}
CCHAN_DEVICE_INLINE uint32_t cchani_sw_get_u32(const uint8_t *p) {
    return *(const uint32_t *)(const void *)p;
}
CCHAN_DEVICE_INLINE void cchani_sw_put_u32(uint8_t *p, uint32_t v) { *(uint32_t *)(void *)p = v; }
#define cchani_sw_get_i32 cchani_sw_get_u32
#define cchani_sw_put_i32 cchani_sw_put_u32

/* Lane k of a vector (0 <= k < 16 / element size) as the accumulator type, and back. */
CCHAN_DEVICE_INLINE float cchani_sw_lane_f32(cchan_vec16_t v, int k) {
    return cchan_f32_from_bits(v.w[k]);
}
CCHAN_DEVICE_INLINE float cchani_sw_lane_f16(cchan_vec16_t v, int k) {
    cchan_f16_t h;
    h.bits = (uint16_t)(v.w[k >> 1] >> ((k & 1) * 16));
    return cchan_f16_to_f32(h);
}
CCHAN_DEVICE_INLINE float cchani_sw_lane_bf16(cchan_vec16_t v, int k) {
    return cchan_f32_from_bits((v.w[k >> 1] >> ((k & 1) * 16)) << 16);
}
CCHAN_DEVICE_INLINE uint32_t cchani_sw_lane_u32(cchan_vec16_t v, int k) { return v.w[k]; }
#define cchani_sw_lane_i32 cchani_sw_lane_u32

CCHAN_DEVICE_INLINE void cchani_sw_set_f32(cchan_vec16_t *v, int k, float a) {
    v->w[k] = cchan_f32_bits(a);
}
CCHAN_DEVICE_INLINE void cchani_sw_set_f16(cchan_vec16_t *v, int k, float a) {
    uint32_t h = cchan_f32_to_f16(a).bits, s = (uint32_t)(k & 1) * 16u;
    v->w[k >> 1] = (v->w[k >> 1] & ~(0xffffu << s)) | (h << s);
}
CCHAN_DEVICE_INLINE void cchani_sw_set_bf16(cchan_vec16_t *v, int k, float a) {
    uint32_t h = cchan_f32_to_bf16(a).bits, s = (uint32_t)(k & 1) * 16u;
    v->w[k >> 1] = (v->w[k >> 1] & ~(0xffffu << s)) | (h << s);
}
CCHAN_DEVICE_INLINE void cchani_sw_set_u32(cchan_vec16_t *v, int k, uint32_t a) { v->w[k] = a; }
#define cchani_sw_set_i32 cchani_sw_set_u32

/* Which items of [0, n) thread tid of nthreads takes: on GPUs item tid, then every nthreads-th
 * (neighbouring threads touch neighbouring vectors: coalesced); on CPU threads a contiguous share,
 * so that no two threads write into one cache line. for (i = first; i < end; i += step). */
typedef struct cchani_sw_range {
    uint64_t first, end, step;
} cchani_sw_range_t;

CCHAN_DEVICE_INLINE cchani_sw_range_t cchani_sw_range(uint64_t n, uint32_t tid, uint32_t nthreads) {
    cchani_sw_range_t r;
#if defined(CCHAN_BACKEND_HOST)
    const uint64_t share = (n + nthreads - 1) / nthreads;
    r.first = (uint64_t)tid * share < n ? (uint64_t)tid * share : n;
    r.end = r.first + share < n ? r.first + share : n;
    r.step = 1;
#else
    r.first = tid;
    r.end = n;
    r.step = nthreads;
#endif
    return r;
}

/* The split of a cooperative transfer: [0, head) and [head + 16 * nvec, bytes) element by element,
 * the body in 16-byte vectors. `mis` is the OR of (address ^ other address) over every pair of
 * addresses that must move together; a body exists only when all agree modulo 16. */
typedef struct cchani_sw_split {
    uint64_t head, nvec;
} cchani_sw_split_t;

CCHAN_DEVICE_INLINE cchani_sw_split_t cchani_sw_split(uintptr_t addr, uintptr_t mis,
                                                      uint64_t bytes) {
    cchani_sw_split_t s;
    if ((mis & 15u) != 0) {
        s.head = bytes;
        s.nvec = 0;
        return s;
    }
    s.head = (16u - (addr & 15u)) & 15u;
    if (s.head > bytes) s.head = bytes;
    s.nvec = (bytes - s.head) / 16u;
    return s;
}

CCHAN_DEVICE_INLINE uintptr_t cchani_sw_mis(const cchan_switch_channel_t *ch, uint64_t member_off,
                                            uintptr_t addr) {
    uintptr_t mis = 0;
    for (uint32_t m = 0; m < ch->nmembers; m++)
        mis |= (uintptr_t)(ch->member[m] + member_off) ^ addr;
    return mis;
}

/* ------------------------------------------------------------------ multimem (sm_90+) */
#if CCHAN_SWITCH_HAVE_MULTIMEM
/* The switch loads the 16 bytes at the multicast address from every member and returns their sum.
 */
CCHAN_DEVICE_INLINE cchan_vec16_t cchani_sw_mm_ld_reduce_f32(const uint8_t *mc) {
    float a, b, c, d;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.v4.f32 {%0,%1,%2,%3}, [%4];"
                 : "=f"(a), "=f"(b), "=f"(c), "=f"(d)
                 : "l"(mc)
                 : "memory");
    cchan_vec16_t v;
    v.w[0] = __float_as_uint(a);
    v.w[1] = __float_as_uint(b);
    v.w[2] = __float_as_uint(c);
    v.w[3] = __float_as_uint(d);
    return v;
}
CCHAN_DEVICE_INLINE cchan_vec16_t cchani_sw_mm_ld_reduce_f16(const uint8_t *mc) {
    cchan_vec16_t v;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.f16x2 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "l"(mc)
                 : "memory");
    return v;
}
CCHAN_DEVICE_INLINE cchan_vec16_t cchani_sw_mm_ld_reduce_bf16(const uint8_t *mc) {
    cchan_vec16_t v;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "l"(mc)
                 : "memory");
    return v;
}
/* Integer multimem reductions have no vector form: four 32-bit ones. */
CCHAN_DEVICE_INLINE cchan_vec16_t cchani_sw_mm_ld_reduce_u32(const uint8_t *mc) {
    cchan_vec16_t v;
    for (int k = 0; k < 4; k++)
        asm volatile("multimem.ld_reduce.relaxed.sys.global.add.u32 %0, [%1];"
                     : "=r"(v.w[k])
                     : "l"(mc + 4 * k)
                     : "memory");
    return v;
}
CCHAN_DEVICE_INLINE cchan_vec16_t cchani_sw_mm_ld_reduce_i32(const uint8_t *mc) {
    cchan_vec16_t v;
    for (int k = 0; k < 4; k++)
        asm volatile("multimem.ld_reduce.relaxed.sys.global.add.s32 %0, [%1];"
                     : "=r"(v.w[k])
                     : "l"(mc + 4 * k)
                     : "memory");
    return v;
}
/* Stores 16 bytes into every member's memory behind the multicast address (bits unchanged). */
CCHAN_DEVICE_INLINE void cchani_sw_mm_st16(uint8_t *mc, cchan_vec16_t v) {
    asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1,%2,%3,%4};" ::"l"(mc),
                 "f"(__uint_as_float(v.w[0])), "f"(__uint_as_float(v.w[1])),
                 "f"(__uint_as_float(v.w[2])), "f"(__uint_as_float(v.w[3]))
                 : "memory");
}
#endif

/* ------------------------------------------------------------------ reduce and broadcast */

/* Element-by-element part of a reduce: `count` elements starting `off` bytes into the transfer. */
#define CCHANI_SWITCH_REDUCE_ELEMS(T, acc_t, esize)                                                \
    CCHAN_DEVICE_INLINE void cchani_sw_reduce_elems_##T(                                           \
        const cchan_switch_channel_t *ch, uint8_t *dst, uint64_t src_off, uint64_t count,          \
        uint32_t tid, uint32_t nthreads) {                                                         \
        const cchani_sw_range_t r = cchani_sw_range(count, tid, nthreads);                         \
        for (uint64_t e = r.first; e < r.end; e += r.step) {                                       \
            const uint64_t o = e * (esize);                                                        \
            acc_t acc = cchani_sw_get_##T(ch->member[0] + src_off + o);                            \
            for (uint32_t m = 1; m < ch->nmembers; m++)                                            \
                acc += cchani_sw_get_##T(ch->member[m] + src_off + o);                             \
            cchani_sw_put_##T(dst + o, acc);                                                       \
        }                                                                                          \
    }

/* The 16-byte body of a reduce over member pointers. GPUs: every member's vector is loaded before
 * any is added (a fixed-size array the compiler keeps in registers, so the loads are in flight
 * together); CPUs: element by element within the vector (what a C compiler turns into straight
 * scalar or SIMD code; no per-member branches). */
#if defined(CCHAN_BACKEND_HOST)
#define CCHANI_SWITCH_REDUCE_ONE(T, acc_t, esize)                                                  \
    for (uint32_t k = 0; k < 16u / (esize); k++) {                                                 \
        acc_t acc = cchani_sw_get_##T(ch->member[0] + o + k * (esize));                            \
        for (uint32_t m = 1; m < n; m++)                                                           \
            acc += cchani_sw_get_##T(ch->member[m] + o + k * (esize));                             \
        cchani_sw_put_##T(dst + i * 16u + k * (esize), acc);                                       \
    }
#else
#define CCHANI_SWITCH_REDUCE_ONE(T, acc_t, esize)                                                  \
    cchan_vec16_t in[CCHAN_SWITCH_MAX_MEMBERS];                                                    \
    for (uint32_t m = 0; m < CCHAN_SWITCH_MAX_MEMBERS; m++)                                        \
        if (m < n) in[m] = cchani_sw_load16(ch->member[m] + o);                                    \
    cchan_vec16_t out = in[0];                                                                     \
    for (int k = 0; k < (int)(16 / (esize)); k++) {                                                \
        acc_t acc = cchani_sw_lane_##T(in[0], k);                                                  \
        for (uint32_t m = 1; m < CCHAN_SWITCH_MAX_MEMBERS; m++)                                    \
            if (m < n) acc += cchani_sw_lane_##T(in[m], k);                                        \
        cchani_sw_set_##T(&out, k, acc);                                                           \
    }                                                                                              \
    cchani_sw_store16(dst + i * 16u, out);
#endif

#define CCHANI_SWITCH_REDUCE_VECS(T, acc_t, esize)                                                 \
    CCHAN_DEVICE_INLINE void cchani_sw_reduce_vecs_##T(                                            \
        const cchan_switch_channel_t *ch, uint8_t *dst, uint64_t src_off, uint64_t nvec,           \
        uint32_t tid, uint32_t nthreads) {                                                         \
        const uint32_t n = ch->nmembers;                                                           \
        const cchani_sw_range_t r = cchani_sw_range(nvec, tid, nthreads);                          \
        for (uint64_t i = r.first; i < r.end; i += r.step) {                                       \
            const uint64_t o = src_off + i * 16u;                                                  \
            CCHANI_SWITCH_REDUCE_ONE(T, acc_t, esize)                                              \
        }                                                                                          \
    }

#if CCHAN_SWITCH_HAVE_MULTIMEM
#define CCHANI_SWITCH_REDUCE_BODY(T)                                                               \
    if (ch->path == CCHAN_SWITCH_PATH_MULTICAST && ch->mc) {                                       \
        const uint8_t *mc = ch->mc + src_off + s.head;                                             \
        for (uint64_t i = tid; i < s.nvec; i += nthreads)                                          \
            cchani_sw_store16(dst + s.head + i * 16u, cchani_sw_mm_ld_reduce_##T(mc + i * 16u));   \
    } else {                                                                                       \
        cchani_sw_reduce_vecs_##T(ch, dst + s.head, src_off + s.head, s.nvec, tid, nthreads);      \
    }
#define CCHANI_SWITCH_BROADCAST_BODY                                                               \
    if (ch->path == CCHAN_SWITCH_PATH_MULTICAST && ch->mc) {                                       \
        uint8_t *mc = ch->mc + dst_off + s.head;                                                   \
        for (uint64_t i = tid; i < s.nvec; i += nthreads)                                          \
            cchani_sw_mm_st16(mc + i * 16u, cchani_sw_load16(src + s.head + i * 16u));             \
    } else {                                                                                       \
        cchani_sw_broadcast_vecs(ch, dst_off + s.head, src + s.head, s.nvec, tid, nthreads);       \
    }
#else
#define CCHANI_SWITCH_REDUCE_BODY(T)                                                               \
    cchani_sw_reduce_vecs_##T(ch, dst + s.head, src_off + s.head, s.nvec, tid, nthreads);
#define CCHANI_SWITCH_BROADCAST_BODY                                                               \
    cchani_sw_broadcast_vecs(ch, dst_off + s.head, src + s.head, s.nvec, tid, nthreads);
#endif

#define CCHANI_SWITCH_REDUCE(T, acc_t, esize)                                                      \
    CCHANI_SWITCH_REDUCE_ELEMS(T, acc_t, esize)                                                    \
    CCHANI_SWITCH_REDUCE_VECS(T, acc_t, esize)                                                     \
    CCHAN_DEVICE_INLINE void cchan_switch_channel_reduce_##T(                                      \
        const cchan_switch_channel_t *ch, uint64_t dst_off, uint64_t src_off, uint64_t bytes,      \
        uint32_t tid, uint32_t nthreads) {                                                         \
        uint8_t *dst = ch->local + dst_off;                                                        \
        const cchani_sw_split_t s =                                                                \
            cchani_sw_split((uintptr_t)dst, cchani_sw_mis(ch, src_off, (uintptr_t)dst), bytes);    \
        const uint64_t body = s.nvec * 16u;                                                        \
        cchani_sw_reduce_elems_##T(ch, dst, src_off, s.head / (esize), tid, nthreads);             \
        CCHANI_SWITCH_REDUCE_BODY(T)                                                               \
        cchani_sw_reduce_elems_##T(ch, dst + s.head + body, src_off + s.head + body,               \
                                   (bytes - s.head - body) / (esize), tid, nthreads);              \
    }

/* Broadcast moves bits: one implementation for every type, by element size. */
CCHAN_DEVICE_INLINE void cchani_sw_broadcast_elems(const cchan_switch_channel_t *ch,
                                                   uint64_t dst_off, const uint8_t *src,
                                                   uint64_t count, uint32_t esize, uint32_t tid,
                                                   uint32_t nthreads) {
    const cchani_sw_range_t r = cchani_sw_range(count, tid, nthreads);
    for (uint64_t e = r.first; e < r.end; e += r.step) {
        const uint64_t o = e * esize;
        if (esize == 4) {
            const uint32_t v = *(const uint32_t *)(const void *)(src + o);
            for (uint32_t m = 0; m < ch->nmembers; m++)
                *(uint32_t *)(void *)(ch->member[m] + dst_off + o) = v;
        } else {
            const uint16_t v = *(const uint16_t *)(const void *)(src + o);
            for (uint32_t m = 0; m < ch->nmembers; m++)
                *(uint16_t *)(void *)(ch->member[m] + dst_off + o) = v;
        }
    }
}

CCHAN_DEVICE_INLINE void cchani_sw_broadcast_vecs(const cchan_switch_channel_t *ch,
                                                  uint64_t dst_off, const uint8_t *src,
                                                  uint64_t nvec, uint32_t tid, uint32_t nthreads) {
    const uint32_t n = ch->nmembers;
    const cchani_sw_range_t r = cchani_sw_range(nvec, tid, nthreads);
    for (uint64_t i = r.first; i < r.end; i += r.step) {
        const cchan_vec16_t v = cchani_sw_load16(src + i * 16u);
#if defined(CCHAN_BACKEND_HOST)
        for (uint32_t m = 0; m < n; m++) cchani_sw_store16(ch->member[m] + dst_off + i * 16u, v);
#else
        for (uint32_t m = 0; m < CCHAN_SWITCH_MAX_MEMBERS; m++)
            if (m < n) cchani_sw_store16(ch->member[m] + dst_off + i * 16u, v);
#endif
    }
}

CCHAN_DEVICE_INLINE void cchani_sw_broadcast(const cchan_switch_channel_t *ch, uint64_t dst_off,
                                             uint64_t src_off, uint64_t bytes, uint32_t esize,
                                             uint32_t tid, uint32_t nthreads) {
    const uint8_t *src = ch->local + src_off;
    const cchani_sw_split_t s =
        cchani_sw_split((uintptr_t)src, cchani_sw_mis(ch, dst_off, (uintptr_t)src), bytes);
    const uint64_t body = s.nvec * 16u;
    cchani_sw_broadcast_elems(ch, dst_off, src, s.head / esize, esize, tid, nthreads);
    CCHANI_SWITCH_BROADCAST_BODY
    cchani_sw_broadcast_elems(ch, dst_off + s.head + body, src + s.head + body,
                              (bytes - s.head - body) / esize, esize, tid, nthreads);
}

/* local[dst_off ..+bytes) = sum over members of buf_m[src_off ..+bytes). Cooperative. */
CCHANI_SWITCH_REDUCE(f32, float, 4u)
CCHANI_SWITCH_REDUCE(f16, float, 2u)
CCHANI_SWITCH_REDUCE(bf16, float, 2u)
CCHANI_SWITCH_REDUCE(i32, uint32_t, 4u)
CCHANI_SWITCH_REDUCE(u32, uint32_t, 4u)

/* buf_m[dst_off ..+bytes) = local[src_off ..+bytes) on every member m. Cooperative. */
#define CCHANI_SWITCH_BROADCAST(T, esize)                                                          \
    CCHAN_DEVICE_INLINE void cchan_switch_channel_broadcast_##T(                                   \
        const cchan_switch_channel_t *ch, uint64_t dst_off, uint64_t src_off, uint64_t bytes,      \
        uint32_t tid, uint32_t nthreads) {                                                         \
        cchani_sw_broadcast(ch, dst_off, src_off, bytes, esize, tid, nthreads);                    \
    }
CCHANI_SWITCH_BROADCAST(f32, 4u)
CCHANI_SWITCH_BROADCAST(f16, 2u)
CCHANI_SWITCH_BROADCAST(bf16, 2u)
CCHANI_SWITCH_BROADCAST(i32, 4u)
CCHANI_SWITCH_BROADCAST(u32, 4u)

#undef CCHANI_SWITCH_REDUCE_ELEMS
#undef CCHANI_SWITCH_REDUCE_VECS
#undef CCHANI_SWITCH_REDUCE_ONE
#undef CCHANI_SWITCH_REDUCE_BODY
#undef CCHANI_SWITCH_BROADCAST_BODY
#undef CCHANI_SWITCH_REDUCE
#undef CCHANI_SWITCH_BROADCAST

CCHAN_EXTERN_C_END

#endif /* CCHAN_SWITCH_CHANNEL_H */
