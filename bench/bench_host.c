/* cchan-bench on the host backend: the same channel code (cchan/device.h compiled as C11) run by
 * CPU threads over shared memory between the rank processes, with CPU baselines measured in the
 * same run. It shows the protocols work and what they cost on this machine; it says nothing about
 * GPUs.
 *
 *   mem-bw    cchan_memory_channel_put/get by T CPU threads ("grid" = threads) vs memcpy of
 * contiguous shares by the same T threads, into (from) the peer's shared mapping. mem-lat
 * signal->wait ping-pong vs a raw flag ping-pong (C11 release store / acquire load on a flag in the
 * peer's mapping); LL8/LL16 ping-pongs of 8 B..64 KiB vs raw LL loops. port-bw   port channel (host
 * transport: the proxy thread memcpys) puts then one flush vs memcpy. port-lat
 * put_signal/signal->wait ping-pong vs the raw flag ping-pong; FIFO request rate vs a raw ring
 * drained by a CPU thread. matrix    every ordered pair: memory-channel put and port-channel put vs
 * memcpy. Latency: CLOCK_MONOTONIC per round trip, one-way = round trip / 2.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
#include "bench_pattern.h"
#include "bench_switch.h"
#include "cchan/cchan.h"

#define H_MIB (1ull << 20)
#define H_SRC_OFF 0ull
#define H_DST_OFF (8ull * H_MIB)
#define H_LL_MAX (64ull * 1024)
#define H_FLAG_OFF 0ull
#define H_PKT_OFF (64ull * 1024)
#define H_RING_SLOTS 512u
#define H_MAX_THREADS 64

/* ---------------------------------------------------------------- a team of CPU threads */

typedef void (*team_fn)(void *arg, uint32_t tid, uint32_t nthreads);

typedef struct team {
    int size; /* threads, the caller included */
    pthread_t th[H_MAX_THREADS];
    pthread_barrier_t start, done;
    team_fn fn;
    void *arg;
    int active, quit;
} team_t;

typedef struct team_member {
    team_t *team;
    uint32_t tid;
} team_member_t;

static team_member_t g_members[H_MAX_THREADS];

static void *team_main(void *p) {
    team_member_t *m = (team_member_t *)p;
    team_t *t = m->team;
    for (;;) {
        pthread_barrier_wait(&t->start);
        if (t->quit) return NULL;
        if ((int)m->tid < t->active) t->fn(t->arg, m->tid, (uint32_t)t->active);
        pthread_barrier_wait(&t->done);
    }
}

static int team_start(team_t *t, int size) {
    memset(t, 0, sizeof *t);
    t->size = size;
    if (pthread_barrier_init(&t->start, NULL, (unsigned)size) ||
        pthread_barrier_init(&t->done, NULL, (unsigned)size))
        return -1;
    for (int i = 1; i < size; i++) {
        g_members[i].team = t;
        g_members[i].tid = (uint32_t)i;
        if (pthread_create(&t->th[i], NULL, team_main, &g_members[i]) != 0) return -1;
    }
    return 0;
}

/* Runs fn on threads 0..active-1 (the caller is thread 0) and returns when all are done. */
static void team_run(team_t *t, int active, team_fn fn, void *arg) {
    t->fn = fn;
    t->arg = arg;
    t->active = active;
    pthread_barrier_wait(&t->start);
    fn(arg, 0, (uint32_t)active);
    pthread_barrier_wait(&t->done);
}

static void team_stop(team_t *t) {
    t->quit = 1;
    pthread_barrier_wait(&t->start);
    for (int i = 1; i < t->size; i++) pthread_join(t->th[i], NULL);
    pthread_barrier_destroy(&t->start);
    pthread_barrier_destroy(&t->done);
}

/* ---------------------------------------------------------------- state */

typedef struct host {
    cb_ctx_t *ctx;
    cchan_comm_t *comm;
    int rank, nranks, peer;
    cb_chans_t ch; /* buffers and channels */
    uint8_t *p_data, *p_pkt;
    team_t team;
    uint64_t *ring, ring_tail, ring_seq;
    uint32_t ll_flag;
    uint64_t flag_epoch, row_seq, phase;
} host_t;

static uint32_t hseed(const host_t *h, int rank) {
    return h->ctx->seed + 0x9e3779b9u * (uint32_t)(rank + 1) + 0x632be5abu * (uint32_t)h->phase;
}

