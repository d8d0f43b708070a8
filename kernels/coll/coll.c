/* cchan_coll objects: setup once (scratch, semaphores, LL epochs, copy-engine lanes), teardown,
 * and buffer registration. Every call afterwards fills a coll_args_t from c->base and runs kernels
 * (coll_ops.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan/env.h"
#include "coll_internal.h"

/* Defaults. GPU: LL kernels always run COLL_LL_BLOCKS_GPU blocks (their per-block epochs must see
 * every call); HB kernels up to 128 blocks of 512 threads. */
#define COLL_THREADS_GPU 512u
#define COLL_LL_BLOCKS_GPU 16u
#define COLL_HB_BLOCKS_GPU 128
#define COLL_BLOCKS_HOST 2 /* CPU threads per rank on the host platform */
#define COLL_SCRATCH_GPU (128 * COLL_MiB)
#define COLL_SCRATCH_HOST (8 * COLL_MiB)

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

/* ------------------------------------------------------------------ create / destroy */

static void coll_reg_free(cchan_coll_t *c, coll_reg_t *g) {
    for (int p = 0; p < c->nranks; p++)
        if (p != c->rank && g->peers[p]) cchan_mem_destroy(g->peers[p]);
    if (g->mem) cchan_mem_destroy(g->mem);
    free(g);
}

static void coll_free_list(cchan_coll_t *c, coll_reg_t **list) {
    while (*list) {
        coll_reg_t *g = *list;
        *list = g->next;
        coll_reg_free(c, g);
    }
}

static void coll_release(cchan_coll_t *c) {
    colli_plans_destroy(c->plans);
    colli_tuning_free(c->tuning);
    colli_seen_free(c->seen);
    if (c->ce) colli_ce_destroy(c->device, c->ce);
    coll_free_list(c, &c->regs);
    if (c->sw_owner) cchan_switch_destroy(c->sw_owner);
    coll_dev_free(c, c->sems_dev);
    coll_dev_free(c, c->ll_epoch_dev);
    if (c->sems) cchan_sem_set_destroy(c->sems);
    for (int p = 0; p < c->nranks; p++)
        if (p != c->rank && c->peer_scratch[p]) cchan_mem_destroy(c->peer_scratch[p]);
    if (c->scratch) cchan_mem_destroy(c->scratch);
    free(c);
}

/* The arguments before anything is allocated. */
static int coll_check_create(cchan_comm_t *comm, const cchan_coll_config_t *cfg, cchan_coll_t **out,
                             const char *where) {
    if (!comm || !out) return colli_error(-EINVAL, where, "comm and out must not be NULL");
    if (cfg && (cfg->magic != CCHAN_COLL_CONFIG_MAGIC || cfg->size < sizeof(cchan_coll_config_t)))
        return colli_error(-EINVAL, where,
                           "config not initialized with CCHAN_COLL_CONFIG_INIT (magic 0x%x, size "
                           "%zu)",
                           cfg->magic, cfg->size);
    if (cfg && (cfg->size > sizeof(cchan_coll_config_t) || cfg->version == 0 ||
                cfg->version > CCHAN_VERSION_CODE))
        return colli_error(CCHAN_ERR_VERSION, where,
                           "config version %u, size %zu: this library is version %d, size %zu "
                           "(use CCHAN_COLL_CONFIG_INIT)",
                           cfg->version, cfg->size, CCHAN_VERSION_CODE, sizeof *cfg);
    if (cfg && cfg->max_blocks < 0)
        return colli_error(-EINVAL, where, "max_blocks %d < 0", cfg->max_blocks);
    int nranks = cchan_comm_size(comm);
    if (nranks < 1 || nranks > COLL_MAX_RANKS)
        return colli_error(CCHAN_ERR_UNSUPPORTED, where,
                           "%d ranks: cchan_coll supports 1 to %d ranks of one host", nranks,
                           COLL_MAX_RANKS);
    cchan_platform_t platform = cchan_comm_platform(comm);
    if (platform != CCHAN_PLATFORM_CUDA && platform != CCHAN_PLATFORM_HOST)
        return colli_error(CCHAN_ERR_UNSUPPORTED, where, "platform %d (CUDA and host only)",
                           (int)platform);
    return 0;
}

