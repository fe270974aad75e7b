/* Caller-owned error context (see docs/error-handling.md).
 *
 * Failing functions return a negative errno and, when given a non-NULL
 * struct cdn_error, describe the failure there. The struct lives on the
 * caller's stack and holds no pointers, so a pre-exec child can copy it
 * through the sync pipe to its parent byte for byte. */
#pragma once

#include "macro.h"

struct cdn_error {
    int errnum;     /* positive errno, 0 when unset */
    char field[48]; /* the spec field / flag at fault, "" if none */
    char msg[256];  /* one line, no trailing newline */
};

/* Record errnum (positive or negative) and a formatted message; returns
 * -abs(errnum) so callers can `return cdn_error_set(err, …);`. err may be NULL.
 * %m in fmt expands to strerror(errnum). */
int cdn_error_set(struct cdn_error *err, int errnum, const char *fmt, ...) _printf_(3, 4);

/* Same, also naming the spec field (e.g. "limits.memory_mb"). */
int cdn_error_field(struct cdn_error *err, int errnum, const char *field, const char *fmt, ...)
    _printf_(4, 5);

/* Prefix an already-set message with more context: "ctx: old message". */
int cdn_error_prefix(struct cdn_error *err, int errnum, const char *fmt, ...) _printf_(3, 4);
