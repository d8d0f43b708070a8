/* cchan MoE low-latency (LL) kernels: dispatch (a token once to each rank holding one of its
 * experts, into that rank's message slots; the receiver copies each expert's rows out in (rank,
 * token) order) and combine (the expert side sums each token's local experts in f32 and sends one
 * row per (token, rank); the token's rank adds the ranks' rows). Shapes and helpers: moe_kernels.h;
 * the buffer layout: moe_wire.h. Internal to kernels/moe.
 *
 * Co-residency: the dispatch's signalling block waits for the other blocks' `sent` counts, so the
 * kernel is launched cooperatively (moe_cuda.cu); combine's blocks wait only for peers.
 */
#ifndef CCHAN_MOE_LL_H
#define CCHAN_MOE_LL_H

#include "moe_kernels.h"

CCHAN_EXTERN_C_BEGIN

/* ------------------------------------------------------------------ dispatch */

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
                const cchan_lane_mask_t group = cchan_lane_group_mask(cchan_lane_id(b->tid), 16);
                for (int o = 8; o > 0; o >>= 1)
                    amax = fmaxf(amax, cchan_warp_shfl_xor_f32(group, amax, o, 16));
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
            int s = moe_wait(d, &d->sent[r], n, MOE_WAIT_SENT, -1, (uint32_t)r);
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

/* The receive of a message that names expert eg: its index among rank r's messages (the slot),
 * which top-k entry names eg, and the token at its rank; "hit" while scanning the headers, "list
 * entry" once ordered (index, k and token all below MOE_LL_MAX_TOKENS = 4096, k below 16). */
CCHAN_HOST_DEVICE_INLINE uint32_t moe_ll_hit(int k, int32_t token) {
    return 1u | ((uint32_t)k << 1) | ((uint32_t)token << 5);
}
CCHAN_HOST_DEVICE_INLINE int moe_ll_hit_k(uint32_t hit) { return (int)((hit >> 1) & 15u); }
CCHAN_HOST_DEVICE_INLINE uint32_t moe_ll_hit_token(uint32_t hit) { return hit >> 5; }
CCHAN_HOST_DEVICE_INLINE uint32_t moe_ll_entry(int msg, uint32_t hit) {
    return (uint32_t)msg | ((uint32_t)moe_ll_hit_k(hit) << 12) | (moe_ll_hit_token(hit) << 16);
}
CCHAN_HOST_DEVICE_INLINE uint32_t moe_ll_entry_msg(uint32_t v) { return v & 0xfffu; }
CCHAN_HOST_DEVICE_INLINE uint32_t moe_ll_entry_k(uint32_t v) { return (v >> 12) & 15u; }
CCHAN_HOST_DEVICE_INLINE uint32_t moe_ll_entry_token(uint32_t v) { return v >> 16; }

/* Waits for every rank's counter of local expert e; leaves in misc: m_r[N] (messages for e from
 * rank r), n_r[N] (messages from r) and off[N + 1] (first output row of rank r's, and the total).
 */
