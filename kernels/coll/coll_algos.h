/* cchan_coll algorithm bodies: inline device code shared by the CUDA kernels (coll_cuda.cu) and the
 * host platform (coll.c, one CPU thread per "block").
 *
 * Every body takes (block, nblocks, tid, nthreads): the caller's block index and grid size and the
 * thread's index in its block. The data partition depends only on the message, the grid and the
 * communicator, so the same element is handled by the same block index on every rank: the
 * per-block semaphores and LL flags pair up across ranks without any global synchronization.
 *
 * Scratch (per rank, cchan_mem_alloc, mapped into every peer):
 *   [ll_off, +2 * nranks * ll_slot)  LL16 packets: parity (epoch & 1) x source rank
 *   [hb_off, +2 * nranks * hb_slot)  HB staging: two regions x source rank (AllReduce: region 0
 *                                    reduce-scatter inputs, region 1 all-gather results;
 *                                    AllGather/ReduceScatter: regions alternate by round)
 * Streams: calls on one cchan_coll_t must be ordered (one stream, or synchronized); the safety of
 * reusing scratch without clearing relies on a rank's kernel k+1 starting after its kernel k ended.
 */
#ifndef CCHAN_COLL_ALGOS_H
#define CCHAN_COLL_ALGOS_H

#include "cchan/device.h"
#include "cchan/switch_channel.h"

#if defined(CCHAN_BACKEND_HOST)
#include <string.h>
#endif

CCHAN_EXTERN_C_BEGIN

#define COLL_MAX_RANKS 8
#define COLL_VEC 16u  /* bytes per vector access */
#define COLL_UNROLL 4 /* coll_reduce: vectors per thread in flight (two sources) */

enum coll_kernel_dtype {
    COLL_F32 = CCHAN_ELEM_F32,
    COLL_F16 = CCHAN_ELEM_F16,
    COLL_BF16 = CCHAN_ELEM_BF16
};

/* Everything a collective kernel needs, passed by value. */
typedef struct coll_args {
    const uint8_t *send;
    uint8_t *recv;
    uint64_t count; /* AllReduce: elements; AllGather: sendcount; ReduceScatter: recvcount */
    uint32_t esize; /* bytes per element */
    int32_t rank;
    int32_t nranks;
    int32_t in_place;
    uint8_t *scratch;                         /* this rank's scratch */
    uint8_t *peer_scratch[COLL_MAX_RANKS];    /* every rank's scratch mapped here ([rank] = own) */
    const uint8_t *peer_send[COLL_MAX_RANKS]; /* zero-copy: registered send buffers, mapped here */
    uint8_t *peer_recv[COLL_MAX_RANKS];       /* zero-copy: registered recv buffers, mapped here */
    uint64_t ll_off, ll_slot;      /* LL region: offset, bytes of one (parity, source) slot */
    uint64_t hb_off, hb_slot;      /* HB region: offset, bytes of one (region, source) slot */
    uint32_t *ll_epoch;            /* device memory, one counter per LL block */
    cchan_switch_channel_t sw;     /* SWITCH: over every rank's scratch */
    uint64_t sw_off, sw_chunk;     /* SWITCH: inputs at sw_off, results at sw_off + sw_chunk */
    const cchan_semaphore_t *sems; /* device memory: [block][peer index], nranks - 1 per block */
    cchan_wait_ctl_t ll_ctl;       /* deadline for LL packet waits */
    uint64_t part_off, part_len;   /* CE_RS: chunk [part_off, +part_len) of every rank's shard */
    uint64_t sm_len; /* CE_RS: elements (AG_PUSH: bytes) of the chunk the SMs store into every
                        peer's recv; the copy engines move the rest */
    uint64_t ce_off, ce_slot; /* CE_RS: staging in scratch, regions x peers (coll_ce_slot) */
    uint32_t ce_region;       /* CE_RS: the chunk's staging region */
    uint32_t ce_big_pages;    /* CE_ALLPAIRS: send's and recv's allocations have 2 MiB pages */
    uint32_t pdl;             /* host: launch as a programmatic dependent (coll.c, pdl) */
    uint32_t ce_pushed;       /* CE_RS: the copy engines already put the shards in the slots */
} coll_args_t;

/* ------------------------------------------------------------------ element arithmetic
 * A 4-byte word holds one f32 or two 16-bit elements; sums run in f32 and round once. */

/* acc[0..2k) += the k words of w (k = 1, 2 or 4). */
CCHAN_DEVICE_INLINE void coll_acc_words(float *acc, const uint32_t *w, int k, int dt) {
    for (int j = 0; j < k; j++) {
        float lo, hi;
        cchan_unpack_w32(w[j], dt, &lo, &hi);
        acc[2 * j] += lo;
        acc[2 * j + 1] += hi;
    }
}
CCHAN_DEVICE_INLINE void coll_pack_words(uint32_t *w, const float *acc, int k, int dt) {
    for (int j = 0; j < k; j++) w[j] = cchan_pack_w32(acc[2 * j], acc[2 * j + 1], dt);
}

CCHAN_DEVICE_INLINE float coll_load_elem(const uint8_t *p, int dt) {
    if (dt == COLL_F32) return *(const float *)(const void *)p;
    uint16_t b = *(const uint16_t *)(const void *)p;
    float lo, hi;
    cchan_unpack_w32((uint32_t)b, dt, &lo, &hi);
    return lo;
}
CCHAN_DEVICE_INLINE void coll_store_elem(uint8_t *p, float v, int dt) {
    if (dt == COLL_F32) {
        *(float *)(void *)p = v;
        return;
    }
    *(uint16_t *)(void *)p = (uint16_t)cchan_pack_w32(v, 0.0f, dt);
}

