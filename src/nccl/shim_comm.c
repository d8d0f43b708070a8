/* libcchan_nccl: unique ids, communicators, groups, window registration (queries and memory:
 * shim_query.c).
 *
 * An ncclUniqueId is a cchan unique id. Initialisation bootstraps a cchan communicator with it,
 * then (when every rank loaded a fallback NCCL) rank 0 creates the fallback's own unique id and
 * sends it over that bootstrap, so both communicators exist on every rank: the cchan one for the
 * collectives cchan implements, the fallback's for everything else.
 *
 * Several ranks of one process (ncclCommInitAll, or ncclCommInitRank per GPU inside a group, as
 * nccl-tests -g N does) cannot bootstrap from one thread, so initialisations inside a group are
 * recorded and run at ncclGroupEnd, one thread per communicator. For the same reason the cchan side
 * of such communicators (whose teardown is collective) is destroyed when the last of them is.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cchan/env.h"
#include "shim.h"

/* ------------------------------------------------------------------ comm handles */

/* Guards every communicator's magic, calls, calls_real, dying, waiters and the graveyard; the
 * condition wakes teardowns waiting for calls to drain. One lock for all: taken twice per call,
 * never across a call's work. */
static pthread_mutex_t handle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t handle_drained = PTHREAD_COND_INITIALIZER;

/* Dead handles, oldest first. Their memory is reused by new communicators only once more than
 * SHIM_GRAVEYARD of them wait, so that a stale handle keeps failing cleanly for a long while and
 * the memory kept stays bounded (a few hundred bytes each). */
#define SHIM_GRAVEYARD 64
static struct ncclComm *dead_first, *dead_last;
static int ndead;

static uint64_t magic_of(ncclComm_t comm) {
    return __atomic_load_n(&comm->magic, __ATOMIC_ACQUIRE);
}

static ncclResult_t dying_error(ncclComm_t comm, const char *where) {
    if (comm->dying == SHIM_ABORTING)
        return shim_fail(ncclRemoteError, "%s: comm (rank %d) was aborted (ncclCommAbort)", where,
                         comm->rank);
    return shim_fail(ncclInvalidUsage, "%s: comm (rank %d) is being destroyed (ncclCommDestroy)",
                     where, comm->rank);
}

/* Holds comm for call; live: refuses a communicator whose teardown has begun. */
static ncclResult_t comm_enter(shim_call_t *call, ncclComm_t comm, int live, const char *where) {
    if (call->comm) return ncclSuccess; /* held since an earlier check of this call */
    if (!comm) return shim_fail(ncclInvalidArgument, "%s: comm is NULL", where);
    pthread_mutex_lock(&handle_lock);
    ncclResult_t res = ncclSuccess;
    uint64_t magic = magic_of(comm);
    if (magic == SHIM_COMM_DEAD)
        res = shim_fail(ncclInvalidArgument,
                        "%s: comm %p was destroyed or aborted (a handle is dead once "
                        "ncclCommDestroy or ncclCommAbort returns)",
                        where, (void *)comm);
    else if (magic != SHIM_COMM_MAGIC)
        res =
            shim_fail(ncclInvalidArgument, "%s: comm %p is not a live communicator of this library",
                      where, (void *)comm);
    else if (comm->closed)
        res = shim_fail(ncclInvalidUsage, "%s: comm (rank %d) is being %s", where, comm->rank,
                        comm->dying == SHIM_ABORTING ? "aborted (ncclCommAbort)"
                                                     : "destroyed (ncclCommDestroy)");
    else if (live && comm->dying)
        res = dying_error(comm, where);
    if (res == ncclSuccess) {
        comm->calls++;
        call->comm = comm;
    }
    pthread_mutex_unlock(&handle_lock);
    return res;
}

void shim_leave(shim_call_t *call) {
    struct ncclComm *c = call->comm;
    if (!c) return;
    pthread_mutex_lock(&handle_lock);
    c->calls--;
    if (call->in_real) c->calls_real--;
    if (c->waiters) pthread_cond_broadcast(&handle_drained);
    pthread_mutex_unlock(&handle_lock);
    call->comm = NULL;
}

ncclResult_t shim_check_comm(shim_call_t *call, ncclComm_t comm, const char *where) {
    ncclResult_t res = comm_enter(call, comm, 0, where);
    if (res != ncclSuccess) return res;
    if (comm->init_error != ncclSuccess)
        return shim_fail(comm->init_error, "%s: comm (rank %d) failed to initialise", where,
                         comm->rank);
    return ncclSuccess;
}

ncclResult_t shim_check_live(shim_call_t *call, ncclComm_t comm, const char *where) {
    ncclResult_t res = comm_enter(call, comm, 1, where);
    if (res != ncclSuccess) return res;
    if (comm->init_error != ncclSuccess)
        return shim_fail(comm->init_error, "%s: comm (rank %d) failed to initialise", where,
                         comm->rank);
    if (!comm->cc) return ncclSuccess;
    int rc = cchan_comm_check(comm->cc, where);
    return rc ? shim_fail_cchan(rc, where) : ncclSuccess;
}

ncclResult_t shim_enter_real(shim_call_t *call, const char *where) {
    struct ncclComm *c = call->comm;
    if (!c || call->in_real) return ncclSuccess;
    ncclResult_t res = ncclSuccess;
    pthread_mutex_lock(&handle_lock);
    if (c->dying) {
        res = dying_error(c, where);
    } else {
        c->calls_real++;
        call->in_real = 1;
    }
    pthread_mutex_unlock(&handle_lock);
    return res;
}

/* A communicator of the fallback NCCL itself, not one of this library's. Such handles arrive when
 * the fallback was already loaded into the global scope before this shim loaded it (a framework
 * preloading its own copy), so that the fallback's internal calls to its exported functions bind
 * to this shim's exports: NCCL's argument checks call ncclCommGetAsyncError on its own handle. A
 * dead handle of this library is not one: its memory is kept and says so. */
int shim_foreign_comm(ncclComm_t comm) {
    if (!comm) return 0;
    uint64_t magic = magic_of(comm);
    return magic != SHIM_COMM_MAGIC && magic != SHIM_COMM_DEAD && shim_real() != NULL;
}

