/* cchan-moe-bench: MoE dispatch and combine (kernels/moe) on every GPU of the host, one
 * process per GPU, against an NCCL all-to-all dispatcher measured in the same run.
 *
 *   cchan-run -n <GPUs> build/bench/moe/cchan-moe-bench [--mode ll|ht|all] [--tokens 128]
 *       [--ht-tokens 4096] [--hidden 7168] [--topk 8] [--experts 256] [--blocks 0] [--reps 9]
 *       [--no-nccl] [--variants 'V1;V2;...'] [--json FILE]
 *
 * --blocks sets the LL group's num_blocks (0, the default: the library's choice).
 *
 * --variants measures the library once per CCHAN_MOE_VARIANT value (kernels/moe/
 * moe_internal.h lists the keys; "default" is the library's defaults), each with a group of its
 * own, and prints each variant's rows as soon as they are measured; NCCL runs once.
 *
 * Low-latency mode, DeepSeek-V3 shape by default: FP8 dispatch, BF16 dispatch, BF16 combine and
 * the FP8-dispatch + combine pair. Each figure is the time per operation from CUDA graphs of 10
 * and 60 back-to-back operations ((T60 - T10) / 50, the median of --reps replays each), so launch
 * overhead and the ranks' start skew cancel. Bytes are counted as DeepEP's tests count them: per
 * valid token-expert selection of this rank, hidden + hidden/128*4 + 16 bytes for an fp8 dispatch,
 * 2 * hidden for bf16 dispatch and combine.
 *
 * Baseline (NCCL loaded at run time, NVLS off): the all-to-all dispatcher frameworks use without a
 * fused library. Dispatch: count and permute tokens by expert (one row per selection), exchange the
 * per-expert counts (ncclSend/ncclRecv) and copy them to the host, grouped ncclSend/ncclRecv of the
 * rows, unpermute into the same expert-major layout. Combine: the reverse exchange and the weighted
 * sum. Timed per operation with events, the median of --reps after a barrier each.
 */
