/* cchan_mem_import rejects malformed or foreign descriptors with an error that says why (rank 1
 * imports variations of rank 0's descriptor), and accepts the real one. */
#include "mem_desc.h"
#include "mem_test.h"

#define BYTES 20000

typedef void (*mutate_fn)(cchani_mem_wire_t *w);

static cchan_comm_t *comm;
static cchan_mem_desc_t good;

/* Imports good with `mutate` applied (and the checksum recomputed when `seal`), expecting status
 * and a message containing `part`. */
static void expect_rejected(const char *name, mutate_fn mutate, int seal, int status,
                            const char *part) {
    cchan_mem_desc_t d = good;
    cchani_mem_wire_t w;
    memcpy(&w, d.bytes, sizeof w);
    mutate(&w);
    memcpy(d.bytes, &w, sizeof w);
    if (seal) cchani_mem_desc_seal(&d);
    cchan_mem_t *m = NULL;
    int r = cchan_mem_import(comm, &d, &m);
    if (r != status || !strstr(cchan_last_error(), part) || m != NULL) {
        fprintf(stderr, "rank %d: %s: import returned %d (%s) '%s', want %d with '%s'\n", mt_rank,
                name, r, cchan_strerror(r), cchan_last_error(), status, part);
        exit(1);
    }
}

static void bad_magic(cchani_mem_wire_t *w) { w->magic ^= 1; }
static void bad_version(cchani_mem_wire_t *w) { w->version = CCHANI_MEM_DESC_VERSION + 1; }
static void flipped_bit(cchani_mem_wire_t *w) { w->size ^= 1ull << 40; }
static void truncated(cchani_mem_wire_t *w) { memset((uint8_t *)w + 40, 0, sizeof *w - 40); }
static void too_big(cchani_mem_wire_t *w) { w->size = w->alloc_bytes - w->offset + 1; }
static void empty(cchani_mem_wire_t *w) { w->size = 0; }
static void past_end(cchani_mem_wire_t *w) { w->offset = w->alloc_bytes + 4096; }
static void wrapping(cchani_mem_wire_t *w) { w->offset = UINT64_MAX - 10; }
static void huge_alloc(cchani_mem_wire_t *w) { w->alloc_bytes = 1ull << 63; }
static void wrong_host(cchani_mem_wire_t *w) { w->host_hash ^= 0x100; }
static void wrong_pid(cchani_mem_wire_t *w) { w->owner_pid += 1; }
static void wrong_session(cchani_mem_wire_t *w) { w->session ^= 1; }
static void wrong_rank(cchani_mem_wire_t *w) { w->owner_rank = 5; }
static void negative_rank(cchani_mem_wire_t *w) { w->owner_rank = -1; }
static void unknown_kind(cchani_mem_wire_t *w) { w->kind = 9; }
static void gpu_kind(cchani_mem_wire_t *w) {
    w->kind = CCHANI_MEM_CUDA_IPC;
    w->owner_fd = -1;
    w->device = 0;
    w->handle_bytes = CCHANI_MEM_HANDLE_BYTES;
}
static void host_with_device(cchani_mem_wire_t *w) { w->device = 1; }
static void odd_alloc(cchani_mem_wire_t *w) { w->alloc_bytes += 1; }
static void no_fd(cchani_mem_wire_t *w) { w->owner_fd = -1; }
static void stderr_fd(cchani_mem_wire_t *w) { w->owner_fd = 2; }
static void missing_fd(cchani_mem_wire_t *w) { w->owner_fd = 900; }
static void other_alloc(cchani_mem_wire_t *w) { w->key ^= 1; }
static void bigger_alloc(cchani_mem_wire_t *w) { w->alloc_bytes += 4096; }
static void reserved_byte(cchani_mem_wire_t *w) { w->zero[7] = 1; }
static void handle_bytes(cchani_mem_wire_t *w) { w->handle[0] = 1; }

