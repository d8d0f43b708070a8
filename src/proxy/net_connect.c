/* cchan network transports (ib, tcp): connecting a channel to the peer's matching channel through
 * the bootstrap (protocol in transport.h). */
#include <errno.h>
#include <string.h>

#include "transport.h"

#define NET_HELLO_MAGIC 0x686e6363u /* "cchn" */
#define NET_HELLO_VERSION 1u
/* Bootstrap tags of the three rounds: far from the small tags applications use, one set per
 * semaphore index (a pair's channels of one index connect in creation order). */
#define NET_TAG_BASE 0x40000000
#define NET_TAG(sem_index, round) (NET_TAG_BASE + ((sem_index) << 2) + (round))

static const char *const where = "cchan_port_channel_create";

static const char *transport_name(uint32_t t) {
    return t == CCHAN_TRANSPORT_IB ? "ib" : t == CCHAN_TRANSPORT_TCP ? "tcp" : "other";
}

static int net_send(cchani_port_channel_t *ch, int round, const void *buf, size_t bytes) {
    int r = cchan_bootstrap_send(cchan_comm_bootstrap(ch->comm), ch->peer,
                                 NET_TAG(ch->sem_index, round), buf, bytes);
    if (r)
        return cchani_error_wrap(r, where, "connecting to rank %d (semaphore %d), round %d",
                                 ch->peer, ch->sem_index, round);
    return 0;
}

static int net_recv(cchani_port_channel_t *ch, int round, void *buf, size_t bytes) {
    int r = cchan_bootstrap_recv(cchan_comm_bootstrap(ch->comm), ch->peer,
                                 NET_TAG(ch->sem_index, round), buf, bytes);
    if (r)
        return cchani_error_wrap(r, where,
                                 "waiting for rank %d's channel (semaphore %d), round %d: does "
                                 "it create its channel to rank %d too?",
                                 ch->peer, ch->sem_index, round, ch->comm->rank);
    return 0;
}

static int same_ident(const cchani_mem_ident_t *a, const cchani_mem_ident_t *b) {
    return a->key == b->key && a->offset == b->offset && a->size == b->size &&
           a->owner_rank == b->owner_rank && a->kind == b->kind;
}

/* What the peer's hello asks for, checked against this rank's own memory and semaphores. */
static int net_resolve(cchani_port_channel_t *ch, cchan_transport_t transport,
                       const cchani_net_hello_t *h, cchani_net_target_t *t) {
    cchan_comm_t *comm = ch->comm;
    int count = cchani_sem_set_count(ch->sems);
    if (h->magic != NET_HELLO_MAGIC || h->version != NET_HELLO_VERSION)
        return cchani_error(CCHAN_ERR_VERSION, where,
                            "rank %d's hello has magic %#x version %u (want %#x version %u)",
                            ch->peer, h->magic, h->version, NET_HELLO_MAGIC, NET_HELLO_VERSION);
    if (h->transport != (uint32_t)transport || h->rank != ch->peer || h->sem_index != ch->sem_index)
        return cchani_error(CCHAN_ERR_PROTOCOL, where,
                            "rank %d connects with the %s transport as rank %d on semaphore %d; "
                            "this channel is %s, semaphore %d",
                            ch->peer, transport_name(h->transport), h->rank, h->sem_index,
                            transport_name((uint32_t)transport), ch->sem_index);
    if (h->sem_count != count)
        return cchani_error(CCHAN_ERR_PROTOCOL, where,
                            "rank %d's semaphore set has %d semaphores per peer, this rank's %d",
                            ch->peer, h->sem_count, count);
    cchan_mem_t *dst = h->dst.owner_rank == comm->rank ? cchani_mem_find_own(comm, &h->dst) : NULL;
    if (!dst)
        return cchani_error(CCHAN_ERR_PROTOCOL, where,
                            "rank %d's channel writes into %llu bytes of rank %d's registration "
                            "%016llx, which is no live registration of this rank",
                            ch->peer, (unsigned long long)h->dst.size, h->dst.owner_rank,
                            (unsigned long long)h->dst.key);
    const cchan_mem_t *area = cchani_sem_set_area(ch->sems, comm->rank);
    cchani_mem_ident_t own_area;
    cchani_mem_ident(area, &own_area);
    uint64_t slot = ((uint64_t)ch->peer * (uint64_t)count + (uint64_t)ch->sem_index) * 8u;
    if (!same_ident(&own_area, &h->sem) || h->sem_slot != slot)
        return cchani_error(CCHAN_ERR_PROTOCOL, where,
                            "rank %d signals slot %llu of registration %016llx; this rank's "
                            "counter for it is slot %llu of %016llx (different semaphore sets?)",
                            ch->peer, (unsigned long long)h->sem_slot,
                            (unsigned long long)h->sem.key, (unsigned long long)slot,
                            (unsigned long long)own_area.key);
    uint8_t *counters = cchani_mem_host_ptr(area);
    if (!counters)
        return cchani_error(-EINVAL, where,
                            "semaphore set without host views: create it with "
                            "CCHAN_SEM_HOST_MAPPED");
    memset(t, 0, sizeof *t);
    t->dst = cchan_mem_ptr(dst);
    t->dst_host = cchani_mem_host_ptr(dst);
    t->dst_bytes = cchan_mem_size(dst);
    t->dst_device = cchani_mem_device(dst);
    t->counter = (uint64_t *)(counters + slot);
    return 0;
}

