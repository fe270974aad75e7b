/*
 * Mount and chroot probes: changing the mount table or the root directory is the shortest way from a sandbox
 * to host files. Every mount that succeeds is made on a fresh scratch directory and detached at once; calls
 * that could change the host if allowed (pivot_root, umount of a mask, move_mount) are given arguments the
 * kernel rejects right after its permission check, so on the host they fail with EINVAL/ENOENT
 * ("reached-kernel", still escaped) and change nothing.
 */
#include "probe.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>

/* The kernel reports it (include/linux/statfs.h) but glibc 2.36 has no name for it. */
#ifndef ST_NOSYMFOLLOW
#define ST_NOSYMFOLLOW 0x2000
#endif

#define NONEXISTENT_A "/nonexistent-cordon-probe/a"
#define NONEXISTENT_B "/nonexistent-cordon-probe/b"

/* An existing directory to mount on when no scratch directory can be created (read-only sandbox root). */
static const char *existing_dir(void)
{
    static const char *const dirs[] = {"/mnt", "/tmp", "/media", "/srv", "/opt", "/home"};
    struct stat st;

    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
        if (lstat(dirs[i], &st) == 0 && S_ISDIR(st.st_mode))
            return dirs[i];
    return NULL;
}

static void umount_now(struct probe_result *res, const char *target)
{
    if (umount2(target, MNT_DETACH) < 0)
        probe_escaped(res, "umount:%s", probe_errname(errno));
}

/*
 * mount(2) on a scratch directory, detached at once if it worked. Contained iff EPERM/EACCES: may_mount() is
 * the first check in path_mount(), so any other errno (ENODEV, EINVAL...) means the capability check was
 * passed.
 */
static void judge_mount(const struct probe_ctx *ctx, struct probe_result *res, const char *src,
                        const char *fstype, unsigned long flags, const char *data)
{
    char dir[PATH_MAX];
    bool scratch = probe_scratch_make(ctx, dir, sizeof(dir)) == 0;
    const char *target = scratch ? dir : existing_dir();
    int r, err;

    if (!target) {
        probe_untested(res, "no-mount-target");
        return;
    }
    r = mount(src, target, fstype, flags, data);
    err = errno;
    PROBE_JUDGE(res, fstype ? fstype : "bind", r, err, EPERM, EACCES);
    if (r == 0)
        umount_now(res, target);
    if (scratch)
        probe_scratch_remove(dir);
}

/* contained iff EPERM/EACCES */
PROBE_FN(mount_tmpfs)
{
    judge_mount(ctx, res, "tmpfs", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m");
}

/* A non-recursive bind of / onto a scratch dir. contained iff EPERM/EACCES */
PROBE_FN(mount_bind)
{
    judge_mount(ctx, res, "/", NULL, MS_BIND, NULL);
}

/* A fresh procfs instance would show /proc without the sandbox's masks. contained iff EPERM/EACCES */
PROBE_FN(mount_procfs)
{
    judge_mount(ctx, res, "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
}

/* statvfs flags to the MS_* flags a bind remount must repeat to keep them. */
static unsigned long mount_flags_of(const struct statvfs *sv)
{
    static const struct {
        unsigned long st, ms;
    } map[] = {
        {ST_RDONLY, MS_RDONLY},     {ST_NOSUID, MS_NOSUID},           {ST_NODEV, MS_NODEV},
        {ST_NOEXEC, MS_NOEXEC},     {ST_NOATIME, MS_NOATIME},         {ST_NODIRATIME, MS_NODIRATIME},
        {ST_RELATIME, MS_RELATIME}, {ST_NOSYMFOLLOW, MS_NOSYMFOLLOW},
    };
    unsigned long ms = 0;

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (sv->f_flag & map[i].st)
            ms |= map[i].ms;
    return ms;
}

/*
 * Bind-remount path read-write keeping every other mount flag. If the kernel allows it on a mount that was
 * read-only, the original flags are put back at once. contained iff EPERM/EACCES (on the host /usr is usually
 * no mount point: EINVAL after the capability check, escaped).
 */
static void judge_remount_rw(struct probe_result *res, const char *path)
{
    struct statvfs sv;
    unsigned long flags;
    int r, err;

    if (statvfs(path, &sv) < 0) {
        err = errno;
        PROBE_JUDGE(res, path, -1, err, ENOENT, EACCES, EPERM);
        return;
    }
    flags = mount_flags_of(&sv);
    r = mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | (flags & ~MS_RDONLY), NULL);
    err = errno;
    PROBE_JUDGE(res, path, r, err, EPERM, EACCES);
    if (r == 0 && (flags & MS_RDONLY))
        if (mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | flags, NULL) < 0)
            probe_escaped(res, "restore-ro:%s", probe_errname(errno));
}

