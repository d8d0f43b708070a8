/* Makes pidfd_getfd fail with EPERM in this process (a seccomp filter), as Yama ptrace_scope 1 or
 * a container's policy would, so that cchan_mem_exchange must pass fds over SCM_RIGHTS. Exits 77
 * where no filter can be installed. */
#ifndef CCHAN_TEST_BLOCK_PIDFD_H
#define CCHAN_TEST_BLOCK_PIDFD_H

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#if defined(__x86_64__)
#define AUDIT_ARCH_HERE AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define AUDIT_ARCH_HERE AUDIT_ARCH_AARCH64
#endif

static inline void block_pidfd_getfd(void) {
#if defined(AUDIT_ARCH_HERE) && defined(SYS_pidfd_getfd)
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_HERE, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_getfd, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof filter / sizeof filter[0]), filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0)
        return;
    fprintf(stderr, "SKIP: cannot install a seccomp filter (%s)\n", strerror(errno));
#else
    fprintf(stderr, "SKIP: no seccomp filter for this architecture\n");
#endif
    exit(77);
}

#endif /* CCHAN_TEST_BLOCK_PIDFD_H */