/* 16-byte vector load/store of plain (non-volatile) data; p 16-byte aligned. */
CCHAN_DEVICE_INLINE void coll_load16(const uint8_t *p, uint32_t *w) {
#if defined(CCHAN_BACKEND_CUDA) || defined(CCHAN_BACKEND_HIP)
    uint4 v = *(const uint4 *)(const void *)p;
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
#else
    memcpy(w, p, 16);
#endif
}
CCHAN_DEVICE_INLINE void coll_store16(uint8_t *p, const uint32_t *w) {
#if defined(CCHAN_BACKEND_CUDA) || defined(CCHAN_BACKEND_HIP)
    uint4 v;
    v.x = w[0];
    v.y = w[1];
    v.z = w[2];
    v.w = w[3];
    *(uint4 *)(void *)p = v;
#else
    memcpy(p, w, 16);
#endif
}

/* dsts[d][i] = sum_s srcs[s][i] for i < nelem elements. Cooperative over (tid, nthreads).
 * 16-byte vectors when every pointer is 16-byte aligned, elements otherwise and for the tail. */
CCHAN_DEVICE_INLINE void coll_reduce(uint8_t *const *dsts, int ndst, const uint8_t *const *srcs,
                                     int nsrc, uint64_t nelem, uint32_t esize, int dt, uint32_t tid,
                                     uint32_t nthreads) {
    uintptr_t mis = 0;
    for (int d = 0; d < ndst; d++) mis |= (uintptr_t)dsts[d];
    for (int s = 0; s < nsrc; s++) mis |= (uintptr_t)srcs[s];
    uint64_t bytes = nelem * esize;
    uint64_t nvec = (mis & (COLL_VEC - 1)) ? 0 : bytes / COLL_VEC;
    uint64_t v = tid;
    if (nsrc == 2) {
        /* Two sources (two ranks): COLL_UNROLL vectors per thread with every load issued before
         * the first sum, so a thread keeps that many NVLink reads in flight instead of one. */
        for (; v + (COLL_UNROLL - 1) * (uint64_t)nthreads < nvec; v += COLL_UNROLL * nthreads) {
            uint32_t w0[COLL_UNROLL][4], w1[COLL_UNROLL][4];
            for (int u = 0; u < COLL_UNROLL; u++) {
                coll_load16(srcs[0] + (v + (uint64_t)u * nthreads) * COLL_VEC, w0[u]);
                coll_load16(srcs[1] + (v + (uint64_t)u * nthreads) * COLL_VEC, w1[u]);
            }
            for (int u = 0; u < COLL_UNROLL; u++) {
                float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                coll_acc_words(acc, w0[u], 4, dt);
                coll_acc_words(acc, w1[u], 4, dt);
                coll_pack_words(w0[u], acc, 4, dt);
                for (int d = 0; d < ndst; d++)
                    coll_store16(dsts[d] + (v + (uint64_t)u * nthreads) * COLL_VEC, w0[u]);
            }
        }
    }
    for (; v < nvec; v += nthreads) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        uint32_t w[4];
        for (int s = 0; s < nsrc; s++) {
            coll_load16(srcs[s] + v * COLL_VEC, w);
            coll_acc_words(acc, w, 4, dt);
        }
        coll_pack_words(w, acc, 4, dt);
        for (int d = 0; d < ndst; d++) coll_store16(dsts[d] + v * COLL_VEC, w);
    }
    for (uint64_t e = nvec * COLL_VEC / esize + tid; e < nelem; e += nthreads) {
        float acc = 0.0f;
        for (int s = 0; s < nsrc; s++) acc += coll_load_elem(srcs[s] + e * esize, dt);
        for (int d = 0; d < ndst; d++) coll_store_elem(dsts[d] + e * esize, acc, dt);
    }
}

/* ------------------------------------------------------------------ small helpers */

CCHAN_HOST_DEVICE_INLINE uint64_t coll_min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
CCHAN_HOST_DEVICE_INLINE uint64_t coll_round_up(uint64_t x, uint64_t m) {
    return (x + m - 1) / m * m;
}

/* Up to 8 payload bytes at p (n valid) as one little-endian word, and back. */
CCHAN_DEVICE_INLINE uint64_t coll_load8(const uint8_t *p, uint64_t n) {
    if (CCHAN_LIKELY(n >= 8 && ((uintptr_t)p & 7) == 0)) return *(const uint64_t *)(const void *)p;
    uint32_t n0 = n >= 4 ? 4u : (uint32_t)n;
    uint32_t n1 = n >= 8 ? 4u : (n > 4 ? (uint32_t)(n - 4) : 0u);
    uint64_t lo = cchan_ll_load_word(p, n0);
    uint64_t hi = n1 ? cchan_ll_load_word(p + 4, n1) : 0u;
    return lo | (hi << 32);
}
CCHAN_DEVICE_INLINE void coll_store8(uint8_t *p, uint64_t w, uint64_t n) {
    if (CCHAN_LIKELY(n >= 8 && ((uintptr_t)p & 7) == 0)) {
        *(uint64_t *)(void *)p = w;
        return;
    }
    uint32_t n0 = n >= 4 ? 4u : (uint32_t)n;
    uint32_t n1 = n >= 8 ? 4u : (n > 4 ? (uint32_t)(n - 4) : 0u);
    cchan_ll_store_word(p, (uint32_t)w, n0);
    if (n1) cchan_ll_store_word(p + 4, (uint32_t)(w >> 32), n1);
}

