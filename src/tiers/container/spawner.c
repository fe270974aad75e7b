/* SPDX-License-Identifier: see repository LICENSE */
/* The host's side of cordon-setup (setup-main.c), which makes the container tier's setup children:
 * started once per process, at its first create, with vfork and exec; asked for each setup child on
 * its socket (container-internal.h); started again when it has died. */
#include "container-internal.h"
#include "core/paths.h"
#include "shared/fd-util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* The stack the vfork that starts cordon-setup runs on until its exec: arranging fds, no more. */
#define STACK (64 << 10)
/* How long an answer may take (a clone3): past it cordon-setup is taken for stuck, and ended. */
#define ANSWER_S 30

static struct {
    int sock;    /* SOCK_SEQPACKET; -EBADF: not started, or gone */
    int pidfd;   /* its pidfd (a pid number may be reaped by the process's SIGCHLD handler, and reused) */
    int exe;     /* cordon-setup, opened at the first start */
    void *stack; /* the top of STACK bytes */
} spawner = {.sock = -EBADF, .pidfd = -EBADF, .exe = -EBADF};

struct spawner_exec {
    int fds[2]; /* its socket, cordon-setup */
    char *argv[3];
};

static int spawner_exec(void *arg)
{
    const struct spawner_exec *x = arg;
    const int *fds = x->fds;
    /* In the vfork's child: its own table (no CLONE_FILES) with the socket at 3 (both out of the way
     * first: either may be 3 or 4), nothing else but stdio, then the exec. The raw exit (never a
     * noreturn call, which a sanitizer would take for a stray stack) if it fails: the host sees the
     * socket's EOF. */
    int sock = fcntl(fds[0], F_DUPFD_CLOEXEC, 100), exe = fcntl(fds[1], F_DUPFD_CLOEXEC, 100);
    if (sock >= 0 && exe >= 0 && dup3(sock, 3, 0) == 3 && dup3(exe, 4, O_CLOEXEC) == 4 &&
        syscall(SYS_close_range, 5, ~0U, 0) == 0)
        (void) syscall(SYS_execveat, 4, "", x->argv, environ, AT_EMPTY_PATH);
    return (int) syscall(SYS_exit_group, 127);
}

/* cordon-setup started: with vfork (CLONE_VM|CLONE_VFORK: nothing of this process copied; it
 * waits until the exec), every signal blocked until then (the handlers are this process's). */
static int spawner_start(struct cdn_error *err)
{
    if (spawner.exe < 0) {
        char path[4096];
        if (cdn_setup_path(path, sizeof path) < 0)
            return cdn_error_set(err, ENOENT, "cordon-setup not found (set CORDON_SETUP or install cordon)");
        spawner.exe = open(path, O_RDONLY | O_CLOEXEC);
        if (spawner.exe < 0)
            return cdn_error_set(err, errno, "open %s: %m", path);
    }
    if (!spawner.stack) {
        void *stack =
            mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (stack == MAP_FAILED)
            return cdn_error_set(err, errno, "a stack to start cordon-setup on: %m");
        spawner.stack = (char *) stack + STACK;
    }
    _cleanup_close_pair_ int sv[2] = {-EBADF, -EBADF};
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return cdn_error_set(err, errno, "cordon-setup's socket: %m");
    /* Its parent's pid, by which it knows that it has outlived it; the environment too, which names
     * the cgroup root (core/cgroup.h) and the paths of cordon's directories. */
    char ppid[16];
    (void) snprintf(ppid, sizeof ppid, "%d", (int) getpid());
    struct spawner_exec x = {.fds = {sv[1], spawner.exe}, .argv = {"cordon-setup", ppid, NULL}};
    const struct timeval answer = {.tv_sec = ANSWER_S};
    if (setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &answer, sizeof answer) < 0)
        return cdn_error_set(err, errno, "cordon-setup's socket: %m");
    sigset_t all, old;
    sigfillset(&all);
    (void) pthread_sigmask(SIG_SETMASK, &all, &old);
    int pidfd = -EBADF;
    pid_t pid =
        clone(spawner_exec, spawner.stack, CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &x, &pidfd);
    int e = errno;
    (void) pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0)
        return cdn_error_set(err, e, "start cordon-setup: %s", strerror(e));
    spawner.sock = TAKE_FD(sv[0]);
    spawner.pidfd = pidfd;
    return 0;
}

