/* cordon-init: commands. Each EXEC frame forks a child in its own session;
 * with CDN_EXEC_PIPES its output comes back as STDOUT/STDERR frames and its
 * input from STDIN frames (or a pseudo-terminal carries both, CDN_EXEC_PTY).
 * Without, it shares init's stdio (`cordon run` passes its own). Many may run
 * at once; each is known by the channel the host chose for it.
 *
 * Every fd init keeps is O_CLOEXEC and its own ends of pipes are
 * non-blocking: a command that does not read its stdin never stalls the loop
 * that serves the others; a host slow to read output stops the reading of
 * output (see init.c), not the loop. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <linux/sched.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "init.h"
#include "shared/macro.h"

#define MAX_EXECS    256
#define STDIN_MAX    (8u << 20) /* input buffered for a command that is not reading; more is dropped */
#define OUTPUT_CHUNK (64u << 10)
#define POLL_PER_JOB 5
#define CONTROL_MAX  (8u << 20) /* control bytes buffered for a command that is not reading fd 3 */
#define CONTROL_READ 4096u

struct job {
    pid_t pid; /* 0: free. Also the process group: each command gets its own session */
    uint32_t channel, flags;
    int out, err; /* our read ends (PTY: out is the master); -1 once at EOF */
    int in;       /* our write end of its stdin (PTY: the master again); -1 when closed */
    uint8_t *inbuf;
    size_t inlen;
    bool in_close; /* the host closed stdin: close once inbuf is written */
    bool in_sync;  /* the host waits for WINDOW (CDN_FRAME_SYNC) */
    /* CDN_EXEC_CONTROL: our write end of its fd 3 and what waits to go there; our read end of its
     * fd 4. -1 when there is none (or closed). */
    int cmd, ctl;
    uint8_t *cbuf;
    size_t clen;
};

static struct job jobs[MAX_EXECS];
static struct cdn_exec_req req;
static bool shutdown_due;
static int shutdown_status; /* init's exit status once shutdown_due (CDN_EXEC_STATUS) */
/* The host's signals for "everything" that came while nothing ran yet (cordon run's SIGTERM
 * right after start): held here for its one command (CDN_EXEC_SHUTDOWN_ON_EXIT) once it exists.
 * Any other command drops them: a signal never crosses into a command it was not sent to. */
static uint64_t held_signals;

static const int reset_signals[] = {SIGHUP,   SIGINT,  SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
                                    SIGWINCH, SIGCONT, SIGALRM, SIGCHLD, SIGPIPE};

static void close_fd(int *fd)
{
    if (*fd >= 0)
        (void) close(*fd);
    *fd = -1;
}

static struct job *find(uint32_t channel)
{
    if (channel == 0)
        return NULL; /* forgotten commands (cdn_exec_forget_channels) */
    for (size_t i = 0; i < MAX_EXECS; i++)
        if (jobs[i].pid > 0 && jobs[i].channel == channel)
            return &jobs[i];
    return NULL;
}

/* In the forked child: wire up stdio and become the command. Reports a failed
 * step to the parent through errfd (CLOEXEC, so a successful exec closes it). */
static void exec_child(const struct cdn_exec_req *r, const struct cdn_user *u, int errfd, const int stdio[5],
                       const char *pts) __attribute__((noreturn));
