/* cchan-coll-bench: cchan collectives against NCCL in the same run, nccl-tests' flags and table.
 *
 *   cchan-run -n 2 build/bench/coll/cchan-coll-bench -o allreduce -b 1K -e 1G -f 2 -G 20
 *   cchan-run -n 2 build/bench/coll/cchan-coll-bench -o fused -G 20
 *
 * One process per GPU (or host-platform rank); rank 0 prints and writes the JSON. See
 * docs/coll_bench.md.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "coll_bench.h"

/* ---------------------------------------------------------------- shared helpers */

double ccb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ccb_printf(const ccb_ctx_t *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cb_rank0_vprintf(ctx->rank, fmt, ap);
    va_end(ap);
}

void ccb_die(const ccb_ctx_t *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cb_vdie("cchan-coll-bench", ctx ? ctx->rank : -1, fmt, ap);
}

void ccb_check_status(const ccb_ctx_t *ctx, int st, const char *what) {
    if (st < 0) ccb_die(ctx, "%s: %s: %s", what, cchan_strerror(st), cchan_last_error());
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ccb_median(double *v, int n) {
    if (n <= 0) return -1;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double ccb_max_over_ranks(const ccb_ctx_t *ctx, double mine) {
    double *all = (double *)malloc(sizeof(double) * (size_t)ctx->nranks);
    if (!all) ccb_die(ctx, "out of memory");
    ccb_check_status(ctx, cchan_bootstrap_allgather(ctx->bs, &mine, all, sizeof mine), "allgather");
    double m = all[0];
    for (int r = 1; r < ctx->nranks; r++)
        if (all[r] > m || isnan(all[r])) m = all[r];
    free(all);
    return m;
}

int64_t ccb_sum_over_ranks(const ccb_ctx_t *ctx, int64_t mine) {
    int64_t *all = (int64_t *)malloc(sizeof(int64_t) * (size_t)ctx->nranks), s = 0;
    if (!all) ccb_die(ctx, "out of memory");
    ccb_check_status(ctx, cchan_bootstrap_allgather(ctx->bs, &mine, all, sizeof mine), "allgather");
    for (int r = 0; r < ctx->nranks; r++) s += all[r];
    free(all);
    return s;
}

static void json_us(FILE *f, const char *key, double v) {
    fprintf(f, ", \"%s\": ", key);
    if (v > 0 && isfinite(v))
        fprintf(f, "%.4g", v);
    else
        fprintf(f, "null");
}

int ccb_json_write(const ccb_ctx_t *ctx, const char *path) {
    if (ctx->rank != 0 || !path) return 0;
#ifdef CCHAN_BENCH_BUILD_COMMIT
    const char *build_commit = CCHAN_BENCH_BUILD_COMMIT;
#else
    const char *build_commit = NULL;
#endif
    FILE *f = cb_json_open(path, "cchan-coll-bench", ctx->command, build_commit);
    if (!f) return -1;
    fprintf(f, ",\n  \"device\": ");
    cb_json_str(f, ctx->device);
    fprintf(f, ",\n  \"nccl\": ");
    cb_json_str(f, ctx->nccl_why);
    fprintf(f, ",\n  \"nranks\": %d,\n  \"rows\": [", ctx->nranks);
    for (size_t i = 0; i < ctx->nrows; i++) {
        const ccb_row_t *r = &ctx->rows[i];
        fprintf(f, "%s\n    {\"op\": ", i ? "," : "");
        cb_json_str(f, r->op);
        fprintf(f, ", \"algo\": ");
        cb_json_str(f, r->algo);
        fprintf(f, ", \"dtype\": ");
        cb_json_str(f, r->dtype);
        fprintf(f, ", \"size\": %llu, \"count\": %llu, \"graph\": %d", (unsigned long long)r->bytes,
                (unsigned long long)r->count, r->graph);
        if (!strcmp(r->op, "fused")) {
            fprintf(f, ", \"tokens\": %u, \"hidden\": %u", r->tokens, r->hidden);
            json_us(f, "fused_us", r->fused_us[0]);
            json_us(f, "fused_ll_us", r->fused_us[1]);
            json_us(f, "fused_hb_us", r->fused_us[2]);
            json_us(f, "fused_ll_spread_us", r->fused_us[3]);
            json_us(f, "cchan_unfused_us", r->unfused_cchan_us);
        } else {
            json_us(f, "oop_us", r->oop.us);
            json_us(f, "ip_us", r->ip.us);
            fprintf(f, ", \"ip_wrong\": %lld, \"oob\": %lld", (long long)r->ip.wrong,
                    (long long)r->oob);
            fprintf(f, ", \"algbw\": %.4g, \"busbw\": %.4g", r->algbw, r->busbw);
        }
        fprintf(f, ", \"wrong\": %lld", (long long)r->oop.wrong);
        json_us(f, "nccl_us", r->nccl_us[0]);
        json_us(f, "nccl_sym_us", r->nccl_us[1]);
        json_us(f, "nccl_best_us", r->nccl_best_us);
        fprintf(f, ", \"speedup\": %.4g}", r->speedup);
    }
    fprintf(f, "\n  ],\n  \"result\": \"%s\"\n}\n", ctx->failed ? "FAILED" : "OK");
    if (fclose(f) != 0) return -1;
    return 0;
}

/* Each (op, dtype, placement, algorithm) series of measured sizes s1 < s2 < ... becomes rows
 * covering [0, s1], [s1 + 1, s2], ..., the last one up to inf: the selector then compares the
 * algorithms measured at the nearest size at or above the call's. Auto rows and sweep variants
 * name no single algorithm and are left out. */
static const char *tune_dtype(const char *d) {
    return !strcmp(d, "float") ? "f32" : !strcmp(d, "half") ? "f16" : "bf16";
}

int ccb_tuning_write(const ccb_ctx_t *ctx, const char *path) {
    if (ctx->rank != 0 || !path) return 0;
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "cchan-coll-tuning 1\n# written by cchan-coll-bench on %s, %d ranks: %s\n"
            "# collective ranks dtype inplace min_bytes max_bytes algorithm us\n",
            ctx->device, ctx->nranks, ctx->command);
    for (size_t i = 0; i < ctx->nrows; i++) {
        const ccb_row_t *r = &ctx->rows[i];
        if (!strcmp(r->op, "fused") || strchr(r->algo, ' ') || strchr(r->algo, ':')) continue;
        for (int ip = 0; ip < 2; ip++) {
            double us = ip ? r->ip.us : r->oop.us;
            if (!(us > 0)) continue;
            /* the series' previous and next measured sizes */
            uint64_t prev = 0, next = 0;
            int has_prev = 0, has_next = 0;
            for (size_t j = 0; j < ctx->nrows; j++) {
                const ccb_row_t *q = &ctx->rows[j];
                if (strcmp(q->op, r->op) || strcmp(q->algo, r->algo) || strcmp(q->dtype, r->dtype))
                    continue;
                if (!((ip ? q->ip.us : q->oop.us) > 0)) continue;
                if (q->bytes < r->bytes && (!has_prev || q->bytes > prev))
                    prev = q->bytes, has_prev = 1;
                if (q->bytes > r->bytes && (!has_next || q->bytes < next))
                    next = q->bytes, has_next = 1;
            }
            char hi[32] = "inf";
            if (has_next) snprintf(hi, sizeof hi, "%llu", (unsigned long long)r->bytes);
            fprintf(f, "%s %d %s %d %llu %s %s %.3f\n", r->op, ctx->nranks, tune_dtype(r->dtype),
                    ip, has_prev ? (unsigned long long)prev + 1 : 0ull, hi, r->algo, us);
        }
    }
    return fclose(f) != 0 ? -1 : 0;
}

/* ---------------------------------------------------------------- options */

static void usage(FILE *f) {
    fprintf(f,
            "usage: cchan-coll-bench [OPTIONS]   (one process per GPU: cchan-run -n <GPUs> ...)\n"
            "  -o, --op OP              allreduce | allgather | reducescatter | fused | all "
            "(default allreduce; repeatable)\n"
            "  -d, --datatype T         float | half | bfloat16 | all (default float)\n"
            "  -a, --algo A             auto | ll | hb | switch | ce | all (default auto)\n"
            "  -b, --minbytes SIZE      smallest size (default 1K; suffixes K, M, G)\n"
            "  -e, --maxbytes SIZE      largest size (default 64M)\n"
            "  -f, --stepfactor F       multiply the size by F each step (default 2)\n"
            "  -i, --stepbytes SIZE     add SIZE each step instead\n"
            "  -n, --iters N            iterations per timed run (default 20)\n"
            "  -w, --warmup_iters N     warm-up iterations (default 5)\n"
            "  -r, --reps N             timed repetitions without graphs, median (default 5)\n"
            "  -c, --check 0|1          check results against a host reference (default 1)\n"
            "  -G, --cudagraph N        capture -n iterations in a CUDA graph and time N launches "
            "of it\n"
            "                           (median), for sizes up to --graph-max (default 4M)\n"
            "      --graph-max SIZE     largest size timed with graphs\n"
            "      --tokens LIST        fused: token counts (default 1,8,32,128,256)\n"
            "      --hidden LIST        fused: hidden sizes (default 4096,8192)\n"
            "  -T, --param NAME=VALUE   cchan_coll_set_param (repeatable; sizes take K, M, G)\n"
            "      --sweep NAME=V1,V2,..  every cchan row once per value of that parameter\n"
            "      --no-nccl            cchan rows only\n"
            "      --alloc-pad SIZE     buffers SIZE bytes past a whole number of 2 MiB (4K: "
            "cudaMalloc\n"
            "                           maps them with small pages; see docs/coll_bench.md)\n"
            "      --host               the host platform (CPU threads) even where GPUs exist\n"
            "      --plan FILE          an execution plan (cchan_exec) against the native "
            "kernel of -a and\n"
            "                           NCCL, size by size (the plan's collective; -o ignored); "
            "repeatable\n"
            "  -J, --json FILE          write every row as JSON\n"
            "      --tuning-out FILE    write the named algorithms' rows as a cchan_coll tuning "
            "table\n"
            "                           (CCHAN_COLL_TUNING; with -a all)\n"
            "  -h, --help\n"
            "NCCL is loaded at run time (CCHAN_NCCL_LIB, else libnccl.so.2); NCCL_NVLS_ENABLE is "
            "set to 0 and any other value is refused.\n");
}

static int parse_int(const char *s, int lo, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > 100000000L) return -1;
    *out = (int)v;
    return 0;
}

