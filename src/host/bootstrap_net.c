/* cchan bootstrap message layer: connections, progress, per-peer queues and admission of
 * connecting ranks (see bootstrap.h).
 *
 * All sockets are non-blocking. Whenever a call waits (for a message, or for room to send) it polls
 * the listener and every inbound connection and queues whatever arrives per sender, so messages
 * for other tags wait for their receive, a ring of large send-then-recv cannot deadlock on full
 * socket buffers, and a peer's death is noticed when it happens. A connection is unidentified until
 * its handshake proves the session key and names the sender (bootstrap_wire.h); until then it may
 * send nothing else, is told nothing secret, and anything malformed on it is turned away without
 * disturbing the rest.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "bootstrap_socket.h"

#define DRAIN_BYTES 65536 /* input read from a rejected connection before closing it */
#define CONN_CLOSED 1     /* internal: orderly end of stream at a message boundary */
#define CONN_GONE 2       /* internal: an unidentified connection ended before its AUTH */
#define TURNED_AWAY 3     /* internal: the listener shed our handshake; try again */
#define LOGGED_REJECTS 8  /* rejections logged one by one; past that, every 1000th */

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

static uint64_t random_nonce(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
        v = cchani_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&v;
    return v;
}

void cchani_boot_queue_push(cchani_boot_peer_t *p, cchani_boot_msg_t *m) {
    m->next = NULL;
    p->queued += m->len;
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
        p->queued -= m->len;
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

/* Best effort, never blocks: a cchan peer that we turn away can then report the cause instead of a
 * bare closed connection. The answer carries the nonce the connection sent in its AUTH (which
 * lets a rank match the answer to its own request) or zero before any AUTH; never the key. type
 * is ERROR (final: status and text) or BUSY (shed under load: text only). */
static void send_rejection(const cchan_bootstrap_t *bs, const cchani_boot_conn_t *c, uint16_t type,
                           int status, const char *why) {
    size_t text = strnlen(why, CCHANI_BOOT_MAX_ERROR_TEXT - 4), at = CCHANI_BOOT_HDR_BYTES;
    uint8_t buf[CCHANI_BOOT_HDR_BYTES + CCHANI_BOOT_MAX_ERROR_TEXT];
    if (type == CCHANI_BOOT_ERROR) {
        cchani_put_le32(buf + at, (uint32_t)status);
        at += 4;
    }
    memcpy(buf + at, why, text);
    cchani_boot_hdr_t h = {CCHANI_BOOT_MAGIC,
                           bs->expect.version,
                           type,
                           0,
                           bs->rank,
                           c->stage > 0 ? c->nonce_c : 0,
                           at + text - CCHANI_BOOT_HDR_BYTES};
    cchani_boot_hdr_encode(&h, buf);
    struct iovec iov = {buf, at + text};
    (void)cchani_sock_writev(c->fd, &iov, 1);
}

/* Turns an unidentified connection away. Its unread input is drained first, because closing a
 * socket with unread data resets the connection and could destroy the reply before it is read. */
static void conn_reject(cchan_bootstrap_t *bs, cchani_boot_conn_t *c, int status, const char *why) {
    send_rejection(bs, c, CCHANI_BOOT_ERROR, status, why);
    shutdown(c->fd, SHUT_WR);
    uint8_t sink[4096];
    for (size_t drained = 0; drained < DRAIN_BYTES;) {
        ssize_t n = cchani_sock_read(c->fd, sink, sizeof sink);
        if (n <= 0) break;
        drained += (size_t)n;
    }
    bs->rejected++;
    snprintf(bs->rejected_why, sizeof bs->rejected_why, "%s", why);
    /* A flood must not turn into a flood of log lines. */
    if (bs->rejected <= LOGGED_REJECTS || bs->rejected % 1000 == 0)
        CCHANI_WARN(CCHANI_SUB_BOOTSTRAP, "rank %d: turned away a connection (%u so far): %s",
                    bs->rank, bs->rejected, why);
    conn_remove(bs, c);
}

/* Closes an unidentified connection without a word: it ended before its AUTH (a port scan, a
 * churning flood) or it is shed before sending one, so there is no request to answer. */
static void conn_drop(cchan_bootstrap_t *bs, cchani_boot_conn_t *c) {
    bs->dropped++;
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
    if (status == CONN_GONE) {
        conn_drop(bs, c);
        return 1;
    }
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
    /* Version errors on a pending connection come only after its proof checked out, so this is a
     * rank of our job built against another cchan: the whole job must fail, not just this
     * connection. */
    if (status == CCHAN_ERR_VERSION && bs->rank == 0 && !bs->init_done) {
        bs->version_rejects++;
        init_poison(bs, status);
    }
    conn_reject(bs, c, status, why);
    return 1;
}

/* ---------------------------------------------------------------- receiving */

/* Admits c as rank src: WELCOME it (a fresh socket has room for 32 bytes) and route src's
 * messages through it; the root also sends to src on it. */
static int record_hello(cchan_bootstrap_t *bs, cchani_boot_conn_t *c, int src,
                        const cchani_boot_peer_record_t *rec) {
    cchani_boot_key_t tx;
    cchani_boot_conn_key(bs->expect.session, 'L', c->nonce_c, c->nonce_s, src, bs->rank, &tx);
    uint8_t buf[CCHANI_BOOT_HDR_BYTES];
    cchani_boot_hdr_t h = {
        CCHANI_BOOT_MAGIC, bs->expect.version, CCHANI_BOOT_WELCOME, 0, bs->rank, 0, 0};
    cchani_boot_seal(&tx, &h, buf, NULL);
    struct iovec iov = {buf, sizeof buf};
    if (cchani_sock_writev(c->fd, &iov, 1) != (ssize_t)sizeof buf)
        return cchani_error(CCHAN_ERR_PEER, "bootstrap",
                            "rank %d's connection did not take its WELCOME (closed?)", src);
    c->peer = src;
    bs->npending--;
    bs->peers[src].in = c;
    if (bs->rank != 0) return 0;
    bs->peers[src].send_fd = c->fd;
    bs->peers[src].tx = tx;
    bs->peers[src].rec = *rec;
    bs->joined++;
    return 0;
}

/* A connector's AUTH: answer with our nonce and our proof (a fresh socket has room for it). */
static int handle_auth(cchan_bootstrap_t *bs, cchani_boot_conn_t *c, const cchani_boot_msg_t *m) {
    if (m->len != 0 || c->hdr.tag != bs->rank)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "malformed AUTH message (%llu payload bytes, addressed to rank %d)",
                            (unsigned long long)m->len, c->hdr.tag);
    c->claimed = m->src;
    c->nonce_c = c->hdr.session;
    c->nonce_s = random_nonce();
    c->stage = 1;
    uint8_t buf[CCHANI_BOOT_HDR_BYTES + CCHANI_BOOT_PROOF_BYTES];
    cchani_boot_hdr_t h = {CCHANI_BOOT_MAGIC, bs->expect.version, CCHANI_BOOT_AUTH,       m->src,
                           bs->rank,          c->nonce_s,         CCHANI_BOOT_PROOF_BYTES};
    cchani_boot_hdr_encode(&h, buf);
    cchani_put_le64(
        buf + CCHANI_BOOT_HDR_BYTES,
        cchani_boot_proof(bs->expect.session, 'L', c->nonce_c, c->nonce_s, bs->rank, m->src));
    struct iovec iov = {buf, sizeof buf};
    if (cchani_sock_writev(c->fd, &iov, 1) != (ssize_t)sizeof buf)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "a connection did not take the handshake's answer");
    return 0;
}

