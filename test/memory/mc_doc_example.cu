// The kernels of docs/memory_channel.md, compiled in every CUDA build so the page stays true.
#include <cchan/device.h>

// HB: one block sends `bytes` of its local buffer to the peer's buffer at the same offset past
// `bytes`, then waits until the peer's data has arrived in ours.
__global__ void exchange_hb(cchan_memory_channel_t ch, uint64_t bytes) {
    cchan_memory_channel_put(&ch, bytes, 0, bytes, threadIdx.x, blockDim.x);
    __syncthreads(); // every thread's stores are done ...
    if (threadIdx.x == 0) {
        cchan_memory_channel_signal(&ch); // ... before the release that publishes them
        cchan_memory_channel_wait(&ch);   // acquire: the peer's data is visible after this
    }
    __syncthreads();
}

// LL8 all-reduce of `count` floats between two ranks, one launch per epoch (1, 2, 3, ...).
// local: [0, 4 count) input, [4 count, 8 count) output; recv: two packet areas used alternately,
// so a peer that is one launch ahead never overwrites packets not yet read.
__global__ void allreduce_ll8(cchan_memory_channel_t ch, uint32_t count, uint32_t epoch) {
    uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x, nthreads = gridDim.x * blockDim.x;
    uint64_t bytes = 4ull * count;
    uint64_t area = cchan_ll8_buffer_bytes(bytes) * (epoch & 1);
    cchan_memory_channel_put_packets_ll8(&ch, area, 0, bytes, epoch, tid, nthreads);
    cchan_memory_channel_read_packets_ll8(&ch, area, bytes, bytes, epoch, tid, nthreads);
    const float *in = (const float *)ch.local;
    float *out = (float *)(ch.local + bytes);
    for (uint32_t i = tid; i < count; i += nthreads)
        out[i] += in[i]; // the packets this thread read
}