static int parse_list(const char *s, uint32_t *out, int *n) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    *n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int v;
        if (*n == CCB_MAX_LIST || parse_int(t, 1, &v)) return -1;
        out[(*n)++] = (uint32_t)v;
    }
    return *n ? 0 : -1;
}

/* NAME=VALUE[,VALUE...] into name (< 32 chars) and up to max values (sizes with K, M, G). */
static int parse_param(const char *s, char *name, int64_t *vals, int max, int *n) {
    const char *eq = strchr(s, '=');
    if (!eq || eq == s || eq - s >= 32) return -1;
    memcpy(name, s, (size_t)(eq - s));
    name[eq - s] = '\0';
    char buf[512];
    snprintf(buf, sizeof buf, "%s", eq + 1);
    *n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        uint64_t v;
        if (*n == max || cb_parse_size(t, &v) || v > (uint64_t)INT64_MAX) return -1;
        vals[(*n)++] = (int64_t)v;
    }
    return *n ? 0 : -1;
}

static int parse_algo(const char *s) {
    if (!strcmp(s, "all")) return -1;
    if (!strcmp(s, "auto")) return CCHAN_COLL_AUTO;
    if (!strcmp(s, "ll")) return CCHAN_COLL_LL_ALLPAIRS;
    if (!strcmp(s, "hb")) return CCHAN_COLL_HB_ALLPAIRS;
    if (!strcmp(s, "switch")) return CCHAN_COLL_SWITCH;
    if (!strcmp(s, "ce")) return CCHAN_COLL_CE_ALLPAIRS;
    for (int a = 0; a < CCHAN_COLL_ALGO_COUNT; a++)
        if (!strcmp(s, cchan_coll_algo_name((cchan_coll_algo_t)a))) return a;
    return -2;
}

