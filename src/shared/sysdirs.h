/* The top-level directories of a sandbox's root that are not the sandbox's own: the system
 * (/usr, /etc, /bin, /sbin, /lib*, /boot), read-only to commands unless the spec sets
 * writable_system, and the kernel's views (/proc, /sys, /dev), always. One list for the container's
 * landlock (setup.c), a guest's read-only root (init-vm.c), the verifier's checks (init-verifier.c)
 * and the monitor's system_write (monitor/writes.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* name (len bytes, not NUL-terminated) is a system directory / a kernel view. */
bool cdn_system_top(const char *name, size_t len);
bool cdn_kernel_top(const char *name, size_t len);
/* name (NUL-terminated) stays read-only to commands: a kernel view, or a system directory unless
 * writable_system. */
bool cdn_read_only_top(const char *name, bool writable_system);
/* The absolute path's first component is a system directory. */
bool cdn_path_in_system(const char *path);
