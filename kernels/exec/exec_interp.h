/* cchan_exec interpreter: the device code that runs one thread block's operation list, for CUDA,
 * HIP and the host backend (where a block is one CPU thread: tid 0 of 1).
 *
 * A block copies its operations and refs into shared memory (when they fit), then runs them in
 * order with the inline channel primitives. Synchronization comes only from the plan: signal/wait,
 * rank-local semaphores, barriers and LL packet flags; `sync` ops are block barriers.
 *
 * Addressing (docs/plan-format.md): with chunk_bytes = in_bytes / buffers.input, a ref names
 * count chunks; outside a loop an op covers each chunk whole, in loop iteration i only bytes
 * [i*U, min((i+1)*U, chunk_bytes)) of each. The covered bytes, taken chunk after chunk, form one
 * range; a thread-block group cuts it into tbg_size parts (rounded up to align). A packet area's
 * byte offsets are twice the payload's.
 */
#ifndef CCHAN_EXEC_INTERP_H
#define CCHAN_EXEC_INTERP_H

#include "cchan/barrier.h"
#include "cchan/copy.h"
#include "cchan/numeric.h"
#include "cchan/packet.h"
#include "cchan/port_channel.h"
#include "cchan/semaphore.h"
#include "exec_program.h"

CCHAN_EXTERN_C_BEGIN

enum exec_dtype {
    EXEC_F32 = CCHAN_ELEM_F32,
    EXEC_F16 = CCHAN_ELEM_F16,
    EXEC_BF16 = CCHAN_ELEM_BF16
};

/* One channel of this rank, resolved for one set of buffers. */
typedef struct exec_chan_rt {
    uint8_t *remote[EXEC_NBUF]; /* memory: the peer's buffers mapped here (NULL: not reached) */
    cchan_semaphore_t sem;      /* memory: the channel's semaphore */
    int16_t port[9];            /* port: ports[] index for (local buf * 3 + peer buf); -1 none */
    int16_t anchor;             /* port: ports[] index of the scratch-to-scratch channel */
    uint32_t type;
} exec_chan_rt_t;

/* Everything a run needs that depends on the buffers; device memory, built once per buffers. */
typedef struct exec_bind {
    uint8_t *buf[EXEC_NBUF];      /* this rank's input, output, scratch */
    uint64_t port_off[EXEC_NBUF]; /* offsets of the buffers in their registrations */
    const exec_chan_rt_t *ch;
    const cchan_port_channel_t *ports;
    const cchan_semaphore_t *barrier; /* one per peer */
    uint32_t npeers;
    uint32_t reserved;
    uint64_t *lsem;   /* rank-local semaphores: [s][0] releases, [s][1] acquires waited for */
    /* [0]: the LL flag of the next run (starts at 1), the same for every block of every instance,
     * so that runs with different instance counts never meet a stale flag or half; [1]: blocks of
     * the current run that have finished (the last one advances [0]) */
    uint32_t *epochs;
    cchan_wait_ctl_t ctl;
} exec_bind_t;

/* Kernel arguments (by value). */
typedef struct exec_kargs {
    const uint8_t *prog;        /* [exec_block_t x nblocks][ops][refs] */
    const exec_bind_t *bind;    /* one per instance */
    uint32_t nblocks;           /* blocks with a list on this rank */
    uint32_t pblocks;           /* blocks of one instance (the plan's, the most over all ranks) */
    uint32_t grid;              /* blocks of this run: pblocks x its instances */
    uint32_t ops_off, refs_off; /* byte offsets of the op and ref arrays in prog */
    uint32_t dtype;
    uint32_t use_smem;   /* copy each block's lists into shared memory */
    uint32_t reserved;
    uint64_t inst_bytes; /* bytes of every chunk each instance handles (align multiple) */
    uint64_t chunk_bytes, loop_unit, align;
    uint64_t scratch_stride; /* bytes between scratch chunks (chunk_bytes x factor) */
    uint64_t scratch_half;   /* ll_double_buffer: bytes of one half; else 0 */
} exec_kargs_t;

