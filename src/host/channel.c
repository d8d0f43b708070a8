/* cchan memory channels and grid barriers: device handles the host fills in. */
#include <errno.h>
#include <string.h>

#include "runtime.h"

static const char *const mc_where = "cchan_memory_channel_init";

/* A channel writes into the peer's memory as mapped here, and reads and receives in this rank's
 * own memory; mixing them up would make every put land in the wrong process. */
static int check_remote(const cchan_comm_t *comm, const cchan_mem_t *remote, int peer) {
    if (cchani_mem_comm(remote) == comm && cchan_mem_ptr(remote) == NULL) {
        int owner = cchan_mem_rank(remote);
        return cchani_error(CCHAN_ERR_UNSUPPORTED, mc_where,
                            "rank %d's memory is on another host (%s; rank %d is on %s) and not "
                            "mapped here: memory channels need load/store access; use a port "
                            "channel with the ib or tcp transport",
                            owner, comm->peers[owner].hostname, comm->rank,
                            comm->peers[comm->rank].hostname);
    }
    if (cchani_mem_comm(remote) != comm || cchan_mem_rank(remote) != peer ||
        (peer != comm->rank && cchani_mem_is_local(remote)))
        return cchani_error(-EINVAL, mc_where,
                            "remote must be rank %d's memory imported into this communicator "
                            "(cchan_mem_exchange or cchan_mem_import); it is rank %d's%s",
                            peer, cchan_mem_rank(remote),
                            cchani_mem_comm(remote) != comm ? " of another communicator" : "");
    return 0;
}

static int check_own(const cchan_comm_t *comm, const cchan_mem_t *mem, const char *role) {
    if (cchani_mem_comm(mem) != comm || !cchani_mem_is_local(mem))
        return cchani_error(
            -EINVAL, mc_where,
            "%s must be memory this rank registered or allocated in this communicator", role);
    return 0;
}

int cchan_memory_channel_init(cchan_comm_t *comm, cchan_sem_set_t *sems, int peer, int sem_index,
                              const cchan_mem_t *remote, const cchan_mem_t *local,
                              const cchan_mem_t *recv, cchan_memory_channel_t *out) {
    CCHANI_CHECK_ARG(comm != NULL && sems != NULL && remote != NULL && local != NULL && out != NULL,
                     mc_where);
    CCHANI_CHECK_ABORT(comm, mc_where);
    if (peer < 0 || peer >= comm->nranks)
        return cchani_error(-EINVAL, mc_where, "peer %d of a %d-rank communicator", peer,
                            comm->nranks);
    if (cchani_sem_set_comm(sems) != comm)
        return cchani_error(-EINVAL, mc_where, "the semaphore set belongs to another communicator");
    int r = check_remote(comm, remote, peer);
    if (!r) r = check_own(comm, local, "local");
    if (!r && recv) r = check_own(comm, recv, "recv");
    cchan_memory_channel_t ch;
    memset(&ch, 0, sizeof ch);
    if (!r) r = cchan_sem_set_get(sems, peer, sem_index, &ch.sem);
    if (r) return r;
    ch.remote = (uint8_t *)cchan_mem_ptr(remote);
    ch.remote_bytes = cchan_mem_size(remote);
    ch.local = (uint8_t *)cchan_mem_ptr(local);
    ch.local_bytes = cchan_mem_size(local);
    if (recv) {
        ch.recv = (uint8_t *)cchan_mem_ptr(recv);
        ch.recv_bytes = cchan_mem_size(recv);
    }
    *out = ch;
    return 0;
}

int cchan_grid_barrier_create(cchan_comm_t *comm, uint32_t nblocks, cchan_grid_barrier_t *out) {
    const char *where = "cchan_grid_barrier_create";
    CCHANI_CHECK_ARG(comm != NULL && out != NULL && nblocks >= 1, where);
    CCHANI_CHECK_ABORT(comm, where);
    void *count = NULL;
    int r = cchani_dev_alloc(comm, sizeof(uint64_t), &count);
    if (r) return cchani_error_wrap(r, where, "arrival counter");
    cchan_grid_barrier_t b;
    memset(&b, 0, sizeof b);
    b.count = (uint64_t *)count;
    b.nblocks = nblocks;
    b.ctl = cchan_comm_wait_ctl(comm, -1, cchani_comm_next_id(comm));
    cchani_comm_hold(comm);
    *out = b;
    return 0;
}

int cchan_grid_barrier_destroy(cchan_comm_t *comm, cchan_grid_barrier_t *b) {
    CCHANI_CHECK_ARG(comm != NULL && b != NULL, "cchan_grid_barrier_destroy");
    if (!b->count) return 0;
    int r = cchani_dev_free(comm, b->count);
    memset(b, 0, sizeof *b);
    cchani_comm_release(comm);
    return r;
}
