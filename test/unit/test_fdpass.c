/* The SCM_RIGHTS primitives of fd passing against other local processes (one process and forked
 * children): a receiver closes a stranger's connection unread and takes the expected sender's fd;
 * a sender refuses to hand its fd to a listener that is not the expected process; two listeners
 * of one (session, exchange, rank) get different names, so a name cannot be predicted. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fdpass.h"
#include "runtime.h"

#define SESSION_KEY 0x1234abcdull
#define SEQ 7u

static pid_t wanted_pid;

static int want(void *ctx, pid_t pid) {
    (void)ctx;
    return pid == wanted_pid;
}

/* Loops on try_recv until a wanted sender's fd arrives or 5 s pass. */
static int recv_within(int listen_fd, cchani_fdpass_msg_t *msg, int *fd, pid_t *pid) {
    for (int i = 0; i < 5000; i++) {
        int k = cchani_fdpass_try_recv(listen_fd, 2000, want, NULL, msg, fd, pid);
        if (k != 0) return k;
        usleep(1000);
    }
    return 0;
}

static void test_stranger_refused_sender_taken(void **state) {
    (void)state;
    uint64_t nonce = 0;
    int lfd = -1;
    assert_int_equal(cchani_fdpass_listen(SESSION_KEY, SEQ, 1, 4, &nonce, &lfd), 0);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    /* The stranger connects first and stays silent until killed. */
    pid_t stranger = fork();
    assert_true(stranger >= 0);
    if (stranger == 0) {
        cchani_fdpass_msg_t m = {SESSION_KEY, 0, SEQ, 0};
        /* It plays a sender, but it is not the one the receiver wants. */
        int memfd = memfd_create("stranger", MFD_CLOEXEC);
        int r = cchani_fdpass_try_send(SESSION_KEY, SEQ, 1, nonce, getppid(), &m, memfd);
        char c = r == 0 ? 1 : 0;
        (void)!write(ready[1], &c, 1);
        pause();
        _exit(0);
    }
    char c = 0;
    assert_int_equal(read(ready[0], &c, 1), 1);
    assert_int_equal(c, 1); /* its connect and send went through: the receiver must refuse it */
    pid_t sender = fork();
    assert_true(sender >= 0);
    if (sender == 0) {
        cchani_fdpass_msg_t m = {SESSION_KEY, 42, SEQ, 3};
        int memfd = memfd_create("sender", MFD_CLOEXEC);
        _exit(cchani_fdpass_try_send(SESSION_KEY, SEQ, 1, nonce, getppid(), &m, memfd) == 0 ? 0 : 1);
    }
    wanted_pid = sender;
    cchani_fdpass_msg_t msg;
    int fd = -1;
    pid_t pid = 0;
    assert_int_equal(recv_within(lfd, &msg, &fd, &pid), 1);
    assert_int_equal(pid, sender);
    assert_int_equal(msg.key, 42);
    assert_int_equal(msg.rank, 3);
    assert_true(fd >= 0);
    close(fd);
    int st = 0;
    assert_int_equal(waitpid(sender, &st, 0), sender);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* Nothing else is waiting: the stranger's message was dropped unread. */
    assert_int_equal(cchani_fdpass_try_recv(lfd, 100, want, NULL, &msg, &fd, &pid), 0);
    kill(stranger, SIGKILL);
    waitpid(stranger, NULL, 0);
    close(lfd);
    close(ready[0]);
    close(ready[1]);
}

static void test_sender_checks_listener(void **state) {
    (void)state;
    uint64_t nonce = 0;
    int lfd = -1;
    assert_int_equal(cchani_fdpass_listen(SESSION_KEY, SEQ, 2, 4, &nonce, &lfd), 0);
    cchani_fdpass_msg_t m = {SESSION_KEY, 1, SEQ, 0};
    int memfd = memfd_create("mine", MFD_CLOEXEC);
    /* This process listens, but the sender expects rank 2 to be another process. */
    int r = cchani_fdpass_try_send(SESSION_KEY, SEQ, 2, nonce, getpid() + 1, &m, memfd);
    assert_int_equal(r, CCHAN_ERR_PROTOCOL);
    assert_non_null(strstr(cchan_last_error(), "the fd was not sent"));
    /* Its connection, closed without a message, is drained as a stranger's. */
    wanted_pid = getpid() + 1;
    cchani_fdpass_msg_t msg;
    int fd = -1;
    pid_t pid = 0;
    assert_int_equal(cchani_fdpass_try_recv(lfd, 100, want, NULL, &msg, &fd, &pid), 0);
    /* The right pid: it goes through. */
    wanted_pid = getpid();
    assert_int_equal(cchani_fdpass_try_send(SESSION_KEY, SEQ, 2, nonce, getpid(), &m, memfd), 0);
    assert_int_equal(cchani_fdpass_try_recv(lfd, 100, want, NULL, &msg, &fd, &pid), 1);
    close(fd);
    close(memfd);
    close(lfd);
}

static void test_names_unpredictable(void **state) {
    (void)state;
    uint64_t n1 = 0, n2 = 0;
    int a = -1, b = -1;
    assert_int_equal(cchani_fdpass_listen(SESSION_KEY, SEQ, 0, 4, &n1, &a), 0);
    assert_int_equal(cchani_fdpass_listen(SESSION_KEY, SEQ, 0, 4, &n2, &b), 0);
    assert_true(n1 != n2);
    /* A send to a guessed nonce finds no listener. */
    cchani_fdpass_msg_t m = {SESSION_KEY, 1, SEQ, 0};
    int memfd = memfd_create("x", MFD_CLOEXEC);
    assert_int_equal(cchani_fdpass_try_send(SESSION_KEY, SEQ, 0, n1 ^ n2 ^ 1, getpid(), &m, memfd),
                     -ECONNREFUSED);
    close(memfd);
    close(a);
    close(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stranger_refused_sender_taken),
        cmocka_unit_test(test_sender_checks_listener),
        cmocka_unit_test(test_names_unpredictable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
