/* cordon-worker: the process tier's zygote and, once cloned and confined,
 * a sandbox's agent (worker.h says how the two meet; docs/process.md what
 * the tier protects against and what it does not).
 *
 * The zygote runs as root in the host's namespaces, started by the process
 * that owns the sandboxes (cordond, cordon run), and does nothing but load
 * the runtime and clone. A worker confines itself before it reads a single
 * frame, in this order: its cgroup, rlimits, a mount namespace of its own
 * (its directory's work/ on /workspace, tmp/ on /tmp), Landlock (reads beneath the
 * host image's system directories and its own directory, writes beneath its
 * own directory and to a few device nodes), no capabilities, the sandbox's
 * unprivileged uid, no_new_privs, the container tier's seccomp filter plus
 * one that refuses network sockets unless the spec allows them. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <linux/securebits.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/bind-policy.h"
#include "core/cgroup.h"
#include "core/protect.h"
#include "core/paths.h"
#include "init.h"
#include "shared/error.h"
#include "shared/fd-util.h"
#include "shared/macro.h"
#include "confine/privileges.h"
#include "confine/proc-mask.h"
#include "confine/landlock.h"
#include "confine/seccomp-policy.h"
#include "worker-call.h"
#include "worker.h"

#define CTL_FD 3

#define WORKER_MOUNTS_MAX 64

struct worker_mount {
    const char *source, *target;
    bool readonly;
};

static struct {
    struct worker_mount mounts[WORKER_MOUNTS_MAX]; /* of the request being served */
    const char *protect[CDN_PROTECT_MAX];
    const struct cdn_cgroup_ops *cgroup_ops;
    struct cdn_seccomp_prog policy[2]; /* the container tier's, plain and with reported writes */
    /* The tier's own filter: SysV IPC and POSIX message queues refused (the host's IPC namespace is
     * shared), and with them socket(2) for network.mode none ([1]) or not ([0]). */
    struct sock_fprog filter[2];
    bool python;
} z;

int cdn_worker_export_bpf(scmp_filter_ctx ctx, struct sock_fprog *ret)
{
    _cleanup_close_ int fd = memfd_create("bpf", MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    int r = seccomp_export_bpf(ctx, fd);
    off_t size = r == 0 ? lseek(fd, 0, SEEK_END) : -1;
    _cleanup_free_ struct sock_filter *insns = size > 0 ? malloc((size_t) size) : NULL;
    if (!insns || pread(fd, insns, (size_t) size, 0) != size)
        return r < 0 ? r : -EIO;
    *ret = (struct sock_fprog){.len = (unsigned short) ((size_t) size / sizeof *insns),
                               .filter = TAKE_PTR(insns)};
    return 0;
}

int cdn_worker_filter(const int *nrs, size_t n, struct sock_fprog *ret)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return -ENOMEM;
    int r = 0;
    for (size_t i = 0; r == 0 && i < n; i++)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nrs[i], 0);
    if (r == 0)
        r = cdn_worker_export_bpf(ctx, ret);
    seccomp_release(ctx);
    return r;
}

static int zygote_prepare(const char *runtime, struct cdn_error *err)
{
    z.cgroup_ops = cdn_cgroup_detect();
    char cache[4096];
    cdn_cache_dir(cache, sizeof cache);
    int r = cdn_seccomp_load_cached(cache, &z.policy[0], err);
    if (r < 0 || (r = cdn_seccomp_load_variant(cache, true, &z.policy[1], err)) < 0)
        return r;
    /* POSIX message queues live in the IPC namespace too (its internal mqueue mount, not /dev/mqueue),
     * the host's here: mq_open would create a queue there (and then fail to open it, Landlock) that
     * outlives the sandbox, counts against the host's limit and names a channel between sandboxes. */
    static const int nrs[] = {
        SCMP_SYS(shmget),    SCMP_SYS(shmat),         SCMP_SYS(shmctl),       SCMP_SYS(shmdt),
        SCMP_SYS(msgget),    SCMP_SYS(msgsnd),        SCMP_SYS(msgrcv),       SCMP_SYS(msgctl),
        SCMP_SYS(semget),    SCMP_SYS(semop),         SCMP_SYS(semctl),       SCMP_SYS(semtimedop),
        SCMP_SYS(mq_open),   SCMP_SYS(mq_unlink),     SCMP_SYS(mq_timedsend), SCMP_SYS(mq_timedreceive),
        SCMP_SYS(mq_notify), SCMP_SYS(mq_getsetattr), SCMP_SYS(socket)};
    const size_t n = sizeof nrs / sizeof nrs[0];
    if ((r = cdn_worker_filter(nrs, n - 1, &z.filter[0])) < 0 ||
        (r = cdn_worker_filter(nrs, n, &z.filter[1])) < 0)
        return cdn_error_set(err, -r, "compile the tier's filter: %s", strerror(-r));
    z.python = strcmp(runtime, "python") == 0;
    if (z.python && (r = cdn_worker_python_init(err)) < 0)
        return r;
    return 0;
}

