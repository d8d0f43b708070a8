/* cchan memory: allocation, registration, export and import of one registration, destroy.
 * docs/memory.md describes the kinds of memory, the descriptor and the lifetimes. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdpass.h"
#include "gpu.h"
#include "mem.h"

static int on_gpu(const cchan_comm_t *comm) { return comm->platform == CCHAN_PLATFORM_CUDA; }

/* ---------------------------------------------------------------- registry
 * Exportable registrations of this process, so that an import of memory this very process owns
 * (two communicators, e.g. one per GPU, in one process) becomes a view of it: cudaIpcOpenMemHandle
 * refuses handles of its own process, and a view needs no second mapping. */

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static cchan_mem_t *registry;

static void registry_add(cchan_mem_t *m) {
    pthread_mutex_lock(&registry_lock);
    m->next = registry;
    registry = m;
    pthread_mutex_unlock(&registry_lock);
}

static void registry_remove_locked(cchan_mem_t *m) {
    for (cchan_mem_t **p = &registry; *p; p = &(*p)->next) {
        if (*p == m) {
            *p = m->next;
            m->next = NULL;
            return;
        }
    }
}

/* ---------------------------------------------------------------- objects */

static cchan_mem_t *mem_new(cchan_comm_t *comm, int owner_rank) {
    cchan_mem_t *m = (cchan_mem_t *)calloc(1, sizeof *m);
    if (!m) return NULL;
    m->comm = comm;
    m->kind = CCHANI_MEM_LOCAL;
    m->owner_rank = owner_rank;
    m->device = -1;
    m->refs = 1;
    m->res.fd = -1;
    m->res.gpu_device = on_gpu(comm) ? comm->device : -1;
    return m;
}

/* Releases without the communicator: a view may outlive the owner's comm. */
static int release_res(cchani_mem_res_t *res) {
    int first = 0, saved = -1;
#define CCHANI_KEEP_FIRST(call)                                                                    \
    do {                                                                                           \
        int r_ = (call);                                                                           \
        if (r_ && !first) first = r_;                                                              \
    } while (0)
    if (res->gpu_device >= 0 && cchani_gpu_get_device(&saved) == 0 && saved != res->gpu_device)
        CCHANI_KEEP_FIRST(cchani_gpu_set_device(res->gpu_device));
    if (res->ipc_base) CCHANI_KEEP_FIRST(cchani_gpu_ipc_close(res->ipc_base));
    if (res->vmm_va) CCHANI_KEEP_FIRST(cchani_gpu_vmm_unmap(res->vmm_va, res->vmm_bytes));
    if (res->has_vmm_handle) CCHANI_KEEP_FIRST(cchani_gpu_vmm_release(res->vmm_handle));
    if (res->host_registered) CCHANI_KEEP_FIRST(cchani_gpu_host_unregister(res->host_registered));
    if (res->mmap_base && munmap(res->mmap_base, res->mmap_bytes) != 0)
        CCHANI_KEEP_FIRST(
            cchani_errno_error("munmap", "%p, %zu bytes", res->mmap_base, res->mmap_bytes));
    if (res->fd >= 0 && close(res->fd) != 0)
        CCHANI_KEEP_FIRST(cchani_errno_error("close", "fd %d", res->fd));
    if (saved >= 0 && saved != res->gpu_device) (void)cchani_gpu_set_device(saved);
#undef CCHANI_KEEP_FIRST
    memset(res, 0, sizeof *res);
    res->fd = -1;
    return first;
}

static void mem_discard(cchan_mem_t *m) {
    (void)release_res(&m->res);
    free(m);
}

static uint64_t own_host_hash(const cchan_comm_t *comm) {
    return comm->peers[comm->rank].host_hash;
}

/* ---------------------------------------------------------------- what fits, what is mapped */

/* A number after `key` in a text like /proc/meminfo ("MemAvailable:  123 kB"), or -1. */
static int64_t text_number(const char *text, const char *key) {
    const char *at = strstr(text, key);
    if (!at) return -1;
    at += strlen(key);
    while (*at == ' ' || *at == '\t' || *at == ':') at++;
    if (*at < '0' || *at > '9') return -1;
    return (int64_t)strtoll(at, NULL, 10);
}

static int read_text(const char *path, char *buf, size_t n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t got = read(fd, buf, n - 1);
    close(fd);
    if (got < 0) return -1;
    buf[got] = '\0';
    return 0;
}