/* ------------------------------------------------------------------ arithmetic */

/* a + b for the elements packed in one word (f32: one, f16/bf16: two), summed in f32. */
CCHAN_DEVICE_INLINE uint32_t exec_add_w32(uint32_t a, uint32_t b, int dt) {
    float al, ah, bl, bh;
    cchan_unpack_w32(a, dt, &al, &ah);
    cchan_unpack_w32(b, dt, &bl, &bh);
    return cchan_pack_w32(al + bl, ah + bh, dt);
}

/* 16-byte vector load/store of plain data; p 16-byte aligned. */
CCHAN_DEVICE_INLINE void exec_load16(const uint8_t *p, uint32_t *w) {
#if defined(CCHAN_BACKEND_CUDA) || defined(CCHAN_BACKEND_HIP)
    uint4 v = *(const uint4 *)(const void *)p;
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
#else
    const cchan_vec16_t *v = (const cchan_vec16_t *)(const void *)p;
    for (int j = 0; j < 4; j++) w[j] = v->w[j];
#endif
}
CCHAN_DEVICE_INLINE void exec_store16(uint8_t *p, const uint32_t *w) {
#if defined(CCHAN_BACKEND_CUDA) || defined(CCHAN_BACKEND_HIP)
    uint4 v;
    v.x = w[0];
    v.y = w[1];
    v.z = w[2];
    v.w = w[3];
    *(uint4 *)(void *)p = v;
#else
    cchan_vec16_t *v = (cchan_vec16_t *)(void *)p;
    for (int j = 0; j < 4; j++) v->w[j] = w[j];
#endif
}

#define EXEC_UNROLL 4 /* two-source reductions: vectors per thread in flight */

/* dst[0..bytes) = sum of srcs, element-wise; bytes a multiple of 16. Each sum runs in f32 over
 * every source and rounds once. dst may be one of the srcs. dst2 (may be NULL) receives the same
 * sum from the same registers. */
CCHAN_DEVICE_INLINE void exec_reduce_dt(uint8_t *dst, uint8_t *dst2, const uint8_t *const *src,
                                        int nsrc, uint64_t bytes, const int dt, uint32_t tid,
                                        uint32_t nthreads) {
    int aligned = ((((uintptr_t)dst) | ((uintptr_t)dst2)) & 15) == 0;
    for (int k = 0; k < nsrc; k++) aligned &= (((uintptr_t)src[k]) & 15) == 0;
    if (aligned) {
        uint64_t n = bytes / 16, i = tid;
        if (nsrc == 2) {
            /* every load issued before the first sum: EXEC_UNROLL reads in flight per thread
             * (peer reads over NVLink), as cchan_coll's reduction does */
            for (; i + (EXEC_UNROLL - 1) * (uint64_t)nthreads < n;
                 i += EXEC_UNROLL * (uint64_t)nthreads) {
                uint32_t w0[EXEC_UNROLL][4], w1[EXEC_UNROLL][4];
                for (int u = 0; u < EXEC_UNROLL; u++) {
                    exec_load16(src[0] + (i + (uint64_t)u * nthreads) * 16, w0[u]);
                    exec_load16(src[1] + (i + (uint64_t)u * nthreads) * 16, w1[u]);
                }
                for (int u = 0; u < EXEC_UNROLL; u++) {
                    for (int j = 0; j < 4; j++) w0[u][j] = exec_add_w32(w0[u][j], w1[u][j], dt);
                    exec_store16(dst + (i + (uint64_t)u * nthreads) * 16, w0[u]);
                    if (dst2) exec_store16(dst2 + (i + (uint64_t)u * nthreads) * 16, w0[u]);
                }
            }
        }
        for (; i < n; i += nthreads) {
            float lo[4], hi[4];
            uint32_t w[4];
            exec_load16(src[0] + i * 16, w);
            for (int j = 0; j < 4; j++) cchan_unpack_w32(w[j], dt, &lo[j], &hi[j]);
            for (int k = 1; k < nsrc; k++) {
                exec_load16(src[k] + i * 16, w);
                for (int j = 0; j < 4; j++) {
                    float l, h;
                    cchan_unpack_w32(w[j], dt, &l, &h);
                    lo[j] += l;
                    hi[j] += h;
                }
            }
            for (int j = 0; j < 4; j++) w[j] = cchan_pack_w32(lo[j], hi[j], dt);
            exec_store16(dst + i * 16, w);
            if (dst2) exec_store16(dst2 + i * 16, w);
        }
        return;
    }
    /* caller's buffers 4-byte aligned at least (every element type here is 2 or 4 bytes and a
     * multiple of 16 bytes apart): word at a time */
    uint64_t n = bytes / 4;
    for (uint64_t i = tid; i < n; i += nthreads) {
        float lo, hi;
        cchan_unpack_w32(((const uint32_t *)(const void *)src[0])[i], dt, &lo, &hi);
        for (int k = 1; k < nsrc; k++) {
            float l, h;
            cchan_unpack_w32(((const uint32_t *)(const void *)src[k])[i], dt, &l, &h);
            lo += l;
            hi += h;
        }
        uint32_t w = cchan_pack_w32(lo, hi, dt);
        ((uint32_t *)(void *)dst)[i] = w;
        if (dst2) ((uint32_t *)(void *)dst2)[i] = w;
    }
}

