/* cchan-flag-probe: what a one-thread flag ping-pong between two GPUs costs with each way of
 * ordering it, measured with no cchan code at all (plain CUDA runtime, peer access or legacy IPC).
 *
 * The question it answers: is what a system-scope release costs per hop in cchan-bench (docs/
 * tuning.md, "Flag ping-pong") a property of the machine, or of how cchan's processes are set up
 * (proxy threads spinning on host-mapped memory, one process per GPU)? Every variant is run
 *   - in one process driving both GPUs (peer access), and
 *   - with --procs: two processes (fork+exec of this binary before CUDA starts), the flags shared
 *     through cudaIpcGetMemHandle, as cchan and MSCCL++ run;
 * and with --cpu-poll a host thread spins on host-pinned mapped memory during the runs, as a
 * cchan proxy thread does.
 *
 *   cchan-flag-probe [--procs] [--cpu-poll] [--iters N] [--reps R] [--addresses K]
 *
 * --addresses K (one process only) repeats the remote-add and the volatile ping-pong with the flags
 * at K different addresses, to show how much a word's location moves a hop; --sm-sweep repeats
 * the volatile one at 16 of them from blocks on five different SMs.
 * Prints, per variant, the median one-way time (round trip / 2) over R repetitions of N round
 * trips. Exit status 0 on success, 2 on a setup failure, 77 without two GPUs.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
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
            fprintf(stderr, "flag-probe: %s: %s (%s:%d)\n", #call, cudaGetErrorString(e_),         \
                    __FILE__, __LINE__);                                                           \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

enum {
    V_REL_ACQ,    /* st.release.sys, poll ld.acquire.sys */
    V_RED_ACQ,    /* red.release.sys.add, poll ld.acquire.sys (cchan's and MSCCL++'s signal/wait) */
    V_SC_ACQ,     /* fence.sc.sys + st.relaxed.sys, poll ld.acquire.sys (__threadfence_system) */
    V_ACQREL_ACQ, /* fence.acq_rel.sys + st.relaxed.sys, poll ld.acquire.sys */
    V_MEMBAR_ACQ, /* membar.sys + st.volatile, poll ld.acquire.sys */
    V_GPUREL_ACQ, /* st.release.gpu (not a valid peer release; for scale), poll ld.acquire.sys */
    V_RLX_ACQ,    /* st.relaxed.sys, poll ld.acquire.sys (orders nothing before the store) */
    V_RLX_RLX,    /* st.relaxed.sys, poll ld.relaxed.sys (orders nothing) */
    V_VOL,        /* st.volatile, poll ld.volatile: an LL packet's store and read */
    V_VOL4,       /* st.volatile, poll with four ld.volatile in flight at once */
    V_COUNT
};
static const char *const v_name[V_COUNT] = {
    "st.release.sys        / ld.acquire.sys", "red.release.sys.add   / ld.acquire.sys",
    "fence.sc.sys+st       / ld.acquire.sys", "fence.acq_rel.sys+st  / ld.acquire.sys",
    "membar.sys+st.volatile/ ld.acquire.sys", "st.release.gpu        / ld.acquire.sys",
    "st.relaxed.sys        / ld.acquire.sys", "st.relaxed.sys        / ld.relaxed.sys",
    "st.volatile           / ld.volatile",    "st.volatile           / 4 x ld.volatile",
};

