/* cchan-bench switch-bw on the host backend: the switch channel's device code run by CPU threads
 * (one group per rank process, every rank at once) over the members' shared mappings, against the
 * same work written as plain C loops by the same threads:
 *
 *   reduce-f32  cchan_switch_channel_reduce_f32 vs a loop summing the members' floats (contiguous
 *               shares per thread);
 *   broadcast   cchan_switch_channel_broadcast_f32 vs memcpy of each thread's share into every
 *               member's slot.
 * GB/s = result bytes per second per rank; median of r repetitions of n calls. It describes the
 * host backend on this machine, nothing about GPUs.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "bench_pattern.h"
#include "bench_switch.h"
#include "cchan/cchan.h"

#define SWH_MIB (1ull << 20)
#define SWH_MAX_THREADS 16

enum swh_kind { SWH_RED, SWH_RAW_RED, SWH_BCAST, SWH_RAW_BCAST };

typedef struct swh {
    cb_ctx_t *ctx;
    int rank, nranks;
    uint64_t region;
    cchan_mem_t *B, *L;
    cchan_switch_t *owner;
    cchan_switch_channel_t ch;
} swh_t;

typedef struct swh_job {
    swh_t *w;
    int kind, iters;
    uint64_t bytes;
    uint32_t tid, nthreads;
} swh_job_t;

static float swh_value(uint32_t seed, int rank, uint64_t i) {
    return (float)((int)(cb_pattern_word(seed + 977u * (uint32_t)rank, i) & 31u) - 16);
}

static void swh_share(uint64_t n, uint32_t tid, uint32_t nt, uint64_t *lo, uint64_t *hi) {
    uint64_t share = (n / nt + 15) / 16 * 16;
    *lo = (uint64_t)tid * share;
    *hi = *lo + share;
    if (*lo > n) *lo = n;
    if (*hi > n) *hi = n;
}

static void *swh_thread(void *p) {
    swh_job_t *j = (swh_job_t *)p;
    swh_t *w = j->w;
    const cchan_switch_channel_t *ch = &w->ch;
    const uint64_t slot = w->region * (1 + (uint64_t)w->rank);
    uint64_t lo, hi;
    swh_share(j->bytes, j->tid, j->nthreads, &lo, &hi);
    for (int it = 0; it < j->iters; it++) {
        switch (j->kind) {
        case SWH_RED:
            cchan_switch_channel_reduce_f32(ch, 0, 0, j->bytes, j->tid, j->nthreads);
            break;
        case SWH_RAW_RED: {
            float *dst = (float *)(void *)ch->local;
            for (uint64_t i = lo / 4; i < hi / 4; i++) {
                float acc = ((const float *)(const void *)ch->member[0])[i];
                for (uint32_t m = 1; m < ch->nmembers; m++)
                    acc += ((const float *)(const void *)ch->member[m])[i];
                dst[i] = acc;
            }
            break;
        }
        case SWH_BCAST:
            cchan_switch_channel_broadcast_f32(ch, slot, 0, j->bytes, j->tid, j->nthreads);
            break;
        case SWH_RAW_BCAST:
            for (uint32_t m = 0; m < ch->nmembers; m++)
                memcpy(ch->member[m] + slot + lo, ch->local + lo, hi - lo);
            break;
        }
    }
    return NULL;
}

/* Runs kind on nt threads of this rank, iters times each. */
static void swh_run(swh_t *w, int kind, uint64_t bytes, int nt, int iters) {
    pthread_t th[SWH_MAX_THREADS];
    swh_job_t jobs[SWH_MAX_THREADS];
    for (int t = 0; t < nt; t++) {
        jobs[t] = (swh_job_t){w, kind, iters, bytes, (uint32_t)t, (uint32_t)nt};
        if (t && pthread_create(&th[t], NULL, swh_thread, &jobs[t]) != 0)
            cb_die(w->ctx, "cannot start a thread");
    }
    swh_thread(&jobs[0]);
    for (int t = 1; t < nt; t++) pthread_join(th[t], NULL);
}

static int64_t swh_check(const float *p, uint64_t count, uint32_t seed, int nranks, int from) {
    int64_t bad = 0;
    for (uint64_t i = 0; i < count; i++) {
        float want = 0;
        if (from >= 0)
            want = swh_value(seed, from, i);
        else
            for (int r = 0; r < nranks; r++) want += swh_value(seed, r, i);
        bad += p[i] != want;
    }
    return bad;
}

