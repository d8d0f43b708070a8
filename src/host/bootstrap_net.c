/* cchan bootstrap message layer: connections, progress, per-peer queues and admission of
 * connecting ranks (see bootstrap.h).
 *
 * All sockets are non-blocking. Whenever a call waits (for a message, or for room to send) it polls
 * the listener and every inbound connection and queues whatever arrives per sender, so messages
 * for other tags wait for their receive, a ring of large send-then-recv cannot deadlock on full
 * socket buffers, and a peer's death is noticed when it happens. A connection is unidentified until
 * its HELLO names the sender; anything malformed on it is turned away without disturbing the rest.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "bootstrap_socket.h"

#define DRAIN_BYTES 65536 /* input read from a rejected connection before closing it */
#define CONN_CLOSED 1     /* internal: orderly end of stream at a message boundary */

static void set_failed(cchan_bootstrap_t *bs, int status, const char *why) {
    if (bs->failed) return;
    bs->failed = status;
    snprintf(bs->failed_why, sizeof bs->failed_why, "%s", why);
}

void cchani_boot_error_core(int status, char *out, size_t n) {
    static const char prefix[] = "bootstrap: ";
    const char *msg = cchan_last_error();
    while (!strncmp(msg, prefix, sizeof prefix - 1)) msg += sizeof prefix - 1;
    snprintf(out, n, "%s", msg);
    char suffix[96];
    snprintf(suffix, sizeof suffix, " (%s)", cchan_strerror(status));
    size_t len = strlen(out), slen = strlen(suffix);
    while (len >= slen && !strcmp(out + len - slen, suffix)) {
        len -= slen;
        out[len] = '\0';
    }
}

void cchani_boot_fail_with_last_error(cchan_bootstrap_t *bs, int status) {
    char why[CCHANI_BOOT_MAX_ERROR_TEXT];
    cchani_boot_error_core(status, why, sizeof why);
    set_failed(bs, status, why);
}

int cchani_boot_failed_error(const cchan_bootstrap_t *bs) {
    return cchani_error(bs->failed, "bootstrap", "%s", bs->failed_why);
}

/* Root during init: the last error (with `status`) fails init once every rank was heard. */
static void init_poison(cchan_bootstrap_t *bs, int status) {
    if (bs->init_status) return;
    bs->init_status = status;
    cchani_boot_error_core(status, bs->init_why, sizeof bs->init_why);
}

void cchani_boot_queue_push(cchani_boot_peer_t *p, cchani_boot_msg_t *m) {
    m->next = NULL;
    if (p->tail)
        p->tail->next = m;
    else
        p->head = m;
    p->tail = m;
}

cchani_boot_msg_t *cchani_boot_queue_take(cchani_boot_peer_t *p, uint16_t type, int32_t tag) {
    cchani_boot_msg_t *prev = NULL;
    for (cchani_boot_msg_t *m = p->head; m; prev = m, m = m->next) {
        if (m->type != type || m->tag != tag) continue;
        if (prev)
            prev->next = m->next;
        else
            p->head = m->next;
        if (p->tail == m) p->tail = prev;
        return m;
    }
    return NULL;
}

static const char *conn_name(const cchani_boot_conn_t *c, char buf[32]) {
    if (c->peer < 0) return "an unidentified connection";
    snprintf(buf, 32, "rank %d", c->peer);
    return buf;
}

/* ---------------------------------------------------------------- connections */

void cchani_boot_conn_add(cchan_bootstrap_t *bs, int fd, int peer, cchani_boot_conn_t *c) {
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->peer = peer;
    bs->conns[bs->nconns++] = c;
    if (peer < 0) bs->npending++;
}

static void conn_remove(cchan_bootstrap_t *bs, cchani_boot_conn_t *c) {
    for (int i = 0; i < bs->nconns; i++) {
        if (bs->conns[i] != c) continue;
        bs->conns[i] = bs->conns[--bs->nconns];
        break;
    }
    if (c->peer < 0) bs->npending--;
    close(c->fd);
    free(c->body);
    free(c);
}

/* Best effort, never blocks: a cchan peer of another session or version that we turn away can
 * then report the cause instead of a bare closed connection. */
