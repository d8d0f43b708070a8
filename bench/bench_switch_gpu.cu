/* cchan-bench switch-bw on GPUs: every rank at once, on the path the channel reports (portable
 * here: cchan never opts in to multicast, docs/switch_channel.md).
 *
 *   reduce-f32 / reduce-bf16  local = sum over members of buf, by every rank at once, vs a plain SM
 *                             kernel with the same grid that loads 16 bytes from each member's
 *                             mapping (the same pointers), adds and stores locally;
 *   broadcast                 every rank stores its local data into its own slot of every member's
 *                             buf, vs a plain SM kernel storing the same 16-byte vectors;
 *   allreduce                 f32 sum of `bytes` on every rank: rank barrier, one kernel that
 *                             reduces this rank's shard and broadcasts it into every member (grid
 *                             sized to the shard, at most the bandwidth grid), rank barrier
 *                             (docs/switch_channel.md), vs ncclAllReduce (libnccl.so.2 loaded at
 * run time, NCCL_NVLS_ENABLE forced to 0) on the same GPUs in the same run.
 *
 * Bandwidth rows: GB/s = result bytes per second per rank (algbw), median of r repetitions of a
 * CUDA graph of n launches. AllReduce rows: time per operation (ns) inside a CUDA graph of n
 * operations, median of r repetitions; GB/s there is algbw (bytes / time); busbw = algbw * 2 (n-1)
 * / n. Inputs are small integers stored as floats, so every sum is exact and checked before timing.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "bench_pattern.h"
#include "bench_switch.h"
#include "cchan/cchan.h"
#include "nccl_dyn.h"

#define SWB_MIB (1ull << 20)

typedef struct swb {
    cb_ctx_t *ctx;
    int rank, nranks, dev, shared_gpu;
    cudaStream_t s;
    cudaEvent_t e0, e1;
    uint64_t region;    /* bytes of one region */
    cchan_mem_t *B, *L; /* B = [input | nranks broadcast slots], L = one region */
    cchan_switch_t *owner;
    cchan_switch_channel_t ch;
    cchan_sem_set_t *sems;
    cchan_semaphore_t *d_bar; /* device array: the semaphore to each peer */
    unsigned long long *d_err;
    int blocks, threads;
    uint64_t seq;
} swb_t;

typedef struct swb_raw {
    uint8_t *m[CCHAN_SWITCH_MAX_MEMBERS];
    uint32_t n;
} swb_raw_t;

static void swb_die(swb_t *w, cudaError_t e, const char *what, int line) {
    cb_die(w->ctx, "bench_switch_gpu.cu:%d: %s: %s", line, what, cudaGetErrorString(e));
}
#define SCK(call)                                                                                  \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) swb_die(w, e_, #call, __LINE__);                                    \
    } while (0)

/* ---------------------------------------------------------------- kernels */

