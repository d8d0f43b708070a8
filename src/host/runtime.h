/* cchan host runtime: the communicator and the memory helpers that src/host and src/proxy share
 * (not installed). */
#ifndef CCHAN_SRC_HOST_RUNTIME_H
#define CCHAN_SRC_HOST_RUNTIME_H

#include "internal.h"

/* What every rank learns about every other at cchan_comm_create (all-gathered). */
typedef struct cchani_peer_info {
    int32_t pid;
    int32_t device;    /* GPU ordinal, -1 on the host platform */
    uint32_t platform; /* cchan_platform_t */
    uint32_t version;  /* CCHAN_VERSION_CODE */
    uint64_t host_hash;
    char hostname[64];
} cchani_peer_info_t;

struct cchan_comm {
    cchan_bootstrap_t *bs;
    int rank;
    int nranks;
    int local_rank;
    cchan_platform_t platform;
    int device;          /* GPU ordinal, -1 on the host platform */
    uint64_t timeout_ms; /* device-wait deadline, 0 = none */
    cchan_diag_t *diag_host; /* the device-failure record, host view (host-mapped memory) */
    cchan_diag_t *diag_dev;  /* same record, device view */
    cchani_peer_info_t *peers; /* nranks entries */
    uint32_t next_object_id;   /* numbering for wait diagnostics */
};

/* ---- memory helpers (gpu.c). On the host platform "device memory" is ordinary process memory and
 * host and device views are the same pointer. All allocations are zero-filled. */

/* Memory of the comm's device (cudaMalloc on CUDA). */
CCHANI_HIDDEN int cchani_dev_alloc(cchan_comm_t *comm, size_t bytes, void **out);
CCHANI_HIDDEN int cchani_dev_free(cchan_comm_t *comm, void *p);
/* Pinned host memory mapped into the comm's device (cudaHostAlloc mapped|portable on CUDA). */
CCHANI_HIDDEN int cchani_host_mapped_alloc(cchan_comm_t *comm, size_t bytes, void **host, void **dev);
CCHANI_HIDDEN int cchani_host_mapped_free(cchan_comm_t *comm, void *host);
/* Synchronous copy between any host/device pointers of this comm's device. */
CCHANI_HIDDEN int cchani_memcpy(cchan_comm_t *comm, void *dst, const void *src, size_t bytes);
/* Makes the comm's GPU current for the calling thread (no-op on the host platform). */
CCHANI_HIDDEN int cchani_set_device(cchan_comm_t *comm);
/* Next id for wait diagnostics (channels, semaphores). */
CCHANI_HIDDEN uint32_t cchani_comm_next_id(cchan_comm_t *comm);

#endif /* CCHAN_SRC_HOST_RUNTIME_H */
