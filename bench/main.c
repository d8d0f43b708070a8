/* cchan-bench: point-to-point benchmarks of cchan's channels against same-run baselines.
 *
 *   cchan-run -n 2 build/bench/cchan-bench [all|mem-bw|mem-lat|port-bw|port-lat|matrix|switch-bw
 * ...] [opts]
 *
 * One process per GPU (or per host-backend rank); rank 0 prints and writes the JSON. See
 * bench/README.md for what each subcommand measures and how.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: cchan-bench [SUBCOMMAND...] [OPTIONS]   (start one process per GPU with "
        "cchan-run)\n"
        "subcommands (default: all):\n"
        "  mem-bw    memory-channel put/get bandwidth over sizes and grids vs a plain SM copy "
        "kernel\n"
        "  mem-lat   signal->wait latency vs a raw flag ping-pong; LL8/LL16 latency and bandwidth\n"
        "            vs raw LL kernels\n"
        "  port-bw   port-channel put bandwidth vs cudaMemcpyPeerAsync\n"
        "  port-lat  port-channel put_signal/signal->wait latency vs a raw CPU relay, with a\n"
        "            breakdown; FIFO request rate vs a raw host-mapped ring\n"
        "  matrix    put bandwidth of every ordered rank pair (memory channel, SM copy, port\n"
        "            channel, copy engine) with a SUM line\n"
        "  switch-bw switch-channel reduce/broadcast bandwidth vs plain SM kernels, and an\n"
        "            AllReduce built from them vs NCCL (GPU, when libnccl.so.2 loads)\n"
        "  all       everything above, then OK or FAILED\n"
        "options:\n"
        "  -b, --minbytes SIZE      smallest size of the size sweeps (suffixes K, M, G)\n"
        "  -e, --maxbytes SIZE      largest size of the size sweeps\n"
        "  -f, --stepfactor F       multiplicative step of the sweeps\n"
        "  -n, --iters N            timed iterations (bandwidth: per repetition; latency: per "
        "kernel)\n"
        "  -w, --warmup_iters N     warmup iterations before the check and the timing\n"
        "  -r, --reps N             bandwidth repetitions (median, min, max are over these)\n"
        "  -g, --grids LIST         blocks per grid (GPU; default 16,32,66,132) or CPU threads "
        "(host)\n"
        "  -t, --threads N          threads per block (default 512)\n"
        "  -c, --chunk SIZE|0       port-channel put chunk (default 4M; 0: one put per message)\n"
        "  -m, --matrix-bytes SIZE  size of the matrix transfers (default 256M GPU, 16M host)\n"
        "  -J, --json FILE          write every row as JSON\n"
        "      --host               use the host backend (CPU threads) even where GPUs exist\n"
        "      --version            print the version and the backends this binary has, and exit\n"
        "  -h, --help\n");
}

static unsigned parse_test(const char *s) {
    if (!strcmp(s, "all")) return CB_ALL;
    if (!strcmp(s, "mem-bw")) return CB_MEM_BW;
    if (!strcmp(s, "mem-lat")) return CB_MEM_LAT;
    if (!strcmp(s, "port-bw")) return CB_PORT_BW;
    if (!strcmp(s, "port-lat")) return CB_PORT_LAT;
    if (!strcmp(s, "matrix")) return CB_MATRIX;
    if (!strcmp(s, "switch-bw")) return CB_SWITCH_BW;
    return 0;
}

static int parse_int(const char *s, int lo, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > 1000000000L) return -1;
    *out = (int)v;
    return 0;
}

static int parse_grids(const char *s, cb_opts_t *o) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    o->ngrids = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (o->ngrids == CB_MAX_GRIDS || parse_int(tok, 1, &o->grids[o->ngrids]) != 0) return -1;
        o->ngrids++;
    }
    return o->ngrids ? 0 : -1;
}

/* The command line into ctx->opt (and *force_host); -1 to go on, else main's exit status. */
static int parse_args(int argc, char **argv, cb_ctx_t *ctx, int *force_host) {
    cb_opts_t *o = &ctx->opt;
    static const struct option longopts[] = {{"minbytes", required_argument, 0, 'b'},
                                             {"maxbytes", required_argument, 0, 'e'},
                                             {"stepfactor", required_argument, 0, 'f'},
                                             {"iters", required_argument, 0, 'n'},
                                             {"warmup_iters", required_argument, 0, 'w'},
                                             {"reps", required_argument, 0, 'r'},
                                             {"grids", required_argument, 0, 'g'},
                                             {"threads", required_argument, 0, 't'},
                                             {"chunk", required_argument, 0, 'c'},
                                             {"matrix-bytes", required_argument, 0, 'm'},
                                             {"json", required_argument, 0, 'J'},
                                             {"host", no_argument, 0, 'H'},
                                             {"help", no_argument, 0, 'h'},
                                             {"version", no_argument, 0, 'V'},
                                             {0, 0, 0, 0}};
    int c, bad = 0;
    while ((c = getopt_long(argc, argv, "b:e:f:n:w:r:g:t:c:m:J:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b': bad |= cb_parse_size(optarg, &o->min_bytes) || o->min_bytes == 0; break;
        case 'e': bad |= cb_parse_size(optarg, &o->max_bytes) || o->max_bytes == 0; break;
        case 'f':
            o->factor = atof(optarg);
            bad |= !(o->factor > 1.0);
            break;
        case 'n': bad |= parse_int(optarg, 1, &o->iters); break;
        case 'w': bad |= parse_int(optarg, 0, &o->warmup); break;
        case 'r': bad |= parse_int(optarg, 1, &o->reps); break;
        case 'g': bad |= parse_grids(optarg, o); break;
        case 't': bad |= parse_int(optarg, 1, &o->threads) || o->threads > 1024; break;
        case 'c':
            if (!strcmp(optarg, "0") || !strcmp(optarg, "none"))
                o->chunk_none = 1;
            else
                bad |= cb_parse_size(optarg, &o->chunk) || o->chunk < 16;
            break;
        case 'm': bad |= cb_parse_size(optarg, &o->matrix_bytes) || o->matrix_bytes == 0; break;
        case 'J': o->json = optarg; break;
        case 'H': *force_host = 1; break;
        case 'h': usage(stdout); return 0;
        case 'V':
#ifdef CCHAN_BENCH_CUDA
            printf("cchan-bench: cchan %s; backends: cuda host\n", cchan_version());
#else
            printf("cchan-bench: cchan %s; backends: host\n", cchan_version());
#endif
            return 0;
        default: bad = 1; break;
        }
        if (bad) {
            fprintf(stderr, "cchan-bench: bad option -%c %s\n", c, optarg ? optarg : "");
            usage(stderr);
            return 2;
        }
    }
    for (int i = optind; i < argc; i++) {
        unsigned t = parse_test(argv[i]);
        if (!t) {
            fprintf(stderr, "cchan-bench: unknown subcommand '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
        o->tests |= t;
    }
    if (!o->tests) o->tests = CB_ALL;
    if (o->min_bytes && o->max_bytes && o->min_bytes > o->max_bytes) {
        fprintf(stderr, "cchan-bench: -b is larger than -e\n");
        return 2;
    }
    cb_join_args(ctx->command, sizeof ctx->command, argc, argv, "cchan-bench");
    return -1;
}

int main(int argc, char **argv) {
    cb_ctx_t ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.t0 = cb_now();
    ctx.rank = -1;
    cb_opts_t *o = &ctx.opt;
    o->iters = o->warmup = o->reps = -1;
    int force_host = 0;
    int rc = parse_args(argc, argv, &ctx, &force_host);
    if (rc >= 0) return rc;

    cchan_bootstrap_t *bs = NULL;
    int st = cchan_bootstrap_create_from_env(&bs);
    if (st < 0) {
        fprintf(
            stderr,
            "cchan-bench: no bootstrap (%s: %s); start it with cchan-run -n <ranks> (or torchrun, "
            "mpirun, srun)\n",
            cchan_strerror(st), cchan_last_error());
        printf("FAILED\n");
        return 1;
    }
    ctx.rank = cchan_bootstrap_rank(bs);
    ctx.nranks = cchan_bootstrap_size(bs);
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    if (force_host) cfg.platform = CCHAN_PLATFORM_HOST;
    cb_check(&ctx, cchan_comm_create(bs, &cfg, &ctx.comm), "cchan_comm_create");
    ctx.bs = cchan_comm_bootstrap(ctx.comm);
    /* A lost peer should end the run with a diagnostic, not hang it: unless the user chose a
     * deadline, device waits give up after a minute (far beyond any wait the benchmarks make). */
    if (cchan_env_timeout_ms() == 0)
        cb_check(&ctx, cchan_comm_set_timeout_ms(ctx.comm, 60000), "cchan_comm_set_timeout_ms");

    uint32_t seed = (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16);
    ctx.seed = (uint32_t)cb_from_rank(&ctx, 0, (double)seed);

    cchan_platform_t platform = cchan_comm_platform(ctx.comm);
    ctx.host_backend = platform == CCHAN_PLATFORM_HOST;
    cb_printf(&ctx, "# cchan-bench, cchan %s, %d ranks\n# command: %s\n", cchan_version(),
              ctx.nranks, ctx.command);
    if (ctx.nranks < 2) {
        cb_printf(&ctx, "# cchan-bench needs at least two ranks: cchan-run -n 2 %s ...\n", argv[0]);
        cchan_comm_destroy(ctx.comm);
        printf("FAILED\n");
        return 1;
    }

    if (ctx.host_backend) {
        rc = cb_run_host(&ctx);
    } else {
#ifdef CCHAN_BENCH_CUDA
        rc = platform == CCHAN_PLATFORM_CUDA ? cb_run_gpu(&ctx) : -1;
#else
        rc = -1;
#endif
        if (rc < 0)
            cb_fail(&ctx, "this cchan-bench was built without support for platform %d",
                    (int)platform);
    }
    if (rc < 0) ctx.failed = 1;

    cb_barrier(&ctx);
    if (o->json && cb_json_write(&ctx, o->json) == 0) cb_printf(&ctx, "# wrote %s\n", o->json);
    cb_printf(&ctx, "# %.1f s\n", cb_now() - ctx.t0);
    int failed = ctx.failed;
    cchan_comm_destroy(ctx.comm);
    if (ctx.rank == 0) printf("%s\n", failed ? "FAILED" : "OK");
    free(ctx.rows);
    return failed ? 1 : 0;
}
