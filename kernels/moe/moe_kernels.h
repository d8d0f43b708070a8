/* cchan MoE kernels: the bodies of the dispatch and combine kernels as inline functions over
 * (block, nblocks, tid, nthreads), so that the same code runs on a GPU (moe_cuda.cu wraps each in a
 * __global__ function, all phases of an operation in one launch) and on CPU threads (cchan_moe.c
 * runs the phases one after the other, a "block" being one thread). Internal to
 * kernels/moe; the layout is in moe_wire.h.
 *
 * Synchronization is the per-(expert, rank) counters of moe_wire.h and nothing else: a sender
 * writes its data with plain stores into the peer's buffer (cchan memory-channel style, NVLink or
 * shared memory), then releases the counter at system scope; the receiver's cchan wait on the
 * counter acquires the data. Within a rank, blocks that sent tokens to rank r count them in
 * `sent[r]` (device memory) after a system-scope fence; the block that signals r waits for the
 * count.
 */
#ifndef CCHAN_MOE_KERNELS_H
#define CCHAN_MOE_KERNELS_H

#include "cchan/copy.h"
#include "cchan/numeric.h"
#include "cchan/wait.h"
#include "moe_wire.h"

CCHAN_EXTERN_C_BEGIN

/* Device view of a group: sizes, the layout, and the buffers. Passed by value to kernels. */
typedef struct moe_dev {
    int32_t rank, nranks, num_experts, local_experts, hidden, top_k, max_tokens;
    int32_t ht;        /* 1: high-throughput layout */
    int32_t ll_reduce; /* LL combine: the expert side sums a token's local experts (moe_wire.h) */
    uint32_t hdr_bytes, slot_bytes;
    uint64_t parity_bytes; /* one parity of the layout */
    uint64_t off_ack, off_dcnt, off_ccnt, off_cnts, off_disp, off_route, off_comb; /* in a parity */
    uint64_t off_wcnt, off_cw;    /* LL reduced combine: weight counters [N], weights [N][B][K] */
    int32_t ht_senders;           /* HT: dispatch blocks that send (the others receive) */
    int32_t ht_csenders;          /* HT: combine blocks that send */
    int32_t ht_csub;              /* HT combine: progress flags per chunk */
    int32_t ht_chunks;            /* HT: chunks per rank's token range */
    uint64_t off_hflag;           /* HT: dispatch flags, descriptors, combine flags [N][C] */
    uint8_t *peer[MOE_MAX_RANKS]; /* every rank's buffer mapped here; peer[rank] is ours */
    uint32_t *seq;                /* operation counter (epoch), starts at 1 */
    uint32_t *done;               /* blocks finished in the current operation */
    uint64_t *sent; /* [N] messages of this operation whose stores are fenced, per destination */
    int32_t *err;   /* [4] first routing error: code, token, k, value (host-readable) */
    cchan_wait_ctl_t ctl;
} moe_dev_t;

/* One operation's arguments. */
typedef struct moe_op {
    int32_t num_tokens;
    int32_t fp8;             /* dispatch: quantize to e4m3 with per-128-channel scales */
    int32_t phases;          /* MOE_PHASE_SEND | MOE_PHASE_RECV */
    const uint16_t *x;       /* dispatch: [T][H] bf16; combine: expert outputs (layout per mode) */
    const int32_t *topk;     /* [T][K] global expert ids, -1 = none (the handle's copy) */
    const float *weights;    /* combine: [T][K], NULL = 1 */
    void *out;               /* dispatch: tokens out; combine: [T][H] bf16 */
    float *out_scales;       /* dispatch fp8: scales out */
    int32_t *out_counts;     /* dispatch: [L] tokens per local expert (may be NULL) */
    int32_t *h_counts;       /* handle: [L] tokens per local expert (LL), [N] rows per rank (HT) */
    uint32_t *h_src;         /* handle LL: [L][N·B] rank << 24 | t·K + k of each output row */
    int32_t *h_tok;          /* handle LL: [N][B] token (at its rank) of message a from rank s */
    int32_t *h_inv;          /* handle LL: [N][B][K] output row of (rank s, token t, k), -1: none */
    int32_t *h_nmsg;         /* handle LL: [N] messages received from each rank */
    uint32_t *h_epoch;       /* handle: the epoch of its staged operation */
    uint16_t *h_slot;        /* handle HT: [T][N] token t's index among my tokens for rank r */
    uint32_t *h_mask;        /* handle HT: [T] ranks token t goes to */
    int32_t *h_mat;          /* handle HT: [N][N] tokens rank s sends rank r */
    int32_t *h_base;         /* handle HT: [N] first row of my tokens at rank r */
    uint64_t *h_chunk;       /* handle HT: [N][C] rows of rank s's chunk c: lo | n << 32 */
    int32_t *out_route;      /* HT dispatch: [rows][K] local expert ids; NULL: not wanted */
    float *out_weights;      /* HT dispatch: [rows][K]; NULL: not wanted */
    const float *in_weights; /* HT dispatch: the tokens' router weights, may be NULL */
    int32_t ht_rows;         /* HT: rows this rank receives */
} moe_op_t;

#define MOE_PHASE_SEND 1
#define MOE_PHASE_RECV 2

/* Errors found in routing on the device (moe_dev_t.err[0]). */
#define MOE_ERR_EXPERT_RANGE 1
#define MOE_ERR_EXPERT_DUP 2
#define MOE_ERR_COUNT 3

/* Per-block context: who runs, and its shared memory carved by moe_smem_layout. */
typedef struct moe_block {
    uint32_t block, nblocks, tid, nthreads;
    int32_t *topk;   /* [T][K] sanitized */
    uint32_t *mask;  /* [T] destination ranks of each token */
    uint16_t *slot;  /* [T][N] slot of token t at rank r (exclusive prefix of mask bits) */
    uint32_t *total; /* [N] tokens to rank r; then scratch */
    uint32_t *wsum;  /* [32][N] scan scratch */
    int32_t *hist;   /* [L] */
    uint32_t *list;  /* [max(B, T)] receive list */
    int32_t *misc;   /* [4 * MOE_MAX_RANKS + MOE_MAX_TOPK] */
} moe_block_t;

/* Shared memory of one block; B (max tokens per rank) bounds the token count of every phase. */
CCHAN_HOST_DEVICE_INLINE uint64_t moe_smem_bytes(int K, int N, int L, int B) {
    uint64_t n = (uint64_t)B * K * 4 + (uint64_t)B * 4 * 2 + (uint64_t)N * 4 + 32u * N * 4 +
                 (uint64_t)L * 4 + (4 * MOE_MAX_RANKS + MOE_MAX_TOPK) * 4 + (uint64_t)B * N * 2;
    return (n + 15) / 16 * 16;
}

CCHAN_DEVICE_INLINE void moe_smem_layout(moe_block_t *b, uint8_t *smem, int K, int N, int L,
                                         int B) {
    uint8_t *p = smem;
    b->topk = (int32_t *)(void *)p;
    p += (uint64_t)B * K * 4;
    b->mask = (uint32_t *)(void *)p;
    p += (uint64_t)B * 4;
    b->list = (uint32_t *)(void *)p;
    p += (uint64_t)B * 4;
    b->total = (uint32_t *)(void *)p;
    p += (uint64_t)N * 4;
    b->wsum = (uint32_t *)(void *)p;
    p += 32u * N * 4;
    b->hist = (int32_t *)(void *)p;
    p += (uint64_t)L * 4;
    b->misc = (int32_t *)(void *)p;
    p += (4 * MOE_MAX_RANKS + MOE_MAX_TOPK) * 4;
    b->slot = (uint16_t *)(void *)p;
}

/* ------------------------------------------------------------------ small portable helpers */

#define MOE_UNROLL 4 /* 16-byte loads in flight per thread in the copy loops */

#if defined(CCHAN_BACKEND_HOST)
CCHAN_DEVICE_INLINE void moe_smem_add(int32_t *p, int32_t v) { *p += v; }
#else
CCHAN_DEVICE_INLINE void moe_smem_add(int32_t *p, int32_t v) { atomicAdd(p, v); }
#endif

CCHAN_DEVICE_INLINE void moe_record_error(const moe_dev_t *d, int32_t code, int32_t token,
                                          int32_t k, int32_t value) {
#if defined(CCHAN_BACKEND_HOST)
    if (d->err[0] != 0) return;
    d->err[0] = code;
#else
    if (atomicCAS(&d->err[0], 0, code) != 0) return;
#endif
    d->err[1] = token;
    d->err[2] = k;
    d->err[3] = value;
}

/* FP8 e4m3 (bias 7, max 448, no infinities) with round-to-nearest-even and saturation to +-448,
 * as the PTX cvt.rn.satfinite.e4m3x2.f32 instruction converts. */
