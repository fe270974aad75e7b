/* A process started inside a running container-tier sandbox from the host (join.h).
 *
 * Runs in three processes. The caller (root on the host) opens the sandbox init's namespaces and
 * forks; the child joins the sandbox's cgroup, then its namespaces (the user namespace last: from the
 * host's, root may enter the others, which that namespace owns), becomes the sandbox's root and forks
 * again, since a new pid and time namespace hold only children; the grandchild confines itself as the
 * sandbox's commands are confined and execs. The child sends the grandchild's pid and exits; the
 * grandchild sends a struct cdn_error if it fails before exec (EOF on the CLOEXEC pipe: it exec'd).
 * Nothing is trusted from inside the sandbox: paths are the sandbox's own (after setns, "/" is its
 * root), and the process holds nothing of the host's when it execs. */
#include "tiers/container/join.h"

#include "container-internal.h"
#include "confine/privileges.h"
#include "confine/seccomp-policy.h"
#include "core/cgroup.h"
#include "core/paths.h"
#include "shared/fd-util.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/securebits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* The order they are joined in: the user namespace last (see above). */
static const struct {
    const char *name;
    int type;
} namespaces[] = {{"cgroup", CLONE_NEWCGROUP}, {"ipc", CLONE_NEWIPC},  {"uts", CLONE_NEWUTS},
                  {"net", CLONE_NEWNET},       {"pid", CLONE_NEWPID},  {"time", CLONE_NEWTIME},
                  {"mnt", CLONE_NEWNS},        {"user", CLONE_NEWUSER}};
#define N_NS (sizeof namespaces / sizeof namespaces[0])