static void exec_child(const struct cdn_exec_req *r, const struct cdn_user *u, int errfd, const int stdio[5],
                       const char *pts)
{
    sigset_t none;
    sigemptyset(&none);
    for (size_t i = 0; i < sizeof reset_signals / sizeof reset_signals[0]; i++)
        (void) signal(reset_signals[i], SIG_DFL);
    (void) sigprocmask(SIG_SETMASK, &none, NULL);
    (void) setsid();
    if (r->flags & CDN_EXEC_TREE) /* kept across the exec: its orphans come to it, not to us */
        (void) prctl(PR_SET_CHILD_SUBREAPER, 1);
    int stage = 0; /* the host connection is CLOEXEC (init.c) */
    if (pts) {
        int fd = open(pts, O_RDWR | O_CLOEXEC);
        if (fd < 0 || ioctl(fd, TIOCSCTTY, 0) < 0 || dup2(fd, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            stage = 3;
    } else if (r->flags & CDN_EXEC_PIPES) {
        /* The control ends first go above 4, out of the way of the dup2s below. */
        int c3 = stdio[3] >= 0 ? fcntl(stdio[3], F_DUPFD, 10) : -1;
        int c4 = stdio[4] >= 0 ? fcntl(stdio[4], F_DUPFD, 10) : -1;
        if (stdio[3] >= 0 && (c3 < 0 || c4 < 0))
            stage = 3;
        for (int i = 0; i < 3 && !stage; i++)
            if (dup2(stdio[i], i) < 0)
                stage = 3;
        if (!stage && c3 >= 0 && (dup2(c3, 3) < 0 || dup2(c4, 4) < 0)) /* not CLOEXEC: they stay */
            stage = 3;
        if (c3 >= 0)
            (void) close(c3);
        if (c4 >= 0)
            (void) close(c4);
    } else if ((r->flags & CDN_EXEC_CTTY) && ioctl(0, TIOCSCTTY, 0) < 0) {
        stage = 3; /* its stdio, init's own, is a terminal: the controlling one of its new session */
    }
    if (!stage && cdn_user_become(u) < 0) {
        stage = 6; /* the user, or a capability left: not run */
    } else if (!stage && r->cwd[0] && chdir(r->cwd) < 0) {
        stage = 1;
    } else if (!stage && cdn_vm_confines() && (cdn_vm_set_rlimits() < 0 || cdn_vm_confine_child(errfd) < 0)) {
        stage = 4; /* a VM guest's command: confined as a container's init is, or not run */
    } else if (!stage) {
        extern char **environ;
        bool verifier = r->flags & CDN_EXEC_VERIFIER;
        environ = (char **) r->envp; /* execvp searches PATH in the command's own environment */
        const char *req_home = verifier ? getenv("HOME") : NULL; /* the request's, or none */
        cdn_agent_exec_env();
        if (u && !getenv("HOME")) /* the host left HOME out for a command with a user (spec.c) */
            (void) setenv("HOME", u->home[0] ? u->home : "/", 1);
        if (verifier && cdn_verifier_child_env(r, req_home) < 0) {
            stage = 5;
            errno = CDN_VERIFIER_UNSAFE;
        } else {
            execvp(r->argv[0], (char *const *) r->argv);
            stage = 2;
        }
    }
    int msg[2] = {stage, errno};
    (void) !write(errfd, msg, sizeof msg);
    _exit(127);
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Our ends into j, the child's into stdio[] (to be closed after fork): 0–2, and with
 * CDN_EXEC_CONTROL its fds 3 (commands in) and 4 (control records out). */
static int make_pipes(struct job *j, int stdio[5])
{
    int p[5][2] = {{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}};
    bool want_in = j->flags & CDN_EXEC_STDIN, control = j->flags & CDN_EXEC_CONTROL;
    if ((want_in ? pipe2(p[0], O_CLOEXEC) : (p[0][0] = open("/dev/null", O_RDONLY | O_CLOEXEC))) < 0 ||
        pipe2(p[1], O_CLOEXEC) < 0 || pipe2(p[2], O_CLOEXEC) < 0 ||
        (control && (pipe2(p[3], O_CLOEXEC) < 0 || pipe2(p[4], O_CLOEXEC) < 0))) {
        int e = errno;
        for (int i = 0; i < 5; i++)
            for (int k = 0; k < 2; k++)
                close_fd(&p[i][k]);
        return -e;
    }
    stdio[0] = p[0][0], stdio[1] = p[1][1], stdio[2] = p[2][1], stdio[3] = p[3][0], stdio[4] = p[4][1];
    j->in = want_in ? p[0][1] : -1;
    j->out = p[1][0], j->err = p[2][0];
    j->cmd = p[3][1], j->ctl = p[4][0];
    int *ours[] = {&j->out, &j->err, &j->in, &j->cmd, &j->ctl};
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        if (*ours[i] >= 0)
            (void) set_nonblock(*ours[i]);
    return 0;
}

/* A pseudo-terminal: the master is both our out and in; returns the slave's name. */
static int make_pty(struct job *j, const struct cdn_exec_req *r, char *pts, size_t size)
{
    _cleanup_close_ int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0)
        return -errno;
    struct winsize ws = {.ws_row = r->rows ? r->rows : 24, .ws_col = r->cols ? r->cols : 80};
    if (grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, pts, size) != 0 || ioctl(m, TIOCSWINSZ, &ws) < 0)
        return -errno;
    (void) set_nonblock(m);
    j->in = fcntl(m, F_DUPFD_CLOEXEC, 0);
    j->out = TAKE_FD(m);
    j->err = -1;
    return 0;
}

static void release(struct job *j)
{
    if (j->flags & CDN_EXEC_VERIFIER)
        cdn_vm_verifier(false);
    close_fd(&j->out);
    close_fd(&j->err);
    close_fd(&j->in);
    close_fd(&j->cmd);
    close_fd(&j->ctl);
    free(j->inbuf);
    free(j->cbuf);
    *j = (struct job){.out = -1, .err = -1, .in = -1, .cmd = -1, .ctl = -1};
}

static void deliver_held(const struct job *j)
{
    if (!(j->flags & CDN_EXEC_SHUTDOWN_ON_EXIT)) {
        held_signals = 0;
        return;
    }
    for (int sig = 1; held_signals && sig < 64; sig++)
        if (held_signals & (1ULL << sig)) {
            held_signals &= ~(1ULL << sig);
            (void) kill(-j->pid, sig);
        }
}

static int spawn(struct job *j, const struct cdn_exec_req *r, const struct cdn_user *u, int *ret_stage)
{
    int stdio[5] = {-1, -1, -1, -1, -1}, e = 0;
    _cleanup_close_pair_ int errpipe[2] = {-EBADF, -EBADF};
    char pts[64] = "";
    bool pty = (r->flags & CDN_EXEC_PIPES) && (r->flags & CDN_EXEC_PTY);
    if (pty)
        e = make_pty(j, r, pts, sizeof pts);
    else if (r->flags & CDN_EXEC_PIPES)
        e = make_pipes(j, stdio);
    if (e < 0)
        return e;
    /* A socket rather than a pipe when the command is confined: its seccomp listener comes over it. */
    bool confined = cdn_vm_confines();
    if ((confined ? socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, errpipe)
                  : pipe2(errpipe, O_CLOEXEC)) < 0) {
        e = -errno;
        for (int i = 0; i < 5; i++)
            close_fd(&stdio[i]);
        return e;
    }
    if (r->flags & CDN_EXEC_VERIFIER)
        cdn_vm_verifier(true); /* a guest's: its opens of protected paths go through while it runs */
    /* A guest's command is born in its cgroup (CLONE_INTO_CGROUP: no migration, which costs tens of
     * ms under TCG); elsewhere a plain fork. */
    int cg = cdn_vm_commands_cgroup();
    pid_t pid;
    if (cg >= 0) {
        struct clone_args ca = {.flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD, .cgroup = (uint64_t) cg};
        pid = (pid_t) syscall(SYS_clone3, &ca, sizeof ca);
    } else
        pid = fork();
    if (pid == 0)
        exec_child(r, u, errpipe[1], stdio, pty ? pts : NULL);
    e = pid < 0 ? -errno : 0;
    /* The child's ends go now: the pipe reads EOF once its exec closes the last copy of errpipe[1]. */
    for (int i = 0; i < 5; i++)
        close_fd(&stdio[i]);
    errpipe[1] = safe_close(errpipe[1]);
    if (e < 0)
        return e;
    j->pid = pid;
    /* The child reports a failed exec at once, or the pipe closes when the
     * exec succeeds. A sandbox process could stop the child in between
     * (SIGSTOP): init waits 2 s at most and then takes it as started. */
    int msg[2];
    ssize_t n = -1;
    for (;;) {
        struct pollfd p = {.fd = errpipe[0], .events = POLLIN};
        int pr;
        do
            pr = poll(&p, 1, 2000);
        while (pr < 0 && errno == EINTR);
        if (pr <= 0)
            break;
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(sizeof(int))];
        } c;
        struct iovec iov = {msg, sizeof msg};
        struct msghdr m = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.b, .msg_controllen = sizeof c.b};
        do /* a pipe (not confined: no listener comes) or the socket */
            n = confined ? recvmsg(errpipe[0], &m, MSG_CMSG_CLOEXEC) : read(errpipe[0], msg, sizeof msg);
        while (n < 0 && errno == EINTR);
        if (!confined)
            break;
        struct cmsghdr *h = n > 0 ? CMSG_FIRSTHDR(&m) : NULL;
        if (h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
            int fd;
            memcpy(&fd, CMSG_DATA(h), sizeof fd);
            cdn_vm_add_listener(
                fd); /* a confined command's seccomp listener; its exec (or failure) follows */
            continue;
        }
        break;
    }
    if (n == (ssize_t) sizeof msg) {
        *ret_stage = msg[0];
        return -msg[1];
    }
    return 0;
}

