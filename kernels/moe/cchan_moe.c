/* cchan MoE host runtime: validation, the group's buffer and its exchange, handles, and running the
 * kernels of moe_kernels.h on the comm's platform (moe_cuda.cu on CUDA; on the host backend the
 * calling thread runs each "block" of a kernel in turn, phase by phase). */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan/env.h"
#include "moe_internal.h"

#define MOE_HOST_BLOCKS 3 /* host backend: blocks per operation, so cross-block paths run in CI */

struct cchan_moe_group {
    cchan_comm_t *comm;
    cchan_moe_config_t cfg;
    int cuda;
    int nranks, rank, nblocks;
    int pdl;              /* kernels launch as programmatic dependents (moe_cuda_pdl_ok) */
    int sharing, ctx_sms; /* CUDA: ranks on this GPU, SMs this context may use */
    cchan_mem_t *buf;
    cchan_mem_t *peers[MOE_MAX_RANKS];
    moe_dev_t dev;
    void *ws;                /* device: seq, done, sent[N] */
    int32_t *err_host;       /* host view of dev.err */
    cchan_diag_t *diag_host; /* the waits' diagnostic (moe_wait), host view */
    size_t smem_bytes;
    size_t dispatch_region, combine_region;
};

struct cchan_moe_handle {
    cchan_moe_group_t *g;
    int num_tokens;
    int32_t *topk;   /* device copy of the routing */
    int32_t *counts; /* [L] */
    uint32_t *src;   /* LL [L][N*B], HT [N*B]: where each row came from */
    int32_t *tok;    /* LL reduced combine: [N][B] token of each received message */
    int32_t *inv;    /* LL reduced combine: [N][B][K] output row of (rank, token, k) */
    int32_t *nmsg;   /* LL reduced combine: [N] messages received from each rank */
    uint32_t *mask;  /* HT [B] */
    uint16_t *slot;  /* HT [B][N] */
    int32_t *mat;    /* HT [N][N] */
    int32_t *base;   /* HT [N] */
    uint64_t *chunk; /* HT [N][C]: rows of each source's dispatch chunk */
    int ht_rows;     /* HT: rows this rank receives */
    uint32_t *epoch; /* [2]: staged dispatch, staged combine */
    int dispatched;  /* a dispatch has been issued: combine may run */
    int pending;     /* kind of the staged operation, 0 if none */
    moe_op_t staged;
};

/* ------------------------------------------------------------------ errors */

static _Thread_local char moe_errmsg[1024];

const char *cchan_moe_last_error(void) { return moe_errmsg; }

