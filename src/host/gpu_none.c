/* cchan GPU shim for builds without a GPU runtime: there are no devices, so the runtime only ever
 * picks the host platform and none of the other calls is reached; they fail cleanly all the same.
 */
#if !defined(CCHAN_HAVE_CUDA)

#include "gpu.h"

static int no_gpu(const char *call) {
    return cchani_error(CCHAN_ERR_UNSUPPORTED, call, "this cchan build has no GPU runtime");
}

int cchani_gpu_device_count(int *out) {
    *out = 0;
    return 0;
}
int cchani_gpu_get_device(int *out) { return no_gpu("cudaGetDevice"); }
int cchani_gpu_set_device(int device) { return no_gpu("cudaSetDevice"); }
int cchani_gpu_device_uuid(int device, uint8_t out[CCHANI_GPU_UUID_BYTES]) {
    return no_gpu("cudaGetDeviceProperties");
}
int cchani_gpu_malloc(size_t bytes, void **out) { return no_gpu("cudaMalloc"); }
int cchani_gpu_free(void *p) { return no_gpu("cudaFree"); }
int cchani_gpu_host_alloc_mapped(size_t bytes, void **host, void **dev) {
    return no_gpu("cudaHostAlloc");
}
int cchani_gpu_host_free(void *host) { return no_gpu("cudaFreeHost"); }
int cchani_gpu_host_register(void *p, size_t bytes, void **dev) {
    return no_gpu("cudaHostRegister");
}
int cchani_gpu_host_unregister(void *p) { return no_gpu("cudaHostUnregister"); }
int cchani_gpu_memcpy(void *dst, const void *src, size_t bytes) { return no_gpu("cudaMemcpy"); }
int cchani_gpu_memset_zero(void *p, size_t bytes) { return no_gpu("cudaMemsetAsync"); }
int cchani_gpu_can_access_peer(int device, int peer, int *out) {
    return no_gpu("cudaDeviceCanAccessPeer");
}
int cchani_gpu_native_peer_atomics(int device, int peer, int *out) {
    return no_gpu("cudaDeviceGetP2PAttribute");
}
int cchani_gpu_enable_peer_access(int peer) { return no_gpu("cudaDeviceEnablePeerAccess"); }
int cchani_gpu_pointer_info(const void *p, cchani_gpu_ptr_info_t *out) {
    return no_gpu("cudaPointerGetAttributes");
}
int cchani_gpu_ipc_get_handle(void *base, uint8_t handle[CCHANI_GPU_IPC_HANDLE_BYTES]) {
    return no_gpu("cudaIpcGetMemHandle");
}
int cchani_gpu_ipc_open(const uint8_t handle[CCHANI_GPU_IPC_HANDLE_BYTES], void **out) {
    return no_gpu("cudaIpcOpenMemHandle");
}
int cchani_gpu_ipc_close(void *p) { return no_gpu("cudaIpcCloseMemHandle"); }
int cchani_gpu_vmm_granularity(int device, size_t *out) {
    return no_gpu("cuMemGetAllocationGranularity");
}
int cchani_gpu_mem_info(size_t *free_bytes, size_t *total_bytes) {
    return no_gpu("cudaMemGetInfo");
}
int cchani_gpu_vmm_create(int device, size_t bytes, uint64_t *handle) {
    return no_gpu("cuMemCreate");
}
int cchani_gpu_vmm_retain(void *p, uint64_t *handle) {
    return no_gpu("cuMemRetainAllocationHandle");
}
int cchani_gpu_vmm_export_fd(uint64_t handle, int *fd) {
    return no_gpu("cuMemExportToShareableHandle");
}
int cchani_gpu_vmm_import_fd(int fd, uint64_t *handle) {
    return no_gpu("cuMemImportFromShareableHandle");
}
int cchani_gpu_vmm_map(uint64_t handle, size_t bytes, const int *devices, int ndevices,
                       void **out) {
    return no_gpu("cuMemMap");
}
int cchani_gpu_vmm_unmap(void *p, size_t bytes) { return no_gpu("cuMemUnmap"); }
int cchani_gpu_vmm_release(uint64_t handle) { return no_gpu("cuMemRelease"); }

#endif /* !CCHAN_HAVE_CUDA */
