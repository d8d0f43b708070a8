/* cchan ib transport: port channels between hosts with RDMA NICs (InfiniBand, RoCE), through
 * libibverbs loaded at run time (ibv.h).
 *
 * A channel and the peer's matching channel connect through the bootstrap (net_connect.c): each
 * opens the NIC nearest its GPU, creates CCHAN_IB_QPS reliable-connected queue pairs (default 1)
 * and registers its source; each registers the memory the peer will write into (its dst
 * registration and its inbound counter) and answers with their addresses and rkeys.
 *
 * put     RDMA WRITEs of at most IB_CHUNK bytes each, spread round-robin over the QPs.
 * signal  an RDMA atomic fetch-and-add of the new signals on the peer's counter (CCHAN_IB_SIGNAL=
 *         write, or a NIC without atomics: an RDMA WRITE of the outbound count, which is safe
 *         because a semaphore has one writer). An atomic on QP 0 is posted at once after writes on
 *         QP 0: the responder executes a QP's requests in order. It waits for writes posted on
 *         other QPs to complete, and a signal by WRITE waits for every earlier write (WRITEs of
 *         one QP may be placed out of order, e.g. with adaptive routing).
 * flush   completes (flush_done raised) when every work request posted before it has completed.
 *
 * Every request is signalled; each QP holds at most IB_DEPTH of them, and a full QP makes the
 * proxy poll the completion queue until there is room (back-pressure, at most
 * CCHAN_NET_TIMEOUT_MS). A failed work completion becomes an error naming the peer, the operation
 * and the ibverbs status; the channel refuses further requests after it. */
#include "ibv.h"
#include "transport.h"

#if defined(CCHANI_HAVE_IBV_HEADERS)
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IB_MAX_QPS 16
#define IB_DEPTH 256u       /* work requests in flight per QP */
#define IB_CHUNK (1u << 20) /* bytes per RDMA WRITE */
#define IB_PENDING 1024u    /* deferred signals and flushes (power of two) */
#define IB_DEFAULT_TIMEOUT_MS 30000u

enum ib_wr_kind { WR_PUT = 1, WR_SIGNAL = 2 };
#define WR_ID(kind, qp) (((uint64_t)(kind) << 8) | (uint64_t)(qp))

typedef struct ib_pending {
    int is_signal; /* else a flush */
    uint64_t value;
    int armed; /* the snapshot of posted requests is taken when the item reaches the head */
    uint64_t snap[IB_MAX_QPS];
} ib_pending_t;

/* What each side tells the other in its hello. */
typedef struct ib_hello_blob {
    uint8_t gid[16];
    uint16_t lid;
    uint8_t port, link_layer, mtu, atomics;
    uint16_t nqps;
    uint32_t qpn[IB_MAX_QPS];
    uint32_t psn[IB_MAX_QPS];
} ib_hello_blob_t;

typedef struct ib_reply_blob {
    uint64_t dst_addr, counter_addr;
    uint32_t dst_rkey, counter_rkey;
} ib_reply_blob_t;

typedef struct ib_channel {
    cchani_port_channel_t *ch;
    const cchani_ibv_t *ibv;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp[IB_MAX_QPS];
    int nqps;
    char dev_name[64];
    uint8_t port;
    int gid_index, link_layer, signal_by_write;
    uint64_t timeout_ms;
    struct ibv_mr *src_mr, *dst_mr, *counter_mr, *scratch_mr;
    uint64_t *scratch; /* IB_DEPTH words: atomic results and counts written by signals */
    cchani_net_target_t target;
    ib_reply_blob_t remote; /* the peer's dst and counter */
    /* Proxy thread. */
    uint64_t posted[IB_MAX_QPS], completed[IB_MAX_QPS];
    uint32_t next_qp;
    uint64_t signalled; /* the count the peer's counter reaches with the signals posted so far */
    ib_pending_t pending[IB_PENDING];
    uint32_t first, count;
    int failed;
    uint64_t progress_ns; /* last completion, or when work was posted to an idle channel */
} ib_channel_t;