/* -o: one op more (or all). */
static int parse_op(const char *s, ccb_opts_t *o) {
    if (!strcmp(s, "allreduce"))
        o->ops |= CCB_OP_ALLREDUCE;
    else if (!strcmp(s, "allgather"))
        o->ops |= CCB_OP_ALLGATHER;
    else if (!strcmp(s, "reducescatter"))
        o->ops |= CCB_OP_REDUCESCATTER;
    else if (!strcmp(s, "fused"))
        o->ops |= CCB_OP_FUSED;
    else if (!strcmp(s, "all"))
        o->ops |= CCB_OP_ALLREDUCE | CCB_OP_ALLGATHER | CCB_OP_REDUCESCATTER | CCB_OP_FUSED;
    else
        return 1;
    return 0;
}

/* -d: one dtype more (the first -d replaces the default), or all. */
static int parse_dtype(const char *s, ccb_opts_t *o, int *dtypes_set) {
    if (!*dtypes_set) o->ndtypes = 0;
    *dtypes_set = 1;
    int bad = 0;
    if (!strcmp(s, "float"))
        o->dtypes[o->ndtypes++ % 3] = CCHAN_COLL_F32;
    else if (!strcmp(s, "half"))
        o->dtypes[o->ndtypes++ % 3] = CCHAN_COLL_F16;
    else if (!strcmp(s, "bfloat16"))
        o->dtypes[o->ndtypes++ % 3] = CCHAN_COLL_BF16;
    else if (!strcmp(s, "all")) {
        o->dtypes[0] = CCHAN_COLL_F32;
        o->dtypes[1] = CCHAN_COLL_F16;
        o->dtypes[2] = CCHAN_COLL_BF16;
        o->ndtypes = 3;
    } else
        bad = 1;
    if (o->ndtypes > 3) o->ndtypes = 3;
    return bad;
}

