/* The fused AllReduce + residual add + RMSNorm kernel body (the tensor-parallel epilogue), as
 * inline functions over cchan memory channels that compile for CUDA and for the host backend (one
 * CPU thread per "block", nthreads = 1).
 *
 * Per rank, bf16 [tokens, hidden] row-major:
 *   a            = bf16(sum over ranks r, in rank order, of x_r)     the all-reduce
 *   residual_out = bf16(a + residual)
 *   y            = bf16(residual_out * rsqrt(mean(residual_out^2) + eps) * weight)
 * Every rank computes every row from the same inputs in the same order, so all ranks hold
 * bit-identical residual_out and y.
 *
 * Work split: a unit is (row, slice); by default a whole row (split 1); optionally LL spreads a
 * row over `split` blocks when there are few tokens (more SMs storing to NVLink). Block b owns
 * units b, b + nblocks, ... on every rank (all ranks launch the same grid).
 *   1. send:    for each owned unit, the block stores its slice of x into every peer's scratch, in
 *               the slot (parity, this rank, row);
 *   2. sync:    LL: nothing (each 16-byte LL16 packet carries 8 bytes of data and the launch's flag
 *               twice); HB: the block signals each peer on semaphore b, then waits for each peer's
 *               signal on semaphore b (the peer's block b has stored the same rows here);
 *   3. compute: for each owned unit, sums the ranks' vectors (its own x from memory, the peers'
 *               from its scratch, LL reads spinning on the flag), adds the residual, reduces the
 *               sum of squares over the block (and, for a split row, over the row's blocks through
 *               flagged partial sums in device memory), and writes residual_out and y.
 * No grid barrier: a block waits only for the peers' data for its rows and, for a split row, for
 * the row's other blocks (co-resident: split launches fit in one wave of at most nchan blocks).
 *
 * Launch state in device memory (graph-safe, no host counter): state[0] is the launch epoch E. A
 * launch uses LL flag E + 1 and scratch parity E & 1; the last block to finish advances E. The
 * parity makes reuse safe: a rank writes parity p again only two launches later, and it can only
 * have finished the launch in between after every peer finished the launch that read parity p.
 * LL and HB use separate scratch areas, so a stale HB word can never pass for an LL flag.
 */
#ifndef CCHAN_FUSED_RMSNORM_DEVICE_H
#define CCHAN_FUSED_RMSNORM_DEVICE_H

#include "cchan/device.h"

#if defined(CCHAN_BACKEND_HOST)
#include <math.h>
#endif

CCHAN_EXTERN_C_BEGIN

#define CCHAN_FUSED_PROTO_LL 1
#define CCHAN_FUSED_PROTO_HB 2
#define CCHAN_FUSED_VEC_ELEMS 8 /* bf16 per 16-byte vector */
#define CCHAN_FUSED_MAX_THREADS 1024

#define CCHAN_FUSED_MAX_RANKS 8
#define CCHAN_FUSED_MAX_SPLIT 16

typedef struct cchan_fused_rmsnorm_args {
    /* Channel 0 to each peer (entry [rank] unused), in the kernel's parameters so the data path
     * reads no channel struct from memory. */
    cchan_memory_channel_t peers[CCHAN_FUSED_MAX_RANKS];
    const cchan_memory_channel_t *chans;   /* [nranks * nchan]: chans[p * nchan + b], for HB sync */
    uint32_t *state;                       /* [0] epoch, [1] blocks finished this launch */
    uint64_t *partials;                    /* [max_tokens * MAX_SPLIT]: {flag, sum of squares} */
    const uint16_t *x, *residual, *weight; /* bf16 bit patterns */
    uint16_t *residual_out, *y;
    float eps;
    int proto;
    uint32_t tokens, hidden, max_tokens;
    uint32_t rank, nranks, nchan;
    uint32_t split;     /* blocks per row (LL only; 1 for HB) */
    uint64_t ll_offset; /* scratch offset of the LL area; the HB area starts at 0 */
} cchan_fused_rmsnorm_args_t;

