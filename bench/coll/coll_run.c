/* cchan-coll-bench driver: sizes, checks, timing of cchan and NCCL, the nccl-tests style table. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_bench.h"

const char *ccb_dtype_name(int dt) {
    return dt == CCHAN_COLL_F32 ? "float" : dt == CCHAN_COLL_F16 ? "half" : "bfloat16";
}
static int nccl_dtype(int dt) {
    return dt == CCHAN_COLL_F32   ? CB_NCCL_FLOAT32
           : dt == CCHAN_COLL_F16 ? CB_NCCL_FLOAT16
                                  : CB_NCCL_BFLOAT16;
}
static const char *op_name(unsigned op) {
    return op == CCB_OP_ALLREDUCE       ? "allreduce"
           : op == CCB_OP_ALLGATHER     ? "allgather"
           : op == CCB_OP_REDUCESCATTER ? "reducescatter"
                                        : "fused";
}
static cchan_coll_op_t coll_op(unsigned op) {
    return op == CCB_OP_ALLREDUCE   ? CCHAN_COLL_ALLREDUCE
           : op == CCB_OP_ALLGATHER ? CCHAN_COLL_ALLGATHER
                                    : CCHAN_COLL_REDUCESCATTER;
}
/* nccl-tests' bus bandwidth factors. */
static double bus_factor(unsigned op, int n) {
    return op == CCB_OP_ALLREDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
}

static void add_row(ccb_ctx_t *ctx, const ccb_row_t *row) {
    if (ctx->nrows == ctx->cap) {
        size_t cap = ctx->cap ? 2 * ctx->cap : 128;
        ccb_row_t *r = (ccb_row_t *)realloc(ctx->rows, cap * sizeof *r);
        if (!r) ccb_die(ctx, "out of memory");
        ctx->rows = r;
        ctx->cap = cap;
    }
    ctx->rows[ctx->nrows++] = *row;
}

/* ---------------------------------------------------------------- NCCL */

static void nccl_setup(ccb_ctx_t *ctx) {
    char why[512] = "";
    int ok = 1;
    if (!ctx->opt.nccl) {
        snprintf(ctx->nccl_why, sizeof ctx->nccl_why, "NCCL rows off (--no-nccl)");
        return;
    }
    if (ctx->platform != CCHAN_PLATFORM_CUDA) {
        snprintf(ctx->nccl_why, sizeof ctx->nccl_why, "NCCL needs GPUs: host platform, cchan only");
        return;
    }
    if (cb_nccl_nvls_guard(why, sizeof why) < 0) ok = 0;
    if (ok && cb_nccl_load(&ctx->nccl, why, sizeof why) < 0) ok = 0;
    int sym = ok && cb_nccl_has_windows(&ctx->nccl);
    int mine[2] = {ok, sym}, *all = (int *)calloc((size_t)ctx->nranks * 2, sizeof(int));
    if (!all) ccb_die(ctx, "out of memory");
    ccb_check_status(ctx, cchan_bootstrap_allgather(ctx->bs, mine, all, sizeof mine), "allgather");
    for (int r = 0; r < ctx->nranks; r++) {
        if (!all[2 * r] && ok) {
            ok = 0;
            snprintf(why, sizeof why, "NCCL unavailable on rank %d", r);
        }
        sym &= all[2 * r + 1];
    }
    free(all);
    if (!ok) {
        snprintf(ctx->nccl_why, sizeof ctx->nccl_why, "no NCCL rows: %s", why);
        return;
    }
    cb_nccl_unique_id_t id, *ids = (cb_nccl_unique_id_t *)calloc((size_t)ctx->nranks, sizeof id);
    if (!ids) ccb_die(ctx, "out of memory");
    memset(&id, 0, sizeof id);
    if (ctx->rank == 0) {
        int r = ctx->nccl.GetUniqueId(&id);
        if (r != 0) ccb_die(ctx, "ncclGetUniqueId: %s", cb_nccl_error(&ctx->nccl, r));
    }
    ccb_check_status(ctx, cchan_bootstrap_allgather(ctx->bs, &id, ids, sizeof id), "allgather");
    int r = ctx->nccl.CommInitRank(&ctx->nccl_comm, ctx->nranks, ids[0], ctx->rank);
    free(ids);
    if (r != 0) ccb_die(ctx, "ncclCommInitRank: %s", cb_nccl_error(&ctx->nccl, r));
    ctx->have_nccl = 1;
    ctx->have_nccl_sym = sym;
    int v = ctx->nccl.version;
    snprintf(ctx->nccl_why, sizeof ctx->nccl_why, "NCCL %d.%d.%d from %s%s, NCCL_NVLS_ENABLE=%s",
             v / 10000, v / 100 % 100, v % 100, ctx->nccl.path,
             sym ? "" : " (no symmetric registration: ncclCommWindowRegister missing)",
             getenv("NCCL_NVLS_ENABLE"));
}

/* A buffer NCCL's symmetric mode can use: ncclMemAlloc'd and registered as a window. */
typedef struct sym_buf {
    void *ptr;
    cb_nccl_window_t win;
} sym_buf_t;

static int sym_alloc(ccb_ctx_t *ctx, size_t bytes, sym_buf_t *b) {
    memset(b, 0, sizeof *b);
    bytes = (bytes + CB_NCCL_WIN_ALIGNMENT - 1) / CB_NCCL_WIN_ALIGNMENT * CB_NCCL_WIN_ALIGNMENT;
    int r = ctx->nccl.MemAlloc(&b->ptr, bytes);
    if (r == 0)
        r = ctx->nccl.CommWindowRegister(ctx->nccl_comm, b->ptr, bytes, &b->win,
                                         CB_NCCL_WIN_COLL_SYMMETRIC);
    if (r != 0) {
        ccb_printf(ctx, "# NCCL symmetric buffers: %s; symmetric rows skipped\n",
                   cb_nccl_error(&ctx->nccl, r));
        return -1;
    }
    return 0;
}
static void sym_free(ccb_ctx_t *ctx, sym_buf_t *b) {
    if (b->win) ctx->nccl.CommWindowDeregister(ctx->nccl_comm, b->win);
    if (b->ptr) ctx->nccl.MemFree(b->ptr);
    memset(b, 0, sizeof *b);
}

