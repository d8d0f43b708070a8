/* Port channel over the dma transport, 2 to 8 ranks (GPUs of their own or shared).
 *
 *   cchan-run -n N --timeout 600 build/test/gpu/test_port_channel_gpu [--case NAME,...] [--list]
 *
 * Every rank owns two cchan_mem_alloc buffers of 4 GiB + 4 MiB (puts of 4 GiB + 4 KiB and offsets
 * beyond 4 GiB fit):
 *   L  source of this rank's puts: filled with a per-(case, rank, iteration) pattern;
 *   D  destination of the peer's puts: poisoned before each transfer, checked whole on the GPU.
 * One proxy (512-slot FIFO) serves every channel except the 4-slot ring case's, which has its own.
 * Cases run once per round of a round-robin pairing (every pair of ranks meets; put_sizes and
 * wait_timeout in the first round only); both ranks of a pair act at once (each puts to the
 * other), so every case runs both directions.
 */
#include <dirent.h>
#include <pthread.h>
#include <unistd.h>

#include "gpu_test.h"

#define PC_BUF_BYTES (4 * GT_GiB + 4 * GT_MiB)
#define PC_GUARD 64u

typedef struct pc_env {
    cchan_mem_t *L, *D, *peerD[GT_MAX_RANKS];
    uint8_t *l, *d;
    cchan_proxy_t *proxy;
    /* Port channels cannot be destroyed one by one: the semaphore sets they signal stay alive
     * until the proxies are stopped and destroyed. */
    cchan_sem_set_t *sets[256];
    int nsets;
} pc_env_t;

static pc_env_t g_pc;

/* Every rank's GPU UUID (pc_setup): which peers share this rank's GPU, so that each channel's path
 * can be checked. A channel between two GPUs staged through host memory deadlocked on H200s
 * (docs/port_channel.md), so a cross-GPU "dma staged" path fails the case. */
static unsigned char g_uuid[GT_MAX_RANKS][16];

static void pc_expect_path(gt_ctx_t *ctx, cchan_proxy_t *proxy, const cchan_port_channel_t *ch,
                           int peer) {
    const char *path = cchan_port_channel_path(proxy, ch);
    const int same = memcmp(g_uuid[ctx->rank], g_uuid[peer], sizeof g_uuid[0]) == 0;
    const char *want = same ? "dma staged (same GPU)" : "dma direct";
    GT_EXPECT(ctx, path != NULL && strcmp(path, want) == 0,
              "channel %u to peer %d (%s GPU): path '%s', want '%s'", ch->id, peer,
              same ? "the same" : "another", path ? path : "(null)", want);
}

static cchan_sem_set_t *pc_sems(gt_ctx_t *ctx, int count) {
    cchan_sem_set_t *set = NULL;
    GT_CCHAN(cchan_sem_set_create(ctx->comm, count, CCHAN_SEM_HOST_MAPPED, &set));
    if (g_pc.nsets == (int)(sizeof g_pc.sets / sizeof g_pc.sets[0])) {
        gt_log(ctx, "FATAL: too many semaphore sets for the test's list");
        gt_die();
    }
    g_pc.sets[g_pc.nsets++] = set;
    return set;
}

static cchan_port_channel_t pc_channel(gt_ctx_t *ctx, cchan_proxy_t *proxy, cchan_sem_set_t *set,
                                       int idx) {
    cchan_port_channel_t ch;
    GT_CCHAN(cchan_port_channel_create(proxy, CCHAN_TRANSPORT_DMA, set, gt_peer(ctx), idx,
                                       g_pc.peerD[gt_peer(ctx)], g_pc.L, &ch));
    pc_expect_path(ctx, proxy, &ch, gt_peer(ctx));
    return ch;
}

/* out: expected, flush_issued, flush_done, inbound. */
__global__ void k_pc_counters(cchan_port_channel_t ch, unsigned long long *out) {
    out[0] = *(volatile uint64_t *)ch.expected;
    out[1] = *(volatile uint64_t *)ch.flush_issued;
    out[2] = *(const volatile uint64_t *)ch.flush_done;
    out[3] = *(volatile uint64_t *)ch.inbound;
}

static void pc_counters(gt_ctx_t *ctx, const cchan_port_channel_t *ch, unsigned long long out[4]) {
    unsigned long long *dev;
    GT_CUDA(cudaMalloc((void **)&dev, 4 * sizeof *dev));
    GT_LAUNCH(ctx, k_pc_counters, 1, 1, *ch, dev);
    GT_CUDA(cudaMemcpyAsync(out, dev, 4 * sizeof *dev, cudaMemcpyDeviceToHost, ctx->stream));
    GT_SYNC(ctx);
    GT_CUDA(cudaFree(dev));
}

static void pc_expect_counters(gt_ctx_t *ctx, const char *what, const cchan_port_channel_t *ch,
                               unsigned long long expected, unsigned long long flushes,
                               unsigned long long inbound) {
    unsigned long long c[4];
    pc_counters(ctx, ch, c);
    GT_EXPECT(ctx, c[0] == expected && c[1] == flushes && c[2] == flushes && c[3] == inbound,
              "%s: expected/flush_issued/flush_done/inbound = %llu/%llu/%llu/%llu, want "
              "%llu/%llu/%llu/%llu",
              what, c[0], c[1], c[2], c[3], expected, flushes, flushes, inbound);
}

/* Device-side status of port-channel calls: the first nonzero return is kept. */
__device__ static inline void pc_note(unsigned long long *status, int st, uint32_t where) {
    if (st != 0) atomicCAS(status, 0ull, ((unsigned long long)where << 32) | (uint32_t)st);
}

static void pc_expect_status(gt_ctx_t *ctx, const unsigned long long *dev_status,
                             const char *what) {
    unsigned long long st = 0;
    GT_CUDA(cudaMemcpy(&st, dev_status, sizeof st, cudaMemcpyDeviceToHost));
    GT_EXPECT(ctx, st == 0, "%s: a port-channel call returned %d (%s) at step 0x%llx", what,
              (int)(uint32_t)st, cchan_strerror((int)(uint32_t)st), st >> 32);
}

/* The proxy's serving thread as the kernel sees it (/proc/self/task/<tid>: state, wait channel and
 * the system call it is blocked in, if any): running, it is polling for something that never
 * comes; sleeping in an ioctl, it is blocked inside a CUDA call. */
static void pc_log_proxy_threads(gt_ctx_t *ctx) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[320], comm[32] = "", stat[256] = "", wchan[64] = "", sys[128] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
        fclose(f);
        if (strncmp(comm, "cchan-proxy", 11) != 0) continue;
        const char *names[3] = {"stat", "wchan", "syscall"};
        char *outs[3] = {stat, wchan, sys};
        size_t sizes[3] = {sizeof stat, sizeof wchan, sizeof sys};
        for (int k = 0; k < 3; k++) {
            snprintf(path, sizeof path, "/proc/self/task/%s/%s", e->d_name, names[k]);
            if ((f = fopen(path, "r")) != NULL) {
                if (!fgets(outs[k], (int)sizes[k], f)) outs[k][0] = 0;
                fclose(f);
            }
            outs[k][strcspn(outs[k], "\n")] = 0;
        }
        const char *st = strrchr(stat, ')');
        gt_log(ctx, "proxy thread %s: state %c, wchan '%s', syscall '%s'", e->d_name,
               st && st[1] ? st[2] : '?', wchan, sys);
    }
    closedir(d);
}

typedef struct pc_stopper {
    int st, done; /* done: atomic */
    char msg[1024];
} pc_stopper_t;

