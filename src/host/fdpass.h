/* cchan fd passing between processes of one host (not installed).
 *
 * Two ways, chosen by CCHAN_FDPASS (auto | pidfd | scm_rights; default auto):
 *   pidfd       the importer copies the owner's fd itself with pidfd_open + pidfd_getfd. Needs no
 * help from the owner, but needs ptrace access to it (same user; Yama ptrace_scope 0 or a
 *               PR_SET_PTRACER grant; no seccomp filter against pidfd_getfd).
 *   scm_rights  the owner sends the fd over a Unix socket in the abstract namespace that the
 * importer listens on. Needs the owner to take part, so cchan uses it inside the collective
 *               cchan_mem_exchange only. Abstract sockets have no permissions and their names are
 *               listed in /proc/net/unix, so any local user may bind a name first or connect:
 *               names carry a random nonce that travels over the authenticated bootstrap (a name
 *               found taken is drawn again), senders check that the listener is the expected
 *               process of their uid, and receivers close connections from any other process
 *               unread (SO_PEERCRED both ways).
 * auto tries pidfd and falls back to scm_rights where pidfd is refused.
 */
#ifndef CCHAN_SRC_HOST_FDPASS_H
#define CCHAN_SRC_HOST_FDPASS_H

#include <stdint.h>
#include <sys/types.h>

#include "internal.h"

enum cchani_fdpass_mode {
    CCHANI_FDPASS_AUTO = 0,
    CCHANI_FDPASS_PIDFD = 1,
    CCHANI_FDPASS_SCM_RIGHTS = 2
};

/* Reads CCHAN_FDPASS; -EINVAL for an unknown value. */
CCHANI_HIDDEN int cchani_fdpass_mode(int *out);

/* Copies fd `fd` of process `pid` into this process (close-on-exec). 0, or -errno with the last
 * error naming the call, the pid and the fd. */
CCHANI_HIDDEN int cchani_fd_from_pid(pid_t pid, int fd, int *out);
/* Whether a cchani_fd_from_pid failure means "not permitted here" (worth the SCM_RIGHTS fallback)
 * rather than "no such process or fd". */
CCHANI_HIDDEN int cchani_fdpass_refused(int status);

/* What travels with an fd over SCM_RIGHTS, so the receiver can tell whose fd it holds. */
typedef struct cchani_fdpass_msg {
    uint64_t session; /* communicator session */
    uint64_t key;     /* the allocation's key (mem_desc.h) */
    uint32_t seq;     /* which cchan_mem_exchange */
    int32_t rank;     /* sender's rank */
} cchani_fdpass_msg_t;

/* The receiving side: a listening socket named after (session, seq, rank) and a fresh random
 * *nonce, which the senders must learn from this rank (through the bootstrap). */
CCHANI_HIDDEN int cchani_fdpass_listen(uint64_t session, uint32_t seq, int rank, int backlog,
                                       uint64_t *nonce, int *out);
/* Connects to rank `to`'s socket (named with its nonce) and sends msg with fd, once the kernel
 * says the listener is process to_pid of this uid (else CCHAN_ERR_PROTOCOL, nothing sent). Never
 * waits: -EAGAIN while the listener's backlog is full (try again). */
CCHANI_HIDDEN int cchani_fdpass_try_send(uint64_t session, uint32_t seq, int to, uint64_t nonce,
                                         pid_t to_pid, const cchani_fdpass_msg_t *msg, int fd);
/* Accepts waiting connections on the (non-blocking) listener: those of another uid or of a pid
 * `want` rejects are closed unread; from the first wanted one, receives its message and fd (at
 * most timeout_ms) and returns 1 with *pid the sender's process id as the kernel reports it
 * (SO_PEERCRED). 0 when no wanted sender is waiting; negative on failure. */
typedef int (*cchani_fdpass_want_fn)(void *ctx, pid_t pid);
CCHANI_HIDDEN int cchani_fdpass_try_recv(int listen_fd, uint64_t timeout_ms,
                                         cchani_fdpass_want_fn want, void *ctx,
                                         cchani_fdpass_msg_t *msg, int *fd, pid_t *pid);

#endif /* CCHAN_SRC_HOST_FDPASS_H */