/* Room left in this process's cgroup (v2): memory.max - memory.current, or -1 without a limit. */
static int64_t cgroup_room(void) {
    char line[512], path[640], num[64];
    if (read_text("/proc/self/cgroup", line, sizeof line) != 0) return -1;
    const char *rel = strstr(line, "0::");
    if (!rel) return -1;
    rel += 3;
    size_t len = strcspn(rel, "\n");
    snprintf(path, sizeof path, "/sys/fs/cgroup%.*s/memory.max", (int)len, rel);
    if (read_text(path, num, sizeof num) != 0 || num[0] < '0' || num[0] > '9') return -1;
    int64_t max = strtoll(num, NULL, 10);
    snprintf(path, sizeof path, "/sys/fs/cgroup%.*s/memory.current", (int)len, rel);
    if (read_text(path, num, sizeof num) != 0) return -1;
    int64_t cur = strtoll(num, NULL, 10);
    return max > cur ? max - cur : 0;
}

/* Shared host memory is committed page by page when first touched: an allocation larger than
 * what the machine (or this cgroup) can still provide would "succeed" and then end in SIGBUS or
 * the OOM killer. Refuse it here, with the numbers. */
static int host_memory_fits(size_t bytes, const char *where) {
    char info[8192];
    if (read_text("/proc/meminfo", info, sizeof info) != 0) return 0; /* nothing to compare with */
    int64_t avail_kib = text_number(info, "MemAvailable"), swap_kib = text_number(info, "SwapFree");
    if (avail_kib < 0) return 0;
    uint64_t room = (uint64_t)avail_kib * 1024u + (swap_kib > 0 ? (uint64_t)swap_kib * 1024u : 0);
    int64_t cg = cgroup_room();
    const char *limit = "MemAvailable + SwapFree";
    if (cg >= 0 && (uint64_t)cg < room) {
        room = (uint64_t)cg;
        limit = "this cgroup's memory.max - memory.current";
    }
    if (bytes <= room) return 0;
    return cchani_error(-ENOMEM, where, "does not fit: only %llu bytes are available (%s)",
                        (unsigned long long)room, limit);
}

static int device_memory_fits(const cchan_comm_t *comm, size_t bytes, const char *where) {
    size_t free_b = 0, total_b = 0;
    int r = cchani_gpu_mem_info(&free_b, &total_b);
    if (r) return r;
    if (bytes <= free_b) return 0;
    return cchani_error(-ENOMEM, where, "does not fit: GPU %d has only %zu of %zu bytes free",
                        comm->device, free_b, total_b);
}

/* Whether [p, p + bytes) is mapped readable in this process, from /proc/self/maps (sorted by
 * address): registering memory that is not there would make a proxy or a peer read or write out
 * of bounds later. */
static int check_mapped(const void *ptr, size_t bytes, const char *where) {
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return 0; /* no procfs: nothing to check against */
    uintptr_t want = (uintptr_t)ptr, end, covered = want;
    if (__builtin_add_overflow(want, (uintptr_t)bytes, &end)) {
        fclose(f);
        return cchani_error(CCHAN_ERR_RANGE, where,
                            "%zu bytes at %p run past the end of the address space", bytes, ptr);
    }
    char line[512];
    const char *why = "not mapped";
    while (covered < end && fgets(line, sizeof line, f)) {
        unsigned long long lo, hi;
        char perms[8] = "";
        if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) != 3) continue;
        if (hi <= covered) continue;
        if (lo > covered) break; /* a gap */
        if (perms[0] != 'r') {
            why = "mapped without read permission";
            break;
        }
        covered = (uintptr_t)hi;
    }
    fclose(f);
    if (covered >= end) return 0;
    return cchani_error(CCHAN_ERR_RANGE, where,
                        "not all mapped readable in this process: only %zu bytes from %p are, "
                        "the memory at %p is %s",
                        (size_t)(covered - want), ptr, (void *)covered, why);
}

/* ---------------------------------------------------------------- host memory: sealed memfds */

static int memfd_create_sealed(uint64_t key, size_t bytes, int *fd_out, size_t *alloc_out) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t alloc = (bytes + page - 1) / page * page;
    char name[32];
    snprintf(name, sizeof name, "cchan:%016" PRIx64, key);
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return cchani_errno_error("memfd_create", "%zu bytes", alloc);
    /* Sealed against shrinking so that no mapping of it, here or in an importer, can SIGBUS. */
    if (ftruncate(fd, (off_t)alloc) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        int r = cchani_errno_error("ftruncate/F_ADD_SEALS", "memfd of %zu bytes", alloc);
        close(fd);
        return r;
    }
    *fd_out = fd;
    *alloc_out = alloc;
    return 0;
}

