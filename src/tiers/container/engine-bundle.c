/* What an engine's bundle adds to a container (cordon-runtime: cdn_sandbox.sysctls, masked_paths,
 * readonly_paths), on top of what cordon does itself. The lists are the engine's, checked by the
 * bundle parser (runtime/bundle.c): sysctls only of the sandbox's own namespaces. */
#include "container-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "confine/slot.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

static bool is_net(const char *kv)
{
    return strncmp(kv, "net.", 4) == 0;
}

/* net.ipv4.ping_group_range holds gids as the writer's user namespace maps them. The host writes it
 * for a namespace it gave, so the bundle's gids (the sandbox's) are turned into the host's here: each
 * one beyond the sandbox's range stands for its last. */
static int host_gids(const char *key, size_t len, const char *value, uint32_t id_base, char *buf, size_t size)
{
    static const char ping[] = "net.ipv4.ping_group_range";
    unsigned long lo, hi;
    char end;
    if (len != sizeof ping - 1 || strncmp(key, ping, len) != 0 || id_base == 0)
        return 0;
    if (sscanf(value, "%lu %lu %c", &lo, &hi, &end) != 2 || lo > hi)
        return -EINVAL;
    lo = lo < CDN_UID_RANGE ? lo : CDN_UID_RANGE - 1;
    hi = hi < CDN_UID_RANGE ? hi : CDN_UID_RANGE - 1;
    (void) snprintf(buf, size, "%lu %lu", id_base + lo, id_base + hi);
    return 1;
}

int cdn_engine_sysctls(char *const *kv, enum cdn_engine_sysctls which, uint32_t id_base,
                       struct cdn_error *err)
{
    for (size_t i = 0; kv && kv[i]; i++) {
        if (which != CDN_SYSCTLS_ALL && is_net(kv[i]) != (which == CDN_SYSCTLS_NET))
            continue;
        const char *eq = strchr(kv[i], '=');
        size_t len = eq ? (size_t) (eq - kv[i]) : strlen(kv[i]);
        char path[256];
        if (!eq || len > 200)
            return cdn_error_field(err, EINVAL, "linux.sysctl", "linux.sysctl: '%.100s' is not key=value",
                                   kv[i]);
        /* The key's dots are the directories under /proc/sys; the key has no '/' (bundle.c). This
         * process's own namespaces decide which instance the file is. */
        int n = snprintf(path, sizeof path, "/proc/sys/%.*s", (int) len, kv[i]);
        for (int k = 10; k < n; k++)
            if (path[k] == '.')
                path[k] = '/';
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        const char *value = eq + 1;
        char mapped[48];
        int m = host_gids(kv[i], len, value, id_base, mapped, sizeof mapped);
        if (m < 0)
            return cdn_error_field(err, EINVAL, "linux.sysctl", "linux.sysctl.%.*s: '%.100s' is not two gids",
                                   (int) len, kv[i], value);
        if (m > 0)
            value = mapped;
        if (fd < 0 || cdn_write_all(fd, value, strlen(value)) < 0)
            return cdn_error_field(err, errno, "linux.sysctl", "linux.sysctl.%.*s: set '%.100s': %m",
                                   (int) len, kv[i], value);
    }
    return 0;
}

/* mount_setattr adds flags without naming those the kernel locked on mounts copied into the
 * sandbox's user namespace, which a MS_REMOUNT would have to repeat exactly. */
static int add_attrs(const char *path, uint64_t attrs, struct cdn_error *err)
{
    struct mount_attr attr = {.attr_set = attrs};
    if (syscall(SYS_mount_setattr, AT_FDCWD, path, AT_RECURSIVE | AT_SYMLINK_NOFOLLOW, &attr, sizeof attr) <
        0)
        return cdn_error_set(err, errno, "set flags on %s: %m", path);
    return 0;
}

int cdn_engine_paths(char *const *readonly, char *const *masked, struct cdn_error *err)
{
    struct stat st;
    for (size_t i = 0; readonly && readonly[i]; i++) {
        /* A path the image lacks is left alone, as runc does; a symlink is not followed. */
        if (lstat(readonly[i], &st) < 0 || S_ISLNK(st.st_mode))
            continue;
        if (mount(readonly[i], readonly[i], NULL, MS_BIND | MS_REC, NULL) < 0)
            return cdn_error_field(err, errno, "linux.readonlyPaths", "linux.readonlyPaths: bind %s: %m",
                                   readonly[i]);
        int r = add_attrs(readonly[i], MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err);
        if (r < 0)
            return r;
    }
    for (size_t i = 0; masked && masked[i]; i++) {
        if (lstat(masked[i], &st) < 0 || S_ISLNK(st.st_mode))
            continue;
        int r = S_ISDIR(st.st_mode) ? mount("cordon-mask", masked[i], "tmpfs",
                                            MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0,mode=0555")
                                    : mount("/dev/null", masked[i], NULL, MS_BIND, NULL);
        if (r < 0)
            return cdn_error_field(err, errno, "linux.maskedPaths", "linux.maskedPaths: mask %s: %m",
                                   masked[i]);
        if (!S_ISDIR(st.st_mode) &&
            (r = add_attrs(masked[i], MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, err)) < 0)
            return r;
    }
    return 0;
}

bool cdn_engine_wants(const struct cdn_fs_mount *m, size_t n, const char *type)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(m[i].type, type) == 0)
            return true;
    return false;
}

int cdn_engine_sysfs(void)
{
    _cleanup_close_ int fs = (int) syscall(SYS_fsopen, "sysfs", FSOPEN_CLOEXEC);
    if (fs < 0 || syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return -errno;
    int fd = (int) syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                           MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    return fd < 0 ? -errno : fd;
}

int cdn_engine_cgroup(const struct cdn_setup_args *a, struct cdn_error *err)
{
    for (size_t i = 0; i < a->n_fs_mounts; i++) {
        const struct cdn_fs_mount *m = &a->fs_mounts[i];
        if (strcmp(m->type, "cgroup") != 0 && strcmp(m->type, "cgroup2") != 0)
            continue;
        struct statfs fs;
        if (statfs(m->destination, &fs) < 0 || (unsigned long) fs.f_type == CGROUP2_SUPER_MAGIC)
            continue; /* no place for it, or there already */
        /* Only a cgroup v2 host: v1's hierarchies cannot be mounted anew in a user namespace. The
         * sandbox's cgroup namespace is rooted at its own cgroup, so that is all it sees. */
        if (a->cgroup) /* v1: setup joins it itself (container-internal.h) */
            continue;
        if (mount("cgroup2", m->destination, "cgroup2", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) <
            0)
            return cdn_error_field(err, errno, "mounts", "mounts[%u]: cgroup2 on %s: %m", m->index,
                                   m->destination);
    }
    return 0;
}
