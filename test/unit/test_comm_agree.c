/* cchan_comm_create agrees across ranks: a rank that runs another cchan version or platform, or
 * that fails to set up, makes every rank fail with a message naming it. Two threads act as ranks
 * over an all-gather that can tamper with rank 1's peer information on its way. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runtime.h"

#define RANKS 2

/* TAMPER_SETUP does not tamper: rank 1 asks for a platform this library lacks, so its own setup
 * fails before the all-gather. */
typedef enum { TAMPER_NONE, TAMPER_VERSION, TAMPER_PLATFORM, TAMPER_SETUP } tamper_t;

typedef struct world {
    pthread_barrier_t barrier;
    uint8_t buf[RANKS * 1024];
    tamper_t tamper;
} world_t;

typedef struct rank {
    world_t *w;
    int id;
    int result;
    char message[1024];
} rank_t;

static int allgather(void *ctx, const void *send, void *recv, size_t bytes) {
    rank_t *r = ctx;
    world_t *w = r->w;
    memcpy(w->buf + (size_t)r->id * bytes, send, bytes);
    pthread_barrier_wait(&w->barrier);
    memcpy(recv, w->buf, RANKS * bytes);
    pthread_barrier_wait(&w->barrier);
    if (bytes == sizeof(cchani_peer_info_t)) {
        cchani_peer_info_t *peer1 = (cchani_peer_info_t *)recv + 1;
        if (w->tamper == TAMPER_VERSION) peer1->version += 1;
        if (w->tamper == TAMPER_PLATFORM) peer1->platform = CCHAN_PLATFORM_CUDA;
    }
    return 0;
}

static void *rank_main(void *arg) {
    rank_t *r = arg;
    cchan_bootstrap_t *bs = NULL;
    cchan_comm_t *comm = NULL;
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform =
        r->w->tamper == TAMPER_SETUP && r->id == 1 ? CCHAN_PLATFORM_HIP : CCHAN_PLATFORM_HOST;
    r->result = cchan_bootstrap_create_custom(r->id, RANKS, allgather, r, &bs);
    if (!r->result) r->result = cchan_comm_create(bs, &cfg, &comm);
    snprintf(r->message, sizeof r->message, "%s", cchan_last_error());
    if (comm)
        cchan_comm_destroy(comm);
    else if (bs)
        cchan_bootstrap_destroy(bs);
    return NULL;
}

static void run(tamper_t tamper, rank_t ranks[RANKS]) {
    world_t w;
    memset(&w, 0, sizeof w);
    w.tamper = tamper;
    pthread_barrier_init(&w.barrier, NULL, RANKS);
    pthread_t t[RANKS];
    for (int i = 0; i < RANKS; i++) {
        memset(&ranks[i], 0, sizeof ranks[i]);
        ranks[i].w = &w;
        ranks[i].id = i;
        assert_int_equal(pthread_create(&t[i], NULL, rank_main, &ranks[i]), 0);
    }
    for (int i = 0; i < RANKS; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&w.barrier);
}

static void test_agreement(void **state) {
    (void)state;
    rank_t r[RANKS];
    run(TAMPER_NONE, r);
    for (int i = 0; i < RANKS; i++) assert_int_equal(r[i].result, 0);
}

static void test_version_mismatch_fails_everywhere(void **state) {
    (void)state;
    rank_t r[RANKS];
    run(TAMPER_VERSION, r);
    for (int i = 0; i < RANKS; i++) {
        assert_int_equal(r[i].result, CCHAN_ERR_VERSION);
        assert_non_null(strstr(r[i].message, "rank 1 (pid "));
        assert_non_null(strstr(r[i].message, "runs cchan 0.1.1 but rank 0 runs 0.1.0"));
    }
}

static void test_platform_mismatch_fails_everywhere(void **state) {
    (void)state;
    rank_t r[RANKS];
    run(TAMPER_PLATFORM, r);
    for (int i = 0; i < RANKS; i++) {
        assert_int_equal(r[i].result, CCHAN_ERR_UNSUPPORTED);
        assert_non_null(strstr(r[i].message, "uses the cuda platform but rank 0 uses host"));
    }
}

static void test_failed_rank_fails_everywhere(void **state) {
    (void)state;
    rank_t r[RANKS];
    run(TAMPER_SETUP, r);
    assert_int_equal(r[0].result, CCHAN_ERR_PEER);
    /* rank 1's own reason travels to rank 0 */
    assert_non_null(strstr(r[0].message, "rank 1 failed to set up its communicator"));
    assert_non_null(strstr(r[0].message, "HIP platform"));
    assert_int_equal(r[1].result, CCHAN_ERR_UNSUPPORTED); /* its own reason */
    assert_non_null(strstr(r[1].message, "HIP platform"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agreement),
        cmocka_unit_test(test_version_mismatch_fails_everywhere),
        cmocka_unit_test(test_platform_mismatch_fails_everywhere),
        cmocka_unit_test(test_failed_rank_fails_everywhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
