/* cchan bootstrap protocol: TCP rendezvous with rank 0 as root, allgather, barrier and tagged
 * send/recv, and the variant built on an application's allgather callback (contract: cchan.h).
 *
 * Every rank connects to the root at init and keeps that connection: it carries the collectives
 * and the point-to-point traffic with rank 0. Collectives are a star (contributions to the root,
 * the concatenation back to every rank): the root sends O(N^2 * bytes), which is fine for
 * bootstrap-sized data, and in exchange it sees every rank, so when one dies or misbehaves it can
 * tell all the others which one and why. Other pairs connect lazily on their first send: every rank
 * listens, and a sender opens a one-way connection to the receiver, so two ranks that start sending
 * to each other at once never race over who owns a connection. The bootstrap is not thread-safe:
 * one thread at a time may use a given bootstrap.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "bootstrap.h"
#include "bootstrap_socket.h"
#include "cchan/env.h"

/* For a rank waiting on the root's answer: longer than the root's own deadline, so that when some
 * other rank is missing, the root's report naming it arrives before this rank's bare timeout. */
static uint64_t root_answer_deadline(const cchan_bootstrap_t *bs) {
    return cchani_now_ns() + bs->timeout_ns + bs->timeout_ns / 2;
}

/* Root: tells every rank still connected that the bootstrap failed, and why; the ERROR's tag is
 * one more than the rank that caused it (0: none). */
static void root_relay(cchan_bootstrap_t *bs, int status) {
    bs->relayed = 1;
    for (int r = 1; r < bs->nranks; r++) {
        cchani_boot_peer_t *p = &bs->peers[r];
        if (p->send_fd < 0 || p->lost) continue;
        size_t text = strnlen(bs->failed_why, CCHANI_BOOT_MAX_ERROR_TEXT);
        uint8_t payload[4 + CCHANI_BOOT_MAX_ERROR_TEXT];
        cchani_put_le32(payload, (uint32_t)status);
        memcpy(payload + 4, bs->failed_why, text);
        (void)cchani_boot_write_msg(bs, r, p->send_fd, CCHANI_BOOT_ERROR, bs->failed_rank + 1,
                                    payload, 4 + text, cchani_boot_deadline(bs));
    }
}

static int root_abort(cchan_bootstrap_t *bs, int status) {
    cchani_boot_fail_with_last_error(bs, status);
    root_relay(bs, bs->failed);
    return cchani_boot_failed_error(bs);
}

/* ---------------------------------------------------------------- init */

int cchani_host_name(int rank, int nranks, char out[CCHANI_BOOT_HOSTNAME_BYTES], int *overridden) {
    if (gethostname(out, CCHANI_BOOT_HOSTNAME_BYTES) != 0)
        snprintf(out, CCHANI_BOOT_HOSTNAME_BYTES, "?");
    out[CCHANI_BOOT_HOSTNAME_BYTES - 1] = '\0';
    if (overridden) *overridden = 0;
    int64_t split = 0, id = -1;
    int rc = cchan_env_get_int("CCHAN_HOST_SPLIT", &split);
    if (!rc) rc = cchan_env_get_int("CCHAN_HOST_ID", &id);
    if (rc) return rc;
    if (split > 0 && id >= 0)
        return cchani_error(-EINVAL, "environment",
                            "CCHAN_HOST_SPLIT=%lld and CCHAN_HOST_ID=%lld are both set; set one "
                            "topology override",
                            (long long)split, (long long)id);
    if (split > 0) {
        if (nranks % split != 0)
            return cchani_error(-EINVAL, "environment",
                                "CCHAN_HOST_SPLIT=%lld does not divide the %d ranks (the ranks "
                                "form that many consecutive groups of equal size)",
                                (long long)split, nranks);
        id = rank / (nranks / split);
    }
    if (id < 0) return 0;
    /* '#' is never part of a host name, so the result cannot be mistaken for a real host. */
    char suffix[24];
    int n = snprintf(suffix, sizeof suffix, "#%lld", (long long)id);
    size_t keep = strnlen(out, CCHANI_BOOT_HOSTNAME_BYTES - 1 - (size_t)n);
    memcpy(out + keep, suffix, (size_t)n + 1);
    if (overridden) *overridden = 1;
    return 0;
}