static int map_shared(int fd, size_t bytes, void **out) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return cchani_errno_error("mmap", "MAP_SHARED of fd %d, %zu bytes", fd, bytes);
    *out = p;
    return 0;
}

/* Makes a host mapping usable by the comm's GPU (no-op on the host platform). */
static int pin_for_gpu(cchan_mem_t *m, void *base, size_t bytes, void **dev) {
    *dev = base;
    if (!on_gpu(m->comm)) return 0;
    int r = cchani_gpu_host_register(base, bytes, dev);
    if (!r) m->res.host_registered = base;
    return r;
}

static int alloc_host(cchan_mem_t *m, size_t bytes) {
    m->kind = CCHANI_MEM_HOST_MEMFD;
    m->key = cchani_random_u64();
    int r = memfd_create_sealed(m->key, bytes, &m->res.fd, &m->alloc_bytes);
    if (!r) r = map_shared(m->res.fd, m->alloc_bytes, &m->res.mmap_base);
    if (r) return r;
    m->res.mmap_bytes = m->alloc_bytes;
    m->host_ptr = m->res.mmap_base;
    return pin_for_gpu(m, m->res.mmap_base, m->alloc_bytes, &m->ptr);
}

/* ---------------------------------------------------------------- device memory: cuMem */

/* GPUs one mapping can be opened to (every GPU of a node, with room to spare). */
#define CCHANI_MAX_GPUS 64

/* The comm's device plus every device that can reach it peer to peer, so that other communicators
 * of this process (one per GPU) can use the memory directly. */
static int access_devices(int device, int *devices, int *n) {
    int count = 0;
    int r = cchani_gpu_device_count(&count);
    if (r) return r;
    *n = 0;
    devices[(*n)++] = device;
    for (int d = 0; d < count && *n < CCHANI_MAX_GPUS; d++) {
        int can = 0;
        if (d != device && cchani_gpu_can_access_peer(d, device, &can) == 0 && can)
            devices[(*n)++] = d;
    }
    return 0;
}

static int alloc_device(cchan_mem_t *m, size_t bytes) {
    int dev = m->comm->device, devices[CCHANI_MAX_GPUS], ndevices = 0;
    size_t gran = 0;
    int r = cchani_gpu_vmm_granularity(dev, &gran);
    if (r) return r;
    m->kind = CCHANI_MEM_CUDA_VMM;
    m->key = cchani_random_u64();
    m->device = dev;
    m->alloc_bytes = (bytes + gran - 1) / gran * gran;
    r = cchani_gpu_vmm_create(dev, m->alloc_bytes, &m->res.vmm_handle);
    if (r) return r;
    m->res.has_vmm_handle = 1;
    r = access_devices(dev, devices, &ndevices);
    if (!r)
        r = cchani_gpu_vmm_map(m->res.vmm_handle, m->alloc_bytes, devices, ndevices,
                               &m->res.vmm_va);
    if (r) return r;
    m->res.vmm_bytes = m->alloc_bytes;
    m->ptr = m->res.vmm_va;
    r = cchani_gpu_memset_zero(m->ptr, m->alloc_bytes);
    if (!r) r = cchani_gpu_vmm_export_fd(m->res.vmm_handle, &m->res.fd);
    return r;
}

int cchan_mem_alloc(cchan_comm_t *comm, size_t bytes, unsigned flags, cchan_mem_t **out) {
    const char *where = "cchan_mem_alloc";
    CCHANI_CHECK_ARG(comm != NULL && out != NULL, where);
    CCHANI_CHECK_ABORT(comm, where);
    CCHANI_CHECK_ARG(bytes > 0 && bytes <= SIZE_MAX / 2, where);
    CCHANI_CHECK_ARG((flags & ~CCHAN_MEM_HOST) == 0, where);
    cchan_mem_t *m = mem_new(comm, comm->rank);
    if (!m) return cchani_error(-ENOMEM, where, "registration object");
    cchani_device_scope_t scope;
    int r = cchani_device_enter(comm, &scope);
    int host = (flags & CCHAN_MEM_HOST) || !on_gpu(comm);
    if (!r) r = host ? host_memory_fits(bytes, where) : device_memory_fits(comm, bytes, where);
    if (!r) r = host ? alloc_host(m, bytes) : alloc_device(m, bytes);
    cchani_device_leave(&scope);
    if (r) {
        mem_discard(m);
        return cchani_error_wrap(r, where, "%zu bytes of %s memory", bytes,
                                 (flags & CCHAN_MEM_HOST) || !on_gpu(comm) ? "shared host"
                                                                           : "device");
    }
    m->bytes = bytes;
    registry_add(m);
    cchani_comm_hold(comm);
    *out = m;
    return 0;
}

