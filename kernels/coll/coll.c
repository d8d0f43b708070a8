/* cchan_coll host runtime: setup once (scratch, semaphores, LL epochs), then every call fills a
 * coll_args_t and runs one kernel (CUDA) or the same body on CPU threads (host platform). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_internal.h"

#define COLL_KiB ((size_t)1 << 10)
#define COLL_MiB ((size_t)1 << 20)

/* Defaults. GPU: LL kernels always run COLL_LL_BLOCKS_GPU blocks (their per-block epochs must see
 * every call); HB kernels up to 128 blocks of 512 threads, one block per 32 KiB a rank sends. */
#define COLL_THREADS_GPU 512u
#define COLL_LL_BLOCKS_GPU 16u
#define COLL_HB_BLOCKS_GPU 128
#define COLL_HB_BYTES_PER_BLOCK (32 * COLL_KiB)
#define COLL_BLOCKS_HOST 2      /* CPU threads per rank on the host platform */
#define COLL_HOST_BLOCKS_MAX 64 /* max_blocks on the host platform (one thread each) */
#define COLL_SCRATCH_GPU (128 * COLL_MiB)
#define COLL_SCRATCH_HOST (8 * COLL_MiB)
#define COLL_LL_SLOT_MAX (2 * COLL_MiB) /* LL16 packets: 1 MiB of payload per source */
#define COLL_RING_BLOCKS_MAX 32u        /* PORT_RING: each block drives its own DMA chunks */
#define COLL_RING_BYTES_PER_BLOCK (2 * COLL_MiB)
#define COLL_RING_CHUNK_MAX (2 * COLL_MiB) /* bytes per DMA: a proxy round trip each */
#define COLL_SW_CHUNK_MAX (16 * COLL_MiB)  /* SWITCH: bytes of a round (two regions of it) */

/* Tuning parameters (cchan_coll_set_param), with their built-in defaults and limits. */
enum {
    COLL_P_CE_LANES,
    COLL_P_CE_CHUNK,
    COLL_P_CE_SM_PERMILLE,
    COLL_P_CE_LOCAL,
    COLL_P_ZC_BLOCK_BYTES,
    COLL_P_PORT_RING,
    COLL_P_LL_SPREAD,
    COLL_P_PDL,
    COLL_P_CE_RS,
    COLL_P_CE_RAMP,
    COLL_P_CE_REGIONS,
    COLL_P_CE_RS_LANES,
    COLL_P_ZC_AG_MAX,
    COLL_P_ZC_RS_MAX,
    COLL_PARAM_COUNT
};
/* Defaults measured on 2xH200 with cchan-coll-bench --sweep (docs/collectives.md, "Tuning"). */
static const struct coll_param_def {
    const char *name, *env;
    int64_t def, min, max;
} coll_param_defs[COLL_PARAM_COUNT] = {
    {"ce_lanes", "CCHAN_COLL_CE_LANES", 1, 1, COLLI_CE_LANES_MAX},
    {"ce_chunk", "CCHAN_COLL_CE_CHUNK", 64 * (int64_t)COLL_MiB, 4 * (int64_t)COLL_KiB, INT64_MAX},
    /* -1: AllGather from 512 MiB 0 where every rank's send and recv allocations have 2 MiB pages,
     * else 400 (AllGather 1 GiB on 2xH200: 386 against 378 GB/s with such pages, 262 against 378
     * without); AllReduce 400 */
    {"ce_sm_permille", "CCHAN_COLL_CE_SM_PERMILLE", -1, -1, 1000},
    {"ce_local", "CCHAN_COLL_CE_LOCAL", 1, 0, 1},
    {"zc_block_bytes", "CCHAN_COLL_ZC_BLOCK_BYTES", 32 * (int64_t)COLL_KiB, (int64_t)COLL_KiB,
     INT64_MAX},
    /* 1: registrations build PORT_RING's port channels (kept until destroy); 0: they do not */
    {"port_ring", "CCHAN_COLL_PORT_RING", 1, 0, 1},
    /* LL kernels, 1: packets dealt to the blocks a warp at a time (every SM sends a share);
     * 0: each block takes a contiguous run of nthreads packets (small messages use few SMs) */
    {"ll_spread", "CCHAN_COLL_LL_SPREAD", 1, 0, 1},
    /* 1: kernels of calls up to COLL_PDL_MAX_BYTES launch as programmatic dependents of the
     * stream's previous kernel (sm_90+) */
    {"pdl", "CCHAN_COLL_PDL", 1, 0, 1},
    /* CE AllReduce, 1: the copy engines push the reduce-scatter's shards too (three staging
     * regions); 0: the SMs push them inside the CE_RS kernel; -1: 1 where every rank's send and
     * recv allocations have 2 MiB pages (1 GiB on 2xH200: 370-373 against 334 GB/s) */
    {"ce_rs", "CCHAN_COLL_CE_RS", -1, -1, 1},
    /* ce_rs AllReduce, 2: the last three chunks are 1/2, 1/4, 1/8 of ce_chunk (a shorter
     * pipeline drain); 1: and the first three 1/8, 1/4, 1/2 (a shorter fill); 0: equal chunks */
    {"ce_ramp", "CCHAN_COLL_CE_RAMP", 0, 0, 2},
    /* ce_rs AllReduce: staging regions in the scratch (chunk k uses region k % ce_regions; the
     * copy engines run ce_regions - 1 chunks ahead of the reduction) */
    {"ce_regions", "CCHAN_COLL_CE_REGIONS", 3, 2, 8},
    /* ce_rs AllReduce: copy-engine lanes for the shard pushes (chunk k on lane k % ce_rs_lanes;
     * at most ce_regions); 1: one after the other, in chunk order, so the first kernel waits for
     * one chunk's copy, not three shared ones (1 GiB on 2xH200: 2857 against 2902 us) */
    {"ce_rs_lanes", "CCHAN_COLL_CE_RS_LANES", 1, 1, 8},
    /* HB AllGather on a registered recv: zero-copy (one kernel storing into the peers' recv) up
     * to this many bytes of output (2xH200, 4 MiB: 12.0 against the staged kernel's 14.9 us;
     * from 64 MiB the CE row takes over); 0: never */
    {"zc_ag_max", "CCHAN_COLL_ZC_AG_MAX", 64 * (int64_t)COLL_MiB, 0, INT64_MAX},
    /* HB ReduceScatter on a registered send: zero-copy (one kernel reading every rank's send)
     * up to this many bytes of input (2xH200 against the staged kernel: 1 MiB 9.14 against 10.29
     * us, 64 MiB 111.2 against 126.2; beyond, unmeasured: NVLink reads fell behind stores for
     * AllReduce); 0: never */
    {"zc_rs_max", "CCHAN_COLL_ZC_RS_MAX", 64 * (int64_t)COLL_MiB, 0, INT64_MAX},
};

typedef struct coll_reg {
    struct coll_reg *next;
    uint8_t *ptr;
    size_t bytes;
    cchan_mem_t *mem;
    cchan_mem_t *peers[COLL_MAX_RANKS];
    int big_pages;              /* every rank's allocation is a whole number of 2 MiB */
    cchan_sem_set_t *ring_sems; /* PORT_RING: the port channels' semaphores (host-mapped) */
    coll_ring_lane_t *ring_dev; /* PORT_RING: device array [ring_blocks] */
} coll_reg_t;

struct cchan_coll {
    cchan_comm_t *comm;
    int rank, nranks, device;
    cchan_platform_t platform;
    uint32_t nthreads, ll_blocks, hb_blocks, ring_blocks;
    size_t scratch_bytes;
    cchan_mem_t *scratch;
    cchan_mem_t *peer_scratch[COLL_MAX_RANKS];
    cchan_sem_set_t *sems;
    cchan_semaphore_t *sems_dev;     /* [hb_blocks][nranks - 1] */
    uint32_t *ll_epoch_dev;          /* [ll_blocks] */
    cchan_proxy_t *proxy;            /* PORT_RING's port channels */
    cchan_sem_set_t *credits;        /* PORT_RING: receive-slot credits, one per block */
    cchan_semaphore_t *credits_dev;  /* [ring_blocks][to prev, from next] */
    cchan_switch_t *sw_owner;        /* SWITCH: the switch channel over every rank's scratch */
    colli_ce_t *ce;                  /* CE_ALLPAIRS: copy-engine lanes (CUDA) */
    int64_t param[COLL_PARAM_COUNT]; /* cchan_coll_set_param */
    coll_args_t base;                /* fields every call shares */
    coll_reg_t *regs;
    coll_reg_t *retired; /* deregistered, but their PORT_RING channels still name them */
};

/* ------------------------------------------------------------------ errors */

static _Thread_local char coll_errmsg[512];
static _Thread_local int coll_err_own; /* 1: coll_errmsg holds the last error */

int colli_error(int status, const char *where, const char *fmt, ...) {
    int n = snprintf(coll_errmsg, sizeof coll_errmsg, "%s: ", where);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof coll_errmsg)
        vsnprintf(coll_errmsg + n, sizeof coll_errmsg - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(coll_errmsg);
    snprintf(coll_errmsg + len, sizeof coll_errmsg - len, " (%s)", cchan_strerror(status));
    coll_err_own = 1;
    return status;
}

/* A cchan runtime call failed: its own message is in cchan_last_error(); prefix ours. */
static int coll_wrap(int status, const char *where, const char *what) {
    return colli_error(status, where, "%s: %s", what, cchan_last_error());
}

static void coll_clear_error(void) {
    coll_errmsg[0] = '\0';
    coll_err_own = 0;
}

const char *cchan_coll_last_error(void) { return coll_err_own ? coll_errmsg : cchan_last_error(); }

/* ------------------------------------------------------------------ names, sizes */

const char *cchan_coll_algo_name(cchan_coll_algo_t algo) {
    switch (algo) {
    case CCHAN_COLL_AUTO: return "auto";
    case CCHAN_COLL_LL_ALLPAIRS: return "ll_allpairs";
    case CCHAN_COLL_HB_ALLPAIRS: return "hb_allpairs";
    case CCHAN_COLL_SWITCH: return "switch";
    case CCHAN_COLL_PORT_RING: return "port_ring";
    case CCHAN_COLL_CE_ALLPAIRS: return "ce_allpairs";
    default: return "unknown";
    }
}

