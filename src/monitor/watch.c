/* inotify_add_watch(2) on behalf of a sandbox process (watch.h). Runs in the supervisor: cordond
 * or cordon run on the host, cordon-init in a VM guest, while the caller waits in the syscall.
 * Everything it reads of the caller (the path, its memory, its fds, its cwd) is the sandbox's:
 * hostile, and read once. */
#include "watch.h"
#include "shared/fd-util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <linux/stat.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* The path at addr in pid's memory: NUL-terminated, at most size-1 bytes (else -ENAMETOOLONG). */
static int read_path(int pid, uint64_t addr, char *buf, size_t size)
{
    size_t got = 0;
    while (got + 1 < size) {
        size_t page = 4096 - ((addr + got) & 4095), want = size - 1 - got < page ? size - 1 - got : page;
        struct iovec l = {buf + got, want}, r = {(void *) (uintptr_t) (addr + got), want};
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n <= 0)
            return -EFAULT;
        if (memchr(buf + got, 0, (size_t) n))
            return 0;
        got += (size_t) n;
    }
    return -ENAMETOOLONG;
}

/* The caller's fs uid and gid (the fourth of /proc/PID/status's Uid: and Gid:). */
static int fs_ids(int pid, struct cdn_watch *w)
{
    char p[64], buf[4096];
    (void) snprintf(p, sizeof p, "/proc/%d/status", pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        (void) close(fd);
    if (n <= 0)
        return -ENOENT;
    buf[n] = 0;
    const char *u = strstr(buf, "\nUid:"), *g = strstr(buf, "\nGid:");
    unsigned x[4], y[4];
    if (!u || !g || sscanf(u, "\nUid: %u %u %u %u", &x[0], &x[1], &x[2], &x[3]) != 4 ||
        sscanf(g, "\nGid: %u %u %u %u", &y[0], &y[1], &y[2], &y[3]) != 4)
        return -ENOENT;
    w->fsuid = x[3], w->fsgid = y[3];
    return 0;
}

static bool still_waiting(int listener, uint64_t id)
{
    return ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
}

/* The caller's path made absolute from its working directory, as its root sees it. */
static int absolute(int pid, const char *path, char *out, size_t size)
{
    if (path[0] == '/')
        return (size_t) snprintf(out, size, "%s", path) < size ? 0 : -ENAMETOOLONG;
    char link[64], cwd[4096];
    (void) snprintf(link, sizeof link, "/proc/%d/cwd", pid);
    ssize_t n = readlink(link, cwd, sizeof cwd - 1);
    if (n <= 0)
        return -ENOENT;
    cwd[n] = 0;
    return (size_t) snprintf(out, size, "%s/%s", cwd, path) < size ? 0 : -ENAMETOOLONG;
}

static int resolve(int pid, const char *path, uint32_t mask, struct cdn_watch *w)
{
    char abs[2200], p[64];
    int r = absolute(pid, path, abs, sizeof abs);
    if (r < 0)
        return r;
    (void) snprintf(p, sizeof p, "/proc/%d/root", pid);
    int root = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return -ENOENT;
    struct open_how how = {.flags = O_PATH | O_CLOEXEC | (mask & IN_DONT_FOLLOW ? O_NOFOLLOW : 0) |
                                    (mask & IN_ONLYDIR ? O_DIRECTORY : 0),
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    w->ofd = (int) syscall(SYS_openat2, root, abs, &how, sizeof how);
    r = w->ofd < 0 ? -errno : 0;
    (void) close(root);
    if (r < 0)
        return r;
    uint64_t mnt;
    if (cdn_mount_of(w->ofd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, &mnt, NULL) < 0)
        return -EOPNOTSUPP;
    w->mnt_id = mnt;
    (void) snprintf(p, sizeof p, "/proc/self/fd/%d", w->ofd);
    ssize_t n = readlink(p, w->path, sizeof w->path - 1);
    w->path[n > 0 ? n : 0] = 0;
    return 0;
}

int cdn_watch_open(int listener, uint64_t id, int pid, const uint64_t args[6], struct cdn_watch *w)
{
    *w = (struct cdn_watch){.ifd = -1, .ofd = -1, .mask = (uint32_t) args[2] & ~(uint32_t) IN_DONT_FOLLOW};
    int pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0)
        return -ENOENT;
    char path[1024];
    int r = 0;
    /* pid is the caller's only while its notification waits: asked once the pidfd pins it. */
    if (!still_waiting(listener, id))
        r = -ENOENT;
    else if ((r = read_path(pid, args[1], path, sizeof path)) == 0) {
        w->ifd = (int) syscall(SYS_pidfd_getfd, pidfd, (int) args[0], 0);
        char link[64], kind[64];
        (void) snprintf(link, sizeof link, "/proc/self/fd/%d", w->ifd);
        ssize_t n = w->ifd >= 0 ? readlink(link, kind, sizeof kind - 1) : -1;
        if (w->ifd < 0)
            r = -EBADF;
        else if (n <= 0 || (size_t) n != strlen("anon_inode:inotify") ||
                 memcmp(kind, "anon_inode:inotify", (size_t) n))
            r = -EINVAL; /* as the kernel says of an fd that is not an inotify instance */
        else if ((r = fs_ids(pid, w)) == 0)
            r = resolve(pid, path, (uint32_t) args[2], w);
        if (r == 0 && !still_waiting(listener, id)) /* what was read is the caller's */
            r = -ENOENT;
    }
    (void) close(pidfd);
    if (r < 0)
        cdn_watch_close(w);
    return r;
}

int cdn_watch_add(struct cdn_watch *w)
{
    char p[64];
    (void) snprintf(p, sizeof p, "/proc/self/fd/%d", w->ofd);
    int wd = inotify_add_watch(w->ifd, p, w->mask);
    return wd < 0 ? -errno : wd;
}

void cdn_watch_close(struct cdn_watch *w)
{
    if (w->ifd >= 0)
        (void) close(w->ifd);
    if (w->ofd >= 0)
        (void) close(w->ofd);
    w->ifd = w->ofd = -1;
}

int cdn_watch_answer(int listener, uint64_t id, int64_t val, int error, bool cont)
{
    struct seccomp_notif_sizes sz = {0};
    union {
        struct seccomp_notif_resp r;
        uint8_t raw[128];
    } resp;
    if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz) < 0 || sz.seccomp_notif_resp > sizeof resp)
        return -EOVERFLOW;
    memset(&resp, 0, sz.seccomp_notif_resp);
    resp.r.id = id;
    resp.r.val = cont ? 0 : val;
    resp.r.error = cont ? 0 : -error;
    resp.r.flags = cont ? SECCOMP_USER_NOTIF_FLAG_CONTINUE : 0;
    if (ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}