CCHAN_HOST_DEVICE_INLINE uint8_t moe_f32_to_e4m3(float f) {
    uint32_t u = cchan_f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint8_t)(sign | 0x7fu);  /* NaN */
    if (a >= 0x43e00000u) return (uint8_t)(sign | 0x7eu); /* >= 448: saturate */
    if (a < 0x3c800000u) {                                /* below 2^-6: subnormal, unit 2^-9 */
        uint32_t exp = a >> 23;
        if (exp < 117) return sign; /* < 2^-10: rounds to zero (2^-10 itself ties to even 0) */
        uint32_t man = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 141u - exp; /* 20..24 */
        uint32_t q = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint8_t)(sign | q);
    }
    uint32_t v = a - (120u << 23); /* rebias 127 -> 7 */
    v += 0x7ffffu + ((v >> 20) & 1u);
    uint32_t r = v >> 20;
    if (r > 0x7eu) r = 0x7eu;
    return (uint8_t)(sign | r);
}

CCHAN_HOST_DEVICE_INLINE float moe_e4m3_to_f32(uint8_t q) {
    uint32_t sign = (uint32_t)(q & 0x80u) << 24;
    uint32_t exp = (q >> 3) & 0xfu, man = q & 7u;
    if (exp == 0xfu && man == 7u) return cchan_f32_from_bits(sign | 0x7fc00000u);
    if (exp == 0) {
        float v = (float)man * (1.0f / 512.0f);
        return sign ? -v : v;
    }
    return cchan_f32_from_bits(sign | ((exp + 120u) << 23) | (man << 20));
}

/* Four channels to four e4m3 bytes, packed little-endian. */
CCHAN_DEVICE_INLINE uint32_t moe_pack_e4m3x4(float a, float b, float c, float d) {
#if defined(CCHAN_BACKEND_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(lo) : "f"(a), "f"(b));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(hi) : "f"(c), "f"(d));
    return (uint32_t)lo | ((uint32_t)hi << 16);
#else
    return (uint32_t)moe_f32_to_e4m3(a) | ((uint32_t)moe_f32_to_e4m3(b) << 8) |
           ((uint32_t)moe_f32_to_e4m3(c) << 16) | ((uint32_t)moe_f32_to_e4m3(d) << 24);
#endif
}

/* The scale of a 128-channel group from its largest magnitude (DeepEP's convention: the group maps
 * onto +-448; an all-zero group gets a tiny scale instead of a division by zero). */
CCHAN_HOST_DEVICE_INLINE float moe_fp8_amax_clamp(float amax) {
    return amax < 1e-4f ? 1e-4f : amax;
}

CCHAN_DEVICE_INLINE float moe_bf16_lo(uint32_t w) { return cchan_f32_from_bits(w << 16); }
CCHAN_DEVICE_INLINE float moe_bf16_hi(uint32_t w) { return cchan_f32_from_bits(w & 0xffff0000u); }

/* 16 bytes as four words, whatever the backend's vector type. */
typedef struct moe_w4 {
    uint32_t w[4];
} moe_w4_t;
CCHAN_DEVICE_INLINE moe_w4_t moe_load16(const void *p) {
    cchan_raw16_t r = *(const cchan_raw16_t *)p;
    moe_w4_t v;
#if defined(CCHAN_BACKEND_HOST)
    v.w[0] = r.w[0];
    v.w[1] = r.w[1];
    v.w[2] = r.w[2];
    v.w[3] = r.w[3];
#else
    v.w[0] = r.x;
    v.w[1] = r.y;
    v.w[2] = r.z;
    v.w[3] = r.w;
#endif
    return v;
}
CCHAN_DEVICE_INLINE void moe_store16(void *p, moe_w4_t v) {
    cchan_raw16_t r;
#if defined(CCHAN_BACKEND_HOST)
    r.w[0] = v.w[0];
    r.w[1] = v.w[1];
    r.w[2] = v.w[2];
    r.w[3] = v.w[3];
#else
    r.x = v.w[0];
    r.y = v.w[1];
    r.z = v.w[2];
    r.w = v.w[3];
#endif
    *(cchan_raw16_t *)p = r;
}
/* Rounds 8 floats to bf16 and stores them as one 16-byte vector. */
CCHAN_DEVICE_INLINE void moe_store_bf16x8(void *p, const float *acc) {
    moe_w4_t o;
    for (int i = 0; i < 4; i++)
        o.w[i] = (uint32_t)cchan_f32_to_bf16(acc[2 * i]).bits |
                 ((uint32_t)cchan_f32_to_bf16(acc[2 * i + 1]).bits << 16);
    moe_store16(p, o);
}

/* Exclusive prefix of bit c of bits[i] over i < n, for columns c < ncols (<= MOE_MAX_RANKS):
 * prefix[i * ncols + c] (uint16, when prefix != NULL) and total[c]. Every thread of the block
 * calls it; on a GPU nthreads is a multiple of 32 and at most 1024. */
CCHAN_DEVICE_INLINE void moe_block_scan_bits(const uint32_t *bits, int n, int ncols,
                                             uint16_t *prefix, uint32_t *total, uint32_t *wsum,
                                             uint32_t tid, uint32_t nthreads) {
#if defined(CCHAN_BACKEND_HOST)
    (void)wsum;
    (void)tid;
    (void)nthreads;
    for (int c = 0; c < ncols; c++) total[c] = 0;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < ncols; c++) {
            if (prefix) prefix[i * ncols + c] = (uint16_t)total[c];
            total[c] += (bits[i] >> c) & 1u;
        }
#else
    const uint32_t lane = tid & 31u, warp = tid >> 5, nwarps = nthreads >> 5;
    if (tid < (uint32_t)ncols) total[tid] = 0;
    __syncthreads();
    for (int base = 0; base < n; base += (int)nthreads) {
        int i = base + (int)tid;
        uint32_t b = i < n ? bits[i] : 0u;
        uint32_t pre[MOE_MAX_RANKS];
        for (int c = 0; c < ncols; c++) {
            uint32_t bal = __ballot_sync(0xffffffffu, (b >> c) & 1u);
            pre[c] = __popc(bal & ((1u << lane) - 1u));
            if (lane == 0) wsum[warp * ncols + c] = __popc(bal);
        }
        __syncthreads();
        if (tid < (uint32_t)ncols) {
            uint32_t run = total[tid];
            for (uint32_t w = 0; w < nwarps; w++) {
                uint32_t t = wsum[w * ncols + tid];
                wsum[w * ncols + tid] = run;
                run += t;
            }
            total[tid] = run;
        }
        __syncthreads();
        if (i < n && prefix)
            for (int c = 0; c < ncols; c++)
                prefix[i * ncols + c] = (uint16_t)(wsum[warp * ncols + c] + pre[c]);
        __syncthreads();
    }
#endif
}

/* Invalid expert ids (outside [-1, E)) and repeats of an id within a token become -1 everywhere, so
 * that every phase and every rank agrees on the routing; the first is recorded when `record`. */
CCHAN_DEVICE_INLINE void moe_sanitize_row(const moe_dev_t *d, int32_t *row, int t, int record) {
    const int K = d->top_k;
    for (int k = 0; k < K; k++) {
        int32_t e = row[k];
        if (e < -1 || e >= d->num_experts) {
            if (record) moe_record_error(d, MOE_ERR_EXPERT_RANGE, t, k, e);
            row[k] = -1;
            continue;
        }
        for (int j = 0; j < k && e >= 0; j++)
            if (row[j] == e) {
                if (record) moe_record_error(d, MOE_ERR_EXPERT_DUP, t, k, e);
                row[k] = -1;
                break;
            }
    }
}

/* Loads the routing into shared memory, sanitized, with each token's destination-rank mask. */
CCHAN_DEVICE_INLINE void moe_load_routing(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                          int record) {
    const int T = op->num_tokens, K = d->top_k, L = d->local_experts;
    for (int i = (int)b->tid; i < T * K; i += (int)b->nthreads) b->topk[i] = op->topk[i];
    cchan_block_sync();
    for (int t = (int)b->tid; t < T; t += (int)b->nthreads) {
        int32_t *row = b->topk + (int64_t)t * K;
        moe_sanitize_row(d, row, t, record && b->block == 0);
        uint32_t m = 0;
        for (int k = 0; k < K; k++)
            if (row[k] >= 0) m |= 1u << (row[k] / L);
        b->mask[t] = m;
    }
    cchan_block_sync();
}

CCHAN_DEVICE_INLINE uint8_t *moe_parity(const moe_dev_t *d, int r, uint32_t epoch) {
    return d->peer[r] + (uint64_t)(epoch & 1u) * d->parity_bytes;
}

/* Before writing into any rank's parity for `epoch`: every rank has finished reading what it
 * received in that parity two operations ago (its ack), so a rank that runs ahead (one with nothing
 * to receive, or a staged pipeline) never overwrites data a peer has not consumed yet. */
