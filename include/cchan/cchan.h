/* cchan host API: bootstrap, communicator, memory registration, semaphores, channels, proxies.
 *
 * Conventions (docs/architecture.md, host contract):
 *   - every call returns int: 0 on success, a negative status (status.h) on failure;
 *   - output arguments come last and are written only on success;
 *   - on failure, cchan_last_error() holds a message for the calling thread that says what failed
 *     and why (call, peer, errno or CUDA error);
 *   - the library never exits, aborts or prints, except logging enabled with CCHAN_DEBUG.
 *
 * Typical program:
 *   cchan_bootstrap_create_from_env(&bs);          // or cchan_bootstrap_create(&id, rank, n, &bs)
 *   cchan_comm_create(bs, NULL, &comm);
 *   cchan_mem_alloc(comm, bytes, 0, &buf);          // or cchan_mem_register(comm, ptr, bytes, 0, &buf)
 *   cchan_mem_exchange(comm, buf, peers);           // peers[r]: rank r's buffer, mapped here
 *   cchan_sem_set_create(comm, 1, 0, &sems);
 *   cchan_memory_channel_init(comm, sems, peer, 0, peers[peer], buf, buf, &ch);
 *   ... copy `ch` to the GPU, launch kernels using cchan/device.h ...
 *   cchan_comm_check_device(comm);                  // after a failed kernel: names a device timeout
 */
#ifndef CCHAN_CCHAN_H
#define CCHAN_CCHAN_H

#include <stddef.h>
#include <stdint.h>

#include "cchan/device.h"
#include "cchan/status.h"
#include "cchan/switch_channel.h"

CCHAN_EXTERN_C_BEGIN

#if defined(__GNUC__) || defined(__clang__)
#define CCHAN_API __attribute__((visibility("default")))
#else
#define CCHAN_API
#endif

/* ------------------------------------------------------------------ version, errors, logging */

#define CCHAN_VERSION_MAJOR 0
#define CCHAN_VERSION_MINOR 1
#define CCHAN_VERSION_PATCH 0
#define CCHAN_VERSION_CODE (CCHAN_VERSION_MAJOR * 10000 + CCHAN_VERSION_MINOR * 100 + CCHAN_VERSION_PATCH)

/* "0.1.0 (cuda, hip, ibverbs: dlopen)" style string describing this build. */
CCHAN_API const char *cchan_version(void);
CCHAN_API int cchan_version_code(void);

/* Static description of a status code ("invalid argument", "peer closed the connection", ...).
 * Never NULL. */
CCHAN_API const char *cchan_strerror(int status);

/* The calling thread's last error message with context, or "" if none. Valid until the thread's next
 * failing cchan call. */
CCHAN_API const char *cchan_last_error(void);

/* Whether an optional system library loads on this machine: "ibverbs" (libibverbs.so.1, the ib
 * transport) or "nvml" (libnvidia-ml.so.1). 1 = yes, 0 = no (why is logged at INFO), -EINVAL for
 * another name. cchan works without either; CCHAN_DEBUG=INFO lists both at cchan_comm_create. */
CCHAN_API int cchan_optional_lib_available(const char *name);

/* Returns the default device-wait deadline in ms (CCHAN_TIMEOUT_MS, 0 = none). */
CCHAN_API uint64_t cchan_env_timeout_ms(void);

/* ------------------------------------------------------------------ bootstrap
 *
 * A TCP bootstrap with rank 0 as root. The unique id (NCCL-style) is created on one process and
 * distributed by the application; or cchan_bootstrap_create_from_env() reads torchrun, Open MPI,
 * MPICH/PMI, Slurm or cchan-run variables. Every blocking step has a timeout
 * (CCHAN_BOOTSTRAP_TIMEOUT_MS, default 30000); a dead peer or a version mismatch fails every rank.
 * Collectives run through rank 0, which therefore learns of (and reports to every rank) a failure of
 * any rank. One message or all-gather contribution is at most 64 MiB (CCHAN_ERR_RANGE beyond).
 * A bootstrap is used by one thread at a time. From the torchrun environment the root listens on
 * MASTER_PORT + 1 (torchrun's own store already holds MASTER_PORT).
 */
