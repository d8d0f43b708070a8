/* cchan bootstrap wire format: encoding and validation (see bootstrap_wire.h). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "bootstrap_wire.h"

#define ID_MAGIC 0x44494343u /* "CCID" */
#define ID_ROOT_OFFSET 16u   /* magic (4), version (2), reserved (2), session key (8) */

CCHAN_STATIC_ASSERT(ID_ROOT_OFFSET + CCHANI_BOOT_ADDR_WIRE_BYTES <= sizeof(cchan_unique_id_t),
                    "the unique id holds the root address");
CCHAN_STATIC_ASSERT(CCHANI_BOOT_RECORD_BYTES == 84 && CCHANI_BOOT_HELLO_BYTES == 96,
                    "peer record layout is part of the wire version");

static void put_le16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static uint16_t get_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

void cchani_put_le32(uint8_t *p, uint32_t v) {
    put_le16(p, (uint16_t)v);
    put_le16(p + 2, (uint16_t)(v >> 16));
}

uint32_t cchani_get_le32(const uint8_t *p) {
    return (uint32_t)get_le16(p) | ((uint32_t)get_le16(p + 2) << 16);
}

void cchani_put_le64(uint8_t *p, uint64_t v) {
    cchani_put_le32(p, (uint32_t)v);
    cchani_put_le32(p + 4, (uint32_t)(v >> 32));
}

uint64_t cchani_get_le64(const uint8_t *p) {
    return (uint64_t)cchani_get_le32(p) | ((uint64_t)cchani_get_le32(p + 4) << 32);
}

/* ---------------------------------------------------------------- header */

void cchani_boot_hdr_encode(const cchani_boot_hdr_t *hdr, uint8_t out[CCHANI_BOOT_HDR_BYTES]) {
    cchani_put_le32(out + 0, hdr->magic);
    put_le16(out + 4, hdr->version);
    put_le16(out + 6, hdr->type);
    cchani_put_le32(out + 8, (uint32_t)hdr->tag);
    cchani_put_le32(out + 12, (uint32_t)hdr->src);
    cchani_put_le64(out + 16, hdr->session);
    cchani_put_le64(out + 24, hdr->len);
}

static const char *type_name(uint16_t type) {
    switch (type) {
    case CCHANI_BOOT_HELLO: return "HELLO";
    case CCHANI_BOOT_TABLE: return "TABLE";
    case CCHANI_BOOT_P2P: return "P2P";
    case CCHANI_BOOT_COLL: return "COLL";
    case CCHANI_BOOT_ERROR: return "ERROR";
    case CCHANI_BOOT_AUTH: return "AUTH";
    case CCHANI_BOOT_BYE: return "BYE";
    case CCHANI_BOOT_WELCOME: return "WELCOME";
    case CCHANI_BOOT_BUSY: return "BUSY";
    default: return NULL;
    }
}

/* Largest payload a valid message of this type may announce; 0 for an unknown type. */
static uint64_t max_payload(uint16_t type, const cchani_boot_expect_t *ex) {
    switch (type) {
    case CCHANI_BOOT_HELLO: return CCHANI_BOOT_HELLO_BYTES;
    case CCHANI_BOOT_TABLE: return (uint64_t)ex->nranks * CCHANI_BOOT_RECORD_BYTES;
    case CCHANI_BOOT_P2P: return CCHANI_BOOT_MAX_PAYLOAD;
    case CCHANI_BOOT_COLL:
        return ex->coll_len != UINT64_MAX ? ex->coll_len : CCHANI_BOOT_MAX_PAYLOAD;
    case CCHANI_BOOT_ERROR: return 4 + CCHANI_BOOT_MAX_ERROR_TEXT;
    case CCHANI_BOOT_AUTH: return CCHANI_BOOT_PROOF_BYTES;
    case CCHANI_BOOT_BUSY: return CCHANI_BOOT_MAX_ERROR_TEXT;
    default: return 0;
    }
}

/* Types whose payload length is fixed: anything else is malformed, not merely oversized. */
static int exact_length(uint16_t type, const cchani_boot_expect_t *ex) {
    return type == CCHANI_BOOT_HELLO || type == CCHANI_BOOT_TABLE || type == CCHANI_BOOT_WELCOME ||
           (type == CCHANI_BOOT_COLL && ex->coll_len != UINT64_MAX);
}

