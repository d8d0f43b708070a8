/* MoE test data and host references, shared by the host-backend test (test_moe_host.c) and the GPU
 * test (test/gpu/test_moe_gpu.cu). Every rank can regenerate every rank's tokens and routing from
 * (seed, rank), so each checks its own outputs against a reference it computes alone.
 *
 * Routing patterns (all with distinct experts per token):
 *   MR_RANDOM  uniform top-k
 *   MR_HOT     expert 1 takes ~70% of the tokens, experts 2..5 most of the rest
 *   MR_SPARSE  only experts e % 4 == 0 are used (the others stay empty), some entries -1
 *   MR_PAIRS   each token's experts come in pairs on one rank (a token routed twice to a rank)
 */
#ifndef CCHAN_TEST_MOE_REF_H
#define CCHAN_TEST_MOE_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan/numeric.h"
#include "moe_kernels.h" /* moe_f32_to_e4m3 / moe_e4m3_to_f32: the conversions under test */

enum { MR_RANDOM = 0, MR_HOT = 1, MR_SPARSE = 2, MR_PAIRS = 3, MR_NPATTERNS = 4 };

static inline uint64_t mr_mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline uint16_t mr_bf16(float f) { return cchan_f32_to_bf16(f).bits; }
static inline float mr_f32(uint16_t b) {
    cchan_bf16_t h;
    h.bits = b;
    return cchan_bf16_to_f32(h);
}

/* Token t of rank r: bf16 values in +-[2^-6, 8), one 128-channel group of each token scaled down
 * 2^12 so the fp8 scales differ between groups. */
static inline void mr_tokens(uint64_t seed, int rank, int T, int H, uint16_t *x) {
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            uint64_t z = mr_mix(seed ^ mr_mix((uint64_t)rank * 1000003u + (uint64_t)t * 7919u) ^
                                (uint64_t)h * 0x9E37u);
            float mag = ldexpf(1.0f + (float)(z & 0xffff) / 65536.0f, (int)((z >> 16) % 9) - 6);
            if ((h / 128) == (t % (H / 128 > 0 ? H / 128 : 1)) && H > 128) mag *= 1.0f / 4096.0f;
            x[(size_t)t * H + h] = mr_bf16((z >> 63) ? -mag : mag);
        }
}

static inline void mr_routing(uint64_t seed, int rank, int T, int K, int E, int N, int pattern,
                              int32_t *topk) {
    const int L = E / N;
    for (int t = 0; t < T; t++) {
        int32_t *row = topk + (size_t)t * K;
        uint64_t s = mr_mix(seed * 31u + (uint64_t)rank * 131071u + (uint64_t)t);
        for (int k = 0; k < K; k++) {
            int32_t e = -1;
            for (int tries = 0; tries < 64; tries++) {
                s = mr_mix(s);
                int32_t c;
                switch (pattern) {
                case MR_HOT:
                    c = (k == 0 && (s % 10) < 7) ? 1
                                                 : (int32_t)((s >> 8) % (k < 3 ? 6 : (uint64_t)E));
                    break;
                case MR_SPARSE:
                    if ((s % 8) == 0) {
                        c = -1;
                        break;
                    }
                    c = (int32_t)(((s >> 8) % (uint64_t)((E + 3) / 4)) * 4);
                    break;
                case MR_PAIRS:
                    if (k % 2 == 1 && row[k - 1] >= 0) {
                        int32_t owner = row[k - 1] / L;
                        c = owner * L + (int32_t)((s >> 8) % (uint64_t)L);
                    } else {
                        c = (int32_t)((s >> 8) % (uint64_t)E);
                    }
                    break;
                default: c = (int32_t)((s >> 8) % (uint64_t)E); break;
                }
                if (c < 0) {
                    e = -1;
                    break;
                }
                int dup = 0;
                for (int j = 0; j < k; j++) dup |= row[j] == c;
                if (!dup) {
                    e = c;
                    break;
                }
            }
            row[k] = e;
        }
    }
}

