/* cchan_coll internals shared by the host runtime and the CUDA launcher (coll_cuda.cu). The host
 * runtime is cut by concern: coll.c (create, destroy, registration), coll_param.c (tuning
 * parameters, names, errors), coll_scratch.c (scratch layout), coll_select.c (which algorithm
 * runs), coll_launch.c (running one body), coll_ce.c (copy-engine orchestration) and coll_ops.c
 * (the collectives' entry points). */
#ifndef CCHAN_COLL_INTERNAL_H
#define CCHAN_COLL_INTERNAL_H

#include "cchan_coll.h"
#include "coll_algos.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One algorithm body, i.e. one kernel per dtype. */
typedef enum coll_kernel {
    COLL_K_LL_ALLREDUCE = 0,
    COLL_K_LL_ALLGATHER,
    COLL_K_LL_REDUCESCATTER,
    COLL_K_HB_ALLREDUCE,
    COLL_K_HB_ALLGATHER,
    COLL_K_HB_REDUCESCATTER,
    COLL_K_ZC_ALLREDUCE,
    COLL_K_SWITCH_ALLREDUCE,
    COLL_K_BARRIER, /* one block */
    COLL_K_CE_RS,
    COLL_K_AG_PUSH,
    COLL_K_ZC_ALLGATHER,
    COLL_K_ZC_REDUCESCATTER,
    COLL_K_COUNT
} coll_kernel_t;

/* Device memory and launches on the CUDA platform (coll_cuda.cu; stubs without CUDA). Each returns
 * 0 or a negative cchan status and writes its message with colli_error(). */
int colli_cuda_alloc(int device, size_t bytes, void **out);
int colli_cuda_free(int device, void *ptr);
int colli_cuda_copy_to_device(int device, void *dst, const void *src, size_t bytes);
int colli_cuda_launch(int device, coll_kernel_t k, int dtype, const coll_args_t *args,
                      uint32_t nblocks, uint32_t nthreads, int pdl, void *stream);

/* Loads every kernel the launcher may pick into device's context, once per process and device
 * (CUDA's lazy loading would load each at its first launch, which stalls the proxy's copies while
 * another of our kernels waits on them: coll_cuda.cu). */
int colli_cuda_preload(int device);

/* 1 when the allocation holding ptr is a whole number of 2 MiB (so mapped with 2 MiB pages). */
int colli_cuda_big_pages(int device, const void *ptr);
/* Compute capability as major * 10 + minor (90: sm_90), 0 when unknown. */
int colli_cuda_sm(int device);

/* Copy-engine copies on side streams of the caller's stream (CE all-pairs). fork: `lane` waits
 * for the work enqueued on `stream` so far; copy: a cudaMemcpyAsync on the lane (peer memory
 * mapped here: the copy engines write across NVLink); join: `stream` waits for the lane. All of it
 * is capturable in a CUDA graph (a fork/join of the capturing stream). */
#define COLLI_CE_LANES_MAX 8
typedef struct colli_ce colli_ce_t;
int colli_ce_create(int device, colli_ce_t **out);
void colli_ce_destroy(int device, colli_ce_t *ce);
int colli_ce_fork(int device, colli_ce_t *ce, int lane, void *stream);
int colli_ce_copy(int device, colli_ce_t *ce, int lane, void *dst, const void *src, size_t bytes);
int colli_ce_join(int device, colli_ce_t *ce, int lane, void *stream);
/* Marks: mark `slot` records what lane `lane` has enqueued so far; a later wait makes `stream` wait
 * for that point only (not for what the lane enqueued after it). Slots are reused: a slot's wait
 * must come (in host order) before the slot is marked again. */
#define COLLI_CE_MARKS 16
int colli_ce_mark(int device, colli_ce_t *ce, int lane, int slot);
int colli_ce_wait_mark(int device, colli_ce_t *ce, int slot, void *stream);

