/* cchan_coll's selector: one choice for an AUTO call over (collective, ranks, dtype, size, in
 * place) among the registry's algorithms (the native kernels and the loaded plans), from the
 * tuning table where a row holds the call (the least measured time wins), else from the default
 * rule of the GPU generation (coll_select.c). Also the table's parser and the INFO line that says,
 * once per (collective, size, dtype, in place), what ran and why. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include "cchan/env.h"
#include "coll_internal.h"

#define COLL_NOPS 5 /* cchan_coll_op_t */

static const char *const op_names[COLL_NOPS] = {"allreduce", "allgather", "reducescatter",
                                                "alltoall", "broadcast"};
static const char *const dtype_names[3] = {"f32", "f16", "bf16"};

static const char *op_name(cchan_coll_op_t op) {
    return (unsigned)op < COLL_NOPS ? op_names[op] : "unknown";
}

/* ------------------------------------------------------------------ the table */

typedef struct colli_tune_row {
    cchan_coll_op_t op;
    int nranks;                    /* 0: any */
    int dtype;                     /* -1: any */
    int inplace;                   /* -1: any */
    uint64_t min_bytes, max_bytes; /* as cchan_coll_select takes them, inclusive */
    cchan_coll_algo_t algo;        /* a native algorithm, or CCHAN_COLL_PLAN */
    char *plan;                    /* CCHAN_COLL_PLAN: the plan's name */
    double us;                     /* measured time */
    int line;
} colli_tune_row_t;

struct colli_tuning {
    char *path;
    colli_tune_row_t *rows;
    int n;
    uint64_t digest; /* FNV-1a of the meaningful lines' fields: what the ranks agree on */
};

void colli_tuning_free(colli_tuning_t *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) free(t->rows[i].plan);
    free(t->rows);
    free(t->path);
    free(t);
}

