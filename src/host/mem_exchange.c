/* cchan_mem_exchange: every rank's registration mapped on every rank, in three all-gathers.
 *
 *   1. offers   every rank exports its registration; all see every descriptor (or who failed).
 *   2. ready    every rank checks the descriptors and copies the fds it needs with pidfd_getfd; a
 *               rank where that is refused (or CCHAN_FDPASS=scm_rights) listens on an abstract
 *               Unix socket and says it wants fds. All see who failed and who wants fds.
 *               Then owners send their fd over SCM_RIGHTS to every rank that wants fds, and those
 *               ranks receive one fd per owner.
 *   3. done     every rank maps what it got; all see whether every rank succeeded.
 * After any round with a failure every rank cleans up and returns an error, so no rank waits for
 * one that gave up and no rank keeps a half-built exchange.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fdpass.h"
#include "mem.h"

typedef struct exchange_offer {
    cchan_mem_desc_t desc;
    int32_t status;
    int32_t reserved;
} exchange_offer_t;

typedef struct exchange_vote {
    int32_t status;
    int32_t wants_fds;
    uint64_t nonce; /* names this rank's fd-passing socket (fdpass.h) when it wants fds */
} exchange_vote_t;

typedef struct exchange {
    cchan_comm_t *comm;
    cchan_mem_t *local;
    uint32_t seq;
    int mode;            /* enum cchani_fdpass_mode */
    uint64_t timeout_ms; /* for SCM_RIGHTS connects and receives */
    exchange_offer_t *offers;
    cchani_mem_wire_t *wires;
    exchange_vote_t *votes;
    int *fds; /* fds copied from each owner, -1 */
    cchan_mem_t **imports;
    int wants_fds;
    int listen_fd;
    uint64_t nonce;
} exchange_t;

static const char *where = "cchan_mem_exchange";

/* ---------------------------------------------------------------- agreement */

/* All-gathers this rank's vote. 0 when every rank succeeded; otherwise this rank's own error, or
 * one naming the first rank that failed at `step`. */
static int vote(exchange_t *x, int status, int wants_fds, const char *step) {
    exchange_vote_t mine = {status, wants_fds, x->nonce};
    int r = cchan_bootstrap_allgather(x->comm->bs, &mine, x->votes, sizeof mine);
    if (r) return cchani_error_wrap(r, where, "all-gather after %s", step);
    return cchani_comm_verdict(x->comm, status, x->votes, sizeof *x->votes,
                               offsetof(exchange_vote_t, status), where, step);
}

/* ---------------------------------------------------------------- round 1: offers */

/* `setup`: this rank's status so far; a rank that failed still takes part, so its peers learn of
 * it. */
static int gather_offers(exchange_t *x, int setup) {
    exchange_offer_t mine;
    memset(&mine, 0, sizeof mine);
    mine.status = setup ? setup : cchan_mem_export(x->local, &mine.desc);
    int r = cchan_bootstrap_allgather(x->comm->bs, &mine, x->offers, sizeof mine);
    if (r) return cchani_error_wrap(r, where, "all-gather of descriptors");
    return cchani_comm_verdict(x->comm, mine.status, x->offers, sizeof *x->offers,
                               offsetof(exchange_offer_t, status), where, "export its memory");
}

/* ---------------------------------------------------------------- round 2: checks and fds */

static int check_offers(exchange_t *x) {
    for (int p = 0; p < x->comm->nranks; p++) {
        if (p == x->comm->rank) continue;
        int r = cchani_mem_import_check(x->comm, &x->offers[p].desc, &x->wires[p]);
        if (r) return cchani_error_wrap(r, where, "descriptor of rank %d", p);
        if (x->wires[p].owner_rank != p)
            return cchani_error(CCHAN_ERR_PROTOCOL, where,
                                "rank %d offered a descriptor of rank %d", p,
                                x->wires[p].owner_rank);
    }
    return 0;
}

static int needs_fd_from(const exchange_t *x, int p) {
    return p != x->comm->rank && cchani_mem_import_needs_fd(x->comm, &x->wires[p]);
}

static void close_fds(exchange_t *x) {
    for (int p = 0; p < x->comm->nranks; p++) {
        if (x->fds[p] >= 0) close(x->fds[p]);
        x->fds[p] = -1;
    }
}

static int count_owners(const exchange_t *x) {
    int n = 0;
    for (int p = 0; p < x->comm->nranks; p++) n += needs_fd_from(x, p);
    return n;
}