ncclResult_t shim_real_comm(shim_call_t *call, ncclComm_t comm, const char *where,
                            const shim_real_t **r, ncclComm_t *real) {
    ncclResult_t res = shim_check_live(call, comm, where);
    if (res != ncclSuccess) return res;
    const shim_real_t *lib = shim_real();
    if (!lib || !comm->real)
        return shim_fail(ncclInvalidUsage,
                         "%s: not implemented by cchan for these arguments and no fallback NCCL "
                         "communicator exists (%s)",
                         where, lib ? "a rank had no fallback NCCL at init" : shim_real_why());
    res = shim_enter_real(call, where);
    if (res != ncclSuccess) return res;
    *r = lib;
    *real = comm->real;
    return ncclSuccess;
}

static struct ncclComm *comm_new(int rank, int nranks, int device) {
    struct ncclComm *c = NULL;
    pthread_mutex_lock(&handle_lock);
    if (ndead > SHIM_GRAVEYARD) {
        c = dead_first;
        dead_first = c->next_dead;
        if (!dead_first) dead_last = NULL;
        ndead--;
    }
    pthread_mutex_unlock(&handle_lock);
    if (c) {
        memset(c, 0, sizeof *c);
    } else {
        c = calloc(1, sizeof *c);
        if (!c) return NULL;
    }
    c->rank = rank;
    c->nranks = nranks;
    c->device = device;
    __atomic_store_n(&c->magic, SHIM_COMM_MAGIC, __ATOMIC_RELEASE);
    return c;
}

/* Marks c dead (no call holds it, or can: its teardown has drained them). */
static void comm_kill(struct ncclComm *c) {
    pthread_mutex_lock(&handle_lock);
    __atomic_store_n(&c->magic, SHIM_COMM_DEAD, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&handle_drained); /* a second abort waits for this (teardown_again) */
    pthread_mutex_unlock(&handle_lock);
}

/* Releases the wrapper of a dead (or never handed out) communicator into the graveyard. */
static void comm_release(struct ncclComm *c) {
    free(c->windows);
    c->windows = NULL;
    c->nwindows = 0;
    pthread_mutex_lock(&handle_lock);
    __atomic_store_n(&c->magic, SHIM_COMM_DEAD, __ATOMIC_RELEASE);
    c->next_dead = NULL;
    if (dead_last)
        dead_last->next_dead = c;
    else
        dead_first = c;
    dead_last = c;
    ndead++;
    pthread_cond_broadcast(&handle_drained);
    pthread_mutex_unlock(&handle_lock);
}

/* 1: this rank wants the cchan paths, 0: not (why says so), -1: a variable is malformed (why holds
 * the message). CCHAN_NCCL_HOST_PLATFORM=1 (tests): cchan communicators on the host platform, whose
 * collectives take host memory and return when done. */
static int cchan_paths_wanted(char *why, size_t n, int *host) {
    int off = 0;
    if (cchan_env_get_bool("CCHAN_NCCL_DISABLE", &off) ||
        cchan_env_get_bool("CCHAN_NCCL_HOST_PLATFORM", host)) {
        snprintf(why, n, "%s", cchan_last_error());
        return -1;
    }
    if (off) {
        snprintf(why, n, "CCHAN_NCCL_DISABLE is set");
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ cliques */

/* The communicators of this process created from one unique id. */
struct pending_op;
struct shim_clique {
    shim_clique_t *next;
    ncclUniqueId id;
    int members, destroyed;
    struct ncclComm **comms; /* destroyed members, whose cchan side waits for the last one */
    struct pending_op *wops; /* window (de)registrations waiting for the other local members */
    int nwops;
};

static pthread_mutex_t clique_lock = PTHREAD_MUTEX_INITIALIZER;
static shim_clique_t *cliques;

static int clique_join(struct ncclComm *c, const ncclUniqueId *id) {
    pthread_mutex_lock(&clique_lock);
    shim_clique_t *q = cliques;
    while (q && memcmp(&q->id, id, sizeof *id)) q = q->next;
    if (!q) {
        q = calloc(1, sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&clique_lock);
            return -1;
        }
        q->id = *id;
        q->next = cliques;
        cliques = q;
    }
    q->members++;
    c->clique = q;
    pthread_mutex_unlock(&clique_lock);
    return 0;
}

/* The cchan side's teardown. Its barrier is collective; on an aborted communicator (this rank's
 * ncclCommAbort, or a peer's) it ends at once with the abort's error, and the rest is local: then
 * everything is released all the same and the error is not reported, as the abort already was. */
static void *cchan_side_destroy(void *arg) {
    struct ncclComm *c = arg;
    int aborted = c->cc && cchan_comm_check(c->cc, "ncclCommDestroy") != 0;
    int rc = 0;
    if (c->coll) {
        rc = cchan_coll_destroy(c->coll); /* releases the coll object even when it fails */
        if (rc && !aborted) shim_fail_coll(rc, "ncclCommDestroy: cchan_coll_destroy");
    }
    if (c->cc) {
        aborted = aborted || cchan_comm_check(c->cc, "ncclCommDestroy") != 0;
        pthread_mutex_lock(&handle_lock);
        cchan_comm_t *cc = c->cc;
        c->cc = NULL; /* no abort of another thread (teardown_again) reaches it any more */
        pthread_mutex_unlock(&handle_lock);
        int st = cchan_comm_destroy(cc);
        if (st && !rc) {
            shim_fail_cchan(st, "ncclCommDestroy: cchan_comm_destroy");
            rc = st;
        }
    } else if (c->bs) {
        int st = cchan_bootstrap_destroy(c->bs);
        if (st && !rc) {
            shim_fail_cchan(st, "ncclCommDestroy: cchan_bootstrap_destroy");
            rc = st;
        }
    }
    c->coll = NULL;
    c->bs = NULL;
    if (aborted) {
        SHIM_INFO("rank %d: the cchan side of an aborted communicator released", c->rank);
        rc = 0;
    }
    return (void *)(intptr_t)rc;
}

/* Destroys the cchan side of comm now or, for a clique of several local members, together with
 * the others when the last is destroyed (their teardown is collective). Marks comm dead and puts
 * the wrappers whose cchan side is gone into the graveyard. */
static int clique_leave(struct ncclComm *c) {
    shim_clique_t *q = c->clique;
    struct ncclComm **batch = NULL;
    int n = 0;
    pthread_mutex_lock(&clique_lock);
    if (q) {
        struct ncclComm **grown = realloc(q->comms, (size_t)(q->destroyed + 1) * sizeof *grown);
        if (grown) {
            q->comms = grown;
            q->comms[q->destroyed++] = c;
        }
        if (q->destroyed >= q->members) {
            batch = q->comms;
            n = q->destroyed;
            shim_clique_t **pp = &cliques;
            while (*pp != q) pp = &(*pp)->next;
            *pp = q->next;
            free(q->wops);
            free(q);
        }
    } else {
        batch = malloc(sizeof *batch);
        if (batch) batch[n++] = c;
    }
    pthread_mutex_unlock(&clique_lock);
    /* Dead now, its cchan side destroyed with the clique's last member (below, or later). */
    if (!batch || n == 0) comm_kill(c);
    int rc = 0;
    if (n == 1) {
        rc = (int)(intptr_t)cchan_side_destroy(batch[0]);
    } else if (n > 1) {
        pthread_t *th = calloc((size_t)n, sizeof *th);
        for (int i = 0; i < n; i++)
            if (!th || pthread_create(&th[i], NULL, cchan_side_destroy, batch[i])) {
                if (th) th[i] = 0;
                void *r = cchan_side_destroy(batch[i]);
                if (r) rc = (int)(intptr_t)r;
            }
        for (int i = 0; th && i < n; i++) {
            void *r = NULL;
            if (th[i]) pthread_join(th[i], &r);
            if (r) rc = (int)(intptr_t)r;
        }
        free(th);
    }
    for (int i = 0; i < n; i++) comm_release(batch[i]);
    free(batch);
    return rc;
}

/* ------------------------------------------------------------------ initialisation */

static ncclResult_t wait_real_init(const shim_real_t *r, ncclComm_t real, ncclResult_t res) {
    while (res == ncclInProgress) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
        if (r->ncclCommGetAsyncError(real, &res) != ncclSuccess) return ncclInternalError;
    }
    return res;
}

