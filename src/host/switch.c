/* cchan switch channels: the host side of reduce/broadcast over every rank's symmetric buffer.
 *
 * Portable path (always available): cchan_mem_exchange maps every rank's buffer into every rank and
 * the device handle carries the pointers.
 *
 * Multicast path (NVLink SHARP, CUDA only): on top of the portable mappings, rank 0 creates a
 * multicast object, the others import it (POSIX fd, pidfd_getfd), every rank adds its GPU, binds
 * its buffer and maps the multicast range. Multicast objects can take a shared machine's GPUs out
 * of service (docs/architecture.md), so this runs only on an explicit opt-in
 * (CCHAN_SWITCH_MULTICAST or CCHAN_NVLS=1) and is refused outright where NCCL_NVLS_ENABLE=0 is
 * set; cchan's own tests, benches and examples never opt in (test/switch/check-no-multicast.sh
 * checks the sources).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fdpass.h"
#include "mem.h"

#if defined(CCHAN_HAVE_CUDA)
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#endif

static const char *const where = "cchan_switch_channel_create";

typedef struct switch_mc {
    int active;      /* every step below succeeded */
    uint64_t handle; /* the multicast object (created or imported), 0 if none */
    int added;       /* this rank's GPU added to it */
    int bound;       /* buf bound to it */
    void *va;        /* multicast range mapped here */
    size_t bytes;    /* size of the object and the mapping */
    int device;      /* this rank's GPU */
} switch_mc_t;

struct cchan_switch {
    cchan_comm_t *comm;
    int nranks;
    uint32_t path;
    cchan_mem_t *peers[CCHAN_SWITCH_MAX_MEMBERS]; /* imports; [own rank] is the caller's buf */
    switch_mc_t mc;
};

const char *cchan_switch_path_name(uint32_t path) {
    switch (path) {
    case CCHAN_SWITCH_PATH_PORTABLE: return "portable";
    case CCHAN_SWITCH_PATH_MULTICAST: return "multicast";
    default: return "unknown";
    }
}

/* ---------------------------------------------------------------- opt-in */

/* Whether this rank asks for multicast (flag or CCHAN_NVLS=1), and whether it may have it. */
static int multicast_wanted(unsigned flags, int *want) {
    int64_t env = 0;
    int r = cchani_env_i64("CCHAN_NVLS", 0, &env);
    if (r) return cchani_error_wrap(r, where, "CCHAN_NVLS");
    if (env != 0 && env != 1)
        return cchani_error(-EINVAL, where,
                            "CCHAN_NVLS=%lld: use 1 to opt in to NVLink multicast, 0 "
                            "or unset for the portable path",
                            (long long)env);
    *want = (flags & CCHAN_SWITCH_MULTICAST) != 0 || env == 1;
    if (!*want) return 0;
    const char *nccl = cchani_env_str("NCCL_NVLS_ENABLE");
    if (nccl && !strcmp(nccl, "0"))
        return cchani_error(
            CCHAN_ERR_UNSUPPORTED, where,
            "NVLink multicast was requested (%s) but NCCL_NVLS_ENABLE=0 is set: this "
            "machine forbids multicast objects; drop the request to use the portable "
            "path",
            (flags & CCHAN_SWITCH_MULTICAST) ? "CCHAN_SWITCH_MULTICAST" : "CCHAN_NVLS=1");
    return 0;
}

/* ---------------------------------------------------------------- multicast (CUDA driver) */
#if defined(CCHAN_HAVE_CUDA)

#define SWITCH_DRIVER_FUNCS(X)                                                                     \
    X(cuGetErrorName, PFN_cuGetErrorName_v6000)                                                    \
    X(cuDeviceGet, PFN_cuDeviceGet_v2000)                                                          \
    X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000)                                        \
    X(cuMulticastGetGranularity, PFN_cuMulticastGetGranularity_v12010)                             \
    X(cuMulticastCreate, PFN_cuMulticastCreate_v12010)                                             \
    X(cuMulticastAddDevice, PFN_cuMulticastAddDevice_v12010)                                       \
    X(cuMulticastBindMem, PFN_cuMulticastBindMem_v12010)                                           \
    X(cuMulticastUnbind, PFN_cuMulticastUnbind_v12010)                                             \
    X(cuMemExportToShareableHandle, PFN_cuMemExportToShareableHandle_v10020)                       \
    X(cuMemImportFromShareableHandle, PFN_cuMemImportFromShareableHandle_v10020)                   \
    X(cuMemRetainAllocationHandle, PFN_cuMemRetainAllocationHandle_v11000)                         \
    X(cuMemRelease, PFN_cuMemRelease_v10020)                                                       \
    X(cuMemAddressReserve, PFN_cuMemAddressReserve_v10020)                                         \
    X(cuMemAddressFree, PFN_cuMemAddressFree_v10020)                                               \
    X(cuMemMap, PFN_cuMemMap_v10020)                                                               \
    X(cuMemUnmap, PFN_cuMemUnmap_v10020)                                                           \
    X(cuMemSetAccess, PFN_cuMemSetAccess_v10020)