size_t cchan_coll_dtype_size(cchan_coll_dtype_t dtype) {
    switch (dtype) {
    case CCHAN_COLL_F32: return 4;
    case CCHAN_COLL_F16:
    case CCHAN_COLL_BF16: return 2;
    default: return 0;
    }
}

/* ------------------------------------------------------------------ tuning parameters */

static int coll_param_index(const char *name) {
    for (int i = 0; name && i < COLL_PARAM_COUNT; i++)
        if (!strcmp(name, coll_param_defs[i].name)) return i;
    return -1;
}

int cchan_coll_set_param(cchan_coll_t *c, const char *name, int64_t value) {
    static const char *where = "cchan_coll_set_param";
    coll_clear_error();
    if (!c) return colli_error(-EINVAL, where, "coll is NULL");
    int i = coll_param_index(name);
    if (i < 0) return colli_error(-EINVAL, where, "unknown parameter '%s'", name ? name : "(null)");
    const struct coll_param_def *d = &coll_param_defs[i];
    if (value < d->min || value > d->max)
        return colli_error(-EINVAL, where, "%s = %lld: want [%lld, %lld]", name, (long long)value,
                           (long long)d->min, (long long)d->max);
    c->param[i] = value;
    return 0;
}

int cchan_coll_get_param(const cchan_coll_t *c, const char *name, int64_t *out) {
    static const char *where = "cchan_coll_get_param";
    coll_clear_error();
    if (!c || !out) return colli_error(-EINVAL, where, "coll and out must not be NULL");
    int i = coll_param_index(name);
    if (i < 0) return colli_error(-ENOENT, where, "unknown parameter '%s'", name ? name : "(null)");
    *out = c->param[i];
    return 0;
}

/* ------------------------------------------------------------------ device memory */

static int coll_dev_alloc(cchan_coll_t *c, size_t bytes, void **out) {
    if (c->platform == CCHAN_PLATFORM_CUDA) return colli_cuda_alloc(c->device, bytes, out);
    void *p = calloc(1, bytes);
    if (!p) return colli_error(-ENOMEM, "cchan_coll_create", "%zu bytes of state", bytes);
    *out = p;
    return 0;
}

static void coll_dev_free(cchan_coll_t *c, void *p) {
    if (!p) return;
    if (c->platform == CCHAN_PLATFORM_CUDA)
        (void)colli_cuda_free(c->device, p);
    else
        free(p);
}

static int coll_dev_upload(cchan_coll_t *c, void *dst, const void *src, size_t bytes) {
    if (c->platform == CCHAN_PLATFORM_CUDA)
        return colli_cuda_copy_to_device(c->device, dst, src, bytes);
    memcpy(dst, src, bytes);
    return 0;
}

/* ------------------------------------------------------------------ PORT_RING setup */

static int coll_ring_next(const cchan_coll_t *c) { return (c->rank + 1) % c->nranks; }
static int coll_ring_prev(const cchan_coll_t *c) { return (c->rank + c->nranks - 1) % c->nranks; }

/* The proxy and the credit semaphores (collective: cchan_sem_set_create). */
static int coll_ring_setup(cchan_coll_t *c) {
    static const char *where = "cchan_coll_create";
    int st = cchan_proxy_create(c->comm, NULL, &c->proxy);
    if (st < 0) return coll_wrap(st, where, "cchan_proxy_create");
    if ((st = cchan_proxy_start(c->proxy)) < 0) return coll_wrap(st, where, "cchan_proxy_start");
    st = cchan_sem_set_create(c->comm, (int)c->ring_blocks, 0, &c->credits);
    if (st < 0) return coll_wrap(st, where, "cchan_sem_set_create(credits)");
    size_t n = 2 * (size_t)c->ring_blocks;
    cchan_semaphore_t *h = (cchan_semaphore_t *)calloc(n, sizeof *h);
    if (!h) return colli_error(-ENOMEM, where, "no memory");
    for (uint32_t b = 0; b < c->ring_blocks && st >= 0; b++) {
        st = cchan_sem_set_get(c->credits, coll_ring_prev(c), (int)b, &h[2 * b]);
        if (st >= 0) st = cchan_sem_set_get(c->credits, coll_ring_next(c), (int)b, &h[2 * b + 1]);
    }
    if (st < 0) {
        free(h);
        return coll_wrap(st, where, "cchan_sem_set_get(credits)");
    }
    st = coll_dev_alloc(c, n * sizeof *h, (void **)&c->credits_dev);
    if (st >= 0) st = coll_dev_upload(c, c->credits_dev, h, n * sizeof *h);
    free(h);
    if (st < 0) return st;
    c->base.credits = c->credits_dev;
    return 0;
}

/* A registration's port channels, block by block (collective: its semaphore set). */
static int coll_ring_register(cchan_coll_t *c, coll_reg_t *g) {
    static const char *where = "cchan_coll_register";
    const int nb = (int)c->ring_blocks, next = coll_ring_next(c), prev = coll_ring_prev(c);
    int st = cchan_sem_set_create(c->comm, 2 * nb, CCHAN_SEM_HOST_MAPPED, &g->ring_sems);
    if (st < 0) return coll_wrap(st, where, "cchan_sem_set_create(port ring)");
    coll_ring_lane_t *h = (coll_ring_lane_t *)calloc((size_t)nb, sizeof *h);
    if (!h) return colli_error(-ENOMEM, where, "no memory");
    const char *what = "";
    for (int b = 0; b < nb && st >= 0; b++) {
        coll_ring_lane_t *l = &h[b];
        what = "cchan_port_channel_create(to next)";
        st = cchan_port_channel_create(c->proxy, CCHAN_TRANSPORT_AUTO, g->ring_sems, next, b,
                                       c->peer_scratch[next], g->mem, &l->to_scratch);
        if (st >= 0)
            st = cchan_port_channel_create(c->proxy, CCHAN_TRANSPORT_AUTO, g->ring_sems, next,
                                           nb + b, g->peers[next], g->mem, &l->to_self);
        if (st < 0) break;
        if (prev == next) { /* two ranks: the same semaphores carry both directions */
            l->from_scratch = l->to_scratch;
            l->from_self = l->to_self;
            continue;
        }
        what = "cchan_port_channel_create(from prev)";
        st = cchan_port_channel_create(c->proxy, CCHAN_TRANSPORT_AUTO, g->ring_sems, prev, b,
                                       c->peer_scratch[prev], g->mem, &l->from_scratch);
        if (st >= 0)
            st = cchan_port_channel_create(c->proxy, CCHAN_TRANSPORT_AUTO, g->ring_sems, prev,
                                           nb + b, g->peers[prev], g->mem, &l->from_self);
    }
    if (st < 0) {
        free(h);
        return coll_wrap(st, where, what);
    }
    st = coll_dev_alloc(c, (size_t)nb * sizeof *h, (void **)&g->ring_dev);
    if (st >= 0) st = coll_dev_upload(c, g->ring_dev, h, (size_t)nb * sizeof *h);
    free(h);
    return st;
}

/* ------------------------------------------------------------------ create / destroy */

static void coll_reg_free(cchan_coll_t *c, coll_reg_t *g) {
    coll_dev_free(c, g->ring_dev);
    if (g->ring_sems) cchan_sem_set_destroy(g->ring_sems);
    for (int p = 0; p < c->nranks; p++)
        if (p != c->rank && g->peers[p]) cchan_mem_destroy(g->peers[p]);
    if (g->mem) cchan_mem_destroy(g->mem);
    free(g);
}

/* A registration leaving use: freed, unless PORT_RING port channels were made for it. Port channels
 * live as long as their proxy and keep naming its semaphores and mappings, so those stay on the
 * retired list until cchan_coll_destroy (freed now, a later registration could get the same
 * semaphore addresses and be refused as a second writer, and the proxy would hold dangling
 * pointers). */
static void coll_reg_release(cchan_coll_t *c, coll_reg_t *g) {
    if (!g->ring_sems) {
        coll_reg_free(c, g);
        return;
    }
    g->next = c->retired;
    c->retired = g;
}

static void coll_free_list(cchan_coll_t *c, coll_reg_t **list) {
    while (*list) {
        coll_reg_t *g = *list;
        *list = g->next;
        coll_reg_free(c, g);
    }
}

static void coll_release(cchan_coll_t *c) {
    if (c->ce) colli_ce_destroy(c->device, c->ce);
    if (c->proxy) {
        (void)cchan_proxy_stop(c->proxy, 5000);
        (void)cchan_proxy_destroy(c->proxy);
    }
    coll_free_list(c, &c->regs);
    coll_free_list(c, &c->retired);
    coll_dev_free(c, c->credits_dev);
    if (c->sw_owner) cchan_switch_destroy(c->sw_owner);
    if (c->credits) cchan_sem_set_destroy(c->credits);
    coll_dev_free(c, c->sems_dev);
    coll_dev_free(c, c->ll_epoch_dev);
    if (c->sems) cchan_sem_set_destroy(c->sems);
    for (int p = 0; p < c->nranks; p++)
        if (p != c->rank && c->peer_scratch[p]) cchan_mem_destroy(c->peer_scratch[p]);
    if (c->scratch) cchan_mem_destroy(c->scratch);
    free(c);
}

/* Bytes of a CE staging slot: the HB and PORT_RING areas (one call at a time uses scratch) cut
 * into `regions` regions of a slot per peer. */
static uint64_t coll_ce_slot_bytes(const coll_args_t *a, int regions) {
    const uint64_t peers = a->nranks > 1 ? (uint64_t)a->nranks - 1 : 1;
    return (a->sw_off - a->hb_off) / ((uint64_t)regions * peers) / 16 * 16;
}