/* ---------------------------------------------------------------- registration */

/* If [p, p + bytes) lies in a cchan_mem_alloc host allocation of this process, shares it: m gets
 * its own fd of the same memfd. Returns 1 when found, 0 when not, or an error. */
static int share_memfd_range(cchan_mem_t *m, const uint8_t *p, size_t bytes) {
    int found = 0;
    pthread_mutex_lock(&registry_lock);
    for (cchan_mem_t *e = registry; e && !found; e = e->next) {
        if (e->kind != CCHANI_MEM_HOST_MEMFD || !e->res.mmap_base) continue;
        const uint8_t *host = (const uint8_t *)e->res.mmap_base, *dev = (const uint8_t *)e->ptr;
        size_t len = e->alloc_bytes, off;
        if (p >= host && bytes <= len && (size_t)(p - host) <= len - bytes)
            off = (size_t)(p - host);
        else if (p >= dev && bytes <= len && (size_t)(p - dev) <= len - bytes)
            off = (size_t)(p - dev);
        else
            continue;
        int fd = fcntl(e->res.fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0) {
            found = cchani_errno_error("fcntl", "F_DUPFD_CLOEXEC of memfd %d", e->res.fd);
            break;
        }
        m->kind = CCHANI_MEM_HOST_MEMFD;
        m->res.fd = fd;
        m->key = e->key;
        m->alloc_bytes = e->alloc_bytes;
        m->offset = off;
        m->host_ptr = (uint8_t *)e->res.mmap_base + off;
        m->ptr = (uint8_t *)e->ptr + off;
        found = 1;
    }
    pthread_mutex_unlock(&registry_lock);
    return found;
}

static int register_host_memory(cchan_mem_t *m) {
    int r = share_memfd_range(m, (const uint8_t *)m->ptr, m->bytes);
    if (r < 0) return r;
    if (r == 0) {
        r = check_mapped(m->ptr, m->bytes, "cchan_mem_register");
        if (r) return r;
        m->host_ptr = m->ptr;
        snprintf(
            m->why_local, sizeof m->why_local,
            "memory at %p was not allocated by cchan_mem_alloc%s; only such memory can be shared "
            "with other processes",
            m->ptr, on_gpu(m->comm) ? " and is not device memory" : "");
    }
    return 0;
}

/* cuMem memory: retain its handle and export it as an fd, if the allocation allows that. */
static int register_vmm(cchan_mem_t *m) {
    int r = cchani_gpu_vmm_retain(m->ptr, &m->res.vmm_handle);
    if (r) return r;
    m->res.has_vmm_handle = 1;
    if (cchani_gpu_vmm_export_fd(m->res.vmm_handle, &m->res.fd) != 0) {
        snprintf(m->why_local, sizeof m->why_local,
                 "cuMem allocation at %p has no POSIX fd handle type (%s)", m->ptr,
                 cchan_last_error());
        cchani_clear_error();
        return 0;
    }
    m->kind = CCHANI_MEM_CUDA_VMM;
    return 0;
}

static int register_gpu_memory(cchan_mem_t *m) {
    cchani_gpu_ptr_info_t info;
    int r = cchani_gpu_pointer_info(m->ptr, &info);
    if (r) return r;
    if (!info.is_device) return register_host_memory(m);
    uintptr_t p = (uintptr_t)m->ptr;
    if (m->bytes > info.bytes - (p - info.base))
        return cchani_error(CCHAN_ERR_RANGE, "cchan_mem_register",
                            "%zu bytes at %p run past the end of its allocation [%p, +%zu)",
                            m->bytes, m->ptr, (void *)info.base, info.bytes);
    m->device = info.device;
    m->alloc_bytes = info.bytes;
    m->offset = p - info.base;
    m->key = cchani_random_u64();
    if (!info.legacy_ipc) return register_vmm(m);
    r = cchani_gpu_ipc_get_handle((void *)info.base, m->ipc_handle);
    if (!r) m->kind = CCHANI_MEM_CUDA_IPC;
    return r;
}

