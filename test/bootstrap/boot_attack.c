/* A stranger who can reach the bootstrap's sockets but knows nothing of the job (run through
 * cchan-run, 4 ranks). Whatever it sends, it must learn nothing it could join with, and the job
 * must complete as if it were not there.
 *
 *   boot_attack leak         every rejection the root sends holds no session key
 *   boot_attack impersonate  with what it learned, it tries to take the late rank 3's place at
 *                            init and to receive the peer table
 *   boot_attack version      it poisons init with a HELLO of wire version 99
 *   boot_attack inject       after init, it connects to rank 1 as rank 2 and sends an ERROR
 *                            blaming rank 2
 *   boot_attack flood        it queues 64 MiB of messages at the root under unused tags
 *
 * Rank 3 plays the stranger before it joins (a forked child of it after init, for inject).
 */
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "boot_test.h"
#include "bootstrap.h"
#include "bootstrap_socket.h"

#define TIMEOUT_MS "4000"

static int rank;
static cchani_boot_env_t env;
static cchani_boot_addr_t root;

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int connect_to(const cchani_boot_addr_t *addr) {
    int fd;
    BOOT_OK(cchani_sock_connect(addr, cchani_now_ns() + 5000000000ull, 1, "target", &fd));
    return fd;
}

static void send_all(int fd, const void *buf, size_t len) {
    const uint8_t *p = buf;
    double until = boot_now_s() + 5;
    while (len > 0 && boot_now_s() < until) {
        struct pollfd w = {.fd = fd, .events = POLLOUT};
        if (poll(&w, 1, 100) <= 0) continue;
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EAGAIN) continue;
        if (n <= 0) return; /* turned away: that is the point */
        p += n;
        len -= (size_t)n;
    }
}

/* Reads what arrives within ms (or until the peer closes). */
static size_t read_for(int fd, uint8_t *buf, size_t cap, int ms) {
    size_t got = 0;
    double until = boot_now_s() + ms / 1000.0;
    while (boot_now_s() < until) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        uint8_t sink[4096];
        ssize_t n = recv(fd, got < cap ? buf + got : sink, got < cap ? cap - got : sizeof sink, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN)) break;
        if (n > 0 && got < cap) got += (size_t)n;
    }
    return got;
}

static void send_header(int fd, uint16_t type, uint16_t version, int32_t src, uint64_t session,
                        uint64_t len) {
    cchani_boot_hdr_t h = {CCHANI_BOOT_MAGIC, version, type, 0, src, session, len};
    uint8_t buf[CCHANI_BOOT_HDR_BYTES];
    cchani_boot_hdr_encode(&h, buf);
    send_all(fd, buf, sizeof buf);
}

/* What a stranger can learn: the session field of the answer to a garbage request. */
static uint64_t learn_key(const cchani_boot_addr_t *target) {
    static const char garbage[] = "GET /index.html HTTP/1.1\r\nHost: cchan.example\r\nAccept: */*\r\n\r\n";
    int fd = connect_to(target);
    send_all(fd, garbage, sizeof garbage - 1);
    uint8_t reply[CCHANI_BOOT_HDR_BYTES] = {0};
    size_t got = read_for(fd, reply, sizeof reply, 2000);
    close(fd);
    return got >= CCHANI_BOOT_HDR_BYTES ? le64(reply + 16) : 0;
}

/* A HELLO as rank src with the learned key: a proof field of zeros where the wire has one. */
static int hello_as(const cchani_boot_addr_t *target, int src, uint64_t key, uint16_t version) {
    uint8_t payload[CCHANI_BOOT_HELLO_BYTES] = {0};
    size_t at = CCHANI_BOOT_HELLO_BYTES - 4 - CCHANI_BOOT_RECORD_BYTES;
    cchani_put_le32(payload + at, (uint32_t)env.nranks);
    cchani_boot_peer_record_t rec = {0};
    BOOT_OK(cchani_sock_resolve("127.0.0.1", 9, &rec.listen));
    snprintf(rec.hostname, sizeof rec.hostname, "stranger");
    cchani_boot_record_encode(&rec, payload + at + 4);
    int fd = connect_to(target);
    send_header(fd, CCHANI_BOOT_HELLO, version, src, key, sizeof payload);
    send_all(fd, payload, sizeof payload);
    return fd;
}

static void fail(const char *why) {
    fprintf(stderr, "rank %d: the stranger %s\n", rank, why);
    exit(1);
}

static void attack_leak(void) {
    for (int i = 0; i < 3; i++)
        if (learn_key(&root) == env.session) fail("learned the session key from a rejection");
}

static void attack_impersonate(void) {
    usleep(500 * 1000); /* ranks 1 and 2 have joined; the root waits for rank 3 */
    int fd = hello_as(&root, 3, learn_key(&root), CCHANI_BOOT_WIRE_VERSION);
    uint8_t reply[CCHANI_BOOT_HDR_BYTES];
    size_t got = read_for(fd, reply, sizeof reply, 1500);
    close(fd);
    if (got == sizeof reply && (reply[6] | reply[7] << 8) == CCHANI_BOOT_TABLE)
        fail("was admitted as rank 3 and received the peer table");
}

