/* cchan_coll, 2 to 8 ranks, one process per rank (GPUs of their own or shared).
 *
 *   cchan-run -n N --timeout 600 build/test/gpu/test_coll_gpu [--case NAME,...] [--list]
 *
 * correct_<algo>: every op x dtype x size (1 KiB .. 1 GiB, odd element counts among them) x in
 *   place / out of place. Inputs are small multiples of a power of two drawn from a hash of
 *   (call, rank, index), so every sum is exact in f32 and in the dtype: outputs are checked bit for
 *   bit on the GPU against the sum of every rank's generated input, and 256 guard bytes after each
 *   output must keep their poison. Algorithms: ll (LL all-pairs), hb (HB all-pairs through
 * scratch), zc (HB all-pairs AllReduce zero-copy on registered buffers), auto (the selector).
 * graph_replay: calls captured in a CUDA graph (single calls, and a graph mixing algorithms and
 *   ops) replayed 1000 times, checked after the replays and between replays.
 * correct_switch: SWITCH AllReduce (the portable path: no multicast here).
 * correct_ce, correct_zc_blocks, graph_ce: CE all-pairs (AllReduce, AllGather) with several
 *   parameter sets, the zero-copy AllReduce with a larger grid, both in graphs (registered).
 * allreduce_beside_busy_kernel: AllReduce (LL, HB, zero-copy, auto) launched while a stand-in
 * kernel spins on most SMs on a second stream and ends on its own: each call finishes after it and
 * is correct (no kernel may depend on a co-residency nothing guaranteed it). timing: each algorithm
 * at sizes 1 KiB .. 1 GiB, one call per graph, replayed (1000 times up to 4 MiB): time per call on
 * rank 0 (device events), bus bandwidth as nccl-tests counts it.
 */
#include "gpu_test.h"

#include "cchan_coll.h"

#define CG_GUARD 256u
#define CG_BUF_BYTES (GT_GiB + 64 * GT_KiB)

typedef struct cg_env {
    uint8_t *a, *b;           /* plain buffers (through scratch) */
    uint8_t *ra, *rb;         /* registered with zc */
    cchan_coll_t *plain, *zc; /* zc has ra and rb registered */
    cchan_coll_t *narrow;     /* max_blocks 4: LL with 4 blocks instead of 16 (timing only) */
} cg_env_t;
static cg_env_t g_cg;
/* allreduce_beside_busy_kernel: nonzero while cg_one starts a hog (gt_hog_start) for this many ms
 * right before each call. */
static unsigned g_cg_hog_ms;

/* ------------------------------------------------------------------ data */

__host__ __device__ static inline float cg_value(uint64_t seed, int r, uint64_t i, int dt) {
    uint64_t h = gt_mix64(seed ^ gt_mix64((uint64_t)r * 0x10001ull + i * 0x9E37ull + 1));
    if (dt == CCHAN_COLL_F32) return (float)((int64_t)(h % 2049) - 1024) / 8.0f;
    if (dt == CCHAN_COLL_F16) return (float)((int64_t)(h % 129) - 64) / 4.0f;
    return (float)((int64_t)(h % 33) - 16) / 2.0f;
}

__device__ static inline uint32_t cg_bits(float v, int dt) {
    if (dt == CCHAN_COLL_F32) return __float_as_uint(v);
    if (dt == CCHAN_COLL_F16) return cchan_f32_to_f16(v).bits;
    return cchan_f32_to_bf16(v).bits;
}

__device__ static inline void cg_store(uint8_t *buf, uint64_t i, float v, int dt) {
    if (dt == CCHAN_COLL_F32)
        ((float *)(void *)buf)[i] = v;
    else
        ((uint16_t *)(void *)buf)[i] = (uint16_t)cg_bits(v, dt);
}

__device__ static inline uint32_t cg_load_bits(const uint8_t *buf, uint64_t i, int dt) {
    if (dt == CCHAN_COLL_F32) return ((const uint32_t *)(const void *)buf)[i];
    return ((const uint16_t *)(const void *)buf)[i];
}

__global__ void k_cg_fill(uint8_t *buf, uint64_t n, uint64_t seed, int rank, int dt) {
    for (uint64_t i = gt_global_tid(); i < n; i += gt_global_nthreads())
        cg_store(buf, i, cg_value(seed, rank, i, dt), dt);
}

/* op: 0 allreduce, 1 allgather, 2 reducescatter; count as in the API. Checks out[0..n_out) and
 * the guard bytes after it. */
