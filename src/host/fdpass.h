/* cchan fd passing between processes of one host (not installed).
 *
 * Two ways, chosen by CCHAN_FDPASS (auto | pidfd | scm_rights; default auto):
 *   pidfd       the importer copies the owner's fd itself with pidfd_open + pidfd_getfd. Needs no
 * help from the owner, but needs ptrace access to it (same user; Yama ptrace_scope 0 or a
 *               PR_SET_PTRACER grant; no seccomp filter against pidfd_getfd).
 *   scm_rights  the owner sends the fd over a Unix socket in the abstract namespace that the
 * importer listens on. Needs the owner to take part, so cchan uses it inside the collective
 *               cchan_mem_exchange only.
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

/* The receiving side: a listening socket named after (session, seq, rank). */
CCHANI_HIDDEN int cchani_fdpass_listen(uint64_t session, uint32_t seq, int rank, int backlog,
                                       int *out);
/* Connects to rank `to`'s socket and sends msg with fd. */
CCHANI_HIDDEN int cchani_fdpass_send(uint64_t session, uint32_t seq, int to,
                                     const cchani_fdpass_msg_t *msg, int fd, uint64_t timeout_ms);
/* Accepts one sender (waiting at most timeout_ms) and receives its message and fd; *pid is the
 * sender's process id as the kernel reports it (SO_PEERCRED). */
CCHANI_HIDDEN int cchani_fdpass_recv(int listen_fd, uint64_t timeout_ms, cchani_fdpass_msg_t *msg,
                                     int *fd, pid_t *pid);

#endif /* CCHAN_SRC_HOST_FDPASS_H */
