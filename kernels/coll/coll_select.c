/* cchan_coll's native selection, the default rule of the selector (coll_tune.c): the size table of
 * each GPU generation (cchan_coll_select), what a call on given buffers runs
 * (cchan_coll_select_buffers, colli_pick) and what each algorithm supports. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include "coll_internal.h"

/* A generation's size table: the first row whose op matches, whose rank count is at most max_ranks,
 * whose message (bytes of the full buffer: AllReduce's, AllGather's output, ReduceScatter's input)
 * lies in [min_bytes, max_bytes] and whose algorithm supports the call wins; HB all-pairs supports
 * everything and is the fallback. Why these rows (figures: docs/tuning.md, "Selector rows"):
 *   - LL moves every byte with a flag (twice the bytes, each peer gets the whole message) but
 *     finishes in one one-way latency with no barrier; HB pays rank barriers (a system-scope
 *     release that drains the block's NVLink stores, then a round trip) and is bandwidth-bound
 *     beyond. With more ranks LL traffic grows with nranks - 1, so its window shrinks (those rows
 *     are scaled from the 2-rank ones, not measured).
 *   - CE all-pairs AllGather from 64 MiB on 2 ranks (registered recv; a call with
 *     CCHAN_COLL_AUTO on unregistered buffers falls back to HB), where it beat HB; below, HB was
 *     ahead. Unmeasured with more ranks: no row.
 *   - CE all-pairs AllReduce from 256 MiB on 2 ranks, registered send and recv with 2 MiB pages
 *     and ce_rs (colli_pick falls back to HB otherwise): the copy engines push the shards and the
 *     reduced chunks; at 128 MiB it was too close to HB for a row.
 * Rows naming CE_ALLPAIRS apply only once the communicator has registered buffers.
 * Retune from cchan-coll-bench (--sweep, docs/collectives.md). */
typedef struct coll_select_row {
    cchan_coll_op_t op;
    int max_ranks;
    size_t min_bytes, max_bytes;
    cchan_coll_algo_t algo;
} coll_select_row_t;

/* Measured on H100 and H200 (sm_90). */
static const coll_select_row_t coll_rows_sm90[] = {
    {CCHAN_COLL_ALLREDUCE, 2, 0, 512 * COLL_KiB, CCHAN_COLL_LL_ALLPAIRS},
    {CCHAN_COLL_ALLREDUCE, 4, 0, 256 * COLL_KiB, CCHAN_COLL_LL_ALLPAIRS},
    {CCHAN_COLL_ALLREDUCE, 8, 0, 128 * COLL_KiB, CCHAN_COLL_LL_ALLPAIRS},
    {CCHAN_COLL_ALLGATHER, 2, 0, 512 * COLL_KiB, CCHAN_COLL_LL_ALLPAIRS},
    {CCHAN_COLL_ALLREDUCE, 2, 256 * COLL_MiB, SIZE_MAX, CCHAN_COLL_CE_ALLPAIRS},
    {CCHAN_COLL_ALLGATHER, 2, 64 * COLL_MiB, SIZE_MAX, CCHAN_COLL_CE_ALLPAIRS},
    {CCHAN_COLL_ALLGATHER, 8, 0, 256 * COLL_KiB, CCHAN_COLL_LL_ALLPAIRS},
    {CCHAN_COLL_REDUCESCATTER, 2, 0, COLL_MiB, CCHAN_COLL_LL_ALLPAIRS},
    {CCHAN_COLL_REDUCESCATTER, 8, 0, 256 * COLL_KiB, CCHAN_COLL_LL_ALLPAIRS},
};

/* The default rule of each GPU generation: the table of the newest generation at or below the
 * device's, else the oldest one (whose name then says it was not measured here). The host platform
 * follows sm_90's, so that its tests exercise the GPU's rule. */
static const struct coll_generation {
    int sm;
    const char *name;
    const coll_select_row_t *rows;
    size_t nrows;
} coll_generations[] = {
    {90, "sm_90", coll_rows_sm90, sizeof coll_rows_sm90 / sizeof coll_rows_sm90[0]},
};
#define COLL_NGEN (sizeof coll_generations / sizeof coll_generations[0])

