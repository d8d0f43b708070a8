/* cchan GPU test harness: 2 to 8 ranks, one process per rank, started by `cchan-run -n N`; ranks
 * have GPUs of their own or share them (more ranks than GPUs on a host).
 *
 * Every test program here is GT_MAIN({name, setup, cases, teardown, child hooks}) and:
 *   - exits 77 (skip) with a reason when there is no usable GPU or the rank count is outside 2..8;
 *   - runs named cases in the same order on every rank (gt_case: they are collective); after each
 *     case the ranks all-gather their verdicts, so a failure seen by a receiver also fails its
 *     sender, and rank 0 prints one "PASS name" / "FAIL name" / "SKIP name: why" line per case and
 *     "N passed, M failed, K skipped" last;
 *   - runs point-to-point cases (GT_PAIRS) once per round of a round-robin pairing, so every pair
 *     of ranks meets, and collective cases (GT_ALL) once with every rank;
 *   - where ranks share a GPU: under MPS runs every case but those that must trap (GT_TRAPS: a trap
 *     takes the MPS server down for every rank); time-sliced (no MPS) runs every case but those
 *     that need ranks running at the same time (GT_CONCURRENT); skipped cases say why;
 *   - sets a device-wait deadline (cchan_comm_set_timeout_ms; CCHAN_TIMEOUT_MS overrides) so that a
 *     broken signal traps instead of hanging, and arms a per-case watchdog (SIGALRM; per round for
 *     GT_PAIRS) so that a hang the deadline does not cover ends the process with the case named;
 *   - checks every CUDA call and the last error after every launch (GT_CUDA, GT_LAUNCH).
 *
 * Test data: bytes come from gt_pattern_byte(seed, index), a hash that is never 0 and never the
 * poison byte, so every byte written or not written is told apart. Destinations are poisoned with
 * GT_POISON before each transfer; checks cover the whole destination buffer (in range: the
 * pattern; elsewhere: poison) on the GPU.
 *
 * Options (every rank gets the same argv from cchan-run):
 *   --case a,b,c   run only these cases (exact names)      --list   print the case names and flags
 *   --repeat N     run each selected case N times in a row, stopping at the first failure
 *   --watchdog S   per-case watchdog in seconds (default: each case's own budget)
 * Environment: CCHAN_GPU_TEST_MPS=0/1 overrides the MPS detection (the control daemon's pipe under
 * CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps).
 */
#ifndef CCHAN_TEST_GPU_TEST_H
#define CCHAN_TEST_GPU_TEST_H

#include <cuda_runtime.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cchan/cchan.h"

extern char **environ;

#define GT_POISON 0xA5u
#define GT_EXIT_SKIP 77
#define GT_DEFAULT_DEVICE_TIMEOUT_MS 30000ull
#define GT_KiB (1ull << 10)
#define GT_MiB (1ull << 20)
#define GT_GiB (1ull << 30)

/* ------------------------------------------------------------------ test data */

__host__ __device__ static inline uint64_t gt_mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* A seed for (case, rank, iteration); both sides of a transfer can compute the other's. */
__host__ __device__ static inline uint64_t gt_seed(uint64_t case_tag, uint64_t rank,
                                                   uint64_t iter) {
    return gt_mix64(gt_mix64(case_tag) ^ gt_mix64(rank * 0x1000003ull + 0x51ull) ^
                    (iter * 0xD1342543DE82EF95ull));
}

/* The pattern is made of 8-byte words of hash output; bytes that would be 0 or the poison byte are
 * remapped, so every pattern byte differs from both. */
__host__ __device__ static inline uint64_t gt_pattern_raw(uint64_t seed, uint64_t word) {
    return gt_mix64(seed + word * 0xD6E8FEB86659FD93ull);
}
__host__ __device__ static inline uint8_t gt_pattern_fix(uint8_t b) {
    return (b == 0 || b == GT_POISON) ? (uint8_t)(b ^ 0x5Au) : b;
}

/* Byte `i` of the pattern `seed`: random-looking, never 0, never GT_POISON. */
__host__ __device__ static inline uint8_t gt_pattern_byte(uint64_t seed, uint64_t i) {
    return gt_pattern_fix((uint8_t)(gt_pattern_raw(seed, i >> 3) >> ((i & 7u) * 8u)));
}

/* Little-endian value made of pattern bytes [i, i + n): what a read of n bytes at pattern index i
 * returns. */
__host__ __device__ static inline uint64_t gt_pattern_word(uint64_t seed, uint64_t i, uint32_t n) {
    uint64_t v = 0;
    for (uint32_t b = 0; b < n; b++) v |= (uint64_t)gt_pattern_byte(seed, i + b) << (8 * b);
    return v;
}

/* A float in +-[0.25, 4): never zero, exact in f32. */
__host__ __device__ static inline float gt_pattern_float(uint64_t seed, uint64_t i) {
    uint64_t h = gt_mix64(seed ^ (i * 0x9E3779B97F4A7C15ull + 0x7F4A7C15ull));
    float mag = 0.25f + (float)(h & 0xFFFFFu) * (3.75f / 1048576.0f);
    return (h >> 63) ? -mag : mag;
}

