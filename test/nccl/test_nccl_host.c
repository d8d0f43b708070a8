/* libcchan_nccl on the host platform: NCCL's API driving cchan's collectives on CPU threads.
 *
 *   cchan-run -n 2 test_nccl_host ranks   every rank one process: init, queries, AllReduce /
 *                                          AllGather / ReduceScatter through cchan (checked against
 *                                          the exact sums), calls that need the fallback NCCL fail
 *                                          cleanly without one, split with reversed keys, destroy
 *   test_nccl_host group                  two ranks in one process and one thread: ncclGroupStart,
 *                                          ncclCommInitRank twice, ncclGroupEnd (deferred inits),
 *                                          ncclCommInitAll, destroy (deferred collective teardown)
 *
 * No fallback NCCL (CCHAN_NCCL_FALLBACK=none) and CCHAN_NCCL_HOST_PLATFORM=1, which lets the shim
 * use a host-platform cchan communicator (buffers are host memory). Exit 77 when the shim was built
 * without the collectives library.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan/cchan.h"
#include "cchan_test.h"
#include "nccl_abi.h"

#define NCCL_OK(call)                                                                              \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        CT_EXPECT(r_ == ncclSuccess, "%s -> %d (%s)", #call, (int)r_, ncclGetLastError(NULL));     \
    } while (0)

static float value(int rank, size_t i) {
    return (float)((int)((i * 7 + (size_t)rank * 13) % 17) - 8);
}

/* count 1001 takes cchan_coll's LL algorithm, 300001 (1.2 MB) its HB one. */
static void check_collectives(ncclComm_t comm, int rank, int n, size_t count) {
    float *send = malloc(count * n * sizeof *send), *recv = malloc(count * n * sizeof *recv);
    for (size_t i = 0; i < count * n; i++) send[i] = value(rank, i);

    NCCL_OK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, NULL));
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int r = 0; r < n; r++) want += value(r, i);
        bad += recv[i] != want;
    }
    CT_EXPECT(bad == 0, "AllReduce: %d wrong of %zu", bad, count);

    memcpy(recv, send, count * sizeof *recv); /* in place */
    NCCL_OK(ncclAllReduce(recv, recv, count, ncclFloat, ncclSum, comm, NULL));
    bad = 0;
    for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int r = 0; r < n; r++) want += value(r, i);
        bad += recv[i] != want;
    }
    CT_EXPECT(bad == 0, "AllReduce in place: %d wrong", bad);

    /* AllGather of int8 (moved as 2-byte units: 1002 bytes) */
    const size_t bytes = 1002;
    signed char *bsend = malloc(bytes), *brecv = malloc(bytes * n);
    for (size_t i = 0; i < bytes; i++) bsend[i] = (signed char)(i * 3 + (size_t)rank);
    memset(brecv, 0x55, bytes * n);
    NCCL_OK(ncclAllGather(bsend, brecv, bytes, ncclInt8, comm, NULL));
    bad = 0;
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < bytes; i++)
            bad += brecv[r * bytes + i] != (signed char)(i * 3 + (size_t)r);
    CT_EXPECT(bad == 0, "AllGather int8: %d wrong", bad);

    NCCL_OK(ncclReduceScatter(send, recv, count, ncclFloat, ncclSum, comm, NULL));
    bad = 0;
    for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int r = 0; r < n; r++) want += value(r, (size_t)rank * count + i);
        bad += recv[i] != want;
    }
    CT_EXPECT(bad == 0, "ReduceScatter: %d wrong", bad);

    /* Not cchan's, and no fallback: a clean error with a message, not a hang. */
    ncclResult_t res = ncclAllReduce(send, recv, count, ncclFloat, ncclMax, comm, NULL);
    CT_EXPECT(res == ncclInvalidUsage, "AllReduce max without fallback -> %d", (int)res);
    CT_EXPECT(strstr(ncclGetLastError(comm), "fallback") != NULL, "last error '%s'",
              ncclGetLastError(comm));
    res = ncclBroadcast(send, recv, count, ncclFloat, 0, comm, NULL);
    CT_EXPECT(res == ncclInvalidUsage, "Broadcast without fallback -> %d", (int)res);
    res = ncclSend(send, count, ncclFloat, (rank + 1) % n, comm, NULL);
    CT_EXPECT(res == ncclInvalidUsage, "Send without fallback -> %d", (int)res);
    NCCL_OK(ncclAllReduce(send, recv, 0, ncclFloat, ncclMax, comm, NULL)); /* empty: no-op */
    free(send);
    free(recv);
    free(bsend);
    free(brecv);
}