/* Records the calling thread's error message (cchan_coll_last_error) and returns status. */
int colli_error(int status, const char *where, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* A cchan runtime call `what` failed: its own message prefixed with ours. */
int colli_wrap(int status, const char *where, const char *what);
/* A cchan_coll entry point starts: no error of its own yet. */
void colli_clear_error(void);

/* ------------------------------------------------------------------ the host runtime */

#define COLL_KiB ((size_t)1 << 10)
#define COLL_MiB ((size_t)1 << 20)
#define COLL_HOST_BLOCKS_MAX 64 /* max_blocks on the host platform (one thread each) */

/* Tuning parameters (cchan_coll_set_param; coll_param.c holds their names, defaults and limits). */
enum {
    COLL_P_CE_LANES,
    COLL_P_CE_CHUNK,
    COLL_P_CE_SM_PERMILLE,
    COLL_P_ZC_BLOCK_BYTES,
    COLL_P_PDL,
    COLL_P_CE_RS,
    COLL_P_CE_REGIONS,
    COLL_P_ZC_AG_MAX,
    COLL_P_ZC_RS_MAX,
    COLL_PARAM_COUNT
};

/* A buffer registered with cchan_coll_register, mapped from every rank. */
typedef struct coll_reg {
    struct coll_reg *next;
    uint8_t *ptr;
    size_t bytes;
    cchan_mem_t *mem;
    cchan_mem_t *peers[COLL_MAX_RANKS];
    int big_pages; /* every rank's allocation is a whole number of 2 MiB */
} coll_reg_t;

struct cchan_coll {
    cchan_comm_t *comm;
    int rank, nranks, device;
    cchan_platform_t platform;
    uint32_t nthreads, ll_blocks, hb_blocks;
    size_t scratch_bytes;
    cchan_mem_t *scratch;
    cchan_mem_t *peer_scratch[COLL_MAX_RANKS];
    cchan_sem_set_t *sems;
    cchan_semaphore_t *sems_dev;     /* [hb_blocks][nranks - 1] */
    uint32_t *ll_epoch_dev;          /* [ll_blocks] */
    cchan_switch_t *sw_owner;        /* SWITCH: the switch channel over every rank's scratch */
    colli_ce_t *ce;                  /* CE_ALLPAIRS: copy-engine lanes (CUDA) */
    int64_t param[COLL_PARAM_COUNT]; /* cchan_coll_set_param */
    coll_args_t base;                /* fields every call shares */
    coll_reg_t *regs;
    struct colli_plans *plans;   /* execution plans, the registry's plan entries (coll_plan.c) */
    struct colli_tuning *tuning; /* the tuning table, or NULL: the default rule (coll_tune.c) */
    struct colli_seen *seen;     /* (op, size, dtype, in place) already logged at INFO */
    int sm;                      /* compute capability (90: sm_90); 0 on the host platform */
    int64_t plan_max_bytes;      /* CCHAN_COLL_PLAN_MAX_BYTES, read once at create */
    const char *last_plan;       /* the plan the last call ran, or NULL */
    cchan_coll_choice_t last_choice; /* what the last AUTO call ran and why */
};

/* coll_param.c: every parameter's default, or its CCHAN_COLL_<NAME> value from the environment
 * (-EINVAL naming the variable when one is malformed or out of range). */
int colli_params_init(int64_t param[COLL_PARAM_COUNT], const char *where);
/* coll_param.c: parameter i's variable ("CCHAN_COLL_CE_LANES"). */
const char *colli_param_env(int i);

/* coll_agree.c: the ranks agree on what changes the algorithm a rank would choose (the tuning
 * table, the loaded plans, the selection variables, the config), since ranks that chose
 * differently would wait for each other in different algorithms, with no deadline. Each item is
 * a digest (FNV-1a 64 of a canonical form: the value, the table's rows, each plan's name and
 * content) and this rank's value in words for the message. colli_agree all-gathers the digests
 * (one bootstrap all-gather of n * 8 bytes per rank; a second one of the differing item's words
 * only when one differs) and fails every rank alike, -EINVAL with "<name> differs: rank 0 has
 * <value>, rank 1 has <value>", naming the other items that differ too. Collective. */
#define COLLI_FNV_INIT 1469598103934665603ull
static inline uint64_t colli_fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
/* v's 8 bytes, least significant first (the same on every rank whatever its byte order) */
static inline uint64_t colli_fnv_u64(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xffu)) * 1099511628211ull;
    return h;
}
#define COLLI_AGREE_VALUE 160 /* bytes of an item's words, with the NUL */
#define COLLI_AGREE_MAX 32    /* items of one agreement */
typedef struct colli_agree_item {
    const char *name; /* "CCHAN_COLL_TUNING", "tuning table", "cchan_coll_config_t.max_blocks" */
    uint64_t digest;
    char value[COLLI_AGREE_VALUE]; /* "'a.tsv' (3 rows, digest 0x...)", "none", "0" */
} colli_agree_item_t;
int colli_agree(cchan_coll_t *c, const colli_agree_item_t *items, int n, const char *where);

