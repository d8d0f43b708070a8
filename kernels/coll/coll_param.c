/* cchan_coll tuning parameters (names, defaults, limits, the environment), the names of its enums,
 * and its error messages. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan/env.h"
#include "cchan/last_error.h"
#include "coll_internal.h"

/* Defaults: the winners of cchan-coll-bench --sweep (docs/collectives.md, "Tuning"; the figures:
 * docs/tuning.md). */
static const struct coll_param_def {
    const char *name, *env;
    int64_t def, min, max;
} coll_param_defs[COLL_PARAM_COUNT] = {
    {"ce_lanes", "CCHAN_COLL_CE_LANES", 1, 1, COLLI_CE_LANES_MAX},
    {"ce_chunk", "CCHAN_COLL_CE_CHUNK", 64 * (int64_t)COLL_MiB, 4 * (int64_t)COLL_KiB, INT64_MAX},
    /* -1: AllGather from 512 MiB 0 where every rank's send and recv allocations have 2 MiB pages,
     * else 400; AllReduce 400 (docs/tuning.md, "CE SM share") */
    {"ce_sm_permille", "CCHAN_COLL_CE_SM_PERMILLE", -1, -1, 1000},
    {"zc_block_bytes", "CCHAN_COLL_ZC_BLOCK_BYTES", 32 * (int64_t)COLL_KiB, (int64_t)COLL_KiB,
     INT64_MAX},
    /* 1: kernels of calls up to COLL_PDL_MAX_BYTES launch as programmatic dependents of the
     * stream's previous kernel (sm_90+) */
    {"pdl", "CCHAN_COLL_PDL", 1, 0, 1},
    /* CE AllReduce, 1: the copy engines push the reduce-scatter's shards too (three staging
     * regions); 0: the SMs push them inside the CE_RS kernel; -1: 1 where every rank's send and
     * recv allocations have 2 MiB pages (docs/tuning.md, "CE AllReduce") */
    {"ce_rs", "CCHAN_COLL_CE_RS", -1, -1, 1},
    /* ce_rs AllReduce: staging regions in the scratch (chunk k uses region k % ce_regions; the
     * copy engines run ce_regions - 1 chunks ahead of the reduction) */
    {"ce_regions", "CCHAN_COLL_CE_REGIONS", 3, 2, 8},
    /* HB AllGather on a registered recv: zero-copy (one kernel storing into the peers' recv) up
     * to this many bytes of output (from 64 MiB the CE row takes over; docs/tuning.md,
     * "Zero-copy limits"); 0: never */
    {"zc_ag_max", "CCHAN_COLL_ZC_AG_MAX", 64 * (int64_t)COLL_MiB, 0, INT64_MAX},
    /* HB ReduceScatter on a registered send: zero-copy (one kernel reading every rank's send)
     * up to this many bytes of input (beyond, unmeasured; docs/tuning.md, "Zero-copy limits");
     * 0: never */
    {"zc_rs_max", "CCHAN_COLL_ZC_RS_MAX", 64 * (int64_t)COLL_MiB, 0, INT64_MAX},
};

/* ------------------------------------------------------------------ errors */

/* Every message goes into the thread's one last-error message (cchan/last_error.h). */
int colli_error(int status, const char *where, const char *fmt, ...) {
    char msg[1024]; /* longer: the whole message is cut, with "..." */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cchan_set_last_error(status, "%s: %s (%s)", where, msg, cchan_strerror(status));
}

int colli_wrap(int status, const char *where, const char *what) {
    return cchan_set_last_error(status, "%s: %s: %s (%s)", where, what, cchan_last_error(),
                                cchan_strerror(status));
}

void colli_clear_error(void) { cchan_clear_last_error(); }

const char *cchan_coll_last_error(void) { return cchan_last_error(); }

/* ------------------------------------------------------------------ names, sizes */

const char *cchan_coll_algo_name(cchan_coll_algo_t algo) {
    switch (algo) {
    case CCHAN_COLL_AUTO: return "auto";
    case CCHAN_COLL_LL_ALLPAIRS: return "ll_allpairs";
    case CCHAN_COLL_HB_ALLPAIRS: return "hb_allpairs";
    case CCHAN_COLL_SWITCH: return "switch";
    case CCHAN_COLL_CE_ALLPAIRS: return "ce_allpairs";
    case CCHAN_COLL_PLAN: return "plan";
    default: return "unknown";
    }
}

size_t cchan_coll_dtype_size(cchan_coll_dtype_t dtype) {
    switch (dtype) {
    case CCHAN_COLL_F32: return 4;
    case CCHAN_COLL_F16:
    case CCHAN_COLL_BF16: return 2;
    default: return 0;
    }
}

/* ------------------------------------------------------------------ tuning parameters */

static int coll_param_index(const char *name) {
    for (int i = 0; name && i < COLL_PARAM_COUNT; i++)
        if (!strcmp(name, coll_param_defs[i].name)) return i;
    return -1;
}

int cchan_coll_set_param(cchan_coll_t *c, const char *name, int64_t value) {
    static const char *where = "cchan_coll_set_param";
    colli_clear_error();
    if (!c) return colli_error(-EINVAL, where, "coll is NULL");
    int i = coll_param_index(name);
    if (i < 0) return colli_error(-EINVAL, where, "unknown parameter '%s'", name ? name : "(null)");
    const struct coll_param_def *d = &coll_param_defs[i];
    if (value < d->min || value > d->max)
        return colli_error(-EINVAL, where, "%s = %lld: want [%lld, %lld]", name, (long long)value,
                           (long long)d->min, (long long)d->max);
    c->param[i] = value;
    return 0;
}

int cchan_coll_get_param(const cchan_coll_t *c, const char *name, int64_t *out) {
    static const char *where = "cchan_coll_get_param";
    colli_clear_error();
    if (!c || !out) return colli_error(-EINVAL, where, "coll and out must not be NULL");
    int i = coll_param_index(name);
    if (i < 0) return colli_error(-ENOENT, where, "unknown parameter '%s'", name ? name : "(null)");
    *out = c->param[i];
    return 0;
}

const char *colli_param_env(int i) {
    return i >= 0 && i < COLL_PARAM_COUNT ? coll_param_defs[i].env : "?";
}

int colli_params_init(int64_t param[COLL_PARAM_COUNT], const char *where) {
    for (int i = 0; i < COLL_PARAM_COUNT; i++) {
        const struct coll_param_def *d = &coll_param_defs[i];
        int64_t v;
        if (cchan_env_get_int(d->env, &v)) return colli_wrap(-EINVAL, where, d->env);
        /* the registry's default and range are this table's; a difference is a bug here */
        if (v < d->min || v > d->max)
            return colli_error(-EINVAL, where, "%s=%lld: want an integer in [%lld, %lld]", d->env,
                               (long long)v, (long long)d->min, (long long)d->max);
        param[i] = v;
    }
    return 0;
}