CCHAN_DEVICE_INLINE int moe_wait_acks(const moe_dev_t *d, moe_block_t *b, uint32_t epoch) {
    int st = CCHAN_OK;
    if (epoch > 2) {
        const uint64_t *ack =
            (const uint64_t *)(const void *)(moe_parity(d, d->rank, epoch) + d->off_ack);
        for (int r = (int)b->tid; r < d->nranks; r += (int)b->nthreads) {
            int s = cchan_wait_geq_u64(&ack[r], epoch - 2, &d->ctl, CCHAN_WAIT_SEMAPHORE);
            if (s != CCHAN_OK) st = s;
        }
    }
    cchan_block_sync();
    return st;
}

/* This block's share [lo, hi) of n items, contiguous. */
CCHAN_DEVICE_INLINE void moe_range(int n, const moe_block_t *b, int *lo, int *hi) {
    *lo = (int)((int64_t)n * b->block / b->nblocks);
    *hi = (int)((int64_t)n * (b->block + 1) / b->nblocks);
}

/* ------------------------------------------------------------------ LL dispatch */

/* Sends this block's tokens: each once to every rank that holds one of its experts, header then
 * data, bf16 or fp8 with per-128-channel scales computed here. Then counts them in sent[r]. */
CCHAN_DEVICE_INLINE int moe_ll_dispatch_send(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                             uint32_t epoch) {
    const int T = op->num_tokens, K = d->top_k, H = d->hidden, N = d->nranks, B = d->max_tokens;
    const uint32_t P = d->slot_bytes, hdr = d->hdr_bytes;
    int st = moe_wait_acks(d, b, epoch);
    for (int t = (int)b->block; t < T; t += (int)b->nblocks) {
        const uint32_t m = b->mask[t];
        uint8_t *dst[MOE_MAX_RANKS];
        int nd = 0;
        for (int r = 0; r < N; r++)
            if ((m >> r) & 1u)
                dst[nd++] = moe_parity(d, r, epoch) + d->off_disp +
                            ((uint64_t)d->rank * B + b->slot[t * N + r]) * P;
        if (nd == 0) continue;
        const int32_t *row = b->topk + (int64_t)t * K;
        for (int w = (int)b->tid; w < (int)(hdr / 4); w += (int)b->nthreads) {
            int32_t v = w == 0 ? t : w == 1 ? K : (w - 2 < K ? row[w - 2] : -1);
            for (int j = 0; j < nd; j++) ((int32_t *)(void *)dst[j])[w] = v;
        }
        const uint16_t *src = op->x + (int64_t)t * H;
        const int nvec = H / 8; /* 8 channels = 16 bytes of bf16 */
        if (!op->fp8) {
            for (int v = (int)b->tid; v < nvec; v += (int)b->nthreads) {
                moe_w4_t x = moe_load16(src + v * 8);
                for (int j = 0; j < nd; j++) moe_store16(dst[j] + hdr + (uint64_t)v * 16, x);
            }
        } else {
#if defined(CCHAN_BACKEND_HOST)
            for (int g = 0; g < H / MOE_SCALE_BLOCK; g++) {
                float amax = 0.f;
                for (int c = 0; c < MOE_SCALE_BLOCK; c++) {
                    uint16_t h = src[g * MOE_SCALE_BLOCK + c];
                    float f = cchan_f32_from_bits((uint32_t)h << 16);
                    f = f < 0 ? -f : f;
                    amax = f > amax ? f : amax;
                }
                amax = moe_fp8_amax_clamp(amax);
                float inv = 448.0f / amax, scale = amax / 448.0f;
                for (int c = 0; c < MOE_SCALE_BLOCK; c += 4) {
                    const uint16_t *s4 = src + g * MOE_SCALE_BLOCK + c;
                    uint32_t q = moe_pack_e4m3x4(cchan_f32_from_bits((uint32_t)s4[0] << 16) * inv,
                                                 cchan_f32_from_bits((uint32_t)s4[1] << 16) * inv,
                                                 cchan_f32_from_bits((uint32_t)s4[2] << 16) * inv,
                                                 cchan_f32_from_bits((uint32_t)s4[3] << 16) * inv);
                    for (int j = 0; j < nd; j++)
                        *(uint32_t *)(void *)(dst[j] + hdr + g * MOE_SCALE_BLOCK + c) = q;
                }
                for (int j = 0; j < nd; j++) *(float *)(void *)(dst[j] + hdr + H + g * 4) = scale;
            }
#else
            /* 16 consecutive threads hold one 128-channel group (8 channels each). */
            for (int v = (int)b->tid; v < nvec; v += (int)b->nthreads) {
                moe_w4_t x = moe_load16(src + v * 8);
                float f[8];
                float amax = 0.f;
                for (int i = 0; i < 4; i++) {
                    f[2 * i] = moe_bf16_lo(x.w[i]);
                    f[2 * i + 1] = moe_bf16_hi(x.w[i]);
                    amax = fmaxf(amax, fmaxf(fabsf(f[2 * i]), fabsf(f[2 * i + 1])));
                }
                const unsigned lane = threadIdx.x & 31u;
                const unsigned gmask = 0xffffu << (lane & 16u);
                for (int o = 8; o > 0; o >>= 1)
                    amax = fmaxf(amax, __shfl_xor_sync(gmask, amax, o, 16));
                amax = moe_fp8_amax_clamp(amax);
                float inv = 448.0f / amax;
                uint32_t q0 = moe_pack_e4m3x4(f[0] * inv, f[1] * inv, f[2] * inv, f[3] * inv);
                uint32_t q1 = moe_pack_e4m3x4(f[4] * inv, f[5] * inv, f[6] * inv, f[7] * inv);
                for (int j = 0; j < nd; j++) {
                    uint2 q2;
                    q2.x = q0;
                    q2.y = q1;
                    *(uint2 *)(void *)(dst[j] + hdr + (uint64_t)v * 8) = q2;
                    if ((v & 15) == 0)
                        *(float *)(void *)(dst[j] + hdr + H + (v >> 4) * 4) = amax / 448.0f;
                }
            }
#endif
        }
        cchan_block_sync();
        if (b->tid == 0) {
            cchan_fence_acq_rel_sys(); /* the block's stores to every destination, then the count */
            for (int r = 0; r < N; r++)
                if ((m >> r) & 1u) cchan_fetch_add_relaxed_dev_u64(&d->sent[r], 1);
        }
    }
    return st;
}

/* For each destination rank this block signals: waits until every block's messages to it are
 * fenced, then publishes one counter per expert of that rank (tokens sent, tokens for the expert).
 */
CCHAN_DEVICE_INLINE int moe_ll_dispatch_signal(const moe_dev_t *d, const moe_op_t *op,
                                               moe_block_t *b, uint32_t epoch) {
    const int T = op->num_tokens, K = d->top_k, N = d->nranks, L = d->local_experts;
    int st = CCHAN_OK;
    for (int r = (int)b->block; r < N; r += (int)b->nblocks) {
        for (int e = (int)b->tid; e < L; e += (int)b->nthreads) b->hist[e] = 0;
        cchan_block_sync();
        for (int i = (int)b->tid; i < T * K; i += (int)b->nthreads) {
            int32_t e = b->topk[i];
            if (e >= 0 && e / L == r) moe_smem_add(&b->hist[e - r * L], 1);
        }
        const uint32_t n = b->total[r];
        if (b->tid == 0) {
            int s = cchan_wait_geq_u64(&d->sent[r], n, &d->ctl, CCHAN_WAIT_SEMAPHORE);
            if (s != CCHAN_OK) st = s;
            d->sent[r] = 0; /* every block has counted: ready for the next operation */
        }
        cchan_block_sync();
        uint64_t *cnt = (uint64_t *)(void *)(moe_parity(d, r, epoch) + d->off_dcnt);
        for (int e = (int)b->tid; e < L; e += (int)b->nthreads)
            cchan_store_release_sys_u64(&cnt[e * N + d->rank], MOE_COUNTER(epoch, n, b->hist[e]));
        cchan_block_sync();
    }
    return st;
}

/* Receives for this block's local experts: waits for each rank's counter, finds the messages that
 * name the expert, copies them to the expert-major output in (rank, token) order, and records for
 * combine where each output row came from. */
