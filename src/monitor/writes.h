/* What a reported syscall (seccomp-policy.h cdn_seccomp_is_reported) is
 * about to write, for the monitor's "system-write" and protected-path
 * records. The paths are read from the caller's memory while it waits and
 * resolved lexically against its working directory or dirfd, as the sandbox
 * sees them; symlinks are not followed, so a write through a symlink the
 * agent made goes unrecorded — the kernel refuses it all the same (landlock,
 * read-only binds): this records, it does not enforce. */
#pragma once

#include <stdbool.h>

#include "core/protect.h"
#include "core/spec.h"
#include "confine/seccomp-policy.h"

struct cdn_write_attempt {
    const char *op; /* the syscall's name */
    int n;          /* paths in path[] */
    char path[2][1024];
};

/* 0, or -errno when the paths cannot be read (the caller went away). */
int cdn_write_attempt_read(const struct cdn_seccomp_event *ev, struct cdn_write_attempt *out);
/* Beneath one of the directories the container tier keeps read-only (/usr,
 * /bin, /etc, …), and not a Python bytecode cache (__pycache__), which the
 * interpreter tries to write there in ordinary work. */
bool cdn_path_is_system(const char *path);
/* Whether the i-th path of w is an attempt on a protected path: one named (or beneath one named)
 * by protect, or, for a rename or an unlink, a parent of one. */
bool cdn_write_is_protected(const struct cdn_write_attempt *w, int i, const struct cdn_strv *protect);
/* Lexically: join rel to base (when relative), drop "." and empty
 * components, resolve "..". Into out (size bytes); false if too long. */
bool cdn_path_normalize(const char *base, const char *rel, char *out, size_t size);
