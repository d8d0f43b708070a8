/* cchan MoE: what the host runtime (cchan_moe.c) and the CUDA launcher (moe_cuda.cu) share. */
#ifndef CCHAN_MOE_INTERNAL_H
#define CCHAN_MOE_INTERNAL_H

#include "cchan_moe.h"
#include "moe_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_THREADS 512     /* threads per block of the LL kernels */
#define MOE_HT_THREADS 1024 /* and of the HT kernels: few SMs, so many loads in flight each */

enum moe_kind { MOE_KIND_DISPATCH = 1, MOE_KIND_COMBINE = 2, MOE_KIND_HT_META = 3 };

#define MOE_HT_DEFAULT_BLOCKS 24 /* HT kernels use at most this many SMs by default */

/* Implementation choices a group reads from CCHAN_MOE_VARIANT ("key=value,...") at creation
 * (cchan_moe.c), so that one benchmark run can compare them; every rank must pass the same. The
 * defaults are the fastest measured on 2 H200s (docs/moe.md).
 *   ll_reduce=1  LL combine: the expert side sums a token's local experts and sends one f32 row
 *                per (token, rank) (0: one bf16 row per (token, k), summed at the token's rank)
 *   pdl=1        dispatch and combine kernels launch as programmatic dependents of the previous
 *                kernel on the stream (sm_90): their launch (and the LL routing scan) overlaps
 *                the previous kernel's tail
 *   ht_senders=12, ht_csenders=8, ht_chunks=48, ht_csub=4
 *                HT: blocks that send in dispatch / combine (the rest receive), chunks per rank's
 *                tokens, and progress flags per chunk in combine */
typedef struct moe_variant {
    int32_t ll_reduce, pdl;
    int32_t ht_senders, ht_csenders, ht_chunks, ht_csub;
} moe_variant_t;

/* The CUDA side (moe_cuda.cu; absent from builds without CUDA). Each returns 0 or
 * CCHAN_ERR_CUDA with a message in moe_cuda_error(). */
int moe_cuda_malloc(size_t bytes, void **ptr);
void moe_cuda_free(void *ptr);
int moe_cuda_memcpy_async(void *dst, const void *src, size_t bytes, void *stream);
int moe_cuda_memset_async(void *dst, int v, size_t bytes, void *stream);
int moe_cuda_stream_sync(void *stream);
int moe_cuda_sm_count(int device, int *out);
int moe_cuda_prepare(size_t smem_bytes);
int moe_cuda_launch(int kind, const moe_dev_t *dev, const moe_op_t *op, int nblocks,
                    size_t smem_bytes, int pdl, void *stream);
const char *moe_cuda_error(void);

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_MOE_INTERNAL_H */
