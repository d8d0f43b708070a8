/* Admission under a connection flood (run through cchan-run, 4 ranks):
 *
 *   boot_flood [INITS [SECONDS_PER_INIT_LIMIT [CHURN_THREADS]]]
 *
 * A stranger process that knows nothing of the job opens connections to a root as fast as it can
 * while four ranks bootstrap through it: most close at once with a reset (churn), some send a byte
 * of garbage first, and a few hundred stay open and silent (they hold the root's pending slots).
 * Each of INITS inits (default 4) gets a fresh unique id, so a fresh root and key, distributed over
 * a first bootstrap made before the flood; every init must succeed and its bootstrap work. The
 * flood may delay an init, never fail it. The flood rate reached during each init is printed: by
 * hand, run it with more inits and check that the rate is the one you meant to test.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "boot_test.h"
#include "bootstrap.h"
#include "bootstrap_socket.h"

#define MAX_CHURNERS 64
#define HELD 200

static int rank, churners = 3;
static cchani_boot_addr_t target;
static volatile uint64_t *flood_count; /* shared with the flooder process */
static volatile int *flood_stop;

static int open_nb(void) {
    int fd = socket(target.sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    /* A connect whose SYN the full backlog dropped would wait for its retransmissions, seconds:
     * the flooder must stop when told, and open others meanwhile. */
    struct timeval tv = {0, 100 * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (const struct sockaddr *)&target.sa, target.len) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void reset_close(int fd) {
    struct linger lg = {1, 0}; /* RST: no TIME_WAIT, so ephemeral ports last the whole flood */
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
}

static void *churn(void *arg) {
    unsigned n = (unsigned)(uintptr_t)arg;
    while (!*flood_stop) {
        int fd = open_nb();
        if (fd < 0) {
            usleep(200); /* the root does not listen yet (or any more) */
            continue;
        }
        __atomic_fetch_add(flood_count, 1, __ATOMIC_RELAXED);
        if (++n % 8 == 0) (void)send(fd, "X", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        reset_close(fd);
    }
    return NULL;
}

/* Keeps HELD silent connections open, replacing the oldest with a new one all the time. */
static void *hold(void *arg) {
    (void)arg;
    int fds[HELD];
    for (int i = 0; i < HELD; i++) fds[i] = -1;
    for (unsigned i = 0; !*flood_stop; i = (i + 1) % HELD) {
        if (fds[i] >= 0) reset_close(fds[i]);
        fds[i] = open_nb();
        if (fds[i] >= 0)
            __atomic_fetch_add(flood_count, 1, __ATOMIC_RELAXED);
        else
            usleep(200);
    }
    for (int i = 0; i < HELD; i++)
        if (fds[i] >= 0) close(fds[i]);
    return NULL;
}

static pid_t start_flood(void) {
    *flood_stop = 0;
    *flood_count = 0;
    pid_t pid = fork();
    BOOT_CHECK(pid >= 0);
    if (pid > 0) return pid;
    signal(SIGPIPE, SIG_IGN);
    pthread_t t[MAX_CHURNERS + 1];
    for (int i = 0; i < churners; i++)
        BOOT_CHECK(pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)i) == 0);
    BOOT_CHECK(pthread_create(&t[churners], NULL, hold, NULL) == 0);
    for (int i = 0; i <= churners; i++) pthread_join(t[i], NULL);
    _exit(0);
}

static void stop_flood(pid_t pid) {
    *flood_stop = 1;
    int st = 0;
    BOOT_CHECK(waitpid(pid, &st, 0) == pid);
    BOOT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(int argc, char **argv) {
    int inits = argc > 1 ? atoi(argv[1]) : 4;
    double limit_s = argc > 2 ? atof(argv[2]) : 8.0;
    if (argc > 3) churners = atoi(argv[3]);
    BOOT_CHECK(inits >= 1 && limit_s > 0 && churners >= 1 && churners <= MAX_CHURNERS);
    rank = boot_test_rank = boot_env_int("CCHAN_RANK");
    BOOT_CHECK(boot_env_int("CCHAN_WORLD_SIZE") == 4);
    setenv("CCHAN_BOOTSTRAP_TIMEOUT_MS", "10000", 0);
    setenv("CCHAN_BOOTSTRAP_ADDR", "127.0.0.1", 0); /* where the fresh roots listen */
    void *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    BOOT_CHECK(shared != MAP_FAILED);
    flood_count = (volatile uint64_t *)shared;
    flood_stop = (volatile int *)((uint8_t *)shared + 64);

    cchan_bootstrap_t *ctl = NULL;
    BOOT_OK(cchan_bootstrap_create_from_env(&ctl));
    int ok = 0;
    double worst = 0, min_rate = 1e18;
    for (int k = 0; k < inits; k++) {
        cchan_unique_id_t id;
        if (rank == 0) BOOT_OK(cchan_get_unique_id(&id));
        cchan_unique_id_t ids[4];
        BOOT_OK(cchan_bootstrap_allgather(ctl, &id, ids, sizeof id));
        id = ids[0];
        cchani_boot_id_t bid;
        BOOT_OK(cchani_boot_id_decode(&id, CCHANI_BOOT_WIRE_VERSION, &bid));
        target = bid.root;
        pid_t flooder = -1;
        if (rank == 0) flooder = start_flood();
        BOOT_OK(cchan_bootstrap_barrier(ctl));
        /* The flood is under way before anyone joins: ranks arrive in the middle of it. */
        usleep(rank == 0 ? 20 * 1000 : (useconds_t)(100 + 50 * rank) * 1000);
        double t0 = boot_now_s();
        uint64_t c0 = *flood_count;
        cchan_bootstrap_t *bs = NULL;
        int rc = cchan_bootstrap_create(&id, rank, 4, &bs);
        double took = boot_now_s() - t0;
        if (rc) {
            fprintf(stderr, "rank %d: init %d under the flood failed after %.2f s: %s\n", rank, k,
                    took, cchan_last_error());
            exit(1);
        }
        uint64_t mine = (uint64_t)rank * 7 + (uint64_t)k, all[4];
        BOOT_OK(cchan_bootstrap_allgather(bs, &mine, all, sizeof mine));
        for (int r = 0; r < 4; r++) BOOT_CHECK(all[r] == (uint64_t)r * 7 + (uint64_t)k);
        /* Point-to-point between non-root ranks connects to their listeners, also flooded now. */
        uint64_t token = 1000 + (uint64_t)k, got = 0;
        if (rank > 0) {
            BOOT_OK(cchan_bootstrap_send(bs, rank % 3 + 1, 5, &token, sizeof token));
            BOOT_OK(cchan_bootstrap_recv(bs, rank == 1 ? 3 : rank - 1, 5, &got, sizeof got));
            BOOT_CHECK(got == token);
        }
        BOOT_OK(cchan_bootstrap_barrier(bs));
        if (rank == 0) {
            double rate = (double)(*flood_count - c0) / (took > 1e-3 ? took : 1e-3);
            fprintf(stderr, "init %d: joined in %.3f s under %.0f connects/s\n", k, took, rate);
            if (rate < min_rate) min_rate = rate;
            stop_flood(flooder);
        }
        BOOT_OK(cchan_bootstrap_destroy(bs));
        if (took > worst) worst = took;
        ok++;
    }
    double worsts[4];
    BOOT_OK(cchan_bootstrap_allgather(ctl, &worst, worsts, sizeof worst));
    BOOT_OK(cchan_bootstrap_destroy(ctl));
    if (rank == 0) {
        for (int r = 0; r < 4; r++)
            if (worsts[r] > worst) worst = worsts[r];
        fprintf(stderr,
                "%d of %d inits succeeded under the flood; slowest %.3f s; lowest rate %.0f "
                "connects/s\n",
                ok, inits, worst, min_rate);
        BOOT_CHECK(worst < limit_s);
    }
    return 0;
}
