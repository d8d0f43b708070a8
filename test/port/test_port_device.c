/* Port channel device side (port_channel.h) without a proxy: the triggers each operation pushes
 * (types, offsets past 4 GiB, the split of puts above 1 GiB, fused forms), range errors, and the
 * flush and wait counters. The ring is read back with cchan_fifo_peek as the proxy would. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cchan/port_channel.h"

#define SLOTS 16u
#define GiB (1ull << 30)

typedef struct fixture {
    cchan_trigger_t slots[SLOTS];
    uint64_t head, tail_cache, tail;
    uint64_t inbound, expected, flush_issued, flush_done, dropped, dropped_seen;
    cchan_diag_t diag;
    cchan_port_channel_t ch;
    uint64_t taken; /* consumer index */
} fixture_t;

static int setup(void **state) {
    fixture_t *f = aligned_alloc(16, sizeof *f);
    memset(f, 0, sizeof *f);
    f->ch.fifo.slots = f->slots;
    f->ch.fifo.head = &f->head;
    f->ch.fifo.tail_cache = &f->tail_cache;
    f->ch.fifo.tail = &f->tail;
    f->ch.fifo.size = SLOTS;
    f->ch.id = 4095;
    f->ch.inbound = &f->inbound;
    f->ch.expected = &f->expected;
    f->ch.flush_issued = &f->flush_issued;
    f->ch.flush_done = &f->flush_done;
    f->ch.dropped = &f->dropped;
    f->ch.dropped_seen = &f->dropped_seen;
    /* buffers as large as a trigger can address: the offset limits below are the trigger's */
    f->ch.dst_bytes = CCHAN_TRIGGER_MAX_OFFSET + 1;
    f->ch.src_bytes = CCHAN_TRIGGER_MAX_OFFSET + 1;
    f->ch.ctl.diag = &f->diag;
    f->ch.ctl.timeout_ns = 5ull * 1000000; /* a missing completion fails fast */
    f->ch.ctl.rank = 0;
    f->ch.ctl.peer = 1;
    f->ch.ctl.id = 7;
    *state = f;
    return 0;
}

static int teardown(void **state) {
    free(*state);
    return 0;
}

/* Takes the next trigger as the proxy would and checks every field. */
static void expect_trigger(fixture_t *f, uint32_t type, uint64_t dst, uint64_t src,
                           uint64_t bytes) {
    cchan_trigger_t t = {0, 0};
    assert_int_equal(cchan_fifo_peek(f->slots, SLOTS, f->taken, &t), 1);
    f->taken++;
    cchan_fifo_publish_tail(&f->tail, f->taken);
    cchan_trigger_fields_t d = cchan_trigger_decode(t);
    assert_int_equal(d.type, type);
    assert_int_equal(d.channel, 4095);
    assert_int_equal(d.dst_off, dst);
    assert_int_equal(d.src_off, src);
    assert_int_equal(d.bytes, bytes);
}

static void expect_empty(fixture_t *f) {
    cchan_trigger_t t = {0, 0};
    assert_int_equal(cchan_fifo_peek(f->slots, SLOTS, f->taken, &t), 0);
}

static void test_put_and_signal(void **state) {
    fixture_t *f = *state;
    assert_int_equal(cchan_port_channel_put(&f->ch, 8, 24, 100), 0);
    assert_int_equal(cchan_port_channel_signal(&f->ch), 0);
    assert_int_equal(cchan_port_channel_put_signal(&f->ch, 5 * GiB + 3, 4 * GiB + 1, 7), 0);
    expect_trigger(f, CCHAN_TRIGGER_PUT, 8, 24, 100);
    expect_trigger(f, CCHAN_TRIGGER_SIGNAL, 0, 0, 0);
    expect_trigger(f, CCHAN_TRIGGER_PUT | CCHAN_TRIGGER_SIGNAL, 5 * GiB + 3, 4 * GiB + 1, 7);
    expect_empty(f);
}

/* A zero-byte put pushes nothing; a zero-byte put_signal is a plain signal. */
static void test_zero_bytes(void **state) {
    fixture_t *f = *state;
    assert_int_equal(cchan_port_channel_put(&f->ch, 0, 0, 0), 0);
    expect_empty(f);
    assert_int_equal(cchan_port_channel_put_signal(&f->ch, 64, 64, 0), 0);
    expect_trigger(f, CCHAN_TRIGGER_SIGNAL, 64, 64, 0);
    expect_empty(f);
}