static const char *const where = "ib transport";

static const char *wr_kind_name(uint64_t wr_id) {
    return (wr_id >> 8) == WR_SIGNAL ? "signal (RDMA atomic/write to the peer's semaphore)"
                                     : "put (RDMA WRITE)";
}

/* ---------------------------------------------------------------- completions */

/* A peer that stopped answering is CCHAN_ERR_PEER; a refused access -EACCES; anything else -EIO. */
static int ib_wc_status(enum ibv_wc_status s) {
    switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR: return CCHAN_ERR_PEER;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_LOC_PROT_ERR: return -EACCES;
    default: return -EIO;
    }
}

static int ib_poll(ib_channel_t *ic) {
    struct ibv_wc wc[32];
    int n = ibv_poll_cq(ic->cq, 32, wc);
    if (n < 0)
        return cchani_error(CCHAN_ERR_SYSTEM, where, "channel %u to rank %d: ibv_poll_cq: %d",
                            ic->ch->id, ic->ch->peer, n);
    int first_error = 0;
    if (n > 0) ic->progress_ns = cchani_now_ns();
    for (int i = 0; i < n; i++) {
        uint32_t q = (uint32_t)(wc[i].wr_id & 0xff);
        if (q < (uint32_t)ic->nqps) ic->completed[q]++;
        if (wc[i].status != IBV_WC_SUCCESS && !first_error && !ic->failed) {
            first_error = ib_wc_status(wc[i].status);
            cchani_error(first_error, where,
                         "channel %u to rank %d: %s on QP %u (%s port %u) failed: %s (status %d, "
                         "vendor error %#x)%s",
                         ic->ch->id, ic->ch->peer, wr_kind_name(wc[i].wr_id), q, ic->dev_name,
                         ic->port, ic->ibv->wc_status_str(wc[i].status), (int)wc[i].status,
                         wc[i].vendor_err,
                         wc[i].status == IBV_WC_RETRY_EXC_ERR
                             ? ": the peer stopped answering (process or host gone?)"
                             : "");
        }
    }
    if (first_error) ic->failed = first_error;
    return first_error ? first_error : n;
}

static uint64_t ib_outstanding(const ib_channel_t *ic) {
    uint64_t n = 0;
    for (int q = 0; q < ic->nqps; q++) n += ic->posted[q] - ic->completed[q];
    return n;
}

/* Waits (polling) until QP q has room for one more request. */
static int ib_make_room(ib_channel_t *ic, int q, const char *what) {
    if (ic->posted[q] - ic->completed[q] < IB_DEPTH) return 0;
    uint64_t deadline = cchani_now_ns() + ic->timeout_ms * 1000000ull;
    while (ic->posted[q] - ic->completed[q] >= IB_DEPTH) {
        int r = ib_poll(ic);
        if (r < 0) return r;
        if (r == 0 && cchani_now_ns() > deadline)
            return cchani_error(CCHAN_ERR_TIMEOUT, where,
                                "channel %u to rank %d: %s: QP %d has had %u requests in flight "
                                "for %llu ms",
                                ic->ch->id, ic->ch->peer, what, q, IB_DEPTH,
                                (unsigned long long)ic->timeout_ms);
    }
    return 0;
}

static uint64_t ib_outstanding(const ib_channel_t *ic);

static int ib_post(ib_channel_t *ic, int q, struct ibv_send_wr *wr, const char *what) {
    struct ibv_send_wr *bad = NULL;
    if (ib_outstanding(ic) == 0) ic->progress_ns = cchani_now_ns();
    int e = ibv_post_send(ic->qp[q], wr, &bad);
    if (e)
        return cchani_error(e > 0 ? -e : CCHAN_ERR_SYSTEM, where,
                            "channel %u to rank %d: ibv_post_send of a %s on QP %d: %s", ic->ch->id,
                            ic->ch->peer, what, q, strerror(e > 0 ? e : EIO));
    ic->posted[q]++;
    return 0;
}

