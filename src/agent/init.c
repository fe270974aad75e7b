/* cordon-init: PID 1 of every sandbox (the in-sandbox agent).
 *
 * Runs inside all of the sandbox's namespaces, already confined: no
 * capabilities, no_new_privs, seccomp and landlock applied by the setup child
 * that exec'd it. It trusts nothing it reads from the sandbox; it trusts the
 * frames on fd 3, the agent socket whose other end the host holds, as far as
 * their meaning goes, and still decodes them as hostile input.
 *
 * fds on entry: 0-2 the sandbox's stdio (for commands without
 * CDN_EXEC_PIPES), 3 the agent socket. Everything else is closed. Its jobs:
 * start commands (init-exec.c), serve file operations (init-files.c), forward
 * signals, reap every process (orphans included), report exits.
 *
 * A frame that does not decode ends the connection (with an ERROR on channel
 * 0 first), never init itself by a crash. In a one-shot sandbox (cordon run)
 * nobody can reach init once its connection is gone, so it exits, and the
 * kernel tears the pid namespace down with everything in it. A persistent
 * sandbox (cordond's) also has fd 7, a listening unix socket whose path only
 * host root can reach, and fd 8, its slot lock, which init holds for its
 * whole life: there init carries on without a host and takes the next
 * connection that arrives (a restarted cordond); a new connection replaces
 * the old one. Output and exits that happen while no host is connected are lost. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "init.h"

#define MAX_POLL                                                                                             \
    (5 + 5 * 256 + 256 + 64) /* connection, signals, listener, a call, inotify, 5 per command, a guest's     \
                                seccomp listeners, port relays */

/* The connection. Non-blocking both ways: frames from the host are assembled
 * in inbuf, frames to it queue in out and go as the socket takes them. While
 * out holds more than OUT_LOW, commands' output is not read (they block on
 * their pipes: backpressure); past OUT_HIGH (a big file read) init waits for
 * the host to take some, which a live host always does. */
#define OUT_LOW  (1u << 20)
#define OUT_HIGH (4u << 20)

static int conn = AGENT_FD; /* -1 once closed */
static int listener = -1;   /* persistent sandboxes: CDN_FD_LISTEN */
static int guest_port = -1; /* a VM guest: the agent port, which stays open while no host is there */
static uint8_t inbuf[CDN_FRAME_HEADER + CDN_FRAME_MAX];
static size_t inlen;
static uint8_t *out;
static size_t outlen, outcap;
/* A VM guest held for a memory checkpoint (CDN_FRAME_HOLD): nothing goes out, no command's output is
 * read, until the host lets go (or hangs up). */
static bool held;
static struct timespec held_since;

static const int forwarded[] = {SIGHUP,  SIGINT,   SIGQUIT, SIGTERM, SIGUSR1,
                                SIGUSR2, SIGWINCH, SIGCONT, SIGALRM};

static void close_conn(void)
{
    if (conn >= 0 && guest_port >= 0) {
        /* A VM guest's port is not closed when the host hangs up: the next host (a restarted
         * cordond) arrives on it. What runs keeps running, unreported, as with a new connection. */
        cdn_exec_forget_channels();
    } else if (conn >= 0)
        (void) close(conn);
    conn = -1;
    outlen = inlen = 0;
    if (held)
        cdn_vm_hold_commands(false);
    held = false;
    cdn_files_reset();
}

/* A VM guest whose host hung up: whether one is there again (the port no longer reports a hang-up). */
static void check_port(void)
{
    struct pollfd p = {.fd = guest_port, .events = POLLIN};
    if (conn < 0 && poll(&p, 1, 0) >= 0 && !(p.revents & POLLHUP))
        conn = guest_port;
}

/* Write what the socket takes now. */
static void flush_out(void)
{
    size_t done = 0;
    while (conn >= 0 && !held && done < outlen) {
        ssize_t n = write(conn, out + done, outlen - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            close_conn();
            return;
        }
        done += (size_t) n;
    }
    memmove(out, out + done, outlen - done);
    outlen -= done;
    explicit_bzero(out + outlen, done); /* what went out (file contents, output) is not kept */
}

static void wait_for_host(void)
{
    while (conn >= 0 && !held && outlen > OUT_HIGH / 2) {
        struct pollfd p = {.fd = conn, .events = POLLOUT};
        if (poll(&p, 1, -1) < 0 && errno != EINTR)
            close_conn();
        else
            flush_out();
    }
}

