/* cchan_exec: what a plan means, checked at load (docs/plan-format.md, "What the loader proves").
 *
 * The structural checks of exec_plan.c keep every index in range; they cannot tell a plan that
 * computes the wrong thing, deadlocks, or pairs a wait of one run with a signal of the next. This
 * file runs the plan symbolically, every rank at once, as the DSL's simulator and verifier do
 * (python/cchan/dsl/simulate.py, verify.py), and refuses it unless:
 *
 *  - every block of every rank finishes (no deadlock), and every signal, semaphore release and
 *    barrier is consumed in the run that made it (nothing is left over for the next run);
 *  - no access races: every read of a unit another block or rank wrote, every overwrite of a unit
 *    another one read or wrote, is ordered after it by a signal/wait, semaphore, barrier or LL
 *    packet (vector clocks, one per block and one per rank's caller, who owns the rank's input and
 *    output between runs); within a block, an operation that reads or overwrites what an earlier
 *    one touched has a block barrier in between; a port put's source stays unchanged and its
 *    destination unread until a signal or flush of its channel by its block;
 *  - each LL packet area is written at most once per run and read only as packets;
 *  - every output chunk holds exactly the collective's result of this run's inputs.
 *
 * Runs are simulated back to back (3), so a peer of the next run writing scratch this rank still
 * reads, or a stale packet half, is a race. Chunks are cut into a few units (one unit stands for
 * `align` bytes) at two chunk lengths, so that loops run one and two iterations and thread-block
 * groups split chunks unevenly; every operation maps a chunk's byte x to byte x, so the data flow
 * does not depend on the length beyond that. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"

#define VF_RUNS 3
#define VF_MAX_MODEL (256u << 20) /* bytes of model state: larger plans are refused */

typedef struct vq {
    int *v;
    int head, len, cap;
} vq_t;

typedef struct vpend { /* a port put issued, not yet completed by a signal or flush */
    int16_t ch;
    uint32_t src, dst;
    int32_t src_actor;
    uint32_t src_time;
    uint32_t val; /* offset of the captured value in pvals */
} vpend_t;

typedef struct vactor {
    int rank, block; /* block -1: the rank's caller */
    uint32_t pc, loop_first, loop_last, it, in_loop, done, arrived, lastsync;
    vpend_t *pend;
    uint32_t npend, cappend;
} vactor_t;

typedef struct vm {
    const cchan_exec_plan_t *p;
    const char *where;
    uint32_t L, U, iters, run;
    uint32_t na, nblk;  /* actors: blocks of every rank, then one caller per rank */
    uint32_t *vc;       /* na x na */
    int *actor_of_rank; /* first block actor of each rank */
    vactor_t *act;
    uint32_t vs; /* value bytes: counts per (run, rank, input chunk), then garbage */
    uint64_t nunits;
    uint64_t base[EXEC_MAX_RANKS][EXEC_NBUF];
    uint8_t *val;
    int32_t *w_actor;
    uint32_t *w_time, *w_flag;
    int32_t *w_snap;
    uint32_t *reads; /* nunits x na: the latest read time of each actor since the last write */
    uint32_t *snaps; /* clock snapshots, na each */
    uint32_t nsnap, capsnap;
    vq_t *sigq; /* per (rank, channel): the clocks of signals to this end not yet waited for */
    vq_t *semq; /* per (rank, semaphore) */
    uint32_t chbase[EXEC_MAX_RANKS + 1], sembase[EXEC_MAX_RANKS + 1];
    int *other; /* per (rank, channel): the index of the other end's channel on the peer */
    uint32_t barriers[EXEC_MAX_RANKS]; /* barriers each rank passed in this run */
    int bar_block[EXEC_MAX_RANKS];     /* the block of each rank that runs its barriers */
    int *bar_snap;                     /* [k][rank] arrival clocks of barrier k */
    uint32_t nbar_cap;
    uint8_t *pvals;
    uint32_t npvals, cappvals;
    uint8_t *tmp, *tmp2;
    uint32_t *xk, *xin; /* (chunk k of the ref, unit in the chunk) of this op's units */
    uint32_t nx;
} vm_t;

