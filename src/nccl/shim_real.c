/* The fallback NCCL (loaded at run time), the CUDA driver calls the shim needs, errors, logging. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include "cchan/env.h"
#include "cchan/last_error.h"
#include "shim.h"

/* ------------------------------------------------------------------ logging */

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_level;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void log_init(void) {
    const char *lvl = NULL;
    (void)cchan_env_get_str("CCHAN_DEBUG", &lvl); /* any text is accepted: never fails */
    if (!lvl || !strcasecmp(lvl, "NONE")) return;
    if (!strcasecmp(lvl, "WARN"))
        log_level = SHIM_LOG_WARN;
    else if (!strcasecmp(lvl, "INFO"))
        log_level = SHIM_LOG_INFO;
    else if (!strcasecmp(lvl, "TRACE"))
        log_level = SHIM_LOG_TRACE;
    else
        log_level = SHIM_LOG_WARN; /* libcchan says so once at its own start */
}

int shim_log_level(void) {
    pthread_once(&log_once, log_init);
    return log_level;
}

void shim_log(int level, const char *fmt, ...) {
    static const char *names[] = {"", "WARN", "INFO", "TRACE"};
    char host[64] = "", line[1536];
    gethostname(host, sizeof host - 1);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    int n = snprintf(line, sizeof line, "%s:%d:%ld.%06ld cchan %s nccl: ", host, (int)getpid(),
                     (long)tv.tv_sec, (long)tv.tv_usec, names[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One write per line, so that ranks and threads do not interleave. */
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "%s\n", line);
    pthread_mutex_unlock(&log_lock);
}

/* ------------------------------------------------------------------ errors */

/* The message goes into the thread's one last-error message (cchan/last_error.h), which
 * ncclGetLastError returns. */
ncclResult_t shim_fail(ncclResult_t res, const char *fmt, ...) {
    char msg[1024]; /* longer: the whole message is cut, with "..." */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cchan_set_last_error(0, "%s", msg);
    SHIM_WARN("%s", cchan_last_error());
    return res;
}

static ncclResult_t status_result(int status) {
    ncclResult_t res = ncclInternalError;
    switch (status) {
    case CCHAN_ERR_CUDA: res = ncclUnhandledCudaError; break;
    case CCHAN_ERR_PEER:
    case CCHAN_ERR_VERSION:
    case CCHAN_ERR_PROTOCOL:
    case CCHAN_ERR_TIMEOUT:
    case CCHAN_ERR_DEVICE_TIMEOUT:
    case CCHAN_ERR_PEER_DEAD: /* as NCCL names a peer that is gone */
    case CCHAN_ERR_ABORTED: res = ncclRemoteError; break;
    case CCHAN_ERR_UNSUPPORTED:
    case CCHAN_ERR_NO_DEVICE: res = ncclInvalidUsage; break;
    default:
        if (status > -256) res = status == -EINVAL ? ncclInvalidArgument : ncclSystemError;
    }
    return res;
}

ncclResult_t shim_fail_cchan(int status, const char *where) {
    return shim_fail(status_result(status), "%s: %s (%s)", where, cchan_strerror(status),
                     cchan_last_error());
}

ncclResult_t shim_fail_coll(int status, const char *where) {
    return shim_fail(status_result(status), "%s: %s (%s)", where, cchan_strerror(status),
                     cchan_coll_last_error());
}

const char *shim_last_error(void) { return cchan_last_error(); }
void shim_clear_error(void) { cchan_clear_last_error(); }

/* ------------------------------------------------------------------ the fallback NCCL */

static pthread_once_t real_once = PTHREAD_ONCE_INIT;
static shim_real_t real_lib;
static int real_loaded;
static char real_why[768] = "not loaded yet";

static int own_path(char out[PATH_MAX]) {
    Dl_info info;
    if (!dladdr((void *)&shim_real, &info) || !info.dli_fname) return -1;
    return realpath(info.dli_fname, out) ? 0 : -1;
}

/* RTLD_DEEPBIND keeps the fallback's references to its own exports inside it. The sanitizer
 * runtimes refuse to load a library with it, so sanitizer builds go without. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SHIM_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SHIM_SANITIZED 1
#endif
#ifdef SHIM_SANITIZED
#define SHIM_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL)
#else
#define SHIM_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)
#endif

/* 0 when path names a loadable NCCL other than this shim; the table is filled. */
static int try_load(const char *path, const char *self) {
    char resolved[PATH_MAX];
    if (!realpath(path, resolved)) return -1;
    if (self[0] && !strcmp(resolved, self)) return -1;
    void *h = dlopen(resolved, SHIM_DLOPEN_FLAGS);
    if (!h) {
        snprintf(real_why, sizeof real_why, "dlopen(%s): %s", resolved, dlerror());
        return -1;
    }
    shim_real_t t;
    memset(&t, 0, sizeof t);
#define SHIM_REAL_SYM(ret, name, params, args) *(void **)&t.name = dlsym(h, #name);
    CCHAN_NCCL_FUNCS(SHIM_REAL_SYM)
    CCHAN_NCCL_DEVICE_FUNCS(SHIM_REAL_SYM)
#undef SHIM_REAL_SYM
    /* A copy of this shim under another name would forward to itself. */
    if (!t.ncclGetVersion || (void *)t.ncclGetVersion == (void *)&ncclGetVersion ||
        !t.ncclCommInitRankConfig || !t.ncclAllReduce) {
        snprintf(real_why, sizeof real_why, "%s is not an NCCL library (or is this shim)",
                 resolved);
        dlclose(h);
        return -1;
    }
    int v = 0;
    if (t.ncclGetVersion(&v) != ncclSuccess) v = 0;
    t.handle = h;
    t.version = v;
    snprintf(t.path, sizeof t.path, "%s", resolved);
    real_lib = t;
    return 0;
}

struct loaded_search {
    const char *self;
    char found[PATH_MAX];
};

static int find_loaded(struct dl_phdr_info *info, size_t size, void *ctx) {
    (void)size;
    struct loaded_search *s = ctx;
    const char *name = info->dlpi_name;
    const char *base = name ? strrchr(name, '/') : NULL;
    if (!base || strncmp(base + 1, "libnccl.so", 10)) return 0;
    char resolved[PATH_MAX];
    if (!realpath(name, resolved) || !strcmp(resolved, s->self)) return 0;
    snprintf(s->found, sizeof s->found, "%s", resolved);
    return 1;
}

static int try_dir(const char *dir, size_t len, const char *self);

/* The NCCL a loaded library that needs libnccl.so.2 would have got, had this shim not been loaded
 * in its place under that name (LD_PRELOAD): PyTorch's libtorch_cuda.so names its wheel's NCCL
 * through its RUNPATH ($ORIGIN/../../nvidia/nccl/lib). So each loaded object that needs
 * libnccl.so.2 has its RUNPATH (or RPATH) folders tried, $ORIGIN expanded, as the dynamic linker
 * would try them, before the environment's and the system's folders. */
struct runpath_search {
    const char *self;
    int loaded;
};

static int try_dir(const char *dir, size_t len, const char *self);

static int try_runpath_dirs(const char *list, const char *origin, const char *self) {
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char dir[PATH_MAX];
        size_t skip = !strncmp(p, "${ORIGIN}", 9) ? 9 : !strncmp(p, "$ORIGIN", 7) ? 7 : 0;
        if (skip && skip <= len)
            snprintf(dir, sizeof dir, "%s%.*s", origin, (int)(len - skip), p + skip);
        else
            snprintf(dir, sizeof dir, "%.*s", (int)len, p);
        if (len && try_dir(dir, strlen(dir), self) == 0) return 0;
        p = end ? end + 1 : p + len;
    }
    return -1;
}

