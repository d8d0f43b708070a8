/* cchan-coll-bench --plan: an execution plan (cchan_exec), the native cchan_coll kernel of -a (auto
 * by default) and NCCL, each size side by side in one run, on the same registered buffers; the
 * plan's output is checked against the host reference first (AllReduce, AllGather,
 * ReduceScatter). */
#include <stdio.h>
#include <string.h>

#include "coll_bench.h"

#ifdef CCB_HAVE_EXEC
typedef struct plan_arg {
    op_arg_t a; /* first: ccb_check_op() and the native launchers take it */
    cchan_exec_t *ex;
    size_t in_count; /* elements of one rank's input */
} plan_arg_t;

static int launch_plan(void *p, void *stream) {
    plan_arg_t *pa = (plan_arg_t *)p;
    int st = cchan_exec_run(pa->ex, pa->a.send, pa->a.recv, pa->in_count,
                            (cchan_exec_dtype_t)pa->a.dtype, CCHAN_EXEC_SUM, stream);
    if (st < 0)
        fprintf(stderr, "cchan-coll-bench: rank %d: plan run (%zu elements): %s: %s\n",
                pa->a.ctx->rank, pa->in_count, cchan_strerror(st), cchan_exec_last_error());
    return st;
}

/* What one --plan run shares across its dtypes and sizes. */
typedef struct plan_run {
    ccb_ctx_t *ctx;
    ccb_dev_t *dev;
    cchan_coll_t *coll;
    cchan_exec_t *ex;
    cchan_exec_plan_info_t in;
    unsigned op; /* the native op of the plan's collective; 0: none */
    cchan_coll_algo_t algo;
    void *sendbuf, *recvbuf;
    size_t bufbytes;
} plan_run_t;

/* plan/native time ratios over one dtype's sizes */
typedef struct plan_ratio {
    double sum, max;
    uint64_t max_at;
    int n;
} plan_ratio_t;

static unsigned plan_native_op(cchan_exec_collective_t c) {
    return c == CCHAN_EXEC_ALLREDUCE       ? CCB_OP_ALLREDUCE
           : c == CCHAN_EXEC_ALLGATHER     ? CCB_OP_ALLGATHER
           : c == CCHAN_EXEC_REDUCESCATTER ? CCB_OP_REDUCESCATTER
                                           : 0;
}

/* The launch arguments of one size (ib input bytes, ob output bytes), pointers not yet set. */
static void plan_arg_init(const plan_run_t *pr, int dtype, uint64_t ib, uint64_t ob, size_t es,
                          plan_arg_t *pa) {
    const unsigned op = pr->op;
    memset(pa, 0, sizeof *pa);
    pa->a.ctx = pr->ctx;
    pa->a.coll = pr->coll;
    pa->a.op = op ? op : CCB_OP_ALLREDUCE;
    pa->a.dtype = dtype;
    pa->a.algo = (int)pr->algo;
    if (op && pr->algo == CCHAN_COLL_AUTO) {
        /* the native kernel AUTO would pick: never a loaded plan (CCHAN_COLL_PLANS) */
        cchan_coll_op_t cop = op == CCB_OP_ALLREDUCE   ? CCHAN_COLL_ALLREDUCE
                              : op == CCB_OP_ALLGATHER ? CCHAN_COLL_ALLGATHER
                                                       : CCHAN_COLL_REDUCESCATTER;
        uint64_t full = ob > ib ? ob : ib;
        cchan_coll_algo_t na =
            cchan_coll_select_buffers(pr->coll, cop, full, pr->sendbuf, pr->recvbuf);
        pa->a.algo = (int)(na == CCHAN_COLL_PLAN ? cchan_coll_select(pr->coll, cop, full) : na);
    }
    pa->ex = pr->ex;
    pa->in_count = (size_t)(ib / es);
    pa->a.count =
        op == CCB_OP_REDUCESCATTER ? pa->in_count / (size_t)pr->ctx->nranks : pa->in_count;
}

/* Collective: the plan's output checked on every rank; -1 when not checked, else the wrong and
 * out-of-bounds elements summed over the ranks. */
