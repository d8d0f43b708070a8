/* cchan-bench switch-bw: the switch channel's reduce and broadcast (and an AllReduce built from
 * them) against same-run baselines. GPU: bench_switch_gpu.cu; host backend: bench_switch_host.c.
 * Each sets up its own buffers and channel, so it runs independently of the other subcommands. */
#ifndef CCHAN_BENCH_SWITCH_H
#define CCHAN_BENCH_SWITCH_H

#include "bench_common.h"

#ifdef __cplusplus
extern "C" {
#endif

void cb_switch_host(cb_ctx_t *ctx);
#ifdef CCHAN_BENCH_CUDA
void cb_switch_gpu(cb_ctx_t *ctx);
#endif

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_BENCH_SWITCH_H */
