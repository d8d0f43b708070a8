/* cchan_exec on GPUs: every plan in the plan directory made for this many ranks (2 to 8, ranks may
 * share a GPU under MPS), run by the interpreter kernel and checked exactly against a host
 * reference (values are small multiples of a power of two, so sums are exact in every dtype).
 *
 *   cchan-run -n N test_exec_gpu          plans from CCHAN_EXEC_PLAN_DIR (default: the source
 *                                         tree's plans/); exit 77 without GPU or plans
 * Cases:
 *   correct   every plan, f32/f16/bf16, odd multiples of its granularity up to 4 MiB plus a size
 *             that takes each loop through three iterations; in place where the plan is; each
 *             size twice back to back with fresh data; guard bytes after the output untouched
 *   graph     every plan captured once in a CUDA graph and replayed 50 times with new input
 *             between replays (the last three checked)
 *   instances every plan with 1 to 16 fixed instances and with the library's choice, at one
 *             granule, 33 and 4097 granules (bf16), the instance count named on failure
 */
#include <dirent.h>
#include <math.h>

#include "cchan_exec.h"
#include "gpu_test.h"

#ifndef CCHAN_EXEC_DEFAULT_PLAN_DIR
#define CCHAN_EXEC_DEFAULT_PLAN_DIR "plans"
#endif

#define XG_MAX_IN (4ull * GT_MiB)
#define XG_LOOP_MAX (40ull * GT_MiB)
#define XG_GUARD 256
#define XG_GUARD_BYTE 0x5A

typedef struct xg {
    char *names[256];
    int nplans;
    char dir[1024];
    uint8_t *send, *recv; /* device */
    size_t send_bytes, recv_bytes;
    uint8_t *h_in, *h_out; /* host */
} xg_t;
static xg_t g_xg;

