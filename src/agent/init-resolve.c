/* cordon-init: where a path of the files API leads, decided on what was opened.
 *
 * Runs in PID 1 of a sandbox (a VM guest's init or agent, the process tier's worker), inside its
 * confinement. The request is the operator's and trusted, also when it names a protected path
 * itself. The tree the path walks is the agent's: any component may be a symlink it planted —
 * into a protected path, /proc, a device, a FIFO — and it may swap one for a file between any two
 * looks (a flip-flop defeats every check made on a path before the open). So nothing is decided
 * on a path: it is opened O_PATH beneath the root (openat2, RESOLVE_IN_ROOT |
 * RESOLVE_NO_MAGICLINKS), first following no symlink at all and, only if it has one, following
 * them; what that fd reached is judged (its mount, its file system, its type), and the operation
 * then works on that very fd (a reopen through /proc/self/fd, or *at calls relative to it).
 *
 * The protected paths are mounts (each match bound read-only on itself, on every tier), so "a
 * protected path" is "on one of these mounts": the host says which (PROTECTED: the mounts its
 * fanotify guard marked), a VM guest's init knows its own (cdn_vm_protect). */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <linux/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "init.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

static uint64_t protected_mnt[CDN_PROTECTED_MAX];
static uint32_t n_protected;

void cdn_files_protected(const uint8_t *p, size_t len)
{
    static uint64_t ids[CDN_PROTECTED_MAX];
    uint32_t n;
    if (cdn_protected_decode(p, len, ids, &n) < 0) {
        cdn_agent_error(0, EBADMSG, "protected mounts");
        return;
    }
    cdn_files_protected_set(ids, n);
}

void cdn_files_protected_set(const uint64_t *ids, uint32_t n)
{
    n = n < CDN_PROTECTED_MAX ? n : CDN_PROTECTED_MAX;
    memmove(protected_mnt, ids, n * sizeof ids[0]);
    n_protected = n;
}

static int mount_id(int fd, uint64_t *ret)
{
    return cdn_mount_of(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, ret, NULL);
}

static bool is_protected(uint64_t mnt)
{
    for (uint32_t i = 0; i < n_protected; i++)
        if (protected_mnt[i] == mnt)
            return true;
    return false;
}

/* The kernel's own file systems: their files lie about their size (/proc/self/pagemap: 0 bytes,
 * then gigabytes), block, or act when written. Their contents are never the API's to move. */
static const char *kernel_fs(int fd)
{
    static const struct {
        uint32_t magic;
        const char *name;
    } fs[] = {
        {PROC_SUPER_MAGIC, "proc"},
        {SYSFS_MAGIC, "sysfs"},
        {DEBUGFS_MAGIC, "debugfs"},
        {TRACEFS_MAGIC, "tracefs"},
        {SECURITYFS_MAGIC, "securityfs"},
        {CGROUP_SUPER_MAGIC, "cgroup"},
        {CGROUP2_SUPER_MAGIC, "cgroup2"},
        {BPF_FS_MAGIC, "bpf"},
        {PSTOREFS_MAGIC, "pstore"},
        {EFIVARFS_MAGIC, "efivarfs"},
        {BINFMTFS_MAGIC, "binfmt_misc"},
        {DEVPTS_SUPER_MAGIC, "devpts"},
        {SELINUX_MAGIC, "selinuxfs"},
        {SMACK_MAGIC, "smackfs"},
        {NSFS_MAGIC, "nsfs"},
        {0x62656570, "configfs"},
        {0x65735543, "fusectl"},
        {0x19800202, "mqueue"},
    };
    struct statfs sf;
    if (fstatfs(fd, &sf) < 0)
        return "an unknown file system";
    for (size_t i = 0; i < ELEMENTSOF(fs); i++)
        if ((uint32_t) sf.f_type == fs[i].magic)
            return fs[i].name;
    return NULL;
}

static int openat2_retry(int dirfd, const char *path, struct open_how *how)
{
    int fd = cdn_openat2(dirfd, path, how);
    return fd < 0 ? -errno : fd;
}

int cdn_target_open(const char *path, int flags, struct file_target *ret)
{
    _cleanup_close_ int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return -errno;
    struct open_how how = {.flags = O_PATH | O_CLOEXEC | (uint64_t) flags,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS};
    struct file_target t = {.direct = true};
    _cleanup_close_ int fd = openat2_retry(root, path, &how);
    if (fd == -ELOOP) { /* a symlink on the way: now followed, and what it reaches judged */
        t.direct = false;
        how.resolve &= ~(uint64_t) RESOLVE_NO_SYMLINKS;
        fd = openat2_retry(root, path, &how);
    }
    if (fd < 0)
        return fd;
    int r = fstat(fd, &t.st) < 0 ? -errno : mount_id(fd, &t.mnt_id);
    if (r == -EOPNOTSUPP) /* no mount ids: every mount is taken for a protected one */
        t.mnt_unknown = true, r = 0;
    if (r < 0)
        return r;
    t.fd = TAKE_FD(fd);
    *ret = t;
    return 0;
}

void cdn_target_close(struct file_target *t)
{
    t->fd = safe_close(t->fd);
}

enum refusal cdn_target_check(const struct file_target *t, bool content, const char **ret_what)
{
    if (!t->direct && n_protected && (t->mnt_unknown || is_protected(t->mnt_id)))
        return REFUSE_PROTECTED;
    const char *fs = content ? kernel_fs(t->fd) : NULL;
    if (fs) {
        *ret_what = fs;
        return REFUSE_KERNEL_FS;
    }
    return REFUSE_NONE;
}

int cdn_target_reopen(const struct file_target *t, int flags)
{
    char p[64];
    (void) snprintf(p, sizeof p, "/proc/self/fd/%d", t->fd);
    _cleanup_close_ int fd = open(p, flags | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    struct stat st;
    struct statfs sf;
    /* The same file, not whatever /proc showed (it is ours, but it costs one fstat to be sure). An
     * open for writing copies an image file up on overlayfs, and a file of an image on another file
     * system than the upper layer (or a hard-linked one) then shows the upper file's device and inode
     * numbers: the same overlay dentry, reached through the same magic link. */
    if (fstat(fd, &st) < 0)
        return -ESTALE;
    if ((st.st_dev != t->st.st_dev || st.st_ino != t->st.st_ino) &&
        ((flags & O_ACCMODE) == O_RDONLY || fstatfs(fd, &sf) < 0 || sf.f_type != OVERLAYFS_SUPER_MAGIC))
        return -ESTALE;
    return TAKE_FD(fd);
}

void cdn_target_where(const struct file_target *t, char *buf, size_t size)
{
    char p[64];
    (void) snprintf(p, sizeof p, "/proc/self/fd/%d", t->fd);
    ssize_t n = readlink(p, buf, size - 1);
    buf[n > 0 ? (size_t) n : 0] = 0;
}
