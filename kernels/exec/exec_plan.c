/* cchan_exec: loading and checking a plan (docs/plan-format.md, version 1) with jansson.
 *
 * Every rule that can be checked without running the plan is checked here, so that the
 * interpreter can trust its lists (indices in range, one writer of every semaphore end): a plan
 * that passes cannot make the interpreter read or write outside the buffers it was given. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"

static _Thread_local char exec_errmsg[1024];

int execi_error(int status, const char *where, const char *fmt, ...) {
    va_list ap;
    int n = snprintf(exec_errmsg, sizeof exec_errmsg, "%s: ", where);
    if (n < 0 || (size_t)n >= sizeof exec_errmsg) n = 0;
    va_start(ap, fmt);
    vsnprintf(exec_errmsg + n, sizeof exec_errmsg - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}
void execi_clear_error(void) { exec_errmsg[0] = 0; }
const char *cchan_exec_last_error(void) { return exec_errmsg; }

static const char *const exec_op_names[EXEC_OP_COUNT] = {
    "put",     "put_signal",  "put_signal_flush", "get",           "signal",
    "wait",    "flush",       "put_packets",      "read_packets",  "reduce_packets",
    "copy",    "reduce",      "reduce_put",       "switch_reduce", "switch_broadcast",
    "barrier", "sem_release", "sem_acquire",      "sync",          "loop"};
static const char *const exec_buf_names[EXEC_NBUF] = {"input", "output", "scratch"};
static const char *const exec_coll_names[] = {"allreduce", "allgather", "reducescatter",
                                              "alltoall",  "broadcast", "custom"};

const char *execi_op_name(int op) {
    return (unsigned)op < EXEC_OP_COUNT ? exec_op_names[op] : "unknown";
}

const char *cchan_exec_collective_name(cchan_exec_collective_t c) {
    return (unsigned)c < 6 ? exec_coll_names[c] : "unknown";
}

/* ------------------------------------------------------------------ field access with paths */

#define PATH_MAX_LEN 160

/* Every message about a plan quotes its name, and a message has 1023 bytes: a longer name would
 * push the reason out of them. A refused name is quoted up to EXEC_NAME_SHOWN bytes. */
#define EXEC_NAME_MAX 256
#define EXEC_NAME_SHOWN 48
typedef struct ctx {
    const char *where;
    char path[PATH_MAX_LEN];
} ctx_t;

