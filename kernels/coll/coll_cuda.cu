/* cchan_coll on CUDA: one thin __global__ wrapper per (algorithm body, dtype), and the device
 * memory helpers of the host runtime. A failed device wait traps (wait.h), so the bodies' return
 * values carry nothing here. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "coll_internal.h"

#define COLL_KERNEL_BOUNDS __launch_bounds__(512)

/* Programmatic dependent launch (sm_90; a no-op elsewhere and when a kernel was launched without
 * the attribute). Every kernel first lets the stream's next kernel begin launching (it can only
 * start once every block of this one is resident, so cross-block and cross-rank waits stay safe),
 * then waits for the previous kernel's completion and memory before touching anything: a chain of
 * collectives in a CUDA graph overlaps each launch with the previous kernel's tail. */
__device__ static inline void coll_pdl_enter(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

#define COLL_DEFINE_KERNELS(DT, suffix)                                                            \
    __global__ void COLL_KERNEL_BOUNDS k_ll_allreduce_##suffix(                                    \
        const __grid_constant__ coll_args_t a) {                                                   \
        coll_pdl_enter();                                                                          \
        (void)coll_ll_allreduce_body(&a, DT, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);      \
    }                                                                                              \
    __global__ void COLL_KERNEL_BOUNDS k_ll_reducescatter_##suffix(                                \
        const __grid_constant__ coll_args_t a) {                                                   \
        coll_pdl_enter();                                                                          \
        (void)coll_ll_reducescatter_body(&a, DT, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);  \
    }                                                                                              \
    __global__ void COLL_KERNEL_BOUNDS k_hb_allreduce_##suffix(                                    \
        const __grid_constant__ coll_args_t a) {                                                   \
        coll_pdl_enter();                                                                          \
        (void)coll_hb_allreduce_body(&a, DT, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);      \
    }                                                                                              \
    __global__ void COLL_KERNEL_BOUNDS k_hb_reducescatter_##suffix(                                \
        const __grid_constant__ coll_args_t a) {                                                   \
        coll_pdl_enter();                                                                          \
        (void)coll_hb_reducescatter_body(&a, DT, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);  \
    }                                                                                              \
    __global__ void COLL_KERNEL_BOUNDS k_zc_allreduce_##suffix(                                    \
        const __grid_constant__ coll_args_t a) {                                                   \
        coll_pdl_enter();                                                                          \
        (void)coll_zc_allreduce_body(&a, DT, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);      \
    }                                                                                              \
    __global__ void COLL_KERNEL_BOUNDS k_zc_reducescatter_##suffix(                                \
        const __grid_constant__ coll_args_t a) {                                                   \
        coll_pdl_enter();                                                                          \
        (void)coll_zc_reducescatter_body(&a, DT, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);  \
    }                                                                                              \
    __global__ void COLL_KERNEL_BOUNDS k_switch_allreduce_##suffix(                                \
        const __grid_constant__ coll_args_t a) {                                                   \
        coll_pdl_enter();                                                                          \
        (void)coll_switch_allreduce_body(&a, DT, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);  \
    }                                                                                              \
    __global__ void COLL_KERNEL_BOUNDS k_ce_rs_##suffix(const __grid_constant__ coll_args_t a) {   \
        coll_pdl_enter();                                                                          \
        (void)coll_ce_rs_body(&a, DT, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);             \
    }

/* The dtypes with kernels of their own: instantiates them, and coll_cuda_preload loads them. */
#define COLL_DTYPES(X) X(COLL_F32, f32) X(COLL_F16, f16) X(COLL_BF16, bf16)
COLL_DTYPES(COLL_DEFINE_KERNELS)
#undef COLL_DEFINE_KERNELS

/* AllGather moves bytes: one kernel for every dtype. */
__global__ void COLL_KERNEL_BOUNDS k_ll_allgather(const __grid_constant__ coll_args_t a) {
    coll_pdl_enter();
    (void)coll_ll_allgather_body(&a, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);
}
__global__ void COLL_KERNEL_BOUNDS k_hb_allgather(const __grid_constant__ coll_args_t a) {
    coll_pdl_enter();
    (void)coll_hb_allgather_body(&a, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);
}

__global__ void COLL_KERNEL_BOUNDS k_barrier(const __grid_constant__ coll_args_t a) {
    coll_pdl_enter();
    (void)coll_barrier_body(&a, threadIdx.x);
}
__global__ void COLL_KERNEL_BOUNDS k_ag_push(const __grid_constant__ coll_args_t a) {
    coll_pdl_enter();
    (void)coll_ag_push_body(&a, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);
}
__global__ void COLL_KERNEL_BOUNDS k_zc_allgather(const __grid_constant__ coll_args_t a) {
    coll_pdl_enter();
    (void)coll_zc_allgather_body(&a, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);
}

