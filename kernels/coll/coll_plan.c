/* cchan_coll: execution plans (cchan_exec), the plan entries of the selector's registry. Loading
 * parses plans and records what each applies to; executors are set up (collectively, at load)
 * only for the plans the selector can pick (colli_plan_selectable), since a call must never set
 * anything up: one thread may drive several ranks (NCCL group calls, nccl-tests -g N), and a
 * bootstrap step there waits for a rank the same thread has yet to call. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "coll_internal.h"

#ifdef COLL_HAVE_EXEC
#include "cchan_exec.h"

/* cchan_coll's op and dtype numbering is cchan_exec's: a value crosses unchanged. */
_Static_assert(CCHAN_COLL_ALLREDUCE == (int)CCHAN_EXEC_ALLREDUCE &&
                   CCHAN_COLL_ALLGATHER == (int)CCHAN_EXEC_ALLGATHER &&
                   CCHAN_COLL_REDUCESCATTER == (int)CCHAN_EXEC_REDUCESCATTER &&
                   CCHAN_COLL_ALLTOALL == (int)CCHAN_EXEC_ALLTOALL &&
                   CCHAN_COLL_BROADCAST == (int)CCHAN_EXEC_BROADCAST,
               "cchan_coll_op_t must number the collectives as cchan_exec_collective_t");
_Static_assert(CCHAN_COLL_F32 == (int)CCHAN_EXEC_F32 && CCHAN_COLL_F16 == (int)CCHAN_EXEC_F16 &&
                   CCHAN_COLL_BF16 == (int)CCHAN_EXEC_BF16,
               "cchan_coll_dtype_t must number the dtypes as cchan_exec_dtype_t");

/* The two crossings between the libraries' enums, value by value (no casts between them). */
static cchan_exec_dtype_t exec_dtype(cchan_coll_dtype_t dt) {
    switch (dt) {
    case CCHAN_COLL_F16: return CCHAN_EXEC_F16;
    case CCHAN_COLL_BF16: return CCHAN_EXEC_BF16;
    default: return CCHAN_EXEC_F32; /* (callers pass a dtype cchan_coll_dtype_size accepted) */
    }
}

/* 0 for a CUSTOM plan, which no cchan_coll call runs. */
static int coll_op_of(cchan_exec_collective_t x, cchan_coll_op_t *op) {
    switch (x) {
    case CCHAN_EXEC_ALLREDUCE: *op = CCHAN_COLL_ALLREDUCE; return 1;
    case CCHAN_EXEC_ALLGATHER: *op = CCHAN_COLL_ALLGATHER; return 1;
    case CCHAN_EXEC_REDUCESCATTER: *op = CCHAN_COLL_REDUCESCATTER; return 1;
    case CCHAN_EXEC_ALLTOALL: *op = CCHAN_COLL_ALLTOALL; return 1;
    case CCHAN_EXEC_BROADCAST: *op = CCHAN_COLL_BROADCAST; return 1;
    default: return 0;
    }
}

typedef struct colli_plan {
    cchan_exec_plan_t *plan;
    cchan_exec_t *ex; /* NULL until the selector can pick the plan */
    cchan_exec_plan_info_t info;
    int left_out;    /* the device cannot run it */
    uint64_t digest; /* FNV-1a of the plan file's bytes: what the ranks agree on */
} colli_plan_t;

struct colli_plans {
    colli_plan_t *v;
    int n, cap;
};

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The file's bytes, hashed: two ranks agree on a plan when its file is the same, wherever it is. */
static int file_digest(const char *path, uint64_t *out, const char *where) {
    FILE *f = fopen(path, "rb");
    if (!f) return colli_error(-errno, where, "plan %s: %s", path, strerror(errno));
    uint64_t h = COLLI_FNV_INIT;
    unsigned char buf[4096];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) h = colli_fnv(h, buf, k);
    int err = ferror(f);
    fclose(f);
    if (err) return colli_error(-EIO, where, "plan %s: read error", path);
    *out = h;
    return 0;
}

