/* cchan-bw-probe: how many bytes per second each way of moving data between two GPUs reaches, with
 * both GPUs sending to each other at once (as an AllGather or AllReduce of two ranks does) and with
 * one sending, measured with no cchan code at all (plain CUDA runtime, one process, peer access).
 *
 * The question it answers: can any mechanism move more per direction while both GPUs send than
 * cchan's SM stores and its copy-engine + SM mix reach for a 1 GiB collective (docs/tuning.md,
 * "Bandwidth ceiling")?
 *
 *   cchan-bw-probe [--mib N] [--reps R] [--only SUBSTRING] [--pad BYTES]
 *                  [--procs [--touch-peer] [--one-buf]]
 *
 * --pad allocates every buffer BYTES larger than it moves: cudaMalloc maps a size that is not a
 * whole number of 2 MiB with small pages, which slows copy-engine copies while both GPUs send.
 * --procs runs one process per GPU (fork+exec before CUDA starts, buffers shared with legacy IPC,
 * as cchan and MSCCL++ run); --touch-peer then also makes each process create a context on the
 * other GPU; --one-buf puts each GPU's source and destination in one allocation (its two halves,
 * the way an in-place AllGather's registered buffer holds both).
 *
 * Mechanisms (each GPU moves N MiB, default 512, from its buffer into the peer's, or the reverse):
 *   ce-push Lx    cudaMemcpyAsync local -> peer, split over L streams
 *   ce-pull Lx    cudaMemcpyAsync peer -> local (the receiver's copy engine)
 *   ce-push 8M    one stream, 8 MiB copies (how a proxy issues puts)
 *   ce-push+pull  half pushed by this GPU's copy engine, half pulled by the peer's (2 streams)
 *   sm-push B     B blocks of 512 threads, 4 x 16-byte loads then stores per thread in flight
 *   sm-pull B     the same reading the peer and storing locally
 *   tma-push B    B blocks, one thread each: bulk copy global -> shared -> peer (cp.async.bulk),
 *                 4 stages of 32 KiB
 *   mix P/B       ce-push 1x of (1000-P)/1000 of the bytes and sm-push B blocks of the rest
 * Prints, per mechanism, the median over R repetitions of the slower GPU's GB/s. Exit status 0 on
 * success, 2 on a setup failure, 77 without two GPUs with peer access.
 * Built by scripts/device-bwprobe.sh (nvcc -arch=sm_90), not by CMake: it is a measuring tool for
 * the GPU machine, not part of the SDK.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe_pipe.h"

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "bw-probe: %s: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, \
                    __LINE__);                                                                     \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

#define MAX_LANES 8
#define TMA_STAGES 4
#define TMA_CHUNK (32u * 1024u)

/* ---- kernels */

__global__ void gate_kernel(const volatile int *go) {
    while (*go == 0) {}
}

/* dst[i] = src[i] for n 16-byte vectors, 4 in flight per thread */
__global__ void __launch_bounds__(512)
    copy_kernel(uint4 *__restrict__ dst, const uint4 *__restrict__ src, size_t n) {
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nt = (size_t)gridDim.x * blockDim.x;
    size_t i = t;
    for (; i + 3 * nt < n; i += 4 * nt) {
        uint4 v0 = src[i], v1 = src[i + nt], v2 = src[i + 2 * nt], v3 = src[i + 3 * nt];
        dst[i] = v0;
        dst[i + nt] = v1;
        dst[i + 2 * nt] = v2;
        dst[i + 3 * nt] = v3;
    }
    for (; i < n; i += nt) dst[i] = src[i];
}

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Block b copies chunks b, b + grid, ... of TMA_CHUNK bytes: a bulk load into shared memory (an
 * mbarrier counts its bytes), then a bulk store from there to dst; TMA_STAGES buffers in flight. */