static int vm_err(vm_t *m, const vactor_t *a, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int vm_err(vm_t *m, const vactor_t *a, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (a && a->block >= 0)
        return execi_error(
            -EINVAL, m->where, "ranks[%d].threadblocks[%d].ops[%u] (%s): %s", a->rank, a->block,
            a->pc,
            execi_op_name(m->p->ranks[a->rank]
                              .ops[m->p->ranks[a->rank].blocks[a->block].op_first + a->pc]
                              .op),
            msg);
    return execi_error(-EINVAL, m->where, "%s", msg);
}

static int grow(void **p, uint32_t *cap, uint32_t need, size_t elem) {
    if (need <= *cap) return 0;
    uint32_t n = *cap ? *cap * 2 : 64;
    while (n < need) n *= 2;
    void *q = realloc(*p, (size_t)n * elem);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

static int snap(vm_t *m, uint32_t a) {
    if (grow((void **)&m->snaps, &m->capsnap, (m->nsnap + 1) * m->na, sizeof(uint32_t)))
        return -ENOMEM;
    memcpy(m->snaps + (size_t)m->nsnap * m->na, m->vc + (size_t)a * m->na,
           m->na * sizeof(uint32_t));
    return (int)m->nsnap++;
}

static void join(vm_t *m, uint32_t a, int s) {
    uint32_t *d = m->vc + (size_t)a * m->na;
    const uint32_t *c = m->snaps + (size_t)s * m->na;
    for (uint32_t i = 0; i < m->na; i++)
        if (c[i] > d[i]) d[i] = c[i];
}

static int q_push(vq_t *q, int s) {
    if (q->head + q->len + 1 > q->cap) {
        if (q->head) {
            memmove(q->v, q->v + q->head, (size_t)q->len * sizeof(int));
            q->head = 0;
        }
        if (q->len + 1 > q->cap) {
            int n = q->cap ? q->cap * 2 : 8;
            int *v = (int *)realloc(q->v, (size_t)n * sizeof(int));
            if (!v) return -ENOMEM;
            q->v = v;
            q->cap = n;
        }
    }
    q->v[q->head + q->len++] = s;
    return 0;
}
static int q_pop(vq_t *q) {
    int s = q->v[q->head++];
    q->len--;
    return s;
}

/* ------------------------------------------------------------------ units and values */

static uint32_t chunk_units(const vm_t *m, int buf) {
    return buf == EXEC_BUF_SCRATCH ? m->L * m->p->scratch_factor : m->L;
}

static uint64_t unit_of(const vm_t *m, int rank, int buf, uint32_t chunk, uint32_t u) {
    uint64_t half = 0;
    if (buf == EXEC_BUF_SCRATCH && m->p->ll_double_buffer)
        half = (uint64_t)(m->run & 1u) * m->p->ranks[rank].scratch_chunks;
    return m->base[rank][buf] + (half + chunk) * chunk_units(m, buf) + u;
}

static uint8_t *val_of(vm_t *m, uint64_t u) { return m->val + u * m->vs; }

/* the value of input chunk c of rank r in run e */
static void input_val(vm_t *m, uint8_t *v, uint32_t e, int r, uint32_t c) {
    memset(v, 0, m->vs);
    v[((size_t)e * m->p->nranks + (size_t)r) * m->p->buf_chunks[EXEC_BUF_INPUT] + c] = 1;
}

static void add_val(const vm_t *m, uint8_t *acc, const uint8_t *v) {
    for (uint32_t i = 0; i + 1 < m->vs; i++) {
        unsigned s = (unsigned)acc[i] + v[i];
        acc[i] = (uint8_t)(s > 255 ? 255 : s);
    }
    acc[m->vs - 1] |= v[m->vs - 1];
}

/* What output chunk c of rank r holds after run e; 0 when the collective says nothing (custom). */
static int expect_val(vm_t *m, uint8_t *v, uint32_t e, int r, uint32_t c) {
    const cchan_exec_plan_t *p = m->p;
    uint32_t in = p->buf_chunks[EXEC_BUF_INPUT], n = (uint32_t)p->nranks;
    memset(v, 0, m->vs);
    switch (p->collective) {
    case CCHAN_EXEC_ALLREDUCE:
        for (uint32_t q = 0; q < n; q++) v[((size_t)e * n + q) * in + c] = 1;
        return 1;
    case CCHAN_EXEC_ALLGATHER: v[((size_t)e * n + c / in) * in + c % in] = 1; return 1;
    case CCHAN_EXEC_REDUCESCATTER: {
        uint32_t out = p->buf_chunks[EXEC_BUF_OUTPUT];
        for (uint32_t q = 0; q < n; q++) v[((size_t)e * n + q) * in + (uint32_t)r * out + c] = 1;
        return 1;
    }
    case CCHAN_EXEC_ALLTOALL: {
        uint32_t per = in / n;
        v[((size_t)e * n + c / per) * in + (uint32_t)r * per + c % per] = 1;
        return 1;
    }
    case CCHAN_EXEC_BROADCAST: v[((size_t)e * n + (uint32_t)p->root) * in + c] = 1; return 1;
    default: return 0;
    }
}

static uint32_t *reads_of(vm_t *m, uint64_t u) { return m->reads + u * m->na; }

static const char *buf_name(int b) {
    return b == EXEC_BUF_INPUT ? "input" : b == EXEC_BUF_OUTPUT ? "output" : "scratch";
}

/* where unit u lies, for messages */
static void unit_name(const vm_t *m, uint64_t u, char *s, size_t n) {
    for (int r = m->p->nranks - 1; r >= 0; r--)
        for (int b = EXEC_NBUF - 1; b >= 0; b--)
            if (u >= m->base[r][b]) {
                uint64_t off = u - m->base[r][b];
                snprintf(s, n, "%s chunk %llu of rank %d", buf_name(b),
                         (unsigned long long)(off / chunk_units(m, b) %
                                              (b == EXEC_BUF_SCRATCH
                                                   ? (m->p->ranks[r].scratch_chunks
                                                          ? m->p->ranks[r].scratch_chunks
                                                          : 1)
                                                   : m->p->buf_chunks[b])),
                         r);
                return;
            }
    snprintf(s, n, "unit %llu", (unsigned long long)u);
}

static const char *who(const vm_t *m, int32_t actor, char *s, size_t n) {
    const vactor_t *a = &m->act[actor];
    if (a->block < 0)
        snprintf(s, n,
                 "rank %d's caller (the buffer is the caller's until the rank starts a run "
                 "and again once it has finished)",
                 a->rank);
    else
        snprintf(s, n, "rank %d block %d", a->rank, a->block);
    return s;
}

/* actor a (op time t) reads unit u; packet: as an LL packet of this run */
static int rd(vm_t *m, uint32_t a, uint32_t t, uint64_t u, int packet, uint8_t *out) {
    vactor_t *A = &m->act[a];
    const uint32_t *vc = m->vc + (size_t)a * m->na;
    char un[96], wn[160];
    int32_t w = m->w_actor[u];
    if (packet) {
        if (m->w_flag[u] != m->run + 1)
            return vm_err(m, A, "reads %s as LL packets of this run, which no op wrote",
                          (unit_name(m, u, un, sizeof un), un));
        join(m, a, m->w_snap[u]);
    } else {
        unit_name(m, u, un, sizeof un);
        if (m->w_flag[u])
            return vm_err(m, A, "reads %s as plain data, but it holds LL packets", un);
        if (w >= 0 && (uint32_t)w != a && vc[w] < m->w_time[u])
            return vm_err(m, A, "reads %s, which %s wrote without synchronizing with this block",
                          un, who(m, w, wn, sizeof wn));
        if (w >= 0 && (uint32_t)w == a && m->w_time[u] > A->lastsync && m->w_time[u] != t &&
            A->block >= 0)
            return vm_err(m, A,
                          "reads %s, which an earlier op of this block wrote with no block "
                          "barrier (sync) in between",
                          un);
    }
    reads_of(m, u)[a] = t;
    if (out) memcpy(out, val_of(m, u), m->vs);
    return 0;
}

static int wr(vm_t *m, uint32_t a, uint32_t t, uint64_t u, const uint8_t *v, uint32_t flag,
              int sn) {
    vactor_t *A = &m->act[a];
    const uint32_t *vc = m->vc + (size_t)a * m->na;
    char un[96], wn[160];
    int32_t w = m->w_actor[u];
    unit_name(m, u, un, sizeof un);
    if (flag && m->w_flag[u] == flag)
        return vm_err(m, A, "writes LL packets to %s a second time in one run", un);
    if (w >= 0 && (uint32_t)w != a && vc[w] < m->w_time[u])
        return vm_err(m, A, "writes %s, which %s also writes, unordered", un,
                      who(m, w, wn, sizeof wn));
    if (w >= 0 && (uint32_t)w == a && m->w_time[u] > A->lastsync && m->w_time[u] != t &&
        A->block >= 0)
        return vm_err(m, A,
                      "overwrites %s, which an earlier op of this block wrote, with no block "
                      "barrier (sync) in between",
                      un);
    uint32_t *rs = reads_of(m, u);
    for (uint32_t x = 0; x < m->na; x++) {
        if (!rs[x]) continue;
        if (x != a && rs[x] > vc[x])
            return vm_err(m, A, "overwrites %s, which %s reads, unordered", un,
                          who(m, (int32_t)x, wn, sizeof wn));
        if (x == a && rs[x] > A->lastsync && rs[x] != t && A->block >= 0)
            return vm_err(m, A,
                          "overwrites %s, which an earlier op of this block read, with no block "
                          "barrier (sync) in between",
                          un);
    }
    memset(rs, 0, m->na * sizeof(uint32_t));
    memcpy(val_of(m, u), v, m->vs);
    m->w_actor[u] = (int32_t)a;
    m->w_time[u] = t;
    m->w_flag[u] = flag;
    m->w_snap[u] = sn;
    return 0;
}

/* ------------------------------------------------------------------ one op */

static const exec_op_t *op_at(const vm_t *m, const vactor_t *A, uint32_t pc) {
    const exec_rank_desc_t *rk = &m->p->ranks[A->rank];
    return &rk->ops[rk->blocks[A->block].op_first + pc];
}
static const exec_ref_t *ref_at(const vm_t *m, const vactor_t *A, const exec_op_t *o, int j) {
    const exec_rank_desc_t *rk = &m->p->ranks[A->rank];
    return &rk->refs[rk->blocks[A->block].ref_first + o->ref + (uint32_t)j];
}

/* the (chunk, unit) pairs of this op in this iteration, this block's part of the group */
static void op_range(vm_t *m, const vactor_t *A, const exec_op_t *o, const exec_ref_t *r0) {
    uint32_t s0 = A->in_loop ? A->it * m->U : 0;
    uint32_t seg = A->in_loop ? (s0 + m->U < m->L ? m->U : m->L - s0) : m->L;
    uint64_t total = (uint64_t)r0->count * seg, p0 = 0, p1 = total;
    if (o->tbg_size > 1) {
        uint64_t part = (total + o->tbg_size - 1) / o->tbg_size;
        p0 = (uint64_t)o->tbg_index * part;
        if (p0 > total) p0 = total;
        p1 = p0 + part < total ? p0 + part : total;
    }
    m->nx = 0;
    for (uint64_t x = p0; x < p1; x++) {
        m->xk[m->nx] = (uint32_t)(x / seg);
        m->xin[m->nx++] = s0 + (uint32_t)(x % seg);
    }
}

static uint64_t ref_unit(const vm_t *m, const vactor_t *A, const exec_ref_t *f, uint32_t i,
                         int packet, int second) {
    int owner = f->ch >= 0 ? m->p->ranks[A->rank].ch[f->ch].peer : A->rank;
    uint32_t chunk = f->chunk + m->xk[i] * f->stride;
    uint32_t u = m->xin[i];
    if (packet) u = 2 * u + (uint32_t)second;
    return unit_of(m, owner, f->buf, chunk, u);
}

static int packets_ready(const vm_t *m, const vactor_t *A, const exec_op_t *o) {
    for (int j = o->op == EXEC_OP_READ_PACKETS ? 0 : 1; j < o->nsrc; j++) {
        const exec_ref_t *f = ref_at(m, A, o, j);
        for (uint32_t i = 0; i < m->nx; i++)
            if (m->w_flag[ref_unit(m, A, f, i, 1, 0)] != m->run + 1 ||
                m->w_flag[ref_unit(m, A, f, i, 1, 1)] != m->run + 1)
                return 0;
    }
    return 1;
}

/* completes actor a's pending port puts on channel ch (all when ch < 0: none may be left) */
static int port_complete(vm_t *m, uint32_t a, uint32_t t, int ch) {
    vactor_t *A = &m->act[a];
    uint32_t keep = 0;
    for (uint32_t i = 0; i < A->npend; i++) {
        vpend_t *q = &A->pend[i];
        if (q->ch != ch) {
            A->pend[keep++] = *q;
            continue;
        }
        char un[96];
        if (m->w_actor[q->src] != q->src_actor || m->w_time[q->src] != q->src_time)
            return vm_err(m, A,
                          "a port put's source (%s) was overwritten before a signal or flush "
                          "of channel %d completed the put",
                          (unit_name(m, q->src, un, sizeof un), un), ch);
        int st = wr(m, a, t, q->dst, m->pvals + q->val, 0, -1);
        if (st) return st;
    }
    A->npend = keep;
    return 0;
}

static int data_op(vm_t *m, uint32_t a, uint32_t t, const exec_op_t *o) {
    vactor_t *A = &m->act[a];
    const exec_ref_t *d = ref_at(m, A, o, o->nsrc);
    int port = o->ch >= 0 && m->p->ranks[A->rank].ch[o->ch].type == EXEC_CH_PORT;
    int st;
    for (uint32_t i = 0; i < m->nx; i++) {
        switch (o->op) {
        case EXEC_OP_PUT:
        case EXEC_OP_PUT_SIGNAL:
        case EXEC_OP_PUT_SIGNAL_FLUSH:
        case EXEC_OP_GET:
        case EXEC_OP_COPY: {
            uint64_t s = ref_unit(m, A, ref_at(m, A, o, 0), i, 0, 0);
            uint64_t du = ref_unit(m, A, d, i, 0, 0);
            if (port && o->op != EXEC_OP_GET) {
                if (grow((void **)&A->pend, &A->cappend, A->npend + 1, sizeof(vpend_t)) ||
                    grow((void **)&m->pvals, &m->cappvals, m->npvals + m->vs, 1))
                    return execi_error(-ENOMEM, m->where, "no memory");
                if ((st = rd(m, a, t, s, 0, m->pvals + m->npvals))) return st;
                vpend_t *q = &A->pend[A->npend++];
                q->ch = o->ch;
                q->src = (uint32_t)s;
                q->dst = (uint32_t)du;
                q->src_actor = m->w_actor[s];
                q->src_time = m->w_time[s];
                q->val = m->npvals;
                m->npvals += m->vs;
                break;
            }
            if ((st = rd(m, a, t, s, 0, m->tmp))) return st;
            if ((st = wr(m, a, t, du, m->tmp, 0, -1))) return st;
            break;
        }
        case EXEC_OP_PUT_PACKETS: {
            uint64_t s = ref_unit(m, A, ref_at(m, A, o, 0), i, 0, 0);
            if ((st = rd(m, a, t, s, 0, m->tmp))) return st;
            int sn = snap(m, a);
            if (sn < 0) return execi_error(-ENOMEM, m->where, "no memory");
            for (int h = 0; h < 2; h++)
                if ((st = wr(m, a, t, ref_unit(m, A, d, i, 1, h), m->tmp, m->run + 1, sn)))
                    return st;
            break;
        }
        case EXEC_OP_READ_PACKETS:
        case EXEC_OP_REDUCE_PACKETS:
        case EXEC_OP_REDUCE:
        case EXEC_OP_REDUCE_PUT: {
            int pk = o->op == EXEC_OP_REDUCE_PACKETS || o->op == EXEC_OP_READ_PACKETS;
            memset(m->tmp, 0, m->vs);
            for (int j = 0; j < o->nsrc; j++) {
                int jp = pk && (j > 0 || o->op == EXEC_OP_READ_PACKETS);
                const exec_ref_t *f = ref_at(m, A, o, j);
                if ((st = rd(m, a, t, ref_unit(m, A, f, i, jp, 0), jp, m->tmp2))) return st;
                if (jp && (st = rd(m, a, t, ref_unit(m, A, f, i, 1, 1), 1, NULL))) return st;
                add_val(m, m->tmp, m->tmp2);
            }
            for (int j = 0; j < o->ndst; j++)
                if ((st = wr(m, a, t, ref_unit(m, A, ref_at(m, A, o, o->nsrc + j), i, 0, 0), m->tmp,
                             0, -1)))
                    return st;
            break;
        }
        default: return vm_err(m, A, "not run by this executor");
        }
    }
    return 0;
}

/* One step of actor a: 1 ran an op, 0 blocked or done, < 0 refused. */
static int step(vm_t *m, uint32_t a) {
    vactor_t *A = &m->act[a];
    const exec_rank_desc_t *rk = &m->p->ranks[A->rank];
    const exec_block_t *bd = &rk->blocks[A->block];
    if (A->done) return 0;
    if (A->pc >= bd->nops) {
        if (A->npend)
            return vm_err(m, NULL,
                          "ranks[%d].threadblocks[%d]: ends with a port put on channel %d that no "
                          "signal or flush of the block completes",
                          A->rank, A->block, A->pend[0].ch);
        A->done = 1;
        return 0;
    }
    const exec_op_t *o = op_at(m, A, A->pc);
    if (o->op == EXEC_OP_LOOP) {
        A->in_loop = 1;
        A->it = 0;
        A->loop_first = A->pc + 1;
        A->loop_last = A->pc + o->body;
        A->pc++;
        return 1;
    }
    uint32_t qi;
    int st = 0;
    int data = o->nsrc + o->ndst > 0;
    if (data) op_range(m, A, o, ref_at(m, A, o, 0));
    /* blocking ops: ready? */
    switch (o->op) {
    case EXEC_OP_WAIT:
        if (!m->sigq[m->chbase[A->rank] + (uint32_t)o->ch].len) return 0;
        break;
    case EXEC_OP_SEM_ACQUIRE:
        if (!m->semq[m->sembase[A->rank] + (uint32_t)o->sem].len) return 0;
        break;
    case EXEC_OP_READ_PACKETS:
    case EXEC_OP_REDUCE_PACKETS:
        if (!packets_ready(m, A, o)) return 0;
        break;
    case EXEC_OP_BARRIER: {
        uint32_t k = m->barriers[A->rank];
        if (m->bar_block[A->rank] >= 0 && m->bar_block[A->rank] != A->block)
            return vm_err(m, A,
                          "barriers of rank %d run in blocks %d and %d (one block per rank runs "
                          "the barriers: the k-th barriers of all ranks meet)",
                          A->rank, m->bar_block[A->rank], A->block);
        m->bar_block[A->rank] = A->block;
        if (!A->arrived) {
            if (grow((void **)&m->bar_snap, &m->nbar_cap, (k + 1) * (uint32_t)m->p->nranks,
                     sizeof(int)))
                return execi_error(-ENOMEM, m->where, "no memory");
            int sn = snap(m, a);
            if (sn < 0) return execi_error(-ENOMEM, m->where, "no memory");
            m->bar_snap[k * (uint32_t)m->p->nranks + (uint32_t)A->rank] = sn;
            A->arrived = 1;
        }
        /* every rank has arrived at barrier k (its barrier block waits there) or passed it */
        for (int r = 0; r < m->p->nranks; r++)
            if (m->barriers[r] == k &&
                (m->bar_block[r] < 0 || !m->act[m->actor_of_rank[r] + m->bar_block[r]].arrived))
                return 0;
        break;
    }
    default: break;
    }
    uint32_t t = ++m->vc[(size_t)a * m->na + a];
    switch (o->op) {
    case EXEC_OP_SIGNAL:
    case EXEC_OP_PUT_SIGNAL:
    case EXEC_OP_PUT_SIGNAL_FLUSH: {
        int port = rk->ch[o->ch].type == EXEC_CH_PORT;
        if (o->op != EXEC_OP_SIGNAL && (st = data_op(m, a, t, o))) return st;
        A->lastsync = t;
        if (port && (st = port_complete(m, a, t, o->ch))) return st;
        int sn = snap(m, a);
        if (sn < 0) return execi_error(-ENOMEM, m->where, "no memory");
        int peer = rk->ch[o->ch].peer;
        qi = m->chbase[peer] + (uint32_t)m->other[m->chbase[A->rank] + (uint32_t)o->ch];
        if (q_push(&m->sigq[qi], sn)) return execi_error(-ENOMEM, m->where, "no memory");
        break;
    }
    case EXEC_OP_WAIT:
        join(m, a, q_pop(&m->sigq[m->chbase[A->rank] + (uint32_t)o->ch]));
        A->lastsync = t;
        break;
    case EXEC_OP_FLUSH:
        if (rk->ch[o->ch].type == EXEC_CH_PORT && (st = port_complete(m, a, t, o->ch))) return st;
        break;
    case EXEC_OP_SEM_RELEASE: {
        A->lastsync = t;
        int sn = snap(m, a);
        if (sn < 0 || q_push(&m->semq[m->sembase[A->rank] + (uint32_t)o->sem], sn))
            return execi_error(-ENOMEM, m->where, "no memory");
        break;
    }
    case EXEC_OP_SEM_ACQUIRE:
        join(m, a, q_pop(&m->semq[m->sembase[A->rank] + (uint32_t)o->sem]));
        A->lastsync = t;
        break;
    case EXEC_OP_BARRIER: {
        uint32_t k = m->barriers[A->rank];
        for (int r = 0; r < m->p->nranks; r++)
            join(m, a, m->bar_snap[k * (uint32_t)m->p->nranks + (uint32_t)r]);
        break;
    }
    case EXEC_OP_SYNC: A->lastsync = t; break;
    default:
        if ((st = data_op(m, a, t, o))) return st;
        break;
    }
    if (o->op == EXEC_OP_BARRIER) {
        A->lastsync = t;
        A->arrived = 0;
        m->barriers[A->rank]++;
    }
    /* advance */
    if (A->in_loop && A->pc == A->loop_last) {
        if (++A->it < m->iters) {
            A->pc = A->loop_first;
            return 1;
        }
        A->in_loop = 0;
    }
    A->pc++;
    return 1;
}

/* ------------------------------------------------------------------ runs */

/* rank r's caller: takes the buffers back after run e (e < 0: before the first run), checks the
 * output of run e and writes the inputs of run e + 1 */
static int caller(vm_t *m, int r, int e) {
    const cchan_exec_plan_t *p = m->p;
    uint32_t c = m->nblk + (uint32_t)r;
    for (uint32_t x = 0; x < m->nblk; x++)
        if (m->act[x].rank == r) {
            int sn = snap(m, x);
            if (sn < 0) return execi_error(-ENOMEM, m->where, "no memory");
            join(m, c, sn);
        }
    uint32_t t = ++m->vc[(size_t)c * m->na + c];
    uint32_t in = p->buf_chunks[EXEC_BUF_INPUT], out = p->buf_chunks[EXEC_BUF_OUTPUT];
    int st;
    /* where output chunk k lives: an in-place ReduceScatter's output is its slice of the input */
    const int out_in_input = execi_inplace_absent(p) == EXEC_BUF_OUTPUT;
    const int ob = out_in_input ? EXEC_BUF_INPUT : EXEC_BUF_OUTPUT;
    const uint32_t oo = out_in_input ? (uint32_t)r * out : 0;
    if (e >= 0) {
        for (uint32_t k = 0; k < out; k++)
            for (uint32_t u = 0; u < m->L; u++) {
                uint64_t un = unit_of(m, r, ob, oo + k, u);
                if ((st = rd(m, c, t, un, 0, m->tmp))) return st;
                if (!expect_val(m, m->tmp2, (uint32_t)e, r, k)) continue;
                if (memcmp(m->tmp, m->tmp2, m->vs)) {
                    char have[160] = "", want[160] = "";
                    size_t hl = 0, wl = 0;
                    for (uint32_t i = 0; i + 1 < m->vs; i++) {
                        uint32_t re = i / (in * (uint32_t)p->nranks),
                                 q = i / in % (uint32_t)p->nranks, ch = i % in;
                        if (m->tmp[i] && hl < sizeof have - 40)
                            hl += (size_t)snprintf(
                                have + hl, sizeof have - hl, "%s%s%ux in[%u]@%u", hl ? " + " : "",
                                re != (uint32_t)e ? "stale " : "", m->tmp[i], ch, q);
                        if (m->tmp2[i] && wl < sizeof want - 40)
                            wl += (size_t)snprintf(want + wl, sizeof want - wl, "%sin[%u]@%u",
                                                   wl ? " + " : "", ch, q);
                    }
                    if (m->tmp[m->vs - 1])
                        snprintf(have + hl, sizeof have - hl, "%sundefined data", hl ? " + " : "");
                    return execi_error(-EINVAL, m->where,
                                       "the plan does not compute its collective (%s): after "
                                       "simulated call %d, output chunk %u of rank %d holds %s, "
                                       "want %s "
                                       "(in[c]@q: input chunk c of rank q)",
                                       cchan_exec_collective_name(p->collective), e + 1, k, r,
                                       have[0] ? have : "nothing", want);
                }
            }
    }
    if (e + 1 >= VF_RUNS) return 0;
    uint32_t ne = (uint32_t)(e + 1);
    /* the next run's input; out of place, the output is undefined until the plan writes it */
    for (uint32_t k = 0; k < out; k++)
        for (uint32_t u = 0; u < m->L; u++) {
            memset(m->tmp, 0, m->vs);
            m->tmp[m->vs - 1] = 1;
            if (p->inplace && !out_in_input) {
                uint32_t base = p->collective == CCHAN_EXEC_ALLGATHER ? (uint32_t)r * in : 0;
                if (k >= base && k < base + in) input_val(m, m->tmp, ne, r, k - base);
            }
            if ((st = wr(m, c, t, unit_of(m, r, EXEC_BUF_OUTPUT, k, u), m->tmp, 0, -1))) return st;
        }
    if (!p->inplace || out_in_input)
        for (uint32_t k = 0; k < in; k++)
            for (uint32_t u = 0; u < m->L; u++) {
                input_val(m, m->tmp, ne, r, k);
                if ((st = wr(m, c, t, unit_of(m, r, EXEC_BUF_INPUT, k, u), m->tmp, 0, -1)))
                    return st;
            }
    /* the rank's blocks start the next run after this */
    int sn = snap(m, c);
    if (sn < 0) return execi_error(-ENOMEM, m->where, "no memory");
    for (uint32_t x = 0; x < m->nblk; x++)
        if (m->act[x].rank == r) join(m, x, sn);
    return 0;
}

static int one_run(vm_t *m) {
    const cchan_exec_plan_t *p = m->p;
    for (uint32_t x = 0; x < m->nblk; x++) {
        vactor_t *A = &m->act[x];
        A->pc = A->in_loop = A->it = A->done = A->arrived = 0;
        A->lastsync = m->vc[(size_t)x * m->na + x]; /* a run starts as a new kernel */
    }
    memset(m->barriers, 0, sizeof m->barriers);
    for (int r = 0; r < p->nranks; r++) m->bar_block[r] = -1;
    for (;;) {
        int moved = 0, left = 0;
        for (uint32_t x = 0; x < m->nblk; x++) {
            int st;
            while ((st = step(m, x)) == 1) moved = 1;
            if (st < 0) return st;
            if (!m->act[x].done) left++;
        }
        if (!left) break;
        if (!moved) {
            for (uint32_t x = 0; x < m->nblk; x++)
                if (!m->act[x].done)
                    return vm_err(m, &m->act[x],
                                  "deadlock: in simulated call %u, %d thread block(s) wait "
                                  "forever; this one "
                                  "waits here (for a signal, release, barrier or LL packet that "
                                  "never comes in this call)",
                                  m->run + 1, left);
        }
    }
    /* nothing left for the next run to consume */
    for (int r = 0; r < p->nranks; r++) {
        const exec_rank_desc_t *rk = &p->ranks[r];
        for (uint32_t k = 0; k < rk->nch; k++)
            if (m->sigq[m->chbase[r] + k].len)
                return execi_error(-EINVAL, m->where,
                                   "ranks[%d].channels[%u]: %d signal(s) from rank %d are not "
                                   "waited for in the run that made them (the next run's waits "
                                   "would take them)",
                                   r, k, m->sigq[m->chbase[r] + k].len, rk->ch[k].peer);
        for (uint32_t s = 0; s < rk->semaphores; s++)
            if (m->semq[m->sembase[r] + s].len)
                return execi_error(-EINVAL, m->where,
                                   "ranks[%d].semaphores: semaphore %u has %d release(s) not "
                                   "acquired in the same run",
                                   r, s, m->semq[m->sembase[r] + s].len);
    }
    return 0;
}

/* counts barrier completions: called by step through the barrier op's end */
static int vm_setup(vm_t *m) {
    const cchan_exec_plan_t *p = m->p;
    m->nblk = 0;
    for (int r = 0; r < p->nranks; r++) m->nblk += p->ranks[r].nblocks;
    m->na = m->nblk + (uint32_t)p->nranks;
    m->vs = VF_RUNS * (uint32_t)p->nranks * p->buf_chunks[EXEC_BUF_INPUT] + 1;
    uint64_t units = 0;
    uint32_t nch = 0, nsem = 0;
    for (int r = 0; r < p->nranks; r++) {
        const exec_rank_desc_t *rk = &p->ranks[r];
        for (int b = 0; b < EXEC_NBUF; b++) {
            m->base[r][b] = units;
            uint64_t chunks = b == EXEC_BUF_SCRATCH
                                  ? (uint64_t)rk->scratch_chunks * (p->ll_double_buffer ? 2 : 1)
                                  : p->buf_chunks[b];
            units += chunks * chunk_units(m, b);
        }
        m->chbase[r] = nch;
        m->sembase[r] = nsem;
        nch += rk->nch;
        nsem += rk->semaphores;
    }
    m->chbase[p->nranks] = nch;
    m->sembase[p->nranks] = nsem;
    m->nunits = units;
    uint64_t bytes = units * ((uint64_t)m->vs + 20 + 4ull * m->na) + 4ull * m->na * m->na;
    if (bytes > VF_MAX_MODEL)
        return execi_error(CCHAN_ERR_UNSUPPORTED, m->where,
                           "the plan is too large to verify at load (%llu MiB of model state; "
                           "this executor verifies plans up to %u MiB)",
                           (unsigned long long)(bytes >> 20), VF_MAX_MODEL >> 20);
    m->vc = (uint32_t *)calloc((size_t)m->na * m->na, sizeof(uint32_t));
    m->act = (vactor_t *)calloc(m->na, sizeof(vactor_t));
    m->actor_of_rank = (int *)calloc((size_t)p->nranks, sizeof(int));
    m->val = (uint8_t *)calloc(units ? units : 1, m->vs);
    m->w_actor = (int32_t *)malloc((units ? units : 1) * sizeof(int32_t));
    m->w_time = (uint32_t *)calloc(units ? units : 1, sizeof(uint32_t));
    m->w_flag = (uint32_t *)calloc(units ? units : 1, sizeof(uint32_t));
    m->w_snap = (int32_t *)calloc(units ? units : 1, sizeof(int32_t));
    m->reads = (uint32_t *)calloc((units ? units : 1) * m->na, sizeof(uint32_t));
    m->sigq = (vq_t *)calloc(nch ? nch : 1, sizeof(vq_t));
    m->semq = (vq_t *)calloc(nsem ? nsem : 1, sizeof(vq_t));
    m->other = (int *)calloc(nch ? nch : 1, sizeof(int));
    uint32_t maxcount = 1;
    for (int r = 0; r < p->nranks; r++)
        for (uint32_t i = 0; i < p->ranks[r].nrefs; i++)
            if (p->ranks[r].refs[i].count > maxcount) maxcount = p->ranks[r].refs[i].count;
    m->xk = (uint32_t *)calloc((size_t)maxcount * m->L, sizeof(uint32_t));
    m->xin = (uint32_t *)calloc((size_t)maxcount * m->L, sizeof(uint32_t));
    m->tmp = (uint8_t *)calloc(m->vs, 1);
    m->tmp2 = (uint8_t *)calloc(m->vs, 1);
    if (!m->vc || !m->act || !m->actor_of_rank || !m->val || !m->w_actor || !m->w_time ||
        !m->w_flag || !m->w_snap || !m->reads || !m->sigq || !m->semq || !m->other || !m->tmp ||
        !m->tmp2 || !m->xk || !m->xin)
        return execi_error(-ENOMEM, m->where, "no memory");
    for (uint64_t u = 0; u < units; u++) {
        m->w_actor[u] = -1;
        m->val[u * m->vs + m->vs - 1] = 1; /* undefined until written */
    }
    uint32_t x = 0;
    for (int r = 0; r < p->nranks; r++) {
        m->actor_of_rank[r] = (int)x;
        for (uint32_t b = 0; b < p->ranks[r].nblocks; b++, x++) {
            m->act[x].rank = r;
            m->act[x].block = (int)b;
        }
    }
    for (int r = 0; r < p->nranks; r++) {
        m->act[m->nblk + (uint32_t)r].rank = r;
        m->act[m->nblk + (uint32_t)r].block = -1;
        const exec_rank_desc_t *rk = &p->ranks[r];
        for (uint32_t k = 0; k < rk->nch; k++) {
            const exec_rank_desc_t *pk = &p->ranks[rk->ch[k].peer];
            int o = -1;
            for (uint32_t j = 0; j < pk->nch; j++)
                if (pk->ch[j].type == rk->ch[k].type && pk->ch[j].peer == r &&
                    pk->ch[j].index == rk->ch[k].index)
                    o = (int)j;
            if (o < 0) return execi_error(-EINVAL, m->where, "channel without its other end");
            m->other[m->chbase[r] + k] = o;
        }
    }
    return 0;
}

static void vm_free(vm_t *m) {
    if (m->act)
        for (uint32_t x = 0; x < m->na; x++) free(m->act[x].pend);
    if (m->sigq)
        for (uint32_t i = 0; i < m->chbase[m->p->nranks]; i++) free(m->sigq[i].v);
    if (m->semq)
        for (uint32_t i = 0; i < m->sembase[m->p->nranks]; i++) free(m->semq[i].v);
    free(m->vc);
    free(m->act);
    free(m->actor_of_rank);
    free(m->val);
    free(m->w_actor);
    free(m->w_time);
    free(m->w_flag);
    free(m->w_snap);
    free(m->reads);
    free(m->snaps);
    free(m->sigq);
    free(m->semq);
    free(m->other);
    free(m->bar_snap);
    free(m->pvals);
    free(m->tmp);
    free(m->tmp2);
    free(m->xk);
    free(m->xin);
}

static int verify_at(const cchan_exec_plan_t *p, const char *where, uint32_t L, uint32_t U) {
    vm_t m;
    memset(&m, 0, sizeof m);
    m.p = p;
    m.where = where;
    m.L = L;
    m.U = U;
    m.iters = p->loop_unit ? (L + U - 1) / U : 1;
    if (m.iters == 0) m.iters = 1;
    int st = vm_setup(&m);
    for (int r = 0; r < p->nranks && !st; r++) st = caller(&m, r, -1);
    for (uint32_t e = 0; e < VF_RUNS && !st; e++) {
        m.run = e;
        st = one_run(&m);
        for (int r = 0; r < p->nranks && !st; r++) st = caller(&m, r, (int)e);
    }
    vm_free(&m);
    return st;
}

/* The buffers a call passes, against what the collective says they hold: an output larger than
 * the collective's would be written past what the caller allocated. */
static int check_shape(const cchan_exec_plan_t *p, const char *where) {
    uint32_t in = p->buf_chunks[EXEC_BUF_INPUT], out = p->buf_chunks[EXEC_BUF_OUTPUT];
    uint32_t n = (uint32_t)p->nranks;
    const char *cn = cchan_exec_collective_name(p->collective);
    uint64_t want = out;
    switch (p->collective) {
    case CCHAN_EXEC_ALLREDUCE:
    case CCHAN_EXEC_BROADCAST: want = in; break;
    case CCHAN_EXEC_ALLTOALL:
        if (in % n)
            return execi_error(-EINVAL, where,
                               "buffers.input: %u chunks; an alltoall sends the same number to "
                               "each of its %u ranks",
                               in, n);
        want = in;
        break;
    case CCHAN_EXEC_ALLGATHER: want = (uint64_t)in * n; break;
    case CCHAN_EXEC_REDUCESCATTER:
        if (in % n)
            return execi_error(-EINVAL, where,
                               "buffers.input: %u chunks; a reducescatter's input is one part "
                               "per rank (a multiple of nranks %u)",
                               in, n);
        want = in / n;
        break;
    default: break;
    }
    if (out != want)
        return execi_error(-EINVAL, where,
                           "buffers.output: %u chunks, but %s with %u input chunks on %u ranks "
                           "has %llu (the caller's output is that long)",
                           out, cn, in, n, (unsigned long long)want);
    /* In place, the input is part of the output, or (ReduceScatter) the output of the input;
     * a custom plan does not say which. */
    if (p->inplace && p->collective == CCHAN_EXEC_CUSTOM)
        return execi_error(-EINVAL, where,
                           "inplace: true for a custom plan (no in-place custom "
                           "plans: nothing says where the input lies)");
    return 0;
}

static uint64_t gcd64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int execi_verify_plan(const cchan_exec_plan_t *p, const char *where) {
    int st = check_shape(p, where);
    /* one unit per chunk (one loop iteration; groups leave blocks empty), then four units in
     * two iterations of two */
    if (!st) st = verify_at(p, where, 1, 1);
    if (!st) st = verify_at(p, where, 4, 2);
    /* then two iterations of a length every group size divides, so that every block of every
     * group has a part of every op */
    uint64_t l = 1;
    for (int r = 0; r < p->nranks; r++)
        for (uint32_t i = 0; i < p->ranks[r].nops; i++) {
            uint64_t g = p->ranks[r].ops[i].tbg_size;
            if (g > 1 && l <= 4096) l = l / gcd64(l, g) * g;
        }
    if (!st && l > 1) {
        if (l > 4096) /* many group sizes: the largest squared still gives every block a part */
            for (int r = 0; r < p->nranks; r++)
                for (uint32_t i = 0; i < p->ranks[r].nops; i++)
                    if ((uint64_t)p->ranks[r].ops[i].tbg_size * p->ranks[r].ops[i].tbg_size > l)
                        l = (uint64_t)p->ranks[r].ops[i].tbg_size * p->ranks[r].ops[i].tbg_size;
        st = verify_at(p, where, (uint32_t)(2 * l), (uint32_t)l);
    }
    return st;
}
