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
#include <cuda_runtime.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "bench_pattern.h"
#include "bench_switch.h"
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
    char (*bus)[32]; /* each rank's PCI bus id */
    cudaStream_t s;
    cudaEvent_t e0, e1;
    uint64_t data_bytes, pkt_bytes;
    cchan_mem_t *data, *pkt, **peer_data, **peer_pkt;
    uint8_t *d_data, *d_pkt;
    cchan_sem_set_t *msems;
    cchan_memory_channel_t
        *mch; /* [nranks]: to each peer, remote = its data, local = data (sem 0) */
    cchan_memory_channel_t lch; /* pair: packets into the peer's pkt, payload in data (sem 1) */
    /* port channels (created at the first port test) */
    int port_ready;
    cchan_sem_set_t *psems; /* host-mapped: 0 = pch, 1 = rate_ch, 2 = raw relay */
    cchan_proxy_t *proxy;
    cchan_port_channel_t *pch; /* [nranks] */
    cchan_port_channel_t rate_ch;
    int ce_peer_api; /* 1: cudaMemcpyPeerAsync works on imported memory; 0: cudaMemcpyAsync */
    char ce_why[96];
    /* scratch */
    unsigned long long *d_err;
    uint64_t *d_ts;
    size_t ts_words;
    int rec_cap;                   /* most timestamps one block keeps in shared memory */
    uint64_t *h_pinned, *d_pinned; /* [0]: relay request; [64..]: raw ring; [32]: ring tail */
    double timer_res_ns;
    int per_iter; /* timer fine enough for per-iteration statistics */
    /* monotone counters, the same on every rank */
    uint32_t ll_flag;
    uint64_t flag_epoch, relay_count, ring_seq, row_seq, phase, red_count;
} gpu_t;

static void gpu_die(gpu_t *g, cudaError_t e, const char *what, const char *file, int line) {
    char diag[512] = "";
    if (g->comm && cchan_comm_check_device(g->comm) < 0)
        snprintf(diag, sizeof diag, "; device diagnostic: %s", cchan_last_error());
    cb_die(g->ctx, "%s:%d: %s: %s%s", file, line, what, cudaGetErrorString(e), diag);
}
#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) gpu_die(g, e_, #call, __FILE__, __LINE__);                          \
    } while (0)
#define CK_LAUNCH() CK(cudaGetLastError())

/* ================================================================ device code */

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

/* ---- bandwidth kernels */

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

/* ---- ping-pong kernels: the initiator stamps into shared memory, then copies the stamps out.
 * A stamp is a %clock64 read (a few cycles); %globaltimer is read only at the first and the last
 * stamp, and stamps_out converts the cycle counts to globaltimer nanoseconds with the ratio of the
 * two over the whole run, so that the harness adds next to nothing to each round trip. */

extern __shared__ uint64_t cb_sts[];
#define CB_CAL_BYTES (4 * sizeof(uint64_t))
__shared__ uint64_t cb_cal[4]; /* globaltimer and clock64 at the first stamp, then at the last */

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

__global__ void k_sem_pingpong(const __grid_constant__ cchan_memory_channel_t ch, int initiator,
                               int warm, int iters, int rec, uint64_t *ts) {
    for (int i = -warm; i < iters; i++) {
        if (initiator) {
            stamp(true, i, rec);
            cchan_memory_channel_signal(&ch);
            cchan_memory_channel_wait(&ch);
        } else {
            cchan_memory_channel_wait(&ch);
            cchan_memory_channel_signal(&ch);
        }
    }
    stamp_end(initiator, iters, rec);
    stamps_out(initiator, rec, ts);
}

/* The same with the expected count in a register (cchan_memory_channel_wait_value), stored back
 * once at the end as the contract asks. */
__global__ void k_sem_value_pingpong(const __grid_constant__ cchan_memory_channel_t ch,
                                     int initiator, int warm, int iters, int rec, uint64_t *ts) {
    uint64_t expected = cchan_semaphore_expected(&ch.sem);
    for (int i = -warm; i < iters; i++) {
        if (initiator) {
            stamp(true, i, rec);
            cchan_memory_channel_signal(&ch);
            cchan_memory_channel_wait_value(&ch, ++expected);
        } else {
            cchan_memory_channel_wait_value(&ch, ++expected);
            cchan_memory_channel_signal(&ch);
        }
    }
    cchan_semaphore_set_expected(&ch.sem, expected);
    stamp_end(initiator, iters, rec);
    stamps_out(initiator, rec, ts);
}

/* Baseline: one thread each side, st.release.sys into the peer's flag, ld.acquire.sys on our own.
 */
__global__ void k_flag_pingpong(uint64_t *my_flag, uint64_t *peer_flag, uint64_t base,
                                int initiator, int warm, int iters, int rec, uint64_t *ts) {
    for (int i = -warm; i < iters; i++) {
        uint64_t v = base + (uint64_t)(i + warm) + 1;
        if (initiator) {
            stamp(true, i, rec);
            raw_st_release_sys(peer_flag, v);
            while (raw_ld_acquire_sys(my_flag) < v) {}
        } else {
            while (raw_ld_acquire_sys(my_flag) < v) {}
            raw_st_release_sys(peer_flag, v);
        }
    }
    stamp_end(initiator, iters, rec);
    stamps_out(initiator, rec, ts);
}

/* Where the fences of a release/acquire flag cost: MODE 1 release store + relaxed poll; 2 relaxed
 * store + acquire poll; 3 release store + relaxed poll + acquire fence once the flag is seen (a
 * valid acquire pattern); 4 release fence + relaxed store, relaxed poll + acquire fence. */
template <int MODE>
__global__ void k_flag_mode_pingpong(uint64_t *my_flag, uint64_t *peer_flag, uint64_t base,
                                     int initiator, int warm, int iters, int rec, uint64_t *ts) {
    for (int i = -warm; i < iters; i++) {
        uint64_t v = base + (uint64_t)(i + warm) + 1;
        for (int side = 0; side < 2; side++) {
            if ((side == 0) == (initiator != 0)) {
                if (initiator) stamp(true, i, rec);
                if (MODE == 4) asm volatile("fence.acq_rel.sys;" ::: "memory");
                if (MODE == 1 || MODE == 3)
                    raw_st_release_sys(peer_flag, v);
                else
                    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(peer_flag), "l"(v)
                                 : "memory");
            } else {
                if (MODE == 2) {
                    while (raw_ld_acquire_sys(my_flag) < v) {}
                } else {
                    uint64_t w;
                    do {
                        asm volatile("ld.relaxed.sys.global.u64 %0, [%1];"
                                     : "=l"(w)
                                     : "l"(my_flag)
                                     : "memory");
                    } while (w < v);
                    if (MODE >= 3) asm volatile("fence.acq_rel.sys;" ::: "memory");
                }
            }
        }
    }
    stamp_end(initiator, iters, rec);
    stamps_out(initiator, rec, ts);
}

/* For scale only: the same ping-pong with relaxed (volatile) accesses, no fences. It is not a valid
 * signal (it orders nothing), but it shows what the release/acquire pair costs on this machine. */
__global__ void k_relaxed_flag_pingpong(uint64_t *my_flag, uint64_t *peer_flag, uint64_t base,
                                        int initiator, int warm, int iters, int rec, uint64_t *ts) {
    volatile uint64_t *mine = my_flag, *peer = peer_flag;
    for (int i = -warm; i < iters; i++) {
        uint64_t v = base + (uint64_t)(i + warm) + 1;
        if (initiator) {
            stamp(true, i, rec);
            *peer = v;
            while (*mine < v) {}
        } else {
            while (*mine < v) {}
            *peer = v;
        }
    }
    stamp_end(initiator, iters, rec);
    stamps_out(initiator, rec, ts);
}

/* Baseline for a remote-add signal: red.release.sys.add into the peer's counter, ld.acquire.sys on
 * our own (what cchan_semaphore_signal does on NVLink peers). */
__global__ void k_red_flag_pingpong(uint64_t *my_flag, uint64_t *peer_flag, uint64_t base,
                                    int initiator, int warm, int iters, int rec, uint64_t *ts) {
    for (int i = -warm; i < iters; i++) {
        uint64_t v = base + (uint64_t)(i + warm) + 1;
        if (initiator) {
            stamp(true, i, rec);
            asm volatile("red.release.sys.add.u64 [%0], 1;" ::"l"(peer_flag) : "memory");
            while (raw_ld_acquire_sys(my_flag) < v) {}
        } else {
            while (raw_ld_acquire_sys(my_flag) < v) {}
            asm volatile("red.release.sys.add.u64 [%0], 1;" ::"l"(peer_flag) : "memory");
        }
    }
    stamp_end(initiator, iters, rec);
    stamps_out(initiator, rec, ts);
}

