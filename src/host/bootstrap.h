/* cchan bootstrap: internals shared by the bootstrap's modules and its tests (not installed).
 *
 *   bootstrap.c         the protocol: init, allgather/barrier, send/recv, the public API
 *   bootstrap_net.c     the message layer: connections, progress, per-peer queues, admission
 *   bootstrap_wire.[ch] the wire format;  bootstrap_socket.[ch] TCP helpers
 *   bootstrap_env.c     rank, size and root address from launcher environments
 */
#ifndef CCHAN_SRC_HOST_BOOTSTRAP_H
#define CCHAN_SRC_HOST_BOOTSTRAP_H

#include <poll.h>
#include <pthread.h>
#include <stdint.h>

#include "bootstrap_wire.h"

#define CCHANI_BOOT_DEFAULT_TIMEOUT_MS 30000u
#define CCHANI_BOOT_HOST_BYTES 256u
/* Connections that have not completed their handshake, held at once. Past it the listener sheds
 * one: from the source address holding the most, the one that has sent least (nothing, then a
 * partial header, then an AUTH awaiting its HELLO), the oldest of those. */
#define CCHANI_BOOT_MAX_PENDING 64
/* Connections accepted per pass of the progress loop: the ranks' own traffic is served between
 * batches however fast strangers connect. */
#define CCHANI_BOOT_ACCEPT_BATCH 128
/* Connector's backoff after a BUSY or a connection closed during the handshake (doubling, with
 * jitter), until its deadline. */
#define CCHANI_BOOT_RETRY_MIN_MS 5u
#define CCHANI_BOOT_RETRY_MAX_MS 250u
/* A connection that has not completed its handshake within this long (or the bootstrap timeout,
 * when shorter) is closed: a rank completes it within a round trip of connecting. */
#define CCHANI_BOOT_PENDING_IDLE_MS 10000u
/* Bytes of messages from one peer that no receive has taken yet: past this the peer's connection
 * fails (a send with no matching receive, or a runaway sender) instead of memory growing. */
#define CCHANI_BOOT_MAX_QUEUED ((uint64_t)256 << 20)

/* ---------------------------------------------------------------- environment (bootstrap_env.c) */

/* What a launcher's environment says about this process. */
typedef struct cchani_boot_env {
    const char *launcher; /* "cchan-run", "torchrun", "Open MPI", "MPICH/PMI" or "Slurm" */
    int rank;
    int nranks;
    int local_rank; /* -1 when the launcher does not say (derived by hostname later) */
    int local_size;
    char root_host[CCHANI_BOOT_HOST_BYTES]; /* numeric address or host name */
    uint16_t root_port;
    uint64_t session; /* the same on every rank of the job: hashed from shared variables */
    int public_key;   /* no CCHAN_BOOTSTRAP_SECRET: anyone who knows the job can compute the key */
} cchani_boot_env_t;

/* Reads rank, size, local rank/size and the root address from the first launcher whose variables
 * are present (order: cchan-run, torchrun, Open MPI, MPICH/PMI, Slurm). -EINVAL naming the missing
 * or malformed variable otherwise. */
CCHANI_HIDDEN int cchani_boot_env_parse(cchani_boot_env_t *out);

/* This rank's host name as cchan sees it: gethostname(), or under the topology override
 * CCHAN_HOST_SPLIT=N (ranks in N consecutive equal groups) or CCHAN_HOST_ID=k "<hostname>#k", so
 * that ranks of one machine form several "hosts" for every decision that depends on sharing one
 * (local rank and size, the comm's host hash: memory mapping, fd passing, transports). *overridden
 * (may be NULL) says whether an override applies. -EINVAL naming the variable when it is malformed,
 * both are set, or N does not divide nranks. */
CCHANI_HIDDEN int cchani_host_name(int rank, int nranks, char out[CCHANI_BOOT_HOSTNAME_BYTES],
                                   int *overridden);

/* The wire version this process speaks: CCHANI_BOOT_WIRE_VERSION, unless the test-only
 * CCHAN_TEST_WIRE_VERSION overrides it (to provoke a version mismatch). */
CCHANI_HIDDEN int cchani_boot_wire_version(uint16_t *out);

/* ---------------------------------------------------------------- state */

