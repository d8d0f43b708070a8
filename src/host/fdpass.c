/* cchan fd passing: pidfd_getfd, and SCM_RIGHTS over abstract Unix sockets (see fdpass.h). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "fdpass.h"
#include "runtime.h"

int cchani_fdpass_mode(int *out) {
    const char *v = cchani_env_str("CCHAN_FDPASS");
    if (!v || !strcasecmp(v, "auto"))
        *out = CCHANI_FDPASS_AUTO;
    else if (!strcasecmp(v, "pidfd"))
        *out = CCHANI_FDPASS_PIDFD;
    else if (!strcasecmp(v, "scm_rights"))
        *out = CCHANI_FDPASS_SCM_RIGHTS;
    else
        return cchani_error(-EINVAL, "environment",
                            "CCHAN_FDPASS='%s' is not auto, pidfd or scm_rights", v);
    return 0;
}

/* ---------------------------------------------------------------- pidfd */

int cchani_fd_from_pid(pid_t pid, int fd, int *out) {
    /* Raw syscalls: the glibc wrappers are newer (2.36) than the kernel calls (5.3 and 5.6). */
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) return cchani_errno_error("pidfd_open", "pid %d", (int)pid);
    int f = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
    int saved = errno;
    close(pidfd);
    if (f < 0) {
        errno = saved;
        return cchani_errno_error("pidfd_getfd", "fd %d of pid %d", fd, (int)pid);
    }
    *out = f;
    return 0;
}

int cchani_fdpass_refused(int status) {
    /* EPERM/EACCES: ptrace access denied (Yama, LSM, seccomp). ENOSYS: kernel or sandbox without
     * the calls. EBADF/ESRCH are real errors: the owner has no such fd or process. */
    return status == -EPERM || status == -EACCES || status == -ENOSYS;
}

/* ---------------------------------------------------------------- SCM_RIGHTS */

/* Names drawn before giving up on binding: a taken name is another process's (or a collision). */
#define FDPASS_BIND_TRIES 8
#define FDPASS_BACKLOG 1024

static socklen_t socket_name(struct sockaddr_un *a, uint64_t session, uint32_t seq, int rank,
                             uint64_t nonce) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    /* Abstract namespace (leading NUL): nothing to unlink, gone with the last socket. The nonce
     * makes the name unpredictable to whoever reads the others in /proc/net/unix. */
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "cchan-fd-%016llx-%u-%d-%016llx",
                     (unsigned long long)session, seq, rank, (unsigned long long)nonce);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int peer_cred(int s, struct ucred *cred) {
    socklen_t clen = sizeof *cred;
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, cred, &clen) != 0)
        return cchani_errno_error("getsockopt", "SO_PEERCRED");
    return 0;
}

