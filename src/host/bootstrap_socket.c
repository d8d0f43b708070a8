/* cchan bootstrap socket layer (see bootstrap_socket.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap_socket.h"

int cchani_sock_resolve(const char *host, uint16_t port, cchani_boot_addr_t *out) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc)
        return cchani_error(-EHOSTUNREACH, "bootstrap", "cannot resolve '%s': %s", host,
                            gai_strerror(rc));
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next)
        if (ai->ai_family == AF_INET || (ai->ai_family == AF_INET6 && !pick)) pick = ai;
    if (!pick) {
        freeaddrinfo(res);
        return cchani_error(-EHOSTUNREACH, "bootstrap", "'%s' has no IPv4 or IPv6 address", host);
    }
    cchani_boot_addr_t a;
    memset(&a, 0, sizeof a);
    memcpy(&a.sa, pick->ai_addr, pick->ai_addrlen);
    a.len = pick->ai_addrlen;
    cchani_sock_set_port(&a, port);
    freeaddrinfo(res);
    *out = a;
    return 0;
}

void cchani_sock_set_port(cchani_boot_addr_t *a, uint16_t port) {
    if (a->sa.ss_family == AF_INET)
        ((struct sockaddr_in *)&a->sa)->sin_port = htons(port);
    else
        ((struct sockaddr_in6 *)&a->sa)->sin6_port = htons(port);
}

static uint16_t get_port(const cchani_boot_addr_t *a) {
    if (a->sa.ss_family == AF_INET) return ntohs(((const struct sockaddr_in *)&a->sa)->sin_port);
    return ntohs(((const struct sockaddr_in6 *)&a->sa)->sin6_port);
}

void cchani_sock_default_addr(cchani_boot_addr_t *out) {
    memset(out, 0, sizeof *out);
    struct sockaddr_in *sin = (struct sockaddr_in *)&out->sa;
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    out->len = sizeof *sin;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs)) return;
    for (const struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
        memcpy(sin, i->ifa_addr, sizeof *sin);
        sin->sin_port = 0;
        break;
    }
    freeifaddrs(ifs);
}

static int open_socket(int family, int *fd) {
    int s = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) return cchani_errno_error("bootstrap", "socket()");
    *fd = s;
    return 0;
}

int cchani_sock_free_port(const cchani_boot_addr_t *addr, uint16_t *port) {
    int fd = -1;
    cchani_boot_addr_t bound;
    int rc = cchani_sock_listen(addr, &fd, &bound);
    if (rc) return rc;
    close(fd);
    *port = get_port(&bound);
    return 0;
}

int cchani_sock_listen(const cchani_boot_addr_t *addr, int *fd, cchani_boot_addr_t *bound) {
    char where[CCHANI_BOOT_ADDR_STR_BYTES];
    int s = -1, rc = open_socket(addr->sa.ss_family, &s);
    if (rc) return rc;
    /* A restarted job must reuse the root port while its old connections sit in TIME_WAIT. */
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    cchani_boot_addr_str(addr, where);
    if (bind(s, (const struct sockaddr *)&addr->sa, addr->len) || listen(s, SOMAXCONN)) {
        int e = errno;
        close(s);
        errno = e;
        return cchani_errno_error("bootstrap", "cannot listen at %s%s", where,
                                  e == EADDRINUSE ? " (address already in use)" : "");
    }
    cchani_boot_addr_t b;
    memset(&b, 0, sizeof b);
    b.len = sizeof b.sa;
    if (getsockname(s, (struct sockaddr *)&b.sa, &b.len)) {
        rc = cchani_errno_error("bootstrap", "getsockname() of the listener at %s", where);
        close(s);
        return rc;
    }
    *fd = s;
    *bound = b;
    return 0;
}

/* One non-blocking connect attempt, waiting for completion until deadline_ns. Returns 0 or -errno
 * (without recording an error: the caller decides whether to retry). */
