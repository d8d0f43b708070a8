/* Helpers shared by the cchan benchmark programs: size arguments and the JSON results files. */
#include "bench_util.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cchan/cchan.h"

void cb_rank0_vprintf(int rank, const char *fmt, va_list ap) {
    if (rank > 0) return;
    vprintf(fmt, ap);
    fflush(stdout);
}

void cb_vdie(const char *bench, int rank, const char *fmt, va_list ap) {
    fflush(stdout);
    fprintf(stderr, "%s: rank %d: ", bench, rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    if (rank <= 0) {
        printf("FAILED\n");
        fflush(stdout);
    }
    exit(1);
}

int cb_parse_size(const char *s, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return -1;
    uint64_t mult = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        mult = 1ull << 10;
        end++;
        break;
    case 'M':
        mult = 1ull << 20;
        end++;
        break;
    case 'G':
        mult = 1ull << 30;
        end++;
        break;
    case 'T':
        mult = 1ull << 40;
        end++;
        break;
    default: break;
    }
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0') return -1;
    *out = (uint64_t)(v * (double)mult + 0.5);
    return 0;
}

void cb_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

FILE *cb_json_open(const char *path, const char *bench, const char *command,
                   const char *build_commit) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "%s: cannot write %s: %s\n", bench, path, strerror(errno));
        return NULL;
    }
    time_t now = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    const char *commit = getenv("CCHAN_BENCH_COMMIT");
    if (!commit || !*commit) commit = build_commit;
    fprintf(f, "{\n  \"bench\": ");
    cb_json_str(f, bench);
    fprintf(f, ",\n  \"version\": ");
    cb_json_str(f, cchan_version());
    fprintf(f, ",\n  \"commit\": ");
    cb_json_str(f, commit ? commit : "unknown");
    fprintf(f, ",\n  \"date\": ");
    cb_json_str(f, date);
    fprintf(f, ",\n  \"command\": ");
    cb_json_str(f, command);
    return f;
}

void cb_join_args(char *buf, size_t n, int argc, char **argv, const char *name) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < argc && len + 2 < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? " " : "", i ? argv[i] : name);
}