__global__ void k_cg_check(const uint8_t *out, uint64_t n_out, uint64_t count, int op, int dt,
                           uint64_t seed, int rank, int nranks, uint32_t guard, gt_result_t *res) {
    unsigned long long bad = 0, first = ~0ull, last = 0;
    for (uint64_t i = gt_global_tid(); i < n_out; i += gt_global_nthreads()) {
        float want = 0.0f;
        if (op == CCHAN_COLL_ALLGATHER) {
            want = cg_value(seed, (int)(i / count), i % count, dt);
        } else {
            uint64_t src = op == CCHAN_COLL_ALLREDUCE ? i : (uint64_t)rank * count + i;
            for (int r = 0; r < nranks; r++) want += cg_value(seed, r, src, dt);
        }
        if (cg_load_bits(out, i, dt) != cg_bits(want, dt)) {
            bad++;
            if (i < first) first = i;
            last = i;
        }
    }
    uint64_t es = dt == CCHAN_COLL_F32 ? 4 : 2;
    const uint8_t *g = out + n_out * es;
    for (uint64_t k = gt_global_tid(); k < guard; k += gt_global_nthreads()) {
        if (g[k] != GT_POISON) {
            bad++;
            if (n_out + k < first) first = n_out + k;
            last = n_out + k;
        }
    }
    gt_dev_record(res, bad, first, last);
}

static const char *cg_op_name(int op) {
    return op == 0 ? "allreduce" : op == 1 ? "allgather" : "reducescatter";
}
static const char *cg_dt_name(int dt) { return dt == 0 ? "f32" : dt == 1 ? "f16" : "bf16"; }

static int cg_call(cchan_coll_t *coll, int op, const void *send, void *recv, size_t count, int dt,
                   cchan_coll_algo_t algo, cudaStream_t s) {
    switch (op) {
    case 0: return cchan_coll_allreduce(coll, send, recv, count, (cchan_coll_dtype_t)dt, algo, s);
    case 1: return cchan_coll_allgather(coll, send, recv, count, (cchan_coll_dtype_t)dt, algo, s);
    default:
        return cchan_coll_reducescatter(coll, send, recv, count, (cchan_coll_dtype_t)dt, algo, s);
    }
}

/* The buffers of one call: send/recv pointers, the input and output element counts. */
typedef struct cg_call_bufs {
    uint8_t *send, *recv;
    size_t count, n_in, n_out;
} cg_call_bufs_t;

static cg_call_bufs_t cg_bufs(gt_ctx_t *ctx, int op, size_t bytes, int odd, int dt, int in_place,
                              uint8_t *a, uint8_t *b) {
    size_t es = dt == 0 ? 4 : 2, n = (size_t)ctx->nranks;
    cg_call_bufs_t c;
    size_t total = bytes / es - (odd ? (op == 0 ? 1 : n) : 0); /* odd: one element less per rank */
    c.count = op == 0 ? total : total / n;
    c.n_in = op == 2 ? c.count * n : c.count;
    c.n_out = op == 1 ? c.count * n : c.count;
    if (!in_place) {
        c.send = a;
        c.recv = b;
    } else if (op == 1) {
        c.recv = a;
        c.send = a + (size_t)ctx->rank * c.count * es;
    } else {
        c.send = a;
        c.recv = op == 2 ? a + (size_t)ctx->rank * c.count * es : a;
    }
    return c;
}

