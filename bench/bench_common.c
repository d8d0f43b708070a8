/* cchan-bench: output, statistics, sweeps and collectives shared by the GPU and host benchmarks. */
#include "bench_common.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double cb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t cb_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void cb_printf(const cb_ctx_t *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cb_rank0_vprintf(ctx->rank, fmt, ap);
    va_end(ap);
}

void cb_fail(cb_ctx_t *ctx, const char *fmt, ...) {
    ctx->failed = 1;
    if (ctx->rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    printf("# ERROR: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

void cb_die(const cb_ctx_t *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cb_vdie("cchan-bench", ctx ? ctx->rank : -1, fmt, ap);
}

void cb_check(const cb_ctx_t *ctx, int status, const char *what) {
    if (status >= 0) return;
    const char *detail = cchan_last_error();
    cb_die(ctx, "%s: %s%s%s", what, cchan_strerror(status), detail && *detail ? ": " : "",
           detail ? detail : "");
}

/* ---------------------------------------------------------------- statistics */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void cb_stats(double *v, int n, cb_stats_t *out) {
    memset(out, 0, sizeof(*out));
    if (n <= 0) return;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    out->n = n;
    out->min = v[0];
    out->max = v[n - 1];
    out->mean = sum / n;
    out->median = (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    int p = (int)ceil(0.99 * n) - 1;
    out->p99 = v[p < 0 ? 0 : p];
}

/* ---------------------------------------------------------------- sizes and options */

int cb_opt_int(int value, int dflt) { return value >= 0 ? value : dflt; }

int cb_sweep(const cb_opts_t *o, uint64_t lo, uint64_t hi, double f, uint64_t clip_lo,
             uint64_t clip_hi, uint64_t *out) {
    if (o->min_bytes) lo = o->min_bytes;
    if (o->max_bytes) hi = o->max_bytes;
    if (o->factor > 0) f = o->factor;
    int n = 0;
    for (uint64_t s = lo; s <= hi && n < CB_MAX_SIZES;) {
        if (s >= clip_lo && s <= clip_hi && s > 0) out[n++] = s;
        if (f <= 1.0) break;
        uint64_t next = (uint64_t)((double)s * f + 0.5);
        if (next <= s) next = s + 1;
        s = next;
    }
    return n;
}

/* ---------------------------------------------------------------- rows */

double cb_ratio(const cb_row_t *row) {
    return row->base.median > 0 ? row->value.median / row->base.median : 0.0;
}

const char *cb_check_str(int64_t errors, char *buf, size_t n) {
    if (errors < 0)
        snprintf(buf, n, "-");
    else if (errors == 0)
        snprintf(buf, n, "ok");
    else
        snprintf(buf, n, "FAIL(%lld)", (long long)errors);
    return buf;
}

void cb_row_record(cb_ctx_t *ctx, const cb_row_t *row) {
    if (row->errors > 0) ctx->failed = 1;
    if (ctx->rank != 0) return;
    if (ctx->nrows == ctx->cap) {
        size_t cap = ctx->cap ? 2 * ctx->cap : 256;
        cb_row_t *rows = (cb_row_t *)realloc(ctx->rows, cap * sizeof(*rows));
        if (!rows) cb_die(ctx, "out of memory");
        ctx->rows = rows;
        ctx->cap = cap;
    }
    ctx->rows[ctx->nrows++] = *row;
}

void cb_bw_header(const cb_ctx_t *ctx, const char *title, const char *op, const char *base_op,
                  const char *units) {
    cb_printf(ctx, "#\n# %s\n", title);
    cb_printf(ctx, "# %12s %6s %7s %12s %12s %7s %9s %9s  %s\n", "bytes", "blocks", "threads", op,
              base_op, "ratio", "min", "max", "check");
    cb_printf(ctx, "# %12s %6s %7s %12s %12s %7s %9s %9s\n", "", "", "", units, units, "", units,
              units);
}

void cb_bw_row(cb_ctx_t *ctx, const cb_row_t *r) {
    char chk[32];
    cb_row_record(ctx, r);
    cb_printf(ctx, "  %12llu %6d %7d %12.2f %12.2f %7.3f %9.2f %9.2f  %s\n",
              (unsigned long long)r->bytes, r->blocks, r->threads, r->value.median, r->base.median,
              cb_ratio(r), r->value.min, r->value.max, cb_check_str(r->errors, chk, sizeof chk));
}

void cb_lat_header(const cb_ctx_t *ctx, const char *title, const char *op, const char *base_op) {
    cb_printf(ctx, "#\n# %s\n", title);
    cb_printf(ctx, "# %10s %6s %7s | %-35s | %-35s | %6s %8s  %s\n", "", "", "", op, base_op, "",
              "", "");
    cb_printf(ctx, "# %10s %6s %7s | %8s %8s %8s %8s | %8s %8s %8s %8s | %6s %8s  %s\n", "bytes",
              "blocks", "threads", "median", "p99", "min", "max", "median", "p99", "min", "max",
              "ratio", "GB/s", "check");
}

void cb_lat_row(cb_ctx_t *ctx, const cb_row_t *r) {
    char chk[32];
    cb_row_record(ctx, r);
    /* Payload bytes over the one-way median: the bandwidth one message of this size achieves. */
    double gbps = r->value.median > 0 ? (double)r->bytes / r->value.median : 0.0;
    cb_printf(ctx,
              "  %10llu %6d %7d | %8.0f %8.0f %8.0f %8.0f | %8.0f %8.0f %8.0f %8.0f | %6.3f %8.2f  "
              "%s\n",
              (unsigned long long)r->bytes, r->blocks, r->threads, r->value.median, r->value.p99,
              r->value.min, r->value.max, r->base.median, r->base.p99, r->base.min, r->base.max,
              cb_ratio(r), gbps, cb_check_str(r->errors, chk, sizeof chk));
}

/* ---------------------------------------------------------------- JSON */

static void json_num(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, "%.6g", v);
    else
        fprintf(f, "null");
}

static void json_stats(FILE *f, const cb_stats_t *s) {
    fprintf(f, "{\"median\": ");
    json_num(f, s->median);
    fprintf(f, ", \"p99\": ");
    json_num(f, s->p99);
    fprintf(f, ", \"min\": ");
    json_num(f, s->min);
    fprintf(f, ", \"max\": ");
    json_num(f, s->max);
    fprintf(f, ", \"mean\": ");
    json_num(f, s->mean);
    fprintf(f, ", \"n\": %d}", s->n);
}

int cb_json_write(const cb_ctx_t *ctx, const char *path) {
    if (ctx->rank != 0 || !path) return 0;
#ifdef CCHAN_BENCH_BUILD_COMMIT
    const char *build_commit = CCHAN_BENCH_BUILD_COMMIT;
#else
    const char *build_commit = NULL;
#endif
    FILE *f = cb_json_open(path, "cchan-bench", ctx->command, build_commit);
    if (!f) return -1;
    fprintf(f, ",\n  \"backend\": ");
    cb_json_str(f, ctx->host_backend ? "host" : "cuda");
    fprintf(f, ",\n  \"device\": ");
    cb_json_str(f, ctx->device);
    fprintf(f, ",\n  \"timer\": ");
    cb_json_str(f, ctx->timer);
    fprintf(f, ",\n  \"nranks\": %d,\n  \"seconds\": %.1f,\n  \"rows\": [", ctx->nranks,
            cb_now() - ctx->t0);
    for (size_t i = 0; i < ctx->nrows; i++) {
        const cb_row_t *r = &ctx->rows[i];
        char chk[32];
        fprintf(f, "%s\n    {\"subcommand\": ", i ? "," : "");
        cb_json_str(f, r->test);
        fprintf(f, ", \"op\": ");
        cb_json_str(f, r->op);
        fprintf(f, ", \"baseline_op\": ");
        cb_json_str(f, r->base_op);
        fprintf(f, ", \"units\": ");
        cb_json_str(f, r->units);
        fprintf(f, ", \"src\": %d, \"dst\": %d, \"size\": %llu, \"grid\": %d, \"threads\": %d",
                r->src, r->dst, (unsigned long long)r->bytes, r->blocks, r->threads);
        fprintf(f, ", \"value\": ");
        json_num(f, r->value.median);
        fprintf(f, ", \"baseline\": ");
        json_num(f, r->base.median);
        fprintf(f, ", \"ratio\": ");
        json_num(f, cb_ratio(r));
        fprintf(f, ", \"check\": ");
        cb_json_str(f, cb_check_str(r->errors, chk, sizeof chk));
        fprintf(f, ", \"errors\": %lld,\n     \"stats\": ", (long long)r->errors);
        json_stats(f, &r->value);
        fprintf(f, ", \"baseline_stats\": ");
        json_stats(f, &r->base);
        fprintf(f, "}");
    }
    fprintf(f, "\n  ],\n  \"result\": \"%s\"\n}\n", ctx->failed ? "FAILED" : "OK");
    if (fclose(f) != 0) {
        fprintf(stderr, "cchan-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- collectives */

void cb_barrier(const cb_ctx_t *ctx) { cb_check(ctx, cchan_bootstrap_barrier(ctx->bs), "barrier"); }

void cb_allgather(const cb_ctx_t *ctx, const void *mine, void *all, size_t bytes) {
    cb_check(ctx, cchan_bootstrap_allgather(ctx->bs, mine, all, bytes), "allgather");
}

int64_t cb_errors_combine(const cb_ctx_t *ctx, int64_t mine) {
    int64_t all[256], *v = all;
    if (ctx->nranks > 256) v = (int64_t *)malloc(sizeof(int64_t) * (size_t)ctx->nranks);
    if (!v) cb_die(ctx, "out of memory");
    cb_allgather(ctx, &mine, v, sizeof mine);
    int64_t sum = -1;
    for (int r = 0; r < ctx->nranks; r++) {
        if (v[r] < 0) continue;
        sum = (sum < 0 ? 0 : sum) + v[r];
    }
    if (v != all) free(v);
    return sum;
}

double cb_from_rank(const cb_ctx_t *ctx, int root, double mine) {
    double all[256], *v = all;
    if (ctx->nranks > 256) v = (double *)malloc(sizeof(double) * (size_t)ctx->nranks);
    if (!v) cb_die(ctx, "out of memory");
    cb_allgather(ctx, &mine, v, sizeof mine);
    double r = v[root];
    if (v != all) free(v);
    return r;
}