static int handle_hello(cchan_bootstrap_t *bs, cchani_boot_conn_t *c, const cchani_boot_msg_t *m) {
    int src = m->src;
    uint64_t proof = cchani_get_le64(m->data);
    if (src != c->claimed ||
        proof != cchani_boot_proof(bs->expect.session, 'C', c->nonce_c, c->nonce_s, src, bs->rank))
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "session key mismatch: a connection claiming to be rank %d could not "
                            "prove it knows this job's session key (a process of another job, a "
                            "stale process, or a stranger)",
                            src);
    c->proven = 1;
    if (c->hdr.version != bs->expect.version)
        return cchani_error(
            CCHAN_ERR_VERSION, "bootstrap",
            "version mismatch: rank %d speaks bootstrap wire version %u, expected %u "
            "(mixed cchan installations?)",
            src, c->hdr.version, bs->expect.version);
    /* The proof covers the nonces only; the MAC covers the record and size it introduces. */
    cchani_boot_conn_key(bs->expect.session, 'C', c->nonce_c, c->nonce_s, src, bs->rank, &c->rx);
    int rc = cchani_boot_verify(&c->rx, c->hdr_buf, m->data, m->len);
    if (rc) return rc;
    uint32_t their_nranks = cchani_get_le32(m->data + CCHANI_BOOT_PROOF_BYTES);
    cchani_boot_peer_record_t rec;
    rc = cchani_boot_record_decode(m->data + CCHANI_BOOT_PROOF_BYTES + 4, &rec);
    if (rc) return rc;
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
    if (their_nranks == (uint32_t)bs->nranks) return record_hello(bs, c, src, &rec);
    rc = cchani_error(-EINVAL, "bootstrap", "rank %d was started with %u ranks, rank %d with %d",
                      src, their_nranks, bs->rank, bs->nranks);
    if (bs->rank != 0) return rc;
    /* Admit it anyway so that it, too, hears why init fails. */
    init_poison(bs, rc);
    return record_hello(bs, c, src, &rec);
}

