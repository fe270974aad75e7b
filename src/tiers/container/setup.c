/* The setup child of the container tier. See cdn_container_setup() in
 * container-internal.h for where it runs. Order matters:
 *   wait for id maps → become root of the userns → cgroup ns → hostname, lo →
 *   rootfs + pivot_root → rlimits → landlock → caps → seccomp → exec init.
 * Landlock and seccomp come last because they would forbid the steps before. */
#include "container-internal.h"
#include "confine/landlock.h"
#include "confine/slot.h"
#include "shared/fd-util.h"
#include "shared/sysdirs.h"
#include "shared/user.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int loopback_up(struct cdn_error *err)
{
    _cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return cdn_error_set(err, errno, "socket for lo: %m");
    struct ifreq ifr = {0};
    strcpy(ifr.ifr_name, "lo");
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        return cdn_error_set(err, errno, "get lo flags: %m");
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        return cdn_error_set(err, errno, "bring lo up: %m");
    return 0;
}

/* Writable: every top-level directory but the system ones (workdir, /tmp,
 * /home, /root, /var, binds below them…), binds anywhere, /dev/shm, /dev/pts
 * and the harmless device nodes. Reads and execution are not restricted. */
/* Is path beneath a top-level directory that cdn_container_landlock() already allows? */
static bool under_writable_top(const char *path, bool writable_system)
{
    char top[260];
    size_t n = strcspn(path + 1, "/");
    if (path[0] != '/' || n == 0 || n >= sizeof top)
        return false;
    memcpy(top, path + 1, n);
    top[n] = 0;
    return !cdn_read_only_top(top, writable_system);
}

/* The caller's rlimits, each clamped below what cordon set (this process may only lower them); at
 * least 64 files stay open to init itself. */
int cdn_container_lower_rlimits(const struct rlimit *want, struct cdn_error *err)
{
    for (int res = 0; want && res < RLIM_NLIMITS; res++) {
        struct rlimit cur, l = want[res];
        if (l.rlim_cur > l.rlim_max || getrlimit(res, &cur) < 0)
            continue;
        if (l.rlim_max > cur.rlim_max)
            l.rlim_max = cur.rlim_max;
        if (l.rlim_cur > l.rlim_max)
            l.rlim_cur = l.rlim_max;
        if (res == RLIMIT_NOFILE && l.rlim_cur < 64)
            l.rlim_cur = l.rlim_max < 64 ? l.rlim_max : 64;
        if (setrlimit(res, &l) < 0)
            return cdn_error_field(err, errno, "process.rlimits", "process.rlimits: lower rlimit %d: %m",
                                   res);
    }
    return 0;
}

int cdn_container_landlock(const struct cdn_spec *spec, struct cdn_error *err)
{
    const char *dirs[64 + CDN_MAX_MOUNTS + 4];
    char names[64][260];
    size_t n = 0, k = 0;
    DIR *d = opendir("/");
    if (!d)
        return cdn_error_set(err, errno, "landlock: opendir /: %m");
    for (struct dirent *de; (de = readdir(d)) && k < 64;) {
        if (de->d_type != DT_DIR || de->d_name[0] == '.' ||
            cdn_read_only_top(de->d_name, spec->writable_system))
            continue;
        (void) snprintf(names[k], sizeof names[k], "/%s", de->d_name);
        dirs[n++] = names[k++];
    }
    closedir(d);
    /* Rules hold beneath mount points too, so only what lies under a system
     * directory needs its own. */
    for (size_t i = 0; i < spec->n_mounts; i++)
        if (!spec->mounts[i].readonly && !under_writable_top(spec->mounts[i].target, spec->writable_system))
            dirs[n++] = spec->mounts[i].target;
    if (!under_writable_top(spec->workdir, spec->writable_system))
        dirs[n++] = spec->workdir;
    dirs[n++] = "/dev/shm";
    dirs[n] = NULL;
    /* In /dev (read-only, only harmless nodes and the private pts) existing
     * files may be written: null, zero, full, tty, random, urandom, ptys. */
    static const char *const write_only[] = {"/dev", NULL};
    int r = cdn_landlock_restrict_writes(dirs, write_only);
    if (r < 0)
        return cdn_error_set(err, r, "landlock: %s", strerror(-r));
    return 0; /* r == 1: kernel without Landlock; the other layers still hold */
}

/* Fixed fd layout from the first instruction on: 3 = agent socket, 4 = init
 * binary (CLOEXEC), 5 = error pipe (CLOEXEC), 6 = go pipe; for a persistent
 * sandbox 7 = listening socket and 8 = slot lock, both kept by init (see
 * src/agent/init.c). Everything else is closed, including the parent's ends
 * of these pipes that clone copied — otherwise a dead parent would never
 * produce EOF on the go pipe. */