/* Grid sizes and the scratch layout (into c->base) from the config and the platform. */
static int coll_plan(cchan_coll_t *c, const cchan_coll_config_t *cfg, const char *where) {
    const int gpu = c->platform == CCHAN_PLATFORM_CUDA;
    c->nthreads = gpu ? COLL_THREADS_GPU : 1u;
    int maxb =
        cfg && cfg->max_blocks ? cfg->max_blocks : (gpu ? COLL_HB_BLOCKS_GPU : COLL_BLOCKS_HOST);
    if (!gpu && maxb > COLL_HOST_BLOCKS_MAX) maxb = COLL_HOST_BLOCKS_MAX;
    c->hb_blocks = (uint32_t)maxb;
    c->ll_blocks = gpu ? (maxb < (int)COLL_LL_BLOCKS_GPU ? (uint32_t)maxb : COLL_LL_BLOCKS_GPU)
                       : (uint32_t)maxb;
    size_t scratch = cfg && cfg->scratch_bytes ? cfg->scratch_bytes
                                               : (gpu ? COLL_SCRATCH_GPU : COLL_SCRATCH_HOST);
    c->scratch_bytes = colli_scratch_layout(scratch, c->nranks, &c->hb_blocks, &c->base);
    if (!c->scratch_bytes)
        return colli_error(-EINVAL, where, "scratch_bytes %zu too small for %d ranks (>= %zu)",
                           scratch, c->nranks, 2 * (size_t)c->nranks * (16 + 256));
    return 0;
}

/* The collective runtime objects: scratch mapped everywhere, HB semaphores, the switch channel. */
static int coll_setup_runtime(cchan_coll_t *c, const char *where) {
    const char *step = "";
    int st;
#define COLL_TRY(call, what)                                                                       \
    do {                                                                                           \
        step = what;                                                                               \
        st = (call);                                                                               \
        if (st < 0) return colli_wrap(st, where, step);                                            \
    } while (0)
    COLL_TRY(cchan_mem_alloc(c->comm, c->scratch_bytes, 0, &c->scratch),
             "cchan_mem_alloc(scratch)");
    COLL_TRY(cchan_mem_exchange(c->comm, c->scratch, c->peer_scratch),
             "cchan_mem_exchange(scratch)");
    if (c->nranks > 1)
        COLL_TRY(cchan_sem_set_create(c->comm, (int)c->hb_blocks, 0, &c->sems),
                 "cchan_sem_set_create");
    /* portable path: the flags never opt in to multicast (docs/switch_channel.md, "Safety") */
    COLL_TRY(cchan_switch_channel_create(c->comm, c->scratch, NULL, 0, &c->base.sw, &c->sw_owner),
             "cchan_switch_channel_create");
#undef COLL_TRY
    coll_args_t *a = &c->base;
    a->rank = c->rank;
    a->nranks = c->nranks;
    a->scratch = (uint8_t *)cchan_mem_ptr(c->scratch);
    for (int p = 0; p < c->nranks; p++)
        a->peer_scratch[p] = (uint8_t *)cchan_mem_ptr(c->peer_scratch[p]);
    a->ll_ctl = cchan_comm_wait_ctl(c->comm, -1, 0xC011u);
    return 0;
}

/* The LL kernels' per-block epochs, zeroed, in device memory. */
static int coll_setup_epochs(cchan_coll_t *c, const char *where) {
    int st = coll_dev_alloc(c, c->ll_blocks * sizeof(uint32_t), (void **)&c->ll_epoch_dev);
    if (st < 0) return st;
    uint32_t *zero = (uint32_t *)calloc(c->ll_blocks, sizeof(uint32_t));
    if (!zero) return colli_error(-ENOMEM, where, "no memory");
    st = coll_dev_upload(c, c->ll_epoch_dev, zero, c->ll_blocks * sizeof(uint32_t));
    free(zero);
    c->base.ll_epoch = c->ll_epoch_dev;
    return st;
}