static void set_timeouts(int fd, uint64_t timeout_ms) {
    struct timeval tv;
    tv.tv_sec = (time_t)(timeout_ms / 1000);
    tv.tv_usec = (suseconds_t)(timeout_ms % 1000 * 1000);
    /* Failing to set a timeout leaves a blocking socket; the peers are local and alive by then. */
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

int cchani_fdpass_listen(uint64_t session, uint32_t seq, int rank, int backlog, uint64_t *nonce,
                         int *out) {
    for (int t = 0; t < FDPASS_BIND_TRIES; t++) {
        struct sockaddr_un a;
        uint64_t n = cchani_random_u64();
        socklen_t len = socket_name(&a, session, seq, rank, n);
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (s < 0) return cchani_errno_error("socket", "AF_UNIX for fd passing");
        /* A deep backlog: strangers' connections, refused as they are accepted, must not leave
         * the owners waiting for a free slot. */
        if (bind(s, (struct sockaddr *)&a, len) == 0 &&
            listen(s, backlog < FDPASS_BACKLOG ? FDPASS_BACKLOG : backlog) == 0) {
            *nonce = n;
            *out = s;
            return 0;
        }
        int e = errno;
        close(s);
        if (e != EADDRINUSE) {
            errno = e;
            return cchani_errno_error("bind/listen", "abstract socket @%s", a.sun_path + 1);
        }
        CCHANI_INFO(CCHANI_SUB_MEM,
                    "fd-passing socket @%s is taken by another process; drawing "
                    "another name",
                    a.sun_path + 1);
    }
    return cchani_error(-EADDRINUSE, "cchan_mem_exchange",
                        "%d random fd-passing socket names were all taken: is another process "
                        "binding every abstract name?",
                        FDPASS_BIND_TRIES);
}

int cchani_fdpass_try_send(uint64_t session, uint32_t seq, int to, uint64_t nonce, pid_t to_pid,
                           const cchani_fdpass_msg_t *msg, int fd) {
    struct sockaddr_un a;
    socklen_t len = socket_name(&a, session, seq, to, nonce);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) return cchani_errno_error("socket", "AF_UNIX for fd passing to rank %d", to);
    /* A Unix connect does not wait: it succeeds, or fails with EAGAIN while the listener's
     * backlog is full (other processes may fill it; the listener drains them). */
    if (connect(s, (struct sockaddr *)&a, len) != 0) {
        int e = errno;
        close(s);
        if (e == EAGAIN || e == EINTR) return -EAGAIN;
        errno = e;
        return cchani_errno_error("connect", "fd-passing socket @%s of rank %d", a.sun_path + 1,
                                  to);
    }
    /* The fd gives access to this rank's memory: only the rank itself may receive it. */
    struct ucred cred;
    int r = peer_cred(s, &cred);
    if (!r && (cred.pid != to_pid || cred.uid != geteuid()))
        r = cchani_error(CCHAN_ERR_PROTOCOL, "cchan_mem_exchange",
                         "fd-passing socket @%s is held by pid %d uid %u, not by rank %d (pid %d "
                         "uid %u); the fd was not sent",
                         a.sun_path + 1, (int)cred.pid, (unsigned)cred.uid, to, (int)to_pid,
                         (unsigned)geteuid());
    if (r) {
        close(s);
        return r;
    }
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctrl;
    memset(&ctrl, 0, sizeof ctrl);
    struct iovec iov = {(void *)msg, sizeof *msg};
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctrl.buf;
    mh.msg_controllen = sizeof ctrl.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    /* A fresh connection's buffer takes a message this small at once. */
    ssize_t n = sendmsg(s, &mh, MSG_NOSIGNAL);
    if (n != (ssize_t)sizeof *msg)
        r = n < 0 ? cchani_errno_error("sendmsg", "SCM_RIGHTS to rank %d", to)
                  : cchani_error(CCHAN_ERR_PROTOCOL, "sendmsg", "short send (%zd bytes) to rank %d",
                                 n, to);
    close(s);
    return r;
}

static int recv_one(int c, cchani_fdpass_msg_t *msg, int *fd) {
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctrl;
    struct iovec iov = {msg, sizeof *msg};
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctrl.buf;
    mh.msg_controllen = sizeof ctrl.buf;
    ssize_t n = recvmsg(c, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    if (n < 0) return cchani_errno_error("recvmsg", "SCM_RIGHTS");
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    int got = -1;
    if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
        cm->cmsg_len == CMSG_LEN(sizeof(int)))
        memcpy(&got, CMSG_DATA(cm), sizeof got);
    if (n != (ssize_t)sizeof *msg || got < 0 || (mh.msg_flags & MSG_CTRUNC)) {
        if (got >= 0) close(got);
        return cchani_error(CCHAN_ERR_PROTOCOL, "recvmsg",
                            "malformed fd-passing message (%zd bytes, fd %d)", n, got);
    }
    *fd = got;
    return 0;
}

int cchani_fdpass_try_recv(int listen_fd, uint64_t timeout_ms, cchani_fdpass_want_fn want,
                           void *ctx, cchani_fdpass_msg_t *msg, int *fd, pid_t *pid) {
    for (;;) {
        int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            return cchani_errno_error("accept4", "fd-passing socket");
        }
        struct ucred cred;
        int r = peer_cred(c, &cred);
        if (r) {
            close(c);
            return r;
        }
        /* Anyone on the host can connect to an abstract socket: a process that is not one of the
         * expected senders is closed before a byte is read, so it can neither feed this rank an
         * fd nor stall it. */
        if (cred.uid != geteuid() || !want(ctx, cred.pid)) {
            CCHANI_INFO(CCHANI_SUB_MEM,
                        "fd-passing socket: refused a connection from pid %d uid %u (not a rank "
                        "that owes this rank an fd)",
                        (int)cred.pid, (unsigned)cred.uid);
            close(c);
            continue;
        }
        /* An expected sender wrote its message before its connect returned to it. */
        set_timeouts(c, timeout_ms);
        r = recv_one(c, msg, fd);
        close(c);
        if (r) return r;
        *pid = cred.pid;
        return 1;
    }
}
