/* cchan semaphore sets: `count` semaphores between this rank and each peer, in each direction.
 *
 * Layout, the same on every rank: rank r's inbound counter for (peer p, index i) is slot
 * [p * count + i] of r's inbound area, which every local peer maps (cchan_mem_exchange). Signalling
 * (peer p, index i) from rank r therefore stores into slot [r * count + i] of p's area. The
 * expected and outbound counts of this rank live in its own device memory, slot [p * count + i] of
 * each.
 */
#include <errno.h>
#include <stdlib.h>

#include "gpu.h"
#include "runtime.h"

/* Keeps nranks * count * 8 bytes far from overflow and the areas a sane size. */
#define CCHANI_SEM_MAX_COUNT (1 << 20)

struct cchan_sem_set {
    cchan_comm_t *comm;
    int count;
    uint32_t first_id;    /* diagnostics id of semaphore index 0 */
    cchan_mem_t *inbound; /* this rank's inbound counters */
    cchan_mem_t **areas;  /* every rank's inbound counters mapped here; [own rank] = inbound */
    uint64_t *state;      /* device memory: expected[nranks * count], then outbound[...] */
    unsigned flags;
};

static size_t slots(const cchan_sem_set_t *set) {
    return (size_t)set->comm->nranks * (size_t)set->count;
}

/* Releases everything the set holds; returns the first failure. */
static int set_free(cchan_sem_set_t *set) {
    cchan_comm_t *comm = set->comm;
    int first = 0;
    for (int p = 0; set->areas && p < comm->nranks; p++) {
        int r = p == comm->rank ? 0 : cchan_mem_destroy(set->areas[p]);
        if (r && !first) first = r;
    }
    int r = cchan_mem_destroy(set->inbound);
    if (r && !first) first = r;
    r = cchani_dev_free(comm, set->state);
    if (r && !first) first = r;
    free(set->areas);
    free(set);
    return first;
}

static int allocate_local(cchan_sem_set_t *set, unsigned flags) {
    set->areas = (cchan_mem_t **)calloc((size_t)set->comm->nranks, sizeof *set->areas);
    if (!set->areas) return cchani_error(-ENOMEM, "cchan_sem_set_create", "peer table");
    unsigned mem_flags = (flags & CCHAN_SEM_HOST_MAPPED) ? CCHAN_MEM_HOST : 0u;
    int r = cchan_mem_alloc(set->comm, slots(set) * sizeof(uint64_t), mem_flags, &set->inbound);
    if (!r)
        r = cchani_dev_alloc(set->comm, 2 * slots(set) * sizeof(uint64_t), (void **)&set->state);
    return r;
}

int cchan_sem_set_create(cchan_comm_t *comm, int count, unsigned flags, cchan_sem_set_t **out) {
    const char *where = "cchan_sem_set_create";
    CCHANI_CHECK_ARG(comm != NULL, where);
    CCHANI_CHECK_ABORT(comm, where);
    /* A bad argument on one rank fails every rank at once, naming it (cchani_comm_agree). */
    int r = 0;
    if (out == NULL)
        r = cchani_error(-EINVAL, where, "out is NULL");
    else if (count < 1 || count > CCHANI_SEM_MAX_COUNT)
        r = cchani_error(-EINVAL, where, "count %d is out of range [1, %d]", count,
                         CCHANI_SEM_MAX_COUNT);
    else if (flags & ~CCHAN_SEM_HOST_MAPPED)
        r = cchani_error(-EINVAL, where, "flags 0x%x: only CCHAN_SEM_HOST_MAPPED (0x%x) is known",
                         flags, CCHAN_SEM_HOST_MAPPED);
    cchan_sem_set_t *set = NULL;
    if (!r) {
        set = (cchan_sem_set_t *)calloc(1, sizeof *set);
        if (!set) r = cchani_error(-ENOMEM, where, "semaphore set");
    }
    if (set) {
        set->comm = comm;
        set->count = count;
        set->flags = flags;
        r = allocate_local(set, flags);
    }
    r = cchani_comm_agree(comm, r, where);
    if (!r) r = cchan_mem_exchange(comm, set->inbound, set->areas);
    if (r) {
        if (set) (void)set_free(set);
        return r;
    }
    set->first_id = cchani_comm_reserve_ids(comm, (uint32_t)count);
    cchani_comm_hold(comm);
    *out = set;
    return 0;
}

