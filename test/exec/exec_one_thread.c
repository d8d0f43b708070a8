/* cchan_exec driven as NCCL group calls and nccl-tests -g N drive it: two ranks in one process, set
 * up by a thread per rank (create, register: collective), then ONE thread runs every plan on both
 * ranks, rank 0's run started asynchronously before rank 1's (stream != NULL on the host
 * platform), then waits for both. No run may call the bootstrap: one that did would wait for a
 * rank the same thread drives, and the watchdog ends the test. The watchdog bounds one step (a
 * set-up, one run on both ranks, a teardown), re-armed as each starts: a slow machine or a
 * sanitizer makes the test longer, never failing; only a step that makes no progress trips it.
 * Results are checked exactly. Every plan runs with 1 to 16 instances (argument), so parts of every
 * chunk per instance that are uneven or empty are covered too; in-place plans are called in place.
 *
 *   exec_one_thread PLAN_DIR [PLAN_DIR...] [--inst LO-HI]
 *
 * Plans for 2 ranks (*.n2.json). A run beyond what the executor was set up for is refused with
 * CCHAN_ERR_NO_RESOURCE (CCHAN_EXEC_NO_GROW), at once. Exit 77 when no plan dir has a plan.
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cchan_exec.h"

#define NR 2
#define MAX_IN (64u * 1024u) /* largest input of a run; the executors are set up for it */
#define GUARD 64
/* One step's bound: a run takes milliseconds (a second under TSan on a loaded machine), a set-up
 * at most the communicator's 20 s timeout; a blocked run never ends. */
#define WATCHDOG_S 60
#define STR_(x) #x
#define STR(x) STR_(x)

static int g_fail, g_checks;
static cchan_unique_id_t g_id;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            if (g_fail++ < 20) {                                                                   \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                               \
                fprintf(stderr, __VA_ARGS__);                                                      \
                fprintf(stderr, "\n");                                                             \
            }                                                                                      \
        }                                                                                          \
    } while (0)

typedef struct rank_state {
    int rank;
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    cchan_mem_t *send_mem, *recv_mem;
    float *send, *recv;
    /* per plan: */
    const cchan_exec_plan_t *plan;
    uint32_t instances;
    cchan_exec_t *ex;
    int st;
    char err[512];
} rank_state_t;

static rank_state_t g_r[NR];

static char g_step[256] = "start"; /* what the watchdog's step is doing, for its message */

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "FAIL: watchdog: no progress for " STR(
        WATCHDOG_S) " s (a run that calls the bootstrap or waits for the other rank, "
                    "which this thread drives, never returns), in: ";
    if (write(2, msg, sizeof msg - 1) < 0 || write(2, g_step, strlen(g_step)) < 0 ||
        write(2, "\n", 1) < 0)
        _exit(1);
    _exit(1);
}

/* Starts a step: the watchdog's bound restarts, so only a step that never ends trips it, however
 * long the whole test takes (the plans, the instances and the sizes are many). */
static void watchdog(const char *fmt, ...) {
    alarm(0); /* g_step is not written while the handler may read it */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_step, sizeof g_step, fmt, ap);
    va_end(ap);
    alarm(WATCHDOG_S);
}

static void note(rank_state_t *r, int st, const char *what) {
    if (st < 0 && !r->st) {
        r->st = st;
        snprintf(r->err, sizeof r->err, "%s: %s: %s", what, cchan_strerror(st),
                 cchan_exec_last_error());
    }
}

static void *setup_comm(void *p) {
    rank_state_t *r = (rank_state_t *)p;
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST;
    cfg.timeout_ms = 20000;
    int st = cchan_bootstrap_create(&g_id, r->rank, NR, &r->bs);
    if (st >= 0) st = cchan_comm_create(r->bs, &cfg, &r->comm);
    size_t bytes = (size_t)MAX_IN * NR + GUARD;
    if (st >= 0) st = cchan_mem_alloc(r->comm, bytes, 0, &r->send_mem);
    if (st >= 0) st = cchan_mem_alloc(r->comm, bytes, 0, &r->recv_mem);
    if (st < 0) {
        r->st = st;
        snprintf(r->err, sizeof r->err, "comm setup: %s", cchan_last_error());
        return NULL;
    }
    r->send = (float *)cchan_mem_ptr(r->send_mem);
    r->recv = (float *)cchan_mem_ptr(r->recv_mem);
    return NULL;
}

