/* cchan_coll with execution plans on the host platform: plans loaded from a directory (argument,
 * or CCHAN_COLL_PLANS at cchan_coll_create), ranked above the native kernels by a tuning table
 * (every loaded plan a row, in load order), run AUTO calls they fit; cchan_coll_choose,
 * cchan_coll_plan_name and cchan_coll_last_plan say so, AllToAll and Broadcast run on plans, and
 * sizes no plan fits run natively. Results checked exactly.
 *
 *   cchan-run -n N exec_coll_host PLAN_DIR [env]     env: load through CCHAN_COLL_PLANS
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cchan_coll.h"

static int g_rank, g_n, g_fail, g_checks;

#define CHECK(call)                                                                                \
    do {                                                                                           \
        int s_ = (call);                                                                           \
        if (s_ < 0) {                                                                              \
            fprintf(stderr, "[r%d] %s:%d: %s = %d (%s): %s\n", g_rank, __FILE__, __LINE__, #call,  \
                    s_, cchan_strerror(s_), cchan_coll_last_error());                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            g_fail++;                                                                              \
            fprintf(stderr, "[r%d] FAIL %s:%d: ", g_rank, __FILE__, __LINE__);                     \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

static float val(int r, size_t i, int seed) {
    return (float)((int)((i * 7 + r * 13 + seed) % 17) - 8);
}

static const char *nz(const char *s) { return s ? s : "(native)"; }

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int via_env = argc > 2 && !strcmp(argv[2], "env");
    if (via_env) setenv("CCHAN_COLL_PLANS", argv[1], 1);
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    cchan_comm_config_t ccfg = CCHAN_COMM_CONFIG_INIT;
    ccfg.platform = CCHAN_PLATFORM_HOST;
    ccfg.timeout_ms = 60000;
    CHECK(cchan_bootstrap_create_from_env(&bs));
    CHECK(cchan_comm_create(bs, &ccfg, &comm));
    g_rank = cchan_comm_rank(comm);
    g_n = cchan_comm_size(comm);
    cchan_coll_t *c;
    CHECK(cchan_coll_create(comm, NULL, &c));
    if (!via_env) {
        int n = cchan_coll_load_plans(c, argv[1]);
        CHECK(n);
        if (n == 0) {
            if (g_rank == 0) printf("SKIP: no plan for %d ranks in %s\n", g_n, argv[1]);
            return 77;
        }
    }
    /* A table ranking every loaded plan first (time 0; ties: the earlier row), so that AUTO calls
     * run plans where one fits, as the default rule (plans below native) would not. */
    {
        int na = cchan_coll_algos(c, NULL, 0);
        CHECK(na);
        cchan_coll_algo_info_t *ai = calloc((size_t)na, sizeof *ai);
        CHECK(cchan_coll_algos(c, ai, na));
        char path[64];
        snprintf(path, sizeof path, "/tmp/exec_coll_host.%d.tune", (int)getpid());
        FILE *f = fopen(path, "w");
        if (!f) return 1;
        static const char *ops[] = {"allreduce", "allgather", "reducescatter", "alltoall",
                                    "broadcast"};
        fprintf(f, "cchan-coll-tuning 1\n");
        for (int i = 0; i < na; i++)
            if (ai[i].algo == CCHAN_COLL_PLAN) {
                char hi[32] = "inf";
                if (ai[i].max_bytes)
                    snprintf(hi, sizeof hi, "%llu", (unsigned long long)ai[i].max_bytes);
                fprintf(f, "%s %d * %d %llu %s plan:%s 0\n", ops[ai[i].op], g_n, ai[i].inplace,
                        (unsigned long long)ai[i].min_bytes, hi, ai[i].name);
            }
        fclose(f);
        free(ai);
        int rows = cchan_coll_load_tuning(c, path);
        unlink(path);
        CHECK(rows);
    }
    const size_t max = 1 << 20;
    cchan_mem_t *sm, *rm;
    CHECK(cchan_mem_alloc(comm, max * 4 * (size_t)g_n, 0, &sm));
    CHECK(cchan_mem_alloc(comm, max * 4 * (size_t)g_n, 0, &rm));
    float *send = (float *)cchan_mem_ptr(sm), *recv = (float *)cchan_mem_ptr(rm);
    CHECK(cchan_coll_register(c, send, max * 4 * (size_t)g_n));
    CHECK(cchan_coll_register(c, recv, max * 4 * (size_t)g_n));

    /* AllReduce: a small size (an LL plan's range) and a large one */
    static const size_t counts[] = {1024, 262144};
    for (int k = 0; k < 2; k++) {
        size_t n = counts[k];
        for (size_t i = 0; i < n; i++) send[i] = val(g_rank, i, k);
        const char *want =
            cchan_coll_plan_name(c, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_F32, n * 4, send, recv);
        cchan_coll_choice_t ch;
        CHECK(cchan_coll_choose(c, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_F32, n * 4, 0, 0, send, recv,
                                &ch));
        cchan_coll_algo_t sel = ch.algo;
        CHECK(cchan_coll_allreduce(c, send, recv, n, CCHAN_COLL_F32, CCHAN_COLL_AUTO, NULL));
        const char *ran = cchan_coll_last_plan(c);
        EXPECT(want && ran && !strcmp(want, ran) && sel == CCHAN_COLL_PLAN,
               "allreduce %zu: plan_name %s, last_plan %s, select_buffers %s", n, nz(want), nz(ran),
               cchan_coll_algo_name(sel));
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            float s = 0;
            for (int r = 0; r < g_n; r++) s += val(r, i, k);
            bad += recv[i] != s;
        }
        EXPECT(bad == 0, "allreduce %zu on plan %s: %d wrong", n, nz(ran), bad);
        if (g_rank == 0) printf("allreduce %7zu floats: %s\n", n, nz(ran));
    }
    /* a native algorithm by name still runs natively */
    CHECK(cchan_coll_allreduce(c, send, recv, 1024, CCHAN_COLL_F32, CCHAN_COLL_HB_ALLPAIRS, NULL));
    EXPECT(cchan_coll_last_plan(c) == NULL, "hb_allpairs by name ran on plan %s",
           nz(cchan_coll_last_plan(c)));
    /* an odd size no plan's granularity fits: native */
    CHECK(cchan_coll_allreduce(c, send, recv, 1023, CCHAN_COLL_F32, CCHAN_COLL_AUTO, NULL));
    EXPECT(cchan_coll_last_plan(c) == NULL, "1023 floats ran on plan %s",
           nz(cchan_coll_last_plan(c)));

    /* AllGather */
    {
        size_t n = 4096;
        for (size_t i = 0; i < n; i++) send[i] = val(g_rank, i, 5);
        CHECK(cchan_coll_allgather(c, send, recv, n, CCHAN_COLL_F32, CCHAN_COLL_AUTO, NULL));
        const char *ran = cchan_coll_last_plan(c);
        int bad = 0;
        for (int r = 0; r < g_n; r++)
            for (size_t i = 0; i < n; i++) bad += recv[(size_t)r * n + i] != val(r, i, 5);
        EXPECT(ran && bad == 0, "allgather on %s: %d wrong", nz(ran), bad);
        if (g_rank == 0) printf("allgather %7zu floats: %s\n", n, nz(ran));
    }
    /* AllToAll and Broadcast: plans only */
    {
        size_t n = 1024; /* per peer */
        for (size_t i = 0; i < n * (size_t)g_n; i++) send[i] = val(g_rank, i, 9);
        int st = cchan_coll_alltoall(c, send, recv, n, CCHAN_COLL_F32, NULL);
        const char *ran = cchan_coll_last_plan(c);
        int bad = 0;
        for (int r = 0; st == 0 && r < g_n; r++)
            for (size_t i = 0; i < n; i++)
                bad += recv[(size_t)r * n + i] != val(r, (size_t)g_rank * n + i, 9);
        EXPECT(st == 0 && ran && bad == 0, "alltoall: %d (%s) on %s: %d wrong", st,
               cchan_coll_last_error(), nz(ran), bad);
        if (g_rank == 0) printf("alltoall  %7zu floats: %s\n", n, nz(ran));
    }
    {
        size_t n = 4096;
        for (size_t i = 0; i < n; i++) send[i] = val(g_rank, i, 11);
        int st = cchan_coll_broadcast(c, send, recv, n, CCHAN_COLL_F32, 0, NULL);
        const char *ran = cchan_coll_last_plan(c);
        int bad = 0;
        for (size_t i = 0; st == 0 && i < n; i++) bad += recv[i] != val(0, i, 11);
        EXPECT(st == 0 && ran && bad == 0, "broadcast: %d (%s) on %s: %d wrong", st,
               cchan_coll_last_error(), nz(ran), bad);
        if (g_rank == 0) printf("broadcast %7zu floats: %s\n", n, nz(ran));
        /* a root no plan has */
        if (g_n > 1) {
            st = cchan_coll_broadcast(c, send, recv, n, CCHAN_COLL_F32, 1, NULL);
            EXPECT(st == CCHAN_ERR_UNSUPPORTED, "broadcast from root 1: %d", st);
        }
    }
    CHECK(cchan_coll_deregister(c, send));
    CHECK(cchan_coll_deregister(c, recv));
    CHECK(cchan_coll_destroy(c));
    cchan_mem_destroy(sm);
    cchan_mem_destroy(rm);
    cchan_comm_destroy(comm);
    if (g_rank == 0 || g_fail) printf("[r%d] %d checks, %d failures\n", g_rank, g_checks, g_fail);
    return g_fail ? 1 : 0;
}
