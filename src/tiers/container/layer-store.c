/* The checkpoint store (docs/trajectories.md): an xfs with reflinks, in one sparse file of the
 * state directory, "<state>/store.xfs", mounted by cordond on a loop device of its own and never
 * attached anywhere (a detached mount: nothing of it has a name in the host's mount table, and a
 * sandbox never sees it). It holds
 *   layers/<sandbox id>      the writable layer image of each sandbox made with "checkpoints": true
 *                            (writable.c: ext4 on a loop device over this file, as any layer);
 *   checkpoints/<ck>.img     a checkpoint: a reflink copy (FICLONE) of a layer image, taken while
 *                            the layer's ext4 is frozen, so only what changes later costs blocks;
 *   checkpoints/<ck>.json    what it is of (cordond's daemon/checkpoint.c).
 * A reflink copy is a file of its own that shares the unchanged extents: every checkpoint is one
 * whole image, never a stack of deltas, so a chain of any length restores in one clone.
 *
 * Why xfs in a file: the host's state filesystem (ext4 here) has no reflinks, and copying a layer's
 * data is what a checkpoint must not cost. The loop device is buffered: direct I/O measured no faster
 * (bench/run-checkpoint), and buffered, a checkpoint's writes land in the host's page cache instead of
 * waiting on its disk.
 *
 * The store outlives cordond while sandboxes use its layers (their loop devices hold the files,
 * the files the mount): a restarted cordond finds the loop device still bound to store.xfs and
 * mounts that one again, which gives it the same xfs (one superblock a block device); it never
 * binds a second loop device to a store in use, which would be two file systems on one image. */
#include "container-internal.h"
#include "core/paths.h"
#include "shared/fd-util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <linux/mount.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#define STORE_LOG "64m" /* xfs's log; mkfs zeroes it, so its size is what a new store costs */

static int store_fd = -1;
static uint64_t store_size;

void cdn_layer_store_size(uint64_t bytes)
{
    store_size = bytes;
}

int cdn_loop_of(const struct stat *st)
{
    DIR *d = opendir("/sys/block");
    if (!d)
        return -1;
    int found = -1;
    struct dirent *de;
    while (found < 0 && (de = readdir(d))) {
        int nr;
        char tail;
        if (sscanf(de->d_name, "loop%d%c", &nr, &tail) != 1)
            continue;
        found = cdn_loop_backs(nr, st) ? nr : -1;
    }
    closedir(d);
    return found;
}

bool cdn_loop_backs(int nr, const struct stat *st)
{
    char dev[32];
    (void) snprintf(dev, sizeof dev, "/dev/loop%d", nr);
    _cleanup_close_ int fd = open(dev, O_RDONLY | O_CLOEXEC);
    struct loop_info64 info;
    return fd >= 0 && ioctl(fd, LOOP_GET_STATUS64, &info) == 0 && info.lo_inode == st->st_ino &&
           info.lo_device == st->st_dev;
}

uint64_t cdn_fs_image_size(uint64_t want, uint64_t least)
{
    /* As large as the host's file system (sparse: blocks are the host's as they are written), at
     * least 1 GiB. A full host disk is the operator's to plan, as for the layers (docs/disk.md). */
    struct statfs host;
    uint64_t size =
        statfs(cdn_state_dir(), &host) == 0 ? (uint64_t) host.f_blocks * (uint64_t) host.f_bsize : 0;
    if (want)
        return want < least ? least : want;
    return size < (1ULL << 30) ? 1ULL << 30 : size;
}

int cdn_fs_image_make(const char *path, uint64_t size, char **argv, const char *pkg, const char *field,
                      struct cdn_error *err)
{
    char tmp[4300];
    (void) snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int) getpid());
    _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || ftruncate(fd, (off_t) size) < 0) {
        int e = errno;
        (void) unlink(tmp);
        return cdn_error_field(err, e, field, "make %s: %s", tmp, strerror(e));
    }
    size_t n = 0;
    while (argv[n + 1])
        n++;
    argv[n] = tmp;
    int r = cdn_run_wait(argv, true);
    if (r != 0) {
        (void) unlink(tmp);
        return r < 0 ? cdn_error_field(err, -r, field, "run %s (Debian's %s) for %s: %s", argv[0], pkg, path,
                                       strerror(-r))
                     : cdn_error_field(err, EIO, field, "%s of %s failed (exit %d)", argv[0], path, r);
    }
    if (fsync(fd) < 0 || rename(tmp, path) < 0) {
        int e = errno;
        (void) unlink(tmp);
        return cdn_error_field(err, e, field, "keep %s: %s", path, strerror(e));
    }
    return 0;
}

