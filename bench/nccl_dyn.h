/* NCCL loaded at run time (dlopen of libnccl.so.2), for benchmarks that compare against it in the
 * same run. Nothing here links NCCL: a machine without it runs the cchan rows alone and says why.
 *
 * Library: $CCHAN_NCCL_LIB when set (a path or a soname), else "libnccl.so.2" through the usual
 * search (LD_LIBRARY_PATH, ldconfig), then the CUDA toolkit's lib64 folders.
 *
 * Types are this file's own minimal declarations with NCCL 2.x's ABI (values as in nccl.h); when
 * the build found nccl.h (CCHAN_BENCH_HAVE_NCCL_H) nccl_dyn.c checks them against it at compile
 * time. Streams are cudaStream_t passed as void *.
 *
 * NVLink SHARP (NVLS) multicast is never allowed here (docs/switch_channel.md): cb_nccl_comm_init
 * sets NCCL_NVLS_ENABLE=0 when it is unset and refuses to start NCCL when it is set to anything
 * else.
 */
#ifndef CCHAN_BENCH_NCCL_DYN_H
#define CCHAN_BENCH_NCCL_DYN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CB_NCCL_UNIQUE_ID_BYTES 128
typedef struct cb_nccl_unique_id {
    char internal[CB_NCCL_UNIQUE_ID_BYTES];
} cb_nccl_unique_id_t;

typedef void *cb_nccl_comm_t;   /* ncclComm_t */
typedef void *cb_nccl_window_t; /* ncclWindow_t */

/* ncclDataType_t and ncclRedOp_t values used here. */
enum { CB_NCCL_FLOAT16 = 6, CB_NCCL_FLOAT32 = 7, CB_NCCL_BFLOAT16 = 9 };
enum { CB_NCCL_SUM = 0 };
#define CB_NCCL_WIN_COLL_SYMMETRIC 0x01
#define CB_NCCL_WIN_ALIGNMENT 4096

typedef struct cb_nccl {
    void *handle;
    char path[256]; /* what was loaded */
    int version;    /* ncclGetVersion: major * 10000 + minor * 100 + patch */
    int (*GetVersion)(int *version);
    int (*GetUniqueId)(cb_nccl_unique_id_t *id);
    int (*CommInitRank)(cb_nccl_comm_t *comm, int nranks, cb_nccl_unique_id_t id, int rank);
    int (*CommDestroy)(cb_nccl_comm_t comm);
    const char *(*GetErrorString)(int result);
    int (*AllReduce)(const void *send, void *recv, size_t count, int dtype, int op,
                     cb_nccl_comm_t comm, void *stream);
    int (*AllGather)(const void *send, void *recv, size_t sendcount, int dtype, cb_nccl_comm_t comm,
                     void *stream);
    int (*ReduceScatter)(const void *send, void *recv, size_t recvcount, int dtype, int op,
                         cb_nccl_comm_t comm, void *stream);
    /* Symmetric registration (NCCL 2.27 and newer); NULL when the library lacks them. */
    int (*MemAlloc)(void **ptr, size_t bytes);
    int (*MemFree)(void *ptr);
    int (*CommWindowRegister)(cb_nccl_comm_t comm, void *buf, size_t bytes, cb_nccl_window_t *win,
                              int flags);
    int (*CommWindowDeregister)(cb_nccl_comm_t comm, cb_nccl_window_t win);
} cb_nccl_t;

/* Loads NCCL into *nccl. 0, or -1 with why[] saying what is missing. */
int cb_nccl_load(cb_nccl_t *nccl, char *why, size_t why_len);
void cb_nccl_unload(cb_nccl_t *nccl);
/* 1 when the symmetric-registration functions are present. */
int cb_nccl_has_windows(const cb_nccl_t *nccl);
/* Checks NCCL_NVLS_ENABLE (sets it to 0 when unset). 0, or -1 with why[] when it is set to
 * something else than 0: NCCL must then not run here. */
int cb_nccl_nvls_guard(char *why, size_t why_len);
/* "ncclAllReduce: unhandled cuda error" style text for a failed NCCL call. */
const char *cb_nccl_error(const cb_nccl_t *nccl, int result);

#ifdef __cplusplus
}
#endif

#endif /* CCHAN_BENCH_NCCL_DYN_H */