static const struct coll_generation *coll_gen(const cchan_coll_t *c) {
    const struct coll_generation *g = &coll_generations[0];
    for (size_t i = 0; i < COLL_NGEN; i++)
        if (coll_generations[i].sm <= c->sm && coll_generations[i].sm >= g->sm)
            g = &coll_generations[i];
    return g;
}

const char *colli_default_rule(const cchan_coll_t *c) {
    const struct coll_generation *g = coll_gen(c);
    if (c->platform != CCHAN_PLATFORM_CUDA) return g->name; /* the host follows sm_90 */
    if (g->sm == c->sm) return g->name;
    static _Thread_local char buf[64];
    snprintf(buf, sizeof buf, "%s (unmeasured on sm_%d)", g->name, c->sm);
    return buf;
}

/* HB all-pairs AllReduce on registered buffers reads the peers' inputs (zero-copy) up to this size;
 * beyond, NVLink reads from 128 blocks fell behind the scratch path's stores (docs/tuning.md,
 * "Zero-copy limits"). */
#define COLL_ZC_MAX_BYTES (16 * COLL_MiB)

/* Automatic ReduceScatter on a registered send: zero-copy HB rather than LL above this size. */
#define COLL_RS_ZC_OVER_LL_BYTES (512 * COLL_KiB)

/* The queries below answer with an algorithm or a yes/no that cannot carry a reason: a handle or
 * an op they cannot answer for leaves one in the last error, naming the argument and its values. */
static int coll_query_args(const cchan_coll_t *c, cchan_coll_op_t op, const char *where) {
    if (!c) return colli_error(-EINVAL, where, "coll is NULL");
    if ((unsigned)op > CCHAN_COLL_REDUCESCATTER)
        return colli_error(-EINVAL, where,
                           "op %d is not a collective with native kernels (valid: %d "
                           "CCHAN_COLL_ALLREDUCE, "
                           "%d CCHAN_COLL_ALLGATHER, %d CCHAN_COLL_REDUCESCATTER)",
                           (int)op, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_ALLGATHER,
                           CCHAN_COLL_REDUCESCATTER);
    return 0;
}

int cchan_coll_supported(const cchan_coll_t *c, cchan_coll_op_t op, cchan_coll_algo_t algo,
                         size_t bytes) {
    if (coll_query_args(c, op, "cchan_coll_supported")) return 0;
    size_t n = (size_t)c->nranks;
    switch (algo) {
    case CCHAN_COLL_AUTO: return 1;
    case CCHAN_COLL_LL_ALLPAIRS: {
        size_t per_src = op == CCHAN_COLL_ALLREDUCE ? bytes : (bytes + n - 1) / n;
        return per_src <= c->base.ll_slot / 2;
    }
    case CCHAN_COLL_HB_ALLPAIRS: return 1;
    case CCHAN_COLL_SWITCH: return op == CCHAN_COLL_ALLREDUCE;
    case CCHAN_COLL_CE_ALLPAIRS: /* with registered buffers (the call checks) */
        /* AllGather: the copy engines write every rank's block at its offset in the peers' recv;
         * blocks of a multiple of 16 bytes keep those copies aligned (a block that is not puts
         * every other rank's copies on misaligned addresses, which the copy engines move far
         * slower) */
        return op == CCHAN_COLL_ALLREDUCE ||
               (op == CCHAN_COLL_ALLGATHER && bytes % n == 0 && (bytes / n) % 16 == 0);
    default:
        colli_error(-EINVAL, "cchan_coll_supported", "algo %d unknown (valid: 0 to %d)", (int)algo,
                    CCHAN_COLL_ALGO_COUNT - 1);
        return 0;
    }
}

/* The algorithms that work only on registered buffers. */
static int coll_needs_reg(cchan_coll_algo_t algo) { return algo == CCHAN_COLL_CE_ALLPAIRS; }

/* The generation's row for the call, or NULL (HB all-pairs, the fallback). */
static const coll_select_row_t *coll_row(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes) {
    const struct coll_generation *g = coll_gen(c);
    for (size_t i = 0; i < g->nrows; i++) {
        const coll_select_row_t *row = &g->rows[i];
        if (row->op == op && c->nranks <= row->max_ranks && bytes >= row->min_bytes &&
            bytes <= row->max_bytes && cchan_coll_supported(c, op, row->algo, bytes) &&
            (!coll_needs_reg(row->algo) || c->regs))
            return row;
    }
    return NULL;
}