static int try_runpaths(struct dl_phdr_info *info, size_t size, void *ctx) {
    (void)size;
    struct runpath_search *s = ctx;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn || !info->dlpi_name || !info->dlpi_name[0]) return 0;
    const char *strtab = NULL;
    long runpath = -1, rpath = -1;
    int needs_nccl = 0;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_STRTAB) {
            /* glibc relocates the address in place for most objects; not for all (vdso) */
            ElfW(Addr) a = d->d_un.d_ptr;
            strtab = (const char *)(a < info->dlpi_addr ? a + info->dlpi_addr : a);
        }
    }
    if (!strtab) return 0;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_NEEDED && !strcmp(strtab + d->d_un.d_val, "libnccl.so.2")) needs_nccl = 1;
        if (d->d_tag == DT_RUNPATH) runpath = (long)d->d_un.d_val;
        if (d->d_tag == DT_RPATH) rpath = (long)d->d_un.d_val;
    }
    if (!needs_nccl || (runpath < 0 && rpath < 0)) return 0;
    char object[PATH_MAX];
    if (!realpath(info->dlpi_name, object) || !strcmp(object, s->self)) return 0;
    char *slash = strrchr(object, '/');
    if (slash) *slash = '\0';
    s->loaded = try_runpath_dirs(strtab + (runpath >= 0 ? runpath : rpath), object, s->self) == 0;
    return s->loaded;
}

static int try_dir(const char *dir, size_t len, const char *self) {
    static const char *names[] = {"libnccl.so.2", "libnccl.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%.*s/%s", (int)len, dir, names[i]);
        if (access(path, R_OK) == 0 && try_load(path, self) == 0) return 0;
    }
    return -1;
}

