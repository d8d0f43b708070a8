/* The communicator, memory, semaphore and channel runtime in one process: a one-rank communicator
 * over an application all-gather (cchan_bootstrap_create_custom). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cchan/cchan.h"

static int copy_allgather(void *ctx, const void *send, void *recv, size_t bytes) {
    (void)ctx;
    memcpy(recv, send, bytes);
    return 0;
}

static cchan_bootstrap_t *one_rank_bootstrap(void) {
    cchan_bootstrap_t *bs = NULL;
    assert_int_equal(cchan_bootstrap_create_custom(0, 1, copy_allgather, NULL, &bs), 0);
    return bs;
}

static cchan_comm_t *host_comm(uint64_t timeout_ms) {
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST;
    cfg.timeout_ms = timeout_ms;
    cchan_comm_t *comm = NULL;
    int r = cchan_comm_create(one_rank_bootstrap(), &cfg, &comm);
    if (r) fail_msg("cchan_comm_create: %d %s", r, cchan_last_error());
    return comm;
}

static int contains(const char *s, const char *part) { return strstr(s, part) != NULL; }

/* ---------------------------------------------------------------- communicator */

static void test_config_is_checked(void **state) {
    (void)state;
    cchan_bootstrap_t *bs = one_rank_bootstrap();
    cchan_comm_t *comm = NULL;
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.magic = 0;
    assert_int_equal(cchan_comm_create(bs, &cfg, &comm), -EINVAL);
    assert_true(contains(cchan_last_error(), "magic"));
    cfg = (cchan_comm_config_t)CCHAN_COMM_CONFIG_INIT;
    cfg.version = CCHAN_VERSION_CODE + 1;
    assert_int_equal(cchan_comm_create(bs, &cfg, &comm), CCHAN_ERR_VERSION);
    cfg = (cchan_comm_config_t)CCHAN_COMM_CONFIG_INIT;
    cfg.size = 8;
    assert_int_equal(cchan_comm_create(bs, &cfg, &comm), -EINVAL);
    cfg = (cchan_comm_config_t)CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HIP;
    assert_int_equal(cchan_comm_create(bs, &cfg, &comm), CCHAN_ERR_UNSUPPORTED);
    assert_null(comm);
    /* A failed create leaves the bootstrap with the caller. */
    cfg = (cchan_comm_config_t)CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST;
    assert_int_equal(cchan_comm_create(bs, &cfg, &comm), 0);
    assert_ptr_equal(cchan_comm_bootstrap(comm), bs);
    assert_int_equal(cchan_comm_destroy(comm), 0);
}

static void test_host_platform(void **state) {
    (void)state;
    cchan_comm_t *comm = host_comm(UINT64_MAX);
    assert_int_equal(cchan_comm_rank(comm), 0);
    assert_int_equal(cchan_comm_size(comm), 1);
    assert_int_equal(cchan_comm_platform(comm), CCHAN_PLATFORM_HOST);
    assert_int_equal(cchan_comm_device(comm), -1);
    assert_int_equal(cchan_comm_check_device(comm), 0);
    assert_int_equal(cchan_comm_destroy(comm), 0);
}

static void test_cuda_needs_a_gpu(void **state) {
    (void)state;
    cchan_comm_t *comm = NULL;
    assert_int_equal(cchan_comm_create(one_rank_bootstrap(), NULL, &comm), 0);
    int on_host = cchan_comm_platform(comm) == CCHAN_PLATFORM_HOST;
    assert_int_equal(cchan_comm_destroy(comm), 0);
    if (!on_host) skip(); /* AUTO found a GPU: CUDA works here */
    cchan_bootstrap_t *bs = one_rank_bootstrap();
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_CUDA;
    int r = cchan_comm_create(bs, &cfg, &comm);
    assert_true(r == CCHAN_ERR_NO_DEVICE || r == CCHAN_ERR_UNSUPPORTED);
    assert_true(contains(cchan_last_error(), "CCHAN_PLATFORM_CUDA"));
    assert_int_equal(cchan_bootstrap_destroy(bs), 0);
}

