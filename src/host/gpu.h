/* cchan GPU shim: the only place the host runtime calls a GPU runtime (not installed).
 *
 * gpu_cuda.c implements it over the CUDA runtime (linked statically) and the driver API, which it
 * reaches through cudaGetDriverEntryPointByVersion so that libcchan never links libcuda and loads
 * on machines without an NVIDIA driver. hip/gpu_hip.c implements the same functions over HIP
 * (compile- checked only). gpu_none.c is the build without a GPU runtime: no devices, every other
 * call CCHAN_ERR_UNSUPPORTED.
 *
 * Every function returns 0 or a cchan status; a failing runtime call becomes CCHAN_ERR_CUDA with
 * the last error naming the call and the runtime's error string. Functions act on the calling
 * thread's current device unless they take one.
 */
#ifndef CCHAN_SRC_HOST_GPU_H
#define CCHAN_SRC_HOST_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* Number of usable GPUs; 0 (and success) when there is no driver or no device. */
CCHANI_HIDDEN int cchani_gpu_device_count(int *out);
CCHANI_HIDDEN int cchani_gpu_get_device(int *out);
CCHANI_HIDDEN int cchani_gpu_set_device(int device);
/* The device's UUID: what names one GPU across processes whose device ordinals differ
 * (CUDA_VISIBLE_DEVICES) and across the ranks of a host that share it (MPS). */
#define CCHANI_GPU_UUID_BYTES 16
CCHANI_HIDDEN int cchani_gpu_device_uuid(int device, uint8_t out[CCHANI_GPU_UUID_BYTES]);

/* Device memory of the current device, zero-filled. */
CCHANI_HIDDEN int cchani_gpu_malloc(size_t bytes, void **out);
CCHANI_HIDDEN int cchani_gpu_free(void *p);
/* Pinned host memory, mapped into every device (portable), zero-filled. */
CCHANI_HIDDEN int cchani_gpu_host_alloc_mapped(size_t bytes, void **host, void **dev);
CCHANI_HIDDEN int cchani_gpu_host_free(void *host);
/* Pins existing host memory (e.g. a shared mapping) and maps it into every device. */
CCHANI_HIDDEN int cchani_gpu_host_register(void *p, size_t bytes, void **dev);
CCHANI_HIDDEN int cchani_gpu_host_unregister(void *p);
/* Synchronous copy between any two pointers the runtime knows (unified addressing). */
CCHANI_HIDDEN int cchani_gpu_memcpy(void *dst, const void *src, size_t bytes);
CCHANI_HIDDEN int cchani_gpu_memset_zero(void *p, size_t bytes);
CCHANI_HIDDEN int cchani_gpu_can_access_peer(int device, int peer, int *out);
/* Whether `device` has native atomics on `peer`'s memory (NVLink: yes; PCIe P2P: often not). */
CCHANI_HIDDEN int cchani_gpu_native_peer_atomics(int device, int peer, int *out);
/* Lets the current device access `peer`'s memory; already enabled counts as success. */
CCHANI_HIDDEN int cchani_gpu_enable_peer_access(int peer);

/* What the runtime knows about a pointer. */
typedef struct cchani_gpu_ptr_info {
    int is_device;  /* device memory (cudaMalloc or VMM), as opposed to host or unknown memory */
    int device;     /* owning device, when is_device */
    int legacy_ipc; /* allocated by cudaMalloc: legacy IPC capable */
    uintptr_t base; /* start of the allocation (cudaMalloc) or mapping (VMM) holding the pointer */
    size_t bytes;   /* its size */
} cchani_gpu_ptr_info_t;
CCHANI_HIDDEN int cchani_gpu_pointer_info(const void *p, cchani_gpu_ptr_info_t *out);

/* Legacy IPC (cudaIpcGetMemHandle / cudaIpcOpenMemHandle) of a cudaMalloc allocation's base. */
#define CCHANI_GPU_IPC_HANDLE_BYTES 64
CCHANI_HIDDEN int cchani_gpu_ipc_get_handle(void *base,
                                            uint8_t handle[CCHANI_GPU_IPC_HANDLE_BYTES]);
CCHANI_HIDDEN int cchani_gpu_ipc_open(const uint8_t handle[CCHANI_GPU_IPC_HANDLE_BYTES],
                                      void **out);
CCHANI_HIDDEN int cchani_gpu_ipc_close(void *p);

/* Virtual memory management (cuMem): physical allocations with a POSIX fd shareable handle, mapped
 * into reserved address ranges. Handles are opaque 64-bit values. */
CCHANI_HIDDEN int cchani_gpu_vmm_granularity(int device, size_t *out);
/* Free and total memory of the current device (cudaMemGetInfo). */
CCHANI_HIDDEN int cchani_gpu_mem_info(size_t *free_bytes, size_t *total_bytes);
CCHANI_HIDDEN int cchani_gpu_vmm_create(int device, size_t bytes, uint64_t *handle);
/* Retains the handle of the allocation mapped at p (p must be VMM memory). */
CCHANI_HIDDEN int cchani_gpu_vmm_retain(void *p, uint64_t *handle);
CCHANI_HIDDEN int cchani_gpu_vmm_export_fd(uint64_t handle, int *fd);
CCHANI_HIDDEN int cchani_gpu_vmm_import_fd(int fd, uint64_t *handle);
/* Reserves `bytes` of address space, maps the whole allocation there and grants read/write access
 * to devices[0..ndevices). */
CCHANI_HIDDEN int cchani_gpu_vmm_map(uint64_t handle, size_t bytes, const int *devices,
                                     int ndevices, void **out);
CCHANI_HIDDEN int cchani_gpu_vmm_unmap(void *p, size_t bytes);
CCHANI_HIDDEN int cchani_gpu_vmm_release(uint64_t handle);

#endif /* CCHAN_SRC_HOST_GPU_H */