static int connect_once(const cchani_boot_addr_t *addr, uint64_t deadline_ns, int *fd) {
    int s = socket(addr->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) return -errno;
    int err = 0;
    if (connect(s, (const struct sockaddr *)&addr->sa, addr->len) < 0) {
        err = errno;
        if (err == EINPROGRESS) {
            struct pollfd p = {.fd = s, .events = POLLOUT};
            int n = poll(&p, 1, cchani_sock_poll_ms(deadline_ns));
            socklen_t len = sizeof err;
            if (n < 0)
                err = errno;
            else if (n == 0)
                err = ETIMEDOUT;
            else if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len))
                err = errno;
        }
    }
    if (err) {
        close(s);
        return -err;
    }
    /* Bootstrap messages are small and latency-bound: do not let Nagle hold them back. */
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *fd = s;
    return 0;
}

/* A refusal means nobody listens (any more); a timeout that the peer is unreachable or too slow. */
static int connect_status(int err) {
    if (err == -ETIMEDOUT) return CCHAN_ERR_TIMEOUT;
    if (err == -ECONNREFUSED) return CCHAN_ERR_PEER;
    return err;
}

static int retryable(int err) {
    return err == -ECONNREFUSED || err == -ETIMEDOUT || err == -ENETUNREACH ||
           err == -EHOSTUNREACH || err == -ECONNRESET || err == -EAGAIN || err == -EINTR;
}

int cchani_sock_connect(const cchani_boot_addr_t *addr, uint64_t deadline_ns, int retry,
                        const char *what, int *fd) {
    char where[CCHANI_BOOT_ADDR_STR_BYTES];
    uint64_t backoff_ns = 10 * 1000000ull;
    unsigned attempts = 0;
    for (;;) {
        int rc = connect_once(addr, deadline_ns, fd);
        attempts++;
        if (rc == 0) return 0;
        uint64_t now = cchani_now_ns();
        if (!retry || !retryable(rc) || now >= deadline_ns) {
            int status = retry && retryable(rc) ? CCHAN_ERR_TIMEOUT : connect_status(rc);
            return cchani_error(
                status, "bootstrap", "cannot connect to %s at %s after %u attempts: %s (errno %d)",
                what, cchani_boot_addr_str(addr, where), attempts, cchan_strerror(rc), -rc);
        }
        uint64_t left = deadline_ns - now;
        uint64_t nap = backoff_ns < left ? backoff_ns : left;
        struct timespec ts = {(time_t)(nap / 1000000000ull), (long)(nap % 1000000000ull)};
        nanosleep(&ts, NULL);
        if (backoff_ns < 200 * 1000000ull) backoff_ns *= 2;
    }
}

/* FNV-1a of the address bytes, not the port: every connection of one host counts as one source. */
static uint64_t source_of(const struct sockaddr_storage *sa) {
    const uint8_t *p = NULL;
    size_t n = 0;
    if (sa->ss_family == AF_INET) {
        p = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
        n = 4;
    } else if (sa->ss_family == AF_INET6) {
        p = (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
        n = 16;
    }
    uint64_t h = 0xcbf29ce484222325ull ^ sa->ss_family;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

int cchani_sock_accept_from(int listen_fd, int *fd, uint64_t *source) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    memset(&sa, 0, sizeof sa);
    int s = accept4(listen_fd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (s < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
            return -EAGAIN;
        return cchani_errno_error("bootstrap", "accept()");
    }
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *fd = s;
    if (source) *source = source_of(&sa);
    return 0;
}

int cchani_sock_accept(int listen_fd, int *fd) {
    return cchani_sock_accept_from(listen_fd, fd, NULL);
}

int cchani_sock_local_addr(int fd, cchani_boot_addr_t *out) {
    cchani_boot_addr_t a;
    memset(&a, 0, sizeof a);
    a.len = sizeof a.sa;
    if (getsockname(fd, (struct sockaddr *)&a.sa, &a.len))
        return cchani_errno_error("bootstrap", "getsockname()");
    cchani_sock_set_port(&a, 0);
    *out = a;
    return 0;
}

ssize_t cchani_sock_read(int fd, void *buf, size_t len) {
    for (;;) {
        ssize_t n = recv(fd, buf, len, 0);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
}

ssize_t cchani_sock_writev(int fd, struct iovec *iov, int iovcnt) {
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
    for (;;) {
        ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
}

int cchani_sock_poll_ms(uint64_t deadline_ns) {
    uint64_t now = cchani_now_ns();
    if (now >= deadline_ns) return 0;
    uint64_t ms = (deadline_ns - now + 999999) / 1000000;
    return ms > 1000000000ull ? 1000000000 : (int)ms;
}
