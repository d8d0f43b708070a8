/* After an abort no call succeeds: every rank runs a loop of collectives (no deadline set) while
 * one rank ends the communicator, and then checks
 *   - on the aborting rank, that no call started after cchan_comm_abort() returned succeeds;
 *   - on every rank, that no call succeeds later than 1 s after the abort (or the death);
 *   - that the first failure and every later call of cchan, cchan_coll, cchan_fused, cchan_moe and
 *     cchan_exec on the communicator fail at once with the abort's status, and that the message
 *     names the cause ("rank 0 aborted", "peer N died"), not a deadline that was never set.
 *
 *   cchan-run -n N fault_abort abort|dead
 *
 * abort: a second thread of rank 0 calls cchan_comm_abort() while its main thread runs the loop.
 * dead:  the last rank leaves with _exit() in the middle of the loop.
 * The rank that ends the communicator stores the time (CLOCK_MONOTONIC, one clock for every process
 * of the host) in every rank's shared buffer, mapped with cchan_mem_exchange before the loop.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cchan_coll.h"
#include "cchan_fused.h"
#include "cchan_moe.h"
#include "cchan_test.h"
#ifdef FAULT_HAVE_EXEC
#include "cchan_exec.h"
#endif

#define COUNT 4096
#define LIMIT_NS 1000000000ull /* every rank fails within this of the abort */

static cchan_comm_t *g_comm;
static cchan_coll_t *g_coll;
static int g_rank, g_nranks;
static uint64_t *g_shared; /* this rank's shared words: [0] the abort time, [1 + r] rank r done */
static cchan_mem_t *g_peers[64]; /* every rank's shared words, mapped here */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The abort's time into every rank's words (nonzero). */
static void publish_time(uint64_t t) {
    for (int r = 0; r < g_nranks; r++)
        __atomic_store_n((uint64_t *)cchan_mem_ptr(g_peers[r]), t, __ATOMIC_RELEASE);
}

static void *abort_later(void *arg) {
    (void)arg;
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
    CT_OK(cchan_comm_abort(g_comm));
    publish_time(now_ns());
    return NULL;
}

static float g_send[COUNT * 8], g_recv[COUNT * 8];

static int one_call(uint64_t i) {
    switch (i % 3) {
    case 0:
        return cchan_coll_allreduce(g_coll, g_send, g_recv, COUNT, CCHAN_COLL_F32, CCHAN_COLL_AUTO,
                                    NULL);
    case 1:
        return cchan_coll_allgather(g_coll, g_send, g_recv, COUNT / 8, CCHAN_COLL_F32,
                                    CCHAN_COLL_AUTO, NULL);
    default:
        return cchan_coll_reducescatter(g_coll, g_send, g_recv, COUNT / 8, CCHAN_COLL_F32,
                                        CCHAN_COLL_AUTO, NULL);
    }
}