static void *pc_stop_thread(void *arg) {
    pc_stopper_t *s = (pc_stopper_t *)arg;
    s->st = cchan_proxy_stop(g_pc.proxy, 0);
    snprintf(s->msg, sizeof s->msg, "%s", cchan_last_error());
    __atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* GT_SYNC, but when a kernel failed (a port-channel wait trapped at its deadline) it first says
 * where the proxy is: the state of its serving thread, then its report of the work left (per
 * channel, requests still in the FIFO and what the transport waits for; dma: the pending
 * completion, its signal and flush, its age and the last poll), which tells a copy that never
 * completed from a request that never reached the proxy. A stop that does not return within 10 s
 * means the serving thread is blocked (in a CUDA call). */
static void pc_sync(gt_ctx_t *ctx, const char *what) {
    cudaError_t e = cudaStreamSynchronize(ctx->stream);
    if (e == cudaSuccess) return;
    gt_log(ctx, "%s: the kernel failed (%s)", what, cudaGetErrorName(e));
    pc_log_proxy_threads(ctx);
    static pc_stopper_t s;
    pthread_t th;
    if (pthread_create(&th, NULL, pc_stop_thread, &s) == 0) {
        for (int i = 0; i < 1000 && !__atomic_load_n(&s.done, __ATOMIC_ACQUIRE); i++)
            usleep(10 * 1000);
        if (__atomic_load_n(&s.done, __ATOMIC_ACQUIRE))
            gt_log(ctx, "%s: proxy stop = %d (%s): %s", what, s.st, cchan_strerror(s.st), s.msg);
        else
            gt_log(ctx, "%s: proxy stop did not return within 10 s: its serving thread is blocked",
                   what);
    }
    gt_fatal_cuda("cudaStreamSynchronize", e, __FILE__, __LINE__);
}

/* ------------------------------------------------------------------ every operation, one thread */

#define OPS_ITERS 70

__host__ __device__ static inline void ops_geometry(int it, uint64_t *n, uint64_t *so,
                                                    uint64_t *dof) {
    const uint64_t sizes[8] = {1, 3, 17, 4095, 65537, GT_MiB + 7, 8 * GT_MiB + 1, 0};
    *n = sizes[it % 8];
    *so = 5 + (uint64_t)(it % 9) * 4096 + (uint64_t)(it % 3);
    *dof = PC_GUARD + (uint64_t)((it * 13) % 128);
}

/* Thread 0 issues every form of request in turn (variant it % 6), then waits for the peer's data;
 * the block checks it (ordering: visible when wait returns), re-poisons it and acks. */
__global__ void k_pc_ops(cchan_port_channel_t ch, uint8_t *l, uint8_t *d, int rank, int peer,
                         uint64_t tag, gt_result_t *r, unsigned long long *status) {
    const uint32_t tid = threadIdx.x, nt = blockDim.x;
    for (int it = 0; it < OPS_ITERS; it++) {
        uint64_t n, so, dof;
        ops_geometry(it, &n, &so, &dof);
        gt_dev_fill(l + so, n, gt_seed(tag, rank, it), 0, tid, nt);
        __syncthreads();
        if (tid == 0) {
            const uint32_t w = (uint32_t)it << 8;
            switch (it % 6) {
            case 0:
                pc_note(status, cchan_port_channel_put(&ch, dof, so, n), w | 1);
                pc_note(status, cchan_port_channel_signal(&ch), w | 2);
                break;
            case 1: pc_note(status, cchan_port_channel_put_signal(&ch, dof, so, n), w | 3); break;
            case 2:
                pc_note(status, cchan_port_channel_put_signal_flush(&ch, dof, so, n), w | 4);
                break;
            case 3: {
                uint64_t half = n / 2;
                pc_note(status, cchan_port_channel_put(&ch, dof, so, half), w | 5);
                pc_note(status, cchan_port_channel_put(&ch, dof + half, so + half, n - half),
                        w | 6);
                pc_note(status, cchan_port_channel_signal(&ch), w | 7);
                pc_note(status, cchan_port_channel_flush(&ch), w | 8);
                break;
            }
            case 4:
                pc_note(status, cchan_port_channel_put(&ch, dof, so, n), w | 9);
                pc_note(status, cchan_port_channel_flush(&ch), w | 10);
                pc_note(status, cchan_port_channel_signal(&ch), w | 11);
                break;
            default: { /* eight pieces, last first: one signal orders them all */
                uint64_t piece = (n + 7) / 8;
                for (int k = 7; k >= 0; k--) {
                    uint64_t a = (uint64_t)k * piece;
                    if (a >= n) continue;
                    uint64_t len = n - a < piece ? n - a : piece;
                    pc_note(status, cchan_port_channel_put(&ch, dof + a, so + a, len), w | 12);
                }
                pc_note(status, cchan_port_channel_signal(&ch), w | 13);
                break;
            }
            }
            pc_note(status, cchan_port_channel_wait(&ch), w | 14);
        }
        __syncthreads();
        const uint64_t base = (uint64_t)it << 32;
        gt_dev_check(d + dof, n, gt_seed(tag, peer, it), 0, base, tid, nt, r);
        gt_dev_check_byte(d + dof - PC_GUARD, PC_GUARD, GT_POISON, base | 0x80000000u, tid, nt, r);
        gt_dev_check_byte(d + dof + n, PC_GUARD, GT_POISON, base | 0x90000000u, tid, nt, r);
        __syncthreads();
        gt_dev_set(d + dof, n, GT_POISON, tid, nt);
        __syncthreads();
        if (tid == 0) {
            __threadfence_system();
            pc_note(status, cchan_port_channel_signal(&ch), ((uint32_t)it << 8) | 15);
            pc_note(status, cchan_port_channel_wait(&ch), ((uint32_t)it << 8) | 16);
        }
        __syncthreads();
    }
}

static void case_ops_ordering(gt_ctx_t *ctx) {
    const uint64_t tag = gt_hash_name("ops_ordering");
    cchan_sem_set_t *set = pc_sems(ctx, 1);
    cchan_port_channel_t ch = pc_channel(ctx, g_pc.proxy, set, 0);
    unsigned long long *status;
    GT_CUDA(cudaMalloc((void **)&status, sizeof *status));
    GT_CUDA(cudaMemset(status, 0, sizeof *status));
    gt_poison(ctx, g_pc.d, 16 * GT_MiB);
    gt_result_reset(ctx);
    GT_SYNC(ctx);
    gt_barrier(ctx);
    GT_LAUNCH(ctx, k_pc_ops, 1, 256, ch, g_pc.l, g_pc.d, ctx->rank, gt_peer(ctx), tag, ctx->res,
              status);
    GT_SYNC(ctx);
    gt_result_t r = gt_result_read(ctx);
    if (r.errors)
        gt_fail(ctx,
                "%llu bad bytes after wait; first: iteration %llu (variant %llu), byte 0x%llx "
                "(0x8/0x9 in bits 31..28: guard before/after)",
                r.errors, r.first >> 32, (r.first >> 32) % 6, r.first & 0xffffffffull);
    pc_expect_status(ctx, status, "ops");
    /* Flushes: variants 2, 3 and 4 flush once each. */
    unsigned long long flushes = 0;
    for (int it = 0; it < OPS_ITERS; it++) flushes += (it % 6 >= 2 && it % 6 <= 4);
    gt_barrier(ctx);
    pc_expect_counters(ctx, "after the ops loop", &ch, 2 * OPS_ITERS, flushes, 2 * OPS_ITERS);
    gt_check_buffer(ctx, g_pc.d, 16 * GT_MiB, 0, 0, 0, 0, "D after the loop (re-poisoned)");
    GT_CUDA(cudaFree(status));
}

/* ------------------------------------------------------------------ poll */

/* phase 0: poll before any signal; phase 1: three signals, flushed (so delivered); phase 2: four
 * polls (1,1,1,0); phase 3: a signal and a wait, then a poll (0). Ranks meet between phases. */
__global__ void k_pc_poll_phase(cchan_port_channel_t ch, int phase, unsigned long long *out) {
    if (phase == 0) {
        out[0] = (unsigned long long)cchan_port_channel_poll(&ch);
    } else if (phase == 1) {
        for (int i = 0; i < 3; i++)
            out[1] |= (unsigned long long)(cchan_port_channel_signal(&ch) != 0);
        out[1] |= (unsigned long long)(cchan_port_channel_flush(&ch) != 0)
                  << 1; /* signals delivered */
    } else if (phase == 2) {
        for (int i = 0; i < 4; i++) out[2 + i] = (unsigned long long)cchan_port_channel_poll(&ch);
        out[6] = *(volatile uint64_t *)ch.expected;
    } else {
        out[7] = (unsigned long long)cchan_port_channel_signal(&ch);
        out[8] = (unsigned long long)cchan_port_channel_wait(&ch);
        out[9] = (unsigned long long)cchan_port_channel_poll(&ch);
        out[10] = *(volatile uint64_t *)ch.expected;
    }
}

static void case_poll(gt_ctx_t *ctx) {
    cchan_sem_set_t *set = pc_sems(ctx, 1);
    cchan_port_channel_t ch = pc_channel(ctx, g_pc.proxy, set, 0);
    unsigned long long *dev;
    GT_CUDA(cudaMalloc((void **)&dev, 16 * sizeof *dev));
    GT_CUDA(cudaMemset(dev, 0, 16 * sizeof *dev));
    for (int phase = 0; phase < 4; phase++) {
        GT_LAUNCH(ctx, k_pc_poll_phase, 1, 1, ch, phase, dev);
        GT_SYNC(ctx);
        gt_barrier(ctx);
    }
    unsigned long long o[16];
    GT_CUDA(cudaMemcpy(o, dev, sizeof o, cudaMemcpyDeviceToHost));
    GT_EXPECT(ctx, o[0] == 0, "poll before any signal returned %llu", o[0]);
    GT_EXPECT(ctx, o[1] == 0, "signal/flush failed (bits %llu)", o[1]);
    GT_EXPECT(ctx, o[2] == 1 && o[3] == 1 && o[4] == 1 && o[5] == 0,
              "polls after 3 flushed signals returned %llu %llu %llu %llu, want 1 1 1 0", o[2],
              o[3], o[4], o[5]);
    GT_EXPECT(ctx, o[6] == 3, "expected after 3 polls: %llu", o[6]);
    GT_EXPECT(ctx, o[7] == 0 && o[8] == 0, "signal/wait returned %llu/%llu", o[7], o[8]);
    GT_EXPECT(ctx, o[9] == 0, "poll after the last wait returned %llu", o[9]);
    GT_EXPECT(ctx, o[10] == 4, "final expected %llu, want 4", o[10]);
    GT_CUDA(cudaFree(dev));
}

/* ------------------------------------------------------------------ flush, then overwrite */

/* put, flush, then the block overwrites the source at once, last bytes first (the copy reads them
 * last), then signal: the peer must have received the data from before the overwrite. */
__global__ void k_pc_flush_overwrite(cchan_port_channel_t ch, uint8_t *l, uint64_t dof, uint64_t so,
                                     uint64_t n, uint64_t seed_after, unsigned long long *status) {
    const uint32_t tid = threadIdx.x, nt = blockDim.x;
    if (tid == 0) {
        pc_note(status, cchan_port_channel_put(&ch, dof, so, n), 1);
        pc_note(status, cchan_port_channel_flush(&ch), 2);
    }
    __syncthreads();
    for (uint64_t k = tid; k < n; k += nt) {
        uint64_t i = so + n - 1 - k;
        l[i] = gt_pattern_byte(seed_after, i);
    }
    __syncthreads();
    if (tid == 0) {
        __threadfence_system();
        pc_note(status, cchan_port_channel_signal(&ch), 3);
        pc_note(status, cchan_port_channel_wait(&ch), 4);
    }
}

static void case_flush_overwrite(gt_ctx_t *ctx) {
    static const uint64_t sizes[] = {
        1, 4097, 64 * GT_KiB + 3, 16 * GT_MiB + 1, 256 * GT_MiB + 5, GT_GiB};
    const uint64_t tag = gt_hash_name("flush_overwrite");
    const int peer = gt_peer(ctx);
    cchan_sem_set_t *set = pc_sems(ctx, 1);
    cchan_port_channel_t ch = pc_channel(ctx, g_pc.proxy, set, 0);
    unsigned long long *status;
    GT_CUDA(cudaMalloc((void **)&status, sizeof *status));
    GT_CUDA(cudaMemset(status, 0, sizeof *status));
    int ok = 1;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0] && ok; si++) {
        for (int rep = 0; rep < 2 && ok; rep++) {
            const uint64_t n = sizes[si], so = 3 + 1024 * (uint64_t)rep, dof = 4096 + 7;
            const uint64_t it = si * 2 + rep;
            const uint64_t before = gt_seed(tag, ctx->rank, it),
                           after = gt_seed(tag + 1, ctx->rank, it);
            gt_fill(ctx, g_pc.l, so + n + 8, before);
            gt_poison(ctx, g_pc.d, dof + n + 2 * GT_MiB);
            GT_SYNC(ctx);
            gt_barrier(ctx);
            GT_LAUNCH(ctx, k_pc_flush_overwrite, 1, 1024, ch, g_pc.l, dof, so, n, after, status);
            GT_SYNC(ctx);
            gt_barrier(ctx);
            char what[128];
            snprintf(what, sizeof what, "put of %llu bytes, flush, overwrite of the source",
                     (unsigned long long)n);
            gt_check_buffer(ctx, g_pc.d, dof + n + 2 * GT_MiB, dof, n, gt_seed(tag, peer, it), so,
                            what);
            /* The overwrite did happen (else the case proves nothing). */
            uint8_t last = 0;
            GT_CUDA(cudaMemcpy(&last, g_pc.l + so + n - 1, 1, cudaMemcpyDeviceToHost));
            GT_EXPECT(ctx, last == gt_pattern_byte(after, so + n - 1),
                      "source was not overwritten");
            ok = gt_all_ok(ctx); /* stop together at the first failure on either rank */
        }
    }
    pc_expect_status(ctx, status, "flush_overwrite");
    GT_CUDA(cudaFree(status));
}

