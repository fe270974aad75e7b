/*
 * Device probes: raw memory, I/O ports, the hypervisor, the host's disks and device nodes made with mknod;
 * plus the TIOCSTI terminal-injection probe. Device nodes are opened and closed, never read or written; nodes
 * made with mknod live in a scratch directory and are unlinked at once.
 */
#include "probe.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

/* no node (ENOENT), permissions or the device cgroup (EACCES/EPERM), no driver behind the node (ENXIO/ENODEV)
 */
#define DEV_DENIALS ENOENT, EACCES, EPERM, ENXIO, ENODEV

/* dev_mem, dev_kmem, dev_port, dev_kvm: contained iff the open fails with ENOENT/EACCES/EPERM/ENXIO/ENODEV */
PROBE_FN(dev_mem)
{
    PROBE_JUDGE_OPEN(res, "/dev/mem", O_RDONLY, DEV_DENIALS);
}

PROBE_FN(dev_kmem)
{
    PROBE_JUDGE_OPEN(res, "/dev/kmem", O_RDONLY, DEV_DENIALS);
}

PROBE_FN(dev_port)
{
    PROBE_JUDGE_OPEN(res, "/dev/port", O_RDONLY, DEV_DENIALS);
}

PROBE_FN(dev_kvm)
{
    PROBE_JUDGE_OPEN(res, "/dev/kvm", O_RDWR, DEV_DENIALS);
}

/* true when path is a block device node (counted in *seen) that opened read-only */
static bool block_opens(const char *path, unsigned *seen, int *ret_err)
{
    struct stat st;
    int fd;

    *ret_err = 0;
    if (lstat(path, &st) < 0 || !S_ISBLK(st.st_mode))
        return false;
    (*seen)++;
    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        *ret_err = errno;
        return false;
    }
    (void) close(fd);
    return true;
}

/*
 * Every block device node directly in /dev (vda, sda, nvme0n1, loop0, ...), opened read-only and closed.
 * contained iff none opens: no node at all, or each fails with EACCES/EPERM/ENXIO/ENODEV/ENOMEDIUM.
 */
PROBE_FN(dev_block)
{
    DIR *d = opendir("/dev");
    struct dirent *de;
    unsigned seen = 0;

    if (!d) {
        probe_contained(res, "/dev:%s", probe_errname(errno));
        return;
    }
    while ((de = readdir(d))) {
        char path[PATH_MAX];
        int err;

        (void) snprintf(path, sizeof(path), "/dev/%s", de->d_name);
        if (block_opens(path, &seen, &err))
            probe_escaped(res, "%s:opened", path);
        else if (err && !PROBE_ERRNO_IN(err, EACCES, EPERM, ENXIO, ENODEV, ENOMEDIUM, ENOENT))
            probe_escaped(res, "%s:%s(reached-kernel)", path, probe_errname(err));
    }
    (void) closedir(d);
    if (res->verdict == PROBE_CONTAINED)
        probe_contained(res, "%u-block-nodes,none-opened", seen);
}

/*
 * mknod in a scratch directory, unlinked at once. contained iff EPERM (no CAP_MKNOD in the initial user
 * namespace), or EACCES/EROFS, or no writable directory at all (then no node can be made anywhere).
 */
static void judge_mknod(const struct probe_ctx *ctx, struct probe_result *res, mode_t type, dev_t dev)
{
    char dir[PATH_MAX], node[PATH_MAX + 8], what[48];
    int r, err;

    if (probe_scratch_make(ctx, dir, sizeof(dir)) < 0) {
        probe_contained(res, "no-writable-dir");
        return;
    }
    (void) snprintf(node, sizeof(node), "%s/node", dir);
    (void) snprintf(what, sizeof(what), "%s(%u:%u)", S_ISBLK(type) ? "blk" : "chr", major(dev), minor(dev));
    r = mknod(node, type | 0600, dev);
    err = errno;
    PROBE_JUDGE(res, what, r, err, EPERM, EACCES, EROFS);
    probe_scratch_remove(dir);
}

/* the numbers of /dev/mem */
PROBE_FN(mknod_char)
{
    judge_mknod(ctx, res, S_IFCHR, makedev(1, 1));
}

/* The block device holding our own binary or root, i.e. the host's disk when those are host bind mounts. */
static dev_t host_disk(void)
{
    static const char *const paths[] = {"/proc/self/exe", "/", "/usr"};
    struct stat st;

    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (stat(paths[i], &st) == 0 && major(st.st_dev) != 0)
            return st.st_dev;
    return makedev(8, 0);
}

PROBE_FN(mknod_block)
{
    judge_mknod(ctx, res, S_IFBLK, host_disk());
}

/*
 * TIOCSTI pushes bytes into a terminal's input queue; on an inherited terminal that types commands into the
 * user's shell. The real stdin is never touched: a fresh pty becomes our controlling terminal (the runner put
 * us in a new session) and gets one byte. contained iff no pty can be made, or TIOCSTI fails with
 * EPERM/EIO/EACCES (seccomp, or dev.tty.legacy_tiocsti=0).
 */
PROBE_FN(tiocsti_pty)
{
    _cleanup_close_ int master = -EBADF;
    _cleanup_close_ int slave = -EBADF;
    char name[64];
    char c = '#';
    int r, err;

    /* We are the session leader: closing the pty at the end hangs it up and sends us SIGHUP. */
    (void) signal(SIGHUP, SIG_IGN);
    master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) {
        err = errno;
        PROBE_JUDGE(res, "/dev/ptmx", -1, err, DEV_DENIALS);
        return;
    }
    if (grantpt(master) < 0 || unlockpt(master) < 0 || ptsname_r(master, name, sizeof(name)) != 0) {
        probe_contained(res, "pty-setup:%s", probe_errname(errno));
        return;
    }
    slave = open(name, O_RDWR | O_CLOEXEC);
    if (slave < 0) {
        probe_contained(res, "%s:%s", name, probe_errname(errno));
        return;
    }
    (void) ioctl(slave, TIOCSCTTY, 0);
    r = ioctl(slave, TIOCSTI, &c);
    err = errno;
    PROBE_JUDGE(res, "TIOCSTI", r, err, EPERM, EIO, EACCES);
}

const struct probe_def probe_defs_dev[] = {
    PROBE_ENTRY("devices", dev_mem),
    PROBE_ENTRY("devices", dev_kmem),
    PROBE_ENTRY("devices", dev_port),
    PROBE_ENTRY("devices", dev_kvm),
    PROBE_ENTRY("devices", dev_block),
    PROBE_ENTRY("devices", mknod_char),
    PROBE_ENTRY("devices", mknod_block),
    PROBE_ENTRY("tty", tiocsti_pty),
    {0},
};
