/* The SCM_RIGHTS fallback of cchan_mem_exchange cannot be blocked or stalled by another local
 * process (4 ranks through cchan-run, CCHAN_FDPASS=scm_rights, pidfd_getfd refused).
 *
 *   mem_fdpass_squat other  the squatter runs as another user (nobody, 65534: rank 0 is root,
 *                           forks and drops to it; skipped with the reason where that is not so)
 *   mem_fdpass_squat self   the squatter runs as the job's own user
 *
 * Before the exchanges, the squatter binds every fd-passing socket name the ranks would use if
 * names were predictable (session, exchange number and rank, as listed in /proc/net/unix); while
 * they run, it watches /proc/net/unix and connects to every cchan fd-passing socket it sees,
 * holding the connection open without a word (a stall) or sending garbage. Six exchanges must still
 * map every peer's memory with the right contents, each within BOUND_S (the bootstrap timeout is 30
 * s).
 */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "block_pidfd.h"
#include "mem_test.h"
#include "runtime.h"

#define BYTES (2 * 4096 + 3)
#define EXCHANGES 6
#define BOUND_S 5.0
#define NOBODY 65534
#define MAX_HELD 512

static int bind_abstract(const char *name) {
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "%s", name);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    if (bind(s, (struct sockaddr *)&a,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) != 0 ||
        listen(s, 4) != 0) {
        close(s);
        return -1;
    }
    return s;
}

static int connect_abstract(const char *name) {
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "%s", name);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) return -1;
    if (connect(s, (struct sockaddr *)&a,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) != 0) {
        close(s);
        return -1;
    }
    return s;
}

/* The squatter: squats the predictable names, tells the parent, then stalls every cchan
 * fd-passing socket it can see until killed. */
static void squatter(uint64_t session, int nranks, int ready_fd) {
    int bound = 0, held = 0;
    char name[108];
    for (uint32_t seq = 0; seq < 2 * EXCHANGES; seq++)
        for (int r = 0; r < nranks; r++) {
            snprintf(name, sizeof name, "cchan-fd-%016llx-%u-%d", (unsigned long long)session, seq,
                     r);
            bound += bind_abstract(name) >= 0;
        }
    char ok = bound > 0 ? 1 : 0;
    if (write(ready_fd, &ok, 1) != 1) _exit(1);
    close(ready_fd);
    char seen[MAX_HELD][108];
    int nseen = 0;
    for (;;) {
        FILE *f = fopen("/proc/net/unix", "re");
        char line[512];
        while (f && fgets(line, sizeof line, f)) {
            char *at = strstr(line, "@cchan-fd-");
            if (!at) continue;
            at[strcspn(at, "\n ")] = '\0';
            int known = 0;
            for (int i = 0; i < nseen && !known; i++) known = !strcmp(seen[i], at + 1);
            if (known || nseen == MAX_HELD) continue;
            snprintf(seen[nseen++], sizeof seen[0], "%s", at + 1);
            for (int k = 0; k < 3 && held < MAX_HELD; k++) {
                int s = connect_abstract(at + 1);
                if (s < 0) continue;
                held++;
                if (k == 1) (void)!write(s, "garbage garbage garbage!", 24);
            }
        }
        if (f) fclose(f);
        usleep(1000);
    }
}

static void exchange_once(cchan_comm_t *comm, cchan_mem_t *local, int round) {
    int n = cchan_comm_size(comm), me = cchan_comm_rank(comm);
    cchan_mem_t **peers = calloc((size_t)n, sizeof *peers);
    MT_CHECK(peers != NULL);
    mt_fill(cchan_mem_ptr(local), BYTES, 700u + (uint64_t)(round * 16 + me));
    mt_barrier(comm);
    double t0 = mt_now_s();
    MT_OK(cchan_mem_exchange(comm, local, peers));
    double took = mt_now_s() - t0;
    if (took >= BOUND_S) {
        fprintf(stderr, "rank %d: exchange %d took %.1f s\n", me, round, took);
        exit(1);
    }
    for (int p = 0; p < n; p++)
        MT_CHECK(mt_mismatch(cchan_mem_ptr(peers[p]), BYTES, 700u + (uint64_t)(round * 16 + p)) ==
                 BYTES);
    mt_barrier(comm);
    for (int p = 0; p < n; p++)
        if (p != me) MT_OK(cchan_mem_destroy(peers[p]));
    free(peers);
}

int main(int argc, char **argv) {
    MT_CHECK(argc == 2);
    int other = !strcmp(argv[1], "other");
    MT_CHECK(other || !strcmp(argv[1], "self"));
    setenv("CCHAN_FDPASS", "scm_rights", 1);
    cchan_comm_t *comm = mt_comm();
    int n = cchan_comm_size(comm);
    cchan_mem_t *local = NULL;
    MT_OK(cchan_mem_alloc(comm, BYTES, 0, &local));

    /* Rank 0 starts the squatter; every rank learns whether it could. */
    char why[160] = "";
    pid_t child = -1;
    if (mt_rank == 0) {
        int p[2];
        MT_CHECK(pipe(p) == 0);
        if (other && geteuid() != 0)
            snprintf(why, sizeof why, "not root (uid %u): cannot run a squatter as another user",
                     (unsigned)geteuid());
        if (!why[0]) {
            child = fork();
            MT_CHECK(child >= 0);
            if (child == 0) {
                close(p[0]);
                if (other &&
                    (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)) {
                    char no = 2;
                    (void)!write(p[1], &no, 1);
                    _exit(0);
                }
                squatter(comm->session, n, p[1]);
                _exit(0);
            }
            close(p[1]);
            char ok = 0;
            MT_CHECK(read(p[0], &ok, 1) == 1);
            if (ok == 2) snprintf(why, sizeof why, "cannot switch to uid %d", NOBODY);
            MT_CHECK(ok != 0); /* a squatter that could bind nothing proves nothing */
            close(p[0]);
        }
    }
    char whys[8][160];
    MT_CHECK(n <= 8);
    MT_OK(cchan_bootstrap_allgather(cchan_comm_bootstrap(comm), why, whys, sizeof why));
    if (whys[0][0]) {
        if (child > 0) {
            kill(child, SIGKILL);
            waitpid(child, NULL, 0);
        }
        if (mt_rank == 0) printf("SKIP: %s\n", whys[0]);
        MT_OK(cchan_mem_destroy(local));
        MT_OK(cchan_comm_destroy(comm));
        return 77;
    }
    block_pidfd_getfd();
    for (int round = 0; round < EXCHANGES; round++) exchange_once(comm, local, round);
    mt_barrier(comm);
    if (child > 0) {
        int st = 0;
        MT_CHECK(kill(child, SIGKILL) == 0);
        MT_CHECK(waitpid(child, &st, 0) == child);
    }
    printf("rank %d: %d exchanges over SCM_RIGHTS with a squatter (%s) at work\n", mt_rank,
           EXCHANGES, other ? "uid 65534" : "same uid");
    MT_OK(cchan_mem_destroy(local));
    MT_OK(cchan_comm_destroy(comm));
    return 0;
}
