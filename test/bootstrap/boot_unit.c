/* Unit tests of the bootstrap's wire format and environment parsing (internal functions). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bootstrap.h"

/* ---------------------------------------------------------------- helpers */

static cchani_boot_addr_t ipv4(const char *text, uint16_t port) {
    cchani_boot_addr_t a;
    memset(&a, 0, sizeof a);
    struct sockaddr_in *in = (struct sockaddr_in *)&a.sa;
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    inet_pton(AF_INET, text, &in->sin_addr);
    a.len = sizeof *in;
    return a;
}

static cchani_boot_addr_t ipv6(const char *text, uint16_t port) {
    cchani_boot_addr_t a;
    memset(&a, 0, sizeof a);
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a.sa;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    inet_pton(AF_INET6, text, &in6->sin6_addr);
    a.len = sizeof *in6;
    return a;
}

static void assert_error(int rc, int status, const char *words) {
    assert_int_equal(rc, status);
    if (!strstr(cchan_last_error(), words)) fail_msg("'%s' not in '%s'", words, cchan_last_error());
}

/* ---------------------------------------------------------------- unique id */

static void check_id_round_trip(const cchani_boot_addr_t *root) {
    cchani_boot_id_t in = {
        .version = CCHANI_BOOT_WIRE_VERSION, .session = 0x0123456789abcdefull, .root = *root};
    cchan_unique_id_t wire;
    cchani_boot_id_encode(&in, &wire);
    cchani_boot_id_t out;
    assert_int_equal(cchani_boot_id_decode(&wire, CCHANI_BOOT_WIRE_VERSION, &out), 0);
    assert_int_equal(out.version, in.version);
    assert_true(out.session == in.session);
    char a[CCHANI_BOOT_ADDR_STR_BYTES], b[CCHANI_BOOT_ADDR_STR_BYTES];
    assert_string_equal(cchani_boot_addr_str(&out.root, a), cchani_boot_addr_str(root, b));
    assert_int_equal(out.root.len, root->len);
}

static void test_id_round_trip(void **state) {
    cchani_boot_addr_t v4 = ipv4("10.1.2.3", 40000), v6 = ipv6("fe80::1:2", 65535);
    check_id_round_trip(&v4);
    check_id_round_trip(&v6);
    char s[CCHANI_BOOT_ADDR_STR_BYTES];
    assert_string_equal(cchani_boot_addr_str(&v4, s), "10.1.2.3:40000");
    assert_string_equal(cchani_boot_addr_str(&v6, s), "[fe80::1:2]:65535");
}

static void test_id_rejections(void **state) {
    cchani_boot_addr_t root = ipv4("127.0.0.1", 1234);
    cchani_boot_id_t id = {.version = 3, .session = 1, .root = root}, out;
    cchan_unique_id_t wire;
    cchani_boot_id_encode(&id, &wire);
    assert_error(cchani_boot_id_decode(&wire, 4, &out), CCHAN_ERR_VERSION, "version 3");
    cchan_unique_id_t bad = wire;
    bad.internal[0] ^= 0xff;
    assert_error(cchani_boot_id_decode(&bad, 3, &out), CCHAN_ERR_PROTOCOL, "not a cchan unique id");
    bad = wire;
    bad.internal[16] = 99; /* address family */
    assert_error(cchani_boot_id_decode(&bad, 3, &out), CCHAN_ERR_PROTOCOL, "invalid root address");
    memset(&bad, 0, sizeof bad);
    assert_error(cchani_boot_id_decode(&bad, 3, &out), CCHAN_ERR_PROTOCOL, "not a cchan unique id");
}