/* Bytes of scratch a slot row takes: HB one bf16 row, LL16 twice that. */
CCHAN_HOST_DEVICE_INLINE uint64_t cchan_fused_hb_row_bytes(uint32_t hidden) {
    return (uint64_t)hidden * 2u;
}
CCHAN_HOST_DEVICE_INLINE uint64_t cchan_fused_ll_row_bytes(uint32_t hidden) {
    return (uint64_t)hidden * 4u;
}
/* Offset in a rank's scratch of the row that rank `src` sent, for parity `parity`. */
CCHAN_HOST_DEVICE_INLINE uint64_t cchan_fused_slot(uint32_t parity, uint32_t src, uint32_t row,
                                                   uint32_t nranks, uint32_t max_tokens,
                                                   uint64_t row_bytes) {
    return (((uint64_t)parity * nranks + src) * max_tokens + row) * row_bytes;
}

CCHAN_HOST_DEVICE_INLINE float cchan_fused_lo(uint32_t w) { return cchan_f32_from_bits(w << 16); }
CCHAN_HOST_DEVICE_INLINE float cchan_fused_hi(uint32_t w) {
    return cchan_f32_from_bits(w & 0xffff0000u);
}
CCHAN_HOST_DEVICE_INLINE uint32_t cchan_fused_pack(float lo, float hi) {
    return (uint32_t)cchan_f32_to_bf16(lo).bits | ((uint32_t)cchan_f32_to_bf16(hi).bits << 16);
}
/* bf16 rounding of a float, kept as a float. */
CCHAN_HOST_DEVICE_INLINE float cchan_fused_round(float v) {
    return cchan_bf16_to_f32(cchan_f32_to_bf16(v));
}

/* Sum of v over the block's threads, on every thread. smem holds 32 floats (a warp's sum each:
 * 1024 threads at the narrowest warp). nthreads is a multiple of the warp width, so every lane
 * takes part in the shuffles. */
#if defined(CCHAN_BACKEND_CUDA) || defined(CCHAN_BACKEND_HIP)
CCHAN_DEVICE_INLINE float cchan_fused_block_sum(float v, float *smem, uint32_t tid,
                                                uint32_t nthreads) {
    for (int o = CCHAN_WARP_SIZE / 2; o > 0; o >>= 1)
        v += cchan_warp_shfl_xor_f32(CCHAN_LANE_MASK_ALL, v, o, CCHAN_WARP_SIZE);
    uint32_t nwarps = (nthreads + CCHAN_WARP_SIZE - 1) / CCHAN_WARP_SIZE;
    __syncthreads(); /* smem may still be read from the previous row */
    if (cchan_lane_id(tid) == 0) smem[cchan_warp_id(tid)] = v;
    __syncthreads();
    float s = 0.0f;
    for (uint32_t w = 0; w < nwarps; w++) s += smem[w];
    return s;
}
#elif defined(CCHAN_BACKEND_HOST)
CCHAN_DEVICE_INLINE float cchan_fused_block_sum(float v, float *smem, uint32_t tid,
                                                uint32_t nthreads) {
    (void)smem;
    (void)tid;
    (void)nthreads; /* a host-backend block is one thread */
    return v;
}
#endif

/* Work unit u of a launch: row u / split, vectors [lo, hi) of it (slice u % split). */
CCHAN_HOST_DEVICE_INLINE void cchan_fused_unit(const cchan_fused_rmsnorm_args_t *a, uint32_t u,
                                               uint32_t *row, uint32_t *lo, uint32_t *hi) {
    const uint32_t nvec = a->hidden / CCHAN_FUSED_VEC_ELEMS, slice = u % a->split;
    *row = u / a->split;
    *lo = (uint32_t)((uint64_t)nvec * slice / a->split);
    *hi = (uint32_t)((uint64_t)nvec * (slice + 1) / a->split);
}

