/* cchan_coll CE all-pairs: copy engines and SMs together on registered buffers. A call is a short
 * sequence on the caller's stream (coll_algos.h says what each piece does): on a GPU the copies go
 * to copy-engine lanes forked from and joined back into the stream; on the host platform every
 * step is synchronous and a copy is a memcpy into the peer's mapping. */
#include <string.h>

#include "coll_internal.h"

/* Copy-engine lane `lane` waits for what `stream` has enqueued so far (*forked: lanes to join). */
static int coll_ce_fork(cchan_coll_t *c, int lane, unsigned *forked, void *stream) {
    if (c->platform == CCHAN_PLATFORM_HOST) return 0;
    *forked |= 1u << lane;
    return colli_ce_fork(c->device, c->ce, lane, stream);
}

/* Copies [src, src + bytes) to dst on copy-engine lane `lane` (forked before). */
static int coll_ce_copy(cchan_coll_t *c, int lane, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return 0;
    if (c->platform == CCHAN_PLATFORM_HOST) {
        memcpy(dst, src, bytes);
        return 0;
    }
    return colli_ce_copy(c->device, c->ce, lane, dst, src, bytes);
}

static int coll_ce_join_all(cchan_coll_t *c, unsigned forked, void *stream) {
    for (int l = 0; l < COLLI_CE_LANES_MAX; l++)
        if (forked & (1u << l)) {
            int st = colli_ce_join(c->device, c->ce, l, stream);
            if (st) return st;
        }
    return 0;
}

/* AllGather of at least this many bytes on buffers with 2 MiB pages: the copy engines alone, which
 * beat the 40% SM mix only that large (docs/tuning.md, "CE SM share"). */
#define COLL_CE_ALONE_MIN_BYTES (512 * COLL_MiB)

/* ce_rs AllReduce splits a shard that fits one chunk into two from this many bytes per half: below,
 * the fixed cost of a chunk outweighs the overlap (docs/tuning.md, "CE AllReduce"). */
#define COLL_CE_SPLIT_MIN_BYTES (16 * COLL_MiB)

/* The share of the bytes ce_allpairs moves with SM stores, in thousandths (ce_sm_permille; -1:
 * large AllGathers by the copy engines alone where the buffers have 2 MiB pages, else 40% by the
 * SMs). */
static int64_t coll_ce_permille(const cchan_coll_t *c, const coll_args_t *a, cchan_coll_op_t op) {
    int64_t p = c->param[COLL_P_CE_SM_PERMILLE];
    if (p >= 0) return p;
    /* AllReduce with ce_rs and 2 MiB pages: the SMs only reduce (docs/tuning.md, "CE SM
     * share") */
    if (op == CCHAN_COLL_ALLREDUCE) return a->ce_pushed && a->ce_big_pages ? 0 : 400;
    const uint64_t bytes = a->count * a->esize * (uint64_t)c->nranks;
    return a->ce_big_pages && bytes >= COLL_CE_ALONE_MIN_BYTES ? 0 : 400;
}

/* ce_rs: the copy engines push AllReduce's shards (-1: where the buffers have 2 MiB pages). */
static int coll_ce_rs(const cchan_coll_t *c, const coll_args_t *a) {
    int64_t v = c->param[COLL_P_CE_RS];
    return v >= 0 ? (int)v : (int)a->ce_big_pages;
}

/* The ce_rs pipeline's shape: equal chunks of a padded shard through `regions` staging regions,
 * the same on every rank. */
typedef struct coll_ce_rs_plan {
    size_t shard, chunk, vec, nchunks;
    int regions;
} coll_ce_rs_plan_t;

/* Chunk k of the plan: [*off, *off + *len) of every shard. */
static void coll_ce_chunk(const coll_ce_rs_plan_t *pl, size_t k, size_t *off, size_t *len) {
    *off = k * pl->chunk;
    *len = pl->shard - *off < pl->chunk ? pl->shard - *off : pl->chunk;
}

/* The copy-engine lane of the shard pushes: one, so the pushes run back to back in chunk order and
 * the first kernel waits for one chunk's copy, not for several sharing the engines (docs/tuning.md,
 * "CE AllReduce"); the output copies take the lanes after it. */
#define COLL_CE_SHARD_LANE 0

/* Chunk k ([off, off + part) of every shard) of every peer's shard, from send into that peer's
 * staging region k % R for this rank, on the shard lane forked from the stream; then mark
 * k % COLLI_CE_MARKS on that lane (the kernel of chunk k waits for it). */
