/* A stand-in for the real NCCL, loaded by the shim as its fallback (CCHAN_NCCL_FALLBACK) in
 * test_nccl_foreign: just enough for the shim to accept it. The calls the test makes answer with
 * values the shim never gives for them (ncclInProgress, a count of 77), so that the test can tell a
 * call handed to the fallback from one the shim answered. */
#include "nccl_abi.h"

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
    *err = ncclInProgress;
    return ncclSuccess;
}
