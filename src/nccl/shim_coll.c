/* libcchan_nccl: collectives and the calls forwarded to the fallback NCCL.
 *
 * AllReduce and ReduceScatter with ncclSum on float, half and bfloat16, and AllGather of any type
 * (it moves bytes), run on cchan's collectives when the communicator has them and cchan_coll says
 * it supports the size (a loaded execution plan first, CCHAN_COLL_PLANS); AllToAll and Broadcast
 * run on a loaded plan where one fits; everything else goes to the fallback NCCL. The choice
 * depends only on the call's arguments and the communicator, so every rank makes the same one.
 * CCHAN_DEBUG=INFO logs the path of every (operation, size) when it changes; TRACE logs every call.
 */
#include <stdio.h>
#include <string.h>

#include "shim.h"

typedef enum {
    OP_ALLREDUCE,
    OP_ALLGATHER,
    OP_REDUCESCATTER,
    OP_BROADCAST,
    OP_REDUCE,
    OP_ALLTOALL,
    OP_GATHER,
    OP_SCATTER,
    OP_SEND,
    OP_RECV,
    OP_COUNT
} shim_op_t;

static const char *op_names[OP_COUNT] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast",
                                         "Reduce",    "AlltoAll",  "Gather",        "Scatter",
                                         "Send",      "Recv"};

static size_t dtype_bytes(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
    }
}

