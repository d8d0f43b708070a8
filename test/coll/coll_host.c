/* cchan_coll on the host platform: every algorithm with a host implementation, every op and dtype,
 * odd counts, in place and out of place, on random data checked exactly against a float64
 * reference (the values are small multiples of a power of two, so every partial sum is exact in
 * f32 and the rounded result is exact in f16/bf16: any wrong, missing or doubled contribution
 * shows). Outputs carry guard elements after them that must stay untouched.
 *
 *   cchan-run -n N coll_host [scratch_bytes [max_count]]
 *
 * scratch_bytes small forces multi-round HB calls and LL size limits. Exit 0 when every check on
 * every rank passed.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan_coll.h"
#include "cchan_test.h"
#include "coll_algos.h" /* coll_ll_index */

#define GUARD 19 /* elements after every output */
#define GUARD_BYTE 0x7B

static int g_rank, g_nranks;

static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Rank r's input element i in call `seed`: k * 2^-s with |k| small enough that sums of up to 8
 * stay exact in the dtype. */
static double value(uint64_t seed, int r, uint64_t i, cchan_coll_dtype_t dt) {
    uint64_t h = mix64(seed ^ mix64((uint64_t)r * 0x10001ull + i * 0x9E37ull + 1));
    switch (dt) {
    case CCHAN_COLL_F32: return (double)((int64_t)(h % 2049) - 1024) / 8.0;
    case CCHAN_COLL_F16: return (double)((int64_t)(h % 129) - 64) / 4.0;
    default: return (double)((int64_t)(h % 33) - 16) / 2.0;
    }
}

static void store(void *buf, uint64_t i, double v, cchan_coll_dtype_t dt) {
    if (dt == CCHAN_COLL_F32) {
        ((float *)buf)[i] = (float)v;
    } else if (dt == CCHAN_COLL_F16) {
        ((cchan_f16_t *)buf)[i] = cchan_f32_to_f16((float)v);
    } else {
        ((cchan_bf16_t *)buf)[i] = cchan_f32_to_bf16((float)v);
    }
}

static double load(const void *buf, uint64_t i, cchan_coll_dtype_t dt) {
    if (dt == CCHAN_COLL_F32) return ((const float *)buf)[i];
    if (dt == CCHAN_COLL_F16) return cchan_f16_to_f32(((const cchan_f16_t *)buf)[i]);
    return cchan_bf16_to_f32(((const cchan_bf16_t *)buf)[i]);
}

static const char *dtype_name(cchan_coll_dtype_t dt) {
    return dt == CCHAN_COLL_F32 ? "f32" : dt == CCHAN_COLL_F16 ? "f16" : "bf16";
}
static const char *op_name(cchan_coll_op_t op) {
    return op == CCHAN_COLL_ALLREDUCE   ? "allreduce"
           : op == CCHAN_COLL_ALLGATHER ? "allgather"
                                        : "reducescatter";
}

/* Runs one call and checks it. Returns 1 if the algorithm ran, 0 if it reported unsupported. */
/* Registered buffers (cchan_mem_alloc, then cchan_coll_register) for the zero-copy and copy-engine
 * cases; NULL: each case mallocs its own. */
static uint8_t *g_reg_a, *g_reg_b;