/* ---------------------------------------------------------------- one operation */

int ccb_launch_cchan(void *p, void *stream) {
    op_arg_t *a = (op_arg_t *)p;
    int st;
    switch (a->op) {
    case CCB_OP_ALLREDUCE:
        st = cchan_coll_allreduce(a->coll, a->send, a->recv, a->count, (cchan_coll_dtype_t)a->dtype,
                                  (cchan_coll_algo_t)a->algo, stream);
        break;
    case CCB_OP_ALLGATHER:
        st = cchan_coll_allgather(a->coll, a->send, a->recv, a->count, (cchan_coll_dtype_t)a->dtype,
                                  (cchan_coll_algo_t)a->algo, stream);
        break;
    default:
        st = cchan_coll_reducescatter(a->coll, a->send, a->recv, a->count,
                                      (cchan_coll_dtype_t)a->dtype, (cchan_coll_algo_t)a->algo,
                                      stream);
        break;
    }
    if (st < 0)
        fprintf(stderr, "cchan-coll-bench: rank %d: cchan_coll %s (%s, %zu): %s: %s\n",
                a->ctx->rank, op_name(a->op), cchan_coll_algo_name((cchan_coll_algo_t)a->algo),
                a->count, cchan_strerror(st), cchan_coll_last_error());
    return st;
}

int ccb_launch_nccl(void *p, void *stream) {
    op_arg_t *a = (op_arg_t *)p;
    const cb_nccl_t *n = &a->ctx->nccl;
    int r;
    if (a->op == CCB_OP_ALLREDUCE)
        r = n->AllReduce(a->send, a->recv, a->count, nccl_dtype(a->dtype), CB_NCCL_SUM,
                         a->ctx->nccl_comm, stream);
    else if (a->op == CCB_OP_ALLGATHER)
        r = n->AllGather(a->send, a->recv, a->count, nccl_dtype(a->dtype), a->ctx->nccl_comm,
                         stream);
    else
        r = n->ReduceScatter(a->send, a->recv, a->count, nccl_dtype(a->dtype), CB_NCCL_SUM,
                             a->ctx->nccl_comm, stream);
    if (r != 0)
        fprintf(stderr, "cchan-coll-bench: rank %d: nccl %s: %s\n", a->ctx->rank, op_name(a->op),
                cb_nccl_error(n, r));
    return r ? -1 : 0;
}

/* Sizes of an operation of `count` (see op_arg_t) elements of size es. */
static size_t in_bytes(unsigned op, size_t count, size_t es, int n) {
    return op == CCB_OP_REDUCESCATTER ? count * es * (size_t)n : count * es;
}
static size_t out_bytes(unsigned op, size_t count, size_t es, int n) {
    return op == CCB_OP_ALLGATHER ? count * es * (size_t)n : count * es;
}

/* Where the input and output of the in-place form live, given the buffer `buf`. */
void ccb_in_place_ptrs(unsigned op, void *buf, size_t count, size_t es, int rank, const void **send,
                       void **recv) {
    uint8_t *b = (uint8_t *)buf;
    if (op == CCB_OP_ALLGATHER) {
        *recv = b;
        *send = b + (size_t)rank * count * es;
    } else if (op == CCB_OP_REDUCESCATTER) {
        *send = b;
        *recv = b + (size_t)rank * count * es;
    } else {
        *send = b;
        *recv = b;
    }
}

/* Expected integer value of output element i. */
static int expected_value(const ccb_ctx_t *ctx, unsigned op, size_t count, uint64_t i) {
    int n = ctx->nranks, s = 0;
    if (op == CCB_OP_ALLGATHER) return ccb_value(ctx->seed, (int)(i / count), i % count);
    uint64_t base = op == CCB_OP_REDUCESCATTER ? (uint64_t)ctx->rank * count : 0;
    for (int r = 0; r < n; r++) s += ccb_value(ctx->seed, r, base + i);
    return s;
}

/* Runs the operation once on fresh data and checks it against the host reference. Returns the
 * number of wrong elements (and out-of-bounds bytes in *oob, -1 when not checked). */
int64_t ccb_check_op(ccb_ctx_t *ctx, ccb_dev_t *dev, op_arg_t *a, int in_place, void *sendbuf,
                     void *recvbuf, int64_t *oob, ccb_launch_fn launch) {
    const size_t es = cchan_coll_dtype_size((cchan_coll_dtype_t)a->dtype);
    const int n = ctx->nranks;
    const size_t ib = in_bytes(a->op, a->count, es, n), ob = out_bytes(a->op, a->count, es, n);
    const uint64_t in_count = ib / es;
    *oob = -1;
    if (in_place) {
        ccb_in_place_ptrs(a->op, recvbuf, a->count, es, ctx->rank, &a->send, &a->recv);
        if (dev->poison(recvbuf, ob + CCB_GUARD) < 0) return -1;
    } else {
        a->send = sendbuf;
        a->recv = recvbuf;
        if (dev->poison(recvbuf, ob + CCB_GUARD) < 0) return -1;
    }
    uint64_t base = 0;
    if (dev->fill((void *)a->send, in_count, a->dtype, ctx->seed, ctx->rank, base) < 0) return -1;
    ccb_check_status(ctx, cchan_bootstrap_barrier(ctx->bs), "barrier");
    if (launch(a, dev->stream) < 0) return -1;
    uint8_t *host = (uint8_t *)malloc(ob + CCB_GUARD);
    if (!host) ccb_die(ctx, "out of memory");
    if (dev->d2h(host, a->recv, ob + (in_place ? 0 : CCB_GUARD)) < 0) {
        free(host);
        return -1;
    }
    int64_t wrong = 0;
    const uint64_t nout = ob / es;
    /* Integer sums lie in [-8n, 8n]: their bit patterns come from a small table. */
    int span = 8 * n;
    uint32_t *bits = (uint32_t *)malloc(sizeof(uint32_t) * (size_t)(2 * span + 1));
    if (!bits) ccb_die(ctx, "out of memory");
    for (int v = -span; v <= span; v++) bits[v + span] = ccb_bits(v, a->dtype);
    for (uint64_t i = 0; i < nout; i++) {
        uint32_t got = es == 4 ? ((const uint32_t *)host)[i] : ((const uint16_t *)host)[i];
        int v = expected_value(ctx, a->op, a->count, i);
        if (got != bits[v + span]) wrong++;
    }
    free(bits);
    if (!in_place) {
        *oob = 0;
        for (size_t i = 0; i < CCB_GUARD; i++) *oob += host[ob + i] != 0xA5;
    }
    free(host);
    return wrong;
}

