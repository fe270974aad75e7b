/* The process tier, host side (docs/process.md): no namespaces; a sandbox is
 * one worker cloned from a zygote that has already loaded the runtime
 * (src/agent/worker.h), confined by its cgroup, rlimits, Landlock, its own
 * unprivileged uid, no capabilities, no_new_privs and seccomp.
 *
 * create(): slot (its uid and cgroup name, shared with the container tier's
 * slots, so uids never clash) → reaper → cgroup → the sandbox's directory (a
 * tmpfs of limits.disk_mb: work/, tmp/, call/) → a spawn request to the
 * zygote, which clones the worker as this process's child. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/worker.h"
#include "core/paths.h"
#include "shared/fd-util.h"
#include "confine/slot.h"
#include "tiers/tier.h"

static struct {
    const struct cdn_cgroup_ops *cgroup_ops;
    pid_t pid; /* the zygote */
    int ctl;
} z = {.ctl = -EBADF};

static void zygote_stop(void)
{
    z.ctl = safe_close(z.ctl);
    if (z.pid > 0) {
        (void) kill(z.pid, SIGKILL);
        while (waitpid(z.pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    z.pid = 0;
}

/* The zygote, started once per process (and again if it died). */
static int zygote(struct cdn_error *err)
{
    if (z.pid > 0 && kill(z.pid, 0) == 0)
        return 0;
    zygote_stop();
    if (geteuid() != 0)
        return cdn_error_set(err, EPERM,
                             "the process tier needs root: it gives each sandbox a uid and a cgroup");
    char path[4096];
    if (cdn_worker_path(path, sizeof path) < 0)
        return cdn_error_set(err, ENOENT, "cordon-worker not found (set CORDON_WORKER or install cordon)");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return cdn_error_set(err, errno, "socketpair: %m");
    pid_t pid = fork();
    if (pid == 0) {
        if (dup2(sv[1], 3) < 0 || syscall(SYS_close_range, 4, ~0U, 0) < 0)
            _exit(127);
        char *const argv[] = {"cordon-worker", "--zygote", "python", NULL};
        execv(path, argv);
        _exit(127);
    }
    int e = errno;
    (void) close(sv[1]);
    if (pid < 0) {
        (void) close(sv[0]);
        return cdn_error_set(err, e, "fork: %s", strerror(e));
    }
    z.pid = pid;
    z.ctl = sv[0];
    struct cdn_worker_reply rep;
    if (recv(z.ctl, &rep, sizeof rep, 0) != (ssize_t) sizeof rep) {
        zygote_stop();
        return cdn_error_set(err, EIO, "%s did not start", path);
    }
    if (rep.pid < 0) {
        struct cdn_error zerr = {0};
        if (recv(z.ctl, &zerr, sizeof zerr, 0) == (ssize_t) sizeof zerr) {
            zerr.msg[sizeof zerr.msg - 1] = zerr.field[sizeof zerr.field - 1] = 0;
            *err = zerr;
        } else
            cdn_error_set(err, -rep.pid, "cordon-worker: %s", strerror(-rep.pid));
        zygote_stop();
        return -EIO;
    }
    return 0;
}

static void sandbox_dir(int slot, char *buf, size_t size)
{
    (void) snprintf(buf, size, "%s/process/%d", cdn_run_dir(), slot);
}

static void remove_dir(int slot)
{
    char dir[4096];
    sandbox_dir(slot, dir, sizeof dir);
    (void) umount2(dir, MNT_DETACH);
    (void) rmdir(dir);
}

/* A tmpfs of limits.disk_mb: the sandbox's files (work/), its $TMPDIR (tmp/) and the calls' (call/). */
static int make_dir(struct cdn_sandbox *sb, struct cdn_error *err)
{
    char dir[4096], sub[4200], opts[128];
    sandbox_dir(sb->slot, dir, sizeof dir);
    remove_dir(sb->slot); /* a stale one of this slot */
    /* The mount point of every worker's /workspace (worker.c binds its work/ there). */
    struct stat st;
    if (stat("/workspace", &st) < 0 && errno == ENOENT && mkdir("/workspace", 0755) < 0 && errno != EEXIST)
        return cdn_error_set(err, errno, "mkdir /workspace (the process tier's mount point): %m");
    if (stat("/workspace", &st) < 0 || !S_ISDIR(st.st_mode))
        return cdn_error_set(err, ENOTDIR,
                             "/workspace on the host must be a directory (the process tier's "
                             "mount point for its sandboxes' work directories)");
    int r = cdn_mkdir_p(dir, 0711);
    if (r < 0)
        return cdn_error_set(err, r, "mkdir %s: %s", dir, strerror(-r));
    /* Its parent: searchable by the sandboxes' uids, listable by none. */
    char parent[4096];
    (void) snprintf(parent, sizeof parent, "%s/process", cdn_run_dir());
    if (chmod(parent, 0711) < 0)
        return cdn_error_set(err, errno, "chmod %s: %m", parent);
    uint32_t uid = sb->uid_base;
    (void) snprintf(opts, sizeof opts, "size=%llum,mode=0750,uid=%u,gid=%u,nr_inodes=%llu",
                    (unsigned long long) sb->spec->limits.disk_mb, uid, uid,
                    (unsigned long long) sb->spec->limits.disk_mb * 64 + 1024);
    if (mount("cordon-process", dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        return cdn_error_set(err, errno, "mount a tmpfs on %s: %m", dir);
    static const struct {
        const char *name;
        mode_t mode;
    } subs[] = {{"work", 0700}, {"tmp", 01777}, {"call", 0700}};
    (void) snprintf(sub, sizeof sub, "%s/mask", dir); /* for the masks on /proc (cdn_proc_mask) */
    int fd = open(sub, O_CREAT | O_EXCL | O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0444);
    if (fd < 0)
        return cdn_error_set(err, errno, "make %s: %m", sub);
    (void) close(fd);
    (void) snprintf(sub, sizeof sub, "%s/mask.d", dir);
    if (mkdir(sub, 0555) < 0)
        return cdn_error_set(err, errno, "make %s: %m", sub);
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        (void) snprintf(sub, sizeof sub, "%s/%s", dir, subs[i].name);
        if (mkdir(sub, subs[i].mode) < 0 || chown(sub, uid, uid) < 0 || chmod(sub, subs[i].mode) < 0)
            return cdn_error_set(err, errno, "make %s: %m", sub);
    }
    return 0;
}

/* What follows the request (worker.h): the spec's binds, then its protected paths' patterns. */
static int encode_extra(const struct cdn_spec *spec, struct cdn_worker_req *q, uint8_t *out, size_t cap,
                        size_t *ret_len, struct cdn_error *err)
{
    size_t len = 0;
    for (size_t i = 0; i < spec->n_mounts; i++) {
        const struct cdn_mount *m = &spec->mounts[i];
        size_t a = strlen(m->source) + 1, b = strlen(m->target) + 1;
        if (len + 1 + a + b > cap)
            return cdn_error_field(err, E2BIG, "mounts", "mounts: their paths exceed %zu KiB together",
                                   cap >> 10);
        out[len++] = m->readonly;
        memcpy(out + len, m->source, a);
        memcpy(out + len + a, m->target, b);
        len += a + b;
    }
    q->n_mounts = (uint32_t) spec->n_mounts;
    q->mounts_len = (uint32_t) len;
    for (size_t i = 0; i < spec->protect.n; i++) {
        size_t a = strlen(spec->protect.v[i]) + 1;
        if (len + a > cap)
            return cdn_error_field(err, E2BIG, "protect", "protect: the patterns exceed %zu KiB together",
                                   cap >> 10);
        memcpy(out + len, spec->protect.v[i], a);
        len += a;
    }
    q->n_protect = (uint32_t) spec->protect.n;
    q->protect_len = (uint32_t) len - q->mounts_len;
    *ret_len = len;
    return 0;
}

static int spawn(struct cdn_sandbox *sb, struct cdn_error *err)
{
    struct cdn_worker_req q = {
        .magic = CDN_WORKER_MAGIC,
        .flags = (sb->spec->net_mode == CDN_NET_OPEN ? CDN_WORKER_NET : 0) |
                 (sb->spec->watch_writes || sb->spec->protect.n ? CDN_WORKER_WRITES : 0) |
                 (sb->stdio_fd >= 0 ? CDN_WORKER_STDIO : 0),
        .uid = sb->uid_base,
        .host_pid = getpid(),
        .nofile = sb->spec->limits.nofile,
        .disk_mb = sb->spec->limits.disk_mb,
    };
    (void) snprintf(q.cgroup, sizeof q.cgroup, "%s", sb->cgroup.name);
    sandbox_dir(sb->slot, q.dir, sizeof q.dir);
    static uint8_t extra[CDN_WORKER_MSG_MAX - sizeof(struct cdn_worker_req)];
    size_t len = 0;
    int r0 = encode_extra(sb->spec, &q, extra, sizeof extra, &len, err);
    if (r0 < 0)
        return r0;
    int agent[2] = {-EBADF, -EBADF}, rep[2] = {-EBADF, -EBADF};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, agent) < 0 || pipe2(rep, O_CLOEXEC) < 0) {
        (void) safe_close(agent[0]);
        (void) safe_close(agent[1]);
        return cdn_error_set(err, errno, "socketpair/pipe: %m");
    }
    int fds[3] = {agent[1], rep[1], sb->stdio_fd};
    int nfds = sb->stdio_fd >= 0 ? 3 : 2;
    union {
        char buf[CMSG_SPACE(3 * sizeof(int))];
        struct cmsghdr align;
    } u = {0};
    struct iovec iov[2] = {{.iov_base = &q, .iov_len = sizeof q}, {.iov_base = extra, .iov_len = len}};
    struct msghdr mh = {.msg_iov = iov,
                        .msg_iovlen = 2,
                        .msg_control = u.buf,
                        .msg_controllen = CMSG_SPACE((size_t) nfds * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t) nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t) nfds * sizeof(int));
    struct cdn_worker_reply r = {.pid = -EIO};
    bool sent = sendmsg(z.ctl, &mh, MSG_NOSIGNAL) == (ssize_t) (sizeof q + len);
    bool answered = sent && recv(z.ctl, &r, sizeof r, 0) == (ssize_t) sizeof r;
    agent[1] = safe_close(agent[1]);
    rep[1] = safe_close(rep[1]);
    if (!answered || r.pid <= 0) {
        (void) close(agent[0]);
        (void) close(rep[0]);
        if (!answered)
            zygote_stop(); /* a new one next time */
        return cdn_error_set(err, answered ? -r.pid : EIO, "the zygote could not make a worker: %s",
                             strerror(answered ? -r.pid : EIO));
    }
    sb->init_pid = r.pid;
    /* Our child (CLONE_PARENT): its pid cannot be reused before we reap it. */
    sb->init_pidfd = (int) syscall(SYS_pidfd_open, r.pid, 0);
    sb->agent_fd = agent[0];
    sb->setup_fd = rep[0];
    if (sb->init_pidfd < 0)
        return cdn_error_set(err, errno, "pidfd_open: %m");
    return 0;
}

static int process_destroy(struct cdn_sandbox *sb);

static int process_create(struct cdn_sandbox *sb, struct cdn_error *err)
{
    int r = zygote(err);
    if (r < 0)
        return r;
    if (!z.cgroup_ops)
        z.cgroup_ops = cdn_cgroup_detect();
    if ((r = cdn_slot_acquire(cdn_run_dir(), sb->slot_hint, &sb->slot, &sb->slot_fd, err)) < 0)
        return r;
    sb->uid_base = cdn_slot_uid_base(sb->slot);
    char name[32];
    (void) snprintf(name, sizeof name, "slot-%d", sb->slot);
    cdn_cgroup_init(&sb->cgroup, z.cgroup_ops, name);
    if (sb->cgroup.ops->kill_all(&sb->cgroup) > 0)
        (void) sb->cgroup.ops->destroy(&sb->cgroup);
    /* cordond's (persistent) sandboxes have no reaper: cordond drops the slots it kept, and sweeps
     * what a crashed one left (process_sweep_slots). */
    if (!sb->persistent &&
        (r = cdn_reaper_start(&sb->cgroup, sb->slot_fd, &sb->reaper_fd, &sb->reaper_pid)) < 0)
        r = cdn_error_set(err, r, "start reaper: %s", strerror(-r));
    if (r >= 0)
        r = cdn_slot_make_cgroup(sb, err);
    if (r >= 0)
        r = make_dir(sb, err);
    if (r >= 0)
        r = spawn(sb, err);
    if (r < 0)
        (void) process_destroy(sb);
    return r;
}

static int process_kill(struct cdn_sandbox *sb, int sig)
{
    /* No pid namespace dies with the agent: SIGKILL ends everything in the cgroup at once (what a
     * violation in kill mode needs: the offender must not run on). */
    if (sig == SIGKILL && sb->cgroup.ops)
        (void) sb->cgroup.ops->kill_all(&sb->cgroup);
    return cdn_slot_signal(sb, sig);
}

/* The cgroup's counts, and its directory's tmpfs (limits.disk_mb). */
static int process_usage(struct cdn_sandbox *sb, struct cdn_usage *ret)
{
    int r = cdn_slot_usage(sb, ret);
    char dir[4200];
    struct statfs fs;
    (void) snprintf(dir, sizeof dir, "%s/process/%d", cdn_run_dir(), sb->slot);
    if (r == 0 && statfs(dir, &fs) == 0) {
        ret->disk_used_bytes = (uint64_t) (fs.f_blocks - fs.f_bfree) * (uint64_t) fs.f_bsize;
        ret->disk_size_bytes = (uint64_t) fs.f_blocks * (uint64_t) fs.f_bsize;
        ret->disk_known = true;
    }
    return r;
}

static void release_dir(struct cdn_sandbox *sb)
{
    remove_dir(sb->slot);
}

static int process_destroy(struct cdn_sandbox *sb)
{
    /* The cgroup holds everything the sandbox started, whatever uid it ran as. */
    return cdn_slot_destroy(sb, release_dir);
}

static void process_detach(struct cdn_sandbox *sb)
{
    /* The directory is a mount the reaper does not know: destroyed here, which is quick. */
    (void) process_destroy(sb);
}

static int process_adopt(struct cdn_sandbox *sb, struct cdn_error *err)
{
    (void) sb;
    return cdn_error_set(err, ESRCH, "a process-tier sandbox does not outlive the cordond that made it");
}

static void process_forget(struct cdn_sandbox *sb)
{
    (void) sb;
}

static int process_monitor_fd(struct cdn_sandbox *sb)
{
    if (sb->init_pidfd < 0)
        return -ESRCH;
    return RET_NERRNO((int) syscall(SYS_pidfd_getfd, sb->init_pidfd, 9, 0));
}

/* The directories (tmpfs mounts) of slots nobody holds: a crashed cordond's. The slots and their
 * kept cgroups are the container tier's (the same names): its drop_slot and sweep_slots. */
static void process_sweep_slots(void)
{
    char dir[4096];
    (void) snprintf(dir, sizeof dir, "%s/process", cdn_run_dir());
    DIR *d = opendir(dir);
    if (!d)
        return;
    (void) snprintf(dir, sizeof dir, "%s/slots", cdn_run_dir());
    _cleanup_close_ int slots = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct dirent *de;
    while ((de = readdir(d))) {
        int slot;
        char tail;
        if (sscanf(de->d_name, "%d%c", &slot, &tail) != 1 || slot < 0 || slots < 0)
            continue;
        int fd = cdn_slot_lock(slots, slot);
        if (fd >= 0)
            remove_dir(slot);
        if (fd >= 0)
            (void) close(fd);
    }
    closedir(d);
}

/* Its writable space is its directory's tmpfs (of limits.disk_mb). */
static int process_disk_full(struct cdn_sandbox *sb, bool *ret)
{
    char dir[4200];
    struct statfs fs;
    if (sb->init_pid <= 0)
        return -ESRCH;
    (void) snprintf(dir, sizeof dir, "%s/process/%d", cdn_run_dir(), sb->slot);
    if (statfs(dir, &fs) < 0)
        return -errno;
    *ret = fs.f_bavail == 0;
    return 0;
}

static const struct cdn_tier_escape by_design[] = {
    {"uid_map_root", "tier process has no user namespace (docs/process.md)"},
    {"gid_map_root", "tier process has no user namespace (docs/process.md)"},
    {"host_pid_visible", "tier process has no pid or network namespace (docs/process.md)"},
    {"net_default_route", "tier process has no pid or network namespace (docs/process.md)"},
    {"net_interfaces", "tier process has no pid or network namespace (docs/process.md)"},
    {NULL, NULL},
};

const struct cdn_tier_ops cdn_process_tier = {
    .name = "process",
    .tier = CDN_TIER_PROCESS,
    .calls = true,
    .binds_under = "/workspace",
    .by_design = by_design,
    .create = process_create,
    .kill = process_kill,
    .usage = process_usage,
    .set_limits = cdn_slot_set_limits,
    .disk_full = process_disk_full,
    .destroy = process_destroy,
    .detach = process_detach,
    .adopt = process_adopt,
    .forget = process_forget,
    .sweep_slots = process_sweep_slots,
    .monitor_fd = process_monitor_fd,
};
