/* cchan port channel: data moved by a DMA engine or RDMA NIC that a proxy thread drives.
 *
 * The device side pushes 16-byte triggers into the proxy's FIFO; the proxy performs them with the
 * channel's transport (dma: peer copies on a stream of the connection; host: memcpy). Offsets are
 * bytes into the channel's source buffer (this rank) and destination buffer (the peer), both
 * registered with cchan.
 *
 *   put(dst_off, src_off, bytes)  asynchronous one-sided write; returns before the data moves. The
 *                                 source must not be overwritten until a flush() returns. Any size:
 *                                 puts larger than 1 GiB are split into several triggers.
 *                                 The range must lie inside the channel's source and destination
 *                                 buffers (CCHAN_ERR_RANGE at the call otherwise, nothing sent).
 *                                 On the dma transport, puts of at most direct_max bytes (default
 *                                 256, CCHAN_PORT_DIRECT_MAX) are stored by the calling thread into
 *                                 the peer's buffer mapped into this GPU and complete on return.
 *                                 Puts of one channel are not ordered with one another:
 *                                 overlapping destinations need a flush in between.
 *   signal()                      raises the peer's semaphore once every earlier put of this
 *                                 channel has landed; the peer's wait() then sees their data.
 *   wait() / poll()               on the receiving side: consume one signal (acquire). No trigger.
 *   flush()                       returns when every earlier request of this channel is complete
 *                                 from the sender's view (sources reusable, signals delivered).
 *                                 Fails (like a timeout: recorded in the communicator's diag
 *                                 record, a trap on a GPU) with the cause, e.g. CCHAN_ERR_RANGE,
 *                                 when the proxy dropped a request of this channel since the
 *                                 previous flush, or when the channel's transport failed (then
 *                                 wait() fails with the cause too, deadline or not);
 *                                 cchan_proxy_get_error() has the proxy's message.
 *   put_signal, put_signal_flush  fused forms, one trigger each.
 *
 * Threads: for one channel, one thread at a time calls put/signal/flush (they keep order); another
 * (or the same) thread calls wait/poll. Many channels, from many threads, may share one proxy FIFO.
 * Every function returns 0 or a negative cchan status; on a GPU a timeout traps (see wait.h).
 */
#ifndef CCHAN_PORT_CHANNEL_H
#define CCHAN_PORT_CHANNEL_H

#include "cchan/copy.h"
#include "cchan/fifo.h"

CCHAN_EXTERN_C_BEGIN

typedef struct cchan_port_channel {
    cchan_fifo_t fifo;          /* the proxy's FIFO (shared with the proxy's other channels) */
    uint32_t id;                /* channel id within the proxy */
    uint32_t direct_max;        /* puts of at most this many bytes skip the proxy (0: never) */
    uint64_t *inbound;          /* receive side: counter the peer's proxy raises (host-mapped) */
    uint64_t *expected;         /* device memory: value the last wait reached */
    uint64_t *flush_issued;     /* device memory: flushes requested on this channel */
    const uint64_t *flush_done; /* host-mapped: flushes the proxy has completed */
    cchan_wait_ctl_t ctl;       /* deadline for wait and flush (peer, id) */
    uint8_t *direct_dst;        /* the peer's buffer mapped here, for direct puts (or NULL) */
    const uint8_t *direct_src;  /* this rank's source buffer */
    uint64_t dst_bytes;
    uint64_t src_bytes;
    const uint64_t *dropped; /* host-mapped: requests the proxy dropped (CCHAN_PORT_DROPPED_*) */
    uint64_t *dropped_seen;  /* device memory: the dropped count the last flush reported */
} cchan_port_channel_t;

/* The dropped word: a count of dropped requests in the low bits, the latest one's cause (a
 * negated cchan status) above, and a bit set once the channel's transport failed a request. */
#define CCHAN_PORT_DROPPED_CAUSE_SHIFT 48
#define CCHAN_PORT_DROPPED_FAILED (1ull << 47)
#define CCHAN_PORT_DROPPED_COUNT_MASK (CCHAN_PORT_DROPPED_FAILED - 1)
/* Set in flush_done, for good, once the proxy dropped a request of the channel: only then does a
 * completed flush read the dropped word, a second host-memory round trip (about a microsecond on a
 * GPU) that a flush with nothing dropped does not pay. The count is the bits below it. */
#define CCHAN_PORT_FLUSH_DROPPED (1ull << 63)
#define CCHAN_PORT_FLUSH_COUNT_MASK (CCHAN_PORT_FLUSH_DROPPED - 1)

/* After flush `n` completed: fails with the cause when the proxy dropped requests of this channel
 * since the last check (their data did not move, their signals were not sent). */
