/* cordon-worker: the template and the executors cloned from it (docs/process.md,
 * "How it works").
 *
 * The template is a clone of the sandbox's agent made before the agent reads
 * its first frame, so it holds nothing a frame ever carried (a file the
 * harness read, a verifier step's output, a call's code, input or answer), and
 * it never will: all it reads are spawn requests from the agent (a directory
 * name, a flag and a socket). Every interpreter that runs calls (an executor)
 * is cloned from it, never from the agent. It runs as (ruid, euid, suid) =
 * (uid + 1, uid, uid + 1): files are the sandbox's uid's to it, but kill(2)
 * compares the sender's uids with the target's real and saved ones, so no
 * process of the sandbox, its agent included, can signal it: neither a call,
 * nor a command, nor the QUIESCE before a verifier step (kill(-1)) ends it. It
 * is not dumpable, and with those ids no sandbox process could read its
 * memory anyway. It leads a process group (the "holding" group into which
 * the agent moves an executor for a moment, worker-call.c) and ends when the
 * agent's end of its socket closes, or with the sandbox's cgroup.
 *
 * An executor is cloned with CLONE_PARENT: the agent's child, with the
 * template's exit signal, which is none, so that the agent's reaping of
 * commands (wait4 without __WALL) never takes it and its pid, which names its
 * process group, stays its own until worker-call.c reaps it. Before Python
 * runs it becomes (uid, uid, uid), leads a process group of its own, dies with
 * the agent, writes only beneath its own directory (a Landlock layer of its
 * own) and takes a seccomp filter that refuses it and everything it starts
 * what would leave that group, change ids or make a process dumpable. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "init.h"
#include "confine/landlock.h"
#include "worker-call.h"
#include "shared/macro.h"

#define SPAWN_MAGIC 0x58454343u /* "CCEX" */

struct spawn_req {
    uint32_t magic;
    uint32_t fresh;
    char dir[300];
};

static struct {
    uint32_t uid;
    pid_t agent;
    struct sock_fprog filter; /* the executors' */
} t;

/* The executors' filter, on top of the worker's: no uid, gid, session or process group changes
 * (so nothing a call starts leaves its group), and no prctl that makes a process dumpable again
 * (its memory would be readable by the sandbox's other processes) or a subreaper. */
static int executor_filter(struct sock_fprog *ret)
{
    static const int nrs[] = {SCMP_SYS(setuid),   SCMP_SYS(setgid),    SCMP_SYS(setreuid),
                              SCMP_SYS(setregid), SCMP_SYS(setresuid), SCMP_SYS(setresgid),
                              SCMP_SYS(setfsuid), SCMP_SYS(setfsgid),  SCMP_SYS(setgroups),
                              SCMP_SYS(setsid),   SCMP_SYS(setpgid)};
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return -ENOMEM;
    int r = 0;
    for (size_t i = 0; r == 0 && i < sizeof nrs / sizeof nrs[0]; i++)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nrs[i], 0);
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(prctl), 1,
                             SCMP_A0(SCMP_CMP_EQ, PR_SET_DUMPABLE));
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(prctl), 1,
                             SCMP_A0(SCMP_CMP_EQ, PR_SET_CHILD_SUBREAPER));
    if (r == 0)
        r = cdn_worker_export_bpf(ctx, ret);
    seccomp_release(ctx);
    return r;
}

/* ---- an executor, from the template's clone to Python ---- */