/* A received message, queued on its sender until a receive takes it. */
typedef struct cchani_boot_msg {
    struct cchani_boot_msg *next;
    uint16_t type;
    int32_t tag;
    int32_t src;
    uint64_t len;
    uint8_t data[];
} cchani_boot_msg_t;

/* An inbound connection and its receive state. */
typedef struct cchani_boot_conn {
    int fd;
    uint64_t accepted_ns;
    uint64_t source; /* hash of the remote address (not the port): the per-source share */
    int peer;        /* -1 until its HELLO proves the session key and names the sender */
    int dead;        /* no longer read: the peer closed it or broke the protocol */
    /* Handshake (listener side, see bootstrap_wire.h): 0 until the connector's AUTH, 1 until its
     * HELLO; proven once its proof checked out (then rejections may carry the session key). */
    int stage;
    int proven;
    int32_t claimed; /* the rank its AUTH claimed */
    uint64_t nonce_c, nonce_s;
    cchani_boot_key_t rx; /* what arrives once proven carries a MAC under it */
    size_t hdr_got;
    uint8_t hdr_buf[CCHANI_BOOT_HDR_BYTES];
    cchani_boot_hdr_t hdr;
    cchani_boot_msg_t *body; /* the message being received once its header was accepted */
    uint64_t body_got;
} cchani_boot_conn_t;

typedef struct cchani_boot_peer {
    cchani_boot_peer_record_t rec;
    /* Where we send to this peer: for pairs with the root, the init connection (shared with in);
     * for other pairs, a connection we opened on our first send. */
    int send_fd;
    cchani_boot_key_t tx;           /* what we send on send_fd carries a MAC under it */
    cchani_boot_conn_t *in;         /* where this peer's messages arrive */
    cchani_boot_msg_t *head, *tail; /* arrived, not yet consumed */
    uint64_t queued;                /* payload bytes in that queue */
    int lost;                       /* status once `in` failed; queued messages stay consumable */
    int departed;                   /* it said BYE: its connections ending is no death */
    char *lost_why;
} cchani_boot_peer_t;

struct cchan_bootstrap {
    int rank;
    int nranks;
    int local_rank;
    int local_size;
    int host_override;            /* CCHAN_HOST_SPLIT / CCHAN_HOST_ID apply (cchani_host_name) */
    cchan_allgather_fn custom_fn; /* set: the application's allgather, and nothing below is used */
    void *custom_ctx;
    uint64_t timeout_ns;
    uint64_t timeout_ms;
    cchani_boot_expect_t expect;
    int listen_fd;
    cchani_boot_peer_t *peers;
    cchani_boot_conn_t *
        *conns; /* inbound connections, identified and pending; capacity conns_cap */
    int nconns;
    int conns_cap;
    int npending;
    struct pollfd *pollfds; /* cchani_boot_progress() scratch: listener, conns, one outbound fd */
    cchani_boot_conn_t **polled;
    uint8_t *arrived; /* root: which contributions of the current allgather are in */
    uint32_t coll_seq;
    uint64_t queue_limit; /* CCHANI_BOOT_MAX_QUEUED (tests lower it) */
    uint64_t pending_idle_ns;
    int failed;      /* sticky: this bootstrap is broken, every later call fails with it */
    int failed_rank; /* the rank that died or aborted and so caused `failed`, -1 if none/unknown */
    int relayed;     /* root: `failed` was sent to every rank */
    char failed_why[CCHANI_BOOT_MAX_ERROR_TEXT];
    /* Serializes the public calls with cchani_boot_watch() on a communicator's watcher thread. */
    pthread_mutex_t lock;
    /* Root during init: who joined, the first fatal problem seen (version or size mismatch,
     * duplicate rank), and the connections turned away, so that a timeout names the likely cause.
     */
    int init_done;
    int joined;
    int version_rejects;
    int init_status;
    char init_why[CCHANI_BOOT_MAX_ERROR_TEXT];
    unsigned rejected;
    char rejected_why[256];
    uint64_t dropped; /* unidentified connections that ended before their AUTH: not counted above */
    uint64_t shed;    /* unidentified connections closed to make room (the AUTH'd ones got BUSY) */
};

static inline uint64_t cchani_boot_deadline(const cchan_bootstrap_t *bs) {
    return cchani_now_ns() + bs->timeout_ns;
}

/* ---------------------------------------------------------------- message layer (bootstrap_net.c)
 * Functions that fail record the last error; statuses are cchan's. */