static int root_init_timeout(cchan_bootstrap_t *bs) {
    int first = -1, missing = 0;
    for (int r = 1; r < bs->nranks; r++) {
        if (bs->peers[r].in) continue;
        missing++;
        if (first < 0) first = r;
    }
    char rejected[384] = "";
    if (bs->rejected)
        snprintf(rejected, sizeof rejected, "; turned away %u connection(s), the last because: %s",
                 bs->rejected, bs->rejected_why);
    return cchani_error(
        CCHAN_ERR_TIMEOUT, "bootstrap",
        "timed out after %llu ms waiting for %d of %d rank(s) to join (first missing: "
        "rank %d)%s",
        (unsigned long long)bs->timeout_ms, missing, bs->nranks - 1, first, rejected);
}

static int root_send_table(cchan_bootstrap_t *bs) {
    size_t len = (size_t)bs->nranks * CCHANI_BOOT_RECORD_BYTES;
    uint8_t *table = malloc(len);
    if (!table)
        return cchani_error(-ENOMEM, "bootstrap", "no memory for a %zu-byte peer table", len);
    for (int r = 0; r < bs->nranks; r++)
        cchani_boot_record_encode(&bs->peers[r].rec, table + (size_t)r * CCHANI_BOOT_RECORD_BYTES);
    int rc = 0;
    for (int r = 1; r < bs->nranks && !rc; r++)
        rc = cchani_boot_write_msg(bs, r, bs->peers[r].send_fd, CCHANI_BOOT_TABLE, 0, table, len,
                                   cchani_boot_deadline(bs));
    free(table);
    return rc;
}

/* Rank 0: admits every rank, then sends all of them the peer table. A rank of another version or
 * size poisons init, but the root keeps admitting the others so that each of them learns why. */
static int root_init(cchan_bootstrap_t *bs, const cchani_boot_addr_t *root) {
    int rc = cchani_sock_listen(root, &bs->listen_fd, &bs->peers[0].rec.listen);
    if (rc) return rc;
    uint64_t until = cchani_boot_deadline(bs);
    while (!rc && bs->joined + bs->version_rejects < bs->nranks - 1) {
        rc = cchani_boot_progress(bs, -1, 0, until);
        if (rc == CCHAN_ERR_TIMEOUT) rc = root_init_timeout(bs);
    }
    bs->init_done = 1;
    if (!rc && bs->init_status) rc = cchani_error(bs->init_status, "bootstrap", "%s", bs->init_why);
    if (!rc) rc = root_send_table(bs);
    return rc ? root_abort(bs, rc) : 0;
}

static int parse_table(cchan_bootstrap_t *bs, const cchani_boot_msg_t *m) {
    for (int r = 0; r < bs->nranks; r++) {
        if (r == bs->rank) continue;
        int rc = cchani_boot_record_decode(m->data + (size_t)r * CCHANI_BOOT_RECORD_BYTES,
                                           &bs->peers[r].rec);
        if (rc) return cchani_error_wrap(rc, "bootstrap", "peer table entry of rank %d", r);
    }
    return 0;
}

/* Ranks > 0: connect to the root (retrying while it is not up yet), listen on the interface that
 * reaches it, introduce ourselves, and wait to be admitted with the peer table. */
static int rank_init(cchan_bootstrap_t *bs, const cchani_boot_addr_t *root) {
    char where[CCHANI_BOOT_ADDR_STR_BYTES];
    cchani_boot_conn_t *c = malloc(sizeof *c);
    if (!c) return cchani_error(-ENOMEM, "bootstrap", "no memory for a connection");
    int fd;
    cchani_boot_key_t tx, rx;
    int rc = cchani_boot_connect(bs, root, 0, 1, "the root (rank 0)", cchani_boot_deadline(bs), &fd,
                                 &tx, &rx);
    if (rc) {
        free(c);
        return rc;
    }
    cchani_boot_conn_add(bs, fd, 0, c);
    c->rx = rx;
    bs->peers[0].in = c;
    bs->peers[0].send_fd = fd;
    bs->peers[0].tx = tx;
    cchani_boot_msg_t *table;
    char what[96];
    snprintf(what, sizeof what, "admission by the root at %s", cchani_boot_addr_str(root, where));
    rc = cchani_boot_wait_msg(bs, 0, CCHANI_BOOT_TABLE, 0, root_answer_deadline(bs), what, &table);
    /* Only this rank's own timeout suggests a wrong root; a failure the root reported (a rank that
     * never joined, say) is relayed as it is. */
    if (rc == CCHAN_ERR_TIMEOUT && !bs->failed) {
        char why[CCHANI_BOOT_MAX_ERROR_TEXT];
        cchani_boot_error_core(rc, why, sizeof why);
        return cchani_error(rc, "bootstrap",
                            "%s (the root never answered: is the process at that address a cchan "
                            "root of this job?)",
                            why);
    }
    if (rc) return rc;
    rc = parse_table(bs, table);
    free(table);
    return rc;
}

