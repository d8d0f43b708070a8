/* Memory channel, semaphores and barriers, 2 to 8 ranks (GPUs of their own or shared).
 *
 *   cchan-run -n N --timeout 600 build/test/gpu/test_memory_channel_gpu [--case NAME,...] [--list]
 *
 * Every rank owns three cchan_mem_alloc buffers, exchanged with every rank:
 *   L (1 GiB + 2 MiB)  source: filled with a per-(case, rank, iteration) pattern;
 *   D (1 GiB + 2 MiB)  destination: poisoned before each transfer, checked whole on the GPU;
 *   P (4 MiB)          LL packet buffer (the peer's put_packets land here).
 * Point-to-point cases run once per round of a round-robin pairing (gt_case GT_PAIRS), so every
 * pair of ranks meets (put_get_sizes, whose every transfer fills and checks 1 GiB, in the first
 * round only); both ranks of a pair act at once (each puts to the other), so every case
 * runs both directions.
 */
#include "gpu_test.h"

#include <math.h>

#define MC_BUF_BYTES (GT_GiB + 2 * GT_MiB)
#define MC_PKT_BYTES (4 * GT_MiB)
#define MC_GUARD 64u

typedef struct mc_env {
    cchan_mem_t *L, *D, *P;
    cchan_mem_t *peerL[GT_MAX_RANKS], *peerD[GT_MAX_RANKS], *peerP[GT_MAX_RANKS];
    uint8_t *l, *d, *p; /* local device pointers */
} mc_env_t;

static mc_env_t g_mc;

/* A memory channel to the peer over semaphore `idx` of `set`. */
static cchan_memory_channel_t mc_channel(gt_ctx_t *ctx, cchan_sem_set_t *set, int idx,
                                         const cchan_mem_t *remote, const cchan_mem_t *local,
                                         const cchan_mem_t *recv) {
    cchan_memory_channel_t ch;
    GT_CCHAN(
        cchan_memory_channel_init(ctx->comm, set, gt_peer(ctx), idx, remote, local, recv, &ch));
    return ch;
}

static cchan_sem_set_t *mc_sems(gt_ctx_t *ctx, int count) {
    cchan_sem_set_t *set = NULL;
    GT_CCHAN(cchan_sem_set_create(ctx->comm, count, 0, &set));
    return set;
}

/* Signals this side has sent: its outbound count, or, where signals are remote adds (no outbound
 * counter, semaphore.h), the peer's inbound counter, which only this side raises. */
__device__ unsigned long long mc_sent(const cchan_semaphore_t *s) {
    return s->outbound ? *(volatile uint64_t *)s->outbound
                       : *(volatile uint64_t *)s->remote_inbound;
}

/* Reads a semaphore's three counters: inbound, expected, signals sent. */
__global__ void k_sem_counters(cchan_semaphore_t s, unsigned long long *out) {
    out[0] = *(volatile uint64_t *)s.inbound;
    out[1] = *(volatile uint64_t *)s.expected;
    out[2] = mc_sent(&s);
}

static void mc_sem_counters(gt_ctx_t *ctx, const cchan_semaphore_t *s, unsigned long long out[3]) {
    unsigned long long *dev;
    GT_CUDA(cudaMalloc((void **)&dev, 3 * sizeof *dev));
    GT_LAUNCH(ctx, k_sem_counters, 1, 1, *s, dev);
    GT_CUDA(cudaMemcpyAsync(out, dev, 3 * sizeof *dev, cudaMemcpyDeviceToHost, ctx->stream));
    GT_SYNC(ctx);
    GT_CUDA(cudaFree(dev));
}

static void mc_expect_counters(gt_ctx_t *ctx, const char *what, const cchan_semaphore_t *s,
                               unsigned long long inbound, unsigned long long expected,
                               unsigned long long outbound) {
    unsigned long long c[3];
    mc_sem_counters(ctx, s, c);
    GT_EXPECT(ctx, c[0] == inbound && c[1] == expected && c[2] == outbound,
              "%s: semaphore counters inbound/expected/outbound = %llu/%llu/%llu, want "
              "%llu/%llu/%llu",
              what, c[0], c[1], c[2], inbound, expected, outbound);
}

/* ------------------------------------------------------------------ put / get, all sizes */

__global__ void k_mc_put(cchan_memory_channel_t ch, uint64_t remote_off, uint64_t local_off,
                         uint64_t bytes) {
    cchan_memory_channel_put(&ch, remote_off, local_off, bytes, gt_global_tid(),
                             gt_global_nthreads());
}

__global__ void k_mc_get(cchan_memory_channel_t ch, uint64_t remote_off, uint64_t local_off,
                         uint64_t bytes) {
    cchan_memory_channel_get(&ch, remote_off, local_off, bytes, gt_global_tid(),
                             gt_global_nthreads());
}

static void case_put_get_sizes(gt_ctx_t *ctx) {
    static const uint64_t sizes[] = {1,
                                     2,
                                     3,
                                     4,
                                     7,
                                     8,
                                     15,
                                     16,
                                     17,
                                     31,
                                     33,
                                     255,
                                     4095,
                                     4096,
                                     4097,
                                     65537,
                                     GT_MiB + 7,
                                     16 * GT_MiB + 1,
                                     64 * GT_MiB - 3,
                                     256 * GT_MiB + 13,
                                     GT_GiB};
    /* (source offset, destination offset): vec16 path, byte path (mismatch 7), vec16 with a head,
     * word path (mismatch 8), byte path with odd heads, vec16 at a 16-byte offset. */
    static const uint64_t offs[][2] = {{0, 0}, {1, 6}, {3, 19}, {4, 12}, {13, 30}, {16, 48}};
    static const struct {
        unsigned grid_mul, grid_add, block;
    } grids[] = {{0, 1, 32}, {0, 4, 128}, {1, 0, 512}, {2, 0, 256}, {0, 1, 1}};
    const uint64_t tag = gt_hash_name("put_get_sizes");
    cchan_sem_set_t *set = mc_sems(ctx, 1);
    const int peer = gt_peer(ctx);
    cchan_memory_channel_t ch_put = mc_channel(ctx, set, 0, g_mc.peerD[peer], g_mc.L, g_mc.P);
    cchan_memory_channel_t ch_get = mc_channel(ctx, set, 0, g_mc.peerL[peer], g_mc.D, g_mc.P);
    uint64_t iter = 0;
    int ran = 0, ok = 1;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0] && ok; si++) {
        uint64_t n = sizes[si];
        size_t noffs = n >= 64 * GT_MiB ? 3 : sizeof offs / sizeof offs[0];
        for (size_t oi = 0; oi < noffs && ok; oi++) {
            for (int op = 0; op < 2 && ok; op++, iter++) {
                uint64_t so = offs[oi][0], dof = offs[oi][1];
                size_t gi = iter % (sizeof grids / sizeof grids[0]);
                unsigned block = grids[gi].block;
                unsigned grid = grids[gi].grid_mul * ctx->num_sms + grids[gi].grid_add;
                if (n >= 16 * GT_MiB) { /* big transfers: full grids only */
                    block = 512;
                    grid = ctx->num_sms * (op ? 2 : 1);
                } else if (n >= GT_MiB && block == 1) {
                    block = 64;
                }
                uint64_t my_seed = gt_seed(tag, ctx->rank, iter);
                uint64_t peer_seed = gt_seed(tag, peer, iter);
                gt_fill(ctx, g_mc.l, MC_BUF_BYTES, my_seed);
                gt_poison(ctx, g_mc.d, MC_BUF_BYTES);
                GT_SYNC(ctx);
                gt_barrier(ctx); /* the peer's D is poisoned and its L filled */
                if (op == 0) {
                    GT_LAUNCH(ctx, k_mc_put, grid, block, ch_put, dof, so, n);
                } else {
                    GT_LAUNCH(ctx, k_mc_get, grid, block, ch_get, so, dof, n);
                }
                GT_SYNC(ctx);
                gt_barrier(ctx); /* the peer's put into my D has finished */
                char what[160];
                snprintf(what, sizeof what,
                         "%s of %llu bytes, src offset %llu, dst offset %llu, %ux%u "
                         "threads",
                         op ? "get" : "put", (unsigned long long)n, (unsigned long long)so,
                         (unsigned long long)dof, grid, block);
                /* put: my D got the peer's L; get: my D got the peer's L. Same check. */
                gt_check_buffer(ctx, g_mc.d, MC_BUF_BYTES, dof, n, peer_seed, so, what);
                ran++;
                ok = gt_all_ok(ctx); /* stop together at the first failure on either rank */
            }
        }
    }
    if (ctx->case_ok && ctx->rank == 0) gt_log(ctx, "put_get_sizes: %d transfers checked", ran);
    GT_CCHAN(cchan_sem_set_destroy(set));
}