static void set_defaults(ccb_opts_t *o) {
    o->min_bytes = 1 << 10;
    o->max_bytes = 64 << 20;
    o->factor = 2;
    o->iters = 20;
    o->warmup = 5;
    o->reps = 5;
    o->check = 1;
    o->graph_max = 4 << 20;
    o->algo = CCHAN_COLL_AUTO;
    o->nccl = 1;
    static const uint32_t dtok[] = {1, 8, 32, 128, 256}, dhid[] = {4096, 8192};
    memcpy(o->tokens, dtok, sizeof dtok);
    o->ntokens = 5;
    memcpy(o->hiddens, dhid, sizeof dhid);
    o->nhiddens = 2;
}

/* The command line into ctx->opt; -1 to go on, else main's exit status. */
static int parse_args(int argc, char **argv, ccb_ctx_t *ctx) {
    ccb_opts_t *o = &ctx->opt;
    enum { OPT_GRAPH_MAX = 256, OPT_TOKENS, OPT_HIDDEN, OPT_NO_NCCL, OPT_HOST, OPT_SWEEP, OPT_PAD };
    enum { OPT_PLAN = OPT_PAD + 1, OPT_TUNING_OUT };
    static const struct option longopts[] = {{"op", required_argument, 0, 'o'},
                                             {"datatype", required_argument, 0, 'd'},
                                             {"algo", required_argument, 0, 'a'},
                                             {"minbytes", required_argument, 0, 'b'},
                                             {"maxbytes", required_argument, 0, 'e'},
                                             {"stepfactor", required_argument, 0, 'f'},
                                             {"stepbytes", required_argument, 0, 'i'},
                                             {"iters", required_argument, 0, 'n'},
                                             {"warmup_iters", required_argument, 0, 'w'},
                                             {"reps", required_argument, 0, 'r'},
                                             {"check", required_argument, 0, 'c'},
                                             {"cudagraph", required_argument, 0, 'G'},
                                             {"graph-max", required_argument, 0, OPT_GRAPH_MAX},
                                             {"tokens", required_argument, 0, OPT_TOKENS},
                                             {"hidden", required_argument, 0, OPT_HIDDEN},
                                             {"no-nccl", no_argument, 0, OPT_NO_NCCL},
                                             {"alloc-pad", required_argument, 0, OPT_PAD},
                                             {"param", required_argument, 0, 'T'},
                                             {"sweep", required_argument, 0, OPT_SWEEP},
                                             {"host", no_argument, 0, OPT_HOST},
                                             {"plan", required_argument, 0, OPT_PLAN},
                                             {"tuning-out", required_argument, 0, OPT_TUNING_OUT},
                                             {"json", required_argument, 0, 'J'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c, bad = 0, dtypes_set = 0;
    while ((c = getopt_long(argc, argv, "o:d:a:b:e:f:i:n:w:r:c:G:J:T:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': bad = parse_op(optarg, o); break;
        case 'd': bad = parse_dtype(optarg, o, &dtypes_set); break;
        case 'a':
            o->algo = parse_algo(optarg);
            bad = o->algo == -2;
            break;
        case 'b': bad = cb_parse_size(optarg, &o->min_bytes) || !o->min_bytes; break;
        case 'e': bad = cb_parse_size(optarg, &o->max_bytes) || !o->max_bytes; break;
        case 'f':
            o->factor = atof(optarg);
            bad = !(o->factor > 1.0);
            break;
        case 'i': bad = cb_parse_size(optarg, &o->step) || !o->step; break;
        case 'n': bad = parse_int(optarg, 1, &o->iters); break;
        case 'w': bad = parse_int(optarg, 0, &o->warmup); break;
        case 'r': bad = parse_int(optarg, 1, &o->reps); break;
        case 'c': bad = parse_int(optarg, 0, &o->check); break;
        case 'G': bad = parse_int(optarg, 0, &o->graph_launches); break;
        case OPT_GRAPH_MAX: bad = cb_parse_size(optarg, &o->graph_max); break;
        case OPT_TOKENS: bad = parse_list(optarg, o->tokens, &o->ntokens); break;
        case OPT_HIDDEN: bad = parse_list(optarg, o->hiddens, &o->nhiddens); break;
        case OPT_NO_NCCL: o->nccl = 0; break;
        case OPT_PAD: bad = cb_parse_size(optarg, &o->alloc_pad) != 0; break;
        case 'T': {
            int k = 0;
            bad =
                o->nparams == CCB_MAX_LIST || parse_param(optarg, o->params[o->nparams].name,
                                                          &o->params[o->nparams].value, 1, &k) != 0;
            if (!bad) o->nparams++;
            break;
        }
        case OPT_SWEEP:
            bad = parse_param(optarg, o->sweep_name, o->sweep, CCB_MAX_LIST, &o->nsweep) != 0;
            break;
        case OPT_HOST: o->force_host = 1; break;
        case OPT_PLAN:
            if (o->nplans == CCB_MAX_LIST) {
                fprintf(stderr, "cchan-coll-bench: at most %d --plan\n", CCB_MAX_LIST);
                bad = 1;
            } else {
                o->plans[o->nplans++] = optarg;
            }
            break;
        case 'J': o->json = optarg; break;
        case OPT_TUNING_OUT: o->tuning_out = optarg; break;
        case 'h': usage(stdout); return 0;
        default: bad = 1; break;
        }
        if (bad) {
            fprintf(stderr, "cchan-coll-bench: bad option -%c %s\n", c < 256 ? c : '-',
                    optarg ? optarg : "");
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || o->min_bytes > o->max_bytes) {
        fprintf(stderr, "cchan-coll-bench: unexpected '%s'\n",
                optind < argc ? argv[optind] : "-b larger than -e");
        usage(stderr);
        return 2;
    }
    if (!o->ops) o->ops = CCB_OP_ALLREDUCE;
    if (!o->ndtypes) {
        o->dtypes[0] = CCHAN_COLL_F32;
        o->ndtypes = 1;
    }
    cb_join_args(ctx->command, sizeof ctx->command, argc, argv, "cchan-coll-bench");
    return -1;
}

int main(int argc, char **argv) {
    ccb_ctx_t ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.t0 = ccb_now();
    ctx.rank = -1;
    ccb_opts_t *o = &ctx.opt;
    set_defaults(o);
    int rc = parse_args(argc, argv, &ctx);
    if (rc >= 0) return rc;

    cchan_bootstrap_t *bs = NULL;
    int st = cchan_bootstrap_create_from_env(&bs);
    if (st < 0) {
        fprintf(stderr,
                "cchan-coll-bench: no bootstrap (%s: %s); start it with cchan-run -n <ranks>\n",
                cchan_strerror(st), cchan_last_error());
        printf("FAILED\n");
        return 1;
    }
    ctx.rank = cchan_bootstrap_rank(bs);
    ctx.nranks = cchan_bootstrap_size(bs);
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    if (o->force_host) cfg.platform = CCHAN_PLATFORM_HOST;
    ccb_check_status(&ctx, cchan_comm_create(bs, &cfg, &ctx.comm), "cchan_comm_create");
    ctx.bs = cchan_comm_bootstrap(ctx.comm);
    /* A lost peer ends the run with a diagnostic instead of a hang. */
    if (cchan_env_timeout_ms() == 0)
        ccb_check_status(&ctx, cchan_comm_set_timeout_ms(ctx.comm, 60000),
                         "cchan_comm_set_timeout_ms");
    ctx.platform = cchan_comm_platform(ctx.comm);
    uint32_t seed = (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16), *seeds;
    seeds = (uint32_t *)malloc(sizeof(uint32_t) * (size_t)ctx.nranks);
    if (!seeds) ccb_die(&ctx, "out of memory");
    ccb_check_status(&ctx, cchan_bootstrap_allgather(ctx.bs, &seed, seeds, sizeof seed),
                     "allgather");
    ctx.seed = seeds[0];
    free(seeds);

    ccb_printf(&ctx, "# cchan-coll-bench, cchan %s, %d ranks\n# command: %s\n", cchan_version(),
               ctx.nranks, ctx.command);
    ccb_dev_t *dev = NULL;
    if (ctx.platform == CCHAN_PLATFORM_HOST) dev = &ccb_dev_host;
#ifdef CCB_CUDA
    if (ctx.platform == CCHAN_PLATFORM_CUDA) dev = &ccb_dev_cuda;
#endif
    if (!dev)
        ccb_die(&ctx, "this cchan-coll-bench was built without support for platform %d",
                (int)ctx.platform);
    rc = ccb_run(&ctx, dev);
    ccb_check_status(&ctx, cchan_bootstrap_barrier(ctx.bs), "barrier");
    if (o->json && ccb_json_write(&ctx, o->json) == 0) ccb_printf(&ctx, "# wrote %s\n", o->json);
    if (o->tuning_out && ccb_tuning_write(&ctx, o->tuning_out) == 0)
        ccb_printf(&ctx, "# wrote %s\n", o->tuning_out);
    ccb_printf(&ctx, "# %.1f s\n", ccb_now() - ctx.t0);
    int failed = rc < 0 || ctx.failed;
    cchan_comm_destroy(ctx.comm);
    if (ctx.rank == 0) printf("%s\n", failed ? "FAILED" : "OK");
    free(ctx.rows);
    return failed ? 1 : 0;
}