static void send_error(uint32_t channel, int errnum, const char *msg)
{
    uint8_t buf[512];
    int n = cdn_errmsg_encode(buf, sizeof buf, errnum, msg);
    if (n > 0)
        cdn_agent_send(CDN_FRAME_ERROR, channel, buf, (uint32_t) n);
}

/* The request's user, from the sandbox's files as they are now. A verifier step runs as root only:
 * its checks (init-verifier.c) ask access() what the calling uid may write, which says nothing of
 * what the sandbox's other uids may write. Refusing a step with another user is the simpler safe
 * choice than judging every path by owner and mode (the host gives a verifier step no user of the
 * spec's: only the request's, api-exec.c). */
static int lookup_user(uint32_t channel, struct cdn_user *ret)
{
    struct cdn_error e = {0};
    int r = cdn_user_lookup(req.user, ret, &e);
    if (r < 0) {
        send_error(channel, -r, e.msg[0] ? e.msg : "user: cannot be resolved");
        return r;
    }
    if ((req.flags & CDN_EXEC_VERIFIER) && ret->uid != 0) {
        send_error(channel, CDN_VERIFIER_UNSAFE,
                   "user: a verifier step runs as root only (no user, or \"0\"): its checks of what "
                   "the sandbox's commands can write judge by the calling uid");
        return -CDN_VERIFIER_UNSAFE;
    }
    return 0;
}