static void test_get_unique_id(void **state) {
    setenv("CCHAN_BOOTSTRAP_ADDR", "127.0.0.1", 1);
    setenv("CCHAN_BOOTSTRAP_PORT", "23456", 1);
    cchan_unique_id_t a, b;
    assert_int_equal(cchan_get_unique_id(&a), 0);
    assert_int_equal(cchan_get_unique_id(&b), 0);
    cchani_boot_id_t ida, idb;
    assert_int_equal(cchani_boot_id_decode(&a, CCHANI_BOOT_WIRE_VERSION, &ida), 0);
    assert_int_equal(cchani_boot_id_decode(&b, CCHANI_BOOT_WIRE_VERSION, &idb), 0);
    char s[CCHANI_BOOT_ADDR_STR_BYTES];
    assert_string_equal(cchani_boot_addr_str(&ida.root, s), "127.0.0.1:23456");
    assert_true(ida.session != idb.session); /* random per id */
    unsetenv("CCHAN_BOOTSTRAP_PORT");
    assert_int_equal(cchan_get_unique_id(&a), 0); /* a free port */
    assert_int_equal(cchani_boot_id_decode(&a, CCHANI_BOOT_WIRE_VERSION, &ida), 0);
    assert_true(ntohs(((struct sockaddr_in *)&ida.root.sa)->sin_port) != 0);
    setenv("CCHAN_BOOTSTRAP_PORT", "70000", 1);
    assert_error(cchan_get_unique_id(&a), -EINVAL, "CCHAN_BOOTSTRAP_PORT");
    unsetenv("CCHAN_BOOTSTRAP_PORT");
    unsetenv("CCHAN_BOOTSTRAP_ADDR");
    assert_int_equal(cchan_get_unique_id(NULL), -EINVAL);
}

/* ---------------------------------------------------------------- header */

static const cchani_boot_expect_t expect = {0x5e55105, CCHANI_BOOT_WIRE_VERSION, 4, UINT64_MAX};

static cchani_boot_hdr_t valid_hdr(void) {
    return (cchani_boot_hdr_t){
        CCHANI_BOOT_MAGIC, CCHANI_BOOT_WIRE_VERSION, CCHANI_BOOT_P2P, -5, 3, expect.session, 100};
}

static int decode(const cchani_boot_hdr_t *h, const cchani_boot_expect_t *ex, size_t len) {
    uint8_t buf[CCHANI_BOOT_HDR_BYTES];
    cchani_boot_hdr_encode(h, buf);
    cchani_boot_hdr_t out;
    return cchani_boot_hdr_decode(buf, len, ex, &out);
}

static void test_header_round_trip(void **state) {
    cchani_boot_hdr_t h = valid_hdr(), out;
    uint8_t buf[CCHANI_BOOT_HDR_BYTES];
    cchani_boot_hdr_encode(&h, buf);
    assert_int_equal(buf[0], 'C'); /* "CCBT" on the wire, whatever the host byte order */
    assert_int_equal(buf[3], 'T');
    assert_int_equal(cchani_boot_hdr_decode(buf, sizeof buf, &expect, &out), 0);
    assert_memory_equal(&out, &h, sizeof h);
}

static void test_header_rejections(void **state) {
    cchani_boot_hdr_t h = valid_hdr();
    assert_error(decode(&h, &expect, CCHANI_BOOT_HDR_BYTES - 1), CCHAN_ERR_PROTOCOL,
                 "truncated header");
    assert_error(decode(&h, &expect, 0), CCHAN_ERR_PROTOCOL, "truncated header");
    h.magic = 0x20544547; /* "GET " of an HTTP client */
    assert_error(decode(&h, &expect, sizeof h), CCHAN_ERR_PROTOCOL, "foreign message");
    h = valid_hdr();
    h.version = CCHANI_BOOT_WIRE_VERSION + 1;
    assert_error(decode(&h, &expect, CCHANI_BOOT_HDR_BYTES), CCHAN_ERR_VERSION, "version mismatch");
    h = valid_hdr();
    h.type = 42;
    assert_error(decode(&h, &expect, CCHANI_BOOT_HDR_BYTES), CCHAN_ERR_PROTOCOL,
                 "unknown message type");
    h = valid_hdr();
    h.src = 4;
    assert_error(decode(&h, &expect, CCHANI_BOOT_HDR_BYTES), CCHAN_ERR_PROTOCOL, "source rank 4");
    h.src = -1;
    assert_error(decode(&h, &expect, CCHANI_BOOT_HDR_BYTES), CCHAN_ERR_PROTOCOL, "source rank -1");
}