typedef struct cchan_unique_id {
    uint8_t internal[128];
} cchan_unique_id_t;

typedef struct cchan_bootstrap cchan_bootstrap_t;

/* Chooses the root address (CCHAN_BOOTSTRAP_ADDR, else the first non-loopback IPv4, else 127.0.0.1)
 * and port (CCHAN_BOOTSTRAP_PORT, else a free port) and a random session key. */
CCHAN_API int cchan_get_unique_id(cchan_unique_id_t *id);

/* Collective over `nranks` processes; rank 0 listens at the id's address. */
CCHAN_API int cchan_bootstrap_create(const cchan_unique_id_t *id, int rank, int nranks,
                                     cchan_bootstrap_t **out);

/* Rank, size and root from the environment (see docs/environment.md). */
CCHAN_API int cchan_bootstrap_create_from_env(cchan_bootstrap_t **out);

/* Application-supplied all-gather: recv[r * bytes .. +bytes) = rank r's send. Must be collective and
 * return 0 on success. cchan_bootstrap_create_custom is itself collective (it all-gathers hostnames
 * through fn to learn local ranks). With it, cchan_bootstrap_send/recv return CCHAN_ERR_UNSUPPORTED; everything
 * cchan itself needs is built on allgather and barrier. */
typedef int (*cchan_allgather_fn)(void *ctx, const void *send, void *recv, size_t bytes);
CCHAN_API int cchan_bootstrap_create_custom(int rank, int nranks, cchan_allgather_fn fn, void *ctx,
                                            cchan_bootstrap_t **out);

CCHAN_API int cchan_bootstrap_rank(const cchan_bootstrap_t *bs);
CCHAN_API int cchan_bootstrap_size(const cchan_bootstrap_t *bs);
/* Local rank and local size (processes on this host), from the environment or derived by hostname. */
CCHAN_API int cchan_bootstrap_local_rank(const cchan_bootstrap_t *bs);
CCHAN_API int cchan_bootstrap_local_size(const cchan_bootstrap_t *bs);

/* recv holds size * bytes; this rank's contribution is `send` (bytes). */
CCHAN_API int cchan_bootstrap_allgather(cchan_bootstrap_t *bs, const void *send, void *recv,
                                        size_t bytes);
CCHAN_API int cchan_bootstrap_barrier(cchan_bootstrap_t *bs);
/* Tagged point-to-point; recv must name the exact size that was sent (else CCHAN_ERR_PROTOCOL). */
CCHAN_API int cchan_bootstrap_send(cchan_bootstrap_t *bs, int peer, int tag, const void *buf,
                                   size_t bytes);
CCHAN_API int cchan_bootstrap_recv(cchan_bootstrap_t *bs, int peer, int tag, void *buf,
                                   size_t bytes);
CCHAN_API int cchan_bootstrap_destroy(cchan_bootstrap_t *bs);

/* ------------------------------------------------------------------ communicator */

/* Where a communicator's "device" memory and kernels live. (Not to be confused with the compile-time
 * CCHAN_BACKEND_* macros of arch.h, which say how device code in a translation unit is compiled.) */
typedef enum cchan_platform {
    CCHAN_PLATFORM_AUTO = 0, /* CUDA when built with it and a GPU is visible, else host */
    CCHAN_PLATFORM_HOST = 1,
    CCHAN_PLATFORM_CUDA = 2,
    CCHAN_PLATFORM_HIP = 3
} cchan_platform_t;

#define CCHAN_COMM_CONFIG_MAGIC 0x63636831u /* "cch1" */