void cdn_exec_start(uint32_t channel, const uint8_t *p, size_t len)
{
    if (cdn_exec_decode(p, len, &req) < 0) {
        cdn_agent_error(channel, EBADMSG, "exec request");
        return;
    }
    if (channel == 0 || find(channel)) {
        cdn_agent_error(channel, EEXIST, "exec channel");
        return;
    }
    struct job *j = NULL;
    for (size_t i = 0; i < MAX_EXECS && !j; i++)
        if (jobs[i].pid == 0)
            j = &jobs[i];
    if (!j) {
        cdn_agent_error(channel, EAGAIN, "exec: too many commands running");
        return;
    }
    static struct cdn_user user;
    if (req.user && lookup_user(channel, &user) < 0)
        return; /* refused: it said why */
    if ((req.flags & CDN_EXEC_VERIFIER) && cdn_verifier_prepare(&req, channel) < 0)
        return; /* refused: it said why */
    if ((req.flags & CDN_EXEC_CONTROL) && (!(req.flags & CDN_EXEC_PIPES) || (req.flags & CDN_EXEC_PTY)))
        req.flags &= ~(uint32_t) CDN_EXEC_CONTROL; /* only over pipes: a terminal has no fd 3 or 4 */
    *j = (struct job){
        .channel = channel, .flags = req.flags, .out = -1, .err = -1, .in = -1, .cmd = -1, .ctl = -1};
    int stage = 0, r = spawn(j, &req, req.user ? &user : NULL, &stage);
    if (r < 0 && j->pid <= 0) {
        release(j);
        cdn_agent_error(channel, -r, "exec");
        return;
    }
    deliver_held(j);
    if (r < 0) {
        /* The child exists and exits 127; its EXIT is not reported (the ERROR
         * is the request's last frame), so forget it now and reap it unseen. */
        char what[300];
        (void) snprintf(what, sizeof what,
                        stage == 1   ? "working directory '%.200s'"
                        : stage == 3 ? "stdio for '%.200s'"
                        : stage == 4 ? "confining '%.200s'"
                        : stage == 5
                            ? "in-place verifier step refused: /etc/ld.so.preload is writable by the "
                              "sandbox's commands (run it in a clean sibling)"
                        : stage == 6 ? "user: becoming '%.200s'"
                                     : "'%.200s'",
                        stage == 1   ? req.cwd
                        : stage == 6 ? req.user
                                     : req.argv[0]);
        bool shutdown = j->flags & CDN_EXEC_SHUTDOWN_ON_EXIT;
        if (shutdown && (j->flags & CDN_EXEC_STATUS)) /* a shell's convention, which the engines keep */
            shutdown_status = stage == 2 && r == -ENOENT ? 127 : 126;
        release(j);
        if (stage == 5) {
            uint8_t buf[512];
            int n = cdn_errmsg_encode(buf, sizeof buf, -r, what);
            if (n > 0)
                cdn_agent_send(CDN_FRAME_ERROR, channel, buf, (uint32_t) n);
        } else
            cdn_agent_error(channel, -r, what);
        if (shutdown)
            shutdown_due = true;
    } else if (req.flags & CDN_EXEC_PID) {
        uint32_t pid = (uint32_t) j->pid;
        uint8_t le[4] = {(uint8_t) pid, (uint8_t) (pid >> 8), (uint8_t) (pid >> 16), (uint8_t) (pid >> 24)};
        cdn_agent_send(CDN_FRAME_STARTED, channel, le, sizeof le);
    }
}