/* ------------------------------------------------------------------ read_<T> / write_<T> */

#define RW_N 64
#define RW_U32_OFF(j) (1024u + 12u * (j))
#define RW_U64_OFF(j) (4096u + 24u * (j))
#define RW_F32_OFF(j) (8192u + 4u + 12u * (j))
#define RW_I32_OFF(j) (12288u + 4u + 8u * (j))
#define RW_F64_OFF(j) (16384u + 8u + 16u * (j))
#define RW_WINDOW 20480u

__host__ __device__ static inline uint32_t rw_u32(uint64_t seed, uint32_t j) {
    return (uint32_t)gt_mix64(seed + j) | 1u;
}
__host__ __device__ static inline uint64_t rw_u64(uint64_t seed, uint32_t j) {
    return gt_mix64(seed ^ (0xABCDull + j)) | (1ull << 63);
}
__host__ __device__ static inline int32_t rw_i32(uint64_t seed, uint32_t j) {
    return -(int32_t)((uint32_t)gt_mix64(seed + 77u * j) & 0x3fffffffu) - 1;
}

__global__ void k_mc_write_scalars(cchan_memory_channel_t ch, uint64_t seed, uint64_t tail_off) {
    uint32_t j = threadIdx.x;
    if (j >= RW_N) return;
    cchan_memory_channel_write_u32(&ch, RW_U32_OFF(j), rw_u32(seed, j));
    cchan_memory_channel_write_u64(&ch, RW_U64_OFF(j), rw_u64(seed, j));
    cchan_memory_channel_write_f32(&ch, RW_F32_OFF(j), gt_pattern_float(seed, j));
    cchan_memory_channel_write_i32(&ch, RW_I32_OFF(j), rw_i32(seed, j));
    cchan_memory_channel_write_f64(&ch, RW_F64_OFF(j),
                                   (double)gt_pattern_float(seed, j + 1000) / 3.0);
    if (j == 0) cchan_memory_channel_write_u64(&ch, tail_off, rw_u64(seed, 9999));
}

/* out[5 * j + k]: the five reads of slot j from the peer's L; out[5 * RW_N]: the tail u64. */
__global__ void k_mc_read_scalars(cchan_memory_channel_t ch, unsigned long long *out,
                                  uint64_t tail_off) {
    uint32_t j = threadIdx.x;
    if (j >= RW_N) return;
    out[5 * j + 0] = cchan_memory_channel_read_u32(&ch, RW_U32_OFF(j));
    out[5 * j + 1] = cchan_memory_channel_read_u64(&ch, RW_U64_OFF(j));
    out[5 * j + 2] = __float_as_uint(cchan_memory_channel_read_f32(&ch, RW_F32_OFF(j)));
    out[5 * j + 3] = (uint32_t)cchan_memory_channel_read_i32(&ch, RW_I32_OFF(j));
    out[5 * j + 4] =
        (unsigned long long)__double_as_longlong(cchan_memory_channel_read_f64(&ch, RW_F64_OFF(j)));
    if (j == 0) out[5 * RW_N] = cchan_memory_channel_read_u64(&ch, tail_off);
}

static void rw_place(uint8_t *img, uint64_t off, const void *v, size_t n) {
    memcpy(img + off, v, n);
}

