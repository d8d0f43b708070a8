/* Multi-process bootstrap test (run through cchan-run): allgather of several sizes, barrier
 * ordering, tagged send/recv in a ring and between all pairs with tags out of order, size
 * mismatches, a second bootstrap from a unique id, and the application-callback bootstrap. */
#include <stdint.h>
#include <unistd.h>

#include "boot_test.h"

static uint8_t pattern(int rank, size_t i, int salt) {
    return (uint8_t)(rank * 131 + i * 7 + (size_t)salt);
}

static void check_identity(cchan_bootstrap_t *bs) {
    int n = boot_env_int("CCHAN_WORLD_SIZE");
    BOOT_CHECK(cchan_bootstrap_rank(bs) == boot_env_int("CCHAN_RANK"));
    BOOT_CHECK(cchan_bootstrap_size(bs) == n);
    BOOT_CHECK(cchan_bootstrap_local_rank(bs) == cchan_bootstrap_rank(bs));
    BOOT_CHECK(cchan_bootstrap_local_size(bs) == n);
}

static void check_allgather(cchan_bootstrap_t *bs, size_t bytes, int salt) {
    int me = cchan_bootstrap_rank(bs), n = cchan_bootstrap_size(bs);
    uint8_t *send = malloc(bytes + 1), *recv = malloc(bytes * (size_t)n + 1);
    BOOT_CHECK(send && recv);
    for (size_t i = 0; i < bytes; i++) send[i] = pattern(me, i, salt);
    memset(recv, 0xee, bytes * (size_t)n + 1);
    BOOT_OK(cchan_bootstrap_allgather(bs, send, recv, bytes));
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < bytes; i++)
            BOOT_CHECK(recv[(size_t)r * bytes + i] == pattern(r, i, salt));
    BOOT_CHECK(recv[bytes * (size_t)n] == 0xee); /* nothing written past the end */
    free(send);
    free(recv);
}

/* Rank 0 arrives late: every other rank must wait for it. */
static void check_barrier(cchan_bootstrap_t *bs) {
    for (int i = 0; i < 200; i++) BOOT_OK(cchan_bootstrap_barrier(bs));
    double t0 = boot_now_s();
    if (cchan_bootstrap_rank(bs) == 0) usleep(300 * 1000);
    BOOT_OK(cchan_bootstrap_barrier(bs));
    BOOT_CHECK(boot_now_s() - t0 >= 0.25);
}

/* Send-then-receive around a ring with 1 MiB: more than socket buffers hold, so this deadlocks
 * unless sends make progress on incoming traffic. */
static void check_ring(cchan_bootstrap_t *bs, size_t bytes) {
    int me = cchan_bootstrap_rank(bs), n = cchan_bootstrap_size(bs);
    int right = (me + 1) % n, left = (me + n - 1) % n;
    uint8_t *out = malloc(bytes), *in = malloc(bytes);
    BOOT_CHECK(out && in);
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < bytes; i++) out[i] = pattern(me, i, round);
        BOOT_OK(cchan_bootstrap_send(bs, right, 1000 + round, out, bytes));
        BOOT_OK(cchan_bootstrap_recv(bs, left, 1000 + round, in, bytes));
        for (size_t i = 0; i < bytes; i++) BOOT_CHECK(in[i] == pattern(left, i, round));
    }
    free(out);
    free(in);
}

/* Every rank sends tags 0..3 to every peer (itself included) in order, and receives them from
 * peers in reverse order and tags in reverse order: messages for other tags must be queued. */
static void check_all_pairs(cchan_bootstrap_t *bs) {
    enum { TAGS = 4 };
    int me = cchan_bootstrap_rank(bs), n = cchan_bootstrap_size(bs);
    for (int peer = 0; peer < n; peer++)
        for (int tag = 0; tag < TAGS; tag++) {
            int32_t msg[3] = {me, peer, tag * 1000 + me};
            BOOT_OK(cchan_bootstrap_send(bs, peer, tag, msg, sizeof msg));
        }
    for (int peer = n - 1; peer >= 0; peer--)
        for (int tag = TAGS - 1; tag >= 0; tag--) {
            int32_t msg[3];
            BOOT_OK(cchan_bootstrap_recv(bs, peer, tag, msg, sizeof msg));
            BOOT_CHECK(msg[0] == peer && msg[1] == me && msg[2] == tag * 1000 + peer);
        }
    /* Zero-byte messages carry only their tag. */
    BOOT_OK(cchan_bootstrap_send(bs, (me + 1) % n, -7, NULL, 0));
    BOOT_OK(cchan_bootstrap_recv(bs, (me + n - 1) % n, -7, NULL, 0));
}