/* Runs and checks one call. Returns 1 if it passed (or was unsupported as reported). */
static int cg_one(gt_ctx_t *ctx, cchan_coll_t *coll, cchan_coll_algo_t algo, int op, int dt,
                  size_t bytes, int odd, int in_place, uint8_t *a, uint8_t *b, uint64_t seed,
                  const char *label) {
    size_t es = dt == 0 ? 4 : 2;
    cg_call_bufs_t c = cg_bufs(ctx, op, bytes, odd, dt, in_place, a, b);
    size_t full = op == 0 ? c.count * es : c.count * es * (size_t)ctx->nranks;
    if (!cchan_coll_supported(coll, (cchan_coll_op_t)op, algo, full)) return 1;
    size_t span = (c.n_in > c.n_out ? c.n_in : c.n_out) * es + CG_GUARD;
    gt_poison(ctx, a, span < CG_BUF_BYTES ? span : CG_BUF_BYTES);
    gt_poison(ctx, b, c.n_out * es + CG_GUARD);
    GT_LAUNCH(ctx, k_cg_fill, gt_grid_for(ctx, c.n_in, 256), 256, c.send, c.n_in, seed, ctx->rank,
              dt);
    GT_SYNC(ctx);
    gt_barrier(
        ctx); /* both ranks' inputs are ready (the kernels need no such barrier; the poison does) */
    gt_hog_t hog;
    if (g_cg_hog_ms) gt_hog_start(ctx, &hog, 0.9, g_cg_hog_ms);
    int st = cg_call(coll, op, c.send, c.recv, c.count, dt, algo, ctx->stream);
    if (g_cg_hog_ms) {
        GT_SYNC(ctx); /* the call finished: after the hog, or beside it */
        gt_hog_end(ctx, &hog);
    }
    if (st) {
        gt_fail(ctx, "%s: %s %s %s %zu elements%s: %d (%s)", label, cchan_coll_algo_name(algo),
                cg_op_name(op), cg_dt_name(dt), c.count, in_place ? " in place" : "", st,
                cchan_coll_last_error());
        return 0;
    }
    gt_result_reset(ctx);
    GT_LAUNCH(ctx, k_cg_check, gt_grid_for(ctx, c.n_out, 256), 256, c.recv, c.n_out, c.count, op,
              dt, seed, ctx->rank, ctx->nranks, in_place && op == 2 ? 0u : CG_GUARD, ctx->res);
    gt_result_t r = gt_result_read(ctx);
    if (r.errors) {
        gt_fail(ctx,
                "%s: %s %s %s count %zu (%zu bytes)%s: %llu bad elements/guard bytes, first %llu, "
                "last %llu",
                label, cchan_coll_algo_name(algo), cg_op_name(op), cg_dt_name(dt), c.count, bytes,
                in_place ? " in place" : "", r.errors, r.first, r.last);
        return 0;
    }
    return 1;
}

static const size_t cg_sizes[] = {GT_KiB,       4 * GT_KiB,   16 * GT_KiB, 64 * GT_KiB,
                                  256 * GT_KiB, GT_MiB,       4 * GT_MiB,  16 * GT_MiB,
                                  64 * GT_MiB,  256 * GT_MiB, GT_GiB};

static void cg_correct(gt_ctx_t *ctx, cchan_coll_t *coll, cchan_coll_algo_t algo, uint8_t *a,
                       uint8_t *b, int ops_mask) {
    uint64_t tag = gt_hash_name(cchan_coll_algo_name(algo)), iter = 0;
    int ran = 0;
    for (size_t si = 0; si < sizeof cg_sizes / sizeof cg_sizes[0]; si++)
        for (int op = 0; op < 3; op++) {
            if (!(ops_mask & (1 << op))) continue;
            for (int dt = 0; dt < 3; dt++)
                for (int v = 0; v < 4; v++) { /* odd count x in place */
                    int odd = v & 1, ip = v >> 1;
                    if (cg_sizes[si] >= 64 * GT_MiB && odd != ip) continue; /* time */
                    cg_one(ctx, coll, algo, op, dt, cg_sizes[si], odd, ip, a, b,
                           gt_seed(tag, 0, iter++), "correct");
                    if (!gt_all_ok(ctx)) goto out; /* both ranks stop at the same call */
                    ran++;
                }
        }
out:
    if (ctx->rank == 0) gt_log(ctx, "%s: %d calls checked", cchan_coll_algo_name(algo), ran);
}

static void case_correct_ll(gt_ctx_t *ctx) {
    cg_correct(ctx, g_cg.plain, CCHAN_COLL_LL_ALLPAIRS, g_cg.a, g_cg.b, 7);
}
static void case_correct_hb(gt_ctx_t *ctx) {
    cg_correct(ctx, g_cg.plain, CCHAN_COLL_HB_ALLPAIRS, g_cg.a, g_cg.b, 7);
}
/* HB on registered buffers: zero-copy AllReduce (to 16 MiB), AllGather (to zc_ag_max) and
 * ReduceScatter (to zc_rs_max). */
static void case_correct_zc(gt_ctx_t *ctx) {
    cg_correct(ctx, g_cg.zc, CCHAN_COLL_HB_ALLPAIRS, g_cg.ra, g_cg.rb, 7);
}
static void case_correct_switch(gt_ctx_t *ctx) {
    cg_correct(ctx, g_cg.plain, CCHAN_COLL_SWITCH, g_cg.a, g_cg.b, 1);
}
/* Parameters of the zero-copy and CE paths set for one case, restored after it. */
typedef struct cg_param {
    const char *name;
    int64_t value;
} cg_param_t;

