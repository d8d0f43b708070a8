/* cchan semaphores: one-writer, monotone 64-bit counters between two ranks.
 *
 * A semaphore connects a sender and a receiver. The receiver owns `inbound`, a counter in memory the
 * sender can write (peer GPU memory, or host-pinned memory for proxied channels); the receiver keeps
 * `expected`, the value its next wait needs, in its own device memory. Counters never reset, so a
 * semaphore stays correct across kernel launches and CUDA-graph replays.
 *
 * How signal raises the peer's counter depends on the link, chosen by the host at creation:
 *   - outbound == NULL (peers with native atomics: NVLink, the host backend): a posted remote add.
 *     Nothing is read on the signalling path, so a signal costs what a raw flag store costs.
 *   - outbound != NULL (PCIe peers without peer atomics): the sender counts its signals in its own
 *     device memory and stores the new count into the peer's counter (one writer per counter).
 *
 * Ordering: signal() is a release at system scope (every write the signalling thread made, or
 * observed through a barrier, before the signal is visible to the receiver when its wait returns);
 * wait() and a successful poll() are acquires at system scope. relaxed_signal() orders nothing: use it
 * when data travels with its own flags (LL packets) or ordering is established otherwise.
 *
 * Threads: one thread per side calls these for a given semaphore at a time.
 */
#ifndef CCHAN_SEMAPHORE_H
#define CCHAN_SEMAPHORE_H

#include "cchan/wait.h"

CCHAN_EXTERN_C_BEGIN

typedef struct cchan_semaphore {
    uint64_t *inbound;        /* this side's counter; raised by the peer */
    uint64_t *expected;       /* this side's device memory: the value the last wait reached */
    uint64_t *remote_inbound; /* the peer's inbound counter, mapped here; NULL on proxied channels */
    uint64_t *outbound;       /* NULL: signal with a remote add; else this side's device memory
                                 counting signals sent, stored into remote_inbound */
    cchan_wait_ctl_t ctl;
} cchan_semaphore_t;

/* Raises the peer's counter by one, after every earlier write of this thread (release, system). */
CCHAN_DEVICE_INLINE void cchan_semaphore_signal(const cchan_semaphore_t *s) {
    if (s->outbound == NULL) {
        cchan_red_add_release_sys_u64(s->remote_inbound, 1);
        return;
    }
    uint64_t out = *s->outbound + 1;
    cchan_store_release_sys_u64(s->remote_inbound, out);
    *s->outbound = out; /* after the remote store: off the signalling path */
}

/* Raises the peer's counter by one with no ordering of earlier writes. */
CCHAN_DEVICE_INLINE void cchan_semaphore_relaxed_signal(const cchan_semaphore_t *s) {
    if (s->outbound == NULL) {
        cchan_red_add_relaxed_sys_u64(s->remote_inbound, 1);
        return;
    }
    uint64_t out = *s->outbound + 1;
    cchan_store_relaxed_sys_u64(s->remote_inbound, out);
    *s->outbound = out;
}

/* Waits for the next signal (acquire, system). Returns 0, or CCHAN_ERR_DEVICE_TIMEOUT on the host
 * backend when the deadline passes (a GPU traps instead). */
CCHAN_DEVICE_INLINE int cchan_semaphore_wait(const cchan_semaphore_t *s) {
    uint64_t want = *s->expected + 1;
    *s->expected = want;
    return cchan_wait_geq_u64(s->inbound, want, &s->ctl, CCHAN_WAIT_SEMAPHORE);
}

/* Waits with the expected count in the caller's register instead of device memory, for a thread
 * that waits many times in one kernel (a ping-pong loop, a pipeline): no device-memory load or store
 * per wait. Take the starting count with cchan_semaphore_expected(), wait for start + 1, start + 2,
 * ..., and before the kernel ends store the last value waited for with
 * cchan_semaphore_set_expected(), so that later plain waits (and graph replays) stay in step.
 * Same ordering and timeout behaviour as cchan_semaphore_wait(). */
CCHAN_DEVICE_INLINE uint64_t cchan_semaphore_expected(const cchan_semaphore_t *s) {
    return *s->expected;
}
CCHAN_DEVICE_INLINE void cchan_semaphore_set_expected(const cchan_semaphore_t *s, uint64_t v) {
    *s->expected = v;
}
CCHAN_DEVICE_INLINE int cchan_semaphore_wait_value(const cchan_semaphore_t *s, uint64_t target) {
    return cchan_wait_geq_u64(s->inbound, target, &s->ctl, CCHAN_WAIT_SEMAPHORE);
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
