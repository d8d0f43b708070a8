/* cchan bootstrap wire format: the unique id, the message header and the peer records that travel
 * between ranks (not installed).
 *
 * Everything is encoded explicitly in little-endian byte order, never by copying structs, so ranks
 * built by different compilers agree. The 32-byte header layout is frozen: every wire version
 * starts its messages with the same fields at the same offsets, so a receiver can always tell a
 * peer of its own session speaking another version (CCHAN_ERR_VERSION) from a foreign or garbage
 * message (CCHAN_ERR_PROTOCOL). Headers are validated before any payload memory is allocated.
 *
 * Authentication. The session key never travels: not in the handshake, not in any message after
 * it. A connection starts with a challenge-response in both directions, and every message after
 * the AUTH exchange carries a MAC under a key of its own connection and direction instead:
 *
 *   connector -> listener  AUTH     mac field = nonce_c, tag = listener's rank, no payload
 *   listener -> connector  AUTH     mac field = nonce_s, payload = proof('L')  (8 bytes)
 *   connector -> listener  HELLO    MAC, payload = proof('C') (8), nranks (4), peer record
 *   listener -> connector  WELCOME  MAC, no payload: admitted
 *   ... then TABLE, P2P, COLL, ERROR, BYE, each with its MAC
 *
 * Instead of its AUTH answer or its WELCOME the listener may turn the connector away with an
 * ERROR (final: the text says why) or a BUSY (try again later: the listener shed it under load),
 * both with mac field = nonce_c, so that the connector knows the answer is to its own request; a
 * BUSY connector retries with backoff until its deadline.
 *
 * proof(role) = SipHash-2-4 keyed by the session key over (role, nonce_c, nonce_s, prover's rank,
 * verifier's rank). The connector checks proof('L') before it sends anything else; the listener
 * acts on nothing but the AUTH and the HELLO until proof('C') checks out.
 *
 * MAC = SipHash-2-4 keyed by K(direction) over (sequence number (8), the header with its mac
 * field zeroed, the payload), where K = two SipHash-2-4 outputs of the session key over
 * (direction 'C' connector->listener or 'L' back, nonce_c, nonce_s, connector, listener), and the
 * sequence number counts that direction's messages from 0 (the HELLO, the WELCOME). Fresh nonces
 * make every connection's keys new: a captured message is worth nothing in another connection or
 * another run that reuses the session key, and within its connection a replayed, reordered,
 * altered or injected message fails its MAC. Frames are not encrypted.
 *
 * The AUTH exchange and the first 8 payload bytes of HELLO are frozen like the header, so that a
 * rank of another wire version can still prove it belongs to the job and be reported as a version
 * mismatch.
 *
 *   offset  size  field
 *        0     4  magic "CCBT"
 *        4     2  wire version
 *        6     2  message type (cchani_boot_type)
 *        8     4  tag (P2P: the user's tag; COLL: collective sequence number)
 *       12     4  source rank
 *       16     8  MAC (or a nonce, see above); the struct field keeps the name `session`
 *       24     8  payload length in bytes
 */
#ifndef CCHAN_SRC_HOST_BOOTSTRAP_WIRE_H
#define CCHAN_SRC_HOST_BOOTSTRAP_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "internal.h"

#define CCHANI_BOOT_MAGIC 0x54424343u /* "CCBT" as little-endian bytes */
#define CCHANI_BOOT_WIRE_VERSION 3u
#define CCHANI_BOOT_HDR_BYTES 32u
#define CCHANI_BOOT_HDR_MAC_OFFSET 16u

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
    CCHANI_BOOT_BYE = 7,   /* the sender is destroying its bootstrap: its connections end cleanly */
    CCHANI_BOOT_WELCOME = 8, /* listener -> connector: the HELLO was accepted */
    CCHANI_BOOT_BUSY = 9 /* listener -> connector: turned away under load, retry; payload: text */
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
    uint64_t session; /* the key that proofs and MAC keys derive from; never on the wire */
    uint16_t version;
    int nranks;
    /* Exact payload length of a COLL message when the receiver knows it (a rank waiting for an
     * allgather result), else UINT64_MAX: at most CCHANI_BOOT_MAX_PAYLOAD. */
    uint64_t coll_len;
} cchani_boot_expect_t;

