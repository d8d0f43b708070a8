/* cchan logging: off unless CCHAN_DEBUG is set. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include "internal.h"

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_level;
static unsigned log_subsys = CCHANI_SUB_ALL;
static FILE *log_file;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_host[64];

static const struct {
    const char *name;
    unsigned bit;
} subsys_names[] = {{"init", CCHANI_SUB_INIT},         {"bootstrap", CCHANI_SUB_BOOTSTRAP},
                    {"mem", CCHANI_SUB_MEM},           {"proxy", CCHANI_SUB_PROXY},
                    {"transport", CCHANI_SUB_TRANSPORT}, {"env", CCHANI_SUB_ENV},
                    {"all", CCHANI_SUB_ALL}};

/* Appends text to path (of size n) at *o; 0, or -1 when it does not fit. */
static int path_append(char *path, size_t n, size_t *o, const char *text) {
    size_t len = strlen(text);
    if (len >= n - *o) return -1;
    memcpy(path + *o, text, len + 1);
    *o += len;
    return 0;
}

/* CCHAN_DEBUG_FILE with %h (host name) and %p (pid) expanded. A path that does not fit is not cut
 * (a cut path could name another file): logging stays on stderr, with a line that says why. */
static void open_file(const char *pattern) {
    char path[PATH_MAX];
    size_t o = 0;
    path[0] = '\0';
    int fits = 0;
    for (const char *p = pattern;; p++) {
        char text[32];
        if (!*p) {
            fits = 1;
            break;
        }
        if (p[0] == '%' && p[1] == 'h') {
            if (path_append(path, sizeof path, &o, log_host)) break;
            p++;
            continue;
        }
        if (p[0] == '%' && p[1] == 'p') {
            snprintf(text, sizeof text, "%d", (int)getpid());
            p++;
        } else {
            text[0] = *p;
            text[1] = '\0';
        }
        if (path_append(path, sizeof path, &o, text)) break;
    }
    if (!fits) {
        fprintf(stderr, "cchan: CCHAN_DEBUG_FILE expands past %d bytes; logging to stderr\n",
                PATH_MAX - 1);
        return;
    }
    log_file = fopen(path, "a");
    if (!log_file) {
        /* Still logged, to stderr; said (once: this runs once a process) so that a log missing
         * from where it was asked for does not look like a quiet run. */
        fprintf(stderr, "cchan: CCHAN_DEBUG_FILE: cannot open '%s' (%s); logging to stderr\n", path,
                strerror(errno));
        return;
    }
    setvbuf(log_file, NULL, _IOLBF, 0);
}

static void log_init(void) {
    gethostname(log_host, sizeof log_host - 1);
    const char *lvl = cchani_env_str("CCHAN_DEBUG");
    if (lvl) {
        if (!strcasecmp(lvl, "WARN")) log_level = CCHANI_LOG_WARN;
        else if (!strcasecmp(lvl, "INFO")) log_level = CCHANI_LOG_INFO;
        else if (!strcasecmp(lvl, "TRACE")) log_level = CCHANI_LOG_TRACE;
        else if (!strcasecmp(lvl, "NONE")) log_level = CCHANI_LOG_NONE;
        else {
            log_level = CCHANI_LOG_WARN;
            fprintf(stderr, "cchan: CCHAN_DEBUG='%s' is not NONE, WARN, INFO or TRACE; using WARN\n", lvl);
        }
    }
    const char *sub = cchani_env_str("CCHAN_DEBUG_SUBSYS");
    if (sub) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", sub);
        log_subsys = 0;
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
                if (!strcasecmp(t, subsys_names[i].name)) log_subsys |= subsys_names[i].bit;
        }
    }
    const char *file = cchani_env_str("CCHAN_DEBUG_FILE");
    if (file && log_level) open_file(file);
    if (!log_file) log_file = stderr;
}

int cchani_log_enabled(int level, unsigned subsys) {
    pthread_once(&log_once, log_init);
    return level <= log_level && (subsys & log_subsys);
}

void cchani_log(int level, unsigned subsys, const char *file, int line, const char *fmt, ...) {
    (void)subsys;
    static const char *names[] = {"NONE", "WARN", "INFO", "TRACE"};
    struct timeval tv;
    gettimeofday(&tv, NULL);
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    pthread_mutex_lock(&log_lock);
    fprintf(log_file, "%s:%d:%ld %ld.%06ld cchan %s %s:%d %s\n", log_host, (int)getpid(),
            (long)gettid(), (long)tv.tv_sec, (long)tv.tv_usec, names[level], base ? base + 1 : file,
            line, msg);
    pthread_mutex_unlock(&log_lock);
}
