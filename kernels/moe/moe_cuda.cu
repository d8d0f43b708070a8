/* cchan MoE on CUDA: the kernels (one launch per operation, all phases in it) and the few runtime
 * calls the host side needs. Every kernel is launched cooperatively: the driver starts all of its
 * blocks at once or fails the launch, so a block that waits for another (the LL dispatch's `sent`
 * counts) never waits for one that has not started (docs/moe.md, "Co-residency"). */
#include <cuda.h>
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
 * waits for the previous kernel's completion and memory before touching anything it wrote. A
 * dependent's own blocks are still launched together (cooperatively), so its cross-block waits stay
 * safe. */
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
    if (op.phases & MOE_PHASE_SEND) moe_ll_combine_send(&d, &op, &b, epoch);
    if (op.phases & MOE_PHASE_RECV) moe_ll_combine_recv(&d, &op, &b, epoch);
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

/* Every kernel an operation may launch (moe_kernel_of): each gets the group's shared memory
 * (moe_cuda_prepare) and is loaded at group creation (moe_cuda_preload). */
#define MOE_OP_KERNELS(X)                                                                          \
    X(moe_k_ll_dispatch)                                                                           \
    X(moe_k_ll_combine)                                                                            \
    X(moe_k_ht_meta)                                                                               \
    X(moe_k_ht_dispatch)                                                                           \
    X(moe_k_ht_combine)

/* Zeroed before it returns: a cudaMemset on the legacy stream does not order against a caller's
 * non-blocking stream, so a later copy on that stream could land before the zeroes. */
extern "C" int moe_cuda_malloc(size_t bytes, void **ptr) {
    MOE_CUDA(cudaMalloc(ptr, bytes));
    MOE_CUDA(cudaMemsetAsync(*ptr, 0, bytes, cudaStreamPerThread));
    MOE_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
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

/* ------------------------------------------------------------------ resources */

/* Driver entry points through the runtime, so the library links no libcuda of its own; each is
 * NULL where the driver lacks it. */
typedef CUresult (*moe_ctx_get_current_fn)(CUcontext *);
typedef CUresult (*moe_ctx_get_dev_resource_fn)(CUcontext, CUdevResource *, CUdevResourceType);
typedef CUresult (*moe_ctx_get_exec_affinity_fn)(CUexecAffinityParam *, CUexecAffinityType);

static void *moe_driver_fn(const char *name, unsigned version) {
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        return NULL;
    return fn;
}

/* The SMs this context may use: a green context's SM resource, and the SM-count execution affinity
 * (what an MPS active-thread percentage leaves); the smaller, or the device's where neither says.
 */
static int moe_ctx_sms(int dev_sms) {
    int sms = dev_sms;
    moe_ctx_get_current_fn get_current =
        (moe_ctx_get_current_fn)moe_driver_fn("cuCtxGetCurrent", 4000);
    CUcontext ctx = NULL;
    if (get_current && get_current(&ctx) == CUDA_SUCCESS && ctx) {
        moe_ctx_get_dev_resource_fn get_res =
            (moe_ctx_get_dev_resource_fn)moe_driver_fn("cuCtxGetDevResource", 12040);
        CUdevResource res;
        memset(&res, 0, sizeof res);
        if (get_res && get_res(ctx, &res, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS &&
            res.sm.smCount > 0 && (int)res.sm.smCount < sms)
            sms = (int)res.sm.smCount;
    }
    moe_ctx_get_exec_affinity_fn get_aff =
        (moe_ctx_get_exec_affinity_fn)moe_driver_fn("cuCtxGetExecAffinity", 11040);
    CUexecAffinityParam aff;
    memset(&aff, 0, sizeof aff);
    if (get_aff && get_aff(&aff, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_SUCCESS &&
        aff.param.smCount.val > 0 && (int)aff.param.smCount.val < sms)
        sms = (int)aff.param.smCount.val;
    return sms;
}

extern "C" int moe_cuda_resources(int device, moe_cuda_res_t *out) {
    memset(out, 0, sizeof *out);
    cudaDeviceProp prop;
    MOE_CUDA(cudaGetDeviceProperties(&prop, device));
    MOE_CUDA(cudaFree(0)); /* the context exists before its resources are asked */
    out->ctx_sms = moe_ctx_sms(prop.multiProcessorCount);
    memcpy(out->uuid, &prop.uuid, sizeof out->uuid);
    return 0;
}

extern "C" int moe_cuda_host_mapped(size_t bytes, void **host, void **dev) {
    MOE_CUDA(cudaHostAlloc(host, bytes, cudaHostAllocMapped));
    memset(*host, 0, bytes);
    MOE_CUDA(cudaHostGetDevicePointer(dev, *host, 0));
    return 0;
}

extern "C" void moe_cuda_host_free(void *host) {
    if (host) cudaFreeHost(host);
}

/* ------------------------------------------------------------------ launch */

/* The kernels' shared-memory limit only grows, so a group never shrinks another's. The attribute
 * is the context's, so one limit per device (devices past 63 set it every time). */
static size_t moe_smem_limit[64];

static int moe_set_smem(const void *kernel, size_t smem_bytes) {
    MOE_CUDA(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes));
    return 0;
}

extern "C" int moe_cuda_prepare(size_t smem_bytes, int ht, int *blocks_per_sm) {
    int optin = 0, dev = 0;
    MOE_CUDA(cudaGetDevice(&dev));
    MOE_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (smem_bytes > (size_t)optin) {
        snprintf(moe_cuda_msg, sizeof moe_cuda_msg,
                 "the kernels need %zu bytes of shared memory per block, the GPU offers %d",
                 smem_bytes, optin);
        return -1;
    }
    size_t *limit = dev >= 0 && dev < 64 ? &moe_smem_limit[dev] : NULL;
    if (!limit || smem_bytes > *limit) {
#define MOE_KERNEL_PTR(k) (const void *)k,
        const void *k[] = {MOE_OP_KERNELS(MOE_KERNEL_PTR)};
#undef MOE_KERNEL_PTR
        for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
            if (moe_set_smem(k[i], smem_bytes)) return -1;
        if (limit) *limit = smem_bytes;
    }
    /* the fewer of the mode's dispatch and combine kernels */
    int a = 0, b = 0;
    const int threads = ht ? MOE_HT_THREADS : MOE_THREADS;
    MOE_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &a, ht ? (const void *)moe_k_ht_dispatch : (const void *)moe_k_ll_dispatch, threads,
        smem_bytes));
    MOE_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &b, ht ? (const void *)moe_k_ht_combine : (const void *)moe_k_ll_combine, threads,
        smem_bytes));
    *blocks_per_sm = a < b ? a : b;
    return 0;
}

