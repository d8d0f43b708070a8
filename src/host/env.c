/* cchan environment: the one place variables are read and parsed, and the registry of every
 * CCHAN_* variable the libraries read (include/cchan/env.h, docs/environment.md). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cchan/env.h"
#include "internal.h"

#define KiB ((int64_t)1 << 10)
#define MiB ((int64_t)1 << 20)
#define NOMAX INT64_MAX

#define INT(n, d, lo, hi, dd, rd, doc)                                                             \
    { n, CCHAN_ENV_INT, d, lo, hi, NULL, dd, rd, doc }
#define BOOL(n, d, dd, rd, doc)                                                                    \
    { n, CCHAN_ENV_BOOL, d, 0, 1, NULL, dd, rd, doc }
#define STR(n, ch, dd, rd, doc)                                                                    \
    { n, CCHAN_ENV_STR, 0, 0, 0, ch, dd, rd, doc }

/* Ranges and defaults are those the readers enforce; a reader may check more (what depends on
 * the job, like a rank below the world size). Keep the order of docs/environment.md. */
static const cchan_env_var_t registry[] = {
    /* logging and deadlines */
    STR("CCHAN_DEBUG", NULL, "off", "cchan",
        "log level NONE, WARN, INFO or TRACE (an unknown value logs at WARN and says so)"),
    STR("CCHAN_DEBUG_SUBSYS", NULL, "all", "cchan", "comma-separated subsystems to log"),
    STR("CCHAN_DEBUG_FILE", NULL, "stderr", "cchan", "log file (%h: host name, %p: pid)"),
    INT("CCHAN_TIMEOUT_MS", 0, 0, NOMAX, "0", "cchan",
        "deadline of device-side waits in ms, 0 = none"),
    INT("CCHAN_PORT_DIRECT_MAX", 256, 0, 65536, "256", "cchan",
        "dma port-channel puts up to this many bytes are stored by the GPU thread"),
    INT("CCHAN_BOOTSTRAP_TIMEOUT_MS", 30000, 1, 86400000, "30000", "cchan",
        "deadline of every blocking bootstrap step in ms"),
    STR("CCHAN_FDPASS", "auto|pidfd|scm_rights", "auto", "cchan",
        "how memory fds move between processes"),
    /* network transports */
    INT("CCHAN_NET_TIMEOUT_MS", 30000, 0, NOMAX, "30000", "cchan",
        "how long an ib/tcp channel may make no progress before it fails"),
    STR("CCHAN_IB_HCA", NULL, "every active port", "cchan",
        "RDMA devices and ports to choose from"),
    INT("CCHAN_IB_GID_INDEX", -1, 0, 255, "chosen per link layer", "cchan", "GID index (RoCE)"),
    INT("CCHAN_IB_TC", 0, 0, 255, "0", "cchan", "traffic class of the queue pairs"),
    INT("CCHAN_IB_SL", 0, 0, 15, "0", "cchan", "service level of the queue pairs"),
    INT("CCHAN_IB_TIMEOUT", 14, 0, 31, "14", "cchan", "queue-pair ACK timeout exponent"),
    INT("CCHAN_IB_QPS", 1, 1, 16, "1", "cchan", "queue pairs per connection"),
    STR("CCHAN_IB_SIGNAL", "atomic|write", "atomic", "cchan", "how an ib channel signals"),
    STR("CCHAN_TCP_ADDR", NULL, "first up non-loopback IPv4", "cchan",
        "address a tcp channel listens on"),
    /* bootstrap */
    STR("CCHAN_BOOTSTRAP_ADDR", NULL, "first up non-loopback IPv4", "cchan",
        "root address of a unique id"),
    INT("CCHAN_BOOTSTRAP_PORT", 0, 0, 65535, "a free port", "cchan",
        "root port of a unique id, 0 = any"),
    INT("CCHAN_RANK", -1, 0, (1 << 20) - 1, "unset", "cchan", "rank (cchan-run)"),
    INT("CCHAN_WORLD_SIZE", -1, 1, 1 << 20, "unset", "cchan", "world size (cchan-run)"),
    INT("CCHAN_LOCAL_RANK", -1, 0, (1 << 20) - 1, "unset", "cchan", "local rank (cchan-run)"),
    INT("CCHAN_LOCAL_SIZE", -1, 1, 1 << 20, "unset", "cchan", "local size (cchan-run)"),
    INT("CCHAN_HOST_SPLIT", 0, 0, 1 << 20, "0 (off)", "cchan",
        "tests: the ranks form this many \"hosts\" of consecutive ranks"),
    INT("CCHAN_HOST_ID", -1, 0, (1 << 20) - 1, "unset", "cchan",
        "tests: this rank's \"host\" on its machine"),
    STR("CCHAN_BOOTSTRAP_ROOT", NULL, "unset", "cchan", "host:port where rank 0 listens"),
    STR("CCHAN_BOOTSTRAP_SESSION", NULL, "unset", "cchan",
        "names this run; hashed into the session key"),
    STR("CCHAN_BOOTSTRAP_SECRET", NULL, "unset", "cchan", "secret mixed into the session key"),
    /* NCCL shim */
    STR("CCHAN_NCCL_FALLBACK", NULL, "an NCCL found by the usual search", "nccl",
        "path of the real libnccl.so.2 (none or 0: none)"),
    BOOL("CCHAN_NCCL_DISABLE", 0, "0", "nccl",
         "communicators get no cchan side; every call is forwarded"),
    BOOL("CCHAN_NCCL_HOST_PLATFORM", 0, "0", "nccl",
         "tests only: cchan communicators on the host platform"),
    /* switch channel */
    INT("CCHAN_NVLS", 0, 0, 1, "0", "cchan", "1 opts in to the NVLink multicast path"),
    /* collectives, MoE, executor */
    STR("CCHAN_COLL_TUNING", NULL, "unset", "coll",
        "tuning table the collectives' selector ranks by"),
    STR("CCHAN_COLL_PLANS", NULL, "unset", "coll", "plan files loaded into the selector"),
    INT("CCHAN_COLL_PLAN_MAX_BYTES", 16 * MiB, 1, NOMAX, "16777216", "coll",
        "largest input of a loaded plan's default size range"),
    INT("CCHAN_COLL_CE_LANES", 1, 1, 8, "1", "coll", "copy-engine streams per peer of ce_allpairs"),
    INT("CCHAN_COLL_CE_CHUNK", 64 * MiB, 4 * KiB, NOMAX, "67108864", "coll",
        "bytes per pipelined chunk of ce_allpairs AllReduce"),
    INT("CCHAN_COLL_CE_SM_PERMILLE", -1, -1, 1000, "-1", "coll",
        "share of ce_allpairs bytes moved by SM stores, in thousandths; -1: chosen"),
    INT("CCHAN_COLL_ZC_BLOCK_BYTES", 32 * KiB, KiB, NOMAX, "32768", "coll",
        "bytes each block of the zero-copy HB AllReduce reduces per step"),
    INT("CCHAN_COLL_ZC_AG_MAX", 64 * MiB, 0, NOMAX, "67108864", "coll",
        "largest output of zero-copy HB AllGather"),
    INT("CCHAN_COLL_ZC_RS_MAX", 64 * MiB, 0, NOMAX, "67108864", "coll",
        "largest input of zero-copy HB ReduceScatter"),
    INT("CCHAN_COLL_CE_RS", -1, -1, 1, "-1", "coll",
        "copy engines push the reduce-scatter's shards; -1: chosen"),
    INT("CCHAN_COLL_CE_REGIONS", 3, 2, 8, "3", "coll", "staging regions of ce_rs"),
    INT("CCHAN_COLL_PDL", 1, 0, 1, "1", "coll",
        "launch small collectives as programmatic dependents"),
    STR("CCHAN_MOE_VARIANT", NULL, "the measured defaults", "moe",
        "tuning of the HT kernels, key=value,..."),
    INT("CCHAN_EXEC_INSTANCES", 0, 1, 64, "chosen per call", "exec",
        "instances of an executor's plan"),
    BOOL("CCHAN_EXEC_PDL", 1, "1", "exec", "executor kernels launch as programmatic dependents"),
    /* test hooks inside the library */
    INT("CCHAN_TEST_IB_RKEY_XOR", 0, 0, NOMAX, "0", "cchan",
        "tests only: corrupts the rkey an ib channel writes with"),
    INT("CCHAN_TEST_WIRE_VERSION", 0, 1, 65535, "the built-in version", "cchan",
        "tests only: the bootstrap wire version this process speaks"),
};

