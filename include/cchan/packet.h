/* cchan LL (low-latency) packets: data that carries its own synchronization.
 *
 * LL8:  one 8-byte packet per 4 bytes of payload:   { data, flag }
 * LL16: one 16-byte packet per 8 bytes of payload:  { data0, flag, data1, flag }
 *       Each 8-byte half carries the flag, so a reader that sees both flags sees both data words
 *       even if the packet was delivered as two 8-byte writes (DMA engines, NICs, the host backend).
 *
 * The writer stores a packet with one volatile store; the reader spins on the packet until every
 * flag in it equals the flag it expects. Flags are chosen by the caller and must differ from what the
 * buffer last held (an epoch counter that never returns to an old value, e.g. iteration + 1), so a
 * buffer can be reused without clearing. Buffers from cchan's allocator start zeroed, so the first
 * flag must not be 0: start epochs at 1.
 *
 * Payloads of any size are accepted; the last packet carries the remaining 1..3 (LL8) or 1..7 (LL16)
 * bytes in its low bytes, and readers write back only the valid bytes.
 *
 * Packet buffers must be 8-byte (LL8) or 16-byte (LL16) aligned.
 */
#ifndef CCHAN_PACKET_H
#define CCHAN_PACKET_H

#include "cchan/wait.h"

CCHAN_EXTERN_C_BEGIN

#define CCHAN_LL8_PAYLOAD 4u
#define CCHAN_LL16_PAYLOAD 8u

/* Bytes of packet buffer needed for `bytes` of payload. */
CCHAN_HOST_DEVICE_INLINE uint64_t cchan_ll8_buffer_bytes(uint64_t bytes) {
    return (bytes + CCHAN_LL8_PAYLOAD - 1) / CCHAN_LL8_PAYLOAD * 8u;
}
CCHAN_HOST_DEVICE_INLINE uint64_t cchan_ll16_buffer_bytes(uint64_t bytes) {
    return (bytes + CCHAN_LL16_PAYLOAD - 1) / CCHAN_LL16_PAYLOAD * 16u;
}

/* Reads up to 4 bytes of payload at src (n valid bytes). */
CCHAN_DEVICE_INLINE uint32_t cchan_ll_load_word(const uint8_t *src, uint32_t n) {
    if (CCHAN_LIKELY(n >= 4 && ((uintptr_t)src & 3) == 0)) return *(const uint32_t *)(const void *)src;
    uint32_t w = 0;
    for (uint32_t b = 0; b < n && b < 4; b++) w |= (uint32_t)src[b] << (8 * b);
    return w;
}
CCHAN_DEVICE_INLINE void cchan_ll_store_word(uint8_t *dst, uint32_t w, uint32_t n) {
    if (CCHAN_LIKELY(n >= 4 && ((uintptr_t)dst & 3) == 0)) {
        *(uint32_t *)(void *)dst = w;
        return;
    }
    for (uint32_t b = 0; b < n && b < 4; b++) dst[b] = (uint8_t)(w >> (8 * b));
}

/* ---- single packets from registers ----
 * For data that already sits in registers (a fused kernel's result, a flag with a payload): one
 * packet, no trip through memory on either side. LL8 carries 4 bytes, LL16 8 bytes. */

CCHAN_DEVICE_INLINE void cchan_ll8_write(cchan_vec8_t *pkt, uint32_t data, uint32_t flag) {
    cchan_vec8_t p;
    p.w[0] = data;
    p.w[1] = flag;
    cchan_store_volatile_v8(pkt, p);
}

/* Waits for the packet to carry `flag`; *data receives its payload. 0 or CCHAN_ERR_DEVICE_TIMEOUT. */
CCHAN_DEVICE_INLINE int cchan_ll8_read_one(const cchan_vec8_t *pkt, uint32_t flag,
                                           const cchan_wait_ctl_t *ctl, uint32_t *data) {
    cchan_vec8_t p = cchan_load_volatile_v8(pkt);
    if (CCHAN_UNLIKELY(p.w[1] != flag)) {
#if !defined(CCHAN_BACKEND_HOST)
        if (ctl->timeout_ns == 0) { /* no deadline: the bare poll, as in cchan_wait_geq_u64 */
            uint32_t it = 0;
            do {
                if (CCHAN_UNLIKELY((++it % CCHAN_WAIT_CLOCK_STRIDE) == 0) &&
                    cchan_wait_aborted(ctl) != 0) {
                    cchan_deadline_t dl;
                    cchan_deadline_init(&dl);
                    return cchan_wait_expired(&dl, ctl, CCHAN_WAIT_PACKET, flag, p.w[1]);
                }
                p = cchan_load_volatile_v8(pkt);
            } while (p.w[1] != flag);
            *data = p.w[0];
            return CCHAN_OK;
        }
#endif
        cchan_deadline_t dl;
        cchan_deadline_init(&dl);
        do {
            if (CCHAN_UNLIKELY(cchan_deadline_spin(&dl, ctl)))
                return cchan_wait_expired(&dl, ctl, CCHAN_WAIT_PACKET, flag, p.w[1]);
            p = cchan_load_volatile_v8(pkt);
        } while (p.w[1] != flag);
    }
    *data = p.w[0];
    return cchan_wait_done(ctl, CCHAN_WAIT_PACKET, flag, p.w[1]);
}

CCHAN_DEVICE_INLINE void cchan_ll16_write(cchan_vec16_t *pkt, uint64_t data, uint32_t flag) {
    cchan_vec16_t p;
    p.w[0] = (uint32_t)data;
    p.w[1] = flag;
    p.w[2] = (uint32_t)(data >> 32);
    p.w[3] = flag;
    cchan_store_volatile_v16(pkt, p);
}

