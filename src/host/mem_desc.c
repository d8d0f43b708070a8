/* cchan memory descriptor: encoding and self-consistency checks (layout in mem_desc.h). */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "mem_desc.h"

/* CRC-32C, bit by bit: descriptors are 256 bytes and read a few times per exchange, so a table
 * would buy nothing. */
static uint32_t crc32c(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int b = 0; b < 8; b++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    }
    return ~c;
}

static uint32_t wire_crc(const cchani_mem_wire_t *w) {
    cchani_mem_wire_t copy;
    memcpy(&copy, w, sizeof copy);
    copy.crc = 0;
    return crc32c((const uint8_t *)&copy, sizeof copy);
}

void cchani_mem_desc_seal(cchan_mem_desc_t *desc) {
    cchani_mem_wire_t w;
    memcpy(&w, desc->bytes, sizeof w);
    w.crc = wire_crc(&w);
    memcpy(desc->bytes, &w, sizeof w);
}

void cchani_mem_desc_encode(const cchani_mem_wire_t *w, cchan_mem_desc_t *out) {
    cchani_mem_wire_t copy = *w;
    copy.magic = CCHANI_MEM_DESC_MAGIC;
    copy.version = CCHANI_MEM_DESC_VERSION;
    memcpy(out->bytes, &copy, sizeof copy);
    cchani_mem_desc_seal(out);
}

static int all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

static int check_kind_fields(const cchani_mem_wire_t *w) {
    const char *where = "cchan_mem_import";
    const uint8_t *handle = w->handle;
    switch (w->kind) {
    case CCHANI_MEM_HOST_MEMFD:
    case CCHANI_MEM_CUDA_VMM:
        if (w->owner_fd < 0)
            return cchani_error(CCHAN_ERR_PROTOCOL, where,
                                "descriptor of fd-shared memory has fd %d", w->owner_fd);
        if (w->handle_bytes != 0 || !all_zero(handle, sizeof w->handle))
            return cchani_error(CCHAN_ERR_PROTOCOL, where,
                                "descriptor of fd-shared memory carries an IPC handle");
        break;
    case CCHANI_MEM_CUDA_IPC:
        if (w->owner_fd != -1 || w->handle_bytes != CCHANI_MEM_HANDLE_BYTES)
            return cchani_error(CCHAN_ERR_PROTOCOL, where,
                                "IPC descriptor has fd %d and %u handle bytes (want -1 and %u)",
                                w->owner_fd, w->handle_bytes, CCHANI_MEM_HANDLE_BYTES);
        break;
    default:
        return cchani_error(CCHAN_ERR_PROTOCOL, where, "descriptor of unknown memory kind %u",
                            w->kind);
    }
    int host_memory = w->kind == CCHANI_MEM_HOST_MEMFD;
    if (host_memory ? w->device != -1 : w->device < 0)
        return cchani_error(CCHAN_ERR_PROTOCOL, where, "descriptor of kind %u names device %d",
                            w->kind, w->device);
    if (host_memory && w->alloc_bytes % (uint64_t)sysconf(_SC_PAGESIZE) != 0)
        return cchani_error(CCHAN_ERR_PROTOCOL, where,
                            "shared host allocation of %llu bytes is not a whole number of pages",
                            (unsigned long long)w->alloc_bytes);
    return 0;
}

static int check_bounds(const cchani_mem_wire_t *w) {
    const char *where = "cchan_mem_import";
    if (w->owner_rank < 0 || w->owner_pid <= 0)
        return cchani_error(CCHAN_ERR_PROTOCOL, where, "descriptor names rank %d, pid %d",
                            w->owner_rank, w->owner_pid);
    if (w->size == 0 || w->offset > w->alloc_bytes || w->size > w->alloc_bytes - w->offset)
        return cchani_error(
            CCHAN_ERR_RANGE, where,
            "descriptor registers %llu bytes at offset %llu of a %llu-byte allocation",
            (unsigned long long)w->size, (unsigned long long)w->offset,
            (unsigned long long)w->alloc_bytes);
    if (w->alloc_bytes > (uint64_t)SIZE_MAX / 2)
        return cchani_error(CCHAN_ERR_RANGE, where,
                            "allocation of %llu bytes cannot be mapped here",
                            (unsigned long long)w->alloc_bytes);
    return 0;
}

int cchani_mem_desc_decode(const cchan_mem_desc_t *desc, cchani_mem_wire_t *out) {
    const char *where = "cchan_mem_import";
    cchani_mem_wire_t w;
    memcpy(&w, desc->bytes, sizeof w);
    if (w.magic != CCHANI_MEM_DESC_MAGIC)
        return cchani_error(CCHAN_ERR_PROTOCOL, where,
                            "not a cchan memory descriptor (magic 0x%08x)", w.magic);
    if (w.version != CCHANI_MEM_DESC_VERSION)
        return cchani_error(CCHAN_ERR_VERSION, where,
                            "descriptor version %u; this library reads version %u", w.version,
                            CCHANI_MEM_DESC_VERSION);
    uint32_t crc = wire_crc(&w);
    if (w.crc != crc)
        return cchani_error(
            CCHAN_ERR_PROTOCOL, where,
            "descriptor checksum 0x%08x does not match its contents (0x%08x): truncated or "
            "corrupted",
            w.crc, crc);
    if (!all_zero(w.zero, sizeof w.zero))
        return cchani_error(CCHAN_ERR_PROTOCOL, where, "descriptor has nonzero reserved bytes");
    int r = check_kind_fields(&w);
    if (!r) r = check_bounds(&w);
    if (r) return r;
    *out = w;
    return 0;
}
