/* cordon-worker: calls (the process tier's `call`; docs/process.md).
 *
 * The worker's agent never runs a caller's code itself. Its child, the call
 * server, does: a clone of the agent's untouched interpreter that runs one
 * call at a time and, between calls, scrubs what a call may have left behind
 * (its modules' and builtins' dicts, os.environ, sys.path and the like, signal
 * handlers, the working directory, fds, its files, its child processes). A
 * server whose state cannot be put back (a thread still running, a call that
 * asked for a fresh interpreter, 1000 calls served) exits after answering, and
 * the next call gets a new clone of the agent, which costs one fork.
 *
 * The server leads a process group that none of its descendants can leave:
 * seccomp refuses it and them setsid, setpgid and any uid or gid change. A
 * call that leaves a process behind costs the server (it exits after
 * answering), and the agent kills the group; a call that overruns its
 * timeout is killed with the group at once. The server's writes go only
 * beneath call/ (a second Landlock layer), which is emptied after each call;
 * it reads the sandbox's work directory. */
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "init.h"
#include "shared/fd-util.h"
#include "tiers/container/landlock.h"
#include "worker-call.h"

#define QUEUE_MAX  64
#define RESULT_MAX (CDN_FRAME_MAX - 64)

/* The call server, in Python: compiled once in the zygote. */
static const char server_py[] =
#include "worker-server.py.h"
    ;

static struct {
    char dir[256];
    bool python;
    struct sock_fprog filter; /* the server's: no uid, gid, session or process group changes */
    pid_t server;             /* 0: none */
    int fd;                   /* the agent's end of the server's socket */
    uint32_t channel;         /* the call running, 0: none */
    int64_t deadline;         /* ms, CLOCK_MONOTONIC; 0: none */
    uint32_t timeout_ms;
    uint8_t *res;
    size_t reslen;
    struct {
        uint32_t channel;
        uint8_t *p;
        size_t len;
    } queue[QUEUE_MAX];
    size_t qhead, qlen;
} w = {.fd = -1};

/* ---- the interpreter ---- */

/* Dicts to watch (a module's, builtins', sys.modules, os.environ's) and their version tags at the
 * last snapshot: Python 3.11 gives every dict a tag that changes with each mutation, so telling
 * whether a call touched one is an integer compare. */
static PyObject *watched;
static uint64_t *tags;
static Py_ssize_t ntags;

static uint64_t dict_tag(PyObject *d)
{
#if PY_VERSION_HEX < 0x030c0000
    return ((PyDictObject *) d)->ma_version_tag;
#else
#error "the call server's scrub needs dict version tags (Python 3.11); port it to dict watchers"
#endif
}

static PyObject *native_snapshot(PyObject *self, PyObject *list)
{
    (void) self;
    if (!PyList_Check(list))
        return PyErr_Format(PyExc_TypeError, "snapshot: a list of dicts");
    Py_ssize_t n = PyList_GET_SIZE(list);
    uint64_t *t = realloc(tags, (size_t) (n ? n : 1) * sizeof *t);
    if (!t)
        return PyErr_NoMemory();
    tags = t;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyList_GET_ITEM(list, i);
        if (!PyDict_Check(d))
            return PyErr_Format(PyExc_TypeError, "snapshot: item %zd is not a dict", i);
        tags[i] = dict_tag(d);
    }
    Py_INCREF(list);
    Py_XSETREF(watched, list);
    ntags = n;
    Py_RETURN_NONE;
}

static PyObject *native_changed(PyObject *self, PyObject *unused)
{
    (void) self, (void) unused;
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out && watched && i < ntags && i < PyList_GET_SIZE(watched); i++)
        if (dict_tag(PyList_GET_ITEM(watched, i)) != tags[i]) {
            PyObject *k = PyLong_FromSsize_t(i);
            if (!k || PyList_Append(out, k) < 0)
                Py_CLEAR(out);
            Py_XDECREF(k);
        }
    return out;
}