static struct {
#define X(name, type) type name;
    SWITCH_DRIVER_FUNCS(X)
#undef X
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void drv_load(void) {
#define X(name, type)                                                                              \
    {                                                                                              \
        enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSuccess;                      \
        void *fn = NULL;                                                                           \
        if (cudaGetDriverEntryPointByVersion(#name, &fn, 12010, cudaEnableDefault, &q) ==          \
                cudaSuccess &&                                                                     \
            q == cudaDriverEntryPointSuccess)                                                      \
            drv.name = (type)fn;                                                                   \
        else                                                                                       \
            (void)cudaGetLastError();                                                              \
    }
    SWITCH_DRIVER_FUNCS(X)
#undef X
}

static int drv_fail(CUresult e, const char *call) {
    const char *name = NULL;
    if (drv.cuGetErrorName) drv.cuGetErrorName(e, &name);
    return cchani_error(CCHAN_ERR_CUDA, where, "%s: %s (%d)", call, name ? name : "CUresult",
                        (int)e);
}

#define MC_CALL(fn, ...)                                                                           \
    do {                                                                                           \
        pthread_once(&drv_once, drv_load);                                                         \
        if (!drv.fn)                                                                               \
            return cchani_error(CCHAN_ERR_UNSUPPORTED, where,                                      \
                                "%s is not available from the CUDA driver (needs 12.1 or newer)",  \
                                #fn);                                                              \
        CUresult e_ = drv.fn(__VA_ARGS__);                                                         \
        if (e_ != CUDA_SUCCESS) return drv_fail(e_, #fn);                                          \
    } while (0)

static CUmulticastObjectProp mc_prop(int nranks, size_t bytes) {
    CUmulticastObjectProp p;
    memset(&p, 0, sizeof p);
    p.numDevices = (unsigned)nranks;
    p.size = bytes;
    p.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

/* Local checks, and the size of the multicast object for buf. */
static int mc_check(cchan_comm_t *comm, const cchan_mem_t *buf, switch_mc_t *mc) {
    CUdevice dev;
    int supported = 0;
    MC_CALL(cuDeviceGet, &dev, comm->device);
    MC_CALL(cuDeviceGetAttribute, &supported, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, dev);
    if (!supported)
        return cchani_error(CCHAN_ERR_UNSUPPORTED, where,
                            "GPU %d does not support multicast objects", comm->device);
    if (buf->kind != CCHANI_MEM_CUDA_VMM || buf->offset != 0)
        return cchani_error(CCHAN_ERR_UNSUPPORTED, where,
                            "the multicast path binds whole cuMem allocations: buf must come from "
                            "cchan_mem_alloc (or be a registered cuMem allocation at its start)");
    size_t gran = 0;
    CUmulticastObjectProp p = mc_prop(comm->nranks, buf->alloc_bytes);
    MC_CALL(cuMulticastGetGranularity, &gran, &p, CU_MULTICAST_GRANULARITY_MINIMUM);
    if (gran == 0 || buf->alloc_bytes % gran != 0)
        return cchani_error(CCHAN_ERR_UNSUPPORTED, where,
                            "buf's allocation (%zu bytes) is not a multiple of the multicast "
                            "granularity (%zu bytes)",
                            buf->alloc_bytes, gran);
    mc->bytes = buf->alloc_bytes;
    mc->device = comm->device;
    return 0;
}

/* Rank 0: creates the object and exports it as an fd. */
static int mc_create(cchan_comm_t *comm, switch_mc_t *mc, int *fd) {
    CUmemGenericAllocationHandle h;
    CUmulticastObjectProp p = mc_prop(comm->nranks, mc->bytes);
    MC_CALL(cuMulticastCreate, &h, &p);
    mc->handle = (uint64_t)h;
    MC_CALL(cuMemExportToShareableHandle, fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    return 0;
}

/* Other ranks: the object of rank 0, through a copy of its fd. */
static int mc_import(cchan_comm_t *comm, switch_mc_t *mc, int owner_fd) {
    int fd = -1;
    int r = cchani_fd_from_pid((pid_t)comm->peers[0].pid, owner_fd, &fd);
    if (r) return cchani_error_wrap(r, where, "multicast object of rank 0 (pidfd_getfd)");
    CUmemGenericAllocationHandle h;
    CUresult e = CUDA_SUCCESS;
    pthread_once(&drv_once, drv_load);
    if (!drv.cuMemImportFromShareableHandle) {
        close(fd);
        return cchani_error(CCHAN_ERR_UNSUPPORTED, where, "cuMemImportFromShareableHandle missing");
    }
    e = drv.cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (e != CUDA_SUCCESS) return drv_fail(e, "cuMemImportFromShareableHandle");
    mc->handle = (uint64_t)h;
    return 0;
}

static int mc_add_device(switch_mc_t *mc) {
    CUdevice dev;
    MC_CALL(cuDeviceGet, &dev, mc->device);
    MC_CALL(cuMulticastAddDevice, (CUmemGenericAllocationHandle)mc->handle, dev);
    mc->added = 1;
    return 0;
}

static int mc_bind(switch_mc_t *mc, void *buf_ptr) {
    CUmemGenericAllocationHandle mem;
    MC_CALL(cuMemRetainAllocationHandle, &mem, buf_ptr);
    pthread_once(&drv_once, drv_load);
    CUresult e =
        drv.cuMulticastBindMem((CUmemGenericAllocationHandle)mc->handle, 0, mem, 0, mc->bytes, 0);
    (void)drv.cuMemRelease(mem); /* the retain's reference; the allocation stays buf's */
    if (e != CUDA_SUCCESS) return drv_fail(e, "cuMulticastBindMem");
    mc->bound = 1;
    return 0;
}

static int mc_map(switch_mc_t *mc) {
    CUdeviceptr va = 0;
    MC_CALL(cuMemAddressReserve, &va, mc->bytes, 0, 0, 0);
    mc->va = (void *)(uintptr_t)va;
    MC_CALL(cuMemMap, va, mc->bytes, 0, (CUmemGenericAllocationHandle)mc->handle, 0);
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = mc->device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    MC_CALL(cuMemSetAccess, va, mc->bytes, &access, 1);
    return 0;
}

/* Releases what mc holds, in reverse order; best effort (teardown). */
static void mc_release(switch_mc_t *mc) {
    pthread_once(&drv_once, drv_load);
    if (mc->va) {
        if (drv.cuMemUnmap) (void)drv.cuMemUnmap((CUdeviceptr)(uintptr_t)mc->va, mc->bytes);
        if (drv.cuMemAddressFree)
            (void)drv.cuMemAddressFree((CUdeviceptr)(uintptr_t)mc->va, mc->bytes);
    }
    if (mc->bound && drv.cuMulticastUnbind) {
        CUdevice dev;
        if (drv.cuDeviceGet && drv.cuDeviceGet(&dev, mc->device) == CUDA_SUCCESS)
            (void)drv.cuMulticastUnbind((CUmemGenericAllocationHandle)mc->handle, dev, 0,
                                        mc->bytes);
    }
    if (mc->handle && drv.cuMemRelease)
        (void)drv.cuMemRelease((CUmemGenericAllocationHandle)mc->handle);
    memset(mc, 0, sizeof *mc);
}

typedef struct mc_offer {
    int32_t status;
    int32_t fd;
} mc_offer_t;

/* Collective. Every step ends with an agreement, so a rank that fails never leaves the others
 * waiting in a later all-gather. */
static int mc_setup(cchan_switch_t *sw, cchan_mem_t *buf) {
    cchan_comm_t *comm = sw->comm;
    switch_mc_t *mc = &sw->mc;
    int r = mc_check(comm, buf, mc);
    r = cchani_comm_agree(comm, r, "multicast: checks");
    if (r) return r;

    int fd = -1;
    if (comm->rank == 0) r = mc_create(comm, mc, &fd);
    mc_offer_t mine = {r, fd}, all[CCHAN_SWITCH_MAX_MEMBERS];
    int g = cchan_bootstrap_allgather(comm->bs, &mine, all, sizeof mine);
    if (!r && g) r = cchani_error_wrap(g, where, "multicast: all-gather of rank 0's object");
    if (!r && all[0].status)
        r = cchani_error(CCHAN_ERR_PEER, where, "rank 0 could not create the multicast object (%s)",
                         cchan_strerror(all[0].status));
    if (!r && comm->rank != 0) r = mc_import(comm, mc, all[0].fd);
    if (g) {
        if (fd >= 0) close(fd);
        return r;
    }
    r = cchani_comm_agree(comm, r, "multicast: import");
    if (fd >= 0) close(fd); /* every rank holds its own handle now (or gave up) */
    if (r) return r;

    r = cchani_comm_agree(comm, mc_add_device(mc), "multicast: add devices");
    if (!r) r = cchani_comm_agree(comm, mc_bind(mc, cchan_mem_ptr(buf)), "multicast: bind");
    if (!r) r = cchani_comm_agree(comm, mc_map(mc), "multicast: map");
    if (!r) mc->active = 1;
    return r;
}

#else /* no CUDA in this build */

static int mc_setup(cchan_switch_t *sw, cchan_mem_t *buf) {
    (void)buf;
    return cchani_comm_agree(
        sw->comm,
        cchani_error(CCHAN_ERR_UNSUPPORTED, where, "NVLink multicast needs a build with CUDA"),
        "multicast");
}
static void mc_release(switch_mc_t *mc) { memset(mc, 0, sizeof *mc); }

#endif

/* ---------------------------------------------------------------- create / destroy */

static void switch_free(cchan_switch_t *sw) {
    if (sw->mc.handle || sw->mc.va) {
        cchani_device_scope_t scope;
        if (cchani_device_enter(sw->comm, &scope) == 0) {
            mc_release(&sw->mc);
            cchani_device_leave(&scope);
        }
    }
    int me = sw->comm->rank;
    for (int r = 0; r < sw->nranks; r++)
        if (r != me && sw->peers[r]) (void)cchan_mem_destroy(sw->peers[r]);
    free(sw);
}

static int check_own(const cchan_comm_t *comm, const cchan_mem_t *mem, const char *role) {
    if (cchani_mem_comm(mem) != comm || !cchani_mem_is_local(mem))
        return cchani_error(-EINVAL, where,
                            "%s must be memory this rank registered or allocated in this "
                            "communicator",
                            role);
    return 0;
}

/* Local checks of one rank's arguments; every rank then learns whether all passed. */
static int check_args(cchan_comm_t *comm, cchan_mem_t *buf, cchan_mem_t *local, unsigned flags,
                      int *want_mc) {
    if (flags & ~CCHAN_SWITCH_MULTICAST)
        return cchani_error(-EINVAL, where, "unknown flags 0x%x", flags & ~CCHAN_SWITCH_MULTICAST);
    int r = check_own(comm, buf, "buf");
    if (!r) r = check_own(comm, local, "local");
    if (!r) r = multicast_wanted(flags, want_mc);
    if (!r && *want_mc && comm->platform != CCHAN_PLATFORM_CUDA)
        r = cchani_error(CCHAN_ERR_UNSUPPORTED, where,
                         "NVLink multicast was requested but this communicator's platform is not "
                         "CUDA");
    return r;
}

typedef struct switch_offer {
    uint64_t buf_bytes;
    int32_t want_mc;
    int32_t reserved;
} switch_offer_t;

/* Every rank must pass a buffer of the same size and make the same multicast choice. */
static int check_symmetric(cchan_comm_t *comm, uint64_t bytes, int want_mc) {
    switch_offer_t mine = {bytes, want_mc, 0}, all[CCHAN_SWITCH_MAX_MEMBERS];
    int r = cchan_bootstrap_allgather(comm->bs, &mine, all, sizeof mine);
    if (r) r = cchani_error_wrap(r, where, "all-gather of buffer sizes");
    for (int p = 0; !r && p < comm->nranks; p++) {
        if (all[p].buf_bytes != bytes)
            r = cchani_error(-EINVAL, where,
                             "buf must have the same size on every rank: rank %d has %llu bytes, "
                             "rank %d %llu",
                             p, (unsigned long long)all[p].buf_bytes, comm->rank,
                             (unsigned long long)bytes);
        else if (all[p].want_mc != want_mc)
            r = cchani_error(-EINVAL, where,
                             "every rank must make the same multicast choice: rank %d %s, rank %d "
                             "%s",
                             p, all[p].want_mc ? "opted in" : "did not", comm->rank,
                             want_mc ? "did" : "did not");
    }
    return r;
}

int cchan_switch_channel_create(cchan_comm_t *comm, cchan_mem_t *buf, cchan_mem_t *local,
                                unsigned flags, cchan_switch_channel_t *out,
                                cchan_switch_t **owner) {
    CCHANI_CHECK_ARG(comm != NULL && buf != NULL && out != NULL && owner != NULL, where);
    CCHANI_CHECK_ABORT(comm, where);
    if (!local) local = buf;
    /* The same on every rank, so every rank returns here without a collective step. */
    if (comm->nranks > CCHAN_SWITCH_MAX_MEMBERS)
        return cchani_error(CCHAN_ERR_RANGE, where,
                            "%d ranks: a switch channel has at most %d members "
                            "(CCHAN_SWITCH_MAX_MEMBERS)",
                            comm->nranks, CCHAN_SWITCH_MAX_MEMBERS);
    int want_mc = 0;
    int r = check_args(comm, buf, local, flags, &want_mc);
    r = cchani_comm_agree(comm, r, where);
    if (r) return r;
    r = check_symmetric(comm, cchan_mem_size(buf), want_mc);
    if (r) return r; /* every rank saw the same offers, so every rank fails alike */

    cchan_switch_t *sw = (cchan_switch_t *)calloc(1, sizeof *sw);
    r = sw ? 0 : cchani_error(-ENOMEM, where, "switch object");
    r = cchani_comm_agree(comm, r, where);
    if (r) {
        free(sw);
        return r;
    }
    sw->comm = comm;
    sw->nranks = comm->nranks;
    sw->path = CCHAN_SWITCH_PATH_PORTABLE;

    cchan_mem_t *peers[CCHAN_SWITCH_MAX_MEMBERS] = {0};
    r = cchan_mem_exchange(comm, buf, peers);
    if (r) {
        free(sw);
        return cchani_error_wrap(r, where, "mapping every rank's buffer");
    }
    memcpy(sw->peers, peers, sizeof peers);
    for (int p = 0; !r && p < comm->nranks; p++)
        if (!cchan_mem_ptr(peers[p]))
            r = cchani_error(CCHAN_ERR_UNSUPPORTED, where,
                             "rank %d's buffer cannot be mapped here (another host): a switch "
                             "channel needs every member's memory load/store reachable",
                             p);
    r = cchani_comm_agree(comm, r, where);
    if (!r && want_mc) {
        cchani_device_scope_t scope;
        int d = cchani_device_enter(comm, &scope);
        r = cchani_comm_agree(comm, d, "multicast: device");
        if (!r) {
            r = mc_setup(sw, buf);
            cchani_device_leave(&scope);
        }
        if (!r) sw->path = CCHAN_SWITCH_PATH_MULTICAST;
    }
    if (r) {
        switch_free(sw);
        return r;
    }

    cchan_switch_channel_t ch;
    memset(&ch, 0, sizeof ch);
    for (int p = 0; p < comm->nranks; p++) ch.member[p] = (uint8_t *)cchan_mem_ptr(peers[p]);
    ch.mc = sw->mc.active ? (uint8_t *)sw->mc.va : NULL;
    ch.local = (uint8_t *)cchan_mem_ptr(local);
    ch.buf_bytes = cchan_mem_size(buf);
    ch.local_bytes = cchan_mem_size(local);
    ch.nmembers = (uint32_t)comm->nranks;
    ch.rank = (uint32_t)comm->rank;
    ch.path = sw->path;
    CCHANI_INFO(CCHANI_SUB_MEM, "switch channel: %d members, %llu-byte buffers, %s path",
                comm->nranks, (unsigned long long)ch.buf_bytes, cchan_switch_path_name(ch.path));
    *out = ch;
    *owner = sw;
    return 0;
}

int cchan_switch_destroy(cchan_switch_t *sw) {
    CCHANI_CHECK_ARG(sw != NULL, "cchan_switch_destroy");
    cchan_comm_t *comm = sw->comm;
    switch_free(sw);
    int r = cchan_bootstrap_barrier(comm->bs);
    if (r) return cchani_error_wrap(r, "cchan_switch_destroy", "barrier after unmapping");
    return 0;
}
