/* Every port-channel operation end to end on the host transport, ranks in a ring: each rank sends
 * to the next and receives from the previous one, on one kernel thread per rank.
 *
 * Iteration i sends random data of a size from 1 B to 16 MiB (odd sizes, unaligned offsets on both
 * sides) with one of the send forms below and receives with wait() or poll(). The receiver checks
 * the whole range against the sender's pattern and that the bytes just outside are untouched, so
 * a signal that overtakes its put, a short or long copy, or a wrong offset fails. Each receiver
 * acknowledges on a second semaphore before its buffer is written again.
 *
 * Iterations: CCHAN_TEST_PORT_ITERS (default 160; 48 under sanitizers). */
#include "port_test.h"

#define MAX_XFER (16u << 20)
#define SLACK 64u /* offsets are drawn from [0, SLACK) */
#define BUF_BYTES (MAX_XFER + 2 * SLACK)
#define SEM_DATA 0
#define SEM_ACK 1

enum send_form {
    SEND_PUT_THEN_SIGNAL,  /* put(); signal() */
    SEND_PUT_SIGNAL,       /* put_signal() */
    SEND_PUT_SIGNAL_FLUSH, /* put_signal_flush(), then the source is overwritten */
    SEND_PUT_FLUSH_SIGNAL, /* put(); flush(); source overwritten; signal() */
    SEND_FORMS
};

static const size_t fixed_sizes[] = {
    1,  2,   3,   7,    8,    9,    15,   16,    17,    31,      33,      63,       64,
    65, 255, 257, 1023, 4095, 4096, 4097, 65535, 65537, 1048577, 3145735, MAX_XFER, MAX_XFER - 1};
#define NFIXED (sizeof fixed_sizes / sizeof fixed_sizes[0])

typedef struct transfer {
    size_t bytes;
    size_t src_off, dst_off;
    enum send_form form;
    int poll; /* receiver uses poll() instead of wait() */
} transfer_t;

/* Both sides derive iteration i's parameters from the sender's rank. */
static transfer_t transfer_of(int sender, uint64_t i) {
    uint64_t s = pt_seed(sender, 99, i) | 1;
    transfer_t x;
    x.bytes = i < NFIXED ? fixed_sizes[i] : pt_random_size(&s, MAX_XFER);
    x.src_off = pt_random(&s) % SLACK;
    x.dst_off = pt_random(&s) % SLACK;
    x.form = (enum send_form)(i % SEND_FORMS);
    x.poll = (int)((i / SEND_FORMS) % 2);
    return x;
}

typedef struct ring {
    pt_t *t;
    uint64_t iters;
    const cchan_port_channel_t *data_tx, *data_rx, *ack_tx, *ack_rx;
} ring_t;

static void send_one(const ring_t *r, uint64_t i) {
    transfer_t x = transfer_of(r->t->rank, i);
    uint8_t *src = r->t->src_ptr + x.src_off;
    pt_fill(src, x.bytes, pt_seed(r->t->rank, 0, i));
    const cchan_port_channel_t *ch = r->data_tx;
    switch (x.form) {
    case SEND_PUT_THEN_SIGNAL:
        PT_OK(cchan_port_channel_put(ch, x.dst_off, x.src_off, x.bytes));
        PT_OK(cchan_port_channel_signal(ch));
        break;
    case SEND_PUT_SIGNAL:
        PT_OK(cchan_port_channel_put_signal(ch, x.dst_off, x.src_off, x.bytes));
        break;
    case SEND_PUT_SIGNAL_FLUSH:
        PT_OK(cchan_port_channel_put_signal_flush(ch, x.dst_off, x.src_off, x.bytes));
        memset(src, 0, x.bytes); /* flush returned: the source is ours again */
        break;
    case SEND_PUT_FLUSH_SIGNAL:
        PT_OK(cchan_port_channel_put(ch, x.dst_off, x.src_off, x.bytes));
        PT_OK(cchan_port_channel_flush(ch));
        memset(src, 0, x.bytes);
        PT_OK(cchan_port_channel_signal(ch));
        break;
    default: break;
    }
}

