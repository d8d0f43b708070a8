/* Calls every device function of cchan's public headers from one kernel, so that each function and
 * each macro-generated variant is instantiated and compiled to machine code by every backend:
 * C11 and C++17 (host backend), nvcc (sm_80, sm_90) and hipcc (gfx90a, gfx940). The hygiene tests
 * compile this file (as .c, .cpp, .cu or .hip); nothing runs it.
 *
 * hygiene_use_all_coverage fails when a header defines a device function this file does not call:
 * a new device function gets a call here, in the section of its header.
 */
#include "cchan/cchan.h"
#include "cchan/device.h"
#include "cchan/fifo.h"

#if defined(__CUDACC__) || defined(__HIPCC__)
#define USE_ALL_KERNEL extern "C" __global__ void
#define USE_ALL_TID ((uint32_t)threadIdx.x)
#define USE_ALL_NTHREADS ((uint32_t)blockDim.x)
#else
#define USE_ALL_KERNEL void
#define USE_ALL_TID 0u
#define USE_ALL_NTHREADS 1u
#endif

/* Device handles, by value, the way a user passes them to a kernel; pointers to scratch memory. */
typedef struct use_all_args {
    cchan_memory_channel_t mc;
    cchan_port_channel_t pc;
    cchan_switch_channel_t sw;
    cchan_semaphore_t sem;
    cchan_grid_barrier_t grid;
    cchan_fifo_t fifo;
    const cchan_semaphore_t *peer_sems;
    uint32_t npeers;
    uint32_t flag;
    uint8_t *bytes; /* 16-byte aligned, at least 8 KiB */
    uint64_t *u64;  /* at least 16 */
    uint32_t *u32;  /* at least 16 */
    const float *const *f32_srcs;
    const cchan_f16_t *const *f16_srcs;
    const cchan_bf16_t *const *bf16_srcs;
    int64_t *result; /* one per thread */
} use_all_args_t;

USE_ALL_KERNEL cchan_hygiene_use_all(use_all_args_t a);

