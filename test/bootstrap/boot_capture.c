/* What a capture of a job's bootstrap traffic is worth (run through cchan-run, 4 ranks). Rank 1
 * reaches the root through a relay in its own process that records (and may alter) every byte of
 * its connection: the handshake, the peer table, allgathers, point-to-point and the goodbye.
 *
 *   boot_capture key      the session key appears nowhere in the capture
 *   boot_capture replay   the job restarts with the same key (a new root port); a stranger holding
 *                         the capture tries every 8-byte MAC field it saw as the key, and replays
 *                         rank 1's side of the capture to the new root: it joins neither way, and
 *                         the real rank 1 does
 *   boot_capture tamper   the relay flips one payload byte of an allgather result on its way to
 *                         rank 1: rank 1 refuses the message (its MAC fails) instead of using it
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "boot_test.h"
#include "bootstrap.h"
#include "bootstrap_socket.h"

typedef struct stream {
    uint8_t *buf;
    size_t len, cap;
    size_t sent; /* bytes forwarded */
} stream_t;

typedef struct relay {
    int listen_fd;
    cchani_boot_addr_t addr, root;
    int tamper;   /* flip a byte of the first COLL payload going to the rank */
    int tampered; /* it did */
    stream_t up, down;
    pthread_t thread;
} relay_t;

static int rank;

