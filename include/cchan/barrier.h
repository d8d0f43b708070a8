/* cchan barriers.
 *
 * Grid barrier: all blocks of one kernel launch meet. The blocks must be co-resident (a cooperative
 * launch, or a grid no larger than what fits at once); otherwise it deadlocks (and with a deadline,
 * traps with CCHAN_WAIT_BARRIER). The counter is monotone, never reset, so the barrier is graph-safe
 * as long as every launch uses the same number of blocks. Call from every thread of every block.
 *
 * Rank barrier: every rank meets every peer over one semaphore per peer (signal then wait). Threads
 * 0..npeers-1 of the calling block each handle one peer (on the host backend, where a block is one
 * thread, that thread handles them all); the block synchronizes around it.
 */
#ifndef CCHAN_BARRIER_H
#define CCHAN_BARRIER_H

#include "cchan/semaphore.h"

CCHAN_EXTERN_C_BEGIN

typedef struct cchan_grid_barrier {
    uint64_t *count;  /* device memory, zero at creation; arrivals so far */
    uint32_t nblocks; /* participants per barrier (blocks on a GPU, threads on the host backend) */
    uint32_t reserved;
    cchan_wait_ctl_t ctl;
} cchan_grid_barrier_t;

/* One participant (e.g. thread 0 of a block, after cchan_block_sync) arrives and waits. */
CCHAN_DEVICE_INLINE int cchan_grid_barrier_arrive_wait(const cchan_grid_barrier_t *b) {
    uint64_t ticket = cchan_fetch_add_release_sys_u64(b->count, 1);
    uint64_t target = (ticket / b->nblocks + 1) * b->nblocks;
    return cchan_wait_geq_u64(b->count, target, &b->ctl, CCHAN_WAIT_BARRIER);
}

/* Whole-block form: every thread of the block calls it; `tid` is the thread's index in the block. */
CCHAN_DEVICE_INLINE int cchan_grid_barrier(const cchan_grid_barrier_t *b, uint32_t tid) {
    int r = CCHAN_OK;
    cchan_block_sync();
    if (tid == 0) r = cchan_grid_barrier_arrive_wait(b);
    cchan_block_sync();
    return r;
}

/* Cross-rank barrier over sems[0..npeers) (one semaphore to each peer). Every thread of the block
 * calls it; on a GPU the block needs at least npeers threads. Returns 0 or a timeout status for the
 * threads that waited. */
CCHAN_DEVICE_INLINE int cchan_rank_barrier(const cchan_semaphore_t *sems, uint32_t npeers,
                                           uint32_t tid) {
    int r = CCHAN_OK;
    cchan_block_sync();
#if defined(CCHAN_BACKEND_HOST)
    /* A host-backend block is one thread, so that thread serves every peer: all signals first, so
     * no peer waits on this rank while it waits on another. */
    (void)tid;
    for (uint32_t p = 0; p < npeers; p++) cchan_semaphore_signal(&sems[p]);
    for (uint32_t p = 0; p < npeers && r == CCHAN_OK; p++) r = cchan_semaphore_wait(&sems[p]);
#else
    if (tid < npeers) {
        cchan_semaphore_signal(&sems[tid]);
        r = cchan_semaphore_wait(&sems[tid]);
    }
#endif
    cchan_block_sync();
    return r;
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_BARRIER_H */
