/* cchan MoE kernels, the part both modes share: the device view of a group (moe_dev_t), one
 * operation's arguments (moe_op_t), a block's context and shared memory, the device-side waits and
 * their diagnostic, portable helpers, and the operation bookkeeping. The bodies of the kernels are
 * in moe_ll.h (low latency) and moe_ht.h (high throughput); the buffer layout in moe_wire.h.
 *
 * Every body is an inline function over (block, nblocks, tid, nthreads), so the same code runs on
 * a GPU (moe_cuda.cu wraps each in a __global__ function, all phases of an operation in one
 * cooperative launch) and on CPU threads (cchan_moe.c runs the phases one after the other, a
 * "block" being one thread). Internal to kernels/moe.
 *
 * Synchronization is the counters and flags of moe_wire.h and nothing else: a sender writes its
 * data with plain stores into the peer's buffer (cchan memory-channel style, NVLink or shared
 * memory), then releases the counter at system scope; the receiver's wait on the counter acquires
 * the data. Within a rank, blocks that sent tokens to rank r count them in `sent[r]` (device
 * memory) after a system-scope fence; the block that signals r waits for the count, so the LL
 * dispatch needs every block of its grid resident (docs/moe.md, "Co-residency").
 *
 * Shape names, everywhere in kernels/moe:
 *   N   ranks                          E   experts (global ids 0..E-1)
 *   L   experts per rank (E / N)       K   top-k (experts per token)
 *   H   hidden (channels per token)    B   max tokens per rank (group's max_tokens_per_rank)
 *   T   this operation's tokens        NB  N * B: rows per local expert (LL output)
 *   P   LL message slot bytes          C   HT chunks per rank's tokens
 *   S   HT sending blocks              R   HT receiving blocks
 *   Q   HT combine parts per chunk     RW  HT route row words
 *   nv  16-byte vectors per bf16 row (H / 8)
 */
#ifndef CCHAN_MOE_KERNELS_H
#define CCHAN_MOE_KERNELS_H

#include "cchan/copy.h"
#include "cchan/numeric.h"
#include "cchan/wait.h"
#include "moe_wire.h"

CCHAN_EXTERN_C_BEGIN

/* Device view of a group: sizes, the layout, and the buffers. Passed by value to kernels. */
typedef struct moe_dev {
    int32_t rank, nranks, num_experts, local_experts, hidden, top_k, max_tokens;
    int32_t ht; /* 1: high-throughput layout */
    uint32_t hdr_bytes, slot_bytes;
    uint64_t parity_bytes; /* one parity of the layout */
    uint64_t off_ack, off_dcnt, off_ccnt, off_cnts, off_disp, off_route, off_comb; /* in a parity */
    uint64_t off_wcnt, off_cw;    /* LL combine: weight counters [N], weights [N][B][K] */
    int32_t ht_senders;           /* HT: dispatch blocks that send (the others receive) */
    int32_t ht_csenders;          /* HT: combine blocks that send */
    int32_t ht_csub;              /* HT combine: progress flags per chunk */
    int32_t ht_chunks;            /* HT: chunks per rank's token range */
    uint64_t off_hflag;           /* HT: dispatch flags, descriptors, combine flags [N][C] */
    uint8_t *peer[MOE_MAX_RANKS]; /* every rank's buffer mapped here; peer[rank] is ours */
    uint32_t *seq;                /* operation counter (epoch), starts at 1 */
    uint32_t *done;               /* blocks finished in the current operation */
    uint64_t *sent; /* [N] messages of this operation whose stores are fenced, per destination */
    int32_t *err;   /* [4] first routing error: code, token, k, value (host-readable) */
    cchan_wait_ctl_t ctl; /* the communicator's: deadline, and the abort word in its record */
    cchan_diag_t *diag;   /* the group's own record of a failed wait (moe_wait) */
} moe_dev_t;