static void real_load(void) {
    char self[PATH_MAX] = "";
    own_path(self);
    const char *env = NULL;
    (void)cchan_env_get_str("CCHAN_NCCL_FALLBACK", &env); /* any path: never fails */
    if (env) {
        if (!strcasecmp(env, "none") || !strcmp(env, "0")) {
            snprintf(real_why, sizeof real_why, "disabled by CCHAN_NCCL_FALLBACK=%s", env);
            return;
        }
        if (try_load(env, self) == 0)
            real_loaded = 1;
        else if (!strncmp(real_why, "not loaded", 10))
            snprintf(real_why, sizeof real_why,
                     "CCHAN_NCCL_FALLBACK=%s: no such file, or this shim", env);
        else {
            char why[sizeof real_why];
            snprintf(why, sizeof why, "CCHAN_NCCL_FALLBACK=%s: %s", env, real_why);
            memcpy(real_why, why, sizeof real_why);
        }
        goto done;
    }
    /* An NCCL the application loaded already (e.g. a framework's own copy). */
    struct loaded_search s = {self, ""};
    if (dl_iterate_phdr(find_loaded, &s) && try_load(s.found, self) == 0) {
        real_loaded = 1;
        goto done;
    }
    struct runpath_search rs = {self, 0};
    if (dl_iterate_phdr(try_runpaths, &rs) && rs.loaded) {
        real_loaded = 1;
        goto done;
    }
    const char *ldp = getenv("LD_LIBRARY_PATH");
    for (const char *p = ldp; p && *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len && try_dir(p, len, self) == 0) {
            real_loaded = 1;
            goto done;
        }
        p = end ? end + 1 : p + len;
    }
    static const char *dirs[] = {"/usr/lib/x86_64-linux-gnu",
                                 "/usr/lib/aarch64-linux-gnu",
                                 "/usr/lib64",
                                 "/usr/lib",
                                 "/usr/local/lib",
                                 "/usr/local/nccl/lib",
                                 "/usr/local/cuda/lib64",
                                 "/usr/local/cuda/lib",
                                 "/opt/nccl/lib"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        if (try_dir(dirs[i], strlen(dirs[i]), self) == 0) {
            real_loaded = 1;
            goto done;
        }
    }
    snprintf(real_why, sizeof real_why,
             "no libnccl.so.2 other than this shim in the loaded libraries' RUNPATHs, "
             "LD_LIBRARY_PATH or the system folders "
             "(set CCHAN_NCCL_FALLBACK=/path/libnccl.so.2)");
done:
    if (real_loaded) {
        snprintf(real_why, sizeof real_why, "%s", "loaded");
        SHIM_INFO("fallback NCCL %d loaded from %s", real_lib.version, real_lib.path);
    } else {
        SHIM_INFO("no fallback NCCL: %s", real_why);
    }
}

const shim_real_t *shim_real(void) {
    pthread_once(&real_once, real_load);
    return real_loaded ? &real_lib : NULL;
}

const char *shim_real_why(void) {
    pthread_once(&real_once, real_load);
    return real_why;
}

/* ------------------------------------------------------------------ CUDA driver */

typedef int (*cu_ctx_get_device_fn)(int *);
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_primary_retain_fn)(void **, int);
typedef int (*cu_ctx_set_current_fn)(void *);

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static struct {
    cu_init_fn init;
    cu_ctx_get_device_fn ctx_get_device;
    cu_primary_retain_fn primary_retain;
    cu_ctx_set_current_fn ctx_set_current;
} cu;

static void cu_load(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    *(void **)&cu.init = dlsym(h, "cuInit");
    *(void **)&cu.ctx_get_device = dlsym(h, "cuCtxGetDevice");
    *(void **)&cu.primary_retain = dlsym(h, "cuDevicePrimaryCtxRetain");
    *(void **)&cu.ctx_set_current = dlsym(h, "cuCtxSetCurrent");
    if (cu.init && cu.init(0) != 0) memset(&cu, 0, sizeof cu);
}

int shim_current_device(void) {
    pthread_once(&cu_once, cu_load);
    int dev = 0;
    if (!cu.ctx_get_device || cu.ctx_get_device(&dev) != 0) return 0;
    return dev;
}

int shim_bind_device(int device) {
    pthread_once(&cu_once, cu_load);
    void *ctx = NULL;
    if (!cu.primary_retain || !cu.ctx_set_current) return 0; /* no CUDA driver: nothing to bind */
    if (cu.primary_retain(&ctx, device) != 0 || cu.ctx_set_current(ctx) != 0) return -1;
    return 0;
}
