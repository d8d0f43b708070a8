/* The proxy's serving loop (src/proxy/proxy.c: take triggers in batches, dispatch, progress the
 * channels with work in flight) over the dma transport (src/proxy/transport_dma.c) and a simulated
 * CUDA runtime (mock_cuda/), many channels at once, without a GPU and without threads: one loop
 * picks at random what happens next, so every interleaving of requests of several channels, batch
 * boundaries, completions retiring in any order across streams, the signal fast path, absorbed
 * completions, event reuse and growth of the completion ring is reached, reproducibly (the seed is
 * printed; CCHAN_TEST_SEED replays one).
 *
 * Requests go through the FIFO as a GPU thread pushes them (the inline device calls; puts of up to
 * 256 B are stored directly, as on the dma transport). After every step, per channel: the signal
 * count and flush count only grow; signal s is delivered only after every put issued before it has
 * landed; flush f only after every put and signal before it. At the end every request has
 * completed: each channel's counter equals its signals and flush_done its flushes. A completion
 * that is lost anywhere between the FIFO and the transport fails the final check, naming the
 * channel and the counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define DMA_STAGING_BYTES 64u /* same-GPU channels copy in pieces of 64 B */
#include "transport_dma.c"
/* The serving loop itself: its static functions are called one step at a time below. */
#include "proxy.c"

#define PM_CHANNELS 24
#define PM_SLOT 512u /* each put gets a slot of its own, so puts never overlap */
#define PM_SLOTS 1024u
#define PM_FIFO_SLOTS 64u
#define PM_STEPS 60000

typedef struct pm_channel {
    cchani_port_channel_t *ch;
    cchan_port_channel_t h; /* device handle */
    uint8_t *src, *dst;
    uint64_t target; /* the peer's inbound counter */
    uint32_t puts;   /* puts issued */
    uint64_t signals, flushes;
    uint32_t puts_before_signal[PM_SLOTS * 2];
    uint32_t puts_before_flush[PM_SLOTS * 2];
    uint64_t signals_before_flush[PM_SLOTS * 2];
    uint64_t seen_target, seen_flush;
    uint32_t verified; /* puts seen landed (each has its own slot: it stays landed) */
    int whole;         /* every put fills its slot: consecutive puts are contiguous and join */
} pm_channel_t;

static uint64_t pm_seed;
static uint64_t pm_rand(void) {
    pm_seed ^= pm_seed << 13;
    pm_seed ^= pm_seed >> 7;
    pm_seed ^= pm_seed << 17;
    return pm_seed;
}

static cudaStream_t pm_stream(const pm_channel_t *c) {
    return ((const dma_channel_t *)c->ch->transport)->stream;
}

static void pm_open(cchan_proxy_t *p, pm_channel_t *c, uint32_t id, int same_gpu) {
    c->src = calloc(PM_SLOTS, PM_SLOT);
    c->dst = calloc(PM_SLOTS, PM_SLOT);
    assert_non_null(c->src);
    assert_non_null(c->dst);
    for (size_t i = 0; i < (size_t)PM_SLOTS * PM_SLOT; i++)
        c->src[i] = (uint8_t)(i * 131 + id * 7 + i / PM_SLOT + 1);
    cchani_port_channel_t *ch = calloc(1, sizeof *ch);
    assert_non_null(ch);
    ch->ops = &cchani_transport_dma;
    ch->comm = p->comm;
    ch->id = id;
    ch->peer = 1;
    ch->src = c->src;
    ch->src_bytes = (uint64_t)PM_SLOTS * PM_SLOT;
    ch->dst = c->dst;
    ch->dst_bytes = (uint64_t)PM_SLOTS * PM_SLOT;
    ch->signal_target = &c->target;
    ch->flush_done = &p->counters[PROXY_CACHE_WORDS + id];
    ch->same_gpu = same_gpu; /* read at open: same-GPU channels stage */
    assert_int_equal(ch->ops->open(ch), 0);
    __atomic_store_n(&p->channels[id], ch, __ATOMIC_RELEASE);
    p->nchannels = id + 1;
    c->ch = ch;
    cchan_semaphore_t sem;
    memset(&sem, 0, sizeof sem);
    port_channel_handle(p, ch, &sem, 256, &c->h);
}

