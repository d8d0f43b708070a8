/* cchan-queue-probe: which copies on one GPU get past a kernel that waits, when the application has
 * queued a copy of its own behind that kernel, measured with no cchan code at all.
 *
 * The question it answers: how may a port channel whose two ends are on one GPU (ranks sharing a
 * GPU under MPS) move its data without waiting for the kernel that waits for it? Today such a
 * channel copies through pinned host memory (device to host, then host to device), because a
 * device-to-device copy there is a kernel on the SMs, which a waiting grid that fills every SM never
 * lets run; but its device-to-host copies were seen stuck behind an application's own device-to-host
 * copy queued behind the waiting kernel, with CUDA_DEVICE_MAX_CONNECTIONS=1 (which frameworks set on
 * Hopper). Each case here:
 *   1. launches a kernel K on the application's stream that spins on a host-mapped flag: one block,
 *      or a grid that fills every SM;
 *   2. with --app (the default runs both), queues a 4 KiB device-to-host copy behind K on the same
 *      stream, as an application does;
 *   3. issues one copy mechanism M on a stream of its own (non-blocking, as the proxy's), records an
 *      event after it and polls that event for --wait-ms;
 *   4. releases K, synchronizes, and checks M's data.
 * Mechanisms: staged (device to host, then host to device: cchan today), d2h, h2d (each half
 * alone), d2d (cudaMemcpyAsync device to device), peer (cudaMemcpyPeerAsync to the same device),
 * kernel (a one-block copy kernel).
 *
 *   cchan-queue-probe [--connections N] [--bytes B] [--wait-ms T] [--only NAME]
 *
 * --connections sets CUDA_DEVICE_MAX_CONNECTIONS before CUDA starts (default: leave it as it is).
 * Prints one line per case: done after how many ms, or "STUCK" when the event had not completed
 * after the wait (it completes once K is released). Exit status 0 when every case ran and every
 * completed copy was correct (a stuck case is a finding, not a failure), 2 on a setup failure.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "queue-probe: %s: %s (%s:%d)\n", #call, cudaGetErrorString(e_),        \
                    __FILE__, __LINE__);                                                           \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

/* K: thread 0 of each block polls the host-mapped flag (one PCIe reader per block, not 1024); the
 * others hold their SM at the barrier until it is set. */
__global__ void k_wait(const volatile uint32_t *flag) {
    if (threadIdx.x == 0)
        while (*flag == 0) {
        }
    __syncthreads();
}

__global__ void k_copy(uint4 *dst, const uint4 *src, uint64_t n) {
    for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

__global__ void k_fill(uint8_t *p, uint64_t n, uint32_t seed) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        p[i] = (uint8_t)(i * 2654435761u + seed);
}

enum { M_STAGED, M_D2H, M_H2D, M_D2D, M_PEER, M_KERNEL, M_COUNT };
static const char *const m_name[M_COUNT] = {"staged", "d2h", "h2d", "d2d", "peer", "kernel"};

typedef struct probe {
    int dev, sms, full_blocks;
    uint64_t bytes;
    uint8_t *d_src, *d_dst, *d_app;
    uint8_t *h_stage, *h_app, *h_src;
    uint32_t *h_flag, *d_flag;
} probe_t;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void issue(const probe_t *p, int m, cudaStream_t s) {
    switch (m) {
    case M_STAGED:
        CK(cudaMemcpyAsync(p->h_stage, p->d_src, p->bytes, cudaMemcpyDeviceToHost, s));
        CK(cudaMemcpyAsync(p->d_dst, p->h_stage, p->bytes, cudaMemcpyHostToDevice, s));
        break;
    case M_D2H: CK(cudaMemcpyAsync(p->h_stage, p->d_src, p->bytes, cudaMemcpyDeviceToHost, s)); break;
    case M_H2D: CK(cudaMemcpyAsync(p->d_dst, p->h_src, p->bytes, cudaMemcpyHostToDevice, s)); break;
    case M_D2D: CK(cudaMemcpyAsync(p->d_dst, p->d_src, p->bytes, cudaMemcpyDeviceToDevice, s)); break;
    case M_PEER: CK(cudaMemcpyPeerAsync(p->d_dst, p->dev, p->d_src, p->dev, p->bytes, s)); break;
    default:
        k_copy<<<1, 512, 0, s>>>((uint4 *)p->d_dst, (const uint4 *)p->d_src, p->bytes / 16);
        CK(cudaGetLastError());
    }
}

/* Did M's copy land? d_dst against d_src (every mechanism but d2h writes d_dst; d2h writes h_stage,
 * h2d copies h_src, which holds d_src's bytes). */
static int check(const probe_t *p, int m) {
    uint8_t *want = (uint8_t *)malloc(p->bytes), *got = (uint8_t *)malloc(p->bytes);
    if (!want || !got) exit(2);
    CK(cudaMemcpy(want, p->d_src, p->bytes, cudaMemcpyDeviceToHost));
    if (m == M_D2H)
        memcpy(got, p->h_stage, p->bytes);
    else
        CK(cudaMemcpy(got, p->d_dst, p->bytes, cudaMemcpyDeviceToHost));
    int ok = memcmp(want, got, p->bytes) == 0;
    free(want);
    free(got);
    return ok;
}