/* One operation's arguments. */
typedef struct moe_op {
    int32_t num_tokens;
    int32_t fp8;             /* dispatch: quantize to e4m3 with per-128-channel scales */
    int32_t phases;          /* MOE_PHASE_SEND | MOE_PHASE_RECV */
    const uint16_t *x;       /* dispatch: [T][H] bf16; combine: expert outputs (layout per mode) */
    const int32_t *topk;     /* [T][K] global expert ids, -1 = none (the handle's copy) */
    const float *weights;    /* combine: [T][K], NULL = 1 */
    void *out;               /* dispatch: tokens out; combine: [T][H] bf16 */
    float *out_scales;       /* dispatch fp8: scales out */
    int32_t *out_counts;     /* dispatch: [L] tokens per local expert (may be NULL) */
    int32_t *h_counts;       /* handle: [L] tokens per local expert */
    uint32_t *h_src;         /* handle: LL [L][NB], HT [NB]: moe_src_pack(rank, row) of each row */
    int32_t *h_tok;          /* handle LL: [N][B] token (at its rank) of message a from rank s */
    int32_t *h_inv;          /* handle LL: [N][B][K] output row of (rank s, token t, k), -1: none */
    int32_t *h_nmsg;         /* handle LL: [N] messages received from each rank */
    uint32_t *h_epoch;       /* handle: the epoch of its staged operation */
    uint16_t *h_slot;        /* handle HT: [T][N] token t's index among my tokens for rank r */
    uint32_t *h_mask;        /* handle HT: [T] ranks token t goes to */
    int32_t *h_mat;          /* handle HT: [N][N] tokens rank s sends rank r */
    int32_t *h_base;         /* handle HT: [N] first row of my tokens at rank r */
    uint64_t *h_chunk;       /* handle HT: [N][C] moe_ht_desc of rank s's chunk c */
    int32_t *out_route;      /* HT dispatch: [rows][K] local expert ids; NULL: not wanted */
    float *out_weights;      /* HT dispatch: [rows][K]; NULL: not wanted */
    const float *in_weights; /* HT dispatch: the tokens' router weights, may be NULL */
    int32_t ht_rows;         /* HT: rows this rank receives */
} moe_op_t;

#define MOE_PHASE_SEND 1
#define MOE_PHASE_RECV 2

/* Errors found in routing on the device (moe_dev_t.err[0]). */
#define MOE_ERR_EXPERT_RANGE 1
#define MOE_ERR_EXPERT_DUP 2
#define MOE_ERR_COUNT 3

/* Warps of a block the block scan keeps sums for: 1024 threads at the narrowest warp (32 lanes).
 * A constant, not 1024 / CCHAN_WARP_SIZE: host code sizes the shared memory of GPU launches
 * (moe_smem_bytes), and the host backend's width is not the GPU's. */
#define MOE_SCAN_WARPS_MAX 32

/* Per-block context: who runs, and its shared memory carved by moe_smem_layout. */
typedef struct moe_block {
    uint32_t block, nblocks, tid, nthreads;
    int32_t *topk;   /* [T][K] sanitized */
    uint32_t *mask;  /* [T] destination ranks of each token */
    uint16_t *slot;  /* [T][N] slot of token t at rank r (exclusive prefix of mask bits) */
    uint32_t *total; /* [N] tokens to rank r; then scratch */
    uint32_t *wsum;  /* [MOE_SCAN_WARPS_MAX][N] scan scratch */
    int32_t *hist;   /* [L] */
    uint32_t *list;  /* [max(B, T)] receive list */
    int32_t *misc;   /* [4 * MOE_MAX_RANKS + MOE_MAX_TOPK] */
} moe_block_t;

/* Shared memory of one block; B (max tokens per rank) bounds the token count of every phase. */
CCHAN_HOST_DEVICE_INLINE uint64_t moe_smem_bytes(int K, int N, int L, int B) {
    uint64_t n = (uint64_t)B * K * 4 + (uint64_t)B * 4 * 2 + (uint64_t)N * 4 +
                 (uint64_t)MOE_SCAN_WARPS_MAX * N * 4 + (uint64_t)L * 4 +
                 (4 * MOE_MAX_RANKS + MOE_MAX_TOPK) * 4 + (uint64_t)B * N * 2;
    return (n + 15) / 16 * 16;
}

