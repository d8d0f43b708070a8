/* Memory-channel operations between processes, each rank a group of CPU threads acting as one
 * thread block: put and get of random data (1 B up to the largest size, odd sizes, unaligned
 * offsets, poisoned destinations), read_/write_ of every type, reduce_put in f32/f16/bf16 against a
 * double reference, and the rank barrier.
 *
 *   mc_ops [max_bytes]   (default 1 MiB + 3; the 2-rank test runs up to 8 MiB)
 */
#include <math.h>

#include "mc_common.h"

#define THREADS 4
#define POISON 0xa5u
#define GUARD 64
#define MAX_OFF 32

static mc_fixture_t fx;
static uint64_t max_bytes;

typedef struct op_case {
    uint64_t bytes, remote_off, local_off, seed;
} op_case_t;

static uint64_t seed_of(uint64_t seed, int rank) { return seed * 131u + (uint64_t)rank; }

/* Destination bytes [0, off) and [off + bytes, + GUARD) must still hold the poison. */
static void check_poison(const uint8_t *slot, uint64_t off, uint64_t bytes, int peer,
                         const char *op) {
    for (uint64_t i = 0; i < off + bytes + GUARD; i++) {
        if (i >= off && i < off + bytes) continue;
        if (slot[i] != POISON) {
            fprintf(
                stderr,
                "rank %d: %s of %llu bytes from peer %d wrote byte %llu outside [%llu, +%llu)\n",
                fx.me, op, (unsigned long long)bytes, peer, (unsigned long long)i,
                (unsigned long long)off, (unsigned long long)bytes);
            exit(1);
        }
    }
}

/* data[i] must be the byte the sender generated at position src_off + i. */
static void check_data(const uint8_t *data, uint64_t bytes, uint64_t seed, uint64_t src_off,
                       int peer, const char *op) {
    for (uint64_t i = 0; i < bytes; i++) {
        if (data[i] != mt_byte(seed, src_off + i)) {
            fprintf(stderr, "rank %d: %s of %llu bytes from peer %d: byte %llu is wrong\n", fx.me,
                    op, (unsigned long long)bytes, peer, (unsigned long long)i);
            exit(1);
        }
    }
}

/* ---------------------------------------------------------------- put and get */

static void put_case(mt_group_t *g, uint32_t tid) {
    const op_case_t *c = g->arg;
    uint8_t *win = mc_local(&fx);
    if (tid == 0) {
        for (int p = 0; p < fx.n; p++)
            memset(win + mc_inbox(&fx, p), POISON, c->remote_off + c->bytes + GUARD);
        mt_fill(win + mc_outbox(&fx), c->local_off + c->bytes, seed_of(c->seed, fx.me));
        mc_rank_barrier(&fx); /* every inbox poisoned before anyone puts */
    }
    mt_group_sync(g);
    for (int p = 0; p < fx.n; p++)
        if (p != fx.me)
            cchan_memory_channel_put(&fx.ch[p], mc_inbox(&fx, fx.me) + c->remote_off,
                                     mc_outbox(&fx) + c->local_off, c->bytes, tid, THREADS);
    mt_group_sync(g); /* HB: all the group's stores, then one signal */
    if (tid == 0) {
        for (int p = 0; p < fx.n; p++)
            if (p != fx.me) cchan_memory_channel_signal(&fx.ch[p]);
        for (int p = 0; p < fx.n; p++)
            if (p != fx.me) MT_OK(cchan_memory_channel_wait(&fx.ch[p]));
    }
    mt_group_sync(g);
    for (int p = (int)tid; p < fx.n; p += THREADS) {
        if (p == fx.me) continue;
        const uint8_t *slot = win + mc_inbox(&fx, p);
        check_data(slot + c->remote_off, c->bytes, seed_of(c->seed, p), c->local_off, p, "put");
        check_poison(slot, c->remote_off, c->bytes, p, "put");
    }
    mt_group_sync(g);
    if (tid == 0) mc_rank_barrier(&fx); /* everyone checked before anyone poisons again */
    mt_group_sync(g);
}

