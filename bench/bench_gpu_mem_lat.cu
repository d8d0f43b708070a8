/* cchan-bench on GPUs: mem-lat, memory-channel latency (signal->wait, LL packets) against raw
 * flag and LL ping-pongs in the same run, and LL bandwidth. Every ping-pong runs inside one kernel
 * on each GPU (bench_gpu.h: the stamps). */
#include "bench_gpu.h"

/* ================================================================ kernels */

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

/* ================================================================ host */

void mem_lat_attrs(gpu_t *g, int smem) {
    CK(cudaFuncSetAttribute(k_sem_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(k_flag_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(k_sem_value_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_flag_mode_pingpong<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_flag_mode_pingpong<2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_flag_mode_pingpong<3>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_flag_mode_pingpong<4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_red_flag_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_ll_word_pingpong<8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_ll_word_pingpong<16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_ll_pingpong<8, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_ll_pingpong<8, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_ll_pingpong<16, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_ll_pingpong<16, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_relaxed_flag_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_ll_stream<8, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_ll_stream<8, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_ll_stream<16, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
    CK(cudaFuncSetAttribute(k_ll_stream<16, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            smem));
}

/* One LL ping-pong (or stream) of `bytes` with `blocks` blocks; returns errors, fills st (rank 0).
 */
template <int P, bool RAW>
static int64_t ll_run(gpu_t *g, uint64_t bytes, int blocks, int threads, int iters, int warm,
                      double scale, cb_stats_t *st, bool stream = false) {
    fill_pingpong(g, bytes);
    ll_args a;
    memset(&a, 0, sizeof a);
    a.ch = g->ch.lch;
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

/* What the mem-lat rows share: the sweep's counts and the rows later rows compare with. */
typedef struct lat_ctx {
    int iters, warm, tcap;
    cchan_memory_channel_t ch; /* signal->wait: to the pair partner */
    cb_row_t sig;              /* signal->wait against the raw flag */
    cb_stats_t relaxed;        /* the relaxed (fenceless) flag */
} lat_ctx_t;

/* A word of the pair partner's pkt buffer, mapped here (NULL off the pair). */
static uint64_t *peer_pkt_word(gpu_t *g, uint64_t off) {
    return g->peer >= 0 ? (uint64_t *)((uint8_t *)cchan_mem_ptr(g->ch.peer_pkt[g->peer]) + off)
                        : NULL;
}

/* The next warm + iters flag values (every rank advances the same). */
static uint64_t flag_epochs(gpu_t *g, const lat_ctx_t *L) {
    uint64_t base = g->flag_epoch;
    g->flag_epoch += (uint64_t)(L->warm + L->iters);
    return base;
}

/* signal->wait against the raw flag; then on the store path and with the count in a register. */
static void lat_signal(gpu_t *g, lat_ctx_t *L) {
    cb_ctx_t *ctx = g->ctx;
    const int iters = L->iters, warm = L->warm;
    cb_row_t &row = L->sig;
    cb_row_init(&row, "mem-lat", "signal-wait", "raw-flag", "ns", 0, 1, 1);
    uint64_t base = flag_epochs(g, L);
    uint64_t *my_flag = (uint64_t *)(g->d_pkt + CB_FLAG_OFF),
             *peer_flag = peer_pkt_word(g, CB_FLAG_OFF);
    pingpong(
        g, 1, iters, 0.5, "raw flag ping-pong",
        [&](int initiator, int rec, size_t smem) {
            k_flag_pingpong<<<1, 1, smem, g->s>>>(my_flag, peer_flag, base, initiator, warm, iters,
                                                  rec, g->d_ts);
        },
        &row.base);
    const cchan_memory_channel_t ch = L->ch;
    pingpong(
        g, 1, iters, 0.5, "signal ping-pong",
        [&](int initiator, int rec, size_t smem) {
            k_sem_pingpong<<<1, 1, smem, g->s>>>(ch, initiator, warm, iters, rec, g->d_ts);
        },
        &row.value);
    cb_lat_row(ctx, &row);
    /* The same kernel on the store path (what PCIe peers without peer atomics use): the handle's
     * outbound counter set, continuing from the count already in the peer's counter. */
    cb_row_t st_row;
    cb_row_init(&st_row, "mem-lat", "signal-wait-store-path", "raw-flag", "ns", 0, 1, 1);
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
    cb_row_t reg_row;
    cb_row_init(&reg_row, "mem-lat", "signal-wait-value", "raw-flag", "ns", 0, 1, 1);
    reg_row.base = row.base;
    pingpong(
        g, 1, iters, 0.5, "signal ping-pong, expected count in a register",
        [&](int initiator, int rec, size_t smem) {
            k_sem_value_pingpong<<<1, 1, smem, g->s>>>(ch, initiator, warm, iters, rec, g->d_ts);
        },
        &reg_row.value);
    cb_printf(ctx, "#   the same with the expected count in a register "
                   "(cchan_memory_channel_wait_value):\n");
    cb_lat_row(ctx, &reg_row);
}

/* For scale: what the fences cost here (a relaxed flag orders nothing; it is no signal); then each
 * half of the fences alone. */
static void lat_flag_modes(gpu_t *g, lat_ctx_t *L) {
    cb_ctx_t *ctx = g->ctx;
    const int iters = L->iters, warm = L->warm;
    cb_row_t rel;
    cb_row_init(&rel, "mem-lat", "relaxed-flag", "raw-flag", "ns", 0, 1, 1);
    rel.base = L->sig.base;
    uint64_t base = flag_epochs(g, L);
    uint64_t *my_flag = (uint64_t *)(g->d_pkt + CB_RELAXED_FLAG_OFF);
    uint64_t *peer_flag = peer_pkt_word(g, CB_RELAXED_FLAG_OFF);
    pingpong(
        g, 1, iters, 0.5, "relaxed flag ping-pong",
        [&](int initiator, int rec, size_t smem) {
            k_relaxed_flag_pingpong<<<1, 1, smem, g->s>>>(my_flag, peer_flag, base, initiator, warm,
                                                          iters, rec, g->d_ts);
        },
        &rel.value);
    cb_printf(ctx,
              "#   means over all round trips: cchan %.0f ns, raw %.0f ns one way; for scale, "
              "the same flag "
              "ping-pong without fences (relaxed, orders nothing):\n",
              L->sig.value.mean, L->sig.base.mean);
    cb_lat_row(ctx, &rel);
    L->relaxed = rel.value;
    static const char *const mode_name[] = {"", "flag-release-relaxed-poll",
                                            "flag-relaxed-acquire-poll",
                                            "flag-release-poll-then-fence", "flag-fences-split"};
    for (int mode = 1; mode <= 4; mode++) {
        cb_row_t mr;
        cb_row_init(&mr, "mem-lat", mode_name[mode], "raw-flag", "ns", 0, 1, 1);
        mr.base = L->sig.base;
        uint64_t mbase = flag_epochs(g, L);
        uint64_t *mf = (uint64_t *)(g->d_pkt + CB_FLAG_OFF), *pf = peer_pkt_word(g, CB_FLAG_OFF);
        pingpong(
            g, 1, iters, 0.5, mode_name[mode],
            [&](int initiator, int rec, size_t smem) {
                switch (mode) {
                case 1:
                    k_flag_mode_pingpong<1>
                        <<<1, 1, smem, g->s>>>(mf, pf, mbase, initiator, warm, iters, rec, g->d_ts);
                    break;
                case 2:
                    k_flag_mode_pingpong<2>
                        <<<1, 1, smem, g->s>>>(mf, pf, mbase, initiator, warm, iters, rec, g->d_ts);
                    break;
                case 3:
                    k_flag_mode_pingpong<3>
                        <<<1, 1, smem, g->s>>>(mf, pf, mbase, initiator, warm, iters, rec, g->d_ts);
                    break;
                default:
                    k_flag_mode_pingpong<4>
                        <<<1, 1, smem, g->s>>>(mf, pf, mbase, initiator, warm, iters, rec, g->d_ts);
                    break;
                }
            },
            &mr.value);
        cb_printf(ctx, "#   raw flag, %s:\n", mode_name[mode]);
        cb_lat_row(ctx, &mr);
    }
}

/* The two mechanisms cchan's signal and LL fast paths rest on, each in the same run: a flag raised
 * by a posted remote add, and the same on the semaphore's own counters. */
static void lat_remote_add(gpu_t *g, lat_ctx_t *L) {
    cb_ctx_t *ctx = g->ctx;
    const int iters = L->iters, warm = L->warm;
    cb_row_t red;
    cb_row_init(&red, "mem-lat", "raw-red-add-flag", "raw-flag", "ns", 0, 1, 1);
    red.base = L->sig.base;
    uint64_t *my_flag = (uint64_t *)(g->d_pkt + CB_RED_FLAG_OFF);
    uint64_t *peer_flag = peer_pkt_word(g, CB_RED_FLAG_OFF);
    uint64_t base = g->red_count;
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
    /* The same raw ping-pong on the semaphore's own counters: separates what cchan's code costs
     * from what the counters' addresses cost (where a word lives, in which L2 slice, moves a
     * one-way hop by tens of ns). The semaphore's expected counts are advanced by the same number
     * of signals afterwards, so later waits stay in step. Every rank takes part (the ping-pong
     * is collective); only the pair touches the channel. */
    const cchan_memory_channel_t ch = L->ch;
    cb_row_t at;
    cb_row_init(&at, "mem-lat", "raw-red-add-at-semaphore", "raw-flag", "ns", 0, 1, 1);
    at.base = L->sig.base;
    uint64_t sem_base = 0, expected = 0;
    if (in_pair(g)) CK(cudaMemcpy(&sem_base, ch.sem.inbound, sizeof sem_base, cudaMemcpyDefault));
    pingpong(
        g, 1, iters, 0.5, "remote-add flag ping-pong on the semaphore's counters",
        [&](int initiator, int rec, size_t smem) {
            k_red_flag_pingpong<<<1, 1, smem, g->s>>>(ch.sem.inbound, ch.sem.remote_inbound,
                                                      sem_base, initiator, warm, iters, rec,
                                                      g->d_ts);
        },
        &at.value);
    if (in_pair(g)) {
        CK(cudaMemcpy(&expected, ch.sem.expected, sizeof expected, cudaMemcpyDefault));
        expected += (uint64_t)(warm + iters);
        CK(cudaMemcpy(ch.sem.expected, &expected, sizeof expected, cudaMemcpyDefault));
    }
    cb_printf(ctx, "#   the same remote-add ping-pong on the semaphore's own counters "
                   "(cchan's addresses, no cchan code):\n");
    cb_lat_row(ctx, &at);
    /* cchan's signal->wait against that: the same words, so what is left is cchan's code (a
     * word's address alone moves a hop: cchan-flag-probe, docs/tuning.md). */
    cb_row_t same;
    cb_row_init(&same, "mem-lat", "signal-wait-same-words", "raw-red-add-at-semaphore", "ns", 0, 1,
                1);
    same.value = L->sig.value;
    same.base = at.value;
    cb_printf(ctx, "#   cchan signal->wait (above) vs that raw ping-pong on the same words:\n");
    cb_lat_row(ctx, &same);
}

/* One LL8 and one LL16 packet per hop from registers, against the relaxed flag. */
static void lat_ll_word(gpu_t *g, lat_ctx_t *L) {
    cb_ctx_t *ctx = g->ctx;
    const int iters = L->iters, warm = L->warm;
    for (int p16 = 0; p16 < 2; p16++) {
        cb_row_t word;
        cb_row_init(&word, "mem-lat", p16 ? "ll16-one-packet" : "ll8-one-packet", "relaxed-flag",
                    "ns", p16 ? 16 : 8, 1, 1);
        word.base = L->relaxed;
        const uint32_t flag0 = g->ll_flag;
        g->ll_flag += (uint32_t)(warm + iters);
        unsigned long long *d_err = NULL;
        CK(cudaMalloc(&d_err, sizeof *d_err));
        CK(cudaMemset(d_err, 0, sizeof *d_err));
        const cchan_memory_channel_t lch = g->ch.lch;
        pingpong(
            g, 1, iters, 0.5, p16 ? "LL16 one-packet ping-pong" : "LL8 one-packet ping-pong",
            [&](int initiator, int rec, size_t smem) {
                if (p16)
                    k_ll_word_pingpong<16><<<1, 1, smem, g->s>>>(lch, flag0, initiator, warm, iters,
                                                                 rec, g->d_ts, d_err);
                else
                    k_ll_word_pingpong<8><<<1, 1, smem, g->s>>>(lch, flag0, initiator, warm, iters,
                                                                rec, g->d_ts, d_err);
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

/* LL8 / LL16 latency of whole messages, one block. */
static void lat_ll(gpu_t *g, const lat_ctx_t *L) {
    cb_ctx_t *ctx = g->ctx;
    const cb_opts_t *o = &ctx->opt;
    const int iters = L->iters, warm = L->warm;
    char title[512];
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
            int th = ll_threads(sizes[si], p ? 8 : 4, L->tcap);
            cb_row_init(&row, "mem-lat", p ? "ll16" : "ll8", p ? "raw-ll16" : "raw-ll8", "ns",
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
}

/* One LL stream measurement (cchan and raw) of `bytes` over `blocks`: GB/s into *v and *b, the
 * errors added into *e1 and *e2. */
static void ll_bw_once(gpu_t *g, int p16, uint64_t bytes, int blocks, int tcap, int iters, int warm,
                       double *v, double *b, int64_t *e1, int64_t *e2) {
    cb_stats_t lv, lb;
    int64_t x2, x1;
    if (p16) {
        x2 = ll_run<16, true>(g, bytes, blocks, tcap, iters, warm, 1.0, &lb, true);
        x1 = ll_run<16, false>(g, bytes, blocks, tcap, iters, warm, 1.0, &lv, true);
    } else {
        x2 = ll_run<8, true>(g, bytes, blocks, tcap, iters, warm, 1.0, &lb, true);
        x1 = ll_run<8, false>(g, bytes, blocks, tcap, iters, warm, 1.0, &lv, true);
    }
    /* lv.mean: stream time / messages, from the first timed message to the last ack */
    *v = lv.mean > 0 ? (double)bytes / lv.mean : 0;
    *b = lb.mean > 0 ? (double)bytes / lb.mean : 0;
    *e1 = x1 < 0 ? *e1 : (*e1 < 0 ? x1 : *e1 + x1);
    *e2 = x2 < 0 ? *e2 : (*e2 < 0 ? x2 : *e2 + x2);
}

/* LL bandwidth: a stream of messages over a full grid, bytes / per-message time. */
static void lat_ll_bw(gpu_t *g, const lat_ctx_t *L) {
    cb_ctx_t *ctx = g->ctx;
    const cb_opts_t *o = &ctx->opt;
    const int tcap = L->tcap;
    char title[512];
    uint64_t sizes[CB_MAX_SIZES];
    int ns = cb_sweep(o, 64 * 1024, CB_LL_MAX, 4, 64 * 1024, CB_LL_MAX, sizes);
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
            cb_row_init(&row, "mem-lat", p ? "ll16-bw" : "ll8-bw", p ? "raw-ll16-bw" : "raw-ll8-bw",
                        "GB/s", sizes[si], blocks, tcap);
            int64_t e1 = -1, e2 = -1;
            for (int r = 0; r < bw_reps; r++)
                ll_bw_once(g, p, sizes[si], blocks, tcap, bw_iters, bw_warm, &vv[r], &vb[r], &e1,
                           &e2);
            cb_stats(vv, bw_reps, &row.value);
            cb_stats(vb, bw_reps, &row.base);
            row.errors = e1 < 0 ? e2 : (e2 < 0 ? e1 : e1 + e2);
            cb_bw_row(ctx, &row);
        }
    }
    free(vv);
    free(vb);
}

void run_mem_lat(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    const cb_opts_t *o = &ctx->opt;
    if (g->time_sliced) {
        cb_printf(
            ctx,
            "#\n# mem-lat: skipped: ranks 0 and 1 share one GPU without MPS, where kernels of two "
            "processes do not run at the same time, so a ping-pong cannot run (start the MPS "
            "daemon: nvidia-cuda-mps-control -d)\n");
        return;
    }
    lat_ctx_t L;
    memset(&L, 0, sizeof L);
    L.iters = cb_opt_int(o->iters, 10000);
    L.warm = cb_opt_int(o->warmup, 1000);
    L.tcap = o->threads ? o->threads : 512;
    L.ch = g->peer >= 0 ? g->ch.mch[g->peer] : g->ch.lch;
    g->phase++;
    char title[512];
    snprintf(
        title, sizeof title,
        "mem-lat signal->wait: one-way latency (round trip / 2), ns, %d round trips in one kernel "
        "after %d warmup\n#   cchan_memory_channel_signal/wait (one thread each side) vs raw flag "
        "ping-pong (st.release.sys / ld.acquire.sys on a flag in peer memory)\n#   timer: %s",
        L.iters, L.warm, ctx->timer);
    cb_lat_header(ctx, title, "cchan signal->wait", "raw flag");
    lat_signal(g, &L);
    lat_flag_modes(g, &L);
    lat_remote_add(g, &L);
    lat_ll_word(g, &L);
    lat_ll(g, &L);
    lat_ll_bw(g, &L);
}
