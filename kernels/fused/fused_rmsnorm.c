/* cchan_fused_rmsnorm: setup (scratch, channels, semaphores) and the host-platform execution. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan/last_error.h"
#include "fused_rmsnorm_internal.h"

/* Up to this many bytes of x per rank the LL protocol wins: it saves the signal round trip at the
 * price of twice the bytes on the wire (docs/tuning.md, "Fused RMSNorm"). */
#define CCHAN_FUSED_LL_MAX_BYTES (256u << 10)

struct cchan_fused_rmsnorm {
    cchan_comm_t *comm;
    cchan_platform_t platform;
    int rank, nranks;
    uint32_t max_tokens, hidden, nchan;
    uint64_t ll_offset;
    cchan_mem_t *scratch;
    cchan_mem_t **peers; /* [nranks]; peers[rank] == scratch */
    cchan_sem_set_t *sems;
    cchan_memory_channel_t *chans;     /* host copy, [nranks * nchan] */
    cchan_memory_channel_t *dev_chans; /* what the kernel reads (== chans on the host) */
    uint32_t *state;                   /* launch epoch and finished-block count */
    uint64_t *partials;                /* per row and slice: flag and partial sum of squares */
    uint32_t split;                    /* blocks per row for LL; 0: spread per call */
};

const char *cchan_fused_rmsnorm_last_error(void) { return cchan_last_error(); }

/* Every message goes into the thread's one last-error message (cchan/last_error.h). */
int cchan_fused_error(int status, const char *fmt, ...) {
    char msg[1024]; /* longer: the whole message is cut, with "..." */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cchan_set_last_error(status, "%s", msg);
}

static int cchan_error(int status, const char *what) {
    return cchan_fused_error(status, "%s: %s: %s", what, cchan_strerror(status),
                             cchan_last_error());
}

const char *cchan_fused_proto_name(cchan_fused_proto_t proto) {
    switch (proto) {
    case CCHAN_FUSED_AUTO: return "auto";
    case CCHAN_FUSED_LL: return "ll";
    case CCHAN_FUSED_HB: return "hb";
    }
    return "?";
}

cchan_fused_proto_t cchan_fused_rmsnorm_select(const cchan_fused_rmsnorm_t *f, uint32_t tokens) {
    if (!f)
        return (cchan_fused_proto_t)cchan_fused_error(-EINVAL,
                                                      "cchan_fused_rmsnorm_select: f is NULL");
    uint64_t bytes = (uint64_t)tokens * f->hidden * 2u;
    return bytes <= CCHAN_FUSED_LL_MAX_BYTES ? CCHAN_FUSED_LL : CCHAN_FUSED_HB;
}

static void release(cchan_fused_rmsnorm_t *f) {
#ifdef CCHAN_FUSED_HAVE_CUDA
    if (f->platform == CCHAN_PLATFORM_CUDA && f->dev_chans)
        cchan_fused_gpu_teardown(f->dev_chans, f->state, f->partials);
#endif
    if (f->platform != CCHAN_PLATFORM_CUDA) {
        free(f->state);
        free(f->partials);
    }
    free(f->chans);
    if (f->sems) cchan_sem_set_destroy(f->sems);
    if (f->peers) {
        for (int r = 0; r < f->nranks; r++)
            if (f->peers[r] && r != f->rank) cchan_mem_destroy(f->peers[r]);
        free(f->peers);
    }
}

