/* Deterministic stand-in for libFuzzer's main(), used by cchan_fuzz() where libFuzzer is not
 * available (see cmake/CchanFuzz.cmake for the contract of LLVMFuzzerTestOneInput).
 *
 *   <target> [-runs=N] [-max_total_time=S] [-seed=N] [-max_len=N] [-artifact_prefix=P] [PATH...]
 *
 * PATHs are files or directories of seed inputs: each is run as it is, then serves as a base for
 * mutations. Then up to N generated inputs follow, stopping after S seconds: random bytes, runs of
 * one byte, and mutations (bit flips, interesting integers, insertions, deletions, splices) of the
 * seeds and of earlier inputs. The sequence depends only on the seed and the PATHs, so a failure
 * reproduces by running the same command. The input being run when the process dies (signal or
 * sanitizer report) is written to <P>crash-<index>; `<target> <P>crash-<index>` replays it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
/* Present when a sanitizer runtime is linked in: called before it exits on a report. */
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

#define POOL_MAX 64

typedef struct input {
    uint8_t *data;
    size_t size;
} input_t;

static uint64_t rng_state;
static const char *artifact_prefix = "";
static const uint8_t *current_data;
static size_t current_size;
static uint64_t current_index;
static volatile sig_atomic_t running;

static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static size_t rng_below(size_t n) { return n ? (size_t)(rng_next() % n) : 0; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Async-signal-safe: writes the current input to <prefix>crash-<index> and says so on stderr. */
static void save_current_input(void) {
    if (!running) return;
    running = 0;
    char path[4096], num[32];
    int n = 0;
    uint64_t v = current_index;
    do num[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    size_t len = strlen(artifact_prefix);
    if (len + 6 + (size_t)n + 1 > sizeof(path)) return;
    memcpy(path, artifact_prefix, len);
    memcpy(path + len, "crash-", 6);
    len += 6;
    while (n > 0) path[len++] = num[--n];
    path[len] = '\0';
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        size_t off = 0;
        while (off < current_size) {
            ssize_t w = write(fd, current_data + off, current_size - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        close(fd);
    }
    static const char msg[] = "\ncchan fuzz driver: the failing input is saved as ";
    if (write(2, msg, sizeof(msg) - 1) < 0 || write(2, path, len) < 0 || write(2, "\n", 1) < 0) {
        /* nothing more to do on the way down */
    }
}

static void on_fatal_signal(int sig) {
    save_current_input();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void run_one(const uint8_t *src, size_t size, uint64_t index) {
    /* An exactly sized heap copy, so that reading past the end is caught by ASan. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) {
        fprintf(stderr, "cchan fuzz driver: out of memory for %zu bytes\n", size);
        exit(1);
    }
    if (size) memcpy(copy, src, size);
    current_data = copy;
    current_size = size;
    current_index = index;
    running = 1;
    int r = LLVMFuzzerTestOneInput(copy, size);
    running = 0;
    free(copy);
    if (r != 0 && r != -1) {
        fprintf(stderr,
                "cchan fuzz driver: LLVMFuzzerTestOneInput returned %d on input #%llu "
                "(only 0 and -1 are allowed)\n",
                r, (unsigned long long)index);
        exit(1);
    }
}

static int read_file(const char *path, input_t *out) {
    FILE *f = fopen(path, "rb");
    if (!f) return -errno;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (n == cap) buf = realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    out->data = buf;
    out->size = n;
    return 0;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Adds a file, or every regular file of a directory (sorted, for a stable order), to seeds. */
static void load_seeds(const char *path, input_t **seeds, size_t *nseeds) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "cchan fuzz driver: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    char **names = NULL;
    size_t nnames = 0;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            char *full = malloc(strlen(path) + strlen(e->d_name) + 2);
            sprintf(full, "%s/%s", path, e->d_name);
            names = realloc(names, (nnames + 1) * sizeof(*names));
            names[nnames++] = full;
        }
        if (d) closedir(d);
        qsort(names, nnames, sizeof(*names), cmp_names);
    } else {
        names = malloc(sizeof(*names));
        names[nnames++] = strdup(path);
    }
    for (size_t i = 0; i < nnames; i++) {
        input_t in;
        struct stat fst;
        if (stat(names[i], &fst) == 0 && S_ISREG(fst.st_mode) && read_file(names[i], &in) == 0) {
            *seeds = realloc(*seeds, (*nseeds + 1) * sizeof(**seeds));
            (*seeds)[(*nseeds)++] = in;
        }
        free(names[i]);
    }
    free(names);
}

static const uint64_t interesting[] = {0,
                                       1,
                                       2,
                                       3,
                                       4,
                                       7,
                                       8,
                                       15,
                                       16,
                                       31,
                                       32,
                                       63,
                                       64,
                                       127,
                                       128,
                                       255,
                                       256,
                                       511,
                                       512,
                                       1023,
                                       1024,
                                       4095,
                                       4096,
                                       65535,
                                       65536,
                                       0x7fffffffull,
                                       0x80000000ull,
                                       0xffffffffull,
                                       0x100000000ull,
                                       0x7fffffffffffffffull,
                                       0x8000000000000000ull,
                                       0xffffffffffffffffull,
                                       0xfffffffffffffffeull};

/* One mutation of buf[0..*size) in place; buf has room for max_len bytes. */
static void mutate(uint8_t *buf, size_t *size, size_t max_len, const input_t *pool, size_t npool) {
    size_t n = *size;
    switch (rng_below(8)) {
    case 0: /* flip a bit */
        if (n) buf[rng_below(n)] ^= (uint8_t)(1u << rng_below(8));
        break;
    case 1: /* random byte */
        if (n) buf[rng_below(n)] = (uint8_t)rng_next();
        break;
    case 2: { /* interesting integer of 1, 2, 4 or 8 bytes, either byte order */
        size_t w = (size_t)1 << rng_below(4);
        if (n < w) break;
        uint64_t v = interesting[rng_below(sizeof(interesting) / sizeof(interesting[0]))];
        if (rng_below(2)) v = __builtin_bswap64(v) >> (64 - 8 * w);
        size_t at = rng_below(n - w + 1);
        for (size_t i = 0; i < w; i++) buf[at + i] = (uint8_t)(v >> (8 * i));
        break;
    }
    case 3: { /* delete a range */
        if (!n) break;
        size_t at = rng_below(n), len = 1 + rng_below(n - at);
        memmove(buf + at, buf + at + len, n - at - len);
        *size = n - len;
        break;
    }
    case 4: { /* insert random bytes */
        if (n >= max_len) break;
        size_t at = rng_below(n + 1), len = 1 + rng_below(max_len - n < 16 ? max_len - n : 16);
        memmove(buf + at + len, buf + at, n - at);
        for (size_t i = 0; i < len; i++) buf[at + i] = (uint8_t)rng_next();
        *size = n + len;
        break;
    }
    case 5: /* truncate */ *size = rng_below(n + 1); break;
    case 6: { /* splice: overwrite a range with bytes of another input */
        if (!npool || !n) break;
        const input_t *o = &pool[rng_below(npool)];
        if (!o->size) break;
        size_t from = rng_below(o->size), at = rng_below(n);
        size_t len = 1 + rng_below(o->size - from);
        if (len > n - at) len = n - at;
        memcpy(buf + at, o->data + from, len);
        break;
    }
    default: { /* copy a range within the input */
        if (n < 2) break;
        size_t from = rng_below(n), to = rng_below(n), len = 1 + rng_below(n - from);
        if (len > n - to) len = n - to;
        memmove(buf + to, buf + from, len);
        break;
    }
    }
}

static long long arg_value(const char *arg, const char *name) {
    size_t len = strlen(name);
    if (strncmp(arg, name, len) != 0 || arg[len] != '=') return -1;
    return atoll(arg + len + 1);
}

int main(int argc, char **argv) {
    long long runs = 100000, max_time = 0, seed = 1, max_len = 4096;
    input_t *seeds = NULL;
    size_t nseeds = 0;

    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long long v;
        if ((v = arg_value(a, "-runs")) >= 0)
            runs = v;
        else if ((v = arg_value(a, "-max_total_time")) >= 0)
            max_time = v;
        else if ((v = arg_value(a, "-seed")) >= 0)
            seed = v;
        else if ((v = arg_value(a, "-max_len")) >= 0)
            max_len = v > 0 ? v : 1;
        else if (strncmp(a, "-artifact_prefix=", 17) == 0)
            artifact_prefix = a + 17;
        else if (a[0] == '-')
            fprintf(stderr, "cchan fuzz driver: ignoring option %s\n", a);
        else
            load_seeds(a, &seeds, &nseeds);
    }

    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(save_current_input);
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        /* Leave a sanitizer's handler in place: it reports, then calls the death callback. */
        if (sigaction(fatal[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL)
            sigaction(fatal[i], &sa, NULL);
    }

    rng_state = (uint64_t)seed;
    const double start = now_s();
    uint64_t index = 0;
    for (size_t i = 0; i < nseeds; i++) run_one(seeds[i].data, seeds[i].size, index++);
    const uint64_t from_corpus = index;

    /* Earlier inputs kept as mutation bases: the seeds first, then a rolling sample. */
    input_t pool[POOL_MAX];
    size_t npool = 0;
    for (size_t i = 0; i < nseeds && npool < POOL_MAX; i++) {
        pool[npool].data = malloc(seeds[i].size ? seeds[i].size : 1);
        memcpy(pool[npool].data, seeds[i].data, seeds[i].size);
        pool[npool].size = seeds[i].size;
        npool++;
    }
    uint8_t *buf = malloc((size_t)max_len);
    int timed_out = 0;
    for (long long r = 0; r < runs; r++) {
        if (max_time > 0 && (r & 63) == 0 && now_s() - start >= (double)max_time) {
            timed_out = 1;
            break;
        }
        size_t size;
        uint64_t kind = rng_below(8);
        if (kind < 2 || npool == 0) { /* fresh random bytes, mostly short */
            size = rng_below(((size_t)1 << rng_below(13)) + 1);
            if (size > (size_t)max_len) size = (size_t)max_len;
            for (size_t i = 0; i < size; i++) buf[i] = (uint8_t)rng_next();
        } else if (kind == 2) { /* one byte repeated */
            size = rng_below((size_t)max_len + 1);
            memset(buf, rng_below(2) ? 0xff : (int)rng_below(256), size);
        } else { /* 1..8 mutations of an earlier input */
            const input_t *base = &pool[rng_below(npool)];
            size = base->size < (size_t)max_len ? base->size : (size_t)max_len;
            memcpy(buf, base->data, size);
            for (uint64_t m = 1 + rng_below(8); m > 0; m--)
                mutate(buf, &size, (size_t)max_len, pool, npool);
        }
        run_one(buf, size, index++);
        if (rng_below(4) == 0 && nseeds < POOL_MAX) { /* keep it as a base for mutations */
            size_t slot;
            if (npool < POOL_MAX) {
                slot = npool++;
            } else { /* full: replace a generated input, never a seed */
                slot = nseeds + rng_below(POOL_MAX - nseeds);
                free(pool[slot].data);
            }
            pool[slot].data = malloc(size ? size : 1);
            memcpy(pool[slot].data, buf, size);
            pool[slot].size = size;
        }
    }
    printf("cchan fuzz driver: %llu inputs (%llu from the corpus), seed %lld, max_len %lld, "
           "%.1f s%s: no failure\n",
           (unsigned long long)index, (unsigned long long)from_corpus, seed, max_len,
           now_s() - start, timed_out ? " (time limit)" : "");

    free(buf);
    for (size_t i = 0; i < npool; i++) free(pool[i].data);
    for (size_t i = 0; i < nseeds; i++) free(seeds[i].data);
    free(seeds);
    return 0;
}