int cchan_mem_register(cchan_comm_t *comm, void *ptr, size_t bytes, unsigned flags,
                       cchan_mem_t **out) {
    const char *where = "cchan_mem_register";
    CCHANI_CHECK_ARG(comm != NULL && ptr != NULL && out != NULL, where);
    CCHANI_CHECK_ABORT(comm, where);
    CCHANI_CHECK_ARG(bytes > 0 && bytes <= SIZE_MAX / 2, where);
    /* The end of the range must be an address: a range that wraps past 2^64 would pass the
     * mapping check (its end below its start) and the proxy's first read would fault. */
    if (bytes > UINTPTR_MAX - (uintptr_t)ptr)
        return cchani_error(CCHAN_ERR_RANGE, where,
                            "%zu bytes at %p run past the end of the address space", bytes, ptr);
    CCHANI_CHECK_ARG((flags & ~CCHAN_MEM_HOST) == 0, where);
    cchan_mem_t *m = mem_new(comm, comm->rank);
    if (!m) return cchani_error(-ENOMEM, where, "registration object");
    m->ptr = ptr;
    m->bytes = bytes;
    cchani_device_scope_t scope;
    int r = cchani_device_enter(comm, &scope);
    if (!r) r = on_gpu(comm) ? register_gpu_memory(m) : register_host_memory(m);
    cchani_device_leave(&scope);
    if (r) {
        mem_discard(m);
        return cchani_error_wrap(r, where, "%zu bytes at %p", bytes, ptr);
    }
    if (m->kind != CCHANI_MEM_LOCAL) registry_add(m);
    cchani_comm_hold(comm);
    *out = m;
    return 0;
}

/* ---------------------------------------------------------------- export */

static void mem_wire(const cchan_mem_t *m, cchani_mem_wire_t *w) {
    memset(w, 0, sizeof *w);
    w->kind = (uint16_t)m->kind;
    w->owner_rank = m->owner_rank;
    w->owner_pid = (int32_t)getpid();
    w->owner_fd = m->kind == CCHANI_MEM_CUDA_IPC ? -1 : m->res.fd;
    w->device = m->device;
    w->host_hash = own_host_hash(m->comm);
    w->session = m->comm->session;
    w->key = m->key;
    w->alloc_bytes = m->alloc_bytes;
    w->offset = m->offset;
    w->size = m->bytes;
    if (m->kind == CCHANI_MEM_CUDA_IPC) {
        w->handle_bytes = CCHANI_MEM_HANDLE_BYTES;
        memcpy(w->handle, m->ipc_handle, sizeof w->handle);
    }
}

static void mem_encode(const cchan_mem_t *m, cchan_mem_desc_t *out) {
    cchani_mem_wire_t w;
    mem_wire(m, &w);
    cchani_mem_desc_encode(&w, out);
}

int cchan_mem_export(const cchan_mem_t *mem, cchan_mem_desc_t *out) {
    const char *where = "cchan_mem_export";
    CCHANI_CHECK_ARG(mem != NULL && out != NULL, where);
    if (mem->imported)
        return cchani_error(-EINVAL, where,
                            "this is rank %d's memory imported here; only its owner exports it",
                            mem->owner_rank);
    if (mem->kind == CCHANI_MEM_LOCAL)
        return cchani_error(CCHAN_ERR_UNSUPPORTED, where, "%s", mem->why_local);
    mem_encode(mem, out);
    return 0;
}

int cchani_mem_export_fd(const cchan_mem_t *mem) {
    return mem->kind == CCHANI_MEM_HOST_MEMFD || mem->kind == CCHANI_MEM_CUDA_VMM ? mem->res.fd
                                                                                  : -1;
}

/* ---------------------------------------------------------------- import */

int cchani_mem_import_check(cchan_comm_t *comm, const cchan_mem_desc_t *desc,
                            cchani_mem_wire_t *out) {
    const char *where = "cchan_mem_import";
    cchani_mem_wire_t w;
    int r = cchani_mem_desc_decode(desc, &w);
    if (r) return r;
    if (w.session != comm->session)
        return cchani_error(CCHAN_ERR_PROTOCOL, where,
                            "descriptor was exported in another communicator (session %016" PRIx64
                            ", this one %016" PRIx64 ")",
                            w.session, comm->session);
    if (w.owner_rank >= comm->nranks)
        return cchani_error(CCHAN_ERR_PROTOCOL, where,
                            "descriptor names rank %d of a %d-rank communicator", w.owner_rank,
                            comm->nranks);
    const cchani_peer_info_t *owner = &comm->peers[w.owner_rank];
    if (w.owner_pid != owner->pid || w.host_hash != owner->host_hash)
        return cchani_error(CCHAN_ERR_PROTOCOL, where,
                            "descriptor says rank %d is pid %d on host %016" PRIx64
                            ", but rank %d is pid %d on %s (%016" PRIx64 ")",
                            w.owner_rank, w.owner_pid, w.host_hash, w.owner_rank, owner->pid,
                            owner->hostname, owner->host_hash);
    /* Memory of another host is never mapped: its import is a handle that network transports
     * (ib, tcp) name to the owner when they connect. */
    if (owner->host_hash != own_host_hash(comm)) {
        *out = w;
        return 0;
    }
    if (w.kind != CCHANI_MEM_HOST_MEMFD && !on_gpu(comm))
        return cchani_error(
            CCHAN_ERR_UNSUPPORTED, where,
            "rank %d's memory is GPU memory and this communicator runs on the host platform",
            w.owner_rank);
    *out = w;
    return 0;
}

