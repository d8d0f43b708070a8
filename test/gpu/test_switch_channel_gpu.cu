/* Switch channel, portable path, 2 to 8 ranks (GPUs of their own or shared):
 *
 *   cchan-run -n N --timeout 600 build/test/gpu/test_switch_channel_gpu [--case NAME,...] [--list]
 *
 * Buffers per rank: B (symmetric, registered with the channel) = [ src | slot 0 | ... | slot N-1 ],
 * each region SW_REGION bytes; L (local) = one region. Every case runs on every rank at once.
 *   handle          the channel reports the portable path, N members, every buffer mapped
 *   reduce_<T>      f32, f16, bf16, i32, u32; 16 B to 256 MiB, odd element counts, offsets that
 *                   allow 16-byte vectors and offsets that do not; random inputs; the result is
 *                   copied back and compared on the host with a float64 reference (one rounding to
 *                   T plus the f32 accumulation bound; integers exact), poisoned guards untouched
 *   broadcast_<T>   each rank broadcasts into its own slot of every member's B; bit-exact, guards
 *   allreduce_rank_barrier   reduce of this rank's shard + broadcast of the reduced shard, ordered
 *                   by device-side rank barriers (cchan_rank_barrier) between the kernels: the
 *                   pattern of docs/switch_channel.md, 1000 iterations with fresh data checked
 *                   every 100
 * The multicast path is never requested here (docs/architecture.md: multicast safety).
 */
#include <math.h>

#include "gpu_test.h"

#define SW_REGION (256ull * GT_MiB + 64 * GT_KiB) /* largest transfer + offsets + guards */
#define SW_GUARD 64ull
#define SW_BLOCKS 132
#define SW_THREADS 512

enum sw_type { T_F32, T_F16, T_BF16, T_I32, T_U32, T_COUNT };
static const char *const type_name[T_COUNT] = {"f32", "f16", "bf16", "i32", "u32"};
static const uint32_t type_size[T_COUNT] = {4, 2, 2, 4, 4};

typedef struct sw_env {
    cchan_mem_t *B, *L, *peerB[GT_MAX_RANKS];
    cchan_switch_t *owner;
    cchan_switch_channel_t ch;
    cchan_sem_set_t *sems;
    cchan_semaphore_t *d_barrier; /* device copy: one semaphore to each other rank */
    uint32_t npeers;
    uint8_t *h_pinned; /* host copy of one region */
} sw_env_t;
static sw_env_t g_sw;

/* ------------------------------------------------------------------ data */

/* Element i of rank r's input: floats in +-[0.25, 4) (f32 with 24-bit mantissas), integers over all
 * 32 bits. Returned as the type's bits. */
__host__ __device__ static inline uint32_t sw_input_bits(int type, uint64_t seed, int r,
                                                         uint64_t i) {
    uint64_t h = gt_mix64(seed ^ gt_mix64((uint64_t)r * 7919u + i * 0x9E3779B97F4A7C15ull));
    /* Built from bits, not with float arithmetic: nvcc may contract a multiply-add into an FMA
     * that the host compiler does not, and the host must regenerate exactly what the GPU wrote. */
    uint32_t bits = (uint32_t)(h >> 63) << 31 | (125u + (uint32_t)((h >> 23) & 3u)) << 23 |
                    (uint32_t)(h & 0x7FFFFFu);
    float f = cchan_f32_from_bits(bits);
    switch (type) {
    case T_F32: return cchan_f32_bits(f);
    case T_F16: return cchan_f32_to_f16(f).bits;
    case T_BF16: return cchan_f32_to_bf16(f).bits;
    default: return (uint32_t)(h >> 16);
    }
}

static double bits_value(int type, uint32_t b) {
    cchan_f16_t h;
    cchan_bf16_t bf;
    switch (type) {
    case T_F32: return (double)cchan_f32_from_bits(b);
    case T_F16: h.bits = (uint16_t)b; return (double)cchan_f16_to_f32(h);
    case T_BF16: bf.bits = (uint16_t)b; return (double)cchan_bf16_to_f32(bf);
    case T_I32: return (double)(int32_t)b;
    default: return (double)b;
    }
}

