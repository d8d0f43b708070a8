/* cchan_mem_exchange between processes: every rank sees every rank's memory, writes land where the
 * owner reads them, sub-range registrations map the right bytes, a rank that cannot export fails
 * the exchange on every rank, semaphore sets signal across processes, and destroy gives back every
 * fd and mapping. */
#include "mem_test.h"

#define BYTES (64 * 1024 + 13)
#define SLOT 64

static cchan_mem_t **exchange(cchan_comm_t *comm, cchan_mem_t *local) {
    cchan_mem_t **peers = calloc((size_t)cchan_comm_size(comm), sizeof *peers);
    MT_CHECK(peers != NULL);
    MT_OK(cchan_mem_exchange(comm, local, peers));
    return peers;
}

static void destroy_imports(cchan_comm_t *comm, cchan_mem_t **peers) {
    for (int p = 0; p < cchan_comm_size(comm); p++)
        if (p != cchan_comm_rank(comm)) MT_OK(cchan_mem_destroy(peers[p]));
    free(peers);
}

/* Reads of every peer's memory and writes into it. */
static void check_visibility(cchan_comm_t *comm, cchan_mem_t *local, cchan_mem_t **peers) {
    int me = cchan_comm_rank(comm), n = cchan_comm_size(comm);
    uint8_t *mine = cchan_mem_ptr(local);
    mt_fill(mine, 4096, (uint64_t)me);
    mt_barrier(comm);
    for (int p = 0; p < n; p++) {
        MT_CHECK(cchan_mem_rank(peers[p]) == p);
        MT_CHECK(cchan_mem_size(peers[p]) == BYTES);
        MT_CHECK(mt_mismatch(cchan_mem_ptr(peers[p]), 4096, (uint64_t)p) == 4096);
        mt_fill((uint8_t *)cchan_mem_ptr(peers[p]) + 4096 + (size_t)me * SLOT, SLOT,
                1000u + (uint64_t)me);
    }
    mt_barrier(comm);
    for (int p = 0; p < n; p++)
        MT_CHECK(mt_mismatch(mine + 4096 + (size_t)p * SLOT, SLOT, 1000u + (uint64_t)p) == SLOT);
    MT_CHECK(mine[BYTES - 1] == 0); /* allocations start zeroed */
    mt_barrier(comm);
}

static void check_sub_range(cchan_comm_t *comm, cchan_mem_t *local, cchan_mem_t **peers) {
    cchan_mem_t *sub = NULL;
    MT_OK(cchan_mem_register(comm, (uint8_t *)cchan_mem_ptr(local) + 1000, 3000, 0, &sub));
    cchan_mem_t **subs = exchange(comm, sub);
    for (int p = 0; p < cchan_comm_size(comm); p++) {
        MT_CHECK(cchan_mem_size(subs[p]) == 3000);
        MT_CHECK(memcmp(cchan_mem_ptr(subs[p]), (uint8_t *)cchan_mem_ptr(peers[p]) + 1000, 3000) ==
                 0);
    }
    destroy_imports(comm, subs);
    MT_OK(cchan_mem_destroy(sub));
}

/* The last rank offers plain malloc memory: nobody may end up with a half-done exchange. */
static void check_collective_failure(cchan_comm_t *comm, cchan_mem_t *local) {
    int me = cchan_comm_rank(comm), last = cchan_comm_size(comm) - 1;
    void *plain = malloc(4096);
    cchan_mem_t *offer = local, **peers = calloc((size_t)cchan_comm_size(comm), sizeof *peers);
    if (me == last) MT_OK(cchan_mem_register(comm, plain, 4096, 0, &offer));
    int r = cchan_mem_exchange(comm, offer, peers);
    if (me == last) {
        MT_CHECK(r == CCHAN_ERR_UNSUPPORTED);
        MT_CHECK(strstr(cchan_last_error(), "not allocated by cchan_mem_alloc") != NULL);
        MT_OK(cchan_mem_destroy(offer));
    } else {
        char want[96];
        /* the failing rank's own reason travels with the verdict */
        snprintf(want, sizeof want,
                 "rank %d failed to export its memory: cchan_mem_export: ", last);
        MT_CHECK(r == CCHAN_ERR_PEER);
        MT_CHECK(strstr(cchan_last_error(), want) != NULL);
    }
    for (int p = 0; p < cchan_comm_size(comm); p++) MT_CHECK(peers[p] == NULL);
    free(peers);
    free(plain);
}

/* Every rank signals every peer on semaphore i and waits for every peer's signal. */
static void check_semaphores(cchan_comm_t *comm, unsigned flags) {
    int me = cchan_comm_rank(comm), n = cchan_comm_size(comm);
    cchan_sem_set_t *set = NULL;
    MT_OK(cchan_sem_set_create(comm, 2, flags, &set));
    for (int round = 0; round < 50; round++) {
        for (int p = 0; p < n; p++) {
            cchan_semaphore_t s;
            MT_OK(cchan_sem_set_get(set, p, round % 2, &s));
            if (p != me) cchan_semaphore_signal(&s);
        }
        for (int p = 0; p < n; p++) {
            cchan_semaphore_t s;
            MT_OK(cchan_sem_set_get(set, p, round % 2, &s));
            if (p != me) MT_OK(cchan_semaphore_wait(&s));
        }
    }
    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        MT_CHECK(*cchan_sem_set_inbound(set, p, 0) == 25);
        MT_CHECK(*cchan_sem_set_remote_inbound(set, p, 1) >= 25);
    }
    mt_barrier(comm);
    MT_OK(cchan_sem_set_destroy(set));
}

int main(void) {
    int fds0 = mt_open_fds(), maps0 = mt_cchan_mappings();
    cchan_comm_t *comm = mt_comm();
    cchan_mem_t *local = NULL, *host = NULL;
    MT_OK(cchan_mem_alloc(comm, BYTES, 0, &local));
    cchan_mem_t **peers = exchange(comm, local);
    MT_CHECK(peers[cchan_comm_rank(comm)] == local);
    check_visibility(comm, local, peers);
    check_sub_range(comm, local, peers);
    check_collective_failure(comm, local);
    MT_OK(cchan_mem_alloc(comm, 4096, CCHAN_MEM_HOST, &host)); /* exchanges still work afterwards */
    cchan_mem_t **hosts = exchange(comm, host);
    destroy_imports(comm, hosts);
    MT_OK(cchan_mem_destroy(host));
    check_semaphores(comm, 0);
    check_semaphores(comm, CCHAN_SEM_HOST_MAPPED);
    mt_barrier(comm);
    destroy_imports(comm, peers);
    MT_OK(cchan_mem_destroy(local));
    MT_OK(cchan_comm_destroy(comm));
    MT_CHECK(mt_open_fds() == fds0);
    MT_CHECK(mt_cchan_mappings() == maps0);
    printf("rank %d: mem_exchange ok\n", mt_rank);
    return 0;
}