static void case_read_write(gt_ctx_t *ctx) {
    const uint64_t tag = gt_hash_name("read_write");
    const int peer = gt_peer(ctx);
    const uint64_t tail_off = MC_BUF_BYTES - 8;
    cchan_sem_set_t *set = mc_sems(ctx, 1);
    cchan_memory_channel_t ch_w = mc_channel(ctx, set, 0, g_mc.peerD[peer], g_mc.L, g_mc.P);
    cchan_memory_channel_t ch_r = mc_channel(ctx, set, 0, g_mc.peerL[peer], g_mc.D, g_mc.P);
    unsigned long long *dev_out;
    const size_t nout = 5 * RW_N + 1;
    GT_CUDA(cudaMalloc((void **)&dev_out, nout * sizeof *dev_out));
    uint64_t my_seed = gt_seed(tag, ctx->rank, 0), peer_seed = gt_seed(tag, peer, 0);
    gt_fill(ctx, g_mc.l, MC_BUF_BYTES, my_seed);
    gt_poison(ctx, g_mc.d, MC_BUF_BYTES);
    GT_SYNC(ctx);
    gt_barrier(ctx);
    GT_LAUNCH(ctx, k_mc_write_scalars, 1, RW_N, ch_w, my_seed, tail_off);
    GT_LAUNCH(ctx, k_mc_read_scalars, 1, RW_N, ch_r, dev_out, tail_off);
    GT_SYNC(ctx);
    gt_barrier(ctx);

    /* Writes: the peer wrote its values into my D; everything else in the window stays poison. */
    uint8_t *want = (uint8_t *)malloc(RW_WINDOW), *got = (uint8_t *)malloc(RW_WINDOW);
    memset(want, GT_POISON, RW_WINDOW);
    for (uint32_t j = 0; j < RW_N; j++) {
        uint32_t u32 = rw_u32(peer_seed, j);
        uint64_t u64 = rw_u64(peer_seed, j);
        float f32 = gt_pattern_float(peer_seed, j);
        int32_t i32 = rw_i32(peer_seed, j);
        double f64 = (double)gt_pattern_float(peer_seed, j + 1000) / 3.0;
        rw_place(want, RW_U32_OFF(j), &u32, 4);
        rw_place(want, RW_U64_OFF(j), &u64, 8);
        rw_place(want, RW_F32_OFF(j), &f32, 4);
        rw_place(want, RW_I32_OFF(j), &i32, 4);
        rw_place(want, RW_F64_OFF(j), &f64, 8);
    }
    GT_CUDA(cudaMemcpy(got, g_mc.d, RW_WINDOW, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (uint32_t i = 0; i < RW_WINDOW && bad < 5; i++) {
        if (got[i] != want[i]) {
            gt_fail(ctx, "write_<T>: byte %u of D is 0x%02x, want 0x%02x", i, got[i], want[i]);
            bad++;
        }
    }
    uint8_t tail[16];
    GT_CUDA(cudaMemcpy(tail, g_mc.d + MC_BUF_BYTES - 16, 16, cudaMemcpyDeviceToHost));
    uint64_t tail_got, tail_want = rw_u64(peer_seed, 9999);
    memcpy(&tail_got, tail + 8, 8);
    GT_EXPECT(ctx, tail_got == tail_want, "write_u64 at the last 8 bytes: got 0x%llx want 0x%llx",
              (unsigned long long)tail_got, (unsigned long long)tail_want);
    for (int i = 0; i < 8; i++)
        GT_EXPECT(ctx, tail[i] == GT_POISON, "byte before the tail write changed: 0x%02x", tail[i]);
    /* Everything else in D must still be poison. */
    gt_check_buffer(ctx, g_mc.d + RW_WINDOW, MC_BUF_BYTES - RW_WINDOW - 8, 0, 0, 0, 0,
                    "D outside the written slots");

    /* Reads: values of the peer's L at those offsets. */
    unsigned long long out[5 * RW_N + 1];
    GT_CUDA(cudaMemcpy(out, dev_out, sizeof out, cudaMemcpyDeviceToHost));
    bad = 0;
    for (uint32_t j = 0; j < RW_N && bad < 5; j++) {
        const uint64_t offs[5] = {RW_U32_OFF(j), RW_U64_OFF(j), RW_F32_OFF(j), RW_I32_OFF(j),
                                  RW_F64_OFF(j)};
        const uint32_t widths[5] = {4, 8, 4, 4, 8};
        static const char *names[5] = {"u32", "u64", "f32", "i32", "f64"};
        for (int k = 0; k < 5; k++) {
            uint64_t w = gt_pattern_word(peer_seed, offs[k], widths[k]);
            if (out[5 * j + k] != w) {
                gt_fail(ctx, "read_%s at offset %llu: got 0x%llx, want 0x%llx", names[k],
                        (unsigned long long)offs[k], out[5 * j + k], (unsigned long long)w);
                bad++;
            }
        }
    }
    uint64_t tw = gt_pattern_word(peer_seed, tail_off, 8);
    GT_EXPECT(ctx, out[5 * RW_N] == tw, "read_u64 of the last 8 bytes: got 0x%llx want 0x%llx",
              out[5 * RW_N], (unsigned long long)tw);
    free(want);
    free(got);
    GT_CUDA(cudaFree(dev_out));
    GT_CCHAN(cchan_sem_set_destroy(set));
}

/* ------------------------------------------------------------------ signal / wait / poll */

/* phase 0: poll before any signal; phase 1: three signals; phase 2: four polls (1,1,1,0);
 * phase 3: one more signal and a wait, then a poll (0). Ranks meet between phases, so no signal of
 * a later phase can reach a poll of an earlier one. out[] gets results and counters. */
__global__ void k_mc_sig_phase(cchan_memory_channel_t ch, int phase, unsigned long long *out) {
    const cchan_semaphore_t *s = &ch.sem;
    if (phase == 0) {
        out[0] = (unsigned long long)cchan_memory_channel_poll(&ch);
        out[1] = *(volatile uint64_t *)s->inbound;
    } else if (phase == 1) {
        for (int i = 0; i < 3; i++) cchan_memory_channel_signal(&ch);
        cchan_memory_channel_flush(&ch);
    } else if (phase == 2) {
        for (int i = 0; i < 4; i++) out[2 + i] = (unsigned long long)cchan_memory_channel_poll(&ch);
        out[6] = *(volatile uint64_t *)s->inbound;
        out[7] = *(volatile uint64_t *)s->expected;
    } else {
        cchan_memory_channel_signal(&ch);
        out[8] = (unsigned long long)cchan_memory_channel_wait(&ch);
        out[9] = (unsigned long long)cchan_memory_channel_poll(&ch);
        out[10] = *(volatile uint64_t *)s->inbound;
        out[11] = *(volatile uint64_t *)s->expected;
        out[12] = mc_sent(s);
    }
}

static void case_signal_wait_poll(gt_ctx_t *ctx) {
    cchan_sem_set_t *set = mc_sems(ctx, 1);
    cchan_memory_channel_t ch = mc_channel(ctx, set, 0, g_mc.peerD[gt_peer(ctx)], g_mc.L, g_mc.P);
    unsigned long long *dev;
    GT_CUDA(cudaMalloc((void **)&dev, 16 * sizeof *dev));
    GT_CUDA(cudaMemset(dev, 0xff, 16 * sizeof *dev));
    for (int phase = 0; phase < 4; phase++) {
        GT_LAUNCH(ctx, k_mc_sig_phase, 1, 1, ch, phase, dev);
        GT_SYNC(ctx);
        gt_barrier(ctx); /* phase 0's poll runs before any signal; phase 1's signals have landed */
    }
    unsigned long long o[16];
    GT_CUDA(cudaMemcpy(o, dev, sizeof o, cudaMemcpyDeviceToHost));
    GT_EXPECT(ctx, o[0] == 0, "poll before any signal returned %llu", o[0]);
    GT_EXPECT(ctx, o[1] == 0, "inbound counter of a new semaphore is %llu", o[1]);
    GT_EXPECT(ctx, o[2] == 1 && o[3] == 1 && o[4] == 1 && o[5] == 0,
              "polls after 3 signals returned %llu %llu %llu %llu, want 1 1 1 0", o[2], o[3], o[4],
              o[5]);
    GT_EXPECT(ctx, o[6] == 3 && o[7] == 3,
              "after 3 signals and 3 polls inbound/expected = %llu/%llu", o[6], o[7]);
    GT_EXPECT(ctx, o[8] == 0, "wait returned %llu", o[8]);
    GT_EXPECT(ctx, o[9] == 0, "poll after the last wait returned %llu", o[9]);
    GT_EXPECT(ctx, o[10] == 4 && o[11] == 4 && o[12] == 4,
              "final inbound/expected/outbound = %llu/%llu/%llu, want 4/4/4", o[10], o[11], o[12]);
    GT_CUDA(cudaFree(dev));
    GT_CCHAN(cchan_sem_set_destroy(set));
}

/* ------------------------------------------------------------------ relaxed_signal */

#define RELAXED_N 1000

__global__ void k_mc_relaxed(cchan_memory_channel_t ch) {
    for (int i = 0; i < RELAXED_N; i++) cchan_memory_channel_relaxed_signal(&ch);
    cchan_memory_channel_signal(&ch);
    for (int i = 0; i <= RELAXED_N; i++) cchan_memory_channel_wait(&ch);
}

static void case_relaxed_signal(gt_ctx_t *ctx) {
    cchan_sem_set_t *set = mc_sems(ctx, 1);
    cchan_memory_channel_t ch = mc_channel(ctx, set, 0, g_mc.peerD[gt_peer(ctx)], g_mc.L, g_mc.P);
    GT_LAUNCH(ctx, k_mc_relaxed, 1, 1, ch);
    GT_SYNC(ctx);
    gt_barrier(ctx);
    mc_expect_counters(ctx, "after 1000 relaxed signals, 1 signal and 1001 waits", &ch.sem,
                       RELAXED_N + 1, RELAXED_N + 1, RELAXED_N + 1);
    GT_CCHAN(cchan_sem_set_destroy(set));
}

/* ------------------------------------------------------------------ HB: put, signal, wait, data */

#define HB_ITERS 200

__host__ __device__ static inline void hb_geometry(int it, uint64_t *n, uint64_t *so,
                                                   uint64_t *dof) {
    const uint64_t sizes[6] = {1, 17, 4099, 65537, GT_MiB + 7, 255};
    *n = sizes[it % 6];
    *so = 3 + (uint64_t)(it % 5) * 8;            /* 3, 11, 19, 27, 35 */
    *dof = MC_GUARD + (uint64_t)((it * 7) % 64); /* all alignments against so */
}

/* Block 0 sends (fill, put, signal, wait for the ack); block 1 receives (wait, check the data and
 * the guards, re-poison, ack). Semaphores: data from the pair's lower rank on index 0, from the
 * upper on index 1; their acks on 2 and 3. */
__global__ void k_mc_hb(cchan_memory_channel_t send, cchan_memory_channel_t send_ack,
                        cchan_memory_channel_t recv, cchan_memory_channel_t recv_ack, int rank,
                        int peer, uint64_t tag, gt_result_t *r) {
    const uint32_t tid = threadIdx.x, nt = blockDim.x;
    for (int it = 0; it < HB_ITERS; it++) {
        uint64_t n, so, dof;
        hb_geometry(it, &n, &so, &dof);
        if (blockIdx.x == 0) {
            gt_dev_fill(send.local + so, n, gt_seed(tag, rank, it), 0, tid, nt);
            __syncthreads();
            cchan_memory_channel_put(&send, dof, so, n, tid, nt);
            __syncthreads();
            if (tid == 0) {
                cchan_memory_channel_flush(&send);
                cchan_memory_channel_signal(&send);
                cchan_memory_channel_wait(&send_ack);
            }
            __syncthreads();
        } else {
            uint8_t *d = recv.local; /* recv channel's local buffer is D */
            if (tid == 0) cchan_memory_channel_wait(&recv);
            __syncthreads();
            uint64_t base = (uint64_t)it << 32;
            gt_dev_check(d + dof, n, gt_seed(tag, peer, it), 0, base, tid, nt, r);
            gt_dev_check_byte(d + dof - MC_GUARD, MC_GUARD, GT_POISON, base | 0x80000000u, tid, nt,
                              r);
            gt_dev_check_byte(d + dof + n, MC_GUARD, GT_POISON, base | 0x90000000u, tid, nt, r);
            __syncthreads();
            gt_dev_set(d + dof, n, GT_POISON, tid, nt);
            __syncthreads();
            if (tid == 0) cchan_memory_channel_signal(&recv_ack);
            __syncthreads();
        }
    }
}

static void case_hb_put_signal_wait(gt_ctx_t *ctx) {
    const uint64_t tag = gt_hash_name("hb_put_signal_wait");
    const int peer = gt_peer(ctx);
    cchan_sem_set_t *set = mc_sems(ctx, 4);
    cchan_memory_channel_t ch[4];
    for (int i = 0; i < 4; i++) ch[i] = mc_channel(ctx, set, i, g_mc.peerD[peer], g_mc.L, g_mc.P);
    /* The receiving block's channel reads D as its local buffer. */
    const int me = gt_role(ctx), other = 1 - me;
    cchan_memory_channel_t recv = mc_channel(ctx, set, other, g_mc.peerD[peer], g_mc.D, g_mc.P);
    gt_poison(ctx, g_mc.d, 4 * GT_MiB);
    gt_result_reset(ctx);
    GT_SYNC(ctx);
    gt_barrier(ctx);
    GT_LAUNCH(ctx, k_mc_hb, 2, 1024, ch[me], ch[2 + me], recv, ch[2 + other], ctx->rank, peer, tag,
              ctx->res);
    GT_SYNC(ctx);
    gt_result_t r = gt_result_read(ctx);
    if (!gt_report_result(ctx, &r,
                          "data seen after wait (index = iteration << 32 | byte; "
                          "0x8/0x9 in bit 31..28: guard before/after)"))
        gt_log(ctx, "first bad: iteration %llu, byte 0x%llx", r.first >> 32,
               r.first & 0xffffffffull);
    gt_barrier(ctx);
    mc_expect_counters(ctx, "data semaphore (sent)", &ch[me].sem, 0, 0, HB_ITERS);
    mc_expect_counters(ctx, "data semaphore (received)", &recv.sem, HB_ITERS, HB_ITERS, 0);
    GT_CCHAN(cchan_sem_set_destroy(set));
}

/* ------------------------------------------------------------------ ping-pong, 10^5 round trips */

#define PP_ROUNDS 100000
#define PP_SLOT_OFF 4096u

/* The pair's lower rank (role 0) writes 2i+1 into the peer's slot and signals; the upper waits,
 * checks, answers 2i+2. */
__global__ void k_mc_pingpong(cchan_memory_channel_t ch, const uint64_t *my_slot, int role,
                              gt_result_t *r) {
    unsigned long long bad = 0, first = ~0ull, last = 0;
    for (uint64_t i = 0; i < PP_ROUNDS; i++) {
        if (role == 0) {
            cchan_memory_channel_write_u64(&ch, PP_SLOT_OFF, 2 * i + 1);
            cchan_memory_channel_signal(&ch);
            cchan_memory_channel_wait(&ch);
            if (*(const volatile uint64_t *)my_slot != 2 * i + 2) {
                if (!bad) first = i;
                bad++;
                last = i;
            }
        } else {
            cchan_memory_channel_wait(&ch);
            if (*(const volatile uint64_t *)my_slot != 2 * i + 1) {
                if (!bad) first = i;
                bad++;
                last = i;
            }
            cchan_memory_channel_write_u64(&ch, PP_SLOT_OFF, 2 * i + 2);
            cchan_memory_channel_signal(&ch);
        }
    }
    gt_dev_record(r, bad, first, last);
}

static void case_pingpong(gt_ctx_t *ctx) {
    cchan_sem_set_t *set = mc_sems(ctx, 1);
    cchan_memory_channel_t ch = mc_channel(ctx, set, 0, g_mc.peerD[gt_peer(ctx)], g_mc.L, g_mc.P);
    gt_poison(ctx, g_mc.d, 2 * PP_SLOT_OFF);
    gt_result_reset(ctx);
    cudaEvent_t e0, e1;
    GT_CUDA(cudaEventCreate(&e0));
    GT_CUDA(cudaEventCreate(&e1));
    GT_SYNC(ctx);
    gt_barrier(ctx);
    GT_CUDA(cudaEventRecord(e0, ctx->stream));
    GT_LAUNCH(ctx, k_mc_pingpong, 1, 1, ch, (const uint64_t *)(g_mc.d + PP_SLOT_OFF), gt_role(ctx),
              ctx->res);
    GT_CUDA(cudaEventRecord(e1, ctx->stream));
    GT_SYNC(ctx);
    float ms = 0;
    GT_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    gt_result_t r = gt_result_read(ctx);
    if (r.errors)
        gt_fail(ctx, "%llu of %d rounds saw a wrong value after wait (first round %llu, last %llu)",
                r.errors, PP_ROUNDS, r.first, r.last);
    if (ctx->rank == 0)
        gt_log(ctx,
               "pingpong: %d round trips in %.1f ms: %.2f us per round trip (includes the "
               "launch skew between ranks)",
               PP_ROUNDS, ms, ms * 1e3 / PP_ROUNDS);
    gt_barrier(ctx);
    mc_expect_counters(ctx, "after the ping-pong", &ch.sem, PP_ROUNDS, PP_ROUNDS, PP_ROUNDS);
    GT_CUDA(cudaEventDestroy(e0));
    GT_CUDA(cudaEventDestroy(e1));
    GT_CCHAN(cchan_sem_set_destroy(set));
}

/* ------------------------------------------------------------------ LL8 / LL16, flag reuse */

#define LL_ITERS 10000
#define LL_RX_OFF (8 * GT_MiB)

__host__ __device__ static inline uint64_t ll_size(int it) {
    const uint64_t sizes[11] = {4, 1, 3, 5, 8, 13, 64, 1000, 4093, 8192, 65539};
    return sizes[it % 11];
}

/* Ping-pong of LL payloads through one packet area per rank, reused every iteration with flag
 * flag0 + it and never cleared. The pair's lower rank sends then reads the reply; the upper reads
 * then replies.
 * Payload sources and destinations move between aligned and unaligned offsets. */
template <int LL16>
__global__ void k_mc_ll(cchan_memory_channel_t ch, int rank, int peer, uint32_t flag0, uint64_t tag,
                        gt_result_t *r) {
    const uint32_t tid = threadIdx.x, nt = blockDim.x;
    uint8_t *local = ch.local;
    for (int it = 0; it < LL_ITERS; it++) {
        const uint32_t flag = flag0 + (uint32_t)it;
        const uint64_t n = ll_size(it);
        const uint64_t src_off = (it & 1) ? 3 : 0;
        const uint64_t rx_off = LL_RX_OFF + ((it & 2) ? 5 : 0);
        gt_dev_set(local + rx_off, n + 16, GT_POISON, tid, nt);
        for (int step = 0; step < 2; step++) {
            const int sending = (step == 0) == (rank < peer);
            if (sending) {
                gt_dev_fill(local + src_off, n, gt_seed(tag, rank, it), 0, tid, nt);
                __syncthreads();
                if (LL16)
                    cchan_memory_channel_put_packets_ll16(&ch, 0, src_off, n, flag, tid, nt);
                else
                    cchan_memory_channel_put_packets_ll8(&ch, 0, src_off, n, flag, tid, nt);
            } else {
                __syncthreads(); /* rx poisoned */
                if (LL16)
                    cchan_memory_channel_read_packets_ll16(&ch, 0, rx_off, n, flag, tid, nt);
                else
                    cchan_memory_channel_read_packets_ll8(&ch, 0, rx_off, n, flag, tid, nt);
                __syncthreads();
                uint64_t base = (uint64_t)it << 32;
                gt_dev_check(local + rx_off, n, gt_seed(tag, peer, it), 0, base, tid, nt, r);
                gt_dev_check_byte(local + rx_off + n, 16, GT_POISON, base | 0x80000000u, tid, nt,
                                  r);
            }
            __syncthreads();
        }
    }
}

static void case_ll_flag_reuse(gt_ctx_t *ctx) {
    const uint64_t tag = gt_hash_name("ll8_ll16_flag_reuse");
    cchan_sem_set_t *set = mc_sems(ctx, 1);
    cchan_memory_channel_t ch = mc_channel(ctx, set, 0, g_mc.peerP[gt_peer(ctx)], g_mc.L, g_mc.P);
    for (int proto = 0; proto < 2; proto++) {
        gt_result_reset(ctx);
        GT_SYNC(ctx);
        gt_barrier(ctx);
        /* LL16 continues the LL8 epochs in the same, uncleared packet area. */
        uint32_t flag0 = proto ? LL_ITERS + 1 : 1;
        double t0 = gt_now_ms();
        if (proto)
            GT_LAUNCH(ctx, k_mc_ll<1>, 1, 512, ch, ctx->rank, gt_peer(ctx), flag0, tag + 1,
                      ctx->res);
        else
            GT_LAUNCH(ctx, k_mc_ll<0>, 1, 512, ch, ctx->rank, gt_peer(ctx), flag0, tag, ctx->res);
        GT_SYNC(ctx);
        double ms = gt_now_ms() - t0;
        gt_result_t r = gt_result_read(ctx);
        if (r.errors)
            gt_fail(ctx,
                    "%s: %llu bad bytes; first at iteration %llu byte 0x%llx (0x80000000+: "
                    "tail guard)",
                    proto ? "LL16" : "LL8", r.errors, r.first >> 32, r.first & 0xffffffffull);
        if (ctx->rank == 0)
            gt_log(ctx, "%s: %d ping-pong iterations in %.1f ms", proto ? "LL16" : "LL8", LL_ITERS,
                   ms);
    }
    GT_CCHAN(cchan_sem_set_destroy(set));
}

/* ------------------------------------------------------------------ reduce_put f32/f16/bf16 */

#define RED_S0 0ull
#define RED_S1 (64 * GT_MiB)
#define RED_S2 (128 * GT_MiB) /* read by the peer through its mapping of this L */
#define RED_DST 256ull

__host__ __device__ static inline float red_to_f32(float v) { return v; }
__host__ __device__ static inline float red_to_f32(cchan_f16_t v) { return cchan_f16_to_f32(v); }
__host__ __device__ static inline float red_to_f32(cchan_bf16_t v) { return cchan_bf16_to_f32(v); }
__host__ __device__ static inline void red_from_f32(float *p, float v) { *p = v; }
__host__ __device__ static inline void red_from_f32(cchan_f16_t *p, float v) {
    *p = cchan_f32_to_f16(v);
}
__host__ __device__ static inline void red_from_f32(cchan_bf16_t *p, float v) {
    *p = cchan_f32_to_bf16(v);
}

template <typename T> __global__ void k_red_fill(T *p, uint64_t count, uint64_t seed) {
    for (uint64_t i = gt_global_tid(); i < count; i += gt_global_nthreads())
        red_from_f32(&p[i], gt_pattern_float(seed, i));
}

__global__ void k_red_f32(cchan_memory_channel_t ch, const float *a, const float *b, const float *c,
                          uint64_t count) {
    const float *srcs[3] = {a, b, c};
    cchan_memory_channel_reduce_put_f32(&ch, RED_DST, srcs, 3, count, gt_global_tid(),
                                        gt_global_nthreads());
}
__global__ void k_red_f16(cchan_memory_channel_t ch, const cchan_f16_t *a, const cchan_f16_t *b,
                          const cchan_f16_t *c, uint64_t count) {
    const cchan_f16_t *srcs[3] = {a, b, c};
    cchan_memory_channel_reduce_put_f16(&ch, RED_DST, srcs, 3, count, gt_global_tid(),
                                        gt_global_nthreads());
}
__global__ void k_red_bf16(cchan_memory_channel_t ch, const cchan_bf16_t *a, const cchan_bf16_t *b,
                           const cchan_bf16_t *c, uint64_t count) {
    const cchan_bf16_t *srcs[3] = {a, b, c};
    cchan_memory_channel_reduce_put_bf16(&ch, RED_DST, srcs, 3, count, gt_global_tid(),
                                         gt_global_nthreads());
}

static void red_launch(gt_ctx_t *ctx, const cchan_memory_channel_t &ch, const float *a,
                       const float *b, const float *c, uint64_t n) {
    GT_LAUNCH(ctx, k_red_f32, gt_grid_for(ctx, n, 256), 256, ch, a, b, c, n);
}
static void red_launch(gt_ctx_t *ctx, const cchan_memory_channel_t &ch, const cchan_f16_t *a,
                       const cchan_f16_t *b, const cchan_f16_t *c, uint64_t n) {
    GT_LAUNCH(ctx, k_red_f16, gt_grid_for(ctx, n, 256), 256, ch, a, b, c, n);
}
static void red_launch(gt_ctx_t *ctx, const cchan_memory_channel_t &ch, const cchan_bf16_t *a,
                       const cchan_bf16_t *b, const cchan_bf16_t *c, uint64_t n) {
    GT_LAUNCH(ctx, k_red_bf16, gt_grid_for(ctx, n, 256), 256, ch, a, b, c, n);
}

/* Exact value of input element i of pattern `seed` as stored in T. */
template <typename T> static double red_input(uint64_t seed, uint64_t i) {
    T v;
    red_from_f32(&v, gt_pattern_float(seed, i));
    return (double)red_to_f32(v);
}

/* Sums of 3 inputs (two local, one read from the peer's memory) written to the peer; the peer
 * checks against a double reference. rel_eps: the output type's relative rounding (half ulp, and
 * some room). */
template <typename T>
static void red_run(gt_ctx_t *ctx, const cchan_memory_channel_t &ch, const char *tname,
                    double rel_eps, uint64_t tag) {
    static const uint64_t counts[] = {1, 3, 4097, GT_MiB + 3};
    const int peer = gt_peer(ctx);
    const size_t es = sizeof(T);
    uint8_t *peer_l = (uint8_t *)gt_mem_ptr(g_mc.peerL[peer]);
    int ok = 1;
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0] && ok; ci++) {
        uint64_t n = counts[ci];
        uint64_t s[3] = {gt_seed(tag, ctx->rank, 3 * ci), gt_seed(tag, ctx->rank, 3 * ci + 1),
                         gt_seed(tag, ctx->rank, 3 * ci + 2)};
        const uint64_t regions[3] = {RED_S0, RED_S1, RED_S2};
        for (int k = 0; k < 3; k++)
            GT_LAUNCH(ctx, k_red_fill<T>, gt_grid_for(ctx, n, 256), 256, (T *)(g_mc.l + regions[k]),
                      n, s[k]);
        const uint64_t window = RED_DST + n * es + 256;
        gt_poison(ctx, g_mc.d, window);
        GT_SYNC(ctx);
        gt_barrier(ctx);
        red_launch(ctx, ch, (const T *)(g_mc.l + RED_S0), (const T *)(g_mc.l + RED_S1),
                   (const T *)(peer_l + RED_S2), n);
        GT_SYNC(ctx);
        gt_barrier(ctx);
        /* My D holds the peer's sum: its S0 + its S1 + my S2. */
        uint64_t ps0 = gt_seed(tag, peer, 3 * ci), ps1 = gt_seed(tag, peer, 3 * ci + 1);
        uint8_t *img = (uint8_t *)malloc(window);
        GT_CUDA(cudaMemcpy(img, g_mc.d, window, cudaMemcpyDeviceToHost));
        int bad = 0;
        for (uint64_t i = 0; i < n; i++) {
            double x0 = red_input<T>(ps0, i), x1 = red_input<T>(ps1, i), x2 = red_input<T>(s[2], i);
            double ref = x0 + x1 + x2;
            double sumabs = fabs(x0) + fabs(x1) + fabs(x2);
            T gv;
            memcpy(&gv, img + RED_DST + i * es, es);
            double got = (double)red_to_f32(gv);
            double tol = rel_eps * fabs(ref) + 4.0 * ldexp(1.0, -24) * sumabs + ldexp(1.0, -24);
            double err = fabs(got - ref);
            if (!(err <= tol)) {
                if (bad < 5)
                    gt_fail(ctx,
                            "reduce_put_%s, %llu elements: element %llu = %.9g, reference %.9g "
                            "(inputs %.9g %.9g %.9g), tolerance %.3g",
                            tname, (unsigned long long)n, (unsigned long long)i, got, ref, x0, x1,
                            x2, tol);
                bad++;
            }
        }
        for (uint64_t i = 0; i < RED_DST; i++)
            if (img[i] != GT_POISON) {
                gt_fail(ctx, "reduce_put_%s wrote byte %llu before its destination", tname,
                        (unsigned long long)i);
                break;
            }
        for (uint64_t i = RED_DST + n * es; i < window; i++)
            if (img[i] != GT_POISON) {
                gt_fail(ctx, "reduce_put_%s, %llu elements: wrote byte %llu past its end", tname,
                        (unsigned long long)n, (unsigned long long)(i - RED_DST));
                break;
            }
        if (bad)
            gt_fail(ctx, "reduce_put_%s, %llu elements: %d out of tolerance", tname,
                    (unsigned long long)n, bad);
        free(img);
        ok = gt_all_ok(ctx);
    }
}

