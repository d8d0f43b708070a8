// The CUDA platform of the memory runtime, two processes (one GPU each, or both on one GPU):
// cuMem allocations, registered cudaMalloc memory (legacy IPC) and shared host memory exchanged and
// written through the importer's mapping; semaphore sets of both flavours driven by kernels; the
// kernels of docs/memory_channel.md; and a device-side timeout reported by
// cchan_comm_check_device. Exits 77 without a GPU. test/gpu holds the full memory-channel suite.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cchan/cchan.h"

__global__ void exchange_hb(cchan_memory_channel_t ch, uint64_t bytes);
__global__ void allreduce_ll8(cchan_memory_channel_t ch, uint32_t count, uint32_t epoch);

static int rank = -1, nranks = 0;

#define CK(cond)                                                                                   \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s (%s)\n", rank, __FILE__, __LINE__,   \
                    #cond, cchan_last_error());                                                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define OK(call) CK((call) == 0)
#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "rank %d: %s:%d: %s: %s\n", rank, __FILE__, __LINE__, #call,           \
                    cudaGetErrorString(e_));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static cchan_comm_t *comm;

static void barrier() { OK(cchan_bootstrap_barrier(cchan_comm_bootstrap(comm))); }

static uint8_t pattern(int owner, int writer, size_t i) {
    return (uint8_t)(owner * 31 + writer * 7 + i * 13 + 1);
}

/* Every rank writes a pattern into its slot of every peer's memory through its mapping of it, then
 * checks what the peers wrote into its own. */
static void check_written_through_mappings(cchan_mem_t *local, cchan_mem_t **peers, size_t slot) {
    uint8_t *buf = (uint8_t *)malloc(slot);
    for (int p = 0; p < nranks; p++) {
        for (size_t i = 0; i < slot; i++) buf[i] = pattern(p, rank, i);
        CU(cudaMemcpy((uint8_t *)cchan_mem_ptr(peers[p]) + (size_t)rank * slot, buf, slot,
                      cudaMemcpyDefault));
    }
    barrier();
    for (int p = 0; p < nranks; p++) {
        CU(cudaMemcpy(buf, (uint8_t *)cchan_mem_ptr(local) + (size_t)p * slot, slot,
                      cudaMemcpyDefault));
        for (size_t i = 0; i < slot; i++) CK(buf[i] == pattern(rank, p, i));
    }
    barrier();
    free(buf);
}

static void destroy_imports(cchan_mem_t **peers) {
    for (int p = 0; p < nranks; p++)
        if (p != rank) OK(cchan_mem_destroy(peers[p]));
}

static void case_vmm_alloc() {
    const size_t bytes = 4 * (1u << 20) + 3;
    cchan_mem_t *local, *peers[8];
    OK(cchan_mem_alloc(comm, bytes, 0, &local));
    CK(((uintptr_t)cchan_mem_ptr(local) & 255) == 0);
    uint8_t *host = (uint8_t *)malloc(bytes);
    CU(cudaMemcpy(host, cchan_mem_ptr(local), bytes, cudaMemcpyDefault));
    for (size_t i = 0; i < bytes; i++) CK(host[i] == 0);
    free(host);
    OK(cchan_mem_exchange(comm, local, peers));
    check_written_through_mappings(local, peers, 65536 + 5);
    destroy_imports(peers);
    OK(cchan_mem_destroy(local));
    printf("rank %d: cuMem allocation exchanged\n", rank);
}

/* Registered from another GPU's context too (the current device is not the memory's). */
static void case_cudamalloc_register(int other_device) {
    void *raw;
    int own = cchan_comm_device(comm);
    CU(cudaSetDevice(other_device));
    CU(cudaMalloc(&raw, 1u << 20));
    CU(cudaSetDevice(own));
    cchan_mem_t *local, *peers[8];
    OK(cchan_mem_register(comm, (uint8_t *)raw + 4096, 256 * 1024, 0, &local)); /* inside: offset */
    OK(cchan_mem_exchange(comm, local, peers));
    check_written_through_mappings(local, peers, 4096 + 3);
    destroy_imports(peers);
    OK(cchan_mem_destroy(local));
    barrier(); /* imports closed everywhere before the owner frees (legacy IPC) */
    CU(cudaFree(raw));
    printf("rank %d: cudaMalloc registration (GPU %d) exchanged\n", rank, other_device);
}

static void case_host_memory() {
    cchan_mem_t *local, *peers[8];
    OK(cchan_mem_alloc(comm, 3 * 4096 + 1, CCHAN_MEM_HOST, &local));
    OK(cchan_mem_exchange(comm, local, peers));
    check_written_through_mappings(local, peers, 4096);
    destroy_imports(peers);
    OK(cchan_mem_destroy(local));
    printf("rank %d: shared host memory exchanged\n", rank);
}

/* rank 0 signals first, rank 1 answers: `rounds` round trips on the GPU. */
__global__ void ping_pong(cchan_semaphore_t s, int leader, int rounds, int *failed) {
    for (int i = 0; i < rounds; i++) {
        if (leader) cchan_semaphore_signal(&s);
        if (cchan_semaphore_wait(&s) != 0) *failed = 1;
        if (!leader) cchan_semaphore_signal(&s);
    }
}

