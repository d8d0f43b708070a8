/* A plan whose collective says "custom" has no reference result, but every other check of what it
 * means still applies: bounds, the cross-rank pairing of signals and waits, and the simulated run
 * of every rank (no deadlock, no race, every signal consumed in its call). Relabelling a plan
 * "custom" must not be a way past them.
 *
 * Shipped 2-rank plans, as shipped and relabelled "custom":
 *  - the plan itself loads and, relabelled, runs on the host platform (a thread per rank, one
 *    process) with the result it computed before (its data flow is unchanged);
 *  - with a planted defect (a wait no signal matches, a signal no wait consumes, two blocks that
 *    wait before they signal, a write racing a peer's put into the same chunk, a ref past the end
 *    of its buffer) it is refused with -EINVAL, the reason named, and the message the same as for
 *    the plan under its own collective.
 *
 *   exec_custom PLAN_DIR
 *
 * Exit 0 when every check passed, 77 when PLAN_DIR lacks the plans. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cchan_exec.h"

#define NR 2
#define COUNT 64u /* floats per rank's input: a multiple of every granularity used here */
#define TIMEOUT_MS 3000

static int g_failures, g_checks;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            g_failures++;                                                                          \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "FAIL: a run of a relabelled plan ignored its deadline (watchdog)\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
    _exit(1);
}

/* ------------------------------------------------------------------ running (a thread per rank) */

typedef struct rank_state {
    int rank;
    cchan_unique_id_t *id;
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    cchan_mem_t *send_mem, *recv_mem;
    float *send, *recv;
    const cchan_exec_plan_t *plan;
    cchan_exec_collective_t computes; /* what the plan computes, whatever its label says */
    int st;
    char err[512];
} rank_state_t;

static rank_state_t g_r[NR];

static float val(int r, uint64_t i) { return (float)((int)((i * 7 + (uint64_t)r * 13) % 17) - 8); }

static float expect(cchan_exec_collective_t c, int rank, uint64_t o) {
    (void)rank;
    float s = 0;
    switch (c) {
    case CCHAN_EXEC_ALLREDUCE:
        for (int r = 0; r < NR; r++) s += val(r, o);
        return s;
    case CCHAN_EXEC_ALLGATHER: return val((int)(o / COUNT), o % COUNT);
    default: return 0; /* (only these two are run here) */
    }
}