/* 2 GiB + 5 B: chunks of 1 GiB, the signal rides on the last; offsets advance past 4 GiB. */
static void test_large_put_splits(void **state) {
    fixture_t *f = *state;
    const uint64_t bytes = 2 * GiB + 5, dst = 1, src = 3 * GiB;
    assert_int_equal(cchan_port_channel_put_signal(&f->ch, dst, src, bytes), 0);
    expect_trigger(f, CCHAN_TRIGGER_PUT, dst, src, GiB);
    expect_trigger(f, CCHAN_TRIGGER_PUT, dst + GiB, src + GiB, GiB);
    expect_trigger(f, CCHAN_TRIGGER_PUT | CCHAN_TRIGGER_SIGNAL, dst + 2 * GiB, src + 2 * GiB, 5);
    expect_empty(f);
    /* Exactly two chunks: the flags go on the second, no empty third trigger. */
    assert_int_equal(cchan_port_channel_put_signal(&f->ch, 0, 0, 2 * GiB), 0);
    expect_trigger(f, CCHAN_TRIGGER_PUT, 0, 0, GiB);
    expect_trigger(f, CCHAN_TRIGGER_PUT | CCHAN_TRIGGER_SIGNAL, GiB, GiB, GiB);
    expect_empty(f);
}

/* The last byte may sit at 2^40 - 1; one further is a range error recorded in the diagnostic. */
static void test_offset_limits(void **state) {
    fixture_t *f = *state;
    const uint64_t limit = CCHAN_TRIGGER_MAX_OFFSET + 1;
    assert_int_equal(cchan_port_channel_put(&f->ch, limit - 16, limit - 32, 16), 0);
    expect_trigger(f, CCHAN_TRIGGER_PUT, limit - 16, limit - 32, 16);
    assert_int_equal(cchan_port_channel_put(&f->ch, limit - 16, 0, 17), CCHAN_ERR_RANGE);
    assert_int_equal(f->diag.state, 1);
    assert_int_equal(f->diag.kind, CCHAN_FAIL_RANGE);
    assert_int_equal(f->diag.expected, limit);
    assert_int_equal(f->diag.observed, limit + 1);
    assert_int_equal(f->diag.peer, 1);
    assert_int_equal(f->diag.id, 7);
    assert_int_equal(cchan_port_channel_put_signal(&f->ch, 0, limit, 1), CCHAN_ERR_RANGE);
    assert_int_equal(cchan_port_channel_put(&f->ch, UINT64_MAX, 0, 2), CCHAN_ERR_RANGE);
    expect_empty(f);
}

/* flush counts its requests in flush_issued and returns once flush_done reaches the count. */
static void test_flush_counts(void **state) {
    fixture_t *f = *state;
    f->flush_done = 1; /* as if the proxy had completed it */
    assert_int_equal(cchan_port_channel_flush(&f->ch), 0);
    assert_int_equal(f->flush_issued, 1);
    expect_trigger(f, CCHAN_TRIGGER_FLUSH, 0, 0, 0);
    f->flush_done = 2;
    assert_int_equal(cchan_port_channel_put_signal_flush(&f->ch, 16, 32, 48), 0);
    assert_int_equal(f->flush_issued, 2);
    expect_trigger(f, CCHAN_TRIGGER_PUT | CCHAN_TRIGGER_SIGNAL | CCHAN_TRIGGER_FLUSH, 16, 32, 48);
    /* No completion: the wait ends at the deadline and names the flush it waited for. */
    assert_int_equal(cchan_port_channel_flush(&f->ch), CCHAN_ERR_DEVICE_TIMEOUT);
    expect_trigger(f, CCHAN_TRIGGER_FLUSH, 0, 0, 0);
    assert_int_equal(f->diag.kind, CCHAN_WAIT_FLUSH);
    assert_int_equal(f->diag.expected, 3);
    assert_int_equal(f->diag.observed, 2);
    expect_empty(f);
}