static int scenario_ranks(void) {
    cchan_bootstrap_t *bs;
    if (cchan_bootstrap_create_from_env(&bs)) {
        fprintf(stderr, "bootstrap: %s\n", cchan_last_error());
        return 1;
    }
    int rank = cchan_bootstrap_rank(bs), n = cchan_bootstrap_size(bs);
    ncclUniqueId id, *ids = calloc((size_t)n, sizeof *ids);
    memset(&id, 0, sizeof id);
    if (rank == 0) NCCL_OK(ncclGetUniqueId(&id));
    if (cchan_bootstrap_allgather(bs, &id, ids, sizeof id)) return 1;
    id = ids[0];
    free(ids);

    ncclComm_t comm = NULL;
    NCCL_OK(ncclCommInitRank(&comm, n, id, rank));
    if (!comm) return 1;
    int v = 0, got = -1;
    NCCL_OK(ncclCommCount(comm, &got));
    CT_EXPECT(got == n, "count %d", got);
    NCCL_OK(ncclCommUserRank(comm, &got));
    CT_EXPECT(got == rank, "rank %d", got);
    NCCL_OK(ncclGetVersion(&v));
    CT_EXPECT(v == NCCL_VERSION_CODE, "version %d", v);
    ncclResult_t async = ncclInternalError;
    NCCL_OK(ncclCommGetAsyncError(comm, &async));
    CT_EXPECT(async == ncclSuccess, "async error %d", (int)async);
    check_collectives(comm, rank, n, 1001);
    check_collectives(comm, rank, n, 300001);

    /* Split with reversed keys: a communicator of the same ranks in the opposite order. */
    ncclComm_t child = NULL;
    NCCL_OK(ncclCommSplit(comm, 0, n - rank, &child, NULL));
    if (child) {
        NCCL_OK(ncclCommUserRank(child, &got));
        CT_EXPECT(got == n - 1 - rank, "child rank %d", got);
        check_collectives(child, n - 1 - rank, n, 1001);
        NCCL_OK(ncclCommDestroy(child));
    }
    /* Odd ranks stay out of the second split. */
    child = (ncclComm_t)&v;
    NCCL_OK(ncclCommSplit(comm, rank % 2 ? NCCL_SPLIT_NOCOLOR : 1, 0, &child, NULL));
    CT_EXPECT((child == NULL) == (rank % 2 == 1), "NOCOLOR split gave %p", (void *)child);
    if (child) {
        NCCL_OK(ncclCommCount(child, &got));
        CT_EXPECT(got == (n + 1) / 2, "even-rank child has %d ranks", got);
        NCCL_OK(ncclCommDestroy(child));
    }

    ncclResult_t res = ncclCommCount(NULL, &got);
    CT_EXPECT(res == ncclInvalidArgument, "NULL comm -> %d", (int)res);
    NCCL_OK(ncclCommDestroy(comm));
    cchan_bootstrap_destroy(bs);
    return 0;
}

