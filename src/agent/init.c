/* cordon-init: PID 1 of every sandbox (the in-sandbox agent).
 *
 * Runs inside all of the sandbox's namespaces, already confined: no
 * capabilities, no_new_privs, seccomp and landlock applied by the setup child
 * that exec'd it. It trusts nothing it reads from the sandbox; it trusts the
 * frames on fd 3, the agent socket whose other end the host holds.
 *
 * fds on entry: 0-2 the sandbox's stdio (passed to commands), 3 the agent
 * socket. Everything else is closed. Its jobs: start commands asked for by
 * EXEC frames, forward signals, reap every process (orphans included), report
 * exits. When the host end closes, init exits and the kernel tears the pid
 * namespace down with everything in it. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frame.h"

#define AGENT_FD  3
#define MAX_EXECS 256

struct job {
    pid_t pid; /* also the process group id: each command gets its own session */
    uint32_t channel;
    uint32_t flags;
};

static struct job jobs[MAX_EXECS];
static uint8_t payload[CDN_FRAME_MAX];
static struct cdn_exec_req req;

static const int forwarded[] = {SIGHUP,  SIGINT,   SIGQUIT, SIGTERM, SIGUSR1,
                                SIGUSR2, SIGWINCH, SIGCONT, SIGALRM};

static void deliver_held(const struct job *j);

static void send_error(uint32_t channel, int errnum, const char *what)
{
    uint8_t buf[512];
    char msg[400];
    (void) snprintf(msg, sizeof msg, "%s: %s", what, strerror(errnum));
    int n = cdn_errmsg_encode(buf, sizeof buf, errnum, msg);
    if (n > 0 && cdn_frame_send(AGENT_FD, CDN_FRAME_ERROR, channel, buf, (uint32_t) n) < 0)
        _exit(1);
}

/* In the forked child: become the command. Reports a failed chdir/exec to the
 * parent through errfd (CLOEXEC, so a successful exec closes it). */
static void exec_child(const struct cdn_exec_req *r, int errfd) __attribute__((noreturn));
static void exec_child(const struct cdn_exec_req *r, int errfd)
{
    sigset_t all;
    sigemptyset(&all);
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
        (void) signal(forwarded[i], SIG_DFL);
    (void) signal(SIGCHLD, SIG_DFL);
    (void) signal(SIGPIPE, SIG_DFL);
    (void) sigprocmask(SIG_SETMASK, &all, NULL);
    (void) setsid();
    (void) close(AGENT_FD);
    int stage = 0;
    if (r->cwd[0] && chdir(r->cwd) < 0) {
        stage = 1;
    } else {
        extern char **environ;
        environ = (char **) r->envp; /* execvp searches PATH in the command's own environment */
        execvp(r->argv[0], (char *const *) r->argv);
        stage = 2;
    }
    int msg[2] = {stage, errno};
    (void) !write(errfd, msg, sizeof msg);
    _exit(127);
}

static struct job *job_slot(void)
{
    for (size_t i = 0; i < MAX_EXECS; i++)
        if (jobs[i].pid == 0)
            return &jobs[i];
    return NULL;
}

static void start_exec(uint32_t channel, const uint8_t *p, size_t len)
{
    if (cdn_exec_decode(p, len, &req) < 0) {
        send_error(channel, EBADMSG, "exec request");
        return;
    }
    struct job *j = job_slot();
    if (!j) {
        send_error(channel, EAGAIN, "exec");
        return;
    }
    int errpipe[2];
    if (pipe2(errpipe, O_CLOEXEC) < 0) {
        send_error(channel, errno, "exec");
        return;
    }
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        (void) close(errpipe[0]);
        (void) close(errpipe[1]);
        send_error(channel, e, "fork");
        return;
    }
    if (pid == 0) {
        (void) close(errpipe[0]);
        exec_child(&req, errpipe[1]);
    }
    (void) close(errpipe[1]);
    int msg[2];
    ssize_t n;
    do
        n = read(errpipe[0], msg, sizeof msg);
    while (n < 0 && errno == EINTR);
    (void) close(errpipe[0]);
    *j = (struct job){.pid = pid, .channel = channel, .flags = req.flags};
    deliver_held(j);
    if (n == (ssize_t) sizeof msg) {
        char what[300];
        (void) snprintf(what, sizeof what, msg[0] == 1 ? "working directory '%.200s'" : "'%.200s'",
                        msg[0] == 1 ? req.cwd : req.argv[0]);
        send_error(channel, msg[1], what);
    }
}

