/* cchan-bench on GPUs: bandwidth (mem-bw, port-bw) and the all-pairs matrix, each against a
 * baseline in the same run (SM copy kernel, copy engine). Timing: CUDA events around a CUDA graph
 * of n back-to-back launches (memory channel, SM copy), around one kernel that loops n times (port
 * channel), or around n stream copies (copy engine); repeated r times; rows give the median (and
 * min/max) over the repetitions. */
#include "bench_gpu.h"

/* ================================================================ kernels */

__global__ void k_mc_put(const __grid_constant__ cchan_memory_channel_t ch, uint64_t bytes) {
    cchan_memory_channel_put(&ch, 0, 0, bytes, blockIdx.x * blockDim.x + threadIdx.x,
                             gridDim.x * blockDim.x);
}

__global__ void k_mc_get(const __grid_constant__ cchan_memory_channel_t ch, uint64_t bytes) {
    cchan_memory_channel_get(&ch, 0, 0, bytes, blockIdx.x * blockDim.x + threadIdx.x,
                             gridDim.x * blockDim.x);
}

/* The baseline: a plain grid-stride loop of 16-byte loads and stores (one in flight per thread),
 * dst and src 16-byte aligned. */
__global__ void k_sm_copy(uint8_t *dst, const uint8_t *src, uint64_t bytes) {
    const uint64_t n = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t tid = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
    const uint64_t nv = bytes / 16;
    uint4 *d = (uint4 *)dst;
    const uint4 *s = (const uint4 *)src;
#pragma unroll 1
    for (uint64_t i = tid; i < nv; i += n) d[i] = s[i];
    for (uint64_t i = nv * 16 + tid; i < bytes; i += n) dst[i] = src[i];
}

/* One thread: n messages of `bytes`, each as puts of at most `chunk`; a flush after every message
 * (flush_each) or once at the end. */
__global__ void k_port_put(const __grid_constant__ cchan_port_channel_t ch, uint64_t bytes,
                           uint64_t chunk, int iters, int flush_each) {
    if (threadIdx.x || blockIdx.x) return;
    for (int it = 0; it < iters; it++) {
        for (uint64_t off = 0; off < bytes; off += chunk)
            cchan_port_channel_put(&ch, off, off, bytes - off < chunk ? bytes - off : chunk);
        if (flush_each) cchan_port_channel_flush(&ch);
    }
    if (!flush_each) cchan_port_channel_flush(&ch);
}

/* ================================================================ bandwidth */

static void ce_copy(gpu_t *g, int b, uint64_t bytes) {
    const cchan_memory_channel_t *ch = &g->ch.mch[b];
    if (g->ce_peer_api) {
        int dst_dev = g->dev_of[b] >= 0 ? g->dev_of[b] : g->dev;
        CK(cudaMemcpyPeerAsync(ch->remote, dst_dev, ch->local, g->dev, bytes, g->s));
    } else {
        CK(cudaMemcpyAsync(ch->remote, ch->local, bytes, cudaMemcpyDefault, g->s));
    }
}

/* Enqueues `n` iterations of `kind` from this rank toward rank b. */
static void bw_enqueue(gpu_t *g, int kind, int b, uint64_t bytes, int grid, int threads,
                       uint64_t chunk, int n) {
    const cchan_memory_channel_t &ch = g->ch.mch[b];
    switch (kind) {
    case BW_MC_PUT:
        for (int i = 0; i < n; i++) k_mc_put<<<grid, threads, 0, g->s>>>(ch, bytes);
        break;
    case BW_SM_WRITE:
        for (int i = 0; i < n; i++)
            k_sm_copy<<<grid, threads, 0, g->s>>>(ch.remote, ch.local, bytes);
        break;
    case BW_MC_GET:
        for (int i = 0; i < n; i++) k_mc_get<<<grid, threads, 0, g->s>>>(ch, bytes);
        break;
    case BW_SM_READ:
        for (int i = 0; i < n; i++)
            k_sm_copy<<<grid, threads, 0, g->s>>>(ch.local, ch.remote, bytes);
        break;
    case BW_PORT_PUT:
    case BW_PORT_FLUSH:
        k_port_put<<<1, 1, 0, g->s>>>(g->ch.pch[b], bytes, chunk, n, kind == BW_PORT_FLUSH);
        break;
    case BW_CE:
        for (int i = 0; i < n; i++) ce_copy(g, b, bytes);
        break;
    case BW_CE_SYNC:
        for (int i = 0; i < n; i++) {
            ce_copy(g, b, bytes);
            CK(cudaStreamSynchronize(g->s));
        }
        break;
    }
    CK_LAUNCH();
}