/* ---------------------------------------------------------------- requests */

static int ib_refuse(const ib_channel_t *ic, const char *what) {
    return cchani_error(ic->failed, where,
                        "channel %u to rank %d: %s refused: an earlier request failed", ic->ch->id,
                        ic->ch->peer, what);
}

static int ib_put(cchani_port_channel_t *ch, uint64_t dst_off, uint64_t src_off, uint64_t bytes) {
    ib_channel_t *ic = ch->transport;
    if (ic->failed) return ib_refuse(ic, "put");
    uint8_t *src = cchani_mem_host_ptr(ch->src_mem) ? cchani_mem_host_ptr(ch->src_mem) : ch->src;
    for (uint64_t done = 0; done < bytes || (bytes == 0 && done == 0);) {
        uint64_t n = bytes - done < IB_CHUNK ? bytes - done : IB_CHUNK;
        int q = (int)(ic->next_qp++ % (uint32_t)ic->nqps);
        int r = ib_make_room(ic, q, "put");
        if (r) return r;
        struct ibv_sge sge = {(uint64_t)(uintptr_t)(src + src_off + done), (uint32_t)n,
                              ic->src_mr->lkey};
        struct ibv_send_wr wr;
        memset(&wr, 0, sizeof wr);
        wr.wr_id = WR_ID(WR_PUT, q);
        wr.sg_list = &sge;
        wr.num_sge = n ? 1 : 0;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = ic->remote.dst_addr + dst_off + done;
        wr.wr.rdma.rkey = ic->remote.dst_rkey;
        r = ib_post(ic, q, &wr, "put");
        if (r) return r;
        if (n == 0) break;
        done += n;
    }
    if (ch->timing) cchani_port_stage(ch, CCHANI_STAGE_PUT_ISSUE, ch->seen_ns, cchani_now_ns());
    return 0;
}

/* Raises the peer's counter to `outbound` with one request on QP 0. */
static int ib_post_signal(ib_channel_t *ic, uint64_t outbound) {
    int r = ib_make_room(ic, 0, "signal");
    if (r) return r;
    uint64_t *slot = &ic->scratch[ic->posted[0] % IB_DEPTH];
    struct ibv_sge sge = {(uint64_t)(uintptr_t)slot, 8, ic->scratch_mr->lkey};
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = WR_ID(WR_SIGNAL, 0);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (ic->signal_by_write) {
        *slot = outbound; /* read by the NIC when it executes the request */
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.wr.rdma.remote_addr = ic->remote.counter_addr;
        wr.wr.rdma.rkey = ic->remote.counter_rkey;
    } else {
        wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
        wr.wr.atomic.remote_addr = ic->remote.counter_addr;
        wr.wr.atomic.compare_add = outbound - ic->signalled;
        wr.wr.atomic.rkey = ic->remote.counter_rkey;
    }
    r = ib_post(ic, 0, &wr, "signal");
    if (!r) ic->signalled = outbound;
    return r;
}

/* Whether a signal may be posted now: nothing deferred before it, and the writes it must follow are
 * all on QP 0 (ordered by the connection) or complete. */
static int ib_signal_ready(const ib_channel_t *ic) {
    if (ic->count) return 0;
    /* An RDMA WRITE of the count could be placed before the data of earlier WRITEs (adaptive
     * routing); an atomic is executed after the QP's earlier requests. So a signal by WRITE waits
     * for every earlier request, one by atomic only for those of other QPs. */
    for (int q = ic->signal_by_write ? 0 : 1; q < ic->nqps; q++)
        if (ic->posted[q] != ic->completed[q]) return 0;
    return 1;
}

static int ch_progress_once(ib_channel_t *ic);

