/* Port-channel soak: many lanes and channels per rank, random sizes, every request form, for a
 * bounded time, every byte and every counter checked.
 *
 *   cchan-run -n N test_port_soak [seconds [max_bytes [lanes]]]     (defaults 60, 4 MiB, 4)
 *
 * Every rank has, per peer q and lane l, a data channel D (semaphore l) and a credit channel K
 * (semaphore lanes + l), both into q's dst. Lane l is two threads: a sender that drives every
 * peer's D[q][l] in turn, and a receiver that waits on every peer's D[q][l] in turn and returns a
 * credit on K[q][l]; so channels of many lanes and peers share one proxy FIFO (64 slots: it wraps
 * and fills), and requests of different channels interleave in it.
 *
 * Message k from rank r to q on lane l has a size (1 B to max_bytes, log-uniform), an offset in
 * one of two slots of the dst region of (r, l) and a request form, all derived from (r, q, l, k),
 * so the receiver knows what to expect. Forms: put + signal; put_signal; put_signal_flush;
 * put + flush + signal; the message in up to three puts, then signal; a flush before the put.
 * The sender reuses a source slot only after a flush, and a destination slot only after the
 * receiver's credit for the message that used it before. The receiver checks every byte of the
 * message and 64 guard bytes on each side (poisoned after each check), then re-poisons them.
 *
 * The run is cut into epochs of MSGS messages per (peer, lane); after each epoch every rank checks
 * every channel's counters (inbound = messages or credits received, expected = waits done,
 * flush_done = flush_issued) and rank 0 decides whether time is up. A device call that fails (a
 * lost signal or flush ends at the 20 s device deadline) is reported with the channel, peer, lane,
 * message, operation, and the counters expected and completed, then the test fails. */
#include "port_test.h"

#define SOAK_FIFO_SLOTS 64u
#define SOAK_GUARD 64u
#define SOAK_MSGS 32u
#define SOAK_MAX_LANES 8
#define SOAK_DEADLINE_MS 20000u

typedef struct soak {
    pt_t t;
    int lanes;
    size_t max_bytes;
    size_t slot;   /* bytes of one slot: guard, misalignment, message, guard */
    size_t region; /* bytes per (sender, lane) in a dst, or per (peer, lane) in a src: two slots */
    cchan_port_channel_t data[PT_MAX_RANKS][SOAK_MAX_LANES];
    cchan_port_channel_t credit[PT_MAX_RANKS][SOAK_MAX_LANES];
    uint64_t sent[PT_MAX_RANKS][SOAK_MAX_LANES]; /* messages per (peer, lane) so far */
    uint64_t flushes[PT_MAX_RANKS][SOAK_MAX_LANES];
    uint64_t credit_flushes[PT_MAX_RANKS][SOAK_MAX_LANES];
} soak_t;

typedef struct lane_arg {
    soak_t *s;
    int lane;
} lane_arg_t;

typedef struct msg {
    size_t bytes, off; /* off: from the start of its slot */
    unsigned form, slot;
} msg_t;

static msg_t soak_msg(const soak_t *s, int from, int to, int lane, uint64_t k) {
    uint64_t rs = pt_seed(from, 64 * to + lane, k) | 1;
    msg_t m;
    m.bytes = pt_random_size(&rs, s->max_bytes);
    m.off = SOAK_GUARD + (size_t)(pt_random(&rs) % 16);
    m.form = (unsigned)(pt_random(&rs) % 6);
    m.slot = (unsigned)(k % 2);
    return m;
}

/* Offset of (peer or sender, lane, slot) in a src or dst. */
static size_t soak_at(const soak_t *s, int rank, int lane, unsigned slot) {
    return ((size_t)rank * (size_t)s->lanes + (size_t)lane) * s->region + slot * s->slot;
}

static void soak_fail(soak_t *s, const char *op, const cchan_port_channel_t *ch, int peer, int lane,
                      uint64_t k, int r) {
    uint64_t fi = *ch->flush_issued, fd = __atomic_load_n(ch->flush_done, __ATOMIC_ACQUIRE);
    uint64_t ex = *ch->expected, in = __atomic_load_n(ch->inbound, __ATOMIC_ACQUIRE);
    if (strstr(op, "poll")) ex++; /* a poll that fails has not taken its signal yet */
    const char *msg = cchan_last_error();
    int dev = cchan_comm_check_device(s->t.comm);
    fprintf(stderr,
            "rank %d: %s on channel %u (peer %d, lane %d), message %llu: %d (%s); flushes "
            "expected %llu, completed %llu; signals expected %llu, arrived %llu; device: %s; "
            "last error: %s\n",
            s->t.rank, op, ch->id, peer, lane, (unsigned long long)k, r, cchan_strerror(r),
            (unsigned long long)fi, (unsigned long long)fd, (unsigned long long)ex,
            (unsigned long long)in, dev ? cchan_last_error() : "no record", msg);
    exit(1);
}