/* Local rank and size: the ranks whose hostname equals ours. names[r * stride] is rank r's. */
static void derive_local(cchan_bootstrap_t *bs, const char *names, size_t stride) {
    const char *mine = names + (size_t)bs->rank * stride;
    bs->local_rank = 0;
    bs->local_size = 0;
    for (int r = 0; r < bs->nranks; r++) {
        if (strncmp(names + (size_t)r * stride, mine, CCHANI_BOOT_HOSTNAME_BYTES) != 0) continue;
        if (r < bs->rank) bs->local_rank++;
        bs->local_size++;
    }
}

static int read_timeout(uint64_t *ms) {
    int rc = cchani_env_u64("CCHAN_BOOTSTRAP_TIMEOUT_MS", CCHANI_BOOT_DEFAULT_TIMEOUT_MS, ms);
    if (rc) return rc;
    if (*ms == 0 || *ms > 86400000ull)
        return cchani_error(-EINVAL, "environment",
                            "CCHAN_BOOTSTRAP_TIMEOUT_MS=%llu is outside 1..86400000",
                            (unsigned long long)*ms);
    return 0;
}

static int check_ranks(const char *where, int rank, int nranks) {
    if (nranks < 1 || nranks > CCHANI_BOOT_MAX_RANKS)
        return cchani_error(-EINVAL, where, "nranks %d is outside 1..%d", nranks,
                            CCHANI_BOOT_MAX_RANKS);
    if (rank < 0 || rank >= nranks)
        return cchani_error(-EINVAL, where, "rank %d is outside 0..%d", rank, nranks - 1);
    return 0;
}

static int bootstrap_alloc(int rank, int nranks, cchan_bootstrap_t **out) {
    cchan_bootstrap_t *bs = calloc(1, sizeof *bs);
    if (!bs) return cchani_error(-ENOMEM, "bootstrap", "no memory for a bootstrap");
    bs->rank = rank;
    bs->nranks = nranks;
    bs->listen_fd = -1;
    bs->failed_rank = -1;
    pthread_mutex_init(&bs->lock, NULL);
    *out = bs;
    return 0;
}

static int tcp_alloc(cchan_bootstrap_t *bs) {
    /* Identified (at most nranks - 1), pending, and one just accepted before one is shed. */
    bs->conns_cap = bs->nranks + CCHANI_BOOT_MAX_PENDING + 1;
    bs->peers = calloc((size_t)bs->nranks, sizeof *bs->peers);
    bs->conns = calloc((size_t)bs->conns_cap, sizeof *bs->conns);
    bs->polled = calloc((size_t)bs->conns_cap, sizeof *bs->polled);
    bs->pollfds = calloc((size_t)bs->conns_cap + 2, sizeof *bs->pollfds);
    bs->arrived = calloc((size_t)bs->nranks, 1);
    if (!bs->peers || !bs->conns || !bs->polled || !bs->pollfds || !bs->arrived)
        return cchani_error(-ENOMEM, "bootstrap", "no memory for %d peers", bs->nranks);
    for (int r = 0; r < bs->nranks; r++) bs->peers[r].send_fd = -1;
    return 0;
}

static int create_tcp(const cchani_boot_id_t *id, int rank, int nranks, const char *where,
                      cchan_bootstrap_t **out) {
    uint64_t timeout_ms;
    int rc = check_ranks(where, rank, nranks);
    if (!rc) rc = read_timeout(&timeout_ms);
    if (rc) return rc;
    cchan_bootstrap_t *bs = NULL;
    rc = bootstrap_alloc(rank, nranks, &bs);
    if (rc) return rc;
    bs->timeout_ms = timeout_ms;
    bs->timeout_ns = timeout_ms * 1000000ull;
    bs->queue_limit = CCHANI_BOOT_MAX_QUEUED;
    bs->pending_idle_ns =
        (timeout_ms < CCHANI_BOOT_PENDING_IDLE_MS ? timeout_ms : CCHANI_BOOT_PENDING_IDLE_MS) *
        1000000ull;
    bs->expect = (cchani_boot_expect_t){id->session, id->version, nranks, UINT64_MAX};
    rc = tcp_alloc(bs);
    if (!rc) rc = cchani_host_name(rank, nranks, bs->peers[rank].rec.hostname, &bs->host_override);
    if (!rc) {
        rc = rank == 0 ? root_init(bs, &id->root) : rank_init(bs, &id->root);
    }
    if (rc) {
        rc = cchani_error_wrap(rc, where, "rank %d of %d", rank, nranks);
        cchan_bootstrap_destroy(bs);
        return rc;
    }
    derive_local(bs, bs->peers[0].rec.hostname, sizeof bs->peers[0]);
    CCHANI_INFO(CCHANI_SUB_BOOTSTRAP, "rank %d of %d joined (local %d of %d)", rank, nranks,
                bs->local_rank, bs->local_size);
    *out = bs;
    return 0;
}

