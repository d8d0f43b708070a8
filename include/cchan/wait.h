/* cchan device-side waiting: deadlines and the diagnostic record left when one expires.
 *
 * Every spin-wait in cchan (semaphore wait, FIFO full, flush, LL packet read) goes through this file.
 * A deadline is off when timeout_ns is 0 (the default). The host sets it from CCHAN_TIMEOUT_MS or the
 * API when it builds a channel. On expiry the waiting thread writes a cchan_diag_t into memory the host
 * can read (host-mapped), then:
 *   - CUDA/HIP: traps, so the kernel fails; cchan_comm_check_device() turns the record into an error
 *     message that names what was awaited;
 *   - host backend: the waiting function returns CCHAN_ERR_DEVICE_TIMEOUT.
 * The fast path (condition already true) reads no clock. While spinning, the clock is read once every
 * CCHAN_WAIT_CLOCK_STRIDE iterations, so the cost is one compare per spin.
 *
 * Abort. Every wait also ends, deadline or not, when the host aborts the communicator (a peer died,
 * or cchan_comm_abort() on any rank): the host writes a nonzero status into the record's `abort`
 * word, which the slow path reads once every CCHAN_WAIT_CLOCK_STRIDE spins; on the host backend
 * every return of a wait reads it too (cchan_wait_done), on a GPU the fast path does not. The
 * waiting thread then records what it waited for with `aborted` set, and traps (GPU) or returns
 * CCHAN_ERR_PEER_DEAD / CCHAN_ERR_ABORTED (host backend).
 */
#ifndef CCHAN_WAIT_H
#define CCHAN_WAIT_H

#include "cchan/arch/arch.h"
#include "cchan/status.h"

CCHAN_EXTERN_C_BEGIN

#define CCHAN_WAIT_CLOCK_STRIDE 1024u

/* What a thread was waiting for. */
enum cchan_wait_kind {
    CCHAN_WAIT_NONE = 0,
    CCHAN_WAIT_SEMAPHORE = 1, /* semaphore/channel wait: expected vs observed counter */
    CCHAN_WAIT_FIFO_FULL = 2, /* port channel push: expected = head, observed = tail */
    CCHAN_WAIT_FLUSH = 3,     /* port channel flush: expected vs completed flush count */
    CCHAN_WAIT_PACKET = 4,    /* LL packet read: expected flag vs observed flag */
    CCHAN_WAIT_BARRIER = 5,   /* grid or rank barrier */
    CCHAN_FAIL_RANGE = 6,     /* not a wait: a request out of range (expected = limit, observed =
                                 the offending end offset) */
    CCHAN_FAIL_DROPPED = 7    /* not a wait: a port-channel flush found requests of the channel
                                 that the proxy dropped (expected = the flush's number, observed =
                                 requests dropped since the previous check; status = the cause) */
};

#define CCHAN_DIAG_EMPTY 0u
#define CCHAN_DIAG_COMPLETE 1u

/* Written by the device when a deadline expires. The first writer wins: it claims the record
 * (claim goes 0 -> 1), writes the fields, then publishes state = CCHAN_DIAG_COMPLETE (release). */
typedef struct cchan_diag {
    uint32_t state; /* CCHAN_DIAG_EMPTY, or CCHAN_DIAG_COMPLETE once the record is whole */
    uint32_t kind;  /* enum cchan_wait_kind */
    int32_t rank;   /* rank of the waiting side */
    int32_t peer;   /* the peer rank the wait depended on, -1 if none */
    uint32_t id;    /* channel or semaphore index as the host numbered it */
    uint32_t claim; /* number of failing threads that tried to write the record; the first writes */
    uint64_t expected; /* value awaited */
    uint64_t observed; /* last value seen */
    uint64_t waited_ns;
    /* Written by the host, read by waiting threads: a nonzero cchan status aborts every wait. */
    int32_t abort;
    int32_t abort_rank; /* the rank that died or aborted, -1 when unknown */
    uint32_t aborted;   /* written with the record: 1 when the wait ended by abort, not deadline */
    int32_t status;     /* written with the record: the status the failing call returned */
} cchan_diag_t;
CCHAN_STATIC_ASSERT(sizeof(cchan_diag_t) == 64, "cchan_diag_t layout");

/* Carried by value in every device handle that can wait. */
typedef struct cchan_wait_ctl {
    cchan_diag_t *diag;  /* NULL: no record (the wait still ends at the deadline) */
    uint64_t timeout_ns; /* 0: wait forever */
    int32_t rank;
    int32_t peer;
    uint32_t id;
    uint32_t reserved;
} cchan_wait_ctl_t;

typedef struct cchan_deadline {
    uint64_t start_ns; /* 0 until the first slow-path clock read */
    uint32_t iter;
} cchan_deadline_t;

CCHAN_DEVICE_INLINE void cchan_deadline_init(cchan_deadline_t *d) {
    d->start_ns = 0;
    d->iter = 0;
}

/* Nonzero (the abort status) once the host has aborted the communicator. */
CCHAN_DEVICE_INLINE int cchan_wait_aborted(const cchan_wait_ctl_t *ctl) {
    return ctl->diag != NULL ? (int)cchan_load_relaxed_sys_u32((const uint32_t *)&ctl->diag->abort)
                             : 0;
}

/* Call once per spin. Returns nonzero when the deadline has expired or the communicator was
 * aborted (cchan_wait_expired() tells which). */