static void cg_with_params(gt_ctx_t *ctx, const cg_param_t *ps, int n, cchan_coll_algo_t algo,
                           int ops_mask) {
    int64_t old[8];
    for (int i = 0; i < n; i++) {
        GT_CCHAN(cchan_coll_get_param(g_cg.zc, ps[i].name, &old[i]));
        GT_CCHAN(cchan_coll_set_param(g_cg.zc, ps[i].name, ps[i].value));
        if (ctx->rank == 0) gt_log(ctx, "  %s = %lld", ps[i].name, (long long)ps[i].value);
    }
    cg_correct(ctx, g_cg.zc, algo, g_cg.ra, g_cg.rb, ops_mask);
    for (int i = 0; i < n; i++) GT_CCHAN(cchan_coll_set_param(g_cg.zc, ps[i].name, old[i]));
}

/* CE all-pairs (AllReduce, AllGather) with the default parameters, then with small pipeline
 * chunks spread over three lanes, a quarter of the bytes on the SMs and AllReduce's shards by the
 * SMs, then the SMs alone (and chunks larger than a staging slot), then the copy engines alone on
 * every lane, then AllReduce's reduce-scatter on the copy engines (ce_rs). */
static void case_correct_ce(gt_ctx_t *ctx) {
    cg_correct(ctx, g_cg.zc, CCHAN_COLL_CE_ALLPAIRS, g_cg.ra, g_cg.rb, 3);
    if (!gt_all_ok(ctx)) return;
    const cg_param_t lanes[] = {{"ce_chunk", 4 * GT_MiB},
                                {"ce_lanes", 3},
                                {"ce_sm_permille", 250},
                                {"ce_rs", 0}};
    cg_with_params(ctx, lanes, 4, CCHAN_COLL_CE_ALLPAIRS, 3);
    if (!gt_all_ok(ctx)) return;
    const cg_param_t sm[] = {{"ce_chunk", 64 * GT_MiB}, {"ce_sm_permille", 1000}};
    cg_with_params(ctx, sm, 2, CCHAN_COLL_CE_ALLPAIRS, 3);
    if (!gt_all_ok(ctx)) return;
    const cg_param_t ce_only[] = {{"ce_lanes", 8}, {"ce_sm_permille", 0}};
    cg_with_params(ctx, ce_only, 2, CCHAN_COLL_CE_ALLPAIRS, 3);
    if (!gt_all_ok(ctx)) return;
    /* AllReduce's shards pushed by the copy engines too (three staging regions, cycled by 4 MiB
     * chunks), with and without an SM share */
    const cg_param_t rs[] = {{"ce_rs", 1}, {"ce_chunk", 4 * GT_MiB}, {"ce_sm_permille", 200}};
    cg_with_params(ctx, rs, 3, CCHAN_COLL_CE_ALLPAIRS, 3);
    if (!gt_all_ok(ctx)) return;
    const cg_param_t rs0[] = {{"ce_rs", 1}, {"ce_lanes", 2}, {"ce_sm_permille", 0}};
    cg_with_params(ctx, rs0, 3, CCHAN_COLL_CE_ALLPAIRS, 3);
    if (!gt_all_ok(ctx)) return;
    /* five regions (four 2 MiB chunks ahead); two regions (one ahead) */
    const cg_param_t rs5[] = {{"ce_rs", 1}, {"ce_chunk", 2 * GT_MiB}, {"ce_regions", 5}};
    cg_with_params(ctx, rs5, 3, CCHAN_COLL_CE_ALLPAIRS, 3);
    if (!gt_all_ok(ctx)) return;
    const cg_param_t rs2[] = {{"ce_rs", 1}, {"ce_chunk", 4 * GT_MiB}, {"ce_regions", 2}};
    cg_with_params(ctx, rs2, 3, CCHAN_COLL_CE_ALLPAIRS, 3);
}

/* Zero-copy AllReduce with small blocks (a larger grid). */
static void case_correct_zc_small_blocks(gt_ctx_t *ctx) {
    const cg_param_t ps[] = {{"zc_block_bytes", 8 * GT_KiB}};
    cg_with_params(ctx, ps, 1, CCHAN_COLL_HB_ALLPAIRS, 1);
}

static void case_correct_auto(gt_ctx_t *ctx) {
    cg_correct(ctx, g_cg.plain, CCHAN_COLL_AUTO, g_cg.a, g_cg.b, 7);
}

/* ------------------------------------------------------------------ graphs */

typedef struct cg_graph_call {
    cchan_coll_t *coll;
    cchan_coll_algo_t algo;
    int op, dt;
    size_t bytes;
    int odd;
    uint8_t *a, *b;
} cg_graph_call_t;