typedef void (*coll_kernel_fn)(const coll_args_t);

/* The one place that maps (body, dtype) to a kernel: the launcher and coll_cuda_preload both ask
 * it, so a kernel it can return is a kernel that is loaded at create. *name: the kernel's, for
 * messages. */
static coll_kernel_fn coll_cuda_kernel(coll_kernel_t k, int dt, const char **name) {
#define COLL_ONE(fn) (*name = #fn, fn)
#define COLL_PICK(fn)                                                                              \
    (dt == COLL_F32   ? (*name = #fn "_f32", fn##_f32)                                             \
     : dt == COLL_F16 ? (*name = #fn "_f16", fn##_f16)                                             \
                      : (*name = #fn "_bf16", fn##_bf16))
    *name = "?";
    switch (k) {
    case COLL_K_LL_ALLREDUCE: return COLL_PICK(k_ll_allreduce);
    case COLL_K_LL_ALLGATHER: return COLL_ONE(k_ll_allgather);
    case COLL_K_LL_REDUCESCATTER: return COLL_PICK(k_ll_reducescatter);
    case COLL_K_HB_ALLREDUCE: return COLL_PICK(k_hb_allreduce);
    case COLL_K_HB_ALLGATHER: return COLL_ONE(k_hb_allgather);
    case COLL_K_HB_REDUCESCATTER: return COLL_PICK(k_hb_reducescatter);
    case COLL_K_ZC_ALLREDUCE: return COLL_PICK(k_zc_allreduce);
    case COLL_K_SWITCH_ALLREDUCE: return COLL_PICK(k_switch_allreduce);
    case COLL_K_BARRIER: return COLL_ONE(k_barrier);
    case COLL_K_CE_RS: return COLL_PICK(k_ce_rs);
    case COLL_K_AG_PUSH: return COLL_ONE(k_ag_push);
    case COLL_K_ZC_ALLGATHER: return COLL_ONE(k_zc_allgather);
    case COLL_K_ZC_REDUCESCATTER: return COLL_PICK(k_zc_reducescatter);
    default: return NULL;
    }
#undef COLL_PICK
#undef COLL_ONE
}

static int coll_cuda_fail(cudaError_t e, const char *where, const char *what) {
    return colli_error(CCHAN_ERR_CUDA, where, "%s: %s (%s)", what, cudaGetErrorName(e),
                       cudaGetErrorString(e));
}

/* The caller's current device is restored: a library call must not move the application's. */
typedef struct coll_device_scope {
    int prev;
    int ok;
} coll_device_scope_t;

static cudaError_t coll_enter(int device, coll_device_scope_t *s) {
    s->ok = 0;
    cudaError_t e = cudaGetDevice(&s->prev);
    if (e != cudaSuccess) return e;
    s->ok = 1;
    return s->prev == device ? cudaSuccess : cudaSetDevice(device);
}
static void coll_leave(int device, const coll_device_scope_t *s) {
    if (s->ok && s->prev != device) (void)cudaSetDevice(s->prev);
}

int colli_cuda_alloc(int device, size_t bytes, void **out) {
    coll_device_scope_t s;
    cudaError_t e = coll_enter(device, &s);
    void *p = NULL;
    if (e == cudaSuccess) e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess) e = cudaMemset(p, 0, bytes);
    coll_leave(device, &s);
    if (e != cudaSuccess) {
        if (p) cudaFree(p);
        return coll_cuda_fail(e, "cchan_coll_create", "cudaMalloc of device state");
    }
    *out = p;
    return 0;
}

int colli_cuda_free(int device, void *ptr) {
    coll_device_scope_t s;
    cudaError_t e = coll_enter(device, &s);
    if (e == cudaSuccess) e = cudaFree(ptr);
    coll_leave(device, &s);
    return e == cudaSuccess ? 0 : coll_cuda_fail(e, "cchan_coll_destroy", "cudaFree");
}

int colli_cuda_copy_to_device(int device, void *dst, const void *src, size_t bytes) {
    coll_device_scope_t s;
    cudaError_t e = coll_enter(device, &s);
    if (e == cudaSuccess) e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    coll_leave(device, &s);
    return e == cudaSuccess ? 0
                            : coll_cuda_fail(e, "cchan_coll_create", "cudaMemcpy of device state");
}

/* Compute capability major of `device`, looked up once (0: unknown). */
static int coll_sm_major(int device) {
    static int major[64];
    if (device < 0 || device >= 64) return 0;
    int m = __atomic_load_n(&major[device], __ATOMIC_RELAXED);
    if (m == 0 &&
        cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess)
        __atomic_store_n(&major[device], m, __ATOMIC_RELAXED);
    return m;
}

int colli_cuda_sm(int device) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major * 10 + minor;
}

int colli_cuda_launch(int device, coll_kernel_t k, int dtype, const coll_args_t *args,
                      uint32_t nblocks, uint32_t nthreads, int pdl, void *stream) {
    const char *name;
    coll_kernel_fn fn = coll_cuda_kernel(k, dtype, &name);
    if (!fn) return colli_error(CCHAN_ERR_INTERNAL, "cchan_coll", "no kernel %d", (int)k);
    coll_device_scope_t s;
    cudaError_t e = coll_enter(device, &s);
    if (e == cudaSuccess && pdl && coll_sm_major(device) >= 9) {
        /* a programmatic dependent of the stream's previous kernel (coll_pdl_enter) */
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = dim3(nblocks);
        cfg.blockDim = dim3(nthreads);
        cfg.stream = (cudaStream_t)stream;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        e = cudaLaunchKernelEx(&cfg, fn, *args);
    } else if (e == cudaSuccess) {
        fn<<<nblocks, nthreads, 0, (cudaStream_t)stream>>>(*args);
        e = cudaGetLastError();
    }
    coll_leave(device, &s);
    if (e == cudaSuccess) return 0;
    char what[96];
    snprintf(what, sizeof what, "launch of %s", name);
    return coll_cuda_fail(e, "cchan_coll", what);
}

/* Loads every kernel coll_cuda_kernel can return (cudaFuncGetAttributes loads the one it is
 * given), so that no lazily loaded first launch stalls a port channel's copies later
 * (docs/port_channel.md, "Lazy module loading"). Once per device (bit d of coll_loaded; past 63,
 * at each create); a race loads twice, harmlessly. */
static unsigned long long coll_loaded;

int colli_cuda_preload(int device) {
    const unsigned long long bit = device >= 0 && device < 64 ? 1ull << device : 0;
    if (bit && (__atomic_load_n(&coll_loaded, __ATOMIC_ACQUIRE) & bit)) return 0;
    static const int dtypes[] = {
#define COLL_DTYPE_VALUE(DT, suffix) DT,
        COLL_DTYPES(COLL_DTYPE_VALUE)
#undef COLL_DTYPE_VALUE
    };
    coll_device_scope_t s;
    cudaError_t e = coll_enter(device, &s);
    if (e != cudaSuccess) {
        coll_leave(device, &s);
        char what[64];
        snprintf(what, sizeof what, "cudaSetDevice(%d) (loading the kernels)", device);
        return coll_cuda_fail(e, "cchan_coll_create", what);
    }
    const char *name = "";
    coll_kernel_fn prev = NULL;
    for (int k = 0; k < COLL_K_COUNT && e == cudaSuccess; k++)
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0] && e == cudaSuccess; d++) {
            coll_kernel_fn fn = coll_cuda_kernel((coll_kernel_t)k, dtypes[d], &name);
            if (!fn) {
                coll_leave(device, &s);
                return colli_error(CCHAN_ERR_INTERNAL, "cchan_coll_create", "no kernel %d", k);
            }
            if (fn == prev) continue; /* a kernel for every dtype */
            prev = fn;
            struct cudaFuncAttributes attr;
            e = cudaFuncGetAttributes(&attr, fn);
        }
    coll_leave(device, &s);
    if (e != cudaSuccess) {
        char what[128];
        snprintf(what, sizeof what, "cudaFuncGetAttributes(%s) on device %d (loading the kernels)",
                 name, device);
        return coll_cuda_fail(e, "cchan_coll_create", what);
    }
    if (bit) __atomic_fetch_or(&coll_loaded, bit, __ATOMIC_RELEASE);
    return 0;
}