__global__ void tma_copy_kernel(uint8_t *dst, const uint8_t *src, size_t bytes) {
    extern __shared__ __align__(128) uint8_t smem[]; /* TMA_STAGES x TMA_CHUNK */
    uint8_t(*buf)[TMA_CHUNK] = (uint8_t(*)[TMA_CHUNK])smem;
    __shared__ __align__(8) uint64_t bar[TMA_STAGES];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x != 0) return;
    for (int s = 0; s < TMA_STAGES; s++)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    size_t nchunks = (bytes + TMA_CHUNK - 1) / TMA_CHUNK;
    uint32_t k = 0;
    for (size_t c = blockIdx.x; c < nchunks; c += gridDim.x, k++) {
        uint32_t s = k % TMA_STAGES, parity = (k / TMA_STAGES) & 1u;
        uint32_t len =
            (uint32_t)((bytes - c * TMA_CHUNK) < TMA_CHUNK ? bytes - c * TMA_CHUNK : TMA_CHUNK);
        /* buffer s is free once the store of chunk k - TMA_STAGES has read it */
        asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(TMA_STAGES - 1) : "memory");
        asm volatile(
            "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&bar[s])),
            "r"(len)
            : "memory");
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
            "%2, [%3];" ::"r"(smem_addr(buf[s])),
            "l"(src + c * TMA_CHUNK), "r"(len), "r"(smem_addr(&bar[s]))
            : "memory");
        uint32_t done = 0;
        while (!done)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                         "selp.u32 %0, 1, 0, p; }"
                         : "=r"(done)
                         : "r"(smem_addr(&bar[s])), "r"(parity)
                         : "memory");
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                         dst + c * TMA_CHUNK),
                     "r"(smem_addr(buf[s])), "r"(len)
                     : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#else
    if (threadIdx.x == 0 && blockIdx.x == 0) __trap(); /* bulk copies need sm_90 */
    (void)buf;
    (void)bar;
    (void)dst;
    (void)src;
    (void)bytes;
#endif
}

/* ---- the two GPUs */

typedef struct gpu {
    int dev;
    uint8_t *src, *dst; /* this GPU's memory */
    cudaStream_t main, lane[MAX_LANES];
    cudaEvent_t t0, t1, fork, join[MAX_LANES];
} gpu_t;

static gpu_t g[2];
static volatile int *h_go; /* host-mapped: both GPUs' gates open at once */
static int *d_go;

enum kind { CE_PUSH, CE_PULL, CE_PUSH_CHUNKED, CE_PUSH_PULL, SM_PUSH, SM_PULL, TMA_PUSH, MIX };

typedef struct mech {
    enum kind k;
    int arg;  /* lanes, blocks, or SM permille for MIX */
    int arg2; /* MIX: blocks */
    char name[48];
} mech_t;

/* Enqueue on GPU i moving `bytes` to (push) or from (pull) GPU j. */
static void enqueue(const mech_t *m, int i, size_t bytes) {
    gpu_t *a = &g[i], *b = &g[1 - i];
    CK(cudaSetDevice(a->dev));
    int lanes = 0;
    size_t ce_bytes = 0, sm_bytes = 0;
    switch (m->k) {
    case CE_PUSH:
    case CE_PULL:
        lanes = m->arg;
        ce_bytes = bytes;
        break;
    case CE_PUSH_CHUNKED:
        lanes = 1;
        ce_bytes = bytes;
        break;
    case CE_PUSH_PULL:
        lanes = 2;
        ce_bytes = bytes;
        break;
    case MIX:
        sm_bytes = bytes / 1000 * (size_t)m->arg / 16 * 16;
        ce_bytes = bytes - sm_bytes;
        lanes = 1;
        break;
    default: sm_bytes = bytes; break;
    }
    if (lanes) {
        CK(cudaEventRecord(a->fork, a->main));
        size_t per = (ce_bytes / (size_t)lanes + 15) / 16 * 16;
        for (int l = 0; l < lanes; l++) {
            size_t lo = (size_t)l * per,
                   n = lo >= ce_bytes ? 0 : (ce_bytes - lo < per ? ce_bytes - lo : per);
            CK(cudaStreamWaitEvent(a->lane[l], a->fork, 0));
            size_t off = sm_bytes + lo;
            if (m->k == CE_PULL || (m->k == CE_PUSH_PULL && l == 1))
                CK(cudaMemcpyAsync(a->dst + off, b->src + off, n, cudaMemcpyDeviceToDevice,
                                   a->lane[l]));
            else if (m->k == CE_PUSH_CHUNKED)
                for (size_t c = 0; c < n; c += 8u << 20)
                    CK(cudaMemcpyAsync(b->dst + off + c, a->src + off + c,
                                       n - c < (8u << 20) ? n - c : (8u << 20),
                                       cudaMemcpyDeviceToDevice, a->lane[l]));
            else
                CK(cudaMemcpyAsync(b->dst + off, a->src + off, n, cudaMemcpyDeviceToDevice,
                                   a->lane[l]));
        }
    }
    if (sm_bytes) {
        int blocks = m->k == MIX ? m->arg2 : m->arg;
        if (m->k == SM_PULL)
            copy_kernel<<<blocks, 512, 0, a->main>>>((uint4 *)a->dst, (const uint4 *)b->src,
                                                     sm_bytes / 16);
        else if (m->k == TMA_PUSH)
            tma_copy_kernel<<<blocks, 32, TMA_STAGES * TMA_CHUNK, a->main>>>(b->dst, a->src,
                                                                             sm_bytes);
        else
            copy_kernel<<<blocks, 512, 0, a->main>>>((uint4 *)b->dst, (const uint4 *)a->src,
                                                     sm_bytes / 16);
        CK(cudaGetLastError());
    }
    for (int l = 0; l < lanes; l++) {
        CK(cudaEventRecord(a->join[l], a->lane[l]));
        CK(cudaStreamWaitEvent(a->main, a->join[l], 0));
    }
}

