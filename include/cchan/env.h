/* cchan environment registry: every CCHAN_* variable that libcchan, the kernel libraries
 * (coll, moe, fused, exec) and the NCCL shim read, with its type, default, range and meaning, in
 * one table (docs/environment.md lists the same; a test checks both agree).
 *
 * The getters read the variable when called: a library reads each variable it uses once, at
 * create time, and keeps the value for the object's life, so a change takes effect at the next
 * create. An empty variable counts as unset. A set but malformed value is never replaced by the
 * default: the getter fails with -EINVAL and cchan_last_error() names the variable, its value and
 * the accepted form; the library fails its create call with that message. Asking for a name that
 * is not registered, or with the wrong type, is -EINVAL too (a library bug, caught by its tests).
 */
#ifndef CCHAN_ENV_H
#define CCHAN_ENV_H

#include <stdint.h>

#include "cchan/cchan.h"

CCHAN_EXTERN_C_BEGIN

typedef enum cchan_env_type {
    CCHAN_ENV_INT = 1,  /* decimal, 0x hex or 0 octal digits, the whole text (no blanks, no
                         * '+'; a leading '-' only where min < 0), within [min, max] */
    CCHAN_ENV_BOOL = 2, /* 0, 1, true, false, on, off (any case) */
    CCHAN_ENV_STR = 3,  /* any text; with `choices`, one of them (any case) */
} cchan_env_type_t;

typedef struct cchan_env_var {
    const char *name; /* "CCHAN_..." */
    cchan_env_type_t type;
    int64_t dflt;         /* INT and BOOL: the value when unset */
    int64_t min, max;     /* INT: the accepted range (dflt may lie outside it: "chosen") */
    const char *choices;  /* STR: "a|b|c" when only those are accepted, else NULL */
    const char *dflt_doc; /* the default in words, as docs/environment.md gives it */
    const char *reader;   /* the library that reads it: cchan, coll, moe, exec, nccl */
    const char *doc;      /* one line */
} cchan_env_var_t;

/* The registry: entries 0 .. cchan_env_count() - 1; NULL past the end. */
CCHAN_API int cchan_env_count(void);
CCHAN_API const cchan_env_var_t *cchan_env_at(int index);
/* The entry of `name`, or NULL when it is not registered. */
CCHAN_API const cchan_env_var_t *cchan_env_lookup(const char *name);

/* The registered variable's value (its default when unset or empty). */
CCHAN_API int cchan_env_get_int(const char *name, int64_t *out);
CCHAN_API int cchan_env_get_bool(const char *name, int *out);
/* *out: the value, or NULL when unset or empty (the default then is the reader's, dflt_doc). The
 * pointer is the environment's: copy it before the next setenv. */
CCHAN_API int cchan_env_get_str(const char *name, const char **out);

CCHAN_EXTERN_C_END

#endif /* CCHAN_ENV_H */
