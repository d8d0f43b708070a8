/* cchan_coll's collectives: check the call, fill its coll_args_t from c->base, pick the algorithm
 * (coll_select.c) and run it (coll_launch.c, coll_ce.c). */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "coll_internal.h"

static int coll_check(cchan_coll_t *c, const void *send, void *recv, cchan_coll_dtype_t dtype,
                      cchan_coll_algo_t algo, const char *where) {
    colli_clear_error();
    if (!c) return colli_error(-EINVAL, where, "coll is NULL");
    c->last_plan = NULL;
    int st = cchan_comm_check(c->comm, where);
    if (st) return st;
    if (!send || !recv) return colli_error(-EINVAL, where, "send and recv must not be NULL");
    if (cchan_coll_dtype_size(dtype) == 0)
        return colli_error(-EINVAL, where,
                           "dtype %d unknown (valid: %d CCHAN_COLL_F32, %d CCHAN_COLL_F16, "
                           "%d CCHAN_COLL_BF16)",
                           (int)dtype, CCHAN_COLL_F32, CCHAN_COLL_F16, CCHAN_COLL_BF16);
    if ((unsigned)algo >= CCHAN_COLL_ALGO_COUNT)
        return colli_error(-EINVAL, where, "algo %d unknown (valid: 0 to %d)", (int)algo,
                           CCHAN_COLL_ALGO_COUNT - 1);
    return 0;
}

/* Elements x size without overflow, and the full-buffer size n times that. */
static int coll_bytes(size_t count, size_t es, size_t mul, size_t *out, const char *where) {
    if (count > SIZE_MAX / es / mul)
        return colli_error(CCHAN_ERR_RANGE, where, "%zu elements of %zu bytes overflow", count, es);
    *out = count * es * mul;
    return 0;
}

/* send and recv of `bytes` each must end inside the address space (the selector and the kernels
 * compute their ends). */
static int coll_ranges(const void *send, size_t send_bytes, const void *recv, size_t recv_bytes,
                       const char *where) {
    if (send_bytes > UINTPTR_MAX - (uintptr_t)send)
        return colli_error(CCHAN_ERR_RANGE, where,
                           "send: %zu bytes at %p run past the end of the address space",
                           send_bytes, send);
    if (recv_bytes > UINTPTR_MAX - (uintptr_t)recv)
        return colli_error(CCHAN_ERR_RANGE, where,
                           "recv: %zu bytes at %p run past the end of the address space",
                           recv_bytes, recv);
    return 0;
}

/* Programmatic dependent launches pay off while launch latency matters and cost large HB kernels a
 * few percent (docs/tuning.md, "Programmatic dependent launch"): calls of more bytes than this
 * launch plainly. */
#define COLL_PDL_MAX_BYTES (2 * COLL_MiB)

/* bytes: the call's full buffer (AllReduce's, AllGather's output, ReduceScatter's input). */
static coll_args_t coll_args(const cchan_coll_t *c, const void *send, void *recv, size_t count,
                             cchan_coll_dtype_t dtype, size_t bytes) {
    coll_args_t a = c->base;
    a.pdl = (uint32_t)(c->param[COLL_P_PDL] && bytes <= COLL_PDL_MAX_BYTES);
    a.send = (const uint8_t *)send;
    a.recv = (uint8_t *)recv;
    a.count = count;
    a.esize = (uint32_t)cchan_coll_dtype_size(dtype);
    return a;
}

/* What every collective does first: checks the arguments, sizes the call (bytes: the full buffer;
 * 0 bytes: nothing to do, *a untouched), runs a loaded plan that fits an AUTO call (then 0 bytes:
 * done), fills *a and picks the algorithm. 0 or a status. */
static int coll_prepare(cchan_coll_t *c, cchan_coll_op_t op, const void *send, void *recv,
                        size_t count, cchan_coll_dtype_t dtype, cchan_coll_algo_t *algo,
                        coll_args_t *a, size_t *bytes, void *stream, const char *where) {
    int st = coll_check(c, send, recv, dtype, *algo, where);
    *bytes = 0;
    const size_t mul = op == CCHAN_COLL_ALLREDUCE ? 1 : (size_t)(c ? c->nranks : 1);
    if (st == 0) st = coll_bytes(count, cchan_coll_dtype_size(dtype), mul, bytes, where);
    if (st || count == 0) return st;
    const size_t per = *bytes / (size_t)c->nranks;
    st = op == CCHAN_COLL_ALLREDUCE   ? coll_ranges(send, *bytes, recv, *bytes, where)
         : op == CCHAN_COLL_ALLGATHER ? coll_ranges(send, per, recv, *bytes, where)
                                      : coll_ranges(send, *bytes, recv, per, where);
    if (st) {
        *bytes = 0;
        return st;
    }
    const uint8_t *s8 = (const uint8_t *)send, *r8 = (const uint8_t *)recv;
    const int inplace = op == CCHAN_COLL_ALLREDUCE   ? s8 == r8
                        : op == CCHAN_COLL_ALLGATHER ? s8 == r8 + (size_t)c->rank * per
                                                     : r8 == s8 + (size_t)c->rank * per;
    if (*algo == CCHAN_COLL_AUTO) {
        /* the selector: a loaded plan or a native algorithm, from the table or the default rule */
        int idx = -1;
        st = colli_choose(c, op, dtype, *bytes, inplace, -1, send, recv, 1, &c->last_choice, &idx);
        if (st) {
            *bytes = 0;
            return st;
        }
        if (idx >= 0) {
            uint64_t in = colli_in_bytes(c, op, *bytes);
            *bytes = 0;
            return colli_plan_run(c, idx, send, recv, (size_t)(in / cchan_coll_dtype_size(dtype)),
                                  dtype, stream, where);
        }
        *algo = c->last_choice.algo;
    } else {
        memset(&c->last_choice, 0, sizeof c->last_choice);
    }
    *a = coll_args(c, send, recv, count, dtype, *bytes);
    a->in_place = inplace;
    return colli_pick(c, op, algo, *bytes, send, recv, a, where);
}

