/* cchan dma transport: port channels between GPUs of one host (NVLink, PCIe P2P).
 *
 * put:    cudaMemcpyAsync(cudaMemcpyDefault) on a non-blocking stream owned by the channel, so the
 *         copy engine moves the data and the channel's copies stay in order.
 * signal: the peer waits on a counter in host-pinned memory. When nothing of the channel is in
 *         flight, the proxy stores the count there at once (far cheaper than a stream memory
 *         operation, whose cost is stream submission: docs/port_channel.md). Otherwise the signal
 *         waits in a completion queue behind the channel's copies and the proxy stores the
 *         count when they have finished, polling without ever blocking: the signal still follows
 *         the channel's puts, and no stream work sits on its path.
 * flush:  the same completion queue; flush_done is raised when all work issued before it is done.
 *
 * Pending completions form a FIFO per channel, so signals and flushes are delivered in the order
 * they were requested.
 *
 * Between two buffers of one GPU (ranks sharing a GPU), cudaMemcpyAsync is done by a copy kernel on
 * the SMs, not by a copy engine: it cannot start while the kernel that waits for the put's flush
 * or signal fills every SM, and both wait forever (docs/port_channel.md). Such channels copy
 * through a pinned host staging buffer instead, device to host and host to device, which the copy
 * engines do whatever the SMs are running. "One GPU" is decided by the ranks' GPU UUIDs
 * (ch->same_gpu), never by what the runtime says of an imported pointer. The newest completion starts "open": nothing is recorded, and it is done
 * when the stream is idle (cudaStreamQuery). Only when a later copy is issued does it get an event
 * (cudaEventRecord before that copy), so put_signal costs one host API call, not two; older
 * completions are polled with cudaEventQuery (events of one stream complete in order). A
 * completion with no copy issued after it absorbs later signals and flushes (the counters are
 * monotone: storing the newer count delivers both), so a burst of signals costs one completion.
 */
#if defined(CCHAN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "transport.h"

#define DMA_COMPLETIONS_INITIAL 8u /* events per channel at first; doubles when exhausted */
#ifndef DMA_STAGING_BYTES /* a test sets a small one to see puts split */
#define DMA_STAGING_BYTES (4u << 20) /* host staging per same-GPU channel, reused in stream order */
#endif

/* Stores owed to the device once the copies issued before the completion have finished. */
typedef struct dma_completion {
    cudaEvent_t event; /* owned by the slot, reused; recorded unless the completion is open */
    uint64_t signal;   /* outbound count to store; 0: none */
    uint64_t flush;    /* flush count to publish; 0: none */
    uint64_t queued_ns, signal_seen_ns, flush_seen_ns; /* timing only */
} dma_completion_t;

typedef struct dma_channel {
    cudaStream_t stream;
    int unfenced;           /* copies issued after the newest completion, not yet seen complete */
    int newest_open;        /* the newest completion has no event: done when the stream is idle */
    dma_completion_t *ring; /* power-of-two ring of `cap` slots, each with its event */
    uint32_t cap;
    uint32_t first; /* oldest pending completion */
    uint32_t count; /* pending completions */
    int last_query; /* cudaError_t of the last poll of the oldest completion (for reports) */
    uint8_t *staging; /* pinned host buffer when src and dst are on the same GPU; else NULL */
} dma_channel_t;

static int dma_error(const cchani_port_channel_t *ch, const char *call, cudaError_t e) {
    (void)cudaGetLastError(); /* clear a non-sticky error so later calls do not report it again */
    return cchani_error(CCHAN_ERR_CUDA, "dma transport", "channel %u to peer %d: %s: %s (%s)",
                        ch->id, ch->peer, call, cudaGetErrorName(e), cudaGetErrorString(e));
}

static int dma_create_events(const cchani_port_channel_t *ch, dma_completion_t *slots, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        cudaError_t e = cudaEventCreateWithFlags(&slots[i].event, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            while (i--) cudaEventDestroy(slots[i].event);
            return dma_error(ch, "cudaEventCreateWithFlags", e);
        }
    }
    return 0;
}