/* Copies every needed fd with pidfd_getfd, or decides to receive them all over SCM_RIGHTS. */
static int fetch_fds(exchange_t *x) {
    if (count_owners(x) == 0) return 0;
    if (x->mode == CCHANI_FDPASS_SCM_RIGHTS) {
        x->wants_fds = 1;
        return 0;
    }
    for (int p = 0; p < x->comm->nranks; p++) {
        if (!needs_fd_from(x, p)) continue;
        int r = cchani_fd_from_pid(x->wires[p].owner_pid, x->wires[p].owner_fd, &x->fds[p]);
        if (!r) continue;
        if (x->mode == CCHANI_FDPASS_AUTO && cchani_fdpass_refused(r)) {
            CCHANI_INFO(CCHANI_SUB_MEM,
                        "rank %d: pidfd_getfd refused (%s); receiving fds over SCM_RIGHTS",
                        x->comm->rank, cchan_last_error());
            cchani_clear_error();
            close_fds(x);
            x->wants_fds = 1;
            return 0;
        }
        return cchani_error_wrap(r, where, "fd of rank %d", p);
    }
    return 0;
}

static int prepare(exchange_t *x) {
    int r = check_offers(x);
    if (!r) r = fetch_fds(x);
    /* Listen before voting: a sender connects as soon as the vote is over. */
    if (!r && x->wants_fds)
        r = cchani_fdpass_listen(x->comm->session, x->seq, x->comm->rank, count_owners(x),
                                 &x->nonce, &x->listen_fd);
    return r;
}

/* Ranks this rank owes its fd: they want fds, and share this host (an fd cannot travel to
 * another host; such a rank does not import one). */
static int owes_fd_to(const exchange_t *x, int p) {
    const cchani_peer_info_t *peer = &x->comm->peers[p];
    return p != x->comm->rank && x->votes[p].wants_fds && peer->pid != (int32_t)getpid() &&
           peer->host_hash == x->comm->peers[x->comm->rank].host_hash;
}

/* A received fd is accepted only from the owner the kernel says sent it, for this exchange. */
static int accept_fd(exchange_t *x, const cchani_fdpass_msg_t *msg, pid_t pid, int fd) {
    int p = msg->rank;
    int ok = p >= 0 && p < x->comm->nranks && needs_fd_from(x, p) && x->fds[p] < 0 &&
             msg->session == x->comm->session && msg->seq == x->seq &&
             msg->key == x->wires[p].key && pid == (pid_t)x->wires[p].owner_pid;
    if (!ok) {
        close(fd);
        return cchani_error(
            CCHAN_ERR_PROTOCOL, where,
            "unexpected fd message (rank %d, pid %d, exchange %u) while waiting for owners' fds", p,
            (int)pid, msg->seq);
    }
    x->fds[p] = fd;
    return 0;
}

/* Connections are taken only from owners whose fd this rank still waits for. */
static int owes_fd(void *ctx, pid_t pid) {
    const exchange_t *x = (const exchange_t *)ctx;
    for (int p = 0; p < x->comm->nranks; p++)
        if (needs_fd_from(x, p) && x->fds[p] < 0 && pid == (pid_t)x->wires[p].owner_pid) return 1;
    return 0;
}

/* Sends this rank's fd to every rank that wants it while receiving the fds this rank wants, in one
 * loop: a send whose receiver's backlog is full (strangers may fill it) is retried, and meanwhile
 * this rank keeps draining its own listener, so no two ranks wait on each other. */
static int pass_fds(exchange_t *x) {
    int fd = cchani_mem_export_fd(x->local);
    cchani_fdpass_msg_t out = {x->comm->session, x->local->key, x->seq, x->comm->rank};
    int n = x->comm->nranks, to_send = 0, to_receive = x->wants_fds ? count_owners(x) : 0;
    char *sent = (char *)calloc((size_t)n, 1);
    if (!sent) return cchani_error(-ENOMEM, where, "fd-passing state");
    for (int p = 0; p < n; p++) to_send += fd >= 0 && owes_fd_to(x, p);
    uint64_t deadline = cchani_now_ns() + x->timeout_ms * 1000000ull;
    int r = 0;
    while (!r && (to_send > 0 || to_receive > 0)) {
        for (int p = 0; !r && fd >= 0 && p < n; p++) {
            if (sent[p] || !owes_fd_to(x, p)) continue;
            r = cchani_fdpass_try_send(x->comm->session, x->seq, p, x->votes[p].nonce,
                                       (pid_t)x->comm->peers[p].pid, &out, fd);
            if (r == -EAGAIN) {
                r = 0;
                continue;
            }
            if (r) r = cchani_error_wrap(r, where, "sending the fd to rank %d", p);
            sent[p] = 1;
            to_send--;
        }
        while (!r && to_receive > 0) {
            cchani_fdpass_msg_t msg;
            int got = -1;
            pid_t pid = 0;
            int k =
                cchani_fdpass_try_recv(x->listen_fd, x->timeout_ms, owes_fd, x, &msg, &got, &pid);
            if (k <= 0) {
                r = k;
                break;
            }
            r = accept_fd(x, &msg, pid, got);
            to_receive--;
        }
        if (r || (to_send == 0 && to_receive == 0)) break;
        if (cchani_now_ns() >= deadline) {
            r = cchani_error(CCHAN_ERR_TIMEOUT, where,
                             "fd passing over SCM_RIGHTS did not finish within %llu ms "
                             "(CCHAN_BOOTSTRAP_TIMEOUT_MS): %d fd(s) not received, %d not sent",
                             (unsigned long long)x->timeout_ms, to_receive, to_send);
            break;
        }
        /* Sends pending: retry soon; else sleep until a connection arrives. */
        struct pollfd pl = {x->listen_fd, POLLIN, 0};
        (void)poll(&pl, to_receive > 0 ? 1 : 0, to_send > 0 ? 1 : 100);
    }
    free(sent);
    return r;
}