static int open_namespaces(pid_t pid, int fds[N_NS], struct cdn_error *err)
{
    for (size_t i = 0; i < N_NS; i++) {
        char path[64];
        (void) snprintf(path, sizeof path, "/proc/%d/ns/%s", (int) pid, namespaces[i].name);
        if ((fds[i] = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            return cdn_error_set(err, errno, "open %s: %m", path);
    }
    return 0;
}

/* The grandchild: confined, then exec. Reports through errfd and exits on failure. */
/* The listener at fd to the supervisor, through the caller (cdn_container_join): its number, then
 * the caller's 'g' once taken. 0, or -errno. */
static int hand_listener(int handfd, int fd)
{
    char go = 0;
    if (cdn_write_all(handfd, &fd, sizeof fd) < 0 || cdn_read_full(handfd, &go, 1) != 1 || go != 'g')
        return -EPIPE;
    return 0;
}

_noreturn_ static void confine_and_exec(const struct cdn_container_join *j,
                                        const struct cdn_seccomp_prog *prog, int errfd, int handfd)
{
    struct cdn_error err = {0};
    int r = 0;
    /* cordon's rlimits, lowered by the process's own (as runc gives an exec its process's) */
    if ((r = cdn_set_rlimits(j->spec->limits.nofile, j->spec->limits.disk_mb, &err)) < 0 ||
        (r = cdn_container_lower_rlimits(j->rlimits, &err)) < 0)
        ;
    else if (j->tty_fd >= 0 && (setsid() < 0 || dup2(j->tty_fd, 0) < 0 || dup2(j->tty_fd, 1) < 0 ||
                                dup2(j->tty_fd, 2) < 0 || ioctl(0, TIOCSCTTY, 0) < 0))
        r = cdn_error_set(&err, errno, "take the terminal: %m");
    else if (chdir(j->cwd) < 0)
        r = cdn_error_field(&err, errno, "process.cwd", "process.cwd '%s': %m", j->cwd);
    else if ((r = cdn_container_landlock(j->spec, &err)) < 0)
        ;
    /* The ids change with every capability kept (SECBIT_NO_SETUID_FIXUP), which
     * cdn_drop_capabilities() then drops, bounding set included, with no_new_privs. */
    else if (prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP) < 0 || setgroups(0, NULL) < 0 ||
             setresgid(j->gid, j->gid, j->gid) < 0 || setresuid(j->uid, j->uid, j->uid) < 0)
        r = cdn_error_field(&err, errno, "process.user", "become %u:%u: %m", j->uid, j->gid);
    else if ((r = cdn_drop_capabilities(0, &err)) < 0)
        ;
    /* The bundle's beneath cordon's, as setup.c installs them */
    else if ((r = cdn_seccomp_install_extra(j->seccomp_extra, j->seccomp_extra_len)) < 0)
        cdn_error_field(&err, r, "linux.seccomp", "linux.seccomp: install the filter: %s", strerror(-r));
    else if ((r = cdn_seccomp_install(prog)) < 0)
        cdn_error_set(&err, r, "install seccomp filter: %s", strerror(-r));
    else if (handfd >= 0 && (r = hand_listener(handfd, r)) < 0)
        cdn_error_set(&err, -r, "hand the seccomp listener to the supervisor: %s", strerror(-r));
    if (r >= 0) {
        extern char **environ;
        environ = (char **) j->envp; /* execvp searches PATH in the process's own environment */
        execvp(j->argv[0], j->argv);
        cdn_error_field(&err, errno, "process.args", "exec %s: %m", j->argv[0]);
    }
    (void) cdn_write_all(errfd, &err, sizeof err);
    _exit(127);
}

/* The child: into the cgroup and the namespaces, then the grandchild. */
_noreturn_ static void join_child(const struct cdn_container_join *j, const int fds[N_NS],
                                  const struct cdn_seccomp_prog *prog, int pidfd_w, int errfd, int handfd)
{
    struct cdn_error err = {0};
    struct cdn_cgroup cg;
    cdn_cgroup_init(&cg, cdn_cgroup_detect(), j->cgroup_name);
    int r = cg.ops->attach(&cg, getpid());
    if (r < 0)
        cdn_error_set(&err, -r, "join cgroup %s: %s", j->cgroup_name, strerror(-r));
    for (size_t i = 0; r >= 0 && i < N_NS; i++)
        if (setns(fds[i], namespaces[i].type) < 0)
            r = cdn_error_set(&err, errno, "join the sandbox's %s namespace: %m", namespaces[i].name);
    /* Root of the sandbox's user namespace (the host's root is not mapped there). */
    if (r >= 0 && (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0))
        r = cdn_error_set(&err, errno, "become the sandbox's root: %m");
    pid_t pid = r >= 0 ? fork() : -1;
    if (r >= 0 && pid < 0)
        r = cdn_error_set(&err, errno, "fork in the sandbox: %m");
    if (pid == 0) {
        (void) close(pidfd_w);
        confine_and_exec(j, prog, errfd, handfd);
    }
    if (r < 0) {
        (void) cdn_write_all(errfd, &err, sizeof err);
        _exit(1);
    }
    (void) cdn_write_all(pidfd_w, &pid, sizeof pid);
    _exit(0);
}

int cdn_container_join(const struct cdn_container_join *j, struct cdn_error *err)
{
    int fds[N_NS];
    for (size_t i = 0; i < N_NS; i++)
        fds[i] = -EBADF;
    struct cdn_seccomp_prog prog = {0};
    char cache[4096];
    cdn_cache_dir(cache, sizeof cache);
    _cleanup_close_pair_ int pids[2] = {-EBADF, -EBADF}, errs[2] = {-EBADF, -EBADF},
                             hand[2] = {-EBADF, -EBADF};
    int r = open_namespaces(j->init_pid, fds, err);
    if (r >= 0 && j->hand && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, hand) < 0)
        r = cdn_error_set(err, errno, "socketpair: %m");
    if (r >= 0)
        r = cdn_seccomp_load_cached(cache, &prog, err);
    if (r >= 0 && (pipe2(pids, O_CLOEXEC) < 0 || pipe2(errs, O_CLOEXEC) < 0))
        r = cdn_error_set(err, errno, "pipe: %m");
    pid_t child = r >= 0 ? fork() : -1;
    if (r >= 0 && child < 0)
        r = cdn_error_set(err, errno, "fork: %m");
    if (child == 0) {
        if (hand[0] >= 0) /* ours alone: its close without 'g' must read as EOF there */
            (void) close(hand[0]);
        join_child(j, fds, &prog, pids[1], errs[1], hand[1]);
    }
    for (size_t i = 0; i < N_NS; i++)
        (void) safe_close(fds[i]);
    cdn_seccomp_prog_free(&prog);
    if (r < 0)
        return r;
    pids[1] = safe_close(pids[1]);
    errs[1] = safe_close(errs[1]);
    hand[1] = safe_close(hand[1]);
    pid_t pid = -1;
    int status = 0;
    bool got = cdn_read_full(pids[0], &pid, sizeof pid) == (ssize_t) sizeof pid && pid > 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR)
        ;
    /* The process waits, confined and not yet exec'd, while its listener is taken: then 'g'. EOF
     * instead: it failed before (its error follows). */
    int lfd = -1;
    struct cdn_error hand_err = {0};
    if (got && j->hand && cdn_read_full(hand[0], &lfd, sizeof lfd) == (ssize_t) sizeof lfd) {
        if ((r = j->hand(pid, lfd, j->hand_arg, &hand_err)) >= 0 && send(hand[0], "g", 1, MSG_NOSIGNAL) != 1)
            r = cdn_error_set(&hand_err, EPIPE, "the process in the sandbox went before it ran");
        hand[0] = safe_close(hand[0]); /* without 'g', it ends */
    }
    struct cdn_error child_err = {0};
    bool failed = cdn_read_full(errs[0], &child_err, sizeof child_err) == (ssize_t) sizeof child_err;
    if (hand_err.msg[0]) { /* the supervisor's refusal, rather than the process's EOF on it */
        *err = hand_err;
        return -(hand_err.errnum ?: EIO);
    }
    if (failed) {
        child_err.msg[sizeof child_err.msg - 1] = child_err.field[sizeof child_err.field - 1] = 0;
        *err = child_err;
        return -(child_err.errnum ?: EIO);
    }
    if (!got)
        return cdn_error_set(err, EIO, "the process in the sandbox ended before it started");
    return pid;
}