/* The checks of the caller's arguments, which may differ between ranks. */
static int coll_check_config(const cchan_coll_config_t *cfg, cchan_coll_t **out) {
    static const char *where = "cchan_coll_create";
    if (!out) return colli_error(-EINVAL, where, "out must not be NULL");
    if (!cfg) return 0;
    if (cfg->magic != CCHAN_COLL_CONFIG_MAGIC || cfg->size < sizeof(cchan_coll_config_t))
        return colli_error(-EINVAL, where,
                           "config not initialized with CCHAN_COLL_CONFIG_INIT (magic 0x%x, size "
                           "%zu)",
                           cfg->magic, cfg->size);
    if (cfg->size > sizeof(cchan_coll_config_t) || cfg->version == 0 ||
        cfg->version > CCHAN_VERSION_CODE)
        return colli_error(CCHAN_ERR_VERSION, where,
                           "config version %u, size %zu: this library is version %d, size %zu "
                           "(use CCHAN_COLL_CONFIG_INIT)",
                           cfg->version, cfg->size, CCHAN_VERSION_CODE, sizeof *cfg);
    if (cfg->max_blocks < 0)
        return colli_error(-EINVAL, where, "max_blocks %d < 0", cfg->max_blocks);
    return 0;
}

int cchan_coll_create(cchan_comm_t *comm, const cchan_coll_config_t *cfg, cchan_coll_t **out) {
    static const char *where = "cchan_coll_create";
    coll_clear_error();
    if (!comm) return colli_error(-EINVAL, where, "comm must not be NULL");
    /* A bad argument on one rank fails every rank now, naming it, not at a bootstrap timeout. */
    int bad = coll_check_config(cfg, out);
    int agreed = cchan_comm_agree(comm, bad, where, bad ? coll_errmsg : NULL);
    if (agreed) return bad ? bad : agreed; /* the peer's reason is in cchan_last_error() */
    if (cfg && (cfg->magic != CCHAN_COLL_CONFIG_MAGIC || cfg->size < sizeof(cchan_coll_config_t)))
        return colli_error(-EINVAL, where,
                           "config not initialized with CCHAN_COLL_CONFIG_INIT (magic 0x%x, size "
                           "%zu)",
                           cfg->magic, cfg->size);
    if (cfg && cfg->max_blocks < 0) return colli_error(-EINVAL, where, "max_blocks < 0");
    int nranks = cchan_comm_size(comm);
    if (nranks < 1 || nranks > COLL_MAX_RANKS)
        return colli_error(CCHAN_ERR_UNSUPPORTED, where,
                           "%d ranks: cchan_coll supports 1 to %d ranks of one host", nranks,
                           COLL_MAX_RANKS);
    cchan_platform_t platform = cchan_comm_platform(comm);
    if (platform != CCHAN_PLATFORM_CUDA && platform != CCHAN_PLATFORM_HOST)
        return colli_error(CCHAN_ERR_UNSUPPORTED, where, "platform %d (CUDA and host only)",
                           (int)platform);

    cchan_coll_t *c = (cchan_coll_t *)calloc(1, sizeof *c);
    if (!c) return colli_error(-ENOMEM, where, "no memory");
    c->comm = comm;
    c->rank = cchan_comm_rank(comm);
    c->nranks = nranks;
    c->device = cchan_comm_device(comm);
    c->platform = platform;
    for (int i = 0; i < COLL_PARAM_COUNT; i++) {
        const struct coll_param_def *d = &coll_param_defs[i];
        const char *env = getenv(d->env);
        c->param[i] = d->def;
        if (!env || !*env) continue;
        char *end;
        errno = 0;
        long long v = strtoll(env, &end, 0);
        if (errno || *end || v < d->min || v > d->max) {
            free(c);
            return colli_error(-EINVAL, where, "%s=%s: want an integer in [%lld, %lld]", d->env,
                               env, (long long)d->min, (long long)d->max);
        }
        c->param[i] = v;
    }
    int gpu = platform == CCHAN_PLATFORM_CUDA;
    c->nthreads = gpu ? COLL_THREADS_GPU : 1u;
    int maxb =
        cfg && cfg->max_blocks ? cfg->max_blocks : (gpu ? COLL_HB_BLOCKS_GPU : COLL_BLOCKS_HOST);
    if (!gpu && maxb > COLL_HOST_BLOCKS_MAX) maxb = COLL_HOST_BLOCKS_MAX;
    c->hb_blocks = (uint32_t)maxb;
    c->ll_blocks = gpu ? (maxb < (int)COLL_LL_BLOCKS_GPU ? (uint32_t)maxb : COLL_LL_BLOCKS_GPU)
                       : (uint32_t)maxb;
    size_t scratch = cfg && cfg->scratch_bytes ? cfg->scratch_bytes
                                               : (gpu ? COLL_SCRATCH_GPU : COLL_SCRATCH_HOST);
    /* LL slots: a quarter of the scratch at most; HB staging: the rest, two regions. */
    size_t n2 = 2 * (size_t)nranks;
    size_t ll_slot = scratch / (4 * n2) / 16 * 16;
    if (ll_slot > COLL_LL_SLOT_MAX) ll_slot = COLL_LL_SLOT_MAX;
    size_t hb_slot = (scratch - n2 * ll_slot) / n2 / 16 * 16;
    if (ll_slot < 16 || hb_slot < 256) {
        free(c);
        return colli_error(-EINVAL, where, "scratch_bytes %zu too small for %d ranks (>= %zu)",
                           scratch, nranks, n2 * (16 + 256));
    }
    if (c->hb_blocks > hb_slot / 256) c->hb_blocks = (uint32_t)(hb_slot / 256); /* lanes >= 256 B */
    /* PORT_RING receive slots: as much again as the HB staging, two slots per block */
    c->ring_blocks = c->hb_blocks < COLL_RING_BLOCKS_MAX ? c->hb_blocks : COLL_RING_BLOCKS_MAX;
    size_t ring_chunk = n2 * hb_slot / (2 * (size_t)c->ring_blocks) / 16 * 16;
    if (ring_chunk > COLL_RING_CHUNK_MAX) ring_chunk = COLL_RING_CHUNK_MAX;
    size_t sw_chunk = n2 * hb_slot / 2;
    if (sw_chunk > COLL_SW_CHUNK_MAX) sw_chunk = COLL_SW_CHUNK_MAX;
    sw_chunk = sw_chunk / (16 * (size_t)nranks) * (16 * (size_t)nranks);
    c->scratch_bytes =
        n2 * (ll_slot + hb_slot) + 2 * (size_t)c->ring_blocks * ring_chunk + 2 * sw_chunk;

    int st;
    const char *step = "";
#define COLL_TRY(call, what)                                                                       \
    do {                                                                                           \
        step = what;                                                                               \
        st = (call);                                                                               \
        if (st < 0) goto fail_rt;                                                                  \
    } while (0)
    COLL_TRY(cchan_mem_alloc(comm, c->scratch_bytes, 0, &c->scratch), "cchan_mem_alloc(scratch)");
    COLL_TRY(cchan_mem_exchange(comm, c->scratch, c->peer_scratch), "cchan_mem_exchange(scratch)");
    if (nranks > 1)
        COLL_TRY(cchan_sem_set_create(comm, (int)c->hb_blocks, 0, &c->sems),
                 "cchan_sem_set_create");
    /* portable path: the flags never opt in to multicast (DESIGN.md section 8) */
    COLL_TRY(cchan_switch_channel_create(comm, c->scratch, NULL, 0, &c->base.sw, &c->sw_owner),
             "cchan_switch_channel_create");
#undef COLL_TRY

    coll_args_t *a = &c->base;
    cchan_switch_channel_t sw = a->sw;
    memset(a, 0, sizeof *a);
    a->sw = sw;
    a->rank = c->rank;
    a->nranks = nranks;
    a->scratch = (uint8_t *)cchan_mem_ptr(c->scratch);
    for (int p = 0; p < nranks; p++)
        a->peer_scratch[p] = (uint8_t *)cchan_mem_ptr(c->peer_scratch[p]);
    a->ll_off = 0;
    a->ll_slot = ll_slot;
    a->hb_off = n2 * ll_slot;
    a->hb_slot = hb_slot;
    a->ring_off = n2 * (ll_slot + hb_slot);
    a->ring_chunk = ring_chunk;
    a->sw_off = a->ring_off + 2 * (size_t)c->ring_blocks * ring_chunk;
    /* CE all-pairs AllReduce stages in the HB and PORT_RING areas together (one call at a time
     * uses scratch, and its first barrier waits for every peer to have finished the last one) */
    a->ce_off = a->hb_off;
    a->ce_slot = coll_ce_slot_bytes(a, 2);
    a->sw_chunk = sw_chunk;
    a->ll_ctl = cchan_comm_wait_ctl(comm, -1, 0xC011u);

    st = coll_dev_alloc(c, c->ll_blocks * sizeof(uint32_t), (void **)&c->ll_epoch_dev);
    if (st < 0) goto fail;
    {
        uint32_t *zero = (uint32_t *)calloc(c->ll_blocks, sizeof(uint32_t));
        if (!zero) {
            st = colli_error(-ENOMEM, where, "no memory");
            goto fail;
        }
        st = coll_dev_upload(c, c->ll_epoch_dev, zero, c->ll_blocks * sizeof(uint32_t));
        free(zero);
        if (st < 0) goto fail;
    }
    a->ll_epoch = c->ll_epoch_dev;
    if (nranks > 1) {
        size_t ns = (size_t)c->hb_blocks * (size_t)(nranks - 1);
        cchan_semaphore_t *h = (cchan_semaphore_t *)calloc(ns, sizeof *h);
        if (!h) {
            st = colli_error(-ENOMEM, where, "no memory");
            goto fail;
        }
        for (uint32_t b = 0; b < c->hb_blocks && st >= 0; b++)
            for (int j = 1; j < nranks && st >= 0; j++) {
                int p = (c->rank + j) % nranks;
                st = cchan_sem_set_get(c->sems, p, (int)b, &h[b * (size_t)(nranks - 1) + (j - 1)]);
            }
        if (st < 0) {
            free(h);
            st = coll_wrap(st, where, "cchan_sem_set_get");
            goto fail;
        }
        st = coll_dev_alloc(c, ns * sizeof *h, (void **)&c->sems_dev);
        if (st >= 0) st = coll_dev_upload(c, c->sems_dev, h, ns * sizeof *h);
        free(h);
        if (st < 0) goto fail;
        a->sems = c->sems_dev;
        if ((st = coll_ring_setup(c)) < 0) goto fail;
    }
    if (gpu && (st = colli_ce_create(c->device, &c->ce)) < 0) goto fail;
    *out = c;
    return 0;

fail_rt:
    st = coll_wrap(st, where, step);
fail:
    coll_release(c);
    return st;
}

