/* cchan memory registrations: the object behind cchan_mem_t and the import steps that
 * cchan_mem_import and the collective cchan_mem_exchange share (not installed). */
#ifndef CCHAN_SRC_HOST_MEM_H
#define CCHAN_SRC_HOST_MEM_H

#include "mem_desc.h"
#include "runtime.h"

/* What an object must give back when its last user is gone. Only the fields an object acquired
 * are set, so one release routine serves allocations, registrations and imports alike. */
typedef struct cchani_mem_res {
    int gpu_device;  /* device to make current while releasing; -1 on the host platform */
    int fd;          /* memfd or cuMem fd we hold open, -1 */
    void *mmap_base; /* our mapping of a memfd */
    size_t mmap_bytes;
    void *host_registered; /* mapping pinned with cudaHostRegister */
    void *vmm_va;          /* reserved and mapped cuMem range */
    size_t vmm_bytes;
    uint64_t vmm_handle; /* created, retained or imported cuMem handle */
    int has_vmm_handle;
    void *ipc_base; /* cudaIpcOpenMemHandle result */
} cchani_mem_res_t;

struct cchan_mem {
    cchan_comm_t *comm;
    int kind;     /* enum cchani_mem_kind */
    int imported; /* a peer's memory mapped here (not exportable) */
    int remote;   /* imported from another host: not mapped, ptr NULL (network transports only) */
    int owner_rank;
    void *ptr;      /* what kernels and channels use (device view) */
    void *host_ptr; /* host view, NULL for device memory */
    size_t bytes;
    /* What an export of this registration says (mem_desc.h). */
    uint64_t key;
    int device;
    size_t alloc_bytes;
    size_t offset;
    uint8_t ipc_handle[CCHANI_MEM_HANDLE_BYTES];
    char why_local[192]; /* kind LOCAL: why it cannot be shared */
    cchani_mem_res_t res;
    /* Same-process sharing: an import of memory owned by this very process is a view that holds a
     * reference on the owner, so the memory lives until the owner and every view are destroyed,
     * as it does across processes. refs and next are guarded by the registry lock. */
    struct cchan_mem *view_of;
    int refs;
    struct cchan_mem *next;
};

/* Import steps, in the order cchan_mem_exchange runs them. */
/* Decodes desc and checks it against comm (session, owner's pid and host, platform). */
CCHANI_HIDDEN int cchani_mem_import_check(cchan_comm_t *comm, const cchan_mem_desc_t *desc,
                                          cchani_mem_wire_t *out);
/* Whether importing w needs the owner's fd (fd-shared memory of another process of this host). */
CCHANI_HIDDEN int cchani_mem_import_needs_fd(const cchan_comm_t *comm, const cchani_mem_wire_t *w);
/* Maps w here. fd: the owner's fd copied into this process when needs_fd (always consumed), else
 * -1. */
CCHANI_HIDDEN int cchani_mem_import_wire(cchan_comm_t *comm, const cchani_mem_wire_t *w, int fd,
                                         cchan_mem_t **out);
/* Identity of a registration as its owner knows it: what a network transport (ib, tcp) names to
 * the owner when it connects, so that the owner can find the memory its peer will write into. */
typedef struct cchani_mem_ident {
    uint64_t key;
    uint64_t offset;
    uint64_t size;
    int32_t owner_rank;
    int32_t kind;
} cchani_mem_ident_t;
CCHANI_HIDDEN void cchani_mem_ident(const cchan_mem_t *mem, cchani_mem_ident_t *out);
/* This rank's own exported registration of comm with that identity, or NULL. */
CCHANI_HIDDEN cchan_mem_t *cchani_mem_find_own(cchan_comm_t *comm, const cchani_mem_ident_t *id);
/* Imported from another host (unmapped: cchan_mem_ptr() is NULL). */
CCHANI_HIDDEN int cchani_mem_is_remote(const cchan_mem_t *mem);
/* GPU ordinal of the memory, -1 for host memory. */
CCHANI_HIDDEN int cchani_mem_device(const cchan_mem_t *mem);

/* The fd an exported registration shares, -1 if none. */
CCHANI_HIDDEN int cchani_mem_export_fd(const cchan_mem_t *mem);

#endif /* CCHAN_SRC_HOST_MEM_H */
