/* Helpers shared by the cchan benchmark programs (cchan-bench, cchan-coll-bench): size arguments
 * and the JSON results files. Rank-independent; plain C. */
#ifndef CCHAN_BENCH_UTIL_H
#define CCHAN_BENCH_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* printf on rank 0 only (rank < 0: no rank, prints too), flushed. */
void cb_rank0_vprintf(int rank, const char *fmt, va_list ap);
/* "<bench>: rank R: <message>" on stderr, "FAILED" on stdout from rank 0 (or rank < 0), exit(1). */
void cb_vdie(const char *bench, int rank, const char *fmt, va_list ap) __attribute__((noreturn));

/* "4K", "1MiB", "2g", "1.5M", "64": bytes with binary multipliers. 0, or -1 if malformed. */
int cb_parse_size(const char *s, uint64_t *out);

/* The command line as one string into buf (name for argv[0]; cut at n - 2 bytes). */
void cb_join_args(char *buf, size_t n, int argc, char **argv, const char *name);

/* Writes s as a JSON string literal. */
void cb_json_str(FILE *f, const char *s);

/* Creates the JSON results file `path` and writes the fields every bench's file starts with
 * ("bench", "version", "commit", "date", "command"), leaving the object open for the caller's
 * fields. The commit is CCHAN_BENCH_COMMIT when set, else build_commit (may be NULL). Returns the
 * stream, or NULL with the reason printed to stderr. */
FILE *cb_json_open(const char *path, const char *bench, const char *command,
                   const char *build_commit);

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_BENCH_UTIL_H */
