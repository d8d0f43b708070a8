/* cchan_coll_create agrees on everything that changes the algorithm a rank would choose (the
 * tuning table, the loaded plans, the CCHAN_COLL_* selection variables, the config): a difference
 * on one rank fails every rank's create at once, with a message naming the variable and the ranks,
 * instead of one rank waiting without a deadline in its first collective.
 * cchan_coll_load_tuning and cchan_coll_load_plans agree the same way. Each difference is set by
 * this program on one rank only (setenv before create, by its rank); after the failed create the
 * ranks must still be in step: a create with equal settings succeeds and an AllReduce is right.
 *
 *   cchan-run -n 2 coll_agree MODE [PLAN_DIR]
 *   MODE: tuning     CCHAN_COLL_TUNING on rank 0 only, then a table of other rows on rank 1
 *         plans      CCHAN_COLL_PLANS a folder on rank 0, one file of it on rank 1 (PLAN_DIR)
 *         param      CCHAN_COLL_ZC_AG_MAX on rank 1 only, CCHAN_COLL_PLAN_MAX_BYTES on rank 0
 *         malformed  CCHAN_COLL_CE_LANES out of range on rank 1 only
 *         config     cchan_coll_config_t.max_blocks differs
 *         same       every setting equal (tables at different paths, same rows): creates fine
 *         load       cchan_coll_load_tuning / cchan_coll_load_plans (PLAN_DIR) differing
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

/* A difference must fail within seconds (the old code waited for a 30 s bootstrap timeout, or for
 * ever); generous for a loaded 2-core CI machine and sanitizers. */
#define DEADLINE_S 20.0

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The watchdog: the old code hangs; a hung run must fail with a message, not only at ctest's
 * timeout. */
static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "FAIL: coll_agree hung (a rank waits in a collective step)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

static cchan_comm_t *g_comm;

/* A tuning table of one AllReduce row (`us` makes tables of other rows) in a file of this rank. */
static void write_table(char *path, size_t len, const char *tag, double us) {
    snprintf(path, len, "/tmp/coll_agree.%d.%s.tune", (int)getpid(), tag);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fprintf(f, "cchan-coll-tuning 1\n# %s on rank %d\nallreduce * * * 0 inf hb_allpairs %g\n", tag,
            g_rank, us);
    fclose(f);
}

/* The first `<name>.n<ranks>.json` of dir in file-name order (what a folder load starts with). */
static void first_plan(const char *dir, char *out, size_t len) {
    char suffix[32], best[256] = "";
    snprintf(suffix, sizeof suffix, ".n%d.json", g_n);
    DIR *d = opendir(dir);
    if (!d) {
        perror(dir);
        exit(1);
    }
    for (struct dirent *de; (de = readdir(d));) {
        size_t l = strlen(de->d_name), sl = strlen(suffix);
        if (l > sl && !strcmp(de->d_name + l - sl, suffix) && l < sizeof best &&
            (!best[0] || strcmp(de->d_name, best) < 0))
            snprintf(best, sizeof best, "%s", de->d_name);
    }
    closedir(d);
    if (!best[0]) {
        fprintf(stderr, "no plan for %d ranks in %s\n", g_n, dir);
        exit(1);
    }
    snprintf(out, len, "%s/%s", dir, best);
}

/* Every rank's AllReduce of a small buffer is right: the ranks are in step. */
static void check_allreduce(cchan_coll_t *c, const char *when) {
    enum { N = 1000 };
    static float buf[N];
    for (int i = 0; i < N; i++) buf[i] = (float)(g_rank + 1) * (float)(i % 7);
    CHECK(cchan_coll_allreduce(c, buf, buf, N, CCHAN_COLL_F32, CCHAN_COLL_AUTO, NULL));
    const float ranks = (float)(g_n * (g_n + 1) / 2);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += buf[i] != ranks * (float)(i % 7);
    EXPECT(!bad, "%s: AllReduce wrong in %d of %d elements", when, bad, (int)N);
}

/* A create that every rank must fail, at once, naming `name` (and, with ranks, rank 0 and 1). */
static void expect_create_fails(const cchan_coll_config_t *cfg, const char *name, int ranks,
                                const char *what) {
    cchan_coll_t *c = NULL;
    double t0 = now_s();
    int st = cchan_coll_create(g_comm, cfg, &c);
    double dt = now_s() - t0;
    if (st == 0) {
        /* the peer may be waiting inside its create: nothing collective is safe any more */
        fprintf(stderr, "[r%d] FAIL %s: cchan_coll_create succeeded (want every rank to fail)\n",
                g_rank, what);
        _exit(1);
    }
    const char *msg = cchan_coll_last_error();
    printf("[r%d] %s: %.2f s: %s\n", g_rank, what, dt, msg);
    EXPECT(dt < DEADLINE_S, "%s: failed after %.1f s (want < %.0f s)", what, dt, DEADLINE_S);
    EXPECT(strstr(msg, name) != NULL, "%s: message does not name '%s': %s", what, name, msg);
    if (ranks)
        EXPECT(strstr(msg, "rank 0") && strstr(msg, "rank 1"),
               "%s: message does not name rank 0 and rank 1: %s", what, msg);
}