static void send_error_now(const cchan_bootstrap_t *bs, int fd, int status, const char *why) {
    size_t text = strnlen(why, CCHANI_BOOT_MAX_ERROR_TEXT);
    uint8_t buf[CCHANI_BOOT_HDR_BYTES + 4 + CCHANI_BOOT_MAX_ERROR_TEXT];
    cchani_boot_hdr_t h = {CCHANI_BOOT_MAGIC, bs->expect.version, CCHANI_BOOT_ERROR, 0,
                           bs->rank,          bs->expect.session, 4 + text};
    cchani_boot_hdr_encode(&h, buf);
    cchani_put_le32(buf + CCHANI_BOOT_HDR_BYTES, (uint32_t)status);
    memcpy(buf + CCHANI_BOOT_HDR_BYTES + 4, why, text);
    struct iovec iov = {buf, CCHANI_BOOT_HDR_BYTES + 4 + text};
    (void)cchani_sock_writev(fd, &iov, 1);
}

/* Turns an unidentified connection away. Its unread input is drained first, because closing a
 * socket with unread data resets the connection and could destroy the reply before it is read. */
static void conn_reject(cchan_bootstrap_t *bs, cchani_boot_conn_t *c, int status, const char *why) {
    send_error_now(bs, c->fd, status, why);
    shutdown(c->fd, SHUT_WR);
    uint8_t sink[4096];
    for (size_t drained = 0; drained < DRAIN_BYTES;) {
        ssize_t n = cchani_sock_read(c->fd, sink, sizeof sink);
        if (n <= 0) break;
        drained += (size_t)n;
    }
    bs->rejected++;
    snprintf(bs->rejected_why, sizeof bs->rejected_why, "%s", why);
    CCHANI_WARN(CCHANI_SUB_BOOTSTRAP, "rank %d: turned away a connection: %s", bs->rank, why);
    conn_remove(bs, c);
}

/* An identified connection failed: stop reading it; remember why for whoever waits on the peer. */
static void conn_lost(cchan_bootstrap_t *bs, cchani_boot_conn_t *c, int status, const char *why) {
    cchani_boot_peer_t *p = &bs->peers[c->peer];
    c->dead = 1;
    free(c->body);
    c->body = NULL;
    if (!p->lost) {
        p->lost = status;
        p->lost_why = strdup(why);
    }
    CCHANI_INFO(CCHANI_SUB_BOOTSTRAP, "rank %d: connection from rank %d ended: %s", bs->rank,
                c->peer, why);
}

/* Returns 1 when c was removed. */
static int conn_fail(cchan_bootstrap_t *bs, cchani_boot_conn_t *c, int status) {
    char why[CCHANI_BOOT_MAX_ERROR_TEXT];
    if (status == CONN_CLOSED) {
        status = CCHAN_ERR_PEER;
        snprintf(why, sizeof why, "closed its connection");
    } else {
        cchani_boot_error_core(status, why, sizeof why);
    }
    if (c->peer >= 0) {
        conn_lost(bs, c, status, why);
        return 0;
    }
    /* The session key matched (it is checked first), so this is a rank of our job built against
     * another cchan: the whole job must fail, not just this connection. */
    if (status == CCHAN_ERR_VERSION && bs->rank == 0 && !bs->init_done) {
        bs->version_rejects++;
        init_poison(bs, status);
    }
    conn_reject(bs, c, status, why);
    return 1;
}

/* ---------------------------------------------------------------- receiving */

static void record_hello(cchan_bootstrap_t *bs, cchani_boot_conn_t *c, int src,
                         const cchani_boot_peer_record_t *rec) {
    c->peer = src;
    bs->npending--;
    bs->peers[src].in = c;
    if (bs->rank != 0) return;
    bs->peers[src].send_fd = c->fd;
    bs->peers[src].rec = *rec;
    bs->joined++;
}

static int handle_hello(cchan_bootstrap_t *bs, cchani_boot_conn_t *c, const cchani_boot_msg_t *m) {
    uint32_t their_nranks = cchani_get_le32(m->data);
    cchani_boot_peer_record_t rec;
    int rc = cchani_boot_record_decode(m->data + 4, &rec);
    if (rc) return rc;
    int src = m->src;
    if (src == bs->rank)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "a connection claims to be this rank (%d)", src);
    if (bs->rank == 0 && bs->init_done)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "rank %d tried to join after init (a late or restarted process?)", src);
    if (bs->rank != 0 && src == 0)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap", "unexpected connection from the root");
    if (bs->peers[src].in) {
        rc = cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                          "rank %d connected twice (two processes started with the same rank?)",
                          src);
        if (bs->rank == 0) init_poison(bs, rc);
        return rc;
    }
    if (their_nranks == (uint32_t)bs->nranks) {
        record_hello(bs, c, src, &rec);
        return 0;
    }
    rc = cchani_error(-EINVAL, "bootstrap", "rank %d was started with %u ranks, rank %d with %d",
                      src, their_nranks, bs->rank, bs->nranks);
    if (bs->rank != 0) return rc;
    /* Admit it anyway so that it, too, hears why init fails. */
    init_poison(bs, rc);
    record_hello(bs, c, src, &rec);
    return 0;
}

