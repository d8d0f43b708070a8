/* The fused AllReduce + residual + RMSNorm kernel and the unfused residual + RMSNorm kernel. */
#include <cuda_runtime.h>

#include "fused_rmsnorm_internal.h"

/* Threads per block: one 16-byte vector (8 bf16) of the block's slice each, up to 1024, in whole
 * warps (cchan_fused_block_sum shuffles over every lane). */
static uint32_t block_threads(uint32_t nvec) {
    uint32_t t = (nvec + CCHAN_WARP_SIZE - 1) / CCHAN_WARP_SIZE * CCHAN_WARP_SIZE;
    return t > CCHAN_FUSED_MAX_THREADS ? CCHAN_FUSED_MAX_THREADS
                                       : (t < CCHAN_WARP_SIZE ? CCHAN_WARP_SIZE : t);
}

__global__ void __launch_bounds__(CCHAN_FUSED_MAX_THREADS)
    cchan_fused_rmsnorm_kernel(const __grid_constant__ cchan_fused_rmsnorm_args_t a) {
    __shared__ float smem[33];
    const uint32_t epoch = a.state[0];
    cchan_fused_send(&a, epoch, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);
    if (a.proto == CCHAN_FUSED_PROTO_HB) cchan_fused_hb_sync(&a, blockIdx.x, threadIdx.x);
    cchan_fused_compute(&a, epoch, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x, smem);
    /* The last block to finish advances the epoch; the next launch on the stream starts after
     * this one has ended, so it reads the new value. */
    __syncthreads();
    if (threadIdx.x == 0) {
        /* No fence: only the count matters, and the kernel boundary publishes the new epoch. */
        if (atomicAdd(&a.state[1], 1u) == gridDim.x - 1) {
            a.state[1] = 0;
            a.state[0] = epoch + 1;
        }
    }
}

__global__ void __launch_bounds__(CCHAN_FUSED_MAX_THREADS)
    cchan_residual_rmsnorm_kernel(const uint16_t *ar, const uint16_t *residual,
                                  const uint16_t *weight, float eps, uint16_t *residual_out,
                                  uint16_t *y, uint32_t tokens, uint32_t hidden) {
    __shared__ float smem[32];
    for (uint32_t row = blockIdx.x; row < tokens; row += gridDim.x)
        cchan_fused_residual_rmsnorm_row(ar, residual, weight, eps, residual_out, y, row, hidden,
                                         threadIdx.x, blockDim.x, smem);
}

/* Every kernel this file launches. */
#define FUSED_KERNELS(X) X(cchan_fused_rmsnorm_kernel) X(cchan_residual_rmsnorm_kernel)

/* Loads both kernels, so that no lazily loaded first launch stalls a port channel's copies later
 * (docs/port_channel.md, "Lazy module loading"). Once per device (bit d of fused_loaded; past 63,
 * at each create); a race loads twice, harmlessly. */
static unsigned long long fused_loaded;

extern "C" int cchan_fused_gpu_preload(int device) {
    const unsigned long long bit = device >= 0 && device < 64 ? 1ull << device : 0;
    if (bit && (__atomic_load_n(&fused_loaded, __ATOMIC_ACQUIRE) & bit)) return 0;
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return cchan_fused_error(CCHAN_ERR_CUDA,
                                 "cchan_fused_rmsnorm_create: cudaSetDevice(%d): %s", device,
                                 cudaGetErrorString(e));
    struct cudaFuncAttributes attr;
#define FUSED_LOAD(k)                                                                              \
    if ((e = cudaFuncGetAttributes(&attr, (const void *)k)) != cudaSuccess)                        \
        return cchan_fused_error(CCHAN_ERR_CUDA,                                                   \
                                 "cchan_fused_rmsnorm_create: cudaFuncGetAttributes(" #k           \
                                 ") on device %d (loading the kernels): %s",                       \
                                 device, cudaGetErrorString(e));
    FUSED_KERNELS(FUSED_LOAD)
#undef FUSED_LOAD
    if (bit) __atomic_fetch_or(&fused_loaded, bit, __ATOMIC_RELEASE);
    return 0;
}

extern "C" int cchan_fused_gpu_setup(const cchan_memory_channel_t *chans, size_t n, size_t partials,
                                     int device, cchan_memory_channel_t **dev_chans,
                                     uint32_t **dev_state, uint64_t **dev_partials) {
    cudaError_t e = cudaSetDevice(device);
    cchan_memory_channel_t *c = NULL;
    uint32_t *s = NULL;
    uint64_t *p = NULL;
    if (e == cudaSuccess) e = cudaMalloc((void **)&c, n * sizeof *c);
    if (e == cudaSuccess) e = cudaMemcpy(c, chans, n * sizeof *c, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMalloc((void **)&s, 2 * sizeof *s);
    if (e == cudaSuccess) e = cudaMemset(s, 0, 2 * sizeof *s);
    if (e == cudaSuccess) e = cudaMalloc((void **)&p, partials * sizeof *p);
    if (e == cudaSuccess) e = cudaMemset(p, 0, partials * sizeof *p);
    if (e != cudaSuccess) {
        cudaFree(c);
        cudaFree(s);
        cudaFree(p);
        return cchan_fused_error(CCHAN_ERR_CUDA, "cchan_fused_rmsnorm_create: %s",
                                 cudaGetErrorString(e));
    }
    *dev_chans = c;
    *dev_state = s;
    *dev_partials = p;
    return 0;
}

extern "C" void cchan_fused_gpu_teardown(cchan_memory_channel_t *dev_chans, uint32_t *dev_state,
                                         uint64_t *dev_partials) {
    cudaFree(dev_chans);
    cudaFree(dev_state);
    cudaFree(dev_partials);
}

extern "C" int cchan_fused_gpu_launch(const cchan_fused_rmsnorm_args_t *a, void *stream) {
    uint32_t units = a->tokens * a->split, nvec = a->hidden / CCHAN_FUSED_VEC_ELEMS;
    uint32_t blocks = units < a->nchan ? units : a->nchan;
    cchan_fused_rmsnorm_kernel<<<blocks, block_threads((nvec + a->split - 1) / a->split), 0,
                                 (cudaStream_t)stream>>>(*a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return cchan_fused_error(CCHAN_ERR_CUDA, "cchan_fused_rmsnorm_run: launch: %s",
                                 cudaGetErrorString(e));
    return 0;
}

extern "C" int cchan_fused_gpu_residual_rmsnorm(const void *ar, const void *residual,
                                                const void *weight, float eps, void *residual_out,
                                                void *y, uint32_t tokens, uint32_t hidden,
                                                void *stream) {
    /* One block per row up to a full wave; each thread keeps a 16-byte vector per pass. */
    uint32_t blocks = tokens < 1024 ? tokens : 1024;
    cchan_residual_rmsnorm_kernel<<<blocks, block_threads(hidden / CCHAN_FUSED_VEC_ELEMS), 0,
                                    (cudaStream_t)stream>>>(
        (const uint16_t *)ar, (const uint16_t *)residual, (const uint16_t *)weight, eps,
        (uint16_t *)residual_out, (uint16_t *)y, tokens, hidden);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return cchan_fused_error(CCHAN_ERR_CUDA, "cchan_fused_residual_rmsnorm: launch: %s",
                                 cudaGetErrorString(e));
    return 0;
}