/* A receive that names the wrong size fails with CCHAN_ERR_PROTOCOL and leaves the bootstrap
 * usable. */
static void check_size_mismatch(cchan_bootstrap_t *bs) {
    int me = cchan_bootstrap_rank(bs), n = cchan_bootstrap_size(bs);
    uint64_t v = 42;
    BOOT_OK(cchan_bootstrap_send(bs, (me + 1) % n, 77, &v, sizeof v));
    uint32_t small;
    int rc = cchan_bootstrap_recv(bs, (me + n - 1) % n, 77, &small, sizeof small);
    BOOT_CHECK(rc == CCHAN_ERR_PROTOCOL);
    BOOT_CHECK(strstr(cchan_last_error(), "sent 8 bytes with tag 77"));
    BOOT_CHECK(cchan_bootstrap_recv(bs, n, 0, &small, 4) == -EINVAL);
    BOOT_OK(cchan_bootstrap_barrier(bs));
}

/* A second bootstrap from a unique id that rank 0 made and the first bootstrap distributed. */
static void check_unique_id(cchan_bootstrap_t *bs) {
    int me = cchan_bootstrap_rank(bs), n = cchan_bootstrap_size(bs);
    cchan_unique_id_t mine, *all = malloc(sizeof mine * (size_t)n);
    BOOT_CHECK(all);
    memset(&mine, 0, sizeof mine);
    if (me == 0) BOOT_OK(cchan_get_unique_id(&mine));
    BOOT_OK(cchan_bootstrap_allgather(bs, &mine, all, sizeof mine));
    cchan_bootstrap_t *second;
    BOOT_OK(cchan_bootstrap_create(&all[0], me, n, &second));
    BOOT_CHECK(cchan_bootstrap_rank(second) == me && cchan_bootstrap_size(second) == n);
    BOOT_CHECK(cchan_bootstrap_local_size(second) == n); /* derived by hostname: one host */
    BOOT_CHECK(cchan_bootstrap_local_rank(second) == me);
    check_allgather(second, 24, 5);
    BOOT_OK(cchan_bootstrap_barrier(second));
    BOOT_OK(cchan_bootstrap_destroy(second));
    free(all);
}

static int calls;

static int app_allgather(void *ctx, const void *send, void *recv, size_t bytes) {
    calls++;
    return cchan_bootstrap_allgather(ctx, send, recv, bytes) ? -1 : 0;
}

static int failing_allgather(void *ctx, const void *send, void *recv, size_t bytes) { return 5; }

static void check_custom(cchan_bootstrap_t *bs) {
    int me = cchan_bootstrap_rank(bs), n = cchan_bootstrap_size(bs);
    cchan_bootstrap_t *custom;
    BOOT_OK(cchan_bootstrap_create_custom(me, n, app_allgather, bs, &custom));
    BOOT_CHECK(cchan_bootstrap_local_rank(custom) == me && cchan_bootstrap_local_size(custom) == n);
    int before = calls;
    check_allgather(custom, 100, 9);
    BOOT_OK(cchan_bootstrap_barrier(custom));
    BOOT_CHECK(calls == before + 2);
    int v = 0;
    BOOT_CHECK(cchan_bootstrap_send(custom, 0, 1, &v, sizeof v) == CCHAN_ERR_UNSUPPORTED);
    BOOT_CHECK(cchan_bootstrap_recv(custom, 0, 1, &v, sizeof v) == CCHAN_ERR_UNSUPPORTED);
    BOOT_OK(cchan_bootstrap_destroy(custom));
    cchan_bootstrap_t *bad;
    BOOT_CHECK(cchan_bootstrap_create_custom(me, n, failing_allgather, NULL, &bad) ==
               CCHAN_ERR_SYSTEM);
    BOOT_CHECK(strstr(cchan_last_error(), "returned 5"));
}

int main(void) {
    cchan_bootstrap_t *bs;
    BOOT_OK(cchan_bootstrap_create_from_env(&bs));
    boot_test_rank = cchan_bootstrap_rank(bs);
    check_identity(bs);
    size_t sizes[] = {0, 1, 7, 4096, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        check_allgather(bs, sizes[i], (int)i);
    check_barrier(bs);
    check_ring(bs, 64);
    check_ring(bs, 1 << 20);
    check_all_pairs(bs);
    check_size_mismatch(bs);
    check_unique_id(bs);
    check_custom(bs);
    BOOT_OK(cchan_bootstrap_barrier(bs));
    BOOT_OK(cchan_bootstrap_destroy(bs));
    return 0;
}
