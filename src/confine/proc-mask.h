/* The OCI runtime spec's default masks on a sandbox's /proc (proc-mask.c), for every tier: the container's
 * rootfs, the process tier's worker, a VM guest's init. */
#pragma once

#include "shared/error.h"

/* NULL-terminated: masked (an empty file, or an empty read-only tmpfs for a directory), and bound
 * read-only. */
extern const char *const cdn_proc_masked_paths[];
extern const char *const cdn_proc_readonly_paths[];

/* The masks on the /proc at root + "/proc": masked files get mask (an empty regular file: fanotify
 * reports opens of regular files only, so the monitor sees reads of masked kernel files) bound
 * read-only on them, masked directories an empty tmpfs, and the read-only paths are bound read-only.
 * Paths the kernel does not have are skipped. 0 or -errno with err. */
int cdn_proc_mask(const char *root, const char *mask, struct cdn_error *err);