CCHAN_DEVICE_INLINE void exec_reduce(uint8_t *dst, uint8_t *dst2, const uint8_t *const *src,
                                     int nsrc, uint64_t bytes, int dt, uint32_t tid,
                                     uint32_t nthreads) {
    if (dt == EXEC_F32)
        exec_reduce_dt(dst, dst2, src, nsrc, bytes, EXEC_F32, tid, nthreads);
    else if (dt == EXEC_F16)
        exec_reduce_dt(dst, dst2, src, nsrc, bytes, EXEC_F16, tid, nthreads);
    else
        exec_reduce_dt(dst, dst2, src, nsrc, bytes, EXEC_BF16, tid, nthreads);
}

/* dst = src[0] (plain data) + the payloads of the packet areas src[1..nsrc), each waited for with
 * `flag`. bytes a multiple of the packet payload (16-byte pieces). */
CCHAN_DEVICE_INLINE int exec_reduce_packets(uint8_t *dst, const uint8_t *const *src, int nsrc,
                                            uint64_t bytes, int proto, int dt, uint32_t flag,
                                            const cchan_wait_ctl_t *ctl, uint32_t tid,
                                            uint32_t nthreads) {
    if (proto == EXEC_PROTO_LL16) {
        uint64_t n = bytes / 8;
        for (uint64_t i = tid; i < n; i += nthreads) {
            uint32_t w0 = ((const uint32_t *)(const void *)src[0])[2 * i];
            uint32_t w1 = ((const uint32_t *)(const void *)src[0])[2 * i + 1];
            for (int k = 1; k < nsrc; k++) {
                uint64_t d;
                int r = cchan_ll16_read_one(&((const cchan_vec16_t *)(const void *)src[k])[i], flag,
                                            ctl, &d);
                if (CCHAN_UNLIKELY(r)) return r;
                w0 = exec_add_w32(w0, (uint32_t)d, dt);
                w1 = exec_add_w32(w1, (uint32_t)(d >> 32), dt);
            }
            ((uint32_t *)(void *)dst)[2 * i] = w0;
            ((uint32_t *)(void *)dst)[2 * i + 1] = w1;
        }
        return CCHAN_OK;
    }
    uint64_t n = bytes / 4;
    for (uint64_t i = tid; i < n; i += nthreads) {
        uint32_t w = ((const uint32_t *)(const void *)src[0])[i];
        for (int k = 1; k < nsrc; k++) {
            uint32_t d;
            int r =
                cchan_ll8_read_one(&((const cchan_vec8_t *)(const void *)src[k])[i], flag, ctl, &d);
            if (CCHAN_UNLIKELY(r)) return r;
            w = exec_add_w32(w, d, dt);
        }
        ((uint32_t *)(void *)dst)[i] = w;
    }
    return CCHAN_OK;
}

