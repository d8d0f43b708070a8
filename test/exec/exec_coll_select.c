/* cchan_coll's selector on the host platform, 2 ranks, with the shipped plans loaded:
 *   table     a tuning table overrules the default rule (HB where the sm_90 rule says LL), and
 *             the call runs what cchan_coll_choose said, from the table;
 *   shadow    a plan with a wide range listed first does not shadow one whose range is narrower
 *             but faster per the table (allreduce_2pa_scratch vs allreduce_ring_mem at 1 MiB);
 *   lazy      loading plans builds no executor for a plan the selector cannot pick (the registry
 *             says not ready; no proxy thread starts for the port plans), then a table naming
 *             one sets it up;
 *   dtype     the call's dtype reaches the selector: a bf16-only row runs the plan for bf16 and
 *             not for f32 of the same bytes, and the bf16 result is exact;
 *   info      CCHAN_DEBUG=INFO: one line per (collective, size, dtype, in place) the first time,
 *             saying what ran and why.
 *   cchan-run -n 2 exec_coll_select PLAN_DIR
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cchan/numeric.h"
#include "cchan_coll.h"

/* Failures go to stdout: stderr is a log file while the INFO lines are collected. */
static int g_rank, g_n, g_fail, g_checks;

#define CHECK(call)                                                                                \
    do {                                                                                           \
        int s_ = (call);                                                                           \
        if (s_ < 0) {                                                                              \
            fprintf(stdout, "[r%d] %s:%d: %s = %d (%s): %s\n", g_rank, __FILE__, __LINE__, #call,  \
                    s_, cchan_strerror(s_), cchan_coll_last_error());                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            g_fail++;                                                                              \
            fprintf(stdout, "[r%d] FAIL %s:%d: ", g_rank, __FILE__, __LINE__);                     \
            fprintf(stdout, __VA_ARGS__);                                                          \
            fprintf(stdout, "\n");                                                                 \
        }                                                                                          \
    } while (0)

static float val(int r, size_t i, int seed) {
    return (float)((int)((i * 7 + r * 13 + seed) % 17) - 8);
}
static const char *nz(const char *s) { return s ? s : "(native)"; }

/* Writes a table (this rank's own file) and loads it on every rank. */
static void load_table(cchan_coll_t *c, const char *rows) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/exec_coll_select.%d.tune", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) exit(1);
    fprintf(f, "cchan-coll-tuning 1\n# collective ranks dtype inplace min max algorithm us\n%s",
            rows);
    fclose(f);
    int st = cchan_coll_load_tuning(c, path);
    unlink(path);
    CHECK(st);
}