static int check_payload_len(const cchani_boot_hdr_t *h, const cchani_boot_expect_t *ex) {
    uint64_t cap = max_payload(h->type, ex);
    if (exact_length(h->type, ex) && h->len != cap)
        return cchani_error(
            CCHAN_ERR_PROTOCOL, "bootstrap",
            "%s message from rank %d announces %llu payload bytes, expected exactly %llu",
            type_name(h->type), h->src, (unsigned long long)h->len, (unsigned long long)cap);
    if (h->len > cap)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "oversized %s message from rank %d: %llu payload bytes, limit %llu",
                            type_name(h->type), h->src, (unsigned long long)h->len,
                            (unsigned long long)cap);
    if (h->type == CCHANI_BOOT_ERROR && h->len < 4)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "ERROR message from rank %d too short (%llu bytes)", h->src,
                            (unsigned long long)h->len);
    return 0;
}

static cchani_boot_hdr_t hdr_fields(const uint8_t *buf) {
    cchani_boot_hdr_t h = {
        .magic = cchani_get_le32(buf + 0),
        .version = get_le16(buf + 4),
        .type = get_le16(buf + 6),
        .tag = (int32_t)cchani_get_le32(buf + 8),
        .src = (int32_t)cchani_get_le32(buf + 12),
        .session = cchani_get_le64(buf + 16),
        .len = cchani_get_le64(buf + 24),
    };
    return h;
}

static int check_magic(size_t len, const cchani_boot_hdr_t *h) {
    if (len < CCHANI_BOOT_HDR_BYTES)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap", "truncated header: %zu of %u bytes",
                            len, CCHANI_BOOT_HDR_BYTES);
    if (h->magic != CCHANI_BOOT_MAGIC)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "foreign message: magic 0x%08x is not cchan's 0x%08x", h->magic,
                            CCHANI_BOOT_MAGIC);
    return 0;
}

static int check_type_and_src(const cchani_boot_hdr_t *h, const cchani_boot_expect_t *ex) {
    if (!type_name(h->type))
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap", "unknown message type %u", h->type);
    if (h->src < 0 || h->src >= ex->nranks)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "%s message claims source rank %d, outside 0..%d", type_name(h->type),
                            h->src, ex->nranks - 1);
    return 0;
}

int cchani_boot_hdr_decode_open(const uint8_t *buf, size_t len, const cchani_boot_expect_t *ex,
                                cchani_boot_hdr_t *out) {
    cchani_boot_hdr_t h = len >= CCHANI_BOOT_HDR_BYTES ? hdr_fields(buf) : (cchani_boot_hdr_t){0};
    int rc = check_magic(len, &h);
    if (!rc) rc = check_type_and_src(&h, ex);
    if (rc) return rc;
    if (h.type != CCHANI_BOOT_AUTH && h.type != CCHANI_BOOT_HELLO && h.type != CCHANI_BOOT_ERROR &&
        h.type != CCHANI_BOOT_WELCOME && h.type != CCHANI_BOOT_BUSY)
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "a connection sent a %s message before proving the session key",
                            type_name(h.type));
    if (h.type == CCHANI_BOOT_HELLO && h.version != ex->version) {
        /* Another version's HELLO: only its proof is read and judged. */
        if (h.len < CCHANI_BOOT_PROOF_BYTES || h.len > CCHANI_BOOT_MAX_FOREIGN_HELLO)
            return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                                "HELLO message (wire version %u) from rank %d announces %llu "
                                "payload bytes",
                                h.version, h.src, (unsigned long long)h.len);
    } else {
        rc = check_payload_len(&h, ex);
        if (rc) return rc;
    }
    *out = h;
    return 0;
}