/* ---------------------------------------------------------------- public: creation */

int cchani_boot_wire_version(uint16_t *out) {
    int64_t v;
    int rc = cchani_env_i64("CCHAN_TEST_WIRE_VERSION", CCHANI_BOOT_WIRE_VERSION, &v);
    if (rc) return rc;
    if (v < 1 || v > UINT16_MAX)
        return cchani_error(-EINVAL, "environment",
                            "CCHAN_TEST_WIRE_VERSION=%lld is outside 1..65535", (long long)v);
    *out = (uint16_t)v;
    return 0;
}

static int unique_id_root(cchani_boot_addr_t *root) {
    uint64_t port;
    int rc = cchani_env_u64("CCHAN_BOOTSTRAP_PORT", 0, &port);
    if (rc) return rc;
    if (port > 65535)
        return cchani_error(-EINVAL, "environment", "CCHAN_BOOTSTRAP_PORT=%llu is not a TCP port",
                            (unsigned long long)port);
    const char *host = cchani_env_str("CCHAN_BOOTSTRAP_ADDR");
    if (host)
        rc = cchani_sock_resolve(host, (uint16_t)port, root);
    else
        cchani_sock_default_addr(root);
    if (rc || port) return rc;
    uint16_t free_port;
    rc = cchani_sock_free_port(root, &free_port);
    if (!rc) cchani_sock_set_port(root, free_port);
    return rc;
}

int cchan_get_unique_id(cchan_unique_id_t *id) {
    CCHANI_CHECK_ARG(id, "cchan_get_unique_id");
    cchani_boot_id_t bid;
    memset(&bid, 0, sizeof bid);
    int rc = cchani_boot_wire_version(&bid.version);
    if (!rc) rc = unique_id_root(&bid.root);
    if (rc) return cchani_error_wrap(rc, "cchan_get_unique_id", "choosing the root address");
    if (getrandom(&bid.session, sizeof bid.session, 0) != (ssize_t)sizeof bid.session)
        return cchani_errno_error("cchan_get_unique_id", "getrandom() for the session key");
    cchani_boot_id_encode(&bid, id);
    return 0;
}

int cchan_bootstrap_create(const cchan_unique_id_t *id, int rank, int nranks,
                           cchan_bootstrap_t **out) {
    CCHANI_CHECK_ARG(id && out, "cchan_bootstrap_create");
    cchani_boot_id_t bid;
    int rc = cchani_boot_wire_version(&bid.version);
    if (!rc) rc = cchani_boot_id_decode(id, bid.version, &bid);
    if (rc) return cchani_error_wrap(rc, "cchan_bootstrap_create", "rank %d of %d", rank, nranks);
    return create_tcp(&bid, rank, nranks, "cchan_bootstrap_create", out);
}

int cchan_bootstrap_create_from_env(cchan_bootstrap_t **out) {
    static const char *where = "cchan_bootstrap_create_from_env";
    CCHANI_CHECK_ARG(out, where);
    cchani_boot_env_t env;
    cchani_boot_id_t bid;
    int rc = cchani_boot_env_parse(&env);
    if (!rc) rc = cchani_boot_wire_version(&bid.version);
    if (!rc) rc = cchani_sock_resolve(env.root_host, env.root_port, &bid.root);
    if (rc) return cchani_error_wrap(rc, where, "reading the launcher environment");
    bid.session = env.session;
    CCHANI_INFO(CCHANI_SUB_BOOTSTRAP, "rank %d of %d from %s, root %s:%u", env.rank, env.nranks,
                env.launcher, env.root_host, env.root_port);
    if (env.public_key)
        CCHANI_WARN(CCHANI_SUB_BOOTSTRAP,
                    "rank %d: the bootstrap key derives only from public facts (the root address, "
                    "the world size and %s's job variables): whoever can reach the root port can "
                    "compute it and join the job as a rank. Set CCHAN_BOOTSTRAP_SECRET to the same "
                    "random value on every rank (cchan-run does; see docs/security.md)",
                    env.rank, env.launcher);
    cchan_bootstrap_t *bs = NULL;
    rc = create_tcp(&bid, env.rank, env.nranks, where, &bs);
    if (rc) return rc;
    /* Under the topology override the launcher's pair describes the machine, not the "hosts". */
    if (env.local_size > 0 && !bs->host_override) {
        bs->local_rank = env.local_rank;
        bs->local_size = env.local_size;
    }
    *out = bs;
    return 0;
}