#define SOAK_CALL(op, ch, peer, lane, k, call)                                                     \
    do {                                                                                           \
        int r_ = (call);                                                                           \
        if (r_) soak_fail(s, op, ch, peer, lane, k, r_);                                           \
    } while (0)

static void soak_send(soak_t *s, int q, int lane, uint64_t k) {
    const cchan_port_channel_t *ch = &s->data[q][lane];
    msg_t m = soak_msg(s, s->t.rank, q, lane, k);
    size_t src = soak_at(s, q, lane, m.slot) + m.off;
    size_t dst = soak_at(s, s->t.rank, lane, m.slot) + m.off;
    /* Reusing the slot: the receiver has checked message k - 2 (its credit), and a flush since
     * that message's puts makes the source ours again. */
    if (k >= 2) {
        const cchan_port_channel_t *kc = &s->credit[q][lane];
        SOAK_CALL("wait for a credit", kc, q, lane, k - 2, cchan_port_channel_wait(kc));
        SOAK_CALL("flush before reusing a source", ch, q, lane, k, cchan_port_channel_flush(ch));
        s->flushes[q][lane]++;
    }
    pt_fill(s->t.src_ptr + src, m.bytes, pt_seed(s->t.rank, 64 * q + lane, k));
    switch (m.form) {
    case 0:
        SOAK_CALL("put", ch, q, lane, k, cchan_port_channel_put(ch, dst, src, m.bytes));
        SOAK_CALL("signal", ch, q, lane, k, cchan_port_channel_signal(ch));
        break;
    case 1:
        SOAK_CALL("put_signal", ch, q, lane, k,
                  cchan_port_channel_put_signal(ch, dst, src, m.bytes));
        break;
    case 2:
        SOAK_CALL("put_signal_flush", ch, q, lane, k,
                  cchan_port_channel_put_signal_flush(ch, dst, src, m.bytes));
        s->flushes[q][lane]++;
        break;
    case 3:
        SOAK_CALL("put", ch, q, lane, k, cchan_port_channel_put(ch, dst, src, m.bytes));
        SOAK_CALL("flush", ch, q, lane, k, cchan_port_channel_flush(ch));
        s->flushes[q][lane]++;
        SOAK_CALL("signal", ch, q, lane, k, cchan_port_channel_signal(ch));
        break;
    case 4: {
        size_t a = m.bytes / 3, b = m.bytes / 2;
        SOAK_CALL("put (1 of 3)", ch, q, lane, k, cchan_port_channel_put(ch, dst, src, a));
        SOAK_CALL("put (2 of 3)", ch, q, lane, k,
                  cchan_port_channel_put(ch, dst + a, src + a, b - a));
        SOAK_CALL("put_signal (3 of 3)", ch, q, lane, k,
                  cchan_port_channel_put_signal(ch, dst + b, src + b, m.bytes - b));
        break;
    }
    default:
        SOAK_CALL("flush", ch, q, lane, k, cchan_port_channel_flush(ch));
        s->flushes[q][lane]++;
        SOAK_CALL("put_signal", ch, q, lane, k,
                  cchan_port_channel_put_signal(ch, dst, src, m.bytes));
        break;
    }
}