double ccb_time_op(ccb_ctx_t *ctx, ccb_dev_t *dev, void *a, ccb_launch_fn launch, int graph) {
    double us = dev->time(ctx, launch, a, graph);
    /* Every rank takes part in every measurement; a failure anywhere voids the figure. */
    double worst = ccb_max_over_ranks(ctx, us < 0 ? INFINITY : us);
    return isfinite(worst) ? worst : -1.0;
}

static void print_coll_header(const ccb_ctx_t *ctx, unsigned op, int dtype) {
    ccb_printf(ctx,
               "#\n# %s, %s, %d ranks; times in us, bandwidths in GB/s (nccl-tests' algbw and "
               "busbw)\n",
               op_name(op), ccb_dtype_name(dtype), ctx->nranks);
    ccb_printf(ctx, "# %10s %11s %8s %-11s  %30s  %30s  %31s\n", "", "", "", "",
               "------ out-of-place ------", "------- in-place -------",
               "---- NCCL (faster placement) ----");
    ccb_printf(ctx, "# %10s %11s %8s %-11s  %8s %7s %7s %6s  %8s %7s %7s %6s  %9s %9s %9s %8s\n",
               "size", "count", "type", "algo", "time", "algbw", "busbw", "#wrong", "time", "algbw",
               "busbw", "#wrong", "default", "symmetric", "best", "speedup");
}

static void fmt_us(char *buf, size_t n, double us) {
    if (us < 0)
        snprintf(buf, n, "n/a");
    else
        snprintf(buf, n, "%.2f", us);
}
static void fmt_wrong(char *buf, size_t n, int64_t w) {
    if (w < 0)
        snprintf(buf, n, "N/A");
    else
        snprintf(buf, n, "%lld", (long long)w);
}

static void print_coll_row(const ccb_ctx_t *ctx, const ccb_row_t *r, unsigned op) {
    char t[2][16], w[2][24], nd[16], ns[16], nb[16], sp[16];
    const ccb_meas_t *m[2] = {&r->oop, &r->ip};
    double ab[2], bb[2];
    for (int k = 0; k < 2; k++) {
        fmt_us(t[k], sizeof t[k], m[k]->us);
        fmt_wrong(w[k], sizeof w[k], m[k]->wrong);
        ab[k] = m[k]->us > 0 ? (double)r->bytes / m[k]->us / 1e3 : 0;
        bb[k] = ab[k] * bus_factor(op, ctx->nranks);
    }
    fmt_us(nd, sizeof nd, r->nccl_us[0]);
    fmt_us(ns, sizeof ns, r->nccl_us[1]);
    fmt_us(nb, sizeof nb, r->nccl_best_us);
    if (r->speedup > 0)
        snprintf(sp, sizeof sp, "%.2fx", r->speedup);
    else
        snprintf(sp, sizeof sp, "-");
    ccb_printf(
        ctx,
        "  %10llu %11llu %8s %-11s  %8s %7.2f %7.2f %6s  %8s %7.2f %7.2f %6s  %9s %9s %9s %8s%s\n",
        (unsigned long long)r->bytes, (unsigned long long)r->count, r->dtype, r->algo, t[0], ab[0],
        bb[0], w[0], t[1], ab[1], bb[1], w[1], nd, ns, nb, sp, r->graph ? "  graph" : "");
}

/* A parameter value, with K/M/G for whole binary multiples of at least 1 KiB. */
static void fmt_param(char *buf, size_t n, int64_t v) {
    static const char suffix[] = "KMG";
    int k = -1;
    while (k < 2 && v >= 1024 && v % 1024 == 0) {
        v /= 1024;
        k++;
    }
    if (k >= 0)
        snprintf(buf, n, "%lld%c", (long long)v, suffix[k]);
    else
        snprintf(buf, n, "%lld", (long long)v);
}

/* Sizes of the sweep: -b to -e by factor -f (or increment -i). */
int ccb_sweep(const ccb_opts_t *o, uint64_t *out, int max) {
    int n = 0;
    for (uint64_t s = o->min_bytes; s <= o->max_bytes && n < max;) {
        out[n++] = s;
        uint64_t next = o->step ? s + o->step : (uint64_t)((double)s * o->factor + 0.5);
        if (next <= s) break;
        s = next;
    }
    return n;
}

/* NCCL's time (default and symmetric windows, the faster of out of place and in place) for one
 * size, shared by every algorithm row; also checks the checker on NCCL's own result. */
