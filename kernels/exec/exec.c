/* cchan_exec runtime: builds what a plan needs once per communicator, binds buffers, runs the
 * interpreter (CUDA kernel, or one CPU thread per block on the host platform). */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan/env.h"
#include "exec_internal.h"

#define EXEC_ANCHOR_BYTES 4096
#define EXEC_SCRATCH_MIN 4096
#define EXEC_THREADS_GPU 512
#define EXEC_SMEM_MAX (48u * 1024u)
#define EXEC_PDL_MAX_BYTES (2ull << 20)
#define EXEC_HOST_THREADS_MAX 256
/* Instances chosen per call: each gets at least this much of a large input (below it the
 * handshakes of one more instance cost more than its share of the bytes saves)... */
#define EXEC_INST_MIN_BYTES (128u * 1024u)
/* ...and a run aims at this share of the device's SMs in blocks (a memory-bound copy or reduction
 * saturates NVLink and HBM with a fraction of the SMs, as cchan_coll's kernels do); the host
 * platform's blocks are threads on a few cores. */
#define EXEC_SMS_PER_BLOCK 4
#define EXEC_HOST_TARGET_BLOCKS 4
/* Port sub-channels (one per plan channel, buffer pair and registration) each need a semaphore of
 * their own on this proxy, though they never signal: indices of a set made for them. */
#define EXEC_DATA_SEMS 256

typedef struct exec_reg {
    uint8_t *ptr;
    size_t bytes;
    cchan_mem_t *local;
    cchan_mem_t **peers; /* [nranks], [rank] = local */
    struct exec_reg *next;
} exec_reg_t;

typedef struct exec_sub {
    uint32_t ch, inst, pair;
    const cchan_mem_t *src, *dst;
    cchan_port_channel_t port;
    struct exec_sub *next;
} exec_sub_t;

typedef struct host_block {
    const exec_kargs_t *a;
    uint32_t block;
    int status;
} host_block_t;

/* A run on the host platform started asynchronously (stream != NULL): its blocks' threads. */
typedef struct exec_host_run {
    exec_kargs_t a;
    uint32_t nblocks, started;
    int status; /* a failure to start every block */
    host_block_t hb[EXEC_HOST_THREADS_MAX];
    pthread_t th[EXEC_HOST_THREADS_MAX];
} exec_host_run_t;

typedef struct exec_binding {
    const void *send;
    void *recv;
    uint64_t in_bytes;
    uint32_t gen; /* scratch generation it was built for */
    exec_bind_t *dev;
    exec_chan_rt_t *ch_dev;
    cchan_port_channel_t *ports_dev;
    struct exec_binding *next;
} exec_binding_t;

struct cchan_exec {
    cchan_comm_t *comm;
    const cchan_exec_plan_t *plan;
    const exec_rank_desc_t *me;
    int rank, nranks, device;
    cchan_platform_t platform;
    uint8_t *prog_dev;
    uint32_t ops_off, refs_off;
    uint32_t nthreads, smem;
    int pdl;
    /* ninst: the most instances a run gets (what the semaphores, channels and state are made for);
     * grid = the plan's blocks x ninst */
    uint32_t ninst, grid;
    int inst_fixed;         /* every run gets ninst (config, CCHAN_EXEC_INSTANCES) */
    uint32_t target_blocks; /* chosen per call: the blocks a large run aims at (every rank alike) */
    int no_grow;            /* CCHAN_EXEC_NO_GROW */
    exec_host_run_t *inflight;
    uint32_t lsem_stride; /* rank-local semaphore words per instance */
    int uses_input; /* some op of this rank, or of a peer through a channel, reads our input */
    cchan_sem_set_t *mem_sems, *port_sems, *bar_sems, *data_sems;
    exec_sub_t *subs;
    int *data_next; /* per peer: the next free index of data_sems */
    cchan_proxy_t *proxy;
    cchan_mem_t *anchor, **peer_anchor;
    cchan_port_channel_t *anchors; /* host copies, one per channel (port channels only) */
    cchan_mem_t *scratch, **peer_scratch;
    uint64_t scratch_bytes;
    uint32_t gen;
    uint64_t *lsem_dev;
    uint32_t *epochs_dev;
    cchan_semaphore_t *barrier_dev;
    cchan_wait_ctl_t ctl;
    exec_reg_t *regs;
    exec_binding_t *bindings;
};

static int host_join(cchan_exec_t *e);

size_t cchan_exec_dtype_size(cchan_exec_dtype_t dt) {
    switch (dt) {
    case CCHAN_EXEC_F32: return 4;
    case CCHAN_EXEC_F16:
    case CCHAN_EXEC_BF16: return 2;
    default: return 0;
    }
}

/* A getter's return value cannot carry the reason, so a NULL handle leaves it in the last error. */
static int no_exec(const char *where) { return execi_error(-EINVAL, where, "exec is NULL"); }

const cchan_exec_plan_t *cchan_exec_plan(const cchan_exec_t *e) {
    if (e) return e->plan;
    no_exec("cchan_exec_plan");
    return NULL;
}
int cchan_exec_instances(const cchan_exec_t *e) {
    return e ? (int)e->ninst : no_exec("cchan_exec_instances");
}

/* ------------------------------------------------------------------ device memory */

static int dev_alloc(cchan_exec_t *e, size_t bytes, void **out) {
    if (bytes == 0) bytes = 16;
    if (e->platform == CCHAN_PLATFORM_CUDA) return execi_cuda_alloc(e->device, bytes, out);
    void *p = calloc(1, bytes);
    if (!p) return execi_error(-ENOMEM, "cchan_exec", "%zu bytes of state", bytes);
    *out = p;
    return 0;
}
static void dev_free(cchan_exec_t *e, void *p) {
    if (!p) return;
    if (e->platform == CCHAN_PLATFORM_CUDA)
        (void)execi_cuda_free(e->device, p);
    else
        free(p);
}
static int dev_upload(cchan_exec_t *e, void *dst, const void *src, size_t bytes) {
    if (e->platform == CCHAN_PLATFORM_CUDA) return execi_cuda_upload(e->device, dst, src, bytes);
    memcpy(dst, src, bytes);
    return 0;
}
/* Allocates and fills in one step. */
static int dev_put(cchan_exec_t *e, const void *src, size_t bytes, void **out) {
    void *d;
    int st = dev_alloc(e, bytes, &d);
    if (st) return st;
    if ((st = dev_upload(e, d, src, bytes))) {
        dev_free(e, d);
        return st;
    }
    *out = d;
    return 0;
}

static int rt_err(int st, const char *where, const char *what) {
    return execi_error(st, where, "%s: %s (%s)", what, cchan_strerror(st), cchan_last_error());
}

/* ------------------------------------------------------------------ scratch */

static void peers_free(cchan_exec_t *e, cchan_mem_t **peers, cchan_mem_t *local) {
    if (!peers) return;
    for (int p = 0; p < e->nranks; p++)
        if (peers[p] && peers[p] != local) cchan_mem_destroy(peers[p]);
    free(peers);
}

