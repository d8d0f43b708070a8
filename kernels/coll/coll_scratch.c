/* cchan_coll scratch layout. One allocation per rank (cchan_mem_alloc, mapped into every peer),
 * one call at a time using it:
 *   [ll_off, +2 * nranks * ll_slot)  LL16 packets: parity x source rank (a quarter of the asked-for
 *                                    bytes at most, COLL_LL_SLOT_MAX a slot)
 *   [hb_off, +2 * nranks * hb_slot)  HB staging: two regions x source rank (the rest)
 *   [.., +ce_extra)                  CE staging beyond the HB area (coll_ce_extra_bytes)
 *   [sw_off, +2 * sw_chunk)          SWITCH: inputs, then results
 * CE all-pairs AllReduce stages in the HB area and the CE extension together, cut into regions of
 * a slot per peer (colli_ce_slot_bytes). */
#include "coll_internal.h"

#define COLL_LL_SLOT_MAX (2 * COLL_MiB)   /* LL16 packets: 1 MiB of payload per source */
#define COLL_SW_CHUNK_MAX (16 * COLL_MiB) /* SWITCH: bytes of a round (two regions of it) */
#define COLL_CE_EXTRA_PARTS_MAX 32u
#define COLL_CE_EXTRA_PART_MAX (2 * COLL_MiB)

/* The CE extension: as much again as the HB staging, in 2 x min(hb_blocks, 32) parts of at most
 * 2 MiB, each a multiple of 16 bytes. The CE pipeline's chunking (ce_chunk against the slot) and
 * the defaults in docs/tuning.md were measured with staging slots of exactly this size, so the
 * rounding stays as it is. */
static size_t coll_ce_extra_bytes(size_t hb_bytes, uint32_t hb_blocks) {
    const size_t parts =
        2 * (size_t)(hb_blocks < COLL_CE_EXTRA_PARTS_MAX ? hb_blocks : COLL_CE_EXTRA_PARTS_MAX);
    size_t part = hb_bytes / parts / 16 * 16;
    if (part > COLL_CE_EXTRA_PART_MAX) part = COLL_CE_EXTRA_PART_MAX;
    return parts * part;
}

uint64_t colli_ce_slot_bytes(const coll_args_t *a, int regions) {
    const uint64_t peers = a->nranks > 1 ? (uint64_t)a->nranks - 1 : 1;
    return (a->sw_off - a->hb_off) / ((uint64_t)regions * peers) / 16 * 16;
}

size_t colli_scratch_layout(size_t scratch, int nranks, uint32_t *hb_blocks, coll_args_t *a) {
    const size_t n2 = 2 * (size_t)nranks;
    size_t ll_slot = scratch / (4 * n2) / 16 * 16;
    if (ll_slot > COLL_LL_SLOT_MAX) ll_slot = COLL_LL_SLOT_MAX;
    const size_t hb_slot = (scratch - n2 * ll_slot) / n2 / 16 * 16;
    if (ll_slot < 16 || hb_slot < 256) return 0;
    if (*hb_blocks > hb_slot / 256) *hb_blocks = (uint32_t)(hb_slot / 256); /* lanes >= 256 B */
    const size_t ce_extra = coll_ce_extra_bytes(n2 * hb_slot, *hb_blocks);
    size_t sw_chunk = n2 * hb_slot / 2;
    if (sw_chunk > COLL_SW_CHUNK_MAX) sw_chunk = COLL_SW_CHUNK_MAX;
    sw_chunk = sw_chunk / (16 * (size_t)nranks) * (16 * (size_t)nranks);
    a->nranks = nranks;
    a->ll_off = 0;
    a->ll_slot = ll_slot;
    a->hb_off = n2 * ll_slot;
    a->hb_slot = hb_slot;
    a->sw_off = n2 * (ll_slot + hb_slot) + ce_extra;
    a->sw_chunk = sw_chunk;
    /* CE all-pairs stages from the HB area on (its first barrier waits for every peer to have
     * finished the last call); two regions unless the call says otherwise */
    a->ce_off = a->hb_off;
    a->ce_slot = colli_ce_slot_bytes(a, 2);
    return a->sw_off + 2 * sw_chunk;
}