/* Waits until the listener or an inbound connection has input (and handles it: messages are
 * queued on their sender, handshakes admit connections, ERRORs fail the bootstrap), fd (if >= 0)
 * has `events`, or deadline_ns passes: CCHAN_ERR_TIMEOUT without a message, which callers word.
 * Closes connections that stay unauthenticated too long. */
CCHANI_HIDDEN int cchani_boot_progress(cchan_bootstrap_t *bs, int fd, short events,
                                       uint64_t deadline_ns);
/* Waits for a message of type/tag from peer; `what` names it in errors. Messages queued before a
 * failure report are still delivered. */
CCHANI_HIDDEN int cchani_boot_wait_msg(cchan_bootstrap_t *bs, int peer, uint16_t type, int32_t tag,
                                       uint64_t deadline_ns, const char *what,
                                       cchani_boot_msg_t **out);
/* Writes one message to fd (peer names it in errors), serving inbound traffic while the socket is
 * full so that two ranks sending large messages to each other cannot deadlock. */
CCHANI_HIDDEN int cchani_boot_write_msg(cchan_bootstrap_t *bs, int peer, int fd, uint16_t type,
                                        int32_t tag, const void *payload, uint64_t len,
                                        uint64_t deadline_ns);
/* Connector side of the handshake (bootstrap_wire.h): connects to addr (retrying refusals while
 * retry_refused is set: the listener may not be up yet), proves the key both ways, sends our HELLO
 * and waits for the WELCOME. A listener that sheds the connection (BUSY, or closing it before it
 * answered) is tried again with backoff until deadline_ns. A rank that does not listen yet opens
 * its listener on the interface of its first connection to the root, before the HELLO that
 * carries the address. On success *fd is the connection, *tx and *rx its keys. */
CCHANI_HIDDEN int cchani_boot_connect(cchan_bootstrap_t *bs, const cchani_boot_addr_t *addr,
                                      int peer, int retry_refused, const char *what,
                                      uint64_t deadline_ns, int *fd, cchani_boot_key_t *tx,
                                      cchani_boot_key_t *rx);
/* The connection to send to peer; opened and introduced on first use between non-root ranks. */
CCHANI_HIDDEN int cchani_boot_send_fd(cchan_bootstrap_t *bs, int peer, uint64_t deadline_ns,
                                      int *fd);
/* Registers an accepted (peer -1) or established connection; takes ownership of fd and c. */
CCHANI_HIDDEN void cchani_boot_conn_add(cchan_bootstrap_t *bs, int fd, int peer,
                                        cchani_boot_conn_t *c);
/* Peer queues count their bytes (cchani_boot_peer_t.queued). */
CCHANI_HIDDEN void cchani_boot_queue_push(cchani_boot_peer_t *p, cchani_boot_msg_t *m);
CCHANI_HIDDEN cchani_boot_msg_t *cchani_boot_queue_take(cchani_boot_peer_t *p, uint16_t type,
                                                        int32_t tag);

/* The thread's last error without the "bootstrap: " prefix and the " (<status text>)" suffix that
 * cchani_error() adds, so that it can be nested in another message without repeating them. */
CCHANI_HIDDEN void cchani_boot_error_core(int status, char *out, size_t n);
/* Makes the last error (with `status`) this bootstrap's lasting failure; the first one wins. */
CCHANI_HIDDEN void cchani_boot_fail_with_last_error(cchan_bootstrap_t *bs, int status);
/* Records the lasting failure as the last error and returns its status. */
CCHANI_HIDDEN int cchani_boot_failed_error(const cchan_bootstrap_t *bs);

/* For a communicator's watcher thread, while no other thread is inside the bootstrap (else -EAGAIN
 * at once): serves pending input, turns a peer that died into the bootstrap's failure (the root
 * tells every rank, naming it), and, when abort_status is nonzero, fails the bootstrap with it and
 * tells the other ranks (through the root). Returns the bootstrap's failure status (0: none) with
 * the rank that caused it (-1: unknown) and the reason. A bootstrap on an application's allgather
 * returns 0: it has nothing to watch. */
CCHANI_HIDDEN int cchani_boot_watch(cchan_bootstrap_t *bs, int abort_status, const char *abort_why,
                                    int *rank, char *why, size_t why_bytes);

#endif /* CCHAN_SRC_HOST_BOOTSTRAP_H */