/* Size of put k: 1 B to a whole slot, so that some are direct (<= 256 B) and some proxied; on a
 * `whole` channel always the slot, so that puts back to back in the FIFO join (proxy_join_puts). */
static uint64_t pm_bytes(const pm_channel_t *c, uint32_t k) {
    return c->whole ? PM_SLOT : 1 + (k * 2654435761u) % PM_SLOT;
}

static int pm_landed(const pm_channel_t *c, uint32_t k) {
    return memcmp(c->dst + (size_t)k * PM_SLOT, c->src + (size_t)k * PM_SLOT, pm_bytes(c, k)) == 0;
}

/* The "GPU thread" of channel c issues a request, as the device calls do. */
static void pm_request(pm_channel_t *c) {
    const cchan_port_channel_t *h = &c->h;
    unsigned what = (unsigned)(pm_rand() % 10);
    if (c->puts + 1 >= PM_SLOTS) what = 9; /* out of slots: only flushes from here */
    uint64_t off = (uint64_t)c->puts * PM_SLOT;
    if (what < 4) {
        assert_int_equal(cchan_port_channel_put(h, off, off, pm_bytes(c, c->puts)), 0);
        c->puts++;
    } else if (what < 6) {
        assert_int_equal(cchan_port_channel_put_signal(h, off, off, pm_bytes(c, c->puts)), 0);
        c->puts++;
        c->puts_before_signal[++c->signals] = c->puts;
    } else if (what < 7) {
        assert_int_equal(cchan_port_channel_push(h, CCHAN_TRIGGER_SIGNAL, 0, 0, 0), 0);
        c->puts_before_signal[++c->signals] = c->puts;
    } else if (what < 8) {
        assert_int_equal(cchan_port_channel_put_typed(h, off, off, pm_bytes(c, c->puts),
                                                      CCHAN_TRIGGER_SIGNAL | CCHAN_TRIGGER_FLUSH),
                         0);
        c->puts++;
        c->puts_before_signal[++c->signals] = c->puts;
        c->flushes++;
        c->puts_before_flush[c->flushes] = c->puts;
        c->signals_before_flush[c->flushes] = c->signals;
    } else {
        assert_int_equal(cchan_port_channel_push(h, CCHAN_TRIGGER_FLUSH, 0, 0, 0), 0);
        c->flushes++;
        c->puts_before_flush[c->flushes] = c->puts;
        c->signals_before_flush[c->flushes] = c->signals;
    }
}

static void pm_check(const cchan_proxy_t *p, pm_channel_t *c) {
    uint64_t t = __atomic_load_n(&c->target, __ATOMIC_ACQUIRE);
    uint64_t f = __atomic_load_n(&p->counters[PROXY_CACHE_WORDS + c->ch->id], __ATOMIC_ACQUIRE);
    if (t < c->seen_target || f < c->seen_flush)
        fail_msg("channel %u: a counter went back: signal %llu -> %llu, flush %llu -> %llu",
                 c->ch->id, (unsigned long long)c->seen_target, (unsigned long long)t,
                 (unsigned long long)c->seen_flush, (unsigned long long)f);
    c->seen_target = t;
    c->seen_flush = f;
    uint32_t must = t ? c->puts_before_signal[t] : 0;
    if (f && c->puts_before_flush[f] > must) must = c->puts_before_flush[f];
    for (; c->verified < must; c->verified++)
        if (!pm_landed(c, c->verified))
            fail_msg("channel %u: put %u not landed, yet signal %llu / flush %llu delivered",
                     c->ch->id, c->verified, (unsigned long long)t, (unsigned long long)f);
    if (f && t < c->signals_before_flush[f])
        fail_msg("channel %u: flush %llu delivered before signal %llu", c->ch->id,
                 (unsigned long long)f, (unsigned long long)c->signals_before_flush[f]);
}