static void test_timeouts(void **state) {
    (void)state;
    setenv("CCHAN_TIMEOUT_MS", "1500", 1);
    cchan_comm_t *comm = host_comm(UINT64_MAX);
    cchan_wait_ctl_t ctl = cchan_comm_wait_ctl(comm, 2, 9);
    assert_int_equal(ctl.timeout_ns, 1500000000ull);
    assert_int_equal(ctl.peer, 2);
    assert_int_equal(ctl.id, 9);
    assert_int_equal(ctl.rank, 0);
    assert_non_null(ctl.diag);
    assert_int_equal(cchan_comm_set_timeout_ms(comm, 7), 0);
    assert_int_equal(cchan_comm_wait_ctl(comm, 0, 0).timeout_ns, 7000000ull);
    assert_int_equal(cchan_comm_set_timeout_ms(comm, UINT64_MAX / 2), 0);
    assert_int_equal(cchan_comm_wait_ctl(comm, 0, 0).timeout_ns, UINT64_MAX); /* saturates */
    assert_int_equal(cchan_comm_destroy(comm), 0);

    comm = host_comm(0); /* the config wins over the environment */
    assert_int_equal(cchan_comm_wait_ctl(comm, 0, 0).timeout_ns, 0);
    assert_int_equal(cchan_comm_destroy(comm), 0);

    setenv("CCHAN_TIMEOUT_MS", "soon", 1);
    cchan_bootstrap_t *bs = one_rank_bootstrap();
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST;
    assert_int_equal(cchan_comm_create(bs, &cfg, &comm), -EINVAL);
    assert_true(contains(cchan_last_error(), "CCHAN_TIMEOUT_MS"));
    assert_int_equal(cchan_bootstrap_destroy(bs), 0);
    unsetenv("CCHAN_TIMEOUT_MS");
}

static void test_device_timeout_is_reported(void **state) {
    (void)state;
    cchan_comm_t *comm = host_comm(50);
    uint64_t inbound = 4, expected = 4, outbound = 0, remote = 0;
    cchan_semaphore_t s = {&inbound, &expected, &remote, &outbound,
                           cchan_comm_wait_ctl(comm, 1, 3)};
    assert_int_equal(cchan_semaphore_wait(&s), CCHAN_ERR_DEVICE_TIMEOUT);
    assert_int_equal(cchan_comm_check_device(comm), CCHAN_ERR_DEVICE_TIMEOUT);
    const char *msg = cchan_last_error();
    assert_true(contains(msg, "rank 0 timed out after "));
    assert_true(contains(msg, " s waiting for semaphore 3 from peer 1: expected 5, observed 4"));
    /* The record stays: a GPU that trapped stays failed too. */
    assert_int_equal(cchan_comm_check_device(comm), CCHAN_ERR_DEVICE_TIMEOUT);
    assert_int_equal(cchan_comm_destroy(comm), 0);

    comm = host_comm(0);
    cchan_wait_ctl_t ctl = cchan_comm_wait_ctl(comm, 1, 4);
    assert_int_equal(cchan_device_fail(&ctl, CCHAN_FAIL_RANGE, 1024, 4096, 0, CCHAN_ERR_RANGE),
                     CCHAN_ERR_RANGE);
    assert_int_equal(cchan_comm_check_device(comm), CCHAN_ERR_RANGE);
    assert_true(
        contains(cchan_last_error(),
                 "channel 4 to peer 1 is out of range: end offset 4096 exceeds the limit 1024"));
    assert_int_equal(cchan_comm_destroy(comm), 0);
}

static void test_destroy_refuses_live_objects(void **state) {
    (void)state;
    cchan_comm_t *comm = host_comm(0);
    cchan_mem_t *mem = NULL;
    assert_int_equal(cchan_mem_alloc(comm, 100, 0, &mem), 0);
    assert_int_equal(cchan_comm_destroy(comm), -EBUSY);
    assert_true(contains(cchan_last_error(), "still alive"));
    assert_int_equal(cchan_mem_destroy(mem), 0);
    assert_int_equal(cchan_comm_destroy(comm), 0);
}

/* ---------------------------------------------------------------- memory */

static void test_alloc_is_zeroed_and_shared(void **state) {
    (void)state;
    cchan_comm_t *comm = host_comm(0);
    cchan_mem_t *mem = NULL;
    assert_int_equal(cchan_mem_alloc(comm, 10000, 0, &mem), 0);
    assert_int_equal(cchan_mem_size(mem), 10000);
    assert_int_equal(cchan_mem_rank(mem), 0);
    uint8_t *p = cchan_mem_ptr(mem);
    for (size_t i = 0; i < 10000; i++) assert_int_equal(p[i], 0);
    cchan_mem_t *peers[1] = {NULL};
    assert_int_equal(cchan_mem_exchange(comm, mem, peers), 0);
    assert_ptr_equal(peers[0], mem);
    assert_int_equal(cchan_mem_alloc(comm, 0, 0, &mem), -EINVAL);
    assert_int_equal(cchan_mem_alloc(comm, 8, 0x100, &mem), -EINVAL);
    assert_int_equal(cchan_mem_destroy(peers[0]), 0);
    assert_int_equal(cchan_comm_destroy(comm), 0);
}