CCHANI_HIDDEN void cchani_boot_hdr_encode(const cchani_boot_hdr_t *hdr,
                                          uint8_t out[CCHANI_BOOT_HDR_BYTES]);
/* Parses and validates len received header bytes of an authenticated connection: truncation,
 * magic, version, type, source rank and the payload length allowed for the type (the MAC is
 * checked once the payload is in: cchani_boot_verify). Returns 0 or CCHAN_ERR_PROTOCOL /
 * CCHAN_ERR_VERSION with the reason in the last error; *out is written only on success. */
CCHANI_HIDDEN int cchani_boot_hdr_decode(const uint8_t *buf, size_t len,
                                         const cchani_boot_expect_t *expect,
                                         cchani_boot_hdr_t *out);
/* The same for a connection that has not authenticated yet: magic, source rank, and only the
 * types and lengths such a connection may see (AUTH, HELLO, ERROR, and the answers WELCOME and
 * BUSY); the mac field is a nonce or a MAC checked later, and the version is judged after the
 * proof, so neither is checked here. */
CCHANI_HIDDEN int cchani_boot_hdr_decode_open(const uint8_t *buf, size_t len,
                                              const cchani_boot_expect_t *expect,
                                              cchani_boot_hdr_t *out);

/* SipHash-2-4 of data under the 128-bit key (k0, k1). */
CCHANI_HIDDEN uint64_t cchani_siphash(uint64_t k0, uint64_t k1, const void *data, size_t len);
/* SipHash-2-4 over data given in pieces. */
typedef struct cchani_sip {
    uint64_t v[4];
    uint64_t tail; /* bytes of an incomplete block */
    uint64_t len;
} cchani_sip_t;
CCHANI_HIDDEN void cchani_sip_init(cchani_sip_t *s, uint64_t k0, uint64_t k1);
CCHANI_HIDDEN void cchani_sip_update(cchani_sip_t *s, const void *data, size_t len);
CCHANI_HIDDEN uint64_t cchani_sip_final(cchani_sip_t *s);
/* The proof of the handshake above: role 'L' (listener) or 'C' (connector). */
CCHANI_HIDDEN uint64_t cchani_boot_proof(uint64_t session, char role, uint64_t nonce_c,
                                         uint64_t nonce_s, int32_t prover, int32_t verifier);
/* One direction of one connection: its MAC key and the sequence number of its next message. */
typedef struct cchani_boot_key {
    uint64_t k0, k1;
    uint64_t seq;
} cchani_boot_key_t;
/* K(dir) above; seq starts at 0. */
CCHANI_HIDDEN void cchani_boot_conn_key(uint64_t session, char dir, uint64_t nonce_c,
                                        uint64_t nonce_s, int32_t connector, int32_t listener,
                                        cchani_boot_key_t *out);
/* The MAC of the message with header bytes hdr (mac field ignored) and payload, as message number
 * key->seq of its direction. */
CCHANI_HIDDEN uint64_t cchani_boot_frame_mac(const cchani_boot_key_t *key,
                                             const uint8_t hdr[CCHANI_BOOT_HDR_BYTES],
                                             const void *payload, uint64_t len);
/* Encodes h with its MAC into out (h->session receives the MAC) and counts the message. */
CCHANI_HIDDEN void cchani_boot_seal(cchani_boot_key_t *key, cchani_boot_hdr_t *h,
                                    uint8_t out[CCHANI_BOOT_HDR_BYTES], const void *payload);
/* Checks a received message's MAC and counts it: 0 or CCHAN_ERR_PROTOCOL naming it. */
CCHANI_HIDDEN int cchani_boot_verify(cchani_boot_key_t *key,
                                     const uint8_t hdr[CCHANI_BOOT_HDR_BYTES], const void *payload,
                                     uint64_t len);
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
