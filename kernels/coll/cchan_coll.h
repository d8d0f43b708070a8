/* cchan_coll: collectives built from cchan channels (an example library users copy from, and the
 * engine behind libcchan_nccl). Every rank of a cchan communicator on one host takes part.
 *
 * Setup is done once: cchan_coll_create() builds memory channels to every peer, scratch buffers
 * and semaphores; every call afterwards only launches kernels and copy-engine copies, so calls are
 * capturable in CUDA graphs and replay correctly any number of times.
 *
 * Buffers: send/recv may be any device memory of this rank. Buffers registered with
 * cchan_coll_register() (collectively, every rank its own buffer, in the same order) are used in
 * place by the zero-copy algorithms; others go through the scratch buffers.
 *
 * Streams: `stream` is a cudaStream_t (hipStream_t) passed as void *; NULL is the default stream.
 * On the host platform the call runs the same algorithm on CPU threads and returns when done.
 *
 * Every function returns 0 or a negative cchan status with cchan_last_error() set. Collective calls
 * must be made by every rank, in the same order, with the same count, dtype and algo.
 */
#ifndef CCHAN_COLL_H
#define CCHAN_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "cchan/cchan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The numbering is cchan_exec's (cchan_exec_dtype_t): a call's dtype reaches a plan unchanged. */
typedef enum cchan_coll_dtype {
    CCHAN_COLL_F32 = 0,
    CCHAN_COLL_F16 = 1,
    CCHAN_COLL_BF16 = 2
} cchan_coll_dtype_t;

/* The collectives. The numbering is cchan_exec's (cchan_exec_collective_t), so a plan's collective
 * and a call's op are one value; AllToAll and Broadcast run on loaded plans only. */
typedef enum cchan_coll_op {
    CCHAN_COLL_ALLREDUCE = 0,
    CCHAN_COLL_ALLGATHER = 1,
    CCHAN_COLL_REDUCESCATTER = 2,
    CCHAN_COLL_ALLTOALL = 3,
    CCHAN_COLL_BROADCAST = 4
} cchan_coll_op_t;

typedef enum cchan_coll_algo {
    CCHAN_COLL_AUTO = 0,        /* the size-based selector (cchan_coll_select) */
    CCHAN_COLL_LL_ALLPAIRS = 1, /* one phase, LL packets on memory channels (small messages) */
    CCHAN_COLL_HB_ALLPAIRS = 2, /* two phase all-pairs, HB memory channels */
    CCHAN_COLL_SWITCH = 3, /* two phase on switch channels (portable path unless NVLS opt-in) */
    CCHAN_COLL_CE_ALLPAIRS = 4, /* copy engines write the peers' outputs, SMs reduce (large) */
    CCHAN_COLL_ALGO_COUNT = 5,
    CCHAN_COLL_PLAN = 100 /* cchan_coll_choose's algo when a loaded plan runs the call */
} cchan_coll_algo_t;

#define CCHAN_COLL_CONFIG_MAGIC 0x63636331u /* "ccc1" */
typedef struct cchan_coll_config {
    size_t size;
    uint32_t magic;
    uint32_t version;
    size_t scratch_bytes; /* per-rank scratch for the non-zero-copy paths; 0: default */
    int max_blocks;       /* upper bound on blocks per collective kernel; 0: default */
} cchan_coll_config_t;
#define CCHAN_COLL_CONFIG_INIT                                                                     \
    { sizeof(cchan_coll_config_t), CCHAN_COLL_CONFIG_MAGIC, CCHAN_VERSION_CODE, 0, 0 }

typedef struct cchan_coll cchan_coll_t;

/* Collective over comm's ranks. cfg may be NULL. comm must outlive the returned object. */
CCHAN_API int cchan_coll_create(cchan_comm_t *comm, const cchan_coll_config_t *cfg,
                                cchan_coll_t **out);
CCHAN_API int cchan_coll_destroy(cchan_coll_t *coll); /* collective */

/* Collective: registers [ptr, ptr+bytes) of this rank for zero-copy use by later calls. */
CCHAN_API int cchan_coll_register(cchan_coll_t *coll, void *ptr, size_t bytes);
/* Collective: later calls stop using the buffer; the caller may free it once this returns. */
CCHAN_API int cchan_coll_deregister(cchan_coll_t *coll, void *ptr);