int cchan_coll_destroy(cchan_coll_t *c) {
    coll_clear_error();
    if (!c) return colli_error(-EINVAL, "cchan_coll_destroy", "coll is NULL");
    /* Peers may still read our scratch through their mappings until they are done with it. */
    int st = cchan_bootstrap_barrier(cchan_comm_bootstrap(c->comm));
    coll_release(c);
    if (st < 0) return coll_wrap(st, "cchan_coll_destroy", "cchan_bootstrap_barrier");
    return 0;
}

/* ------------------------------------------------------------------ registration */

int cchan_coll_register(cchan_coll_t *c, void *ptr, size_t bytes) {
    static const char *where = "cchan_coll_register";
    coll_clear_error();
    if (!c || !ptr || !bytes) return colli_error(-EINVAL, where, "coll, ptr and bytes must be set");
    coll_reg_t *g = (coll_reg_t *)calloc(1, sizeof *g);
    if (!g) return colli_error(-ENOMEM, where, "no memory");
    g->ptr = (uint8_t *)ptr;
    g->bytes = bytes;
    int st = cchan_mem_register(c->comm, ptr, bytes, 0, &g->mem);
    if (st < 0) {
        free(g);
        return coll_wrap(st, where, "cchan_mem_register");
    }
    st = cchan_mem_exchange(c->comm, g->mem, g->peers);
    if (st < 0) {
        cchan_mem_destroy(g->mem);
        free(g);
        return coll_wrap(st, where, "cchan_mem_exchange");
    }
    /* whether every rank's allocation has 2 MiB pages (ce_allpairs picks its SM share by it) */
    int mine = c->platform == CCHAN_PLATFORM_CUDA && colli_cuda_big_pages(c->device, ptr),
        all[COLL_MAX_RANKS];
    st = cchan_bootstrap_allgather(cchan_comm_bootstrap(c->comm), &mine, all, sizeof mine);
    if (st < 0) {
        coll_reg_release(c, g);
        return coll_wrap(st, where, "cchan_bootstrap_allgather");
    }
    g->big_pages = 1;
    for (int r = 0; r < c->nranks; r++) g->big_pages &= all[r];
    if (c->nranks > 1 && c->param[COLL_P_PORT_RING] && (st = coll_ring_register(c, g)) < 0) {
        coll_reg_release(c, g); /* channels made before the failure may name it */
        return st;
    }
    g->next = c->regs;
    c->regs = g;
    return 0;
}

int cchan_coll_deregister(cchan_coll_t *c, void *ptr) {
    static const char *where = "cchan_coll_deregister";
    coll_clear_error();
    if (!c || !ptr) return colli_error(-EINVAL, where, "coll and ptr must be set");
    coll_reg_t **pp = &c->regs;
    while (*pp && (*pp)->ptr != (uint8_t *)ptr) pp = &(*pp)->next;
    if (!*pp) return colli_error(-ENOENT, where, "%p was not registered", ptr);
    coll_reg_t *g = *pp;
    *pp = g->next;
    /* Every rank is done with the buffer (its peers' channels and mappings) before it goes. */
    int st = cchan_bootstrap_barrier(cchan_comm_bootstrap(c->comm));
    coll_reg_release(c, g);
    if (st >= 0) st = cchan_bootstrap_barrier(cchan_comm_bootstrap(c->comm));
    return st < 0 ? coll_wrap(st, where, "cchan_bootstrap_barrier") : 0;
}

/* The registration holding [p, p + bytes), or NULL. */
static const coll_reg_t *coll_find_reg(const cchan_coll_t *c, const void *p, size_t bytes) {
    const uint8_t *q = (const uint8_t *)p;
    for (const coll_reg_t *g = c->regs; g; g = g->next)
        if (q >= g->ptr && bytes <= g->bytes && (size_t)(q - g->ptr) <= g->bytes - bytes) return g;
    return NULL;
}

/* ------------------------------------------------------------------ selection */

/* The selector's table: the first row whose op matches, whose rank count is at most max_ranks,
 * whose message (bytes of the full buffer: AllReduce's, AllGather's output, ReduceScatter's input)
 * lies in [min_bytes, max_bytes] and whose algorithm supports the call wins; HB all-pairs supports
 * everything and is the fallback. Why these rows (2xH200, BASELINES.md):
 *   - LL moves every byte with a flag (twice the bytes, each peer gets the whole message) but
 *     finishes in one one-way latency with no barrier; HB pays rank barriers (a system-scope
 *     release that drains the block's NVLink stores, then a round trip: ~4 us each measured) and
 *     is bandwidth-bound beyond. Measured on 2xH200 (CUDA graph, float): AllReduce LL 6.3 us at
 *     256 KiB and 18.9 at 1 MiB against HB 14.3 / 15.2 (zero-copy 13.9 / 14.5); AllGather LL 4.6
 *     at 256 KiB, 11.1 at 1 MiB against HB 10.1 / 10.4; ReduceScatter LL 4.8 / 10.8 against HB
 *     11.5 / 12.7. With more ranks LL traffic grows with nranks - 1, so its window shrinks (those
 *     rows are scaled, not measured).
 *   - CE all-pairs AllGather from 64 MiB on 2 ranks (registered recv; a call with
 *     CCHAN_COLL_AUTO on unregistered buffers falls back to HB): cchan-coll-bench on 2xH200 with
 *     NCCL in the same run, in place: 64 MiB 104.5 us against HB 115.9 (NCCL 110.5); 256 MiB
 *     367 against 381; 1 GiB 1420 (378 GB/s) against 1489 (360); at 16 MiB HB was ahead (35.5
 *     against 36.1 us) and at 4 MiB far ahead. Unmeasured with more ranks: no row.
 *   - CE all-pairs AllReduce from 256 MiB on 2 ranks, registered send and recv with 2 MiB pages
 *     and ce_rs (coll_pick falls back to HB otherwise): the copy engines push the reduce-scatter's
 *     shards on one lane through 80 MiB staging slots and the reduced chunks back, 64 MiB chunks:
 *     1 GiB 2813-2821 us (381 GB/s) against HB's 2956 (363); 512 MiB 1423 against 1484; 256 MiB
 *     722 against 748; 128 MiB 378 (two 32 MiB chunks) against 384, too close for a row. Each
 *     chunk costs ~7 us the copies do not hide (2766 + 7 us per chunk at 1 GiB, 4-80 MiB chunks),
 *     hence chunks as large as the slots allow. With the SMs pushing the shards (ce_rs=0): 334
 *     GB/s at 1 GiB.
 *   - PORT_RING is in no row: on 2xH200 it reached 72 GB/s bus bandwidth at 1 GiB (AllReduce;
 *     AllGather 160) against HB all-pairs' 360, every 2 MiB chunk costing a proxy round trip of
 *     ~30 us with 32 blocks' channels in flight. It runs when asked for by name.
 * Rows naming PORT_RING or CE_ALLPAIRS apply only once the communicator has registered buffers.
 * Retune from cchan-coll-bench (--sweep, docs/collectives.md). */
typedef struct coll_select_row {
    cchan_coll_op_t op;
    int max_ranks;
    size_t min_bytes, max_bytes;
    cchan_coll_algo_t algo;
} coll_select_row_t;

static const coll_select_row_t coll_select_table[] = {
    {CCHAN_COLL_ALLREDUCE, 2, 0, 512 * COLL_KiB, CCHAN_COLL_LL_ALLPAIRS},
    {CCHAN_COLL_ALLREDUCE, 4, 0, 256 * COLL_KiB, CCHAN_COLL_LL_ALLPAIRS},
    {CCHAN_COLL_ALLREDUCE, 8, 0, 128 * COLL_KiB, CCHAN_COLL_LL_ALLPAIRS},
    {CCHAN_COLL_ALLGATHER, 2, 0, 512 * COLL_KiB, CCHAN_COLL_LL_ALLPAIRS},
    {CCHAN_COLL_ALLREDUCE, 2, 256 * COLL_MiB, SIZE_MAX, CCHAN_COLL_CE_ALLPAIRS},
    {CCHAN_COLL_ALLGATHER, 2, 64 * COLL_MiB, SIZE_MAX, CCHAN_COLL_CE_ALLPAIRS},
    {CCHAN_COLL_ALLGATHER, 8, 0, 256 * COLL_KiB, CCHAN_COLL_LL_ALLPAIRS},
    {CCHAN_COLL_REDUCESCATTER, 2, 0, COLL_MiB, CCHAN_COLL_LL_ALLPAIRS},
    {CCHAN_COLL_REDUCESCATTER, 8, 0, 256 * COLL_KiB, CCHAN_COLL_LL_ALLPAIRS},
};

/* HB all-pairs AllReduce on registered buffers reads the peers' inputs (zero-copy) up to this size;
 * beyond, NVLink reads from 128 blocks fell behind the scratch path's stores on 2xH200 (1 GiB: 336
 * against 360 GB/s; 1 MiB: 14.5 against 15.2 us). */
#define COLL_ZC_MAX_BYTES (16 * COLL_MiB)

/* Automatic ReduceScatter on a registered send: zero-copy HB rather than LL above this size. */
#define COLL_RS_ZC_OVER_LL_BYTES (512 * COLL_KiB)