cchan_coll_algo_t cchan_coll_select(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes) {
    int st = coll_query_args(c, op, "cchan_coll_select");
    if (st) return (cchan_coll_algo_t)st;
    const coll_select_row_t *row = coll_row(c, op, bytes);
    return row ? row->algo : CCHAN_COLL_HB_ALLPAIRS;
}

/* Every rank's send and recv mapped here, for calls on registered buffers (same offsets on every
 * rank). */
static void coll_map_peers(const cchan_coll_t *c, coll_args_t *a, const coll_reg_t *gs,
                           const void *send, const coll_reg_t *gr, const void *recv) {
    for (int p = 0; p < c->nranks; p++) {
        a->peer_send[p] =
            (const uint8_t *)cchan_mem_ptr(gs->peers[p]) + ((const uint8_t *)send - gs->ptr);
        a->peer_recv[p] =
            (uint8_t *)cchan_mem_ptr(gr->peers[p]) + ((const uint8_t *)recv - gr->ptr);
    }
}

/* The regions a call's registration is checked on, each of the full buffer's bytes: AllReduce
 * send and recv, AllGather recv (the copy engines and the SMs write every rank's recv),
 * ReduceScatter send (the zero-copy kernel reads it; recv is written by the SMs only). */
static void coll_reg_regions(cchan_coll_op_t op, const void **send, const void **recv) {
    if (op == CCHAN_COLL_ALLGATHER) *send = *recv;
    if (op == CCHAN_COLL_REDUCESCATTER) *recv = *send;
}

/* Whether HB all-pairs runs zero-copy on these regions (coll_reg_regions'): every region
 * registered and the call within the op's limit (AllReduce COLL_ZC_MAX_BYTES, AllGather zc_ag_max,
 * ReduceScatter zc_rs_max). With `a`, also maps the peers' buffers into it. */
int colli_zc(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes, const void *send,
             const void *recv, coll_args_t *a) {
    const uint64_t max = op == CCHAN_COLL_ALLREDUCE   ? COLL_ZC_MAX_BYTES
                         : op == CCHAN_COLL_ALLGATHER ? (uint64_t)c->param[COLL_P_ZC_AG_MAX]
                                                      : (uint64_t)c->param[COLL_P_ZC_RS_MAX];
    if (bytes > max) return 0;
    const coll_reg_t *gs = colli_find_reg(c, send, bytes), *gr = colli_find_reg(c, recv, bytes);
    if (!gs || !gr) return 0;
    if (a) coll_map_peers(c, a, gs, send, gr, recv);
    return 1;
}

/* What CCHAN_COLL_AUTO runs for a call on these regions: the selector's row, then the buffers. */
static cchan_coll_algo_t coll_auto(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes,
                                   const void *send, const void *recv) {
    cchan_coll_algo_t algo = cchan_coll_select(c, op, bytes);
    /* The table knows sizes, not buffers: a ReduceScatter in the LL row's upper half on a
     * registered send runs the zero-copy HB kernel instead, which beats LL there but not below
     * (docs/tuning.md, "Zero-copy limits"); unregistered buffers keep the LL row. */
    if (op == CCHAN_COLL_REDUCESCATTER && algo == CCHAN_COLL_LL_ALLPAIRS &&
        bytes > COLL_RS_ZC_OVER_LL_BYTES && colli_zc(c, op, bytes, send, recv, NULL))
        return CCHAN_COLL_HB_ALLPAIRS;
    if (!coll_needs_reg(algo)) return algo;
    const coll_reg_t *gs = colli_find_reg(c, send, bytes), *gr = colli_find_reg(c, recv, bytes);
    if (!gs || !gr) return CCHAN_COLL_HB_ALLPAIRS;
    /* AllReduce wins on the copy engines only with 2 MiB pages and the copy engines pushing the
     * shards (ce_rs; the row's measurement) */
    if (algo == CCHAN_COLL_CE_ALLPAIRS && op == CCHAN_COLL_ALLREDUCE &&
        !(gs->big_pages && gr->big_pages && c->param[COLL_P_CE_RS] != 0))
        return CCHAN_COLL_HB_ALLPAIRS;
    return algo;
}

cchan_coll_algo_t cchan_coll_select_buffers(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes,
                                            const void *send, const void *recv) {
    int st = coll_query_args(c, op, "cchan_coll_select_buffers");
    if (st) return (cchan_coll_algo_t)st;
    coll_reg_regions(op, &send, &recv);
    return coll_auto(c, op, bytes, send, recv);
}