static void cg_graph_case(gt_ctx_t *ctx, const cg_graph_call_t *calls, int ncalls, int replays,
                          const char *label) {
    uint64_t seed = gt_seed(gt_hash_name(label), 0, 1);
    cg_call_bufs_t bufs[4];
    for (int i = 0; i < ncalls; i++) {
        const cg_graph_call_t *k = &calls[i];
        bufs[i] = cg_bufs(ctx, k->op, k->bytes, k->odd, k->dt, 0, k->a, k->b);
        GT_LAUNCH(ctx, k_cg_fill, gt_grid_for(ctx, bufs[i].n_in, 256), 256, bufs[i].send,
                  bufs[i].n_in, seed + (uint64_t)i, ctx->rank, k->dt);
    }
    GT_SYNC(ctx);
    gt_barrier(ctx);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    GT_CUDA(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < ncalls; i++) {
        const cg_graph_call_t *k = &calls[i];
        int st = cg_call(k->coll, k->op, bufs[i].send, bufs[i].recv, bufs[i].count, k->dt, k->algo,
                         ctx->stream);
        if (st) {
            gt_fail(ctx, "%s: capture of call %d: %d (%s)", label, i, st, cchan_coll_last_error());
            cudaStreamEndCapture(ctx->stream, &graph);
            return;
        }
    }
    GT_CUDA(cudaStreamEndCapture(ctx->stream, &graph));
    GT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < replays && ctx->case_ok; rep++) {
        GT_CUDA(cudaGraphLaunch(exec, ctx->stream));
        if (rep == replays / 2 || rep == replays - 1) { /* check midway and at the end */
            for (int i = 0; i < ncalls; i++) {
                const cg_graph_call_t *k = &calls[i];
                gt_result_reset(ctx);
                GT_LAUNCH(ctx, k_cg_check, gt_grid_for(ctx, bufs[i].n_out, 256), 256, bufs[i].recv,
                          bufs[i].n_out, bufs[i].count, k->op, k->dt, seed + (uint64_t)i, ctx->rank,
                          ctx->nranks, 0u, ctx->res);
                gt_result_t r = gt_result_read(ctx);
                if (r.errors)
                    gt_fail(ctx,
                            "%s: after replay %d, call %d (%s %s %s %zu B): %llu bad, first %llu",
                            label, rep + 1, i, cchan_coll_algo_name(k->algo), cg_op_name(k->op),
                            cg_dt_name(k->dt), k->bytes, r.errors, r.first);
            }
        }
    }
    GT_SYNC(ctx);
    GT_CUDA(cudaGraphExecDestroy(exec));
    GT_CUDA(cudaGraphDestroy(graph));
}

static void case_graph_replay(gt_ctx_t *ctx) {
    uint8_t *a = g_cg.a, *b = g_cg.b;
    uint8_t *a2 = g_cg.a + 256 * GT_MiB, *b2 = g_cg.b + 256 * GT_MiB;
    uint8_t *a3 = g_cg.a + 512 * GT_MiB, *b3 = g_cg.b + 512 * GT_MiB;
    const cg_graph_call_t single[] = {
        {g_cg.plain, CCHAN_COLL_LL_ALLPAIRS, 0, 2, 16 * GT_KiB, 1, a, b},
        {g_cg.plain, CCHAN_COLL_HB_ALLPAIRS, 0, 0, 4 * GT_MiB, 1, a, b},
        {g_cg.zc, CCHAN_COLL_HB_ALLPAIRS, 0, 1, 4 * GT_MiB, 0, g_cg.ra, g_cg.rb},
        {g_cg.zc, CCHAN_COLL_HB_ALLPAIRS, 1, 2, 4 * GT_MiB, 1, g_cg.ra, g_cg.rb}, /* zero-copy */
        {g_cg.zc, CCHAN_COLL_HB_ALLPAIRS, 2, 1, 4 * GT_MiB, 1, g_cg.ra, g_cg.rb}, /* zero-copy */
        {g_cg.plain, CCHAN_COLL_LL_ALLPAIRS, 1, 1, 64 * GT_KiB, 1, a, b},
        {g_cg.plain, CCHAN_COLL_HB_ALLPAIRS, 1, 0, 2 * GT_MiB, 0, a, b},
        {g_cg.plain, CCHAN_COLL_LL_ALLPAIRS, 2, 0, 8 * GT_KiB, 1, a, b},
        {g_cg.plain, CCHAN_COLL_HB_ALLPAIRS, 2, 2, GT_MiB, 1, a, b},
    };
    for (size_t i = 0; i < sizeof single / sizeof single[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "graph %s %s %s", cchan_coll_algo_name(single[i].algo),
                 cg_op_name(single[i].op), cg_dt_name(single[i].dt));
        cg_graph_case(ctx, &single[i], 1, 1000, label);
        if (!gt_all_ok(ctx)) return;
    }
    /* one graph: LL AllReduce, HB AllGather, LL ReduceScatter, HB AllReduce on disjoint buffers */
    const cg_graph_call_t mixed[] = {
        {g_cg.plain, CCHAN_COLL_LL_ALLPAIRS, 0, 0, 4 * GT_KiB + 4, 1, a, b},
        {g_cg.plain, CCHAN_COLL_HB_ALLPAIRS, 1, 2, 8 * GT_MiB, 1, a2, b2},
        {g_cg.plain, CCHAN_COLL_LL_ALLPAIRS, 2, 1, 32 * GT_KiB, 1, a3, b3},
        {g_cg.plain, CCHAN_COLL_AUTO, 0, 2, 3 * GT_MiB, 1, a3 + 64 * GT_MiB, b3 + 64 * GT_MiB},
    };
    cg_graph_case(ctx, mixed, 4, 1000, "graph mixed");
}

