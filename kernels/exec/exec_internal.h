/* cchan_exec internals shared by the loader (exec_plan.c), the runtime (exec.c) and the CUDA
 * launcher (exec_cuda.cu). */
#ifndef CCHAN_EXEC_INTERNAL_H
#define CCHAN_EXEC_INTERNAL_H

#include "cchan_exec.h"
#include "exec_interp.h"
#include "exec_program.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct exec_chan_desc {
    int type; /* exec_chan_type */
    int peer;
    int index;
    unsigned remote_mask; /* 1 << exec_buf the peer's buffers this channel reaches */
    unsigned port_pairs;  /* port: 1 << (src_buf * 3 + dst_buf) of the puts on this channel */
} exec_chan_desc_t;

typedef struct exec_rank_desc {
    uint32_t scratch_chunks;
    uint32_t semaphores;
    uint32_t nch;
    exec_chan_desc_t *ch;
    uint32_t nblocks;
    exec_block_t *blocks;
    exec_op_t *ops;
    exec_ref_t *refs;
    uint32_t nops, nrefs;
    uint32_t max_block_bytes; /* the largest block's ops + refs, bytes (shared memory) */
} exec_rank_desc_t;

struct cchan_exec_plan {
    char *name;
    cchan_exec_collective_t collective;
    int nranks;
    int root;
    int protocol;
    int inplace;
    uint64_t min_bytes, max_bytes, align, granularity, loop_unit;
    uint32_t buf_chunks[EXEC_NBUF]; /* buffers.input, .output, .scratch */
    uint32_t scratch_factor;
    int ll_double_buffer;
    uint32_t nblocks; /* the most over all ranks */
    int uses_port, cross_block, uses_packets, uses_barrier;
    unsigned need_reg; /* 1 << exec_buf: input/output some peer reaches (registration needed) */
    uint32_t mem_sems, port_sems; /* semaphore indices per peer: max channel index + 1 */
    exec_rank_desc_t *ranks;
};

/* The buffer an in-place plan does not name: the input, which is part of the output (NCCL's
 * convention), except for ReduceScatter, whose output is part of the input. -1 out of place. */
static inline int execi_inplace_absent(const struct cchan_exec_plan *p) {
    if (!p->inplace) return -1;
    return p->collective == CCHAN_EXEC_REDUCESCATTER ? EXEC_BUF_OUTPUT : EXEC_BUF_INPUT;
}

/* Records the calling thread's error message (cchan_exec_last_error) and returns status. */
int execi_error(int status, const char *where, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void execi_clear_error(void);
const char *execi_op_name(int op);
/* What the plan means (exec_verify.c): its buffers fit the collective, and a simulated run of
 * every rank finishes, has no race, leaves nothing for the next run and computes the collective;
 * 0 or -EINVAL naming the rank, block, op and what is wrong. */
int execi_verify_plan(const cchan_exec_plan_t *p, const char *where);

/* CUDA side (exec_cuda.cu; stubs in exec_nocuda.c). */
int execi_cuda_alloc(int device, size_t bytes, void **out);
int execi_cuda_free(int device, void *ptr);
int execi_cuda_upload(int device, void *dst, const void *src, size_t bytes);
int execi_cuda_sync(int device);
/* Loads the interpreter kernel into device's context, once per process and device: a first launch
 * under CUDA's lazy loading would stall the proxy's copies while a kernel waits on them. */
int execi_cuda_preload(int device);
/* Checks that nblocks blocks of nthreads threads with smem bytes of shared memory can be resident
 * at once (cooperative launch); 0 or an error naming the limit. */
int execi_cuda_prepare(int device, uint32_t nblocks, uint32_t nthreads, uint32_t smem,
                       int cooperative);
/* The SMs this context may use and how many blocks of nthreads threads with smem bytes of shared
 * memory it holds at once. */
int execi_cuda_capacity(int device, uint32_t nthreads, uint32_t smem, int *sms, int *resident);
int execi_cuda_launch(int device, const exec_kargs_t *a, uint32_t nblocks, uint32_t nthreads,
                      uint32_t smem, int cooperative, int pdl, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_EXEC_INTERNAL_H */