#define REGISTRY_N ((int)(sizeof registry / sizeof registry[0]))

int cchan_env_count(void) { return REGISTRY_N; }

const cchan_env_var_t *cchan_env_at(int index) {
    return index >= 0 && index < REGISTRY_N ? &registry[index] : NULL;
}

const cchan_env_var_t *cchan_env_lookup(const char *name) {
    for (int i = 0; name && i < REGISTRY_N; i++)
        if (!strcmp(registry[i].name, name)) return &registry[i];
    return NULL;
}

static const char *type_name(cchan_env_type_t t) {
    return t == CCHAN_ENV_INT ? "int" : t == CCHAN_ENV_BOOL ? "bool" : "str";
}

static int env_entry(const char *name, cchan_env_type_t type, const void *out,
                     const cchan_env_var_t **e) {
    static const char *where = "cchan_env_get";
    if (!name || !out) return cchani_error(-EINVAL, where, "name and out must not be NULL");
    *e = cchan_env_lookup(name);
    if (!*e) return cchani_error(-EINVAL, where, "%s is not a registered variable", name);
    if ((*e)->type != type)
        return cchani_error(-EINVAL, where, "%s is of type %s, not %s", name, type_name((*e)->type),
                            type_name(type));
    return 0;
}

/* The documented integer forms (docs/environment.md), and nothing else: decimal, 0x hex or 0
 * octal digits, the whole text, after a '-' only where negatives are allowed. strtoll and
 * strtoull alone also take leading blanks and a '+', and strtoull negates "-1" into 2^64 - 1: a
 * value with a typo must fail, not run with a guess. Within int64_t, the registry's type, also
 * for the unsigned readers (2^63 is refused, not wrapped).
 * Returns 0, PARSE_FORM for another form, PARSE_RANGE for a value past int64_t. */