int cchan_fused_rmsnorm_create(cchan_comm_t *comm, uint32_t max_tokens, uint32_t hidden,
                               cchan_fused_rmsnorm_t **out) {
    cchan_clear_last_error();
    if (!comm || !out || max_tokens == 0 || hidden == 0 || hidden % CCHAN_FUSED_VEC_ELEMS ||
        hidden > 65536)
        return cchan_fused_error(
            -EINVAL,
            "cchan_fused_rmsnorm_create: need comm, out, max_tokens >= 1 "
            "and hidden a multiple of 8 up to 65536 (got %u tokens, hidden %u)",
            max_tokens, hidden);
    int alive = cchan_comm_check(comm, "cchan_fused_rmsnorm_create");
    if (alive) return alive;
    cchan_platform_t platform = cchan_comm_platform(comm);
    if (platform != CCHAN_PLATFORM_HOST && platform != CCHAN_PLATFORM_CUDA)
        return cchan_fused_error(CCHAN_ERR_UNSUPPORTED,
                                 "cchan_fused_rmsnorm_create: platform %d is not supported "
                                 "(CUDA and host only)",
                                 (int)platform);
#ifndef CCHAN_FUSED_HAVE_CUDA
    if (platform == CCHAN_PLATFORM_CUDA)
        return cchan_fused_error(CCHAN_ERR_UNSUPPORTED,
                                 "cchan_fused_rmsnorm_create: built without CUDA");
#else
    /* before any kernel of this object can run (cchan_fused_gpu_preload says why) */
    if (platform == CCHAN_PLATFORM_CUDA) {
        int loaded = cchan_fused_gpu_preload(cchan_comm_device(comm));
        if (loaded < 0) return loaded;
    }
#endif
    cchan_fused_rmsnorm_t *f = (cchan_fused_rmsnorm_t *)calloc(1, sizeof *f);
    if (!f) return cchan_fused_error(-ENOMEM, "cchan_fused_rmsnorm_create: out of memory");
    f->comm = comm;
    f->platform = platform;
    f->rank = cchan_comm_rank(comm);
    f->nranks = cchan_comm_size(comm);
    if (f->nranks > CCHAN_FUSED_MAX_RANKS) {
        free(f);
        return cchan_fused_error(
            CCHAN_ERR_UNSUPPORTED,
            "cchan_fused_rmsnorm_create: %d ranks; at most %d (GPUs of one host)",
            cchan_comm_size(comm), CCHAN_FUSED_MAX_RANKS);
    }
    f->max_tokens = max_tokens;
    f->hidden = hidden;
    f->split = 1; /* faster than spreading rows where measured (docs/tuning.md, "Fused RMSNorm") */
    f->nchan = platform == CCHAN_PLATFORM_CUDA ? CCHAN_FUSED_GPU_BLOCKS : CCHAN_FUSED_HOST_BLOCKS;
    uint64_t slots = 2ull * (uint64_t)f->nranks * max_tokens;
    f->ll_offset = slots * cchan_fused_hb_row_bytes(hidden);
    uint64_t bytes = f->ll_offset + slots * cchan_fused_ll_row_bytes(hidden);

    int st = cchan_mem_alloc(comm, bytes, 0, &f->scratch);
    if (st < 0) {
        free(f);
        return cchan_error(st, "cchan_fused_rmsnorm_create: scratch");
    }
    f->peers = (cchan_mem_t **)calloc((size_t)f->nranks, sizeof *f->peers);
    f->chans = (cchan_memory_channel_t *)calloc((size_t)f->nranks * f->nchan, sizeof *f->chans);
    if (!f->peers || !f->chans) {
        st = cchan_fused_error(-ENOMEM, "cchan_fused_rmsnorm_create: out of memory");
        goto fail;
    }
    st = cchan_mem_exchange(comm, f->scratch, f->peers);
    if (st < 0) {
        free(f->peers);
        f->peers = NULL;
        st = cchan_error(st, "cchan_fused_rmsnorm_create: scratch exchange");
        goto fail;
    }
    st = cchan_sem_set_create(comm, (int)f->nchan, 0, &f->sems);
    if (st < 0) {
        st = cchan_error(st, "cchan_fused_rmsnorm_create: semaphores");
        goto fail;
    }
    for (int p = 0; p < f->nranks; p++) {
        if (p == f->rank) continue;
        for (uint32_t b = 0; b < f->nchan; b++) {
            st = cchan_memory_channel_init(comm, f->sems, p, (int)b, f->peers[p], f->scratch,
                                           f->scratch, &f->chans[(size_t)p * f->nchan + b]);
            if (st < 0) {
                st = cchan_error(st, "cchan_fused_rmsnorm_create: memory channel");
                goto fail;
            }
        }
    }
    if (platform == CCHAN_PLATFORM_CUDA) {
#ifdef CCHAN_FUSED_HAVE_CUDA
        st = cchan_fused_gpu_setup(f->chans, (size_t)f->nranks * f->nchan,
                                   (size_t)max_tokens * CCHAN_FUSED_MAX_SPLIT,
                                   cchan_comm_device(comm), &f->dev_chans, &f->state, &f->partials);
        if (st < 0) goto fail;
#endif
    } else {
        f->dev_chans = f->chans;
        f->state = (uint32_t *)calloc(2, sizeof *f->state);
        f->partials =
            (uint64_t *)calloc((size_t)max_tokens * CCHAN_FUSED_MAX_SPLIT, sizeof *f->partials);
        if (!f->state || !f->partials) {
            st = cchan_fused_error(-ENOMEM, "cchan_fused_rmsnorm_create: out of memory");
            goto fail;
        }
    }
    *out = f;
    return 0;
fail:
    /* Collective failure paths are best effort: a rank that failed alone leaves its peers to fail
     * at the next collective step with a timeout. */
    release(f);
    cchan_mem_destroy(f->scratch);
    free(f);
    return st;
}