CCHAN_DEVICE_INLINE int moe_ll_dispatch_recv(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                             uint32_t epoch) {
    const int H = d->hidden, N = d->nranks, L = d->local_experts, B = d->max_tokens, K = d->top_k;
    const uint32_t P = d->slot_bytes, hdr = d->hdr_bytes;
    const int NB = N * B;
    uint8_t *mine = moe_parity(d, d->rank, epoch);
    const uint64_t *cnt = (const uint64_t *)(const void *)(mine + d->off_dcnt);
    int32_t *m_r = b->misc, *n_r = b->misc + MOE_MAX_RANKS, *off = b->misc + 2 * MOE_MAX_RANKS;
    const uint64_t row_bytes = op->fp8 ? (uint64_t)H : (uint64_t)H * 2;
    const int nv = (int)(row_bytes / 16);
    const int nscale = H / MOE_SCALE_BLOCK;
    int st = CCHAN_OK;
    for (int e = (int)b->block; e < L; e += (int)b->nblocks) {
        const int32_t eg = d->rank * L + e;
        for (int r = (int)b->tid; r < N; r += (int)b->nthreads) {
            const uint64_t *c = &cnt[e * N + r];
            int s = cchan_wait_geq_u64(c, (uint64_t)epoch << 32, &d->ctl, CCHAN_WAIT_SEMAPHORE);
            if (s != CCHAN_OK) st = s;
            uint64_t v = cchan_load_relaxed_sys_u64(c);
            m_r[r] = (int32_t)MOE_COUNTER_M(v);
            n_r[r] = (int32_t)MOE_COUNTER_N(v);
            if (e == 0 && op->h_nmsg) op->h_nmsg[r] = n_r[r];
        }
        cchan_block_sync();
        if (b->tid == 0) {
            int run = 0;
            for (int r = 0; r < N; r++) {
                off[r] = run;
                run += m_r[r];
            }
            off[N] = run;
        }
        cchan_block_sync();
        for (int r = 0; r < N; r++) {
            const uint8_t *region = mine + d->off_disp + (uint64_t)r * B * P;
            const int n = n_r[r];
            /* which messages name e, and as which k */
            for (int a = (int)b->tid; a < n; a += (int)b->nthreads) {
                const int32_t *h = (const int32_t *)(const void *)(region + (uint64_t)a * P);
                uint32_t hit = 0;
                int32_t first = -1; /* the message's first expert on this rank */
                for (int k = 0; k < K; k++) {
                    const int32_t x = h[2 + k];
                    if (x == eg) hit = 1u | ((uint32_t)k << 1) | ((uint32_t)h[0] << 5);
                    if (first < 0 && x >= 0 && x / L == d->rank) first = x;
                }
                b->mask[a] = hit;
                /* for the reduced combine: the block of the first local expert names the token
                 * and marks the entries of experts elsewhere; each expert's block fills its own */
                if (op->h_inv && first == eg) {
                    const int32_t tok = h[0];
                    op->h_tok[r * B + a] = tok;
                    int32_t *inv = op->h_inv + ((int64_t)r * B + tok) * K;
                    for (int k = 0; k < K; k++)
                        if (!(h[2 + k] >= 0 && h[2 + k] / L == d->rank)) inv[k] = -1;
                }
            }
            cchan_block_sync();
            moe_block_scan_bits(b->mask, n, 1, b->slot, b->total, b->wsum, b->tid, b->nthreads);
            for (int a = (int)b->tid; a < n; a += (int)b->nthreads)
                if (b->mask[a] & 1u) /* slot | k << 12 | token << 16 (all < 4096) */
                    b->list[b->slot[a]] =
                        (uint32_t)a | (((b->mask[a] >> 1) & 15u) << 12) | ((b->mask[a] >> 5) << 16);
            if (b->tid == 0 && (int)b->total[0] != m_r[r])
                moe_record_error(d, MOE_ERR_COUNT, eg, r, (int32_t)b->total[0]);
            cchan_block_sync();
            const int m = m_r[r] < (int)b->total[0] ? m_r[r] : (int)b->total[0];
            const int64_t row0 = (int64_t)e * NB + off[r];
            uint8_t *out = (uint8_t *)op->out + (uint64_t)row0 * row_bytes;
            /* data, and the fp8 scales as extra 16-byte vectors when they are whole ones */
            const int ns4 = (op->fp8 && nscale % 4 == 0 && ((uintptr_t)op->out_scales & 15) == 0)
                                ? nscale / 4
                                : 0;
            const int nw = nv + ns4;
            for (int j0 = (int)b->tid; j0 < m * nw; j0 += (int)b->nthreads * MOE_UNROLL) {
                moe_w4_t x[MOE_UNROLL] = {{{0}}}; /* for gcc -O3: every element used was loaded */
                for (int u = 0; u < MOE_UNROLL; u++) {
                    int j = j0 + u * (int)b->nthreads;
                    if (j >= m * nw) break;
                    int i = j / nw, v = j - i * nw;
                    const uint8_t *msg = region + (uint64_t)(b->list[i] & 0xfffu) * P + hdr;
                    x[u] = moe_load16(v < nv ? msg + (uint64_t)v * 16 : msg + H + (v - nv) * 16);
                }
                for (int u = 0; u < MOE_UNROLL; u++) {
                    int j = j0 + u * (int)b->nthreads;
                    if (j >= m * nw) break;
                    int i = j / nw, v = j - i * nw;
                    if (v < nv)
                        moe_store16(out + (uint64_t)i * row_bytes + (uint64_t)v * 16, x[u]);
                    else
                        moe_store16((uint8_t *)(op->out_scales + (uint64_t)(row0 + i) * nscale) +
                                        (v - nv) * 16,
                                    x[u]);
                }
            }
            if (op->fp8 && ns4 == 0)
                for (int j = (int)b->tid; j < m * nscale; j += (int)b->nthreads) {
                    int i = j / nscale, g = j - i * nscale;
                    const uint8_t *msg = region + (uint64_t)(b->list[i] & 0xfffu) * P + hdr;
                    op->out_scales[(uint64_t)(row0 + i) * nscale + g] =
                        ((const float *)(const void *)(msg + H))[g];
                }
            for (int i = (int)b->tid; i < m; i += (int)b->nthreads) {
                uint32_t k = (b->list[i] >> 12) & 15u, tok = b->list[i] >> 16;
                op->h_src[row0 + i] = ((uint32_t)r << 24) | (tok * (uint32_t)K + k);
                if (op->h_inv) op->h_inv[((int64_t)r * B + tok) * K + k] = (int32_t)(row0 + i);
            }
            cchan_block_sync();
        }
        if (b->tid == 0) {
            op->h_counts[e] = off[N];
            if (op->out_counts) op->out_counts[e] = off[N];
        }
        cchan_block_sync();
    }
    return st;
}

/* ------------------------------------------------------------------ LL combine */

/* Sends each output row of this block's local experts back to the rank and (token, k) row it came
 * from, then raises that expert's combine counter at every rank. (Splitting the rows of all experts
 * evenly over the blocks measured slower on 2 H200s: 49.7 against 39.6 us; NVLink, not the busiest
 * block, bounds this phase.) */
CCHAN_DEVICE_INLINE int moe_ll_combine_send(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                            uint32_t epoch) {
    const int H = d->hidden, L = d->local_experts, B = d->max_tokens;
    const int NB = d->nranks * B, nv = H / 8;
    const uint64_t row_bytes = (uint64_t)H * 2;
    int st = moe_wait_acks(d, b, epoch);
    for (int e = (int)b->block; e < L; e += (int)b->nblocks) {
        const int n = op->h_counts[e] * nv;
        const uint8_t *y = (const uint8_t *)op->x + (uint64_t)e * NB * row_bytes;
        const uint32_t *src = op->h_src + (int64_t)e * NB;
        for (int j0 = (int)b->tid; j0 < n; j0 += (int)b->nthreads * MOE_UNROLL) {
            moe_w4_t x[MOE_UNROLL] = {{{0}}}; /* for gcc -O3: every element used was loaded */
            for (int u = 0; u < MOE_UNROLL; u++) {
                int j = j0 + u * (int)b->nthreads;
                if (j >= n) break;
                x[u] = moe_load16(y + (uint64_t)j * 16); /* an expert's rows are contiguous */
            }
            for (int u = 0; u < MOE_UNROLL; u++) {
                int j = j0 + u * (int)b->nthreads;
                if (j >= n) break;
                int i = j / nv, v = j - i * nv;
                uint32_t info = src[i];
                uint8_t *dst = moe_parity(d, (int)(info >> 24), epoch) + d->off_comb +
                               (uint64_t)(info & 0xffffffu) * row_bytes;
                moe_store16(dst + (uint64_t)v * 16, x[u]);
            }
        }
        cchan_block_sync();
        for (int r = (int)b->tid; r < d->nranks; r += (int)b->nthreads) {
            uint64_t *c = (uint64_t *)(void *)(moe_parity(d, r, epoch) + d->off_ccnt);
            cchan_store_release_sys_u64(&c[d->rank * L + e], epoch);
        }
        cchan_block_sync();
    }
    return st;
}

/* For this block's tokens: waits for the counters of the token's experts, then writes the weighted
 * sum of its top-k rows, accumulated in f32 in k order, rounded once to bf16. */
