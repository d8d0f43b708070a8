/* cchan_exec on the host platform: every plan of a directory made for this many ranks, every
 * dtype, several sizes (odd multiples of the plan's granularity), in place where the plan is, back
 * to back with fresh data each run, checked exactly against a float64 reference (values are small
 * multiples of a power of two, so sums are exact in every dtype: a missing, doubled or misplaced
 * contribution shows). Outputs carry guard bytes after them that must stay untouched. Sizes the
 * plan does not run (not a multiple of its granularity) must be refused with -EINVAL.
 *
 *   cchan-run -n N exec_host PLAN_DIR|PLAN.json [max_bytes [runs [loop_bytes]]]
 *
 * loop_bytes: also run plans with loops at a size (up to loop_bytes of input) that takes every
 * loop through three iterations.
 *
 * Exit 0 when every check passed, 77 when PLAN_DIR is missing or has no plan for N ranks.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan_exec.h"

#define GUARD 64
#define GUARD_BYTE 0x5A

static int g_rank, g_nranks, g_failures, g_checks;

#define CHECK(call)                                                                                \
    do {                                                                                           \
        int s_ = (call);                                                                           \
        if (s_ < 0) {                                                                              \
            fprintf(stderr, "[r%d] %s:%d: %s = %d (%s): %s\n", g_rank, __FILE__, __LINE__, #call,  \
                    s_, cchan_strerror(s_), cchan_exec_last_error());                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            g_failures++;                                                                          \
            if (g_failures < 20) {                                                                 \
                fprintf(stderr, "[r%d] FAIL %s:%d: ", g_rank, __FILE__, __LINE__);                 \
                fprintf(stderr, __VA_ARGS__);                                                      \
                fprintf(stderr, "\n");                                                             \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static double value(uint64_t seed, int r, uint64_t i, cchan_exec_dtype_t dt) {
    uint64_t h = mix64(seed ^ mix64((uint64_t)r * 0x10001ull + i * 0x9E37ull + 1));
    switch (dt) {
    case CCHAN_EXEC_F32: return (double)((int64_t)(h % 2049) - 1024) / 8.0;
    case CCHAN_EXEC_F16: return (double)((int64_t)(h % 129) - 64) / 4.0;
    default: return (double)((int64_t)(h % 33) - 16) / 2.0;
    }
}

static void store(void *buf, uint64_t i, double v, cchan_exec_dtype_t dt) {
    if (dt == CCHAN_EXEC_F32)
        ((float *)buf)[i] = (float)v;
    else if (dt == CCHAN_EXEC_F16)
        ((cchan_f16_t *)buf)[i] = cchan_f32_to_f16((float)v);
    else
        ((cchan_bf16_t *)buf)[i] = cchan_f32_to_bf16((float)v);
}

static double load(const void *buf, uint64_t i, cchan_exec_dtype_t dt) {
    if (dt == CCHAN_EXEC_F32) return ((const float *)buf)[i];
    if (dt == CCHAN_EXEC_F16) return cchan_f16_to_f32(((const cchan_f16_t *)buf)[i]);
    return cchan_bf16_to_f32(((const cchan_bf16_t *)buf)[i]);
}

/* The expected output element o of this rank (count = elements of one rank's input). */
static double expect(const cchan_exec_plan_info_t *in, uint64_t seed, uint64_t count, uint64_t o,
                     cchan_exec_dtype_t dt) {
    int n = g_nranks;
    double s = 0;
    switch (in->collective) {
    case CCHAN_EXEC_ALLREDUCE:
        for (int r = 0; r < n; r++) s += value(seed, r, o, dt);
        return s;
    case CCHAN_EXEC_ALLGATHER: return value(seed, (int)(o / count), o % count, dt);
    case CCHAN_EXEC_REDUCESCATTER: {
        uint64_t m = count / (uint64_t)n;
        for (int r = 0; r < n; r++) s += value(seed, r, (uint64_t)g_rank * m + o, dt);
        return s;
    }
    case CCHAN_EXEC_ALLTOALL: {
        uint64_t m = count / (uint64_t)n;
        return value(seed, (int)(o / m), (uint64_t)g_rank * m + o % m, dt);
    }
    case CCHAN_EXEC_BROADCAST: return value(seed, in->root, o, dt);
    default: return 0;
    }
}

typedef struct bufs {
    cchan_mem_t *send_mem, *recv_mem;
    uint8_t *send, *recv;
    size_t send_bytes, recv_bytes;
} bufs_t;

