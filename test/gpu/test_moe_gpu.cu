/* cchan_moe (kernels/moe), 2 to 8 ranks, one process per rank (GPUs of their own or shared).
 *
 *   cchan-run -n N --timeout 600 build/test/gpu/test_moe_gpu [--case NAME,...] [--list]
 *
 * Token counts per rank are written for a pair (even ranks, odd ranks); mg_tokens spreads them over
 * every rank.
 *
 * Low-latency mode at the DeepSeek-V3 shape (256 experts, hidden 7168, top-8) with 1, 7 and 128
 * tokens per rank and random, hot-expert, sparse (empty experts, -1 entries) and paired (two
 * experts on one rank) routing: bf16 dispatch bit-exact, fp8 dispatch bit-exact against the host
 * reference quantizer and within e4m3 tolerance, combine against a float64 reference; a small shape
 * on 8 blocks (fewer blocks than experts); 4096 tokens per rank; staged send_only/complete with two
 * operations in flight; 20 replays of a captured CUDA graph (dispatch + combine) with new data each
 * time; out-of-range expert ids reported by cchan_moe_check. High-throughput mode: 2D output in
 * (rank, token) order with routing and weights, per-expert counts, combine summed over ranks, at
 * 4096 tokens per rank and on a small shape (5 blocks, a rank with no tokens, staged passes).
 * ll_deepseek, ll_graph, ll_4096 and ht_4096 again beside a busy kernel on another stream (*_busy),
 * and a dispatch whose peer never sends (ll_timeout_trap, GT_TRAPS), whose timeout must name the
 * counter.
 */
#include "gpu_test.h"

#include "../moe/moe_ref.h"
#include "cchan_moe.h"