__host__ __device__ static inline uint64_t gt_hash_name(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* ------------------------------------------------------------------ device-side results */

/* Mismatch record filled by check kernels: count, first and last bad index, and what the test
 * wants to report in info[] (counters read back from the device). */
typedef struct gt_result {
    unsigned long long errors;
    unsigned long long first;
    unsigned long long last;
    unsigned long long info[13];
} gt_result_t;

__device__ static inline void gt_dev_record(gt_result_t *r, unsigned long long nbad,
                                            unsigned long long first, unsigned long long last) {
    if (nbad == 0) return;
    atomicAdd(&r->errors, nbad);
    atomicMin(&r->first, first);
    atomicMax(&r->last, last);
}

__device__ static inline uint32_t gt_global_tid(void) {
    return blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ static inline uint32_t gt_global_nthreads(void) { return gridDim.x * blockDim.x; }

/* Cooperative: p[k] = pattern(seed, base + k) for k < n. */
__device__ static inline void gt_dev_fill(uint8_t *p, uint64_t n, uint64_t seed, uint64_t base,
                                          uint32_t tid, uint32_t nthreads) {
    for (uint64_t k = tid; k < n; k += nthreads) p[k] = gt_pattern_byte(seed, base + k);
}

/* Cooperative: p[k] = byte for k < n. */
__device__ static inline void gt_dev_set(uint8_t *p, uint64_t n, uint8_t byte, uint32_t tid,
                                         uint32_t nthreads) {
    for (uint64_t k = tid; k < n; k += nthreads) p[k] = byte;
}

/* Cooperative check of p[0..n) == pattern(seed, base + k); bad bytes are recorded with index
 * tag + k. Returns this thread's count of bad bytes. */
__device__ static inline unsigned long long gt_dev_check(const uint8_t *p, uint64_t n,
                                                         uint64_t seed, uint64_t base, uint64_t tag,
                                                         uint32_t tid, uint32_t nthreads,
                                                         gt_result_t *r) {
    unsigned long long bad = 0, first = ~0ull, last = 0;
    for (uint64_t k = tid; k < n; k += nthreads) {
        if (p[k] != gt_pattern_byte(seed, base + k)) {
            bad++;
            if (tag + k < first) first = tag + k;
            last = tag + k;
        }
    }
    gt_dev_record(r, bad, first, last);
    return bad;
}

/* Cooperative check of p[0..n) == byte. */
__device__ static inline unsigned long long gt_dev_check_byte(const uint8_t *p, uint64_t n,
                                                              uint8_t byte, uint64_t tag,
                                                              uint32_t tid, uint32_t nthreads,
                                                              gt_result_t *r) {
    unsigned long long bad = 0, first = ~0ull, last = 0;
    for (uint64_t k = tid; k < n; k += nthreads) {
        if (p[k] != byte) {
            bad++;
            if (tag + k < first) first = tag + k;
            last = tag + k;
        }
    }
    gt_dev_record(r, bad, first, last);
    return bad;
}

/* buf[i] = pattern(seed, i) for i < bytes (buf 8-byte aligned). */
__global__ void gt_fill_kernel(uint8_t *buf, uint64_t bytes, uint64_t seed) {
    uint64_t nwords = bytes / 8;
    uint64_t *w = (uint64_t *)(void *)buf;
    for (uint64_t k = gt_global_tid(); k < nwords; k += gt_global_nthreads()) {
        uint64_t h = gt_pattern_raw(seed, k), v = 0;
        for (uint32_t b = 0; b < 8; b++)
            v |= (uint64_t)gt_pattern_fix((uint8_t)(h >> (8 * b))) << (8 * b);
        w[k] = v;
    }
    for (uint64_t i = nwords * 8 + gt_global_tid(); i < bytes; i += gt_global_nthreads())
        buf[i] = gt_pattern_byte(seed, i);
}

/* Whole-buffer check: buf[i] must be pattern(seed, base + i - begin) for i in [begin, end) and
 * `poison` elsewhere. buf 8-byte aligned. */
__global__ void gt_check_kernel(const uint8_t *buf, uint64_t bytes, uint64_t begin, uint64_t end,
                                uint64_t seed, uint64_t base, uint32_t poison, gt_result_t *r) {
    unsigned long long bad = 0, first = ~0ull, last = 0;
    uint64_t nwords = (bytes + 7) / 8;
    uint64_t cached_word = ~0ull, cached_raw = 0; /* pattern word last hashed */
    for (uint64_t k = gt_global_tid(); k < nwords; k += gt_global_nthreads()) {
        uint64_t i0 = k * 8;
        uint64_t v;
        if (i0 + 8 <= bytes) {
            v = ((const uint64_t *)(const void *)buf)[k];
        } else {
            v = 0;
            for (uint64_t b = 0; i0 + b < bytes; b++) v |= (uint64_t)buf[i0 + b] << (8 * b);
        }
        for (uint32_t b = 0; b < 8 && i0 + b < bytes; b++) {
            uint64_t i = i0 + b;
            uint8_t got = (uint8_t)(v >> (8 * b));
            uint8_t want = (uint8_t)poison;
            if (i >= begin && i < end) {
                uint64_t p = base + (i - begin);
                if ((p >> 3) != cached_word) {
                    cached_word = p >> 3;
                    cached_raw = gt_pattern_raw(seed, cached_word);
                }
                want = gt_pattern_fix((uint8_t)(cached_raw >> ((p & 7u) * 8u)));
            }
            if (got != want) {
                bad++;
                if (i < first) first = i;
                last = i;
            }
        }
    }
    gt_dev_record(r, bad, first, last);
}

/* ------------------------------------------------------------------ context */

typedef struct gt_ctx gt_ctx_t;
typedef void (*gt_case_fn)(gt_ctx_t *ctx);

/* Case flags (gt_case). */
#define GT_ALL 0x0u /* every rank at once: the operation is collective (the default) */
/* Point to point: run once per round of a round-robin pairing, so that every pair of ranks meets
 * once (nranks - 1 rounds; needs an even rank count); gt_peer() is this round's partner. */
#define GT_PAIRS 0x1u
/* A kernel must trap (device-wait deadline): skipped under MPS, where a trap takes the MPS server
 * down for every rank of the GPU. */
#define GT_TRAPS 0x2u
/* Needs ranks that run at the same time: skipped where ranks share a GPU without MPS (time-sliced
 * contexts make every cross-rank hand-off wait for a context switch). */
#define GT_CONCURRENT 0x4u
/* With GT_PAIRS: the first round only (every rank takes part, not every pair meets). */
#define GT_ONE_ROUND 0x8u

#define GT_MAX_RANKS 8

struct gt_ctx {
    const char *test_name;
    const char *self_exe; /* /proc/self/exe */
    int rank, nranks, local_rank, local_size;
    int device, num_sms, cc_major, cc_minor;
    char device_name[256];
    int ngpus;        /* visible GPUs on this host */
    int ranks_on_gpu; /* ranks (this one included) whose GPU is this rank's GPU */
    int shared_gpu;   /* 1 if any GPU serves several ranks (the same on every rank) */
    int mps;          /* 1 if the ranks are MPS clients (CCHAN_GPU_TEST_MPS overrides) */
    cchan_comm_t *comm;
    cudaStream_t stream;
    gt_result_t *res; /* device */
    uint64_t device_timeout_ms;
    int passed, failed, skipped;
    const char *case_name;   /* the running case */
    int case_ok;             /* this rank's verdict on the running case */
    int peer;                /* GT_PAIRS cases: this round's partner; otherwise -1 */
    int pair_round, nrounds; /* GT_PAIRS cases: the running round and how many */
    unsigned watchdog_override_s;
    char cases[1024]; /* --case filter, ",a,b," form; empty: all */
    unsigned repeat;  /* --repeat: runs of each selected case (0: once) */
    int list_only;
};

static gt_ctx_t *gt_current;
static char gt_watchdog_msg[512];

static inline double gt_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Prints "[rN] ..." on stdout (line-buffered). */
static inline void gt_log(const gt_ctx_t *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void gt_log(const gt_ctx_t *ctx, const char *fmt, ...) {
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    printf("[r%d] %s\n", ctx ? ctx->rank : -1, line);
}

/* Records a failure of the running case on this rank with its reason. */
static inline void gt_fail(gt_ctx_t *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void gt_fail(gt_ctx_t *ctx, const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    printf("[r%d] %s: FAIL: %s\n", ctx->rank, ctx->case_name ? ctx->case_name : "setup", line);
    ctx->case_ok = 0;
}

#define GT_EXPECT(ctx, cond, ...)                                                                  \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            char gt_msg_[1536];                                                                    \
            snprintf(gt_msg_, sizeof gt_msg_, __VA_ARGS__);                                        \
            gt_fail((ctx), "%s:%d: %.1536s (%.300s)", __FILE__, __LINE__, gt_msg_, #cond);         \
        }                                                                                          \
    } while (0)

/* Ends the program after an unrecoverable error (a CUDA call failed, a kernel trapped): prints the
 * device-wait diagnostic if cchan recorded one, and a summary line. */
static inline void gt_die(void) __attribute__((noreturn));
static inline void gt_die(void) {
    gt_ctx_t *ctx = gt_current;
    if (ctx && ctx->comm) {
        int st = cchan_comm_check_device(ctx->comm);
        if (st != 0)
            printf("[r%d] device diagnostic (cchan_comm_check_device = %d, %s): %s\n", ctx->rank,
                   st, cchan_strerror(st), cchan_last_error());
    }
    if (ctx) {
        printf("[r%d] ABORTED in case '%s'\n", ctx->rank,
               ctx->case_name ? ctx->case_name : "setup");
        printf("%d passed, %d failed, %d skipped\n", ctx->passed, ctx->failed + 1, ctx->skipped);
    }
    fflush(stdout);
    fflush(stderr);
    _exit(1);
}

static inline void gt_fatal_cuda(const char *call, cudaError_t e, const char *file, int line) {
    gt_ctx_t *ctx = gt_current;
    printf("[r%d] FATAL %s:%d: %s: %s (%s)\n", ctx ? ctx->rank : -1, file, line, call,
           cudaGetErrorName(e), cudaGetErrorString(e));
    /* A kernel that trapped at a device deadline left its diagnostic in the communicator. */
    int st = ctx && ctx->comm ? cchan_comm_check_device(ctx->comm) : 0;
    if (st) printf("[r%d] device diagnostic: %s\n", ctx->rank, cchan_last_error());
    gt_die();
}

static inline void gt_fatal_cchan(const char *call, int st, const char *file, int line) {
    gt_ctx_t *ctx = gt_current;
    printf("[r%d] FATAL %s:%d: %s = %d (%s): %s\n", ctx ? ctx->rank : -1, file, line, call, st,
           cchan_strerror(st), cchan_last_error());
    gt_die();
}

#define GT_CUDA(call)                                                                              \
    do {                                                                                           \
        cudaError_t gt_e_ = (call);                                                                \
        if (gt_e_ != cudaSuccess) gt_fatal_cuda(#call, gt_e_, __FILE__, __LINE__);                 \
    } while (0)

#define GT_CCHAN(call)                                                                             \
    do {                                                                                           \
        int gt_s_ = (call);                                                                        \
        if (gt_s_ < 0) gt_fatal_cchan(#call, gt_s_, __FILE__, __LINE__);                           \
    } while (0)

/* Launches on the context's stream and checks the launch. */
#define GT_LAUNCH(ctx, kernel, grid, block, ...)                                                   \
    do {                                                                                           \
        kernel<<<(grid), (block), 0, (ctx)->stream>>>(__VA_ARGS__);                                \
        GT_CUDA(cudaGetLastError());                                                               \
    } while (0)

#define GT_SYNC(ctx) GT_CUDA(cudaStreamSynchronize((ctx)->stream))

static inline void gt_barrier(gt_ctx_t *ctx) {
    GT_CCHAN(cchan_bootstrap_barrier(cchan_comm_bootstrap(ctx->comm)));
}

static inline void gt_allgather(gt_ctx_t *ctx, const void *send, void *recv, size_t bytes) {
    GT_CCHAN(cchan_bootstrap_allgather(cchan_comm_bootstrap(ctx->comm), send, recv, bytes));
}

/* The partner of this rank in a GT_PAIRS case's running round. */
static inline int gt_peer(const gt_ctx_t *ctx) { return ctx->peer; }

/* This rank's side of its GT_PAIRS pair: 0 for the lower rank, 1 for the upper. Cases whose two
 * sides differ (who pings first, which semaphore index carries whose data) pick by role. */
static inline int gt_role(const gt_ctx_t *ctx) { return ctx->rank > ctx->peer; }

/* Ring neighbours, for cases where each rank talks to the next and hears from the previous. */
static inline int gt_next(const gt_ctx_t *ctx) { return (ctx->rank + 1) % ctx->nranks; }
static inline int gt_prev(const gt_ctx_t *ctx) {
    return (ctx->rank + ctx->nranks - 1) % ctx->nranks;
}

/* Partner of `rank` in round `round` of a round-robin pairing of n ranks (n even; n - 1 rounds,
 * every pair meets exactly once): rank n - 1 stays put, the others turn around it. */
static inline int gt_pair_partner(int rank, int round, int n) {
    const int m = n - 1;
    if (rank == m) return round;
    if (rank == round) return m;
    return ((2 * round - rank) % m + m) % m;
}

/* Collective: 1 while every rank's verdict on the running case is still good. Loops whose
 * iterations contain collectives stop on this, never on a rank's own verdict alone (one rank
 * leaving the loop while the other stays would desynchronize their collectives). */
static inline int gt_all_ok(gt_ctx_t *ctx) {
    int verdicts[64];
    GT_CCHAN(cchan_bootstrap_allgather(cchan_comm_bootstrap(ctx->comm), &ctx->case_ok, verdicts,
                                       sizeof(int)));
    for (int r = 0; r < ctx->nranks && r < 64; r++)
        if (!verdicts[r]) return 0;
    return 1;
}

/* ------------------------------------------------------------------ host helpers */

static inline void gt_result_reset(gt_ctx_t *ctx) {
    gt_result_t init;
    memset(&init, 0, sizeof init);
    init.first = ~0ull;
    GT_CUDA(cudaMemcpyAsync(ctx->res, &init, sizeof init, cudaMemcpyHostToDevice, ctx->stream));
}

static inline gt_result_t gt_result_read(gt_ctx_t *ctx) {
    gt_result_t r;
    GT_CUDA(cudaMemcpyAsync(&r, ctx->res, sizeof r, cudaMemcpyDeviceToHost, ctx->stream));
    GT_SYNC(ctx);
    return r;
}

static inline unsigned gt_grid_for(const gt_ctx_t *ctx, uint64_t work, unsigned block) {
    uint64_t g = (work + block - 1) / block;
    uint64_t cap = (uint64_t)ctx->num_sms * 8;
    if (g > cap) g = cap;
    return g ? (unsigned)g : 1u;
}

static inline void gt_fill(gt_ctx_t *ctx, void *buf, uint64_t bytes, uint64_t seed) {
    GT_LAUNCH(ctx, gt_fill_kernel, gt_grid_for(ctx, bytes / 8 + 1, 256), 256, (uint8_t *)buf, bytes,
              seed);
}

static inline void gt_poison(gt_ctx_t *ctx, void *buf, uint64_t bytes) {
    GT_CUDA(cudaMemsetAsync(buf, GT_POISON, bytes, ctx->stream));
}

/* Checks the whole buffer: [begin, begin + len) holds pattern(seed, base ..), the rest poison.
 * Reports the first bad byte with what was expected there. Returns 1 if all good. */
static inline int gt_check_buffer(gt_ctx_t *ctx, const void *buf, uint64_t bytes, uint64_t begin,
                                  uint64_t len, uint64_t seed, uint64_t base, const char *what) {
    gt_result_reset(ctx);
    GT_LAUNCH(ctx, gt_check_kernel, gt_grid_for(ctx, bytes / 8 + 1, 256), 256, (const uint8_t *)buf,
              bytes, begin, begin + len, seed, base, GT_POISON, ctx->res);
    gt_result_t r = gt_result_read(ctx);
    if (r.errors == 0) return 1;
    uint8_t got = 0;
    GT_CUDA(cudaMemcpy(&got, (const uint8_t *)buf + r.first, 1, cudaMemcpyDeviceToHost));
    int in = r.first >= begin && r.first < begin + len;
    uint8_t want = in ? gt_pattern_byte(seed, base + (r.first - begin)) : (uint8_t)GT_POISON;
    gt_fail(ctx,
            "%s: %llu bad bytes in [%llu, %llu] (data range [%llu, %llu)); first at %llu (%s the "
            "range): got 0x%02x, want 0x%02x",
            what, r.errors, r.first, r.last, (unsigned long long)begin,
            (unsigned long long)(begin + len), r.first, in ? "inside" : "outside", got, want);
    return 0;
}

/* Reports a device-side mismatch record filled by in-kernel checks. Returns 1 if no errors. */
static inline int gt_report_result(gt_ctx_t *ctx, const gt_result_t *r, const char *what) {
    if (r->errors == 0) return 1;
    gt_fail(ctx, "%s: %llu errors (first index %llu, last %llu)", what, r->errors, r->first,
            r->last);
    return 0;
}

static inline void *gt_mem_ptr(const cchan_mem_t *m) { return cchan_mem_ptr(m); }

/* ------------------------------------------------------------------ a kernel hogging the SMs
 *
 * For cases that check a kernel never depends on co-residency nothing guaranteed it: a stand-in
 * kernel that spins on a second stream, as many 1024-thread blocks per SM as an SM holds threads
 * (nothing else fits beside them), on most SMs, and ends on its own after `ms`. The kernel under
 * test launched meanwhile gets few SMs and only part of its grid resident until the hog ends: it
 * must finish after it, and be correct. */

/* state[0]: blocks started; state[1]: when the first block started (globaltimer). Every block ends
 * at state[1] + ns, so blocks that only got an SM late (fewer SMs than blocks, as under MPS with a
 * thread percentage) end with the others instead of stretching the hog. */
__global__ void __launch_bounds__(1024)
    gt_hog_kernel(unsigned long long ns, unsigned long long *state) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    __shared__ unsigned long long t0;
    if (threadIdx.x == 0) {
        unsigned long long prev = atomicCAS(&state[1], 0ull, now);
        t0 = prev ? prev : now;
        atomicAdd(&state[0], 1ull);
        __threadfence_system();
    }
    __syncthreads();
    for (;;) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - t0 >= ns) break;
        __nanosleep(1000);
    }
}

typedef struct gt_hog {
    cudaStream_t stream;
    cudaEvent_t done;
    unsigned long long *started; /* host-mapped: gt_hog_kernel's state */
    unsigned blocks;
} gt_hog_t;

/* Starts the hog on `fraction` of the SMs for `ms` and returns once one of its blocks runs (or
 * after a second: then the GPU is shared and busier still). */
static inline void gt_hog_start(gt_ctx_t *ctx, gt_hog_t *h, double fraction, unsigned ms) {
    memset(h, 0, sizeof *h);
    int threads_per_sm = 0;
    GT_CUDA(cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor,
                                   ctx->device));
    const unsigned per_sm = threads_per_sm >= 2048 ? (unsigned)threads_per_sm / 1024 : 1u;
    GT_CUDA(cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking));
    GT_CUDA(cudaEventCreateWithFlags(&h->done, cudaEventDisableTiming));
    GT_CUDA(cudaHostAlloc((void **)&h->started, 2 * sizeof *h->started, cudaHostAllocMapped));
    h->started[0] = h->started[1] = 0;
    unsigned long long *dev_started;
    GT_CUDA(cudaHostGetDevicePointer((void **)&dev_started, h->started, 0));
    h->blocks = (unsigned)(ctx->num_sms * fraction) * per_sm;
    if (h->blocks < 1) h->blocks = 1;
    gt_hog_kernel<<<h->blocks, 1024, 0, h->stream>>>((unsigned long long)ms * 1000000ull,
                                                     dev_started);
    GT_CUDA(cudaGetLastError());
    GT_CUDA(cudaEventRecord(h->done, h->stream));
    double t0 = gt_now_ms();
    while (*(volatile unsigned long long *)h->started == 0 && gt_now_ms() - t0 < 1000.0)
        usleep(100);
}

