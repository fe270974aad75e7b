/* cordon-worker: calls, the agent's side (the process tier's `call`; docs/process.md).
 *
 * The agent never runs a caller's code, nor clones a process that will: an
 * executor does, a clone of the sandbox's call template (worker-template.c),
 * which was cloned before the agent read its first frame. Each executor has a
 * socket of its own to the agent; nothing else holds its other end.
 * - A call with `fresh` gets an executor made for it alone. Before it is
 *   cloned, the executor before it is ended with everything that executor
 *   started; after its answer, it is ended the same way.
 * - Other calls share one executor, which scrubs between calls
 *   (worker-server.py) and leaves when it cannot. After each call the agent
 *   checks for itself that the call left no process behind: it moves the
 *   executor into the template's process group for a moment and asks the
 *   kernel whether anything is left in the executor's own (kill(-pgid, 0)).
 *   If anything is, the group is killed and the next call gets a new executor.
 * Ending an executor kills its process group, which nothing it started can
 * leave (its seccomp filter refuses setsid and setpgid), and the template's
 * group, where a process forked during that moment would be; the template
 * itself cannot be signalled from here (its uids). So everything a call
 * started ends with its executor, forked or exec'd, wherever it was
 * reparented.
 *
 * Executors are the agent's children (CLONE_PARENT) without an exit signal:
 * cdn_exec_reap() never reaps them. This file does, once it has killed their
 * group, so the pid that names a group is never another process's while the
 * group may still be signalled. Everything here trusts nothing an executor
 * sends beyond relaying it as the answer of the call that runs. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "init.h"
#include "worker-call.h"
#include "shared/macro.h"

#define QUEUE_MAX        64
#define RESULT_MAX       (CDN_FRAME_MAX - 64)
#define DYING_MAX        16
#define SPAWN_TIMEOUT_MS 10000
#define REAP_POLL_MS     20

struct executor {
    pid_t pid;   /* 0: none */
    int fd;      /* the agent's end of its socket (non-blocking) */
    uint32_t id; /* its directory: <dir>/call/<id> */
    bool fresh;
};

static struct {
    char dir[256];
    bool python;
    char broken[200]; /* why calls cannot run ("" when they can) */
    struct worker_template tmpl;
    struct executor ex;
    struct {
        pid_t pid;
        uint32_t id;
    } dying[DYING_MAX]; /* killed, not yet reaped */
    size_t ndying;
    uint32_t next_id;
    uint32_t channel; /* the call running, 0: none */
    int64_t deadline; /* ms, CLOCK_MONOTONIC; 0: none */
    uint32_t timeout_ms;
    uint8_t *req; /* the request on its way to the executor */
    size_t reqlen, reqoff;
    uint8_t *res;
    size_t reslen;
    struct {
        uint32_t channel;
        uint8_t *p;
        size_t len;
    } queue[QUEUE_MAX];
    size_t qhead, qlen;
} w = {.ex.fd = -1, .tmpl.ctl = -1};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void cdn_worker_call_setup(const char *dir, uint32_t uid, bool python)
{
    (void) snprintf(w.dir, sizeof w.dir, "%s", dir);
    w.python = python;
    if (!python)
        return;
    struct cdn_error err = {0};
    if (cdn_worker_template_start(uid, &w.tmpl, &err) < 0) /* calls then fail with why; commands still run */
        (void) snprintf(w.broken, sizeof w.broken, "%s", err.msg);
}

void cdn_agent_exec_env(void)
{
    /* The spec's HOME is a container's /root, which is the host's here: the work directory instead. */
    if (w.dir[0])
        (void) setenv("HOME", "/workspace", 1);
}

/* ---- executors ---- */

static void executor_dir(uint32_t id, char *buf, size_t size)
{
    (void) snprintf(buf, size, "%s/call/%u", w.dir, id);
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void) st, (void) ftw;
    (void) (type == FTW_DP ? rmdir(path) : unlink(path));
    return 0; /* on with the rest: what cannot go stays in the sandbox's own tmpfs */
}