/* reps samples of GB/s, each over `iters` iterations. */
static void bw_time(gpu_t *g, int kind, int b, uint64_t bytes, int grid, int threads,
                    uint64_t chunk, int iters, int reps, cb_stats_t *st) {
    double *v = (double *)malloc(sizeof(double) * (size_t)reps);
    if (!v) cb_die(g->ctx, "out of memory");
    cudaGraphExec_t exec = NULL;
    int graph = kind == BW_MC_PUT || kind == BW_SM_WRITE || kind == BW_MC_GET || kind == BW_SM_READ;
    if (graph) {
        cudaGraph_t gr;
        CK(cudaStreamBeginCapture(g->s, cudaStreamCaptureModeThreadLocal));
        bw_enqueue(g, kind, b, bytes, grid, threads, chunk, iters);
        CK(cudaStreamEndCapture(g->s, &gr));
        CK(cudaGraphInstantiateWithFlags(&exec, gr, 0));
        CK(cudaGraphDestroy(gr));
        CK(cudaGraphLaunch(exec, g->s)); /* first launch uploads the graph */
        gsync(g, "graph upload");
    }
    for (int r = 0; r < reps; r++) {
        double us;
        if (kind == BW_CE_SYNC) {
            double t0 = cb_now();
            bw_enqueue(g, kind, b, bytes, grid, threads, chunk, iters);
            us = (cb_now() - t0) * 1e6;
        } else {
            CK(cudaEventRecord(g->e0, g->s));
            if (graph)
                CK(cudaGraphLaunch(exec, g->s));
            else
                bw_enqueue(g, kind, b, bytes, grid, threads, chunk, iters);
            CK(cudaEventRecord(g->e1, g->s));
            gsync(g, "timed bandwidth run");
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, g->e0, g->e1));
            us = (double)ms * 1e3;
        }
        v[r] = (double)bytes * iters / (us * 1e3); /* GB/s */
    }
    if (exec) CK(cudaGraphExecDestroy(exec));
    cb_stats(v, reps, st);
    free(v);
}

/* Rank a runs `kind` toward rank b: the source owner fills, the receiver poisons, a warms up, the
 * receiver checks, a times. Every rank calls this; st is valid on rank a. */
static void bw_measure(gpu_t *g, int kind, int a, int b, uint64_t bytes, int grid, int threads,
                       uint64_t chunk, int iters, int warm, int reps, cb_stats_t *st,
                       int64_t *errors) {
    const int me = g->rank;
    const int get = kind == BW_MC_GET || kind == BW_SM_READ;
    const int owner = get ? b : a, receiver = get ? a : b;
    const uint32_t seed = seed_of(g, owner);
    g->row_seq++;
    memset(st, 0, sizeof *st);
    if (me == owner) fill(g, g->d_data, bytes, seed);
    if (me == receiver) fill(g, g->d_data, bytes, CB_POISON_SEED ^ (uint32_t)g->row_seq);
    if (me == owner || me == receiver) gsync(g, "fill");
    cb_barrier(g->ctx);
    if (me == a) {
        bw_enqueue(g, kind, b, bytes, grid, threads, chunk, warm > 0 ? warm : 1);
        gsync(g, "warmup");
    }
    cb_barrier(g->ctx);
    int64_t mine = -1;
    if (me == receiver) mine = verify(g, g->d_data, bytes, seed, 0, "bandwidth check");
    *errors = cb_errors_combine(g->ctx, mine);
    if (me == a) bw_time(g, kind, b, bytes, grid, threads, chunk, iters, reps, st);
    cb_barrier(g->ctx);
}