int cchan_coll_supported(const cchan_coll_t *c, cchan_coll_op_t op, cchan_coll_algo_t algo,
                         size_t bytes) {
    if (!c || (unsigned)op > CCHAN_COLL_REDUCESCATTER) return 0;
    size_t n = (size_t)c->nranks;
    switch (algo) {
    case CCHAN_COLL_AUTO: return 1;
    case CCHAN_COLL_LL_ALLPAIRS: {
        size_t per_src = op == CCHAN_COLL_ALLREDUCE ? bytes : (bytes + n - 1) / n;
        return per_src <= c->base.ll_slot / 2;
    }
    case CCHAN_COLL_HB_ALLPAIRS: return 1;
    case CCHAN_COLL_PORT_RING: /* with registered buffers (the call checks) */
        if (n < 2 || (op == CCHAN_COLL_REDUCESCATTER && n != 2)) return 0;
        /* AllGather/ReduceScatter DMA whole per-rank blocks: a block that is not a multiple of
         * 16 bytes puts every other rank's copies on misaligned addresses, which the copy engines
         * move far slower (seen stalling a 1 GiB f16 AllGather on 2xH200) */
        return op == CCHAN_COLL_ALLREDUCE || (bytes % n == 0 && (bytes / n) % 16 == 0);
    case CCHAN_COLL_SWITCH: return op == CCHAN_COLL_ALLREDUCE;
    case CCHAN_COLL_CE_ALLPAIRS: /* with registered buffers (the call checks) */
        /* AllGather: the copy engines write every rank's block at its offset in the peers' recv;
         * blocks of a multiple of 16 bytes keep those copies aligned (see PORT_RING) */
        return op == CCHAN_COLL_ALLREDUCE ||
               (op == CCHAN_COLL_ALLGATHER && bytes % n == 0 && (bytes / n) % 16 == 0);
    default: return 0;
    }
}

/* The algorithms that work only on registered buffers. */
static int coll_needs_reg(cchan_coll_algo_t algo) {
    return algo == CCHAN_COLL_PORT_RING || algo == CCHAN_COLL_CE_ALLPAIRS;
}

cchan_coll_algo_t cchan_coll_select(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes) {
    if (!c) return CCHAN_COLL_HB_ALLPAIRS;
    for (size_t i = 0; i < sizeof coll_select_table / sizeof coll_select_table[0]; i++) {
        const coll_select_row_t *row = &coll_select_table[i];
        if (row->op == op && c->nranks <= row->max_ranks && bytes >= row->min_bytes &&
            bytes <= row->max_bytes && cchan_coll_supported(c, op, row->algo, bytes) &&
            (!coll_needs_reg(row->algo) || c->regs))
            return row->algo;
    }
    return CCHAN_COLL_HB_ALLPAIRS;
}

/* ------------------------------------------------------------------ running a body */

static int coll_body(coll_kernel_t k, int dt, const coll_args_t *a, uint32_t block,
                     uint32_t nblocks) {
    switch (k) {
    case COLL_K_LL_ALLREDUCE: return coll_ll_allreduce_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_LL_ALLGATHER: return coll_ll_allgather_body(a, block, nblocks, 0, 1);
    case COLL_K_LL_REDUCESCATTER: return coll_ll_reducescatter_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_HB_ALLREDUCE: return coll_hb_allreduce_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_HB_ALLGATHER: return coll_hb_allgather_body(a, block, nblocks, 0, 1);
    case COLL_K_HB_REDUCESCATTER: return coll_hb_reducescatter_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_ZC_ALLREDUCE: return coll_zc_allreduce_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_RING_ALLREDUCE: return coll_ring_allreduce_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_RING_ALLGATHER: return coll_ring_allgather_body(a, block, nblocks, 0, 1);
    case COLL_K_RING_REDUCESCATTER:
        return coll_ring_reducescatter_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_SWITCH_ALLREDUCE: return coll_switch_allreduce_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_BARRIER: return coll_barrier_body(a, 0);
    case COLL_K_CE_RS: return coll_ce_rs_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_AG_PUSH: return coll_ag_push_body(a, block, nblocks, 0, 1);
    case COLL_K_ZC_ALLGATHER: return coll_zc_allgather_body(a, block, nblocks, 0, 1);
    case COLL_K_ZC_REDUCESCATTER: return coll_zc_reducescatter_body(a, dt, block, nblocks, 0, 1);
    default: return CCHAN_ERR_INTERNAL;
    }
}

typedef struct coll_host_block {
    coll_kernel_t k;
    int dt;
    const coll_args_t *a;
    uint32_t block, nblocks;
    int status;
} coll_host_block_t;

static void *coll_host_thread(void *p) {
    coll_host_block_t *b = (coll_host_block_t *)p;
    b->status = coll_body(b->k, b->dt, b->a, b->block, b->nblocks);
    return NULL;
}

/* Host platform: one CPU thread per block; returns when every block is done. */
static int coll_run_host(cchan_coll_t *c, coll_kernel_t k, int dt, const coll_args_t *a,
                         uint32_t nblocks, const char *where) {
    (void)c;
    coll_host_block_t blocks[COLL_HOST_BLOCKS_MAX];
    pthread_t threads[COLL_HOST_BLOCKS_MAX];
    if (nblocks > COLL_HOST_BLOCKS_MAX)
        return colli_error(CCHAN_ERR_INTERNAL, where, "%u blocks", nblocks);
    uint32_t started = 0;
    int st = 0;
    for (uint32_t b = 0; b < nblocks; b++) {
        blocks[b] = (coll_host_block_t){k, dt, a, b, nblocks, 0};
        if (b + 1 == nblocks) break; /* the calling thread runs the last block */
        int e = pthread_create(&threads[b], NULL, coll_host_thread, &blocks[b]);
        if (e) {
            /* Blocks already started would wait forever for their siblings' peers: fatal. */
            st = colli_error(-e, where, "pthread_create for block %u of %u", b, nblocks);
            break;
        }
        started++;
    }
    if (st == 0) coll_host_thread(&blocks[nblocks - 1]);
    for (uint32_t b = 0; b < started; b++) pthread_join(threads[b], NULL);
    if (st) return st;
    for (uint32_t b = 0; b < nblocks; b++)
        if (blocks[b].status)
            return colli_error(blocks[b].status, where,
                               "block %u: a wait passed the device deadline (CCHAN_TIMEOUT_MS) "
                               "or a port channel request failed",
                               b);
    return 0;
}

static int coll_run(cchan_coll_t *c, coll_kernel_t k, int dt, const coll_args_t *a,
                    uint32_t nblocks, void *stream, const char *where) {
    if (c->platform == CCHAN_PLATFORM_HOST) return coll_run_host(c, k, dt, a, nblocks, where);
    return colli_cuda_launch(c->device, k, dt, a, nblocks, c->nthreads, (int)a->pdl, stream);
}

/* HB grid: one block per COLL_HB_BYTES_PER_BLOCK of what a round moves per rank, within limits. */
static uint32_t coll_hb_grid(const cchan_coll_t *c, size_t bytes_per_rank) {
    size_t g = (bytes_per_rank + COLL_HB_BYTES_PER_BLOCK - 1) / COLL_HB_BYTES_PER_BLOCK;
    if (c->platform == CCHAN_PLATFORM_HOST) g = c->hb_blocks;
    if (g < 1) g = 1;
    if (g > c->hb_blocks) g = c->hb_blocks;
    return (uint32_t)g;
}

/* Zero-copy grid: one block per zc_block_bytes of what a rank reduces, within limits. */
static uint32_t coll_zc_grid(const cchan_coll_t *c, size_t bytes) {
    if (c->platform == CCHAN_PLATFORM_HOST) return c->hb_blocks;
    uint64_t per = (uint64_t)c->param[COLL_P_ZC_BLOCK_BYTES];
    uint64_t g = (bytes + per - 1) / per;
    if (g < 1) g = 1;
    if (g > c->hb_blocks) g = c->hb_blocks;
    return (uint32_t)g;
}

/* ------------------------------------------------------------------ CE all-pairs
 * The call is a short sequence on the caller's stream (coll_algos.h says what each piece does):
 * on a GPU the copies go to copy-engine lanes forked from and joined back into the stream; on the
 * host platform every step is synchronous and a copy is a memcpy into the peer's mapping. */

static int coll_run_barrier(cchan_coll_t *c, const coll_args_t *a, void *stream,
                            const char *where) {
    if (c->platform == CCHAN_PLATFORM_HOST) return coll_run_host(c, COLL_K_BARRIER, 0, a, 1, where);
    return colli_cuda_launch(c->device, COLL_K_BARRIER, 0, a, 1, 32, (int)a->pdl, stream);
}

/* Copy-engine lane `lane` waits for what `stream` has enqueued so far (*forked: lanes to join). */
static int coll_ce_fork(cchan_coll_t *c, int lane, unsigned *forked, void *stream) {
    if (c->platform == CCHAN_PLATFORM_HOST) return 0;
    *forked |= 1u << lane;
    return colli_ce_fork(c->device, c->ce, lane, stream);
}

/* Copies [src, src + bytes) to dst on copy-engine lane `lane` (forked before). */
static int coll_ce_copy(cchan_coll_t *c, int lane, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return 0;
    if (c->platform == CCHAN_PLATFORM_HOST) {
        memcpy(dst, src, bytes);
        return 0;
    }
    return colli_ce_copy(c->device, c->ce, lane, dst, src, bytes);
}

static int coll_ce_join_all(cchan_coll_t *c, unsigned forked, void *stream) {
    for (int l = 0; l < COLLI_CE_LANES_MAX; l++)
        if (forked & (1u << l)) {
            int st = colli_ce_join(c->device, c->ce, l, stream);
            if (st) return st;
        }
    return 0;
}

/* AllGather of at least this many bytes on buffers with 2 MiB pages: the copy engines alone.
 * 2xH200, bench rows against the 40% SM mix: 1 GiB 385.8 against 378.2 GB/s; 256 MiB 366.3 against
 * 366.5 (20% on the SMs: 371.0); 64 MiB 106.9-109.9 against 102-104 us. */
#define COLL_CE_ALONE_MIN_BYTES (512 * COLL_MiB)

/* ce_rs AllReduce splits a shard that fits one chunk into two from this many bytes per half. */
#define COLL_CE_SPLIT_MIN_BYTES (16 * COLL_MiB)

/* The share of the bytes ce_allpairs moves with SM stores, in thousandths (ce_sm_permille; -1:
 * large AllGathers by the copy engines alone where the buffers have 2 MiB pages, else 40% by the
 * SMs). */