CCHAN_DEVICE_INLINE int moe_ll_combine_recv(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                            uint32_t epoch) {
    const int T = op->num_tokens, K = d->top_k, H = d->hidden, nv = H / 8;
    const uint8_t *mine = moe_parity(d, d->rank, epoch);
    const uint64_t *cnt = (const uint64_t *)(const void *)(mine + d->off_ccnt);
    int32_t *ek = b->misc + 3 * MOE_MAX_RANKS;
    float *wk = (float *)(void *)(b->misc);
    int st = CCHAN_OK;
    for (int t = (int)b->block; t < T; t += (int)b->nblocks) {
        if (b->tid == 0) {
            int32_t row[MOE_MAX_TOPK];
            for (int k = 0; k < K; k++) row[k] = op->topk[(int64_t)t * K + k];
            moe_sanitize_row(d, row, t, 0);
            for (int k = 0; k < K; k++) {
                ek[k] = row[k];
                wk[k] = op->weights ? op->weights[(int64_t)t * K + k] : 1.0f;
            }
        }
        cchan_block_sync();
        for (int k = (int)b->tid; k < K; k += (int)b->nthreads)
            if (ek[k] >= 0) {
                int s = cchan_wait_geq_u64(&cnt[ek[k]], epoch, &d->ctl, CCHAN_WAIT_SEMAPHORE);
                if (s != CCHAN_OK) st = s;
            }
        cchan_block_sync();
        const uint8_t *rows = mine + d->off_comb + (uint64_t)t * K * H * 2;
        uint16_t *out = (uint16_t *)op->out + (int64_t)t * H;
        for (int v = (int)b->tid; v < nv; v += (int)b->nthreads) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int k = 0; k < K; k++) {
                if (ek[k] < 0) continue;
                moe_w4_t x = moe_load16(rows + (uint64_t)k * H * 2 + (uint64_t)v * 16);
                const float w = wk[k];
                for (int i = 0; i < 4; i++) {
                    acc[2 * i] += w * moe_bf16_lo(x.w[i]);
                    acc[2 * i + 1] += w * moe_bf16_hi(x.w[i]);
                }
            }
            moe_store_bf16x8(out + v * 8, acc);
        }
        cchan_block_sync();
    }
    return st;
}

/* ------------------------------------------------------------------ LL combine, reduced
 *
 * The expert side sums, for each token it received, the weighted outputs of its own experts (f32,
 * in k order) and sends that one f32 row back instead of one bf16 row per expert: with top-8 over
 * two ranks a token has about four experts per rank, so half the bytes cross NVLink. The router
 * weights are the token side's, so it first writes them to every peer ([B][K] floats, one release
 * per peer). A token's rank adds the ranks' partial sums in rank order (its own computed in place
 * from expert_out) and rounds once to bf16. One flag per (expert rank, token) lets each token's
 * block start as soon as its rows have landed. */

/* Accumulates sum_j w[j] * y[rows[j]] (the 8 bf16 channels at 16-byte vector v of rows of nv
 * vectors) into acc, in j order. */
CCHAN_DEVICE_INLINE void moe_wsum8(const uint8_t *y, const int32_t *rows, const float *w, int n,
                                   int nv, int v, float *acc) {
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        moe_w4_t x[4];
        for (int u = 0; u < 4; u++)
            x[u] = moe_load16(y + ((uint64_t)rows[j + u] * nv + (uint64_t)v) * 16);
        for (int u = 0; u < 4; u++)
            for (int i = 0; i < 4; i++) {
                acc[2 * i] += w[j + u] * moe_bf16_lo(x[u].w[i]);
                acc[2 * i + 1] += w[j + u] * moe_bf16_hi(x[u].w[i]);
            }
    }
    for (; j < n; j++) {
        moe_w4_t x = moe_load16(y + ((uint64_t)rows[j] * nv + (uint64_t)v) * 16);
        for (int i = 0; i < 4; i++) {
            acc[2 * i] += w[j] * moe_bf16_lo(x.w[i]);
            acc[2 * i + 1] += w[j] * moe_bf16_hi(x.w[i]);
        }
    }
}

CCHAN_DEVICE_INLINE int moe_ll_combine_send_reduced(const moe_dev_t *d, const moe_op_t *op,
                                                    moe_block_t *b, uint32_t epoch) {
    const int N = d->nranks, K = d->top_k, H = d->hidden, B = d->max_tokens, T = op->num_tokens;
    const int nv = H / 8;
    int st = moe_wait_acks(d, b, epoch);
    if (b->block == 0) { /* first: the host backend runs blocks in order */
        for (int r = 0; r < N; r++) {
            if (r == d->rank) continue;
            float *cw =
                (float *)(void *)(moe_parity(d, r, epoch) + d->off_cw) + (int64_t)d->rank * B * K;
            for (int i = (int)b->tid; i < T * K; i += (int)b->nthreads)
                cw[i] = op->weights ? op->weights[i] : 1.0f;
        }
        cchan_block_sync();
        for (int r = (int)b->tid; r < N; r += (int)b->nthreads)
            if (r != d->rank) {
                uint64_t *c = (uint64_t *)(void *)(moe_parity(d, r, epoch) + d->off_wcnt);
                cchan_store_release_sys_u64(&c[d->rank], epoch);
            }
        cchan_block_sync();
    }
    uint8_t *mine = moe_parity(d, d->rank, epoch);
    const uint64_t *wcnt = (const uint64_t *)(const void *)(mine + d->off_wcnt);
    int32_t *rows = b->misc + MOE_MAX_TOPK, *nk = b->misc + 2 * MOE_MAX_TOPK;
    float *w = (float *)(void *)b->misc;
    int total = 0;
    for (int s = 0; s < N; s++)
        if (s != d->rank) total += op->h_nmsg[s];
    uint32_t weights_seen = 0;
    for (int it = (int)b->block; it < total; it += (int)b->nblocks) {
        int s = 0, a = it;
        for (; s < N; s++) {
            if (s == d->rank) continue;
            if (a < op->h_nmsg[s]) break;
            a -= op->h_nmsg[s];
        }
        if (!((weights_seen >> s) & 1u)) {
            if (b->tid == 0) {
                int s2 = cchan_wait_geq_u64(&wcnt[s], epoch, &d->ctl, CCHAN_WAIT_SEMAPHORE);
                if (s2 != CCHAN_OK) st = s2;
            }
            weights_seen |= 1u << s;
        }
        const int32_t tok = op->h_tok[s * B + a];
        if (b->tid == 0) {
            const int32_t *inv = op->h_inv + ((int64_t)s * B + tok) * K;
            const float *cw =
                (const float *)(const void *)(mine + d->off_cw) + ((int64_t)s * B + tok) * K;
            int n = 0;
            for (int k = 0; k < K; k++)
                if (inv[k] >= 0) {
                    rows[n] = inv[k];
                    w[n++] = cw[k];
                }
            *nk = n;
        }
        cchan_block_sync();
        const int n = *nk;
        float *dst = (float *)(void *)(moe_parity(d, s, epoch) + d->off_comb) +
                     ((int64_t)d->rank * B + tok) * H;
        for (int v = (int)b->tid; v < nv; v += (int)b->nthreads) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            moe_wsum8((const uint8_t *)op->x, rows, w, n, nv, v, acc);
            moe_w4_t o0, o1;
            for (int i = 0; i < 4; i++) {
                o0.w[i] = cchan_f32_bits(acc[i]);
                o1.w[i] = cchan_f32_bits(acc[4 + i]);
            }
            moe_store16(dst + (int64_t)v * 8, o0);
            moe_store16(dst + (int64_t)v * 8 + 4, o1);
        }
        cchan_block_sync();
        if (b->tid == 0) {
            uint64_t *f = (uint64_t *)(void *)(moe_parity(d, s, epoch) + d->off_ccnt);
            cchan_store_release_sys_u64(&f[d->rank * B + tok], epoch);
        }
    }
    cchan_block_sync();
    return st;
}