__device__ __forceinline__ uint32_t swb_tid() { return blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ uint32_t swb_nt() { return gridDim.x * blockDim.x; }

/* Integers in [-16, 15]: sums over up to 8 members stay within 8 significant bits, exact in f32
 * and bf16, so the checks compare exactly. */
__host__ __device__ __forceinline__ float swb_value(uint32_t seed, int rank, uint64_t i) {
    return (float)((int)(cb_pattern_word(seed + 977u * (uint32_t)rank, i) & 31u) - 16);
}

__global__ void k_swb_fill(uint8_t *p, uint64_t count, int bf16, uint32_t seed, int rank) {
    for (uint64_t i = swb_tid(); i < count; i += swb_nt()) {
        float v = swb_value(seed, rank, i);
        if (bf16)
            ((__nv_bfloat16 *)(void *)p)[i] = __float2bfloat16_rn(v);
        else
            ((float *)(void *)p)[i] = v;
    }
}

/* got[i] must be the sum over ranks of swb_value (reduce), or from_rank's value (from_rank >= 0).
 */
__global__ void k_swb_check(const uint8_t *p, uint64_t count, int bf16, uint32_t seed, int nranks,
                            int from_rank, unsigned long long *err) {
    unsigned long long bad = 0;
    for (uint64_t i = swb_tid(); i < count; i += swb_nt()) {
        float want = 0;
        if (from_rank >= 0)
            want = swb_value(seed, from_rank, i);
        else
            for (int r = 0; r < nranks; r++) want += swb_value(seed, r, i);
        float got = bf16 ? __bfloat162float(((const __nv_bfloat16 *)(const void *)p)[i])
                         : ((const float *)(const void *)p)[i];
        bad += got != want;
    }
    if (bad) atomicAdd(err, bad);
}

__global__ void k_swb_reduce(const __grid_constant__ cchan_switch_channel_t ch, int bf16,
                             uint64_t dst_off, uint64_t src_off, uint64_t bytes) {
    if (bf16)
        cchan_switch_channel_reduce_bf16(&ch, dst_off, src_off, bytes, swb_tid(), swb_nt());
    else
        cchan_switch_channel_reduce_f32(&ch, dst_off, src_off, bytes, swb_tid(), swb_nt());
}

/* One AllReduce step of this rank: reduce its shard into local, broadcast it into every member's
 * output. Same range, same alignment: each thread broadcasts what it reduced (switch_channel.h), so
 * no barrier between the two. */
__global__ void k_swb_ar_step(const __grid_constant__ cchan_switch_channel_t ch, uint64_t out_off,
                              uint64_t first, uint64_t mine) {
    cchan_switch_channel_reduce_f32(&ch, 0, first * 4, mine * 4, swb_tid(), swb_nt());
    cchan_switch_channel_broadcast_f32(&ch, out_off + first * 4, 0, mine * 4, swb_tid(), swb_nt());
}

__global__ void k_swb_broadcast(const __grid_constant__ cchan_switch_channel_t ch, uint64_t dst_off,
                                uint64_t src_off, uint64_t bytes) {
    cchan_switch_channel_broadcast_f32(&ch, dst_off, src_off, bytes, swb_tid(), swb_nt());
}

/* Baselines: no cchan code, the same member pointers. nvec 16-byte vectors, all aligned. */
__global__ void k_raw_reduce_f32(swb_raw_t raw, float4 *dst, uint64_t src_off, uint64_t nvec) {
    for (uint64_t i = swb_tid(); i < nvec; i += swb_nt()) {
        float4 in[CCHAN_SWITCH_MAX_MEMBERS];
#pragma unroll
        for (uint32_t m = 0; m < CCHAN_SWITCH_MAX_MEMBERS; m++)
            if (m < raw.n) in[m] = ((const float4 *)(const void *)(raw.m[m] + src_off))[i];
        float4 acc = in[0];
#pragma unroll
        for (uint32_t m = 1; m < CCHAN_SWITCH_MAX_MEMBERS; m++) {
            if (m < raw.n) {
                acc.x += in[m].x;
                acc.y += in[m].y;
                acc.z += in[m].z;
                acc.w += in[m].w;
            }
        }
        dst[i] = acc;
    }
}

__global__ void k_raw_reduce_bf16(swb_raw_t raw, uint4 *dst, uint64_t src_off, uint64_t nvec) {
    for (uint64_t i = swb_tid(); i < nvec; i += swb_nt()) {
        uint4 in[CCHAN_SWITCH_MAX_MEMBERS];
#pragma unroll
        for (uint32_t m = 0; m < CCHAN_SWITCH_MAX_MEMBERS; m++)
            if (m < raw.n) in[m] = ((const uint4 *)(const void *)(raw.m[m] + src_off))[i];
        float2 acc[4];
        const __nv_bfloat162 *b0 = (const __nv_bfloat162 *)(const void *)&in[0];
#pragma unroll
        for (int k = 0; k < 4; k++) acc[k] = __bfloat1622float2(b0[k]);
#pragma unroll
        for (uint32_t m = 1; m < CCHAN_SWITCH_MAX_MEMBERS; m++) {
            if (m < raw.n) {
                const __nv_bfloat162 *bm = (const __nv_bfloat162 *)(const void *)&in[m];
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    float2 f = __bfloat1622float2(bm[k]);
                    acc[k].x += f.x;
                    acc[k].y += f.y;
                }
            }
        }
        uint4 out;
        __nv_bfloat162 *o = (__nv_bfloat162 *)(void *)&out;
#pragma unroll
        for (int k = 0; k < 4; k++) o[k] = __float22bfloat162_rn(acc[k]);
        dst[i] = out;
    }
}