static void get_case(mt_group_t *g, uint32_t tid) {
    const op_case_t *c = g->arg;
    uint8_t *win = mc_local(&fx);
    if (tid == 0) {
        for (int p = 0; p < fx.n; p++)
            memset(win + mc_inbox(&fx, p), POISON, c->local_off + c->bytes + GUARD);
        mt_fill(win + mc_outbox(&fx), c->remote_off + c->bytes, seed_of(c->seed, fx.me));
        mc_rank_barrier(&fx); /* every outbox filled before anyone reads it */
    }
    mt_group_sync(g);
    for (int p = 0; p < fx.n; p++)
        if (p != fx.me)
            cchan_memory_channel_get(&fx.ch[p], mc_outbox(&fx) + c->remote_off,
                                     mc_inbox(&fx, p) + c->local_off, c->bytes, tid, THREADS);
    mt_group_sync(g);
    for (int p = (int)tid; p < fx.n; p += THREADS) {
        if (p == fx.me) continue;
        const uint8_t *slot = win + mc_inbox(&fx, p);
        check_data(slot + c->local_off, c->bytes, seed_of(c->seed, p), c->remote_off, p, "get");
        check_poison(slot, c->local_off, c->bytes, p, "get");
    }
    mt_group_sync(g);
    if (tid == 0) mc_rank_barrier(&fx); /* everyone read before anyone refills its outbox */
    mt_group_sync(g);
}

static void put_get_cases(void) {
    static const uint64_t sizes[] = {1,
                                     2,
                                     3,
                                     7,
                                     15,
                                     16,
                                     17,
                                     31,
                                     33,
                                     64,
                                     100,
                                     255,
                                     256,
                                     1000,
                                     4095,
                                     4096,
                                     4097,
                                     65537,
                                     262147,
                                     (1u << 20) + 3,
                                     (3u << 20) + 1,
                                     8u << 20};
    static const uint64_t offs[][2] = {{0, 0}, {1, 0},  {0, 3},   {5, 9},
                                       {8, 8}, {13, 2}, {16, 32}, {MAX_OFF, 1}};
    uint64_t seed = 1;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        if (sizes[s] > max_bytes) continue;
        size_t noffs = sizes[s] < 65536 ? sizeof offs / sizeof offs[0] : 2;
        for (size_t o = 0; o < noffs; o++) {
            op_case_t c = {sizes[s], offs[o][0], offs[o][1], seed++};
            mt_group_run(THREADS, put_case, &c);
            c.seed = seed++;
            mt_group_run(THREADS, get_case, &c);
        }
    }
}

/* ---------------------------------------------------------------- single elements */