static void flush_stdin(struct job *j)
{
    while (j->inlen > 0 && j->in >= 0) {
        ssize_t n = write(j->in, j->inbuf, j->inlen);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                j->inlen = 0, j->in_close = true; /* EPIPE: nobody reads it any more */
            break;
        }
        memmove(j->inbuf, j->inbuf + n, j->inlen - (size_t) n);
        j->inlen -= (size_t) n;
    }
    if (j->in_close && j->inlen == 0 && j->in >= 0) {
        if (j->flags & CDN_EXEC_PTY)
            (void) !write(j->in, "\x04", 1); /* end of input on a terminal is ^D, not a close */
        else
            close_fd(&j->in);
    }
}

/* The host asked (CDN_FRAME_SYNC) to hear when it may send more: once little waits, or none can go. */
static void stdin_sync(struct job *j)
{
    if (!j->in_sync || (j->inlen > CDN_STDIN_LOW && j->in >= 0))
        return;
    j->in_sync = false;
    uint32_t room = j->inlen < CDN_STDIN_LOW * 2 ? (uint32_t) (CDN_STDIN_LOW * 2 - j->inlen) : 1;
    uint8_t le[4] = {(uint8_t) room, (uint8_t) (room >> 8), (uint8_t) (room >> 16), (uint8_t) (room >> 24)};
    cdn_agent_send(CDN_FRAME_WINDOW, j->channel, le, sizeof le);
}

void cdn_exec_stdin(uint32_t channel, uint16_t flags, const uint8_t *p, size_t len)
{
    struct job *j = find(channel);
    if (j && (flags & CDN_FRAME_SYNC))
        j->in_sync = true;
    if (!j || j->in < 0 || j->in_close) {
        if (j)
            stdin_sync(j); /* none can go: it is told so at once */
        return;            /* it ended or has no stdin: input for it is dropped */
    }
    if (len == 0) {
        j->in_close = true;
    } else if (j->inlen + len > STDIN_MAX) {
        j->inlen = 0, j->in_close = true;
    } else {
        uint8_t *b = realloc(j->inbuf, j->inlen + len);
        if (!b)
            return;
        memcpy(b + j->inlen, p, len);
        j->inbuf = b;
        j->inlen += len;
    }
    flush_stdin(j);
    stdin_sync(j);
}

void cdn_exec_resize(uint32_t channel, const uint8_t *p, size_t len)
{
    struct job *j = find(channel);
    if (!j || !(j->flags & CDN_EXEC_PTY) || len != 4 || j->out < 0)
        return;
    struct winsize ws = {.ws_row = (unsigned short) (p[0] | p[1] << 8),
                         .ws_col = (unsigned short) (p[2] | p[3] << 8)};
    (void) ioctl(j->out, TIOCSWINSZ, &ws);
}