static void coll_nccl_times(ccb_ctx_t *ctx, ccb_dev_t *dev, cchan_coll_t *coll, unsigned op,
                            int dtype, size_t count, int graph, void *sendbuf, void *recvbuf,
                            sym_buf_t *sym, ccb_row_t *base) {
    const ccb_opts_t *o = &ctx->opt;
    const size_t es = cchan_coll_dtype_size((cchan_coll_dtype_t)dtype), bytes = base->bytes;
    if (ctx->have_nccl) {
        for (int mode = 0; mode < 2; mode++) {
            if (mode == 1 && !ctx->have_nccl_sym) continue;
            void *s = mode ? sym[0].ptr : sendbuf, *r = mode ? sym[1].ptr : recvbuf;
            double best = -1;
            for (int ip = 0; ip < 2; ip++) {
                op_arg_t a = {ctx, coll, op, dtype, 0, s, r, count};
                if (ip) ccb_in_place_ptrs(op, r, count, es, ctx->rank, &a.send, &a.recv);
                if (o->check && mode == 0 && ip == 0 && bytes <= (16u << 20)) {
                    /* Validates the checker itself on NCCL's result. */
                    int64_t oob;
                    int64_t wrong = ccb_sum_over_ranks(
                        ctx, ccb_check_op(ctx, dev, &a, 0, s, r, &oob, ccb_launch_nccl));
                    if (wrong != 0)
                        ccb_printf(ctx,
                                   "# warning: NCCL's own result has %lld wrong elements "
                                   "at %zu bytes\n",
                                   (long long)wrong, bytes);
                    a.send = s;
                    a.recv = r;
                }
                double us = ccb_time_op(ctx, dev, &a, ccb_launch_nccl, graph);
                if (us > 0 && (best < 0 || us < best)) best = us;
            }
            base->nccl_us[mode] = best;
            if (best > 0 && (base->nccl_best_us < 0 || best < base->nccl_best_us))
                base->nccl_best_us = best;
        }
    }
}

/* One algorithm's row (one value of the swept parameter): checked and timed out of place and in
 * place, printed and recorded; its bus bandwidth added to *bus_sum. */
static void coll_row(ccb_ctx_t *ctx, ccb_dev_t *dev, cchan_coll_t *coll, unsigned op, int dtype,
                     int algo, int var, size_t count, int graph, void *sendbuf, void *recvbuf,
                     const ccb_row_t *base, double *bus_sum, int *bus_n) {
    const ccb_opts_t *o = &ctx->opt;
    const size_t es = cchan_coll_dtype_size((cchan_coll_dtype_t)dtype), bytes = base->bytes;
    const int n = ctx->nranks;
    ccb_row_t row = *base;
    if (algo == CCHAN_COLL_AUTO)
        snprintf(row.algo, sizeof row.algo, "auto:%s",
                 cchan_coll_algo_name(
                     cchan_coll_select_buffers(coll, coll_op(op), bytes, sendbuf, recvbuf)));
    else
        snprintf(row.algo, sizeof row.algo, "%s", cchan_coll_algo_name((cchan_coll_algo_t)algo));
    int64_t restore = 0;
    if (o->nsweep) {
        char v[24];
        fmt_param(v, sizeof v, o->sweep[var]);
        size_t l = strlen(row.algo);
        snprintf(row.algo + l, sizeof row.algo - l, " %s=%s", o->sweep_name, v);
        ccb_check_status(ctx, cchan_coll_get_param(coll, o->sweep_name, &restore),
                         "cchan_coll_get_param");
        ccb_check_status(ctx, cchan_coll_set_param(coll, o->sweep_name, o->sweep[var]),
                         "cchan_coll_set_param");
    }
    int supported = algo == CCHAN_COLL_AUTO ||
                    cchan_coll_supported(coll, coll_op(op), (cchan_coll_algo_t)algo, bytes);
    /* Every rank must agree before a collective runs. */
    supported = ccb_sum_over_ranks(ctx, supported) == n;
    ccb_meas_t *m[2] = {&row.oop, &row.ip};
    for (int ip = 0; ip < 2; ip++) {
        m[ip]->us = -1;
        m[ip]->wrong = -1;
        if (!supported) continue;
        op_arg_t a = {ctx, coll, op, dtype, algo, sendbuf, recvbuf, count};
        if (o->check) {
            int64_t oob;
            int64_t w = ccb_check_op(ctx, dev, &a, ip, sendbuf, recvbuf, &oob, ccb_launch_cchan);
            m[ip]->wrong = ccb_sum_over_ranks(ctx, w < 0 ? (int64_t)count * n : w);
            if (!ip) row.oob = ccb_sum_over_ranks(ctx, oob < 0 ? 0 : oob);
        } else if (ip) {
            ccb_in_place_ptrs(op, recvbuf, count, es, ctx->rank, &a.send, &a.recv);
        }
        m[ip]->us = ccb_time_op(ctx, dev, &a, ccb_launch_cchan, graph);
        if (m[ip]->wrong > 0 || m[ip]->us < 0) ctx->failed = 1;
    }
    if (row.oob > 0) {
        ctx->oob_total += row.oob;
        ctx->failed = 1;
    }
    if (row.oop.wrong > 0) ctx->wrong_total += row.oop.wrong;
    if (row.ip.wrong > 0) ctx->wrong_total += row.ip.wrong;
    double best = row.oop.us;
    if (row.ip.us > 0 && (best < 0 || row.ip.us < best)) best = row.ip.us;
    if (best > 0) {
        row.algbw = (double)bytes / best / 1e3;
        row.busbw = row.algbw * bus_factor(op, n);
        for (int k = 0; k < 2; k++)
            if (m[k]->us > 0) {
                *bus_sum += (double)bytes / m[k]->us / 1e3 * bus_factor(op, n);
                (*bus_n)++;
            }
        if (row.nccl_best_us > 0) row.speedup = row.nccl_best_us / best;
    }
    print_coll_row(ctx, &row, op);
    add_row(ctx, &row);
    if (o->nsweep)
        ccb_check_status(ctx, cchan_coll_set_param(coll, o->sweep_name, restore),
                         "cchan_coll_set_param");
}