static int make_image(const char *path, struct cdn_error *err)
{
    /* "": the image's path, filled in by cdn_fs_image_make */
    char *argv[] = {"mkfs.xfs",        "-q", "-f",           "-m", "reflink=1", "-l",
                    "size=" STORE_LOG, "-L", "cordon-store", "",   NULL};
    return cdn_fs_image_make(path, cdn_fs_image_size(store_size, 300ULL << 20), argv, "xfsprogs",
                             "checkpoints", err);
}

int cdn_loop_mount(int nr, const char *fstype, unsigned attrs, const char *field, const char *what,
                   struct cdn_error *err)
{
    char dev[32];
    (void) snprintf(dev, sizeof dev, "/dev/loop%d", nr);
    _cleanup_close_ int fs = (int) syscall(SYS_fsopen, fstype, FSOPEN_CLOEXEC);
    if (fs < 0)
        return cdn_error_field(err, errno, field, "fsopen %s: %m", fstype);
    if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
        syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return cdn_error_field(err, errno, field, "mount %s (%s on %s): %m", what, fstype, dev);
    int mnt = (int) syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, attrs);
    if (mnt < 0)
        return cdn_error_field(err, errno, field, "fsmount %s: %m", what);
    return mnt;
}

int cdn_layer_store(struct cdn_error *err)
{
    if (store_fd >= 0)
        return store_fd;
    char path[4200];
    (void) snprintf(path, sizeof path, "%s/store.xfs", cdn_state_dir());
    int r;
    _cleanup_close_ int file = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (file < 0 && errno == ENOENT && (r = make_image(path, err)) < 0)
        return r;
    if (file < 0 && (file = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)) < 0)
        return cdn_error_field(err, errno, "checkpoints", "open %s: %m", path);
    struct stat st;
    if (fstat(file, &st) < 0 || !S_ISREG(st.st_mode))
        return cdn_error_field(err, EINVAL, "checkpoints", "%s is not a regular file", path);
    /* One maker of loop devices for the store at a time (two cordonds of one state directory): a
     * lock of an open file of its own, not of `file`, which the loop device keeps open. */
    _cleanup_close_ int lock = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (lock < 0 || flock(lock, LOCK_EX) < 0)
        return cdn_error_field(err, errno, "checkpoints", "lock %s: %m", path);
    _cleanup_close_ int loop = -EBADF;
    int nr = cdn_loop_of(&st);
    if (nr < 0) {
        char name[64];
        (void) snprintf(name, sizeof name, "cordon-store-%d", (int) getpid());
        if ((loop = cdn_loop_attach(file, name, 0, &nr, err)) < 0)
            return loop;
    }
    int mnt = cdn_loop_mount(nr, "xfs", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                             "checkpoints", "the checkpoint store", err);
    if (mnt < 0)
        return mnt;
    /* A metadata write that fails (the host's disk full under the store) shuts the store down at once:
     * its layers then fail with I/O errors, where xfs's default retries for ever would hang every
     * writer, cordond's own clones too. */
    static const char *const knobs[] = {"ENOSPC", "EIO", "default"};
    for (size_t i = 0; i < ELEMENTSOF(knobs); i++) {
        char knob[128];
        (void) snprintf(knob, sizeof knob, "/sys/fs/xfs/loop%d/error/metadata/%s/max_retries", nr, knobs[i]);
        (void) cdn_write_file_at(AT_FDCWD, knob, "0");
    }
    static const char *const dirs[] = {"layers", "checkpoints"};
    for (size_t i = 0; i < ELEMENTSOF(dirs); i++)
        if (mkdirat(mnt, dirs[i], 0700) < 0 && errno != EEXIST) {
            int e = errno;
            (void) close(mnt);
            return cdn_error_field(err, e, "checkpoints", "mkdir %s in the checkpoint store: %s", dirs[i],
                                   strerror(e));
        }
    store_fd = mnt;
    return store_fd;
}

int cdn_layer_store_fd(void)
{
    return store_fd;
}
