/* cchan errors: status strings and the per-thread last-error message. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cchan/last_error.h"
#include "internal.h"

#define CCHANI_ERRMSG_BYTES 1024

static _Thread_local char last_error[CCHANI_ERRMSG_BYTES];

const char *cchan_strerror(int status) {
    switch (status) {
    case CCHAN_OK: return "success";
    case CCHAN_ERR_INTERNAL: return "internal error";
    case CCHAN_ERR_TIMEOUT: return "timed out";
    case CCHAN_ERR_PEER: return "a peer rank failed, closed the connection or died";
    case CCHAN_ERR_VERSION: return "version mismatch";
    case CCHAN_ERR_PROTOCOL: return "malformed or foreign message";
    case CCHAN_ERR_CUDA: return "GPU runtime error";
    case CCHAN_ERR_UNSUPPORTED: return "not supported by this backend, build or machine";
    case CCHAN_ERR_NO_DEVICE: return "no suitable device";
    case CCHAN_ERR_DEVICE_TIMEOUT: return "a device-side wait timed out";
    case CCHAN_ERR_IN_PROGRESS: return "operation in progress";
    case CCHAN_ERR_NO_RESOURCE: return "resource exhausted";
    case CCHAN_ERR_RANGE: return "size or offset out of range";
    case CCHAN_ERR_SYSTEM: return "system library error";
    case CCHAN_ERR_PEER_DEAD: return "a peer rank died (communicator aborted)";
    case CCHAN_ERR_ABORTED: return "communicator aborted";
    default: break;
    }
    if (status < 0 && status > -256) {
        /* strerror() is not thread-safe; strerrordesc_np() returns static text (glibc >= 2.32). */
        const char *s = strerrordesc_np(-status);
        if (s) return s;
    }
    return "unknown status";
}

const char *cchan_last_error(void) { return last_error; }

void cchani_clear_error(void) { last_error[0] = '\0'; }

/* The libraries' setter (cchan/last_error.h): formatted aside first, as an argument may be
 * last_error itself; a cut message ends in "..." so the cut shows. */
int cchan_set_last_error(int status, const char *fmt, ...) {
    char msg[CCHANI_ERRMSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) n = snprintf(msg, sizeof msg, "(unformattable message: %s)", fmt);
    if ((size_t)n >= sizeof msg) memcpy(msg + sizeof msg - 4, "...", 4);
    memcpy(last_error, msg, sizeof msg);
    return status;
}

void cchan_clear_last_error(void) { last_error[0] = '\0'; }

static int record(int status, const char *where, const char *fmt, va_list ap, int wrap) {
    char msg[CCHANI_ERRMSG_BYTES];
    int n = snprintf(msg, sizeof msg, "%s: ", where ? where : "cchan");
    if (n < 0) n = 0;
    if ((size_t)n < sizeof msg) vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    if (wrap && last_error[0]) {
        char prev[CCHANI_ERRMSG_BYTES];
        memcpy(prev, last_error, sizeof prev);
        snprintf(last_error, sizeof last_error, "%s: %s", msg, prev);
    } else {
        snprintf(last_error, sizeof last_error, "%s (%s)", msg, cchan_strerror(status));
    }
    CCHANI_WARN(CCHANI_SUB_ALL, "%s", last_error);
    return status;
}

int cchani_error(int status, const char *where, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record(status, where, fmt, ap, 0);
    va_end(ap);
    return status;
}

int cchani_error_wrap(int status, const char *where, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record(status, where, fmt, ap, 1);
    va_end(ap);
    return status;
}

int cchani_errno_error(const char *where, const char *fmt, ...) {
    int e = errno ? errno : EIO;
    char msg[CCHANI_ERRMSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cchani_error(-e, where, "%s: errno %d", msg, e);
}