static void bench_coll(ccb_ctx_t *ctx, ccb_dev_t *dev, cchan_coll_t *coll, unsigned op, int dtype,
                       void *sendbuf, void *recvbuf, sym_buf_t *sym) {
    const ccb_opts_t *o = &ctx->opt;
    const size_t es = cchan_coll_dtype_size((cchan_coll_dtype_t)dtype);
    const int n = ctx->nranks;
    uint64_t sizes[128];
    int nsizes = ccb_sweep(o, sizes, 128);
    print_coll_header(ctx, op, dtype);
    double bus_sum = 0, nccl_bus_sum = 0;
    int bus_n = 0, nccl_bus_n = 0;
    for (int si = 0; si < nsizes; si++) {
        /* nccl-tests' convention: size is the larger buffer (allgather: the output, reducescatter:
         * the input), rounded down to whole elements on every rank. */
        size_t unit = (op == CCB_OP_ALLREDUCE ? 1 : (size_t)n) * es;
        size_t count = (size_t)(sizes[si] / unit);
        if (count == 0) continue;
        size_t bytes = count * unit;
        int graph = o->graph_launches > 0 && bytes <= o->graph_max;
        ccb_row_t base;
        memset(&base, 0, sizeof base);
        snprintf(base.op, sizeof base.op, "%s", op_name(op));
        snprintf(base.dtype, sizeof base.dtype, "%s", ccb_dtype_name(dtype));
        base.bytes = bytes;
        base.count = bytes / es;
        base.graph = graph;
        base.nccl_us[0] = base.nccl_us[1] = base.nccl_best_us = -1;
        base.oob = -1;
        coll_nccl_times(ctx, dev, coll, op, dtype, count, graph, sendbuf, recvbuf, sym, &base);
        const int nvariants = o->nsweep ? o->nsweep : 1;
        for (int vi = 0; vi < nvariants * CCHAN_COLL_ALGO_COUNT; vi++) {
            const int algo = vi / nvariants, var = vi % nvariants;
            if (o->algo >= 0 && algo != o->algo) continue;
            if (o->algo < 0 && algo == CCHAN_COLL_AUTO) continue; /* -a all: the named ones */
            coll_row(ctx, dev, coll, op, dtype, algo, var, count, graph, sendbuf, recvbuf, &base,
                     &bus_sum, &bus_n);
        }
        if (base.nccl_best_us > 0) {
            nccl_bus_sum += (double)bytes / base.nccl_best_us / 1e3 * bus_factor(op, n);
            nccl_bus_n++;
        }
    }
    if (bus_n) {
        ccb_printf(ctx, "# Avg bus bandwidth    : %.3f (cchan, %s %s)", bus_sum / bus_n,
                   op_name(op), ccb_dtype_name(dtype));
        if (nccl_bus_n) ccb_printf(ctx, "; best NCCL: %.3f", nccl_bus_sum / nccl_bus_n);
        ccb_printf(ctx, "\n");
    }
}

/* ---------------------------------------------------------------- fused AllReduce + RMSNorm */

static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
/* A bf16 in +-[lo, 16 lo) with a random mantissa. */
static uint16_t rand_bf16(uint64_t seed, uint64_t i, float lo) {
    uint64_t h = mix64(seed ^ mix64(i));
    float mag = lo * (1.0f + 15.0f * (float)(h & 0xffffff) / 16777216.0f);
    return cchan_f32_to_bf16((h >> 63) ? -mag : mag).bits;
}
static double bf(uint16_t b) {
    cchan_bf16_t v = {b};
    return cchan_bf16_to_f32(v);
}
static double round_bf16(double v) { return bf(cchan_f32_to_bf16((float)v).bits); }

typedef struct fused_arg {
    ccb_ctx_t *ctx;
    cchan_fused_rmsnorm_t *f;
    cchan_coll_t *coll;
    int proto; /* cchan_fused_proto_t, or -1: unfused with cchan, -2/-3: NCCL default/sym */
    const void *x, *res, *w;
    void *ar, *out, *y;
    uint32_t tokens, hidden;
} fused_arg_t;

#define CCB_EPS 1e-6f

static int launch_fused(void *p, void *stream) {
    fused_arg_t *a = (fused_arg_t *)p;
    int st;
    size_t count = (size_t)a->tokens * a->hidden;
    if (a->proto >= 0) {
        st = cchan_fused_rmsnorm_run(a->f, a->x, a->res, a->w, CCB_EPS, a->out, a->y, a->tokens,
                                     (cchan_fused_proto_t)a->proto, stream);
        if (st < 0)
            fprintf(stderr, "cchan-coll-bench: cchan_fused_rmsnorm_run: %s\n",
                    cchan_fused_rmsnorm_last_error());
        return st;
    }
    if (a->proto == -1) {
        st = cchan_coll_allreduce(a->coll, a->x, a->ar, count, CCHAN_COLL_BF16, CCHAN_COLL_AUTO,
                                  stream);
    } else {
        st = a->ctx->nccl.AllReduce(a->x, a->ar, count, CB_NCCL_BFLOAT16, CB_NCCL_SUM,
                                    a->ctx->nccl_comm, stream);
        st = st ? -1 : 0;
    }
    if (st < 0) return st;
    return cchan_fused_residual_rmsnorm(a->ctx->platform, a->ar, a->res, a->w, CCB_EPS, a->out,
                                        a->y, a->tokens, a->hidden, stream);
}

/* Host inputs of a fused case: every rank's x (for the reference), the residual, the weight. */
typedef struct fused_data {
    uint16_t *x_all, *res, *w;
} fused_data_t;

