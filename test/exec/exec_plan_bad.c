/* Malformed plans are refused with an error that names the field and the value, one rule at a
 * time: each case changes one thing in a valid plan (exec_fuzz_seed.h) and expects the loader's
 * status and a phrase (and the field's path) in cchan_exec_last_error(). The valid plan itself and
 * a copy with the case undone must load. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cchan_exec.h"
#include "exec_fuzz_seed.h"

static int g_failures, g_checks;

/* Walks a dotted path (numbers index arrays) and sets the last component to v (NULL: delete). */
static int set_path(json_t *root, const char *path, json_t *v) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *cur = root;
    char *save = NULL, *tok = strtok_r(buf, ".", &save);
    while (tok) {
        char *next = strtok_r(NULL, ".", &save);
        int is_idx = tok[0] >= '0' && tok[0] <= '9';
        if (!next) {
            if (is_idx) {
                size_t i = strtoul(tok, NULL, 10);
                return v ? json_array_set_new(cur, i, v) : json_array_remove(cur, i);
            }
            return v ? json_object_set_new(cur, tok, v) : json_object_del(cur, tok);
        }
        cur = is_idx ? json_array_get(cur, strtoul(tok, NULL, 10)) : json_object_get(cur, tok);
        if (!cur) return -1;
        tok = next;
    }
    return -1;
}

typedef struct edit {
    const char *path;
    const char *json; /* NULL: delete */
} edit_t;

static void expect_load(const char *name, const char *text, size_t len, int want_status,
                        const char *phrase, const char *phrase2) {
    cchan_exec_plan_t *p = NULL;
    int st = cchan_exec_plan_load_string(text, len, &p);
    const char *msg = cchan_exec_last_error();
    g_checks++;
    int ok = want_status == 0 ? st == 0 && p
                              : st == want_status && !p && strstr(msg, phrase) &&
                                    (!phrase2 || strstr(msg, phrase2));
    if (!ok) {
        g_failures++;
        fprintf(stderr, "FAIL %s: status %d (want %d), message \"%s\" (want \"%s\"%s%s)\n", name,
                st, want_status, msg, phrase ? phrase : "", phrase2 ? " and " : "",
                phrase2 ? phrase2 : "");
    } else {
        printf("ok   %-28s %s\n", name, want_status ? msg : "loads");
    }
    cchan_exec_plan_free(p);
}

static void expect_edit(const char *name, const edit_t *edits, int n, int want_status,
                        const char *phrase, const char *phrase2) {
    json_error_t err;
    json_t *root = json_loads(exec_fuzz_seed, 0, &err);
    if (!root) {
        fprintf(stderr, "seed plan does not parse: %s\n", err.text);
        exit(1);
    }
    for (int i = 0; i < n; i++) {
        json_t *v = NULL;
        if (edits[i].json) {
            v = json_loads(edits[i].json, JSON_DECODE_ANY, &err);
            if (!v) {
                fprintf(stderr, "%s: bad edit value %s\n", name, edits[i].json);
                exit(1);
            }
        }
        if (set_path(root, edits[i].path, v)) {
            fprintf(stderr, "%s: no such path %s in the seed plan\n", name, edits[i].path);
            exit(1);
        }
    }
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    expect_load(name, text, strlen(text), want_status, phrase, phrase2);
    free(text);
}

#define E1(name, path, val, st, ph, ph2)                                                           \
    do {                                                                                           \
        edit_t e_[] = {{path, val}};                                                               \
        expect_edit(name, e_, 1, st, ph, ph2);                                                     \
    } while (0)

/* A JSON string: lead, then n copies of unit (a UTF-8 character), quoted. */
static char *json_name(const char *lead, const char *unit, size_t n) {
    size_t l = strlen(lead), u = strlen(unit);
    char *s = (char *)malloc(l + n * u + 3);
    if (!s) exit(1);
    s[0] = '"';
    memcpy(s + 1, lead, l);
    for (size_t i = 0; i < n; i++) memcpy(s + 1 + l + i * u, unit, u);
    strcpy(s + 1 + l + n * u, "\"");
    return s;
}