static void case_reduce_put(gt_ctx_t *ctx) {
    cchan_sem_set_t *set = mc_sems(ctx, 1);
    cchan_memory_channel_t ch = mc_channel(ctx, set, 0, g_mc.peerD[gt_peer(ctx)], g_mc.L, g_mc.P);
    const uint64_t tag = gt_hash_name("reduce_put");
    red_run<float>(ctx, ch, "f32", 0.0, tag);
    red_run<cchan_f16_t>(ctx, ch, "f16", ldexp(1.0, -11), tag + 1);
    red_run<cchan_bf16_t>(ctx, ch, "bf16", ldexp(1.0, -8), tag + 2);
    GT_CCHAN(cchan_sem_set_destroy(set));
}

/* ------------------------------------------------------------------ many blocks, own channels */

#define MB_ITERS 50
#define MB_STRIDE (256 * GT_KiB)

__host__ __device__ static inline void mb_geometry(uint32_t b, uint64_t *off, uint64_t *n) {
    *off = (uint64_t)b * MB_STRIDE + MC_GUARD + (b % 16);
    *n = 4096u * (b % 8) + 13u + b;
}

/* Block b talks to the peer's block b over channel b only: put its slice, signal, wait for the
 * peer's slice, check it, re-poison, then a second signal/wait as the ack. */