/* Every call that works on the communicator, once more after the first failure. */
static void check_all_fail(int want, cchan_fused_rmsnorm_t *fused, const char *cause) {
    static uint16_t x[4 * 64] __attribute__((aligned(16))), w[64] __attribute__((aligned(16))),
        y[4 * 64] __attribute__((aligned(16))), ro[4 * 64] __attribute__((aligned(16)));
    char local[4096];
    const char *names[32];
    int got[32], n = 0;
#define TRY(call)                                                                                  \
    do {                                                                                           \
        names[n] = #call;                                                                          \
        got[n] = (call);                                                                           \
        CT_EXPECT(got[n] == want, "%s = %d (%s), want %d: %s", #call, got[n],                      \
                  cchan_strerror(got[n]), want, cchan_last_error());                               \
        CT_EXPECT(got[n] != want || strstr(cchan_last_error(), cause) != NULL,                     \
                  "%s: the message does not say \"%s\": %s", #call, cause, cchan_last_error());    \
        n++;                                                                                       \
    } while (0)
    for (uint64_t i = 0; i < 3; i++) TRY(one_call(i));
    cchan_mem_t *m = NULL;
    cchan_sem_set_t *s = NULL;
    cchan_mem_t *peers[64];
    cchan_grid_barrier_t gb;
    cchan_switch_channel_t sw;
    cchan_switch_t *owner = NULL;
    TRY(cchan_comm_check(g_comm, "fault_abort"));
    TRY(cchan_comm_check_device(g_comm));
    TRY(cchan_comm_agree(g_comm, 0, "fault_abort", NULL));
    TRY(cchan_mem_alloc(g_comm, 4096, 0, &m));
    TRY(cchan_mem_register(g_comm, local, sizeof local, 0, &m));
    TRY(cchan_mem_exchange(g_comm, g_peers[g_rank], peers));
    TRY(cchan_sem_set_create(g_comm, 1, 0, &s));
    TRY(cchan_grid_barrier_create(g_comm, 1, &gb));
    TRY(cchan_switch_channel_create(g_comm, g_peers[g_rank], NULL, 0, &sw, &owner));
    TRY(cchan_coll_register(g_coll, local, sizeof local));
    TRY(cchan_coll_alltoall(g_coll, g_send, g_recv, 8, CCHAN_COLL_F32, NULL));
    cchan_coll_t *c2 = NULL;
    TRY(cchan_coll_create(g_comm, NULL, &c2));
    TRY(cchan_fused_rmsnorm_run(fused, x, x, w, 1e-6f, ro, y, 4, CCHAN_FUSED_AUTO, NULL));
    cchan_fused_rmsnorm_t *f2 = NULL;
    TRY(cchan_fused_rmsnorm_create(g_comm, 4, 64, &f2));
    cchan_moe_config_t mcfg = CCHAN_MOE_CONFIG_INIT;
    cchan_moe_group_t *mg = NULL;
    TRY(cchan_moe_group_create(g_comm, &mcfg, &mg));
#ifdef FAULT_HAVE_EXEC
    cchan_exec_t *ex = NULL;
    TRY(cchan_exec_create(g_comm, NULL, &ex));
#endif
#undef TRY
    (void)names;
}

int main(int argc, char **argv) {
    const char *scenario = argc > 1 ? argv[1] : "abort";
    const int dead = !strcmp(scenario, "dead");
    CT_REQUIRE(dead || !strcmp(scenario, "abort"), "scenario '%s': want abort or dead", scenario);
    cchan_bootstrap_t *bs;
    cchan_comm_config_t ccfg = CCHAN_COMM_CONFIG_INIT;
    ccfg.platform = CCHAN_PLATFORM_HOST;
    ccfg.timeout_ms = 0; /* no deadline: only the abort can end a wait */
    CT_OK(cchan_bootstrap_create_from_env(&bs));
    CT_OK(cchan_comm_create(bs, &ccfg, &g_comm));
    g_rank = ct_rank = cchan_comm_rank(g_comm);
    g_nranks = cchan_comm_size(g_comm);
    CT_REQUIRE(g_nranks >= 2 && g_nranks <= 64, "%d ranks: want 2..64", g_nranks);
    const int ender = dead ? g_nranks - 1 : 0;

    cchan_mem_t *mine;
    CT_OK(cchan_mem_alloc(g_comm, 4096, 0, &mine));
    CT_OK(cchan_mem_exchange(g_comm, mine, g_peers));
    g_shared = (uint64_t *)cchan_mem_ptr(mine);
    CT_OK(cchan_coll_create(g_comm, NULL, &g_coll));
    cchan_fused_rmsnorm_t *fused;
    CT_OK(cchan_fused_rmsnorm_create(g_comm, 4, 64, &fused));
    for (int i = 0; i < COUNT * 8; i++) g_send[i] = (float)(i % 7);
    CT_OK(cchan_bootstrap_barrier(bs));

    pthread_t th;
    if (!dead && g_rank == ender) CT_ASSERT(pthread_create(&th, NULL, abort_later, NULL) == 0);
    const uint64_t start = now_ns();
    uint64_t last_ok = 0, calls = 0;
    int first = 0;
    for (uint64_t i = 0;; i++) {
        if (dead && g_rank == ender && now_ns() - start > 300000000ull) {
            publish_time(now_ns());
            _exit(0); /* no destroy: the peers see the connections end */
        }
        uint64_t ended = __atomic_load_n(&g_shared[0], __ATOMIC_ACQUIRE);
        uint64_t t0 = now_ns();
        int st = one_call(i);
        uint64_t t1 = now_ns();
        calls++;
        if (st == 0) {
            last_ok = t1;
            CT_EXPECT(!(g_rank == ender && ended != 0 && t0 > ended),
                      "call %llu started %.3f s after this rank's abort returned and succeeded",
                      (unsigned long long)i, (double)(t0 - ended) / 1e9);
        } else {
            first = st;
            break;
        }
        CT_REQUIRE(t1 - start < 30000000000ull, "no call failed within 30 s (%llu calls)",
                   (unsigned long long)calls);
    }
    char first_msg[1024];
    snprintf(first_msg, sizeof first_msg, "%s", cchan_last_error());
    uint64_t ended = 0;
    for (int k = 0; k < 5000 && !(ended = __atomic_load_n(&g_shared[0], __ATOMIC_ACQUIRE)); k++)
        usleep(1000);
    CT_REQUIRE(ended != 0, "the call failed (%d: %s) but rank %d never said it ended the job",
               first, first_msg, ender);
    const int want = dead ? CCHAN_ERR_PEER_DEAD : CCHAN_ERR_ABORTED;
    char cause[64];
    if (dead)
        snprintf(cause, sizeof cause, "peer %d died", ender);
    else
        snprintf(cause, sizeof cause, "rank %d aborted", ender);
    printf("[r%d] %llu calls; first failure %.3f s after the %s: %s\n", g_rank,
           (unsigned long long)calls, ((double)now_ns() - (double)ended) / 1e9,
           dead ? "death" : "abort", first_msg);
    CT_EXPECT(first == want, "first failure %d (%s), want %d: %s", first, cchan_strerror(first),
              want, first_msg);
    CT_EXPECT(strstr(first_msg, cause) != NULL, "the first failure does not say \"%s\": %s", cause,
              first_msg);
    CT_EXPECT(strstr(first_msg, "deadline") == NULL,
              "the first failure names a deadline, none was set: %s", first_msg);
    CT_EXPECT(last_ok <= ended + LIMIT_NS, "a call succeeded %.3f s after the %s",
              (double)(last_ok - ended) / 1e9, dead ? "death" : "abort");
    for (int round = 0; round < 3; round++) check_all_fail(want, fused, cause);

    /* Tell the ender that this rank is done, so that its exit cannot change the cause. */
    __atomic_store_n((uint64_t *)cchan_mem_ptr(g_peers[ender]) + 1 + g_rank, 1, __ATOMIC_RELEASE);
    if (!dead && g_rank == ender) {
        pthread_join(th, NULL);
        for (int r = 0; r < g_nranks; r++)
            for (int k = 0; k < 10000 && !__atomic_load_n(&g_shared[1 + r], __ATOMIC_ACQUIRE); k++)
                usleep(1000);
    }
    printf("[r%d] %d checks, %d failures\n", g_rank, ct_checks, ct_failures);
    fflush(stdout);
    /* Teardown after an abort is collective work that cannot complete; the process exit frees it.
     */
    _exit(ct_failures ? 1 : 0);
}