static double ulp_of(int type, double x) {
    int e;
    frexp(fabs(x) > 0 ? fabs(x) : 1e-30, &e);
    int mant = type == T_F32 ? 24 : type == T_F16 ? 11 : 8;
    double u = ldexp(1.0, e - mant);
    double min_sub = type == T_F32   ? ldexp(1.0, -149)
                     : type == T_F16 ? ldexp(1.0, -24)
                                     : ldexp(1.0, -133);
    return u > min_sub ? u : min_sub;
}

__global__ void k_sw_fill(uint8_t *p, uint64_t count, int type, uint64_t seed, int rank) {
    for (uint64_t i = gt_global_tid(); i < count; i += gt_global_nthreads()) {
        uint32_t b = sw_input_bits(type, seed, rank, i);
        if (type == T_F16 || type == T_BF16)
            ((uint16_t *)(void *)p)[i] = (uint16_t)b;
        else
            ((uint32_t *)(void *)p)[i] = b;
    }
}

/* ------------------------------------------------------------------ kernels under test */

__global__ void k_sw_reduce(const __grid_constant__ cchan_switch_channel_t ch, int type,
                            uint64_t dst_off, uint64_t src_off, uint64_t bytes) {
    const uint32_t tid = gt_global_tid(), nt = gt_global_nthreads();
    switch (type) {
    case T_F32: cchan_switch_channel_reduce_f32(&ch, dst_off, src_off, bytes, tid, nt); break;
    case T_F16: cchan_switch_channel_reduce_f16(&ch, dst_off, src_off, bytes, tid, nt); break;
    case T_BF16: cchan_switch_channel_reduce_bf16(&ch, dst_off, src_off, bytes, tid, nt); break;
    case T_I32: cchan_switch_channel_reduce_i32(&ch, dst_off, src_off, bytes, tid, nt); break;
    default: cchan_switch_channel_reduce_u32(&ch, dst_off, src_off, bytes, tid, nt); break;
    }
}

__global__ void k_sw_broadcast(const __grid_constant__ cchan_switch_channel_t ch, int type,
                               uint64_t dst_off, uint64_t src_off, uint64_t bytes) {
    const uint32_t tid = gt_global_tid(), nt = gt_global_nthreads();
    switch (type) {
    case T_F32: cchan_switch_channel_broadcast_f32(&ch, dst_off, src_off, bytes, tid, nt); break;
    case T_F16: cchan_switch_channel_broadcast_f16(&ch, dst_off, src_off, bytes, tid, nt); break;
    case T_BF16: cchan_switch_channel_broadcast_bf16(&ch, dst_off, src_off, bytes, tid, nt); break;
    case T_I32: cchan_switch_channel_broadcast_i32(&ch, dst_off, src_off, bytes, tid, nt); break;
    default: cchan_switch_channel_broadcast_u32(&ch, dst_off, src_off, bytes, tid, nt); break;
    }
}

/* One block: meets every other rank (signal, then wait) so that everything the stream did before
 * is visible to the others' next kernels, and everything they did before is visible here. */
__global__ void k_sw_rank_barrier(const cchan_semaphore_t *sems, uint32_t npeers) {
    cchan_rank_barrier(sems, npeers, threadIdx.x);
}

/* ------------------------------------------------------------------ host side */

static void sw_barrier_dev(gt_ctx_t *ctx) {
    GT_LAUNCH(ctx, k_sw_rank_barrier, 1, 32, g_sw.d_barrier, g_sw.npeers);
}

/* Copies [off - guard, off + bytes + guard) of a device buffer into h_pinned. */
static const uint8_t *sw_fetch(gt_ctx_t *ctx, const uint8_t *dev, uint64_t off, uint64_t bytes) {
    GT_CUDA(cudaMemcpyAsync(g_sw.h_pinned, dev + off - SW_GUARD, bytes + 2 * SW_GUARD,
                            cudaMemcpyDeviceToHost, ctx->stream));
    GT_SYNC(ctx);
    return g_sw.h_pinned + SW_GUARD;
}