static void spawner_stop(void)
{
    spawner.sock = safe_close(spawner.sock);
    if (spawner.pidfd >= 0) {
        siginfo_t si;
        (void) syscall(SYS_pidfd_send_signal, spawner.pidfd, SIGKILL, NULL, 0);
        while (waitid(P_PIDFD, (id_t) spawner.pidfd, &si, WEXITED) < 0 && errno == EINTR)
            ;
    }
    spawner.pidfd = safe_close(spawner.pidfd);
}

/* A setup child for args from cordon-setup, started when it is not (or no more): its pid and
 * *ret_pidfd, or -errno with err. */
pid_t cdn_spawner_request(struct cdn_setup_args *args, struct cdn_error *err, int *ret_pidfd)
{
    sigset_t old;
    (void) pthread_sigmask(SIG_BLOCK, NULL, &old);
    args->sigmask = cdn_sigset_to_mask(&old);
    _cleanup_free_ void *buf = NULL;
    size_t len = 0;
    if (cdn_setup_args_pack(args, &buf, &len) < 0)
        return cdn_error_set(err, ENOMEM, "pack the setup child's args: out of memory");
    _cleanup_close_ int packed = memfd_create("cordon-setup-args", MFD_CLOEXEC);
    if (packed < 0 || cdn_write_all(packed, buf, len) < 0)
        return cdn_error_set(err, errno, "the setup child's args: %m");
    int *mine[CDN_SETUP_FDS], fds[CDN_SETUP_FDS + 1], n = 0;
    cdn_setup_args_fds(args, mine);
    for (size_t i = 0; i < CDN_SETUP_FDS; i++)
        if (*mine[i] >= 0)
            fds[n++] = *mine[i];
    fds[n++] = packed;
    ssize_t r = -EPIPE;
    for (int attempt = 0; attempt < 2 && r == -EPIPE; attempt++) {
        if (spawner.sock < 0 && spawner_start(err) < 0)
            return -err->errnum;
        do
            r = cdn_send_fds(spawner.sock, "r", 1, fds, n, MSG_NOSIGNAL);
        while (r == -EINTR);
        if (r == -EPIPE || r == -ECONNRESET) /* it died: once more with a new one */
            spawner_stop(), r = -EPIPE;
    }
    if (r < 0)
        return cdn_error_set(err, (int) -r, "ask cordon-setup for the setup child: %s", strerror((int) -r));
    struct cdn_setup_answer ans = {0};
    int pidfd = -EBADF;
    /* A signal to this process (SIGCHLD, often) interrupts the wait: with SO_RCVTIMEO set, the
     * kernel never restarts it, whatever SA_RESTART says (socket(7)). */
    do
        r = cdn_recv_fd(spawner.sock, &ans, sizeof ans, &pidfd);
    while (r == -EINTR);
    if (r != (ssize_t) sizeof ans) { /* gone, or stuck past ANSWER_S: a new one next time */
        safe_close(pidfd);
        spawner_stop();
        if (r == -EAGAIN)
            return cdn_error_set(err, ETIMEDOUT, "cordon-setup did not answer in %d s", ANSWER_S);
        return cdn_error_set(err, r < 0 ? (int) -r : EPIPE, "cordon-setup did not answer");
    }
    if (ans.pid <= 0 || pidfd < 0) {
        safe_close(pidfd);
        ans.err.msg[sizeof ans.err.msg - 1] = ans.err.field[sizeof ans.err.field - 1] = 0;
        *err = ans.err;
        return ans.err.errnum > 0 ? -ans.err.errnum : cdn_error_set(err, EIO, "cordon-setup failed");
    }
    *ret_pidfd = pidfd;
    return ans.pid;
}