static _Noreturn void executor_main(const struct spawn_req *q, int sock)
{
    static const char *const devices[] = {"/dev", NULL};
    const char *const own[] = {q->dir, NULL};
    const char *step = "its uids";
    bool ok = setresuid(t.uid, t.uid, t.uid) == 0;
    /* fd 3: its socket, close-on-exec (no command a call runs inherits it); 0 and 1 /dev/null until
     * the server makes its own; 2 the worker's stderr; nothing else. The socket may have arrived
     * on any fd, 0 included: it moves out of the way first. */
    int s = -1, devnull = -1;
    if (ok && !(step = "fds", (s = fcntl(sock, F_DUPFD_CLOEXEC, 10)) >= 0 &&
                                  (devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) >= 0 &&
                                  (devnull = fcntl(devnull, F_DUPFD_CLOEXEC, 10)) >= 0 &&
                                  dup2(devnull, 0) >= 0 && dup2(devnull, 1) >= 0 &&
                                  dup3(s, 3, O_CLOEXEC) >= 0 && syscall(SYS_close_range, 4, ~0U, 0) >= 0))
        ok = false;
    if (ok && !(step = "its process group", setpgid(0, 0) >= 0))
        ok = false;
    if (ok && !(step = "parent", prctl(PR_SET_PDEATHSIG, SIGKILL) >= 0 && getppid() == t.agent))
        ok = false;
    if (ok &&
        !(step = q->dir, chdir(q->dir) >= 0 && !setenv("HOME", q->dir, 1) && !setenv("TMPDIR", q->dir, 1)))
        ok = false;
    if (ok && !(step = "landlock", cdn_landlock_restrict_writes(own, devices) >= 0))
        ok = false;
    if (ok && !(step = "seccomp", prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &t.filter) >= 0))
        ok = false;
    if (!ok) { /* to the worker's stderr (cordond's log, cordon run's terminal); the call gets WorkerDied */
        dprintf(2, "cordon-worker: an executor could not start: %s: %m\n", step);
        _exit(111);
    }
    cdn_worker_python_after_fork();
    cdn_worker_python_serve(3, q->fresh);
}

/* ---- the template ---- */

static pid_t spawn(const struct spawn_req *q, int sock)
{
    cdn_worker_python_before_fork();
    /* The legacy clone: the container policy's seccomp filter reads its flags (clone3 is ENOSYS). */
    pid_t pid = (pid_t) syscall(SYS_clone, CLONE_PARENT, 0, 0, 0, 0);
    if (pid == 0)
        executor_main(q, sock);
    int e = errno;
    cdn_worker_python_after_fork_parent();
    return pid < 0 ? -e : pid;
}

/* One request: the fields, and exactly one fd. Returns the fd, or -1. */
static int receive(int ctl, struct spawn_req *q, bool *eof)
{
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = q, .iov_len = sizeof *q};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    ssize_t n;
    do
        n = recvmsg(ctl, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    *eof = n <= 0;
    int fds[2] = {-1, -1}, nfds = 0;
    struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL;
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        nfds = (int) ((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        nfds = nfds > 2 ? 2 : nfds;
        memcpy(fds, CMSG_DATA(c), (size_t) nfds * sizeof(int));
    }
    bool valid = n == (ssize_t) sizeof *q && q->magic == SPAWN_MAGIC && memchr(q->dir, 0, sizeof q->dir) &&
                 q->dir[0] == '/' && nfds == 1 && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC));
    for (int i = valid ? 1 : 0; i < nfds; i++)
        (void) close(fds[i]);
    return valid ? fds[0] : -1;
}

/* The template's process, from the agent's clone: serves spawn requests until the agent's end
 * closes. Trusts the agent (its parent, the only holder of the other end). Never returns. */
static _Noreturn void template_main(int ctl)
{
    cdn_worker_python_after_fork();
    /* Only its socket (at 4) and stderr: not the host's connection (3), the seccomp listener (9),
     * the setup pipe, nor anything else of the agent's. */
    if (ctl != 4 && dup3(ctl, 4, O_CLOEXEC) < 0)
        _exit(1);
    ctl = 4;
    (void) close(0), (void) close(1), (void) close(3);
    if (syscall(SYS_close_range, 5, ~0U, 0) < 0)
        _exit(1);
    /* (uid + 1, uid, uid + 1): the real uid may become the saved one; see the comment at the top. */
    t.agent = getppid();
    if (setresuid(t.uid + 1, (uid_t) -1, (uid_t) -1) < 0 || setpgid(0, 0) < 0) {
        dprintf(2, "cordon-worker: the call template could not start: %m\n");
        _exit(1);
    }
    for (;;) {
        struct spawn_req q;
        bool eof;
        int sock = receive(ctl, &q, &eof);
        if (eof)
            _exit(0); /* the agent is gone */
        int32_t pid = sock < 0 ? -EINVAL : spawn(&q, sock);
        if (sock >= 0)
            (void) close(sock);
        if (send(ctl, &pid, sizeof pid, MSG_NOSIGNAL) != (ssize_t) sizeof pid)
            _exit(0);
    }
}

