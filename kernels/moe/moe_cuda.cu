/* cchan MoE on CUDA: the kernels (one launch per operation, all phases in it) and the few runtime
 * calls the host side needs. Every block of a kernel must be resident at once (blocks wait for
 * each other's counts), so grids are at most one block per SM. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <string.h>

#include "moe_internal.h"

static __thread char moe_cuda_msg[512];

extern "C" const char *moe_cuda_error(void) { return moe_cuda_msg; }

static int moe_cuda_fail(const char *call, cudaError_t e) {
    snprintf(moe_cuda_msg, sizeof moe_cuda_msg, "%s: %s (%s)", call, cudaGetErrorName(e),
             cudaGetErrorString(e));
    return -1;
}

#define MOE_CUDA(call)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return moe_cuda_fail(#call, e_);                                    \
    } while (0)

__device__ static inline void moe_block_init(moe_block_t *b, uint8_t *smem, const moe_dev_t *d) {
    b->block = blockIdx.x;
    b->nblocks = gridDim.x;
    b->tid = threadIdx.x;
    b->nthreads = blockDim.x;
    moe_smem_layout(b, smem, d->top_k, d->nranks, d->local_experts, d->ht ? 0 : d->max_tokens);
}

/* Programmatic dependent launch (sm_90; no-ops elsewhere and when launched without the attribute):
 * the next kernel on the stream may start once every block of this one has begun, and this one
 * waits for the previous kernel's completion and memory before touching anything it wrote. All
 * blocks of a kernel are resident before its dependent can start, so cross-block waits stay safe.
 */
__device__ static inline void moe_pdl_launch_dependents(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ static inline void moe_pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__global__ void __launch_bounds__(MOE_THREADS, 1) moe_k_ll_dispatch(moe_dev_t d, moe_op_t op) {
    extern __shared__ __align__(16) uint8_t smem[];
    moe_pdl_launch_dependents();
    moe_block_t b;
    moe_block_init(&b, smem, &d);
    /* the routing is the handle's copy, written by a memory copy at handle creation: it may be
     * read before the previous kernel has finished */
    if (op.phases & MOE_PHASE_SEND) {
        moe_load_routing(&d, &op, &b, 1);
        moe_block_scan_bits(b.mask, op.num_tokens, d.nranks, b.slot, b.total, b.wsum, b.tid,
                            b.nthreads);
    }
    moe_pdl_wait();
    const uint32_t epoch = moe_op_epoch(&d, &op, &b);
    if (op.phases & MOE_PHASE_SEND) {
        moe_ll_dispatch_send(&d, &op, &b, epoch);
        moe_ll_dispatch_signal(&d, &op, &b, epoch);
    }
    if (op.phases & MOE_PHASE_RECV) moe_ll_dispatch_recv(&d, &op, &b, epoch);
    moe_op_finish(&d, &op, &b, epoch);
}

__global__ void __launch_bounds__(MOE_THREADS, 1) moe_k_ll_combine(moe_dev_t d, moe_op_t op) {
    extern __shared__ __align__(16) uint8_t smem[];
    moe_pdl_launch_dependents();
    moe_block_t b;
    moe_block_init(&b, smem, &d);
    moe_pdl_wait();
    const uint32_t epoch = moe_op_epoch(&d, &op, &b);
    if (d.ll_reduce) {
        if (op.phases & MOE_PHASE_SEND) moe_ll_combine_send_reduced(&d, &op, &b, epoch);
        if (op.phases & MOE_PHASE_RECV) moe_ll_combine_recv_reduced(&d, &op, &b, epoch);
    } else {
        if (op.phases & MOE_PHASE_SEND) moe_ll_combine_send(&d, &op, &b, epoch);
        if (op.phases & MOE_PHASE_RECV) moe_ll_combine_recv(&d, &op, &b, epoch);
    }
    moe_op_finish(&d, &op, &b, epoch);
}

__global__ void __launch_bounds__(MOE_HT_THREADS, 1) moe_k_ht_meta(moe_dev_t d, moe_op_t op) {
    extern __shared__ __align__(16) uint8_t smem[];
    moe_block_t b;
    moe_block_init(&b, smem, &d);
    const uint32_t epoch = moe_op_epoch(&d, &op, &b);
    moe_ht_meta(&d, &op, &b, epoch);
    moe_op_finish(&d, &op, &b, epoch);
}

__global__ void __launch_bounds__(MOE_HT_THREADS, 1) moe_k_ht_dispatch(moe_dev_t d, moe_op_t op) {
    extern __shared__ __align__(16) uint8_t smem[];
    moe_pdl_launch_dependents();
    moe_block_t b;
    moe_block_init(&b, smem, &d);
    moe_pdl_wait();
    const uint32_t epoch = moe_op_epoch(&d, &op, &b);
    if (op.phases & MOE_PHASE_SEND) moe_ht_dispatch_send(&d, &op, &b, epoch);
    if (op.phases & MOE_PHASE_RECV) moe_ht_dispatch_recv(&d, &op, &b, epoch);
    moe_op_finish(&d, &op, &b, epoch);
}

__global__ void __launch_bounds__(MOE_HT_THREADS, 1) moe_k_ht_combine(moe_dev_t d, moe_op_t op) {
    extern __shared__ __align__(16) uint8_t smem[];
    moe_pdl_launch_dependents();
    moe_block_t b;
    moe_block_init(&b, smem, &d);
    moe_pdl_wait();
    const uint32_t epoch = moe_op_epoch(&d, &op, &b);
    if (op.phases & MOE_PHASE_SEND) moe_ht_combine_send(&d, &op, &b, epoch);
    if (op.phases & MOE_PHASE_RECV) moe_ht_combine_recv(&d, &op, &b, epoch);
    moe_op_finish(&d, &op, &b, epoch);
}

extern "C" int moe_cuda_malloc(size_t bytes, void **ptr) {
    MOE_CUDA(cudaMalloc(ptr, bytes));
    MOE_CUDA(cudaMemset(*ptr, 0, bytes));
    return 0;
}

extern "C" void moe_cuda_free(void *ptr) { cudaFree(ptr); }

extern "C" int moe_cuda_memcpy_async(void *dst, const void *src, size_t bytes, void *stream) {
    MOE_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream));
    return 0;
}