__global__ void k_mc_multi(const cchan_memory_channel_t *chs, uint8_t *d, int rank, int peer,
                           uint64_t tag, gt_result_t *r, unsigned long long *counters) {
    const uint32_t b = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    const cchan_memory_channel_t ch = chs[b];
    uint64_t off, n;
    mb_geometry(b, &off, &n);
    for (int it = 0; it < MB_ITERS; it++) {
        gt_dev_fill(ch.local + off, n, gt_seed(tag, rank, (uint64_t)it * 4096 + b), 0, tid, nt);
        __syncthreads();
        cchan_memory_channel_put(&ch, off, off, n, tid, nt);
        __syncthreads();
        if (tid == 0) {
            cchan_memory_channel_signal(&ch);
            cchan_memory_channel_wait(&ch);
        }
        __syncthreads();
        uint64_t base = ((uint64_t)b << 48) | ((uint64_t)it << 32);
        gt_dev_check(d + off, n, gt_seed(tag, peer, (uint64_t)it * 4096 + b), 0, base, tid, nt, r);
        gt_dev_check_byte(d + off - 16, 16, GT_POISON, base | 0x80000000u, tid, nt, r);
        gt_dev_check_byte(d + off + n, 16, GT_POISON, base | 0x90000000u, tid, nt, r);
        __syncthreads();
        gt_dev_set(d + off, n, GT_POISON, tid, nt);
        __syncthreads();
        if (tid == 0) {
            cchan_memory_channel_signal(&ch);
            cchan_memory_channel_wait(&ch);
        }
        __syncthreads();
    }
    if (tid == 0) {
        counters[3 * b + 0] = *(volatile uint64_t *)ch.sem.inbound;
        counters[3 * b + 1] = *(volatile uint64_t *)ch.sem.expected;
        counters[3 * b + 2] = mc_sent(&ch.sem);
    }
}