/* Router weights in (0, 1]. */
static inline void mr_weights(uint64_t seed, int rank, int T, int K, float *w) {
    for (int i = 0; i < T * K; i++)
        w[i] = 0.125f +
               (float)(mr_mix(seed ^ 0xabcdefu ^ ((uint64_t)rank << 40) ^ (uint64_t)i) & 1023) /
                   1170.0f;
}

/* The test's "expert FFN": y = bf16(x * a_e + b_e) for global expert e. */
static inline float mr_expert_a(int e) { return 0.5f + 0.03125f * (float)(e % 17); }
static inline float mr_expert_b(int e) { return 0.0078125f * (float)((e % 5) - 2); }
static inline uint16_t mr_expert(int e, uint16_t x) {
    return mr_bf16(mr_f32(x) * mr_expert_a(e) + mr_expert_b(e));
}

/* FP8 reference of one token: what the dispatch kernel must produce, bit for bit. */
static inline void mr_quantize(const uint16_t *x, int H, uint8_t *q, float *scales) {
    for (int g = 0; g < H / 128; g++) {
        float amax = 0.f;
        for (int c = 0; c < 128; c++) {
            float f = fabsf(mr_f32(x[g * 128 + c]));
            amax = f > amax ? f : amax;
        }
        amax = moe_fp8_amax_clamp(amax);
        float inv = 448.0f / amax;
        for (int c = 0; c < 128; c++)
            q[g * 128 + c] = moe_f32_to_e4m3(mr_f32(x[g * 128 + c]) * inv);
        scales[g] = amax / 448.0f;
    }
}

/* Whether a received fp8 token is within tolerance of the original: e4m3 keeps 3 mantissa bits, so
 * |deq - x| <= 2^-4 |x| for normals, and at most half a subnormal step (2^-10 * 448... in scaled
 * units: scale * 2^-10) near zero. Returns the index of the first bad channel, or -1. */
static inline int mr_fp8_within(const uint16_t *x, int H, const uint8_t *q, const float *scales) {
    for (int h = 0; h < H; h++) {
        float want = mr_f32(x[h]);
        float got = moe_e4m3_to_f32(q[h]) * scales[h / 128];
        float tol = fabsf(want) * 0.0625f + scales[h / 128] * (1.0f / 1024.0f) * 1.01f;
        if (!(fabsf(got - want) <= tol)) return h;
    }
    return -1;
}

/* ------------------------------------------------------------------ checks of a rank's outputs */

/* Every rank's tokens, routing and (own) weights for one pass. */
typedef struct mr_pass {
    int n, rank, E, H, K, B;
    int T[8];
    uint16_t *x[8];
    int32_t *topk[8];
    float *w;       /* this rank's router weights */
    float *wall[8]; /* every rank's (HT checks the weights sent along) */
} mr_pass_t;

static inline int mr_routes(const mr_pass_t *p, int r, int t, int eg) {
    for (int k = 0; k < p->K; k++)
        if (p->topk[r][t * p->K + k] == eg) return 1;
    return 0;
}

/* The dispatch output of every local expert: rows in (rank, token) order, bf16 bit-exact, or fp8
 * bit-exact against mr_quantize and within e4m3 tolerance of the input. 0, or 1 with msg. */
