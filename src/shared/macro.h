/* Small language helpers shared by every part of cordon: cleanup attributes,
 * ownership transfer and array sizes. Header-only; no state. */
#pragma once

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f)   __attribute__((cleanup(f)))
#define _unused_       __attribute__((unused))
#define _noreturn_     __attribute__((noreturn))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _warn_unused_  __attribute__((warn_unused_result))
#define ELEMENTSOF(x)  (sizeof(x) / sizeof((x)[0]))
#define STRLEN(s)      (sizeof(s) - 1)

/* Hand ownership out of a cleanup variable: the variable is reset so that its
 * destructor becomes a no-op. */
#define TAKE_PTR(p)                                                                                          \
    ({                                                                                                       \
        __typeof__(p) _p = (p);                                                                              \
        (p) = NULL;                                                                                          \
        _p;                                                                                                  \
    })
#define TAKE_FD(fd)                                                                                          \
    ({                                                                                                       \
        int _fd = (fd);                                                                                      \
        (fd) = -EBADF;                                                                                       \
        _fd;                                                                                                 \
    })

static inline void freep(void *p)
{
    free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

/* close() that keeps errno and accepts the -EBADF sentinel; returns -EBADF so
 * that `fd = safe_close(fd);` resets the variable. */
static inline int safe_close(int fd)
{
    if (fd >= 0) {
        int saved = errno;
        (void) close(fd);
        errno = saved;
    }
    return -EBADF;
}
static inline void closep(int *fd)
{
    (void) safe_close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

static inline void close_pairp(int (*p)[2])
{
    (void) safe_close((*p)[0]);
    (void) safe_close((*p)[1]);
}
#define _cleanup_close_pair_ _cleanup_(close_pairp)

static inline void fclosep(FILE **f)
{
    if (*f)
        (void) fclose(*f);
}
#define _cleanup_fclose_ _cleanup_(fclosep)

static inline void closedirp(DIR **d)
{
    if (*d)
        (void) closedir(*d);
}
#define _cleanup_closedir_ _cleanup_(closedirp)

#define RET_NERRNO(expr)                                                                                     \
    ({                                                                                                       \
        int _r = (expr);                                                                                     \
        _r < 0 ? -errno : _r;                                                                                \
    })