/* Every later message quotes the plan's name (cchan_exec_create, runs, cchan_coll's plan loader):
 * a name of megabytes filled the 1023 bytes of the message and cut its reason off. A long name is
 * refused, quoting its start (whole UTF-8 characters), its length and the limit. */
static void expect_names(void) {
    char *name = json_name("", "a", 256);
    E1("name of 256 bytes", "name", name, 0, NULL, NULL);
    free(name);
    name = json_name("", "a", 257);
    E1("name of 257 bytes", "name", name, -EINVAL, "name: \"aaaa", "(257 bytes");
    free(name);
    const size_t big = 10u << 20;
    name = json_name("", "a", big);
    E1("name of 10 MiB", "name", name, -EINVAL, "...\" (10485760 bytes, quoted here up to 48)",
       "longer than the 256 bytes a plan name may have");
    const char *msg = cchan_exec_last_error();
    g_checks++;
    if (strlen(msg) > 200) {
        g_failures++;
        fprintf(stderr, "FAIL name of 10 MiB: %zu bytes of message\n", strlen(msg));
    }
    free(name);
    /* "a" and 200 two-byte characters: byte 48 is the second of one, so the quote stops before */
    name = json_name("a", "\xc3\xa9", 200);
    E1("name of 401 bytes in UTF-8", "name", name, -EINVAL,
       "\xc3\xa9...\" (401 bytes, quoted here up to 47)", NULL);
    free(name);
}