/* ---- the worker, from its first instruction ---- */

/* Reads and execution beneath the host image's system directories; everything
 * beneath the sandbox's own directory; reading and writing a few device nodes.
 * Nothing else: not /sys, /home, /root, /var, /run, /dev's other nodes (/proc is its own,
 * showing only the sandbox's processes; /tmp and /workspace are its directory's). */
static int apply_landlock(const struct cdn_worker_req *q, struct cdn_error *err)
{
    static const char *const system[] = {"/usr",    "/bin", "/sbin", "/lib",  "/lib64", "/lib32",
                                         "/libx32", "/etc", "/opt",  "/proc", NULL};
    static const char *const devices[] = {"/dev/null",   "/dev/zero",    "/dev/full",
                                          "/dev/random", "/dev/urandom", NULL};
    /* Rules hold along the path as mounted: the binds need their own, beside the directory. */
    const char *own[] = {q->dir, "/workspace", "/tmp", "/var/tmp", "/dev/shm", NULL};
    int r = cdn_landlock_restrict_paths(system, own, devices);
    if (r < 0)
        return cdn_error_set(err, -r, "landlock: %s", strerror(-r));
    return 0;
}

/* A bind's mount point beneath /workspace (the sandbox's tmpfs): its parents and itself, owned by
 * the sandbox's uid; a directory or an empty file, as the source is. */
static int make_target(const char *target, bool dir, uint32_t uid)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", target) >= (int) sizeof buf)
        return -ENAMETOOLONG;
    for (char *s = buf + 11; (s = strchr(s, '/')); s++) {
        *s = 0;
        if ((mkdir(buf, 0755) < 0 && errno != EEXIST) || lchown(buf, uid, uid) < 0)
            return -errno;
        *s = '/';
    }
    if (dir ? mkdir(buf, 0755) < 0 && errno != EEXIST : mknod(buf, S_IFREG | 0644, 0) < 0 && errno != EEXIST)
        return -errno;
    return lchown(buf, uid, uid) < 0 ? -errno : 0;
}

/* Protected paths: each match bound on itself read-only, as in a container (rootfs.c), so that
 * nothing can write, replace, rename or unlink it, after its parents were made mount points (no
 * moving it aside with them); reads are the host's to refuse (fanotify.h). */
static int protect_root = -1;

