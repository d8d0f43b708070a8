/* Helpers shared by the bootstrap tests. */
#ifndef CCHAN_TEST_BOOT_TEST_H
#define CCHAN_TEST_BOOT_TEST_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cchan/cchan.h"

/* The rank that failing checks report, set by the test once known. */
static int boot_test_rank = -1;

#define BOOT_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s (last error: %s)\n", boot_test_rank, \
                    __FILE__, __LINE__, #cond, cchan_last_error());                                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define BOOT_OK(call)                                                                              \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_) {                                                                                 \
            fprintf(stderr, "rank %d: %s:%d: %s returned %d (%s): %s\n", boot_test_rank, __FILE__, \
                    __LINE__, #call, rc_, cchan_strerror(rc_), cchan_last_error());                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static inline double boot_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int boot_env_int(const char *name) {
    const char *v = getenv(name);
    if (!v) {
        fprintf(stderr, "%s is not set: run this test through cchan-run\n", name);
        exit(1);
    }
    return atoi(v);
}

#endif /* CCHAN_TEST_BOOT_TEST_H */
