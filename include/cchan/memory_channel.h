/* cchan memory channel: the GPU's own loads and stores to a peer's memory (NVLink, PCIe P2P, or
 * shared memory on the host backend).
 *
 * A channel connects this rank to one peer. It holds three buffers, all registered with cchan:
 *   remote : the peer's buffer, mapped here; put() and put_packets() write into it, get() reads it;
 *   local  : this rank's source/destination buffer for put()/get();
 *   recv   : this rank's buffer that the peer's put_packets() write into; read_packets() reads it.
 * Offsets are bytes from each buffer's start; sizes are bytes. Bounds are the caller's job on the
 * device (the host checked the buffers when building the channel; the debug test builds check more).
 *
 * Protocols:
 *   HB: put() (cooperative), a barrier of the putting threads, then one thread signal(); the peer's
 *       wait() returns once all the data is visible.
 *   LL: put_packets()/read_packets(): data and flags travel together, no signal needed.
 *
 * Threads: put/get/put_packets/read_packets/reduce_put are cooperative over (tid, nthreads);
 * signal/relaxed_signal/wait/poll are called by one thread. flush() is a no-op (stores complete in
 * order with the signal's release).
 */
#ifndef CCHAN_MEMORY_CHANNEL_H
#define CCHAN_MEMORY_CHANNEL_H

#include "cchan/copy.h"
#include "cchan/numeric.h"
#include "cchan/packet.h"
#include "cchan/semaphore.h"

CCHAN_EXTERN_C_BEGIN

typedef struct cchan_memory_channel {
    uint8_t *remote; /* peer's buffer, mapped into this rank */
    uint8_t *local;  /* this rank's buffer */
    uint8_t *recv;   /* this rank's packet buffer that the peer writes (may equal local) */
    uint64_t remote_bytes;
    uint64_t local_bytes;
    uint64_t recv_bytes;
    cchan_semaphore_t sem;
} cchan_memory_channel_t;

/* local[local_off .. +bytes) -> remote[remote_off ..). Cooperative. */
CCHAN_DEVICE_INLINE void cchan_memory_channel_put(const cchan_memory_channel_t *ch,
                                                  uint64_t remote_off, uint64_t local_off,
                                                  uint64_t bytes, uint32_t tid, uint32_t nthreads) {
    cchan_copy(ch->remote + remote_off, ch->local + local_off, bytes, tid, nthreads);
}

/* remote[remote_off .. +bytes) -> local[local_off ..). Cooperative. */
CCHAN_DEVICE_INLINE void cchan_memory_channel_get(const cchan_memory_channel_t *ch,
                                                  uint64_t remote_off, uint64_t local_off,
                                                  uint64_t bytes, uint32_t tid, uint32_t nthreads) {
    cchan_copy(ch->local + local_off, ch->remote + remote_off, bytes, tid, nthreads);
}

#define CCHAN_MEMORY_CHANNEL_RW(T, suffix)                                                         \
    CCHAN_DEVICE_INLINE T cchan_memory_channel_read_##suffix(const cchan_memory_channel_t *ch,   \
                                                             uint64_t remote_off) {              \
        return *(const volatile T *)(const void *)(ch->remote + remote_off);                     \
    }                                                                                            \
    CCHAN_DEVICE_INLINE void cchan_memory_channel_write_##suffix(                                \
        const cchan_memory_channel_t *ch, uint64_t remote_off, T v) {                            \
        *(volatile T *)(void *)(ch->remote + remote_off) = v;                                    \
    }
CCHAN_MEMORY_CHANNEL_RW(uint32_t, u32)
CCHAN_MEMORY_CHANNEL_RW(uint64_t, u64)
CCHAN_MEMORY_CHANNEL_RW(int32_t, i32)
CCHAN_MEMORY_CHANNEL_RW(float, f32)
CCHAN_MEMORY_CHANNEL_RW(double, f64)
#undef CCHAN_MEMORY_CHANNEL_RW