static int64_t coll_ce_permille(const cchan_coll_t *c, const coll_args_t *a, cchan_coll_op_t op) {
    int64_t p = c->param[COLL_P_CE_SM_PERMILLE];
    if (p >= 0) return p;
    if (op == CCHAN_COLL_ALLREDUCE) /* with ce_rs and 2 MiB pages, 1 GiB: 371.6-372.8 GB/s at 0,
                                       369.6-369.8 at 200 (two runs) */
        return a->ce_pushed && a->ce_big_pages ? 0 : 400;
    const uint64_t bytes = a->count * a->esize * (uint64_t)c->nranks;
    return a->ce_big_pages && bytes >= COLL_CE_ALONE_MIN_BYTES ? 0 : 400;
}

/* ce_rs: the copy engines push AllReduce's shards (-1: where the buffers have 2 MiB pages). */
static int coll_ce_rs(const cchan_coll_t *c, const coll_args_t *a) {
    int64_t v = c->param[COLL_P_CE_RS];
    return v >= 0 ? (int)v : (int)a->ce_big_pages;
}

/* Chunk k of a shard of `shard` elements cut into chunks of `chunk` (a multiple of vec): equal
 * chunks, or with ramp (and room for it) the last three 1/2, 1/4, 1/8 chunk (a shorter drain) and,
 * with ramp 1, the first three 1/8, 1/4, 1/2 chunk too (a shorter fill). Returns the number of
 * chunks; *off and *len are chunk k's (k < that number). The same on every rank. */
static size_t coll_ce_chunk(size_t k, size_t shard, size_t chunk, size_t vec, int ramp, size_t *off,
                            size_t *len) {
    if (!ramp || chunk < 8 * vec || shard < 4 * chunk) {
        *off = k * chunk;
        *len = shard - *off < chunk ? shard - *off : chunk;
        return (shard + chunk - 1) / chunk;
    }
    size_t h[3], hsum = 0;
    for (int i = 0; i < 3; i++) hsum += h[i] = (chunk >> (3 - i)) / vec * vec; /* 1/8 1/4 1/2 */
    const size_t head = ramp == 1 ? 3 : 0, hbytes = ramp == 1 ? hsum : 0;
    const size_t mid = shard - hbytes - hsum, nmid = (mid + chunk - 1) / chunk;
    if (k < head) {
        *off = k == 0 ? 0 : k == 1 ? h[0] : h[0] + h[1];
        *len = h[k];
    } else if (k < head + nmid) {
        *off = hbytes + (k - head) * chunk;
        *len = mid - (k - head) * chunk < chunk ? mid - (k - head) * chunk : chunk;
    } else {
        size_t j = k - head - nmid; /* 1/2 1/4 1/8 */
        *off = hbytes + mid + (j == 0 ? 0 : j == 1 ? h[2] : h[2] + h[1]);
        *len = h[2 - j];
    }
    return head + nmid + 3;
}

/* The ce_rs pipeline's shape: staging regions and shard lanes, the same on every rank. */
typedef struct coll_ce_rs_plan {
    size_t shard, chunk, vec, nchunks;
    int ramp, regions, lanes;
} coll_ce_rs_plan_t;

/* Chunk k ([off, off + part) of every shard) of every peer's shard, from send into that peer's
 * staging region k % R for this rank, on copy-engine lane k % L forked from the stream; then mark
 * k % COLLI_CE_MARKS on that lane (the kernel of chunk k waits for it). */
static int coll_ce_push_shards(cchan_coll_t *c, coll_args_t *a, const coll_ce_rs_plan_t *pl,
                               size_t k, unsigned *forked, void *stream) {
    size_t off, part;
    (void)coll_ce_chunk(k, pl->shard, pl->chunk, pl->vec, pl->ramp, &off, &part);
    const int lane = (int)(k % (size_t)pl->lanes), me = c->rank;
    const size_t es = a->esize, shard = pl->shard;
    a->ce_region = (uint32_t)(k % (size_t)pl->regions);
    int st = coll_ce_fork(c, lane, forked, stream);
    for (int j = 1; j < c->nranks && st == 0; j++) {
        int p = (me + j) % c->nranks;
        size_t ps0 = coll_min_u64((uint64_t)p * shard, a->count);
        size_t plen = coll_min_u64(shard, a->count - ps0), c0 = coll_min_u64(off, plen);
        size_t clen = coll_min_u64(part, plen - c0);
        st = coll_ce_copy(c, lane, coll_ce_slot(a, a->peer_scratch[p], p, me),
                          a->send + (ps0 + c0) * es, clen * es);
    }
    if (st == 0 && c->platform == CCHAN_PLATFORM_CUDA)
        st = colli_ce_mark(c->device, c->ce, lane, (int)(k % COLLI_CE_MARKS));
    return st;
}

/* ce_chunk in elements: at most a staging slot, whole vectors. */
static size_t coll_ce_chunk_elems(const cchan_coll_t *c, const coll_args_t *a, size_t vec) {
    size_t chunk = (size_t)c->param[COLL_P_CE_CHUNK];
    if (chunk > a->ce_slot) chunk = a->ce_slot;
    chunk = chunk / a->esize / vec * vec;
    return chunk < vec ? vec : chunk;
}

/* One CE AllReduce chunk [off, off + part) of every rank's shard (shard elements, padded): the
 * CE_RS kernel on staging region `region` (the SMs also store the first permille/1000 of this
 * rank's reduced chunk into every peer's recv), then the copy engines copy the rest of it into
 * every peer's recv on lane `lane`. Every rank runs the same chunks and grids, so the kernels'
 * per-block barriers pair up. */
static int coll_ce_reduce_chunk(cchan_coll_t *c, coll_args_t *a, int dt, size_t shard, size_t off,
                                size_t part, uint32_t region, int lane, int64_t permille,
                                unsigned *forked, void *stream, const char *where) {
    const size_t es = a->esize, vec = COLL_VEC / es;
    const size_t s0 = coll_min_u64((uint64_t)c->rank * shard, a->count);
    const size_t len = coll_min_u64(shard, a->count - s0);
    const size_t sm = permille >= 1000 ? part : part / 1000 * (size_t)permille / vec * vec;
    a->part_off = off;
    a->part_len = part;
    a->sm_len = sm;
    a->ce_region = region;
    int st = coll_run(c, COLL_K_CE_RS, dt, a, coll_zc_grid(c, part * es), stream, where);
    const size_t c0 = off < len ? off : len;
    const size_t clen = len - c0 < part ? len - c0 : part;
    const size_t at = (s0 + c0 + sm) * es, bytes = clen > sm ? (clen - sm) * es : 0;
    if (st == 0 && bytes && c->nranks > 1) st = coll_ce_fork(c, lane, forked, stream);
    for (int j = 1; j < c->nranks && st == 0; j++) {
        int p = (c->rank + j) % c->nranks;
        st = coll_ce_copy(c, lane, a->peer_recv[p] + at, a->recv + at, bytes);
    }
    return st;
}

/* CE AllReduce with both phases on the copy engines (ce_rs = 1), R = ce_regions staging regions
 * and L = ce_rs_lanes shard lanes. Chunk k of every peer's shard is pushed by a copy engine into
 * that peer's staging region k % R on lane k % L, and a mark after it; the CE_RS kernel of chunk k
 * waits for that mark, meets every peer at its per-block barrier (so every peer's copy into this
 * rank has landed: each peer's kernel also began after its own copy), and reduces; a copy engine
 * then pushes the reduced chunk (less the SMs' share) into every peer's recv on the lanes after
 * the shard lanes. The push of chunk k + R - 1 is forked after kernel k: that kernel's barrier
 * means every peer has finished kernel k - 1, the last reader of region (k + R - 1) % R. On one
 * lane the pushes run back to back in chunk order, so the first kernel starts after one chunk's
 * copy. */
static int coll_ce_allreduce_rs(cchan_coll_t *c, coll_args_t *a, int dt, void *stream,
                                const char *where) {
    const size_t es = a->esize, vec = COLL_VEC / es, n = (size_t)c->nranks;
    coll_ce_rs_plan_t pl = {.vec = vec, .ramp = (int)c->param[COLL_P_CE_RAMP]};
    pl.shard = (size_t)coll_round_up((a->count + n - 1) / n, vec);
    pl.regions = (int)c->param[COLL_P_CE_REGIONS];
    pl.lanes = (int)c->param[COLL_P_CE_RS_LANES];
    if (pl.lanes > pl.regions) pl.lanes = pl.regions; /* a lane per region at most */
    a->ce_slot = coll_ce_slot_bytes(a, pl.regions);
    a->ce_pushed = 1;
    pl.chunk = coll_ce_chunk_elems(c, a, vec);
    /* two chunks at least where halves are large, or nothing overlaps (128 MiB on 2xH200: 378 us
     * in 32 MiB chunks, 438 in one of 64); smaller shards in one chunk (the ~7 us a chunk costs
     * outweighs the overlap: 4 MiB bf16 in two chunks 52.7 us, in one 39.1) */
    const size_t half = pl.shard / 2 / vec * vec;
    if (pl.chunk > half && half * es >= COLL_CE_SPLIT_MIN_BYTES) pl.chunk = half;
    size_t off = 0, part = 0;
    pl.nchunks = coll_ce_chunk(0, pl.shard, pl.chunk, vec, pl.ramp, &off, &part);
    const size_t ahead = (size_t)pl.regions - 1;
    const int64_t permille = coll_ce_permille(c, a, CCHAN_COLL_ALLREDUCE);
    int ag_lanes = (int)c->param[COLL_P_CE_LANES];
    if (ag_lanes > COLLI_CE_LANES_MAX - pl.lanes) ag_lanes = COLLI_CE_LANES_MAX - pl.lanes;
    unsigned forked = 0;
    int st = coll_run_barrier(c, a, stream, where);
    for (size_t k = 0; k < pl.nchunks && k < ahead && st == 0; k++)
        st = coll_ce_push_shards(c, a, &pl, k, &forked, stream);
    for (size_t k = 0; k < pl.nchunks && st == 0; k++) {
        (void)coll_ce_chunk(k, pl.shard, pl.chunk, vec, pl.ramp, &off, &part);
        if (c->platform == CCHAN_PLATFORM_CUDA)
            st = colli_ce_wait_mark(c->device, c->ce, (int)(k % COLLI_CE_MARKS), stream);
        if (st == 0)
            st = coll_ce_reduce_chunk(
                c, a, dt, pl.shard, off, part, (uint32_t)(k % (size_t)pl.regions),
                pl.lanes + (int)(k % (size_t)ag_lanes), permille, &forked, stream, where);
        /* chunk k + R - 1's pushes, once kernel k's barrier has freed its region on every peer */
        if (k + ahead < pl.nchunks && st == 0)
            st = coll_ce_push_shards(c, a, &pl, k + ahead, &forked, stream);
    }
    if (st == 0 && c->platform == CCHAN_PLATFORM_CUDA) st = coll_ce_join_all(c, forked, stream);
    if (st == 0) st = coll_run_barrier(c, a, stream, where);
    return st;
}