static int protect_one(void *ud, const char *path, int fd)
{
    struct cdn_error *err = ud;
    char fdp[64];
    (void) snprintf(fdp, sizeof fdp, "/proc/self/fd/%d", fd);
    if (mount(fdp, fdp, NULL, MS_BIND | MS_REC, NULL) < 0)
        return cdn_error_set(err, errno, "protect %s: bind: %m", path);
    struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    _cleanup_close_ int nfd = (int) syscall(SYS_openat2, protect_root, path, &how, sizeof how);
    if (nfd < 0)
        return cdn_error_set(err, errno, "protect %s: reopen: %m", path);
    (void) snprintf(fdp, sizeof fdp, "/proc/self/fd/%d", nfd);
    if (mount(NULL, fdp, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
        return cdn_error_set(err, errno, "protect %s: read-only: %s", path, strerror(errno));
    return 0;
}

static int protect_paths(const struct cdn_worker_req *q, struct cdn_error *err)
{
    int root = protect_root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return cdn_error_set(err, errno, "open /: %m");
    int ret = cdn_protect_pin_parents(root, z.protect, q->n_protect, err);
    for (uint32_t i = 0; i < q->n_protect && ret >= 0; i++) {
        int r = cdn_protect_expand(root, z.protect[i], protect_one, err);
        if (r >= 0 || err->msg[0]) {
            ret = r < 0 ? r : 0;
            continue;
        }
        char field[32];
        (void) snprintf(field, sizeof field, "protect[%u]", i);
        ret = r == -ENOENT
                  ? cdn_error_field(err, ENOENT, field, "%s: '%s' does not exist in the sandbox", field,
                                    z.protect[i])
                  : cdn_error_field(err, -r, field, "%s: '%s': %s", field, z.protect[i], strerror(-r));
    }
    (void) close(root);
    return ret;
}

/* The one namespace of the tier: a mount namespace in which the sandbox's work/ is /workspace and
 * its tmp/ is /tmp, /var/tmp and /dev/shm (everything else is the host's, as Landlock lets it be
 * seen). */
static int make_mounts(const struct cdn_worker_req *q, struct cdn_error *err)
{
    char work[300], tmp[300];
    (void) snprintf(work, sizeof work, "%s/work", q->dir);
    (void) snprintf(tmp, sizeof tmp, "%s/tmp", q->dir);
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
        return cdn_error_set(err, errno, "a mount namespace: %m");
    /* The spec's sources are host paths: opened (in the new namespace, whose mounts a bind may
     * take) before /tmp and /workspace become the sandbox's, without following a symlink: the host
     * resolved and judged them (core/bind-policy.h). */
    int src[WORKER_MOUNTS_MAX];
    for (uint32_t i = 0; i < q->n_mounts; i++)
        if ((src[i] = cdn_bind_source_open(z.mounts[i].source)) < 0)
            return cdn_error_field(err, -src[i], "mounts", "mounts[%u].source %s: %m", i, z.mounts[i].source);
    const struct {
        const char *src, *dst;
    } binds[] = {{work, "/workspace"}, {tmp, "/tmp"}, {tmp, "/var/tmp"}, {tmp, "/dev/shm"}};
    for (size_t i = 0; i < sizeof binds / sizeof binds[0]; i++)
        if (mount(binds[i].src, binds[i].dst, NULL, MS_BIND, NULL) < 0)
            return cdn_error_set(err, errno, "bind %s on %s: %m", binds[i].src, binds[i].dst);
    for (uint32_t i = 0; i < q->n_mounts; i++) {
        const struct worker_mount *m = &z.mounts[i];
        char from[64];
        struct stat st;
        (void) snprintf(from, sizeof from, "/proc/self/fd/%d", src[i]);
        int r = fstat(src[i], &st) < 0                 ? -errno
                : strcmp(m->target, "/workspace") == 0 ? 0
                                                       : make_target(m->target, S_ISDIR(st.st_mode), q->uid);
        if (r < 0)
            return cdn_error_field(err, -r, "mounts", "mounts[%u].target %s: %s", i, m->target, strerror(-r));
        if (mount(from, m->target, NULL, MS_BIND | MS_REC, NULL) < 0 ||
            (m->readonly &&
             mount(NULL, m->target, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0))
            return cdn_error_field(err, errno, "mounts", "bind %s on %s: %m", m->source, m->target);
        (void) close(src[i]);
    }
    int r = protect_paths(q, err);
    if (r < 0)
        return r;
    /* A /proc of its own in which only the sandbox's processes (its uid's) appear: no pid
     * namespace here, and the host's /proc would show every process's command line. */
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible") < 0)
        return cdn_error_set(err, errno, "mount a /proc with hidepid=invisible: %m");
    /* The container tier's masks on it (its kernel files: reads are violations, fanotify.h). */
    char mask[300], mask_dir[300];
    (void) snprintf(mask, sizeof mask, "%s/mask", q->dir);
    (void) snprintf(mask_dir, sizeof mask_dir, "%s/mask.d", q->dir);
    return cdn_proc_mask("", mask, mask_dir, err);
}

static int set_environment(void)
{
    if (clearenv() != 0 ||
        setenv("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin", 1) ||
        setenv("HOME", "/workspace", 1) || setenv("LANG", "C.UTF-8", 1) ||
        setenv("PYTHONDONTWRITEBYTECODE", "1", 1))
        return -ENOMEM;
    return chdir("/workspace") < 0 ? -errno : 0;
}

/* fds: 0-2 stdio, 3 the agent socket, 5 the error pipe (CLOEXEC); the rest closed. */
static int arrange_fds(int agent, int errw, int stdio)
{
    int a = fcntl(agent, F_DUPFD_CLOEXEC, 100), e = fcntl(errw, F_DUPFD_CLOEXEC, 100);
    if (a < 0 || e < 0)
        return -errno;
    for (int i = 0; stdio >= 0 && i < 3; i++)
        if (dup2(stdio, i) < 0)
            return -errno;
    if (dup3(a, AGENT_FD, 0) < 0 || dup3(e, CDN_FD_SETUP_ERR, O_CLOEXEC) < 0)
        return -errno;
    if (close(4) < 0 && errno != EBADF)
        return -errno;
    return syscall(SYS_close_range, 6, ~0U, 0) < 0 ? -errno : 0;
}

static int confine(const struct cdn_worker_req *q, struct cdn_error *err)
{
    struct cdn_cgroup cg;
    cdn_cgroup_init(&cg, z.cgroup_ops, q->cgroup);
    int r = cg.ops->attach_self(&cg);
    if (r < 0)
        return cdn_error_set(err, r, "join cgroup %s: %s", q->cgroup, strerror(-r));
    if ((r = cdn_set_rlimits(q->nofile, q->disk_mb, err)) < 0)
        return r;
    if ((r = make_mounts(q, err)) < 0)
        return r;
    if ((r = set_environment()) < 0)
        return cdn_error_set(err, -r, "the working directory /workspace: %s", strerror(-r));
    /* Saved uid + 1: the call template's (worker-template.c), which the agent never uses itself. */
    if ((r = apply_landlock(q, err)) < 0 || (r = cdn_drop_capabilities_saved(q->uid, q->uid + 1, err)) < 0)
        return r;
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &z.filter[q->flags & CDN_WORKER_NET ? 0 : 1]) < 0)
        return cdn_error_set(err, errno, "install the tier's filter: %m");
    r = cdn_seccomp_install(&z.policy[q->flags & CDN_WORKER_WRITES ? 1 : 0]);
    if (r < 0)
        return cdn_error_set(err, -r, "install seccomp filter: %s", strerror(-r));
    /* The listener of watched denials: the agent keeps it at CDN_FD_MONITOR, the host takes a copy. */
    if (dup3(r, CDN_FD_MONITOR, O_CLOEXEC) < 0)
        return cdn_error_set(err, errno, "keep the seccomp listener: %m");
    (void) close(r);
    return 0;
}

static _Noreturn void worker_main(const struct cdn_worker_req *q, int agent, int errw, int stdio)
{
    struct cdn_error err = {0};
    if (z.python)
        cdn_worker_python_after_fork();
    int r = arrange_fds(agent, errw, stdio);
    if (r < 0) {
        cdn_error_set(&err, r, "arrange the worker's fds: %s", strerror(-r));
        (void) cdn_write_all(errw, &err, sizeof err);
        _exit(1);
    }
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != q->host_pid)
        _exit(1); /* its owner is already gone */
    /* The sandbox's orphans come to its agent, which reaps them (a container's init is pid 1). */
    (void) prctl(PR_SET_CHILD_SUBREAPER, 1);
    if ((r = confine(q, &err)) < 0) {
        (void) cdn_write_all(5, &err, sizeof err);
        _exit(1);
    }
    /* Its own session now (cdn_agent_main would make it anyway): the call template and executors must
     * be in the agent's, where it can move executors between process groups (worker-call.c). */
    (void) setsid();
    cdn_worker_call_setup(q->dir, q->uid, z.python);
    (void) close(5); /* EOF: the agent runs */
    _exit(cdn_agent_main());
}