int cchan_fused_rmsnorm_destroy(cchan_fused_rmsnorm_t *f) {
    if (!f) return 0;
    release(f);
    /* Every peer must have unmapped this rank's scratch before it is freed. */
    int st = cchan_bootstrap_barrier(cchan_comm_bootstrap(f->comm));
    int st2 = cchan_mem_destroy(f->scratch);
    free(f);
    if (st < 0) return cchan_error(st, "cchan_fused_rmsnorm_destroy: barrier");
    if (st2 < 0) return cchan_error(st2, "cchan_fused_rmsnorm_destroy: scratch");
    return 0;
}

/* ---------------------------------------------------------------- host platform */

struct host_block {
    const cchan_fused_rmsnorm_args_t *a;
    uint32_t epoch, block, nblocks;
    int status;
};

static void *host_block_run(void *p) {
    struct host_block *hb = (struct host_block *)p;
    cchan_fused_send(hb->a, hb->epoch, hb->block, hb->nblocks, 0, 1);
    int st = CCHAN_OK;
    if (hb->a->proto == CCHAN_FUSED_PROTO_HB) st = cchan_fused_hb_sync(hb->a, hb->block, 0);
    if (st == CCHAN_OK)
        st = cchan_fused_compute(hb->a, hb->epoch, hb->block, hb->nblocks, 0, 1, NULL);
    hb->status = st;
    return NULL;
}

static int host_run(const cchan_fused_rmsnorm_args_t *a, uint32_t *state) {
    uint32_t units = a->tokens * a->split, nblocks = units < a->nchan ? units : a->nchan;
    pthread_t threads[CCHAN_FUSED_HOST_BLOCKS];
    struct host_block blocks[CCHAN_FUSED_HOST_BLOCKS];
    uint32_t started = 0;
    int st = 0;
    for (uint32_t b = 0; b < nblocks; b++) {
        blocks[b] = (struct host_block){a, state[0], b, nblocks, 0};
        if (pthread_create(&threads[b], NULL, host_block_run, &blocks[b]) != 0) {
            st = cchan_fused_error(CCHAN_ERR_SYSTEM, "cchan_fused_rmsnorm_run: pthread_create");
            break;
        }
        started++;
    }
    for (uint32_t b = 0; b < started; b++) {
        pthread_join(threads[b], NULL);
        if (blocks[b].status < 0 && st == 0)
            st = cchan_fused_error(blocks[b].status, "cchan_fused_rmsnorm_run: block %u: %s%s", b,
                                   cchan_strerror(blocks[b].status),
                                   blocks[b].status == CCHAN_ERR_DEVICE_TIMEOUT
                                       ? " (a peer did not send its rows in time)"
                                       : "");
    }
    state[0]++;
    return st;
}

/* LL: blocks per row. Spreading (split 0) gives small token counts up to nchan blocks (more SMs
 * storing to the peer, less work per block); the blocks of a row then add their partial sums of
 * squares through device memory. */
static uint32_t split_for(const cchan_fused_rmsnorm_t *f, uint32_t tokens) {
    uint32_t nvec = f->hidden / CCHAN_FUSED_VEC_ELEMS;
    uint32_t s = f->split ? f->split : f->nchan / tokens;
    if (s > CCHAN_FUSED_MAX_SPLIT) s = CCHAN_FUSED_MAX_SPLIT;
    if (s > nvec) s = nvec;
    /* Split blocks wait for each other: all of them must fit in one wave of nchan blocks. */
    while (s > 1 && (uint64_t)tokens * s > f->nchan) s--;
    return s ? s : 1;
}

int cchan_fused_rmsnorm_set_split(cchan_fused_rmsnorm_t *f, uint32_t split) {
    if (!f || split > CCHAN_FUSED_MAX_SPLIT)
        return cchan_fused_error(-EINVAL, "cchan_fused_rmsnorm_set_split: split %u (0..%d)", split,
                                 CCHAN_FUSED_MAX_SPLIT);
    f->split = split;
    return 0;
}