static int coll_ce_allreduce(cchan_coll_t *c, coll_args_t *a, int dt, void *stream,
                             const char *where) {
    if (coll_ce_rs(c, a)) return coll_ce_allreduce_rs(c, a, dt, stream, where);
    const size_t vec = COLL_VEC / a->esize, n = (size_t)c->nranks;
    const size_t shard = (size_t)coll_round_up((a->count + n - 1) / n, vec);
    const size_t chunk = coll_ce_chunk_elems(c, a, vec);
    const int64_t permille = coll_ce_permille(c, a, CCHAN_COLL_ALLREDUCE);
    const int lanes = (int)c->param[COLL_P_CE_LANES];
    unsigned forked = 0;
    int st = coll_run_barrier(c, a, stream, where);
    for (size_t off = 0, k = 0; off < shard && st == 0; k++) {
        const size_t part = shard - off < chunk ? shard - off : chunk;
        st = coll_ce_reduce_chunk(c, a, dt, shard, off, part, (uint32_t)(k & 1),
                                  (int)(k % (size_t)lanes), permille, &forked, stream, where);
        off += part;
    }
    if (st == 0 && c->platform == CCHAN_PLATFORM_CUDA) st = coll_ce_join_all(c, forked, stream);
    if (st == 0) st = coll_run_barrier(c, a, stream, where);
    return st;
}

static int coll_ce_allgather(cchan_coll_t *c, coll_args_t *a, void *stream, const char *where) {
    const size_t bytes = a->count * a->esize, at = (size_t)c->rank * bytes;
    const int64_t permille = coll_ce_permille(c, a, CCHAN_COLL_ALLGATHER);
    const size_t lanes = (size_t)c->param[COLL_P_CE_LANES];
    const size_t sm = permille >= 1000 ? bytes : bytes / 1000 * (size_t)permille / 16 * 16;
    const size_t ce = bytes - sm, per = (size_t)coll_round_up((ce + lanes - 1) / lanes, 16);
    /* out of place, this rank's own block: by the SMs (AG_PUSH) or by a copy engine (ce_local) */
    const int local_ce = !a->in_place && c->param[COLL_P_CE_LOCAL];
    unsigned forked = 0;
    int st = coll_run_barrier(c, a, stream, where);
    for (size_t l = 0; l < lanes && st == 0; l++) {
        size_t lo = l * per < ce ? l * per : ce, part = ce - lo < per ? ce - lo : per;
        if (part && c->nranks > 1) st = coll_ce_fork(c, (int)l, &forked, stream);
        for (int j = 1; j < c->nranks && st == 0; j++) {
            int p = (c->rank + j) % c->nranks;
            st = coll_ce_copy(c, (int)l, a->peer_recv[p] + at + sm + lo, a->send + sm + lo, part);
        }
    }
    if (st == 0 && local_ce) {
        const int l = (int)(lanes % COLLI_CE_LANES_MAX); /* its own lane where one is left */
        st = coll_ce_fork(c, l, &forked, stream);
        if (st == 0) st = coll_ce_copy(c, l, a->recv + at, a->send, bytes);
    }
    a->sm_len = sm;
    a->in_place = a->in_place || local_ce; /* AG_PUSH: no local copy left to do */
    if (st == 0 && (sm || !a->in_place)) {
        size_t touched = a->in_place ? sm : bytes;
        st = coll_run(c, COLL_K_AG_PUSH, 0, a, coll_zc_grid(c, touched), stream, where);
    }
    if (st == 0 && c->platform == CCHAN_PLATFORM_CUDA) st = coll_ce_join_all(c, forked, stream);
    if (st == 0) st = coll_run_barrier(c, a, stream, where);
    return st;
}

/* ------------------------------------------------------------------ the collectives */

static int coll_check(cchan_coll_t *c, const void *send, void *recv, cchan_coll_dtype_t dtype,
                      cchan_coll_algo_t algo, const char *where) {
    coll_clear_error();
    if (!c) return colli_error(-EINVAL, where, "coll is NULL");
    if (!send || !recv) return colli_error(-EINVAL, where, "send and recv must not be NULL");
    if (cchan_coll_dtype_size(dtype) == 0)
        return colli_error(-EINVAL, where, "unknown dtype %d", (int)dtype);
    if ((unsigned)algo >= CCHAN_COLL_ALGO_COUNT)
        return colli_error(-EINVAL, where, "unknown algo %d", (int)algo);
    return 0;
}

/* Elements x size without overflow, and the full-buffer size n times that. */
static int coll_bytes(size_t count, size_t es, size_t mul, size_t *out, const char *where) {
    if (count > SIZE_MAX / es / mul)
        return colli_error(CCHAN_ERR_RANGE, where, "%zu elements of %zu bytes overflow", count, es);
    *out = count * es * mul;
    return 0;
}

/* Every rank's send and recv mapped here, for calls on registered buffers (same offsets on every
 * rank). */
static void coll_map_peers(const cchan_coll_t *c, coll_args_t *a, const coll_reg_t *gs,
                           const void *send, const coll_reg_t *gr, const void *recv) {
    for (int p = 0; p < c->nranks; p++) {
        a->peer_send[p] =
            (const uint8_t *)cchan_mem_ptr(gs->peers[p]) + ((const uint8_t *)send - gs->ptr);
        a->peer_recv[p] =
            (uint8_t *)cchan_mem_ptr(gr->peers[p]) + ((const uint8_t *)recv - gr->ptr);
    }
}

/* The regions a call's registration is checked on, each of the full buffer's bytes: AllReduce
 * send and recv, AllGather recv (the ring copies send into recv first), ReduceScatter send (the
 * ring reads it with the copy engine; recv is written by the SMs only). */
static void coll_reg_regions(cchan_coll_op_t op, const void **send, const void **recv) {
    if (op == CCHAN_COLL_ALLGATHER) *send = *recv;
    if (op == CCHAN_COLL_REDUCESCATTER) *recv = *send;
}

/* Whether HB all-pairs runs zero-copy on these regions (coll_reg_regions'): every region
 * registered and the call within the op's limit (AllReduce COLL_ZC_MAX_BYTES, AllGather zc_ag_max,
 * ReduceScatter zc_rs_max). With `a`, also maps the peers' buffers into it. */
static int coll_zc(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes, const void *send,
                   const void *recv, coll_args_t *a) {
    const uint64_t max = op == CCHAN_COLL_ALLREDUCE   ? COLL_ZC_MAX_BYTES
                         : op == CCHAN_COLL_ALLGATHER ? (uint64_t)c->param[COLL_P_ZC_AG_MAX]
                                                      : (uint64_t)c->param[COLL_P_ZC_RS_MAX];
    if (bytes > max) return 0;
    const coll_reg_t *gs = coll_find_reg(c, send, bytes), *gr = coll_find_reg(c, recv, bytes);
    if (!gs || !gr) return 0;
    if (a) coll_map_peers(c, a, gs, send, gr, recv);
    return 1;
}

/* What CCHAN_COLL_AUTO runs for a call on these regions: the selector's row, then the buffers. */
static cchan_coll_algo_t coll_auto(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes,
                                   const void *send, const void *recv) {
    cchan_coll_algo_t algo = cchan_coll_select(c, op, bytes);
    /* The table knows sizes, not buffers: a ReduceScatter in the LL row's upper half on a
     * registered send runs the zero-copy HB kernel instead (2xH200, 1 MiB: 9.14 against LL's
     * 10.00 us; 512 KiB: LL 5.68 against 8.73, so the LL row stays for unregistered buffers). */
    if (op == CCHAN_COLL_REDUCESCATTER && algo == CCHAN_COLL_LL_ALLPAIRS &&
        bytes > COLL_RS_ZC_OVER_LL_BYTES && coll_zc(c, op, bytes, send, recv, NULL))
        return CCHAN_COLL_HB_ALLPAIRS;
    if (!coll_needs_reg(algo)) return algo;
    const coll_reg_t *gs = coll_find_reg(c, send, bytes), *gr = coll_find_reg(c, recv, bytes);
    if (!gs || !gr) return CCHAN_COLL_HB_ALLPAIRS;
    /* AllReduce wins on the copy engines only with 2 MiB pages and the copy engines pushing the
     * shards (ce_rs; the row's measurement) */
    if (algo == CCHAN_COLL_CE_ALLPAIRS && op == CCHAN_COLL_ALLREDUCE &&
        !(gs->big_pages && gr->big_pages && c->param[COLL_P_CE_RS] != 0))
        return CCHAN_COLL_HB_ALLPAIRS;
    if (algo == CCHAN_COLL_PORT_RING && c->nranks > 1 && (!gs->ring_dev || !gr->ring_dev))
        return CCHAN_COLL_HB_ALLPAIRS;
    return algo;
}

cchan_coll_algo_t cchan_coll_select_buffers(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes,
                                            const void *send, const void *recv) {
    if (!c || (unsigned)op > CCHAN_COLL_REDUCESCATTER) return CCHAN_COLL_HB_ALLPAIRS;
    coll_reg_regions(op, &send, &recv);
    return coll_auto(c, op, bytes, send, recv);
}

/* Picks the algorithm (CCHAN_COLL_AUTO: coll_auto) for a call on `bytes` of send and recv, whose
 * regions become coll_reg_regions'; for PORT_RING also fills the registrations, for CE_ALLPAIRS
 * the peers' buffers. */