CCHAN_DEVICE_INLINE void cchan_memory_channel_signal(const cchan_memory_channel_t *ch) {
    cchan_semaphore_signal(&ch->sem);
}
CCHAN_DEVICE_INLINE void cchan_memory_channel_relaxed_signal(const cchan_memory_channel_t *ch) {
    cchan_semaphore_relaxed_signal(&ch->sem);
}
CCHAN_DEVICE_INLINE int cchan_memory_channel_wait(const cchan_memory_channel_t *ch) {
    return cchan_semaphore_wait(&ch->sem);
}
/* Register-resident expected count: see cchan_semaphore_wait_value(). */
CCHAN_DEVICE_INLINE int cchan_memory_channel_wait_value(const cchan_memory_channel_t *ch,
                                                        uint64_t target) {
    return cchan_semaphore_wait_value(&ch->sem, target);
}
CCHAN_DEVICE_INLINE int cchan_memory_channel_poll(const cchan_memory_channel_t *ch) {
    return cchan_semaphore_poll(&ch->sem);
}
/* Stores to peer memory need no flush: a later signal's release orders them. */
CCHAN_DEVICE_INLINE void cchan_memory_channel_flush(const cchan_memory_channel_t *ch) { (void)ch; }

/* LL8: payload local[local_off ..+bytes) -> packets at remote[remote_off ..). remote_off 8-aligned;
 * the packet area is cchan_ll8_buffer_bytes(bytes) long. */
CCHAN_DEVICE_INLINE void cchan_memory_channel_put_packets_ll8(const cchan_memory_channel_t *ch,
                                                              uint64_t remote_off,
                                                              uint64_t local_off, uint64_t bytes,
                                                              uint32_t flag, uint32_t tid,
                                                              uint32_t nthreads) {
    cchan_ll8_put((cchan_vec8_t *)(void *)(ch->remote + remote_off), ch->local + local_off, bytes,
                  flag, tid, nthreads);
}
/* LL8: waits for packets with `flag` at recv[recv_off ..) and writes the payload to
 * local[local_off ..+bytes). 0, or CCHAN_ERR_DEVICE_TIMEOUT (host backend). */
CCHAN_DEVICE_INLINE int cchan_memory_channel_read_packets_ll8(const cchan_memory_channel_t *ch,
                                                              uint64_t recv_off,
                                                              uint64_t local_off, uint64_t bytes,
                                                              uint32_t flag, uint32_t tid,
                                                              uint32_t nthreads) {
    return cchan_ll8_read((const cchan_vec8_t *)(const void *)(ch->recv + recv_off),
                          ch->local + local_off, bytes, flag, tid, nthreads, &ch->sem.ctl);
}
/* LL16 forms: remote_off/recv_off 16-aligned; area cchan_ll16_buffer_bytes(bytes). */
CCHAN_DEVICE_INLINE void cchan_memory_channel_put_packets_ll16(const cchan_memory_channel_t *ch,
                                                               uint64_t remote_off,
                                                               uint64_t local_off, uint64_t bytes,
                                                               uint32_t flag, uint32_t tid,
                                                               uint32_t nthreads) {
    cchan_ll16_put((cchan_vec16_t *)(void *)(ch->remote + remote_off), ch->local + local_off,
                   bytes, flag, tid, nthreads);
}
CCHAN_DEVICE_INLINE int cchan_memory_channel_read_packets_ll16(const cchan_memory_channel_t *ch,
                                                               uint64_t recv_off,
                                                               uint64_t local_off, uint64_t bytes,
                                                               uint32_t flag, uint32_t tid,
                                                               uint32_t nthreads) {
    return cchan_ll16_read((const cchan_vec16_t *)(const void *)(ch->recv + recv_off),
                           ch->local + local_off, bytes, flag, tid, nthreads, &ch->sem.ctl);
}

/* One packet from registers to remote[remote_off] (LL8: 4 bytes of data; LL16: 8 bytes), and the
 * matching read of recv[recv_off]. One thread each. */