void run_mem_bw(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    const cb_opts_t *o = &ctx->opt;
    uint64_t sizes[CB_MAX_SIZES];
    int ns = cb_sweep(o, 4096, 1ull << 30, 2, 1, g->ch.data_bytes, sizes);
    int grids[CB_MAX_GRIDS], ng;
    default_grids(o, grids, &ng);
    const int threads = o->threads ? o->threads : 512;
    const int iters = cb_opt_int(o->iters, 20), warm = cb_opt_int(o->warmup, 5),
              reps = cb_opt_int(o->reps, 5);
    static const struct {
        int kind, base;
        const char *op, *base_op, *what;
    } ops[] = {{BW_MC_PUT, BW_SM_WRITE, "put", "sm-copy",
                "cchan_memory_channel_put vs a plain SM copy kernel writing to the peer"},
               {BW_MC_GET, BW_SM_READ, "get", "sm-copy",
                "cchan_memory_channel_get vs a plain SM copy kernel reading from the peer"}};
    for (int k = 0; k < 2; k++) {
        g->phase++;
        char title[512];
        snprintf(title, sizeof title,
                 "mem-bw %s: %s, rank 0 -> rank 1\n#   16-byte accesses, same grid; median of %d "
                 "reps x %d "
                 "launches in a CUDA graph; GB/s = 1e9 B/s",
                 ops[k].op, ops[k].what, reps, iters);
        cb_bw_header(ctx, title, ops[k].op, ops[k].base_op, "GB/s");
        for (int gi = 0; gi < ng; gi++) {
            for (int si = 0; si < ns; si++) {
                cb_row_t row;
                memset(&row, 0, sizeof row);
                int64_t e1, e2;
                bw_measure(g, ops[k].kind, 0, 1, sizes[si], grids[gi], threads, 0, iters, warm,
                           reps, &row.value, &e1);
                bw_measure(g, ops[k].base, 0, 1, sizes[si], grids[gi], threads, 0, iters, warm,
                           reps, &row.base, &e2);
                snprintf(row.test, sizeof row.test, "mem-bw");
                snprintf(row.op, sizeof row.op, "%s", ops[k].op);
                snprintf(row.base_op, sizeof row.base_op, "%s", ops[k].base_op);
                snprintf(row.units, sizeof row.units, "GB/s");
                row.src = 0;
                row.dst = 1;
                row.bytes = sizes[si];
                row.blocks = grids[gi];
                row.threads = threads;
                row.errors = e1 < 0 ? e2 : (e2 < 0 ? e1 : e1 + e2);
                cb_bw_row(ctx, &row);
            }
        }
    }
}

/* ================================================================ port channel */

static uint64_t port_chunk(const cb_opts_t *o, uint64_t bytes) {
    if (o->chunk_none) return bytes ? bytes : 1;
    return o->chunk ? o->chunk : 4 * CB_MIB;
}

void run_port_bw(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    const cb_opts_t *o = &ctx->opt;
    port_setup(g);
    uint64_t sizes[CB_MAX_SIZES];
    int ns = cb_sweep(o, 64 * 1024, 1ull << 30, 2, 1, g->ch.data_bytes, sizes);
    const int iters = cb_opt_int(o->iters, 20), warm = cb_opt_int(o->warmup, 5),
              reps = cb_opt_int(o->reps, 5);
    char chunk_s[64];
    if (o->chunk_none)
        snprintf(chunk_s, sizeof chunk_s, "one put per message");
    else
        snprintf(chunk_s, sizeof chunk_s, "puts of %llu bytes",
                 (unsigned long long)port_chunk(o, 0));
    /* put: as chunked as -c says; put-whole: one put per message (skipped when that is what -c
     * says); put-flush: a flush after every message, completion included. */
    static const char *ops[3] = {"put", "put-whole", "put-flush"};
    for (int k = 0; k < 3; k++) {
        if (k == 1 && o->chunk_none) continue;
        g->phase++;
        char title[512];
        if (k < 2)
            snprintf(title, sizeof title,
                     "port-bw %s: one GPU thread, %s, %d messages back to back then one flush, "
                     "rank 0 -> "
                     "rank 1\n#   vs %d x %s back to back on one stream; median of %d reps (CUDA "
                     "events)",
                     ops[k], k ? "one put per message" : chunk_s, iters, iters, ce_name(g), reps);
        else
            snprintf(title, sizeof title,
                     "port-bw put-flush: one GPU thread, %s then a flush, per message (completion "
                     "included)\n#   vs %s + cudaStreamSynchronize per message (host clock); "
                     "median of %d "
                     "reps x %d messages",
                     chunk_s, ce_name(g), reps, iters);
        cb_bw_header(ctx, title, ops[k], k == 2 ? "ce+sync" : "ce", "GB/s");
        for (int si = 0; si < ns; si++) {
            cb_row_t row;
            cb_row_init(&row, "port-bw", ops[k], "", "GB/s", sizes[si], 1, 1);
            snprintf(row.base_op, sizeof row.base_op, "%s%s", ce_name(g), k == 2 ? "+sync" : "");
            int64_t e1, e2;
            uint64_t chunk = k == 1 ? sizes[si] : port_chunk(o, sizes[si]);
            bw_measure(g, k == 2 ? BW_PORT_FLUSH : BW_PORT_PUT, 0, 1, sizes[si], 1, 1, chunk, iters,
                       warm, reps, &row.value, &e1);
            bw_measure(g, k == 2 ? BW_CE_SYNC : BW_CE, 0, 1, sizes[si], 1, 1, chunk, iters, warm,
                       reps, &row.base, &e2);
            row.errors = e1 < 0 ? e2 : (e2 < 0 ? e1 : e1 + e2);
            cb_bw_row(ctx, &row);
        }
    }
}

