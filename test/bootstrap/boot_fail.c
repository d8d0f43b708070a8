/* Bootstrap failure injection (run through cchan-run). Every rank must end with an error that
 * names the cause, within a bounded time; a rank that sees the expected failure exits 0, so the
 * test passes only if all of them did.
 *
 *   boot_fail early-exit|root-exit|silent-rank|wrong-session|port-in-use|version|version-root|
 *             size-mismatch|foreign-client
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "boot_test.h"
#include "bootstrap.h"
#include "bootstrap_socket.h"

#define TIMEOUT_MS "3000"
#define BOUND_S 8.0 /* every failure must be reported well within this */

static int rank, size;
static double t0;
static cchan_bootstrap_t *bs; /* destroyed before a rank ends, so leak checkers see a clean run */

/* Checks that rc is one of the expected statuses and the message holds every word, then ends the
 * rank successfully. */
static void expect_failure(int rc, int status, int alt_status, const char *w1, const char *w2) {
    double took = boot_now_s() - t0;
    BOOT_CHECK(rc != 0);
    if (rc != status && rc != alt_status) {
        fprintf(stderr, "rank %d: status %d (%s), expected %d or %d: %s\n", rank, rc,
                cchan_strerror(rc), status, alt_status, cchan_last_error());
        exit(1);
    }
    BOOT_CHECK(strstr(cchan_last_error(), w1));
    BOOT_CHECK(!w2 || strstr(cchan_last_error(), w2));
    BOOT_CHECK(took < BOUND_S);
    fprintf(stderr, "rank %d: failed as expected after %.1f s: %s\n", rank, took,
            cchan_last_error());
    cchan_bootstrap_destroy(bs);
    exit(0);
}

static void create_ok(void) { BOOT_OK(cchan_bootstrap_create_from_env(&bs)); }

static int allgather_8(void) {
    uint64_t mine = (uint64_t)rank, all[64];
    return cchan_bootstrap_allgather(bs, &mine, all, sizeof mine);
}

/* A rank dies (without cleaning up) while the others are inside an allgather. */
static void early_exit(int victim) {
    create_ok();
    BOOT_OK(cchan_bootstrap_barrier(bs));
    if (rank == victim) {
        usleep(200 * 1000);
        _exit(0);
    }
    t0 = boot_now_s();
    char words[32];
    snprintf(words, sizeof words, "rank %d", victim);
    expect_failure(allgather_8(), CCHAN_ERR_PEER, CCHAN_ERR_PEER, words, "closed its connection");
}

/* A rank that is alive but never joins the allgather in time. */
static void silent_rank(void) {
    create_ok();
    int victim = size - 1;
    t0 = boot_now_s();
    if (rank == victim) usleep(4500 * 1000);
    char words[64];
    snprintf(words, sizeof words, "did not contribute to allgather #1 (first: rank %d)", victim);
    expect_failure(allgather_8(), CCHAN_ERR_TIMEOUT, CCHAN_ERR_TIMEOUT, words, NULL);
}

/* The last rank never starts: the root reports it, and the others relay the root's words without
 * suggesting that the root itself never answered. */
static void missing_rank(void) {
    if (rank == size - 1) {
        usleep(5000 * 1000);
        exit(0);
    }
    int rc = cchan_bootstrap_create_from_env(&bs);
    char words[64];
    snprintf(words, sizeof words, "first missing: rank %d", size - 1);
    BOOT_CHECK(!strstr(cchan_last_error(), "never answered"));
    expect_failure(rc, CCHAN_ERR_TIMEOUT, CCHAN_ERR_TIMEOUT, words, rank ? "rank 0 reports" : NULL);
}

/* The last rank uses another job's session: it is turned away, the others time out saying why. */
static void wrong_session(void) {
    if (rank == size - 1) {
        setenv("CCHAN_BOOTSTRAP_SESSION", "another-job", 1);
        expect_failure(cchan_bootstrap_create_from_env(&bs), CCHAN_ERR_PROTOCOL, CCHAN_ERR_PROTOCOL,
                       "session key mismatch", NULL);
    }
    expect_failure(cchan_bootstrap_create_from_env(&bs), CCHAN_ERR_TIMEOUT, CCHAN_ERR_TIMEOUT,
                   "turned away 1 connection", "session key mismatch");
}

static int root_port(void) {
    const char *root = getenv("CCHAN_BOOTSTRAP_ROOT");
    BOOT_CHECK(root && strrchr(root, ':'));
    return atoi(strrchr(root, ':') + 1);
}

/* Something else holds the root port: rank 0 cannot listen, the others reach a process that never
 * answers. */