static int handle_error(cchan_bootstrap_t *bs, const cchani_boot_msg_t *m) {
    int status = (int32_t)cchani_get_le32(m->data);
    if (status >= 0)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "ERROR message from rank %d with status %d", m->src, status);
    char text[CCHANI_BOOT_MAX_RELAYED_TEXT + 1];
    cchani_boot_sanitize(text, sizeof text, m->data + 4, (size_t)(m->len - 4));
    char why[CCHANI_BOOT_MAX_RELAYED_TEXT + 64];
    snprintf(why, sizeof why, "rank %d reports: %s", m->src, text);
    if (!bs->failed) bs->failed_rank = m->tag > 0 && m->tag <= bs->nranks ? m->tag - 1 : -1;
    set_failed(bs, status, why);
    return 0;
}

static int queue_message(cchan_bootstrap_t *bs, cchani_boot_peer_t *p, cchani_boot_msg_t *m) {
    if (p->queued + m->len > bs->queue_limit) {
        int rc = cchani_error(CCHAN_ERR_NO_RESOURCE, "bootstrap",
                              "rank %d sent more than %llu bytes that no receive has taken (%llu "
                              "queued, %llu more with tag %d): a send without a matching receive?",
                              m->src, (unsigned long long)bs->queue_limit,
                              (unsigned long long)p->queued, (unsigned long long)m->len, m->tag);
        free(m);
        return rc;
    }
    cchani_boot_queue_push(p, m);
    return 0;
}

static int deliver(cchan_bootstrap_t *bs, cchani_boot_conn_t *c, cchani_boot_msg_t *m) {
    int rc = 0;
    if (m->type == CCHANI_BOOT_AUTH)
        rc = handle_auth(bs, c, m);
    else if (m->type == CCHANI_BOOT_HELLO)
        rc = handle_hello(bs, c, m);
    else if (m->type == CCHANI_BOOT_ERROR)
        rc = handle_error(bs, m);
    else if (m->type == CCHANI_BOOT_BYE)
        bs->peers[c->peer].departed = 1;
    else
        return queue_message(bs, &bs->peers[c->peer], m);
    free(m);
    return rc;
}