/* A create that succeeds on every rank and whose AllReduce is right. */
static cchan_coll_t *expect_create_ok(const cchan_coll_config_t *cfg, const char *what) {
    cchan_coll_t *c = NULL;
    int st = cchan_coll_create(g_comm, cfg, &c);
    EXPECT(st == 0, "%s: cchan_coll_create = %d: %s", what, st, cchan_coll_last_error());
    if (st) exit(1);
    check_allreduce(c, what);
    return c;
}

static void mode_tuning(void) {
    char t0[256], t1[256];
    write_table(t0, sizeof t0, "a", 1.0);
    write_table(t1, sizeof t1, "b", 2.0);
    if (g_rank == 0) setenv("CCHAN_COLL_TUNING", t0, 1);
    expect_create_fails(NULL, "CCHAN_COLL_TUNING", 1, "CCHAN_COLL_TUNING on rank 0 only");
    /* set everywhere, but rank 1's rows differ */
    setenv("CCHAN_COLL_TUNING", g_rank == 1 ? t1 : t0, 1);
    expect_create_fails(NULL, "CCHAN_COLL_TUNING", 1, "CCHAN_COLL_TUNING of other rows on rank 1");
    /* the same rows on every rank (each rank its own file of them): agreed */
    write_table(t1, sizeof t1, "c", 1.0);
    setenv("CCHAN_COLL_TUNING", t1, 1);
    cchan_coll_t *c = expect_create_ok(NULL, "the same table on every rank");
    cchan_coll_choice_t ch;
    CHECK(cchan_coll_choose(c, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_F32, 4096, 1, 0, NULL, NULL, &ch));
    EXPECT(ch.from_table && ch.algo == CCHAN_COLL_HB_ALLPAIRS, "the table's row not chosen: %s",
           ch.why);
    CHECK(cchan_coll_destroy(c));
    unsetenv("CCHAN_COLL_TUNING");
    remove(t0);
    remove(t1);
}

static void mode_plans(const char *dir) {
    char file[4096];
    first_plan(dir, file, sizeof file);
    setenv("CCHAN_COLL_PLANS", g_rank == 0 ? dir : file, 1);
    expect_create_fails(NULL, "CCHAN_COLL_PLANS", 1, "CCHAN_COLL_PLANS a folder and a file");
    setenv("CCHAN_COLL_PLANS", dir, 1);
    cchan_coll_t *c = expect_create_ok(NULL, "the same plan folder on every rank");
    CHECK(cchan_coll_destroy(c));
    unsetenv("CCHAN_COLL_PLANS");
}

static void mode_param(void) {
    if (g_rank == 1) setenv("CCHAN_COLL_ZC_AG_MAX", "0", 1);
    expect_create_fails(NULL, "CCHAN_COLL_ZC_AG_MAX", 1, "CCHAN_COLL_ZC_AG_MAX on rank 1 only");
    unsetenv("CCHAN_COLL_ZC_AG_MAX");
    if (g_rank == 0) setenv("CCHAN_COLL_PLAN_MAX_BYTES", "1048576", 1);
    expect_create_fails(NULL, "CCHAN_COLL_PLAN_MAX_BYTES", 1,
                        "CCHAN_COLL_PLAN_MAX_BYTES on rank 0 only");
    unsetenv("CCHAN_COLL_PLAN_MAX_BYTES");
    /* the default on one rank and the same value set on the other: equal */
    if (g_rank == 0) setenv("CCHAN_COLL_CE_LANES", "1", 1);
    cchan_coll_t *c = expect_create_ok(NULL, "CCHAN_COLL_CE_LANES=1 (the default) on rank 0");
    CHECK(cchan_coll_destroy(c));
    unsetenv("CCHAN_COLL_CE_LANES");
}

static void mode_malformed(void) {
    if (g_rank == 1) setenv("CCHAN_COLL_CE_LANES", "99", 1);
    /* rank 1 names its value; rank 0 learns rank 1's reason */
    expect_create_fails(NULL, "CCHAN_COLL_CE_LANES", 0, "CCHAN_COLL_CE_LANES=99 on rank 1 only");
    unsetenv("CCHAN_COLL_CE_LANES");
    cchan_coll_t *c = expect_create_ok(NULL, "after the malformed variable");
    CHECK(cchan_coll_destroy(c));
}

static void mode_config(void) {
    cchan_coll_config_t cfg = CCHAN_COLL_CONFIG_INIT;
    cfg.max_blocks = g_rank == 0 ? 1 : 2;
    expect_create_fails(&cfg, "max_blocks", 1, "max_blocks 1 on rank 0, 2 on rank 1");
    cfg.max_blocks = 2;
    cchan_coll_t *c = expect_create_ok(&cfg, "max_blocks 2 on every rank");
    CHECK(cchan_coll_destroy(c));
}