static int check_slot(const cchan_sem_set_t *set, int peer, int index, const char *where) {
    CCHANI_CHECK_ARG(set != NULL, where);
    if (peer < 0 || peer >= set->comm->nranks || index < 0 || index >= set->count)
        return cchani_error(-EINVAL, where,
                            "semaphore (peer %d, index %d) of a set of %d ranks x %d", peer, index,
                            set->comm->nranks, set->count);
    return 0;
}

/* A posted remote add keeps the signalling thread from reading its own count first (semaphore.h);
 * it needs atomics on the peer's memory: shared memory on the host platform, GPUs with native
 * peer atomics (NVLink). Host-mapped sets stay with stores: a GPU's atomics on pinned host memory
 * over PCIe are not guaranteed, and proxies store counts into them. */
static int signal_by_add(const cchan_sem_set_t *set, int peer) {
    const cchan_comm_t *comm = set->comm;
    if (set->flags & CCHAN_SEM_HOST_MAPPED) return 0;
    if (comm->platform == CCHAN_PLATFORM_HOST) return 1;
    int native = 0;
    if (cchani_gpu_native_peer_atomics(comm->device, comm->peers[peer].device, &native)) {
        cchani_clear_error();
        return 0;
    }
    return native;
}

int cchan_sem_set_get(cchan_sem_set_t *set, int peer, int index, cchan_semaphore_t *out) {
    int r = check_slot(set, peer, index, "cchan_sem_set_get");
    if (r) return r;
    CCHANI_CHECK_ARG(out != NULL, "cchan_sem_set_get");
    CCHANI_CHECK_ABORT(set->comm, "cchan_sem_set_get");
    size_t mine = (size_t)peer * (size_t)set->count + (size_t)index;
    size_t theirs = (size_t)set->comm->rank * (size_t)set->count + (size_t)index;
    cchan_semaphore_t s;
    s.inbound = (uint64_t *)cchan_mem_ptr(set->inbound) + mine;
    s.expected = set->state + mine;
    s.outbound = signal_by_add(set, peer) ? NULL : set->state + slots(set) + mine;
    /* A peer on another host has no mapping here: only port channels (ib, tcp) signal it. */
    uint64_t *area = (uint64_t *)cchan_mem_ptr(set->areas[peer]);
    s.remote_inbound = area ? area + theirs : NULL;
    s.ctl = cchan_comm_wait_ctl(set->comm, peer, set->first_id + (uint32_t)index);
    *out = s;
    return 0;
}

uint64_t *cchan_sem_set_inbound(cchan_sem_set_t *set, int peer, int index) {
    if (check_slot(set, peer, index, "cchan_sem_set_inbound")) return NULL;
    uint64_t *base = (uint64_t *)cchani_mem_host_ptr(set->inbound);
    return base ? base + (size_t)peer * (size_t)set->count + (size_t)index : NULL;
}

uint64_t *cchan_sem_set_remote_inbound(cchan_sem_set_t *set, int peer, int index) {
    if (check_slot(set, peer, index, "cchan_sem_set_remote_inbound")) return NULL;
    uint64_t *base = (uint64_t *)cchani_mem_host_ptr(set->areas[peer]);
    return base ? base + (size_t)set->comm->rank * (size_t)set->count + (size_t)index : NULL;
}

int cchan_sem_set_destroy(cchan_sem_set_t *set) {
    if (!set) return 0;
    cchan_comm_t *comm = set->comm;
    int r = set_free(set);
    cchani_comm_release(comm);
    return r;
}

cchan_comm_t *cchani_sem_set_comm(const cchan_sem_set_t *set) { return set ? set->comm : NULL; }
unsigned cchani_sem_set_flags(const cchan_sem_set_t *set) { return set ? set->flags : 0u; }
int cchani_sem_set_count(const cchan_sem_set_t *set) { return set ? set->count : 0; }
/* Rank `rank`'s inbound counters (this rank's own registration, or the peer's import). */
const cchan_mem_t *cchani_sem_set_area(const cchan_sem_set_t *set, int rank) {
    return set && rank >= 0 && rank < set->comm->nranks ? set->areas[rank] : NULL;
}