#include <cuda_runtime.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cchan_moe.h"
#include "nccl_dyn.h"

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "[r%d] %s:%d: %s: %s\n", g_rank, __FILE__, __LINE__, #call,            \
                    cudaGetErrorString(e_));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define MK(call)                                                                                   \
    do {                                                                                           \
        int s_ = (call);                                                                           \
        if (s_ != 0) {                                                                             \
            fprintf(stderr, "[r%d] %s:%d: %s = %d (%s): %s %s\n", g_rank, __FILE__, __LINE__,      \
                    #call, s_, cchan_strerror(s_), cchan_moe_last_error(), cchan_last_error());    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int g_rank = -1, g_n = 0;
static int g_ll_blocks; /* --blocks: the LL group's num_blocks (0: the library's choice) */
static cchan_comm_t *g_comm;
static cudaStream_t g_stream;

static void barrier(void) { MK(cchan_bootstrap_barrier(cchan_comm_bootstrap(g_comm))); }

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

__global__ void k_fill_bf16(uint16_t *p, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
        float f = ((float)(z >> 40) / 16777216.0f - 0.5f) * 4.0f;
        p[i] = (uint16_t)(__float_as_uint(f) >> 16);
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* ------------------------------------------------------------------ graph timing */

typedef void (*op_fn)(void *arg);

/* ms per replay of a graph of `nops` operations, median of reps. */
static double time_graph(op_fn fn, void *arg, int nops, int reps) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < nops; i++) fn(arg);
    CK(cudaStreamEndCapture(g_stream, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double t[64];
    for (int r = -2; r < reps; r++) {
        barrier();
        CK(cudaEventRecord(e0, g_stream));
        CK(cudaGraphLaunch(exec, g_stream));
        CK(cudaEventRecord(e1, g_stream));
        CK(cudaStreamSynchronize(g_stream));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 0) t[r] = ms;
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    return median(t, reps);
}

/* µs per operation: slope between graphs of 10 and 60 operations. */
static double time_op_us(op_fn fn, void *arg, int reps) {
    double t10 = time_graph(fn, arg, 10, reps), t60 = time_graph(fn, arg, 60, reps);
    return (t60 - t10) * 1000.0 / 50.0;
}

/* ------------------------------------------------------------------ cchan */

typedef struct ll_ctx {
    cchan_moe_handle_t *h;
    cchan_moe_dispatch_args_t a;
    const void *y;
    const float *w;
    void *comb;
} ll_ctx_t;

static void op_dispatch(void *p) {
    ll_ctx_t *c = (ll_ctx_t *)p;
    MK(cchan_moe_dispatch(c->h, &c->a, 0, g_stream));
}
static void op_combine(void *p) {
    ll_ctx_t *c = (ll_ctx_t *)p;
    MK(cchan_moe_combine(c->h, c->y, c->w, c->comb, 0, g_stream));
}
static void op_pair(void *p) {
    op_dispatch(p);
    op_combine(p);
}

/* ------------------------------------------------------------------ NCCL all-to-all dispatcher */

typedef struct a2a_api {
    int (*Send)(const void *, size_t, int, int, cb_nccl_comm_t, cudaStream_t);
    int (*Recv)(void *, size_t, int, int, cb_nccl_comm_t, cudaStream_t);
    int (*GroupStart)(void);
    int (*GroupEnd)(void);
} a2a_api_t;

enum { NCCL_INT32 = 2, NCCL_BF16 = 9 };

typedef struct a2a {
    int ht; /* 2D output: the received rows as they arrive, no expert-major unpermute */
    cb_nccl_t nccl;
    a2a_api_t api;
    cb_nccl_comm_t comm;
    int T, K, E, L, H, B;
    const int32_t *topk;
    const float *w;
    const uint16_t *x;
    int32_t *hist;     /* [E] selections per expert, mine */
    int32_t *pos;      /* [T*K] row of each selection in sendbuf */
    int32_t *rhist;    /* [N][L] rows of each local expert from each source */
    uint16_t *sendbuf; /* [T*K][H] */
    uint16_t *recvbuf; /* [N*B*K][H] */
    uint16_t *out;     /* [L][NB][H] */
    uint16_t *y;       /* expert outputs [L][NB][H] */
    uint16_t *comb;    /* [T][H] */
    int32_t *table;    /* [N*L][3]: recv offset, count, output row */
    int32_t h_hist[4096], h_rhist[8 * 4096], h_table[8 * 4096 * 3];
    int send_rows[8], send_off[8], recv_rows[8], recv_off[8];
} a2a_t;

__global__ void k_a2a_count(const int32_t *topk, int TK, int E, int32_t *hist, int32_t *pos) {
    extern __shared__ int32_t sh[];
    for (int e = threadIdx.x; e < E; e += blockDim.x) sh[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < TK; i += blockDim.x) {
        int e = topk[i];
        pos[i] = e >= 0 && e < E ? atomicAdd(&sh[e], 1) : -1;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        for (int e = 0; e < E; e++) {
            hist[e] = sh[e];
            int c = sh[e];
            sh[e] = run;
            run += c;
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < TK; i += blockDim.x) {
        int e = topk[i];
        if (e >= 0 && e < E) pos[i] += sh[e];
    }
}

/* sendbuf[pos[t*K+k]] = x[t] */
__global__ void k_a2a_permute(const uint16_t *x, const int32_t *pos, int TK, int K, int H,
                              uint16_t *sendbuf) {
    const int nv = H / 8;
    for (long j = blockIdx.x * (long)blockDim.x + threadIdx.x; j < (long)TK * nv;
         j += (long)gridDim.x * blockDim.x) {
        int i = (int)(j / nv), v = (int)(j % nv);
        int p = pos[i];
        if (p < 0) continue;
        ((uint4 *)(sendbuf + (size_t)p * H))[v] = ((const uint4 *)(x + (size_t)(i / K) * H))[v];
    }
}

/* table entry (s, e): recv rows [roff, roff + cnt) <-> output rows of expert e from row0.
 * to_out = 1: recvbuf -> out; 0: y -> sendbuf (the combine's reverse). */
__global__ void k_a2a_scatter(const int32_t *table, int ntab, int H, int NB, int to_out,
                              const uint16_t *src, uint16_t *dst) {
    const int nv = H / 8;
    for (int te = blockIdx.y; te < ntab; te += gridDim.y) {
        int roff = table[te * 3], cnt = table[te * 3 + 1], row0 = table[te * 3 + 2];
        for (long j = blockIdx.x * (long)blockDim.x + threadIdx.x; j < (long)cnt * nv;
             j += (long)gridDim.x * blockDim.x) {
            int i = (int)(j / nv), v = (int)(j % nv);
            size_t r = (size_t)roff + i, o = (size_t)row0 + i;
            if (to_out)
                ((uint4 *)(dst + o * H))[v] = ((const uint4 *)(src + r * H))[v];
            else
                ((uint4 *)(dst + r * H))[v] = ((const uint4 *)(src + o * H))[v];
        }
    }
}

/* comb[t] = sum_k w[t][k] * recvbuf[pos[t*K+k]] */
__global__ void k_a2a_reduce(const uint16_t *rows, const int32_t *pos, const float *w, int T, int K,
                             int H, uint16_t *comb) {
    for (int t = blockIdx.x; t < T; t += gridDim.x)
        for (int h = threadIdx.x; h < H; h += blockDim.x) {
            float acc = 0;
            for (int k = 0; k < K; k++) {
                int p = pos[t * K + k];
                if (p < 0) continue;
                acc += w[t * K + k] * __uint_as_float((uint32_t)rows[(size_t)p * H + h] << 16);
            }
            comb[(size_t)t * H + h] = (uint16_t)(__float_as_uint(acc) >> 16);
        }
}

static void a2a_exchange(a2a_t *a, const void *send, const int *srows, const int *soff, void *recv,
                         const int *rrows, const int *roff, size_t unit, int dtype) {
    a->api.GroupStart();
    for (int r = 0; r < g_n; r++) {
        if (srows[r])
            a->api.Send((const uint8_t *)send + (size_t)soff[r] * unit * 2, (size_t)srows[r] * unit,
                        dtype, r, a->comm, g_stream);
        if (rrows[r])
            a->api.Recv((uint8_t *)recv + (size_t)roff[r] * unit * 2, (size_t)rrows[r] * unit,
                        dtype, r, a->comm, g_stream);
    }
    a->api.GroupEnd();
}

static void a2a_dispatch(a2a_t *a) {
    const int TK = a->T * a->K, N = g_n, L = a->L, NB = N * a->B;
    k_a2a_count<<<1, 1024, a->E * 4, g_stream>>>(a->topk, TK, a->E, a->hist, a->pos);
    k_a2a_permute<<<132, 512, 0, g_stream>>>(a->x, a->pos, TK, a->K, a->H, a->sendbuf);
    /* per-expert counts: my hist[r*L ..] to rank r; rank r's counts of my experts into rhist[r] */
    a->api.GroupStart();
    for (int r = 0; r < N; r++) {
        a->api.Send(a->hist + r * L, (size_t)L, NCCL_INT32, r, a->comm, g_stream);
        a->api.Recv(a->rhist + r * L, (size_t)L, NCCL_INT32, r, a->comm, g_stream);
    }
    a->api.GroupEnd();
    CK(cudaMemcpyAsync(a->h_hist, a->hist, (size_t)a->E * 4, cudaMemcpyDeviceToHost, g_stream));
    CK(cudaMemcpyAsync(a->h_rhist, a->rhist, (size_t)N * L * 4, cudaMemcpyDeviceToHost, g_stream));
    CK(cudaStreamSynchronize(g_stream));
    int so = 0, ro = 0;
    for (int r = 0; r < N; r++) {
        int s = 0, c = 0;
        for (int e = 0; e < L; e++) {
            s += a->h_hist[r * L + e];
            c += a->h_rhist[r * L + e];
        }
        a->send_rows[r] = s;
        a->send_off[r] = so;
        a->recv_rows[r] = c;
        a->recv_off[r] = ro;
        so += s;
        ro += c;
    }
    /* rows from source s arrive ordered by expert; expert e's rows go to out[e][sum over s' < s] */
    for (int e = 0; e < L; e++) {
        int row = e * NB;
        for (int s = 0; s < N; s++) {
            int off = a->recv_off[s];
            for (int e2 = 0; e2 < e; e2++) off += a->h_rhist[s * L + e2];
            int32_t *te = &a->h_table[(s * L + e) * 3];
            te[0] = off;
            te[1] = a->h_rhist[s * L + e];
            te[2] = row;
            row += te[1];
        }
    }
    CK(cudaMemcpyAsync(a->table, a->h_table, (size_t)N * L * 12, cudaMemcpyHostToDevice, g_stream));
    a2a_exchange(a, a->sendbuf, a->send_rows, a->send_off, a->recvbuf, a->recv_rows, a->recv_off,
                 (size_t)a->H, NCCL_BF16);
    if (a->ht) return;
    dim3 grid(4, N * L);
    k_a2a_scatter<<<grid, 256, 0, g_stream>>>(a->table, N * L, a->H, NB, 1, a->recvbuf, a->out);
}

static void a2a_combine(a2a_t *a) {
    const int N = g_n, L = a->L, NB = N * a->B;
    dim3 grid(4, N * L);
    if (!a->ht)
        k_a2a_scatter<<<grid, 256, 0, g_stream>>>(a->table, N * L, a->H, NB, 0, a->y, a->recvbuf);
    a2a_exchange(a, a->recvbuf, a->recv_rows, a->recv_off, a->sendbuf, a->send_rows, a->send_off,
                 (size_t)a->H, NCCL_BF16);
    k_a2a_reduce<<<132, 512, 0, g_stream>>>(a->sendbuf, a->pos, a->w, a->T, a->K, a->H, a->comb);
}

static double time_host_op_us(void (*fn)(a2a_t *), a2a_t *a, int reps) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double t[64];
    for (int r = -2; r < reps; r++) {
        barrier();
        CK(cudaEventRecord(e0, g_stream));
        fn(a);
        CK(cudaEventRecord(e1, g_stream));
        CK(cudaStreamSynchronize(g_stream));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 0) t[r] = ms * 1000.0;
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return median(t, reps);
}

/* ------------------------------------------------------------------ one mode */

typedef struct result {
    int ht, T, H, K, E;
    const char *variant;
    cchan_moe_info_t info;
    long sel;                     /* valid selections of this rank */
    int rows;                     /* rows this rank received (HT) / token-expert rows (LL) */
    double fp8, bf16, comb, pair; /* µs per operation, cchan (fp8/pair: LL only) */
    double n_disp, n_comb;        /* NCCL all-to-all dispatcher, µs; < 0: not run */
} result_t;

/* Routing: uniform top-k, distinct experts (DeepEP's test draws random scores), weights 1/K.
 * Returns the number of selections. */
static long make_routing(int T, int K, int E, int32_t *h_topk, float *h_w) {
    long sel = 0;
    for (int t = 0; t < T; t++) {
        uint64_t s = mix(0x5eedull + (uint64_t)g_rank * 1000003u + (uint64_t)t);
        for (int k = 0; k < K; k++) {
            int e, dup;
            do {
                s = mix(s);
                e = (int)(s % (uint64_t)E);
                dup = 0;
                for (int j = 0; j < k; j++) dup |= h_topk[t * K + j] == e;
            } while (dup);
            h_topk[t * K + k] = e;
            h_w[t * K + k] = 1.0f / K;
            sel++;
        }
    }
    return sel;
}

/* The NCCL all-to-all dispatcher on the same data, into the same output buffers. */
static void run_a2a(result_t *res, cb_nccl_t *nccl, cb_nccl_comm_t ncomm, const a2a_api_t *api,
                    int32_t *d_topk, float *w, uint16_t *x, uint16_t *y, uint16_t *comb,
                    uint8_t *out_x, int reps) {
    const int L = res->info.local_experts, T = res->T, K = res->K, H = res->H;
    a2a_t *a = (a2a_t *)calloc(1, sizeof *a);
    a->ht = res->ht;
    a->api = *api;
    a->nccl = *nccl;
    a->comm = ncomm;
    a->T = T;
    a->K = K;
    a->E = res->E;
    a->L = L;
    a->H = H;
    a->B = T;
    a->topk = d_topk;
    a->w = w;
    a->x = x;
    a->y = y;
    a->comb = comb;
    a->out = (uint16_t *)out_x;
    CK(cudaMalloc((void **)&a->hist, (size_t)res->E * 4));
    CK(cudaMalloc((void **)&a->pos, (size_t)T * K * 4));
    CK(cudaMalloc((void **)&a->rhist, (size_t)g_n * L * 4));
    CK(cudaMalloc((void **)&a->sendbuf, (size_t)T * K * H * 2));
    CK(cudaMalloc((void **)&a->recvbuf, (size_t)g_n * T * K * H * 2));
    CK(cudaMalloc((void **)&a->table, (size_t)g_n * L * 12));
    a2a_dispatch(a);
    CK(cudaStreamSynchronize(g_stream));
    res->n_disp = time_host_op_us(a2a_dispatch, a, reps);
    res->n_comb = time_host_op_us(a2a_combine, a, reps);
    cudaFree(a->hist);
    cudaFree(a->pos);
    cudaFree(a->rhist);
    cudaFree(a->sendbuf);
    cudaFree(a->recvbuf);
    cudaFree(a->table);
    free(a);
}

static void run_mode(int ht, int T, int H, int K, int E, int reps, cb_nccl_t *nccl,
                     cb_nccl_comm_t ncomm, const a2a_api_t *api, const char *variant,
                     result_t *res) {
    memset(res, 0, sizeof *res);
    res->ht = ht;
    res->T = T;
    res->H = H;
    res->K = K;
    res->E = E;
    res->fp8 = res->pair = res->n_disp = res->n_comb = -1;
    res->variant = variant;
    cchan_moe_config_t cfg = CCHAN_MOE_CONFIG_INIT;
    cfg.mode = ht ? CCHAN_MOE_HIGH_THROUGHPUT : CCHAN_MOE_LOW_LATENCY;
    cfg.num_experts = E;
    cfg.hidden = H;
    cfg.top_k = K;
    cfg.max_tokens_per_rank = T;
    cfg.num_blocks = ht ? 0 : g_ll_blocks;
    cchan_moe_group_t *g = NULL;
    if (variant && *variant)
        setenv("CCHAN_MOE_VARIANT", variant, 1);
    else
        unsetenv("CCHAN_MOE_VARIANT");
    MK(cchan_moe_group_create(g_comm, &cfg, &g));
    MK(cchan_moe_group_info(g, &res->info));
    const int L = res->info.local_experts, NB = res->info.max_rows_per_expert;
    int32_t *h_topk = (int32_t *)malloc((size_t)T * K * 4);
    float *h_w = (float *)malloc((size_t)T * K * 4);
    res->sel = make_routing(T, K, E, h_topk, h_w);
    const size_t out_rows = ht ? (size_t)g_n * T : (size_t)L * NB;
    uint16_t *x, *y, *comb;
    uint8_t *out_x;
    float *scales = NULL, *w;
    int32_t *counts, *d_topk;
    CK(cudaMalloc((void **)&x, (size_t)T * H * 2));
    CK(cudaMalloc((void **)&out_x, out_rows * H * 2));
    CK(cudaMalloc((void **)&y, out_rows * H * 2));
    if (!ht) CK(cudaMalloc((void **)&scales, out_rows * (H / 128) * 4));
    CK(cudaMalloc((void **)&counts, (size_t)L * 4));
    CK(cudaMalloc((void **)&comb, (size_t)T * H * 2));
    CK(cudaMalloc((void **)&w, (size_t)T * K * 4));
    CK(cudaMalloc((void **)&d_topk, (size_t)T * K * 4));
    k_fill_bf16<<<264, 512, 0, g_stream>>>(x, (size_t)T * H, 1 + (uint64_t)g_rank);
    k_fill_bf16<<<264, 512, 0, g_stream>>>(y, out_rows * H, 99 + (uint64_t)g_rank);
    CK(cudaMemcpyAsync(d_topk, h_topk, (size_t)T * K * 4, cudaMemcpyHostToDevice, g_stream));
    CK(cudaMemcpyAsync(w, h_w, (size_t)T * K * 4, cudaMemcpyHostToDevice, g_stream));

    ll_ctx_t c;
    memset(&c, 0, sizeof c);
    MK(cchan_moe_handle_create(g, d_topk, T, g_stream, &c.h));
    c.a.x = x;
    c.a.out_x = out_x;
    c.a.out_scales = scales;
    c.a.out_counts = counts;
    c.a.topk_weights = ht ? w : NULL;
    c.y = y;
    c.w = ht ? NULL : w;
    c.comb = comb;
    c.a.dtype = CCHAN_MOE_BF16;
    op_dispatch(&c); /* the handle learns its rows; combine may run */
    CK(cudaStreamSynchronize(g_stream));
    MK(cchan_moe_handle_num_recv_tokens(c.h, g_stream, &res->rows));
    MK(cchan_moe_check(g));
    if (!ht) {
        c.a.dtype = CCHAN_MOE_FP8_E4M3;
        res->fp8 = time_op_us(op_dispatch, &c, reps);
        c.a.dtype = CCHAN_MOE_BF16;
    }
    res->bf16 = time_op_us(op_dispatch, &c, reps);
    res->comb = time_op_us(op_combine, &c, reps);
    if (!ht) {
        c.a.dtype = CCHAN_MOE_FP8_E4M3;
        res->pair = time_op_us(op_pair, &c, reps);
    }
    MK(cchan_moe_check(g));
    MK(cchan_moe_handle_destroy(c.h));
    MK(cchan_moe_group_destroy(g));

    if (ncomm) run_a2a(res, nccl, ncomm, api, d_topk, w, x, y, comb, out_x, reps);
    cudaFree(x);
    cudaFree(out_x);
    cudaFree(y);
    cudaFree(scales);
    cudaFree(counts);
    cudaFree(comb);
    cudaFree(w);
    cudaFree(d_topk);
    free(h_topk);
    free(h_w);
}

static void print_row(const char *name, double us, double bytes, double base) {
    char gbs[32] = "-", b[32] = "-", sp[32] = "-";
    if (bytes > 0) snprintf(gbs, sizeof gbs, "%.1f", bytes / us / 1e3);
    if (base > 0) {
        snprintf(b, sizeof b, "%.2f", base);
        snprintf(sp, sizeof sp, "%.2f", base / us);
    }
    printf("%-28s %10.2f %10s %14s %9s\n", name, us, gbs, b, sp);
}

/* ------------------------------------------------------------------ main */

/* NCCL, loaded at run time, NVLS off, when every rank could load it; returns whether it runs and
 * says why not in `why`. */
static int setup_nccl(int use_nccl, cb_nccl_t *nccl, a2a_api_t *api, cb_nccl_comm_t *ncomm,
                      char *why, size_t whyn) {
    memset(nccl, 0, sizeof *nccl);
    memset(api, 0, sizeof *api);
    if (use_nccl) {
        if (cb_nccl_nvls_guard(why, whyn) != 0 || cb_nccl_load(nccl, why, whyn) != 0) {
            use_nccl = 0;
        } else {
            *(void **)&api->Send = dlsym(nccl->handle, "ncclSend");
            *(void **)&api->Recv = dlsym(nccl->handle, "ncclRecv");
            *(void **)&api->GroupStart = dlsym(nccl->handle, "ncclGroupStart");
            *(void **)&api->GroupEnd = dlsym(nccl->handle, "ncclGroupEnd");
            if (!api->Send || !api->Recv || !api->GroupStart || !api->GroupEnd) {
                snprintf(why, whyn, "%s lacks ncclSend/ncclRecv/ncclGroupStart/End", nccl->path);
                use_nccl = 0;
            }
        }
    }
    /* every rank must agree on running NCCL */
    int flags[8], all = 1;
    MK(cchan_bootstrap_allgather(cchan_comm_bootstrap(g_comm), &use_nccl, flags, sizeof(int)));
    for (int r = 0; r < g_n && r < 8; r++) all &= flags[r];
    if (use_nccl && !all) snprintf(why, whyn, "another rank could not load NCCL");
    use_nccl = all;
    if (use_nccl) {
        cb_nccl_unique_id_t id, ids[8];
        memset(&id, 0, sizeof id);
        if (g_rank == 0 && nccl->GetUniqueId(&id) != 0) exit(1);
        MK(cchan_bootstrap_allgather(cchan_comm_bootstrap(g_comm), &id, ids, sizeof id));
        int st = nccl->CommInitRank(ncomm, g_n, ids[0], g_rank);
        if (st != 0) {
            fprintf(stderr, "[r%d] ncclCommInitRank: %s\n", g_rank, cb_nccl_error(nccl, st));
            exit(1);
        }
    }
    return use_nccl;
}

/* One variant's rows (llr / htr NULL: that mode not run; ll0 / ht0: the first variant's, which
 * holds the NCCL figures). */
static void print_variant(int v, const char *variant, const result_t *llr, const result_t *htr,
                          const result_t *ll0, const result_t *ht0) {
    printf("# variant %d: CCHAN_MOE_VARIANT=\"%s\"%s\n", v, variant,
           variant[0] ? "" : " (the defaults)");
    printf("%-28s %10s %10s %14s %9s\n", "operation", "cchan_us", "GB/s", "nccl_a2a_us", "speedup");
    if (llr) {
        const result_t *r = llr;
        const double fp8b = (double)r->sel * (r->H + r->H / 128 * 4 + 16),
                     bf16b = (double)r->sel * r->H * 2;
        printf("# LL: %d tokens/rank, %d blocks x %d threads (SMs used: %d), buffer %.1f "
               "MiB (dispatch %.1f + combine %.1f MiB per parity; DeepEP's layout: %.1f "
               "MiB); rank 0 got %d rows\n",
               r->T, r->info.num_blocks, r->info.threads_per_block, r->info.num_blocks,
               r->info.comm_buffer_bytes / 1048576.0, r->info.dispatch_region_bytes / 1048576.0,
               r->info.combine_region_bytes / 1048576.0,
               2.0 * 2 * r->E * (double)r->T * (r->H * 2 + 64) / 1048576.0, r->rows);
        print_row("LL dispatch fp8", r->fp8, fp8b, -1);
        print_row("LL dispatch bf16", r->bf16, bf16b, ll0->n_disp);
        print_row("LL combine bf16", r->comb, bf16b, ll0->n_comb);
        print_row("LL fp8 dispatch+combine", r->pair, -1, -1);
    }
    if (htr) {
        const result_t *r = htr;
        const double b = (double)r->rows * r->H * 2;
        printf("# HT: %d tokens/rank, %d blocks x %d threads (SMs used: %d), buffer %.1f "
               "MiB; rank 0 received %d rows\n",
               r->T, r->info.num_blocks, r->info.threads_per_block, r->info.num_blocks,
               r->info.comm_buffer_bytes / 1048576.0, r->rows);
        print_row("HT dispatch bf16", r->bf16, b, ht0->n_disp);
        print_row("HT combine bf16", r->comb, b, ht0->n_comb);
    }
}

/* --json: every variant's figures as one JSON object. */
static void write_json(const char *json, const char *gpu, int hidden, int topk, int experts,
                       const char *const *variants, int nvar, const result_t *ll,
                       const result_t *ht) {
    FILE *f = fopen(json, "w");
    if (f) {
        fprintf(f,
                "{\"bench\":\"cchan-moe-bench\",\"ranks\":%d,\"gpu\":\"%s\",\"hidden\":%d,"
                "\"topk\":%d,\"experts\":%d,\"variants\":[",
                g_n, gpu, hidden, topk, experts);
        for (int v = 0; v < nvar; v++)
            fprintf(f,
                    "%s{\"variant\":\"%s\",\"ll\":{\"tokens\":%d,\"blocks\":%d,"
                    "\"buffer_bytes\":%zu,\"dispatch_fp8_us\":%.3f,\"dispatch_bf16_us\":%.3f,"
                    "\"combine_bf16_us\":%.3f,\"pair_us\":%.3f,\"nccl_dispatch_us\":%.3f,"
                    "\"nccl_combine_us\":%.3f},\"ht\":{\"tokens\":%d,\"blocks\":%d,"
                    "\"rows\":%d,\"dispatch_bf16_us\":%.3f,\"combine_bf16_us\":%.3f,"
                    "\"nccl_dispatch_us\":%.3f,\"nccl_combine_us\":%.3f}}",
                    v ? "," : "", variants[v], ll[v].T, ll[v].info.num_blocks,
                    ll[v].info.comm_buffer_bytes, ll[v].fp8, ll[v].bf16, ll[v].comb, ll[v].pair,
                    ll[0].n_disp, ll[0].n_comb, ht[v].T, ht[v].info.num_blocks, ht[v].rows,
                    ht[v].bf16, ht[v].comb, ht[0].n_disp, ht[0].n_comb);
        fprintf(f, "]}\n");
        fclose(f);
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int tokens = 128, ht_tokens = 4096, hidden = 7168, topk = 8, experts = 256, reps = 9,
        use_nccl = 1, do_ll = 1, do_ht = 1;
    const char *json = NULL;
    /* --variants "a;b;...": each a CCHAN_MOE_VARIANT value, measured with its own group ("" or
     * "default": the library's defaults); NCCL runs once, with the first */
    char variants_buf[1024] = "";
    const char *variants[16];
    int nvar = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ht-tokens") && i + 1 < argc)
            ht_tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hidden") && i + 1 < argc)
            hidden = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--topk") && i + 1 < argc)
            topk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--experts") && i + 1 < argc)
            experts = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--blocks") && i + 1 < argc)
            g_ll_blocks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--variants") && i + 1 < argc)
            snprintf(variants_buf, sizeof variants_buf, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            ++i;
            do_ll = !strcmp(argv[i], "ll") || !strcmp(argv[i], "all");
            do_ht = !strcmp(argv[i], "ht") || !strcmp(argv[i], "all");
        } else if (!strcmp(argv[i], "--no-nccl"))
            use_nccl = 0;
        else {
            fprintf(stderr,
                    "usage: cchan-run -n <GPUs> %s [--mode ll|ht|all] [--tokens N] "
                    "[--ht-tokens N] [--hidden H] [--topk K] [--experts E] [--blocks B] [--reps R] "
                    "[--no-nccl] "
                    "[--variants 'V1;V2;...'] [--json FILE]\n",
                    argv[0]);
            return 2;
        }
    }
    if (reps < 1 || reps > 64) reps = 9;
    for (char *p = variants_buf; nvar < 16;) {
        char *semi = strchr(p, ';');
        if (semi) *semi = '\0';
        variants[nvar++] = !strcmp(p, "default") ? "" : p;
        if (!semi) break;
        p = semi + 1;
    }
    int ngpu = 0;
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) {
        printf("SKIP cchan-moe-bench: no CUDA GPU\n");
        return 77;
    }
    cchan_bootstrap_t *bs = NULL;
    MK(cchan_bootstrap_create_from_env(&bs));
    cchan_comm_config_t ccfg = CCHAN_COMM_CONFIG_INIT;
    ccfg.platform = CCHAN_PLATFORM_CUDA;
    MK(cchan_comm_create(bs, &ccfg, &g_comm));
    g_rank = cchan_comm_rank(g_comm);
    g_n = cchan_comm_size(g_comm);
    CK(cudaSetDevice(cchan_comm_device(g_comm)));
    CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, cchan_comm_device(g_comm)));

    char why[512] = "--no-nccl";
    cb_nccl_t nccl;
    a2a_api_t api;
    cb_nccl_comm_t ncomm = NULL;
    use_nccl = setup_nccl(use_nccl, &nccl, &api, &ncomm, why, sizeof why);

    result_t ll[16], ht[16];
    memset(ll, 0, sizeof ll);
    memset(ht, 0, sizeof ht);
    if (g_rank == 0) {
        printf("# cchan-moe-bench: %d ranks, %s (%d SMs), hidden %d, top-%d, %d experts; %s\n", g_n,
               prop.name, prop.multiProcessorCount, hidden, topk, experts, cchan_version());
        printf("# time per operation: CUDA graphs of 10 and 60 operations, (T60-T10)/50, median of "
               "%d; GB/s counted as DeepEP counts; NCCL a2a (measured with the first variant): "
               "events around one call, median\n",
               reps);
    }
    /* each variant's rows as soon as it is measured, so a later variant that fails keeps them */
    for (int v = 0; v < nvar; v++) {
        cb_nccl_comm_t nc = v == 0 ? ncomm : NULL;
        if (do_ll)
            run_mode(0, tokens, hidden, topk, experts, reps, &nccl, nc, &api, variants[v], &ll[v]);
        if (do_ht)
            run_mode(1, ht_tokens, hidden, topk, experts, reps, &nccl, nc, &api, variants[v],
                     &ht[v]);
        if (g_rank == 0)
            print_variant(v, variants[v], do_ll ? &ll[v] : NULL, do_ht ? &ht[v] : NULL, &ll[0],
                          &ht[0]);
    }

    if (g_rank == 0) {
        if (!use_nccl)
            printf("# NCCL baseline not run: %s\n", why);
        else
            printf("# NCCL %d (%s), NCCL_NVLS_ENABLE=%s\n", nccl.version, nccl.path,
                   getenv("NCCL_NVLS_ENABLE") ? getenv("NCCL_NVLS_ENABLE") : "unset");
        if (json) write_json(json, prop.name, hidden, topk, experts, variants, nvar, ll, ht);
    }
    if (ncomm) nccl.CommDestroy(ncomm);
    cchan_comm_destroy(g_comm);
    return 0;
}