void cdn_agent_send(uint16_t type, uint32_t channel, const void *p, uint32_t len)
{
    if (conn < 0)
        return;
    size_t need = outlen + CDN_FRAME_HEADER + len;
    if (need > outcap) {
        size_t cap = outcap ? outcap : 65536;
        while (cap < need)
            cap *= 2;
        uint8_t *b = malloc(cap); /* not realloc: the old block is wiped before it is freed */
        if (!b) {
            close_conn(); /* cannot keep the stream whole: better to end it */
            return;
        }
        if (outlen)
            memcpy(b, out, outlen);
        if (out)
            explicit_bzero(out, outcap);
        free(out);
        out = b, outcap = cap;
    }
    cdn_frame_header_encode(out + outlen,
                            &(struct cdn_frame_header){.type = type, .channel = channel, .length = len});
    if (len)
        memcpy(out + outlen + CDN_FRAME_HEADER, p, len);
    outlen = need;
    flush_out();
    if (outlen > OUT_HIGH)
        wait_for_host();
}

bool cdn_agent_room(void)
{
    return conn >= 0 && !held && outlen <= OUT_LOW;
}

void cdn_agent_error(uint32_t channel, int errnum, const char *what)
{
    uint8_t buf[512];
    char msg[400];
    (void) snprintf(msg, sizeof msg, "%s: %s", what, strerror(errnum));
    int n = cdn_errmsg_encode(buf, sizeof buf, errnum, msg);
    if (n > 0)
        cdn_agent_send(CDN_FRAME_ERROR, channel, buf, (uint32_t) n);
}

static void dispatch(const struct cdn_frame_header *h, const uint8_t *payload);

static void take_connection(void)
{
    int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    close_conn(); /* the newest host wins */
    conn = fd;
    /* It numbers its channels afresh: what runs keeps running, unreported. */
    cdn_exec_forget_channels();
}

static void find_listener(void)
{
    int v = 0;
    socklen_t len = sizeof v;
    if (getsockopt(CDN_FD_LISTEN, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) == 0 && v) {
        int fl = fcntl(CDN_FD_LISTEN, F_GETFL);
        if (fl >= 0 && fcntl(CDN_FD_LISTEN, F_SETFL, fl | O_NONBLOCK) == 0 &&
            fcntl(CDN_FD_LISTEN, F_SETFD, FD_CLOEXEC) == 0)
            listener = CDN_FD_LISTEN;
    }
}

/* A descriptor that came with the host's bytes: the only one it sends is the fanotify group of
 * paths it protected at run time, which init holds in its place as one made at the start (a
 * restarted host takes it back from there). A guest's host sends none. */
static void take_group(int fd)
{
    if (!cdn_vm_guest())
        (void) dup3(fd, CDN_FD_FANOTIFY, O_CLOEXEC);
    (void) close(fd);
}

/* read() of the connection, with the descriptors a socket may carry (a guest's port is no socket). */
static ssize_t read_conn(void *buf, size_t len)
{
    static bool plain;
    if (plain)
        return read(conn, buf, len);
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(4 * sizeof(int))];
    } c;
    struct iovec iov = {buf, len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.b, .msg_controllen = sizeof c.b};
    ssize_t n = recvmsg(conn, &m, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == ENOTSOCK) {
        plain = true;
        return read(conn, buf, len);
    }
    for (struct cmsghdr *h = n >= 0 ? CMSG_FIRSTHDR(&m) : NULL; h; h = CMSG_NXTHDR(&m, h))
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS)
            for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(h) + i * sizeof fd, sizeof fd);
                take_group(fd);
            }
    return n;
}

/* Read what has arrived; dispatch every whole frame. */
static void read_frames(void)
{
    for (;;) {
        struct cdn_frame_header h;
        size_t want = CDN_FRAME_HEADER;
        if (inlen >= CDN_FRAME_HEADER) {
            int r = cdn_frame_header_decode(inbuf, &h);
            if (r < 0) { /* garbage: say so, then hang up */
                cdn_agent_error(0, -r, "malformed frame");
                flush_out();
                close_conn();
                return;
            }
            want += h.length;
            if (inlen >= want) {
                dispatch(&h, inbuf + CDN_FRAME_HEADER);
                if (conn < 0)
                    return;
                memmove(inbuf, inbuf + want, inlen - want);
                inlen -= want;
                explicit_bzero(inbuf + inlen, want); /* a file written, a call's input: not kept */
                continue;
            }
        }
        ssize_t n = read_conn(inbuf + inlen, want - inlen);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) { /* the host hung up */
            close_conn();
            return;
        }
        inlen += (size_t) n;
    }
}