CCHAN_DEVICE_INLINE int moe_ll_combine_recv_reduced(const moe_dev_t *d, const moe_op_t *op,
                                                    moe_block_t *b, uint32_t epoch) {
    const int T = op->num_tokens, K = d->top_k, H = d->hidden, N = d->nranks, B = d->max_tokens;
    const int L = d->local_experts, nv = H / 8;
    const uint8_t *mine = moe_parity(d, d->rank, epoch);
    const uint64_t *flag = (const uint64_t *)(const void *)(mine + d->off_ccnt);
    int32_t *rows = b->misc + MOE_MAX_TOPK, *nk = b->misc + 2 * MOE_MAX_TOPK;
    uint32_t *mask = (uint32_t *)(void *)(b->misc + 2 * MOE_MAX_TOPK + 1);
    float *w = (float *)(void *)b->misc;
    int st = CCHAN_OK;
    for (int t = (int)b->block; t < T; t += (int)b->nblocks) {
        if (b->tid == 0) {
            int32_t row[MOE_MAX_TOPK];
            for (int k = 0; k < K; k++) row[k] = op->topk[(int64_t)t * K + k];
            moe_sanitize_row(d, row, t, 0);
            const int32_t *inv = op->h_inv + ((int64_t)d->rank * B + t) * K;
            uint32_t m = 0;
            int n = 0;
            for (int k = 0; k < K; k++) {
                if (row[k] < 0) continue;
                m |= 1u << (row[k] / L);
                if (row[k] / L == d->rank) {
                    rows[n] = inv[k];
                    w[n++] = op->weights ? op->weights[(int64_t)t * K + k] : 1.0f;
                }
            }
            *nk = n;
            *mask = m;
        }
        cchan_block_sync();
        const uint32_t m = *mask;
        const int n = *nk;
        for (int r = (int)b->tid; r < N; r += (int)b->nthreads)
            if (r != d->rank && ((m >> r) & 1u)) {
                int s = cchan_wait_geq_u64(&flag[r * B + t], epoch, &d->ctl, CCHAN_WAIT_SEMAPHORE);
                if (s != CCHAN_OK) st = s;
            }
        cchan_block_sync();
        uint16_t *out = (uint16_t *)op->out + (int64_t)t * H;
        for (int v = (int)b->tid; v < nv; v += (int)b->nthreads) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int r = 0; r < N; r++) {
                if (!((m >> r) & 1u)) continue;
                float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                if (r == d->rank) {
                    moe_wsum8((const uint8_t *)op->x, rows, w, n, nv, v, p);
                } else {
                    const float *src = (const float *)(const void *)(mine + d->off_comb) +
                                       ((int64_t)r * B + t) * H + (int64_t)v * 8;
                    moe_w4_t x0 = moe_load16(src), x1 = moe_load16(src + 4);
                    for (int i = 0; i < 4; i++) {
                        p[i] = cchan_f32_from_bits(x0.w[i]);
                        p[4 + i] = cchan_f32_from_bits(x1.w[i]);
                    }
                }
                for (int i = 0; i < 8; i++) acc[i] += p[i];
            }
            moe_store_bf16x8(out + v * 8, acc);
        }
        cchan_block_sync();
    }
    return st;
}

/* ------------------------------------------------------------------ HT (high throughput)
 *
 * Rows are whole tokens (one per destination rank, not per expert). Handle creation (moe_ht_meta)
 * exchanges the token counts, so every rank knows where its rows land at every other rank: the 2D
 * output is rank 0's tokens, then rank 1's, ..., each in token order. Each route row carries the
 * token index, the token's experts as local ids of the receiving rank (-1 elsewhere) and their
 * weights. */

#define MOE_HT_ROUTE_WORDS(K) ((1 + 2 * (K) + 3) / 4 * 4)

/* Handle creation: sanitize the routing in place, each token's destination mask and slot per
 * destination, per-destination and per-expert counts to every rank; then everyone's counts. Block 0
 * does it all (it is small). */
CCHAN_DEVICE_INLINE int moe_ht_meta(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                    uint32_t epoch) {
    const int T = op->num_tokens, K = d->top_k, N = d->nranks, L = d->local_experts;
    int st = CCHAN_OK;
    if (b->block != 0) return st;
    int32_t *topk = (int32_t *)(void *)op->topk;
    if (op->phases & MOE_PHASE_SEND) {
        st = moe_wait_acks(d, b, epoch);
        for (int t = (int)b->tid; t < T; t += (int)b->nthreads) {
            int32_t *row = topk + (int64_t)t * K;
            moe_sanitize_row(d, row, t, 1);
            uint32_t m = 0;
            for (int k = 0; k < K; k++)
                if (row[k] >= 0) m |= 1u << (row[k] / L);
            op->h_mask[t] = m;
        }
        cchan_block_sync();
        moe_block_scan_bits(op->h_mask, T, N, op->h_slot, b->total, b->wsum, b->tid, b->nthreads);
        for (int r = 0; r < N; r++) {
            for (int e = (int)b->tid; e < L; e += (int)b->nthreads) b->hist[e] = 0;
            cchan_block_sync();
            for (int i = (int)b->tid; i < T * K; i += (int)b->nthreads) {
                int32_t e = topk[i];
                if (e >= 0 && e / L == r) moe_smem_add(&b->hist[e - r * L], 1);
            }
            cchan_block_sync();
            uint8_t *pr = moe_parity(d, r, epoch) + d->off_cnts;
            int32_t *mat = (int32_t *)(void *)pr; /* [N][N] */
            int32_t *hist = mat + N * N;          /* [N][L] */
            for (int c = (int)b->tid; c < N; c += (int)b->nthreads)
                mat[d->rank * N + c] = (int32_t)b->total[c];
            for (int e = (int)b->tid; e < L; e += (int)b->nthreads)
                hist[d->rank * L + e] = b->hist[e];
            cchan_block_sync();
            if (b->tid == 0) {
                cchan_fence_acq_rel_sys();
                uint64_t *c = (uint64_t *)(void *)(moe_parity(d, r, epoch) + d->off_dcnt);
                cchan_store_release_sys_u64(&c[d->rank], ((uint64_t)epoch << 32) | 1u);
            }
            cchan_block_sync();
        }
    }
    if (op->phases & MOE_PHASE_RECV) {
        uint8_t *mine = moe_parity(d, d->rank, epoch);
        const uint64_t *c = (const uint64_t *)(const void *)(mine + d->off_dcnt);
        for (int r = (int)b->tid; r < N; r += (int)b->nthreads) {
            int s = cchan_wait_geq_u64(&c[r], (uint64_t)epoch << 32, &d->ctl, CCHAN_WAIT_SEMAPHORE);
            if (s != CCHAN_OK) st = s;
        }
        cchan_block_sync();
        const int32_t *mat = (const int32_t *)(const void *)(mine + d->off_cnts);
        const int32_t *hist = mat + N * N;
        for (int i = (int)b->tid; i < N * N; i += (int)b->nthreads) op->h_mat[i] = mat[i];
        for (int e = (int)b->tid; e < L; e += (int)b->nthreads) {
            int32_t sum = 0;
            for (int r = 0; r < N; r++) sum += hist[r * L + e];
            op->h_counts[e] = sum;
        }
        for (int r = (int)b->tid; r < N; r += (int)b->nthreads) {
            int32_t base = 0;
            for (int s2 = 0; s2 < d->rank; s2++) base += mat[s2 * N + r];
            op->h_base[r] = base;
        }
        cchan_block_sync();
    }
    return st;
}

#define MOE_HT_UNROLL 4
#define MOE_HT_REDUCE_UNROLL 2 /* f32 accumulators per vector: keep it under 64 registers */

/* The dispatch and combine kernels are chunked pipelines. The blocks split into senders and
 * receivers. Each rank's tokens are cut into C chunks; sender block i sends chunks i, i + S, ... (a
 * warp per token, the whole row), and after each chunk releases one flag per destination, with a
 * descriptor of the chunk's rows there (its rows at a destination are contiguous: tokens keep their
 * order). Receivers copy chunks as their flags arrive, in chunk order, so the copy out of the
 * receive area overlaps the transfer, and they copy this rank's own rows (no transfer) first.
 * Combine runs the same chunks backwards: the expert side sends a source's chunk in parts, each
 * followed by a progress flag, and the token side reduces a chunk's tokens as soon as every rank's
 * progress has passed them. */

/* Senders of a kernel that wants `want` of them: block < S sends, the others receive (numbered
 * from 0); a single block does both. */
CCHAN_DEVICE_INLINE int moe_ht_nsenders(int want, const moe_block_t *b) {
    if (b->nblocks <= 1) return 1;
    return want < (int)b->nblocks ? want : (int)b->nblocks - 1;
}
CCHAN_DEVICE_INLINE int moe_ht_is_sender(int want, const moe_block_t *b) {
    return b->nblocks <= 1 || (int)b->block < moe_ht_nsenders(want, b);
}
CCHAN_DEVICE_INLINE int moe_ht_receiver(int want, const moe_block_t *b, int *nrecv) {
    if (b->nblocks <= 1) {
        *nrecv = 1;
        return 0;
    }
    const int S = moe_ht_nsenders(want, b);
    *nrecv = (int)b->nblocks - S;
    return (int)b->block - S; /* < 0: a sender */
}

/* Warps of a block (a "warp" is one thread on the host backend). */
CCHAN_DEVICE_INLINE void moe_warps(const moe_block_t *b, int *lane, int *warp, int *nwarps,
                                   int *width) {
    const int w = b->nthreads >= 32 ? 32 : 1;
    *width = w;
    *lane = (int)b->tid % w;
    *warp = (int)b->tid / w;
    *nwarps = (int)b->nthreads / w;
}

