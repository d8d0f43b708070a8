/* cchan_coll's agreement on its configuration (coll_internal.h, colli_agree): every rank must
 * choose the same algorithm for the same call, so whatever changes that choice (the tuning table,
 * the loaded plans, the selection variables, the config) is compared across the ranks where it is
 * read, at cchan_coll_create and at the loads, never per call. A difference fails every rank at
 * once with one message naming it and the ranks, instead of a rank waiting without a deadline in
 * its first collective while another fails later with an unrelated message. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "coll_internal.h"

/* "rank 0 has X, ranks 1, 3 have Y": the ranks in groups of one digest, in rank order. */
static void describe_ranks(const uint64_t *digest, int n, int item, int nranks,
                           char (*vals)[COLLI_AGREE_VALUE], char *out, size_t len) {
    int done[COLL_MAX_RANKS] = {0};
    size_t at = 0;
    out[0] = '\0';
    for (int r = 0; r < nranks && at < len; r++) {
        if (done[r]) continue;
        char who[64];
        int nwho = 0;
        size_t w = 0;
        for (int q = r; q < nranks; q++) {
            if (done[q] || digest[(size_t)q * (size_t)n + (size_t)item] !=
                               digest[(size_t)r * (size_t)n + (size_t)item])
                continue;
            done[q] = 1;
            w += (size_t)snprintf(who + w, w < sizeof who ? sizeof who - w : 0, "%s%d",
                                  nwho++ ? ", " : "", q);
        }
        at += (size_t)snprintf(out + at, len - at, "%s%s %s %s %s", at ? ", " : "",
                               nwho > 1 ? "ranks" : "rank", who, nwho > 1 ? "have" : "has",
                               vals ? vals[r] : "another value");
    }
}

int colli_agree(cchan_coll_t *c, const colli_agree_item_t *items, int n, const char *where) {
    if (n < 1 || n > COLLI_AGREE_MAX)
        return colli_error(-EINVAL, where, "%d configuration items: want 1..%d (a bug here)", n,
                           COLLI_AGREE_MAX);
    uint64_t mine[COLLI_AGREE_MAX], all[COLL_MAX_RANKS * COLLI_AGREE_MAX];
    for (int i = 0; i < n; i++) mine[i] = items[i].digest;
    cchan_bootstrap_t *bs = cchan_comm_bootstrap(c->comm);
    int st = cchan_bootstrap_allgather(bs, mine, all, (size_t)n * sizeof mine[0]);
    if (st < 0) return colli_wrap(st, where, "cchan_bootstrap_allgather(configuration digests)");
    /* every rank sees the same digests, so every rank finds the same items differing and takes
     * part in the second step below, or none does */
    int first = -1;
    char also[256] = "";
    size_t also_at = 0;
    for (int i = 0; i < n; i++) {
        int differs = 0;
        for (int r = 1; r < c->nranks; r++)
            differs |= all[(size_t)r * (size_t)n + (size_t)i] != all[i];
        if (!differs) continue;
        if (first < 0)
            first = i;
        else if (also_at < sizeof also)
            also_at += (size_t)snprintf(also + also_at, sizeof also - also_at, "%s%s",
                                        also_at ? ", " : "", items[i].name);
    }
    if (first < 0) return 0;
    /* the differing item's words from every rank, for the message */
    char val[COLLI_AGREE_VALUE], vals[COLL_MAX_RANKS][COLLI_AGREE_VALUE];
    snprintf(val, sizeof val, "%s", items[first].value);
    st = cchan_bootstrap_allgather(bs, val, vals, sizeof val);
    for (int r = 0; st >= 0 && r < c->nranks; r++) vals[r][COLLI_AGREE_VALUE - 1] = '\0';
    char ranks[900];
    describe_ranks(all, n, first, c->nranks, st < 0 ? NULL : vals, ranks, sizeof ranks);
    return colli_error(-EINVAL, where, "%s differs: %s (want the same on every rank%s%s)",
                       items[first].name, ranks, also[0] ? "; differing too: " : "", also);
}