/* CE all-pairs in graphs: the copy-engine lanes are forked from and joined into the capturing
 * stream (and, for ce_rs, waited for at per-chunk marks); several pipeline chunks and lanes; and a
 * graph mixing CE, zero-copy and LL calls. */
static void case_graph_ce(gt_ctx_t *ctx) {
    const cg_param_t ps[] = {{"ce_chunk", 4 * GT_MiB}, {"ce_lanes", 2},
                             {"ce_sm_permille", 100},  {"zc_block_bytes", 8 * GT_KiB},
                             {"ce_rs", 1},             {"ce_regions", 4}};
    const int nps = (int)(sizeof ps / sizeof ps[0]);
    int64_t old[8];
    for (int i = 0; i < nps; i++) {
        GT_CCHAN(cchan_coll_get_param(g_cg.zc, ps[i].name, &old[i]));
        GT_CCHAN(cchan_coll_set_param(g_cg.zc, ps[i].name, ps[i].value));
    }
    uint8_t *ra = g_cg.ra, *rb = g_cg.rb;
    const cg_graph_call_t single[] = {
        {g_cg.zc, CCHAN_COLL_CE_ALLPAIRS, 0, 2, 32 * GT_MiB, 1, ra, rb},
        {g_cg.zc, CCHAN_COLL_CE_ALLPAIRS, 1, 0, 16 * GT_MiB, 0, ra, rb},
        {g_cg.zc, CCHAN_COLL_HB_ALLPAIRS, 0, 1, GT_MiB, 1, ra, rb}, /* zero-copy */
    };
    for (size_t i = 0; i < sizeof single / sizeof single[0] && gt_all_ok(ctx); i++) {
        char label[96];
        snprintf(label, sizeof label, "graph %s %s %s", cchan_coll_algo_name(single[i].algo),
                 cg_op_name(single[i].op), cg_dt_name(single[i].dt));
        cg_graph_case(ctx, &single[i], 1, 200, label);
    }
    const cg_graph_call_t mixed[] = {
        {g_cg.zc, CCHAN_COLL_CE_ALLPAIRS, 0, 0, 24 * GT_MiB + 4, 1, ra, rb},
        {g_cg.zc, CCHAN_COLL_HB_ALLPAIRS, 0, 2, 512 * GT_KiB, 1, ra + 128 * GT_MiB,
         rb + 128 * GT_MiB},
        {g_cg.zc, CCHAN_COLL_CE_ALLPAIRS, 1, 1, 8 * GT_MiB, 0, ra + 256 * GT_MiB,
         rb + 256 * GT_MiB},
        {g_cg.plain, CCHAN_COLL_LL_ALLPAIRS, 0, 0, 16 * GT_KiB, 1, g_cg.a, g_cg.b},
    };
    if (gt_all_ok(ctx)) cg_graph_case(ctx, mixed, 4, 200, "graph ce mixed");
    for (int i = 0; i < nps; i++) GT_CCHAN(cchan_coll_set_param(g_cg.zc, ps[i].name, old[i]));
}

/* ------------------------------------------------------------------ timing */

