/* cchan-run: starts N ranks of a command on this host, wired for cchan_bootstrap_create_from_env().
 *
 *   cchan-run -n N [--timeout SEC] [--grace SEC] [--] command [args...]
 *
 * Each rank gets CCHAN_RANK, CCHAN_WORLD_SIZE, CCHAN_LOCAL_RANK, CCHAN_LOCAL_SIZE,
 * CCHAN_BOOTSTRAP_ROOT=127.0.0.1:<free port>, a fresh CCHAN_BOOTSTRAP_SESSION and, unless one is
 * set already, a random 128-bit CCHAN_BOOTSTRAP_SECRET (the ranks' key then owes nothing to
 * public facts: docs/security.md), and CUDA_MODULE_LOADING=EAGER unless set (lazy loading can
 * deadlock a port channel: docs/port_channel.md). Standard streams
 * pass through untouched. Exit status: the first failing rank's (128 + signal for a rank killed by
 * a signal), 77 when every rank skipped, 124 when --timeout expired, else 0.
 *
 * When a rank fails, the others get --grace seconds (default 15) to end on their own, so that each
 * reports its own error, then they are killed. Ranks share one process group, which the launcher
 * signals so that their children go too; each rank dies with the launcher (PR_SET_PDEATHSIG); and
 * the launcher is a child subreaper, so a rank's child that outlives it is reparented here and
 * ended with the job instead of lingering as an orphan. Everything is reaped before exit.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_SKIP 77
#define EXIT_TIMEOUT 124
#define EXIT_USAGE 2
#define KILL_ESCALATION_S 2 /* between SIGTERM and SIGKILL */

typedef struct options {
    int nranks;
    double timeout_s; /* 0: none */
    double grace_s;
    char **argv;
} options_t;

typedef struct rank_state {
    pid_t pid;
    int running;
    int status; /* exit status as cchan-run reports it */
} rank_state_t;

typedef struct launch {
    options_t opt;
    rank_state_t *ranks;
    int running;
    pid_t pgid;
    int first_failed; /* rank index, -1 while none */
    int spawn_failed;
    int timed_out;
    double kill_at;   /* when to escalate to SIGKILL (0: not signalled yet) */
    double grace_end; /* when to stop waiting after a failure (0: none) */
} launch_t;