/* Whether the owner of w is on another host than comm's rank (w passed cchani_mem_import_check). */
static int wire_is_remote(const cchan_comm_t *comm, const cchani_mem_wire_t *w) {
    return comm->peers[w->owner_rank].host_hash != own_host_hash(comm);
}

int cchani_mem_import_needs_fd(const cchan_comm_t *comm, const cchani_mem_wire_t *w) {
    return (w->kind == CCHANI_MEM_HOST_MEMFD || w->kind == CCHANI_MEM_CUDA_VMM) &&
           w->owner_pid != (int32_t)getpid() && !wire_is_remote(comm, w);
}

static cchan_mem_t *import_new(cchan_comm_t *comm, const cchani_mem_wire_t *w) {
    cchan_mem_t *m = mem_new(comm, w->owner_rank);
    if (!m) return NULL;
    m->kind = w->kind;
    m->imported = 1;
    m->bytes = (size_t)w->size;
    m->key = w->key;
    m->device = w->device;
    m->alloc_bytes = (size_t)w->alloc_bytes;
    m->offset = (size_t)w->offset;
    return m;
}

/* The owner's registration in this process, with a reference taken, or NULL. A descriptor is valid
 * here only if it is exactly what that registration exports now. */
static cchan_mem_t *registry_take(const cchani_mem_wire_t *w) {
    cchan_mem_desc_t want, have;
    cchani_mem_desc_encode(w, &want);
    pthread_mutex_lock(&registry_lock);
    cchan_mem_t *e = registry;
    for (; e; e = e->next) {
        mem_encode(e, &have);
        if (memcmp(want.bytes, have.bytes, sizeof want.bytes) == 0) break;
    }
    if (e) e->refs++;
    pthread_mutex_unlock(&registry_lock);
    return e;
}

/* Drops one reference on a registration; the last one releases its memory. */
static int mem_unref(cchan_mem_t *m) {
    pthread_mutex_lock(&registry_lock);
    int last = --m->refs == 0;
    pthread_mutex_unlock(&registry_lock);
    if (!last) return 0;
    int r = release_res(&m->res);
    free(m);
    return r;
}

static int import_view(cchan_comm_t *comm, const cchani_mem_wire_t *w, cchan_mem_t **out) {
    cchan_mem_t *owner = registry_take(w);
    if (!owner)
        return cchani_error(
            CCHAN_ERR_PROTOCOL, "cchan_mem_import",
            "descriptor of rank %d matches no live registration of this process: the "
            "memory was destroyed or the descriptor altered",
            w->owner_rank);
    cchan_mem_t *m = import_new(comm, w);
    int r = m ? 0 : cchani_error(-ENOMEM, "cchan_mem_import", "registration object");
    /* Memory of another GPU of this process: cudaMalloc memory needs peer access enabled (cuMem
     * memory got access for every P2P-capable device when it was allocated). */
    if (!r && on_gpu(comm) && owner->device >= 0 && owner->device != comm->device)
        r = cchani_gpu_enable_peer_access(owner->device);
    if (r) {
        free(m);
        (void)mem_unref(owner);
        return r;
    }
    m->view_of = owner;
    m->ptr = owner->ptr;
    m->host_ptr = owner->host_ptr;
    *out = m;
    return 0;
}

/* The fd must be the owner's sealed memfd of this allocation, of the size the descriptor says, so
 * a stale or forged descriptor cannot map some other file, or a file that may shrink under us. */