__global__ void k_raw_broadcast(swb_raw_t raw, uint64_t dst_off, const uint4 *src, uint64_t nvec) {
    for (uint64_t i = swb_tid(); i < nvec; i += swb_nt()) {
        const uint4 v = src[i];
#pragma unroll
        for (uint32_t m = 0; m < CCHAN_SWITCH_MAX_MEMBERS; m++)
            if (m < raw.n) ((uint4 *)(void *)(raw.m[m] + dst_off))[i] = v;
    }
}

__global__ void k_swb_barrier(const cchan_semaphore_t *sems, uint32_t npeers) {
    cchan_rank_barrier(sems, npeers, threadIdx.x);
}

/* ---------------------------------------------------------------- NCCL, loaded at run time */

/* NCCL through bench/nccl_dyn.h (dlopen; never multicast, docs/switch_channel.md). */
typedef struct swb_nccl {
    cb_nccl_t lib;
    cb_nccl_comm_t comm;
    char why[256]; /* why there is no NCCL baseline */
} swb_nccl_t;

/* Every rank calls this; returns 1 when every rank has a communicator. */
static int swb_nccl_init(swb_t *w, swb_nccl_t *n) {
    memset(n, 0, sizeof *n);
    int ok = cb_nccl_nvls_guard(n->why, sizeof n->why) == 0 &&
             cb_nccl_load(&n->lib, n->why, sizeof n->why) == 0;
    int all_ok = 1;
    for (int r = 0; r < w->nranks; r++) all_ok &= (int)cb_from_rank(w->ctx, r, ok);
    if (!all_ok) {
        if (!n->why[0]) snprintf(n->why, sizeof n->why, "NCCL is missing on another rank");
        if (ok) cb_nccl_unload(&n->lib);
        return 0;
    }
    cb_nccl_unique_id_t id;
    memset(&id, 0, sizeof id);
    int st = w->rank == 0 ? n->lib.GetUniqueId(&id) : 0;
    cb_nccl_unique_id_t *ids = (cb_nccl_unique_id_t *)calloc((size_t)w->nranks, sizeof id);
    if (!ids) cb_die(w->ctx, "out of memory");
    cb_allgather(w->ctx, &id, ids, sizeof id);
    id = ids[0];
    free(ids);
    st = (int)cb_from_rank(w->ctx, 0, st);
    if (st == 0) st = n->lib.CommInitRank(&n->comm, w->nranks, id, w->rank);
    int good = st == 0;
    for (int r = 0; r < w->nranks; r++) good &= (int)cb_from_rank(w->ctx, r, st == 0);
    if (!good) {
        snprintf(n->why, sizeof n->why, "ncclCommInitRank failed (%s)",
                 st ? cb_nccl_error(&n->lib, st) : "on another rank");
        if (n->comm) n->lib.CommDestroy(n->comm);
        n->comm = NULL;
        cb_nccl_unload(&n->lib);
        return 0;
    }
    return 1;
}

static void swb_nccl_fini(swb_nccl_t *n) {
    if (n->comm) n->lib.CommDestroy(n->comm);
    if (n->lib.handle) cb_nccl_unload(&n->lib);
    n->comm = NULL;
}

/* ---------------------------------------------------------------- helpers */

static void swb_sync(swb_t *w, const char *what) {
    double t0 = cb_now();
    cudaError_t e;
    while ((e = cudaStreamQuery(w->s)) == cudaErrorNotReady) {
        if (cb_now() - t0 > 120.0)
            cb_die(w->ctx, "%s did not finish within 120 s (is the peer rank alive?)", what);
        sched_yield();
    }
    if (e != cudaSuccess) {
        char diag[512] = "";
        if (cchan_comm_check_device(w->ctx->comm) < 0)
            snprintf(diag, sizeof diag, "; device diagnostic: %s", cchan_last_error());
        cb_die(w->ctx, "%s: %s%s", what, cudaGetErrorString(e), diag);
    }
}