static int plans_add(cchan_coll_t *c, const char *path, const char *where) {
    colli_plans_t *p = c->plans;
    if (!p && !(p = c->plans = (colli_plans_t *)calloc(1, sizeof *p)))
        return colli_error(-ENOMEM, where, "no memory");
    colli_plan_t e;
    memset(&e, 0, sizeof e);
    int st = cchan_exec_plan_load_file(path, &e.plan);
    if (st < 0) return colli_error(st, where, "%s", cchan_exec_last_error());
    if ((st = file_digest(path, &e.digest, where)) < 0) {
        cchan_exec_plan_free(e.plan);
        return st;
    }
    cchan_exec_plan_info(e.plan, &e.info);
    if (e.info.nranks != c->nranks) {
        st = colli_error(-EINVAL, where, "plan %s (%s) is for %d ranks: the communicator has %d",
                         e.info.name, path, e.info.nranks, c->nranks);
        cchan_exec_plan_free(e.plan);
        return st;
    }
    if (p->n == p->cap) {
        int nc = p->cap ? 2 * p->cap : 8;
        colli_plan_t *t = (colli_plan_t *)realloc(p->v, (size_t)nc * sizeof *t);
        if (!t) {
            cchan_exec_plan_free(e.plan);
            return colli_error(-ENOMEM, where, "no memory");
        }
        p->v = t;
        p->cap = nc;
    }
    p->v[p->n++] = e;
    return 0;
}

int colli_plans_load(cchan_coll_t *c, const char *path, const char *where) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return colli_error(-errno, where, "plans %s: %s (want a directory or a plan file)", path,
                           strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return plans_add(c, path, where);
    DIR *d = opendir(path);
    if (!d) return colli_error(-errno, where, "plan directory %s: %s", path, strerror(errno));
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".n%d.json", c->nranks);
    char **names = NULL;
    int nn = 0, cap = 0, st = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name), sl = strlen(suffix);
        if (l <= sl || strcmp(de->d_name + l - sl, suffix) != 0) continue;
        if (nn == cap) {
            cap = cap ? 2 * cap : 16;
            char **t = (char **)realloc(names, (size_t)cap * sizeof *names);
            if (!t) {
                st = colli_error(-ENOMEM, where, "no memory");
                break;
            }
            names = t;
        }
        if (!(names[nn] = strdup(de->d_name))) {
            st = colli_error(-ENOMEM, where, "no memory");
            break;
        }
        nn++;
    }
    closedir(d);
    if (!st && nn) qsort(names, (size_t)nn, sizeof *names, name_cmp);
    for (int i = 0; i < nn && !st; i++) {
        char file[4096];
        snprintf(file, sizeof file, "%s/%s", path, names[i]);
        st = plans_add(c, file, where);
    }
    for (int i = 0; i < nn; i++) free(names[i]);
    free(names);
    return st;
}

int colli_plans_setup(cchan_coll_t *c, const char *where) {
    colli_plans_t *p = c->plans;
    if (!p) return 0;
    /* the largest input the executors of unbounded plans are set up for (their scratch): read
     * and agreed at create, so that a later load sets up the same executors on every rank */
    uint64_t max_in = (uint64_t)c->plan_max_bytes;
    for (int i = 0; i < p->n; i++) {
        colli_plan_t *e = &p->v[i];
        colli_plan_view_t v;
        colli_plan_view(p, i, &v);
        /* the same decision on every rank: the same plans, table and kind of device */
        if (e->ex || e->left_out || !colli_plan_selectable(c, &v)) continue;
        /* Set up now for every size the plan may be picked for (up to the cap on scratch of
         * unbounded plans), and never grown by a call. A call past the set-up fails
         * cchan_exec_check, and the selector passes over the plan. */
        cchan_exec_config_t xcfg = CCHAN_EXEC_CONFIG_INIT;
        xcfg.flags = CCHAN_EXEC_NO_GROW;
        xcfg.max_bytes =
            e->info.max_bytes && e->info.max_bytes < max_in ? e->info.max_bytes : max_in;
        int st = cchan_exec_create_ex(c->comm, e->plan, &xcfg, &e->ex);
        if (st == CCHAN_ERR_UNSUPPORTED) {
            e->left_out = 1;
            e->ex = NULL;
            continue;
        }
        if (st < 0) {
            e->ex = NULL;
            return colli_error(st, where, "%s", cchan_exec_last_error());
        }
        /* buffers registered before this executor was set up */
        for (coll_reg_t *g = c->regs; g; g = g->next)
            if ((st = cchan_exec_register(e->ex, g->ptr, g->bytes)) < 0)
                return colli_error(st, where, "plan %s: %s", e->info.name, cchan_exec_last_error());
    }
    return 0;
}

