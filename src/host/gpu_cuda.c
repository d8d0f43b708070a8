/* cchan GPU shim over CUDA: the runtime is linked statically, the driver API is resolved at run
 * time through cudaGetDriverEntryPointByVersion, so libcchan has no link-time dependency on
 * libcuda. */
#if defined(CCHAN_HAVE_CUDA)

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "gpu.h"

/* ---------------------------------------------------------------- errors */

static int runtime_fail(cudaError_t e, const char *call) {
    /* Clear the runtime's sticky last error so a failure inside cchan does not show up in the
     * application's next cudaGetLastError(). */
    (void)cudaGetLastError();
    return cchani_error(CCHAN_ERR_CUDA, call, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
}

#define CUDA_CALL(fn, ...)                                                                         \
    do {                                                                                           \
        cudaError_t e_ = fn(__VA_ARGS__);                                                          \
        if (e_ != cudaSuccess) return runtime_fail(e_, #fn);                                       \
    } while (0)

/* ---------------------------------------------------------------- driver entry points */

/* Every driver function cchan uses, with the typedef of the ABI version current in CUDA 12.0. */
#define CCHANI_DRIVER_FUNCS(X)                                                                     \
    X(cuGetErrorName, PFN_cuGetErrorName_v6000)                                                    \
    X(cuGetErrorString, PFN_cuGetErrorString_v6000)                                                \
    X(cuPointerGetAttribute, PFN_cuPointerGetAttribute_v4000)                                      \
    X(cuMemGetAddressRange, PFN_cuMemGetAddressRange_v3020)                                        \
    X(cuMemGetAllocationGranularity, PFN_cuMemGetAllocationGranularity_v10020)                     \
    X(cuMemCreate, PFN_cuMemCreate_v10020)                                                         \
    X(cuMemRelease, PFN_cuMemRelease_v10020)                                                       \
    X(cuMemRetainAllocationHandle, PFN_cuMemRetainAllocationHandle_v11000)                         \
    X(cuMemExportToShareableHandle, PFN_cuMemExportToShareableHandle_v10020)                       \
    X(cuMemImportFromShareableHandle, PFN_cuMemImportFromShareableHandle_v10020)                   \
    X(cuMemAddressReserve, PFN_cuMemAddressReserve_v10020)                                         \
    X(cuMemAddressFree, PFN_cuMemAddressFree_v10020)                                               \
    X(cuMemMap, PFN_cuMemMap_v10020)                                                               \
    X(cuMemUnmap, PFN_cuMemUnmap_v10020)                                                           \
    X(cuMemSetAccess, PFN_cuMemSetAccess_v10020)

#define CCHANI_DRIVER_VERSION 12000

static struct {
#define X(name, type) type name;
    CCHANI_DRIVER_FUNCS(X)
#undef X
} driver;
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

static void driver_load(void) {
#define X(name, type)                                                                              \
    {                                                                                              \
        enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSuccess;                      \
        void *fn = NULL;                                                                           \
        if (cudaGetDriverEntryPointByVersion(#name, &fn, CCHANI_DRIVER_VERSION, cudaEnableDefault, \
                                             &q) == cudaSuccess &&                                 \
            q == cudaDriverEntryPointSuccess)                                                      \
            driver.name = (type)fn;                                                                \
        else                                                                                       \
            (void)cudaGetLastError();                                                              \
    }
    CCHANI_DRIVER_FUNCS(X)
#undef X
}

static int driver_missing(const char *name) {
    return cchani_error(
        CCHAN_ERR_CUDA, name,
        "not available from the CUDA driver (no driver loaded, or older than %d.%d)",
        CCHANI_DRIVER_VERSION / 1000, CCHANI_DRIVER_VERSION % 1000 / 10);
}

static int driver_fail(CUresult e, const char *call) {
    const char *name = NULL, *text = NULL;
    if (driver.cuGetErrorName) driver.cuGetErrorName(e, &name);
    if (driver.cuGetErrorString) driver.cuGetErrorString(e, &text);
    return cchani_error(CCHAN_ERR_CUDA, call, "%s (%d): %s", name ? name : "CUresult", (int)e,
                        text ? text : "unknown driver error");
}

#define CU_CALL(fn, ...)                                                                           \
    do {                                                                                           \
        pthread_once(&driver_once, driver_load);                                                   \
        if (!driver.fn) return driver_missing(#fn);                                                \
        CUresult e_ = driver.fn(__VA_ARGS__);                                                      \
        if (e_ != CUDA_SUCCESS) return driver_fail(e_, #fn);                                       \
    } while (0)

/* ---------------------------------------------------------------- devices */

int cchani_gpu_device_count(int *out) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        /* No driver, no device or a broken install all mean "no usable GPU" here; the reason is
         * logged because AUTO silently picks the host platform. */
        CCHANI_INFO(CCHANI_SUB_INIT, "cudaGetDeviceCount: %s: no CUDA device in use",
                    cudaGetErrorString(e));
        (void)cudaGetLastError();
        n = 0;
    }
    *out = n;
    return 0;
}

int cchani_gpu_get_device(int *out) {
    CUDA_CALL(cudaGetDevice, out);
    return 0;
}

int cchani_gpu_set_device(int device) {
    CUDA_CALL(cudaSetDevice, device);
    return 0;
}

int cchani_gpu_device_uuid(int device, uint8_t out[CCHANI_GPU_UUID_BYTES]) {
    struct cudaDeviceProp prop;
    CUDA_CALL(cudaGetDeviceProperties, &prop, device);
    _Static_assert(sizeof prop.uuid.bytes == CCHANI_GPU_UUID_BYTES, "cudaUUID_t size");
    memcpy(out, prop.uuid.bytes, CCHANI_GPU_UUID_BYTES);
    return 0;
}

int cchani_gpu_can_access_peer(int device, int peer, int *out) {
    CUDA_CALL(cudaDeviceCanAccessPeer, out, device, peer);
    return 0;
}

int cchani_gpu_native_peer_atomics(int device, int peer, int *out) {
    if (device == peer) {
        *out = 1;
        return 0;
    }
    CUDA_CALL(cudaDeviceGetP2PAttribute, out, cudaDevP2PAttrNativeAtomicSupported, device, peer);
    return 0;
}

int cchani_gpu_enable_peer_access(int peer) {
    cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
        return 0;
    }
    if (e != cudaSuccess) return runtime_fail(e, "cudaDeviceEnablePeerAccess");
    return 0;
}

/* ---------------------------------------------------------------- plain memory */

int cchani_gpu_memset_zero(void *p, size_t bytes) {
    /* A private non-blocking stream: zeroing must not wait for (or be ordered after) kernels the
     * application runs on its own streams, which may be waiting for this very allocation. */
    cudaStream_t s;
    CUDA_CALL(cudaStreamCreateWithFlags, &s, cudaStreamNonBlocking);
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    if (e != cudaSuccess) return runtime_fail(e, "cudaMemsetAsync");
    return 0;
}

int cchani_gpu_malloc(size_t bytes, void **out) {
    void *p = NULL;
    CUDA_CALL(cudaMalloc, &p, bytes);
    int r = cchani_gpu_memset_zero(p, bytes);
    if (r) {
        cudaFree(p);
        return r;
    }
    *out = p;
    return 0;
}

int cchani_gpu_free(void *p) {
    CUDA_CALL(cudaFree, p);
    return 0;
}

int cchani_gpu_host_alloc_mapped(size_t bytes, void **host, void **dev) {
    void *h = NULL, *d = NULL;
    CUDA_CALL(cudaHostAlloc, &h, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    cudaError_t e = cudaHostGetDevicePointer(&d, h, 0);
    if (e != cudaSuccess) {
        cudaFreeHost(h);
        return runtime_fail(e, "cudaHostGetDevicePointer");
    }
    memset(h, 0, bytes);
    *host = h;
    *dev = d;
    return 0;
}

int cchani_gpu_host_free(void *host) {
    CUDA_CALL(cudaFreeHost, host);
    return 0;
}

int cchani_gpu_host_register(void *p, size_t bytes, void **dev) {
    void *d = NULL;
    CUDA_CALL(cudaHostRegister, p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    cudaError_t e = cudaHostGetDevicePointer(&d, p, 0);
    if (e != cudaSuccess) {
        cudaHostUnregister(p);
        return runtime_fail(e, "cudaHostGetDevicePointer");
    }
    *dev = d;
    return 0;
}

int cchani_gpu_host_unregister(void *p) {
    CUDA_CALL(cudaHostUnregister, p);
    return 0;
}

int cchani_gpu_memcpy(void *dst, const void *src, size_t bytes) {
    CUDA_CALL(cudaMemcpy, dst, src, bytes, cudaMemcpyDefault);
    return 0;
}

static int device_pointer_range(const void *p, cchani_gpu_ptr_info_t *info) {
    CUdeviceptr base = 0;
    size_t bytes = 0;
    int legacy = 0;
    CU_CALL(cuMemGetAddressRange, &base, &bytes, (CUdeviceptr)(uintptr_t)p);
    CU_CALL(cuPointerGetAttribute, &legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
            (CUdeviceptr)(uintptr_t)p);
    info->legacy_ipc = legacy;
    info->base = (uintptr_t)base;
    info->bytes = bytes;
    return 0;
}

int cchani_gpu_pointer_info(const void *p, cchani_gpu_ptr_info_t *out) {
    struct cudaPointerAttributes a;
    CUDA_CALL(cudaPointerGetAttributes, &a, p);
    cchani_gpu_ptr_info_t info = {0};
    info.device = -1;
    if (a.type == cudaMemoryTypeDevice) {
        info.is_device = 1;
        info.device = a.device;
        /* cuMemGetAddressRange looks in the current context only: make the owning GPU's current. */
        int current = -1;
        int r = cchani_gpu_get_device(&current);
        if (!r && current != a.device) r = cchani_gpu_set_device(a.device);
        if (!r) r = device_pointer_range(p, &info);
        if (current >= 0 && current != a.device) (void)cudaSetDevice(current);
        if (r) return r;
    }
    *out = info;
    return 0;
}

/* ---------------------------------------------------------------- legacy IPC */

int cchani_gpu_ipc_get_handle(void *base, uint8_t handle[CCHANI_GPU_IPC_HANDLE_BYTES]) {
    cudaIpcMemHandle_t h;
    _Static_assert(sizeof h == CCHANI_GPU_IPC_HANDLE_BYTES, "cudaIpcMemHandle_t size");
    CUDA_CALL(cudaIpcGetMemHandle, &h, base);
    memcpy(handle, &h, sizeof h);
    return 0;
}

int cchani_gpu_ipc_open(const uint8_t handle[CCHANI_GPU_IPC_HANDLE_BYTES], void **out) {
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    CUDA_CALL(cudaIpcOpenMemHandle, out, h, cudaIpcMemLazyEnablePeerAccess);
    return 0;
}

int cchani_gpu_ipc_close(void *p) {
    CUDA_CALL(cudaIpcCloseMemHandle, p);
    return 0;
}

/* ---------------------------------------------------------------- VMM */

static CUmemAllocationProp vmm_prop(int device) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return prop;
}

int cchani_gpu_vmm_granularity(int device, size_t *out) {
    CUmemAllocationProp prop = vmm_prop(device);
    CU_CALL(cuMemGetAllocationGranularity, out, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    return 0;
}

int cchani_gpu_mem_info(size_t *free_bytes, size_t *total_bytes) {
    CUDA_CALL(cudaMemGetInfo, free_bytes, total_bytes);
    return 0;
}

int cchani_gpu_vmm_create(int device, size_t bytes, uint64_t *handle) {
    CUmemAllocationProp prop = vmm_prop(device);
    CUmemGenericAllocationHandle h;
    CU_CALL(cuMemCreate, &h, bytes, &prop, 0);
    *handle = (uint64_t)h;
    return 0;
}

int cchani_gpu_vmm_retain(void *p, uint64_t *handle) {
    CUmemGenericAllocationHandle h;
    CU_CALL(cuMemRetainAllocationHandle, &h, p);
    *handle = (uint64_t)h;
    return 0;
}

int cchani_gpu_vmm_export_fd(uint64_t handle, int *fd) {
    int f = -1;
    CU_CALL(cuMemExportToShareableHandle, &f, (CUmemGenericAllocationHandle)handle,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    *fd = f;
    return 0;
}

int cchani_gpu_vmm_import_fd(int fd, uint64_t *handle) {
    CUmemGenericAllocationHandle h;
    CU_CALL(cuMemImportFromShareableHandle, &h, (void *)(uintptr_t)fd,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    *handle = (uint64_t)h;
    return 0;
}

/* Devices that may be granted access to one mapping (every GPU of a node, with room to spare). */
#define CCHANI_VMM_MAX_DEVICES 64

static int vmm_set_access(CUdeviceptr va, size_t bytes, const int *devices, int ndevices) {
    CUmemAccessDesc access[CCHANI_VMM_MAX_DEVICES];
    if (ndevices < 1 || ndevices > CCHANI_VMM_MAX_DEVICES)
        return cchani_error(CCHAN_ERR_INTERNAL, "cuMemSetAccess", "%d devices (1..%d)", ndevices,
                            CCHANI_VMM_MAX_DEVICES);
    for (int i = 0; i < ndevices; i++) {
        access[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access[i].location.id = devices[i];
        access[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    CU_CALL(cuMemSetAccess, va, bytes, access, (size_t)ndevices);
    return 0;
}

static int vmm_map_reserved(CUdeviceptr va, uint64_t handle, size_t bytes, const int *devices,
                            int ndevices) {
    CU_CALL(cuMemMap, va, bytes, 0, (CUmemGenericAllocationHandle)handle, 0);
    int r = vmm_set_access(va, bytes, devices, ndevices);
    if (r) driver.cuMemUnmap(va, bytes);
    return r;
}

int cchani_gpu_vmm_map(uint64_t handle, size_t bytes, const int *devices, int ndevices,
                       void **out) {
    CUdeviceptr va = 0;
    CU_CALL(cuMemAddressReserve, &va, bytes, 0, 0, 0);
    int r = vmm_map_reserved(va, handle, bytes, devices, ndevices);
    if (r) {
        driver.cuMemAddressFree(va, bytes);
        return r;
    }
    *out = (void *)(uintptr_t)va;
    return 0;
}

int cchani_gpu_vmm_unmap(void *p, size_t bytes) {
    CU_CALL(cuMemUnmap, (CUdeviceptr)(uintptr_t)p, bytes);
    CU_CALL(cuMemAddressFree, (CUdeviceptr)(uintptr_t)p, bytes);
    return 0;
}

int cchani_gpu_vmm_release(uint64_t handle) {
    CU_CALL(cuMemRelease, (CUmemGenericAllocationHandle)handle);
    return 0;
}

#endif /* CCHAN_HAVE_CUDA */