/* ------------------------------------------------------------------ 1 byte to 4 GiB + 4 KiB */

__global__ void k_pc_put_one(cchan_port_channel_t ch, uint64_t dof, uint64_t so, uint64_t n,
                             int fused, unsigned long long *status) {
    if (fused) {
        pc_note(status, cchan_port_channel_put_signal(&ch, dof, so, n), 1);
    } else {
        pc_note(status, cchan_port_channel_put(&ch, dof, so, n), 2);
        pc_note(status, cchan_port_channel_signal(&ch), 3);
    }
    pc_note(status, cchan_port_channel_wait(&ch), 4);
    pc_note(status, cchan_port_channel_flush(&ch), 5);
}

static void case_put_sizes(gt_ctx_t *ctx) {
    typedef struct {
        uint64_t n, so, dof;
    } put_t;
    static const put_t puts[] = {
        {1, 0, 0},
        {1, 7, 3},
        {3, 3, 7},
        {17, 4097, 13},
        {4095, 0, 0},
        {4095, 1, 2},
        {65537, 4096 + 1, 13},
        {GT_MiB + 7, 0, 0},
        {GT_MiB + 7, 5, 11},
        {64 * GT_MiB + 1, 3, 7},
        {GT_GiB, 0, 0},
        {GT_GiB + 3, GT_MiB + 5, 3},
        {2 * GT_GiB, 0, 0}, /* exactly one maximal trigger */
        {2 * GT_GiB + 1, 7, 0},
        {4 * GT_GiB + 4 * GT_KiB, 0, 0},
        {4 * GT_GiB + 4 * GT_KiB, GT_MiB + 5, 3},
        /* offsets beyond 4 GiB on both sides */
        {GT_MiB - 3, 4 * GT_GiB + 2 * GT_MiB + 1, 4 * GT_GiB + GT_MiB + 3},
    };
    const uint64_t tag = gt_hash_name("put_sizes");
    const int peer = gt_peer(ctx);
    cchan_sem_set_t *set = pc_sems(ctx, 1);
    cchan_port_channel_t ch = pc_channel(ctx, g_pc.proxy, set, 0);
    unsigned long long *status;
    GT_CUDA(cudaMalloc((void **)&status, sizeof *status));
    GT_CUDA(cudaMemset(status, 0, sizeof *status));
    int ok = 1;
    for (size_t k = 0; k < sizeof puts / sizeof puts[0] && ok; k++) {
        const put_t p = puts[k];
        uint64_t my_seed = gt_seed(tag, ctx->rank, k), peer_seed = gt_seed(tag, peer, k);
        gt_fill(ctx, g_pc.l, PC_BUF_BYTES, my_seed);
        gt_poison(ctx, g_pc.d, PC_BUF_BYTES);
        GT_SYNC(ctx);
        gt_barrier(ctx);
        double t0 = gt_now_ms();
        GT_LAUNCH(ctx, k_pc_put_one, 1, 1, ch, p.dof, p.so, p.n, (int)(k & 1), status);
        GT_SYNC(ctx);
        double ms = gt_now_ms() - t0;
        gt_barrier(ctx);
        char what[160];
        snprintf(what, sizeof what, "%s of %llu bytes, src offset %llu, dst offset %llu",
                 (k & 1) ? "put_signal" : "put+signal", (unsigned long long)p.n,
                 (unsigned long long)p.so, (unsigned long long)p.dof);
        gt_check_buffer(ctx, g_pc.d, PC_BUF_BYTES, p.dof, p.n, peer_seed, p.so, what);
        if (ctx->rank == 0 && p.n >= GT_GiB)
            gt_log(ctx,
                   "put_sizes: %s: %.2f ms (%.0f GB/s, both directions at once; includes "
                   "launch and signal)",
                   what, ms, (double)p.n / (ms * 1e6));
        ok = gt_all_ok(ctx); /* stop together at the first failure on either rank */
    }
    pc_expect_status(ctx, status, "put_sizes");
    GT_CUDA(cudaFree(status));
}

/* ------------------------------------------------------------------ several channels, one proxy */

#define MCH_CHANNELS 8
#define MCH_ITERS 100
#define MCH_STRIDE (8 * GT_MiB)

__host__ __device__ static inline void mch_geometry(uint32_t c, int it, uint64_t *off,
                                                    uint64_t *n) {
    const uint64_t sizes[4] = {1, 4097, 65537, GT_MiB + 3};
    *off = (uint64_t)c * MCH_STRIDE + PC_GUARD + c;
    *n = sizes[(it + c) % 4];
}

/* Block c drives channel c: put_signal (every 10th: put_signal_flush), wait for the peer's block c,
 * check, re-poison, ack. Eight producers share the proxy's FIFO; each channel's order must hold. */
__global__ void k_pc_multi(const cchan_port_channel_t *chs, uint8_t *l, uint8_t *d, int rank,
                           int peer, uint64_t tag, gt_result_t *r, unsigned long long *status) {
    const uint32_t c = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    const cchan_port_channel_t ch = chs[c];
    for (int it = 0; it < MCH_ITERS; it++) {
        uint64_t off, n;
        mch_geometry(c, it, &off, &n);
        gt_dev_fill(l + off, n, gt_seed(tag, rank, (uint64_t)it * 64 + c), 0, tid, nt);
        __syncthreads();
        if (tid == 0) {
            if (it % 10 == 9)
                pc_note(status, cchan_port_channel_put_signal_flush(&ch, off, off, n),
                        (c << 8) | 1);
            else
                pc_note(status, cchan_port_channel_put_signal(&ch, off, off, n), (c << 8) | 2);
            pc_note(status, cchan_port_channel_wait(&ch), (c << 8) | 3);
        }
        __syncthreads();
        const uint64_t base = ((uint64_t)c << 48) | ((uint64_t)it << 32);
        gt_dev_check(d + off, n, gt_seed(tag, peer, (uint64_t)it * 64 + c), 0, base, tid, nt, r);
        gt_dev_check_byte(d + off - 16, 16, GT_POISON, base | 0x80000000u, tid, nt, r);
        gt_dev_check_byte(d + off + n, 16, GT_POISON, base | 0x90000000u, tid, nt, r);
        __syncthreads();
        gt_dev_set(d + off, n, GT_POISON, tid, nt);
        __syncthreads();
        if (tid == 0) {
            __threadfence_system();
            pc_note(status, cchan_port_channel_signal(&ch), (c << 8) | 4);
            pc_note(status, cchan_port_channel_wait(&ch), (c << 8) | 5);
        }
        __syncthreads();
    }
}