/* CDN_FRAME_HOLD (frame.h), a VM guest's: its answer to ON is the last thing written, whole, before
 * it holds; RESUME drops what the old host was owed, as a hang-up does (close_conn). */
static void release(void)
{
    if (held)
        cdn_vm_hold_commands(false);
    held = false;
}

static void hold(uint32_t channel, const uint8_t *p, uint32_t len)
{
    if (guest_port < 0 || channel != 0 || len < 1) {
        cdn_agent_error(channel, EOPNOTSUPP, "hold");
        return;
    }
    if (p[0] == CDN_HOLD_OFF) {
        release();
    } else if (p[0] == CDN_HOLD_ON && len == CDN_HOLD_ON_LEN) {
        /* The commands stop first (a guest restored from this moment lets them go only once it has
         * its new clock, randomness and network); the answer, with the host's nonce, is the last
         * thing written. */
        uint8_t ack[CDN_HOLD_ON_LEN];
        memcpy(ack, p, sizeof ack);
        held = false;
        cdn_vm_hold_commands(true);
        cdn_agent_send(CDN_FRAME_HOLD, 0, ack, sizeof ack);
        for (int i = 0; conn >= 0 && outlen && i < 200; i++) { /* 4 s at most for a live host */
            struct pollfd pf = {.fd = conn, .events = POLLOUT};
            (void) poll(&pf, 1, 20);
            flush_out();
        }
        held = conn >= 0 && !outlen;
        if (!held)
            cdn_vm_hold_commands(false);
        (void) clock_gettime(CLOCK_MONOTONIC, &held_since);
    } else if (p[0] == CDN_HOLD_RESUME && len == CDN_HOLD_RESUME_LEN) {
        uint64_t t;
        uint32_t net[3]; /* ip, gateway, resolver */
        memcpy(&t, p + 1, sizeof t);
        memcpy(net, p + 9 + CDN_IDENTITY_SEED, sizeof net);
        explicit_bzero(out, outlen);
        outlen = 0;
        held = false;
        cdn_exec_forget_channels();
        cdn_files_reset();
        int r = cdn_vm_resume(le64toh(t), p + 9, le32toh(net[0]), le32toh(net[1]), le32toh(net[2]),
                              p[9 + CDN_IDENTITY_SEED + 12]);
        cdn_vm_hold_commands(false);
        if (r < 0)
            cdn_agent_error(0, -r, "resume");
        else
            cdn_agent_send(CDN_FRAME_DONE, 0, NULL, 0);
    } else {
        cdn_agent_error(channel, EINVAL, "hold");
    }
}