/* Collective: this rank's memory and every peer's, mapped here. */
static int alloc_exchanged(cchan_exec_t *e, size_t bytes, cchan_mem_t **local, cchan_mem_t ***peers,
                           const char *what) {
    static const char *where = "cchan_exec";
    cchan_mem_t *m = NULL;
    cchan_mem_t **pp = (cchan_mem_t **)calloc((size_t)e->nranks, sizeof *pp);
    if (!pp) return execi_error(-ENOMEM, where, "no memory");
    int st = cchan_mem_alloc(e->comm, bytes, 0, &m);
    if (st < 0) {
        free(pp);
        return rt_err(st, where, what);
    }
    st = cchan_mem_exchange(e->comm, m, pp);
    if (st < 0) {
        free(pp);
        cchan_mem_destroy(m);
        return rt_err(st, where, what);
    }
    *local = m;
    *peers = pp;
    return 0;
}

static void bindings_free(cchan_exec_t *e) {
    exec_binding_t *b = e->bindings;
    while (b) {
        exec_binding_t *n = b->next;
        dev_free(e, b->dev);
        dev_free(e, b->ch_dev);
        dev_free(e, b->ports_dev);
        free(b);
        b = n;
    }
    e->bindings = NULL;
}

/* Forgets the port sub-channels (their memory is going away; the proxy keeps the channels, which
 * nothing pushes to any more). */
static void subs_forget(cchan_exec_t *e) {
    for (exec_sub_t *u = e->subs; u;) {
        exec_sub_t *n = u->next;
        free(u);
        u = n;
    }
    e->subs = NULL;
}

static uint64_t scratch_need(const cchan_exec_plan_t *p, uint64_t in_bytes) {
    uint64_t chunk = in_bytes / p->buf_chunks[EXEC_BUF_INPUT];
    uint64_t b = (uint64_t)p->buf_chunks[EXEC_BUF_SCRATCH] * chunk * p->scratch_factor;
    if (p->ll_double_buffer) b *= 2;
    return b;
}

/* Collective, the same on every rank (it depends only on the size): scratch for in_bytes. */
static int scratch_grow(cchan_exec_t *e, uint64_t in_bytes) {
    uint64_t need = scratch_need(e->plan, in_bytes);
    if (need < EXEC_SCRATCH_MIN) need = EXEC_SCRATCH_MIN;
    if (e->scratch && need <= e->scratch_bytes) return 0;
    /* runs in flight may still use the old scratch (ours or, through mappings, the peers') */
    if (e->platform == CCHAN_PLATFORM_CUDA && e->scratch) {
        int st = execi_cuda_sync(e->device);
        if (st) return st;
    }
    if (e->scratch) {
        int st = cchan_bootstrap_barrier(cchan_comm_bootstrap(e->comm));
        if (st < 0) return rt_err(st, "cchan_exec_run", "cchan_bootstrap_barrier");
    }
    bindings_free(e);
    subs_forget(e);
    peers_free(e, e->peer_scratch, e->scratch);
    e->peer_scratch = NULL;
    if (e->scratch) cchan_mem_destroy(e->scratch);
    e->scratch = NULL;
    /* round up so a sweep of growing sizes reallocates a few times only */
    uint64_t bytes = EXEC_SCRATCH_MIN;
    while (bytes < need) bytes *= 2;
    int st = alloc_exchanged(e, bytes, &e->scratch, &e->peer_scratch, "scratch");
    if (st) return st;
    e->scratch_bytes = bytes;
    e->gen++;
    return 0;
}

/* ------------------------------------------------------------------ create / destroy */

static void exec_release(cchan_exec_t *e) {
    bindings_free(e);
    if (e->proxy) {
        (void)cchan_proxy_stop(e->proxy, 10000);
        cchan_proxy_destroy(e->proxy);
    }
    for (exec_reg_t *g = e->regs; g;) {
        exec_reg_t *n = g->next;
        peers_free(e, g->peers, g->local);
        cchan_mem_destroy(g->local);
        free(g);
        g = n;
    }
    peers_free(e, e->peer_scratch, e->scratch);
    if (e->scratch) cchan_mem_destroy(e->scratch);
    peers_free(e, e->peer_anchor, e->anchor);
    if (e->anchor) cchan_mem_destroy(e->anchor);
    subs_forget(e);
    free(e->data_next);
    if (e->data_sems) cchan_sem_set_destroy(e->data_sems);
    if (e->mem_sems) cchan_sem_set_destroy(e->mem_sems);
    if (e->port_sems) cchan_sem_set_destroy(e->port_sems);
    if (e->bar_sems) cchan_sem_set_destroy(e->bar_sems);
    dev_free(e, e->prog_dev);
    dev_free(e, e->lsem_dev);
    dev_free(e, e->epochs_dev);
    dev_free(e, e->barrier_dev);
    free(e->anchors);
    free(e);
}

int cchan_exec_create(cchan_comm_t *comm, const cchan_exec_plan_t *plan, cchan_exec_t **out) {
    return cchan_exec_create_ex(comm, plan, NULL, out);
}

/* Instances: the config's count, else CCHAN_EXEC_INSTANCES, else 0 (chosen per call). Both
 * variables are read here, once per executor (include/cchan/env.h). */
static int create_env(const cchan_exec_config_t *cfg, const char *where, uint32_t *out, int *pdl) {
    uint32_t ninst = cfg ? cfg->instances : 0;
    if (ninst == 0) {
        int64_t x;
        if (cchan_env_get_int("CCHAN_EXEC_INSTANCES", &x))
            return execi_error(-EINVAL, where, "%s", cchan_last_error());
        ninst = (uint32_t)x;
    }
    if (ninst > EXEC_MAX_INSTANCES)
        return execi_error(-EINVAL, where, "instances %u: at most %d", ninst, EXEC_MAX_INSTANCES);
    if (cchan_env_get_bool("CCHAN_EXEC_PDL", pdl))
        return execi_error(-EINVAL, where, "%s", cchan_last_error());
    *out = ninst;
    return 0;
}

static int create_validate(cchan_comm_t *comm, const cchan_exec_plan_t *plan,
                           const cchan_exec_config_t *cfg, cchan_exec_t **out, const char *where,
                           uint32_t *ninst, int *pdl) {
    if (!comm || !plan || !out)
        return execi_error(-EINVAL, where, "comm, plan and out must not be NULL");
    /* a config of the first layout (no flags, no max_bytes) is still accepted */
    if (cfg &&
        (cfg->magic != CCHAN_EXEC_CONFIG_MAGIC || cfg->size < offsetof(cchan_exec_config_t, flags)))
        return execi_error(
            -EINVAL, where,
            "config not initialized with CCHAN_EXEC_CONFIG_INIT (magic 0x%x, size %zu)", cfg->magic,
            cfg->size);
    int st = create_env(cfg, where, ninst, pdl);
    if (st) return st;
    int nranks = cchan_comm_size(comm);
    if (nranks != plan->nranks)
        return execi_error(-EINVAL, where,
                           "plan \"%s\": nranks is %d, but the communicator has %d ranks",
                           plan->name, plan->nranks, nranks);
    cchan_platform_t platform = cchan_comm_platform(comm);
    if (platform != CCHAN_PLATFORM_CUDA && platform != CCHAN_PLATFORM_HOST)
        return execi_error(CCHAN_ERR_UNSUPPORTED, where, "platform %d (CUDA and host only)",
                           (int)platform);
    return 0;
}

