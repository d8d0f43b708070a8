/* fused_rmsnorm_check: runs cchan_fused_rmsnorm on random bf16 data and checks every rank's
 * residual_out and y against a float64 reference computed here from every rank's inputs.
 *
 *   cchan-run -n 2 build/test/fused/fused_rmsnorm_check            one case on the
 * GPUs cchan-run -n 2 .../fused_rmsnorm_check --tokens 128 --hidden 8192 --proto hb cchan-run -n
 * 2 .../fused_rmsnorm_check --host --check   the case matrix on the host platform
 *
 * Checks: residual_out is bit-exact (the all-reduce and the residual add of bf16 values in this
 * range are exact in f32, so the rounding points fix the result); y is within one bf16 ulp of the
 * reference; all ranks hold bit-identical outputs. Exit 0 when every case passed, 1 otherwise, 77
 * when the machine lacks what was asked for.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef CCHAN_FUSED_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "cchan_fused.h"
#include "cchan_test.h"

static int rank = -1;
static cchan_platform_t platform;

/* ---------------------------------------------------------------- buffers on either platform */

static void *buf_alloc(size_t bytes) {
#ifdef CCHAN_FUSED_HAVE_CUDA
    if (platform == CCHAN_PLATFORM_CUDA) {
        void *p = NULL;
        if (cudaMalloc(&p, bytes) != cudaSuccess) return NULL;
        return p;
    }
#endif
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}
static void buf_free(void *p) {
#ifdef CCHAN_FUSED_HAVE_CUDA
    if (platform == CCHAN_PLATFORM_CUDA) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}
static void to_dev(void *dst, const void *src, size_t bytes) {
#ifdef CCHAN_FUSED_HAVE_CUDA
    if (platform == CCHAN_PLATFORM_CUDA) {
        if (cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess) exit(1);
        return;
    }
#endif
    memcpy(dst, src, bytes);
}
static void to_host(void *dst, const void *src, size_t bytes) {
#ifdef CCHAN_FUSED_HAVE_CUDA
    if (platform == CCHAN_PLATFORM_CUDA) {
        if (cudaDeviceSynchronize() != cudaSuccess ||
            cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
            fprintf(stderr, "rank %d: CUDA error after the kernel\n", rank);
            exit(1);
        }
        return;
    }
#endif
    memcpy(dst, src, bytes);
}

/* ---------------------------------------------------------------- data and reference */

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
/* A bf16 in +-[lo, lo * 16) with a random mantissa. */
static uint16_t rand_bf16(uint64_t seed, uint64_t i, float lo) {
    uint64_t h = mix(seed ^ mix(i));
    float mag = lo * (1.0f + 15.0f * (float)(h & 0xffffff) / 16777216.0f);
    cchan_bf16_t b = cchan_f32_to_bf16((h >> 63) ? -mag : mag);
    return b.bits;
}
static float bf(uint16_t b) {
    cchan_bf16_t v = {b};
    return cchan_bf16_to_f32(v);
}
static double round_bf16(double v) { return (double)bf(cchan_f32_to_bf16((float)v).bits); }

struct fused_case {
    uint32_t tokens, hidden;
    cchan_fused_proto_t proto;
    int in_place; /* residual_out == residual and y == x */
    int launches; /* back-to-back launches with fresh data (epoch and parity reuse) */
    int spread;   /* LL rows spread over several blocks (cchan_fused_rmsnorm_set_split 0) */
};