static int check_memfd(int fd, const cchani_mem_wire_t *w) {
    const char *where = "cchan_mem_import";
    int want_seals = F_SEAL_SHRINK | F_SEAL_GROW;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & want_seals) != want_seals)
        return cchani_error(CCHAN_ERR_PROTOCOL, where,
                            "fd %d of rank %d (pid %d) is not a sealed cchan memfd", w->owner_fd,
                            w->owner_rank, w->owner_pid);
    struct stat st;
    if (fstat(fd, &st) != 0) return cchani_errno_error("fstat", "memfd of rank %d", w->owner_rank);
    if ((uint64_t)st.st_size != w->alloc_bytes)
        return cchani_error(
            CCHAN_ERR_PROTOCOL, where, "memfd of rank %d holds %lld bytes, descriptor says %llu",
            w->owner_rank, (long long)st.st_size, (unsigned long long)w->alloc_bytes);
    char link[64], target[128], want[48];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    snprintf(want, sizeof want, "/memfd:cchan:%016" PRIx64, w->key);
    if (strncmp(target, want, strlen(want)) != 0)
        return cchani_error(CCHAN_ERR_PROTOCOL, where,
                            "fd %d of rank %d is '%s', not allocation %016" PRIx64, w->owner_fd,
                            w->owner_rank, target, w->key);
    return 0;
}

static int import_memfd(cchan_mem_t *m, const cchani_mem_wire_t *w, int fd) {
    int r = check_memfd(fd, w);
    if (!r) r = map_shared(fd, m->alloc_bytes, &m->res.mmap_base);
    close(fd); /* the mapping keeps the memory alive */
    if (r) return r;
    m->res.mmap_bytes = m->alloc_bytes;
    void *dev = NULL;
    r = pin_for_gpu(m, m->res.mmap_base, m->alloc_bytes, &dev);
    if (r) return r;
    m->host_ptr = (uint8_t *)m->res.mmap_base + m->offset;
    m->ptr = (uint8_t *)dev + m->offset;
    return 0;
}

/* Access for this rank's GPU and its P2P peers, as for an allocation: copies the runtime runs on
 * the GPU that holds the memory (cudaMemcpy into a peer's buffer) need that GPU to have access too.
 */
static int import_vmm(cchan_mem_t *m, int fd) {
    int devices[CCHANI_MAX_GPUS], ndevices = 0;
    int r = cchani_gpu_vmm_import_fd(fd, &m->res.vmm_handle);
    close(fd); /* the imported handle keeps the memory alive */
    if (r) return r;
    m->res.has_vmm_handle = 1;
    r = access_devices(m->comm->device, devices, &ndevices);
    if (!r)
        r = cchani_gpu_vmm_map(m->res.vmm_handle, m->alloc_bytes, devices, ndevices,
                               &m->res.vmm_va);
    if (r) return r;
    m->res.vmm_bytes = m->alloc_bytes;
    m->ptr = (uint8_t *)m->res.vmm_va + m->offset;
    return 0;
}

static int import_ipc(cchan_mem_t *m, const cchani_mem_wire_t *w) {
    int r = cchani_gpu_ipc_open(w->handle, &m->res.ipc_base);
    if (!r) m->ptr = (uint8_t *)m->res.ipc_base + m->offset;
    return r;
}

/* Memory of another host: nothing is mapped; ptr stays NULL and only network transports use it. */
static int import_remote(cchan_comm_t *comm, const cchani_mem_wire_t *w, int fd,
                         cchan_mem_t **out) {
    if (fd >= 0) close(fd);
    cchan_mem_t *m = import_new(comm, w);
    if (!m) return cchani_error(-ENOMEM, "cchan_mem_import", "registration object");
    m->remote = 1;
    *out = m;
    return 0;
}

int cchani_mem_import_wire(cchan_comm_t *comm, const cchani_mem_wire_t *w, int fd,
                           cchan_mem_t **out) {
    if (wire_is_remote(comm, w)) return import_remote(comm, w, fd, out);
    if (w->owner_pid == (int32_t)getpid()) return import_view(comm, w, out);
    cchan_mem_t *m = import_new(comm, w);
    if (!m) {
        if (fd >= 0) close(fd);
        return cchani_error(-ENOMEM, "cchan_mem_import", "registration object");
    }
    int r;
    switch (w->kind) {
    case CCHANI_MEM_HOST_MEMFD: r = import_memfd(m, w, fd); break;
    case CCHANI_MEM_CUDA_VMM: r = import_vmm(m, fd); break;
    default: r = import_ipc(m, w); break;
    }
    if (r) {
        mem_discard(m);
        return cchani_error_wrap(r, "cchan_mem_import", "%llu bytes of rank %d (pid %d)",
                                 (unsigned long long)w->size, w->owner_rank, w->owner_pid);
    }
    *out = m;
    return 0;
}