static void wait_signal(const cchan_port_channel_t *ch, int poll) {
    if (!poll) {
        PT_OK(cchan_port_channel_wait(ch));
        return;
    }
    double give_up = pt_now_s() + PT_DEVICE_TIMEOUT_MS / 1000.0;
    uint32_t spins = 0;
    while (!cchan_port_channel_poll(ch)) {
        cchan_spin_pause(++spins);
        PT_CHECK(pt_now_s() < give_up, "poll: no signal");
    }
}

static void receive_one(const ring_t *r, int sender, uint64_t i) {
    transfer_t x = transfer_of(sender, i);
    wait_signal(r->data_rx, x.poll);
    uint8_t *dst = r->t->dst_ptr + x.dst_off;
    size_t bad = pt_mismatch(dst, x.bytes, pt_seed(sender, 0, i));
    PT_CHECK(bad == x.bytes,
             "iteration %llu from rank %d: %zu B at dst offset %zu (form %d): byte "
             "%zu differs",
             (unsigned long long)i, sender, x.bytes, x.dst_off, (int)x.form, bad);
    if (x.dst_off > 0)
        PT_CHECK(dst[-1] == PT_POISON, "iteration %llu: byte before written",
                 (unsigned long long)i);
    PT_CHECK(dst[x.bytes] == PT_POISON, "iteration %llu: byte after %zu B written",
             (unsigned long long)i, x.bytes);
    memset(dst, PT_POISON, x.bytes);
}

static void *kernel(void *arg) {
    const ring_t *r = arg;
    int prev = (r->t->rank + r->t->nranks - 1) % r->t->nranks;
    for (uint64_t i = 0; i < r->iters; i++) {
        send_one(r, i);
        receive_one(r, prev, i);
        PT_OK(cchan_port_channel_signal(r->ack_tx));
        PT_OK(cchan_port_channel_wait(r->ack_rx));
        transfer_t x = transfer_of(r->t->rank, i);
        /* The next fill reuses the source: without a flush in this form, flush now. */
        if (x.form == SEND_PUT_THEN_SIGNAL || x.form == SEND_PUT_SIGNAL)
            PT_OK(cchan_port_channel_flush(r->data_tx));
    }
    return NULL;
}

int main(void) {
    pt_t t;
    pt_init(&t, BUF_BYTES, 2, 512, 1);
    int next = (t.rank + 1) % t.nranks, prev = (t.rank + t.nranks - 1) % t.nranks;
    /* One channel per (peer, semaphore); with two ranks next and prev are the same peer. */
    cchan_port_channel_t ch[PT_MAX_RANKS][2];
    int peers[2] = {next, prev};
    for (int k = 0; k < (next == prev ? 1 : 2); k++) {
        pt_channel(&t, peers[k], SEM_DATA, &ch[peers[k]][SEM_DATA]);
        pt_channel(&t, peers[k], SEM_ACK, &ch[peers[k]][SEM_ACK]);
    }
    ring_t r = {&t,
                pt_env_count("CCHAN_TEST_PORT_ITERS", 160, 48),
                &ch[next][SEM_DATA],
                &ch[prev][SEM_DATA],
                &ch[prev][SEM_ACK],
                &ch[next][SEM_ACK]};
    pt_barrier(&t);
    double t0 = pt_now_s();
    pt_run(1, kernel, &r, sizeof r);
    /* Every signal was consumed exactly once: counter and expected value agree. */
    PT_CHECK(*r.data_rx->expected == r.iters, "expected %llu",
             (unsigned long long)*r.data_rx->expected);
    PT_CHECK(__atomic_load_n(r.data_rx->inbound, __ATOMIC_ACQUIRE) == r.iters, "inbound %llu",
             (unsigned long long)__atomic_load_n(r.data_rx->inbound, __ATOMIC_ACQUIRE));
    if (t.rank == 0)
        printf("port ops: %d ranks, %llu transfers each (1 B .. 16 MiB, %d send forms) in %.2f s\n",
               t.nranks, (unsigned long long)r.iters, SEND_FORMS, pt_now_s() - t0);
    pt_fini(&t);
    return 0;
}