CCHAN_DEVICE_INLINE int cchan_port_channel_check_dropped(const cchan_port_channel_t *ch,
                                                         uint64_t n) {
    if (ch->dropped == NULL) return CCHAN_OK;
    uint64_t d = cchan_load_acquire_sys_u64(ch->dropped);
    uint64_t count = d & CCHAN_PORT_DROPPED_COUNT_MASK, seen = *ch->dropped_seen;
    if (CCHAN_LIKELY(count == seen)) return CCHAN_OK;
    *ch->dropped_seen = count;
    int cause = (int)(d >> CCHAN_PORT_DROPPED_CAUSE_SHIFT);
    return cchan_device_fail(&ch->ctl, CCHAN_FAIL_DROPPED, n,
                             (count - seen) & CCHAN_PORT_DROPPED_COUNT_MASK, 0,
                             cause ? -cause : CCHAN_ERR_INTERNAL);
}

CCHAN_DEVICE_INLINE int cchan_port_channel_push(const cchan_port_channel_t *ch, uint32_t type,
                                                uint64_t dst_off, uint64_t src_off,
                                                uint64_t bytes) {
    int64_t r =
        cchan_fifo_push(&ch->fifo, cchan_trigger_encode(type, ch->id, dst_off, src_off, bytes));
    return r < 0 ? (int)r : CCHAN_OK;
}

/* A put small enough that starting a DMA engine costs more than moving the bytes: the calling
 * thread stores them into the peer's mapping itself (NVLink or shared memory). The release store
 * that publishes the next trigger orders these stores before a later signal. */
CCHAN_DEVICE_INLINE int cchan_port_channel_direct_ok(const cchan_port_channel_t *ch,
                                                     uint64_t dst_off, uint64_t src_off,
                                                     uint64_t bytes) {
    return bytes != 0 && bytes <= ch->direct_max && ch->direct_dst != NULL &&
           dst_off <= ch->dst_bytes && bytes <= ch->dst_bytes - dst_off &&
           src_off <= ch->src_bytes && bytes <= ch->src_bytes - src_off;
}

/* Splits a put into chunks; `last_type` (extra flags) rides on the final chunk. */
CCHAN_DEVICE_INLINE int cchan_port_channel_put_typed(const cchan_port_channel_t *ch,
                                                     uint64_t dst_off, uint64_t src_off,
                                                     uint64_t bytes, uint32_t last_type) {
    if (cchan_port_channel_direct_ok(ch, dst_off, src_off, bytes)) {
        cchan_copy(ch->direct_dst + dst_off, ch->direct_src + src_off, bytes, 0, 1);
        return last_type ? cchan_port_channel_push(ch, last_type, 0, 0, 0) : CCHAN_OK;
    }
    if (CCHAN_UNLIKELY(dst_off + bytes > CCHAN_TRIGGER_MAX_OFFSET + 1 ||
                       src_off + bytes > CCHAN_TRIGGER_MAX_OFFSET + 1 ||
                       dst_off + bytes < dst_off || src_off + bytes < src_off)) {
        return cchan_device_fail(&ch->ctl, CCHAN_FAIL_RANGE, CCHAN_TRIGGER_MAX_OFFSET + 1,
                                 (dst_off > src_off ? dst_off : src_off) + bytes, 0,
                                 CCHAN_ERR_RANGE);
    }
    /* The proxy would drop it: say so here, where the caller can still act. */
    if (CCHAN_UNLIKELY(dst_off + bytes > ch->dst_bytes))
        return cchan_device_fail(&ch->ctl, CCHAN_FAIL_RANGE, ch->dst_bytes, dst_off + bytes, 0,
                                 CCHAN_ERR_RANGE);
    if (CCHAN_UNLIKELY(src_off + bytes > ch->src_bytes))
        return cchan_device_fail(&ch->ctl, CCHAN_FAIL_RANGE, ch->src_bytes, src_off + bytes, 0,
                                 CCHAN_ERR_RANGE);
    while (bytes > CCHAN_TRIGGER_MAX_CHUNK) {
        int r = cchan_port_channel_push(ch, CCHAN_TRIGGER_PUT, dst_off, src_off,
                                        CCHAN_TRIGGER_MAX_CHUNK);
        if (r) return r;
        dst_off += CCHAN_TRIGGER_MAX_CHUNK;
        src_off += CCHAN_TRIGGER_MAX_CHUNK;
        bytes -= CCHAN_TRIGGER_MAX_CHUNK;
    }
    uint32_t type = last_type | (bytes ? (uint32_t)CCHAN_TRIGGER_PUT : 0u);
    if (type == 0) return CCHAN_OK; /* zero-byte plain put: nothing to do */
    return cchan_port_channel_push(ch, type, dst_off, src_off, bytes);
}