static void test_header_lengths(void **state) {
    cchani_boot_hdr_t h = valid_hdr();
    h.len = CCHANI_BOOT_MAX_PAYLOAD;
    assert_int_equal(decode(&h, &expect, CCHANI_BOOT_HDR_BYTES), 0);
    h.len = CCHANI_BOOT_MAX_PAYLOAD + 1;
    assert_error(decode(&h, &expect, CCHANI_BOOT_HDR_BYTES), CCHAN_ERR_PROTOCOL, "oversized P2P");
    h.len = UINT64_MAX;
    assert_error(decode(&h, &expect, CCHANI_BOOT_HDR_BYTES), CCHAN_ERR_PROTOCOL, "oversized P2P");
    h.type = CCHANI_BOOT_HELLO;
    h.len = CCHANI_BOOT_HELLO_BYTES - 1;
    assert_error(decode(&h, &expect, CCHANI_BOOT_HDR_BYTES), CCHAN_ERR_PROTOCOL,
                 "expected exactly");
    h.type = CCHANI_BOOT_TABLE;
    h.len = 4 * CCHANI_BOOT_RECORD_BYTES;
    assert_int_equal(decode(&h, &expect, CCHANI_BOOT_HDR_BYTES), 0);
    h.len = 5 * CCHANI_BOOT_RECORD_BYTES;
    assert_error(decode(&h, &expect, CCHANI_BOOT_HDR_BYTES), CCHAN_ERR_PROTOCOL,
                 "expected exactly");
    h.type = CCHANI_BOOT_ERROR;
    h.len = 3;
    assert_error(decode(&h, &expect, CCHANI_BOOT_HDR_BYTES), CCHAN_ERR_PROTOCOL, "too short");
    h.len = 4 + CCHANI_BOOT_MAX_ERROR_TEXT + 1;
    assert_error(decode(&h, &expect, CCHANI_BOOT_HDR_BYTES), CCHAN_ERR_PROTOCOL, "oversized ERROR");
    /* A rank waiting for an allgather result accepts exactly that size, even above the cap. */
    cchani_boot_expect_t waiting = expect;
    waiting.coll_len = CCHANI_BOOT_MAX_PAYLOAD * 4;
    h.type = CCHANI_BOOT_COLL;
    h.len = waiting.coll_len;
    assert_int_equal(decode(&h, &waiting, CCHANI_BOOT_HDR_BYTES), 0);
    h.len = 8;
    assert_error(decode(&h, &waiting, CCHANI_BOOT_HDR_BYTES), CCHAN_ERR_PROTOCOL,
                 "expected exactly");
    h.len = CCHANI_BOOT_MAX_PAYLOAD + 1;
    assert_error(decode(&h, &expect, CCHANI_BOOT_HDR_BYTES), CCHAN_ERR_PROTOCOL, "oversized COLL");
}

/* SipHash-2-4 reference vectors (key 00..0f, messages 00..len-1). */
static void test_siphash(void **state) {
    uint8_t msg[15];
    for (int i = 0; i < 15; i++) msg[i] = (uint8_t)i;
    uint64_t k0 = 0x0706050403020100ull, k1 = 0x0f0e0d0c0b0a0908ull;
    assert_true(cchani_siphash(k0, k1, msg, 0) == 0x726fdb47dd0e0e31ull);
    assert_true(cchani_siphash(k0, k1, msg, 15) == 0xa129ca6149be45e5ull);
    /* Proofs depend on the key, the role and both nonces. */
    uint64_t p = cchani_boot_proof(1, 'C', 2, 3, 1, 0);
    assert_true(p != cchani_boot_proof(2, 'C', 2, 3, 1, 0));
    assert_true(p != cchani_boot_proof(1, 'L', 2, 3, 1, 0));
    assert_true(p != cchani_boot_proof(1, 'C', 2, 4, 1, 0));
    assert_true(p != cchani_boot_proof(1, 'C', 2, 3, 2, 0));
}