int cchan_coll_allreduce(cchan_coll_t *c, const void *send, void *recv, size_t count,
                         cchan_coll_dtype_t dtype, cchan_coll_algo_t algo, void *stream) {
    static const char *where = "cchan_coll_allreduce";
    coll_args_t a;
    size_t bytes;
    int st = coll_prepare(c, CCHAN_COLL_ALLREDUCE, send, recv, count, dtype, &algo, &a, &bytes,
                          stream, where);
    if (st || bytes == 0) return st;
    const size_t per = bytes / (size_t)c->nranks;
    switch (algo) {
    case CCHAN_COLL_LL_ALLPAIRS:
        return colli_run(c, COLL_K_LL_ALLREDUCE, (int)dtype, &a, c->ll_blocks, stream, where);
    case CCHAN_COLL_SWITCH:
        return colli_run(c, COLL_K_SWITCH_ALLREDUCE, (int)dtype, &a, colli_hb_grid(c, per), stream,
                         where);
    case CCHAN_COLL_CE_ALLPAIRS: return colli_ce_allreduce(c, &a, (int)dtype, stream, where);
    default: break;
    }
    /* zero-copy: read every rank's input, write every rank's output */
    if (colli_zc(c, CCHAN_COLL_ALLREDUCE, bytes, send, recv, &a))
        return colli_run(c, COLL_K_ZC_ALLREDUCE, (int)dtype, &a, colli_zc_grid(c, per), stream,
                         where);
    return colli_run(c, COLL_K_HB_ALLREDUCE, (int)dtype, &a, colli_hb_grid(c, per), stream, where);
}

int cchan_coll_allgather(cchan_coll_t *c, const void *send, void *recv, size_t sendcount,
                         cchan_coll_dtype_t dtype, cchan_coll_algo_t algo, void *stream) {
    static const char *where = "cchan_coll_allgather";
    coll_args_t a;
    size_t bytes;
    int st = coll_prepare(c, CCHAN_COLL_ALLGATHER, send, recv, sendcount, dtype, &algo, &a, &bytes,
                          stream, where);
    if (st || bytes == 0) return st;
    const size_t per = bytes / (size_t)c->nranks;
    switch (algo) {
    case CCHAN_COLL_LL_ALLPAIRS:
        return colli_run(c, COLL_K_LL_ALLGATHER, (int)dtype, &a, c->ll_blocks, stream, where);
    case CCHAN_COLL_CE_ALLPAIRS: return colli_ce_allgather(c, &a, stream, where);
    default: break;
    }
    /* zero-copy: store this rank's block straight into every rank's recv */
    if (colli_zc(c, CCHAN_COLL_ALLGATHER, bytes, recv, recv, &a)) {
        a.sm_len = per;
        return colli_run(c, COLL_K_ZC_ALLGATHER, (int)dtype, &a, colli_zc_grid(c, per), stream,
                         where);
    }
    return colli_run(c, COLL_K_HB_ALLGATHER, (int)dtype, &a, colli_hb_grid(c, per), stream, where);
}

int cchan_coll_reducescatter(cchan_coll_t *c, const void *send, void *recv, size_t recvcount,
                             cchan_coll_dtype_t dtype, cchan_coll_algo_t algo, void *stream) {
    static const char *where = "cchan_coll_reducescatter";
    coll_args_t a;
    size_t bytes;
    int st = coll_prepare(c, CCHAN_COLL_REDUCESCATTER, send, recv, recvcount, dtype, &algo, &a,
                          &bytes, stream, where);
    if (st || bytes == 0) return st;
    const size_t per = bytes / (size_t)c->nranks;
    if (algo == CCHAN_COLL_LL_ALLPAIRS)
        return colli_run(c, COLL_K_LL_REDUCESCATTER, (int)dtype, &a, c->ll_blocks, stream, where);
    /* zero-copy: read this rank's block from every rank's send */
    if (colli_zc(c, CCHAN_COLL_REDUCESCATTER, bytes, send, send, &a))
        return colli_run(c, COLL_K_ZC_REDUCESCATTER, (int)dtype, &a, colli_zc_grid(c, per), stream,
                         where);
    return colli_run(c, COLL_K_HB_REDUCESCATTER, (int)dtype, &a, colli_hb_grid(c, per), stream,
                     where);
}