static void hfill(uint8_t *p, uint64_t bytes, uint32_t seed) {
    uint32_t *w = (uint32_t *)(void *)p;
    for (uint64_t i = 0; i < (bytes + 3) / 4; i++) w[i] = cb_pattern_word(seed, i);
}

static int64_t hverify(const host_t *h, const uint8_t *p, uint64_t bytes, uint32_t seed,
                       uint64_t src_off, const char *what) {
    int64_t bad = 0;
    uint64_t first = 0;
    for (uint64_t i = 0; i < bytes; i++) {
        if (p[i] != cb_pattern_byte(seed, src_off + i)) {
            if (!bad) first = i;
            bad++;
        }
    }
    if (bad)
        fprintf(
            stderr, "cchan-bench: rank %d: %s, %llu bytes: %lld mismatches, first at byte %llu\n",
            h->rank, what, (unsigned long long)bytes, (long long)bad, (unsigned long long)first);
    return bad;
}

static void spin(uint32_t *it) {
    if (++*it >= 64) sched_yield();
#if defined(__x86_64__) || defined(__i386__)
    else
        __builtin_ia32_pause();
#endif
}

static int64_t combine2(int64_t e1, int64_t e2) { return e1 < 0 ? e2 : (e2 < 0 ? e1 : e1 + e2); }

/* ---------------------------------------------------------------- bandwidth */

enum hbw_kind { H_MC_PUT, H_COPY_WRITE, H_MC_GET, H_COPY_READ, H_PORT_PUT, H_MEMCPY };

typedef struct hbw_arg {
    host_t *h;
    int kind, b, iters;
    uint64_t bytes, chunk;
    int status;
} hbw_arg_t;

static void hbw_fn(void *p, uint32_t tid, uint32_t n) {
    hbw_arg_t *a = (hbw_arg_t *)p;
    const cchan_memory_channel_t *ch = &a->h->ch.mch[a->b];
    /* contiguous shares, 64-byte aligned, for the memcpy baselines */
    uint64_t share = (a->bytes / n + 63) / 64 * 64;
    uint64_t lo = (uint64_t)tid * share, hi = lo + share;
    if (lo > a->bytes) lo = a->bytes;
    if (hi > a->bytes) hi = a->bytes;
    for (int it = 0; it < a->iters; it++) {
        switch (a->kind) {
        case H_MC_PUT: cchan_memory_channel_put(ch, 0, 0, a->bytes, tid, n); break;
        case H_COPY_WRITE: memcpy(ch->remote + lo, ch->local + lo, hi - lo); break;
        case H_MC_GET: cchan_memory_channel_get(ch, 0, 0, a->bytes, tid, n); break;
        case H_COPY_READ: memcpy(ch->local + lo, ch->remote + lo, hi - lo); break;
        case H_PORT_PUT:
            for (uint64_t off = 0; off < a->bytes && !a->status; off += a->chunk) {
                uint64_t len = a->bytes - off < a->chunk ? a->bytes - off : a->chunk;
                a->status = cchan_port_channel_put(&a->h->ch.pch[a->b], off, off, len);
            }
            break;
        case H_MEMCPY: memcpy(ch->remote, ch->local, a->bytes); break;
        }
    }
    if (a->kind == H_PORT_PUT && !a->status)
        a->status = cchan_port_channel_flush(&a->h->ch.pch[a->b]);
}

static void hbw_measure(host_t *h, int kind, int a, int b, uint64_t bytes, int threads,
                        uint64_t chunk, int iters, int warm, int reps, cb_stats_t *st,
                        int64_t *errors) {
    const int me = h->rank;
    const int get = kind == H_MC_GET || kind == H_COPY_READ;
    const int owner = get ? b : a, receiver = get ? a : b;
    const uint32_t seed = hseed(h, owner);
    if (kind == H_PORT_PUT || kind == H_MEMCPY) threads = 1;
    h->row_seq++;
    memset(st, 0, sizeof *st);
    if (me == owner) hfill(h->p_data, bytes, seed);
    if (me == receiver) hfill(h->p_data, bytes, CB_POISON_SEED ^ (uint32_t)h->row_seq);
    cb_barrier(h->ctx);
    hbw_arg_t arg = {h, kind, b, warm > 0 ? warm : 1, bytes, chunk, 0};
    if (me == a) team_run(&h->team, threads, hbw_fn, &arg);
    if (arg.status) cb_check(h->ctx, arg.status, "port channel put/flush");
    cb_barrier(h->ctx);
    int64_t mine = -1;
    if (me == receiver) mine = hverify(h, h->p_data, bytes, seed, 0, "bandwidth check");
    *errors = cb_errors_combine(h->ctx, mine);
    if (me == a) {
        double *v = (double *)malloc(sizeof(double) * (size_t)reps);
        if (!v) cb_die(h->ctx, "out of memory");
        arg.iters = iters;
        for (int r = 0; r < reps; r++) {
            double t0 = cb_now();
            team_run(&h->team, threads, hbw_fn, &arg);
            double s = cb_now() - t0;
            v[r] = (double)bytes * iters / s / 1e9;
        }
        if (arg.status) cb_check(h->ctx, arg.status, "port channel put/flush");
        cb_stats(v, reps, st);
        free(v);
    }
    cb_barrier(h->ctx);
}