/* 1 when the allocation holding ptr is a whole number of 2 MiB (cuMemGetAddressRange). cudaMalloc
 * maps any other size with small pages, and copy-engine copies between two GPUs that both send
 * then slow down by a fifth or more (docs/tuning.md, "2 MiB pages"). 0 when unknown. */
int colli_cuda_big_pages(int device, const void *ptr) {
    typedef CUresult (*range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
    static range_fn fn;
    static int looked;
    if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
        void *f = NULL;
        enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSuccess;
        if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault,
                                             &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (range_fn)f;
        else
            (void)cudaGetLastError();
        __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
    }
    /* cuMemGetAddressRange looks in the current context only: the buffer's GPU's */
    CUdeviceptr base = 0;
    size_t size = 0;
    coll_device_scope_t s;
    if (!fn || coll_enter(device, &s) != cudaSuccess) return 0;
    CUresult r = fn(&base, &size, (CUdeviceptr)(uintptr_t)ptr);
    coll_leave(device, &s);
    return r == CUDA_SUCCESS && size % ((size_t)2 << 20) == 0;
}

/* ------------------------------------------------------------------ copy-engine lanes */

struct colli_ce {
    cudaStream_t lane[COLLI_CE_LANES_MAX];
    cudaEvent_t fork[COLLI_CE_LANES_MAX], join[COLLI_CE_LANES_MAX];
    cudaEvent_t mark[COLLI_CE_MARKS];
};