int cchan_fused_rmsnorm_run(cchan_fused_rmsnorm_t *f, const void *x, const void *residual,
                            const void *weight, float eps, void *residual_out, void *y,
                            uint32_t tokens, cchan_fused_proto_t proto, void *stream) {
    cchan_clear_last_error();
    if (!f || !x || !residual || !weight || !residual_out || !y || tokens == 0 ||
        tokens > f->max_tokens ||
        (proto != CCHAN_FUSED_AUTO && proto != CCHAN_FUSED_LL && proto != CCHAN_FUSED_HB))
        return cchan_fused_error(-EINVAL,
                                 "cchan_fused_rmsnorm_run: need every buffer, 1 <= tokens <= %u "
                                 "(got %u) and a known protocol",
                                 f ? f->max_tokens : 0, tokens);
    if (((uintptr_t)x | (uintptr_t)residual | (uintptr_t)weight | (uintptr_t)residual_out |
         (uintptr_t)y) &
        15u)
        return cchan_fused_error(-EINVAL,
                                 "cchan_fused_rmsnorm_run: buffers must be 16-byte aligned");
    int alive = cchan_comm_check(f->comm, "cchan_fused_rmsnorm_run");
    if (alive) return alive;
    if (proto == CCHAN_FUSED_AUTO) proto = cchan_fused_rmsnorm_select(f, tokens);
    cchan_fused_rmsnorm_args_t a;
    memset(&a, 0, sizeof a);
    a.chans = f->dev_chans;
    a.state = f->state;
    a.x = (const uint16_t *)x;
    a.residual = (const uint16_t *)residual;
    a.weight = (const uint16_t *)weight;
    a.residual_out = (uint16_t *)residual_out;
    a.y = (uint16_t *)y;
    a.eps = eps;
    a.proto = proto == CCHAN_FUSED_LL ? CCHAN_FUSED_PROTO_LL : CCHAN_FUSED_PROTO_HB;
    a.tokens = tokens;
    a.hidden = f->hidden;
    a.max_tokens = f->max_tokens;
    a.rank = (uint32_t)f->rank;
    a.nranks = (uint32_t)f->nranks;
    a.nchan = f->nchan;
    a.ll_offset = f->ll_offset;
    a.partials = f->partials;
    for (int p = 0; p < f->nranks; p++)
        if (p != f->rank) a.peers[p] = f->chans[(size_t)p * f->nchan];
    a.split = a.proto == CCHAN_FUSED_PROTO_LL ? split_for(f, tokens) : 1;
#ifdef CCHAN_FUSED_HAVE_CUDA
    if (f->platform == CCHAN_PLATFORM_CUDA) return cchan_fused_gpu_launch(&a, stream);
#endif
    (void)stream;
    int st = host_run(&a, f->state);
    if (st == CCHAN_ERR_ABORTED || st == CCHAN_ERR_PEER_DEAD) {
        /* the wait the abort ended, and why (a dead peer, cchan_comm_abort on some rank) */
        int named = cchan_comm_check_device(f->comm);
        if (named) return cchan_fused_error(st, "cchan_fused_rmsnorm_run: %s", cchan_last_error());
    }
    return st;
}

int cchan_fused_residual_rmsnorm(cchan_platform_t platform, const void *ar, const void *residual,
                                 const void *weight, float eps, void *residual_out, void *y,
                                 uint32_t tokens, uint32_t hidden, void *stream) {
    cchan_clear_last_error();
    if (!ar || !residual || !weight || !residual_out || !y || hidden == 0 ||
        hidden % CCHAN_FUSED_VEC_ELEMS)
        return cchan_fused_error(-EINVAL, "cchan_fused_residual_rmsnorm: need every buffer and "
                                          "hidden a multiple of 8");
#ifdef CCHAN_FUSED_HAVE_CUDA
    if (platform == CCHAN_PLATFORM_CUDA)
        return cchan_fused_gpu_residual_rmsnorm(ar, residual, weight, eps, residual_out, y, tokens,
                                                hidden, stream);
#endif
    if (platform != CCHAN_PLATFORM_HOST)
        return cchan_fused_error(CCHAN_ERR_UNSUPPORTED,
                                 "cchan_fused_residual_rmsnorm: platform %d not built",
                                 (int)platform);
    (void)stream;
    for (uint32_t row = 0; row < tokens; row++)
        cchan_fused_residual_rmsnorm_row((const uint16_t *)ar, (const uint16_t *)residual,
                                         (const uint16_t *)weight, eps, (uint16_t *)residual_out,
                                         (uint16_t *)y, row, hidden, 0, 1, NULL);
    return 0;
}