static PyObject *native_memfd(PyObject *self, PyObject *name)
{
    (void) self;
    const char *s = PyUnicode_AsUTF8(name);
    if (!s)
        return NULL;
    int fd = memfd_create(s, 0);
    return fd < 0 ? PyErr_SetFromErrno(PyExc_OSError) : PyLong_FromLong(fd);
}

static PyMethodDef native_methods[] = {
    {"snapshot", native_snapshot, METH_O, "remember the version tags of a list of dicts"},
    {"changed", native_changed, METH_NOARGS, "indices of the dicts changed since the snapshot"},
    {"memfd", native_memfd, METH_O, "memfd_create(name)"},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_cordon_native", NULL, -1, native_methods, NULL, NULL, NULL, NULL};
static PyObject *native_init(void)
{
    return PyModule_Create(&native_module);
}

int worker_python_init(struct cdn_error *err)
{
    if (PyImport_AppendInittab("_cordon_native", native_init) < 0)
        return cdn_error_set(err, ENOMEM, "python: register the native module");
    PyConfig cfg;
    PyConfig_InitIsolatedConfig(&cfg);
    cfg.install_signal_handlers = 0;
    cfg.write_bytecode = 0;
    cfg.site_import = 1;
    /* The libpython's own stdlib, not whatever `python3` comes first in PATH (a pyenv's, say,
     * which Landlock would then refuse to read from). */
    PyStatus st = PyConfig_SetBytesString(&cfg, &cfg.home, CDN_PYTHON_HOME);
    if (!PyStatus_Exception(st))
        st = Py_InitializeFromConfig(&cfg);
    PyConfig_Clear(&cfg);
    if (PyStatus_Exception(st))
        return cdn_error_set(err, EIO, "python: start the interpreter: %s", st.err_msg ? st.err_msg : "?");
    PyObject *m = PyImport_AddModule("_cordon_server"); /* borrowed; in sys.modules */
    PyObject *d = m ? PyModule_GetDict(m) : NULL;
    PyObject *r = d ? PyRun_String(server_py, Py_file_input, d, d) : NULL;
    if (!r) {
        PyErr_Print();
        return cdn_error_set(err, EIO, "python: load the call server");
    }
    Py_DECREF(r);
    return 0;
}

void worker_python_before_fork(void)
{
    PyOS_BeforeFork();
}

void worker_python_after_fork(void)
{
    PyOS_AfterFork_Child();
}

void worker_python_after_fork_parent(void)
{
    PyOS_AfterFork_Parent();
}

/* ---- the agent's side ---- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void worker_call_setup(const char *dir, bool python)
{
    (void) snprintf(w.dir, sizeof w.dir, "%s", dir);
    w.python = python;
    static const int nrs[] = {SCMP_SYS(setuid),   SCMP_SYS(setgid),    SCMP_SYS(setreuid),
                              SCMP_SYS(setregid), SCMP_SYS(setresuid), SCMP_SYS(setresgid),
                              SCMP_SYS(setfsuid), SCMP_SYS(setfsgid),  SCMP_SYS(setgroups),
                              SCMP_SYS(setsid),   SCMP_SYS(setpgid)};
    if (python && cdn_worker_filter(nrs, sizeof nrs / sizeof nrs[0], &w.filter) < 0)
        w.python = false; /* calls then fail with a clear error; commands still run */
}

void agent_exec_env(void)
{
    /* The spec's HOME is a container's /root, which is the host's here: the work directory instead. */
    if (w.dir[0])
        (void) setenv("HOME", "/workspace", 1);
}

