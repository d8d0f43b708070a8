/* cchan_coll: execution plans (cchan_exec) loaded for this communicator, chosen before the native
 * kernels for the (collective, ranks, size) they fit. Loading is collective: every rank reads the
 * same directory, takes the plans for its communicator's size in file-name order and builds an
 * executor for each, so every rank holds the same list and picks alike. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_internal.h"

#ifdef COLL_HAVE_EXEC
#include "cchan_exec.h"

typedef struct colli_plan {
    cchan_exec_plan_t *plan;
    cchan_exec_t *ex;
    cchan_exec_plan_info_t info;
} colli_plan_t;

struct colli_plans {
    cchan_comm_t *comm;
    colli_plan_t *v;
    int n, cap;
};

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The largest input the executors of unbounded plans are set up for (their scratch). */
#define COLL_PLAN_MAX_BYTES_DEFAULT (16ull << 20)

int colli_plans_load(cchan_comm_t *comm, colli_plans_t **pp, const char *dir, const char *where) {
    int nranks = cchan_comm_size(comm);
    uint64_t max_in = COLL_PLAN_MAX_BYTES_DEFAULT;
    const char *cv = getenv("CCHAN_COLL_PLAN_MAX_BYTES");
    if (cv && *cv) {
        char *end = NULL;
        unsigned long long x = strtoull(cv, &end, 0);
        if (*end || cv[0] == '-' || x == 0)
            return colli_error(-EINVAL, where,
                               "CCHAN_COLL_PLAN_MAX_BYTES=%s: want a positive byte count", cv);
        max_in = x;
    }
    DIR *d = opendir(dir);
    if (!d) return colli_error(-errno, where, "plan directory %s: %s", dir, strerror(errno));
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".n%d.json", nranks);
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
    colli_plans_t *p = *pp;
    if (!st && !p) {
        p = (colli_plans_t *)calloc(1, sizeof *p);
        if (!p)
            st = colli_error(-ENOMEM, where, "no memory");
        else {
            p->comm = comm;
            *pp = p;
        }
    }
    for (int i = 0; i < nn && !st; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        colli_plan_t e;
        memset(&e, 0, sizeof e);
        st = cchan_exec_plan_load_file(path, &e.plan);
        if (st < 0) {
            st = colli_error(st, where, "%s", cchan_exec_last_error());
            break;
        }
        cchan_exec_plan_info(e.plan, &e.info);
        /* Set up now for every size the plan may be picked for (up to the cap on scratch of
         * unbounded plans), and never grown by a call: a call must not be collective on the host,
         * since one thread may drive several ranks (NCCL group calls, nccl-tests -g N). A call past
         * the set-up fails cchan_exec_check and runs natively. */
        cchan_exec_config_t xcfg = CCHAN_EXEC_CONFIG_INIT;
        xcfg.flags = CCHAN_EXEC_NO_GROW;
        xcfg.max_bytes = e.info.max_bytes && e.info.max_bytes < max_in ? e.info.max_bytes : max_in;
        st = cchan_exec_create_ex(comm, e.plan, &xcfg, &e.ex);
        if (st == CCHAN_ERR_UNSUPPORTED) {
            /* the same on every rank (the same plan and kind of device): this plan is left out */
            cchan_exec_plan_free(e.plan);
            st = 0;
            continue;
        }
        if (st < 0) {
            cchan_exec_plan_free(e.plan);
            st = colli_error(st, where, "%s", cchan_exec_last_error());
            break;
        }
        if (p->n == p->cap) {
            int nc = p->cap ? 2 * p->cap : 8;
            colli_plan_t *t = (colli_plan_t *)realloc(p->v, (size_t)nc * sizeof *t);
            if (!t) {
                cchan_exec_destroy(e.ex);
                cchan_exec_plan_free(e.plan);
                st = colli_error(-ENOMEM, where, "no memory");
                break;
            }
            p->v = t;
            p->cap = nc;
        }
        p->v[p->n++] = e;
    }
    for (int i = 0; i < nn; i++) free(names[i]);
    free(names);
    return st;
}

void colli_plans_destroy(colli_plans_t *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) {
        cchan_exec_destroy(p->v[i].ex);
        cchan_exec_plan_free(p->v[i].plan);
    }
    free(p->v);
    free(p);
}

int colli_plans_register(colli_plans_t *p, void *ptr, size_t bytes) {
    for (int i = 0; p && i < p->n; i++) {
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
        int st = cchan_exec_deregister(p->v[i].ex, ptr);
        if (st < 0 && st != -ENOENT && !first) first = st;
    }
    return first;
}

static const colli_plan_t *pick(const colli_plans_t *p, cchan_exec_collective_t coll, int root,
                                uint64_t in_bytes, const void *send, const void *recv, size_t count,
                                cchan_exec_dtype_t dt) {
    for (int i = 0; p && i < p->n; i++) {
        const colli_plan_t *e = &p->v[i];
        if (e->info.collective != coll || (coll == CCHAN_EXEC_BROADCAST && e->info.root != root))
            continue;
        if (!cchan_exec_plan_fits(e->plan, in_bytes)) continue;
        if (cchan_exec_check(e->ex, send, recv, count, dt) != 0) continue;
        return e;
    }
    return NULL;
}

static const char *pick_name(const colli_plans_t *p, int coll, int root, uint64_t in_bytes,
                             const void *send, const void *recv, size_t count, int dtype) {
    const colli_plan_t *e = pick(p, (cchan_exec_collective_t)coll, root, in_bytes, send, recv,
                                 count, (cchan_exec_dtype_t)dtype);
    return e ? e->info.name : NULL;
}