/* Some op of this rank, or of a peer through a channel, reads this rank's input. */
static int plan_uses_input(const cchan_exec_plan_t *plan, int rank) {
    for (int r = 0; r < plan->nranks; r++) {
        const exec_rank_desc_t *rk = &plan->ranks[r];
        for (uint32_t i = 0; i < rk->nrefs; i++) {
            const exec_ref_t *f = &rk->refs[i];
            if (f->buf != EXEC_BUF_INPUT) continue;
            if ((r == rank && f->ch < 0) || (f->ch >= 0 && rk->ch[f->ch].peer == rank)) return 1;
        }
    }
    return 0;
}

static cchan_exec_t *exec_alloc(cchan_comm_t *comm, const cchan_exec_plan_t *plan, uint32_t ninst,
                                int pdl) {
    cchan_exec_t *e = (cchan_exec_t *)calloc(1, sizeof *e);
    if (!e) return NULL;
    e->comm = comm;
    e->plan = plan;
    e->rank = cchan_comm_rank(comm);
    e->nranks = cchan_comm_size(comm);
    e->me = &plan->ranks[e->rank];
    e->platform = cchan_comm_platform(comm);
    e->device = cchan_comm_device(comm);
    e->ctl = cchan_comm_wait_ctl(comm, -1, 0xE8ECu);
    e->ninst = ninst ? ninst : 1;
    e->inst_fixed = ninst != 0;
    e->grid = plan->nblocks * e->ninst;
    e->uses_input = plan_uses_input(plan, e->rank);
    e->nthreads = e->platform == CCHAN_PLATFORM_CUDA ? EXEC_THREADS_GPU : 1u;
    e->pdl = pdl;
    return e;
}

/* The operation lists as one image: [blocks][ops][refs], 16-byte aligned parts. */
static uint8_t *program_image(cchan_exec_t *e, size_t *total) {
    const exec_rank_desc_t *me = e->me;
    size_t bb = (size_t)me->nblocks * sizeof(exec_block_t);
    size_t ob = (size_t)me->nops * sizeof(exec_op_t);
    size_t rb = (size_t)me->nrefs * sizeof(exec_ref_t);
    e->ops_off = (uint32_t)((bb + 15) / 16 * 16);
    e->refs_off = (uint32_t)((e->ops_off + ob + 15) / 16 * 16);
    *total = e->refs_off + rb;
    uint8_t *img = (uint8_t *)calloc(1, *total ? *total : 1);
    if (!img) return NULL;
    memcpy(img, me->blocks, bb);
    memcpy(img + e->ops_off, me->ops, ob);
    memcpy(img + e->refs_off, me->refs, rb);
    return img;
}

static int create_launch_check(cchan_exec_t *e, const char *where) {
    int gpu = e->platform == CCHAN_PLATFORM_CUDA;
    if (!gpu && e->grid > EXEC_HOST_THREADS_MAX)
        return execi_error(CCHAN_ERR_UNSUPPORTED, where,
                           "%u blocks x %u instances: the host platform runs at most %d threads",
                           e->plan->nblocks, e->ninst, EXEC_HOST_THREADS_MAX);
    int st;
    if (gpu && (st = execi_cuda_prepare(e->device, e->grid, e->nthreads, e->smem,
                                        e->plan->cross_block)) < 0)
        return st;
    return 0;
}

/* Collective, in the same order on every rank. */
static int create_channel_sems(cchan_exec_t *e, const char *where) {
    const cchan_exec_plan_t *plan = e->plan;
    const uint32_t ninst = e->ninst;
    int st;
    if (plan->mem_sems &&
        (st = cchan_sem_set_create(e->comm, (int)(plan->mem_sems * ninst), 0, &e->mem_sems)) < 0)
        return rt_err(st, where, "cchan_sem_set_create(memory channels)");
    if (plan->port_sems && (st = cchan_sem_set_create(e->comm, (int)(plan->port_sems * ninst),
                                                      CCHAN_SEM_HOST_MAPPED, &e->port_sems)) < 0)
        return rt_err(st, where, "cchan_sem_set_create(port channels)");
    if (plan->uses_port && (st = cchan_sem_set_create(e->comm, (int)(EXEC_DATA_SEMS * ninst),
                                                      CCHAN_SEM_HOST_MAPPED, &e->data_sems)) < 0)
        return rt_err(st, where, "cchan_sem_set_create(port data channels)");
    return 0;
}

/* Barriers: one semaphore to every peer (mapped memory: ranks of one host). Collective. */
static int create_barriers(cchan_exec_t *e, const char *where) {
    const uint32_t ninst = e->ninst;
    const int nranks = e->nranks, rank = e->rank;
    int st;
    if ((st = cchan_sem_set_create(e->comm, (int)ninst, 0, &e->bar_sems)) < 0)
        return rt_err(st, where, "cchan_sem_set_create(barrier)");
    size_t nb = (size_t)(nranks - 1) * ninst;
    cchan_semaphore_t *bar = (cchan_semaphore_t *)calloc(nb, sizeof *bar);
    if (!bar) return execi_error(-ENOMEM, where, "no memory");
    for (uint32_t i = 0; i < ninst && st >= 0; i++)
        for (int j = 1; j < nranks && st >= 0; j++)
            st = cchan_sem_set_get(e->bar_sems, (rank + j) % nranks, (int)i,
                                   &bar[i * (size_t)(nranks - 1) + (size_t)(j - 1)]);
    if (st < 0) {
        free(bar);
        return rt_err(st, where, "cchan_sem_set_get(barrier)");
    }
    st = dev_put(e, bar, sizeof *bar * nb, (void **)&e->barrier_dev);
    free(bar);
    return st;
}

/* Rank-local semaphore words and the blocks' LL epochs, on the device. */
static int create_local_state(cchan_exec_t *e, const char *where) {
    const exec_rank_desc_t *me = e->me;
    e->lsem_stride = 2 * (me->semaphores ? me->semaphores : 1);
    size_t n = (size_t)e->lsem_stride * e->ninst;
    uint64_t *z = (uint64_t *)calloc(n, sizeof *z);
    uint32_t *ep = (uint32_t *)malloc(2 * sizeof *ep);
    if (!z || !ep) {
        free(z);
        free(ep);
        return execi_error(-ENOMEM, where, "no memory");
    }
    ep[0] = 1; /* LL flags start at 1 */
    ep[1] = 0;
    int st = dev_put(e, z, n * sizeof *z, (void **)&e->lsem_dev);
    if (!st) st = dev_put(e, ep, 2 * sizeof *ep, (void **)&e->epochs_dev);
    free(z);
    free(ep);
    return st;
}