/* Collective, a thread per rank: executor set up for MAX_IN, never growing in a run. */
static void *setup_exec(void *p) {
    rank_state_t *r = (rank_state_t *)p;
    cchan_exec_config_t cfg = CCHAN_EXEC_CONFIG_INIT;
    cfg.instances = r->instances;
    cfg.flags = CCHAN_EXEC_NO_GROW;
    cfg.max_bytes = MAX_IN;
    size_t bytes = (size_t)MAX_IN * NR + GUARD;
    int st = cchan_exec_create_ex(r->comm, r->plan, &cfg, &r->ex);
    note(r, st, "cchan_exec_create_ex");
    if (st < 0) return NULL;
    note(r, cchan_exec_register(r->ex, r->send, bytes), "cchan_exec_register(send)");
    note(r, cchan_exec_register(r->ex, r->recv, bytes), "cchan_exec_register(recv)");
    return NULL;
}

static void *teardown_exec(void *p) {
    rank_state_t *r = (rank_state_t *)p;
    if (r->ex) note(r, cchan_exec_destroy(r->ex), "cchan_exec_destroy");
    r->ex = NULL;
    return NULL;
}

static void on_both(void *(*fn)(void *)) {
    pthread_t th[NR];
    for (int i = 0; i < NR; i++) pthread_create(&th[i], NULL, fn, &g_r[i]);
    for (int i = 0; i < NR; i++) pthread_join(th[i], NULL);
}

static float val(int r, uint64_t i, int seed) {
    return (float)((int)((i * 7 + (uint64_t)r * 13 + (uint64_t)seed) % 17) - 8);
}

static float expect(const cchan_exec_plan_info_t *in, int rank, uint64_t count, uint64_t o,
                    int seed) {
    float s = 0;
    switch (in->collective) {
    case CCHAN_EXEC_ALLREDUCE:
        for (int r = 0; r < NR; r++) s += val(r, o, seed);
        return s;
    case CCHAN_EXEC_ALLGATHER: return val((int)(o / count), o % count, seed);
    case CCHAN_EXEC_REDUCESCATTER:
        for (int r = 0; r < NR; r++) s += val(r, (uint64_t)rank * (count / NR) + o, seed);
        return s;
    case CCHAN_EXEC_ALLTOALL: {
        uint64_t m = count / NR;
        return val((int)(o / m), (uint64_t)rank * m + o % m, seed);
    }
    case CCHAN_EXEC_BROADCAST: return val(in->root, o, seed);
    default: return 0;
    }
}

/* One size on both ranks from this thread; 0 when both ran. */
static int run_both(const cchan_exec_plan_info_t *in, uint64_t count, int seed) {
    watchdog("%s x%u: a run of count %llu", in->name, g_r[0].instances, (unsigned long long)count);
    uint64_t in_bytes = count * 4, out_count = count / in->in_chunks * in->out_chunks;
    float *send[NR], *recv[NR];
    uint8_t *guard[NR]; /* GUARD bytes after the call's last byte, 0xEE */
    const int rs_inplace = in->inplace && in->collective == CCHAN_EXEC_REDUCESCATTER;
    for (int i = 0; i < NR; i++) {
        rank_state_t *r = &g_r[i];
        recv[i] = rs_inplace ? r->send + i * out_count : r->recv; /* output inside the input */
        send[i] = rs_inplace ? r->send
                  : in->inplace
                      ? (in->collective == CCHAN_EXEC_ALLGATHER ? r->recv + i * count : r->recv)
                      : r->send;
        guard[i] = (uint8_t *)(rs_inplace ? send[i] + count : recv[i] + out_count);
        memset(recv[i], 0xEE, out_count * 4);
        memset(guard[i], 0xEE, GUARD);
        for (uint64_t k = 0; k < count; k++) send[i][k] = val(i, k, seed);
    }
    int st[NR];
    for (int i = 0; i < NR; i++) /* rank 0's run must not wait for rank 1's */
        st[i] = cchan_exec_run(g_r[i].ex, send[i], recv[i], count, CCHAN_EXEC_F32, CCHAN_EXEC_SUM,
                               (void *)&g_r[i]);
    for (int i = 0; i < NR; i++) {
        EXPECT(st[i] == 0, "%s x%u rank %d count %llu: run = %d (%s)", in->name, g_r[i].instances,
               i, (unsigned long long)count, st[i], cchan_exec_last_error());
        int s = cchan_exec_sync(g_r[i].ex);
        EXPECT(s == 0, "%s x%u rank %d count %llu: sync = %d (%s)", in->name, g_r[i].instances, i,
               (unsigned long long)count, s, cchan_exec_last_error());
    }
    for (int i = 0; i < NR; i++) {
        uint64_t bad = 0, first = 0;
        for (uint64_t o = 0; o < out_count; o++)
            if (recv[i][o] != expect(in, i, count, o, seed) && bad++ == 0) first = o;
        int gbad = 0;
        for (int k = 0; k < GUARD; k++) gbad += guard[i][k] != 0xEE;
        EXPECT(bad == 0 && gbad == 0,
               "%s x%u rank %d count %llu (%llu bytes)%s: %llu of %llu wrong (first out[%llu] = "
               "%g, want %g), %d guard bytes overwritten",
               in->name, g_r[i].instances, i, (unsigned long long)count,
               (unsigned long long)in_bytes, in->inplace ? " in place" : "",
               (unsigned long long)bad, (unsigned long long)out_count, (unsigned long long)first,
               recv[i][first], expect(in, i, count, first, seed), gbad);
    }
    return st[0] || st[1];
}

