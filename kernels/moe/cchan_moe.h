/* cchan MoE: expert-parallel dispatch and combine built on cchan.
 *
 * The shape of the API follows NCCL EP (seed 001, §III): a long-lived group created collectively
 * from a cchan communicator, a per-forward-pass handle holding the routing, and dispatch / combine
 * / complete calls that are asynchronous on a stream (CUDA) or run on the calling thread (host
 * backend, where `stream` is ignored).
 *
 *   cchan_moe_config_t cfg = CCHAN_MOE_CONFIG_INIT;
 *   cfg.num_experts = 256; cfg.hidden = 7168; cfg.top_k = 8; cfg.max_tokens_per_rank = 128;
 *   cchan_moe_group_create(comm, &cfg, &group);                 // collective, once
 *   for each forward pass:
 *     cchan_moe_handle_create(group, topk_idx, T, stream, &h);   // routing [T][K], device memory
 *     cchan_moe_dispatch(h, &dispatch_args, 0, stream);          // tokens -> experts
 *     ... expert FFN on dispatch_args.out_x (L local experts) ...
 *     cchan_moe_combine(h, expert_out, topk_weights, out, 0, stream);
 *     cchan_moe_handle_destroy(h);
 *
 * Modes:
 *   LOW_LATENCY (decode, up to 1024 tokens per rank; built for 1-128): a token travels once to
 *     each rank that holds one of its experts, straight into that rank's receive region, with
 *     per-(expert, rank) counters as the only synchronization. Dispatch output is expert-major:
 *     out_x[L][N * max_tokens][hidden] (rows of expert e from rank 0's tokens first, each rank's in
 *     token order) with out_counts[e] valid rows; bf16, or fp8 e4m3 with one float scale per 128
 *     channels (out_scales[L][N * max_tokens][hidden / 128], value = fp8 * scale) quantized inside
 *     the dispatch kernel. Combine takes the expert outputs in the same layout (bf16) and returns
 *     out[t] = sum_k w[t][k] * y(t, k) in f32, rounded once to bf16, at the token's own rank
 *     (each rank sums its own experts of the token, in k order, and sends that f32 row back; the
 *     token's rank adds the ranks' sums in rank order).
 *     The communication buffer is double-buffered: a dispatch and the combine after it (or two
 *     staged operations) proceed without waiting for each other's buffers. At most two operations
 *     may be in flight (issued with send_only and not completed) per group.
 *   HIGH_THROUGHPUT (prefill/training, thousands of tokens per rank, GPUs of one host; 24 SMs by
 *     default): handle creation exchanges the token counts (and synchronizes the stream), so every
 *     rank knows where its tokens land. A token travels once to each rank holding one of its
 *     experts, straight into that rank's 2D receive area; the output is out_x[rows][hidden] bf16,
 *     rows = cchan_moe_handle_num_recv_tokens(): rank 0's tokens first, then rank 1's, ..., each
 *     rank's in token order (deterministic), with out_topk[rows][K] (local expert ids, -1 where
 *     the expert is elsewhere), out_weights[rows][K] and out_counts[L] (rows per local expert).
 *     Combine takes one row per received token (the weighted sum over this rank's experts) and
 *     returns out[t] = sum over the ranks t went to, in rank order, f32 then bf16.
 *     Both kernels are chunked pipelines (part of the blocks send, the rest receive chunk by
 *     chunk as each chunk's flag lands), so the copy out of the receive area and the reduction
 *     overlap the NVLink transfer.
 *
 * Routing: topk_idx[t][k] is a global expert id in [0, num_experts) or -1 (no expert). Experts
 * are placed in blocks: rank r holds experts [r * L, (r + 1) * L), L = num_experts / nranks. Ids
 * outside [-1, num_experts) and repeats within a token are errors; they live in device memory, so
 * the kernels treat them as -1 and record the first one, which cchan_moe_check() reports.
 *
 * Errors: every call returns 0 or a negative cchan status (cchan/status.h); cchan_moe_last_error()
 * says what failed and why. Inconsistent shapes, too many tokens, or a call out of order fail
 * before anything is launched.
 */
#ifndef CCHAN_MOE_H
#define CCHAN_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "cchan/cchan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cchan_moe_mode {
    CCHAN_MOE_LOW_LATENCY = 1,
    CCHAN_MOE_HIGH_THROUGHPUT = 2
} cchan_moe_mode_t;

typedef enum cchan_moe_dtype {
    CCHAN_MOE_BF16 = 1,    /* bfloat16, stored as uint16_t */
    CCHAN_MOE_FP8_E4M3 = 2 /* e4m3 bytes with per-128-channel float scales */
} cchan_moe_dtype_t;

/* Optional allocator for the group's and handles' local device memory (the exchanged communication
 * buffer always comes from cchan_mem_alloc, which makes it shareable). Return 0 and set *ptr. */
typedef int (*cchan_moe_alloc_fn)(void *ctx, size_t bytes, void **ptr);
typedef void (*cchan_moe_free_fn)(void *ctx, void *ptr);

#define CCHAN_MOE_CONFIG_MAGIC 0x63636d31u /* "ccm1" */
#define CCHAN_MOE_CONFIG_VERSION 1

