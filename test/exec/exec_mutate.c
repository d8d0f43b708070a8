/* Plans that are accepted must be right: every shipped plan of 2 and 4 ranks is mutated at random
 * (a ref's chunk, count, stride or channel; an op's channel, semaphore, group or loop body; a
 * channel's peer or index; an op's kind; an op deleted, duplicated or moved; buffer and scratch
 * chunk counts), and each mutant is either refused by the loader or, run twice back to back on the
 * host platform (a thread per rank, one process), gives exactly the collective's result, leaves
 * its input and the guard regions around input and output untouched, and finishes before its
 * deadline (the communicator's wait timeout; a watchdog ends a run that ignores it). A plan the
 * loader accepts that computes anything else fails the test.
 *
 *   exec_mutate PLAN_DIR [MUTANTS_PER_PLAN] [SEED]
 *
 * Prints the counts: mutants, refused, run-correct, wrong, out of bounds, hangs, run errors. */
#include <dirent.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cchan_exec.h"

#define MAXR 4
#define MAX_IN (16u * 1024u)
#define GUARD 256 /* bytes before and after input and output, inside the registration */
#define TIMEOUT_MS 3000

typedef struct rank_state {
    int rank, nranks;
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    cchan_mem_t *send_mem, *recv_mem;
    uint8_t *send_base, *recv_base;
    const cchan_exec_plan_t *plan;
    cchan_exec_t *ex;
    int st, timed_out;
    uint64_t count;
    int seed;
    char err[512];
} rank_state_t;

static rank_state_t g_r[MAXR];
static int g_n;
static cchan_unique_id_t g_id;
static long g_mutants, g_refused, g_correct, g_wrong, g_oob, g_hang, g_runerr;

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "FAIL: a mutant's run ignored its deadline (watchdog)\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
    _exit(1);
}

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return n ? (uint32_t)((rng_state >> 33) % n) : 0;
}

static void *setup_comm(void *p) {
    rank_state_t *r = (rank_state_t *)p;
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST;
    cfg.timeout_ms = TIMEOUT_MS;
    size_t bytes = (size_t)MAX_IN * MAXR + 2 * GUARD;
    int st = cchan_bootstrap_create(&g_id, r->rank, r->nranks, &r->bs);
    if (st >= 0) st = cchan_comm_create(r->bs, &cfg, &r->comm);
    if (st >= 0) st = cchan_mem_alloc(r->comm, bytes, 0, &r->send_mem);
    if (st >= 0) st = cchan_mem_alloc(r->comm, bytes, 0, &r->recv_mem);
    if (st < 0) {
        r->st = st;
        snprintf(r->err, sizeof r->err, "comm setup: %s", cchan_last_error());
        return NULL;
    }
    r->send_base = (uint8_t *)cchan_mem_ptr(r->send_mem);
    r->recv_base = (uint8_t *)cchan_mem_ptr(r->recv_mem);
    return NULL;
}

static float val(int r, uint64_t i, int seed) {
    return (float)((int)((i * 7 + (uint64_t)r * 13 + (uint64_t)seed * 5) % 17) - 8);
}

static float expect(const cchan_exec_plan_info_t *in, int rank, uint64_t count, uint64_t o,
                    int seed) {
    float s = 0;
    switch (in->collective) {
    case CCHAN_EXEC_ALLREDUCE:
        for (int r = 0; r < g_n; r++) s += val(r, o, seed);
        return s;
    case CCHAN_EXEC_ALLGATHER: return val((int)(o / count), o % count, seed);
    case CCHAN_EXEC_REDUCESCATTER:
        for (int r = 0; r < g_n; r++)
            s += val(r, (uint64_t)rank * (count / (uint64_t)g_n) + o, seed);
        return s;
    case CCHAN_EXEC_ALLTOALL: {
        uint64_t m = count / (uint64_t)g_n;
        return val((int)(o / m), (uint64_t)rank * m + o % m, seed);
    }
    case CCHAN_EXEC_BROADCAST: return val(in->root, o, seed);
    default: return 0;
    }
}