void colli_plans_truncate(colli_plans_t *p, int n) {
    for (; p && p->n > n; p->n--) {
        colli_plan_t *e = &p->v[p->n - 1];
        if (e->ex) cchan_exec_destroy(e->ex);
        cchan_exec_plan_free(e->plan);
    }
}

void colli_plans_destroy(colli_plans_t *p) {
    if (!p) return;
    colli_plans_truncate(p, 0);
    free(p->v);
    free(p);
}

void colli_plans_describe(const cchan_coll_t *c, const char *path, colli_agree_item_t *it) {
    const colli_plans_t *p = c->plans;
    if (!path) {
        it->digest = 0;
        snprintf(it->value, sizeof it->value, "none");
        return;
    }
    /* the set in load order (the selector's tie-break), each plan by name and content */
    uint64_t h = colli_fnv_u64(COLLI_FNV_INIT, 1);
    for (int i = 0; p && i < p->n; i++) {
        const char *name = p->v[i].info.name ? p->v[i].info.name : "";
        h = colli_fnv(h, name, strlen(name) + 1);
        h = colli_fnv_u64(h, p->v[i].digest);
    }
    it->digest = h;
    const int n = p ? p->n : 0;
    snprintf(it->value, sizeof it->value, "'%s' (%d plan%s, digest %016llx)", path, n,
             n == 1 ? "" : "s", (unsigned long long)h);
}

int colli_plans_register(colli_plans_t *p, void *ptr, size_t bytes) {
    for (int i = 0; p && i < p->n; i++) {
        if (!p->v[i].ex) continue;
        int st = cchan_exec_register(p->v[i].ex, ptr, bytes);
        if (st < 0)
            return colli_error(st, "cchan_coll_register", "plan %s: %s", p->v[i].info.name,
                               cchan_exec_last_error());
    }
    return 0;
}

int colli_plans_deregister(colli_plans_t *p, void *ptr) {
    int first = 0;
    for (int i = 0; p && i < p->n; i++) {
        if (!p->v[i].ex) continue;
        int st = cchan_exec_deregister(p->v[i].ex, ptr);
        if (st < 0 && st != -ENOENT && !first) first = st;
    }
    return first;
}

int colli_plans_n(const colli_plans_t *p) { return p ? p->n : 0; }

void colli_plan_view(const colli_plans_t *p, int i, colli_plan_view_t *out) {
    const colli_plan_t *e = &p->v[i];
    out->name = e->info.name;
    out->op = CCHAN_COLL_ALLREDUCE;
    out->custom = !coll_op_of(e->info.collective, &out->op);
    out->root = e->info.root;
    out->inplace = e->info.inplace;
    out->min_in = e->info.min_bytes;
    out->max_in = e->info.max_bytes;
    out->granularity = e->info.granularity;
    out->ready = e->ex != NULL;
    out->left_out = e->left_out;
}

int colli_plan_accepts(const colli_plans_t *p, int i, uint64_t in_bytes, int inplace,
                       const void *send, const void *recv, cchan_coll_dtype_t dtype) {
    const colli_plan_t *e = &p->v[i];
    size_t es = cchan_coll_dtype_size(dtype);
    if (!e->ex || !es || in_bytes % es || !cchan_exec_plan_fits(e->plan, in_bytes)) return 0;
    if (!send || !recv) return !e->info.inplace == !inplace;
    return cchan_exec_check(e->ex, send, recv, (size_t)(in_bytes / es), exec_dtype(dtype)) == 0;
}

