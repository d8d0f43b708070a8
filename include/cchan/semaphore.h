/* cchan semaphores: one-writer, monotone 64-bit counters between two ranks.
 *
 * A semaphore connects a sender and a receiver. The receiver owns `inbound`, a counter in memory the
 * sender can write (peer GPU memory, or host-pinned memory for proxied channels). The sender keeps
 * `outbound`, the number of signals it has sent, in its own device memory; the receiver keeps
 * `expected`, the value its next wait needs, in its own device memory. Counters never reset, so a
 * semaphore stays correct across kernel launches and CUDA-graph replays.
 *
 * Ordering: signal() is a release at system scope (every write the signalling thread made, or
 * observed through a barrier, before the signal is visible to the receiver when its wait returns);
 * wait() and a successful poll() are acquires at system scope. relaxed_signal() orders nothing: use it
 * when data travels with its own flags (LL packets) or ordering is established otherwise.
 *
 * Threads: one thread per side calls these for a given semaphore at a time (one writer per counter).
 */
#ifndef CCHAN_SEMAPHORE_H
#define CCHAN_SEMAPHORE_H

#include "cchan/wait.h"

CCHAN_EXTERN_C_BEGIN

typedef struct cchan_semaphore {
    uint64_t *inbound;        /* this side's counter; raised by the peer */
    uint64_t *expected;       /* this side's device memory: the value the last wait reached */
    uint64_t *remote_inbound; /* the peer's inbound counter, mapped here; NULL on proxied channels */
    uint64_t *outbound;       /* this side's device memory: signals sent so far */
    cchan_wait_ctl_t ctl;
} cchan_semaphore_t;

/* Raises the peer's counter by one, after every earlier write of this thread (release, system). */
CCHAN_DEVICE_INLINE void cchan_semaphore_signal(const cchan_semaphore_t *s) {
    uint64_t out = *s->outbound + 1;
    *s->outbound = out;
    cchan_store_release_sys_u64(s->remote_inbound, out);
}

/* Raises the peer's counter by one with no ordering of earlier writes. */
CCHAN_DEVICE_INLINE void cchan_semaphore_relaxed_signal(const cchan_semaphore_t *s) {
    uint64_t out = *s->outbound + 1;
    *s->outbound = out;
    cchan_store_relaxed_sys_u64(s->remote_inbound, out);
}

/* Waits for the next signal (acquire, system). Returns 0, or CCHAN_ERR_DEVICE_TIMEOUT on the host
 * backend when the deadline passes (a GPU traps instead). */
CCHAN_DEVICE_INLINE int cchan_semaphore_wait(const cchan_semaphore_t *s) {
    uint64_t want = *s->expected + 1;
    *s->expected = want;
    return cchan_wait_geq_u64(s->inbound, want, &s->ctl, CCHAN_WAIT_SEMAPHORE);
}

/* Non-blocking wait: returns 1 (and consumes the signal) if the next signal has arrived, else 0. */
CCHAN_DEVICE_INLINE int cchan_semaphore_poll(const cchan_semaphore_t *s) {
    uint64_t want = *s->expected + 1;
    if (cchan_load_acquire_sys_u64(s->inbound) < want) return 0;
    *s->expected = want;
    return 1;
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_SEMAPHORE_H */
