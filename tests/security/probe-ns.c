/*
 * Namespace and process probes. New namespaces hand a sandboxed uid 0 a fresh set of capabilities (the first
 * step of most container breakouts); joining pid 1's namespaces, tracing or reading other processes, or
 * seeing host pids crosses the pid boundary. Everything here runs in the per-probe child, so a successful
 * unshare/setns changes nothing but that child. Targets equal to the runner itself are skipped: attacking
 * ourselves is not an escape.
 */
#include "probe.h"

#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>

/* capability or seccomp (EPERM, EACCES), a namespace count limit of 0 (ENOSPC), nesting too deep (EUSERS) */
#define NS_DENIALS EPERM, EACCES, ENOSPC, EUSERS

static void judge_unshare(struct probe_result *res, int flag, const char *what)
{
    int r = unshare(flag);
    int err = errno;

    PROBE_JUDGE(res, what, r, err, NS_DENIALS);
}

/* unshare_*: contained iff EPERM/EACCES/ENOSPC/EUSERS */
PROBE_FN(unshare_user)
{
    judge_unshare(res, CLONE_NEWUSER, "user");
}

PROBE_FN(unshare_mnt)
{
    judge_unshare(res, CLONE_NEWNS, "mnt");
}

PROBE_FN(unshare_net)
{
    judge_unshare(res, CLONE_NEWNET, "net");
}

PROBE_FN(unshare_pid)
{
    judge_unshare(res, CLONE_NEWPID, "pid");
}

PROBE_FN(unshare_cgroup)
{
    judge_unshare(res, CLONE_NEWCGROUP, "cgroup");
}

static bool same_ns(int fd, const char *type)
{
    char own[64];
    struct stat a, b;

    (void) snprintf(own, sizeof(own), "/proc/self/ns/%s", type);
    return fstat(fd, &a) == 0 && stat(own, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/*
 * setns into each of pid 1's namespaces. Per namespace: contained iff /proc/1/ns/X cannot be opened
 * (EACCES/EPERM/ENOENT), setns fails with EPERM/EACCES, or fails with EINVAL because it is the namespace we
 * are already in (joining it gains nothing).
 */
PROBE_FN(setns_pid1)
{
    static const char *const types[] = {"mnt", "net", "pid", "user", "uts", "ipc", "cgroup"};
    unsigned denied = 0;

    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        char path[64];
        _cleanup_close_ int fd = -EBADF;
        int r, err;

        (void) snprintf(path, sizeof(path), "/proc/1/ns/%s", types[i]);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            err = errno;
            denied += PROBE_ERRNO_IN(err, EACCES, EPERM, ENOENT);
            if (!PROBE_ERRNO_IN(err, EACCES, EPERM, ENOENT))
                probe_escaped(res, "%s:open:%s", types[i], probe_errname(err));
            continue;
        }
        r = setns(fd, 0);
        err = errno;
        if (r < 0 && (PROBE_ERRNO_IN(err, EPERM, EACCES) || (err == EINVAL && same_ns(fd, types[i]))))
            denied++;
        else
            PROBE_JUDGE(res, types[i], r, err, EPERM, EACCES);
    }
    if (res->verdict == PROBE_CONTAINED)
        probe_contained(res, "%u-namespaces-denied", denied);
}

/* Legacy clone(CLONE_NEWUSER), whose flags seccomp can inspect. contained iff EPERM/EACCES/ENOSPC/EUSERS */
PROBE_FN(clone_newuser)
{
    long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, 0);
    int err = errno;

    if (pid == 0)
        _exit(0);
    PROBE_JUDGE(res, "clone", pid, err, NS_DENIALS);
    if (pid > 0)
        (void) waitpid((pid_t) pid, NULL, 0);
}

