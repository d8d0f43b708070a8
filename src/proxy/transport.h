/* cchan proxy: the interface between the proxy core (proxy.c) and its transports (one file each).
 * Not installed.
 *
 * The core owns the FIFO and the polling thread. For every trigger it checks the channel id and the
 * ranges, then calls the channel's transport in trigger order: put, then signal, then flush (a
 * fused trigger carries several). A transport completes a signal by storing the channel's outbound
 * count into the peer's inbound counter (cchani_port_deliver_signal) and a flush by raising the
 * channel's flush_done counter (cchani_port_complete_flush), each only after the channel's earlier
 * work has completed. Transports that finish work later report it through progress(), which the
 * core calls for every channel with work in flight, never blocking.
 */
#ifndef CCHAN_SRC_PROXY_TRANSPORT_H
#define CCHAN_SRC_PROXY_TRANSPORT_H

#include "mem.h"
#include "runtime.h"

typedef struct cchani_port_channel cchani_port_channel_t;

/* Per-stage latency (ns), gathered only when timing is on (CCHAN_DEBUG=TRACE) and summarised by
 * cchan_proxy_stop at INFO level: the breakdown of a proxied request. */
enum cchani_port_stage {
    CCHANI_STAGE_PUT_ISSUE,     /* trigger seen -> copy issued (dma: cudaMemcpyAsync returned) */
    CCHANI_STAGE_SIGNAL_DIRECT, /* trigger seen -> signal stored, nothing was in flight */
    CCHANI_STAGE_EVENT_RECORD,  /* dma: cudaEventRecord, when a copy follows a pending completion */
    CCHANI_STAGE_COPY_WAIT,     /* completion queued -> seen complete (earlier copies landed) */
    CCHANI_STAGE_SIGNAL_DEFERRED, /* trigger seen -> signal stored, after earlier copies */
    CCHANI_STAGE_FLUSH,           /* trigger seen -> flush_done raised */
    CCHANI_STAGE_COUNT
};

typedef struct cchani_stage_stat {
    uint64_t count;
    uint64_t total_ns;
    uint64_t max_ns;
} cchani_stage_stat_t;

/* What a channel did, for the summary at stop. Written by the proxy thread only. */
typedef struct cchani_port_counters {
    uint64_t puts; /* puts performed (a run of contiguous puts joined into one counts once) */
    uint64_t put_bytes;
    uint64_t joined; /* put triggers joined to an earlier one (proxy_join_puts) */
    uint64_t signals;
    uint64_t signals_direct; /* delivered at once: nothing of the channel was in flight */
    uint64_t flushes;
    uint64_t rejected; /* triggers refused (range) or failed in the transport */
    cchani_stage_stat_t stage[CCHANI_STAGE_COUNT];
} cchani_port_counters_t;

typedef struct cchani_transport_ops {
    size_t size; /* sizeof(cchani_transport_ops_t) when the table was built: the table can grow */
    const char *name;
    /* Creates ch->transport for a new channel; called by the creating thread. */
    int (*open)(cchani_port_channel_t *ch);
    /* Requests, called by the proxy thread in trigger order with ranges already checked. None may
     * wait for the device. Return 0 or a negative status (recorded against the channel). */
    int (*put)(cchani_port_channel_t *ch, uint64_t dst_off, uint64_t src_off, uint64_t bytes);
    int (*signal)(cchani_port_channel_t *ch, uint64_t outbound);
    int (*flush)(cchani_port_channel_t *ch, uint64_t count);
    /* Completes what has finished, without blocking. Returns how many requests are still in flight
     * (0: the channel is idle) or a negative status. NULL when requests complete inside the calls
     * above. */
    int (*progress)(cchani_port_channel_t *ch);
    /* Waits for the channel's issued work (bounded by the hardware) and frees ch->transport. */
    void (*close)(cchani_port_channel_t *ch);
    /* Optional: writes what the channel has in flight, for the report of work left at stop (a
     * flush that never completes: is it waiting for a copy, or was it never queued?). */
    void (*describe)(const cchani_port_channel_t *ch, char *buf, size_t n);
} cchani_transport_ops_t;

/* The proxy's view of a port channel. */
struct cchani_port_channel {
    /* Set at creation, read-only afterwards. */
    const cchani_transport_ops_t *ops;
    void *transport; /* the transport's per-channel state */
    cchan_comm_t *comm;
    uint32_t id; /* channel id in the proxy's triggers */
    int peer;
    uint8_t *src; /* local registered memory (the transport's view) */
    uint64_t src_bytes;
    uint8_t *dst; /* the peer's registered memory, mapped here */
    uint64_t dst_bytes;
    uint64_t *signal_target; /* the peer's inbound counter for this rank (host view); NULL for
                                network transports, which reach it through the peer */
    /* For network transports (ib, tcp), which connect to the peer's matching channel at open. */
    const cchan_mem_t *src_mem, *dst_mem;
    cchan_sem_set_t *sems;
    int sem_index;
    uint64_t *flush_done; /* host view of the counter the device's flush waits on */
    int timing;           /* gather cchani_port_counters_t.stage */
    int same_gpu; /* src and dst are device memory of this very GPU (cchani_comm_same_gpu) */

