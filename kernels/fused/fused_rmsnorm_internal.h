/* Between fused_rmsnorm.c (setup, host platform) and fused_rmsnorm_gpu.cu (CUDA kernels). */
#ifndef CCHAN_FUSED_RMSNORM_INTERNAL_H
#define CCHAN_FUSED_RMSNORM_INTERNAL_H

#include <stddef.h>

#include "cchan_fused.h"
#include "fused_rmsnorm_device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Blocks (channels, semaphores per peer) the GPU kernel may use, and CPU threads on the host. */
#define CCHAN_FUSED_GPU_BLOCKS 128
#define CCHAN_FUSED_HOST_BLOCKS 2

/* Records the calling thread's last error; returns status. */
int cchan_fused_error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef CCHAN_FUSED_HAVE_CUDA
/* Loads the kernels into device's context (once per process and device; makes device current):
 * a first launch under CUDA's lazy loading would stall the proxy's copies while a kernel waits on
 * them (fused_rmsnorm_gpu.cu). */
int cchan_fused_gpu_preload(int device);
/* Copies chans[n] to device memory and allocates the zeroed launch state and partial sums. */
int cchan_fused_gpu_setup(const cchan_memory_channel_t *chans, size_t n, size_t partials,
                          int device, cchan_memory_channel_t **dev_chans, uint32_t **dev_state,
                          uint64_t **dev_partials);
void cchan_fused_gpu_teardown(cchan_memory_channel_t *dev_chans, uint32_t *dev_state,
                              uint64_t *dev_partials);
int cchan_fused_gpu_launch(const cchan_fused_rmsnorm_args_t *a, void *stream);
int cchan_fused_gpu_residual_rmsnorm(const void *ar, const void *residual, const void *weight,
                                     float eps, void *residual_out, void *y, uint32_t tokens,
                                     uint32_t hidden, void *stream);
#endif

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_FUSED_RMSNORM_INTERNAL_H */