/* one mutant on this rank: create, register, two runs, destroy (a thread per rank) */
static void *run_rank(void *p) {
    rank_state_t *r = (rank_state_t *)p;
    cchan_exec_plan_info_t in;
    cchan_exec_plan_info(r->plan, &in);
    r->st = 0;
    r->timed_out = 0;
    r->err[0] = 0;
    cchan_exec_config_t cfg = CCHAN_EXEC_CONFIG_INIT;
    cfg.max_bytes = MAX_IN;
    int st = cchan_exec_create_ex(r->comm, r->plan, &cfg, &r->ex);
    size_t bytes = (size_t)MAX_IN * MAXR + 2 * GUARD;
    if (!st) st = cchan_exec_register(r->ex, r->send_base, bytes);
    if (!st) st = cchan_exec_register(r->ex, r->recv_base, bytes);
    /* what the caller allocates for the collective, not what the plan claims */
    uint64_t count = r->count, out_count = count;
    if (in.collective == CCHAN_EXEC_ALLGATHER) out_count = count * (uint64_t)g_n;
    if (in.collective == CCHAN_EXEC_REDUCESCATTER) out_count = count / (uint64_t)g_n;
    float *recv = (float *)(void *)(r->recv_base + GUARD);
    for (int run = 0; run < 2 && !st; run++) {
        int seed = r->seed + run;
        float *send = in.inplace
                          ? (in.collective == CCHAN_EXEC_ALLGATHER ? recv + r->rank * count : recv)
                          : (float *)(void *)(r->send_base + GUARD);
        memset(r->send_base, 0xA5, bytes);
        memset(r->recv_base, 0xEE, bytes);
        for (uint64_t k = 0; k < count; k++) send[k] = val(r->rank, k, seed);
        st = cchan_exec_run(r->ex, send, recv, count, CCHAN_EXEC_F32, CCHAN_EXEC_SUM, NULL);
        if (st) {
            snprintf(r->err, sizeof r->err, "run %d: %s: %s", run, cchan_strerror(st),
                     cchan_exec_last_error());
            r->timed_out = st == CCHAN_ERR_TIMEOUT || st == CCHAN_ERR_DEVICE_TIMEOUT ||
                           strstr(r->err, "timed out") != NULL ||
                           strstr(r->err, "deadline") != NULL;
            break;
        }
        uint64_t bad = 0, first = 0;
        for (uint64_t o = 0; o < out_count; o++)
            if (recv[o] != expect(&in, r->rank, count, o, seed) && bad++ == 0) first = o;
        int oob = 0;
        for (size_t k = 0; k < GUARD; k++) oob += r->recv_base[k] != 0xEE;
        for (size_t k = GUARD + out_count * 4; k < bytes; k++) oob += r->recv_base[k] != 0xEE;
        if (!in.inplace) {
            const uint8_t *sb = r->send_base;
            for (size_t k = 0; k < GUARD; k++) oob += sb[k] != 0xA5;
            for (size_t k = GUARD + count * 4; k < bytes; k++) oob += sb[k] != 0xA5;
            for (uint64_t k = 0; k < count; k++) bad += send[k] != val(r->rank, k, seed);
        }
        if (oob) {
            r->st = 2;
            snprintf(r->err, sizeof r->err, "run %d: %d bytes outside input/output written", run,
                     oob);
            break;
        }
        if (bad) {
            r->st = 1;
            snprintf(r->err, sizeof r->err,
                     "run %d: %llu of %llu wrong (first out[%llu] = %g, "
                     "want %g)",
                     run, (unsigned long long)bad, (unsigned long long)out_count,
                     (unsigned long long)first, recv[first],
                     expect(&in, r->rank, count, first, seed));
            break;
        }
    }
    if (st && !r->st) r->st = st;
    if (r->ex) cchan_exec_destroy(r->ex);
    r->ex = NULL;
    return NULL;
}

/* ------------------------------------------------------------------ mutations */

static json_t *pick_op(json_t *root, json_t **ops_out, size_t *idx) {
    json_t *ranks = json_object_get(root, "ranks");
    json_t *rk = json_array_get(ranks, rnd((uint32_t)json_array_size(ranks)));
    json_t *tbs = json_object_get(rk, "threadblocks");
    if (!json_array_size(tbs)) return NULL;
    json_t *ops = json_object_get(json_array_get(tbs, rnd((uint32_t)json_array_size(tbs))), "ops");
    if (!json_array_size(ops)) return NULL;
    *idx = rnd((uint32_t)json_array_size(ops));
    *ops_out = ops;
    return json_array_get(ops, *idx);
}

static void bump(json_t *obj, const char *key) {
    static const int d[] = {-2, -1, 1, 2, 3};
    json_t *v = json_object_get(obj, key);
    long long x = v && json_is_integer(v) ? json_integer_value(v) : 0;
    x += d[rnd(5)];
    if (x < 0) x = rnd(2);
    json_object_set_new(obj, key, json_integer(x));
}

static const char *const op_names[] = {
    "put",         "put_signal", "put_signal_flush", "get",          "signal",
    "wait",        "flush",      "put_packets",      "read_packets", "reduce_packets",
    "copy",        "reduce",     "reduce_put",       "barrier",      "sem_release",
    "sem_acquire", "sync"};