static void swh_measure(swh_t *w, int kind, uint64_t bytes, int nt, int iters, int reps,
                        cb_stats_t *st, int64_t *errors) {
    cb_ctx_t *ctx = w->ctx;
    const int bcast = kind == SWH_BCAST || kind == SWH_RAW_BCAST;
    const uint64_t count = bytes / 4;
    static uint32_t seq;
    const uint32_t seed = ctx->seed + 0x9e3779b9u * ++seq;
    float *in = (float *)(void *)(bcast ? w->ch.local : w->ch.member[w->rank]);
    for (uint64_t i = 0; i < count; i++) in[i] = swh_value(seed, w->rank, i);
    if (bcast)
        memset(w->ch.member[w->rank] + w->region, 0xa5, w->region * (uint64_t)w->nranks);
    else
        memset(w->ch.local, 0xa5, bytes);
    cb_barrier(ctx);
    swh_run(w, kind, bytes, nt, 1);
    cb_barrier(ctx);
    int64_t bad = 0;
    if (bcast)
        for (int r = 0; r < w->nranks; r++)
            bad += swh_check((const float *)(const void *)(w->ch.member[w->rank] +
                                                           w->region * (1 + (uint64_t)r)),
                             count, seed, w->nranks, r);
    else
        bad = swh_check((const float *)(const void *)w->ch.local, count, seed, w->nranks, -1);
    if (bad)
        fprintf(stderr, "cchan-bench: rank %d: switch-bw check: %lld wrong elements\n", w->rank,
                (long long)bad);
    *errors = cb_errors_combine(ctx, bad);
    double v[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        cb_barrier(ctx);
        double t0 = cb_now();
        swh_run(w, kind, bytes, nt, iters);
        v[r] = (double)bytes * iters / (cb_now() - t0) / 1e9;
    }
    cb_stats(v, reps, st);
}

void cb_switch_host(cb_ctx_t *ctx) {
    if (ctx->nranks > CCHAN_SWITCH_MAX_MEMBERS) {
        cb_printf(ctx, "# switch-bw: skipped (%d ranks; a switch channel has at most %d members)\n",
                  ctx->nranks, CCHAN_SWITCH_MAX_MEMBERS);
        return;
    }
    const cb_opts_t *o = &ctx->opt;
    swh_t ww, *w = &ww;
    memset(w, 0, sizeof *w);
    w->ctx = ctx;
    w->rank = ctx->rank;
    w->nranks = ctx->nranks;
    const uint64_t top = o->max_bytes ? o->max_bytes : 16 * SWH_MIB;
    w->region = (top + 4095) / 4096 * 4096;
    cb_check(ctx, cchan_mem_alloc(ctx->comm, w->region * (1 + (uint64_t)w->nranks), 0, &w->B),
             "cchan_mem_alloc(switch buf)");
    cb_check(ctx, cchan_mem_alloc(ctx->comm, w->region, 0, &w->L), "cchan_mem_alloc(switch local)");
    cb_check(ctx, cchan_switch_channel_create(ctx->comm, w->B, w->L, 0, &w->ch, &w->owner),
             "cchan_switch_channel_create");
    int nt = o->ngrids ? o->grids[o->ngrids - 1] : 2;
    if (nt > SWH_MAX_THREADS) nt = SWH_MAX_THREADS;
    uint64_t sizes[CB_MAX_SIZES];
    int ns = cb_sweep(o, 4096, 16 * SWH_MIB, 4, 16, w->region, sizes);
    const int iters = cb_opt_int(o->iters, 10), reps = cb_opt_int(o->reps, 5);
    static const struct {
        int kind, base;
        const char *op, *base_op, *what;
    } ops[] = {{SWH_RED, SWH_RAW_RED, "reduce-f32", "c-sum",
                "cchan_switch_channel_reduce_f32 vs a plain C loop summing the members' floats"},
               {SWH_BCAST, SWH_RAW_BCAST, "broadcast", "memcpy",
                "cchan_switch_channel_broadcast_f32 vs memcpy into every member"}};
    for (int k = 0; k < 2; k++) {
        char title[512];
        snprintf(title, sizeof title,
                 "switch-bw %s (host backend): %s, %s path, all %d ranks at once, %d threads each; "
                 "median of %d reps x %d; GB/s = result bytes per second per rank",
                 ops[k].op, ops[k].what, cchan_switch_path_name(w->ch.path), w->nranks, nt, reps,
                 iters);
        cb_bw_header(ctx, title, ops[k].op, ops[k].base_op, "GB/s");
        for (int si = 0; si < ns; si++) {
            const uint64_t bytes = sizes[si] / 16 * 16;
            cb_row_t row;
            memset(&row, 0, sizeof row);
            snprintf(row.test, sizeof row.test, "switch-bw");
            snprintf(row.op, sizeof row.op, "%s", ops[k].op);
            snprintf(row.base_op, sizeof row.base_op, "%s", ops[k].base_op);
            snprintf(row.units, sizeof row.units, "GB/s");
            row.src = 0;
            row.dst = -1;
            row.bytes = bytes;
            row.threads = nt;
            int64_t e1, e2;
            swh_measure(w, ops[k].kind, bytes, nt, iters, reps, &row.value, &e1);
            swh_measure(w, ops[k].base, bytes, nt, iters, reps, &row.base, &e2);
            row.errors = e1 < 0 ? e2 : (e2 < 0 ? e1 : e1 + e2);
            cb_bw_row(ctx, &row);
        }
    }
    cb_barrier(ctx);
    cb_check(ctx, cchan_switch_destroy(w->owner), "cchan_switch_destroy");
    cb_check(ctx, cchan_mem_destroy(w->B), "cchan_mem_destroy");
    cb_check(ctx, cchan_mem_destroy(w->L), "cchan_mem_destroy");
}
