/* The values and layouts of nccl.h that libcchan_nccl's own ABI header (src/nccl/nccl_abi.h) must
 * reproduce: FACT(name, expression), expanded once against each header. */
#define CCHAN_NCCL_ABI_FACTS(FACT)                                                                 \
    FACT(NCCL_UNIQUE_ID_BYTES, NCCL_UNIQUE_ID_BYTES)                                               \
    FACT(sizeof_ncclUniqueId, sizeof(ncclUniqueId))                                                \
    FACT(NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT)                                             \
    FACT(NCCL_SPLIT_NOCOLOR, NCCL_SPLIT_NOCOLOR)                                                   \
    FACT(NCCL_WIN_DEFAULT, NCCL_WIN_DEFAULT)                                                       \
    FACT(NCCL_WIN_COLL_SYMMETRIC, NCCL_WIN_COLL_SYMMETRIC)                                         \
    FACT(sizeof_ncclResult_t, sizeof(ncclResult_t))                                                \
    FACT(ncclSuccess, ncclSuccess)                                                                 \
    FACT(ncclUnhandledCudaError, ncclUnhandledCudaError)                                           \
    FACT(ncclSystemError, ncclSystemError)                                                         \
    FACT(ncclInternalError, ncclInternalError)                                                     \
    FACT(ncclInvalidArgument, ncclInvalidArgument)                                                 \
    FACT(ncclInvalidUsage, ncclInvalidUsage)                                                       \
    FACT(ncclRemoteError, ncclRemoteError)                                                         \
    FACT(ncclInProgress, ncclInProgress)                                                           \
    FACT(ncclNumResults, ncclNumResults)                                                           \
    FACT(sizeof_ncclRedOp_t, sizeof(ncclRedOp_t))                                                  \
    FACT(ncclSum, ncclSum)                                                                         \
    FACT(ncclProd, ncclProd)                                                                       \
    FACT(ncclMax, ncclMax)                                                                         \
    FACT(ncclMin, ncclMin)                                                                         \
    FACT(ncclAvg, ncclAvg)                                                                         \
    FACT(ncclNumOps, ncclNumOps)                                                                   \
    FACT(ncclMaxRedOp, ncclMaxRedOp)                                                               \
    FACT(sizeof_ncclDataType_t, sizeof(ncclDataType_t))                                            \
    FACT(ncclInt8, ncclInt8)                                                                       \
    FACT(ncclUint8, ncclUint8)                                                                     \
    FACT(ncclInt32, ncclInt32)                                                                     \
    FACT(ncclUint32, ncclUint32)                                                                   \
    FACT(ncclInt64, ncclInt64)                                                                     \
    FACT(ncclUint64, ncclUint64)                                                                   \
    FACT(ncclFloat16, ncclFloat16)                                                                 \
    FACT(ncclFloat32, ncclFloat32)                                                                 \
    FACT(ncclFloat64, ncclFloat64)                                                                 \
    FACT(ncclBfloat16, ncclBfloat16)                                                               \
    FACT(ncclFloat8e4m3, ncclFloat8e4m3)                                                           \
    FACT(ncclFloat8e5m2, ncclFloat8e5m2)                                                           \
    FACT(ncclNumTypes, ncclNumTypes)                                                               \
    FACT(ncclScalarDevice, ncclScalarDevice)                                                       \
    FACT(ncclScalarHostImmediate, ncclScalarHostImmediate)                                         \
    FACT(sizeof_ncclConfig_t, sizeof(ncclConfig_t))                                                \
    FACT(config_magic, offsetof(ncclConfig_t, magic))                                              \
    FACT(config_version, offsetof(ncclConfig_t, version))                                          \
    FACT(config_blocking, offsetof(ncclConfig_t, blocking))                                        \
    FACT(config_cgaClusterSize, offsetof(ncclConfig_t, cgaClusterSize))                            \
    FACT(config_minCTAs, offsetof(ncclConfig_t, minCTAs))                                          \
    FACT(config_maxCTAs, offsetof(ncclConfig_t, maxCTAs))                                          \
    FACT(config_netName, offsetof(ncclConfig_t, netName))                                          \
    FACT(config_splitShare, offsetof(ncclConfig_t, splitShare))                                    \
    FACT(config_trafficClass, offsetof(ncclConfig_t, trafficClass))                                \
    FACT(config_commName, offsetof(ncclConfig_t, commName))                                        \
    FACT(config_collnetEnable, offsetof(ncclConfig_t, collnetEnable))                              \
    FACT(config_CTAPolicy, offsetof(ncclConfig_t, CTAPolicy))                                      \
    FACT(config_shrinkShare, offsetof(ncclConfig_t, shrinkShare))                                  \
    FACT(config_nvlsCTAs, offsetof(ncclConfig_t, nvlsCTAs))                                        \
    FACT(config_nChannelsPerNetPeer, offsetof(ncclConfig_t, nChannelsPerNetPeer))                  \
    FACT(config_nvlinkCentricSched, offsetof(ncclConfig_t, nvlinkCentricSched))                    \
    FACT(sizeof_ncclSimInfo_t, sizeof(ncclSimInfo_t))                                              \
    FACT(siminfo_estimatedTime, offsetof(ncclSimInfo_t, estimatedTime))                            \
    FACT(NCCL_VERSION_CODE, NCCL_VERSION_CODE)

#define CCHAN_NCCL_FACT_VALUE(name, expr) (long long)(expr),
#define CCHAN_NCCL_FACT_NAME(name, expr) #name,