/* A put beyond the channel's buffers fails at the call (nothing pushed), naming the limit. */
static void test_buffer_limits(void **state) {
    fixture_t *f = *state;
    f->ch.dst_bytes = 4096;
    f->ch.src_bytes = 8192;
    assert_int_equal(cchan_port_channel_put(&f->ch, 4096 - 16, 0, 16), 0);
    expect_trigger(f, CCHAN_TRIGGER_PUT, 4096 - 16, 0, 16);
    assert_int_equal(cchan_port_channel_put(&f->ch, 3ull << 30, 0, 16), CCHAN_ERR_RANGE);
    assert_int_equal(f->diag.kind, CCHAN_FAIL_RANGE);
    assert_int_equal(f->diag.expected, 4096);
    assert_int_equal(f->diag.observed, (3ull << 30) + 16);
    assert_int_equal(f->diag.status, CCHAN_ERR_RANGE);
    assert_int_equal(cchan_port_channel_put_signal_flush(&f->ch, 4000, 0, 97), CCHAN_ERR_RANGE);
    assert_int_equal(cchan_port_channel_put(&f->ch, 0, 8000, 193), CCHAN_ERR_RANGE);
    assert_int_equal(f->flush_issued, 0); /* a refused put_signal_flush counts no flush */
    expect_empty(f);
}

/* A flush fails with the cause when the proxy dropped requests of the channel since the previous
 * flush, once; the next flush without new drops succeeds. The proxy marks flush_done
 * (CCHAN_PORT_FLUSH_DROPPED) when it drops one: without the mark a flush never reads the dropped
 * word, and the mark is no part of the count. */
static void test_flush_reports_drops(void **state) {
    fixture_t *f = *state;
    const uint64_t mark = CCHAN_PORT_FLUSH_DROPPED;
    f->flush_done = 1;
    f->dropped = ((uint64_t)-CCHAN_ERR_RANGE << CCHAN_PORT_DROPPED_CAUSE_SHIFT) | 2;
    assert_int_equal(cchan_port_channel_flush(&f->ch), 0); /* unmarked: the word is not read */
    f->flush_done = mark | 2;
    assert_int_equal(cchan_port_channel_flush(&f->ch), CCHAN_ERR_RANGE);
    assert_int_equal(f->diag.kind, CCHAN_FAIL_DROPPED);
    assert_int_equal(f->diag.expected, 2);
    assert_int_equal(f->diag.observed, 2);
    assert_int_equal(f->diag.status, CCHAN_ERR_RANGE);
    f->flush_done = mark | 3;
    assert_int_equal(cchan_port_channel_flush(&f->ch), 0);
    f->flush_done = mark | 4;
    f->dropped = ((uint64_t)-CCHAN_ERR_PEER << CCHAN_PORT_DROPPED_CAUSE_SHIFT) | 3;
    assert_int_equal(cchan_port_channel_put_signal_flush(&f->ch, 0, 0, 8), CCHAN_ERR_PEER);
    /* The mark does not complete a flush: the 5th waits for a count of 5 and times out. */
    memset(&f->diag, 0, sizeof f->diag); /* the record keeps the first failure: start afresh */
    assert_int_equal(cchan_port_channel_flush(&f->ch), CCHAN_ERR_DEVICE_TIMEOUT);
    assert_int_equal(f->diag.kind, CCHAN_WAIT_FLUSH);
    assert_int_equal(f->diag.expected, 5);
    assert_int_equal(f->diag.observed, 4);
    for (int i = 0; i < 3; i++) expect_trigger(f, CCHAN_TRIGGER_FLUSH, 0, 0, 0);
    expect_trigger(f, CCHAN_TRIGGER_PUT | CCHAN_TRIGGER_SIGNAL | CCHAN_TRIGGER_FLUSH, 0, 0, 8);
    expect_trigger(f, CCHAN_TRIGGER_FLUSH, 0, 0, 0);
    expect_empty(f);
}

/* wait/poll consume signals from the inbound counter and push no trigger. */
static void test_wait_and_poll(void **state) {
    fixture_t *f = *state;
    assert_int_equal(cchan_port_channel_poll(&f->ch), 0);
    f->inbound = 2;
    assert_int_equal(cchan_port_channel_poll(&f->ch), 1);
    assert_int_equal(cchan_port_channel_wait(&f->ch), 0);
    assert_int_equal(f->expected, 2);
    assert_int_equal(cchan_port_channel_poll(&f->ch), 0);
    assert_int_equal(cchan_port_channel_wait(&f->ch), CCHAN_ERR_DEVICE_TIMEOUT);
    assert_int_equal(f->diag.kind, CCHAN_WAIT_SEMAPHORE);
    assert_int_equal(f->diag.expected, 3);
    assert_int_equal(f->diag.observed, 2);
    expect_empty(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_and_signal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zero_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_put_splits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_offset_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flush_counts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_buffer_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flush_reports_drops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_and_poll, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