static void append(stream_t *s, const uint8_t *p, size_t n) {
    if (s->len + n > s->cap) {
        s->cap = (s->len + n) * 2;
        s->buf = realloc(s->buf, s->cap);
        BOOT_CHECK(s->buf != NULL);
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
}

static void forward(int fd, stream_t *s, size_t upto) {
    while (s->sent < upto) {
        ssize_t n = send(fd, s->buf + s->sent, upto - s->sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            poll(&p, 1, 100);
            continue;
        }
        if (n <= 0) return;
        s->sent += (size_t)n;
    }
}

/* The end of the last whole message in s (the stream is a sequence of header + payload). */
static size_t whole_messages(const stream_t *s, size_t from, relay_t *r) {
    size_t at = from;
    while (at + CCHANI_BOOT_HDR_BYTES <= s->len) {
        uint64_t len = cchani_get_le64(s->buf + at + 24);
        if (at + CCHANI_BOOT_HDR_BYTES + len > s->len) break;
        uint16_t type = (uint16_t)(s->buf[at + 6] | s->buf[at + 7] << 8);
        if (r && r->tamper && !r->tampered && type == CCHANI_BOOT_COLL && len > 0) {
            s->buf[at + CCHANI_BOOT_HDR_BYTES] ^= 0x01;
            r->tampered = 1;
        }
        at += CCHANI_BOOT_HDR_BYTES + (size_t)len;
    }
    return at;
}

static void *relay_main(void *arg) {
    relay_t *r = arg;
    int client = -1, root = -1;
    struct pollfd lp = {.fd = r->listen_fd, .events = POLLIN};
    BOOT_CHECK(poll(&lp, 1, 10000) == 1);
    BOOT_OK(cchani_sock_accept(r->listen_fd, &client));
    BOOT_OK(cchani_sock_connect(&r->root, cchani_now_ns() + 5000000000ull, 1, "root", &root));
    for (;;) {
        struct pollfd p[2] = {{.fd = client, .events = POLLIN}, {.fd = root, .events = POLLIN}};
        if (poll(p, 2, 100) <= 0) continue;
        uint8_t chunk[65536];
        if (p[0].revents) {
            ssize_t n = recv(client, chunk, sizeof chunk, 0);
            if (n == 0 || (n < 0 && errno != EAGAIN)) break;
            if (n > 0) {
                append(&r->up, chunk, (size_t)n);
                forward(root, &r->up, r->up.len);
            }
        }
        if (p[1].revents) {
            ssize_t n = recv(root, chunk, sizeof chunk, 0);
            if (n == 0 || (n < 0 && errno != EAGAIN)) break;
            if (n > 0) {
                append(&r->down, chunk, (size_t)n);
                /* Whole messages only, so that one can be altered before it goes on. */
                forward(client, &r->down, whole_messages(&r->down, r->down.sent, r));
            }
        }
    }
    close(client);
    close(root);
    return NULL;
}

static void relay_start(relay_t *r, const cchani_boot_addr_t *root, int tamper) {
    memset(r, 0, sizeof *r);
    r->root = *root;
    r->tamper = tamper;
    cchani_boot_addr_t any;
    BOOT_OK(cchani_sock_resolve("127.0.0.1", 0, &any));
    BOOT_OK(cchani_sock_listen(&any, &r->listen_fd, &r->addr));
    BOOT_CHECK(pthread_create(&r->thread, NULL, relay_main, r) == 0);
}

static void relay_stop(relay_t *r) {
    pthread_join(r->thread, NULL);
    close(r->listen_fd);
}

/* Every MAC (or nonce) field of the messages in s. */
static size_t fields(const stream_t *s, uint64_t *out, size_t cap, size_t n) {
    for (size_t at = 0; at + CCHANI_BOOT_HDR_BYTES <= s->len && n < cap;) {
        out[n++] = cchani_get_le64(s->buf + at + 16);
        at += CCHANI_BOOT_HDR_BYTES + (size_t)cchani_get_le64(s->buf + at + 24);
    }
    return n;
}

static void fail(const char *why) {
    fprintf(stderr, "rank %d: %s\n", rank, why);
    exit(1);
}

static cchan_unique_id_t share_id(cchan_bootstrap_t *ctl, const cchan_unique_id_t *mine) {
    cchan_unique_id_t all[4];
    BOOT_OK(cchan_bootstrap_allgather(ctl, mine, all, sizeof *mine));
    return all[0];
}

/* The job's work while the relay records it. Returns the allgather's status on rank 1. */
static int job(cchan_bootstrap_t *bs, int expect_tamper) {
    uint64_t mine = 1000 + (uint64_t)rank, all[4];
    int rc = cchan_bootstrap_allgather(bs, &mine, all, sizeof mine);
    if (expect_tamper && rank == 1) return rc;
    BOOT_OK(rc);
    for (int r = 0; r < 4; r++) BOOT_CHECK(all[r] == 1000 + (uint64_t)r);
    if (expect_tamper) return 0;
    uint64_t token = 77, got = 0;
    if (rank == 1) BOOT_OK(cchan_bootstrap_send(bs, 0, 3, &token, sizeof token));
    if (rank == 0) BOOT_OK(cchan_bootstrap_recv(bs, 1, 3, &got, sizeof got));
    if (rank == 0) BOOT_CHECK(got == token);
    if (rank == 0) BOOT_OK(cchan_bootstrap_send(bs, 1, 4, &token, sizeof token));
    if (rank == 1) BOOT_OK(cchan_bootstrap_recv(bs, 0, 4, &got, sizeof got));
    BOOT_OK(cchan_bootstrap_barrier(bs));
    return 0;
}

/* A stranger with the capture, against a restarted job that reuses the key. */
static void stranger(const relay_t *r, const cchani_boot_id_t *id2) {
    uint64_t seen[4096];
    size_t n = fields(&r->up, seen, 4096, 0);
    n = fields(&r->down, seen, 4096, n);
    BOOT_CHECK(n >= 8); /* the capture holds the whole run */
    for (size_t i = 0; i < n; i++) {
        cchani_boot_id_t guess = *id2;
        guess.session = seen[i];
        cchan_unique_id_t gid;
        cchani_boot_id_encode(&guess, &gid);
        cchan_bootstrap_t *bs = NULL;
        if (cchan_bootstrap_create(&gid, 1, 4, &bs) == 0)
            fail("joined the restarted job with a key taken from the capture");
    }
    /* The recorded side of rank 1, replayed as it is. */
    int fd;
    BOOT_OK(cchani_sock_connect(&id2->root, cchani_now_ns() + 5000000000ull, 1, "root", &fd));
    for (size_t sent = 0; sent < r->up.len;) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (poll(&p, 1, 1000) <= 0) break;
        ssize_t k = send(fd, r->up.buf + sent, r->up.len - sent, MSG_NOSIGNAL);
        if (k <= 0) break; /* turned away: that is the point */
        sent += (size_t)k;
    }
    stream_t back = {0};
    double until = boot_now_s() + 0.5;
    while (boot_now_s() < until) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        uint8_t chunk[4096];
        ssize_t k = recv(fd, chunk, sizeof chunk, 0);
        if (k <= 0) break;
        append(&back, chunk, (size_t)k);
    }
    close(fd);
    for (size_t at = 0; at + CCHANI_BOOT_HDR_BYTES <= back.len;) {
        uint16_t type = (uint16_t)(back.buf[at + 6] | back.buf[at + 7] << 8);
        if (type == CCHANI_BOOT_WELCOME || type == CCHANI_BOOT_TABLE)
            fail("was admitted by replaying the capture");
        at += CCHANI_BOOT_HDR_BYTES + (size_t)cchani_get_le64(back.buf + at + 24);
    }
    free(back.buf);
    fprintf(stderr, "rank 1: %zu keys from the capture and its replay were all turned away\n", n);
}