CCHAN_DEVICE_INLINE void moe_smem_layout(moe_block_t *b, uint8_t *smem, int K, int N, int L,
                                         int B) {
    uint8_t *p = smem;
    b->topk = (int32_t *)(void *)p;
    p += (uint64_t)B * K * 4;
    b->mask = (uint32_t *)(void *)p;
    p += (uint64_t)B * 4;
    b->list = (uint32_t *)(void *)p;
    p += (uint64_t)B * 4;
    b->total = (uint32_t *)(void *)p;
    p += (uint64_t)N * 4;
    b->wsum = (uint32_t *)(void *)p;
    p += (uint64_t)MOE_SCAN_WARPS_MAX * N * 4;
    b->hist = (int32_t *)(void *)p;
    p += (uint64_t)L * 4;
    b->misc = (int32_t *)(void *)p;
    p += (4 * MOE_MAX_RANKS + MOE_MAX_TOPK) * 4;
    b->slot = (uint16_t *)(void *)p;
}

/* ------------------------------------------------------------------ packed words
 *
 * Where an output row came from (handle h_src, both modes): the sending rank and, LL, t * K + k of
 * the token's selection there, HT, the token index there. */
CCHAN_HOST_DEVICE_INLINE uint32_t moe_src_pack(int rank, uint32_t row) {
    return ((uint32_t)rank << 24) | row;
}
CCHAN_HOST_DEVICE_INLINE int moe_src_rank(uint32_t v) { return (int)(v >> 24); }
CCHAN_HOST_DEVICE_INLINE uint32_t moe_src_row(uint32_t v) { return v & 0xffffffu; }

/* ------------------------------------------------------------------ device-side waits
 *
 * Every wait of the kernels goes through moe_wait, which names the counter it awaits: the
 * diagnostic record (the group's own, host-mapped so it survives a trap) then says which counter
 * (class and index: expert, token or chunk), from which rank, expected and observed values, and
 * whether the communicator's abort ended it; cchan_moe.c's moe_diag_report turns it into words.
 * The record's id packs class and index; on a GPU the communicator's record gets the wait too. */
enum moe_wait_what {
    MOE_WAIT_ACK = 1,     /* index: the acknowledging rank (the peer) */
    MOE_WAIT_DCOUNT = 2,  /* LL dispatch counter; index: local expert */
    MOE_WAIT_SENT = 3,    /* this rank's blocks' fenced messages to rank `index` (no peer) */
    MOE_WAIT_WEIGHTS = 4, /* LL combine router weights from the peer */
    MOE_WAIT_PARTIAL = 5, /* LL combine partial sum; index: my token */
    MOE_WAIT_HTCOUNT = 6, /* HT handle creation: the peer's token counts */
    MOE_WAIT_HTCHUNK = 7, /* HT dispatch chunk flag; index: chunk */
    MOE_WAIT_HTPROG = 8   /* HT combine progress; index: chunk */
};
#define MOE_DIAG_TAG 0x4du /* 'M': the id's top byte */
#define MOE_DIAG_ID(what, index)                                                                   \
    ((MOE_DIAG_TAG << 24) | ((uint32_t)(what) << 20) | ((index)&0xfffffu))
#define MOE_DIAG_WHAT(id) (((id) >> 20) & 0xfu)
#define MOE_DIAG_INDEX(id) ((id)&0xfffffu)

/* Ends a wait that passed the deadline or saw the communicator's abort. The group's record gets
 * (what, index, peer, target, last value seen), first writer only, as cchan_device_fail writes a
 * record; on a GPU the communicator's record gets the same wait (peer: the source rank, id: the
 * packed counter), so cchan_comm_check_device names it too, and the kernel traps. The host backend
 * leaves the communicator's record alone (there it would outlive the error) and returns the
 * status. */
