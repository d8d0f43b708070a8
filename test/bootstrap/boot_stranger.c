/* Fuzz of the bootstrap's socket state machine by a stranger process (run through cchan-run,
 * 4 ranks): while the ranks bootstrap and then run collectives and point-to-point messages, a
 * stranger connects to their listeners again and again, at random moments, and sends random
 * bytes, well-formed headers of random type, version, length and key (or the key a rejection
 * carried), truncated frames, stalls and abrupt closes. The job must complete with correct
 * results on every rank: no hang, no crash (this test runs under ASan/UBSan and TSan in make
 * test), no failure. The seed is printed; CCHAN_TEST_SEED replays one.
 *
 * Rank 3 forks two strangers: one before it joins (it attacks the root during init), one after
 * init (it attacks every rank's listener during the collectives). Each runs for STRANGER_S.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "boot_test.h"
#include "bootstrap.h"
#include "bootstrap_socket.h"

#define STRANGER_S 2.5
#define JOB_S 3.0
#define MAX_TARGETS 4

static int rank;
static uint64_t rng;

static uint64_t next(void) {
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t below(uint64_t n) { return n ? next() % n : 0; }

/* Sends what the socket takes within a short time; a stranger is often turned away midway. */
static int send_some(int fd, const void *buf, size_t len) {
    const uint8_t *p = buf;
    double until = boot_now_s() + 0.2;
    while (len > 0 && boot_now_s() < until) {
        struct pollfd w = {.fd = fd, .events = POLLOUT};
        if (poll(&w, 1, 20) <= 0) continue;
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads whatever comes for up to ms; keeps the first header's session field (a rejection's). */
static void drain(int fd, int ms, uint64_t *learned) {
    uint8_t buf[4096];
    size_t got = 0;
    double until = boot_now_s() + ms / 1000.0;
    while (boot_now_s() < until) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10) <= 0) continue;
        ssize_t n = recv(fd, buf + got, sizeof buf - got, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
        if (n > 0) got = (got + (size_t)n) % sizeof buf;
        if (got >= CCHANI_BOOT_HDR_BYTES && learned) {
            uint64_t v = 0;
            for (int i = 7; i >= 0; i--) v = v << 8 | buf[16 + i];
            if (v) *learned = v;
        }
    }
}

static void random_header(uint8_t out[CCHANI_BOOT_HDR_BYTES], uint64_t key, int nranks) {
    static const uint16_t types[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 0xffff};
    uint64_t lens[] = {0, 1, 8, 32, 255, 4096, CCHANI_BOOT_MAX_PAYLOAD, UINT64_MAX, below(1 << 20)};
    cchani_boot_hdr_t h;
    memset(&h, 0, sizeof h);
    h.magic = below(8) ? CCHANI_BOOT_MAGIC : (uint32_t)next();
    h.version = below(4) ? CCHANI_BOOT_WIRE_VERSION : (uint16_t)below(100);
    h.type = types[below(sizeof types / sizeof types[0])];
    h.tag = below(3) ? (int32_t)below(8) : (int32_t)next();
    h.src = below(4) ? (int32_t)below((uint64_t)nranks) : (int32_t)next();
    h.session = below(2) ? key : next();
    h.len = lens[below(sizeof lens / sizeof lens[0])];
    cchani_boot_hdr_encode(&h, out);
}

/* One visit: connect, misbehave one way, leave. */
static void visit(const cchani_boot_addr_t *target, uint64_t *key, int nranks) {
    int fd;
    if (cchani_sock_connect(target, cchani_now_ns() + 200000000ull, 0, "target", &fd) != 0) {
        cchani_clear_error();
        return;
    }
    uint8_t buf[1024];
    switch (below(7)) {
    case 0: break; /* connect and close */
    case 1:        /* random bytes */
        for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)next();
        send_some(fd, buf, below(sizeof buf) + 1);
        break;
    case 2: /* headers with random fields, each followed by some random payload */
        for (int k = (int)below(4) + 1; k > 0; k--) {
            random_header(buf, *key, nranks);
            size_t extra = below(256);
            for (size_t i = 0; i < extra; i++) buf[CCHANI_BOOT_HDR_BYTES + i] = (uint8_t)next();
            if (send_some(fd, buf, CCHANI_BOOT_HDR_BYTES + extra)) break;
        }
        break;
    case 3: /* a truncated header, then silence */
        random_header(buf, *key, nranks);
        send_some(fd, buf, below(CCHANI_BOOT_HDR_BYTES));
        usleep((useconds_t)below(100) * 1000);
        break;
    case 4: /* a header announcing a long payload, trickled */
        random_header(buf, *key, nranks);
        send_some(fd, buf, CCHANI_BOOT_HDR_BYTES);
        for (int k = 0; k < 5; k++) {
            buf[0] = (uint8_t)next();
            if (send_some(fd, buf, 1)) break;
            usleep(10 * 1000);
        }
        break;
    case 5: /* an AUTH with a random challenge: learn whatever the answer holds */
    default:
        random_header(buf, *key, nranks);
        buf[6] = CCHANI_BOOT_AUTH;
        buf[7] = 0;
        send_some(fd, buf, CCHANI_BOOT_HDR_BYTES + below(64));
        break;
    }
    drain(fd, (int)below(20), key);
    if (below(2)) {
        struct linger l = {1, 0}; /* an abrupt reset instead of a close */
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    close(fd);
}