static int moe_error(int status, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int moe_error(int status, const char *where, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(moe_errmsg, sizeof moe_errmsg, "%s: %s (%s)", where, msg, cchan_strerror(status));
    return status;
}

#define MOE_ARG(cond, where)                                                                       \
    do {                                                                                           \
        if (!(cond)) return moe_error(-EINVAL, where, "invalid argument: %s", #cond);              \
    } while (0)

/* Every call that works on the communicator starts here: after an abort none may succeed. */
#define MOE_ALIVE(comm, where)                                                                     \
    do {                                                                                           \
        int alive_ = cchan_comm_check((comm), (where));                                            \
        if (alive_) {                                                                              \
            snprintf(moe_errmsg, sizeof moe_errmsg, "%s", cchan_last_error());                     \
            return alive_;                                                                         \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------------ device memory */

static int moe_dalloc(cchan_moe_group_t *g, size_t bytes, void **out, const char *what) {
    void *p = NULL;
    if (bytes == 0) bytes = 16;
    if (g->cfg.alloc) {
        int st = g->cfg.alloc(g->cfg.alloc_ctx, bytes, &p);
        if (st != 0 || p == NULL)
            return moe_error(st < 0 ? st : -ENOMEM, "cchan_moe",
                             "allocator callback failed for %s "
                             "(%zu bytes): %d",
                             what, bytes, st);
    } else if (g->cuda) {
#ifdef CCHAN_HAVE_CUDA
        if (moe_cuda_malloc(bytes, &p) != 0)
            return moe_error(CCHAN_ERR_CUDA, "cchan_moe", "%s (%zu bytes): %s", what, bytes,
                             moe_cuda_error());
#endif
    } else {
        p = calloc(1, bytes);
        if (!p) return moe_error(-ENOMEM, "cchan_moe", "%s (%zu bytes)", what, bytes);
    }
    *out = p;
    return 0;
}

static void moe_dfree(cchan_moe_group_t *g, void *p) {
    if (!p) return;
    if (g->cfg.free)
        g->cfg.free(g->cfg.alloc_ctx, p);
    else if (g->cuda) {
#ifdef CCHAN_HAVE_CUDA
        moe_cuda_free(p);
#endif
    } else
        free(p);
}

static int moe_copy(cchan_moe_group_t *g, void *dst, const void *src, size_t bytes, void *stream,
                    const char *what) {
    if (bytes == 0) return 0;
    if (!g->cuda) {
        memcpy(dst, src, bytes);
        return 0;
    }
#ifdef CCHAN_HAVE_CUDA
    if (moe_cuda_memcpy_async(dst, src, bytes, stream) != 0)
        return moe_error(CCHAN_ERR_CUDA, "cchan_moe", "%s: %s", what, moe_cuda_error());
#endif
    return 0;
}

/* ------------------------------------------------------------------ wait diagnostic */

/* "epoch 3 (0x300000000)" for the values whose high half is the epoch, with the dispatch counter's
 * counts where it has them. */
static void moe_diag_value(char *out, size_t n, uint32_t what, uint64_t v, int awaited) {
    const uint32_t ep = MOE_EPOCH_OF(v);
    switch (what) {
    case MOE_WAIT_DCOUNT:
        if (awaited)
            snprintf(out, n, "epoch %u (value >= 0x%llx)", ep, (unsigned long long)v);
        else
            snprintf(out, n, "epoch %u, %u tokens sent, %u for the expert (0x%llx)", ep,
                     MOE_COUNTER_N(v), MOE_COUNTER_M(v), (unsigned long long)v);
        return;
    case MOE_WAIT_HTCOUNT: snprintf(out, n, "epoch %u (0x%llx)", ep, (unsigned long long)v); return;
    case MOE_WAIT_HTPROG:
        snprintf(out, n, "epoch %u, rows below %u landed (0x%llx)", ep, (uint32_t)v,
                 (unsigned long long)v);
        return;
    case MOE_WAIT_SENT: snprintf(out, n, "%llu messages", (unsigned long long)v); return;
    default: snprintf(out, n, "epoch %llu", (unsigned long long)v); return;
    }
}

/* What the recorded wait was for, in words. */
static void moe_diag_what(char *out, size_t n, const cchan_moe_group_t *g, uint32_t id) {
    const uint32_t i = MOE_DIAG_INDEX(id);
    const int L = g->dev.local_experts;
    switch (MOE_DIAG_WHAT(id)) {
    case MOE_WAIT_ACK:
        snprintf(out, n, "the acknowledgement that an operation two back was consumed");
        return;
    case MOE_WAIT_DCOUNT:
        snprintf(out, n, "the LL dispatch counter of expert %d (local expert %u)",
                 g->rank * L + (int)i, i);
        return;
    case MOE_WAIT_SENT:
        snprintf(out, n, "this rank's blocks' messages to rank %u (a block that never ran)", i);
        return;
    case MOE_WAIT_WEIGHTS: snprintf(out, n, "the LL combine router weights"); return;
    case MOE_WAIT_PARTIAL: snprintf(out, n, "the LL combine partial sum of token %u", i); return;
    case MOE_WAIT_HTCOUNT: snprintf(out, n, "the HT token counts (handle creation)"); return;
    case MOE_WAIT_HTCHUNK: snprintf(out, n, "the HT dispatch flag of chunk %u", i); return;
    case MOE_WAIT_HTPROG: snprintf(out, n, "the HT combine progress of chunk %u", i); return;
    default: snprintf(out, n, "MoE counter 0x%x", id); return;
    }
}

/* The group's recorded wait as an error of `where`, then the record is cleared (a host-backend
 * group stays usable); 0 when there is none. */
static int moe_diag_report(cchan_moe_group_t *g, int status, const char *where) {
    cchan_diag_t *r = g->diag_host;
    if (!r || cchan_load_acquire_sys_u32(&r->state) != CCHAN_DIAG_COMPLETE) {
        if (status == 0) return 0;
        return moe_error(status, where, "a device-side wait failed without a record");
    }
    char what[160], exp[96], obs[96], from[32] = "";
    const uint32_t kind = MOE_DIAG_WHAT(r->id);
    moe_diag_what(what, sizeof what, g, r->id);
    moe_diag_value(exp, sizeof exp, kind, r->expected, 1);
    moe_diag_value(obs, sizeof obs, kind, r->observed, 0);
    if (r->peer >= 0) snprintf(from, sizeof from, " from rank %d", r->peer);
    int st;
    if (r->aborted) {
        /* the communicator says why: a dead peer, or cchan_comm_abort */
        int cs = 0;
        const char *why =
            cchan_comm_get_async_error(g->comm, &cs) == 0 && cs ? cchan_last_error() : "aborted";
        st = moe_error(cs == CCHAN_ERR_PEER_DEAD ? cs : CCHAN_ERR_ABORTED, where,
                       "rank %d's wait for %s%s ended by the communicator's abort: expected %s, "
                       "observed %s (%s)",
                       r->rank, what, from, exp, obs, why);
    } else {
        st = moe_error(CCHAN_ERR_DEVICE_TIMEOUT, where,
                       "rank %d timed out after %.1f s waiting for %s%s: expected %s, observed %s",
                       r->rank, (double)r->waited_ns / 1e9, what, from, exp, obs);
    }
    memset(r, 0, sizeof *r);
    return st;
}

/* ------------------------------------------------------------------ running kernels */

static int moe_host_run(cchan_moe_group_t *g, int kind, moe_op_t *op) {
    const moe_dev_t *d = &g->dev;
    const int nb = g->nblocks;
    uint8_t *smem = calloc((size_t)nb, g->smem_bytes);
    if (!smem) return moe_error(-ENOMEM, "cchan_moe", "block scratch");
    moe_block_t b[MOE_HOST_BLOCKS * 4];
    for (int i = 0; i < nb; i++) {
        b[i].block = (uint32_t)i;
        b[i].nblocks = (uint32_t)nb;
        b[i].tid = 0;
        b[i].nthreads = 1;
        moe_smem_layout(&b[i], smem + (size_t)i * g->smem_bytes, d->top_k, d->nranks,
                        d->local_experts, d->ht ? 0 : d->max_tokens);
    }
    const uint32_t epoch = moe_op_epoch(d, op, &b[0]);
    int st = 0;
    if (d->ht) {
        if (kind == MOE_KIND_HT_META) {
            st = moe_ht_meta(d, op, &b[0], epoch);
        } else if (kind == MOE_KIND_DISPATCH) {
            if (op->phases & MOE_PHASE_SEND)
                for (int i = 0; i < nb && st == 0; i++)
                    st = moe_ht_dispatch_send(d, op, &b[i], epoch);
            if (op->phases & MOE_PHASE_RECV)
                for (int i = 0; i < nb && st == 0; i++)
                    st = moe_ht_dispatch_recv(d, op, &b[i], epoch);
        } else {
            if (op->phases & MOE_PHASE_SEND)
                for (int i = 0; i < nb && st == 0; i++)
                    st = moe_ht_combine_send(d, op, &b[i], epoch);
            if (op->phases & MOE_PHASE_RECV)
                for (int i = 0; i < nb && st == 0; i++)
                    st = moe_ht_combine_recv(d, op, &b[i], epoch);
        }
    } else if (kind == MOE_KIND_DISPATCH) {
        if (op->phases & MOE_PHASE_SEND) {
            for (int i = 0; i < nb; i++) {
                moe_load_routing(d, op, &b[i], 1);
                moe_block_scan_bits(b[i].mask, op->num_tokens, d->nranks, b[i].slot, b[i].total,
                                    b[i].wsum, 0, 1);
            }
            for (int i = 0; i < nb && st == 0; i++) st = moe_ll_dispatch_send(d, op, &b[i], epoch);
            for (int i = 0; i < nb && st == 0; i++)
                st = moe_ll_dispatch_signal(d, op, &b[i], epoch);
        }
        if (op->phases & MOE_PHASE_RECV)
            for (int i = 0; i < nb && st == 0; i++) st = moe_ll_dispatch_recv(d, op, &b[i], epoch);
    } else {
        if (op->phases & MOE_PHASE_SEND)
            for (int i = 0; i < nb && st == 0; i++) st = moe_ll_combine_send(d, op, &b[i], epoch);
        if (op->phases & MOE_PHASE_RECV)
            for (int i = 0; i < nb && st == 0; i++) st = moe_ll_combine_recv(d, op, &b[i], epoch);
    }
    if (st == 0 && (op->phases & MOE_PHASE_RECV)) moe_op_acks(d, epoch);
    if (op->phases & MOE_PHASE_SEND) *d->seq = epoch + 1;
    free(smem);
    if (st != 0)
        return moe_diag_report(g, st,
                               kind == MOE_KIND_DISPATCH  ? "cchan_moe_dispatch"
                               : kind == MOE_KIND_COMBINE ? "cchan_moe_combine"
                                                          : "cchan_moe_handle_create");
    return 0;
}

static int moe_run(cchan_moe_group_t *g, int kind, moe_op_t *op, void *stream) {
    if (!g->cuda) return moe_host_run(g, kind, op);
#ifdef CCHAN_HAVE_CUDA
    if (moe_cuda_launch(kind, &g->dev, op, g->nblocks, g->smem_bytes, g->pdl, stream) != 0)
        return moe_error(CCHAN_ERR_CUDA,
                         kind == MOE_KIND_DISPATCH ? "cchan_moe_dispatch" : "cchan_moe_combine",
                         "%s", moe_cuda_error());
    return 0;
#else
    (void)stream;
    return moe_error(CCHAN_ERR_UNSUPPORTED, "cchan_moe", "built without CUDA");
#endif
}

/* ------------------------------------------------------------------ group */

typedef struct moe_shape {
    int32_t mode, num_experts, hidden, top_k, max_tokens, num_blocks;
    moe_variant_t variant;
} moe_shape_t;

/* CCHAN_MOE_VARIANT="key=value,...": implementation choices, so one benchmark run can compare them
 * (keys in moe_internal.h). Unknown keys are errors; every rank must pass the same. */
static int moe_parse_variant(moe_variant_t *v) {
    v->ht_senders = 12;
    v->ht_csenders = 8;
    v->ht_chunks = 48;
    v->ht_csub = 4;
    const char *env = NULL;
    if (cchan_env_get_str("CCHAN_MOE_VARIANT", &env))
        return moe_error(-EINVAL, "cchan_moe_group_create", "%s", cchan_last_error());
    if (!env) return 0;
    for (const char *p = env; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[64];
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), p);
        char key[64];
        snprintf(key, sizeof key, "%s", item);
        char *eq = strchr(key, '=');
        /* strict: key=integer, the whole value a decimal integer ("12x", "", a bare key and an
         * item cut by the copy are errors); 0 fails every key's range */
        char *vend = NULL;
        errno = 0;
        long lv = eq ? strtol(eq + 1, &vend, 10) : 0;
        int val = 0;
        if (eq && !errno && vend != eq + 1 && !*vend && lv >= 1 && lv <= INT32_MAX &&
            len < sizeof item)
            val = (int)lv;
        if (eq) *eq = '\0';
        if (!strcmp(key, "ht_senders") && val >= 1)
            v->ht_senders = val;
        else if (!strcmp(key, "ht_csenders") && val >= 1)
            v->ht_csenders = val;
        else if (!strcmp(key, "ht_chunks") && val >= 1 && val <= MOE_HT_MAX_CHUNKS)
            v->ht_chunks = val;
        else if (!strcmp(key, "ht_csub") && val >= 1 && val <= 64)
            v->ht_csub = val;
        else if (key[0])
            return moe_error(-EINVAL, "cchan_moe_group_create",
                             "CCHAN_MOE_VARIANT: unknown key or bad value '%s' (want "
                             "key=integer,...: ht_senders >= 1, ht_csenders >= 1, ht_chunks "
                             "1..%d, ht_csub 1..64)",
                             item, MOE_HT_MAX_CHUNKS);
        p += len;
        if (*p == ',') p++;
    }
    return 0;
}

static int moe_check_config(const cchan_moe_config_t *c, int nranks) {
    const char *w = "cchan_moe_group_create";
    if (c->size != sizeof(cchan_moe_config_t) || c->magic != CCHAN_MOE_CONFIG_MAGIC ||
        c->version != CCHAN_MOE_CONFIG_VERSION)
        return moe_error(-EINVAL, w,
                         "config not initialized with CCHAN_MOE_CONFIG_INIT "
                         "(size %zu, magic 0x%x, version %u)",
                         c->size, c->magic, c->version);
    if (c->mode != CCHAN_MOE_LOW_LATENCY && c->mode != CCHAN_MOE_HIGH_THROUGHPUT)
        return moe_error(-EINVAL, w, "unknown mode %d", (int)c->mode);
    if (nranks > MOE_MAX_RANKS)
        return moe_error(CCHAN_ERR_UNSUPPORTED, w, "%d ranks: at most %d (one host)", nranks,
                         MOE_MAX_RANKS);
    if (c->num_experts <= 0 || c->num_experts % nranks != 0)
        return moe_error(-EINVAL, w, "num_experts %d must be a positive multiple of the %d ranks",
                         c->num_experts, nranks);
    if (c->hidden <= 0 || c->hidden % MOE_SCALE_BLOCK != 0)
        return moe_error(-EINVAL, w, "hidden %d must be a positive multiple of %d", c->hidden,
                         MOE_SCALE_BLOCK);
    if (c->top_k < 1 || c->top_k > MOE_MAX_TOPK)
        return moe_error(-EINVAL, w, "top_k %d out of [1, %d]", c->top_k, MOE_MAX_TOPK);
    if (c->top_k > c->num_experts)
        return moe_error(-EINVAL, w, "top_k %d > num_experts %d", c->top_k, c->num_experts);
    const int ht = c->mode == CCHAN_MOE_HIGH_THROUGHPUT;
    const int maxt = ht ? MOE_HT_MAX_TOKENS : MOE_LL_MAX_TOKENS;
    if (c->max_tokens_per_rank < 1 || c->max_tokens_per_rank > maxt)
        return moe_error(-EINVAL, w, "max_tokens_per_rank %d out of [1, %d] in %s mode",
                         c->max_tokens_per_rank, maxt, ht ? "high-throughput" : "low-latency");
    if (c->num_blocks < 0) return moe_error(-EINVAL, w, "num_blocks %d < 0", c->num_blocks);
    if ((c->alloc == NULL) != (c->free == NULL))
        return moe_error(-EINVAL, w, "alloc and free callbacks go together");
    return 0;
}

/* Every rank must have passed the same shape: compare before allocating anything. `checked` is this
 * rank's verdict on its own config: a bad config on one rank fails every rank at once, naming it. */
static int moe_agree(cchan_comm_t *comm, const cchan_moe_config_t *cfg, int checked,
                     moe_shape_t *mine) {
    const char *w = "cchan_moe_group_create";
    const int nranks = cchan_comm_size(comm), rank = cchan_comm_rank(comm);
    memset(mine, 0, sizeof *mine);
    mine->mode = cfg->mode;
    mine->num_experts = cfg->num_experts;
    mine->hidden = cfg->hidden;
    mine->top_k = cfg->top_k;
    mine->max_tokens = cfg->max_tokens_per_rank;
    mine->num_blocks = cfg->num_blocks;
    int st = checked;
    if (!st) st = moe_parse_variant(&mine->variant);
    const int own = st;
    st = cchan_comm_agree(comm, st, w, st ? moe_errmsg : NULL);
    if (st && !own) snprintf(moe_errmsg, sizeof moe_errmsg, "%s", cchan_last_error());
    if (st) return st;
    moe_shape_t all[MOE_MAX_RANKS];
    st = cchan_bootstrap_allgather(cchan_comm_bootstrap(comm), mine, all, sizeof *mine);
    if (st) return moe_error(st, w, "exchanging configurations: %s", cchan_last_error());
    for (int r = 0; r < nranks; r++)
        if (memcmp(&all[r], mine, sizeof *mine) != 0)
            return moe_error(-EINVAL, w,
                             "rank %d's configuration differs from rank %d's (experts %d/%d, "
                             "hidden %d/%d, top_k %d/%d, max tokens %d/%d, mode %d/%d, blocks "
                             "%d/%d, or CCHAN_MOE_VARIANT)",
                             r, rank, all[r].num_experts, mine->num_experts, all[r].hidden,
                             mine->hidden, all[r].top_k, mine->top_k, all[r].max_tokens,
                             mine->max_tokens, all[r].mode, mine->mode, all[r].num_blocks,
                             mine->num_blocks);
    return 0;
}

/* The sizes and one parity's layout (moe_wire.h), and each block's shared memory. */
static void moe_layout(cchan_moe_group_t *g, const moe_shape_t *s) {
    moe_dev_t *d = &g->dev;
    const int N = g->nranks, E = s->num_experts, L = E / N, H = s->hidden, K = s->top_k,
              B = s->max_tokens;
    d->rank = g->rank;
    d->nranks = N;
    d->num_experts = E;
    d->local_experts = L;
    d->hidden = H;
    d->top_k = K;
    d->max_tokens = B;
    d->ht = s->mode == CCHAN_MOE_HIGH_THROUGHPUT;
    d->ht_senders = s->variant.ht_senders;
    d->ht_csenders = s->variant.ht_csenders;
    d->ht_chunks = s->variant.ht_chunks;
    d->ht_csub = s->variant.ht_csub;
    d->hdr_bytes = moe_header_bytes(K);
    d->slot_bytes = d->hdr_bytes + (uint32_t)H * 2; /* bf16 is the larger payload */
    d->off_ack = 0;
    d->off_dcnt = moe_align((uint64_t)N * 8);
    if (!d->ht) {
        d->off_ccnt = moe_align(d->off_dcnt + (uint64_t)L * N * 8);
        d->off_wcnt = moe_align(d->off_ccnt + (uint64_t)N * B * 8);
        d->off_cw = moe_align(d->off_wcnt + (uint64_t)N * 8);
        d->off_disp = moe_align(d->off_cw + (uint64_t)N * B * K * 4);
        d->off_cnts = d->off_disp;
        d->off_route = d->off_disp;
        g->dispatch_region = (size_t)N * B * d->slot_bytes;
        d->off_comb = moe_align(d->off_disp + g->dispatch_region);
        g->combine_region = (size_t)N * B * H * 4;
        g->smem_bytes = (size_t)moe_smem_bytes(K, N, L, B);
    } else {
        d->off_hflag = moe_align(d->off_dcnt + (uint64_t)N * 8);
        d->off_ccnt = d->off_wcnt = d->off_cw = d->off_hflag;
        d->off_cnts = moe_align(d->off_hflag + (uint64_t)3 * N * d->ht_chunks * 8);
        d->off_route = moe_align(d->off_cnts + ((uint64_t)N * N + (uint64_t)N * L) * 4);
        d->off_disp = moe_align(d->off_route + (uint64_t)N * B * MOE_HT_ROUTE_WORDS(K) * 4);
        g->dispatch_region = (size_t)N * B * H * 2;
        d->off_comb = moe_align(d->off_disp + g->dispatch_region);
        g->combine_region = (size_t)N * B * H * 2;
        g->smem_bytes = (size_t)moe_smem_bytes(K, N, L, 0);
    }
    d->parity_bytes = moe_align(d->off_comb + g->combine_region);
}

#ifdef CCHAN_HAVE_CUDA
/* The grid (docs/moe.md, "Co-residency"). Every kernel is launched cooperatively, so its blocks
 * must fit at once on the SMs this context may use; and the ranks that share this GPU split those
 * SMs, because MPS may place every client's blocks on the same SMs (each rank's kernel must be
 * resident while it waits for the others'). Collective: the ranks exchange their GPUs' UUIDs. */
static int moe_cuda_grid(cchan_moe_group_t *g, const cchan_moe_config_t *cfg) {
    const char *w = "cchan_moe_group_create";
    moe_cuda_res_t res, all[MOE_MAX_RANKS];
    int per_sm = 0;
    if (moe_cuda_resources(cchan_comm_device(g->comm), &res) != 0 ||
        moe_cuda_prepare(g->smem_bytes, g->dev.ht, &per_sm) != 0)
        return moe_error(CCHAN_ERR_CUDA, w, "%s", moe_cuda_error());
    int st = cchan_bootstrap_allgather(cchan_comm_bootstrap(g->comm), &res, all, sizeof res);
    if (st) return moe_error(st, w, "exchanging GPU identities: %s", cchan_last_error());
    int sharing = 0;
    for (int r = 0; r < g->nranks; r++) sharing += !memcmp(all[r].uuid, res.uuid, sizeof res.uuid);
    g->sharing = sharing;
    g->ctx_sms = res.ctx_sms;
    if (per_sm < 1)
        return moe_error(CCHAN_ERR_UNSUPPORTED, w,
                         "no block of the kernels fits on an SM (%zu bytes of shared memory)",
                         g->smem_bytes);
    const int fit = per_sm * res.ctx_sms; /* the most blocks resident at once */
    int share = res.ctx_sms / sharing;
    if (share < 1) share = 1;
    if (cfg->num_blocks)
        g->nblocks = cfg->num_blocks;
    else
        g->nblocks = g->dev.ht && share > MOE_HT_DEFAULT_BLOCKS ? MOE_HT_DEFAULT_BLOCKS : share;
    if (g->nblocks > fit)
        return moe_error(-EINVAL, w,
                         "num_blocks %d: at most %d blocks can be resident at once (%d SMs "
                         "available to this context x %d blocks per SM), and the kernels' blocks "
                         "wait for each other",
                         g->nblocks, fit, res.ctx_sms, per_sm);
    g->pdl = moe_cuda_pdl_ok();
    return 0;
}
#endif

/* The group's wait diagnostic (moe_wait): host-mapped on CUDA, so it can be read after a trap. */
static int moe_diag_alloc(cchan_moe_group_t *g) {
    if (g->cuda) {
#ifdef CCHAN_HAVE_CUDA
        void *h = NULL, *dv = NULL;
        if (moe_cuda_host_mapped(sizeof(cchan_diag_t), &h, &dv) != 0)
            return moe_error(CCHAN_ERR_CUDA, "cchan_moe_group_create", "wait diagnostic: %s",
                             moe_cuda_error());
        g->diag_host = (cchan_diag_t *)h;
        g->dev.diag = (cchan_diag_t *)dv;
#endif
        return 0;
    }
    g->diag_host = calloc(1, sizeof(cchan_diag_t));
    if (!g->diag_host) return moe_error(-ENOMEM, "cchan_moe_group_create", "wait diagnostic");
    g->dev.diag = g->diag_host;
    return 0;
}

/* The exchanged buffer, mapped from every peer. */
static int moe_buffers(cchan_moe_group_t *g) {
    const char *w = "cchan_moe_group_create";
    const unsigned long long buf_bytes = 2 * g->dev.parity_bytes;
    int st = cchan_mem_alloc(g->comm, (size_t)buf_bytes, 0, &g->buf);
    if (st)
        return moe_error(st, w, "communication buffer of %llu bytes: %s", buf_bytes,
                         cchan_last_error());
    st = cchan_mem_exchange(g->comm, g->buf, g->peers);
    if (st) {
        cchan_mem_destroy(g->buf);
        g->buf = NULL;
        return moe_error(st, w, "exchanging the buffer: %s", cchan_last_error());
    }
    for (int r = 0; r < g->nranks; r++) g->dev.peer[r] = (uint8_t *)cchan_mem_ptr(g->peers[r]);
    return 0;
}

/* The workspace (seq, done, sent[N]) with epochs starting at 1 (a zeroed counter is older than
 * any), and the routing-error record. */
static int moe_workspace(cchan_moe_group_t *g) {
    const char *w = "cchan_moe_group_create";
    moe_dev_t *d = &g->dev;
    size_t ws_bytes = 16 + (size_t)g->nranks * 8;
    int st = moe_dalloc(g, ws_bytes, &g->ws, "workspace");
    if (st) return st;
    uint8_t *init = calloc(1, ws_bytes);
    if (!init) return moe_error(-ENOMEM, w, "workspace init");
    uint32_t one = 1;
    memcpy(init, &one, 4);
    st = moe_copy(g, g->ws, init, ws_bytes, NULL, "workspace init");
#ifdef CCHAN_HAVE_CUDA
    if (st == 0 && g->cuda && moe_cuda_stream_sync(NULL) != 0)
        st = moe_error(CCHAN_ERR_CUDA, w, "%s", moe_cuda_error());
#endif
    free(init);
    if (st) return st;
    d->seq = (uint32_t *)g->ws;
    d->done = (uint32_t *)g->ws + 1;
    d->sent = (uint64_t *)(void *)((uint8_t *)g->ws + 16);
    /* the record lives in device memory (atomics on it stay on the GPU); cchan_moe_check copies
     * it out */
    g->err_host = calloc(4, sizeof(int32_t));
    if (!g->err_host) return moe_error(-ENOMEM, w, "error record");
    if (g->cuda) return moe_dalloc(g, 4 * sizeof(int32_t), (void **)&d->err, "error record");
    d->err = g->err_host;
    return 0;
}

int cchan_moe_group_create(cchan_comm_t *comm, const cchan_moe_config_t *cfg,
                           cchan_moe_group_t **out) {
    const char *w = "cchan_moe_group_create";
    moe_errmsg[0] = '\0';
    MOE_ARG(comm != NULL && cfg != NULL && out != NULL, w);
    MOE_ALIVE(comm, w);
    int st = moe_check_config(cfg, cchan_comm_size(comm));
#ifdef CCHAN_HAVE_CUDA
    /* before any of the group's kernels can run (moe_cuda_preload says why), and before the
     * agreement, so that a rank that cannot load its kernels fails every rank */
    if (!st && cchan_comm_platform(comm) == CCHAN_PLATFORM_CUDA &&
        moe_cuda_preload(cchan_comm_device(comm)) != 0)
        st = moe_error(CCHAN_ERR_CUDA, w, "%s", moe_cuda_error());
#endif
    moe_shape_t mine;
    st = moe_agree(comm, cfg, st, &mine);
    if (st) return st;

    cchan_moe_group_t *g = calloc(1, sizeof *g);
    if (!g) return moe_error(-ENOMEM, w, "group");
    g->comm = comm;
    g->cfg = *cfg;
    g->cfg.size = sizeof g->cfg;
    g->cuda = cchan_comm_platform(comm) == CCHAN_PLATFORM_CUDA;
    g->nranks = cchan_comm_size(comm);
    g->rank = cchan_comm_rank(comm);
    moe_layout(g, &mine);
    /* the deadline and the abort word are the communicator's; the record and what each wait names
     * are the group's (moe_wait) */
    g->dev.ctl = cchan_comm_wait_ctl(comm, -1, MOE_DIAG_ID(0, 0));
    if (g->cuda) {
#ifdef CCHAN_HAVE_CUDA
        st = moe_cuda_grid(g, cfg);
#else
        st = moe_error(CCHAN_ERR_UNSUPPORTED, w,
                       "a CUDA communicator, but cchan_moe was built without CUDA");
#endif
    } else {
        g->nblocks = cfg->num_blocks ? cfg->num_blocks : MOE_HOST_BLOCKS;
        if (g->nblocks > MOE_HOST_BLOCKS * 4) g->nblocks = MOE_HOST_BLOCKS * 4;
    }
    if (st) {
        free(g);
        return st;
    }
    st = moe_buffers(g);
    if (st) {
        free(g);
        return st;
    }
    st = moe_workspace(g);
    if (!st) st = moe_diag_alloc(g);
    if (!st) {
        st = cchan_bootstrap_barrier(cchan_comm_bootstrap(comm));
        if (st) st = moe_error(st, w, "barrier: %s", cchan_last_error());
    }
    if (st) {
        cchan_moe_group_destroy(g);
        return st;
    }
    *out = g;
    return 0;
}

int cchan_moe_group_info(const cchan_moe_group_t *g, cchan_moe_info_t *out) {
    if (!g) return moe_error(-EINVAL, "cchan_moe_group_info", "group is NULL");
    if (!out) return moe_error(-EINVAL, "cchan_moe_group_info", "out is NULL");
    memset(out, 0, sizeof *out);
    out->nranks = g->nranks;
    out->rank = g->rank;
    out->local_experts = g->dev.local_experts;
    out->max_rows_per_expert = g->nranks * g->dev.max_tokens;
    out->max_recv_rows = g->nranks * g->dev.max_tokens;
    out->num_blocks = g->nblocks;
    out->threads_per_block = !g->cuda ? 1 : g->dev.ht ? MOE_HT_THREADS : MOE_THREADS;
    out->comm_buffer_bytes = (size_t)(2 * g->dev.parity_bytes);
    out->dispatch_region_bytes = g->dispatch_region;
    out->combine_region_bytes = g->combine_region;
    return 0;
}

int cchan_moe_group_destroy(cchan_moe_group_t *g) {
    if (!g) return 0;
    int st = 0;
    cchan_bootstrap_t *bs = cchan_comm_bootstrap(g->comm);
    if (g->buf) {
        int s = cchan_bootstrap_barrier(bs); /* no peer writes into our buffer any more */
        if (s && !st)
            st = moe_error(s, "cchan_moe_group_destroy", "barrier: %s", cchan_last_error());
        for (int r = 0; r < g->nranks; r++)
            if (r != g->rank && g->peers[r]) cchan_mem_destroy(g->peers[r]);
        s = cchan_bootstrap_barrier(bs); /* every peer has unmapped ours */
        if (s && !st)
            st = moe_error(s, "cchan_moe_group_destroy", "barrier: %s", cchan_last_error());
        cchan_mem_destroy(g->buf);
    }
    moe_dfree(g, g->ws);
    if (g->cuda) moe_dfree(g, g->dev.err);
    free(g->err_host);
    if (g->cuda) {
#ifdef CCHAN_HAVE_CUDA
        moe_cuda_host_free(g->diag_host);
#endif
    } else {
        free(g->diag_host);
    }
    free(g);
    return st;
}

int cchan_moe_check(cchan_moe_group_t *g) {
    const char *w = "cchan_moe_check";
    MOE_ARG(g != NULL, w);
    /* first the waits' record: it is host memory, still readable when a kernel has trapped */
    int st = moe_diag_report(g, 0, w);
    if (st) return st;
    st = cchan_comm_check_device(g->comm);
    if (st) return moe_error(st, w, "%s", cchan_last_error());
    if (g->cuda) {
        st = moe_copy(g, g->err_host, g->dev.err, 4 * sizeof(int32_t), NULL,
                      "reading the error record");
#ifdef CCHAN_HAVE_CUDA
        if (!st && moe_cuda_stream_sync(NULL) != 0)
            st = moe_error(CCHAN_ERR_CUDA, w, "%s", moe_cuda_error());
#endif
        if (st) return st;
    }
    volatile int32_t *e = g->err_host;
    switch (e[0]) {
    case 0: return 0;
    case MOE_ERR_EXPERT_RANGE:
        return moe_error(CCHAN_ERR_RANGE, w,
                         "token %d, top-k entry %d: expert id %d is outside "
                         "[-1, %d); the entry was ignored",
                         e[1], e[2], e[3], g->dev.num_experts);
    case MOE_ERR_EXPERT_DUP:
        return moe_error(CCHAN_ERR_RANGE, w,
                         "token %d, top-k entry %d: expert %d is listed "
                         "twice; the repeat was ignored",
                         e[1], e[2], e[3]);
    default:
        return moe_error(CCHAN_ERR_INTERNAL, w,
                         "expert %d, rank %d: counter and messages "
                         "disagree (%d found)",
                         e[1], e[2], e[3]);
    }
}

/* ------------------------------------------------------------------ handles */

/* HT handle creation: the count exchange (an operation of its own), then the rows this rank
 * receives, read back to the host. */
static int moe_ht_handle_meta(cchan_moe_handle_t *h, void *stream) {
    cchan_moe_group_t *g = h->g;
    const moe_dev_t *d = &g->dev;
    const int N = d->nranks, B = d->max_tokens;
    int st = moe_dalloc(g, (size_t)B * 4, (void **)&h->mask, "masks");
    if (!st) st = moe_dalloc(g, (size_t)B * N * 2, (void **)&h->slot, "slots");
    if (!st) st = moe_dalloc(g, (size_t)N * N * 4, (void **)&h->mat, "count matrix");
    if (!st) st = moe_dalloc(g, (size_t)N * 4, (void **)&h->base, "bases");
    if (!st) st = moe_dalloc(g, (size_t)N * d->ht_chunks * 8, (void **)&h->chunk, "chunks");
    if (st) return st;
    moe_op_t op;
    memset(&op, 0, sizeof op);
    op.num_tokens = h->num_tokens;
    op.phases = MOE_PHASE_SEND | MOE_PHASE_RECV;
    op.topk = h->topk;
    op.h_counts = h->counts;
    op.h_epoch = h->epoch;
    op.h_mask = h->mask;
    op.h_slot = h->slot;
    op.h_mat = h->mat;
    op.h_base = h->base;
    st = moe_run(g, MOE_KIND_HT_META, &op, stream);
    if (st) return st;
    int32_t mat[MOE_MAX_RANKS * MOE_MAX_RANKS];
    st = moe_copy(g, mat, h->mat, (size_t)N * N * 4, stream, "reading the token counts");
#ifdef CCHAN_HAVE_CUDA
    if (!st && g->cuda && moe_cuda_stream_sync(stream) != 0)
        st = moe_error(CCHAN_ERR_CUDA, "cchan_moe_handle_create", "%s", moe_cuda_error());
#endif
    if (st) return st;
    h->ht_rows = 0;
    for (int s = 0; s < N; s++) h->ht_rows += mat[s * N + d->rank];
    return 0;
}

int cchan_moe_handle_create(cchan_moe_group_t *g, const int32_t *topk_idx, int num_tokens,
                            void *stream, cchan_moe_handle_t **out) {
    const char *w = "cchan_moe_handle_create";
    moe_errmsg[0] = '\0';
    MOE_ARG(g != NULL && out != NULL, w);
    MOE_ALIVE(g->comm, w);
    if (num_tokens < 0 || num_tokens > g->dev.max_tokens)
        return moe_error(CCHAN_ERR_RANGE, w,
                         "%d tokens: the group holds at most %d per rank "
                         "(max_tokens_per_rank)",
                         num_tokens, g->dev.max_tokens);
    if (num_tokens > 0 && topk_idx == NULL)
        return moe_error(-EINVAL, w, "topk_idx is NULL with %d tokens", num_tokens);
    cchan_moe_handle_t *h = calloc(1, sizeof *h);
    if (!h) return moe_error(-ENOMEM, w, "handle");
    h->g = g;
    h->num_tokens = num_tokens;
    const moe_dev_t *d = &g->dev;
    const size_t topk_bytes = (size_t)num_tokens * d->top_k * 4;
    int st = moe_dalloc(g, topk_bytes, (void **)&h->topk, "routing");
    if (!st) st = moe_dalloc(g, (size_t)d->local_experts * 4, (void **)&h->counts, "counts");
    if (!st)
        st = moe_dalloc(g, (size_t)(d->ht ? 1 : d->local_experts) * d->nranks * d->max_tokens * 4,
                        (void **)&h->src, "row sources");
    if (!st) st = moe_dalloc(g, 16, (void **)&h->epoch, "epochs");
    if (!st && !d->ht) { /* combine's row index, filled by dispatch */
        const size_t nb = (size_t)d->nranks * d->max_tokens;
        st = moe_dalloc(g, nb * 4, (void **)&h->tok, "message tokens");
        if (!st) st = moe_dalloc(g, nb * d->top_k * 4, (void **)&h->inv, "row index");
        if (!st) st = moe_dalloc(g, (size_t)d->nranks * 4, (void **)&h->nmsg, "message counts");
    }
    if (!st) st = moe_copy(g, h->topk, topk_idx, topk_bytes, stream, "copying the routing");
    if (!st && d->ht) st = moe_ht_handle_meta(h, stream);
    if (st) {
        cchan_moe_handle_destroy(h);
        return st;
    }
    *out = h;
    return 0;
}

int cchan_moe_handle_destroy(cchan_moe_handle_t *h) {
    if (!h) return 0;
    cchan_moe_group_t *g = h->g;
    moe_dfree(g, h->topk);
    moe_dfree(g, h->counts);
    moe_dfree(g, h->src);
    moe_dfree(g, h->tok);
    moe_dfree(g, h->inv);
    moe_dfree(g, h->nmsg);
    moe_dfree(g, h->epoch);
    moe_dfree(g, h->mask);
    moe_dfree(g, h->slot);
    moe_dfree(g, h->mat);
    moe_dfree(g, h->base);
    moe_dfree(g, h->chunk);
    free(h);
    return 0;
}

int cchan_moe_handle_num_recv_tokens(cchan_moe_handle_t *h, void *stream, int *out) {
    const char *w = "cchan_moe_handle_num_recv_tokens";
    MOE_ARG(h != NULL && out != NULL, w);
    MOE_ALIVE(h->g->comm, w);
    if (h->g->dev.ht) {
        *out = h->ht_rows;
        return 0;
    }
    if (!h->dispatched || h->pending == MOE_KIND_DISPATCH)
        return moe_error(-EINVAL, w, "no completed dispatch on this handle yet");
    cchan_moe_group_t *g = h->g;
    const int L = g->dev.local_experts;
    int32_t counts[4096];
    int32_t *c = L <= 4096 ? counts : malloc((size_t)L * 4);
    if (!c) return moe_error(-ENOMEM, w, "counts");
    int st = moe_copy(g, c, h->counts, (size_t)L * 4, stream, "reading the counts");
#ifdef CCHAN_HAVE_CUDA
    if (!st && g->cuda && moe_cuda_stream_sync(stream) != 0)
        st = moe_error(CCHAN_ERR_CUDA, w, "%s", moe_cuda_error());
#endif
    if (!st) {
        long sum = 0;
        for (int e = 0; e < L; e++) sum += c[e];
        *out = (int)sum;
    }
    if (c != counts) free(c);
    return st;
}

/* ------------------------------------------------------------------ operations */

int cchan_moe_dispatch(cchan_moe_handle_t *h, const cchan_moe_dispatch_args_t *a, int send_only,
                       void *stream) {
    const char *w = "cchan_moe_dispatch";
    moe_errmsg[0] = '\0';
    MOE_ARG(h != NULL && a != NULL, w);
    MOE_ALIVE(h->g->comm, w);
    if (h->pending)
        return moe_error(-EINVAL, w,
                         "the handle's staged %s has not been completed "
                         "(cchan_moe_complete)",
                         h->pending == MOE_KIND_DISPATCH ? "dispatch" : "combine");
    if (a->dtype != CCHAN_MOE_BF16 && a->dtype != CCHAN_MOE_FP8_E4M3)
        return moe_error(-EINVAL, w, "unknown output type %d", (int)a->dtype);
    if (h->g->dev.ht && a->dtype != CCHAN_MOE_BF16)
        return moe_error(CCHAN_ERR_UNSUPPORTED, w, "high-throughput mode dispatches bf16 only");
    if (h->num_tokens > 0 && a->x == NULL) return moe_error(-EINVAL, w, "x is NULL");
    if (a->out_x == NULL) return moe_error(-EINVAL, w, "out_x is NULL");
    if (a->dtype == CCHAN_MOE_FP8_E4M3 && a->out_scales == NULL)
        return moe_error(-EINVAL, w, "fp8 output needs out_scales");
    if (((uintptr_t)a->x | (uintptr_t)a->out_x) & 15)
        return moe_error(-EINVAL, w, "x and out_x must be 16-byte aligned");
    moe_op_t op;
    memset(&op, 0, sizeof op);
    op.num_tokens = h->num_tokens;
    op.fp8 = a->dtype == CCHAN_MOE_FP8_E4M3;
    op.phases = MOE_PHASE_SEND | (send_only ? 0 : MOE_PHASE_RECV);
    op.x = (const uint16_t *)a->x;
    op.topk = h->topk;
    op.out = a->out_x;
    op.out_scales = a->out_scales;
    op.out_counts = a->out_counts;
    op.h_counts = h->counts;
    op.h_src = h->src;
    op.h_tok = h->tok;
    op.h_inv = h->inv;
    op.h_nmsg = h->nmsg;
    op.h_epoch = h->epoch;
    op.h_mask = h->mask;
    op.h_slot = h->slot;
    op.h_mat = h->mat;
    op.h_base = h->base;
    op.h_chunk = h->chunk;
    op.ht_rows = h->ht_rows;
    op.in_weights = a->topk_weights;
    op.out_route = a->out_topk;
    op.out_weights = a->out_weights;
    int st = moe_run(h->g, MOE_KIND_DISPATCH, &op, stream);
    if (st) return st;
    h->dispatched = 1;
    if (send_only) {
        op.phases = MOE_PHASE_RECV;
        h->staged = op;
        h->pending = MOE_KIND_DISPATCH;
    }
    return 0;
}

int cchan_moe_combine(cchan_moe_handle_t *h, const void *expert_out, const float *topk_weights,
                      void *out, int send_only, void *stream) {
    const char *w = "cchan_moe_combine";
    moe_errmsg[0] = '\0';
    MOE_ARG(h != NULL, w);
    MOE_ALIVE(h->g->comm, w);
    if (h->pending)
        return moe_error(-EINVAL, w,
                         "the handle's staged %s has not been completed "
                         "(cchan_moe_complete)",
                         h->pending == MOE_KIND_DISPATCH ? "dispatch" : "combine");
    if (!h->dispatched)
        return moe_error(-EINVAL, w,
                         "combine needs a dispatch on this handle first (it "
                         "records where each expert row came from)");
    if (expert_out == NULL) return moe_error(-EINVAL, w, "expert_out is NULL");
    if (h->num_tokens > 0 && out == NULL) return moe_error(-EINVAL, w, "out is NULL");
    if (((uintptr_t)expert_out | (uintptr_t)out) & 15)
        return moe_error(-EINVAL, w, "expert_out and out must be 16-byte aligned");
    moe_op_t op;
    memset(&op, 0, sizeof op);
    op.num_tokens = h->num_tokens;
    op.phases = MOE_PHASE_SEND | (send_only ? 0 : MOE_PHASE_RECV);
    op.x = (const uint16_t *)expert_out;
    op.topk = h->topk;
    op.weights = topk_weights;
    op.out = out;
    op.h_counts = h->counts;
    op.h_src = h->src;
    op.h_tok = h->tok;
    op.h_inv = h->inv;
    op.h_nmsg = h->nmsg;
    op.h_epoch = h->epoch + 1;
    op.h_mask = h->mask;
    op.h_slot = h->slot;
    op.h_mat = h->mat;
    op.h_base = h->base;
    op.h_chunk = h->chunk;
    op.ht_rows = h->ht_rows;
    int st = moe_run(h->g, MOE_KIND_COMBINE, &op, stream);
    if (st) return st;
    if (send_only) {
        op.phases = MOE_PHASE_RECV;
        h->staged = op;
        h->pending = MOE_KIND_COMBINE;
    }
    return 0;
}

int cchan_moe_complete(cchan_moe_handle_t *h, void *stream) {
    const char *w = "cchan_moe_complete";
    moe_errmsg[0] = '\0';
    MOE_ARG(h != NULL, w);
    MOE_ALIVE(h->g->comm, w);
    if (!h->pending) return moe_error(-EINVAL, w, "no staged (send_only) operation on this handle");
    int kind = h->pending;
    int st = moe_run(h->g, kind, &h->staged, stream);
    if (st) return st;
    h->pending = 0;
    return 0;
}
