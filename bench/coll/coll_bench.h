/* cchan-coll-bench: collectives of cchan_coll against NCCL measured in the same run, and the fused
 * AllReduce + residual + RMSNorm kernel against NCCL AllReduce plus a separate kernel.
 *
 * The driver (coll_run.c) is platform-neutral C: buffers, fills, copies and timing go through a
 * small device table (ccb_dev_t) implemented for CUDA (coll_dev_cuda.cu) and for the host platform
 * (coll_dev_host.c). NCCL (loaded at run time, bench/nccl_dyn.h) runs only on CUDA.
 */
#ifndef CCHAN_COLL_BENCH_H
#define CCHAN_COLL_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "cchan/cchan.h"
#include "cchan_coll.h"
#ifdef CCB_HAVE_EXEC
#include "cchan_exec.h"
#endif
#include "cchan_fused.h"
#include "nccl_dyn.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    CCB_OP_ALLREDUCE = 1u << 0,
    CCB_OP_ALLGATHER = 1u << 1,
    CCB_OP_REDUCESCATTER = 1u << 2,
    CCB_OP_FUSED = 1u << 3
};
#define CCB_MAX_LIST 16

typedef struct ccb_opts {
    uint64_t min_bytes, max_bytes; /* -b -e */
    double factor;                 /* -f (nccl-tests: multiplication factor) */
    uint64_t step;                 /* -i (nccl-tests: increment), 0: use factor */
    int iters, warmup;             /* -n -w */
    int check;                     /* -c */
    int graph_launches;            /* -G: capture -n iterations in a graph, launch it G times */
    uint64_t graph_max;            /* --graph-max: largest size timed in graph mode */
    int reps;                      /* -r: timed repetitions without graphs (median) */
    unsigned ops;                  /* -o */
    int dtypes[3], ndtypes;        /* -d */
    int algo;                      /* -a: cchan_coll_algo_t, or -1 for all */
    int nccl;                      /* 0: --no-nccl */
    uint32_t tokens[CCB_MAX_LIST], hiddens[CCB_MAX_LIST];
    int ntokens, nhiddens;
    const char *json;       /* -J */
    const char *tuning_out; /* --tuning-out */
    int force_host;
    uint64_t alloc_pad; /* --alloc-pad: bytes allocated past the 2 MiB-rounded buffers */
    struct {            /* -T NAME=VALUE: cchan_coll_set_param before the runs */
        char name[32];
        int64_t value;
    } params[CCB_MAX_LIST];
    int nparams;
    char sweep_name[32]; /* --sweep NAME=V1,V2,...: every cchan row once per value */
    int64_t sweep[CCB_MAX_LIST];
    int nsweep;
    const char *plans[CCB_MAX_LIST]; /* --plan FILE (repeatable): against the native kernel (-a)
                                        and NCCL, every plan in the same run */
    int nplans;
} ccb_opts_t;

/* One cchan figure: median time per operation and what the check found. */
typedef struct ccb_meas {
    double us;     /* < 0: not measured (unsupported, failed) */
    int64_t wrong; /* -1: not checked */
} ccb_meas_t;

typedef struct ccb_row {
    char op[16], algo[48], dtype[12];
    uint64_t bytes, count;
    int graph;           /* timed in graph mode */
    ccb_meas_t oop, ip;  /* cchan out of place, in place */
    double nccl_us[2];   /* NCCL default, symmetric registration: min over placements; < 0 n/a */
    double nccl_best_us; /* < 0 when NCCL did not run */
    double algbw, busbw; /* of the faster cchan placement */
    double speedup;      /* nccl_best_us / faster cchan time; 0 when n/a */
    /* fused rows */
    uint32_t tokens, hidden;
    double fused_us[4];      /* auto, ll, hb, ll with rows spread over blocks */
    double unfused_cchan_us; /* cchan allreduce + residual/RMSNorm kernel */
    int64_t oob;             /* out-of-bounds bytes written (guard check); -1 n/a */
} ccb_row_t;

typedef struct ccb_ctx {
    ccb_opts_t opt;
    cchan_comm_t *comm;
    cchan_bootstrap_t *bs;
    int rank, nranks;
    cchan_platform_t platform;
    char device[128];
    char command[512];
    uint32_t seed;
    cb_nccl_t nccl;
    cb_nccl_comm_t nccl_comm;
    int have_nccl, have_nccl_sym;
    char nccl_why[512]; /* why NCCL rows are missing */
    ccb_row_t *rows;
    size_t nrows, cap;
    int failed;
    int64_t oob_total, wrong_total;
    double t0;
} ccb_ctx_t;

