/* cchan-bench on GPUs: port-lat, port-channel latency (signal, put_signal, flush) against a raw
 * CPU relay and echo in the same run, and the proxy FIFO's request rate against a raw ring. */
#include "bench_gpu.h"

/* ================================================================ kernels */

/* Port-channel ping-pong: put_signal of `bytes` (or a bare signal when bytes == 0), then wait. */
__global__ void k_port_pingpong(const __grid_constant__ cchan_port_channel_t ch, uint64_t bytes,
                                int initiator, int warm, int iters, int rec, uint64_t *ts) {
    for (int i = -warm; i < iters; i++) {
        if (initiator) {
            stamp(true, i, rec);
            if (bytes)
                cchan_port_channel_put_signal(&ch, CB_DST_OFF, CB_SRC_OFF, bytes);
            else
                cchan_port_channel_signal(&ch);
            cchan_port_channel_wait(&ch);
        } else {
            cchan_port_channel_wait(&ch);
            if (bytes)
                cchan_port_channel_put_signal(&ch, CB_DST_OFF, CB_SRC_OFF, bytes);
            else
                cchan_port_channel_signal(&ch);
        }
    }
    stamp_end(initiator, iters, rec);
    cchan_port_channel_flush(&ch);
    stamps_out(initiator, rec, ts);
}

/* Flush latency: one thread, an optional put of `bytes`, then a flush, per iteration (rank 0
 * alone). */
__global__ void k_port_flush(const __grid_constant__ cchan_port_channel_t ch, uint64_t bytes,
                             int warm, int iters, int rec, uint64_t *ts) {
    for (int i = -warm; i < iters; i++) {
        stamp(true, i, rec);
        if (bytes) cchan_port_channel_put(&ch, CB_DST_OFF, CB_SRC_OFF, bytes);
        cchan_port_channel_flush(&ch);
    }
    stamp_end(true, iters, rec);
    stamps_out(true, rec, ts);
}

/* Where an iteration of k_port_flush (echo == 0) or of the CPU echo (echo == 1) spends its time,
 * on rank 0: the thread's own work before its request is on its way (the flush's FIFO push: claim
 * a slot, the fence, the 16-byte store; the echo's release store), then the wait for the answer in
 * host memory (the CPU's part and the round trips over PCIe). Sums of clock64 cycles over `iters`
 * iterations in out[0..1], the loop's globaltimer and clock64 spans in out[2..3]. */
__global__ void k_flush_parts(const __grid_constant__ cchan_port_channel_t ch, uint64_t bytes,
                              int echo, uint64_t *req, const uint64_t *answer, uint64_t base,
                              int warm, int iters, uint64_t *out) {
    uint64_t own = 0, wait = 0, g0 = 0, c0 = 0;
    for (int i = -warm; i < iters; i++) {
        if (i == 0) {
            g0 = cb_gtimer();
            c0 = clock64();
        }
        uint64_t a = clock64(), b;
        if (echo) {
            uint64_t v = base + (uint64_t)(i + warm) + 1;
            raw_st_release_sys(req, v);
            b = clock64();
            while (raw_ld_acquire_sys(answer) < v) {}
        } else {
            if (bytes) cchan_port_channel_put(&ch, CB_DST_OFF, CB_SRC_OFF, bytes);
            uint64_t n = *ch.flush_issued + 1;
            cchan_port_channel_push(&ch, CCHAN_TRIGGER_FLUSH, 0, 0, 0);
            *ch.flush_issued = n;
            b = clock64();
            cchan_port_channel_flush_wait(&ch, n);
        }
        uint64_t c = clock64();
        if (i >= 0) {
            own += b - a;
            wait += c - b;
        }
    }
    out[0] = own;
    out[1] = wait;
    out[2] = cb_gtimer() - g0;
    out[3] = clock64() - c0;
}

/* Baseline for proxied signals: the GPU stores a request count into host-mapped memory, a CPU
 * thread of this rank forwards it into the peer's host-mapped counter, which the peer GPU polls. */
