/* The query of the files routes (docs/cordond.md): ?path=P, and per route
 * max_bytes (GET …/files), follow (GET …/stat), mode (POST …/chmod); the move
 * takes from, to and overwrite instead; every route takes user. Anything else
 * is refused with the parameter's name. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "shared/error.h"

struct file_args {
    char path[4096];    /* absolute: a relative one is joined to the workdir; the move's "from" */
    char to[4096];      /* move: absolute; one ending in '/' gets the last component of from */
    uint64_t max_bytes; /* read: 0 = the daemon's max_read */
    uint32_t mode;      /* chmod: 0–07777 */
    bool nofollow;      /* stat: follow=false */
    bool noreplace;     /* move: overwrite=false */
    bool recursive;     /* watch: recursive=true */
    char user[256];     /* user=: the operation runs as this user of the sandbox ("": its root) */
    bool owners;        /* stat, list: with each entry's owner (another surface's: E2B's EntryInfo) */
    bool has_step;      /* write: step=k, the trajectory's step it is (trajectory.h) */
    uint64_t step;
};

/* query: the URI's query string (NULL: none); op: enum cdn_file_op. -EINVAL
 * (err names the parameter) or -ENAMETOOLONG; ret is written only on success. */
int cdn_file_args_parse(const char *query, int op, const char *workdir, struct file_args *ret,
                        struct cdn_error *err);