static void *setup_comm(void *p) {
    rank_state_t *r = (rank_state_t *)p;
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST;
    cfg.timeout_ms = TIMEOUT_MS;
    size_t bytes = (size_t)COUNT * NR * sizeof(float);
    int st = cchan_bootstrap_create(r->id, r->rank, NR, &r->bs);
    if (st >= 0) st = cchan_comm_create(r->bs, &cfg, &r->comm);
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

static void *run_rank(void *p) {
    rank_state_t *r = (rank_state_t *)p;
    cchan_exec_t *ex = NULL;
    size_t bytes = (size_t)COUNT * NR * sizeof(float);
    r->st = 0;
    r->err[0] = 0;
    int st = cchan_exec_create(r->comm, r->plan, &ex);
    if (!st) st = cchan_exec_register(ex, r->send, bytes);
    if (!st) st = cchan_exec_register(ex, r->recv, bytes);
    for (uint64_t k = 0; k < COUNT; k++) r->send[k] = val(r->rank, k);
    memset(r->recv, 0xEE, bytes);
    if (!st) st = cchan_exec_run(ex, r->send, r->recv, COUNT, CCHAN_EXEC_F32, CCHAN_EXEC_SUM, NULL);
    if (st) {
        r->st = st;
        snprintf(r->err, sizeof r->err, "%s: %s", cchan_strerror(st), cchan_exec_last_error());
    } else {
        uint64_t out = r->computes == CCHAN_EXEC_ALLGATHER ? (uint64_t)COUNT * NR : COUNT;
        for (uint64_t o = 0; o < out && !r->st; o++)
            if (r->recv[o] != expect(r->computes, r->rank, o)) {
                r->st = 1;
                snprintf(r->err, sizeof r->err, "out[%llu] = %g, want %g", (unsigned long long)o,
                         r->recv[o], expect(r->computes, r->rank, o));
            }
    }
    if (ex) cchan_exec_destroy(ex);
    return NULL;
}

static void run_plan(const char *name, const cchan_exec_plan_t *plan,
                     cchan_exec_collective_t computes) {
    pthread_t th[NR];
    for (int i = 0; i < NR; i++) {
        g_r[i].plan = plan;
        g_r[i].computes = computes;
    }
    alarm(TIMEOUT_MS / 1000 * 4 + 10);
    for (int i = 0; i < NR; i++) pthread_create(&th[i], NULL, run_rank, &g_r[i]);
    for (int i = 0; i < NR; i++) pthread_join(th[i], NULL);
    alarm(0);
    for (int i = 0; i < NR; i++) EXPECT(g_r[i].st == 0, "%s: rank %d: %s", name, i, g_r[i].err);
    if (!g_r[0].st && !g_r[1].st) printf("ok   %-44s runs, result right\n", name);
}

/* ------------------------------------------------------------------ defects */

static json_t *ops_of(json_t *root, int rank) {
    json_t *tb =
        json_array_get(json_object_get(json_array_get(json_object_get(root, "ranks"), (size_t)rank),
                                       "threadblocks"),
                       0);
    return json_object_get(tb, "ops");
}

static json_t *op_ch0(const char *op) { return json_pack("{s:s, s:i}", "op", op, "ch", 0); }

/* A copy of rank `rank`'s input chunk 0 into its output chunk `chunk`. */
static json_t *op_copy(int chunk) {
    return json_pack("{s:s, s:[{s:s, s:i, s:i}], s:[{s:s, s:i, s:i}]}", "op", "copy", "src", "buf",
                     "input", "chunk", 0, "count", 1, "dst", "buf", "output", "chunk", chunk,
                     "count", 1);
}

typedef struct defect {
    const char *name;
    const char *plan;   /* file in PLAN_DIR */
    const char *reason; /* a phrase the refusal must hold */
    void (*plant)(json_t *root);
} defect_t;

/* allgather_allpairs_mem.n2, every rank's block 0: signal, wait, put_signal (own input into the
 * peer's output), wait (for the peer's put), copy (own input into own output) */
static void extra_wait(json_t *root) { json_array_append_new(ops_of(root, 0), op_ch0("wait")); }
static void extra_signal(json_t *root) { json_array_append_new(ops_of(root, 0), op_ch0("signal")); }
static void wait_first(json_t *root) {
    for (int r = 0; r < NR; r++) { /* both wait for the other's signal before sending their own */
        json_t *ops = ops_of(root, r), *s = json_incref(json_array_get(ops, 0));
        json_array_remove(ops, 0);
        json_array_insert_new(ops, 1, s);
    }
}
static void racing_write(json_t *root) {
    /* rank 0 writes output chunk 1, which rank 1's put fills, before waiting for that put */
    json_array_insert_new(ops_of(root, 0), 3, op_copy(1));
}
static void past_end(json_t *root) {
    json_t *dst = json_array_get(json_object_get(json_array_get(ops_of(root, 0), 4), "dst"), 0);
    json_object_set_new(dst, "chunk", json_integer(2)); /* output has 2 chunks */
}

static const defect_t defects[] = {
    {"wait without a signal", "allgather_allpairs_mem.n2.json", "every signal needs one wait",
     extra_wait},
    {"signal without a wait", "allgather_allpairs_mem.n2.json", "every signal needs one wait",
     extra_signal},
    {"both wait first (deadlock)", "allgather_allpairs_mem.n2.json", "deadlock", wait_first},
    {"write racing a put", "allgather_allpairs_mem.n2.json", "unordered", racing_write},
    {"ref past the buffer's end", "allgather_allpairs_mem.n2.json", "of output, which has 2",
     past_end},
};

/* Loads `root` as it is; returns 0 or the status, the message in msg. */
static int load(json_t *root, cchan_exec_plan_t **plan, char *msg, size_t n) {
    char *text = json_dumps(root, JSON_COMPACT);
    if (!text) {
        fprintf(stderr, "json_dumps failed\n");
        exit(1);
    }
    *plan = NULL;
    int st = cchan_exec_plan_load_string(text, strlen(text), plan);
    snprintf(msg, n, "%s", st ? cchan_exec_last_error() : "");
    free(text);
    return st;
}

static json_t *read_plan(const char *dir, const char *file) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) {
        printf("SKIP: %s: %s\n", path, err.text);
        exit(77);
    }
    return root;
}