static void case_semaphores(unsigned flags) {
    cchan_sem_set_t *set;
    OK(cchan_sem_set_create(comm, 2, flags, &set));
    int *failed;
    CU(cudaMalloc(&failed, sizeof *failed));
    CU(cudaMemset(failed, 0, sizeof *failed));
    cchan_semaphore_t s;
    OK(cchan_sem_set_get(set, 1 - rank, 1, &s));
    const int rounds = 500;
    ping_pong<<<1, 1>>>(s, rank == 0, rounds, failed);
    CU(cudaGetLastError());
    CU(cudaDeviceSynchronize());
    int f = 1;
    CU(cudaMemcpy(&f, failed, sizeof f, cudaMemcpyDefault));
    CK(f == 0);
    if (flags & CCHAN_SEM_HOST_MAPPED)
        CK(*cchan_sem_set_inbound(set, 1 - rank, 1) == (uint64_t)rounds);
    else
        CK(cchan_sem_set_inbound(set, 1 - rank, 1) == NULL); /* device memory: no host view */
    barrier();
    CU(cudaFree(failed));
    OK(cchan_sem_set_destroy(set));
    printf("rank %d: %d semaphore round trips (%s)\n", rank, rounds,
           flags ? "host-mapped" : "device memory");
}

static void case_doc_examples() {
    const uint32_t count = 1000;
    const uint64_t bytes = 1u << 20;
    cchan_mem_t *data, *pkts, *data_peers[8], *pkt_peers[8];
    cchan_sem_set_t *sems;
    OK(cchan_mem_alloc(comm, 2 * bytes, 0, &data));
    OK(cchan_mem_alloc(comm, 2 * cchan_ll8_buffer_bytes(4ull * count), 0, &pkts));
    OK(cchan_mem_exchange(comm, data, data_peers));
    OK(cchan_mem_exchange(comm, pkts, pkt_peers));
    OK(cchan_sem_set_create(comm, 1, 0, &sems));
    int peer = 1 - rank;

    cchan_memory_channel_t ch;
    OK(cchan_memory_channel_init(comm, sems, peer, 0, data_peers[peer], data, data, &ch));
    uint8_t *buf = (uint8_t *)malloc(bytes);
    for (uint64_t i = 0; i < bytes; i++) buf[i] = pattern(rank, rank, i);
    CU(cudaMemcpy(cchan_mem_ptr(data), buf, bytes, cudaMemcpyDefault));
    barrier();
    exchange_hb<<<1, 512>>>(ch, bytes);
    CU(cudaGetLastError());
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(buf, (uint8_t *)cchan_mem_ptr(data) + bytes, bytes, cudaMemcpyDefault));
    for (uint64_t i = 0; i < bytes; i++) CK(buf[i] == pattern(peer, peer, i));
    free(buf);

    OK(cchan_memory_channel_init(comm, sems, peer, 0, pkt_peers[peer], data, pkts, &ch));
    float in[count], out[count];
    for (uint32_t epoch = 1; epoch <= 50; epoch++) {
        for (uint32_t i = 0; i < count; i++) in[i] = (float)(rank + 1) * (float)i + (float)epoch;
        CU(cudaMemcpy(cchan_mem_ptr(data), in, sizeof in, cudaMemcpyDefault));
        allreduce_ll8<<<2, 128>>>(ch, count, epoch);
        CU(cudaGetLastError());
        CU(cudaDeviceSynchronize());
        CU(cudaMemcpy(out, (uint8_t *)cchan_mem_ptr(data) + sizeof in, sizeof out,
                      cudaMemcpyDefault));
        for (uint32_t i = 0; i < count; i++) CK(out[i] == 3.0f * (float)i + 2.0f * (float)epoch);
        barrier(); /* inputs are rewritten by the host next: the peer must have read them */
    }
    OK(cchan_sem_set_destroy(sems));
    destroy_imports(data_peers);
    destroy_imports(pkt_peers);
    OK(cchan_mem_destroy(data));
    OK(cchan_mem_destroy(pkts));
    printf("rank %d: docs/memory_channel.md kernels ran\n", rank);
}

__global__ void alone_at_barrier(cchan_grid_barrier_t b) { cchan_grid_barrier(&b, threadIdx.x); }

/* Last: a grid barrier one block short traps at the deadline; the context is lost afterwards. */
static void case_timeout() {
    OK(cchan_comm_set_timeout_ms(comm, 200));
    cchan_grid_barrier_t b;
    OK(cchan_grid_barrier_create(comm, 2, &b));
    alone_at_barrier<<<1, 32>>>(b);
    CK(cudaDeviceSynchronize() != cudaSuccess);
    CK(cchan_comm_check_device(comm) == CCHAN_ERR_DEVICE_TIMEOUT);
    CK(strstr(cchan_last_error(), "waiting at barrier") != NULL);
    CK(strstr(cchan_last_error(), "expected 2 arrivals, observed 1") != NULL);
    printf("rank %d: %s\n", rank, cchan_last_error());
}

int main() {
    cchan_bootstrap_t *bs;
    OK(cchan_bootstrap_create_from_env(&bs));
    OK(cchan_comm_create(bs, NULL, &comm));
    rank = cchan_comm_rank(comm);
    nranks = cchan_comm_size(comm);
    if (cchan_comm_platform(comm) != CCHAN_PLATFORM_CUDA) {
        printf("SKIP: no GPU (the communicator runs on the host platform)\n");
        return 77;
    }
    CK(nranks == 2);
    CU(cudaSetDevice(cchan_comm_device(comm)));
    OK(cchan_comm_set_timeout_ms(comm, 20000));
    printf("rank %d: device %d\n", rank, cchan_comm_device(comm));
    case_vmm_alloc();
    int ngpus = 0;
    CU(cudaGetDeviceCount(&ngpus));
    case_cudamalloc_register(cchan_comm_device(comm));
    case_cudamalloc_register((cchan_comm_device(comm) + 1) % ngpus);
    case_host_memory();
    case_semaphores(0);
    case_semaphores(CCHAN_SEM_HOST_MAPPED);
    case_doc_examples();
    barrier();
    if (rank == 0)
        case_timeout(); /* leaves rank 0's context unusable: no teardown after it */
    else
        OK(cchan_comm_destroy(comm));
    return 0;
}