CCHAN_DEVICE_INLINE void cchan_memory_channel_write_packet_ll8(const cchan_memory_channel_t *ch,
                                                               uint64_t remote_off, uint32_t data,
                                                               uint32_t flag) {
    cchan_ll8_write((cchan_vec8_t *)(void *)(ch->remote + remote_off), data, flag);
}
CCHAN_DEVICE_INLINE int cchan_memory_channel_read_packet_ll8(const cchan_memory_channel_t *ch,
                                                             uint64_t recv_off, uint32_t flag,
                                                             uint32_t *data) {
    return cchan_ll8_read_one((const cchan_vec8_t *)(const void *)(ch->recv + recv_off), flag,
                              &ch->sem.ctl, data);
}
CCHAN_DEVICE_INLINE void cchan_memory_channel_write_packet_ll16(const cchan_memory_channel_t *ch,
                                                                uint64_t remote_off, uint64_t data,
                                                                uint32_t flag) {
    cchan_ll16_write((cchan_vec16_t *)(void *)(ch->remote + remote_off), data, flag);
}
CCHAN_DEVICE_INLINE int cchan_memory_channel_read_packet_ll16(const cchan_memory_channel_t *ch,
                                                              uint64_t recv_off, uint32_t flag,
                                                              uint64_t *data) {
    return cchan_ll16_read_one((const cchan_vec16_t *)(const void *)(ch->recv + recv_off), flag,
                               &ch->sem.ctl, data);
}

/* reduce_put: remote[remote_off + i] = sum_k srcs[k][i] for i < count elements, summed in f32 in
 * registers and written once to the peer. srcs are any pointers this thread can read (local buffers,
 * or peer buffers mapped here: reading several peers at once). 1 <= nsrc <= CCHAN_REDUCE_MAX_SRCS. */
#define CCHAN_REDUCE_MAX_SRCS 8

CCHAN_DEVICE_INLINE float cchan_elem_f32_load(const float *p) { return *p; }
CCHAN_DEVICE_INLINE void cchan_elem_f32_store(float *p, float v) { *p = v; }
CCHAN_DEVICE_INLINE float cchan_elem_f16_load(const cchan_f16_t *p) { return cchan_f16_to_f32(*p); }
CCHAN_DEVICE_INLINE void cchan_elem_f16_store(cchan_f16_t *p, float v) { *p = cchan_f32_to_f16(v); }
CCHAN_DEVICE_INLINE float cchan_elem_bf16_load(const cchan_bf16_t *p) { return cchan_bf16_to_f32(*p); }
CCHAN_DEVICE_INLINE void cchan_elem_bf16_store(cchan_bf16_t *p, float v) { *p = cchan_f32_to_bf16(v); }

#define CCHAN_MEMORY_CHANNEL_REDUCE_PUT(T, suffix)                                                 \
    CCHAN_DEVICE_INLINE void cchan_memory_channel_reduce_put_##suffix(                           \
        const cchan_memory_channel_t *ch, uint64_t remote_off, const T *const *srcs, int nsrc,   \
        uint64_t count, uint32_t tid, uint32_t nthreads) {                                       \
        T *dst = (T *)(void *)(ch->remote + remote_off);                                         \
        for (uint64_t i = tid; i < count; i += nthreads) {                                       \
            float acc = cchan_elem_##suffix##_load(&srcs[0][i]);                                 \
            for (int k = 1; k < nsrc; k++) acc += cchan_elem_##suffix##_load(&srcs[k][i]);       \
            cchan_elem_##suffix##_store(&dst[i], acc);                                           \
        }                                                                                        \
    }
CCHAN_MEMORY_CHANNEL_REDUCE_PUT(float, f32)
CCHAN_MEMORY_CHANNEL_REDUCE_PUT(cchan_f16_t, f16)
CCHAN_MEMORY_CHANNEL_REDUCE_PUT(cchan_bf16_t, bf16)
#undef CCHAN_MEMORY_CHANNEL_REDUCE_PUT

CCHAN_EXTERN_C_END

#endif /* CCHAN_MEMORY_CHANNEL_H */