CCHAN_DEVICE_INLINE int cchan_ll16_read_one(const cchan_vec16_t *pkt, uint32_t flag,
                                            const cchan_wait_ctl_t *ctl, uint64_t *data) {
    cchan_vec16_t p = cchan_load_volatile_v16(pkt);
    if (CCHAN_UNLIKELY(p.w[1] != flag || p.w[3] != flag)) {
#if !defined(CCHAN_BACKEND_HOST)
        if (ctl->timeout_ns == 0) {
            uint32_t it = 0;
            do {
                if (CCHAN_UNLIKELY((++it % CCHAN_WAIT_CLOCK_STRIDE) == 0) &&
                    cchan_wait_aborted(ctl) != 0) {
                    cchan_deadline_t dl;
                    cchan_deadline_init(&dl);
                    return cchan_wait_expired(&dl, ctl, CCHAN_WAIT_PACKET, flag,
                                              p.w[1] != flag ? p.w[1] : p.w[3]);
                }
                p = cchan_load_volatile_v16(pkt);
            } while (p.w[1] != flag || p.w[3] != flag);
            *data = (uint64_t)p.w[0] | ((uint64_t)p.w[2] << 32);
            return CCHAN_OK;
        }
#endif
        cchan_deadline_t dl;
        cchan_deadline_init(&dl);
        do {
            if (CCHAN_UNLIKELY(cchan_deadline_spin(&dl, ctl)))
                return cchan_wait_expired(&dl, ctl, CCHAN_WAIT_PACKET, flag,
                                          p.w[1] != flag ? p.w[1] : p.w[3]);
            p = cchan_load_volatile_v16(pkt);
        } while (p.w[1] != flag || p.w[3] != flag);
    }
    *data = (uint64_t)p.w[0] | ((uint64_t)p.w[2] << 32);
    return cchan_wait_done(ctl, CCHAN_WAIT_PACKET, flag, p.w[1]);
}

/* ---- LL8 ---- */

/* Writes `bytes` of payload from src as LL8 packets to pkts (often a peer's buffer). */
CCHAN_DEVICE_INLINE void cchan_ll8_put(cchan_vec8_t *pkts, const void *src, uint64_t bytes,
                                       uint32_t flag, uint32_t tid, uint32_t nthreads) {
    const uint8_t *s = (const uint8_t *)src;
    uint64_t n = (bytes + 3) / 4;
    for (uint64_t i = tid; i < n; i += nthreads) {
        uint64_t left = bytes - i * 4;
        cchan_ll8_write(&pkts[i], cchan_ll_load_word(s + i * 4, left >= 4 ? 4u : (uint32_t)left),
                        flag);
    }
}

/* Waits for LL8 packets carrying `flag` in pkts (local) and writes their payload to dst.
 * 0, or CCHAN_ERR_DEVICE_TIMEOUT on the host backend (a GPU traps). */
CCHAN_DEVICE_INLINE int cchan_ll8_read(const cchan_vec8_t *pkts, void *dst, uint64_t bytes,
                                       uint32_t flag, uint32_t tid, uint32_t nthreads,
                                       const cchan_wait_ctl_t *ctl) {
    uint8_t *d = (uint8_t *)dst;
    uint64_t n = (bytes + 3) / 4;
    for (uint64_t i = tid; i < n; i += nthreads) {
        uint32_t w = 0; /* written when r == 0; the initializer quiets gcc's maybe-uninitialized */
        int r = cchan_ll8_read_one(&pkts[i], flag, ctl, &w);
        if (CCHAN_UNLIKELY(r)) return r;
        uint64_t left = bytes - i * 4;
        cchan_ll_store_word(d + i * 4, w, left >= 4 ? 4u : (uint32_t)left);
    }
    return CCHAN_OK;
}

/* ---- LL16 ---- */

CCHAN_DEVICE_INLINE void cchan_ll16_put(cchan_vec16_t *pkts, const void *src, uint64_t bytes,
                                        uint32_t flag, uint32_t tid, uint32_t nthreads) {
    const uint8_t *s = (const uint8_t *)src;
    uint64_t n = (bytes + 7) / 8;
    for (uint64_t i = tid; i < n; i += nthreads) {
        uint64_t left = bytes - i * 8;
        uint32_t n0 = left >= 4 ? 4u : (uint32_t)left;
        uint32_t n1 = left >= 8 ? 4u : (left > 4 ? (uint32_t)(left - 4) : 0u);
        uint64_t lo = cchan_ll_load_word(s + i * 8, n0);
        uint64_t hi = n1 ? cchan_ll_load_word(s + i * 8 + 4, n1) : 0u;
        cchan_ll16_write(&pkts[i], lo | (hi << 32), flag);
    }
}

CCHAN_DEVICE_INLINE int cchan_ll16_read(const cchan_vec16_t *pkts, void *dst, uint64_t bytes,
                                        uint32_t flag, uint32_t tid, uint32_t nthreads,
                                        const cchan_wait_ctl_t *ctl) {
    uint8_t *d = (uint8_t *)dst;
    uint64_t n = (bytes + 7) / 8;
    for (uint64_t i = tid; i < n; i += nthreads) {
        uint64_t w;
        int r = cchan_ll16_read_one(&pkts[i], flag, ctl, &w);
        if (CCHAN_UNLIKELY(r)) return r;
        uint64_t left = bytes - i * 8;
        uint32_t n0 = left >= 4 ? 4u : (uint32_t)left;
        uint32_t n1 = left >= 8 ? 4u : (left > 4 ? (uint32_t)(left - 4) : 0u);
        cchan_ll_store_word(d + i * 8, (uint32_t)w, n0);
        if (n1) cchan_ll_store_word(d + i * 8 + 4, (uint32_t)(w >> 32), n1);
    }
    return CCHAN_OK;
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_PACKET_H */
