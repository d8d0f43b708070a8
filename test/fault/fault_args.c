/* Queries whose return value cannot carry a reason (getters, selectors, yes/no answers) leave one
 * in the last error when they are given a NULL handle or an op, dtype or algo that does not exist:
 * the function, the argument and, for an enum, the values it may take.
 *
 *   cchan-run -n 1 fault_args
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cchan/last_error.h"
#include "cchan_coll.h"
#include "cchan_fused.h"
#include "cchan_moe.h"
#include "cchan_test.h"
#ifdef FAULT_HAVE_EXEC
#include "cchan_exec.h"
#endif

/* call returns want and msg() holds every phrase afterwards. The selectors return an enum whose
 * failure is negative as an int (the enum itself may be unsigned). */
#define EXPECT_MSG(call, want, msg, ...)                                                           \
    do {                                                                                           \
        cchan_clear_last_error();                                                                  \
        long long got_ = (long long)(int)(call);                                                   \
        const char *phrases_[] = {__VA_ARGS__, NULL};                                              \
        int all_ = 1;                                                                              \
        for (int i_ = 0; phrases_[i_]; i_++)                                                       \
            if (!strstr(msg(), phrases_[i_])) all_ = 0;                                            \
        CT_EXPECT(got_ == (long long)(want) && all_, "%s = %lld (want %lld), message \"%s\"",      \
                  #call, got_, (long long)(want), msg());                                          \
    } while (0)
#define EXPECT_ERR(call, want, ...) EXPECT_MSG(call, want, cchan_last_error, __VA_ARGS__)

int main(void) {
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    cchan_comm_config_t ccfg = CCHAN_COMM_CONFIG_INIT;
    ccfg.platform = CCHAN_PLATFORM_HOST;
    ccfg.timeout_ms = 20000;
    CT_OK(cchan_bootstrap_create_from_env(&bs));
    CT_OK(cchan_comm_create(bs, &ccfg, &comm));
    ct_rank = cchan_comm_rank(comm);

    EXPECT_ERR(cchan_comm_rank(NULL), -EINVAL, "cchan_comm_rank: comm is NULL");
    EXPECT_ERR(cchan_comm_size(NULL), -EINVAL, "cchan_comm_size: comm is NULL");
    EXPECT_ERR(cchan_comm_device(NULL), -EINVAL, "cchan_comm_device: comm is NULL");
    EXPECT_ERR(cchan_comm_platform(NULL), CCHAN_PLATFORM_AUTO, "cchan_comm_platform: comm is NULL");
    EXPECT_ERR(cchan_comm_bootstrap(NULL) != NULL, 0, "cchan_comm_bootstrap: comm is NULL");
    EXPECT_ERR(cchan_comm_wait_ctl(NULL, 0, 0).diag != NULL, 0,
               "cchan_comm_wait_ctl: comm is NULL");
    EXPECT_ERR(cchan_comm_set_timeout_ms(NULL, 1), -EINVAL,
               "cchan_comm_set_timeout_ms: comm is NULL");
    EXPECT_ERR(cchan_mem_ptr(NULL) != NULL, 0, "cchan_mem_ptr: mem is NULL");
    EXPECT_ERR(cchan_mem_size(NULL), 0, "cchan_mem_size: mem is NULL");
    EXPECT_ERR(cchan_mem_rank(NULL), -EINVAL, "cchan_mem_rank: mem is NULL");
    /* the bootstrap's queries already named theirs */
    EXPECT_ERR(cchan_bootstrap_rank(NULL), -EINVAL, "cchan_bootstrap_rank");

    cchan_coll_t *coll;
    CT_OK(cchan_coll_create(comm, NULL, &coll));
    EXPECT_ERR(cchan_coll_select(NULL, CCHAN_COLL_ALLREDUCE, 1024), -EINVAL,
               "cchan_coll_select: coll is NULL");
    EXPECT_ERR(cchan_coll_select_buffers(NULL, CCHAN_COLL_ALLREDUCE, 1024, NULL, NULL), -EINVAL,
               "cchan_coll_select_buffers: coll is NULL");
    EXPECT_ERR(cchan_coll_supported(NULL, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_HB_ALLPAIRS, 1024), 0,
               "cchan_coll_supported: coll is NULL");
    const cchan_coll_op_t op77 = (cchan_coll_op_t)77;
    EXPECT_ERR(cchan_coll_select(coll, op77, 1024), -EINVAL, "cchan_coll_select: op 77",
               "CCHAN_COLL_ALLREDUCE", "CCHAN_COLL_REDUCESCATTER");
    EXPECT_ERR(cchan_coll_select(coll, (cchan_coll_op_t)-1, 1024), -EINVAL, "op -1");
    static float buf[256];
    EXPECT_ERR(cchan_coll_select_buffers(coll, op77, 1024, buf, buf), -EINVAL,
               "cchan_coll_select_buffers: op 77", "CCHAN_COLL_ALLGATHER");
    EXPECT_ERR(cchan_coll_supported(coll, op77, CCHAN_COLL_HB_ALLPAIRS, 1024), 0,
               "cchan_coll_supported: op 77", "CCHAN_COLL_REDUCESCATTER");
    EXPECT_ERR(cchan_coll_supported(coll, CCHAN_COLL_ALLREDUCE, (cchan_coll_algo_t)77, 1024), 0,
               "cchan_coll_supported: algo 77", "0 to 4");
    EXPECT_ERR(
        cchan_coll_allreduce(coll, buf, buf, 16, (cchan_coll_dtype_t)77, CCHAN_COLL_AUTO, NULL),
        -EINVAL, "cchan_coll_allreduce: dtype 77", "CCHAN_COLL_F32", "CCHAN_COLL_BF16");
    EXPECT_ERR(
        cchan_coll_allreduce(coll, buf, buf, 16, CCHAN_COLL_F32, (cchan_coll_algo_t)77, NULL),
        -EINVAL, "cchan_coll_allreduce: algo 77", "0 to 4");
    /* a valid query sets no message */
    cchan_clear_last_error();
    CT_EXPECT(cchan_coll_select(coll, CCHAN_COLL_ALLREDUCE, 1024) >= 0 &&
                  cchan_coll_supported(coll, CCHAN_COLL_ALLREDUCE, CCHAN_COLL_HB_ALLPAIRS, 1024) &&
                  cchan_last_error()[0] == 0,
              "a valid query failed or left a message: \"%s\"", cchan_last_error());
    CT_OK(cchan_coll_destroy(coll));

    EXPECT_ERR(cchan_fused_rmsnorm_select(NULL, 1), -EINVAL,
               "cchan_fused_rmsnorm_select: f is NULL");
    cchan_moe_info_t info;
    EXPECT_MSG(cchan_moe_group_info(NULL, &info), -EINVAL, cchan_moe_last_error,
               "cchan_moe_group_info: group is NULL");

#ifdef FAULT_HAVE_EXEC
    EXPECT_MSG(cchan_exec_plan(NULL) != NULL, 0, cchan_exec_last_error,
               "cchan_exec_plan: exec is NULL");
    EXPECT_MSG(cchan_exec_instances(NULL), -EINVAL, cchan_exec_last_error,
               "cchan_exec_instances: exec is NULL");
    EXPECT_MSG(cchan_exec_instances_for(NULL, 1024), -EINVAL, cchan_exec_last_error,
               "cchan_exec_instances_for: exec is NULL");
    EXPECT_MSG(cchan_exec_plan_fits(NULL, 1024), 0, cchan_exec_last_error,
               "cchan_exec_plan_fits: plan is NULL");
    cchan_exec_plan_info_t pinfo;
    EXPECT_MSG(cchan_exec_plan_info(NULL, &pinfo), -EINVAL, cchan_exec_last_error,
               "cchan_exec_plan_info: plan is NULL");
#endif

    CT_OK(cchan_comm_destroy(comm));
    printf("[r%d] %d checks, %d failures\n", ct_rank, ct_checks, ct_failures);
    return ct_failures ? 1 : 0;
}
