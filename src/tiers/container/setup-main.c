/* SPDX-License-Identifier: see repository LICENSE */
/* cordon-setup: makes container sandboxes' setup children (issue 25).
 *
 * The host (container.c) used to fork itself into each setup child. A fork copies the forking
 * process's page tables, and the setup child's exec of cordon-init drops them again: with
 * thousands of sandboxes alive, cordond's memory made that ~1 ms of every create, the largest part
 * of a create's growth with the live count that was cordon's own. So each process that makes
 * container sandboxes starts this small static program once (container.c spawner_start) and asks
 * it for each one: it clones a copy of its own few pages.
 *
 * Root in the host's namespaces, it reads requests on fd 3 (container-internal.h: the packed args
 * and their fds) until EOF, and for each takes the slot's uid, enters a network namespace given,
 * makes the setup child with clone3 as the host did, and answers with its pid and pidfd. The child
 * is the host's (CLONE_PARENT): it reaps it and waits on it as before. It ends with the host
 * (PR_SET_PDEATHSIG, and EOF). */
#include "container-internal.h"
#include "shared/fd-util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

#define REQUESTS 3 /* the socket the host asks on */

/* The user namespace clone3 makes is owned by the caller's effective uid, and the kernel charges
 * what it counts per user (inotify instances and watches, queued signals, message queue bytes, user
 * namespaces, processes) both to the user inside and, up the chain, to that owner in the initial
 * namespace. Owned by root, every sandbox's counts were host root's: one sandbox could take all of
 * root's inotify instances or pending signals, for the host and every other sandbox. So the clone
 * is made as the slot's uid: the real and saved uids stay 0, so the permitted capabilities stay too
 * and the effective ones are raised again at once (CLONE_INTO_CGROUP, and hosts that let only
 * CAP_SYS_ADMIN make user namespaces, still see them). */
static int own_as(uid_t uid, struct cdn_error *err)
{
    if (syscall(SYS_setresuid, -1, uid, -1) < 0)
        return cdn_error_set(err, errno, "take the slot's uid %u to clone: %m", (unsigned) uid);
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct caps[2];
    if (syscall(SYS_capget, &h, caps) == 0) {
        caps[0].effective = caps[0].permitted;
        caps[1].effective = caps[1].permitted;
        if (syscall(SYS_capset, &h, caps) == 0)
            return 0;
    }
    int e = errno;
    if (syscall(SYS_setresuid, -1, 0, -1) < 0)
        _exit(1); /* never go on as another uid */
    return cdn_error_set(err, e, "keep capabilities as uid %u: %s", (unsigned) uid, strerror(e));
}

static void own_as_root(void)
{
    if (syscall(SYS_setresuid, -1, 0, -1) < 0) /* effective capabilities come back with euid 0 */
        _exit(1);
    (void) prctl(PR_SET_PDEATHSIG, SIGKILL); /* which a change of euid resets */
}

/* The setup child: the host's signal mask (this process blocks them all), then setup.c. */
_noreturn_ static void child(const struct cdn_setup_args *a)
{
    sigset_t mask;
    sigemptyset(&mask);
    for (int sig = 1; sig <= 64 && sig < NSIG; sig++)
        if (a->sigmask & (1ULL << (sig - 1)))
            (void) sigaddset(&mask, sig);
    (void) sigprocmask(SIG_SETMASK, &mask, NULL);
    cdn_container_setup(a);
}

/* One setup child for u; its pid and *ret_pidfd, or -errno with err. */
static pid_t make_child(const struct cdn_setup_args *a, int host_net, int *ret_pidfd, struct cdn_error *err)
{
    /* A network namespace given: the child is born in it (owned by the host's user namespace, so
     * the sandbox's root has no power over it). */
    if (a->netns_fd >= 0 && setns(a->netns_fd, CLONE_NEWNET) < 0)
        return cdn_error_set(err, errno, "enter the sandbox's network namespace: %m");
    pid_t pid = -1;
    int r = own_as(a->uid_base, err);
    if (r >= 0) {
        struct clone_args ca = {
            .flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS |
                     CLONE_NEWTIME | CLONE_PIDFD | CLONE_PARENT |
                     (a->into_cgroup_fd >= 0 ? CLONE_INTO_CGROUP : 0),
            .pidfd = (uint64_t) (uintptr_t) ret_pidfd,
            .exit_signal = 0, /* CLONE_PARENT: the child's is this process's, SIGCHLD to the host */
            .cgroup = a->into_cgroup_fd >= 0 ? (uint64_t) a->into_cgroup_fd : 0,
        };
        pid = (pid_t) syscall(SYS_clone3, &ca, sizeof ca);
        if (pid == 0)
            child(a);
        if (pid < 0)
            r = cdn_error_set(err, errno, "clone3 into new namespaces: %m");
        own_as_root();
    }
    if (a->netns_fd >= 0 && setns(host_net, CLONE_NEWNET) < 0)
        _exit(1); /* never go on in a sandbox's namespace */
    return r < 0 ? r : pid;
}

/* One request: the setup child made, or why not, answered. */
static int serve(void *buf, int host_net)
{
    static struct cdn_setup_unpacked u;
    int fds[CDN_SETUP_FDS], nfds = 0;
    ssize_t n = cdn_recv_fds(REQUESTS, buf, CDN_SETUP_ARGS_MAX, fds, CDN_SETUP_FDS, &nfds);
    if (n <= 0)
        return -1; /* the host is gone */
    struct cdn_setup_answer ans = {0};
    int pidfd = -EBADF, *mine[CDN_SETUP_FDS], k = 0;
    if (cdn_setup_args_unpack(buf, (size_t) n, &u) < 0)
        cdn_error_set(&ans.err, EINVAL, "cordon-setup: a request that does not read (of another version?)");
    else {
        cdn_setup_args_fds(&u.args, mine);
        for (size_t i = 0; i < CDN_SETUP_FDS; i++)
            if (*mine[i] >= 0)
                *mine[i] = k < nfds ? fds[k++] : -EBADF;
        if (k != nfds || u.args.agent_fd < 0 || u.args.init_fd < 0 || u.args.err_fd < 0 || u.args.go_fd < 0)
            cdn_error_set(&ans.err, EINVAL, "cordon-setup: a request with %d fds, not %d", nfds, k);
        else
            ans.pid = make_child(&u.args, host_net, &pidfd, &ans.err);
        cdn_setup_args_free(&u);
    }
    for (int i = 0; i < nfds; i++)
        (void) close(fds[i]);
    if (ans.pid < 0)
        ans.pid = 0;
    ssize_t sent = cdn_send_fd(REQUESTS, &ans, sizeof ans, ans.pid > 0 ? pidfd : -1, MSG_NOSIGNAL);
    if (pidfd >= 0)
        (void) close(pidfd);
    return sent == (ssize_t) sizeof ans ? 0 : -1;
}

int main(void)
{
    /* Ends with the host: the signal, or its end of the socket. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() == 1)
        return 1;
    int host_net = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    void *buf = malloc(CDN_SETUP_ARGS_MAX);
    if (host_net < 0 || !buf)
        return 1;
    while (serve(buf, host_net) == 0)
        ;
    free(buf);
    return 0;
}
