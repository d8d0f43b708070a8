/* cchan FIFO trigger: the 16-byte request a GPU thread hands to a proxy thread. Wire format shared by
 * device code (producer) and proxy code (consumer); change it only together with
 * CCHAN_FIFO_WIRE_VERSION.
 *
 *   word0
 *     [63]     lap parity: the slot holds a trigger of lap L when this bit == ((L & 1) ^ 1)
 *     [62:60]  type flags: CCHAN_TRIGGER_PUT | CCHAN_TRIGGER_SIGNAL | CCHAN_TRIGGER_FLUSH
 *     [59:48]  channel id within the proxy (0..4095)
 *     [47:40]  src offset bits 39..32
 *     [39:0]   dst offset (bytes, < 2^40 = 1 TiB)
 *   word1
 *     [63]     lap parity again
 *     [62:32]  bytes (< 2^31); larger puts are split by the producer into chunks
 *     [31:0]   src offset bits 31..0
 *
 * A lap-0 trigger has parity 1, so a zeroed ring is empty. Slots are never cleared: the consumer
 * recognises a new trigger by its parity, the producer reuses a slot only after the consumer's tail
 * has passed it. Both words carry the parity, so the consumer takes a trigger only when both halves
 * of this lap have arrived, in whatever order: the producer may then store the 16 bytes at once
 * (one PCIe write on a GPU) after a single release fence.
 */
#ifndef CCHAN_IMPL_FIFO_WIRE_H
#define CCHAN_IMPL_FIFO_WIRE_H

#include "cchan/arch/arch.h"

CCHAN_EXTERN_C_BEGIN

#define CCHAN_FIFO_WIRE_VERSION 2u

enum cchan_trigger_type {
    CCHAN_TRIGGER_PUT = 1u,
    CCHAN_TRIGGER_SIGNAL = 2u,
    CCHAN_TRIGGER_FLUSH = 4u
};

#define CCHAN_TRIGGER_MAX_CHANNELS 4096u
#define CCHAN_TRIGGER_OFFSET_BITS 40u
#define CCHAN_TRIGGER_MAX_OFFSET ((1ull << CCHAN_TRIGGER_OFFSET_BITS) - 1)
/* Largest bytes one trigger carries: 1 GiB keeps chunks 16-byte aligned and below 2^31. */
#define CCHAN_TRIGGER_MAX_CHUNK (1ull << 30)

typedef struct CCHAN_ALIGN(16) cchan_trigger {
    uint64_t word0;
    uint64_t word1;
} cchan_trigger_t;
CCHAN_STATIC_ASSERT(sizeof(cchan_trigger_t) == 16, "a trigger is 16 bytes");
CCHAN_STATIC_ASSERT(CCHAN_TRIGGER_MAX_CHUNK < (1ull << 31), "chunk must fit the 31-bit size field");

/* Decoded form, used by the proxy and by tests. */
typedef struct cchan_trigger_fields {
    uint32_t type;
    uint32_t channel;
    uint64_t dst_off;
    uint64_t src_off;
    uint64_t bytes;
} cchan_trigger_fields_t;

#define CCHAN_TRIGGER_PARITY_BIT (1ull << 63)

/* Encodes everything but the parity bit. Fields must already be in range (see the limits above). */
CCHAN_HOST_DEVICE_INLINE cchan_trigger_t cchan_trigger_encode(uint32_t type, uint32_t channel,
                                                              uint64_t dst_off, uint64_t src_off,
                                                              uint64_t bytes) {
    cchan_trigger_t t;
    t.word0 = ((uint64_t)(type & 7u) << 60) | ((uint64_t)(channel & 0xfffu) << 48) |
              (((src_off >> 32) & 0xffull) << 40) | (dst_off & CCHAN_TRIGGER_MAX_OFFSET);
    t.word1 = ((bytes & 0x7fffffffull) << 32) | (src_off & 0xffffffffull);
    return t;
}

CCHAN_HOST_DEVICE_INLINE cchan_trigger_fields_t cchan_trigger_decode(cchan_trigger_t t) {
    cchan_trigger_fields_t f;
    f.type = (uint32_t)((t.word0 >> 60) & 7u);
    f.channel = (uint32_t)((t.word0 >> 48) & 0xfffu);
    f.dst_off = t.word0 & CCHAN_TRIGGER_MAX_OFFSET;
    f.src_off = (((t.word0 >> 40) & 0xffull) << 32) | (t.word1 & 0xffffffffull);
    f.bytes = (t.word1 >> 32) & 0x7fffffffull;
    return f;
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_IMPL_FIFO_WIRE_H */
