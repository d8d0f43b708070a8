/* cchan-bench: output, statistics, sweeps and collectives shared by the GPU and host benchmarks. */
#include "bench_common.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
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

/* ---------------------------------------------------------------- buffers and channels */

void cb_row_init(cb_row_t *row, const char *test, const char *op, const char *base_op,
                 const char *units, uint64_t bytes, int blocks, int threads) {
    memset(row, 0, sizeof *row);
    snprintf(row->test, sizeof row->test, "%s", test);
    snprintf(row->op, sizeof row->op, "%s", op);
    snprintf(row->base_op, sizeof row->base_op, "%s", base_op);
    snprintf(row->units, sizeof row->units, "%s", units);
    row->src = 0;
    row->dst = 1;
    row->bytes = bytes;
    row->blocks = blocks;
    row->threads = threads;
    row->errors = -1;
}

uint64_t cb_data_bytes(const cb_opts_t *o, uint64_t min, uint64_t max_default,
                       uint64_t matrix_default) {
    const uint64_t mib2 = 2ull << 20, top = o->max_bytes ? o->max_bytes : max_default;
    const uint64_t mb = o->matrix_bytes ? o->matrix_bytes : matrix_default;
    uint64_t need = min;
    if ((o->tests & (CB_MEM_BW | CB_PORT_BW)) && top > need) need = top;
    if ((o->tests & CB_MATRIX) && mb > need) need = mb;
    return (need + mib2 - 1) / mib2 * mib2;
}

/* The pair partner of ranks 0 and 1; -1 on the others. */
static int cb_pair_peer(const cb_ctx_t *ctx) { return ctx->rank < 2 ? 1 - ctx->rank : -1; }

void cb_chans_setup(cb_ctx_t *ctx, cb_chans_t *c, uint64_t data_bytes, uint64_t pkt_bytes) {
    cchan_comm_t *comm = ctx->comm;
    const int n = ctx->nranks, peer = cb_pair_peer(ctx);
    c->data_bytes = data_bytes;
    c->pkt_bytes = pkt_bytes;
    cb_check(ctx, cchan_mem_alloc(comm, data_bytes, 0, &c->data), "cchan_mem_alloc(data)");
    cb_check(ctx, cchan_mem_alloc(comm, pkt_bytes, 0, &c->pkt), "cchan_mem_alloc(pkt)");
    c->peer_data = (cchan_mem_t **)calloc((size_t)n, sizeof(cchan_mem_t *));
    c->peer_pkt = (cchan_mem_t **)calloc((size_t)n, sizeof(cchan_mem_t *));
    c->mch = (cchan_memory_channel_t *)calloc((size_t)n, sizeof(cchan_memory_channel_t));
    if (!c->peer_data || !c->peer_pkt || !c->mch) cb_die(ctx, "out of memory");
    cb_check(ctx, cchan_mem_exchange(comm, c->data, c->peer_data), "cchan_mem_exchange(data)");
    cb_check(ctx, cchan_mem_exchange(comm, c->pkt, c->peer_pkt), "cchan_mem_exchange(pkt)");
    cb_check(ctx, cchan_sem_set_create(comm, 2, 0, &c->msems), "cchan_sem_set_create");
    for (int r = 0; r < n; r++) {
        if (r == ctx->rank) continue;
        cb_check(ctx,
                 cchan_memory_channel_init(comm, c->msems, r, 0, c->peer_data[r], c->data, NULL,
                                           &c->mch[r]),
                 "cchan_memory_channel_init");
    }
    if (peer >= 0)
        cb_check(ctx,
                 cchan_memory_channel_init(comm, c->msems, peer, 1, c->peer_pkt[peer], c->data,
                                           c->pkt, &c->lch),
                 "cchan_memory_channel_init(ll)");
}

void cb_chans_port(cb_ctx_t *ctx, cb_chans_t *c, int nsems) {
    if (c->port_ready) return;
    const int peer = cb_pair_peer(ctx);
    cb_check(ctx, cchan_sem_set_create(ctx->comm, nsems, CCHAN_SEM_HOST_MAPPED, &c->psems),
             "cchan_sem_set_create(host-mapped)");
    cchan_proxy_config_t pcfg = CCHAN_PROXY_CONFIG_INIT;
    cb_check(ctx, cchan_proxy_create(ctx->comm, &pcfg, &c->proxy), "cchan_proxy_create");
    c->pch = (cchan_port_channel_t *)calloc((size_t)ctx->nranks, sizeof(*c->pch));
    if (!c->pch) cb_die(ctx, "out of memory");
    for (int r = 0; r < ctx->nranks; r++) {
        if (r == ctx->rank) continue;
        cb_check(ctx,
                 cchan_port_channel_create(c->proxy, CCHAN_TRANSPORT_AUTO, c->psems, r, 0,
                                           c->peer_data[r], c->data, &c->pch[r]),
                 "cchan_port_channel_create");
    }
    if (peer >= 0)
        cb_check(ctx,
                 cchan_port_channel_create(c->proxy, CCHAN_TRANSPORT_AUTO, c->psems, peer, 1,
                                           c->peer_data[peer], c->data, &c->rate_ch),
                 "cchan_port_channel_create(rate)");
    cb_check(ctx, cchan_proxy_start(c->proxy), "cchan_proxy_start");
    cb_barrier(ctx);
    c->port_ready = 1;
}

void cb_chans_teardown(cb_ctx_t *ctx, cb_chans_t *c) {
    if (c->port_ready) {
        cb_check(ctx, cchan_proxy_stop(c->proxy, 10000), "cchan_proxy_stop");
        cb_check(ctx, cchan_proxy_destroy(c->proxy), "cchan_proxy_destroy");
        cb_check(ctx, cchan_sem_set_destroy(c->psems), "cchan_sem_set_destroy");
    }
    cb_check(ctx, cchan_sem_set_destroy(c->msems), "cchan_sem_set_destroy");
    for (int r = 0; r < ctx->nranks; r++) {
        if (r == ctx->rank) continue;
        if (c->peer_data[r]) cb_check(ctx, cchan_mem_destroy(c->peer_data[r]), "cchan_mem_destroy");
        if (c->peer_pkt[r]) cb_check(ctx, cchan_mem_destroy(c->peer_pkt[r]), "cchan_mem_destroy");
    }
    cb_barrier(ctx); /* no peer maps our memory any more */
    cb_check(ctx, cchan_mem_destroy(c->data), "cchan_mem_destroy");
    cb_check(ctx, cchan_mem_destroy(c->pkt), "cchan_mem_destroy");
    free(c->peer_data);
    free(c->peer_pkt);
    free(c->mch);
    free(c->pch);
}

int cb_mps_client(void) {
    const char *o = getenv("CCHAN_BENCH_MPS");
    if (o && *o) return atoi(o) != 0;
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    char path[512];
    snprintf(path, sizeof path, "%s/control", dir && *dir ? dir : "/tmp/nvidia-mps");
    struct stat st;
    /* A socket for the daemon that nvidia-cuda-mps-control -d starts, a FIFO for older ones. */
    return stat(path, &st) == 0 && (S_ISSOCK(st.st_mode) || S_ISFIFO(st.st_mode));
}
