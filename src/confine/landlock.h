/* Landlock: limit where a sandbox may write. Runs in the setup child after
 * pivot_root, before seccomp; needs no privilege. */
#pragma once

#include "shared/error.h"

/* Highest Landlock ABI of the running kernel, 0 when unavailable. */
int cdn_landlock_abi(void);

/* Restrict the calling process (and its future children) so that filesystem
 * writes succeed only beneath `dirs` (NULL-terminated; any write) and, beneath
 * `write_only`, only to files that already exist (no creating, removing or
 * renaming). Returns 0, or 1 when Landlock is unavailable (the caller decides
 * whether that is acceptable), or a negative errno. */
int cdn_landlock_restrict_writes(const char *const *dirs, const char *const *write_only);

/* The process tier (no mount namespace): reads and execution only beneath
 * `read`, everything beneath `own`, reading and writing the existing files
 * `devices`; nothing anywhere else. Same returns as above. */
int cdn_landlock_restrict_paths(const char *const *read, const char *const *own, const char *const *devices);
