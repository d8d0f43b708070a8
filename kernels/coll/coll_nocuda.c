/* cchan_coll without CUDA in the build: the CUDA platform is never reached (a communicator of such
 * a build is on the host platform); these keep the runtime linkable and say why if it were. */
#include "coll_internal.h"

static int coll_no_cuda(void) {
    return colli_error(CCHAN_ERR_UNSUPPORTED, "cchan_coll", "this build has no CUDA");
}
int colli_cuda_alloc(int device, size_t bytes, void **out) {
    (void)device, (void)bytes, (void)out;
    return coll_no_cuda();
}
int colli_cuda_free(int device, void *ptr) {
    (void)device, (void)ptr;
    return coll_no_cuda();
}
int colli_cuda_copy_to_device(int device, void *dst, const void *src, size_t bytes) {
    (void)device, (void)dst, (void)src, (void)bytes;
    return coll_no_cuda();
}
int colli_cuda_launch(int device, coll_kernel_t k, int dtype, const coll_args_t *args,
                      uint32_t nblocks, uint32_t nthreads, int pdl, void *stream) {
    (void)device, (void)k, (void)dtype, (void)args, (void)nblocks, (void)nthreads, (void)pdl;
    (void)stream;
    return coll_no_cuda();
}
int colli_cuda_preload(int device) {
    (void)device;
    return 0; /* nothing to load */
}
int colli_cuda_big_pages(int device, const void *ptr) {
    (void)device, (void)ptr;
    return 0;
}
int colli_cuda_sm(int device) {
    (void)device;
    return 0;
}
int colli_ce_create(int device, colli_ce_t **out) {
    (void)device, (void)out;
    return coll_no_cuda();
}
void colli_ce_destroy(int device, colli_ce_t *ce) { (void)device, (void)ce; }
int colli_ce_fork(int device, colli_ce_t *ce, int lane, void *stream) {
    (void)device, (void)ce, (void)lane, (void)stream;
    return coll_no_cuda();
}
int colli_ce_copy(int device, colli_ce_t *ce, int lane, void *dst, const void *src, size_t bytes) {
    (void)device, (void)ce, (void)lane, (void)dst, (void)src, (void)bytes;
    return coll_no_cuda();
}
int colli_ce_join(int device, colli_ce_t *ce, int lane, void *stream) {
    (void)device, (void)ce, (void)lane, (void)stream;
    return coll_no_cuda();
}
int colli_ce_mark(int device, colli_ce_t *ce, int lane, int slot) {
    (void)device, (void)ce, (void)lane, (void)slot;
    return coll_no_cuda();
}
int colli_ce_wait_mark(int device, colli_ce_t *ce, int slot, void *stream) {
    (void)device, (void)ce, (void)slot, (void)stream;
    return coll_no_cuda();
}
