/* cchan-coll-bench on the host platform: buffers are host memory, operations run on CPU threads and
 * return when done, so a wall clock around them times them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll_bench.h"

/* Buffers come from cchan_mem_alloc: shared memory the peers can map, so cchan_coll_register
 * can hand them to the zero-copy algorithms as it would GPU memory. */
typedef struct host_buf {
    struct host_buf *next;
    cchan_mem_t *mem;
} host_buf_t;
static cchan_comm_t *host_comm;
static host_buf_t *host_bufs;

static int host_init(ccb_ctx_t *ctx) {
    host_comm = ctx->comm;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(ctx->device, sizeof ctx->device, "host platform (%ld CPUs)", ncpu);
    return 0;
}
static void host_fini(ccb_ctx_t *ctx) { (void)ctx; }
static void *host_alloc(size_t bytes) {
    host_buf_t *b = (host_buf_t *)calloc(1, sizeof *b);
    if (!b || cchan_mem_alloc(host_comm, bytes, 0, &b->mem) < 0) {
        free(b);
        return NULL;
    }
    b->next = host_bufs;
    host_bufs = b;
    return cchan_mem_ptr(b->mem);
}
static void host_free(void *p) {
    for (host_buf_t **pp = &host_bufs; *pp; pp = &(*pp)->next) {
        if (cchan_mem_ptr((*pp)->mem) != p) continue;
        host_buf_t *b = *pp;
        *pp = b->next;
        cchan_mem_destroy(b->mem);
        free(b);
        return;
    }
}
static int host_copy(void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    return 0;
}
static int host_fill(void *p, uint64_t count, int dtype, uint32_t seed, int rank, uint64_t base) {
    for (uint64_t i = 0; i < count; i++) {
        uint32_t b = ccb_bits(ccb_value(seed, rank, base + i), dtype);
        if (dtype == CCHAN_COLL_F32)
            ((uint32_t *)p)[i] = b;
        else
            ((uint16_t *)p)[i] = (uint16_t)b;
    }
    return 0;
}
static int host_poison(void *p, size_t bytes) {
    memset(p, 0xA5, bytes);
    return 0;
}
static int host_sync(void) { return 0; }

static double host_time(ccb_ctx_t *ctx, ccb_launch_fn fn, void *arg, int graph) {
    (void)graph; /* no graphs on the host platform */
    const ccb_opts_t *o = &ctx->opt;
    for (int i = 0; i < o->warmup; i++)
        if (fn(arg, NULL) < 0) return -1;
    double v[64];
    int reps = o->reps < 64 ? o->reps : 64;
    for (int r = 0; r < reps; r++) {
        ccb_check_status(ctx, cchan_bootstrap_barrier(ctx->bs), "barrier");
        double t0 = ccb_now();
        for (int i = 0; i < o->iters; i++)
            if (fn(arg, NULL) < 0) return -1;
        v[r] = (ccb_now() - t0) * 1e6 / o->iters;
    }
    return ccb_median(v, reps);
}

ccb_dev_t ccb_dev_host = {"host",    host_init, host_fini,   host_alloc, host_free, host_copy,
                          host_copy, host_fill, host_poison, host_sync,  NULL,      host_time};