/* The fallback's communicator: rank 0 makes its unique id and sends it over bs. */
static ncclResult_t init_real(struct ncclComm *c, cchan_bootstrap_t *bs, ncclConfig_t *config) {
    const shim_real_t *r = shim_real();
    struct {
        int have;
        ncclUniqueId id;
    } mine, *all = calloc((size_t)c->nranks, sizeof *all);
    if (!all) return shim_fail(ncclSystemError, "ncclCommInitRank: out of memory");
    memset(&mine, 0, sizeof mine);
    mine.have = r != NULL;
    if (r && c->rank == 0 && r->ncclGetUniqueId(&mine.id) != ncclSuccess) mine.have = 0;
    int rc = cchan_bootstrap_allgather(bs, &mine, all, sizeof mine);
    if (rc) {
        free(all);
        return shim_fail_cchan(rc, "ncclCommInitRank: exchanging the fallback NCCL's unique id");
    }
    int everyone = 1;
    for (int i = 0; i < c->nranks; i++) everyone &= all[i].have;
    ncclUniqueId rid = all[0].id;
    free(all);
    if (!everyone) {
        SHIM_WARN("rank %d: no fallback NCCL communicator (%s); only cchan's collectives will work",
                  c->rank, r ? "another rank has no fallback NCCL" : shim_real_why());
        return ncclSuccess;
    }
    ncclResult_t res = config ? r->ncclCommInitRankConfig(&c->real, c->nranks, rid, c->rank, config)
                              : r->ncclCommInitRank(&c->real, c->nranks, rid, c->rank);
    res = wait_real_init(r, c->real, res);
    if (res != ncclSuccess) {
        c->real = NULL;
        return shim_fail(res, "ncclCommInitRank: the fallback NCCL (%s) failed: %s", r->path,
                         r->ncclGetErrorString ? r->ncclGetErrorString(res) : "?");
    }
    return ncclSuccess;
}

/* The cchan side: a cchan communicator and its collectives, when every rank wants them. Takes bs.
 */
static ncclResult_t init_cchan(struct ncclComm *c, cchan_bootstrap_t *bs) {
    char why[sizeof c->cchan_off] = "";
    int host = 0;
    int want = cchan_paths_wanted(why, sizeof why, &host);
    if (want > 0 && cchan_bootstrap_local_size(bs) != c->nranks) {
        /* cchan_coll covers the ranks of one host. */
        snprintf(why, sizeof why, "the communicator spans hosts (%d of %d ranks here)",
                 cchan_bootstrap_local_size(bs), c->nranks);
        want = 0;
    }
    int *all = calloc((size_t)c->nranks, sizeof *all);
    if (!all) return shim_fail(ncclSystemError, "ncclCommInitRank: out of memory");
    int rc = cchan_bootstrap_allgather(bs, &want, all, sizeof want);
    int everyone = 1, bad = -1;
    for (int i = 0; !rc && i < c->nranks; i++) {
        everyone &= all[i] > 0;
        if (all[i] < 0 && bad < 0) bad = i;
    }
    free(all);
    if (rc) {
        cchan_bootstrap_destroy(bs);
        return shim_fail_cchan(rc, "ncclCommInitRank: agreeing on the cchan paths");
    }
    /* A malformed variable fails every rank (agreed above, so none waits for it), naming it. */
    if (bad >= 0) {
        cchan_bootstrap_destroy(bs);
        if (want < 0) return shim_fail(ncclInvalidArgument, "ncclCommInitRank: %s", why);
        return shim_fail(ncclInvalidArgument,
                         "ncclCommInitRank: rank %d has a malformed CCHAN_NCCL_DISABLE or "
                         "CCHAN_NCCL_HOST_PLATFORM (its last error names it)",
                         bad);
    }
    if (!everyone) {
        if (want) snprintf(why, sizeof why, "another rank has them off");
        snprintf(c->cchan_off, sizeof c->cchan_off, "%s", why);
        c->bs = bs;
        return ncclSuccess;
    }
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.device = c->device;
    if (host) cfg.platform = CCHAN_PLATFORM_HOST;
    rc = cchan_comm_create(bs, &cfg, &c->cc);
    if (rc) {
        ncclResult_t res = shim_fail_cchan(rc, "ncclCommInitRank: cchan_comm_create");
        cchan_bootstrap_destroy(bs);
        return res;
    }
    if (cchan_comm_platform(c->cc) != CCHAN_PLATFORM_CUDA && !host) {
        snprintf(c->cchan_off, sizeof c->cchan_off,
                 "the cchan communicator runs on the host platform");
        return ncclSuccess;
    }
    rc = cchan_coll_create(c->cc, NULL, &c->coll);
    if (rc) return shim_fail_coll(rc, "ncclCommInitRank: cchan_coll_create");
    return ncclSuccess;
}

