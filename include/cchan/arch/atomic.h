/* cchan portability layer: atomics, fences, volatile vector accesses, clock, spin hints.
 * Included by arch.h; do not include directly.
 *
 * Naming: cchan_<op>_<order>_<scope>_<width>. Scopes: sys (other GPUs, CPU, NIC), dev (this GPU).
 * On the host backend both scopes are the C11 memory model at the given order (GCC/Clang __atomic
 * builtins, which implement C11 atomics and work in C and C++ alike).
 */
#ifndef CCHAN_ARCH_ATOMIC_H
#define CCHAN_ARCH_ATOMIC_H

#ifndef CCHAN_ARCH_ARCH_H
#error "include cchan/arch/arch.h instead"
#endif

#if defined(CCHAN_BACKEND_HOST)
#include <sched.h>
#include <time.h>
#endif

CCHAN_EXTERN_C_BEGIN

#if defined(CCHAN_BACKEND_CUDA)
/* ---------------------------------------------------------------- CUDA: inline PTX (sm_70+) */
#define CCHAN_DEFINE_LD(name, ptx, T, cons)                                                         \
    CCHAN_DEVICE_INLINE T name(const T *p) {                                                       \
        T v;                                                                                       \
        asm volatile(ptx " %0, [%1];" : "=" cons(v) : "l"(p) : "memory");                          \
        return v;                                                                                  \
    }
#define CCHAN_DEFINE_ST(name, ptx, T, cons)                                                         \
    CCHAN_DEVICE_INLINE void name(T *p, T v) {                                                     \
        asm volatile(ptx " [%0], %1;" ::"l"(p), cons(v) : "memory");                               \
    }
#define CCHAN_DEFINE_ADD(name, ptx, T, cons)                                                        \
    CCHAN_DEVICE_INLINE T name(T *p, T v) {                                                        \
        T old;                                                                                     \
        asm volatile(ptx " %0, [%1], %2;" : "=" cons(old) : "l"(p), cons(v) : "memory");           \
        return old;                                                                                \
    }
CCHAN_DEFINE_LD(cchan_load_acquire_sys_u64, "ld.acquire.sys.u64", uint64_t, "l")
CCHAN_DEFINE_LD(cchan_load_acquire_dev_u64, "ld.acquire.gpu.u64", uint64_t, "l")
CCHAN_DEFINE_LD(cchan_load_relaxed_dev_u64, "ld.relaxed.gpu.u64", uint64_t, "l")
CCHAN_DEFINE_LD(cchan_load_relaxed_sys_u64, "ld.relaxed.sys.u64", uint64_t, "l")
CCHAN_DEFINE_LD(cchan_load_acquire_sys_u32, "ld.acquire.sys.u32", uint32_t, "r")
CCHAN_DEFINE_LD(cchan_load_relaxed_sys_u32, "ld.relaxed.sys.u32", uint32_t, "r")
CCHAN_DEFINE_ST(cchan_store_release_sys_u64, "st.release.sys.u64", uint64_t, "l")
CCHAN_DEFINE_ST(cchan_store_release_dev_u64, "st.release.gpu.u64", uint64_t, "l")
CCHAN_DEFINE_ST(cchan_store_relaxed_sys_u64, "st.relaxed.sys.u64", uint64_t, "l")
CCHAN_DEFINE_ST(cchan_store_release_sys_u32, "st.release.sys.u32", uint32_t, "r")
CCHAN_DEFINE_ST(cchan_store_relaxed_sys_u32, "st.relaxed.sys.u32", uint32_t, "r")
/* Two 64-bit words in one 16-byte store (p 16-byte aligned). No atomicity across the words is
 * promised; callers make each word self-describing. */