/* Doubles the ring, keeping pending completions in order and every slot's event. */
static int dma_grow(const cchani_port_channel_t *ch, dma_channel_t *dc) {
    uint32_t cap = dc->cap * 2;
    dma_completion_t *ring = calloc(cap, sizeof *ring);
    if (!ring)
        return cchani_error(-ENOMEM, "dma transport", "channel %u: %u completions", ch->id, cap);
    int r = dma_create_events(ch, ring + dc->cap, dc->cap);
    if (r) {
        free(ring);
        return r;
    }
    for (uint32_t i = 0; i < dc->cap; i++) ring[i] = dc->ring[(dc->first + i) & (dc->cap - 1)];
    free(dc->ring);
    dc->ring = ring;
    dc->first = 0;
    dc->cap = cap;
    return 0;
}

static dma_completion_t *dma_newest(dma_channel_t *dc) {
    return &dc->ring[(dc->first + dc->count - 1) & (dc->cap - 1)];
}

static int dma_idle(const dma_channel_t *dc) { return dc->count == 0 && !dc->unfenced; }

/* The completion that fires once every copy issued so far has landed (the channel is not idle): the
 * newest pending one when no copy followed it, else a new, open one. */
static int dma_completion_after_copies(cchani_port_channel_t *ch, dma_completion_t **out) {
    dma_channel_t *dc = ch->transport;
    if (!dc->unfenced) {
        *out = dma_newest(dc);
        return 0;
    }
    if (dc->count == dc->cap) {
        int r = dma_grow(ch, dc);
        if (r) return r;
    }
    dma_completion_t *c = &dc->ring[(dc->first + dc->count) & (dc->cap - 1)];
    c->signal = 0;
    c->flush = 0;
    c->queued_ns = cchani_now_ns(); /* once per completion: reports say how long it waited */
    dc->count++;
    dc->unfenced = 0;
    dc->newest_open = 1;
    *out = c;
    return 0;
}

/* A copy is about to join the stream: the open completion must no longer wait for it. */
static int dma_close_newest(cchani_port_channel_t *ch, dma_channel_t *dc) {
    uint64_t t0 = ch->timing ? cchani_now_ns() : 0;
    cudaError_t e = cudaEventRecord(dma_newest(dc)->event, dc->stream);
    if (e != cudaSuccess) return dma_error(ch, "cudaEventRecord", e);
    dc->newest_open = 0;
    if (ch->timing) cchani_port_stage(ch, CCHANI_STAGE_EVENT_RECORD, t0, cchani_now_ns());
    return 0;
}

static int dma_copy_direct(cchani_port_channel_t *ch, dma_channel_t *dc, uint64_t dst_off,
                           uint64_t src_off, uint64_t bytes) {
    cudaError_t e =
        cudaMemcpyAsync(ch->dst + dst_off, ch->src + src_off, bytes, cudaMemcpyDefault, dc->stream);
    return e == cudaSuccess ? 0 : dma_error(ch, "cudaMemcpyAsync", e);
}

/* Through the staging buffer, one piece at a time: the stream orders each piece's host-to-device
 * copy before the next piece's device-to-host copy overwrites the buffer. */
static int dma_copy_staged(cchani_port_channel_t *ch, dma_channel_t *dc, uint64_t dst_off,
                           uint64_t src_off, uint64_t bytes) {
    for (uint64_t done = 0; done < bytes;) {
        uint64_t n = bytes - done < DMA_STAGING_BYTES ? bytes - done : DMA_STAGING_BYTES;
        cudaError_t e = cudaMemcpyAsync(dc->staging, ch->src + src_off + done, n,
                                        cudaMemcpyDeviceToHost, dc->stream);
        if (e != cudaSuccess) return dma_error(ch, "cudaMemcpyAsync (to staging)", e);
        e = cudaMemcpyAsync(ch->dst + dst_off + done, dc->staging, n, cudaMemcpyHostToDevice,
                            dc->stream);
        if (e != cudaSuccess) return dma_error(ch, "cudaMemcpyAsync (from staging)", e);
        done += n;
    }
    return 0;
}