/* SipHash over pieces equals SipHash over the whole, wherever the pieces are cut. */
static void test_siphash_pieces(void **state) {
    uint8_t msg[40];
    for (int i = 0; i < 40; i++) msg[i] = (uint8_t)(i * 7 + 1);
    for (size_t len = 0; len <= sizeof msg; len++) {
        uint64_t whole = cchani_siphash(5, 6, msg, len);
        for (size_t a = 0; a <= len; a++) {
            for (size_t b = a; b <= len; b += 3) {
                cchani_sip_t s;
                cchani_sip_init(&s, 5, 6);
                cchani_sip_update(&s, msg, a);
                cchani_sip_update(&s, msg + a, b - a);
                cchani_sip_update(&s, msg + b, len - b);
                assert_true(cchani_sip_final(&s) == whole);
            }
        }
    }
}

/* Every message after the handshake carries a MAC in place of the session key: it covers every
 * header and payload byte and the message's place in its connection, under a key of that
 * connection and direction. */
static void test_frame_mac(void **state) {
    const uint64_t session = 0x5e55105;
    cchani_boot_key_t tx, rx;
    cchani_boot_conn_key(session, 'C', 11, 22, 1, 0, &tx);
    cchani_boot_conn_key(session, 'C', 11, 22, 1, 0, &rx);
    uint8_t payload[100], buf[CCHANI_BOOT_HDR_BYTES];
    for (int i = 0; i < 100; i++) payload[i] = (uint8_t)i;
    for (int k = 0; k < 3; k++) { /* in order, message after message */
        cchani_boot_hdr_t h = valid_hdr();
        cchani_boot_seal(&tx, &h, buf, payload);
        for (size_t i = 0; i + 8 <= sizeof buf; i++)
            assert_true(cchani_get_le64(buf + i) != session); /* the key is not on the wire */
        assert_int_equal(cchani_boot_verify(&rx, buf, payload, sizeof payload), 0);
    }
    assert_true(tx.seq == 3 && rx.seq == 3);
    /* Every byte of header and payload is covered. */
    cchani_boot_hdr_t h = valid_hdr();
    cchani_boot_seal(&tx, &h, buf, payload);
    for (size_t i = 0; i < sizeof buf + sizeof payload; i++) {
        uint8_t *p = i < sizeof buf ? buf + i : payload + (i - sizeof buf);
        *p ^= 0x10;
        cchani_boot_key_t r = rx;
        assert_error(cchani_boot_verify(&r, buf, payload, sizeof payload), CCHAN_ERR_PROTOCOL,
                     "failed its authentication");
        *p ^= 0x10;
    }
    /* Replayed (an earlier place), or from another connection, direction or job. */
    cchani_boot_key_t r = rx;
    r.seq--;
    assert_error(cchani_boot_verify(&r, buf, payload, sizeof payload), CCHAN_ERR_PROTOCOL,
                 "failed its authentication");
    const struct {
        uint64_t session, nonce_c, nonce_s;
        char dir;
    } other[] = {{session, 12, 22, 'C'},
                 {session, 11, 23, 'C'},
                 {session, 11, 22, 'L'},
                 {session ^ 1, 11, 22, 'C'}};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        cchani_boot_conn_key(other[i].session, other[i].dir, other[i].nonce_c, other[i].nonce_s, 1,
                             0, &r);
        r.seq = rx.seq;
        assert_error(cchani_boot_verify(&r, buf, payload, sizeof payload), CCHAN_ERR_PROTOCOL,
                     "failed its authentication");
    }
    assert_int_equal(cchani_boot_verify(&rx, buf, payload, sizeof payload), 0);
}

/* An unauthenticated connection may send only the handshake and an ERROR, with any session field
 * (a nonce) and, for a HELLO, another version's length. */
