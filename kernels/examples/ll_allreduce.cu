/* ll_allreduce: a one-shot AllReduce of small messages with LL packets on memory channels, the
 * algorithm cchan_coll runs for small messages (kernels/coll), cut down to one kernel of one
 * block. Every rank writes its whole input as LL8 packets into a slot of every peer's buffer, then
 * reads each peer's packets and sums: one kernel, no barrier, no separate signal, because every
 * packet carries its own flag.
 *
 *   cchan-run -n 2 build/kernels/examples/ll_allreduce      (any number of ranks, one GPU each)
 *
 * Each rank's buffer (cchan_mem_alloc, mapped into every peer):
 *   [input: COUNT floats | output | staging: a copy per rank | LL slots: 2 x one per rank]
 * Slot (e & 1, r) of rank p's buffer holds rank r's packets of call e for p. A flag never repeats
 * (it is the call's epoch e), so slots are reused without clearing; and two slots per peer make
 * reuse safe: a rank writes call e + 2 into slot e & 1 only after it has read the peer's call
 * e + 1 packets, which the peer writes only after it has read our call e packets from that slot.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "cchan/cchan.h"
#include "example_check.h"

#define COUNT 4096 /* floats per rank: 16 KiB, where LL beats a two-phase algorithm */
#define MAX_RANKS 8
#define CALLS 3 /* the same slots, three epochs */

struct layout {
    uint64_t bytes, out, staging, slots, slot_bytes;
};

static struct layout layout_of(int nranks) {
    struct layout l;
    l.bytes = COUNT * sizeof(float);
    l.out = l.bytes;
    l.staging = 2 * l.bytes;
    l.slots = l.staging + (uint64_t)nranks * l.bytes;
    l.slot_bytes = (cchan_ll8_buffer_bytes(l.bytes) + 15) / 16 * 16;
    return l;
}

/* Where rank `src` writes call `flag`'s packets in a peer's buffer. */
__device__ static uint64_t slot(const struct layout &l, int nranks, int src, uint32_t flag) {
    return l.slots + ((uint64_t)(flag & 1u) * (uint64_t)nranks + (uint64_t)src) * l.slot_bytes;
}

struct peers {
    cchan_memory_channel_t ch[MAX_RANKS]; /* ch[p]: remote = rank p's buffer; local, recv = ours */
};

/* One block. local: this rank's buffer; flag: this call's epoch (1, 2, ...). */
__global__ void allreduce(const __grid_constant__ struct peers P, struct layout l, uint8_t *local,
                          int rank, int nranks, uint32_t flag) {
    const uint32_t tid = threadIdx.x, nt = blockDim.x;
    /* 1. Our input, as packets, into our slot of every peer's buffer. No fence: a reader trusts a
     *    packet only when its flag is this call's. */
    for (int p = 0; p < nranks; p++)
        if (p != rank)
            cchan_memory_channel_put_packets_ll8(&P.ch[p], slot(l, nranks, rank, flag), 0, l.bytes,
                                                 flag, tid, nt);
    /* 2. Each peer's packets from its slot of our buffer into its staging copy. A thread reads
     *    the packets the same partition gives it, spinning until their flags say this call. */
    for (int p = 0; p < nranks; p++)
        if (p != rank)
            (void)cchan_memory_channel_read_packets_ll8(&P.ch[p], slot(l, nranks, p, flag),
                                                        l.staging + (uint64_t)p * l.bytes, l.bytes,
                                                        flag, tid, nt);
    __syncthreads(); /* every staging copy complete */
    /* 3. Sum: our input plus every peer's copy. */
    const float *in = (const float *)local;
    float *out = (float *)(local + l.out);
    for (uint32_t i = tid; i < COUNT; i += nt) {
        float s = in[i];
        for (int p = 0; p < nranks; p++)
            if (p != rank) s += ((const float *)(local + l.staging + (uint64_t)p * l.bytes))[i];
        out[i] = s;
    }
}

int main(void) {
    cchan_bootstrap_t *bs;
    cchan_comm_t *comm;
    CHECK(cchan_bootstrap_create_from_env(&bs));
    CHECK(cchan_comm_create(bs, NULL, &comm));
    const int rank = cchan_comm_rank(comm), n = cchan_comm_size(comm);
    if (n < 2 || n > MAX_RANKS || cchan_comm_platform(comm) != CCHAN_PLATFORM_CUDA) {
        if (rank == 0)
            printf("ll_allreduce: needs 2 to %d ranks with a GPU each (skipped)\n", MAX_RANKS);
        cchan_comm_destroy(comm);
        return 77;
    }
    CUDA_CHECK(cudaSetDevice(cchan_comm_device(comm)));
    const struct layout l = layout_of(n);

    cchan_mem_t *buf, *bufs[MAX_RANKS];
    cchan_sem_set_t *sems;
    struct peers P;
    CHECK(cchan_mem_alloc(comm, l.slots + 2 * (uint64_t)n * l.slot_bytes, 0, &buf)); /* zeroed */
    CHECK(cchan_mem_exchange(comm, buf, bufs));
    CHECK(cchan_sem_set_create(comm, 1, 0, &sems)); /* unused by LL, required by a channel */
    for (int p = 0; p < n; p++)
        if (p != rank)
            CHECK(cchan_memory_channel_init(comm, sems, p, 0, bufs[p], buf, buf, &P.ch[p]));

    float *host = (float *)malloc(l.bytes);
    int wrong = 0;
    for (uint32_t call = 1; call <= CALLS; call++) {
        for (int i = 0; i < COUNT; i++) host[i] = (float)(rank + 1) * (float)(i % 7) + (float)call;
        CUDA_CHECK(cudaMemcpy(cchan_mem_ptr(buf), host, l.bytes, cudaMemcpyHostToDevice));
        allreduce<<<1, 512>>>(P, l, (uint8_t *)cchan_mem_ptr(buf), rank, n, call);
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(
            cudaMemcpy(host, (char *)cchan_mem_ptr(buf) + l.out, l.bytes, cudaMemcpyDeviceToHost));
        for (int i = 0; i < COUNT; i++) /* sum over r of (r + 1) * (i % 7) + call */
            wrong += host[i] != (float)(n * (n + 1) / 2) * (float)(i % 7) + (float)(n * call);
    }
    printf("rank %d: %d AllReduces of %d floats over %d ranks: %s\n", rank, CALLS, COUNT, n,
           wrong ? "WRONG" : "ok");

    CHECK(cchan_sem_set_destroy(sems));
    for (int p = 0; p < n; p++)
        if (p != rank) CHECK(cchan_mem_destroy(bufs[p]));
    CHECK(cchan_bootstrap_barrier(cchan_comm_bootstrap(comm))); /* no peer maps ours any more */
    CHECK(cchan_mem_destroy(buf));
    CHECK(cchan_comm_destroy(comm));
    free(host);
    return wrong ? 1 : 0;
}