/* Work a group defers to ncclGroupEnd: initialisations and the collective cchan half of window
 * registrations. At ncclGroupEnd each communicator's work runs in order in a thread of its own, so
 * that several ranks of this process take part in their collective steps at once. */
typedef enum { PENDING_INIT, PENDING_REGISTER, PENDING_DEREGISTER } pending_kind_t;

typedef struct pending_op {
    pending_kind_t kind;
    struct ncclComm *comm;
    ncclUniqueId id; /* INIT */
    ncclConfig_t config;
    int has_config;
    void *ptr; /* REGISTER, DEREGISTER */
    size_t bytes;
    ncclWindow_t *win_out; /* REGISTER in a group: where the fallback writes the handle */
    ncclWindow_t win;      /* REGISTER outside groups: the handle */
    ncclResult_t result;
    char error[1024];
} pending_op_t;

static ncclResult_t init_now(struct ncclComm *c, const ncclUniqueId *id, ncclConfig_t *config) {
    cchan_unique_id_t cid;
    memcpy(&cid, id, sizeof cid);
    cchan_bootstrap_t *bs = NULL;
    int rc = cchan_bootstrap_create(&cid, c->rank, c->nranks, &bs);
    if (rc) return shim_fail_cchan(rc, "ncclCommInitRank: cchan_bootstrap_create");
    ncclResult_t res = init_real(c, bs, config);
    if (res == ncclSuccess)
        res = init_cchan(c, bs);
    else
        cchan_bootstrap_destroy(bs);
    if (res == ncclSuccess && clique_join(c, id))
        res = shim_fail(ncclSystemError, "ncclCommInitRank: out of memory");
    if (res == ncclSuccess)
        SHIM_INFO("comm %p rank %d/%d device %d: cchan paths %s%s%s, fallback NCCL %s", (void *)c,
                  c->rank, c->nranks, c->device, c->coll ? "on" : "off", c->coll ? "" : ": ",
                  c->cchan_off, c->real ? "communicator ready" : "none");
    return res;
}

/* The cchan half of ncclCommWindowRegister / Deregister (collective over the communicator). */
static ncclResult_t window_cchan(struct ncclComm *c, pending_kind_t kind, void *ptr, size_t bytes) {
    if (!c->coll) return ncclSuccess;
    int rc = kind == PENDING_REGISTER ? cchan_coll_register(c->coll, ptr, bytes)
                                      : cchan_coll_deregister(c->coll, ptr);
    if (rc)
        return shim_fail_coll(rc, kind == PENDING_REGISTER
                                      ? "ncclCommWindowRegister: cchan_coll_register"
                                      : "ncclCommWindowDeregister: cchan_coll_deregister");
    SHIM_INFO("rank %d/%d: %s %p (%zu B) with cchan_coll", c->rank, c->nranks,
              kind == PENDING_REGISTER ? "registered" : "deregistered", ptr, bytes);
    return ncclSuccess;
}

static ncclResult_t pending_exec(pending_op_t *p) {
    if (p->kind == PENDING_INIT)
        return init_now(p->comm, &p->id, p->has_config ? &p->config : NULL);
    if (p->comm->init_error != ncclSuccess) return p->comm->init_error;
    return window_cchan(p->comm, p->kind, p->ptr, p->bytes);
}

typedef struct pending_batch {
    pending_op_t *ops;
    int n;
    struct ncclComm *comm;
} pending_batch_t;

/* Runs the ops of one communicator, in order. */
static void *pending_run(void *arg) {
    pending_batch_t *b = arg;
    shim_clear_error();
    if (shim_bind_device(b->comm->device))
        SHIM_WARN("rank %d: could not make device %d current", b->comm->rank, b->comm->device);
    for (int i = 0; i < b->n; i++) {
        pending_op_t *p = &b->ops[i];
        if (p->comm != b->comm) continue;
        p->result = pending_exec(p);
        snprintf(p->error, sizeof p->error, "%s", shim_last_error());
        if (p->kind == PENDING_INIT) b->comm->init_error = p->result;
    }
    return NULL;
}

/* ------------------------------------------------------------------ groups */

static _Thread_local int group_depth;
static _Thread_local pending_op_t *pending;
static _Thread_local int npending, cap_pending;

int shim_group_depth(void) { return group_depth; }

static pending_op_t *defer(pending_kind_t kind, struct ncclComm *c) {
    if (npending == cap_pending) {
        int cap = cap_pending ? 2 * cap_pending : 8;
        pending_op_t *grown = realloc(pending, (size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        pending = grown;
        cap_pending = cap;
    }
    pending_op_t *p = &pending[npending++];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->comm = c;
    return p;
}

static ncclResult_t defer_init(struct ncclComm *c, const ncclUniqueId *id,
                               const ncclConfig_t *config) {
    pending_op_t *p = defer(PENDING_INIT, c);
    if (!p) return shim_fail(ncclSystemError, "ncclCommInitRank: out of memory");
    p->id = *id;
    if (config) {
        size_t n = config->size < sizeof p->config ? config->size : sizeof p->config;
        memcpy(&p->config, config, n);
        p->has_config = 1;
    }
    return ncclSuccess;
}

/* Runs the deferred work (one thread per communicator); the ops stay in `pending` (npending is
 * returned through *ran) until the caller is done with them. */
/* Runs ops (one thread per communicator, each communicator's ops in order). */
static ncclResult_t run_ops(pending_op_t *ops, int n, const char *where) {
    pending_batch_t *batches = calloc((size_t)n, sizeof *batches);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    if (!batches || !th) {
        free(batches);
        free(th);
        return shim_fail(ncclSystemError, "%s: out of memory", where);
    }
    int nb = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < nb && !seen; j++) seen = batches[j].comm == ops[i].comm;
        if (!seen) batches[nb++] = (pending_batch_t){ops, n, ops[i].comm};
    }
    int threads = 0; /* a thread even for one communicator: it binds that comm's device */
    for (; threads < nb; threads++)
        if (pthread_create(&th[threads], NULL, pending_run, &batches[threads])) break;
    ncclResult_t res = ncclSuccess;
    if (threads < nb) {
        /* Without a thread each, ranks of this process cannot meet (the started ones fail on
         * their bootstrap timeout): fail them all. */
        res = shim_fail(ncclSystemError, "%s: pthread_create failed", where);
        for (int i = 0; i < n; i++) ops[i].comm->init_error = ncclSystemError;
    }
    for (int j = 0; j < threads; j++) pthread_join(th[j], NULL);
    for (int i = 0; i < n && res == ncclSuccess; i++) {
        if (ops[i].result != ncclSuccess) {
            res = ops[i].result;
            shim_fail(res, "%s: %s of rank %d: %s", where,
                      ops[i].kind == PENDING_INIT ? "initialisation" : "window registration",
                      ops[i].comm->rank, ops[i].error);
        }
    }
    free(batches);
    free(th);
    return res;
}

