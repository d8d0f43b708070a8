/* cchan-bench on GPUs: memory and port channels between ranks 0 and 1 (and every ordered pair for
 * the matrix), each against a baseline measured in the same run, on the same GPUs, with the same
 * sizes and grid. One process per GPU; every rank runs the same sequence of collectives.
 *
 * Timing:
 *   bandwidth  CUDA events around a CUDA graph of n back-to-back launches (memory channel, SM
 * copy), around one kernel that loops n times (port channel), or around n stream copies (copy
 *              engine); repeated r times; rows give the median (and min/max) over the repetitions.
 *   latency    ping-pong inside one kernel on each GPU: w warmup round trips, then n timed ones;
 * the initiator's thread 0 stamps %globaltimer at the start of every round trip into shared memory
 * (no global store on the timed path). One-way = round trip / 2; rows give the median, p99, min and
 * max over round trips (over batches of 100 when the timer ticks coarser than 100 ns; the header
 * says which). Checking: after the warmup and before the timing, the receiving rank compares what
 * it received with what the sender's buffer holds (random data, destination poisoned before), see
 * bench_pattern.h.
 */
#include "bench_gpu.h"
#include "bench_switch.h"

void gpu_die(gpu_t *g, cudaError_t e, const char *what, const char *file, int line) {
    char diag[512] = "";
    if (g->comm && cchan_comm_check_device(g->comm) < 0)
        snprintf(diag, sizeof diag, "; device diagnostic: %s", cchan_last_error());
    cb_die(g->ctx, "%s:%d: %s: %s%s", file, line, what, cudaGetErrorString(e), diag);
}

/* ================================================================ device code */

__global__ void k_fill(uint32_t *p, uint64_t nwords, uint32_t seed) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < nwords;
         i += (uint64_t)gridDim.x * blockDim.x)
        p[i] = cb_pattern_word(seed, i);
}

/* Counts bytes of p[0, bytes) that differ from the pattern at src_off (a multiple of 4). */
__global__ void k_verify(const uint8_t *p, uint64_t bytes, uint32_t seed, uint64_t src_off,
                         unsigned long long *err) {
    const uint32_t *w = (const uint32_t *)p;
    const uint64_t nw = bytes / 4, n = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t tid = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
    unsigned long long bad = 0, first = ULLONG_MAX;
    for (uint64_t i = tid; i < nw; i += n) {
        if (w[i] != cb_pattern_word(seed, src_off / 4 + i)) {
            bad++;
            if (first == ULLONG_MAX) first = i * 4;
        }
    }
    for (uint64_t i = nw * 4 + tid; i < bytes; i += n) {
        if (p[i] != cb_pattern_byte(seed, src_off + i)) {
            bad++;
            if (first == ULLONG_MAX) first = i;
        }
    }
    if (bad) {
        atomicAdd(&err[0], bad);
        atomicMin(&err[1], first);
    }
}

__global__ void k_timer_res(uint64_t *out) {
    uint64_t prev = cb_gtimer(), first = prev, minpos = ULLONG_MAX;
    for (int k = 0; k < 200000; k++) {
        uint64_t t = cb_gtimer();
        if (t != prev) {
            if (t - prev < minpos) minpos = t - prev;
            prev = t;
        }
    }
    out[0] = minpos;
    out[1] = prev - first;
}

/* ================================================================ helpers */

uint32_t seed_of(const gpu_t *g, int rank) {
    return g->ctx->seed + 0x9e3779b9u * (uint32_t)(rank + 1) + 0x632be5abu * (uint32_t)g->phase;
}

int in_pair(const gpu_t *g) { return g->rank < 2; }

void gsync(gpu_t *g, const char *what) {
    double t0 = cb_now();
    cudaError_t e;
    while ((e = cudaStreamQuery(g->s)) == cudaErrorNotReady) {
        if (cb_now() - t0 > 120.0)
            cb_die(g->ctx, "%s did not finish within 120 s (is the peer rank alive?)", what);
        sched_yield();
    }
    if (e != cudaSuccess) gpu_die(g, e, what, __FILE__, __LINE__);
}

