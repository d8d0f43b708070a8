/* cchan bootstrap wire format: the unique id, the message header and the peer records that travel
 * between ranks (not installed).
 *
 * Everything is encoded explicitly in little-endian byte order, never by copying structs, so ranks
 * built by different compilers agree. The 32-byte header layout is frozen: every wire version
 * starts its messages with the same fields at the same offsets, so a receiver can always tell a
 * peer of its own session speaking another version (CCHAN_ERR_VERSION) from a foreign or garbage
 * message (CCHAN_ERR_PROTOCOL). Headers are validated before any payload memory is allocated.
 *
 * Authentication. The session key is never sent to a connection that has not proven it knows it.
 * A connection starts with a challenge-response in both directions; until it completes, the
 * session field carries a nonce (AUTH), zero (HELLO) or the connector's nonce (an ERROR turning
 * the connection away), never the key:
 *
 *   connector -> listener  AUTH   session = nonce_c, tag = listener's rank, no payload
 *   listener -> connector  AUTH   session = nonce_s, payload = proof('L')  (8 bytes)
 *   connector -> listener  HELLO  session = 0, payload = proof('C') (8), nranks (4), peer record
 *
 * proof(role) = SipHash-2-4 keyed by the session key over (role, nonce_c, nonce_s, prover's rank,
 * verifier's rank). The connector checks proof('L') before it sends anything else; the listener
 * acts on nothing but the AUTH and the HELLO until proof('C') checks out. From then on every
 * message of that connection carries the session key and is validated against it. The AUTH
 * exchange and the first 8 payload bytes of HELLO are frozen like the header, so that a rank of
 * another wire version can still prove it belongs to the job and be reported as a version mismatch.
 *
 *   offset  size  field
 *        0     4  magic "CCBT"
 *        4     2  wire version
 *        6     2  message type (cchani_boot_type)
 *        8     4  tag (P2P: the user's tag; COLL: collective sequence number)
 *       12     4  source rank
 *       16     8  session key (from the unique id)
 *       24     8  payload length in bytes
 */
#ifndef CCHAN_SRC_HOST_BOOTSTRAP_WIRE_H
#define CCHAN_SRC_HOST_BOOTSTRAP_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "internal.h"

#define CCHANI_BOOT_MAGIC 0x54424343u /* "CCBT" as little-endian bytes */
#define CCHANI_BOOT_WIRE_VERSION 2u
#define CCHANI_BOOT_HDR_BYTES 32u

/* Largest P2P payload and largest allgather contribution: bounds what an unexpected message can
 * make a receiver allocate. */
#define CCHANI_BOOT_MAX_PAYLOAD ((uint64_t)64 << 20)
#define CCHANI_BOOT_MAX_ERROR_TEXT 1024u
/* How much of a peer's ERROR text reaches a local error message (after sanitizing). */
#define CCHANI_BOOT_MAX_RELAYED_TEXT 400u
#define CCHANI_BOOT_PROOF_BYTES 8u
/* Largest HELLO of another wire version that is read to check its proof. */
#define CCHANI_BOOT_MAX_FOREIGN_HELLO 4096u
#define CCHANI_BOOT_HOSTNAME_BYTES 64u
/* Ranks are carried as non-negative int32 on the wire; this also bounds peer tables. */
#define CCHANI_BOOT_MAX_RANKS (1 << 20)

enum cchani_boot_type {
    CCHANI_BOOT_HELLO = 1, /* a rank introduces itself: cchani_boot_hello payload */
    CCHANI_BOOT_TABLE = 2, /* root -> ranks: every rank's peer record */
    CCHANI_BOOT_P2P = 3,   /* cchan_bootstrap_send payload */
    CCHANI_BOOT_COLL = 4,  /* allgather contribution (to root) or result (from root) */
    CCHANI_BOOT_ERROR = 5, /* the sender failed; payload: status (4 bytes) + reason text */
    CCHANI_BOOT_AUTH = 6,  /* challenge-response at connection start (see above) */
    CCHANI_BOOT_BYE = 7    /* the sender is destroying its bootstrap: its connections end cleanly */
};

typedef struct cchani_boot_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    int32_t tag;
    int32_t src;
    uint64_t session;
    uint64_t len;
} cchani_boot_hdr_t;

/* What a receiver accepts. */
typedef struct cchani_boot_expect {
    uint64_t session;
    uint16_t version;
    int nranks;
    /* Exact payload length of a COLL message when the receiver knows it (a rank waiting for an
     * allgather result), else UINT64_MAX: at most CCHANI_BOOT_MAX_PAYLOAD. */
    uint64_t coll_len;
} cchani_boot_expect_t;

CCHANI_HIDDEN void cchani_boot_hdr_encode(const cchani_boot_hdr_t *hdr,
                                          uint8_t out[CCHANI_BOOT_HDR_BYTES]);
