/* The OCI runtime spec's default masks on a sandbox's /proc (proc-mask.c), for every tier: the container's
 * rootfs, the process tier's worker, a VM guest's init. */
#pragma once

#include "shared/error.h"

/* NULL-terminated: masked (an empty file, or an empty directory), and bound read-only. */
extern const char *const cdn_proc_masked_paths[];
extern const char *const cdn_proc_readonly_paths[];

/* The masks on the /proc at root + "/proc": masked files get mask (an empty regular file: fanotify
 * reports opens of regular files only, so the monitor sees reads of masked kernel files) bound
 * read-only on them, masked directories mask_dir (an empty directory) so bound, or, where mask_dir
 * is NULL, an empty read-only tmpfs each; the read-only paths are bound read-only. mask_dir spares
 * a superblock per sandbox, which on a host of thousands of sandboxes is memory in every memory
 * cgroup (docs/performance.md). Paths the kernel does not have are skipped. 0 or -errno with err. */
int cdn_proc_mask(const char *root, const char *mask, const char *mask_dir, struct cdn_error *err);
