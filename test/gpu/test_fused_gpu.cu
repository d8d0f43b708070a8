/* GPU tests of the fused AllReduce + residual add + RMSNorm kernel (kernels/fused), 2 to 8 ranks,
 * one process each (cchan-run -n N), GPUs of their own or shared. Every output is checked against a
 * float64 reference computed on the host from every rank's inputs: residual_out bit-exact (the sums
 * of these bf16 values are exact in f32, so the rounding points fix the result), y within one bf16
 * ulp, and every rank bit-identical. Outputs are poisoned before every launch.
 */
#include <math.h>

#include "cchan_fused.h"
#include "gpu_test.h"

#define FT_MAX_TOKENS 256u
#define FT_EPS 1e-6f

typedef struct ft_bufs {
    uint32_t hidden;
    cchan_fused_rmsnorm_t *f;
    uint16_t *x, *res, *w, *out, *y, *ar; /* device */
    uint16_t *hx, *hres, *hw, *hout, *hy; /* host; hx holds every rank's x */
} ft_bufs_t;

static float ft_bf(uint16_t b) {
    cchan_bf16_t v = {b};
    return cchan_bf16_to_f32(v);
}
static double ft_round(double v) { return ft_bf(cchan_f32_to_bf16((float)v).bits); }
static uint16_t ft_rand(uint64_t seed, uint64_t i, float lo) {
    uint64_t h = gt_mix64(seed ^ gt_mix64(i));
    float mag = lo * (1.0f + 15.0f * (float)(h & 0xffffff) / 16777216.0f);
    return cchan_f32_to_bf16((h >> 63) ? -mag : mag).bits;
}

static void ft_setup(gt_ctx_t *ctx, ft_bufs_t *b, uint32_t hidden) {
    memset(b, 0, sizeof *b);
    b->hidden = hidden;
    size_t bytes = (size_t)FT_MAX_TOKENS * hidden * 2;
    int st = cchan_fused_rmsnorm_create(ctx->comm, FT_MAX_TOKENS, hidden, &b->f);
    if (st < 0) {
        printf("[r%d] cchan_fused_rmsnorm_create: %s\n", ctx->rank,
               cchan_fused_rmsnorm_last_error());
        gt_die();
    }
    GT_CUDA(cudaMalloc((void **)&b->x, bytes));
    GT_CUDA(cudaMalloc((void **)&b->res, bytes));
    GT_CUDA(cudaMalloc((void **)&b->w, hidden * 2u));
    GT_CUDA(cudaMalloc((void **)&b->out, bytes));
    GT_CUDA(cudaMalloc((void **)&b->y, bytes));
    GT_CUDA(cudaMalloc((void **)&b->ar, bytes));
    b->hx = (uint16_t *)malloc(bytes * (size_t)ctx->nranks);
    b->hres = (uint16_t *)malloc(bytes);
    b->hw = (uint16_t *)malloc(hidden * 2u);
    b->hout = (uint16_t *)malloc(bytes);
    b->hy = (uint16_t *)malloc(bytes);
}

static void ft_teardown(gt_ctx_t *ctx, ft_bufs_t *b) {
    GT_SYNC(ctx);
    int st = cchan_fused_rmsnorm_destroy(b->f);
    if (st < 0) gt_fail(ctx, "cchan_fused_rmsnorm_destroy: %s", cchan_fused_rmsnorm_last_error());
    cudaFree(b->x);
    cudaFree(b->res);
    cudaFree(b->w);
    cudaFree(b->out);
    cudaFree(b->y);
    cudaFree(b->ar);
    free(b->hx);
    free(b->hres);
    free(b->hw);
    free(b->hout);
    free(b->hy);
}