static void host_grids(const cb_opts_t *o, int *grids, int *n) {
    if (o->ngrids) {
        *n = 0;
        for (int i = 0; i < o->ngrids; i++)
            grids[(*n)++] = o->grids[i] < H_MAX_THREADS ? o->grids[i] : H_MAX_THREADS;
    } else {
        grids[0] = 1;
        grids[1] = 2;
        *n = 2;
    }
}

static void host_mem_bw(host_t *h) {
    cb_ctx_t *ctx = h->ctx;
    const cb_opts_t *o = &ctx->opt;
    uint64_t sizes[CB_MAX_SIZES];
    int ns = cb_sweep(o, 4096, 16 * H_MIB, 4, 1, h->ch.data_bytes, sizes);
    int grids[CB_MAX_GRIDS], ng;
    host_grids(o, grids, &ng);
    const int iters = cb_opt_int(o->iters, 10), warm = cb_opt_int(o->warmup, 2),
              reps = cb_opt_int(o->reps, 5);
    for (int k = 0; k < 2; k++) {
        h->phase++;
        char title[512];
        snprintf(title, sizeof title,
                 "mem-bw %s (host backend): cchan_memory_channel_%s by CPU threads vs memcpy of "
                 "contiguous "
                 "shares by the same threads, %s the peer's shared mapping; median of %d reps x %d",
                 k ? "get" : "put", k ? "get" : "put", k ? "from" : "into", reps, iters);
        cb_bw_header(ctx, title, k ? "get" : "put", "memcpy", "GB/s");
        for (int gi = 0; gi < ng; gi++) {
            for (int si = 0; si < ns; si++) {
                cb_row_t row;
                cb_row_init(&row, "mem-bw", k ? "get" : "put", "memcpy", "GB/s", sizes[si], 0,
                            grids[gi]);
                int64_t e1, e2;
                hbw_measure(h, k ? H_MC_GET : H_MC_PUT, 0, 1, sizes[si], grids[gi], 0, iters, warm,
                            reps, &row.value, &e1);
                hbw_measure(h, k ? H_COPY_READ : H_COPY_WRITE, 0, 1, sizes[si], grids[gi], 0, iters,
                            warm, reps, &row.base, &e2);
                row.errors = combine2(e1, e2);
                cb_bw_row(ctx, &row);
            }
        }
    }
}

/* ---------------------------------------------------------------- ping-pongs */

/* Round trip i of a ping-pong; returns 0 or a cchan status. */
typedef int (*hpp_fn)(host_t *h, void *arg, int initiator, int i);

static void hpingpong(host_t *h, int iters, int warm, hpp_fn fn, void *arg, cb_stats_t *st) {
    memset(st, 0, sizeof *st);
    cb_barrier(h->ctx);
    if (h->rank >= 2) return;
    const int initiator = h->rank == 0;
    uint64_t *ts = initiator ? (uint64_t *)malloc(sizeof(uint64_t) * (size_t)(iters + 1)) : NULL;
    double *v = initiator ? (double *)malloc(sizeof(double) * (size_t)(iters + 1)) : NULL;
    if (initiator && (!ts || !v)) cb_die(h->ctx, "out of memory");
    for (int i = -warm; i < iters; i++) {
        if (initiator && i >= 0) ts[i] = cb_now_ns();
        int r = fn(h, arg, initiator, i + warm);
        if (r < 0) cb_check(h->ctx, r, "ping-pong");
    }
    if (initiator) {
        ts[iters] = cb_now_ns();
        for (int i = 0; i < iters; i++) v[i] = 0.5 * (double)(ts[i + 1] - ts[i]);
        cb_stats(v, iters, st);
        free(ts);
        free(v);
    }
}