/* The port side: anchor memory, the proxy and one anchor port channel per plan port channel. */
static int create_ports(cchan_exec_t *e, const char *where) {
    const exec_rank_desc_t *me = e->me;
    const uint32_t ninst = e->ninst;
    int st;
    if ((st = alloc_exchanged(e, EXEC_ANCHOR_BYTES, &e->anchor, &e->peer_anchor, "anchor")))
        return st;
    if ((st = cchan_proxy_create(e->comm, NULL, &e->proxy)) < 0 ||
        (st = cchan_proxy_start(e->proxy)) < 0)
        return rt_err(st, where, "cchan_proxy_create/start");
    e->anchors =
        (cchan_port_channel_t *)calloc((me->nch ? me->nch : 1) * (size_t)ninst, sizeof *e->anchors);
    e->data_next = (int *)calloc((size_t)e->nranks, sizeof(int));
    if (!e->anchors || !e->data_next) return execi_error(-ENOMEM, where, "no memory");
    /* the anchors are made on every rank in plan order (pairwise for network transports) */
    for (uint32_t k = 0; k < me->nch; k++)
        for (uint32_t i = 0; i < ninst; i++) {
            const exec_chan_desc_t *cd = &me->ch[k];
            if (cd->type != EXEC_CH_PORT) continue;
            st =
                cchan_port_channel_create(e->proxy, CCHAN_TRANSPORT_AUTO, e->port_sems, cd->peer,
                                          cd->index * (int)ninst + (int)i, e->peer_anchor[cd->peer],
                                          e->anchor, &e->anchors[i * me->nch + k]);
            if (st < 0) return rt_err(st, where, "cchan_port_channel_create(anchor)");
        }
    return 0;
}

/* Instances chosen per call: the blocks a large run aims at and the most that can be resident,
 * the smallest over the ranks (every rank must pick alike; MPS shares may differ). Collective. */
static int create_auto_instances(cchan_exec_t *e, const char *where) {
    uint32_t mine[2] = {EXEC_HOST_TARGET_BLOCKS, EXEC_HOST_THREADS_MAX};
    if (e->platform == CCHAN_PLATFORM_CUDA) {
        int sms = 0, resident = 0;
        int st = execi_cuda_capacity(e->device, e->nthreads, e->smem, &sms, &resident);
        if (st) return st;
        mine[0] = sms / EXEC_SMS_PER_BLOCK > 0 ? (uint32_t)(sms / EXEC_SMS_PER_BLOCK) : 1u;
        mine[1] = resident > 0 ? (uint32_t)resident : 1u;
    }
    uint32_t *all = (uint32_t *)calloc((size_t)e->nranks * 2, sizeof *all);
    if (!all) return execi_error(-ENOMEM, where, "no memory");
    int st = cchan_bootstrap_allgather(cchan_comm_bootstrap(e->comm), mine, all, sizeof mine);
    if (st < 0) {
        free(all);
        return rt_err(st, where, "cchan_bootstrap_allgather(instances)");
    }
    uint32_t target = mine[0], resident = mine[1];
    for (int r = 0; r < e->nranks; r++) {
        if (all[2 * r] < target) target = all[2 * r];
        if (all[2 * r + 1] < resident) resident = all[2 * r + 1];
    }
    free(all);
    const uint32_t pb = e->plan->nblocks;
    uint32_t k = (target + pb - 1) / pb;
    if (k > resident / pb) k = resident / pb;
    if (k > EXEC_MAX_INSTANCES) k = EXEC_MAX_INSTANCES;
    e->ninst = k ? k : 1u; /* (a plan whose blocks do not fit once is refused next) */
    e->target_blocks = target;
    e->grid = pb * e->ninst;
    return 0;
}

int cchan_exec_prepare(cchan_exec_t *e, uint64_t max_in_bytes) {
    static const char *where = "cchan_exec_prepare";
    execi_clear_error();
    if (!e) return execi_error(-EINVAL, where, "exec is NULL");
    int st = cchan_comm_check(e->comm, where);
    if (st) return st;
    if ((st = host_join(e))) return st;
    return scratch_grow(e, max_in_bytes);
}

int cchan_exec_create_ex(cchan_comm_t *comm, const cchan_exec_plan_t *plan,
                         const cchan_exec_config_t *cfg, cchan_exec_t **out) {
    static const char *where = "cchan_exec_create";
    execi_clear_error();
    uint32_t ninst = 0;
    int pdl = 1;
    int st = comm ? cchan_comm_check(comm, where) : 0;
    if (st) return st;
    st = create_validate(comm, plan, cfg, out, where, &ninst, &pdl);
    /* before any kernel of this executor can run (execi_cuda_preload says why) */
    if (!st && cchan_comm_platform(comm) == CCHAN_PLATFORM_CUDA)
        st = execi_cuda_preload(cchan_comm_device(comm));
    if (st) return st;
    cchan_exec_t *e = exec_alloc(comm, plan, ninst, pdl);
    if (!e) return execi_error(-ENOMEM, where, "no memory");
    e->no_grow =
        cfg && cfg->size >= sizeof(cchan_exec_config_t) && (cfg->flags & CCHAN_EXEC_NO_GROW);
    size_t total = 0;
    uint8_t *img = program_image(e, &total);
    if (!img) {
        free(e);
        return execi_error(-ENOMEM, where, "no memory");
    }
    st = dev_put(e, img, total, (void **)&e->prog_dev);
    free(img);
    if (st) goto fail;
    e->smem = e->me->max_block_bytes <= EXEC_SMEM_MAX ? e->me->max_block_bytes : 0;
    if (!e->inst_fixed && (st = create_auto_instances(e, where))) goto fail;
    if ((st = create_launch_check(e, where))) goto fail;
    /* semaphores: collective, in the same order on every rank */
    if (e->nranks > 1 && (st = create_channel_sems(e, where))) goto fail;
    if (e->nranks > 1 && plan->uses_barrier && (st = create_barriers(e, where))) goto fail;
    if ((st = create_local_state(e, where))) goto fail;
    /* scratch for the largest run set up now, so that runs up to it need no collective step */
    uint64_t max_bytes = cfg && cfg->size >= sizeof(cchan_exec_config_t) ? cfg->max_bytes : 0;
    if (!max_bytes) max_bytes = plan->max_bytes;
    if ((st = scratch_grow(e, max_bytes)) < 0) goto fail;
    if (plan->uses_port && (st = create_ports(e, where))) goto fail;
    *out = e;
    return 0;
fail:
    exec_release(e);
    return st;
}