/* The first CLONE_ARGS_SIZE_VER0 (64) bytes of struct clone_args; <linux/sched.h> clashes with <sched.h>. */
struct probe_clone_args {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

/*
 * clone3 passes its flags in memory where seccomp cannot see them, so runtimes answer it with ENOSYS (libc
 * falls back to clone). contained iff ENOSYS/EPERM/EACCES/ENOSPC/EUSERS
 */
PROBE_FN(clone3_newuser)
{
    struct probe_clone_args args = {.flags = CLONE_NEWUSER, .exit_signal = SIGCHLD};
    long pid = syscall(SYS_clone3, &args, sizeof(args));
    int err = errno;

    if (pid == 0)
        _exit(0);
    PROBE_JUDGE(res, "clone3", pid, err, NS_DENIALS, ENOSYS);
    if (pid > 0)
        (void) waitpid((pid_t) pid, NULL, 0);
}

/* false (and a contained note) when there is no foreign process to attack at pid */
static bool foreign_target(const struct probe_ctx *ctx, struct probe_result *res, pid_t pid, const char *what)
{
    if (pid <= 0) {
        probe_contained(res, "%s:outside-pidns", what);
        return false;
    }
    if (pid == ctx->main_pid || pid == getpid()) {
        probe_contained(res, "%s:is-the-probe", what);
        return false;
    }
    return true;
}

/*
 * PTRACE_SEIZE (no SIGSTOP, unlike PTRACE_ATTACH); a tracee we got is detached when this child exits a moment
 * later. contained iff EPERM/EACCES/ESRCH. Inside the sandbox pid 1 is cordon-init: if this escapes,
 * cordon-init must be made non-dumpable or ptrace must be filtered.
 */
static void judge_ptrace(const struct probe_ctx *ctx, struct probe_result *res, pid_t pid, const char *what)
{
    long r;
    int err;

    if (!foreign_target(ctx, res, pid, what))
        return;
    r = ptrace(PTRACE_SEIZE, pid, NULL, 0);
    err = errno;
    PROBE_JUDGE(res, what, r, err, EPERM, EACCES, ESRCH);
}

PROBE_FN(ptrace_pid1)
{
    judge_ptrace(ctx, res, 1, "pid1");
}

PROBE_FN(ptrace_parent)
{
    judge_ptrace(ctx, res, ctx->parent_pid, "parent");
}

/* Reads 8 bytes at an unmapped address: EFAULT means the access check passed. contained iff
 * EPERM/EACCES/ESRCH */
static void judge_vm_readv(const struct probe_ctx *ctx, struct probe_result *res, pid_t pid, const char *what)
{
    char buf[8];
    struct iovec local = {.iov_base = buf, .iov_len = sizeof(buf)};
    struct iovec remote = {.iov_base = (void *) 0x10000, .iov_len = sizeof(buf)};
    ssize_t r;
    int err;

    if (!foreign_target(ctx, res, pid, what))
        return;
    r = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    err = errno;
    PROBE_JUDGE(res, what, r, err, EPERM, EACCES, ESRCH, ENOSYS);
}

PROBE_FN(process_vm_readv_pid1)
{
    judge_vm_readv(ctx, res, 1, "pid1");
    judge_vm_readv(ctx, res, ctx->parent_pid, "parent");
}

/*
 * Steals fd 0 of the target (pidfd_getfd needs ptrace-attach rights). contained iff pidfd_open or pidfd_getfd
 * fail with EPERM/EACCES/ESRCH/ENOSYS; EBADF means the access check passed and only the fd number was wrong.
 */
static void judge_getfd(const struct probe_ctx *ctx, struct probe_result *res, pid_t pid, const char *what)
{
    _cleanup_close_ int pidfd = -EBADF;
    long fd;
    int err;

    if (!foreign_target(ctx, res, pid, what))
        return;
    pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) {
        err = errno;
        PROBE_JUDGE(res, what, -1, err, EPERM, EACCES, ESRCH, ENOSYS);
        return;
    }
    fd = syscall(SYS_pidfd_getfd, pidfd, 0, 0);
    err = errno;
    PROBE_JUDGE(res, what, fd, err, EPERM, EACCES, ESRCH, ENOSYS);
    if (fd >= 0)
        (void) close((int) fd);
}

