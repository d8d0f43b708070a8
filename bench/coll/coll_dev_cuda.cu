/* cchan-coll-bench on CUDA: device buffers, a fill kernel, CUDA-event timing with or without a
 * CUDA graph. */
#include <cuda_runtime.h>
#include <stdio.h>

#include "coll_bench.h"

static cudaStream_t stream;

static int cuda_fail(const char *what, cudaError_t e) {
    fprintf(stderr, "cchan-coll-bench: %s: %s\n", what, cudaGetErrorString(e));
    return -1;
}
#define CCB_CUDA_CALL(call)                                                                        \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return cuda_fail(#call, e_);                                        \
    } while (0)

static int cuda_init(ccb_ctx_t *ctx) {
    int dev = cchan_comm_device(ctx->comm);
    CCB_CUDA_CALL(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CCB_CUDA_CALL(cudaGetDeviceProperties(&prop, dev));
    snprintf(ctx->device, sizeof ctx->device, "%.100s x%d", prop.name, ctx->nranks);
    CCB_CUDA_CALL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ccb_dev_cuda.stream = (void *)stream;
    return 0;
}
static void cuda_fini(ccb_ctx_t *ctx) {
    (void)ctx;
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
}
static void *cuda_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return NULL;
    return p;
}
static void cuda_free(void *p) { cudaFree(p); }
static int cuda_h2d(void *dst, const void *src, size_t bytes) {
    CCB_CUDA_CALL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    CCB_CUDA_CALL(cudaStreamSynchronize(stream));
    return 0;
}
static int cuda_d2h(void *dst, const void *src, size_t bytes) {
    CCB_CUDA_CALL(cudaStreamSynchronize(stream));
    CCB_CUDA_CALL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
    CCB_CUDA_CALL(cudaStreamSynchronize(stream));
    return 0;
}

__global__ void ccb_fill_kernel(void *p, uint64_t count, int dtype, uint32_t seed, int rank,
                                uint64_t base) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < count;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint32_t b = ccb_bits(ccb_value(seed, rank, base + i), dtype);
        if (dtype == CCHAN_COLL_F32)
            ((uint32_t *)p)[i] = b;
        else
            ((uint16_t *)p)[i] = (uint16_t)b;
    }
}
static int cuda_fill(void *p, uint64_t count, int dtype, uint32_t seed, int rank, uint64_t base) {
    if (count == 0) return 0;
    uint64_t blocks = (count + 511) / 512;
    unsigned grid = blocks < 1024 ? (unsigned)blocks : 1024u;
    ccb_fill_kernel<<<grid, 512, 0, stream>>>(p, count, dtype, seed, rank, base);
    CCB_CUDA_CALL(cudaGetLastError());
    CCB_CUDA_CALL(cudaStreamSynchronize(stream));
    return 0;
}
static int cuda_poison(void *p, size_t bytes) {
    CCB_CUDA_CALL(cudaMemsetAsync(p, 0xA5, bytes, stream));
    CCB_CUDA_CALL(cudaStreamSynchronize(stream));
    return 0;
}
static int cuda_sync(void) {
    CCB_CUDA_CALL(cudaStreamSynchronize(stream));
    return 0;
}

static double cuda_time(ccb_ctx_t *ctx, ccb_launch_fn fn, void *arg, int graph) {
    const ccb_opts_t *o = &ctx->opt;
    cudaEvent_t start, stop;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    double v[1024];
    double result = -1;
    int reps = graph ? o->graph_launches : o->reps;
    if (reps > 1024) reps = 1024;
    if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) return -1;
    for (int i = 0; i < o->warmup; i++)
        if (fn(arg, stream) < 0) goto out;
    if (cudaStreamSynchronize(stream) != cudaSuccess) goto out;
    if (graph) {
        if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) goto out;
        int bad = 0;
        for (int i = 0; i < o->iters && !bad; i++) bad = fn(arg, stream) < 0;
        cudaError_t e = cudaStreamEndCapture(stream, &g);
        if (bad || e != cudaSuccess) {
            if (e != cudaSuccess) cuda_fail("graph capture", e);
            goto out;
        }
        if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) goto out;
        if (cudaGraphLaunch(ge, stream) != cudaSuccess) goto out; /* upload and warm */
        if (cudaStreamSynchronize(stream) != cudaSuccess) goto out;
    }
    for (int r = 0; r < reps; r++) {
        /* One untimed operation first: it completes on every GPU at about the same moment, so the
         * ranks' timed sections start together however late each CPU enqueued them. */
        if (fn(arg, stream) < 0) goto out;
        cudaEventRecord(start, stream);
        if (graph) {
            if (cudaGraphLaunch(ge, stream) != cudaSuccess) goto out;
        } else {
            for (int i = 0; i < o->iters; i++)
                if (fn(arg, stream) < 0) goto out;
        }
        cudaEventRecord(stop, stream);
        cudaError_t e = cudaEventSynchronize(stop);
        if (e != cudaSuccess) {
            cuda_fail("timed run", e);
            goto out;
        }
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        v[r] = (double)ms * 1e3 / o->iters;
    }
    result = ccb_median(v, reps);
out:
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return result;
}

ccb_dev_t ccb_dev_cuda = {"cuda",   cuda_init, cuda_fini,   cuda_alloc, cuda_free, cuda_h2d,
                          cuda_d2h, cuda_fill, cuda_poison, cuda_sync,  NULL,      cuda_time};
