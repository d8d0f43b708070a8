/* libcchan_nccl on the host platform: NCCL's API driving cchan's collectives on CPU threads.
 *
 *   cchan-run -n 2 test_nccl_host ranks   every rank one process: init, queries, AllReduce /
 *                                          AllGather / ReduceScatter through cchan (checked against
 *                                          the exact sums), calls that need the fallback NCCL fail
 *                                          cleanly without one, split with reversed keys, destroy
 *   test_nccl_host group                  two ranks in one process and one thread: ncclGroupStart,
 *                                          ncclCommInitRank twice, ncclGroupEnd (deferred inits),
 *                                          ncclCommInitAll, destroy (deferred collective teardown)
 *   cchan-run -n 2 test_nccl_host abort   PyTorch's watchdog: rank 0 blocks in ncclAllReduce that
 *                                          rank 1 never joins, and a thread of rank 0 calls
 *                                          ncclCommAbort after 1 s. The blocked call, rank 1's
 *                                          ncclCommGetAsyncError, its next collective and its
 *                                          ncclCommDestroy all end with an error (or succeed, for
 *                                          the teardowns) within ABORT_BOUND_S; later calls on the
 *                                          dead handles fail with ncclInvalidArgument
 *   test_nccl_host stale                  one process: ncclCommAbort of one rank of an
 *                                          ncclCommInitAll pair reaches the other; calls on
 *                                          handles after ncclCommDestroy / ncclCommAbort fail with
 *                                          ncclInvalidArgument (and read no freed memory: ASan)
 *
 * No fallback NCCL (CCHAN_NCCL_FALLBACK=none) and CCHAN_NCCL_HOST_PLATFORM=1, which lets the shim
 * use a host-platform cchan communicator (buffers are host memory). Exit 77 when the shim was built
 * without the collectives library.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* ------------------------------------------------------------------ abort */

/* How long after ncclCommAbort returns (or, on a peer, after it was called) every call must have
 * ended: cchan's abort reaches every rank within about a second; the rest is slack for the
 * sanitizers on a loaded machine. */
#define ABORT_BOUND_S 6.0

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* A call run on its own thread, so that the test can give up on it when it hangs. */
typedef enum { CALL_ALLREDUCE, CALL_ABORT, CALL_DESTROY } call_kind_t;
typedef struct {
    call_kind_t kind;
    ncclComm_t comm;
    double delay_s; /* before the call */
    float buf[1001];
    ncclResult_t res;
    double start, end;
    int done; /* atomic */
    pthread_t th;
} call_t;

static void *call_run(void *arg) {
    call_t *c = arg;
    if (c->delay_s > 0) sleep_s(c->delay_s);
    c->start = now_s();
    switch (c->kind) {
    case CALL_ALLREDUCE:
        c->res = ncclAllReduce(c->buf, c->buf, 1001, ncclFloat, ncclSum, c->comm, NULL);
        break;
    case CALL_ABORT: c->res = ncclCommAbort(c->comm); break;
    case CALL_DESTROY: c->res = ncclCommDestroy(c->comm); break;
    }
    c->end = now_s();
    __atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void call_start(call_t *c, call_kind_t kind, ncclComm_t comm, double delay_s) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->comm = comm;
    c->delay_s = delay_s;
    CT_REQUIRE(pthread_create(&c->th, NULL, call_run, c) == 0, "pthread_create");
}

/* Waits for the call until `deadline` (now_s() time); a call still running then is a hang: the
 * test fails at once (its thread cannot be joined). */
static void call_finish(call_t *c, double deadline, const char *what) {
    while (!__atomic_load_n(&c->done, __ATOMIC_ACQUIRE) && now_s() < deadline) sleep_s(0.01);
    if (!__atomic_load_n(&c->done, __ATOMIC_ACQUIRE)) {
        ct_where(__FILE__, __LINE__);
        fprintf(stderr, "FAIL: %s still blocked %.1f s after its deadline\n", what,
                now_s() - deadline);
        fflush(stderr);
        _exit(1);
    }
    pthread_join(c->th, NULL);
}

static int is_abort_error(ncclResult_t r) {
    return r == ncclRemoteError || r == ncclInternalError || r == ncclInvalidUsage;
}