static void usage(void) {
    fprintf(stderr, "usage: cchan-run -n N [--timeout SEC] [--grace SEC] [--] command [args...]\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse_number(const char *flag, const char *text, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = text ? strtod(text, &end) : 0;
    /* written so that NaN fails too: every comparison with it is false */
    if (!text || errno || end == text || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "cchan-run: %s needs a number in %g..%g\n", flag, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_options(int argc, char **argv, options_t *opt) {
    double n = 0;
    opt->timeout_s = 0;
    opt->grace_s = 15;
    int i = 1;
    while (i < argc && argv[i][0] == '-') {
        const char *flag = argv[i++];
        if (!strcmp(flag, "--")) break;
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            usage();
            exit(0);
        }
        const char *value = i < argc ? argv[i++] : NULL;
        int rc;
        if (!strcmp(flag, "-n") || !strcmp(flag, "--np"))
            rc = parse_number(flag, value, 1, 4096, &n);
        else if (!strcmp(flag, "--timeout"))
            rc = parse_number(flag, value, 0, 1e7, &opt->timeout_s);
        else if (!strcmp(flag, "--grace"))
            rc = parse_number(flag, value, 0, 1e7, &opt->grace_s);
        else {
            fprintf(stderr, "cchan-run: unknown option '%s'\n", flag);
            rc = -1;
        }
        if (rc) return -1;
    }
    if (n < 1 || n != (int)n || i >= argc) {
        usage();
        return -1;
    }
    opt->nranks = (int)n;
    opt->argv = argv + i;
    return 0;
}

/* A loopback port nothing listens on now; rank 0's bootstrap binds it moments later. */
static int free_port(void) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) ||
        getsockname(fd, (struct sockaddr *)&a, &len)) {
        perror("cchan-run: choosing a bootstrap port");
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static void set_env_int(const char *name, int v) {
    char buf[16];
    snprintf(buf, sizeof buf, "%d", v);
    setenv(name, buf, 1);
}

/* In the child: never returns. */
static void exec_rank(const launch_t *l, int rank, pid_t launcher, const sigset_t *mask) {
    /* Die with the launcher, even if it is SIGKILLed; check for the race where it died first. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(1);
    setpgid(0, l->pgid);
    set_env_int("CCHAN_RANK", rank);
    set_env_int("CCHAN_LOCAL_RANK", rank);
    sigprocmask(SIG_SETMASK, mask, NULL);
    execvp(l->opt.argv[0], l->opt.argv);
    fprintf(stderr, "cchan-run: cannot execute '%s': %s\n", l->opt.argv[0], strerror(errno));
    _exit(127);
}

static int shared_env(int nranks) {
    int port = free_port();
    uint64_t rnd[3];
    if (port < 0) return -1;
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        perror("cchan-run: getrandom");
        return -1;
    }
    char buf[64];
    snprintf(buf, sizeof buf, "127.0.0.1:%d", port);
    setenv("CCHAN_BOOTSTRAP_ROOT", buf, 1);
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)rnd[0]);
    setenv("CCHAN_BOOTSTRAP_SESSION", buf, 1);
    /* A secret of the caller's (one job across several cchan-run) is kept. */
    snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)rnd[1],
             (unsigned long long)rnd[2]);
    setenv("CCHAN_BOOTSTRAP_SECRET", buf, 0);
    /* CUDA's lazy loading loads a kernel at its first launch, and that load stalls every copy of
     * the process (cchan's proxies' too) until the kernels running then have ended: a first launch
     * beside a kernel that waits for a port channel deadlocks (docs/port_channel.md). The user's
     * own setting wins. */
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    set_env_int("CCHAN_WORLD_SIZE", nranks);
    set_env_int("CCHAN_LOCAL_SIZE", nranks);
    return 0;
}

static int spawn(launch_t *l, const sigset_t *mask) {
    pid_t self = getpid();
    for (int r = 0; r < l->opt.nranks; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("cchan-run: fork");
            return -1;
        }
        if (pid == 0) exec_rank(l, r, self, mask);
        /* Also here, so the group exists before the next fork whichever process runs first. */
        if (r == 0) l->pgid = pid;
        setpgid(pid, l->pgid);
        l->ranks[r] = (rank_state_t){pid, 1, 0};
        l->running++;
    }
    return 0;
}

static void signal_ranks(launch_t *l, int sig) {
    if (l->running > 0) kill(-l->pgid, sig);
}

static void terminate(launch_t *l) {
    if (l->kill_at) return;
    signal_ranks(l, SIGTERM);
    l->kill_at = now_s() + KILL_ESCALATION_S;
}

static int rank_of(const launch_t *l, pid_t pid) {
    for (int r = 0; r < l->opt.nranks; r++)
        if (l->ranks[r].pid == pid) return r;
    return -1;
}

static void on_exit_of(launch_t *l, int r, int wstatus) {
    rank_state_t *s = &l->ranks[r];
    s->running = 0;
    l->running--;
    s->status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    if (s->status == 0 || s->status == EXIT_SKIP || l->first_failed >= 0) return;
    l->first_failed = r;
    if (l->running == 0) return;
    fprintf(
        stderr,
        "cchan-run: rank %d exited with status %d; giving the other %d rank(s) %g s to finish\n", r,
        s->status, l->running, l->opt.grace_s);
    l->grace_end = now_s() + l->opt.grace_s;
}

static void reap(launch_t *l) {
    int wstatus;
    pid_t pid;
    while ((pid = waitpid(-1, &wstatus, WNOHANG)) > 0) {
        int r = rank_of(l, pid);
        if (r >= 0) on_exit_of(l, r, wstatus);
    }
}

