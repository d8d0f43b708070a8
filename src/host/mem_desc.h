/* cchan memory descriptor: the wire format inside cchan_mem_desc_t (not installed).
 *
 * A descriptor travels between processes of one host (through the bootstrap or the application's
 * own channel) and is read by cchan_mem_import. Change the layout only together with
 * CCHANI_MEM_DESC_VERSION. All integers are in the host's byte order: a descriptor is only ever
 * imported on the host that made it.
 *
 *   offset  field         meaning
 *   0       magic         CCHANI_MEM_DESC_MAGIC ("cchm")
 *   4       version       CCHANI_MEM_DESC_VERSION
 *   6       kind          enum cchani_mem_kind: how the memory is shared
 *   8       crc           CRC-32C of all CCHAN_MEM_DESC_BYTES bytes with this field zero
 *   12      owner_rank    rank (in the exporting communicator) that owns the memory
 *   16      owner_pid     that rank's process id
 *   20      owner_fd      memfd / cuMem fd number in the owner's process; -1 for CUDA_IPC
 *   24      device        owner's GPU ordinal; -1 for host memory
 *   28      handle_bytes  valid bytes in handle (64 for CUDA_IPC, else 0)
 *   32      host_hash     owner's host (hostname and boot id)
 *   40      session       the exporting communicator's session id
 *   48      key           random identity of the shareable allocation (in a memfd's name)
 *   56      alloc_bytes   size of the shareable allocation (memfd size, cuMem mapping, cudaMalloc)
 *   64      offset        start of the registration within the allocation
 *   72      size          bytes registered
 *   80      handle        cudaIpcMemHandle_t for CUDA_IPC
 *   144     zero          must be zero (room to grow)
 */
#ifndef CCHAN_SRC_HOST_MEM_DESC_H
#define CCHAN_SRC_HOST_MEM_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#define CCHANI_MEM_DESC_MAGIC 0x6d686363u /* "cchm" in memory order */
#define CCHANI_MEM_DESC_VERSION 1u
#define CCHANI_MEM_HANDLE_BYTES 64u

enum cchani_mem_kind {
    CCHANI_MEM_LOCAL = 0,      /* not shareable (never on the wire) */
    CCHANI_MEM_HOST_MEMFD = 1, /* host memory in a sealed memfd, shared by passing the fd */
    CCHANI_MEM_CUDA_VMM = 2,   /* cuMem allocation, shared by passing its POSIX fd */
    CCHANI_MEM_CUDA_IPC = 3    /* cudaMalloc allocation, shared by a legacy IPC handle */
};

typedef struct cchani_mem_wire {
    uint32_t magic;
    uint16_t version;
    uint16_t kind;
    uint32_t crc;
    int32_t owner_rank;
    int32_t owner_pid;
    int32_t owner_fd;
    int32_t device;
    uint32_t handle_bytes;
    uint64_t host_hash;
    uint64_t session;
    uint64_t key;
    uint64_t alloc_bytes;
    uint64_t offset;
    uint64_t size;
    uint8_t handle[CCHANI_MEM_HANDLE_BYTES];
    uint8_t zero[CCHAN_MEM_DESC_BYTES - 144];
} cchani_mem_wire_t;

CCHAN_STATIC_ASSERT(sizeof(cchani_mem_wire_t) == CCHAN_MEM_DESC_BYTES, "descriptor size");
CCHAN_STATIC_ASSERT(offsetof(cchani_mem_wire_t, crc) == 8, "descriptor layout");
CCHAN_STATIC_ASSERT(offsetof(cchani_mem_wire_t, host_hash) == 32, "descriptor layout");
CCHAN_STATIC_ASSERT(offsetof(cchani_mem_wire_t, size) == 72, "descriptor layout");
CCHAN_STATIC_ASSERT(offsetof(cchani_mem_wire_t, handle) == 80, "descriptor layout");
CCHAN_STATIC_ASSERT(offsetof(cchani_mem_wire_t, zero) == 144, "descriptor layout");

/* Writes w into a descriptor with the current magic and version, and seals it. */
CCHANI_HIDDEN void cchani_mem_desc_encode(const cchani_mem_wire_t *w, cchan_mem_desc_t *out);
/* Recomputes the checksum of a descriptor as its bytes stand. */
CCHANI_HIDDEN void cchani_mem_desc_seal(cchan_mem_desc_t *desc);
/* Checks everything a descriptor says about itself (magic, version, checksum, kind, field ranges
 * and consistency) and decodes it. 0, or an error naming the first problem. */
CCHANI_HIDDEN int cchani_mem_desc_decode(const cchan_mem_desc_t *desc, cchani_mem_wire_t *out);

#endif /* CCHAN_SRC_HOST_MEM_DESC_H */