/* New random inputs for `tokens` rows, uploaded; in place: residual_out = residual, y = x. */
static void ft_inputs(gt_ctx_t *ctx, ft_bufs_t *b, uint32_t tokens, uint64_t seed) {
    size_t n = (size_t)tokens * b->hidden;
    for (int r = 0; r < ctx->nranks; r++)
        for (size_t i = 0; i < n; i++)
            b->hx[(size_t)r * n + i] = ft_rand(seed + (uint64_t)r, i, 0.25f);
    for (size_t i = 0; i < n; i++) b->hres[i] = ft_rand(seed ^ 0xabcdefu, i, 0.125f);
    for (uint32_t i = 0; i < b->hidden; i++) b->hw[i] = ft_rand(seed ^ 0x5151u, i, 0.0625f);
    GT_CUDA(cudaMemcpyAsync(b->x, b->hx + (size_t)ctx->rank * n, n * 2, cudaMemcpyHostToDevice,
                            ctx->stream));
    GT_CUDA(cudaMemcpyAsync(b->res, b->hres, n * 2, cudaMemcpyHostToDevice, ctx->stream));
    GT_CUDA(cudaMemcpyAsync(b->w, b->hw, b->hidden * 2u, cudaMemcpyHostToDevice, ctx->stream));
    GT_SYNC(ctx);
}

/* Checks outputs (out, y device pointers) of `tokens` rows against the reference. */
static int ft_check(gt_ctx_t *ctx, ft_bufs_t *b, const uint16_t *out, const uint16_t *y,
                    uint32_t tokens, const char *what) {
    size_t n = (size_t)tokens * b->hidden;
    GT_SYNC(ctx);
    GT_CUDA(cudaMemcpy(b->hout, out, n * 2, cudaMemcpyDeviceToHost));
    GT_CUDA(cudaMemcpy(b->hy, y, n * 2, cudaMemcpyDeviceToHost));
    long bad = 0;
    double *h = (double *)malloc(sizeof(double) * b->hidden);
    for (uint32_t t = 0; t < tokens; t++) {
        double ss = 0;
        for (uint32_t j = 0; j < b->hidden; j++) {
            size_t i = (size_t)t * b->hidden + j;
            double s = 0;
            for (int r = 0; r < ctx->nranks; r++) s += ft_bf(b->hx[(size_t)r * n + i]);
            h[j] = ft_round(ft_round(s) + ft_bf(b->hres[i]));
            ss += h[j] * h[j];
            if (ft_bf(b->hout[i]) != h[j]) {
                if (bad < 3)
                    gt_fail(ctx, "%s: token %u col %u: residual_out %g, want %g", what, t, j,
                            ft_bf(b->hout[i]), h[j]);
                bad++;
            }
        }
        double inv = 1.0 / sqrt(ss / b->hidden + FT_EPS);
        for (uint32_t j = 0; j < b->hidden; j++) {
            size_t i = (size_t)t * b->hidden + j;
            double want = h[j] * inv * ft_bf(b->hw[j]);
            if (fabs(ft_bf(b->hy[i]) - want) > fabs(want) / 128 + 1e-30) {
                if (bad < 3)
                    gt_fail(ctx, "%s: token %u col %u: y %g, want %g", what, t, j, ft_bf(b->hy[i]),
                            want);
                bad++;
            }
        }
    }
    free(h);
    uint64_t hash = 0xcbf29ce484222325ull, all[GT_MAX_RANKS];
    for (size_t i = 0; i < n; i++)
        hash = (hash ^ ((uint64_t)b->hy[i] << 16 ^ b->hout[i])) * 0x100000001b3ull;
    gt_allgather(ctx, &hash, all, sizeof hash);
    for (int r = 1; r < ctx->nranks; r++) {
        if (all[r] != all[0]) {
            gt_fail(ctx, "%s: rank %d's output differs from rank 0's", what, r);
            bad++;
            break;
        }
    }
    if (bad) gt_fail(ctx, "%s: %ld bad elements", what, bad);
    return bad == 0;
}

static void ft_run(gt_ctx_t *ctx, ft_bufs_t *b, uint32_t tokens, cchan_fused_proto_t proto,
                   int in_place) {
    uint16_t *out = in_place ? b->res : b->out, *y = in_place ? b->x : b->y;
    size_t bytes = (size_t)tokens * b->hidden * 2;
    if (!in_place) {
        gt_poison(ctx, b->out, bytes);
        gt_poison(ctx, b->y, bytes);
    }
    gt_barrier(ctx);
    int st = cchan_fused_rmsnorm_run(b->f, b->x, b->res, b->w, FT_EPS, out, y, tokens, proto,
                                     ctx->stream);
    if (st < 0) gt_fail(ctx, "cchan_fused_rmsnorm_run: %s", cchan_fused_rmsnorm_last_error());
}