/* Runs the group's deferred work; the ops stay in `pending` (*ran of them) until the caller is
 * done with them. */
static ncclResult_t run_pending(int *ran) {
    int n = npending;
    *ran = n;
    npending = 0;
    return n ? run_ops(pending, n, "ncclGroupEnd") : ncclSuccess;
}

/* ------------------------------------------------------------------ windows */

static int window_add(struct ncclComm *c, ncclWindow_t win, void *ptr) {
    shim_window_t *grown = realloc(c->windows, (size_t)(c->nwindows + 1) * sizeof *grown);
    if (!grown) return -1;
    c->windows = grown;
    c->windows[c->nwindows++] = (shim_window_t){win, ptr};
    return 0;
}

/* The buffer registered as win with cchan_coll (removed from the table), or NULL. */
static void *window_take(struct ncclComm *c, ncclWindow_t win) {
    for (int i = 0; i < c->nwindows; i++) {
        if (c->windows[i].win != win) continue;
        void *ptr = c->windows[i].ptr;
        c->windows[i] = c->windows[--c->nwindows];
        return ptr;
    }
    return NULL;
}

/* After the fallback's ncclGroupEnd, which writes the window handles of the group. */
static void record_windows(int n) {
    for (int i = 0; i < n; i++) {
        pending_op_t *p = &pending[i];
        if (p->kind == PENDING_REGISTER && p->result == ncclSuccess && p->comm->coll &&
            window_add(p->comm, *p->win_out, p->ptr))
            SHIM_WARN("rank %d: out of memory recording window %p", p->comm->rank, p->ptr);
    }
}

/* The cchan half of a window call outside a group. cchan_coll_(de)register is collective, so when
 * this process holds several ranks of the communicator (nccl-tests -g 2 registers and deregisters
 * comm by comm from one thread), the call is queued until every local rank has queued as many, and
 * the last caller runs them all, one thread per communicator, each in its call order. */
static ncclResult_t window_outside_group(struct ncclComm *c, pending_kind_t kind, void *ptr,
                                         size_t bytes, ncclWindow_t win, const char *where) {
    pthread_mutex_lock(&clique_lock);
    shim_clique_t *q = c->clique;
    /* Destroyed members count: their cchan side lives until the last member is destroyed, and
     * nccl-tests destroys comm 0 before it deregisters comm 1's windows. */
    int members = q ? q->members : 1;
    if (members <= 1) {
        pthread_mutex_unlock(&clique_lock);
        ncclResult_t res = window_cchan(c, kind, ptr, bytes);
        if (res == ncclSuccess && kind == PENDING_REGISTER && window_add(c, win, ptr))
            res = shim_fail(ncclSystemError, "%s: out of memory", where);
        return res;
    }
    pending_op_t *grown = realloc(q->wops, (size_t)(q->nwops + 1) * sizeof *grown);
    if (!grown) {
        pthread_mutex_unlock(&clique_lock);
        return shim_fail(ncclSystemError, "%s: out of memory", where);
    }
    q->wops = grown;
    pending_op_t *p = &q->wops[q->nwops++];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->comm = c;
    p->ptr = ptr;
    p->bytes = bytes;
    p->win = win;
    /* Ready when every local member has queued the same number of calls. */
    int distinct = 0, equal = 1, first = -1;
    for (int i = 0; i < q->nwops; i++) {
        int seen = 0, count = 0;
        for (int j = 0; j < i && !seen; j++) seen = q->wops[j].comm == q->wops[i].comm;
        if (seen) continue;
        distinct++;
        for (int j = i; j < q->nwops; j++) count += q->wops[j].comm == q->wops[i].comm;
        if (first < 0) first = count;
        equal &= count == first;
    }
    pending_op_t *ops = NULL;
    int n = 0;
    if (distinct == members && equal) {
        ops = q->wops;
        n = q->nwops;
        q->wops = NULL;
        q->nwops = 0;
    }
    pthread_mutex_unlock(&clique_lock);
    if (!ops) {
        SHIM_INFO("rank %d/%d: %s of %p waits for this process's other ranks", c->rank, c->nranks,
                  where, ptr);
        return ncclSuccess;
    }
    ncclResult_t res = run_ops(ops, n, where);
    for (int i = 0; i < n; i++)
        if (ops[i].kind == PENDING_REGISTER && ops[i].result == ncclSuccess &&
            window_add(ops[i].comm, ops[i].win, ops[i].ptr) && res == ncclSuccess)
            res = shim_fail(ncclSystemError, "%s: out of memory", where);
    free(ops);
    return res;
}