/* One case; returns 0 when M's data is right (or M never completed), 1 when it is wrong. */
static int run_case(probe_t *p, int m, int full, int app, double wait_ms) {
    cudaStream_t sa, sb;
    CK(cudaStreamCreate(&sa));
    CK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
    CK(cudaMemset(p->d_dst, 0, p->bytes));
    CK(cudaDeviceSynchronize());
    cudaEvent_t done;
    CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    *(volatile uint32_t *)p->h_flag = 0;
    const int blocks = full ? p->full_blocks : 1;
    k_wait<<<blocks, full ? 1024 : 32, 0, sa>>>(p->d_flag);
    CK(cudaGetLastError());
    if (app) CK(cudaMemcpyAsync(p->h_app, p->d_app, 4096, cudaMemcpyDeviceToHost, sa));
    double t0 = now_ms();
    issue(p, m, sb);
    CK(cudaEventRecord(done, sb));
    double t = -1;
    for (;;) {
        cudaError_t e = cudaEventQuery(done);
        if (e == cudaSuccess) {
            t = now_ms() - t0;
            break;
        }
        if (e != cudaErrorNotReady) CK(e);
        if (now_ms() - t0 > wait_ms) break;
    }
    *(volatile uint32_t *)p->h_flag = 1;
    CK(cudaDeviceSynchronize());
    int bad = 0;
    if (t >= 0) bad = !check(p, m);
    printf("  %-7s %-9s %-14s %s", m_name[m], full ? "full grid" : "one block",
           app ? "app copy queued" : "no app copy", t >= 0 ? "done after " : "STUCK");
    if (t >= 0) printf("%.2f ms%s", t, bad ? "  WRONG DATA" : "");
    printf("\n");
    CK(cudaEventDestroy(done));
    CK(cudaStreamDestroy(sa));
    CK(cudaStreamDestroy(sb));
    return bad;
}

int main(int argc, char **argv) {
    const char *conns = NULL, *only = NULL;
    uint64_t bytes = 4u << 20;
    double wait_ms = 500;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--connections") && i + 1 < argc)
            conns = argv[++i];
        else if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
            bytes = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--wait-ms") && i + 1 < argc)
            wait_ms = atof(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr,
                    "usage: %s [--connections N] [--bytes B] [--wait-ms T] [--only NAME]\n",
                    argv[0]);
            return 2;
        }
    }
    if (bytes < 16 || bytes % 16) {
        fprintf(stderr, "queue-probe: --bytes %llu: expected a multiple of 16, at least 16\n",
                (unsigned long long)bytes);
        return 2;
    }
    if (conns) setenv("CUDA_DEVICE_MAX_CONNECTIONS", conns, 1);
    probe_t p;
    memset(&p, 0, sizeof p);
    p.bytes = bytes;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("queue-probe: no GPU\n");
        return 77;
    }
    CK(cudaSetDevice(0));
    CK(cudaDeviceGetAttribute(&p.sms, cudaDevAttrMultiProcessorCount, 0));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_wait, 1024, 0));
    p.full_blocks = p.sms * (per_sm > 0 ? per_sm : 1);
    CK(cudaMalloc(&p.d_src, bytes));
    CK(cudaMalloc(&p.d_dst, bytes));
    CK(cudaMalloc(&p.d_app, 4096));
    CK(cudaHostAlloc(&p.h_stage, bytes, cudaHostAllocDefault));
    CK(cudaHostAlloc(&p.h_src, bytes, cudaHostAllocDefault));
    CK(cudaHostAlloc(&p.h_app, 4096, cudaHostAllocDefault));
    CK(cudaHostAlloc(&p.h_flag, sizeof(uint32_t), cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&p.d_flag, p.h_flag, 0));
    k_fill<<<64, 256>>>(p.d_src, bytes, 7);
    k_fill<<<1, 256>>>(p.d_app, 4096, 9);
    CK(cudaGetLastError());
    CK(cudaMemcpy(p.h_src, p.d_src, bytes, cudaMemcpyDeviceToHost));
    const char *env = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    printf("queue-probe: %d SMs, full grid %d blocks of 1024 threads, %llu-byte copies, wait %.0f "
           "ms, CUDA_DEVICE_MAX_CONNECTIONS=%s, MPS %s\n",
           p.sms, p.full_blocks, (unsigned long long)bytes, wait_ms, env ? env : "(unset)",
           getenv("CUDA_MPS_PIPE_DIRECTORY") ? "client (CUDA_MPS_PIPE_DIRECTORY set)" : "not asked");
    int bad = 0;
    for (int m = 0; m < M_COUNT; m++) {
        if (only && strcmp(only, m_name[m])) continue;
        for (int full = 0; full < 2; full++)
            for (int app = 0; app < 2; app++) bad |= run_case(&p, m, full, app, wait_ms);
    }
    printf("queue-probe: %s\n", bad ? "a copy that completed wrote wrong data" : "OK");
    return bad ? 1 : 0;
}
