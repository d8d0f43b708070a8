/* Compiled (never run) by check-multimem-ptx.sh: every switch-channel call in one kernel, so the
 * PTX for sm_90 shows the multimem instructions the multicast path issues, and the PTX for sm_80
 * shows none. */
#include "cchan/switch_channel.h"

extern "C" __global__ void sw_multimem_ptx(cchan_switch_channel_t ch, uint64_t bytes) {
    const uint32_t tid = threadIdx.x, nt = blockDim.x;
    cchan_switch_channel_reduce_f32(&ch, 0, 0, bytes, tid, nt);
    cchan_switch_channel_reduce_f16(&ch, 0, 0, bytes, tid, nt);
    cchan_switch_channel_reduce_bf16(&ch, 0, 0, bytes, tid, nt);
    cchan_switch_channel_reduce_i32(&ch, 0, 0, bytes, tid, nt);
    cchan_switch_channel_reduce_u32(&ch, 0, 0, bytes, tid, nt);
    cchan_switch_channel_broadcast_f32(&ch, 0, 0, bytes, tid, nt);
    cchan_switch_channel_broadcast_f16(&ch, 0, 0, bytes, tid, nt);
    cchan_switch_channel_broadcast_bf16(&ch, 0, 0, bytes, tid, nt);
    cchan_switch_channel_broadcast_i32(&ch, 0, 0, bytes, tid, nt);
    cchan_switch_channel_broadcast_u32(&ch, 0, 0, bytes, tid, nt);
}