/* A dead executor's directory (its files are the sandbox's, written by its calls). */
static void remove_dir(uint32_t id)
{
    char d[320];
    executor_dir(id, d, sizeof d);
    if (rmdir(d) < 0 && errno == ENOTEMPTY)
        (void) nftw(d, remove_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* Reap the ended executors that are gone (block: wait for the oldest too). */
static void reap(bool block)
{
    size_t j = 0;
    for (size_t i = 0; i < w.ndying; i++) {
        siginfo_t si = {0};
        int opts = WEXITED | __WALL | (block && i == 0 ? 0 : WNOHANG);
        int r;
        do
            r = waitid(P_PID, (id_t) w.dying[i].pid, &si, opts);
        while (r < 0 && errno == EINTR);
        if ((r == 0 && si.si_pid) || (r < 0 && errno == ECHILD))
            remove_dir(w.dying[i].id);
        else
            w.dying[j++] = w.dying[i];
    }
    w.ndying = j;
}

/* The executor and everything it started. Its pid is still ours (unreaped), so its group is too. */
static void end_executor(void)
{
    if (w.ex.pid <= 0)
        return;
    (void) kill(-w.ex.pid, SIGKILL);
    (void) kill(w.ex.pid, SIGKILL); /* should it be in the template's group just now */
    if (w.tmpl.pid > 0)
        (void) kill(-w.tmpl.pid, SIGKILL); /* what it forked while there; not the template (its uids) */
    (void) close(w.ex.fd);
    if (w.ndying == DYING_MAX)
        reap(true);
    w.dying[w.ndying].pid = w.ex.pid;
    w.dying[w.ndying++].id = w.ex.id;
    w.ex = (struct executor){.fd = -1};
}

/* Whether the executor is alone in its process group: anything else there is what its last call
 * left (forked, exec'd, reparented or not). It leaves its group for the template's for a moment;
 * no process of the sandbox can signal the template, and what is left in its group cannot leave. */
static bool alone(void)
{
    if (setpgid(w.ex.pid, w.tmpl.pid) < 0) /* EACCES: it exec'd; it is not ours any more */
        return false;
    bool empty = kill(-w.ex.pid, 0) < 0 && errno == ESRCH;
    return setpgid(w.ex.pid, w.ex.pid) == 0 && empty;
}

static int make_executor(bool fresh, char *why, size_t size)
{
    if (w.broken[0]) {
        (void) snprintf(why, size, "%s", w.broken);
        return -EIO;
    }
    uint32_t id = ++w.next_id;
    char d[320];
    executor_dir(id, d, sizeof d);
    if (mkdir(d, 0700) < 0 && (errno != EEXIST || (remove_dir(id), mkdir(d, 0700) < 0))) {
        (void) snprintf(why, size, "make %s: %s", d, strerror(errno));
        return -EIO;
    }
    _cleanup_close_pair_ int sv[2] = {-EBADF, -EBADF};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        (void) snprintf(why, size, "socketpair: %s", strerror(errno));
        (void) rmdir(d);
        return -EIO;
    }
    (void) fcntl(sv[0], F_SETFL, O_NONBLOCK | O_RDWR); /* ours only: the executor reads blocking */
    int pid = cdn_worker_template_spawn(&w.tmpl, d, sv[1], fresh, SPAWN_TIMEOUT_MS);
    sv[1] = safe_close(sv[1]); /* the executor's (a copy went with the spawn request) */
    if (pid <= 0) {
        sv[0] = safe_close(sv[0]);
        (void) rmdir(d);
        if (pid == -EPIPE) { /* it is gone (only root or the OOM killer can end it): so are calls */
            cdn_worker_template_stop(&w.tmpl);
            (void) snprintf(w.broken, sizeof w.broken, "the sandbox's call template is gone");
        }
        (void) snprintf(why, size, "%s", pid == -EPIPE ? w.broken : strerror(pid ? -pid : EIO));
        return -EIO;
    }
    (void) setpgid(pid, pid); /* whichever of the two comes first */
    w.ex = (struct executor){.pid = pid, .fd = TAKE_FD(sv[0]), .id = id, .fresh = fresh};
    return 0;
}

/* ---- one call ---- */

static void send_failure(const char *type, const char *msg, bool timed_out)
{
    char text[256], buf[1024];
    size_t j = 0;
    for (const char *c = msg; *c && j < sizeof text - 1; c++) /* a path or strerror(): no escapes needed */
        text[j++] = *c == '"' || *c == '\\' || (unsigned char) *c < 0x20 ? '?' : *c;
    text[j] = 0;
    int n = snprintf(buf, sizeof buf,
                     "{\"result\":null,\"stdout\":\"\",\"stderr\":\"\",\"error\":{\"type\":\"%s\","
                     "\"message\":\"%s\",\"traceback\":\"\"},\"duration_ms\":null,\"timed_out\":%s}",
                     type, text, timed_out ? "true" : "false");
    cdn_agent_send(CDN_FRAME_RESULT, w.channel, buf,
                   (uint32_t) (n < (int) sizeof buf ? n : (int) sizeof buf - 1));
}

static void drop_request(void)
{
    if (w.req)
        explicit_bzero(w.req, w.reqlen); /* a grader's input, say: not kept in the agent */
    free(w.req);
    w.req = NULL;
    w.reqlen = w.reqoff = 0;
}

static void next_call(void);

static void finish(void)
{
    drop_request();
    if (w.res)
        explicit_bzero(w.res, w.reslen);
    w.channel = 0;
    w.deadline = 0;
    w.reslen = 0;
    next_call();
}

static void fail(const char *type, const char *msg, bool timed_out)
{
    end_executor();
    send_failure(type, msg, timed_out);
    finish();
}

/* As much of the request as the socket takes now; the rest when poll says it may. */
static void send_some(void)
{
    while (w.reqoff < w.reqlen) {
        ssize_t n = send(w.ex.fd, w.req + w.reqoff, w.reqlen - w.reqoff, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            fail("WorkerDied", "the interpreter was gone before the call; a fresh one serves the next",
                 false);
            return;
        }
        w.reqoff += (size_t) n;
    }
}

static void run(uint32_t channel, const uint8_t *p, size_t len)
{
    w.channel = channel;
    if (!w.python) {
        cdn_agent_error(channel, EOPNOTSUPP,
                        "call: this sandbox's runtime has no interpreter (runtime shell)");
        w.channel = 0;
        return;
    }
    uint32_t timeout_ms, flags;
    memcpy(&timeout_ms, p, 4);
    memcpy(&flags, p + 4, 4);
    bool fresh = flags & CDN_CALL_FRESH;
    /* A fresh call: nothing an earlier call started exists when its executor is cloned. */
    if (fresh || w.ex.fresh)
        end_executor();
    char why[240];
    if (w.ex.pid <= 0 && make_executor(fresh, why, sizeof why) < 0) {
        send_failure("WorkerStartError", why, false);
        finish();
        return;
    }
    uint32_t hdr[2] = {(uint32_t) (len - CDN_CALL_FIXED), flags};
    if (!(w.req = malloc(sizeof hdr + len - CDN_CALL_FIXED))) {
        fail("WorkerStartError", "out of memory", false);
        return;
    }
    memcpy(w.req, hdr, sizeof hdr);
    memcpy(w.req + sizeof hdr, p + CDN_CALL_FIXED, len - CDN_CALL_FIXED);
    w.reqlen = sizeof hdr + len - CDN_CALL_FIXED;
    w.timeout_ms = timeout_ms;
    w.deadline = timeout_ms ? now_ms() + timeout_ms : 0;
    send_some();
}

static void next_call(void)
{
    while (!w.channel && w.qlen) {
        size_t i = w.qhead;
        w.qhead = (w.qhead + 1) % QUEUE_MAX;
        w.qlen--;
        run(w.queue[i].channel, w.queue[i].p, w.queue[i].len);
        explicit_bzero(w.queue[i].p, w.queue[i].len);
        free(w.queue[i].p);
    }
}

void cdn_call_start(uint32_t channel, const uint8_t *p, size_t len)
{
    if (len < CDN_CALL_FIXED) {
        cdn_agent_error(channel, EBADMSG, "call request");
        return;
    }
    if (!w.channel) {
        run(channel, p, len);
        return;
    }
    if (w.qlen == QUEUE_MAX) {
        cdn_agent_error(channel, EAGAIN, "call: 64 calls already wait in this sandbox");
        return;
    }
    size_t i = (w.qhead + w.qlen) % QUEUE_MAX;
    w.queue[i].p = malloc(len);
    if (!w.queue[i].p) {
        cdn_agent_error(channel, ENOMEM, "call");
        return;
    }
    memcpy(w.queue[i].p, p, len);
    w.queue[i].len = len;
    w.queue[i].channel = channel;
    w.qlen++;
}

void cdn_call_quiesce(void)
{
    /* Nothing of the agent's may run beside a verifier step, which may read the protected paths:
     * the call that runs ends here, and those that wait are refused, not run once it is quiet. */
    static const char msg[] = "the sandbox's processes were ended for a verifier step; the call did not run "
                              "to its end";
    end_executor();
    if (w.channel)
        send_failure("WorkerDied", msg, false);
    while (w.qlen) {
        size_t i = w.qhead;
        w.qhead = (w.qhead + 1) % QUEUE_MAX;
        w.qlen--;
        w.channel = w.queue[i].channel;
        send_failure("WorkerDied", msg, false);
        explicit_bzero(w.queue[i].p, w.queue[i].len);
        free(w.queue[i].p);
    }
    drop_request();
    if (w.res)
        explicit_bzero(w.res, w.reslen);
    w.channel = 0;
    w.deadline = 0;
    w.reslen = 0;
}

void cdn_call_poll_add(struct pollfd *pfd, size_t *n, size_t max)
{
    if (w.ex.fd >= 0 && *n < max)
        pfd[(*n)++] = (struct pollfd){.fd = w.ex.fd, .events = POLLIN | (w.reqoff < w.reqlen ? POLLOUT : 0)};
}

int cdn_call_timeout_ms(void)
{
    int t = w.ndying ? REAP_POLL_MS : -1; /* an ended executor is reaped once it is gone */
    if (!w.channel || !w.deadline)
        return t;
    int64_t left = w.deadline - now_ms();
    int d = left < 0 ? 0 : (int) (left > 60000 ? 60000 : left);
    return t >= 0 && t < d ? t : d;
}

/* What the executor sent: u32 length | u32 flags | JSON. Returns 1 once a whole answer is in. */
static int read_answer(void)
{
    if (!w.res && !(w.res = malloc(8 + RESULT_MAX)))
        return -ENOMEM;
    for (;;) {
        size_t want = 8;
        if (w.reslen >= 8) {
            uint32_t len;
            memcpy(&len, w.res, 4);
            if (len == 0 || len > RESULT_MAX)
                return -EBADMSG;
            want = 8 + (size_t) len;
            if (w.reslen > want)
                return -EBADMSG; /* more than one answer: not a server of ours */
        }
        if (w.reslen == want && want > 8)
            return 1;
        /* As much as there is (the header and its JSON usually come in one read). */
        size_t room = want > 8 ? want - w.reslen : 8 + RESULT_MAX - w.reslen;
        ssize_t n = read(w.ex.fd, w.res + w.reslen, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0)
            return n < 0 ? -errno : -EPIPE;
        w.reslen += (size_t) n;
    }
}

static void answered(void)
{
    uint32_t len, flags;
    memcpy(&len, w.res, 4);
    memcpy(&flags, w.res + 4, 4);
    cdn_agent_send(CDN_FRAME_RESULT, w.channel, w.res + 8, len);
    /* Before the next call: an executor that leaves (dirty, worn), ran a fresh call, or left a
     * process behind goes, with what it started. */
    if (w.ex.fresh || (flags & 1) || !alone())
        end_executor();
    finish();
}

void cdn_call_poll_handle(const struct pollfd *pfd, size_t n)
{
    if (w.ndying)
        reap(false);
    short ev = 0;
    const int fd = w.ex.fd;
    for (size_t i = 0; i < n; i++)
        if (fd >= 0 && pfd[i].fd == fd)
            ev = pfd[i].revents;
    if (ev && !w.channel) {
        end_executor(); /* between calls: it ended (QUIESCE, a signal), or sends what nobody asked */
        return;
    }
    if (ev & POLLOUT)
        send_some(); /* which may end it, and start the next call on another */
    if (w.channel && fd >= 0 && w.ex.fd == fd && (ev & (POLLIN | POLLHUP | POLLERR))) {
        int r = read_answer();
        if (r == 1) {
            answered();
            return;
        }
        if (r < 0) {
            fail("WorkerDied",
                 "the interpreter ended during the call (os._exit, a crash or the memory limit); "
                 "a fresh one serves the next call",
                 false);
            return;
        }
    }
    if (w.channel && w.deadline && now_ms() >= w.deadline) {
        char msg[160];
        (void) snprintf(msg, sizeof msg,
                        "the call ran past its timeout (%u ms); it was killed with its processes "
                        "and a fresh interpreter serves the next call",
                        w.timeout_ms);
        fail("TimeoutError", msg, true);
    }
}
