/* Which peers share this rank's GPU (cchani_comm_same_gpu): the dma transport stages a port
 * channel's puts through host memory only for those, so a wrong answer either deadlocks a
 * cross-GPU channel behind the application's copies (staged when it need not be) or
 * one between ranks sharing a GPU behind the waiting kernel (not staged when it must be). The
 * answer comes from the GPU UUIDs all-gathered at create: device ordinals differ between processes
 * with different CUDA_VISIBLE_DEVICES, and hosts do not matter (a UUID names one GPU anywhere). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime.h"

#define RANKS 6

/* uuid(k): a recognisable UUID for GPU k; k < 0: none (the host platform) */
static void set_peer(cchani_peer_info_t *p, int device, int gpu, uint64_t host) {
    memset(p, 0, sizeof *p);
    p->device = device;
    p->host_hash = host;
    if (gpu >= 0)
        for (size_t i = 0; i < sizeof p->gpu_uuid; i++) p->gpu_uuid[i] = (uint8_t)(0xa0 + gpu + i);
}

typedef struct world {
    cchan_comm_t comm;
    cchani_peer_info_t peers[RANKS];
} world_t;

/* Rank 0 runs on GPU 7 of host 1 (its ordinal 0: CUDA_VISIBLE_DEVICES=7). */
static void world_init(world_t *w) {
    memset(w, 0, sizeof *w);
    w->comm.rank = 0;
    w->comm.nranks = RANKS;
    w->comm.device = 0;
    w->comm.platform = CCHAN_PLATFORM_CUDA;
    w->comm.peers = w->peers;
    set_peer(&w->peers[0], 0, 7, 1);
    set_peer(&w->peers[1], 0, 3, 1); /* another GPU, the same ordinal in its own process */
    set_peer(&w->peers[2], 7, 7, 1); /* this GPU, another ordinal (all GPUs visible there) */
    set_peer(&w->peers[3], 0, 7, 1); /* this GPU under MPS, same ordinal */
    set_peer(&w->peers[4], 0, 8, 2); /* another host, ordinal 0 too */
    set_peer(&w->peers[5], -1, -1, 1); /* a rank without a GPU (no UUID) */
}

static void test_decided_by_uuid(void **state) {
    (void)state;
    world_t w;
    world_init(&w);
    assert_int_equal(cchani_comm_same_gpu(&w.comm, 0), 1); /* itself */
    assert_int_equal(cchani_comm_same_gpu(&w.comm, 1), 0); /* same ordinal, other GPU */
    assert_int_equal(cchani_comm_same_gpu(&w.comm, 2), 1); /* other ordinal, this GPU */
    assert_int_equal(cchani_comm_same_gpu(&w.comm, 3), 1);
    assert_int_equal(cchani_comm_same_gpu(&w.comm, 4), 0);
    assert_int_equal(cchani_comm_same_gpu(&w.comm, 5), 0);
}

/* The answer is symmetric: each rank of a pair decides the same for the channel between them. */
static void test_symmetric(void **state) {
    (void)state;
    world_t w;
    world_init(&w);
    for (int a = 0; a < RANKS - 1; a++) /* rank 5 has no GPU: its comm has device -1 */
        for (int b = 0; b < RANKS - 1; b++) {
            w.comm.rank = a;
            w.comm.device = w.peers[a].device;
            int ab = cchani_comm_same_gpu(&w.comm, b);
            w.comm.rank = b;
            w.comm.device = w.peers[b].device;
            assert_int_equal(ab, cchani_comm_same_gpu(&w.comm, a));
        }
}

/* The host platform and ranks outside the communicator never count as this GPU. */
static void test_no_gpu(void **state) {
    (void)state;
    world_t w;
    world_init(&w);
    assert_int_equal(cchani_comm_same_gpu(&w.comm, -1), 0);
    assert_int_equal(cchani_comm_same_gpu(&w.comm, RANKS), 0);
    w.comm.device = -1;
    w.comm.platform = CCHAN_PLATFORM_HOST;
    for (int r = 0; r < RANKS; r++) set_peer(&w.peers[r], -1, -1, 1);
    for (int r = 0; r < RANKS; r++) assert_int_equal(cchani_comm_same_gpu(&w.comm, r), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decided_by_uuid),
        cmocka_unit_test(test_symmetric),
        cmocka_unit_test(test_no_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