static void port_in_use(void) {
    if (rank != 0)
        expect_failure(cchan_bootstrap_create_from_env(&bs), CCHAN_ERR_TIMEOUT, CCHAN_ERR_TIMEOUT,
                       "never answered the handshake", "127.0.0.1");
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)root_port()),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int squatter = socket(AF_INET, SOCK_STREAM, 0);
    BOOT_CHECK(squatter >= 0 && bind(squatter, (struct sockaddr *)&a, sizeof a) == 0 &&
               listen(squatter, 64) == 0);
    int rc = cchan_bootstrap_create_from_env(&bs);
    BOOT_CHECK(boot_now_s() - t0 < BOUND_S);
    /* Keep the port occupied until the others have given up on it: they wait 1.5 timeouts (extra
     * time for the root to report), 4.5 s, and may start late on a loaded machine (sanitizers). If
     * the squatter closed first they would see "peer closed" instead of the timeout under test. */
    usleep(7500 * 1000);
    t0 = boot_now_s(); /* the failing call itself was timed above */
    expect_failure(rc, -EADDRINUSE, -EADDRINUSE, "address already in use", "127.0.0.1");
}

/* One rank (or the root) speaks another wire version: every rank fails with a version error. */
static void version(int victim) {
    if (rank == victim) setenv("CCHAN_TEST_WIRE_VERSION", "99", 1);
    expect_failure(cchan_bootstrap_create_from_env(&bs), CCHAN_ERR_VERSION, CCHAN_ERR_VERSION,
                   "version mismatch", "99");
}

static void size_mismatch(void) {
    create_ok();
    uint8_t send[16] = {0}, recv[16 * 64];
    t0 = boot_now_s();
    size_t bytes = rank == size - 1 ? 16 : 8;
    expect_failure(cchan_bootstrap_allgather(bs, send, recv, bytes), CCHAN_ERR_PROTOCOL,
                   CCHAN_ERR_PROTOCOL, "contributed a different size", NULL);
}

/* ---------------------------------------------------------------- foreign client */

typedef struct target {
    cchani_boot_addr_t root;
    cchani_boot_expect_t expect;
} target_t;

static target_t find_root(void) {
    cchani_boot_env_t env;
    target_t t;
    BOOT_OK(cchani_boot_env_parse(&env));
    BOOT_OK(cchani_sock_resolve(env.root_host, env.root_port, &t.root));
    t.expect =
        (cchani_boot_expect_t){env.session, CCHANI_BOOT_WIRE_VERSION, env.nranks, UINT64_MAX};
    return t;
}

static int connect_root(const target_t *t) {
    int fd;
    BOOT_OK(cchani_sock_connect(&t->root, cchani_now_ns() + 5000000000ull, 1, "the root", &fd));
    return fd;
}

static void send_bytes(int fd, const void *buf, size_t len) {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    BOOT_CHECK(poll(&p, 1, 5000) == 1);
    BOOT_CHECK(send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len);
}

/* Reads until the root closes the connection (5 s at most); returns what arrived. */
static size_t read_until_closed(int fd, uint8_t *buf, size_t cap) {
    size_t got = 0;
    double until = boot_now_s() + 5;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        BOOT_CHECK(boot_now_s() < until); /* the root must not keep a bad client */
        if (poll(&p, 1, 100) <= 0) continue;
        uint8_t sink[256];
        ssize_t n = recv(fd, got < cap ? buf + got : sink, got < cap ? cap - got : sizeof sink, 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) return got;
        BOOT_CHECK(n > 0 || errno == EAGAIN);
        if (n > 0 && got < cap) got += (size_t)n;
    }
}

/* The root turns the connection away; when it answers, its ERROR message holds `words`, and never
 * the session key: whatever a stranger sends, it learns nothing it could join the job with. */
static void expect_rejected(const target_t *t, int fd, const char *words) {
    uint8_t reply[CCHANI_BOOT_HDR_BYTES + 4 + CCHANI_BOOT_MAX_ERROR_TEXT + 1] = {0};
    size_t got = read_until_closed(fd, reply, sizeof reply - 1);
    close(fd);
    for (size_t i = 0; i + 8 <= got; i++)
        if (cchani_get_le64(reply + i) == t->expect.session) {
            fprintf(stderr, "rank %d: the root's rejection holds the session key\n", rank);
            exit(1);
        }
    if (!words) return;
    cchani_boot_hdr_t h;
    BOOT_OK(cchani_boot_hdr_decode_open(reply, got, &t->expect, &h));
    BOOT_CHECK(h.type == CCHANI_BOOT_ERROR && h.src == 0);
    BOOT_CHECK(got == CCHANI_BOOT_HDR_BYTES + h.len);
    const char *text = (const char *)reply + CCHANI_BOOT_HDR_BYTES + 4;
    if (!strstr(text, words)) {
        fprintf(stderr, "rank %d: root's reply '%s' lacks '%s'\n", rank, text, words);
        exit(1);
    }
}

static void write_header(int fd, uint16_t type, int32_t tag, uint64_t session, uint64_t len,
                         size_t cut) {
    cchani_boot_hdr_t h = {CCHANI_BOOT_MAGIC, CCHANI_BOOT_WIRE_VERSION, type, tag, rank, session,
                           len};
    uint8_t buf[CCHANI_BOOT_HDR_BYTES];
    cchani_boot_hdr_encode(&h, buf);
    send_bytes(fd, buf, cut ? cut : sizeof buf);
}

