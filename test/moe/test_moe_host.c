/* cchan_moe on the host backend (CPU threads over shared memory), N ranks under cchan-run:
 * low-latency dispatch (bf16 bit-exact; fp8 bit-exact against the reference quantizer and within
 * e4m3 tolerance of the input) and combine (against a float64 reference), with random, hot-expert,
 * sparse (empty experts, -1 entries) and paired (two experts on one rank) routing, uneven and zero
 * token counts, repeated passes, staged send_only/complete with two operations in flight, and the
 * errors: bad configurations, ranks that disagree, too many tokens, out-of-range and repeated
 * expert ids, calls out of order, a peer that never sends (the timeout names the counter), and an
 * aborted communicator (the wait ends, naming the counter).
 *
 *   cchan-run -n 2 build/test/moe/test_moe_host
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan_moe.h"
#include "moe_ht.h" /* moe_warps */
#include "moe_ref.h"

static int g_rank = -1;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", g_rank, __FILE__, __LINE__,      \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define OK(call)                                                                                   \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_) {                                                                                 \
            fprintf(stderr, "rank %d: %s:%d: %s = %d (%s): %s\n", g_rank, __FILE__, __LINE__,      \
                    #call, rc_, cchan_strerror(rc_), cchan_moe_last_error());                      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define FAILS(call, status, part)                                                                  \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != (status) || !strstr(cchan_moe_last_error(), (part))) {                          \
            fprintf(stderr, "rank %d: %s:%d: %s = %d, want %d with '%s'; error: %s\n", g_rank,     \
                    __FILE__, __LINE__, #call, rc_, (int)(status), (part),                         \
                    cchan_moe_last_error());                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct tcase {
    const char *name;
    int E, H, K, B, pattern, iters;
} tcase_t;

static cchan_comm_t *g_comm;
static int g_n;

static int tokens_of(const tcase_t *c, int rank, int iter) {
    if (iter == 1 && rank == g_n - 1) return 0; /* a rank with nothing to send */
    int t = c->B - (rank * 3 + iter) % (c->B > 4 ? 5 : 1);
    return t < 1 ? 1 : t;
}

static void pass_make(mr_pass_t *p, const tcase_t *c, uint64_t seed, int iter) {
    memset(p, 0, sizeof *p);
    p->n = g_n;
    p->rank = g_rank;
    p->E = c->E;
    p->H = c->H;
    p->K = c->K;
    p->B = c->B;
    for (int r = 0; r < g_n; r++) {
        p->T[r] = tokens_of(c, r, iter);
        p->x[r] = aligned_alloc(16, (size_t)c->B * c->H * 2 + 16);
        p->topk[r] = malloc((size_t)c->B * c->K * 4 + 16);
        mr_tokens(seed, r, p->T[r], c->H, p->x[r]);
        mr_routing(seed, r, p->T[r], c->K, c->E, g_n, c->pattern, p->topk[r]);
    }
    for (int r = 0; r < g_n; r++) {
        p->wall[r] = malloc((size_t)c->B * c->K * 4 + 16);
        mr_weights(seed, r, p->T[r], c->K, p->wall[r]);
    }
    p->w = p->wall[g_rank];
}

static void pass_free(mr_pass_t *p) {
    for (int r = 0; r < g_n; r++) {
        free(p->x[r]);
        free(p->topk[r]);
        free(p->wall[r]);
    }
}

typedef struct outs {
    uint8_t *x;    /* [L][N*B][H] bf16 or fp8 */
    float *scales; /* [L][N*B][H/128] */
    int32_t *counts;
    uint16_t *y;    /* expert outputs, bf16 */
    uint16_t *comb; /* [B][H] */
} outs_t;

static void outs_make(outs_t *o, const tcase_t *c) {
    const int L = c->E / g_n, NB = g_n * c->B;
    o->x = aligned_alloc(16, (size_t)L * NB * c->H * 2);
    o->scales = malloc((size_t)L * NB * (c->H / 128) * 4);
    o->counts = malloc((size_t)L * 4);
    o->y = aligned_alloc(16, (size_t)L * NB * c->H * 2);
    o->comb = aligned_alloc(16, (size_t)c->B * c->H * 2 + 16);
    memset(o->x, 0xa5, (size_t)L * NB * c->H * 2);
    memset(o->counts, 0xff, (size_t)L * 4);
}