static int coll_ce_push_shards(cchan_coll_t *c, coll_args_t *a, const coll_ce_rs_plan_t *pl,
                               size_t k, unsigned *forked, void *stream) {
    size_t off, part;
    coll_ce_chunk(pl, k, &off, &part);
    const int lane = COLL_CE_SHARD_LANE, me = c->rank;
    const size_t es = a->esize, shard = pl->shard;
    a->ce_region = (uint32_t)(k % (size_t)pl->regions);
    int st = coll_ce_fork(c, lane, forked, stream);
    for (int j = 1; j < c->nranks && st == 0; j++) {
        int p = (me + j) % c->nranks;
        size_t ps0 = coll_min_u64((uint64_t)p * shard, a->count);
        size_t plen = coll_min_u64(shard, a->count - ps0), c0 = coll_min_u64(off, plen);
        size_t clen = coll_min_u64(part, plen - c0);
        st = coll_ce_copy(c, lane, coll_ce_slot(a, a->peer_scratch[p], p, me),
                          a->send + (ps0 + c0) * es, clen * es);
    }
    if (st == 0 && c->platform == CCHAN_PLATFORM_CUDA)
        st = colli_ce_mark(c->device, c->ce, lane, (int)(k % COLLI_CE_MARKS));
    return st;
}

/* ce_chunk in elements: at most a staging slot, whole vectors. */
static size_t coll_ce_chunk_elems(const cchan_coll_t *c, const coll_args_t *a, size_t vec) {
    size_t chunk = (size_t)c->param[COLL_P_CE_CHUNK];
    if (chunk > a->ce_slot) chunk = a->ce_slot;
    chunk = chunk / a->esize / vec * vec;
    return chunk < vec ? vec : chunk;
}

/* One CE AllReduce chunk [off, off + part) of every rank's shard (shard elements, padded): the
 * CE_RS kernel on staging region `region` (the SMs also store the first permille/1000 of this
 * rank's reduced chunk into every peer's recv), then the copy engines copy the rest of it into
 * every peer's recv on lane `lane`. Every rank runs the same chunks and grids, so the kernels'
 * per-block barriers pair up. */
static int coll_ce_reduce_chunk(cchan_coll_t *c, coll_args_t *a, int dt, size_t shard, size_t off,
                                size_t part, uint32_t region, int lane, int64_t permille,
                                unsigned *forked, void *stream, const char *where) {
    const size_t es = a->esize, vec = COLL_VEC / es;
    const size_t s0 = coll_min_u64((uint64_t)c->rank * shard, a->count);
    const size_t len = coll_min_u64(shard, a->count - s0);
    const size_t sm = permille >= 1000 ? part : part / 1000 * (size_t)permille / vec * vec;
    a->part_off = off;
    a->part_len = part;
    a->sm_len = sm;
    a->ce_region = region;
    int st = colli_run(c, COLL_K_CE_RS, dt, a, colli_zc_grid(c, part * es), stream, where);
    const size_t c0 = off < len ? off : len;
    const size_t clen = len - c0 < part ? len - c0 : part;
    const size_t at = (s0 + c0 + sm) * es, bytes = clen > sm ? (clen - sm) * es : 0;
    if (st == 0 && bytes && c->nranks > 1) st = coll_ce_fork(c, lane, forked, stream);
    for (int j = 1; j < c->nranks && st == 0; j++) {
        int p = (c->rank + j) % c->nranks;
        st = coll_ce_copy(c, lane, a->peer_recv[p] + at, a->recv + at, bytes);
    }
    return st;
}

/* CE AllReduce with both phases on the copy engines (ce_rs = 1) and R = ce_regions staging
 * regions. Chunk k of every peer's shard is pushed by a copy engine into that peer's staging
 * region k % R on the shard lane, and a mark after it; the CE_RS kernel of chunk k waits for that
 * mark, meets every peer at its per-block barrier (so every peer's copy into this rank has landed:
 * each peer's kernel also began after its own copy), and reduces; a copy engine then pushes the
 * reduced chunk (less the SMs' share) into every peer's recv on the lanes after the shard lane.
 * The push of chunk k + R - 1 is forked after kernel k: that kernel's barrier means every peer has
 * finished kernel k - 1, the last reader of region (k + R - 1) % R. */
static int coll_ce_allreduce_rs(cchan_coll_t *c, coll_args_t *a, int dt, void *stream,
                                const char *where) {
    const size_t es = a->esize, vec = COLL_VEC / es, n = (size_t)c->nranks;
    coll_ce_rs_plan_t pl = {.vec = vec};
    pl.shard = (size_t)coll_round_up((a->count + n - 1) / n, vec);
    pl.regions = (int)c->param[COLL_P_CE_REGIONS];
    a->ce_slot = colli_ce_slot_bytes(a, pl.regions);
    a->ce_pushed = 1;
    pl.chunk = coll_ce_chunk_elems(c, a, vec);
    /* two chunks at least where halves are large, or nothing overlaps; smaller shards in one
     * chunk (COLL_CE_SPLIT_MIN_BYTES) */
    const size_t half = pl.shard / 2 / vec * vec;
    if (pl.chunk > half && half * es >= COLL_CE_SPLIT_MIN_BYTES) pl.chunk = half;
    size_t off = 0, part = 0;
    pl.nchunks = (pl.shard + pl.chunk - 1) / pl.chunk;
    const size_t ahead = (size_t)pl.regions - 1;
    const int64_t permille = coll_ce_permille(c, a, CCHAN_COLL_ALLREDUCE);
    int ag_lanes = (int)c->param[COLL_P_CE_LANES];
    if (ag_lanes > COLLI_CE_LANES_MAX - 1) ag_lanes = COLLI_CE_LANES_MAX - 1;
    unsigned forked = 0;
    int st = colli_run_barrier(c, a, stream, where);
    for (size_t k = 0; k < pl.nchunks && k < ahead && st == 0; k++)
        st = coll_ce_push_shards(c, a, &pl, k, &forked, stream);
    for (size_t k = 0; k < pl.nchunks && st == 0; k++) {
        coll_ce_chunk(&pl, k, &off, &part);
        if (c->platform == CCHAN_PLATFORM_CUDA)
            st = colli_ce_wait_mark(c->device, c->ce, (int)(k % COLLI_CE_MARKS), stream);
        if (st == 0)
            st = coll_ce_reduce_chunk(c, a, dt, pl.shard, off, part,
                                      (uint32_t)(k % (size_t)pl.regions),
                                      COLL_CE_SHARD_LANE + 1 + (int)(k % (size_t)ag_lanes),
                                      permille, &forked, stream, where);
        /* chunk k + R - 1's pushes, once kernel k's barrier has freed its region on every peer */
        if (k + ahead < pl.nchunks && st == 0)
            st = coll_ce_push_shards(c, a, &pl, k + ahead, &forked, stream);
    }
    if (st == 0 && c->platform == CCHAN_PLATFORM_CUDA) st = coll_ce_join_all(c, forked, stream);
    if (st == 0) st = colli_run_barrier(c, a, stream, where);
    return st;
}