/* Every HB block's semaphores to its peers ([block][peer index]) in device memory. */
static int coll_setup_sems(cchan_coll_t *c, const char *where) {
    const int nranks = c->nranks;
    size_t ns = (size_t)c->hb_blocks * (size_t)(nranks - 1);
    cchan_semaphore_t *h = (cchan_semaphore_t *)calloc(ns, sizeof *h);
    if (!h) return colli_error(-ENOMEM, where, "no memory");
    int st = 0;
    for (uint32_t b = 0; b < c->hb_blocks && st >= 0; b++)
        for (int j = 1; j < nranks && st >= 0; j++) {
            int p = (c->rank + j) % nranks;
            st = cchan_sem_set_get(c->sems, p, (int)b, &h[b * (size_t)(nranks - 1) + (j - 1)]);
        }
    if (st < 0) {
        free(h);
        return colli_wrap(st, where, "cchan_sem_set_get");
    }
    st = coll_dev_alloc(c, ns * sizeof *h, (void **)&c->sems_dev);
    if (st >= 0) st = coll_dev_upload(c, c->sems_dev, h, ns * sizeof *h);
    free(h);
    c->base.sems = c->sems_dev;
    return st;
}

/* What cchan_coll_create agrees on (coll_agree): CCHAN_COLL_TUNING, CCHAN_COLL_PLANS, every other
 * CCHAN_COLL_* variable the selector or the algorithms read, the config as it resolved, and the
 * default rule's GPU generation. */
enum { COLL_AGREE_TUNING, COLL_AGREE_PLANS, COLL_AGREE_PLAN_MAX, COLL_AGREE_PARAM0 };
#define COLL_AGREE_N (COLL_AGREE_PARAM0 + COLL_PARAM_COUNT + 3)
typedef struct coll_env {
    colli_agree_item_t item[COLL_AGREE_N];
} coll_env_t;

/* The local half of the environment: every variable read once, the tuning table (CCHAN_COLL_TUNING)
 * parsed and the plans (CCHAN_COLL_PLANS) loaded, with no collective step, so that a rank that
 * fails here (a malformed value, a file it cannot read) fails before any rank takes one, and the
 * agreement that follows finds every rank at the same step. */
static int coll_read_env(cchan_coll_t *c, coll_env_t *env) {
    static const char *where = "cchan_coll_create";
    const char *tune = NULL, *plans = NULL;
    int64_t max_bytes;
    int st;
    if (cchan_env_get_str("CCHAN_COLL_TUNING", &tune) ||
        cchan_env_get_str("CCHAN_COLL_PLANS", &plans))
        return colli_wrap(-EINVAL, where, "environment");
    if (cchan_env_get_int("CCHAN_COLL_PLAN_MAX_BYTES", &max_bytes))
        return colli_wrap(-EINVAL, where, "CCHAN_COLL_PLAN_MAX_BYTES");
    c->plan_max_bytes = max_bytes;
    /* the table first, so that the plans it names are set up with the others */
    if (tune &&
        (st = colli_tuning_parse(tune, &c->tuning, "cchan_coll_create: CCHAN_COLL_TUNING")) < 0)
        return st;
    if (plans && (st = colli_plans_load(c, plans, "cchan_coll_create: CCHAN_COLL_PLANS")) < 0)
        return st;
    /* the words now: the environment's strings may change under a later setenv */
    colli_agree_item_t *it = env->item;
    it[COLL_AGREE_TUNING].name = "CCHAN_COLL_TUNING";
    colli_tuning_describe(c->tuning, &it[COLL_AGREE_TUNING]);
    it[COLL_AGREE_PLANS].name = "CCHAN_COLL_PLANS";
    colli_plans_describe(c, plans, &it[COLL_AGREE_PLANS]);
    return 0;
}

static void coll_item_int(colli_agree_item_t *it, const char *name, int64_t v) {
    it->name = name;
    it->digest = (uint64_t)v;
    snprintf(it->value, sizeof it->value, "%lld", (long long)v);
}

/* The other half: every rank compares its items with the others' (one all-gather), and fails
 * alike, naming the first that differs and the ranks. */