static void outs_free(outs_t *o) {
    free(o->x);
    free(o->scales);
    free(o->counts);
    free(o->y);
    free(o->comb);
}

static void check_dispatch(const mr_pass_t *p, const outs_t *o, int fp8, const char *what) {
    char msg[512];
    CHECK(!mr_check_dispatch(p, o->x, o->scales, o->counts, fp8, msg, sizeof msg), "%s: %s", what,
          msg);
}

static void check_combine(const mr_pass_t *p, const outs_t *o, int weighted, const char *what) {
    char msg[512];
    CHECK(!mr_check_combine(p, o->comb, weighted, msg, sizeof msg), "%s: %s", what, msg);
}

static cchan_moe_group_t *group_for(const tcase_t *c) {
    cchan_moe_config_t cfg = CCHAN_MOE_CONFIG_INIT;
    cfg.num_experts = c->E;
    cfg.hidden = c->H;
    cfg.top_k = c->K;
    cfg.max_tokens_per_rank = c->B;
    cchan_moe_group_t *g = NULL;
    OK(cchan_moe_group_create(g_comm, &cfg, &g));
    return g;
}

static void run_case(const tcase_t *c) {
    if (c->E % g_n) return;
    cchan_moe_group_t *g = group_for(c);
    outs_t o[2];
    outs_make(&o[0], c);
    outs_make(&o[1], c);
    for (int iter = 0; iter < c->iters; iter++) {
        char what[128];
        const uint64_t seed =
            mr_mix((uint64_t)iter * 977u + (uint64_t)c->pattern * 31u + (uint64_t)c->H);
        const int fp8 = iter % 2 == 1;
        const cchan_moe_dtype_t dt = fp8 ? CCHAN_MOE_FP8_E4M3 : CCHAN_MOE_BF16;
        if (iter % 3 != 2) {
            snprintf(what, sizeof what, "%s pass %d (%s)", c->name, iter, fp8 ? "fp8" : "bf16");
            mr_pass_t p;
            pass_make(&p, c, seed, iter);
            cchan_moe_handle_t *h = NULL;
            OK(cchan_moe_handle_create(g, p.topk[g_rank], p.T[g_rank], NULL, &h));
            cchan_moe_dispatch_args_t a = {0};
            a.x = p.x[g_rank];
            a.dtype = dt;
            a.out_x = o[0].x;
            a.out_scales = o[0].scales;
            a.out_counts = o[0].counts;
            OK(cchan_moe_dispatch(h, &a, 0, NULL));
            check_dispatch(&p, &o[0], fp8, what);
            int nrecv = -1;
            OK(cchan_moe_handle_num_recv_tokens(h, NULL, &nrecv));
            int sum = 0;
            for (int e = 0; e < c->E / g_n; e++) sum += o[0].counts[e];
            CHECK(nrecv == sum, "%s: num_recv_tokens %d, counts sum to %d", what, nrecv, sum);
            mr_run_experts(&p, o[0].y);
            const int weighted = iter != 1;
            OK(cchan_moe_combine(h, o[0].y, weighted ? p.w : NULL, o[0].comb, 0, NULL));
            check_combine(&p, &o[0], weighted, what);
            OK(cchan_moe_check(g));
            OK(cchan_moe_handle_destroy(h));
            pass_free(&p);
        } else {
            /* Two passes staged: both dispatches in flight, then both combines. */
            mr_pass_t p[2];
            cchan_moe_handle_t *h[2];
            cchan_moe_dispatch_args_t a[2];
            for (int j = 0; j < 2; j++) {
                pass_make(&p[j], c, seed + (uint64_t)j * 0x1234567u, iter + j);
                OK(cchan_moe_handle_create(g, p[j].topk[g_rank], p[j].T[g_rank], NULL, &h[j]));
                memset(&a[j], 0, sizeof a[j]);
                a[j].x = p[j].x[g_rank];
                a[j].dtype = j ? CCHAN_MOE_FP8_E4M3 : CCHAN_MOE_BF16;
                a[j].out_x = o[j].x;
                a[j].out_scales = o[j].scales;
                a[j].out_counts = o[j].counts;
                OK(cchan_moe_dispatch(h[j], &a[j], 1, NULL));
            }
            FAILS(cchan_moe_combine(h[0], o[0].y, NULL, o[0].comb, 0, NULL), -EINVAL,
                  "has not been completed");
            for (int j = 0; j < 2; j++) {
                OK(cchan_moe_complete(h[j], NULL));
                snprintf(what, sizeof what, "%s staged pass %d.%d", c->name, iter, j);
                check_dispatch(&p[j], &o[j], j, what);
                mr_run_experts(&p[j], o[j].y);
            }
            for (int j = 0; j < 2; j++)
                OK(cchan_moe_combine(h[j], o[j].y, p[j].w, o[j].comb, 1, NULL));
            for (int j = 0; j < 2; j++) {
                OK(cchan_moe_complete(h[j], NULL));
                snprintf(what, sizeof what, "%s staged pass %d.%d", c->name, iter, j);
                check_combine(&p[j], &o[j], 1, what);
                FAILS(cchan_moe_complete(h[j], NULL), -EINVAL, "no staged");
                OK(cchan_moe_handle_destroy(h[j]));
                pass_free(&p[j]);
            }
        }
    }
    outs_free(&o[0]);
    outs_free(&o[1]);
    OK(cchan_moe_group_destroy(g));
    if (g_rank == 0) printf("ok %s (%d passes)\n", c->name, c->iters);
}

