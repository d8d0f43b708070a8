/* cchan runtime memory helpers: "device" and host-mapped memory of a communicator's platform. On
 * the host platform device memory is process memory and both views are one pointer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "runtime.h"

static int on_gpu(const cchan_comm_t *comm) { return comm->platform == CCHAN_PLATFORM_CUDA; }

int cchani_device_enter(cchan_comm_t *comm, cchani_device_scope_t *scope) {
    scope->saved = -1;
    if (!on_gpu(comm)) return 0;
    int current;
    int r = cchani_gpu_get_device(&current);
    if (r) return r;
    if (current == comm->device) return 0;
    r = cchani_gpu_set_device(comm->device);
    if (r) return r;
    scope->saved = current;
    return 0;
}

void cchani_device_leave(cchani_device_scope_t *scope) {
    /* Restoring a device that was current a moment ago cannot fail in a way worth reporting over
     * the result of the call that is returning. */
    if (scope->saved >= 0) (void)cchani_gpu_set_device(scope->saved);
    scope->saved = -1;
}

int cchani_set_device(cchan_comm_t *comm) {
    return on_gpu(comm) ? cchani_gpu_set_device(comm->device) : 0;
}

int cchani_dev_alloc(cchan_comm_t *comm, size_t bytes, void **out) {
    if (bytes == 0) return cchani_error(-EINVAL, "cchani_dev_alloc", "zero bytes");
    if (!on_gpu(comm)) {
        void *p = calloc(1, bytes);
        if (!p) return cchani_error(-ENOMEM, "calloc", "%zu bytes of device-side state", bytes);
        *out = p;
        return 0;
    }
    cchani_device_scope_t scope;
    int r = cchani_device_enter(comm, &scope);
    if (!r) r = cchani_gpu_malloc(bytes, out);
    cchani_device_leave(&scope);
    return r;
}

int cchani_dev_free(cchan_comm_t *comm, void *p) {
    if (!p) return 0;
    if (!on_gpu(comm)) {
        free(p);
        return 0;
    }
    cchani_device_scope_t scope;
    int r = cchani_device_enter(comm, &scope);
    if (!r) r = cchani_gpu_free(p);
    cchani_device_leave(&scope);
    return r;
}

int cchani_host_mapped_alloc(cchan_comm_t *comm, size_t bytes, void **host, void **dev) {
    if (bytes == 0) return cchani_error(-EINVAL, "cchani_host_mapped_alloc", "zero bytes");
    if (!on_gpu(comm)) {
        void *p = calloc(1, bytes);
        if (!p) return cchani_error(-ENOMEM, "calloc", "%zu bytes of host-mapped memory", bytes);
        *host = p;
        *dev = p;
        return 0;
    }
    cchani_device_scope_t scope;
    int r = cchani_device_enter(comm, &scope);
    if (!r) r = cchani_gpu_host_alloc_mapped(bytes, host, dev);
    cchani_device_leave(&scope);
    return r;
}

int cchani_host_mapped_free(cchan_comm_t *comm, void *host) {
    if (!host) return 0;
    if (!on_gpu(comm)) {
        free(host);
        return 0;
    }
    return cchani_gpu_host_free(host);
}

int cchani_memcpy(cchan_comm_t *comm, void *dst, const void *src, size_t bytes) {
    if (!on_gpu(comm)) {
        memcpy(dst, src, bytes);
        return 0;
    }
    cchani_device_scope_t scope;
    int r = cchani_device_enter(comm, &scope);
    if (!r) r = cchani_gpu_memcpy(dst, src, bytes);
    cchani_device_leave(&scope);
    return r;
}