/* ---- device table: one per platform */
typedef int (*ccb_launch_fn)(void *arg, void *stream);
typedef struct ccb_dev {
    const char *name;
    int (*init)(ccb_ctx_t *ctx); /* selects the device, makes the stream; fills ctx->device */
    void (*fini)(ccb_ctx_t *ctx);
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    int (*h2d)(void *dst, const void *src, size_t bytes);
    int (*d2h)(void *dst, const void *src, size_t bytes); /* waits for the stream first */
    int (*fill)(void *p, uint64_t count, int dtype, uint32_t seed, int rank, uint64_t base);
    int (*poison)(void *p, size_t bytes);
    int (*sync)(void);
    void *stream;
    /* Median microseconds per launch of fn over the repetitions (this rank); < 0 on failure.
     * graph: capture `iters` launches into a graph and time `reps` graph launches. */
    double (*time)(ccb_ctx_t *ctx, ccb_launch_fn fn, void *arg, int graph);
} ccb_dev_t;

extern ccb_dev_t ccb_dev_host;
#ifdef CCB_CUDA
extern ccb_dev_t ccb_dev_cuda;
#endif

/* Element value of the test data: a small integer, so sums over up to 8 ranks are exact in f32,
 * f16 and bf16 and the check can demand bit equality. */
#if defined(__CUDACC__)
#define CCB_HD __host__ __device__
#else
#define CCB_HD
#endif
static inline CCB_HD int ccb_value(uint32_t seed, int rank, uint64_t i) {
    uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 32) ^
                 ((uint64_t)rank * 0xBF58476D1CE4E5B9ull);
    h ^= h >> 29;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 32;
    return (int)(h % 17u) - 8;
}

/* Element bits of integer v in dtype (0 f32, 1 f16, 2 bf16). */
static inline CCB_HD uint32_t ccb_bits(int v, int dtype) {
    float f = (float)v;
    if (dtype == CCHAN_COLL_F32) return cchan_f32_bits(f);
    if (dtype == CCHAN_COLL_F16) return cchan_f32_to_f16(f).bits;
    return cchan_f32_to_bf16(f).bits;
}

/* ---- driver */
int ccb_run(ccb_ctx_t *ctx, ccb_dev_t *dev);
void ccb_printf(const ccb_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ccb_die(const ccb_ctx_t *ctx, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));
void ccb_check_status(const ccb_ctx_t *ctx, int st, const char *what);
double ccb_now(void);
double ccb_median(double *v, int n);
/* Largest value over ranks. */
double ccb_max_over_ranks(const ccb_ctx_t *ctx, double mine);
int64_t ccb_sum_over_ranks(const ccb_ctx_t *ctx, int64_t mine);
int ccb_json_write(const ccb_ctx_t *ctx, const char *path);
/* The rows of named native algorithms as a cchan_coll tuning table (docs/collectives.md). */
int ccb_tuning_write(const ccb_ctx_t *ctx, const char *path);

/* ---- one operation (coll_run.c), shared with --plan (coll_plan.c) */
#define CCB_GUARD 4096u /* bytes after each output that must stay untouched */

typedef struct op_arg {
    ccb_ctx_t *ctx;
    cchan_coll_t *coll;
    unsigned op;
    int dtype, algo;
    const void *send;
    void *recv;
    size_t count; /* allreduce: elements; allgather: per-rank send; reducescatter: per-rank recv */
} op_arg_t;

const char *ccb_dtype_name(int dt);
int ccb_launch_cchan(void *p, void *stream);
int ccb_launch_nccl(void *p, void *stream);
void ccb_in_place_ptrs(unsigned op, void *buf, size_t count, size_t es, int rank, const void **send,
                       void **recv);
int64_t ccb_check_op(ccb_ctx_t *ctx, ccb_dev_t *dev, op_arg_t *a, int in_place, void *sendbuf,
                     void *recvbuf, int64_t *oob, ccb_launch_fn launch);
double ccb_time_op(ccb_ctx_t *ctx, ccb_dev_t *dev, void *a, ccb_launch_fn launch, int graph);
int ccb_sweep(const ccb_opts_t *o, uint64_t *out, int max);
void ccb_bench_plan(ccb_ctx_t *ctx, ccb_dev_t *dev, cchan_coll_t *coll, const char *file,
                    void *sendbuf, void *recvbuf, size_t bufbytes);

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_COLL_BENCH_H */
