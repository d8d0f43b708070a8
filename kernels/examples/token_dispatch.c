/* token_dispatch: the dispatch step of a mixture-of-experts layer on the public API alone. Every
 * rank holds TOKENS tokens, each routed to one expert; expert e lives on rank e % nranks. Each rank
 * sends every token to the rank of its expert: one put of all the tokens for a peer into that
 * peer's receive area (a fixed slot per source, so nothing has to be agreed first), one put of the
 * count, one signal; then it waits for every peer's signal and reads what arrived. This is the
 * shape of cchan_moe's dispatch (kernels/moe), without its packing kernels and protocols.
 *
 * Host backend (CPU threads over shared memory), so it runs anywhere; the channel calls are the
 * ones a GPU kernel makes.
 *
 *   cchan-run -n 4 build/kernels/examples/token_dispatch      (2 to 8 ranks)
 *
 * Each rank's buffer: [send: TOKENS rows, grouped by destination | recv: a slot of TOKENS rows per
 * source rank | counts: one uint64 per source rank (from cchan_mem_alloc: zeroed) ].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan/cchan.h"
#include "example_check.h"

#define TOKENS 64
#define HIDDEN 128 /* floats per token */
#define MAX_RANKS 8

typedef struct row {
    int32_t expert, token; /* routing and origin, carried with the data */
    int32_t source, pad;
    float x[HIDDEN];
} row_t;

/* The router: which expert token t of rank r goes to (the same on every rank, so each can check
 * what it receives). */
static int expert_of(int r, int t, int experts) { return (r * 7 + t * 13 + t / 5) % experts; }
static float value_of(int r, int t, int i) { return (float)(r * 1000 + t) + (float)i / 256.0f; }

int main(void) {
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST;
    CHECK(cchan_bootstrap_create_from_env(&bs));
    CHECK(cchan_comm_create(bs, &cfg, &comm));
    const int rank = cchan_comm_rank(comm), n = cchan_comm_size(comm), experts = 2 * n;
    if (n < 2 || n > MAX_RANKS) {
        if (rank == 0) printf("token_dispatch: needs 2 to %d ranks (skipped)\n", MAX_RANKS);
        cchan_comm_destroy(comm);
        return 77;
    }
    const uint64_t rb = sizeof(row_t), send_off = 0, recv_off = TOKENS * rb;
    const uint64_t count_off = recv_off + (uint64_t)n * TOKENS * rb;

    cchan_mem_t *buf, *bufs[MAX_RANKS];
    cchan_sem_set_t *sems;
    cchan_memory_channel_t ch[MAX_RANKS];
    CHECK(cchan_mem_alloc(comm, count_off + (uint64_t)(n + 1) * 8, 0, &buf));
    CHECK(cchan_mem_exchange(comm, buf, bufs));
    CHECK(cchan_sem_set_create(comm, 1, 0, &sems));
    for (int p = 0; p < n; p++)
        if (p != rank)
            CHECK(cchan_memory_channel_init(comm, sems, p, 0, bufs[p], buf, NULL, &ch[p]));
    uint8_t *base = (uint8_t *)cchan_mem_ptr(buf);
    row_t *send = (row_t *)(base + send_off);
    uint64_t *counts = (uint64_t *)(base + count_off), *my_count = counts + n;

    /* Route: the tokens grouped by destination rank in the send area. */
    int start[MAX_RANKS + 1] = {0}, fill[MAX_RANKS] = {0};
    for (int t = 0; t < TOKENS; t++) start[expert_of(rank, t, experts) % n + 1]++;
    for (int p = 0; p < n; p++) start[p + 1] += start[p];
    for (int t = 0; t < TOKENS; t++) {
        const int e = expert_of(rank, t, experts), p = e % n;
        row_t *r = &send[start[p] + fill[p]++];
        r->expert = e;
        r->token = t;
        r->source = rank;
        for (int i = 0; i < HIDDEN; i++) r->x[i] = value_of(rank, t, i);
    }

    /* Dispatch: rows, then the count, then the signal (it orders both before it: release). */
    for (int p = 0; p < n; p++) {
        const uint64_t rows = (uint64_t)(start[p + 1] - start[p]);
        if (p == rank) { /* our own tokens stay here */
            memcpy(base + recv_off + (uint64_t)rank * TOKENS * rb, &send[start[p]], rows * rb);
            counts[rank] = rows;
            continue;
        }
        cchan_memory_channel_put(&ch[p], recv_off + (uint64_t)rank * TOKENS * rb,
                                 send_off + (uint64_t)start[p] * rb, rows * rb, 0, 1);
        *my_count = rows;
        cchan_memory_channel_put(&ch[p], count_off + (uint64_t)rank * 8,
                                 count_off + (uint64_t)n * 8, 8, 0, 1);
        cchan_memory_channel_signal(&ch[p]);
    }
    for (int p = 0; p < n; p++)
        if (p != rank) CHECK(cchan_memory_channel_wait(&ch[p])); /* acquire: p's rows are here */

    /* What arrived: every token whose expert lives here, from every rank, intact. */
    int got = 0, want = 0, wrong = 0;
    for (int src = 0; src < n; src++) {
        for (int t = 0; t < TOKENS; t++) want += expert_of(src, t, experts) % n == rank;
        const row_t *slot = (const row_t *)(base + recv_off + (uint64_t)src * TOKENS * rb);
        for (uint64_t k = 0; k < counts[src]; k++, got++) {
            const row_t *r = &slot[k];
            wrong += r->source != src || r->expert % n != rank ||
                     r->expert != expert_of(src, r->token, experts);
            for (int i = 0; i < HIDDEN; i++) wrong += r->x[i] != value_of(src, r->token, i);
        }
    }
    printf("rank %d: experts %d and %d: %d tokens received (%d expected): %s\n", rank, rank,
           rank + n, got, want, wrong || got != want ? "WRONG" : "ok");

    CHECK(cchan_sem_set_destroy(sems));
    for (int p = 0; p < n; p++)
        if (p != rank) CHECK(cchan_mem_destroy(bufs[p]));
    CHECK(cchan_bootstrap_barrier(cchan_comm_bootstrap(comm))); /* no peer maps ours any more */
    CHECK(cchan_mem_destroy(buf));
    CHECK(cchan_comm_destroy(comm));
    return wrong || got != want ? 1 : 0;
}