int colli_plan_try(cchan_coll_t *c, int coll, int root, uint64_t in_bytes, const void *send,
                   void *recv, size_t in_count, cchan_coll_dtype_t dtype, void *stream,
                   const char *where) {
    c->last_plan = NULL;
    const colli_plan_t *e = pick(c->plans, (cchan_exec_collective_t)coll, root, in_bytes, send,
                                 recv, in_count, (cchan_exec_dtype_t)dtype);
    if (!e) return CCHAN_ERR_UNSUPPORTED;
    int st = cchan_exec_run(e->ex, send, recv, in_count, (cchan_exec_dtype_t)dtype, CCHAN_EXEC_SUM,
                            stream);
    if (st < 0) return colli_error(st, where, "plan %s: %s", e->info.name, cchan_exec_last_error());
    c->last_plan = e->info.name;
    return 0;
}

/* ------------------------------------------------------------------ public */

int cchan_coll_load_plans(cchan_coll_t *c, const char *dir) {
    static const char *where = "cchan_coll_load_plans";
    colli_clear_error();
    if (!c || !dir) return colli_error(-EINVAL, where, "coll and dir must not be NULL");
    int st = cchan_comm_check(c->comm, where);
    if (st) return st;
    int before = c->plans ? c->plans->n : 0;
    st = colli_plans_load(c->comm, &c->plans, dir, where);
    if (st < 0) return st;
    /* buffers registered before these plans were loaded */
    for (coll_reg_t *g = c->regs; g; g = g->next)
        for (int i = before; i < c->plans->n; i++)
            if ((st = cchan_exec_register(c->plans->v[i].ex, g->ptr, g->bytes)) < 0)
                return colli_error(st, where, "plan %s: %s", c->plans->v[i].info.name,
                                   cchan_exec_last_error());
    return c->plans ? c->plans->n : 0;
}

const char *cchan_coll_plan_name(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes,
                                 const void *send, const void *recv) {
    if (!c || !c->plans || (unsigned)op > CCHAN_COLL_REDUCESCATTER) return NULL;
    uint64_t in = op == CCHAN_COLL_ALLGATHER ? bytes / (size_t)c->nranks : bytes;
    /* the plans' sizes are bytes: any element size that divides them names the same call */
    int dt = in % 4 == 0 ? CCHAN_EXEC_F32 : CCHAN_EXEC_F16;
    return pick_name(c->plans, (int)op, -1, in, send, recv, (size_t)(in / (dt ? 2 : 4)), dt);
}

#else /* no cchan_exec in this build (jansson was missing) */

int colli_plans_load(cchan_comm_t *comm, colli_plans_t **plans, const char *dir,
                     const char *where) {
    (void)comm, (void)plans;
    return colli_error(CCHAN_ERR_UNSUPPORTED, where,
                       "plans (%s): this build has no cchan_exec (jansson was missing)", dir);
}
void colli_plans_destroy(colli_plans_t *p) { (void)p; }
int colli_plans_register(colli_plans_t *p, void *ptr, size_t bytes) {
    (void)p, (void)ptr, (void)bytes;
    return 0;
}
int colli_plans_deregister(colli_plans_t *p, void *ptr) {
    (void)p, (void)ptr;
    return 0;
}
int colli_plan_try(cchan_coll_t *c, int coll, int root, uint64_t in_bytes, const void *send,
                   void *recv, size_t in_count, cchan_coll_dtype_t dtype, void *stream,
                   const char *where) {
    (void)coll, (void)root, (void)in_bytes, (void)send, (void)recv, (void)in_count, (void)dtype;
    (void)stream, (void)where;
    c->last_plan = NULL;
    return CCHAN_ERR_UNSUPPORTED;
}
int cchan_coll_load_plans(cchan_coll_t *c, const char *dir) {
    colli_clear_error();
    if (!c || !dir)
        return colli_error(-EINVAL, "cchan_coll_load_plans", "coll and dir must not be NULL");
    return colli_plans_load(c->comm, NULL, dir, "cchan_coll_load_plans");
}
const char *cchan_coll_plan_name(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes,
                                 const void *send, const void *recv) {
    (void)c, (void)op, (void)bytes, (void)send, (void)recv;
    return NULL;
}

#endif

const char *cchan_coll_last_plan(const cchan_coll_t *c) { return c ? c->last_plan : NULL; }

/* AllToAll and Broadcast run on plans only. */
static int plan_only(cchan_coll_t *c, int coll, int root, const void *send, void *recv,
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
    st = colli_plan_try(c, coll, root, in, send, recv, count * mul, dtype, stream, where);
    if (st == CCHAN_ERR_UNSUPPORTED)
        return colli_error(st, where, "no loaded plan runs this call (%llu bytes%s)",
                           (unsigned long long)in, root >= 0 ? ", this root" : "");
    return st;
}

int cchan_coll_alltoall(cchan_coll_t *c, const void *send, void *recv, size_t count,
                        cchan_coll_dtype_t dtype, void *stream) {
    return plan_only(c, 3 /* CCHAN_EXEC_ALLTOALL */, -1, send, recv, count,
                     c ? (size_t)c->nranks : 1, dtype, stream, "cchan_coll_alltoall");
}

int cchan_coll_broadcast(cchan_coll_t *c, const void *send, void *recv, size_t count,
                         cchan_coll_dtype_t dtype, int root, void *stream) {
    if (c && (root < 0 || root >= c->nranks))
        return colli_error(-EINVAL, "cchan_coll_broadcast", "root %d: want 0..%d", root,
                           c->nranks - 1);
    return plan_only(c, 4 /* CCHAN_EXEC_BROADCAST */, root, send, recv, count, 1, dtype, stream,
                     "cchan_coll_broadcast");
}
