/* Downstream program: links the installed kernel libraries (cchan::coll, cchan::moe, cchan::fused)
 * through their exported targets and calls into each, and the last-error header libraries use. */
#include <stdio.h>
#include <string.h>

#include <cchan/last_error.h>
#include <cchan_coll.h>
#include <cchan_fused.h>
#include <cchan_moe.h>

int main(void) {
    if (strcmp(cchan_coll_algo_name(CCHAN_COLL_HB_ALLPAIRS), "hb_allpairs") != 0) {
        printf("FAIL: cchan_coll_algo_name(HB_ALLPAIRS) = %s\n",
               cchan_coll_algo_name(CCHAN_COLL_HB_ALLPAIRS));
        return 1;
    }
    if (strcmp(cchan_fused_proto_name(CCHAN_FUSED_LL), "ll") != 0) {
        printf("FAIL: cchan_fused_proto_name(LL) = %s\n", cchan_fused_proto_name(CCHAN_FUSED_LL));
        return 1;
    }
    /* one message for the runtime and every library */
    cchan_set_last_error(-1, "downstream: %d", 42);
    if (strcmp(cchan_coll_last_error(), "downstream: 42") != 0 || !cchan_moe_last_error()) {
        printf("FAIL: cchan_coll_last_error() = '%s'\n", cchan_coll_last_error());
        return 1;
    }
    printf("ok: cchan_coll, cchan_moe and cchan_fused linked\n");
    return 0;
}