CCHAN_DEVICE_INLINE int moe_wait_fail(const moe_dev_t *d, const cchan_deadline_t *dl,
                                      uint64_t target, uint64_t seen, uint32_t what, int peer,
                                      uint32_t index) {
    const int abort = cchan_wait_aborted(&d->ctl);
    const int status = abort == 0                     ? CCHAN_ERR_DEVICE_TIMEOUT
                       : abort == CCHAN_ERR_PEER_DEAD ? CCHAN_ERR_PEER_DEAD
                                                      : CCHAN_ERR_ABORTED;
    const uint64_t waited = dl->start_ns != 0 ? cchan_clock_ns() - dl->start_ns : 0;
    cchan_diag_t *g = d->diag;
    if (g != NULL && cchan_load_relaxed_sys_u32(&g->state) == CCHAN_DIAG_EMPTY &&
        cchan_fetch_add_acq_rel_dev_u32(&g->claim, 1) == 0) {
        g->kind = CCHAN_WAIT_SEMAPHORE;
        g->rank = d->rank;
        g->peer = peer;
        g->id = MOE_DIAG_ID(what, index);
        g->expected = target;
        g->observed = seen;
        g->waited_ns = waited;
        g->aborted = abort != 0;
        cchan_store_release_sys_u32(&g->state, CCHAN_DIAG_COMPLETE);
    }
    cchan_wait_ctl_t ctl = d->ctl;
    ctl.peer = peer;
    ctl.id = MOE_DIAG_ID(what, index);
#if defined(CCHAN_BACKEND_HOST)
    ctl.diag = NULL;
#endif
    return cchan_device_fail(&ctl, CCHAN_WAIT_SEMAPHORE, target, seen, waited, status);
}

/* Spins until *p >= target (acquire, system scope), as cchan_wait_geq_u64 does: the deadline and
 * the abort word are the communicator's, the record of a failure the group's. 0, or on the host
 * backend CCHAN_ERR_DEVICE_TIMEOUT / CCHAN_ERR_PEER_DEAD / CCHAN_ERR_ABORTED (a GPU traps). */
CCHAN_DEVICE_INLINE int moe_wait(const moe_dev_t *d, const uint64_t *p, uint64_t target,
                                 uint32_t what, int peer, uint32_t index) {
    uint64_t v = cchan_load_acquire_sys_u64(p);
    cchan_deadline_t dl;
    cchan_deadline_init(&dl);
    if (CCHAN_LIKELY(v >= target)) goto done;
#if !defined(CCHAN_BACKEND_HOST)
    if (d->ctl.timeout_ns == 0) { /* the bare poll; the abort word once every stride */
        uint32_t it = 0;
        while ((v = cchan_load_acquire_sys_u64(p)) < target)
            if (CCHAN_UNLIKELY((++it % CCHAN_WAIT_CLOCK_STRIDE) == 0) &&
                cchan_wait_aborted(&d->ctl) != 0)
                return moe_wait_fail(d, &dl, target, v, what, peer, index);
        return CCHAN_OK;
    }
#endif
    while ((v = cchan_load_acquire_sys_u64(p)) < target)
        if (CCHAN_UNLIKELY(cchan_deadline_spin(&dl, &d->ctl)))
            return moe_wait_fail(d, &dl, target, v, what, peer, index);
done:
#if defined(CCHAN_BACKEND_HOST)
    /* as cchan_wait_done: a wait satisfied at once still ends on an abort (host backend only) */
    if (CCHAN_UNLIKELY(cchan_wait_aborted(&d->ctl) != 0))
        return moe_wait_fail(d, &dl, target, v, what, peer, index);
#endif
    return CCHAN_OK;
}

/* ------------------------------------------------------------------ small portable helpers */

#define MOE_UNROLL 4 /* 16-byte loads in flight per thread in the copy loops */

#if defined(CCHAN_BACKEND_HOST)
CCHAN_DEVICE_INLINE void moe_smem_add(int32_t *p, int32_t v) { *p += v; }
#else
CCHAN_DEVICE_INLINE void moe_smem_add(int32_t *p, int32_t v) { atomicAdd(p, v); }
#endif

