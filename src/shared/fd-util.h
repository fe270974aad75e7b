/* File-descriptor and small-file helpers. All return 0 / a count on success
 * and a negative errno on failure; EINTR is retried. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Write all of buf, retrying short writes. */
int cdn_write_all(int fd, const void *buf, size_t len);
/* Read exactly len bytes; -EPIPE if EOF comes first (0 bytes read: returns 0). */
ssize_t cdn_read_full(int fd, void *buf, size_t len);
/* Write a string to an existing file, e.g. a cgroup or /proc knob. dirfd may be AT_FDCWD. */
int cdn_write_file_at(int dirfd, const char *path, const char *s);
/* Read a whole small file into buf (NUL-terminated, truncated at size-1). Returns length. */
ssize_t cdn_read_file_at(int dirfd, const char *path, char *buf, size_t size);
/* mkdir -p with mode; existing directories are fine. */
int cdn_mkdir_p(const char *path, mode_t mode);
/* /proc/PID/cmdline with its NULs as spaces, NUL-terminated ("" if gone). */
void cdn_read_cmdline(int pid, char *buf, size_t size);
/* The id of the mount that path (relative to dirfd; "" with AT_EMPTY_PATH in flags: dirfd itself) is
 * on, by statx(STATX_MNT_ID), and, when root is not NULL, whether it is that mount's root. flags as
 * statx's (AT_SYMLINK_NOFOLLOW…). -EOPNOTSUPP: the kernel gives no mount id. */
int cdn_mount_of(int dirfd, const char *path, int flags, uint64_t *id, bool *root);
/* Run argv (found in PATH) and wait: its exit status (128+N if killed by signal N), or -errno if it
 * could not be started. out_to_err: its stdout goes to our stderr (it is not the caller's output). */
int cdn_run_wait(char *const argv[], bool out_to_err);
/* openat2(2), looked up again while it says EAGAIN: with RESOLVE_IN_ROOT or RESOLVE_BENEATH the kernel
 * gives that when any rename or mount on the host raced a ".." walk (seen under load with an image's
 * "../../etc/shadow" symlink). An fd, or -1 with errno set. `how` is struct open_how. */
struct open_how;
int cdn_openat2(int dirfd, const char *path, struct open_how *how);

/* One byte and, when fd >= 0, a copy of fd (SCM_RIGHTS) on a unix socket; flags: sendmsg's (add
 * MSG_NOSIGNAL). 0, or -errno. */
int cdn_send_byte_fd(int sock, char byte, int fd, int flags);
/* len bytes of data and, when fd >= 0, a copy of fd: as one sendmsg. The bytes sent, or -errno. */
ssize_t cdn_send_fd(int sock, const void *data, size_t len, int fd, int flags);
/* One byte and at most one fd (received CLOEXEC: *fd, else -1): 1; 0 at EOF; -errno (EAGAIN after
 * SO_RCVTIMEO). More than one fd, or ancillary data cut short: -EBADMSG, nothing kept open. */
int cdn_recv_byte_fd(int sock, char *byte, int *fd);
/* Up to len bytes of data and at most one fd (the counterpart of cdn_send_fd; the fd as above): the
 * bytes received, 0 at EOF, or -errno. */
ssize_t cdn_recv_fd(int sock, void *data, size_t len, int *fd);
/* The same with up to 16 fds, as one message: n of them from fds (send); at most max into fds,
 * *ret_n of them (receive; received CLOEXEC). A message or ancillary data cut short: -EBADMSG,
 * nothing kept open. */
#define CDN_FDS_MAX 16
ssize_t cdn_send_fds(int sock, const void *data, size_t len, const int *fds, int n, int flags);
ssize_t cdn_recv_fds(int sock, void *data, size_t len, int *fds, int max, int *ret_n);