static int coll_pick(cchan_coll_t *c, cchan_coll_op_t op, cchan_coll_algo_t *algo, size_t bytes,
                     const void *send, const void *recv, coll_args_t *a, const char *where) {
    coll_reg_regions(op, &send, &recv);
    if (*algo == CCHAN_COLL_AUTO) *algo = coll_auto(c, op, bytes, send, recv);
    if (!cchan_coll_supported(c, op, *algo, bytes))
        return colli_error(CCHAN_ERR_UNSUPPORTED, where,
                           "algorithm %s cannot run this call (%zu bytes, %d ranks%s)",
                           cchan_coll_algo_name(*algo), bytes, c->nranks,
                           *algo == CCHAN_COLL_LL_ALLPAIRS ? ", beyond the LL scratch slots"
                           : *algo == CCHAN_COLL_PORT_RING
                               ? ": ReduceScatter needs 2 ranks; AllGather and ReduceScatter a "
                                 "per-rank block of a multiple of 16 bytes"
                               : ": AllReduce only");
    if (!coll_needs_reg(*algo)) return 0;
    const coll_reg_t *gs = coll_find_reg(c, send, bytes), *gr = coll_find_reg(c, recv, bytes);
    if (!gs || !gr)
        return colli_error(CCHAN_ERR_UNSUPPORTED, where,
                           "%s needs %s inside buffers registered with cchan_coll_register (%s is "
                           "not)",
                           cchan_coll_algo_name(*algo),
                           op == CCHAN_COLL_ALLREDUCE   ? "send and recv"
                           : op == CCHAN_COLL_ALLGATHER ? "recv"
                                                        : "send",
                           gs ? "recv" : "send");
    if (*algo == CCHAN_COLL_CE_ALLPAIRS) {
        coll_map_peers(c, a, gs, send, gr, recv);
        a->ce_big_pages = (uint32_t)(gs->big_pages && gr->big_pages);
        return 0;
    }
    if (c->nranks > 1 && (!gs->ring_dev || !gr->ring_dev))
        return colli_error(CCHAN_ERR_UNSUPPORTED, where,
                           "port_ring: the %s buffer was registered while the parameter port_ring "
                           "was 0, so it has no port channels",
                           gs->ring_dev ? "recv" : "send");
    a->ring_send = gs->ring_dev;
    a->ring_recv = gr->ring_dev;
    a->send_off = (uint64_t)((const uint8_t *)send - gs->ptr);
    a->recv_off = (uint64_t)((const uint8_t *)recv - gr->ptr);
    return 0;
}

/* PORT_RING grid: one block per COLL_RING_BYTES_PER_BLOCK a rank sends, within limits. */
static uint32_t coll_ring_grid(const cchan_coll_t *c, size_t bytes_per_rank) {
    size_t g = (bytes_per_rank + COLL_RING_BYTES_PER_BLOCK - 1) / COLL_RING_BYTES_PER_BLOCK;
    if (c->platform == CCHAN_PLATFORM_HOST) g = c->ring_blocks;
    if (g < 1) g = 1;
    if (g > c->ring_blocks) g = c->ring_blocks;
    return (uint32_t)g;
}

/* Programmatic dependent launches pay off while launch latency matters: on 2xH200 (CUDA graphs,
 * same run) they took AllReduce 1 MiB from 10.35 to 9.88 us and 2 MiB from 12.96 to 12.42, but
 * cost HB kernels 3-4% from 4 MiB up (AllReduce 1 GiB 363.5 -> 348.2 GB/s, AllGather 360.6 ->
 * 347.3): calls of more bytes than this launch plainly. */
#define COLL_PDL_MAX_BYTES (2 * COLL_MiB)

/* bytes: the call's full buffer (AllReduce's, AllGather's output, ReduceScatter's input). */
static coll_args_t coll_args(const cchan_coll_t *c, const void *send, void *recv, size_t count,
                             cchan_coll_dtype_t dtype, size_t bytes) {
    coll_args_t a = c->base;
    a.ll_spread = (uint32_t)c->param[COLL_P_LL_SPREAD];
    a.pdl = (uint32_t)(c->param[COLL_P_PDL] && bytes <= COLL_PDL_MAX_BYTES);
    a.send = (const uint8_t *)send;
    a.recv = (uint8_t *)recv;
    a.count = count;
    a.esize = (uint32_t)cchan_coll_dtype_size(dtype);
    return a;
}

int cchan_coll_allreduce(cchan_coll_t *c, const void *send, void *recv, size_t count,
                         cchan_coll_dtype_t dtype, cchan_coll_algo_t algo, void *stream) {
    static const char *where = "cchan_coll_allreduce";
    int st = coll_check(c, send, recv, dtype, algo, where);
    size_t bytes = 0;
    if (st == 0) st = coll_bytes(count, cchan_coll_dtype_size(dtype), 1, &bytes, where);
    if (st || count == 0) return st;
    coll_args_t a = coll_args(c, send, recv, count, dtype, bytes);
    a.in_place = send == recv;
    st = coll_pick(c, CCHAN_COLL_ALLREDUCE, &algo, bytes, send, recv, &a, where);
    if (st) return st;
    const size_t per = bytes / (size_t)c->nranks;
    switch (algo) {
    case CCHAN_COLL_LL_ALLPAIRS:
        return coll_run(c, COLL_K_LL_ALLREDUCE, (int)dtype, &a, c->ll_blocks, stream, where);
    case CCHAN_COLL_PORT_RING:
        return coll_run(c, COLL_K_RING_ALLREDUCE, (int)dtype, &a, coll_ring_grid(c, per), stream,
                        where);
    case CCHAN_COLL_SWITCH:
        return coll_run(c, COLL_K_SWITCH_ALLREDUCE, (int)dtype, &a, coll_hb_grid(c, per), stream,
                        where);
    case CCHAN_COLL_CE_ALLPAIRS: return coll_ce_allreduce(c, &a, (int)dtype, stream, where);
    default: break;
    }
    /* zero-copy: read every rank's input, write every rank's output */
    if (coll_zc(c, CCHAN_COLL_ALLREDUCE, bytes, send, recv, &a))
        return coll_run(c, COLL_K_ZC_ALLREDUCE, (int)dtype, &a, coll_zc_grid(c, per), stream,
                        where);
    return coll_run(c, COLL_K_HB_ALLREDUCE, (int)dtype, &a, coll_hb_grid(c, per), stream, where);
}

int cchan_coll_allgather(cchan_coll_t *c, const void *send, void *recv, size_t sendcount,
                         cchan_coll_dtype_t dtype, cchan_coll_algo_t algo, void *stream) {
    static const char *where = "cchan_coll_allgather";
    int st = coll_check(c, send, recv, dtype, algo, where);
    size_t bytes = 0;
    if (st == 0)
        st = coll_bytes(sendcount, cchan_coll_dtype_size(dtype), (size_t)c->nranks, &bytes, where);
    if (st || sendcount == 0) return st;
    const size_t per = bytes / (size_t)c->nranks;
    coll_args_t a = coll_args(c, send, recv, sendcount, dtype, bytes);
    a.in_place = (const uint8_t *)send == (const uint8_t *)recv + (size_t)c->rank * per;
    st = coll_pick(c, CCHAN_COLL_ALLGATHER, &algo, bytes, send, recv, &a, where);
    if (st) return st;
    switch (algo) {
    case CCHAN_COLL_LL_ALLPAIRS:
        return coll_run(c, COLL_K_LL_ALLGATHER, (int)dtype, &a, c->ll_blocks, stream, where);
    case CCHAN_COLL_PORT_RING:
        return coll_run(c, COLL_K_RING_ALLGATHER, (int)dtype, &a, coll_ring_grid(c, per), stream,
                        where);
    case CCHAN_COLL_CE_ALLPAIRS: return coll_ce_allgather(c, &a, stream, where);
    default: break;
    }
    /* zero-copy: store this rank's block straight into every rank's recv */
    if (coll_zc(c, CCHAN_COLL_ALLGATHER, bytes, recv, recv, &a)) {
        a.sm_len = per;
        return coll_run(c, COLL_K_ZC_ALLGATHER, (int)dtype, &a, coll_zc_grid(c, per), stream,
                        where);
    }
    return coll_run(c, COLL_K_HB_ALLGATHER, (int)dtype, &a, coll_hb_grid(c, per), stream, where);
}

int cchan_coll_reducescatter(cchan_coll_t *c, const void *send, void *recv, size_t recvcount,
                             cchan_coll_dtype_t dtype, cchan_coll_algo_t algo, void *stream) {
    static const char *where = "cchan_coll_reducescatter";
    int st = coll_check(c, send, recv, dtype, algo, where);
    size_t bytes = 0;
    if (st == 0)
        st = coll_bytes(recvcount, cchan_coll_dtype_size(dtype), (size_t)c->nranks, &bytes, where);
    if (st || recvcount == 0) return st;
    const size_t per = bytes / (size_t)c->nranks;
    coll_args_t a = coll_args(c, send, recv, recvcount, dtype, bytes);
    a.in_place = (uint8_t *)recv == (const uint8_t *)send + (size_t)c->rank * per;
    st = coll_pick(c, CCHAN_COLL_REDUCESCATTER, &algo, bytes, send, recv, &a, where);
    if (st) return st;
    switch (algo) {
    case CCHAN_COLL_LL_ALLPAIRS:
        return coll_run(c, COLL_K_LL_REDUCESCATTER, (int)dtype, &a, c->ll_blocks, stream, where);
    case CCHAN_COLL_PORT_RING:
        return coll_run(c, COLL_K_RING_REDUCESCATTER, (int)dtype, &a, coll_ring_grid(c, per),
                        stream, where);
    default: break;
    }
    /* zero-copy: read this rank's block from every rank's send */
    if (coll_zc(c, CCHAN_COLL_REDUCESCATTER, bytes, send, send, &a))
        return coll_run(c, COLL_K_ZC_REDUCESCATTER, (int)dtype, &a, coll_zc_grid(c, per), stream,
                        where);
    return coll_run(c, COLL_K_HB_REDUCESCATTER, (int)dtype, &a, coll_hb_grid(c, per), stream,
                    where);
}