/* Waits for the hog to end and frees it. */
static inline void gt_hog_end(gt_ctx_t *ctx, gt_hog_t *h) {
    (void)ctx;
    GT_CUDA(cudaEventSynchronize(h->done));
    GT_CUDA(cudaEventDestroy(h->done));
    GT_CUDA(cudaStreamDestroy(h->stream));
    GT_CUDA(cudaFreeHost(h->started));
}

/* ------------------------------------------------------------------ case runner */

static void gt_watchdog_handler(int sig) {
    (void)sig;
    ssize_t w = write(1, gt_watchdog_msg, strlen(gt_watchdog_msg));
    (void)w;
    _exit(124);
}

static inline int gt_selected(const gt_ctx_t *ctx, const char *name) {
    if (!ctx->cases[0]) return 1;
    char key[256];
    snprintf(key, sizeof key, ",%s,", name);
    return strstr(ctx->cases, key) != NULL;
}

/* Why a case with these flags cannot run here, or NULL. The same on every rank (shared_gpu and mps
 * are agreed on at init). */
static inline const char *gt_skip_reason(const gt_ctx_t *ctx, unsigned flags, char *buf, size_t n) {
    if ((flags & GT_TRAPS) && ctx->mps) {
        snprintf(buf, n,
                 "a kernel of this case must trap, and under MPS a trap takes the MPS server down "
                 "for every rank sharing the GPU: run it without MPS (time-sliced)");
        return buf;
    }
    if ((flags & GT_CONCURRENT) && ctx->shared_gpu && !ctx->mps) {
        snprintf(buf, n,
                 "needs ranks that run at the same time, and %d ranks share a GPU time-sliced "
                 "(no MPS): start the MPS daemon",
                 ctx->ranks_on_gpu);
        return buf;
    }
    if ((flags & GT_PAIRS) && (ctx->nranks & 1)) {
        snprintf(buf, n, "pairwise case: needs an even number of ranks, got %d", ctx->nranks);
        return buf;
    }
    return NULL;
}

