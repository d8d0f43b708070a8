/* The calling thread's last-error message, written by libraries built on cchan.
 *
 * One message per thread, shared by the runtime and every library on it (cchan_coll, cchan_moe,
 * cchan_fused, the NCCL shim): whatever failed last on this thread, runtime or library, is what
 * cchan_last_error() (cchan.h) returns. A library that fails formats its own context and, when a
 * runtime call failed under it, that call's message:
 *
 *     int st = cchan_mem_alloc(comm, bytes, 0, &mem);
 *     if (st < 0)
 *         return cchan_set_last_error(st, "mylib_create: scratch of %zu bytes: %s", bytes,
 *                                     cchan_last_error());
 *
 * Application code reads errors; it has no reason to set them. */
#ifndef CCHAN_LAST_ERROR_H
#define CCHAN_LAST_ERROR_H

#include "cchan/cchan.h"

CCHAN_EXTERN_C_BEGIN

/* Sets the calling thread's message to the formatted text (at most 1023 bytes; longer text is cut
 * with "..." at the end) and returns status, so a failing path can `return` it. The text is
 * formatted before the old message is replaced: cchan_last_error() may be one of the arguments. */
CCHAN_API int cchan_set_last_error(int status, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Empties the calling thread's message (a library entry point starting afresh). */
CCHAN_API void cchan_clear_last_error(void);

CCHAN_EXTERN_C_END

#endif /* CCHAN_LAST_ERROR_H */