/* ---------------------------------------------------------------- round 3: mapping */

static int map_all(exchange_t *x) {
    for (int p = 0; p < x->comm->nranks; p++) {
        if (p == x->comm->rank) continue;
        int fd = x->fds[p];
        x->fds[p] = -1; /* consumed by the import, success or not */
        int r = cchani_mem_import_wire(x->comm, &x->wires[p], fd, &x->imports[p]);
        if (r) return r;
        cchani_comm_hold(x->comm);
    }
    return 0;
}

static int pass_and_map(exchange_t *x) {
    int r = pass_fds(x);
    if (!r) r = map_all(x);
    return r;
}

/* ---------------------------------------------------------------- driver */

/* Allocation failures end the call here (nothing to take part with); configuration errors are
 * returned as the setup status and reported to the peers in round 1. */
static int exchange_alloc(exchange_t *x, cchan_comm_t *comm, cchan_mem_t *local) {
    memset(x, 0, sizeof *x);
    x->comm = comm;
    x->local = local;
    x->listen_fd = -1;
    x->seq = comm->exchange_seq++;
    size_t n = (size_t)comm->nranks;
    x->offers = (exchange_offer_t *)calloc(n, sizeof *x->offers);
    x->wires = (cchani_mem_wire_t *)calloc(n, sizeof *x->wires);
    x->votes = (exchange_vote_t *)calloc(n, sizeof *x->votes);
    x->fds = (int *)malloc(n * sizeof *x->fds);
    x->imports = (cchan_mem_t **)calloc(n, sizeof *x->imports);
    if (!x->offers || !x->wires || !x->votes || !x->fds || !x->imports)
        return cchani_error(-ENOMEM, where, "exchange state for %d ranks", comm->nranks);
    for (size_t p = 0; p < n; p++) x->fds[p] = -1;
    return 0;
}

static int exchange_config(exchange_t *x) {
    int r = cchani_fdpass_mode(&x->mode);
    if (!r) r = cchani_env_u64("CCHAN_BOOTSTRAP_TIMEOUT_MS", 30000, &x->timeout_ms);
    return r;
}

static void exchange_free(exchange_t *x, int failed) {
    if (x->listen_fd >= 0) close(x->listen_fd);
    if (x->fds) close_fds(x);
    for (int p = 0; failed && x->imports && p < x->comm->nranks; p++)
        cchan_mem_destroy(x->imports[p]);
    free(x->offers);
    free(x->wires);
    free(x->votes);
    free(x->fds);
    free(x->imports);
}

static int check_args(const exchange_t *x, cchan_mem_t *const *peers) {
    if (!x->local) return cchani_error(-EINVAL, where, "local is NULL");
    if (!peers) return cchani_error(-EINVAL, where, "peers is NULL");
    if (cchani_mem_comm(x->local) != x->comm)
        return cchani_error(-EINVAL, where, "local belongs to another communicator");
    if (!cchani_mem_is_local(x->local))
        return cchani_error(-EINVAL, where,
                            "local is an import of rank %d's memory, not this rank's registration",
                            cchan_mem_rank(x->local));
    return 0;
}

static int exchange_run(exchange_t *x, cchan_mem_t *const *peers) {
    cchani_device_scope_t scope;
    /* Argument errors travel with the offers, so every rank names the rank that made them. */
    int setup = check_args(x, peers);
    if (!setup) setup = exchange_config(x);
    if (!setup) setup = cchani_device_enter(x->comm, &scope);
    int r = gather_offers(x, setup);
    if (!r) {
        int status = prepare(x); /* decides x->wants_fds */
        r = vote(x, status, x->wants_fds, "check descriptors or copy fds");
    }
    if (!r) r = vote(x, pass_and_map(x), 0, "pass fds or map memory");
    if (!setup) cchani_device_leave(&scope);
    return r;
}

int cchan_mem_exchange(cchan_comm_t *comm, cchan_mem_t *local, cchan_mem_t **peers) {
    CCHANI_CHECK_ARG(comm != NULL, where);
    CCHANI_CHECK_ABORT(comm, where);
    exchange_t x;
    int r = exchange_alloc(&x, comm, local);
    if (!r) r = exchange_run(&x, peers);
    if (!r) {
        x.imports[comm->rank] = local;
        memcpy(peers, x.imports, (size_t)comm->nranks * sizeof *peers);
    }
    exchange_free(&x, r != 0);
    return r;
}