static void elements(void) {
    uint8_t *win = mc_local(&fx);
    for (int p = 0; p < fx.n; p++) {
        if (p == fx.me) continue;
        const cchan_memory_channel_t *ch = &fx.ch[p];
        uint64_t base = mc_inbox(&fx, fx.me), tag = (uint64_t)fx.me * 16 + (uint64_t)p;
        cchan_memory_channel_write_u32(ch, base + 0, 0xdead0000u + (uint32_t)tag);
        cchan_memory_channel_write_u64(ch, base + 8, 0x1234567800000000ull + tag);
        cchan_memory_channel_write_i32(ch, base + 16, -(int32_t)tag - 1);
        cchan_memory_channel_write_f32(ch, base + 20, 0.5f + (float)tag);
        cchan_memory_channel_write_f64(ch, base + 24, -1.25 - (double)tag);
        cchan_memory_channel_signal(ch);
    }
    for (int p = 0; p < fx.n; p++) {
        if (p == fx.me) continue;
        const cchan_memory_channel_t *ch = &fx.ch[p];
        MT_OK(cchan_memory_channel_wait(ch));
        /* What p wrote into my slot for p, read locally ... */
        const uint8_t *slot = win + mc_inbox(&fx, p);
        uint64_t tag = (uint64_t)p * 16 + (uint64_t)fx.me;
        uint32_t u32;
        uint64_t u64;
        int32_t i32;
        float f32;
        double f64;
        memcpy(&u32, slot + 0, 4);
        memcpy(&u64, slot + 8, 8);
        memcpy(&i32, slot + 16, 4);
        memcpy(&f32, slot + 20, 4);
        memcpy(&f64, slot + 24, 8);
        MT_CHECK(u32 == 0xdead0000u + (uint32_t)tag && u64 == 0x1234567800000000ull + tag);
        MT_CHECK(i32 == -(int32_t)tag - 1 && f32 == 0.5f + (float)tag &&
                 f64 == -1.25 - (double)tag);
        /* ... and what I wrote into p's slot for me, read back through the channel. */
        uint64_t base = mc_inbox(&fx, fx.me), mine = (uint64_t)fx.me * 16 + (uint64_t)p;
        MT_CHECK(cchan_memory_channel_read_u32(ch, base + 0) == 0xdead0000u + (uint32_t)mine);
        MT_CHECK(cchan_memory_channel_read_u64(ch, base + 8) == 0x1234567800000000ull + mine);
        MT_CHECK(cchan_memory_channel_read_i32(ch, base + 16) == -(int32_t)mine - 1);
        MT_CHECK(cchan_memory_channel_read_f32(ch, base + 20) == 0.5f + (float)mine);
        MT_CHECK(cchan_memory_channel_read_f64(ch, base + 24) == -1.25 - (double)mine);
    }
    mc_rank_barrier(&fx);
}

/* ---------------------------------------------------------------- reduce_put */

typedef enum { F32, F16, BF16 } elem_t;
static const size_t elem_size[] = {4, 2, 2};

typedef struct reduce_case {
    elem_t type;
    uint64_t count;
} reduce_case_t;

/* Rank r's element i, in [-1, 1), exactly representable in the element type. */
static float input(elem_t t, int rank, uint64_t i) {
    uint64_t s = seed_of(1000 + (uint64_t)t, rank);
    uint32_t h = (uint32_t)mt_byte(s, 4 * i) | (uint32_t)mt_byte(s, 4 * i + 1) << 8 |
                 (uint32_t)mt_byte(s, 4 * i + 2) << 16;
    float v = (float)h / 8388608.0f - 1.0f;
    if (t == F16) return cchan_f16_to_f32(cchan_f32_to_f16(v));
    if (t == BF16) return cchan_bf16_to_f32(cchan_f32_to_bf16(v));
    return v;
}

static void store(elem_t t, uint8_t *base, uint64_t i, float v) {
    if (t == F32)
        memcpy(base + 4 * i, &v, 4);
    else if (t == F16)
        ((cchan_f16_t *)(void *)base)[i] = cchan_f32_to_f16(v);
    else
        ((cchan_bf16_t *)(void *)base)[i] = cchan_f32_to_bf16(v);
}

static double load(elem_t t, const uint8_t *base, uint64_t i) {
    if (t == F32) {
        float v;
        memcpy(&v, base + 4 * i, 4);
        return v;
    }
    if (t == F16) return cchan_f16_to_f32(((const cchan_f16_t *)(const void *)base)[i]);
    return cchan_bf16_to_f32(((const cchan_bf16_t *)(const void *)base)[i]);
}

/* Summed in f32 (error ~ n ulp of f32), rounded once to the element type. */
static double tolerance(elem_t t, double ref) {
    double rel = t == F32 ? 1e-6 : t == F16 ? ldexp(1, -10) : ldexp(1, -7);
    return fabs(ref) * rel + 1e-6;
}