static void case_multi_block_channels(gt_ctx_t *ctx) {
    const uint64_t tag = gt_hash_name("multi_block_channels");
    const int nb = ctx->num_sms < 64 ? ctx->num_sms : 64;
    cchan_sem_set_t *set = mc_sems(ctx, nb);
    cchan_memory_channel_t *hch = (cchan_memory_channel_t *)malloc(nb * sizeof *hch);
    for (int b = 0; b < nb; b++)
        hch[b] = mc_channel(ctx, set, b, g_mc.peerD[gt_peer(ctx)], g_mc.L, g_mc.P);
    cchan_memory_channel_t *dch;
    unsigned long long *dcnt;
    GT_CUDA(cudaMalloc((void **)&dch, nb * sizeof *dch));
    GT_CUDA(cudaMalloc((void **)&dcnt, 3 * nb * sizeof *dcnt));
    GT_CUDA(cudaMemcpy(dch, hch, nb * sizeof *dch, cudaMemcpyHostToDevice));
    gt_poison(ctx, g_mc.d, (uint64_t)nb * MB_STRIDE + MB_STRIDE);
    gt_result_reset(ctx);
    GT_SYNC(ctx);
    gt_barrier(ctx);
    GT_LAUNCH(ctx, k_mc_multi, nb, 256, dch, g_mc.d, ctx->rank, gt_peer(ctx), tag, ctx->res, dcnt);
    GT_SYNC(ctx);
    gt_result_t r = gt_result_read(ctx);
    if (r.errors)
        gt_fail(ctx,
                "%llu bad bytes; first: block %llu, iteration %llu, byte 0x%llx (0x8/0x9 "
                "in bits 31..28: guard before/after)",
                r.errors, r.first >> 48, (r.first >> 32) & 0xffff, r.first & 0xffffffffull);
    unsigned long long *cnt = (unsigned long long *)malloc(3 * nb * sizeof *cnt);
    GT_CUDA(cudaMemcpy(cnt, dcnt, 3 * nb * sizeof *cnt, cudaMemcpyDeviceToHost));
    for (int b = 0; b < nb; b++) {
        GT_EXPECT(ctx,
                  cnt[3 * b] == 2 * MB_ITERS && cnt[3 * b + 1] == 2 * MB_ITERS &&
                      cnt[3 * b + 2] == 2 * MB_ITERS,
                  "channel %d counters inbound/expected/outbound = %llu/%llu/%llu, want %d each", b,
                  cnt[3 * b], cnt[3 * b + 1], cnt[3 * b + 2], 2 * MB_ITERS);
        if (!ctx->case_ok) break;
    }
    if (ctx->rank == 0) gt_log(ctx, "multi_block_channels: %d blocks, each its own channel", nb);
    gt_barrier(ctx);
    free(cnt);
    free(hch);
    GT_CUDA(cudaFree(dch));
    GT_CUDA(cudaFree(dcnt));
    GT_CCHAN(cchan_sem_set_destroy(set));
}

/* ------------------------------------------------------------------ grid barrier */

#define GB_ROUNDS 500

/* Round rd: block b publishes a value, barrier, reads two other blocks' values of this round,
 * barrier (so that nobody overwrites a value still to be read). */
