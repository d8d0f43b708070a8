/* Fuzz target for cchan_mem_import: descriptors built from fuzz input either as raw bytes, as byte
 * edits of a real descriptor, or as field edits with the checksum recomputed (so that the checks
 * behind the checksum are reached too). Property: import never crashes, and succeeds only for a
 * descriptor that is exactly one of the real ones, returning that registration's memory. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan/cchan.h"
#include "mem_desc.h"

#define NREAL 2

static cchan_comm_t *comm;
static cchan_mem_t *real[NREAL];
static cchan_mem_desc_t real_desc[NREAL];

static int copy_allgather(void *ctx, const void *send, void *recv, size_t bytes) {
    (void)ctx;
    memcpy(recv, send, bytes);
    return 0;
}

static void die(const char *what) {
    fprintf(stderr, "mem_import_fuzz: %s: %s\n", what, cchan_last_error());
    abort();
}

static void teardown(void) {
    for (int i = NREAL - 1; i >= 0; i--) cchan_mem_destroy(real[i]);
    cchan_comm_destroy(comm);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    cchan_bootstrap_t *bs = NULL;
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST;
    if (cchan_bootstrap_create_custom(0, 1, copy_allgather, NULL, &bs) ||
        cchan_comm_create(bs, &cfg, &comm))
        die("communicator");
    if (cchan_mem_alloc(comm, 3 * 4096, 0, &real[0]) ||
        cchan_mem_register(comm, (uint8_t *)cchan_mem_ptr(real[0]) + 100, 5000, 0, &real[1]))
        die("memory");
    for (int i = 0; i < NREAL; i++)
        if (cchan_mem_export(real[i], &real_desc[i])) die("export");
    atexit(teardown);
    return 0;
}

/* Interesting values for 64-bit fields: bounds of the real allocation and of the types. */
static uint64_t pick_value(uint8_t sel, uint64_t cur) {
    switch (sel % 12) {
    case 0: return 0;
    case 1: return 1;
    case 2: return cur + 1;
    case 3: return cur - 1;
    case 4: return UINT64_MAX;
    case 5: return UINT64_MAX / 2;
    case 6: return 4096;
    case 7: return 3 * 4096;
    case 8: return cur ^ (1ull << (sel % 64));
    case 9: return (uint64_t)INT32_MAX + 1;
    case 10: return 100;
    default: return cur * 2;
    }
}

/* Field edits: each pair of input bytes names a field and a value; then the checksum is redone. */
static void edit_fields(cchan_mem_desc_t *d, const uint8_t *data, size_t size) {
    cchani_mem_wire_t w;
    memcpy(&w, d->bytes, sizeof w);
    for (size_t i = 0; i + 1 < size; i += 2) {
        uint8_t v = data[i + 1];
        switch (data[i] % 14) {
        case 0: w.kind = v % 5; break;
        case 1: w.owner_rank = (int8_t)v; break;
        case 2: w.owner_pid = (int32_t)pick_value(v, (uint64_t)w.owner_pid); break;
        case 3: w.owner_fd = (int8_t)v; break;
        case 4: w.device = (int8_t)v; break;
        case 5: w.handle_bytes = v; break;
        case 6: w.host_hash = pick_value(v, w.host_hash); break;
        case 7: w.session = pick_value(v, w.session); break;
        case 8: w.key = pick_value(v, w.key); break;
        case 9: w.alloc_bytes = pick_value(v, w.alloc_bytes); break;
        case 10: w.offset = pick_value(v, w.offset); break;
        case 11: w.size = pick_value(v, w.size); break;
        case 12: w.handle[v % sizeof w.handle] ^= 1; break;
        default: w.zero[v % sizeof w.zero] ^= 1; break;
        }
    }
    memcpy(d->bytes, &w, sizeof w);
    cchani_mem_desc_seal(d);
}

static void build(const uint8_t *data, size_t size, cchan_mem_desc_t *d) {
    uint8_t mode = size ? data[0] : 0;
    const uint8_t *rest = size ? data + 1 : data;
    size_t n = size ? size - 1 : 0;
    *d = real_desc[(mode >> 2) % NREAL];
    switch (mode & 3) {
    case 0: /* raw bytes, zero-filled when short (a truncated descriptor) */
        memset(d->bytes, 0, sizeof d->bytes);
        memcpy(d->bytes, rest, n < sizeof d->bytes ? n : sizeof d->bytes);
        break;
    case 1: /* byte edits of a real descriptor, checksum left as it was */
        for (size_t i = 0; i + 1 < n; i += 2) d->bytes[rest[i]] ^= rest[i + 1];
        break;
    default: edit_fields(d, rest, n); break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cchan_mem_desc_t d;
    build(data, size, &d);
    cchan_mem_t *m = NULL;
    int r = cchan_mem_import(comm, &d, &m);
    if (r == 0) {
        int match = -1;
        for (int i = 0; i < NREAL; i++)
            if (memcmp(d.bytes, real_desc[i].bytes, sizeof d.bytes) == 0) match = i;
        if (match < 0) die("a descriptor that is none of the real ones was accepted");
        if (cchan_mem_ptr(m) != cchan_mem_ptr(real[match]) ||
            cchan_mem_size(m) != cchan_mem_size(real[match]))
            die("an import maps other memory than its registration");
        if (cchan_mem_destroy(m)) die("destroy");
    } else if (r > 0 || m != NULL || cchan_last_error()[0] == '\0') {
        die("a rejection without a negative status and a message");
    }
    return 0;
}