static void soak_receive(soak_t *s, int q, int lane, uint64_t k) {
    const cchan_port_channel_t *ch = &s->data[q][lane];
    msg_t m = soak_msg(s, q, s->t.rank, lane, k);
    uint8_t *at = s->t.dst_ptr + soak_at(s, q, lane, m.slot) + m.off;
    /* Alternate blocking waits and polls. */
    if (k % 3 == 2) {
        double t0 = pt_now_s();
        while (!cchan_port_channel_poll(ch))
            if (pt_now_s() - t0 > SOAK_DEADLINE_MS / 1e3 + 10) /* after the device deadlines */
                soak_fail(s, "poll", ch, q, lane, k, CCHAN_ERR_DEVICE_TIMEOUT);
    } else {
        SOAK_CALL("wait", ch, q, lane, k, cchan_port_channel_wait(ch));
    }
    size_t bad = pt_mismatch(at, m.bytes, pt_seed(q, 64 * s->t.rank + lane, k));
    PT_CHECK(bad == m.bytes,
             "message %llu from rank %d lane %d (%zu B at slot %u + %zu, form %u): byte %zu "
             "differs",
             (unsigned long long)k, q, lane, m.bytes, m.slot, m.off, m.form, bad);
    for (size_t g = 0; g < SOAK_GUARD; g++) {
        PT_CHECK(at[-1 - (ptrdiff_t)g] == PT_POISON && at[m.bytes + g] == PT_POISON,
                 "message %llu from rank %d lane %d (%zu B): a guard byte %zu before or after it "
                 "was written",
                 (unsigned long long)k, q, lane, m.bytes, g);
    }
    memset(at - SOAK_GUARD, PT_POISON, m.bytes + 2 * SOAK_GUARD);
    const cchan_port_channel_t *kc = &s->credit[q][lane];
    SOAK_CALL("signal a credit", kc, q, lane, k, cchan_port_channel_signal(kc));
}

static void *soak_sender(void *arg) {
    lane_arg_t *a = arg;
    soak_t *s = a->s;
    for (uint32_t i = 0; i < SOAK_MSGS; i++)
        for (int q = 0; q < s->t.nranks; q++)
            if (q != s->t.rank) soak_send(s, q, a->lane, s->sent[q][a->lane] + i);
    return NULL;
}

static void *soak_receiver(void *arg) {
    lane_arg_t *a = arg;
    soak_t *s = a->s;
    for (uint32_t i = 0; i < SOAK_MSGS; i++)
        for (int q = 0; q < s->t.nranks; q++)
            if (q != s->t.rank) soak_receive(s, q, a->lane, s->sent[q][a->lane] + i);
    return NULL;
}

/* After an epoch: all sends flushed, every counter where it must be. */
static void soak_check(soak_t *s) {
    for (int q = 0; q < s->t.nranks; q++) {
        if (q == s->t.rank) continue;
        for (int l = 0; l < s->lanes; l++) {
            cchan_port_channel_t *d = &s->data[q][l], *c = &s->credit[q][l];
            SOAK_CALL("flush at the end of the epoch", d, q, l, s->sent[q][l],
                      cchan_port_channel_flush(d));
            s->flushes[q][l]++;
            uint64_t n = s->sent[q][l];
            uint64_t credits = n >= 2 ? n - 2 : 0; /* the last two are taken at the next epoch */
            PT_CHECK(*d->flush_issued == s->flushes[q][l] &&
                         __atomic_load_n(d->flush_done, __ATOMIC_ACQUIRE) == s->flushes[q][l],
                     "channel %u (peer %d, lane %d): flushes issued %llu, completed %llu, "
                     "expected %llu",
                     d->id, q, l, (unsigned long long)*d->flush_issued,
                     (unsigned long long)__atomic_load_n(d->flush_done, __ATOMIC_ACQUIRE),
                     (unsigned long long)s->flushes[q][l]);
            PT_CHECK(*d->expected == n && __atomic_load_n(d->inbound, __ATOMIC_ACQUIRE) == n,
                     "channel %u (peer %d, lane %d): %llu messages, waits done %llu, signals "
                     "arrived %llu",
                     d->id, q, l, (unsigned long long)n, (unsigned long long)*d->expected,
                     (unsigned long long)__atomic_load_n(d->inbound, __ATOMIC_ACQUIRE));
            PT_CHECK(*c->flush_issued == s->credit_flushes[q][l] &&
                         __atomic_load_n(c->flush_done, __ATOMIC_ACQUIRE) ==
                             s->credit_flushes[q][l],
                     "credit channel %u (peer %d, lane %d): flushes issued %llu, completed %llu, "
                     "expected %llu",
                     c->id, q, l, (unsigned long long)*c->flush_issued,
                     (unsigned long long)__atomic_load_n(c->flush_done, __ATOMIC_ACQUIRE),
                     (unsigned long long)s->credit_flushes[q][l]);
            PT_CHECK(*c->expected == credits && __atomic_load_n(c->inbound, __ATOMIC_ACQUIRE) == n,
                     "credit channel %u (peer %d, lane %d): %llu messages, credits taken %llu "
                     "(expected %llu), arrived %llu",
                     c->id, q, l, (unsigned long long)n, (unsigned long long)*c->expected,
                     (unsigned long long)credits,
                     (unsigned long long)__atomic_load_n(c->inbound, __ATOMIC_ACQUIRE));
        }
    }
}

