/* cchan_fused_rmsnorm: AllReduce + residual add + RMSNorm in one kernel, the epilogue of a
 * tensor-parallel transformer layer (an example library users copy from; docs/fused_rmsnorm.md).
 *
 * Every rank of a cchan communicator on one host holds partial sums x of a [tokens, hidden] bf16
 * activation. One call computes, on every rank,
 *     residual_out = allreduce_sum(x) + residual
 *     y            = residual_out * rsqrt(mean(residual_out^2, per row) + eps) * weight
 * with the all-reduce rounded to bf16 before the residual add, as an all-reduce into a bf16 tensor
 * followed by a separate kernel would (cchan_fused_residual_rmsnorm is that separate kernel).
 * All ranks get bit-identical results.
 *
 * Setup is done once by cchan_fused_rmsnorm_create (scratch buffers mapped by every peer, memory
 * channels, semaphores); calls only launch one kernel, so they are capturable in CUDA graphs and
 * replay correctly any number of times. On the host platform the same algorithm runs on CPU
 * threads and the call returns when done.
 *
 * Buffers are device memory of this rank (host memory on the host platform), 16-byte aligned:
 * x, residual, residual_out, y [tokens, hidden]; weight [hidden]. residual_out may be residual and
 * y may be x (in place). Streams are cudaStream_t passed as void *.
 *
 * Every function returns 0 or a negative cchan status; cchan_fused_rmsnorm_last_error() then says
 * what failed. Calls are collective: every rank, same order, same tokens and protocol.
 */
#ifndef CCHAN_FUSED_RMSNORM_H
#define CCHAN_FUSED_RMSNORM_H

#include "cchan/cchan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cchan_fused_proto {
    CCHAN_FUSED_AUTO = 0, /* cchan_fused_rmsnorm_select */
    CCHAN_FUSED_LL = 1,   /* LL16 packets: data and flags in one store, no signal (small) */
    CCHAN_FUSED_HB = 2    /* plain stores, then one signal/wait per block and peer (large) */
} cchan_fused_proto_t;

typedef struct cchan_fused_rmsnorm cchan_fused_rmsnorm_t;

/* Collective. hidden: a multiple of 8, at most 65536; max_tokens >= 1. */
CCHAN_API int cchan_fused_rmsnorm_create(cchan_comm_t *comm, uint32_t max_tokens, uint32_t hidden,
                                         cchan_fused_rmsnorm_t **out);
CCHAN_API int cchan_fused_rmsnorm_destroy(cchan_fused_rmsnorm_t *f); /* collective */

/* The fused operation; 1 <= tokens <= max_tokens. */
CCHAN_API int cchan_fused_rmsnorm_run(cchan_fused_rmsnorm_t *f, const void *x, const void *residual,
                                      const void *weight, float eps, void *residual_out, void *y,
                                      uint32_t tokens, cchan_fused_proto_t proto, void *stream);

/* Blocks per row for the LL protocol. 1 (the default): one block per row. 0: spread a row over up
 * to 16 blocks when there are few tokens (min(16, 128 / tokens)); the blocks then add their partial
 * sums of squares through device memory. Spreading measured slower at 1-32 tokens
 * (docs/tuning.md, "Fused RMSNorm"), so it is off by default. 2..16: fixed.
 * Every rank must set the same value. */
CCHAN_API int cchan_fused_rmsnorm_set_split(cchan_fused_rmsnorm_t *f, uint32_t split);

/* The protocol CCHAN_FUSED_AUTO takes for this many tokens. A NULL f: (int)result is -EINVAL and
 * the last error names f. */
CCHAN_API cchan_fused_proto_t cchan_fused_rmsnorm_select(const cchan_fused_rmsnorm_t *f,
                                                         uint32_t tokens);
CCHAN_API const char *cchan_fused_proto_name(cchan_fused_proto_t proto);

/* The unfused second half alone, for a rank that already holds the all-reduced `ar` (e.g. from
 * NCCL): residual_out = ar + residual, y = rmsnorm(residual_out) * weight. No communication;
 * platform is the communicator's (CUDA: launched on stream; host: computed before returning). */
CCHAN_API int cchan_fused_residual_rmsnorm(cchan_platform_t platform, const void *ar,
                                           const void *residual, const void *weight, float eps,
                                           void *residual_out, void *y, uint32_t tokens,
                                           uint32_t hidden, void *stream);

/* The calling thread's last error: the same message as cchan_last_error(), which this library's
 * failures write too. "" if none. */
CCHAN_API const char *cchan_fused_rmsnorm_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_FUSED_RMSNORM_H */