CCHAN_DEVICE_INLINE int cchan_port_channel_put(const cchan_port_channel_t *ch, uint64_t dst_off,
                                               uint64_t src_off, uint64_t bytes) {
    return cchan_port_channel_put_typed(ch, dst_off, src_off, bytes, 0u);
}

CCHAN_DEVICE_INLINE int cchan_port_channel_signal(const cchan_port_channel_t *ch) {
    return cchan_port_channel_push(ch, CCHAN_TRIGGER_SIGNAL, 0, 0, 0);
}

CCHAN_DEVICE_INLINE int cchan_port_channel_put_signal(const cchan_port_channel_t *ch,
                                                      uint64_t dst_off, uint64_t src_off,
                                                      uint64_t bytes) {
    return cchan_port_channel_put_typed(ch, dst_off, src_off, bytes, CCHAN_TRIGGER_SIGNAL);
}

/* Nonzero once the proxy marked the channel's transport failed: the status of the latest dropped
 * request (a tcp connection that gave up, a CUDA stream error). */
CCHAN_DEVICE_INLINE int cchan_port_channel_transport_failed(const cchan_port_channel_t *ch) {
    if (ch->dropped == NULL) return CCHAN_OK;
    uint64_t d = cchan_load_acquire_sys_u64(ch->dropped);
    if (CCHAN_LIKELY(!(d & CCHAN_PORT_DROPPED_FAILED))) return CCHAN_OK;
    int cause = (int)(d >> CCHAN_PORT_DROPPED_CAUSE_SHIFT);
    return cause ? -cause : CCHAN_ERR_INTERNAL;
}

/* A wait of the channel found its transport failed (slow path): CCHAN_OK when the counter has
 * arrived all the same (the proxy stores the failure before it completes the flushes it holds),
 * else the failure, recorded. */
CCHAN_DEVICE_INLINE int cchan_port_channel_wait_failed(const cchan_port_channel_t *ch,
                                                       const uint64_t *p, uint64_t target,
                                                       uint32_t kind, int failed) {
    uint64_t v = cchan_load_acquire_sys_u64(p) & CCHAN_PORT_FLUSH_COUNT_MASK;
    if (v >= target) return CCHAN_OK;
    if (CCHAN_UNLIKELY(cchan_wait_aborted(&ch->ctl) != 0)) {
        /* An aborted communicator is the cause to report, as every other wait of it does. */
        cchan_deadline_t d;
        cchan_deadline_init(&d);
        return cchan_wait_expired(&d, &ch->ctl, kind, target, v);
    }
    if (kind == CCHAN_WAIT_FLUSH) {
        int r = cchan_port_channel_check_dropped(ch, target);
        if (r) return r;
    }
    return cchan_device_fail(&ch->ctl, CCHAN_FAIL_DROPPED, target, v, 0, failed);
}

/* Spins until *p >= target (bit 63, CCHAN_PORT_FLUSH_DROPPED, left out), like cchan_wait_geq_u64,
 * but also ends when the channel's transport has failed, with the cause (recorded as
 * CCHAN_FAIL_DROPPED, expected = target, observed = the counter): a counter that a failed transport
 * would have raised never moves, and no deadline need be set for the wait to end. The failure word
 * is host-mapped, so it is read only on the slow path, once every CCHAN_WAIT_CLOCK_STRIDE spins.
 * *seen gets the counter's last value (with its bit 63). */