/* One LL8 (P == 8) or LL16 packet per hop from registers (cchan_memory_channel_write/
 * read_packet_llP): the payload is the round-trip count, checked on every hop. */
template <int P>
__global__ void k_ll_word_pingpong(const __grid_constant__ cchan_memory_channel_t ch,
                                   uint32_t flag0, int initiator, int warm, int iters, int rec,
                                   uint64_t *ts, unsigned long long *errors) {
    uint32_t bad = 0;
    for (int i = -warm; i < iters; i++) {
        const uint32_t flag = flag0 + (uint32_t)(i + warm);
        for (int side = 0; side < 2; side++) {
            if ((side == 0) == (initiator != 0)) {
                if (initiator) stamp(true, i, rec);
                if constexpr (P == 8)
                    cchan_memory_channel_write_packet_ll8(&ch, CB_WORD_PKT_OFF, flag * 3u, flag);
                else
                    cchan_memory_channel_write_packet_ll16(&ch, CB_WORD16_PKT_OFF,
                                                           (uint64_t)flag * 0x100000003ull, flag);
            } else if constexpr (P == 8) {
                uint32_t got = 0;
                cchan_memory_channel_read_packet_ll8(&ch, CB_WORD_PKT_OFF, flag, &got);
                bad += got != flag * 3u;
            } else {
                uint64_t got = 0;
                cchan_memory_channel_read_packet_ll16(&ch, CB_WORD16_PKT_OFF, flag, &got);
                bad += got != (uint64_t)flag * 0x100000003ull;
            }
        }
    }
    stamp_end(initiator, iters, rec);
    stamps_out(initiator, rec, ts);
    if (bad) atomicAdd(errors, (unsigned long long)bad);
}

struct ll_args {
    cchan_memory_channel_t ch; /* remote: the peer's pkt; recv: our pkt; local: our data */
    uint64_t bytes, chunk;     /* payload, and payload per block (a multiple of 16) */
    uint32_t flag0;            /* flag of the first (warmup) round trip; then +1 per round trip */
    int initiator, warm, iters, rec;
    uint64_t *ts;
};

/* Block b moves payload [b*chunk, +pl) as packets at pkt offset CB_PKT_OFF + 2*b*chunk, the same
 * partition on both sides; raw variants are the same loops written without cchan. */
template <int P, bool RAW>
__device__ __forceinline__ void ll_send(const cchan_memory_channel_t &ch, uint64_t pk, uint64_t po,
                                        uint64_t pl, uint32_t flag, uint32_t t, uint32_t nt) {
    if constexpr (RAW) {
        uint8_t *dst = ch.remote + pk;
        const uint32_t *src = (const uint32_t *)(ch.local + CB_SRC_OFF + po);
        if constexpr (P == 8) {
            for (uint64_t i = t; i < (pl + 3) / 4; i += nt)
                asm volatile("st.volatile.global.v2.u32 [%0], {%1,%2};" ::"l"(dst + 8 * i),
                             "r"(src[i]), "r"(flag)
                             : "memory");
        } else {
            for (uint64_t i = t; i < (pl + 7) / 8; i += nt)
                asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(dst + 16 * i),
                             "r"(src[2 * i]), "r"(flag), "r"(src[2 * i + 1]), "r"(flag)
                             : "memory");
        }
    } else {
        if constexpr (P == 8)
            cchan_memory_channel_put_packets_ll8(&ch, pk, CB_SRC_OFF + po, pl, flag, t, nt);
        else
            cchan_memory_channel_put_packets_ll16(&ch, pk, CB_SRC_OFF + po, pl, flag, t, nt);
    }
}

template <int P, bool RAW>
__device__ __forceinline__ void ll_recv(const cchan_memory_channel_t &ch, uint64_t pk, uint64_t po,
                                        uint64_t pl, uint32_t flag, uint32_t t, uint32_t nt) {
    if constexpr (RAW) {
        const uint8_t *src = ch.recv + pk;
        uint32_t *dst = (uint32_t *)(ch.local + CB_DST_OFF + po);
        if constexpr (P == 8) {
            for (uint64_t i = t; i < (pl + 3) / 4; i += nt) {
                uint32_t d, f;
                do {
                    asm volatile("ld.volatile.global.v2.u32 {%0,%1}, [%2];"
                                 : "=r"(d), "=r"(f)
                                 : "l"(src + 8 * i)
                                 : "memory");
                } while (f != flag);
                dst[i] = d;
            }
        } else {
            for (uint64_t i = t; i < (pl + 7) / 8; i += nt) {
                uint32_t d0, f0, d1, f1;
                do {
                    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                                 : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
                                 : "l"(src + 16 * i)
                                 : "memory");
                } while (f0 != flag || f1 != flag);
                dst[2 * i] = d0;
                dst[2 * i + 1] = d1;
            }
        }
    } else {
        if constexpr (P == 8)
            cchan_memory_channel_read_packets_ll8(&ch, pk, CB_DST_OFF + po, pl, flag, t, nt);
        else
            cchan_memory_channel_read_packets_ll16(&ch, pk, CB_DST_OFF + po, pl, flag, t, nt);
    }
}

/* A round trip ends when every thread of the block has its packets: the __syncthreads() after the
 * receive is part of the message, and it also keeps a block from overwriting packets the peer's
 * block has not read yet. */
template <int P, bool RAW> __global__ void k_ll_pingpong(const __grid_constant__ ll_args a) {
    const uint32_t t = threadIdx.x, nt = blockDim.x;
    const uint64_t po = (uint64_t)blockIdx.x * a.chunk;
    const uint64_t pl = po < a.bytes ? (a.bytes - po < a.chunk ? a.bytes - po : a.chunk) : 0;
    const uint64_t pk = CB_PKT_OFF + 2 * po;
    const bool on = a.initiator && t == 0;
    for (int i = -a.warm; i < a.iters; i++) {
        const uint32_t flag = a.flag0 + (uint32_t)(i + a.warm);
        if (a.initiator) {
            stamp(on, i, a.rec);
            ll_send<P, RAW>(a.ch, pk, po, pl, flag, t, nt);
            ll_recv<P, RAW>(a.ch, pk, po, pl, flag, t, nt);
            __syncthreads();
        } else {
            ll_recv<P, RAW>(a.ch, pk, po, pl, flag, t, nt);
            __syncthreads();
            ll_send<P, RAW>(a.ch, pk, po, pl, flag, t, nt);
        }
    }
    stamp_end(on, a.iters, a.rec);
    stamps_out(a.initiator, a.rec, a.ts);
}

/* LL bandwidth: rank 0 streams messages to rank 1, alternating between two packet slots. Block b of
 * the receiver acknowledges each message it has read (a relaxed store of the message's flag into
 * the sender's ack word b); block b of the sender reuses a slot only when the message that last
 * used it is acknowledged. The initiator stamps the start of each message, so the median
 * per-message time is the steady-state time of one message over the whole grid. */
template <int P, bool RAW> __global__ void k_ll_stream(const __grid_constant__ ll_args a) {
    const uint32_t t = threadIdx.x, nt = blockDim.x;
    const uint64_t po = (uint64_t)blockIdx.x * a.chunk;
    const uint64_t pl = po < a.bytes ? (a.bytes - po < a.chunk ? a.bytes - po : a.chunk) : 0;
    const bool on = a.initiator && t == 0;
    volatile uint64_t *my_ack = (volatile uint64_t *)(a.ch.recv + CB_ACK_OFF) + blockIdx.x;
    volatile uint64_t *peer_ack = (volatile uint64_t *)(a.ch.remote + CB_ACK_OFF) + blockIdx.x;
    const uint32_t last = a.flag0 + (uint32_t)(a.warm + a.iters) - 1;
    for (int i = -a.warm; i < a.iters; i++) {
        const uint32_t flag = a.flag0 + (uint32_t)(i + a.warm);
        const uint64_t pk = CB_PKT_OFF + (flag & 1u) * CB_LL_SLOT + 2 * po;
        if (a.initiator) {
            stamp(on, i, a.rec);
            /* The first two messages of a run find both slots free: the last run ended when all its
             * messages were acknowledged. */
            if (t == 0 && i + a.warm >= 2)
                while (*my_ack + 2 < flag) {}
            __syncthreads();
            ll_send<P, RAW>(a.ch, pk, po, pl, flag, t, nt);
        } else {
            ll_recv<P, RAW>(a.ch, pk, po, pl, flag, t, nt);
            __syncthreads();
            if (t == 0) *peer_ack = flag;
        }
    }
    if (a.initiator && t == 0)
        while (*my_ack < last) {}
    stamp_end(on, a.iters, a.rec);
    stamps_out(a.initiator, a.rec, a.ts);
}