/* recv[i] = sum over ranks of send[i], i < count. send == recv is in place. */
CCHAN_API int cchan_coll_allreduce(cchan_coll_t *coll, const void *send, void *recv, size_t count,
                                   cchan_coll_dtype_t dtype, cchan_coll_algo_t algo, void *stream);
/* recv[r * sendcount + i] = send of rank r [i]. In place when send == recv + rank * sendcount. */
CCHAN_API int cchan_coll_allgather(cchan_coll_t *coll, const void *send, void *recv,
                                   size_t sendcount, cchan_coll_dtype_t dtype,
                                   cchan_coll_algo_t algo, void *stream);
/* recv[i] = sum over ranks of send[rank * recvcount + i]. In place when recv == send + rank *
 * recvcount. */
CCHAN_API int cchan_coll_reducescatter(cchan_coll_t *coll, const void *send, void *recv,
                                       size_t recvcount, cchan_coll_dtype_t dtype,
                                       cchan_coll_algo_t algo, void *stream);

/* The default rule's native row for this op and message size (bytes of the full buffer); the
 * default rule starts from it and then looks at the buffers (cchan_coll_select_buffers). A tuning
 * table or a plan may run another algorithm (cchan_coll_choose says what an AUTO call runs).
 * For a NULL coll or an op other than AllReduce, AllGather and ReduceScatter: (int)result is
 * -EINVAL and the last error names the argument and its valid values; the same from
 * cchan_coll_select_buffers. */
CCHAN_API cchan_coll_algo_t cchan_coll_select(const cchan_coll_t *coll, cchan_coll_op_t op,
                                              size_t bytes);
/* The native algorithm of the default rule for a call on these buffers (send and recv as the call
 * takes them): the row above, except that the copy-engine rows run HB all-pairs where the
 * call's buffers are not registered (CE AllReduce also without 2 MiB pages or with ce_rs 0), and
 * a ReduceScatter above 512 KiB on a registered send runs HB all-pairs (zero-copy) instead of LL.
 * (HB all-pairs runs zero-copy on registered buffers within zc_ag_max / zc_rs_max / 16 MiB.) */
CCHAN_API cchan_coll_algo_t cchan_coll_select_buffers(const cchan_coll_t *coll, cchan_coll_op_t op,
                                                      size_t bytes, const void *send,
                                                      const void *recv);
/* 1 if algo implements op on this communicator (e.g. in the size limits of its scratch), else 0;
 * 0 with the last error naming the argument for a NULL coll, an unknown op or an unknown algo. */
CCHAN_API int cchan_coll_supported(const cchan_coll_t *coll, cchan_coll_op_t op,
                                   cchan_coll_algo_t algo, size_t bytes);
CCHAN_API const char *cchan_coll_algo_name(cchan_coll_algo_t algo);

/* Selection (docs/collectives.md, "Selection"). A call with CCHAN_COLL_AUTO runs the choice of one
 * selector over (collective, ranks, dtype, size, in place) among the registry's algorithms: the
 * native ones and the loaded plans, each declaring what it applies to (cchan_coll_algos):
 *   1. the tuning table (CCHAN_COLL_TUNING=file at cchan_coll_create, or cchan_coll_load_tuning):
 *      of its rows that hold the call and whose algorithm can run it (a native one that supports
 *      the size and buffers; a plan loaded, set up, fitting the size and accepting the buffers),
 *      the one of the least measured time;
 *   2. else the default rule of this GPU generation: the native size table (cchan_coll_select,
 *      then the buffers as cchan_coll_select_buffers); plans rank below the native kernels, so
 *      they run AllReduce, AllGather and ReduceScatter only where the table says so. AllToAll and
 *      Broadcast, which have no native kernel, run the fitting plan of the narrowest size range
 *      (then file-name order).
 * Every rank must load the same table and plans, and set the same CCHAN_COLL_* variables and
 * config: cchan_coll_create and the loads compare them across the ranks (digests, one all-gather)
 * and fail every rank with -EINVAL naming the first that differs and each rank's value
 * (docs/collectives.md, "Configuration agreed at create"). CCHAN_DEBUG=INFO logs, for each
 * (collective, size, dtype, in place) the first time a communicator sees it, what ran and why. */