/* Deadlines that are due: the --timeout, the grace period, SIGKILL escalation. */
static void check_deadlines(launch_t *l, double start) {
    double t = now_s();
    if (l->opt.timeout_s > 0 && !l->timed_out && t >= start + l->opt.timeout_s) {
        fprintf(stderr, "cchan-run: timeout after %g s; killing %d rank(s) still running\n",
                l->opt.timeout_s, l->running);
        l->timed_out = 1;
        terminate(l);
    }
    if (l->grace_end && t >= l->grace_end) {
        fprintf(stderr,
                "cchan-run: %d rank(s) still running %g s after rank %d failed; killing them\n",
                l->running, l->opt.grace_s, l->first_failed);
        l->grace_end = 0;
        terminate(l);
    }
    if (l->kill_at && t >= l->kill_at) {
        signal_ranks(l, SIGKILL);
        l->kill_at = t + KILL_ESCALATION_S; /* unreachable ranks: keep trying */
    }
}

static double next_deadline(const launch_t *l, double start) {
    double d = 1e18;
    if (l->opt.timeout_s > 0 && !l->timed_out) d = start + l->opt.timeout_s;
    if (l->grace_end && l->grace_end < d) d = l->grace_end;
    if (l->kill_at && l->kill_at < d) d = l->kill_at;
    return d;
}

static void supervise(launch_t *l, const sigset_t *waitset) {
    double start = now_s();
    while (l->running > 0) {
        double wait = next_deadline(l, start) - now_s();
        if (wait < 0) wait = 0;
        if (wait > 3600) wait = 3600;
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        siginfo_t info;
        int sig = sigtimedwait(waitset, &info, &ts);
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
            signal_ranks(l, sig);
            l->kill_at = now_s() + KILL_ESCALATION_S;
        }
        reap(l);
        check_deadlines(l, start);
    }
}

/* Reaps what has exited; 1 while descendants (reparented orphans) are still alive. */
static int descendants_alive(void) {
    pid_t pid;
    while ((pid = waitpid(-1, NULL, WNOHANG)) > 0) continue;
    return pid == 0;
}

/* After the ranks: ends their leftover children (SIGTERM, then SIGKILL). Processes that left the
 * ranks' process group are out of reach and given up on after a few seconds. */
static void sweep_orphans(const launch_t *l, const sigset_t *waitset) {
    double start = now_s();
    int sent = 0;
    while (descendants_alive() && now_s() - start < 3 * KILL_ESCALATION_S) {
        int sig = now_s() - start < KILL_ESCALATION_S ? SIGTERM : SIGKILL;
        if (sig != sent) kill(-l->pgid, sig);
        sent = sig;
        struct timespec ts = {0, 100 * 1000000};
        siginfo_t info;
        sigtimedwait(waitset, &info, &ts);
    }
}

static int exit_status(const launch_t *l) {
    if (l->spawn_failed) return 1;
    if (l->timed_out) return EXIT_TIMEOUT;
    if (l->first_failed >= 0) return l->ranks[l->first_failed].status;
    for (int r = 0; r < l->opt.nranks; r++)
        if (l->ranks[r].status != EXIT_SKIP) return 0;
    return EXIT_SKIP;
}

static void ignore_signal(int sig) { (void)sig; }

int main(int argc, char **argv) {
    launch_t l;
    memset(&l, 0, sizeof l);
    l.first_failed = -1;
    if (parse_options(argc, argv, &l.opt)) return EXIT_USAGE;
    l.ranks = calloc((size_t)l.opt.nranks, sizeof *l.ranks);
    if (!l.ranks || shared_env(l.opt.nranks)) return 1;

    /* Signals are taken synchronously with sigtimedwait; SIGCHLD needs a handler, as an ignored
     * signal might be discarded instead of left pending. */
    signal(SIGCHLD, ignore_signal);
    sigset_t waitset, original;
    sigemptyset(&waitset);
    sigaddset(&waitset, SIGCHLD);
    sigaddset(&waitset, SIGINT);
    sigaddset(&waitset, SIGTERM);
    sigaddset(&waitset, SIGHUP);
    sigprocmask(SIG_BLOCK, &waitset, &original);
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    if (spawn(&l, &original)) {
        l.spawn_failed = 1;
        terminate(&l);
    }
    supervise(&l, &waitset);
    sweep_orphans(&l, &waitset);
    int status = exit_status(&l);
    free(l.ranks);
    return status;
}