static int64_t plan_check(const plan_run_t *pr, plan_arg_t *pa) {
    ccb_ctx_t *ctx = pr->ctx;
    if (!(ctx->opt.check && pr->op)) return -1;
    int64_t oob = -1;
    int64_t wrong = ccb_check_op(ctx, pr->dev, &pa->a, pr->in.inplace, pr->sendbuf, pr->recvbuf,
                                 &oob, launch_plan);
    int64_t tw = ccb_sum_over_ranks(ctx, wrong < 0 ? 1 : wrong);
    int64_t to = ccb_sum_over_ranks(ctx, oob < 0 ? 0 : oob);
    ctx->wrong_total += tw;
    ctx->oob_total += to;
    return tw + to;
}

static void plan_set_ptrs(const plan_run_t *pr, size_t es, plan_arg_t *pa) {
    if (pr->in.inplace) {
        const void *sp;
        void *rp;
        ccb_in_place_ptrs(pa->a.op, pr->recvbuf, pa->a.count, es, pr->ctx->rank, &sp, &rp);
        pa->a.send = sp;
        pa->a.recv = rp;
    } else {
        pa->a.send = pr->sendbuf;
        pa->a.recv = pr->recvbuf;
    }
}

/* One size: check, time the plan, the native kernel and NCCL, print the row; the plan/native
 * ratio goes into ratio. Every rank skips the same sizes. */
static void bench_plan_size(const plan_run_t *pr, int dtype, uint64_t size, plan_ratio_t *ratio) {
    ccb_ctx_t *ctx = pr->ctx;
    const ccb_opts_t *o = &ctx->opt;
    const unsigned op = pr->op;
    size_t es = cchan_coll_dtype_size((cchan_coll_dtype_t)dtype);
    /* nccl-tests' size: the larger buffer (AllGather: the output) */
    uint64_t ib = pr->in.collective == CCHAN_EXEC_ALLGATHER ? size / (uint64_t)ctx->nranks : size;
    ib = ib / pr->in.granularity * pr->in.granularity;
    uint64_t ob = ib / pr->in.in_chunks * pr->in.out_chunks;
    if (ib == 0 || ib % es || ob + CCB_GUARD > pr->bufbytes || ib + CCB_GUARD > pr->bufbytes)
        return;
    plan_arg_t pa;
    plan_arg_init(pr, dtype, ib, ob, es, &pa);
    int64_t wrong = plan_check(pr, &pa);
    plan_set_ptrs(pr, es, &pa);
    int graph = o->graph_launches > 0 && size <= o->graph_max;
    double t_plan = ccb_time_op(ctx, pr->dev, &pa, launch_plan, graph);
    double t_nat = -1, t_nccl = -1;
    if (op && cchan_coll_supported(pr->coll,
                                   (cchan_coll_op_t)(op == CCB_OP_ALLREDUCE   ? 0
                                                     : op == CCB_OP_ALLGATHER ? 1
                                                                              : 2),
                                   pr->algo, ob > ib ? ob : ib))
        t_nat = ccb_time_op(ctx, pr->dev, &pa.a, ccb_launch_cchan, graph);
    if (op && ctx->have_nccl) t_nccl = ccb_time_op(ctx, pr->dev, &pa.a, ccb_launch_nccl, graph);
    char chk[16];
    snprintf(chk, sizeof chk, "%s", wrong < 0 ? "-" : wrong ? "WRONG" : "ok");
    double r_nat = t_plan > 0 && t_nat > 0 ? t_plan / t_nat : 0;
    double r_nccl = t_plan > 0 && t_nccl > 0 ? t_plan / t_nccl : 0;
    if (r_nat > 0) {
        ratio->sum += r_nat;
        ratio->n++;
        if (r_nat > ratio->max) {
            ratio->max = r_nat;
            ratio->max_at = size;
        }
    }
    if (wrong > 0) ctx->failed = 1;
    ccb_printf(ctx, "  %12llu %12llu %6s %10.2f %10.2f %10.2f %11.3f %11.3f\n",
               (unsigned long long)size, (unsigned long long)ib, chk, t_plan, t_nat, t_nccl, r_nat,
               r_nccl);
}