static int sw_guards_ok(gt_ctx_t *ctx, const uint8_t *data, uint64_t bytes, const char *what) {
    for (uint64_t i = 0; i < SW_GUARD; i++) {
        if (data[-(int64_t)SW_GUARD + (int64_t)i] != GT_POISON || data[bytes + i] != GT_POISON) {
            gt_fail(ctx, "%s: guard byte %s the destination was overwritten", what,
                    data[-(int64_t)SW_GUARD + (int64_t)i] != GT_POISON ? "before" : "after");
            return 0;
        }
    }
    return 1;
}

static uint32_t elem_at(const uint8_t *p, int type, uint64_t i) {
    if (type_size[type] == 2) {
        uint16_t v;
        memcpy(&v, p + i * 2, 2);
        return v;
    }
    uint32_t v;
    memcpy(&v, p + i * 4, 4);
    return v;
}

/* Compares n elements of a reduce result with the float64 reference; reports the first bad one. */
static int sw_check_reduce(gt_ctx_t *ctx, const uint8_t *got, int type, uint64_t count,
                           uint64_t seed, const char *what) {
    const int n = ctx->nranks;
    uint64_t bad = 0, first = 0;
    double first_got = 0, first_ref = 0, first_tol = 0;
    for (uint64_t i = 0; i < count; i++) {
        uint32_t g = elem_at(got, type, i);
        int ok;
        double v = 0, ref = 0, tol = 0;
        if (type == T_I32 || type == T_U32) {
            uint32_t want = 0;
            for (int r = 0; r < n; r++) want += sw_input_bits(type, seed, r, i);
            ok = g == want;
            v = (double)g;
            ref = (double)want;
        } else {
            /* One rounding to T, plus n - 1 f32 additions of terms bounded by sum |x|. */
            double abs_sum = 0;
            for (int r = 0; r < n; r++) {
                double x = bits_value(type, sw_input_bits(type, seed, r, i));
                ref += x;
                abs_sum += fabs(x);
            }
            tol = 0.5 * ulp_of(type, ref) + (n - 1) * ldexp(abs_sum, -24);
            v = bits_value(type, g);
            ok = fabs(v - ref) <= tol;
        }
        if (!ok) {
            if (!bad) {
                first = i;
                first_got = v;
                first_ref = ref;
                first_tol = tol;
            }
            bad++;
        }
    }
    if (bad)
        gt_fail(ctx,
                "%s: %llu of %llu elements wrong; first %llu: got %.9g, reference %.9g (tolerance "
                "%.3g)",
                what, (unsigned long long)bad, (unsigned long long)count, (unsigned long long)first,
                first_got, first_ref, first_tol);
    return bad == 0;
}

static int sw_check_exact(gt_ctx_t *ctx, const uint8_t *got, int type, uint64_t count,
                          uint64_t seed, int from, const char *what) {
    for (uint64_t i = 0; i < count; i++) {
        uint32_t g = elem_at(got, type, i), want = sw_input_bits(type, seed, from, i);
        if (g != want) {
            gt_fail(ctx, "%s: element %llu from rank %d is 0x%x, want 0x%x", what,
                    (unsigned long long)i, from, g, want);
            return 0;
        }
    }
    return 1;
}

/* Sizes: bytes from 16 B to 256 MiB, then odd element counts; misaligned offsets for the small
 * ones. */
static const uint64_t sw_sizes[] = {16,    48,         64,          1024,        4096,
                                    65536, 1ull << 20, 16ull << 20, 64ull << 20, 256ull << 20};
static const uint64_t sw_odd_counts[] = {1, 3, 7, 9, 1025, 65537, 262147, 4194305};

typedef struct sw_item {
    uint64_t count, src_off, dst_off;
} sw_item_t;

