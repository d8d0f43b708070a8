/* The NCCL 2.28 C ABI that libcchan_nccl.so implements: types and every function of nccl.h.
 *
 * The shim is built without CUDA headers, so the types are spelled out here with NCCL's names,
 * values and layouts. With CCHAN_NCCL_SYSTEM_HEADER defined, the toolkit's nccl.h provides the
 * types instead and the prototypes below are checked against its own declarations by the compiler:
 * the test test/nccl builds the whole shim that way with -Werror, so a signature that drifts from
 * nccl.h fails CI (test/nccl/nccl_abi_facts.h compares the values and layouts).
 */
#ifndef CCHAN_NCCL_ABI_H
#define CCHAN_NCCL_ABI_H

#include <limits.h>
#include <stddef.h>

#ifdef CCHAN_NCCL_SYSTEM_HEADER
#include <nccl.h>
#else

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_VERSION(X, Y, Z)                                                                      \
    (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

typedef struct CUstream_st *cudaStream_t; /* as cuda_runtime.h declares it */

typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow_vidmem *ncclWindow_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01

typedef struct ncclConfig_v22800 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
    int splitShare;
    int trafficClass;
    const char *commName;
    int collnetEnable;
    int CTAPolicy;
    int shrinkShare;
    int nvlsCTAs;
    int nChannelsPerNetPeer;
    int nvlinkCentricSched;
} ncclConfig_t;

typedef struct ncclSimInfo_v22200 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    float estimatedTime;
} ncclSimInfo_t;

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5,
    ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

#endif /* CCHAN_NCCL_SYSTEM_HEADER */

/* The host half of NCCL's device API (nccl_device/core.h, ll_a2a.h, lsa_barrier.h, gin_barrier.h),
 * which libnccl also exports and which applications such as PyTorch 2.11 link against. The shim
 * only forwards these; their structures are opaque here except ncclTeam_t, passed by value. Those
 * headers are C++: test/nccl/device_api_check.cpp compares these declarations with them. */
#ifndef CCHAN_NCCL_SYSTEM_DEVICE_HEADER
typedef struct ncclTeam {
    int nRanks, rank, stride;
} ncclTeam_t;
typedef struct ncclDevComm ncclDevComm_t;
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
typedef struct ncclLsaBarrierHandle ncclLsaBarrierHandle_t;
typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;
typedef struct ncclLLA2AHandle ncclLLA2AHandle_t;
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* CCHAN_NCCL_DEVICE_FUNCS(X): the device API's host functions, same form as CCHAN_NCCL_FUNCS. */
#define CCHAN_NCCL_DEVICE_FUNCS(X)                                                                 \
    X(ncclResult_t, ncclDevCommCreate,                                                             \
      (ncclComm_t comm, ncclDevCommRequirements_t const *reqs, ncclDevComm_t *outDevComm),         \
      (comm, reqs, outDevComm))                                                                    \
    X(ncclResult_t, ncclDevCommDestroy, (ncclComm_t comm, ncclDevComm_t const *devComm),           \
      (comm, devComm))                                                                             \
    X(ncclTeam_t, ncclTeamWorld, (ncclComm_t comm), (comm))                                        \
    X(ncclTeam_t, ncclTeamLsa, (ncclComm_t comm), (comm))                                          \
    X(ncclTeam_t, ncclTeamRail, (ncclComm_t comm), (comm))                                         \
    X(int, ncclTeamRankToWorld, (ncclComm_t comm, ncclTeam_t team, int rank), (comm, team, rank))  \
    X(int, ncclTeamRankToLsa, (ncclComm_t comm, ncclTeam_t team, int rank), (comm, team, rank))    \
    X(ncclResult_t, ncclGinBarrierCreateRequirement,                                               \
      (ncclComm_t comm, ncclTeam_t team, int nBarriers, ncclGinBarrierHandle_t *outHandle,         \
       ncclDevResourceRequirements_t *outReq),                                                     \
      (comm, team, nBarriers, outHandle, outReq))                                                  \
    X(ncclResult_t, ncclLsaBarrierCreateRequirement,                                               \
      (ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t *outHandle,                          \
       ncclDevResourceRequirements_t *outReq),                                                     \
      (team, nBarriers, outHandle, outReq))                                                        \
    X(int, ncclLLA2ACalcSlots, (int maxElts, int maxEltSize), (maxElts, maxEltSize))               \
    X(ncclResult_t, ncclLLA2ACreateRequirement,                                                    \
      (int nBlocks, int nSlots, ncclLLA2AHandle_t *outHandle,                                      \
       ncclDevResourceRequirements_t *outReq),                                                     \
      (nBlocks, nSlots, outHandle, outReq))

/* CCHAN_NCCL_FUNCS(X): X(return type, name, (parameters), (argument names)) for every function of
 * nccl.h but ncclResetDebugInit (void, no arguments; defined by hand). Each is exported twice, as
 * pnccl<Name> and as its alias nccl<Name>, as NCCL does for profilers. */