static int handle_error(cchan_bootstrap_t *bs, const cchani_boot_msg_t *m) {
    int status = (int32_t)cchani_get_le32(m->data);
    if (status >= 0)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "ERROR message from rank %d with status %d", m->src, status);
    char why[CCHANI_BOOT_MAX_ERROR_TEXT + 64];
    snprintf(why, sizeof why, "rank %d reports: %.*s", m->src, (int)(m->len - 4),
             (const char *)m->data + 4);
    set_failed(bs, status, why);
    return 0;
}

static int deliver(cchan_bootstrap_t *bs, cchani_boot_conn_t *c, cchani_boot_msg_t *m) {
    int rc = 0;
    if (m->type == CCHANI_BOOT_HELLO)
        rc = handle_hello(bs, c, m);
    else if (m->type == CCHANI_BOOT_ERROR)
        rc = handle_error(bs, m);
    else {
        cchani_boot_queue_push(&bs->peers[c->peer], m);
        return 0;
    }
    free(m);
    return rc;
}

/* The header is valid on its own; is it valid from this connection? */
static int check_sender(const cchani_boot_conn_t *c, const cchani_boot_hdr_t *h) {
    if (c->peer < 0 && h->type != CCHANI_BOOT_HELLO)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "a new connection sent message type %u before introducing itself",
                            h->type);
    if (c->peer >= 0 && h->type == CCHANI_BOOT_HELLO)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap", "rank %d introduced itself twice",
                            c->peer);
    if (c->peer >= 0 && h->src != c->peer)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "message on rank %d's connection claims source rank %d", c->peer,
                            h->src);
    return 0;
}

static int complete(cchan_bootstrap_t *bs, cchani_boot_conn_t *c) {
    cchani_boot_msg_t *m = c->body;
    c->body = NULL;
    return deliver(bs, c, m);
}

static int read_failed(const cchani_boot_conn_t *c, ssize_t n) {
    char name[32];
    /* A process that exits with unread input resets its connections instead of closing them. */
    if (n == -ECONNRESET)
        return cchani_error(CCHAN_ERR_PEER, "bootstrap",
                            "closed its connection abruptly (connection reset, errno %d)",
                            ECONNRESET);
    return cchani_error(CCHAN_ERR_PEER, "bootstrap", "reading from %s failed: %s (errno %d)",
                        conn_name(c, name), cchan_strerror((int)n), (int)-n);
}

static int read_header(cchan_bootstrap_t *bs, cchani_boot_conn_t *c) {
    char name[32];
    ssize_t n =
        cchani_sock_read(c->fd, c->hdr_buf + c->hdr_got, CCHANI_BOOT_HDR_BYTES - c->hdr_got);
    if (n == -EAGAIN) return -EAGAIN;
    if (n < 0) return read_failed(c, n);
    if (n == 0) {
        if (c->hdr_got == 0) return CONN_CLOSED;
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "truncated header from %s: connection closed after %zu of %u bytes",
                            conn_name(c, name), c->hdr_got, CCHANI_BOOT_HDR_BYTES);
    }
    c->hdr_got += (size_t)n;
    if (c->hdr_got < CCHANI_BOOT_HDR_BYTES) return 0;
    c->hdr_got = 0;
    int rc = cchani_boot_hdr_decode(c->hdr_buf, CCHANI_BOOT_HDR_BYTES, &bs->expect, &c->hdr);
    if (!rc) rc = check_sender(c, &c->hdr);
    if (rc) return rc;
    cchani_boot_msg_t *m = malloc(sizeof *m + c->hdr.len);
    if (!m)
        return cchani_error(-ENOMEM, "bootstrap", "no memory for a %llu-byte message from %s",
                            (unsigned long long)c->hdr.len, conn_name(c, name));
    m->type = c->hdr.type;
    m->tag = c->hdr.tag;
    m->src = c->hdr.src;
    m->len = c->hdr.len;
    c->body = m;
    c->body_got = 0;
    return m->len ? 0 : complete(bs, c);
}