static int tune_err(const char *where, const char *path, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static int tune_err(const char *where, const char *path, int line, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return colli_error(-EINVAL, where, "tuning table %s:%d: %s", path, line, msg);
}

static int parse_u64(const char *s, uint64_t *out) {
    if (!strcmp(s, "inf")) {
        *out = UINT64_MAX;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    if (*s < '0' || *s > '9') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

/* One row: op ranks dtype inplace min_bytes max_bytes algorithm us */
static int parse_row(char **f, const char *path, int line, colli_tune_row_t *r, const char *where) {
    memset(r, 0, sizeof *r);
    r->line = line;
    r->op = (cchan_coll_op_t)-1;
    for (int o = 0; o < COLL_NOPS; o++)
        if (!strcmp(f[0], op_names[o])) r->op = (cchan_coll_op_t)o;
    if ((int)r->op < 0)
        return tune_err(where, path, line,
                        "collective '%s': want allreduce, allgather, reducescatter, alltoall or "
                        "broadcast",
                        f[0]);
    char *end = NULL;
    long nr = strtol(f[1], &end, 10);
    if (!strcmp(f[1], "*"))
        r->nranks = 0;
    else if (*end || nr < 1 || nr > COLL_MAX_RANKS)
        return tune_err(where, path, line, "ranks '%s': want 1..%d or *", f[1], COLL_MAX_RANKS);
    else
        r->nranks = (int)nr;
    r->dtype = -2;
    if (!strcmp(f[2], "*")) r->dtype = -1;
    for (int d = 0; d < 3; d++)
        if (!strcmp(f[2], dtype_names[d])) r->dtype = d;
    if (r->dtype == -2)
        return tune_err(where, path, line, "dtype '%s': want f32, f16, bf16 or *", f[2]);
    if (!strcmp(f[3], "*"))
        r->inplace = -1;
    else if (!strcmp(f[3], "0") || !strcmp(f[3], "1"))
        r->inplace = f[3][0] - '0';
    else
        return tune_err(where, path, line, "inplace '%s': want 0, 1 or *", f[3]);
    if (parse_u64(f[4], &r->min_bytes) || parse_u64(f[5], &r->max_bytes) ||
        r->max_bytes < r->min_bytes)
        return tune_err(
            where, path, line,
            "sizes '%s' '%s': want min_bytes <= max_bytes, integers (max: inf for none)", f[4],
            f[5]);
    if (!strncmp(f[6], "plan:", 5) && f[6][5]) {
        r->algo = CCHAN_COLL_PLAN;
        if (!(r->plan = strdup(f[6] + 5))) return colli_error(-ENOMEM, where, "no memory");
    } else {
        r->algo = CCHAN_COLL_AUTO;
        for (int a = 1; a < CCHAN_COLL_ALGO_COUNT; a++)
            if (!strcmp(f[6], cchan_coll_algo_name((cchan_coll_algo_t)a)))
                r->algo = (cchan_coll_algo_t)a;
        if (r->algo == CCHAN_COLL_AUTO)
            return tune_err(where, path, line,
                            "algorithm '%s': want ll_allpairs, hb_allpairs, switch, ce_allpairs "
                            "or plan:<name>",
                            f[6]);
    }
    r->us = strtod(f[7], &end);
    if (*end || !isfinite(r->us) || r->us < 0)
        return tune_err(where, path, line, "time '%s': want microseconds, a number >= 0", f[7]);
    return 0;
}

#define TUNE_MAGIC "cchan-coll-tuning"

int colli_tuning_parse(const char *path, colli_tuning_t **out, const char *where) {
    FILE *fp = fopen(path, "r");
    if (!fp) return colli_error(-errno, where, "tuning table %s: %s", path, strerror(errno));
    colli_tuning_t *t = (colli_tuning_t *)calloc(1, sizeof *t);
    int st = t && (t->path = strdup(path)) ? 0 : colli_error(-ENOMEM, where, "no memory");
    char buf[1024];
    int line = 0, seen_magic = 0, cap = 0;
    uint64_t h = COLLI_FNV_INIT; /* of the meaningful lines: comments and spacing do not count */
    while (!st && fgets(buf, sizeof buf, fp)) {
        line++;
        char *hash_at = strchr(buf, '#');
        if (hash_at) *hash_at = '\0';
        char *f[9];
        int nf = 0;
        for (char *save = NULL, *tok = strtok_r(buf, " \t\r\n", &save); tok;
             tok = strtok_r(NULL, " \t\r\n", &save)) {
            if (nf == 9) break;
            f[nf++] = tok;
        }
        if (nf == 0) continue;
        for (int i = 0; i < nf; i++) {
            for (const char *q = f[i]; *q; q++) h = (h ^ (uint8_t)*q) * 1099511628211ull;
            h = (h ^ ' ') * 1099511628211ull;
        }
        if (!seen_magic) {
            if (nf != 2 || strcmp(f[0], TUNE_MAGIC) || strcmp(f[1], "1"))
                st = tune_err(where, path, line, "want the header '" TUNE_MAGIC " 1' first");
            seen_magic = 1;
            continue;
        }
        if (nf != 8) {
            st = tune_err(where, path, line,
                          "%d fields: want 8 (collective ranks dtype inplace min_bytes max_bytes "
                          "algorithm us)",
                          nf);
            break;
        }
        if (t->n == cap) {
            cap = cap ? 2 * cap : 32;
            colli_tune_row_t *nr = (colli_tune_row_t *)realloc(t->rows, (size_t)cap * sizeof *nr);
            if (!nr) {
                st = colli_error(-ENOMEM, where, "no memory");
                break;
            }
            t->rows = nr;
        }
        st = parse_row(f, path, line, &t->rows[t->n], where);
        if (!st) t->n++;
    }
    if (!st && ferror(fp)) st = colli_error(-EIO, where, "tuning table %s: read error", path);
    if (!st && !seen_magic)
        st = tune_err(where, path, line, "empty: want the header '" TUNE_MAGIC " 1'");
    fclose(fp);
    if (st) {
        colli_tuning_free(t);
        return st;
    }
    t->digest = h;
    *out = t;
    return 0;
}

void colli_tuning_describe(const colli_tuning_t *t, colli_agree_item_t *it) {
    if (!t) {
        it->digest = 0;
        snprintf(it->value, sizeof it->value, "none");
        return;
    }
    it->digest = colli_fnv_u64(colli_fnv_u64(COLLI_FNV_INIT, 1), t->digest);
    snprintf(it->value, sizeof it->value, "'%s' (%d row%s, digest %016llx)", t->path, t->n,
             t->n == 1 ? "" : "s", (unsigned long long)it->digest);
}

int colli_tuning_load(cchan_coll_t *c, const char *path, const char *where) {
    colli_tuning_t *t = NULL;
    int bad = path ? colli_tuning_parse(path, &t, where) : 0;
    int st = cchan_comm_agree(c->comm, bad, where, bad ? cchan_last_error() : NULL);
    if (st) {
        colli_tuning_free(t);
        return bad ? bad : st;
    }
    /* Ranks that chose differently would wait for each other in different algorithms: every rank
     * must read the same rows (the table before stays on every rank when they do not). */
    colli_agree_item_t it = {.name = "tuning table"};
    colli_tuning_describe(t, &it);
    if ((st = colli_agree(c, &it, 1, where)) < 0) {
        colli_tuning_free(t);
        return st;
    }
    colli_tuning_free(c->tuning);
    c->tuning = t;
    return 0;
}

static int row_holds(const cchan_coll_t *c, const colli_tune_row_t *r, cchan_coll_op_t op,
                     cchan_coll_dtype_t dtype, size_t bytes, int inplace) {
    return r->op == op && (r->nranks == 0 || r->nranks == c->nranks) &&
           (r->dtype < 0 || r->dtype == (int)dtype) &&
           (r->inplace < 0 || r->inplace == !!inplace) && (uint64_t)bytes >= r->min_bytes &&
           (uint64_t)bytes <= r->max_bytes;
}

/* ------------------------------------------------------------------ the registry */

static int plan_index(const cchan_coll_t *c, const char *name) {
    for (int i = 0; i < colli_plans_n(c->plans); i++) {
        colli_plan_view_t v;
        colli_plan_view(c->plans, i, &v);
        if (!strcmp(v.name, name)) return i;
    }
    return -1;
}

int colli_plan_selectable(const cchan_coll_t *c, const colli_plan_view_t *v) {
    if (v->custom || v->left_out) return 0;
    if (v->op == CCHAN_COLL_ALLTOALL || v->op == CCHAN_COLL_BROADCAST) return 1;
    for (int i = 0; c->tuning && i < c->tuning->n; i++) {
        const colli_tune_row_t *r = &c->tuning->rows[i];
        if (r->algo == CCHAN_COLL_PLAN && r->op == v->op &&
            (r->nranks == 0 || r->nranks == c->nranks) && !strcmp(r->plan, v->name))
            return 1;
    }
    return 0;
}

uint64_t colli_in_bytes(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes) {
    return op == CCHAN_COLL_ALLGATHER ? bytes / (size_t)c->nranks : bytes;
}

/* Whether plan i runs the call (its collective, root, size, in place, buffers when given). */
static int plan_runs(const cchan_coll_t *c, int i, cchan_coll_op_t op, cchan_coll_dtype_t dtype,
                     size_t bytes, int inplace, int root, const void *send, const void *recv) {
    colli_plan_view_t v;
    colli_plan_view(c->plans, i, &v);
    if (v.custom || v.op != op || (op == CCHAN_COLL_BROADCAST && v.root != root)) return 0;
    if (op == CCHAN_COLL_ALLGATHER && bytes % (size_t)c->nranks) return 0;
    return colli_plan_accepts(c->plans, i, colli_in_bytes(c, op, bytes), inplace, send, recv,
                              dtype);
}

/* ------------------------------------------------------------------ the INFO line */

static int g_log_info = -1;
static pthread_once_t g_log_once = PTHREAD_ONCE_INIT;
static void log_init(void) {
    const char *l = NULL;
    (void)cchan_env_get_str("CCHAN_DEBUG", &l); /* any text is accepted: never fails */
    g_log_info = l && (!strcasecmp(l, "INFO") || !strcasecmp(l, "TRACE"));
}

/* (op, dtype, in place, bytes) already logged: an open-addressing set of keys + 1. */
struct colli_seen {
    uint64_t *k;
    size_t cap, n;
};

void colli_seen_free(struct colli_seen *s) {
    if (!s) return;
    free(s->k);
    free(s);
}

static uint64_t seen_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    return k ^ (k >> 33);
}

/* 1 when key is new (and now recorded), 0 when seen before or out of memory. */
static int seen_add(struct colli_seen **sp, uint64_t key) {
    struct colli_seen *s = *sp;
    if (!s && !(s = *sp = (struct colli_seen *)calloc(1, sizeof *s))) return 0;
    if (2 * (s->n + 1) > s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 64;
        uint64_t *nk = (uint64_t *)calloc(nc, sizeof *nk);
        if (!nk) return 0;
        for (size_t i = 0; i < s->cap; i++)
            if (s->k[i])
                for (size_t j = seen_hash(s->k[i]) & (nc - 1);; j = (j + 1) & (nc - 1))
                    if (!nk[j]) {
                        nk[j] = s->k[i];
                        break;
                    }
        free(s->k);
        s->k = nk;
        s->cap = nc;
    }
    for (size_t j = seen_hash(key) & (s->cap - 1);; j = (j + 1) & (s->cap - 1)) {
        if (s->k[j] == key) return 0;
        if (!s->k[j]) {
            s->k[j] = key;
            s->n++;
            return 1;
        }
    }
}

static void log_choice(cchan_coll_t *c, cchan_coll_op_t op, cchan_coll_dtype_t dtype, size_t bytes,
                       int inplace, const cchan_coll_choice_t *ch) {
    pthread_once(&g_log_once, log_init);
    if (!g_log_info) return;
    uint64_t key = (((uint64_t)bytes << 7) | ((uint64_t)op << 3) | ((uint64_t)dtype << 1) |
                    (uint64_t) !!inplace) +
                   1;
    if (!seen_add(&c->seen, key)) return;
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    /* one write per line, so that ranks and threads do not interleave */
    fprintf(stderr, "%s:%d:%ld.%06ld cchan INFO coll: rank %d/%d: %s %zu B %s %s -> %s %s (%s)\n",
            host, (int)getpid(), (long)tv.tv_sec, (long)tv.tv_usec, c->rank, c->nranks, op_name(op),
            bytes, (unsigned)dtype < 3 ? dtype_names[dtype] : "?",
            inplace ? "in place" : "out of place", ch->plan ? "plan" : "native",
            ch->plan ? ch->plan : cchan_coll_algo_name(ch->algo), ch->why);
}

/* ------------------------------------------------------------------ the selector */

int colli_choose(cchan_coll_t *c, cchan_coll_op_t op, cchan_coll_dtype_t dtype, size_t bytes,
                 int inplace, int root, const void *send, const void *recv, int log,
                 cchan_coll_choice_t *out, int *plan_idx) {
    memset(out, 0, sizeof *out);
    *plan_idx = -1;
    /* 1. the table: of the rows holding the call whose algorithm runs it, the fastest */
    const colli_tune_row_t *best = NULL;
    int nhold = 0, best_idx = -1;
    for (int i = 0; c->tuning && i < c->tuning->n; i++) {
        const colli_tune_row_t *r = &c->tuning->rows[i];
        if (!row_holds(c, r, op, dtype, bytes, inplace)) continue;
        nhold++;
        int idx = -1;
        if (r->algo == CCHAN_COLL_PLAN) {
            idx = plan_index(c, r->plan);
            if (idx < 0 || !plan_runs(c, idx, op, dtype, bytes, inplace, root, send, recv))
                continue;
        } else if (!colli_native_runs(c, op, r->algo, bytes, send, recv)) {
            continue;
        }
        if (!best || r->us < best->us) {
            best = r;
            best_idx = idx;
        }
    }
    if (best) {
        out->algo = best->algo;
        out->from_table = 1;
        if (best_idx >= 0) {
            colli_plan_view_t v;
            colli_plan_view(c->plans, best_idx, &v);
            out->plan = v.name;
            *plan_idx = best_idx;
        }
        snprintf(out->why, sizeof out->why,
                 "table %s:%d, %.3g us, the fastest of %d row%s holding it", c->tuning->path,
                 best->line, best->us, nhold, nhold == 1 ? "" : "s");
    } else if (op <= CCHAN_COLL_REDUCESCATTER) {
        /* 2. the default rule: the native kernels, which rank above every plan */
        char why[200];
        out->algo = colli_default_native(c, op, bytes, send, recv, why, sizeof why);
        snprintf(out->why, sizeof out->why, "%s%s", why,
                 nhold ? "; no table row holding it can run it" : "");
    } else {
        /* no native kernel: the fitting plan of the narrowest size range, then load order */
        uint64_t width = 0;
        int nfit = 0;
        for (int i = 0; i < colli_plans_n(c->plans); i++) {
            if (!plan_runs(c, i, op, dtype, bytes, inplace, root, send, recv)) continue;
            colli_plan_view_t v;
            colli_plan_view(c->plans, i, &v);
            uint64_t w = (v.max_in ? v.max_in : UINT64_MAX) - v.min_in;
            nfit++;
            if (*plan_idx < 0 || w < width) {
                *plan_idx = i;
                width = w;
                out->plan = v.name;
            }
        }
        if (*plan_idx < 0) return CCHAN_ERR_UNSUPPORTED;
        out->algo = CCHAN_COLL_PLAN;
        snprintf(out->why, sizeof out->why,
                 "default rule: no native %s; the narrowest size range of %d fitting plan%s",
                 op_name(op), nfit, nfit == 1 ? "" : "s");
    }
    if (log) log_choice(c, op, dtype, bytes, inplace, out);
    return 0;
}

/* ------------------------------------------------------------------ public */

int cchan_coll_load_tuning(cchan_coll_t *c, const char *path) {
    static const char *where = "cchan_coll_load_tuning";
    colli_clear_error();
    if (!c) return colli_error(-EINVAL, where, "coll is NULL");
    int st = cchan_comm_check(c->comm, where);
    if (st) return st;
    if ((st = colli_tuning_load(c, path, where)) < 0) return st;
    /* the plans the table names: set up now, so that no call has to */
    if ((st = colli_plans_setup(c, where)) < 0) return st;
    return c->tuning ? c->tuning->n : 0;
}

int cchan_coll_choose(const cchan_coll_t *cc, cchan_coll_op_t op, cchan_coll_dtype_t dtype,
                      size_t bytes, int inplace, int root, const void *send, const void *recv,
                      cchan_coll_choice_t *out) {
    static const char *where = "cchan_coll_choose";
    colli_clear_error();
    cchan_coll_t *c = (cchan_coll_t *)cc; /* only the log's seen set changes, and not here */
    if (!c || !out) return colli_error(-EINVAL, where, "coll and out must not be NULL");
    if ((unsigned)op >= COLL_NOPS)
        return colli_error(-EINVAL, where,
                           "op %d is not a collective (valid: 0 CCHAN_COLL_ALLREDUCE to 4 "
                           "CCHAN_COLL_BROADCAST)",
                           (int)op);
    if (!cchan_coll_dtype_size(dtype))
        return colli_error(-EINVAL, where,
                           "dtype %d unknown (valid: %d CCHAN_COLL_F32, %d CCHAN_COLL_F16, %d "
                           "CCHAN_COLL_BF16)",
                           (int)dtype, CCHAN_COLL_F32, CCHAN_COLL_F16, CCHAN_COLL_BF16);
    if (op == CCHAN_COLL_BROADCAST && (root < 0 || root >= c->nranks))
        return colli_error(-EINVAL, where, "root %d: want 0..%d", root, c->nranks - 1);
    int idx;
    int st = colli_choose(c, op, dtype, bytes, inplace, root, send, recv, 0, out, &idx);
    if (st == CCHAN_ERR_UNSUPPORTED)
        return colli_error(st, where, "no loaded plan runs %s of %zu bytes", op_name(op), bytes);
    return st;
}

int cchan_coll_last_choice(const cchan_coll_t *c, cchan_coll_choice_t *out) {
    colli_clear_error();
    if (!c || !out)
        return colli_error(-EINVAL, "cchan_coll_last_choice", "coll and out must not be NULL");
    *out = c->last_choice;
    return 0;
}

int cchan_coll_algos(const cchan_coll_t *c, cchan_coll_algo_info_t *out, int max) {
    colli_clear_error();
    if (!c || (max > 0 && !out))
        return colli_error(-EINVAL, "cchan_coll_algos",
                           "coll must not be NULL, out not NULL "
                           "when max > 0");
    static const struct {
        cchan_coll_op_t op;
        cchan_coll_algo_t algo;
    } native[] = {
        {CCHAN_COLL_ALLREDUCE, CCHAN_COLL_LL_ALLPAIRS},
        {CCHAN_COLL_ALLREDUCE, CCHAN_COLL_HB_ALLPAIRS},
        {CCHAN_COLL_ALLREDUCE, CCHAN_COLL_SWITCH},
        {CCHAN_COLL_ALLREDUCE, CCHAN_COLL_CE_ALLPAIRS},
        {CCHAN_COLL_ALLGATHER, CCHAN_COLL_LL_ALLPAIRS},
        {CCHAN_COLL_ALLGATHER, CCHAN_COLL_HB_ALLPAIRS},
        {CCHAN_COLL_ALLGATHER, CCHAN_COLL_CE_ALLPAIRS},
        {CCHAN_COLL_REDUCESCATTER, CCHAN_COLL_LL_ALLPAIRS},
        {CCHAN_COLL_REDUCESCATTER, CCHAN_COLL_HB_ALLPAIRS},
    };
    const int nn = (int)(sizeof native / sizeof native[0]);
    const int np = colli_plans_n(c->plans);
    for (int i = 0; i < nn + np && i < max; i++) {
        cchan_coll_algo_info_t *o = &out[i];
        memset(o, 0, sizeof *o);
        o->nranks = c->nranks;
        o->dtypes = 7u; /* f32, f16, bf16 */
        if (i < nn) {
            o->name = cchan_coll_algo_name(native[i].algo);
            o->algo = native[i].algo;
            o->op = native[i].op;
            o->root = -1;
            o->inplace = -1;
            /* LL: within its scratch slots (cchan_coll_supported) */
            uint64_t hi = 0;
            if (native[i].algo == CCHAN_COLL_LL_ALLPAIRS) {
                hi = c->base.ll_slot / 2;
                if (native[i].op != CCHAN_COLL_ALLREDUCE) hi *= (uint64_t)c->nranks;
            }
            o->max_bytes = hi;
            o->granularity = 1;
            o->ready = 1;
        } else {
            colli_plan_view_t v;
            colli_plan_view(c->plans, i - nn, &v);
            uint64_t mul = v.op == CCHAN_COLL_ALLGATHER ? (uint64_t)c->nranks : 1;
            o->name = v.name;
            o->algo = CCHAN_COLL_PLAN;
            o->op = v.op;
            o->root = v.root;
            o->inplace = v.inplace;
            o->min_bytes = v.min_in * mul;
            o->max_bytes = v.max_in * mul;
            o->granularity = v.granularity * mul;
            o->ready = v.ready;
        }
    }
    return nn + np;
}