    /* Proxy thread only. */
    uint64_t outbound; /* signals issued: the value the peer's counter reaches with the last one */
    uint64_t flushes;  /* flush requests taken */
    uint64_t seen_ns;  /* when the current trigger was taken (timing only) */
    int in_flight;     /* last progress() result; > 0 while on the proxy's progress list */
    cchani_port_counters_t counters;
};

extern const cchani_transport_ops_t cchani_transport_host;
extern const cchani_transport_ops_t cchani_transport_tcp;
extern const cchani_transport_ops_t cchani_transport_ib;
#if defined(CCHAN_HAVE_CUDA)
extern const cchani_transport_ops_t cchani_transport_dma;
#endif

/* Raises the peer's inbound counter to `outbound` (release: every write the proxy performed or
 * observed complete before is visible to the peer's acquire). */
static inline void cchani_port_deliver_signal(cchani_port_channel_t *ch, uint64_t outbound) {
    __atomic_store_n(ch->signal_target, outbound, __ATOMIC_RELEASE);
}

/* Publishes that the channel's first `count` flushes are complete (release). Never lowers the
 * count (nor the CCHAN_PORT_FLUSH_DROPPED mark): after a transport failure the proxy completes
 * every flush it took (proxy.c), and a completion of an older flush that the transport delivers
 * afterwards must not take that back from a flush still reading it. The proxy thread is the only
 * writer. */
static inline void cchani_port_complete_flush(cchani_port_channel_t *ch, uint64_t count) {
    uint64_t old = __atomic_load_n(ch->flush_done, __ATOMIC_RELAXED);
    if (count > (old & CCHAN_PORT_FLUSH_COUNT_MASK))
        __atomic_store_n(ch->flush_done, count | (old & CCHAN_PORT_FLUSH_DROPPED),
                         __ATOMIC_RELEASE);
}

static inline void cchani_port_stage(cchani_port_channel_t *ch, enum cchani_port_stage stage,
                                     uint64_t from_ns, uint64_t to_ns) {
    cchani_stage_stat_t *s = &ch->counters.stage[stage];
    uint64_t d = to_ns - from_ns;
    s->count++;
    s->total_ns += d;
    if (d > s->max_ns) s->max_ns = d;
}

/* ---------------------------------------------------------------- network transports
 * The ib and tcp transports connect a channel to the peer's matching channel (same transport and
 * semaphore index, created by the peer at the same time) through the bootstrap (net_connect.c),
 * in two rounds and a last, empty one that says the transport is ready: each side sends a hello
 * naming the memory it will write into (the peer's dst registration and the peer's inbound counter
 * for this rank) plus its transport's address; each side finds that memory among its own
 * registrations, checks it, and answers with a reply (status, the counter's current value, and what
 * the transport needs: an rkey). A failure on either side reaches the other in the reply, so
 * neither waits for a peer that gave up. */

#define CCHANI_NET_BLOB_BYTES 512u /* transport-specific part of a hello or reply */

typedef struct cchani_net_hello {
    uint32_t magic;
    uint32_t version;
    uint32_t transport; /* cchan_transport_t */
    int32_t rank;
    int32_t sem_index;
    int32_t sem_count;
    cchani_mem_ident_t dst; /* the peer's memory this side writes into */
    cchani_mem_ident_t sem; /* the peer's inbound-counter area */
    uint64_t sem_slot;      /* byte offset of this side's counter in that area */
    uint8_t blob[CCHANI_NET_BLOB_BYTES];
} cchani_net_hello_t;

typedef struct cchani_net_reply {
    int32_t status; /* 0, or why this side refused (its own error says more) */
    uint32_t reserved;
    uint64_t counter; /* the inbound counter's value now: the sender continues from it */
    uint8_t blob[CCHANI_NET_BLOB_BYTES];
} cchani_net_reply_t;

/* What the peer's hello asks of this side, resolved against this rank's own registrations. */
typedef struct cchani_net_target {
    uint8_t *dst;      /* this rank's memory the peer writes into (cchan_mem_ptr: device view) */
    uint8_t *dst_host; /* its host view, NULL for device memory */
    uint64_t dst_bytes;
    int dst_device;    /* GPU ordinal of that memory, -1 for host memory */
    uint64_t *counter; /* this rank's inbound counter that the peer's signals raise (host view) */
} cchani_net_target_t;

/* Round 1: fills `mine` from the channel (the caller adds its blob), sends it, receives the peer's
 * hello and resolves it into `target`. *exchanged is 1 once both hellos crossed: then the caller
 * runs round 2 even after a failure, with its status, so the peer does not wait in vain. */
CCHANI_HIDDEN int cchani_net_hello(cchani_port_channel_t *ch, cchan_transport_t transport,
                                   cchani_net_hello_t *mine, cchani_net_hello_t *theirs,
                                   cchani_net_target_t *target, int *exchanged);
/* Round 2: sends `mine` (status set by the caller), receives the peer's reply. 0 only when both
 * sides succeeded. */
CCHANI_HIDDEN int cchani_net_reply(cchani_port_channel_t *ch, cchani_net_reply_t *mine,
                                   cchani_net_reply_t *theirs);
/* A third, empty round: returns once the peer has reached the same point (QPs ready). */
CCHANI_HIDDEN int cchani_net_sync(cchani_port_channel_t *ch, int status);

#endif /* CCHAN_SRC_PROXY_TRANSPORT_H */