/* coll_scratch.c: the scratch layout for `scratch` bytes on nranks ranks. Sets the LL, HB, CE and
 * SWITCH areas' offsets and slots (and nranks) in *a, lowers *hb_blocks so every HB lane moves 256
 * bytes or more, and returns the bytes to allocate (a little more than asked for: see the file), or
 * 0 when `scratch` is too small. */
size_t colli_scratch_layout(size_t scratch, int nranks, uint32_t *hb_blocks, coll_args_t *a);
/* Bytes of a CE staging slot when the CE area is cut into `regions` regions of a slot per peer. */
uint64_t colli_ce_slot_bytes(const coll_args_t *a, int regions);

/* coll.c: the registration holding [p, p + bytes), or NULL. */
const coll_reg_t *colli_find_reg(const cchan_coll_t *c, const void *p, size_t bytes);

/* coll_select.c: the default rule's name for this communicator ("sm_90", or "sm_90 (unmeasured on
 * sm_80)"), and its native choice for an AUTO call on the regions of send and recv as the call
 * takes them, with why (the size row and any change for the buffers). */
const char *colli_default_rule(const cchan_coll_t *c);
cchan_coll_algo_t colli_default_native(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes,
                                       const void *send, const void *recv, char *why,
                                       size_t why_len);
/* Whether the native algo runs this call: op and size supported, and, for the algorithms that
 * need registered buffers, send and recv's regions registered (NULL buffers: some registration). */
int colli_native_runs(const cchan_coll_t *c, cchan_coll_op_t op, cchan_coll_algo_t algo,
                      size_t bytes, const void *send, const void *recv);

/* coll_select.c: picks the algorithm for a call on `bytes` of send and recv (CCHAN_COLL_AUTO: the
 * selector's row for these buffers) and checks that it can run; for CE_ALLPAIRS, and for HB
 * all-pairs when it runs zero-copy (colli_zc), maps the peers' buffers into `a`. */
int colli_pick(cchan_coll_t *c, cchan_coll_op_t op, cchan_coll_algo_t *algo, size_t bytes,
               const void *send, const void *recv, coll_args_t *a, const char *where);
/* Whether HB all-pairs runs zero-copy on these regions; with `a`, maps the peers' buffers. */
int colli_zc(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes, const void *send,
             const void *recv, coll_args_t *a);

/* coll_launch.c: one kernel (CUDA: on `stream`; host platform: nblocks CPU threads, returning when
 * every block is done), the one-block barrier kernel, and the grids. */
int colli_run(cchan_coll_t *c, coll_kernel_t k, int dt, const coll_args_t *a, uint32_t nblocks,
              void *stream, const char *where);
int colli_run_barrier(cchan_coll_t *c, const coll_args_t *a, void *stream, const char *where);
uint32_t colli_hb_grid(const cchan_coll_t *c, size_t bytes_per_rank);
uint32_t colli_zc_grid(const cchan_coll_t *c, size_t bytes);