static void bench_plan_dtype(const plan_run_t *pr, int dtype, const uint64_t *sizes, int nsizes) {
    ccb_ctx_t *ctx = pr->ctx;
    const cchan_exec_plan_info_t *in = &pr->in;
    const unsigned op = pr->op;
    ccb_printf(ctx,
               "#\n# plan %s (%s, %d blocks x %d instances%s) against cchan_coll %s%s and NCCL, "
               "%s, %d ranks; times in us\n",
               in->name, cchan_exec_collective_name(in->collective), (int)in->nblocks,
               cchan_exec_instances(pr->ex), in->inplace ? ", in place" : "",
               op ? cchan_coll_algo_name(pr->algo) : "(none)",
               op ? "" : " (no native kernel for this collective)", ccb_dtype_name(dtype),
               ctx->nranks);
    ccb_printf(ctx, "# %12s %12s %6s %10s %10s %10s %11s %11s\n", "size", "in_bytes", "check",
               "plan", "native", "nccl", "plan/native", "plan/nccl");
    plan_ratio_t ratio = {0, 0, 0, 0};
    for (int si = 0; si < nsizes; si++) bench_plan_size(pr, dtype, sizes[si], &ratio);
    if (ratio.n)
        ccb_printf(ctx, "# plan/native: mean %.3f over %d sizes, max %.3f at %llu bytes (%s %s)\n",
                   ratio.sum / ratio.n, ratio.n, ratio.max, (unsigned long long)ratio.max_at,
                   in->name, ccb_dtype_name(dtype));
}

void ccb_bench_plan(ccb_ctx_t *ctx, ccb_dev_t *dev, cchan_coll_t *coll, const char *file,
                    void *sendbuf, void *recvbuf, size_t bufbytes) {
    const ccb_opts_t *o = &ctx->opt;
    cchan_exec_plan_t *plan;
    int st = cchan_exec_plan_load_file(file, &plan);
    if (st < 0) ccb_die(ctx, "--plan %s: %s", file, cchan_exec_last_error());
    plan_run_t pr;
    memset(&pr, 0, sizeof pr);
    cchan_exec_plan_info(plan, &pr.in);
    st = cchan_exec_create(ctx->comm, plan, &pr.ex);
    if (st < 0) ccb_die(ctx, "cchan_exec_create(%s): %s", file, cchan_exec_last_error());
    ccb_check_status(ctx, cchan_exec_register(pr.ex, sendbuf, bufbytes), "cchan_exec_register");
    ccb_check_status(ctx, cchan_exec_register(pr.ex, recvbuf, bufbytes), "cchan_exec_register");
    pr.ctx = ctx;
    pr.dev = dev;
    pr.coll = coll;
    pr.op = plan_native_op(pr.in.collective);
    pr.algo = o->algo >= 0 ? (cchan_coll_algo_t)o->algo : CCHAN_COLL_AUTO;
    pr.sendbuf = sendbuf;
    pr.recvbuf = recvbuf;
    pr.bufbytes = bufbytes;
    uint64_t sizes[128];
    int nsizes = ccb_sweep(o, sizes, 128);
    for (int d = 0; d < o->ndtypes; d++) bench_plan_dtype(&pr, o->dtypes[d], sizes, nsizes);
    dev->sync();
    ccb_check_status(ctx, cchan_bootstrap_barrier(ctx->bs), "barrier");
    cchan_exec_deregister(pr.ex, sendbuf);
    cchan_exec_deregister(pr.ex, recvbuf);
    ccb_check_status(ctx, cchan_exec_destroy(pr.ex), "cchan_exec_destroy");
    cchan_exec_plan_free(plan);
}

#else
void ccb_bench_plan(ccb_ctx_t *ctx, ccb_dev_t *dev, cchan_coll_t *coll, const char *file,
                    void *sendbuf, void *recvbuf, size_t bufbytes) {
    (void)dev, (void)coll, (void)sendbuf, (void)recvbuf, (void)bufbytes;
    ccb_die(ctx, "--plan %s: this build has no cchan_exec (jansson was missing)", file);
}
#endif