__global__ void k_grid_barrier(cchan_grid_barrier_t gb, unsigned long long *slots, uint64_t launch,
                               gt_result_t *r) {
    const uint32_t G = gridDim.x, b = blockIdx.x, tid = threadIdx.x;
    const uint32_t writer = b % blockDim.x, reader = (b + 1) % blockDim.x;
    unsigned long long bad = 0, first = ~0ull, last = 0;
    for (uint32_t rd = 0; rd < GB_ROUNDS; rd++) {
        const uint64_t round = launch * GB_ROUNDS + rd;
        if (tid == writer) slots[b] = (round * G + b) + 1;
        cchan_grid_barrier(&gb, tid);
        if (tid == reader) {
            uint32_t o1 = (b + 1) % G, o2 = (b + G / 2) % G;
            if (slots[o1] != (round * G + o1) + 1 || slots[o2] != (round * G + o2) + 1) {
                if (!bad) first = ((uint64_t)rd << 32) | b;
                bad++;
                last = ((uint64_t)rd << 32) | b;
            }
        }
        cchan_grid_barrier(&gb, tid);
    }
    gt_dev_record(r, bad, first, last);
}

static void case_grid_barrier(gt_ctx_t *ctx) {
    int coop = 0, occ = 0;
    GT_CUDA(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, ctx->device));
    GT_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_grid_barrier, 256, 0));
    if (!coop || occ < 1) {
        gt_fail(ctx, "cooperative launch unsupported (attribute %d) or occupancy %d", coop, occ);
        return;
    }
    unsigned grid = ctx->num_sms * (occ < 2 ? occ : 2);
    cchan_grid_barrier_t gb;
    GT_CCHAN(cchan_grid_barrier_create(ctx->comm, grid, &gb));
    unsigned long long *slots;
    GT_CUDA(cudaMalloc((void **)&slots, grid * sizeof *slots));
    GT_CUDA(cudaMemset(slots, 0, grid * sizeof *slots));
    gt_result_reset(ctx);
    /* Two launches: the counter is never reset, so the second checks it stays consistent. */
    for (uint64_t launch = 0; launch < 2; launch++) {
        void *args[] = {&gb, &slots, &launch, &ctx->res};
        GT_CUDA(cudaLaunchCooperativeKernel((const void *)k_grid_barrier, dim3(grid), dim3(256),
                                            args, 0, ctx->stream));
        GT_SYNC(ctx);
    }
    gt_result_t r = gt_result_read(ctx);
    if (r.errors)
        gt_fail(ctx,
                "%llu reads saw another block's value of the wrong round (first: round %llu, "
                "block %llu)",
                r.errors, r.first >> 32, r.first & 0xffffffffull);
    if (ctx->rank == 0)
        gt_log(ctx, "grid_barrier: %u blocks x 256 threads, 2 launches x %d rounds", grid,
               GB_ROUNDS);
    GT_CUDA(cudaFree(slots));
    GT_CCHAN(cchan_grid_barrier_destroy(ctx->comm, &gb));
}

/* ------------------------------------------------------------------ rank barrier */

#define RB_ROUNDS 1000
#define RB_OFF 8192u

__host__ __device__ static inline uint64_t rb_value(int rank, uint32_t rd) {
    return ((uint64_t)(rank + 1) << 48) | (rd + 1);
}

/* Round rd: thread 32 writes rb_value(rank, rd) into the peer's slot rd, rank barrier, thread 7
 * reads the slot the peer wrote into this rank's D: it must be there already. */
__global__ void k_rank_barrier(const cchan_semaphore_t *sems, cchan_memory_channel_t ch,
                               const uint64_t *my_slots, int rank, int peer, gt_result_t *r) {
    const uint32_t tid = threadIdx.x;
    unsigned long long bad = 0, first = ~0ull, last = 0;
    for (uint32_t rd = 0; rd < RB_ROUNDS; rd++) {
        if (tid == 32) cchan_memory_channel_write_u64(&ch, RB_OFF + 8ull * rd, rb_value(rank, rd));
        cchan_rank_barrier(sems, 1, tid);
        if (tid == 7 && *(const volatile uint64_t *)&my_slots[rd] != rb_value(peer, rd)) {
            if (!bad) first = rd;
            bad++;
            last = rd;
        }
    }
    gt_dev_record(r, bad, first, last);
}

static void case_rank_barrier(gt_ctx_t *ctx) {
    cchan_sem_set_t *set = mc_sems(ctx, 2);
    cchan_semaphore_t sem;
    GT_CCHAN(cchan_sem_set_get(set, gt_peer(ctx), 0, &sem));
    cchan_memory_channel_t ch = mc_channel(ctx, set, 1, g_mc.peerD[gt_peer(ctx)], g_mc.L, g_mc.P);
    cchan_semaphore_t *dsem;
    GT_CUDA(cudaMalloc((void **)&dsem, sizeof *dsem));
    GT_CUDA(cudaMemcpy(dsem, &sem, sizeof sem, cudaMemcpyHostToDevice));
    gt_poison(ctx, g_mc.d, RB_OFF + 8ull * RB_ROUNDS + 64);
    gt_result_reset(ctx);
    GT_SYNC(ctx);
    gt_barrier(ctx);
    GT_LAUNCH(ctx, k_rank_barrier, 1, 64, dsem, ch, (const uint64_t *)(g_mc.d + RB_OFF), ctx->rank,
              gt_peer(ctx), ctx->res);
    GT_SYNC(ctx);
    gt_result_t r = gt_result_read(ctx);
    if (r.errors)
        gt_fail(ctx,
                "%llu of %d rounds: the peer's write before the barrier was not visible after "
                "it (first round %llu)",
                r.errors, RB_ROUNDS, r.first);
    gt_barrier(ctx);
    mc_expect_counters(ctx, "rank barrier semaphore", &sem, RB_ROUNDS, RB_ROUNDS, RB_ROUNDS);
    GT_CUDA(cudaFree(dsem));
    GT_CCHAN(cchan_sem_set_destroy(set));
}

/* ------------------------------------------------------------------ CUDA graph replay */

#define GR_REPLAYS 1000
#define GR_N (65536 + 7)
#define GR_SO 3u
#define GR_DO (MC_GUARD + 19u)

/* One replay: fill the source with this replay's pattern, put, signal, wait for the peer's data,
 * check it and the guards, re-poison, signal/wait as the ack, count the replay. The replay number
 * comes from device memory, so the captured arguments never change. */
__global__ void k_mc_graph(cchan_memory_channel_t ch, uint8_t *d, unsigned long long *replays,
                           int rank, int peer, uint64_t tag, gt_result_t *r) {
    const uint32_t tid = threadIdx.x, nt = blockDim.x;
    const uint64_t i = *(volatile unsigned long long *)replays;
    gt_dev_fill(ch.local + GR_SO, GR_N, gt_seed(tag, rank, i), 0, tid, nt);
    __syncthreads();
    cchan_memory_channel_put(&ch, GR_DO, GR_SO, GR_N, tid, nt);
    __syncthreads();
    if (tid == 0) {
        cchan_memory_channel_signal(&ch);
        cchan_memory_channel_wait(&ch);
    }
    __syncthreads();
    gt_dev_check(d + GR_DO, GR_N, gt_seed(tag, peer, i), 0, i << 32, tid, nt, r);
    gt_dev_check_byte(d + GR_DO - MC_GUARD, MC_GUARD, GT_POISON, (i << 32) | 0x80000000u, tid, nt,
                      r);
    gt_dev_check_byte(d + GR_DO + GR_N, MC_GUARD, GT_POISON, (i << 32) | 0x90000000u, tid, nt, r);
    __syncthreads();
    gt_dev_set(d + GR_DO, GR_N, GT_POISON, tid, nt);
    __syncthreads();
    if (tid == 0) {
        cchan_memory_channel_signal(&ch);
        cchan_memory_channel_wait(&ch);
        *replays = i + 1;
    }
}

