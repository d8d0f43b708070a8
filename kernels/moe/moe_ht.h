/* cchan MoE high-throughput (HT) kernels: the count exchange of handle creation (moe_ht_meta), and
 * dispatch and combine as chunked pipelines between sending and receiving blocks. Shapes and
 * helpers: moe_kernels.h; the buffer layout: moe_wire.h. Internal to kernels/moe.
 *
 * Co-residency: no block waits for another block of its own kernel, only for peers' flags; the
 * kernels are launched cooperatively all the same, so that a peer's receivers never hold the SMs
 * its senders need (docs/moe.md, "Co-residency").
 */
#ifndef CCHAN_MOE_HT_H
#define CCHAN_MOE_HT_H

#include "moe_kernels.h"

CCHAN_EXTERN_C_BEGIN

/* ------------------------------------------------------------------ layout of the rows
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
                cchan_store_release_sys_u64(&c[d->rank], MOE_HT_COUNT_FLAG(epoch));
            }
            cchan_block_sync();
        }
    }
    if (op->phases & MOE_PHASE_RECV) {
        uint8_t *mine = moe_parity(d, d->rank, epoch);
        const uint64_t *c = (const uint64_t *)(const void *)(mine + d->off_dcnt);
        for (int r = (int)b->tid; r < N; r += (int)b->nthreads) {
            int s = moe_wait(d, &c[r], MOE_EPOCH_MIN(epoch), MOE_WAIT_HTCOUNT, r, (uint32_t)r);
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

/* Warps of a block (a "warp" is one thread on the host backend, where a block is one thread). */
CCHAN_DEVICE_INLINE void moe_warps(const moe_block_t *b, int *lane, int *warp, int *nwarps,
                                   int *width) {
    const int w = b->nthreads >= CCHAN_WARP_SIZE ? CCHAN_WARP_SIZE : 1;
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
    return moe_ht_desc((uint32_t)(op->h_base[r] + lo), (uint32_t)(hi - lo));
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
                if (lane == 0) op->h_src[row] = moe_src_pack(r, (uint32_t)t);
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
                int s2 = moe_wait(d, &f[s * C + c], epoch, MOE_WAIT_HTCHUNK, s, (uint32_t)c);
                if (s2 != CCHAN_OK) st = s2;
                const uint64_t dv = f[N * C + s * C + c];
                op->h_chunk[s * C + c] = dv;
                desc[0] = moe_ht_desc_lo(dv);
                desc[1] = moe_ht_desc_rows(dv);
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
                op->h_src[i] = moe_src_pack(s, (uint32_t)rr[0]);
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
                const int lo = moe_ht_desc_lo(desc), n = moe_ht_desc_rows(desc);
                const int a = lo + (int)((int64_t)n * q / Q),
                          z = lo + (int)((int64_t)n * (q + 1) / Q);
                uint8_t *area =
                    moe_parity(d, s, epoch) + d->off_comb + (uint64_t)d->rank * B * row_bytes;
                for (int i = a + warp; i < z; i += nw) {
                    uint8_t *dst = area + (uint64_t)moe_src_row(op->h_src[i]) * row_bytes;
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
                    uint32_t done = MOE_HT_ALL_DONE;
                    if (q < Q - 1) {
                        const uint64_t desc = op->h_chunk[s * C + c];
                        const int lo = moe_ht_desc_lo(desc), n = moe_ht_desc_rows(desc);
                        const int z = lo + (int)((int64_t)n * (q + 1) / Q);
                        done = z > lo ? moe_src_row(op->h_src[z - 1]) + 1u : 0u;
                    }
                    uint64_t *f = (uint64_t *)(void *)(moe_parity(d, s, epoch) + d->off_hflag);
                    cchan_store_release_sys_u64(&f[2 * N * C + d->rank * C + c],
                                                moe_ht_progress(epoch, done));
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
                    int s =
                        moe_wait(d, &f[2 * N * C + r * C + c], moe_ht_progress(epoch, (uint32_t)g1),
                                 MOE_WAIT_HTPROG, r, (uint32_t)c);
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

CCHAN_EXTERN_C_END

#endif /* CCHAN_MOE_HT_H */