static int arrange_fds(const struct cdn_setup_args *a)
{
    int src[] = {a->agent_fd, a->init_fd, a->err_fd, a->go_fd, a->listen_fd, a->slot_fd}, tmp[6];
    size_t n = a->persistent ? 6 : 4;
    for (size_t i = 0; i < n; i++)
        if ((tmp[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 100)) < 0)
            return -errno;
    for (int i = 0; a->stdio_fd >= 0 && i < 3; i++)
        if (dup2(a->stdio_fd, i) < 0)
            return -errno;
    int fan = a->fanotify_fd >= 0 ? fcntl(a->fanotify_fd, F_DUPFD_CLOEXEC, 100) : -1;
    if (a->fanotify_fd >= 0 && fan < 0)
        return -errno;
    int wr = a->writable_fd >= 0 ? fcntl(a->writable_fd, F_DUPFD_CLOEXEC, 100) : -1;
    if (a->writable_fd >= 0 && wr < 0)
        return -errno;
    for (size_t i = 0; i < n; i++) /* what init keeps is not CLOEXEC */
        if (dup3(tmp[i], CDN_FD_AGENT + (int) i, i == 0 || i >= 4 ? 0 : O_CLOEXEC) < 0)
            return -errno;
    if (fan >= 0 && dup3(fan, CDN_FD_FANOTIFY, 0) < 0)
        return -errno;
    if (wr >= 0 && dup3(wr, CDN_FD_WRITABLE, O_CLOEXEC) < 0)
        return -errno;
    /* CDN_FD_MONITOR stays free for the seccomp listener. */
    if (syscall(SYS_close_range, CDN_FD_AGENT + (int) n, CDN_FD_FANOTIFY - 1, 0) < 0)
        return -errno;
    if (fan < 0 && syscall(SYS_close_range, CDN_FD_FANOTIFY, CDN_FD_FANOTIFY, 0) < 0)
        return -errno;
    return RET_NERRNO((int) syscall(SYS_close_range, CDN_FD_WRITABLE + (wr >= 0), ~0U, 0));
}

static int wait_parent(char expect)
{
    char c;
    if (read(CDN_FD_SETUP_GO, &c, 1) != 1 || c != expect)
        _exit(1); /* parent gone or failed: nothing to report to */
    return 0;
}

/* 'm' from the parent, with the idmapped image root (container.c idmapped_lower) when it made one:
 * returns that fd, or -1. Anything else than one byte and at most one fd ends the child. */
static int wait_maps(void)
{
    char c;
    int fd;
    if (cdn_recv_byte_fd(CDN_FD_SETUP_GO, &c, &fd) != 1 || c != 'm')
        _exit(1); /* parent gone or failed: nothing to report to */
    return fd;
}

/* The spec's user (its own or the image's) must name someone in the image's /etc/passwd: a create
 * fails with field "user" rather than every command after it. init resolves it again for each
 * command (the agent may edit the files in between; docs/spec.md). */
static int check_user(const struct cdn_spec *spec, struct cdn_error *err)
{
    if (!spec->user)
        return 0;
    _cleanup_close_ int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return cdn_error_field(err, errno, "user", "user: open the sandbox's root: %m");
    struct cdn_user u;
    int r = cdn_user_resolve_at(root, spec->user, CDN_UID_RANGE - 1, &u, err);
    if (r < 0 || u.uid == 0 ||
        (strcmp(spec->workdir, "/workspace") != 0 && strcmp(spec->workdir, u.home) != 0))
        return r;
    /* cordon's own working directory, or the user's home as the workdir (E2B's /home/user), still
     * empty and root's: the user's, as a home is, so that its commands can work where they start. */
    int fd = open(spec->workdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); /* after the pivot */
    struct stat st;
    DIR *d = fd < 0 || fstat(fd, &st) < 0 || st.st_uid != 0 ? NULL : fdopendir(fd);
    if (!d) {
        safe_close(fd);
        return 0;
    }
    bool empty = true;
    for (struct dirent *de; empty && (de = readdir(d));)
        empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
    if (empty && fchown(dirfd(d), u.uid, u.gid) < 0)
        r = cdn_error_field(err, errno, "user", "user: give %s to %s: %m", spec->workdir, spec->user);
    closedir(d);
    return r;
}