static void test_header_open(void **state) {
    cchani_boot_hdr_t h = valid_hdr(), out;
    uint8_t buf[CCHANI_BOOT_HDR_BYTES];
    h.type = CCHANI_BOOT_AUTH;
    h.len = 0;
    h.session = 12345;
    cchani_boot_hdr_encode(&h, buf);
    assert_int_equal(cchani_boot_hdr_decode_open(buf, sizeof buf, &expect, &out), 0);
    h.type = CCHANI_BOOT_P2P;
    cchani_boot_hdr_encode(&h, buf);
    assert_error(cchani_boot_hdr_decode_open(buf, sizeof buf, &expect, &out), CCHAN_ERR_PROTOCOL,
                 "before proving the session key");
    h.type = CCHANI_BOOT_HELLO;
    h.version = 99;
    h.len = 200;
    cchani_boot_hdr_encode(&h, buf);
    assert_int_equal(cchani_boot_hdr_decode_open(buf, sizeof buf, &expect, &out), 0);
    h.len = CCHANI_BOOT_MAX_FOREIGN_HELLO + 1;
    cchani_boot_hdr_encode(&h, buf);
    assert_error(cchani_boot_hdr_decode_open(buf, sizeof buf, &expect, &out), CCHAN_ERR_PROTOCOL,
                 "payload bytes");
}

static void test_sanitize(void **state) {
    char out[16];
    const uint8_t text[] = "ab\033[2J\ncd\377efghijklmnopq";
    cchani_boot_sanitize(out, sizeof out, text, sizeof text - 1);
    assert_string_equal(out, "ab?[2J?cd?efghi");
    cchani_boot_sanitize(out, sizeof out, (const uint8_t *)"x\0y", 3);
    assert_string_equal(out, "x");
}

static void test_record(void **state) {
    cchani_boot_peer_record_t in, out;
    memset(&in, 0, sizeof in);
    in.listen = ipv6("::1", 777);
    strcpy(in.hostname, "node-17");
    uint8_t wire[CCHANI_BOOT_RECORD_BYTES];
    cchani_boot_record_encode(&in, wire);
    assert_int_equal(cchani_boot_record_decode(wire, &out), 0);
    assert_string_equal(out.hostname, "node-17");
    /* A hostile record without a terminator still decodes to a terminated string. */
    memset(wire + CCHANI_BOOT_ADDR_WIRE_BYTES, 'x', CCHANI_BOOT_HOSTNAME_BYTES);
    assert_int_equal(cchani_boot_record_decode(wire, &out), 0);
    assert_int_equal(strlen(out.hostname), CCHANI_BOOT_HOSTNAME_BYTES - 1);
    wire[2] = wire[3] = 0; /* port 0 */
    assert_error(cchani_boot_record_decode(wire, &out), CCHAN_ERR_PROTOCOL, "port 0");
}

/* ---------------------------------------------------------------- environment */

static const char *const all_vars[] = {"CCHAN_RANK",
                                       "CCHAN_WORLD_SIZE",
                                       "CCHAN_LOCAL_RANK",
                                       "CCHAN_LOCAL_SIZE",
                                       "CCHAN_BOOTSTRAP_ROOT",
                                       "CCHAN_BOOTSTRAP_SESSION",
                                       "RANK",
                                       "WORLD_SIZE",
                                       "LOCAL_RANK",
                                       "LOCAL_WORLD_SIZE",
                                       "MASTER_ADDR",
                                       "MASTER_PORT",
                                       "TORCHELASTIC_RUN_ID",
                                       "OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE",
                                       "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "OMPI_COMM_WORLD_LOCAL_SIZE",
                                       "PMI_RANK",
                                       "PMI_SIZE",
                                       "MPI_LOCALRANKID",
                                       "MPI_LOCALNRANKS",
                                       "SLURM_PROCID",
                                       "SLURM_NTASKS",
                                       "SLURM_LOCALID",
                                       "SLURM_NTASKS_PER_NODE",
                                       "SLURM_JOB_ID",
                                       "SLURM_STEP_ID",
                                       "CCHAN_TEST_WIRE_VERSION"};