/* Config structs start with size/magic/version so they can grow. Use CCHAN_COMM_CONFIG_INIT. */
typedef struct cchan_comm_config {
    size_t size;
    uint32_t magic;
    uint32_t version;
    cchan_platform_t platform;
    int device;          /* GPU ordinal; -1: the local rank modulo the number of GPUs */
    uint64_t timeout_ms; /* device-wait deadline; UINT64_MAX: take CCHAN_TIMEOUT_MS */
} cchan_comm_config_t;

#define CCHAN_COMM_CONFIG_INIT                                                                     \
    {sizeof(cchan_comm_config_t), CCHAN_COMM_CONFIG_MAGIC, CCHAN_VERSION_CODE, CCHAN_PLATFORM_AUTO,\
     -1, UINT64_MAX}

typedef struct cchan_comm cchan_comm_t;

/* Takes ownership of bs (destroyed with the communicator). cfg may be NULL for defaults. */
CCHAN_API int cchan_comm_create(cchan_bootstrap_t *bs, const cchan_comm_config_t *cfg,
                                cchan_comm_t **out);
CCHAN_API int cchan_comm_destroy(cchan_comm_t *comm);
/* Queries: a NULL comm gives -EINVAL (cchan_comm_platform: CCHAN_PLATFORM_AUTO,
 * cchan_comm_bootstrap: NULL, cchan_comm_wait_ctl: all zero) and a last error naming it. */
CCHAN_API int cchan_comm_rank(const cchan_comm_t *comm);
CCHAN_API int cchan_comm_size(const cchan_comm_t *comm);
CCHAN_API cchan_platform_t cchan_comm_platform(const cchan_comm_t *comm);
CCHAN_API int cchan_comm_device(const cchan_comm_t *comm);
CCHAN_API cchan_bootstrap_t *cchan_comm_bootstrap(cchan_comm_t *comm);
/* Wait controls for device handles: the comm's diagnostic record and deadline. */
CCHAN_API cchan_wait_ctl_t cchan_comm_wait_ctl(const cchan_comm_t *comm, int peer, uint32_t id);
CCHAN_API int cchan_comm_set_timeout_ms(cchan_comm_t *comm, uint64_t timeout_ms);
/* 0 if no device-side wait has expired or been aborted; otherwise CCHAN_ERR_DEVICE_TIMEOUT,
 * CCHAN_ERR_PEER_DEAD or CCHAN_ERR_ABORTED with cchan_last_error() naming the wait (kind, rank,
 * peer, channel id, expected and observed values, time waited) and, for an abort, its cause. */
CCHAN_API int cchan_comm_check_device(cchan_comm_t *comm);

/* Communicator-wide abort. Every communicator has a watcher thread that serves its bootstrap while
 * no call does; when a rank dies (its connections end without a clean destroy) or any rank calls
 * cchan_comm_abort(), every rank learns it within about a second, and then every device-side and
 * host-side wait of the communicator (semaphore, channel, LL packet, FIFO, flush, barrier waits,
 * bootstrap calls) ends, with or without a deadline: kernels trap on a GPU, return
 * CCHAN_ERR_PEER_DEAD / CCHAN_ERR_ABORTED on the host backend, and cchan_comm_check_device() names
 * the wait and the cause ("peer 2 died").
 *
 * cchan_comm_abort: aborts this communicator on every rank. Any thread, any time, also while other
 * threads wait; returns at once (0, or -EINVAL). The communicator is unusable afterwards except for
 * the queries and cchan_comm_destroy().
 * cchan_comm_get_async_error: like ncclCommGetAsyncError. Any thread. Returns 0 with *status = 0
 * while the communicator is healthy, else *status = CCHAN_ERR_PEER_DEAD or CCHAN_ERR_ABORTED and
 * cchan_last_error() saying which rank and why (the text as seen by this rank). */