CCHAN_DEVICE_INLINE void cchan_store_relaxed_sys_v2_u64(uint64_t *p, uint64_t a, uint64_t b) {
    asm volatile("st.relaxed.sys.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
CCHAN_DEFINE_ADD(cchan_fetch_add_release_sys_u64, "atom.add.release.sys.u64", uint64_t, "l")
CCHAN_DEFINE_ADD(cchan_fetch_add_relaxed_sys_u64, "atom.add.relaxed.sys.u64", uint64_t, "l")
CCHAN_DEFINE_ADD(cchan_fetch_add_relaxed_dev_u64, "atom.add.relaxed.gpu.u64", uint64_t, "l")
CCHAN_DEFINE_ADD(cchan_fetch_add_acq_rel_dev_u32, "atom.add.acq_rel.gpu.u32", uint32_t, "r")
#undef CCHAN_DEFINE_LD
#undef CCHAN_DEFINE_ST
#undef CCHAN_DEFINE_ADD

/* Posted (no return value) atomic adds: the issuing thread does not wait for them to complete. */
CCHAN_DEVICE_INLINE void cchan_red_add_release_sys_u64(uint64_t *p, uint64_t v) {
    asm volatile("red.release.sys.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
CCHAN_DEVICE_INLINE void cchan_red_add_relaxed_sys_u64(uint64_t *p, uint64_t v) {
    asm volatile("red.relaxed.sys.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
CCHAN_DEVICE_INLINE void cchan_fence_acq_rel_sys(void) { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
CCHAN_DEVICE_INLINE void cchan_fence_acq_rel_dev(void) { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
CCHAN_DEVICE_INLINE void cchan_fence_sc_sys(void) { asm volatile("fence.sc.sys;" ::: "memory"); }

/* Volatile (never cached, never merged) vector accesses for LL packets: each is one instruction. */
CCHAN_DEVICE_INLINE cchan_vec8_t cchan_load_volatile_v8(const cchan_vec8_t *p) {
    cchan_vec8_t v;
    asm volatile("ld.volatile.global.v2.u32 {%0,%1}, [%2];"
                 : "=r"(v.w[0]), "=r"(v.w[1])
                 : "l"(p)
                 : "memory");
    return v;
}
CCHAN_DEVICE_INLINE void cchan_store_volatile_v8(cchan_vec8_t *p, cchan_vec8_t v) {
    asm volatile("st.volatile.global.v2.u32 [%0], {%1,%2};" ::"l"(p), "r"(v.w[0]), "r"(v.w[1])
                 : "memory");
}
CCHAN_DEVICE_INLINE cchan_vec16_t cchan_load_volatile_v16(const cchan_vec16_t *p) {
    cchan_vec16_t v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "l"(p)
                 : "memory");
    return v;
}
CCHAN_DEVICE_INLINE void cchan_store_volatile_v16(cchan_vec16_t *p, cchan_vec16_t v) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.w[0]),
                 "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3])
                 : "memory");
}

/* Nanoseconds from the GPU's global timer; used only for deadlines. */
CCHAN_DEVICE_INLINE uint64_t cchan_clock_ns(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
CCHAN_DEVICE_INLINE void cchan_spin_pause(uint32_t iter) { (void)iter; }
CCHAN_DEVICE_INLINE void cchan_trap(void) { __trap(); }
CCHAN_DEVICE_INLINE void cchan_block_sync(void) { __syncthreads(); }

#elif defined(CCHAN_BACKEND_HIP)
/* ---------------------------------------------------------------- HIP: __hip_atomic builtins */
#define CCHAN_HIP_SYS __HIP_MEMORY_SCOPE_SYSTEM
#define CCHAN_HIP_DEV __HIP_MEMORY_SCOPE_AGENT
CCHAN_DEVICE_INLINE uint64_t cchan_load_acquire_sys_u64(const uint64_t *p) {
    return __hip_atomic_load(p, __ATOMIC_ACQUIRE, CCHAN_HIP_SYS);
}
CCHAN_DEVICE_INLINE uint64_t cchan_load_acquire_dev_u64(const uint64_t *p) {
    return __hip_atomic_load(p, __ATOMIC_ACQUIRE, CCHAN_HIP_DEV);
}
CCHAN_DEVICE_INLINE uint64_t cchan_load_relaxed_dev_u64(const uint64_t *p) {
    return __hip_atomic_load(p, __ATOMIC_RELAXED, CCHAN_HIP_DEV);
}
CCHAN_DEVICE_INLINE uint64_t cchan_load_relaxed_sys_u64(const uint64_t *p) {
    return __hip_atomic_load(p, __ATOMIC_RELAXED, CCHAN_HIP_SYS);
}
CCHAN_DEVICE_INLINE uint32_t cchan_load_acquire_sys_u32(const uint32_t *p) {
    return __hip_atomic_load(p, __ATOMIC_ACQUIRE, CCHAN_HIP_SYS);
}
CCHAN_DEVICE_INLINE uint32_t cchan_load_relaxed_sys_u32(const uint32_t *p) {
    return __hip_atomic_load(p, __ATOMIC_RELAXED, CCHAN_HIP_SYS);
}
CCHAN_DEVICE_INLINE void cchan_store_release_sys_u64(uint64_t *p, uint64_t v) {
    __hip_atomic_store(p, v, __ATOMIC_RELEASE, CCHAN_HIP_SYS);
}
CCHAN_DEVICE_INLINE void cchan_store_release_dev_u64(uint64_t *p, uint64_t v) {
    __hip_atomic_store(p, v, __ATOMIC_RELEASE, CCHAN_HIP_DEV);
}
CCHAN_DEVICE_INLINE void cchan_store_relaxed_sys_u64(uint64_t *p, uint64_t v) {
    __hip_atomic_store(p, v, __ATOMIC_RELAXED, CCHAN_HIP_SYS);
}
CCHAN_DEVICE_INLINE void cchan_store_release_sys_u32(uint32_t *p, uint32_t v) {
    __hip_atomic_store(p, v, __ATOMIC_RELEASE, CCHAN_HIP_SYS);
}
CCHAN_DEVICE_INLINE void cchan_store_relaxed_sys_u32(uint32_t *p, uint32_t v) {
    __hip_atomic_store(p, v, __ATOMIC_RELAXED, CCHAN_HIP_SYS);
}
CCHAN_DEVICE_INLINE void cchan_store_relaxed_sys_v2_u64(uint64_t *p, uint64_t a, uint64_t b) {
    __hip_atomic_store(&p[0], a, __ATOMIC_RELAXED, CCHAN_HIP_SYS);
    __hip_atomic_store(&p[1], b, __ATOMIC_RELAXED, CCHAN_HIP_SYS);
}
CCHAN_DEVICE_INLINE uint64_t cchan_fetch_add_release_sys_u64(uint64_t *p, uint64_t v) {
    return __hip_atomic_fetch_add(p, v, __ATOMIC_RELEASE, CCHAN_HIP_SYS);
}
CCHAN_DEVICE_INLINE uint64_t cchan_fetch_add_relaxed_sys_u64(uint64_t *p, uint64_t v) {
    return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, CCHAN_HIP_SYS);
}
CCHAN_DEVICE_INLINE uint64_t cchan_fetch_add_relaxed_dev_u64(uint64_t *p, uint64_t v) {
    return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, CCHAN_HIP_DEV);
}
CCHAN_DEVICE_INLINE uint32_t cchan_fetch_add_acq_rel_dev_u32(uint32_t *p, uint32_t v) {
    return __hip_atomic_fetch_add(p, v, __ATOMIC_ACQ_REL, CCHAN_HIP_DEV);
}
CCHAN_DEVICE_INLINE void cchan_red_add_release_sys_u64(uint64_t *p, uint64_t v) {
    (void)__hip_atomic_fetch_add(p, v, __ATOMIC_RELEASE, CCHAN_HIP_SYS);
}
CCHAN_DEVICE_INLINE void cchan_red_add_relaxed_sys_u64(uint64_t *p, uint64_t v) {
    (void)__hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, CCHAN_HIP_SYS);
}
CCHAN_DEVICE_INLINE void cchan_fence_acq_rel_sys(void) { __threadfence_system(); }
CCHAN_DEVICE_INLINE void cchan_fence_acq_rel_dev(void) { __threadfence(); }
CCHAN_DEVICE_INLINE void cchan_fence_sc_sys(void) { __threadfence_system(); }
CCHAN_DEVICE_INLINE cchan_vec8_t cchan_load_volatile_v8(const cchan_vec8_t *p) {
    cchan_vec8_t v;
    uint64_t raw = __hip_atomic_load((const uint64_t *)p, __ATOMIC_RELAXED, CCHAN_HIP_SYS);
    v.w[0] = (uint32_t)raw;
    v.w[1] = (uint32_t)(raw >> 32);
    return v;
}
CCHAN_DEVICE_INLINE void cchan_store_volatile_v8(cchan_vec8_t *p, cchan_vec8_t v) {
    uint64_t raw = (uint64_t)v.w[0] | ((uint64_t)v.w[1] << 32);
    __hip_atomic_store((uint64_t *)p, raw, __ATOMIC_RELAXED, CCHAN_HIP_SYS);
}
typedef unsigned int cchan_hip_u32x4 __attribute__((ext_vector_type(4)));
CCHAN_DEVICE_INLINE cchan_vec16_t cchan_load_volatile_v16(const cchan_vec16_t *p) {
    cchan_hip_u32x4 r = *(const volatile cchan_hip_u32x4 *)(const void *)p;
    cchan_vec16_t v;
    v.w[0] = r.x;
    v.w[1] = r.y;
    v.w[2] = r.z;
    v.w[3] = r.w;
    return v;
}
CCHAN_DEVICE_INLINE void cchan_store_volatile_v16(cchan_vec16_t *p, cchan_vec16_t v) {
    cchan_hip_u32x4 r = {v.w[0], v.w[1], v.w[2], v.w[3]};
    *(volatile cchan_hip_u32x4 *)(void *)p = r;
}
CCHAN_DEVICE_INLINE uint64_t cchan_clock_ns(void) {
    /* s_memrealtime ticks at a constant 100 MHz on gfx9 parts. */
    return __builtin_amdgcn_s_memrealtime() * 10ull;
}
CCHAN_DEVICE_INLINE void cchan_spin_pause(uint32_t iter) { (void)iter; }
CCHAN_DEVICE_INLINE void cchan_trap(void) { __builtin_trap(); }
CCHAN_DEVICE_INLINE void cchan_block_sync(void) { __syncthreads(); }

#else
/* ---------------------------------------------------------------- host backend: C11 model */
#define CCHAN_HOST_LD(name, T, order)                                                              \
    CCHAN_DEVICE_INLINE T name(const T *p) { return __atomic_load_n(p, order); }
#define CCHAN_HOST_ST(name, T, order)                                                              \
    CCHAN_DEVICE_INLINE void name(T *p, T v) { __atomic_store_n(p, v, order); }
#define CCHAN_HOST_ADD(name, T, order)                                                             \
    CCHAN_DEVICE_INLINE T name(T *p, T v) { return __atomic_fetch_add(p, v, order); }
CCHAN_HOST_LD(cchan_load_acquire_sys_u64, uint64_t, __ATOMIC_ACQUIRE)
CCHAN_HOST_LD(cchan_load_acquire_dev_u64, uint64_t, __ATOMIC_ACQUIRE)
CCHAN_HOST_LD(cchan_load_relaxed_dev_u64, uint64_t, __ATOMIC_RELAXED)
CCHAN_HOST_LD(cchan_load_relaxed_sys_u64, uint64_t, __ATOMIC_RELAXED)
CCHAN_HOST_LD(cchan_load_acquire_sys_u32, uint32_t, __ATOMIC_ACQUIRE)
CCHAN_HOST_LD(cchan_load_relaxed_sys_u32, uint32_t, __ATOMIC_RELAXED)
CCHAN_HOST_ST(cchan_store_release_sys_u64, uint64_t, __ATOMIC_RELEASE)
CCHAN_HOST_ST(cchan_store_release_dev_u64, uint64_t, __ATOMIC_RELEASE)
CCHAN_HOST_ST(cchan_store_relaxed_sys_u64, uint64_t, __ATOMIC_RELAXED)
CCHAN_HOST_ST(cchan_store_release_sys_u32, uint32_t, __ATOMIC_RELEASE)
CCHAN_HOST_ST(cchan_store_relaxed_sys_u32, uint32_t, __ATOMIC_RELAXED)
CCHAN_HOST_ADD(cchan_fetch_add_release_sys_u64, uint64_t, __ATOMIC_RELEASE)
CCHAN_HOST_ADD(cchan_fetch_add_relaxed_sys_u64, uint64_t, __ATOMIC_RELAXED)
CCHAN_HOST_ADD(cchan_fetch_add_relaxed_dev_u64, uint64_t, __ATOMIC_RELAXED)
CCHAN_HOST_ADD(cchan_fetch_add_acq_rel_dev_u32, uint32_t, __ATOMIC_ACQ_REL)
#undef CCHAN_HOST_LD
#undef CCHAN_HOST_ST
CCHAN_DEVICE_INLINE void cchan_store_relaxed_sys_v2_u64(uint64_t *p, uint64_t a, uint64_t b) {
    __atomic_store_n(&p[0], a, __ATOMIC_RELAXED);
    __atomic_store_n(&p[1], b, __ATOMIC_RELAXED);
}
#undef CCHAN_HOST_ADD

CCHAN_DEVICE_INLINE void cchan_red_add_release_sys_u64(uint64_t *p, uint64_t v) {
    (void)__atomic_fetch_add(p, v, __ATOMIC_RELEASE);
}
CCHAN_DEVICE_INLINE void cchan_red_add_relaxed_sys_u64(uint64_t *p, uint64_t v) {
    (void)__atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
CCHAN_DEVICE_INLINE void cchan_fence_acq_rel_sys(void) { __atomic_thread_fence(__ATOMIC_ACQ_REL); }
CCHAN_DEVICE_INLINE void cchan_fence_acq_rel_dev(void) { __atomic_thread_fence(__ATOMIC_ACQ_REL); }
CCHAN_DEVICE_INLINE void cchan_fence_sc_sys(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* The host backend moves LL packets as 8-byte atomic words: an LL8 packet is one word; each half of
 * an LL16 packet is one word carrying its own flag, which is exactly the guarantee LL16 is built on. */
CCHAN_DEVICE_INLINE cchan_vec8_t cchan_load_volatile_v8(const cchan_vec8_t *p) {
    uint64_t raw = __atomic_load_n((const uint64_t *)(const void *)p, __ATOMIC_RELAXED);
    cchan_vec8_t v;
    v.w[0] = (uint32_t)raw;
    v.w[1] = (uint32_t)(raw >> 32);
    return v;
}
CCHAN_DEVICE_INLINE void cchan_store_volatile_v8(cchan_vec8_t *p, cchan_vec8_t v) {
    uint64_t raw = (uint64_t)v.w[0] | ((uint64_t)v.w[1] << 32);
    __atomic_store_n((uint64_t *)(void *)p, raw, __ATOMIC_RELAXED);
}
CCHAN_DEVICE_INLINE cchan_vec16_t cchan_load_volatile_v16(const cchan_vec16_t *p) {
    const uint64_t *q = (const uint64_t *)(const void *)p;
    uint64_t lo = __atomic_load_n(&q[0], __ATOMIC_RELAXED);
    uint64_t hi = __atomic_load_n(&q[1], __ATOMIC_RELAXED);
    cchan_vec16_t v;
    v.w[0] = (uint32_t)lo;
    v.w[1] = (uint32_t)(lo >> 32);
    v.w[2] = (uint32_t)hi;
    v.w[3] = (uint32_t)(hi >> 32);
    return v;
}
CCHAN_DEVICE_INLINE void cchan_store_volatile_v16(cchan_vec16_t *p, cchan_vec16_t v) {
    uint64_t *q = (uint64_t *)(void *)p;
    __atomic_store_n(&q[0], (uint64_t)v.w[0] | ((uint64_t)v.w[1] << 32), __ATOMIC_RELAXED);
    __atomic_store_n(&q[1], (uint64_t)v.w[2] | ((uint64_t)v.w[3] << 32), __ATOMIC_RELAXED);
}
CCHAN_DEVICE_INLINE uint64_t cchan_clock_ns(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* CPU threads may outnumber cores (8 ranks on 2 cores in CI): yield after a short spin so that a
 * waiter never starves the thread it waits for. */
CCHAN_DEVICE_INLINE void cchan_spin_pause(uint32_t iter) {
    if (iter >= 64) {
        sched_yield();
    } else {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}
CCHAN_DEVICE_INLINE void cchan_trap(void) {}
/* A host-backend "block" is one CPU thread: nothing to synchronize. */
CCHAN_DEVICE_INLINE void cchan_block_sync(void) {}
#endif

CCHAN_EXTERN_C_END

#endif /* CCHAN_ARCH_ATOMIC_H */