__device__ __forceinline__ uint64_t gtimer(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

template <int V> __device__ __forceinline__ void send(uint64_t *p, uint64_t v) {
    if (V == V_REL_ACQ)
        asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    if (V == V_RED_ACQ) asm volatile("red.release.sys.global.add.u64 [%0], 1;" ::"l"(p) : "memory");
    if (V == V_SC_ACQ)
        asm volatile("fence.sc.sys;\n\tst.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v)
                     : "memory");
    if (V == V_ACQREL_ACQ)
        asm volatile("fence.acq_rel.sys;\n\tst.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v)
                     : "memory");
    if (V == V_MEMBAR_ACQ)
        asm volatile("membar.sys;\n\tst.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    if (V == V_GPUREL_ACQ)
        asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    if (V == V_RLX_ACQ || V == V_RLX_RLX)
        asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    if (V == V_VOL || V == V_VOL4)
        asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

template <int V> __device__ __forceinline__ void recv(const uint64_t *p, uint64_t v) {
    if constexpr (V == V_VOL4) { /* four loads issued before the first returns: finer detection */
        uint64_t a, b, c, d;
        do {
            asm volatile("ld.volatile.global.u64 %0, [%4];\n\t"
                         "ld.volatile.global.u64 %1, [%4];\n\t"
                         "ld.volatile.global.u64 %2, [%4];\n\t"
                         "ld.volatile.global.u64 %3, [%4];"
                         : "=l"(a), "=l"(b), "=l"(c), "=l"(d)
                         : "l"(p)
                         : "memory");
        } while (a < v && b < v && c < v && d < v);
    } else {
        uint64_t w;
        do {
            if (V == V_VOL)
                asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
            else if (V == V_RLX_RLX)
                asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
            else
                asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
        } while (w < v);
    }
}

/* One thread per side. Flags only grow: round trip i (from base) uses value base + i + 1.
 * S: what the initiator records per round trip, as a timing harness might: 0 nothing, 1 a
 * %globaltimer read, 2 a %clock64 read, each stored into shared memory. */
template <int V, int S = 0>
__global__ void k_pingpong(uint64_t *mine, uint64_t *peer, uint64_t base, int initiator, int iters,
                           uint64_t *ns) {
    __shared__ uint64_t stamps[1024];
    uint64_t t0 = 0;
    for (int i = 0; i < iters; i++) {
        uint64_t v = base + (uint64_t)i + 1;
        if (i == iters / 10) t0 = gtimer(); /* the first tenth warms up */
        if (initiator) {
            if (S == 1) stamps[i & 1023] = gtimer();
            if (S == 2) stamps[i & 1023] = clock64();
            send<V>(peer, v);
            recv<V>(mine, v);
        } else {
            recv<V>(mine, v);
            send<V>(peer, v);
        }
    }
    if (initiator) *ns = gtimer() - t0 + (S ? stamps[iters & 1023] & 1 : 0);
}

/* The volatile-flag ping-pong run by one block on SM `sm` (the grid is oversubscribed; the first
 * block that finds itself there claims the run, the others leave). A poll gives up after 2 s, so
 * a side whose partner never started reports 0 instead of hanging. */
__global__ void k_vol_on_sm(uint64_t *mine, uint64_t *peer, uint64_t base, int initiator, int iters,
                            uint64_t *ns, unsigned sm, unsigned *claim) {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    if (id != sm || atomicCAS(claim, 0u, 1u) != 0u) return;
    const uint64_t start = gtimer();
    uint64_t t0 = start;
    for (int i = 0; i < iters; i++) {
        const uint64_t v = base + (uint64_t)i + 1;
        if (i == iters / 10) t0 = gtimer();
        for (int side = 0; side < 2; side++) {
            if ((side == 0) == (initiator != 0)) {
                send<V_VOL>(peer, v);
            } else {
                uint64_t w;
                unsigned spins = 0;
                do {
                    asm volatile("ld.volatile.global.u64 %0, [%1];"
                                 : "=l"(w)
                                 : "l"(mine)
                                 : "memory");
                    if (++spins % 1024 == 0 && gtimer() - start > 2000000000ull) {
                        if (initiator) *ns = 0;
                        return;
                    }
                } while (w < v);
            }
        }
    }
    if (initiator) *ns = gtimer() - t0;
}

typedef void (*kfn_t)(uint64_t *, uint64_t *, uint64_t, int, int, uint64_t *);
static const kfn_t kfn[V_COUNT] = {k_pingpong<0>, k_pingpong<1>, k_pingpong<2>, k_pingpong<3>,
                                   k_pingpong<4>, k_pingpong<5>, k_pingpong<6>, k_pingpong<7>,
                                   k_pingpong<8>, k_pingpong<9>};
/* [variant: remote add, volatile][stamp: %globaltimer, %clock64] */
static const kfn_t kfn_stamped[2][2] = {{k_pingpong<V_RED_ACQ, 1>, k_pingpong<V_RED_ACQ, 2>},
                                        {k_pingpong<V_VOL, 1>, k_pingpong<V_VOL, 2>}};

static volatile int g_stop;
static void *cpu_poll(void *arg) {
    volatile uint64_t *w = (volatile uint64_t *)arg;
    uint64_t s = 0;
    while (!g_stop) s += *w;
    return (void *)(uintptr_t)s;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    int iters, reps, cpu_poll, addresses, sm_sweep;
} opts_t;

static void report(int v, uint64_t *ns, const opts_t *o) {
    int timed = o->iters - o->iters / 10;
    qsort(ns, (size_t)o->reps, sizeof *ns, cmp_u64);
    printf("  %-40s %8.1f ns one way (min %.1f, max %.1f)\n", v_name[v],
           (double)ns[o->reps / 2] / timed / 2, (double)ns[0] / timed / 2,
           (double)ns[o->reps - 1] / timed / 2);
}

/* ---- one process, both GPUs */
#define PROBE_AREA (1u << 20) /* bytes of flag memory per GPU */
#define PROBE_STRIDE 4224u    /* between the addresses an address sweep tries (4 KiB + 128) */

/* Both GPUs of one process: each one's flags, initiator time and stream; base is where the flags
 * stand (they only grow), res the last run's samples. */
typedef struct {
    uint64_t *flag[2], *ns[2];
    cudaStream_t st[2];
    uint64_t base, *res;
} pair_t;

/* o->reps runs of kernel k with both flags at word offset off; leaves res sorted and returns the
 * median one-way time in ns. */
static double pair_time(pair_t *p, kfn_t k, size_t off, const opts_t *o) {
    for (int r = 0; r < o->reps; r++) {
        for (int d = 0; d < 2; d++) {
            CK(cudaSetDevice(d));
            k<<<1, 1, 0, p->st[d]>>>(p->flag[d] + off, p->flag[1 - d] + off, p->base, d == 0,
                                     o->iters, p->ns[d]);
            CK(cudaGetLastError());
        }
        for (int d = 0; d < 2; d++) CK(cudaStreamSynchronize(p->st[d]));
        p->res[r] = *p->ns[0];
        p->base += (uint64_t)o->iters;
    }
    qsort(p->res, (size_t)o->reps, sizeof *p->res, cmp_u64);
    return (double)p->res[o->reps / 2] / (o->iters - o->iters / 10) / 2;
}

static int run_single(const opts_t *o) {
    pair_t P;
    pair_t *p = &P;
    for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        CK(cudaDeviceEnablePeerAccess(1 - d, 0));
        CK(cudaMalloc(&p->flag[d], PROBE_AREA));
        CK(cudaMemset(p->flag[d], 0, PROBE_AREA));
        CK(cudaMallocManaged(&p->ns[d], sizeof(uint64_t)));
        CK(cudaStreamCreateWithFlags(&p->st[d], cudaStreamNonBlocking));
    }
    p->base = 0;
    p->res = (uint64_t *)calloc((size_t)o->reps, sizeof *p->res);
    uint64_t *const *flag = p->flag, *const *ns = p->ns, *res = p->res;
    const cudaStream_t *st = p->st;
    printf("one process, two GPUs (peer access)%s:\n",
           o->cpu_poll ? ", a host thread polling" : "");
    /* a remote add raises the flag by one per hop: it then equals the count the others store */
    for (int v = 0; v < V_COUNT; v++) {
        pair_time(p, kfn[v], 0, o);
        report(v, res, o);
    }
    /* What a per-round-trip timestamp costs a ping-pong (the harness of cchan-bench stamps every
     * round trip with %globaltimer). */
    for (int vi = 0; vi < 2; vi++) {
        for (int si = 0; si < 2; si++) {
            printf("  %-40s %8.1f ns one way, with a %s read per round trip\n",
                   v_name[vi == 0 ? V_RED_ACQ : V_VOL], pair_time(p, kfn_stamped[vi][si], 0, o),
                   si == 0 ? "%globaltimer" : "%clock64");
        }
    }
    /* Address sweep: the same ping-pong with both flags at offset k * PROBE_STRIDE, for the
     * remote-add signal and the LL-style volatile flag. Where a word lives (its L2 slice, and how
     * far that is from the polling SM) moves a hop by tens of ns. */
    for (int vi = 0; vi < 2 && o->addresses > 0; vi++) {
        const int v = vi == 0 ? V_RED_ACQ : V_VOL;
        double lo = 1e30, hi = 0, sum = 0;
        printf("  address sweep, %s, %d addresses %u B apart (one way, ns):", v_name[v],
               o->addresses, PROBE_STRIDE);
        for (int k = 0; k < o->addresses; k++) {
            const size_t off = (size_t)k * PROBE_STRIDE / sizeof(uint64_t);
            /* a remote add raises the flag by one per hop: start it where the stores left off */
            for (int d = 0; d < 2; d++) {
                CK(cudaSetDevice(d));
                CK(cudaMemcpy(flag[d] + off, &p->base, sizeof p->base, cudaMemcpyHostToDevice));
            }
            const double one_way = pair_time(p, kfn[v], off, o);
            printf("%s%.0f", k % 16 ? " " : "\n    ", one_way);
            lo = one_way < lo ? one_way : lo;
            hi = one_way > hi ? one_way : hi;
            sum += one_way;
        }
        printf("\n    min %.1f, mean %.1f, max %.1f\n", lo, sum / o->addresses, hi);
    }
    /* SM sweep: the volatile ping-pong at 16 of the addresses above, run from blocks on other SMs
     * (the same SM number on both GPUs): is a word's cost its address's alone, or its address's
     * as seen from one SM? */
    int nsm = 0;
    CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
    const int sms[] = {0, nsm / 4, nsm / 2, 3 * nsm / 4, nsm - 1};
    unsigned *claim[2];
    for (int d = 0; d < 2 && o->sm_sweep; d++) {
        CK(cudaSetDevice(d));
        CK(cudaMalloc(&claim[d], sizeof(unsigned)));
    }
    for (int si = 0; o->sm_sweep && si < (int)(sizeof sms / sizeof sms[0]); si++) {
        const int naddr = o->addresses < 16 ? o->addresses : 16;
        printf("  SM %3d, st.volatile / ld.volatile, %d addresses as above (one way, ns):\n   ",
               sms[si], naddr);
        for (int k = 0; k < naddr; k++) {
            const size_t off = (size_t)k * PROBE_STRIDE / sizeof(uint64_t);
            for (int r = 0; r < o->reps; r++) {
                for (int d = 0; d < 2; d++) {
                    CK(cudaSetDevice(d));
                    CK(cudaMemsetAsync(claim[d], 0, sizeof(unsigned), st[d]));
                    k_vol_on_sm<<<4 * nsm, 1, 0, st[d]>>>(flag[d] + off, flag[1 - d] + off, p->base,
                                                          d == 0, o->iters, ns[d],
                                                          (unsigned)sms[si], claim[d]);
                    CK(cudaGetLastError());
                }
                for (int d = 0; d < 2; d++) CK(cudaStreamSynchronize(st[d]));
                res[r] = *ns[0];
                p->base += (uint64_t)o->iters;
                /* a run that gave up left the flags behind: restart both from base */
                for (int d = 0; d < 2 && res[r] == 0; d++) {
                    CK(cudaSetDevice(d));
                    CK(cudaMemcpy(flag[d] + off, &p->base, sizeof p->base, cudaMemcpyHostToDevice));
                }
            }
            qsort(res, (size_t)o->reps, sizeof *res, cmp_u64);
            printf(" %.0f", (double)res[o->reps / 2] / (o->iters - o->iters / 10) / 2);
        }
        printf("\n");
    }
    for (int d = 0; d < 2 && o->sm_sweep; d++) {
        CK(cudaSetDevice(d));
        CK(cudaFree(claim[d]));
    }
    free(res);
    return 0;
}

/* ---- two processes: rank 0 and rank 1 exchange IPC handles and "go" tokens through pipes */
static void xwrite(int fd, const void *p, size_t n) { probe_write("flag-probe", fd, p, n); }
static void xread(int fd, void *p, size_t n) { probe_read("flag-probe", fd, p, n); }

static int run_rank(int rank, int rfd, int wfd, const opts_t *o) {
    CK(cudaSetDevice(rank));
    uint64_t *mine, *peer, *ns;
    CK(cudaMalloc(&mine, 64));
    CK(cudaMemset(mine, 0, 64));
    CK(cudaMallocManaged(&ns, sizeof(uint64_t)));
    cudaIpcMemHandle_t h, ph;
    CK(cudaIpcGetMemHandle(&h, mine));
    xwrite(wfd, &h, sizeof h);
    xread(rfd, &ph, sizeof ph);
    CK(cudaIpcOpenMemHandle((void **)&peer, ph, cudaIpcMemLazyEnablePeerAccess));
    CK(cudaDeviceSynchronize());
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    uint64_t base = 0, *res = (uint64_t *)calloc((size_t)o->reps, sizeof *res);
    if (rank == 0)
        printf("two processes, one GPU each (legacy IPC)%s:\n",
               o->cpu_poll ? ", a host thread polling in each" : "");
    for (int v = 0; v < V_COUNT; v++) {
        for (int r = 0; r < o->reps; r++) {
            char tok = 'g';
            xwrite(wfd, &tok, 1); /* both sides ready: launch */
            xread(rfd, &tok, 1);
            kfn[v]<<<1, 1, 0, st>>>(mine, peer, base, rank == 0, o->iters, ns);
            CK(cudaGetLastError());
            CK(cudaStreamSynchronize(st));
            res[r] = *ns;
            base += (uint64_t)o->iters;
        }
        if (rank == 0) report(v, res, o);
    }
    fflush(stdout);
    char tok = 'e';
    xwrite(wfd, &tok, 1); /* the peer may still read our flag: unmap only after both are done */
    xread(rfd, &tok, 1);
    CK(cudaIpcCloseMemHandle(peer));
    free(res);
    return 0;
}

static int run_procs(const char *self, const opts_t *o) {
    char it[16], rp[16];
    snprintf(it, sizeof it, "%d", o->iters);
    snprintf(rp, sizeof rp, "%d", o->reps);
    const char *extra[] = {"--iters", it, "--reps", rp, o->cpu_poll ? "--cpu-poll" : NULL, NULL};
    return probe_run_pair("flag-probe", self, extra);
}

int main(int argc, char **argv) {
    opts_t o = {20000, 5, 0, 0, 0};
    int procs = 0, rank = -1, rfd = -1, wfd = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--procs"))
            procs = 1;
        else if (!strcmp(argv[i], "--cpu-poll"))
            o.cpu_poll = 1;
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            o.iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            o.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--addresses") && i + 1 < argc)
            o.addresses = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sm-sweep"))
            o.sm_sweep = 1;
        else if (!strcmp(argv[i], "--rank") && i + 3 < argc) {
            rank = atoi(argv[++i]);
            rfd = atoi(argv[++i]);
            wfd = atoi(argv[++i]);
        } else {
            fprintf(stderr,
                    "usage: %s [--procs] [--cpu-poll] [--iters N] [--reps R] [--addresses K] "
                    "[--sm-sweep]\n",
                    argv[0]);
            return 2;
        }
    }
    if (o.iters < 10 || o.reps < 1 || o.addresses < 0 ||
        (size_t)o.addresses * PROBE_STRIDE + 64 > PROBE_AREA) {
        fprintf(stderr,
                "flag-probe: --iters must be at least 10, --reps at least 1, --addresses "
                "0..%u\n",
                (PROBE_AREA - 64) / PROBE_STRIDE);
        return 2;
    }
    if (procs) return run_procs(argv[0][0] == '/' ? argv[0] : realpath(argv[0], NULL), &o);

    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
        printf("flag-probe: needs two GPUs (found %d): skipped\n", n);
        return rank >= 0 ? 2 : 77;
    }
    pthread_t th;
    uint64_t *host = NULL;
    if (o.cpu_poll) {
        CK(cudaHostAlloc(&host, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
        memset(host, 0, 4096);
        pthread_create(&th, NULL, cpu_poll, host);
    }
    int rc = rank >= 0 ? run_rank(rank, rfd, wfd, &o) : run_single(&o);
    if (o.cpu_poll) {
        g_stop = 1;
        pthread_join(th, NULL);
    }
    return rc;
}
