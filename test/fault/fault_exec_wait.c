/* A host run of cchan_exec whose wait is ended names what ended it: rank 0 never runs the plan, so
 * the other ranks' runs wait for it until
 *   abort:    rank 0 calls cchan_comm_abort()      -> CCHAN_ERR_ABORTED, "rank 0 aborted"
 *   dead:     rank 0 exits                         -> CCHAN_ERR_PEER_DEAD, "peer 0 died"
 *   deadline: the communicator's 300 ms deadline   -> CCHAN_ERR_DEVICE_TIMEOUT, "timed out"
 * and the message names no deadline where none was set.
 *
 *   cchan-run -n N fault_exec_wait abort|dead|deadline plan.nN.json
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cchan_exec.h"
#include "cchan_test.h"

#define COUNT 4096

static float g_send[COUNT], g_recv[COUNT];

int main(int argc, char **argv) {
    CT_REQUIRE(argc == 3, "usage: fault_exec_wait abort|dead|deadline plan.json");
    const char *scenario = argv[1];
    const int abort_ = !strcmp(scenario, "abort"), dead = !strcmp(scenario, "dead"),
              deadline = !strcmp(scenario, "deadline");
    CT_REQUIRE(abort_ || dead || deadline, "scenario '%s': want abort, dead or deadline", scenario);
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    cchan_comm_config_t ccfg = CCHAN_COMM_CONFIG_INIT;
    ccfg.platform = CCHAN_PLATFORM_HOST;
    ccfg.timeout_ms = deadline ? 300 : 0; /* else only rank 0's end can end a wait */
    CT_OK(cchan_bootstrap_create_from_env(&bs));
    CT_OK(cchan_comm_create(bs, &ccfg, &comm));
    const int rank = ct_rank = cchan_comm_rank(comm);
    cchan_exec_plan_t *plan;
    cchan_exec_t *ex;
    CT_OK(cchan_exec_plan_load_file(argv[2], &plan));
    CT_OK(cchan_exec_create(comm, plan, &ex));
    for (int i = 0; i < COUNT; i++) g_send[i] = 1.0f;
    CT_OK(cchan_bootstrap_barrier(bs));

    if (rank == 0) {
        struct timespec ts = {0, 300 * 1000000L};
        nanosleep(&ts, NULL);
        if (dead) _exit(0); /* no destroy: the peers see the connections end */
        if (abort_) {
            CT_OK(cchan_comm_abort(comm));
            sleep(2); /* the peers learn it from this rank's watcher, which must stay up */
            _exit(0);
        }
    } else {
        int st = cchan_exec_run(ex, g_send, g_recv, COUNT, CCHAN_EXEC_F32, CCHAN_EXEC_SUM, NULL);
        const char *msg = cchan_exec_last_error();
        const int want = abort_ ? CCHAN_ERR_ABORTED
                         : dead ? CCHAN_ERR_PEER_DEAD
                                : CCHAN_ERR_DEVICE_TIMEOUT;
        const char *cause = abort_ ? "rank 0 aborted" : dead ? "peer 0 died" : "timed out";
        printf("[r%d] %s: %d: %s\n", rank, scenario, st, msg);
        CT_EXPECT(st == want, "status %d (%s), want %d (%s): %s", st, cchan_strerror(st), want,
                  cchan_strerror(want), msg);
        CT_EXPECT(strstr(msg, cause) != NULL, "the message does not say \"%s\": %s", cause, msg);
        cchan_exec_plan_info_t info;
        CT_OK(cchan_exec_plan_info(plan, &info));
        CT_EXPECT(strstr(msg, "block") != NULL && strstr(msg, info.name) != NULL,
                  "the message does not name the plan and the block: %s", msg);
        CT_EXPECT(deadline || strstr(msg, "deadline") == NULL,
                  "the message names a deadline, none was set: %s", msg);
    }
    /* a deadline ends no rank: rank 0 stays until the others have checked theirs */
    if (deadline) CT_OK(cchan_bootstrap_barrier(bs));
    printf("[r%d] %d checks, %d failures\n", rank, ct_checks, ct_failures);
    fflush(stdout);
    /* after an abort, teardown is collective work that cannot complete; the exit frees it */
    _exit(ct_failures ? 1 : 0);
}