int cchani_net_hello(cchani_port_channel_t *ch, cchan_transport_t transport,
                     cchani_net_hello_t *mine, cchani_net_hello_t *theirs,
                     cchani_net_target_t *target, int *exchanged) {
    cchan_comm_t *comm = ch->comm;
    *exchanged = 0;
    int count = cchani_sem_set_count(ch->sems);
    mine->magic = NET_HELLO_MAGIC;
    mine->version = NET_HELLO_VERSION;
    mine->transport = (uint32_t)transport;
    mine->rank = comm->rank;
    mine->sem_index = ch->sem_index;
    mine->sem_count = count;
    cchani_mem_ident(ch->dst_mem, &mine->dst);
    cchani_mem_ident(cchani_sem_set_area(ch->sems, ch->peer), &mine->sem);
    mine->sem_slot = ((uint64_t)comm->rank * (uint64_t)count + (uint64_t)ch->sem_index) * 8u;
    int r = net_send(ch, 0, mine, sizeof *mine);
    if (!r) r = net_recv(ch, 0, theirs, sizeof *theirs);
    if (r) return r;
    *exchanged = 1;
    r = net_resolve(ch, transport, theirs, target);
    return r;
}

int cchani_net_reply(cchani_port_channel_t *ch, cchani_net_reply_t *mine,
                     cchani_net_reply_t *theirs) {
    int r = net_send(ch, 1, mine, sizeof *mine);
    if (!r) r = net_recv(ch, 1, theirs, sizeof *theirs);
    if (r) return r;
    if (mine->status) return mine->status;
    if (theirs->status)
        return cchani_error(CCHAN_ERR_PEER, where,
                            "rank %d could not connect its channel (semaphore %d): %s; its own "
                            "error says why",
                            ch->peer, ch->sem_index, cchan_strerror(theirs->status));
    return 0;
}

int cchani_net_sync(cchani_port_channel_t *ch, int status) {
    int32_t mine = status, theirs = 0;
    int r = net_send(ch, 2, &mine, sizeof mine);
    if (!r) r = net_recv(ch, 2, &theirs, sizeof theirs);
    if (r) return r;
    if (status) return status;
    if (theirs)
        return cchani_error(CCHAN_ERR_PEER, where,
                            "rank %d failed to finish connecting (semaphore %d): %s", ch->peer,
                            ch->sem_index, cchan_strerror(theirs));
    return 0;
}