int cchani_boot_hdr_decode(const uint8_t *buf, size_t len, const cchani_boot_expect_t *ex,
                           cchani_boot_hdr_t *out) {
    cchani_boot_hdr_t h = len >= CCHANI_BOOT_HDR_BYTES ? hdr_fields(buf) : (cchani_boot_hdr_t){0};
    int rc = check_magic(len, &h);
    if (rc) return rc;
    if (h.version != ex->version)
        return cchani_error(
            CCHAN_ERR_VERSION, "bootstrap",
            "version mismatch: rank %d speaks bootstrap wire version %u, expected %u "
            "(mixed cchan installations?)",
            h.src, h.version, ex->version);
    rc = check_type_and_src(&h, ex);
    if (!rc) rc = check_payload_len(&h, ex);
    if (rc) return rc;
    *out = h;
    return 0;
}

/* ---------------------------------------------------------------- authentication */

#define SIP_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIP_ROUND                                                                                  \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = SIP_ROTL(v1, 13);                                                                     \
        v1 ^= v0;                                                                                  \
        v0 = SIP_ROTL(v0, 32);                                                                     \
        v2 += v3;                                                                                  \
        v3 = SIP_ROTL(v3, 16);                                                                     \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = SIP_ROTL(v3, 21);                                                                     \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = SIP_ROTL(v1, 17);                                                                     \
        v1 ^= v2;                                                                                  \
        v2 = SIP_ROTL(v2, 32);                                                                     \
    } while (0)

void cchani_sip_init(cchani_sip_t *s, uint64_t k0, uint64_t k1) {
    s->v[0] = 0x736f6d6570736575ull ^ k0;
    s->v[1] = 0x646f72616e646f6dull ^ k1;
    s->v[2] = 0x6c7967656e657261ull ^ k0;
    s->v[3] = 0x7465646279746573ull ^ k1;
    s->tail = 0;
    s->len = 0;
}

static void sip_block(cchani_sip_t *s, uint64_t m) {
    uint64_t v0 = s->v[0], v1 = s->v[1], v2 = s->v[2], v3 = s->v[3];
    v3 ^= m;
    SIP_ROUND;
    SIP_ROUND;
    v0 ^= m;
    s->v[0] = v0;
    s->v[1] = v1;
    s->v[2] = v2;
    s->v[3] = v3;
}

void cchani_sip_update(cchani_sip_t *s, const void *data, size_t len) {
    const uint8_t *in = (const uint8_t *)data;
    size_t i = 0;
    /* Bytes left over from the previous update complete a block first. */
    while ((s->len & 7) && i < len) {
        s->tail |= (uint64_t)in[i++] << (8 * (s->len & 7));
        if ((++s->len & 7) == 0) {
            sip_block(s, s->tail);
            s->tail = 0;
        }
    }
    for (; i + 8 <= len; i += 8, s->len += 8) sip_block(s, cchani_get_le64(in + i));
    for (; i < len; i++, s->len++) s->tail |= (uint64_t)in[i] << (8 * (s->len & 7));
}

