#include "fd-util.h"

#include <linux/openat2.h>
#include <linux/stat.h> /* struct statx: musl (cordon-init, the lean CLI) has no statx() */
#include "macro.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int cdn_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t) n;
    }
    return 0;
}

ssize_t cdn_read_full(int fd, void *buf, size_t len)
{
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, p + got, len - got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return got == 0 ? 0 : -EPIPE;
        got += (size_t) n;
    }
    return (ssize_t) got;
}

int cdn_write_file_at(int dirfd, const char *path, const char *s)
{
    _cleanup_close_ int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    /* Kernel knobs want the value in a single write(). Some are slow and
     * interruptible (a memory limit below the usage reclaims first): a signal
     * in between (cordond's SIGCHLD) is EINTR, and the write is simply retried. */
    size_t len = strlen(s);
    ssize_t n;
    do
        n = write(fd, s, len);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    return (size_t) n == len ? 0 : -EIO;
}

ssize_t cdn_read_file_at(int dirfd, const char *path, char *buf, size_t size)
{
    _cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    while (got + 1 < size) {
        ssize_t n = read(fd, buf + got, size - 1 - got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            break;
        got += (size_t) n;
    }
    buf[got] = 0;
    return (ssize_t) got;
}

int cdn_mkdir_p(const char *path, mode_t mode)
{
    char tmp[4096];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof tmp)
        return -ENAMETOOLONG;
    memcpy(tmp, path, len + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(tmp, mode) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(tmp, mode) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

void cdn_read_cmdline(int pid, char *buf, size_t size)
{
    char path[64];
    buf[0] = 0;
    (void) snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
    ssize_t n = cdn_read_file_at(AT_FDCWD, path, buf, size);
    if (n <= 0) {
        buf[0] = 0;
        return;
    }
    for (ssize_t i = 0; i < n - 1; i++)
        if (!buf[i])
            buf[i] = ' ';
}

int cdn_run_wait(char *const argv[], bool out_to_err)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out_to_err)
        posix_spawn_file_actions_adddup2(&fa, 2, 1);
    pid_t pid;
    int r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (r != 0)
        return -r;
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -errno;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int cdn_mount_of(int dirfd, const char *path, int flags, uint64_t *id, bool *root)
{
    struct statx stx;
    if (syscall(SYS_statx, dirfd, path, flags, STATX_MNT_ID, &stx) < 0)
        return -errno;
    if (!(stx.stx_mask & STATX_MNT_ID))
        return -EOPNOTSUPP;
    *id = stx.stx_mnt_id;
    if (root)
        *root =
            (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
    return 0;
}

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

int cdn_openat2(int dirfd, const char *path, struct open_how *how)
{
    for (int tries = 0;; tries++) {
        int fd = (int) syscall(SYS_openat2, dirfd, path, how, sizeof *how);
        if (fd >= 0 || (errno != EAGAIN && errno != EINTR) || tries >= 64)
            return fd;
    }
}

union fds_cmsg {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int) * CDN_FDS_MAX)];
};

ssize_t cdn_send_fds(int sock, const void *data, size_t len, const int *fds, int n, int flags)
{
    if (n < 0 || n > CDN_FDS_MAX)
        return -EINVAL;
    struct iovec iov = {.iov_base = (void *) data, .iov_len = len};
    union fds_cmsg u = {0};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n > 0) {
        msg.msg_control = u.buf, msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t) n);
        struct cmsghdr *h = CMSG_FIRSTHDR(&msg);
        h->cmsg_level = SOL_SOCKET, h->cmsg_type = SCM_RIGHTS,
        h->cmsg_len = CMSG_LEN(sizeof(int) * (size_t) n);
        memcpy(CMSG_DATA(h), fds, sizeof(int) * (size_t) n);
    }
    ssize_t r = sendmsg(sock, &msg, flags);
    return r < 0 ? -errno : r;
}

ssize_t cdn_recv_fds(int sock, void *data, size_t len, int *fds, int max, int *ret_n)
{
    *ret_n = 0;
    struct iovec iov = {.iov_base = data, .iov_len = len};
    union fds_cmsg u;
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0)
        return n < 0 ? -errno : 0;
    int got[CDN_FDS_MAX], k = 0;
    struct cmsghdr *h = CMSG_FIRSTHDR(&msg);
    if (h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS && h->cmsg_len >= CMSG_LEN(0)) {
        k = (int) ((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        memcpy(got, CMSG_DATA(h), sizeof(int) * (size_t) k);
    }
    if ((msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) || k > max) {
        for (int i = 0; i < k; i++)
            (void) close(got[i]);
        return -EBADMSG;
    }
    memcpy(fds, got, sizeof(int) * (size_t) k);
    *ret_n = k;
    return n;
}

int cdn_send_byte_fd(int sock, char byte, int fd, int flags)
{
    ssize_t n = cdn_send_fd(sock, &byte, 1, fd, flags);
    return n == 1 ? 0 : n < 0 ? (int) n : -EIO;
}

int cdn_recv_byte_fd(int sock, char *byte, int *fd)
{
    ssize_t n = cdn_recv_fd(sock, byte, 1, fd);
    return n < 0 ? (int) n : n > 0;
}

ssize_t cdn_send_fd(int sock, const void *data, size_t len, int fd, int flags)
{
    return cdn_send_fds(sock, data, len, &fd, fd >= 0, flags);
}

ssize_t cdn_recv_fd(int sock, void *data, size_t len, int *fd)
{
    int n = 0;
    *fd = -1;
    return cdn_recv_fds(sock, data, len, fd, 1, &n);
}
