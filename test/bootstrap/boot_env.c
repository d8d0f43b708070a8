/* cchan_bootstrap_create_from_env() under other launchers (run through cchan-run): the test
 * translates cchan-run's variables into those torchrun, Open MPI, MPICH or Slurm would set,
 * removes cchan-run's, and bootstraps from what is left.
 *
 *   boot_env torchrun|ompi|mpich|slurm
 *
 * torchrun and Slurm run here without CCHAN_BOOTSTRAP_SECRET, so their key derives from public
 * facts only: each rank must say so once, in a WARN line. Open MPI and MPICH keep the secret
 * cchan-run gave them and must not warn.
 */
#include <stdint.h>
#include <unistd.h>

#include "boot_test.h"

typedef struct job {
    int rank, size, port;
    char session[64];
} job_t;

static void set_int(const char *name, int v) {
    char buf[16];
    snprintf(buf, sizeof buf, "%d", v);
    setenv(name, buf, 1);
}

static job_t take_cchan_run_env(void) {
    job_t j = {boot_env_int("CCHAN_RANK"), boot_env_int("CCHAN_WORLD_SIZE"), 0, ""};
    const char *root = getenv("CCHAN_BOOTSTRAP_ROOT"), *session = getenv("CCHAN_BOOTSTRAP_SESSION");
    BOOT_CHECK(root && session && strrchr(root, ':'));
    j.port = atoi(strrchr(root, ':') + 1);
    snprintf(j.session, sizeof j.session, "%s", session);
    const char *vars[] = {"CCHAN_RANK", "CCHAN_WORLD_SIZE", "CCHAN_LOCAL_RANK", "CCHAN_LOCAL_SIZE",
                          "CCHAN_BOOTSTRAP_SESSION"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    return j;
}

static void usage(void) {
    fprintf(stderr, "usage: boot_env torchrun|ompi|mpich|slurm\n");
    exit(2);
}

/* MASTER_ADDR/MASTER_PORT name the root at MASTER_PORT + 1. */
static void set_master(const job_t *j) {
    unsetenv("CCHAN_BOOTSTRAP_ROOT");
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    set_int("MASTER_PORT", j->port - 1);
}

/* Sets the flavour's variables; returns the local rank/size the bootstrap must report (-1: derived
 * by hostname, which on one host is rank/size). */
static void translate(const char *flavour, const job_t *j, int *local_rank, int *local_size) {
    *local_rank = j->rank;
    *local_size = j->size;
    if (!strcmp(flavour, "torchrun")) {
        set_int("RANK", j->rank);
        set_int("WORLD_SIZE", j->size);
        set_int("LOCAL_RANK", j->rank);
        set_int("LOCAL_WORLD_SIZE", j->size);
        setenv("TORCHELASTIC_RUN_ID", j->session, 1);
        set_master(j);
    } else if (!strcmp(flavour, "ompi")) {
        /* Pretend two ranks per node: the launcher's word wins over the hostname. */
        set_int("OMPI_COMM_WORLD_RANK", j->rank);
        set_int("OMPI_COMM_WORLD_SIZE", j->size);
        set_int("OMPI_COMM_WORLD_LOCAL_RANK", j->rank % 2);
        set_int("OMPI_COMM_WORLD_LOCAL_SIZE", 2);
        *local_rank = j->rank % 2;
        *local_size = 2;
    } else if (!strcmp(flavour, "mpich")) {
        set_int("PMI_RANK", j->rank);
        set_int("PMI_SIZE", j->size);
        set_master(j);
    } else if (!strcmp(flavour, "slurm")) {
        set_int("SLURM_PROCID", j->rank);
        set_int("SLURM_NTASKS", j->size);
        set_int("SLURM_LOCALID", j->rank); /* without SLURM_NTASKS_PER_NODE: derived by hostname */
        setenv("SLURM_JOB_ID", j->session, 1);
    } else {
        usage();
    }
}

/* Lines of the log file that warn of a key made of public facts. */
static int public_key_warnings(const char *path) {
    FILE *f = fopen(path, "r");
    BOOT_CHECK(f != NULL);
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, "derives only from public facts") &&
             strstr(line, "CCHAN_BOOTSTRAP_SECRET");
    fclose(f);
    return n;
}

int main(int argc, char **argv) {
    if (argc != 2) usage();
    job_t j = take_cchan_run_env();
    boot_test_rank = j.rank;
    int local_rank, local_size;
    translate(argv[1], &j, &local_rank, &local_size);
    int public_key = !strcmp(argv[1], "torchrun") || !strcmp(argv[1], "slurm");
    BOOT_CHECK(getenv("CCHAN_BOOTSTRAP_SECRET") != NULL); /* cchan-run supplies one */
    if (public_key) unsetenv("CCHAN_BOOTSTRAP_SECRET");
    char log[128];
    snprintf(log, sizeof log, "/tmp/cchan_boot_env.%d.log", (int)getpid());
    setenv("CCHAN_DEBUG", "WARN", 1);
    setenv("CCHAN_DEBUG_SUBSYS", "bootstrap", 1);
    setenv("CCHAN_DEBUG_FILE", log, 1);

    cchan_bootstrap_t *bs;
    BOOT_OK(cchan_bootstrap_create_from_env(&bs));
    BOOT_CHECK(cchan_bootstrap_rank(bs) == j.rank);
    BOOT_CHECK(cchan_bootstrap_size(bs) == j.size);
    BOOT_CHECK(cchan_bootstrap_local_rank(bs) == local_rank);
    BOOT_CHECK(cchan_bootstrap_local_size(bs) == local_size);

    int32_t *ranks = malloc(sizeof *ranks * (size_t)j.size), me = j.rank;
    BOOT_CHECK(ranks);
    BOOT_OK(cchan_bootstrap_allgather(bs, &me, ranks, sizeof me));
    for (int r = 0; r < j.size; r++) BOOT_CHECK(ranks[r] == r);
    int32_t got = -1;
    BOOT_OK(cchan_bootstrap_send(bs, (j.rank + 1) % j.size, 5, &me, sizeof me));
    BOOT_OK(cchan_bootstrap_recv(bs, (j.rank + j.size - 1) % j.size, 5, &got, sizeof got));
    BOOT_CHECK(got == (j.rank + j.size - 1) % j.size);
    BOOT_OK(cchan_bootstrap_barrier(bs));
    BOOT_OK(cchan_bootstrap_destroy(bs));
    free(ranks);
    int warned = public_key_warnings(log);
    unlink(log);
    if (warned != public_key) {
        fprintf(stderr, "rank %d: %s: %d warning(s) of a public key, expected %d\n", j.rank,
                argv[1], warned, public_key);
        return 1;
    }
    return 0;
}