static int ib_defer(ib_channel_t *ic, int is_signal, uint64_t value, const char *what) {
    if (ic->count == IB_PENDING) {
        uint64_t deadline = cchani_now_ns() + ic->timeout_ms * 1000000ull;
        while (ic->count == IB_PENDING) {
            int r = ch_progress_once(ic);
            if (r < 0) return r;
            if (cchani_now_ns() > deadline)
                return cchani_error(CCHAN_ERR_TIMEOUT, where,
                                    "channel %u to rank %d: %s: %u signals and flushes waiting "
                                    "for completions for %llu ms",
                                    ic->ch->id, ic->ch->peer, what, IB_PENDING,
                                    (unsigned long long)ic->timeout_ms);
        }
    }
    ib_pending_t *p = &ic->pending[(ic->first + ic->count) & (IB_PENDING - 1)];
    memset(p, 0, sizeof *p);
    p->is_signal = is_signal;
    p->value = value;
    ic->count++;
    return 0;
}

static int ib_signal(cchani_port_channel_t *ch, uint64_t outbound) {
    ib_channel_t *ic = ch->transport;
    if (ic->failed) return ib_refuse(ic, "signal");
    if (ib_signal_ready(ic)) {
        int r = ib_post_signal(ic, outbound);
        if (!r) {
            ch->counters.signals_direct++;
            if (ch->timing)
                cchani_port_stage(ch, CCHANI_STAGE_SIGNAL_DIRECT, ch->seen_ns, cchani_now_ns());
        }
        return r;
    }
    return ib_defer(ic, 1, outbound, "signal");
}

static int ib_flush(cchani_port_channel_t *ch, uint64_t count) {
    ib_channel_t *ic = ch->transport;
    if (ic->failed) return ib_refuse(ic, "flush");
    if (ic->count == 0 && ib_outstanding(ic) == 0) {
        cchani_port_complete_flush(ch, count);
        return 0;
    }
    return ib_defer(ic, 0, count, "flush");
}

/* Serves deferred signals and flushes in order once the requests posted before each are done. */
static int ib_serve_pending(ib_channel_t *ic) {
    while (ic->count) {
        ib_pending_t *p = &ic->pending[ic->first];
        if (!p->armed) {
            memcpy(p->snap, ic->posted, sizeof p->snap);
            p->armed = 1;
        }
        for (int q = 0; q < ic->nqps; q++)
            if (ic->completed[q] < p->snap[q]) return 0;
        if (p->is_signal) {
            int r = ib_post_signal(ic, p->value);
            if (r) return r;
        } else {
            cchani_port_complete_flush(ic->ch, p->value);
            if (ic->ch->timing)
                cchani_port_stage(ic->ch, CCHANI_STAGE_FLUSH, ic->ch->seen_ns, cchani_now_ns());
        }
        ic->first = (ic->first + 1) & (IB_PENDING - 1);
        ic->count--;
    }
    return 0;
}

static int ch_progress_once(ib_channel_t *ic) {
    int r = ib_poll(ic);
    if (r >= 0) r = ib_serve_pending(ic);
    return r;
}

static int ib_progress(cchani_port_channel_t *ch) {
    ib_channel_t *ic = ch->transport;
    if (ic->failed) return 0; /* reported when it happened; nothing more will complete */
    int r = ch_progress_once(ic);
    if (r < 0) return r;
    uint64_t n = ib_outstanding(ic) + ic->count;
    /* A reliable connection retries and then fails a request whose peer is gone, but the time that
     * takes depends on the NIC (Soft-RoCE may never give up): bound it. */
    if (ib_outstanding(ic) && cchani_now_ns() - ic->progress_ns > ic->timeout_ms * 1000000ull) {
        ic->failed = CCHAN_ERR_TIMEOUT;
        return cchani_error(
            CCHAN_ERR_TIMEOUT, where,
            "channel %u to rank %d: %llu put/signal request(s) without a completion "
            "for %llu ms (CCHAN_NET_TIMEOUT_MS): the peer or the fabric stopped "
            "answering",
            ch->id, ch->peer, (unsigned long long)ib_outstanding(ic),
            (unsigned long long)ic->timeout_ms);
    }
    return n > 0x7fffffff ? 0x7fffffff : (int)n;
}