int cchan_exec_destroy(cchan_exec_t *e) {
    execi_clear_error();
    if (!e) return execi_error(-EINVAL, "cchan_exec_destroy", "exec is NULL");
    int st = host_join(e);
    if (e->platform == CCHAN_PLATFORM_CUDA) st = execi_cuda_sync(e->device);
    /* peers may still read our buffers through their mappings until they are done */
    int b = cchan_bootstrap_barrier(cchan_comm_bootstrap(e->comm));
    exec_release(e);
    if (st) return st;
    if (b < 0) return rt_err(b, "cchan_exec_destroy", "cchan_bootstrap_barrier");
    return 0;
}

/* ------------------------------------------------------------------ registration */

int cchan_exec_register(cchan_exec_t *e, void *ptr, size_t bytes) {
    static const char *where = "cchan_exec_register";
    execi_clear_error();
    if (!e || !ptr || !bytes) return execi_error(-EINVAL, where, "exec, ptr and bytes must be set");
    int st = cchan_comm_check(e->comm, where);
    if (st) return st;
    if ((st = host_join(e))) return st;
    if (bytes > UINTPTR_MAX - (uintptr_t)ptr)
        return execi_error(CCHAN_ERR_RANGE, where,
                           "%zu bytes at %p run past the end of the address space", bytes, ptr);
    exec_reg_t *g = (exec_reg_t *)calloc(1, sizeof *g);
    if (!g) return execi_error(-ENOMEM, where, "no memory");
    g->peers = (cchan_mem_t **)calloc((size_t)e->nranks, sizeof *g->peers);
    if (!g->peers) {
        free(g);
        return execi_error(-ENOMEM, where, "no memory");
    }
    st = cchan_mem_register(e->comm, ptr, bytes, 0, &g->local);
    if (st >= 0) st = cchan_mem_exchange(e->comm, g->local, g->peers);
    if (st < 0) {
        if (g->local) cchan_mem_destroy(g->local);
        free(g->peers);
        free(g);
        return rt_err(st, where, "cchan_mem_register/exchange");
    }
    g->ptr = (uint8_t *)ptr;
    g->bytes = bytes;
    g->next = e->regs;
    e->regs = g;
    return 0;
}

int cchan_exec_deregister(cchan_exec_t *e, void *ptr) {
    static const char *where = "cchan_exec_deregister";
    execi_clear_error();
    if (!e) return execi_error(-EINVAL, where, "exec is NULL");
    exec_reg_t **pg = &e->regs;
    while (*pg && (*pg)->ptr != ptr) pg = &(*pg)->next;
    if (!*pg) return execi_error(-ENOENT, where, "%p was not registered", ptr);
    int st = host_join(e);
    if (e->platform == CCHAN_PLATFORM_CUDA) st = execi_cuda_sync(e->device);
    int b = cchan_bootstrap_barrier(cchan_comm_bootstrap(e->comm));
    exec_reg_t *g = *pg;
    *pg = g->next;
    /* bindings may name the registration (and port channels built on it keep living with the
     * proxy, harmlessly: nothing pushes to them once their bindings are gone) */
    bindings_free(e);
    subs_forget(e);
    peers_free(e, g->peers, g->local);
    cchan_mem_destroy(g->local);
    free(g);
    if (st) return st;
    return b < 0 ? rt_err(b, where, "cchan_bootstrap_barrier") : 0;
}

static exec_reg_t *reg_find(const cchan_exec_t *e, const void *p, uint64_t bytes) {
    const uint8_t *q = (const uint8_t *)p;
    for (exec_reg_t *g = e->regs; g; g = g->next)
        if (q >= g->ptr && q + bytes <= g->ptr + g->bytes) return g;
    return NULL;
}

/* ------------------------------------------------------------------ binding */

/* The port channel moving plan channel k's puts of one buffer pair between two registrations:
 * made once and kept (its flush counters live with it), on a semaphore of its own. */
static int sub_get(cchan_exec_t *e, uint32_t k, uint32_t inst, uint32_t pair,
                   const cchan_mem_t *src, const cchan_mem_t *dst, const exec_sub_t **out) {
    for (exec_sub_t *u = e->subs; u; u = u->next)
        if (u->ch == k && u->inst == inst && u->pair == pair && u->src == src && u->dst == dst) {
            *out = u;
            return 0;
        }
    int peer = e->me->ch[k].peer;
    if (e->data_next[peer] >= (int)(EXEC_DATA_SEMS * e->ninst))
        return execi_error(CCHAN_ERR_NO_RESOURCE, "cchan_exec_run",
                           "port channels to rank %d: %d buffer combinations used; deregister "
                           "buffers or make a new executor",
                           peer, (int)(EXEC_DATA_SEMS * e->ninst));
    exec_sub_t *u = (exec_sub_t *)calloc(1, sizeof *u);
    if (!u) return execi_error(-ENOMEM, "cchan_exec_run", "no memory");
    int st = cchan_port_channel_create(e->proxy, CCHAN_TRANSPORT_AUTO, e->data_sems, peer,
                                       e->data_next[peer], dst, src, &u->port);
    if (st < 0) {
        free(u);
        return rt_err(st, "cchan_exec_run", "cchan_port_channel_create");
    }
    e->data_next[peer]++;
    u->ch = k;
    u->inst = inst;
    u->pair = pair;
    u->src = src;
    u->dst = dst;
    u->next = e->subs;
    e->subs = u;
    *out = u;
    return 0;
}

static const char *const buf_names[EXEC_NBUF] = {"input", "output", "scratch"};

/* The registrations holding input and output where the peers reach them (reg[b], else NULL). */
static int bind_find_regs(cchan_exec_t *e, uint8_t *const ptr[EXEC_NBUF],
                          const uint64_t len[EXEC_NBUF], exec_reg_t *reg[EXEC_NBUF]) {
    const cchan_exec_plan_t *p = e->plan;
    for (int b = 0; b < 2; b++) {
        if (!(p->need_reg & (1u << b))) continue;
        if (b == execi_inplace_absent(p)) continue;
        reg[b] = reg_find(e, ptr[b], len[b]);
        if (!reg[b])
            return execi_error(-EINVAL, "cchan_exec_run",
                               "plan \"%s\" reaches the peers' %s: register the %s buffer (%p, "
                               "%llu bytes) with cchan_exec_register on every rank",
                               p->name, buf_names[b], b ? "recv" : "send", ptr[b],
                               (unsigned long long)len[b]);
    }
    return 0;
}

/* Port channels of all instances: an anchor and one per buffer pair of every plan port channel. */
static size_t bind_nports(const exec_rank_desc_t *me, uint32_t ni) {
    size_t nports = 0;
    for (uint32_t k = 0; k < me->nch; k++)
        if (me->ch[k].type == EXEC_CH_PORT)
            nports += 1 + (size_t)__builtin_popcount(me->ch[k].port_pairs);
    return nports * ni;
}