int cchan_bootstrap_create_custom(int rank, int nranks, cchan_allgather_fn fn, void *ctx,
                                  cchan_bootstrap_t **out) {
    static const char *where = "cchan_bootstrap_create_custom";
    CCHANI_CHECK_ARG(fn && out, where);
    int rc = check_ranks(where, rank, nranks);
    if (rc) return rc;
    cchan_bootstrap_t *bs = NULL;
    rc = bootstrap_alloc(rank, nranks, &bs);
    if (rc) return rc;
    bs->custom_fn = fn;
    bs->custom_ctx = ctx;
    char *names = calloc((size_t)nranks, CCHANI_BOOT_HOSTNAME_BYTES);
    if (!names) {
        free(bs);
        return cchani_error(-ENOMEM, where, "no memory for %d hostnames", nranks);
    }
    char mine[CCHANI_BOOT_HOSTNAME_BYTES] = {0};
    rc = cchani_host_name(rank, nranks, mine, NULL);
    if (rc) {
        free(names);
        free(bs);
        return cchani_error_wrap(rc, where, "rank %d of %d", rank, nranks);
    }
    rc = fn(ctx, mine, names, CCHANI_BOOT_HOSTNAME_BYTES);
    if (rc == 0) derive_local(bs, names, CCHANI_BOOT_HOSTNAME_BYTES);
    free(names);
    if (rc) {
        free(bs);
        return cchani_error(
            CCHAN_ERR_SYSTEM, where,
            "rank %d of %d: the application's allgather returned %d (exchanging hostnames)", rank,
            nranks, rc);
    }
    *out = bs;
    return 0;
}

/* ---------------------------------------------------------------- public: queries */

int cchan_bootstrap_rank(const cchan_bootstrap_t *bs) {
    CCHANI_CHECK_ARG(bs, "cchan_bootstrap_rank");
    return bs->rank;
}

int cchan_bootstrap_size(const cchan_bootstrap_t *bs) {
    CCHANI_CHECK_ARG(bs, "cchan_bootstrap_size");
    return bs->nranks;
}

int cchan_bootstrap_local_rank(const cchan_bootstrap_t *bs) {
    CCHANI_CHECK_ARG(bs, "cchan_bootstrap_local_rank");
    return bs->local_rank;
}

int cchan_bootstrap_local_size(const cchan_bootstrap_t *bs) {
    CCHANI_CHECK_ARG(bs, "cchan_bootstrap_local_size");
    return bs->local_size;
}

/* ---------------------------------------------------------------- public: collectives */

/* Root: collects contributions that have arrived; fails on a wrong size or a lost rank. */
static int root_collect(cchan_bootstrap_t *bs, uint8_t *recv, size_t bytes, uint32_t seq,
                        int *missing) {
    for (int r = 1; r < bs->nranks; r++) {
        if (bs->arrived[r]) continue;
        cchani_boot_peer_t *p = &bs->peers[r];
        cchani_boot_msg_t *m = cchani_boot_queue_take(p, CCHANI_BOOT_COLL, (int32_t)seq);
        if (!m && p->lost) {
            if (!bs->failed) bs->failed_rank = r;
            return cchani_error(p->lost, "bootstrap", "rank %d failed during allgather #%u: %s", r,
                                seq, p->lost_why ? p->lost_why : "");
        }
        if (!m) continue;
        int wrong = m->len != bytes;
        if (!wrong && bytes) memcpy(recv + (size_t)r * bytes, m->data, bytes);
        free(m);
        if (wrong)
            return cchani_error(
                CCHAN_ERR_PROTOCOL, "bootstrap",
                "allgather #%u: rank %d contributed a different size than rank 0 (%zu "
                "bytes); every rank must pass the same size",
                seq, r, bytes);
        bs->arrived[r] = 1;
        (*missing)--;
    }
    return 0;
}

static int first_missing(const cchan_bootstrap_t *bs) {
    for (int r = 1; r < bs->nranks; r++)
        if (!bs->arrived[r]) return r;
    return -1;
}