__global__ void moe_k_probe(void) {}

/* Loads every kernel this file launches, so that no lazily loaded first launch stalls a port
 * channel's copies later (docs/port_channel.md, "Lazy module loading"). Once per device (bit d of
 * moe_loaded; past 63, at each creation); a race loads twice, harmlessly. */
static unsigned long long moe_loaded;

extern "C" int moe_cuda_preload(int device) {
    const unsigned long long bit = device >= 0 && device < 64 ? 1ull << device : 0;
    if (bit && (__atomic_load_n(&moe_loaded, __ATOMIC_ACQUIRE) & bit)) return 0;
    int prev = 0;
    MOE_CUDA(cudaGetDevice(&prev));
    if (prev != device) MOE_CUDA(cudaSetDevice(device));
    cudaError_t e = cudaSuccess;
    const char *name = "";
    struct cudaFuncAttributes attr;
#define MOE_LOAD(k)                                                                                \
    if (e == cudaSuccess) {                                                                        \
        name = #k;                                                                                 \
        e = cudaFuncGetAttributes(&attr, (const void *)k);                                         \
    }
    MOE_OP_KERNELS(MOE_LOAD)
    MOE_LOAD(moe_k_probe) /* launched by moe_cuda_pdl_ok at creation */
#undef MOE_LOAD
    if (prev != device) (void)cudaSetDevice(prev); /* the caller's device stays the caller's */
    if (e != cudaSuccess) {
        char call[96];
        snprintf(call, sizeof call, "cudaFuncGetAttributes(%s) on device %d (loading the kernels)",
                 name, device);
        return moe_cuda_fail(call, e);
    }
    if (bit) __atomic_fetch_or(&moe_loaded, bit, __ATOMIC_RELEASE);
    return 0;
}

/* Whether this device takes a cooperative launch that is also a programmatic dependent: asked once
 * with an empty kernel on a stream of its own. */
static int moe_pdl_state; /* 0: not asked, 1: yes, -1: no */

extern "C" int moe_cuda_pdl_ok(void) {
    if (moe_pdl_state) return moe_pdl_state > 0;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        major < 9) {
        moe_pdl_state = -1;
        return 0;
    }
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return 0;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3(1);
    cfg.blockDim = dim3(32);
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 2;
    cudaError_t e = cudaLaunchKernelEx(&cfg, moe_k_probe);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    (void)cudaGetLastError(); /* a refused combination is an answer, not an error to keep */
    cudaStreamDestroy(s);
    moe_pdl_state = e == cudaSuccess ? 1 : -1;
    return moe_pdl_state > 0;
}

static void (*moe_kernel_of(int kind, int ht))(moe_dev_t, moe_op_t) {
    if (ht)
        return kind == MOE_KIND_HT_META    ? moe_k_ht_meta
               : kind == MOE_KIND_DISPATCH ? moe_k_ht_dispatch
                                           : moe_k_ht_combine;
    return kind == MOE_KIND_DISPATCH ? moe_k_ll_dispatch : moe_k_ll_combine;
}

extern "C" int moe_cuda_launch(int kind, const moe_dev_t *dev, const moe_op_t *op, int nblocks,
                               size_t smem_bytes, int pdl, void *stream) {
    /* the count exchange is followed by a host sync, and only its block 0 works */
    const int meta = kind == MOE_KIND_HT_META;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3(meta ? 1u : (unsigned)nblocks);
    cfg.blockDim = dim3(dev->ht ? MOE_HT_THREADS : MOE_THREADS);
    cfg.dynamicSmemBytes = smem_bytes;
    cfg.stream = (cudaStream_t)stream;
    cfg.attrs = attr;
    cfg.numAttrs = pdl && !meta ? 2 : 1;
    cudaError_t e = cudaLaunchKernelEx(&cfg, moe_kernel_of(kind, dev->ht), *dev, *op);
    if (e == cudaErrorCooperativeLaunchTooLarge) {
        (void)cudaGetLastError();
        snprintf(moe_cuda_msg, sizeof moe_cuda_msg,
                 "cooperative launch of %d blocks: %s (the blocks cannot all be resident at once "
                 "on the SMs this context may use; lower num_blocks, or give this process more "
                 "SMs: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, green context)",
                 nblocks, cudaGetErrorString(e));
        return -1;
    }
    if (e != cudaSuccess) return moe_cuda_fail("cudaLaunchKernelEx (cooperative)", e);
    return 0;
}