CCHAN_DEVICE_INLINE int coll_peer(const coll_args_t *a, int j) { /* j-th peer, j = 1..n-1 */
    return (a->rank + j) % a->nranks;
}
/* Index of `peer` among this rank's peers in the semaphore table (ranks in order, self skipped). */
CCHAN_DEVICE_INLINE const cchan_semaphore_t *coll_block_sems(const coll_args_t *a, uint32_t block) {
    if (a->nranks == 1) return a->sems; /* no peers: no table (NULL), and NULL + 0 is undefined */
    return a->sems + (uint64_t)block * (uint32_t)(a->nranks - 1);
}

/* ------------------------------------------------------------------ LL all-pairs (one phase)
 *
 * Every rank writes the data each peer needs as LL16 packets into that peer's scratch slot for this
 * rank, flagged with the block's epoch; then it reads its own slots (spinning on the flags) and
 * reduces or copies. No semaphore, no barrier: data and synchronization arrive together. Slots are
 * double-buffered by epoch parity, so a rank never overwrites packets a slower peer is still
 * reading: before it writes epoch e + 2 into parity (e & 1) it has read that peer's epoch e + 1
 * packets, which the peer wrote after finishing epoch e. Flags never repeat (epochs only grow), so
 * nothing is ever cleared. */

CCHAN_DEVICE_INLINE cchan_vec16_t *coll_ll_slot(const coll_args_t *a, uint8_t *scratch,
                                                uint32_t parity, int src) {
    return (cchan_vec16_t *)(void *)(scratch + a->ll_off +
                                     ((uint64_t)parity * (uint32_t)a->nranks + (uint32_t)src) *
                                         a->ll_slot);
}

/* Reads the epoch of this block. Every thread reads it before coll_ll_end's block barrier. */
CCHAN_DEVICE_INLINE uint32_t coll_ll_begin(const coll_args_t *a, uint32_t block) {
    return *(volatile uint32_t *)&a->ll_epoch[block] + 1u;
}
CCHAN_DEVICE_INLINE void coll_ll_end(const coll_args_t *a, uint32_t block, uint32_t flag,
                                     uint32_t tid) {
    cchan_block_sync();
    if (tid == 0) a->ll_epoch[block] = flag;
}

/* The first packet a thread of an LL kernel handles (it then steps by nblocks * nthreads).
 * Consecutive warps go to consecutive blocks, and the lanes of a warp to consecutive packets (one
 * coalesced store per warp, at any warp width), so a message of a few thousand packets is sent and
 * polled from every block's SM rather than from the first few: one SM's remote stores are what
 * limit a small message (docs/tuning.md, "LL packet spread"). Any bijection
 * onto [0, nblocks * nthreads) works here: the slots' reuse rule holds kernel by kernel (see
 * above), not block by block. */
CCHAN_HOST_DEVICE_INLINE uint64_t coll_ll_index(uint32_t block, uint32_t nblocks, uint32_t tid,
                                                uint32_t nthreads) {
    if (nthreads % CCHAN_WARP_SIZE) return (uint64_t)block * nthreads + tid;
    return ((uint64_t)cchan_warp_id(tid) * nblocks + block) * CCHAN_WARP_SIZE + cchan_lane_id(tid);
}

/* payload bytes starting at src, as packets into every peer's slot `slot_src` (this rank). */
CCHAN_DEVICE_INLINE void coll_ll_put_all(const coll_args_t *a, const uint8_t *src, uint64_t bytes,
                                         uint64_t src_stride, uint32_t flag, uint64_t gtid,
                                         uint64_t gthreads) {
    uint64_t npk = (bytes + 7) / 8;
    uint32_t parity = flag & 1u;
    for (uint64_t i = gtid; i < npk; i += gthreads) {
        uint64_t left = bytes - i * 8;
        for (int j = 1; j < a->nranks; j++) {
            int p = coll_peer(a, j);
            const uint8_t *s = src + (uint64_t)p * src_stride; /* stride 0: the same data to all */
            uint64_t w = coll_load8(s + i * 8, left);
            cchan_ll16_write(&coll_ll_slot(a, a->peer_scratch[p], parity, a->rank)[i], w, flag);
        }
    }
}

CCHAN_DEVICE_INLINE int coll_ll_allreduce_body(const coll_args_t *a, int dt, uint32_t block,
                                               uint32_t nblocks, uint32_t tid, uint32_t nthreads) {
    uint32_t flag = coll_ll_begin(a, block);
    uint64_t gtid = coll_ll_index(block, nblocks, tid, nthreads);
    uint64_t gthreads = (uint64_t)nblocks * nthreads;
    uint64_t bytes = a->count * a->esize, npk = (bytes + 7) / 8;
    int r = CCHAN_OK;
    coll_ll_put_all(a, a->send, bytes, 0, flag, gtid, gthreads);
    for (uint64_t i = gtid; i < npk && r == CCHAN_OK; i += gthreads) {
        uint64_t left = bytes - i * 8;
        union {
            uint64_t u;
            uint32_t w[2];
        } v;
        float acc[4] = {0, 0, 0, 0};
        v.u = coll_load8(a->send + i * 8, left);
        coll_acc_words(acc, v.w, 2, dt);
        for (int j = 1; j < a->nranks; j++) {
            int p = coll_peer(a, j);
            r = cchan_ll16_read_one(&coll_ll_slot(a, a->scratch, flag & 1u, p)[i], flag, &a->ll_ctl,
                                    &v.u);
            if (r) break;
            coll_acc_words(acc, v.w, 2, dt);
        }
        coll_pack_words(v.w, acc, 2, dt);
        coll_store8(a->recv + i * 8, v.u, left);
    }
    coll_ll_end(a, block, flag, tid);
    return r;
}