static int64_t fused_check(ccb_ctx_t *ctx, ccb_dev_t *dev, const fused_data_t *d, fused_arg_t *a) {
    const size_t n = (size_t)a->tokens * a->hidden, bytes = n * 2;
    uint16_t *out = (uint16_t *)malloc(bytes), *y = (uint16_t *)malloc(bytes);
    double *h = (double *)malloc(sizeof(double) * a->hidden);
    if (!out || !y || !h) ccb_die(ctx, "out of memory");
    if (dev->poison(a->out, bytes) < 0 || dev->poison(a->y, bytes) < 0) return -1;
    ccb_check_status(ctx, cchan_bootstrap_barrier(ctx->bs), "barrier");
    if (launch_fused(a, dev->stream) < 0) return -1;
    if (dev->d2h(out, a->out, bytes) < 0 || dev->d2h(y, a->y, bytes) < 0) return -1;
    int64_t bad = 0;
    for (uint32_t t = 0; t < a->tokens; t++) {
        double ss = 0;
        for (uint32_t j = 0; j < a->hidden; j++) {
            size_t i = (size_t)t * a->hidden + j;
            double s = 0;
            for (int r = 0; r < ctx->nranks; r++) s += bf(d->x_all[(size_t)r * n + i]);
            h[j] = round_bf16(round_bf16(s) + bf(d->res[i]));
            ss += h[j] * h[j];
            bad += bf(out[i]) != h[j];
        }
        double inv = 1.0 / sqrt(ss / a->hidden + CCB_EPS);
        for (uint32_t j = 0; j < a->hidden; j++) {
            double want = h[j] * inv * bf(d->w[j]);
            bad += fabs(bf(y[(size_t)t * a->hidden + j]) - want) > fabs(want) / 128 + 1e-30;
        }
    }
    free(out);
    free(y);
    free(h);
    return bad;
}

/* The buffers of the fused rows of one hidden size. */
typedef struct fused_bufs {
    void *x, *res, *w, *ar, *out, *y;
    sym_buf_t sx, sar; /* NCCL symmetric windows, where sym */
    int sym;
} fused_bufs_t;

/* One row: random inputs, the fused kernel (auto and each protocol) and the unfused paths, each
 * checked against the reference and timed; printed and recorded. */
static void fused_row(ccb_ctx_t *ctx, ccb_dev_t *dev, cchan_coll_t *coll, cchan_fused_rmsnorm_t *f,
                      const fused_bufs_t *B, uint32_t tokens, uint32_t hidden) {
    const ccb_opts_t *o = &ctx->opt;
    size_t n = (size_t)tokens * hidden, bytes = n * 2;
    fused_data_t d;
    d.x_all = (uint16_t *)malloc(bytes * (size_t)ctx->nranks);
    d.res = (uint16_t *)malloc(bytes);
    d.w = (uint16_t *)malloc(hidden * 2u);
    if (!d.x_all || !d.res || !d.w) ccb_die(ctx, "out of memory");
    uint64_t seed = mix64(ctx->seed + tokens * 131u + hidden);
    for (int r = 0; r < ctx->nranks; r++)
        for (size_t i = 0; i < n; i++)
            d.x_all[(size_t)r * n + i] = rand_bf16(seed + (uint64_t)r, i, 0.25f);
    for (size_t i = 0; i < n; i++) d.res[i] = rand_bf16(seed ^ 0xabcdefu, i, 0.125f);
    for (uint32_t i = 0; i < hidden; i++) d.w[i] = rand_bf16(seed ^ 0x5151u, i, 0.0625f);
    const uint16_t *mine = d.x_all + (size_t)ctx->rank * n;
    if (dev->h2d(B->x, mine, bytes) < 0 || dev->h2d(B->res, d.res, bytes) < 0 ||
        dev->h2d(B->w, d.w, hidden * 2u) < 0)
        ccb_die(ctx, "copy of the inputs failed");
    if (B->sym && dev->h2d(B->sx.ptr, mine, bytes) < 0) ccb_die(ctx, "copy of the inputs failed");

    ccb_row_t row;
    memset(&row, 0, sizeof row);
    snprintf(row.op, sizeof row.op, "fused");
    snprintf(row.dtype, sizeof row.dtype, "bfloat16");
    row.tokens = tokens;
    row.hidden = hidden;
    row.bytes = bytes;
    row.count = n;
    row.graph = o->graph_launches > 0;
    row.oob = -1;
    row.nccl_us[0] = row.nccl_us[1] = row.nccl_best_us = row.unfused_cchan_us = -1;
    cchan_fused_proto_t auto_proto = cchan_fused_rmsnorm_select(f, tokens);
    snprintf(row.algo, sizeof row.algo, "%s", cchan_fused_proto_name(auto_proto));
    int64_t wrong = 0;
    for (int p = 0; p < 4; p++) {
        /* p 3: LL with rows spread over several blocks, to show what that buys. */
        fused_arg_t a = {ctx,    f,      coll,   p == 3 ? CCHAN_FUSED_LL : p,
                         B->x,   B->res, B->w,   B->ar,
                         B->out, B->y,   tokens, hidden};
        if (p == 3) cchan_fused_rmsnorm_set_split(f, 0);
        if (o->check) {
            int64_t b = fused_check(ctx, dev, &d, &a);
            wrong += b < 0 ? (int64_t)n : b;
        }
        row.fused_us[p] = ccb_time_op(ctx, dev, &a, launch_fused, row.graph);
        if (p == 3) cchan_fused_rmsnorm_set_split(f, 1);
    }
    /* The unfused paths: cchan all-reduce, NCCL default, NCCL symmetric; each + kernel. */
    for (int u = 0; u < 3; u++) {
        if (u >= 1 && !ctx->have_nccl) continue;
        if (u == 2 && !B->sym) continue;
        fused_arg_t a = {ctx,
                         f,
                         coll,
                         -1 - u,
                         u == 2 ? B->sx.ptr : B->x,
                         B->res,
                         B->w,
                         u == 2 ? B->sar.ptr : B->ar,
                         B->out,
                         B->y,
                         tokens,
                         hidden};
        if (o->check) {
            int64_t b = fused_check(ctx, dev, &d, &a);
            if (u == 0)
                wrong += b < 0 ? (int64_t)n : b;
            else if (b != 0)
                ccb_printf(ctx,
                           "# note: NCCL + kernel differs from the reference in %lld "
                           "elements (tokens %u)\n",
                           (long long)b, tokens);
        }
        double us = ccb_time_op(ctx, dev, &a, launch_fused, row.graph);
        if (u == 0)
            row.unfused_cchan_us = us;
        else
            row.nccl_us[u - 1] = us;
        if (u >= 1 && us > 0 && (row.nccl_best_us < 0 || us < row.nccl_best_us))
            row.nccl_best_us = us;
    }
    row.oop.us = row.fused_us[0];
    row.oop.wrong = o->check ? ccb_sum_over_ranks(ctx, wrong) : -1;
    row.ip.us = -1;
    row.ip.wrong = -1;
    if (row.oop.wrong > 0) {
        ctx->wrong_total += row.oop.wrong;
        ctx->failed = 1;
    }
    if (row.fused_us[0] < 0) ctx->failed = 1;
    double base = row.nccl_best_us > 0 ? row.nccl_best_us : row.unfused_cchan_us;
    if (base > 0 && row.fused_us[0] > 0) row.speedup = base / row.fused_us[0];
    char t[8][16], wr[24];
    fmt_us(t[0], sizeof t[0], row.fused_us[0]);
    fmt_us(t[1], sizeof t[1], row.fused_us[1]);
    fmt_us(t[2], sizeof t[2], row.fused_us[3]);
    fmt_us(t[3], sizeof t[3], row.fused_us[2]);
    fmt_us(t[4], sizeof t[4], row.unfused_cchan_us);
    fmt_us(t[5], sizeof t[5], row.nccl_us[0]);
    fmt_us(t[6], sizeof t[6], row.nccl_us[1]);
    fmt_us(t[7], sizeof t[7], row.nccl_best_us);
    fmt_wrong(wr, sizeof wr, row.oop.wrong);
    char ratio[16] = "-";
    if (row.speedup > 0) snprintf(ratio, sizeof ratio, "%.3f", 1.0 / row.speedup);
    ccb_printf(ctx, "  %6u %6u %10llu  %-9s %8s %8s %9s %8s  %10s %10s %10s %9s  %7s %6s\n", tokens,
               hidden, (unsigned long long)bytes, row.algo, t[0], t[1], t[2], t[3], t[4], t[5],
               t[6], t[7], ratio, wr);
    add_row(ctx, &row);
    free(d.x_all);
    free(d.res);
    free(d.w);
}