static void test_channels_interleaved(void **state) {
    (void)state;
    const char *env = getenv("CCHAN_TEST_SEED");
    static uint64_t run;
    pm_seed = env ? strtoull(env, NULL, 0) : 0x9E3779B97F4A7C15ull * ++run + 1;
    print_message("seed %#llx\n", (unsigned long long)pm_seed);
    memset(&mock_cuda, 0, sizeof mock_cuda);
    static cchan_comm_t comm; /* host platform: device scopes and host-mapped memory are plain */
    memset(&comm, 0, sizeof comm);
    comm.platform = CCHAN_PLATFORM_HOST;
    comm.device = -1;
    cchan_proxy_t *p;
    cchan_proxy_config_t cfg = CCHAN_PROXY_CONFIG_INIT;
    cfg.fifo_slots = PM_FIFO_SLOTS;
    assert_int_equal(cchan_proxy_create(&comm, &cfg, &p), 0);
    static pm_channel_t chans[PM_CHANNELS];
    memset(chans, 0, sizeof chans);
    for (uint32_t i = 0; i < PM_CHANNELS; i++) {
        /* not on staged channels: a joined put there is many 64-B pieces, past the mock's queue */
        chans[i].whole = i % 3 == 1 && i % 4 != 3;
        pm_open(p, &chans[i], i, i % 4 == 3);
    }

    for (int step = 0; step < PM_STEPS; step++) {
        unsigned what = (unsigned)(pm_rand() % 16);
        pm_channel_t *c = &chans[pm_rand() % PM_CHANNELS];
        if (what < 6) {
            /* A request, if the ring has room (a full ring would make the pusher wait). */
            if (*p->fifo.head - p->tail < PM_FIFO_SLOTS) pm_request(c);
        } else if (what < 8) {
            proxy_take_triggers(p);
        } else if (what < 10) {
            if (p->nactive) proxy_progress(p);
        } else {
            mock_gpu_step(pm_stream(c), (unsigned)(pm_rand() % 6));
        }
        for (uint32_t i = 0; i < PM_CHANNELS; i++) pm_check(p, &chans[i]);
    }
    /* Drain: the GPU finishes, the proxy takes and completes everything. */
    for (int round = 0; round < 1000; round++) {
        for (uint32_t i = 0; i < PM_CHANNELS; i++)
            mock_gpu_step(pm_stream(&chans[i]), MOCK_MAX_OPS);
        uint32_t taken = proxy_take_triggers(p);
        uint32_t busy = p->nactive ? proxy_progress(p) : 0;
        if (!taken && !busy && *p->fifo.head == p->tail) break;
    }
    uint64_t puts = 0, signals = 0, flushes = 0, joined = 0;
    for (uint32_t i = 0; i < PM_CHANNELS; i++) {
        pm_channel_t *c = &chans[i];
        pm_check(p, c);
        joined += c->ch->counters.joined;
        uint64_t f = p->counters[PROXY_CACHE_WORDS + i];
        if (c->target != c->signals || f != c->flushes)
            fail_msg("channel %u: signals delivered %llu of %llu, flushes completed %llu of %llu",
                     i, (unsigned long long)c->target, (unsigned long long)c->signals,
                     (unsigned long long)f, (unsigned long long)c->flushes);
        for (uint32_t k = 0; k < c->puts; k++) assert_true(pm_landed(c, k));
        puts += c->puts;
        signals += c->signals;
        flushes += c->flushes;
    }
    assert_int_equal(p->errors, 0);
    print_message("%llu puts (%llu joined to an earlier one), %llu signals, %llu flushes over %d "
                  "channels; %u events recorded, %u copies\n",
                  (unsigned long long)puts, (unsigned long long)joined, (unsigned long long)signals,
                  (unsigned long long)flushes, PM_CHANNELS, mock_cuda.records, mock_cuda.copies);
    assert_true(joined > 0); /* the walk reached the joining of contiguous puts */
    assert_int_equal(cchan_proxy_destroy(p), 0);
    for (uint32_t i = 0; i < PM_CHANNELS; i++) {
        free(chans[i].src);
        free(chans[i].dst);
    }
    assert_int_equal(mock_cuda.live_streams, 0);
    assert_int_equal(mock_cuda.live_events, 0);
}