static void test_plan(const char *path, uint32_t lo, uint32_t hi, int *ran) {
    cchan_exec_plan_t *plan;
    if (cchan_exec_plan_load_file(path, &plan) < 0) {
        EXPECT(0, "%s: %s", path, cchan_exec_last_error());
        return;
    }
    cchan_exec_plan_info_t in;
    cchan_exec_plan_info(plan, &in);
    for (uint32_t k = lo; k <= hi; k++) {
        for (int i = 0; i < NR; i++) {
            g_r[i].plan = plan;
            g_r[i].instances = k;
            g_r[i].st = 0;
        }
        watchdog("%s x%u: set-up", in.name, k);
        on_both(setup_exec);
        if (g_r[0].st || g_r[1].st) {
            EXPECT(0, "%s x%u: set-up: %s | %s", in.name, k, g_r[0].err, g_r[1].err);
            watchdog("%s x%u: teardown", in.name, k);
            on_both(teardown_exec);
            break;
        }
        /* one granule (most instances empty), an odd multiple, the largest set up */
        uint64_t g = in.granularity / 4, sizes[3] = {g, g * 33, MAX_IN / in.granularity * g};
        for (int s = 0; s < 3; s++)
            if (sizes[s] * 4 <= MAX_IN && run_both(&in, sizes[s], (int)(k * 10 + (uint32_t)s)))
                break;
        /* beyond the set-up: refused at once, no collective growth */
        watchdog("%s x%u: a run past the set-up", in.name, k);
        uint64_t big = (uint64_t)MAX_IN * 2 / in.granularity * g;
        if (cchan_exec_check(g_r[0].ex, g_r[0].send, g_r[0].recv, big, CCHAN_EXEC_F32) ==
            CCHAN_ERR_NO_RESOURCE) {
            int st = cchan_exec_run(g_r[0].ex, g_r[0].send, g_r[0].recv, big, CCHAN_EXEC_F32,
                                    CCHAN_EXEC_SUM, NULL);
            EXPECT(st == CCHAN_ERR_NO_RESOURCE && strstr(cchan_exec_last_error(), "prepare"),
                   "%s: a run past the set-up: %d (%s)", in.name, st, cchan_exec_last_error());
        }
        watchdog("%s x%u: teardown", in.name, k);
        on_both(teardown_exec);
    }
    (*ran)++;
    printf("%-32s instances %u..%u\n", in.name, lo, hi);
    cchan_exec_plan_free(plan);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    uint32_t lo = 1, hi = 16;
    signal(SIGALRM, on_alarm);
    watchdog("communicator set-up");
    if (cchan_get_unique_id(&g_id) < 0) {
        fprintf(stderr, "cchan_get_unique_id: %s\n", cchan_last_error());
        return 1;
    }
    for (int i = 0; i < NR; i++) g_r[i].rank = i;
    on_both(setup_comm);
    for (int i = 0; i < NR; i++)
        if (g_r[i].st) {
            fprintf(stderr, "rank %d: %s\n", i, g_r[i].err);
            return 1;
        }
    int ran = 0;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--inst") && a + 1 < argc) {
            if (sscanf(argv[++a], "%u-%u", &lo, &hi) != 2) return 2;
            continue;
        }
        DIR *d = opendir(argv[a]);
        if (!d) continue;
        char *names[256];
        int nn = 0;
        struct dirent *de;
        while ((de = readdir(d)) && nn < 256) {
            size_t l = strlen(de->d_name);
            if (l > 8 && !strcmp(de->d_name + l - 8, ".n2.json")) names[nn++] = strdup(de->d_name);
        }
        closedir(d);
        qsort(names, (size_t)nn, sizeof names[0], cmp_str);
        for (int i = 0; i < nn; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[a], names[i]);
            test_plan(path, lo, hi, &ran);
            free(names[i]);
        }
    }
    watchdog("memory teardown");
    for (int i = 0; i < NR; i++) {
        cchan_mem_destroy(g_r[i].send_mem);
        cchan_mem_destroy(g_r[i].recv_mem);
    }
    alarm(0);
    if (!ran) {
        printf("SKIP: no *.n2.json plan in the directories given\n");
        return 77;
    }
    printf("%d plans, %d checks, %d failures\n", ran, g_checks, g_fail);
    /* (the communicators are left to process exit: their teardown is collective) */
    return g_fail ? 1 : 0;
}