static int root_allgather(cchan_bootstrap_t *bs, const void *send, uint8_t *recv, size_t bytes,
                          uint32_t seq) {
    if (bytes) memcpy(recv, send, bytes);
    memset(bs->arrived, 0, (size_t)bs->nranks);
    int missing = bs->nranks - 1;
    uint64_t until = cchani_boot_deadline(bs);
    int rc = 0;
    while (!rc && missing > 0) {
        rc = root_collect(bs, recv, bytes, seq, &missing);
        if (rc || missing == 0) break;
        rc = cchani_boot_progress(bs, -1, 0, until);
        if (rc == CCHAN_ERR_TIMEOUT)
            rc = cchani_error(
                rc, "bootstrap",
                "timed out after %llu ms: %d rank(s) did not contribute to allgather #%u "
                "(first: rank %d)",
                (unsigned long long)bs->timeout_ms, missing, seq, first_missing(bs));
    }
    uint64_t total = (uint64_t)bs->nranks * bytes;
    for (int r = 1; r < bs->nranks && !rc; r++)
        rc = cchani_boot_write_msg(bs, r, bs->peers[r].send_fd, CCHANI_BOOT_COLL, (int32_t)seq,
                                   recv, total, cchani_boot_deadline(bs));
    return rc ? root_abort(bs, rc) : 0;
}

static int rank_allgather(cchan_bootstrap_t *bs, const void *send, uint8_t *recv, size_t bytes,
                          uint32_t seq) {
    uint64_t total = (uint64_t)bs->nranks * bytes;
    int rc = cchani_boot_write_msg(bs, 0, bs->peers[0].send_fd, CCHANI_BOOT_COLL, (int32_t)seq,
                                   send, bytes, cchani_boot_deadline(bs));
    if (rc) return rc;
    char what[64];
    snprintf(what, sizeof what, "the result of allgather #%u", seq);
    cchani_boot_msg_t *m;
    bs->expect.coll_len = total;
    rc = cchani_boot_wait_msg(bs, 0, CCHANI_BOOT_COLL, (int32_t)seq, root_answer_deadline(bs), what,
                              &m);
    bs->expect.coll_len = UINT64_MAX;
    if (rc) return rc;
    if (total) memcpy(recv, m->data, total);
    free(m);
    return 0;
}

static int allgather(cchan_bootstrap_t *bs, const void *send, void *recv, size_t bytes,
                     const char *where) {
    if (bs->custom_fn) {
        int rc = bs->custom_fn(bs->custom_ctx, send, recv, bytes);
        if (rc)
            return cchani_error(CCHAN_ERR_SYSTEM, where,
                                "rank %d of %d: the application's allgather returned %d", bs->rank,
                                bs->nranks, rc);
        return 0;
    }
    if (bytes > CCHANI_BOOT_MAX_PAYLOAD)
        return cchani_error(CCHAN_ERR_RANGE, where,
                            "%zu bytes per rank exceeds the bootstrap limit of %llu", bytes,
                            (unsigned long long)CCHANI_BOOT_MAX_PAYLOAD);
    if (bs->failed)
        return cchani_error_wrap(cchani_boot_failed_error(bs), where, "rank %d of %d", bs->rank,
                                 bs->nranks);
    uint32_t seq = ++bs->coll_seq;
    int rc = bs->rank == 0 ? root_allgather(bs, send, recv, bytes, seq)
                           : rank_allgather(bs, send, recv, bytes, seq);
    if (rc) {
        cchani_boot_fail_with_last_error(bs, rc);
        return cchani_error_wrap(rc, where, "rank %d of %d", bs->rank, bs->nranks);
    }
    return 0;
}

int cchan_bootstrap_allgather(cchan_bootstrap_t *bs, const void *send, void *recv, size_t bytes) {
    CCHANI_CHECK_ARG(bs && (bytes == 0 || (send && recv)), "cchan_bootstrap_allgather");
    pthread_mutex_lock(&bs->lock);
    int rc = allgather(bs, send, recv, bytes, "cchan_bootstrap_allgather");
    pthread_mutex_unlock(&bs->lock);
    return rc;
}

int cchan_bootstrap_barrier(cchan_bootstrap_t *bs) {
    CCHANI_CHECK_ARG(bs, "cchan_bootstrap_barrier");
    /* One byte, not zero: an application's allgather may skip a zero-byte exchange. */
    uint8_t token = 0;
    uint8_t *all = NULL;
    if (bs->custom_fn) {
        all = malloc((size_t)bs->nranks);
        if (!all) return cchani_error(-ENOMEM, "cchan_bootstrap_barrier", "no memory");
    }
    pthread_mutex_lock(&bs->lock);
    int rc = allgather(bs, &token, all, bs->custom_fn ? 1 : 0, "cchan_bootstrap_barrier");
    pthread_mutex_unlock(&bs->lock);
    free(all);
    return rc;
}

