/* cchan-bench on GPUs, shared by its parts: bench_gpu.cu (setup, teardown, the helpers every test
 * uses, the entry point), bench_gpu_bw.cu (mem-bw, port-bw, matrix), bench_gpu_mem_lat.cu (mem-lat)
 * and bench_gpu_port_lat.cu (port-lat). bench_gpu.cu says how each test measures. */
#ifndef CCHAN_BENCH_GPU_H
#define CCHAN_BENCH_GPU_H

#include <cuda_runtime.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "bench_pattern.h"
#include "cchan/cchan.h"

/* ---------------------------------------------------------------- layout of the two buffers */

#define CB_MIB (1ull << 20)
/* data: bandwidth tests use [0, bytes) in sender and receiver; ping-pongs send from CB_SRC_OFF and
 * receive at CB_DST_OFF, so each rank's source stays intact while it receives. */
#define CB_SRC_OFF 0ull
#define CB_DST_OFF (32ull * CB_MIB)
#define CB_LL_MAX (16ull * CB_MIB) /* largest LL payload */
/* pkt: the raw flags at 0, 64 and 128, a single LL8 packet at 192 and a single LL16 packet at 256,
 * LL stream acks from CB_ACK_OFF
 * (8 bytes per block), LL packets (2 bytes of packet per payload byte) from CB_PKT_OFF in two slots
 * of CB_LL_SLOT bytes. */
#define CB_FLAG_OFF 0ull
#define CB_RELAXED_FLAG_OFF 64ull
#define CB_RED_FLAG_OFF 128ull   /* raw remote-add ping-pong */
#define CB_WORD_PKT_OFF 192ull   /* one LL8 packet from registers */
#define CB_WORD16_PKT_OFF 256ull /* one LL16 packet from registers */
#define CB_ACK_OFF 4096ull
#define CB_PKT_OFF (64ull * 1024)
#define CB_LL_SLOT (2 * CB_LL_MAX)
#define CB_RING_SLOTS 512u

enum bw_kind {
    BW_MC_PUT,     /* cchan_memory_channel_put, grid x threads */
    BW_SM_WRITE,   /* plain SM copy kernel writing to the peer */
    BW_MC_GET,     /* cchan_memory_channel_get */
    BW_SM_READ,    /* plain SM copy kernel reading from the peer */
    BW_PORT_PUT,   /* port channel: n messages of chunked puts, one flush at the end */
    BW_PORT_FLUSH, /* port channel: chunked puts then a flush, per message */
    BW_CE,         /* n cudaMemcpyPeerAsync back to back */
    BW_CE_SYNC     /* cudaMemcpyPeerAsync then cudaStreamSynchronize, per message */
};

typedef struct gpu {
    cb_ctx_t *ctx;
    cchan_comm_t *comm;
    int rank, nranks, peer; /* peer: the pair partner (0 <-> 1); -1 on ranks >= 2 */
    int dev;
    int *dev_of;     /* each rank's GPU as this process numbers them, -1 if not visible */
    int shared_gpu;  /* ranks 0 and 1 run on the same GPU */
    int time_sliced; /* ... without MPS: their kernels take turns, so no ping-pong can run */
    char (*bus)[32]; /* each rank's PCI bus id */
    cudaStream_t s;
    cudaEvent_t e0, e1;
    cb_chans_t ch; /* buffers and channels (psems: 0 = pch, 1 = rate_ch, 2 = raw relay) */
    uint8_t *d_data, *d_pkt;
    int ce_peer_api; /* 1: cudaMemcpyPeerAsync works on imported memory; 0: cudaMemcpyAsync */
    char ce_why[96];
    /* scratch */
    unsigned long long *d_err;
    uint64_t *d_ts;
    size_t ts_words;
    int rec_cap; /* most timestamps one block keeps in shared memory */
    uint64_t *h_pinned,
        *d_pinned; /* [0]: relay request; [64..]: raw ring (2 words a slot); [32]: ring tail */
    double timer_res_ns;
    int per_iter; /* timer fine enough for per-iteration statistics */
    /* monotone counters, the same on every rank */
    uint32_t ll_flag;
    uint64_t flag_epoch, relay_count, ring_seq, row_seq, phase, red_count;
} gpu_t;

/* Dies naming the CUDA call, with the device's own diagnostic where a device wait expired. */
void gpu_die(gpu_t *g, cudaError_t e, const char *what, const char *file, int line);
#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) gpu_die(g, e_, #call, __FILE__, __LINE__);                          \
    } while (0)
#define CK_LAUNCH() CK(cudaGetLastError())

/* ---------------------------------------------------------------- device helpers */