CCHAN_API int cchan_comm_abort(cchan_comm_t *comm);
CCHAN_API int cchan_comm_get_async_error(cchan_comm_t *comm, int *status);
/* For libraries over cchan: 0 while the communicator is usable; once it was aborted (on this rank
 * the moment cchan_comm_abort() returns, elsewhere when the watcher learns it), its status
 * (CCHAN_ERR_ABORTED or CCHAN_ERR_PEER_DEAD) with cchan_last_error() "<where>: rank R: the
 * communicator was aborted: <cause>". Every call of cchan and its libraries that works on a
 * communicator starts with this check (one atomic load), so none succeeds after an abort; the
 * destroy calls and the queries do not. -EINVAL for a NULL comm. */
CCHAN_API int cchan_comm_check(cchan_comm_t *comm, const char *where);

/* Collective agreement on a local step, for libraries whose create calls check arguments or
 * allocate before a collective step: every rank passes its status (0 or negative) and, when it
 * failed, the reason (NULL: cchan_last_error()). Returns 0 when every rank passed 0. A rank that
 * failed gets its own status back; every other rank gets CCHAN_ERR_PEER with cchan_last_error()
 * "<what>: rank R failed: <rank R's reason>", at once rather than after a bootstrap timeout. Costs
 * one all-gather of 4 bytes per rank, and a second one with the reasons only when a rank failed. */
CCHAN_API int cchan_comm_agree(cchan_comm_t *comm, int status, const char *what,
                               const char *reason);

/* ------------------------------------------------------------------ memory */

/* cchan_mem_alloc flags */
#define CCHAN_MEM_HOST 0x1u /* host memory (on the host backend all memory is host memory) */

typedef struct cchan_mem cchan_mem_t;

/* Serializable description of a registration (fixed size, versioned; see docs/memory.md). */
#define CCHAN_MEM_DESC_BYTES 256
typedef struct cchan_mem_desc {
    uint8_t bytes[CCHAN_MEM_DESC_BYTES];
} cchan_mem_desc_t;

/* Memory ready for every transport: cuMem with a POSIX-fd handle (2 MiB granularity) on CUDA,
 * a shared memfd mapping on the host backend. Zero-filled. */
CCHAN_API int cchan_mem_alloc(cchan_comm_t *comm, size_t bytes, unsigned flags, cchan_mem_t **out);
/* Registers memory the caller allocated (cudaMalloc, cuMem, host memory). The caller keeps
 * ownership; the memory must outlive the registration. On the host backend only memory from
 * cchan_mem_alloc can be shared with other processes. */
CCHAN_API int cchan_mem_register(cchan_comm_t *comm, void *ptr, size_t bytes, unsigned flags,
                                 cchan_mem_t **out);
/* Queries: a NULL mem gives NULL, 0 or -EINVAL and a last error naming it. */
CCHAN_API void *cchan_mem_ptr(const cchan_mem_t *mem);
CCHAN_API size_t cchan_mem_size(const cchan_mem_t *mem);
CCHAN_API int cchan_mem_rank(const cchan_mem_t *mem); /* owner rank */
CCHAN_API int cchan_mem_export(const cchan_mem_t *mem, cchan_mem_desc_t *out);
/* Validates desc (magic, version, size, bounds) and maps the memory here. */
CCHAN_API int cchan_mem_import(cchan_comm_t *comm, const cchan_mem_desc_t *desc, cchan_mem_t **out);
/* Collective: every rank passes its local registration; peers[r] receives rank r's memory mapped
 * here (peers[own rank] = local). peers has cchan_comm_size() entries; destroy each imported one. */
CCHAN_API int cchan_mem_exchange(cchan_comm_t *comm, cchan_mem_t *local, cchan_mem_t **peers);
/* Releases the registration, mappings and fds (and the memory, for cchan_mem_alloc). */
CCHAN_API int cchan_mem_destroy(cchan_mem_t *mem);

/* ------------------------------------------------------------------ semaphores */

/* cchan_sem_set_create flags */
#define CCHAN_SEM_HOST_MAPPED 0x1u /* inbound counters in host-pinned memory (CPU/proxy writers) */

typedef struct cchan_sem_set cchan_sem_set_t;

