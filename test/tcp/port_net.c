/* Port channels over a network transport (tcp or ib), two ranks on the host backend:
 *
 *   port_net <tcp|ib> ops    every send form (put + signal, put_signal, put_signal_flush, put +
 *                            flush + signal), sizes from 1 B to 24 MiB (large puts split) at odd
 *                            offsets; the receiver waits or polls, checks every byte and that the
 *                            bytes around the range are untouched, and acknowledges
 *   port_net <tcp|ib> many   rounds of 4096 puts to distinct slots and one signal (a full FIFO and
 *                            a full send queue: back-pressure), checked after each round
 *   port_net <tcp|ib> gone   rank 1 disappears (_exit) after connecting; rank 0's put and flush
 *                            must fail with an error that names the peer, and stop must say so
 *   port_net ib badkey       a put fails at the NIC (wrong rkey, CCHAN_TEST_IB_RKEY_XOR): the
 * failed work completion is reported naming peer, operation and status port_net <tcp|ib> mismatch
 * the two sides of a channel disagree (semaphore sets, transports): both ranks get an error naming
 * the peer, neither hangs port_net <tcp|ib> bench  one-way latency (put_signal ping-pong) and
 * throughput (a window of puts, one signal) for a few sizes; rank 0 prints a table
 *
 * Ranks come from the environment (cchan-run, torchrun, Open MPI, Slurm), so the same program runs
 * on loopback, between network namespaces (netns-test.sh) and inside the Soft-RoCE guest
 * (scripts/rxe-qemu.sh). The ib transport exits 77 where no RDMA device is usable. */
#include <sys/syscall.h>
#include <unistd.h>

#include "port_test.h"

#define MAX_XFER (24u << 20)
#define SLACK 64u
#define BUF_BYTES (MAX_XFER + 2 * SLACK)
#define SEM_DATA 0
#define SEM_ACK 1
#define MANY_PUTS 4096u
#define MANY_SLOT 256u

static cchan_transport_t transport;
static const char *transport_name;

static int connect_channels(pt_t *t, cchan_port_channel_t *data, cchan_port_channel_t *ack) {
    int peer = 1 - t->rank;
    int r = cchan_port_channel_create(t->proxy, transport, t->sems, peer, SEM_DATA, t->peers[peer],
                                      t->src, data);
    if (!r)
        r = cchan_port_channel_create(t->proxy, transport, t->sems, peer, SEM_ACK, t->peers[peer],
                                      t->src, ack);
    return r;
}

/* ---------------------------------------------------------------- ops */

static const size_t sizes[] = {1,     7,        8,       64,       4095,         4096,
                               65537, 1u << 20, 3145735, 8u << 20, MAX_XFER - 1, MAX_XFER};
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define FORMS 4

static void send_one(pt_t *t, const cchan_port_channel_t *ch, uint64_t i, size_t bytes,
                     size_t src_off, size_t dst_off) {
    uint8_t *src = t->src_ptr + src_off;
    pt_fill(src, bytes, pt_seed(t->rank, 0, i));
    switch (i % FORMS) {
    case 0:
        PT_OK(cchan_port_channel_put(ch, dst_off, src_off, bytes));
        PT_OK(cchan_port_channel_signal(ch));
        PT_OK(cchan_port_channel_flush(ch));
        break;
    case 1:
        PT_OK(cchan_port_channel_put_signal(ch, dst_off, src_off, bytes));
        PT_OK(cchan_port_channel_flush(ch));
        break;
    case 2:
        PT_OK(cchan_port_channel_put_signal_flush(ch, dst_off, src_off, bytes));
        memset(src, 0, bytes); /* flushed: the source is ours again */
        break;
    default:
        PT_OK(cchan_port_channel_put(ch, dst_off, src_off, bytes));
        PT_OK(cchan_port_channel_flush(ch));
        memset(src, 0, bytes);
        PT_OK(cchan_port_channel_signal(ch));
        break;
    }
}

