/* Handles the shim did not make. A framework may load its own NCCL into the global scope before the
 * shim loads it as the fallback; that NCCL's internal calls to its exported functions then bind to
 * the shim (NCCL's argument checks call ncclCommGetAsyncError on its own communicator), so the shim
 * must hand such handles back to the fallback instead of rejecting them.
 *
 *   test_nccl_foreign fake <libfake_nccl.so>   a fallback is loaded: the call reaches it
 *   test_nccl_foreign none                      no fallback: the handle is rejected
 *   test_nccl_foreign runpath <lib>             no CCHAN_NCCL_FALLBACK: <lib>, loaded first, has a
 *                                               RUNPATH folder holding libnccl.so.2 (the fake), as
 *                                               PyTorch's libtorch_cuda.so points at its wheel's
 *                                               NCCL; the shim finds it there
 *   test_nccl_foreign abort <libfake_nccl.so>  a communicator of the fallback alone (cchan paths
 *                                               off): ncclCommAbort from another thread while
 *                                               ncclSend waits inside the fallback aborts the
 *                                               fallback's communicator, which ends the call; the
 *                                               dead handle is not taken for the fallback's own */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cchan_test.h"
#include "nccl_abi.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    ncclComm_t comm;
    ncclResult_t res;
    int done; /* atomic */
} send_call_t;

static void *send_run(void *arg) {
    send_call_t *c = arg;
    float x = 1.0f;
    c->res = ncclSend(&x, 1, ncclFloat32, 0, c->comm, NULL);
    __atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int scenario_abort(const char *fake) {
    setenv("CCHAN_NCCL_FALLBACK", fake, 1);
    setenv("CCHAN_NCCL_DISABLE", "1", 1); /* the fallback's communicator alone */
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    CT_ASSERT(ncclGetUniqueId(&id) == ncclSuccess);
    CT_ASSERT(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
    void *lib = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
    CT_ASSERT(lib != NULL);
    int *aborts = (int *)dlsym(lib, "fake_nccl_aborts");
    CT_ASSERT(aborts != NULL);

    send_call_t call = {comm, ncclSuccess, 0};
    pthread_t th;
    CT_ASSERT(pthread_create(&th, NULL, send_run, &call) == 0);
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL); /* ncclSend is waiting inside the fallback */
    double t0 = now_s();
    ncclResult_t res = ncclCommAbort(comm);
    CT_EXPECT(res == ncclSuccess, "ncclCommAbort -> %d (%s)", (int)res, ncclGetLastError(NULL));
    while (!__atomic_load_n(&call.done, __ATOMIC_ACQUIRE) && now_s() < t0 + 5)
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    CT_REQUIRE(__atomic_load_n(&call.done, __ATOMIC_ACQUIRE),
               "ncclSend still waits inside the fallback 5 s after ncclCommAbort");
    pthread_join(th, NULL);
    CT_EXPECT(call.res == ncclRemoteError, "ncclSend -> %d, want the fallback's ncclRemoteError",
              (int)call.res);
    CT_EXPECT(__atomic_load_n(aborts, __ATOMIC_ACQUIRE) == 1,
              "the fallback's ncclCommAbort ran %d times, want 1", *aborts);
    /* The dead handle is the shim's, not a fallback's handle to hand back. */
    res = ncclSend(&(float){1.0f}, 1, ncclFloat32, 0, comm, NULL);
    CT_EXPECT(res == ncclInvalidArgument, "ncclSend after ncclCommAbort -> %d", (int)res);
    ncclResult_t err = ncclSuccess;
    res = ncclCommGetAsyncError(comm, &err);
    CT_EXPECT(res == ncclInvalidArgument, "ncclCommGetAsyncError after ncclCommAbort -> %d",
              (int)res);
    printf("test_nccl_foreign abort: %s\n", ct_failures ? "FAILED" : "ok");
    return ct_failures ? 1 : 0;
}

int main(int argc, char **argv) {
    CT_ASSERT(argc >= 2);
    if (!strcmp(argv[1], "abort")) {
        CT_ASSERT(argc == 3);
        return scenario_abort(argv[2]);
    }
    int runpath = !strcmp(argv[1], "runpath");
    int fake = runpath || !strcmp(argv[1], "fake");
    CT_ASSERT(fake ? argc == 3 : !strcmp(argv[1], "none"));
    if (runpath) {
        unsetenv("CCHAN_NCCL_FALLBACK");
        CT_ASSERT(dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL) != NULL);
    } else {
        setenv("CCHAN_NCCL_FALLBACK", fake ? argv[2] : "none", 1);
    }

    /* Zeroed memory standing for the fallback's communicator: not a shim handle. */
    static uint64_t foreign[512];
    ncclResult_t err = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError((ncclComm_t)(void *)foreign, &err);
    if (fake) {
        CT_ASSERT(r == ncclSuccess);
        CT_ASSERT(err == ncclInProgress); /* answered by the fallback, not by the shim */
    } else {
        CT_ASSERT(r == ncclInvalidArgument);
        CT_ASSERT(strstr(ncclGetLastError(NULL), "not a live communicator") != NULL);
    }
    CT_ASSERT(ncclCommGetAsyncError(NULL, &err) == ncclInvalidArgument);

    /* A collective (cchan's own path), a forwarded call and a query take the same turn. */
    ncclComm_t comm = (ncclComm_t)(void *)foreign;
    float x = 1.0f;
    int count = 0;
    ncclResult_t want = fake ? ncclInProgress : ncclInvalidArgument;
    CT_ASSERT(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, NULL) == want);
    CT_ASSERT(ncclSend(&x, 1, ncclFloat32, 0, comm, NULL) == want);
    r = ncclCommCount(comm, &count);
    CT_ASSERT(fake ? r == ncclSuccess && count == 77 : r == ncclInvalidArgument);
    printf("test_nccl_foreign %s: ok\n", argv[1]);
    return 0;
}
