/* cchan_exec on CUDA: the interpreter kernel, its launch, and the device memory helpers. A failed
 * device wait traps (wait.h), so the blocks' return values carry nothing here. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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

/* Driver entry points through the runtime (no libcuda linked here); NULL where the driver lacks
 * one. */
static void *exec_driver_fn(const char *name, unsigned version) {
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        return NULL;
    return fn;
}

/* The SMs this context may use: the SM-count execution affinity (what an MPS active-thread
 * percentage leaves) and a green context's SM resource, the smaller, else the device's. */
static int exec_ctx_sms(int dev_sms) {
    typedef CUresult (*get_current_fn)(CUcontext *);
    typedef CUresult (*get_res_fn)(CUcontext, CUdevResource *, CUdevResourceType);
    typedef CUresult (*get_aff_fn)(CUexecAffinityParam *, CUexecAffinityType);
    int sms = dev_sms;
    get_current_fn get_current = (get_current_fn)exec_driver_fn("cuCtxGetCurrent", 4000);
    CUcontext ctx = NULL;
    if (get_current && get_current(&ctx) == CUDA_SUCCESS && ctx) {
        get_res_fn get_res = (get_res_fn)exec_driver_fn("cuCtxGetDevResource", 12040);
        CUdevResource res;
        memset(&res, 0, sizeof res);
        if (get_res && get_res(ctx, &res, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS &&
            res.sm.smCount > 0 && (int)res.sm.smCount < sms)
            sms = (int)res.sm.smCount;
    }
    get_aff_fn get_aff = (get_aff_fn)exec_driver_fn("cuCtxGetExecAffinity", 11040);
    CUexecAffinityParam aff;
    memset(&aff, 0, sizeof aff);
    if (get_aff && get_aff(&aff, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_SUCCESS &&
        aff.param.smCount.val > 0 && (int)aff.param.smCount.val < sms)
        sms = (int)aff.param.smCount.val;
    return sms;
}

/* Loads the interpreter, the only kernel here, so that no lazily loaded first launch stalls a
 * port channel's copies later (docs/port_channel.md, "Lazy module loading"). Once per device (bit
 * d of exec_loaded; past 63, at each create); a race loads twice, harmlessly. */
static unsigned long long exec_loaded;

int execi_cuda_preload(int device) {
    const unsigned long long bit = device >= 0 && device < 64 ? 1ull << device : 0;
    if (bit && (__atomic_load_n(&exec_loaded, __ATOMIC_ACQUIRE) & bit)) return 0;
    int st = set_device(device);
    if (st) return st;
    struct cudaFuncAttributes attr;
    cudaError_t e = cudaFuncGetAttributes(&attr, exec_kernel);
    if (e != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "cudaFuncGetAttributes(exec_kernel) on device %d (loading it)",
                 device);
        return execi_error(CCHAN_ERR_CUDA, "cchan_exec_create", "%s: %s (%s)", what,
                           cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (bit) __atomic_fetch_or(&exec_loaded, bit, __ATOMIC_RELEASE);
    return 0;
}

static int exec_set_smem(uint32_t smem) {
    if (smem <= 48u * 1024u) return 0;
    cudaError_t e =
        cudaFuncSetAttribute(exec_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    return e == cudaSuccess ? 0 : cuda_err(e, "cudaFuncSetAttribute(shared memory)");
}

int execi_cuda_capacity(int device, uint32_t nthreads, uint32_t smem, int *sms_out, int *resident) {
    int st = set_device(device);
    if (st || (st = exec_set_smem(smem))) return st;
    int sms = 0, per_sm = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cudaFree(0); /* the context exists before its SMs are asked */
    sms = exec_ctx_sms(sms);
    cudaError_t e =
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, exec_kernel, (int)nthreads, smem);
    if (e != cudaSuccess) return cuda_err(e, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    *sms_out = sms;
    *resident = per_sm * sms;
    return 0;
}

int execi_cuda_prepare(int device, uint32_t nblocks, uint32_t nthreads, uint32_t smem,
                       int cooperative) {
    /* Blocks that wait on other blocks of the grid (the plan's semaphores) must all be resident
     * at once: a cooperative launch guarantees it. Without such semaphores a block still waits on
     * peers whose blocks may wait on another block of this grid, so the grid must fit the device
     * at once either way (it is refused, not left to hang). */
    int sms = 0, resident = 0, coop = 0;
    int st = execi_cuda_capacity(device, nthreads, smem, &sms, &resident);
    if (st) return st;
    cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device);
    if (cooperative && !coop)
        return execi_error(CCHAN_ERR_UNSUPPORTED, "cchan_exec_create",
                           "the plan's blocks wait on one another (semaphores between blocks), "
                           "which needs a cooperative launch, and device %d does not support it",
                           device);
    if ((long long)resident < (long long)nblocks)
        return execi_error(CCHAN_ERR_UNSUPPORTED, "cchan_exec_create",
                           "the plan's %u blocks (plan blocks x instances) must all be resident, "
                           "but device %d holds %d blocks of %u threads at once here (%d SMs this "
                           "context may use x %d)",
                           nblocks, device, resident, nthreads, sms, sms ? resident / sms : 0);
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