/* ------------------------------------------------------------------ addressing */

/* Offset of ref chunk k, byte `in` of the chunk (payload bytes), in its buffer. */
CCHAN_DEVICE_INLINE uint64_t exec_ref_off(const exec_kargs_t *a, const exec_ref_t *r, uint64_t k,
                                          uint64_t in, int packet, uint64_t half) {
    uint64_t c = (uint64_t)r->chunk + k * (uint64_t)r->stride;
    if (r->buf == EXEC_BUF_SCRATCH) return half + c * a->scratch_stride + (packet ? 2 * in : in);
    return c * a->chunk_bytes + in;
}

CCHAN_DEVICE_INLINE uint8_t *exec_ref_ptr(const exec_kargs_t *a, const exec_bind_t *b,
                                          const exec_ref_t *r, uint64_t k, uint64_t in, int packet,
                                          uint64_t half) {
    uint8_t *base = r->ch < 0 ? b->buf[r->buf] : b->ch[r->ch].remote[r->buf];
    return base + exec_ref_off(a, r, k, in, packet, half);
}

/* ------------------------------------------------------------------ port channels
 * One plan port channel is one cchan port channel per (local buffer, peer buffer) pair its puts
 * use (a cchan port channel moves between two registrations), plus an anchor channel built once
 * per executor. Only the anchor signals: a proxied semaphore has one writer (the proxy stores its
 * channel's count), so a signal first flushes every sub-channel with puts since the last signal,
 * then signals on the anchor. Only thread 0 of the block runs port operations (one block per
 * channel side), so this bookkeeping is thread 0's. */
typedef struct exec_port_state {
    uint16_t unsig[EXEC_MAX_CHANNELS];   /* subs (bit = pair) with puts since the last signal */
    uint16_t unflush[EXEC_MAX_CHANNELS]; /* subs with puts since the last flush */
} exec_port_state_t;

CCHAN_DEVICE_INLINE int exec_port_flush_mask(const exec_bind_t *b, const exec_chan_rt_t *c,
                                             uint32_t mask) {
    for (int pr = 0; pr < 9; pr++)
        if (mask & (1u << pr)) {
            int r = cchan_port_channel_flush(&b->ports[c->port[pr]]);
            if (r) return r;
        }
    return CCHAN_OK;
}

CCHAN_DEVICE_INLINE int exec_port_signal(const exec_bind_t *b, int ch, exec_port_state_t *ps) {
    const exec_chan_rt_t *c = &b->ch[ch];
    int r = exec_port_flush_mask(b, c, ps->unsig[ch]);
    if (r) return r;
    ps->unflush[ch] &= (uint16_t)~ps->unsig[ch];
    ps->unsig[ch] = 0;
    return cchan_port_channel_signal(&b->ports[c->anchor]);
}

CCHAN_DEVICE_INLINE int exec_port_flush(const exec_bind_t *b, int ch, exec_port_state_t *ps) {
    int r = exec_port_flush_mask(b, &b->ch[ch], ps->unflush[ch]);
    ps->unflush[ch] = 0;
    return r;
}

CCHAN_DEVICE_INLINE int exec_port_wait(const exec_bind_t *b, int ch) {
    /* every cchan port channel of one semaphore shares its expected count */
    return cchan_port_channel_wait(&b->ports[b->ch[ch].anchor]);
}

/* ------------------------------------------------------------------ one op */