/* The header is valid on its own; is it valid from this connection? */
static int check_sender(const cchani_boot_conn_t *c, const cchani_boot_hdr_t *h) {
    static const uint16_t next[2] = {CCHANI_BOOT_AUTH, CCHANI_BOOT_HELLO};
    if (c->peer < 0 && h->type != next[c->stage])
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "a new connection sent message type %u where the handshake expects %s",
                            h->type, c->stage ? "HELLO" : "AUTH");
    if (c->peer >= 0 && (h->type == CCHANI_BOOT_HELLO || h->type == CCHANI_BOOT_AUTH))
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap", "rank %d introduced itself twice",
                            c->peer);
    if (c->peer >= 0 && (h->type == CCHANI_BOOT_WELCOME || h->type == CCHANI_BOOT_BUSY))
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "rank %d sent a handshake answer on an established connection",
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
    if (c->peer >= 0) {
        int rc = cchani_boot_verify(&c->rx, c->hdr_buf, m->data, m->len);
        if (rc) {
            free(m);
            return rc;
        }
    }
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
    /* A stranger that ends before its AUTH without a word, or resets, cannot read an answer. */
    if (((n == 0 && c->hdr_got == 0) || n == -ECONNRESET) && c->peer < 0 && c->stage == 0)
        return CONN_GONE;
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
    int rc =
        c->peer >= 0
            ? cchani_boot_hdr_decode(c->hdr_buf, CCHANI_BOOT_HDR_BYTES, &bs->expect, &c->hdr)
            : cchani_boot_hdr_decode_open(c->hdr_buf, CCHANI_BOOT_HDR_BYTES, &bs->expect, &c->hdr);
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

/* How far an unidentified connection got: a rank sends its AUTH as soon as it is connected and
 * its HELLO one round trip later, so the less a connection has sent, the likelier a stranger. */
static int progress_class(const cchani_boot_conn_t *c) {
    return c->stage > 0 ? 2 : c->hdr_got > 0 ? 1 : 0;
}

/* Sheds one unidentified connection to make room (CCHANI_BOOT_MAX_PENDING in bootstrap.h): from
 * the source holding the most, then the least advanced, then the oldest. One source flooding
 * the listener thus sheds its own connections, never the ranks', and from one shared address
 * (ranks and stranger on one host) a rank's fresh AUTH outlasts the silent and the stale. A
 * connection shed after its AUTH is told so with BUSY and its nonce, and tries again. */
static void shed_one(cchan_bootstrap_t *bs) {
    cchani_boot_conn_t *victim = NULL;
    int victim_share = 0;
    for (int i = 0; i < bs->nconns; i++) {
        cchani_boot_conn_t *c = bs->conns[i];
        if (c->peer >= 0) continue;
        int share = 0;
        for (int j = 0; j < bs->nconns; j++)
            share += bs->conns[j]->peer < 0 && bs->conns[j]->source == c->source;
        if (victim) {
            if (share != victim_share) {
                if (share < victim_share) continue;
            } else if (progress_class(c) != progress_class(victim)) {
                if (progress_class(c) > progress_class(victim)) continue;
            } else if (c->accepted_ns >= victim->accepted_ns) {
                continue;
            }
        }
        victim = c;
        victim_share = share;
    }
    if (!victim) return;
    bs->shed++;
    if (victim->stage == 0) {
        conn_drop(bs, victim);
        return;
    }
    send_rejection(bs, victim, CCHANI_BOOT_BUSY, 0,
                   "busy: too many connections in their handshake; try again");
    conn_remove(bs, victim);
}

