/* cchan_exec: runs execution plans (docs/plan-format.md) produced by the DSL compiler.
 *
 * A plan lists, for every rank, the channels to build, the semaphores and scratch to allocate and
 * each thread block's operations. The executor checks a plan once when it loads it (every rule of
 * the format that can be checked without running it, plus the cross-rank rules: both ends of every
 * channel, one wait per signal, one acquire per release, the same number of barriers on every
 * rank), builds the channels, semaphores and scratch once per communicator, and then runs one
 * interpreter kernel per call: every block copies its operation list into shared memory and
 * executes it with the inline channel primitives (the cchan device headers). On the host platform
 * every block is a CPU thread. Repeated calls and CUDA-graph replays reuse everything.
 *
 * Buffers: a plan whose channels reach a peer's input or output (memory channel `remote_buffers`,
 * port-channel puts from or to them) needs those buffers registered with cchan_exec_register() on
 * every rank, in the same order, and called with buffers at the same offset of the same
 * registration on every rank (NCCL's symmetric-buffer convention). Plans that reach only the
 * peers' scratch run on any device memory.
 *
 * Sizes: `count` is the number of elements of one rank's input (`in_bytes = count * dtype size`);
 * in_bytes must be a multiple of the plan's granularity. A plan is correct at every such size; its
 * [min_bytes, max_bytes] says where it is meant to be chosen (cchan_exec_plan_fits, the selector).
 *
 * Every function returns 0 or a negative cchan status (cchan/status.h); cchan_exec_last_error()
 * then says what failed, naming the plan field or argument and its value.
 */
#ifndef CCHAN_EXEC_H
#define CCHAN_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "cchan/cchan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cchan_exec_dtype {
    CCHAN_EXEC_F32 = 0,
    CCHAN_EXEC_F16 = 1,
    CCHAN_EXEC_BF16 = 2
} cchan_exec_dtype_t;

typedef enum cchan_exec_redop { CCHAN_EXEC_SUM = 0 } cchan_exec_redop_t;

typedef enum cchan_exec_collective {
    CCHAN_EXEC_ALLREDUCE = 0,
    CCHAN_EXEC_ALLGATHER = 1,
    CCHAN_EXEC_REDUCESCATTER = 2,
    CCHAN_EXEC_ALLTOALL = 3,
    CCHAN_EXEC_BROADCAST = 4,
    CCHAN_EXEC_CUSTOM = 5
} cchan_exec_collective_t;

typedef struct cchan_exec_plan cchan_exec_plan_t;
typedef struct cchan_exec cchan_exec_t;

/* Loads and checks a plan (jansson). No communicator needed: the checks are those of the format.
 * The error names the field (`ranks[1].threadblocks[0].ops[3].ch`) and the value. */
CCHAN_API int cchan_exec_plan_load_file(const char *path, cchan_exec_plan_t **out);
CCHAN_API int cchan_exec_plan_load_string(const char *json, size_t len, cchan_exec_plan_t **out);
CCHAN_API void cchan_exec_plan_free(cchan_exec_plan_t *plan);

/* What a loaded plan is for. */
typedef struct cchan_exec_plan_info {
    const char *name;
    cchan_exec_collective_t collective;
    int nranks;
    int root; /* broadcast; -1 otherwise */
    int inplace;
    uint64_t min_bytes, max_bytes;  /* of one rank's input; max 0: no upper bound */
    uint64_t granularity;           /* in_bytes must be a multiple of it */
    uint64_t loop_unit;             /* bytes of a chunk per loop iteration; 0: no loops */
    uint32_t nblocks;               /* thread blocks of the interpreter kernel */
    uint32_t in_chunks, out_chunks; /* output bytes = in_bytes / in_chunks * out_chunks */
    int uses_port;                  /* port channels (a proxy thread per executor) */
    int cross_block;                /* semaphores between blocks: needs co-resident blocks */
} cchan_exec_plan_info_t;
CCHAN_API int cchan_exec_plan_info(const cchan_exec_plan_t *plan, cchan_exec_plan_info_t *out);
/* 1 when the plan runs in_bytes (granularity and size range), else 0 (also for a NULL plan, with a
 * last error naming it). */
CCHAN_API int cchan_exec_plan_fits(const cchan_exec_plan_t *plan, uint64_t in_bytes);
CCHAN_API const char *cchan_exec_collective_name(cchan_exec_collective_t c);

#define CCHAN_EXEC_CONFIG_MAGIC 0x63637831u /* "ccx1" */
/* cchan_exec_config_t.flags */
/* Runs never set anything up collectively: a run that needs more scratch than create or
 * cchan_exec_prepare made fails (cchan_exec_check says so first) instead of growing it, so no run
 * ever calls the bootstrap. For callers that drive several ranks from one thread (NCCL group calls,
 * nccl-tests -g N); cchan_coll creates its executors so. */