PROBE_FN(mount_remount_root_rw)
{
    judge_remount_rw(res, "/");
}

PROBE_FN(mount_remount_usr_rw)
{
    judge_remount_rw(res, "/usr");
}

/* New mount API: an fs context for tmpfs. contained iff EPERM/EACCES/ENOSYS */
PROBE_FN(mount_fsopen)
{
    long fd = syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
    int err = errno;

    PROBE_JUDGE(res, "fsopen", fd, err, EPERM, EACCES, ENOSYS);
    if (fd >= 0)
        (void) close((int) fd);
}

/* A reconfiguration context for / (never committed). contained iff EPERM/EACCES/ENOSYS */
PROBE_FN(mount_fspick)
{
    long fd = syscall(SYS_fspick, AT_FDCWD, "/", FSPICK_CLOEXEC);
    int err = errno;

    PROBE_JUDGE(res, "fspick", fd, err, EPERM, EACCES, ENOSYS);
    if (fd >= 0)
        (void) close((int) fd);
}

/* A detached clone of / (freed on close); without OPEN_TREE_CLONE it would be a plain O_PATH open. */
PROBE_FN(mount_open_tree)
{
    long fd = syscall(SYS_open_tree, AT_FDCWD, "/", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    int err = errno;

    PROBE_JUDGE(res, "open_tree", fd, err, EPERM, EACCES, ENOSYS);
    if (fd >= 0)
        (void) close((int) fd);
}

/* move_mount checks may_mount() before looking at its (nonexistent) paths. contained iff EPERM/EACCES/ENOSYS
 */
PROBE_FN(mount_move_mount)
{
    long r = syscall(SYS_move_mount, AT_FDCWD, NONEXISTENT_A, AT_FDCWD, NONEXISTENT_B, 0);
    int err = errno;

    PROBE_JUDGE(res, "move_mount", r, err, EPERM, EACCES, ENOSYS);
}

/*
 * Unmounting a mask would uncover the real /proc file. MNT_EXPIRE together with MNT_DETACH is refused by
 * do_umount() with EINVAL after every permission check, so this never unmounts anything, even as host root.
 * Per path: contained iff EPERM/EACCES, or ENOENT (nothing there); EINVAL means can_umount() let us through.
 */
PROBE_FN(mount_umount_proc_masks)
{
    static const char *const masks[] = {
        "/proc/kcore",         "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
        "/proc/latency_stats", "/proc/acpi", "/proc/scsi",       "/proc/sys",
        "/proc/sysrq-trigger", "/proc/irq",  "/proc/bus",        "/sys/firmware",
    };
    unsigned denied = 0;

    for (size_t i = 0; i < sizeof(masks) / sizeof(masks[0]); i++) {
        int r = umount2(masks[i], MNT_EXPIRE | MNT_DETACH | UMOUNT_NOFOLLOW);
        int err = errno;

        if (r < 0 && PROBE_ERRNO_IN(err, EPERM, EACCES, ENOENT))
            denied++;
        else
            PROBE_JUDGE(res, masks[i], r, err, EPERM, EACCES, ENOENT);
    }
    if (res->verdict == PROBE_CONTAINED)
        probe_contained(res, "%u-paths-denied", denied);
}

/* Grandchild exit codes beyond errno values. */
#define CHROOT_ALLOWED   200
#define CHROOT_BROKE_OUT 201

/* Runs in a throw-away grandchild: chroot(jail), climb out with chdir(".."), chroot(".") and compare roots.
 */
static _Noreturn void chroot_attempt(const char *jail, const struct stat *orig_root, bool real_jail)
{
    struct stat st;

    if (chroot(jail) < 0)
        _exit(errno);
    for (int i = 0; i < 64; i++)
        if (chdir("..") < 0)
            break;
    if (chroot(".") < 0)
        _exit(CHROOT_ALLOWED);
    if (real_jail && stat("/", &st) == 0 && st.st_dev == orig_root->st_dev && st.st_ino == orig_root->st_ino)
        _exit(CHROOT_BROKE_OUT);
    _exit(CHROOT_ALLOWED);
}

/* contained iff chroot() fails with EPERM (no CAP_SYS_CHROOT) or EACCES */
PROBE_FN(chroot_escape)
{
    char dir[PATH_MAX], jail[PATH_MAX + 8];
    bool scratch = probe_scratch_make(ctx, dir, sizeof(dir)) == 0;
    struct stat root;
    int status = 0;
    pid_t pid;

    (void) snprintf(jail, sizeof(jail), "%s/jail", dir);
    if (!scratch || mkdir(jail, 0700) < 0)
        (void) snprintf(jail, sizeof(jail), "/");
    if (stat("/", &root) < 0 || (pid = fork()) < 0) {
        probe_untested(res, "fork-or-stat");
    } else {
        if (pid == 0)
            chroot_attempt(jail, &root, strcmp(jail, "/") != 0);
        (void) waitpid(pid, &status, 0);
        if (!WIFEXITED(status))
            probe_untested(res, "grandchild-died");
        else if (WEXITSTATUS(status) == CHROOT_BROKE_OUT)
            probe_escaped(res, "chroot-allowed:broke-out-to-original-root");
        else if (WEXITSTATUS(status) == CHROOT_ALLOWED)
            probe_escaped(res, "chroot-allowed");
        else
            PROBE_JUDGE(res, "chroot", -1, WEXITSTATUS(status), EPERM, EACCES);
    }
    if (scratch)
        probe_scratch_remove(dir);
}

/*
 * pivot_root with a put_old that does not exist: may_mount() comes first, then the path lookups fail with
 * ENOENT, so even as host root nothing is pivoted. contained iff EPERM/EACCES
 */
PROBE_FN(chroot_pivot_root)
{
    char dir[PATH_MAX];
    bool scratch = probe_scratch_make(ctx, dir, sizeof(dir)) == 0;
    const char *new_root = scratch ? dir : existing_dir();
    long r;
    int err;

    if (!new_root)
        new_root = "/proc/self";
    r = syscall(SYS_pivot_root, new_root, NONEXISTENT_B);
    err = errno;
    PROBE_JUDGE(res, "pivot_root", r, err, EPERM, EACCES);
    if (scratch)
        probe_scratch_remove(dir);
}

const struct probe_def probe_defs_mount[] = {
    PROBE_ENTRY("mount", mount_tmpfs),
    PROBE_ENTRY("mount", mount_bind),
    PROBE_ENTRY("mount", mount_procfs),
    PROBE_ENTRY("mount", mount_remount_root_rw),
    PROBE_ENTRY("mount", mount_remount_usr_rw),
    PROBE_ENTRY("mount", mount_fsopen),
    PROBE_ENTRY("mount", mount_fspick),
    PROBE_ENTRY("mount", mount_open_tree),
    PROBE_ENTRY("mount", mount_move_mount),
    PROBE_ENTRY("mount", mount_umount_proc_masks),
    PROBE_ENTRY("chroot", chroot_escape),
    PROBE_ENTRY("chroot", chroot_pivot_root),
    {0},
};
