/* The bootstrap's resource limits, each on its own (run through cchan-run, 2 ranks):
 *
 *   boot_limits queue  rank 1 queues messages at rank 0 that no receive takes. Up to the cap
 *                      (256 MiB, CCHANI_BOOT_MAX_QUEUED; 32 MiB under TSan) they are kept and
 *                      delivered in order; past it rank 0's receive fails with
 *                      CCHAN_ERR_NO_RESOURCE naming rank 1 and the cap, instead of buffering
 *                      without bound.
 *   boot_limits idle   a stranger connects to the root's listener and never speaks: the root
 *                      closes the connection once the idle limit (the bootstrap timeout, here
 *                      2 s, when shorter than 10 s) has passed, while the job goes on.
 * Each fails when its limit is removed from the bootstrap.
 */
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "boot_test.h"
#include "bootstrap.h"
#include "bootstrap_socket.h"

/* ThreadSanitizer shadows every byte copied: at the real cap a rank would need about 2 GiB, so
 * there the test lowers the cap (after checking the default) and keeps the same shape. */
#if defined(__SANITIZE_THREAD__)
#define CAP ((uint64_t)32 << 20)
#else
#define CAP CCHANI_BOOT_MAX_QUEUED
#endif
#define CAP_MSGS 4
#define BIG ((size_t)(CAP / CAP_MSGS))
#define IDLE_MS 2000

static int rank;
static cchan_bootstrap_t *bs;

static void fill(uint8_t *p, size_t n, int k) {
    for (size_t i = 0; i < n; i += 4096) p[i] = (uint8_t)(k * 31 + (int)(i >> 12));
}

static int same(const uint8_t *p, size_t n, int k) {
    for (size_t i = 0; i < n; i += 4096)
        if (p[i] != (uint8_t)(k * 31 + (int)(i >> 12))) return 0;
    return 1;
}

static void queue_cap(void) {
    uint8_t *buf = malloc(BIG);
    BOOT_CHECK(buf != NULL);
    uint64_t token = 42;
    if (rank == 1) {
        /* Phase 1: the cap less one message, then the message rank 0 waits for. */
        for (int k = 0; k < CAP_MSGS - 1; k++) {
            fill(buf, BIG, k);
            BOOT_OK(cchan_bootstrap_send(bs, 0, 100 + k, buf, BIG));
        }
        BOOT_OK(cchan_bootstrap_send(bs, 0, 8, &token, sizeof token));
        BOOT_OK(cchan_bootstrap_barrier(bs));
        /* Phase 2: past the cap. Rank 0 stops reading this connection; what is left of the sends
         * fails or is lost, and the barrier fails: either way this rank ends with an error. */
        int rc = 0;
        for (int k = 0; k <= CAP_MSGS && !rc; k++) {
            fill(buf, BIG, k);
            rc = cchan_bootstrap_send(bs, 0, 200 + k, buf, BIG);
        }
        if (!rc) rc = cchan_bootstrap_send(bs, 0, 9, &token, sizeof token);
        if (!rc) rc = cchan_bootstrap_barrier(bs);
        BOOT_CHECK(rc != 0);
        fprintf(stderr, "rank 1: after rank 0 refused the queue: %s\n", cchan_last_error());
    } else {
        BOOT_CHECK(bs->queue_limit == CCHANI_BOOT_MAX_QUEUED);
        bs->queue_limit = CAP;
        uint64_t got = 0;
        BOOT_OK(cchan_bootstrap_recv(bs, 1, 8, &got, sizeof got));
        BOOT_CHECK(got == token);
        for (int k = 0; k < CAP_MSGS - 1; k++) {
            BOOT_OK(cchan_bootstrap_recv(bs, 1, 100 + k, buf, BIG));
            BOOT_CHECK(same(buf, BIG, k));
        }
        BOOT_OK(cchan_bootstrap_barrier(bs));
        double t0 = boot_now_s();
        int rc = cchan_bootstrap_recv(bs, 1, 9, &got, sizeof got);
        fprintf(stderr, "rank 0: after %.1f s: %d: %s\n", boot_now_s() - t0, rc,
                cchan_last_error());
        BOOT_CHECK(rc == CCHAN_ERR_NO_RESOURCE);
        char want[64];
        snprintf(want, sizeof want, "rank 1 sent more than %llu bytes", (unsigned long long)CAP);
        BOOT_CHECK(strstr(cchan_last_error(), want));
    }
    free(buf);
}

/* Connects to the root and never speaks; returns how long the root kept the connection open. */
static double silent_stranger(const cchani_boot_addr_t *root) {
    int fd;
    BOOT_OK(cchani_sock_connect(root, cchani_now_ns() + 5000000000ull, 1, "root", &fd));
    double t0 = boot_now_s(), until = t0 + 3.0 * IDLE_MS / 1000.0;
    while (boot_now_s() < until) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        char c;
        ssize_t n = recv(fd, &c, 1, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN)) break; /* closed by the root */
    }
    close(fd);
    return boot_now_s() - t0;
}

static void idle_timeout(void) {
    pid_t child = -1;
    if (rank == 1) {
        cchani_boot_env_t env;
        cchani_boot_addr_t root;
        BOOT_OK(cchani_boot_env_parse(&env));
        BOOT_OK(cchani_sock_resolve(env.root_host, env.root_port, &root));
        child = fork();
        BOOT_CHECK(child >= 0);
        if (child == 0) {
            double held = silent_stranger(&root);
            fprintf(stderr, "stranger: the root closed its connection after %.2f s\n", held);
            _exit(held > 0.8 * IDLE_MS / 1000.0 && held < 2.0 * IDLE_MS / 1000.0 ? 0 : 1);
        }
    }
    /* The job runs past the stranger's deadline, so the root keeps serving its sockets. */
    double until = boot_now_s() + 2.0 * IDLE_MS / 1000.0 + 0.5;
    for (;;) {
        uint8_t go = rank == 0 ? boot_now_s() < until : 0, gos[2];
        BOOT_OK(cchan_bootstrap_allgather(bs, &go, gos, 1));
        if (!gos[0]) break;
        usleep(20 * 1000);
    }
    if (rank == 1) {
        int st = 0;
        BOOT_CHECK(waitpid(child, &st, 0) == child);
        BOOT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    BOOT_OK(cchan_bootstrap_barrier(bs));
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: boot_limits queue|idle\n");
        return 2;
    }
    setenv("CCHAN_BOOTSTRAP_TIMEOUT_MS", argv[1][0] == 'i' ? "2000" : "10000", 1);
    rank = boot_test_rank = boot_env_int("CCHAN_RANK");
    BOOT_CHECK(boot_env_int("CCHAN_WORLD_SIZE") == 2);
    if (!strcmp(argv[1], "idle")) {
        /* The stranger must connect while the root is up: create first, then start it. */
        BOOT_OK(cchan_bootstrap_create_from_env(&bs));
        idle_timeout();
    } else if (!strcmp(argv[1], "queue")) {
        BOOT_OK(cchan_bootstrap_create_from_env(&bs));
        queue_cap();
    } else {
        return 2;
    }
    cchan_bootstrap_destroy(bs);
    return 0;
}
