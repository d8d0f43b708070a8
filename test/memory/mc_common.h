/* Memory-channel test fixture: every rank allocates one window, exchanges it, and builds a channel
 * to every peer.
 *
 * Window of each rank:  [ inbox slot 0 | inbox slot 1 | ... | inbox slot n-1 | outbox | scratch ]
 * Rank r writes into slot r of each peer's inbox; the outbox holds data peers read (get, reduce);
 * scratch is local. The channel to peer p: remote = p's window (imported), local = recv = own
 * window, semaphore (p, 0) for data and (p, 1) for the rank barrier.
 */
#ifndef CCHAN_TEST_MC_COMMON_H
#define CCHAN_TEST_MC_COMMON_H

#include "mem_test.h"

#define MC_MAX_RANKS 8

typedef struct mc_fixture {
    cchan_comm_t *comm;
    int n, me;
    uint64_t slot; /* bytes per inbox slot, outbox and scratch */
    cchan_mem_t *win;
    cchan_mem_t *peers[MC_MAX_RANKS];
    cchan_sem_set_t *sems;
    cchan_memory_channel_t ch[MC_MAX_RANKS]; /* [me] unused */
    cchan_semaphore_t barrier[MC_MAX_RANKS - 1];
    int fds0, maps0; /* resources before the fixture, to check destroy */
} mc_fixture_t;

static inline uint64_t mc_inbox(const mc_fixture_t *f, int sender) {
    return (uint64_t)sender * f->slot;
}
static inline uint64_t mc_outbox(const mc_fixture_t *f) { return (uint64_t)f->n * f->slot; }
static inline uint64_t mc_scratch(const mc_fixture_t *f) { return (uint64_t)(f->n + 1) * f->slot; }
static inline uint8_t *mc_local(const mc_fixture_t *f) { return (uint8_t *)cchan_mem_ptr(f->win); }

static inline void mc_setup(mc_fixture_t *f, uint64_t slot, uint64_t timeout_ms) {
    memset(f, 0, sizeof *f);
    f->fds0 = mt_open_fds();
    f->maps0 = mt_cchan_mappings();
    f->comm = mt_comm();
    f->n = cchan_comm_size(f->comm);
    f->me = cchan_comm_rank(f->comm);
    f->slot = (slot + 63) / 64 * 64; /* typed accesses and packets need aligned slots */
    MT_CHECK(f->n <= MC_MAX_RANKS);
    MT_OK(cchan_comm_set_timeout_ms(f->comm, timeout_ms));
    MT_OK(cchan_mem_alloc(f->comm, (size_t)((uint64_t)(f->n + 2) * slot), 0, &f->win));
    MT_OK(cchan_mem_exchange(f->comm, f->win, f->peers));
    MT_OK(cchan_sem_set_create(f->comm, 2, 0, &f->sems));
    int k = 0;
    for (int p = 0; p < f->n; p++) {
        if (p == f->me) continue;
        MT_OK(cchan_memory_channel_init(f->comm, f->sems, p, 0, f->peers[p], f->win, f->win,
                                        &f->ch[p]));
        MT_OK(cchan_sem_set_get(f->sems, p, 1, &f->barrier[k++]));
    }
}

/* One thread of the rank calls this. */
static inline void mc_rank_barrier(mc_fixture_t *f) {
    MT_OK(cchan_rank_barrier(f->barrier, (uint32_t)(f->n - 1), 0));
}

static inline void mc_teardown(mc_fixture_t *f) {
    mt_barrier(f->comm);
    MT_OK(cchan_sem_set_destroy(f->sems));
    for (int p = 0; p < f->n; p++)
        if (p != f->me) MT_OK(cchan_mem_destroy(f->peers[p]));
    MT_OK(cchan_mem_destroy(f->win));
    MT_OK(cchan_comm_destroy(f->comm));
    MT_CHECK(mt_open_fds() == f->fds0);
    MT_CHECK(mt_cchan_mappings() == f->maps0);
}

#endif /* CCHAN_TEST_MC_COMMON_H */