/* One row of nv 16-byte vectors to nd destinations, by one warp. */
CCHAN_DEVICE_INLINE void moe_warp_copy_row(uint8_t *const *dst, int nd, const uint8_t *src, int nv,
                                           int lane, int width) {
    if (nd == 1) { /* the common case, with the destination in a register */
        uint8_t *d0 = dst[0];
        for (int v0 = lane; v0 < nv; v0 += width * MOE_HT_UNROLL) {
            moe_w4_t x[MOE_HT_UNROLL] = {{{0}}};
            for (int u = 0; u < MOE_HT_UNROLL; u++) {
                const int v = v0 + u * width;
                if (v < nv) x[u] = moe_load16(src + (uint64_t)v * 16);
            }
            for (int u = 0; u < MOE_HT_UNROLL; u++) {
                const int v = v0 + u * width;
                if (v < nv) moe_store16(d0 + (uint64_t)v * 16, x[u]);
            }
        }
        return;
    }
    for (int v0 = lane; v0 < nv; v0 += width * MOE_HT_UNROLL) {
        moe_w4_t x[MOE_HT_UNROLL] = {{{0}}};
        for (int u = 0; u < MOE_HT_UNROLL; u++) {
            const int v = v0 + u * width;
            if (v < nv) x[u] = moe_load16(src + (uint64_t)v * 16);
        }
        for (int u = 0; u < MOE_HT_UNROLL; u++) {
            const int v = v0 + u * width;
            if (v >= nv) break;
            for (int j = 0; j < nd; j++) moe_store16(dst[j] + (uint64_t)v * 16, x[u]);
        }
    }
}

CCHAN_DEVICE_INLINE void moe_chunk_range(int n, int c, int nchunks, int *lo, int *hi) {
    *lo = (int)((int64_t)n * c / nchunks);
    *hi = (int)((int64_t)n * (c + 1) / nchunks);
}

/* Rows [lo, lo + n) of my tokens' rows at rank r for tokens [tlo, thi). */
CCHAN_DEVICE_INLINE uint64_t moe_ht_chunk_desc(const moe_op_t *op, int me, int N, int r, int tlo,
                                               int thi) {
    const int T = op->num_tokens;
    const int32_t lo = tlo < T ? op->h_slot[(int64_t)tlo * N + r] : op->h_mat[me * N + r];
    const int32_t hi = thi < T ? op->h_slot[(int64_t)thi * N + r] : op->h_mat[me * N + r];
    return (uint64_t)(uint32_t)(op->h_base[r] + lo) | ((uint64_t)(uint32_t)(hi - lo) << 32);
}

/* Tokens [tlo, thi) to the ranks in `ranks` (their bits of each token's mask): rows and route rows
 * to peers' receive areas, this rank's own rows straight to the output. One warp per token. */
CCHAN_DEVICE_INLINE void moe_ht_send_tokens(const moe_dev_t *d, const moe_op_t *op,
                                            const moe_block_t *b, uint32_t epoch, int tlo, int thi,
                                            uint32_t ranks) {
    const int N = d->nranks, K = d->top_k, H = d->hidden, L = d->local_experts, nv = H / 8;
    const int RW = MOE_HT_ROUTE_WORDS(K);
    const uint64_t row_bytes = (uint64_t)H * 2;
    int lane, warp, nw, width;
    moe_warps(b, &lane, &warp, &nw, &width);
    for (int t = tlo + warp; t < thi; t += nw) {
        const uint32_t m = op->h_mask[t] & ranks;
        if (!m) continue;
        uint8_t *dst[MOE_MAX_RANKS];
        int nd = 0;
        for (int r = 0; r < N; r++) {
            if (!((m >> r) & 1u)) continue;
            const int64_t row = op->h_base[r] + op->h_slot[(int64_t)t * N + r];
            if (r == d->rank) {
                dst[nd++] = (uint8_t *)op->out + (uint64_t)row * row_bytes;
                for (int k = lane; k < K; k += width) {
                    const int32_t e = op->topk[(int64_t)t * K + k];
                    if (op->out_route)
                        op->out_route[row * K + k] = (e >= 0 && e / L == r) ? e - r * L : -1;
                    if (op->out_weights)
                        op->out_weights[row * K + k] =
                            op->in_weights ? op->in_weights[(int64_t)t * K + k] : 0.0f;
                }
                if (lane == 0) op->h_src[row] = ((uint32_t)r << 24) | (uint32_t)t;
            } else {
                uint8_t *area = moe_parity(d, r, epoch);
                dst[nd++] = area + d->off_disp + (uint64_t)row * row_bytes;
                int32_t *route = (int32_t *)(void *)(area + d->off_route) + row * RW;
                for (int w = lane; w < 1 + 2 * K; w += width) {
                    int32_t v;
                    if (w == 0) {
                        v = t;
                    } else if (w <= K) {
                        const int32_t e = op->topk[(int64_t)t * K + w - 1];
                        v = (e >= 0 && e / L == r) ? e - r * L : -1;
                    } else {
                        const float f =
                            op->in_weights ? op->in_weights[(int64_t)t * K + w - 1 - K] : 0.0f;
                        v = (int32_t)cchan_f32_bits(f);
                    }
                    route[w] = v;
                }
            }
        }
        moe_warp_copy_row(dst, nd, (const uint8_t *)(op->x + (int64_t)t * H), nv, lane, width);
    }
}

CCHAN_DEVICE_INLINE int moe_ht_dispatch_send(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                             uint32_t epoch) {
    if (!moe_ht_is_sender(d->ht_senders, b)) return CCHAN_OK;
    const int N = d->nranks, C = d->ht_chunks, S = moe_ht_nsenders(d->ht_senders, b);
    const int T = op->num_tokens;
    int st = moe_wait_acks(d, b, epoch);
    /* staged: the receive may run after the caller has reused x, so own rows go now */
    const uint32_t ranks = (op->phases & MOE_PHASE_RECV) ? ~(1u << d->rank) : ~0u;
    for (int c = (b->nblocks <= 1 ? 0 : (int)b->block); c < C; c += S) {
        int tlo, thi;
        moe_chunk_range(T, c, C, &tlo, &thi);
        moe_ht_send_tokens(d, op, b, epoch, tlo, thi, ranks);
        cchan_block_sync();
        if (b->tid == 0) {
            cchan_fence_acq_rel_sys();
            for (int r = 0; r < N; r++) {
                if (r == d->rank) continue;
                uint64_t *f = (uint64_t *)(void *)(moe_parity(d, r, epoch) + d->off_hflag);
                f[N * C + d->rank * C + c] = moe_ht_chunk_desc(op, d->rank, N, r, tlo, thi);
                cchan_store_release_sys_u64(&f[d->rank * C + c], epoch);
            }
        }
    }
    cchan_block_sync();
    return st;
}

CCHAN_DEVICE_INLINE int moe_ht_dispatch_recv(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                             uint32_t epoch) {
    int R;
    const int j = moe_ht_receiver(d->ht_senders, b, &R);
    if (j < 0) return CCHAN_OK;
    const int N = d->nranks, C = d->ht_chunks, K = d->top_k, H = d->hidden, T = op->num_tokens;
    const int RW = MOE_HT_ROUTE_WORDS(K), nv = H / 8, L = d->local_experts;
    const uint64_t row_bytes = (uint64_t)H * 2;
    uint8_t *mine = moe_parity(d, d->rank, epoch);
    const uint64_t *f = (const uint64_t *)(const void *)(mine + d->off_hflag);
    int st = CCHAN_OK;
    if (op->phases & MOE_PHASE_SEND) /* own rows first: nothing to wait for */
        for (int c = j; c < C; c += R) {
            int tlo, thi;
            moe_chunk_range(T, c, C, &tlo, &thi);
            moe_ht_send_tokens(d, op, b, epoch, tlo, thi, 1u << d->rank);
        }
    int32_t *desc = b->misc; /* the chunk's first row and row count */
    const int32_t *route = (const int32_t *)(const void *)(mine + d->off_route);
    for (int c = j; c < C; c += R)
        for (int s = 0; s < N; s++) {
            if (s == d->rank) continue;
            if (b->tid == 0) {
                int s2 = cchan_wait_geq_u64(&f[s * C + c], epoch, &d->ctl, CCHAN_WAIT_SEMAPHORE);
                if (s2 != CCHAN_OK) st = s2;
                const uint64_t dv = f[N * C + s * C + c];
                op->h_chunk[s * C + c] = dv;
                desc[0] = (int32_t)(uint32_t)dv;
                desc[1] = (int32_t)(dv >> 32);
            }
            cchan_block_sync();
            const int lo = desc[0], n = desc[1];
            const int64_t total = (int64_t)n * nv;
            const uint8_t *src = mine + d->off_disp + (uint64_t)lo * row_bytes;
            uint8_t *dst = (uint8_t *)op->out + (uint64_t)lo * row_bytes;
            for (int64_t j0 = b->tid; j0 < total; j0 += (int64_t)b->nthreads * MOE_HT_UNROLL) {
                /* zeroed for gcc -O3's maybe-uninitialized: every element used was loaded */
                moe_w4_t v[MOE_HT_UNROLL] = {{{0}}};
                for (int u = 0; u < MOE_HT_UNROLL; u++) {
                    int64_t i = j0 + (int64_t)u * b->nthreads;
                    if (i < total) v[u] = moe_load16(src + (uint64_t)i * 16);
                }
                for (int u = 0; u < MOE_HT_UNROLL; u++) {
                    int64_t i = j0 + (int64_t)u * b->nthreads;
                    if (i < total) moe_store16(dst + (uint64_t)i * 16, v[u]);
                }
            }
            for (int i = lo + (int)b->tid; i < lo + n; i += (int)b->nthreads) {
                const int32_t *rr = route + (int64_t)i * RW;
                op->h_src[i] = ((uint32_t)s << 24) | (uint32_t)rr[0];
                for (int k = 0; k < K; k++) {
                    if (op->out_route) op->out_route[(int64_t)i * K + k] = rr[1 + k];
                    if (op->out_weights)
                        op->out_weights[(int64_t)i * K + k] =
                            cchan_f32_from_bits((uint32_t)rr[1 + K + k]);
                }
            }
            cchan_block_sync();
        }
    if (j == 0 && op->out_counts)
        for (int e = (int)b->tid; e < L; e += (int)b->nthreads) op->out_counts[e] = op->h_counts[e];
    cchan_block_sync();
    return st;
}

