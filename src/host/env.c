/* cchan environment: the one place variables are read and parsed. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "internal.h"

const char *cchani_env_str(const char *name) {
    const char *v = getenv(name);
    return (v && v[0]) ? v : NULL;
}

int cchani_env_i64(const char *name, int64_t dflt, int64_t *out) {
    const char *v = cchani_env_str(name);
    if (!v) {
        *out = dflt;
        return 0;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 0);
    if (errno || end == v || *end != '\0')
        return cchani_error(-EINVAL, "environment", "%s='%s' is not an integer", name, v);
    *out = (int64_t)x;
    return 0;
}

int cchani_env_u64(const char *name, uint64_t dflt, uint64_t *out) {
    const char *v = cchani_env_str(name);
    if (!v) {
        *out = dflt;
        return 0;
    }
    char *end;
    errno = 0;
    if (v[0] == '-') return cchani_error(-EINVAL, "environment", "%s='%s' must not be negative", name, v);
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || end == v || *end != '\0')
        return cchani_error(-EINVAL, "environment", "%s='%s' is not an unsigned integer", name, v);
    *out = (uint64_t)x;
    return 0;
}

uint64_t cchan_env_timeout_ms(void) {
    uint64_t v = 0;
    return cchani_env_u64("CCHAN_TIMEOUT_MS", 0, &v) == 0 ? v : 0;
}

uint64_t cchani_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
