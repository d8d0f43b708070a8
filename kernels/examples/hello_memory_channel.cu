/* hello_memory_channel: the smallest complete cchan program. Two ranks, one GPU each: every rank
 * puts its buffer into the peer's over a memory channel, signals, waits for the peer's signal, and
 * checks what arrived.
 *
 *   cchan-run -n 2 build/kernels/examples/hello_memory_channel
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "cchan/cchan.h"
#include "example_check.h"

#define COUNT (1 << 20) /* floats each rank sends */

/* One block. Each rank's buffer is [what it sends | what it receives]. */
__global__ void exchange(const __grid_constant__ cchan_memory_channel_t ch, uint64_t bytes) {
    /* Every thread copies its share of our first half into the peer's second half. */
    cchan_memory_channel_put(&ch, bytes, 0, bytes, threadIdx.x, blockDim.x);
    __syncthreads();
    if (threadIdx.x == 0) {
        cchan_memory_channel_signal(&ch); /* release: the block's stores land before the signal */
        cchan_memory_channel_wait(&ch);   /* acquire: the peer's data is now in our second half */
    }
}

int main(void) {
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    CHECK(cchan_bootstrap_create_from_env(&bs)); /* cchan-run, torchrun, mpirun or srun */
    CHECK(cchan_comm_create(bs, NULL, &comm));   /* one GPU per rank, chosen by local rank */
    int rank = cchan_comm_rank(comm), peer = 1 - rank;
    if (cchan_comm_size(comm) != 2 || cchan_comm_platform(comm) != CCHAN_PLATFORM_CUDA) {
        if (rank == 0) printf("hello_memory_channel: needs 2 ranks with a GPU each (skipped)\n");
        cchan_comm_destroy(comm);
        return 77;
    }
    CUDA_CHECK(cudaSetDevice(cchan_comm_device(comm)));
    const uint64_t bytes = COUNT * sizeof(float);

    cchan_mem_t *buf, *peers[2];
    cchan_sem_set_t *sems;
    cchan_memory_channel_t ch;
    CHECK(cchan_mem_alloc(comm, 2 * bytes, 0, &buf)); /* GPU memory every peer can map */
    CHECK(cchan_mem_exchange(comm, buf, peers)); /* peers[peer]: the peer's buffer, mapped here */
    CHECK(cchan_sem_set_create(comm, 1, 0, &sems));
    CHECK(cchan_memory_channel_init(comm, sems, peer, 0, peers[peer], buf, NULL, &ch));

    float *host = (float *)malloc(2 * bytes);
    for (int i = 0; i < COUNT; i++) host[i] = (float)(rank * COUNT + i);
    CUDA_CHECK(cudaMemcpy(cchan_mem_ptr(buf), host, bytes, cudaMemcpyHostToDevice));

    exchange<<<1, 512>>>(ch, bytes);
    CUDA_CHECK(cudaDeviceSynchronize());

    CUDA_CHECK(cudaMemcpy(host + COUNT, (char *)cchan_mem_ptr(buf) + bytes, bytes,
                          cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < COUNT; i++) wrong += host[COUNT + i] != (float)(peer * COUNT + i);
    printf("rank %d: %llu bytes from rank %d: %s\n", rank, (unsigned long long)bytes, peer,
           wrong ? "WRONG" : "ok");

    CHECK(cchan_sem_set_destroy(sems));
    CHECK(cchan_mem_destroy(peers[peer]));
    CHECK(cchan_bootstrap_barrier(cchan_comm_bootstrap(comm))); /* the peer has unmapped ours */
    CHECK(cchan_mem_destroy(buf));
    CHECK(cchan_comm_destroy(comm));
    free(host);
    return wrong ? 1 : 0;
}