static int run_case(cchan_coll_t *coll, cchan_coll_op_t op, cchan_coll_algo_t algo,
                    cchan_coll_dtype_t dt, size_t count, int in_place, uint64_t seed) {
    const size_t es = cchan_coll_dtype_size(dt), n = (size_t)g_nranks;
    size_t in_elems = op == CCHAN_COLL_REDUCESCATTER ? count * n : count;
    size_t out_elems = op == CCHAN_COLL_ALLGATHER ? count * n : count;
    size_t full = op == CCHAN_COLL_ALLREDUCE ? count * es : count * n * es;
    int supported = cchan_coll_supported(coll, op, algo, full);
    /* in place: one buffer holding the larger of input and output */
    size_t buf_elems = (in_elems > out_elems ? in_elems : out_elems) + GUARD;
    int own = g_reg_a == NULL;
    uint8_t *a = own ? (uint8_t *)malloc(buf_elems * es) : g_reg_a;
    uint8_t *b = own ? (uint8_t *)malloc((out_elems + GUARD) * es) : g_reg_b;
    if (!a || !b) exit(1);
    memset(a, GUARD_BYTE, buf_elems * es);
    memset(b, GUARD_BYTE, (out_elems + GUARD) * es);
    uint8_t *send, *recv;
    if (!in_place) {
        send = a;
        recv = b;
    } else if (op == CCHAN_COLL_ALLGATHER) {
        recv = a;
        send = a + (size_t)g_rank * count * es;
    } else {
        send = a;
        recv = op == CCHAN_COLL_REDUCESCATTER ? a + (size_t)g_rank * count * es : a;
    }
    for (size_t i = 0; i < in_elems; i++) store(send, i, value(seed, g_rank, i, dt), dt);

    int st;
    switch (op) {
    case CCHAN_COLL_ALLREDUCE:
        st = cchan_coll_allreduce(coll, send, recv, count, dt, algo, NULL);
        break;
    case CCHAN_COLL_ALLGATHER:
        st = cchan_coll_allgather(coll, send, recv, count, dt, algo, NULL);
        break;
    default: st = cchan_coll_reducescatter(coll, send, recv, count, dt, algo, NULL); break;
    }
    if (!supported) {
        CT_EXPECT(st == CCHAN_ERR_UNSUPPORTED && strstr(cchan_coll_last_error(), "cannot run"),
                  "%s %s %zu: unsupported call returned %d (%s)", op_name(op),
                  cchan_coll_algo_name(algo), count, st, cchan_coll_last_error());
        if (own) {
            free(a);
            free(b);
        }
        return 0;
    }
    CT_EXPECT(st == 0, "%s %s %s count %zu %s: %d (%s)", op_name(op), cchan_coll_algo_name(algo),
              dtype_name(dt), count, in_place ? "in place" : "out of place", st,
              cchan_coll_last_error());
    size_t bad = 0, first = (size_t)-1;
    double got_first = 0, want_first = 0;
    for (size_t i = 0; i < out_elems && st == 0; i++) {
        double want = 0;
        if (op == CCHAN_COLL_ALLGATHER) {
            want = value(seed, (int)(i / count), i % count, dt);
        } else {
            size_t src = op == CCHAN_COLL_ALLREDUCE ? i : (size_t)g_rank * count + i;
            for (int r = 0; r < g_nranks; r++) want += value(seed, r, src, dt);
        }
        double got = load(recv, i, dt);
        if (got != want) {
            if (!bad++) {
                first = i;
                got_first = got;
                want_first = want;
            }
        }
    }
    CT_EXPECT(bad == 0, "%s %s %s count %zu %s: %zu wrong elements, first [%zu] = %g, want %g",
              op_name(op), cchan_coll_algo_name(algo), dtype_name(dt), count,
              in_place ? "in place" : "out of place", bad, first, got_first, want_first);
    /* guards: nothing written past the output (and, in place, past the whole buffer) */
    const uint8_t *end = recv + out_elems * es;
    const uint8_t *lim = in_place ? a + buf_elems * es : b + (out_elems + GUARD) * es;
    size_t touched = 0;
    for (const uint8_t *p = end; p < lim; p++) touched += *p != GUARD_BYTE;
    if (in_place && op == CCHAN_COLL_REDUCESCATTER) touched = 0; /* the input lies beyond */
    CT_EXPECT(touched == 0, "%s %s %s count %zu: %zu guard bytes overwritten", op_name(op),
              cchan_coll_algo_name(algo), dtype_name(dt), count, touched);
    if (own) {
        free(a);
        free(b);
    }
    return 1;
}