static void accept_pending(cchan_bootstrap_t *bs) {
    int fd;
    uint64_t source;
    for (int n = 0;
         n < CCHANI_BOOT_ACCEPT_BATCH && cchani_sock_accept_from(bs->listen_fd, &fd, &source) == 0;
         n++) {
        cchani_boot_conn_t *c = malloc(sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        /* conns has room for one more than the identified and pending connections. */
        cchani_boot_conn_add(bs, fd, -1, c);
        c->accepted_ns = cchani_now_ns();
        c->source = source;
        /* A rank's AUTH is often in already; a churning stranger's end of stream too. Either
         * way the connection is settled now, before it can take a slot from anyone. */
        conn_read(bs, c);
        while (bs->npending > CCHANI_BOOT_MAX_PENDING) shed_one(bs);
    }
}

/* Closes connections that have not completed their handshake in time; returns the milliseconds
 * until the next one is due (-1: none pending). */
static int expire_pending(cchan_bootstrap_t *bs) {
    uint64_t now = cchani_now_ns(), next = UINT64_MAX;
    for (int i = 0; i < bs->nconns;) {
        cchani_boot_conn_t *c = bs->conns[i];
        if (c->peer >= 0 || c->dead) {
            i++;
            continue;
        }
        uint64_t due = c->accepted_ns + bs->pending_idle_ns;
        if (now < due) {
            if (due < next) next = due;
            i++;
            continue;
        }
        char why[160];
        snprintf(
            why, sizeof why,
            "closed: it did not complete the handshake within %llu ms (not a rank of this job?)",
            (unsigned long long)(bs->pending_idle_ns / 1000000));
        conn_reject(bs, c, CCHAN_ERR_TIMEOUT, why); /* removes conns[i] */
    }
    if (next == UINT64_MAX) return -1;
    uint64_t ms = (next - now + 999999) / 1000000;
    return ms > 60000 ? 60000 : (int)ms;
}

int cchani_boot_progress(cchan_bootstrap_t *bs, int fd, short events, uint64_t deadline_ns) {
    int idle_ms = expire_pending(bs);
    nfds_t n = 0;
    int npolled = 0;
    bs->pollfds[n++] = (struct pollfd){.fd = bs->listen_fd, .events = POLLIN};
    for (int i = 0; i < bs->nconns; i++) {
        if (bs->conns[i]->dead) continue;
        bs->polled[npolled++] = bs->conns[i];
        bs->pollfds[n++] = (struct pollfd){.fd = bs->conns[i]->fd, .events = POLLIN};
    }
    if (fd >= 0) bs->pollfds[n++] = (struct pollfd){.fd = fd, .events = events};
    int ms = cchani_sock_poll_ms(deadline_ns);
    if (idle_ms >= 0 && idle_ms < ms) ms = idle_ms;
    int ready = poll(bs->pollfds, n, ms);
    if (ready < 0) return errno == EINTR ? 0 : cchani_errno_error("bootstrap", "poll()");
    if (ready == 0) return cchani_now_ns() >= deadline_ns ? CCHAN_ERR_TIMEOUT : 0;
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
        int rc = cchani_boot_progress(bs, -1, 0, deadline_ns);
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

/* Writes header h and its payload to fd; see cchani_boot_write_msg(). With key, the header
 * carries the message's MAC; without, h->session goes as it is (the AUTH's nonce). */
static int write_frame(cchan_bootstrap_t *bs, int peer, int fd, cchani_boot_hdr_t *h,
                       const void *payload, cchani_boot_key_t *key, uint64_t deadline_ns) {
    uint8_t hdr[CCHANI_BOOT_HDR_BYTES];
    uint64_t len = h->len;
    if (key)
        cchani_boot_seal(key, h, hdr, payload);
    else
        cchani_boot_hdr_encode(h, hdr);
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
        int rc = cchani_boot_progress(bs, fd, POLLOUT, deadline_ns);
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

int cchani_boot_write_msg(cchan_bootstrap_t *bs, int peer, int fd, uint16_t type, int32_t tag,
                          const void *payload, uint64_t len, uint64_t deadline_ns) {
    cchani_boot_hdr_t h = {CCHANI_BOOT_MAGIC, bs->expect.version, type, tag, bs->rank, 0, len};
    return write_frame(bs, peer, fd, &h, payload, &bs->peers[peer].tx, deadline_ns);
}

/* ---------------------------------------------------------------- connector side of the handshake
 */

/* One attempt at the handshake. */
typedef struct handshake {
    int fd;
    uint64_t nonce_c, nonce_s;
    int proven;       /* the listener's proof checked out */
    uint16_t version; /* the listener's wire version */
    cchani_boot_key_t tx, rx;
    char where[CCHANI_BOOT_ADDR_STR_BYTES + 16];
    char shed_why[CCHANI_BOOT_MAX_RELAYED_TEXT + 1]; /* why the listener shed it (TURNED_AWAY) */
} handshake_t;

/* Reads exactly len bytes of the handshake from fd, serving our own traffic meanwhile (two ranks
 * may be connecting to each other at once). A connection that ends here was shed by a listener
 * under load (or the listener is going away, which the next connect tells): TURNED_AWAY. */
static int read_exact(cchan_bootstrap_t *bs, handshake_t *a, uint8_t *buf, size_t len,
                      uint64_t deadline_ns) {
    for (size_t got = 0; got < len;) {
        ssize_t n = cchani_sock_read(a->fd, buf + got, len - got);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0 || n == -ECONNRESET) {
            snprintf(a->shed_why, sizeof a->shed_why, "closed the connection during the handshake");
            return TURNED_AWAY;
        }
        if (n != -EAGAIN)
            return cchani_error(CCHAN_ERR_PEER, "bootstrap", "reading from %s failed: %s", a->where,
                                cchan_strerror((int)n));
        int rc = cchani_boot_progress(bs, a->fd, POLLIN, deadline_ns);
        if (rc == CCHAN_ERR_TIMEOUT)
            return cchani_error(rc, "bootstrap",
                                "timed out after %llu ms: %s never answered the handshake (is the "
                                "process at that address a cchan rank of this job?)",
                                (unsigned long long)bs->timeout_ms, a->where);
        if (rc) return rc;
        if (bs->failed) return cchani_boot_failed_error(bs);
    }
    return 0;
}

/* The listener turned us away before admitting us (ERROR: final; BUSY: for now). Its text is
 * untrusted, shown sanitized. */
static int read_rejection(cchan_bootstrap_t *bs, handshake_t *a, const cchani_boot_hdr_t *h,
                          uint64_t deadline_ns) {
    uint8_t body[CCHANI_BOOT_MAX_ERROR_TEXT + 4];
    int rc = read_exact(bs, a, body, (size_t)h->len, deadline_ns);
    if (rc) return rc;
    size_t skip = h->type == CCHANI_BOOT_ERROR ? 4 : 0;
    char text[CCHANI_BOOT_MAX_RELAYED_TEXT + 1];
    cchani_boot_sanitize(text, sizeof text, body + skip, (size_t)h->len - skip);
    if (h->type == CCHANI_BOOT_BUSY) {
        snprintf(a->shed_why, sizeof a->shed_why, "%s", text);
        return TURNED_AWAY;
    }
    int status = (int32_t)cchani_get_le32(body);
    if (status >= 0 || status < -4096) status = CCHAN_ERR_PEER;
    return cchani_error(status, "bootstrap", "%s turned this rank away: %s", a->where, text);
}

/* Reads the listener's next handshake message: want (AUTH or WELCOME), or a rejection of ours. */
static int read_answer(cchan_bootstrap_t *bs, handshake_t *a, int peer, uint16_t want,
                       uint8_t buf[CCHANI_BOOT_HDR_BYTES], cchani_boot_hdr_t *h,
                       uint64_t deadline_ns) {
    int rc = read_exact(bs, a, buf, CCHANI_BOOT_HDR_BYTES, deadline_ns);
    if (!rc) rc = cchani_boot_hdr_decode_open(buf, CCHANI_BOOT_HDR_BYTES, &bs->expect, h);
    if (rc) return rc;
    if ((h->type == CCHANI_BOOT_ERROR || h->type == CCHANI_BOOT_BUSY) && h->session == a->nonce_c)
        return read_rejection(bs, a, h, deadline_ns);
    if (h->type != want || h->src != peer || (want == CCHANI_BOOT_AUTH && h->tag != bs->rank))
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "%s answered the handshake with a %s message from rank %d (expected "
                            "rank %d's %s): not a rank of this job?",
                            a->where, h->type == want ? "misaddressed" : "foreign", h->src, peer,
                            want == CCHANI_BOOT_AUTH ? "AUTH" : "WELCOME");
    return 0;
}

static int read_challenge(cchan_bootstrap_t *bs, int peer, handshake_t *a, uint64_t deadline_ns) {
    uint8_t buf[CCHANI_BOOT_HDR_BYTES], proof[CCHANI_BOOT_PROOF_BYTES];
    cchani_boot_hdr_t h;
    int rc = read_answer(bs, a, peer, CCHANI_BOOT_AUTH, buf, &h, deadline_ns);
    if (rc) return rc;
    if (h.len != CCHANI_BOOT_PROOF_BYTES)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "%s answered the handshake with a %llu-byte AUTH", a->where,
                            (unsigned long long)h.len);
    rc = read_exact(bs, a, proof, sizeof proof, deadline_ns);
    if (rc) return rc;
    a->nonce_s = h.session;
    a->version = h.version;
    a->proven = cchani_get_le64(proof) ==
                cchani_boot_proof(bs->expect.session, 'L', a->nonce_c, a->nonce_s, peer, bs->rank);
    return 0;
}

