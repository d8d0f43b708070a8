/* cchan_exec without CUDA in the build: a communicator of such a build is on the host platform,
 * so these are never reached; they keep the library linkable and say why if they were. */
#include "exec_internal.h"

static int exec_no_cuda(void) {
    return execi_error(CCHAN_ERR_UNSUPPORTED, "cchan_exec", "this build has no CUDA");
}
int execi_cuda_alloc(int device, size_t bytes, void **out) {
    (void)device, (void)bytes, (void)out;
    return exec_no_cuda();
}
int execi_cuda_free(int device, void *ptr) {
    (void)device, (void)ptr;
    return exec_no_cuda();
}
int execi_cuda_upload(int device, void *dst, const void *src, size_t bytes) {
    (void)device, (void)dst, (void)src, (void)bytes;
    return exec_no_cuda();
}
int execi_cuda_sync(int device) {
    (void)device;
    return exec_no_cuda();
}
int execi_cuda_preload(int device) {
    (void)device;
    return 0; /* nothing to load */
}
int execi_cuda_prepare(int device, uint32_t nblocks, uint32_t nthreads, uint32_t smem,
                       int cooperative) {
    (void)device, (void)nblocks, (void)nthreads, (void)smem, (void)cooperative;
    return exec_no_cuda();
}
int execi_cuda_capacity(int device, uint32_t nthreads, uint32_t smem, int *sms, int *resident) {
    (void)device, (void)nthreads, (void)smem, (void)sms, (void)resident;
    return exec_no_cuda();
}
int execi_cuda_launch(int device, const exec_kargs_t *a, uint32_t nblocks, uint32_t nthreads,
                      uint32_t smem, int cooperative, int pdl, void *stream) {
    (void)device, (void)a, (void)nblocks, (void)nthreads, (void)smem, (void)cooperative, (void)pdl;
    (void)stream;
    return exec_no_cuda();
}