static int pp_sem(host_t *h, void *arg, int initiator, int i) {
    (void)arg;
    (void)i;
    const cchan_memory_channel_t *ch = &h->ch.mch[h->peer];
    if (initiator) {
        cchan_memory_channel_signal(ch);
        return cchan_memory_channel_wait(ch);
    }
    int r = cchan_memory_channel_wait(ch);
    cchan_memory_channel_signal(ch);
    return r;
}

typedef struct flag_arg {
    uint64_t *mine, *peer, base;
} flag_arg_t;

static int pp_flag(host_t *h, void *p, int initiator, int i) {
    (void)h;
    flag_arg_t *a = (flag_arg_t *)p;
    uint64_t v = a->base + (uint64_t)i + 1;
    uint32_t it = 0;
    if (initiator) __atomic_store_n(a->peer, v, __ATOMIC_RELEASE);
    while (__atomic_load_n(a->mine, __ATOMIC_ACQUIRE) < v) spin(&it);
    if (!initiator) __atomic_store_n(a->peer, v, __ATOMIC_RELEASE);
    return 0;
}

typedef struct ll_arg {
    uint64_t bytes;
    uint32_t flag0;
    int proto, raw;
} ll_arg_t;

/* Raw LL loops as the host backend moves packets: 8-byte atomic words, each with its flag. */
static void raw_ll_send(host_t *h, const ll_arg_t *a, uint32_t flag) {
    uint64_t *dst = (uint64_t *)(void *)(h->ch.lch.remote + H_PKT_OFF);
    const uint32_t *src = (const uint32_t *)(const void *)(h->ch.lch.local + H_SRC_OFF);
    uint64_t n = a->proto == 8 ? (a->bytes + 3) / 4 : 2 * ((a->bytes + 7) / 8);
    for (uint64_t i = 0; i < n; i++)
        __atomic_store_n(&dst[i], (uint64_t)src[i] | ((uint64_t)flag << 32), __ATOMIC_RELAXED);
}

static void raw_ll_recv(host_t *h, const ll_arg_t *a, uint32_t flag) {
    const uint64_t *src = (const uint64_t *)(const void *)(h->ch.lch.recv + H_PKT_OFF);
    uint32_t *dst = (uint32_t *)(void *)(h->ch.lch.local + H_DST_OFF);
    uint64_t n = a->proto == 8 ? (a->bytes + 3) / 4 : 2 * ((a->bytes + 7) / 8);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t w;
        uint32_t it = 0;
        while (((w = __atomic_load_n(&src[i], __ATOMIC_RELAXED)) >> 32) != flag) spin(&it);
        dst[i] = (uint32_t)w;
    }
}

static int ll_send(host_t *h, const ll_arg_t *a, uint32_t flag) {
    if (a->raw)
        raw_ll_send(h, a, flag);
    else if (a->proto == 8)
        cchan_memory_channel_put_packets_ll8(&h->ch.lch, H_PKT_OFF, H_SRC_OFF, a->bytes, flag, 0,
                                             1);
    else
        cchan_memory_channel_put_packets_ll16(&h->ch.lch, H_PKT_OFF, H_SRC_OFF, a->bytes, flag, 0,
                                              1);
    return 0;
}

static int ll_recv(host_t *h, const ll_arg_t *a, uint32_t flag) {
    if (a->raw) {
        raw_ll_recv(h, a, flag);
        return 0;
    }
    if (a->proto == 8)
        return cchan_memory_channel_read_packets_ll8(&h->ch.lch, H_PKT_OFF, H_DST_OFF, a->bytes,
                                                     flag, 0, 1);
    return cchan_memory_channel_read_packets_ll16(&h->ch.lch, H_PKT_OFF, H_DST_OFF, a->bytes, flag,
                                                  0, 1);
}

static int pp_ll(host_t *h, void *p, int initiator, int i) {
    const ll_arg_t *a = (const ll_arg_t *)p;
    uint32_t flag = a->flag0 + (uint32_t)i;
    if (initiator) {
        ll_send(h, a, flag);
        return ll_recv(h, a, flag);
    }
    int r = ll_recv(h, a, flag);
    ll_send(h, a, flag);
    return r;
}

