/* hello_host: hello_memory_channel on the host backend. Two rank processes share memory; CPU
 * threads play the GPU threads and call the same channel functions, so the protocol can be written
 * and debugged on a laptop.
 *
 *   cchan-run -n 2 build/kernels/examples/hello_host
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cchan/cchan.h"
#include "example_check.h"

#define COUNT (1 << 20) /* floats each rank sends */
#define NTHREADS 4      /* CPU threads that share the put, like the threads of a block */

struct share {
    const cchan_memory_channel_t *ch;
    uint64_t bytes;
    uint32_t tid;
};

/* Each thread copies its share of our first half into the peer's second half. */
static void *put_share(void *p) {
    const struct share *s = (const struct share *)p;
    cchan_memory_channel_put(s->ch, s->bytes, 0, s->bytes, s->tid, NTHREADS);
    return NULL;
}

int main(void) {
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST; /* CPU threads over shared memory, even where GPUs exist */
    CHECK(cchan_bootstrap_create_from_env(&bs));
    CHECK(cchan_comm_create(bs, &cfg, &comm));
    int rank = cchan_comm_rank(comm), peer = 1 - rank;
    if (cchan_comm_size(comm) != 2) {
        if (rank == 0) printf("hello_host: needs 2 ranks (skipped)\n");
        cchan_comm_destroy(comm);
        return 77;
    }
    const uint64_t bytes = COUNT * sizeof(float);

    cchan_mem_t *buf, *peers[2];
    cchan_sem_set_t *sems;
    cchan_memory_channel_t ch;
    CHECK(cchan_mem_alloc(comm, 2 * bytes, 0, &buf)); /* shared memory the peer can map */
    CHECK(cchan_mem_exchange(comm, buf, peers));
    CHECK(cchan_sem_set_create(comm, 1, 0, &sems));
    CHECK(cchan_memory_channel_init(comm, sems, peer, 0, peers[peer], buf, NULL, &ch));

    float *mine = (float *)cchan_mem_ptr(buf);
    for (int i = 0; i < COUNT; i++) mine[i] = (float)(rank * COUNT + i);

    pthread_t threads[NTHREADS];
    struct share shares[NTHREADS];
    for (uint32_t t = 0; t < NTHREADS; t++) {
        shares[t] = (struct share){&ch, bytes, t};
        if (pthread_create(&threads[t], NULL, put_share, &shares[t]) != 0) return 1;
    }
    for (int t = 0; t < NTHREADS; t++) pthread_join(threads[t], NULL); /* the block barrier */
    cchan_memory_channel_signal(&ch);      /* release: every thread's stores land first */
    CHECK(cchan_memory_channel_wait(&ch)); /* acquire; fails only if CCHAN_TIMEOUT_MS expires */

    int wrong = 0;
    for (int i = 0; i < COUNT; i++) wrong += mine[COUNT + i] != (float)(peer * COUNT + i);
    printf("rank %d: %llu bytes from rank %d: %s\n", rank, (unsigned long long)bytes, peer,
           wrong ? "WRONG" : "ok");

    CHECK(cchan_sem_set_destroy(sems));
    CHECK(cchan_mem_destroy(peers[peer]));
    CHECK(cchan_bootstrap_barrier(cchan_comm_bootstrap(comm))); /* the peer has unmapped ours */
    CHECK(cchan_mem_destroy(buf));
    CHECK(cchan_comm_destroy(comm));
    return wrong ? 1 : 0;
}
