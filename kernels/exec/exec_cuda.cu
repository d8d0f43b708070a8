/* cchan_exec on CUDA: the interpreter kernel, its launch, and the device memory helpers. A failed
 * device wait traps (wait.h), so the blocks' return values carry nothing here. */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdint.h>

#include "exec_internal.h"

#define EXEC_KERNEL_THREADS 512

/* Programmatic dependent launch (sm_90; a no-op elsewhere and when launched without the
 * attribute): the stream's next kernel may begin launching now, and this one waits for the
 * previous kernel's completion and memory before touching anything, as cchan_coll's kernels do,
 * so back-to-back runs overlap launch latency with the previous kernel's tail. */
__device__ static inline void exec_pdl_enter(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__global__ void __launch_bounds__(EXEC_KERNEL_THREADS)
    exec_kernel(const __grid_constant__ exec_kargs_t a) {
    extern __shared__ __align__(16) uint8_t exec_smem[];
    exec_pdl_enter();
    (void)exec_block_run(&a, blockIdx.x, threadIdx.x, blockDim.x, a.use_smem ? exec_smem : NULL);
}

static int cuda_err(cudaError_t e, const char *what) {
    return execi_error(CCHAN_ERR_CUDA, "cchan_exec", "%s: %s (%s)", what, cudaGetErrorName(e),
                       cudaGetErrorString(e));
}

static int set_device(int device) {
    cudaError_t e = cudaSetDevice(device);
    return e == cudaSuccess ? 0 : cuda_err(e, "cudaSetDevice");
}

int execi_cuda_alloc(int device, size_t bytes, void **out) {
    int st = set_device(device);
    if (st) return st;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) return cuda_err(e, "cudaMalloc");
    e = cudaMemset(p, 0, bytes);
    if (e != cudaSuccess) {
        cudaFree(p);
        return cuda_err(e, "cudaMemset");
    }
    *out = p;
    return 0;
}

int execi_cuda_free(int device, void *ptr) {
    int st = set_device(device);
    if (st) return st;
    cudaError_t e = cudaFree(ptr);
    return e == cudaSuccess ? 0 : cuda_err(e, "cudaFree");
}

int execi_cuda_upload(int device, void *dst, const void *src, size_t bytes) {
    int st = set_device(device);
    if (st) return st;
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? 0 : cuda_err(e, "cudaMemcpy (host to device)");
}

int execi_cuda_sync(int device) {
    int st = set_device(device);
    if (st) return st;
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? 0 : cuda_err(e, "cudaDeviceSynchronize");
}

int execi_cuda_prepare(int device, uint32_t nblocks, uint32_t nthreads, uint32_t smem,
                       int cooperative) {
    int st = set_device(device);
    if (st) return st;
    if (smem > 48u * 1024u) {
        cudaError_t e = cudaFuncSetAttribute(
            exec_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return cuda_err(e, "cudaFuncSetAttribute(shared memory)");
    }
    /* Blocks that wait on other blocks of the grid (the plan's semaphores) must all be resident
     * at once: a cooperative launch guarantees it. Without such semaphores a block still waits on
     * peers whose blocks may wait on another block of this grid, so the grid must fit the device
     * at once either way (it is refused, not left to hang). */
    int coop = 0, sms = 0, per_sm = 0;
    cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (cooperative && !coop)
        return execi_error(CCHAN_ERR_UNSUPPORTED, "cchan_exec_create",
                           "the plan's blocks wait on one another (semaphores between blocks), "
                           "which needs a cooperative launch, and device %d does not support it",
                           device);
    cudaError_t e =
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, exec_kernel, (int)nthreads, smem);
    if (e != cudaSuccess) return cuda_err(e, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    if ((long long)per_sm * sms < (long long)nblocks)
        return execi_error(CCHAN_ERR_UNSUPPORTED, "cchan_exec_create",
                           "the plan's %u blocks (plan blocks x instances) must all be resident, "
                           "but device %d holds %d blocks of %u threads at once (%d SMs x %d)",
                           nblocks, device, per_sm * sms, nthreads, sms, per_sm);
    return 0;
}

int execi_cuda_launch(int device, const exec_kargs_t *a, uint32_t nblocks, uint32_t nthreads,
                      uint32_t smem, int cooperative, int pdl, void *stream) {
    int st = set_device(device);
    if (st) return st;
    int major = 0;
    if (pdl &&
        (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
         major < 9))
        pdl = 0;
    /* one launch path for the three kinds, all of them capturable in a CUDA graph */
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (cooperative) {
        /* blocks that wait on one another: all resident (execi_cuda_prepare checked they fit) */
        attr[n].id = cudaLaunchAttributeCooperative;
        attr[n++].val.cooperative = 1;
    } else if (pdl) {
        /* a programmatic dependent of the stream's previous kernel (exec_pdl_enter) */
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    cfg.gridDim = dim3(nblocks);
    cfg.blockDim = dim3(nthreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = (cudaStream_t)stream;
    cfg.attrs = n ? attr : NULL;
    cfg.numAttrs = n;
    cudaError_t e = cudaLaunchKernelEx(&cfg, exec_kernel, *a);
    if (e != cudaSuccess)
        return cuda_err(e, cooperative ? "interpreter kernel launch (cooperative)"
                                       : "interpreter kernel launch");
    return 0;
}