static void hfill_pingpong(host_t *h, uint64_t bytes) {
    h->row_seq++;
    if (h->rank < 2) {
        hfill(h->p_data + H_SRC_OFF, bytes, hseed(h, h->rank));
        hfill(h->p_data + H_DST_OFF, bytes, CB_POISON_SEED ^ (uint32_t)h->row_seq);
    }
}

static int64_t hcheck_pingpong(host_t *h, uint64_t bytes, const char *what) {
    int64_t mine = -1;
    if (h->rank < 2)
        mine = hverify(h, h->p_data + H_DST_OFF, bytes, hseed(h, h->peer), H_SRC_OFF, what);
    return cb_errors_combine(h->ctx, mine);
}

static void host_mem_lat(host_t *h) {
    cb_ctx_t *ctx = h->ctx;
    const cb_opts_t *o = &ctx->opt;
    const int iters = cb_opt_int(o->iters, 10000), warm = cb_opt_int(o->warmup, 1000);
    h->phase++;
    char title[512];
    snprintf(title, sizeof title,
             "mem-lat signal->wait (host backend): one-way latency (round trip / 2), ns, %d round "
             "trips after %d "
             "warmup\n#   cchan_memory_channel_signal/wait vs raw flag ping-pong (release store "
             "into the peer's "
             "mapping, acquire load of our own); timer: %s",
             iters, warm, ctx->timer);
    cb_lat_header(ctx, title, "cchan signal->wait", "raw flag");
    cb_row_t row;
    cb_row_init(&row, "mem-lat", "signal-wait", "raw-flag", "ns", 0, 0, 1);
    flag_arg_t fa = {NULL, NULL, h->flag_epoch};
    if (h->rank < 2) {
        fa.mine = (uint64_t *)(void *)(h->p_pkt + H_FLAG_OFF);
        fa.peer =
            (uint64_t *)(void *)((uint8_t *)cchan_mem_ptr(h->ch.peer_pkt[h->peer]) + H_FLAG_OFF);
    }
    h->flag_epoch += (uint64_t)(warm + iters);
    hpingpong(h, iters, warm, pp_flag, &fa, &row.base);
    hpingpong(h, iters, warm, pp_sem, NULL, &row.value);
    cb_lat_row(ctx, &row);

    uint64_t sizes[CB_MAX_SIZES];
    int ns = cb_sweep(o, 8, H_LL_MAX, 2, 1, H_LL_MAX, sizes);
    for (int p = 0; p < 2; p++) {
        snprintf(title, sizeof title,
                 "mem-lat %s (host backend): one-way latency of an LL%s message, ns, one CPU "
                 "thread each side; "
                 "cchan put_packets/read_packets vs raw LL loops; GB/s = bytes / one-way median",
                 p ? "ll16" : "ll8", p ? "16" : "8");
        cb_lat_header(ctx, title, p ? "cchan LL16" : "cchan LL8", p ? "raw LL16" : "raw LL8");
        for (int si = 0; si < ns; si++) {
            cb_row_init(&row, "mem-lat", p ? "ll16" : "ll8", p ? "raw-ll16" : "raw-ll8", "ns",
                        sizes[si], 0, 1);
            int64_t e[2];
            for (int raw = 1; raw >= 0; raw--) {
                hfill_pingpong(h, sizes[si]);
                ll_arg_t la = {sizes[si], h->ll_flag, p ? 16 : 8, raw};
                h->ll_flag += (uint32_t)(warm + iters);
                hpingpong(h, iters, warm, pp_ll, &la, raw ? &row.base : &row.value);
                e[raw] = hcheck_pingpong(h, sizes[si], raw ? "raw LL check" : "cchan LL check");
            }
            row.errors = combine2(e[0], e[1]);
            cb_lat_row(ctx, &row);
        }
    }
}

/* ---------------------------------------------------------------- port channel */

static void host_port_setup(host_t *h) { cb_chans_port(h->ctx, &h->ch, 2); }

