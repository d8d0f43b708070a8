/* The dma transport's completion logic (src/proxy/transport_dma.c) against a simulated CUDA stream
 * (mock_cuda/cuda_runtime_api.h), so it runs in every build, without a GPU: the test retires the
 * stream's copies and event records one by one and checks, after each poll, that a signal or flush
 * was delivered exactly when the copies before it had landed, never earlier, in order, and with the
 * fewest host API calls (no event for a put_signal, one per completion that a copy follows). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* The library built with CUDA has the real table under this name. */
#define cchani_transport_dma mock_transport_dma
/* Same-GPU channels stage puts through host memory in pieces of this size (4 slots). */
#define DMA_STAGING_BYTES 64u
#include "transport_dma.c"

#define SLOT 16u
#define NSLOTS 2048u

typedef struct fixture {
    cchan_comm_t comm; /* host platform: the transport's device scopes are no-ops */
    cchani_port_channel_t ch;
    uint64_t target, flush_done;
    cudaStream_t stream;
    int closed;
    uint8_t src[NSLOTS * SLOT];
    uint8_t dst[NSLOTS * SLOT];
} fixture_t;

static int setup_with(void **state, int same_gpu) {
    fixture_t *f = calloc(1, sizeof *f);
    memset(&mock_cuda, 0, sizeof mock_cuda);
    f->comm.platform = CCHAN_PLATFORM_HOST;
    f->comm.device = -1;
    f->ch.ops = &mock_transport_dma;
    f->ch.comm = &f->comm;
    f->ch.id = 3;
    f->ch.peer = 1;
    f->ch.src = f->src;
    f->ch.src_bytes = sizeof f->src;
    f->ch.dst = f->dst;
    f->ch.dst_bytes = sizeof f->dst;
    f->ch.signal_target = &f->target;
    f->ch.flush_done = &f->flush_done;
    f->ch.timing = 1;
    f->ch.same_gpu = same_gpu;
    for (size_t i = 0; i < sizeof f->src; i++) f->src[i] = (uint8_t)(i * 7 + i / SLOT + 1);
    assert_int_equal(f->ch.ops->open(&f->ch), 0);
    f->stream = mock_current_stream;
    *state = f;
    return 0;
}

static int setup(void **state) { return setup_with(state, 0); }
/* Source and destination on one GPU: the channel copies through its host staging buffer. */
static int setup_same_gpu(void **state) { return setup_with(state, 1); }

static int teardown(void **state) {
    fixture_t *f = *state;
    if (!f->closed) f->ch.ops->close(&f->ch);
    assert_int_equal(mock_cuda.live_streams, 0);
    assert_int_equal(mock_cuda.live_events, 0);
    assert_int_equal(mock_cuda.live_host_allocs, 0);
    free(f);
    return 0;
}

/* Request k puts slot k of src into slot k of dst. */
static void put_slot(fixture_t *f, uint32_t k) {
    assert_int_equal(f->ch.ops->put(&f->ch, (uint64_t)k * SLOT, (uint64_t)k * SLOT, SLOT), 0);
}
static void signal(fixture_t *f) {
    assert_int_equal(f->ch.ops->signal(&f->ch, ++f->ch.outbound), 0);
}
static void flush(fixture_t *f) { assert_int_equal(f->ch.ops->flush(&f->ch, ++f->ch.flushes), 0); }
static int progress(fixture_t *f) {
    int r = f->ch.ops->progress(&f->ch);
    assert_true(r >= 0);
    return r;
}
static int landed(const fixture_t *f, uint32_t k) {
    return memcmp(f->dst + (size_t)k * SLOT, f->src + (size_t)k * SLOT, SLOT) == 0;
}

static void test_signal_direct_when_idle(void **state) {
    fixture_t *f = *state;
    signal(f);
    assert_int_equal(f->target, 1);
    assert_int_equal(f->ch.counters.signals_direct, 1);
    assert_int_equal(mock_cuda.records + mock_cuda.copies, 0);
    assert_int_equal(progress(f), 0);
    flush(f);
    assert_int_equal(f->flush_done, 1);
}

/* put_signal: one cudaMemcpyAsync, no event; the count is stored once the stream is idle. */
static void test_put_signal_waits_for_copy(void **state) {
    fixture_t *f = *state;
    put_slot(f, 0);
    signal(f);
    assert_int_equal(f->target, 0);
    assert_int_equal(progress(f), 1);
    assert_int_equal(f->target, 0);
    assert_int_equal(mock_cuda.records, 0);
    assert_int_equal(mock_gpu_step(f->stream, 1), 1);
    assert_int_equal(progress(f), 0);
    assert_int_equal(f->target, 1);
    assert_true(landed(f, 0));
    assert_int_equal(f->ch.counters.signals_direct, 0);
    assert_int_equal(f->ch.counters.stage[CCHANI_STAGE_SIGNAL_DEFERRED].count, 1);
}

