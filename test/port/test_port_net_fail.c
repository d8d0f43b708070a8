/* A transport that fails ends the waits of its channel, without a device deadline.
 *
 * Two ranks, host backend, tcp transport on loopback, CCHAN_NET_TIMEOUT_MS=300 and no device
 * deadline (the communicator's timeout is 0 when the channel is created). Rank 1 stops itself
 * (SIGSTOP: its receive thread stops too, its sockets stay open, so nobody sees it die). Rank 0
 * puts and flushes: no ack comes, the tcp transport gives up after 300 ms, and
 *   - the flush already waiting returns the transport's status (CCHAN_ERR_TIMEOUT), within seconds;
 *     cchan_comm_check_device names the channel and cchan_proxy_get_error the transport's cause;
 *   - a wait on the channel (its peer will never signal) returns the same status;
 *   - a put on the failed channel is dropped, and the flush after it returns the status again.
 * Then rank 0 wakes rank 1 (SIGCONT) and both leave. A call that does not return within
 * NF_BOUND_S fails the test (SIGALRM) instead of hanging: before the fix the flush spun forever. */
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include "port_test.h"

#define NF_BYTES (1u << 20)
#define NF_BOUND_S 10u

static const char *volatile nf_step = "setup";
static volatile pid_t nf_peer_pid; /* woken before failing, so that it does not stay stopped */

static void nf_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_port_net_fail: a call did not return within the bound: ";
    (void)!write(2, msg, sizeof msg - 1);
    (void)!write(2, nf_step, strlen(nf_step));
    (void)!write(2, "\n", 1);
    if (nf_peer_pid > 0) kill(nf_peer_pid, SIGCONT);
    _exit(1);
}

/* Rank 1's process is stopped (state T in /proc), so nothing of it answers. */
static int nf_stopped(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

static void nf_expect(int got, int want, const char *what) {
    printf("rank %d: %s: %d (%s): %s\n", pt_rank, what, got, cchan_strerror(got),
           cchan_last_error());
    PT_CHECK(got == want, "%s returned %d (%s), expected %d (%s)", what, got, cchan_strerror(got),
             want, cchan_strerror(want));
}

/* Runs `call` under the bound, naming the step for the watchdog. */
#define NF_BOUNDED(step, call)                                                                     \
    ({                                                                                             \
        nf_step = (step);                                                                          \
        alarm(NF_BOUND_S);                                                                         \
        int rc_ = (call);                                                                          \
        alarm(0);                                                                                  \
        rc_;                                                                                       \
    })

static void sender(pt_t *t, const cchan_port_channel_t *ch, pid_t peer_pid) {
    for (int i = 0; i < 1000 && !nf_stopped(peer_pid); i++) usleep(10 * 1000);
    PT_CHECK(nf_stopped(peer_pid), "rank 1 (pid %d) did not stop", (int)peer_pid);
    pt_fill(t->src_ptr, NF_BYTES, pt_seed(0, 1, 0));
    double t0 = pt_now_s();
    PT_OK(cchan_port_channel_put_signal(ch, 0, 0, NF_BYTES));
    int r = NF_BOUNDED("flush while the transport times out", cchan_port_channel_flush(ch));
    double waited = pt_now_s() - t0;
    nf_expect(r, CCHAN_ERR_TIMEOUT, "flush");
    printf("rank 0: the flush returned after %.2f s\n", waited);
    nf_expect(cchan_comm_check_device(t->comm), CCHAN_ERR_TIMEOUT, "cchan_comm_check_device");
    PT_CHECK(strstr(cchan_last_error(), "port channel") != NULL, "check_device names no channel");
    nf_expect(cchan_proxy_get_error(t->proxy), CCHAN_ERR_TIMEOUT, "cchan_proxy_get_error");
    PT_CHECK(strstr(cchan_last_error(), "CCHAN_NET_TIMEOUT_MS") != NULL &&
                 strstr(cchan_last_error(), "rank 1") != NULL,
             "the proxy's error names neither the timeout nor the peer");

    r = NF_BOUNDED("wait on the failed channel", cchan_port_channel_wait(ch));
    nf_expect(r, CCHAN_ERR_TIMEOUT, "wait on the failed channel");
    /* The put only enters the FIFO; the proxy drops it, and the flush reports it. */
    PT_OK(cchan_port_channel_put(ch, 0, 0, 4096));
    r = NF_BOUNDED("flush on the failed channel", cchan_port_channel_flush(ch));
    nf_expect(r, CCHAN_ERR_TIMEOUT, "flush after a put on the failed channel");

    PT_CHECK(kill(peer_pid, SIGCONT) == 0, "SIGCONT to rank 1");
    pt_barrier(t);
    r = NF_BOUNDED("stop", cchan_proxy_stop(t->proxy, 2000));
    PT_CHECK(r != 0, "stop returned 0 after the transport failed");
    printf("rank 0: stop: %d (%s): %s\n", r, cchan_strerror(r), cchan_last_error());
}

int main(void) {
    /* Short, so that the stopped peer makes the transport give up quickly; long enough for the
     * two channel ends to connect under a sanitizer. */
    setenv("CCHAN_NET_TIMEOUT_MS", "300", 1);
    signal(SIGALRM, nf_alarm);
    pt_t t;
    pt_init(&t, NF_BYTES, 1, 64, 1);
    PT_CHECK(t.nranks == 2, "needs 2 ranks, got %d", t.nranks);
    PT_OK(cchan_comm_set_timeout_ms(t.comm, 0)); /* the channel gets no device deadline */
    cchan_port_channel_t ch;
    int peer = 1 - t.rank;
    PT_OK(cchan_port_channel_create(t.proxy, CCHAN_TRANSPORT_TCP, t.sems, peer, 0, t.peers[peer],
                                    t.src, &ch));
    PT_CHECK(ch.ctl.timeout_ns == 0, "the channel has a deadline");
    pid_t pids[2], me = getpid();
    PT_OK(cchan_bootstrap_allgather(cchan_comm_bootstrap(t.comm), &me, pids, sizeof me));
    if (t.rank == 0) nf_peer_pid = pids[1];
    pt_barrier(&t);
    if (t.rank == 1) {
        raise(SIGSTOP); /* until rank 0 has seen its channel fail */
        pt_barrier(&t);
        (void)cchan_proxy_stop(t.proxy, 2000); /* its peer's requests were cut off midway */
    } else {
        sender(&t, &ch, pids[1]);
    }
    pt_barrier(&t);
    PT_OK(cchan_proxy_destroy(t.proxy));
    pt_barrier(&t);
    PT_OK(cchan_sem_set_destroy(t.sems));
    PT_OK(cchan_mem_destroy(t.peers[peer]));
    PT_OK(cchan_mem_destroy(t.dst));
    PT_OK(cchan_mem_destroy(t.src));
    PT_OK(cchan_comm_destroy(t.comm));
    printf("rank %d: done\n", t.rank);
    return 0;
}
