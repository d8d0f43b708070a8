/* cchan tcp transport: port channels between hosts without RDMA.
 *
 * A channel and the peer's matching channel connect through the bootstrap (net_connect.c) and then
 * open two TCP connections, one per direction. On the connection this side opened, its proxy
 * sends requests and reads acknowledgements; on the one it accepted, a receive thread of this
 * channel reads the peer's requests and applies them to this rank's memory:
 *
 *   put     header + payload, written by the receive thread into the peer's dst registration
 *           (staged through host memory and copied with the GPU runtime when that is device memory)
 *   signal  header carrying the outbound count; the receive thread stores it (release) into the
 *           counter once every earlier payload of the stream is in memory
 *   flush   header; the receive thread answers with an ack once everything before it is applied,
 *           and flush_done is raised when that ack arrives: sources reusable, signals delivered
 *
 * The proxy never blocks on the socket while there is room in the channel's request queue
 * (TCP_QUEUE requests): it writes what the socket takes and continues in progress(). A full queue
 * is back-pressure: the proxy waits for the socket, up to CCHAN_NET_TIMEOUT_MS. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap_socket.h"
#include "transport.h"

#define TCP_QUEUE 1024u            /* requests queued per channel (power of two) */
#define TCP_STAGE_BYTES (1u << 20) /* staging for device memory, each side */
#define TCP_DEFAULT_TIMEOUT_MS 30000u

enum tcp_msg { NET_PUT = 1, NET_SIGNAL = 2, NET_FLUSH = 3, NET_CLOSE = 4, NET_ACK = 5 };

/* On the wire, in the sender's byte order (both ends of a cchan job run the same build). */
typedef struct tcp_hdr {
    uint32_t magic; /* TCP_MAGIC: a stream that lost its framing is caught at the next header */
    uint32_t type;  /* enum tcp_msg */
    uint64_t a;     /* put: dst offset; signal: count; flush/ack: flush count */
    uint64_t b;     /* put: bytes */
} tcp_hdr_t;
#define TCP_MAGIC 0x74636363u /* "ccct" */

typedef struct tcp_op {
    uint32_t type;
    uint64_t dst_off, src_off, bytes, value;
} tcp_op_t;

typedef struct tcp_channel {
    cchani_port_channel_t *ch;
    int tx_fd; /* requests out, acks in (the proxy thread) */
    int rx_fd; /* the peer's requests in, acks out (the receive thread) */
    uint64_t timeout_ms;
    /* Proxy thread: the request queue and the position in its head request. */
    tcp_op_t queue[TCP_QUEUE];
    uint32_t first, count;
    size_t hdr_sent;
    uint64_t data_sent;
    uint8_t *stage; /* device sources: the chunk being sent */
    uint64_t stage_len;
    uint8_t ack_buf[sizeof(tcp_hdr_t)];
    size_t ack_got;
    uint64_t flush_requested, flush_acked;
    uint64_t progress_ns; /* last byte sent or ack received while work was pending */
    int failed;           /* first failure: every later request returns it */
    /* Receive thread. */
    pthread_t rx_thread;
    int rx_started;
    int closing; /* atomic: close() is shutting rx_fd down */
    cchani_net_target_t target;
    uint8_t *rx_stage;
} tcp_channel_t;

static int tcp_fail(tcp_channel_t *tc, int status, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int tcp_fail(tcp_channel_t *tc, int status, const char *op, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (!tc->failed) tc->failed = status;
    return cchani_error(status, "tcp transport", "channel %u to rank %d: %s: %s", tc->ch->id,
                        tc->ch->peer, op, what);
}

/* ---------------------------------------------------------------- blocking helpers (setup) */

static int wait_fd(int fd, short events, uint64_t deadline_ns) {
    struct pollfd p = {fd, events, 0};
    for (;;) {
        int n = poll(&p, 1, cchani_sock_poll_ms(deadline_ns));
        if (n > 0) return 0;
        if (n == 0) return CCHAN_ERR_TIMEOUT;
        if (errno != EINTR) return -errno;
    }
}

static int write_all(int fd, const void *buf, size_t len, uint64_t deadline_ns) {
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -errno;
        int r = wait_fd(fd, POLLOUT, deadline_ns);
        if (r) return r;
    }
    return 0;
}