static void case_graph_replay(gt_ctx_t *ctx) {
    const uint64_t tag = gt_hash_name("graph_replay");
    cchan_sem_set_t *set = mc_sems(ctx, 1);
    cchan_memory_channel_t ch = mc_channel(ctx, set, 0, g_mc.peerD[gt_peer(ctx)], g_mc.L, g_mc.P);
    unsigned long long *replays;
    GT_CUDA(cudaMalloc((void **)&replays, sizeof *replays));
    GT_CUDA(cudaMemset(replays, 0, sizeof *replays));
    gt_poison(ctx, g_mc.d, 2 * GT_MiB);
    gt_result_reset(ctx);
    GT_SYNC(ctx);

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    GT_CUDA(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
    k_mc_graph<<<1, 512, 0, ctx->stream>>>(ch, g_mc.d, replays, ctx->rank, gt_peer(ctx), tag,
                                           ctx->res);
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
    unsigned long long n = 0;
    GT_CUDA(cudaMemcpy(&n, replays, sizeof n, cudaMemcpyDeviceToHost));
    GT_EXPECT(ctx, n == GR_REPLAYS, "replay counter %llu, want %d", n, GR_REPLAYS);
    gt_barrier(ctx);
    mc_expect_counters(ctx, "after 1000 replays", &ch.sem, 2 * GR_REPLAYS, 2 * GR_REPLAYS,
                       2 * GR_REPLAYS);
    gt_check_buffer(ctx, g_mc.d, 2 * GT_MiB, 0, 0, 0, 0, "D after the last replay (re-poisoned)");
    if (ctx->rank == 0) gt_log(ctx, "graph_replay: %d replays in %.1f ms", GR_REPLAYS, ms);
    GT_CUDA(cudaGraphExecDestroy(exec));
    GT_CUDA(cudaGraphDestroy(graph));
    GT_CUDA(cudaFree(replays));
    GT_CCHAN(cchan_sem_set_destroy(set));
}

/* ------------------------------------------------------------------ a wait that times out
 *
 * Runs in child processes (a trap ends the CUDA context), one pair per pair of ranks: the lower
 * child waits on a semaphore (or LL packets) that its partner never signals; the kernel must trap
 * at the deadline, and cchan_comm_check_device() must name the wait. */

#define TO_LL_FLAG 0x5EEDu

__global__ void k_to_wait_sem(cchan_memory_channel_t ch) { cchan_memory_channel_wait(&ch); }
__global__ void k_to_wait_ll8(cchan_memory_channel_t ch) {
    cchan_memory_channel_read_packets_ll8(&ch, 0, 64 * GT_KiB, 4096, TO_LL_FLAG, threadIdx.x,
                                          blockDim.x);
}

static cchan_memory_channel_t g_to_ch;

static int to_child_prepare(gt_child_env_t *env) {
    cchan_mem_t *buf, *peers[2];
    int st = cchan_mem_alloc(env->comm, 2 * GT_MiB, 0, &buf);
    if (!st) st = cchan_mem_exchange(env->comm, buf, peers);
    cchan_sem_set_t *set = NULL;
    if (!st) st = cchan_sem_set_create(env->comm, 1, 0, &set);
    const int peer = env->rank ^ 1;
    if (!st)
        st = cchan_memory_channel_init(env->comm, set, peer, 0, peers[peer], buf, buf, &g_to_ch);
    return st;
}

static void to_child_launch(gt_child_env_t *env) {
    if (!strcmp(env->kind, "ll8"))
        k_to_wait_ll8<<<1, 64>>>(g_to_ch);
    else
        k_to_wait_sem<<<1, 1>>>(g_to_ch);
}

static void case_wait_timeout(gt_ctx_t *ctx) {
    static const char *const want_sem[] = {"timed out", "semaphore", "peer 1", "expected 1",
                                           "observed 0"};
    static const char *const want_ll8[] = {"timed out", "LL packets", "peer 1",
                                           "expected flag 24301", "observed flag 0"};
    gt_timeout_pair(ctx, "sem", want_sem, 5);
    gt_timeout_pair(ctx, "ll8", want_ll8, 5);
}

/* A device wait with no deadline ends when its peer dies: the partner's child exits without
 * teardown while this rank's kernel waits for its signal; within about a second the kernel traps
 * and cchan_comm_check_device() names the dead peer. */
static void case_peer_dead_wait(gt_ctx_t *ctx) {
    static const char *const want[] = {"stopped waiting for semaphore", "peer 1 died"};
    const gt_child_expect_t x = {want, 2, CCHAN_ERR_PEER_DEAD, 0.8 * GT_CHILD_DEAD_AFTER_MS,
                                 GT_CHILD_DEAD_AFTER_MS + 3000.0};
    gt_child_pair(ctx, "dead", &x);
}

/* ------------------------------------------------------------------ main */

static void mc_setup(gt_ctx_t *ctx) {
    GT_CCHAN(cchan_mem_alloc(ctx->comm, MC_BUF_BYTES, 0, &g_mc.L));
    GT_CCHAN(cchan_mem_alloc(ctx->comm, MC_BUF_BYTES, 0, &g_mc.D));
    GT_CCHAN(cchan_mem_alloc(ctx->comm, MC_PKT_BYTES, 0, &g_mc.P));
    GT_CCHAN(cchan_mem_exchange(ctx->comm, g_mc.L, g_mc.peerL));
    GT_CCHAN(cchan_mem_exchange(ctx->comm, g_mc.D, g_mc.peerD));
    GT_CCHAN(cchan_mem_exchange(ctx->comm, g_mc.P, g_mc.peerP));
    g_mc.l = (uint8_t *)gt_mem_ptr(g_mc.L);
    g_mc.d = (uint8_t *)gt_mem_ptr(g_mc.D);
    g_mc.p = (uint8_t *)gt_mem_ptr(g_mc.P);
    if (((uintptr_t)g_mc.l | (uintptr_t)g_mc.d | (uintptr_t)g_mc.p) & 255) {
        gt_log(ctx, "FATAL: cchan_mem_alloc returned memory not 256-byte aligned");
        gt_die();
    }
}

static void mc_teardown(gt_ctx_t *ctx) {
    gt_barrier(ctx);
    for (int r = 0; r < ctx->nranks; r++) {
        if (r == ctx->rank) continue;
        GT_CCHAN(cchan_mem_destroy(g_mc.peerL[r]));
        GT_CCHAN(cchan_mem_destroy(g_mc.peerD[r]));
        GT_CCHAN(cchan_mem_destroy(g_mc.peerP[r]));
    }
    gt_barrier(ctx);
    GT_CCHAN(cchan_mem_destroy(g_mc.L));
    GT_CCHAN(cchan_mem_destroy(g_mc.D));
    GT_CCHAN(cchan_mem_destroy(g_mc.P));
}

static void mc_cases(gt_ctx_t *ctx) {
    gt_case(ctx, "put_get_sizes", case_put_get_sizes, 300, GT_PAIRS | GT_ONE_ROUND);
    gt_case(ctx, "read_write", case_read_write, 60, GT_PAIRS);
    gt_case(ctx, "signal_wait_poll", case_signal_wait_poll, 60, GT_PAIRS);
    gt_case(ctx, "relaxed_signal", case_relaxed_signal, 60, GT_PAIRS);
    gt_case(ctx, "hb_put_signal_wait", case_hb_put_signal_wait, 120, GT_PAIRS);
    gt_case(ctx, "pingpong_1e5", case_pingpong, 120, GT_PAIRS | GT_CONCURRENT);
    gt_case(ctx, "ll8_ll16_flag_reuse", case_ll_flag_reuse, 120, GT_PAIRS);
    gt_case(ctx, "reduce_put", case_reduce_put, 120, GT_PAIRS);
    gt_case(ctx, "multi_block_channels", case_multi_block_channels, 120, GT_PAIRS);
    gt_case(ctx, "grid_barrier", case_grid_barrier, 60, GT_ALL);
    gt_case(ctx, "rank_barrier", case_rank_barrier, 60, GT_PAIRS);
    gt_case(ctx, "graph_replay_1000", case_graph_replay, 120, GT_PAIRS);
    gt_case(ctx, "wait_timeout", case_wait_timeout, 240, GT_PAIRS | GT_ONE_ROUND | GT_TRAPS);
    gt_case(ctx, "peer_dead_wait", case_peer_dead_wait, 60, GT_PAIRS | GT_ONE_ROUND | GT_TRAPS);
}

GT_MAIN({"test_memory_channel_gpu", mc_setup, mc_cases, mc_teardown, to_child_prepare,
         to_child_launch})
