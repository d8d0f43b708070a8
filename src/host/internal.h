/* cchan host runtime: declarations shared by the runtime's modules (not installed). */
#ifndef CCHAN_SRC_HOST_INTERNAL_H
#define CCHAN_SRC_HOST_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>
#include <sys/types.h>

#include "cchan/cchan.h"

#define CCHANI_HIDDEN __attribute__((visibility("hidden")))

/* ---------------------------------------------------------------- errors (error.c)
 * cchani_error() records "context: message" as the thread's last error and returns status, so a
 * failing path reads:  return cchani_error(-EINVAL, "cchan_mem_import", "size %zu > %zu", a, b);
 * It also logs the message at WARN. */
CCHANI_HIDDEN int cchani_error(int status, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes the thread's current last error with more context and returns status unchanged. */
CCHANI_HIDDEN int cchani_error_wrap(int status, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* -errno helper: cchani_errno_error("bind", "port %d", port) records strerror(errno). */
CCHANI_HIDDEN int cchani_errno_error(const char *where, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
CCHANI_HIDDEN void cchani_clear_error(void);

/* Argument checks. */
#define CCHANI_CHECK_ARG(cond, where)                                                              \
    do {                                                                                           \
        if (!(cond)) return cchani_error(-EINVAL, where, "invalid argument: %s", #cond);           \
    } while (0)

/* ---------------------------------------------------------------- logging (log.c)
 * CCHAN_DEBUG=WARN|INFO|TRACE (default: off), CCHAN_DEBUG_SUBSYS=bootstrap,mem,proxy,... (default
 * all), CCHAN_DEBUG_FILE=path (%h host, %p pid; default stderr). */
enum cchani_log_level { CCHANI_LOG_NONE = 0, CCHANI_LOG_WARN = 1, CCHANI_LOG_INFO = 2, CCHANI_LOG_TRACE = 3 };
enum cchani_subsys {
    CCHANI_SUB_INIT = 1u << 0,
    CCHANI_SUB_BOOTSTRAP = 1u << 1,
    CCHANI_SUB_MEM = 1u << 2,
    CCHANI_SUB_PROXY = 1u << 3,
    CCHANI_SUB_TRANSPORT = 1u << 4,
    CCHANI_SUB_ENV = 1u << 5,
    CCHANI_SUB_ALL = 0xffffffffu
};
CCHANI_HIDDEN int cchani_log_enabled(int level, unsigned subsys);
CCHANI_HIDDEN void cchani_log(int level, unsigned subsys, const char *file, int line, const char *fmt,
                              ...) __attribute__((format(printf, 5, 6)));
#define CCHANI_LOG(level, subsys, ...)                                                             \
    do {                                                                                           \
        if (cchani_log_enabled(level, subsys)) cchani_log(level, subsys, __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
#define CCHANI_WARN(subsys, ...) CCHANI_LOG(CCHANI_LOG_WARN, subsys, __VA_ARGS__)
#define CCHANI_INFO(subsys, ...) CCHANI_LOG(CCHANI_LOG_INFO, subsys, __VA_ARGS__)
#define CCHANI_TRACE(subsys, ...) CCHANI_LOG(CCHANI_LOG_TRACE, subsys, __VA_ARGS__)

/* ---------------------------------------------------------------- environment (env.c)
 * Every variable cchan reads is read here and listed in docs/environment.md. Parsing failures are
 * reported (status, last error), never silently replaced by a default. */
CCHANI_HIDDEN const char *cchani_env_str(const char *name); /* NULL if unset or empty */
/* *out = parsed value, or dflt when unset. -EINVAL (with message) when set but malformed. */
CCHANI_HIDDEN int cchani_env_i64(const char *name, int64_t dflt, int64_t *out);
CCHANI_HIDDEN int cchani_env_u64(const char *name, uint64_t dflt, uint64_t *out);

/* ---------------------------------------------------------------- optional libraries */
/* Logs, at INFO, which optional libraries (optional_libs.c) load here. */
CCHANI_HIDDEN void cchani_report_optional_libs(void);
/* dlopen of an optional library by its cchan name ("ibverbs", "nvml"), kept loaded; NULL with the
 * reason in why. */
CCHANI_HIDDEN void *cchani_optional_lib_open(const char *name, char *why, size_t why_bytes);

/* ---------------------------------------------------------------- time */
CCHANI_HIDDEN uint64_t cchani_now_ns(void); /* CLOCK_MONOTONIC */

#endif /* CCHAN_SRC_HOST_INTERNAL_H */