#define CCHAN_EXEC_NO_GROW 1u
typedef struct cchan_exec_config {
    size_t size;
    uint32_t magic;
    uint32_t version;
    /* Instances: the plan runs this many times side by side, each on its own part of every chunk
     * (a multiple of the plan's align) with its own channels' semaphores and blocks, for more
     * thread blocks than the plan has (every plan operation maps a chunk's byte x to byte x of
     * other chunks, so the parts are independent). 0: CCHAN_EXEC_INSTANCES where set, else chosen
     * for every call from its size, the plan's blocks and the device (docs/executor.md); at most
     * 64. Every rank passes the same value. */
    uint32_t instances;
    uint32_t flags; /* CCHAN_EXEC_NO_GROW */
    /* The largest input (bytes of one rank's) create sets the executor up for (scratch); 0: the
     * plan's max_bytes where it has one. Every rank passes the same value. */
    uint64_t max_bytes;
} cchan_exec_config_t;
#define CCHAN_EXEC_CONFIG_INIT                                                                     \
    { sizeof(cchan_exec_config_t), CCHAN_EXEC_CONFIG_MAGIC, CCHAN_VERSION_CODE, 0, 0, 0 }

/* Collective over comm's ranks: checks the plan against the communicator (nranks, this rank),
 * builds the semaphores, channels, scratch and the device copy of the operation lists. The plan
 * must outlive the executor. */
CCHAN_API int cchan_exec_create(cchan_comm_t *comm, const cchan_exec_plan_t *plan,
                                cchan_exec_t **out);
/* With a config (NULL: defaults, as cchan_exec_create). */
CCHAN_API int cchan_exec_create_ex(cchan_comm_t *comm, const cchan_exec_plan_t *plan,
                                   const cchan_exec_config_t *cfg, cchan_exec_t **out);
/* Collective: waits for every rank, then releases everything. */
CCHAN_API int cchan_exec_destroy(cchan_exec_t *exec);

/* Collective: sets the executor up for runs of up to max_in_bytes of input (scratch, mapped by
 * every peer), so that those runs need no collective step. Every rank passes the same value. */
CCHAN_API int cchan_exec_prepare(cchan_exec_t *exec, uint64_t max_in_bytes);

/* Collective: registers [ptr, ptr + bytes) of this rank for plans that reach peers' inputs or
 * outputs (every rank its own buffer, in the same order). */
CCHAN_API int cchan_exec_register(cchan_exec_t *exec, void *ptr, size_t bytes);
/* Collective: later runs stop using the buffer; the caller may free it once this returns. */
CCHAN_API int cchan_exec_deregister(cchan_exec_t *exec, void *ptr);

/* Runs the plan on send (one rank's input, count elements) and recv (the plan's output). In-place
 * plans take recv == send (AllReduce, Broadcast) or send == recv + rank * in_bytes (AllGather).
 * `stream` is a cudaStream_t (NULL: the default stream). On the host platform the call returns when
 * the plan has run, or, with stream != NULL (any value), as soon as its blocks have started, like
 * a kernel launch: cchan_exec_sync() waits for it (so one thread can drive several ranks). Runs of
 * one executor must be ordered (one stream, or synchronized): they share its scratch, semaphores
 * and LL epochs. Every rank calls it with the same count and dtype. No run calls the bootstrap
 * except one that needs more scratch than create or cchan_exec_prepare set up, which grows it
 * collectively (refused instead with CCHAN_EXEC_NO_GROW). The first run on new buffers binds them
 * (host work, synchronous): do it before capturing a CUDA graph. */
CCHAN_API int cchan_exec_run(cchan_exec_t *exec, const void *send, void *recv, size_t count,
                             cchan_exec_dtype_t dtype, cchan_exec_redop_t op, void *stream);

/* Waits for this executor's runs to complete: on the host platform joins an asynchronous run and
 * returns its status; on CUDA synchronizes the device. */
CCHAN_API int cchan_exec_sync(cchan_exec_t *exec);

/* The checks of cchan_exec_run without running anything: 0 when the call would be accepted
 * (sizes, placement, registration), else the error it would return (for selectors). */
CCHAN_API int cchan_exec_check(const cchan_exec_t *exec, const void *send, const void *recv,
                               size_t count, cchan_exec_dtype_t dtype);

/* Queries: a NULL exec gives NULL or -EINVAL and a last error naming it. */
CCHAN_API const cchan_exec_plan_t *cchan_exec_plan(const cchan_exec_t *exec);
/* The most instances the executor runs (cchan_exec_config_t): fixed, or the largest a call may
 * be given when they are chosen per call. */
CCHAN_API int cchan_exec_instances(const cchan_exec_t *exec);
/* The instances a run of in_bytes of input gets (the rule in docs/executor.md, or the fixed
 * count). */
CCHAN_API int cchan_exec_instances_for(const cchan_exec_t *exec, uint64_t in_bytes);
CCHAN_API size_t cchan_exec_dtype_size(cchan_exec_dtype_t dtype);

/* The calling thread's last cchan_exec error with its context; "" if none. */
CCHAN_API const char *cchan_exec_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_EXEC_H */