cchan_coll_algo_t colli_default_native(const cchan_coll_t *c, cchan_coll_op_t op, size_t bytes,
                                       const void *send, const void *recv, char *why,
                                       size_t why_len) {
    const coll_select_row_t *row = coll_row(c, op, bytes);
    cchan_coll_algo_t algo = CCHAN_COLL_HB_ALLPAIRS;
    if (send && recv) {
        coll_reg_regions(op, &send, &recv);
        algo = coll_auto(c, op, bytes, send, recv);
    } else if (row) {
        algo = row->algo;
    }
    int n;
    if (!row)
        n = snprintf(why, why_len, "default rule %s: no size row holds it, the fallback",
                     colli_default_rule(c));
    else if (row->max_bytes == SIZE_MAX)
        n = snprintf(why, why_len, "default rule %s: size row from %zu B for <= %d ranks",
                     colli_default_rule(c), row->min_bytes, row->max_ranks);
    else
        n = snprintf(why, why_len, "default rule %s: size row %zu-%zu B for <= %d ranks",
                     colli_default_rule(c), row->min_bytes, row->max_bytes, row->max_ranks);
    if (n > 0 && (size_t)n < why_len && row && algo != row->algo)
        snprintf(why + n, why_len - (size_t)n, " (%s there; these buffers run %s)",
                 cchan_coll_algo_name(row->algo), cchan_coll_algo_name(algo));
    return algo;
}

int colli_native_runs(const cchan_coll_t *c, cchan_coll_op_t op, cchan_coll_algo_t algo,
                      size_t bytes, const void *send, const void *recv) {
    if ((unsigned)op > CCHAN_COLL_REDUCESCATTER || algo == CCHAN_COLL_AUTO ||
        (unsigned)algo >= CCHAN_COLL_ALGO_COUNT || !cchan_coll_supported(c, op, algo, bytes))
        return 0;
    if (!coll_needs_reg(algo)) return 1;
    if (!send || !recv) return c->regs != NULL;
    coll_reg_regions(op, &send, &recv);
    return colli_find_reg(c, send, bytes) && colli_find_reg(c, recv, bytes);
}

/* Picks the algorithm (CCHAN_COLL_AUTO: coll_auto) for a call on `bytes` of send and recv, whose
 * regions become coll_reg_regions'; for CE_ALLPAIRS also maps the peers' buffers into `a`. */
int colli_pick(cchan_coll_t *c, cchan_coll_op_t op, cchan_coll_algo_t *algo, size_t bytes,
               const void *send, const void *recv, coll_args_t *a, const char *where) {
    coll_reg_regions(op, &send, &recv);
    if (*algo == CCHAN_COLL_AUTO) *algo = coll_auto(c, op, bytes, send, recv);
    if (!cchan_coll_supported(c, op, *algo, bytes))
        return colli_error(CCHAN_ERR_UNSUPPORTED, where,
                           "algorithm %s cannot run this call (%zu bytes, %d ranks%s)",
                           cchan_coll_algo_name(*algo), bytes, c->nranks,
                           *algo == CCHAN_COLL_LL_ALLPAIRS   ? ", beyond the LL scratch slots"
                           : *algo == CCHAN_COLL_CE_ALLPAIRS ? ": AllReduce, or AllGather of a "
                                                               "per-rank block of a multiple of 16 "
                                                               "bytes"
                                                             : ": AllReduce only");
    if (!coll_needs_reg(*algo)) return 0;
    const coll_reg_t *gs = colli_find_reg(c, send, bytes), *gr = colli_find_reg(c, recv, bytes);
    if (!gs || !gr)
        return colli_error(CCHAN_ERR_UNSUPPORTED, where,
                           "%s needs %s inside buffers registered with cchan_coll_register (%s is "
                           "not)",
                           cchan_coll_algo_name(*algo),
                           op == CCHAN_COLL_ALLREDUCE   ? "send and recv"
                           : op == CCHAN_COLL_ALLGATHER ? "recv"
                                                        : "send",
                           gs ? "recv" : "send");
    coll_map_peers(c, a, gs, send, gr, recv);
    a->ce_big_pages = (uint32_t)(gs->big_pages && gr->big_pages);
    return 0;
}