static int send_hello(cchan_bootstrap_t *bs, int peer, handshake_t *a, uint64_t deadline_ns) {
    cchani_boot_conn_key(bs->expect.session, 'C', a->nonce_c, a->nonce_s, bs->rank, peer, &a->tx);
    cchani_boot_conn_key(bs->expect.session, 'L', a->nonce_c, a->nonce_s, bs->rank, peer, &a->rx);
    /* Sent even when the listener's proof failed, so that a listener of another job can say why
     * it saw us go: the HELLO holds no secret. */
    uint8_t payload[CCHANI_BOOT_HELLO_BYTES];
    cchani_put_le64(payload, cchani_boot_proof(bs->expect.session, 'C', a->nonce_c, a->nonce_s,
                                               bs->rank, peer));
    cchani_put_le32(payload + CCHANI_BOOT_PROOF_BYTES, (uint32_t)bs->nranks);
    cchani_boot_record_encode(&bs->peers[bs->rank].rec, payload + CCHANI_BOOT_PROOF_BYTES + 4);
    cchani_boot_hdr_t h = {CCHANI_BOOT_MAGIC, bs->expect.version, CCHANI_BOOT_HELLO, 0, bs->rank, 0,
                           sizeof payload};
    int rc = write_frame(bs, peer, a->fd, &h, payload, &a->tx, deadline_ns);
    if (rc == CCHAN_ERR_PEER) {
        snprintf(a->shed_why, sizeof a->shed_why, "closed the connection during the handshake");
        return TURNED_AWAY;
    }
    if (rc) return rc;
    if (!a->proven)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "session key mismatch: %s could not prove it knows this job's session "
                            "key (it belongs to another job or session, or is not cchan)",
                            a->where);
    if (a->version != bs->expect.version)
        return cchani_error(
            CCHAN_ERR_VERSION, "bootstrap",
            "version mismatch: rank %d speaks bootstrap wire version %u, expected %u "
            "(mixed cchan installations?)",
            peer, a->version, bs->expect.version);
    return 0;
}