static unsigned swb_grid(uint64_t n) {
    uint64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

static int64_t swb_check(swb_t *w, const uint8_t *p, uint64_t count, int bf16, uint32_t seed,
                         int from_rank) {
    unsigned long long h = 0;
    SCK(cudaMemsetAsync(w->d_err, 0, sizeof h, w->s));
    k_swb_check<<<swb_grid(count), 256, 0, w->s>>>(p, count, bf16, seed, w->nranks, from_rank,
                                                   w->d_err);
    SCK(cudaGetLastError());
    SCK(cudaMemcpyAsync(&h, w->d_err, sizeof h, cudaMemcpyDeviceToHost, w->s));
    swb_sync(w, "check");
    return (int64_t)h;
}

static swb_raw_t swb_raw(const swb_t *w) {
    swb_raw_t r;
    memset(&r, 0, sizeof r);
    for (uint32_t m = 0; m < w->ch.nmembers; m++) r.m[m] = w->ch.member[m];
    r.n = w->ch.nmembers;
    return r;
}

enum swb_kind { K_RED_F32, K_RAW_RED_F32, K_RED_BF16, K_RAW_RED_BF16, K_BCAST, K_RAW_BCAST };

static void swb_launch(swb_t *w, int kind, uint64_t bytes) {
    const uint64_t slot = w->region * (1 + (uint64_t)w->rank); /* this rank's broadcast slot */
    uint8_t *local = (uint8_t *)cchan_mem_ptr(w->L);
    switch (kind) {
    case K_RED_F32:
    case K_RED_BF16:
        k_swb_reduce<<<w->blocks, w->threads, 0, w->s>>>(w->ch, kind == K_RED_BF16, 0, 0, bytes);
        break;
    case K_RAW_RED_F32:
        k_raw_reduce_f32<<<w->blocks, w->threads, 0, w->s>>>(swb_raw(w), (float4 *)(void *)local, 0,
                                                             bytes / 16);
        break;
    case K_RAW_RED_BF16:
        k_raw_reduce_bf16<<<w->blocks, w->threads, 0, w->s>>>(swb_raw(w), (uint4 *)(void *)local, 0,
                                                              bytes / 16);
        break;
    case K_BCAST: k_swb_broadcast<<<w->blocks, w->threads, 0, w->s>>>(w->ch, slot, 0, bytes); break;
    case K_RAW_BCAST:
        k_raw_broadcast<<<w->blocks, w->threads, 0, w->s>>>(
            swb_raw(w), slot, (const uint4 *)(const void *)local, bytes / 16);
        break;
    }
}

/* Every rank runs `kind` at once: fill, one checked run, then reps x (graph of iters launches). */
static void swb_measure(swb_t *w, int kind, uint64_t bytes, int iters, int reps, cb_stats_t *st,
                        int64_t *errors) {
    const int bf16 = kind == K_RED_BF16 || kind == K_RAW_RED_BF16;
    const int bcast = kind == K_BCAST || kind == K_RAW_BCAST;
    const uint64_t count = bytes / (bf16 ? 2 : 4);
    const uint32_t seed = w->ctx->seed + 0x9e3779b9u * (uint32_t)++w->seq;
    uint8_t *b = (uint8_t *)cchan_mem_ptr(w->B), *l = (uint8_t *)cchan_mem_ptr(w->L);
    memset(st, 0, sizeof *st);
    k_swb_fill<<<swb_grid(count), 256, 0, w->s>>>(bcast ? l : b, count, bf16, seed, w->rank);
    SCK(cudaGetLastError());
    SCK(cudaMemsetAsync(bcast ? b + w->region : l, 0xa5, bcast ? w->region * w->nranks : bytes,
                        w->s));
    swb_sync(w, "fill");
    cb_barrier(w->ctx);
    swb_launch(w, kind, bytes);
    SCK(cudaGetLastError());
    swb_sync(w, "checked run");
    cb_barrier(w->ctx);
    int64_t bad = 0;
    if (bcast)
        for (int r = 0; r < w->nranks; r++)
            bad += swb_check(w, b + w->region * (1 + (uint64_t)r), count, 0, seed, r);
    else
        bad = swb_check(w, l, count, bf16, seed, -1);
    *errors = cb_errors_combine(w->ctx, bad);

    cudaGraph_t gr;
    cudaGraphExec_t exec;
    SCK(cudaStreamBeginCapture(w->s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < iters; i++) swb_launch(w, kind, bytes);
    SCK(cudaStreamEndCapture(w->s, &gr));
    SCK(cudaGraphInstantiateWithFlags(&exec, gr, 0));
    SCK(cudaGraphDestroy(gr));
    SCK(cudaGraphLaunch(exec, w->s));
    swb_sync(w, "graph upload");
    double v[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        cb_barrier(w->ctx); /* every rank at once */
        SCK(cudaEventRecord(w->e0, w->s));
        SCK(cudaGraphLaunch(exec, w->s));
        SCK(cudaEventRecord(w->e1, w->s));
        swb_sync(w, "timed run");
        float ms = 0;
        SCK(cudaEventElapsedTime(&ms, w->e0, w->e1));
        v[r] = (double)bytes * iters / ((double)ms * 1e6);
    }
    SCK(cudaGraphExecDestroy(exec));
    cb_stats(v, reps, st);
}

static void swb_row(cb_row_t *row, const char *op, const char *base_op, const char *units,
                    uint64_t bytes, int blocks, int threads) {
    memset(row, 0, sizeof *row);
    snprintf(row->test, sizeof row->test, "switch-bw");
    snprintf(row->op, sizeof row->op, "%s", op);
    snprintf(row->base_op, sizeof row->base_op, "%s", base_op);
    snprintf(row->units, sizeof row->units, "%s", units);
    row->src = 0;
    row->dst = -1; /* every rank */
    row->bytes = bytes;
    row->blocks = blocks;
    row->threads = threads;
    row->errors = -1;
}

/* ---------------------------------------------------------------- AllReduce */

typedef struct swb_ar {
    uint64_t count, first, mine; /* elements: total, this rank's shard start and length */
    float *nccl_in, *nccl_out;
} swb_ar_t;

static void swb_ar_enqueue(swb_t *w, const swb_ar_t *a) {
    const uint32_t npeers = (uint32_t)w->nranks - 1;
    k_swb_barrier<<<1, 32, 0, w->s>>>(w->d_bar, npeers);
    if (a->mine) {
        /* a grid no larger than the shard's 16-byte vectors need */
        uint64_t need = (a->mine / 4 + (uint64_t)w->threads - 1) / (uint64_t)w->threads;
        unsigned blocks = need < 1                     ? 1u
                          : need > (uint64_t)w->blocks ? (unsigned)w->blocks
                                                       : (unsigned)need;
        k_swb_ar_step<<<blocks, w->threads, 0, w->s>>>(w->ch, w->region, a->first, a->mine);
    }
    k_swb_barrier<<<1, 32, 0, w->s>>>(w->d_bar, npeers);
}

/* Per-operation time (ns), reps samples, of cchan (nccl == NULL) or NCCL. */
static int swb_ar_time(swb_t *w, const swb_ar_t *a, swb_nccl_t *nccl, int iters, int reps,
                       cb_stats_t *st) {
    cudaGraph_t gr;
    cudaGraphExec_t exec;
    memset(st, 0, sizeof *st);
    cudaStreamCaptureMode mode =
        nccl ? cudaStreamCaptureModeRelaxed : cudaStreamCaptureModeThreadLocal;
    SCK(cudaStreamBeginCapture(w->s, mode));
    int nst = 0;
    for (int i = 0; i < iters && !nst; i++) {
        if (nccl)
            nst = nccl->lib.AllReduce(a->nccl_in, a->nccl_out, a->count, CB_NCCL_FLOAT32,
                                      CB_NCCL_SUM, nccl->comm, (void *)w->s);
        else
            swb_ar_enqueue(w, a);
    }
    SCK(cudaStreamEndCapture(w->s, &gr));
    if (nst) {
        cudaGraphDestroy(gr);
        return nst;
    }
    SCK(cudaGraphInstantiateWithFlags(&exec, gr, 0));
    SCK(cudaGraphDestroy(gr));
    cb_barrier(w->ctx);
    SCK(cudaGraphLaunch(exec, w->s)); /* upload and warm up, every rank at once */
    swb_sync(w, "allreduce graph upload");
    double v[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        cb_barrier(w->ctx);
        SCK(cudaEventRecord(w->e0, w->s));
        SCK(cudaGraphLaunch(exec, w->s));
        SCK(cudaEventRecord(w->e1, w->s));
        swb_sync(w, "timed allreduce");
        float ms = 0;
        SCK(cudaEventElapsedTime(&ms, w->e0, w->e1));
        v[r] = (double)ms * 1e6 / iters;
    }
    SCK(cudaGraphExecDestroy(exec));
    cb_stats(v, reps, st);
    return 0;
}

static void swb_allreduce(swb_t *w) {
    cb_ctx_t *ctx = w->ctx;
    const cb_opts_t *o = &ctx->opt;
    if (w->shared_gpu && !cb_mps_client()) {
        cb_printf(ctx,
                  "# switch-bw allreduce: skipped (two ranks share a GPU without MPS; their barrier "
                  "kernels would wait on each other)\n");
        return;
    }
    uint64_t sizes[CB_MAX_SIZES];
    const uint64_t cap = w->region - 4096;
    int ns = cb_sweep(o, 1024, 256 * SWB_MIB, 4, 16, cap, sizes);
    const int reps = cb_opt_int(o->reps, 5);
    swb_nccl_t nccl;
    int have_nccl = swb_nccl_init(w, &nccl);
    float *nin = NULL, *nout = NULL;
    if (have_nccl) {
        SCK(cudaMalloc(&nin, sizes[ns - 1]));
        SCK(cudaMalloc(&nout, sizes[ns - 1]));
    }
    char base_desc[320];
    if (have_nccl)
        snprintf(base_desc, sizeof base_desc, "ncclAllReduce, NCCL %d.%d.%d (NCCL_NVLS_ENABLE=0)",
                 nccl.lib.version / 10000, nccl.lib.version / 100 % 100, nccl.lib.version % 100);
    else
        snprintf(base_desc, sizeof base_desc, "no NCCL baseline: %s", nccl.why);
    char title[768];
    snprintf(
        title, sizeof title,
        "switch-bw allreduce (f32 sum, %d ranks): rank barrier + one kernel reducing this rank's "
        "shard and broadcasting it + rank barrier, %s path, up to %d x %d\n"
        "#   vs %s; time per operation in a CUDA graph, median of %d reps; GB/s = algbw "
        "(busbw = algbw x %.2f)",
        w->nranks, cchan_switch_path_name(w->ch.path), w->blocks, w->threads, base_desc, reps,
        2.0 * (w->nranks - 1) / w->nranks);
    cb_lat_header(ctx, title, "allreduce", have_nccl ? "nccl-allreduce" : "-");
    uint8_t *b = (uint8_t *)cchan_mem_ptr(w->B);
    for (int si = 0; si < ns; si++) {
        const uint64_t bytes = sizes[si] / 4 * 4;
        swb_ar_t a;
        memset(&a, 0, sizeof a);
        a.count = bytes / 4;
        const uint64_t chunk = (a.count / (uint64_t)w->nranks + 3) / 4 * 4;
        a.first = chunk * (uint64_t)w->rank < a.count ? chunk * (uint64_t)w->rank : a.count;
        a.mine = a.count - a.first < chunk ? a.count - a.first : chunk;
        a.nccl_in = nin;
        a.nccl_out = nout;
        const uint32_t seed = ctx->seed + 0x51ed27u * (uint32_t)++w->seq;
        int iters = (int)(2e9 / (double)bytes);
        iters = iters < 5 ? 5 : iters > 200 ? 200 : iters;
        if (o->iters > 0) iters = o->iters;

        /* check both once: inputs, output region poisoned, one operation */
        k_swb_fill<<<swb_grid(a.count), 256, 0, w->s>>>(b, a.count, 0, seed, w->rank);
        SCK(cudaMemsetAsync(b + w->region, 0xa5, bytes, w->s));
        if (have_nccl) {
            k_swb_fill<<<swb_grid(a.count), 256, 0, w->s>>>((uint8_t *)nin, a.count, 0, seed,
                                                            w->rank);
            SCK(cudaMemsetAsync(nout, 0xa5, bytes, w->s));
        }
        SCK(cudaGetLastError());
        swb_sync(w, "allreduce fill");
        cb_barrier(ctx);
        swb_ar_enqueue(w, &a);
        SCK(cudaGetLastError());
        int nst = 0;
        if (have_nccl)
            nst = nccl.lib.AllReduce(nin, nout, a.count, CB_NCCL_FLOAT32, CB_NCCL_SUM, nccl.comm,
                                     (void *)w->s);
        if (nst) cb_die(ctx, "ncclAllReduce: %s", cb_nccl_error(&nccl.lib, nst));
        swb_sync(w, "allreduce check run");
        int64_t bad = swb_check(w, b + w->region, a.count, 0, seed, -1);
        if (have_nccl) bad += swb_check(w, (const uint8_t *)nout, a.count, 0, seed, -1);

        cb_row_t row;
        swb_row(&row, "allreduce", have_nccl ? "nccl-allreduce" : "-", "ns", bytes, w->blocks,
                w->threads);
        row.errors = cb_errors_combine(ctx, bad);
        swb_ar_time(w, &a, NULL, iters, reps, &row.value);
        if (have_nccl && swb_ar_time(w, &a, &nccl, iters, reps, &row.base) != 0)
            cb_die(ctx, "ncclAllReduce failed while captured");
        cb_lat_row(ctx, &row);
    }
    if (have_nccl) {
        SCK(cudaFree(nin));
        SCK(cudaFree(nout));
    }
    swb_nccl_fini(&nccl);
    if (!have_nccl) cb_printf(ctx, "# note: %s\n", nccl.why[0] ? nccl.why : "no NCCL");
}

/* ---------------------------------------------------------------- entry */

static void swb_setup(swb_t *w, cb_ctx_t *ctx) {
    memset(w, 0, sizeof *w);
    w->ctx = ctx;
    w->rank = ctx->rank;
    w->nranks = ctx->nranks;
    w->dev = cchan_comm_device(ctx->comm);
    const cb_opts_t *o = &ctx->opt;
    w->blocks = o->ngrids ? o->grids[o->ngrids - 1] : 132;
    w->threads = o->threads ? o->threads : 512;
    SCK(cudaSetDevice(w->dev));
    SCK(cudaStreamCreateWithFlags(&w->s, cudaStreamNonBlocking));
    SCK(cudaEventCreate(&w->e0));
    SCK(cudaEventCreate(&w->e1));
    SCK(cudaMalloc(&w->d_err, sizeof(unsigned long long)));
    char bus[32] = "";
    SCK(cudaDeviceGetPCIBusId(bus, sizeof bus, w->dev));
    char(*all)[32] = (char(*)[32])calloc((size_t)w->nranks, 32);
    if (!all) cb_die(ctx, "out of memory");
    cb_allgather(ctx, bus, all, 32);
    for (int r = 0; r < w->nranks; r++)
        for (int q = r + 1; q < w->nranks; q++) w->shared_gpu |= !strcmp(all[r], all[q]);
    free(all);

    uint64_t top = o->max_bytes ? o->max_bytes : 256 * SWB_MIB;
    w->region = (top + 4096 + 2 * SWB_MIB - 1) / (2 * SWB_MIB) * (2 * SWB_MIB);
    cb_check(ctx, cchan_mem_alloc(ctx->comm, w->region * (1 + (uint64_t)w->nranks), 0, &w->B),
             "cchan_mem_alloc(switch buf)");
    cb_check(ctx, cchan_mem_alloc(ctx->comm, w->region, 0, &w->L), "cchan_mem_alloc(switch local)");
    cb_check(ctx, cchan_switch_channel_create(ctx->comm, w->B, w->L, 0, &w->ch, &w->owner),
             "cchan_switch_channel_create");
    cb_check(ctx, cchan_sem_set_create(ctx->comm, 1, 0, &w->sems), "cchan_sem_set_create");
    cchan_semaphore_t sems[CCHAN_SWITCH_MAX_MEMBERS];
    for (int p = 0, k = 0; p < w->nranks; p++)
        if (p != w->rank)
            cb_check(ctx, cchan_sem_set_get(w->sems, p, 0, &sems[k++]), "cchan_sem_set_get");
    SCK(cudaMalloc(&w->d_bar, sizeof sems));
    SCK(cudaMemcpy(w->d_bar, sems, sizeof sems, cudaMemcpyHostToDevice));
    cb_barrier(ctx);
}

static void swb_teardown(swb_t *w) {
    cb_ctx_t *ctx = w->ctx;
    cb_barrier(ctx);
    cb_check(ctx, cchan_switch_destroy(w->owner), "cchan_switch_destroy");
    cb_check(ctx, cchan_sem_set_destroy(w->sems), "cchan_sem_set_destroy");
    cb_barrier(ctx);
    cb_check(ctx, cchan_mem_destroy(w->B), "cchan_mem_destroy");
    cb_check(ctx, cchan_mem_destroy(w->L), "cchan_mem_destroy");
    SCK(cudaFree(w->d_bar));
    SCK(cudaFree(w->d_err));
    SCK(cudaEventDestroy(w->e0));
    SCK(cudaEventDestroy(w->e1));
    SCK(cudaStreamDestroy(w->s));
}

extern "C" void cb_switch_gpu(cb_ctx_t *ctx) {
    if (ctx->nranks > CCHAN_SWITCH_MAX_MEMBERS) {
        cb_printf(ctx, "# switch-bw: skipped (%d ranks; a switch channel has at most %d members)\n",
                  ctx->nranks, CCHAN_SWITCH_MAX_MEMBERS);
        return;
    }
    swb_t ww, *w = &ww;
    swb_setup(w, ctx);
    const cb_opts_t *o = &ctx->opt;
    uint64_t sizes[CB_MAX_SIZES];
    int ns = cb_sweep(o, 4096, 256 * SWB_MIB, 4, 16, w->region - 4096, sizes);
    const int iters = cb_opt_int(o->iters, 20), reps = cb_opt_int(o->reps, 5);
    static const struct {
        int kind, base;
        const char *op, *base_op, *what;
    } ops[] = {
        {K_RED_F32, K_RAW_RED_F32, "reduce-f32", "sm-sum",
         "cchan_switch_channel_reduce_f32 vs a plain SM kernel summing the members' 16-byte "
         "vectors"},
        {K_RED_BF16, K_RAW_RED_BF16, "reduce-bf16", "sm-sum",
         "cchan_switch_channel_reduce_bf16 vs a plain SM kernel (cuda_bf16 conversions)"},
        {K_BCAST, K_RAW_BCAST, "broadcast", "sm-store",
         "cchan_switch_channel_broadcast_f32 vs a plain SM kernel storing into every member"}};
    for (int k = 0; k < 3; k++) {
        char title[512];
        snprintf(title, sizeof title,
                 "switch-bw %s: %s, %s path, all %d ranks at once, %d x %d\n#   median of %d reps "
                 "x %d launches in a CUDA graph; GB/s = result bytes per second per rank",
                 ops[k].op, ops[k].what, cchan_switch_path_name(w->ch.path), w->nranks, w->blocks,
                 w->threads, reps, iters);
        cb_bw_header(ctx, title, ops[k].op, ops[k].base_op, "GB/s");
        for (int si = 0; si < ns; si++) {
            const uint64_t bytes = sizes[si] / 16 * 16;
            cb_row_t row;
            swb_row(&row, ops[k].op, ops[k].base_op, "GB/s", bytes, w->blocks, w->threads);
            int64_t e1, e2;
            swb_measure(w, ops[k].kind, bytes, iters, reps, &row.value, &e1);
            swb_measure(w, ops[k].base, bytes, iters, reps, &row.base, &e2);
            row.errors = e1 < 0 ? e2 : (e2 < 0 ? e1 : e1 + e2);
            cb_bw_row(ctx, &row);
        }
    }
    swb_allreduce(w);
    swb_teardown(w);
}