__device__ __forceinline__ uint64_t cb_gtimer(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
/* The raw baselines' own PTX, independent of cchan's headers. */
__device__ __forceinline__ void raw_st_release_sys(uint64_t *p, uint64_t v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t raw_ld_acquire_sys(const uint64_t *p) {
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/* ---- ping-pong stamps: the initiator stamps into shared memory, then copies the stamps out.
 * A stamp is a %clock64 read (a few cycles); %globaltimer is read only at the first and the last
 * stamp, and stamps_out converts the cycle counts to globaltimer nanoseconds with the ratio of the
 * two over the whole run, so that the harness adds next to nothing to each round trip. */

extern __shared__ uint64_t cb_sts[];
#define CB_CAL_BYTES (4 * sizeof(uint64_t))
static __shared__ uint64_t
    cb_cal[4]; /* globaltimer and clock64 at the first stamp, then at the last */

/* Stamp i (0 <= i <= rec) marks the start of timed round trip i; stamp rec is taken after the loop
 * when rec == iters; stamp rec + 1 is always the end. */
__device__ __forceinline__ void stamp(bool on, int i, int rec) {
    if (on && i >= 0 && i <= rec) {
        const uint64_t c = clock64();
        if (i == 0) {
            cb_cal[0] = cb_gtimer();
            cb_cal[1] = c;
        }
        cb_sts[i] = c;
    }
}
__device__ __forceinline__ void stamp_end(bool on, int iters, int rec) {
    if (on) {
        const uint64_t c = clock64();
        cb_cal[2] = cb_gtimer();
        cb_cal[3] = c;
        if (rec == iters) cb_sts[rec] = c;
        cb_sts[rec + 1] = c;
    }
}
__device__ __forceinline__ void stamps_out(bool initiator, int rec, uint64_t *ts) {
    __syncthreads();
    if (!initiator) return;
    const uint64_t cycles = cb_cal[3] - cb_cal[1];
    const double ns_per_cycle = cycles ? (double)(cb_cal[2] - cb_cal[0]) / (double)cycles : 0.0;
    for (int k = threadIdx.x; k < rec + 2; k += blockDim.x)
        ts[(uint64_t)blockIdx.x * (rec + 2) + k] =
            cb_cal[0] + (uint64_t)((double)(cb_sts[k] - cb_cal[1]) * ns_per_cycle + 0.5);
}

/* ---------------------------------------------------------------- helpers (bench_gpu.cu) */

uint32_t seed_of(const gpu_t *g, int rank);
int in_pair(const gpu_t *g);
/* Waits for g->s, dying after 120 s (a dead peer) or on an error. */
void gsync(gpu_t *g, const char *what);
/* The random pattern of `seed` into p[0, bytes). */
void fill(gpu_t *g, uint8_t *p, uint64_t bytes, uint32_t seed);
/* Mismatching bytes (words counted once) of p[0, bytes) against the pattern at src_off. */
int64_t verify(gpu_t *g, const uint8_t *p, uint64_t bytes, uint32_t seed, uint64_t src_off,
               const char *what);
void ts_ensure(gpu_t *g, size_t words);
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}
void pingpong_stats(gpu_t *g, int blocks, int rec, int iters, double scale, cb_stats_t *st);
/* The source of a ping-pong filled, the destination poisoned (pair ranks). */
void fill_pingpong(gpu_t *g, uint64_t bytes);
/* Both pair ranks check what they received (a stream only delivers to rank 1). */
int64_t check_pingpong(gpu_t *g, uint64_t bytes, const char *what, bool receiver_only = false);
void default_grids(const cb_opts_t *o, int *grids, int *n);
/* The port channels and their proxy, made at the first test that needs them (collective). */
void port_setup(gpu_t *g);
/* The copy-engine baseline's API, as rows and titles name it. */
const char *ce_name(const gpu_t *g);

/* Launches a ping-pong on ranks 0 (initiator) and 1 at once (solo: rank 0 alone); rank 0 gets the
 * statistics, scaled (0.5: one way). launch(initiator, rec, smem) enqueues the kernel on g->s.
 * Every rank calls this. */
template <typename L>
static inline void pingpong(gpu_t *g, int blocks, int iters, double scale, const char *what,
                            L launch, cb_stats_t *st, bool solo = false) {
    int rec = iters < g->rec_cap ? iters : g->rec_cap;
    ts_ensure(g, (size_t)blocks * (size_t)(rec + 2));
    memset(st, 0, sizeof *st);
    cb_barrier(g->ctx);
    if (solo ? g->rank == 0 : in_pair(g)) {
        int initiator = g->rank == 0;
        launch(initiator, rec, initiator ? (size_t)(rec + 2) * sizeof(uint64_t) : 0);
        CK_LAUNCH();
        gsync(g, what);
        if (initiator) pingpong_stats(g, blocks, rec, iters, scale, st);
    }
}

/* ---------------------------------------------------------------- the tests */

/* bench_gpu_bw.cu */
void run_mem_bw(gpu_t *g);
void run_port_bw(gpu_t *g);
void run_matrix(gpu_t *g);
/* bench_gpu_mem_lat.cu; _attrs: the dynamic shared memory its kernels may take (at setup) */
void run_mem_lat(gpu_t *g);
void mem_lat_attrs(gpu_t *g, int smem);
/* bench_gpu_port_lat.cu */
void run_port_lat(gpu_t *g);
void port_lat_attrs(gpu_t *g, int smem);

#endif /* CCHAN_BENCH_GPU_H */