static void case_multi_channel(gt_ctx_t *ctx) {
    const uint64_t tag = gt_hash_name("multi_channel");
    cchan_sem_set_t *set = pc_sems(ctx, MCH_CHANNELS);
    cchan_port_channel_t hch[MCH_CHANNELS], *dch;
    for (int c = 0; c < MCH_CHANNELS; c++) hch[c] = pc_channel(ctx, g_pc.proxy, set, c);
    GT_CUDA(cudaMalloc((void **)&dch, sizeof hch));
    GT_CUDA(cudaMemcpy(dch, hch, sizeof hch, cudaMemcpyHostToDevice));
    unsigned long long *status;
    GT_CUDA(cudaMalloc((void **)&status, sizeof *status));
    GT_CUDA(cudaMemset(status, 0, sizeof *status));
    gt_poison(ctx, g_pc.d, (MCH_CHANNELS + 1) * MCH_STRIDE);
    gt_result_reset(ctx);
    GT_SYNC(ctx);
    gt_barrier(ctx);
    GT_LAUNCH(ctx, k_pc_multi, MCH_CHANNELS, 256, dch, g_pc.l, g_pc.d, ctx->rank, gt_peer(ctx), tag,
              ctx->res, status);
    GT_SYNC(ctx);
    gt_result_t r = gt_result_read(ctx);
    if (r.errors)
        gt_fail(ctx,
                "%llu bad bytes; first: channel %llu, iteration %llu, byte 0x%llx (0x8/0x9 in "
                "bits 31..28: guard before/after)",
                r.errors, r.first >> 48, (r.first >> 32) & 0xffff, r.first & 0xffffffffull);
    pc_expect_status(ctx, status, "multi_channel");
    gt_barrier(ctx);
    for (int c = 0; c < MCH_CHANNELS && ctx->case_ok; c++) {
        char what[64];
        snprintf(what, sizeof what, "channel %d", c);
        pc_expect_counters(ctx, what, &hch[c], 2 * MCH_ITERS, MCH_ITERS / 10, 2 * MCH_ITERS);
    }
    GT_CUDA(cudaFree(dch));
    GT_CUDA(cudaFree(status));
}

/* ------------------------------------------------------------------ a ring of 4 slots */

#define RING_SLOTS 4
#define RING_CHANNELS 4
#define RING_REQUESTS 25000 /* per channel: 10^5 requests per rank in all */
#define RING_SIGNALS (RING_REQUESTS - (RING_REQUESTS + 3) / 4)

/* Blocks 0..3: thread 0 pushes RING_REQUESTS requests on channel b (every 4th a 64-byte put, the
 * rest signals), then flushes. Blocks 4..7: thread 0 waits for every signal of channel b - 4. */
__global__ void k_pc_ring(const cchan_port_channel_t *chs, unsigned long long *status) {
    if (threadIdx.x != 0) return;
    const uint32_t b = blockIdx.x;
    if (b < RING_CHANNELS) {
        const cchan_port_channel_t ch = chs[b];
        for (uint32_t k = 0; k < RING_REQUESTS; k++) {
            if (k % 4 == 0) {
                uint64_t off = (uint64_t)b * 4096 + ((k / 4) % 64) * 64;
                pc_note(status, cchan_port_channel_put(&ch, off, off, 64), (b << 8) | 1);
            } else {
                pc_note(status, cchan_port_channel_signal(&ch), (b << 8) | 2);
            }
        }
        pc_note(status, cchan_port_channel_flush(&ch), (b << 8) | 3);
    } else {
        const cchan_port_channel_t ch = chs[b - RING_CHANNELS];
        for (uint32_t s = 0; s < RING_SIGNALS; s++)
            pc_note(status, cchan_port_channel_wait(&ch), (b << 8) | 4);
    }
}

static void case_ring4(gt_ctx_t *ctx) {
    const uint64_t tag = gt_hash_name("ring4");
    cchan_proxy_config_t cfg = CCHAN_PROXY_CONFIG_INIT;
    cfg.fifo_slots = RING_SLOTS;
    cchan_proxy_t *proxy;
    GT_CCHAN(cchan_proxy_create(ctx->comm, &cfg, &proxy));
    GT_CCHAN(cchan_proxy_start(proxy));
    cchan_sem_set_t *set = pc_sems(ctx, RING_CHANNELS);
    cchan_port_channel_t hch[RING_CHANNELS], *dch;
    for (int c = 0; c < RING_CHANNELS; c++) hch[c] = pc_channel(ctx, proxy, set, c);
    GT_EXPECT(ctx, hch[0].fifo.size == RING_SLOTS, "FIFO has %u slots, asked for %d",
              hch[0].fifo.size, RING_SLOTS);
    GT_CUDA(cudaMalloc((void **)&dch, sizeof hch));
    GT_CUDA(cudaMemcpy(dch, hch, sizeof hch, cudaMemcpyHostToDevice));
    unsigned long long *status;
    GT_CUDA(cudaMalloc((void **)&status, sizeof *status));
    GT_CUDA(cudaMemset(status, 0, sizeof *status));
    const uint64_t region = RING_CHANNELS * 4096;
    gt_fill(ctx, g_pc.l, region, gt_seed(tag, ctx->rank, 0));
    gt_poison(ctx, g_pc.d, region + GT_MiB);
    GT_SYNC(ctx);
    gt_barrier(ctx);
    double t0 = gt_now_ms();
    GT_LAUNCH(ctx, k_pc_ring, 2 * RING_CHANNELS, 32, dch, status);
    GT_SYNC(ctx);
    double ms = gt_now_ms() - t0;
    gt_barrier(ctx);
    pc_expect_status(ctx, status, "ring4");
    gt_check_buffer(ctx, g_pc.d, region + GT_MiB, 0, region, gt_seed(tag, gt_peer(ctx), 0), 0,
                    "puts through the 4-slot ring");
    for (int c = 0; c < RING_CHANNELS && ctx->case_ok; c++) {
        char what[64];
        snprintf(what, sizeof what, "ring channel %d", c);
        pc_expect_counters(ctx, what, &hch[c], RING_SIGNALS, 1, RING_SIGNALS);
    }
    if (ctx->rank == 0)
        gt_log(ctx,
               "ring4: %d requests per rank through a %d-slot FIFO in %.1f ms (%.2f M requests/s)",
               RING_CHANNELS * RING_REQUESTS, RING_SLOTS, ms,
               RING_CHANNELS * RING_REQUESTS / (ms * 1e3));
    gt_barrier(ctx);
    int st = cchan_proxy_stop(proxy, 10000);
    GT_EXPECT(ctx, st == 0, "cchan_proxy_stop of the ring's proxy = %d (%s): %s", st,
              cchan_strerror(st), cchan_last_error());
    GT_CCHAN(cchan_proxy_destroy(proxy));
    GT_CUDA(cudaFree(dch));
    GT_CUDA(cudaFree(status));
}

/* ------------------------------------------------------------------ CUDA graph replay */

#define GR_REPLAYS 1000
#define GR_N (65536 + 7)
#define GR_SO 5u
#define GR_DO (PC_GUARD + 3u)

/* One replay: fill, put_signal, wait for the peer's data, check it, re-poison, signal/wait as the
 * ack, flush, count the replay (the counter lives in device memory). */
__global__ void k_pc_graph(cchan_port_channel_t ch, uint8_t *l, uint8_t *d,
                           unsigned long long *replays, int rank, int peer, uint64_t tag,
                           gt_result_t *r, unsigned long long *status) {
    const uint32_t tid = threadIdx.x, nt = blockDim.x;
    const uint64_t i = *(volatile unsigned long long *)replays;
    gt_dev_fill(l + GR_SO, GR_N, gt_seed(tag, rank, i), 0, tid, nt);
    __syncthreads();
    if (tid == 0) {
        pc_note(status, cchan_port_channel_put_signal(&ch, GR_DO, GR_SO, GR_N), 1);
        pc_note(status, cchan_port_channel_wait(&ch), 2);
    }
    __syncthreads();
    gt_dev_check(d + GR_DO, GR_N, gt_seed(tag, peer, i), 0, i << 32, tid, nt, r);
    gt_dev_check_byte(d + GR_DO - PC_GUARD, PC_GUARD, GT_POISON, (i << 32) | 0x80000000u, tid, nt,
                      r);
    gt_dev_check_byte(d + GR_DO + GR_N, PC_GUARD, GT_POISON, (i << 32) | 0x90000000u, tid, nt, r);
    __syncthreads();
    gt_dev_set(d + GR_DO, GR_N, GT_POISON, tid, nt);
    __syncthreads();
    if (tid == 0) {
        __threadfence_system();
        pc_note(status, cchan_port_channel_signal(&ch), 3);
        pc_note(status, cchan_port_channel_wait(&ch), 4);
        pc_note(status, cchan_port_channel_flush(&ch), 5);
        *replays = i + 1;
    }
}