static int bad(const ctx_t *c, const char *field, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int bad(const ctx_t *c, const char *field, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return execi_error(-EINVAL, c->where, "%s%s%s: %s", c->path, *c->path && *field ? "." : "",
                       field, msg);
}

static void path_push(ctx_t *c, size_t *save, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void path_push(ctx_t *c, size_t *save, const char *fmt, ...) {
    *save = strlen(c->path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->path + *save, sizeof c->path - *save, fmt, ap);
    va_end(ap);
}
static void path_pop(ctx_t *c, size_t save) { c->path[save] = 0; }

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number with a fraction";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* Integer field in [lo, hi]; optional fields keep *out when absent. */
static int get_int(const ctx_t *c, const json_t *obj, const char *field, int required, int64_t lo,
                   int64_t hi, int64_t *out) {
    json_t *v = json_object_get(obj, field);
    if (!v) return required ? bad(c, field, "missing (required)") : 0;
    if (!json_is_integer(v)) return bad(c, field, "is %s, want an integer", json_kind(v));
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return bad(c, field, "%lld out of range [%lld, %lld]", (long long)x, (long long)lo,
                   (long long)hi);
    *out = x;
    return 0;
}

static int get_bool(const ctx_t *c, const json_t *obj, const char *field, int *out) {
    json_t *v = json_object_get(obj, field);
    if (!v) return bad(c, field, "missing (required)");
    if (!json_is_boolean(v)) return bad(c, field, "is %s, want true or false", json_kind(v));
    *out = json_is_true(v);
    return 0;
}

/* String field that must be one of names[0..n); -1 when optional and absent. */
static int get_enum(const ctx_t *c, const json_t *obj, const char *field, int required,
                    const char *const *names, int n, int *out) {
    json_t *v = json_object_get(obj, field);
    if (!v) {
        if (required) return bad(c, field, "missing (required)");
        *out = -1;
        return 0;
    }
    if (!json_is_string(v)) return bad(c, field, "is %s, want a string", json_kind(v));
    const char *s = json_string_value(v);
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    char list[300] = "";
    for (int i = 0; i < n; i++)
        if (names[i]) {
            strncat(list, *list ? ", " : "", sizeof list - strlen(list) - 1);
            strncat(list, names[i], sizeof list - strlen(list) - 1);
        }
    return bad(c, field, "\"%.60s\" is not one of %s", s, list);
}

static int get_array(const ctx_t *c, const json_t *obj, const char *field, int required,
                     json_t **out) {
    json_t *v = json_object_get(obj, field);
    if (!v) {
        if (required) return bad(c, field, "missing (required)");
        *out = NULL;
        return 0;
    }
    if (!json_is_array(v)) return bad(c, field, "is %s, want an array", json_kind(v));
    *out = v;
    return 0;
}

/* ------------------------------------------------------------------ plan memory */

void cchan_exec_plan_free(cchan_exec_plan_t *p) {
    if (!p) return;
    if (p->ranks)
        for (int r = 0; r < p->nranks; r++) {
            free(p->ranks[r].ch);
            free(p->ranks[r].blocks);
            free(p->ranks[r].ops);
            free(p->ranks[r].refs);
        }
    free(p->ranks);
    free(p->name);
    free(p);
}

/* ------------------------------------------------------------------ one rank */

enum { NEED_NONE = 0, NEED_LOCAL = 1, NEED_REMOTE = 2, NEED_ANY = 3 };

static int parse_ref(ctx_t *c, const cchan_exec_plan_t *p, const exec_rank_desc_t *rk, int inplace,
                     const json_t *j, exec_ref_t *out) {
    if (!json_is_object(j)) return bad(c, "", "is %s, want a ref object", json_kind(j));
    int buf = 0;
    int64_t chunk = 0, count = 1, stride = 1, ch = -1;
    int st;
    if ((st = get_enum(c, j, "buf", 1, exec_buf_names, EXEC_NBUF, &buf)) < 0) return st;
    if ((st = get_int(c, j, "chunk", 1, 0, INT32_MAX, &chunk)) < 0) return st;
    if ((st = get_int(c, j, "count", 1, 1, INT32_MAX, &count)) < 0) return st;
    if ((st = get_int(c, j, "stride", 0, 1, INT32_MAX, &stride)) < 0) return st;
    if ((st = get_int(c, j, "ch", 0, 0, (int64_t)rk->nch - 1 < 0 ? -1 : (int64_t)rk->nch - 1,
                      &ch)) < 0) {
        if (rk->nch == 0) return bad(c, "ch", "this rank has no channels");
        return st;
    }
    if (inplace && buf == execi_inplace_absent(p))
        return bad(c, "buf", "\"%s\" in an in-place %s plan (it names only %s and scratch)",
                   exec_buf_names[buf], cchan_exec_collective_name(p->collective),
                   exec_buf_names[EXEC_BUF_INPUT + EXEC_BUF_OUTPUT - buf]);
    if (ch >= 0) {
        const exec_chan_desc_t *cd = &rk->ch[ch];
        if (cd->type == EXEC_CH_SWITCH)
            return bad(c, "ch",
                       "%lld is a switch channel; refs reach peers through memory or "
                       "port channels",
                       (long long)ch);
        if (!(cd->remote_mask & (1u << buf)))
            return bad(c, "buf", "\"%s\" through channel %lld, whose remote_buffers do not name it",
                       exec_buf_names[buf], (long long)ch);
    }
    /* the last chunk: the owner's chunk count (scratch: the owner rank's scratch_chunks) */
    uint64_t last = (uint64_t)chunk + (uint64_t)(count - 1) * (uint64_t)stride;
    uint64_t limit = p->buf_chunks[buf];
    if (buf == EXEC_BUF_SCRATCH) {
        if (ch >= 0) {
            int peer = rk->ch[ch].peer;
            /* the peer's entry may not be parsed yet: checked against buffers.scratch here and
             * against the peer's scratch_chunks in check_cross */
            (void)peer;
        } else {
            limit = rk->scratch_chunks;
        }
    }
    if (last >= limit)
        return bad(c, "chunk", "chunks %lld..%llu (count %lld, stride %lld) of %s, which has %llu",
                   (long long)chunk, (unsigned long long)last, (long long)count, (long long)stride,
                   exec_buf_names[buf], (unsigned long long)limit);
    out->chunk = (uint32_t)chunk;
    out->count = (uint32_t)count;
    out->stride = (uint32_t)stride;
    out->buf = (uint8_t)buf;
    out->ch = (int16_t)ch;
    return 0;
}

typedef struct op_shape {
    int need_ch; /* the op names a channel */
    int ch_type; /* required type, -1 any of memory/port */
    int nsrc_lo, nsrc_hi, ndst;
    int src_where; /* NEED_LOCAL: every src local; NEED_REMOTE: src[0] through op.ch; NEED_ANY */
    int dst_where;
    int packets; /* needs protocol */
} op_shape_t;

static const op_shape_t exec_shapes[EXEC_OP_COUNT] = {
    [EXEC_OP_PUT] = {1, -1, 1, 1, 1, NEED_LOCAL, NEED_REMOTE, 0},
    [EXEC_OP_PUT_SIGNAL] = {1, -1, 1, 1, 1, NEED_LOCAL, NEED_REMOTE, 0},
    [EXEC_OP_PUT_SIGNAL_FLUSH] = {1, EXEC_CH_PORT, 1, 1, 1, NEED_LOCAL, NEED_REMOTE, 0},
    [EXEC_OP_GET] = {1, EXEC_CH_MEMORY, 1, 1, 1, NEED_REMOTE, NEED_LOCAL, 0},
    [EXEC_OP_SIGNAL] = {1, -1, 0, 0, 0, NEED_NONE, NEED_NONE, 0},
    [EXEC_OP_WAIT] = {1, -1, 0, 0, 0, NEED_NONE, NEED_NONE, 0},
    [EXEC_OP_FLUSH] = {1, -1, 0, 0, 0, NEED_NONE, NEED_NONE, 0},
    [EXEC_OP_PUT_PACKETS] = {1, EXEC_CH_MEMORY, 1, 1, 1, NEED_LOCAL, NEED_REMOTE, 1},
    [EXEC_OP_READ_PACKETS] = {1, EXEC_CH_MEMORY, 1, 1, 1, NEED_LOCAL, NEED_LOCAL, 1},
    [EXEC_OP_REDUCE_PACKETS] = {0, -1, 1, EXEC_MAX_SRCS, 1, NEED_LOCAL, NEED_LOCAL, 1},
    [EXEC_OP_COPY] = {0, -1, 1, 1, 1, NEED_LOCAL, NEED_LOCAL, 0},
    [EXEC_OP_REDUCE] = {0, -1, 1, EXEC_MAX_SRCS, 1, NEED_ANY, NEED_LOCAL, 0},
    [EXEC_OP_REDUCE_PUT] = {1, EXEC_CH_MEMORY, 1, EXEC_MAX_SRCS, 1, NEED_ANY, NEED_REMOTE, 0},
    [EXEC_OP_SWITCH_REDUCE] = {1, EXEC_CH_SWITCH, 1, 1, 1, NEED_ANY, NEED_LOCAL, 0},
    [EXEC_OP_SWITCH_BROADCAST] = {1, EXEC_CH_SWITCH, 1, 1, 1, NEED_LOCAL, NEED_ANY, 0},
    [EXEC_OP_BARRIER] = {0, -1, 0, 0, 0, NEED_NONE, NEED_NONE, 0},
    [EXEC_OP_SEM_RELEASE] = {0, -1, 0, 0, 0, NEED_NONE, NEED_NONE, 0},
    [EXEC_OP_SEM_ACQUIRE] = {0, -1, 0, 0, 0, NEED_NONE, NEED_NONE, 0},
    [EXEC_OP_SYNC] = {0, -1, 0, 0, 0, NEED_NONE, NEED_NONE, 0},
    [EXEC_OP_LOOP] = {0, -1, 0, 0, 0, NEED_NONE, NEED_NONE, 0},
};
static const char *const exec_ch_type_names[] = {"memory", "port", "switch"};

static int check_refs(ctx_t *c, const exec_rank_desc_t *rk, const exec_op_t *o,
                      const exec_ref_t *refs, const op_shape_t *sh) {
    for (int i = 0; i < o->nsrc + o->ndst; i++) {
        const exec_ref_t *r = &refs[i];
        int is_src = i < o->nsrc;
        int where = is_src ? sh->src_where : sh->dst_where;
        const char *side = is_src ? "src" : "dst";
        int k = is_src ? i : i - o->nsrc;
        char f[32];
        snprintf(f, sizeof f, "%s[%d]", side, k);
        if (r->count != refs[0].count)
            return bad(c, f,
                       "count %u, but %s covers %u chunks (src and dst of one op cover the "
                       "same bytes)",
                       r->count, o->nsrc ? "src[0]" : "dst[0]", refs[0].count);
        int remote_here = where == NEED_REMOTE && (o->op != EXEC_OP_REDUCE_PACKETS);
        if (o->op == EXEC_OP_REDUCE || o->op == EXEC_OP_REDUCE_PUT) {
            if (is_src && r->ch >= 0 && rk->ch[r->ch].type != EXEC_CH_MEMORY)
                return bad(c, f,
                           "reads a peer through channel %d, a %s channel (reduce reads "
                           "peers through memory channels)",
                           r->ch, exec_ch_type_names[rk->ch[r->ch].type]);
            if (!is_src && o->op == EXEC_OP_REDUCE && r->ch >= 0)
                return bad(c, f, "ch %d: reduce writes locally (reduce_put writes a peer)", r->ch);
            if (!is_src && o->op == EXEC_OP_REDUCE_PUT && k == 0 && r->ch != o->ch)
                return bad(c, f, "ch %d, want the op's channel %d", r->ch, o->ch);
            if (!is_src && o->op == EXEC_OP_REDUCE_PUT && k == 1 && r->ch >= 0)
                return bad(c, f, "ch %d: reduce_put's second dst is this rank's own", r->ch);
            continue;
        }
        if (remote_here && r->ch != o->ch)
            return bad(c, f, "ch %d, want the op's channel %d (the peer's buffer)", r->ch, o->ch);
        if (where == NEED_LOCAL && r->ch >= 0)
            return bad(c, f, "ch %d: this operand must be this rank's own buffer", r->ch);
        /* packet areas are scratch chunks */
        int packet_area = (o->op == EXEC_OP_PUT_PACKETS && !is_src) ||
                          (o->op == EXEC_OP_READ_PACKETS && is_src) ||
                          (o->op == EXEC_OP_REDUCE_PACKETS && is_src && k > 0);
        if (packet_area && r->buf != EXEC_BUF_SCRATCH)
            return bad(c, f, "buf \"%s\": LL packet areas are scratch chunks",
                       exec_buf_names[r->buf]);
    }
    return 0;
}

static int parse_op(ctx_t *c, const cchan_exec_plan_t *p, exec_rank_desc_t *rk, int rank,
                    const json_t *j, exec_op_t *o, exec_ref_t *refs, uint32_t *nrefs,
                    uint32_t cap_refs) {
    (void)rank;
    int st, opc = 0;
    if (!json_is_object(j)) return bad(c, "", "is %s, want an op object", json_kind(j));
    if ((st = get_enum(c, j, "op", 1, exec_op_names, EXEC_OP_COUNT, &opc)) < 0) return st;
    const op_shape_t *sh = &exec_shapes[opc];
    memset(o, 0, sizeof *o);
    o->op = (uint8_t)opc;
    o->ch = -1;
    o->sem = -1;
    int64_t ch = -1, sem = -1, tbi = 0, tbs = 1, body = 0;
    if ((st = get_int(c, j, "ch", 0, 0, INT16_MAX, &ch)) < 0) return st;
    if ((st = get_int(c, j, "sem", 0, 0, INT16_MAX, &sem)) < 0) return st;
    if ((st = get_int(c, j, "tbg_index", 0, 0, EXEC_MAX_BLOCKS - 1, &tbi)) < 0) return st;
    if ((st = get_int(c, j, "tbg_size", 0, 1, EXEC_MAX_BLOCKS, &tbs)) < 0) return st;
    if ((st = get_int(c, j, "body", 0, 1, EXEC_MAX_OPS, &body)) < 0) return st;
    if (tbi >= tbs)
        return bad(c, "tbg_index", "%lld, but tbg_size is %lld (index < size)", (long long)tbi,
                   (long long)tbs);
    if (sh->need_ch) {
        if (ch < 0) return bad(c, "ch", "missing (\"%s\" names a channel)", exec_op_names[opc]);
        if (ch >= rk->nch)
            return bad(c, "ch", "%lld out of range: this rank has %u channels", (long long)ch,
                       rk->nch);
        int t = rk->ch[ch].type;
        if (t == EXEC_CH_SWITCH || (sh->ch_type >= 0 && t != sh->ch_type))
            return bad(c, "ch", "%lld is a %s channel; \"%s\" needs a %s channel", (long long)ch,
                       exec_ch_type_names[t], exec_op_names[opc],
                       sh->ch_type >= 0 ? exec_ch_type_names[sh->ch_type] : "memory or port");
    } else if (ch >= 0) {
        return bad(c, "ch", "\"%s\" takes no channel", exec_op_names[opc]);
    }
    if (opc == EXEC_OP_SEM_RELEASE || opc == EXEC_OP_SEM_ACQUIRE) {
        if (sem < 0) return bad(c, "sem", "missing (\"%s\" names a semaphore)", exec_op_names[opc]);
        if (sem >= rk->semaphores)
            return bad(c, "sem", "%lld out of range: this rank has %u semaphores", (long long)sem,
                       rk->semaphores);
    } else if (sem >= 0) {
        return bad(c, "sem", "\"%s\" takes no semaphore", exec_op_names[opc]);
    }
    if (opc == EXEC_OP_LOOP && body == 0) return bad(c, "body", "missing (loop needs body >= 1)");
    if (opc != EXEC_OP_LOOP && body) return bad(c, "body", "only \"loop\" has a body");
    if (tbs > 1 && sh->nsrc_hi == 0 && opc != EXEC_OP_SIGNAL && opc != EXEC_OP_WAIT)
        return bad(c, "tbg_size", "%lld on \"%s\", which moves no data", (long long)tbs,
                   exec_op_names[opc]);
    int proto = -1;
    static const char *const protos[] = {NULL, "ll8", "ll16"};
    if ((st = get_enum(c, j, "protocol", 0, protos, 3, &proto)) < 0) return st;
    if (sh->packets) {
        if (proto < 0)
            return bad(c, "protocol", "missing (\"%s\" needs ll8 or ll16)", exec_op_names[opc]);
        if (p->scratch_factor != 2)
            return bad(c, "protocol",
                       "%s packets, but scratch_chunk_factor is %u (packet areas "
                       "need 2)",
                       protos[proto], p->scratch_factor);
    }
    o->proto = (uint8_t)(proto < 0 ? 0 : proto);
    o->ch = (int16_t)ch;
    o->sem = (int16_t)sem;
    o->tbg_index = (uint16_t)tbi;
    o->tbg_size = (uint16_t)tbs;
    o->body = (uint16_t)body;

    json_t *src = NULL, *dst = NULL;
    if ((st = get_array(c, j, "src", 0, &src)) < 0) return st;
    if ((st = get_array(c, j, "dst", 0, &dst)) < 0) return st;
    size_t ns = src ? json_array_size(src) : 0, nd = dst ? json_array_size(dst) : 0;
    if (ns < (size_t)sh->nsrc_lo || ns > (size_t)sh->nsrc_hi)
        return bad(c, "src", "%zu refs; \"%s\" takes %d to %d", ns, exec_op_names[opc], sh->nsrc_lo,
                   sh->nsrc_hi);
    /* reduce_put may also store its sum into a local dst[1] */
    if (nd != (size_t)sh->ndst && !(opc == EXEC_OP_REDUCE_PUT && nd == 2))
        return bad(c, "dst", "%zu refs; \"%s\" takes %d%s", nd, exec_op_names[opc], sh->ndst,
                   opc == EXEC_OP_REDUCE_PUT ? " or 2" : "");
    if (*nrefs + ns + nd > cap_refs) return bad(c, "", "too many refs");
    o->nsrc = (uint8_t)ns;
    o->ndst = (uint8_t)nd;
    o->ref = *nrefs;
    for (size_t i = 0; i < ns + nd; i++) {
        size_t save;
        path_push(c, &save, ".%s[%zu]", i < ns ? "src" : "dst", i < ns ? i : i - ns);
        st = parse_ref(c, p, rk, p->inplace,
                       json_array_get(i < ns ? src : dst, i < ns ? i : i - ns), &refs[*nrefs + i]);
        path_pop(c, save);
        if (st < 0) return st;
    }
    if ((st = check_refs(c, rk, o, &refs[*nrefs], sh)) < 0) return st;
    /* port puts: which (local buffer, peer buffer) pairs the channel moves between */
    if (opc == EXEC_OP_PUT || opc == EXEC_OP_PUT_SIGNAL || opc == EXEC_OP_PUT_SIGNAL_FLUSH) {
        exec_chan_desc_t *cd = &rk->ch[ch];
        if (cd->type == EXEC_CH_PORT)
            cd->port_pairs |= 1u << (refs[*nrefs].buf * 3 + refs[*nrefs + 1].buf);
    }
    *nrefs += (uint32_t)(ns + nd);
    return 0;
}

/* rank, scratch_chunks and semaphores of ranks[r] */
static int parse_rank_header(ctx_t *c, cchan_exec_plan_t *p, int r, const json_t *j) {
    exec_rank_desc_t *rk = &p->ranks[r];
    int st;
    int64_t v = 0;
    if ((st = get_int(c, j, "rank", 1, 0, INT32_MAX, &v)) < 0) return st;
    if (v != r)
        return bad(c, "rank", "%lld, want %d (ranks are listed in rank order)", (long long)v, r);
    if ((st = get_int(c, j, "scratch_chunks", 1, 0, p->buf_chunks[EXEC_BUF_SCRATCH], &v)) < 0) {
        if (json_is_integer(json_object_get(j, "scratch_chunks")))
            return bad(c, "scratch_chunks", "%lld, more than buffers.scratch (%u)",
                       (long long)json_integer_value(json_object_get(j, "scratch_chunks")),
                       p->buf_chunks[EXEC_BUF_SCRATCH]);
        return st;
    }
    rk->scratch_chunks = (uint32_t)v;
    if ((st = get_int(c, j, "semaphores", 1, 0, 4096, &v)) < 0) return st;
    rk->semaphores = (uint32_t)v;
    return 0;
}

static int parse_remote_buffers(ctx_t *c, const cchan_exec_plan_t *p, const json_t *rb,
                                exec_chan_desc_t *cd) {
    int st;
    for (size_t k = 0; k < json_array_size(rb); k++) {
        int b = 0;
        size_t s2;
        path_push(c, &s2, ".remote_buffers");
        json_t *wrap = json_pack("{sO}", "b", json_array_get(rb, k));
        st = wrap ? get_enum(c, wrap, "b", 1, exec_buf_names, EXEC_NBUF, &b) : -ENOMEM;
        json_decref(wrap);
        path_pop(c, s2);
        if (st < 0) return st;
        if (b == execi_inplace_absent(p))
            return bad(c, "remote_buffers", "\"%s\" in an in-place %s plan", exec_buf_names[b],
                       cchan_exec_collective_name(p->collective));
        cd->remote_mask |= 1u << b;
    }
    return 0;
}

/* ranks[r].channels[i]; the path names the channel */
static int parse_channel(ctx_t *c, cchan_exec_plan_t *p, exec_rank_desc_t *rk, int r, size_t i,
                         const json_t *cj) {
    exec_chan_desc_t *cd = &rk->ch[i];
    int st, t = 0;
    int64_t v = 0;
    if (!json_is_object(cj)) return bad(c, "", "is %s, want a channel object", json_kind(cj));
    if ((st = get_enum(c, cj, "type", 1, exec_ch_type_names, 3, &t)) < 0) return st;
    if (t == EXEC_CH_SWITCH)
        return execi_error(CCHAN_ERR_UNSUPPORTED, c->where,
                           "%s.type: \"switch\": this executor does not run switch channels",
                           c->path);
    cd->type = t;
    if ((st = get_int(c, cj, "index", 1, 0, 255, &v)) < 0) return st;
    cd->index = (int)v;
    if ((st = get_int(c, cj, "peer", 1, 0, p->nranks - 1, &v)) < 0) return st;
    if (v == r) return bad(c, "peer", "%d is this rank (a channel connects two ranks)", r);
    cd->peer = (int)v;
    json_t *rb = NULL;
    if ((st = get_array(c, cj, "remote_buffers", 1, &rb)) < 0) return st;
    if ((st = parse_remote_buffers(c, p, rb, cd)) < 0) return st;
    for (size_t k = 0; k < i; k++)
        if (rk->ch[k].type == cd->type && rk->ch[k].peer == cd->peer &&
            rk->ch[k].index == cd->index)
            return bad(c, "", "same type, peer %d and index %d as channels[%zu]", cd->peer,
                       cd->index, k);
    if (cd->type == EXEC_CH_MEMORY && (uint32_t)cd->index + 1 > p->mem_sems)
        p->mem_sems = (uint32_t)cd->index + 1;
    if (cd->type == EXEC_CH_PORT && (uint32_t)cd->index + 1 > p->port_sems)
        p->port_sems = (uint32_t)cd->index + 1;
    if (cd->type == EXEC_CH_PORT) p->uses_port = 1;
    return 0;
}

static int parse_channels(ctx_t *c, cchan_exec_plan_t *p, int r, const json_t *chs) {
    exec_rank_desc_t *rk = &p->ranks[r];
    size_t nch = json_array_size(chs);
    if (nch > EXEC_MAX_CHANNELS)
        return bad(c, "channels", "%zu channels; this executor takes at most %d per rank", nch,
                   EXEC_MAX_CHANNELS);
    rk->nch = (uint32_t)nch;
    rk->ch = (exec_chan_desc_t *)calloc(nch ? nch : 1, sizeof *rk->ch);
    if (!rk->ch) return execi_error(-ENOMEM, c->where, "no memory");
    for (size_t i = 0; i < nch; i++) {
        size_t save;
        path_push(c, &save, ".channels[%zu]", i);
        int st = parse_channel(c, p, rk, r, i, json_array_get(chs, i));
        path_pop(c, save);
        if (st < 0) return st;
    }
    return 0;
}

/* Sizes the rank's block, op and ref lists from the ops counted up front; *cap_refs: refs room. */
static int alloc_blocks(ctx_t *c, exec_rank_desc_t *rk, const json_t *tbs, size_t *cap_refs) {
    size_t nb = json_array_size(tbs);
    if (nb > EXEC_MAX_BLOCKS)
        return bad(c, "threadblocks", "%zu blocks; this executor runs at most %d", nb,
                   EXEC_MAX_BLOCKS);
    rk->nblocks = (uint32_t)nb;
    size_t total_ops = 0;
    for (size_t b = 0; b < nb; b++) {
        json_t *ops = json_is_object(json_array_get(tbs, b))
                          ? json_object_get(json_array_get(tbs, b), "ops")
                          : NULL;
        if (json_is_array(ops)) total_ops += json_array_size(ops);
    }
    if (total_ops > EXEC_MAX_OPS)
        return bad(c, "threadblocks", "%zu operations; this executor takes at most %d per rank",
                   total_ops, EXEC_MAX_OPS);
    *cap_refs = total_ops * (EXEC_MAX_SRCS + 1);
    rk->blocks = (exec_block_t *)calloc(nb ? nb : 1, sizeof *rk->blocks);
    rk->ops = (exec_op_t *)calloc(total_ops ? total_ops : 1, sizeof *rk->ops);
    rk->refs = (exec_ref_t *)calloc(*cap_refs ? *cap_refs : 1, sizeof *rk->refs);
    if (!rk->blocks || !rk->ops || !rk->refs) return execi_error(-ENOMEM, c->where, "no memory");
    return 0;
}

/* Op i of a block of no ops, already parsed into o: its block group and loop rules. *loop_end:
 * op index (in this block) where the current loop body ends. */
static int check_block_op(ctx_t *c, const cchan_exec_plan_t *p, const exec_block_t *bd,
                          exec_op_t *o, size_t i, size_t no, size_t nb, uint32_t *loop_end) {
    int st = 0;
    if (o->tbg_size > nb)
        st = bad(c, "tbg_size", "%u, but the rank has %zu blocks", o->tbg_size, nb);
    if (st == 0 && o->op == EXEC_OP_LOOP) {
        if (i < *loop_end)
            st = bad(c, "op", "loop inside a loop body (loops do not nest)");
        else if (i + o->body >= no)
            st = bad(c, "body", "%u, but only %zu ops follow", o->body, no - i - 1);
        else if (p->loop_unit == 0)
            st = bad(c, "op", "loop, but loop_unit is 0");
        else
            *loop_end = (uint32_t)(i + 1 + o->body);
    }
    if (st == 0 && o->op != EXEC_OP_LOOP) {
        /* ops rebase their refs on the block's first ref */
        o->ref -= bd->ref_first;
        o->reserved = (uint16_t)(i < *loop_end); /* 1: inside a loop body */
    }
    return st;
}

/* ranks[r].threadblocks[b]; the path names the block */
static int parse_block(ctx_t *c, cchan_exec_plan_t *p, int r, size_t b, const json_t *bj, size_t nb,
                       size_t cap_refs) {
    exec_rank_desc_t *rk = &p->ranks[r];
    json_t *ops = NULL;
    exec_block_t *bd = &rk->blocks[b];
    int st;
    int64_t v = 0;
    if (!json_is_object(bj)) return bad(c, "", "is %s, want a threadblock object", json_kind(bj));
    if ((st = get_int(c, bj, "id", 1, 0, INT32_MAX, &v)) < 0) return st;
    if (v != (int64_t)b)
        return bad(c, "id", "%lld, want %zu (ids 0..n-1 in order)", (long long)v, b);
    if ((st = get_array(c, bj, "ops", 1, &ops)) < 0) return st;
    bd->op_first = rk->nops;
    bd->ref_first = rk->nrefs;
    size_t no = json_array_size(ops);
    uint32_t loop_end = 0;
    for (size_t i = 0; i < no; i++) {
        size_t s2;
        path_push(c, &s2, ".ops[%zu]", i);
        exec_op_t *o = &rk->ops[rk->nops];
        st = parse_op(c, p, rk, r, json_array_get(ops, i), o, rk->refs, &rk->nrefs,
                      (uint32_t)cap_refs);
        if (st == 0) st = check_block_op(c, p, bd, o, i, no, nb, &loop_end);
        path_pop(c, s2);
        if (st < 0) return st;
        rk->nops++;
    }
    bd->nops = rk->nops - bd->op_first;
    bd->nrefs = rk->nrefs - bd->ref_first;
    uint32_t bytes =
        bd->nops * (uint32_t)sizeof(exec_op_t) + bd->nrefs * (uint32_t)sizeof(exec_ref_t);
    if (bytes > rk->max_block_bytes) rk->max_block_bytes = bytes;
    return 0;
}

static int parse_blocks(ctx_t *c, cchan_exec_plan_t *p, int r, const json_t *tbs) {
    exec_rank_desc_t *rk = &p->ranks[r];
    size_t cap_refs = 0;
    int st = alloc_blocks(c, rk, tbs, &cap_refs);
    if (st < 0) return st;
    size_t nb = json_array_size(tbs);
    for (size_t b = 0; b < nb; b++) {
        size_t save;
        path_push(c, &save, ".threadblocks[%zu]", b);
        st = parse_block(c, p, r, b, json_array_get(tbs, b), nb, cap_refs);
        path_pop(c, save);
        if (st < 0) return st;
    }
    if (nb > p->nblocks) p->nblocks = (uint32_t)nb;
    return 0;
}

static int parse_rank(ctx_t *c, cchan_exec_plan_t *p, int r, const json_t *j) {
    int st;
    if (!json_is_object(j)) return bad(c, "", "is %s, want a rank object", json_kind(j));
    if ((st = parse_rank_header(c, p, r, j)) < 0) return st;
    json_t *chs = NULL, *tbs = NULL;
    if ((st = get_array(c, j, "channels", 1, &chs)) < 0) return st;
    if ((st = get_array(c, j, "threadblocks", 1, &tbs)) < 0) return st;
    if ((st = parse_channels(c, p, r, chs)) < 0) return st;
    return parse_blocks(c, p, r, tbs);
}

/* ------------------------------------------------------------------ cross-rank rules */

/* Signals (or waits) on one channel end, counted outside and inside loops, and which block. */
typedef struct end_count {
    uint32_t sig[2], wait[2];
    int sig_block, wait_block;
} end_count_t;

/* Counts op i of block b of rank r into its channel end, semaphore (sc, sb) or barrier counts;
 * checks one block per side of every channel end and semaphore. */
static int count_op(ctx_t *c, int r, uint32_t b, uint32_t i, const exec_op_t *o, end_count_t *ec,
                    uint32_t (*sc)[4], int (*sb)[2], uint32_t barriers[2]) {
    int st = 0;
    int in = o->op != EXEC_OP_LOOP && o->reserved;
    int sig =
        o->op == EXEC_OP_SIGNAL || o->op == EXEC_OP_PUT_SIGNAL || o->op == EXEC_OP_PUT_SIGNAL_FLUSH;
    snprintf(c->path, sizeof c->path, "ranks[%d].threadblocks[%u].ops[%u]", r, b, i);
    if (sig || o->op == EXEC_OP_WAIT) {
        end_count_t *e = &ec[o->ch];
        int *blk = sig ? &e->sig_block : &e->wait_block;
        if (o->tbg_index == 0 || o->tbg_size == 1) {
            if (*blk >= 0 && *blk != (int)b)
                st = bad(c, "ch",
                         "%d: %s on this channel end from blocks %d and %u "
                         "(one block per side)",
                         o->ch, sig ? "signals" : "waits", *blk, b);
            *blk = (int)b;
            (sig ? e->sig : e->wait)[in]++;
        }
    }
    if (o->op == EXEC_OP_SEM_RELEASE || o->op == EXEC_OP_SEM_ACQUIRE) {
        int acq = o->op == EXEC_OP_SEM_ACQUIRE;
        int *blk = &sb[o->sem][acq];
        if (*blk >= 0 && *blk != (int)b)
            st = bad(c, "sem", "%d: %s from blocks %d and %u (one block each)", o->sem,
                     acq ? "acquired" : "released", *blk, b);
        *blk = (int)b;
        sc[o->sem][acq * 2 + in]++;
    }
    if (o->op == EXEC_OP_BARRIER) barriers[in]++;
    return st;
}

/* Every release of a rank's semaphore needs one acquire; notes semaphores crossing blocks. */
static int check_sems(ctx_t *c, cchan_exec_plan_t *p, int r, uint32_t ns, uint32_t (*sc)[4],
                      int (*sb)[2]) {
    int st = 0;
    for (uint32_t s = 0; s < ns && st == 0; s++) {
        snprintf(c->path, sizeof c->path, "ranks[%d]", r);
        if (sc[s][0] != sc[s][2] || sc[s][1] != sc[s][3])
            st = bad(c, "semaphores",
                     "semaphore %u released %u times (+%u in loops) but acquired %u (+%u in "
                     "loops): every release needs one acquire",
                     s, sc[s][0], sc[s][1], sc[s][2], sc[s][3]);
        if (sb[s][0] >= 0 && sb[s][1] >= 0 && sb[s][0] != sb[s][1]) p->cross_block = 1;
    }
    return st;
}

/* Rank r's signals and waits per channel end (ec, [nch] allocated here), barriers, semaphores. */
static int count_rank(ctx_t *c, cchan_exec_plan_t *p, int r, end_count_t **ecp,
                      uint32_t barriers[2]) {
    int st = 0;
    exec_rank_desc_t *rk = &p->ranks[r];
    end_count_t *ec = *ecp = (end_count_t *)calloc(rk->nch ? rk->nch : 1, sizeof(end_count_t));
    if (!ec) return execi_error(-ENOMEM, c->where, "no memory");
    for (uint32_t k = 0; k < rk->nch; k++) ec[k].sig_block = ec[k].wait_block = -1;
    /* semaphores: releases/acquires per semaphore, and the blocks */
    uint32_t ns = rk->semaphores;
    uint32_t(*sc)[4] = (uint32_t(*)[4])calloc(ns ? ns : 1, sizeof *sc);
    int(*sb)[2] = (int(*)[2])malloc((ns ? ns : 1) * sizeof *sb);
    if (!sc || !sb) {
        free(sc);
        free(sb);
        return execi_error(-ENOMEM, c->where, "no memory");
    }
    for (uint32_t s = 0; s < ns; s++) sb[s][0] = sb[s][1] = -1;
    for (uint32_t b = 0; b < rk->nblocks && st == 0; b++) {
        const exec_block_t *bd = &rk->blocks[b];
        for (uint32_t i = 0; i < bd->nops && st == 0; i++)
            st = count_op(c, r, b, i, &rk->ops[bd->op_first + i], ec, sc, sb, barriers);
    }
    if (st == 0) st = check_sems(c, p, r, ns, sc, sb);
    free(sc);
    free(sb);
    return st;
}

/* An op of rank r may reach channel k's peer's scratch only within that peer's scratch_chunks. */
static int check_peer_scratch(ctx_t *c, const exec_rank_desc_t *rk, uint32_t k,
                              const exec_chan_desc_t *cd, const exec_rank_desc_t *pk) {
    for (uint32_t i = 0; i < rk->nrefs; i++) {
        const exec_ref_t *f = &rk->refs[i];
        if (f->ch == (int)k && f->buf == EXEC_BUF_SCRATCH &&
            (uint64_t)f->chunk + (uint64_t)(f->count - 1) * f->stride >= pk->scratch_chunks)
            return bad(c, "",
                       "an op reaches rank %d's scratch chunk %llu, but that "
                       "rank has %u scratch_chunks",
                       cd->peer,
                       (unsigned long long)f->chunk +
                           (unsigned long long)(f->count - 1) * f->stride,
                       pk->scratch_chunks);
    }
    return 0;
}

/* Which of input/output the peers reach (through memory channels or port puts): registered. */
static void mark_need_reg(cchan_exec_plan_t *p, const exec_chan_desc_t *cd) {
    for (int b = 0; b < 2; b++)
        if (cd->remote_mask & (1u << b)) p->need_reg |= 1u << b;
    if (cd->type == EXEC_CH_PORT)
        for (int pr = 0; pr < 9; pr++)
            if (cd->port_pairs & (1u << pr)) {
                if (pr / 3 < 2) p->need_reg |= 1u << (pr / 3);
                if (pr % 3 < 2) p->need_reg |= 1u << (pr % 3);
            }
}

/* Channel k of rank r against its other end on the peer. */
static int check_channel_end(ctx_t *c, cchan_exec_plan_t *p, int r, uint32_t k,
                             end_count_t *const *ec) {
    int st = 0;
    const exec_rank_desc_t *rk = &p->ranks[r];
    const exec_chan_desc_t *cd = &rk->ch[k];
    snprintf(c->path, sizeof c->path, "ranks[%d].channels[%u]", r, k);
    const exec_rank_desc_t *pk = &p->ranks[cd->peer];
    int other = -1;
    for (uint32_t m = 0; m < pk->nch; m++)
        if (pk->ch[m].type == cd->type && pk->ch[m].peer == r && pk->ch[m].index == cd->index)
            other = (int)m;
    if (other < 0)
        return bad(c, "peer",
                   "%d: rank %d has no %s channel to rank %d with index %d (the "
                   "other end)",
                   cd->peer, cd->peer, exec_ch_type_names[cd->type], r, cd->index);
    const end_count_t *a = &ec[r][k], *w = &ec[cd->peer][other];
    if (a->sig[0] != w->wait[0] || a->sig[1] != w->wait[1])
        st = bad(c, "",
                 "%u signals (+%u in loops) on this end, but rank %d's end "
                 "(channels[%d]) waits %u times (+%u in loops): every signal "
                 "needs one wait",
                 a->sig[0], a->sig[1], cd->peer, other, w->wait[0], w->wait[1]);
    /* the peer's scratch chunks reached through this channel */
    if (st == 0 && (cd->remote_mask & (1u << EXEC_BUF_SCRATCH)))
        st = check_peer_scratch(c, rk, k, cd, pk);
    mark_need_reg(p, cd);
    return st;
}

static int check_cross(ctx_t *c, cchan_exec_plan_t *p) {
    int st = 0;
    end_count_t *ec[EXEC_MAX_RANKS];
    memset(ec, 0, sizeof ec);
    uint32_t barriers[EXEC_MAX_RANKS][2];
    memset(barriers, 0, sizeof barriers);
    for (int r = 0; r < p->nranks && st == 0; r++) st = count_rank(c, p, r, &ec[r], barriers[r]);
    for (int r = 0; r < p->nranks && st == 0; r++) {
        exec_rank_desc_t *rk = &p->ranks[r];
        if (barriers[r][0] != barriers[0][0] || barriers[r][1] != barriers[0][1]) {
            snprintf(c->path, sizeof c->path, "ranks[%d]", r);
            st = bad(c, "threadblocks",
                     "%u barriers (+%u in loops), rank 0 has %u (+%u): every "
                     "rank runs the same barriers",
                     barriers[r][0], barriers[r][1], barriers[0][0], barriers[0][1]);
            break;
        }
        for (uint32_t k = 0; k < rk->nch && st == 0; k++) st = check_channel_end(c, p, r, k, ec);
    }
    for (int r = 0; r < p->nranks; r++) free(ec[r]);
    return st;
}

/* ------------------------------------------------------------------ top level */

static int parse_plan(const json_t *root, cchan_exec_plan_t *p, const char *where) {
    ctx_t cx;
    ctx_t *c = &cx;
    c->where = where;
    c->path[0] = 0;
    int st;
    int64_t v = 0;
    if (!json_is_object(root))
        return bad(c, "(document)", "is %s, want an object", json_kind(root));
    static const char *const fmt[] = {"cchan.plan"};
    int e = 0;
    if ((st = get_enum(c, root, "format", 1, fmt, 1, &e)) < 0) return st;
    if ((st = get_int(c, root, "version", 1, INT64_MIN, INT64_MAX, &v)) < 0) return st;
    if (v != 1)
        return execi_error(CCHAN_ERR_UNSUPPORTED, where,
                           "version: %lld, this executor reads version 1", (long long)v);
    json_t *nm = json_object_get(root, "name");
    if (!nm) return bad(c, "name", "missing (required)");
    if (!json_is_string(nm)) return bad(c, "name", "is %s, want a string", json_kind(nm));
    size_t name_len = json_string_length(nm);
    if (name_len > EXEC_NAME_MAX) {
        const char *s = json_string_value(nm);
        int shown = EXEC_NAME_SHOWN;
        while (shown > 0 && ((unsigned char)s[shown] & 0xC0) == 0x80) shown--; /* whole UTF-8 */
        return bad(c, "name",
                   "\"%.*s...\" (%zu bytes, quoted here up to %d): longer than the %d bytes a plan "
                   "name may have",
                   shown, s, name_len, shown, EXEC_NAME_MAX);
    }
    p->name = strdup(json_string_value(nm));
    if (!p->name) return execi_error(-ENOMEM, where, "no memory");
    if ((st = get_enum(c, root, "collective", 1, exec_coll_names, 6, &e)) < 0) return st;
    p->collective = (cchan_exec_collective_t)e;
    if ((st = get_int(c, root, "nranks", 1, 1, 4096, &v)) < 0) return st;
    if (v > EXEC_MAX_RANKS)
        return execi_error(CCHAN_ERR_UNSUPPORTED, where,
                           "nranks: %lld, this executor runs at most %d ranks", (long long)v,
                           EXEC_MAX_RANKS);
    p->nranks = (int)v;
    v = -1;
    if ((st = get_int(c, root, "root", 0, 0, p->nranks - 1, &v)) < 0) return st;
    p->root = (int)v;
    if (p->collective == CCHAN_EXEC_BROADCAST && p->root < 0)
        return bad(c, "root", "missing (a broadcast plan names its root)");
    static const char *const protos[] = {"simple", "ll8", "ll16"};
    if ((st = get_enum(c, root, "protocol", 1, protos, 3, &p->protocol)) < 0) return st;
    if ((st = get_bool(c, root, "inplace", &p->inplace)) < 0) return st;
    static const char *const ops[] = {"sum"};
    if ((st = get_enum(c, root, "reduce_op", 1, ops, 1, &e)) < 0) return st;
    int64_t mn = 0, mx = 0, al = 16, gr = 16, lu = 0;
    if ((st = get_int(c, root, "min_bytes", 1, 0, INT64_MAX, &mn)) < 0) return st;
    if ((st = get_int(c, root, "max_bytes", 1, 0, INT64_MAX, &mx)) < 0) return st;
    if (mx && mx < mn)
        return bad(c, "max_bytes", "%lld is below min_bytes %lld", (long long)mx, (long long)mn);
    if ((st = get_int(c, root, "align", 1, 1, 1 << 20, &al)) < 0) return st;
    if (al % 16)
        return execi_error(CCHAN_ERR_UNSUPPORTED, where,
                           "align: %lld, this executor needs a multiple of 16 (vector accesses)",
                           (long long)al);
    if ((st = get_int(c, root, "granularity", 1, 1, INT64_MAX, &gr)) < 0) return st;
    if ((st = get_int(c, root, "loop_unit", 1, 0, INT64_MAX, &lu)) < 0) return st;
    if (lu % al)
        return bad(c, "loop_unit", "%lld is not a multiple of align %lld", (long long)lu,
                   (long long)al);
    p->min_bytes = (uint64_t)mn;
    p->max_bytes = (uint64_t)mx;
    p->align = (uint64_t)al;
    p->granularity = (uint64_t)gr;
    p->loop_unit = (uint64_t)lu;
    json_t *bufs = json_object_get(root, "buffers");
    if (!bufs) return bad(c, "buffers", "missing (required)");
    if (!json_is_object(bufs)) return bad(c, "buffers", "is %s, want an object", json_kind(bufs));
    snprintf(c->path, sizeof c->path, "buffers");
    for (int b = 0; b < EXEC_NBUF; b++) {
        if ((st = get_int(c, bufs, exec_buf_names[b], 1, b == EXEC_BUF_SCRATCH ? 0 : 1, 1 << 20,
                          &v)) < 0)
            return st;
        p->buf_chunks[b] = (uint32_t)v;
    }
    c->path[0] = 0;
    if ((uint64_t)gr % ((uint64_t)p->buf_chunks[EXEC_BUF_INPUT] * (uint64_t)al))
        return bad(c, "granularity", "%lld is not a multiple of buffers.input x align (%u x %lld)",
                   (long long)gr, p->buf_chunks[EXEC_BUF_INPUT], (long long)al);
    if ((st = get_int(c, root, "scratch_chunk_factor", 1, 1, 2, &v)) < 0) return st;
    p->scratch_factor = (uint32_t)v;
    if ((st = get_bool(c, root, "ll_double_buffer", &p->ll_double_buffer)) < 0) return st;
    json_t *ranks = NULL;
    if ((st = get_array(c, root, "ranks", 1, &ranks)) < 0) return st;
    if (json_array_size(ranks) != (size_t)p->nranks)
        return bad(c, "ranks", "%zu entries, but nranks is %d", json_array_size(ranks), p->nranks);
    p->ranks = (exec_rank_desc_t *)calloc((size_t)p->nranks, sizeof *p->ranks);
    if (!p->ranks) return execi_error(-ENOMEM, where, "no memory");
    for (int r = 0; r < p->nranks; r++) {
        snprintf(c->path, sizeof c->path, "ranks[%d]", r);
        if ((st = parse_rank(c, p, r, json_array_get(ranks, (size_t)r))) < 0) return st;
        for (uint32_t i = 0; i < p->ranks[r].nops; i++) {
            uint8_t o = p->ranks[r].ops[i].op;
            if (o == EXEC_OP_PUT_PACKETS || o == EXEC_OP_READ_PACKETS ||
                o == EXEC_OP_REDUCE_PACKETS)
                p->uses_packets = 1;
            if (o == EXEC_OP_BARRIER) p->uses_barrier = 1;
        }
    }
    c->path[0] = 0;
    if (p->nblocks == 0) return bad(c, "ranks", "no rank has a thread block");
    if ((st = check_cross(c, p)) < 0) return st;
    return execi_verify_plan(p, where);
}

static int plan_from_json(json_t *root, cchan_exec_plan_t **out, const char *where) {
    cchan_exec_plan_t *p = (cchan_exec_plan_t *)calloc(1, sizeof *p);
    if (!p) {
        json_decref(root);
        return execi_error(-ENOMEM, where, "no memory");
    }
    int st = parse_plan(root, p, where);
    json_decref(root);
    if (st < 0) {
        cchan_exec_plan_free(p);
        return st;
    }
    *out = p;
    return 0;
}

int cchan_exec_plan_load_string(const char *json, size_t len, cchan_exec_plan_t **out) {
    static const char *where = "cchan_exec_plan_load_string";
    execi_clear_error();
    if (!json || !out) return execi_error(-EINVAL, where, "json and out must not be NULL");
    json_error_t err;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return execi_error(-EINVAL, where, "not valid JSON: line %d column %d: %s", err.line,
                           err.column, err.text);
    return plan_from_json(root, out, where);
}

int cchan_exec_plan_load_file(const char *path, cchan_exec_plan_t **out) {
    static const char *where = "cchan_exec_plan_load_file";
    execi_clear_error();
    if (!path || !out) return execi_error(-EINVAL, where, "path and out must not be NULL");
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return execi_error(-EINVAL, where, "%s: line %d column %d: %s", path, err.line, err.column,
                           err.text);
    int st = plan_from_json(root, out, where);
    if (st < 0) {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", cchan_exec_last_error());
        execi_error(st, path, "%s", tmp);
    }
    return st;
}

int cchan_exec_plan_info(const cchan_exec_plan_t *p, cchan_exec_plan_info_t *out) {
    if (!p) return execi_error(-EINVAL, "cchan_exec_plan_info", "plan is NULL");
    if (!out) return execi_error(-EINVAL, "cchan_exec_plan_info", "out is NULL");
    out->name = p->name;
    out->collective = p->collective;
    out->nranks = p->nranks;
    out->root = p->root;
    out->inplace = p->inplace;
    out->min_bytes = p->min_bytes;
    out->max_bytes = p->max_bytes;
    out->granularity = p->granularity;
    out->loop_unit = p->loop_unit;
    out->nblocks = p->nblocks;
    out->in_chunks = p->buf_chunks[EXEC_BUF_INPUT];
    out->out_chunks = p->buf_chunks[EXEC_BUF_OUTPUT];
    out->uses_port = p->uses_port;
    out->cross_block = p->cross_block;
    return 0;
}

int cchan_exec_plan_fits(const cchan_exec_plan_t *p, uint64_t in_bytes) {
    if (!p) {
        execi_error(-EINVAL, "cchan_exec_plan_fits", "plan is NULL");
        return 0;
    }
    if (in_bytes == 0 || in_bytes % p->granularity) return 0;
    if (in_bytes < p->min_bytes) return 0;
    if (p->max_bytes && in_bytes > p->max_bytes) return 0;
    return 1;
}