#define XG_EXEC(ctx, call)                                                                         \
    do {                                                                                           \
        int xs_ = (call);                                                                          \
        if (xs_ < 0) {                                                                             \
            gt_fail((ctx), "%s:%d: %s = %d (%s): %s", __FILE__, __LINE__, #call, xs_,              \
                    cchan_strerror(xs_), cchan_exec_last_error());                                 \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static uint64_t xg_mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static double xg_value(uint64_t seed, int r, uint64_t i, cchan_exec_dtype_t dt) {
    uint64_t h = xg_mix(seed ^ xg_mix((uint64_t)r * 0x10001ull + i * 0x9E37ull + 1));
    switch (dt) {
    case CCHAN_EXEC_F32: return (double)((int64_t)(h % 2049) - 1024) / 8.0;
    case CCHAN_EXEC_F16: return (double)((int64_t)(h % 129) - 64) / 4.0;
    default: return (double)((int64_t)(h % 33) - 16) / 2.0;
    }
}

static void xg_store(void *buf, uint64_t i, double v, cchan_exec_dtype_t dt) {
    if (dt == CCHAN_EXEC_F32)
        ((float *)buf)[i] = (float)v;
    else if (dt == CCHAN_EXEC_F16)
        ((cchan_f16_t *)buf)[i] = cchan_f32_to_f16((float)v);
    else
        ((cchan_bf16_t *)buf)[i] = cchan_f32_to_bf16((float)v);
}

static double xg_load(const void *buf, uint64_t i, cchan_exec_dtype_t dt) {
    if (dt == CCHAN_EXEC_F32) return ((const float *)buf)[i];
    if (dt == CCHAN_EXEC_F16) return cchan_f16_to_f32(((const cchan_f16_t *)buf)[i]);
    return cchan_bf16_to_f32(((const cchan_bf16_t *)buf)[i]);
}

static double xg_expect(const gt_ctx_t *ctx, const cchan_exec_plan_info_t *in, uint64_t seed,
                        uint64_t count, uint64_t o, cchan_exec_dtype_t dt) {
    int n = ctx->nranks;
    double s = 0;
    switch (in->collective) {
    case CCHAN_EXEC_ALLREDUCE:
        for (int r = 0; r < n; r++) s += xg_value(seed, r, o, dt);
        return s;
    case CCHAN_EXEC_ALLGATHER: return xg_value(seed, (int)(o / count), o % count, dt);
    case CCHAN_EXEC_REDUCESCATTER: {
        uint64_t m = count / (uint64_t)n;
        for (int r = 0; r < n; r++) s += xg_value(seed, r, (uint64_t)ctx->rank * m + o, dt);
        return s;
    }
    case CCHAN_EXEC_ALLTOALL: {
        uint64_t m = count / (uint64_t)n;
        return xg_value(seed, (int)(o / m), (uint64_t)ctx->rank * m + o % m, dt);
    }
    case CCHAN_EXEC_BROADCAST: return xg_value(seed, in->root, o, dt);
    default: return 0;
    }
}

typedef struct xg_call {
    uint8_t *send, *recv;
    uint8_t *guard; /* XG_GUARD bytes after the call's last byte */
    uint64_t count, in_bytes, out_bytes;
} xg_call_t;

static xg_call_t xg_layout(const gt_ctx_t *ctx, const cchan_exec_plan_info_t *in, uint64_t count,
                           cchan_exec_dtype_t dt) {
    xg_call_t c;
    size_t es = cchan_exec_dtype_size(dt);
    c.count = count;
    c.in_bytes = count * es;
    c.out_bytes = c.in_bytes / in->in_chunks * in->out_chunks;
    c.recv = g_xg.recv;
    c.send = g_xg.send;
    if (in->inplace && in->collective == CCHAN_EXEC_REDUCESCATTER) /* output inside the input */
        c.recv = c.send + (uint64_t)ctx->rank * c.out_bytes;
    else if (in->inplace)
        c.send = in->collective == CCHAN_EXEC_ALLGATHER ? c.recv + (uint64_t)ctx->rank * c.in_bytes
                                                        : c.recv;
    c.guard = in->inplace && in->collective == CCHAN_EXEC_REDUCESCATTER ? c.send + c.in_bytes
                                                                        : c.recv + c.out_bytes;
    return c;
}

/* Host input -> device (and the output area poisoned, guard bytes after it). */
static void xg_prepare(gt_ctx_t *ctx, const xg_call_t *c, cchan_exec_dtype_t dt, uint64_t seed) {
    for (uint64_t i = 0; i < c->count; i++)
        xg_store(g_xg.h_in, i, xg_value(seed, ctx->rank, i, dt), dt);
    GT_CUDA(cudaMemsetAsync(c->recv, 0xEE, c->out_bytes, ctx->stream));
    GT_CUDA(cudaMemsetAsync(c->guard, XG_GUARD_BYTE, XG_GUARD, ctx->stream));
    GT_CUDA(cudaMemcpyAsync(c->send, g_xg.h_in, c->in_bytes, cudaMemcpyHostToDevice, ctx->stream));
}

static int xg_verify(gt_ctx_t *ctx, const cchan_exec_plan_info_t *in, const xg_call_t *c,
                     cchan_exec_dtype_t dt, uint64_t seed, const char *what) {
    GT_CUDA(
        cudaMemcpyAsync(g_xg.h_out, c->recv, c->out_bytes, cudaMemcpyDeviceToHost, ctx->stream));
    GT_CUDA(cudaMemcpyAsync(g_xg.h_out + c->out_bytes, c->guard, XG_GUARD, cudaMemcpyDeviceToHost,
                            ctx->stream));
    GT_SYNC(ctx);
    uint64_t n = c->out_bytes / cchan_exec_dtype_size(dt), bad = 0, first = 0;
    double got0 = 0, want0 = 0;
    for (uint64_t o = 0; o < n; o++) {
        double want = xg_expect(ctx, in, seed, c->count, o, dt), got = xg_load(g_xg.h_out, o, dt);
        if (got != want && bad++ == 0) {
            first = o;
            got0 = got;
            want0 = want;
        }
    }
    int gbad = 0;
    for (int gi = 0; gi < XG_GUARD; gi++) gbad += g_xg.h_out[c->out_bytes + gi] != XG_GUARD_BYTE;
    GT_EXPECT(ctx, bad == 0,
              "%s %s dtype %d count %llu%s: %llu of %llu elements wrong, first out[%llu] = %g, "
              "want %g",
              in->name, what, (int)dt, (unsigned long long)c->count, in->inplace ? " in place" : "",
              (unsigned long long)bad, (unsigned long long)n, (unsigned long long)first, got0,
              want0);
    GT_EXPECT(ctx, gbad == 0, "%s %s count %llu: %d guard bytes after the output overwritten",
              in->name, what, (unsigned long long)c->count, gbad);
    return bad == 0 && gbad == 0;
}

typedef void (*xg_plan_fn)(gt_ctx_t *ctx, cchan_exec_t *ex, const cchan_exec_plan_info_t *in,
                           const cchan_exec_plan_t *plan);

static void xg_each_plan(gt_ctx_t *ctx, xg_plan_fn fn) {
    for (int i = 0; i < g_xg.nplans; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", g_xg.dir, g_xg.names[i]);
        cchan_exec_plan_t *plan;
        XG_EXEC(ctx, cchan_exec_plan_load_file(path, &plan));
        cchan_exec_plan_info_t in;
        XG_EXEC(ctx, cchan_exec_plan_info(plan, &in));
        cchan_exec_t *ex;
        int st = cchan_exec_create(ctx->comm, plan, &ex);
        if (st == CCHAN_ERR_UNSUPPORTED) {
            /* a plan whose blocks cannot all be resident here: refused with the reason */
            gt_log(ctx, "%s: not run here: %s", in.name, cchan_exec_last_error());
            cchan_exec_plan_free(plan);
            continue;
        }
        XG_EXEC(ctx, st);
        XG_EXEC(ctx, cchan_exec_register(ex, g_xg.send, g_xg.send_bytes));
        XG_EXEC(ctx, cchan_exec_register(ex, g_xg.recv, g_xg.recv_bytes));
        fn(ctx, ex, &in, plan);
        XG_EXEC(ctx, cchan_exec_destroy(ex));
        cchan_exec_plan_free(plan);
    }
}

static void xg_correct_plan(gt_ctx_t *ctx, cchan_exec_t *ex, const cchan_exec_plan_info_t *in,
                            const cchan_exec_plan_t *plan) {
    (void)plan;
    static const cchan_exec_dtype_t dts[] = {CCHAN_EXEC_F32, CCHAN_EXEC_F16, CCHAN_EXEC_BF16};
    static const uint64_t mult[] = {1, 33, 1023, 65537};
    int cases = 0;
    for (int d = 0; d < 3; d++) {
        size_t es = cchan_exec_dtype_size(dts[d]);
        uint64_t sizes[8];
        int ns = 0;
        for (size_t m = 0; m < sizeof mult / sizeof mult[0]; m++)
            sizes[ns++] = in->granularity * mult[m];
        if (in->loop_unit && d == 0) /* three iterations of every loop */
            sizes[ns++] = (2 * in->loop_unit + in->granularity / in->in_chunks) * in->in_chunks;
        for (int s = 0; s < ns; s++) {
            uint64_t bytes = sizes[s];
            if (bytes > (s < 4 ? XG_MAX_IN : XG_LOOP_MAX)) continue;
            if (bytes / in->in_chunks * in->out_chunks + XG_GUARD > g_xg.recv_bytes) continue;
            xg_call_t c = xg_layout(ctx, in, bytes / es, dts[d]);
            for (int run = 0; run < 2; run++) {
                uint64_t seed = xg_mix((uint64_t)(d * 100 + s * 10 + run) + 17);
                xg_prepare(ctx, &c, dts[d], seed);
                XG_EXEC(ctx, cchan_exec_run(ex, c.send, c.recv, c.count, dts[d], CCHAN_EXEC_SUM,
                                            ctx->stream));
                if (!xg_verify(ctx, in, &c, dts[d], seed, "run")) return;
            }
            cases++;
        }
    }
    gt_log(ctx, "%s: %d sizes", in->name, cases);
}

static void case_correct(gt_ctx_t *ctx) { xg_each_plan(ctx, xg_correct_plan); }

static void xg_graph_plan(gt_ctx_t *ctx, cchan_exec_t *ex, const cchan_exec_plan_info_t *in,
                          const cchan_exec_plan_t *plan) {
    (void)plan;
    cchan_exec_dtype_t dt = CCHAN_EXEC_BF16;
    uint64_t bytes = in->granularity * 4097;
    if (bytes > XG_MAX_IN) bytes = in->granularity;
    xg_call_t c = xg_layout(ctx, in, bytes / 2, dt);
    /* first run outside the capture: it sets up the buffers' channels */
    xg_prepare(ctx, &c, dt, 1);
    XG_EXEC(ctx, cchan_exec_run(ex, c.send, c.recv, c.count, dt, CCHAN_EXEC_SUM, ctx->stream));
    if (!xg_verify(ctx, in, &c, dt, 1, "warm-up")) return;
    cudaGraph_t graph;
    cudaGraphExec_t gexec;
    GT_CUDA(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
    int st = cchan_exec_run(ex, c.send, c.recv, c.count, dt, CCHAN_EXEC_SUM, ctx->stream);
    GT_CUDA(cudaStreamEndCapture(ctx->stream, &graph));
    XG_EXEC(ctx, st);
    GT_CUDA(cudaGraphInstantiate(&gexec, graph, 0));
    for (int r = 0; r < 50; r++) {
        uint64_t seed = xg_mix((uint64_t)r + 1000);
        xg_prepare(ctx, &c, dt, seed);
        GT_CUDA(cudaGraphLaunch(gexec, ctx->stream));
        if (r >= 47 && !xg_verify(ctx, in, &c, dt, seed, "graph replay")) break;
    }
    GT_SYNC(ctx);
    GT_CUDA(cudaGraphExecDestroy(gexec));
    GT_CUDA(cudaGraphDestroy(graph));
    gt_log(ctx, "%s: 50 graph replays", in->name);
}

static void case_graph(gt_ctx_t *ctx) { xg_each_plan(ctx, xg_graph_plan); }

/* Every plan with fixed instance counts from 1 to 16 (one granule: most instances empty; odd
 * multiples: uneven parts), the count named on failure; then with the library's own choice. */
static void case_instances(gt_ctx_t *ctx) {
    static const uint32_t ks[] = {1, 2, 3, 4, 5, 7, 8, 16, 0};
    static const uint64_t mult[] = {1, 33, 4097};
    const cchan_exec_dtype_t dt = CCHAN_EXEC_BF16;
    for (int i = 0; i < g_xg.nplans; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", g_xg.dir, g_xg.names[i]);
        cchan_exec_plan_t *plan;
        XG_EXEC(ctx, cchan_exec_plan_load_file(path, &plan));
        cchan_exec_plan_info_t in;
        XG_EXEC(ctx, cchan_exec_plan_info(plan, &in));
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            cchan_exec_config_t cfg = CCHAN_EXEC_CONFIG_INIT;
            cfg.instances = ks[ki];
            cchan_exec_t *ex;
            int st = cchan_exec_create_ex(ctx->comm, plan, &cfg, &ex);
            if (st == CCHAN_ERR_UNSUPPORTED) {
                gt_log(ctx, "%s x%u: not run here: %s", in.name, ks[ki], cchan_exec_last_error());
                continue;
            }
            XG_EXEC(ctx, st);
            XG_EXEC(ctx, cchan_exec_register(ex, g_xg.send, g_xg.send_bytes));
            XG_EXEC(ctx, cchan_exec_register(ex, g_xg.recv, g_xg.recv_bytes));
            int ok = 1;
            for (size_t m = 0; m < sizeof mult / sizeof mult[0] && ok; m++) {
                uint64_t bytes = in.granularity * mult[m];
                if (bytes > XG_MAX_IN) continue;
                xg_call_t c = xg_layout(ctx, &in, bytes / 2, dt);
                uint64_t seed = xg_mix(ki * 10 + m + 500);
                char what[64];
                snprintf(what, sizeof what, "x%d (asked %u)",
                         cchan_exec_instances_for(ex, c.in_bytes), ks[ki]);
                xg_prepare(ctx, &c, dt, seed);
                XG_EXEC(ctx, cchan_exec_run(ex, c.send, c.recv, c.count, dt, CCHAN_EXEC_SUM,
                                            ctx->stream));
                ok = xg_verify(ctx, &in, &c, dt, seed, what);
            }
            XG_EXEC(ctx, cchan_exec_destroy(ex));
            if (!ok) break;
        }
        gt_log(ctx, "%s: instances 1..16 and the library's choice", in.name);
        cchan_exec_plan_free(plan);
    }
}

static int xg_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void xg_setup(gt_ctx_t *ctx) {
    const char *dir = getenv("CCHAN_EXEC_PLAN_DIR");
    snprintf(g_xg.dir, sizeof g_xg.dir, "%s", dir && *dir ? dir : CCHAN_EXEC_DEFAULT_PLAN_DIR);
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".n%d.json", ctx->nranks);
    DIR *d = opendir(g_xg.dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) && g_xg.nplans < 256) {
            size_t l = strlen(de->d_name), sl = strlen(suffix);
            if (l > sl && !strcmp(de->d_name + l - sl, suffix))
                g_xg.names[g_xg.nplans++] = strdup(de->d_name);
        }
        closedir(d);
    }
    if (g_xg.nplans == 0) {
        char why[1200];
        snprintf(why, sizeof why, "no *%s plan in %s (set CCHAN_EXEC_PLAN_DIR)", suffix, g_xg.dir);
        gt_skip("test_exec_gpu", why);
    }
    qsort(g_xg.names, (size_t)g_xg.nplans, sizeof g_xg.names[0], xg_cmp);
    g_xg.send_bytes = XG_LOOP_MAX + XG_GUARD;
    g_xg.recv_bytes = XG_LOOP_MAX * (size_t)ctx->nranks + XG_GUARD;
    GT_CUDA(cudaMalloc((void **)&g_xg.send, g_xg.send_bytes));
    GT_CUDA(cudaMalloc((void **)&g_xg.recv, g_xg.recv_bytes));
    GT_CUDA(cudaMallocHost((void **)&g_xg.h_in, g_xg.send_bytes));
    GT_CUDA(cudaMallocHost((void **)&g_xg.h_out, g_xg.recv_bytes));
}

static void xg_teardown(gt_ctx_t *ctx) {
    (void)ctx;
    GT_CUDA(cudaFree(g_xg.send));
    GT_CUDA(cudaFree(g_xg.recv));
    GT_CUDA(cudaFreeHost(g_xg.h_in));
    GT_CUDA(cudaFreeHost(g_xg.h_out));
    for (int i = 0; i < g_xg.nplans; i++) free(g_xg.names[i]);
}

static void xg_cases(gt_ctx_t *ctx) {
    gt_run(ctx, "correct", case_correct, 600);
    gt_run(ctx, "graph", case_graph, 600);
    gt_run(ctx, "instances", case_instances, 600);
}

GT_MAIN({"test_exec_gpu", xg_setup, xg_cases, xg_teardown, NULL, NULL})
