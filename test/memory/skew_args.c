/* A bad argument on one rank of a collective create call fails every rank at once, naming it.
 *
 *   skew_args <call>   rank 1 passes a bad argument to <call>, every other rank a good one. Every
 *                      rank must fail within BOUND_S (the bootstrap timeout is 30 s), and the
 *                      ranks that passed good arguments must name rank 1 and its cause. The
 *                      communicator works afterwards (a good call succeeds on every rank).
 *   calls: comm (a config whose size is 2^40), sem (count 0), exchange (local NULL),
 *          coll (max_blocks -1), moe (hidden 100, not a multiple of 128)
 */
#include <stdint.h>
#include <unistd.h>

#include "cchan_coll.h"
#include "cchan_moe.h"
#include "mem_test.h"

#define BOUND_S 1.0
#define BAD_RANK 1

typedef int (*call_fn)(cchan_comm_t *comm, int bad);
typedef const char *(*message_fn)(void);

static const char *core_message(void) { return cchan_last_error(); }

/* Checks the outcome on this rank: failure, on time, and the peers' message. */
static void expect_failure(int rc, double took, message_fn message, const char *cause) {
    const char *msg = message();
    /* The bad rank carries on with local work for a while, as an application would: the others
     * must not depend on it leaving (its exit would close its connections and end their wait). */
    if (mt_rank == BAD_RANK) usleep((useconds_t)(1.5 * BOUND_S * 1e6));
    printf("rank %d: %d (%s) after %.3f s: %s\n", mt_rank, rc, cchan_strerror(rc), took, msg);
    MT_CHECK(rc < 0);
    MT_CHECK(took < BOUND_S);
    MT_CHECK(strstr(msg, cause) != NULL);
    if (mt_rank != BAD_RANK) {
        MT_CHECK(rc == CCHAN_ERR_PEER);
        MT_CHECK(strstr(msg, "rank 1 failed") != NULL);
    }
}

static int sem_call(cchan_comm_t *comm, int bad) {
    cchan_sem_set_t *set = NULL;
    int rc = cchan_sem_set_create(comm, bad ? 0 : 2, 0, &set);
    if (!rc) MT_OK(cchan_sem_set_destroy(set));
    return rc;
}

static int exchange_call(cchan_comm_t *comm, int bad) {
    cchan_mem_t *mem = NULL;
    MT_OK(cchan_mem_alloc(comm, 4096, 0, &mem));
    int n = cchan_comm_size(comm);
    cchan_mem_t **peers = calloc((size_t)n, sizeof *peers);
    MT_CHECK(peers != NULL);
    int rc = cchan_mem_exchange(comm, bad ? NULL : mem, peers);
    for (int p = 0; !rc && p < n; p++)
        if (p != mt_rank) MT_OK(cchan_mem_destroy(peers[p]));
    free(peers);
    MT_OK(cchan_mem_destroy(mem));
    return rc;
}

static int coll_call(cchan_comm_t *comm, int bad) {
    cchan_coll_config_t cfg = CCHAN_COLL_CONFIG_INIT;
    if (bad) cfg.max_blocks = -1;
    cchan_coll_t *c = NULL;
    int rc = cchan_coll_create(comm, &cfg, &c);
    if (!rc) MT_OK(cchan_coll_destroy(c));
    return rc;
}

static int moe_call(cchan_comm_t *comm, int bad) {
    cchan_moe_config_t cfg = CCHAN_MOE_CONFIG_INIT;
    cfg.num_experts = 2 * cchan_comm_size(comm);
    cfg.hidden = bad ? 100 : 128;
    cfg.top_k = 1;
    cfg.max_tokens_per_rank = 4;
    cchan_moe_group_t *g = NULL;
    int rc = cchan_moe_group_create(comm, &cfg, &g);
    if (!rc) MT_OK(cchan_moe_group_destroy(g));
    return rc;
}

static void run_comm(void) {
    cchan_bootstrap_t *bs = NULL;
    MT_OK(cchan_bootstrap_create_from_env(&bs));
    mt_rank = cchan_bootstrap_rank(bs);
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST;
    if (mt_rank == BAD_RANK) cfg.size = (size_t)1 << 40;
    cchan_comm_t *comm = NULL;
    MT_OK(cchan_bootstrap_barrier(bs));
    double t0 = mt_now_s();
    int rc = cchan_comm_create(bs, &cfg, &comm);
    expect_failure(rc, mt_now_s() - t0, core_message, "config size 1099511627776");
    /* The bootstrap is intact: the ranks can still build a communicator on it. */
    cfg.size = sizeof cfg;
    MT_OK(cchan_comm_create(bs, &cfg, &comm));
    MT_OK(cchan_comm_destroy(comm));
}

int main(int argc, char **argv) {
    MT_CHECK(argc == 2);
    if (!strcmp(argv[1], "comm")) {
        run_comm();
        return 0;
    }
    call_fn call = NULL;
    message_fn message = core_message;
    const char *cause = NULL;
    if (!strcmp(argv[1], "sem")) {
        call = sem_call;
        cause = "count 0 is out of range [1, ";
    } else if (!strcmp(argv[1], "exchange")) {
        call = exchange_call;
        cause = "local is NULL";
    } else if (!strcmp(argv[1], "coll")) {
        call = coll_call;
        message = cchan_coll_last_error;
        cause = "max_blocks -1 < 0";
    } else if (!strcmp(argv[1], "moe")) {
        call = moe_call;
        message = cchan_moe_last_error;
        cause = "hidden 100 must be a positive multiple of 128";
    } else {
        return 2;
    }
    cchan_comm_t *comm = mt_comm();
    MT_CHECK(cchan_comm_size(comm) > BAD_RANK);
    mt_barrier(comm);
    double t0 = mt_now_s();
    int rc = call(comm, mt_rank == BAD_RANK);
    expect_failure(rc, mt_now_s() - t0, message, cause);
    mt_barrier(comm);
    MT_OK(call(comm, 0));
    MT_OK(cchan_comm_destroy(comm));
    return 0;
}