static int fetch_fd(const cchani_mem_wire_t *w, int *fd) {
    int mode;
    int r = cchani_fdpass_mode(&mode);
    if (r) return r;
    if (mode == CCHANI_FDPASS_SCM_RIGHTS)
        return cchani_error(
            CCHAN_ERR_UNSUPPORTED, "cchan_mem_import",
            "CCHAN_FDPASS=scm_rights: SCM_RIGHTS needs the owner (rank %d) to send the fd, "
            "so only the collective cchan_mem_exchange can use it",
            w->owner_rank);
    r = cchani_fd_from_pid(w->owner_pid, w->owner_fd, fd);
    if (r && cchani_fdpass_refused(r))
        return cchani_error_wrap(
            r, "cchan_mem_import",
            "cannot copy rank %d's fd (ptrace access denied?); cchan_mem_exchange falls "
            "back to SCM_RIGHTS",
            w->owner_rank);
    return r;
}

int cchan_mem_import(cchan_comm_t *comm, const cchan_mem_desc_t *desc, cchan_mem_t **out) {
    CCHANI_CHECK_ARG(comm != NULL && desc != NULL && out != NULL, "cchan_mem_import");
    CCHANI_CHECK_ABORT(comm, "cchan_mem_import");
    cchani_device_scope_t scope;
    int r = cchani_device_enter(comm, &scope);
    if (r) return r;
    cchani_mem_wire_t w;
    int fd = -1;
    r = cchani_mem_import_check(comm, desc, &w);
    if (!r && cchani_mem_import_needs_fd(comm, &w)) r = fetch_fd(&w, &fd);
    if (!r) r = cchani_mem_import_wire(comm, &w, fd, out);
    cchani_device_leave(&scope);
    if (!r) cchani_comm_hold(comm);
    return r;
}

/* ---------------------------------------------------------------- destroy, accessors */

int cchan_mem_destroy(cchan_mem_t *mem) {
    if (!mem) return 0;
    cchan_comm_t *comm = mem->comm;
    int r;
    if (mem->view_of) {
        r = mem_unref(mem->view_of);
        free(mem);
    } else {
        /* No new view can find it; views already taken keep the memory until they go. */
        pthread_mutex_lock(&registry_lock);
        registry_remove_locked(mem);
        pthread_mutex_unlock(&registry_lock);
        r = mem_unref(mem);
    }
    cchani_comm_release(comm);
    return r ? cchani_error_wrap(r, "cchan_mem_destroy", "releasing a registration") : 0;
}

/* A getter's return value cannot carry the reason, so a NULL handle leaves it in the last error. */
static int no_mem(const char *where) { return cchani_error(-EINVAL, where, "mem is NULL"); }

void *cchan_mem_ptr(const cchan_mem_t *mem) {
    if (mem) return mem->ptr;
    no_mem("cchan_mem_ptr");
    return NULL;
}
size_t cchan_mem_size(const cchan_mem_t *mem) {
    if (mem) return mem->bytes;
    no_mem("cchan_mem_size");
    return 0;
}
int cchan_mem_rank(const cchan_mem_t *mem) {
    return mem ? mem->owner_rank : no_mem("cchan_mem_rank");
}
void *cchani_mem_host_ptr(const cchan_mem_t *mem) { return mem ? mem->host_ptr : NULL; }
cchan_comm_t *cchani_mem_comm(const cchan_mem_t *mem) { return mem ? mem->comm : NULL; }
int cchani_mem_is_local(const cchan_mem_t *mem) { return mem && !mem->imported; }
int cchani_mem_is_remote(const cchan_mem_t *mem) { return mem && mem->remote; }
int cchani_mem_device(const cchan_mem_t *mem) { return mem ? mem->device : -1; }

void cchani_mem_ident(const cchan_mem_t *mem, cchani_mem_ident_t *out) {
    memset(out, 0, sizeof *out);
    out->key = mem->key;
    out->offset = mem->offset;
    out->size = mem->bytes;
    out->owner_rank = mem->owner_rank;
    out->kind = mem->kind;
}

cchan_mem_t *cchani_mem_find_own(cchan_comm_t *comm, const cchani_mem_ident_t *id) {
    pthread_mutex_lock(&registry_lock);
    cchan_mem_t *e = registry;
    for (; e; e = e->next)
        if (e->comm == comm && !e->imported && e->key == id->key && e->offset == id->offset &&
            e->bytes == id->size && e->kind == id->kind && e->owner_rank == id->owner_rank)
            break;
    pthread_mutex_unlock(&registry_lock);
    return e;
}