CCHAN_DEVICE_INLINE int coll_ll_allgather_body(const coll_args_t *a, uint32_t block,
                                               uint32_t nblocks, uint32_t tid, uint32_t nthreads) {
    uint32_t flag = coll_ll_begin(a, block);
    uint64_t gtid = coll_ll_index(block, nblocks, tid, nthreads);
    uint64_t gthreads = (uint64_t)nblocks * nthreads;
    uint64_t bytes = a->count * a->esize, npk = (bytes + 7) / 8;
    int r = CCHAN_OK;
    coll_ll_put_all(a, a->send, bytes, 0, flag, gtid, gthreads);
    if (!a->in_place) {
        uint8_t *mine = a->recv + (uint64_t)a->rank * bytes;
        for (uint64_t i = gtid; i < npk; i += gthreads) {
            uint64_t left = bytes - i * 8;
            coll_store8(mine + i * 8, coll_load8(a->send + i * 8, left), left);
        }
    }
    for (uint64_t i = gtid; i < npk && r == CCHAN_OK; i += gthreads) {
        uint64_t left = bytes - i * 8;
        for (int j = 1; j < a->nranks; j++) {
            int p = coll_peer(a, j);
            uint64_t w;
            r = cchan_ll16_read_one(&coll_ll_slot(a, a->scratch, flag & 1u, p)[i], flag, &a->ll_ctl,
                                    &w);
            if (r) break;
            coll_store8(a->recv + (uint64_t)p * bytes + i * 8, w, left);
        }
    }
    coll_ll_end(a, block, flag, tid);
    return r;
}

CCHAN_DEVICE_INLINE int coll_ll_reducescatter_body(const coll_args_t *a, int dt, uint32_t block,
                                                   uint32_t nblocks, uint32_t tid,
                                                   uint32_t nthreads) {
    uint32_t flag = coll_ll_begin(a, block);
    uint64_t gtid = coll_ll_index(block, nblocks, tid, nthreads);
    uint64_t gthreads = (uint64_t)nblocks * nthreads;
    uint64_t bytes = a->count * a->esize, npk = (bytes + 7) / 8;
    int r = CCHAN_OK;
    coll_ll_put_all(a, a->send, bytes, bytes, flag, gtid, gthreads);
    const uint8_t *mine = a->send + (uint64_t)a->rank * bytes;
    for (uint64_t i = gtid; i < npk && r == CCHAN_OK; i += gthreads) {
        uint64_t left = bytes - i * 8;
        union {
            uint64_t u;
            uint32_t w[2];
        } v;
        float acc[4] = {0, 0, 0, 0};
        v.u = coll_load8(mine + i * 8, left);
        coll_acc_words(acc, v.w, 2, dt);
        for (int j = 1; j < a->nranks; j++) {
            int p = coll_peer(a, j);
            r = cchan_ll16_read_one(&coll_ll_slot(a, a->scratch, flag & 1u, p)[i], flag, &a->ll_ctl,
                                    &v.u);
            if (r) break;
            coll_acc_words(acc, v.w, 2, dt);
        }
        coll_pack_words(v.w, acc, 2, dt);
        coll_store8(a->recv + i * 8, v.u, left);
    }
    coll_ll_end(a, block, flag, tid);
    return r;
}

/* ------------------------------------------------------------------ HB all-pairs (two phase)
 *
 * Bulk stores with 16-byte vectors into the peers' scratch, then one rank barrier per block (a
 * release signal and an acquire wait per peer), then the consumer reads. Messages larger than the
 * staging slots run in rounds. Each block owns the same slice of every round on every rank, so its
 * semaphores order exactly the data it moved. */

CCHAN_DEVICE_INLINE uint8_t *coll_hb_slot(const coll_args_t *a, uint8_t *scratch, uint32_t region,
                                          int src) {
    return scratch + a->hb_off +
           ((uint64_t)region * (uint32_t)a->nranks + (uint32_t)src) * a->hb_slot;
}

/* Per-block partition. Every block owns a fixed part of each staging slot (its `lane`, hb_slot /
 * nblocks bytes) for the whole call, and moves its piece of the message through it in rounds; all
 * blocks run the same number of rounds on every rank, so their semaphores pair up. */
typedef struct coll_hb_plan {
    uint64_t per;      /* elements of a block's piece of a range of `total` elements */
    uint64_t lane;     /* elements of the block's lane in a slot */
    uint64_t rounds;   /* ceil(per / lane) */
    uint64_t lane_off; /* bytes from a slot's start to this block's lane */
} coll_hb_plan_t;

CCHAN_DEVICE_INLINE coll_hb_plan_t coll_hb_plan(const coll_args_t *a, uint64_t total,
                                                uint32_t esize, uint32_t block, uint32_t nblocks) {
    coll_hb_plan_t pl;
    uint64_t vec = COLL_VEC / esize;
    pl.per = coll_round_up((total + nblocks - 1) / nblocks, vec);
    uint64_t lane_bytes = a->hb_slot / nblocks / COLL_VEC * COLL_VEC;
    pl.lane = lane_bytes / esize;
    pl.rounds = (pl.per + pl.lane - 1) / pl.lane;
    pl.lane_off = (uint64_t)block * lane_bytes;
    return pl;
}