static void test_errors(cchan_coll_t *coll) {
    float x[4] = {0};
    CT_EXPECT(cchan_coll_allreduce(NULL, x, x, 4, CCHAN_COLL_F32, CCHAN_COLL_AUTO, NULL) == -EINVAL,
              "NULL coll");
    CT_EXPECT(cchan_coll_allreduce(coll, NULL, x, 4, CCHAN_COLL_F32, CCHAN_COLL_AUTO, NULL) ==
                  -EINVAL,
              "NULL send");
    CT_EXPECT(cchan_coll_allreduce(coll, x, x, 4, (cchan_coll_dtype_t)7, CCHAN_COLL_AUTO, NULL) ==
                  -EINVAL,
              "bad dtype");
    CT_EXPECT(strstr(cchan_coll_last_error(), "dtype") != NULL, "message names the dtype: '%s'",
              cchan_coll_last_error());
    CT_EXPECT(cchan_coll_allgather(coll, x, x, 4, CCHAN_COLL_F32, (cchan_coll_algo_t)9, NULL) ==
                  -EINVAL,
              "bad algo");
    CT_EXPECT(cchan_coll_allreduce(coll, x, x, SIZE_MAX / 2, CCHAN_COLL_F32, CCHAN_COLL_AUTO,
                                   NULL) == CCHAN_ERR_RANGE,
              "overflowing count");
    CT_EXPECT(cchan_coll_allreduce(coll, x, x, 0, CCHAN_COLL_F32, CCHAN_COLL_AUTO, NULL) == 0,
              "zero count is a no-op");
    CT_EXPECT(cchan_coll_allreduce(coll, x, x, 4, CCHAN_COLL_F32, CCHAN_COLL_CE_ALLPAIRS, NULL) ==
                      CCHAN_ERR_UNSUPPORTED &&
                  strstr(cchan_coll_last_error(), "registered"),
              "CE all-pairs on unregistered buffers: '%s'", cchan_coll_last_error());
    CT_EXPECT(cchan_coll_supported(coll, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_SWITCH, 1024) &&
                  !cchan_coll_supported(coll, CCHAN_COLL_ALLGATHER, CCHAN_COLL_SWITCH, 1024),
              "switch: AllReduce only");
    for (int op = 0; op < 3; op++)
        for (size_t bytes = 1; bytes <= ((size_t)1 << 31); bytes *= 4) {
            cchan_coll_algo_t a = cchan_coll_select(coll, (cchan_coll_op_t)op, bytes);
            CT_EXPECT(a != CCHAN_COLL_AUTO &&
                          cchan_coll_supported(coll, (cchan_coll_op_t)op, a, bytes),
                      "select(%s, %zu) = %s, which is not supported", op_name((cchan_coll_op_t)op),
                      bytes, cchan_coll_algo_name(a));
        }
    CT_EXPECT(cchan_coll_select(coll, CCHAN_COLL_ALLREDUCE, (size_t)1 << 30) ==
                  CCHAN_COLL_HB_ALLPAIRS,
              "1 GiB allreduce selects HB");
    CT_EXPECT(cchan_coll_select(coll, CCHAN_COLL_ALLREDUCE, 1024) == CCHAN_COLL_LL_ALLPAIRS,
              "1 KiB allreduce selects LL");
    cchan_coll_config_t bad = CCHAN_COLL_CONFIG_INIT;
    bad.magic = 0;
    cchan_coll_t *c2 = NULL;
    CT_EXPECT(cchan_coll_create(NULL, NULL, &c2) == -EINVAL && c2 == NULL, "NULL comm");
    (void)bad;
}

/* The LL kernels' packet-to-thread map: a bijection onto [0, nblocks * nthreads) for every shape,
 * the lanes of a warp on consecutive packets, a warp-aligned run of them (one coalesced store per
 * warp: CCHAN_WARP_SIZE lanes, 64 in the wave64 build), and a small message lands on every block
 * (a 16 KiB AllGather's 1024 packets on all 16 of 16 blocks of 512 threads, not on the first 2). */