int main(void) {
    const char *seed = exec_fuzz_seed;
    expect_load("seed", seed, strlen(seed), 0, NULL, NULL);
    expect_load("truncated", seed, strlen(seed) / 2, -EINVAL, "not valid JSON", NULL);
    expect_load("empty", "", 0, -EINVAL, "not valid JSON", NULL);
    expect_load("duplicate key", "{\"format\":\"cchan.plan\",\"format\":\"x\"}", 36, -EINVAL,
                "not valid JSON", NULL);
    expect_load("not an object", "[1,2]", 5, -EINVAL, "want an object", NULL);

    E1("wrong version", "version", "2", CCHAN_ERR_UNSUPPORTED, "version: 2", "version 1");
    E1("wrong format", "format", "\"other\"", -EINVAL, "format", "\"other\"");
    E1("missing name", "name", NULL, -EINVAL, "name: missing", NULL);
    E1("nranks vs ranks", "nranks", "3", -EINVAL, "ranks: 2 entries, but nranks is 3", NULL);
    E1("chunk out of range", "ranks.0.threadblocks.0.ops.2.dst.0.chunk", "2", -EINVAL,
       "ranks[0].threadblocks[0].ops[2].dst[0].chunk", "output, which has 2");
    E1("stride out of range", "ranks.1.threadblocks.0.ops.3.src.0.count", "2", -EINVAL,
       "ranks[1].threadblocks[0].ops[3].src[0].chunk", "input, which has 1");
    E1("peer scratch out of range", "ranks.1.threadblocks.1.ops.6.dst.0.chunk", "5", -EINVAL,
       "ranks[1].threadblocks[1].ops[6].dst[0].chunk", NULL);
    E1("channel out of range", "ranks.0.threadblocks.0.ops.0.ch", "5", -EINVAL,
       "ranks[0].threadblocks[0].ops[0].ch", "5 out of range");
    E1("peer out of range", "ranks.0.channels.0.peer", "2", -EINVAL, "ranks[0].channels[0].peer",
       "2 out of range");
    E1("peer is self", "ranks.0.channels.0.peer", "0", -EINVAL, "ranks[0].channels[0].peer",
       "this rank");
    E1("no other end", "ranks.1.channels.1.index", "1", -EINVAL, "ranks[0].channels[1].peer",
       "the other end");
    E1("signal without wait", "ranks.1.threadblocks.0.ops.1", NULL, -EINVAL, "ranks[0].channels[0]",
       "every signal needs one wait");
    E1("disagreeing barriers", "ranks.1.threadblocks.1.ops.8", NULL, -EINVAL, "ranks[1]",
       "barriers");
    E1("release without acquire", "ranks.0.threadblocks.1.ops.1", NULL, -EINVAL,
       "semaphore 0 released 1 times", "every release needs one acquire");
    E1("semaphore out of range", "ranks.0.threadblocks.0.ops.5.sem", "1", -EINVAL,
       "ranks[0].threadblocks[0].ops[5].sem", "1 out of range");
    E1("loop body too long", "ranks.0.threadblocks.1.ops.2.body", "30", -EINVAL,
       "ranks[0].threadblocks[1].ops[2].body", "30");
    E1("nested loop", "ranks.0.threadblocks.1.ops.4", "{\"op\":\"loop\",\"body\":1}", -EINVAL,
       "ranks[0].threadblocks[1].ops[4].op", "do not nest");
    E1("loop without loop_unit", "loop_unit", "0", -EINVAL, "loop_unit is 0", NULL);
    E1("ref not in remote_buffers", "ranks.0.channels.0.remote_buffers", "[\"scratch\"]", -EINVAL,
       "ranks[0].threadblocks[0].ops[2].dst[0].buf", "remote_buffers");
    E1("input in place", "inplace", "true", -EINVAL, "in-place", NULL);
    E1("switch channel", "ranks.0.channels.1.type", "\"switch\"", CCHAN_ERR_UNSUPPORTED,
       "ranks[0].channels[1].type", "switch");
    E1("op on the wrong channel type", "ranks.0.threadblocks.1.ops.6.ch", "0", -EINVAL,
       "ranks[0].threadblocks[1].ops[6].ch", "needs a port channel");
    E1("tbg_index >= tbg_size", "ranks.0.threadblocks.1.ops.0.tbg_index", "2", -EINVAL, "tbg_index",
       "tbg_size is 2");
    E1("packets without factor 2", "scratch_chunk_factor", "1", -EINVAL, "protocol",
       "scratch_chunk_factor is 1");
    E1("granularity", "granularity", "24", -EINVAL, "granularity", "24");
    E1("unknown op", "ranks.0.threadblocks.0.ops.0.op", "\"teleport\"", -EINVAL,
       "ranks[0].threadblocks[0].ops[0].op", "\"teleport\" is not one of");
    E1("ops not an array", "ranks.0.threadblocks.0.ops", "{}", -EINVAL,
       "ranks[0].threadblocks[0].ops", "want an array");
    E1("block ids out of order", "ranks.0.threadblocks.1.id", "3", -EINVAL,
       "ranks[0].threadblocks[1].id", "3");
    E1("string for an integer", "ranks.0.threadblocks.0.ops.2.src.0.chunk", "\"0\"", -EINVAL,
       "ranks[0].threadblocks[0].ops[2].src[0].chunk", "a string, want an integer");
    {
        char nine[512] = "[";
        for (int i = 0; i < 9; i++)
            strcat(nine, i ? ",{\"buf\":\"scratch\",\"chunk\":0,\"count\":1}"
                           : "{\"buf\":\"scratch\",\"chunk\":0,\"count\":1}");
        strcat(nine, "]");
        E1("nine srcs", "ranks.0.threadblocks.1.ops.9.src", nine, -EINVAL,
           "ranks[0].threadblocks[1].ops[9].src", "9 refs");
    }
    E1("align not a multiple of 16", "align", "8", CCHAN_ERR_UNSUPPORTED, "align: 8", NULL);
    {
        edit_t e[] = {{"min_bytes", "200"}, {"max_bytes", "100"}};
        expect_edit("max below min", e, 2, -EINVAL, "max_bytes: 100 is below min_bytes 200", NULL);
    }
    expect_names();
    printf("%d checks, %d failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