static void host_port_bw(host_t *h) {
    cb_ctx_t *ctx = h->ctx;
    const cb_opts_t *o = &ctx->opt;
    host_port_setup(h);
    h->phase++;
    uint64_t sizes[CB_MAX_SIZES];
    int ns = cb_sweep(o, 64 * 1024, 16 * H_MIB, 4, 1, h->ch.data_bytes, sizes);
    const int iters = cb_opt_int(o->iters, 10), warm = cb_opt_int(o->warmup, 2),
              reps = cb_opt_int(o->reps, 5);
    uint64_t chunk = o->chunk_none ? 0 : (o->chunk ? o->chunk : 4 * H_MIB);
    char title[512];
    snprintf(
        title, sizeof title,
        "port-bw put (host backend): one thread pushes %d messages of puts (%s), then one flush; "
        "the proxy "
        "thread copies\n#   vs memcpy by one thread into the peer's mapping; median of %d reps",
        iters, chunk ? "4 MiB pieces or -c" : "one put per message", reps);
    cb_bw_header(ctx, title, "put", "memcpy", "GB/s");
    for (int si = 0; si < ns; si++) {
        cb_row_t row;
        cb_row_init(&row, "port-bw", "put", "memcpy", "GB/s", sizes[si], 0, 1);
        int64_t e1, e2;
        uint64_t c = chunk ? chunk : sizes[si];
        hbw_measure(h, H_PORT_PUT, 0, 1, sizes[si], 1, c, iters, warm, reps, &row.value, &e1);
        hbw_measure(h, H_MEMCPY, 0, 1, sizes[si], 1, c, iters, warm, reps, &row.base, &e2);
        row.errors = combine2(e1, e2);
        cb_bw_row(ctx, &row);
    }
}

typedef struct port_pp_arg {
    uint64_t bytes;
} port_pp_arg_t;

static int pp_port(host_t *h, void *p, int initiator, int i) {
    (void)i;
    const port_pp_arg_t *a = (const port_pp_arg_t *)p;
    const cchan_port_channel_t *ch = &h->ch.pch[h->peer];
    int r = 0;
    if (!initiator) r = cchan_port_channel_wait(ch);
    if (r == 0)
        r = a->bytes ? cchan_port_channel_put_signal(ch, H_DST_OFF, H_SRC_OFF, a->bytes)
                     : cchan_port_channel_signal(ch);
    if (r == 0 && initiator) r = cchan_port_channel_wait(ch);
    return r;
}

typedef struct hring_arg {
    uint64_t *ring, *tail;
    uint64_t seq0, count;
} hring_arg_t;

