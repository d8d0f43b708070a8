/* Optional system libraries, looked up at run time so that cchan works without them and says what
 * is missing (docs/architecture.md): libibverbs for the ib transport, NVML for GPU topology.
 * libnuma is linked at build time when its header is present (cchan_version() says whether). */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

typedef struct optional_lib {
    const char *name;   /* the name cchan_optional_lib_available() takes */
    const char *soname; /* what is dlopen'ed */
    const char *needed_for;
} optional_lib_t;

static const optional_lib_t optional_libs[] = {
    {"ibverbs", "libibverbs.so.1", "the ib (RDMA) transport"},
    {"nvml", "libnvidia-ml.so.1", "GPU topology queries"},
};

static const optional_lib_t *find_lib(const char *name) {
    for (size_t i = 0; i < sizeof optional_libs / sizeof optional_libs[0]; i++)
        if (!strcmp(optional_libs[i].name, name)) return &optional_libs[i];
    return NULL;
}

/* 1 if the library loads here, 0 if not (the reason is logged at INFO). */
static int probe(const optional_lib_t *lib) {
    void *h = dlopen(lib->soname, RTLD_LAZY | RTLD_LOCAL);
    if (h) {
        dlclose(h);
        return 1;
    }
    const char *why = dlerror();
    CCHANI_INFO(CCHANI_SUB_INIT, "%s not available (%s); cchan runs without %s", lib->soname,
                why ? why : "dlopen failed", lib->needed_for);
    return 0;
}

int cchan_optional_lib_available(const char *name) {
    CCHANI_CHECK_ARG(name != NULL, "cchan_optional_lib_available");
    const optional_lib_t *lib = find_lib(name);
    if (!lib)
        return cchani_error(-EINVAL, "cchan_optional_lib_available",
                            "unknown library '%s' (known: ibverbs, nvml)", name);
    return probe(lib);
}

void cchani_report_optional_libs(void) {
    if (!cchani_log_enabled(CCHANI_LOG_INFO, CCHANI_SUB_INIT)) return;
    for (size_t i = 0; i < sizeof optional_libs / sizeof optional_libs[0]; i++)
        if (probe(&optional_libs[i]))
            CCHANI_INFO(CCHANI_SUB_INIT, "%s available (for %s)", optional_libs[i].soname,
                        optional_libs[i].needed_for);
}

/* Loaded once and kept for the life of the process: symbol tables (the ib transport's) point into
 * it. */
void *cchani_optional_lib_open(const char *name, char *why, size_t why_bytes) {
    const optional_lib_t *lib = find_lib(name);
    if (!lib) {
        snprintf(why, why_bytes, "unknown optional library '%s'", name);
        return NULL;
    }
    void *h = dlopen(lib->soname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, why_bytes, "%s: %s", lib->soname, e ? e : "dlopen failed");
    }
    return h;
}