/* One pass of a case's function with the watchdog armed; returns the all-rank verdict and fills
 * `who` with the failing ranks. */
static inline int gt_run_once(gt_ctx_t *ctx, const char *name, gt_case_fn fn, unsigned wd,
                              char *who, size_t who_n) {
    char round_s[48] = "";
    if (ctx->peer >= 0)
        snprintf(round_s, sizeof round_s, " (round %d of %d, partner %d)", ctx->pair_round + 1,
                 ctx->nrounds, ctx->peer);
    snprintf(gt_watchdog_msg, sizeof gt_watchdog_msg,
             "[r%d] WATCHDOG: case '%s'%s still running after %u s; aborting (a hang the device "
             "deadline did not catch)\n%d passed, %d failed, %d skipped\n",
             ctx->rank, name, round_s, wd, ctx->passed, ctx->failed + 1, ctx->skipped);
    ctx->case_ok = 1;
    alarm(wd);
    fn(ctx);
    GT_CUDA(cudaGetLastError());
    GT_SYNC(ctx);
    alarm(0);
    int verdicts[GT_MAX_RANKS];
    gt_allgather(ctx, &ctx->case_ok, verdicts, sizeof(int));
    int all_ok = 1;
    who[0] = '\0';
    for (int r = 0; r < ctx->nranks; r++) {
        if (!verdicts[r]) {
            all_ok = 0;
            size_t l = strlen(who);
            snprintf(who + l, who_n - l, "%s%d", l ? "," : " (failed on rank ", r);
        }
    }
    if (!all_ok) {
        if (ctx->peer >= 0) {
            size_t l = strlen(who);
            snprintf(who + l, who_n - l, " in round %d of %d", ctx->pair_round + 1, ctx->nrounds);
        }
        strncat(who, ")", who_n - strlen(who) - 1);
    }
    return all_ok;
}