/* Collective: `count` semaphores between this rank and each peer, in each direction. */
CCHAN_API int cchan_sem_set_create(cchan_comm_t *comm, int count, unsigned flags,
                                   cchan_sem_set_t **out);
/* Device handle of semaphore `index` with `peer` (signal raises the peer's, wait reads ours). */
CCHAN_API int cchan_sem_set_get(cchan_sem_set_t *set, int peer, int index, cchan_semaphore_t *out);
/* Host views for proxies: this rank's inbound counter from peer, and peer's inbound counter for
 * this rank, mapped here. */
CCHAN_API uint64_t *cchan_sem_set_inbound(cchan_sem_set_t *set, int peer, int index);
CCHAN_API uint64_t *cchan_sem_set_remote_inbound(cchan_sem_set_t *set, int peer, int index);
CCHAN_API int cchan_sem_set_destroy(cchan_sem_set_t *set);

/* ------------------------------------------------------------------ memory channel */

/* Builds a memory channel to `peer` (local call, no communication): semaphore `sem_index` of sems,
 * writes go to `remote` (peer's memory, imported), reads from `local`, packets arrive in `recv`
 * (may be NULL: read_packets then unusable). */
CCHAN_API int cchan_memory_channel_init(cchan_comm_t *comm, cchan_sem_set_t *sems, int peer,
                                        int sem_index, const cchan_mem_t *remote,
                                        const cchan_mem_t *local, const cchan_mem_t *recv,
                                        cchan_memory_channel_t *out);

/* ------------------------------------------------------------------ grid barrier */

/* Allocates a zeroed device counter for a grid barrier of nblocks participants. */
CCHAN_API int cchan_grid_barrier_create(cchan_comm_t *comm, uint32_t nblocks,
                                        cchan_grid_barrier_t *out);
CCHAN_API int cchan_grid_barrier_destroy(cchan_comm_t *comm, cchan_grid_barrier_t *b);

/* ------------------------------------------------------------------ proxy and port channels */

/* AUTO: dma between GPUs, host on the host backend; for a peer on another host (its memory is an
 * unmapped import), ib where this host has an RDMA device, else tcp. IB (RDMA: InfiniBand, RoCE;
 * libibverbs loaded at run time) and TCP reach peers on other hosts (docs/transports.md); with
 * them, channel creation is pairwise: `peer` creates its channel to this rank with the same
 * transport and sem_index at the same time (they connect through the bootstrap), so create such
 * channels in an order every rank agrees on (docs/multinode.md). Tuning: CCHAN_IB_HCA,
 * CCHAN_IB_GID_INDEX, CCHAN_IB_QPS, CCHAN_TCP_ADDR, ... (docs/environment.md) */
typedef enum cchan_transport {
    CCHAN_TRANSPORT_AUTO = 0,
    CCHAN_TRANSPORT_HOST = 1,
    CCHAN_TRANSPORT_DMA = 2,
    CCHAN_TRANSPORT_IB = 3,
    CCHAN_TRANSPORT_TCP = 4
} cchan_transport_t;

#define CCHAN_PROXY_CONFIG_MAGIC 0x63637031u /* "ccp1" */
typedef struct cchan_proxy_config {
    size_t size;
    uint32_t magic;
    uint32_t version;
    uint32_t fifo_slots; /* power of two >= 2; default 512 */
    int numa_node;       /* -1: the GPU's node (libnuma when present), -2: do not pin */
} cchan_proxy_config_t;
#define CCHAN_PROXY_CONFIG_INIT                                                                    \
    {sizeof(cchan_proxy_config_t), CCHAN_PROXY_CONFIG_MAGIC, CCHAN_VERSION_CODE, 512, -1}

typedef struct cchan_proxy cchan_proxy_t;

/* A proxy service: one FIFO and one polling thread (create more for parallelism). */
CCHAN_API int cchan_proxy_create(cchan_comm_t *comm, const cchan_proxy_config_t *cfg,
                                 cchan_proxy_t **out);