/* Runs one case; returns mismatches on this rank. */
static long run_case(cchan_comm_t *comm, cchan_fused_rmsnorm_t *f, const struct fused_case *c,
                     uint64_t seed, int nranks) {
    const size_t n = (size_t)c->tokens * c->hidden, bytes = n * 2;
    const float eps = 1e-6f;
    uint16_t *hx = malloc(bytes * (size_t)nranks), *hres = malloc(bytes),
             *hw = malloc(c->hidden * 2);
    uint16_t *hout = malloc(bytes), *hy = malloc(bytes);
    void *x = buf_alloc(bytes), *res = buf_alloc(bytes), *w = buf_alloc(c->hidden * 2);
    void *out = c->in_place ? res : buf_alloc(bytes), *y = c->in_place ? x : buf_alloc(bytes);
    if (!hx || !hres || !hw || !hout || !hy || !x || !res || !w || !out || !y) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        exit(1);
    }
    long bad = 0;
    CT_OK(cchan_fused_rmsnorm_set_split(f, c->spread ? 0 : 1));
    for (int it = 0; it < c->launches; it++) {
        uint64_t s = mix(seed + (uint64_t)it * 7919u);
        for (int r = 0; r < nranks; r++)
            for (size_t i = 0; i < n; i++)
                hx[(size_t)r * n + i] = rand_bf16(s + (uint64_t)r, i, 0.25f);
        for (size_t i = 0; i < n; i++) hres[i] = rand_bf16(s ^ 0xabcdefu, i, 0.125f);
        for (uint32_t i = 0; i < c->hidden; i++) hw[i] = rand_bf16(s ^ 0x5151u, i, 0.0625f);
        to_dev(x, hx + (size_t)rank * n, bytes);
        to_dev(res, hres, bytes);
        to_dev(w, hw, c->hidden * 2u);
        CT_OK(cchan_fused_rmsnorm_run(f, x, res, w, eps, out, y, c->tokens, c->proto, NULL));
        to_host(hout, out, bytes);
        to_host(hy, y, bytes);
        for (uint32_t t = 0; t < c->tokens; t++) {
            double ss = 0;
            double *h = malloc(sizeof(double) * c->hidden);
            for (uint32_t j = 0; j < c->hidden; j++) {
                size_t i = (size_t)t * c->hidden + j;
                double a = 0;
                for (int r = 0; r < nranks; r++) a += bf(hx[(size_t)r * n + i]);
                h[j] = round_bf16(round_bf16(a) + bf(hres[i]));
                ss += h[j] * h[j];
                if (bf(hout[i]) != h[j]) {
                    if (bad < 5)
                        fprintf(stderr, "rank %d: token %u col %u: residual_out %g, want %g\n",
                                rank, t, j, bf(hout[i]), h[j]);
                    bad++;
                }
            }
            double inv = 1.0 / sqrt(ss / c->hidden + eps);
            for (uint32_t j = 0; j < c->hidden; j++) {
                size_t i = (size_t)t * c->hidden + j;
                double want = h[j] * inv * bf(hw[j]);
                if (fabs(bf(hy[i]) - want) > fabs(want) * (1.0 / 128) + 1e-30) {
                    if (bad < 5)
                        fprintf(stderr, "rank %d: token %u col %u: y %g, want %g\n", rank, t, j,
                                bf(hy[i]), want);
                    bad++;
                }
            }
            free(h);
        }
        /* Every rank must hold the same bits. */
        uint64_t hash = 0xcbf29ce484222325ull, *all = malloc(sizeof(uint64_t) * (size_t)nranks);
        for (size_t i = 0; i < n; i++)
            hash = (hash ^ ((uint64_t)hy[i] << 16 ^ hout[i])) * 0x100000001b3ull;
        CT_OK(cchan_bootstrap_allgather(cchan_comm_bootstrap(comm), &hash, all, sizeof hash));
        for (int r = 0; r < nranks; r++)
            if (all[r] != hash) {
                if (bad < 5) fprintf(stderr, "rank %d: outputs differ from rank %d's\n", rank, r);
                bad++;
            }
        free(all);
    }
    if (!c->in_place) {
        buf_free(out);
        buf_free(y);
    }
    buf_free(x);
    buf_free(res);
    buf_free(w);
    free(hx);
    free(hres);
    free(hw);
    free(hout);
    free(hy);
    return bad;
}

int main(int argc, char **argv) {
    int force_host = 0, matrix = 0;
    struct fused_case one = {8, 4096, CCHAN_FUSED_AUTO, 0, 3, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--host"))
            force_host = 1;
        else if (!strcmp(argv[i], "--check"))
            matrix = 1;
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            one.tokens = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hidden") && i + 1 < argc)
            one.hidden = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--proto") && i + 1 < argc) {
            const char *p = argv[++i];
            one.proto = !strcmp(p, "ll")   ? CCHAN_FUSED_LL
                        : !strcmp(p, "hb") ? CCHAN_FUSED_HB
                                           : CCHAN_FUSED_AUTO;
        } else {
            fprintf(stderr,
                    "usage: fused_rmsnorm_check [--host] [--check] [--tokens N] [--hidden H] "
                    "[--proto auto|ll|hb]\n");
            return 2;
        }
    }
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    if (force_host) cfg.platform = CCHAN_PLATFORM_HOST;
    CT_OK(cchan_bootstrap_create_from_env(&bs)); /* cchan-run, torchrun, mpirun or srun */
    CT_OK(cchan_comm_create(bs, &cfg, &comm));
    rank = ct_rank = cchan_comm_rank(comm);
    int nranks = cchan_comm_size(comm);
    platform = cchan_comm_platform(comm);
    if (cchan_env_timeout_ms() == 0) CT_OK(cchan_comm_set_timeout_ms(comm, 30000));
    if (platform != CCHAN_PLATFORM_HOST && platform != CCHAN_PLATFORM_CUDA) {
        if (rank == 0) printf("fused_rmsnorm_check: needs CUDA or --host (skipped)\n");
        cchan_comm_destroy(comm);
        return 77;
    }