void colli_ce_destroy(int device, colli_ce_t *ce) {
    if (!ce) return;
    coll_device_scope_t s;
    (void)coll_enter(device, &s);
    for (int l = 0; l < COLLI_CE_LANES_MAX; l++) {
        if (ce->lane[l]) {
            (void)cudaStreamSynchronize(ce->lane[l]);
            cudaStreamDestroy(ce->lane[l]);
        }
        if (ce->fork[l]) cudaEventDestroy(ce->fork[l]);
        if (ce->join[l]) cudaEventDestroy(ce->join[l]);
    }
    for (int m = 0; m < COLLI_CE_MARKS; m++)
        if (ce->mark[m]) cudaEventDestroy(ce->mark[m]);
    coll_leave(device, &s);
    free(ce);
}

int colli_ce_create(int device, colli_ce_t **out) {
    colli_ce_t *ce = (colli_ce_t *)calloc(1, sizeof *ce);
    if (!ce) return colli_error(-ENOMEM, "cchan_coll_create", "copy-engine lanes");
    coll_device_scope_t s;
    cudaError_t e = coll_enter(device, &s);
    for (int l = 0; l < COLLI_CE_LANES_MAX && e == cudaSuccess; l++) {
        e = cudaStreamCreateWithFlags(&ce->lane[l], cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ce->fork[l], cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ce->join[l], cudaEventDisableTiming);
    }
    for (int m = 0; m < COLLI_CE_MARKS && e == cudaSuccess; m++)
        e = cudaEventCreateWithFlags(&ce->mark[m], cudaEventDisableTiming);
    coll_leave(device, &s);
    if (e != cudaSuccess) {
        colli_ce_destroy(device, ce);
        return coll_cuda_fail(e, "cchan_coll_create", "copy-engine streams and events");
    }
    *out = ce;
    return 0;
}

/* from waits for what `to` has enqueued so far, through `ev` */
static int coll_ce_order(int device, cudaStream_t from, cudaStream_t to, cudaEvent_t ev,
                         const char *what) {
    coll_device_scope_t s;
    cudaError_t e = coll_enter(device, &s);
    if (e == cudaSuccess) e = cudaEventRecord(ev, from);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(to, ev, 0);
    coll_leave(device, &s);
    return e == cudaSuccess ? 0 : coll_cuda_fail(e, "cchan_coll", what);
}

int colli_ce_fork(int device, colli_ce_t *ce, int lane, void *stream) {
    return coll_ce_order(device, (cudaStream_t)stream, ce->lane[lane], ce->fork[lane],
                         "fork of a copy-engine lane");
}

int colli_ce_join(int device, colli_ce_t *ce, int lane, void *stream) {
    return coll_ce_order(device, ce->lane[lane], (cudaStream_t)stream, ce->join[lane],
                         "join of a copy-engine lane");
}

int colli_ce_mark(int device, colli_ce_t *ce, int lane, int slot) {
    coll_device_scope_t s;
    cudaError_t e = coll_enter(device, &s);
    if (e == cudaSuccess) e = cudaEventRecord(ce->mark[slot], ce->lane[lane]);
    coll_leave(device, &s);
    return e == cudaSuccess ? 0 : coll_cuda_fail(e, "cchan_coll", "mark on a copy-engine lane");
}

int colli_ce_wait_mark(int device, colli_ce_t *ce, int slot, void *stream) {
    coll_device_scope_t s;
    cudaError_t e = coll_enter(device, &s);
    if (e == cudaSuccess) e = cudaStreamWaitEvent((cudaStream_t)stream, ce->mark[slot], 0);
    coll_leave(device, &s);
    return e == cudaSuccess ? 0 : coll_cuda_fail(e, "cchan_coll", "wait for a copy-engine mark");
}

int colli_ce_copy(int device, colli_ce_t *ce, int lane, void *dst, const void *src, size_t bytes) {
    coll_device_scope_t s;
    cudaError_t e = coll_enter(device, &s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ce->lane[lane]);
    coll_leave(device, &s);
    return e == cudaSuccess
               ? 0
               : coll_cuda_fail(e, "cchan_coll", "cudaMemcpyAsync on a copy-engine lane");
}