static pid_t start_stranger(const cchani_boot_addr_t *targets, int ntargets, int nranks,
                            uint64_t seed) {
    pid_t pid = fork();
    BOOT_CHECK(pid >= 0);
    if (pid > 0) return pid;
    rng = seed;
    uint64_t key = 0;
    int visits = 0;
    double until = boot_now_s() + STRANGER_S;
    while (boot_now_s() < until) {
        visit(&targets[below((uint64_t)ntargets)], &key, nranks);
        visits++;
        if (below(4) == 0) usleep((useconds_t)below(30) * 1000);
    }
    fprintf(stderr, "stranger %llx: %d visits\n", (unsigned long long)seed, visits);
    _exit(0);
}

int main(void) {
    setenv("CCHAN_BOOTSTRAP_TIMEOUT_MS", "10000", 1);
    rank = boot_test_rank = boot_env_int("CCHAN_RANK");
    const int n = boot_env_int("CCHAN_WORLD_SIZE");
    BOOT_CHECK(n == 4);
    const char *s = getenv("CCHAN_TEST_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
    if (rank == 3) fprintf(stderr, "boot_stranger: seed %#llx\n", (unsigned long long)seed);

    pid_t before = -1, after = -1;
    if (rank == 3) {
        cchani_boot_env_t env;
        cchani_boot_addr_t root;
        BOOT_OK(cchani_boot_env_parse(&env));
        BOOT_OK(cchani_sock_resolve(env.root_host, env.root_port, &root));
        before = start_stranger(&root, 1, n, seed);
        usleep(300 * 1000); /* the others join while the stranger is at the root */
    }
    cchan_bootstrap_t *bs = NULL;
    BOOT_OK(cchan_bootstrap_create_from_env(&bs));
    if (rank == 3) {
        cchani_boot_addr_t targets[MAX_TARGETS];
        for (int r = 0; r < n; r++) targets[r] = bs->peers[r].rec.listen;
        after = start_stranger(targets, n, n, seed ^ 0x5bd1e995u);
    }
    double until = boot_now_s() + JOB_S;
    int rounds = 0;
    for (;;) {
        uint64_t mine = (uint64_t)rank << 32 | (uint64_t)rounds, all[4];
        BOOT_OK(cchan_bootstrap_allgather(bs, &mine, all, sizeof mine));
        for (int r = 0; r < n; r++) BOOT_CHECK(all[r] == ((uint64_t)r << 32 | (uint64_t)rounds));
        /* A ring of point-to-point messages. */
        uint64_t out = mine, in = 0;
        int to = (rank + 1) % n, from = (rank + n - 1) % n;
        BOOT_OK(cchan_bootstrap_send(bs, to, rounds, &out, sizeof out));
        BOOT_OK(cchan_bootstrap_recv(bs, from, rounds, &in, sizeof in));
        BOOT_CHECK(in == ((uint64_t)from << 32 | (uint64_t)rounds));
        BOOT_OK(cchan_bootstrap_barrier(bs));
        rounds++;
        uint8_t go = rank == 0 ? boot_now_s() < until : 0, gos[4];
        BOOT_OK(cchan_bootstrap_allgather(bs, &go, gos, 1));
        if (!gos[0]) break;
    }
    if (rank == 3) {
        int st;
        BOOT_CHECK(waitpid(before, &st, 0) == before && WIFEXITED(st) && WEXITSTATUS(st) == 0);
        BOOT_CHECK(waitpid(after, &st, 0) == after && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    BOOT_OK(cchan_bootstrap_barrier(bs));
    BOOT_OK(cchan_bootstrap_destroy(bs));
    fprintf(stderr, "rank %d: the job completed: %d rounds\n", rank, rounds);
    return 0;
}