static int cmp_d(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* GB/s of one run: senders = 1 (GPU 0 only) or 2 (both). The slower GPU's time counts. */
static double run_once(const mech_t *m, size_t bytes, int senders) {
    *h_go = 0;
    for (int i = 0; i < senders; i++) {
        CK(cudaSetDevice(g[i].dev));
        gate_kernel<<<1, 1, 0, g[i].main>>>(d_go);
        CK(cudaEventRecord(g[i].t0, g[i].main));
        enqueue(m, i, bytes);
        CK(cudaEventRecord(g[i].t1, g[i].main));
    }
    __sync_synchronize();
    *h_go = 1;
    float worst = 0;
    for (int i = 0; i < senders; i++) {
        CK(cudaSetDevice(g[i].dev));
        CK(cudaEventSynchronize(g[i].t1));
        float ms;
        CK(cudaEventElapsedTime(&ms, g[i].t0, g[i].t1));
        if (ms > worst) worst = ms;
    }
    return (double)bytes / (worst * 1e-3) / 1e9;
}

static int build_mechs(mech_t *ms) {
    int nm = 0;
#define ADD(K, A, A2, ...)                                                                         \
    do {                                                                                           \
        ms[nm].k = K;                                                                              \
        ms[nm].arg = A;                                                                            \
        ms[nm].arg2 = A2;                                                                          \
        snprintf(ms[nm].name, sizeof ms[nm].name, __VA_ARGS__);                                    \
        nm++;                                                                                      \
    } while (0)
    for (int l = 1; l <= 4; l *= 2) ADD(CE_PUSH, l, 0, "ce-push %dx", l);
    ADD(CE_PUSH, 8, 0, "ce-push 8x");
    for (int l = 1; l <= 4; l *= 2) ADD(CE_PULL, l, 0, "ce-pull %dx", l);
    ADD(CE_PUSH_CHUNKED, 1, 0, "ce-push 8M");
    ADD(CE_PUSH_PULL, 2, 0, "ce-push+pull");
    static const int blocks[] = {32, 66, 132, 264};
    for (int b = 0; b < 4; b++) ADD(SM_PUSH, blocks[b], 0, "sm-push %d", blocks[b]);
    for (int b = 0; b < 4; b++) ADD(SM_PULL, blocks[b], 0, "sm-pull %d", blocks[b]);
    static const int tblocks[] = {16, 32, 66, 132};
    for (int b = 0; b < 4; b++) ADD(TMA_PUSH, tblocks[b], 0, "tma-push %d", tblocks[b]);
    static const int pm[] = {100, 200, 300, 400, 500};
    for (int p = 0; p < 5; p++) ADD(MIX, pm[p], 66, "mix %d/66", pm[p]);
    for (int p = 0; p < 5; p++) ADD(MIX, pm[p], 132, "mix %d/132", pm[p]);
    ADD(MIX, 400, 32, "mix 400/32");
#undef ADD
    return nm;
}

static double median(double *r, int n) {
    qsort(r, (size_t)n, sizeof *r, cmp_d);
    return r[n / 2];
}

/* ---- two processes: handles, "go" tokens and times travel through pipes */
static void xwrite(int fd, const void *p, size_t n) { probe_write("bw-probe", fd, p, n); }
static void xread(int fd, void *p, size_t n) { probe_read("bw-probe", fd, p, n); }

typedef struct opts {
    size_t mib, pad;
    int reps, touch_peer, one_buf;
    const char *only;
} opts_t;

static void setup_gpu(gpu_t *a, int dev, size_t bytes, size_t pad, int one_buf, int slot) {
    a->dev = dev;
    CK(cudaSetDevice(dev));
    if (one_buf) { /* [slot 0 | slot 1]: src is this GPU's half, dst the whole (offset by caller) */
        CK(cudaMalloc(&a->src, 2 * bytes + pad));
        a->dst = a->src;
        a->src += (size_t)slot * bytes;
    } else {
        CK(cudaMalloc(&a->src, bytes + pad));
        CK(cudaMalloc(&a->dst, bytes + pad));
    }
    CK(cudaMemset(a->src, 0x11 * (dev + 1), bytes));
    CK(cudaStreamCreateWithFlags(&a->main, cudaStreamNonBlocking));
    for (int l = 0; l < MAX_LANES; l++) {
        CK(cudaStreamCreateWithFlags(&a->lane[l], cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&a->join[l], cudaEventDisableTiming));
    }
    CK(cudaEventCreateWithFlags(&a->fork, cudaEventDisableTiming));
    CK(cudaEventCreate(&a->t0));
    CK(cudaEventCreate(&a->t1));
    CK(cudaFuncSetAttribute(tma_copy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            TMA_STAGES * TMA_CHUNK));
}

static int run_rank(int rank, int rfd, int wfd, const opts_t *o) {
    size_t bytes = o->mib << 20;
    if (o->touch_peer) { /* a context of this process on the other GPU too */
        CK(cudaSetDevice(1 - rank));
        CK(cudaFree(0));
    }
    gpu_t *a = &g[rank], *b = &g[1 - rank];
    setup_gpu(a, rank, bytes, o->pad, o->one_buf, rank);
    /* the peer's buffers, mapped here: b->src for pulls, b->dst for pushes */
    cudaIpcMemHandle_t h[2], ph[2];
    CK(cudaIpcGetMemHandle(&h[0], o->one_buf ? a->dst : a->src));
    CK(cudaIpcGetMemHandle(&h[1], a->dst));
    xwrite(wfd, h, sizeof h);
    xread(rfd, ph, sizeof ph);
    uint8_t *psrc, *pdst;
    CK(cudaIpcOpenMemHandle((void **)&psrc, ph[0], cudaIpcMemLazyEnablePeerAccess));
    if (o->one_buf) {
        pdst = psrc;
        psrc += (size_t)(1 - rank) * bytes;
    } else {
        CK(cudaIpcOpenMemHandle((void **)&pdst, ph[1], cudaIpcMemLazyEnablePeerAccess));
    }
    b->dev = 1 - rank;
    b->src = psrc;
    b->dst = pdst;
    if (o->one_buf) { /* pushes land in the peer's slot of this rank, pulls in our own slot of it */
        b->dst += (size_t)rank * bytes;
        a->dst += (size_t)(1 - rank) * bytes;
    }
    CK(cudaSetDevice(rank));
    CK(cudaDeviceSynchronize());
    mech_t ms[64];
    int nm = build_mechs(ms);
    double *r = (double *)malloc(sizeof(double) * (size_t)o->reps);
    if (rank == 0)
        printf("# two processes, one GPU each (legacy IPC)%s%s, buffers padded by %zu bytes\n",
               o->touch_peer ? ", each with a context on the other GPU too" : "",
               o->one_buf ? ", source and destination in one allocation" : "", o->pad);
    for (int k = 0; k < nm; k++) {
        if (o->only && !strstr(ms[k].name, o->only)) continue;
        double med[2];
        for (int senders = 1; senders <= 2; senders++) {
            for (int i = -1; i < o->reps; i++) { /* i = -1: warm-up */
                char tok = 'g';
                xwrite(wfd, &tok, 1);
                xread(rfd, &tok, 1);
                float ms_ = 0;
                if (rank < senders) {
                    CK(cudaEventRecord(a->t0, a->main));
                    enqueue(&ms[k], rank, bytes);
                    CK(cudaEventRecord(a->t1, a->main));
                    CK(cudaEventSynchronize(a->t1));
                    CK(cudaEventElapsedTime(&ms_, a->t0, a->t1));
                }
                float pms;
                xwrite(wfd, &ms_, sizeof ms_);
                xread(rfd, &pms, sizeof pms);
                if (pms > ms_) ms_ = pms;
                if (i >= 0) r[i] = (double)bytes / (ms_ * 1e-3) / 1e9;
            }
            med[senders - 1] = median(r, o->reps);
        }
        if (rank == 0) printf("  %-14s %12.1f %12.1f\n", ms[k].name, med[0], med[1]);
        fflush(stdout);
    }
    char tok = 'e';
    xwrite(wfd, &tok, 1); /* the peer may still copy from our buffers: unmap after both are done */
    xread(rfd, &tok, 1);
    free(r);
    return 0;
}

static int run_procs(const char *self, const opts_t *o) {
    char mb[24], rp[16], pd[24];
    snprintf(mb, sizeof mb, "%zu", o->mib);
    snprintf(pd, sizeof pd, "%zu", o->pad);
    snprintf(rp, sizeof rp, "%d", o->reps);
    const char *extra[16];
    int n = 0;
    extra[n++] = "--mib", extra[n++] = mb, extra[n++] = "--reps", extra[n++] = rp;
    extra[n++] = "--pad", extra[n++] = pd;
    if (o->only) extra[n++] = "--only", extra[n++] = o->only;
    if (o->touch_peer) extra[n++] = "--touch-peer";
    if (o->one_buf) extra[n++] = "--one-buf";
    extra[n] = NULL;
    return probe_run_pair("bw-probe", self, extra);
}

int main(int argc, char **argv) {
    opts_t o = {512, 0, 5, 0, 0, NULL};
    int procs = 0, rank = -1, rfd = -1, wfd = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mib") && i + 1 < argc)
            o.mib = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            o.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            o.only = argv[++i];
        else if (!strcmp(argv[i], "--pad") && i + 1 < argc)
            o.pad = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--procs"))
            procs = 1;
        else if (!strcmp(argv[i], "--touch-peer"))
            o.touch_peer = 1;
        else if (!strcmp(argv[i], "--one-buf"))
            o.one_buf = 1;
        else if (!strcmp(argv[i], "--rank") && i + 3 < argc) {
            rank = atoi(argv[++i]);
            rfd = atoi(argv[++i]);
            wfd = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: cchan-bw-probe [--mib N] [--reps R] [--only SUBSTRING] "
                            "[--pad BYTES] [--procs [--touch-peer] [--one-buf]]\n");
            return 2;
        }
    }
    if (o.reps < 1 || o.reps > 100 || o.mib < 1) return 2;
    if (rank >= 0) return run_rank(rank, rfd, wfd, &o);
    if (procs) return run_procs(argv[0], &o);
    int n = 0, p01 = 0, p10 = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
        printf("bw-probe: needs two GPUs, found %d: skipped\n", n);
        return 77;
    }
    CK(cudaDeviceCanAccessPeer(&p01, 0, 1));
    CK(cudaDeviceCanAccessPeer(&p10, 1, 0));
    if (!p01 || !p10) {
        printf("bw-probe: GPUs 0 and 1 have no peer access: skipped\n");
        return 77;
    }
    size_t bytes = o.mib << 20;
    for (int i = 0; i < 2; i++) {
        setup_gpu(&g[i], i, bytes, o.pad, o.one_buf, i);
        CK(cudaDeviceEnablePeerAccess(1 - i, 0));
    }
    if (o.one_buf) /* GPU i pushes into slot i of the peer's buffer and pulls into its own slot 1-i
                    */
        for (int i = 0; i < 2; i++) g[i].dst += (size_t)(1 - i) * bytes;
    CK(cudaHostAlloc((void **)&h_go, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaHostGetDevicePointer((void **)&d_go, (void *)h_go, 0));

    mech_t ms[64];
    int nm = build_mechs(ms);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# cchan-bw-probe: %s x2, %zu MiB per GPU per direction, median of %d, buffers padded "
           "by %zu bytes\n",
           prop.name, o.mib, o.reps, o.pad);
    printf("# %-14s %12s %12s\n", "mechanism", "one GB/s", "both GB/s");
    double *r = (double *)malloc(sizeof(double) * (size_t)o.reps);
    for (int k = 0; k < nm; k++) {
        if (o.only && !strstr(ms[k].name, o.only)) continue;
        double med[2];
        for (int senders = 1; senders <= 2; senders++) {
            (void)run_once(&ms[k], bytes, senders); /* warm-up */
            for (int i = 0; i < o.reps; i++) r[i] = run_once(&ms[k], bytes, senders);
            med[senders - 1] = median(r, o.reps);
        }
        printf("  %-14s %12.1f %12.1f\n", ms[k].name, med[0], med[1]);
        fflush(stdout);
    }
    /* correctness of the last copies: GPU 1's destination holds GPU 0's pattern */
    uint8_t probe[64];
    CK(cudaSetDevice(1));
    CK(cudaMemcpy(probe, g[1].dst + bytes - sizeof probe, sizeof probe, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (size_t i = 0; i < sizeof probe; i++) ok &= probe[i] == 0x11;
    printf("# data check: %s\n", ok ? "ok" : "WRONG");
    free(r);
    return ok ? 0 : 1;
}