static void bench_fused(ccb_ctx_t *ctx, ccb_dev_t *dev, cchan_coll_t *coll) {
    const ccb_opts_t *o = &ctx->opt;
    uint32_t max_tokens = 1;
    for (int i = 0; i < o->ntokens; i++)
        if (o->tokens[i] > max_tokens) max_tokens = o->tokens[i];
    ccb_printf(ctx,
               "#\n# fused AllReduce + residual add + RMSNorm, bf16, %d ranks; times in us per "
               "call%s\n"
               "# fused: one cchan kernel (auto, and each protocol); unfused: an all-reduce (cchan "
               "auto, NCCL default, NCCL symmetric) then the residual+RMSNorm kernel\n",
               ctx->nranks, o->graph_launches > 0 ? " (CUDA graphs)" : "");
    ccb_printf(ctx, "# %6s %6s %10s  %-9s %8s %8s %9s %8s  %10s %10s %10s %9s  %7s %6s\n", "tokens",
               "hidden", "bytes", "proto", "fused", "ll", "ll:spread", "hb", "cchan+k", "nccl+k",
               "ncclsym+k", "best", "ratio", "#wrong");
    for (int hi = 0; hi < o->nhiddens; hi++) {
        uint32_t hidden = o->hiddens[hi];
        cchan_fused_rmsnorm_t *f;
        int st = cchan_fused_rmsnorm_create(ctx->comm, max_tokens, hidden, &f);
        if (st < 0)
            ccb_die(ctx, "cchan_fused_rmsnorm_create: %s", cchan_fused_rmsnorm_last_error());
        size_t maxb = (size_t)max_tokens * hidden * 2;
        fused_bufs_t B;
        memset(&B, 0, sizeof B);
        B.x = dev->alloc(maxb), B.res = dev->alloc(maxb), B.w = dev->alloc(hidden * 2u);
        B.ar = dev->alloc(maxb), B.out = dev->alloc(maxb), B.y = dev->alloc(maxb);
        if (!B.x || !B.res || !B.w || !B.ar || !B.out || !B.y) ccb_die(ctx, "out of device memory");
        /* Registered, the cchan unfused path may use its zero-copy algorithms; it works without. */
        if (cchan_coll_register(coll, B.x, maxb) < 0 || cchan_coll_register(coll, B.ar, maxb) < 0)
            ccb_printf(ctx, "# note: cchan_coll_register failed (%s); cchan+k uses scratch\n",
                       cchan_coll_last_error());
        B.sym = ctx->have_nccl_sym && sym_alloc(ctx, maxb, &B.sx) == 0 &&
                sym_alloc(ctx, maxb, &B.sar) == 0;
        B.sym = ccb_sum_over_ranks(ctx, B.sym) == ctx->nranks;
        for (int ti = 0; ti < o->ntokens; ti++) {
            fused_row(ctx, dev, coll, f, &B, o->tokens[ti], hidden);
        }
        dev->sync();
        ccb_check_status(ctx, cchan_bootstrap_barrier(ctx->bs), "barrier");
        if (B.sym) {
            sym_free(ctx, &B.sx);
            sym_free(ctx, &B.sar);
        }
        cchan_coll_deregister(coll, B.x);
        cchan_coll_deregister(coll, B.ar);
        dev->free(B.x);
        dev->free(B.res);
        dev->free(B.w);
        dev->free(B.ar);
        dev->free(B.out);
        dev->free(B.y);
        st = cchan_fused_rmsnorm_destroy(f);
        if (st < 0)
            ccb_die(ctx, "cchan_fused_rmsnorm_destroy: %s", cchan_fused_rmsnorm_last_error());
    }
    ccb_printf(ctx, "# ratio = fused auto / best unfused (NCCL's faster mode + kernel where NCCL "
                    "ran, else cchan + kernel): below 1 the fused kernel wins\n");
}