static void test_ll_index(void) {
    static const uint32_t shapes[][2] = {{16, 512}, {16, 1}, {2, 1},  {32, 256},
                                         {7, 96},   {1, 32}, {3, 64}, {5, 192}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        uint32_t nb = shapes[s][0], nt = shapes[s][1];
        size_t n = (size_t)nb * nt;
        unsigned char *seen = calloc(n, 1);
        int bad = 0, split = 0;
        for (uint32_t b = 0; b < nb; b++)
            for (uint32_t t = 0; t < nt; t++) {
                uint64_t i = coll_ll_index(b, nb, t, nt);
                if (i >= n || seen[i]++) bad++;
                if (nt % CCHAN_WARP_SIZE) continue;
                if (cchan_lane_id(t) == 0 ? i % CCHAN_WARP_SIZE != 0
                                          : i != coll_ll_index(b, nb, t - 1, nt) + 1)
                    split++;
            }
        CT_EXPECT(bad == 0, "coll_ll_index %ux%u: %d collisions or out of range", nb, nt, bad);
        CT_EXPECT(split == 0, "coll_ll_index %ux%u: %d threads off their warp's run of %d packets",
                  nb, nt, split, CCHAN_WARP_SIZE);
        free(seen);
    }
    unsigned used = 0; /* blocks holding one of packets 0..1023 */
    for (uint32_t b = 0; b < 16; b++)
        for (uint32_t t = 0; t < 512; t++)
            if (coll_ll_index(b, 16, t, 512) < 1024) {
                used++;
                break;
            }
    CT_EXPECT(used == 16u, "1024 packets on %u of 16 blocks", used);
}