/* Round k of block `block` over a range of len elements: [*off, *off + *n). */
CCHAN_DEVICE_INLINE void coll_hb_round(const coll_hb_plan_t *pl, uint64_t len, uint32_t block,
                                       uint64_t k, uint64_t *off, uint64_t *n) {
    uint64_t piece0 = coll_min_u64((uint64_t)block * pl->per, len);
    uint64_t piece_len = coll_min_u64(pl->per, len - piece0);
    uint64_t r0 = coll_min_u64(k * pl->lane, piece_len);
    *off = piece0 + r0;
    *n = coll_min_u64(pl->lane, piece_len - r0);
}

CCHAN_DEVICE_INLINE int coll_hb_barrier(const coll_args_t *a, uint32_t block, uint32_t tid) {
    return cchan_rank_barrier(coll_block_sems(a, block), (uint32_t)(a->nranks - 1), tid);
}

/* AllReduce: reduce-scatter through region 0, all-gather through region 1. Shard p (whole vectors)
 * is reduced by rank p; its blocks move their pieces of every shard in lane-sized rounds. */
CCHAN_DEVICE_INLINE int coll_hb_allreduce_body(const coll_args_t *a, int dt, uint32_t block,
                                               uint32_t nblocks, uint32_t tid, uint32_t nthreads) {
    const uint32_t es = a->esize;
    const int n = a->nranks, me = a->rank;
    const uint64_t shard = coll_round_up((a->count + n - 1) / (uint32_t)n, COLL_VEC / es);
    const coll_hb_plan_t pl = coll_hb_plan(a, shard, es, block, nblocks);
    uint64_t len[COLL_MAX_RANKS];
    for (int p = 0; p < n; p++) {
        uint64_t s0 = coll_min_u64((uint64_t)p * shard, a->count);
        len[p] = coll_min_u64(shard, a->count - s0);
    }
    int r = CCHAN_OK;
    for (uint64_t k = 0; k < pl.rounds && r == CCHAN_OK; k++) {
        uint64_t off, cnt;
        /* reduce-scatter: my input's part of shard p goes to peer p's region-0 slot for me */
        for (int j = 1; j < n; j++) {
            int p = coll_peer(a, j);
            coll_hb_round(&pl, len[p], block, k, &off, &cnt);
            cchan_copy(coll_hb_slot(a, a->peer_scratch[p], 0, me) + pl.lane_off,
                       a->send + ((uint64_t)p * shard + off) * es, cnt * es, tid, nthreads);
        }
        r = coll_hb_barrier(a, block, tid);
        if (r) break;
        /* reduce my shard's part from my input and every peer's slot; store it here and into
         * every peer's region-1 slot for me */
        {
            const uint8_t *srcs[COLL_MAX_RANKS];
            uint8_t *dsts[COLL_MAX_RANKS];
            coll_hb_round(&pl, len[me], block, k, &off, &cnt);
            uint64_t at = ((uint64_t)me * shard + off) * es;
            srcs[0] = a->send + at;
            dsts[0] = a->recv + at;
            for (int j = 1; j < n; j++) {
                int p = coll_peer(a, j);
                srcs[j] = coll_hb_slot(a, a->scratch, 0, p) + pl.lane_off;
                dsts[j] = coll_hb_slot(a, a->peer_scratch[p], 1, me) + pl.lane_off;
            }
            coll_reduce(dsts, n, srcs, n, cnt, es, dt, tid, nthreads);
        }
        r = coll_hb_barrier(a, block, tid);
        if (r) break;
        for (int j = 1; j < n; j++) {
            int p = coll_peer(a, j);
            coll_hb_round(&pl, len[p], block, k, &off, &cnt);
            cchan_copy(a->recv + ((uint64_t)p * shard + off) * es,
                       coll_hb_slot(a, a->scratch, 1, p) + pl.lane_off, cnt * es, tid, nthreads);
        }
    }
    return r;
}

/* AllGather: my input to every peer's slot (region = round parity), barrier, copy out. A final
 * barrier keeps the next call's first round from overwriting slots a peer still copies out. */
CCHAN_DEVICE_INLINE int coll_hb_allgather_body(const coll_args_t *a, uint32_t block,
                                               uint32_t nblocks, uint32_t tid, uint32_t nthreads) {
    const int n = a->nranks, me = a->rank;
    const uint64_t bytes = a->count * a->esize;
    const coll_hb_plan_t pl = coll_hb_plan(a, bytes, 1, block, nblocks);
    int r = CCHAN_OK;
    for (uint64_t k = 0; k < pl.rounds && r == CCHAN_OK; k++) {
        uint32_t region = (uint32_t)(k & 1u);
        uint64_t off, len;
        coll_hb_round(&pl, bytes, block, k, &off, &len);
        for (int j = 1; j < n; j++) {
            int p = coll_peer(a, j);
            cchan_copy(coll_hb_slot(a, a->peer_scratch[p], region, me) + pl.lane_off, a->send + off,
                       len, tid, nthreads);
        }
        if (!a->in_place)
            cchan_copy(a->recv + (uint64_t)me * bytes + off, a->send + off, len, tid, nthreads);
        r = coll_hb_barrier(a, block, tid);
        if (r) break;
        for (int j = 1; j < n; j++) {
            int p = coll_peer(a, j);
            cchan_copy(a->recv + (uint64_t)p * bytes + off,
                       coll_hb_slot(a, a->scratch, region, p) + pl.lane_off, len, tid, nthreads);
        }
    }
    if (r == CCHAN_OK) r = coll_hb_barrier(a, block, tid);
    return r;
}