/* Runs one case on every rank: every rank calls gt_case with the same names and flags in the same
 * order. GT_PAIRS cases run once per round (nranks - 1 rounds; the budget is per round) and stop
 * at the first round that fails. Rank 0 prints "PASS name", "FAIL name" or "SKIP name: why". */
static inline void gt_case(gt_ctx_t *ctx, const char *name, gt_case_fn fn, unsigned budget_s,
                           unsigned flags) {
    if (ctx->list_only) {
        printf("%s%s%s%s\n", name, (flags & GT_PAIRS) ? " [pairs]" : "",
               (flags & GT_TRAPS) ? " [traps]" : "",
               (flags & GT_CONCURRENT) ? " [concurrent]" : "");
        return;
    }
    if (!gt_selected(ctx, name)) return;
    char why[512];
    if (gt_skip_reason(ctx, flags, why, sizeof why)) {
        ctx->skipped++;
        if (ctx->rank == 0) printf("SKIP %s: %s\n", name, why);
        fflush(stdout);
        return;
    }
    unsigned wd = ctx->watchdog_override_s ? ctx->watchdog_override_s : budget_s;
    ctx->case_name = name;
    double t0 = gt_now_ms();
    char who[192];
    int all_ok = 1;
    unsigned runs = 0, repeat = ctx->repeat ? ctx->repeat : 1;
    for (; runs < repeat && all_ok; runs++) {
        if (flags & GT_PAIRS) {
            ctx->nrounds = (flags & GT_ONE_ROUND) ? 1 : ctx->nranks - 1;
            for (ctx->pair_round = 0; ctx->pair_round < ctx->nrounds && all_ok;
                 ctx->pair_round++) {
                ctx->peer = gt_pair_partner(ctx->rank, ctx->pair_round, ctx->nranks);
                all_ok = gt_run_once(ctx, name, fn, wd, who, sizeof who);
            }
            ctx->peer = -1;
            ctx->pair_round = ctx->nrounds = 0;
        } else {
            all_ok = gt_run_once(ctx, name, fn, wd, who, sizeof who);
        }
    }
    double ms = gt_now_ms() - t0;
    if (all_ok)
        ctx->passed++;
    else
        ctx->failed++;
    char times[48] = "";
    if (repeat > 1)
        snprintf(times, sizeof times, all_ok ? ", %u runs" : ", failed in run %u of %u", runs,
                 repeat);
    if (ctx->rank == 0)
        printf("%s %s (%.1f ms%s)%s\n", all_ok ? "PASS" : "FAIL", name, ms, times, who);
    fflush(stdout);
    ctx->case_name = NULL;
}

/* A collective case (GT_ALL). */
static inline void gt_run(gt_ctx_t *ctx, const char *name, gt_case_fn fn, unsigned budget_s) {
    gt_case(ctx, name, fn, budget_s, GT_ALL);
}

static inline void gt_usage(const char *prog) {
    fprintf(stderr,
            "usage: cchan-run -n N %s [--case a,b,...] [--repeat N] [--list] [--watchdog seconds]  "
            "(N: 2 to %d)\n",
            prog, GT_MAX_RANKS);
}

/* Parses the harness options; returns 0, or -1 on a bad argument. */
static inline int gt_parse_args(gt_ctx_t *ctx, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--case") && i + 1 < argc) {
            snprintf(ctx->cases, sizeof ctx->cases, ",%s,", argv[++i]);
        } else if (!strcmp(argv[i], "--list")) {
            ctx->list_only = 1;
        } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
            char *end = NULL;
            unsigned long n = strtoul(argv[++i], &end, 10);
            if (!end || *end || n < 1 || n > 100000) {
                fprintf(stderr, "%s: --repeat takes a count from 1 to 100000, not '%s'\n",
                        argv[0], argv[i]);
                return -1;
            }
            ctx->repeat = (unsigned)n;
        } else if (!strcmp(argv[i], "--watchdog") && i + 1 < argc) {
            ctx->watchdog_override_s = (unsigned)strtoul(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], argv[i]);
            gt_usage(argv[0]);
            return -1;
        }
    }
    return 0;
}

static inline void gt_skip(const char *test, const char *why) __attribute__((noreturn));
static inline void gt_skip(const char *test, const char *why) {
    printf("SKIP %s: %s\n", test, why);
    fflush(stdout);
    exit(GT_EXIT_SKIP);
}

typedef struct gt_rank_id {
    char host[64];
    unsigned char uuid[16];
    int device;
    int cc_major;
    int mps;
} gt_rank_id_t;

/* 1 if this process is (or will be) an MPS client: the MPS control daemon's pipe exists.
 * CCHAN_GPU_TEST_MPS=0/1 overrides (e.g. for a daemon under another pipe directory). */
static inline int gt_detect_mps(void) {
    const char *o = getenv("CCHAN_GPU_TEST_MPS");
    if (o && *o) return atoi(o) != 0;
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    char path[512];
    snprintf(path, sizeof path, "%s/control", dir && *dir ? dir : "/tmp/nvidia-mps");
    struct stat st;
    /* A socket for the daemon that nvidia-cuda-mps-control -d starts, a FIFO for older ones. */
    return stat(path, &st) == 0 && (S_ISSOCK(st.st_mode) || S_ISFIFO(st.st_mode));
}

/* Skips (77) without a GPU; bootstraps from the launcher's environment; checks there are 2 to
 * GT_MAX_RANKS ranks; notes which ranks share a GPU (rank count above the GPU count: then MPS or
 * time-slicing decides which cases run); creates the CUDA communicator with the device-wait
 * deadline set; creates the stream and the result record. */