SHIM_DEFINE(ncclResult_t, ncclCommWindowRegister,
            (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags)) {
    shim_clear_error();
    SHIM_CALL(call);
    ncclResult_t res = shim_check_live(&call, comm, "ncclCommWindowRegister");
    if (res != ncclSuccess) return res;
    if (!win) return shim_fail(ncclInvalidArgument, "ncclCommWindowRegister: win is NULL");
    const shim_real_t *r = shim_real();
    if (comm->real && r && r->ncclCommWindowRegister) {
        res = shim_enter_real(&call, "ncclCommWindowRegister");
        if (res != ncclSuccess) return res;
        res = r->ncclCommWindowRegister(comm->real, buff, size, win, winFlags);
        if (res != ncclSuccess) return res;
    } else if (comm->coll) {
        *win = (ncclWindow_t)buff; /* cchan's handle: the buffer */
    } else {
        ncclComm_t real = NULL;
        return shim_real_comm(&call, comm, "ncclCommWindowRegister", &r, &real) != ncclSuccess
                   ? ncclInvalidUsage
                   : shim_fail(ncclInvalidUsage,
                               "ncclCommWindowRegister: the fallback NCCL lacks it");
    }
    if (!comm->coll) return ncclSuccess;
    if (group_depth > 0) {
        pending_op_t *p = defer(PENDING_REGISTER, comm);
        if (!p) return shim_fail(ncclSystemError, "ncclCommWindowRegister: out of memory");
        p->ptr = buff;
        p->bytes = size;
        p->win_out = win;
        return ncclSuccess;
    }
    return window_outside_group(comm, PENDING_REGISTER, buff, size, *win, "ncclCommWindowRegister");
}

SHIM_DEFINE(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win)) {
    shim_clear_error();
    SHIM_CALL(call);
    ncclResult_t res = shim_check_comm(&call, comm, "ncclCommWindowDeregister");
    if (res != ncclSuccess) return res;
    void *ptr = window_take(comm, win);
    if (ptr && comm->coll) {
        if (group_depth > 0) {
            pending_op_t *p = defer(PENDING_DEREGISTER, comm);
            if (!p) return shim_fail(ncclSystemError, "ncclCommWindowDeregister: out of memory");
            p->ptr = ptr;
        } else {
            res = window_outside_group(comm, PENDING_DEREGISTER, ptr, 0, win,
                                       "ncclCommWindowDeregister");
        }
    }
    const shim_real_t *r = shim_real();
    if (comm->real && r && r->ncclCommWindowDeregister) {
        ncclResult_t rr = shim_enter_real(&call, "ncclCommWindowDeregister");
        if (rr == ncclSuccess) rr = r->ncclCommWindowDeregister(comm->real, win);
        if (res == ncclSuccess) res = rr;
    }
    return res;
}

SHIM_DEFINE(ncclResult_t, ncclGroupStart, (void)) {
    const shim_real_t *r = shim_real();
    if (r && r->ncclGroupStart) {
        ncclResult_t res = r->ncclGroupStart();
        if (res != ncclSuccess) return res;
    }
    group_depth++;
    return ncclSuccess;
}

SHIM_DEFINE(ncclResult_t, ncclGroupEnd, (void)) {
    if (group_depth <= 0) return shim_fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    group_depth--;
    int ran = 0;
    ncclResult_t res = group_depth == 0 ? run_pending(&ran) : ncclSuccess;
    const shim_real_t *r = shim_real();
    if (r && r->ncclGroupEnd) {
        ncclResult_t rr = r->ncclGroupEnd();
        if (res == ncclSuccess) res = rr;
    }
    if (ran) record_windows(ran);
    return res;
}

SHIM_DEFINE(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo)) {
    if (group_depth <= 0)
        return shim_fail(ncclInvalidUsage, "ncclGroupSimulateEnd without ncclGroupStart");
    const shim_real_t *r = shim_real();
    if (npending)
        return shim_fail(ncclInvalidUsage, "ncclGroupSimulateEnd: the group holds communicator "
                                           "initialisations, which cannot be simulated");
    group_depth--;
    if (r && r->ncclGroupSimulateEnd) return r->ncclGroupSimulateEnd(simInfo);
    if (simInfo) simInfo->estimatedTime = 0.0f;
    return ncclSuccess;
}

/* ------------------------------------------------------------------ init entry points */

static ncclResult_t init_rank(ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank,
                              ncclConfig_t *config, int device, const char *where) {
    shim_clear_error();
    if (!out) return shim_fail(ncclInvalidArgument, "%s: comm is NULL", where);
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return shim_fail(ncclInvalidArgument, "%s: rank %d of %d", where, rank, nranks);
    if (config &&
        (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, cgaClusterSize)))
        return shim_fail(ncclInvalidArgument,
                         "%s: config was not initialised with NCCL_CONFIG_INITIALIZER", where);
    struct ncclComm *c = comm_new(rank, nranks, device);
    if (!c) return shim_fail(ncclSystemError, "%s: out of memory", where);
    ncclResult_t res;
    if (group_depth > 0) {
        res = defer_init(c, id, config);
    } else {
        res = init_now(c, id, config);
    }
    if (res != ncclSuccess) {
        comm_release(c);
        return res;
    }
    *out = c;
    return ncclSuccess;
}

SHIM_DEFINE(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId)) {
    shim_clear_error();
    if (!uniqueId) return shim_fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    cchan_unique_id_t id;
    int rc = cchan_get_unique_id(&id);
    if (rc) return shim_fail_cchan(rc, "ncclGetUniqueId");
    _Static_assert(sizeof id == sizeof *uniqueId, "a cchan unique id is an ncclUniqueId");
    memcpy(uniqueId, &id, sizeof id);
    return ncclSuccess;
}

SHIM_DEFINE(ncclResult_t, ncclCommInitRankConfig,
            (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config)) {
    return init_rank(comm, nranks, &commId, rank, config, shim_current_device(),
                     "ncclCommInitRankConfig");
}

SHIM_DEFINE(ncclResult_t, ncclCommInitRank,
            (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank)) {
    return init_rank(comm, nranks, &commId, rank, NULL, shim_current_device(), "ncclCommInitRank");
}

SHIM_DEFINE(ncclResult_t, ncclCommInitRankScalable,
            (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds,
             ncclConfig_t *config)) {
    if (nId < 1 || !commIds)
        return shim_fail(ncclInvalidArgument, "ncclCommInitRankScalable: %d ids", nId);
    /* One bootstrap root is enough for one host; the first id is it. */
    return init_rank(newcomm, nranks, &commIds[0], myrank, config, shim_current_device(),
                     "ncclCommInitRankScalable");
}