typedef struct cchan_moe_config {
    size_t size;
    uint32_t magic;
    uint32_t version;
    cchan_moe_mode_t mode;
    int num_experts;         /* a multiple of the number of ranks */
    int hidden;              /* a multiple of 128 */
    int top_k;               /* 1..16 */
    int max_tokens_per_rank; /* LL: 1..4096; HT: 1..65535 */
    int num_blocks;          /* thread blocks (= SMs) per kernel; 0: LL every SM, HT 24 */
    cchan_moe_alloc_fn alloc;
    cchan_moe_free_fn free;
    void *alloc_ctx;
} cchan_moe_config_t;

#define CCHAN_MOE_CONFIG_INIT                                                                      \
    {                                                                                              \
        sizeof(cchan_moe_config_t), CCHAN_MOE_CONFIG_MAGIC, CCHAN_MOE_CONFIG_VERSION,              \
            CCHAN_MOE_LOW_LATENCY, 0, 0, 0, 0, 0, NULL, NULL, NULL                                 \
    }

typedef struct cchan_moe_group cchan_moe_group_t;
typedef struct cchan_moe_handle cchan_moe_handle_t;

/* What a group is and what it costs. */
typedef struct cchan_moe_info {
    int nranks, rank, local_experts;
    int max_rows_per_expert; /* LL: middle dimension of the 3D output (nranks * max_tokens) */
    int max_recv_rows;       /* HT: rows the 2D output may need (nranks * max_tokens) */
    int num_blocks, threads_per_block;
    size_t comm_buffer_bytes;     /* the exchanged buffer, both parities */
    size_t dispatch_region_bytes; /* one parity's dispatch receive region */
    size_t combine_region_bytes;  /* one parity's combine receive region */
} cchan_moe_info_t;

/* Collective over the communicator: every rank passes the same configuration. */
CCHAN_API int cchan_moe_group_create(cchan_comm_t *comm, const cchan_moe_config_t *cfg,
                                     cchan_moe_group_t **out);
CCHAN_API int cchan_moe_group_info(const cchan_moe_group_t *group, cchan_moe_info_t *out);
/* Collective. No operation of the group may be in flight. */
CCHAN_API int cchan_moe_group_destroy(cchan_moe_group_t *group);

/* The routing of one forward pass: topk_idx[num_tokens][top_k] int32 in device memory (copied on
 * `stream`, so the caller may reuse it). 0 <= num_tokens <= max_tokens_per_rank. In HT mode this
 * exchanges the token counts with every rank and synchronizes the stream. */
CCHAN_API int cchan_moe_handle_create(cchan_moe_group_t *group, const int32_t *topk_idx,
                                      int num_tokens, void *stream, cchan_moe_handle_t **out);
/* Waits for nothing: the caller orders it after the handle's last operation on the stream. */
CCHAN_API int cchan_moe_handle_destroy(cchan_moe_handle_t *handle);

/* Tokens this rank receives: HT, the rows of the 2D dispatch output (known at handle creation);
 * LL, the sum of the per-expert counts of the last dispatch (synchronizes the stream). */
CCHAN_API int cchan_moe_handle_num_recv_tokens(cchan_moe_handle_t *handle, void *stream, int *out);

typedef struct cchan_moe_dispatch_args {
    const void *x;           /* [num_tokens][hidden] bf16 */
    cchan_moe_dtype_t dtype; /* output type: BF16, or FP8_E4M3 (LL only) */
    void *out_x;             /* LL: [L][N*B][hidden]; HT: [max_recv_rows][hidden] */
    float *out_scales;       /* FP8: [L][N*B][hidden / 128]; else NULL */
    int32_t *out_counts;     /* [L] rows per local expert; may be NULL */
    /* HT only, each may be NULL: the routing of each received row, as local expert ids (-1: not
     * on this rank) [rows][top_k], and the router weights sent along [rows][top_k]. */
    const float *topk_weights; /* [num_tokens][top_k], sent with the tokens (HT) */
    int32_t *out_topk;
    float *out_weights;
} cchan_moe_dispatch_args_t;

/* Sends the tokens to their experts. send_only = 1: return once the sends are issued (the receive
 * runs in cchan_moe_complete), so the sender's other work overlaps the transfer. */
CCHAN_API int cchan_moe_dispatch(cchan_moe_handle_t *handle, const cchan_moe_dispatch_args_t *args,
                                 int send_only, void *stream);

/* Sends the expert outputs back and reduces them at each token's rank.
 *   LL: expert_out [L][N*B][hidden] bf16 (rows as dispatch produced them); out[t] =
 *       sum_k topk_weights[t][k] * row(t, k) (topk_weights [T][K] float, NULL = 1).
 *   HT: expert_out [rows][hidden] bf16 (one row per received token, already weighted over this
 *       rank's experts); out[t] = sum over ranks of that rank's row for t (topk_weights unused). */
CCHAN_API int cchan_moe_combine(cchan_moe_handle_t *handle, const void *expert_out,
                                const float *topk_weights, void *out, int send_only, void *stream);

/* Finishes the handle's staged (send_only) operation: waits for its incoming data and writes the
 * outputs named when it was issued. */
CCHAN_API int cchan_moe_complete(cchan_moe_handle_t *handle, void *stream);

/* 0, or CCHAN_ERR_RANGE naming the first invalid expert id a kernel of this group has met (call
 * after synchronizing the stream), or CCHAN_ERR_DEVICE_TIMEOUT after a device-side wait expired. */
CCHAN_API int cchan_moe_check(cchan_moe_group_t *group);

/* The calling thread's last error message of this library, "" if none. */
CCHAN_API const char *cchan_moe_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_MOE_H */