int colli_plan_run(cchan_coll_t *c, int i, const void *send, void *recv, size_t in_count,
                   cchan_coll_dtype_t dtype, void *stream, const char *where) {
    const colli_plan_t *e = &c->plans->v[i];
    int st = cchan_exec_run(e->ex, send, recv, in_count, exec_dtype(dtype), CCHAN_EXEC_SUM, stream);
    if (st < 0) return colli_error(st, where, "plan %s: %s", e->info.name, cchan_exec_last_error());
    c->last_plan = e->info.name;
    return 0;
}

#else /* no cchan_exec in this build (jansson was missing) */

int colli_plans_load(cchan_coll_t *c, const char *path, const char *where) {
    (void)c;
    return colli_error(CCHAN_ERR_UNSUPPORTED, where,
                       "plans (%s): this build has no cchan_exec (jansson was missing)", path);
}
int colli_plans_setup(cchan_coll_t *c, const char *where) {
    (void)c, (void)where;
    return 0;
}
void colli_plans_destroy(colli_plans_t *p) { (void)p; }
void colli_plans_truncate(colli_plans_t *p, int n) { (void)p, (void)n; }
void colli_plans_describe(const cchan_coll_t *c, const char *path, colli_agree_item_t *it) {
    (void)c;
    it->digest = path ? 1 : 0; /* a load fails on every rank before this is asked */
    snprintf(it->value, sizeof it->value, "%s", path ? "a path" : "none");
}
int colli_plans_register(colli_plans_t *p, void *ptr, size_t bytes) {
    (void)p, (void)ptr, (void)bytes;
    return 0;
}
int colli_plans_deregister(colli_plans_t *p, void *ptr) {
    (void)p, (void)ptr;
    return 0;
}
int colli_plans_n(const colli_plans_t *p) {
    (void)p;
    return 0;
}
void colli_plan_view(const colli_plans_t *p, int i, colli_plan_view_t *out) {
    (void)p, (void)i;
    memset(out, 0, sizeof *out);
}
int colli_plan_accepts(const colli_plans_t *p, int i, uint64_t in_bytes, int inplace,
                       const void *send, const void *recv, cchan_coll_dtype_t dtype) {
    (void)p, (void)i, (void)in_bytes, (void)inplace, (void)send, (void)recv, (void)dtype;
    return 0;
}
int colli_plan_run(cchan_coll_t *c, int i, const void *send, void *recv, size_t in_count,
                   cchan_coll_dtype_t dtype, void *stream, const char *where) {
    (void)c, (void)i, (void)send, (void)recv, (void)in_count, (void)dtype, (void)stream;
    return colli_error(CCHAN_ERR_UNSUPPORTED, where, "this build has no cchan_exec");
}

#endif

/* ------------------------------------------------------------------ public */

int cchan_coll_load_plans(cchan_coll_t *c, const char *path) {
    static const char *where = "cchan_coll_load_plans";
    colli_clear_error();
    if (!c || !path) return colli_error(-EINVAL, where, "coll and path must not be NULL");
    int st = cchan_comm_check(c->comm, where);
    if (st) return st;
    /* a plan one rank cannot read fails every rank now, naming it, not at a later collective; so
     * does a set of plans that differs between the ranks (a folder here, a file there), whose
     * executors would be set up on some ranks only. Either leaves the registry as it was. */
    const int before = colli_plans_n(c->plans);
    int bad = colli_plans_load(c, path, where);
    st = cchan_comm_agree(c->comm, bad, where, bad ? cchan_last_error() : NULL);
    if (!st) {
        colli_agree_item_t it = {.name = "the set of plans"};
        colli_plans_describe(c, path, &it);
        st = colli_agree(c, &it, 1, where);
    }
    if (st) {
        colli_plans_truncate(c->plans, before);
        return bad ? bad : st;
    }
    st = colli_plans_setup(c, where);
    return st < 0 ? st : colli_plans_n(c->plans);
}