/* ReduceScatter: my input's block p to peer p's slot (region = round parity), barrier, reduce. */
CCHAN_DEVICE_INLINE int coll_hb_reducescatter_body(const coll_args_t *a, int dt, uint32_t block,
                                                   uint32_t nblocks, uint32_t tid,
                                                   uint32_t nthreads) {
    const uint32_t es = a->esize;
    const int n = a->nranks, me = a->rank;
    const coll_hb_plan_t pl = coll_hb_plan(a, a->count, es, block, nblocks);
    int r = CCHAN_OK;
    for (uint64_t k = 0; k < pl.rounds && r == CCHAN_OK; k++) {
        uint32_t region = (uint32_t)(k & 1u);
        uint64_t off, len;
        coll_hb_round(&pl, a->count, block, k, &off, &len);
        for (int j = 1; j < n; j++) {
            int p = coll_peer(a, j);
            cchan_copy(coll_hb_slot(a, a->peer_scratch[p], region, me) + pl.lane_off,
                       a->send + ((uint64_t)p * a->count + off) * es, len * es, tid, nthreads);
        }
        r = coll_hb_barrier(a, block, tid);
        if (r) break;
        const uint8_t *srcs[COLL_MAX_RANKS];
        uint8_t *dst = a->recv + off * es;
        srcs[0] = a->send + ((uint64_t)me * a->count + off) * es;
        for (int j = 1; j < n; j++)
            srcs[j] = coll_hb_slot(a, a->scratch, region, coll_peer(a, j)) + pl.lane_off;
        coll_reduce(&dst, 1, srcs, n, len, es, dt, tid, nthreads);
    }
    if (r == CCHAN_OK) r = coll_hb_barrier(a, block, tid);
    return r;
}

/* ------------------------------------------------------------------ HB zero-copy AllReduce
 *
 * For buffers registered with cchan_coll_register on every rank: a barrier (every peer's input is
 * ready and nobody still reads last call's output), then each rank reads its shard from every
 * peer's send buffer at once, reduces in registers and stores the result into every rank's recv
 * buffer; a second barrier publishes the results. No scratch, one pass over the data. */
CCHAN_DEVICE_INLINE int coll_zc_allreduce_body(const coll_args_t *a, int dt, uint32_t block,
                                               uint32_t nblocks, uint32_t tid, uint32_t nthreads) {
    const uint32_t es = a->esize;
    const int n = a->nranks, me = a->rank;
    uint64_t shard = coll_round_up((a->count + n - 1) / (uint32_t)n, COLL_VEC / es);
    uint64_t s0 = coll_min_u64((uint64_t)me * shard, a->count);
    uint64_t len = coll_min_u64(shard, a->count - s0);
    uint64_t per = coll_round_up((len + nblocks - 1) / nblocks, COLL_VEC / es);
    uint64_t off = coll_min_u64((uint64_t)block * per, len), plen = coll_min_u64(per, len - off);
    int r = coll_hb_barrier(a, block, tid);
    if (r) return r;
    const uint8_t *srcs[COLL_MAX_RANKS];
    uint8_t *dsts[COLL_MAX_RANKS];
    for (int j = 0; j < n; j++) {
        int p = coll_peer(a, j);
        srcs[j] = a->peer_send[p] + (s0 + off) * es;
        dsts[j] = a->peer_recv[p] + (s0 + off) * es;
    }
    coll_reduce(dsts, n, srcs, n, plen, es, dt, tid, nthreads);
    return coll_hb_barrier(a, block, tid);
}

/* HB zero-copy ReduceScatter, for a send registered on every rank: a barrier (every peer's input
 * is ready), then each rank reads its block from every rank's send at once, reduces in registers
 * and stores it into its own recv; a second barrier, so that no rank returns (and reuses its send)
 * while a peer still reads it. */
CCHAN_DEVICE_INLINE int coll_zc_reducescatter_body(const coll_args_t *a, int dt, uint32_t block,
                                                   uint32_t nblocks, uint32_t tid,
                                                   uint32_t nthreads) {
    const uint32_t es = a->esize;
    const int n = a->nranks, me = a->rank;
    const uint64_t len = a->count, s0 = (uint64_t)me * len;
    uint64_t per = coll_round_up((len + nblocks - 1) / nblocks, COLL_VEC / es);
    uint64_t off = coll_min_u64((uint64_t)block * per, len), plen = coll_min_u64(per, len - off);
    int r = coll_hb_barrier(a, block, tid);
    if (r) return r;
    const uint8_t *srcs[COLL_MAX_RANKS];
    for (int j = 0; j < n; j++) srcs[j] = a->peer_send[coll_peer(a, j)] + (s0 + off) * es;
    uint8_t *dst = a->recv + off * es;
    coll_reduce(&dst, 1, srcs, n, plen, es, dt, tid, nthreads);
    return coll_hb_barrier(a, block, tid);
}

