/* A FIFO of 4 slots under a million small requests: the ring is full nearly all the time, so every
 * push takes the slow path of rereading the proxy's tail. Two ranks, both directions at once, a
 * sender and a receiver thread per rank.
 *
 * Request j (repeating cycle of three): put, put_signal, signal; each put copies the 8-byte value
 * v(j) = sender tag | j into dst slot j % SLOTS. When the receiver's s-th wait returns, the puts up
 * to the one that came with that signal must be visible: each of their slots holds a value of that
 * put or of a later put to the same slot. At the end the slots hold exactly the last values and the
 * counter equals the number of signals.
 *
 * Requests: CCHAN_TEST_PORT_RING_REQUESTS (default 10^6; 2 * 10^5 under sanitizers). */
#include "port_test.h"

#define FIFO_SLOTS 4u
#define SLOTS 64u
#define TAG_SHIFT 48
#define INDEX_MASK ((1ull << TAG_SHIFT) - 1)

typedef struct ring_ctx {
    pt_t *t;
    int peer;
    uint64_t requests; /* multiple of 3 */
    cchan_port_channel_t ch;
} ring_ctx_t;

static uint64_t value_of(int sender, uint64_t j) {
    return ((uint64_t)(sender + 1) << TAG_SHIFT) | j;
}

static void *sender(void *arg) {
    ring_ctx_t *c = arg;
    uint64_t *src = (uint64_t *)(void *)c->t->src_ptr;
    for (uint64_t j = 0; j < c->requests; j++) src[j] = value_of(c->t->rank, j);
    const cchan_port_channel_t *ch = &c->ch;
    for (uint64_t j = 0; j < c->requests; j++) {
        uint64_t dst_off = (j % SLOTS) * 8, src_off = j * 8;
        switch (j % 3) {
        case 0: PT_OK(cchan_port_channel_put(ch, dst_off, src_off, 8)); break;
        case 1: PT_OK(cchan_port_channel_put_signal(ch, dst_off, src_off, 8)); break;
        default: PT_OK(cchan_port_channel_signal(ch)); break;
        }
    }
    PT_OK(cchan_port_channel_flush(ch));
    return NULL;
}

/* Slot of put `p` must hold the value of put p, or of a later put to the same slot. */
static void check_slot(const ring_ctx_t *c, uint64_t p, uint64_t s) {
    const uint64_t *dst = (const uint64_t *)(const void *)c->t->dst_ptr;
    uint64_t v = __atomic_load_n(&dst[p % SLOTS], __ATOMIC_RELAXED);
    uint64_t q = v & INDEX_MASK;
    PT_CHECK(v >> TAG_SHIFT == (uint64_t)(c->peer + 1) && q >= p && q % SLOTS == p % SLOTS,
             "signal %llu: slot %llu holds %#llx, put %llu not visible", (unsigned long long)s,
             (unsigned long long)(p % SLOTS), (unsigned long long)v, (unsigned long long)p);
}

static void *receiver(void *arg) {
    ring_ctx_t *c = arg;
    uint64_t signals = c->requests / 3 * 2;
    for (uint64_t s = 1; s <= signals; s++) {
        PT_OK(cchan_port_channel_wait(&c->ch));
        uint64_t p = 3 * ((s - 1) / 2) + 1; /* the put that came with signal s's cycle */
        check_slot(c, p, s);
        check_slot(c, p - 1, s);
    }
    return NULL;
}

int main(void) {
    uint64_t requests = pt_env_count("CCHAN_TEST_PORT_RING_REQUESTS", 1000000, 200000) / 3 * 3;
    pt_t t;
    pt_init(&t, requests * 8, 1, FIFO_SLOTS, 1);
    PT_CHECK(t.nranks == 2, "needs 2 ranks, got %d", t.nranks);
    PT_CHECK(requests >= 3 && requests < INDEX_MASK, "%llu requests", (unsigned long long)requests);
    ring_ctx_t c = {.t = &t, .peer = 1 - t.rank, .requests = requests};
    pt_channel(&t, c.peer, 0, &c.ch);
    pt_barrier(&t);
    double t0 = pt_now_s();
    pthread_t send_thread;
    PT_CHECK(pthread_create(&send_thread, NULL, sender, &c) == 0, "pthread_create");
    receiver(&c);
    pthread_join(send_thread, NULL);
    double secs = pt_now_s() - t0;
    pt_barrier(&t); /* the peer's last puts have landed (it flushed) */
    const uint64_t *dst = (const uint64_t *)(const void *)t.dst_ptr;
    for (uint64_t k = 0; k < SLOTS; k++) {
        uint64_t last = UINT64_MAX; /* last put (j % 3 != 2) to slot k */
        for (uint64_t j = requests; j-- > 0;)
            if (j % SLOTS == k && j % 3 != 2) {
                last = j;
                break;
            }
        uint64_t want = last == UINT64_MAX ? 0xA5A5A5A5A5A5A5A5ull : value_of(c.peer, last);
        PT_CHECK(dst[k] == want, "slot %llu: %#llx, expected %#llx", (unsigned long long)k,
                 (unsigned long long)dst[k], (unsigned long long)want);
    }
    uint64_t signals = requests / 3 * 2;
    PT_CHECK(__atomic_load_n(c.ch.inbound, __ATOMIC_ACQUIRE) == signals &&
                 *c.ch.expected == signals,
             "inbound %llu, expected %llu, signals sent %llu",
             (unsigned long long)__atomic_load_n(c.ch.inbound, __ATOMIC_ACQUIRE),
             (unsigned long long)*c.ch.expected, (unsigned long long)signals);
    if (t.rank == 0)
        printf("port ring: %llu requests each way through a %u-slot FIFO in %.2f s (%.2f M/s)\n",
               (unsigned long long)requests, FIFO_SLOTS, secs, (double)requests / secs / 1e6);
    pt_fini(&t);
    return 0;
}