/* Every call on a dead handle: ncclInvalidArgument, and no read of freed memory. */
static void check_dead_handle(ncclComm_t comm, const char *after) {
    int got = -1;
    float x = 1.0f;
    ncclResult_t async = ncclSuccess, res;
    res = ncclCommCount(comm, &got);
    CT_EXPECT(res == ncclInvalidArgument, "ncclCommCount after %s -> %d", after, (int)res);
    res = ncclCommUserRank(comm, &got);
    CT_EXPECT(res == ncclInvalidArgument, "ncclCommUserRank after %s -> %d", after, (int)res);
    res = ncclCommGetAsyncError(comm, &async);
    CT_EXPECT(res == ncclInvalidArgument, "ncclCommGetAsyncError after %s -> %d", after, (int)res);
    CT_EXPECT(strstr(ncclGetLastError(comm), "destroyed or aborted") != NULL,
              "last error after %s: '%s'", after, ncclGetLastError(comm));
    res = ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL);
    CT_EXPECT(res == ncclInvalidArgument, "ncclAllReduce after %s -> %d", after, (int)res);
    res = ncclSend(&x, 1, ncclFloat, 0, comm, NULL);
    CT_EXPECT(res == ncclInvalidArgument, "ncclSend after %s -> %d", after, (int)res);
    res = ncclCommDestroy(comm);
    CT_EXPECT(res == ncclInvalidArgument, "ncclCommDestroy after %s -> %d", after, (int)res);
    res = ncclCommAbort(comm);
    CT_EXPECT(res == ncclInvalidArgument, "ncclCommAbort after %s -> %d", after, (int)res);
}

/* Polls ncclCommGetAsyncError until it reports an error or `deadline`; returns the error. */
static ncclResult_t wait_async_error(ncclComm_t comm, double deadline) {
    ncclResult_t async = ncclSuccess;
    do {
        ncclResult_t res = ncclCommGetAsyncError(comm, &async);
        CT_REQUIRE(res == ncclSuccess, "ncclCommGetAsyncError -> %d (%s)", (int)res,
                   ncclGetLastError(comm));
        if (async != ncclSuccess) break;
        sleep_s(0.02);
    } while (now_s() < deadline);
    return async;
}

static int scenario_abort(void) {
    cchan_bootstrap_t *bs;
    if (cchan_bootstrap_create_from_env(&bs)) {
        fprintf(stderr, "bootstrap: %s\n", cchan_last_error());
        return 1;
    }
    int rank = cchan_bootstrap_rank(bs), n = cchan_bootstrap_size(bs);
    CT_REQUIRE(n == 2, "the abort scenario runs on 2 ranks, not %d", n);
    ct_rank = rank;
    ncclUniqueId id, ids[2];
    memset(&id, 0, sizeof id);
    if (rank == 0) NCCL_OK(ncclGetUniqueId(&id));
    CT_OK(cchan_bootstrap_allgather(bs, &id, ids, sizeof id));
    ncclComm_t comm = NULL;
    NCCL_OK(ncclCommInitRank(&comm, n, ids[0], rank));
    CT_REQUIRE(comm != NULL, "no communicator");
    float x[4] = {1, 2, 3, 4};
    NCCL_OK(ncclAllReduce(x, x, 4, ncclFloat, ncclSum, comm, NULL)); /* both ranks are here */
    CT_EXPECT(x[0] == 2 && x[3] == 8, "AllReduce before the abort: %g %g", x[0], x[3]);
    double t0 = now_s();

    if (rank == 0) {
        call_t blocked, watchdog;
        call_start(&blocked, CALL_ALLREDUCE, comm, 0);
        call_start(&watchdog, CALL_ABORT, comm, 1.0); /* the hung collective's watchdog */
        call_finish(&watchdog, t0 + 1.0 + 2 * ABORT_BOUND_S, "ncclCommAbort (watchdog thread)");
        CT_EXPECT(watchdog.res == ncclSuccess, "ncclCommAbort -> %d (%s)", (int)watchdog.res,
                  ncclGetLastError(NULL));
        call_finish(&blocked, watchdog.end + ABORT_BOUND_S, "ncclAllReduce after ncclCommAbort");
        CT_EXPECT(is_abort_error(blocked.res), "blocked ncclAllReduce -> %d, want an error",
                  (int)blocked.res);
        CT_EXPECT(blocked.end - watchdog.start < ABORT_BOUND_S,
                  "blocked ncclAllReduce returned %.2f s after ncclCommAbort was called",
                  blocked.end - watchdog.start);
        printf("rank 0: ncclAllReduce -> %d %.2f s after ncclCommAbort was called, which took "
               "%.2f s\n",
               (int)blocked.res, blocked.end - watchdog.start, watchdog.end - watchdog.start);
        check_dead_handle(comm, "ncclCommAbort");
    } else {
        /* Never joins the collective: learns of the abort through ncclCommGetAsyncError. */
        ncclResult_t async = wait_async_error(comm, t0 + 1.0 + 2 * ABORT_BOUND_S);
        double learned = now_s() - t0;
        CT_EXPECT(async == ncclRemoteError, "rank 1: async error %d after %.2f s, want %d",
                  (int)async, learned, (int)ncclRemoteError);
        CT_EXPECT(learned < 1.0 + ABORT_BOUND_S, "rank 1 learned of the abort after %.2f s",
                  learned);
        printf("rank 1: ncclCommGetAsyncError -> %d after %.2f s (the abort was at about 1 s)\n",
               (int)async, learned);
        call_t late, destroy;
        call_start(&late, CALL_ALLREDUCE, comm, 0);
        call_finish(&late, now_s() + ABORT_BOUND_S, "rank 1's ncclAllReduce after the abort");
        CT_EXPECT(is_abort_error(late.res), "rank 1's ncclAllReduce after the abort -> %d",
                  (int)late.res);
        call_start(&destroy, CALL_DESTROY, comm, 0);
        call_finish(&destroy, now_s() + ABORT_BOUND_S, "rank 1's ncclCommDestroy");
        CT_EXPECT(destroy.res == ncclSuccess, "rank 1's ncclCommDestroy -> %d (%s)",
                  (int)destroy.res, ncclGetLastError(NULL));
        check_dead_handle(comm, "ncclCommDestroy");
    }
    CT_OK(cchan_bootstrap_barrier(bs));
    cchan_bootstrap_destroy(bs);
    return 0;
}