/* High-throughput mode: 2D output in (rank, token) order with routing and weights, per-expert
 * counts, combine summing each token's rows over ranks; plain and staged passes. */
static void run_ht_case(const tcase_t *c) {
    if (c->E % g_n) return;
    cchan_moe_config_t cfg = CCHAN_MOE_CONFIG_INIT;
    cfg.mode = CCHAN_MOE_HIGH_THROUGHPUT;
    cfg.num_experts = c->E;
    cfg.hidden = c->H;
    cfg.top_k = c->K;
    cfg.max_tokens_per_rank = c->B;
    cchan_moe_group_t *g = NULL;
    OK(cchan_moe_group_create(g_comm, &cfg, &g));
    const size_t rows_max = (size_t)g_n * c->B;
    uint16_t *out = aligned_alloc(16, rows_max * c->H * 2);
    uint16_t *y = aligned_alloc(16, rows_max * c->H * 2 + 16);
    uint16_t *comb = aligned_alloc(16, (size_t)c->B * c->H * 2 + 16);
    int32_t *otopk = malloc(rows_max * c->K * 4);
    float *ow = malloc(rows_max * c->K * 4);
    int32_t *counts = malloc((size_t)(c->E / g_n) * 4);
    for (int iter = 0; iter < c->iters; iter++) {
        char what[128], msg[512];
        snprintf(what, sizeof what, "HT %s pass %d", c->name, iter);
        mr_pass_t p;
        pass_make(&p, c, mr_mix(0x4854u + (uint64_t)iter * 13u + (uint64_t)c->pattern), iter);
        cchan_moe_handle_t *h = NULL;
        OK(cchan_moe_handle_create(g, p.topk[g_rank], p.T[g_rank], NULL, &h));
        int rows = -1;
        OK(cchan_moe_handle_num_recv_tokens(h, NULL, &rows));
        cchan_moe_dispatch_args_t a = {0};
        a.x = p.x[g_rank];
        a.dtype = CCHAN_MOE_BF16;
        a.out_x = out;
        a.out_counts = counts;
        a.topk_weights = p.w;
        a.out_topk = otopk;
        a.out_weights = ow;
        const int staged = iter % 2 == 1;
        OK(cchan_moe_dispatch(h, &a, staged, NULL));
        if (staged) OK(cchan_moe_complete(h, NULL));
        CHECK(!mr_check_ht_dispatch(&p, rows, out, otopk, ow, counts, msg, sizeof msg), "%s: %s",
              what, msg);
        mr_ht_experts(&p, y);
        OK(cchan_moe_combine(h, y, NULL, comb, staged, NULL));
        if (staged) OK(cchan_moe_complete(h, NULL));
        CHECK(!mr_check_ht_combine(&p, comb, msg, sizeof msg), "%s: %s", what, msg);
        OK(cchan_moe_check(g));
        OK(cchan_moe_handle_destroy(h));
        pass_free(&p);
    }
    free(out);
    free(y);
    free(comb);
    free(otopk);
    free(ow);
    free(counts);
    OK(cchan_moe_group_destroy(g));
    if (g_rank == 0) printf("ok HT %s (%d passes)\n", c->name, c->iters);
}

