/* Ranks as threads of one process (cchan_bootstrap_create_custom over a shared buffer), as two
 * GPUs driven by one process would be: exchanged memory is the owner's own mapping (a view), memory
 * channels work between the threads, and an owner may destroy its memory while peers still hold
 * views: the memory stays until the last view goes. */
#include "mem_test.h"

#define RANKS 4
#define BYTES 8192

typedef struct gather {
    pthread_barrier_t barrier;
    uint8_t buf[RANKS * 4096];
} gather_t;

typedef struct rank_ctx {
    gather_t *g;
    int rank;
    int ok;
} rank_ctx_t;

static int thread_allgather(void *ctx, const void *send, void *recv, size_t bytes) {
    rank_ctx_t *r = ctx;
    if (bytes * RANKS > sizeof r->g->buf) return -1;
    memcpy(r->g->buf + (size_t)r->rank * bytes, send, bytes);
    pthread_barrier_wait(&r->g->barrier);
    memcpy(recv, r->g->buf, bytes * RANKS);
    pthread_barrier_wait(&r->g->barrier); /* nobody overwrites buf before all have copied it */
    return 0;
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s (%s)\n", r->rank, __FILE__,          \
                    __LINE__, #cond, cchan_last_error());                                          \
            return NULL;                                                                           \
        }                                                                                          \
    } while (0)

static void *rank_main(void *arg) {
    rank_ctx_t *r = arg;
    cchan_bootstrap_t *bs = NULL;
    cchan_comm_t *comm = NULL;
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST;
    CHECK(cchan_bootstrap_create_custom(r->rank, RANKS, thread_allgather, r, &bs) == 0);
    CHECK(cchan_comm_create(bs, &cfg, &comm) == 0);
    int me = r->rank, right = (me + 1) % RANKS, left = (me + RANKS - 1) % RANKS;
    cchan_mem_t *local = NULL, *peers[RANKS];
    cchan_sem_set_t *sems = NULL;
    CHECK(cchan_mem_alloc(comm, BYTES, 0, &local) == 0);
    CHECK(cchan_mem_exchange(comm, local, peers) == 0);
    CHECK(cchan_sem_set_create(comm, 1, 0, &sems) == 0);
    for (int p = 0; p < RANKS; p++)
        CHECK(cchan_mem_size(peers[p]) == BYTES && cchan_mem_rank(peers[p]) == p);

    /* Put my pattern to the right neighbour, signal; receive the left one's. */
    cchan_memory_channel_t to_right, from_left;
    CHECK(cchan_memory_channel_init(comm, sems, right, 0, peers[right], local, local, &to_right) ==
          0);
    CHECK(cchan_memory_channel_init(comm, sems, left, 0, peers[left], local, local, &from_left) ==
          0);
    CHECK(to_right.remote == cchan_mem_ptr(peers[right]));
    mt_fill(cchan_mem_ptr(local), 4096, (uint64_t)me);
    cchan_memory_channel_put(&to_right, 4096, 0, 4096, 0, 1);
    cchan_memory_channel_signal(&to_right);
    CHECK(cchan_memory_channel_wait(&from_left) == 0);
    CHECK(mt_mismatch((uint8_t *)cchan_mem_ptr(local) + 4096, 4096, (uint64_t)left) == 4096);

    /* Owners go first; views still read the left neighbour's pattern afterwards. */
    CHECK(cchan_sem_set_destroy(sems) == 0);
    CHECK(cchan_bootstrap_barrier(bs) == 0);
    CHECK(cchan_mem_destroy(local) == 0);
    CHECK(cchan_bootstrap_barrier(bs) == 0);
    CHECK(mt_mismatch(cchan_mem_ptr(peers[left]), 4096, (uint64_t)left) == 4096);
    for (int p = 0; p < RANKS; p++)
        if (p != me) CHECK(cchan_mem_destroy(peers[p]) == 0);
    CHECK(cchan_comm_destroy(comm) == 0);
    r->ok = 1;
    return NULL;
}

int main(void) {
    int maps0 = mt_cchan_mappings();
    gather_t g;
    pthread_barrier_init(&g.barrier, NULL, RANKS);
    pthread_t t[RANKS];
    rank_ctx_t ctx[RANKS];
    for (int i = 0; i < RANKS; i++) {
        ctx[i] = (rank_ctx_t){&g, i, 0};
        MT_CHECK(pthread_create(&t[i], NULL, rank_main, &ctx[i]) == 0);
    }
    int ok = 1;
    for (int i = 0; i < RANKS; i++) {
        pthread_join(t[i], NULL);
        ok &= ctx[i].ok;
    }
    pthread_barrier_destroy(&g.barrier);
    MT_CHECK(ok);
    MT_CHECK(mt_cchan_mappings() == maps0);
    printf("mem_threads ok\n");
    return 0;
}