static int read_body(cchan_bootstrap_t *bs, cchani_boot_conn_t *c) {
    char name[32];
    cchani_boot_msg_t *m = c->body;
    ssize_t n = cchani_sock_read(c->fd, m->data + c->body_got, m->len - c->body_got);
    if (n == -EAGAIN) return -EAGAIN;
    if (n < 0) return read_failed(c, n);
    if (n == 0)
        return cchani_error(
            CCHAN_ERR_PROTOCOL, "bootstrap",
            "truncated message from %s: connection closed after %llu of %llu payload bytes",
            conn_name(c, name), (unsigned long long)c->body_got, (unsigned long long)m->len);
    c->body_got += (uint64_t)n;
    return c->body_got < m->len ? 0 : complete(bs, c);
}

/* Reads everything c has ready. */
static void conn_read(cchan_bootstrap_t *bs, cchani_boot_conn_t *c) {
    while (!c->dead) {
        int rc = c->body ? read_body(bs, c) : read_header(bs, c);
        if (rc == -EAGAIN) return;
        if (rc && conn_fail(bs, c, rc)) return;
    }
}

/* Ranks introduce themselves as soon as they connect, so when the pending slots are full, the
 * oldest silent connection is a stranger (or a slow attack): evict it rather than keep a rank out.
 */
static void evict_oldest_pending(cchan_bootstrap_t *bs) {
    cchani_boot_conn_t *oldest = NULL;
    for (int i = 0; i < bs->nconns; i++)
        if (bs->conns[i]->peer < 0 && (!oldest || bs->conns[i]->accepted_ns < oldest->accepted_ns))
            oldest = bs->conns[i];
    if (oldest)
        conn_reject(bs, oldest, CCHAN_ERR_NO_RESOURCE,
                    "evicted: too many connections that did not introduce themselves");
}

