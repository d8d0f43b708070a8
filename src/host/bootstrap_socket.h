/* cchan bootstrap socket layer: TCP helpers over IPv4/IPv6 (not installed).
 *
 * Every socket is non-blocking and close-on-exec; writes never raise SIGPIPE. Functions return 0
 * or a negative status with the last error set, except the read/write primitives, which return
 * -EAGAIN silently because waiting is the caller's business. */
#ifndef CCHAN_SRC_HOST_BOOTSTRAP_SOCKET_H
#define CCHAN_SRC_HOST_BOOTSTRAP_SOCKET_H

#include <sys/types.h>
#include <sys/uio.h>

#include "bootstrap_wire.h"

/* Resolves a numeric address or host name (IPv4 preferred, then IPv6). */
CCHANI_HIDDEN int cchani_sock_resolve(const char *host, uint16_t port, cchani_boot_addr_t *out);
CCHANI_HIDDEN void cchani_sock_set_port(cchani_boot_addr_t *addr, uint16_t port);
/* The first up, non-loopback IPv4 interface address, else 127.0.0.1 (port 0). */
CCHANI_HIDDEN void cchani_sock_default_addr(cchani_boot_addr_t *out);
/* A port on addr's interface that nothing listens on now (bind to port 0, then release). */
CCHANI_HIDDEN int cchani_sock_free_port(const cchani_boot_addr_t *addr, uint16_t *port);

/* Listens at addr (port 0: any free port); *bound is the address actually bound. */
CCHANI_HIDDEN int cchani_sock_listen(const cchani_boot_addr_t *addr, int *fd,
                                     cchani_boot_addr_t *bound);
/* Connects to addr before deadline_ns (CLOCK_MONOTONIC). With retry, refused or unreachable
 * attempts are repeated until the deadline (the listener may not exist yet); without, the first
 * refusal is an error. what names the peer in error messages. */
CCHANI_HIDDEN int cchani_sock_connect(const cchani_boot_addr_t *addr, uint64_t deadline_ns,
                                      int retry, const char *what, int *fd);
/* Accepts one pending connection: 0 and *fd, -EAGAIN when none is pending, or an error. */
CCHANI_HIDDEN int cchani_sock_accept(int listen_fd, int *fd);
/* The same, with a hash of the remote address (without the port) in *source. */
CCHANI_HIDDEN int cchani_sock_accept_from(int listen_fd, int *fd, uint64_t *source);
/* The local address of a connected socket, port set to 0: the interface that reaches the peer. */
CCHANI_HIDDEN int cchani_sock_local_addr(int fd, cchani_boot_addr_t *out);

/* Bytes moved (> 0), 0 on end of stream (read only), -EAGAIN, or -errno. */
CCHANI_HIDDEN ssize_t cchani_sock_read(int fd, void *buf, size_t len);
CCHANI_HIDDEN ssize_t cchani_sock_writev(int fd, struct iovec *iov, int iovcnt);

/* Milliseconds left until deadline_ns for poll(): 0 once it has passed, capped to fit an int. */
CCHANI_HIDDEN int cchani_sock_poll_ms(uint64_t deadline_ns);

#endif /* CCHAN_SRC_HOST_BOOTSTRAP_SOCKET_H */