static int scenario_group(void) {
    ncclUniqueId id;
    NCCL_OK(ncclGetUniqueId(&id));
    ncclComm_t comms[2] = {NULL, NULL};
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < 2; r++) NCCL_OK(ncclCommInitRank(&comms[r], 2, id, r));
    NCCL_OK(ncclGroupEnd());
    for (int r = 0; r < 2; r++) {
        int got = -1;
        NCCL_OK(ncclCommUserRank(comms[r], &got));
        CT_EXPECT(got == r, "grouped comm %d has rank %d", r, got);
    }
    /* Window registration comm by comm from one thread (collective in cchan: the shim waits for
     * both local ranks), then deregistration, in a group and outside one. */
    /* On the host platform only cchan_mem_alloc memory can be shared: allocate through a
     * one-rank cchan communicator of the test's own. */
    cchan_unique_id_t own_id;
    cchan_bootstrap_t *own_bs = NULL;
    cchan_comm_t *own = NULL;
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST;
    if (cchan_get_unique_id(&own_id) || cchan_bootstrap_create(&own_id, 0, 1, &own_bs) ||
        cchan_comm_create(own_bs, &cfg, &own)) {
        fprintf(stderr, "allocating communicator: %s\n", cchan_last_error());
        return 1;
    }
    cchan_mem_t *mems[2][2];
    void *bufs[2][2];
    ncclWindow_t wins[2][2];
    for (int r = 0; r < 2; r++)
        for (int b = 0; b < 2; b++) {
            if (cchan_mem_alloc(own, 1 << 16, 0, &mems[r][b])) return 1;
            bufs[r][b] = cchan_mem_ptr(mems[r][b]);
        }
    /* Buffer 0 in a group, buffer 1 comm by comm; released the other way round. (Each buffer is
     * registered once: cchan_coll cannot register again after a deregistration yet.) */
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < 2; r++)
        NCCL_OK(ncclCommWindowRegister(comms[r], bufs[r][0], 1 << 16, &wins[r][0], 0));
    NCCL_OK(ncclGroupEnd());
    for (int r = 0; r < 2; r++)
        NCCL_OK(ncclCommWindowRegister(comms[r], bufs[r][1], 1 << 16, &wins[r][1], 0));
    for (int r = 0; r < 2; r++)
        for (int b = 0; b < 2; b++)
            CT_EXPECT(wins[r][b] == (ncclWindow_t)bufs[r][b], "window handle without a fallback");
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < 2; r++) NCCL_OK(ncclCommWindowDeregister(comms[r], wins[r][0]));
    NCCL_OK(ncclGroupEnd());
    /* As nccl-tests does: comm 0's last window released, comm 0 destroyed, then comm 1's. */
    NCCL_OK(ncclCommWindowDeregister(comms[0], wins[0][1]));
    NCCL_OK(ncclCommDestroy(comms[0]));
    NCCL_OK(ncclCommWindowDeregister(comms[1], wins[1][1]));
    NCCL_OK(ncclCommDestroy(comms[1]));
    for (int r = 0; r < 2; r++)
        for (int b = 0; b < 2; b++) cchan_mem_destroy(mems[r][b]);
    cchan_comm_destroy(own);

    NCCL_OK(ncclCommInitAll(comms, 2, NULL));
    for (int r = 0; r < 2; r++) {
        int got = -1;
        NCCL_OK(ncclCommCount(comms[r], &got));
        CT_EXPECT(got == 2, "InitAll comm %d has %d ranks", r, got);
    }
    for (int r = 0; r < 2; r++) NCCL_OK(ncclCommDestroy(comms[r]));
    CT_EXPECT(ncclGroupEnd() == ncclInvalidUsage, "unbalanced ncclGroupEnd accepted");
    CT_EXPECT(strcmp(ncclGetErrorString(ncclInvalidArgument), "") != 0, "error string");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s ranks|group\n", argv[0]);
        return 2;
    }
    setenv("CCHAN_NCCL_FALLBACK", "none", 1);
    setenv("CCHAN_NCCL_HOST_PLATFORM", "1", 1);
    int rc = !strcmp(argv[1], "ranks") ? scenario_ranks() : scenario_group();
    if (rc || ct_failures) {
        fprintf(stderr, "test_nccl_host %s: %d failures\n", argv[1], ct_failures);
        return 1;
    }
    printf("test_nccl_host %s: OK\n", argv[1]);
    return 0;
}