/* Plans (docs/executor.md): collective; path is a directory, whose `<name>.n<ranks>.json` for
 * this communicator's size are loaded in file-name order, or one plan file (its nranks must be the
 * communicator's). An executor is set up, here, only for a plan the selector can pick: one its
 * collective has no native kernel for (AllToAll, Broadcast) or one a tuning-table row names; the
 * others stay parsed (in cchan_coll_algos) and are set up when a table loaded later names them.
 * No call sets anything up, since one thread may drive several ranks (nccl-tests -g N).
 * cchan_coll_create loads CCHAN_COLL_PLANS=dir the same way. Returns the number of plans loaded so
 * far, or a negative status (CCHAN_ERR_UNSUPPORTED in a build without cchan_exec). A plan the
 * device cannot run (its blocks cannot all be resident) is left out. */
CCHAN_API int cchan_coll_load_plans(cchan_coll_t *coll, const char *path);
/* Collective: replaces the tuning table by the file's (format: docs/collectives.md, "Tuning
 * table"; cchan-coll-bench --tuning-out writes one), checks that every rank read the same table,
 * and sets up the loaded plans it names. NULL: back to the default rule. Returns the number of
 * rows. */
CCHAN_API int cchan_coll_load_tuning(cchan_coll_t *coll, const char *path);

/* One entry of the registry: what an algorithm applies to. */
typedef struct cchan_coll_algo_info {
    const char *name;       /* cchan_coll_algo_name, or the plan's name */
    cchan_coll_algo_t algo; /* a native algorithm, or CCHAN_COLL_PLAN */
    cchan_coll_op_t op;     /* the collective */
    int nranks;             /* the communicator's (plans are made for one size) */
    int root;               /* Broadcast plans: the root; else -1 */
    int inplace;            /* plans: 1 in place only, 0 out of place only; native: -1 both */
    uint32_t dtypes;        /* bit 1 << dtype for every cchan_coll_dtype_t it runs */
    uint64_t min_bytes;     /* message sizes (bytes as cchan_coll_select takes them) */
    uint64_t max_bytes;     /* 0: no upper bound */
    uint64_t granularity;   /* plans: the message is a multiple of it (AllGather: of n times) */
    int ready;              /* 1: can be selected (plans: executor set up); 0: never */
} cchan_coll_algo_info_t;
/* Fills up to max entries (native first, then plans in load order); returns how many there are. */
CCHAN_API int cchan_coll_algos(const cchan_coll_t *coll, cchan_coll_algo_info_t *out, int max);

/* What the selector picks for an AUTO call and why. */
typedef struct cchan_coll_choice {
    cchan_coll_algo_t algo; /* the native algorithm, or CCHAN_COLL_PLAN */
    const char *plan;       /* CCHAN_COLL_PLAN: the plan's name (valid while coll lives) */
    int from_table;         /* 1: a tuning-table row; 0: the default rule */
    char why[256]; /* "table FILE:LINE, 12.5 us (of 3 rows)" or "default rule sm_90: ..." */
} cchan_coll_choice_t;
/* The choice for an AUTO call of op on bytes (as cchan_coll_select takes them; AllToAll: the send
 * buffer, Broadcast: the buffer), dtype, in place or not (root: Broadcast's, else ignored), on
 * send and recv as the call takes them (NULL: any buffers, as registered ones). 0, or
 * CCHAN_ERR_UNSUPPORTED when nothing runs it (AllToAll, Broadcast without a fitting plan), or
 * -EINVAL naming a bad argument. */
CCHAN_API int cchan_coll_choose(const cchan_coll_t *coll, cchan_coll_op_t op,
                                cchan_coll_dtype_t dtype, size_t bytes, int inplace, int root,
                                const void *send, const void *recv, cchan_coll_choice_t *out);
/* The plan an AUTO call on these buffers runs, or NULL (cchan_coll_choose's plan). */
CCHAN_API const char *cchan_coll_plan_name(const cchan_coll_t *coll, cchan_coll_op_t op,
                                           cchan_coll_dtype_t dtype, size_t bytes, const void *send,
                                           const void *recv);