CCHAN_DEVICE_INLINE void moe_record_error(const moe_dev_t *d, int32_t code, int32_t token,
                                          int32_t k, int32_t value) {
#if defined(CCHAN_BACKEND_HOST)
    if (d->err[0] != 0) return;
    d->err[0] = code;
#else
    if (atomicCAS(&d->err[0], 0, code) != 0) return;
#endif
    d->err[1] = token;
    d->err[2] = k;
    d->err[3] = value;
}

/* FP8 e4m3 (bias 7, max 448, no infinities) with round-to-nearest-even and saturation to +-448,
 * as the PTX cvt.rn.satfinite.e4m3x2.f32 instruction converts. */
CCHAN_HOST_DEVICE_INLINE uint8_t moe_f32_to_e4m3(float f) {
    uint32_t u = cchan_f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint8_t)(sign | 0x7fu);  /* NaN */
    if (a >= 0x43e00000u) return (uint8_t)(sign | 0x7eu); /* >= 448: saturate */
    if (a < 0x3c800000u) {                                /* below 2^-6: subnormal, unit 2^-9 */
        uint32_t exp = a >> 23;
        if (exp < 117) return sign; /* < 2^-10: rounds to zero (2^-10 itself ties to even 0) */
        uint32_t man = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 141u - exp; /* 20..24 */
        uint32_t q = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint8_t)(sign | q);
    }
    uint32_t v = a - (120u << 23); /* rebias 127 -> 7 */
    v += 0x7ffffu + ((v >> 20) & 1u);
    uint32_t r = v >> 20;
    if (r > 0x7eu) r = 0x7eu;
    return (uint8_t)(sign | r);
}

CCHAN_HOST_DEVICE_INLINE float moe_e4m3_to_f32(uint8_t q) {
    uint32_t sign = (uint32_t)(q & 0x80u) << 24;
    uint32_t exp = (q >> 3) & 0xfu, man = q & 7u;
    if (exp == 0xfu && man == 7u) return cchan_f32_from_bits(sign | 0x7fc00000u);
    if (exp == 0) {
        float v = (float)man * (1.0f / 512.0f);
        return sign ? -v : v;
    }
    return cchan_f32_from_bits(sign | ((exp + 120u) << 23) | (man << 20));
}

/* Four channels to four e4m3 bytes, packed little-endian. */
CCHAN_DEVICE_INLINE uint32_t moe_pack_e4m3x4(float a, float b, float c, float d) {
#if defined(CCHAN_BACKEND_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(lo) : "f"(a), "f"(b));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(hi) : "f"(c), "f"(d));
    return (uint32_t)lo | ((uint32_t)hi << 16);
#else
    return (uint32_t)moe_f32_to_e4m3(a) | ((uint32_t)moe_f32_to_e4m3(b) << 8) |
           ((uint32_t)moe_f32_to_e4m3(c) << 16) | ((uint32_t)moe_f32_to_e4m3(d) << 24);
#endif
}

/* The scale of a 128-channel group from its largest magnitude (DeepEP's convention: the group maps
 * onto +-448; an all-zero group gets a tiny scale instead of a division by zero). */
CCHAN_HOST_DEVICE_INLINE float moe_fp8_amax_clamp(float amax) {
    return amax < 1e-4f ? 1e-4f : amax;
}

CCHAN_DEVICE_INLINE float moe_bf16_lo(uint32_t w) { return cchan_f32_from_bits(w << 16); }
CCHAN_DEVICE_INLINE float moe_bf16_hi(uint32_t w) { return cchan_f32_from_bits(w & 0xffff0000u); }