static void case_graph_replay(gt_ctx_t *ctx) {
    const uint64_t tag = gt_hash_name("graph_replay");
    cchan_sem_set_t *set = pc_sems(ctx, 1);
    cchan_port_channel_t ch = pc_channel(ctx, g_pc.proxy, set, 0);
    unsigned long long *replays, *status;
    GT_CUDA(cudaMalloc((void **)&replays, sizeof *replays));
    GT_CUDA(cudaMemset(replays, 0, sizeof *replays));
    GT_CUDA(cudaMalloc((void **)&status, sizeof *status));
    GT_CUDA(cudaMemset(status, 0, sizeof *status));
    gt_poison(ctx, g_pc.d, 2 * GT_MiB);
    gt_result_reset(ctx);
    GT_SYNC(ctx);

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    GT_CUDA(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
    k_pc_graph<<<1, 512, 0, ctx->stream>>>(ch, g_pc.l, g_pc.d, replays, ctx->rank, gt_peer(ctx),
                                           tag, ctx->res, status);
    cudaError_t launch_err = cudaGetLastError();
    GT_CUDA(cudaStreamEndCapture(ctx->stream, &graph));
    GT_CUDA(launch_err);
    GT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    gt_barrier(ctx);
    double t0 = gt_now_ms();
    for (int k = 0; k < GR_REPLAYS; k++) GT_CUDA(cudaGraphLaunch(exec, ctx->stream));
    GT_SYNC(ctx);
    double ms = gt_now_ms() - t0;

    gt_result_t r = gt_result_read(ctx);
    if (r.errors)
        gt_fail(ctx,
                "%llu bad bytes; first: replay %llu, byte 0x%llx (0x8/0x9 in bits 31..28: "
                "guard before/after)",
                r.errors, r.first >> 32, r.first & 0xffffffffull);
    pc_expect_status(ctx, status, "graph replay");
    unsigned long long n = 0;
    GT_CUDA(cudaMemcpy(&n, replays, sizeof n, cudaMemcpyDeviceToHost));
    GT_EXPECT(ctx, n == GR_REPLAYS, "replay counter %llu, want %d", n, GR_REPLAYS);
    gt_barrier(ctx);
    pc_expect_counters(ctx, "after 1000 replays", &ch, 2 * GR_REPLAYS, GR_REPLAYS, 2 * GR_REPLAYS);
    gt_check_buffer(ctx, g_pc.d, 2 * GT_MiB, 0, 0, 0, 0, "D after the last replay (re-poisoned)");
    if (ctx->rank == 0) gt_log(ctx, "graph_replay: %d replays in %.1f ms", GR_REPLAYS, ms);
    GT_CUDA(cudaGraphExecDestroy(exec));
    GT_CUDA(cudaGraphDestroy(graph));
    GT_CUDA(cudaFree(replays));
    GT_CUDA(cudaFree(status));
}

/* ------------------------------------------------------------------ flushes on many channels
 *
 * Every dma channel copies on a stream of its own; a process gets only a few hardware work queues
 * (fewer still as an MPS client: the server's clients share one pool), so most of those streams
 * share a queue with the stream of the kernel that waits for their flushes. One thread puts 4 KiB
 * (above the direct-store limit, so the copy engine moves it) on each of FM_CHANNELS channels and
 * flushes each: a flush whose copy is queued behind the waiting kernel would never complete (the
 * device deadline names it). No ring, no peer kernel involved. */

#define FM_CHANNELS 96
#define FM_BYTES 4096u
#define FM_STRIDE (64 * GT_KiB)

__global__ void k_pc_flush_many(const cchan_port_channel_t *chs, int n,
                                unsigned long long *status) {
    for (int c = 0; c < n; c++) {
        const uint64_t off = (uint64_t)c * FM_STRIDE;
        pc_note(status, cchan_port_channel_put(&chs[c], off, off, FM_BYTES), (c << 8) | 1);
        pc_note(status, cchan_port_channel_flush(&chs[c]), (c << 8) | 2);
    }
}

static void case_flush_many_channels(gt_ctx_t *ctx) {
    const uint64_t tag = gt_hash_name("flush_many_channels");
    cchan_sem_set_t *set = pc_sems(ctx, FM_CHANNELS);
    cchan_port_channel_t *hch = (cchan_port_channel_t *)calloc(FM_CHANNELS, sizeof *hch), *dch;
    for (int c = 0; c < FM_CHANNELS; c++) hch[c] = pc_channel(ctx, g_pc.proxy, set, c);
    GT_CUDA(cudaMalloc((void **)&dch, FM_CHANNELS * sizeof *hch));
    GT_CUDA(cudaMemcpy(dch, hch, FM_CHANNELS * sizeof *hch, cudaMemcpyHostToDevice));
    unsigned long long *status;
    GT_CUDA(cudaMalloc((void **)&status, sizeof *status));
    GT_CUDA(cudaMemset(status, 0, sizeof *status));
    const uint64_t region = (uint64_t)FM_CHANNELS * FM_STRIDE;
    gt_fill(ctx, g_pc.l, region, gt_seed(tag, ctx->rank, 0));
    gt_poison(ctx, g_pc.d, region);
    GT_SYNC(ctx);
    gt_barrier(ctx);
    GT_LAUNCH(ctx, k_pc_flush_many, 1, 1, dch, FM_CHANNELS, status);
    GT_SYNC(ctx);
    gt_barrier(ctx);
    pc_expect_status(ctx, status, "flush_many_channels");
    for (int c = 0; c < FM_CHANNELS && ctx->case_ok; c++) {
        char what[64];
        snprintf(what, sizeof what, "channel %d's 4 KiB", c);
        gt_check_buffer(ctx, g_pc.d + (uint64_t)c * FM_STRIDE, FM_STRIDE, 0, FM_BYTES,
                        gt_seed(tag, gt_peer(ctx), 0), (uint64_t)c * FM_STRIDE, what);
    }
    GT_CUDA(cudaFree(dch));
    GT_CUDA(cudaFree(status));
    free(hch);
}

/* ------------------------------------------------------------------ a flush beside a full grid
 *
 * The waiting kernel fills every SM (blocks of 1024 threads, as many as fit): block 0 puts and
 * flushes, every other block spins until block 0 is done. Between two buffers of one GPU a plain
 * cudaMemcpyAsync is a copy kernel, which could not start beside this grid, so the flush never
 * completed (the ring's hang where ranks share a GPU); the dma transport stages such copies
 * through host memory, which the copy engines move whatever the SMs run. Across GPUs the copy
 * engines carry the copy anyway. A flush that never completes traps at the device deadline. */

__global__ void k_pc_full_grid(cchan_port_channel_t ch, uint64_t bytes, unsigned *done,
                               unsigned long long *status) {
    if (threadIdx.x == 0) {
        if (blockIdx.x == 0) {
            pc_note(status, cchan_port_channel_put(&ch, 0, 0, bytes), 1);
            pc_note(status, cchan_port_channel_flush(&ch), 2);
            atomicExch(done, 1u);
        } else {
            while (atomicAdd(done, 0u) == 0u) {}
        }
    }
    __syncthreads();
}

static void case_flush_beside_full_grid(gt_ctx_t *ctx) {
    static const uint64_t sizes[] = {4096, 9 * GT_MiB + 12};
    const uint64_t tag = gt_hash_name("flush_beside_full_grid");
    cchan_port_channel_t ch = pc_channel(ctx, g_pc.proxy, pc_sems(ctx, 1), 0);
    int sms = 0, per_sm = 0;
    GT_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ctx->device));
    GT_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_pc_full_grid, 1024, 0));
    const int blocks = sms * (per_sm > 0 ? per_sm : 1);
    unsigned *done;
    unsigned long long *status;
    GT_CUDA(cudaMalloc((void **)&done, sizeof *done));
    GT_CUDA(cudaMalloc((void **)&status, sizeof *status));
    GT_CUDA(cudaMemset(status, 0, sizeof *status));
    for (int i = 0; i < 2 && ctx->case_ok; i++) {
        const uint64_t n = sizes[i];
        gt_fill(ctx, g_pc.l, n, gt_seed(tag, ctx->rank, i));
        gt_poison(ctx, g_pc.d, n + GT_MiB);
        GT_CUDA(cudaMemset(done, 0, sizeof *done));
        GT_SYNC(ctx);
        gt_barrier(ctx);
        GT_LAUNCH(ctx, k_pc_full_grid, blocks, 1024, ch, n, done, status);
        GT_SYNC(ctx);
        gt_barrier(ctx);
        pc_expect_status(ctx, status, "flush_beside_full_grid");
        gt_check_buffer(ctx, g_pc.d, n + GT_MiB, 0, n, gt_seed(tag, gt_peer(ctx), i), 0,
                        "D after a put flushed beside a full grid");
    }
    if (ctx->rank == 0) gt_log(ctx, "flush_beside_full_grid: %d blocks of 1024 threads", blocks);
    GT_CUDA(cudaFree(done));
    GT_CUDA(cudaFree(status));
}