CCHAN_DEVICE_INLINE int moe_ll_recv_counts(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                           uint32_t epoch, int e) {
    const int N = d->nranks;
    const uint64_t *cnt =
        (const uint64_t *)(const void *)(moe_parity(d, d->rank, epoch) + d->off_dcnt);
    int32_t *m_r = b->misc, *n_r = b->misc + MOE_MAX_RANKS, *off = b->misc + 2 * MOE_MAX_RANKS;
    int st = CCHAN_OK;
    for (int r = (int)b->tid; r < N; r += (int)b->nthreads) {
        const uint64_t *c = &cnt[e * N + r];
        int s = moe_wait(d, c, MOE_EPOCH_MIN(epoch), MOE_WAIT_DCOUNT, r, (uint32_t)e);
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
    return st;
}

/* Finds rank r's messages that name global expert eg (n messages in `region`) and orders them in
 * b->list (moe_ll_entry). The block of the message's first expert on this rank also records, for
 * combine, the token of each message and marks the top-k entries of experts elsewhere; each
 * expert's block fills its own entries (moe_ll_recv_copy). Returns the number found. */
CCHAN_DEVICE_INLINE int moe_ll_recv_scan(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                         const uint8_t *region, int r, int n, int32_t eg) {
    const int L = d->local_experts, B = d->max_tokens, K = d->top_k;
    const uint32_t P = d->slot_bytes;
    for (int a = (int)b->tid; a < n; a += (int)b->nthreads) {
        const moe_msg_header_t *h =
            (const moe_msg_header_t *)(const void *)(region + (uint64_t)a * P);
        uint32_t hit = 0;
        int32_t first = -1; /* the message's first expert on this rank */
        for (int k = 0; k < K; k++) {
            const int32_t x = h->expert[k];
            if (x == eg) hit = moe_ll_hit(k, h->token);
            if (first < 0 && x >= 0 && x / L == d->rank) first = x;
        }
        b->mask[a] = hit;
        if (first == eg) {
            op->h_tok[r * B + a] = h->token;
            int32_t *inv = op->h_inv + ((int64_t)r * B + h->token) * K;
            for (int k = 0; k < K; k++)
                if (!(h->expert[k] >= 0 && h->expert[k] / L == d->rank)) inv[k] = -1;
        }
    }
    cchan_block_sync();
    moe_block_scan_bits(b->mask, n, 1, b->slot, b->total, b->wsum, b->tid, b->nthreads);
    for (int a = (int)b->tid; a < n; a += (int)b->nthreads)
        if (b->mask[a] & 1u) b->list[b->slot[a]] = moe_ll_entry(a, b->mask[a]);
    const int found = (int)b->total[0];
    cchan_block_sync();
    return found;
}

/* Copies the m listed messages of `region` to output rows row0.. (data, and the fp8 scales as
 * extra 16-byte vectors when they are whole ones), and records where each row came from. */
CCHAN_DEVICE_INLINE void moe_ll_recv_copy(const moe_dev_t *d, const moe_op_t *op,
                                          const moe_block_t *b, const uint8_t *region, int r, int m,
                                          int64_t row0) {
    const int H = d->hidden, B = d->max_tokens, K = d->top_k;
    const uint32_t P = d->slot_bytes, hdr = d->hdr_bytes;
    const uint64_t row_bytes = op->fp8 ? (uint64_t)H : (uint64_t)H * 2;
    const int nv = (int)(row_bytes / 16), nscale = H / MOE_SCALE_BLOCK;
    uint8_t *out = (uint8_t *)op->out + (uint64_t)row0 * row_bytes;
    const int ns4 =
        (op->fp8 && nscale % 4 == 0 && ((uintptr_t)op->out_scales & 15) == 0) ? nscale / 4 : 0;
    const int nw = nv + ns4;
    for (int j0 = (int)b->tid; j0 < m * nw; j0 += (int)b->nthreads * MOE_UNROLL) {
        moe_w4_t x[MOE_UNROLL] = {{{0}}}; /* for gcc -O3: every element used was loaded */
        for (int u = 0; u < MOE_UNROLL; u++) {
            int j = j0 + u * (int)b->nthreads;
            if (j >= m * nw) break;
            int i = j / nw, v = j - i * nw;
            const uint8_t *msg = region + (uint64_t)moe_ll_entry_msg(b->list[i]) * P + hdr;
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
            const uint8_t *msg = region + (uint64_t)moe_ll_entry_msg(b->list[i]) * P + hdr;
            op->out_scales[(uint64_t)(row0 + i) * nscale + g] =
                ((const float *)(const void *)(msg + H))[g];
        }
    for (int i = (int)b->tid; i < m; i += (int)b->nthreads) {
        const uint32_t k = moe_ll_entry_k(b->list[i]), tok = moe_ll_entry_token(b->list[i]);
        op->h_src[row0 + i] = moe_src_pack(r, tok * (uint32_t)K + k);
        op->h_inv[((int64_t)r * B + tok) * K + k] = (int32_t)(row0 + i);
    }
    cchan_block_sync();
}

/* Receives for this block's local experts: waits for each rank's counter, finds the messages that
 * name the expert, copies them to the expert-major output in (rank, token) order, and records for
 * combine where each output row came from. */
CCHAN_DEVICE_INLINE int moe_ll_dispatch_recv(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                             uint32_t epoch) {
    const int N = d->nranks, L = d->local_experts, B = d->max_tokens;
    const uint8_t *mine = moe_parity(d, d->rank, epoch);
    const int32_t *m_r = b->misc, *n_r = b->misc + MOE_MAX_RANKS,
                  *off = b->misc + 2 * MOE_MAX_RANKS;
    int st = CCHAN_OK;
    for (int e = (int)b->block; e < L; e += (int)b->nblocks) {
        const int32_t eg = d->rank * L + e;
        int s = moe_ll_recv_counts(d, op, b, epoch, e);
        if (s != CCHAN_OK) st = s;
        for (int r = 0; r < N; r++) {
            const uint8_t *region = mine + d->off_disp + (uint64_t)r * B * d->slot_bytes;
            const int found = moe_ll_recv_scan(d, op, b, region, r, n_r[r], eg);
            if (b->tid == 0 && found != m_r[r]) moe_record_error(d, MOE_ERR_COUNT, eg, r, found);
            moe_ll_recv_copy(d, op, b, region, r, m_r[r] < found ? m_r[r] : found,
                             (int64_t)e * N * B + off[r]);
        }
        if (b->tid == 0) {
            op->h_counts[e] = off[N];
            if (op->out_counts) op->out_counts[e] = off[N];
        }
        cchan_block_sync();
    }
    return st;
}

/* ------------------------------------------------------------------ combine
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

CCHAN_DEVICE_INLINE int moe_ll_combine_send(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                            uint32_t epoch) {
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
                int s2 = moe_wait(d, &wcnt[s], epoch, MOE_WAIT_WEIGHTS, s, (uint32_t)s);
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

CCHAN_DEVICE_INLINE int moe_ll_combine_recv(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                            uint32_t epoch) {
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
                int s = moe_wait(d, &flag[r * B + t], epoch, MOE_WAIT_PARTIAL, r, (uint32_t)t);
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

CCHAN_EXTERN_C_END

#endif /* CCHAN_MOE_LL_H */