/* ================================================================ matrix */

static void print_matrix(cb_ctx_t *ctx, const char *title, const double *m, int n) {
    cb_printf(ctx, "#\n# %s\n#   %6s", title, "src\\dst");
    for (int j = 0; j < n; j++) cb_printf(ctx, " %9d", j);
    cb_printf(ctx, "\n");
    double sum = 0;
    for (int i = 0; i < n; i++) {
        cb_printf(ctx, "    %6d", i);
        for (int j = 0; j < n; j++) {
            if (i == j)
                cb_printf(ctx, " %9s", "-");
            else
                cb_printf(ctx, " %9.2f", m[i * n + j]);
            if (i != j) sum += m[i * n + j];
        }
        cb_printf(ctx, "\n");
    }
    cb_printf(ctx, "    SUM %.2f GB/s\n", sum);
}

void run_matrix(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    const cb_opts_t *o = &ctx->opt;
    port_setup(g);
    g->phase++;
    const int n = g->nranks;
    uint64_t bytes = o->matrix_bytes ? o->matrix_bytes : 256 * CB_MIB;
    if (bytes > g->ch.data_bytes) bytes = g->ch.data_bytes;
    int grids[CB_MAX_GRIDS], ng;
    default_grids(o, grids, &ng);
    const int grid = grids[ng - 1], threads = o->threads ? o->threads : 512;
    const int iters = cb_opt_int(o->iters, 20), warm = cb_opt_int(o->warmup, 3),
              reps = cb_opt_int(o->reps, 3);
    const uint64_t chunk = port_chunk(o, bytes);
    static const int kinds[4] = {BW_MC_PUT, BW_SM_WRITE, BW_PORT_PUT, BW_CE};
    double *m = (double *)calloc((size_t)(4 * n * n), sizeof(double));
    int64_t *err = (int64_t *)calloc((size_t)(4 * n * n), sizeof(int64_t));
    if (!m || !err) cb_die(ctx, "out of memory");
    for (int a = 0; a < n; a++) {
        for (int b = 0; b < n; b++) {
            if (a == b) continue;
            for (int k = 0; k < 4; k++) {
                cb_stats_t st;
                int kg = k < 2 ? grid : 1, kt = k < 2 ? threads : 1;
                bw_measure(g, kinds[k], a, b, bytes, kg, kt, chunk, iters, warm, reps, &st,
                           &err[k * n * n + a * n + b]);
                m[k * n * n + a * n + b] = cb_from_rank(ctx, a, st.median);
            }
            for (int k = 0; k < 4; k += 2) {
                cb_row_t row;
                cb_row_init(&row, "matrix", k ? "port-put" : "memory-put",
                            k ? ce_name(g) : "sm-copy", "GB/s", bytes, k ? 1 : grid,
                            k ? 1 : threads);
                row.src = a;
                row.dst = b;
                row.value.median = row.value.min = row.value.max = row.value.mean =
                    m[k * n * n + a * n + b];
                row.base.median = row.base.min = row.base.max = row.base.mean =
                    m[(k + 1) * n * n + a * n + b];
                row.value.n = row.base.n = reps;
                int64_t e1 = err[k * n * n + a * n + b], e2 = err[(k + 1) * n * n + a * n + b];
                row.errors = e1 < 0 ? e2 : (e2 < 0 ? e1 : e1 + e2);
                cb_row_record(ctx, &row);
                if (row.errors > 0)
                    cb_printf(ctx, "# matrix %d -> %d %s: check FAILED (%lld)\n", a, b, row.op,
                              (long long)row.errors);
            }
        }
    }
    char title[256];
    snprintf(title, sizeof title,
             "matrix: put bandwidth, %llu bytes, GB/s (row: source rank, column: destination)",
             (unsigned long long)bytes);
    cb_printf(ctx, "#\n# %s; median of %d reps x %d\n", title, reps, iters);
    snprintf(title, sizeof title, "memory channel put, %d x %d", grid, threads);
    print_matrix(ctx, title, m, n);
    snprintf(title, sizeof title, "plain SM copy kernel (baseline of the memory channel), %d x %d",
             grid, threads);
    print_matrix(ctx, title, m + n * n, n);
    snprintf(title, sizeof title,
             "port channel put (one GPU thread, %llu-byte puts, flush at the end)",
             (unsigned long long)chunk);
    print_matrix(ctx, title, m + 2 * n * n, n);
    snprintf(title, sizeof title, "copy engine, %s (baseline of the port channel)", ce_name(g));
    print_matrix(ctx, title, m + 3 * n * n, n);
    free(m);
    free(err);
}

/* ================================================================ entry */