static int dma_put(cchani_port_channel_t *ch, uint64_t dst_off, uint64_t src_off, uint64_t bytes) {
    dma_channel_t *dc = ch->transport;
    if (bytes == 0) return 0;
    if (dc->newest_open) {
        int r = dma_close_newest(ch, dc);
        if (r) return r;
    }
    int r = dc->staging ? dma_copy_staged(ch, dc, dst_off, src_off, bytes)
                        : dma_copy_direct(ch, dc, dst_off, src_off, bytes);
    if (r) return r;
    dc->unfenced = 1;
    if (ch->timing) cchani_port_stage(ch, CCHANI_STAGE_PUT_ISSUE, ch->seen_ns, cchani_now_ns());
    return 0;
}

static int dma_signal(cchani_port_channel_t *ch, uint64_t outbound) {
    dma_channel_t *dc = ch->transport;
    if (dma_idle(dc)) {
        cchani_port_deliver_signal(ch, outbound);
        ch->counters.signals_direct++;
        if (ch->timing)
            cchani_port_stage(ch, CCHANI_STAGE_SIGNAL_DIRECT, ch->seen_ns, cchani_now_ns());
        return 0;
    }
    dma_completion_t *c;
    int r = dma_completion_after_copies(ch, &c);
    if (r) return r;
    c->signal = outbound;
    c->signal_seen_ns = ch->seen_ns;
    return 0;
}

static int dma_flush(cchani_port_channel_t *ch, uint64_t count) {
    dma_channel_t *dc = ch->transport;
    if (dma_idle(dc)) {
        cchani_port_complete_flush(ch, count);
        if (ch->timing) cchani_port_stage(ch, CCHANI_STAGE_FLUSH, ch->seen_ns, cchani_now_ns());
        return 0;
    }
    dma_completion_t *c;
    int r = dma_completion_after_copies(ch, &c);
    if (r) return r;
    c->flush = count;
    c->flush_seen_ns = ch->seen_ns;
    return 0;
}

/* The signal first: a flush on the same completion promises that earlier signals were delivered. */
static void dma_complete(cchani_port_channel_t *ch, const dma_completion_t *c) {
    if (c->signal) cchani_port_deliver_signal(ch, c->signal);
    if (c->flush) cchani_port_complete_flush(ch, c->flush);
    if (!ch->timing) return;
    uint64_t now = cchani_now_ns();
    cchani_port_stage(ch, CCHANI_STAGE_COPY_WAIT, c->queued_ns, now);
    if (c->signal) cchani_port_stage(ch, CCHANI_STAGE_SIGNAL_DEFERRED, c->signal_seen_ns, now);
    if (c->flush) cchani_port_stage(ch, CCHANI_STAGE_FLUSH, c->flush_seen_ns, now);
}

/* Only the newest completion can be open, so an open oldest one is the only one pending. */
static cudaError_t dma_query_oldest(const dma_channel_t *dc, const char **call) {
    if (dc->newest_open && dc->count == 1) {
        *call = "cudaStreamQuery";
        return cudaStreamQuery(dc->stream);
    }
    *call = "cudaEventQuery";
    return cudaEventQuery(dc->ring[dc->first].event);
}

static int dma_progress(cchani_port_channel_t *ch) {
    dma_channel_t *dc = ch->transport;
    while (dc->count) {
        const char *call;
        cudaError_t e = dma_query_oldest(dc, &call);
        dc->last_query = (int)e;
        if (e == cudaErrorNotReady) break;
        dma_completion_t *c = &dc->ring[dc->first];
        dc->first = (dc->first + 1) & (dc->cap - 1);
        if (--dc->count == 0) dc->newest_open = 0;
        if (e != cudaSuccess) return dma_error(ch, call, e);
        dma_complete(ch, c);
    }
    /* Copies after the newest completion: learning that they are done lets the next signal go
     * direct. */
    if (dc->unfenced && dc->count == 0) {
        cudaError_t e = cudaStreamQuery(dc->stream);
        if (e == cudaSuccess)
            dc->unfenced = 0;
        else if (e != cudaErrorNotReady)
            return dma_error(ch, "cudaStreamQuery", e);
    }
    return (int)dc->count + dc->unfenced;
}