/* ------------------------------------------------------------------ CE all-pairs
 *
 * Copy engines and SMs together, on registered buffers, as a short sequence of launches and
 * copies on the caller's stream (coll.c: coll_ce_allreduce, coll_ce_allgather), graph-capturable:
 *   AllReduce: barrier; then chunk by chunk (the same number on every rank), a CE_RS kernel whose
 *     blocks push their piece of the chunk of every peer's shard into that peer's staging slot
 *     (region = chunk parity), meet the same block of every peer at a barrier, and reduce their
 *     piece of this rank's chunk from the input and the slots into recv (the first sm_len elements
 *     also into every peer's recv); after each kernel the copy engines copy the rest of the reduced
 *     chunk into every peer's recv on a side stream, while the next chunk is pushed; the streams
 *     join; barrier. A region is pushed into again two chunks later, after the barrier of the
 *     chunk in between, which the peer reaches only once it has reduced the region's last chunk.
 *   AllGather: barrier; the copy engines copy this rank's block from send into every peer's recv,
 *     while an AG_PUSH kernel stores the first sm_len bytes of it into every peer's recv and copies
 *     send into this rank's own recv block; join; barrier.
 * The barriers at both ends run in a one-block BARRIER kernel (the semaphores of HB block 0): the
 * first says that every peer has entered the call (its scratch and recv are free), the last that
 * every peer's copies into this rank have landed. */
CCHAN_DEVICE_INLINE int coll_barrier_body(const coll_args_t *a, uint32_t tid) {
    return coll_hb_barrier(a, 0, tid);
}

/* Rank dst's staging slot for what rank src sends it in the current region (`scratch` is dst's
 * scratch as the caller maps it): a region holds a slot per peer of dst, the ranks after dst in
 * ring order. */
CCHAN_DEVICE_INLINE uint8_t *coll_ce_slot(const coll_args_t *a, uint8_t *scratch, int dst,
                                          int src) {
    const uint32_t n = (uint32_t)a->nranks, peers = n > 1 ? n - 1 : 1;
    const uint32_t idx = ((uint32_t)src + n - (uint32_t)dst - 1) % n;
    return scratch + a->ce_off + ((uint64_t)a->ce_region * peers + idx) * a->ce_slot;
}

CCHAN_DEVICE_INLINE int coll_ce_rs_body(const coll_args_t *a, int dt, uint32_t block,
                                        uint32_t nblocks, uint32_t tid, uint32_t nthreads) {
    const uint32_t es = a->esize, vec = COLL_VEC / es;
    const int n = a->nranks, me = a->rank;
    const uint64_t shard = coll_round_up((a->count + n - 1) / (uint32_t)n, vec);
    /* the piece of every shard's chunk this block moves: the same bounds on every rank */
    const uint64_t per = coll_round_up((a->part_len + nblocks - 1) / nblocks, vec);
    const uint64_t p0 = coll_min_u64((uint64_t)block * per, a->part_len);
    uint64_t at[COLL_MAX_RANKS], len[COLL_MAX_RANKS];
    for (int p = 0; p < n; p++) {
        uint64_t s0 = coll_min_u64((uint64_t)p * shard, a->count);
        uint64_t slen = coll_min_u64(shard, a->count - s0);
        uint64_t c0 = coll_min_u64(a->part_off, slen);
        uint64_t clen = coll_min_u64(a->part_len, slen - c0);
        at[p] = s0 + c0 + p0;
        len[p] = p0 < clen ? coll_min_u64(per, clen - p0) : 0;
    }
    for (int j = 1; j < n && !a->ce_pushed; j++) {
        int p = coll_peer(a, j);
        cchan_copy(coll_ce_slot(a, a->peer_scratch[p], p, me) + p0 * es, a->send + at[p] * es,
                   len[p] * es, tid, nthreads);
    }
    /* every peer's piece of this chunk is in this rank's slots (pushed above, or by the peer's
     * copy engine before its kernel started) */
    int r = coll_hb_barrier(a, block, tid);
    if (r) return r;
    const uint8_t *srcs[COLL_MAX_RANKS];
    uint8_t *dsts[COLL_MAX_RANKS];
    srcs[0] = a->send + at[me] * es;
    dsts[0] = a->recv + at[me] * es;
    for (int j = 1; j < n; j++) {
        int p = coll_peer(a, j);
        srcs[j] = coll_ce_slot(a, a->scratch, me, p) + p0 * es;
        dsts[j] = a->peer_recv[p] + at[me] * es;
    }
    uint64_t wide = p0 < a->sm_len ? coll_min_u64(len[me], a->sm_len - p0) : 0;
    if (wide) coll_reduce(dsts, n, srcs, n, wide, es, dt, tid, nthreads);
    if (len[me] > wide) {
        for (int j = 0; j < n; j++) srcs[j] += wide * es;
        uint8_t *own = dsts[0] + wide * es;
        coll_reduce(&own, 1, srcs, n, len[me] - wide, es, dt, tid, nthreads);
    }
    return CCHAN_OK;
}

/* AllGather, the SMs' share: bytes [0, sm_len) of this rank's block into every peer's recv, and
 * the whole block into this rank's own recv unless in place. */