CCHAN_DEVICE_INLINE int cchan_port_channel_wait_seen(const cchan_port_channel_t *ch,
                                                     const uint64_t *p, uint64_t target,
                                                     uint32_t kind, uint64_t *seen) {
    /* One load on the fast path: on a GPU the counter is host memory, a load a PCIe round trip. */
    uint64_t v = cchan_load_acquire_sys_u64(p);
    *seen = v;
    if (CCHAN_LIKELY((v & CCHAN_PORT_FLUSH_COUNT_MASK) >= target))
        return cchan_wait_done(&ch->ctl, kind, target, v);
    if (ch->dropped == NULL) {
        int r = cchan_wait_geq_u64(p, target, &ch->ctl, kind);
        *seen = target; /* nothing sets bit 63 without a dropped word */
        return r;
    }
    cchan_deadline_t d;
    cchan_deadline_init(&d);
#if !defined(CCHAN_BACKEND_HOST)
    /* No deadline: the bare poll of cchan_wait_geq_u64, so a signal is seen one load after it
     * lands; the abort and failure words once every CCHAN_WAIT_CLOCK_STRIDE spins. */
    if (ch->ctl.timeout_ns == 0) {
        uint32_t it = 0;
        while (((v = cchan_load_acquire_sys_u64(p)) & CCHAN_PORT_FLUSH_COUNT_MASK) < target) {
            if (CCHAN_LIKELY((++it % CCHAN_WAIT_CLOCK_STRIDE) != 0)) continue;
            if (CCHAN_UNLIKELY(cchan_wait_aborted(&ch->ctl) != 0))
                return cchan_wait_expired(&d, &ch->ctl, kind, target,
                                          v & CCHAN_PORT_FLUSH_COUNT_MASK);
            int failed = cchan_port_channel_transport_failed(ch);
            if (CCHAN_UNLIKELY(failed != CCHAN_OK)) {
                *seen = CCHAN_PORT_FLUSH_DROPPED; /* the proxy marked it before failing */
                return cchan_port_channel_wait_failed(ch, p, target, kind, failed);
            }
        }
        *seen = v;
        return CCHAN_OK;
    }
#endif
    while (((v = cchan_load_acquire_sys_u64(p)) & CCHAN_PORT_FLUSH_COUNT_MASK) < target) {
        if (CCHAN_UNLIKELY(cchan_deadline_spin(&d, &ch->ctl)))
            return cchan_wait_expired(&d, &ch->ctl, kind, target, v & CCHAN_PORT_FLUSH_COUNT_MASK);
        if (CCHAN_LIKELY((d.iter % CCHAN_WAIT_CLOCK_STRIDE) != 0)) continue;
        int failed = cchan_port_channel_transport_failed(ch);
        if (CCHAN_UNLIKELY(failed != CCHAN_OK)) {
            *seen = CCHAN_PORT_FLUSH_DROPPED; /* the proxy marked it before failing */
            return cchan_port_channel_wait_failed(ch, p, target, kind, failed);
        }
    }
    *seen = v;
    return cchan_wait_done(&ch->ctl, kind, target, v);
}

CCHAN_DEVICE_INLINE int cchan_port_channel_wait_counter(const cchan_port_channel_t *ch,
                                                        const uint64_t *p, uint64_t target,
                                                        uint32_t kind) {
    uint64_t seen;
    return cchan_port_channel_wait_seen(ch, p, target, kind, &seen);
}

/* Waits until the proxy reports this channel's n-th flush complete, then fails with the cause when
 * the proxy dropped a request of the channel since the last check. */
CCHAN_DEVICE_INLINE int cchan_port_channel_flush_wait(const cchan_port_channel_t *ch, uint64_t n) {
    uint64_t seen;
    int r = cchan_port_channel_wait_seen(ch, ch->flush_done, n, CCHAN_WAIT_FLUSH, &seen);
    if (r || CCHAN_LIKELY(!(seen & CCHAN_PORT_FLUSH_DROPPED))) return r;
    return cchan_port_channel_check_dropped(ch, n);
}

/* flush_issued counts only flushes that reached the FIFO: a refused one would never complete. */
CCHAN_DEVICE_INLINE int cchan_port_channel_flush(const cchan_port_channel_t *ch) {
    uint64_t n = *ch->flush_issued + 1;
    int r = cchan_port_channel_push(ch, CCHAN_TRIGGER_FLUSH, 0, 0, 0);
    if (r) return r;
    *ch->flush_issued = n;
    return cchan_port_channel_flush_wait(ch, n);
}

CCHAN_DEVICE_INLINE int cchan_port_channel_put_signal_flush(const cchan_port_channel_t *ch,
                                                            uint64_t dst_off, uint64_t src_off,
                                                            uint64_t bytes) {
    uint64_t n = *ch->flush_issued + 1;
    int r = cchan_port_channel_put_typed(ch, dst_off, src_off, bytes,
                                         CCHAN_TRIGGER_SIGNAL | CCHAN_TRIGGER_FLUSH);
    if (r) return r;
    *ch->flush_issued = n;
    return cchan_port_channel_flush_wait(ch, n);
}

CCHAN_DEVICE_INLINE int cchan_port_channel_wait(const cchan_port_channel_t *ch) {
    uint64_t want = *ch->expected + 1;
    *ch->expected = want;
    return cchan_port_channel_wait_counter(ch, ch->inbound, want, CCHAN_WAIT_SEMAPHORE);
}

CCHAN_DEVICE_INLINE int cchan_port_channel_poll(const cchan_port_channel_t *ch) {
    uint64_t want = *ch->expected + 1;
    if (cchan_load_acquire_sys_u64(ch->inbound) < want) return 0;
    *ch->expected = want;
    return 1;
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_PORT_CHANNEL_H */
