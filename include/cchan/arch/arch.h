/* cchan portability layer: every difference between CUDA, HIP and the host backend lives here.
 *
 * Backend selection (exactly one of these is defined to 1 after inclusion):
 *   CCHAN_BACKEND_CUDA  compiled by nvcc (or clang in CUDA mode)
 *   CCHAN_BACKEND_HIP   compiled by hipcc
 *   CCHAN_BACKEND_HOST  any C11 or C++ compiler: "device" code runs on CPU threads
 *
 * CCHAN_DEVICE_PASS is 1 while compiling code that runs on the device (the GPU pass of nvcc/hipcc,
 * or always on the host backend). Device functions are declared CCHAN_DEVICE_INLINE; on the host pass
 * of a GPU compiler they exist but cannot be called from host code, as usual for __device__ code.
 *
 * Warp width (arch/warp.h): CCHAN_WARP_SIZE is 32 on CUDA, the target's wavefront size on HIP (64
 * on gfx9/CDNA), and CCHAN_HOST_WARP_SIZE (32 unless defined to 64) on the host backend; lane masks
 * are cchan_lane_mask_t, of that width.
 *
 * Memory ordering vocabulary (the CUDA memory model's, which C11's maps onto):
 *   scope SYS: visible to other GPUs, the CPU and NICs; scope DEV: visible within this GPU.
 *   load_acquire: later accesses are not performed before this load.
 *   store_release: earlier accesses are performed before this store becomes visible.
 */
#ifndef CCHAN_ARCH_ARCH_H
#define CCHAN_ARCH_ARCH_H

#include <stddef.h>
#include <stdint.h>

#if defined(__HIPCC__) || defined(__HIP__)
#define CCHAN_BACKEND_HIP 1
#elif defined(__CUDACC__)
#define CCHAN_BACKEND_CUDA 1
#else
#define CCHAN_BACKEND_HOST 1
#endif

#if defined(CCHAN_BACKEND_CUDA) && defined(__CUDA_ARCH__)
#define CCHAN_DEVICE_PASS 1
#elif defined(CCHAN_BACKEND_HIP) && defined(__HIP_DEVICE_COMPILE__)
#define CCHAN_DEVICE_PASS 1
#elif defined(CCHAN_BACKEND_HOST)
#define CCHAN_DEVICE_PASS 1
#else
#define CCHAN_DEVICE_PASS 0
#endif

#if defined(CCHAN_BACKEND_HIP)
#include <hip/hip_runtime.h>
#endif

#ifdef __cplusplus
#define CCHAN_EXTERN_C_BEGIN extern "C" {
#define CCHAN_EXTERN_C_END }
#else
#define CCHAN_EXTERN_C_BEGIN
#define CCHAN_EXTERN_C_END
#endif

/* Static assertion usable at file scope in C11, C++ and nvcc's C++ mode. */
#ifdef __cplusplus
#define CCHAN_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define CCHAN_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* Function qualifiers. */
#if defined(CCHAN_BACKEND_CUDA) || defined(CCHAN_BACKEND_HIP)
#define CCHAN_DEVICE_INLINE static __device__ __forceinline__
#define CCHAN_HOST_DEVICE_INLINE static __host__ __device__ __forceinline__
#define CCHAN_ALIGN(n) __align__(n)
#else
#define CCHAN_DEVICE_INLINE static inline
#define CCHAN_HOST_DEVICE_INLINE static inline
#define CCHAN_ALIGN(n) __attribute__((aligned(n)))
#endif

#if defined(__GNUC__) || defined(__clang__)
#define CCHAN_LIKELY(x) __builtin_expect(!!(x), 1)
#define CCHAN_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define CCHAN_LIKELY(x) (x)
#define CCHAN_UNLIKELY(x) (x)
#endif

CCHAN_EXTERN_C_BEGIN

/* 16-byte vector: the unit of bulk copies. Alignment 16 so one load/store instruction moves it. */
typedef struct CCHAN_ALIGN(16) cchan_vec16 {
    uint32_t w[4];
} cchan_vec16_t;
CCHAN_STATIC_ASSERT(sizeof(cchan_vec16_t) == 16, "cchan_vec16_t must be 16 bytes");

/* 8-byte vector, used by LL8 packets. */
typedef struct CCHAN_ALIGN(8) cchan_vec8 {
    uint32_t w[2];
} cchan_vec8_t;
CCHAN_STATIC_ASSERT(sizeof(cchan_vec8_t) == 8, "cchan_vec8_t must be 8 bytes");

CCHAN_EXTERN_C_END

#include "cchan/arch/atomic.h"
#include "cchan/arch/warp.h"

#endif /* CCHAN_ARCH_ARCH_H */