static inline int mr_check_dispatch(const mr_pass_t *p, const void *out_x, const float *scales,
                                    const int32_t *counts, int fp8, char *msg, size_t len) {
    const int L = p->E / p->n, NB = p->n * p->B, H = p->H;
    uint8_t q[16384];
    float s[128];
    for (int e = 0; e < L; e++) {
        const int eg = p->rank * L + e;
        int i = 0;
        for (int r = 0; r < p->n; r++)
            for (int t = 0; t < p->T[r]; t++) {
                if (!mr_routes(p, r, t, eg)) continue;
                if (i >= NB) {
                    snprintf(msg, len, "expert %d has more than %d rows", eg, NB);
                    return 1;
                }
                const uint16_t *x = p->x[r] + (size_t)t * H;
                if (!fp8) {
                    const uint16_t *got = (const uint16_t *)out_x + ((size_t)e * NB + i) * H;
                    if (memcmp(got, x, (size_t)H * 2) != 0) {
                        int h = 0;
                        while (got[h] == x[h]) h++;
                        snprintf(msg, len,
                                 "expert %d row %d (rank %d token %d) channel %d: 0x%04x, "
                                 "want 0x%04x",
                                 eg, i, r, t, h, got[h], x[h]);
                        return 1;
                    }
                } else {
                    const uint8_t *got = (const uint8_t *)out_x + ((size_t)e * NB + i) * H;
                    const float *gs = scales + ((size_t)e * NB + i) * (H / 128);
                    mr_quantize(x, H, q, s);
                    if (memcmp(got, q, (size_t)H) != 0 || memcmp(gs, s, (size_t)H / 128 * 4) != 0) {
                        snprintf(msg, len,
                                 "fp8 expert %d row %d (rank %d token %d) differs from "
                                 "the reference quantizer",
                                 eg, i, r, t);
                        return 1;
                    }
                    int bad = mr_fp8_within(x, H, got, gs);
                    if (bad >= 0) {
                        snprintf(msg, len, "fp8 expert %d row %d channel %d out of tolerance", eg,
                                 i, bad);
                        return 1;
                    }
                }
                i++;
            }
        if (counts[e] != i) {
            snprintf(msg, len, "expert %d: count %d, want %d", eg, counts[e], i);
            return 1;
        }
    }
    return 0;
}

/* The test's expert FFN applied to what each local expert received (from the original tokens),
 * rows past the counts poisoned with NaN so that combine must not read them. */
static inline void mr_run_experts(const mr_pass_t *p, uint16_t *y) {
    const int L = p->E / p->n, NB = p->n * p->B, H = p->H;
    for (size_t i = 0; i < (size_t)L * NB * H; i++) y[i] = 0x7fc0;
    for (int e = 0; e < L; e++) {
        const int eg = p->rank * L + e;
        int i = 0;
        for (int r = 0; r < p->n; r++)
            for (int t = 0; t < p->T[r]; t++) {
                if (!mr_routes(p, r, t, eg)) continue;
                const uint16_t *x = p->x[r] + (size_t)t * H;
                uint16_t *row = y + ((size_t)e * NB + i) * H;
                for (int h = 0; h < H; h++) row[h] = mr_expert(eg, x[h]);
                i++;
            }
    }
}

/* combine output against the float64 sum; the tolerance is one bf16 rounding of the result
 * (2^-9 relative) with room for f32 accumulation. */
static inline int mr_check_combine(const mr_pass_t *p, const uint16_t *out, int weighted, char *msg,
                                   size_t len) {
    const int H = p->H, K = p->K, T = p->T[p->rank];
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            double ref = 0, mag = 0;
            uint16_t x = p->x[p->rank][(size_t)t * H + h];
            for (int k = 0; k < K; k++) {
                int e = p->topk[p->rank][t * K + k];
                if (e < 0) continue;
                double term = (weighted ? (double)p->w[t * K + k] : 1.0) * mr_f32(mr_expert(e, x));
                ref += term;
                mag += fabs(term);
            }
            double got = mr_f32(out[(size_t)t * H + h]);
            if (!(fabs(got - ref) <= mag * (1.0 / 256) + 1e-30)) {
                snprintf(msg, len, "token %d channel %d: combine %g, float64 reference %g", t, h,
                         got, ref);
                return 1;
            }
        }
    return 0;
}

/* ------------------------------------------------------------------ HT checks */

static inline int mr_on_rank(const mr_pass_t *p, int r, int t, int dest) {
    const int L = p->E / p->n;
    for (int k = 0; k < p->K; k++) {
        int e = p->topk[r][t * p->K + k];
        if (e >= 0 && e / L == dest) return 1;
    }
    return 0;
}

/* The 2D output: every rank's tokens that have an expert here, rank by rank, in token order, with
 * their routing as local expert ids and their weights; per-expert counts. */