static int read_welcome(cchan_bootstrap_t *bs, int peer, handshake_t *a, uint64_t deadline_ns) {
    uint8_t buf[CCHANI_BOOT_HDR_BYTES];
    cchani_boot_hdr_t h;
    int rc = read_answer(bs, a, peer, CCHANI_BOOT_WELCOME, buf, &h, deadline_ns);
    if (!rc) rc = cchani_boot_verify(&a->rx, buf, NULL, 0);
    return rc;
}

/* A rank's listener goes on the interface that reaches the root, which its first connection to
 * the root tells; the HELLO then carries its address. */
static int listen_like(cchan_bootstrap_t *bs, int fd) {
    cchani_boot_addr_t local;
    int rc = cchani_sock_local_addr(fd, &local);
    if (!rc) rc = cchani_sock_listen(&local, &bs->listen_fd, &bs->peers[bs->rank].rec.listen);
    return rc;
}

static int handshake_once(cchan_bootstrap_t *bs, const cchani_boot_addr_t *addr, int peer,
                          int retry_refused, const char *what, uint64_t deadline_ns,
                          handshake_t *a) {
    int rc = cchani_sock_connect(addr, deadline_ns, retry_refused, what, &a->fd);
    if (rc) return rc;
    a->nonce_c = random_nonce();
    cchani_boot_hdr_t h = {
        CCHANI_BOOT_MAGIC, bs->expect.version, CCHANI_BOOT_AUTH, peer, bs->rank, a->nonce_c, 0};
    rc = write_frame(bs, peer, a->fd, &h, NULL, NULL, deadline_ns);
    if (rc == CCHAN_ERR_PEER) {
        snprintf(a->shed_why, sizeof a->shed_why, "closed the connection during the handshake");
        rc = TURNED_AWAY;
    }
    if (!rc) rc = read_challenge(bs, peer, a, deadline_ns);
    if (!rc && bs->listen_fd < 0 && bs->rank != 0) rc = listen_like(bs, a->fd);
    if (!rc) rc = send_hello(bs, peer, a, deadline_ns);
    if (!rc) rc = read_welcome(bs, peer, a, deadline_ns);
    if (rc) close(a->fd);
    return rc;
}