/* Parses and validates len received header bytes: truncation, magic, session key, version, type,
 * source rank and the payload length allowed for the type. Returns 0 or CCHAN_ERR_PROTOCOL /
 * CCHAN_ERR_VERSION with the reason in the last error; *out is written only on success. */
CCHANI_HIDDEN int cchani_boot_hdr_decode(const uint8_t *buf, size_t len,
                                         const cchani_boot_expect_t *expect,
                                         cchani_boot_hdr_t *out);
/* The same for a connection that has not authenticated yet: magic, source rank, and only the
 * types and lengths such a connection may send (AUTH, HELLO, ERROR); the session field is a nonce
 * and the version is judged after the proof, so neither is checked here. */
CCHANI_HIDDEN int cchani_boot_hdr_decode_open(const uint8_t *buf, size_t len,
                                              const cchani_boot_expect_t *expect,
                                              cchani_boot_hdr_t *out);

/* SipHash-2-4 of data under the 128-bit key (k0, k1). */
CCHANI_HIDDEN uint64_t cchani_siphash(uint64_t k0, uint64_t k1, const void *data, size_t len);
/* The proof of the handshake above: role 'L' (listener) or 'C' (connector). */
CCHANI_HIDDEN uint64_t cchani_boot_proof(uint64_t session, char role, uint64_t nonce_c,
                                         uint64_t nonce_s, int32_t prover, int32_t verifier);
/* Copies at most CCHANI_BOOT_MAX_RELAYED_TEXT bytes of untrusted text into out (n bytes, always
 * terminated), replacing anything but printable ASCII with '?'. */
CCHANI_HIDDEN void cchani_boot_sanitize(char *out, size_t n, const uint8_t *text, size_t len);

/* ---------------------------------------------------------------- addresses and the unique id */

/* An IPv4 or IPv6 socket address. */
typedef struct cchani_boot_addr {
    struct sockaddr_storage sa;
    socklen_t len;
} cchani_boot_addr_t;

#define CCHANI_BOOT_ADDR_WIRE_BYTES 20u /* family (2), port (2), address (16) */
#define CCHANI_BOOT_ADDR_STR_BYTES 64u

CCHANI_HIDDEN void cchani_boot_addr_encode(const cchani_boot_addr_t *addr, uint8_t *out);
CCHANI_HIDDEN int cchani_boot_addr_decode(const uint8_t *in, cchani_boot_addr_t *out);
/* "1.2.3.4:5" or "[::1]:5". */
CCHANI_HIDDEN const char *cchani_boot_addr_str(const cchani_boot_addr_t *addr,
                                               char buf[CCHANI_BOOT_ADDR_STR_BYTES]);

typedef struct cchani_boot_id {
    uint16_t version;
    uint64_t session;
    cchani_boot_addr_t root;
} cchani_boot_id_t;

CCHANI_HIDDEN void cchani_boot_id_encode(const cchani_boot_id_t *id, cchan_unique_id_t *out);
/* Validates magic, version and address; CCHAN_ERR_PROTOCOL / CCHAN_ERR_VERSION otherwise. */
CCHANI_HIDDEN int cchani_boot_id_decode(const cchan_unique_id_t *in, uint16_t version,
                                        cchani_boot_id_t *out);

/* ---------------------------------------------------------------- peer records */

/* What every rank tells the root in its HELLO and the root repeats to all in the TABLE. */
typedef struct cchani_boot_peer_record {
    cchani_boot_addr_t listen; /* where the rank accepts point-to-point connections */
    char hostname[CCHANI_BOOT_HOSTNAME_BYTES];
} cchani_boot_peer_record_t;

#define CCHANI_BOOT_RECORD_BYTES (CCHANI_BOOT_ADDR_WIRE_BYTES + CCHANI_BOOT_HOSTNAME_BYTES)
/* proof + nranks + record */
#define CCHANI_BOOT_HELLO_BYTES (CCHANI_BOOT_PROOF_BYTES + 4u + CCHANI_BOOT_RECORD_BYTES)

CCHANI_HIDDEN void cchani_boot_record_encode(const cchani_boot_peer_record_t *rec, uint8_t *out);
CCHANI_HIDDEN int cchani_boot_record_decode(const uint8_t *in, cchani_boot_peer_record_t *out);

/* Little-endian field access, shared by the encoders above and the bootstrap's payloads. */
CCHANI_HIDDEN void cchani_put_le32(uint8_t *p, uint32_t v);
CCHANI_HIDDEN uint32_t cchani_get_le32(const uint8_t *p);
CCHANI_HIDDEN void cchani_put_le64(uint8_t *p, uint64_t v);
CCHANI_HIDDEN uint64_t cchani_get_le64(const uint8_t *p);

#endif /* CCHAN_SRC_HOST_BOOTSTRAP_WIRE_H */
