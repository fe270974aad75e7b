/* The syscall policy: its lists, and the compiled filter's verdicts in a
 * child that installs it (a check that can fail: drop a rule from
 * seccomp-policy.c and the matching CHECK below turns red). */
#include "tap.h"
#include "confine/seccomp-policy.h"

#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static bool in_list(const char *name)
{
    for (size_t i = 0; i < cdn_seccomp_n_allowed; i++)
        if (strcmp(cdn_seccomp_allowed[i], name) == 0)
            return true;
    return false;
}

TEST(lists_disjoint_and_complete)
{
    for (size_t i = 0; i < cdn_seccomp_n_denied; i++)
        CHECK(!in_list(cdn_seccomp_denied[i].name));
    const char *must_deny[] = {
        "mount",       "umount2",           "pivot_root",  "unshare",         "setns",        "ptrace",
        "bpf",         "io_uring_setup",    "userfaultfd", "perf_event_open", "keyctl",       "add_key",
        "request_key", "open_by_handle_at", "kexec_load",  "init_module",     "finit_module", "reboot",
        "swapon",      "clock_settime",     "move_mount",  "fsopen"};
    for (size_t i = 0; i < sizeof must_deny / sizeof must_deny[0]; i++)
        CHECK(!in_list(must_deny[i]));
    CHECK(in_list("read") && in_list("execve") && in_list("openat"));
    CHECK(cdn_seccomp_policy_hash() != 0);
}

static int watched_seen; /* notifications the supervisor answered in the last run */

/* Run fn in a grandchild under the filter, its parent (also under it) being
 * the supervisor of the watched denials, as cordond is for a sandbox; returns
 * fn's exit code, or 100 + the number of notifications answered. */
static int under_filter(const struct cdn_seccomp_prog *p, int (*fn)(void))
{
    pid_t pid = fork();
    if (pid == 0) {
        int l;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || (l = cdn_seccomp_install(p)) < 0)
            _exit(200);
        pid_t g = fork();
        if (g == 0) {
            close(l);
            _exit(fn());
        }
        int seen = 0, st;
        for (;;) {
            struct pollfd pf = {.fd = l, .events = POLLIN};
            if (poll(&pf, 1, 20) > 0 && (pf.revents & POLLIN)) {
                struct cdn_seccomp_event ev;
                if (cdn_seccomp_notify_eperm(l, &ev) == 0)
                    seen++;
            }
            if (waitpid(g, &st, WNOHANG) == g)
                break;
        }
        /* exit code: fn's in the low bits, the count of notifications above */
        _exit(WIFEXITED(st) ? (seen ? 100 + WEXITSTATUS(st) : WEXITSTATUS(st)) : 255);
    }
    int st;
    waitpid(pid, &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 255;
    watched_seen = code >= 100 && code < 200;
    return watched_seen ? code - 100 : code;
}

#define ERRNO_OF(call) ((call) < 0 ? errno : 0)

static int probe_mount(void)
{
    return ERRNO_OF(mount("none", "/tmp", "tmpfs", 0, NULL));
}
static int probe_unshare(void)
{
    return ERRNO_OF(unshare(CLONE_NEWUSER));
}
static int probe_clone3(void)
{
    return ERRNO_OF(syscall(SYS_clone3, NULL, 0));
}
static int probe_clone_ns(void)
{
    return ERRNO_OF(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0));
}
static int probe_packet(void)
{
    return ERRNO_OF(socket(AF_PACKET, SOCK_RAW, 0));
}
static int probe_raw(void)
{
    return ERRNO_OF(socket(AF_INET, SOCK_RAW, 1));
}
static int probe_tcp(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    return fd < 0 ? errno : (close(fd), 0);
}
static int probe_tiocsti(void)
{
    char c = 'x';
    /* upper bits set: the kernel truncates the command, so must the filter */
    return ERRNO_OF(syscall(SYS_ioctl, 0, TIOCSTI | (1UL << 32), &c));
}
static int probe_fionread(void)
{
    int p[2], n = -1;
    if (pipe(p) < 0)
        return 99;
    /* an ordinary ioctl must pass both filters */
    return ERRNO_OF(ioctl(p[0], FIONREAD, &n));
}
static int probe_getpid(void)
{
    return getpid() > 0 ? 0 : 1;
}
static int probe_bpf(void)
{
    return ERRNO_OF(syscall(SYS_bpf, 0, NULL, 0));
}

TEST(filter_verdicts)
{
    struct cdn_seccomp_prog p;
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_seccomp_compile(&p, &err), 0);
    CHECK(p.len[0] > 10 && p.len[1] > 0);
    /* allowed: no notification */
    CHECK_EQ_INT(under_filter(&p, probe_getpid), 0);
    CHECK(!watched_seen);
    CHECK_EQ_INT(under_filter(&p, probe_tcp), 0);
    CHECK(!watched_seen);
    CHECK_EQ_INT(under_filter(&p, probe_fionread), 0);
    CHECK(!watched_seen);
    /* watched: EPERM from the supervisor, which saw it */
    CHECK_EQ_INT(under_filter(&p, probe_mount), EPERM);
    CHECK(watched_seen);
    CHECK_EQ_INT(under_filter(&p, probe_unshare), EPERM);
    CHECK(watched_seen);
    CHECK_EQ_INT(under_filter(&p, probe_clone_ns), EPERM);
    CHECK(watched_seen);
    CHECK_EQ_INT(under_filter(&p, probe_packet), EPERM);
    CHECK(watched_seen);
    CHECK_EQ_INT(under_filter(&p, probe_raw), EPERM);
    CHECK(watched_seen);
    CHECK_EQ_INT(under_filter(&p, probe_bpf), EPERM);
    CHECK(watched_seen);
    /* quiet denials: plain errno in the filter, nothing for the supervisor */
    CHECK_EQ_INT(under_filter(&p, probe_clone3), ENOSYS);
    CHECK(!watched_seen);
    CHECK_EQ_INT(under_filter(&p, probe_tiocsti), EPERM);
    CHECK(!watched_seen);
    cdn_seccomp_prog_free(&p);
}

TEST(cache_roundtrip)
{
    char dir[] = "/tmp/cordon-sctest-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    struct cdn_seccomp_prog a, b;
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_seccomp_load_cached(dir, &a, &err), 0); /* miss: compiles and stores */
    CHECK_EQ_INT(cdn_seccomp_load_cached(dir, &b, &err), 0); /* hit */
    CHECK_EQ_INT(a.len[0], b.len[0]);
    CHECK_EQ_INT(a.len[1], b.len[1]);
    CHECK(memcmp(a.insns, b.insns, (size_t) (a.len[0] + a.len[1]) * 8) == 0);
    cdn_seccomp_prog_free(&a);
    cdn_seccomp_prog_free(&b);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ_INT(system(cmd), 0);
}