static inline int mr_check_ht_dispatch(const mr_pass_t *p, int rows, const uint16_t *out,
                                       const int32_t *out_topk, const float *out_w,
                                       const int32_t *counts, char *msg, size_t len) {
    const int L = p->E / p->n, H = p->H, K = p->K;
    int i = 0;
    int cnt[4096];
    memset(cnt, 0, sizeof cnt);
    for (int r = 0; r < p->n; r++)
        for (int t = 0; t < p->T[r]; t++) {
            if (!mr_on_rank(p, r, t, p->rank)) continue;
            if (i >= rows) {
                snprintf(msg, len, "more rows expected than the %d received", rows);
                return 1;
            }
            if (memcmp(out + (size_t)i * H, p->x[r] + (size_t)t * H, (size_t)H * 2) != 0) {
                snprintf(msg, len, "row %d (rank %d token %d) differs", i, r, t);
                return 1;
            }
            for (int k = 0; k < K; k++) {
                int e = p->topk[r][t * K + k];
                int want = (e >= 0 && e / L == p->rank) ? e - p->rank * L : -1;
                if (want >= 0) cnt[want]++;
                if (out_topk && out_topk[(size_t)i * K + k] != want) {
                    snprintf(msg, len, "row %d (rank %d token %d) topk[%d] = %d, want %d", i, r, t,
                             k, out_topk[(size_t)i * K + k], want);
                    return 1;
                }
                if (out_w && p->wall[r] && out_w[(size_t)i * K + k] != p->wall[r][t * K + k]) {
                    snprintf(msg, len, "row %d weight %d differs", i, k);
                    return 1;
                }
            }
            i++;
        }
    if (i != rows) {
        snprintf(msg, len, "%d rows received, want %d", rows, i);
        return 1;
    }
    for (int e = 0; e < L; e++)
        if (counts && counts[e] != cnt[e]) {
            snprintf(msg, len, "local expert %d: count %d, want %d", e, counts[e], cnt[e]);
            return 1;
        }
    return 0;
}

/* The expert side of HT: row i's result is the weighted sum over this rank's experts, in bf16. */
static inline void mr_ht_experts(const mr_pass_t *p, uint16_t *y) {
    const int L = p->E / p->n, H = p->H, K = p->K;
    int i = 0;
    for (int r = 0; r < p->n; r++)
        for (int t = 0; t < p->T[r]; t++) {
            if (!mr_on_rank(p, r, t, p->rank)) continue;
            for (int h = 0; h < H; h++) {
                float acc = 0;
                uint16_t x = p->x[r][(size_t)t * H + h];
                for (int k = 0; k < K; k++) {
                    int e = p->topk[r][t * K + k];
                    if (e >= 0 && e / L == p->rank)
                        acc += p->wall[r][t * K + k] * mr_f32(mr_expert(e, x));
                }
                y[(size_t)i * H + h] = mr_bf16(acc);
            }
            i++;
        }
}

/* out[t] = sum over the ranks token t went to of that rank's row (float64 reference). */
static inline int mr_check_ht_combine(const mr_pass_t *p, const uint16_t *out, char *msg,
                                      size_t len) {
    const int L = p->E / p->n, H = p->H, K = p->K, me = p->rank;
    for (int t = 0; t < p->T[me]; t++)
        for (int h = 0; h < H; h++) {
            double ref = 0, mag = 0;
            uint16_t x = p->x[me][(size_t)t * H + h];
            for (int r = 0; r < p->n; r++) {
                if (!mr_on_rank(p, me, t, r)) continue;
                float acc = 0;
                for (int k = 0; k < K; k++) {
                    int e = p->topk[me][t * K + k];
                    if (e >= 0 && e / L == r)
                        acc += p->wall[me][t * K + k] * mr_f32(mr_expert(e, x));
                }
                double term = mr_f32(mr_bf16(acc));
                ref += term;
                mag += fabs(term);
            }
            double got = mr_f32(out[(size_t)t * H + h]);
            if (!(fabs(got - ref) <= mag * (1.0 / 256) + 1e-30)) {
                snprintf(msg, len, "token %d channel %d: combine %g, float64 reference %g", t, h,
                         got, ref);
                return 1;
            }
        }
    return 0;
}

#endif /* CCHAN_TEST_MOE_REF_H */