static inline void gt_init(gt_ctx_t *ctx, const char *test_name, int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    memset(ctx, 0, sizeof *ctx);
    ctx->test_name = test_name;
    ctx->self_exe = "/proc/self/exe";
    ctx->rank = -1;
    ctx->peer = -1;
    gt_current = ctx;
    if (gt_parse_args(ctx, argc, argv)) exit(2);
    if (ctx->list_only) return; /* the caller lists its cases with gt_case, then exits */

    int ngpu = 0;
    cudaError_t e = cudaGetDeviceCount(&ngpu);
    char why[512];
    if (e != cudaSuccess || ngpu == 0) {
        snprintf(why, sizeof why, "no CUDA GPU (cudaGetDeviceCount: %s, %d devices)",
                 e == cudaSuccess ? "ok" : cudaGetErrorString(e), ngpu);
        gt_skip(test_name, why);
    }
    ctx->ngpus = ngpu;

    if (!getenv("CCHAN_RANK") && !getenv("RANK") && !getenv("OMPI_COMM_WORLD_RANK") &&
        !getenv("PMI_RANK") && !getenv("SLURM_PROCID"))
        gt_skip(test_name, "needs 2 to 8 ranks: run it as `cchan-run -n N <test>`");

    cchan_bootstrap_t *bs = NULL;
    GT_CCHAN(cchan_bootstrap_create_from_env(&bs));
    ctx->rank = cchan_bootstrap_rank(bs);
    ctx->nranks = cchan_bootstrap_size(bs);
    ctx->local_rank = cchan_bootstrap_local_rank(bs);
    ctx->local_size = cchan_bootstrap_local_size(bs);
    if (ctx->nranks < 2 || ctx->nranks > GT_MAX_RANKS) {
        snprintf(why, sizeof why, "needs 2 to %d ranks, got %d", GT_MAX_RANKS, ctx->nranks);
        cchan_bootstrap_destroy(bs);
        gt_skip(test_name, why);
    }

    ctx->device = ctx->local_rank % ngpu;
    GT_CUDA(cudaSetDevice(ctx->device));
    cudaDeviceProp prop;
    GT_CUDA(cudaGetDeviceProperties(&prop, ctx->device));
    ctx->num_sms = prop.multiProcessorCount;
    ctx->cc_major = prop.major;
    ctx->cc_minor = prop.minor;
    snprintf(ctx->device_name, sizeof ctx->device_name, "%s", prop.name);

    /* Ranks on one GPU (more local ranks than GPUs, or CUDA_VISIBLE_DEVICES pointing several at
     * one) run every case but those that cannot be correct there (gt_skip_reason). */
    gt_rank_id_t me, all[GT_MAX_RANKS];
    memset(&me, 0, sizeof me);
    gethostname(me.host, sizeof me.host - 1);
    memcpy(me.uuid, &prop.uuid, sizeof me.uuid);
    me.device = ctx->device;
    me.cc_major = prop.major;
    me.mps = gt_detect_mps();
    GT_CCHAN(cchan_bootstrap_allgather(bs, &me, all, sizeof me));
    int min_cc = 99, any_mps = 0;
    for (int r = 0; r < ctx->nranks; r++) {
        if (all[r].cc_major < min_cc) min_cc = all[r].cc_major;
        any_mps |= all[r].mps;
        int same = !strcmp(all[r].host, me.host) && !memcmp(all[r].uuid, me.uuid, 16);
        if (same) ctx->ranks_on_gpu++;
        for (int q = 0; q < r; q++)
            if (!strcmp(all[r].host, all[q].host) && !memcmp(all[r].uuid, all[q].uuid, 16))
                ctx->shared_gpu = 1;
    }
    ctx->mps = any_mps;
    if (min_cc < 8) {
        snprintf(why, sizeof why, "needs compute capability 8.0 or newer on every rank (got %d.x)",
                 min_cc);
        cchan_bootstrap_destroy(bs);
        gt_skip(test_name, why);
    }

    const char *env_timeout = getenv("CCHAN_TIMEOUT_MS");
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_CUDA;
    cfg.device = ctx->device;
    cfg.timeout_ms = env_timeout && *env_timeout ? UINT64_MAX : GT_DEFAULT_DEVICE_TIMEOUT_MS;
    GT_CCHAN(cchan_comm_create(bs, &cfg, &ctx->comm));
    if (!(env_timeout && *env_timeout))
        GT_CCHAN(cchan_comm_set_timeout_ms(ctx->comm, GT_DEFAULT_DEVICE_TIMEOUT_MS));
    ctx->device_timeout_ms =
        env_timeout && *env_timeout ? cchan_env_timeout_ms() : GT_DEFAULT_DEVICE_TIMEOUT_MS;
    if (cchan_comm_device(ctx->comm) != ctx->device) {
        printf("[r%d] FATAL: cchan_comm_device = %d, asked for %d\n", ctx->rank,
               cchan_comm_device(ctx->comm), ctx->device);
        gt_die();
    }
    GT_CUDA(cudaSetDevice(ctx->device));
    GT_CUDA(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    GT_CUDA(cudaMalloc((void **)&ctx->res, sizeof(gt_result_t)));

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = gt_watchdog_handler;
    sigaction(SIGALRM, &sa, NULL);

    const char *pct = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    gt_log(ctx,
           "%s: rank %d/%d (local %d/%d) on %s, GPU %d: %s (sm_%d%d, %d SMs), %d rank(s) on it%s%s"
           "%s; %s; device timeout %llu ms",
           test_name, ctx->rank, ctx->nranks, ctx->local_rank, ctx->local_size, me.host,
           ctx->device, ctx->device_name, ctx->cc_major, ctx->cc_minor, ctx->num_sms,
           ctx->ranks_on_gpu,
           ctx->shared_gpu ? (ctx->mps ? ", MPS" : ", time-sliced (no MPS)") : "",
           ctx->mps && pct ? ", active thread % " : "", ctx->mps && pct ? pct : "", cchan_version(),
           (unsigned long long)ctx->device_timeout_ms);
}

/* Prints the summary (rank 0) and returns the exit code. The caller has destroyed its objects. */
static inline int gt_finish(gt_ctx_t *ctx) {
    if (ctx->list_only) return 0;
    GT_CUDA(cudaFree(ctx->res));
    GT_CUDA(cudaStreamDestroy(ctx->stream));
    int st = cchan_comm_destroy(ctx->comm);
    ctx->comm = NULL;
    if (st != 0) {
        gt_log(ctx, "cchan_comm_destroy = %d (%s): %s", st, cchan_strerror(st), cchan_last_error());
        ctx->failed++;
    }
    if (ctx->rank == 0)
        printf("%d passed, %d failed, %d skipped\n", ctx->passed, ctx->failed, ctx->skipped);
    else
        gt_log(ctx, "done: %d passed, %d failed, %d skipped", ctx->passed, ctx->failed,
               ctx->skipped);
    fflush(stdout);
    return ctx->failed ? 1 : 0;
}

/* ------------------------------------------------------------------ child processes
 *
 * A kernel that traps (a device-wait deadline) takes the CUDA context with it, so timeout cases run
 * in child processes: each rank spawns itself with a child-mode argv, the children bootstrap with
 * a unique id that rank 0 created and the parents all-gathered, and the parent reads the child's
 * output with a bound on time. */

typedef struct gt_child {
    int exited;    /* 1 if it exited by itself before the bound */
    int exit_code; /* its exit code, or 128 + signal */
    double elapsed_ms;
    char out[32768]; /* stdout and stderr together */
} gt_child_t;

static inline int gt_spawn_capture(char *const argv[], unsigned bound_s, gt_child_t *c) {
    memset(c, 0, sizeof *c);
    int fds[2];
    if (pipe(fds)) return -errno;
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    pid_t pid;
    double t0 = gt_now_ms();
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc) {
        close(fds[0]);
        return -rc;
    }
    size_t used = 0;
    int killed = 0;
    for (;;) {
        double left = bound_s * 1e3 - (gt_now_ms() - t0);
        if (left <= 0) {
            kill(pid, SIGKILL);
            killed = 1;
            break;
        }
        struct pollfd p = {fds[0], POLLIN, 0};
        int n = poll(&p, 1, left > 200 ? 200 : (int)left + 1);
        if (n < 0 && errno == EINTR) continue;
        if (n > 0) {
            char tmp[4096];
            ssize_t got = read(fds[0], tmp, sizeof tmp);
            if (got <= 0) break; /* EOF: the child (and anything it spawned) closed the pipe */
            size_t keep = (size_t)got;
            if (keep > sizeof c->out - 1 - used) keep = sizeof c->out - 1 - used;
            memcpy(c->out + used, tmp, keep);
            used += keep;
        }
    }
    close(fds[0]);
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, killed ? 0 : WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) break;
        if (gt_now_ms() - t0 > bound_s * 1e3) {
            kill(pid, SIGKILL);
            killed = 1;
        } else {
            usleep(10000);
        }
    }
    c->elapsed_ms = gt_now_ms() - t0;
    c->out[used] = '\0';
    c->exited = !killed && WIFEXITED(status);
    c->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return 0;
}