static void accept_pending(cchan_bootstrap_t *bs) {
    int fd;
    while (cchani_sock_accept(bs->listen_fd, &fd) == 0) {
        if (bs->npending >= CCHANI_BOOT_MAX_PENDING) evict_oldest_pending(bs);
        cchani_boot_conn_t *c = malloc(sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        cchani_boot_conn_add(bs, fd, -1, c);
        c->accepted_ns = cchani_now_ns();
    }
}

int cchani_boot_progress(cchan_bootstrap_t *bs, int out_fd, uint64_t deadline_ns) {
    nfds_t n = 0;
    int npolled = 0;
    bs->pollfds[n++] = (struct pollfd){.fd = bs->listen_fd, .events = POLLIN};
    for (int i = 0; i < bs->nconns; i++) {
        if (bs->conns[i]->dead) continue;
        bs->polled[npolled++] = bs->conns[i];
        bs->pollfds[n++] = (struct pollfd){.fd = bs->conns[i]->fd, .events = POLLIN};
    }
    if (out_fd >= 0) bs->pollfds[n++] = (struct pollfd){.fd = out_fd, .events = POLLOUT};
    int ready = poll(bs->pollfds, n, cchani_sock_poll_ms(deadline_ns));
    if (ready < 0) return errno == EINTR ? 0 : cchani_errno_error("bootstrap", "poll()");
    if (ready == 0) return CCHAN_ERR_TIMEOUT;
    /* Connections first: accepting may add conns, which the snapshot in polled does not cover. */
    for (int i = 0; i < npolled; i++)
        if (bs->pollfds[1 + i].revents) conn_read(bs, bs->polled[i]);
    if (bs->pollfds[0].revents) accept_pending(bs);
    return 0;
}

int cchani_boot_wait_msg(cchan_bootstrap_t *bs, int peer, uint16_t type, int32_t tag,
                         uint64_t deadline_ns, const char *what, cchani_boot_msg_t **out) {
    cchani_boot_peer_t *p = &bs->peers[peer];
    uint64_t start = cchani_now_ns();
    for (;;) {
        /* What arrived before a failure report is still good: the root sent it before failing. */
        cchani_boot_msg_t *m = cchani_boot_queue_take(p, type, tag);
        if (m) {
            *out = m;
            return 0;
        }
        if (bs->failed) return cchani_boot_failed_error(bs);
        if (p->lost)
            return cchani_error(p->lost, "bootstrap",
                                "rank %d failed while rank %d waited for %s: %s", peer, bs->rank,
                                what, p->lost_why ? p->lost_why : "");
        int rc = cchani_boot_progress(bs, -1, deadline_ns);
        if (rc == CCHAN_ERR_TIMEOUT)
            return cchani_error(
                rc, "bootstrap", "timed out after %llu ms waiting for %s from rank %d",
                (unsigned long long)((cchani_now_ns() - start) / 1000000), what, peer);
        if (rc) return rc;
    }
}

/* ---------------------------------------------------------------- sending */

static void iov_advance(struct iovec **iov, int *cnt, size_t n) {
    while (*cnt > 0 && n >= (*iov)->iov_len) {
        n -= (*iov)->iov_len;
        (*iov)++;
        (*cnt)--;
    }
    if (*cnt > 0) {
        (*iov)->iov_base = (uint8_t *)(*iov)->iov_base + n;
        (*iov)->iov_len -= n;
    }
}

int cchani_boot_write_msg(cchan_bootstrap_t *bs, int peer, int fd, uint16_t type, int32_t tag,
                          const void *payload, uint64_t len, uint64_t deadline_ns) {
    uint8_t hdr[CCHANI_BOOT_HDR_BYTES];
    cchani_boot_hdr_t h = {CCHANI_BOOT_MAGIC, bs->expect.version, type, tag,
                           bs->rank,          bs->expect.session, len};
    cchani_boot_hdr_encode(&h, hdr);
    struct iovec iovs[2] = {{hdr, sizeof hdr}, {(void *)payload, (size_t)len}};
    struct iovec *iov = iovs;
    int cnt = len ? 2 : 1;
    while (cnt > 0) {
        ssize_t n = cchani_sock_writev(fd, iov, cnt);
        if (n >= 0) {
            iov_advance(&iov, &cnt, (size_t)n);
            continue;
        }
        if (n == -EPIPE || n == -ECONNRESET)
            return cchani_error(CCHAN_ERR_PEER, "bootstrap",
                                "rank %d closed its connection before %llu bytes could be sent "
                                "(errno %d)",
                                peer, (unsigned long long)len, (int)-n);
        if (n != -EAGAIN)
            return cchani_error(CCHAN_ERR_PEER, "bootstrap",
                                "sending to rank %d failed: %s (errno %d)", peer,
                                cchan_strerror((int)n), (int)-n);
        int rc = cchani_boot_progress(bs, fd, deadline_ns);
        if (rc == CCHAN_ERR_TIMEOUT)
            return cchani_error(
                rc, "bootstrap",
                "timed out after %llu ms sending %llu bytes to rank %d (it stopped reading)",
                (unsigned long long)bs->timeout_ms, (unsigned long long)len, peer);
        if (rc) return rc;
        /* A peer that has given up may never read again. */
        if (bs->failed) return cchani_boot_failed_error(bs);
    }
    return 0;
}

int cchani_boot_send_hello(cchan_bootstrap_t *bs, int peer, int fd, uint64_t deadline_ns) {
    uint8_t payload[CCHANI_BOOT_HELLO_BYTES];
    cchani_put_le32(payload, (uint32_t)bs->nranks);
    cchani_boot_record_encode(&bs->peers[bs->rank].rec, payload + 4);
    return cchani_boot_write_msg(bs, peer, fd, CCHANI_BOOT_HELLO, 0, payload, sizeof payload,
                                 deadline_ns);
}

int cchani_boot_send_fd(cchan_bootstrap_t *bs, int peer, uint64_t deadline_ns, int *fd) {
    cchani_boot_peer_t *p = &bs->peers[peer];
    if (p->send_fd < 0) {
        char what[32];
        snprintf(what, sizeof what, "rank %d", peer);
        /* Its listener was up before it joined: a refusal means it is gone, not late. */
        int rc = cchani_sock_connect(&p->rec.listen, deadline_ns, 0, what, &p->send_fd);
        if (rc) return rc;
        rc = cchani_boot_send_hello(bs, peer, p->send_fd, deadline_ns);
        if (rc) return rc;
    }
    *fd = p->send_fd;
    return 0;
}