CCHAN_DEVICE_INLINE int exec_data_op(const exec_kargs_t *a, const exec_bind_t *b,
                                     const exec_op_t *o, const exec_ref_t *refs, uint64_t s0,
                                     uint64_t seg, uint64_t half, uint32_t flag,
                                     exec_port_state_t *ps, uint32_t tid, uint32_t nthreads) {
    uint64_t total = (uint64_t)refs[0].count * seg;
    uint64_t p0 = 0, p1 = total;
    if (o->tbg_size > 1) {
        uint64_t part = (total + o->tbg_size - 1) / o->tbg_size;
        part = (part + a->align - 1) / a->align * a->align;
        p0 = (uint64_t)o->tbg_index * part;
        if (p0 > total) p0 = total;
        p1 = p0 + part < total ? p0 + part : total;
    }
    const exec_ref_t *dref = &refs[o->nsrc];
    int port = o->ch >= 0 && b->ch[o->ch].type == 1u;
    for (uint64_t x = p0; x < p1;) {
        uint64_t k = x / seg;
        uint64_t in = x - k * seg;
        uint64_t end = (k + 1) * seg < p1 ? (k + 1) * seg : p1;
        uint64_t len = end - x;
        in += s0;
        int r = CCHAN_OK;
        switch (o->op) {
        case EXEC_OP_PUT:
        case EXEC_OP_PUT_SIGNAL:
        case EXEC_OP_PUT_SIGNAL_FLUSH:
            if (port) {
                if (tid == 0) {
                    int pr = refs[0].buf * 3 + dref->buf;
                    const exec_chan_rt_t *c = &b->ch[o->ch];
                    r = cchan_port_channel_put(
                        &b->ports[c->port[pr]],
                        b->port_off[dref->buf] + exec_ref_off(a, dref, k, in, 0, half),
                        b->port_off[refs[0].buf] + exec_ref_off(a, &refs[0], k, in, 0, half), len);
                    ps->unsig[o->ch] |= (uint16_t)(1u << pr);
                    ps->unflush[o->ch] |= (uint16_t)(1u << pr);
                }
                break;
            }
            /* a memory channel's put is a copy into the peer's mapping */
            cchan_copy(exec_ref_ptr(a, b, dref, k, in, 0, half),
                       exec_ref_ptr(a, b, &refs[0], k, in, 0, half), len, tid, nthreads);
            break;
        case EXEC_OP_GET:
        case EXEC_OP_COPY:
            cchan_copy(exec_ref_ptr(a, b, dref, k, in, 0, half),
                       exec_ref_ptr(a, b, &refs[0], k, in, 0, half), len, tid, nthreads);
            break;
        case EXEC_OP_PUT_PACKETS: {
            uint8_t *d = exec_ref_ptr(a, b, dref, k, in, 1, half);
            const uint8_t *s = exec_ref_ptr(a, b, &refs[0], k, in, 0, half);
            if (o->proto == EXEC_PROTO_LL16)
                cchan_ll16_put((cchan_vec16_t *)(void *)d, s, len, flag, tid, nthreads);
            else
                cchan_ll8_put((cchan_vec8_t *)(void *)d, s, len, flag, tid, nthreads);
            break;
        }
        case EXEC_OP_READ_PACKETS: {
            const uint8_t *s = exec_ref_ptr(a, b, &refs[0], k, in, 1, half);
            uint8_t *d = exec_ref_ptr(a, b, dref, k, in, 0, half);
            if (o->proto == EXEC_PROTO_LL16)
                r = cchan_ll16_read((const cchan_vec16_t *)(const void *)s, d, len, flag, tid,
                                    nthreads, &b->ctl);
            else
                r = cchan_ll8_read((const cchan_vec8_t *)(const void *)s, d, len, flag, tid,
                                   nthreads, &b->ctl);
            break;
        }
        case EXEC_OP_REDUCE_PACKETS:
        case EXEC_OP_REDUCE:
        case EXEC_OP_REDUCE_PUT: {
            const uint8_t *srcs[EXEC_MAX_SRCS];
            int pk = o->op == EXEC_OP_REDUCE_PACKETS;
            for (int j = 0; j < o->nsrc; j++)
                srcs[j] = exec_ref_ptr(a, b, &refs[j], k, in, pk && j > 0, half);
            uint8_t *d = exec_ref_ptr(a, b, dref, k, in, 0, half);
            if (pk)
                r = exec_reduce_packets(d, srcs, o->nsrc, len, o->proto, (int)a->dtype, flag,
                                        &b->ctl, tid, nthreads);
            else
                exec_reduce(d, o->ndst > 1 ? exec_ref_ptr(a, b, dref + 1, k, in, 0, half) : NULL,
                            srcs, o->nsrc, len, (int)a->dtype, tid, nthreads);
            break;
        }
        default: r = CCHAN_ERR_INTERNAL; break;
        }
        if (CCHAN_UNLIKELY(r)) return r;
        x = end;
    }
    return CCHAN_OK;
}