static inline void gt_hex_encode(const uint8_t *p, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static inline int gt_hex_decode(const char *s, uint8_t *p, size_t n) {
    if (strlen(s) != 2 * n) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
        p[i] = (uint8_t)v;
    }
    return 0;
}

/* Value of "KEY=" on a line of the child's output (up to the end of that line), or NULL. */
static inline const char *gt_child_field(const gt_child_t *c, const char *key, char *buf,
                                         size_t n) {
    const char *p = strstr(c->out, key);
    if (!p) return NULL;
    p += strlen(key);
    size_t i = 0;
    while (p[i] && p[i] != '\n' && i + 1 < n) {
        buf[i] = p[i];
        i++;
    }
    buf[i] = '\0';
    return buf;
}

/* Prints the child's output, each line prefixed, for the log. */
static inline void gt_log_child(const gt_ctx_t *ctx, const char *label, const gt_child_t *c) {
    const char *p = c->out;
    while (*p) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        printf("[r%d] %s| %.*s\n", ctx->rank, label, len, p);
        if (!nl) break;
        p = nl + 1;
    }
}

/* ------------------------------------------------------------------ device-wait deadline cases
 *
 * A case that checks a device-wait deadline (a GT_TRAPS case) runs in child processes, a pair of
 * them per pair of ranks: rank 0 of each child pair waits on something that its partner never
 * signals, its kernel must trap at the deadline, and cchan_comm_check_device() must name the wait.
 * The pair's lower rank creates a unique id; the ranks all-gather them; each rank spawns itself as
 * `--gt-child KIND CHILD_RANK DEVICE HEXID`; gt_main hands that to the suite's child hooks. */

typedef struct gt_child_env {
    const char *kind;
    int rank; /* 0: waits and traps; 1: never signals */
    int device;
    unsigned deadline_ms;
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    void *user; /* the suite's state, from prepare to launch */
} gt_child_env_t;

/* prepare: on both child ranks, collectively (returns 0 or a negative status); launch: on rank 0,
 * launches the kernel that must trap (the harness checks the launch and synchronizes). */
typedef int (*gt_child_prepare_fn)(gt_child_env_t *env);
typedef void (*gt_child_launch_fn)(gt_child_env_t *env);

#define GT_CHILD_DEADLINE_MS 2000u
/* A kind that starts with "dead" has no deadline: child rank 1 exits without teardown this long
 * after the barrier, and rank 0's wait must end because its peer died. */
#define GT_CHILD_DEAD_AFTER_MS 500u

static inline int gt_child_main(int argc, char **argv, gt_child_prepare_fn prepare,
                                gt_child_launch_fn launch) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 6 || !prepare || !launch) {
        printf("GT-CHILD error=usage (or this suite has no child hooks)\n");
        return 2;
    }
    gt_child_env_t env;
    memset(&env, 0, sizeof env);
    env.kind = argv[2];
    env.rank = atoi(argv[3]);
    env.device = atoi(argv[4]);
    const int dead = !strncmp(env.kind, "dead", 4);
    env.deadline_ms = dead ? 0 : GT_CHILD_DEADLINE_MS;
    cchan_unique_id_t id;
    if (gt_hex_decode(argv[5], id.internal, sizeof id.internal)) {
        printf("GT-CHILD error=bad id\n");
        return 2;
    }
#define GT_CHILD_CHECK(call)                                                                       \
    do {                                                                                           \
        int s_ = (call);                                                                           \
        if (s_ < 0) {                                                                              \
            printf("GT-CHILD error=%s = %d (%s): %s\n", #call, s_, cchan_strerror(s_),             \
                   cchan_last_error());                                                            \
            fflush(stdout);                                                                        \
            _exit(3);                                                                              \
        }                                                                                          \
    } while (0)
    cudaError_t ce = cudaSetDevice(env.device);
    if (ce != cudaSuccess) {
        printf("GT-CHILD error=cudaSetDevice: %s\n", cudaGetErrorName(ce));
        return 3;
    }
    GT_CHILD_CHECK(cchan_bootstrap_create(&id, env.rank, 2, &env.bs));
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_CUDA;
    cfg.device = env.device;
    cfg.timeout_ms = env.deadline_ms;
    GT_CHILD_CHECK(cchan_comm_create(env.bs, &cfg, &env.comm));
    GT_CHILD_CHECK(cchan_comm_set_timeout_ms(env.comm, env.deadline_ms));
    GT_CHILD_CHECK(prepare(&env));
    GT_CHILD_CHECK(cchan_bootstrap_barrier(env.bs));
    if (dead && env.rank == 1) {
        usleep(GT_CHILD_DEAD_AFTER_MS * 1000);
        _exit(0); /* no teardown: to rank 0 this rank died */
    }
    if (env.rank == 0) {
        printf("GT-CHILD launched kind=%s deadline_ms=%u\n", env.kind, env.deadline_ms);
        double t0 = gt_now_ms();
        launch(&env);
        cudaError_t le = cudaGetLastError();
        cudaError_t se = cudaDeviceSynchronize();
        double ms = gt_now_ms() - t0;
        printf("GT-CHILD launch=%s\n", cudaGetErrorName(le));
        printf("GT-CHILD sync=%s\n", cudaGetErrorName(se));
        printf("GT-CHILD elapsed_ms=%.0f\n", ms);
        int st = cchan_comm_check_device(env.comm);
        printf("GT-CHILD check_device=%d\n", st);
        printf("GT-CHILD diag=%s\n", st ? cchan_last_error() : "");
    }
    if (!dead) GT_CHILD_CHECK(cchan_bootstrap_barrier(env.bs));
    fflush(stdout);
    _exit(0); /* rank 0's CUDA context is gone: no orderly teardown */
#undef GT_CHILD_CHECK
}