/* ---------------------------------------------------------------- setup */

static int ib_config(ib_channel_t *ic) {
    uint64_t qps;
    const char *mode = cchani_env_str("CCHAN_IB_SIGNAL");
    int r = cchani_env_u64("CCHAN_IB_QPS", 1, &qps);
    if (!r) r = cchani_env_u64("CCHAN_NET_TIMEOUT_MS", IB_DEFAULT_TIMEOUT_MS, &ic->timeout_ms);
    if (r) return r;
    if (qps < 1 || qps > IB_MAX_QPS)
        return cchani_error(-EINVAL, where, "CCHAN_IB_QPS=%llu: use 1 .. %d",
                            (unsigned long long)qps, IB_MAX_QPS);
    if (mode && strcmp(mode, "atomic") && strcmp(mode, "write"))
        return cchani_error(-EINVAL, where, "CCHAN_IB_SIGNAL=%s: use atomic or write", mode);
    ic->nqps = (int)qps;
    ic->signal_by_write = mode && !strcmp(mode, "write");
    return 0;
}

static int ib_env_u8(const char *name, uint64_t dflt, uint64_t max, uint8_t *out) {
    uint64_t v;
    int r = cchani_env_u64(name, dflt, &v);
    if (r) return r;
    if (v > max)
        return cchani_error(-EINVAL, where, "%s=%llu: at most %llu", name, (unsigned long long)v,
                            (unsigned long long)max);
    *out = (uint8_t)v;
    return 0;
}