static void mode_same(const char *dir) {
    char t[256];
    write_table(t, sizeof t, "same", 3.0); /* a path of each rank's own */
    setenv("CCHAN_COLL_TUNING", t, 1);
    if (dir) setenv("CCHAN_COLL_PLANS", dir, 1);
    setenv("CCHAN_COLL_ZC_AG_MAX", "1048576", 1);
    cchan_coll_t *c = expect_create_ok(NULL, "equal settings");
    CHECK(cchan_coll_destroy(c));
    unsetenv("CCHAN_COLL_TUNING");
    unsetenv("CCHAN_COLL_PLANS");
    unsetenv("CCHAN_COLL_ZC_AG_MAX");
    remove(t);
}

/* A load that every rank must fail, naming `name`, rank 0 and rank 1. */
static void expect_load_fails(int st, const char *name, const char *what) {
    const char *msg = cchan_coll_last_error();
    printf("[r%d] %s: %d: %s\n", g_rank, what, st, msg);
    if (st >= 0) {
        fprintf(stderr, "[r%d] FAIL %s: succeeded (want every rank to fail)\n", g_rank, what);
        _exit(1);
    }
    EXPECT(strstr(msg, name) != NULL, "%s: message does not name '%s': %s", what, name, msg);
    EXPECT(strstr(msg, "rank 0") && strstr(msg, "rank 1"),
           "%s: message does not name rank 0 and rank 1: %s", what, msg);
}

static void mode_load(const char *dir) {
    cchan_coll_t *c = expect_create_ok(NULL, "no table, no plans");
    char t[256];
    write_table(t, sizeof t, "load", 1.0);
    expect_load_fails(cchan_coll_load_tuning(c, g_rank == 0 ? t : NULL), "tuning table",
                      "cchan_coll_load_tuning on rank 0 only");
    cchan_coll_choice_t ch;
    CHECK(cchan_coll_choose(c, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_F32, 4096, 1, 0, NULL, NULL, &ch));
    EXPECT(!ch.from_table, "a table no rank agreed on is in use: %s", ch.why);
    if (dir) {
        char file[4096];
        first_plan(dir, file, sizeof file);
        const int before = cchan_coll_algos(c, NULL, 0);
        expect_load_fails(cchan_coll_load_plans(c, g_rank == 0 ? dir : file), "plans",
                          "cchan_coll_load_plans a folder and a file");
        /* the failed load added nothing: the ranks' registries are still equal */
        EXPECT(cchan_coll_algos(c, NULL, 0) == before, "failed load left %d algorithms (was %d)",
               cchan_coll_algos(c, NULL, 0), before);
        int n = cchan_coll_load_plans(c, dir);
        EXPECT(n > 0, "cchan_coll_load_plans(%s) = %d: %s", dir, n, cchan_coll_last_error());
    }
    int rows = cchan_coll_load_tuning(c, t);
    EXPECT(rows == 1, "cchan_coll_load_tuning (equal) = %d: %s", rows, cchan_coll_last_error());
    check_allreduce(c, "after the agreed loads");
    CHECK(cchan_coll_destroy(c));
    remove(t);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: coll_agree tuning|plans|param|malformed|config|same|load [DIR]\n");
        return 2;
    }
    const char *mode = argv[1], *dir = argc > 2 ? argv[2] : NULL;
    signal(SIGALRM, on_alarm);
    alarm(90);
    cchan_bootstrap_t *bs;
    cchan_comm_config_t ccfg = CCHAN_COMM_CONFIG_INIT;
    ccfg.platform = CCHAN_PLATFORM_HOST;
    CHECK(cchan_bootstrap_create_from_env(&bs));
    CHECK(cchan_comm_create(bs, &ccfg, &g_comm));
    g_rank = cchan_comm_rank(g_comm);
    g_n = cchan_comm_size(g_comm);
    /* the differences below are set by this program on one rank: none may come from outside */
    static const char *const vars[] = {"CCHAN_COLL_TUNING", "CCHAN_COLL_PLANS",
                                       "CCHAN_COLL_ZC_AG_MAX", "CCHAN_COLL_PLAN_MAX_BYTES",
                                       "CCHAN_COLL_CE_LANES"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    if (!strcmp(mode, "tuning"))
        mode_tuning();
    else if (!strcmp(mode, "plans") && dir)
        mode_plans(dir);
    else if (!strcmp(mode, "param"))
        mode_param();
    else if (!strcmp(mode, "malformed"))
        mode_malformed();
    else if (!strcmp(mode, "config"))
        mode_config();
    else if (!strcmp(mode, "same"))
        mode_same(dir);
    else if (!strcmp(mode, "load"))
        mode_load(dir);
    else {
        fprintf(stderr, "coll_agree: mode '%s' unknown, or plans without a DIR\n", mode);
        return 2;
    }
    CHECK(cchan_comm_destroy(g_comm)); /* and the bootstrap it owns */
    printf("[r%d] coll_agree %s: %d checks, %d failed\n", g_rank, mode, g_checks, g_fail);
    return g_fail ? 1 : 0;
}