static void flush_cmd(struct job *j)
{
    while (j->clen > 0 && j->cmd >= 0) {
        ssize_t n = write(j->cmd, j->cbuf, j->clen);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN) {
                j->clen = 0; /* EPIPE: it closed its fd 3 */
                close_fd(&j->cmd);
            }
            break;
        }
        memmove(j->cbuf, j->cbuf + n, j->clen - (size_t) n);
        j->clen -= (size_t) n;
    }
}

/* Bytes for the command's fd 3 (from the host, or init's acknowledgements). More than CONTROL_MAX
 * waiting means it does not read them: its fd 3 is closed, which ends a session's shell. */
static void queue_cmd(struct job *j, const uint8_t *p, size_t len)
{
    if (j->cmd < 0 || len == 0)
        return;
    uint8_t *b = j->clen + len <= CONTROL_MAX ? realloc(j->cbuf, j->clen + len) : NULL;
    if (!b) {
        j->clen = 0;
        close_fd(&j->cmd);
        return;
    }
    memcpy(b + j->clen, p, len);
    j->cbuf = b;
    j->clen += len;
    flush_cmd(j);
}

void cdn_exec_control(uint32_t channel, const uint8_t *p, size_t len)
{
    struct job *j = find(channel);
    if (j && (j->flags & CDN_EXEC_CONTROL))
        queue_cmd(j, p, len);
}

static bool pump(struct job *j, int *fd, uint16_t type);

/* What the command wrote to its fd 4. Its output before that is in the pipes: it goes first, so the
 * host sees output and control records in the order they were written. Each line is acknowledged on
 * fd 3 once sent: a shell that waits for that before running a command (api-session.c's) has none of
 * the command's output taken for what came before its record. */
static void control_read(struct job *j)
{
    if (j->out >= 0)
        (void) pump(j, &j->out, CDN_FRAME_STDOUT);
    if (j->err >= 0)
        (void) pump(j, &j->err, CDN_FRAME_STDERR);
    uint8_t buf[CONTROL_READ];
    ssize_t n;
    do
        n = read(j->ctl, buf, sizeof buf);
    while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN)
        return;
    if (n <= 0) {
        close_fd(&j->ctl);
        return;
    }
    cdn_agent_send(CDN_FRAME_CONTROL, j->channel, buf, (uint32_t) n);
    static const uint8_t acks[CONTROL_READ] = {[0 ... CONTROL_READ - 1] = '\n'};
    size_t lines = 0;
    for (ssize_t i = 0; i < n; i++)
        lines += buf[i] == '\n';
    queue_cmd(j, acks, lines);
}

/* The pids below root in the parent links of /proc (the sandbox's: its pid namespace, a worker's
 * hidepid view, a guest's), that are not in done[0..n); appended to done (grown as needed).
 * Returns how many were new, or -1 when out of memory. */
static int scan_tree(pid_t root, pid_t **done, size_t *n, size_t *cap)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    _cleanup_free_ pid_t(*link)[2] = NULL; /* {pid, parent} of every process */
    size_t nl = 0, capl = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char path[300], buf[512];
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        (void) snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t k = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
        char *rp = k > 0 ? (buf[k] = 0, strrchr(buf, ')')) : NULL; /* the name may hold anything */
        int ppid;
        if (!rp || sscanf(rp, ") %*c %d", &ppid) != 1)
            continue;
        if (nl == capl) {
            void *v = realloc(link, (capl = capl ? capl * 2 : 256) * sizeof *link);
            if (!v)
                break;
            link = v;
        }
        link[nl][0] = (pid_t) atoi(e->d_name);
        link[nl++][1] = ppid;
    }
    (void) closedir(d);
    int added = 0;
    for (bool more = true; more;) { /* until no process's parent is root or one of root's */
        more = false;
        for (size_t i = 0; i < nl; i++) {
            bool in = link[i][0] == root, parent = link[i][1] == root;
            for (size_t k = 0; k < *n && !(in && parent); k++)
                in |= (*done)[k] == link[i][0], parent |= (*done)[k] == link[i][1];
            if (in || !parent)
                continue;
            if (*n == *cap) {
                void *v = realloc(*done, (*cap = *cap ? *cap * 2 : 64) * sizeof **done);
                if (!v)
                    return -1;
                *done = v;
            }
            (*done)[(*n)++] = link[i][0];
            added++, more = true;
        }
    }
    return added;
}