/* Phase 1: this block's slices of x into every peer's scratch. */
CCHAN_DEVICE_INLINE void cchan_fused_send(const cchan_fused_rmsnorm_args_t *a, uint32_t epoch,
                                          uint32_t block, uint32_t nblocks, uint32_t tid,
                                          uint32_t nthreads) {
    const uint32_t nvec = a->hidden / CCHAN_FUSED_VEC_ELEMS;
    const uint32_t parity = epoch & 1u, flag = epoch + 1u;
    const int ll = a->proto == CCHAN_FUSED_PROTO_LL;
    const uint64_t row_bytes =
        ll ? cchan_fused_ll_row_bytes(a->hidden) : cchan_fused_hb_row_bytes(a->hidden);
    const uint64_t base = ll ? a->ll_offset : 0;
    for (uint32_t u = block; u < a->tokens * a->split; u += nblocks) {
        uint32_t row, lo, hi;
        cchan_fused_unit(a, u, &row, &lo, &hi);
        const cchan_vec16_t *xr = (const cchan_vec16_t *)(const void *)a->x + (uint64_t)row * nvec;
        const uint64_t slot =
            base + cchan_fused_slot(parity, a->rank, row, a->nranks, a->max_tokens, row_bytes);
        for (uint32_t v = lo + tid; v < hi; v += nthreads) {
            cchan_vec16_t d = xr[v];
            for (uint32_t i = 1; i < a->nranks; i++) {
                const cchan_memory_channel_t *ch = &a->peers[(a->rank + i) % a->nranks];
                if (ll) {
                    uint64_t off = slot + (uint64_t)v * 32u;
                    cchan_memory_channel_write_packet_ll16(
                        ch, off, (uint64_t)d.w[0] | ((uint64_t)d.w[1] << 32), flag);
                    cchan_memory_channel_write_packet_ll16(
                        ch, off + 16u, (uint64_t)d.w[2] | ((uint64_t)d.w[3] << 32), flag);
                } else {
                    /* HB: plain 16-byte stores through the channel's mapping of the peer's
                     * scratch; the signal in phase 2 orders them. */
                    *(cchan_vec16_t *)(void *)(ch->remote + slot + (uint64_t)v * 16u) = d;
                }
            }
        }
    }
}

/* The row's sum of squares from the split blocks' partial sums: each block publishes its own
 * (tagged with the launch's flag, so the array is reused without clearing) and adds all of them in
 * slice order, so every block and every rank gets the same bits. The blocks of a row are
 * co-resident (split > 1 only when every unit has its own block, at most nchan blocks). */
CCHAN_DEVICE_INLINE int cchan_fused_row_sum(const cchan_fused_rmsnorm_args_t *a, uint32_t u,
                                            uint32_t flag, float mine, uint32_t tid, float *smem,
                                            float *total) {
    int r = CCHAN_OK;
    uint64_t *row = a->partials + (uint64_t)(u / a->split) * CCHAN_FUSED_MAX_SPLIT;
    float sum = 0.0f;
    if (tid == 0) {
        cchan_store_release_dev_u64(&row[u % a->split],
                                    ((uint64_t)flag << 32) | cchan_f32_bits(mine));
        const cchan_wait_ctl_t *ctl = &a->peers[(a->rank + 1) % a->nranks].sem.ctl;
        for (uint32_t j = 0; j < a->split && r == CCHAN_OK; j++) {
            uint64_t v = cchan_load_acquire_dev_u64(&row[j]);
            if ((uint32_t)(v >> 32) != flag) {
                cchan_deadline_t dl;
                cchan_deadline_init(&dl);
                while ((uint32_t)((v = cchan_load_acquire_dev_u64(&row[j])) >> 32) != flag) {
                    if (CCHAN_UNLIKELY(cchan_deadline_spin(&dl, ctl))) {
                        r = cchan_wait_expired(&dl, ctl, CCHAN_WAIT_BARRIER, flag, v >> 32);
                        break;
                    }
                }
            }
            sum += cchan_f32_from_bits((uint32_t)v);
        }
    }
#if defined(CCHAN_BACKEND_HOST)
    (void)smem; /* a host-backend block is one thread: tid is 0 */
#else
    if (tid == 0) smem[32] = sum;
    cchan_block_sync();
    sum = smem[32];
#endif
    *total = sum;
    return r;
}

/* Phase 2 (HB): signal every peer on semaphore `block`, then wait for every peer's signal. */
CCHAN_DEVICE_INLINE int cchan_fused_hb_sync(const cchan_fused_rmsnorm_args_t *a, uint32_t block,
                                            uint32_t tid) {
    int r = CCHAN_OK;
    cchan_block_sync();
#if defined(CCHAN_BACKEND_HOST)
    (void)tid;
    for (uint32_t i = 1; i < a->nranks; i++)
        cchan_memory_channel_signal(&a->chans[((a->rank + i) % a->nranks) * a->nchan + block]);
    for (uint32_t i = 1; i < a->nranks && r == CCHAN_OK; i++)
        r = cchan_memory_channel_wait(&a->chans[((a->rank + i) % a->nranks) * a->nchan + block]);
#else
    if (tid >= 1 && tid < a->nranks) {
        const cchan_memory_channel_t *ch =
            &a->chans[((a->rank + tid) % a->nranks) * a->nchan + block];
        cchan_memory_channel_signal(ch);
        r = cchan_memory_channel_wait(ch);
    }
#endif
    cchan_block_sync();
    return r;
}