CCHAN_DEVICE_INLINE int exec_run_op(const exec_kargs_t *a, const exec_bind_t *b, const exec_op_t *o,
                                    const exec_ref_t *refs, uint64_t s0, uint64_t seg,
                                    uint64_t half, uint32_t flag, exec_port_state_t *ps,
                                    uint32_t tid, uint32_t nthreads) {
    int r = CCHAN_OK;
    const exec_chan_rt_t *c = o->ch >= 0 ? &b->ch[o->ch] : (const exec_chan_rt_t *)0;
    switch (o->op) {
    case EXEC_OP_SIGNAL:
        cchan_block_sync();
        if (tid == 0) {
            if (c->type == 1u)
                r = exec_port_signal(b, o->ch, ps);
            else
                cchan_semaphore_signal(&c->sem);
        }
        return r;
    case EXEC_OP_WAIT:
        if (tid == 0) r = c->type == 1u ? exec_port_wait(b, o->ch) : cchan_semaphore_wait(&c->sem);
        cchan_block_sync();
        return r;
    case EXEC_OP_FLUSH:
        if (c->type == 1u && tid == 0) r = exec_port_flush(b, o->ch, ps);
        return r;
    case EXEC_OP_BARRIER: return cchan_rank_barrier(b->barrier, b->npeers, tid);
    case EXEC_OP_SEM_RELEASE:
        cchan_block_sync();
        if (tid == 0) cchan_red_add_release_sys_u64(&b->lsem[2 * o->sem], 1);
        return CCHAN_OK;
    case EXEC_OP_SEM_ACQUIRE:
        if (tid == 0) {
            uint64_t want = b->lsem[2 * o->sem + 1] + 1;
            b->lsem[2 * o->sem + 1] = want;
            r = cchan_wait_geq_u64(&b->lsem[2 * o->sem], want, &b->ctl, CCHAN_WAIT_SEMAPHORE);
        }
        cchan_block_sync();
        return r;
    case EXEC_OP_SYNC: cchan_block_sync(); return CCHAN_OK;
    case EXEC_OP_LOOP: return CCHAN_OK;
    default: break;
    }
    r = exec_data_op(a, b, o, refs, s0, seg, half, flag, ps, tid, nthreads);
    if (r) return r;
    if (o->op == EXEC_OP_PUT_SIGNAL || o->op == EXEC_OP_PUT_SIGNAL_FLUSH) {
        cchan_block_sync();
        if (tid == 0) {
            if (c->type == 1u) {
                r = exec_port_signal(b, o->ch, ps);
                if (!r && o->op == EXEC_OP_PUT_SIGNAL_FLUSH)
                    r = cchan_port_channel_flush(&b->ports[c->anchor]);
            } else {
                cchan_semaphore_signal(&c->sem);
            }
        }
    }
    return r;
}

/* ------------------------------------------------------------------ one block */

