/* cchan_coll internals shared by the host runtime (coll.c) and the CUDA launcher (coll_cuda.cu). */
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
    COLL_K_RING_ALLREDUCE,
    COLL_K_RING_ALLGATHER,
    COLL_K_RING_REDUCESCATTER,
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

/* 1 when the allocation holding ptr is a whole number of 2 MiB (so mapped with 2 MiB pages). */
int colli_cuda_big_pages(int device, const void *ptr);

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

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_COLL_INTERNAL_H */