/* ---- the agent's side ---- */

int cdn_worker_template_start(uint32_t uid, struct worker_template *ret, struct cdn_error *err)
{
    t.uid = uid;
    int r = executor_filter(&t.filter);
    if (r < 0)
        return cdn_error_set(err, -r, "compile the executors' seccomp filter: %s", strerror(-r));
    _cleanup_close_pair_ int sv[2] = {-EBADF, -EBADF};
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return cdn_error_set(err, errno, "socketpair: %m");
    cdn_worker_python_before_fork();
    /* No exit signal: wait4(-1) of the agent's command reaping never sees it nor the executors
     * (CLONE_PARENT gives them the template's), so their pids stay ours until we reap them. */
    pid_t pid = (pid_t) syscall(SYS_clone, 0, 0, 0, 0, 0);
    if (pid == 0) {
        (void) close(sv[0]);
        template_main(sv[1]);
    }
    int e = errno;
    cdn_worker_python_after_fork_parent();
    sv[1] = safe_close(sv[1]); /* the template's: without our copy, ours reads EOF once it is gone */
    if (pid < 0)
        return cdn_error_set(err, e, "clone the call template: %s", strerror(e));
    *ret = (struct worker_template){.pid = pid, .ctl = TAKE_FD(sv[0])};
    return 0;
}

int cdn_worker_template_spawn(struct worker_template *tp, const char *dir, int sock, bool fresh,
                              int timeout_ms)
{
    if (tp->pid <= 0)
        return -EPIPE;
    struct spawn_req q = {.magic = SPAWN_MAGIC, .fresh = fresh};
    if (snprintf(q.dir, sizeof q.dir, "%s", dir) >= (int) sizeof q.dir)
        return -ENAMETOOLONG;
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u = {0};
    struct iovec iov = {.iov_base = &q, .iov_len = sizeof q};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    *c = (struct cmsghdr){
        .cmsg_len = CMSG_LEN(sizeof(int)), .cmsg_level = SOL_SOCKET, .cmsg_type = SCM_RIGHTS};
    memcpy(CMSG_DATA(c), &sock, sizeof sock);
    if (sendmsg(tp->ctl, &mh, MSG_NOSIGNAL) != (ssize_t) sizeof q)
        return -EPIPE;
    struct pollfd p = {.fd = tp->ctl, .events = POLLIN};
    int pr;
    do
        pr = poll(&p, 1, timeout_ms);
    while (pr < 0 && errno == EINTR);
    int32_t pid = 0;
    if (pr <= 0 || recv(tp->ctl, &pid, sizeof pid, 0) != (ssize_t) sizeof pid)
        return -EPIPE; /* gone, or so slow that it counts as gone */
    return pid;
}

void cdn_worker_template_stop(struct worker_template *tp)
{
    if (tp->ctl >= 0)
        (void) close(tp->ctl); /* its end reads EOF: it exits */
    tp->ctl = -1;
    if (tp->pid > 0) {
        /* It cannot be signalled from here (its uids), but it ends at once on EOF; a template that
         * hangs (stopped by root) stays a zombie-to-be rather than hanging the agent. */
        siginfo_t si;
        for (int i = 0; i < 100; i++) {
            si.si_pid = 0;
            if (waitid(P_PID, (id_t) tp->pid, &si, WEXITED | WNOHANG | __WALL) < 0 || si.si_pid)
                break;
            (void) usleep(1000);
        }
    }
    tp->pid = 0;
}