/* The server's process, from the agent's fork to Python: never returns. */
static _Noreturn void server_main(int sock)
{
    char call[300];
    (void) snprintf(call, sizeof call, "%s/call", w.dir);
    static const char *const devices[] = {"/dev", NULL};
    const char *const own[] = {call, NULL};
    const char *step = "stdin";
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    bool ok = devnull >= 0 && dup2(devnull, 0) >= 0 && dup2(sock, 3) >= 0 &&
              syscall(SYS_close_range, 4, ~0U, 0) >= 0;
    if (ok && !(step = "its process group", setpgid(0, 0) >= 0))
        ok = false;
    if (ok &&
        !(step = "prctl", prctl(PR_SET_CHILD_SUBREAPER, 1) >= 0 && prctl(PR_SET_PDEATHSIG, SIGKILL) >= 0))
        ok = false;
    if (ok && !(step = call, chdir(call) >= 0 && !setenv("HOME", call, 1) && !setenv("TMPDIR", call, 1)))
        ok = false;
    if (ok && !(step = "landlock", cdn_landlock_restrict_writes(own, devices) >= 0))
        ok = false;
    if (ok && !(step = "seccomp", prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &w.filter) >= 0))
        ok = false;
    if (!ok) { /* to the worker's stderr (cordond's log, cordon run's terminal); the call gets WorkerDied */
        dprintf(2, "cordon-worker: the call server could not start: %s: %m\n", step);
        _exit(111);
    }
    /* fds 1 and 2: memfds the server reads back after each call (Python makes them). */
    PyOS_AfterFork_Child();
    int r = PyRun_SimpleString("import _cordon_server; _cordon_server.serve(3)");
    _exit(r == 0 ? 0 : 112);
}

static int start_server(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    PyOS_BeforeFork();
    pid_t pid = fork();
    if (pid == 0) {
        (void) close(sv[0]);
        server_main(sv[1]);
    }
    int e = errno;
    PyOS_AfterFork_Parent();
    (void) close(sv[1]);
    if (pid < 0) {
        (void) close(sv[0]);
        return -e;
    }
    (void) setpgid(pid, pid); /* whichever of the two comes first */
    w.server = pid;
    w.fd = sv[0];
    return 0;
}

/* The server is gone or must go: its process group (the call's processes) with it. exec_reap()
 * reaps it; what it left behind is reparented to the host's init, which reaps them. */
static void drop_server(void)
{
    if (w.server > 0) {
        (void) kill(-w.server, SIGKILL);
        (void) kill(w.server, SIGKILL);
    }
    if (w.fd >= 0)
        (void) close(w.fd);
    w.fd = -1;
    w.server = 0;
}

static void send_failure(const char *type, const char *msg, bool timed_out)
{
    char buf[1024];
    int n = snprintf(buf, sizeof buf,
                     "{\"result\":null,\"stdout\":\"\",\"stderr\":\"\",\"error\":{\"type\":\"%s\","
                     "\"message\":\"%s\",\"traceback\":\"\"},\"duration_ms\":null,\"timed_out\":%s}",
                     type, msg, timed_out ? "true" : "false");
    agent_send(CDN_FRAME_RESULT, w.channel, buf, (uint32_t) n);
}

/* Both parts to the server. The socket is non-blocking (poll watches it); a request that does not
 * fit in it at once waits here for the server, which reads as we write. */
static int send_all(struct iovec iov[2])
{
    size_t i = 0;
    while (i < 2) {
        struct msghdr mh = {.msg_iov = iov + i, .msg_iovlen = 2 - i};
        ssize_t n = sendmsg(w.fd, &mh, MSG_NOSIGNAL);
        if (n < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = w.fd, .events = POLLOUT};
            if (poll(&p, 1, -1) < 0 && errno != EINTR)
                return -errno;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        while (i < 2 && (size_t) n >= iov[i].iov_len)
            n -= (ssize_t) iov[i++].iov_len;
        if (i < 2) {
            iov[i].iov_base = (uint8_t *) iov[i].iov_base + n;
            iov[i].iov_len -= (size_t) n;
        }
    }
    return 0;
}

static void next_call(void);

static void finish(void)
{
    w.channel = 0;
    w.deadline = 0;
    w.reslen = 0;
    next_call();
}

