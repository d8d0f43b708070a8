/* cchan host runtime: the communicator and the memory helpers that src/host and src/proxy share
 * (not installed). */
#ifndef CCHAN_SRC_HOST_RUNTIME_H
#define CCHAN_SRC_HOST_RUNTIME_H

#include <pthread.h>

#include "internal.h"

/* What every rank learns about every other at cchan_comm_create (all-gathered). */
typedef struct cchani_peer_info {
    int32_t pid;
    int32_t device;    /* GPU ordinal, -1 on the host platform */
    uint32_t platform; /* cchan_platform_t */
    uint32_t version;  /* CCHAN_VERSION_CODE */
    uint64_t host_hash;
    char hostname[64];
    int32_t status;    /* 0, or why this rank failed to set up (then every rank fails) */
    uint32_t reserved;
    uint64_t session;  /* rank 0's value names the communicator (fd-passing socket names) */
    uint8_t gpu_uuid[16]; /* the GPU's UUID (cchani_gpu_device_uuid); zero on the host platform */
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
    uint64_t session;          /* random, equal on every rank (rank 0's) */
    uint32_t exchange_seq;     /* collective cchan_mem_exchange calls so far (equal on every rank) */
    uint32_t live_objects;     /* registrations, semaphore sets, barriers not yet destroyed */
    /* Abort (comm.c): a watcher thread serves the bootstrap while no call does, and when a peer
     * dies or any rank aborts, writes the status into diag_host->abort so that every wait ends. */
    pthread_t watcher;
    int watching;
    int watch_stop;     /* atomic */
    int abort_request;  /* atomic: cchan_comm_abort() on this rank, for the watcher to send */
    int async_error;    /* atomic: 0, or the status every wait of this comm ends with */
    pthread_mutex_t async_lock; /* guards async_why */
    char async_why[1024];
};

/* Objects that point at the comm count themselves here; cchan_comm_destroy refuses (-EBUSY) while
 * any is alive instead of leaving them dangling. */
CCHANI_HIDDEN void cchani_comm_hold(cchan_comm_t *comm);
CCHANI_HIDDEN void cchani_comm_release(cchan_comm_t *comm);

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
/* Whether `rank` runs on this rank's very GPU (itself, or a rank sharing the GPU under MPS):
 * decided by the GPU UUIDs all-gathered at create, never by device ordinals, which differ between
 * processes with different CUDA_VISIBLE_DEVICES and which the runtime reports as the importing
 * GPU's for memory opened with cudaIpcOpenMemHandle. 0 on the host platform. */
CCHANI_HIDDEN int cchani_comm_same_gpu(const cchan_comm_t *comm, int rank);
/* Next id for wait diagnostics (channels, semaphores). */
CCHANI_HIDDEN uint32_t cchani_comm_next_id(cchan_comm_t *comm);
/* Collective: all-gathers `status` so that every rank learns whether every rank succeeded at `what`.
 * Returns 0 if all did; else this rank's own status (its last error intact), or an error naming the
 * first rank that failed. Call it after local steps that may fail and before a collective step, so
 * a rank that failed never leaves its peers waiting. */
CCHANI_HIDDEN int cchani_comm_agree(cchan_comm_t *comm, int status, const char *what);
/* The verdict of an all-gather in which every rank contributed a status (an int32 at status_offset
 * of each stride-byte record of table; `mine` is this rank's). 0 when every status is 0. Otherwise
 * the ranks all-gather their messages (one more collective round, taken by every rank or by none):
 * this rank returns its own status with its message intact, the others CCHAN_ERR_PEER with a
 * message "<where>: rank R failed to <step>: <rank R's own message>" (step may be NULL). */
CCHANI_HIDDEN int cchani_comm_verdict(cchan_comm_t *comm, int mine, const void *table,
                                      size_t stride, size_t status_offset, const char *where,
                                      const char *step);
/* 0 while the communicator is healthy; once it was aborted (cchan_comm_abort on any rank, a dead
 * peer, a lasting bootstrap failure), the abort's status with a message "<where>: rank R: <cause>".
 * Every call that works on the communicator starts with it: a wait satisfied at once never reads
 * the abort word, so without it calls would go on succeeding. */
CCHANI_HIDDEN int cchani_comm_check_abort(cchan_comm_t *comm, const char *where);
#define CCHANI_CHECK_ABORT(comm, where)                                                            \
    do {                                                                                           \
        int abort_status_ = cchani_comm_check_abort((comm), (where));                              \
        if (abort_status_) return abort_status_;                                                   \
    } while (0)
/* 64 random bits (getrandom), for session ids and allocation keys. */
CCHANI_HIDDEN uint64_t cchani_random_u64(void);
/* First of n consecutive ids (a semaphore set numbers its semaphores with them). */
CCHANI_HIDDEN uint32_t cchani_comm_reserve_ids(cchan_comm_t *comm, uint32_t n);

/* Makes the comm's GPU current for one API call and restores the caller's device afterwards, so
 * cchan calls do not change the application's current device (no-op on the host platform). */
typedef struct cchani_device_scope {
    int saved; /* the caller's device, -1 when nothing is to be restored */
} cchani_device_scope_t;
CCHANI_HIDDEN int cchani_device_enter(cchan_comm_t *comm, cchani_device_scope_t *scope);
CCHANI_HIDDEN void cchani_device_leave(cchani_device_scope_t *scope);

/* ---- semaphore sets (sem.c) */
CCHANI_HIDDEN cchan_comm_t *cchani_sem_set_comm(const cchan_sem_set_t *set);
CCHANI_HIDDEN unsigned cchani_sem_set_flags(const cchan_sem_set_t *set);
CCHANI_HIDDEN int cchani_sem_set_count(const cchan_sem_set_t *set);
/* Rank `rank`'s inbound counters as this rank sees them: slot (p * count + i) is the counter that
 * rank p's signals on semaphore i raise. Its own for rank == this rank. */
CCHANI_HIDDEN const cchan_mem_t *cchani_sem_set_area(const cchan_sem_set_t *set, int rank);

/* ---- memory registrations (mem.c) */

/* Host view of a registration (host platform, host-mapped memory), or NULL for device memory. */
CCHANI_HIDDEN void *cchani_mem_host_ptr(const cchan_mem_t *mem);
/* The communicator a registration or import belongs to. */
CCHANI_HIDDEN cchan_comm_t *cchani_mem_comm(const cchan_mem_t *mem);
/* Nonzero for memory registered or allocated by this rank (not an import of a peer's memory). */
CCHANI_HIDDEN int cchani_mem_is_local(const cchan_mem_t *mem);

#endif /* CCHAN_SRC_HOST_RUNTIME_H */