int main(int argc, char **argv) {
    if (argc != 2 ||
        (strcmp(argv[1], "key") && strcmp(argv[1], "replay") && strcmp(argv[1], "tamper"))) {
        fprintf(stderr, "usage: boot_capture key|replay|tamper\n");
        return 2;
    }
    const char *s = argv[1];
    int tamper = !strcmp(s, "tamper");
    setenv("CCHAN_BOOTSTRAP_TIMEOUT_MS", "5000", 1);
    setenv("CCHAN_BOOTSTRAP_ADDR", "127.0.0.1", 1);
    rank = boot_test_rank = boot_env_int("CCHAN_RANK");
    BOOT_CHECK(boot_env_int("CCHAN_WORLD_SIZE") == 4);
    cchan_bootstrap_t *ctl = NULL;
    BOOT_OK(cchan_bootstrap_create_from_env(&ctl));

    cchan_unique_id_t id = {0};
    if (rank == 0) BOOT_OK(cchan_get_unique_id(&id));
    id = share_id(ctl, &id);
    cchani_boot_id_t bid;
    BOOT_OK(cchani_boot_id_decode(&id, CCHANI_BOOT_WIRE_VERSION, &bid));
    relay_t relay;
    cchan_unique_id_t use = id;
    if (rank == 1) {
        relay_start(&relay, &bid.root, tamper);
        cchani_boot_id_t via = bid;
        via.root = relay.addr;
        cchani_boot_id_encode(&via, &use);
    }
    cchan_bootstrap_t *bs = NULL;
    BOOT_OK(cchan_bootstrap_create(&use, rank, 4, &bs));
    int rc = job(bs, tamper);
    if (tamper && rank == 1) {
        if (rc == 0) fail("used an allgather result that was altered in transit");
        BOOT_CHECK(rc == CCHAN_ERR_PROTOCOL);
        BOOT_CHECK(strstr(cchan_last_error(), "failed its authentication"));
        fprintf(stderr, "rank 1: refused the altered message: %s\n", cchan_last_error());
    }
    BOOT_OK(cchan_bootstrap_destroy(bs));
    if (rank == 1) {
        relay_stop(&relay);
        if (tamper) BOOT_CHECK(relay.tampered);
        if (!strcmp(s, "key")) {
            BOOT_CHECK(relay.up.len > 200 && relay.down.len > 200); /* the whole run is in */
            for (size_t i = 0; i + 8 <= relay.up.len; i++)
                if (cchani_get_le64(relay.up.buf + i) == bid.session)
                    fail("found the session key in what it sent");
            for (size_t i = 0; i + 8 <= relay.down.len; i++)
                if (cchani_get_le64(relay.down.buf + i) == bid.session)
                    fail("found the session key in what the root sent");
        }
    }
    BOOT_OK(cchan_bootstrap_barrier(ctl));

    if (!strcmp(s, "replay")) {
        /* The restart: a new root (port), the same key. */
        cchan_unique_id_t id2 = {0};
        if (rank == 0) {
            cchani_boot_id_t fresh;
            BOOT_OK(cchan_get_unique_id(&id2));
            BOOT_OK(cchani_boot_id_decode(&id2, CCHANI_BOOT_WIRE_VERSION, &fresh));
            fresh.session = bid.session;
            cchani_boot_id_encode(&fresh, &id2);
        }
        id2 = share_id(ctl, &id2);
        cchani_boot_id_t bid2;
        BOOT_OK(cchani_boot_id_decode(&id2, CCHANI_BOOT_WIRE_VERSION, &bid2));
        BOOT_CHECK(bid2.session == bid.session);
        if (rank == 1) stranger(&relay, &bid2);
        BOOT_OK(cchan_bootstrap_create(&id2, rank, 4, &bs));
        BOOT_CHECK(job(bs, 0) == 0);
        BOOT_OK(cchan_bootstrap_destroy(bs));
    }
    if (rank == 1) {
        free(relay.up.buf);
        free(relay.down.buf);
    }
    BOOT_OK(cchan_bootstrap_destroy(ctl));
    fprintf(stderr, "rank %d: %s: done\n", rank, s);
    return 0;
}