int main(int argc, char **argv) {
    size_t scratch = argc > 1 ? strtoull(argv[1], NULL, 0) : 0;
    size_t max_count = argc > 2 ? strtoull(argv[2], NULL, 0) : 200003;
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    cchan_comm_config_t ccfg = CCHAN_COMM_CONFIG_INIT;
    ccfg.platform = CCHAN_PLATFORM_HOST;
    ccfg.timeout_ms = 60000; /* a lost packet or signal fails the call instead of hanging */
    CT_OK(cchan_bootstrap_create_from_env(&bs));
    CT_OK(cchan_comm_create(bs, &ccfg, &comm));
    g_rank = ct_rank = cchan_comm_rank(comm);
    g_nranks = cchan_comm_size(comm);

    cchan_coll_config_t cfg = CCHAN_COLL_CONFIG_INIT;
    cfg.scratch_bytes = scratch;
    cchan_coll_t *coll;
    {
        cchan_coll_config_t bad = CCHAN_COLL_CONFIG_INIT;
        bad.magic = 1;
        cchan_coll_t *c2 = NULL;
        CT_EXPECT(cchan_coll_create(comm, &bad, &c2) == -EINVAL && c2 == NULL, "bad config magic");
    }
    CT_OK(cchan_coll_create(comm, &cfg, &coll));
    test_errors(coll);
    test_ll_index();

    static const size_t counts[] = {1, 2, 3, 5, 8, 17, 100, 255, 1000, 4097, 12345, 65537, 200003};
    static const cchan_coll_algo_t algos[] = {CCHAN_COLL_LL_ALLPAIRS, CCHAN_COLL_HB_ALLPAIRS,
                                              CCHAN_COLL_SWITCH, CCHAN_COLL_AUTO};
    uint64_t seed = 1;
    int ran = 0, unsupported = 0;
    for (size_t ai = 0; ai < sizeof algos / sizeof algos[0]; ai++)
        for (int op = 0; op < 3; op++)
            for (int dt = 0; dt < 3; dt++)
                for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                    if (counts[ci] > max_count) continue;
                    for (int ip = 0; ip < 2; ip++) {
                        if (run_case(coll, (cchan_coll_op_t)op, algos[ai], (cchan_coll_dtype_t)dt,
                                     counts[ci], ip, seed++))
                            ran++;
                        else
                            unsupported++;
                    }
                }
    /* LL epochs and HB rounds back to back, alternating sizes and ops: stale flags or slots
     * reused too early would show as wrong sums. */
    for (int it = 0; it < 60; it++) {
        size_t c = (size_t)(it % 3 == 0 ? 3 : it % 3 == 1 ? 257 : 1031);
        cchan_coll_op_t op = (cchan_coll_op_t)(it % 3);
        run_case(coll, op, it & 1 ? CCHAN_COLL_LL_ALLPAIRS : CCHAN_COLL_AUTO,
                 (cchan_coll_dtype_t)(it % 3), c, it % 4 == 1, seed++);
        ran++;
    }
    /* Registered buffers: HB all-pairs runs zero-copy, CE all-pairs runs at all. */
    {
        size_t n = (size_t)g_nranks, big = max_count < 65537 ? max_count : 65537;
        size_t bytes = (big * n + GUARD) * 4;
        cchan_mem_t *ma, *mb;
        CT_OK(cchan_mem_alloc(comm, bytes, 0, &ma));
        CT_OK(cchan_mem_alloc(comm, bytes, 0, &mb));
        g_reg_a = (uint8_t *)cchan_mem_ptr(ma);
        g_reg_b = (uint8_t *)cchan_mem_ptr(mb);
        CT_OK(cchan_coll_register(coll, g_reg_a, bytes));
        CT_OK(cchan_coll_register(coll, g_reg_b, bytes));
        /* (a call on buffers without 2 MiB pages, as here on the host platform, then runs HB) */
        CT_EXPECT(cchan_coll_select(coll, CCHAN_COLL_ALLREDUCE, (size_t)1 << 30) ==
                      (g_nranks <= 2 ? CCHAN_COLL_CE_ALLPAIRS : CCHAN_COLL_HB_ALLPAIRS),
                  "1 GiB allreduce with registered buffers selects CE all-pairs up to 2 ranks");
        CT_EXPECT(cchan_coll_select(coll, CCHAN_COLL_ALLREDUCE, (size_t)256 << 20) ==
                      (g_nranks <= 2 ? CCHAN_COLL_CE_ALLPAIRS : CCHAN_COLL_HB_ALLPAIRS),
                  "256 MiB allreduce selects CE all-pairs up to 2 ranks");
        CT_EXPECT(cchan_coll_select(coll, CCHAN_COLL_ALLREDUCE, (size_t)128 << 20) ==
                      CCHAN_COLL_HB_ALLPAIRS,
                  "128 MiB allreduce selects HB all-pairs");
        CT_EXPECT(cchan_coll_select(coll, CCHAN_COLL_ALLGATHER, (size_t)1 << 30) ==
                      (g_nranks <= 2 ? CCHAN_COLL_CE_ALLPAIRS : CCHAN_COLL_HB_ALLPAIRS),
                  "1 GiB allgather with registered buffers selects CE all-pairs up to 2 ranks");
        static const cchan_coll_algo_t reg_algos[] = {CCHAN_COLL_HB_ALLPAIRS,
                                                      CCHAN_COLL_CE_ALLPAIRS, CCHAN_COLL_AUTO};
        for (size_t ai = 0; ai < sizeof reg_algos / sizeof reg_algos[0]; ai++)
            for (int op = 0; op < 3; op++)
                for (int dt = 0; dt < 3; dt++)
                    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                        if (counts[ci] > big) continue;
                        for (int ip = 0; ip < 2; ip++) {
                            if (run_case(coll, (cchan_coll_op_t)op, reg_algos[ai],
                                         (cchan_coll_dtype_t)dt, counts[ci], ip, seed++))
                                ran++;
                            else
                                unsupported++;
                        }
                    }
        /* The tuned variants (each row's values stay for the next rows): CE pipeline chunks of
         * 64 KiB (many chunks, both staging regions) with a share of the SMs, several lanes, the
         * SMs alone, every lane; the copy-engine reduce-scatter (ce_rs); small zero-copy blocks
         * with HB AllGather staged (zc_ag_max 0; the registered calls above ran it zero-copy). */
        static const struct {
            const char *name;
            int64_t value;
        } tunes[][3] = {
            {{"ce_chunk", 65536}, {"ce_lanes", 1}, {"ce_sm_permille", 300}},
            {{"ce_chunk", 65536}, {"ce_lanes", 3}, {"ce_sm_permille", 1000}},
            {{"ce_lanes", 8}, {"ce_sm_permille", 500}, {"ce_chunk", 65536}},
            /* AllReduce with the shards pushed by the copy engines: 16 KiB chunks through the
             * three staging regions; then no SM share and two output lanes; then five regions
             * (four chunks ahead), and two regions (one ahead) */
            {{"ce_rs", 1}, {"ce_chunk", 16384}, {"ce_regions", 3}},
            {{"ce_sm_permille", 0}, {"ce_lanes", 2}, {"ce_regions", 3}},
            {{"ce_regions", 5}, {"ce_sm_permille", 200}, {"ce_lanes", 2}},
            {{"ce_regions", 2}, {"ce_sm_permille", 0}, {"ce_lanes", 2}},
            {{"zc_block_bytes", 1024}, {"zc_ag_max", 0}, {"ce_lanes", 2}},
        };
        const size_t ntunes = sizeof tunes / sizeof tunes[0];
        for (size_t ti = 0; ti < ntunes; ti++) {
            for (int k = 0; k < 3; k++)
                CT_OK(cchan_coll_set_param(coll, tunes[ti][k].name, tunes[ti][k].value));
            for (int op = 0; op < 2; op++)
                for (int dt = 0; dt < 3; dt++)
                    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                        if (counts[ci] > big) continue;
                        for (int ip = 0; ip < 2; ip++) {
                            cchan_coll_algo_t a =
                                ti + 1 == ntunes ? CCHAN_COLL_HB_ALLPAIRS : CCHAN_COLL_CE_ALLPAIRS;
                            if (run_case(coll, (cchan_coll_op_t)op, a, (cchan_coll_dtype_t)dt,
                                         counts[ci], ip, seed++))
                                ran++;
                            else
                                unsupported++;
                        }
                    }
        }
        {
            int64_t v = 0;
            CT_EXPECT(cchan_coll_get_param(coll, "ce_lanes", &v) == 0 && v == 2, "ce_lanes = %lld",
                      (long long)v);
            CT_EXPECT(cchan_coll_set_param(coll, "ce_lanes", 9) == -EINVAL &&
                          cchan_coll_set_param(coll, "no_such", 1) == -EINVAL &&
                          cchan_coll_get_param(coll, "no_such", &v) == -ENOENT,
                      "parameter limits and names");
        }
        /* What AUTO runs for given buffers: a ReduceScatter above 512 KiB on a registered send
         * runs HB (zero-copy) rather than the LL row; the CE rows fall back to HB on a region
         * that no registration holds; unregistered buffers keep the table's row. */
        {
            const size_t rb = (size_t)1 << 20;
            cchan_mem_t *mr;
            CT_OK(cchan_mem_alloc(comm, rb, 0, &mr));
            uint8_t *p = (uint8_t *)cchan_mem_ptr(mr);
            CT_OK(cchan_coll_register(coll, p, rb));
            static const uint8_t unreg[16];
            const cchan_coll_op_t rs = CCHAN_COLL_REDUCESCATTER;
            CT_EXPECT(cchan_coll_select_buffers(coll, rs, rb, p, p) == CCHAN_COLL_HB_ALLPAIRS,
                      "1 MiB reducescatter on a registered send runs HB (zero-copy; the row: %s)",
                      cchan_coll_algo_name(cchan_coll_select(coll, rs, rb)));
            CT_EXPECT(cchan_coll_select_buffers(coll, rs, rb, unreg, unreg) ==
                          cchan_coll_select(coll, rs, rb),
                      "1 MiB reducescatter on an unregistered send keeps the table's row");
            CT_EXPECT(cchan_coll_select_buffers(coll, rs, rb / 4, p, p) ==
                              cchan_coll_select(coll, rs, rb / 4) &&
                          cchan_coll_select_buffers(coll, rs, rb / 4, unreg, unreg) ==
                              cchan_coll_select(coll, rs, rb / 4),
                      "256 KiB reducescatter keeps the table's row, registered or not");
            CT_EXPECT(cchan_coll_select_buffers(coll, CCHAN_COLL_ALLGATHER, (size_t)1 << 30, p,
                                                p) == CCHAN_COLL_HB_ALLPAIRS,
                      "1 GiB allgather past the registration runs HB");
            CT_EXPECT(cchan_coll_select_buffers(coll, CCHAN_COLL_ALLREDUCE, (size_t)1 << 30, p,
                                                p) == CCHAN_COLL_HB_ALLPAIRS,
                      "1 GiB allreduce past the registration runs HB");
            CT_OK(cchan_coll_deregister(coll, p));
            /* With LL slots that hold 1 MiB (as on a GPU's default scratch) the row says LL, and
             * the registered send still runs HB. */
            if (g_nranks == 2) {
                cchan_coll_config_t big = CCHAN_COLL_CONFIG_INIT;
                big.scratch_bytes = (size_t)32 << 20;
                cchan_coll_t *c2 = NULL;
                CT_OK(cchan_coll_create(comm, &big, &c2));
                CT_OK(cchan_coll_register(c2, p, rb));
                CT_EXPECT(cchan_coll_select(c2, rs, rb) == CCHAN_COLL_LL_ALLPAIRS &&
                              cchan_coll_select_buffers(c2, rs, rb, p, p) ==
                                  CCHAN_COLL_HB_ALLPAIRS &&
                              cchan_coll_select_buffers(c2, rs, rb, unreg, unreg) ==
                                  CCHAN_COLL_LL_ALLPAIRS,
                          "1 MiB reducescatter: row LL, registered send HB, unregistered LL");
                CT_OK(cchan_coll_deregister(c2, p));
                CT_OK(cchan_coll_destroy(c2));
            }
            CT_OK(cchan_mem_destroy(mr));
        }
        CT_EXPECT(cchan_coll_allgather(coll, g_reg_a, g_reg_b, 3, CCHAN_COLL_F16,
                                       CCHAN_COLL_CE_ALLPAIRS, NULL) == CCHAN_ERR_UNSUPPORTED,
                  "CE AllGather of 6-byte blocks: '%s'", cchan_coll_last_error());
        CT_OK(cchan_coll_deregister(coll, g_reg_a));
        CT_OK(cchan_coll_deregister(coll, g_reg_b));
        CT_EXPECT(cchan_coll_deregister(coll, g_reg_a) == -ENOENT, "deregister twice");
        g_reg_a = g_reg_b = NULL;
        CT_OK(cchan_mem_destroy(ma));
        CT_OK(cchan_mem_destroy(mb));
    }
    /* Register and deregister many times over: deregistration releases everything, so any
     * number of cycles fit, and the zero-copy paths take every new registration. */
    if (g_nranks > 1) {
        size_t count = 257, bytes = (count * (size_t)g_nranks + GUARD) * 4;
        cchan_mem_t *ma, *mb;
        CT_OK(cchan_mem_alloc(comm, bytes, 0, &ma));
        CT_OK(cchan_mem_alloc(comm, bytes, 0, &mb));
        for (int k = 0; k < 40; k++) {
            g_reg_a = (uint8_t *)cchan_mem_ptr(ma);
            g_reg_b = (uint8_t *)cchan_mem_ptr(mb);
            CT_OK(cchan_coll_register(coll, g_reg_a, bytes));
            CT_OK(cchan_coll_register(coll, g_reg_b, bytes));
            if (k == 0 || k == 39) {
                CT_EXPECT(run_case(coll, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_HB_ALLPAIRS,
                                   CCHAN_COLL_F32, count, k & 1, seed++),
                          "HB all-pairs on re-registered buffers (cycle %d)", k);
                ran++;
            }
            CT_OK(cchan_coll_deregister(coll, g_reg_a));
            CT_OK(cchan_coll_deregister(coll, g_reg_b));
        }
        g_reg_a = g_reg_b = NULL;
        CT_OK(cchan_mem_destroy(ma));
        CT_OK(cchan_mem_destroy(mb));
    }
    CT_OK(cchan_coll_destroy(coll));

    int verdicts[64] = {0}, mine = ct_failures;
    CT_OK(cchan_bootstrap_allgather(cchan_comm_bootstrap(comm), &mine, verdicts, sizeof(int)));
    int total = 0;
    for (int r = 0; r < g_nranks; r++) total += verdicts[r];
    if (g_rank == 0)
        printf("coll_host: %d ranks, scratch %zu: %d calls checked (%d reported unsupported), %d "
               "checks, %d failures on all ranks\n",
               g_nranks, scratch, ran, unsupported, ct_checks, total);
    CT_OK(cchan_comm_destroy(comm));
    return total ? 1 : 0;
}