static void cg_time(gt_ctx_t *ctx, cchan_coll_t *coll, cchan_coll_algo_t algo, int op, size_t bytes,
                    uint8_t *a, uint8_t *b) {
    int dt = 0; /* float, as nccl-tests */
    cg_call_bufs_t c = cg_bufs(ctx, op, bytes, 0, dt, 0, a, b);
    size_t full = op == 0 ? c.count * 4 : c.count * 4 * (size_t)ctx->nranks;
    if (!cchan_coll_supported(coll, (cchan_coll_op_t)op, algo, full)) return;
    int reps = bytes <= 4 * GT_MiB ? 1000 : bytes <= 64 * GT_MiB ? 100 : 20;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    GT_CUDA(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
    int st = cg_call(coll, op, c.send, c.recv, c.count, dt, algo, ctx->stream);
    cudaGraph_t g2;
    GT_CUDA(cudaStreamEndCapture(ctx->stream, &g2));
    graph = g2;
    if (st) {
        gt_fail(ctx, "timing: %d (%s)", st, cchan_coll_last_error());
        return;
    }
    GT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    GT_CUDA(cudaEventCreate(&e0));
    GT_CUDA(cudaEventCreate(&e1));
    for (int i = 0; i < (reps < 50 ? 2 : 50); i++) GT_CUDA(cudaGraphLaunch(exec, ctx->stream));
    GT_SYNC(ctx);
    gt_barrier(ctx);
    GT_CUDA(cudaEventRecord(e0, ctx->stream));
    for (int i = 0; i < reps; i++) GT_CUDA(cudaGraphLaunch(exec, ctx->stream));
    GT_CUDA(cudaEventRecord(e1, ctx->stream));
    GT_SYNC(ctx);
    float ms = 0;
    GT_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    double us = ms * 1e3 / reps;
    double n = ctx->nranks;
    double factor = op == 0 ? 2 * (n - 1) / n : (n - 1) / n;
    double busbw = (double)bytes / (us * 1e-6) / 1e9 * factor;
    if (ctx->rank == 0)
        printf("TIME %-13s %-12s %11zu B %10.2f us %8.1f GB/s (%d replays)\n", cg_op_name(op),
               cchan_coll_algo_name(algo) /* zc shows as hb */, bytes, us, busbw, reps);
    GT_CUDA(cudaEventDestroy(e0));
    GT_CUDA(cudaEventDestroy(e1));
    GT_CUDA(cudaGraphExecDestroy(exec));
    GT_CUDA(cudaGraphDestroy(graph));
}

static void case_timing(gt_ctx_t *ctx) {
    for (int op = 0; op < 2; op++)
        for (size_t bytes = GT_KiB; bytes <= 64 * GT_KiB; bytes *= 4) {
            if (ctx->rank == 0) printf("(4 LL blocks) ");
            cg_time(ctx, g_cg.narrow, CCHAN_COLL_LL_ALLPAIRS, op, bytes, g_cg.a, g_cg.b);
        }
    for (int op = 0; op < 3; op++)
        for (size_t si = 0; si < sizeof cg_sizes / sizeof cg_sizes[0]; si++) {
            size_t bytes = cg_sizes[si];
            cg_time(ctx, g_cg.plain, CCHAN_COLL_LL_ALLPAIRS, op, bytes, g_cg.a, g_cg.b);
            cg_time(ctx, g_cg.plain, CCHAN_COLL_HB_ALLPAIRS, op, bytes, g_cg.a, g_cg.b);
            if (op == 0) {
                if (ctx->rank == 0) printf("(zero-copy) ");
                cg_time(ctx, g_cg.zc, CCHAN_COLL_HB_ALLPAIRS, op, bytes, g_cg.ra, g_cg.rb);
            }
            if (op < 2 && bytes >= 4 * GT_MiB)
                cg_time(ctx, g_cg.zc, CCHAN_COLL_CE_ALLPAIRS, op, bytes, g_cg.ra, g_cg.rb);

            if (ctx->rank == 0)
                printf("SELECT %s %zu B -> %s\n", cg_op_name(op), bytes,
                       cchan_coll_algo_name(
                           cchan_coll_select(g_cg.plain, (cchan_coll_op_t)op, bytes)));
        }
}

/* ------------------------------------------------------------------ beside a busy kernel */

#define HOG_MS 300u

static void case_allreduce_beside_busy_kernel(gt_ctx_t *ctx) {
    static const struct {
        cchan_coll_algo_t algo;
        int zc;
    } algos[] = {{CCHAN_COLL_LL_ALLPAIRS, 0},
                 {CCHAN_COLL_HB_ALLPAIRS, 0},
                 {CCHAN_COLL_HB_ALLPAIRS, 1},
                 {CCHAN_COLL_AUTO, 0}};
    static const size_t sizes[] = {4 * GT_KiB, GT_MiB, 64 * GT_MiB};
    uint64_t tag = gt_hash_name("allreduce_beside_busy_kernel"), iter = 0;
    for (size_t ai = 0; ai < sizeof algos / sizeof algos[0]; ai++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            cchan_coll_t *coll = algos[ai].zc ? g_cg.zc : g_cg.plain;
            uint8_t *a = algos[ai].zc ? g_cg.ra : g_cg.a, *b = algos[ai].zc ? g_cg.rb : g_cg.b;
            char label[96];
            snprintf(label, sizeof label, "beside a busy kernel%s", algos[ai].zc ? " (zc)" : "");
            g_cg_hog_ms = HOG_MS;
            double t0 = gt_now_ms();
            cg_one(ctx, coll, algos[ai].algo, 0, 0, sizes[si], 0, 0, a, b, gt_seed(tag, 0, iter++),
                   label);
            double ms = gt_now_ms() - t0;
            g_cg_hog_ms = 0;
            if (ctx->rank == 0)
                gt_log(ctx, "%s: %s AllReduce %zu B finished (and checked) after %.1f ms", label,
                       cchan_coll_algo_name(algos[ai].algo), sizes[si], ms);
            if (!gt_all_ok(ctx)) return;
        }
}

/* ------------------------------------------------------------------ setup */

static void cg_setup(gt_ctx_t *ctx) {
    GT_CUDA(cudaMalloc((void **)&g_cg.a, CG_BUF_BYTES));
    GT_CUDA(cudaMalloc((void **)&g_cg.b, CG_BUF_BYTES));
    GT_CUDA(cudaMalloc((void **)&g_cg.ra, CG_BUF_BYTES));
    GT_CUDA(cudaMalloc((void **)&g_cg.rb, CG_BUF_BYTES));
    GT_CCHAN(cchan_coll_create(ctx->comm, NULL, &g_cg.plain));
    GT_CCHAN(cchan_coll_create(ctx->comm, NULL, &g_cg.zc));
    cchan_coll_config_t narrow = CCHAN_COLL_CONFIG_INIT;
    narrow.max_blocks = 4;
    narrow.scratch_bytes = 16 * GT_MiB;
    GT_CCHAN(cchan_coll_create(ctx->comm, &narrow, &g_cg.narrow));
    GT_CCHAN(cchan_coll_register(g_cg.zc, g_cg.ra, CG_BUF_BYTES));
    GT_CCHAN(cchan_coll_register(g_cg.zc, g_cg.rb, CG_BUF_BYTES));
}

static void cg_teardown(gt_ctx_t *ctx) {
    (void)ctx;
    GT_CCHAN(cchan_coll_deregister(g_cg.zc, g_cg.ra));
    GT_CCHAN(cchan_coll_deregister(g_cg.zc, g_cg.rb));
    GT_CCHAN(cchan_coll_destroy(g_cg.zc));
    GT_CCHAN(cchan_coll_destroy(g_cg.narrow));
    GT_CCHAN(cchan_coll_destroy(g_cg.plain));
    GT_CUDA(cudaFree(g_cg.a));
    GT_CUDA(cudaFree(g_cg.b));
    GT_CUDA(cudaFree(g_cg.ra));
    GT_CUDA(cudaFree(g_cg.rb));
}

static void cg_cases(gt_ctx_t *ctx) {
    gt_run(ctx, "correct_ll", case_correct_ll, 300);
    gt_run(ctx, "correct_hb", case_correct_hb, 300);
    gt_run(ctx, "correct_zc", case_correct_zc, 300);
    gt_run(ctx, "correct_auto", case_correct_auto, 300);
    gt_run(ctx, "correct_switch", case_correct_switch, 300);
    gt_run(ctx, "graph_replay", case_graph_replay, 300);
    gt_run(ctx, "correct_ce", case_correct_ce, 300);
    gt_run(ctx, "correct_zc_blocks", case_correct_zc_small_blocks, 300);
    gt_run(ctx, "graph_ce", case_graph_ce, 300);
    gt_run(ctx, "timing", case_timing, 300);
    gt_run(ctx, "allreduce_beside_busy_kernel", case_allreduce_beside_busy_kernel, 300);
}

GT_MAIN({"test_coll_gpu", cg_setup, cg_cases, cg_teardown, NULL, NULL})
