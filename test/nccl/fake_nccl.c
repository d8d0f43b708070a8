/* A stand-in for the real NCCL, loaded by the shim as its fallback (CCHAN_NCCL_FALLBACK) in
 * test_nccl_foreign: just enough for the shim to accept it. The calls the test makes answer with
 * values the shim never gives for them (ncclInProgress, a count of 77), so that the test can tell a
 * call handed to the fallback from one the shim answered.
 *
 * It also makes communicators (ncclCommInitRank; test_nccl_foreign abort) on which ncclSend blocks
 * until ncclCommAbort of that communicator, as a real NCCL call waiting on a peer that never comes
 * does, and then fails with ncclRemoteError; fake_nccl_aborts counts the aborts. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "nccl_abi.h"

#define FAKE_COMMS 4
static struct fake_comm { int used, aborted; /* atomic */ } fakes[FAKE_COMMS];
__attribute__((visibility("default"))) int fake_nccl_aborts;

/* One of the fake's own communicators, or NULL (the zeroed memory test_nccl_foreign passes). */
static struct fake_comm *fake_of(ncclComm_t comm) {
    uintptr_t p = (uintptr_t)(void *)comm, lo = (uintptr_t)&fakes[0];
    if (p < lo || p >= (uintptr_t)&fakes[FAKE_COMMS]) return NULL;
    return &fakes[(p - lo) / sizeof fakes[0]];
}

__attribute__((visibility("default"))) ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks,
                                                                     ncclUniqueId id, int rank) {
    (void)id;
    if (!comm || nranks != 1 || rank != 0) return ncclInvalidArgument;
    for (int i = 0; i < FAKE_COMMS; i++)
        if (!__atomic_exchange_n(&fakes[i].used, 1, __ATOMIC_ACQ_REL)) {
            __atomic_store_n(&fakes[i].aborted, 0, __ATOMIC_RELEASE);
            *comm = (ncclComm_t)(void *)&fakes[i];
            return ncclSuccess;
        }
    return ncclSystemError;
}

__attribute__((visibility("default"))) ncclResult_t ncclCommAbort(ncclComm_t comm) {
    struct fake_comm *f = fake_of(comm);
    if (!f) return ncclInvalidArgument;
    __atomic_fetch_add(&fake_nccl_aborts, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&f->aborted, 1, __ATOMIC_RELEASE);
    return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    return fake_of(comm) ? ncclSuccess : ncclInvalidArgument;
}

__attribute__((visibility("default"))) ncclResult_t ncclGetVersion(int *version) {
    *version = 22809;
    return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t
ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                       ncclConfig_t *config) {
    (void)comm, (void)nranks, (void)id, (void)rank, (void)config;
    return ncclInternalError;
}

__attribute__((visibility("default"))) ncclResult_t
ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dtype, ncclRedOp_t op,
              ncclComm_t comm, cudaStream_t stream) {
    (void)send, (void)recv, (void)count, (void)dtype, (void)op, (void)stream;
    return comm ? ncclInProgress : ncclInvalidArgument;
}

__attribute__((visibility("default"))) ncclResult_t ncclSend(const void *send, size_t count,
                                                             ncclDataType_t dtype, int peer,
                                                             ncclComm_t comm, cudaStream_t stream) {
    (void)send, (void)count, (void)dtype, (void)peer, (void)stream;
    struct fake_comm *f = fake_of(comm);
    if (f) {
        /* waits for a peer that never comes, until the abort (at most 30 s) */
        for (int i = 0; i < 30000 && !__atomic_load_n(&f->aborted, __ATOMIC_ACQUIRE); i++) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        return __atomic_load_n(&f->aborted, __ATOMIC_ACQUIRE) ? ncclRemoteError : ncclInternalError;
    }
    return comm ? ncclInProgress : ncclInvalidArgument;
}

__attribute__((visibility("default"))) ncclResult_t ncclCommCount(const ncclComm_t comm,
                                                                  int *count) {
    if (!comm || !count) return ncclInvalidArgument;
    *count = 77;
    return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclCommGetAsyncError(ncclComm_t comm,
                                                                          ncclResult_t *err) {
    if (!comm || !err) return ncclInvalidArgument;
    struct fake_comm *f = fake_of(comm);
    *err = !f                                               ? ncclInProgress
           : __atomic_load_n(&f->aborted, __ATOMIC_ACQUIRE) ? ncclRemoteError
                                                            : ncclSuccess;
    return ncclSuccess;
}
