/* cchan portability layer: the warp (NVIDIA) or wavefront (AMD) width, lane masks of that width,
 * and the few warp-level operations the kernel libraries use. Included by arch.h; do not include
 * directly.
 *
 * Device code never writes 32, 31, `>> 5` or 0xffffffff for a warp: AMD's gfx9 and CDNA GPUs run
 * 64 lanes in lockstep, and a ballot, shuffle or lane mask sized for 32 silently drops half of
 * them. CCHAN_WARP_SIZE is the width, cchan_lane_mask_t holds one bit per lane.
 *
 * The host backend has no lockstep lanes (a block is one CPU thread), but its width is a build
 * option, -DCCHAN_HOST_WARP_SIZE=32 (default) or 64, so that the arithmetic built on the width
 * (lane and warp of a thread, lane masks, packet-to-thread maps) runs on the CPU at both widths:
 * tests call the device functions for every thread of a simulated block. The warp-level operations
 * (ballot, shuffle) act on a warp of one lane there, the one thread of the block.
 */
#ifndef CCHAN_ARCH_WARP_H
#define CCHAN_ARCH_WARP_H

#ifndef CCHAN_ARCH_ARCH_H
#error "include cchan/arch/arch.h instead"
#endif

#if defined(CCHAN_BACKEND_CUDA)
#define CCHAN_WARP_SIZE 32
#elif defined(CCHAN_BACKEND_HIP)
/* The compiler's wavefront size for the target (clang defines it on the host pass too); 64, the
 * gfx9/CDNA width, where it says nothing. */
#if defined(__AMDGCN_WAVEFRONT_SIZE__)
#define CCHAN_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE__
#elif defined(__AMDGCN_WAVEFRONT_SIZE)
#define CCHAN_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define CCHAN_WARP_SIZE 64
#endif
#else
#ifndef CCHAN_HOST_WARP_SIZE
#define CCHAN_HOST_WARP_SIZE 32
#endif
#define CCHAN_WARP_SIZE CCHAN_HOST_WARP_SIZE
#endif

#if CCHAN_WARP_SIZE != 32 && CCHAN_WARP_SIZE != 64
#error "cchan: the warp width must be 32 or 64 (CCHAN_HOST_WARP_SIZE on the host backend)"
#endif

CCHAN_EXTERN_C_BEGIN

/* One bit per lane; bit i is lane i. */
#if CCHAN_WARP_SIZE == 64
typedef uint64_t cchan_lane_mask_t;
#else
typedef uint32_t cchan_lane_mask_t;
#endif
#define CCHAN_LANE_MASK_ALL ((cchan_lane_mask_t) ~(cchan_lane_mask_t)0)

/* Lane and warp of the thread of linear index tid in its block (1-D blocks: a warp is
 * CCHAN_WARP_SIZE consecutive threads). */
CCHAN_HOST_DEVICE_INLINE uint32_t cchan_lane_id(uint32_t tid) { return tid % CCHAN_WARP_SIZE; }
CCHAN_HOST_DEVICE_INLINE uint32_t cchan_warp_id(uint32_t tid) { return tid / CCHAN_WARP_SIZE; }

/* Lanes below `lane` (lane < CCHAN_WARP_SIZE): with a ballot, a lane's rank among the voters. */
CCHAN_HOST_DEVICE_INLINE cchan_lane_mask_t cchan_lanes_below(uint32_t lane) {
    return (cchan_lane_mask_t)(((cchan_lane_mask_t)1 << lane) - 1u);
}

/* The `width` lanes (a power of two <= CCHAN_WARP_SIZE) of the aligned group holding `lane`: the
 * participants of a shuffle of that width. */
CCHAN_HOST_DEVICE_INLINE cchan_lane_mask_t cchan_lane_group_mask(uint32_t lane, uint32_t width) {
    cchan_lane_mask_t group =
        width >= CCHAN_WARP_SIZE ? CCHAN_LANE_MASK_ALL : cchan_lanes_below(width);
    return (cchan_lane_mask_t)(group << (lane & ~(width - 1u) & (CCHAN_WARP_SIZE - 1u)));
}

/* Lanes set in m. */
CCHAN_DEVICE_INLINE uint32_t cchan_lane_popc(cchan_lane_mask_t m) {
#if defined(CCHAN_BACKEND_CUDA)
    return (uint32_t)__popc(m);
#elif defined(CCHAN_BACKEND_HIP)
    return (uint32_t)__popcll((unsigned long long)m);
#else
    return (uint32_t)__builtin_popcountll((unsigned long long)m);
#endif
}

/* Lanes of the calling warp whose pred is nonzero. Every lane of the warp calls it (CUDA: the
 * whole warp takes part). */
CCHAN_DEVICE_INLINE cchan_lane_mask_t cchan_warp_ballot(int pred) {
#if defined(CCHAN_BACKEND_CUDA)
    return __ballot_sync(CCHAN_LANE_MASK_ALL, pred);
#elif defined(CCHAN_BACKEND_HIP)
    return (cchan_lane_mask_t)__ballot(pred);
#else
    return pred ? 1u : 0u; /* the block's one thread is lane 0 */
#endif
}

/* v of lane (this lane ^ xor_lanes) within groups of `width` lanes (a power of two <= the warp).
 * `lanes`: the lanes that call it together (CUDA checks them; AMD has no such operand, and reads
 * lanes outside them undefined, as CUDA does). */
CCHAN_DEVICE_INLINE float cchan_warp_shfl_xor_f32(cchan_lane_mask_t lanes, float v, int xor_lanes,
                                                  int width) {
#if defined(CCHAN_BACKEND_CUDA)
    return __shfl_xor_sync(lanes, v, xor_lanes, width);
#elif defined(CCHAN_BACKEND_HIP)
    (void)lanes;
    return __shfl_xor(v, xor_lanes, width);
#else
    (void)lanes, (void)xor_lanes, (void)width;
    return v; /* a warp of one lane: its partner is itself */
#endif
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_ARCH_WARP_H */
