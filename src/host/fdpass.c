/* cchan fd passing: pidfd_getfd, and SCM_RIGHTS over abstract Unix sockets (see fdpass.h). */
#include <errno.h>
#include <poll.h>
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

static socklen_t socket_name(struct sockaddr_un *a, uint64_t session, uint32_t seq, int rank) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    /* Abstract namespace (leading NUL): nothing to unlink, gone with the last socket. */
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "cchan-fd-%016llx-%u-%d",
                     (unsigned long long)session, seq, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void set_timeouts(int fd, uint64_t timeout_ms) {
    struct timeval tv;
    tv.tv_sec = (time_t)(timeout_ms / 1000);
    tv.tv_usec = (suseconds_t)(timeout_ms % 1000 * 1000);
    /* Failing to set a timeout leaves a blocking socket; the peers are local and alive by then. */
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

int cchani_fdpass_listen(uint64_t session, uint32_t seq, int rank, int backlog, int *out) {
    struct sockaddr_un a;
    socklen_t len = socket_name(&a, session, seq, rank);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return cchani_errno_error("socket", "AF_UNIX for fd passing");
    if (bind(s, (struct sockaddr *)&a, len) != 0 || listen(s, backlog) != 0) {
        int r = cchani_errno_error("bind/listen", "abstract socket @%s", a.sun_path + 1);
        close(s);
        return r;
    }
    *out = s;
    return 0;
}

int cchani_fdpass_send(uint64_t session, uint32_t seq, int to, const cchani_fdpass_msg_t *msg,
                       int fd, uint64_t timeout_ms) {
    struct sockaddr_un a;
    socklen_t len = socket_name(&a, session, seq, to);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return cchani_errno_error("socket", "AF_UNIX for fd passing to rank %d", to);
    set_timeouts(s, timeout_ms);
    int r = 0;
    if (connect(s, (struct sockaddr *)&a, len) != 0) {
        r = cchani_errno_error("connect", "fd-passing socket @%s of rank %d", a.sun_path + 1, to);
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
    ssize_t n = sendmsg(s, &mh, MSG_NOSIGNAL);
    if (n != (ssize_t)sizeof *msg)
        r = n < 0 ? cchani_errno_error("sendmsg", "SCM_RIGHTS to rank %d", to)
                  : cchani_error(CCHAN_ERR_PROTOCOL, "sendmsg", "short send (%zd bytes) to rank %d",
                                 n, to);
    close(s);
    return r;
}

static int wait_readable(int fd, uint64_t timeout_ms) {
    struct pollfd p = {fd, POLLIN, 0};
    int ms = timeout_ms > 3600000u ? 3600000 : (int)timeout_ms;
    int n;
    do n = poll(&p, 1, ms);
    while (n < 0 && errno == EINTR);
    if (n < 0) return cchani_errno_error("poll", "fd-passing socket");
    if (n == 0)
        return cchani_error(CCHAN_ERR_TIMEOUT, "cchan_mem_exchange",
                            "no rank sent its fd within %llu ms (CCHAN_BOOTSTRAP_TIMEOUT_MS)",
                            (unsigned long long)timeout_ms);
    return 0;
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

int cchani_fdpass_recv(int listen_fd, uint64_t timeout_ms, cchani_fdpass_msg_t *msg, int *fd,
                       pid_t *pid) {
    int r = wait_readable(listen_fd, timeout_ms);
    if (r) return r;
    int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) return cchani_errno_error("accept4", "fd-passing socket");
    set_timeouts(c, timeout_ms);
    struct ucred cred;
    socklen_t clen = sizeof cred;
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0) {
        r = cchani_errno_error("getsockopt", "SO_PEERCRED");
        close(c);
        return r;
    }
    r = recv_one(c, msg, fd);
    close(c);
    if (!r) *pid = cred.pid;
    return r;
}