CCHAN_DEVICE_INLINE int moe_ht_combine_send(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                            uint32_t epoch) {
    if (!moe_ht_is_sender(d->ht_csenders, b)) return CCHAN_OK;
    const int N = d->nranks, C = d->ht_chunks, S = moe_ht_nsenders(d->ht_csenders, b);
    const int H = d->hidden, B = d->max_tokens, nv = H / 8, Q = d->ht_csub;
    const uint64_t row_bytes = (uint64_t)H * 2;
    int lane, warp, nw, width;
    moe_warps(b, &lane, &warp, &nw, &width);
    int st = moe_wait_acks(d, b, epoch);
    for (int c = (b->nblocks <= 1 ? 0 : (int)b->block); c < C; c += S)
        for (int q = 0; q < Q; q++) { /* a chunk in Q parts, each followed by a progress flag */
            for (int s = 0; s < N; s++) {
                if (s == d->rank) continue;
                const uint64_t desc = op->h_chunk[s * C + c];
                const int lo = (int)(uint32_t)desc, n = (int)(desc >> 32);
                const int a = lo + (int)((int64_t)n * q / Q),
                          z = lo + (int)((int64_t)n * (q + 1) / Q);
                uint8_t *area =
                    moe_parity(d, s, epoch) + d->off_comb + (uint64_t)d->rank * B * row_bytes;
                for (int i = a + warp; i < z; i += nw) {
                    uint8_t *dst = area + (uint64_t)(op->h_src[i] & 0xffffffu) * row_bytes;
                    moe_warp_copy_row(&dst, 1, (const uint8_t *)op->x + (uint64_t)i * row_bytes, nv,
                                      lane, width);
                }
            }
            cchan_block_sync();
            if (b->tid == 0) {
                cchan_fence_acq_rel_sys();
                for (int s = 0; s < N; s++) {
                    if (s == d->rank) continue;
                    /* every row of a token below the progress value has landed */
                    uint32_t done = 0xffffffffu;
                    if (q < Q - 1) {
                        const uint64_t desc = op->h_chunk[s * C + c];
                        const int lo = (int)(uint32_t)desc, n = (int)(desc >> 32);
                        const int z = lo + (int)((int64_t)n * (q + 1) / Q);
                        done = z > lo ? (op->h_src[z - 1] & 0xffffffu) + 1u : 0u;
                    }
                    uint64_t *f = (uint64_t *)(void *)(moe_parity(d, s, epoch) + d->off_hflag);
                    cchan_store_release_sys_u64(&f[2 * N * C + d->rank * C + c],
                                                ((uint64_t)epoch << 32) | done);
                }
            }
        }
    cchan_block_sync();
    return st;
}

CCHAN_DEVICE_INLINE int moe_ht_combine_recv(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                            uint32_t epoch) {
    int R;
    const int j = moe_ht_receiver(d->ht_csenders, b, &R);
    if (j < 0) return CCHAN_OK;
    const int N = d->nranks, C = d->ht_chunks, H = d->hidden, B = d->max_tokens, nv = H / 8;
    const int T = op->num_tokens;
    const uint64_t row_bytes = (uint64_t)H * 2;
    const uint8_t *mine = moe_parity(d, d->rank, epoch);
    const uint64_t *f = (const uint64_t *)(const void *)(mine + d->off_hflag);
    int lane, warp, nw, width;
    moe_warps(b, &lane, &warp, &nw, &width);
    int st = CCHAN_OK;
    for (int c = j; c < C; c += R) {
        int tlo, thi;
        moe_chunk_range(T, c, C, &tlo, &thi);
        for (int g0 = tlo; g0 < thi; g0 += nw) { /* a token per warp, once its rows are in */
            const int g1 = g0 + nw < thi ? g0 + nw : thi;
            for (int r = (int)b->tid; r < N; r += (int)b->nthreads)
                if (r != d->rank) {
                    int s = cchan_wait_geq_u64(&f[2 * N * C + r * C + c],
                                               ((uint64_t)epoch << 32) | (uint32_t)g1, &d->ctl,
                                               CCHAN_WAIT_SEMAPHORE);
                    if (s != CCHAN_OK) st = s;
                }
            cchan_block_sync();
            const int t = g0 + warp;
            if (t < g1) {
                const uint32_t m = op->h_mask[t];
                const uint8_t *src[MOE_MAX_RANKS];
                int nd = 0;
                for (int r = 0; r < N; r++) {
                    if (!((m >> r) & 1u)) continue;
                    src[nd++] =
                        r == d->rank
                            ? (const uint8_t *)op->x +
                                  (uint64_t)(op->h_base[r] + op->h_slot[(int64_t)t * N + r]) *
                                      row_bytes
                            : mine + d->off_comb + ((uint64_t)r * B + t) * row_bytes;
                }
                uint8_t *out = (uint8_t *)op->out + (uint64_t)t * row_bytes;
                for (int v0 = lane; v0 < nv; v0 += width * MOE_HT_REDUCE_UNROLL) {
                    float acc[MOE_HT_REDUCE_UNROLL][8];
                    for (int u = 0; u < MOE_HT_REDUCE_UNROLL; u++)
                        for (int i = 0; i < 8; i++) acc[u][i] = 0.f;
                    for (int q = 0; q < nd; q++) {
                        moe_w4_t x[MOE_HT_REDUCE_UNROLL];
                        for (int u = 0; u < MOE_HT_REDUCE_UNROLL; u++) {
                            const int v = v0 + u * width;
                            if (v < nv) x[u] = moe_load16(src[q] + (uint64_t)v * 16);
                        }
                        for (int u = 0; u < MOE_HT_REDUCE_UNROLL; u++) {
                            if (v0 + u * width >= nv) break;
                            for (int i = 0; i < 4; i++) {
                                acc[u][2 * i] += moe_bf16_lo(x[u].w[i]);
                                acc[u][2 * i + 1] += moe_bf16_hi(x[u].w[i]);
                            }
                        }
                    }
                    for (int u = 0; u < MOE_HT_REDUCE_UNROLL; u++) {
                        const int v = v0 + u * width;
                        if (v >= nv) break;
                        moe_store_bf16x8(out + (uint64_t)v * 16, acc[u]);
                    }
                }
            }
            cchan_block_sync();
        }
    }
    cchan_block_sync();
    return st;
}

/* ------------------------------------------------------------------ operation bookkeeping */

/* The epoch of this operation: a new one for a send, the staged one for a receive-only complete. */
CCHAN_DEVICE_INLINE uint32_t moe_op_epoch(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b) {
    uint32_t epoch = (op->phases & MOE_PHASE_SEND) ? *(volatile uint32_t *)d->seq
                                                   : *(volatile uint32_t *)op->h_epoch;
    if ((op->phases & MOE_PHASE_SEND) && b->block == 0 && b->tid == 0) *op->h_epoch = epoch;
    return epoch;
}

/* After the last block of the operation has finished: a send opens the next epoch; a receive
 * tells every sender that this parity's data from it has been consumed (moe_wait_acks). */
CCHAN_DEVICE_INLINE void moe_op_acks(const moe_dev_t *d, uint32_t epoch) {
    for (int r = 0; r < d->nranks; r++) {
        uint64_t *ack = (uint64_t *)(void *)(moe_parity(d, r, epoch) + d->off_ack);
        cchan_store_release_sys_u64(&ack[d->rank], epoch);
    }
}

CCHAN_DEVICE_INLINE void moe_op_finish(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                       uint32_t epoch) {
    cchan_block_sync();
    if (b->tid == 0 && cchan_fetch_add_acq_rel_dev_u32(d->done, 1) == b->nblocks - 1) {
        *d->done = 0;
        if (op->phases & MOE_PHASE_RECV) moe_op_acks(d, epoch);
        if (op->phases & MOE_PHASE_SEND) *(volatile uint32_t *)d->seq = epoch + 1;
    }
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_MOE_KERNELS_H */
