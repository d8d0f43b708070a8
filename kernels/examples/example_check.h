/* The examples' error checks: a failing call prints what failed and why and makes main return 1.
 * Copy it with the example you start from. */
#ifndef CCHAN_EXAMPLE_CHECK_H
#define CCHAN_EXAMPLE_CHECK_H

#include <stdio.h>

#include "cchan/cchan.h"

/* A cchan call: 0 or a negative status, with the reason in cchan_last_error(). */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        int s_ = (call);                                                                           \
        if (s_ < 0) {                                                                              \
            fprintf(stderr, "%s: %s: %s\n", #call, cchan_strerror(s_), cchan_last_error());        \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#ifdef __CUDACC__
#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                            \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#endif

#endif /* CCHAN_EXAMPLE_CHECK_H */
