/* A simulated CUDA runtime for test_port_dma_model: just the calls the dma transport makes, over a
 * software stream that the test advances one operation at a time. Every function is static, so the
 * test that includes src/proxy/transport_dma.c links no CUDA and clashes with no real cudart.
 *
 * A stream is a FIFO of operations (copies and event records). Nothing happens at submission: a
 * copy moves its bytes, and an event becomes complete, only when mock_gpu_step() retires that
 * operation, so the test decides exactly what the "GPU" has finished when the proxy polls. */
#ifndef CCHAN_TEST_MOCK_CUDA_RUNTIME_API_H
#define CCHAN_TEST_MOCK_CUDA_RUNTIME_API_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorNotReady = 600,
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDefault = 4
} cudaMemcpyKind_t;
#define cudaHostAllocDefault 0x00u

#define cudaStreamNonBlocking 0x01u
#define cudaEventDisableTiming 0x02u

#define MOCK_MAX_OPS 4096

typedef struct mock_event {
    unsigned pending; /* records submitted but not yet retired */
} * cudaEvent_t;

typedef struct mock_op {
    void *dst;
    const void *src;
    size_t bytes;      /* a copy when event == NULL */
    cudaEvent_t event; /* an event record */
} mock_op_t;

typedef struct mock_stream {
    mock_op_t ops[MOCK_MAX_OPS];
    unsigned head, count;
} * cudaStream_t;

/* What the test inspects and steers. */
static struct {
    unsigned copies, records, stream_queries, event_queries;
    int fail_next_copy; /* the next cudaMemcpyAsync fails with cudaErrorInvalidValue */
    int live_streams, live_events, live_host_allocs;
    unsigned copies_d2h, copies_h2d; /* by kind */
} mock_cuda;

static cudaStream_t mock_current_stream;

static cudaError_t mock_push(cudaStream_t s, mock_op_t op) {
    if (s->count == MOCK_MAX_OPS) return cudaErrorInvalidValue;
    s->ops[(s->head + s->count++) % MOCK_MAX_OPS] = op;
    return cudaSuccess;
}

/* Retires up to n operations of the stream in order; returns how many it retired. */
static unsigned mock_gpu_step(cudaStream_t s, unsigned n) {
    unsigned done = 0;
    while (done < n && s->count) {
        mock_op_t *op = &s->ops[s->head];
        if (op->event)
            op->event->pending--;
        else
            memcpy(op->dst, op->src, op->bytes);
        s->head = (s->head + 1) % MOCK_MAX_OPS;
        s->count--;
        done++;
    }
    return done;
}

static cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    (void)flags;
    *s = calloc(1, sizeof **s);
    if (!*s) return cudaErrorInvalidValue;
    mock_cuda.live_streams++;
    mock_current_stream = *s;
    return cudaSuccess;
}

static cudaError_t cudaStreamDestroy(cudaStream_t s) {
    free(s);
    mock_cuda.live_streams--;
    return cudaSuccess;
}

static cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    mock_gpu_step(s, MOCK_MAX_OPS);
    return cudaSuccess;
}

static cudaError_t cudaStreamQuery(cudaStream_t s) {
    mock_cuda.stream_queries++;
    return s->count ? cudaErrorNotReady : cudaSuccess;
}

static cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    (void)flags;
    *e = calloc(1, sizeof **e);
    if (!*e) return cudaErrorInvalidValue;
    mock_cuda.live_events++;
    return cudaSuccess;
}

static cudaError_t cudaEventDestroy(cudaEvent_t e) {
    free(e);
    mock_cuda.live_events--;
    return cudaSuccess;
}

static cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    mock_op_t op = {NULL, NULL, 0, e};
    cudaError_t r = mock_push(s, op);
    if (r == cudaSuccess) {
        e->pending++;
        mock_cuda.records++;
    }
    return r;
}

static cudaError_t cudaEventQuery(cudaEvent_t e) {
    mock_cuda.event_queries++;
    return e->pending ? cudaErrorNotReady : cudaSuccess;
}

static cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind_t kind,
                                   cudaStream_t s) {
    if (mock_cuda.fail_next_copy) {
        mock_cuda.fail_next_copy = 0;
        return cudaErrorInvalidValue;
    }
    mock_op_t op = {dst, src, bytes, NULL};
    cudaError_t r = mock_push(s, op);
    if (r == cudaSuccess) {
        mock_cuda.copies++;
        mock_cuda.copies_d2h += kind == cudaMemcpyDeviceToHost;
        mock_cuda.copies_h2d += kind == cudaMemcpyHostToDevice;
    }
    return r;
}

static cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags) {
    (void)flags;
    *p = malloc(bytes);
    if (!*p) return cudaErrorInvalidValue;
    mock_cuda.live_host_allocs++;
    return cudaSuccess;
}

static cudaError_t cudaFreeHost(void *p) {
    free(p);
    mock_cuda.live_host_allocs--;
    return cudaSuccess;
}

static cudaError_t cudaGetLastError(void) { return cudaSuccess; }

/* The proxy asks for the GPU's PCI address to pin its thread near it (no GPU here). */
static inline cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int device) {
    (void)bus, (void)len, (void)device;
    return cudaErrorInvalidValue;
}

static const char *cudaGetErrorName(cudaError_t e) {
    return e == cudaErrorNotReady ? "cudaErrorNotReady"
           : e                    ? "cudaErrorInvalidValue"
                                  : "cudaSuccess";
}

static const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaErrorNotReady ? "device not ready" : e ? "invalid argument" : "no error";
}

#endif /* CCHAN_TEST_MOCK_CUDA_RUNTIME_API_H */