static void rejections(void) {
    expect_rejected("bad magic", bad_magic, 1, CCHAN_ERR_PROTOCOL, "not a cchan memory descriptor");
    expect_rejected("bad version", bad_version, 1, CCHAN_ERR_VERSION, "descriptor version 2");
    expect_rejected("flipped bit", flipped_bit, 0, CCHAN_ERR_PROTOCOL, "truncated or corrupted");
    expect_rejected("truncated", truncated, 0, CCHAN_ERR_PROTOCOL, "truncated or corrupted");
    expect_rejected("size past the allocation", too_big, 1, CCHAN_ERR_RANGE, "-byte allocation");
    expect_rejected("empty", empty, 1, CCHAN_ERR_RANGE, "registers 0 bytes");
    expect_rejected("offset past the end", past_end, 1, CCHAN_ERR_RANGE, "-byte allocation");
    expect_rejected("wrapping offset", wrapping, 1, CCHAN_ERR_RANGE, "-byte allocation");
    expect_rejected("huge allocation", huge_alloc, 1, CCHAN_ERR_RANGE, "cannot be mapped");
    expect_rejected("wrong host", wrong_host, 1, CCHAN_ERR_PROTOCOL, "on host");
    expect_rejected("wrong pid", wrong_pid, 1, CCHAN_ERR_PROTOCOL, "but rank 0 is pid");
    expect_rejected("wrong session", wrong_session, 1, CCHAN_ERR_PROTOCOL, "another communicator");
    expect_rejected("wrong rank", wrong_rank, 1, CCHAN_ERR_PROTOCOL, "names rank 5 of a 2-rank");
    expect_rejected("negative rank", negative_rank, 1, CCHAN_ERR_PROTOCOL, "names rank -1");
    expect_rejected("unknown kind", unknown_kind, 1, CCHAN_ERR_PROTOCOL, "unknown memory kind 9");
    expect_rejected("gpu memory on the host platform", gpu_kind, 1, CCHAN_ERR_UNSUPPORTED,
                    "GPU memory");
    expect_rejected("host memory with a device", host_with_device, 1, CCHAN_ERR_PROTOCOL,
                    "names device 1");
    expect_rejected("partial page", odd_alloc, 1, CCHAN_ERR_PROTOCOL, "whole number of pages");
    expect_rejected("no fd", no_fd, 1, CCHAN_ERR_PROTOCOL, "has fd -1");
    expect_rejected("IPC handle on fd memory", handle_bytes, 1, CCHAN_ERR_PROTOCOL,
                    "carries an IPC handle");
    expect_rejected("reserved bytes", reserved_byte, 1, CCHAN_ERR_PROTOCOL, "nonzero reserved");
    /* These pass every check a descriptor can make about itself; the owner's fd tells. */
    expect_rejected("fd of another file", stderr_fd, 1, CCHAN_ERR_PROTOCOL,
                    "is not a sealed cchan memfd");
    expect_rejected("fd the owner does not have", missing_fd, 1, -EBADF, "pidfd_getfd");
    expect_rejected("another allocation", other_alloc, 1, CCHAN_ERR_PROTOCOL, "not allocation");
    expect_rejected("wrong allocation size", bigger_alloc, 1, CCHAN_ERR_PROTOCOL,
                    "descriptor says");
}

int main(void) {
    comm = mt_comm();
    MT_CHECK(cchan_comm_size(comm) == 2);
    cchan_mem_t *mem = NULL;
    MT_OK(cchan_mem_alloc(comm, BYTES, 0, &mem));
    mt_fill(cchan_mem_ptr(mem), BYTES, 77);
    cchan_mem_desc_t descs[2];
    cchan_mem_desc_t mine;
    MT_OK(cchan_mem_export(mem, &mine));
    MT_OK(cchan_bootstrap_allgather(cchan_comm_bootstrap(comm), &mine, descs, sizeof mine));
    good = descs[0];
    if (mt_rank == 1) {
        rejections();
        cchan_mem_t *m = NULL;
        MT_OK(cchan_mem_import(comm, &good, &m));
        MT_CHECK(cchan_mem_size(m) == BYTES && cchan_mem_rank(m) == 0);
        MT_CHECK(mt_mismatch(cchan_mem_ptr(m), BYTES, 77) == BYTES);
        MT_OK(cchan_mem_destroy(m));
    }
    mt_barrier(comm);
    MT_OK(cchan_mem_destroy(mem));
    mt_barrier(comm);
    if (mt_rank == 1) {
        /* The owner destroyed it: its fd is closed (or now another file). */
        cchan_mem_t *m = NULL;
        MT_CHECK(cchan_mem_import(comm, &good, &m) != 0 && m == NULL);
    }
    mt_barrier(comm);
    MT_OK(cchan_comm_destroy(comm));
    printf("rank %d: mem_desc_reject ok\n", mt_rank);
    return 0;
}