/* Grid block `block` runs plan block block % pblocks of instance block / pblocks: the plan over
 * bytes [inst * inst_bytes, +inst_bytes) of every chunk, with the instance's own channels and
 * semaphores (a->bind[inst]). An op only ever maps chunk offset x to chunk offset x, so cutting
 * every chunk into instances runs the same plan side by side on disjoint data. */
CCHAN_DEVICE_INLINE int exec_block_run(const exec_kargs_t *a, uint32_t block, uint32_t tid,
                                       uint32_t nthreads, uint8_t *smem) {
    uint32_t inst = block / a->pblocks, pb = block - inst * a->pblocks;
    const exec_bind_t *b = &a->bind[inst];
    uint32_t epoch = b->epochs[0];
    int r = CCHAN_OK;
    if (pb < a->nblocks) {
        const exec_block_t *bd = &((const exec_block_t *)(const void *)a->prog)[pb];
        const exec_op_t *ops =
            (const exec_op_t *)(const void *)(a->prog + a->ops_off) + bd->op_first;
        const exec_ref_t *refs =
            (const exec_ref_t *)(const void *)(a->prog + a->refs_off) + bd->ref_first;
        if (a->use_smem && smem) {
            uint32_t ob = bd->nops * (uint32_t)sizeof(exec_op_t);
            uint32_t rb = bd->nrefs * (uint32_t)sizeof(exec_ref_t);
            cchan_copy(smem, ops, ob, tid, nthreads);
            cchan_copy(smem + ob, refs, rb, tid, nthreads);
            cchan_block_sync();
            ops = (const exec_op_t *)(const void *)smem;
            refs = (const exec_ref_t *)(const void *)(smem + ob);
        }
        /* this instance's part of every chunk */
        uint64_t lo = (uint64_t)inst * a->inst_bytes, hi = lo + a->inst_bytes;
        if (lo > a->chunk_bytes) lo = a->chunk_bytes;
        if (hi > a->chunk_bytes) hi = a->chunk_bytes;
        uint64_t iters = a->loop_unit ? (hi - lo + a->loop_unit - 1) / a->loop_unit : 1;
        if (iters == 0) iters = 1;
        uint64_t half = a->scratch_half ? (uint64_t)(epoch & 1u) * a->scratch_half : 0;
        exec_port_state_t ps;
        if (tid == 0)
            for (int i = 0; i < EXEC_MAX_CHANNELS; i++) {
                ps.unsig[i] = ps.unflush[i] = 0;
            }
        for (uint32_t i = 0; i < bd->nops && r == CCHAN_OK; i++) {
            const exec_op_t *o = &ops[i];
            if (o->op != EXEC_OP_LOOP) {
                r = exec_run_op(a, b, o, refs + o->ref, lo, hi - lo, half, epoch, &ps, tid,
                                nthreads);
                continue;
            }
            uint32_t first = i + 1, last = i + o->body;
            for (uint64_t it = 0; it < iters && r == CCHAN_OK; it++) {
                uint64_t s0 = lo + it * a->loop_unit;
                uint64_t s1 = s0 + a->loop_unit < hi ? s0 + a->loop_unit : hi;
                if (s0 > hi) s0 = hi;
                for (uint32_t j = first; j <= last && r == CCHAN_OK; j++)
                    r = exec_run_op(a, b, &ops[j], refs + ops[j].ref, s0, s1 - s0, half, epoch, &ps,
                                    tid, nthreads);
            }
            i = last;
        }
    }
    cchan_block_sync();
    /* Every block has read the epoch once all have arrived here: the last advances it for the
     * next run (which the stream orders after this one). */
    if (tid == 0 && cchan_fetch_add_acq_rel_dev_u32(&b->epochs[1], 1) == a->grid - 1) {
        uint32_t next = epoch + 1;
        b->epochs[1] = 0;
        b->epochs[0] = next ? next : 1u;
    }
    return r;
}

CCHAN_EXTERN_C_END

#endif /* CCHAN_EXEC_INTERP_H */