static const char *dtype_name(ncclDataType_t t) {
    static const char *names[] = {"int8", "uint8", "int32",  "uint32",   "int64",  "uint64",
                                  "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "custom";
}

static const char *redop_name(ncclRedOp_t op) {
    static const char *names[] = {"sum", "prod", "max", "min", "avg"};
    return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "custom";
}

static void log_path(ncclComm_t comm, shim_op_t op, size_t count, ncclDataType_t dtype,
                     ncclRedOp_t redop, const char *path, const char *detail) {
    if (shim_log_level() < SHIM_LOG_INFO) return;
    size_t bytes = count * dtype_bytes(dtype);
    uint64_t key = ((uint64_t)bytes << 8) ^ ((uint64_t)dtype << 4) ^ (uint64_t)(path[0] == 'c') ^
                   ((uint64_t)redop << 1) ^ 0x8000000000000000ull;
    if (shim_log_level() < SHIM_LOG_TRACE && comm->logged[op] == key) return;
    comm->logged[op] = key;
    shim_log(shim_log_level() >= SHIM_LOG_TRACE ? SHIM_LOG_TRACE : SHIM_LOG_INFO,
             "rank %d/%d %s %zu x %s (%zu B)%s%s -> %s%s%s", comm->rank, comm->nranks, op_names[op],
             count, dtype_name(dtype), bytes,
             op <= OP_REDUCE && op != OP_ALLGATHER && op != OP_BROADCAST ? " " : "",
             op <= OP_REDUCE && op != OP_ALLGATHER && op != OP_BROADCAST ? redop_name(redop) : "",
             path, detail[0] ? ": " : "", detail);
}

/* ------------------------------------------------------------------ the cchan path */

static int reduce_dtype(ncclDataType_t t, cchan_coll_dtype_t *out) {
    switch (t) {
    case ncclFloat32: *out = CCHAN_COLL_F32; return 1;
    case ncclFloat16: *out = CCHAN_COLL_F16; return 1;
    case ncclBfloat16: *out = CCHAN_COLL_BF16; return 1;
    default: return 0;
    }
}

/* Whether cchan runs this call; fills the cchan dtype, element count and algorithm, or says why
 * not. */
static int cchan_route(ncclComm_t comm, shim_op_t op, size_t count, ncclDataType_t dtype,
                       ncclRedOp_t redop, cchan_coll_dtype_t *cdt, size_t *ccount,
                       cchan_coll_algo_t *algo, char *why, size_t why_n) {
    if (!comm->coll) {
        snprintf(why, why_n, "cchan paths off (%s)", comm->cchan_off);
        return 0;
    }
    if (count == 0) {
        snprintf(why, why_n, "empty");
        return 0;
    }
    cchan_coll_op_t cop;
    size_t elem = dtype_bytes(dtype);
    if (op == OP_ALLGATHER) {
        /* Moves bytes: any type goes as 4- or 2-byte units. */
        size_t bytes = count * elem;
        if (!elem) {
            snprintf(why, why_n, "unknown type %d", (int)dtype);
            return 0;
        }
        if (reduce_dtype(dtype, cdt)) {
            *ccount = count;
        } else if (bytes % 4 == 0) {
            *cdt = CCHAN_COLL_F32;
            *ccount = bytes / 4;
        } else if (bytes % 2 == 0) {
            *cdt = CCHAN_COLL_F16;
            *ccount = bytes / 2;
        } else {
            snprintf(why, why_n, "odd byte count");
            return 0;
        }
        cop = CCHAN_COLL_ALLGATHER;
    } else {
        if (redop != ncclSum) {
            snprintf(why, why_n, "cchan reduces with sum only");
            return 0;
        }
        if (!reduce_dtype(dtype, cdt)) {
            snprintf(why, why_n, "cchan reduces float, half and bfloat16 only");
            return 0;
        }
        *ccount = count;
        cop = op == OP_ALLREDUCE ? CCHAN_COLL_ALLREDUCE : CCHAN_COLL_REDUCESCATTER;
    }
    size_t full = count * elem * (op == OP_ALLREDUCE ? 1u : (size_t)comm->nranks);
    *algo = cchan_coll_select(comm->coll, cop, full);
    if (!cchan_coll_supported(comm->coll, cop, *algo, full)) {
        snprintf(why, why_n, "cchan_coll does not support %s at %zu B", cchan_coll_algo_name(*algo),
                 full);
        return 0;
    }
    snprintf(why, why_n, "%s", cchan_coll_algo_name(*algo));
    return 1;
}

static int cchan_run(ncclComm_t comm, shim_op_t op, const void *send, void *recv, size_t ccount,
                     cchan_coll_dtype_t cdt, cchan_coll_algo_t algo, cudaStream_t stream) {
    int rc;
    switch (op) {
    case OP_ALLREDUCE:
        rc = cchan_coll_allreduce(comm->coll, send, recv, ccount, cdt, algo, (void *)stream);
        break;
    case OP_ALLGATHER:
        rc = cchan_coll_allgather(comm->coll, send, recv, ccount, cdt, algo, (void *)stream);
        break;
    default:
        rc = cchan_coll_reducescatter(comm->coll, send, recv, ccount, cdt, algo, (void *)stream);
        break;
    }
    return rc;
}

/* Runs the call with cchan_coll's own choice (CCHAN_COLL_AUTO; *algo becomes what it ran, from
 * cchan_coll_last_choice) or, should cchan_coll refuse
 * it before launching anything (CCHAN_ERR_UNSUPPORTED), with the portable algorithms by name.
 * Registration is collective, so every rank is refused alike and takes the same turn. Returns 0,
 * CCHAN_ERR_UNSUPPORTED (the caller forwards the call) or another failure. */
static int cchan_run_any(ncclComm_t comm, shim_op_t op, const void *send, void *recv, size_t ccount,
                         cchan_coll_dtype_t cdt, cchan_coll_algo_t *algo, size_t full,
                         cudaStream_t stream) {
    static const cchan_coll_algo_t portable[] = {CCHAN_COLL_HB_ALLPAIRS, CCHAN_COLL_LL_ALLPAIRS};
    static const cchan_coll_op_t cops[] = {CCHAN_COLL_ALLREDUCE, CCHAN_COLL_ALLGATHER,
                                           CCHAN_COLL_REDUCESCATTER};
    int rc = cchan_run(comm, op, send, recv, ccount, cdt, CCHAN_COLL_AUTO, stream);
    cchan_coll_choice_t ch;
    if (rc == 0 && cchan_coll_last_choice(comm->coll, &ch) == 0) *algo = ch.algo;
    for (size_t i = 0; rc == CCHAN_ERR_UNSUPPORTED && i < sizeof portable / sizeof portable[0];
         i++) {
        cchan_coll_algo_t a = portable[i];
        if (!cchan_coll_supported(comm->coll, cops[op], a, full)) continue;
        rc = cchan_run(comm, op, send, recv, ccount, cdt, a, stream);
        if (rc != CCHAN_ERR_UNSUPPORTED) *algo = a;
    }
    return rc;
}

/* AllReduce, AllGather, ReduceScatter: cchan when it can, else the fallback. */
static ncclResult_t collective(shim_op_t op, const void *send, void *recv, size_t count,
                               ncclDataType_t dtype, ncclRedOp_t redop, ncclComm_t comm,
                               cudaStream_t stream) {
    shim_clear_error();
    SHIM_CALL(call);
    switch (op) {
    case OP_ALLREDUCE:
        SHIM_HAND_BACK(ncclAllReduce, comm, (send, recv, count, dtype, redop, comm, stream));
        break;
    case OP_ALLGATHER:
        SHIM_HAND_BACK(ncclAllGather, comm, (send, recv, count, dtype, comm, stream));
        break;
    default:
        SHIM_HAND_BACK(ncclReduceScatter, comm, (send, recv, count, dtype, redop, comm, stream));
        break;
    }
    ncclResult_t res = shim_check_live(&call, comm, op_names[op]);
    if (res != ncclSuccess) return res;
    char why[160] = "";
    cchan_coll_dtype_t cdt;
    size_t ccount;
    cchan_coll_algo_t algo;
    if (cchan_route(comm, op, count, dtype, redop, &cdt, &ccount, &algo, why, sizeof why)) {
        size_t full = count * dtype_bytes(dtype) * (op == OP_ALLREDUCE ? 1u : (size_t)comm->nranks);
        int rc = cchan_run_any(comm, op, send, recv, ccount, cdt, &algo, full, stream);
        if (rc == 0) {
            char detail[160];
            const char *plan = cchan_coll_last_plan(comm->coll);
            snprintf(detail, sizeof detail, "%s%s", plan ? "plan " : "",
                     plan ? plan : cchan_coll_algo_name(algo));
            log_path(comm, op, count, dtype, redop, "cchan", detail);
            return ncclSuccess;
        }
        if (rc != CCHAN_ERR_UNSUPPORTED) return shim_fail_coll(rc, op_names[op]);
        snprintf(why, sizeof why, "cchan_coll refused these buffers: %s", cchan_coll_last_error());
    }
    const shim_real_t *r = NULL;
    ncclComm_t real = NULL;
    if (count == 0 && !comm->real) return ncclSuccess;
    res = shim_real_comm(&call, comm, op_names[op], &r, &real);
    if (res != ncclSuccess) return res;
    log_path(comm, op, count, dtype, redop, "nccl", why);
    switch (op) {
    case OP_ALLREDUCE: return r->ncclAllReduce(send, recv, count, dtype, redop, real, stream);
    case OP_ALLGATHER: return r->ncclAllGather(send, recv, count, dtype, real, stream);
    default: return r->ncclReduceScatter(send, recv, count, dtype, redop, real, stream);
    }
}

SHIM_DEFINE(ncclResult_t, ncclAllReduce,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)) {
    return collective(OP_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, comm, stream);
}