static void error_cases(void) {
    const int E = 8 * g_n;
    cchan_moe_config_t cfg = CCHAN_MOE_CONFIG_INIT;
    cchan_moe_group_t *g = NULL;
    cfg.num_experts = E;
    cfg.hidden = 200;
    cfg.top_k = 2;
    cfg.max_tokens_per_rank = 4;
    FAILS(cchan_moe_group_create(g_comm, &cfg, &g), -EINVAL, "multiple of 128");
    cfg.hidden = 128;
    cfg.num_experts = E + 1;
    FAILS(cchan_moe_group_create(g_comm, &cfg, &g), -EINVAL, "multiple of the");
    cfg.num_experts = E;
    cfg.top_k = 17;
    FAILS(cchan_moe_group_create(g_comm, &cfg, &g), -EINVAL, "top_k");
    cfg.top_k = 2;
    cfg.max_tokens_per_rank = 5000;
    FAILS(cchan_moe_group_create(g_comm, &cfg, &g), -EINVAL, "max_tokens_per_rank");
    cfg.max_tokens_per_rank = 4;
    cchan_moe_config_t raw = cfg;
    raw.magic = 0;
    FAILS(cchan_moe_group_create(g_comm, &raw, &g), -EINVAL, "CCHAN_MOE_CONFIG_INIT");
    /* ranks that disagree all fail, and nobody hangs */
    cchan_moe_config_t odd = cfg;
    if (g_rank == g_n - 1) odd.hidden = 256;
    FAILS(cchan_moe_group_create(g_comm, &odd, &g), -EINVAL, "differs");

    OK(cchan_moe_group_create(g_comm, &cfg, &g));
    int32_t topk[5 * 2];
    uint16_t x[5 * 128];
    for (int i = 0; i < 5 * 128; i++) x[i] = mr_bf16(1.0f);
    cchan_moe_handle_t *h = NULL;
    FAILS(cchan_moe_handle_create(g, topk, 5, NULL, &h), CCHAN_ERR_RANGE, "at most 4");
    FAILS(cchan_moe_handle_create(g, NULL, 2, NULL, &h), -EINVAL, "NULL");
    /* token 1 names expert E (out of range), token 2 repeats an expert: both ignored, reported */
    int32_t bad[4 * 2] = {0, 1, E, 2, 3, 3, -1, -1};
    OK(cchan_moe_handle_create(g, bad, 4, NULL, &h));
    uint16_t *out = aligned_alloc(16, (size_t)(E / g_n) * g_n * 4 * 128 * 2);
    uint16_t *comb = aligned_alloc(16, 4 * 128 * 2);
    int32_t counts[64];
    FAILS(cchan_moe_combine(h, out, NULL, comb, 0, NULL), -EINVAL, "needs a dispatch");
    FAILS(cchan_moe_complete(h, NULL), -EINVAL, "no staged");
    cchan_moe_dispatch_args_t a = {0};
    a.x = x;
    a.dtype = CCHAN_MOE_FP8_E4M3;
    a.out_x = out;
    FAILS(cchan_moe_dispatch(h, &a, 0, NULL), -EINVAL, "out_scales");
    a.dtype = CCHAN_MOE_BF16;
    a.out_counts = counts;
    OK(cchan_moe_dispatch(h, &a, 0, NULL));
    int st = cchan_moe_check(g);
    CHECK(st == CCHAN_ERR_RANGE && strstr(cchan_moe_last_error(), "outside"), "check = %d: %s", st,
          cchan_moe_last_error());
    /* the routing as the kernels saw it: {0,1}, {-1,2}, {3,-1}, {} */
    int total = 0;
    for (int e = 0; e < E / g_n; e++) total += counts[e];
    int want = 0;
    const int32_t seen[8] = {0, 1, -1, 2, 3, -1, -1, -1};
    for (int r = 0; r < g_n; r++)
        for (int i = 0; i < 8; i++) want += seen[i] >= 0 && seen[i] / (E / g_n) == g_rank;
    CHECK(total == want, "rows after dropping bad ids: %d, want %d", total, want);
    OK(cchan_moe_combine(h, out, NULL, comb, 0, NULL));
    OK(cchan_moe_handle_destroy(h));
    OK(cchan_moe_group_destroy(g));
    free(out);
    free(comb);
    if (g_rank == 0) printf("ok errors\n");
}