/* SIGKILL for a command (its timeout, a client that left): every process it started, also those
 * that left its process group and session (setsid). Those below it are killed before it, round
 * after round while new ones turn up (a process forking meanwhile): with CDN_EXEC_TREE the command
 * is their subreaper, so a process whose parent dies is still found below it. */
static void kill_tree(struct job *j)
{
    _cleanup_free_ pid_t *done = NULL;
    size_t n = 0, cap = 0;
    /* Stopped first, so that the command does not run on between its children's end and its own
     * (a shell that saw `sleep` killed ran its next command: seen in a guest under TCG). */
    (void) kill(-j->pid, SIGSTOP);
    (void) kill(j->pid, SIGSTOP);
    for (int round = 0; round < 16; round++) {
        size_t from = n;
        if (scan_tree(j->pid, &done, &n, &cap) <= 0)
            break;
        for (size_t i = from; i < n; i++)
            (void) kill(done[i], SIGKILL);
    }
    (void) kill(-j->pid, SIGKILL);
    (void) kill(j->pid, SIGKILL);
}

void cdn_exec_signal(uint32_t channel, int sig)
{
    struct job *j = find(channel);
    if (j && sig == SIGKILL)
        kill_tree(j);
    else if (j)
        (void) kill(-j->pid, sig);
}

void cdn_exec_signal_all(int sig)
{
    bool sent = false;
    for (size_t i = 0; i < MAX_EXECS; i++)
        if (jobs[i].pid > 0) {
            (void) kill(-jobs[i].pid, sig);
            sent = true;
        }
    if (!sent && sig > 0 && sig < 64)
        held_signals |= 1ULL << sig;
}

/* Forward what one of j's output fds holds. Returns false at EOF (fd closed). */
static bool pump(struct job *j, int *fd, uint16_t type)
{
    static uint8_t buf[OUTPUT_CHUNK];
    for (int rounds = 0; rounds < 16; rounds++) { /* bounded: one flood must not starve the rest */
        ssize_t n = read(*fd, buf, sizeof buf);
        if (n > 0) {
            cdn_agent_send(type, j->channel, buf, (uint32_t) n);
            explicit_bzero(buf, (size_t) n); /* a verifier step's output is not kept in init's memory */
            continue;
        }
        if (n < 0 && (errno == EINTR))
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        /* EOF, or EIO: a terminal whose last slave fd closed */
        cdn_agent_send(type, j->channel, NULL, 0);
        close_fd(fd);
        if (fd == &j->out && (j->flags & CDN_EXEC_PTY))
            close_fd(&j->in);
        return false;
    }
    return true;
}

static void report_exit(struct job *j, int status, const struct rusage *ru)
{
    /* What the command wrote before it exited is in the pipes now: send it
     * first. Output of background processes it left behind is not waited for. */
    if (j->out >= 0)
        (void) pump(j, &j->out, CDN_FRAME_STDOUT); /* a pipe holds at most 64 KiB: one pump empties it */
    if (j->err >= 0)
        (void) pump(j, &j->err, CDN_FRAME_STDERR);
    struct cdn_exit_msg m = {
        .exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 0,
        .signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0,
        .user_us = (uint64_t) ru->ru_utime.tv_sec * 1000000 + (uint64_t) ru->ru_utime.tv_usec,
        .sys_us = (uint64_t) ru->ru_stime.tv_sec * 1000000 + (uint64_t) ru->ru_stime.tv_usec,
        .maxrss_kb = (uint64_t) ru->ru_maxrss,
    };
    cdn_vm_usage_report(true); /* a guest's: the host sees the command's OOM or pids hits with its exit */
    uint8_t buf[64];
    int n = cdn_exit_encode(buf, sizeof buf, &m);
    cdn_agent_send(CDN_FRAME_EXIT, j->channel, buf, (uint32_t) n);
    if (j->flags & CDN_EXEC_SHUTDOWN_ON_EXIT)
        shutdown_due = true;
    if ((j->flags & (CDN_EXEC_SHUTDOWN_ON_EXIT | CDN_EXEC_STATUS)) ==
        (CDN_EXEC_SHUTDOWN_ON_EXIT | CDN_EXEC_STATUS))
        shutdown_status = m.signal ? 128 + m.signal : m.exit_code;
    release(j);
}