/* one random change; returns a short name of what changed */
static const char *mutate(json_t *root) {
    json_t *ops = NULL, *op;
    size_t i = 0;
    switch (rnd(10)) {
    case 0:
    case 1:
    case 2: { /* a ref field */
        if (!(op = pick_op(root, &ops, &i))) return "none";
        json_t *side = json_object_get(op, rnd(2) ? "src" : "dst");
        if (!json_array_size(side)) side = json_object_get(op, "src");
        if (!json_array_size(side)) return "none";
        json_t *ref = json_array_get(side, rnd((uint32_t)json_array_size(side)));
        static const char *const f[] = {"chunk", "chunk", "count", "stride", "ch"};
        const char *k = f[rnd(5)];
        if (!strcmp(k, "ch") && !json_object_get(ref, "ch")) {
            json_object_set_new(ref, "ch", json_integer(rnd(3)));
            return "ref ch added";
        }
        if (!strcmp(k, "ch") && json_object_get(ref, "ch") && rnd(3) == 0) {
            json_object_del(ref, "ch");
            return "ref ch removed";
        }
        bump(ref, k);
        return k;
    }
    case 3: { /* an op field */
        if (!(op = pick_op(root, &ops, &i))) return "none";
        static const char *const f[] = {"ch", "sem", "tbg_index", "tbg_size", "body"};
        const char *k = f[rnd(5)];
        if (!json_object_get(op, k) && rnd(2)) return "none";
        bump(op, k);
        return k;
    }
    case 4: { /* op kind */
        if (!(op = pick_op(root, &ops, &i))) return "none";
        json_object_set_new(op, "op",
                            json_string(op_names[rnd(sizeof op_names / sizeof *op_names)]));
        return "op kind";
    }
    case 5:
        if (!(op = pick_op(root, &ops, &i))) return "none";
        json_array_remove(ops, i);
        return "delete op";
    case 6:
        if (!(op = pick_op(root, &ops, &i))) return "none";
        json_array_insert_new(ops, i, json_deep_copy(op));
        return "duplicate op";
    case 7:
        if (!(op = pick_op(root, &ops, &i)) || i + 1 >= json_array_size(ops)) return "none";
        json_incref(op);
        json_array_remove(ops, i);
        json_array_insert_new(ops, i + 1, op);
        return "swap ops";
    case 8: { /* a channel */
        json_t *ranks = json_object_get(root, "ranks");
        json_t *chs = json_object_get(json_array_get(ranks, rnd((uint32_t)json_array_size(ranks))),
                                      "channels");
        if (!json_array_size(chs)) return "none";
        json_t *c = json_array_get(chs, rnd((uint32_t)json_array_size(chs)));
        bump(c, rnd(2) ? "peer" : "index");
        return "channel";
    }
    default: { /* sizes */
        json_t *ranks = json_object_get(root, "ranks");
        switch (rnd(4)) {
        case 0:
            bump(json_object_get(root, "buffers"), rnd(2) ? "output" : "scratch");
            return "buffers";
        case 1: bump(json_object_get(root, "buffers"), "input"); return "buffers.input";
        case 2:
            bump(json_array_get(ranks, rnd((uint32_t)json_array_size(ranks))), "scratch_chunks");
            return "scratch_chunks";
        default:
            bump(json_array_get(ranks, rnd((uint32_t)json_array_size(ranks))), "semaphores");
            return "semaphores";
        }
    }
    }
}