static void dispatch(const struct cdn_frame_header *hp, const uint8_t *payload)
{
    const struct cdn_frame_header h = *hp;
    size_t len = h.length;
    switch (h.type) {
    case CDN_FRAME_EXEC:
        cdn_vm_mount_image();
        cdn_exec_start(h.channel, payload, len);
        break;
    case CDN_FRAME_STDIN:
        cdn_exec_stdin(h.channel, h.flags, payload, len);
        break;
    case CDN_FRAME_RESIZE:
        cdn_exec_resize(h.channel, payload, len);
        break;
    case CDN_FRAME_CONTROL:
        cdn_exec_control(h.channel, payload, len);
        break;
    case CDN_FRAME_SIGNAL:
        if (len == 4 && payload[0] > 0 && payload[0] < 65 && !payload[1] && !payload[2] && !payload[3])
            cdn_exec_signal(h.channel, payload[0]);
        break;
    case CDN_FRAME_FILE:
        cdn_vm_mount_image();
        cdn_files_request(h.channel, h.flags, payload, len);
        break;
    case CDN_FRAME_DATA:
        cdn_files_data(h.channel, h.flags, payload, len);
        break;
    case CDN_FRAME_TCP:
        cdn_tcp_open(h.channel, payload, len);
        break;
    case CDN_FRAME_WINDOW:
        cdn_files_window(h.channel, payload, len);
        break;
    case CDN_FRAME_CANCEL:
        cdn_files_cancel(h.channel);
        break;
    case CDN_FRAME_PROTECTED:
        if (h.channel == 0 && guest_port < 0) /* a guest knows its own (cdn_vm_protect) */
            cdn_files_protected(payload, len);
        break;
    case CDN_FRAME_QUIESCE:
        cdn_call_quiesce();
        cdn_exec_quiesce(h.channel);
        break;
    case CDN_FRAME_IDENTITY: {
        struct cdn_identity id;
        int r = cdn_identity_decode(payload, len, &id);
        if (r == 0)
            r = cdn_vm_identity(&id);
        if (r < 0 && r != -EPERM) {
            /* Half set up (its limits, protected paths): the guest must not run commands. It says
             * why, and ends. */
            cdn_agent_error(h.channel, -r, cdn_vm_failed_step());
            flush_out();
            cdn_vm_poweroff();
        }
        if (r < 0)
            cdn_agent_error(h.channel, -r, cdn_vm_failed_step());
        else
            cdn_agent_send(CDN_FRAME_DONE, h.channel, NULL, 0);
        break;
    }
    case CDN_FRAME_PROTECT: {
        struct cdn_error e = {0};
        uint8_t buf[sizeof e.msg + 8];
        int r = cdn_vm_protect_change(payload, len, &e), n;
        if (r >= 0)
            cdn_agent_send(CDN_FRAME_DONE, h.channel, NULL, 0);
        else if ((n = cdn_errmsg_encode(buf, sizeof buf, -r, e.msg[0] ? e.msg : strerror(-r))) > 0)
            cdn_agent_send(CDN_FRAME_ERROR, h.channel, buf, (uint32_t) n);
        break;
    }
    case CDN_FRAME_POLICY: {
        int r = cdn_vm_policy(payload, len);
        if (r < 0)
            cdn_agent_error(h.channel, -r, "policy");
        else
            cdn_agent_send(CDN_FRAME_DONE, h.channel, NULL, 0);
        break;
    }
    case CDN_FRAME_PING:
        cdn_agent_send(CDN_FRAME_PONG, h.channel, payload, (uint32_t) len);
        break;
    case CDN_FRAME_HOLD:
        hold(h.channel, payload, len);
        break;
    case CDN_FRAME_CALL:
        cdn_call_start(h.channel, payload, len);
        break;
    default:
        cdn_agent_error(h.channel, EOPNOTSUPP, "frame type");
    }
}

/* Whether a signal that reached init came from its host, the only sender whose signals are
 * meant for the commands (cordon run passes on its own SIGINT, SIGTERM, …). A sandbox process can
 * signal init too (`kill -USR1 1`, or its worker's pid on the process tier): that signal is aimed
 * at init, so it goes to no command — never to the one running then, nor, held, to the next one
 * (a verifier step). Only kill(2) and pidfd_send_signal(2) make SI_USER, which a sender cannot
 * forge (rt_sigqueueinfo refuses si_code >= 0 for another process). The host is outside the
 * sandbox's pid namespace (no pid in ours: 0) where init is PID 1; on the process tier, with no
 * pid namespace, it is root, while every sandbox process has the worker's uid. A VM guest's host
 * never signals: it sends SIGNAL frames. */
static bool from_host(const struct signalfd_siginfo *si, bool vm)
{
    if (vm || si->ssi_code != SI_USER)
        return false;
    return getpid() == 1 ? si->ssi_pid == 0 : si->ssi_uid != getuid();
}

static int setup_signals(void)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGPIPE);
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
        sigaddset(&mask, forwarded[i]);
    if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
        return -1;
    return signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}