SHIM_DEFINE(ncclResult_t, ncclAllGather,
            (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
             ncclComm_t comm, cudaStream_t stream)) {
    return collective(OP_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, comm, stream);
}

SHIM_DEFINE(ncclResult_t, ncclReduceScatter,
            (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)) {
    return collective(OP_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}

/* ------------------------------------------------------------------ forwarded calls */

/* Defines name(params): checks comm, then calls the fallback's name with `args`, in which `real`
 * stands for the fallback's communicator. LOG is a statement run before the call. */
#define SHIM_FORWARD(name, params, comm_arg, args, LOG)                                            \
    SHIM_DEFINE(ncclResult_t, name, params) {                                                      \
        shim_clear_error();                                                                        \
        SHIM_CALL(call);                                                                           \
        const shim_real_t *r = NULL;                                                               \
        ncclComm_t real = comm_arg;                                                                \
        SHIM_HAND_BACK(name, comm_arg, args);                                                      \
        ncclResult_t res = shim_real_comm(&call, comm_arg, #name, &r, &real);                      \
        if (res != ncclSuccess) return res;                                                        \
        if (!r->name) return shim_fail(ncclInvalidUsage, #name ": the fallback NCCL lacks it");    \
        LOG;                                                                                       \
        return r->name args;                                                                       \
    }

#define NOT_CCHAN "not implemented by cchan"

SHIM_FORWARD(ncclReduce,
             (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
              ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream),
             comm, (sendbuff, recvbuff, count, datatype, op, root, real, stream),
             log_path(comm, OP_REDUCE, count, datatype, op, "nccl", NOT_CCHAN))
SHIM_FORWARD(ncclBcast,
             (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
              cudaStream_t stream),
             comm, (buff, count, datatype, root, real, stream),
             log_path(comm, OP_BROADCAST, count, datatype, ncclSum, "nccl", NOT_CCHAN))
/* AllToAll and Broadcast run on a loaded execution plan (cchan_coll_load_plans,
 * CCHAN_COLL_PLANS) where the selector finds one, else on the fallback. float, half and bfloat16
 * go as themselves; other types, which these calls only move, as 4- or 2-byte units. */
static ncclResult_t plan_or_forward(shim_call_t *call, shim_op_t op, const void *send, void *recv,
                                    size_t count, ncclDataType_t dtype, int root, ncclComm_t comm,
                                    cudaStream_t stream) {
    char why[160] = NOT_CCHAN;
    size_t elem = dtype_bytes(dtype), bytes = count * elem;
    if (!comm->coll) {
        snprintf(why, sizeof why, "cchan paths off (%s)", comm->cchan_off);
    } else if (count && elem && bytes % 2 == 0) {
        /* the call's type where cchan has it (the selector's rows are per type), else units */
        cchan_coll_dtype_t cdt = bytes % 4 == 0 ? CCHAN_COLL_F32 : CCHAN_COLL_F16;
        size_t ccount = bytes / (cdt == CCHAN_COLL_F32 ? 4 : 2);
        if (reduce_dtype(dtype, &cdt)) ccount = count;
        int rc =
            op == OP_ALLTOALL
                ? cchan_coll_alltoall(comm->coll, send, recv, ccount, cdt, (void *)stream)
                : cchan_coll_broadcast(comm->coll, send, recv, ccount, cdt, root, (void *)stream);
        if (rc == 0) {
            char detail[160];
            snprintf(detail, sizeof detail, "plan %s", cchan_coll_last_plan(comm->coll));
            log_path(comm, op, count, dtype, ncclSum, "cchan", detail);
            return ncclSuccess;
        }
        if (rc != CCHAN_ERR_UNSUPPORTED) return shim_fail_coll(rc, op_names[op]);
        snprintf(why, sizeof why, "no loaded plan fits");
    }
    const shim_real_t *r = NULL;
    ncclComm_t real = NULL;
    ncclResult_t res = shim_real_comm(call, comm, op_names[op], &r, &real);
    if (res != ncclSuccess) return res;
    log_path(comm, op, count, dtype, ncclSum, "nccl", why);
    if (op == OP_ALLTOALL) {
        if (!r->ncclAlltoAll)
            return shim_fail(ncclInvalidUsage, "ncclAlltoAll: the fallback NCCL lacks it");
        return r->ncclAlltoAll(send, recv, count, dtype, real, stream);
    }
    if (!r->ncclBroadcast)
        return shim_fail(ncclInvalidUsage, "ncclBroadcast: the fallback NCCL lacks it");
    return r->ncclBroadcast(send, recv, count, dtype, root, real, stream);
}

SHIM_DEFINE(ncclResult_t, ncclBroadcast,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
             ncclComm_t comm, cudaStream_t stream)) {
    shim_clear_error();
    SHIM_CALL(call);
    SHIM_HAND_BACK(ncclBroadcast, comm, (sendbuff, recvbuff, count, datatype, root, comm, stream));
    ncclResult_t res = shim_check_live(&call, comm, "ncclBroadcast");
    if (res != ncclSuccess) return res;
    return plan_or_forward(&call, OP_BROADCAST, sendbuff, recvbuff, count, datatype, root, comm,
                           stream);
}
SHIM_DEFINE(ncclResult_t, ncclAlltoAll,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
             ncclComm_t comm, cudaStream_t stream)) {
    shim_clear_error();
    SHIM_CALL(call);
    SHIM_HAND_BACK(ncclAlltoAll, comm, (sendbuff, recvbuff, count, datatype, comm, stream));
    ncclResult_t res = shim_check_live(&call, comm, "ncclAlltoAll");
    if (res != ncclSuccess) return res;
    return plan_or_forward(&call, OP_ALLTOALL, sendbuff, recvbuff, count, datatype, 0, comm,
                           stream);
}
SHIM_FORWARD(ncclGather,
             (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
              ncclComm_t comm, cudaStream_t stream),
             comm, (sendbuff, recvbuff, count, datatype, root, real, stream),
             log_path(comm, OP_GATHER, count, datatype, ncclSum, "nccl", NOT_CCHAN))
SHIM_FORWARD(ncclScatter,
             (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
              ncclComm_t comm, cudaStream_t stream),
             comm, (sendbuff, recvbuff, count, datatype, root, real, stream),
             log_path(comm, OP_SCATTER, count, datatype, ncclSum, "nccl", NOT_CCHAN))
SHIM_FORWARD(ncclSend,
             (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
              ncclComm_t comm, cudaStream_t stream),
             comm, (sendbuff, count, datatype, peer, real, stream),
             log_path(comm, OP_SEND, count, datatype, ncclSum, "nccl", NOT_CCHAN))
SHIM_FORWARD(ncclRecv,
             (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
              cudaStream_t stream),
             comm, (recvbuff, count, datatype, peer, real, stream),
             log_path(comm, OP_RECV, count, datatype, ncclSum, "nccl", NOT_CCHAN))

/* Custom reduction operators exist on the fallback's communicator only; cchan never sees them
 * (it runs ncclSum alone). */
SHIM_FORWARD(ncclRedOpCreatePreMulSum,
             (ncclRedOp_t * op, void *scalar, ncclDataType_t datatype,
              ncclScalarResidence_t residence, ncclComm_t comm),
             comm, (op, scalar, datatype, residence, real), (void)0)
SHIM_FORWARD(ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm), comm, (op, real), (void)0)