static unsigned grid_for(uint64_t n) {
    uint64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

void fill(gpu_t *g, uint8_t *p, uint64_t bytes, uint32_t seed) {
    uint64_t nw = (bytes + 3) / 4;
    k_fill<<<grid_for(nw), 256, 0, g->s>>>((uint32_t *)p, nw, seed);
    CK_LAUNCH();
}

int64_t verify(gpu_t *g, const uint8_t *p, uint64_t bytes, uint32_t seed, uint64_t src_off,
               const char *what) {
    unsigned long long h[2] = {0, ULLONG_MAX};
    CK(cudaMemcpyAsync(g->d_err, h, sizeof h, cudaMemcpyHostToDevice, g->s));
    k_verify<<<grid_for(bytes / 4 + 1), 256, 0, g->s>>>(p, bytes, seed, src_off, g->d_err);
    CK_LAUNCH();
    CK(cudaMemcpyAsync(h, g->d_err, sizeof h, cudaMemcpyDeviceToHost, g->s));
    gsync(g, "verify");
    if (h[0])
        fprintf(stderr,
                "cchan-bench: rank %d: %s, %llu bytes: %llu mismatches, first at byte %llu\n",
                g->rank, what, (unsigned long long)bytes, h[0], h[1]);
    return (int64_t)h[0];
}

void ts_ensure(gpu_t *g, size_t words) {
    if (words <= g->ts_words) return;
    if (g->d_ts) CK(cudaFree(g->d_ts));
    CK(cudaMalloc(&g->d_ts, words * sizeof(uint64_t)));
    g->ts_words = words;
}

/* Ping-pong statistics from the initiator's stamps: one-way = round trip / 2 */

void pingpong_stats(gpu_t *g, int blocks, int rec, int iters, double scale, cb_stats_t *st) {
    size_t w = (size_t)blocks * (size_t)(rec + 2);
    uint64_t *ts = (uint64_t *)malloc(w * sizeof(uint64_t));
    uint64_t *T = (uint64_t *)malloc((size_t)(rec + 2) * sizeof(uint64_t));
    double *v = (double *)malloc((size_t)(rec + 1) * sizeof(double));
    if (!ts || !T || !v) cb_die(g->ctx, "out of memory");
    CK(cudaMemcpy(ts, g->d_ts, w * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    /* A round trip is over when the slowest block has finished it. */
    for (int i = 0; i < rec + 2; i++) {
        T[i] = 0;
        for (int b = 0; b < blocks; b++)
            if (ts[(size_t)b * (rec + 2) + i] > T[i]) T[i] = ts[(size_t)b * (rec + 2) + i];
    }
    int n = 0;
    if (g->per_iter) {
        for (int i = 0; i < rec; i++) v[n++] = (double)(T[i + 1] - T[i]) * scale;
    } else {
        const int B = 100;
        for (int k = 0; (k + 1) * B <= rec; k++)
            v[n++] = (double)(T[(k + 1) * B] - T[k * B]) * scale / B;
        if (n == 0 && rec > 0) v[n++] = (double)(T[rec] - T[0]) * scale / rec;
    }
    cb_stats(v, n, st);
    st->mean = iters > 0 ? (double)(T[rec + 1] - T[0]) * scale / iters : 0;
    free(ts);
    free(T);
    free(v);
}

void fill_pingpong(gpu_t *g, uint64_t bytes) {
    g->row_seq++;
    if (in_pair(g)) {
        fill(g, g->d_data + CB_SRC_OFF, bytes, seed_of(g, g->rank));
        fill(g, g->d_data + CB_DST_OFF, bytes, CB_POISON_SEED ^ (uint32_t)g->row_seq);
        gsync(g, "fill");
    }
}

int64_t check_pingpong(gpu_t *g, uint64_t bytes, const char *what, bool receiver_only) {
    int64_t mine = -1;
    if (in_pair(g) && (!receiver_only || g->rank == 1))
        mine = verify(g, g->d_data + CB_DST_OFF, bytes, seed_of(g, g->peer), CB_SRC_OFF, what);
    return cb_errors_combine(g->ctx, mine);
}

void default_grids(const cb_opts_t *o, int *grids, int *n) {
    static const int def[] = {16, 32, 66, 132};
    if (o->ngrids) {
        memcpy(grids, o->grids, sizeof(int) * (size_t)o->ngrids);
        *n = o->ngrids;
    } else {
        memcpy(grids, def, sizeof def);
        *n = 4;
    }
}

const char *ce_name(const gpu_t *g) {
    return g->ce_peer_api ? "cudaMemcpyPeerAsync" : "cudaMemcpyAsync";
}

/* ================================================================ setup and teardown */

void port_setup(gpu_t *g) {
    if (g->ch.port_ready) return;
    cb_chans_port(g->ctx, &g->ch, 3);
    CK(cudaSetDevice(g->dev)); /* the runtime may have switched devices on this thread */
}

/* Which GPU each rank drives, as this process numbers them, and what they are (printed). */
static void gpu_setup_devices(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    char bus[32] = "";
    CK(cudaDeviceGetPCIBusId(bus, sizeof bus, g->dev));
    g->bus = (char(*)[32])calloc((size_t)g->nranks, 32);
    g->dev_of = (int *)calloc((size_t)g->nranks, sizeof(int));
    if (!g->bus || !g->dev_of) cb_die(ctx, "out of memory");
    cb_allgather(ctx, bus, g->bus, 32);
    for (int r = 0; r < g->nranks; r++)
        if (cudaDeviceGetByPCIBusId(&g->dev_of[r], g->bus[r]) != cudaSuccess) {
            g->dev_of[r] = -1;
            cudaGetLastError();
        }
    g->shared_gpu = strcmp(g->bus[0], g->bus[1]) == 0;
    g->time_sliced = g->shared_gpu && !cb_mps_client();

    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, g->dev));
    char name[96];
    size_t name_len = strnlen(prop.name, sizeof name - 1);
    memcpy(name, prop.name, name_len);
    name[name_len] = '\0';
    char(*names)[96] = (char(*)[96])calloc((size_t)g->nranks, 96);
    if (!names) cb_die(ctx, "out of memory");
    cb_allgather(ctx, name, names, 96);
    for (int r = 0; r < g->nranks; r++)
        cb_printf(ctx, "# rank %d: GPU %d of its process, %s, PCI %s\n", r,
                  g->dev_of[r] >= 0 ? g->dev_of[r] : -1, names[r], g->bus[r]);
    if (g->shared_gpu)
        snprintf(ctx->device, sizeof ctx->device, "%s (ranks 0 and 1 share one GPU, %s)", names[0],
                 g->time_sliced ? "time-sliced" : "under MPS");
    else
        snprintf(ctx->device, sizeof ctx->device, "%s x%d", names[0], g->nranks);
    free(names);
}

/* Timer resolution decides between per-iteration and per-batch latency statistics. */
static void gpu_setup_timer(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    ts_ensure(g, 1024);
    k_timer_res<<<1, 1, 0, g->s>>>(g->d_ts);
    CK_LAUNCH();
    uint64_t res[2];
    CK(cudaMemcpyAsync(res, g->d_ts, sizeof res, cudaMemcpyDeviceToHost, g->s));
    gsync(g, "timer probe");
    g->timer_res_ns = cb_from_rank(ctx, 0, (double)res[0]);
    g->per_iter = g->timer_res_ns <= 100.0;
    snprintf(ctx->timer, sizeof ctx->timer,
             "%%globaltimer stamps in one kernel, resolution %.0f ns: statistics over %s",
             g->timer_res_ns, g->per_iter ? "single round trips" : "batches of 100 round trips");
}

/* The copy-engine baseline: cudaMemcpyPeerAsync where the driver accepts imported memory for it
 * (every rank tries a small copy to its next rank), else cudaMemcpyAsync, the same engine. */
static void gpu_setup_ce(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    int peer_api = 1;
    if (!(getenv("CCHAN_BENCH_CE") && !strcmp(getenv("CCHAN_BENCH_CE"), "memcpy"))) {
        int next = (g->rank + 1) % g->nranks;
        int dst_dev = g->dev_of[next] >= 0 ? g->dev_of[next] : g->dev;
        cudaError_t e = cudaMemcpyPeerAsync(g->ch.mch[next].remote + CB_DST_OFF, dst_dev, g->d_data,
                                            g->dev, 256, g->s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(g->s);
        if (e != cudaSuccess) {
            cudaGetLastError();
            peer_api = 0;
            snprintf(g->ce_why, sizeof g->ce_why, "%s", cudaGetErrorString(e));
        }
    } else {
        peer_api = 0;
        snprintf(g->ce_why, sizeof g->ce_why, "CCHAN_BENCH_CE=memcpy");
    }
    g->ce_peer_api = (int)cb_from_rank(ctx, 0, peer_api);
    for (int r = 1; r < g->nranks; r++) g->ce_peer_api &= (int)cb_from_rank(ctx, r, peer_api);
    if (!g->ce_peer_api)
        cb_printf(
            ctx,
            "# note: cudaMemcpyPeerAsync does not take cchan-imported peer memory here (%s): the "
            "copy-engine baseline is cudaMemcpyAsync(cudaMemcpyDefault), the same engine\n",
            g->ce_why[0] ? g->ce_why : "on another rank");
}

static void gpu_setup(gpu_t *g, cb_ctx_t *ctx) {
    memset(g, 0, sizeof *g);
    g->ctx = ctx;
    g->comm = ctx->comm;
    g->rank = ctx->rank;
    g->nranks = ctx->nranks;
    g->peer = g->rank < 2 ? 1 - g->rank : -1;
    g->dev = cchan_comm_device(g->comm);
    g->ll_flag = 1; /* buffers start zeroed: flags start at 1 */
    CK(cudaSetDevice(g->dev));
    CK(cudaStreamCreateWithFlags(&g->s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g->e0));
    CK(cudaEventCreate(&g->e1));
    gpu_setup_devices(g);
    int optin = 0;
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, g->dev));
    optin -= (int)CB_CAL_BYTES; /* the stamping kernels' static shared memory (cb_cal) */
    g->rec_cap = optin / (int)sizeof(uint64_t) - 2;
    mem_lat_attrs(g, optin);
    port_lat_attrs(g, optin);

    /* Buffers: large enough for every sweep this run makes. */
    cb_chans_setup(ctx, &g->ch, cb_data_bytes(&ctx->opt, 64 * CB_MIB, 1ull << 30, 256 * CB_MIB),
                   CB_PKT_OFF + 2 * CB_LL_SLOT + 2 * CB_MIB);
    g->d_data = (uint8_t *)cchan_mem_ptr(g->ch.data);
    g->d_pkt = (uint8_t *)cchan_mem_ptr(g->ch.pkt);
    CK(cudaSetDevice(g->dev));

    CK(cudaMalloc(&g->d_err, 2 * sizeof(unsigned long long)));
    CK(cudaHostAlloc(&g->h_pinned, (64 + 2 * CB_RING_SLOTS) * sizeof(uint64_t),
                     cudaHostAllocMapped | cudaHostAllocPortable));
    memset(g->h_pinned, 0, (64 + 2 * CB_RING_SLOTS) * sizeof(uint64_t));
    CK(cudaHostGetDevicePointer((void **)&g->d_pinned, g->h_pinned, 0));
    gpu_setup_timer(g);
    gpu_setup_ce(g);
    cb_barrier(ctx);
}