static void relabel(json_t *root) {
    json_object_set_new(root, "collective", json_string("custom"));
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PLAN_DIR\n", argv[0]);
        return 2;
    }
    signal(SIGALRM, on_alarm);
    char msg[1024], msg2[1024];

    /* shipped plans relabelled: they load (reported as custom) and run */
    static const char *const runs[] = {"allgather_allpairs_mem.n2.json", "allreduce_1pa_ll.n2.json",
                                       "allreduce_ring_mem.n2.json"};
    cchan_unique_id_t id;
    if (cchan_get_unique_id(&id) < 0) {
        fprintf(stderr, "cchan_get_unique_id: %s\n", cchan_last_error());
        return 1;
    }
    pthread_t th[NR];
    for (int i = 0; i < NR; i++) {
        g_r[i].rank = i;
        g_r[i].id = &id;
        pthread_create(&th[i], NULL, setup_comm, &g_r[i]);
    }
    for (int i = 0; i < NR; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < NR; i++)
        if (g_r[i].st) {
            fprintf(stderr, "rank %d: %s\n", i, g_r[i].err);
            return 1;
        }
    for (size_t f = 0; f < sizeof runs / sizeof runs[0]; f++) {
        json_t *root = read_plan(argv[1], runs[f]);
        cchan_exec_plan_t *plan;
        int st = load(root, &plan, msg, sizeof msg);
        EXPECT(st == 0, "%s as shipped: refused (%d): %s", runs[f], st, msg);
        cchan_exec_plan_info_t in;
        cchan_exec_collective_t computes = CCHAN_EXEC_CUSTOM;
        if (!st && cchan_exec_plan_info(plan, &in) == 0) computes = in.collective;
        cchan_exec_plan_free(plan);
        relabel(root);
        st = load(root, &plan, msg, sizeof msg);
        char name[256];
        snprintf(name, sizeof name, "%s relabelled custom", runs[f]);
        EXPECT(st == 0, "%s: refused (%d): %s", name, st, msg);
        if (!st) {
            EXPECT(cchan_exec_plan_info(plan, &in) == 0 && in.collective == CCHAN_EXEC_CUSTOM,
                   "%s: plan info says collective %d, want CCHAN_EXEC_CUSTOM (%d)", name,
                   (int)in.collective, (int)CCHAN_EXEC_CUSTOM);
            run_plan(name, plan, computes);
        }
        cchan_exec_plan_free(plan);
        json_decref(root);
    }
    for (int i = 0; i < NR; i++) {
        cchan_mem_destroy(g_r[i].send_mem);
        cchan_mem_destroy(g_r[i].recv_mem);
    }
    /* (the communicators are left to process exit: their teardown is collective) */

    /* planted defects: refused under either label, for the same reason */
    for (size_t d = 0; d < sizeof defects / sizeof defects[0]; d++) {
        const defect_t *x = &defects[d];
        json_t *root = read_plan(argv[1], x->plan);
        x->plant(root);
        cchan_exec_plan_t *plan;
        int st = load(root, &plan, msg, sizeof msg);
        cchan_exec_plan_free(plan);
        EXPECT(st == -EINVAL && strstr(msg, x->reason),
               "%s, as shipped: status %d (want %d), message \"%s\" (want \"%s\")", x->name, st,
               -EINVAL, msg, x->reason);
        relabel(root);
        int st2 = load(root, &plan, msg2, sizeof msg2);
        cchan_exec_plan_free(plan);
        EXPECT(st2 == -EINVAL && strstr(msg2, x->reason),
               "%s, relabelled custom: status %d (want %d), message \"%s\" (want \"%s\")", x->name,
               st2, -EINVAL, st2 ? msg2 : "(loads)", x->reason);
        EXPECT(!st2 || !strcmp(msg, msg2),
               "%s: relabelled custom, refused for another reason: \"%s\" (as shipped: \"%s\")",
               x->name, msg2, msg);
        if (st2 == -EINVAL && strstr(msg2, x->reason))
            printf("ok   %-44s refused: %s\n", x->name, msg2);
        json_decref(root);
    }
    printf("%d checks, %d failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
