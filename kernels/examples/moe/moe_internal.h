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
                    size_t smem_bytes, void *stream);
const char *moe_cuda_error(void);

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_MOE_INTERNAL_H */