static void reduce_case(mt_group_t *g, uint32_t tid) {
    const reduce_case_t *c = g->arg;
    uint8_t *win = mc_local(&fx);
    if (tid == 0) {
        for (uint64_t i = 0; i < c->count; i++)
            store(c->type, win + mc_outbox(&fx), i, input(c->type, fx.me, i));
        mc_rank_barrier(&fx);
    }
    mt_group_sync(g);
    /* Every rank's outbox at once (peers' mapped here), summed into each peer's slot for me. */
    const void *srcs[MC_MAX_RANKS];
    for (int q = 0; q < fx.n; q++)
        srcs[q] = (const uint8_t *)cchan_mem_ptr(fx.peers[q]) + mc_outbox(&fx);
    for (int p = 0; p < fx.n; p++) {
        if (p == fx.me) continue;
        uint64_t dst = mc_inbox(&fx, fx.me);
        if (c->type == F32)
            cchan_memory_channel_reduce_put_f32(&fx.ch[p], dst, (const float *const *)srcs, fx.n,
                                                c->count, tid, THREADS);
        else if (c->type == F16)
            cchan_memory_channel_reduce_put_f16(&fx.ch[p], dst, (const cchan_f16_t *const *)srcs,
                                                fx.n, c->count, tid, THREADS);
        else
            cchan_memory_channel_reduce_put_bf16(&fx.ch[p], dst, (const cchan_bf16_t *const *)srcs,
                                                 fx.n, c->count, tid, THREADS);
    }
    mt_group_sync(g);
    if (tid == 0) {
        for (int p = 0; p < fx.n; p++)
            if (p != fx.me) cchan_memory_channel_signal(&fx.ch[p]);
        for (int p = 0; p < fx.n; p++)
            if (p != fx.me) MT_OK(cchan_memory_channel_wait(&fx.ch[p]));
    }
    mt_group_sync(g);
    for (uint64_t i = tid; i < c->count; i += THREADS) {
        double ref = 0;
        for (int q = 0; q < fx.n; q++) ref += input(c->type, q, i);
        for (int p = 0; p < fx.n; p++) {
            if (p == fx.me) continue;
            double got = load(c->type, win + mc_inbox(&fx, p), i);
            if (fabs(got - ref) > tolerance(c->type, ref)) {
                fprintf(stderr,
                        "rank %d: reduce_put type %d element %llu from peer %d: %.9g, want %.9g\n",
                        fx.me, (int)c->type, (unsigned long long)i, p, got, ref);
                exit(1);
            }
        }
    }
    mt_group_sync(g);
    if (tid == 0) mc_rank_barrier(&fx);
    mt_group_sync(g);
}

static void reduce_cases(void) {
    static const uint64_t counts[] = {1, 3, 1000, 65536 + 5};
    for (int t = F32; t <= BF16; t++)
        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
            reduce_case_t c = {(elem_t)t, counts[i]};
            MT_CHECK(c.count * elem_size[t] <= fx.slot);
            mt_group_run(THREADS, reduce_case, &c);
        }
}

/* ---------------------------------------------------------------- rank barrier */

/* Before barrier k every rank stores k into its slot of every peer; after it, every slot of mine
 * says k or k + 1 (a peer may already be on its way to the next barrier, not past it). */
static void barriers(void) {
    uint8_t *win = mc_local(&fx);
    for (uint64_t k = 1; k <= 200; k++) {
        for (int p = 0; p < fx.n; p++)
            if (p != fx.me) cchan_memory_channel_write_u64(&fx.ch[p], mc_inbox(&fx, fx.me) + 64, k);
        mc_rank_barrier(&fx);
        for (int p = 0; p < fx.n; p++) {
            if (p == fx.me) continue;
            uint64_t v = __atomic_load_n((uint64_t *)(void *)(win + mc_inbox(&fx, p) + 64),
                                         __ATOMIC_RELAXED);
            MT_CHECK(v == k || v == k + 1);
        }
    }
    mc_rank_barrier(&fx);
}

int main(int argc, char **argv) {
    max_bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (1u << 20) + 3;
    mc_setup(&fx, max_bytes + MAX_OFF + GUARD, 60000);
    double t0 = mt_now_s();
    put_get_cases();
    elements();
    reduce_cases();
    barriers();
    MT_OK(cchan_comm_check_device(fx.comm));
    mc_teardown(&fx);
    printf("rank %d: mc_ops ok (%.1f s)\n", mt_rank, mt_now_s() - t0);
    return 0;
}