static int coll_agree_env(cchan_coll_t *c, const cchan_coll_config_t *cfg, coll_env_t *env,
                          const char *where) {
    colli_agree_item_t *it = env->item;
    coll_item_int(&it[COLL_AGREE_PLAN_MAX], "CCHAN_COLL_PLAN_MAX_BYTES", c->plan_max_bytes);
    for (int i = 0; i < COLL_PARAM_COUNT; i++)
        coll_item_int(&it[COLL_AGREE_PARAM0 + i], colli_param_env(i), c->param[i]);
    /* the config as it resolved (LL's size limit and the grids follow from it) */
    int k = COLL_AGREE_PARAM0 + COLL_PARAM_COUNT;
    it[k].name = "cchan_coll_config_t.max_blocks";
    it[k].digest = ((uint64_t)c->hb_blocks << 32) | c->ll_blocks;
    snprintf(it[k].value, sizeof it[k].value, "%d (%u HB blocks, %u LL blocks)",
             cfg ? cfg->max_blocks : 0, c->hb_blocks, c->ll_blocks);
    k++;
    it[k].name = "cchan_coll_config_t.scratch_bytes";
    it[k].digest = (uint64_t)c->scratch_bytes;
    snprintf(it[k].value, sizeof it[k].value, "%zu (%zu bytes laid out)",
             cfg ? cfg->scratch_bytes : 0, c->scratch_bytes);
    k++;
    /* the default rule's table, by its generation's name ("sm_90"; its words say the device's) */
    const char *rule = colli_default_rule(c);
    it[k].name = "the default rule (GPU generation)";
    it[k].digest = colli_fnv(COLLI_FNV_INIT, rule, strcspn(rule, " "));
    snprintf(it[k].value, sizeof it[k].value, "%s", rule);
    return colli_agree(c, it, COLL_AGREE_N, where);
}

/* The local steps of create: the object, the variables, the table, the plans, the layout. */
static int coll_create_local(cchan_comm_t *comm, const cchan_coll_config_t *cfg, cchan_coll_t **cp,
                             coll_env_t *env, const char *where) {
    cchan_coll_t *c = *cp = (cchan_coll_t *)calloc(1, sizeof *c);
    if (!c) return colli_error(-ENOMEM, where, "no memory");
    c->comm = comm;
    c->rank = cchan_comm_rank(comm);
    c->nranks = cchan_comm_size(comm);
    c->device = cchan_comm_device(comm);
    c->platform = cchan_comm_platform(comm);
    c->sm = c->platform == CCHAN_PLATFORM_CUDA ? colli_cuda_sm(c->device) : 0;
    int st;
    if ((st = colli_params_init(c->param, where)) < 0 || (st = coll_plan(c, cfg, where)) < 0)
        return st;
    return coll_read_env(c, env);
}

int cchan_coll_create(cchan_comm_t *comm, const cchan_coll_config_t *cfg, cchan_coll_t **out) {
    static const char *where = "cchan_coll_create";
    colli_clear_error();
    if (!comm) return colli_error(-EINVAL, where, "comm must not be NULL");
    /* A bad argument, variable or file on one rank fails every rank now, naming it, not at a
     * bootstrap timeout: every local step comes before the one agreement. */
    int bad = coll_check_create(comm, cfg, out, where);
    /* before any kernel of this communicator can run (colli_cuda_preload says why), and before the
     * agreement, so that a rank that cannot load its kernels fails every rank */
    if (!bad && cchan_comm_platform(comm) == CCHAN_PLATFORM_CUDA)
        bad = colli_cuda_preload(cchan_comm_device(comm));
    cchan_coll_t *c = NULL;
    coll_env_t env;
    memset(&env, 0, sizeof env);
    if (!bad) bad = coll_create_local(comm, cfg, &c, &env, where);
    int st = cchan_comm_agree(comm, bad, where, bad ? cchan_last_error() : NULL);
    /* then what changes the choice of algorithm, before anything is set up across the ranks */
    if (!st) st = coll_agree_env(c, cfg, &env, where);
    if (st) {
        if (c) coll_release(c);
        return bad ? bad : st; /* a peer's reason is in cchan_last_error() */
    }
    if ((st = coll_setup_runtime(c, where)) < 0 || (st = coll_setup_epochs(c, where)) < 0 ||
        (c->nranks > 1 && (st = coll_setup_sems(c, where)) < 0) ||
        (c->platform == CCHAN_PLATFORM_CUDA && (st = colli_ce_create(c->device, &c->ce)) < 0) ||
        (st = colli_plans_setup(c, c->plans ? "cchan_coll_create: CCHAN_COLL_PLANS" : where)) < 0) {
        coll_release(c);
        return st;
    }
    *out = c;
    return 0;
}