const char *cchan_coll_last_plan(const cchan_coll_t *c) { return c ? c->last_plan : NULL; }

const char *cchan_coll_plan_name(const cchan_coll_t *c, cchan_coll_op_t op,
                                 cchan_coll_dtype_t dtype, size_t bytes, const void *send,
                                 const void *recv) {
    if (!c) return NULL;
    cchan_coll_choice_t ch;
    int inplace = send && recv && colli_in_bytes(c, op, bytes) &&
                  (op == CCHAN_COLL_ALLGATHER
                       ? (const char *)send ==
                             (const char *)recv + (size_t)c->rank * colli_in_bytes(c, op, bytes)
                   : op == CCHAN_COLL_REDUCESCATTER
                       ? (const char *)recv ==
                             (const char *)send + (size_t)c->rank * (bytes / (size_t)c->nranks)
                       : send == recv);
    int idx = -1;
    if (colli_choose((cchan_coll_t *)c, op, dtype, bytes, inplace, 0, send, recv, 0, &ch, &idx))
        return NULL;
    return ch.plan;
}

/* AllToAll and Broadcast run on plans only. */
static int plan_only(cchan_coll_t *c, cchan_coll_op_t op, int root, const void *send, void *recv,
                     size_t count, size_t mul, cchan_coll_dtype_t dtype, void *stream,
                     const char *where) {
    colli_clear_error();
    if (!c) return colli_error(-EINVAL, where, "coll is NULL");
    c->last_plan = NULL;
    int st = cchan_comm_check(c->comm, where);
    if (st) return st;
    if (!send || !recv) return colli_error(-EINVAL, where, "send and recv must not be NULL");
    size_t es = cchan_coll_dtype_size(dtype);
    if (!es) return colli_error(-EINVAL, where, "unknown dtype %d", (int)dtype);
    if (count == 0) return 0;
    if (count > SIZE_MAX / es / mul)
        return colli_error(CCHAN_ERR_RANGE, where, "%zu elements of %zu bytes overflow", count, es);
    uint64_t in = (uint64_t)count * es * mul;
    /* AllToAll's send and recv, and Broadcast's recv, hold `in` bytes; none may wrap */
    if (in > UINTPTR_MAX - (uintptr_t)send || in > UINTPTR_MAX - (uintptr_t)recv)
        return colli_error(CCHAN_ERR_RANGE, where,
                           "%llu bytes at send %p or recv %p run past the end of the address "
                           "space",
                           (unsigned long long)in, send, recv);
    int idx = -1;
    st = colli_choose(c, op, dtype, (size_t)in, send == recv, root, send, recv, 1, &c->last_choice,
                      &idx);
    if (st == CCHAN_ERR_UNSUPPORTED || (st == 0 && idx < 0))
        return colli_error(CCHAN_ERR_UNSUPPORTED, where,
                           "no loaded plan runs this call (%llu bytes%s)", (unsigned long long)in,
                           root >= 0 ? ", this root" : "");
    if (st) return st;
    return colli_plan_run(c, idx, send, recv, count * mul, dtype, stream, where);
}

int cchan_coll_alltoall(cchan_coll_t *c, const void *send, void *recv, size_t count,
                        cchan_coll_dtype_t dtype, void *stream) {
    return plan_only(c, CCHAN_COLL_ALLTOALL, -1, send, recv, count, c ? (size_t)c->nranks : 1,
                     dtype, stream, "cchan_coll_alltoall");
}

int cchan_coll_broadcast(cchan_coll_t *c, const void *send, void *recv, size_t count,
                         cchan_coll_dtype_t dtype, int root, void *stream) {
    if (c && (root < 0 || root >= c->nranks))
        return colli_error(-EINVAL, "cchan_coll_broadcast", "root %d: want 0..%d", root,
                           c->nranks - 1);
    return plan_only(c, CCHAN_COLL_BROADCAST, root, send, recv, count, 1, dtype, stream,
                     "cchan_coll_broadcast");
}
