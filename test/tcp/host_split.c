/* The topology override (CCHAN_HOST_SPLIT, CCHAN_HOST_ID): ranks of one machine form several
 * "hosts", and every decision that depends on sharing a host follows it.
 *
 *   host_split topology   under cchan-run with CCHAN_HOST_SPLIT=2 (4 ranks: hosts {0,1}, {2,3}):
 *                         local rank and size, each rank's host name and hash, memory of the same
 *                         "host" mapped and of the other unmapped, a memory channel across hosts
 *                         refused naming both hosts, one within a host accepted
 *   host_split refuse     one process: a split that does not divide the ranks, and both
 *                         variables at once, fail the bootstrap naming the variable
 *
 * Port channels across the split run in port_net (test/tcp/CMakeLists.txt). INTERNAL: it reads
 * the comm's peer table to see each rank's host. */
#include "port_test.h"
#include "runtime.h"

static int host_of(int rank, int nranks, int split) { return rank / (nranks / split); }

static void run_topology(void) {
    pt_t t;
    pt_init(&t, 4096, 1, 64, 0);
    const char *v = getenv("CCHAN_HOST_SPLIT");
    PT_CHECK(v && atoi(v) > 0, "run under CCHAN_HOST_SPLIT");
    int split = atoi(v), per = t.nranks / split;
    cchan_bootstrap_t *bs = cchan_comm_bootstrap(t.comm);
    PT_CHECK(cchan_bootstrap_local_rank(bs) == t.rank % per &&
                 cchan_bootstrap_local_size(bs) == per,
             "local rank/size %d/%d, want %d/%d", cchan_bootstrap_local_rank(bs),
             cchan_bootstrap_local_size(bs), t.rank % per, per);
    const cchani_peer_info_t *p = t.comm->peers;
    for (int r = 0; r < t.nranks; r++) {
        char want[16];
        snprintf(want, sizeof want, "#%d", host_of(r, t.nranks, split));
        const char *hash = strrchr(p[r].hostname, '#');
        PT_CHECK(hash && !strcmp(hash, want), "rank %d's host is '%s', want a name ending in %s", r,
                 p[r].hostname, want);
        int same = host_of(r, t.nranks, split) == host_of(t.rank, t.nranks, split);
        PT_CHECK((p[r].host_hash == p[t.rank].host_hash) == same,
                 "rank %d's host hash %s this rank's", r, same ? "differs from" : "equals");
        if (r == t.rank) continue;
        PT_CHECK((cchan_mem_ptr(t.peers[r]) != NULL) == same, "rank %d's memory is %s here", r,
                 same ? "not mapped" : "mapped");
        cchan_memory_channel_t mc;
        int mr = cchan_memory_channel_init(t.comm, t.sems, r, 0, t.peers[r], t.src, t.dst, &mc);
        if (same) {
            PT_CHECK(mr == 0, "memory channel within a host: %s", cchan_last_error());
            continue;
        }
        PT_CHECK(mr == CCHAN_ERR_UNSUPPORTED, "memory channel across hosts: %d", mr);
        const char *why = cchan_last_error();
        PT_CHECK(strstr(why, p[r].hostname) && strstr(why, p[t.rank].hostname),
                 "the error names neither host or only one: %s", why);
        cchan_port_channel_t hc;
        mr = cchan_port_channel_create(t.proxy, CCHAN_TRANSPORT_HOST, t.sems, r, 0, t.peers[r],
                                       t.src, &hc);
        PT_CHECK(mr == CCHAN_ERR_UNSUPPORTED, "host transport across hosts: %d", mr);
    }
    if (t.rank == 0) printf("host_split topology: %d hosts of %d ranks: ok\n", split, per);
    pt_fini(&t);
}

static int no_allgather(void *ctx, const void *send, void *recv, size_t bytes) {
    (void)send, (void)recv, (void)bytes;
    ++*(int *)ctx;
    return 0;
}

static void expect_refused(const char *split, const char *id, const char *needle) {
    setenv("CCHAN_HOST_SPLIT", split, 1);
    if (id)
        setenv("CCHAN_HOST_ID", id, 1);
    else
        unsetenv("CCHAN_HOST_ID");
    int calls = 0;
    cchan_bootstrap_t *bs = NULL;
    int r = cchan_bootstrap_create_custom(1, 4, no_allgather, &calls, &bs);
    if (r == 0) cchan_bootstrap_destroy(bs);
    PT_CHECK(r == -EINVAL, "CCHAN_HOST_SPLIT=%s CCHAN_HOST_ID=%s at 4 ranks: %d", split,
             id ? id : "(unset)", r);
    PT_CHECK(calls == 0, "the allgather ran although the override is refused");
    PT_CHECK(strstr(cchan_last_error(), needle), "error does not say '%s': %s", needle,
             cchan_last_error());
}

static void run_refuse(void) {
    expect_refused("3", NULL, "CCHAN_HOST_SPLIT=3 does not divide the 4 ranks");
    expect_refused("8", NULL, "CCHAN_HOST_SPLIT=8 does not divide the 4 ranks");
    expect_refused("2", "1", "are both set");
    expect_refused("x", NULL, "CCHAN_HOST_SPLIT");
    printf("host_split refuse: ok\n");
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "topology"))
        run_topology();
    else if (argc == 2 && !strcmp(argv[1], "refuse"))
        run_refuse();
    else {
        fprintf(stderr, "usage: %s topology|refuse\n", argv[0]);
        return 2;
    }
    return 0;
}