/* ---------------------------------------------------------------- public: point-to-point */

static int check_p2p(cchan_bootstrap_t *bs, int peer, const void *buf, size_t bytes,
                     const char *where) {
    CCHANI_CHECK_ARG(bs && (buf || bytes == 0), where);
    if (bs->custom_fn)
        return cchani_error(
            CCHAN_ERR_UNSUPPORTED, where,
            "a bootstrap on the application's allgather has no point-to-point messages");
    if (peer < 0 || peer >= bs->nranks)
        return cchani_error(-EINVAL, where, "rank %d of %d: peer %d is outside 0..%d", bs->rank,
                            bs->nranks, peer, bs->nranks - 1);
    if (bytes > CCHANI_BOOT_MAX_PAYLOAD)
        return cchani_error(CCHAN_ERR_RANGE, where,
                            "%zu bytes exceeds the bootstrap message limit of %llu", bytes,
                            (unsigned long long)CCHANI_BOOT_MAX_PAYLOAD);
    if (bs->failed)
        return cchani_error_wrap(cchani_boot_failed_error(bs), where, "rank %d of %d", bs->rank,
                                 bs->nranks);
    return 0;
}

static int send_to_self(cchan_bootstrap_t *bs, int tag, const void *buf, size_t bytes) {
    cchani_boot_msg_t *m = malloc(sizeof *m + bytes);
    if (!m) return cchani_error(-ENOMEM, "bootstrap", "no memory for a %zu-byte message", bytes);
    m->type = CCHANI_BOOT_P2P;
    m->tag = tag;
    m->src = bs->rank;
    m->len = bytes;
    if (bytes) memcpy(m->data, buf, bytes);
    cchani_boot_queue_push(&bs->peers[bs->rank], m);
    return 0;
}

static int bootstrap_send(cchan_bootstrap_t *bs, int peer, int tag, const void *buf, size_t bytes) {
    static const char *where = "cchan_bootstrap_send";
    int rc = check_p2p(bs, peer, buf, bytes, where);
    if (rc) return rc;
    if (peer == bs->rank) return send_to_self(bs, tag, buf, bytes);
    uint64_t until = cchani_boot_deadline(bs);
    int fd;
    rc = cchani_boot_send_fd(bs, peer, until, &fd);
    if (!rc) rc = cchani_boot_write_msg(bs, peer, fd, CCHANI_BOOT_P2P, tag, buf, bytes, until);
    if (rc)
        return cchani_error_wrap(rc, where, "rank %d of %d, to rank %d, tag %d", bs->rank,
                                 bs->nranks, peer, tag);
    return 0;
}

int cchan_bootstrap_send(cchan_bootstrap_t *bs, int peer, int tag, const void *buf, size_t bytes) {
    CCHANI_CHECK_ARG(bs, "cchan_bootstrap_send");
    pthread_mutex_lock(&bs->lock);
    int rc = bootstrap_send(bs, peer, tag, buf, bytes);
    pthread_mutex_unlock(&bs->lock);
    return rc;
}

static int bootstrap_recv(cchan_bootstrap_t *bs, int peer, int tag, void *buf, size_t bytes) {
    static const char *where = "cchan_bootstrap_recv";
    int rc = check_p2p(bs, peer, buf, bytes, where);
    if (rc) return rc;
    char what[64];
    snprintf(what, sizeof what, "a message with tag %d", tag);
    cchani_boot_msg_t *m;
    rc = cchani_boot_wait_msg(bs, peer, CCHANI_BOOT_P2P, tag, cchani_boot_deadline(bs), what, &m);
    if (rc) return cchani_error_wrap(rc, where, "rank %d of %d", bs->rank, bs->nranks);
    uint64_t len = m->len;
    if (len == bytes && bytes) memcpy(buf, m->data, bytes);
    free(m);
    if (len != bytes)
        return cchani_error(
            CCHAN_ERR_PROTOCOL, where,
            "rank %d of %d: rank %d sent %llu bytes with tag %d, the receive expects %zu", bs->rank,
            bs->nranks, peer, (unsigned long long)len, tag, bytes);
    return 0;
}

int cchan_bootstrap_recv(cchan_bootstrap_t *bs, int peer, int tag, void *buf, size_t bytes) {
    CCHANI_CHECK_ARG(bs, "cchan_bootstrap_recv");
    pthread_mutex_lock(&bs->lock);
    int rc = bootstrap_recv(bs, peer, tag, buf, bytes);
    pthread_mutex_unlock(&bs->lock);
    return rc;
}

/* ---------------------------------------------------------------- watching */