/* Local registrations go to the fallback, whose handles they return; cchan's collectives copy
 * these buffers through their scratch (cchan_coll_register is collective, ncclCommRegister is not).
 * Window registrations (collective) are in shim_comm.c. */
SHIM_FORWARD(ncclCommRegister, (const ncclComm_t comm, void *buff, size_t size, void **handle),
             comm, (real, buff, size, handle), (void)0)
SHIM_FORWARD(ncclCommDeregister, (const ncclComm_t comm, void *handle), comm, (real, handle),
             (void)0)

/* ------------------------------------------------------------------ device API (host half) */

/* Device communicators, teams and barrier requirements are the fallback's: cchan's collectives do
 * not use NCCL's device API, and kernels written against it run on the fallback's communicator. */
SHIM_FORWARD(ncclDevCommCreate,
             (ncclComm_t comm, ncclDevCommRequirements_t const *reqs, ncclDevComm_t *outDevComm),
             comm, (real, reqs, outDevComm), (void)0)
SHIM_FORWARD(ncclDevCommDestroy, (ncclComm_t comm, ncclDevComm_t const *devComm), comm,
             (real, devComm), (void)0)
SHIM_FORWARD(ncclGinBarrierCreateRequirement,
             (ncclComm_t comm, ncclTeam_t team, int nBarriers, ncclGinBarrierHandle_t *outHandle,
              ncclDevResourceRequirements_t *outReq),
             comm, (real, team, nBarriers, outHandle, outReq), (void)0)