int cdn_agent_main(void)
{
    const bool vm = cdn_vm_guest();
    if (vm && cdn_vm_setup() < 0) {
        fprintf(stderr, "cordon-init: guest setup: %s: %m\n", cdn_vm_failed_step());
        cdn_vm_poweroff();
        return 1;
    }
    if (!vm) /* a guest's init is the guest's root: its commands are confined by init-vm.c */
        cdn_init_caps_settle();
    else
        cdn_user_guest();
    (void) prctl(PR_SET_DUMPABLE, 0); /* keep sandbox processes out of /proc/1/{mem,environ,fd} */
    /* The seccomp listener, held for the host (which supervises through
     * its own copy); a command that inherited it could answer its own
     * notifications, so it is CLOEXEC before anything else runs. */
    (void) fcntl(CDN_FD_MONITOR, F_SETFD, FD_CLOEXEC);
    /* (Sandboxes with protected paths:): the host's fanotify group, held
     * so that its marks outlive a restarting host; a command holding it could
     * answer for its own opens. */
    (void) fcntl(CDN_FD_FANOTIFY, F_SETFD, FD_CLOEXEC);
    /* Without one, the place is kept (nothing else of init takes fd 10) for the group the host
     * sends when it protects paths at run time (take_group). */
    if (!vm && fcntl(CDN_FD_FANOTIFY, F_GETFD) < 0) {
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null >= 0 && null != CDN_FD_FANOTIFY) {
            (void) dup3(null, CDN_FD_FANOTIFY, O_CLOEXEC);
            (void) close(null);
        }
    }
    /* Out of the caller's terminal process group: a Ctrl-C reaches the host
     * side once, which forwards it; it must not also arrive here directly. */
    (void) setsid();
    int sfd = setup_signals();
    if (sfd < 0)
        return 1;
    int fl = fcntl(conn, F_GETFL);
    if (fl < 0 || fcntl(conn, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(conn, F_SETFD, FD_CLOEXEC) < 0)
        return 1; /* CLOEXEC: no command inherits a connection to the host */
    find_listener();
    /* The slot lock (of a persistent sandbox) is only held, never used:
     * CLOEXEC keeps it out of commands. */
    if (listener >= 0)
        (void) fcntl(CDN_FD_SLOT, F_SETFD, FD_CLOEXEC);
    static struct pollfd pfd[MAX_POLL];
    if (vm)
        guest_port = conn;
    while ((conn >= 0 || listener >= 0 || guest_port >= 0) && !cdn_exec_shutdown_due()) {
        size_t n = 3;
        pfd[0] = (struct pollfd){.fd = conn, .events = POLLIN | (outlen && !held ? POLLOUT : 0)};
        pfd[1] = (struct pollfd){.fd = sfd, .events = POLLIN};
        pfd[2] = (struct pollfd){.fd = listener, .events = POLLIN}; /* fd -1 is ignored by poll */
        cdn_exec_poll_add(pfd, &n, MAX_POLL, !held && outlen <= OUT_LOW);
        cdn_vm_poll_add(pfd, &n, MAX_POLL);
        cdn_call_poll_add(pfd, &n, MAX_POLL);
        cdn_watch_poll_add(pfd, &n, MAX_POLL);
        cdn_tcp_poll_add(pfd, &n, MAX_POLL);
        /* Without a host, a guest's port reports a hang-up until one comes: looked at every 20 ms.
         * A read that may send now does not wait. */
        int timeout = conn < 0 && guest_port >= 0 ? 20
                      : (cdn_files_pending() || cdn_watch_pending()) && cdn_agent_room()
                          ? 0
                          : cdn_call_timeout_ms();
        if (poll(pfd, n, timeout) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (pfd[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t) sizeof si)
                if (si.ssi_signo != SIGCHLD && si.ssi_signo != SIGPIPE && from_host(&si, vm))
                    cdn_exec_signal_all((int) si.ssi_signo);
        }
        cdn_exec_poll_handle(pfd, n);
        cdn_vm_poll_handle(pfd, n);
        cdn_call_poll_handle(pfd, n);
        cdn_watch_poll_handle(pfd, n);
        cdn_tcp_poll_handle(pfd, n);
        /* Reap after output: a command's last bytes go out before its EXIT. */
        if (pfd[1].revents & POLLIN)
            cdn_exec_reap();
        if (conn >= 0 && (pfd[0].revents & POLLOUT))
            flush_out();
        if (conn >= 0 && (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)))
            read_frames();
        cdn_files_pump(); /* reads: a chunk each, between everything else */
        cdn_watch_pump();
        if (listener >= 0 && (pfd[2].revents & POLLIN))
            take_connection();
        if (guest_port >= 0)
            check_port();
        /* A host that held the guest and went (a cordond killed mid-checkpoint) does not let go:
         * after 30 s the guest does. */
        struct timespec now;
        if (held && clock_gettime(CLOCK_MONOTONIC, &now) == 0 && now.tv_sec - held_since.tv_sec > 30) {
            held = false;
            cdn_vm_hold_commands(false);
        }
    }
    /* The last frames (a one-shot command's EXIT) go out before init ends. */
    if (conn >= 0 && fcntl(conn, F_SETFL, fl) == 0)
        flush_out();
    if (vm) /* PID 1 of a guest must not return: the guest ends here */
        cdn_vm_poweroff();
    return cdn_exec_shutdown_status(); /* the kernel kills what is left in the pid namespace */
}