/* ---------------------------------------------------------------- entry */

int ccb_run(ccb_ctx_t *ctx, ccb_dev_t *dev) {
    const ccb_opts_t *o = &ctx->opt;
    if (dev->init(ctx) < 0) ccb_die(ctx, "device initialisation failed");
    nccl_setup(ctx);
    ccb_printf(ctx, "# device: %s\n# %s\n", ctx->device, ctx->nccl_why);
    ccb_printf(ctx,
               "# timing: %s, %d iterations x %d %s after %d warm-up; median over repetitions, "
               "slowest rank\n",
               dev == &ccb_dev_host ? "wall clock" : "CUDA events", o->iters,
               o->graph_launches > 0 ? o->graph_launches : o->reps,
               o->graph_launches > 0 ? "graph launches (sizes <= graph max; else plain launches)"
                                     : "repetitions",
               o->warmup);
    cchan_coll_t *coll;
    cchan_coll_config_t cfg = CCHAN_COLL_CONFIG_INIT;
    int st = cchan_coll_create(ctx->comm, &cfg, &coll);
    if (st < 0)
        ccb_die(ctx, "cchan_coll_create: %s: %s", cchan_strerror(st), cchan_coll_last_error());
    for (int i = 0; i < o->nparams; i++) {
        st = cchan_coll_set_param(coll, o->params[i].name, o->params[i].value);
        if (st < 0) ccb_die(ctx, "-T %s: %s", o->params[i].name, cchan_coll_last_error());
    }
    {
        static const char *const names[] = {"ce_lanes",       "ce_chunk",   "ce_sm_permille",
                                            "ce_rs",          "ce_regions", "pdl",
                                            "zc_block_bytes", "zc_ag_max",  "zc_rs_max"};
        char line[256];
        size_t len = 0;
        for (size_t i = 0; i < sizeof names / sizeof names[0] && len < sizeof line; i++) {
            int64_t v = 0;
            char f[24];
            if (cchan_coll_get_param(coll, names[i], &v) < 0) continue;
            fmt_param(f, sizeof f, v);
            len += (size_t)snprintf(line + len, sizeof line - len, " %s=%s", names[i], f);
        }
        ccb_printf(ctx, "# cchan_coll parameters:%s\n", line);
        if (o->nsweep) ccb_printf(ctx, "# sweeping %s (rows say the value)\n", o->sweep_name);
    }

    unsigned colls = o->ops & (CCB_OP_ALLREDUCE | CCB_OP_ALLGATHER | CCB_OP_REDUCESCATTER);
    if (colls || o->nplans) {
        /* A whole number of 2 MiB: cudaMalloc maps a size that is not one with small pages,
         * and copy-engine copies between two GPUs that both send then slow down (docs/tuning.md,
         * "2 MiB pages"). nccl-tests' buffers (a power of two) and PyTorch's cached blocks (2 MiB
         * multiples) are such sizes too. */
        const size_t page = (size_t)2 << 20;
        size_t bytes = ((size_t)o->max_bytes + CCB_GUARD + page - 1) / page * page + o->alloc_pad;
        void *sendbuf = dev->alloc(bytes), *recvbuf = dev->alloc(bytes);
        if (!sendbuf || !recvbuf) ccb_die(ctx, "cannot allocate 2 x %zu bytes", bytes);
        ccb_check_status(ctx, cchan_coll_register(coll, sendbuf, bytes), "cchan_coll_register");
        ccb_check_status(ctx, cchan_coll_register(coll, recvbuf, bytes), "cchan_coll_register");
        sym_buf_t sym[2];
        memset(sym, 0, sizeof sym);
        if (ctx->have_nccl_sym) {
            int ok = sym_alloc(ctx, bytes, &sym[0]) == 0 && sym_alloc(ctx, bytes, &sym[1]) == 0;
            if (ccb_sum_over_ranks(ctx, ok) != ctx->nranks) {
                sym_free(ctx, &sym[0]);
                sym_free(ctx, &sym[1]);
                ctx->have_nccl_sym = 0;
            }
        }
        for (int i = 0; i < o->nplans; i++)
            ccb_bench_plan(ctx, dev, coll, o->plans[i], sendbuf, recvbuf, bytes);
        for (unsigned op = CCB_OP_ALLREDUCE; op <= CCB_OP_REDUCESCATTER; op <<= 1) {
            if (o->nplans || !(o->ops & op)) continue;
            for (int d = 0; d < o->ndtypes; d++)
                bench_coll(ctx, dev, coll, op, o->dtypes[d], sendbuf, recvbuf, sym);
        }
        dev->sync();
        ccb_check_status(ctx, cchan_bootstrap_barrier(ctx->bs), "barrier");
        if (ctx->have_nccl_sym) {
            sym_free(ctx, &sym[0]);
            sym_free(ctx, &sym[1]);
        }
        cchan_coll_deregister(coll, sendbuf);
        cchan_coll_deregister(coll, recvbuf);
        dev->free(sendbuf);
        dev->free(recvbuf);
    }
    if (o->ops & CCB_OP_FUSED) bench_fused(ctx, dev, coll);

    ccb_printf(ctx, "# Out of bounds values : %lld %s\n", (long long)ctx->oob_total,
               ctx->oob_total ? "FAILED" : "OK");
    ccb_printf(ctx, "# Wrong elements       : %lld %s\n", (long long)ctx->wrong_total,
               ctx->wrong_total ? "FAILED" : "OK");
    dev->sync();
    ccb_check_status(ctx, cchan_bootstrap_barrier(ctx->bs), "barrier");
    st = cchan_coll_destroy(coll);
    if (st < 0) ccb_die(ctx, "cchan_coll_destroy: %s", cchan_coll_last_error());
    if (ctx->have_nccl) ctx->nccl.CommDestroy(ctx->nccl_comm);
    dev->fini(ctx);
    return ctx->failed ? -1 : 0;
}