static int send_header(const target_t *t, uint16_t type, uint64_t session, uint64_t len,
                       size_t cut) {
    int fd = connect_root(t);
    write_header(fd, type, 0, session, len, cut);
    return fd;
}

/* Starts the handshake as this rank and reads the root's answer; returns the root's nonce. */
static uint64_t send_auth(int fd, uint64_t nonce_c) {
    write_header(fd, CCHANI_BOOT_AUTH, 0, nonce_c, 0, 0);
    uint8_t answer[CCHANI_BOOT_HDR_BYTES + CCHANI_BOOT_PROOF_BYTES];
    size_t got = 0;
    double until = boot_now_s() + 5;
    while (got < sizeof answer) {
        BOOT_CHECK(boot_now_s() < until);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t n = recv(fd, answer + got, sizeof answer - got, 0);
        BOOT_CHECK(n > 0);
        got += (size_t)n;
    }
    return cchani_get_le64(answer + 16);
}

static void attack_root(const target_t *t) {
    static const char http[] =
        "GET /index.html HTTP/1.1\r\nHost: cchan.example\r\nAccept: */*\r\n\r\n";
    int fd = connect_root(t);
    send_bytes(fd, http, sizeof http - 1);
    expect_rejected(t, fd, NULL);

    fd = send_header(t, CCHANI_BOOT_HELLO, t->expect.session, CCHANI_BOOT_HELLO_BYTES, 10);
    shutdown(fd, SHUT_WR); /* truncated header */
    expect_rejected(t, fd, "truncated header");

    fd = send_header(t, CCHANI_BOOT_P2P, t->expect.session, (uint64_t)1 << 40, 0);
    expect_rejected(t, fd, "before proving the session key");

    fd = send_header(t, CCHANI_BOOT_HELLO, t->expect.session, CCHANI_BOOT_HELLO_BYTES, 0);
    expect_rejected(t, fd, "the handshake expects AUTH");

    fd = connect_root(t);
    send_auth(fd, 42);
    write_header(fd, CCHANI_BOOT_HELLO, 0, 0, CCHANI_BOOT_HELLO_BYTES, 0);
    send_bytes(fd, "0123456789", 10);
    shutdown(fd, SHUT_WR); /* truncated payload */
    expect_rejected(t, fd, "truncated message");

    /* A HELLO whose proof was made with another key. */
    fd = connect_root(t);
    uint64_t nonce_s = send_auth(fd, 43);
    uint8_t hello[CCHANI_BOOT_HELLO_BYTES] = {0};
    cchani_put_le64(hello, cchani_boot_proof(t->expect.session ^ 1, 'C', 43, nonce_s, rank, 0));
    write_header(fd, CCHANI_BOOT_HELLO, 0, 0, sizeof hello, 0);
    send_bytes(fd, hello, sizeof hello);
    expect_rejected(t, fd, "session key mismatch");
}

/* Rank 1 plays a stranger before it joins and again after init, and keeps one silent connection
 * open throughout: the root rejects each, and the real ranks are served all the same. */
static void foreign_client(void) {
    int silent = -1;
    target_t t = find_root();
    if (rank == 1) {
        silent = connect_root(&t);
        attack_root(&t);
    }
    create_ok();
    BOOT_OK(allgather_8());
    if (rank == 1) attack_root(&t);
    BOOT_OK(cchan_bootstrap_barrier(bs));
    BOOT_OK(allgather_8());
    BOOT_OK(cchan_bootstrap_destroy(bs));
    if (silent >= 0) close(silent);
    exit(0);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: boot_fail SCENARIO (see the source)\n");
        return 2;
    }
    setenv("CCHAN_BOOTSTRAP_TIMEOUT_MS", TIMEOUT_MS, 1);
    rank = boot_test_rank = boot_env_int("CCHAN_RANK");
    size = boot_env_int("CCHAN_WORLD_SIZE");
    BOOT_CHECK(size >= 2 && size <= 64);
    t0 = boot_now_s();
    const char *s = argv[1];
    if (!strcmp(s, "early-exit"))
        early_exit(size - 1);
    else if (!strcmp(s, "root-exit"))
        early_exit(0);
    else if (!strcmp(s, "missing-rank"))
        missing_rank();
    else if (!strcmp(s, "silent-rank"))
        silent_rank();
    else if (!strcmp(s, "wrong-session"))
        wrong_session();
    else if (!strcmp(s, "port-in-use"))
        port_in_use();
    else if (!strcmp(s, "version"))
        version(size - 1);
    else if (!strcmp(s, "version-root"))
        version(0);
    else if (!strcmp(s, "size-mismatch"))
        size_mismatch();
    else if (!strcmp(s, "foreign-client"))
        foreign_client();
    fprintf(stderr, "boot_fail: unknown scenario '%s'\n", s);
    return 2;
}