/* ---- the zygote ---- */

/* The binds after the request: u8 readonly, source\0, target\0 each; -EINVAL unless whole. */
static int parse_mounts(const struct cdn_worker_req *q, const uint8_t *p, struct worker_mount *ret)
{
    const uint8_t *end = p + q->mounts_len;
    if (q->n_mounts > WORKER_MOUNTS_MAX)
        return -EINVAL;
    for (uint32_t i = 0; i < q->n_mounts; i++) {
        if (p >= end)
            return -EINVAL;
        ret[i].readonly = *p++;
        const uint8_t *z1 = memchr(p, 0, (size_t) (end - p));
        if (!z1 || *p != '/')
            return -EINVAL;
        ret[i].source = (const char *) p;
        p = z1 + 1;
        const uint8_t *z2 = p < end ? memchr(p, 0, (size_t) (end - p)) : NULL;
        if (!z2 || strncmp((const char *) p, "/workspace", 10) != 0 || (p[10] && p[10] != '/'))
            return -EINVAL;
        ret[i].target = (const char *) p;
        p = z2 + 1;
    }
    if (p != end)
        return -EINVAL;
    /* The protected paths' patterns. */
    end = p + q->protect_len;
    if (q->n_protect > CDN_PROTECT_MAX)
        return -EINVAL;
    for (uint32_t i = 0; i < q->n_protect; i++) {
        const uint8_t *z1 = p < end ? memchr(p, 0, (size_t) (end - p)) : NULL;
        if (!z1)
            return -EINVAL;
        z.protect[i] = (const char *) p;
        p = z1 + 1;
    }
    return p == end ? 0 : -EINVAL;
}