#define PARSE_FORM (-1)
#define PARSE_RANGE (-2)
#define FORM_TEXT "decimal, 0x hex or 0 octal digits, the whole text (no blanks, no '+')"

static int parse_int(const char *v, int allow_negative, int64_t *out) {
    const char *p = v;
    int neg = p[0] == '-';
    if (neg) {
        if (!allow_negative) return PARSE_FORM;
        p++;
    }
    if (!isdigit((unsigned char)p[0])) return PARSE_FORM; /* blanks, signs, nothing */
    char *end;
    errno = 0;
    unsigned long long x = strtoull(p, &end, 0);
    if (*end != '\0') return PARSE_FORM;
    const unsigned long long lim = (unsigned long long)INT64_MAX + (neg ? 1u : 0u);
    if (errno == ERANGE || x > lim) return PARSE_RANGE;
    if (errno) return PARSE_FORM;
    *out = !neg ? (int64_t)x : x == lim ? INT64_MIN : -(int64_t)x;
    return 0;
}

int cchan_env_get_int(const char *name, int64_t *out) {
    const cchan_env_var_t *e;
    int r = env_entry(name, CCHAN_ENV_INT, out, &e);
    if (r) return r;
    const char *v = cchani_env_str(name);
    int64_t x = e->dflt;
    if (v && (parse_int(v, e->min < 0, &x) || x < e->min || x > e->max))
        return cchani_error(-EINVAL, "environment",
                            "%s='%s': want an integer in %lld..%lld, " FORM_TEXT "%s", name, v,
                            (long long)e->min, (long long)e->max,
                            e->min < 0 ? ", a leading '-' for a negative value" : "");
    *out = x;
    return 0;
}

int cchan_env_get_bool(const char *name, int *out) {
    static const char *const yes[] = {"1", "true", "on"}, *const no[] = {"0", "false", "off"};
    const cchan_env_var_t *e;
    int r = env_entry(name, CCHAN_ENV_BOOL, out, &e);
    if (r) return r;
    const char *v = cchani_env_str(name);
    if (!v) {
        *out = e->dflt != 0;
        return 0;
    }
    for (int i = 0; i < 3; i++) {
        if (!strcasecmp(v, yes[i]) || !strcasecmp(v, no[i])) {
            *out = !strcasecmp(v, yes[i]);
            return 0;
        }
    }
    return cchani_error(-EINVAL, "environment",
                        "%s='%s': want a boolean (0, 1, true, false, on or off)", name, v);
}

static int in_choices(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncasecmp(p, v, n)) return 1;
        p += len + (bar != NULL);
    }
    return 0;
}

int cchan_env_get_str(const char *name, const char **out) {
    const cchan_env_var_t *e;
    int r = env_entry(name, CCHAN_ENV_STR, out, &e);
    if (r) return r;
    const char *v = cchani_env_str(name);
    if (v && e->choices && !in_choices(e->choices, v))
        return cchani_error(-EINVAL, "environment", "%s='%s': want one of %s", name, v, e->choices);
    *out = v;
    return 0;
}

/* ---------------------------------------------------------------- untyped (the runtime's own) */

const char *cchani_env_str(const char *name) {
    const char *v = getenv(name);
    return (v && v[0]) ? v : NULL;
}

int cchani_env_i64(const char *name, int64_t dflt, int64_t *out) {
    const char *v = cchani_env_str(name);
    if (!v) {
        *out = dflt;
        return 0;
    }
    int64_t x;
    int r = parse_int(v, 1, &x);
    if (r == PARSE_RANGE)
        return cchani_error(-EINVAL, "environment",
                            "%s='%s' is out of range: want an integer in %lld..%lld", name, v,
                            (long long)INT64_MIN, (long long)INT64_MAX);
    if (r)
        return cchani_error(-EINVAL, "environment",
                            "%s='%s' is not an integer: want " FORM_TEXT
                            ", a leading '-' for a negative value",
                            name, v);
    *out = x;
    return 0;
}

int cchani_env_u64(const char *name, uint64_t dflt, uint64_t *out) {
    const char *v = cchani_env_str(name);
    if (!v) {
        *out = dflt;
        return 0;
    }
    int64_t x;
    int r = parse_int(v, 0, &x);
    if (r == PARSE_RANGE)
        return cchani_error(-EINVAL, "environment",
                            "%s='%s' is out of range: want an integer in 0..%lld", name, v,
                            (long long)INT64_MAX);
    if (r)
        return cchani_error(-EINVAL, "environment",
                            "%s='%s' is not an unsigned integer: want " FORM_TEXT ", no '-'", name,
                            v);
    *out = (uint64_t)x;
    return 0;
}

uint64_t cchan_env_timeout_ms(void) {
    uint64_t v = 0;
    return cchani_env_u64("CCHAN_TIMEOUT_MS", 0, &v) == 0 ? v : 0;
}

uint64_t cchani_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