static void test_plain_memory_is_local_only(void **state) {
    (void)state;
    cchan_comm_t *comm = host_comm(0);
    char *buf = malloc(64);
    cchan_mem_t *mem = NULL;
    assert_int_equal(cchan_mem_register(comm, buf, 64, 0, &mem), 0);
    assert_ptr_equal(cchan_mem_ptr(mem), buf);
    cchan_mem_desc_t desc;
    assert_int_equal(cchan_mem_export(mem, &desc), CCHAN_ERR_UNSUPPORTED);
    assert_true(contains(cchan_last_error(), "not allocated by cchan_mem_alloc"));
    cchan_mem_t *peers[1];
    assert_int_equal(cchan_mem_exchange(comm, mem, peers), CCHAN_ERR_UNSUPPORTED);
    assert_int_equal(cchan_mem_destroy(mem), 0);
    free(buf);
    assert_int_equal(cchan_comm_destroy(comm), 0);
}

/* An import of this process's own memory is a view that keeps it alive past its owner. */
static void test_same_process_import(void **state) {
    (void)state;
    cchan_comm_t *comm = host_comm(0);
    cchan_mem_t *alloc = NULL, *sub = NULL, *view = NULL, *view2 = NULL;
    assert_int_equal(cchan_mem_alloc(comm, 8192, 0, &alloc), 0);
    uint8_t *p = cchan_mem_ptr(alloc);
    assert_int_equal(cchan_mem_register(comm, p + 100, 1000, 0, &sub), 0);
    cchan_mem_desc_t desc;
    assert_int_equal(cchan_mem_export(sub, &desc), 0);
    assert_int_equal(cchan_mem_import(comm, &desc, &view), 0);
    assert_ptr_equal(cchan_mem_ptr(view), p + 100);
    assert_int_equal(cchan_mem_size(view), 1000);
    assert_int_equal(cchan_mem_export(view, &desc), -EINVAL); /* imports are not re-exported */

    assert_int_equal(cchan_mem_export(alloc, &desc), 0);
    assert_int_equal(cchan_mem_import(comm, &desc, &view2), 0);
    assert_int_equal(cchan_mem_destroy(alloc), 0);
    uint8_t *q = cchan_mem_ptr(view2);
    q[8191] = 7; /* still mapped: the view holds the allocation */
    assert_int_equal(q[8191], 7);
    assert_int_equal(cchan_mem_import(comm, &desc, &view), CCHAN_ERR_PROTOCOL); /* owner gone */
    assert_true(contains(cchan_last_error(), "matches no live registration"));
    assert_int_equal(cchan_mem_destroy(view2), 0);
    assert_int_equal(cchan_mem_destroy(view), 0);
    assert_int_equal(cchan_mem_destroy(sub), 0);
    assert_int_equal(cchan_comm_destroy(comm), 0);
}

/* ---------------------------------------------------------------- semaphores, channels, barriers
 */

static void test_semaphore_set(void **state) {
    (void)state;
    cchan_comm_t *comm = host_comm(0);
    cchan_sem_set_t *set = NULL;
    assert_int_equal(cchan_sem_set_create(comm, 3, 0, &set), 0);
    cchan_semaphore_t s;
    assert_int_equal(cchan_sem_set_get(set, 0, 2, &s), 0);
    /* Rank 0 with itself: signalling raises its own inbound counter for (0, 2). */
    assert_ptr_equal(s.remote_inbound, s.inbound);
    cchan_semaphore_signal(&s);
    assert_int_equal(*cchan_sem_set_inbound(set, 0, 2), 1);
    assert_ptr_equal(cchan_sem_set_remote_inbound(set, 0, 2), cchan_sem_set_inbound(set, 0, 2));
    assert_int_equal(cchan_semaphore_wait(&s), 0);
    assert_int_equal(cchan_semaphore_poll(&s), 0);
    assert_int_equal(cchan_sem_set_get(set, 1, 0, &s), -EINVAL);
    assert_int_equal(cchan_sem_set_get(set, 0, 3, &s), -EINVAL);
    assert_null(cchan_sem_set_inbound(set, 0, -1));
    assert_int_equal(cchan_sem_set_create(comm, 0, 0, &set), -EINVAL);
    assert_int_equal(cchan_sem_set_destroy(set), 0);

    assert_int_equal(cchan_sem_set_create(comm, 1, CCHAN_SEM_HOST_MAPPED, &set), 0);
    assert_non_null(cchan_sem_set_inbound(set, 0, 0));
    assert_int_equal(cchan_sem_set_destroy(set), 0);
    assert_int_equal(cchan_comm_destroy(comm), 0);
}