/* A peer whose connection ended becomes the bootstrap's failure. */
static void fail_on_lost_peer(cchan_bootstrap_t *bs) {
    for (int r = 0; r < bs->nranks && !bs->failed; r++) {
        cchani_boot_peer_t *p = &bs->peers[r];
        if (!p->lost || p->departed || r == bs->rank) continue;
        bs->failed_rank = r;
        (void)cchani_error(CCHAN_ERR_PEER_DEAD, "bootstrap", "rank %d died: %s", r,
                           p->lost_why ? p->lost_why : "its connection ended");
        cchani_boot_fail_with_last_error(bs, CCHAN_ERR_PEER_DEAD);
    }
}

static void send_abort(cchan_bootstrap_t *bs, int status, const char *why) {
    (void)cchani_error(status, "bootstrap", "rank %d aborted the communicator: %s", bs->rank, why);
    bs->failed_rank = bs->rank;
    cchani_boot_fail_with_last_error(bs, status);
    if (bs->rank == 0 || bs->peers[0].send_fd < 0) return; /* the root relays below */
    size_t text = strnlen(bs->failed_why, CCHANI_BOOT_MAX_ERROR_TEXT);
    uint8_t payload[4 + CCHANI_BOOT_MAX_ERROR_TEXT];
    cchani_put_le32(payload, (uint32_t)status);
    memcpy(payload + 4, bs->failed_why, text);
    (void)cchani_boot_write_msg(bs, 0, bs->peers[0].send_fd, CCHANI_BOOT_ERROR, bs->rank + 1,
                                payload, 4 + text, cchani_now_ns() + 1000000000ull);
}

int cchani_boot_watch(cchan_bootstrap_t *bs, int abort_status, const char *abort_why, int *rank,
                      char *why, size_t why_bytes) {
    if (bs->custom_fn) return 0;
    if (pthread_mutex_trylock(&bs->lock) != 0) return -EAGAIN;
    if (!bs->failed) (void)cchani_boot_progress(bs, -1, 0, cchani_now_ns());
    if (!bs->failed) fail_on_lost_peer(bs);
    if (!bs->failed && abort_status) send_abort(bs, abort_status, abort_why);
    if (bs->failed && bs->rank == 0 && !bs->relayed) root_relay(bs, bs->failed);
    int status = bs->failed;
    *rank = bs->failed_rank;
    snprintf(why, why_bytes, "%s", bs->failed_why);
    pthread_mutex_unlock(&bs->lock);
    return status;
}

/* ---------------------------------------------------------------- public: destroy */

static void free_queue(cchani_boot_peer_t *p) {
    while (p->head) {
        cchani_boot_msg_t *m = p->head;
        p->head = m->next;
        free(m);
    }
}

/* Best effort and never blocking: the peers still running then know this rank left on purpose. */
static void say_bye(cchan_bootstrap_t *bs) {
    if (bs->custom_fn || !bs->peers || bs->failed) return;
    uint8_t hdr[CCHANI_BOOT_HDR_BYTES];
    for (int r = 0; r < bs->nranks; r++) {
        if (r == bs->rank || bs->peers[r].send_fd < 0) continue;
        cchani_boot_hdr_t h = {
            CCHANI_BOOT_MAGIC, bs->expect.version, CCHANI_BOOT_BYE, 0, bs->rank, 0, 0};
        cchani_boot_seal(&bs->peers[r].tx, &h, hdr, NULL);
        struct iovec iov = {hdr, sizeof hdr};
        (void)cchani_sock_writev(bs->peers[r].send_fd, &iov, 1);
    }
}

int cchan_bootstrap_destroy(cchan_bootstrap_t *bs) {
    if (!bs) return 0;
    say_bye(bs);
    for (int r = 0; bs->peers && r < bs->nranks; r++) {
        cchani_boot_peer_t *p = &bs->peers[r];
        /* Pairs with the root send on the inbound connection, closed below with the others. */
        if (p->send_fd >= 0 && !(p->in && p->in->fd == p->send_fd)) close(p->send_fd);
        free_queue(p);
        free(p->lost_why);
    }
    for (int i = 0; i < bs->nconns; i++) {
        close(bs->conns[i]->fd);
        free(bs->conns[i]->body);
        free(bs->conns[i]);
    }
    if (bs->listen_fd >= 0) close(bs->listen_fd);
    free(bs->peers);
    free(bs->conns);
    free(bs->polled);
    free(bs->pollfds);
    free(bs->arrived);
    pthread_mutex_destroy(&bs->lock);
    free(bs);
    return 0;
}
