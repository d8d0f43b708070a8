/* cchan FIFO: a power-of-two ring of 16-byte triggers in host-mapped memory, from GPU threads
 * (producers, any number) to one proxy thread (consumer). Wire format: cchan/impl/fifo_wire.h.
 *
 * Producer (device): claims an index with an atomic add on `head` (device memory), waits while the
 * ring is full (it rereads the proxy's `tail` only when its cached copy says full, with the
 * deadline), then publishes the trigger after a release (fence.sys, then one 16-byte store on a
 * GPU; word1 then word0-with-release on the host backend). A trigger is pushed exactly once, never
 * overwritten before the consumer has taken it.
 * Consumer (proxy): cchan_fifo_peek() tests the slot at its tail by lap parity (acquire); having
 * taken the trigger, the proxy advances its private tail; the tail becomes visible to producers
 * when the proxy publishes it (cchan_fifo_publish_tail, release), which it may batch.
 * Triggers from one producer thread are consumed in the order it pushed them.
 * A push that times out has claimed an index it never fills: the consumer stops there, so a FIFO
 * timeout is fatal for the FIFO (on a GPU the kernel traps anyway).
 */
#ifndef CCHAN_FIFO_H
#define CCHAN_FIFO_H

#include "cchan/impl/fifo_wire.h"
#include "cchan/wait.h"

CCHAN_EXTERN_C_BEGIN

typedef struct cchan_fifo {
    cchan_trigger_t *slots; /* host-mapped ring of `size` triggers */
    uint64_t *head;         /* device memory: next index to claim */
    uint64_t *tail_cache;   /* device memory: last tail read from `tail` */
    const uint64_t *tail;   /* host-mapped: triggers consumed so far, published by the proxy */
    uint32_t size;          /* power of two, >= 2 */
    uint32_t reserved;
    cchan_wait_ctl_t ctl;   /* deadline for a full ring */
} cchan_fifo_t;

CCHAN_HOST_DEVICE_INLINE uint64_t cchan_fifo_parity(uint64_t index, uint32_t size) {
    return ((index / size) & 1u) ? 0ull : CCHAN_TRIGGER_PARITY_BIT;
}

/* Pushes one trigger (parity bit clear in t.word0). Returns the index it took (>= 0 as int64), or
 * CCHAN_ERR_DEVICE_TIMEOUT on the host backend when the ring stayed full past the deadline. */
CCHAN_DEVICE_INLINE int64_t cchan_fifo_push(const cchan_fifo_t *f, cchan_trigger_t t) {
    uint64_t idx = cchan_fetch_add_relaxed_dev_u64(f->head, 1);
    /* Acquire/release on tail_cache carry the consumer's release of `tail` on to producers that
     * never read `tail` themselves: the consumer's reads of a slot happen before its reuse. On a GPU
     * the load is relaxed and the fence before the slot's store makes it an acquire (a relaxed
     * load, then fence.acq_rel), so the load need not finish before the next instruction issues. */
#if defined(CCHAN_BACKEND_CUDA)
    uint64_t cached = cchan_load_relaxed_dev_u64(f->tail_cache);
#else
    uint64_t cached = cchan_load_acquire_dev_u64(f->tail_cache);
#endif
    if (CCHAN_UNLIKELY(idx >= cached + f->size)) {
        cchan_deadline_t d;
        cchan_deadline_init(&d);
        uint64_t tail;
        while (idx >= (tail = cchan_load_acquire_sys_u64(f->tail)) + f->size) {
            if (CCHAN_UNLIKELY(cchan_deadline_spin(&d, &f->ctl)))
                return cchan_wait_expired(&d, &f->ctl, CCHAN_WAIT_FIFO_FULL, idx, tail);
        }
        cchan_store_release_dev_u64(f->tail_cache, tail);
    }
    cchan_trigger_t *slot = &f->slots[idx & (f->size - 1)];
    const uint64_t parity = cchan_fifo_parity(idx, f->size);
#if defined(CCHAN_BACKEND_CUDA)
    /* One fence and one 16-byte write: a release store of word0 after a store of word1 would make
     * the fence wait for word1's write to host memory first (about a microsecond over PCIe). */
    cchan_fence_acq_rel_sys();
    cchan_store_relaxed_sys_v2_u64(&slot->word0, t.word0 | parity, t.word1 | parity);
#else
    cchan_store_relaxed_sys_u64(&slot->word1, t.word1 | parity);
    cchan_store_release_sys_u64(&slot->word0, t.word0 | parity);
#endif
    return (int64_t)idx;
}

/* ---- consumer side (proxy thread; plain C) ---- */

/* If the trigger at index `tail` has arrived, copies it (parity bit cleared) to *out and returns 1;
 * otherwise returns 0. */
CCHAN_DEVICE_INLINE int cchan_fifo_peek(const cchan_trigger_t *slots, uint32_t size,
                                             uint64_t tail, cchan_trigger_t *out) {
    const cchan_trigger_t *slot = &slots[tail & (size - 1)];
    uint64_t w0 = cchan_load_acquire_sys_u64(&slot->word0);
    const uint64_t parity = cchan_fifo_parity(tail, size);
    if ((w0 & CCHAN_TRIGGER_PARITY_BIT) != parity) return 0;
    uint64_t w1 = cchan_load_relaxed_sys_u64(&slot->word1);
    if ((w1 & CCHAN_TRIGGER_PARITY_BIT) != parity) return 0; /* the other half is still on its way */
    out->word0 = w0 & ~CCHAN_TRIGGER_PARITY_BIT;
    out->word1 = w1 & ~CCHAN_TRIGGER_PARITY_BIT;
    return 1;
}

/* Makes `tail` (count of consumed triggers) visible to producers: slots below it may be reused. */
CCHAN_DEVICE_INLINE void cchan_fifo_publish_tail(uint64_t *tail_word, uint64_t tail) {
    cchan_store_release_sys_u64(tail_word, tail);
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_FIFO_H */
