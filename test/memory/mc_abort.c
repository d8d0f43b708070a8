/* A communicator abort ends device-side waits that have no deadline (host backend: the wait returns).
 *
 *   mc_abort peer-dead  rank 0 dies (exits without cleaning up) while rank 1 waits for its signal
 *                       and then for its LL packets: each wait ends within 2 s with
 *                       CCHAN_ERR_PEER_DEAD, and check_device / get_async_error name "peer 0 died"
 *   mc_abort abort      rank 0 calls cchan_comm_abort() from another thread while both ranks wait
 *                       for each other: both waits end with CCHAN_ERR_ABORTED naming rank 0
 */
#include <pthread.h>
#include <unistd.h>

#include "mc_common.h"

#define BOUND_S 2.0

static mc_fixture_t fx;

static void expect_message(const char *part) {
    if (!strstr(cchan_last_error(), part)) {
        fprintf(stderr, "rank %d: message '%s' lacks '%s'\n", fx.me, cchan_last_error(), part);
        exit(1);
    }
}

/* The peer is gone: release what is local and leave. */
static void local_teardown(void) {
    MT_OK(cchan_sem_set_destroy(fx.sems));
    for (int p = 0; p < fx.n; p++)
        if (p != fx.me) MT_OK(cchan_mem_destroy(fx.peers[p]));
    MT_OK(cchan_mem_destroy(fx.win));
    MT_OK(cchan_comm_destroy(fx.comm));
}

static void peer_dead(void) {
    mt_barrier(fx.comm);
    if (fx.me == 0) {
        usleep(300 * 1000);
        _exit(0); /* no destroy: to the others this rank died */
    }
    double t0 = mt_now_s();
    int rc = cchan_memory_channel_wait(&fx.ch[0]);
    double took = mt_now_s() - t0;
    if (rc != CCHAN_ERR_PEER_DEAD) {
        fprintf(stderr, "rank 1: wait returned %d (%s)\n", rc, cchan_strerror(rc));
        exit(1);
    }
    MT_CHECK(took < 0.3 + BOUND_S);
    MT_CHECK(cchan_comm_check_device(fx.comm) == CCHAN_ERR_PEER_DEAD);
    expect_message("rank 1 stopped waiting for semaphore");
    expect_message("from peer 0");
    expect_message("peer 0 died");
    printf("rank 1: after %.2f s: %s\n", took, cchan_last_error());
    /* Later waits end at once, LL packet reads included. */
    t0 = mt_now_s();
    MT_CHECK(cchan_memory_channel_read_packets_ll8(&fx.ch[0], 0, mc_scratch(&fx), 64, 9, 0, 1) ==
             CCHAN_ERR_PEER_DEAD);
    MT_CHECK(mt_now_s() - t0 < BOUND_S);
    int status = 0;
    MT_OK(cchan_comm_get_async_error(fx.comm, &status));
    MT_CHECK(status == CCHAN_ERR_PEER_DEAD);
    expect_message("rank 0 died");
    printf("rank 1: %s\n", cchan_last_error());
    local_teardown();
}

static void *abort_later(void *arg) {
    usleep(300 * 1000);
    MT_OK(cchan_comm_abort(fx.comm));
    return arg;
}

static void abort_all(void) {
    mt_barrier(fx.comm);
    pthread_t t;
    if (fx.me == 0) MT_CHECK(pthread_create(&t, NULL, abort_later, NULL) == 0);
    double t0 = mt_now_s();
    int rc = cchan_memory_channel_wait(&fx.ch[1 - fx.me]);
    double took = mt_now_s() - t0;
    if (fx.me == 0) MT_CHECK(pthread_join(t, NULL) == 0);
    MT_CHECK(rc == CCHAN_ERR_ABORTED);
    MT_CHECK(took < 0.3 + BOUND_S);
    MT_CHECK(cchan_comm_check_device(fx.comm) == CCHAN_ERR_ABORTED);
    expect_message("rank 0 aborted the communicator");
    int status = 0;
    MT_OK(cchan_comm_get_async_error(fx.comm, &status));
    MT_CHECK(status == CCHAN_ERR_ABORTED);
    printf("rank %d: after %.2f s: %s\n", fx.me, took, cchan_last_error());
    /* Both ranks saw the abort: the bootstrap is failed for good, so leave without a barrier. */
    local_teardown();
}

int main(int argc, char **argv) {
    MT_CHECK(argc == 2);
    mc_setup(&fx, 4096, 0); /* no deadline */
    MT_CHECK(fx.n == 2);
    if (!strcmp(argv[1], "peer-dead"))
        peer_dead();
    else if (!strcmp(argv[1], "abort"))
        abort_all();
    else
        return 2;
    return 0;
}
