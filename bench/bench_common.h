/* cchan-bench: what the GPU and host-backend benchmarks share — options, statistics, the result
 * rows that rank 0 prints and writes as JSON, and collectives over the communicator's bootstrap.
 *
 * Conventions: every figure is printed next to a baseline measured in the same run
 * on the same devices with the same sizes and grid, and their ratio (cchan / baseline: above 1 is
 * better for bandwidth, below 1 is better for latency). GB/s means 10^9 bytes per second. Rank 0
 * prints.
 */
#ifndef CCHAN_BENCH_COMMON_H
#define CCHAN_BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "cchan/cchan.h"

#include "bench_util.h"

#ifdef __cplusplus
extern "C" {
#endif

enum cb_test {
    CB_MEM_BW = 1u << 0,
    CB_MEM_LAT = 1u << 1,
    CB_PORT_BW = 1u << 2,
    CB_PORT_LAT = 1u << 3,
    CB_MATRIX = 1u << 4,
    CB_SWITCH_BW = 1u << 5,
    CB_ALL = 0x3fu
};

#define CB_MAX_GRIDS 8
#define CB_MAX_SIZES 64

typedef struct cb_opts {
    unsigned tests;          /* enum cb_test bits */
    uint64_t min_bytes;      /* -b; 0: each sweep's default */
    uint64_t max_bytes;      /* -e; 0: default */
    double factor;           /* -f; 0: default */
    int iters;               /* -n; -1: default (bandwidth: per repetition; latency: per kernel) */
    int warmup;              /* -w; -1: default */
    int reps;                /* -r; -1: default */
    int grids[CB_MAX_GRIDS]; /* -g: blocks (GPU) or CPU threads (host backend); ngrids 0: default */
    int ngrids;
    int threads;    /* -t: threads per block; 0: 512 */
    uint64_t chunk; /* -c: port-channel put chunk; 0: default 4 MiB; "none": one put */
    int chunk_none;
    uint64_t matrix_bytes; /* -m; 0: default */
    const char *json;      /* -J */
} cb_opts_t;

typedef struct cb_stats {
    double median, p99, min, max, mean;
    int n; /* samples: iterations (latency) or repetitions (bandwidth) */
} cb_stats_t;

typedef struct cb_row {
    char test[16];    /* subcommand: mem-bw, mem-lat, port-bw, port-lat, matrix */
    char op[32];      /* what cchan did: put, get, signal, ll8, put-signal, fifo-signal, ... */
    char base_op[32]; /* the same-run baseline: sm-copy, raw-flag, raw-ll8, cudaMemcpyPeerAsync, ...
                       */
    char units[8];    /* GB/s, ns, Mreq/s */
    int src, dst;     /* ranks: data flows src -> dst (the initiator for ping-pongs) */
    uint64_t bytes;
    int blocks, threads; /* GPU grid, or CPU threads on the host backend (blocks = 0) */
    cb_stats_t value, base;
    int64_t errors; /* -1: nothing to check; 0: received data verified; > 0: mismatches */
} cb_row_t;

typedef struct cb_ctx {
    cb_opts_t opt;
    const char *subcommand;
    cchan_comm_t *comm;
    cchan_bootstrap_t *bs; /* owned by comm */
    int rank, nranks;
    uint32_t seed; /* rank 0's, shared */
    int host_backend;
    char device[128]; /* "NVIDIA H200 x2", "host backend (2 CPUs)" */
    char timer[160];  /* how latency was timed */
    char command[512];
    cb_row_t *rows; /* rank 0 */
    size_t nrows, cap;
    int failed; /* a check failed or a test could not run */
    double t0;  /* start, seconds */
} cb_ctx_t;

/* ---- output (rank 0 only; other ranks print nothing but fatal errors) */
void cb_printf(const cb_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints on rank 0, marks the run FAILED. */
void cb_fail(cb_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "cchan-bench: rank r: <message>" on stderr, "FAILED" on rank 0, exits 1. */
void cb_die(const cb_ctx_t *ctx, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));
/* Dies with cchan_strerror and cchan_last_error when status < 0. */
void cb_check(const cb_ctx_t *ctx, int status, const char *what);

void cb_bw_header(const cb_ctx_t *ctx, const char *title, const char *op, const char *base_op,
                  const char *units);
void cb_lat_header(const cb_ctx_t *ctx, const char *title, const char *op, const char *base_op);
/* Records the row (rank 0), prints it in the header's format, counts a failed check. */
void cb_bw_row(cb_ctx_t *ctx, const cb_row_t *row);
void cb_lat_row(cb_ctx_t *ctx, const cb_row_t *row);
/* A row between ranks 0 (src) and 1 (dst), nothing measured or checked yet (errors -1). blocks: the
 * GPU grid, 0 on the host backend. */
void cb_row_init(cb_row_t *row, const char *test, const char *op, const char *base_op,
                 const char *units, uint64_t bytes, int blocks, int threads);
/* Records a row without printing it (matrix cells). */
void cb_row_record(cb_ctx_t *ctx, const cb_row_t *row);
double cb_ratio(const cb_row_t *row);
const char *cb_check_str(int64_t errors, char *buf, size_t n);

int cb_json_write(const cb_ctx_t *ctx, const char *path);

/* ---- statistics: sorts v in place */
void cb_stats(double *v, int n, cb_stats_t *out);

/* ---- sizes: the sweep [lo, hi] by factor f, where -b/-e/-f replace the defaults, clipped to
 * [clip_lo, clip_hi]. Returns the count written to out (at most CB_MAX_SIZES). */
int cb_sweep(const cb_opts_t *o, uint64_t lo, uint64_t hi, double f, uint64_t clip_lo,
             uint64_t clip_hi, uint64_t *out);
int cb_opt_int(int value, int dflt);
/* 1 if this process is an MPS client (the control daemon's pipe or socket exists under
 * CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps); CCHAN_BENCH_MPS=0/1 overrides. Ranks that
 * share a GPU run their kernels at the same time only then. */
int cb_mps_client(void);

/* ---- collectives over the bootstrap (every rank calls them in the same order) */
void cb_barrier(const cb_ctx_t *ctx);
void cb_allgather(const cb_ctx_t *ctx, const void *mine, void *all, size_t bytes);
/* Combines per-rank check results: -1 when no rank checked anything, else the sum of mismatches. */
int64_t cb_errors_combine(const cb_ctx_t *ctx, int64_t mine);
/* Rank 0's value of a double (e.g. a figure only the measuring rank has) on every rank. */
double cb_from_rank(const cb_ctx_t *ctx, int root, double mine);

double cb_now(void); /* seconds, CLOCK_MONOTONIC */
uint64_t cb_now_ns(void);

/* ---- buffers and channels: the same for the GPU and the host backend (the backends' own state
 * around them differs). data holds bandwidth messages and ping-pong payloads, pkt flags and LL
 * packets; every rank's are mapped into every rank. */
typedef struct cb_chans {
    uint64_t data_bytes, pkt_bytes;
    cchan_mem_t *data, *pkt, **peer_data, **peer_pkt; /* peer_*: [nranks] */
    cchan_sem_set_t *msems;
    cchan_memory_channel_t
        *mch; /* [nranks]: to each peer, remote = its data, local = data (sem 0) */
    cchan_memory_channel_t lch; /* ranks 0 and 1: packets into the peer's pkt, payload in data
                                   (sem 1) */
    /* port channels, made at the first test that needs them (cb_chans_port) */
    int port_ready;
    cchan_sem_set_t *psems; /* host-mapped: 0 = pch, 1 = rate_ch, more for the backend's own use */
    cchan_proxy_t *proxy;
    cchan_port_channel_t *pch; /* [nranks] */
    cchan_port_channel_t rate_ch;
} cb_chans_t;
/* Bytes of data for this run's sweeps: at least min, the largest -e (default max_default) when a
 * bandwidth test runs, the matrix size (default matrix_default) when the matrix does; whole 2 MiB.
 */
uint64_t cb_data_bytes(const cb_opts_t *o, uint64_t min, uint64_t max_default,
                       uint64_t matrix_default);
/* Allocates, maps everywhere and connects (collective; dies on failure). */
void cb_chans_setup(cb_ctx_t *ctx, cb_chans_t *c, uint64_t data_bytes, uint64_t pkt_bytes);
/* The proxy, nsems host-mapped semaphores and the port channels, once (collective). */
void cb_chans_port(cb_ctx_t *ctx, cb_chans_t *c, int nsems);
void cb_chans_teardown(cb_ctx_t *ctx, cb_chans_t *c); /* collective */

/* ---- per-backend entry points */
int cb_run_host(cb_ctx_t *ctx);
#ifdef CCHAN_BENCH_CUDA
int cb_run_gpu(cb_ctx_t *ctx);
#endif

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_BENCH_COMMON_H */