/* Every protocol, hidden 4096/8192/1000/64, tokens 1..256 (odd counts), in and out of place. */
static void case_matrix(gt_ctx_t *ctx) {
    static const uint32_t hiddens[] = {4096, 8192, 1000, 64};
    static const uint32_t tokens[] = {1, 7, 32, 129, 256};
    for (size_t hi = 0; hi < 4 && gt_all_ok(ctx); hi++) {
        ft_bufs_t b;
        ft_setup(ctx, &b, hiddens[hi]);
        for (size_t ti = 0; ti < 5; ti++)
            for (int p = CCHAN_FUSED_AUTO; p <= CCHAN_FUSED_HB; p++)
                for (int ip = 0; ip < 2; ip++) {
                    char what[128];
                    snprintf(what, sizeof what, "hidden %u tokens %u %s%s", hiddens[hi], tokens[ti],
                             cchan_fused_proto_name((cchan_fused_proto_t)p), ip ? " in-place" : "");
                    ft_inputs(ctx, &b, tokens[ti], gt_seed(gt_hash_name(what), 0, 0));
                    ft_run(ctx, &b, tokens[ti], (cchan_fused_proto_t)p, ip);
                    ft_check(ctx, &b, ip ? b.res : b.out, ip ? b.x : b.y, tokens[ti], what);
                }
        ft_teardown(ctx, &b);
    }
}

/* LL with rows spread over several blocks (cchan_fused_rmsnorm_set_split 0): the blocks of a row
 * add their partial sums of squares through device memory. */
static void case_spread_rows(gt_ctx_t *ctx) {
    static const uint32_t hiddens[] = {4096, 8192};
    static const uint32_t tokens[] = {1, 7, 32};
    for (size_t hi = 0; hi < 2 && gt_all_ok(ctx); hi++) {
        ft_bufs_t b;
        ft_setup(ctx, &b, hiddens[hi]);
        GT_EXPECT(ctx, cchan_fused_rmsnorm_set_split(b.f, 0) == 0, "set_split");
        for (size_t ti = 0; ti < 3; ti++)
            for (int ip = 0; ip < 2; ip++) {
                char what[128];
                snprintf(what, sizeof what, "spread: hidden %u tokens %u%s", hiddens[hi],
                         tokens[ti], ip ? " in-place" : "");
                ft_inputs(ctx, &b, tokens[ti], gt_seed(gt_hash_name(what), 0, 0));
                ft_run(ctx, &b, tokens[ti], CCHAN_FUSED_LL, ip);
                ft_check(ctx, &b, ip ? b.res : b.out, ip ? b.x : b.y, tokens[ti], what);
            }
        ft_teardown(ctx, &b);
    }
}

/* 300 launches back to back, protocols and token counts changing, fresh data every time: the
 * epoch and the scratch parity are reused without clearing. */
static void case_relaunch(gt_ctx_t *ctx) {
    ft_bufs_t b;
    ft_setup(ctx, &b, 4096);
    for (int it = 0; it < 300 && gt_all_ok(ctx); it++) {
        uint32_t tokens = 1 + (uint32_t)(it * 37 % 40);
        cchan_fused_proto_t p = (cchan_fused_proto_t)(it % 3);
        char what[96];
        snprintf(what, sizeof what, "launch %d tokens %u %s", it, tokens,
                 cchan_fused_proto_name(p));
        ft_inputs(ctx, &b, tokens, gt_seed(77, 0, (uint64_t)it));
        ft_run(ctx, &b, tokens, p, 0);
        ft_check(ctx, &b, b.out, b.y, tokens, what);
    }
    ft_teardown(ctx, &b);
}

/* One launch of each protocol captured in a CUDA graph, replayed 1000 times. */
static void case_graph_replay(gt_ctx_t *ctx) {
    ft_bufs_t b;
    ft_setup(ctx, &b, 8192);
    const uint32_t tokens = 16;
    ft_inputs(ctx, &b, tokens, gt_seed(99, 0, 0));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    GT_CUDA(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeRelaxed));
    int st = cchan_fused_rmsnorm_run(b.f, b.x, b.res, b.w, FT_EPS, b.out, b.y, tokens,
                                     CCHAN_FUSED_LL, ctx->stream);
    if (st == 0)
        st = cchan_fused_rmsnorm_run(b.f, b.x, b.res, b.w, FT_EPS, b.out, b.y, tokens,
                                     CCHAN_FUSED_HB, ctx->stream);
    GT_CUDA(cudaStreamEndCapture(ctx->stream, &g));
    GT_EXPECT(ctx, st == 0, "capture: %s", cchan_fused_rmsnorm_last_error());
    GT_CUDA(cudaGraphInstantiate(&ge, g, 0));
    gt_barrier(ctx);
    for (int i = 0; i < 1000; i++) GT_CUDA(cudaGraphLaunch(ge, ctx->stream));
    ft_check(ctx, &b, b.out, b.y, tokens, "after 1000 graph replays");
    GT_CUDA(cudaGraphExecDestroy(ge));
    GT_CUDA(cudaGraphDestroy(g));
    ft_teardown(ctx, &b);
}