static int run_case(cchan_exec_t *ex, const cchan_exec_plan_info_t *in, bufs_t *b,
                    cchan_exec_dtype_t dt, uint64_t count, uint64_t seed) {
    size_t es = cchan_exec_dtype_size(dt);
    uint64_t in_bytes = count * es;
    uint64_t out_count = count / in->in_chunks * in->out_chunks;
    uint64_t out_bytes = out_count * es;
    uint8_t *recv = b->recv;
    uint8_t *send = b->send;
    uint8_t *guard = recv + out_bytes; /* GUARD bytes after the call's last byte */
    if (in->inplace && in->collective == CCHAN_EXEC_REDUCESCATTER) {
        recv = send + (uint64_t)g_rank * out_bytes; /* the output is the rank's slice of send */
        guard = send + in_bytes;
    } else if (in->inplace) {
        send = in->collective == CCHAN_EXEC_ALLGATHER ? recv + (uint64_t)g_rank * in_bytes : recv;
    }
    memset(recv, 0xEE, out_bytes);
    memset(guard, GUARD_BYTE, GUARD);
    for (uint64_t i = 0; i < count; i++) store(send, i, value(seed, g_rank, i, dt), dt);
    int st = cchan_exec_run(ex, send, recv, count, dt, CCHAN_EXEC_SUM, NULL);
    if (st) {
        fprintf(stderr, "[r%d] %s dt %d count %llu: %s: %s\n", g_rank, in->name, (int)dt,
                (unsigned long long)count, cchan_strerror(st), cchan_exec_last_error());
        g_failures++;
        return st;
    }
    int bad = 0;
    for (uint64_t o = 0; o < out_count; o++) {
        double want = expect(in, seed, count, o, dt), got = load(recv, o, dt);
        if (got != want) {
            if (bad++ < 3)
                EXPECT(0, "%s dt %d count %llu%s: out[%llu] = %g, want %g", in->name, (int)dt,
                       (unsigned long long)count, in->inplace ? " in place" : "",
                       (unsigned long long)o, got, want);
        }
    }
    EXPECT(bad == 0, "%s dt %d count %llu: %d wrong elements of %llu", in->name, (int)dt,
           (unsigned long long)count, bad, (unsigned long long)out_count);
    int gbad = 0;
    for (int g = 0; g < GUARD; g++) gbad += guard[g] != GUARD_BYTE;
    EXPECT(gbad == 0, "%s dt %d count %llu: %d guard bytes after the output overwritten", in->name,
           (int)dt, (unsigned long long)count, gbad);
    return 0;
}