/* Phase 3: sum, residual add, RMSNorm for this block's slices. 0 or a device timeout status (host
 * backend; a GPU traps). smem: 33 floats (NULL on the host backend, where a block is one thread).
 */
CCHAN_DEVICE_INLINE int cchan_fused_compute(const cchan_fused_rmsnorm_args_t *a, uint32_t epoch,
                                            uint32_t block, uint32_t nblocks, uint32_t tid,
                                            uint32_t nthreads, float *smem) {
    const uint32_t nvec = a->hidden / CCHAN_FUSED_VEC_ELEMS;
    const uint32_t parity = epoch & 1u, flag = epoch + 1u;
    const int ll = a->proto == CCHAN_FUSED_PROTO_LL;
    const uint64_t row_bytes =
        ll ? cchan_fused_ll_row_bytes(a->hidden) : cchan_fused_hb_row_bytes(a->hidden);
    const uint64_t base = ll ? a->ll_offset : 0;
    const cchan_vec16_t *w = (const cchan_vec16_t *)(const void *)a->weight;
    for (uint32_t u = block; u < a->tokens * a->split; u += nblocks) {
        uint32_t row, lo, hi;
        cchan_fused_unit(a, u, &row, &lo, &hi);
        const uint64_t rv = (uint64_t)row * nvec;
        const cchan_vec16_t *xr = (const cchan_vec16_t *)(const void *)a->x + rv;
        const cchan_vec16_t *res = (const cchan_vec16_t *)(const void *)a->residual + rv;
        cchan_vec16_t *out = (cchan_vec16_t *)(void *)a->residual_out + rv;
        cchan_vec16_t *yr = (cchan_vec16_t *)(void *)a->y + rv;
        float ss = 0.0f;
        /* This thread's first vector of residual_out and its weights, kept in registers. */
        cchan_vec16_t kept, wkept;
        kept.w[0] = kept.w[1] = kept.w[2] = kept.w[3] = 0;
        wkept = kept;
        for (uint32_t v = lo + tid; v < hi; v += nthreads) {
            float acc[CCHAN_FUSED_VEC_ELEMS];
            for (int j = 0; j < CCHAN_FUSED_VEC_ELEMS; j++) acc[j] = 0.0f;
            if (v == lo + tid) wkept = w[v]; /* issued early, used after the reduction */
            for (uint32_t r = 0; r < a->nranks; r++) {
                cchan_vec16_t d;
                if (r == a->rank) {
                    d = xr[v];
                } else {
                    const cchan_memory_channel_t *ch = &a->peers[r];
                    const uint64_t off = base + cchan_fused_slot(parity, r, row, a->nranks,
                                                                 a->max_tokens, row_bytes);
                    if (ll) {
                        uint64_t plo, phi;
                        int st = cchan_memory_channel_read_packet_ll16(ch, off + (uint64_t)v * 32u,
                                                                       flag, &plo);
                        if (st == CCHAN_OK)
                            st = cchan_memory_channel_read_packet_ll16(
                                ch, off + (uint64_t)v * 32u + 16u, flag, &phi);
                        if (CCHAN_UNLIKELY(st != CCHAN_OK)) return st;
                        d.w[0] = (uint32_t)plo;
                        d.w[1] = (uint32_t)(plo >> 32);
                        d.w[2] = (uint32_t)phi;
                        d.w[3] = (uint32_t)(phi >> 32);
                    } else {
                        d = *(const cchan_vec16_t *)(const void *)(ch->local + off +
                                                                   (uint64_t)v * 16u);
                    }
                }
                for (int j = 0; j < 4; j++) {
                    acc[2 * j] += cchan_fused_lo(d.w[j]);
                    acc[2 * j + 1] += cchan_fused_hi(d.w[j]);
                }
            }
            cchan_vec16_t rd = res[v], o;
            for (int j = 0; j < 4; j++) {
                float h0 =
                    cchan_fused_round(cchan_fused_round(acc[2 * j]) + cchan_fused_lo(rd.w[j]));
                float h1 =
                    cchan_fused_round(cchan_fused_round(acc[2 * j + 1]) + cchan_fused_hi(rd.w[j]));
                ss += h0 * h0 + h1 * h1;
                o.w[j] = cchan_fused_pack(h0, h1);
            }
            out[v] = o;
            if (v == lo + tid) kept = o;
        }
        float total = cchan_fused_block_sum(ss, smem, tid, nthreads);
        if (a->split > 1) {
            int st = cchan_fused_row_sum(a, u, flag, total, tid, smem, &total);
            if (CCHAN_UNLIKELY(st != CCHAN_OK)) return st;
        }
        const float inv = 1.0f / sqrtf(total / (float)a->hidden + a->eps);
        /* Vectors past the first were written by this same thread just above: reading them back
         * is coherent. */
        for (uint32_t v = lo + tid; v < hi; v += nthreads) {
            cchan_vec16_t h = v == lo + tid ? kept : out[v], wv = v == lo + tid ? wkept : w[v], o;
            for (int j = 0; j < 4; j++)
                o.w[j] = cchan_fused_pack(cchan_fused_lo(h.w[j]) * inv * cchan_fused_lo(wv.w[j]),
                                          cchan_fused_hi(h.w[j]) * inv * cchan_fused_hi(wv.w[j]));
            yr[v] = o;
        }
    }
    return CCHAN_OK;
}