int main(int argc, char **argv) {
    static soak_t s;
    double seconds = argc > 1 ? atof(argv[1]) : 60.0;
    s.max_bytes = argc > 2 ? (size_t)strtoull(argv[2], NULL, 0) : (size_t)4 << 20;
    s.lanes = argc > 3 ? atoi(argv[3]) : 4;
    PT_CHECK(seconds > 0 && s.max_bytes >= 1 && s.lanes >= 1 && s.lanes <= SOAK_MAX_LANES,
             "usage: test_port_soak [seconds [max_bytes [lanes (1..%d)]]]", SOAK_MAX_LANES);
    s.slot = s.max_bytes + 2 * SOAK_GUARD + 16;
    s.region = 2 * s.slot;
    /* Sources per (peer, lane) and destinations per (sender, lane): the same layout, sized for the
     * launcher's rank count (cchan-run, torchrun and the others export it; else the maximum). */
    const char *world = getenv("CCHAN_WORLD_SIZE");
    if (!world) world = getenv("WORLD_SIZE");
    int nranks = world ? atoi(world) : PT_MAX_RANKS;
    if (nranks < 2 || nranks > PT_MAX_RANKS) nranks = PT_MAX_RANKS;
    size_t bytes = (size_t)nranks * (size_t)s.lanes * s.region;
    pt_t *t = &s.t;
    pt_init(t, bytes, 2 * s.lanes, SOAK_FIFO_SLOTS, 1);
    PT_CHECK(t->nranks <= nranks, "buffers sized for %d ranks, %d run", nranks, t->nranks);
    PT_OK(cchan_comm_set_timeout_ms(t->comm, SOAK_DEADLINE_MS));
    for (int q = 0; q < t->nranks; q++) {
        if (q == t->rank) continue;
        for (int l = 0; l < s.lanes; l++) {
            pt_channel(t, q, l, &s.data[q][l]);
            pt_channel(t, q, s.lanes + l, &s.credit[q][l]);
        }
    }
    pt_barrier(t);
    double t0 = pt_now_s();
    uint64_t epochs = 0, messages = 0;
    for (int done = 0; !done;) {
        lane_arg_t args[2 * SOAK_MAX_LANES];
        pthread_t th[2 * SOAK_MAX_LANES];
        for (int l = 0; l < s.lanes; l++) {
            args[2 * l] = (lane_arg_t){&s, l};
            args[2 * l + 1] = (lane_arg_t){&s, l};
            PT_CHECK(pthread_create(&th[2 * l], NULL, soak_sender, &args[2 * l]) == 0, "thread");
            PT_CHECK(pthread_create(&th[2 * l + 1], NULL, soak_receiver, &args[2 * l + 1]) == 0,
                     "thread");
        }
        for (int i = 0; i < 2 * s.lanes; i++) pthread_join(th[i], NULL);
        /* Credits are signals in this rank's proxy: delivered once flushed. */
        for (int q = 0; q < t->nranks; q++)
            for (int l = 0; l < s.lanes && q != t->rank; l++) {
                s.sent[q][l] += SOAK_MSGS;
                const cchan_port_channel_t *kc = &s.credit[q][l];
                int r = cchan_port_channel_flush(kc);
                if (r) soak_fail(&s, "flush of credits", kc, q, l, s.sent[q][l], r);
                s.credit_flushes[q][l]++;
            }
        pt_barrier(t);
        soak_check(&s);
        epochs++;
        messages += (uint64_t)SOAK_MSGS * (uint64_t)s.lanes * (uint64_t)(t->nranks - 1);
        int stop = pt_now_s() - t0 >= seconds;
        int all[PT_MAX_RANKS];
        PT_OK(cchan_bootstrap_allgather(cchan_comm_bootstrap(t->comm), &stop, all, sizeof stop));
        done = all[0];
    }
    PT_OK(cchan_proxy_get_error(t->proxy));
    printf("rank %d: %llu epochs, %llu messages sent over %d lane(s) to %d peer(s) in %.1f s "
           "(sizes up to %zu B)\n",
           t->rank, (unsigned long long)epochs, (unsigned long long)messages, s.lanes,
           t->nranks - 1, pt_now_s() - t0, s.max_bytes);
    pt_fini(t);
    return 0;
}