/* The list of (count, offsets) a typed case runs. */
static int sw_items(int type, sw_item_t *out) {
    const uint64_t es = type_size[type];
    int n = 0;
    for (size_t k = 0; k < sizeof sw_sizes / sizeof sw_sizes[0]; k++) {
        uint64_t c = sw_sizes[k] / es;
        out[n++] = {c, 0, 4096};
        if (sw_sizes[k] <= (1ull << 20)) {
            out[n++] = {c, es, 4096 + es};     /* both misaligned alike: head, body, tail */
            out[n++] = {c, 3 * es, 4096 + 16}; /* misaligned against each other */
        }
    }
    for (size_t k = 0; k < sizeof sw_odd_counts / sizeof sw_odd_counts[0]; k++)
        out[n++] = {sw_odd_counts[k], es, 4096 + es};
    return n;
}

static uint64_t g_case_seq;

static void sw_reduce_case(gt_ctx_t *ctx, int type) {
    sw_item_t items[64];
    const int n = sw_items(type, items);
    uint8_t *b = g_sw.ch.member[ctx->rank], *l = g_sw.ch.local;
    char what[160];
    for (int k = 0; k < n && gt_all_ok(ctx); k++) {
        const sw_item_t it = items[k];
        const uint64_t bytes = it.count * type_size[type];
        const uint64_t seed = gt_seed(gt_hash_name(ctx->case_name), 0, ++g_case_seq);
        snprintf(what, sizeof what, "reduce_%s %llu elements (src_off %llu, dst_off %llu)",
                 type_name[type], (unsigned long long)it.count, (unsigned long long)it.src_off,
                 (unsigned long long)it.dst_off);
        GT_LAUNCH(ctx, k_sw_fill, gt_grid_for(ctx, it.count, 256), 256, b + it.src_off, it.count,
                  type, seed, ctx->rank);
        gt_poison(ctx, l + it.dst_off - SW_GUARD, bytes + 2 * SW_GUARD);
        sw_barrier_dev(ctx); /* both inputs written */
        GT_LAUNCH(ctx, k_sw_reduce, SW_BLOCKS, SW_THREADS, g_sw.ch, type, it.dst_off, it.src_off,
                  bytes);
        sw_barrier_dev(ctx); /* both reduces done before either input is rewritten */
        const uint8_t *got = sw_fetch(ctx, l, it.dst_off, bytes);
        if (sw_guards_ok(ctx, got, bytes, what))
            sw_check_reduce(ctx, got, type, it.count, seed, what);
    }
    if (ctx->case_ok && ctx->rank == 0)
        gt_log(ctx, "reduce_%s: %d transfers checked", type_name[type], n);
}

static void sw_broadcast_case(gt_ctx_t *ctx, int type) {
    sw_item_t items[64];
    const int n = sw_items(type, items);
    uint8_t *b = g_sw.ch.member[ctx->rank], *l = g_sw.ch.local;
    char what[160];
    for (int k = 0; k < n && gt_all_ok(ctx); k++) {
        const sw_item_t it = items[k];
        const uint64_t bytes = it.count * type_size[type];
        const uint64_t seed = gt_seed(gt_hash_name(ctx->case_name), 0, ++g_case_seq);
        uint64_t slot[GT_MAX_RANKS];
        for (int r = 0; r < ctx->nranks; r++) slot[r] = (1 + (uint64_t)r) * SW_REGION + it.dst_off;
        GT_LAUNCH(ctx, k_sw_fill, gt_grid_for(ctx, it.count, 256), 256, l + it.src_off, it.count,
                  type, seed, ctx->rank);
        for (int r = 0; r < ctx->nranks; r++)
            gt_poison(ctx, b + slot[r] - SW_GUARD, bytes + 2 * SW_GUARD);
        sw_barrier_dev(ctx);
        GT_LAUNCH(ctx, k_sw_broadcast, SW_BLOCKS, SW_THREADS, g_sw.ch, type, slot[ctx->rank],
                  it.src_off, bytes);
        sw_barrier_dev(ctx); /* every broadcast landed in every buffer */
        for (int r = 0; r < ctx->nranks && ctx->case_ok; r++) {
            snprintf(what, sizeof what,
                     "broadcast_%s %llu elements from rank %d (src_off %llu, dst_off %llu)",
                     type_name[type], (unsigned long long)it.count, r,
                     (unsigned long long)it.src_off, (unsigned long long)it.dst_off);
            const uint8_t *got = sw_fetch(ctx, b, slot[r], bytes);
            if (sw_guards_ok(ctx, got, bytes, what))
                sw_check_exact(ctx, got, type, it.count, seed, r, what);
        }
        sw_barrier_dev(ctx); /* checks done before the next poison */
    }
    if (ctx->case_ok && ctx->rank == 0)
        gt_log(ctx, "broadcast_%s: %d transfers from each of %d ranks checked on every rank",
               type_name[type], n, ctx->nranks);
}