uint64_t cchani_sip_final(cchani_sip_t *s) {
    uint64_t b = s->tail | (uint64_t)s->len << 56;
    sip_block(s, b);
    uint64_t v0 = s->v[0], v1 = s->v[1], v2 = s->v[2] ^ 0xff, v3 = s->v[3];
    SIP_ROUND;
    SIP_ROUND;
    SIP_ROUND;
    SIP_ROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t cchani_siphash(uint64_t k0, uint64_t k1, const void *data, size_t len) {
    cchani_sip_t s;
    cchani_sip_init(&s, k0, k1);
    cchani_sip_update(&s, data, len);
    return cchani_sip_final(&s);
}

uint64_t cchani_boot_proof(uint64_t session, char role, uint64_t nonce_c, uint64_t nonce_s,
                           int32_t prover, int32_t verifier) {
    uint8_t msg[8 + 8 + 8 + 4 + 4] = {(uint8_t)role, 'c', 'c', 'h', 'a', 'u', 't', 'h'};
    cchani_put_le64(msg + 8, nonce_c);
    cchani_put_le64(msg + 16, nonce_s);
    cchani_put_le32(msg + 24, (uint32_t)prover);
    cchani_put_le32(msg + 28, (uint32_t)verifier);
    /* The key is 64 bits: the second half is derived so that SipHash's 128-bit key is filled. */
    return cchani_siphash(session, session ^ 0x9e3779b97f4a7c15ull, msg, sizeof msg);
}

void cchani_boot_conn_key(uint64_t session, char dir, uint64_t nonce_c, uint64_t nonce_s,
                          int32_t connector, int32_t listener, cchani_boot_key_t *out) {
    uint8_t msg[8 + 8 + 8 + 4 + 4 + 1] = {(uint8_t)dir, 'c', 'c', 'f', 'r', 'a', 'm', 'e'};
    cchani_put_le64(msg + 8, nonce_c);
    cchani_put_le64(msg + 16, nonce_s);
    cchani_put_le32(msg + 24, (uint32_t)connector);
    cchani_put_le32(msg + 28, (uint32_t)listener);
    uint64_t k1 = session ^ 0x9e3779b97f4a7c15ull;
    msg[32] = 0;
    out->k0 = cchani_siphash(session, k1, msg, sizeof msg);
    msg[32] = 1;
    out->k1 = cchani_siphash(session, k1, msg, sizeof msg);
    out->seq = 0;
}

uint64_t cchani_boot_frame_mac(const cchani_boot_key_t *key,
                               const uint8_t hdr[CCHANI_BOOT_HDR_BYTES], const void *payload,
                               uint64_t len) {
    uint8_t pre[8 + CCHANI_BOOT_HDR_BYTES];
    cchani_put_le64(pre, key->seq);
    memcpy(pre + 8, hdr, CCHANI_BOOT_HDR_BYTES);
    memset(pre + 8 + CCHANI_BOOT_HDR_MAC_OFFSET, 0, 8); /* the MAC's own field */
    cchani_sip_t s;
    cchani_sip_init(&s, key->k0, key->k1);
    cchani_sip_update(&s, pre, sizeof pre);
    if (len) cchani_sip_update(&s, payload, (size_t)len);
    return cchani_sip_final(&s);
}

void cchani_boot_seal(cchani_boot_key_t *key, cchani_boot_hdr_t *h,
                      uint8_t out[CCHANI_BOOT_HDR_BYTES], const void *payload) {
    h->session = 0;
    cchani_boot_hdr_encode(h, out);
    h->session = cchani_boot_frame_mac(key, out, payload, h->len);
    cchani_put_le64(out + CCHANI_BOOT_HDR_MAC_OFFSET, h->session);
    key->seq++;
}

int cchani_boot_verify(cchani_boot_key_t *key, const uint8_t hdr[CCHANI_BOOT_HDR_BYTES],
                       const void *payload, uint64_t len) {
    uint64_t want = cchani_boot_frame_mac(key, hdr, payload, len);
    if (want != cchani_get_le64(hdr + CCHANI_BOOT_HDR_MAC_OFFSET)) {
        const char *type = type_name(get_le16(hdr + 6));
        return cchani_error(
            CCHAN_ERR_PROTOCOL, "bootstrap",
            "%s message #%llu from rank %d failed its authentication (MAC): altered "
            "in transit, replayed, or not sent by that rank",
            type ? type : "a", (unsigned long long)key->seq, (int32_t)cchani_get_le32(hdr + 12));
    }
    key->seq++;
    return 0;
}

void cchani_boot_sanitize(char *out, size_t n, const uint8_t *text, size_t len) {
    if (n == 0) return;
    size_t keep = len < n - 1 ? len : n - 1;
    if (keep > CCHANI_BOOT_MAX_RELAYED_TEXT) keep = CCHANI_BOOT_MAX_RELAYED_TEXT;
    size_t i = 0;
    for (; i < keep && text[i]; i++)
        out[i] = text[i] >= 0x20 && text[i] < 0x7f ? (char)text[i] : '?';
    out[i] = '\0';
}

/* ---------------------------------------------------------------- addresses */

void cchani_boot_addr_encode(const cchani_boot_addr_t *addr, uint8_t *out) {
    memset(out, 0, CCHANI_BOOT_ADDR_WIRE_BYTES);
    put_le16(out, (uint16_t)addr->sa.ss_family);
    if (addr->sa.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&addr->sa;
        put_le16(out + 2, ntohs(in->sin_port));
        memcpy(out + 4, &in->sin_addr, 4);
    } else if (addr->sa.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&addr->sa;
        put_le16(out + 2, ntohs(in6->sin6_port));
        memcpy(out + 4, &in6->sin6_addr, 16);
    }
}

int cchani_boot_addr_decode(const uint8_t *in, cchani_boot_addr_t *out) {
    cchani_boot_addr_t a;
    memset(&a, 0, sizeof a);
    uint16_t family = get_le16(in);
    uint16_t port = get_le16(in + 2);
    if (family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&a.sa;
        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        memcpy(&sin->sin_addr, in + 4, 4);
        a.len = sizeof *sin;
    } else if (family == AF_INET6) {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&a.sa;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(port);
        memcpy(&sin6->sin6_addr, in + 4, 16);
        a.len = sizeof *sin6;
    } else {
        return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap",
                            "address family %u is neither IPv4 nor IPv6", family);
    }
    if (port == 0) return cchani_error(CCHAN_ERR_PROTOCOL, "bootstrap", "address with port 0");
    *out = a;
    return 0;
}

