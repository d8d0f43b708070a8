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
 *                                               NCCL; the shim finds it there */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan_test.h"
#include "nccl_abi.h"

int main(int argc, char **argv) {
    CT_ASSERT(argc >= 2);
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