#define SW_TYPED_CASES(T, idx)                                                                     \
    static void case_reduce_##T(gt_ctx_t *ctx) { sw_reduce_case(ctx, idx); }                       \
    static void case_broadcast_##T(gt_ctx_t *ctx) { sw_broadcast_case(ctx, idx); }
SW_TYPED_CASES(f32, T_F32)
SW_TYPED_CASES(f16, T_F16)
SW_TYPED_CASES(bf16, T_BF16)
SW_TYPED_CASES(i32, T_I32)
SW_TYPED_CASES(u32, T_U32)

static void case_handle(gt_ctx_t *ctx) {
    const cchan_switch_channel_t *ch = &g_sw.ch;
    GT_EXPECT(ctx, ch->path == CCHAN_SWITCH_PATH_PORTABLE, "path %u (%s)", ch->path,
              cchan_switch_path_name(ch->path));
    GT_EXPECT(ctx, ch->mc == NULL, "a multicast address on the portable path");
    GT_EXPECT(ctx, ch->nmembers == (uint32_t)ctx->nranks && ch->rank == (uint32_t)ctx->rank,
              "nmembers %u rank %u (want %d and %d)", ch->nmembers, ch->rank, ctx->nranks,
              ctx->rank);
    GT_EXPECT(ctx, ch->member[ctx->rank] == (uint8_t *)cchan_mem_ptr(g_sw.B), "own member pointer");
    for (int r = 0; r < ctx->nranks; r++)
        GT_EXPECT(ctx, ch->member[r] != NULL, "rank %d's buffer is not mapped", r);
    GT_EXPECT(ctx, ch->buf_bytes == cchan_mem_size(g_sw.B) && ch->local == cchan_mem_ptr(g_sw.L),
              "sizes and local buffer");
    if (ctx->rank == 0) gt_log(ctx, "switch channel path: %s", cchan_switch_path_name(ch->path));
}

/* All-reduce of n f32 elements in B[0 ..): rank r reduces shard r into L, then broadcasts it into
 * B[SW_REGION + shard r] of every rank; device rank barriers order the steps. */
static void case_allreduce(gt_ctx_t *ctx) {
    const uint64_t count = (8ull << 20) + 6; /* 32 MiB + 24 B: uneven shards */
    const uint64_t first = count * (uint64_t)ctx->rank / (uint64_t)ctx->nranks;
    const uint64_t mine = count * (uint64_t)(ctx->rank + 1) / (uint64_t)ctx->nranks - first;
    uint8_t *b = g_sw.ch.member[ctx->rank];
    for (int iter = 0; iter < 1000; iter++) {
        const int check = iter % 100 == 99;
        const uint64_t seed = gt_seed(gt_hash_name("allreduce"), 0, (uint64_t)iter / 100);
        if (iter % 100 == 0) {
            GT_LAUNCH(ctx, k_sw_fill, gt_grid_for(ctx, count, 256), 256, b, count, T_F32, seed,
                      ctx->rank);
            gt_poison(ctx, b + SW_REGION - SW_GUARD, count * 4 + 2 * SW_GUARD);
        }
        sw_barrier_dev(ctx);
        GT_LAUNCH(ctx, k_sw_reduce, SW_BLOCKS, SW_THREADS, g_sw.ch, T_F32, SW_GUARD, first * 4,
                  mine * 4);
        GT_LAUNCH(ctx, k_sw_broadcast, SW_BLOCKS, SW_THREADS, g_sw.ch, T_F32, SW_REGION + first * 4,
                  SW_GUARD, mine * 4);
        sw_barrier_dev(ctx);
        if (check) {
            char what[96];
            snprintf(what, sizeof what, "allreduce iteration %d", iter);
            const uint8_t *got = sw_fetch(ctx, b, SW_REGION, count * 4);
            if (sw_guards_ok(ctx, got, count * 4, what))
                sw_check_reduce(ctx, got, T_F32, count, seed, what);
            if (!gt_all_ok(ctx)) break;
        }
    }
    if (ctx->case_ok && ctx->rank == 0) gt_log(ctx, "allreduce: 1000 iterations, 10 checked");
}

