/* cchan MoE: what the host runtime (cchan_moe.c) and the CUDA launcher (moe_cuda.cu) share. */
#ifndef CCHAN_MOE_INTERNAL_H
#define CCHAN_MOE_INTERNAL_H

#include "cchan_moe.h"
#include "moe_ht.h"
#include "moe_ll.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_THREADS 512     /* threads per block of the LL kernels */
#define MOE_HT_THREADS 1024 /* and of the HT kernels: few SMs, so many loads in flight each */

enum moe_kind { MOE_KIND_DISPATCH = 1, MOE_KIND_COMBINE = 2, MOE_KIND_HT_META = 3 };

#define MOE_HT_DEFAULT_BLOCKS 24 /* HT kernels use at most this many SMs by default */

/* HT tuning a group reads from CCHAN_MOE_VARIANT ("key=value,...") at creation (cchan_moe.c), so
 * that one benchmark run can compare splits; every rank must pass the same. The defaults and the
 * measurements behind them are in docs/moe.md.
 *   ht_senders, ht_csenders, ht_chunks, ht_csub
 *                blocks that send in dispatch / combine (the rest receive), chunks per rank's
 *                tokens, and progress flags per chunk in combine */
typedef struct moe_variant {
    int32_t ht_senders, ht_csenders, ht_chunks, ht_csub;
} moe_variant_t;

/* The CUDA side (moe_cuda.cu; absent from builds without CUDA). Each returns 0 or
 * CCHAN_ERR_CUDA with a message in moe_cuda_error(). */
int moe_cuda_malloc(size_t bytes, void **ptr);
void moe_cuda_free(void *ptr);
int moe_cuda_memcpy_async(void *dst, const void *src, size_t bytes, void *stream);
int moe_cuda_memset_async(void *dst, int v, size_t bytes, void *stream);
int moe_cuda_stream_sync(void *stream);
/* What the calling thread's context may run at once: the SMs it may use (the device's, less what
 * an MPS active-thread percentage or a green context withholds), and the device's UUID (ranks
 * sharing one GPU find each other by it). */
typedef struct moe_cuda_res {
    int ctx_sms;
    unsigned char uuid[16];
} moe_cuda_res_t;
int moe_cuda_resources(int device, moe_cuda_res_t *out);
/* Loads every kernel of moe_cuda.cu into device's context, once per process and device: CUDA's
 * lazy loading would load each at its first launch, which stalls the proxy's copies while a kernel
 * waits on them. The caller's current device is kept. */
int moe_cuda_preload(int device);
/* Sets the kernels' shared memory and reports the most blocks of `kind`'s kernel (ht: the HT
 * kernels) one SM holds at once. */
int moe_cuda_prepare(size_t smem_bytes, int ht, int *blocks_per_sm);
/* Launches the operation's kernel cooperatively (every block resident at once, or an error at
 * launch). A group's kernels may also be programmatic dependents of the stream's previous kernel
 * (pdl), where the device supports both together (moe_cuda_pdl_ok). */
int moe_cuda_launch(int kind, const moe_dev_t *dev, const moe_op_t *op, int nblocks,
                    size_t smem_bytes, int pdl, void *stream);
int moe_cuda_pdl_ok(void);
/* Host-mapped memory: the group's wait diagnostic, readable after a kernel traps. */
int moe_cuda_host_mapped(size_t bytes, void **host, void **dev);
void moe_cuda_host_free(void *host);
const char *moe_cuda_error(void);

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_MOE_INTERNAL_H */
