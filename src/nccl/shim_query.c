/* libcchan_nccl: queries on communicators (version, errors, count, device, rank) and NCCL's memory
 * allocation and buffer registration calls. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

/* ------------------------------------------------------------------ queries */

SHIM_DEFINE(ncclResult_t, ncclGetVersion, (int *version)) {
    if (!version) return shim_fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    const shim_real_t *r = shim_real();
    /* The fallback's version says which features work; without one, the ABI implemented here. */
    *version = r && r->version ? r->version : NCCL_VERSION_CODE;
    return ncclSuccess;
}

SHIM_DEFINE(const char *, ncclGetErrorString, (ncclResult_t result)) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with CCHAN_DEBUG=INFO and NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with CCHAN_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the cchan developers";
    case ncclInvalidArgument: return "invalid argument (run with CCHAN_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with CCHAN_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

SHIM_DEFINE(const char *, ncclGetLastError, (ncclComm_t comm)) {
    if (shim_last_error()[0]) return shim_last_error();
    const shim_real_t *r = shim_real();
    if (r && r->ncclGetLastError) {
        SHIM_CALL(call);
        ncclComm_t real = NULL;
        if (comm && !shim_foreign_comm(comm)) {
            /* a handle that is not live asks for the fallback's global message, not for this
             * call's own complaint about the handle */
            if (shim_check_comm(&call, comm, "ncclGetLastError") == ncclSuccess &&
                shim_enter_real(&call, "ncclGetLastError") == ncclSuccess)
                real = comm->real;
            shim_clear_error();
        }
        return r->ncclGetLastError(real);
    }
    return "";
}

SHIM_DEFINE(void, ncclResetDebugInit, (void)) {
    const shim_real_t *r = shim_real();
    if (!r) return;
    void (*reset)(void);
    *(void **)&reset = dlsym(r->handle, "ncclResetDebugInit");
    if (reset) reset();
}

SHIM_DEFINE(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t *asyncError)) {
    if (!asyncError)
        return shim_fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
    SHIM_HAND_BACK(ncclCommGetAsyncError, comm, (comm, asyncError));
    SHIM_CALL(call);
    ncclResult_t res = shim_check_comm(&call, comm, "ncclCommGetAsyncError");
    if (res != ncclSuccess && !call.comm) return res; /* not a live communicator */
    if (res != ncclSuccess) { /* an initialisation that failed (inside a group) */
        *asyncError = res;
        return ncclSuccess;
    }
    if (comm->cc) {
        /* a device-side wait that expired, then the communicator's abort (this rank's
         * ncclCommAbort from another thread, a peer's, or a peer's death) */
        int rc = cchan_comm_check_device(comm->cc), st = 0;
        if (!rc && cchan_comm_get_async_error(comm->cc, &st) == 0) rc = st;
        if (rc) {
            *asyncError = shim_fail_cchan(rc, "ncclCommGetAsyncError");
            return ncclSuccess;
        }
    }
    const shim_real_t *r = shim_real();
    if (comm->real && r) {
        /* refused once a teardown began: the fallback's communicator is being torn down */
        res = shim_enter_real(&call, "ncclCommGetAsyncError");
        if (res != ncclSuccess) {
            *asyncError = res;
            return ncclSuccess;
        }
        return r->ncclCommGetAsyncError(comm->real, asyncError);
    }
    *asyncError = ncclSuccess;
    return ncclSuccess;
}

/* A child of a split or shrink inside a group learns its rank from the fallback after the group. */
static ncclResult_t learn_rank(shim_call_t *call, ncclComm_t comm) {
    const shim_real_t *r = shim_real();
    if (comm->rank >= 0 || !comm->real || !r) return ncclSuccess;
    ncclResult_t res = shim_enter_real(call, "ncclCommUserRank");
    if (res == ncclSuccess) res = r->ncclCommUserRank(comm->real, &comm->rank);
    if (res == ncclSuccess) res = r->ncclCommCount(comm->real, &comm->nranks);
    return res;
}

SHIM_DEFINE(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int *count)) {
    SHIM_HAND_BACK(ncclCommCount, comm, (comm, count));
    SHIM_CALL(call);
    ncclResult_t res = shim_check_comm(&call, comm, "ncclCommCount");
    if (res == ncclSuccess) res = learn_rank(&call, comm);
    if (res != ncclSuccess) return res;
    if (!count) return shim_fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
    *count = comm->nranks;
    return ncclSuccess;
}

SHIM_DEFINE(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int *device)) {
    SHIM_HAND_BACK(ncclCommCuDevice, comm, (comm, device));
    SHIM_CALL(call);
    ncclResult_t res = shim_check_comm(&call, comm, "ncclCommCuDevice");
    if (res != ncclSuccess) return res;
    if (!device) return shim_fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
    *device = comm->device;
    return ncclSuccess;
}

SHIM_DEFINE(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int *rank)) {
    SHIM_HAND_BACK(ncclCommUserRank, comm, (comm, rank));
    SHIM_CALL(call);
    ncclResult_t res = shim_check_comm(&call, comm, "ncclCommUserRank");
    if (res == ncclSuccess) res = learn_rank(&call, comm);
    if (res != ncclSuccess) return res;
    if (!rank) return shim_fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
    *rank = comm->rank;
    return ncclSuccess;
}

/* ------------------------------------------------------------------ memory and registration */

SHIM_DEFINE(ncclResult_t, ncclMemAlloc, (void **ptr, size_t size)) {
    const shim_real_t *r = shim_real();
    if (!r || !r->ncclMemAlloc)
        return shim_fail(ncclInvalidUsage, "ncclMemAlloc needs the fallback NCCL: %s",
                         shim_real_why());
    return r->ncclMemAlloc(ptr, size);
}

SHIM_DEFINE(ncclResult_t, ncclMemFree, (void *ptr)) {
    const shim_real_t *r = shim_real();
    if (!r || !r->ncclMemFree)
        return shim_fail(ncclInvalidUsage, "ncclMemFree needs the fallback NCCL: %s",
                         shim_real_why());
    return r->ncclMemFree(ptr);
}