static void attack_version(void) {
    uint64_t key = learn_key(&root);
    int fd = hello_as(&root, 3, key, 99);
    read_for(fd, NULL, 0, 300);
    close(fd);
    /* The same after starting a handshake of its own. */
    fd = connect_to(&root);
    send_header(fd, 6 /* AUTH */, 99, 3, key, 0);
    read_for(fd, NULL, 0, 300);
    send_header(fd, CCHANI_BOOT_HELLO, 99, 3, 0, 8);
    send_all(fd, "\0\0\0\0\0\0\0\0", 8);
    read_for(fd, NULL, 0, 300);
    close(fd);
}

static void attack_flood(void) {
    usleep(300 * 1000);
    uint64_t key = learn_key(&root);
    int fd = hello_as(&root, 3, key, CCHANI_BOOT_WIRE_VERSION);
    static uint8_t chunk[1 << 20];
    for (int m = 0; m < 8; m++) {
        send_header(fd, CCHANI_BOOT_P2P, CCHANI_BOOT_WIRE_VERSION, 3, key, 8u << 20);
        for (int i = 0; i < 8; i++) send_all(fd, chunk, sizeof chunk);
    }
    close(fd);
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kib = atol(line + 6);
    if (f) fclose(f);
    return kib;
}

/* After init: a child of rank 3 plays a stranger against rank 1's listener, claiming rank 2. */
static pid_t start_inject(cchan_bootstrap_t *bs) {
    cchani_boot_addr_t target = bs->peers[1].rec.listen;
    pid_t pid = fork();
    BOOT_CHECK(pid >= 0);
    if (pid > 0) return pid;
    uint64_t key = learn_key(&target);
    int fd = hello_as(&target, 2, key, CCHANI_BOOT_WIRE_VERSION);
    static const char text[] = "rank 2 is broken\033[2J";
    uint8_t payload[4 + sizeof text];
    cchani_put_le32(payload, (uint32_t)CCHAN_ERR_PEER);
    memcpy(payload + 4, text, sizeof text);
    cchani_boot_hdr_t h = {CCHANI_BOOT_MAGIC, CCHANI_BOOT_WIRE_VERSION, CCHANI_BOOT_ERROR, 0, 2,
                           key, sizeof payload};
    uint8_t hdr[CCHANI_BOOT_HDR_BYTES];
    cchani_boot_hdr_encode(&h, hdr);
    send_all(fd, hdr, sizeof hdr);
    send_all(fd, payload, sizeof payload);
    read_for(fd, NULL, 0, 500);
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: boot_attack leak|impersonate|version|inject|flood\n");
        return 2;
    }
    const char *s = argv[1];
    setenv("CCHAN_BOOTSTRAP_TIMEOUT_MS", TIMEOUT_MS, 1);
    rank = boot_test_rank = boot_env_int("CCHAN_RANK");
    BOOT_CHECK(boot_env_int("CCHAN_WORLD_SIZE") == 4);
    BOOT_OK(cchani_boot_env_parse(&env));
    BOOT_OK(cchani_sock_resolve(env.root_host, env.root_port, &root));
    long rss0 = rss_kib();
    if (rank == 3) {
        if (!strcmp(s, "leak")) attack_leak();
        if (!strcmp(s, "impersonate")) attack_impersonate();
        if (!strcmp(s, "version")) attack_version();
        if (!strcmp(s, "flood")) attack_flood();
    }
    cchan_bootstrap_t *bs = NULL;
    BOOT_OK(cchan_bootstrap_create_from_env(&bs));
    pid_t child = rank == 3 && !strcmp(s, "inject") ? start_inject(bs) : 0;
    /* Collectives while the stranger is at work. */
    double until = boot_now_s() + 1.5;
    int rounds = 0;
    do {
        uint64_t mine = (uint64_t)rank * 1000 + (uint64_t)rounds, all[4];
        BOOT_OK(cchan_bootstrap_allgather(bs, &mine, all, sizeof mine));
        for (int r = 0; r < 4; r++) BOOT_CHECK(all[r] == (uint64_t)r * 1000 + (uint64_t)rounds);
        uint8_t flag = 0;
        BOOT_OK(cchan_bootstrap_allgather(bs, &flag, (uint8_t[4]){0}, 1));
        rounds++;
        usleep(20 * 1000);
        /* Everyone stops together: rank 0's clock decides. */
        uint8_t go = rank == 0 ? boot_now_s() < until : 0, gos[4];
        BOOT_OK(cchan_bootstrap_allgather(bs, &go, gos, 1));
        if (!gos[0]) break;
    } while (1);
    if (child > 0) {
        int st;
        BOOT_CHECK(waitpid(child, &st, 0) == child);
    }
    BOOT_OK(cchan_bootstrap_barrier(bs));
    long grown = rss_kib() - rss0;
    if (rank == 0 && grown > 32 * 1024) fail("made the root hold its messages (RSS grew)");
    BOOT_OK(cchan_bootstrap_destroy(bs));
    fprintf(stderr, "rank %d: %s: the job completed (%d rounds, RSS +%ld KiB)\n", rank, s, rounds,
            grown);
    return 0;
}
