/* Input that cannot work is refused at the call, with the numbers, not accepted to fail later:
 *
 *   alloc      cchan_mem_alloc of 1 TiB (more than this machine has): -ENOMEM naming the bytes
 *              available; before, it "succeeded" and touching it ended in SIGBUS or the OOM killer
 *   register   cchan_mem_register of 16 malloc'ed bytes declared as 1 GiB, of a PROT_NONE page and
 *              of a range with an unmapped page: CCHAN_ERR_RANGE naming how much is mapped; a
 *              port put from such a registration made the proxy read out of bounds
 *   shapes     a MoE group with hidden = 2^30 and a coll scratch of 1 TiB: refused at create
 *              with the bytes; a MoE config of size 2^40 and a coll config of another version
 *              are refused
 * Two ranks through cchan-run (the create calls are collective); both pass the same arguments.
 */
#include <stdint.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "cchan_coll.h"
#include "cchan_moe.h"
#include "mem_test.h"

#define TiB (1ull << 40)

/* RAM plus swap: what no allocation of this machine can exceed. */
static uint64_t machine_bytes(void) {
    struct sysinfo si;
    MT_CHECK(sysinfo(&si) == 0);
    return ((uint64_t)si.totalram + (uint64_t)si.totalswap) * si.mem_unit;
}

/* 1 TiB, or twice the machine where that is more than 1 TiB. */
static uint64_t too_much(void) {
    uint64_t m = machine_bytes();
    return m < TiB ? TiB : 2 * m;
}

static void expect_msg(const char *what, int rc, int want, const char *msg, const char *part) {
    printf("rank %d: %s: %d (%s): %s\n", mt_rank, what, rc, cchan_strerror(rc), msg);
    if (rc != want || !strstr(msg, part)) {
        fprintf(stderr, "rank %d: %s: want %d (%s) with '%s'\n", mt_rank, what, want,
                cchan_strerror(want), part);
        exit(1);
    }
}

static void check_alloc(cchan_comm_t *comm) {
    cchan_mem_t *m = NULL;
    char want[96];
    snprintf(want, sizeof want, "%llu bytes of shared host memory: cchan_mem_alloc: does not fit",
             (unsigned long long)too_much());
    int rc = cchan_mem_alloc(comm, (size_t)too_much(), 0, &m);
    expect_msg("alloc 1 TiB", rc, -ENOMEM, cchan_last_error(), want);
    MT_CHECK(m == NULL);
    MT_CHECK(strstr(cchan_last_error(), "bytes are available") != NULL);
    MT_OK(cchan_mem_alloc(comm, 1 << 20, 0, &m));
    MT_OK(cchan_mem_destroy(m));
}

static void check_register(cchan_comm_t *comm) {
    cchan_mem_t *m = NULL;
    uint8_t *small = malloc(16);
    MT_CHECK(small != NULL);
    int rc = cchan_mem_register(comm, small, 1u << 30, 0, &m);
    expect_msg("register 16 B as 1 GiB", rc, CCHAN_ERR_RANGE, cchan_last_error(),
               "not all mapped readable in this process");
    MT_OK(cchan_mem_register(comm, small, 16, 0, &m));
    MT_OK(cchan_mem_destroy(m));
    free(small);

    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *none = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    MT_CHECK(none != MAP_FAILED);
    rc = cchan_mem_register(comm, none, page, 0, &m);
    expect_msg("register PROT_NONE", rc, CCHAN_ERR_RANGE, cchan_last_error(),
               "mapped without read permission");
    MT_CHECK(munmap(none, page) == 0);

    uint8_t *two = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    MT_CHECK(two != MAP_FAILED);
    MT_CHECK(munmap(two + page, page) == 0);
    rc = cchan_mem_register(comm, two, 2 * page, 0, &m);
    expect_msg("register past a mapping", rc, CCHAN_ERR_RANGE, cchan_last_error(), "not mapped");
    MT_OK(cchan_mem_register(comm, two, page, 0, &m));
    MT_OK(cchan_mem_destroy(m));
    MT_CHECK(munmap(two, page) == 0);
}

static void check_shapes(cchan_comm_t *comm) {
    cchan_moe_config_t mc = CCHAN_MOE_CONFIG_INIT;
    mc.num_experts = 2 * cchan_comm_size(comm);
    mc.hidden = 1 << 30;
    mc.top_k = 1;
    /* The buffer holds about 6 * hidden * 2 B per token for two ranks: enough tokens to exceed the
     * machine, few enough that the address space can still map it. */
    uint64_t per_token = 6ull * 2 * (1ull << 30);
    uint64_t tokens = machine_bytes() / per_token + 2;
    mc.max_tokens_per_rank = tokens > 4096 ? 4096 : (int)tokens;
    cchan_moe_group_t *g = NULL;
    int rc = cchan_moe_group_create(comm, &mc, &g);
    expect_msg("moe hidden 2^30", rc, -ENOMEM, cchan_moe_last_error(), "does not fit");

    mc.size = (size_t)1 << 40;
    rc = cchan_moe_group_create(comm, &mc, &g);
    expect_msg("moe config size 2^40", rc, -EINVAL, cchan_moe_last_error(), "size 1099511627776");

    cchan_coll_config_t cc = CCHAN_COLL_CONFIG_INIT;
    cc.scratch_bytes = (size_t)too_much();
    cchan_coll_t *c = NULL;
    rc = cchan_coll_create(comm, &cc, &c);
    expect_msg("coll scratch 1 TiB", rc, -ENOMEM, cchan_coll_last_error(), "does not fit");

    cc = (cchan_coll_config_t)CCHAN_COLL_CONFIG_INIT;
    cc.version = 99999;
    rc = cchan_coll_create(comm, &cc, &c);
    expect_msg("coll version 99999", rc, CCHAN_ERR_VERSION, cchan_coll_last_error(),
               "config version 99999");
}

int main(int argc, char **argv) {
    MT_CHECK(argc == 2);
    cchan_comm_t *comm = mt_comm();
    if (!strcmp(argv[1], "alloc"))
        check_alloc(comm);
    else if (!strcmp(argv[1], "register"))
        check_register(comm);
    else if (!strcmp(argv[1], "shapes"))
        check_shapes(comm);
    else
        return 2;
    mt_barrier(comm);
    MT_OK(cchan_comm_destroy(comm));
    return 0;
}
