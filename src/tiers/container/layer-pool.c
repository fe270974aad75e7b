/* SPDX-License-Identifier: see repository LICENSE */
/* The writable layer pool (cordond's writable_pool = btrfs, docs/disk.md): every container layer a
 * subvolume of one btrfs, its size capped by a simple quota (squota, Linux 6.7), instead of an ext4
 * of its own on a loop device.
 *
 * Why: a layer of its own is a superblock, a loop device and an ext4-rsv-conversion kernel thread per
 * sandbox, and the kernel walks all of them on each create (sget compares every ext4 superblock,
 * LOOP_CTL_GET_FREE every loop device, pivot_root every thread): costs that grow with the number of
 * live sandboxes (docs/performance.md). A subvolume is a tree in a shared superblock; making one and
 * its quota costs ~0.06 ms whatever the count.
 *
 * The pool is one sparse file of the state directory, "<state>/pool.btrfs", on a loop device, mounted
 * detached as the checkpoint store is (layer-store.c): nothing of it has a name in the host's mount
 * table. A layer is the subvolume named by its sandbox's id, its root chowned to the slot's root; the
 * setup child gets a detached bind of it (open_tree), as it gets an ext4 layer's mount. A subvolume
 * outlives its sandbox until cordond destroys it (cdn_layer_pool_drop, or at its next start the sweep
 * of those no sandbox owns); the btrfs cleaner frees its blocks and then its quota group.
 *
 * What differs for the sandbox: a full layer is EDQUOT ("Disk quota exceeded"), not ENOSPC, and df
 * shows the pool, not disk_mb (statfs knows nothing of quotas on btrfs). The sandbox must not make
 * subvolumes of its own, which its quota would not cover: seccomp refuses those ioctls
 * (seccomp-compile.c). The sandbox reaches its layer only through the overlay, which passes no btrfs
 * ioctl, or through binds of its directories, where seccomp holds. */
#include "container-internal.h"
#include "core/paths.h"
#include "shared/fd-util.h"
#include "tiers/tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <linux/mount.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA
#define BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA 4
#endif

/* The detached mount: while its fd is open, its anonymous mount namespace stays, which open_tree
 * needs to clone a subvolume out of it (a mount kept only by an fd of a file in it is not "mounted"
 * any more: EINVAL). */
static int pool_mnt = -1;
static int pool_dir = -1;        /* this cordond's directory of it */
static char pool_sysfs[80] = ""; /* /sys/fs/btrfs/<fsid>: its quota groups, as they are now */

/* A sandbox id as a subvolume's name: one plain path component. */
static bool name_ok(const char *id)
{
    size_t n = strlen(id);
    return n && n < BTRFS_SUBVOL_NAME_MAX && !strchr(id, '/') && strcmp(id, ".") && strcmp(id, "..");
}

int cdn_layer_pool_fd(void)
{
    return pool_dir;
}

/* The pool's file, made when missing, and the loop device bound to it (found again after a restart:
 * one superblock, never two of one image). */
static int pool_loop(uint64_t size, int *ret_nr, struct cdn_error *err)
{
    char path[4200];
    (void) snprintf(path, sizeof path, "%s/" CDN_LAYER_POOL_FILE, cdn_state_dir());
    _cleanup_close_ int file = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (file < 0 && errno == ENOENT) {
        char *argv[] = {"mkfs.btrfs", "-q", "-f", "-m", "single", "-L", "cordon-pool", "", NULL};
        int r = cdn_fs_image_make(path, cdn_fs_image_size(size, 256ULL << 20), argv, "btrfs-progs",
                                  "writable_pool", err);
        if (r < 0)
            return r;
        file = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    }
    struct stat st;
    if (file < 0 || fstat(file, &st) < 0)
        return cdn_error_field(err, errno, "writable_pool", "open %s: %m", path);
    if (!S_ISREG(st.st_mode))
        return cdn_error_field(err, EINVAL, "writable_pool", "%s is not a regular file", path);
    _cleanup_close_ int lock = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (lock < 0 || flock(lock, LOCK_EX) < 0)
        return cdn_error_field(err, errno, "writable_pool", "lock %s: %m", path);
    if ((*ret_nr = cdn_loop_of(&st)) >= 0)
        return -EBADF; /* bound already: the mount holds it */
    char name[64];
    (void) snprintf(name, sizeof name, "cordon-pool-%d", (int) getpid());
    return cdn_loop_attach(file, name, 0, ret_nr, err);
}

/* The pool's directory of the cordond whose sandbox directory is dir: named after its real path, which
 * stays what it is across restarts and reboots (an inode number of /run's tmpfs would not). */
static int owner_name(const char *dir, char out[64], struct cdn_error *err)
{
    char *real = realpath(dir, NULL);
    if (!real)
        return cdn_error_field(err, errno, "writable_pool", "the sandbox directory %s: %m", dir);
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const char *c = real; *c; c++)
        h = (h ^ (uint8_t) *c) * 1099511628211ULL;
    free(real);
    (void) snprintf(out, 64, "sandboxes-%016" PRIx64, h);
    return 0;
}