CCHAN_API int cchan_proxy_start(cchan_proxy_t *proxy);
/* Stops the thread. Work already in the FIFO is drained until timeout_ms passes; then
 * CCHAN_ERR_TIMEOUT with the outstanding requests named in cchan_last_error(). No thread is left
 * running either way. */
CCHAN_API int cchan_proxy_stop(cchan_proxy_t *proxy, uint64_t timeout_ms);
/* 0 while every request the proxy took since it started was performed; else the first failure's
 * status (e.g. CCHAN_ERR_RANGE) with cchan_last_error() naming the channel, the request and the
 * number of failures. Any thread, while the proxy runs; cchan_proxy_stop reports and forgets them.
 * A failed request also makes the next flush of its channel fail (port_channel.h). */
CCHAN_API int cchan_proxy_get_error(cchan_proxy_t *proxy);
CCHAN_API int cchan_proxy_destroy(cchan_proxy_t *proxy);

/* A port channel to `peer` (local call, no communication) whose puts copy from `src` (local) into
 * `dst` (peer's memory, imported here) and whose signals raise the peer's semaphore `sem_index` of
 * sems (a CCHAN_SEM_HOST_MAPPED set); served by `proxy`. At most 4096 channels per proxy. Channels
 * may be added while the proxy runs. */
CCHAN_API int cchan_port_channel_create(cchan_proxy_t *proxy, cchan_transport_t transport,
                                        cchan_sem_set_t *sems, int peer, int sem_index,
                                        const cchan_mem_t *dst, const cchan_mem_t *src,
                                        cchan_port_channel_t *out);
/* What moves `channel`'s puts, for logs and tests: "dma direct" (a copy engine, GPU to GPU or to
 * host memory), "dma staged (same GPU)" (source and destination on this very GPU, as for ranks
 * sharing it under MPS: each put goes through pinned host memory, docs/port_channel.md), "host",
 * "tcp" or "ib". NULL when `channel` is not one of `proxy`'s. The CCHAN_DEBUG=INFO line of each
 * new channel says the same. */
CCHAN_API const char *cchan_port_channel_path(cchan_proxy_t *proxy,
                                              const cchan_port_channel_t *channel);

/* ------------------------------------------------------------------ switch channel
 *
 * A switch channel reduces and broadcasts over one symmetric buffer of every rank of the
 * communicator (switch_channel.h has the device calls, docs/switch_channel.md the semantics). The
 * portable path maps every rank's buffer into every rank; the multicast path (NVLink SHARP) is used
 * only when asked for explicitly and never where NCCL_NVLS_ENABLE=0 is set. */

/* cchan_switch_channel_create flags */
#define CCHAN_SWITCH_MULTICAST 0x1u /* opt in to NVLink SHARP multicast (also: CCHAN_NVLS=1) */

typedef struct cchan_switch cchan_switch_t;

/* Collective over every rank of comm (at most CCHAN_SWITCH_MAX_MEMBERS): `buf` is this rank's
 * registered buffer, the same size on every rank; `local` (NULL: buf) is this rank's source and
 * destination buffer. Fills the device handle `out` and the owner of what the channel maps. Without
 * the opt-in the path is CCHAN_SWITCH_PATH_PORTABLE; with it, multicast or an error saying why not
 * (never a silent fallback). */
CCHAN_API int cchan_switch_channel_create(cchan_comm_t *comm, cchan_mem_t *buf, cchan_mem_t *local,
                                          unsigned flags, cchan_switch_channel_t *out,
                                          cchan_switch_t **owner);
/* Collective: releases the mappings of every member's buffer (and the multicast object), then waits
 * for every rank, so the buffers may be destroyed afterwards. */
CCHAN_API int cchan_switch_destroy(cchan_switch_t *owner);
/* "portable", "multicast", or "unknown". */
CCHAN_API const char *cchan_switch_path_name(uint32_t path);

CCHAN_EXTERN_C_END

#endif /* CCHAN_CCHAN_H */