const char *cchani_boot_addr_str(const cchani_boot_addr_t *addr,
                                 char buf[CCHANI_BOOT_ADDR_STR_BYTES]) {
    char host[INET6_ADDRSTRLEN] = "?";
    if (addr->sa.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&addr->sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        snprintf(buf, CCHANI_BOOT_ADDR_STR_BYTES, "%s:%u", host, ntohs(in->sin_port));
    } else if (addr->sa.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&addr->sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        snprintf(buf, CCHANI_BOOT_ADDR_STR_BYTES, "[%s]:%u", host, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, CCHANI_BOOT_ADDR_STR_BYTES, "(no address)");
    }
    return buf;
}

/* ---------------------------------------------------------------- unique id
 * Layout: magic (4), wire version (2), reserved (2), session key (8), root address (20); the rest
 * of the 128 bytes is zero. */

void cchani_boot_id_encode(const cchani_boot_id_t *id, cchan_unique_id_t *out) {
    memset(out, 0, sizeof *out);
    cchani_put_le32(out->internal, ID_MAGIC);
    put_le16(out->internal + 4, id->version);
    cchani_put_le64(out->internal + 8, id->session);
    cchani_boot_addr_encode(&id->root, out->internal + ID_ROOT_OFFSET);
}

int cchani_boot_id_decode(const cchan_unique_id_t *in, uint16_t version, cchani_boot_id_t *out) {
    if (cchani_get_le32(in->internal) != ID_MAGIC)
        return cchani_error(
            CCHAN_ERR_PROTOCOL, "bootstrap",
            "not a cchan unique id (bad magic; was it made by cchan_get_unique_id?)");
    cchani_boot_id_t id;
    id.version = get_le16(in->internal + 4);
    if (id.version != version)
        return cchani_error(CCHAN_ERR_VERSION, "bootstrap",
                            "unique id has bootstrap wire version %u, this process speaks %u",
                            id.version, version);
    id.session = cchani_get_le64(in->internal + 8);
    int rc = cchani_boot_addr_decode(in->internal + ID_ROOT_OFFSET, &id.root);
    if (rc) return cchani_error_wrap(rc, "bootstrap", "unique id holds an invalid root address");
    *out = id;
    return 0;
}

/* ---------------------------------------------------------------- peer records */

void cchani_boot_record_encode(const cchani_boot_peer_record_t *rec, uint8_t *out) {
    cchani_boot_addr_encode(&rec->listen, out);
    memset(out + CCHANI_BOOT_ADDR_WIRE_BYTES, 0, CCHANI_BOOT_HOSTNAME_BYTES);
    memcpy(out + CCHANI_BOOT_ADDR_WIRE_BYTES, rec->hostname,
           strnlen(rec->hostname, CCHANI_BOOT_HOSTNAME_BYTES - 1));
}

int cchani_boot_record_decode(const uint8_t *in, cchani_boot_peer_record_t *out) {
    cchani_boot_peer_record_t rec;
    int rc = cchani_boot_addr_decode(in, &rec.listen);
    if (rc) return rc;
    memcpy(rec.hostname, in + CCHANI_BOOT_ADDR_WIRE_BYTES, CCHANI_BOOT_HOSTNAME_BYTES);
    rec.hostname[CCHANI_BOOT_HOSTNAME_BYTES - 1] = '\0'; /* a peer's record is untrusted input */
    *out = rec;
    return 0;
}