#define CCHAN_NCCL_FUNCS(X)                                                                        \
    X(ncclResult_t, ncclMemAlloc, (void **ptr, size_t size), (ptr, size))                          \
    X(ncclResult_t, ncclMemFree, (void *ptr), (ptr))                                               \
    X(ncclResult_t, ncclGetVersion, (int *version), (version))                                     \
    X(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId), (uniqueId))                        \
    X(ncclResult_t, ncclCommInitRankConfig,                                                        \
      (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config),        \
      (comm, nranks, commId, rank, config))                                                        \
    X(ncclResult_t, ncclCommInitRank,                                                              \
      (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank),                              \
      (comm, nranks, commId, rank))                                                                \
    X(ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int *devlist),            \
      (comm, ndev, devlist))                                                                       \
    X(ncclResult_t, ncclCommFinalize, (ncclComm_t comm), (comm))                                   \
    X(ncclResult_t, ncclCommDestroy, (ncclComm_t comm), (comm))                                    \
    X(ncclResult_t, ncclCommAbort, (ncclComm_t comm), (comm))                                      \
    X(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags), (comm, revokeFlags))       \
    X(ncclResult_t, ncclCommSplit,                                                                 \
      (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config),            \
      (comm, color, key, newcomm, config))                                                         \
    X(ncclResult_t, ncclCommShrink,                                                                \
      (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,         \
       ncclConfig_t *config, int shrinkFlags),                                                     \
      (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags))                   \
    X(ncclResult_t, ncclCommInitRankScalable,                                                      \
      (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds,               \
       ncclConfig_t *config),                                                                      \
      (newcomm, nranks, myrank, nId, commIds, config))                                             \
    X(const char *, ncclGetErrorString, (ncclResult_t result), (result))                           \
    X(const char *, ncclGetLastError, (ncclComm_t comm), (comm))                                   \
    X(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t * asyncError),           \
      (comm, asyncError))                                                                          \
    X(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int *count), (comm, count))             \
    X(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int *device), (comm, device))        \
    X(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int *rank), (comm, rank))            \
    X(ncclResult_t, ncclCommRegister,                                                              \
      (const ncclComm_t comm, void *buff, size_t size, void **handle), (comm, buff, size, handle)) \
    X(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void *handle), (comm, handle))     \
    X(ncclResult_t, ncclCommWindowRegister,                                                        \
      (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags),                 \
      (comm, buff, size, win, winFlags))                                                           \
    X(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win), (comm, win))    \
    X(ncclResult_t, ncclRedOpCreatePreMulSum,                                                      \
      (ncclRedOp_t * op, void *scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,   \
       ncclComm_t comm),                                                                           \
      (op, scalar, datatype, residence, comm))                                                     \
    X(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm), (op, comm))               \
    X(ncclResult_t, ncclReduce,                                                                    \
      (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,                \
       ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream),                            \
      (sendbuff, recvbuff, count, datatype, op, root, comm, stream))                               \
    X(ncclResult_t, ncclBcast,                                                                     \
      (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,               \
       cudaStream_t stream),                                                                       \
      (buff, count, datatype, root, comm, stream))                                                 \
    X(ncclResult_t, ncclBroadcast,                                                                 \
      (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,      \
       ncclComm_t comm, cudaStream_t stream),                                                      \
      (sendbuff, recvbuff, count, datatype, root, comm, stream))                                   \
    X(ncclResult_t, ncclAllReduce,                                                                 \
      (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,                \
       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),                                      \
      (sendbuff, recvbuff, count, datatype, op, comm, stream))                                     \
    X(ncclResult_t, ncclReduceScatter,                                                             \
      (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,            \
       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),                                      \
      (sendbuff, recvbuff, recvcount, datatype, op, comm, stream))                                 \
    X(ncclResult_t, ncclAllGather,                                                                 \
      (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,            \
       ncclComm_t comm, cudaStream_t stream),                                                      \
      (sendbuff, recvbuff, sendcount, datatype, comm, stream))                                     \
    X(ncclResult_t, ncclAlltoAll,                                                                  \
      (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,                \
       ncclComm_t comm, cudaStream_t stream),                                                      \
      (sendbuff, recvbuff, count, datatype, comm, stream))                                         \
    X(ncclResult_t, ncclGather,                                                                    \
      (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,      \
       ncclComm_t comm, cudaStream_t stream),                                                      \
      (sendbuff, recvbuff, count, datatype, root, comm, stream))                                   \
    X(ncclResult_t, ncclScatter,                                                                   \
      (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,      \
       ncclComm_t comm, cudaStream_t stream),                                                      \
      (sendbuff, recvbuff, count, datatype, root, comm, stream))                                   \
    X(ncclResult_t, ncclSend,                                                                      \
      (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,     \
       cudaStream_t stream),                                                                       \
      (sendbuff, count, datatype, peer, comm, stream))                                             \
    X(ncclResult_t, ncclRecv,                                                                      \
      (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,           \
       cudaStream_t stream),                                                                       \
      (recvbuff, count, datatype, peer, comm, stream))                                             \
    X(ncclResult_t, ncclGroupStart, (void), ())                                                    \
    X(ncclResult_t, ncclGroupEnd, (void), ())                                                      \
    X(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo), (simInfo))

#define CCHAN_NCCL_DECLARE(ret, name, params, args)                                                \
    ret name params;                                                                               \
    ret p##name params;
CCHAN_NCCL_FUNCS(CCHAN_NCCL_DECLARE)
CCHAN_NCCL_DEVICE_FUNCS(CCHAN_NCCL_DECLARE)
#undef CCHAN_NCCL_DECLARE

#ifndef CCHAN_NCCL_SYSTEM_HEADER
void ncclResetDebugInit(void);
void pncclResetDebugInit(void);
#endif

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_NCCL_ABI_H */