/* Contiguous puts already in the FIFO become one copy; a signal rides on the last one; a put that
 * does not continue the run, one out of range, and one of another channel each stay apart. */
static void test_contiguous_puts_join(void **state) {
    (void)state;
    memset(&mock_cuda, 0, sizeof mock_cuda);
    static cchan_comm_t comm;
    memset(&comm, 0, sizeof comm);
    comm.platform = CCHAN_PLATFORM_HOST;
    comm.device = -1;
    cchan_proxy_t *p;
    assert_int_equal(cchan_proxy_create(&comm, NULL, &p), 0);
    static pm_channel_t chans[2];
    memset(chans, 0, sizeof chans);
    pm_open(p, &chans[0], 0, 0);
    pm_open(p, &chans[1], 1, 0);
    const cchan_port_channel_t *h = &chans[0].h;
    const uint64_t n = 300; /* above the direct-store limit: every put goes to the proxy */
    for (uint64_t k = 0; k < 5; k++)
        assert_int_equal(cchan_port_channel_put(h, k * n, k * n, n), 0);
    assert_int_equal(cchan_port_channel_put_signal(h, 5 * n, 5 * n, n), 0);    /* joins, ends */
    assert_int_equal(cchan_port_channel_put(h, 6 * n, 6 * n, n), 0);           /* a new run */
    assert_int_equal(cchan_port_channel_put(&chans[1].h, 7 * n, 7 * n, n), 0); /* other channel */
    assert_int_equal(cchan_port_channel_put(h, 7 * n, 7 * n, n), 0);           /* a new run */
    const uint64_t size = (uint64_t)PM_SLOTS * PM_SLOT;                        /* out of range: */
    assert_int_equal(cchan_port_channel_push(h, CCHAN_TRIGGER_PUT, 8 * n, 8 * n, size), 0);
    assert_int_equal(proxy_take_triggers(p), 10);
    assert_int_equal(chans[0].ch->counters.joined, 5);
    assert_int_equal(chans[0].ch->counters.puts, 3);
    assert_int_equal(chans[0].ch->counters.put_bytes, 8 * n);
    assert_int_equal(chans[0].ch->counters.rejected, 1);
    assert_int_equal(chans[1].ch->counters.puts, 1);
    assert_int_equal(mock_cuda.copies, 4);
    for (int round = 0; round < 100 && (p->nactive || chans[0].target == 0); round++) {
        mock_gpu_step(pm_stream(&chans[0]), MOCK_MAX_OPS);
        mock_gpu_step(pm_stream(&chans[1]), MOCK_MAX_OPS);
        if (p->nactive) proxy_progress(p);
    }
    assert_int_equal(chans[0].target, 1);
    assert_memory_equal(chans[0].dst, chans[0].src, 8 * n);
    assert_memory_equal(chans[1].dst + 7 * n, chans[1].src + 7 * n, n);
    assert_int_equal(p->errors, 1); /* the out-of-range put, dropped alone */
    assert_int_equal(cchan_proxy_destroy(p), 0);
    for (int i = 0; i < 2; i++) {
        free(chans[i].src);
        free(chans[i].dst);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_channels_interleaved),
        cmocka_unit_test(test_channels_interleaved),
        cmocka_unit_test(test_channels_interleaved),
        cmocka_unit_test(test_contiguous_puts_join),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
