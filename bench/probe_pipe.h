/* The probes' two-process plumbing (cchan-flag-probe --procs, cchan-bw-probe --procs): rank 0 and
 * rank 1, exec'd by the parent before any CUDA call, exchange IPC handles, "go" tokens and results
 * through a pair of pipes. A short write or a closed pipe ends the process with status 2. */
#ifndef CCHAN_BENCH_PROBE_PIPE_H
#define CCHAN_BENCH_PROBE_PIPE_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void probe_write(const char *who, int fd, const void *p, size_t n) {
    if (write(fd, p, n) != (ssize_t)n) {
        fprintf(stderr, "%s: write to the peer process failed\n", who);
        exit(2);
    }
}

static void probe_read(const char *who, int fd, void *p, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, (char *)p + got, n - got);
        if (k <= 0) {
            fprintf(stderr, "%s: peer process went away\n", who);
            exit(2);
        }
        got += (size_t)k;
    }
}

/* Runs `self --rank R RFD WFD extra...` for R = 0 and 1 (fork + exec: no CUDA in the parent),
 * joined by two pipes, and waits for both. extra ends with NULL (at most 24 entries). Returns 0
 * when both exited with status 0, else 2. */
static int probe_run_pair(const char *who, const char *self, const char *const *extra) {
    int p01[2], p10[2];
    if (pipe(p01) || pipe(p10)) return fprintf(stderr, "%s: pipe failed\n", who), 2;
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] < 0) return fprintf(stderr, "%s: fork failed\n", who), 2;
        if (pid[r] == 0) {
            char rs[8], rf[16], wf[16];
            snprintf(rs, sizeof rs, "%d", r);
            snprintf(rf, sizeof rf, "%d", r == 0 ? p10[0] : p01[0]);
            snprintf(wf, sizeof wf, "%d", r == 0 ? p01[1] : p10[1]);
            const char *av[32];
            int n = 0;
            av[n++] = self, av[n++] = "--rank", av[n++] = rs, av[n++] = rf, av[n++] = wf;
            for (int i = 0; extra[i] && n < 31; i++) av[n++] = extra[i];
            av[n] = NULL;
            execv(self, (char *const *)av);
            fprintf(stderr, "%s: exec %s failed\n", who, self);
            _exit(2);
        }
    }
    close(p01[0]), close(p01[1]), close(p10[0]), close(p10[1]);
    int rc = 0;
    for (int r = 0; r < 2; r++) {
        int status = 0;
        waitpid(pid[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status)) rc = 2;
    }
    return rc;
}

#endif