/* A copy after a pending signal records that signal's event first, so the second copy does not
 * delay the first signal. */
static void test_event_recorded_before_next_copy(void **state) {
    fixture_t *f = *state;
    put_slot(f, 0);
    signal(f);
    put_slot(f, 1);
    assert_int_equal(mock_cuda.records, 1);
    signal(f);
    assert_int_equal(mock_gpu_step(f->stream, 1), 1); /* copy 0 */
    assert_int_equal(progress(f), 2);
    assert_int_equal(f->target, 0);                   /* its event has not retired yet */
    assert_int_equal(mock_gpu_step(f->stream, 1), 1); /* the event */
    assert_int_equal(progress(f), 1);
    assert_int_equal(f->target, 1);
    assert_false(landed(f, 1));
    assert_int_equal(mock_gpu_step(f->stream, 1), 1); /* copy 1 */
    assert_int_equal(progress(f), 0);
    assert_int_equal(f->target, 2);
}

/* Signals and flushes with no copy between them share one completion; signal stored, then flush. */
static void test_requests_merge(void **state) {
    fixture_t *f = *state;
    put_slot(f, 0);
    signal(f);
    signal(f);
    flush(f);
    signal(f);
    assert_int_equal(progress(f), 1);
    assert_int_equal(f->target + f->flush_done, 0);
    mock_gpu_step(f->stream, MOCK_MAX_OPS);
    assert_int_equal(progress(f), 0);
    assert_int_equal(f->target, 3);
    assert_int_equal(f->flush_done, 1);
    assert_int_equal(mock_cuda.records, 0);
}

static void test_flush_waits_for_copies(void **state) {
    fixture_t *f = *state;
    put_slot(f, 5);
    flush(f);
    assert_int_equal(f->flush_done, 0);
    assert_int_equal(progress(f), 1);
    mock_gpu_step(f->stream, 1);
    assert_int_equal(progress(f), 0);
    assert_int_equal(f->flush_done, 1);
    assert_true(landed(f, 5));
}

/* Copies seen complete by polling leave the channel idle: the next signal takes the fast path. */
static void test_fast_path_after_copies_seen(void **state) {
    fixture_t *f = *state;
    put_slot(f, 0);
    put_slot(f, 1);
    assert_int_equal(progress(f), 1);
    mock_gpu_step(f->stream, 2);
    assert_int_equal(progress(f), 0);
    signal(f);
    assert_int_equal(f->target, 1);
    assert_int_equal(f->ch.counters.signals_direct, 1);
    assert_int_equal(mock_cuda.records, 0);
}

/* More pending completions than the initial ring holds: it grows and keeps their order. */
static void test_ring_grows_in_order(void **state) {
    fixture_t *f = *state;
    const uint32_t n = 5 * DMA_COMPLETIONS_INITIAL;
    for (uint32_t k = 0; k < n; k++) {
        put_slot(f, k);
        signal(f);
    }
    assert_int_equal(mock_cuda.records, n - 1);
    uint64_t last = 0;
    while (mock_gpu_step(f->stream, 1)) {
        progress(f);
        assert_true(f->target >= last);
        for (uint32_t k = 0; k < f->target; k++) assert_true(landed(f, k));
        last = f->target;
    }
    assert_int_equal(progress(f), 0);
    assert_int_equal(f->target, n);
}

static void test_copy_failure_names_channel(void **state) {
    fixture_t *f = *state;
    mock_cuda.fail_next_copy = 1;
    assert_int_equal(f->ch.ops->put(&f->ch, 0, 0, SLOT), CCHAN_ERR_CUDA);
    const char *msg = cchan_last_error();
    assert_non_null(strstr(msg, "channel 3 to peer 1"));
    assert_non_null(strstr(msg, "cudaMemcpyAsync"));
    signal(f); /* nothing was issued: still idle */
    assert_int_equal(f->target, 1);
}

/* Same GPU: a put goes device to host, then host to device, one staging piece at a time; the flush
 * completes only after the last host-to-device copy, and the data arrive whole. */
static void test_same_gpu_stages_through_host(void **state) {
    fixture_t *f = *state;
    const uint64_t bytes = 10 * SLOT; /* 160 B: pieces of 64, 64 and 32 */
    assert_int_equal(f->ch.ops->put(&f->ch, 3 * SLOT, 3 * SLOT, bytes), 0);
    flush(f);
    assert_int_equal(mock_cuda.copies_d2h, 3);
    assert_int_equal(mock_cuda.copies_h2d, 3);
    assert_int_equal(mock_cuda.copies, 6);
    for (int op = 0; op < 5; op++) {
        mock_gpu_step(f->stream, 1);
        assert_int_equal(progress(f), 1);
        assert_int_equal(f->flush_done, 0);
    }
    mock_gpu_step(f->stream, 1);
    assert_int_equal(progress(f), 0);
    assert_int_equal(f->flush_done, 1);
    assert_memory_equal(f->dst + 3 * SLOT, f->src + 3 * SLOT, bytes);
}