static void test_plan(cchan_comm_t *comm, const char *path, bufs_t *b, uint64_t max_bytes,
                      uint64_t loop_bytes, int runs, int *ran) {
    cchan_exec_plan_t *plan;
    CHECK(cchan_exec_plan_load_file(path, &plan));
    cchan_exec_plan_info_t in;
    CHECK(cchan_exec_plan_info(plan, &in));
    if (in.nranks != g_nranks) {
        cchan_exec_plan_free(plan);
        return;
    }
    cchan_exec_t *ex;
    CHECK(cchan_exec_create(comm, plan, &ex));
    CHECK(cchan_exec_register(ex, b->send, b->send_bytes));
    CHECK(cchan_exec_register(ex, b->recv, b->recv_bytes));
    static const cchan_exec_dtype_t dts[] = {CCHAN_EXEC_F32, CCHAN_EXEC_F16, CCHAN_EXEC_BF16};
    /* odd multiples of the granularity, from one granule up */
    static const uint64_t mult[] = {1, 3, 7, 33, 129, 1023, 4097};
    int cases = 0;
    for (size_t d = 0; d < 3; d++) {
        size_t es = cchan_exec_dtype_size(dts[d]);
        uint64_t gran_elems = in.granularity / es;
        for (size_t m = 0; m < sizeof mult / sizeof mult[0]; m++) {
            uint64_t count = gran_elems * mult[m];
            uint64_t in_bytes = count * es;
            if (in_bytes > max_bytes) continue;
            uint64_t out_bytes = in_bytes / in.in_chunks * in.out_chunks;
            if (out_bytes + GUARD > b->recv_bytes || in_bytes + GUARD > b->send_bytes) continue;
            for (int r = 0; r < runs; r++)
                run_case(ex, &in, b, dts[d], count, mix64((uint64_t)(d * 1000 + m * 10 + r) + 7));
            cases++;
        }
        /* one element past a granule: not a size this plan runs */
        uint64_t odd = gran_elems + 1;
        int st = cchan_exec_run(ex, b->send, b->recv, odd, dts[d], CCHAN_EXEC_SUM, NULL);
        EXPECT(st == -EINVAL && strstr(cchan_exec_last_error(), "granularity"),
               "%s: count %llu is not a multiple of the granularity, got %d (%s)", in.name,
               (unsigned long long)odd, st, cchan_exec_last_error());
    }
    /* sizes that take the plan's loops through several iterations (f32) */
    if (in.loop_unit && loop_bytes) {
        uint64_t chunk = 2 * in.loop_unit + in.granularity / in.in_chunks;
        uint64_t in_bytes = chunk * in.in_chunks;
        uint64_t out_bytes = chunk * in.out_chunks;
        if (in_bytes <= loop_bytes && in_bytes + GUARD <= b->send_bytes &&
            out_bytes + GUARD <= b->recv_bytes) {
            for (int r = 0; r < runs; r++)
                run_case(ex, &in, b, CCHAN_EXEC_F32, in_bytes / 4, mix64((uint64_t)r + 99));
            cases++;
        }
    }
    EXPECT(cases > 0, "%s: no size to test below %llu bytes", in.name,
           (unsigned long long)max_bytes);
    CHECK(cchan_exec_deregister(ex, b->send));
    CHECK(cchan_exec_deregister(ex, b->recv));
    CHECK(cchan_exec_destroy(ex));
    (*ran)++;
    if (g_rank == 0) printf("%-28s %d ranks: %d sizes x %d runs\n", in.name, g_nranks, cases, runs);
    cchan_exec_plan_free(plan);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: exec_host PLAN_DIR [max_bytes [runs]]\n");
        return 2;
    }
    const char *dir = argv[1];
    uint64_t max_bytes = argc > 2 ? strtoull(argv[2], NULL, 0) : (1u << 20);
    int runs = argc > 3 ? atoi(argv[3]) : 2;
    uint64_t loop_bytes = argc > 4 ? strtoull(argv[4], NULL, 0) : 0;
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    cchan_comm_config_t ccfg = CCHAN_COMM_CONFIG_INIT;
    ccfg.platform = CCHAN_PLATFORM_HOST;
    ccfg.timeout_ms = 60000; /* a lost signal fails the run with a diagnostic instead of hanging */
    CHECK(cchan_bootstrap_create_from_env(&bs));
    CHECK(cchan_comm_create(bs, &ccfg, &comm));
    g_rank = cchan_comm_rank(comm);
    g_nranks = cchan_comm_size(comm);

    char suffix[32];
    snprintf(suffix, sizeof suffix, ".n%d.json", g_nranks);
    char *names[512];
    int nn = 0;
    size_t dl = strlen(dir);
    if (dl > 5 && strcmp(dir + dl - 5, ".json") == 0) {
        /* one plan file */
        const char *slash = strrchr(dir, '/');
        static char parent[4096];
        size_t pl = slash ? (size_t)(slash - dir) : 1;
        if (pl >= sizeof parent) pl = sizeof parent - 1;
        memcpy(parent, slash ? dir : ".", pl);
        parent[pl] = 0;
        names[nn++] = strdup(slash ? slash + 1 : dir);
        dir = parent;
        goto have_names;
    }
    DIR *d = opendir(dir);
    if (!d) {
        if (g_rank == 0) printf("SKIP: plan directory %s: %s\n", dir, strerror(errno));
        cchan_comm_destroy(comm);
        return 77;
    }
    struct dirent *de;
    while ((de = readdir(d)) && nn < 512) {
        size_t l = strlen(de->d_name), sl = strlen(suffix);
        if (l > sl && strcmp(de->d_name + l - sl, suffix) == 0) names[nn++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)nn, sizeof names[0], cmp_str);
have_names:
    if (nn == 0) {
        if (g_rank == 0) printf("SKIP: no *%s plan in %s\n", suffix, dir);
        cchan_comm_destroy(comm);
        return 77;
    }

    bufs_t b;
    uint64_t big = max_bytes > loop_bytes ? max_bytes : loop_bytes;
    b.send_bytes = big + GUARD;
    b.recv_bytes = big * (size_t)g_nranks + GUARD;
    CHECK(cchan_mem_alloc(comm, b.send_bytes, 0, &b.send_mem));
    CHECK(cchan_mem_alloc(comm, b.recv_bytes, 0, &b.recv_mem));
    b.send = (uint8_t *)cchan_mem_ptr(b.send_mem);
    b.recv = (uint8_t *)cchan_mem_ptr(b.recv_mem);

    int ran = 0;
    for (int i = 0; i < nn; i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        test_plan(comm, path, &b, max_bytes, loop_bytes, runs, &ran);
        free(names[i]);
    }
    cchan_mem_destroy(b.send_mem);
    cchan_mem_destroy(b.recv_mem);
    CHECK(cchan_bootstrap_barrier(cchan_comm_bootstrap(comm)));
    cchan_comm_destroy(comm);
    if (g_rank == 0 || g_failures)
        printf("[r%d] %d plans, %d checks, %d failures\n", g_rank, ran, g_checks, g_failures);
    return g_failures ? 1 : 0;
}