static void *hring_main(void *p) {
    hring_arg_t *a = (hring_arg_t *)p;
    for (uint64_t idx = a->seq0; idx < a->seq0 + a->count; idx++) {
        uint32_t it = 0;
        while (__atomic_load_n(&a->ring[idx & (H_RING_SLOTS - 1)], __ATOMIC_ACQUIRE) != idx + 1)
            spin(&it);
        __atomic_store_n(a->tail, idx + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static double hraw_ring(host_t *h, uint64_t count) {
    hring_arg_t a = {h->ring, &h->ring_tail, h->ring_seq, count};
    pthread_t th;
    if (pthread_create(&th, NULL, hring_main, &a) != 0) cb_die(h->ctx, "pthread_create failed");
    double t0 = cb_now();
    uint64_t cached = __atomic_load_n(&h->ring_tail, __ATOMIC_ACQUIRE);
    for (uint64_t k = 0; k < count; k++) {
        uint64_t idx = h->ring_seq + k;
        uint32_t it = 0;
        while (idx >= cached + H_RING_SLOTS) {
            cached = __atomic_load_n(&h->ring_tail, __ATOMIC_ACQUIRE);
            spin(&it);
        }
        __atomic_store_n(&h->ring[idx & (H_RING_SLOTS - 1)], idx + 1, __ATOMIC_RELEASE);
    }
    uint32_t it = 0;
    while (__atomic_load_n(&h->ring_tail, __ATOMIC_ACQUIRE) < h->ring_seq + count) spin(&it);
    double s = cb_now() - t0;
    pthread_join(th, NULL);
    h->ring_seq += count;
    return (double)count / s / 1e6;
}

static void host_port_lat(host_t *h) {
    cb_ctx_t *ctx = h->ctx;
    const cb_opts_t *o = &ctx->opt;
    host_port_setup(h);
    h->phase++;
    const int iters = cb_opt_int(o->iters, 2000), warm = cb_opt_int(o->warmup, 200);
    char title[512];
    snprintf(title, sizeof title,
             "port-lat (host backend): one-way latency (round trip / 2), ns, %d round trips after "
             "%d warmup: "
             "GPU-less proxy path\n#   (FIFO -> proxy thread -> memcpy / counter store) vs raw "
             "flag ping-pong "
             "(a direct store, the floor); timer: %s",
             iters, warm, ctx->timer);
    cb_lat_header(ctx, title, "cchan port channel", "raw flag");
    cb_stats_t flag;
    flag_arg_t fa = {NULL, NULL, h->flag_epoch};
    if (h->rank < 2) {
        fa.mine = (uint64_t *)(void *)(h->p_pkt + H_FLAG_OFF);
        fa.peer =
            (uint64_t *)(void *)((uint8_t *)cchan_mem_ptr(h->ch.peer_pkt[h->peer]) + H_FLAG_OFF);
    }
    h->flag_epoch += (uint64_t)(warm + iters);
    hpingpong(h, iters, warm, pp_flag, &fa, &flag);
    for (int k = 0; k < 2; k++) {
        cb_row_t row;
        cb_row_init(&row, "port-lat", k ? "put-signal-wait" : "signal-wait", "raw-flag", "ns",
                    k ? 8 : 0, 0, 1);
        port_pp_arg_t pa = {k ? 8u : 0u};
        if (k) hfill_pingpong(h, 8);
        hpingpong(h, iters, warm, pp_port, &pa, &row.value);
        if (h->rank < 2) cb_check(ctx, cchan_port_channel_flush(&h->ch.pch[h->peer]), "flush");
        if (k) row.errors = hcheck_pingpong(h, 8, "port put_signal check");
        row.base = flag;
        cb_lat_row(ctx, &row);
    }

    const uint64_t count = 20000;
    const int reps = cb_opt_int(o->reps, 5);
    snprintf(title, sizeof title,
             "port-lat fifo (host backend): requests per second through one proxy thread (%llu "
             "signals, then "
             "a flush), Mreq/s; vs a raw ring drained by a CPU thread; median of %d reps",
             (unsigned long long)count, reps);
    cb_bw_header(ctx, title, "cchan FIFO", "raw ring", "Mreq/s");
    cb_row_t row;
    cb_row_init(&row, "port-lat", "fifo-signal", "raw-ring", "Mreq/s", 0, 0, 1);
    cb_barrier(ctx);
    if (h->rank == 0) {
        double v[64], b[64];
        int n = reps < 64 ? reps : 64;
        for (int r = 0; r < n; r++) {
            double t0 = cb_now();
            for (uint64_t k = 0; k < count; k++)
                cb_check(ctx, cchan_port_channel_signal(&h->ch.rate_ch), "signal");
            cb_check(ctx, cchan_port_channel_flush(&h->ch.rate_ch), "flush");
            v[r] = (double)count / (cb_now() - t0) / 1e6;
            b[r] = hraw_ring(h, count);
        }
        cb_stats(v, n, &row.value);
        cb_stats(b, n, &row.base);
    }
    cb_barrier(ctx);
    cb_bw_row(ctx, &row);
}

/* ---------------------------------------------------------------- matrix */

static void host_matrix(host_t *h) {
    cb_ctx_t *ctx = h->ctx;
    const cb_opts_t *o = &ctx->opt;
    host_port_setup(h);
    h->phase++;
    const int n = h->nranks;
    uint64_t bytes = o->matrix_bytes ? o->matrix_bytes : 16 * H_MIB;
    if (bytes > h->ch.data_bytes) bytes = h->ch.data_bytes;
    int grids[CB_MAX_GRIDS], ng;
    host_grids(o, grids, &ng);
    const int threads = grids[ng - 1];
    const int iters = cb_opt_int(o->iters, 10), warm = cb_opt_int(o->warmup, 2),
              reps = cb_opt_int(o->reps, 3);
    static const int kinds[4] = {H_MC_PUT, H_COPY_WRITE, H_PORT_PUT, H_MEMCPY};
    static const char *names[4] = {"memory channel put", "memcpy by the same threads",
                                   "port channel put", "memcpy by one thread"};
    double *m = (double *)calloc((size_t)(4 * n * n), sizeof(double));
    if (!m) cb_die(ctx, "out of memory");
    for (int a = 0; a < n; a++) {
        for (int b = 0; b < n; b++) {
            if (a == b) continue;
            int64_t e[4];
            for (int k = 0; k < 4; k++) {
                cb_stats_t st;
                hbw_measure(h, kinds[k], a, b, bytes, threads, 4 * H_MIB, iters, warm, reps, &st,
                            &e[k]);
                m[k * n * n + a * n + b] = cb_from_rank(ctx, a, st.median);
            }
            for (int k = 0; k < 4; k += 2) {
                cb_row_t row;
                cb_row_init(&row, "matrix", k ? "port-put" : "memory-put", "memcpy", "GB/s", bytes,
                            0, k ? 1 : threads);
                row.src = a;
                row.dst = b;
                row.value.median = row.value.min = row.value.max = row.value.mean =
                    m[k * n * n + a * n + b];
                row.base.median = row.base.min = row.base.max = row.base.mean =
                    m[(k + 1) * n * n + a * n + b];
                row.value.n = row.base.n = reps;
                row.errors = combine2(e[k], e[k + 1]);
                cb_row_record(ctx, &row);
            }
        }
    }
    cb_printf(ctx,
              "#\n# matrix (host backend): put bandwidth, %llu bytes, GB/s (row: source rank, "
              "column: destination)\n",
              (unsigned long long)bytes);
    for (int k = 0; k < 4; k++) {
        if (k < 2)
            cb_printf(ctx, "# %s, %d threads\n#   %6s", names[k], threads, "src\\dst");
        else
            cb_printf(ctx, "# %s\n#   %6s", names[k], "src\\dst");
        for (int j = 0; j < n; j++) cb_printf(ctx, " %9d", j);
        cb_printf(ctx, "\n");
        double sum = 0;
        for (int i = 0; i < n; i++) {
            cb_printf(ctx, "    %6d", i);
            for (int j = 0; j < n; j++) {
                if (i == j)
                    cb_printf(ctx, " %9s", "-");
                else {
                    cb_printf(ctx, " %9.2f", m[k * n * n + i * n + j]);
                    sum += m[k * n * n + i * n + j];
                }
            }
            cb_printf(ctx, "\n");
        }
        cb_printf(ctx, "    SUM %.2f GB/s\n", sum);
    }
    free(m);
}

/* ---------------------------------------------------------------- setup, entry */

int cb_run_host(cb_ctx_t *ctx) {
    host_t hh, *h = &hh;
    memset(h, 0, sizeof *h);
    h->ctx = ctx;
    h->comm = ctx->comm;
    h->rank = ctx->rank;
    h->nranks = ctx->nranks;
    h->peer = h->rank < 2 ? 1 - h->rank : -1;
    h->ll_flag = 1;
    const cb_opts_t *o = &ctx->opt;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(ctx->device, sizeof ctx->device, "host backend, %d ranks on %ld CPUs", ctx->nranks,
             ncpu);
    snprintf(ctx->timer, sizeof ctx->timer, "CLOCK_MONOTONIC per round trip");
    cb_printf(ctx,
              "# backend: host (no GPU figures: CPU threads run cchan's device code over shared "
              "memory; %ld CPUs "
              "for %d ranks%s)\n",
              ncpu, ctx->nranks,
              ncpu < 2L * ctx->nranks ? ", oversubscribed: latencies include scheduling" : "");

    cb_chans_setup(ctx, &h->ch, cb_data_bytes(o, 32 * H_MIB, 16 * H_MIB, 0),
                   H_PKT_OFF + 2 * H_LL_MAX + H_MIB);
    h->p_data = (uint8_t *)cchan_mem_ptr(h->ch.data);
    h->p_pkt = (uint8_t *)cchan_mem_ptr(h->ch.pkt);
    h->ring = (uint64_t *)calloc(H_RING_SLOTS, sizeof(uint64_t));
    if (!h->ring) cb_die(ctx, "out of memory");
    int grids[CB_MAX_GRIDS], ng, tmax = 1;
    host_grids(o, grids, &ng);
    for (int i = 0; i < ng; i++)
        if (grids[i] > tmax) tmax = grids[i];
    if (team_start(&h->team, tmax) != 0) cb_die(ctx, "cannot start %d threads", tmax);
    cb_barrier(ctx);

    if (o->tests & CB_MEM_BW) host_mem_bw(h);
    if (o->tests & CB_MEM_LAT) host_mem_lat(h);
    if (o->tests & CB_PORT_BW) host_port_bw(h);
    if (o->tests & CB_PORT_LAT) host_port_lat(h);
    if (o->tests & CB_MATRIX) host_matrix(h);
    if (o->tests & CB_SWITCH_BW) cb_switch_host(ctx);

    cb_barrier(ctx);
    team_stop(&h->team);
    cb_chans_teardown(ctx, &h->ch);
    free(h->ring);
    return 0;
}