static int run_mutant(const char *name, const char *text) {
    cchan_exec_plan_t *plan = NULL;
    g_mutants++;
    if (cchan_exec_plan_load_string(text, strlen(text), &plan) < 0) {
        g_refused++;
        return 0;
    }
    cchan_exec_plan_info_t in;
    cchan_exec_plan_info(plan, &in);
    uint64_t g = in.granularity / 4, count = g * 3;
    while (count * 4 > MAX_IN && count > g) count -= g;
    pthread_t th[MAXR];
    for (int i = 0; i < g_n; i++) {
        g_r[i].plan = plan;
        g_r[i].count = count;
        g_r[i].seed = (int)(g_mutants % 7);
    }
    alarm(TIMEOUT_MS / 1000 * 4 + 10);
    for (int i = 0; i < g_n; i++) pthread_create(&th[i], NULL, run_rank, &g_r[i]);
    for (int i = 0; i < g_n; i++) pthread_join(th[i], NULL);
    alarm(0);
    int wrong = 0, oob = 0, hang = 0, err = 0;
    for (int i = 0; i < g_n; i++) {
        wrong |= g_r[i].st == 1;
        oob |= g_r[i].st == 2;
        hang |= g_r[i].timed_out;
        err |= g_r[i].st < 0;
    }
    const char *what = oob ? "OUT OF BOUNDS" : wrong ? "WRONG DATA" : hang ? "HANG" : NULL;
    if (oob)
        g_oob++;
    else if (wrong)
        g_wrong++;
    else if (hang)
        g_hang++;
    else if (err)
        g_runerr++;
    else
        g_correct++;
    if (what || err) {
        fprintf(stderr, "%s: %s (mutant %ld, %s)\n", what ? "FAIL" : "note", name, g_mutants,
                what ? what : "run refused");
        for (int i = 0; i < g_n; i++)
            if (g_r[i].err[0]) fprintf(stderr, "  rank %d: %s\n", i, g_r[i].err);
        if (what && getenv("EXEC_MUTATE_DUMP")) fprintf(stderr, "%s\n", text);
    }
    cchan_exec_plan_free(plan);
    return what != NULL;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PLAN_DIR [MUTANTS_PER_PLAN] [SEED]\n", argv[0]);
        return 2;
    }
    int per = argc > 2 ? atoi(argv[2]) : 90;
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 0) : 1;
    signal(SIGALRM, on_alarm);
    int fails = 0, plans = 0;
    for (int n = 2; n <= 4; n += 2) {
        g_n = n;
        if (cchan_get_unique_id(&g_id) < 0) {
            fprintf(stderr, "cchan_get_unique_id: %s\n", cchan_last_error());
            return 1;
        }
        pthread_t th[MAXR];
        for (int i = 0; i < n; i++) {
            memset(&g_r[i], 0, sizeof g_r[i]);
            g_r[i].rank = i;
            g_r[i].nranks = n;
            pthread_create(&th[i], NULL, setup_comm, &g_r[i]);
        }
        for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < n; i++)
            if (g_r[i].st) {
                fprintf(stderr, "rank %d: %s\n", i, g_r[i].err);
                return 1;
            }
        DIR *d = opendir(argv[1]);
        if (!d) {
            printf("SKIP: no plan directory %s\n", argv[1]);
            return 77;
        }
        char *names[256], suffix[16];
        int nn = 0;
        snprintf(suffix, sizeof suffix, ".n%d.json", n);
        struct dirent *de;
        while ((de = readdir(d)) && nn < 256) {
            size_t l = strlen(de->d_name);
            if (l > strlen(suffix) && !strcmp(de->d_name + l - strlen(suffix), suffix))
                names[nn++] = strdup(de->d_name);
        }
        closedir(d);
        qsort(names, (size_t)nn, sizeof names[0], cmp_str);
        for (int f = 0; f < nn; f++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[1], names[f]);
            json_error_t jerr;
            json_t *orig = json_load_file(path, 0, &jerr);
            if (!orig) {
                fprintf(stderr, "FAIL: %s: %s\n", path, jerr.text);
                fails++;
                continue;
            }
            plans++;
            rng_state = seed * 0x9E3779B97F4A7C15ull + (uint64_t)f * 1000003u + (uint64_t)n;
            /* the plan itself runs right */
            char *t0 = json_dumps(orig, JSON_COMPACT);
            char nm[512];
            snprintf(nm, sizeof nm, "%s (unchanged)", names[f]);
            long ref0 = g_refused;
            fails += run_mutant(nm, t0);
            if (g_refused != ref0) {
                fprintf(stderr, "FAIL: %s: the shipped plan is refused: %s\n", names[f],
                        cchan_exec_last_error());
                fails++;
            }
            g_mutants--;
            g_correct -= g_refused == ref0;
            g_refused = ref0;
            free(t0);
            for (int k = 0; k < per; k++) {
                json_t *m = json_deep_copy(orig);
                const char *what = mutate(m);
                if (rnd(3) == 0) mutate(m); /* sometimes two changes */
                char *text = json_dumps(m, JSON_COMPACT);
                snprintf(nm, sizeof nm, "%s: %s", names[f], what);
                if (text) fails += run_mutant(nm, text);
                free(text);
                json_decref(m);
            }
            json_decref(orig);
            free(names[f]);
        }
        for (int i = 0; i < n; i++) {
            cchan_mem_destroy(g_r[i].send_mem);
            cchan_mem_destroy(g_r[i].recv_mem);
        }
        /* (the communicators are left to process exit: their teardown is collective) */
    }
    if (!plans) {
        printf("SKIP: no *.n2.json or *.n4.json plan in %s\n", argv[1]);
        return 77;
    }
    printf("%d plans, %ld mutants: %ld refused, %ld run correct, %ld wrong data, %ld out of "
           "bounds, %ld hangs, %ld refused at run\n",
           plans, g_mutants, g_refused, g_correct, g_wrong, g_oob, g_hang, g_runerr);
    return fails ? 1 : 0;
}