static void gpu_teardown(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    cb_barrier(ctx);
    cb_chans_teardown(ctx, &g->ch);
    CK(cudaFree(g->d_err));
    if (g->d_ts) CK(cudaFree(g->d_ts));
    CK(cudaFreeHost(g->h_pinned));
    CK(cudaEventDestroy(g->e0));
    CK(cudaEventDestroy(g->e1));
    CK(cudaStreamDestroy(g->s));
    free(g->dev_of);
    free(g->bus);
}

/* ================================================================ entry */

extern "C" int cb_run_gpu(cb_ctx_t *ctx) {
    gpu_t g;
    gpu_setup(&g, ctx);
    cb_printf(ctx, "# backend: cuda; %s; data buffers %llu MiB per rank\n", ctx->device,
              (unsigned long long)(g.ch.data_bytes >> 20));
    if (ctx->opt.tests & CB_MEM_BW) run_mem_bw(&g);
    if (ctx->opt.tests & CB_MEM_LAT) run_mem_lat(&g);
    if (ctx->opt.tests & CB_PORT_BW) run_port_bw(&g);
    if (ctx->opt.tests & CB_PORT_LAT) run_port_lat(&g);
    if (ctx->opt.tests & CB_MATRIX) run_matrix(&g);
    gpu_teardown(&g);
    if (ctx->opt.tests & CB_SWITCH_BW) cb_switch_gpu(ctx); /* own buffers: after the teardown */
    return 0;
}