/* coll_plan.c: execution plans (cchan_exec), the registry's plan entries. load parses the plans of
 * a directory (this communicator's size, file-name order) or one file and adds them to the
 * registry without setting anything up; setup (collective) builds the executor of every plan the
 * selector can pick (colli_plan_selectable) that has none, and registers the communicator's
 * buffers with it; a plan the device cannot run is left out on every rank alike. No call sets
 * anything up. register/deregister follow cchan_coll_register. */
typedef struct colli_plans colli_plans_t;
typedef struct colli_plan_view {
    const char *name;
    cchan_coll_op_t op;
    int custom; /* a CUSTOM plan: no call runs it */
    int root, inplace;
    uint64_t min_in, max_in, granularity; /* one rank's input; max_in 0: none */
    int ready;                            /* executor set up */
    int left_out;                         /* the device cannot run it */
} colli_plan_view_t;
int colli_plans_load(cchan_coll_t *c, const char *path, const char *where);
/* The agreement's item for the loaded plans (every plan's name and file content, in load order;
 * digest 0 and "none" without a path), and dropping the plans past the first n (a load the ranks
 * did not agree on leaves nothing behind). */
void colli_plans_describe(const cchan_coll_t *c, const char *path, colli_agree_item_t *it);
void colli_plans_truncate(colli_plans_t *plans, int n);
int colli_plans_setup(cchan_coll_t *c, const char *where);
void colli_plans_destroy(colli_plans_t *plans);
int colli_plans_register(colli_plans_t *plans, void *ptr, size_t bytes);
int colli_plans_deregister(colli_plans_t *plans, void *ptr);
int colli_plans_n(const colli_plans_t *plans);
void colli_plan_view(const colli_plans_t *plans, int i, colli_plan_view_t *out);
/* Whether plan i runs a call of in_bytes (one rank's input) on send and recv (NULL: only the size
 * and in-place checks, against `inplace`), dtype passed through. */
int colli_plan_accepts(const colli_plans_t *plans, int i, uint64_t in_bytes, int inplace,
                       const void *send, const void *recv, cchan_coll_dtype_t dtype);
int colli_plan_run(cchan_coll_t *c, int i, const void *send, void *recv, size_t in_count,
                   cchan_coll_dtype_t dtype, void *stream, const char *where);

/* coll_tune.c: the tuning table and the selector. */
typedef struct colli_tuning colli_tuning_t;
int colli_tuning_load(cchan_coll_t *c, const char *path, const char *where); /* collective */
/* Parses the table (no collective step: cchan_coll_create agrees on it with the rest). */
int colli_tuning_parse(const char *path, colli_tuning_t **out, const char *where);
/* The agreement's item for a table (its rows; digest 0 and "none" for NULL). */
void colli_tuning_describe(const colli_tuning_t *t, colli_agree_item_t *it);
void colli_tuning_free(colli_tuning_t *t);
void colli_seen_free(struct colli_seen *s);
/* Whether the selector can ever pick this plan: its collective has no native kernel, or a row of
 * the table names it. */
int colli_plan_selectable(const cchan_coll_t *c, const colli_plan_view_t *v);
/* The choice for an AUTO call (cchan_coll_choose); *plan_index the plan's registry index or -1.
 * With log set, logs it at INFO the first time this (op, bytes, dtype, in place) is seen. */
int colli_choose(cchan_coll_t *c, cchan_coll_op_t op, cchan_coll_dtype_t dtype, size_t bytes,
                 int inplace, int root, const void *send, const void *recv, int log,
                 cchan_coll_choice_t *out, int *plan_index);
/* One rank's input of a call of `bytes` (as cchan_coll_select takes them). */
uint64_t colli_in_bytes(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes);

/* coll_ce.c: CE all-pairs AllReduce and AllGather on registered buffers (`a` mapped). */
int colli_ce_allreduce(cchan_coll_t *c, coll_args_t *a, int dt, void *stream, const char *where);
int colli_ce_allgather(cchan_coll_t *c, coll_args_t *a, void *stream, const char *where);

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_COLL_INTERNAL_H */
