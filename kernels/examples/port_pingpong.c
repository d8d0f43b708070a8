/* port_pingpong: a port channel's put, signal, wait and flush, as a ping-pong between two ranks.
 * A port channel hands each request to a proxy thread (a DMA engine's driver: on a GPU the copy
 * engine or the NIC moves the bytes, not the SMs); the calling thread only pushes requests.
 *
 * This runs on the host backend (CPU threads over shared memory), so it works on any machine; the
 * same calls, unchanged, go in a CUDA kernel (one thread), as kernels/examples/ll_allreduce.cu and
 * hello_memory_channel.cu show for memory channels.
 *
 *   cchan-run -n 2 build/kernels/examples/port_pingpong
 *
 * Each rank's buffer: [what it sends: BYTES | what it receives: BYTES]. Rank 0 puts its message
 * into rank 1's receive half and raises rank 1's semaphore in one request (put_signal); rank 1
 * waits, checks, and answers the same way. A flush at the end waits until the proxy has finished
 * every copy this rank asked for, so the send half may be reused or freed.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cchan/cchan.h"
#include "example_check.h"

#define BYTES 4096
#define ROUNDS 1000

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* Round r's message: every byte says who sent it and when. */
static unsigned char byte_of(int sender, int round, int i) {
    return (unsigned char)(sender * 101 + round * 7 + i);
}

/* The rounds; returns the number of wrong bytes received. */
static int play(const cchan_port_channel_t *ch, unsigned char *send, const unsigned char *recv,
                int rank, int peer) {
    int wrong = 0;
    for (int r = 0; r < ROUNDS; r++) {
        if (rank == 1) { /* rank 1 answers: wait for the ball first */
            if (cchan_port_channel_wait(ch) < 0) return -1;
            for (int i = 0; i < BYTES; i++) wrong += recv[i] != byte_of(peer, r, i);
        }
        /* the previous put from `send` has been read by the peer (it answered): rewrite it */
        for (int i = 0; i < BYTES; i++) send[i] = byte_of(rank, r, i);
        if (cchan_port_channel_put_signal(ch, BYTES, 0, BYTES) < 0) return -1;
        if (rank == 0) {
            if (cchan_port_channel_wait(ch) < 0) return -1;
            for (int i = 0; i < BYTES; i++) wrong += recv[i] != byte_of(peer, r, i);
        }
    }
    return cchan_port_channel_flush(ch) < 0 ? -1 : wrong;
}

int main(void) {
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    cchan_comm_config_t cfg = CCHAN_COMM_CONFIG_INIT;
    cfg.platform = CCHAN_PLATFORM_HOST;
    CHECK(cchan_bootstrap_create_from_env(&bs));
    CHECK(cchan_comm_create(bs, &cfg, &comm));
    const int rank = cchan_comm_rank(comm), peer = 1 - rank;
    if (cchan_comm_size(comm) != 2) {
        if (rank == 0) printf("port_pingpong: needs 2 ranks (skipped)\n");
        cchan_comm_destroy(comm);
        return 77;
    }

    cchan_mem_t *buf, *peers[2];
    cchan_sem_set_t *sems;
    cchan_proxy_t *proxy;
    cchan_port_channel_t ch;
    CHECK(cchan_mem_alloc(comm, 2 * BYTES, 0, &buf));
    CHECK(cchan_mem_exchange(comm, buf, peers));
    /* The proxy raises the peer's semaphore from the CPU: the counters live in host memory. */
    CHECK(cchan_sem_set_create(comm, 1, CCHAN_SEM_HOST_MAPPED, &sems));
    CHECK(cchan_proxy_create(comm, NULL, &proxy));
    /* puts copy from our buffer (offsets into it) into the peer's (offsets into that) */
    CHECK(cchan_port_channel_create(proxy, CCHAN_TRANSPORT_AUTO, sems, peer, 0, peers[peer], buf,
                                    &ch));
    CHECK(cchan_proxy_start(proxy));

    unsigned char *send = (unsigned char *)cchan_mem_ptr(buf), *recv = send + BYTES;
    CHECK(cchan_bootstrap_barrier(cchan_comm_bootstrap(comm))); /* both channels exist */
    double t0 = now_us();
    int wrong = play(&ch, send, recv, rank, peer);
    double us = now_us() - t0;
    if (wrong < 0) {
        fprintf(stderr, "rank %d: a port channel request failed: %s\n", rank, cchan_last_error());
        return 1;
    }
    printf("rank %d: %d round trips of %d bytes, %.1f us one way on average: %s\n", rank, ROUNDS,
           BYTES, us / ROUNDS / 2, wrong ? "WRONG" : "ok");

    CHECK(cchan_bootstrap_barrier(cchan_comm_bootstrap(comm))); /* no request of the peer left */
    CHECK(cchan_proxy_stop(proxy, 10000));
    CHECK(cchan_proxy_destroy(proxy));
    CHECK(cchan_sem_set_destroy(sems));
    CHECK(cchan_mem_destroy(peers[peer]));
    CHECK(cchan_bootstrap_barrier(cchan_comm_bootstrap(comm))); /* the peer has unmapped ours */
    CHECK(cchan_mem_destroy(buf));
    CHECK(cchan_comm_destroy(comm));
    return wrong ? 1 : 0;
}
