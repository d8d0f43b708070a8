/* libcchan_nccl internals: the communicator behind ncclComm_t, the fallback NCCL, logging. */
#ifndef CCHAN_NCCL_SHIM_H
#define CCHAN_NCCL_SHIM_H

#include <pthread.h>
#include <stdint.h>

#include "cchan/cchan.h"
#include "nccl_abi.h"

#include "cchan_coll.h"

#define SHIM_API __attribute__((visibility("default")))
#define SHIM_HIDDEN __attribute__((visibility("hidden")))

/* Defines pnccl<name> and exports nccl<name> as its alias, as libnccl does. */
#define SHIM_DEFINE(ret, name, params)                                                             \
    SHIM_API ret name params __attribute__((alias("p" #name)));                                    \
    SHIM_API ret p##name params

/* ------------------------------------------------------------------ the fallback NCCL */

/* Function table of the real NCCL, loaded at run time (shim_real.c). A NULL entry is a function the
 * loaded library lacks. */
typedef struct shim_real {
#define SHIM_REAL_FIELD(ret, name, params, args) ret(*name) params;
    CCHAN_NCCL_FUNCS(SHIM_REAL_FIELD)
    CCHAN_NCCL_DEVICE_FUNCS(SHIM_REAL_FIELD)
#undef SHIM_REAL_FIELD
    void *handle;
    char path[512];
    int version;
} shim_real_t;

/* The loaded fallback, or NULL (why: shim_real_why()). Thread-safe, loads once. */
SHIM_HIDDEN const shim_real_t *shim_real(void);
SHIM_HIDDEN int shim_foreign_comm(ncclComm_t comm);
/* At the top of an export taking a communicator: a handle of the fallback itself goes back to the
 * fallback's `name` (see shim_foreign_comm), with `args` naming the export's own parameters. */
#define SHIM_HAND_BACK(name, comm, args)                                                           \
    do {                                                                                           \
        if (shim_foreign_comm(comm) && shim_real()->name) return shim_real()->name args;           \
    } while (0)
SHIM_HIDDEN const char *shim_real_why(void);

/* ------------------------------------------------------------------ communicators */

#define SHIM_COMM_MAGIC 0x6363686e63636c31ull /* "cchnccl1" */
/* A destroyed or aborted handle. Its memory is kept (shim_comm.c, the graveyard), so that a call on
 * a stale handle reads this and fails with ncclInvalidArgument instead of reading freed memory, and
 * so that it is never taken for the fallback's own handle (shim_foreign_comm). */
#define SHIM_COMM_DEAD 0x6363686e63636c30ull /* "cchnccl0" */

/* What teardown has begun on a communicator (struct ncclComm's dying). */
enum { SHIM_ALIVE = 0, SHIM_DESTROYING = 1, SHIM_ABORTING = 2 };

typedef struct shim_clique shim_clique_t;

/* A window registered with cchan_coll too: the fallback's (or the shim's) handle and the buffer. */
typedef struct shim_window {
    ncclWindow_t win;
    void *ptr;
} shim_window_t;

struct ncclComm {
    uint64_t magic;        /* written under the handle lock, read atomically without it */
    ncclComm_t real;       /* the fallback's communicator; NULL when no fallback was loaded */
    cchan_bootstrap_t *bs; /* this communicator's bootstrap when cc is NULL (else cc owns it) */
    cchan_comm_t *cc;      /* cchan communicator when the cchan paths are on */
    cchan_coll_t *coll;    /* its collectives */
    shim_clique_t *clique; /* the communicators of this process that share the unique id */
    int rank, nranks, device;
    ncclResult_t init_error; /* a failed deferred (group) initialisation */
    uint64_t logged[16];     /* per operation, the last (path, size) logged at INFO */
    shim_window_t *windows;  /* windows registered with cchan_coll */
    int nwindows;
    char cchan_off[160]; /* why the cchan paths are off, "" when on */
    /* Under the handle lock (shim_comm.c). Every call holds its communicator for its duration
     * (shim_call_t), so that ncclCommAbort from another thread frees nothing a call still uses: it
     * marks the communicator, aborts both sides, and waits for the calls to drain. */
    int calls;      /* calls holding this communicator */
    int calls_real; /* of them, those that entered the fallback NCCL (shim_enter_real) */
    int dying;      /* SHIM_ALIVE, or the teardown that has begun */
    int waiters;    /* teardowns waiting for calls to drain */
    int closed;     /* the teardown has drained the calls: none, not even a query, starts again */
    struct ncclComm *next_dead; /* the graveyard's order, oldest first */
};

/* A call's hold on its communicator. Declared with SHIM_CALL at the top of every export taking a
 * communicator; the hold is taken by shim_check_comm / shim_check_live / shim_real_comm and given
 * back when the variable goes out of scope, at every return. */
typedef struct shim_call {
    struct ncclComm *comm; /* held, or NULL */
    int in_real;           /* counted in comm->calls_real */
} shim_call_t;
SHIM_HIDDEN void shim_leave(shim_call_t *call);
#define SHIM_CALL(name) shim_call_t name __attribute__((cleanup(shim_leave))) = {NULL, 0}

/* Validates comm and holds it for call (NULL, foreign, destroyed and aborted handles are
 * ncclInvalidArgument with a message); the queries take this alone, also while a teardown runs. */
SHIM_HIDDEN ncclResult_t shim_check_comm(shim_call_t *call, ncclComm_t comm, const char *where);
/* shim_check_comm, no teardown begun, and the cchan side not aborted (cchan_comm_check): what
 * every call that communicates starts with. An aborted communicator gives ncclRemoteError, one
 * being destroyed ncclInvalidUsage. */
SHIM_HIDDEN ncclResult_t shim_check_live(shim_call_t *call, ncclComm_t comm, const char *where);
/* Before a call passes comm->real to the fallback: counts it as inside the fallback, whose abort
 * (ncclCommAbort of the fallback's communicator) is what ends it; fails like shim_check_live once a
 * teardown has begun, so that no call enters the fallback after its abort. */
SHIM_HIDDEN ncclResult_t shim_enter_real(shim_call_t *call, const char *where);
/* shim_check_live and shim_enter_real: the fallback's communicator of comm, or ncclInvalidUsage
 * with a message saying why none. */
SHIM_HIDDEN ncclResult_t shim_real_comm(shim_call_t *call, ncclComm_t comm, const char *where,
                                        const shim_real_t **r, ncclComm_t *real);
/* Whether a real-NCCL group is open on this thread (ncclGroupStart without its End). */
SHIM_HIDDEN int shim_group_depth(void);

/* ------------------------------------------------------------------ errors and logging */

enum { SHIM_LOG_NONE = 0, SHIM_LOG_WARN = 1, SHIM_LOG_INFO = 2, SHIM_LOG_TRACE = 3 };
SHIM_HIDDEN int shim_log_level(void);
SHIM_HIDDEN void shim_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define SHIM_WARN(...)                                                                             \
    (shim_log_level() >= SHIM_LOG_WARN ? shim_log(SHIM_LOG_WARN, __VA_ARGS__) : (void)0)
#define SHIM_INFO(...)                                                                             \
    (shim_log_level() >= SHIM_LOG_INFO ? shim_log(SHIM_LOG_INFO, __VA_ARGS__) : (void)0)
#define SHIM_TRACE(...)                                                                            \
    (shim_log_level() >= SHIM_LOG_TRACE ? shim_log(SHIM_LOG_TRACE, __VA_ARGS__) : (void)0)

/* Sets the calling thread's last error (ncclGetLastError) and returns res; logged at WARN. */
SHIM_HIDDEN ncclResult_t shim_fail(ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A cchan status as an ncclResult_t, with cchan_last_error() in the message. */
SHIM_HIDDEN ncclResult_t shim_fail_cchan(int status, const char *where);
/* The same for a cchan_coll call (its message: cchan_coll_last_error()). */
SHIM_HIDDEN ncclResult_t shim_fail_coll(int status, const char *where);
SHIM_HIDDEN const char *shim_last_error(void);
SHIM_HIDDEN void shim_clear_error(void);

/* ------------------------------------------------------------------ CUDA driver (dlopen) */

/* The calling thread's current CUDA device (0 when no context is current or CUDA is absent). */
SHIM_HIDDEN int shim_current_device(void);
/* Makes device's primary context current on the calling thread, so that the fallback NCCL (its
 * own CUDA runtime) sees the device; 0 (also when there is no CUDA driver) or -1. */
SHIM_HIDDEN int shim_bind_device(int device);

#endif /* CCHAN_NCCL_SHIM_H */