int cchan_coll_destroy(cchan_coll_t *c) {
    colli_clear_error();
    if (!c) return colli_error(-EINVAL, "cchan_coll_destroy", "coll is NULL");
    /* Peers may still read our scratch through their mappings until they are done with it. */
    int st = cchan_bootstrap_barrier(cchan_comm_bootstrap(c->comm));
    coll_release(c);
    if (st < 0) return colli_wrap(st, "cchan_coll_destroy", "cchan_bootstrap_barrier");
    return 0;
}

/* ------------------------------------------------------------------ registration */

int cchan_coll_register(cchan_coll_t *c, void *ptr, size_t bytes) {
    static const char *where = "cchan_coll_register";
    colli_clear_error();
    if (!c || !ptr || !bytes) return colli_error(-EINVAL, where, "coll, ptr and bytes must be set");
    int st = cchan_comm_check(c->comm, where);
    if (st) return st;
    if (bytes > UINTPTR_MAX - (uintptr_t)ptr)
        return colli_error(CCHAN_ERR_RANGE, where,
                           "%zu bytes at %p run past the end of the address space", bytes, ptr);
    coll_reg_t *g = (coll_reg_t *)calloc(1, sizeof *g);
    if (!g) return colli_error(-ENOMEM, where, "no memory");
    g->ptr = (uint8_t *)ptr;
    g->bytes = bytes;
    st = cchan_mem_register(c->comm, ptr, bytes, 0, &g->mem);
    if (st < 0) {
        free(g);
        return colli_wrap(st, where, "cchan_mem_register");
    }
    st = cchan_mem_exchange(c->comm, g->mem, g->peers);
    if (st < 0) {
        cchan_mem_destroy(g->mem);
        free(g);
        return colli_wrap(st, where, "cchan_mem_exchange");
    }
    /* whether every rank's allocation has 2 MiB pages (ce_allpairs picks its SM share by it) */
    int mine = c->platform == CCHAN_PLATFORM_CUDA && colli_cuda_big_pages(c->device, ptr),
        all[COLL_MAX_RANKS];
    st = cchan_bootstrap_allgather(cchan_comm_bootstrap(c->comm), &mine, all, sizeof mine);
    if (st < 0) {
        coll_reg_free(c, g);
        return colli_wrap(st, where, "cchan_bootstrap_allgather");
    }
    g->big_pages = 1;
    for (int r = 0; r < c->nranks; r++) g->big_pages &= all[r];
    g->next = c->regs;
    c->regs = g;
    return colli_plans_register(c->plans, ptr, bytes);
}

int cchan_coll_deregister(cchan_coll_t *c, void *ptr) {
    static const char *where = "cchan_coll_deregister";
    colli_clear_error();
    if (!c || !ptr) return colli_error(-EINVAL, where, "coll and ptr must be set");
    coll_reg_t **pp = &c->regs;
    while (*pp && (*pp)->ptr != (uint8_t *)ptr) pp = &(*pp)->next;
    if (!*pp) return colli_error(-ENOENT, where, "%p was not registered", ptr);
    coll_reg_t *g = *pp;
    *pp = g->next;
    (void)colli_plans_deregister(c->plans, ptr);
    /* Every rank is done with the buffer (its peers' channels and mappings) before it goes. */
    int st = cchan_bootstrap_barrier(cchan_comm_bootstrap(c->comm));
    coll_reg_free(c, g);
    if (st >= 0) st = cchan_bootstrap_barrier(cchan_comm_bootstrap(c->comm));
    return st < 0 ? colli_wrap(st, where, "cchan_bootstrap_barrier") : 0;
}

const coll_reg_t *colli_find_reg(const cchan_coll_t *c, const void *p, size_t bytes) {
    const uint8_t *q = (const uint8_t *)p;
    for (const coll_reg_t *g = c->regs; g; g = g->next)
        if (q >= g->ptr && bytes <= g->bytes && (size_t)(q - g->ptr) <= g->bytes - bytes) return g;
    return NULL;
}