SHIM_DEFINE(ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int *devlist)) {
    shim_clear_error();
    if (!comm || ndev < 1) return shim_fail(ncclInvalidArgument, "ncclCommInitAll: ndev %d", ndev);
    ncclUniqueId id;
    ncclResult_t res = ncclGetUniqueId(&id);
    if (res != ncclSuccess) return res;
    res = ncclGroupStart();
    if (res != ncclSuccess) return res;
    for (int i = 0; i < ndev && res == ncclSuccess; i++)
        res = init_rank(&comm[i], ndev, &id, i, NULL, devlist ? devlist[i] : i, "ncclCommInitAll");
    ncclResult_t end = ncclGroupEnd();
    return res != ncclSuccess ? res : end;
}

/* ------------------------------------------------------------------ split and shrink */

static ncclResult_t wrap_child(ncclComm_t parent, ncclComm_t *newcomm, int color, int key,
                               ncclConfig_t *config, const char *where);

SHIM_DEFINE(ncclResult_t, ncclCommSplit,
            (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)) {
    shim_clear_error();
    SHIM_CALL(call);
    ncclResult_t res = shim_check_live(&call, comm, "ncclCommSplit");
    if (res == ncclSuccess && comm->real) res = shim_enter_real(&call, "ncclCommSplit");
    if (res != ncclSuccess) return res;
    if (!newcomm) return shim_fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
    return wrap_child(comm, newcomm, color, key, config, "ncclCommSplit");
}

/* Child of a split: the fallback's split (collective over the parent), then, outside groups, a
 * cchan side bootstrapped through the parent's bootstrap: colour, key and a fresh unique id from
 * every rank are all-gathered; each colour takes the id of its first member. */
static ncclResult_t wrap_child(ncclComm_t parent, ncclComm_t *newcomm, int color, int key,
                               ncclConfig_t *config, const char *where) {
    const shim_real_t *r = parent->real ? shim_real() : NULL;
    struct ncclComm *c = comm_new(0, 0, parent->device);
    if (!c) return shim_fail(ncclSystemError, "%s: out of memory", where);
    ncclResult_t res = ncclSuccess;
    if (r) {
        res = r->ncclCommSplit(parent->real, color, key, &c->real, config);
        if (res == ncclInProgress && group_depth == 0) res = wait_real_init(r, c->real, res);
        if (res != ncclSuccess) {
            comm_release(c);
            return res;
        }
    }
    if (group_depth > 0) {
        /* The fallback fills c->real at ncclGroupEnd; the cchan side stays off. */
        if (color == NCCL_SPLIT_NOCOLOR) {
            comm_release(c);
            *newcomm = NULL;
            return ncclSuccess;
        }
        c->rank = -1;
        snprintf(c->cchan_off, sizeof c->cchan_off, "split inside a group");
        SHIM_INFO("%s inside a group: forwarded; the child's cchan paths are off", where);
        *newcomm = c;
        return ncclSuccess;
    }
    cchan_bootstrap_t *pbs = parent->cc ? cchan_comm_bootstrap(parent->cc) : parent->bs;
    struct member {
        int color, key;
        ncclUniqueId id;
    } mine, *all = calloc((size_t)parent->nranks, sizeof *all);
    memset(&mine, 0, sizeof mine);
    mine.color = color;
    mine.key = key;
    int rc = all ? 0 : -ENOMEM;
    if (!rc && color != NCCL_SPLIT_NOCOLOR) rc = cchan_get_unique_id((cchan_unique_id_t *)&mine.id);
    if (!rc) rc = cchan_bootstrap_allgather(pbs, &mine, all, sizeof mine);
    if (rc) {
        free(all);
        if (c->real && r) r->ncclCommDestroy(c->real);
        comm_release(c);
        return shim_fail_cchan(rc, where);
    }
    if (color == NCCL_SPLIT_NOCOLOR) {
        free(all);
        comm_release(c);
        *newcomm = NULL;
        return ncclSuccess;
    }
    int first = -1, n = 0, rank = 0;
    for (int i = 0; i < parent->nranks; i++) {
        if (all[i].color != color) continue;
        if (first < 0) first = i;
        n++;
        if (all[i].key < key || (all[i].key == key && i < parent->rank)) rank++;
    }
    ncclUniqueId id = all[first].id;
    free(all);
    c->rank = rank;
    c->nranks = n;
    cchan_bootstrap_t *bs = NULL;
    rc = cchan_bootstrap_create((cchan_unique_id_t *)&id, rank, n, &bs);
    if (!rc) {
        res = init_cchan(c, bs);
    } else {
        res = shim_fail_cchan(rc, where);
    }
    if (res == ncclSuccess && clique_join(c, &id))
        res = shim_fail(ncclSystemError, "%s: out of memory", where);
    if (res != ncclSuccess) {
        if (c->real && r) r->ncclCommDestroy(c->real);
        comm_release(c);
        return res;
    }
    SHIM_INFO("%s: comm %p rank %d/%d (colour %d) from parent rank %d/%d: cchan paths %s%s%s",
              where, (void *)c, c->rank, c->nranks, color, parent->rank, parent->nranks,
              c->coll ? "on" : "off", c->coll ? "" : ": ", c->cchan_off);
    *newcomm = c;
    return ncclSuccess;
}

SHIM_DEFINE(ncclResult_t, ncclCommShrink,
            (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,
             ncclConfig_t *config, int shrinkFlags)) {
    shim_clear_error();
    const shim_real_t *r = NULL;
    ncclComm_t real = NULL;
    SHIM_CALL(call);
    ncclResult_t res = shim_real_comm(&call, comm, "ncclCommShrink", &r, &real);
    if (res != ncclSuccess) return res;
    if (!r->ncclCommShrink)
        return shim_fail(ncclInvalidUsage, "ncclCommShrink: the fallback NCCL lacks it");
    if (!newcomm) return shim_fail(ncclInvalidArgument, "ncclCommShrink: newcomm is NULL");
    /* Ranks being excluded may be dead: the child is the fallback's only (no cchan side). */
    struct ncclComm *c = comm_new(-1, 0, comm->device);
    if (!c) return shim_fail(ncclSystemError, "ncclCommShrink: out of memory");
    res =
        r->ncclCommShrink(real, excludeRanksList, excludeRanksCount, &c->real, config, shrinkFlags);
    if (res != ncclSuccess && res != ncclInProgress) {
        comm_release(c);
        return res;
    }
    snprintf(c->cchan_off, sizeof c->cchan_off, "shrunk communicator");
    if (res == ncclSuccess && !c->real) {
        comm_release(c);
        *newcomm = NULL;
        return res;
    }
    *newcomm = c;
    return res;
}