extern "C" int moe_cuda_memset_async(void *dst, int v, size_t bytes, void *stream) {
    MOE_CUDA(cudaMemsetAsync(dst, v, bytes, (cudaStream_t)stream));
    return 0;
}

extern "C" int moe_cuda_stream_sync(void *stream) {
    MOE_CUDA(cudaStreamSynchronize((cudaStream_t)stream));
    return 0;
}

extern "C" int moe_cuda_sm_count(int device, int *out) {
    MOE_CUDA(cudaDeviceGetAttribute(out, cudaDevAttrMultiProcessorCount, device));
    return 0;
}

/* The kernels' shared-memory limit only grows, so a group never shrinks another's. */
static size_t moe_smem_limit;

extern "C" int moe_cuda_prepare(size_t smem_bytes) {
    if (smem_bytes <= moe_smem_limit) return 0;
    int optin = 0, dev = 0;
    MOE_CUDA(cudaGetDevice(&dev));
    MOE_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (smem_bytes > (size_t)optin) {
        snprintf(moe_cuda_msg, sizeof moe_cuda_msg,
                 "the kernels need %zu bytes of shared memory per block, the GPU offers %d",
                 smem_bytes, optin);
        return -1;
    }
    MOE_CUDA(cudaFuncSetAttribute(moe_k_ll_dispatch, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem_bytes));
    MOE_CUDA(cudaFuncSetAttribute(moe_k_ll_combine, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem_bytes));
    MOE_CUDA(cudaFuncSetAttribute(moe_k_ht_meta, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem_bytes));
    MOE_CUDA(cudaFuncSetAttribute(moe_k_ht_dispatch, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem_bytes));
    MOE_CUDA(cudaFuncSetAttribute(moe_k_ht_combine, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem_bytes));
    moe_smem_limit = smem_bytes;
    return 0;
}

/* An LL kernel as a programmatic dependent of the stream's previous kernel. */
static int moe_launch_pdl(void (*kernel)(moe_dev_t, moe_op_t), const moe_dev_t *dev,
                          const moe_op_t *op, int nblocks, int nthreads, size_t smem_bytes,
                          cudaStream_t s) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3((unsigned)nblocks);
    cfg.blockDim = dim3((unsigned)nthreads);
    cfg.dynamicSmemBytes = smem_bytes;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    MOE_CUDA(cudaLaunchKernelEx(&cfg, kernel, *dev, *op));
    return 0;
}

extern "C" int moe_cuda_launch(int kind, const moe_dev_t *dev, const moe_op_t *op, int nblocks,
                               size_t smem_bytes, int pdl, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (pdl && !dev->ht)
        return moe_launch_pdl(kind == MOE_KIND_DISPATCH ? moe_k_ll_dispatch : moe_k_ll_combine, dev,
                              op, nblocks, MOE_THREADS, smem_bytes, s);
    if (pdl && kind != MOE_KIND_HT_META) /* the count exchange is followed by a host sync */
        return moe_launch_pdl(kind == MOE_KIND_DISPATCH ? moe_k_ht_dispatch : moe_k_ht_combine, dev,
                              op, nblocks, MOE_HT_THREADS, smem_bytes, s);
    if (dev->ht) {
        if (kind == MOE_KIND_HT_META)
            moe_k_ht_meta<<<nblocks, MOE_HT_THREADS, smem_bytes, s>>>(*dev, *op);
        else if (kind == MOE_KIND_DISPATCH)
            moe_k_ht_dispatch<<<nblocks, MOE_HT_THREADS, smem_bytes, s>>>(*dev, *op);
        else
            moe_k_ht_combine<<<nblocks, MOE_HT_THREADS, smem_bytes, s>>>(*dev, *op);
    } else if (kind == MOE_KIND_DISPATCH) {
        moe_k_ll_dispatch<<<nblocks, MOE_THREADS, smem_bytes, s>>>(*dev, *op);
    } else {
        moe_k_ll_combine<<<nblocks, MOE_THREADS, smem_bytes, s>>>(*dev, *op);
    }
    MOE_CUDA(cudaGetLastError());
    return 0;
}