/* ------------------------------------------------------------------ the ring's port-channel
 * traffic
 *
 * The port channels of cchan_coll's PORT_RING, without the ring's reductions, credits or kernels:
 * two registrations per rank of memory from cudaMalloc (cchan_mem_register, as cchan_coll_register
 * does: A the send buffer, B the recv buffer), per lane (block) b a channel of each to the next
 * rank on semaphore b ("scratch": into the peer's D, which stands for the coll's cchan_mem_alloc
 * scratch) and nb + b ("self": into the peer's registration of the same buffer) of the
 * registration's set, and the same to the previous rank for the waits (with two ranks the same
 * channels carry both ways).
 * Each call, block b: put_signal A.scratch, wait A.scratch from prev, put_signal B.self, wait
 * B.self from prev, then flush B.self, A.scratch and B.scratch (in place: A for both, two
 * flushes), as the ring's AllReduce ends. Sizes below and above the direct-store limit, 1 or
 * RL_LANES lanes, RL_CALLS calls. A flush that never completes traps at the device deadline
 * ("waiting for a flush of port channel ..."). */

#define RL_LANES 8
#define RL_CALLS 240
#define RL_SLOT (1 * GT_MiB)

typedef struct rl_lane {
    cchan_port_channel_t to_scratch, to_self, from_scratch, from_self;
} rl_lane_t;

/* The registrations live until teardown: the proxy's channels keep using their mappings. They are
 * made by the case's first run and reused by every later one (--repeat), which would otherwise
 * add 32 channels a run to a proxy that serves at most 4096. */
typedef struct rl_reg {
    void *buf;
    cchan_mem_t *mem, *peers[GT_MAX_RANKS];
    rl_lane_t *lanes; /* device copy of the lanes' channels */
} rl_reg_t;
static rl_reg_t g_rl[2];
static int g_rl_n;

__global__ void k_pc_ring_lanes(const rl_lane_t *A, const rl_lane_t *B, uint64_t bytes,
                                unsigned long long *status) {
    if (threadIdx.x != 0) return;
    const uint32_t b = blockIdx.x;
    const rl_lane_t *ls = &A[b], *lr = &B[b];
    const uint64_t off = (uint64_t)b * RL_SLOT;
    pc_note(status, cchan_port_channel_put_signal(&ls->to_scratch, off, off, bytes), (b << 8) | 1);
    pc_note(status, cchan_port_channel_wait(&ls->from_scratch), (b << 8) | 2);
    pc_note(status, cchan_port_channel_put_signal(&lr->to_self, off, off, bytes), (b << 8) | 3);
    pc_note(status, cchan_port_channel_wait(&lr->from_self), (b << 8) | 4);
    pc_note(status, cchan_port_channel_flush(&lr->to_self), (b << 8) | 5);
    pc_note(status, cchan_port_channel_flush(&ls->to_scratch), (b << 8) | 6);
    if (lr != ls) pc_note(status, cchan_port_channel_flush(&lr->to_scratch), (b << 8) | 7);
}