/* Port-channel ping-pong: put_signal of `bytes` (or a bare signal when bytes == 0), then wait. */
__global__ void k_port_pingpong(const __grid_constant__ cchan_port_channel_t ch, uint64_t bytes,
                                int initiator, int warm, int iters, int rec, uint64_t *ts) {
    for (int i = -warm; i < iters; i++) {
        if (initiator) {
            stamp(true, i, rec);
            if (bytes)
                cchan_port_channel_put_signal(&ch, CB_DST_OFF, CB_SRC_OFF, bytes);
            else
                cchan_port_channel_signal(&ch);
            cchan_port_channel_wait(&ch);
        } else {
            cchan_port_channel_wait(&ch);
            if (bytes)
                cchan_port_channel_put_signal(&ch, CB_DST_OFF, CB_SRC_OFF, bytes);
            else
                cchan_port_channel_signal(&ch);
        }
    }
    stamp_end(initiator, iters, rec);
    cchan_port_channel_flush(&ch);
    stamps_out(initiator, rec, ts);
}

/* Flush latency: one thread, an optional put of `bytes`, then a flush, per iteration (rank 0
 * alone). */
__global__ void k_port_flush(const __grid_constant__ cchan_port_channel_t ch, uint64_t bytes,
                             int warm, int iters, int rec, uint64_t *ts) {
    for (int i = -warm; i < iters; i++) {
        stamp(true, i, rec);
        if (bytes) cchan_port_channel_put(&ch, CB_DST_OFF, CB_SRC_OFF, bytes);
        cchan_port_channel_flush(&ch);
    }
    stamp_end(true, iters, rec);
    stamps_out(true, rec, ts);
}

/* Baseline for proxied signals: the GPU stores a request count into host-mapped memory, a CPU
 * thread of this rank forwards it into the peer's host-mapped counter, which the peer GPU polls. */
__global__ void k_relay_pingpong(uint64_t *req, const uint64_t *inbound, uint64_t base,
                                 int initiator, int warm, int iters, int rec, uint64_t *ts) {
    for (int i = -warm; i < iters; i++) {
        uint64_t v = base + (uint64_t)(i + warm) + 1;
        if (initiator) {
            stamp(true, i, rec);
            raw_st_release_sys(req, v);
            while (raw_ld_acquire_sys(inbound) < v) {}
        } else {
            while (raw_ld_acquire_sys(inbound) < v) {}
            raw_st_release_sys(req, v);
        }
    }
    stamp_end(initiator, iters, rec);
    stamps_out(initiator, rec, ts);
}

/* FIFO request rate: `count` signals (or 8-byte puts), then one flush. */
__global__ void k_fifo_rate(const __grid_constant__ cchan_port_channel_t ch, int puts,
                            uint64_t count) {
    for (uint64_t k = 0; k < count; k++) {
        if (puts)
            cchan_port_channel_put(&ch, CB_DST_OFF, CB_SRC_OFF, 8);
        else
            cchan_port_channel_signal(&ch);
    }
    cchan_port_channel_flush(&ch);
}

/* Baseline: the same number of 8-byte entries through a plain ring in host-mapped memory to a CPU
 * thread that only consumes them; ends when the consumer has taken the last one. */
__global__ void k_raw_ring(uint64_t *ring, const uint64_t *tail, uint64_t seq0, uint64_t count,
                           uint32_t slots) {
    uint64_t cached = raw_ld_acquire_sys(tail);
    for (uint64_t k = 0; k < count; k++) {
        uint64_t idx = seq0 + k;
        while (idx >= cached + slots) cached = raw_ld_acquire_sys(tail);
        raw_st_release_sys(&ring[idx & (slots - 1)], idx + 1);
    }
    while (raw_ld_acquire_sys(tail) < seq0 + count) {}
}

/* ================================================================ host helpers */

static uint32_t seed_of(const gpu_t *g, int rank) {
    return g->ctx->seed + 0x9e3779b9u * (uint32_t)(rank + 1) + 0x632be5abu * (uint32_t)g->phase;
}

static int in_pair(const gpu_t *g) { return g->rank < 2; }