/* A peer that never sends: rank 0's dispatch (LL) and handle creation (HT) wait for rank 1's
 * counters until the deadline, then fail naming the counter, the rank and the values. The other
 * ranks only take part in the collective calls. */
static void timeout_cases(void) {
    const uint64_t deadline_ms = 300;
    OK(cchan_comm_set_timeout_ms(g_comm, deadline_ms));
    cchan_moe_config_t cfg = CCHAN_MOE_CONFIG_INIT;
    cfg.num_experts = 4 * g_n;
    cfg.hidden = 128;
    cfg.top_k = 2;
    cfg.max_tokens_per_rank = 4;
    cfg.num_blocks = 1;
    int32_t topk[4 * 2] = {0, 4, 1, 5, 2, 6, 3, 7}; /* experts of ranks 0 and 1 */
    uint16_t x[4 * 128];
    for (int i = 0; i < 4 * 128; i++) x[i] = mr_bf16(0.5f);
    uint16_t *out = aligned_alloc(16, (size_t)4 * g_n * 4 * 128 * 2);
    cchan_moe_group_t *g = NULL;
    cchan_moe_handle_t *h = NULL;
    OK(cchan_moe_group_create(g_comm, &cfg, &g));
    OK(cchan_moe_handle_create(g, topk, 4, NULL, &h));
    if (g_rank == 0) {
        cchan_moe_dispatch_args_t a = {0};
        a.x = x;
        a.dtype = CCHAN_MOE_BF16;
        a.out_x = out;
        FAILS(cchan_moe_dispatch(h, &a, 0, NULL), CCHAN_ERR_DEVICE_TIMEOUT,
              "rank 0 timed out after "); /* 0.3 s or more: a loaded host reads the clock late */
        const char *want[] = {
            "cchan_moe_dispatch", "LL dispatch counter of expert 0",         "(local expert 0)",
            "from rank 1",        "expected epoch 1 (value >= 0x100000000)", "observed epoch 0"};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            CHECK(strstr(cchan_moe_last_error(), want[i]), "diagnostic lacks '%s': %s", want[i],
                  cchan_moe_last_error());
        printf("ok LL timeout: %s\n", cchan_moe_last_error());
        OK(cchan_moe_check(g)); /* reported once, then cleared */
    }
    OK(cchan_moe_handle_destroy(h));
    OK(cchan_moe_group_destroy(g));

    cfg.mode = CCHAN_MOE_HIGH_THROUGHPUT;
    OK(cchan_moe_group_create(g_comm, &cfg, &g));
    if (g_rank == 0) {
        FAILS(cchan_moe_handle_create(g, topk, 4, NULL, &h), CCHAN_ERR_DEVICE_TIMEOUT,
              "HT token counts (handle creation) from rank 1");
        CHECK(strstr(cchan_moe_last_error(), "expected epoch 1"), "diagnostic: %s",
              cchan_moe_last_error());
        printf("ok HT timeout: %s\n", cchan_moe_last_error());
    }
    OK(cchan_moe_group_destroy(g));
    free(out);
    OK(cchan_comm_set_timeout_ms(g_comm, 30000));
}

/* The communicator aborted while rank 0's dispatch waits for rank 1 (which calls cchan_comm_abort
 * instead of dispatching): the wait ends without a deadline, naming the counter and the abort.
 * Last: the communicator is unusable afterwards. */