static int ib_open_device(ib_channel_t *ic, ib_hello_blob_t *blob) {
    const cchani_ibv_t *ibv = ic->ibv;
    struct ibv_device **list = NULL, *dev = NULL;
    int r = cchani_ibv_pick(ibv, ic->ch->comm, &list, &dev, &ic->port);
    if (r) return r;
    snprintf(ic->dev_name, sizeof ic->dev_name, "%s", ibv->get_device_name(dev));
    ic->ctx = ibv->open_device(dev);
    ibv->free_device_list(list);
    if (!ic->ctx)
        return cchani_error(CCHAN_ERR_NO_DEVICE, where, "ibv_open_device(%s): errno %d",
                            ic->dev_name, errno);
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    memset(&da, 0, sizeof da);
    memset(&pa, 0, sizeof pa);
    if (ibv->query_device(ic->ctx, &da) || ibv->query_port(ic->ctx, ic->port, &pa))
        return cchani_error(CCHAN_ERR_SYSTEM, where, "querying %s port %u: errno %d", ic->dev_name,
                            ic->port, errno);
    ic->link_layer = pa.link_layer;
    r = cchani_ibv_gid_index(ibv, ic->ctx, ic->dev_name, ic->port, pa.link_layer, &ic->gid_index);
    if (r) return r;
    union ibv_gid gid;
    memset(&gid, 0, sizeof gid);
    if (pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
        ibv->query_gid(ic->ctx, ic->port, ic->gid_index, &gid))
        return cchani_error(CCHAN_ERR_SYSTEM, where, "%s port %u has no GID %d", ic->dev_name,
                            ic->port, ic->gid_index);
    memcpy(blob->gid, gid.raw, 16);
    blob->lid = pa.lid;
    blob->port = ic->port;
    blob->link_layer = pa.link_layer;
    blob->mtu = (uint8_t)pa.active_mtu;
    blob->atomics = da.atomic_cap != IBV_ATOMIC_NONE;
    if (!(ic->pd = ibv->alloc_pd(ic->ctx)))
        return cchani_error(CCHAN_ERR_SYSTEM, where, "ibv_alloc_pd(%s): errno %d", ic->dev_name,
                            errno);
    int cqe = (int)(IB_DEPTH * (uint32_t)ic->nqps + 16);
    if (!(ic->cq = ibv->create_cq(ic->ctx, cqe, NULL, NULL, 0)))
        return cchani_error(CCHAN_ERR_SYSTEM, where, "ibv_create_cq(%s, %d): errno %d",
                            ic->dev_name, cqe, errno);
    blob->nqps = (uint16_t)ic->nqps;
    for (int q = 0; q < ic->nqps; q++) {
        struct ibv_qp_init_attr ia;
        memset(&ia, 0, sizeof ia);
        ia.send_cq = ia.recv_cq = ic->cq;
        ia.qp_type = IBV_QPT_RC;
        ia.cap.max_send_wr = IB_DEPTH;
        ia.cap.max_recv_wr = 1;
        ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
        ia.sq_sig_all = 1;
        if (!(ic->qp[q] = ibv->create_qp(ic->pd, &ia)))
            return cchani_error(CCHAN_ERR_SYSTEM, where, "ibv_create_qp(%s, RC, %u WRs): errno %d",
                                ic->dev_name, IB_DEPTH, errno);
        struct ibv_qp_attr a;
        memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_INIT;
        a.port_num = ic->port;
        a.qp_access_flags =
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
        if (ibv->modify_qp(ic->qp[q], &a,
                           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
            return cchani_error(CCHAN_ERR_SYSTEM, where, "QP %d to INIT: errno %d", q, errno);
        blob->qpn[q] = ic->qp[q]->qp_num;
        blob->psn[q] = (uint32_t)(cchani_random_u64() & 0xffffff);
    }
    return 0;
}

static int ib_register_local(ib_channel_t *ic) {
    cchani_port_channel_t *ch = ic->ch;
    void *src_host = cchani_mem_host_ptr(ch->src_mem);
    int r = cchani_ibv_reg(ic->ibv, ic->pd, src_host ? src_host : ch->src, ch->src_bytes,
                           src_host ? -1 : cchani_mem_device(ch->src_mem), IBV_ACCESS_LOCAL_WRITE,
                           "the channel's source", &ic->src_mr);
    if (r) return r;
    if (!(ic->scratch = calloc(IB_DEPTH, sizeof *ic->scratch)))
        return cchani_error(-ENOMEM, where, "scratch words");
    return cchani_ibv_reg(ic->ibv, ic->pd, ic->scratch, IB_DEPTH * sizeof *ic->scratch, -1,
                          IBV_ACCESS_LOCAL_WRITE, "signal scratch", &ic->scratch_mr);
}

/* The memory the peer asked for, registered for its writes and atomics. */
static int ib_register_target(ib_channel_t *ic, ib_reply_blob_t *blob) {
    const cchani_net_target_t *t = &ic->target;
    void *dst = t->dst_host ? t->dst_host : t->dst;
    int r = cchani_ibv_reg(ic->ibv, ic->pd, dst, t->dst_bytes, t->dst_host ? -1 : t->dst_device,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                           "the buffer the peer writes into", &ic->dst_mr);
    if (!r)
        r = cchani_ibv_reg(ic->ibv, ic->pd, t->counter, sizeof *t->counter, -1,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                               IBV_ACCESS_REMOTE_ATOMIC,
                           "the inbound semaphore", &ic->counter_mr);
    if (r) return r;
    blob->dst_addr = (uint64_t)(uintptr_t)dst;
    blob->dst_rkey = ic->dst_mr->rkey;
    blob->counter_addr = (uint64_t)(uintptr_t)t->counter;
    blob->counter_rkey = ic->counter_mr->rkey;
    return 0;
}

static int ib_connect_qps(ib_channel_t *ic, const ib_hello_blob_t *mine,
                          const ib_hello_blob_t *theirs) {
    uint8_t tc = 0, sl = 0, timeout = 14;
    int r = ib_env_u8("CCHAN_IB_TC", 0, 255, &tc);
    if (!r) r = ib_env_u8("CCHAN_IB_SL", 0, 15, &sl);
    if (!r) r = ib_env_u8("CCHAN_IB_TIMEOUT", 14, 31, &timeout);
    if (r) return r;
    if (theirs->nqps != mine->nqps || theirs->link_layer != mine->link_layer)
        return cchani_error(CCHAN_ERR_PROTOCOL, where,
                            "rank %d connects with %u QPs over link layer %u, this side %u over %u "
                            "(CCHAN_IB_QPS must agree)",
                            ic->ch->peer, theirs->nqps, theirs->link_layer, mine->nqps,
                            mine->link_layer);
    enum ibv_mtu mtu = (enum ibv_mtu)(mine->mtu < theirs->mtu ? mine->mtu : theirs->mtu);
    for (int q = 0; q < ic->nqps; q++) {
        struct ibv_qp_attr a;
        memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = mtu;
        a.dest_qp_num = theirs->qpn[q];
        a.rq_psn = theirs->psn[q];
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = theirs->lid;
        a.ah_attr.sl = sl;
        a.ah_attr.port_num = ic->port;
        if (mine->link_layer == IBV_LINK_LAYER_ETHERNET) {
            a.ah_attr.is_global = 1;
            memcpy(a.ah_attr.grh.dgid.raw, theirs->gid, 16);
            a.ah_attr.grh.sgid_index = (uint8_t)ic->gid_index;
            a.ah_attr.grh.hop_limit = 64;
            a.ah_attr.grh.traffic_class = tc;
        }
        if (ic->ibv->modify_qp(ic->qp[q], &a,
                               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                   IBV_QP_MIN_RNR_TIMER))
            return cchani_error(CCHAN_ERR_SYSTEM, where,
                                "QP %d to RTR (peer rank %d qpn %u, GID index %d): errno %d (%s)",
                                q, ic->ch->peer, theirs->qpn[q], ic->gid_index, errno,
                                strerror(errno));
        memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_RTS;
        a.timeout = timeout;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = mine->psn[q];
        a.max_rd_atomic = 1;
        if (ic->ibv->modify_qp(ic->qp[q], &a,
                               IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
            return cchani_error(CCHAN_ERR_SYSTEM, where, "QP %d to RTS: errno %d (%s)", q, errno,
                                strerror(errno));
    }
    if (!mine->atomics || !theirs->atomics) ic->signal_by_write = 1;
    return 0;
}

static int ib_setup(ib_channel_t *ic) {
    cchani_port_channel_t *ch = ic->ch;
    cchani_net_hello_t mine, theirs;
    cchani_net_reply_t reply, peer_reply;
    memset(&mine, 0, sizeof mine);
    memset(&reply, 0, sizeof reply);
    ib_hello_blob_t my_blob, their_blob;
    memset(&my_blob, 0, sizeof my_blob);
    int local = cchani_ibv_load(&ic->ibv);
    if (!local) local = ib_config(ic);
    if (!local) local = ib_open_device(ic, &my_blob);
    if (!local) local = ib_register_local(ic);
    memcpy(mine.blob, &my_blob, sizeof my_blob);
    /* A local failure still takes part in the exchange, so the peer learns of it. */
    int exchanged = 0;
    int r = cchani_net_hello(ch, CCHAN_TRANSPORT_IB, &mine, &theirs, &ic->target, &exchanged);
    if (local) r = local;
    if (!exchanged) return r;
    ib_reply_blob_t rb;
    memset(&rb, 0, sizeof rb);
    if (!r) r = ib_register_target(ic, &rb);
    reply.status = r;
    if (!r) reply.counter = __atomic_load_n(ic->target.counter, __ATOMIC_ACQUIRE);
    memcpy(reply.blob, &rb, sizeof rb);
    r = cchani_net_reply(ch, &reply, &peer_reply);
    if (r) return r;
    memcpy(&their_blob, theirs.blob, sizeof their_blob);
    memcpy(&ic->remote, peer_reply.blob, sizeof ic->remote);
    /* Test only: a wrong rkey makes the NIC fail this channel's puts (a remote access error), so
     * that tests can check how a failed work completion is reported. */
    uint64_t rkey_xor = 0;
    r = cchani_env_u64("CCHAN_TEST_IB_RKEY_XOR", 0, &rkey_xor);
    ic->remote.dst_rkey ^= (uint32_t)rkey_xor;
    ch->outbound = ic->signalled = peer_reply.counter;
    if (!r) r = ib_connect_qps(ic, &my_blob, &their_blob);
    return cchani_net_sync(ch, r); /* both sides' QPs are ready to receive */
}

static void ib_free(ib_channel_t *ic) {
    const cchani_ibv_t *ibv = ic->ibv;
    if (ibv) {
        for (int q = 0; q < IB_MAX_QPS; q++)
            if (ic->qp[q]) ibv->destroy_qp(ic->qp[q]);
        struct ibv_mr *mrs[] = {ic->src_mr, ic->dst_mr, ic->counter_mr, ic->scratch_mr};
        for (size_t i = 0; i < sizeof mrs / sizeof mrs[0]; i++)
            if (mrs[i]) ibv->dereg_mr(mrs[i]);
        if (ic->cq) ibv->destroy_cq(ic->cq);
        if (ic->pd) ibv->dealloc_pd(ic->pd);
        if (ic->ctx) ibv->close_device(ic->ctx);
    }
    free(ic->scratch);
    free(ic);
}

static int ib_open(cchani_port_channel_t *ch) {
    ib_channel_t *ic = calloc(1, sizeof *ic);
    if (!ic) return cchani_error(-ENOMEM, where, "channel state");
    ic->ch = ch;
    ic->nqps = 1;
    int r = ib_setup(ic);
    if (r) {
        ib_free(ic);
        return r;
    }
    ch->transport = ic;
    CCHANI_INFO(CCHANI_SUB_TRANSPORT,
                "ib channel %u: connected to rank %d (semaphore %d) over %s port %u, GID index "
                "%d, %d QP(s), signals by %s",
                ch->id, ch->peer, ch->sem_index, ic->dev_name, ic->port, ic->gid_index, ic->nqps,
                ic->signal_by_write ? "RDMA WRITE" : "RDMA atomic add");
    return 0;
}

/* Lets posted requests finish (bounded), then releases QPs, registrations and the device. */
static void ib_close(cchani_port_channel_t *ch) {
    ib_channel_t *ic = ch->transport;
    if (!ic) return;
    uint64_t deadline = cchani_now_ns() + 1000000000ull;
    while (!ic->failed && ib_outstanding(ic) && cchani_now_ns() < deadline)
        if (ib_poll(ic) < 0) break;
    ib_free(ic);
    ch->transport = NULL;
}

const cchani_transport_ops_t cchani_transport_ib = {
    .size = sizeof(cchani_transport_ops_t),
    .name = "ib",
    .open = ib_open,
    .put = ib_put,
    .signal = ib_signal,
    .flush = ib_flush,
    .progress = ib_progress,
    .close = ib_close,
};

#else /* no <infiniband/verbs.h> or CCHAN_ENABLE_IBVERBS=OFF */

static int ib_unavailable(cchani_port_channel_t *ch) {
    (void)ch;
    return cchani_error(CCHAN_ERR_UNSUPPORTED, "ib transport",
                        "this cchan was built without the ib transport (CCHAN_ENABLE_IBVERBS=OFF "
                        "or no <infiniband/verbs.h>: install libibverbs-dev)");
}
static int ib_none_put(cchani_port_channel_t *ch, uint64_t d, uint64_t s, uint64_t n) {
    return ib_unavailable(ch);
}
static int ib_none_count(cchani_port_channel_t *ch, uint64_t v) { return ib_unavailable(ch); }
static void ib_none_close(cchani_port_channel_t *ch) { (void)ch; }

const cchani_transport_ops_t cchani_transport_ib = {
    .size = sizeof(cchani_transport_ops_t),
    .name = "ib",
    .open = ib_unavailable,
    .put = ib_none_put,
    .signal = ib_none_count,
    .flush = ib_none_count,
    .progress = NULL,
    .close = ib_none_close,
};
#endif