/* Calls without a communicator: straight to the fallback. */
#define SHIM_FORWARD_LIB(ret, name, params, args, failed)                                          \
    SHIM_DEFINE(ret, name, params) {                                                               \
        const shim_real_t *r = shim_real();                                                        \
        if (!r || !r->name) {                                                                      \
            shim_fail(ncclInvalidUsage, #name " needs the fallback NCCL: %s",                      \
                      r ? "it lacks the function" : shim_real_why());                              \
            return failed;                                                                         \
        }                                                                                          \
        return r->name args;                                                                       \
    }

SHIM_FORWARD_LIB(ncclResult_t, ncclLsaBarrierCreateRequirement,
                 (ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t *outHandle,
                  ncclDevResourceRequirements_t *outReq),
                 (team, nBarriers, outHandle, outReq), ncclInvalidUsage)
SHIM_FORWARD_LIB(int, ncclLLA2ACalcSlots, (int maxElts, int maxEltSize), (maxElts, maxEltSize), -1)
SHIM_FORWARD_LIB(ncclResult_t, ncclLLA2ACreateRequirement,
                 (int nBlocks, int nSlots, ncclLLA2AHandle_t *outHandle,
                  ncclDevResourceRequirements_t *outReq),
                 (nBlocks, nSlots, outHandle, outReq), ncclInvalidUsage)

