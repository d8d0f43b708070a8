/* Every public call that takes a pointer and a size refuses a range that wraps past the end of the
 * address space (CCHAN_ERR_RANGE, nothing registered or launched), instead of passing the mapping
 * check with its end below its start and faulting later in the proxy or a kernel.
 *
 *   cchan-run -n 2 fault_wrap [plan.n2.json]
 *
 * The plan (an AllReduce plan for 2 ranks) gives cchan_exec an object to call; without it, or in a
 * build without cchan_exec, those calls are left out.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan_coll.h"
#include "cchan_test.h"
#ifdef FAULT_HAVE_EXEC
#include "cchan_exec.h"
#endif

#define BYTES 8192

/* A page-aligned address one page below the top: [top, top + BYTES) wraps. */
static void *const top = (void *)(UINTPTR_MAX & ~(uintptr_t)4095);

/* msg: the library's last-error function (cchan_exec keeps its own message) */
#define EXPECT_RANGE_MSG(call, msg)                                                                \
    do {                                                                                           \
        int st_ = (call);                                                                          \
        CT_EXPECT(st_ == CCHAN_ERR_RANGE, "%s = %d (%s), want CCHAN_ERR_RANGE: %s", #call, st_,    \
                  cchan_strerror(st_), msg());                                                     \
        CT_EXPECT(st_ != CCHAN_ERR_RANGE || strstr(msg(), "address space") != NULL,                \
                  "%s: the message does not say why: %s", #call, msg());                           \
    } while (0)
#define EXPECT_RANGE(call) EXPECT_RANGE_MSG(call, cchan_last_error)

int main(int argc, char **argv) {
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    cchan_comm_config_t ccfg = CCHAN_COMM_CONFIG_INIT;
    ccfg.platform = CCHAN_PLATFORM_HOST;
    ccfg.timeout_ms = 20000;
    CT_OK(cchan_bootstrap_create_from_env(&bs));
    CT_OK(cchan_comm_create(bs, &ccfg, &comm));
    ct_rank = cchan_comm_rank(comm);
    const int n = cchan_comm_size(comm);
    static float ok[BYTES] __attribute__((aligned(64)));

    /* cchan_mem_register: the unpatched check saw [top, top + BYTES) as empty and accepted it */
    cchan_mem_t *m = NULL;
    EXPECT_RANGE(cchan_mem_register(comm, top, BYTES, 0, &m));
    CT_EXPECT(m == NULL, "a registration was returned");

    cchan_coll_t *coll;
    CT_OK(cchan_coll_create(comm, NULL, &coll));
    EXPECT_RANGE(cchan_coll_register(coll, top, BYTES));
    const size_t count = BYTES / sizeof(float) / (size_t)n;
    for (int algo = CCHAN_COLL_AUTO; algo < CCHAN_COLL_ALGO_COUNT; algo++) {
        cchan_coll_algo_t a = (cchan_coll_algo_t)algo;
        EXPECT_RANGE(cchan_coll_allreduce(coll, top, ok, count, CCHAN_COLL_F32, a, NULL));
        EXPECT_RANGE(cchan_coll_allreduce(coll, ok, top, count, CCHAN_COLL_F32, a, NULL));
        EXPECT_RANGE(cchan_coll_allgather(coll, top, ok, count, CCHAN_COLL_F32, a, NULL));
        EXPECT_RANGE(cchan_coll_allgather(coll, ok, top, count, CCHAN_COLL_F32, a, NULL));
        EXPECT_RANGE(cchan_coll_reducescatter(coll, top, ok, count, CCHAN_COLL_F32, a, NULL));
        EXPECT_RANGE(cchan_coll_reducescatter(coll, ok, top, count, CCHAN_COLL_F32, a, NULL));
    }
    EXPECT_RANGE(cchan_coll_alltoall(coll, top, ok, count, CCHAN_COLL_F32, NULL));
    EXPECT_RANGE(cchan_coll_broadcast(coll, ok, top, count, CCHAN_COLL_F32, 0, NULL));
    /* the communicator still works: nothing was half done */
    CT_OK(cchan_coll_allreduce(coll, ok, ok, count, CCHAN_COLL_F32, CCHAN_COLL_AUTO, NULL));

#ifdef FAULT_HAVE_EXEC
    if (argc > 1) {
        cchan_exec_plan_t *plan;
        cchan_exec_t *ex;
        CT_OK(cchan_exec_plan_load_file(argv[1], &plan));
        CT_OK(cchan_exec_create(comm, plan, &ex));
        const size_t c = BYTES / sizeof(float);
        EXPECT_RANGE_MSG(cchan_exec_register(ex, top, BYTES), cchan_exec_last_error);
        EXPECT_RANGE_MSG(cchan_exec_check(ex, top, ok, c, CCHAN_EXEC_F32), cchan_exec_last_error);
        EXPECT_RANGE_MSG(cchan_exec_run(ex, top, ok, c, CCHAN_EXEC_F32, CCHAN_EXEC_SUM, NULL),
                         cchan_exec_last_error);
        EXPECT_RANGE_MSG(cchan_exec_run(ex, ok, top, c, CCHAN_EXEC_F32, CCHAN_EXEC_SUM, NULL),
                         cchan_exec_last_error);
        CT_OK(cchan_exec_destroy(ex));
        cchan_exec_plan_free(plan);
    }
#else
    (void)argc, (void)argv;
#endif
    CT_OK(cchan_coll_destroy(coll));
    CT_OK(cchan_comm_destroy(comm));
    printf("[r%d] %d checks, %d failures\n", ct_rank, ct_checks, ct_failures);
    return ct_failures ? 1 : 0;
}