/* Memory channel k of instance i: its semaphore and the peer's buffers, mapped here. */
static int bind_chan_memory(cchan_exec_t *e, uint32_t k, uint32_t i, exec_reg_t *const *reg,
                            const exec_bind_t *hb, exec_chan_rt_t *c) {
    static const char *where = "cchan_exec_run";
    const exec_chan_desc_t *cd = &e->me->ch[k];
    int st = cchan_sem_set_get(e->mem_sems, cd->peer, cd->index * (int)e->ninst + (int)i, &c->sem);
    if (st < 0) return rt_err(st, where, "cchan_sem_set_get");
    for (int b = 0; b < EXEC_NBUF; b++) {
        if (!(cd->remote_mask & (1u << b))) continue;
        if (b == EXEC_BUF_SCRATCH)
            c->remote[b] = (uint8_t *)cchan_mem_ptr(e->peer_scratch[cd->peer]);
        else
            c->remote[b] = (uint8_t *)cchan_mem_ptr(reg[b]->peers[cd->peer]) + hb->port_off[b];
        if (!c->remote[b])
            return execi_error(CCHAN_ERR_UNSUPPORTED, where,
                               "channels[%u]: rank %d's %s is not mapped here (another "
                               "host?): use a port channel",
                               k, cd->peer, buf_names[b]);
    }
    return 0;
}

/* Port channel k of instance i (kk = i * nch + k): its anchor and one sub-channel per buffer
 * pair, appended to ports[*np..]. */
static int bind_chan_port(cchan_exec_t *e, uint32_t k, uint32_t i, uint32_t kk,
                          exec_reg_t *const *reg, cchan_port_channel_t *ports, size_t *np,
                          exec_chan_rt_t *c) {
    const exec_chan_desc_t *cd = &e->me->ch[k];
    int st;
    c->anchor = (int16_t)*np;
    ports[(*np)++] = e->anchors[kk];
    for (int pr = 0; pr < 9; pr++) {
        if (!(cd->port_pairs & (1u << pr))) continue;
        int sb = pr / 3, db = pr % 3;
        cchan_mem_t *src = sb == EXEC_BUF_SCRATCH ? e->scratch : reg[sb]->local;
        cchan_mem_t *dst =
            db == EXEC_BUF_SCRATCH ? e->peer_scratch[cd->peer] : reg[db]->peers[cd->peer];
        const exec_sub_t *u = NULL;
        if ((st = sub_get(e, k, i, (uint32_t)pr, src, dst, &u))) return st;
        ports[*np] = u->port;
        c->port[pr] = (int16_t)(*np)++;
    }
    return 0;
}

/* Every instance's channels: instance i has channels [i * nch, +nch), semaphore index
 * index * ni + i (both ends agree). */
static int bind_channels(cchan_exec_t *e, exec_reg_t *const *reg, const exec_bind_t *hb,
                         exec_chan_rt_t *ch, cchan_port_channel_t *ports) {
    const exec_rank_desc_t *me = e->me;
    size_t np = 0;
    int st = 0;
    for (uint32_t kk = 0; kk < me->nch * e->ninst && st == 0; kk++) {
        uint32_t i = kk / me->nch, k = kk % me->nch;
        exec_chan_rt_t *c = &ch[kk];
        c->type = (uint32_t)me->ch[k].type;
        for (int pr = 0; pr < 9; pr++) c->port[pr] = -1;
        c->anchor = -1;
        if (me->ch[k].type == EXEC_CH_MEMORY)
            st = bind_chan_memory(e, k, i, reg, hb, c);
        else
            st = bind_chan_port(e, k, i, kk, reg, ports, &np, c);
    }
    return st;
}

/* Copies the channels, ports and one exec_bind_t per instance to the device, into bd. */
static int bind_publish(cchan_exec_t *e, exec_binding_t *bd, const exec_chan_rt_t *ch,
                        const cchan_port_channel_t *ports, size_t nports, const exec_bind_t *hb,
                        exec_bind_t *hbs) {
    const uint32_t ni = e->ninst, nch = e->me->nch ? e->me->nch : 1;
    int st;
    if ((st = dev_put(e, ch, (size_t)nch * ni * sizeof *ch, (void **)&bd->ch_dev))) return st;
    if ((st = dev_put(e, ports, (nports ? nports : 1) * sizeof *ports, (void **)&bd->ports_dev)))
        return st;
    for (uint32_t i = 0; i < ni; i++) {
        hbs[i] = *hb;
        hbs[i].ch = bd->ch_dev + (size_t)i * e->me->nch;
        hbs[i].ports = bd->ports_dev; /* channel port indices are into the whole array */
        hbs[i].barrier =
            e->barrier_dev ? e->barrier_dev + (size_t)i * (size_t)(e->nranks - 1) : NULL;
        hbs[i].npeers = (uint32_t)(e->nranks - 1);
        hbs[i].lsem = e->lsem_dev + (size_t)i * e->lsem_stride;
        hbs[i].epochs = e->epochs_dev;
        hbs[i].ctl = e->ctl;
    }
    return dev_put(e, hbs, sizeof *hbs * ni, (void **)&bd->dev);
}

static int bind_build(cchan_exec_t *e, const void *send, void *recv, uint64_t in_bytes,
                      uint64_t out_bytes, exec_binding_t **out) {
    static const char *where = "cchan_exec_run";
    const exec_rank_desc_t *me = e->me;
    uint8_t *ptr[EXEC_NBUF] = {(uint8_t *)(uintptr_t)send, (uint8_t *)recv,
                               (uint8_t *)cchan_mem_ptr(e->scratch)};
    uint64_t len[EXEC_NBUF] = {in_bytes, out_bytes, e->scratch_bytes};
    exec_reg_t *reg[EXEC_NBUF] = {NULL, NULL, NULL};
    int st = bind_find_regs(e, ptr, len, reg);
    if (st) return st;
    const uint32_t ni = e->ninst, nch = me->nch ? me->nch : 1;
    exec_binding_t *bd = (exec_binding_t *)calloc(1, sizeof *bd);
    exec_chan_rt_t *ch = (exec_chan_rt_t *)calloc((size_t)nch * ni, sizeof *ch);
    size_t nports = bind_nports(me, ni);
    cchan_port_channel_t *ports =
        (cchan_port_channel_t *)calloc(nports ? nports : 1, sizeof *ports);
    exec_bind_t *hbs = (exec_bind_t *)calloc(ni, sizeof *hbs);
    if (!bd || !ch || !ports || !hbs) {
        st = execi_error(-ENOMEM, where, "no memory");
        goto fail;
    }
    exec_bind_t hb;
    memset(&hb, 0, sizeof hb);
    for (int b = 0; b < EXEC_NBUF; b++) hb.buf[b] = ptr[b];
    hb.port_off[EXEC_BUF_SCRATCH] = 0;
    for (int b = 0; b < 2; b++) hb.port_off[b] = reg[b] ? (uint64_t)(ptr[b] - reg[b]->ptr) : 0;
    if ((st = bind_channels(e, reg, &hb, ch, ports))) goto fail;
    if ((st = bind_publish(e, bd, ch, ports, nports, &hb, hbs))) goto fail;
    bd->send = send;
    bd->recv = recv;
    bd->in_bytes = in_bytes;
    bd->gen = e->gen;
    free(ch);
    free(ports);
    free(hbs);
    *out = bd;
    return 0;
fail:
    if (bd) {
        dev_free(e, bd->ch_dev);
        dev_free(e, bd->ports_dev);
        dev_free(e, bd->dev);
    }
    free(bd);
    free(ch);
    free(ports);
    free(hbs);
    return st;
}

