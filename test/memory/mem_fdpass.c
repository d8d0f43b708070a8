/* fd passing when pidfd_getfd is refused. A seccomp filter makes pidfd_getfd fail with EPERM (as
 * Yama ptrace_scope 1 or a container's policy would), so a working exchange proves the SCM_RIGHTS
 * path carried the fds.
 *
 *   mem_fdpass scm    CCHAN_FDPASS=scm_rights, pidfd_getfd blocked on every rank
 *   mem_fdpass auto   default mode, pidfd_getfd blocked on odd ranks only: those fall back, even
 *                     ranks keep pidfd_getfd, in one exchange
 *   mem_fdpass pidfd  CCHAN_FDPASS=pidfd, blocked everywhere: every rank fails with a clear error,
 *                     and the communicator stays usable
 */
#include "block_pidfd.h"
#include "mem_test.h"

#define BYTES (3 * 4096 + 5)

static void check_exchange(cchan_comm_t *comm, cchan_mem_t *local) {
    int n = cchan_comm_size(comm), me = cchan_comm_rank(comm);
    cchan_mem_t **peers = calloc((size_t)n, sizeof *peers);
    MT_OK(cchan_mem_exchange(comm, local, peers));
    for (int p = 0; p < n; p++)
        MT_CHECK(mt_mismatch(cchan_mem_ptr(peers[p]), BYTES, 500u + (uint64_t)p) == BYTES);
    mt_barrier(comm);
    for (int p = 0; p < n; p++)
        ((uint8_t *)cchan_mem_ptr(peers[p]))[BYTES - 1 - (size_t)me] = (uint8_t)(me + 1);
    mt_barrier(comm);
    for (int p = 0; p < n; p++) {
        if (p != me) MT_OK(cchan_mem_destroy(peers[p]));
        MT_CHECK(((uint8_t *)cchan_mem_ptr(local))[BYTES - 1 - (size_t)p] == (uint8_t)(p + 1));
    }
    mt_barrier(comm);
    mt_fill(cchan_mem_ptr(local), BYTES, 500u + (uint64_t)me);
    mt_barrier(comm);
    free(peers);
}

/* A lone import cannot use SCM_RIGHTS (the owner is not taking part): where pidfd_getfd is refused
 * it must fail and say what to do (status < 0); elsewhere it works (status 0). */
static void check_lone_import(cchan_comm_t *comm, cchan_mem_t *local, int status,
                              const char *part) {
    cchan_mem_desc_t mine, *all = calloc((size_t)cchan_comm_size(comm), sizeof *all);
    MT_OK(cchan_mem_export(local, &mine));
    MT_OK(cchan_bootstrap_allgather(cchan_comm_bootstrap(comm), &mine, all, sizeof mine));
    cchan_mem_t *m = NULL;
    const cchan_mem_desc_t *theirs = &all[(mt_rank + 1) % cchan_comm_size(comm)];
    if (status == 0) {
        MT_OK(cchan_mem_import(comm, theirs, &m));
        MT_OK(cchan_mem_destroy(m));
    } else {
        MT_FAILS(cchan_mem_import(comm, theirs, &m), status, part);
    }
    free(all);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "scm";
    int fds0 = mt_open_fds();
    if (!strcmp(mode, "scm")) setenv("CCHAN_FDPASS", "scm_rights", 1);
    if (!strcmp(mode, "pidfd")) setenv("CCHAN_FDPASS", "pidfd", 1);
    cchan_comm_t *comm = mt_comm();
    cchan_mem_t *local = NULL;
    MT_OK(cchan_mem_alloc(comm, BYTES, 0, &local));
    mt_fill(cchan_mem_ptr(local), BYTES, 500u + (uint64_t)mt_rank);
    if (strcmp(mode, "auto") || mt_rank % 2) block_pidfd_getfd();
    mt_barrier(comm);

    if (!strcmp(mode, "pidfd")) {
        cchan_mem_t **peers = calloc((size_t)cchan_comm_size(comm), sizeof *peers);
        MT_FAILS(cchan_mem_exchange(comm, local, peers), -EPERM, "pidfd_getfd");
        free(peers);
        setenv("CCHAN_FDPASS", "auto", 1); /* the next exchange falls back and works */
        check_exchange(comm, local);
    } else if (!strcmp(mode, "scm")) {
        check_exchange(comm, local);
        check_exchange(comm, local); /* a second exchange listens on a new name */
        check_lone_import(comm, local, CCHAN_ERR_UNSUPPORTED,
                          "only the collective cchan_mem_exchange");
    } else {
        check_exchange(comm, local);
        if (mt_rank % 2)
            check_lone_import(comm, local, -EPERM, "falls back to SCM_RIGHTS");
        else
            check_lone_import(comm, local, 0, NULL);
    }
    mt_barrier(comm);
    MT_OK(cchan_mem_destroy(local));
    MT_OK(cchan_comm_destroy(comm));
    MT_CHECK(mt_open_fds() == fds0);
    printf("rank %d: mem_fdpass %s ok\n", mt_rank, mode);
    return 0;
}