static void run(uint32_t channel, const uint8_t *p, size_t len)
{
    w.channel = channel;
    if (!w.python) {
        agent_error(channel, EOPNOTSUPP, "call: this sandbox's runtime has no interpreter (runtime shell)");
        w.channel = 0;
        return;
    }
    if (w.server == 0 && start_server() < 0) {
        agent_error(channel, errno, "call: start the interpreter");
        w.channel = 0;
        return;
    }
    uint32_t timeout_ms, flags;
    memcpy(&timeout_ms, p, 4);
    memcpy(&flags, p + 4, 4);
    uint32_t hdr[2] = {(uint32_t) (len - CDN_CALL_FIXED), flags};
    struct iovec iov[2] = {{hdr, sizeof hdr}, {(void *) (p + CDN_CALL_FIXED), len - CDN_CALL_FIXED}};
    int r = send_all(iov);
    if (r < 0) {
        drop_server();
        send_failure("WorkerDied", "the interpreter was gone before the call; a fresh one serves the next",
                     false);
        finish();
        return;
    }
    w.timeout_ms = timeout_ms;
    w.deadline = timeout_ms ? now_ms() + timeout_ms : 0;
}

static void next_call(void)
{
    while (!w.channel && w.qlen) {
        size_t i = w.qhead;
        w.qhead = (w.qhead + 1) % QUEUE_MAX;
        w.qlen--;
        run(w.queue[i].channel, w.queue[i].p, w.queue[i].len);
        free(w.queue[i].p);
    }
}

void call_start(uint32_t channel, const uint8_t *p, size_t len)
{
    if (len < CDN_CALL_FIXED) {
        agent_error(channel, EBADMSG, "call request");
        return;
    }
    if (!w.channel) {
        run(channel, p, len);
        return;
    }
    if (w.qlen == QUEUE_MAX) {
        agent_error(channel, EAGAIN, "call: 64 calls already wait in this sandbox");
        return;
    }
    size_t i = (w.qhead + w.qlen) % QUEUE_MAX;
    w.queue[i].p = malloc(len);
    if (!w.queue[i].p) {
        agent_error(channel, ENOMEM, "call");
        return;
    }
    memcpy(w.queue[i].p, p, len);
    w.queue[i].len = len;
    w.queue[i].channel = channel;
    w.qlen++;
}

void call_poll_add(struct pollfd *pfd, size_t *n, size_t max)
{
    if (w.fd >= 0 && *n < max)
        pfd[(*n)++] = (struct pollfd){.fd = w.fd, .events = POLLIN};
}

int call_timeout_ms(void)
{
    if (!w.channel || !w.deadline)
        return -1;
    int64_t left = w.deadline - now_ms();
    return left < 0 ? 0 : (int) (left > 60000 ? 60000 : left);
}

/* What the server sent: u32 length | u32 flags | JSON. Returns 1 once a whole answer is in. */
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
        ssize_t n = read(w.fd, w.res + w.reslen, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0)
            return n < 0 ? -errno : -EPIPE;
        w.reslen += (size_t) n;
    }
}

void call_poll_handle(const struct pollfd *pfd, size_t n)
{
    bool readable = false;
    for (size_t i = 0; i < n; i++)
        if (w.fd >= 0 && pfd[i].fd == w.fd && pfd[i].revents)
            readable = true;
    if (readable && !w.channel) {
        /* Between calls: the server ended (it discards itself after answering, or died). */
        drop_server();
        return;
    }
    if (readable) {
        int r = read_answer();
        if (r == 1) {
            uint32_t len, flags;
            memcpy(&len, w.res, 4);
            memcpy(&flags, w.res + 4, 4);
            agent_send(CDN_FRAME_RESULT, w.channel, w.res + 8, len);
            if (flags & 1)
                drop_server(); /* it leaves (dirty, fresh, or worn): with what the call left running */
            finish();
            return;
        }
        if (r < 0) {
            drop_server();
            send_failure("WorkerDied",
                         "the interpreter ended during the call (os._exit, a crash or the memory limit); "
                         "a fresh one serves the next call",
                         false);
            finish();
            return;
        }
    }
    if (w.channel && w.deadline && now_ms() >= w.deadline) {
        drop_server();
        char msg[160];
        (void) snprintf(msg, sizeof msg,
                        "the call ran past its timeout (%u ms); it was killed with its processes "
                        "and a fresh interpreter serves the next call",
                        w.timeout_ms);
        send_failure("TimeoutError", msg, true);
        finish();
    }
}