/* The residual add + RMSNorm of one row without communication (the unfused baseline's second
 * kernel computes exactly this after an all-reduce wrote `a`). */
CCHAN_DEVICE_INLINE void
cchan_fused_residual_rmsnorm_row(const uint16_t *ar, const uint16_t *residual,
                                 const uint16_t *weight, float eps, uint16_t *residual_out,
                                 uint16_t *y, uint32_t row, uint32_t hidden, uint32_t tid,
                                 uint32_t nthreads, float *smem) {
    const uint32_t nvec = hidden / CCHAN_FUSED_VEC_ELEMS;
    const uint64_t rv = (uint64_t)row * nvec;
    const cchan_vec16_t *arr = (const cchan_vec16_t *)(const void *)ar + rv;
    const cchan_vec16_t *res = (const cchan_vec16_t *)(const void *)residual + rv;
    cchan_vec16_t *out = (cchan_vec16_t *)(void *)residual_out + rv;
    cchan_vec16_t *yr = (cchan_vec16_t *)(void *)y + rv;
    float ss = 0.0f;
    cchan_vec16_t kept; /* this thread's first vector of residual_out, kept in registers */
    kept.w[0] = kept.w[1] = kept.w[2] = kept.w[3] = 0;
    for (uint32_t v = tid; v < nvec; v += nthreads) {
        cchan_vec16_t d = arr[v], rd = res[v], o;
        for (int j = 0; j < 4; j++) {
            float h0 = cchan_fused_round(cchan_fused_lo(d.w[j]) + cchan_fused_lo(rd.w[j]));
            float h1 = cchan_fused_round(cchan_fused_hi(d.w[j]) + cchan_fused_hi(rd.w[j]));
            ss += h0 * h0 + h1 * h1;
            o.w[j] = cchan_fused_pack(h0, h1);
        }
        out[v] = o;
        if (v == tid) kept = o;
    }
    const float total = cchan_fused_block_sum(ss, smem, tid, nthreads);
    const float inv = 1.0f / sqrtf(total / (float)hidden + eps);
    const cchan_vec16_t *w = (const cchan_vec16_t *)(const void *)weight;
    for (uint32_t v = tid; v < nvec; v += nthreads) {
        cchan_vec16_t h = v == tid ? kept : out[v], wv = w[v], o;
        for (int j = 0; j < 4; j++)
            o.w[j] = cchan_fused_pack(cchan_fused_lo(h.w[j]) * inv * cchan_fused_lo(wv.w[j]),
                                      cchan_fused_hi(h.w[j]) * inv * cchan_fused_hi(wv.w[j]));
        yr[v] = o;
    }
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_FUSED_RMSNORM_DEVICE_H */