static void report_exit(struct job *j, int status, const struct rusage *ru)
{
    struct cdn_exit_msg m = {
        .exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 0,
        .signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0,
        .user_us = (uint64_t) ru->ru_utime.tv_sec * 1000000 + (uint64_t) ru->ru_utime.tv_usec,
        .sys_us = (uint64_t) ru->ru_stime.tv_sec * 1000000 + (uint64_t) ru->ru_stime.tv_usec,
        .maxrss_kb = (uint64_t) ru->ru_maxrss,
    };
    uint8_t buf[64];
    int n = cdn_exit_encode(buf, sizeof buf, &m);
    if (cdn_frame_send(AGENT_FD, CDN_FRAME_EXIT, j->channel, buf, (uint32_t) n) < 0)
        _exit(1);
    uint32_t flags = j->flags;
    *j = (struct job){0};
    if (flags & CDN_EXEC_SHUTDOWN_ON_EXIT)
        _exit(0); /* the kernel kills what is left in the pid namespace */
}

static void reap(void)
{
    for (;;) {
        int status;
        struct rusage ru;
        pid_t pid = wait4(-1, &status, WNOHANG, &ru);
        if (pid <= 0)
            return;
        for (size_t i = 0; i < MAX_EXECS; i++)
            if (jobs[i].pid == pid)
                report_exit(&jobs[i], status, &ru);
    }
}

/* Signals for "everything" that came while nothing ran yet (a SIGTERM right
 * after start): held here and delivered to the next command once it exists. */
static uint64_t held_signals;

static void forward_signal(int sig, uint32_t channel, bool all)
{
    bool sent = false;
    for (size_t i = 0; i < MAX_EXECS; i++)
        if (jobs[i].pid > 0 && (all || jobs[i].channel == channel)) {
            (void) kill(-jobs[i].pid, sig);
            sent = true;
        }
    if (!sent && all && sig > 0 && sig < 64)
        held_signals |= 1ULL << sig;
}

static void deliver_held(const struct job *j)
{
    for (int sig = 1; held_signals && sig < 64; sig++)
        if (held_signals & (1ULL << sig)) {
            held_signals &= ~(1ULL << sig);
            (void) kill(-j->pid, sig);
        }
}

static void handle_frame(void)
{
    struct cdn_frame_header h;
    int n = cdn_frame_recv(AGENT_FD, &h, payload, sizeof payload);
    if (n < 0)
        _exit(n == -ECONNRESET ? 0 : 2); /* host gone or spoke garbage: end the sandbox */
    switch (h.type) {
    case CDN_FRAME_EXEC:
        start_exec(h.channel, payload, (size_t) n);
        break;
    case CDN_FRAME_SIGNAL:
        if (n == 4 && payload[0] > 0 && payload[0] < 65)
            forward_signal(payload[0], h.channel, false);
        break;
    case CDN_FRAME_PING:
        if (cdn_frame_send(AGENT_FD, CDN_FRAME_PONG, h.channel, payload, (uint32_t) n) < 0)
            _exit(1);
        break;
    default:
        send_error(h.channel, EOPNOTSUPP, "frame type");
    }
}

int main(void)
{
    (void) prctl(PR_SET_DUMPABLE, 0); /* keep sandbox processes out of /proc/1/{mem,environ,fd} */
    /* Out of the caller's terminal process group: a Ctrl-C reaches the host
     * side once, which forwards it; it must not also arrive here directly. */
    (void) setsid();
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGPIPE);
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
        sigaddset(&mask, forwarded[i]);
    if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
        return 1;
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0)
        return 1;
    struct pollfd pfd[2] = {{.fd = AGENT_FD, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    for (;;) {
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (pfd[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t) sizeof si)
                if (si.ssi_signo != SIGCHLD && si.ssi_signo != SIGPIPE)
                    forward_signal((int) si.ssi_signo, 0, true);
            reap();
        }
        if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR))
            handle_frame();
    }
}