int cdn_layer_pool_open(uint64_t size, const char *sandbox_dir, struct cdn_error *err)
{
    char owner[64];
    if (pool_dir >= 0)
        return 0;
    int r = owner_name(sandbox_dir, owner, err);
    if (r < 0)
        return r;
    int nr = -1;
    _cleanup_close_ int loop = pool_loop(size, &nr, err);
    if (loop < 0 && loop != -EBADF)
        return loop;
    _cleanup_close_ int mnt = cdn_loop_mount(nr, "btrfs", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                                             "writable_pool", "the layer pool", err);
    if (mnt < 0)
        return mnt;
    if (mkdirat(mnt, owner, 0700) < 0 && errno != EEXIST)
        return cdn_error_field(err, errno, "writable_pool", "make %s in the layer pool: %m", owner);
    _cleanup_close_ int dir = openat(mnt, owner, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0)
        return cdn_error_field(err, errno, "writable_pool", "open %s in the layer pool: %m", owner);
    struct btrfs_ioctl_quota_ctl_args q = {.cmd = BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA};
    if (ioctl(dir, BTRFS_IOC_QUOTA_CTL, &q) < 0)
        return cdn_error_field(err, errno, "writable_pool",
                               "btrfs simple quotas, which cap each layer, are not there "
                               "(they need Linux 6.7): %m");
    struct btrfs_ioctl_fs_info_args fi = {0};
    if (ioctl(dir, BTRFS_IOC_FS_INFO, &fi) < 0)
        return cdn_error_field(err, errno, "writable_pool", "the layer pool's fsid: %m");
    const uint8_t *u = fi.fsid;
    (void) snprintf(pool_sysfs, sizeof pool_sysfs,
                    "/sys/fs/btrfs/%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                    u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                    u[14], u[15]);
    pool_mnt = TAKE_FD(mnt);
    pool_dir = TAKE_FD(dir);
    return 0;
}

static int destroy(const char *id)
{
    struct btrfs_ioctl_vol_args a = {0};
    (void) snprintf(a.name, sizeof a.name, "%s", id);
    return ioctl(pool_dir, BTRFS_IOC_SNAP_DESTROY, &a) < 0 ? -errno : 0;
}

int cdn_layer_pool_make(const struct cdn_sandbox *sb, struct cdn_error *err)
{
    if (!name_ok(sb->id))
        return cdn_error_field(err, EINVAL, "disk", "a layer of the pool for id '%s': not a name", sb->id);
    struct btrfs_ioctl_vol_args_v2 a = {0};
    (void) snprintf(a.name, sizeof a.name, "%s", sb->id);
    if (ioctl(pool_dir, BTRFS_IOC_SUBVOL_CREATE_V2, &a) < 0)
        return cdn_error_field(err, errno, "disk", "make the writable layer (a subvolume of the pool): %m");
    _cleanup_close_ int sub = openat(pool_dir, sb->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct btrfs_ioctl_qgroup_limit_args lim = {
        .lim = {.flags = BTRFS_QGROUP_LIMIT_MAX_EXCL, .max_excl = sb->spec->limits.disk_mb << 20}};
    const char *step = "open";
    int mnt = -1;
    if (sub >= 0 && (step = "cap", ioctl(sub, BTRFS_IOC_QGROUP_LIMIT, &lim) == 0) &&
        (step = "chown", fchown(sub, sb->uid_base, sb->uid_base) == 0) &&
        (step = "bind",
         (mnt = (int) syscall(SYS_open_tree, pool_dir, sb->id, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)) >= 0))
        return mnt;
    int e = errno;
    (void) destroy(sb->id);
    return cdn_error_field(err, e, "disk", "%s the writable layer (a subvolume of the pool): %s", step,
                           strerror(e));
}

void cdn_layer_pool_drop(const char *id)
{
    if (pool_dir >= 0 && name_ok(id))
        (void) destroy(id);
}

void cdn_layer_pool_sweep(bool (*live)(const char *id))
{
    if (pool_dir < 0)
        return;
    _cleanup_close_ int fd = openat(pool_dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d)
        return;
    fd = -1;
    for (struct dirent *de; (de = readdir(d));)
        if (de->d_type == DT_DIR && name_ok(de->d_name) && !live(de->d_name))
            (void) destroy(de->d_name);
    closedir(d);
}

/* A number of the quota group's directory in sysfs (qgroups/0_<tree>/<name>), or -errno. */
static int64_t qgroup_number(const char *dir, const char *name)
{
    char path[300], buf[32];
    (void) snprintf(path, sizeof path, "%s/%s", dir, name);
    ssize_t n = cdn_read_file_at(AT_FDCWD, path, buf, sizeof buf - 1);
    if (n <= 0)
        return n < 0 ? (int64_t) n : -EIO;
    buf[n] = 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    return errno || end == buf || v > INT64_MAX ? -EIO : (int64_t) v;
}

int cdn_layer_pool_usage(const char *id, bool reserved_too, struct cdn_pool_usage *ret)
{
    if (pool_dir < 0 || !name_ok(id))
        return -ENOENT;
    _cleanup_close_ int sub = openat(pool_dir, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0)
        return -errno;
    struct btrfs_ioctl_ino_lookup_args il = {.objectid = BTRFS_FIRST_FREE_OBJECTID};
    if (ioctl(sub, BTRFS_IOC_INO_LOOKUP, &il) < 0)
        return -errno;
    char dir[200];
    (void) snprintf(dir, sizeof dir, "%s/qgroups/0_%llu", pool_sysfs, (unsigned long long) il.treeid);
    static const char *const parts[] = {"exclusive", "max_exclusive", "rsv_data", "rsv_meta_pertrans",
                                        "rsv_meta_prealloc"};
    int64_t v[ELEMENTSOF(parts)] = {0};
    for (size_t i = 0; i < (reserved_too ? ELEMENTSOF(parts) : 2); i++)
        if ((v[i] = qgroup_number(dir, parts[i])) < 0)
            return (int) v[i];
    uint64_t reserved = (uint64_t) (v[2] + v[3] + v[4]);
    *ret = (struct cdn_pool_usage){.charged = (uint64_t) v[0], .cap = (uint64_t) v[1]};
    ret->used = ret->charged + reserved > ret->cap ? ret->cap : ret->charged + reserved;
    return 0;
}
