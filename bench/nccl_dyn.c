/* NCCL loaded at run time; see nccl_dyn.h. */
#include "nccl_dyn.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef CCHAN_BENCH_HAVE_NCCL_H
#include <nccl.h>
/* The declarations in nccl_dyn.h must match the NCCL this was built next to. */
_Static_assert(sizeof(ncclUniqueId) == sizeof(cb_nccl_unique_id_t), "ncclUniqueId size");
_Static_assert((int)ncclFloat16 == (int)CB_NCCL_FLOAT16 &&
                   (int)ncclFloat32 == (int)CB_NCCL_FLOAT32 &&
                   (int)ncclBfloat16 == (int)CB_NCCL_BFLOAT16,
               "ncclDataType_t values");
_Static_assert((int)ncclSum == (int)CB_NCCL_SUM, "ncclRedOp_t values");
_Static_assert((int)ncclSuccess == 0, "ncclResult_t values");
#if defined(NCCL_WIN_COLL_SYMMETRIC)
_Static_assert(NCCL_WIN_COLL_SYMMETRIC == CB_NCCL_WIN_COLL_SYMMETRIC, "window flags");
_Static_assert(NCCL_WIN_REQUIRED_ALIGNMENT == CB_NCCL_WIN_ALIGNMENT, "window alignment");
#endif
#endif

static void *open_first(const char **tried, char *path, size_t path_len) {
    const char *env = getenv("CCHAN_NCCL_LIB");
    const char *candidates[] = {env && *env ? env : "libnccl.so.2",
                                "/usr/local/cuda/lib64/libnccl.so.2",
                                "/usr/local/cuda/targets/x86_64-linux/lib/libnccl.so.2",
                                "/usr/lib/x86_64-linux-gnu/libnccl.so.2"};
    size_t n = env && *env ? 1 : sizeof candidates / sizeof candidates[0];
    for (size_t i = 0; i < n; i++) {
        void *h = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            snprintf(path, path_len, "%s", candidates[i]);
            return h;
        }
        *tried = candidates[0];
    }
    return NULL;
}

int cb_nccl_load(cb_nccl_t *nccl, char *why, size_t why_len) {
    memset(nccl, 0, sizeof *nccl);
    const char *tried = NULL;
    void *h = open_first(&tried, nccl->path, sizeof nccl->path);
    if (!h) {
        const char *err = dlerror();
        snprintf(why, why_len, "%s not loadable (%s)%s", tried ? tried : "libnccl.so.2",
                 err ? err : "not found",
                 getenv("CCHAN_NCCL_LIB") ? "" : "; set CCHAN_NCCL_LIB to its path");
        return -1;
    }
    nccl->handle = h;
#define CB_NCCL_SYM(field, name, required)                                                         \
    do {                                                                                           \
        *(void **)(&nccl->field) = dlsym(h, name);                                                 \
        if (required && !nccl->field) {                                                            \
            snprintf(why, why_len, "%s has no %s", nccl->path, name);                              \
            cb_nccl_unload(nccl);                                                                  \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)
    CB_NCCL_SYM(GetVersion, "ncclGetVersion", 1);
    CB_NCCL_SYM(GetUniqueId, "ncclGetUniqueId", 1);
    CB_NCCL_SYM(CommInitRank, "ncclCommInitRank", 1);
    CB_NCCL_SYM(CommDestroy, "ncclCommDestroy", 1);
    CB_NCCL_SYM(GetErrorString, "ncclGetErrorString", 1);
    CB_NCCL_SYM(AllReduce, "ncclAllReduce", 1);
    CB_NCCL_SYM(AllGather, "ncclAllGather", 1);
    CB_NCCL_SYM(ReduceScatter, "ncclReduceScatter", 1);
    CB_NCCL_SYM(MemAlloc, "ncclMemAlloc", 0);
    CB_NCCL_SYM(MemFree, "ncclMemFree", 0);
    CB_NCCL_SYM(CommWindowRegister, "ncclCommWindowRegister", 0);
    CB_NCCL_SYM(CommWindowDeregister, "ncclCommWindowDeregister", 0);
#undef CB_NCCL_SYM
    if (nccl->GetVersion(&nccl->version) != 0) {
        snprintf(why, why_len, "%s: ncclGetVersion failed", nccl->path);
        cb_nccl_unload(nccl);
        return -1;
    }
    return 0;
}

void cb_nccl_unload(cb_nccl_t *nccl) {
    /* NCCL keeps threads and CUDA state for the life of the process; unloading it under them is
     * unsafe, so the handle is only forgotten. */
    memset(nccl, 0, sizeof *nccl);
}

int cb_nccl_has_windows(const cb_nccl_t *nccl) {
    return nccl->MemAlloc && nccl->MemFree && nccl->CommWindowRegister &&
           nccl->CommWindowDeregister;
}

int cb_nccl_nvls_guard(char *why, size_t why_len) {
    const char *v = getenv("NCCL_NVLS_ENABLE");
    if (!v || !*v) {
        setenv("NCCL_NVLS_ENABLE", "0", 1);
        return 0;
    }
    if (!strcmp(v, "0")) return 0;
    snprintf(why, why_len,
             "NCCL_NVLS_ENABLE=%s: NVLink multicast is not allowed on these machines "
             "(docs/switch_channel.md); unset it or set it to 0",
             v);
    return -1;
}

const char *cb_nccl_error(const cb_nccl_t *nccl, int result) {
    return nccl->GetErrorString ? nccl->GetErrorString(result) : "NCCL error";
}