/* 16 bytes as four words, whatever the backend's vector type. */
typedef struct moe_w4 {
    uint32_t w[4];
} moe_w4_t;
CCHAN_DEVICE_INLINE moe_w4_t moe_load16(const void *p) {
    cchan_raw16_t r = *(const cchan_raw16_t *)p;
    moe_w4_t v;
#if defined(CCHAN_BACKEND_HOST)
    v.w[0] = r.w[0];
    v.w[1] = r.w[1];
    v.w[2] = r.w[2];
    v.w[3] = r.w[3];
#else
    v.w[0] = r.x;
    v.w[1] = r.y;
    v.w[2] = r.z;
    v.w[3] = r.w;
#endif
    return v;
}
CCHAN_DEVICE_INLINE void moe_store16(void *p, moe_w4_t v) {
    cchan_raw16_t r;
#if defined(CCHAN_BACKEND_HOST)
    r.w[0] = v.w[0];
    r.w[1] = v.w[1];
    r.w[2] = v.w[2];
    r.w[3] = v.w[3];
#else
    r.x = v.w[0];
    r.y = v.w[1];
    r.z = v.w[2];
    r.w = v.w[3];
#endif
    *(cchan_raw16_t *)p = r;
}
/* Rounds 8 floats to bf16 and stores them as one 16-byte vector. */
CCHAN_DEVICE_INLINE void moe_store_bf16x8(void *p, const float *acc) {
    moe_w4_t o;
    for (int i = 0; i < 4; i++)
        o.w[i] = (uint32_t)cchan_f32_to_bf16(acc[2 * i]).bits |
                 ((uint32_t)cchan_f32_to_bf16(acc[2 * i + 1]).bits << 16);
    moe_store16(p, o);
}

/* Exclusive prefix of bit c of bits[i] over i < n, for columns c < ncols (<= MOE_MAX_RANKS):
 * prefix[i * ncols + c] (uint16, when prefix != NULL) and total[c]. Every thread of the block
 * calls it; on a GPU nthreads is a multiple of CCHAN_WARP_SIZE and at most 1024 (wsum holds
 * MOE_SCAN_WARPS_MAX warps). */
CCHAN_DEVICE_INLINE void moe_block_scan_bits(const uint32_t *bits, int n, int ncols,
                                             uint16_t *prefix, uint32_t *total, uint32_t *wsum,
                                             uint32_t tid, uint32_t nthreads) {
#if defined(CCHAN_BACKEND_HOST)
    (void)wsum;
    (void)tid;
    (void)nthreads;
    for (int c = 0; c < ncols; c++) total[c] = 0;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < ncols; c++) {
            if (prefix) prefix[i * ncols + c] = (uint16_t)total[c];
            total[c] += (bits[i] >> c) & 1u;
        }
#else
    const uint32_t lane = cchan_lane_id(tid), warp = cchan_warp_id(tid);
    const uint32_t nwarps = nthreads / CCHAN_WARP_SIZE;
    if (tid < (uint32_t)ncols) total[tid] = 0;
    __syncthreads();
    for (int base = 0; base < n; base += (int)nthreads) {
        int i = base + (int)tid;
        uint32_t b = i < n ? bits[i] : 0u;
        uint32_t pre[MOE_MAX_RANKS];
        for (int c = 0; c < ncols; c++) {
            cchan_lane_mask_t bal = cchan_warp_ballot((int)((b >> c) & 1u));
            pre[c] = cchan_lane_popc(bal & cchan_lanes_below(lane));
            if (lane == 0) wsum[warp * ncols + c] = cchan_lane_popc(bal);
        }
        __syncthreads();
        if (tid < (uint32_t)ncols) {
            uint32_t run = total[tid];
            for (uint32_t w = 0; w < nwarps; w++) {
                uint32_t t = wsum[w * ncols + tid];
                wsum[w * ncols + tid] = run;
                run += t;
            }
            total[tid] = run;
        }
        __syncthreads();
        if (i < n && prefix)
            for (int c = 0; c < ncols; c++)
                prefix[i * ncols + c] = (uint16_t)(wsum[warp * ncols + c] + pre[c]);
        __syncthreads();
    }
#endif
}

/* Invalid expert ids (outside [-1, E)) and repeats of an id within a token become -1 everywhere, so
 * that every phase and every rank agrees on the routing; the first is recorded when `record`. */