static void gsync(gpu_t *g, const char *what) {
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

static void fill(gpu_t *g, uint8_t *p, uint64_t bytes, uint32_t seed) {
    uint64_t nw = (bytes + 3) / 4;
    k_fill<<<grid_for(nw), 256, 0, g->s>>>((uint32_t *)p, nw, seed);
    CK_LAUNCH();
}

/* Mismatching bytes (words counted once) of p[0, bytes) against the pattern at src_off. */
static int64_t verify(gpu_t *g, const uint8_t *p, uint64_t bytes, uint32_t seed, uint64_t src_off,
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

static void ts_ensure(gpu_t *g, size_t words) {
    if (words <= g->ts_words) return;
    if (g->d_ts) CK(cudaFree(g->d_ts));
    CK(cudaMalloc(&g->d_ts, words * sizeof(uint64_t)));
    g->ts_words = words;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* ---- ping-pong statistics from the initiator's stamps: one-way = round trip / 2 */

static void pingpong_stats(gpu_t *g, int blocks, int rec, int iters, double scale, cb_stats_t *st) {
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

/* Launches a ping-pong on ranks 0 (initiator) and 1 at once (solo: rank 0 alone); rank 0 gets the
 * statistics, scaled (0.5: one way). launch(initiator, rec, smem) enqueues the kernel on g->s.
 * Every rank calls this. */
template <typename L>
static void pingpong(gpu_t *g, int blocks, int iters, double scale, const char *what, L launch,
                     cb_stats_t *st, bool solo = false) {
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

/* ================================================================ setup and teardown */

static void port_setup(gpu_t *g) {
    if (g->port_ready) return;
    cb_ctx_t *ctx = g->ctx;
    cb_check(ctx, cchan_sem_set_create(g->comm, 3, CCHAN_SEM_HOST_MAPPED, &g->psems),
             "cchan_sem_set_create(host-mapped)");
    cchan_proxy_config_t pcfg = CCHAN_PROXY_CONFIG_INIT;
    cb_check(ctx, cchan_proxy_create(g->comm, &pcfg, &g->proxy), "cchan_proxy_create");
    g->pch = (cchan_port_channel_t *)calloc((size_t)g->nranks, sizeof(*g->pch));
    if (!g->pch) cb_die(ctx, "out of memory");
    for (int r = 0; r < g->nranks; r++) {
        if (r == g->rank) continue;
        cb_check(ctx,
                 cchan_port_channel_create(g->proxy, CCHAN_TRANSPORT_AUTO, g->psems, r, 0,
                                           g->peer_data[r], g->data, &g->pch[r]),
                 "cchan_port_channel_create");
    }
    if (g->peer >= 0)
        cb_check(ctx,
                 cchan_port_channel_create(g->proxy, CCHAN_TRANSPORT_AUTO, g->psems, g->peer, 1,
                                           g->peer_data[g->peer], g->data, &g->rate_ch),
                 "cchan_port_channel_create(rate)");
    cb_check(ctx, cchan_proxy_start(g->proxy), "cchan_proxy_start");
    CK(cudaSetDevice(g->dev)); /* the runtime may have switched devices on this thread */
    cb_barrier(ctx);
    g->port_ready = 1;
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

    /* Which GPU each rank drives, as this process numbers them. */
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
        snprintf(ctx->device, sizeof ctx->device, "%s (ranks 0 and 1 share one GPU)", names[0]);
    else
        snprintf(ctx->device, sizeof ctx->device, "%s x%d", names[0], g->nranks);
    free(names);
    int optin = 0;
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, g->dev));
    optin -= (int)CB_CAL_BYTES; /* the stamping kernels' static shared memory (cb_cal) */
    g->rec_cap = optin / (int)sizeof(uint64_t) - 2;
    CK(cudaFuncSetAttribute(k_sem_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    CK(cudaFuncSetAttribute(k_flag_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    CK(cudaFuncSetAttribute(k_sem_value_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_flag_mode_pingpong<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_flag_mode_pingpong<2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_flag_mode_pingpong<3>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_flag_mode_pingpong<4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_red_flag_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_ll_word_pingpong<8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_ll_word_pingpong<16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_ll_pingpong<8, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_ll_pingpong<8, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_ll_pingpong<16, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_ll_pingpong<16, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_relaxed_flag_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_ll_stream<8, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_ll_stream<8, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_ll_stream<16, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_ll_stream<16, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            optin));
    CK(cudaFuncSetAttribute(k_port_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    CK(cudaFuncSetAttribute(k_port_flush, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    CK(cudaFuncSetAttribute(k_relay_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));

    /* Buffers: large enough for every sweep this run makes. */
    const cb_opts_t *o = &ctx->opt;
    uint64_t need = 64 * CB_MIB;
    uint64_t top = o->max_bytes ? o->max_bytes : 1ull << 30;
    if ((o->tests & (CB_MEM_BW | CB_PORT_BW)) && top > need) need = top;
    uint64_t mb = o->matrix_bytes ? o->matrix_bytes : 256 * CB_MIB;
    if ((o->tests & CB_MATRIX) && mb > need) need = mb;
    g->data_bytes = (need + 2 * CB_MIB - 1) / (2 * CB_MIB) * (2 * CB_MIB);
    g->pkt_bytes = CB_PKT_OFF + 2 * CB_LL_SLOT + 2 * CB_MIB;
    cb_check(ctx, cchan_mem_alloc(g->comm, g->data_bytes, 0, &g->data), "cchan_mem_alloc(data)");
    cb_check(ctx, cchan_mem_alloc(g->comm, g->pkt_bytes, 0, &g->pkt), "cchan_mem_alloc(pkt)");
    g->d_data = (uint8_t *)cchan_mem_ptr(g->data);
    g->d_pkt = (uint8_t *)cchan_mem_ptr(g->pkt);
    g->peer_data = (cchan_mem_t **)calloc((size_t)g->nranks, sizeof(cchan_mem_t *));
    g->peer_pkt = (cchan_mem_t **)calloc((size_t)g->nranks, sizeof(cchan_mem_t *));
    g->mch = (cchan_memory_channel_t *)calloc((size_t)g->nranks, sizeof(cchan_memory_channel_t));
    if (!g->peer_data || !g->peer_pkt || !g->mch) cb_die(ctx, "out of memory");
    cb_check(ctx, cchan_mem_exchange(g->comm, g->data, g->peer_data), "cchan_mem_exchange(data)");
    cb_check(ctx, cchan_mem_exchange(g->comm, g->pkt, g->peer_pkt), "cchan_mem_exchange(pkt)");
    cb_check(ctx, cchan_sem_set_create(g->comm, 2, 0, &g->msems), "cchan_sem_set_create");
    for (int r = 0; r < g->nranks; r++) {
        if (r == g->rank) continue;
        cb_check(ctx,
                 cchan_memory_channel_init(g->comm, g->msems, r, 0, g->peer_data[r], g->data, NULL,
                                           &g->mch[r]),
                 "cchan_memory_channel_init");
    }
    if (g->peer >= 0)
        cb_check(ctx,
                 cchan_memory_channel_init(g->comm, g->msems, g->peer, 1, g->peer_pkt[g->peer],
                                           g->data, g->pkt, &g->lch),
                 "cchan_memory_channel_init(ll)");
    CK(cudaSetDevice(g->dev));

    CK(cudaMalloc(&g->d_err, 2 * sizeof(unsigned long long)));
    CK(cudaHostAlloc(&g->h_pinned, (64 + CB_RING_SLOTS) * sizeof(uint64_t),
                     cudaHostAllocMapped | cudaHostAllocPortable));
    memset(g->h_pinned, 0, (64 + CB_RING_SLOTS) * sizeof(uint64_t));
    CK(cudaHostGetDevicePointer((void **)&g->d_pinned, g->h_pinned, 0));

    /* Timer resolution decides between per-iteration and per-batch latency statistics. */
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

    /* The copy-engine baseline: cudaMemcpyPeerAsync where the driver accepts imported memory for it
     * (every rank tries a small copy to its next rank), else cudaMemcpyAsync, the same engine. */
    int peer_api = 1;
    if (!(getenv("CCHAN_BENCH_CE") && !strcmp(getenv("CCHAN_BENCH_CE"), "memcpy"))) {
        int next = (g->rank + 1) % g->nranks;
        int dst_dev = g->dev_of[next] >= 0 ? g->dev_of[next] : g->dev;
        cudaError_t e = cudaMemcpyPeerAsync(g->mch[next].remote + CB_DST_OFF, dst_dev, g->d_data,
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
    cb_barrier(ctx);
}

static void gpu_teardown(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    cb_barrier(ctx);
    if (g->port_ready) {
        cb_check(ctx, cchan_proxy_stop(g->proxy, 10000), "cchan_proxy_stop");
        cb_check(ctx, cchan_proxy_destroy(g->proxy), "cchan_proxy_destroy");
        cb_check(ctx, cchan_sem_set_destroy(g->psems), "cchan_sem_set_destroy");
    }
    cb_check(ctx, cchan_sem_set_destroy(g->msems), "cchan_sem_set_destroy");
    for (int r = 0; r < g->nranks; r++) {
        if (r == g->rank) continue;
        if (g->peer_data[r]) cb_check(ctx, cchan_mem_destroy(g->peer_data[r]), "cchan_mem_destroy");
        if (g->peer_pkt[r]) cb_check(ctx, cchan_mem_destroy(g->peer_pkt[r]), "cchan_mem_destroy");
    }
    cb_barrier(ctx); /* no peer maps our memory any more */
    cb_check(ctx, cchan_mem_destroy(g->data), "cchan_mem_destroy");
    cb_check(ctx, cchan_mem_destroy(g->pkt), "cchan_mem_destroy");
    CK(cudaFree(g->d_err));
    if (g->d_ts) CK(cudaFree(g->d_ts));
    CK(cudaFreeHost(g->h_pinned));
    CK(cudaEventDestroy(g->e0));
    CK(cudaEventDestroy(g->e1));
    CK(cudaStreamDestroy(g->s));
    free(g->peer_data);
    free(g->peer_pkt);
    free(g->mch);
    free(g->pch);
    free(g->dev_of);
    free(g->bus);
}

/* ================================================================ bandwidth */

static const char *ce_name(const gpu_t *g) {
    return g->ce_peer_api ? "cudaMemcpyPeerAsync" : "cudaMemcpyAsync";
}

static void ce_copy(gpu_t *g, int b, uint64_t bytes) {
    const cchan_memory_channel_t *ch = &g->mch[b];
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
    const cchan_memory_channel_t &ch = g->mch[b];
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
        k_port_put<<<1, 1, 0, g->s>>>(g->pch[b], bytes, chunk, n, kind == BW_PORT_FLUSH);
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

static void default_grids(const cb_opts_t *o, int *grids, int *n) {
    static const int def[] = {16, 32, 66, 132};
    if (o->ngrids) {
        memcpy(grids, o->grids, sizeof(int) * (size_t)o->ngrids);
        *n = o->ngrids;
    } else {
        memcpy(grids, def, sizeof def);
        *n = 4;
    }
}

static void run_mem_bw(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    const cb_opts_t *o = &ctx->opt;
    uint64_t sizes[CB_MAX_SIZES];
    int ns = cb_sweep(o, 4096, 1ull << 30, 2, 1, g->data_bytes, sizes);
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

/* ================================================================ memory-channel latency */

static void fill_pingpong(gpu_t *g, uint64_t bytes) {
    g->row_seq++;
    if (in_pair(g)) {
        fill(g, g->d_data + CB_SRC_OFF, bytes, seed_of(g, g->rank));
        fill(g, g->d_data + CB_DST_OFF, bytes, CB_POISON_SEED ^ (uint32_t)g->row_seq);
        gsync(g, "fill");
    }
}

/* Both pair ranks check what they received (a stream only delivers to rank 1). */
static int64_t check_pingpong(gpu_t *g, uint64_t bytes, const char *what,
                              bool receiver_only = false) {
    int64_t mine = -1;
    if (in_pair(g) && (!receiver_only || g->rank == 1))
        mine = verify(g, g->d_data + CB_DST_OFF, bytes, seed_of(g, g->peer), CB_SRC_OFF, what);
    return cb_errors_combine(g->ctx, mine);
}

static void row_init(cb_row_t *row, const char *test, const char *op, const char *base_op,
                     const char *units, uint64_t bytes, int blocks, int threads) {
    memset(row, 0, sizeof *row);
    snprintf(row->test, sizeof row->test, "%s", test);
    snprintf(row->op, sizeof row->op, "%s", op);
    snprintf(row->base_op, sizeof row->base_op, "%s", base_op);
    snprintf(row->units, sizeof row->units, "%s", units);
    row->src = 0;
    row->dst = 1;
    row->bytes = bytes;
    row->blocks = blocks;
    row->threads = threads;
    row->errors = -1;
}

/* One LL ping-pong (or stream) of `bytes` with `blocks` blocks; returns errors, fills st (rank 0).
 */
template <int P, bool RAW>
static int64_t ll_run(gpu_t *g, uint64_t bytes, int blocks, int threads, int iters, int warm,
                      double scale, cb_stats_t *st, bool stream = false) {
    fill_pingpong(g, bytes);
    ll_args a;
    memset(&a, 0, sizeof a);
    a.ch = g->lch;
    a.bytes = bytes;
    a.chunk = ((bytes + (uint64_t)blocks - 1) / (uint64_t)blocks + 15) / 16 * 16;
    a.flag0 = g->ll_flag;
    a.warm = warm;
    a.iters = iters;
    a.ts = g->d_ts;
    g->ll_flag += (uint32_t)(warm + iters);
    pingpong(
        g, blocks, iters, scale, "LL ping-pong",
        [&](int initiator, int rec, size_t smem) {
            a.initiator = initiator;
            a.rec = rec;
            a.ts = g->d_ts;
            if (stream)
                k_ll_stream<P, RAW><<<blocks, threads, smem, g->s>>>(a);
            else
                k_ll_pingpong<P, RAW><<<blocks, threads, smem, g->s>>>(a);
        },
        st);
    return check_pingpong(g, bytes, RAW ? "raw LL check" : "cchan LL check", stream);
}

static int ll_threads(uint64_t bytes, int payload, int cap) {
    uint64_t pk = (bytes + (uint64_t)payload - 1) / (uint64_t)payload;
    uint64_t t = (pk + 31) / 32 * 32;
    if (t < 32) t = 32;
    return (int)(t > (uint64_t)cap ? (uint64_t)cap : t);
}

static void run_mem_lat(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    const cb_opts_t *o = &ctx->opt;
    if (g->shared_gpu) {
        cb_printf(
            ctx,
            "#\n# mem-lat: skipped: ranks 0 and 1 share one GPU, and kernels of two processes do "
            "not run at the same time on one GPU (without MPS), so a ping-pong cannot run\n");
        return;
    }
    const int iters = cb_opt_int(o->iters, 10000), warm = cb_opt_int(o->warmup, 1000);
    const int tcap = o->threads ? o->threads : 512;
    g->phase++;

    /* ---- signal -> wait */
    char title[512];
    snprintf(
        title, sizeof title,
        "mem-lat signal->wait: one-way latency (round trip / 2), ns, %d round trips in one kernel "
        "after %d warmup\n#   cchan_memory_channel_signal/wait (one thread each side) vs raw flag "
        "ping-pong (st.release.sys / ld.acquire.sys on a flag in peer memory)\n#   timer: %s",
        iters, warm, ctx->timer);
    cb_lat_header(ctx, title, "cchan signal->wait", "raw flag");
    {
        cb_row_t row;
        row_init(&row, "mem-lat", "signal-wait", "raw-flag", "ns", 0, 1, 1);
        uint64_t base = g->flag_epoch;
        g->flag_epoch += (uint64_t)(warm + iters);
        uint64_t *my_flag = (uint64_t *)(g->d_pkt + CB_FLAG_OFF);
        uint64_t *peer_flag =
            g->peer >= 0
                ? (uint64_t *)((uint8_t *)cchan_mem_ptr(g->peer_pkt[g->peer]) + CB_FLAG_OFF)
                : NULL;
        pingpong(
            g, 1, iters, 0.5, "raw flag ping-pong",
            [&](int initiator, int rec, size_t smem) {
                k_flag_pingpong<<<1, 1, smem, g->s>>>(my_flag, peer_flag, base, initiator, warm,
                                                      iters, rec, g->d_ts);
            },
            &row.base);
        const cchan_memory_channel_t ch = g->peer >= 0 ? g->mch[g->peer] : g->lch;
        pingpong(
            g, 1, iters, 0.5, "signal ping-pong",
            [&](int initiator, int rec, size_t smem) {
                k_sem_pingpong<<<1, 1, smem, g->s>>>(ch, initiator, warm, iters, rec, g->d_ts);
            },
            &row.value);
        cb_lat_row(ctx, &row);
        /* The same kernel on the store path (what PCIe peers without peer atomics use): the
         * handle's outbound counter set, continuing from the count already in the peer's counter.
         */
        {
            cb_row_t st_row;
            row_init(&st_row, "mem-lat", "signal-wait-store-path", "raw-flag", "ns", 0, 1, 1);
            st_row.base = row.base;
            uint64_t *d_out = NULL;
            cchan_memory_channel_t sch = ch;
            if (in_pair(g)) {
                CK(cudaMalloc(&d_out, sizeof *d_out));
                CK(cudaMemcpy(d_out, ch.sem.remote_inbound, sizeof *d_out, cudaMemcpyDefault));
                sch.sem.outbound = d_out;
            }
            pingpong(
                g, 1, iters, 0.5, "signal ping-pong, store path",
                [&](int initiator, int rec, size_t smem) {
                    k_sem_pingpong<<<1, 1, smem, g->s>>>(sch, initiator, warm, iters, rec, g->d_ts);
                },
                &st_row.value);
            if (d_out) CK(cudaFree(d_out));
            cb_printf(ctx, "#   the same with signals stored from an outbound count (the path for "
                           "peers without native atomics):\n");
            cb_lat_row(ctx, &st_row);
        }
        {
            cb_row_t reg_row;
            row_init(&reg_row, "mem-lat", "signal-wait-value", "raw-flag", "ns", 0, 1, 1);
            reg_row.base = row.base;
            pingpong(
                g, 1, iters, 0.5, "signal ping-pong, expected count in a register",
                [&](int initiator, int rec, size_t smem) {
                    k_sem_value_pingpong<<<1, 1, smem, g->s>>>(ch, initiator, warm, iters, rec,
                                                               g->d_ts);
                },
                &reg_row.value);
            cb_printf(ctx, "#   the same with the expected count in a register "
                           "(cchan_memory_channel_wait_value):\n");
            cb_lat_row(ctx, &reg_row);
        }
        /* For scale: what the fences cost here (a relaxed flag orders nothing; it is no signal). */
        cb_row_t rel;
        row_init(&rel, "mem-lat", "relaxed-flag", "raw-flag", "ns", 0, 1, 1);
        rel.base = row.base;
        base = g->flag_epoch;
        g->flag_epoch += (uint64_t)(warm + iters);
        my_flag = (uint64_t *)(g->d_pkt + CB_RELAXED_FLAG_OFF);
        peer_flag =
            g->peer >= 0
                ? (uint64_t *)((uint8_t *)cchan_mem_ptr(g->peer_pkt[g->peer]) + CB_RELAXED_FLAG_OFF)
                : NULL;
        pingpong(
            g, 1, iters, 0.5, "relaxed flag ping-pong",
            [&](int initiator, int rec, size_t smem) {
                k_relaxed_flag_pingpong<<<1, 1, smem, g->s>>>(my_flag, peer_flag, base, initiator,
                                                              warm, iters, rec, g->d_ts);
            },
            &rel.value);
        cb_printf(ctx,
                  "#   means over all round trips: cchan %.0f ns, raw %.0f ns one way; for scale, "
                  "the same flag "
                  "ping-pong without fences (relaxed, orders nothing):\n",
                  row.value.mean, row.base.mean);
        cb_lat_row(ctx, &rel);
        {
            static const char *const mode_name[] = {
                "", "flag-release-relaxed-poll", "flag-relaxed-acquire-poll",
                "flag-release-poll-then-fence", "flag-fences-split"};
            for (int mode = 1; mode <= 4; mode++) {
                cb_row_t mr;
                row_init(&mr, "mem-lat", mode_name[mode], "raw-flag", "ns", 0, 1, 1);
                mr.base = row.base;
                uint64_t mbase = g->flag_epoch;
                g->flag_epoch += (uint64_t)(warm + iters);
                uint64_t *mf = (uint64_t *)(g->d_pkt + CB_FLAG_OFF);
                uint64_t *pf =
                    g->peer >= 0
                        ? (uint64_t *)((uint8_t *)cchan_mem_ptr(g->peer_pkt[g->peer]) + CB_FLAG_OFF)
                        : NULL;
                pingpong(
                    g, 1, iters, 0.5, mode_name[mode],
                    [&](int initiator, int rec, size_t smem) {
                        switch (mode) {
                        case 1:
                            k_flag_mode_pingpong<1><<<1, 1, smem, g->s>>>(
                                mf, pf, mbase, initiator, warm, iters, rec, g->d_ts);
                            break;
                        case 2:
                            k_flag_mode_pingpong<2><<<1, 1, smem, g->s>>>(
                                mf, pf, mbase, initiator, warm, iters, rec, g->d_ts);
                            break;
                        case 3:
                            k_flag_mode_pingpong<3><<<1, 1, smem, g->s>>>(
                                mf, pf, mbase, initiator, warm, iters, rec, g->d_ts);
                            break;
                        default:
                            k_flag_mode_pingpong<4><<<1, 1, smem, g->s>>>(
                                mf, pf, mbase, initiator, warm, iters, rec, g->d_ts);
                            break;
                        }
                    },
                    &mr.value);
                cb_printf(ctx, "#   raw flag, %s:\n", mode_name[mode]);
                cb_lat_row(ctx, &mr);
            }
        }

        /* The two mechanisms cchan's signal and LL fast paths rest on, each in the same run. */
        cb_row_t red;
        row_init(&red, "mem-lat", "raw-red-add-flag", "raw-flag", "ns", 0, 1, 1);
        red.base = row.base;
        my_flag = (uint64_t *)(g->d_pkt + CB_RED_FLAG_OFF);
        peer_flag =
            g->peer >= 0
                ? (uint64_t *)((uint8_t *)cchan_mem_ptr(g->peer_pkt[g->peer]) + CB_RED_FLAG_OFF)
                : NULL;
        base = g->red_count;
        g->red_count += (uint64_t)(warm + iters);
        pingpong(
            g, 1, iters, 0.5, "remote-add flag ping-pong",
            [&](int initiator, int rec, size_t smem) {
                k_red_flag_pingpong<<<1, 1, smem, g->s>>>(my_flag, peer_flag, base, initiator, warm,
                                                          iters, rec, g->d_ts);
            },
            &red.value);
        cb_printf(ctx, "#   raw flag raised by a posted remote add (red.release.sys) instead of a "
                       "store:\n");
        cb_lat_row(ctx, &red);

        /* The same raw ping-pong on the semaphore's own counters: separates what cchan's code
         * costs from what the counters' addresses cost (where a word lives, in which L2 slice,
         * moves a one-way hop by tens of ns). The semaphore's expected counts are advanced by the
         * same number of signals afterwards, so later waits stay in step. */
        if (in_pair(g)) {
            cb_row_t at;
            row_init(&at, "mem-lat", "raw-red-add-at-semaphore", "raw-flag", "ns", 0, 1, 1);
            at.base = row.base;
            uint64_t sem_base = 0, expected = 0;
            CK(cudaMemcpy(&sem_base, ch.sem.inbound, sizeof sem_base, cudaMemcpyDefault));
            pingpong(
                g, 1, iters, 0.5, "remote-add flag ping-pong on the semaphore's counters",
                [&](int initiator, int rec, size_t smem) {
                    k_red_flag_pingpong<<<1, 1, smem, g->s>>>(ch.sem.inbound, ch.sem.remote_inbound,
                                                              sem_base, initiator, warm, iters, rec,
                                                              g->d_ts);
                },
                &at.value);
            CK(cudaMemcpy(&expected, ch.sem.expected, sizeof expected, cudaMemcpyDefault));
            expected += (uint64_t)(warm + iters);
            CK(cudaMemcpy(ch.sem.expected, &expected, sizeof expected, cudaMemcpyDefault));
            cb_printf(ctx, "#   the same remote-add ping-pong on the semaphore's own counters "
                           "(cchan's addresses, no cchan code):\n");
            cb_lat_row(ctx, &at);
            /* cchan's signal->wait against that: the same words, so what is left is cchan's code
             * (a word's address alone moves a hop by up to ~150 ns on H200: cchan-flag-probe). */
            cb_row_t same;
            row_init(&same, "mem-lat", "signal-wait-same-words", "raw-red-add-at-semaphore", "ns",
                     0, 1, 1);
            same.value = row.value;
            same.base = at.value;
            cb_printf(ctx,
                      "#   cchan signal->wait (above) vs that raw ping-pong on the same words:\n");
            cb_lat_row(ctx, &same);
        }

        /* One LL8 and one LL16 packet per hop from registers, against the relaxed flag above. */
        for (int p16 = 0; p16 < 2; p16++) {
            cb_row_t word;
            row_init(&word, "mem-lat", p16 ? "ll16-one-packet" : "ll8-one-packet", "relaxed-flag",
                     "ns", p16 ? 16 : 8, 1, 1);
            word.base = rel.value;
            const uint32_t flag0 = g->ll_flag;
            g->ll_flag += (uint32_t)(warm + iters);
            unsigned long long *d_err = NULL;
            CK(cudaMalloc(&d_err, sizeof *d_err));
            CK(cudaMemset(d_err, 0, sizeof *d_err));
            const cchan_memory_channel_t lch = g->lch;
            pingpong(
                g, 1, iters, 0.5, p16 ? "LL16 one-packet ping-pong" : "LL8 one-packet ping-pong",
                [&](int initiator, int rec, size_t smem) {
                    if (p16)
                        k_ll_word_pingpong<16><<<1, 1, smem, g->s>>>(lch, flag0, initiator, warm,
                                                                     iters, rec, g->d_ts, d_err);
                    else
                        k_ll_word_pingpong<8><<<1, 1, smem, g->s>>>(lch, flag0, initiator, warm,
                                                                    iters, rec, g->d_ts, d_err);
                },
                &word.value);
            unsigned long long h_err = 0;
            CK(cudaMemcpy(&h_err, d_err, sizeof h_err, cudaMemcpyDeviceToHost));
            CK(cudaFree(d_err));
            word.errors = cb_errors_combine(ctx, in_pair(g) ? (int64_t)h_err : -1);
            cb_printf(ctx,
                      "#   one LL%d packet per hop from registers (write/read_packet_ll%d) vs the "
                      "relaxed flag above:\n",
                      p16 ? 16 : 8, p16 ? 16 : 8);
            cb_lat_row(ctx, &word);
        }
    }

    /* ---- LL8 / LL16 latency, one block */
    uint64_t sizes[CB_MAX_SIZES];
    int ns = cb_sweep(o, 8, 64 * 1024, 2, 1, 64 * 1024, sizes);
    for (int p = 0; p < 2; p++) {
        snprintf(title, sizeof title,
                 "mem-lat %s: one-way latency of an LL%s message (ping-pong / 2), ns, one block, "
                 "%d round "
                 "trips after %d warmup\n#   cchan put_packets/read_packets vs raw LL%s kernel "
                 "(same packets "
                 "and loops, no cchan); GB/s = bytes / one-way median",
                 p ? "ll16" : "ll8", p ? "16" : "8", iters, warm, p ? "16" : "8");
        cb_lat_header(ctx, title, p ? "cchan LL16" : "cchan LL8", p ? "raw LL16" : "raw LL8");
        for (int si = 0; si < ns; si++) {
            cb_row_t row;
            int th = ll_threads(sizes[si], p ? 8 : 4, tcap);
            row_init(&row, "mem-lat", p ? "ll16" : "ll8", p ? "raw-ll16" : "raw-ll8", "ns",
                     sizes[si], 1, th);
            int64_t e1, e2;
            if (p) {
                e2 = ll_run<16, true>(g, sizes[si], 1, th, iters, warm, 0.5, &row.base);
                e1 = ll_run<16, false>(g, sizes[si], 1, th, iters, warm, 0.5, &row.value);
            } else {
                e2 = ll_run<8, true>(g, sizes[si], 1, th, iters, warm, 0.5, &row.base);
                e1 = ll_run<8, false>(g, sizes[si], 1, th, iters, warm, 0.5, &row.value);
            }
            row.errors = e1 < 0 ? e2 : (e2 < 0 ? e1 : e1 + e2);
            cb_lat_row(ctx, &row);
        }
    }

    /* ---- LL bandwidth: a stream of messages over a full grid, bytes / per-message time */
    ns = cb_sweep(o, 64 * 1024, CB_LL_MAX, 4, 64 * 1024, CB_LL_MAX, sizes);
    int grids[CB_MAX_GRIDS], ng;
    default_grids(o, grids, &ng);
    int blocks = grids[ng - 1];
    const int bw_iters = o->iters >= 0 ? o->iters : 1000,
              bw_warm = o->warmup >= 0 ? o->warmup : 100;
    const int bw_reps = cb_opt_int(o->reps, 3);
    double *vv = (double *)calloc((size_t)bw_reps, sizeof(double));
    double *vb = (double *)calloc((size_t)bw_reps, sizeof(double));
    if (!vv || !vb) cb_die(ctx, "out of memory");
    for (int p = 0; p < 2; p++) {
        snprintf(title, sizeof title,
                 "mem-lat %s-bw: LL%s bandwidth, rank 0 streams %d messages to rank 1 (two packet "
                 "slots, per-block "
                 "acks), %d blocks x %d threads;\n#   GB/s = payload bytes x messages / stream "
                 "time, median of %d "
                 "reps; cchan put/read_packets vs raw LL%s loops (same acks)",
                 p ? "ll16" : "ll8", p ? "16" : "8", bw_iters, blocks, tcap, bw_reps,
                 p ? "16" : "8");
        cb_bw_header(ctx, title, p ? "cchan LL16" : "cchan LL8", p ? "raw LL16" : "raw LL8",
                     "GB/s");
        for (int si = 0; si < ns; si++) {
            cb_row_t row;
            row_init(&row, "mem-lat", p ? "ll16-bw" : "ll8-bw", p ? "raw-ll16-bw" : "raw-ll8-bw",
                     "GB/s", sizes[si], blocks, tcap);
            const double B = (double)sizes[si];
            int64_t e1 = -1, e2 = -1;
            for (int r = 0; r < bw_reps; r++) {
                cb_stats_t lv, lb;
                int64_t x2, x1;
                if (p) {
                    x2 = ll_run<16, true>(g, sizes[si], blocks, tcap, bw_iters, bw_warm, 1.0, &lb,
                                          true);
                    x1 = ll_run<16, false>(g, sizes[si], blocks, tcap, bw_iters, bw_warm, 1.0, &lv,
                                           true);
                } else {
                    x2 = ll_run<8, true>(g, sizes[si], blocks, tcap, bw_iters, bw_warm, 1.0, &lb,
                                         true);
                    x1 = ll_run<8, false>(g, sizes[si], blocks, tcap, bw_iters, bw_warm, 1.0, &lv,
                                          true);
                }
                /* lv.mean: stream time / messages, from the first timed message to the last ack */
                vv[r] = lv.mean > 0 ? B / lv.mean : 0;
                vb[r] = lb.mean > 0 ? B / lb.mean : 0;
                e1 = x1 < 0 ? e1 : (e1 < 0 ? x1 : e1 + x1);
                e2 = x2 < 0 ? e2 : (e2 < 0 ? x2 : e2 + x2);
            }
            cb_stats(vv, bw_reps, &row.value);
            cb_stats(vb, bw_reps, &row.base);
            row.errors = e1 < 0 ? e2 : (e2 < 0 ? e1 : e1 + e2);
            cb_bw_row(ctx, &row);
        }
    }
    free(vv);
    free(vb);
}

/* ================================================================ port channel */

static uint64_t port_chunk(const cb_opts_t *o, uint64_t bytes) {
    if (o->chunk_none) return bytes ? bytes : 1;
    return o->chunk ? o->chunk : 4 * CB_MIB;
}

static void run_port_bw(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    const cb_opts_t *o = &ctx->opt;
    port_setup(g);
    uint64_t sizes[CB_MAX_SIZES];
    int ns = cb_sweep(o, 64 * 1024, 1ull << 30, 2, 1, g->data_bytes, sizes);
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
            row_init(&row, "port-bw", ops[k], "", "GB/s", sizes[si], 1, 1);
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

typedef struct relay_arg {
    const uint64_t *req;      /* written by our GPU */
    uint64_t *remote_inbound; /* the peer's counter, mapped here */
    uint64_t last, target;
} relay_arg_t;

static void *relay_main(void *p) {
    relay_arg_t *a = (relay_arg_t *)p;
    while (a->last < a->target) {
        uint64_t v = __atomic_load_n(a->req, __ATOMIC_ACQUIRE);
        if (v > a->last) {
            __atomic_store_n(a->remote_inbound, v, __ATOMIC_RELEASE);
            a->last = v;
        } else {
            cpu_relax();
        }
    }
    return NULL;
}

typedef struct ring_arg {
    const uint64_t *ring;
    uint64_t *tail;
    uint64_t seq0, count;
} ring_arg_t;

static void *ring_main(void *p) {
    ring_arg_t *a = (ring_arg_t *)p;
    for (uint64_t idx = a->seq0; idx < a->seq0 + a->count; idx++) {
        while (__atomic_load_n(&a->ring[idx & (CB_RING_SLOTS - 1)], __ATOMIC_ACQUIRE) != idx + 1)
            cpu_relax();
        __atomic_store_n(a->tail, idx + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* Requests per second (millions) through one proxy thread: signals or 8-byte puts, then a flush. */
static void fifo_rate(gpu_t *g, int puts, uint64_t count, int reps, cb_stats_t *st,
                      int64_t *errors) {
    memset(st, 0, sizeof *st);
    fill_pingpong(g, 8);
    cb_barrier(g->ctx);
    double *v = (double *)malloc(sizeof(double) * (size_t)reps);
    if (!v) cb_die(g->ctx, "out of memory");
    if (g->rank == 0) {
        k_fifo_rate<<<1, 1, 0, g->s>>>(g->rate_ch, puts, count / 10 + 1); /* warmup */
        CK_LAUNCH();
        gsync(g, "FIFO warmup");
        for (int r = 0; r < reps; r++) {
            CK(cudaEventRecord(g->e0, g->s));
            k_fifo_rate<<<1, 1, 0, g->s>>>(g->rate_ch, puts, count);
            CK_LAUNCH();
            CK(cudaEventRecord(g->e1, g->s));
            gsync(g, "FIFO rate");
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, g->e0, g->e1));
            v[r] = (double)count / ((double)ms * 1e3); /* Mreq/s */
        }
        cb_stats(v, reps, st);
    }
    cb_barrier(g->ctx);
    int64_t mine = -1;
    if (puts && g->rank == 1)
        mine = verify(g, g->d_data + CB_DST_OFF, 8, seed_of(g, 0), CB_SRC_OFF, "FIFO put check");
    *errors = cb_errors_combine(g->ctx, mine);
    free(v);
}

static void raw_ring_rate(gpu_t *g, uint64_t count, int reps, cb_stats_t *st) {
    memset(st, 0, sizeof *st);
    if (g->rank == 0) {
        double *v = (double *)malloc(sizeof(double) * (size_t)reps);
        if (!v) cb_die(g->ctx, "out of memory");
        uint64_t *h_ring = g->h_pinned + 64, *d_ring = g->d_pinned + 64;
        uint64_t *h_tail = g->h_pinned + 32, *d_tail = g->d_pinned + 32;
        for (int r = -1; r < reps; r++) {
            uint64_t n = r < 0 ? count / 10 + 1 : count; /* r = -1: warmup */
            ring_arg_t a = {h_ring, h_tail, g->ring_seq, n};
            pthread_t th;
            if (pthread_create(&th, NULL, ring_main, &a) != 0)
                cb_die(g->ctx, "pthread_create failed");
            CK(cudaEventRecord(g->e0, g->s));
            k_raw_ring<<<1, 1, 0, g->s>>>(d_ring, d_tail, g->ring_seq, n, CB_RING_SLOTS);
            CK_LAUNCH();
            CK(cudaEventRecord(g->e1, g->s));
            gsync(g, "raw ring");
            pthread_join(th, NULL);
            g->ring_seq += n;
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, g->e0, g->e1));
            if (r >= 0) v[r] = (double)n / ((double)ms * 1e3);
        }
        cb_stats(v, reps, st);
        free(v);
    }
    cb_barrier(g->ctx);
}

static void run_port_lat(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    const cb_opts_t *o = &ctx->opt;
    port_setup(g);
    g->phase++;
    const int iters = cb_opt_int(o->iters, 10000), warm = cb_opt_int(o->warmup, 1000);
    char title[512];
    if (g->shared_gpu) {
        cb_printf(ctx,
                  "#\n# port-lat ping-pongs: skipped: ranks 0 and 1 share one GPU (kernels of two "
                  "processes do not run at once)\n");
    } else {
        snprintf(title, sizeof title,
                 "port-lat: one-way latency (round trip / 2), ns, %d round trips in one kernel "
                 "after %d warmup; "
                 "one GPU thread each side\n#   baseline: raw CPU relay (GPU stores a count to "
                 "host-mapped "
                 "memory, a CPU thread forwards it to the peer's host-mapped counter, the peer GPU "
                 "polls)\n"
                 "#   timer: %s",
                 iters, warm, ctx->timer);
        cb_lat_header(ctx, title, "cchan port channel", "raw CPU relay");
        /* the baseline first: a CPU thread per rank forwards its GPU's requests */
        cb_stats_t relay;
        {
            cchan_semaphore_t sem;
            memset(&sem, 0, sizeof sem);
            relay_arg_t ra;
            memset(&ra, 0, sizeof ra);
            if (in_pair(g)) {
                cb_check(ctx, cchan_sem_set_get(g->psems, g->peer, 2, &sem), "cchan_sem_set_get");
                ra.req = g->h_pinned;
                ra.remote_inbound = cchan_sem_set_remote_inbound(g->psems, g->peer, 2);
                if (!ra.remote_inbound) cb_die(ctx, "cchan_sem_set_remote_inbound returned NULL");
                ra.last = g->relay_count;
                ra.target = g->relay_count + (uint64_t)(warm + iters);
            }
            pthread_t th;
            if (in_pair(g) && pthread_create(&th, NULL, relay_main, &ra) != 0)
                cb_die(ctx, "pthread_create failed");
            uint64_t base = g->relay_count;
            g->relay_count += (uint64_t)(warm + iters);
            pingpong(
                g, 1, iters, 0.5, "raw CPU relay",
                [&](int initiator, int rec, size_t smem) {
                    k_relay_pingpong<<<1, 1, smem, g->s>>>(g->d_pinned, sem.inbound, base,
                                                           initiator, warm, iters, rec, g->d_ts);
                },
                &relay);
            if (in_pair(g)) pthread_join(th, NULL);
        }
        cb_row_t sig, put;
        row_init(&sig, "port-lat", "signal-wait", "cpu-relay", "ns", 0, 1, 1);
        row_init(&put, "port-lat", "put-signal-wait", "cpu-relay", "ns", 8, 1, 1);
        sig.base = put.base = relay;
        const cchan_port_channel_t pch = g->peer >= 0 ? g->pch[g->peer] : g->rate_ch;
        pingpong(
            g, 1, iters, 0.5, "port signal ping-pong",
            [&](int initiator, int rec, size_t smem) {
                k_port_pingpong<<<1, 1, smem, g->s>>>(pch, 0, initiator, warm, iters, rec, g->d_ts);
            },
            &sig.value);
        cb_lat_row(ctx, &sig);
        fill_pingpong(g, 8);
        pingpong(
            g, 1, iters, 0.5, "port put_signal ping-pong",
            [&](int initiator, int rec, size_t smem) {
                k_port_pingpong<<<1, 1, smem, g->s>>>(pch, 8, initiator, warm, iters, rec, g->d_ts);
            },
            &put.value);
        put.errors = check_pingpong(g, 8, "port put_signal check");
        cb_lat_row(ctx, &put);
        cb_printf(
            ctx,
            "#   breakdown (one-way medians): CPU relay floor %.0f ns (GPU->host-mapped store, CPU "
            "poll, CPU "
            "store into the peer's host-mapped counter, GPU poll)\n"
            "#     + %.0f ns FIFO trigger and proxy dispatch of a signal (signal - relay)\n"
            "#     + %.0f ns for the 8-byte put ordered before the signal (put_signal - signal)\n"
            "#   means over all round trips: relay %.0f, signal %.0f, put_signal %.0f ns\n",
            relay.median, sig.value.median - relay.median, put.value.median - sig.value.median,
            relay.mean, sig.value.mean, put.value.mean);
    }

    /* ---- flush latency (rank 0 alone) vs a CPU echo through host-mapped memory */
    snprintf(title, sizeof title,
             "port-lat flush: time per iteration of [put of N bytes] + flush, ns, one GPU thread "
             "on rank 0, %d "
             "iterations after %d warmup\n#   baseline: raw CPU echo (GPU stores a count to "
             "host-mapped memory, a "
             "CPU thread copies it to a host-mapped word the GPU polls)",
             iters, warm);
    cb_lat_header(ctx, title, "cchan put+flush", "raw CPU echo");
    {
        cb_stats_t echo;
        relay_arg_t ra;
        memset(&ra, 0, sizeof ra);
        ra.req = g->h_pinned;
        ra.remote_inbound = g->h_pinned + 8;
        ra.last = g->relay_count;
        ra.target = g->relay_count + (uint64_t)(warm + iters);
        uint64_t base = g->relay_count;
        g->relay_count += (uint64_t)(warm + iters);
        pthread_t th;
        if (g->rank == 0 && pthread_create(&th, NULL, relay_main, &ra) != 0)
            cb_die(ctx, "pthread_create failed");
        pingpong(
            g, 1, iters, 1.0, "raw CPU echo",
            [&](int initiator, int rec, size_t smem) {
                k_relay_pingpong<<<1, 1, smem, g->s>>>(g->d_pinned, g->d_pinned + 8, base,
                                                       initiator, warm, iters, rec, g->d_ts);
            },
            &echo, true);
        if (g->rank == 0) pthread_join(th, NULL);
        for (int k = 0; k < 2; k++) {
            cb_row_t row;
            row_init(&row, "port-lat", k ? "put8-flush" : "flush", "cpu-echo", "ns", k ? 8 : 0, 1,
                     1);
            row.base = echo;
            fill_pingpong(g, 8);
            const cchan_port_channel_t fch = g->rank == 0 ? g->pch[1] : g->rate_ch;
            pingpong(
                g, 1, iters, 1.0, "port flush",
                [&](int initiator, int rec, size_t smem) {
                    (void)initiator;
                    k_port_flush<<<1, 1, smem, g->s>>>(fch, k ? 8 : 0, warm, iters, rec, g->d_ts);
                },
                &row.value, true);
            if (k) {
                int64_t mine = -1;
                if (g->rank == 1)
                    mine = verify(g, g->d_data + CB_DST_OFF, 8, seed_of(g, 0), CB_SRC_OFF,
                                  "flush put check");
                row.errors = cb_errors_combine(ctx, mine);
            }
            cb_lat_row(ctx, &row);
        }
    }

    /* ---- FIFO request rate (rank 0 alone) */
    const uint64_t nsig = 100000, nput = 10000;
    const int reps = cb_opt_int(o->reps, 5);
    snprintf(title, sizeof title,
             "port-lat fifo: requests per second through one proxy thread (one GPU thread pushes N "
             "requests, "
             "then a flush), Mreq/s\n#   vs a raw ring in host-mapped memory drained by a CPU "
             "thread that "
             "does nothing else; median of %d reps",
             reps);
    cb_bw_header(ctx, title, "cchan FIFO", "raw ring", "Mreq/s");
    cb_stats_t ring;
    raw_ring_rate(g, nsig, reps, &ring);
    for (int k = 0; k < 2; k++) {
        cb_row_t row;
        row_init(&row, "port-lat", k ? "fifo-put8" : "fifo-signal", "raw-ring", "Mreq/s", k ? 8 : 0,
                 1, 1);
        fifo_rate(g, k, k ? nput : nsig, reps, &row.value, &row.errors);
        row.base = ring;
        cb_printf(ctx, "#   %s x %llu:\n", k ? "8-byte puts" : "signals",
                  (unsigned long long)(k ? nput : nsig));
        cb_bw_row(ctx, &row);
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

static void run_matrix(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    const cb_opts_t *o = &ctx->opt;
    port_setup(g);
    g->phase++;
    const int n = g->nranks;
    uint64_t bytes = o->matrix_bytes ? o->matrix_bytes : 256 * CB_MIB;
    if (bytes > g->data_bytes) bytes = g->data_bytes;
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
                row_init(&row, "matrix", k ? "port-put" : "memory-put", k ? ce_name(g) : "sm-copy",
                         "GB/s", bytes, k ? 1 : grid, k ? 1 : threads);
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

extern "C" int cb_run_gpu(cb_ctx_t *ctx) {
    gpu_t g;
    gpu_setup(&g, ctx);
    cb_printf(ctx, "# backend: cuda; %s; data buffers %llu MiB per rank\n", ctx->device,
              (unsigned long long)(g.data_bytes >> 20));
    if (ctx->opt.tests & CB_MEM_BW) run_mem_bw(&g);
    if (ctx->opt.tests & CB_MEM_LAT) run_mem_lat(&g);
    if (ctx->opt.tests & CB_PORT_BW) run_port_bw(&g);
    if (ctx->opt.tests & CB_PORT_LAT) run_port_lat(&g);
    if (ctx->opt.tests & CB_MATRIX) run_matrix(&g);
    gpu_teardown(&g);
    if (ctx->opt.tests & CB_SWITCH_BW) cb_switch_gpu(ctx); /* own buffers: after the teardown */
    return 0;
}