/* Sleeps about backoff_ms (jittered, so that shed ranks do not return in step) while serving our
 * own traffic. */
static int backoff(cchan_bootstrap_t *bs, unsigned backoff_ms, uint64_t deadline_ns) {
    uint64_t until =
        cchani_now_ns() + (backoff_ms / 2 + random_nonce() % (backoff_ms + 1)) * 1000000ull;
    if (until > deadline_ns) until = deadline_ns;
    while (cchani_now_ns() < until) {
        int rc = cchani_boot_progress(bs, -1, 0, until);
        if (rc && rc != CCHAN_ERR_TIMEOUT) return rc;
        if (bs->failed) return cchani_boot_failed_error(bs);
    }
    return 0;
}

int cchani_boot_connect(cchan_bootstrap_t *bs, const cchani_boot_addr_t *addr, int peer,
                        int retry_refused, const char *what, uint64_t deadline_ns, int *fd,
                        cchani_boot_key_t *tx, cchani_boot_key_t *rx) {
    handshake_t a;
    memset(&a, 0, sizeof a);
    char addr_str[CCHANI_BOOT_ADDR_STR_BYTES];
    cchani_boot_addr_str(addr, addr_str);
    if (peer == 0)
        snprintf(a.where, sizeof a.where, "the root at %s", addr_str);
    else
        snprintf(a.where, sizeof a.where, "rank %d at %s", peer, addr_str);
    uint64_t start = cchani_now_ns();
    unsigned backoff_ms = CCHANI_BOOT_RETRY_MIN_MS;
    for (unsigned attempt = 1;; attempt++) {
        int rc = handshake_once(bs, addr, peer, retry_refused, what, deadline_ns, &a);
        if (rc == 0) {
            if (attempt > 1)
                CCHANI_INFO(CCHANI_SUB_BOOTSTRAP, "rank %d: admitted by %s at attempt %u", bs->rank,
                            a.where, attempt);
            *fd = a.fd;
            *tx = a.tx;
            *rx = a.rx;
            return 0;
        }
        if (rc != TURNED_AWAY) return rc;
        if (cchani_now_ns() >= deadline_ns)
            return cchani_error(CCHAN_ERR_TIMEOUT, "bootstrap",
                                "timed out after %llu ms: %s turned this rank away %u time(s), "
                                "the last because it %s (a connection flood at that address?)",
                                (unsigned long long)((cchani_now_ns() - start) / 1000000), a.where,
                                attempt, a.shed_why);
        CCHANI_INFO(CCHANI_SUB_BOOTSTRAP, "rank %d: %s shed attempt %u (%s); retrying", bs->rank,
                    a.where, attempt, a.shed_why);
        rc = backoff(bs, backoff_ms, deadline_ns);
        if (rc) return rc;
        backoff_ms =
            backoff_ms * 2 < CCHANI_BOOT_RETRY_MAX_MS ? backoff_ms * 2 : CCHANI_BOOT_RETRY_MAX_MS;
    }
}

int cchani_boot_send_fd(cchan_bootstrap_t *bs, int peer, uint64_t deadline_ns, int *fd) {
    cchani_boot_peer_t *p = &bs->peers[peer];
    if (p->send_fd < 0) {
        char what[32];
        snprintf(what, sizeof what, "rank %d", peer);
        /* Its listener was up before it joined: a refusal means it is gone, not late. The
         * connection is one-way: what the listener's side would send on it is never read. */
        cchani_boot_key_t unused;
        int rc = cchani_boot_connect(bs, &p->rec.listen, peer, 0, what, deadline_ns, &p->send_fd,
                                     &p->tx, &unused);
        if (rc) return rc;
    }
    *fd = p->send_fd;
    return 0;
}
