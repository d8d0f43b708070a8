/* Fuzz target for the plan loader (cchan_exec_plan_load_string). The input steers mutations of a
 * valid plan (exec_fuzz_seed.h): each 4-byte group picks a place in the document (an object
 * member or array element reached by walking from the root) and replaces, deletes or duplicates
 * it, or sets it to an integer near a boundary; a final byte may truncate the text. Raw inputs
 * that are JSON themselves are loaded as they are too.
 *
 * Property: the loader returns 0 or a negative status with a message, never crashes; and a plan
 * it accepts has every index in range (channels, semaphores, chunks of the owner's buffers, loop
 * bodies), which is what the interpreter relies on: abort() otherwise. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_fuzz_seed.h"
#include "exec_internal.h"

static void check_accepted(const cchan_exec_plan_t *p) {
    if (p->nranks < 1 || p->nranks > EXEC_MAX_RANKS || p->nblocks == 0 ||
        p->nblocks > EXEC_MAX_BLOCKS || p->align % 16 || p->granularity == 0)
        abort();
    for (int r = 0; r < p->nranks; r++) {
        const exec_rank_desc_t *rk = &p->ranks[r];
        if (rk->nch > EXEC_MAX_CHANNELS || rk->nblocks > p->nblocks) abort();
        for (uint32_t k = 0; k < rk->nch; k++)
            if (rk->ch[k].peer < 0 || rk->ch[k].peer >= p->nranks || rk->ch[k].peer == r) abort();
        for (uint32_t b = 0; b < rk->nblocks; b++) {
            const exec_block_t *bd = &rk->blocks[b];
            if (bd->op_first + bd->nops > rk->nops || bd->ref_first + bd->nrefs > rk->nrefs)
                abort();
            for (uint32_t i = 0; i < bd->nops; i++) {
                const exec_op_t *o = &rk->ops[bd->op_first + i];
                if (o->op >= EXEC_OP_COUNT) abort();
                if (o->op == EXEC_OP_LOOP) {
                    if (i + o->body >= bd->nops || p->loop_unit == 0) abort();
                    continue;
                }
                if (o->ch >= (int)rk->nch || o->sem >= (int)rk->semaphores) abort();
                if (o->nsrc > EXEC_MAX_SRCS || o->ref + o->nsrc + o->ndst > bd->nrefs) abort();
                if (o->tbg_index >= o->tbg_size) abort();
                for (int j = 0; j < o->nsrc + o->ndst; j++) {
                    const exec_ref_t *f = &rk->refs[bd->ref_first + o->ref + j];
                    if (f->buf >= EXEC_NBUF || f->count == 0 || f->stride == 0) abort();
                    if (f->ch >= (int)rk->nch) abort();
                    int owner = f->ch >= 0 ? rk->ch[f->ch].peer : r;
                    uint64_t lim = f->buf == EXEC_BUF_SCRATCH ? p->ranks[owner].scratch_chunks
                                                              : p->buf_chunks[f->buf];
                    if ((uint64_t)f->chunk + (uint64_t)(f->count - 1) * f->stride >= lim) abort();
                    if (f->ch >= 0 && !(rk->ch[f->ch].remote_mask & (1u << f->buf))) abort();
                }
            }
        }
    }
}

static void load(const char *s, size_t n) {
    cchan_exec_plan_t *p = NULL;
    int st = cchan_exec_plan_load_string(s, n, &p);
    if (st == 0) {
        check_accepted(p);
        cchan_exec_plan_free(p);
    } else if (st > 0 || p != NULL || cchan_exec_last_error()[0] == 0) {
        abort();
    }
}

/* The `pick`-th value met in a depth-first walk (wrapping), with its parent and key/index. */
typedef struct spot {
    json_t *parent;
    const char *key;
    size_t index;
    json_t *value;
} spot_t;

static void walk(json_t *v, json_t *parent, const char *key, size_t index, uint32_t *left,
                 spot_t *out) {
    if (out->value) return;
    if (*left == 0 && parent) {
        out->parent = parent;
        out->key = key;
        out->index = index;
        out->value = v;
        return;
    }
    if (parent) (*left)--;
    if (json_is_object(v)) {
        const char *k;
        json_t *c;
        json_object_foreach(v, k, c) walk(c, v, k, 0, left, out);
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            walk(json_array_get(v, i), v, NULL, i, left, out);
    }
}

static void set(spot_t *s, json_t *nv) {
    if (json_is_object(s->parent))
        json_object_set_new(s->parent, s->key, nv);
    else
        json_array_set_new(s->parent, s->index, nv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 0 && data[0] == '{') {
        load((const char *)data, size);
        return 0;
    }
    json_error_t err;
    json_t *root = json_loads(exec_fuzz_seed, 0, &err);
    if (!root) abort();
    size_t i = 0;
    for (; i + 4 <= size && i < 64; i += 4) {
        uint32_t pick = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8);
        uint8_t what = data[i + 2], arg = data[i + 3];
        uint32_t left = pick % 400;
        spot_t s = {0};
        walk(root, NULL, NULL, 0, &left, &s);
        if (!s.value) continue;
        static const long long edge[] = {-1,
                                         0,
                                         1,
                                         2,
                                         3,
                                         7,
                                         8,
                                         15,
                                         16,
                                         17,
                                         63,
                                         64,
                                         65,
                                         127,
                                         128,
                                         255,
                                         256,
                                         4096,
                                         65535,
                                         65536,
                                         2147483647LL,
                                         4294967296LL,
                                         9223372036854775807LL};
        switch (what % 8) {
        case 0: set(&s, json_integer(edge[arg % (sizeof edge / sizeof edge[0])])); break;
        case 1:
            if (json_is_object(s.parent))
                json_object_del(s.parent, s.key);
            else
                json_array_remove(s.parent, s.index);
            break;
        case 2:
            if (json_is_array(s.parent)) json_array_append(s.parent, s.value);
            break;
        case 3: set(&s, json_string(arg & 1 ? "scratch" : "port")); break;
        case 4: set(&s, arg & 1 ? json_true() : json_null()); break;
        case 5:
            if (json_is_integer(s.value))
                set(&s, json_integer((json_int_t)((uint64_t)json_integer_value(s.value) +
                                                  (uint64_t)(arg % 5) - 2u)));
            break;
        case 6: set(&s, json_array()); break;
        default: set(&s, json_object()); break;
        }
    }
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text) return 0;
    size_t n = strlen(text);
    if (i < size && (data[i] & 1)) n = n * data[i] / 256; /* truncated file */
    load(text, n);
    free(text);
    return 0;
}