/* ------------------------------------------------------------------ main */

static void sw_setup(gt_ctx_t *ctx) {
    GT_CCHAN(cchan_mem_alloc(ctx->comm, (1 + (uint64_t)ctx->nranks) * SW_REGION, 0, &g_sw.B));
    GT_CCHAN(cchan_mem_alloc(ctx->comm, SW_REGION, 0, &g_sw.L));
    GT_CCHAN(cchan_mem_exchange(ctx->comm, g_sw.B, g_sw.peerB));
    GT_CCHAN(cchan_switch_channel_create(ctx->comm, g_sw.B, g_sw.L, 0, &g_sw.ch, &g_sw.owner));
    GT_CCHAN(cchan_sem_set_create(ctx->comm, 1, 0, &g_sw.sems));
    cchan_semaphore_t s[GT_MAX_RANKS];
    g_sw.npeers = 0;
    for (int r = 0; r < ctx->nranks; r++)
        if (r != ctx->rank) GT_CCHAN(cchan_sem_set_get(g_sw.sems, r, 0, &s[g_sw.npeers++]));
    GT_CUDA(cudaMalloc((void **)&g_sw.d_barrier, g_sw.npeers * sizeof s[0]));
    GT_CUDA(cudaMemcpy(g_sw.d_barrier, s, g_sw.npeers * sizeof s[0], cudaMemcpyHostToDevice));
    GT_CUDA(cudaMallocHost((void **)&g_sw.h_pinned, SW_REGION));
}

static void sw_teardown(gt_ctx_t *ctx) {
    gt_barrier(ctx);
    GT_CCHAN(cchan_switch_destroy(g_sw.owner));
    GT_CCHAN(cchan_sem_set_destroy(g_sw.sems));
    for (int r = 0; r < ctx->nranks; r++)
        if (r != ctx->rank) GT_CCHAN(cchan_mem_destroy(g_sw.peerB[r]));
    gt_barrier(ctx);
    GT_CCHAN(cchan_mem_destroy(g_sw.B));
    GT_CCHAN(cchan_mem_destroy(g_sw.L));
    GT_CUDA(cudaFree(g_sw.d_barrier));
    GT_CUDA(cudaFreeHost(g_sw.h_pinned));
}

static void sw_cases(gt_ctx_t *ctx) {
    gt_run(ctx, "handle", case_handle, 30);
    gt_run(ctx, "reduce_f32", case_reduce_f32, 120);
    gt_run(ctx, "reduce_f16", case_reduce_f16, 120);
    gt_run(ctx, "reduce_bf16", case_reduce_bf16, 120);
    gt_run(ctx, "reduce_i32", case_reduce_i32, 120);
    gt_run(ctx, "reduce_u32", case_reduce_u32, 120);
    gt_run(ctx, "broadcast_f32", case_broadcast_f32, 120);
    gt_run(ctx, "broadcast_f16", case_broadcast_f16, 120);
    gt_run(ctx, "broadcast_bf16", case_broadcast_bf16, 120);
    gt_run(ctx, "broadcast_i32", case_broadcast_i32, 120);
    gt_run(ctx, "broadcast_u32", case_broadcast_u32, 120);
    gt_run(ctx, "allreduce_rank_barrier", case_allreduce, 120);
}

GT_MAIN({"test_switch_channel_gpu", sw_setup, sw_cases, sw_teardown, NULL, NULL})