__global__ void k_relay_pingpong(uint64_t *req, const uint64_t *inbound, uint64_t base,
                                 int initiator, int warm, int iters, int rec, uint64_t *ts) {
    for (int i = -warm; i < iters; i++) {
        uint64_t v = base + (uint64_t)(i + warm) + 1;
        if (initiator) {
            stamp(true, i, rec);
            raw_st_release_sys(req, v);
            while (raw_ld_acquire_sys(inbound) < v) {}
        } else {
            while (raw_ld_acquire_sys(inbound) < v) {}
            raw_st_release_sys(req, v);
        }
    }
    stamp_end(initiator, iters, rec);
    stamps_out(initiator, rec, ts);
}

/* FIFO request rate: `count` signals (or 8-byte puts), then one flush. */
__global__ void k_fifo_rate(const __grid_constant__ cchan_port_channel_t ch, int puts,
                            uint64_t count) {
    for (uint64_t k = 0; k < count; k++) {
        if (puts)
            cchan_port_channel_put(&ch, CB_DST_OFF, CB_SRC_OFF, 8);
        else
            cchan_port_channel_signal(&ch);
    }
    cchan_port_channel_flush(&ch);
}

/* Baseline: the same number of 8-byte entries through a plain ring in host-mapped memory to a CPU
 * thread that only consumes them; ends when the consumer has taken the last one. V says how each
 * entry is published, to measure what the FIFO's push pays for each of its parts: 0 st.release.sys
 * (the baseline), 1 fence.acq_rel.sys then a 16-byte st.relaxed.sys (the FIFO's store), 2 a 16-byte
 * st.release.sys, 3 as 1 after the FIFO's claim of a slot (atomic add on a device word and a
 * relaxed load of another: `dev`). */
template <int V>
__global__ void k_raw_ring(uint64_t *ring, const uint64_t *tail, uint64_t seq0, uint64_t count,
                           uint32_t slots, uint64_t *dev) {
    uint64_t cached = raw_ld_acquire_sys(tail);
    for (uint64_t k = 0; k < count; k++) {
        uint64_t idx = seq0 + k;
        if (V == 3) {
            idx = seq0 + atomicAdd((unsigned long long *)dev, 1ull); /* dev[0] starts at 0 */
            uint64_t c;
            asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(c) : "l"(dev + 1) : "memory");
            if (c) cached = raw_ld_acquire_sys(tail); /* never: dev[1] stays 0 */
        }
        while (idx >= cached + slots) cached = raw_ld_acquire_sys(tail);
        uint64_t *slot = &ring[2 * (idx & (slots - 1))];
        if (V == 0) {
            raw_st_release_sys(slot, idx + 1);
        } else if (V == 2) {
            asm volatile("st.release.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(slot), "l"(idx + 1),
                         "l"(idx + 1)
                         : "memory");
        } else {
            asm volatile("fence.acq_rel.sys;" ::: "memory");
            asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(slot), "l"(idx + 1),
                         "l"(idx + 1)
                         : "memory");
        }
    }
    while (raw_ld_acquire_sys(tail) < seq0 + count) {}
}

/* ================================================================ host helpers */

/* ================================================================ host */