PROBE_FN(pidfd_getfd_pid1)
{
    judge_getfd(ctx, res, 1, "pid1");
    judge_getfd(ctx, res, ctx->parent_pid, "parent");
}

/*
 * The harness passes a pid that only exists on the host. contained iff kill(pid, 0) fails with ESRCH and
 * /proc/<pid> does not exist; EPERM from kill means the process is there but protected: visible, escaped.
 */
PROBE_FN(host_pid_visible)
{
    pid_t pid = probe_parse_pid(ctx->host_pid);
    char path[64];
    struct stat st;
    int r, err;

    if (pid == 0) {
        probe_untested(res, "CORDON_PROBE_HOST_PID-unset");
        return;
    }
    if (pid == getpid() || pid == ctx->main_pid) {
        probe_contained(res, "pid-%d-is-the-probe", (int) pid);
        return;
    }
    r = kill(pid, 0);
    err = errno;
    if (r == 0 || err != ESRCH)
        probe_escaped(res, "kill(%d,0):%s", (int) pid, r == 0 ? "visible" : probe_errname(err));
    else
        probe_contained(res, "kill:ESRCH");
    (void) snprintf(path, sizeof(path), "/proc/%d", (int) pid);
    if (stat(path, &st) == 0)
        probe_escaped(res, "%s:visible", path);
    else
        probe_contained(res, "/proc:%s", probe_errname(errno));
}

/*
 * Opening the binary behind /proc/PID/exe for write is how CVE-2019-5736 overwrote runc. Nothing is written.
 * contained iff the open fails with EROFS/EACCES/EPERM/ENOENT/ESRCH, or with ETXTBSY while access(W_OK) says
 * the file is not writable for us (a busy binary becomes writable the moment its process exits).
 */
static void judge_exe_write(struct probe_result *res, const char *path)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    int err = errno;

    if (fd >= 0) {
        (void) close(fd);
        probe_escaped(res, "%s:opened-for-write", path);
        return;
    }
    if (err == ETXTBSY) {
        if (faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) == 0)
            probe_escaped(res, "%s:ETXTBSY-but-writable-once-it-exits", path);
        else
            probe_contained(res, "%s:ETXTBSY,access:%s", path, probe_errname(errno));
        return;
    }
    PROBE_JUDGE(res, path, -1, err, EROFS, EACCES, EPERM, ENOENT, ESRCH);
}

PROBE_FN(proc_self_exe_write)
{
    judge_exe_write(res, "/proc/self/exe");
}

PROBE_FN(proc_pid1_exe_write)
{
    if (ctx->main_pid == 1)
        probe_contained(res, "pid1-is-the-probe");
    else
        judge_exe_write(res, "/proc/1/exe");
}

const struct probe_def probe_defs_ns[] = {
    PROBE_ENTRY("namespaces", unshare_user),       PROBE_ENTRY("namespaces", unshare_mnt),
    PROBE_ENTRY("namespaces", unshare_net),        PROBE_ENTRY("namespaces", unshare_pid),
    PROBE_ENTRY("namespaces", unshare_cgroup),     PROBE_ENTRY("namespaces", setns_pid1),
    PROBE_ENTRY("namespaces", clone_newuser),      PROBE_ENTRY("namespaces", clone3_newuser),
    PROBE_ENTRY("processes", host_pid_visible),    PROBE_ENTRY("processes", ptrace_pid1),
    PROBE_ENTRY("processes", ptrace_parent),       PROBE_ENTRY("processes", process_vm_readv_pid1),
    PROBE_ENTRY("processes", pidfd_getfd_pid1),    PROBE_ENTRY("processes", proc_self_exe_write),
    PROBE_ENTRY("processes", proc_pid1_exe_write), {0},
};
