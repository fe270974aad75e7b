#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

__attribute__((format(printf, 4, 0))) static int vset(struct cdn_error *err, int errnum, const char *field,
                                                      const char *fmt, va_list ap)
{
    errnum = errnum < 0 ? -errnum : errnum;
    if (errnum == 0)
        errnum = EINVAL;
    if (err) {
        int saved = errno;
        errno = errnum; /* so that %m names this error */
        err->errnum = errnum;
        (void) vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        (void) snprintf(err->field, sizeof err->field, "%s", field ? field : "");
        errno = saved;
    }
    return -errnum;
}

int cdn_error_set(struct cdn_error *err, int errnum, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vset(err, errnum, NULL, fmt, ap);
    va_end(ap);
    return r;
}

int cdn_error_field(struct cdn_error *err, int errnum, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vset(err, errnum, field, fmt, ap);
    va_end(ap);
    return r;
}

int cdn_error_prefix(struct cdn_error *err, int errnum, const char *fmt, ...)
{
    errnum = errnum < 0 ? -errnum : errnum;
    if (!err)
        return -(errnum ? errnum : EINVAL);
    char old[sizeof err->msg];
    char ctx[sizeof err->msg] = "";
    va_list ap;
    memcpy(old, err->msg, sizeof old);
    va_start(ap, fmt);
    (void) vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    /* "ctx: old", cut to fit; snprintf with a precision keeps the compiler's truncation checks quiet. */
    int room = (int) sizeof err->msg - 1;
    if (old[0])
        (void) snprintf(err->msg, sizeof err->msg, "%.*s: %.*s", room, ctx, room, old);
    else
        (void) snprintf(err->msg, sizeof err->msg, "%.*s", room, ctx);
    if (errnum)
        err->errnum = errnum;
    return -(err->errnum ? err->errnum : EINVAL);
}