/* The unfused second kernel alone, on the all-reduce computed here. */
static void case_unfused_kernel(gt_ctx_t *ctx) {
    ft_bufs_t b;
    ft_setup(ctx, &b, 4096);
    const uint32_t tokens = 33;
    size_t n = (size_t)tokens * b.hidden;
    ft_inputs(ctx, &b, tokens, gt_seed(5, 0, 0));
    uint16_t *har = (uint16_t *)malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        float s = 0;
        for (int r = 0; r < ctx->nranks; r++) s += ft_bf(b.hx[(size_t)r * n + i]);
        har[i] = cchan_f32_to_bf16(s).bits;
    }
    GT_CUDA(cudaMemcpy(b.ar, har, n * 2, cudaMemcpyHostToDevice));
    gt_poison(ctx, b.out, n * 2);
    gt_poison(ctx, b.y, n * 2);
    int st = cchan_fused_residual_rmsnorm(CCHAN_PLATFORM_CUDA, b.ar, b.res, b.w, FT_EPS, b.out, b.y,
                                          tokens, b.hidden, ctx->stream);
    GT_EXPECT(ctx, st == 0, "cchan_fused_residual_rmsnorm: %s", cchan_fused_rmsnorm_last_error());
    ft_check(ctx, &b, b.out, b.y, tokens, "residual+rmsnorm kernel");
    free(har);
    ft_teardown(ctx, &b);
}

/* The fused kernel launched while a stand-in kernel spins on most SMs (second stream, ends on its
 * own after HOG_MS): each launch must finish after it, never deadlock, and be correct. Every
 * protocol, a token count of one block and one of many. */
#define HOG_MS 300u
static void case_beside_busy_kernel(gt_ctx_t *ctx) {
    static const uint32_t tokens[] = {1, 129};
    ft_bufs_t b;
    ft_setup(ctx, &b, 4096);
    for (size_t ti = 0; ti < 2 && gt_all_ok(ctx); ti++)
        for (int p = CCHAN_FUSED_AUTO; p <= CCHAN_FUSED_HB; p++) {
            char what[128];
            snprintf(what, sizeof what, "beside a busy kernel: tokens %u %s", tokens[ti],
                     cchan_fused_proto_name((cchan_fused_proto_t)p));
            ft_inputs(ctx, &b, tokens[ti], gt_seed(gt_hash_name(what), 0, 0));
            GT_SYNC(ctx);
            gt_hog_t hog;
            gt_hog_start(ctx, &hog, 0.9, HOG_MS);
            double t0 = gt_now_ms();
            ft_run(ctx, &b, tokens[ti], (cchan_fused_proto_t)p, 0);
            GT_SYNC(ctx);
            double ms = gt_now_ms() - t0;
            gt_hog_end(ctx, &hog);
            ft_check(ctx, &b, b.out, b.y, tokens[ti], what);
            if (ctx->rank == 0) gt_log(ctx, "%s: finished after %.1f ms", what, ms);
        }
    ft_teardown(ctx, &b);
}

static void ft_cases(gt_ctx_t *ctx) {
    gt_run(ctx, "matrix", case_matrix, 300);
    gt_run(ctx, "spread_rows", case_spread_rows, 120);
    gt_run(ctx, "relaunch_300", case_relaunch, 200);
    gt_run(ctx, "graph_replay_1000", case_graph_replay, 120);
    gt_run(ctx, "unfused_kernel", case_unfused_kernel, 60);
    gt_run(ctx, "beside_busy_kernel", case_beside_busy_kernel, 120);
}

GT_MAIN({"test_fused_gpu", NULL, ft_cases, NULL, NULL, NULL})