/* ------------------------------------------------------------------ run */

static void *host_block_main(void *p) {
    host_block_t *hb = (host_block_t *)p;
    hb->status = exec_block_run(hb->a, hb->block, 0, 1, NULL);
    return NULL;
}

/* A block that failed ended a wait: by its deadline, by an abort (a dead peer, cchan_comm_abort on
 * any rank) or by a failed port request. The communicator's record names the wait and the cause;
 * without one (another wait claimed it earlier) an abort's cause is all there is to say. The
 * block's own thread wrote nothing this thread can read. */
static int host_failure(cchan_exec_t *e, int s, uint32_t b, const char *where) {
    int named = cchan_comm_check_device(e->comm);
    if (named == 0 && s != CCHAN_ERR_DEVICE_TIMEOUT) named = cchan_comm_check(e->comm, where);
    if (named != 0)
        return execi_error(s, where, "plan \"%s\", rank %d, block %u: %s", e->plan->name, e->rank,
                           b, cchan_last_error());
    return execi_error(s, where, "plan \"%s\", rank %d, block %u: %s (no wait recorded a cause)",
                       e->plan->name, e->rank, b, cchan_strerror(s));
}

/* Joins the asynchronous host run in flight, if any: its status. */
static int host_join(cchan_exec_t *e) {
    static const char *where = "cchan_exec_run";
    exec_host_run_t *hr = e->inflight;
    if (!hr) return 0;
    e->inflight = NULL;
    for (uint32_t b = 0; b < hr->started; b++) pthread_join(hr->th[b], NULL);
    int st = hr->status;
    for (uint32_t b = 0; b < hr->nblocks && !st; b++)
        if (hr->hb[b].status) st = host_failure(e, hr->hb[b].status, b, where);
    free(hr);
    return st;
}

/* One CPU thread per block. Synchronous: the calling thread runs the last block and the call
 * returns the run's status. Asynchronous: every block gets a thread and host_join ends it. */
static int run_host(cchan_exec_t *e, const exec_kargs_t *a, uint32_t nblocks, int async) {
    static const char *where = "cchan_exec_run";
    exec_host_run_t *hr = (exec_host_run_t *)calloc(1, sizeof *hr);
    if (!hr) return execi_error(-ENOMEM, where, "no memory");
    hr->a = *a;
    hr->nblocks = nblocks;
    uint32_t nthr = async ? nblocks : nblocks - 1; /* else the calling thread runs the last */
    for (uint32_t b = 0; b < nblocks; b++) {
        hr->hb[b].a = &hr->a;
        hr->hb[b].block = b;
    }
    for (uint32_t b = 0; b < nthr; b++) {
        int r = pthread_create(&hr->th[b], NULL, host_block_main, &hr->hb[b]);
        if (r) {
            /* blocks already started would wait forever for their siblings: fatal */
            hr->status = execi_error(-r, where, "pthread_create for block %u of %u", b, nblocks);
            break;
        }
        hr->started++;
    }
    e->inflight = hr;
    if (async && !hr->status) return 0;
    if (!hr->status) host_block_main(&hr->hb[nblocks - 1]);
    return host_join(e);
}

int cchan_exec_sync(cchan_exec_t *e) {
    execi_clear_error();
    if (!e) return execi_error(-EINVAL, "cchan_exec_sync", "exec is NULL");
    if (e->platform == CCHAN_PLATFORM_CUDA) return execi_cuda_sync(e->device);
    return host_join(e);
}

static int run_ranges(const void *send, uint64_t in_bytes, const void *recv, uint64_t out_bytes,
                      const char *where);

/* The call's checks, without side effects: 0 and the sizes, or the error. */
static int run_check(const cchan_exec_t *e, const void *send, const void *recv, size_t count,
                     cchan_exec_dtype_t dtype, cchan_exec_redop_t op, uint64_t *in_out,
                     uint64_t *out_out, const char *where) {
    if (!e) return execi_error(-EINVAL, where, "exec is NULL");
    const cchan_exec_plan_t *p = e->plan;
    size_t es = cchan_exec_dtype_size(dtype);
    if (!es)
        return execi_error(-EINVAL, where, "dtype %d: want CCHAN_EXEC_F32, F16 or BF16",
                           (int)dtype);
    if (op != CCHAN_EXEC_SUM)
        return execi_error(-EINVAL, where, "op %d: want CCHAN_EXEC_SUM", (int)op);
    if (!send || !recv) return execi_error(-EINVAL, where, "send and recv must not be NULL");
    if (count > UINT64_MAX / es) return execi_error(-EINVAL, where, "count %zu overflows", count);
    uint64_t in_bytes = (uint64_t)count * es;
    if (in_bytes % p->granularity)
        return execi_error(-EINVAL, where,
                           "count %zu (%llu bytes): plan \"%s\" runs multiples of its granularity, "
                           "%llu bytes",
                           count, (unsigned long long)in_bytes, p->name,
                           (unsigned long long)p->granularity);
    uint64_t chunk = in_bytes / p->buf_chunks[EXEC_BUF_INPUT];
    uint64_t out_bytes = chunk * p->buf_chunks[EXEC_BUF_OUTPUT];
    /* the ranges first: the overlap test below adds sizes to the addresses */
    int st = run_ranges(send, in_bytes, recv, out_bytes, where);
    if (st) return st;
    const uintptr_t s = (uintptr_t)send, r = (uintptr_t)recv;
    if (p->inplace && p->collective == CCHAN_EXEC_REDUCESCATTER) {
        if (r != s + (uint64_t)e->rank * out_bytes)
            return execi_error(-EINVAL, where,
                               "plan \"%s\" is in place: recv must be the output's place in send "
                               "(send + rank * out_bytes), got %p for send %p",
                               p->name, recv, send);
    } else if (p->inplace) {
        uintptr_t want = r;
        if (p->collective == CCHAN_EXEC_ALLGATHER) want = r + (uint64_t)e->rank * in_bytes;
        if (s != want)
            return execi_error(
                -EINVAL, where,
                "plan \"%s\" is in place: send must be %s (recv%s), got %p for recv %p", p->name,
                "the input's place in recv",
                p->collective == CCHAN_EXEC_ALLGATHER ? " + rank * in_bytes" : "", send, recv);
    } else if (e->uses_input && s < r + out_bytes && r < s + in_bytes) {
        /* (a rank whose input nothing reads, a broadcast's non-root, may pass any send) */
        return execi_error(-EINVAL, where,
                           "plan \"%s\" is out of place: send [%p, +%llu) and recv [%p, +%llu) "
                           "overlap (load an in-place plan)",
                           p->name, send, (unsigned long long)in_bytes, recv,
                           (unsigned long long)out_bytes);
    }
    for (int b = 0; b < 2; b++) {
        if (!(p->need_reg & (1u << b)) || b == execi_inplace_absent(p)) continue;
        const void *ptr = b ? recv : send;
        uint64_t len = b ? out_bytes : in_bytes;
        if (!reg_find(e, ptr, len))
            return execi_error(-EINVAL, where,
                               "plan \"%s\" reaches the peers' %s: register the %s buffer (%p, "
                               "%llu bytes) with cchan_exec_register on every rank",
                               p->name, buf_names[b], b ? "recv" : "send", ptr,
                               (unsigned long long)len);
    }
    *in_out = in_bytes;
    *out_out = out_bytes;
    return 0;
}