/* Another GPU, or host memory (ch->same_gpu clear): one direct copy, no staging. */
static void test_other_gpu_copies_direct(void **state) {
    fixture_t *f = *state;
    assert_int_equal(f->ch.ops->put(&f->ch, 0, 0, 10 * SLOT), 0);
    assert_int_equal(mock_cuda.copies, 1);
    assert_int_equal(mock_cuda.copies_d2h + mock_cuda.copies_h2d, 0);
    assert_int_equal(mock_cuda.live_host_allocs, 0);
}

/* What stop reports for a channel with work left: the pending completion, what it owes and how
 * its last poll went, so that a flush that never completes tells a copy still running from a
 * request that never reached the transport. */
static void test_describe_pending(void **state) {
    fixture_t *f = *state;
    char buf[256];
    f->ch.ops->describe(&f->ch, buf, sizeof buf);
    assert_non_null(strstr(buf, "no completion pending, copies done"));
    put_slot(f, 0);
    signal(f);
    flush(f);
    assert_int_equal(progress(f), 1);
    f->ch.ops->describe(&f->ch, buf, sizeof buf);
    print_message("%s\n", buf);
    assert_non_null(strstr(buf, "1 completion(s) pending; oldest (signal 1, flush 1)"));
    assert_non_null(strstr(buf, "open (cudaStreamQuery)"));
    assert_non_null(strstr(buf, "last poll cudaErrorNotReady"));
    mock_gpu_step(f->stream, 1);
    assert_int_equal(progress(f), 0);
    f->ch.ops->describe(&f->ch, buf, sizeof buf);
    assert_non_null(strstr(buf, "no completion pending"));
}

static void test_close_waits_for_copies(void **state) {
    fixture_t *f = *state;
    put_slot(f, 7);
    f->ch.ops->close(&f->ch);
    f->closed = 1;
    assert_true(landed(f, 7));
}

/* Random requests, random GPU progress, random polls, checked against what was issued: a delivered
 * count v means the puts issued before signal v have landed; a flush count means the puts and the
 * signals issued before that flush are done. */
static void test_random_model(void **state) {
    fixture_t *f = *state;
    static uint32_t puts_before_signal[NSLOTS * 2], puts_before_flush[NSLOTS * 2];
    static uint64_t signals_before_flush[NSLOTS * 2];
    uint32_t puts = 0;
    uint64_t seed = 0x2545f4914f6cdd1dull;
    uint64_t last_target = 0, last_flush = 0;
    for (int step = 0; step < 20000 && puts < NSLOTS; step++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        unsigned action = (unsigned)(seed % 10);
        if (action < 4) {
            put_slot(f, puts++);
        } else if (action < 6) {
            signal(f);
            puts_before_signal[f->ch.outbound] = puts;
        } else if (action == 6) {
            flush(f);
            puts_before_flush[f->ch.flushes] = puts;
            signals_before_flush[f->ch.flushes] = f->ch.outbound;
        } else if (action < 9) {
            mock_gpu_step(f->stream, (unsigned)(seed >> 32) % 8);
        } else {
            progress(f);
            assert_true(f->target >= last_target && f->flush_done >= last_flush);
            last_target = f->target;
            last_flush = f->flush_done;
            uint32_t must = puts_before_signal[f->target];
            if (f->flush_done && puts_before_flush[f->flush_done] > must)
                must = puts_before_flush[f->flush_done];
            for (uint32_t k = 0; k < must; k++) assert_true(landed(f, k));
            if (f->flush_done) assert_true(f->target >= signals_before_flush[f->flush_done]);
        }
    }
    mock_gpu_step(f->stream, MOCK_MAX_OPS);
    assert_int_equal(progress(f), 0);
    assert_int_equal(f->target, f->ch.outbound);
    assert_int_equal(f->flush_done, f->ch.flushes);
    for (uint32_t k = 0; k < puts; k++) assert_true(landed(f, k));
    print_message("random model: %u puts, %llu signals (%llu direct), %llu flushes, %u events\n",
                  puts, (unsigned long long)f->ch.outbound,
                  (unsigned long long)f->ch.counters.signals_direct,
                  (unsigned long long)f->ch.flushes, mock_cuda.records);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_signal_direct_when_idle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_signal_waits_for_copy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_event_recorded_before_next_copy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_requests_merge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flush_waits_for_copies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fast_path_after_copies_seen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ring_grows_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_failure_names_channel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_describe_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_waits_for_copies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_gpu_stages_through_host, setup_same_gpu,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_other_gpu_copies_direct, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_model, setup_same_gpu, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