/* ------------------------------------------------------------------ teardown */

/* A teardown that finds another already running: an abort escalates a destroy (aborting the cchan
 * side ends the calls and the collective barrier the destroy waits for) and, like a second abort,
 * waits for it to finish; a second destroy is refused. */
static ncclResult_t teardown_again(ncclComm_t comm, int abort_it, const char *where) {
    if (!abort_it) {
        pthread_mutex_unlock(&handle_lock);
        return shim_fail(ncclInvalidUsage, "%s: comm (rank %d) is already being torn down", where,
                         comm->rank);
    }
    if (comm->dying == SHIM_DESTROYING) {
        SHIM_WARN("%s: rank %d: aborting a communicator that another thread is destroying", where,
                  comm->rank);
        comm->dying = SHIM_ABORTING;
        /* never blocks (cchan.h); under the lock, as the destroy may be freeing comm->cc */
        if (comm->cc) cchan_comm_abort(comm->cc);
        pthread_cond_broadcast(&handle_drained); /* the destroy now waits for fewer calls */
    }
    comm->waiters++;
    while (magic_of(comm) == SHIM_COMM_MAGIC) pthread_cond_wait(&handle_drained, &handle_lock);
    comm->waiters--;
    pthread_mutex_unlock(&handle_lock);
    return ncclSuccess;
}

/* Destroy and abort. Calls of other threads may hold comm: an abort marks it (no call starts any
 * more), aborts the cchan side on every rank (cchan_comm_abort: their waits end with an error
 * within about a second, peers' too), waits for the calls outside the fallback to return, aborts
 * the fallback's communicator (which ends the calls inside it), waits for those, then frees. A
 * destroy waits for every call to return, as NCCL's does. */
static ncclResult_t teardown(ncclComm_t comm, int abort_it, const char *where) {
    shim_clear_error();
    if (!comm) return ncclSuccess;
    if (abort_it)
        SHIM_HAND_BACK(ncclCommAbort, comm, (comm));
    else
        SHIM_HAND_BACK(ncclCommDestroy, comm, (comm));
    pthread_mutex_lock(&handle_lock);
    uint64_t magic = magic_of(comm);
    if (magic != SHIM_COMM_MAGIC) {
        pthread_mutex_unlock(&handle_lock);
        return shim_fail(ncclInvalidArgument, "%s: comm %p is not a live communicator%s", where,
                         (void *)comm,
                         magic == SHIM_COMM_DEAD ? " (it was destroyed or aborted already)" : "");
    }
    if (comm->dying) return teardown_again(comm, abort_it, where); /* unlocks */
    comm->dying = abort_it ? SHIM_ABORTING : SHIM_DESTROYING;
    if (abort_it && comm->cc) cchan_comm_abort(comm->cc);
    if (comm->calls)
        SHIM_INFO("%s: rank %d: waiting for %d calls of other threads to return", where, comm->rank,
                  comm->calls);
    comm->waiters++;
    /* An abort leaves the calls inside the fallback to the fallback's abort below. */
    while (comm->calls > (comm->dying == SHIM_ABORTING ? comm->calls_real : 0))
        pthread_cond_wait(&handle_drained, &handle_lock);
    abort_it = comm->dying == SHIM_ABORTING; /* another thread's abort may have escalated */
    comm->waiters--;
    pthread_mutex_unlock(&handle_lock);

    ncclResult_t res = ncclSuccess;
    const shim_real_t *r = shim_real();
    if (comm->real && r) {
        /* Said before and after: a teardown that never returns is then told to be the fallback's
         * own (scripts/torch-nccl.py reads these lines) rather than cchan's. */
        SHIM_INFO("%s: rank %d: the fallback NCCL's teardown starts", where, comm->rank);
        res = abort_it ? r->ncclCommAbort(comm->real) : r->ncclCommDestroy(comm->real);
        SHIM_INFO("%s: rank %d: the fallback NCCL's teardown returned %d", where, comm->rank,
                  (int)res);
    }
    pthread_mutex_lock(&handle_lock);
    comm->waiters++;
    while (comm->calls > 0) pthread_cond_wait(&handle_drained, &handle_lock);
    comm->waiters--;
    comm->closed = 1; /* not even a query from here on: the cchan side goes */
    comm->real = NULL;
    pthread_mutex_unlock(&handle_lock);

    /* On an aborted communicator the cchan side's teardown (collective) ends at once on every rank,
     * so that it is released here too, also when peers are gone. */
    int rank = comm->rank;
    int rc = clique_leave(comm); /* comm is dead (and maybe reused) once it returns */
    if (rc && res == ncclSuccess) res = shim_fail_cchan(rc, where);
    SHIM_INFO("%s: rank %d: cchan side done (%d)", where, rank, rc);
    return res;
}

SHIM_DEFINE(ncclResult_t, ncclCommDestroy, (ncclComm_t comm)) {
    return teardown(comm, 0, "ncclCommDestroy");
}

SHIM_DEFINE(ncclResult_t, ncclCommAbort, (ncclComm_t comm)) {
    return teardown(comm, 1, "ncclCommAbort");
}

SHIM_DEFINE(ncclResult_t, ncclCommFinalize, (ncclComm_t comm)) {
    shim_clear_error();
    SHIM_CALL(call);
    ncclResult_t res = shim_check_comm(&call, comm, "ncclCommFinalize");
    if (res == ncclSuccess && comm->real) res = shim_enter_real(&call, "ncclCommFinalize");
    if (res != ncclSuccess || !comm->real) return res;
    const shim_real_t *r = shim_real();
    return r->ncclCommFinalize ? r->ncclCommFinalize(comm->real) : ncclSuccess;
}

SHIM_DEFINE(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags)) {
    shim_clear_error();
    const shim_real_t *r = NULL;
    ncclComm_t real = NULL;
    SHIM_CALL(call);
    ncclResult_t res = shim_real_comm(&call, comm, "ncclCommRevoke", &r, &real);
    if (res != ncclSuccess) return res;
    if (!r->ncclCommRevoke)
        return shim_fail(ncclInvalidUsage, "ncclCommRevoke: the fallback NCCL lacks it");
    return r->ncclCommRevoke(real, revokeFlags);
}