CCHAN_DEVICE_INLINE int cchan_deadline_spin(cchan_deadline_t *d, const cchan_wait_ctl_t *ctl) {
    uint32_t it = ++d->iter;
    cchan_spin_pause(it);
    if (CCHAN_LIKELY((it % CCHAN_WAIT_CLOCK_STRIDE) != 0)) return 0;
    if (CCHAN_UNLIKELY(cchan_wait_aborted(ctl) != 0)) return 1;
    if (ctl->timeout_ns == 0) return 0;
    uint64_t now = cchan_clock_ns();
    if (d->start_ns == 0) {
        d->start_ns = now;
        return 0;
    }
    return now - d->start_ns >= ctl->timeout_ns;
}

/* Records a device-side failure (first writer only) and ends the operation: traps on a GPU, returns
 * `status` on the host backend. */
CCHAN_DEVICE_INLINE int cchan_device_fail(const cchan_wait_ctl_t *ctl, uint32_t kind,
                                          uint64_t expected, uint64_t observed, uint64_t waited_ns,
                                          int status) {
    int aborted = status == CCHAN_ERR_PEER_DEAD || status == CCHAN_ERR_ABORTED;
    cchan_diag_t *g = ctl->diag;
    /* Threads that time out together (a whole block, or every thread of a host-backend group) race
     * here: only the one that claims the record writes it, so it is never a mix of two failures.
     * The fields are written before state (release), so a reader that sees CCHAN_DIAG_COMPLETE
     * (acquire) sees a whole record. All writers of one record run on one device (or one host
     * process), so a device-scope claim suffices. */
    if (g != NULL && cchan_load_relaxed_sys_u32(&g->state) == CCHAN_DIAG_EMPTY &&
        cchan_fetch_add_acq_rel_dev_u32(&g->claim, 1) == 0) {
        g->kind = kind;
        g->rank = ctl->rank;
        g->peer = ctl->peer;
        g->id = ctl->id;
        g->expected = expected;
        g->observed = observed;
        g->waited_ns = waited_ns;
        g->aborted = (uint32_t)aborted;
        g->status = status;
        cchan_store_release_sys_u32(&g->state, CCHAN_DIAG_COMPLETE);
    }
    cchan_trap();
    return status;
}

/* Ends a wait whose cchan_deadline_spin() returned nonzero: by abort or by deadline. */
CCHAN_DEVICE_INLINE int cchan_wait_expired(const cchan_deadline_t *d, const cchan_wait_ctl_t *ctl,
                                           uint32_t kind, uint64_t expected, uint64_t observed) {
    int abort = cchan_wait_aborted(ctl);
    uint64_t waited = d->start_ns != 0 ? cchan_clock_ns() - d->start_ns : 0;
    return cchan_device_fail(ctl, kind, expected, observed, waited,
                             abort == 0                     ? CCHAN_ERR_DEVICE_TIMEOUT
                             : abort == CCHAN_ERR_PEER_DEAD ? CCHAN_ERR_PEER_DEAD
                                                            : CCHAN_ERR_ABORTED);
}

/* Every successful return of a wait goes through here. On the host backend it also reads the abort
 * word, so that a wait satisfied at once (peers that run ahead, a loop of small calls) still ends
 * the operation once the communicator is aborted; there the word is ordinary memory and the load
 * costs nothing. On a GPU it is host-mapped memory, a round trip over PCIe per wait, so the fast
 * path skips it there: kernels are finite, and every host call that launches the next one checks
 * the abort first (cchan_comm_check). */
CCHAN_DEVICE_INLINE int cchan_wait_done(const cchan_wait_ctl_t *ctl, uint32_t kind,
                                        uint64_t expected, uint64_t observed) {
#if defined(CCHAN_BACKEND_HOST)
    if (CCHAN_UNLIKELY(cchan_wait_aborted(ctl) != 0)) {
        cchan_deadline_t d;
        cchan_deadline_init(&d);
        return cchan_wait_expired(&d, ctl, kind, expected, observed);
    }
#else
    (void)ctl, (void)kind, (void)expected, (void)observed;
#endif
    return CCHAN_OK;
}

/* Spins until *p >= target (acquire, system scope). 0 or CCHAN_ERR_DEVICE_TIMEOUT. */
CCHAN_DEVICE_INLINE int cchan_wait_geq_u64(const uint64_t *p, uint64_t target,
                                           const cchan_wait_ctl_t *ctl, uint32_t kind) {
    uint64_t v = cchan_load_acquire_sys_u64(p);
    if (CCHAN_LIKELY(v >= target)) return cchan_wait_done(ctl, kind, target, v);
#if !defined(CCHAN_BACKEND_HOST)
    /* No deadline: the bare poll, so a signal is seen one load after it lands (the deadline
     * bookkeeping below re-reads ctl every spin, because each acquire load clobbers memory); the
     * abort word is read once every CCHAN_WAIT_CLOCK_STRIDE spins. */
    if (ctl->timeout_ns == 0) {
        uint32_t it = 0;
        while ((v = cchan_load_acquire_sys_u64(p)) < target) {
            if (CCHAN_UNLIKELY((++it % CCHAN_WAIT_CLOCK_STRIDE) == 0) &&
                cchan_wait_aborted(ctl) != 0) {
                cchan_deadline_t d;
                cchan_deadline_init(&d);
                return cchan_wait_expired(&d, ctl, kind, target, v);
            }
        }
        return CCHAN_OK;
    }
#endif
    cchan_deadline_t d;
    cchan_deadline_init(&d);
    while ((v = cchan_load_acquire_sys_u64(p)) < target) {
        if (CCHAN_UNLIKELY(cchan_deadline_spin(&d, ctl)))
            return cchan_wait_expired(&d, ctl, kind, target, v);
    }
    return cchan_wait_done(ctl, kind, target, v);
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_WAIT_H */