static bool quiesce_pending;
static uint32_t quiesce_channel;

void cdn_exec_reap(void)
{
    for (;;) {
        int status;
        struct rusage ru;
        pid_t pid = wait4(-1, &status, WNOHANG, &ru);
        /* Every process but us is gone (in a guest: every command; its fanotify process stays). */
        if (quiesce_pending && ((pid < 0 && errno == ECHILD) || (pid == 0 && cdn_vm_commands_gone()))) {
            quiesce_pending = false;
            cdn_verifier_cleanup(); /* before the sandbox is the agent's again */
            cdn_agent_send(CDN_FRAME_DONE, quiesce_channel, NULL, 0);
        }
        if (pid <= 0)
            return;
        for (size_t i = 0; i < MAX_EXECS; i++)
            if (jobs[i].pid == pid)
                report_exit(&jobs[i], status, &ru);
    }
}

void cdn_exec_quiesce(uint32_t channel)
{
    /* From PID 1: every other process of the namespace, orphans and
     * daemons included; one that was forking dies with its fork. A guest
     * kills its cgroup of commands instead (its fanotify process of protected paths
     * lives outside it). */
    if (!cdn_vm_kill_commands())
        (void) kill(-1, SIGKILL);
    quiesce_pending = true;
    quiesce_channel = channel;
    cdn_exec_reap(); /* nothing there: answered at once */
}

void cdn_exec_forget_channels(void)
{
    for (size_t i = 0; i < MAX_EXECS; i++)
        if (jobs[i].pid > 0)
            jobs[i].channel = 0; /* frames on channel 0 are nobody's; find() never matches it */
}

bool cdn_exec_shutdown_due(void)
{
    return shutdown_due;
}

int cdn_exec_shutdown_status(void)
{
    return shutdown_status;
}

static struct {
    struct job *job;
    int *fd;
} polled[MAX_EXECS * POLL_PER_JOB];
static size_t polled_base, polled_n;

void cdn_exec_poll_add(struct pollfd *pfd, size_t *n, size_t max, bool output)
{
    polled_base = *n;
    polled_n = 0;
    for (size_t i = 0; i < MAX_EXECS; i++) {
        struct job *j = &jobs[i];
        if (j->pid <= 0)
            continue;
        int *fds[] = {&j->out, &j->err, &j->ctl, &j->in, &j->cmd};
        for (size_t k = 0; k < POLL_PER_JOB && *n < max; k++) {
            bool write_end = k >= 3;
            if (*fds[k] < 0 || (k == 3 && j->inlen == 0) || (k == 4 && j->clen == 0) ||
                (!write_end && !output))
                continue;
            pfd[*n] = (struct pollfd){.fd = *fds[k], .events = write_end ? POLLOUT : POLLIN};
            polled[polled_n++] = (typeof(polled[0])){j, fds[k]};
            (*n)++;
        }
    }
}

void cdn_exec_poll_handle(const struct pollfd *pfd, size_t n)
{
    for (size_t i = 0; i < polled_n && polled_base + i < n; i++) {
        const struct pollfd *p = &pfd[polled_base + i];
        struct job *j = polled[i].job;
        int *fd = polled[i].fd;
        if (!p->revents || j->pid <= 0 || *fd != p->fd)
            continue; /* the job ended while handling an earlier entry */
        if (fd == &j->in) {
            flush_stdin(j);
            stdin_sync(j);
        } else if (fd == &j->cmd)
            flush_cmd(j);
        else if (fd == &j->ctl)
            control_read(j);
        else
            (void) pump(j, fd, fd == &j->out ? CDN_FRAME_STDOUT : CDN_FRAME_STDERR);
    }
}
