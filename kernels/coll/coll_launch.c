/* cchan_coll: running one algorithm body, as a CUDA kernel on the caller's stream (coll_cuda.cu)
 * or as CPU threads on the host platform, one per block; and the grid sizes. */
#include <pthread.h>
#include <string.h>

#include "cchan/last_error.h"
#include "coll_internal.h"

/* HB grid: one block per this many bytes a round moves per rank. */
#define COLL_HB_BYTES_PER_BLOCK (32 * COLL_KiB)

static int coll_body(coll_kernel_t k, int dt, const coll_args_t *a, uint32_t block,
                     uint32_t nblocks) {
    switch (k) {
    case COLL_K_LL_ALLREDUCE: return coll_ll_allreduce_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_LL_ALLGATHER: return coll_ll_allgather_body(a, block, nblocks, 0, 1);
    case COLL_K_LL_REDUCESCATTER: return coll_ll_reducescatter_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_HB_ALLREDUCE: return coll_hb_allreduce_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_HB_ALLGATHER: return coll_hb_allgather_body(a, block, nblocks, 0, 1);
    case COLL_K_HB_REDUCESCATTER: return coll_hb_reducescatter_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_ZC_ALLREDUCE: return coll_zc_allreduce_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_SWITCH_ALLREDUCE: return coll_switch_allreduce_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_BARRIER: return coll_barrier_body(a, 0);
    case COLL_K_CE_RS: return coll_ce_rs_body(a, dt, block, nblocks, 0, 1);
    case COLL_K_AG_PUSH: return coll_ag_push_body(a, block, nblocks, 0, 1);
    case COLL_K_ZC_ALLGATHER: return coll_zc_allgather_body(a, block, nblocks, 0, 1);
    case COLL_K_ZC_REDUCESCATTER: return coll_zc_reducescatter_body(a, dt, block, nblocks, 0, 1);
    default: return CCHAN_ERR_INTERNAL;
    }
}

typedef struct coll_host_block {
    coll_kernel_t k;
    int dt;
    const coll_args_t *a;
    uint32_t block, nblocks;
    int status;
} coll_host_block_t;

static void *coll_host_thread(void *p) {
    coll_host_block_t *b = (coll_host_block_t *)p;
    b->status = coll_body(b->k, b->dt, b->a, b->block, b->nblocks);
    return NULL;
}

/* A block that failed ended a wait: by its deadline or by an abort (a dead peer, cchan_comm_abort
 * on any rank). The communicator's record names the wait and the cause; without one (another
 * wait claimed it earlier) the abort's cause is all there is to say. */
static int coll_host_failure(cchan_coll_t *c, int status, uint32_t b, const char *where) {
    int named = cchan_comm_check_device(c->comm);
    if (named == 0 && status != CCHAN_ERR_DEVICE_TIMEOUT) named = cchan_comm_check(c->comm, where);
    if (named != 0)
        return cchan_set_last_error(status, "%s: block %u: %s", where, b, cchan_last_error());
    return colli_error(status, where, "block %u failed", b);
}

/* Host platform: one CPU thread per block; returns when every block is done. */
static int coll_run_host(cchan_coll_t *c, coll_kernel_t k, int dt, const coll_args_t *a,
                         uint32_t nblocks, const char *where) {
    coll_host_block_t blocks[COLL_HOST_BLOCKS_MAX];
    pthread_t threads[COLL_HOST_BLOCKS_MAX];
    if (nblocks > COLL_HOST_BLOCKS_MAX)
        return colli_error(CCHAN_ERR_INTERNAL, where, "%u blocks", nblocks);
    uint32_t started = 0;
    int st = 0;
    for (uint32_t b = 0; b < nblocks; b++) {
        blocks[b] = (coll_host_block_t){k, dt, a, b, nblocks, 0};
        if (b + 1 == nblocks) break; /* the calling thread runs the last block */
        int e = pthread_create(&threads[b], NULL, coll_host_thread, &blocks[b]);
        if (e) {
            /* Blocks already started would wait forever for their siblings' peers: fatal. */
            st = colli_error(-e, where, "pthread_create for block %u of %u", b, nblocks);
            break;
        }
        started++;
    }
    if (st == 0) coll_host_thread(&blocks[nblocks - 1]);
    for (uint32_t b = 0; b < started; b++) pthread_join(threads[b], NULL);
    if (st) return st;
    for (uint32_t b = 0; b < nblocks; b++)
        if (blocks[b].status) return coll_host_failure(c, blocks[b].status, b, where);
    return 0;
}

int colli_run(cchan_coll_t *c, coll_kernel_t k, int dt, const coll_args_t *a, uint32_t nblocks,
              void *stream, const char *where) {
    if (c->platform == CCHAN_PLATFORM_HOST) return coll_run_host(c, k, dt, a, nblocks, where);
    return colli_cuda_launch(c->device, k, dt, a, nblocks, c->nthreads, (int)a->pdl, stream);
}

/* HB grid: one block per COLL_HB_BYTES_PER_BLOCK of what a round moves per rank, within limits. */
uint32_t colli_hb_grid(const cchan_coll_t *c, size_t bytes_per_rank) {
    size_t g = (bytes_per_rank + COLL_HB_BYTES_PER_BLOCK - 1) / COLL_HB_BYTES_PER_BLOCK;
    if (c->platform == CCHAN_PLATFORM_HOST) g = c->hb_blocks;
    if (g < 1) g = 1;
    if (g > c->hb_blocks) g = c->hb_blocks;
    return (uint32_t)g;
}

/* Zero-copy grid: one block per zc_block_bytes of what a rank reduces, within limits. */
uint32_t colli_zc_grid(const cchan_coll_t *c, size_t bytes) {
    if (c->platform == CCHAN_PLATFORM_HOST) return c->hb_blocks;
    uint64_t per = (uint64_t)c->param[COLL_P_ZC_BLOCK_BYTES];
    uint64_t g = (bytes + per - 1) / per;
    if (g < 1) g = 1;
    if (g > c->hb_blocks) g = c->hb_blocks;
    return (uint32_t)g;
}

int colli_run_barrier(cchan_coll_t *c, const coll_args_t *a, void *stream, const char *where) {
    if (c->platform == CCHAN_PLATFORM_HOST) return coll_run_host(c, COLL_K_BARRIER, 0, a, 1, where);
    return colli_cuda_launch(c->device, COLL_K_BARRIER, 0, a, 1, 32, (int)a->pdl, stream);
}