static void test_memory_channel_init(void **state) {
    (void)state;
    cchan_comm_t *comm = host_comm(0), *other = host_comm(0);
    cchan_mem_t *buf = NULL, *foreign = NULL;
    cchan_sem_set_t *sems = NULL;
    assert_int_equal(cchan_mem_alloc(comm, 4096, 0, &buf), 0);
    assert_int_equal(cchan_mem_alloc(other, 4096, 0, &foreign), 0);
    assert_int_equal(cchan_sem_set_create(comm, 2, 0, &sems), 0);
    cchan_memory_channel_t ch;
    assert_int_equal(cchan_memory_channel_init(comm, sems, 0, 1, buf, buf, NULL, &ch), 0);
    assert_ptr_equal(ch.remote, cchan_mem_ptr(buf));
    assert_int_equal(ch.remote_bytes, 4096);
    assert_null(ch.recv);
    assert_int_equal(ch.sem.ctl.peer, 0);
    assert_int_equal(cchan_memory_channel_init(comm, sems, 1, 0, buf, buf, buf, &ch), -EINVAL);
    assert_int_equal(cchan_memory_channel_init(comm, sems, 0, 2, buf, buf, buf, &ch), -EINVAL);
    assert_int_equal(cchan_memory_channel_init(comm, sems, 0, 0, foreign, buf, buf, &ch), -EINVAL);
    assert_true(contains(cchan_last_error(), "another communicator"));
    assert_int_equal(cchan_memory_channel_init(comm, sems, 0, 0, buf, foreign, buf, &ch), -EINVAL);
    assert_int_equal(cchan_memory_channel_init(other, sems, 0, 0, foreign, foreign, NULL, &ch),
                     -EINVAL);

    /* A put through the channel to itself, then a signal and a wait. */
    uint8_t *p = cchan_mem_ptr(buf);
    for (int i = 0; i < 100; i++) p[i] = (uint8_t)i;
    assert_int_equal(cchan_memory_channel_init(comm, sems, 0, 0, buf, buf, buf, &ch), 0);
    cchan_memory_channel_put(&ch, 1000, 0, 100, 0, 1);
    cchan_memory_channel_signal(&ch);
    assert_int_equal(cchan_memory_channel_wait(&ch), 0);
    assert_memory_equal(p + 1000, p, 100);

    assert_int_equal(cchan_sem_set_destroy(sems), 0);
    assert_int_equal(cchan_mem_destroy(buf), 0);
    assert_int_equal(cchan_mem_destroy(foreign), 0);
    assert_int_equal(cchan_comm_destroy(comm), 0);
    assert_int_equal(cchan_comm_destroy(other), 0);
}

static void test_grid_barrier_lifetime(void **state) {
    (void)state;
    cchan_comm_t *comm = host_comm(20);
    cchan_grid_barrier_t b;
    assert_int_equal(cchan_grid_barrier_create(comm, 0, &b), -EINVAL);
    assert_int_equal(cchan_grid_barrier_create(comm, 1, &b), 0);
    assert_int_equal(*b.count, 0);
    assert_int_equal(b.ctl.timeout_ns, 20000000ull);
    assert_int_equal(cchan_grid_barrier(&b, 0), 0); /* one participant: never waits */
    assert_int_equal(cchan_comm_destroy(comm), -EBUSY);
    assert_int_equal(cchan_grid_barrier_destroy(comm, &b), 0);
    assert_null(b.count);
    assert_int_equal(cchan_grid_barrier_destroy(comm, &b), 0);
    assert_int_equal(cchan_comm_destroy(comm), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_is_checked),
        cmocka_unit_test(test_host_platform),
        cmocka_unit_test(test_cuda_needs_a_gpu),
        cmocka_unit_test(test_timeouts),
        cmocka_unit_test(test_device_timeout_is_reported),
        cmocka_unit_test(test_destroy_refuses_live_objects),
        cmocka_unit_test(test_alloc_is_zeroed_and_shared),
        cmocka_unit_test(test_plain_memory_is_local_only),
        cmocka_unit_test(test_same_process_import),
        cmocka_unit_test(test_semaphore_set),
        cmocka_unit_test(test_memory_channel_init),
        cmocka_unit_test(test_grid_barrier_lifetime),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