static int clear_env(void **state) {
    for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++) unsetenv(all_vars[i]);
    return 0;
}

/* Sets "NAME=value" pairs. */
static void set_vars(const char *const *pairs) {
    for (; *pairs; pairs++) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", *pairs);
        char *eq = strchr(buf, '=');
        *eq = '\0';
        setenv(buf, eq + 1, 1);
    }
}

static cchani_boot_env_t parse_ok(const char *const *pairs) {
    set_vars(pairs);
    cchani_boot_env_t e;
    int rc = cchani_boot_env_parse(&e);
    if (rc) fail_msg("parse failed: %s", cchan_last_error());
    return e;
}

static void assert_env(const cchani_boot_env_t *e, const char *launcher, int rank, int n, int lr,
                       int ls, const char *host, int port) {
    assert_string_equal(e->launcher, launcher);
    assert_int_equal(e->rank, rank);
    assert_int_equal(e->nranks, n);
    assert_int_equal(e->local_rank, lr);
    assert_int_equal(e->local_size, ls);
    assert_string_equal(e->root_host, host);
    assert_int_equal(e->root_port, port);
}

static void test_env_cchan_run(void **state) {
    const char *v[] = {"CCHAN_RANK=2",
                       "CCHAN_WORLD_SIZE=4",
                       "CCHAN_LOCAL_RANK=0",
                       "CCHAN_LOCAL_SIZE=2",
                       "CCHAN_BOOTSTRAP_ROOT=10.0.0.1:5000",
                       "RANK=9",
                       "WORLD_SIZE=99",
                       NULL};
    cchani_boot_env_t e = parse_ok(v); /* cchan-run wins over torchrun's variables */
    assert_env(&e, "cchan-run", 2, 4, 0, 2, "10.0.0.1", 5000);
}

static void test_env_torchrun(void **state) {
    const char *v[] = {"RANK=3",
                       "WORLD_SIZE=8",
                       "LOCAL_RANK=3",
                       "LOCAL_WORLD_SIZE=4",
                       "MASTER_ADDR=master-host",
                       "MASTER_PORT=29500",
                       NULL};
    cchani_boot_env_t e = parse_ok(v);
    assert_env(&e, "torchrun", 3, 8, 3, 4, "master-host", 29501); /* MASTER_PORT + 1 */
}

static void test_env_open_mpi(void **state) {
    const char *v[] = {"OMPI_COMM_WORLD_RANK=5",
                       "OMPI_COMM_WORLD_SIZE=6",
                       "OMPI_COMM_WORLD_LOCAL_RANK=1",
                       "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                       "CCHAN_BOOTSTRAP_ROOT=[fd00::7]:6000",
                       "SLURM_PROCID=0",
                       "SLURM_NTASKS=1",
                       NULL};
    cchani_boot_env_t e = parse_ok(v); /* Open MPI inside a Slurm allocation */
    assert_env(&e, "Open MPI", 5, 6, 1, 2, "fd00::7", 6000);
}

static void test_env_mpich(void **state) {
    const char *v[] = {"PMI_RANK=0",
                       "PMI_SIZE=3",
                       "MPI_LOCALRANKID=0",
                       "MPI_LOCALNRANKS=3",
                       "MASTER_ADDR=127.0.0.1",
                       "MASTER_PORT=7000",
                       NULL};
    cchani_boot_env_t e = parse_ok(v);
    assert_env(&e, "MPICH/PMI", 0, 3, 0, 3, "127.0.0.1", 7001);
}

static void test_env_slurm(void **state) {
    const char *v[] = {"SLURM_PROCID=7", "SLURM_NTASKS=16", "SLURM_LOCALID=3",
                       "CCHAN_BOOTSTRAP_ROOT=node1:4000", NULL};
    cchani_boot_env_t e = parse_ok(v); /* no SLURM_NTASKS_PER_NODE: local info derived later */
    assert_env(&e, "Slurm", 7, 16, -1, -1, "node1", 4000);
    setenv("SLURM_NTASKS_PER_NODE", "4", 1);
    e = parse_ok((const char *[]){NULL});
    assert_env(&e, "Slurm", 7, 16, 3, 4, "node1", 4000);
}