static int spawn(const struct cdn_worker_req *q, const uint8_t *extra, const int *fds, int nfds)
{
    if (q->magic != CDN_WORKER_MAGIC || nfds != (q->flags & CDN_WORKER_STDIO ? 3 : 2) ||
        memchr(q->dir, 0, sizeof q->dir) == NULL || memchr(q->cgroup, 0, sizeof q->cgroup) == NULL ||
        q->uid < 1000 || parse_mounts(q, extra, z.mounts) < 0)
        return -EINVAL;
    if (z.python)
        cdn_worker_python_before_fork();
    /* With CLONE_PARENT the child inherits the zygote's exit signal (SIGCHLD): clone3 wants 0 here. */
    struct clone_args ca = {.flags = CLONE_PARENT};
    pid_t pid = (pid_t) syscall(SYS_clone3, &ca, sizeof ca);
    if (pid == 0)
        worker_main(q, fds[0], fds[1], nfds == 3 ? fds[2] : -1);
    int e = errno;
    if (z.python)
        cdn_worker_python_after_fork_parent();
    return pid < 0 ? -e : pid;
}

static int serve(void)
{
    static union {
        uint8_t bytes[CDN_WORKER_MSG_MAX];
        struct cdn_worker_req q;
    } msg;
    for (;;) {
        union {
            char buf[CMSG_SPACE(3 * sizeof(int))];
            struct cmsghdr align;
        } u;
        struct iovec iov = {.iov_base = msg.bytes, .iov_len = sizeof msg.bytes};
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
        ssize_t n = recvmsg(CTL_FD, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? 1 : 0; /* the host is gone */
        int fds[3] = {-1, -1, -1}, nfds = 0;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            nfds = (int) ((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            if (nfds > 3)
                nfds = 3;
            memcpy(fds, CMSG_DATA(c), (size_t) nfds * sizeof(int));
        }
        struct cdn_worker_reply rep = {.pid = -EINVAL};
        if ((size_t) n >= sizeof msg.q && msg.q.mounts_len < CDN_WORKER_MSG_MAX &&
            msg.q.protect_len < CDN_WORKER_MSG_MAX &&
            (size_t) n == sizeof msg.q + msg.q.mounts_len + msg.q.protect_len)
            rep.pid = spawn(&msg.q, msg.bytes + sizeof msg.q, fds, nfds);
        for (int i = 0; i < nfds; i++)
            (void) close(fds[i]);
        /* Later workers are clones of this memory: none keeps another sandbox's binds or patterns. */
        explicit_bzero(msg.bytes, (size_t) n);
        if (send(CTL_FD, &rep, sizeof rep, MSG_NOSIGNAL) != (ssize_t) sizeof rep)
            return 1;
    }
}

int main(int argc, char **argv)
{
    if (argc != 3 || strcmp(argv[1], "--zygote") != 0) {
        fprintf(stderr, "cordon-worker: started by cordon's process tier only (--zygote RUNTIME)\n");
        return 2;
    }
    (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
    (void) prctl(PR_SET_DUMPABLE, 0);
    struct cdn_error err = {0};
    int r = zygote_prepare(argv[2], &err);
    /* The first reply says whether the zygote is ready: 0, or -errno and the error. */
    struct cdn_worker_reply rep = {.pid = r};
    if (send(CTL_FD, &rep, sizeof rep, MSG_NOSIGNAL) != (ssize_t) sizeof rep)
        return 1;
    if (r < 0) {
        (void) send(CTL_FD, &err, sizeof err, MSG_NOSIGNAL);
        return 1;
    }
    _exit(serve()); /* no exit handlers (a sanitizer's leak report of the interpreter) */
}