USE_ALL_KERNEL cchan_hygiene_use_all(use_all_args_t a) {
    const uint32_t tid = USE_ALL_TID;
    const uint32_t nthreads = USE_ALL_NTHREADS;
    const cchan_wait_ctl_t *ctl = &a.sem.ctl;
    uint8_t *b = a.bytes;
    int64_t acc = 0;

    /* arch/atomic.h */
    acc += (int64_t)cchan_load_acquire_sys_u64(&a.u64[0]);
    acc += (int64_t)cchan_load_acquire_dev_u64(&a.u64[1]);
    acc += (int64_t)cchan_load_relaxed_dev_u64(&a.u64[1]);
    acc += (int64_t)cchan_load_relaxed_sys_u64(&a.u64[2]);
    acc += cchan_load_acquire_sys_u32(&a.u32[0]);
    acc += cchan_load_relaxed_sys_u32(&a.u32[1]);
    cchan_store_release_sys_u64(&a.u64[3], 1);
    cchan_store_release_dev_u64(&a.u64[4], 2);
    cchan_store_relaxed_sys_u64(&a.u64[5], 3);
    cchan_store_relaxed_sys_v2_u64(&a.u64[14], 6, 7);
    cchan_store_release_sys_u32(&a.u32[2], 4);
    cchan_store_relaxed_sys_u32(&a.u32[3], 5);
    acc += (int64_t)cchan_fetch_add_release_sys_u64(&a.u64[6], 1);
    acc += (int64_t)cchan_fetch_add_relaxed_sys_u64(&a.u64[7], 1);
    acc += (int64_t)cchan_fetch_add_relaxed_dev_u64(&a.u64[8], 1);
    acc += cchan_fetch_add_acq_rel_dev_u32(&a.u32[4], 1);
    cchan_red_add_release_sys_u64(&a.u64[11], 1);
    cchan_red_add_relaxed_sys_u64(&a.u64[12], 1);
    cchan_fence_acq_rel_sys();
    cchan_fence_acq_rel_dev();
    cchan_fence_sc_sys();
    {
        cchan_vec8_t *v8 = (cchan_vec8_t *)(void *)b;
        cchan_vec16_t *v16 = (cchan_vec16_t *)(void *)(b + 64);
        cchan_vec8_t x8 = cchan_load_volatile_v8(v8);
        cchan_vec16_t x16 = cchan_load_volatile_v16(v16);
        cchan_store_volatile_v8(v8 + 1, x8);
        cchan_store_volatile_v16(v16 + 1, x16);
    }
    acc += (int64_t)cchan_clock_ns();
    cchan_spin_pause(1);
    cchan_block_sync();
    if (a.flag == 0xdead0u) cchan_trap();

    /* arch/warp.h (every lane of the warp calls the ballot and the shuffle) */
    {
        const uint32_t lane = cchan_lane_id(tid);
        cchan_lane_mask_t voters = cchan_warp_ballot((int)((a.u64[13] >> lane) & 1u));
        acc += cchan_lane_popc(voters & cchan_lanes_below(lane)) + cchan_warp_id(tid);
        float f = (float)acc;
        f += cchan_warp_shfl_xor_f32(CCHAN_LANE_MASK_ALL, f, CCHAN_WARP_SIZE / 2, CCHAN_WARP_SIZE);
        f += cchan_warp_shfl_xor_f32(cchan_lane_group_mask(lane, 16), f, 8, 16);
        acc += (int64_t)f;
    }

    /* wait.h */
    {
        cchan_deadline_t d;
        cchan_deadline_init(&d);
        acc += cchan_deadline_spin(&d, ctl);
        acc += cchan_wait_aborted(ctl);
        acc += cchan_wait_done(ctl, CCHAN_WAIT_SEMAPHORE, 1, 1);
        if (a.flag == 0xdead1u) acc += cchan_wait_expired(&d, ctl, CCHAN_WAIT_SEMAPHORE, 1, 0);
        if (a.flag == 0xdead2u)
            acc += cchan_device_fail(ctl, CCHAN_FAIL_RANGE, 1, 2, 0, CCHAN_ERR_RANGE);
        acc += cchan_wait_geq_u64(&a.u64[9], 0, ctl, CCHAN_WAIT_BARRIER);
    }

    /* numeric.h */
    {
        float f = cchan_f32_from_bits(cchan_f32_bits(1.5f));
        f += cchan_bf16_to_f32(cchan_f32_to_bf16(f));
        f += cchan_f16_to_f32(cchan_f32_to_f16(f));
        float lo, hi;
        cchan_unpack_w32(cchan_pack_w32(f, 2.0f, CCHAN_ELEM_BF16), CCHAN_ELEM_BF16, &lo, &hi);
        acc += (int64_t)(f + lo + hi);
    }

    /* copy.h */
    cchan_copy_bytes(b + 1024, b + 2048, 7, tid, nthreads);
    cchan_copy_words((uint32_t *)(void *)(b + 1024), (const uint32_t *)(const void *)(b + 2048), 7,
                     tid, nthreads);
    cchan_copy_vec16((cchan_raw16_t *)(void *)(b + 1024),
                     (const cchan_raw16_t *)(const void *)(b + 2048), 7, tid, nthreads);
    cchan_copy(b + 1025, b + 2051, 1000, tid, nthreads);

    /* packet.h */
    acc += (int64_t)(cchan_ll8_buffer_bytes(13) + cchan_ll16_buffer_bytes(13));
    acc += cchan_ll_load_word(b + 3, 3);
    cchan_ll_store_word(b + 5, 0x01020304u, 2);
    cchan_ll8_put((cchan_vec8_t *)(void *)(b + 4096), b, 13, a.flag, tid, nthreads);
    acc += cchan_ll8_read((const cchan_vec8_t *)(const void *)(b + 4096), b + 512, 13, a.flag, tid,
                          nthreads, ctl);
    {
        uint32_t w = 0;
        uint64_t d = 0;
        cchan_ll8_write((cchan_vec8_t *)(void *)(b + 5120), 42u, a.flag);
        acc += cchan_ll8_read_one((const cchan_vec8_t *)(const void *)(b + 5120), a.flag, ctl, &w);
        cchan_ll16_write((cchan_vec16_t *)(void *)(b + 5632), 42u, a.flag);
        acc +=
            cchan_ll16_read_one((const cchan_vec16_t *)(const void *)(b + 5632), a.flag, ctl, &d);
        acc += (int64_t)(w + d);
    }
    cchan_ll16_put((cchan_vec16_t *)(void *)(b + 6144), b, 13, a.flag, tid, nthreads);
    acc += cchan_ll16_read((const cchan_vec16_t *)(const void *)(b + 6144), b + 512, 13, a.flag,
                           tid, nthreads, ctl);

    /* semaphore.h */
    cchan_semaphore_signal(&a.sem);
    cchan_semaphore_relaxed_signal(&a.sem);
    acc += cchan_semaphore_wait(&a.sem);
    acc += cchan_semaphore_poll(&a.sem);
    acc += cchan_semaphore_wait_value(&a.sem, cchan_semaphore_expected(&a.sem) + 1);
    cchan_semaphore_set_expected(&a.sem, 0);

    /* impl/fifo_wire.h, fifo.h */
    {
        cchan_trigger_t t = cchan_trigger_encode(CCHAN_TRIGGER_PUT, 1, 64, 128, 256);
        cchan_trigger_fields_t f = cchan_trigger_decode(t);
        cchan_trigger_t got = t;
        acc += (int64_t)(f.bytes + cchan_fifo_parity(f.dst_off, a.fifo.size));
        acc += cchan_fifo_push(&a.fifo, t);
        acc += cchan_fifo_peek(a.fifo.slots, a.fifo.size, 0, &got);
        acc += (int64_t)got.word1;
        cchan_fifo_publish_tail(&a.u64[10], 1);
    }

    /* memory_channel.h */
    cchan_memory_channel_put(&a.mc, 0, 0, 4096, tid, nthreads);
    cchan_memory_channel_get(&a.mc, 0, 0, 4096, tid, nthreads);
    acc += cchan_memory_channel_read_u32(&a.mc, 0);
    acc += (int64_t)cchan_memory_channel_read_u64(&a.mc, 8);
    acc += cchan_memory_channel_read_i32(&a.mc, 16);
    acc += (int64_t)cchan_memory_channel_read_f32(&a.mc, 20);
    acc += (int64_t)cchan_memory_channel_read_f64(&a.mc, 24);
    cchan_memory_channel_write_u32(&a.mc, 0, 1u);
    cchan_memory_channel_write_u64(&a.mc, 8, 2u);
    cchan_memory_channel_write_i32(&a.mc, 16, -3);
    cchan_memory_channel_write_f32(&a.mc, 20, 4.0f);
    cchan_memory_channel_write_f64(&a.mc, 24, 5.0);
    cchan_memory_channel_signal(&a.mc);
    cchan_memory_channel_relaxed_signal(&a.mc);
    acc += cchan_memory_channel_wait(&a.mc);
    acc += cchan_memory_channel_wait_value(&a.mc, 1);
    acc += cchan_memory_channel_poll(&a.mc);
    cchan_memory_channel_flush(&a.mc);
    cchan_memory_channel_put_packets_ll8(&a.mc, 0, 0, 13, a.flag, tid, nthreads);
    acc += cchan_memory_channel_read_packets_ll8(&a.mc, 0, 64, 13, a.flag, tid, nthreads);
    cchan_memory_channel_put_packets_ll16(&a.mc, 0, 0, 13, a.flag, tid, nthreads);
    acc += cchan_memory_channel_read_packets_ll16(&a.mc, 0, 64, 13, a.flag, tid, nthreads);
    {
        uint32_t w = 0;
        uint64_t d = 0;
        cchan_memory_channel_write_packet_ll8(&a.mc, 128, 7u, a.flag);
        acc += cchan_memory_channel_read_packet_ll8(&a.mc, 128, a.flag, &w);
        cchan_memory_channel_write_packet_ll16(&a.mc, 144, 7u, a.flag);
        acc += cchan_memory_channel_read_packet_ll16(&a.mc, 144, a.flag, &d);
        acc += (int64_t)(w + d);
    }
    {
        float *f32 = (float *)(void *)(b + 7168);
        cchan_f16_t *f16 = (cchan_f16_t *)(void *)(b + 7232);
        cchan_bf16_t *bf16 = (cchan_bf16_t *)(void *)(b + 7296);
        cchan_elem_f32_store(&f32[1], cchan_elem_f32_load(&f32[0]));
        cchan_elem_f16_store(&f16[1], cchan_elem_f16_load(&f16[0]));
        cchan_elem_bf16_store(&bf16[1], cchan_elem_bf16_load(&bf16[0]));
    }
    cchan_memory_channel_reduce_put_f32(&a.mc, 0, a.f32_srcs, 2, 100, tid, nthreads);
    cchan_memory_channel_reduce_put_f16(&a.mc, 0, a.f16_srcs, 2, 100, tid, nthreads);
    cchan_memory_channel_reduce_put_bf16(&a.mc, 0, a.bf16_srcs, 2, 100, tid, nthreads);

    /* port_channel.h */
    acc += cchan_port_channel_direct_ok(&a.pc, 0, 0, 64);
    acc += cchan_port_channel_push(&a.pc, CCHAN_TRIGGER_SIGNAL, 0, 0, 0);
    acc += cchan_port_channel_put_typed(&a.pc, 0, 0, 64, CCHAN_TRIGGER_SIGNAL);
    acc += cchan_port_channel_put(&a.pc, 0, 0, 64);
    acc += cchan_port_channel_signal(&a.pc);
    acc += cchan_port_channel_put_signal(&a.pc, 0, 0, 64);
    acc += cchan_port_channel_flush_wait(&a.pc, 1);
    acc += cchan_port_channel_check_dropped(&a.pc, 1);
    acc += cchan_port_channel_transport_failed(&a.pc);
    acc += cchan_port_channel_wait_failed(&a.pc, a.pc.flush_done, 1, CCHAN_WAIT_FLUSH, 0);
    acc += cchan_port_channel_wait_counter(&a.pc, a.pc.inbound, 1, CCHAN_WAIT_SEMAPHORE);
    acc += cchan_port_channel_wait_seen(&a.pc, a.pc.flush_done, 1, CCHAN_WAIT_FLUSH, &a.u64[3]);
    acc += cchan_port_channel_flush(&a.pc);
    acc += cchan_port_channel_put_signal_flush(&a.pc, 0, 0, 64);
    acc += cchan_port_channel_wait(&a.pc);
    acc += cchan_port_channel_poll(&a.pc);

    /* switch_channel.h */
    cchan_switch_channel_reduce_f32(&a.sw, 0, 0, 64, tid, nthreads);
    cchan_switch_channel_reduce_f16(&a.sw, 0, 0, 64, tid, nthreads);
    cchan_switch_channel_reduce_bf16(&a.sw, 0, 0, 64, tid, nthreads);
    cchan_switch_channel_reduce_i32(&a.sw, 0, 0, 64, tid, nthreads);
    cchan_switch_channel_reduce_u32(&a.sw, 0, 0, 64, tid, nthreads);
    cchan_switch_channel_broadcast_f32(&a.sw, 0, 0, 64, tid, nthreads);
    cchan_switch_channel_broadcast_f16(&a.sw, 0, 0, 64, tid, nthreads);
    cchan_switch_channel_broadcast_bf16(&a.sw, 0, 0, 64, tid, nthreads);
    cchan_switch_channel_broadcast_i32(&a.sw, 0, 0, 64, tid, nthreads);
    cchan_switch_channel_broadcast_u32(&a.sw, 0, 0, 64, tid, nthreads);

    /* barrier.h */
    acc += cchan_grid_barrier_arrive_wait(&a.grid);
    acc += cchan_grid_barrier(&a.grid, tid);
    acc += cchan_rank_barrier(a.peer_sems, a.npeers, tid);

    a.result[tid] = acc;
}

/* Host-side macros of cchan.h expand to valid initializers in every language mode. */
size_t cchan_hygiene_host_macros(void);
size_t cchan_hygiene_host_macros(void) {
    cchan_comm_config_t comm = CCHAN_COMM_CONFIG_INIT;
    cchan_proxy_config_t proxy = CCHAN_PROXY_CONFIG_INIT;
    return comm.size + proxy.size + (size_t)CCHAN_VERSION_CODE;
}