static int setup(const struct cdn_setup_args *a, struct cdn_error *err)
{
    /* The network namespace first (the costliest, ~0.4 ms), while the parent
     * writes the id maps and makes the cgroup. No id map is needed for it:
     * the capabilities of the fresh user namespace suffice. */
    int r = 0;
    if (!a->netns_given) {
        if (unshare(CLONE_NEWNET) < 0)
            return cdn_error_set(err, errno, "unshare network namespace: %m");
        if ((r = loopback_up(err)) < 0)
            return r;
    }
    _cleanup_close_ int lower = wait_maps(); /* the id maps are written */
    static int bind_fds[CDN_IN_PLACE_BINDS_MAX];
    for (size_t i = 0; a->root_in_place && i < a->spec->n_mounts; i++) {
        char c;
        if (cdn_recv_byte_fd(CDN_FD_SETUP_GO, &c, &bind_fds[i]) != 1 || c != 'b' || bind_fds[i] < 0)
            _exit(1); /* the parent failed: it says why */
    }
    _cleanup_close_ int sysfs = -EBADF; /* of a network namespace the host gave (cdn_engine_sysfs) */
    char c;
    if (a->netns_given && cdn_engine_wants(a->fs_mounts, a->n_fs_mounts, "sysfs") &&
        (cdn_recv_byte_fd(CDN_FD_SETUP_GO, &c, &sysfs) != 1 || c != 's' || sysfs < 0))
        _exit(1);
    if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0 || setgroups(0, NULL) < 0)
        return cdn_error_set(err, errno, "become root of the user namespace: %m");
    /* After the id change, which would reset it; if the parent is already gone
     * the next wait_parent() sees EOF. */
    if (!a->persistent && prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
        return cdn_error_set(err, errno, "PR_SET_PDEATHSIG: %m");
    if (sethostname(a->spec->hostname, strlen(a->spec->hostname)) < 0)
        return cdn_error_set(err, errno, "sethostname: %m");
    /* The host's /proc is still in view; which instance a file under /proc/sys is follows this
     * process's namespaces. The host set the net.* ones of a namespace it gave. */
    if ((r = cdn_engine_sysctls(a->sysctls, a->netns_given ? CDN_SYSCTLS_NOT_NET : CDN_SYSCTLS_ALL, 0, err)) <
        0)
        return r;
    if ((r = cdn_rootfs_prepare(a, lower, a->root_in_place ? bind_fds : NULL, sysfs, err)) < 0)
        return r;
    lower = safe_close(lower);
    sysfs = safe_close(sysfs);
    /* The parent made the cgroup meanwhile; join it while the host's cgroup
     * tree is still in view, then give the sandbox a cgroup namespace rooted there. */
    (void) wait_parent('c');
    (void) close(CDN_FD_SETUP_GO);
    if (a->cgroup && (r = a->cgroup->ops->attach_self(a->cgroup)) < 0)
        return cdn_error_set(err, r, "join cgroup %s: %s", a->cgroup->name, strerror(-r));
    if (unshare(CLONE_NEWCGROUP) < 0)
        return cdn_error_set(err, errno, "unshare cgroup namespace: %m");
    if ((r = cdn_rootfs_pivot(a, err)) < 0 || (r = cdn_engine_cgroup(a, err)) < 0 ||
        (r = cdn_engine_paths(a->readonly_paths, a->masked_paths, err)) < 0 ||
        (r = check_user(a->spec, err)) < 0 ||
        (r = cdn_set_rlimits(a->spec->limits.nofile, a->spec->limits.disk_mb, err)) < 0 ||
        (r = cdn_container_lower_rlimits(a->rlimits, err)) < 0 ||
        (r = cdn_container_landlock(a->spec, err)) < 0 ||
        (r = cdn_drop_capabilities_keep(CDN_INIT_CAPS, err)) < 0)
        return r;
    /* Beneath cordon's: the kernel asks the newest filter first, and of two that deny a call the first
     * asked gives its errno, so cordon's own answers stand (EPERM, not a bundle's EINVAL that reads as
     * the kernel's). */
    r = cdn_seccomp_install_extra(a->seccomp_extra, a->seccomp_extra_len);
    if (r < 0)
        return cdn_error_field(err, -r, "linux.seccomp", "linux.seccomp: install the filter: %s",
                               strerror(-r));
    r = cdn_seccomp_install(a->seccomp);
    if (r < 0)
        return cdn_error_set(err, r, "install seccomp filter%s: %s",
                             a->seccomp_extra_len ? " (does linux.seccomp allow seccomp(2)?)" : "",
                             strerror(-r));
    /* The listener of the watched denials: init keeps it at CDN_FD_MONITOR (CLOEXEC
     * from its first instruction on, init.c), the host takes a copy from
     * there (pidfd_getfd) and supervises. */
    if (dup3(r, CDN_FD_MONITOR, 0) < 0)
        return cdn_error_set(err, errno, "keep the seccomp listener: %m");
    (void) close(r);
    static char *const argv[] = {"cordon-init", NULL};
    static char *const envp[] = {NULL};
    syscall(SYS_execveat, CDN_FD_INIT_BIN, "", argv, envp, AT_EMPTY_PATH);
    return cdn_error_set(err, errno, "exec cordon-init: %m");
}

void cdn_container_setup(const struct cdn_setup_args *a)
{
    struct cdn_error err = {0};
    int r = arrange_fds(a);
    if (r < 0) {
        cdn_error_set(&err, r, "arrange fds in the setup child: %s", strerror(-r));
        (void) cdn_write_all(a->err_fd, &err, sizeof err);
        _exit(1);
    }
    (void) setup(a, &err);
    (void) cdn_write_all(CDN_FD_SETUP_ERR, &err, sizeof err);
    _exit(1);
}
