/* Fuzz target for the bootstrap's message parsing: the header validator (which runs on every byte a
 * peer or a stranger sends before anything is allocated), peer records and unique ids.
 *
 * Input layout: byte 0 selects what the receiver expects, so that random inputs also reach the
 * checks behind the magic: bit 0 stamps the right magic into the input, bit 1 takes its version
 * as valid, bit 2 makes the 8 bytes after the
 * header an exact allgather-result size; bits 3-7 are the number of ranks minus one. The rest is
 * the received bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap_wire.h"

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void check(int ok) {
    if (!ok) abort();
}

static uint64_t limit(const cchani_boot_hdr_t *h, const cchani_boot_expect_t *ex) {
    switch (h->type) {
    case CCHANI_BOOT_HELLO: return CCHANI_BOOT_HELLO_BYTES;
    case CCHANI_BOOT_TABLE: return (uint64_t)ex->nranks * CCHANI_BOOT_RECORD_BYTES;
    case CCHANI_BOOT_COLL:
        return ex->coll_len != UINT64_MAX ? ex->coll_len : CCHANI_BOOT_MAX_PAYLOAD;
    case CCHANI_BOOT_ERROR: return 4 + CCHANI_BOOT_MAX_ERROR_TEXT;
    case CCHANI_BOOT_AUTH: return CCHANI_BOOT_PROOF_BYTES;
    case CCHANI_BOOT_BUSY: return CCHANI_BOOT_MAX_ERROR_TEXT;
    case CCHANI_BOOT_BYE:
    case CCHANI_BOOT_WELCOME: return 0;
    default: return CCHANI_BOOT_MAX_PAYLOAD;
    }
}

/* An accepted header is within every documented limit and re-encodes to the same bytes. data is a
 * private copy of the input, exactly size bytes. */
static void fuzz_header(uint8_t *data, size_t size, uint8_t mode) {
    cchani_boot_expect_t ex = {0x1234567890abcdefull, CCHANI_BOOT_WIRE_VERSION, 1 + (mode >> 3),
                               UINT64_MAX};
    if (size >= 4 && (mode & 1)) memcpy(data, "CCBT", 4);
    if (size >= CCHANI_BOOT_HDR_BYTES && (mode & 2))
        ex.version = (uint16_t)(data[4] | data[5] << 8);
    if (size >= CCHANI_BOOT_HDR_BYTES + 8 && (mode & 4))
        ex.coll_len = le64(data + CCHANI_BOOT_HDR_BYTES);
    cchani_boot_hdr_t h;
    memset(&h, 0xa5, sizeof h);
    int rc = cchani_boot_hdr_decode(data, size, &ex, &h);
    if (rc) {
        check(rc == CCHAN_ERR_PROTOCOL || rc == CCHAN_ERR_VERSION);
        check(cchan_last_error()[0] != '\0');
        return;
    }
    check(size >= CCHANI_BOOT_HDR_BYTES);
    check(h.magic == CCHANI_BOOT_MAGIC && h.version == ex.version);
    check(h.type >= CCHANI_BOOT_HELLO && h.type <= CCHANI_BOOT_BUSY);
    check(h.src >= 0 && h.src < ex.nranks);
    check(h.len <= limit(&h, &ex));
    uint8_t again[CCHANI_BOOT_HDR_BYTES];
    cchani_boot_hdr_encode(&h, again);
    check(memcmp(again, data, sizeof again) == 0);
    /* Bytes made without the key never pass the MAC (a chance of 2^-64 per input). */
    cchani_boot_key_t key;
    cchani_boot_conn_key(ex.session, 'C', 1, 2, 1, 0, &key);
    size_t body = size - CCHANI_BOOT_HDR_BYTES;
    check(cchani_boot_verify(&key, data, data + CCHANI_BOOT_HDR_BYTES,
                             h.len < body ? h.len : body) == CCHAN_ERR_PROTOCOL);
    check(key.seq == 0);
}

/* What an unauthenticated connection may send: only the handshake's types and an ERROR, within
 * their limits (another version's HELLO: its proof and at most CCHANI_BOOT_MAX_FOREIGN_HELLO). */
static void fuzz_open_header(const uint8_t *data, size_t size, uint8_t mode) {
    cchani_boot_expect_t ex = {0x1234567890abcdefull, CCHANI_BOOT_WIRE_VERSION, 1 + (mode >> 3),
                               UINT64_MAX};
    cchani_boot_hdr_t h;
    int rc = cchani_boot_hdr_decode_open(data, size, &ex, &h);
    if (rc) {
        check(rc == CCHAN_ERR_PROTOCOL);
        return;
    }
    check(h.type == CCHANI_BOOT_AUTH || h.type == CCHANI_BOOT_HELLO ||
          h.type == CCHANI_BOOT_ERROR || h.type == CCHANI_BOOT_WELCOME ||
          h.type == CCHANI_BOOT_BUSY);
    check(h.src >= 0 && h.src < ex.nranks);
    check(h.len <= (h.type == CCHANI_BOOT_HELLO ? CCHANI_BOOT_MAX_FOREIGN_HELLO : limit(&h, &ex)));
    char text[64];
    cchani_boot_sanitize(text, sizeof text, data, size);
    for (size_t i = 0; text[i]; i++) check(text[i] >= 0x20 && text[i] < 0x7f);
}

static void fuzz_record(const uint8_t *data, size_t size) {
    if (size < CCHANI_BOOT_RECORD_BYTES) return;
    cchani_boot_peer_record_t rec;
    if (cchani_boot_record_decode(data, &rec)) return;
    check(strlen(rec.hostname) < CCHANI_BOOT_HOSTNAME_BYTES);
    check(rec.listen.sa.ss_family == AF_INET || rec.listen.sa.ss_family == AF_INET6);
    uint8_t again[CCHANI_BOOT_RECORD_BYTES];
    cchani_boot_record_encode(&rec, again);
    /* Family, port and the address bytes the family uses survive a round trip. */
    size_t used = rec.listen.sa.ss_family == AF_INET ? 8 : CCHANI_BOOT_ADDR_WIRE_BYTES;
    check(memcmp(again, data, used) == 0);
}

static void fuzz_unique_id(const uint8_t *data, size_t size) {
    cchan_unique_id_t id;
    memset(&id, 0, sizeof id);
    memcpy(id.internal, data, size < sizeof id.internal ? size : sizeof id.internal);
    cchani_boot_id_t out;
    if (cchani_boot_id_decode(&id, CCHANI_BOOT_WIRE_VERSION, &out)) return;
    cchan_unique_id_t again;
    cchani_boot_id_encode(&out, &again);
    cchani_boot_id_t twice;
    check(cchani_boot_id_decode(&again, CCHANI_BOOT_WIRE_VERSION, &twice) == 0);
    check(twice.session == out.session && twice.root.len == out.root.len);
    check(memcmp(&twice.root.sa, &out.root.sa, out.root.len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    uint8_t *copy = calloc(1, size - 1 ? size - 1 : 1); /* exactly the input: ASan sees overreads */
    if (!copy) return 0;
    memcpy(copy, data + 1, size - 1);
    fuzz_header(copy, size - 1, data[0]);
    memcpy(copy, data + 1, size - 1);
    if (size - 1 >= 4 && (data[0] & 1)) memcpy(copy, "CCBT", 4);
    fuzz_open_header(copy, size - 1, data[0]);
    free(copy);
    fuzz_record(data + 1, size - 1);
    fuzz_unique_id(data + 1, size - 1);
    return 0;
}