CCHAN_DEVICE_INLINE int coll_ag_push_body(const coll_args_t *a, uint32_t block, uint32_t nblocks,
                                          uint32_t tid, uint32_t nthreads) {
    const int n = a->nranks, me = a->rank;
    const uint64_t bytes = a->count * a->esize, at = (uint64_t)me * bytes;
    uint64_t per = coll_round_up((bytes + nblocks - 1) / nblocks, COLL_VEC);
    uint64_t off = coll_min_u64((uint64_t)block * per, bytes);
    uint64_t plen = coll_min_u64(per, bytes - off);
    uint64_t wide = off < a->sm_len ? coll_min_u64(plen, a->sm_len - off) : 0;
    for (int j = 1; j < n && wide; j++)
        cchan_copy(a->peer_recv[coll_peer(a, j)] + at + off, a->send + off, wide, tid, nthreads);
    if (!a->in_place) cchan_copy(a->recv + at + off, a->send + off, plen, tid, nthreads);
    return CCHAN_OK;
}

/* ------------------------------------------------------------------ HB zero-copy AllGather
 *
 * For a recv registered with cchan_coll_register on every rank: one kernel, a barrier (every peer
 * has entered the call, so its recv is free), then this rank's block stored straight into every
 * peer's recv (the AG_PUSH body with sm_len = the whole block; out of place also into this rank's
 * own recv), then a barrier, whose release publishes those stores: once every block has passed
 * it, every peer's block has landed here. No scratch, no second copy. */
CCHAN_DEVICE_INLINE int coll_zc_allgather_body(const coll_args_t *a, uint32_t block,
                                               uint32_t nblocks, uint32_t tid, uint32_t nthreads) {
    int r = coll_hb_barrier(a, block, tid);
    if (r) return r;
    (void)coll_ag_push_body(a, block, nblocks, tid, nthreads);
    return coll_hb_barrier(a, block, tid);
}

/* ------------------------------------------------------------------ SWITCH (two phase)
 *
 * AllReduce on a switch channel over every rank's scratch: each rank copies its input into its
 * input region; rank barrier; rank r reduces shard r across every member's input region
 * (cchan_switch_channel_reduce_<T>: the portable path loads 16 bytes from each member and sums in
 * registers; NVLink SHARP would do one multimem.ld_reduce) into its result region and broadcasts it
 * into every member's result region (cchan_switch_channel_broadcast_<T>); rank barrier; copy out.
 * Rounds of sw_chunk bytes, with the same shard and block partition in every round (the last one
 * clipped), so block b's barriers order exactly the pieces it moved. */
CCHAN_DEVICE_INLINE void coll_sw_reduce(const coll_args_t *a, int dt, uint64_t dst_off,
                                        uint64_t src_off, uint64_t bytes, uint32_t tid,
                                        uint32_t nthreads) {
    if (dt == COLL_F32)
        cchan_switch_channel_reduce_f32(&a->sw, dst_off, src_off, bytes, tid, nthreads);
    else if (dt == COLL_F16)
        cchan_switch_channel_reduce_f16(&a->sw, dst_off, src_off, bytes, tid, nthreads);
    else
        cchan_switch_channel_reduce_bf16(&a->sw, dst_off, src_off, bytes, tid, nthreads);
}

CCHAN_DEVICE_INLINE int coll_switch_allreduce_body(const coll_args_t *a, int dt, uint32_t block,
                                                   uint32_t nblocks, uint32_t tid,
                                                   uint32_t nthreads) {
    const uint32_t es = a->esize;
    const int n = a->nranks, me = a->rank;
    const uint64_t vec = COLL_VEC / es, chunk = a->sw_chunk / es / ((uint64_t)n * vec) * (n * vec);
    const uint64_t shard = chunk / (uint32_t)n; /* whole vectors */
    const uint64_t per = coll_round_up((shard + nblocks - 1) / nblocks, vec);
    const uint64_t p0 = coll_min_u64((uint64_t)block * per, shard);
    const uint64_t plen = coll_min_u64(per, shard - p0);
    uint8_t *in = a->scratch + a->sw_off, *out = a->scratch + a->sw_off + a->sw_chunk;
    int r = CCHAN_OK;
    for (uint64_t base = 0; base < a->count && r == CCHAN_OK; base += chunk) {
        const uint64_t c = coll_min_u64(a->count - base, chunk);
        uint64_t len[COLL_MAX_RANKS];
        for (int p = 0; p < n; p++) { /* this block's piece of shard p in this round */
            uint64_t s0 = (uint64_t)p * shard + p0;
            len[p] = s0 < c ? coll_min_u64(plen, c - s0) : 0;
            cchan_copy(in + s0 * es, a->send + (base + s0) * es, len[p] * es, tid, nthreads);
        }
        r = coll_hb_barrier(a, block, tid);
        if (r) break;
        uint64_t mine = ((uint64_t)me * shard + p0) * es;
        coll_sw_reduce(a, dt, a->sw_off + a->sw_chunk + mine, a->sw_off + mine, len[me] * es, tid,
                       nthreads);
        cchan_block_sync(); /* the whole piece is reduced before any thread broadcasts it */
        if (es == 4)
            cchan_switch_channel_broadcast_f32(&a->sw, a->sw_off + a->sw_chunk + mine,
                                               a->sw_off + a->sw_chunk + mine, len[me] * es, tid,
                                               nthreads);
        else
            cchan_switch_channel_broadcast_f16(&a->sw, a->sw_off + a->sw_chunk + mine,
                                               a->sw_off + a->sw_chunk + mine, len[me] * es, tid,
                                               nthreads);
        r = coll_hb_barrier(a, block, tid);
        if (r) break;
        for (int p = 0; p < n; p++) {
            uint64_t s0 = (uint64_t)p * shard + p0;
            cchan_copy(a->recv + (base + s0) * es, out + s0 * es, len[p] * es, tid, nthreads);
        }
    }
    return r;
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_COLL_ALGOS_H */
