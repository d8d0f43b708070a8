/* cchan MoE: the layout of the communication buffer every rank exchanges, shared by the kernels
 * (device code, CUDA or host backend) and the host runtime. Internal to kernels/moe.
 *
 * Every rank allocates one buffer with cchan_mem_alloc and maps every peer's. It holds two copies
 * ("parities") of the same layout; operation number `epoch` (a per-group counter in device memory,
 * raised by every dispatch and combine) uses parity epoch & 1, so a dispatch and the combine after
 * it never share memory and consecutive operations overlap.
 *
 * One parity, low-latency (LL) mode, N ranks, E experts (L = E / N per rank), B = max tokens per
 * rank, K = top-k, H = hidden:
 *
 *   acks               u64 [N]         rank r has consumed this parity up to epoch (moe_wait_acks)
 *   dispatch counters  u64 [L][N]      (e, r): rank r's count for my local expert e
 *   combine flags      u64 [N][B]      (r, t): rank r's partial sum for my token t has landed
 *   weight counters    u64 [N]         rank r's router weights have landed
 *   weights            f32 [N][B][K]   rank r's router weights of its token t
 *   dispatch region    [N][B] slots of header + 2H bytes: rank r's messages, in r's token order
 *   combine region     [N][B] rows of H floats: rank r's weighted sum over its experts of my token
 *                      t
 *
 * The dispatch region is O(N·B·P) because a token travels once per destination rank (its header
 * names its experts), not once per expert; the combine region is O(N·B·H) because each rank
 * returns one partial sum per token. DeepEP's layout is O(E·B·P) for each.
 *
 * Counters are overwritten, never reset: a dispatch counter holds
 *   epoch << 32 | tokens r sent me (n_r) << 16 | tokens of those routed to e (m)
 * and the other counters and flags hold the epoch. A counter of parity p only ever sees epochs of
 * parity p, in increasing order, so "value >= epoch << 32" (a cchan wait) means "written by this
 * operation".
 *
 * High-throughput (HT) mode, same parity structure, no headers, C chunks per rank's tokens:
 *   acks               u64 [N]
 *   count flags        u64 [N]         (src r): epoch << 32 | 1, rank r's counts have landed
 *   dispatch flags     u64 [N][C]      (src r, chunk c): epoch, its rows and route rows landed
 *   chunk descriptors  u64 [N][C]      moe_ht_desc(first row, rows) of that chunk here
 *   combine progress   u64 [N][C]      (expert rank r, chunk c): moe_ht_progress(epoch, done):
 *                                      every row of my tokens below `done` has landed
 *                                      (MOE_HT_ALL_DONE: all)
 *   count slots        i32 [N][N] + [N][L]  token counts per (src, dst) and per expert
 *   route region       [N·B] rows of 1 + 2K int32 (padded to 16 bytes): token, local expert ids
 *                      (-1: not mine), weights
 *   dispatch region    [N·B] rows of 2H bytes: 2D output, rows of rank 0 first, then rank 1, ...
 *   combine region     [N][B] rows of 2H bytes: rank r's result for my token t at (r, t)
 */
#ifndef CCHAN_MOE_WIRE_H
#define CCHAN_MOE_WIRE_H

#include "cchan/arch/arch.h"

#define MOE_WIRE_VERSION 2
#define MOE_MAX_RANKS 8
#define MOE_MAX_TOPK 16
#define MOE_LL_MAX_TOKENS 4096  /* the per-rank slot index and counts fit 16 bits */
#define MOE_HT_MAX_TOKENS 65535 /* slots are 16-bit */
#define MOE_SCALE_BLOCK 128     /* FP8: one float scale per 128 channels */
#define MOE_ALIGN 128
#define MOE_HT_MAX_CHUNKS 1024 /* HT: chunks per rank's tokens */

/* A dispatch message: header, then the token's data (bf16: 2H bytes; fp8: H bytes then H/128 float
 * scales). Experts not on the receiving rank are listed too (the receiver skips them). */
typedef struct moe_msg_header {
    int32_t token;                /* index of the token on the sending rank */
    int32_t ntopk;                /* valid entries in expert[] (= K) */
    int32_t expert[MOE_MAX_TOPK]; /* global expert ids, -1 where none */
} moe_msg_header_t;
CCHAN_STATIC_ASSERT(sizeof(moe_msg_header_t) == 8 + 4 * MOE_MAX_TOPK, "moe header layout");

/* The header occupies 8 + 4K bytes rounded up to 16 so the payload stays 16-byte aligned. */
CCHAN_HOST_DEVICE_INLINE uint32_t moe_header_bytes(int top_k) {
    return (uint32_t)((8 + 4 * top_k + 15) / 16 * 16);
}
CCHAN_HOST_DEVICE_INLINE uint64_t moe_align(uint64_t v) {
    return (v + MOE_ALIGN - 1) / MOE_ALIGN * MOE_ALIGN;
}

#define MOE_COUNTER(epoch, n, m) (((uint64_t)(epoch) << 32) | ((uint64_t)(n) << 16) | (uint64_t)(m))
#define MOE_COUNTER_N(v) ((uint32_t)(((v) >> 16) & 0xffffu))
#define MOE_COUNTER_M(v) ((uint32_t)((v)&0xffffu))
/* The epoch part of a counter, a flag, or a value awaited. */
#define MOE_EPOCH_OF(v) ((uint32_t)((v) >> 32))
/* "Written by operation `epoch`" for the counters that carry the epoch in their high half. */
#define MOE_EPOCH_MIN(epoch) ((uint64_t)(epoch) << 32)

/* HT count flag: rank r's counts of operation `epoch` have landed. */
#define MOE_HT_COUNT_FLAG(epoch) (((uint64_t)(epoch) << 32) | 1u)

/* HT chunk descriptor: the chunk's rows at the receiver are [lo, lo + n). */
CCHAN_HOST_DEVICE_INLINE uint64_t moe_ht_desc(uint32_t lo, uint32_t n) {
    return (uint64_t)lo | ((uint64_t)n << 32);
}
CCHAN_HOST_DEVICE_INLINE int moe_ht_desc_lo(uint64_t v) { return (int)(uint32_t)v; }
CCHAN_HOST_DEVICE_INLINE int moe_ht_desc_rows(uint64_t v) { return (int)(v >> 32); }

/* HT combine progress: every row of the receiver's tokens below `done` has landed. */
#define MOE_HT_ALL_DONE 0xffffffffu
CCHAN_HOST_DEVICE_INLINE uint64_t moe_ht_progress(uint32_t epoch, uint32_t done) {
    return ((uint64_t)epoch << 32) | done;
}

#endif /* CCHAN_MOE_WIRE_H */