static int threads(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static int ready(cchan_coll_t *c, const char *name) {
    cchan_coll_algo_info_t ai[64];
    int n = cchan_coll_algos(c, ai, 64);
    for (int i = 0; i < n && i < 64; i++)
        if (ai[i].algo == CCHAN_COLL_PLAN && !strcmp(ai[i].name, name)) return ai[i].ready;
    return -1;
}

static void allreduce_f32(cchan_coll_t *c, float *send, float *recv, size_t n, int seed,
                          const char *what) {
    for (size_t i = 0; i < n; i++) send[i] = val(g_rank, i, seed);
    CHECK(cchan_coll_allreduce(c, send, recv, n, CCHAN_COLL_F32, CCHAN_COLL_AUTO, NULL));
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float s = 0;
        for (int r = 0; r < g_n; r++) s += val(r, i, seed);
        bad += recv[i] != s;
    }
    EXPECT(bad == 0, "%s: allreduce of %zu floats on %s: %d wrong", what, n,
           nz(cchan_coll_last_plan(c)), bad);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    cchan_comm_config_t ccfg = CCHAN_COMM_CONFIG_INIT;
    ccfg.platform = CCHAN_PLATFORM_HOST;
    ccfg.timeout_ms = 60000;
    CHECK(cchan_bootstrap_create_from_env(&bs));
    CHECK(cchan_comm_create(bs, &ccfg, &comm));
    g_rank = cchan_comm_rank(comm);
    g_n = cchan_comm_size(comm);
    if (g_n != 2) {
        if (g_rank == 0) printf("SKIP: written for 2 ranks (the shipped .n2 plans)\n");
        return 77;
    }
    cchan_coll_t *c;
    CHECK(cchan_coll_create(comm, NULL, &c));
    cchan_coll_choice_t ch;

    /* lazy: no table yet, so only AllToAll and Broadcast plans (no native kernel) are set up */
    int t0 = threads();
    int nplans = cchan_coll_load_plans(c, argv[1]);
    CHECK(nplans);
    EXPECT(nplans >= 12, "%d plans loaded from %s (want the 12 shipped .n2 plans)", nplans,
           argv[1]);
    EXPECT(threads() == t0, "loading plans started %d threads (port plans set up unselected)",
           threads() - t0);
    static const char *idle[] = {"allreduce_ring_port",     "allreduce_ring_mem",
                                 "allreduce_1pa_ll",        "allreduce_2pa_zc",
                                 "allgather_allpairs_port", "reducescatter_ring_port"};
    for (size_t i = 0; i < sizeof idle / sizeof idle[0]; i++)
        EXPECT(ready(c, idle[i]) == 0, "%s: ready %d without a table row (want 0: no executor)",
               idle[i], ready(c, idle[i]));
    EXPECT(ready(c, "alltoall_allpairs_mem") == 1 && ready(c, "broadcast_allpairs_mem") == 1,
           "alltoall/broadcast plans not set up (ready %d, %d)", ready(c, "alltoall_allpairs_mem"),
           ready(c, "broadcast_allpairs_mem"));
    /* the default rule: plans below native for AllReduce */
    CHECK(cchan_coll_choose(c, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_F32, 4096, 0, 0, NULL, NULL, &ch));
    EXPECT(ch.algo == CCHAN_COLL_LL_ALLPAIRS && !ch.plan && !ch.from_table &&
               strstr(ch.why, "default rule sm_90"),
           "default 4 KiB: %s %s (%s)", cchan_coll_algo_name(ch.algo), nz(ch.plan), ch.why);

    const size_t max = 1 << 20;
    cchan_mem_t *sm, *rm;
    CHECK(cchan_mem_alloc(comm, max * 4, 0, &sm));
    CHECK(cchan_mem_alloc(comm, max * 4, 0, &rm));
    float *send = (float *)cchan_mem_ptr(sm), *recv = (float *)cchan_mem_ptr(rm);
    CHECK(cchan_coll_register(c, send, max * 4));
    CHECK(cchan_coll_register(c, recv, max * 4));

    /* info: the log is read at the first logged call */
    setenv("CCHAN_DEBUG", "INFO", 1);
    char logpath[64];
    snprintf(logpath, sizeof logpath, "/tmp/exec_coll_select.%d.log", (int)getpid());
    fflush(stderr);
    int saved = dup(2);
    if (!freopen(logpath, "w", stderr)) return 1;

    /* table: HB at 4 KiB, where the default rule runs LL; the slower LL row loses */
    load_table(c, "allreduce 2 * 0 0 65536 ll_allpairs 9.5\n"
                  "allreduce 2 * 0 0 65536 hb_allpairs 7.25\n"
                  /* shadow: the wide plan first, the narrow one faster at 1 MiB */
                  "allreduce 2 * 0 16384 inf plan:allreduce_2pa_scratch 80\n"
                  "allreduce 2 * 0 1048576 inf plan:allreduce_ring_mem 40\n");
    CHECK(cchan_coll_choose(c, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_F32, 4096, 0, 0, send, recv, &ch));
    EXPECT(ch.algo == CCHAN_COLL_HB_ALLPAIRS && ch.from_table && strstr(ch.why, "7.25 us"),
           "table 4 KiB: %s (%s)", cchan_coll_algo_name(ch.algo), ch.why);
    allreduce_f32(c, send, recv, 1024, 1, "table");
    cchan_coll_choice_t last;
    CHECK(cchan_coll_last_choice(c, &last));
    EXPECT(last.algo == CCHAN_COLL_HB_ALLPAIRS && last.from_table && !cchan_coll_last_plan(c),
           "table 4 KiB ran %s (%s)", cchan_coll_algo_name(last.algo), last.why);
    allreduce_f32(c, send, recv, 1024, 2, "table, again"); /* no second INFO line */

    /* shadow */
    EXPECT(ready(c, "allreduce_ring_mem") == 1 && ready(c, "allreduce_2pa_scratch") == 1,
           "the table's plans not set up at load_tuning (ready %d, %d)",
           ready(c, "allreduce_ring_mem"), ready(c, "allreduce_2pa_scratch"));
    EXPECT(ready(c, "allreduce_ring_port") == 0, "allreduce_ring_port set up, no row names it");
    allreduce_f32(c, send, recv, 262144, 3, "shadow 1 MiB");
    EXPECT(cchan_coll_last_plan(c) && !strcmp(cchan_coll_last_plan(c), "allreduce_ring_mem"),
           "1 MiB ran %s, want allreduce_ring_mem (40 us) over allreduce_2pa_scratch (80 us)",
           nz(cchan_coll_last_plan(c)));
    allreduce_f32(c, send, recv, 32768, 4, "shadow 128 KiB");
    EXPECT(cchan_coll_last_plan(c) && !strcmp(cchan_coll_last_plan(c), "allreduce_2pa_scratch"),
           "128 KiB ran %s, want allreduce_2pa_scratch (the only row there)",
           nz(cchan_coll_last_plan(c)));

    /* dtype: rows for bf16 only; an f32 call of the same bytes must not take them */
    load_table(c, "allreduce 2 bf16 0 131072 131072 plan:allreduce_1pa_ll 1\n"
                  "allreduce 2 bf16 0 0 inf hb_allpairs 2\n");
    EXPECT(cchan_coll_plan_name(c, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_F32, 131072, send, recv) ==
               NULL,
           "f32 of 128 KiB picks plan %s (a bf16 row)",
           nz(cchan_coll_plan_name(c, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_F32, 131072, send, recv)));
    /* allreduce_1pa_ll's range ends at 64 KiB: the bf16 row cannot run it, HB's row can */
    CHECK(
        cchan_coll_choose(c, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_BF16, 131072, 0, 0, send, recv, &ch));
    EXPECT(ch.algo == CCHAN_COLL_HB_ALLPAIRS && ch.from_table, "bf16 128 KiB: %s (%s)",
           cchan_coll_algo_name(ch.algo), ch.why);
    load_table(c, "allreduce 2 bf16 0 65536 65536 plan:allreduce_1pa_ll 1\n");
    const char *pb =
        cchan_coll_plan_name(c, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_BF16, 65536, send, recv);
    const char *pf =
        cchan_coll_plan_name(c, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_F32, 65536, send, recv);
    EXPECT(pb && !strcmp(pb, "allreduce_1pa_ll") && !pf, "64 KiB: bf16 picks %s, f32 picks %s",
           nz(pb), nz(pf));
    {
        size_t n = 32768; /* bf16 elements: 64 KiB */
        cchan_bf16_t *s16 = (cchan_bf16_t *)send, *r16 = (cchan_bf16_t *)recv;
        for (size_t i = 0; i < n; i++) s16[i] = cchan_f32_to_bf16(val(g_rank, i, 6));
        CHECK(cchan_coll_allreduce(c, send, recv, n, CCHAN_COLL_BF16, CCHAN_COLL_AUTO, NULL));
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            float s = 0;
            for (int r = 0; r < g_n; r++) s += val(r, i, 6);
            bad += cchan_bf16_to_f32(r16[i]) != s;
        }
        EXPECT(bad == 0 && cchan_coll_last_plan(c) &&
                   !strcmp(cchan_coll_last_plan(c), "allreduce_1pa_ll"),
               "bf16 64 KiB on %s: %d wrong", nz(cchan_coll_last_plan(c)), bad);
        allreduce_f32(c, send, recv, 16384, 7, "f32 64 KiB");
        EXPECT(cchan_coll_last_plan(c) == NULL, "f32 64 KiB ran plan %s (the row is bf16)",
               nz(cchan_coll_last_plan(c)));
    }
    /* AllToAll on its plan, by the default rule */
    {
        size_t n = 1024;
        for (size_t i = 0; i < n * 2; i++) send[i] = val(g_rank, i, 9);
        CHECK(cchan_coll_alltoall(c, send, recv, n, CCHAN_COLL_F32, NULL));
        CHECK(cchan_coll_last_choice(c, &last));
        EXPECT(last.plan && !strcmp(last.plan, "alltoall_allpairs_mem") && !last.from_table,
               "alltoall ran %s (%s)", nz(last.plan), last.why);
    }

    /* info: back to the real stderr, then read what was logged */
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    unsetenv("CCHAN_DEBUG");
    FILE *lf = fopen(logpath, "r");
    char line[2048];
    int f32_4k = 0, f32_4k_right = 0, bf16_64k = 0, f32_64k = 0, total = 0;
    while (lf && fgets(line, sizeof line, lf)) {
        if (!strstr(line, "cchan INFO coll: ")) continue;
        total++;
        if (strstr(line, "allreduce 4096 B f32 out of place")) {
            f32_4k++;
            f32_4k_right += strstr(line, "-> native hb_allpairs (table ") != NULL;
        }
        if (strstr(line, "allreduce 65536 B bf16 out of place -> plan allreduce_1pa_ll (table "))
            bf16_64k++;
        if (strstr(line, "allreduce 65536 B f32 out of place -> native ") &&
            strstr(line, "default rule sm_90"))
            f32_64k++;
    }
    if (lf) fclose(lf);
    unlink(logpath);
    EXPECT(f32_4k == 1 && f32_4k_right == 1,
           "INFO: %d lines for allreduce 4096 B f32 (want 1, saying native hb_allpairs from the "
           "table; %d do)",
           f32_4k, f32_4k_right);
    EXPECT(bf16_64k == 1 && f32_64k == 1,
           "INFO: bf16 64 KiB on the plan %d, f32 64 KiB by the default rule %d (want 1 each)",
           bf16_64k, f32_64k);
    EXPECT(total == 6, "INFO: %d lines, want 6 (one per collective, size, dtype, in place seen)",
           total);

    CHECK(cchan_coll_deregister(c, send));
    CHECK(cchan_coll_deregister(c, recv));
    CHECK(cchan_coll_destroy(c));
    cchan_mem_destroy(sm);
    cchan_mem_destroy(rm);
    cchan_comm_destroy(comm);
    if (g_rank == 0 || g_fail) printf("[r%d] %d checks, %d failures\n", g_rank, g_checks, g_fail);
    return g_fail ? 1 : 0;
}
