/* cchan GPU shim over HIP: the same functions as gpu_cuda.c (see gpu.h). Not yet linked into
 * libcchan: test/unit compiles it with hipcc so that the HIP port stays a build away. HIP has no
 * legacy/VMM pointer attribute, so every hipMalloc pointer counts as IPC-capable, and ROCm 5.2 has
 * no hipMemRetainAllocationHandle, so VMM memory the application allocated cannot be registered. */
#include <hip/hip_runtime_api.h>
#include <string.h>

#include "gpu.h"

static int hip_fail(hipError_t e, const char *call) {
    (void)hipGetLastError();
    return cchani_error(CCHAN_ERR_CUDA, call, "%s: %s", hipGetErrorName(e), hipGetErrorString(e));
}

#define HIP_CALL(fn, ...)                                                                          \
    do {                                                                                           \
        hipError_t e_ = fn(__VA_ARGS__);                                                           \
        if (e_ != hipSuccess) return hip_fail(e_, #fn);                                            \
    } while (0)

int cchani_gpu_device_count(int *out) {
    int n = 0;
    if (hipGetDeviceCount(&n) != hipSuccess) {
        (void)hipGetLastError();
        n = 0;
    }
    *out = n;
    return 0;
}

int cchani_gpu_get_device(int *out) {
    HIP_CALL(hipGetDevice, out);
    return 0;
}

int cchani_gpu_set_device(int device) {
    HIP_CALL(hipSetDevice, device);
    return 0;
}

int cchani_gpu_device_uuid(int device, uint8_t out[CCHANI_GPU_UUID_BYTES]) {
    hipUUID u;
    HIP_CALL(hipDeviceGetUuid, &u, device);
    memcpy(out, u.bytes, CCHANI_GPU_UUID_BYTES);
    return 0;
}

int cchani_gpu_can_access_peer(int device, int peer, int *out) {
    HIP_CALL(hipDeviceCanAccessPeer, out, device, peer);
    return 0;
}

int cchani_gpu_native_peer_atomics(int device, int peer, int *out) {
    if (device == peer) {
        *out = 1;
        return 0;
    }
    HIP_CALL(hipDeviceGetP2PAttribute, out, hipDevP2PAttrNativeAtomicSupported, device, peer);
    return 0;
}

int cchani_gpu_enable_peer_access(int peer) {
    hipError_t e = hipDeviceEnablePeerAccess(peer, 0);
    if (e == hipErrorPeerAccessAlreadyEnabled) {
        (void)hipGetLastError();
        return 0;
    }
    return e == hipSuccess ? 0 : hip_fail(e, "hipDeviceEnablePeerAccess");
}

int cchani_gpu_memset_zero(void *p, size_t bytes) {
    hipStream_t s;
    HIP_CALL(hipStreamCreateWithFlags, &s, hipStreamNonBlocking);
    hipError_t e = hipMemsetAsync(p, 0, bytes, s);
    if (e == hipSuccess) e = hipStreamSynchronize(s);
    (void)hipStreamDestroy(s);
    return e == hipSuccess ? 0 : hip_fail(e, "hipMemsetAsync");
}

int cchani_gpu_malloc(size_t bytes, void **out) {
    void *p = NULL;
    HIP_CALL(hipMalloc, &p, bytes);
    int r = cchani_gpu_memset_zero(p, bytes);
    if (r) {
        (void)hipFree(p);
        return r;
    }
    *out = p;
    return 0;
}

int cchani_gpu_free(void *p) {
    HIP_CALL(hipFree, p);
    return 0;
}

int cchani_gpu_host_alloc_mapped(size_t bytes, void **host, void **dev) {
    void *h = NULL, *d = NULL;
    HIP_CALL(hipHostMalloc, &h, bytes, hipHostMallocMapped | hipHostMallocPortable);
    hipError_t e = hipHostGetDevicePointer(&d, h, 0);
    if (e != hipSuccess) {
        (void)hipHostFree(h);
        return hip_fail(e, "hipHostGetDevicePointer");
    }
    memset(h, 0, bytes);
    *host = h;
    *dev = d;
    return 0;
}

int cchani_gpu_host_free(void *host) {
    HIP_CALL(hipHostFree, host);
    return 0;
}

int cchani_gpu_host_register(void *p, size_t bytes, void **dev) {
    void *d = NULL;
    HIP_CALL(hipHostRegister, p, bytes, hipHostRegisterMapped | hipHostRegisterPortable);
    hipError_t e = hipHostGetDevicePointer(&d, p, 0);
    if (e != hipSuccess) {
        (void)hipHostUnregister(p);
        return hip_fail(e, "hipHostGetDevicePointer");
    }
    *dev = d;
    return 0;
}

int cchani_gpu_host_unregister(void *p) {
    HIP_CALL(hipHostUnregister, p);
    return 0;
}

int cchani_gpu_memcpy(void *dst, const void *src, size_t bytes) {
    HIP_CALL(hipMemcpy, dst, src, bytes, hipMemcpyDefault);
    return 0;
}

int cchani_gpu_pointer_info(const void *p, cchani_gpu_ptr_info_t *out) {
    cchani_gpu_ptr_info_t info;
    memset(&info, 0, sizeof info);
    info.device = -1;
    hipPointerAttribute_t a;
    if (hipPointerGetAttributes(&a, p) != hipSuccess) {
        (void)hipGetLastError(); /* memory HIP does not know: plain host memory */
        *out = info;
        return 0;
    }
    if (a.memoryType == hipMemoryTypeDevice) {
        hipDeviceptr_t base = NULL;
        size_t bytes = 0;
        HIP_CALL(hipMemGetAddressRange, &base, &bytes, (hipDeviceptr_t)p);
        info.is_device = 1;
        info.device = a.device;
        info.legacy_ipc = 1;
        info.base = (uintptr_t)base;
        info.bytes = bytes;
    }
    *out = info;
    return 0;
}

int cchani_gpu_ipc_get_handle(void *base, uint8_t handle[CCHANI_GPU_IPC_HANDLE_BYTES]) {
    hipIpcMemHandle_t h;
    CCHAN_STATIC_ASSERT(sizeof h == CCHANI_GPU_IPC_HANDLE_BYTES, "hipIpcMemHandle_t size");
    HIP_CALL(hipIpcGetMemHandle, &h, base);
    memcpy(handle, &h, sizeof h);
    return 0;
}

int cchani_gpu_ipc_open(const uint8_t handle[CCHANI_GPU_IPC_HANDLE_BYTES], void **out) {
    hipIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    HIP_CALL(hipIpcOpenMemHandle, out, h, hipIpcMemLazyEnablePeerAccess);
    return 0;
}

int cchani_gpu_ipc_close(void *p) {
    HIP_CALL(hipIpcCloseMemHandle, p);
    return 0;
}

static hipMemAllocationProp vmm_prop(int device) {
    hipMemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = hipMemAllocationTypePinned;
    prop.location.type = hipMemLocationTypeDevice;
    prop.location.id = device;
    prop.requestedHandleType = hipMemHandleTypePosixFileDescriptor;
    return prop;
}

static hipMemGenericAllocationHandle_t to_handle(uint64_t h) {
    return (hipMemGenericAllocationHandle_t)(uintptr_t)h;
}

int cchani_gpu_vmm_granularity(int device, size_t *out) {
    hipMemAllocationProp prop = vmm_prop(device);
    HIP_CALL(hipMemGetAllocationGranularity, out, &prop, hipMemAllocationGranularityRecommended);
    return 0;
}

int cchani_gpu_mem_info(size_t *free_bytes, size_t *total_bytes) {
    HIP_CALL(hipMemGetInfo, free_bytes, total_bytes);
    return 0;
}

int cchani_gpu_vmm_create(int device, size_t bytes, uint64_t *handle) {
    hipMemAllocationProp prop = vmm_prop(device);
    hipMemGenericAllocationHandle_t h;
    HIP_CALL(hipMemCreate, &h, bytes, &prop, 0);
    *handle = (uint64_t)(uintptr_t)h;
    return 0;
}

int cchani_gpu_vmm_retain(void *p, uint64_t *handle) {
    return cchani_error(CCHAN_ERR_UNSUPPORTED, "hipMemRetainAllocationHandle",
                        "not available in this HIP version; register hipMalloc memory instead");
}

int cchani_gpu_vmm_export_fd(uint64_t handle, int *fd) {
    int f = -1;
    HIP_CALL(hipMemExportToShareableHandle, &f, to_handle(handle),
             hipMemHandleTypePosixFileDescriptor, 0);
    *fd = f;
    return 0;
}

int cchani_gpu_vmm_import_fd(int fd, uint64_t *handle) {
    hipMemGenericAllocationHandle_t h;
    HIP_CALL(hipMemImportFromShareableHandle, &h, (void *)(uintptr_t)fd,
             hipMemHandleTypePosixFileDescriptor);
    *handle = (uint64_t)(uintptr_t)h;
    return 0;
}

#define CCHANI_VMM_MAX_DEVICES 64

static int vmm_set_access(void *va, size_t bytes, const int *devices, int ndevices) {
    hipMemAccessDesc access[CCHANI_VMM_MAX_DEVICES];
    if (ndevices < 1 || ndevices > CCHANI_VMM_MAX_DEVICES)
        return cchani_error(CCHAN_ERR_INTERNAL, "hipMemSetAccess", "%d devices (1..%d)", ndevices,
                            CCHANI_VMM_MAX_DEVICES);
    for (int i = 0; i < ndevices; i++) {
        access[i].location.type = hipMemLocationTypeDevice;
        access[i].location.id = devices[i];
        access[i].flags = hipMemAccessFlagsProtReadWrite;
    }
    HIP_CALL(hipMemSetAccess, va, bytes, access, (size_t)ndevices);
    return 0;
}

int cchani_gpu_vmm_map(uint64_t handle, size_t bytes, const int *devices, int ndevices,
                       void **out) {
    void *va = NULL;
    HIP_CALL(hipMemAddressReserve, &va, bytes, 0, NULL, 0);
    hipError_t e = hipMemMap(va, bytes, 0, to_handle(handle), 0);
    int r =
        e == hipSuccess ? vmm_set_access(va, bytes, devices, ndevices) : hip_fail(e, "hipMemMap");
    if (r) {
        if (e == hipSuccess) (void)hipMemUnmap(va, bytes);
        (void)hipMemAddressFree(va, bytes);
        return r;
    }
    *out = va;
    return 0;
}

int cchani_gpu_vmm_unmap(void *p, size_t bytes) {
    HIP_CALL(hipMemUnmap, p, bytes);
    HIP_CALL(hipMemAddressFree, p, bytes);
    return 0;
}

int cchani_gpu_vmm_release(uint64_t handle) {
    HIP_CALL(hipMemRelease, to_handle(handle));
    return 0;
}