static void dma_describe(const cchani_port_channel_t *ch, char *buf, size_t n) {
    const dma_channel_t *dc = ch->transport;
    if (dc->count == 0) {
        snprintf(buf, n, "dma: no completion pending, copies %s", dc->unfenced ? "unseen" : "done");
        return;
    }
    const dma_completion_t *c = &dc->ring[dc->first];
    snprintf(buf, n,
             "dma: %u completion(s) pending; oldest (signal %llu, flush %llu) queued %.3f s ago, "
             "%s, last poll %s; copies after the newest: %s",
             dc->count, (unsigned long long)c->signal, (unsigned long long)c->flush,
             (double)(cchani_now_ns() - c->queued_ns) / 1e9,
             dc->newest_open && dc->count == 1 ? "open (cudaStreamQuery)" : "event",
             cudaGetErrorName((cudaError_t)dc->last_query), dc->unfenced ? "yes" : "no");
}

static void dma_release(dma_channel_t *dc) {
    for (uint32_t i = 0; i < dc->cap; i++) cudaEventDestroy(dc->ring[i].event);
    free(dc->ring);
    if (dc->stream) cudaStreamDestroy(dc->stream);
    if (dc->staging) cudaFreeHost(dc->staging);
    free(dc);
}

/* A pinned staging buffer when source and destination are device memory of this very GPU
 * (ch->same_gpu, decided from the ranks' GPU UUIDs: proxy.c). Asking the runtime instead
 * (cudaPointerGetAttributes) is wrong for a peer's buffer opened with cudaIpcOpenMemHandle, which
 * it reports as the importing GPU's: every cross-GPU channel would be staged, and staged copies
 * share the copy queues with the application's own device-to-host copies, which can sit behind
 * the very kernel that waits for this channel. */
static int dma_open_staging(cchani_port_channel_t *ch, dma_channel_t *dc) {
    if (!ch->same_gpu) return 0;
    cudaError_t e = cudaHostAlloc((void **)&dc->staging, DMA_STAGING_BYTES, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        dc->staging = NULL;
        return dma_error(ch, "cudaHostAlloc (same-GPU staging)", e);
    }
    return 0;
}

static int dma_open(cchani_port_channel_t *ch) {
    dma_channel_t *dc = calloc(1, sizeof *dc);
    dma_completion_t *ring = calloc(DMA_COMPLETIONS_INITIAL, sizeof *ring);
    if (!dc || !ring) {
        free(dc);
        free(ring);
        return cchani_error(-ENOMEM, "dma transport", "channel %u: state", ch->id);
    }
    cchani_device_scope_t scope;
    int r = cchani_device_enter(ch->comm, &scope);
    if (!r) {
        cudaError_t e = cudaStreamCreateWithFlags(&dc->stream, cudaStreamNonBlocking);
        if (e != cudaSuccess) r = dma_error(ch, "cudaStreamCreateWithFlags", e);
    }
    int events = 0;
    if (!r) r = dma_create_events(ch, ring, DMA_COMPLETIONS_INITIAL);
    if (!r) events = 1;
    if (!r) r = dma_open_staging(ch, dc);
    if (r) {
        for (uint32_t i = 0; events && i < DMA_COMPLETIONS_INITIAL; i++)
            cudaEventDestroy(ring[i].event);
        if (dc->stream) cudaStreamDestroy(dc->stream);
        free(ring);
        free(dc);
    } else {
        dc->ring = ring;
        dc->cap = DMA_COMPLETIONS_INITIAL;
        ch->transport = dc;
    }
    cchani_device_leave(&scope);
    return r;
}

/* Copies may still read src and write dst: they must end before the caller frees that memory. */
static void dma_close(cchani_port_channel_t *ch) {
    dma_channel_t *dc = ch->transport;
    cchani_device_scope_t scope;
    if (cchani_device_enter(ch->comm, &scope) == 0) {
        cudaError_t e = cudaStreamSynchronize(dc->stream);
        if (e != cudaSuccess) dma_error(ch, "cudaStreamSynchronize at close", e);
    }
    dma_release(dc);
    ch->transport = NULL;
    cchani_device_leave(&scope);
}

const cchani_transport_ops_t cchani_transport_dma = {
    .size = sizeof(cchani_transport_ops_t),
    .name = "dma",
    .open = dma_open,
    .put = dma_put,
    .signal = dma_signal,
    .flush = dma_flush,
    .progress = dma_progress,
    .close = dma_close,
    .describe = dma_describe,
};

#endif /* CCHAN_HAVE_CUDA */