void port_lat_attrs(gpu_t *g, int smem) {
    CK(cudaFuncSetAttribute(k_port_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(k_port_flush, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(k_relay_pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
}

typedef struct relay_arg {
    const uint64_t *req;      /* written by our GPU */
    uint64_t *remote_inbound; /* the peer's counter, mapped here */
    uint64_t last, target;
} relay_arg_t;

static void *relay_main(void *p) {
    relay_arg_t *a = (relay_arg_t *)p;
    while (a->last < a->target) {
        uint64_t v = __atomic_load_n(a->req, __ATOMIC_ACQUIRE);
        if (v > a->last) {
            __atomic_store_n(a->remote_inbound, v, __ATOMIC_RELEASE);
            a->last = v;
        } else {
            cpu_relax();
        }
    }
    return NULL;
}

typedef struct ring_arg {
    const uint64_t *ring;
    uint64_t *tail;
    uint64_t seq0, count;
} ring_arg_t;

static void *ring_main(void *p) {
    ring_arg_t *a = (ring_arg_t *)p;
    for (uint64_t idx = a->seq0; idx < a->seq0 + a->count; idx++) {
        while (__atomic_load_n(&a->ring[2 * (idx & (CB_RING_SLOTS - 1))], __ATOMIC_ACQUIRE) !=
               idx + 1)
            cpu_relax();
        __atomic_store_n(a->tail, idx + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* Requests per second (millions) through one proxy thread: signals or 8-byte puts, then a flush. */
static void fifo_rate(gpu_t *g, int puts, uint64_t count, int reps, cb_stats_t *st,
                      int64_t *errors) {
    memset(st, 0, sizeof *st);
    fill_pingpong(g, 8);
    cb_barrier(g->ctx);
    double *v = (double *)malloc(sizeof(double) * (size_t)reps);
    if (!v) cb_die(g->ctx, "out of memory");
    if (g->rank == 0) {
        k_fifo_rate<<<1, 1, 0, g->s>>>(g->ch.rate_ch, puts, count / 10 + 1); /* warmup */
        CK_LAUNCH();
        gsync(g, "FIFO warmup");
        for (int r = 0; r < reps; r++) {
            CK(cudaEventRecord(g->e0, g->s));
            k_fifo_rate<<<1, 1, 0, g->s>>>(g->ch.rate_ch, puts, count);
            CK_LAUNCH();
            CK(cudaEventRecord(g->e1, g->s));
            gsync(g, "FIFO rate");
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, g->e0, g->e1));
            v[r] = (double)count / ((double)ms * 1e3); /* Mreq/s */
        }
        cb_stats(v, reps, st);
    }
    cb_barrier(g->ctx);
    int64_t mine = -1;
    if (puts && g->rank == 1)
        mine = verify(g, g->d_data + CB_DST_OFF, 8, seed_of(g, 0), CB_SRC_OFF, "FIFO put check");
    *errors = cb_errors_combine(g->ctx, mine);
    free(v);
}

typedef void (*ring_kernel_t)(uint64_t *, const uint64_t *, uint64_t, uint64_t, uint32_t,
                              uint64_t *);
static const ring_kernel_t k_ring[4] = {k_raw_ring<0>, k_raw_ring<1>, k_raw_ring<2>, k_raw_ring<3>};

/* Requests per second (millions) through the raw ring publishing as k_raw_ring<variant>. */
static void raw_ring_rate(gpu_t *g, int variant, uint64_t count, int reps, cb_stats_t *st) {
    memset(st, 0, sizeof *st);
    if (g->rank == 0) {
        double *v = (double *)malloc(sizeof(double) * (size_t)reps);
        if (!v) cb_die(g->ctx, "out of memory");
        uint64_t *h_ring = g->h_pinned + 64, *d_ring = g->d_pinned + 64;
        uint64_t *h_tail = g->h_pinned + 32, *d_tail = g->d_pinned + 32;
        uint64_t *dev = g->d_ts; /* the claim counter, then a word that stays 0 */
        for (int r = -1; r < reps; r++) {
            uint64_t n = r < 0 ? count / 10 + 1 : count; /* r = -1: warmup */
            uint64_t words[2] = {0, 0};
            CK(cudaMemcpy(dev, words, sizeof words, cudaMemcpyHostToDevice));
            ring_arg_t a = {h_ring, h_tail, g->ring_seq, n};
            pthread_t th;
            if (pthread_create(&th, NULL, ring_main, &a) != 0)
                cb_die(g->ctx, "pthread_create failed");
            CK(cudaEventRecord(g->e0, g->s));
            k_ring[variant]<<<1, 1, 0, g->s>>>(d_ring, d_tail, g->ring_seq, n, CB_RING_SLOTS, dev);
            CK_LAUNCH();
            CK(cudaEventRecord(g->e1, g->s));
            gsync(g, "raw ring");
            pthread_join(th, NULL);
            g->ring_seq += n;
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, g->e0, g->e1));
            if (r >= 0) v[r] = (double)n / ((double)ms * 1e3);
        }
        cb_stats(v, reps, st);
        free(v);
    }
    cb_barrier(g->ctx);
}

/* Signal and put_signal ping-pongs against a raw CPU relay (ranks 0 and 1 on two GPUs). */
static void lat_port_pingpong(gpu_t *g, int iters, int warm) {
    cb_ctx_t *ctx = g->ctx;
    char title[512];
    snprintf(title, sizeof title,
             "port-lat: one-way latency (round trip / 2), ns, %d round trips in one kernel "
             "after %d warmup; "
             "one GPU thread each side\n#   baseline: raw CPU relay (GPU stores a count to "
             "host-mapped "
             "memory, a CPU thread forwards it to the peer's host-mapped counter, the peer GPU "
             "polls)\n"
             "#   timer: %s",
             iters, warm, ctx->timer);
    cb_lat_header(ctx, title, "cchan port channel", "raw CPU relay");
    /* the baseline first: a CPU thread per rank forwards its GPU's requests */
    cb_stats_t relay;
    {
        cchan_semaphore_t sem;
        memset(&sem, 0, sizeof sem);
        relay_arg_t ra;
        memset(&ra, 0, sizeof ra);
        if (in_pair(g)) {
            cb_check(ctx, cchan_sem_set_get(g->ch.psems, g->peer, 2, &sem), "cchan_sem_set_get");
            ra.req = g->h_pinned;
            ra.remote_inbound = cchan_sem_set_remote_inbound(g->ch.psems, g->peer, 2);
            if (!ra.remote_inbound) cb_die(ctx, "cchan_sem_set_remote_inbound returned NULL");
            ra.last = g->relay_count;
            ra.target = g->relay_count + (uint64_t)(warm + iters);
        }
        pthread_t th;
        if (in_pair(g) && pthread_create(&th, NULL, relay_main, &ra) != 0)
            cb_die(ctx, "pthread_create failed");
        uint64_t base = g->relay_count;
        g->relay_count += (uint64_t)(warm + iters);
        pingpong(
            g, 1, iters, 0.5, "raw CPU relay",
            [&](int initiator, int rec, size_t smem) {
                k_relay_pingpong<<<1, 1, smem, g->s>>>(g->d_pinned, sem.inbound, base, initiator,
                                                       warm, iters, rec, g->d_ts);
            },
            &relay);
        if (in_pair(g)) pthread_join(th, NULL);
    }
    cb_row_t sig, put;
    cb_row_init(&sig, "port-lat", "signal-wait", "cpu-relay", "ns", 0, 1, 1);
    cb_row_init(&put, "port-lat", "put-signal-wait", "cpu-relay", "ns", 8, 1, 1);
    sig.base = put.base = relay;
    const cchan_port_channel_t pch = g->peer >= 0 ? g->ch.pch[g->peer] : g->ch.rate_ch;
    pingpong(
        g, 1, iters, 0.5, "port signal ping-pong",
        [&](int initiator, int rec, size_t smem) {
            k_port_pingpong<<<1, 1, smem, g->s>>>(pch, 0, initiator, warm, iters, rec, g->d_ts);
        },
        &sig.value);
    cb_lat_row(ctx, &sig);
    fill_pingpong(g, 8);
    pingpong(
        g, 1, iters, 0.5, "port put_signal ping-pong",
        [&](int initiator, int rec, size_t smem) {
            k_port_pingpong<<<1, 1, smem, g->s>>>(pch, 8, initiator, warm, iters, rec, g->d_ts);
        },
        &put.value);
    put.errors = check_pingpong(g, 8, "port put_signal check");
    cb_lat_row(ctx, &put);
    cb_printf(
        ctx,
        "#   breakdown (one-way medians): CPU relay floor %.0f ns (GPU->host-mapped store, CPU "
        "poll, CPU "
        "store into the peer's host-mapped counter, GPU poll)\n"
        "#     + %.0f ns FIFO trigger and proxy dispatch of a signal (signal - relay)\n"
        "#     + %.0f ns for the 8-byte put ordered before the signal (put_signal - signal)\n"
        "#   means over all round trips: relay %.0f, signal %.0f, put_signal %.0f ns\n",
        relay.median, sig.value.median - relay.median, put.value.median - sig.value.median,
        relay.mean, sig.value.mean, put.value.mean);
}

/* The CPU echo's thread for the next `n` requests of rank 0's GPU (host-mapped words 0 and 8 of
 * h_pinned); *base is the count they continue from. */
static relay_arg_t echo_arg(gpu_t *g, uint64_t n, uint64_t *base) {
    relay_arg_t ra;
    memset(&ra, 0, sizeof ra);
    ra.req = g->h_pinned;
    ra.remote_inbound = g->h_pinned + 8;
    ra.last = *base = g->relay_count;
    ra.target = g->relay_count + n;
    g->relay_count += n;
    return ra;
}

/* Runs k_flush_parts on rank 0 (mode 0: the CPU echo, 1: flush, 2: put 8 B + flush); returns the
 * means per iteration in ns: [0] the thread's own work, [1] the wait for the answer. */
static void flush_parts(gpu_t *g, int mode, int iters, int warm, double ns[2]) {
    ns[0] = ns[1] = 0;
    uint64_t base = 0;
    relay_arg_t ra;
    if (mode == 0) ra = echo_arg(g, (uint64_t)(warm + iters), &base);
    cb_barrier(g->ctx);
    if (g->rank == 0) {
        pthread_t th;
        if (mode == 0 && pthread_create(&th, NULL, relay_main, &ra) != 0)
            cb_die(g->ctx, "pthread_create failed");
        k_flush_parts<<<1, 1, 0, g->s>>>(g->ch.pch[1], mode == 2 ? 8 : 0, mode == 0, g->d_pinned,
                                         g->d_pinned + 8, base, warm, iters, g->d_ts);
        CK_LAUNCH();
        gsync(g, "flush breakdown");
        if (mode == 0) pthread_join(th, NULL);
        uint64_t o[4];
        CK(cudaMemcpy(o, g->d_ts, sizeof o, cudaMemcpyDeviceToHost));
        double ns_per_cycle = o[3] ? (double)o[2] / (double)o[3] : 0;
        for (int k = 0; k < 2; k++) ns[k] = (double)o[k] * ns_per_cycle / iters;
    }
    cb_barrier(g->ctx);
}

/* The flush's stages beside the echo's: what the FIFO push costs the thread over a bare release
 * store, and what the proxy adds to the wait for the answer. */
static void flush_breakdown(gpu_t *g, int iters, int warm) {
    double e[2], f[2], p[2];
    flush_parts(g, 0, iters, warm, e);
    flush_parts(g, 1, iters, warm, f);
    flush_parts(g, 2, iters, warm, p);
    cb_printf(g->ctx,
              "#   breakdown (means, ns): the thread's own work, then the wait for the answer\n"
              "#     raw CPU echo       %7.0f + %7.0f (release store to host memory; poll)\n"
              "#     flush              %7.0f + %7.0f (FIFO push; poll of flush_done)\n"
              "#     put 8 B + flush    %7.0f + %7.0f (stores to the peer and push; poll)\n"
              "#     push over store %+.0f ns, proxy over echo %+.0f ns\n",
              e[0], e[1], f[0], f[1], p[0], p[1], f[0] - e[0], f[1] - e[1]);
}

/* Flush latency (rank 0 alone) against a CPU echo through host-mapped memory. */
static void lat_port_flush(gpu_t *g, int iters, int warm) {
    cb_ctx_t *ctx = g->ctx;
    char title[512];
    snprintf(title, sizeof title,
             "port-lat flush: time per iteration of [put of N bytes] + flush, ns, one GPU thread "
             "on rank 0, %d "
             "iterations after %d warmup\n#   baseline: raw CPU echo (GPU stores a count to "
             "host-mapped memory, a "
             "CPU thread copies it to a host-mapped word the GPU polls)",
             iters, warm);
    cb_lat_header(ctx, title, "cchan put+flush", "raw CPU echo");
    {
        cb_stats_t echo;
        uint64_t base;
        relay_arg_t ra = echo_arg(g, (uint64_t)(warm + iters), &base);
        pthread_t th;
        if (g->rank == 0 && pthread_create(&th, NULL, relay_main, &ra) != 0)
            cb_die(ctx, "pthread_create failed");
        pingpong(
            g, 1, iters, 1.0, "raw CPU echo",
            [&](int initiator, int rec, size_t smem) {
                k_relay_pingpong<<<1, 1, smem, g->s>>>(g->d_pinned, g->d_pinned + 8, base,
                                                       initiator, warm, iters, rec, g->d_ts);
            },
            &echo, true);
        if (g->rank == 0) pthread_join(th, NULL);
        for (int k = 0; k < 2; k++) {
            cb_row_t row;
            cb_row_init(&row, "port-lat", k ? "put8-flush" : "flush", "cpu-echo", "ns", k ? 8 : 0,
                        1, 1);
            row.base = echo;
            fill_pingpong(g, 8);
            const cchan_port_channel_t fch = g->rank == 0 ? g->ch.pch[1] : g->ch.rate_ch;
            pingpong(
                g, 1, iters, 1.0, "port flush",
                [&](int initiator, int rec, size_t smem) {
                    (void)initiator;
                    k_port_flush<<<1, 1, smem, g->s>>>(fch, k ? 8 : 0, warm, iters, rec, g->d_ts);
                },
                &row.value, true);
            if (k) {
                int64_t mine = -1;
                cb_barrier(ctx); /* rank 1 ran nothing: it checks once rank 0's kernel is over */
                if (g->rank == 1)
                    mine = verify(g, g->d_data + CB_DST_OFF, 8, seed_of(g, 0), CB_SRC_OFF,
                                  "flush put check");
                row.errors = cb_errors_combine(ctx, mine);
            }
            cb_lat_row(ctx, &row);
        }
    }
    flush_breakdown(g, iters, warm);
}

/* FIFO request rate (rank 0 alone) against a raw ring. */
static void lat_port_fifo(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    const cb_opts_t *o = &ctx->opt;
    char title[512];
    const uint64_t nsig = 100000, nput = 10000;
    const int reps = cb_opt_int(o->reps, 5);
    snprintf(title, sizeof title,
             "port-lat fifo: requests per second through one proxy thread (one GPU thread pushes N "
             "requests, "
             "then a flush), Mreq/s\n#   vs a raw ring in host-mapped memory drained by a CPU "
             "thread that "
             "does nothing else; median of %d reps",
             reps);
    cb_bw_header(ctx, title, "cchan FIFO", "raw ring", "Mreq/s");
    cb_stats_t ring, var[3];
    raw_ring_rate(g, 0, nsig, reps, &ring);
    for (int k = 0; k < 3; k++) raw_ring_rate(g, k + 1, nsig, reps, &var[k]);
    cb_printf(ctx,
              "#   the ring with the FIFO's parts (medians, Mreq/s): st.release.sys %.3f; "
              "fence.acq_rel.sys + 16-byte st.relaxed.sys %.3f; 16-byte st.release.sys %.3f; "
              "slot claim + fence + 16-byte store %.3f\n",
              ring.median, var[0].median, var[1].median, var[2].median);
    for (int k = 0; k < 2; k++) {
        cb_row_t row;
        cb_row_init(&row, "port-lat", k ? "fifo-put8" : "fifo-signal", "raw-ring", "Mreq/s",
                    k ? 8 : 0, 1, 1);
        fifo_rate(g, k, k ? nput : nsig, reps, &row.value, &row.errors);
        row.base = ring;
        cb_printf(ctx, "#   %s x %llu:\n", k ? "8-byte puts" : "signals",
                  (unsigned long long)(k ? nput : nsig));
        cb_bw_row(ctx, &row);
    }
}

void run_port_lat(gpu_t *g) {
    cb_ctx_t *ctx = g->ctx;
    const cb_opts_t *o = &ctx->opt;
    port_setup(g);
    g->phase++;
    const int iters = cb_opt_int(o->iters, 10000), warm = cb_opt_int(o->warmup, 1000);
    if (g->time_sliced)
        cb_printf(ctx, "#\n# port-lat ping-pongs: skipped: ranks 0 and 1 share one GPU without MPS "
                       "(kernels of two processes do not run at once; start the MPS daemon)\n");
    else
        lat_port_pingpong(g, iters, warm);
    lat_port_flush(g, iters, warm);
    lat_port_fifo(g);
}