#define MG_OK(ctx, call)                                                                           \
    do {                                                                                           \
        int st_ = (call);                                                                          \
        if (st_ != 0) {                                                                            \
            printf("[r%d] FATAL %s:%d: %s = %d (%s): %s\n", (ctx)->rank, __FILE__, __LINE__,       \
                   #call, st_, cchan_strerror(st_), cchan_moe_last_error());                       \
            gt_die();                                                                              \
        }                                                                                          \
    } while (0)

typedef struct mg_shape {
    int E, H, K, B, blocks;
} mg_shape_t;

/* ------------------------------------------------------------------ a busy neighbour
 *
 * The *_busy cases start the harness's hog (gt_hog: a kernel spinning on another stream on about
 * 3/4 of this rank's share of the SMs, filling each SM's threads, ending on its own) before every
 * MoE call, once it runs: the call must wait for SMs, never deadlock, and stay correct. */
#define MG_BUSY_MS 20

typedef struct mg_busy {
    int on, live, kicks;
    unsigned long long blocks, ran;
    gt_hog_t hog;
} mg_busy_t;
static mg_busy_t g_busy;

/* The last hog ended: count its blocks that ran. */
static void mg_busy_reap(gt_ctx_t *ctx) {
    if (!g_busy.live) return;
    GT_CUDA(cudaEventSynchronize(g_busy.hog.done));
    g_busy.ran += g_busy.hog.started[0];
    g_busy.blocks += g_busy.hog.blocks;
    gt_hog_end(ctx, &g_busy.hog);
    g_busy.live = 0;
}

/* Before a MoE call: a new hog, which the call's stream does not wait for. */
static void mg_busy_kick(gt_ctx_t *ctx) {
    if (!g_busy.on) return;
    mg_busy_reap(ctx);
    gt_hog_start(ctx, &g_busy.hog, 0.75 / (ctx->ranks_on_gpu > 0 ? ctx->ranks_on_gpu : 1),
                 MG_BUSY_MS);
    g_busy.live = 1;
    g_busy.kicks++;
}

static void mg_busy_start(void) {
    memset(&g_busy, 0, sizeof g_busy);
    g_busy.on = 1;
}

/* Ends a busy case: every hog ran all its blocks to the end. */
static void mg_busy_stop(gt_ctx_t *ctx) {
    mg_busy_reap(ctx);
    GT_EXPECT(ctx, g_busy.kicks > 0 && g_busy.ran == g_busy.blocks,
              "busy kernels: %llu of %llu blocks ran (%d launches)", g_busy.ran, g_busy.blocks,
              g_busy.kicks);
    if (ctx->rank == 0)
        gt_log(ctx, "beside %d busy kernels (%llu blocks in all, %d ms each)", g_busy.kicks,
               g_busy.blocks, MG_BUSY_MS);
    g_busy.on = 0;
}

/* Device buffers of one group's outputs. */
typedef struct mg_bufs {
    mg_shape_t s;
    int n, L, NB;
    uint16_t *x;     /* [B][H] */
    uint8_t *out_x;  /* [L][NB][H] bf16 (or fp8) */
    float *scales;   /* [L][NB][H/128] */
    int32_t *counts; /* [L] */
    uint16_t *y;     /* [L][NB][H] */
    uint16_t *comb;  /* [B][H] */
    float *w;        /* [B][K] */
    int32_t *topk;   /* [B][K] */
    /* host mirrors (only valid rows are touched) */
    uint8_t *h_out;
    float *h_scales;
    int32_t *h_counts;
    uint16_t *h_y, *h_comb;
} mg_bufs_t;

static void mg_bufs_make(gt_ctx_t *ctx, mg_bufs_t *b, mg_shape_t s) {
    memset(b, 0, sizeof *b);
    b->s = s;
    b->n = ctx->nranks;
    b->L = s.E / b->n;
    b->NB = b->n * s.B;
    const size_t rows = (size_t)b->L * b->NB;
    GT_CUDA(cudaMalloc((void **)&b->x, (size_t)s.B * s.H * 2));
    GT_CUDA(cudaMalloc((void **)&b->out_x, rows * s.H * 2));
    GT_CUDA(cudaMalloc((void **)&b->scales, rows * (s.H / 128) * 4));
    GT_CUDA(cudaMalloc((void **)&b->counts, (size_t)b->L * 4));
    GT_CUDA(cudaMalloc((void **)&b->y, rows * s.H * 2));
    GT_CUDA(cudaMalloc((void **)&b->comb, (size_t)s.B * s.H * 2));
    GT_CUDA(cudaMalloc((void **)&b->w, (size_t)s.B * s.K * 4));
    GT_CUDA(cudaMalloc((void **)&b->topk, (size_t)s.B * s.K * 4));
    b->h_out = (uint8_t *)malloc(rows * s.H * 2);
    b->h_scales = (float *)malloc(rows * (s.H / 128) * 4);
    b->h_counts = (int32_t *)malloc((size_t)b->L * 4);
    b->h_y = (uint16_t *)malloc(rows * s.H * 2);
    b->h_comb = (uint16_t *)malloc((size_t)s.B * s.H * 2);
}

static void mg_bufs_free(mg_bufs_t *b) {
    cudaFree(b->x);
    cudaFree(b->out_x);
    cudaFree(b->scales);
    cudaFree(b->counts);
    cudaFree(b->y);
    cudaFree(b->comb);
    cudaFree(b->w);
    cudaFree(b->topk);
    free(b->h_out);
    free(b->h_scales);
    free(b->h_counts);
    free(b->h_y);
    free(b->h_comb);
}

/* Tokens per rank for every rank from a pair: even ranks `even`, odd ranks `odd`, a few less on
 * ranks 2 and up (never below 0), so that ranks beyond the first pair differ too. T has
 * GT_MAX_RANKS entries: mg_pass_make reads one per rank. */
static void mg_tokens(const gt_ctx_t *ctx, int *T, int even, int odd) {
    for (int r = 0; r < GT_MAX_RANKS; r++) {
        int t = (r & 1) ? odd : even;
        if (r >= ctx->nranks)
            t = 0;
        else if (t > r / 2)
            t -= r / 2;
        T[r] = t;
    }
}

static void mg_pass_make(gt_ctx_t *ctx, mr_pass_t *p, const mg_shape_t *s, uint64_t seed,
                         int pattern, const int *T) {
    memset(p, 0, sizeof *p);
    p->n = ctx->nranks;
    p->rank = ctx->rank;
    p->E = s->E;
    p->H = s->H;
    p->K = s->K;
    p->B = s->B;
    for (int r = 0; r < p->n; r++) {
        p->T[r] = T[r];
        p->x[r] = (uint16_t *)malloc((size_t)s->B * s->H * 2 + 16);
        p->topk[r] = (int32_t *)malloc((size_t)s->B * s->K * 4 + 16);
        mr_tokens(seed, r, T[r], s->H, p->x[r]);
        mr_routing(seed, r, T[r], s->K, s->E, p->n, pattern, p->topk[r]);
    }
    for (int r = 0; r < p->n; r++) {
        p->wall[r] = (float *)malloc((size_t)s->B * s->K * 4 + 16);
        mr_weights(seed, r, T[r], s->K, p->wall[r]);
    }
    p->w = p->wall[ctx->rank];
}

static void mg_pass_free(mr_pass_t *p) {
    for (int r = 0; r < p->n; r++) {
        free(p->x[r]);
        free(p->topk[r]);
        free(p->wall[r]);
    }
}

/* Own tokens, routing and weights to the device; outputs poisoned. */
static void mg_upload(gt_ctx_t *ctx, mg_bufs_t *b, const mr_pass_t *p) {
    const int T = p->T[ctx->rank];
    const size_t rows = (size_t)b->L * b->NB;
    GT_CUDA(cudaMemcpyAsync(b->x, p->x[ctx->rank], (size_t)T * p->H * 2, cudaMemcpyHostToDevice,
                            ctx->stream));
    GT_CUDA(cudaMemcpyAsync(b->topk, p->topk[ctx->rank], (size_t)T * p->K * 4,
                            cudaMemcpyHostToDevice, ctx->stream));
    GT_CUDA(cudaMemcpyAsync(b->w, p->w, (size_t)T * p->K * 4, cudaMemcpyHostToDevice, ctx->stream));
    GT_CUDA(cudaMemsetAsync(b->out_x, 0xa5, rows * p->H * 2, ctx->stream));
    GT_CUDA(cudaMemsetAsync(b->counts, 0xff, (size_t)b->L * 4, ctx->stream));
    GT_CUDA(cudaMemsetAsync(b->comb, 0xa5, (size_t)p->B * p->H * 2, ctx->stream));
}

/* Reads back the valid rows of the dispatch output and checks them. */
static int mg_check_dispatch(gt_ctx_t *ctx, mg_bufs_t *b, const mr_pass_t *p, int fp8,
                             const char *what) {
    GT_SYNC(ctx);
    GT_CUDA(cudaMemcpy(b->h_counts, b->counts, (size_t)b->L * 4, cudaMemcpyDeviceToHost));
    const size_t rb = fp8 ? (size_t)p->H : (size_t)p->H * 2;
    const int ns = p->H / 128;
    for (int e = 0; e < b->L; e++) {
        int c = b->h_counts[e];
        if (c < 0 || c > b->NB) {
            gt_fail(ctx, "%s: expert %d count %d out of range", what, ctx->rank * b->L + e, c);
            return 0;
        }
        size_t row0 = (size_t)e * b->NB;
        if (c == 0) continue;
        GT_CUDA(cudaMemcpy(b->h_out + row0 * rb, b->out_x + row0 * rb, (size_t)c * rb,
                           cudaMemcpyDeviceToHost));
        if (fp8)
            GT_CUDA(cudaMemcpy(b->h_scales + row0 * ns, b->scales + row0 * ns, (size_t)c * ns * 4,
                               cudaMemcpyDeviceToHost));
    }
    char msg[512];
    if (mr_check_dispatch(p, b->h_out, b->h_scales, b->h_counts, fp8, msg, sizeof msg)) {
        gt_fail(ctx, "%s: %s", what, msg);
        return 0;
    }
    return 1;
}

/* The expert FFN on the host for the valid rows, uploaded over a NaN-poisoned y. */
static void mg_experts(gt_ctx_t *ctx, mg_bufs_t *b, const mr_pass_t *p) {
    const size_t rows = (size_t)b->L * b->NB;
    GT_CUDA(cudaMemsetAsync(b->y, 0xff, rows * p->H * 2, ctx->stream)); /* bf16 NaN */
    for (int e = 0; e < b->L; e++) {
        const int eg = ctx->rank * b->L + e;
        int i = 0;
        for (int r = 0; r < p->n; r++)
            for (int t = 0; t < p->T[r]; t++) {
                if (!mr_routes(p, r, t, eg)) continue;
                const uint16_t *x = p->x[r] + (size_t)t * p->H;
                uint16_t *row = b->h_y + ((size_t)e * b->NB + i) * p->H;
                for (int h = 0; h < p->H; h++) row[h] = mr_expert(eg, x[h]);
                i++;
            }
        if (i)
            GT_CUDA(cudaMemcpyAsync(b->y + (size_t)e * b->NB * p->H,
                                    b->h_y + (size_t)e * b->NB * p->H, (size_t)i * p->H * 2,
                                    cudaMemcpyHostToDevice, ctx->stream));
    }
    GT_SYNC(ctx);
}

static int mg_check_combine(gt_ctx_t *ctx, mg_bufs_t *b, const mr_pass_t *p, int weighted,
                            const char *what) {
    GT_SYNC(ctx);
    const int T = p->T[ctx->rank];
    GT_CUDA(cudaMemcpy(b->h_comb, b->comb, (size_t)T * p->H * 2, cudaMemcpyDeviceToHost));
    char msg[512];
    if (mr_check_combine(p, b->h_comb, weighted, msg, sizeof msg)) {
        gt_fail(ctx, "%s: %s", what, msg);
        return 0;
    }
    return 1;
}

static cchan_moe_group_t *mg_group(gt_ctx_t *ctx, const mg_shape_t *s) {
    cchan_moe_config_t cfg = CCHAN_MOE_CONFIG_INIT;
    cfg.num_experts = s->E;
    cfg.hidden = s->H;
    cfg.top_k = s->K;
    cfg.max_tokens_per_rank = s->B;
    cfg.num_blocks = s->blocks;
    cchan_moe_group_t *g = NULL;
    MG_OK(ctx, cchan_moe_group_create(ctx->comm, &cfg, &g));
    return g;
}

/* One full pass: dispatch (bf16 or fp8), check, experts, combine, check. */
static int mg_pass(gt_ctx_t *ctx, cchan_moe_group_t *g, mg_bufs_t *b, const mr_pass_t *p, int fp8,
                   int weighted, const char *what) {
    mg_upload(ctx, b, p);
    cchan_moe_handle_t *h = NULL;
    MG_OK(ctx, cchan_moe_handle_create(g, b->topk, p->T[ctx->rank], ctx->stream, &h));
    cchan_moe_dispatch_args_t a;
    memset(&a, 0, sizeof a);
    a.x = b->x;
    a.dtype = fp8 ? CCHAN_MOE_FP8_E4M3 : CCHAN_MOE_BF16;
    a.out_x = b->out_x;
    a.out_scales = b->scales;
    a.out_counts = b->counts;
    mg_busy_kick(ctx);
    MG_OK(ctx, cchan_moe_dispatch(h, &a, 0, ctx->stream));
    int ok = mg_check_dispatch(ctx, b, p, fp8, what);
    mg_experts(ctx, b, p);
    mg_busy_kick(ctx);
    MG_OK(ctx, cchan_moe_combine(h, b->y, weighted ? b->w : NULL, b->comb, 0, ctx->stream));
    ok &= mg_check_combine(ctx, b, p, weighted, what);
    MG_OK(ctx, cchan_moe_check(g));
    MG_OK(ctx, cchan_moe_handle_destroy(h));
    return ok;
}

static void case_ll_deepseek(gt_ctx_t *ctx) {
    const mg_shape_t s = {256, 7168, 8, 128, 0};
    cchan_moe_group_t *g = mg_group(ctx, &s);
    cchan_moe_info_t info;
    MG_OK(ctx, cchan_moe_group_info(g, &info));
    if (ctx->rank == 0)
        gt_log(ctx,
               "LL group: %d blocks x %d threads, buffer %.1f MiB (dispatch region %.1f MiB, "
               "combine region %.1f MiB per parity)",
               info.num_blocks, info.threads_per_block, info.comm_buffer_bytes / 1048576.0,
               info.dispatch_region_bytes / 1048576.0, info.combine_region_bytes / 1048576.0);
    mg_bufs_t b;
    mg_bufs_make(ctx, &b, s);
    static const int toks[][2] = {{128, 128}, {1, 1}, {7, 128}, {128, 0}, {97, 33}};
    int pass = 0, ok = 1;
    for (int pat = 0; pat < MR_NPATTERNS && ok; pat++)
        for (size_t ti = 0; ti < sizeof toks / sizeof toks[0] && ok; ti++, pass++) {
            const int fp8 = pass % 2;
            mr_pass_t p;
            int T[GT_MAX_RANKS];
            mg_tokens(ctx, T, toks[ti][0], toks[ti][1]);
            mg_pass_make(ctx, &p, &s, gt_mix64((uint64_t)pass + 11), pat, T);
            char what[160];
            snprintf(what, sizeof what, "pattern %d, tokens %d/%d, %s", pat, toks[ti][0],
                     toks[ti][1], fp8 ? "fp8" : "bf16");
            mg_pass(ctx, g, &b, &p, fp8, pass % 3 != 1, what);
            mg_pass_free(&p);
            ok = gt_all_ok(ctx);
        }
    if (ctx->rank == 0 && ok) gt_log(ctx, "%d passes checked", pass);
    mg_bufs_free(&b);
    MG_OK(ctx, cchan_moe_group_destroy(g));
}

static void case_ll_small_blocks(gt_ctx_t *ctx) {
    const mg_shape_t s = {48, 384, 6, 40, 8};
    cchan_moe_group_t *g = mg_group(ctx, &s);
    mg_bufs_t b;
    mg_bufs_make(ctx, &b, s);
    int ok = 1;
    for (int pass = 0; pass < 8 && ok; pass++) {
        int T[GT_MAX_RANKS];
        mg_tokens(ctx, T, 40 - pass, 1 + pass * 5);
        mr_pass_t p;
        mg_pass_make(ctx, &p, &s, gt_mix64((uint64_t)pass + 99), pass % MR_NPATTERNS, T);
        char what[96];
        snprintf(what, sizeof what, "small shape pass %d", pass);
        mg_pass(ctx, g, &b, &p, pass % 2, 1, what);
        mg_pass_free(&p);
        ok = gt_all_ok(ctx);
    }
    mg_bufs_free(&b);
    MG_OK(ctx, cchan_moe_group_destroy(g));
}

static void case_ll_4096(gt_ctx_t *ctx) {
    const mg_shape_t s = {64, 2048, 8, 4096, 0};
    cchan_moe_group_t *g = mg_group(ctx, &s);
    mg_bufs_t b;
    mg_bufs_make(ctx, &b, s);
    int ok = 1;
    for (int pass = 0; pass < 2 && ok; pass++) {
        int T[GT_MAX_RANKS];
        mg_tokens(ctx, T, 4096, 4096 - 513 * pass);
        mr_pass_t p;
        mg_pass_make(ctx, &p, &s, gt_mix64((uint64_t)pass + 4096), pass ? MR_HOT : MR_RANDOM, T);
        mg_pass(ctx, g, &b, &p, pass, 1, pass ? "4096 tokens, hot, fp8" : "4096 tokens, bf16");
        mg_pass_free(&p);
        ok = gt_all_ok(ctx);
    }
    mg_bufs_free(&b);
    MG_OK(ctx, cchan_moe_group_destroy(g));
}

/* Two forward passes staged: both dispatches issued send_only, then completed; both combines
 * likewise. */
static void case_ll_staged(gt_ctx_t *ctx) {
    const mg_shape_t s = {256, 7168, 8, 128, 0};
    cchan_moe_group_t *g = mg_group(ctx, &s);
    mg_bufs_t b[2];
    mr_pass_t p[2];
    cchan_moe_handle_t *h[2];
    for (int round = 0; round < 3; round++) {
        for (int j = 0; j < 2; j++) {
            if (round == 0) mg_bufs_make(ctx, &b[j], s);
            int T[GT_MAX_RANKS];
            mg_tokens(ctx, T, 128 - 17 * j, 64 + 64 * j);
            mg_pass_make(ctx, &p[j], &s, gt_mix64(777u + (uint64_t)j + 10u * round),
                         (j + round) % MR_NPATTERNS, T);
            mg_upload(ctx, &b[j], &p[j]);
            MG_OK(ctx, cchan_moe_handle_create(g, b[j].topk, T[ctx->rank], ctx->stream, &h[j]));
        }
        for (int j = 0; j < 2; j++) {
            cchan_moe_dispatch_args_t a;
            memset(&a, 0, sizeof a);
            a.x = b[j].x;
            a.dtype = j ? CCHAN_MOE_FP8_E4M3 : CCHAN_MOE_BF16;
            a.out_x = b[j].out_x;
            a.out_scales = b[j].scales;
            a.out_counts = b[j].counts;
            MG_OK(ctx, cchan_moe_dispatch(h[j], &a, 1, ctx->stream));
        }
        for (int j = 0; j < 2; j++) MG_OK(ctx, cchan_moe_complete(h[j], ctx->stream));
        for (int j = 0; j < 2; j++) {
            char what[64];
            snprintf(what, sizeof what, "staged round %d dispatch %d", round, j);
            mg_check_dispatch(ctx, &b[j], &p[j], j, what);
            mg_experts(ctx, &b[j], &p[j]);
        }
        for (int j = 0; j < 2; j++)
            MG_OK(ctx, cchan_moe_combine(h[j], b[j].y, b[j].w, b[j].comb, 1, ctx->stream));
        for (int j = 0; j < 2; j++) MG_OK(ctx, cchan_moe_complete(h[j], ctx->stream));
        for (int j = 0; j < 2; j++) {
            char what[64];
            snprintf(what, sizeof what, "staged round %d combine %d", round, j);
            mg_check_combine(ctx, &b[j], &p[j], 1, what);
            MG_OK(ctx, cchan_moe_handle_destroy(h[j]));
            mg_pass_free(&p[j]);
        }
        if (!gt_all_ok(ctx)) break;
    }
    mg_bufs_free(&b[0]);
    mg_bufs_free(&b[1]);
    MG_OK(ctx, cchan_moe_group_destroy(g));
}

/* dispatch + combine captured once, replayed with new tokens each time (same routing). */
static void case_ll_graph(gt_ctx_t *ctx) {
    const mg_shape_t s = {256, 7168, 8, 128, 0};
    cchan_moe_group_t *g = mg_group(ctx, &s);
    mg_bufs_t b;
    mg_bufs_make(ctx, &b, s);
    int T[GT_MAX_RANKS];
    mg_tokens(ctx, T, 128, 100);
    mr_pass_t p;
    mg_pass_make(ctx, &p, &s, 4242, MR_RANDOM, T);
    mg_upload(ctx, &b, &p);
    cchan_moe_handle_t *h = NULL;
    MG_OK(ctx, cchan_moe_handle_create(g, b.topk, T[ctx->rank], ctx->stream, &h));
    GT_SYNC(ctx);
    /* warm-up outside the graph: the handle learns the rows (combine needs a dispatch first) */
    cchan_moe_dispatch_args_t a;
    memset(&a, 0, sizeof a);
    a.x = b.x;
    a.dtype = CCHAN_MOE_BF16;
    a.out_x = b.out_x;
    a.out_counts = b.counts;
    MG_OK(ctx, cchan_moe_dispatch(h, &a, 0, ctx->stream));
    mg_check_dispatch(ctx, &b, &p, 0, "graph warm-up");
    mg_experts(ctx, &b, &p);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    GT_CUDA(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
    MG_OK(ctx, cchan_moe_dispatch(h, &a, 0, ctx->stream));
    MG_OK(ctx, cchan_moe_combine(h, b.y, b.w, b.comb, 0, ctx->stream));
    GT_CUDA(cudaStreamEndCapture(ctx->stream, &graph));
    GT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    int ok = 1;
    for (int rep = 0; rep < 20 && ok; rep++) {
        /* new token values, same routing: every rank regenerates every rank's tokens */
        for (int r = 0; r < ctx->nranks; r++) mr_tokens(5000 + rep, r, T[r], s.H, p.x[r]);
        GT_CUDA(cudaMemcpyAsync(b.x, p.x[ctx->rank], (size_t)T[ctx->rank] * s.H * 2,
                                cudaMemcpyHostToDevice, ctx->stream));
        mg_experts(ctx, &b, &p); /* y for the new tokens (rows as the dispatch will produce) */
        gt_barrier(ctx);
        mg_busy_kick(ctx);
        GT_CUDA(cudaGraphLaunch(exec, ctx->stream));
        char what[64];
        snprintf(what, sizeof what, "graph replay %d", rep);
        mg_check_dispatch(ctx, &b, &p, 0, what);
        mg_check_combine(ctx, &b, &p, 1, what);
        ok = gt_all_ok(ctx);
    }
    GT_CUDA(cudaGraphExecDestroy(exec));
    GT_CUDA(cudaGraphDestroy(graph));
    MG_OK(ctx, cchan_moe_handle_destroy(h));
    mg_pass_free(&p);
    mg_bufs_free(&b);
    MG_OK(ctx, cchan_moe_group_destroy(g));
}

static void case_ll_bad_ids(gt_ctx_t *ctx) {
    const mg_shape_t s = {16, 128, 2, 4, 0};
    cchan_moe_group_t *g = mg_group(ctx, &s);
    mg_bufs_t b;
    mg_bufs_make(ctx, &b, s);
    int32_t bad[8] = {0, 1, 99, 2, 3, 3, -1, -1};
    GT_CUDA(cudaMemcpy(b.topk, bad, sizeof bad, cudaMemcpyHostToDevice));
    GT_CUDA(cudaMemset(b.x, 0, (size_t)4 * 128 * 2));
    cchan_moe_handle_t *h = NULL;
    int st = cchan_moe_handle_create(g, b.topk, 5, ctx->stream, &h);
    GT_EXPECT(ctx, st == CCHAN_ERR_RANGE, "5 tokens on a 4-token group: %d (%s)", st,
              cchan_moe_last_error());
    MG_OK(ctx, cchan_moe_handle_create(g, b.topk, 4, ctx->stream, &h));
    cchan_moe_dispatch_args_t a;
    memset(&a, 0, sizeof a);
    a.x = b.x;
    a.dtype = CCHAN_MOE_BF16;
    a.out_x = b.out_x;
    a.out_counts = b.counts;
    MG_OK(ctx, cchan_moe_dispatch(h, &a, 0, ctx->stream));
    MG_OK(ctx, cchan_moe_combine(h, b.out_x, NULL, b.comb, 0, ctx->stream));
    GT_SYNC(ctx);
    st = cchan_moe_check(g);
    GT_EXPECT(ctx, st == CCHAN_ERR_RANGE && strstr(cchan_moe_last_error(), "99"),
              "cchan_moe_check = %d (%s)", st, cchan_moe_last_error());
    MG_OK(ctx, cchan_moe_handle_destroy(h));
    mg_bufs_free(&b);
    MG_OK(ctx, cchan_moe_group_destroy(g));
}

/* ------------------------------------------------------------------ high-throughput mode */

static int mg_ht_pass(gt_ctx_t *ctx, cchan_moe_group_t *g, const mg_shape_t *s, const mr_pass_t *p,
                      int staged, const char *what) {
    const int N = ctx->nranks, L = s->E / N, K = s->K, H = s->H, T = p->T[ctx->rank];
    const size_t rows_max = (size_t)N * s->B;
    uint16_t *x, *out, *y, *comb;
    int32_t *topk, *otopk, *counts;
    float *w, *ow;
    GT_CUDA(cudaMalloc((void **)&x, (size_t)s->B * H * 2));
    GT_CUDA(cudaMalloc((void **)&out, rows_max * H * 2));
    GT_CUDA(cudaMalloc((void **)&y, rows_max * H * 2));
    GT_CUDA(cudaMalloc((void **)&comb, (size_t)s->B * H * 2));
    GT_CUDA(cudaMalloc((void **)&topk, (size_t)s->B * K * 4));
    GT_CUDA(cudaMalloc((void **)&otopk, rows_max * K * 4));
    GT_CUDA(cudaMalloc((void **)&counts, (size_t)L * 4));
    GT_CUDA(cudaMalloc((void **)&w, (size_t)s->B * K * 4));
    GT_CUDA(cudaMalloc((void **)&ow, rows_max * K * 4));
    GT_CUDA(cudaMemcpy(x, p->x[ctx->rank], (size_t)T * H * 2, cudaMemcpyHostToDevice));
    GT_CUDA(cudaMemcpy(topk, p->topk[ctx->rank], (size_t)T * K * 4, cudaMemcpyHostToDevice));
    GT_CUDA(cudaMemcpy(w, p->w, (size_t)T * K * 4, cudaMemcpyHostToDevice));
    GT_CUDA(cudaMemset(out, 0xa5, rows_max * H * 2));
    cchan_moe_handle_t *h = NULL;
    MG_OK(ctx, cchan_moe_handle_create(g, topk, T, ctx->stream, &h));
    int rows = -1;
    MG_OK(ctx, cchan_moe_handle_num_recv_tokens(h, ctx->stream, &rows));
    cchan_moe_dispatch_args_t a;
    memset(&a, 0, sizeof a);
    a.x = x;
    a.dtype = CCHAN_MOE_BF16;
    a.out_x = out;
    a.out_counts = counts;
    a.topk_weights = w;
    a.out_topk = otopk;
    a.out_weights = ow;
    mg_busy_kick(ctx);
    MG_OK(ctx, cchan_moe_dispatch(h, &a, staged, ctx->stream));
    if (staged) MG_OK(ctx, cchan_moe_complete(h, ctx->stream));
    GT_SYNC(ctx);
    uint16_t *h_out = (uint16_t *)malloc(rows_max * H * 2 + 16);
    int32_t *h_otopk = (int32_t *)malloc(rows_max * K * 4 + 16);
    float *h_ow = (float *)malloc(rows_max * K * 4 + 16);
    int32_t *h_counts = (int32_t *)malloc((size_t)L * 4);
    uint16_t *h_y = (uint16_t *)malloc(rows_max * H * 2 + 16);
    uint16_t *h_comb = (uint16_t *)malloc((size_t)s->B * H * 2 + 16);
    GT_CUDA(cudaMemcpy(h_out, out, (size_t)rows * H * 2, cudaMemcpyDeviceToHost));
    GT_CUDA(cudaMemcpy(h_otopk, otopk, (size_t)rows * K * 4, cudaMemcpyDeviceToHost));
    GT_CUDA(cudaMemcpy(h_ow, ow, (size_t)rows * K * 4, cudaMemcpyDeviceToHost));
    GT_CUDA(cudaMemcpy(h_counts, counts, (size_t)L * 4, cudaMemcpyDeviceToHost));
    char msg[512];
    int ok = 1;
    if (mr_check_ht_dispatch(p, rows, h_out, h_otopk, h_ow, h_counts, msg, sizeof msg)) {
        gt_fail(ctx, "%s: dispatch: %s", what, msg);
        ok = 0;
    }
    mr_ht_experts(p, h_y);
    GT_CUDA(cudaMemcpy(y, h_y, (size_t)rows * H * 2, cudaMemcpyHostToDevice));
    mg_busy_kick(ctx);
    MG_OK(ctx, cchan_moe_combine(h, y, NULL, comb, staged, ctx->stream));
    if (staged) MG_OK(ctx, cchan_moe_complete(h, ctx->stream));
    GT_SYNC(ctx);
    GT_CUDA(cudaMemcpy(h_comb, comb, (size_t)T * H * 2, cudaMemcpyDeviceToHost));
    if (mr_check_ht_combine(p, h_comb, msg, sizeof msg)) {
        gt_fail(ctx, "%s: combine: %s", what, msg);
        ok = 0;
    }
    MG_OK(ctx, cchan_moe_check(g));
    MG_OK(ctx, cchan_moe_handle_destroy(h));
    free(h_out);
    free(h_otopk);
    free(h_ow);
    free(h_counts);
    free(h_y);
    free(h_comb);
    cudaFree(x);
    cudaFree(out);
    cudaFree(y);
    cudaFree(comb);
    cudaFree(topk);
    cudaFree(otopk);
    cudaFree(counts);
    cudaFree(w);
    cudaFree(ow);
    return ok;
}

static cchan_moe_group_t *mg_ht_group(gt_ctx_t *ctx, const mg_shape_t *s) {
    cchan_moe_config_t cfg = CCHAN_MOE_CONFIG_INIT;
    cfg.mode = CCHAN_MOE_HIGH_THROUGHPUT;
    cfg.num_experts = s->E;
    cfg.hidden = s->H;
    cfg.top_k = s->K;
    cfg.max_tokens_per_rank = s->B;
    cfg.num_blocks = s->blocks;
    cchan_moe_group_t *g = NULL;
    MG_OK(ctx, cchan_moe_group_create(ctx->comm, &cfg, &g));
    return g;
}

static void case_ht_small(gt_ctx_t *ctx) {
    const mg_shape_t s = {48, 384, 6, 300, 5};
    cchan_moe_group_t *g = mg_ht_group(ctx, &s);
    int ok = 1;
    for (int pass = 0; pass < 6 && ok; pass++) {
        int T[GT_MAX_RANKS];
        mg_tokens(ctx, T, pass == 3 ? 0 : 300 - pass * 7, 1 + pass * 50);
        mr_pass_t p;
        mg_pass_make(ctx, &p, &s, gt_mix64(0x4854u + (uint64_t)pass), pass % MR_NPATTERNS, T);
        char what[64];
        snprintf(what, sizeof what, "HT small pass %d", pass);
        mg_ht_pass(ctx, g, &s, &p, pass % 2, what);
        mg_pass_free(&p);
        ok = gt_all_ok(ctx);
    }
    MG_OK(ctx, cchan_moe_group_destroy(g));
}

static void case_ht_4096(gt_ctx_t *ctx) {
    const mg_shape_t s = {64, 2048, 8, 4096, 0};
    cchan_moe_group_t *g = mg_ht_group(ctx, &s);
    cchan_moe_info_t info;
    MG_OK(ctx, cchan_moe_group_info(g, &info));
    if (ctx->rank == 0)
        gt_log(ctx, "HT group: %d blocks x %d threads, buffer %.1f MiB", info.num_blocks,
               info.threads_per_block, info.comm_buffer_bytes / 1048576.0);
    int ok = 1;
    for (int pass = 0; pass < 2 && ok; pass++) {
        int T[GT_MAX_RANKS];
        mg_tokens(ctx, T, 4096, 4096 - 1000 * pass);
        mr_pass_t p;
        mg_pass_make(ctx, &p, &s, gt_mix64(0x48540u + (uint64_t)pass), pass ? MR_HOT : MR_RANDOM,
                     T);
        mg_ht_pass(ctx, g, &s, &p, pass, pass ? "HT 4096 hot, staged" : "HT 4096 random");
        mg_pass_free(&p);
        ok = gt_all_ok(ctx);
    }
    MG_OK(ctx, cchan_moe_group_destroy(g));
}

/* ------------------------------------------------------------------ beside a busy kernel */

#define MG_BUSY_CASE(name)                                                                         \
    static void case_##name##_busy(gt_ctx_t *ctx) {                                                \
        mg_busy_start();                                                                           \
        case_##name(ctx);                                                                          \
        mg_busy_stop(ctx);                                                                         \
    }
MG_BUSY_CASE(ll_deepseek)
MG_BUSY_CASE(ll_graph)
MG_BUSY_CASE(ll_4096)
MG_BUSY_CASE(ht_4096)

/* ------------------------------------------------------------------ a wait that times out
 *
 * GT_TRAPS, in the harness's child pairs: child rank 0 dispatches on a one-block LL group while
 * child rank 1 never does; the kernel must trap at the deadline. The communicator's record names
 * the wait with the source rank as its peer (checked by the harness), and cchan_moe_check must
 * name the counter: rank 0's expert 0, from rank 1, and the epochs (checked here, in the child: a
 * missing string ends it with code 3, which fails the case). */

typedef struct mg_child {
    cchan_moe_group_t *g;
    cchan_moe_handle_t *h;
    uint16_t *x, *out;
} mg_child_t;

static int mg_child_prepare(gt_child_env_t *env) {
    static mg_child_t m;
    cchan_moe_config_t mc = CCHAN_MOE_CONFIG_INIT;
    mc.num_experts = 16;
    mc.hidden = 128;
    mc.top_k = 2;
    mc.max_tokens_per_rank = 4;
    mc.num_blocks = 1;
    int st = cchan_moe_group_create(env->comm, &mc, &m.g);
    if (st) {
        printf("GT-CHILD error=cchan_moe_group_create: %s\n", cchan_moe_last_error());
        return st;
    }
    const int32_t topk[8] = {0, 8, 1, 9, 2, 10, 3, 11}; /* experts of both ranks */
    int32_t *d_topk;
    if (cudaMalloc((void **)&d_topk, sizeof topk) != cudaSuccess ||
        cudaMalloc((void **)&m.x, 4 * 128 * 2) != cudaSuccess ||
        cudaMalloc((void **)&m.out, 8 * 8 * 128 * 2) != cudaSuccess ||
        cudaMemcpy(d_topk, topk, sizeof topk, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemset(m.x, 0, 4 * 128 * 2) != cudaSuccess)
        return CCHAN_ERR_CUDA;
    st = cchan_moe_handle_create(m.g, d_topk, 4, NULL, &m.h);
    if (st) return st;
    env->user = &m;
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : CCHAN_ERR_CUDA;
}

static void mg_child_launch(gt_child_env_t *env) {
    mg_child_t *m = (mg_child_t *)env->user;
    cchan_moe_dispatch_args_t a;
    memset(&a, 0, sizeof a);
    a.x = m->x;
    a.dtype = CCHAN_MOE_BF16;
    a.out_x = m->out;
    int st = cchan_moe_dispatch(m->h, &a, 0, NULL);
    if (st == 0) (void)cudaDeviceSynchronize();
    st = cchan_moe_check(m->g);
    printf("GT-CHILD moe_check=%d\n", st);
    printf("GT-CHILD moe_diag=%s\n", cchan_moe_last_error());
    static const char *const want[] = {
        "rank 0 timed out after", "LL dispatch counter of expert 0 (local expert 0)", "from rank 1",
        "expected epoch 1 (value >= 0x100000000)", "observed epoch 0"};
    int ok = st == CCHAN_ERR_DEVICE_TIMEOUT;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        if (!strstr(cchan_moe_last_error(), want[k])) {
            printf("GT-CHILD error=cchan_moe_check's diagnostic lacks \"%s\"\n", want[k]);
            ok = 0;
        }
    if (!ok) {
        if (st != CCHAN_ERR_DEVICE_TIMEOUT)
            printf("GT-CHILD error=cchan_moe_check returned %d, want %d\n", st,
                   CCHAN_ERR_DEVICE_TIMEOUT);
        fflush(stdout);
        _exit(3);
    }
}

static void case_ll_timeout_trap(gt_ctx_t *ctx) {
    static const char *const want[] = {"rank 0 timed out", "from peer 1", "expected 4294967296",
                                       "observed 0"};
    gt_timeout_pair(ctx, "moe_ll_dispatch", want, 4);
}

static void mg_cases(gt_ctx_t *ctx) {
    gt_run(ctx, "ll_deepseek", case_ll_deepseek, 300);
    gt_run(ctx, "ll_small_blocks", case_ll_small_blocks, 120);
    gt_run(ctx, "ll_staged", case_ll_staged, 180);
    gt_run(ctx, "ll_graph", case_ll_graph, 300);
    gt_run(ctx, "ll_4096", case_ll_4096, 300);
    gt_run(ctx, "ll_bad_ids", case_ll_bad_ids, 60);
    gt_run(ctx, "ht_small", case_ht_small, 120);
    gt_run(ctx, "ht_4096", case_ht_4096, 300);
    gt_run(ctx, "ll_deepseek_busy", case_ll_deepseek_busy, 300);
    gt_run(ctx, "ll_graph_busy", case_ll_graph_busy, 300);
    gt_run(ctx, "ll_4096_busy", case_ll_4096_busy, 300);
    gt_run(ctx, "ht_4096_busy", case_ht_4096_busy, 300);
    gt_case(ctx, "ll_timeout_trap", case_ll_timeout_trap, 120, GT_PAIRS | GT_TRAPS | GT_ONE_ROUND);
}

GT_MAIN({"test_moe_gpu", NULL, mg_cases, NULL, mg_child_prepare, mg_child_launch})