CCHAN_DEVICE_INLINE void moe_sanitize_row(const moe_dev_t *d, int32_t *row, int t, int record) {
    const int K = d->top_k;
    for (int k = 0; k < K; k++) {
        int32_t e = row[k];
        if (e < -1 || e >= d->num_experts) {
            if (record) moe_record_error(d, MOE_ERR_EXPERT_RANGE, t, k, e);
            row[k] = -1;
            continue;
        }
        for (int j = 0; j < k && e >= 0; j++)
            if (row[j] == e) {
                if (record) moe_record_error(d, MOE_ERR_EXPERT_DUP, t, k, e);
                row[k] = -1;
                break;
            }
    }
}

/* Loads the routing into shared memory, sanitized, with each token's destination-rank mask. */
CCHAN_DEVICE_INLINE void moe_load_routing(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                          int record) {
    const int T = op->num_tokens, K = d->top_k, L = d->local_experts;
    for (int i = (int)b->tid; i < T * K; i += (int)b->nthreads) b->topk[i] = op->topk[i];
    cchan_block_sync();
    for (int t = (int)b->tid; t < T; t += (int)b->nthreads) {
        int32_t *row = b->topk + (int64_t)t * K;
        moe_sanitize_row(d, row, t, record && b->block == 0);
        uint32_t m = 0;
        for (int k = 0; k < K; k++)
            if (row[k] >= 0) m |= 1u << (row[k] / L);
        b->mask[t] = m;
    }
    cchan_block_sync();
}

CCHAN_DEVICE_INLINE uint8_t *moe_parity(const moe_dev_t *d, int r, uint32_t epoch) {
    return d->peer[r] + (uint64_t)(epoch & 1u) * d->parity_bytes;
}

/* Before writing into any rank's parity for `epoch`: every rank has finished reading what it
 * received in that parity two operations ago (its ack), so a rank that runs ahead (one with nothing
 * to receive, or a staged pipeline) never overwrites data a peer has not consumed yet. */
CCHAN_DEVICE_INLINE int moe_wait_acks(const moe_dev_t *d, moe_block_t *b, uint32_t epoch) {
    int st = CCHAN_OK;
    if (epoch > 2) {
        const uint64_t *ack =
            (const uint64_t *)(const void *)(moe_parity(d, d->rank, epoch) + d->off_ack);
        for (int r = (int)b->tid; r < d->nranks; r += (int)b->nthreads) {
            int s = moe_wait(d, &ack[r], epoch - 2, MOE_WAIT_ACK, r, (uint32_t)r);
            if (s != CCHAN_OK) st = s;
        }
    }
    cchan_block_sync();
    return st;
}

/* ------------------------------------------------------------------ operation bookkeeping */

/* The epoch of this operation: a new one for a send, the staged one for a receive-only complete. */
CCHAN_DEVICE_INLINE uint32_t moe_op_epoch(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b) {
    uint32_t epoch = (op->phases & MOE_PHASE_SEND) ? *(volatile uint32_t *)d->seq
                                                   : *(volatile uint32_t *)op->h_epoch;
    if ((op->phases & MOE_PHASE_SEND) && b->block == 0 && b->tid == 0) *op->h_epoch = epoch;
    return epoch;
}

/* After the last block of the operation has finished: a send opens the next epoch; a receive
 * tells every sender that this parity's data from it has been consumed (moe_wait_acks). */
CCHAN_DEVICE_INLINE void moe_op_acks(const moe_dev_t *d, uint32_t epoch) {
    for (int r = 0; r < d->nranks; r++) {
        uint64_t *ack = (uint64_t *)(void *)(moe_parity(d, r, epoch) + d->off_ack);
        cchan_store_release_sys_u64(&ack[d->rank], epoch);
    }
}

CCHAN_DEVICE_INLINE void moe_op_finish(const moe_dev_t *d, const moe_op_t *op, moe_block_t *b,
                                       uint32_t epoch) {
    cchan_block_sync();
    if (b->tid == 0 && cchan_fetch_add_acq_rel_dev_u32(d->done, 1) == b->nblocks - 1) {
        *d->done = 0;
        if (op->phases & MOE_PHASE_RECV) moe_op_acks(d, epoch);
        if (op->phases & MOE_PHASE_SEND) *(volatile uint32_t *)d->seq = epoch + 1;
    }
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_MOE_KERNELS_H */