#ifdef CCHAN_FUSED_HAVE_CUDA
    if (platform == CCHAN_PLATFORM_CUDA && cudaSetDevice(cchan_comm_device(comm)) != cudaSuccess)
        return 1;
#endif

    struct fused_case cases[64];
    int ncases = 0;
    if (matrix) {
        static const uint32_t hiddens[] = {8, 200, 4096};
        static const uint32_t tokens[] = {1, 3, 17};
        for (size_t h = 0; h < 3; h++)
            for (size_t t = 0; t < 3; t++)
                for (int p = CCHAN_FUSED_LL; p <= CCHAN_FUSED_HB; p++)
                    cases[ncases++] = (struct fused_case){
                        tokens[t], hiddens[h], (cchan_fused_proto_t)p, (int)(t & 1), 3, 0};
        /* Spread rows: two host "blocks" share a 1-token row and add their partial sums. */
        cases[ncases++] = (struct fused_case){1, 200, CCHAN_FUSED_LL, 0, 5, 1};
        cases[ncases++] = (struct fused_case){1, 200, CCHAN_FUSED_LL, 1, 5, 1};
        cases[ncases++] = (struct fused_case){5, 64, CCHAN_FUSED_AUTO, 0, 20, 0};
    } else {
        cases[ncases++] = one;
    }
    uint32_t max_tokens = 1, max_hidden = 8;
    for (int i = 0; i < ncases; i++) {
        if (cases[i].tokens > max_tokens) max_tokens = cases[i].tokens;
        if (cases[i].hidden > max_hidden) max_hidden = cases[i].hidden;
    }
    long total_bad = 0;
    /* One object per hidden size (hidden is fixed at creation), reused across cases. */
    for (int i = 0; i < ncases; i++) {
        if (i > 0 && cases[i].hidden == cases[i - 1].hidden) continue;
        cchan_fused_rmsnorm_t *f;
        CT_OK(cchan_fused_rmsnorm_create(comm, max_tokens, cases[i].hidden, &f));
        for (int j = i; j < ncases && cases[j].hidden == cases[i].hidden; j++) {
            long bad = run_case(comm, f, &cases[j], 0x1234u + (uint64_t)j, nranks);
            total_bad += bad;
            if (rank == 0)
                printf("%s tokens %u hidden %u proto %s%s%s x%d\n", bad ? "FAIL" : "ok  ",
                       cases[j].tokens, cases[j].hidden,
                       cchan_fused_proto_name(cases[j].proto == CCHAN_FUSED_AUTO
                                                  ? cchan_fused_rmsnorm_select(f, cases[j].tokens)
                                                  : cases[j].proto),
                       cases[j].in_place ? " in-place" : "", cases[j].spread ? " spread" : "",
                       cases[j].launches);
        }
        CT_OK(cchan_fused_rmsnorm_destroy(f));
    }
    long *all = calloc((size_t)nranks, sizeof *all), sum = 0;
    if (!all) return 1;
    CT_OK(cchan_bootstrap_allgather(cchan_comm_bootstrap(comm), &total_bad, all, sizeof total_bad));
    for (int r = 0; r < nranks; r++) sum += all[r];
    free(all);
    if (rank == 0)
        printf("fused_rmsnorm_check: %d ranks, %s: %s\n", nranks,
               platform == CCHAN_PLATFORM_CUDA ? "cuda" : "host", sum ? "FAILED" : "OK");
    CT_OK(cchan_comm_destroy(comm));
    return sum ? 1 : 0;
}