/* One process: the abort of one rank of a pair reaches the other; calls on dead handles. */
static int scenario_stale(void) {
    ncclComm_t comms[2] = {NULL, NULL};
    NCCL_OK(ncclCommInitAll(comms, 2, NULL));
    NCCL_OK(ncclCommAbort(comms[0]));
    double t0 = now_s();
    ncclResult_t async = wait_async_error(comms[1], t0 + ABORT_BOUND_S);
    CT_EXPECT(async == ncclRemoteError, "the other rank's async error %d after %.2f s", (int)async,
              now_s() - t0);
    call_t late, destroy;
    call_start(&late, CALL_ALLREDUCE, comms[1], 0);
    call_finish(&late, now_s() + ABORT_BOUND_S, "ncclAllReduce on the other rank");
    CT_EXPECT(is_abort_error(late.res), "the other rank's ncclAllReduce -> %d", (int)late.res);
    call_start(&destroy, CALL_DESTROY, comms[1], 0);
    call_finish(&destroy, now_s() + ABORT_BOUND_S, "ncclCommDestroy of the other rank");
    CT_EXPECT(destroy.res == ncclSuccess, "ncclCommDestroy of the other rank -> %d",
              (int)destroy.res);
    check_dead_handle(comms[0], "ncclCommAbort");
    check_dead_handle(comms[1], "ncclCommDestroy");

    /* One rank: destroyed, and aborted by the thread that then uses it. */
    ncclComm_t one = NULL;
    NCCL_OK(ncclCommInitAll(&one, 1, NULL));
    float x = 1.0f;
    NCCL_OK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, one, NULL));
    NCCL_OK(ncclCommDestroy(one));
    check_dead_handle(one, "ncclCommDestroy");
    NCCL_OK(ncclCommInitAll(&one, 1, NULL));
    NCCL_OK(ncclCommAbort(one));
    check_dead_handle(one, "ncclCommAbort");
    CT_EXPECT(ncclCommAbort(NULL) == ncclSuccess, "ncclCommAbort(NULL)");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s ranks|group|abort|stale\n", argv[0]);
        return 2;
    }
    setenv("CCHAN_NCCL_FALLBACK", "none", 1);
    setenv("CCHAN_NCCL_HOST_PLATFORM", "1", 1);
    int rc;
    if (!strcmp(argv[1], "ranks"))
        rc = scenario_ranks();
    else if (!strcmp(argv[1], "group"))
        rc = scenario_group();
    else if (!strcmp(argv[1], "abort"))
        rc = scenario_abort();
    else if (!strcmp(argv[1], "stale"))
        rc = scenario_stale();
    else {
        fprintf(stderr, "%s: scenario '%s': want ranks, group, abort or stale\n", argv[0], argv[1]);
        return 2;
    }
    if (rc || ct_failures) {
        fprintf(stderr, "test_nccl_host %s: %d failures\n", argv[1], ct_failures);
        return 1;
    }
    printf("test_nccl_host %s: OK\n", argv[1]);
    return 0;
}