static void parse_fails(const char *const *pairs, const char *words) {
    set_vars(pairs);
    cchani_boot_env_t e;
    assert_error(cchani_boot_env_parse(&e), -EINVAL, words);
    clear_env(NULL);
}

static void test_env_errors(void **state) {
    parse_fails((const char *[]){NULL}, "no launcher environment found");
    parse_fails((const char *[]){"RANK=1", "MASTER_ADDR=a", "MASTER_PORT=1", NULL},
                "RANK is set (torchrun) but WORLD_SIZE is not");
    parse_fails((const char *[]){"PMI_RANK=4", "PMI_SIZE=4", "CCHAN_BOOTSTRAP_ROOT=a:1", NULL},
                "PMI_RANK=4 is outside 0..3");
    parse_fails((const char *[]){"RANK=one", "WORLD_SIZE=2", NULL}, "RANK='one' is not an integer");
    parse_fails((const char *[]){"SLURM_PROCID=0", "SLURM_NTASKS=2", NULL},
                "no root address is set: set CCHAN_BOOTSTRAP_ROOT=host:port, or MASTER_ADDR and "
                "MASTER_PORT (MASTER_ADDR is missing)");
    parse_fails((const char *[]){"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=x", NULL},
                "MASTER_PORT is missing");
    parse_fails(
        (const char *[]){"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=x", "MASTER_PORT=http", NULL},
        "MASTER_PORT: 'http' is not a TCP port");
    parse_fails((const char *[]){"CCHAN_RANK=0", "CCHAN_WORLD_SIZE=2",
                                 "CCHAN_BOOTSTRAP_ROOT=fd00::1:80", NULL},
                "IPv6 as [address]:port");
    parse_fails(
        (const char *[]){"CCHAN_RANK=0", "CCHAN_WORLD_SIZE=2", "CCHAN_BOOTSTRAP_ROOT=host", NULL},
        "expected host:port");
    parse_fails(
        (const char *[]){"CCHAN_RANK=0", "CCHAN_WORLD_SIZE=2", "CCHAN_BOOTSTRAP_ROOT=h:0", NULL},
        "not a TCP port");
    parse_fails((const char *[]){"CCHAN_RANK=0", "CCHAN_WORLD_SIZE=2", "CCHAN_LOCAL_RANK=2",
                                 "CCHAN_LOCAL_SIZE=2", "CCHAN_BOOTSTRAP_ROOT=h:1", NULL},
                "CCHAN_LOCAL_RANK=2 is outside 0..1");
}

static void test_env_session(void **state) {
    const char *v[] = {"CCHAN_RANK=0", "CCHAN_WORLD_SIZE=2", "CCHAN_BOOTSTRAP_ROOT=h:1", NULL};
    cchani_boot_env_t a = parse_ok(v), b = parse_ok(v);
    assert_true(a.session == b.session); /* every rank of a job computes the same key */
    setenv("CCHAN_BOOTSTRAP_SESSION", "run-2", 1);
    b = parse_ok((const char *[]){NULL});
    assert_true(a.session != b.session);
    unsetenv("CCHAN_BOOTSTRAP_SESSION");
    setenv("CCHAN_WORLD_SIZE", "3", 1);
    b = parse_ok((const char *[]){NULL});
    assert_true(a.session != b.session);
}

static void test_wire_version_override(void **state) {
    uint16_t v;
    assert_int_equal(cchani_boot_wire_version(&v), 0);
    assert_int_equal(v, CCHANI_BOOT_WIRE_VERSION);
    setenv("CCHAN_TEST_WIRE_VERSION", "9", 1);
    assert_int_equal(cchani_boot_wire_version(&v), 0);
    assert_int_equal(v, 9);
    setenv("CCHAN_TEST_WIRE_VERSION", "0", 1);
    assert_error(cchani_boot_wire_version(&v), -EINVAL, "CCHAN_TEST_WIRE_VERSION");
}

