/* cchan bootstrap: rank, size and root address from launcher environments (see
 * docs/environment.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"

typedef struct launcher_vars {
    const char *name;
    const char *rank;
    const char *size;
    const char *local_rank;
    const char *local_size;
} launcher_vars_t;

/* Most specific first: cchan-run and torchrun name themselves; an MPI launched inside a Slurm
 * allocation sets both its own and Slurm's variables, and its own describe the MPI job. */
static const launcher_vars_t launchers[] = {
    {"cchan-run", "CCHAN_RANK", "CCHAN_WORLD_SIZE", "CCHAN_LOCAL_RANK", "CCHAN_LOCAL_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"MPICH/PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

/* Variables that identify one job run; hashed into the session key so that a stray process of
 * another run that reaches the same root port is turned away. */
static const char *const session_vars[] = {"CCHAN_BOOTSTRAP_SESSION", "TORCHELASTIC_RUN_ID",
                                           "SLURM_JOB_ID", "SLURM_STEP_ID"};

static int env_int(const char *name, int64_t lo, int64_t hi, int *out) {
    int64_t v;
    int rc = cchani_env_i64(name, -1, &v);
    if (rc) return rc;
    if (v < lo || v > hi)
        return cchani_error(-EINVAL, "environment", "%s=%lld is outside %lld..%lld", name,
                            (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return 0;
}

static const launcher_vars_t *detect_launcher(void) {
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++)
        if (cchani_env_str(launchers[i].rank)) return &launchers[i];
    return NULL;
}

static int parse_ranks(const launcher_vars_t *l, cchani_boot_env_t *e) {
    if (!cchani_env_str(l->size))
        return cchani_error(-EINVAL, "environment", "%s is set (%s) but %s is not", l->rank,
                            l->name, l->size);
    int rc = env_int(l->size, 1, CCHANI_BOOT_MAX_RANKS, &e->nranks);
    if (!rc) rc = env_int(l->rank, 0, e->nranks - 1, &e->rank);
    if (rc) return rc;
    /* Local rank and size are used only as a pair; without both they are derived by hostname. */
    e->local_rank = e->local_size = -1;
    if (!cchani_env_str(l->local_rank) || !cchani_env_str(l->local_size)) return 0;
    rc = env_int(l->local_size, 1, e->nranks, &e->local_size);
    if (!rc) rc = env_int(l->local_rank, 0, e->local_size - 1, &e->local_rank);
    return rc;
}

static int parse_port(const char *name, const char *text, uint16_t *out) {
    char *end;
    errno = 0;
    unsigned long p = strtoul(text, &end, 10);
    if (errno || end == text || *end || p == 0 || p > 65535)
        return cchani_error(-EINVAL, "environment", "%s: '%s' is not a TCP port (1..65535)", name,
                            text);
    *out = (uint16_t)p;
    return 0;
}

/* CCHAN_BOOTSTRAP_ROOT: "host:port", "1.2.3.4:port" or "[v6 address]:port". */
static int parse_root_var(const char *v, cchani_boot_env_t *e) {
    const char *host = v, *colon;
    size_t host_len;
    if (v[0] == '[') {
        const char *close = strchr(v, ']');
        if (!close || close[1] != ':')
            return cchani_error(-EINVAL, "environment",
                                "CCHAN_BOOTSTRAP_ROOT='%s': expected [IPv6 address]:port", v);
        host = v + 1;
        host_len = (size_t)(close - host);
        colon = close + 1;
    } else {
        colon = strrchr(v, ':');
        if (!colon || strchr(v, ':') != colon)
            return cchani_error(
                -EINVAL, "environment",
                "CCHAN_BOOTSTRAP_ROOT='%s': expected host:port (IPv6 as [address]:port)", v);
        host_len = (size_t)(colon - v);
    }
    if (host_len == 0 || host_len >= sizeof e->root_host)
        return cchani_error(-EINVAL, "environment", "CCHAN_BOOTSTRAP_ROOT='%s': bad host part", v);
    memcpy(e->root_host, host, host_len);
    e->root_host[host_len] = '\0';
    return parse_port("CCHAN_BOOTSTRAP_ROOT", colon + 1, &e->root_port);
}

/* MASTER_ADDR and MASTER_PORT + 1: torchrun's own rendezvous store already listens at MASTER_PORT
 * on the master host, so the bootstrap root takes the next port. */
static int parse_master_vars(const launcher_vars_t *l, cchani_boot_env_t *e) {
    const char *addr = cchani_env_str("MASTER_ADDR"), *port = cchani_env_str("MASTER_PORT");
    if (!addr || !port)
        return cchani_error(-EINVAL, "environment",
                            "rank and size come from %s (%s), but no root address is set: set "
                            "CCHAN_BOOTSTRAP_ROOT=host:port, or MASTER_ADDR and MASTER_PORT (%s is "
                            "missing)",
                            l->name, l->rank, addr ? "MASTER_PORT" : "MASTER_ADDR");
    if (strlen(addr) >= sizeof e->root_host)
        return cchani_error(-EINVAL, "environment", "MASTER_ADDR is too long");
    snprintf(e->root_host, sizeof e->root_host, "%s", addr);
    uint16_t p = 0;
    int rc = parse_port("MASTER_PORT", port, &p);
    if (rc) return rc;
    if (p == 65535)
        return cchani_error(
            -EINVAL, "environment",
            "MASTER_PORT=65535 leaves no port for the bootstrap root (MASTER_PORT+1); "
            "set CCHAN_BOOTSTRAP_ROOT");
    e->root_port = (uint16_t)(p + 1);
    return 0;
}

/* FNV-1a: cheap and deterministic. The variables it hashes are known to anyone who can list the
 * job's processes (and a proof seen on the wire tells a guess right), so on its own the key guards
 * against mix-ups between runs, not against attackers: CCHAN_BOOTSTRAP_SECRET adds a secret
 * (docs/security.md), and without one the bootstrap warns at init. */
static uint64_t fnv1a(uint64_t h, const char *s) {
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t session_key(cchani_boot_env_t *e) {
    char root[CCHANI_BOOT_HOST_BYTES + 32];
    snprintf(root, sizeof root, "%s:%u/%d", e->root_host, e->root_port, e->nranks);
    uint64_t h = fnv1a(0xcbf29ce484222325ull, root);
    for (size_t i = 0; i < sizeof session_vars / sizeof session_vars[0]; i++) {
        const char *v = cchani_env_str(session_vars[i]);
        h = fnv1a(fnv1a(h, session_vars[i]), v ? v : "");
    }
    const char *secret = cchani_env_str("CCHAN_BOOTSTRAP_SECRET");
    if (secret) h = cchani_siphash(h, ~h, secret, strlen(secret));
    e->public_key = !secret;
    return h;
}

int cchani_boot_env_parse(cchani_boot_env_t *out) {
    const launcher_vars_t *l = detect_launcher();
    if (!l)
        return cchani_error(-EINVAL, "environment",
                            "no launcher environment found: expected CCHAN_RANK/CCHAN_WORLD_SIZE "
                            "(cchan-run), RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK/SIZE "
                            "(Open MPI), PMI_RANK/PMI_SIZE (MPICH) or SLURM_PROCID/SLURM_NTASKS "
                            "(Slurm)");
    cchani_boot_env_t e;
    memset(&e, 0, sizeof e);
    e.launcher = l->name;
    int rc = parse_ranks(l, &e);
    if (rc) return rc;
    const char *root = cchani_env_str("CCHAN_BOOTSTRAP_ROOT");
    rc = root ? parse_root_var(root, &e) : parse_master_vars(l, &e);
    if (rc) return rc;
    e.session = session_key(&e);
    *out = e;
    return 0;
}