/* A registration of RL_LANES slots from cudaMalloc: lanes to next and from prev. */
static rl_lane_t *rl_register(gt_ctx_t *ctx) {
    const int next = gt_next(ctx), prev = gt_prev(ctx);
    if (g_rl_n == (int)(sizeof g_rl / sizeof g_rl[0])) {
        gt_log(ctx, "FATAL: ring_lanes: more registrations than the test keeps");
        gt_die();
    }
    rl_reg_t *g = &g_rl[g_rl_n++];
    GT_CUDA(cudaMalloc(&g->buf, RL_LANES * RL_SLOT));
    GT_CUDA(cudaMemset(g->buf, 0x5A, RL_LANES * RL_SLOT));
    GT_CCHAN(cchan_mem_register(ctx->comm, g->buf, RL_LANES * RL_SLOT, 0, &g->mem));
    GT_CCHAN(cchan_mem_exchange(ctx->comm, g->mem, g->peers));
    cchan_sem_set_t *set = pc_sems(ctx, 2 * RL_LANES);
    rl_lane_t h[RL_LANES], *d;
    for (int b = 0; b < RL_LANES; b++) {
        GT_CCHAN(cchan_port_channel_create(g_pc.proxy, CCHAN_TRANSPORT_DMA, set, next, b,
                                           g_pc.peerD[next], g->mem, &h[b].to_scratch));
        GT_CCHAN(cchan_port_channel_create(g_pc.proxy, CCHAN_TRANSPORT_DMA, set, next, RL_LANES + b,
                                           g->peers[next], g->mem, &h[b].to_self));
        if (prev == next) {
            h[b].from_scratch = h[b].to_scratch;
            h[b].from_self = h[b].to_self;
        } else {
            GT_CCHAN(cchan_port_channel_create(g_pc.proxy, CCHAN_TRANSPORT_DMA, set, prev, b,
                                               g_pc.peerD[prev], g->mem, &h[b].from_scratch));
            GT_CCHAN(cchan_port_channel_create(g_pc.proxy, CCHAN_TRANSPORT_DMA, set, prev,
                                               RL_LANES + b, g->peers[prev], g->mem,
                                               &h[b].from_self));
        }
        pc_expect_path(ctx, g_pc.proxy, &h[b].to_scratch, next);
        pc_expect_path(ctx, g_pc.proxy, &h[b].to_self, next);
        pc_expect_path(ctx, g_pc.proxy, &h[b].from_scratch, prev);
        pc_expect_path(ctx, g_pc.proxy, &h[b].from_self, prev);
    }
    GT_CUDA(cudaMalloc((void **)&d, sizeof h));
    GT_CUDA(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    g->lanes = d;
    return d;
}

static void case_ring_lanes(gt_ctx_t *ctx) {
    static const uint64_t sizes[] = {128, 512, 4096, 256 * GT_KiB, RL_SLOT};
    if (g_rl_n == 0) {
        rl_register(ctx);
        rl_register(ctx);
    }
    rl_lane_t *A = g_rl[0].lanes, *B = g_rl[1].lanes;
    unsigned long long *status;
    GT_CUDA(cudaMalloc((void **)&status, sizeof *status));
    GT_CUDA(cudaMemset(status, 0, sizeof *status));
    gt_barrier(ctx);
    double t0 = gt_now_ms();
    for (int call = 0; call < RL_CALLS; call++) {
        const uint64_t bytes = sizes[call % 5];
        const int lanes = (call / 5) % 2 ? RL_LANES : 1, in_place = (call / 10) % 2;
        GT_LAUNCH(ctx, k_pc_ring_lanes, lanes, 32, A, in_place ? A : B, bytes, status);
    }
    pc_sync(ctx, "ring_lanes");
    double ms = gt_now_ms() - t0;
    gt_barrier(ctx);
    pc_expect_status(ctx, status, "ring_lanes");
    if (ctx->rank == 0)
        gt_log(ctx, "ring_lanes: %d calls (ring of %d ranks) in %.1f ms", RL_CALLS, ctx->nranks,
               ms);
    GT_CUDA(cudaFree(status));
}

/* ------------------------------------------------------------------ soak
 *
 * Many lanes (one block each), two channels per lane (data D on semaphore b, credit K on lanes + b,
 * both into the partner's D buffer), random sizes (1 B to CCHAN_PC_SOAK_MAX_BYTES, default 64 MiB,
 * log-uniform), every request form, for CCHAN_PC_SOAK_SECONDS (default 5; the lead's long runs
 * set it), with CCHAN_PC_SOAK_LANES blocks (default 8, at most 32). In each block warp 0 sends:
 * message k goes to slot k % 2 of the lane's region in the partner's D at a random misalignment,
 * after the credit for message k - 2 and a flush (the source slot is reused); warp 1 receives:
 * waits (or polls), checks every byte and 64 guard bytes on each side, re-poisons them, returns a
 * credit. Kernels of SOAK_QUEUE epochs are queued back to back before the host waits, as the ring
 * does (a proxy whose copies queue behind the application's kernels hangs here). After every group
 * each rank checks every channel's counters; a lost signal or flush traps at the device deadline,
 * whose diagnostic names the channel's diag id (the case logs lane -> diag ids first) and the
 * expected and completed counts. */

#define SOAK_MAX_LANES 32
#define SOAK_GUARD 64u
#define SOAK_MSGS 16u /* messages per lane per kernel */
#define SOAK_QUEUE 4  /* kernels queued before the host waits */

typedef struct soak_lane {
    cchan_port_channel_t data, credit;
} soak_lane_t;

typedef struct soak_geom {
    uint64_t bytes, off; /* off: from the start of the slot */
    uint32_t form, slot;
} soak_geom_t;

__host__ __device__ static inline soak_geom_t soak_geom(uint64_t tag, int from, int lane,
                                                        uint64_t k, uint64_t max_bytes) {
    uint64_t h = gt_mix64(gt_seed(tag, (uint64_t)from, k) ^ ((uint64_t)lane << 40));
    int bits = 0;
    while ((1ull << (bits + 1)) <= max_bytes) bits++;
    uint64_t n = 1ull << (h % (uint64_t)(bits + 1));
    n += gt_mix64(h) % n;
    soak_geom_t g;
    g.bytes = n > max_bytes ? max_bytes : n;
    g.off = SOAK_GUARD + (h >> 20) % 16;
    g.form = (uint32_t)((h >> 28) % 6);
    g.slot = (uint32_t)(k % 2);
    return g;
}

__device__ static inline uint64_t soak_data_seed(uint64_t tag, int from, int lane, uint64_t k) {
    return gt_seed(tag ^ 0x5c5c5c5cull, (uint64_t)from * 64 + (uint64_t)lane, k);
}

/* Thread 0 of the sending warp: message k in its form (the source is filled and fenced). */
__device__ static inline void soak_send(const soak_lane_t *ln, soak_geom_t g, uint64_t so,
                                        uint64_t dof, uint32_t w, unsigned long long *flushes,
                                        unsigned long long *status) {
    const int b = (int)blockIdx.x;
    __threadfence_system();
    const cchan_port_channel_t *ch = &ln->data;
    switch (g.form) {
    case 0:
        pc_note(status, cchan_port_channel_put(ch, dof, so, g.bytes), w | 3);
        pc_note(status, cchan_port_channel_signal(ch), w | 4);
        break;
    case 1: pc_note(status, cchan_port_channel_put_signal(ch, dof, so, g.bytes), w | 5); break;
    case 2:
        pc_note(status, cchan_port_channel_put_signal_flush(ch, dof, so, g.bytes), w | 6);
        flushes[b]++;
        break;
    case 3:
        pc_note(status, cchan_port_channel_put(ch, dof, so, g.bytes), w | 7);
        pc_note(status, cchan_port_channel_flush(ch), w | 8);
        flushes[b]++;
        pc_note(status, cchan_port_channel_signal(ch), w | 9);
        break;
    case 4: {
        const uint64_t a = g.bytes / 3, h = g.bytes / 2;
        pc_note(status, cchan_port_channel_put(ch, dof, so, a), w | 10);
        pc_note(status, cchan_port_channel_put(ch, dof + a, so + a, h - a), w | 11);
        pc_note(status, cchan_port_channel_put_signal(ch, dof + h, so + h, g.bytes - h), w | 12);
        break;
    }
    default:
        pc_note(status, cchan_port_channel_flush(ch), w | 13);
        flushes[b]++;
        pc_note(status, cchan_port_channel_put_signal(ch, dof, so, g.bytes), w | 14);
        break;
    }
}

/* status: first failing call (lane << 16 | step << 8 in the high word); flushes[b]: data-channel
 * flushes so far; bad[b]: bytes wrong (first message in bad[lanes + b]). */
__global__ void k_pc_soak(const soak_lane_t *lanes, uint8_t *l, uint8_t *d, uint64_t region,
                          uint64_t slot_bytes, uint64_t max_bytes, uint64_t tag, int rank, int peer,
                          uint64_t k0, uint32_t msgs, int last, unsigned long long *flushes,
                          unsigned long long *bad, gt_result_t *res, unsigned long long *status) {
    const int b = (int)blockIdx.x, warp = (int)(threadIdx.x / 32), t = (int)(threadIdx.x % 32);
    const soak_lane_t *ln = &lanes[b];
    uint8_t *src0 = l + (uint64_t)b * region, *dst0 = d + (uint64_t)b * region;
    if (warp == 0) {
        for (uint64_t k = k0; k < k0 + msgs; k++) {
            const soak_geom_t g = soak_geom(tag, rank, b, k, max_bytes);
            const uint64_t so = (uint64_t)b * region + g.slot * slot_bytes + g.off, dof = so;
            const uint32_t w = ((uint32_t)b << 16) | (uint32_t)(k - k0) << 4;
            if (t == 0 && k >= 2) {
                pc_note(status, cchan_port_channel_wait(&ln->credit), w | 1);
                pc_note(status, cchan_port_channel_flush(&ln->data), w | 2);
                flushes[b]++;
            }
            __syncwarp();
            gt_dev_fill(src0 + g.slot * slot_bytes + g.off, g.bytes,
                        soak_data_seed(tag, rank, b, k), 0, (uint32_t)t, 32);
            __syncwarp();
            if (t == 0) soak_send(ln, g, so, dof, w, flushes, status);
            __syncwarp();
        }
        if (t == 0 && last) {
            /* The last two credits, and a flush: every counter settles. */
            const uint64_t end = k0 + msgs;
            for (uint64_t k = end >= 2 ? end - 2 : 0; k < end; k++)
                pc_note(status, cchan_port_channel_wait(&ln->credit), ((uint32_t)b << 16) | 15);
            pc_note(status, cchan_port_channel_flush(&ln->data), ((uint32_t)b << 16) | 15);
            flushes[b]++;
        }
    } else if (warp == 1) {
        for (uint64_t k = k0; k < k0 + msgs; k++) {
            const soak_geom_t g = soak_geom(tag, peer, b, k, max_bytes);
            uint8_t *at = dst0 + g.slot * slot_bytes + g.off;
            const uint32_t w = ((uint32_t)b << 16) | (uint32_t)(k - k0) << 4;
            if (t == 0) {
                /* Every third message polled for a while; then a wait, which has the deadline. */
                int got = 0;
                for (int i = 0; k % 3 == 2 && i < 4096 && !got; i++)
                    got = cchan_port_channel_poll(&ln->data);
                if (!got) pc_note(status, cchan_port_channel_wait(&ln->data), w | 1);
            }
            __syncwarp();
            unsigned long long nb =
                gt_dev_check(at, g.bytes, soak_data_seed(tag, peer, b, k), 0, 0, (uint32_t)t, 32,
                             res) +
                gt_dev_check_byte(at - SOAK_GUARD, SOAK_GUARD, GT_POISON, 0, (uint32_t)t, 32, res) +
                gt_dev_check_byte(at + g.bytes, SOAK_GUARD, GT_POISON, 0, (uint32_t)t, 32, res);
            if (nb) {
                atomicAdd(&bad[b], nb);
                atomicCAS(&bad[SOAK_MAX_LANES + b], 0ull, k + 1);
            }
            __syncwarp();
            gt_dev_set(at - SOAK_GUARD, g.bytes + 2 * SOAK_GUARD, (uint8_t)GT_POISON, (uint32_t)t,
                       32);
            __syncwarp();
            if (t == 0) {
                __threadfence_system();
                pc_note(status, cchan_port_channel_signal(&ln->credit), w | 2);
            }
        }
        if (t == 0 && last)
            pc_note(status, cchan_port_channel_flush(&ln->credit), ((uint32_t)b << 16) | 3);
    }
}

static uint64_t soak_env(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 0) : dflt;
}

