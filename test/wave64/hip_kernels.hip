/* The kernel libraries' warp-level device code compiled by hipcc for a wave64 target (gfx90a) to
 * machine code: the LL packet map, the MoE block scan, fp8 dispatch (a 16-lane amax shuffle) and
 * HT warp split, the fused block sum. Built by the wave64_hipcc_kernels test; nothing runs it. */
#include "coll_algos.h"
#include "fused_rmsnorm_device.h"
#include "moe_ht.h"
#include "moe_ll.h"

static_assert(CCHAN_WARP_SIZE == 64, "gfx90a wavefronts are 64 lanes wide");

extern "C" __global__ void wave64_kernels(const moe_dev_t *d, const moe_op_t *op,
                                          const uint32_t *bits, int n, uint16_t *prefix,
                                          uint32_t *total, float *out, uint32_t epoch) {
    extern __shared__ uint8_t smem[];
    __shared__ float sums[33];
    moe_block_t b;
    b.block = blockIdx.x, b.nblocks = gridDim.x, b.tid = threadIdx.x, b.nthreads = blockDim.x;
    moe_smem_layout(&b, smem, d->top_k, d->nranks, d->local_experts, d->max_tokens);
    moe_block_scan_bits(bits, n, 8, prefix, total, b.wsum, threadIdx.x, blockDim.x);
    int r = moe_ll_dispatch_send(d, op, &b, epoch);
    r += moe_ht_dispatch_send(d, op, &b, epoch);
    out[threadIdx.x] = cchan_fused_block_sum(out[threadIdx.x], sums, threadIdx.x, blockDim.x) +
                       (float)coll_ll_index(blockIdx.x, gridDim.x, threadIdx.x, blockDim.x) +
                       (float)r;
}