int colli_ce_allreduce(cchan_coll_t *c, coll_args_t *a, int dt, void *stream, const char *where) {
    if (coll_ce_rs(c, a)) return coll_ce_allreduce_rs(c, a, dt, stream, where);
    const size_t vec = COLL_VEC / a->esize, n = (size_t)c->nranks;
    const size_t shard = (size_t)coll_round_up((a->count + n - 1) / n, vec);
    const size_t chunk = coll_ce_chunk_elems(c, a, vec);
    const int64_t permille = coll_ce_permille(c, a, CCHAN_COLL_ALLREDUCE);
    const int lanes = (int)c->param[COLL_P_CE_LANES];
    unsigned forked = 0;
    int st = colli_run_barrier(c, a, stream, where);
    for (size_t off = 0, k = 0; off < shard && st == 0; k++) {
        const size_t part = shard - off < chunk ? shard - off : chunk;
        st = coll_ce_reduce_chunk(c, a, dt, shard, off, part, (uint32_t)(k & 1),
                                  (int)(k % (size_t)lanes), permille, &forked, stream, where);
        off += part;
    }
    if (st == 0 && c->platform == CCHAN_PLATFORM_CUDA) st = coll_ce_join_all(c, forked, stream);
    if (st == 0) st = colli_run_barrier(c, a, stream, where);
    return st;
}

int colli_ce_allgather(cchan_coll_t *c, coll_args_t *a, void *stream, const char *where) {
    const size_t bytes = a->count * a->esize, at = (size_t)c->rank * bytes;
    const int64_t permille = coll_ce_permille(c, a, CCHAN_COLL_ALLGATHER);
    const size_t lanes = (size_t)c->param[COLL_P_CE_LANES];
    const size_t sm = permille >= 1000 ? bytes : bytes / 1000 * (size_t)permille / 16 * 16;
    const size_t ce = bytes - sm, per = (size_t)coll_round_up((ce + lanes - 1) / lanes, 16);
    /* out of place, this rank's own block by a copy engine too, which makes out of place as fast
     * as in place (docs/tuning.md, "CE AllGather local block") */
    const int local_ce = !a->in_place;
    unsigned forked = 0;
    int st = colli_run_barrier(c, a, stream, where);
    for (size_t l = 0; l < lanes && st == 0; l++) {
        size_t lo = l * per < ce ? l * per : ce, part = ce - lo < per ? ce - lo : per;
        if (part && c->nranks > 1) st = coll_ce_fork(c, (int)l, &forked, stream);
        for (int j = 1; j < c->nranks && st == 0; j++) {
            int p = (c->rank + j) % c->nranks;
            st = coll_ce_copy(c, (int)l, a->peer_recv[p] + at + sm + lo, a->send + sm + lo, part);
        }
    }
    if (st == 0 && local_ce) {
        const int l = (int)(lanes % COLLI_CE_LANES_MAX); /* its own lane where one is left */
        st = coll_ce_fork(c, l, &forked, stream);
        if (st == 0) st = coll_ce_copy(c, l, a->recv + at, a->send, bytes);
    }
    a->sm_len = sm;
    a->in_place = a->in_place || local_ce; /* AG_PUSH: no local copy left to do */
    if (st == 0 && (sm || !a->in_place)) {
        size_t touched = a->in_place ? sm : bytes;
        st = colli_run(c, COLL_K_AG_PUSH, 0, a, colli_zc_grid(c, touched), stream, where);
    }
    if (st == 0 && c->platform == CCHAN_PLATFORM_CUDA) st = coll_ce_join_all(c, forked, stream);
    if (st == 0) st = colli_run_barrier(c, a, stream, where);
    return st;
}
