/* confine/proc-mask.h. Runs in the process that builds a sandbox's /proc (a container's setup child in
 * the new namespaces, a process-tier worker in its mount namespace, a VM guest's init), before anything
 * of the sandbox runs. */
#include "proc-mask.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shared/macro.h"

#define CHECK(expr, ...)                                                                                     \
    do {                                                                                                     \
        if ((expr) < 0)                                                                                      \
            return cdn_error_set(err, errno, __VA_ARGS__);                                                   \
    } while (0)

/* OCI runtime-spec defaults. */
const char *const cdn_proc_masked_paths[] = {
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/proc/kallsyms",
    "/proc/sysrq-trigger" /* also ro */,
    NULL,
};
const char *const cdn_proc_readonly_paths[] = {
    "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", NULL, /* sysrq-trigger is masked outright */
};
/* A masked file gets an empty, read-only regular file bound on it, one per
 * sandbox (in its scratch): not /dev/null, because fanotify reports opens of
 * regular files only, and the monitor records reads of masked kernel files
 * (src/monitor/fanotify.h). A masked directory gets an empty directory so bound. */
static int mask_bind(const char *mask, const char *p, const char *what, struct cdn_error *err)
{
    CHECK(mount(mask, p, NULL, MS_BIND, NULL), "mask %s: %m", what);
    _cleanup_close_ int fd = open(p, O_PATH | O_CLOEXEC);
    if (fd < 0)
        return cdn_error_set(err, errno, "open %s: %m", what);
    /* mount_setattr adds flags without repeating those the kernel locked on a mount copied into a user
     * namespace, which a MS_REMOUNT would have to name exactly. */
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                          MOUNT_ATTR_NOEXEC};
    if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) < 0)
        return cdn_error_set(err, errno, "set flags on %s: %m", what);
    return 0;
}

int cdn_proc_mask(const char *root, const char *mask, const char *mask_dir, struct cdn_error *err)
{
    char p[4200];
    int r;
    for (size_t i = 0; cdn_proc_masked_paths[i]; i++) {
        struct stat st;
        (void) snprintf(p, sizeof p, "%s%s", root, cdn_proc_masked_paths[i]);
        if (lstat(p, &st) < 0)
            continue;
        if (S_ISDIR(st.st_mode) && !mask_dir)
            CHECK(mount("cordon-mask", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                        "size=0,mode=0555"),
                  "mask %s: %m", cdn_proc_masked_paths[i]);
        else if ((r = mask_bind(S_ISDIR(st.st_mode) ? mask_dir : mask, p, cdn_proc_masked_paths[i], err)) < 0)
            return r;
    }
    for (size_t i = 0; cdn_proc_readonly_paths[i]; i++) {
        (void) snprintf(p, sizeof p, "%s%s", root, cdn_proc_readonly_paths[i]);
        /* The flags of our own fresh /proc are known: no need to read them back. */
        if (mount(p, p, NULL, MS_BIND, NULL) < 0) {
            if (errno == ENOENT)
                continue;
            return cdn_error_set(err, errno, "bind %s: %m", cdn_proc_readonly_paths[i]);
        }
        CHECK(mount(NULL, p, NULL,
                    MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RELATIME, NULL),
              "remount %s read-only: %m", cdn_proc_readonly_paths[i]);
    }
    return 0;
}