static void wait_or_poll(const cchan_port_channel_t *ch, int poll) {
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

static void run_ops(pt_t *t, const cchan_port_channel_t *data, const cchan_port_channel_t *ack) {
    int peer = 1 - t->rank;
    /* CCHAN_TEST_NET_MAX_BYTES caps the sizes (slow links: Soft-RoCE under emulation). */
    uint64_t max = pt_env_count("CCHAN_TEST_NET_MAX_BYTES", MAX_XFER, MAX_XFER);
    uint64_t iters = 2 * NSIZES;
    double t0 = pt_now_s();
    uint64_t moved = 0;
    for (uint64_t i = 0; i < iters; i++) {
        size_t bytes = sizes[i % NSIZES];
        if (bytes > max) bytes = (size_t)max - (i & 1);
        size_t src_off = (size_t)(pt_mix(i) % SLACK), dst_off = (size_t)(pt_mix(i + 99) % SLACK);
        send_one(t, data, i, bytes, src_off, dst_off);
        wait_or_poll(data, (int)(i & 1));
        uint8_t *dst = t->dst_ptr + dst_off;
        size_t bad = pt_mismatch(dst, bytes, pt_seed(peer, 0, i));
        PT_CHECK(bad == bytes, "%s iteration %llu: %zu B at offset %zu: byte %zu differs",
                 transport_name, (unsigned long long)i, bytes, dst_off, bad);
        if (dst_off) PT_CHECK(dst[-1] == PT_POISON, "byte before the range written");
        PT_CHECK(dst[bytes] == PT_POISON, "byte after the range written");
        memset(dst, PT_POISON, bytes);
        PT_OK(cchan_port_channel_signal(ack));
        PT_OK(cchan_port_channel_wait(ack));
        moved += bytes;
    }
    PT_CHECK(*data->expected == iters && __atomic_load_n(data->inbound, __ATOMIC_ACQUIRE) == iters,
             "expected %llu, inbound %llu, want %llu", (unsigned long long)*data->expected,
             (unsigned long long)__atomic_load_n(data->inbound, __ATOMIC_ACQUIRE),
             (unsigned long long)iters);
    if (t->rank == 0)
        printf("%s ops: %llu transfers each way (1 B .. %llu B, %d send forms, wait and poll), "
               "%.1f MiB each way in %.2f s: ok\n",
               transport_name, (unsigned long long)iters, (unsigned long long)max, FORMS,
               (double)moved / (1 << 20), pt_now_s() - t0);
}

/* ---------------------------------------------------------------- many */

static void run_many(pt_t *t, const cchan_port_channel_t *data, const cchan_port_channel_t *ack) {
    int peer = 1 - t->rank;
    int rounds = 3;
    double t0 = pt_now_s();
    for (int round = 0; round < rounds; round++) {
        for (uint32_t k = 0; k < MANY_PUTS; k++)
            pt_fill(t->src_ptr + (size_t)k * MANY_SLOT, MANY_SLOT, pt_seed(t->rank, round, k));
        for (uint32_t k = 0; k < MANY_PUTS; k++) {
            uint64_t off = (uint64_t)k * MANY_SLOT;
            PT_OK(cchan_port_channel_put(data, off, off, MANY_SLOT - (k % 7)));
        }
        PT_OK(cchan_port_channel_signal(data));
        PT_OK(cchan_port_channel_flush(data));
        PT_OK(cchan_port_channel_wait(data));
        for (uint32_t k = 0; k < MANY_PUTS; k++) {
            uint8_t *p = t->dst_ptr + (size_t)k * MANY_SLOT;
            size_t n = MANY_SLOT - (k % 7);
            size_t bad = pt_mismatch(p, n, pt_seed(peer, round, k));
            PT_CHECK(bad == n, "round %d put %u: byte %zu differs", round, k, bad);
            if (k % 7) PT_CHECK(p[n] == PT_POISON, "round %d put %u: byte after written", round, k);
        }
        memset(t->dst_ptr, PT_POISON, (size_t)MANY_PUTS * MANY_SLOT);
        PT_OK(cchan_port_channel_signal(ack));
        PT_OK(cchan_port_channel_wait(ack));
    }
    if (t->rank == 0)
        printf("%s many: %d rounds of %u puts + 1 signal each way in %.2f s: ok\n", transport_name,
               rounds, MANY_PUTS, pt_now_s() - t0);
}

/* ---------------------------------------------------------------- gone */

static void run_gone(pt_t *t, const cchan_port_channel_t *data) {
    pt_barrier(t);
    /* No cleanup: the process just disappears (exit_group directly, so that no sanitizer's exit
     * hook reports the threads it leaves behind). */
    if (t->rank == 1) syscall(SYS_exit_group, 0);
    usleep(300 * 1000);
    pt_fill(t->src_ptr, 1u << 20, 1);
    /* The requests only enter the FIFO; the flush cannot complete, so it ends when the
     * communicator learns that rank 1 died (within a second), when the transport finds the
     * connection closed (its status, CCHAN_ERR_PEER), or at the latest at the channel's deadline
     * (2 s, set before the channels were created), never hanging. */
    PT_OK(cchan_port_channel_put_signal(data, 0, 0, 1u << 20));
    PT_OK(cchan_port_channel_put(data, 0, 0, 1u << 20));
    int r = cchan_port_channel_flush(data);
    PT_CHECK(r == CCHAN_ERR_PEER_DEAD || r == CCHAN_ERR_PEER || r == CCHAN_ERR_DEVICE_TIMEOUT,
             "flush returned %d although the peer is gone", r);
    int flushed = r;
    r = cchan_proxy_stop(t->proxy, 10000);
    const char *msg = cchan_last_error();
    PT_CHECK(r != 0, "stop after the peer vanished returned 0");
    PT_CHECK(strstr(msg, "rank 1") || strstr(msg, "peer 1"), "error does not name the peer: %s",
             msg);
    PT_CHECK(strstr(msg, "put") || strstr(msg, "flush") || strstr(msg, "signal"),
             "error does not name the operation: %s", msg);
    printf("%s gone: flush ended (%s); stop returned %d (%s): %s\n", transport_name,
           cchan_strerror(flushed), r, cchan_strerror(r), msg);
    PT_OK(cchan_proxy_destroy(t->proxy));
    printf("%s gone: ok\n", transport_name);
    fflush(stdout);
    syscall(SYS_exit_group, 0); /* the bootstrap's peer is gone: skip the collective teardown */
}

/* ---------------------------------------------------------------- badkey (ib) */

/* Rank 0's channel writes with a wrong rkey (CCHAN_TEST_IB_RKEY_XOR, set before it connected): the
 * NIC fails the put, and the failed work completion must surface as an error naming the peer, the
 * operation and the ibverbs status; the flush waiting for it fails with that status (remote access
 * error: -EACCES) as soon as the proxy sees the completion, without waiting for its deadline. */
static void run_badkey(pt_t *t, const cchan_port_channel_t *data) {
    if (t->rank == 0) {
        pt_fill(t->src_ptr, 4096, 3);
        PT_OK(cchan_port_channel_put_signal(data, 0, 0, 4096));
        int r = cchan_port_channel_flush(data);
        PT_CHECK(r == -EACCES, "flush returned %d (%s) after a put the NIC refused", r,
                 cchan_strerror(r));
        r = cchan_proxy_stop(t->proxy, 5000);
        const char *msg = cchan_last_error();
        PT_CHECK(r != 0, "stop returned 0 after a failed RDMA WRITE");
        PT_CHECK(strstr(msg, "rank 1") && strstr(msg, "RDMA WRITE"),
                 "error does not name the peer and the operation: %s", msg);
        printf("%s badkey: stop returned %d (%s): %s\n", transport_name, r, cchan_strerror(r), msg);
        PT_OK(cchan_proxy_start(t->proxy));
    }
    pt_barrier(t);
    /* Nothing arrived: the put and its signal were refused by the NIC. */
    if (t->rank == 1) {
        PT_CHECK(t->dst_ptr[0] == PT_POISON, "the failed put wrote data");
        PT_CHECK(!cchan_port_channel_poll(data), "a signal of the failed put arrived");
    }
    if (t->rank == 0) printf("%s badkey: ok\n", transport_name);
}

/* ---------------------------------------------------------------- mismatch */

/* Channels whose two sides disagree fail on both ranks with a message, never hang: rank 0 names
 * semaphore 1 of the 2-per-peer set, rank 1 that of a 3-per-peer set. Then a channel on the
 * transport the peer does not use (rank 1 takes ib where rank 0 takes tcp, and tcp for ib) fails
 * too. */
static void run_mismatch(pt_t *t) {
    int peer = 1 - t->rank;
    cchan_sem_set_t *other;
    PT_OK(cchan_sem_set_create(t->comm, 3, CCHAN_SEM_HOST_MAPPED, &other));
    cchan_port_channel_t ch;
    int r = cchan_port_channel_create(t->proxy, transport, t->rank == 0 ? t->sems : other, peer, 1,
                                      t->peers[peer], t->src, &ch);
    PT_CHECK(r != 0, "a channel over mismatched semaphore sets was created");
    PT_CHECK(strstr(cchan_last_error(), "rank") != NULL, "message names no rank: %s",
             cchan_last_error());
    if (t->rank == 0)
        printf("%s mismatch: semaphore sets: %s\n", transport_name, cchan_last_error());
    cchan_transport_t other_transport =
        t->rank == 0 ? transport
                     : (transport == CCHAN_TRANSPORT_IB ? CCHAN_TRANSPORT_TCP : CCHAN_TRANSPORT_IB);
    r = cchan_port_channel_create(t->proxy, other_transport, t->sems, peer, 0, t->peers[peer],
                                  t->src, &ch);
    PT_CHECK(r != 0, "a channel with different transports on the two sides was created");
    if (t->rank == 0) printf("%s mismatch: transports: %s\n", transport_name, cchan_last_error());
    pt_barrier(t);
    PT_OK(cchan_sem_set_destroy(other));
    if (t->rank == 0) printf("%s mismatch: ok\n", transport_name);
}

/* ---------------------------------------------------------------- bench */

static int cmp_double(const void *a, const void *b);

/* The same-run baseline for tcp: plain blocking sockets between the two ranks, no cchan. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

static void raw_io(int fd, void *buf, size_t n, int out) {
    uint8_t *p = buf;
    while (n) {
        ssize_t k = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        PT_CHECK(k > 0, "raw socket %s: %zd", out ? "send" : "recv", k);
        p += k;
        n -= (size_t)k;
    }
}

/* Rank 0 listens on its first non-loopback IPv4 address (CCHAN_TCP_ADDR when set); rank 1 connects.
 */
static int raw_connect(pt_t *t) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const char *want = getenv("CCHAN_TCP_ADDR");
    struct ifaddrs *ifs = NULL;
    if (want) {
        inet_pton(AF_INET, want, &a.sin_addr);
    } else if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
                !(i->ifa_flags & IFF_LOOPBACK)) {
                a.sin_addr = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
                break;
            }
        freeifaddrs(ifs);
    }
    int one = 1, fd = -1, lfd = -1;
    struct sockaddr_in all[2];
    if (t->rank == 0) {
        lfd = socket(AF_INET, SOCK_STREAM, 0);
        PT_CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(lfd, 1) == 0,
                 "raw listen");
        socklen_t len = sizeof a;
        getsockname(lfd, (struct sockaddr *)&a, &len);
    }
    PT_OK(cchan_bootstrap_allgather(cchan_comm_bootstrap(t->comm), &a, all, sizeof a));
    if (t->rank == 0) {
        fd = accept(lfd, NULL, NULL);
        close(lfd);
    } else {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        PT_CHECK(connect(fd, (struct sockaddr *)&all[0], sizeof all[0]) == 0, "raw connect");
    }
    PT_CHECK(fd >= 0, "raw socket");
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void run_raw_baseline(pt_t *t, const size_t *lat_sizes, int nlat, const size_t *bw_sizes,
                             int nbw, int N, uint64_t sample) {
    int fd = raw_connect(t);
    uint8_t *buf = t->src_ptr;
    double *rtt = malloc(sizeof *rtt * (size_t)N);
    PT_CHECK(rtt != NULL, "malloc");
    if (t->rank == 0)
        printf("# raw TCP sockets, same hosts (baseline)\n# %-10s %14s\n", "bytes",
               "one-way us (median)");
    for (int s = 0; s < nlat; s++) {
        for (int i = 0; i < N + N / 8; i++) {
            double t0 = pt_now_s();
            raw_io(fd, buf, lat_sizes[s], t->rank == 0);
            raw_io(fd, buf, lat_sizes[s], t->rank != 0);
            if (i >= N / 8) rtt[i - N / 8] = pt_now_s() - t0;
        }
        qsort(rtt, (size_t)N, sizeof rtt[0], cmp_double);
        if (t->rank == 0) printf("  %-10zu %14.1f\n", lat_sizes[s], rtt[N / 2] / 2 * 1e6);
    }
    if (t->rank == 0) printf("# %-10s %8s %14s\n", "bytes", "sends", "GB/s (median of 5)");
    for (int s = 0; s < nbw; s++) {
        size_t bytes = bw_sizes[s];
        if (bytes > sample) continue;
        uint64_t n = sample / bytes;
        double gbs[5];
        uint8_t ack = 0;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = pt_now_s();
            for (uint64_t k = 0; k < n; k++) raw_io(fd, buf, bytes, t->rank == 0);
            raw_io(fd, &ack, 1, t->rank != 0);
            gbs[rep] = (double)(n * bytes) / (pt_now_s() - t0) / 1e9;
        }
        qsort(gbs, 5, sizeof gbs[0], cmp_double);
        if (t->rank == 0) printf("  %-10zu %8llu %14.3f\n", bytes, (unsigned long long)n, gbs[2]);
    }
    free(rtt);
    close(fd);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run_bench(pt_t *t, const cchan_port_channel_t *data, const cchan_port_channel_t *ack) {
    static const size_t lat_sizes[] = {8, 4096, 65536};
    static const size_t bw_sizes[] = {4096, 65536, 1u << 20, 16u << 20};
    if (t->rank == 0)
        printf("# %s transport, host backend\n# %-10s %14s\n", transport_name, "bytes",
               "one-way us (median)");
    /* CCHAN_TEST_BENCH_ITERS (ping-pongs per size, default 400) and CCHAN_TEST_BENCH_MB (bytes per
     * bandwidth sample, default 64 MiB) shrink the run on slow links. */
    int N = (int)pt_env_count("CCHAN_TEST_BENCH_ITERS", 400, 100);
    uint64_t sample = pt_env_count("CCHAN_TEST_BENCH_MB", 64, 16) << 20;
    PT_CHECK(N >= 1 && N <= 100000 && sample > 0, "bench parameters");
    int WARM = N / 8;
    double *rtt = malloc(sizeof *rtt * (size_t)N);
    PT_CHECK(rtt != NULL, "malloc");
    for (size_t s = 0; s < sizeof lat_sizes / sizeof lat_sizes[0]; s++) {
        for (int i = 0; i < N + WARM; i++) {
            double t0 = pt_now_s();
            if (t->rank == 0) {
                PT_OK(cchan_port_channel_put_signal(data, 0, 0, lat_sizes[s]));
                PT_OK(cchan_port_channel_wait(data));
            } else {
                PT_OK(cchan_port_channel_wait(data));
                PT_OK(cchan_port_channel_put_signal(data, 0, 0, lat_sizes[s]));
            }
            if (i >= WARM) rtt[i - WARM] = pt_now_s() - t0;
        }
        PT_OK(cchan_port_channel_flush(data));
        qsort(rtt, N, sizeof rtt[0], cmp_double);
        if (t->rank == 0) printf("  %-10zu %14.1f\n", lat_sizes[s], rtt[N / 2] / 2 * 1e6);
    }
    if (t->rank == 0) printf("# %-10s %8s %14s\n", "bytes", "puts", "GB/s (median of 5)");
    for (size_t s = 0; s < sizeof bw_sizes / sizeof bw_sizes[0]; s++) {
        size_t bytes = bw_sizes[s];
        if (bytes > sample) continue;
        uint64_t puts = sample / bytes;
        double gbs[5];
        for (int rep = 0; rep < 5; rep++) {
            pt_barrier(t);
            double t0 = pt_now_s();
            if (t->rank == 0) {
                for (uint64_t k = 0; k < puts; k++)
                    PT_OK(
                        cchan_port_channel_put(data, (k * bytes) % (BUF_BYTES - bytes), 0, bytes));
                PT_OK(cchan_port_channel_signal(data));
                PT_OK(cchan_port_channel_wait(ack)); /* the receiver has all of it */
            } else {
                PT_OK(cchan_port_channel_wait(data));
                PT_OK(cchan_port_channel_signal(ack));
            }
            gbs[rep] = (double)(puts * bytes) / (pt_now_s() - t0) / 1e9;
        }
        PT_OK(cchan_port_channel_flush(data));
        PT_OK(cchan_port_channel_flush(ack));
        qsort(gbs, 5, sizeof gbs[0], cmp_double);
        if (t->rank == 0)
            printf("  %-10zu %8llu %14.3f\n", bytes, (unsigned long long)puts, gbs[2]);
    }
    free(rtt);
    if (transport == CCHAN_TRANSPORT_TCP) run_raw_baseline(t, lat_sizes, 3, bw_sizes, 4, N, sample);
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "tcp") && strcmp(argv[1], "ib") && strcmp(argv[1], "auto"))) {
        fprintf(stderr, "usage: %s tcp|ib|auto ops|many|gone|bench\n", argv[0]);
        return 2;
    }
    /* auto: CCHAN_TRANSPORT_AUTO, which picks ib or tcp for a peer on another host. */
    transport_name = argv[1];
    transport = argv[1][0] == 't'   ? CCHAN_TRANSPORT_TCP
                : argv[1][0] == 'i' ? CCHAN_TRANSPORT_IB
                                    : CCHAN_TRANSPORT_AUTO;
    if (transport == CCHAN_TRANSPORT_IB && cchan_optional_lib_available("ibverbs") != 1) {
        printf("SKIP port_net ib: libibverbs.so.1 does not load here\n");
        return 77;
    }
    pt_t t;
    pt_init(&t, BUF_BYTES, 2, 512, 1);
    PT_CHECK(t.nranks == 2, "needs 2 ranks, got %d", t.nranks);
    /* Between hosts (netns-test.sh sets this), the peer's memory is an unmapped handle that only
     * network transports use: memory channels must refuse it. */
    const char *remote = getenv("CCHAN_TEST_EXPECT_REMOTE");
    if (remote && remote[0] == '1') {
        int peer = 1 - t.rank;
        PT_CHECK(cchan_mem_ptr(t.peers[peer]) == NULL, "peer memory of another host is mapped");
        cchan_memory_channel_t mc;
        int mr =
            cchan_memory_channel_init(t.comm, t.sems, peer, 0, t.peers[peer], t.src, t.dst, &mc);
        PT_CHECK(mr == CCHAN_ERR_UNSUPPORTED, "memory channel to another host: %d", mr);
        cchan_port_channel_t hc;
        mr = cchan_port_channel_create(t.proxy, CCHAN_TRANSPORT_HOST, t.sems, peer, 0,
                                       t.peers[peer], t.src, &hc);
        PT_CHECK(mr == CCHAN_ERR_UNSUPPORTED, "host transport to another host: %d", mr);
        if (t.rank == 0)
            printf("%s: peer memory on another host is not mapped: ok\n", transport_name);
    }
    if (!strcmp(argv[2], "mismatch")) {
        run_mismatch(&t);
        pt_fini(&t);
        return 0;
    }
    cchan_port_channel_t data, ack;
    if (!strcmp(argv[2], "badkey")) {
        if (transport != CCHAN_TRANSPORT_IB) {
            printf("SKIP port_net badkey: ib only\n");
            return 77;
        }
        PT_OK(cchan_comm_set_timeout_ms(t.comm, 2000));
        if (t.rank == 0) setenv("CCHAN_TEST_IB_RKEY_XOR", "0x5a5a", 1);
    }
    if (!strcmp(argv[2], "gone")) {
        PT_OK(cchan_comm_set_timeout_ms(t.comm, 2000));
        setenv("CCHAN_NET_TIMEOUT_MS", "3000", 0); /* how long requests may go unanswered */
    }
    int r = connect_channels(&t, &data, &ack);
    if (r && transport == CCHAN_TRANSPORT_IB &&
        (r == CCHAN_ERR_NO_DEVICE || r == CCHAN_ERR_UNSUPPORTED || r == CCHAN_ERR_PEER)) {
        printf("SKIP port_net ib (rank %d): %s\n", t.rank, cchan_last_error());
        return 77;
    }
    PT_OK(r);
    if (!strcmp(argv[2], "ops"))
        run_ops(&t, &data, &ack);
    else if (!strcmp(argv[2], "many"))
        run_many(&t, &data, &ack);
    else if (!strcmp(argv[2], "gone"))
        run_gone(&t, &data);
    else if (!strcmp(argv[2], "badkey"))
        run_badkey(&t, &data);
    else if (!strcmp(argv[2], "bench"))
        run_bench(&t, &data, &ack);
    else
        PT_CHECK(0, "unknown scenario %s", argv[2]);
    pt_fini(&t);
    return 0;
}