static int read_all_until(int fd, void *buf, size_t len, uint64_t deadline_ns) {
    uint8_t *p = buf;
    while (len) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) return CCHAN_ERR_PEER;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -errno;
        int r = wait_fd(fd, POLLIN, deadline_ns);
        if (r) return r;
    }
    return 0;
}

/* ---------------------------------------------------------------- receive thread */

/* Blocking read on the receive socket: 0, CCHAN_ERR_PEER at end of stream, or -errno. */
static int rx_read(int fd, void *buf, size_t len) {
    uint8_t *p = buf;
    while (len) {
        ssize_t n = recv(fd, p, len, 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n == 0) {
            return CCHAN_ERR_PEER;
        } else if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

static int rx_put(tcp_channel_t *tc, const tcp_hdr_t *h) {
    const cchani_net_target_t *t = &tc->target;
    if (h->b > t->dst_bytes || h->a > t->dst_bytes - h->b) {
        CCHANI_WARN(CCHANI_SUB_TRANSPORT,
                    "tcp channel %u: rank %d put %llu B at offset %llu of a %llu-byte buffer; "
                    "closing the connection",
                    tc->ch->id, tc->ch->peer, (unsigned long long)h->b, (unsigned long long)h->a,
                    (unsigned long long)t->dst_bytes);
        return CCHAN_ERR_RANGE;
    }
    if (t->dst_host) return rx_read(tc->rx_fd, t->dst_host + h->a, h->b);
    for (uint64_t done = 0; done < h->b;) { /* device memory: staged */
        uint64_t n = h->b - done < TCP_STAGE_BYTES ? h->b - done : TCP_STAGE_BYTES;
        int r = rx_read(tc->rx_fd, tc->rx_stage, n);
        if (!r) r = cchani_memcpy(tc->ch->comm, t->dst + h->a + done, tc->rx_stage, n);
        if (r) return r;
        done += n;
    }
    return 0;
}

static int rx_serve(tcp_channel_t *tc) {
    for (;;) {
        tcp_hdr_t h;
        int r = rx_read(tc->rx_fd, &h, sizeof h);
        if (r) return r;
        if (h.magic != TCP_MAGIC) return CCHAN_ERR_PROTOCOL;
        switch (h.type) {
        case NET_PUT: r = rx_put(tc, &h); break;
        case NET_SIGNAL: __atomic_store_n(tc->target.counter, h.a, __ATOMIC_RELEASE); break;
        case NET_FLUSH: {
            tcp_hdr_t ack = {TCP_MAGIC, NET_ACK, h.a, 0};
            r = write_all(tc->rx_fd, &ack, sizeof ack, UINT64_MAX);
            break;
        }
        case NET_CLOSE: return 0;
        default: return CCHAN_ERR_PROTOCOL;
        }
        if (r) return r;
    }
}

static void *rx_main(void *arg) {
    tcp_channel_t *tc = arg;
    pthread_setname_np(pthread_self(), "cchan-tcp-rx");
    int r = tc->target.dst_host ? 0 : cchani_set_device(tc->ch->comm);
    if (!r) r = rx_serve(tc);
    if (r && !__atomic_load_n(&tc->closing, __ATOMIC_ACQUIRE))
        CCHANI_WARN(CCHANI_SUB_TRANSPORT, "tcp channel %u: receiving from rank %d stopped: %s%s",
                    tc->ch->id, tc->ch->peer, cchan_strerror(r),
                    r == CCHAN_ERR_PEER ? " (the peer closed the connection without closing the "
                                          "channel: process gone?)"
                                        : "");
    return NULL;
}

/* ---------------------------------------------------------------- sending (proxy thread) */

static uint64_t op_payload(const tcp_op_t *op) { return op->type == NET_PUT ? op->bytes : 0; }

/* Where the next payload bytes of the head request come from: the source itself (host memory) or
 * the staging buffer, refilled from the device when drained. */
static int next_payload(tcp_channel_t *tc, const tcp_op_t *op, const uint8_t **p, size_t *len) {
    cchani_port_channel_t *ch = tc->ch;
    uint64_t left = op->bytes - tc->data_sent;
    const uint8_t *host_src = cchani_mem_host_ptr(ch->src_mem);
    if (host_src) {
        *p = host_src + op->src_off + tc->data_sent;
        *len = left > (1u << 30) ? (size_t)1 << 30 : (size_t)left;
        return 0;
    }
    uint64_t in_stage = tc->data_sent % TCP_STAGE_BYTES;
    if (in_stage == 0) {
        tc->stage_len = left < TCP_STAGE_BYTES ? left : TCP_STAGE_BYTES;
        int r = cchani_memcpy(ch->comm, tc->stage, ch->src + op->src_off + tc->data_sent,
                              (size_t)tc->stage_len);
        if (r) return r;
    }
    *p = tc->stage + in_stage;
    *len = (size_t)(tc->stage_len - in_stage);
    return 0;
}

/* Writes as much of the queue as the socket takes now. */
static int tcp_pump(tcp_channel_t *tc) {
    while (tc->count) {
        tcp_op_t *op = &tc->queue[tc->first];
        tcp_hdr_t h = {TCP_MAGIC, op->type, op->type == NET_PUT ? op->dst_off : op->value,
                       op->type == NET_PUT ? op->bytes : 0};
        struct iovec iov[2];
        int n = 0;
        if (tc->hdr_sent < sizeof h) {
            iov[n].iov_base = (uint8_t *)&h + tc->hdr_sent;
            iov[n++].iov_len = sizeof h - tc->hdr_sent;
        }
        if (tc->data_sent < op_payload(op)) {
            const uint8_t *p;
            size_t len;
            int r = next_payload(tc, op, &p, &len);
            if (r) return tcp_fail(tc, r, "put", "staging the source: %s", cchan_last_error());
            iov[n].iov_base = (void *)p;
            iov[n++].iov_len = len;
        }
        if (n) {
            struct msghdr msg = {0};
            msg.msg_iov = iov;
            msg.msg_iovlen = (size_t)n;
            ssize_t w = sendmsg(tc->tx_fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
                return tcp_fail(tc, errno == EPIPE || errno == ECONNRESET ? CCHAN_ERR_PEER : -errno,
                                op->type == NET_PUT      ? "put"
                                : op->type == NET_SIGNAL ? "signal"
                                                         : "flush",
                                "send: errno %d (%s)", errno,
                                errno == EPIPE || errno == ECONNRESET
                                    ? "the peer closed the connection: process gone?"
                                    : "socket error");
            }
            tc->progress_ns = cchani_now_ns();
            size_t wrote = (size_t)w, hdr_left = sizeof h - tc->hdr_sent;
            size_t to_hdr = wrote < hdr_left ? wrote : hdr_left;
            tc->hdr_sent += to_hdr;
            tc->data_sent += wrote - to_hdr;
        }
        if (tc->hdr_sent < sizeof h || tc->data_sent < op_payload(op)) continue;
        tc->first = (tc->first + 1) & (TCP_QUEUE - 1);
        tc->count--;
        tc->hdr_sent = 0;
        tc->data_sent = 0;
    }
    return 0;
}

/* Reads the acks that have arrived; completes flushes. */
static int tcp_read_acks(tcp_channel_t *tc) {
    for (;;) {
        ssize_t n = recv(tc->tx_fd, tc->ack_buf + tc->ack_got, sizeof tc->ack_buf - tc->ack_got,
                         MSG_DONTWAIT);
        if (n == 0)
            return tcp_fail(tc, CCHAN_ERR_PEER, "flush",
                            "rank %d closed the connection with flush %llu unacknowledged "
                            "(process gone?)",
                            tc->ch->peer, (unsigned long long)tc->flush_acked + 1);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
            return tcp_fail(tc, CCHAN_ERR_PEER, "flush", "receiving acks: errno %d", errno);
        }
        tc->ack_got += (size_t)n;
        if (tc->ack_got < sizeof tc->ack_buf) continue;
        tcp_hdr_t ack;
        memcpy(&ack, tc->ack_buf, sizeof ack);
        tc->ack_got = 0;
        if (ack.magic != TCP_MAGIC || ack.type != NET_ACK || ack.a > tc->flush_requested)
            return tcp_fail(tc, CCHAN_ERR_PROTOCOL, "flush", "malformed ack from rank %d",
                            tc->ch->peer);
        tc->flush_acked = ack.a;
        tc->progress_ns = cchani_now_ns();
        cchani_port_complete_flush(tc->ch, ack.a);
        if (tc->ch->timing)
            cchani_port_stage(tc->ch, CCHANI_STAGE_FLUSH, tc->ch->seen_ns, cchani_now_ns());
    }
}

static int tcp_in_flight(const tcp_channel_t *tc) {
    return (int)tc->count + (tc->flush_acked < tc->flush_requested);
}

static int tcp_progress(cchani_port_channel_t *ch) {
    tcp_channel_t *tc = ch->transport;
    if (tc->failed) return 0; /* reported when it happened; nothing will complete */
    int r = tcp_pump(tc);
    if (!r && tc->flush_acked < tc->flush_requested) r = tcp_read_acks(tc);
    if (r) return r;
    if (tcp_in_flight(tc) && cchani_now_ns() - tc->progress_ns > tc->timeout_ms * 1000000ull)
        return tcp_fail(tc, CCHAN_ERR_TIMEOUT, tc->count ? "put/signal" : "flush",
                        "no progress for %llu ms (CCHAN_NET_TIMEOUT_MS): the peer stopped "
                        "reading or acknowledging",
                        (unsigned long long)tc->timeout_ms);
    return tcp_in_flight(tc);
}

/* Queues a request; with the queue full, waits for the socket (back-pressure). */
static int tcp_enqueue(tcp_channel_t *tc, const tcp_op_t *op, const char *what) {
    if (tc->failed)
        return cchani_error(tc->failed, "tcp transport",
                            "channel %u to rank %d: %s refused: the connection failed earlier",
                            tc->ch->id, tc->ch->peer, what);
    uint64_t deadline = cchani_now_ns() + tc->timeout_ms * 1000000ull;
    while (tc->count == TCP_QUEUE) {
        int r = tcp_pump(tc);
        if (!r && tc->flush_acked < tc->flush_requested) r = tcp_read_acks(tc);
        if (r) return r;
        if (tc->count < TCP_QUEUE) break;
        r = wait_fd(tc->tx_fd, POLLOUT, deadline);
        if (r)
            return tcp_fail(tc, r == CCHAN_ERR_TIMEOUT ? CCHAN_ERR_TIMEOUT : r, what,
                            "%u requests queued and the socket took nothing for %llu ms", TCP_QUEUE,
                            (unsigned long long)tc->timeout_ms);
    }
    if (tcp_in_flight(tc) == 0) tc->progress_ns = cchani_now_ns();
    tc->queue[(tc->first + tc->count) & (TCP_QUEUE - 1)] = *op;
    tc->count++;
    return tcp_pump(tc);
}

static int tcp_put(cchani_port_channel_t *ch, uint64_t dst_off, uint64_t src_off, uint64_t bytes) {
    tcp_op_t op = {NET_PUT, dst_off, src_off, bytes, 0};
    int r = tcp_enqueue(ch->transport, &op, "put");
    if (!r && ch->timing)
        cchani_port_stage(ch, CCHANI_STAGE_PUT_ISSUE, ch->seen_ns, cchani_now_ns());
    return r;
}

static int tcp_signal(cchani_port_channel_t *ch, uint64_t outbound) {
    tcp_op_t op = {NET_SIGNAL, 0, 0, 0, outbound};
    return tcp_enqueue(ch->transport, &op, "signal");
}

static int tcp_flush(cchani_port_channel_t *ch, uint64_t count) {
    tcp_channel_t *tc = ch->transport;
    tcp_op_t op = {NET_FLUSH, 0, 0, 0, count};
    int r = tcp_enqueue(tc, &op, "flush");
    if (!r) tc->flush_requested = count;
    return r;
}

/* ---------------------------------------------------------------- connecting */

typedef struct tcp_blob {
    uint8_t addr[CCHANI_BOOT_ADDR_WIRE_BYTES];
    uint64_t nonce; /* what the peer sends first on the connection it opens to us */
} tcp_blob_t;

static int tcp_listen_addr(cchani_boot_addr_t *addr) {
    const char *want = cchani_env_str("CCHAN_TCP_ADDR");
    if (!want) {
        cchani_sock_default_addr(addr);
        return 0;
    }
    int r = cchani_sock_resolve(want, 0, addr);
    return r ? cchani_error_wrap(r, "tcp transport", "CCHAN_TCP_ADDR=%s", want) : 0;
}

/* Opens our connection to the peer's listener and accepts the peer's on ours. */
static int tcp_connect_pair(tcp_channel_t *tc, int listen_fd, const tcp_blob_t *mine,
                            const tcp_blob_t *theirs) {
    cchani_port_channel_t *ch = tc->ch;
    uint64_t deadline = cchani_now_ns() + tc->timeout_ms * 1000000ull;
    cchani_boot_addr_t peer_addr;
    char what[64];
    snprintf(what, sizeof what, "rank %d's tcp channel", ch->peer);
    int r = cchani_boot_addr_decode(theirs->addr, &peer_addr);
    if (!r) r = cchani_sock_connect(&peer_addr, deadline, 1, what, &tc->tx_fd);
    if (!r) r = write_all(tc->tx_fd, &theirs->nonce, sizeof theirs->nonce, deadline);
    if (r) return cchani_error_wrap(r, "tcp transport", "connecting to rank %d", ch->peer);
    for (;;) {
        r = cchani_sock_accept(listen_fd, &tc->rx_fd);
        if (r != -EAGAIN) break;
        r = wait_fd(listen_fd, POLLIN, deadline);
        if (r)
            return cchani_error(r, "tcp transport", "rank %d did not connect within %llu ms",
                                ch->peer, (unsigned long long)tc->timeout_ms);
    }
    if (r) return r;
    uint64_t nonce = 0;
    r = read_all_until(tc->rx_fd, &nonce, sizeof nonce, deadline);
    if (r || nonce != mine->nonce)
        return cchani_error(CCHAN_ERR_PROTOCOL, "tcp transport",
                            "the connection accepted for rank %d did not introduce itself as "
                            "that channel (%s)",
                            ch->peer, r ? cchan_strerror(r) : "wrong nonce");
    int one = 1;
    setsockopt(tc->tx_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(tc->rx_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* The receive thread blocks in recv(); close() wakes it with shutdown(). */
    int flags = fcntl(tc->rx_fd, F_GETFL);
    if (flags < 0 || fcntl(tc->rx_fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
        return cchani_errno_error("tcp transport", "fcntl(O_NONBLOCK) of the receive socket");
    return 0;
}

static int tcp_setup(tcp_channel_t *tc, int *listen_fd) {
    cchani_port_channel_t *ch = tc->ch;
    cchani_boot_addr_t addr, bound;
    cchani_net_hello_t mine, theirs;
    cchani_net_reply_t reply, peer_reply;
    memset(&mine, 0, sizeof mine);
    memset(&reply, 0, sizeof reply);
    tcp_blob_t my_blob = {{0}, cchani_random_u64()}, their_blob;
    int r = tcp_listen_addr(&addr);
    if (!r) r = cchani_sock_listen(&addr, listen_fd, &bound);
    if (!r) {
        cchani_boot_addr_encode(&bound, my_blob.addr);
        memcpy(mine.blob, &my_blob, sizeof my_blob);
    }
    /* A failure before the hello still sends it, so the peer learns of it in the reply. */
    int local = r, exchanged = 0;
    r = cchani_net_hello(ch, CCHAN_TRANSPORT_TCP, &mine, &theirs, &tc->target, &exchanged);
    if (local) r = local;
    if (exchanged) {
        reply.status = r;
        if (!r) reply.counter = __atomic_load_n(tc->target.counter, __ATOMIC_ACQUIRE);
        r = cchani_net_reply(ch, &reply, &peer_reply);
    }
    if (r) return r;
    ch->outbound = peer_reply.counter;
    memcpy(&their_blob, theirs.blob, sizeof their_blob);
    r = tcp_connect_pair(tc, *listen_fd, &my_blob, &their_blob);
    return cchani_net_sync(ch, r);
}

static void tcp_free(tcp_channel_t *tc) {
    if (tc->tx_fd >= 0) close(tc->tx_fd);
    if (tc->rx_fd >= 0) close(tc->rx_fd);
    free(tc->stage);
    free(tc->rx_stage);
    free(tc);
}

static int tcp_open(cchani_port_channel_t *ch) {
    tcp_channel_t *tc = calloc(1, sizeof *tc);
    if (!tc) return cchani_error(-ENOMEM, "tcp transport", "channel state");
    tc->ch = ch;
    tc->tx_fd = tc->rx_fd = -1;
    int listen_fd = -1;
    int r = cchani_env_u64("CCHAN_NET_TIMEOUT_MS", TCP_DEFAULT_TIMEOUT_MS, &tc->timeout_ms);
    if (!r && !cchani_mem_host_ptr(ch->src_mem) && !(tc->stage = malloc(TCP_STAGE_BYTES)))
        r = cchani_error(-ENOMEM, "tcp transport", "staging buffer");
    if (!r) r = tcp_setup(tc, &listen_fd);
    if (listen_fd >= 0) close(listen_fd);
    if (!r && !tc->target.dst_host && !(tc->rx_stage = malloc(TCP_STAGE_BYTES)))
        r = cchani_error(-ENOMEM, "tcp transport", "receive staging buffer");
    if (!r) {
        int e = pthread_create(&tc->rx_thread, NULL, rx_main, tc);
        if (e) r = cchani_error(-e, "tcp transport", "receive thread: pthread_create: errno %d", e);
    }
    if (r) {
        tcp_free(tc);
        return r;
    }
    tc->rx_started = 1;
    ch->transport = tc;
    CCHANI_INFO(CCHANI_SUB_TRANSPORT, "tcp channel %u: connected to rank %d (semaphore %d)", ch->id,
                ch->peer, ch->sem_index);
    return 0;
}

/* Sends what is queued and a close (bounded by the timeout), then stops the receive thread. */
static void tcp_close(cchani_port_channel_t *ch) {
    tcp_channel_t *tc = ch->transport;
    if (!tc) return;
    uint64_t deadline = cchani_now_ns() + tc->timeout_ms * 1000000ull;
    while (!tc->failed && tc->count && cchani_now_ns() < deadline) {
        if (tcp_pump(tc)) break;
        if (tc->count) (void)wait_fd(tc->tx_fd, POLLOUT, deadline);
    }
    if (!tc->failed && tc->count == 0) {
        tcp_hdr_t bye = {TCP_MAGIC, NET_CLOSE, 0, 0};
        (void)write_all(tc->tx_fd, &bye, sizeof bye, deadline);
    }
    shutdown(tc->tx_fd, SHUT_WR);
    __atomic_store_n(&tc->closing, 1, __ATOMIC_RELEASE);
    shutdown(tc->rx_fd, SHUT_RDWR);
    if (tc->rx_started) pthread_join(tc->rx_thread, NULL);
    tcp_free(tc);
    ch->transport = NULL;
}

const cchani_transport_ops_t cchani_transport_tcp = {
    .size = sizeof(cchani_transport_ops_t),
    .name = "tcp",
    .open = tcp_open,
    .put = tcp_put,
    .signal = tcp_signal,
    .flush = tcp_flush,
    .progress = tcp_progress,
    .close = tcp_close,
};