/* Teams: the fallback's answer; without one, what NCCL answers on one host (every rank is in the
 * world, LSA (NVLink) and its own one-rank rail team). */
static ncclTeam_t team_of(ncclComm_t comm, ncclTeam_t (*real_fn)(ncclComm_t), int rail) {
    ncclTeam_t t = {0, 0, 0};
    SHIM_CALL(call);
    if (shim_check_comm(&call, comm, "ncclTeam*") != ncclSuccess) return t;
    if (comm->real && real_fn) return shim_enter_real(&call, "ncclTeam*") ? t : real_fn(comm->real);
    t.nRanks = rail ? 1 : comm->nranks;
    t.rank = rail ? 0 : comm->rank;
    t.stride = 1;
    return t;
}

SHIM_DEFINE(ncclTeam_t, ncclTeamWorld, (ncclComm_t comm)) {
    const shim_real_t *r = shim_real();
    return team_of(comm, r ? r->ncclTeamWorld : NULL, 0);
}
SHIM_DEFINE(ncclTeam_t, ncclTeamLsa, (ncclComm_t comm)) {
    const shim_real_t *r = shim_real();
    return team_of(comm, r ? r->ncclTeamLsa : NULL, 0);
}
SHIM_DEFINE(ncclTeam_t, ncclTeamRail, (ncclComm_t comm)) {
    const shim_real_t *r = shim_real();
    return team_of(comm, r ? r->ncclTeamRail : NULL, 1);
}

static int team_rank(ncclComm_t comm, int (*real_fn)(ncclComm_t, ncclTeam_t, int), ncclTeam_t team,
                     int rank) {
    SHIM_CALL(call);
    if (shim_check_comm(&call, comm, "ncclTeamRankTo*") != ncclSuccess) return -1;
    if (comm->real && real_fn)
        return shim_enter_real(&call, "ncclTeamRankTo*") ? -1 : real_fn(comm->real, team, rank);
    return comm->rank + (rank - team.rank) * team.stride; /* one host: LSA and world coincide */
}

SHIM_DEFINE(int, ncclTeamRankToWorld, (ncclComm_t comm, ncclTeam_t team, int rank)) {
    const shim_real_t *r = shim_real();
    return team_rank(comm, r ? r->ncclTeamRankToWorld : NULL, team, rank);
}
SHIM_DEFINE(int, ncclTeamRankToLsa, (ncclComm_t comm, ncclTeam_t team, int rank)) {
    const shim_real_t *r = shim_real();
    return team_rank(comm, r ? r->ncclTeamRankToLsa : NULL, team, rank);
}