/* ---------------------------------------------------------------- argument checks */

static void test_bad_arguments(void **state) {
    cchan_bootstrap_t *bs;
    cchan_unique_id_t id;
    memset(&id, 0, sizeof id);
    assert_error(cchan_bootstrap_create(&id, 0, 1, &bs), CCHAN_ERR_PROTOCOL,
                 "not a cchan unique id");
    assert_int_equal(cchan_bootstrap_create(NULL, 0, 1, &bs), -EINVAL);
    assert_int_equal(cchan_get_unique_id(&id), 0);
    assert_error(cchan_bootstrap_create(&id, 2, 2, &bs), -EINVAL, "rank 2 is outside 0..1");
    assert_error(cchan_bootstrap_create(&id, 0, 0, &bs), -EINVAL, "nranks 0");
    assert_int_equal(cchan_bootstrap_create_custom(0, 1, NULL, NULL, &bs), -EINVAL);
    assert_int_equal(cchan_bootstrap_rank(NULL), -EINVAL);
    assert_int_equal(cchan_bootstrap_allgather(NULL, NULL, NULL, 0), -EINVAL);
    assert_int_equal(cchan_bootstrap_destroy(NULL), 0);
    setenv("CCHAN_BOOTSTRAP_TIMEOUT_MS", "0", 1);
    assert_error(cchan_bootstrap_create(&id, 0, 1, &bs), -EINVAL, "CCHAN_BOOTSTRAP_TIMEOUT_MS");
    unsetenv("CCHAN_BOOTSTRAP_TIMEOUT_MS");
}

/* A one-rank bootstrap needs no peer: everything completes locally. */
static void test_single_rank(void **state) {
    cchan_unique_id_t id;
    setenv("CCHAN_BOOTSTRAP_ADDR", "127.0.0.1", 1);
    assert_int_equal(cchan_get_unique_id(&id), 0);
    unsetenv("CCHAN_BOOTSTRAP_ADDR");
    cchan_bootstrap_t *bs;
    assert_int_equal(cchan_bootstrap_create(&id, 0, 1, &bs), 0);
    assert_int_equal(cchan_bootstrap_local_size(bs), 1);
    uint32_t v = 7, all = 0;
    assert_int_equal(cchan_bootstrap_allgather(bs, &v, &all, sizeof v), 0);
    assert_int_equal(all, 7);
    assert_int_equal(cchan_bootstrap_barrier(bs), 0);
    assert_int_equal(cchan_bootstrap_send(bs, 0, 3, &v, sizeof v), 0);
    assert_int_equal(cchan_bootstrap_recv(bs, 0, 3, &all, sizeof all), 0);
    assert_error(cchan_bootstrap_send(bs, 0, 3, &v, CCHANI_BOOT_MAX_PAYLOAD + 1), CCHAN_ERR_RANGE,
                 "limit");
    assert_error(cchan_bootstrap_allgather(bs, &v, &all, CCHANI_BOOT_MAX_PAYLOAD + 1),
                 CCHAN_ERR_RANGE, "limit");
    assert_int_equal(cchan_bootstrap_destroy(bs), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_id_round_trip),
        cmocka_unit_test(test_id_rejections),
        cmocka_unit_test(test_get_unique_id),
        cmocka_unit_test(test_header_round_trip),
        cmocka_unit_test(test_header_rejections),
        cmocka_unit_test(test_header_lengths),
        cmocka_unit_test(test_record),
        cmocka_unit_test(test_siphash),
        cmocka_unit_test(test_siphash_pieces),
        cmocka_unit_test(test_frame_mac),
        cmocka_unit_test(test_header_open),
        cmocka_unit_test(test_sanitize),
        cmocka_unit_test_setup_teardown(test_env_cchan_run, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_env_torchrun, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_env_open_mpi, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_env_mpich, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_env_slurm, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_env_errors, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_env_session, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_wire_version_override, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_bad_arguments, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_single_rank, clear_env, clear_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