static void case_soak(gt_ctx_t *ctx) {
    const uint64_t tag = gt_hash_name("soak");
    const double seconds = (double)soak_env("CCHAN_PC_SOAK_SECONDS", 5);
    const uint64_t max_bytes = soak_env("CCHAN_PC_SOAK_MAX_BYTES", 64 * GT_MiB);
    const int nl = (int)soak_env("CCHAN_PC_SOAK_LANES", 8);
    const uint64_t slot_bytes = (max_bytes + 2 * SOAK_GUARD + 16 + 255) & ~255ull;
    const uint64_t region = 2 * slot_bytes;
    if (nl < 1 || nl > SOAK_MAX_LANES || max_bytes < 1 || (uint64_t)nl * region > PC_BUF_BYTES) {
        gt_fail(ctx, "soak: %d lanes of %llu B do not fit (1..%d lanes, %llu B in all)", nl,
                (unsigned long long)max_bytes, SOAK_MAX_LANES, (unsigned long long)PC_BUF_BYTES);
        return;
    }
    cchan_sem_set_t *set = pc_sems(ctx, 2 * nl);
    soak_lane_t h[SOAK_MAX_LANES], *dl;
    char ids[512] = "";
    for (int b = 0; b < nl; b++) {
        h[b].data = pc_channel(ctx, g_pc.proxy, set, b);
        h[b].credit = pc_channel(ctx, g_pc.proxy, set, nl + b);
        size_t len = strlen(ids);
        snprintf(ids + len, sizeof ids - len, "%s%d:%u/%u", b ? " " : "", b, h[b].data.ctl.id,
                 h[b].credit.ctl.id);
    }
    if (ctx->rank == 0)
        gt_log(ctx, "soak: %d lanes, sizes to %llu B, %.0f s; lane:data/credit diag ids %s", nl,
               (unsigned long long)max_bytes, seconds, ids);
    GT_CUDA(cudaMalloc((void **)&dl, sizeof h));
    GT_CUDA(cudaMemcpy(dl, h, sizeof h, cudaMemcpyHostToDevice));
    unsigned long long *flushes, *bad, *status;
    GT_CUDA(cudaMalloc((void **)&flushes, SOAK_MAX_LANES * sizeof *flushes));
    GT_CUDA(cudaMalloc((void **)&bad, 2 * SOAK_MAX_LANES * sizeof *bad));
    GT_CUDA(cudaMalloc((void **)&status, sizeof *status));
    GT_CUDA(cudaMemset(flushes, 0, SOAK_MAX_LANES * sizeof *flushes));
    GT_CUDA(cudaMemset(bad, 0, 2 * SOAK_MAX_LANES * sizeof *bad));
    GT_CUDA(cudaMemset(status, 0, sizeof *status));
    gt_poison(ctx, g_pc.d, (uint64_t)nl * region);
    gt_result_reset(ctx);
    GT_SYNC(ctx);
    gt_barrier(ctx);
    const double t0 = gt_now_ms();
    uint64_t k = 0, groups = 0;
    for (int done = 0; !done && ctx->case_ok;) {
        int up = gt_now_ms() - t0 >= seconds * 1e3, all[GT_MAX_RANKS];
        gt_allgather(ctx, &up, all, sizeof up);
        done = all[0];
        for (int q = 0; q < SOAK_QUEUE; q++, k += SOAK_MSGS)
            GT_LAUNCH(ctx, k_pc_soak, nl, 64, dl, g_pc.l, g_pc.d, region, slot_bytes, max_bytes,
                      tag, ctx->rank, gt_peer(ctx), k, SOAK_MSGS, done && q == SOAK_QUEUE - 1,
                      flushes, bad, ctx->res, status);
        pc_sync(ctx, "soak");
        groups++;
        pc_expect_status(ctx, status, "soak");
        unsigned long long nbad[2 * SOAK_MAX_LANES];
        GT_CUDA(cudaMemcpy(nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost));
        for (int b = 0; b < nl && ctx->case_ok; b++)
            GT_EXPECT(ctx, nbad[b] == 0, "soak: lane %d: %llu bad bytes, first in message %llu", b,
                      nbad[b], nbad[SOAK_MAX_LANES + b] - 1);
    }
    gt_barrier(ctx);
    unsigned long long fl[SOAK_MAX_LANES];
    GT_CUDA(cudaMemcpy(fl, flushes, sizeof fl, cudaMemcpyDeviceToHost));
    for (int b = 0; b < nl && ctx->case_ok; b++) {
        char what[64];
        snprintf(what, sizeof what, "soak lane %d data channel", b);
        pc_expect_counters(ctx, what, &h[b].data, k, fl[b], k);
        snprintf(what, sizeof what, "soak lane %d credit channel", b);
        pc_expect_counters(ctx, what, &h[b].credit, k, 1, k);
    }
    if (ctx->rank == 0)
        gt_log(ctx,
               "soak: %llu messages per lane and direction (%llu groups of %d kernels) in "
               "%.1f s",
               (unsigned long long)k, (unsigned long long)groups, SOAK_QUEUE,
               (gt_now_ms() - t0) / 1e3);
    GT_CUDA(cudaFree(dl));
    GT_CUDA(cudaFree(flushes));
    GT_CUDA(cudaFree(bad));
    GT_CUDA(cudaFree(status));
}

/* ------------------------------------------------------------------ a wait that times out
 *
 * In child processes (a trap ends the CUDA context), one pair per pair of ranks: the lower child
 * waits on a port channel whose peer never signals; the kernel must trap at the deadline and
 * cchan_comm_check_device() name it. */

__global__ void k_to_port_wait(cchan_port_channel_t ch) { cchan_port_channel_wait(&ch); }

static cchan_port_channel_t g_to_ch;

static int to_child_prepare(gt_child_env_t *env) {
    cchan_mem_t *buf, *peers[2];
    int st = cchan_mem_alloc(env->comm, 2 * GT_MiB, 0, &buf);
    if (!st) st = cchan_mem_exchange(env->comm, buf, peers);
    cchan_sem_set_t *set = NULL;
    if (!st) st = cchan_sem_set_create(env->comm, 1, CCHAN_SEM_HOST_MAPPED, &set);
    cchan_proxy_t *proxy = NULL;
    if (!st) st = cchan_proxy_create(env->comm, NULL, &proxy);
    if (!st) st = cchan_proxy_start(proxy);
    const int peer = env->rank ^ 1;
    if (!st)
        st = cchan_port_channel_create(proxy, CCHAN_TRANSPORT_DMA, set, peer, 0, peers[peer], buf,
                                       &g_to_ch);
    return st;
}

static void to_child_launch(gt_child_env_t *env) {
    (void)env;
    k_to_port_wait<<<1, 1>>>(g_to_ch);
}

static void case_wait_timeout(gt_ctx_t *ctx) {
    static const char *const want[] = {"timed out", "semaphore", "peer 1", "expected 1",
                                       "observed 0"};
    gt_timeout_pair(ctx, "port_wait", want, 5);
}

/* ------------------------------------------------------------------ main */

static void pc_setup(gt_ctx_t *ctx) {
    GT_CCHAN(cchan_mem_alloc(ctx->comm, PC_BUF_BYTES, 0, &g_pc.L));
    GT_CCHAN(cchan_mem_alloc(ctx->comm, PC_BUF_BYTES, 0, &g_pc.D));
    GT_CCHAN(cchan_mem_exchange(ctx->comm, g_pc.D, g_pc.peerD));
    g_pc.l = (uint8_t *)gt_mem_ptr(g_pc.L);
    g_pc.d = (uint8_t *)gt_mem_ptr(g_pc.D);
    cchan_proxy_config_t cfg = CCHAN_PROXY_CONFIG_INIT;
    GT_CCHAN(cchan_proxy_create(ctx->comm, &cfg, &g_pc.proxy));
    GT_CCHAN(cchan_proxy_start(g_pc.proxy));
    cudaDeviceProp prop;
    GT_CUDA(cudaGetDeviceProperties(&prop, ctx->device));
    GT_CCHAN(cchan_bootstrap_allgather(cchan_comm_bootstrap(ctx->comm), prop.uuid.bytes, g_uuid,
                                       sizeof g_uuid[0]));
}

static void pc_teardown(gt_ctx_t *ctx) {
    gt_barrier(ctx);
    int st = cchan_proxy_stop(g_pc.proxy, 10000);
    if (st != 0) {
        gt_log(ctx, "cchan_proxy_stop = %d (%s): %s", st, cchan_strerror(st), cchan_last_error());
        ctx->failed++;
    }
    GT_CCHAN(cchan_proxy_destroy(g_pc.proxy));
    gt_barrier(ctx);
    for (int i = 0; i < g_pc.nsets; i++) GT_CCHAN(cchan_sem_set_destroy(g_pc.sets[i]));
    for (int r = 0; r < ctx->nranks; r++)
        if (r != ctx->rank) GT_CCHAN(cchan_mem_destroy(g_pc.peerD[r]));
    for (int i = 0; i < g_rl_n; i++)
        for (int r = 0; r < ctx->nranks; r++)
            if (r != ctx->rank) GT_CCHAN(cchan_mem_destroy(g_rl[i].peers[r]));
    gt_barrier(ctx);
    GT_CCHAN(cchan_mem_destroy(g_pc.L));
    GT_CCHAN(cchan_mem_destroy(g_pc.D));
    for (int i = 0; i < g_rl_n; i++) {
        GT_CCHAN(cchan_mem_destroy(g_rl[i].mem));
        GT_CUDA(cudaFree(g_rl[i].buf));
        GT_CUDA(cudaFree(g_rl[i].lanes));
    }
}

static void pc_cases(gt_ctx_t *ctx) {
    gt_case(ctx, "ops_ordering", case_ops_ordering, 120, GT_PAIRS);
    gt_case(ctx, "poll", case_poll, 60, GT_PAIRS);
    gt_case(ctx, "flush_overwrite", case_flush_overwrite, 180, GT_PAIRS);
    gt_case(ctx, "put_sizes", case_put_sizes, 300, GT_PAIRS | GT_ONE_ROUND);
    gt_case(ctx, "multi_channel", case_multi_channel, 120, GT_PAIRS);
    gt_case(ctx, "ring4", case_ring4, 180, GT_PAIRS);
    gt_case(ctx, "graph_replay_1000", case_graph_replay, 120, GT_PAIRS);
    gt_case(ctx, "wait_timeout", case_wait_timeout, 120, GT_PAIRS | GT_ONE_ROUND | GT_TRAPS);
    /* last: where its flush hangs, the device deadline traps (and under MPS takes the server) */
    gt_case(ctx, "flush_many_channels", case_flush_many_channels, 90, GT_PAIRS | GT_ONE_ROUND);
    /* Traps (device deadline) while the defect it guards against is present. */
    gt_case(ctx, "flush_beside_full_grid", case_flush_beside_full_grid, 120,
            GT_PAIRS | GT_ONE_ROUND | GT_TRAPS);
    gt_case(ctx, "ring_lanes", case_ring_lanes, 120, GT_ALL);
    gt_case(ctx, "soak", case_soak, 300 + (unsigned)soak_env("CCHAN_PC_SOAK_SECONDS", 5),
            GT_PAIRS | GT_ONE_ROUND);
}

GT_MAIN({"test_port_channel_gpu", pc_setup, pc_cases, pc_teardown, to_child_prepare,
         to_child_launch})