static void abort_case(void) {
    cchan_moe_config_t cfg = CCHAN_MOE_CONFIG_INIT;
    cfg.num_experts = 4 * g_n;
    cfg.hidden = 128;
    cfg.top_k = 2;
    cfg.max_tokens_per_rank = 4;
    cfg.num_blocks = 1;
    int32_t topk[4 * 2] = {0, 4, 1, 5, 2, 6, 3, 7};
    uint16_t x[4 * 128];
    for (int i = 0; i < 4 * 128; i++) x[i] = mr_bf16(0.5f);
    uint16_t *out = aligned_alloc(16, (size_t)4 * g_n * 4 * 128 * 2);
    cchan_moe_group_t *g = NULL;
    cchan_moe_handle_t *h = NULL;
    OK(cchan_moe_group_create(g_comm, &cfg, &g));
    OK(cchan_moe_handle_create(g, topk, 4, NULL, &h));
    if (g_rank == 0) {
        cchan_moe_dispatch_args_t a = {0};
        a.x = x;
        a.dtype = CCHAN_MOE_BF16;
        a.out_x = out;
        FAILS(cchan_moe_dispatch(h, &a, 0, NULL), CCHAN_ERR_ABORTED,
              "ended by the communicator's abort");
        CHECK(strstr(cchan_moe_last_error(), "LL dispatch counter of expert 0") &&
                  strstr(cchan_moe_last_error(), "from rank 1"),
              "diagnostic: %s", cchan_moe_last_error());
        printf("ok LL abort: %s\n", cchan_moe_last_error());
    } else if (g_rank == 1) {
        OK(cchan_comm_abort(g_comm));
    }
    OK(cchan_moe_handle_destroy(h));
    (void)cchan_moe_group_destroy(g); /* its barriers fail: the communicator is aborted */
    free(out);
}

/* The HT kernels' warps of a block: on a GPU-sized block, groups of CCHAN_WARP_SIZE lanes (64 in
 * the wave64 build) that are the hardware's warps; on the host backend's one-thread block, one
 * lane. */
static void warp_split(void) {
    for (uint32_t nthreads = 1; nthreads <= 1024; nthreads = nthreads == 1 ? 128 : nthreads * 2) {
        moe_block_t b;
        memset(&b, 0, sizeof b);
        b.nthreads = nthreads;
        for (b.tid = 0; b.tid < nthreads; b.tid++) {
            int lane, warp, nw, width;
            moe_warps(&b, &lane, &warp, &nw, &width);
            const int want = nthreads == 1 ? 1 : CCHAN_WARP_SIZE;
            CHECK(width == want && nw == (int)nthreads / want, "%u threads: %d warps of %d lanes",
                  nthreads, nw, width);
            CHECK(warp == (int)b.tid / want && lane == (int)b.tid % want && warp < nw,
                  "thread %u of %u: lane %d of warp %d", b.tid, nthreads, lane, warp);
        }
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    cchan_bootstrap_t *bs = NULL;
    cchan_comm_config_t ccfg = CCHAN_COMM_CONFIG_INIT;
    ccfg.platform = CCHAN_PLATFORM_HOST;
    if (cchan_bootstrap_create_from_env(&bs) || cchan_comm_create(bs, &ccfg, &g_comm)) {
        fprintf(stderr, "bootstrap/comm: %s\n", cchan_last_error());
        return 1;
    }
    g_rank = cchan_comm_rank(g_comm);
    g_n = cchan_comm_size(g_comm);
    warp_split();
    if (g_n > MOE_MAX_RANKS) {
        printf("SKIP: %d ranks > %d\n", g_n, MOE_MAX_RANKS);
        return 77;
    }
    if (cchan_comm_set_timeout_ms(g_comm, 30000)) return 1;
    static const tcase_t cases[] = {
        {"random-small", 24, 256, 4, 16, MR_RANDOM, 6}, {"hot", 48, 128, 8, 128, MR_HOT, 3},
        {"sparse", 24, 384, 6, 33, MR_SPARSE, 3},       {"pairs", 24, 128, 4, 64, MR_PAIRS, 3},
        {"top1", 12, 128, 1, 8, MR_RANDOM, 3},          {"wide", 24, 1024, 4, 12, MR_HOT, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_ht_case(&cases[i]);
    error_cases();
    timeout_cases();
    abort_case();
    cchan_comm_destroy(g_comm);
    if (g_rank == 0) printf("test_moe_host: all passed on %d ranks\n", g_n);
    return 0;
}
