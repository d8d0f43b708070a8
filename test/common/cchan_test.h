/* Checks shared by the host-side tests (test/common is on every test's include path).
 *
 *   CT_OK(call)          a cchan call (or any library on it) returning 0 or a negative status:
 *                        on failure prints the call, the status and cchan_last_error() (the one
 *                        message of the runtime and every library) and exits 1
 *   CT_REQUIRE(cond,...) a condition that must hold for the test to go on: message, exit 1
 *   CT_ASSERT(cond)      the same, the condition its own message
 *   CT_EXPECT(cond,...)  a checked result: counted in ct_checks; a failure is counted in
 *                        ct_failures and printed (the first CT_MAX_PRINTED), and the test goes on
 *
 * Messages start with "[r<rank>] " once the test sets ct_rank (multi-rank tests), and name the
 * file and line. A test ends with ct_failures == 0 or exits non-zero. */
#ifndef CCHAN_TEST_COMMON_H
#define CCHAN_TEST_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "cchan/cchan.h"

#define CT_MAX_PRINTED 20

#if defined(__GNUC__) || defined(__clang__)
#define CT_UNUSED __attribute__((unused))
#else
#define CT_UNUSED
#endif

static int ct_rank = -1;
static CT_UNUSED int ct_checks, ct_failures;

static inline void ct_where(const char *file, int line) {
    if (ct_rank >= 0) fprintf(stderr, "[r%d] ", ct_rank);
    fprintf(stderr, "%s:%d: ", file, line);
}

#define CT_OK(call)                                                                                \
    do {                                                                                           \
        int ct_st_ = (call);                                                                       \
        if (ct_st_ < 0) {                                                                          \
            ct_where(__FILE__, __LINE__);                                                          \
            fprintf(stderr, "%s = %d (%s): %s\n", #call, ct_st_, cchan_strerror(ct_st_),           \
                    cchan_last_error());                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define CT_REQUIRE(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            ct_where(__FILE__, __LINE__);                                                          \
            fprintf(stderr, "required: %s: ", #cond);                                              \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define CT_ASSERT(cond) CT_REQUIRE(cond, "%s", "does not hold")

#define CT_EXPECT(cond, ...)                                                                       \
    do {                                                                                           \
        ct_checks++;                                                                               \
        if (!(cond)) {                                                                             \
            if (ct_failures++ < CT_MAX_PRINTED) {                                                  \
                ct_where(__FILE__, __LINE__);                                                      \
                fprintf(stderr, "FAIL: ");                                                         \
                fprintf(stderr, __VA_ARGS__);                                                      \
                fprintf(stderr, "\n");                                                             \
            }                                                                                      \
        }                                                                                          \
    } while (0)

#endif /* CCHAN_TEST_COMMON_H */