/* The call's buffers must end inside the address space: the kernels compute their ends. */
static int run_ranges(const void *send, uint64_t in_bytes, const void *recv, uint64_t out_bytes,
                      const char *where) {
    if (in_bytes > UINTPTR_MAX - (uintptr_t)send || out_bytes > UINTPTR_MAX - (uintptr_t)recv)
        return execi_error(CCHAN_ERR_RANGE, where,
                           "send %p (%llu bytes) or recv %p (%llu bytes) runs past the end of the "
                           "address space",
                           send, (unsigned long long)in_bytes, recv, (unsigned long long)out_bytes);
    return 0;
}

/* With CCHAN_EXEC_NO_GROW a run never sets scratch up: it must be there already. */
static int run_scratch(const cchan_exec_t *e, uint64_t in_bytes, const char *where) {
    uint64_t need = scratch_need(e->plan, in_bytes);
    if (!e->no_grow || need <= e->scratch_bytes) return 0;
    return execi_error(CCHAN_ERR_NO_RESOURCE, where,
                       "plan \"%s\": %llu bytes of input need %llu bytes of scratch, %llu are set "
                       "up (CCHAN_EXEC_NO_GROW): call cchan_exec_prepare(exec, %llu) on every rank "
                       "first",
                       e->plan->name, (unsigned long long)in_bytes, (unsigned long long)need,
                       (unsigned long long)e->scratch_bytes, (unsigned long long)in_bytes);
}

int cchan_exec_check(const cchan_exec_t *e, const void *send, const void *recv, size_t count,
                     cchan_exec_dtype_t dtype) {
    static const char *where = "cchan_exec_check";
    execi_clear_error();
    uint64_t ib = 0, ob = 0;
    int st = run_check(e, send, recv, count, dtype, CCHAN_EXEC_SUM, &ib, &ob, where);
    return st ? st : run_scratch(e, ib, where);
}

/* Instances for a run of in_bytes (docs/executor.md, "Instances"): fixed, or as many as give
 * every instance EXEC_INST_MIN_BYTES and the run target_blocks blocks, at most ninst, and never
 * more than the chunk has align-sized parts. */
static uint32_t run_instances(const cchan_exec_t *e, uint64_t in_bytes) {
    if (e->inst_fixed) return e->ninst;
    const cchan_exec_plan_t *p = e->plan;
    uint64_t k = (e->target_blocks + p->nblocks - 1) / p->nblocks;
    uint64_t by_size = in_bytes / EXEC_INST_MIN_BYTES;
    uint64_t by_chunk = in_bytes / p->buf_chunks[EXEC_BUF_INPUT] / p->align;
    if (by_size < k) k = by_size;
    if (by_chunk < k) k = by_chunk;
    if (k > e->ninst) k = e->ninst;
    return k ? (uint32_t)k : 1u;
}

int cchan_exec_instances_for(const cchan_exec_t *e, uint64_t in_bytes) {
    return e ? (int)run_instances(e, in_bytes) : no_exec("cchan_exec_instances_for");
}

int cchan_exec_run(cchan_exec_t *e, const void *send, void *recv, size_t count,
                   cchan_exec_dtype_t dtype, cchan_exec_redop_t op, void *stream) {
    static const char *where = "cchan_exec_run";
    execi_clear_error();
    if (e) {
        int alive = cchan_comm_check(e->comm, where);
        if (alive) return alive;
    }
    if (e && count == 0) return 0;
    uint64_t in_bytes = 0, out_bytes = 0;
    int cst = run_check(e, send, recv, count, dtype, op, &in_bytes, &out_bytes, where);
    if (!cst) cst = run_scratch(e, in_bytes, where);
    if (cst) return cst;
    /* the previous run's state is this one's: an asynchronous host run ends first */
    int st = host_join(e);
    if (st) return st;
    const cchan_exec_plan_t *p = e->plan;
    uint64_t chunk = in_bytes / p->buf_chunks[EXEC_BUF_INPUT];
    /* collective only where scratch must grow (never with CCHAN_EXEC_NO_GROW, checked above) */
    if ((st = scratch_grow(e, in_bytes))) return st;
    exec_binding_t *bd = e->bindings;
    while (bd &&
           !(bd->send == send && bd->recv == recv && bd->in_bytes == in_bytes && bd->gen == e->gen))
        bd = bd->next;
    if (!bd) {
        if ((st = bind_build(e, send, recv, in_bytes, out_bytes, &bd))) return st;
        bd->next = e->bindings;
        e->bindings = bd;
    }
    exec_kargs_t a;
    memset(&a, 0, sizeof a);
    a.prog = e->prog_dev;
    a.bind = bd->dev;
    a.nblocks = e->me->nblocks;
    a.ops_off = e->ops_off;
    a.refs_off = e->refs_off;
    a.dtype = (uint32_t)dtype;
    a.chunk_bytes = chunk;
    a.loop_unit = p->loop_unit;
    a.pblocks = p->nblocks;
    uint32_t ninst = run_instances(e, in_bytes);
    a.grid = p->nblocks * ninst;
    {
        /* every instance's part of a chunk: a multiple of align */
        uint64_t per = (chunk + ninst - 1) / ninst;
        a.inst_bytes = (per + p->align - 1) / p->align * p->align;
    }
    a.align = p->align;
    a.scratch_stride = chunk * p->scratch_factor;
    /* The halves stay where they are whatever the size: a peer one run ahead writes the other
     * half, which must not overlap what this rank still reads, even when the sizes differ. */
    a.scratch_half = p->ll_double_buffer ? e->scratch_bytes / 2 : 0;
    a.use_smem = e->smem != 0;
    if (e->platform == CCHAN_PLATFORM_HOST) return run_host(e, &a, a.grid, stream != NULL);
    /* programmatic dependent launch up to 2 MiB, as cchan_coll does (CCHAN_EXEC_PDL=0: off) */
    int pdl = e->pdl && in_bytes <= EXEC_PDL_MAX_BYTES;
    return execi_cuda_launch(e->device, &a, a.grid, e->nthreads, e->smem, p->cross_block, pdl,
                             stream);
}