/* The plan the last call on coll ran, or NULL (a native kernel ran). */
CCHAN_API const char *cchan_coll_last_plan(const cchan_coll_t *coll);
/* The choice the last AUTO call on coll ran (algo CCHAN_COLL_AUTO when it named its algorithm). */
CCHAN_API int cchan_coll_last_choice(const cchan_coll_t *coll, cchan_coll_choice_t *out);
/* AllToAll (recv[r * count + i] = send of rank r [rank * count + i]) and Broadcast (recv = root's
 * send) run on loaded plans only: CCHAN_ERR_UNSUPPORTED, with nothing launched, when none fits. */
CCHAN_API int cchan_coll_alltoall(cchan_coll_t *coll, const void *send, void *recv, size_t count,
                                  cchan_coll_dtype_t dtype, void *stream);
CCHAN_API int cchan_coll_broadcast(cchan_coll_t *coll, const void *send, void *recv, size_t count,
                                   cchan_coll_dtype_t dtype, int root, void *stream);

/* Tuning parameters of the copy-engine and zero-copy paths, by name, for measuring sweeps
 * (cchan-coll-bench -T / --sweep). Defaults come from CCHAN_COLL_<NAME> (upper case) in the
 * environment at cchan_coll_create, else from built-in values measured on two GPUs
 * (docs/collectives.md lists them, docs/tuning.md has the figures). A value applies to calls made
 * after it is set (a captured graph keeps the values of its capture); every rank must set the same
 * values between the same calls. -EINVAL for an unknown name or a value out of range, -ENOENT from
 * get for an unknown name.
 *   ce_lanes        1..8      CUDA streams the copy engines' copies are spread over (default 1)
 *   ce_chunk        >= 4 KiB  CE AllReduce: bytes of each shard pushed and reduced per kernel
 *                             before the copy engines copy the result out (the pipeline's chunk;
 *                             at most a staging slot, with the default scratch on 2 GPUs about
 *                             80 MiB with ce_rs and 120 without, and with ce_rs at most half
 *                             a shard whose halves are 16 MiB or more; default 64 MiB)
 *   ce_sm_permille  -1..1000  CE paths: share of the bytes for peers that the SMs store instead of
 *                             the copy engines; -1 (default): 0 where every rank's send and recv
 *                             allocations are whole numbers of 2 MiB (2 MiB pages) for AllGather
 *                             from 512 MiB and AllReduce with ce_rs, else 400
 *   zc_block_bytes  >= 1 KiB  zero-copy AllReduce, AllGather, ReduceScatter: bytes a block
 *                             moves (sets the grid; 32 KiB)
 *   zc_ag_max       >= 0      HB AllGather on a registered recv: zero-copy (stores straight into
 *                             the peers' recv) up to this many bytes of output (default 64 MiB;
 *                             0: never)
 *   zc_rs_max       >= 0      HB ReduceScatter on a registered send: zero-copy (reads straight
 *                             from the peers' send) up to this many bytes of input (default
 *                             64 MiB; 0: never)
 *   ce_rs           -1..1     CE AllReduce: the copy engines push the reduce-scatter's shards
 *                             too (1) or the SMs do (0); -1 (default): 1 where every rank's send
 *                             and recv allocations are whole numbers of 2 MiB
 *   ce_regions      2..8      CE AllReduce with ce_rs: staging regions; the copy engines push up
 *                             to ce_regions - 1 chunks ahead of the reduction (default 3)
 *   pdl             0 or 1    kernels of calls up to 2 MiB launch as programmatic dependents of
 *                             the stream's previous kernel on sm_90+ (1, default) or plainly (0) */
CCHAN_API int cchan_coll_set_param(cchan_coll_t *coll, const char *name, int64_t value);
CCHAN_API int cchan_coll_get_param(const cchan_coll_t *coll, const char *name, int64_t *out);
CCHAN_API size_t cchan_coll_dtype_size(cchan_coll_dtype_t dtype);

/* The calling thread's last error: the same message as cchan_last_error(), which cchan_coll's own
 * failures (bad argument, unsupported size) write too, with the runtime call's message after
 * theirs where one failed under them. "" if none. */
CCHAN_API const char *cchan_coll_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_COLL_H */
