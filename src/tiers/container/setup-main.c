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
 * Root in the host's namespaces, it reads requests on fd 3 (container-internal.h: the args' fds and a
 * memfd of the args packed) until EOF, and for each takes the slot's uid, enters a network namespace given,
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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

#define REQUESTS 3 /* the socket the host asks on */

static pid_t parent; /* the host's pid (argv[1]) */

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
    /* The parent-death signal, which a change of euid resets; and the host may have gone meanwhile. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
        _exit(1);
}

/* The setup child: the host's signal mask (this process blocks them all), then setup.c. */
_noreturn_ static void child(const struct cdn_setup_args *a)
{
    sigset_t mask;
    cdn_sigset_from_mask(a->sigmask, &mask);
    (void) sigprocmask(SIG_SETMASK, &mask, NULL);
    cdn_container_setup(a);
}

/* One setup child for a; its pid and *ret_pidfd, or -errno with err. */
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

/* The packed args in the request's memfd, read whole: *ret (malloc'd), its length; or -errno. */
static int read_args(int fd, void **ret, size_t *ret_len)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size > CDN_SETUP_ARGS_MAX)
        return -EINVAL;
    size_t len = (size_t) st.st_size, got = 0;
    uint8_t *buf = malloc(len);
    while (buf && got < len) {
        ssize_t n = pread(fd, buf + got, len - got, (off_t) got);
        if (n <= 0) {
            free(buf);
            return n < 0 ? -errno : -EIO;
        }
        got += (size_t) n;
    }
    if (!buf)
        return -ENOMEM;
    *ret = buf;
    *ret_len = len;
    return 0;
}

/* The request's args and fds into u, the fds where the args want them: 0, or -errno with err. */
static int take_request(const int *fds, int nfds, struct cdn_setup_unpacked *u, struct cdn_error *err)
{
    void *buf = NULL;
    size_t len = 0;
    int r = nfds < 1 ? -EINVAL : read_args(fds[nfds - 1], &buf, &len);
    if (r < 0)
        return cdn_error_set(err, -r, "cordon-setup: a request without its args: %s", strerror(-r));
    r = cdn_setup_args_unpack(buf, len, u);
    free(buf);
    if (r < 0)
        return cdn_error_set(err, EINVAL, "cordon-setup: a request that does not read (of another version?)");
    int *mine[CDN_SETUP_FDS], want = 0;
    cdn_setup_args_fds(&u->args, mine);
    for (size_t i = 0; i < CDN_SETUP_FDS; i++)
        want += *mine[i] >= 0;
    /* Exactly as many as the args name (and the memfd): one missing would shift the rest. */
    if (want != nfds - 1) {
        cdn_setup_args_free(u);
        return cdn_error_set(err, EINVAL, "cordon-setup: a request with %d fds, not %d", nfds - 1, want);
    }
    for (size_t i = 0, k = 0; i < CDN_SETUP_FDS; i++)
        if (*mine[i] >= 0)
            *mine[i] = fds[k++];
    return 0;
}

/* One request: the setup child made, or why not, answered. 0, or -1 when the host is gone. */
static int serve(int host_net)
{
    static struct cdn_setup_unpacked u;
    char byte;
    int fds[CDN_SETUP_FDS + 1], nfds = 0;
    ssize_t n = cdn_recv_fds(REQUESTS, &byte, 1, fds, CDN_SETUP_FDS + 1, &nfds);
    if (n == 0 || (n < 0 && n != -EBADMSG && n != -EINTR))
        return -1; /* the host is gone */
    if (n == -EINTR)
        return 0;
    struct cdn_setup_answer ans = {0};
    int pidfd = -EBADF;
    if (n < 0 || byte != 'r')
        cdn_error_set(&ans.err, EINVAL, "cordon-setup: a request cut short or of another kind");
    else if (take_request(fds, nfds, &u, &ans.err) == 0) {
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

int main(int argc, char **argv)
{
    /* Ends with the host: the signal, or its end of the socket. Its pid (argv[1]) tells whether it
     * is gone already; getppid() is 1 for a host that is pid 1 of its own namespace. */
    parent = argc > 1 ? (pid_t) strtol(argv[1], NULL, 10) : 0;
    if (parent <= 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
        return 1;
    int host_net = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (host_net < 0)
        return 1;
    while (serve(host_net) == 0)
        ;
    return 0;
}