/* One child pair of gt_timeout_pair: pid is the pair's unique id, waiter 1 on its lower rank. */
/* What the waiting child must report: its kernel failed between lo_ms and hi_ms after launch and
 * cchan_comm_check_device() returned status with a diagnostic containing every string of want[]. */
typedef struct gt_child_expect {
    const char *const *want;
    int nwant;
    int status;
    double lo_ms, hi_ms;
} gt_child_expect_t;

static inline void gt_timeout_pair_run(gt_ctx_t *ctx, const char *kind, const gt_child_expect_t *x,
                                       const cchan_unique_id_t *pid, int waiter) {
    cchan_unique_id_t id;
    char hex[2 * sizeof id.internal + 1], rank_s[16], dev_s[16], kind_s[64];
    gt_hex_encode(pid->internal, sizeof pid->internal, hex);
    snprintf(rank_s, sizeof rank_s, "%d", waiter ? 0 : 1);
    snprintf(dev_s, sizeof dev_s, "%d", ctx->device);
    snprintf(kind_s, sizeof kind_s, "%s", kind);
    char exe[] = "/proc/self/exe", mode[] = "--gt-child";
    char *argv[] = {exe, mode, kind_s, rank_s, dev_s, hex, NULL};
    gt_child_t *c = (gt_child_t *)malloc(sizeof *c);
    /* Below the bootstrap's 30 s receive timeout, so a hung child fails this case on every rank
     * instead of timing out the parents' next collective. */
    const unsigned bound_s = 25;
    int rc = gt_spawn_capture(argv, bound_s, c);
    if (rc) {
        gt_fail(ctx, "%s: spawning the child failed: %s", kind, strerror(-rc));
        free(c);
        return;
    }
    char label[80];
    snprintf(label, sizeof label, "child-%s", kind);
    gt_log_child(ctx, label, c);
    GT_EXPECT(ctx, c->exited && c->exit_code == 0, "%s: child %s with code %d after %.0f ms", kind,
              c->exited ? "exited" : "was killed", c->exit_code, c->elapsed_ms);
    if (waiter) {
        char sync[128], el[64], st[64], diag[2048];
        const char *s_sync = gt_child_field(c, "GT-CHILD sync=", sync, sizeof sync);
        const char *s_el = gt_child_field(c, "GT-CHILD elapsed_ms=", el, sizeof el);
        const char *s_st = gt_child_field(c, "GT-CHILD check_device=", st, sizeof st);
        const char *s_diag = gt_child_field(c, "GT-CHILD diag=", diag, sizeof diag);
        GT_EXPECT(ctx, s_sync && strcmp(s_sync, "cudaSuccess") != 0,
                  "%s: the waiting kernel did not fail (sync=%s)", kind,
                  s_sync ? s_sync : "(none)");
        double ms = s_el ? atof(s_el) : -1;
        GT_EXPECT(ctx, ms >= x->lo_ms && ms <= x->hi_ms,
                  "%s: the kernel failed after %.0f ms; expected %.0f..%.0f ms", kind, ms, x->lo_ms,
                  x->hi_ms);
        GT_EXPECT(ctx, s_st && atoi(s_st) == x->status,
                  "%s: cchan_comm_check_device returned %s, want %d (%s)", kind,
                  s_st ? s_st : "(none)", x->status, cchan_strerror(x->status));
        for (int k = 0; k < x->nwant; k++)
            GT_EXPECT(ctx, s_diag && strstr(s_diag, x->want[k]),
                      "%s: diagnostic lacks \"%s\": \"%.1000s\"", kind, x->want[k],
                      s_diag ? s_diag : "(none)");
        if (s_diag) gt_log(ctx, "%s diagnostic after %.0f ms: %s", kind, ms, s_diag);
    }
    free(c);
}

/* In a GT_PAIRS | GT_TRAPS case: runs child pair `kind` with this round's partner (the lower rank's
 * child waits and must trap) and checks, on the lower rank, that the kernel failed near the
 * deadline with CCHAN_ERR_DEVICE_TIMEOUT and a diagnostic containing every string of want[]. */
static inline void gt_child_pair(gt_ctx_t *ctx, const char *kind, const gt_child_expect_t *x) {
    const int peer = gt_peer(ctx), waiter = ctx->rank < peer;
    cchan_unique_id_t id, ids[GT_MAX_RANKS];
    memset(&id, 0, sizeof id);
    if (waiter) {
        unsetenv("CCHAN_BOOTSTRAP_PORT"); /* the children need a port of their own */
        GT_CCHAN(cchan_get_unique_id(&id));
    }
    gt_allgather(ctx, &id, ids, sizeof id);
    const int leader = waiter ? ctx->rank : peer;
    if (!ctx->shared_gpu) {
        gt_timeout_pair_run(ctx, kind, x, &ids[leader], waiter);
        return;
    }
    /* Ranks sharing a GPU run their pairs one at a time: there a trap also ended the kernels other
     * contexts had running at that moment (time-sliced, with no diagnostic of their own: seen at 4
     * and 8 ranks on one H100), and their partners' children then waited for a dead peer. */
    for (int turn = 0; turn < ctx->nranks; turn++) {
        gt_barrier(ctx);
        if (turn == leader) gt_timeout_pair_run(ctx, kind, x, &ids[leader], waiter);
    }
    gt_barrier(ctx);
}

static inline void gt_timeout_pair(gt_ctx_t *ctx, const char *kind, const char *const *want,
                                   int nwant) {
    const gt_child_expect_t x = {want, nwant, CCHAN_ERR_DEVICE_TIMEOUT, 0.9 * GT_CHILD_DEADLINE_MS,
                                 GT_CHILD_DEADLINE_MS + 20000.0};
    gt_child_pair(ctx, kind, &x);
}

/* ------------------------------------------------------------------ main
 *
 * Every suite's main is GT_MAIN(suite): setup and teardown run once on every rank around the
 * cases (either may be NULL); cases() calls gt_case/gt_run for each case in order; the child hooks
 * serve the suite's GT_TRAPS cases (NULL if it has none). */

typedef struct gt_suite {
    const char *name;
    void (*setup)(gt_ctx_t *ctx);
    void (*cases)(gt_ctx_t *ctx);
    void (*teardown)(gt_ctx_t *ctx);
    gt_child_prepare_fn child_prepare;
    gt_child_launch_fn child_launch;
} gt_suite_t;

static inline int gt_main(const gt_suite_t *s, int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--gt-child"))
        return gt_child_main(argc, argv, s->child_prepare, s->child_launch);
    /* Never a multicast object here: the refusal is armed even if the caller forgot. */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    unsetenv("CCHAN_NVLS");
    static gt_ctx_t ctx;
    gt_init(&ctx, s->name, argc, argv);
    if (ctx.list_only) {
        s->cases(&ctx);
        return 0;
    }
    if (s->setup) s->setup(&ctx);
    s->cases(&ctx);
    if (s->teardown) s->teardown(&ctx);
    return gt_finish(&ctx);
}

#define GT_MAIN(...)                                                                               \
    int main(int argc, char **argv) {                                                              \
        static const gt_suite_t gt_suite_ = __VA_ARGS__;                                           \
        return gt_main(&gt_suite_, argc, argv);                                                    \
    }

#endif /* CCHAN_TEST_GPU_TEST_H */
