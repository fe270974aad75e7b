/* A VM tier's guest as a sandbox (qemu.h): the ops both tiers' tables hold. Runs in the host
 * process that owns the sandbox (cordon run, cordond), as root. The guest's frames (its USAGE
 * reports) are its own word: hostile, taken only as growth. */
#include "qemu.h"
#include "proto/frame.h"
#include "confine/seccomp-policy.h"
#include "core/paths.h"
#include "image/image.h"
#include "net/netns.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

/* The tier's own state of a sandbox (sb->tier_data). */
struct vm_state {
    char accel[8]; /* what QEMU runs the guest with: "kvm" or "tcg" */
    bool restored; /* started from the snapshot, else booted cold */
    /* The guest's last USAGE report (its cgroup of commands, its disk). */
    uint64_t memory_peak, oom_kills, pids_max_hits;
    bool disk_full;
    bool now_known; /* then: its commands' pids and its disk, as of that report */
    uint64_t pids, disk_used, disk_size;
    /* A checkpointable guest's QMP connection (QEMU's fd 5, or its socket at sb->qmp_socket again
     * after an adoption), kept for its memory checkpoints; none for a guest booted cold. */
    int qmp;
    bool has_qmp;
};

/* sb's state, made at its first use; NULL: out of memory. */
static struct vm_state *vm_state(struct cdn_sandbox *sb)
{
    if (!sb->tier_data)
        sb->tier_data = calloc(1, sizeof(struct vm_state));
    return sb->tier_data;
}

/* What a clone must not share with its siblings: sent before any command. */
static int send_identity(struct cdn_sandbox *sb)
{
    static struct cdn_identity id;
    id = (struct cdn_identity){0};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    id.time_ns = (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
    if (getrandom(id.seed, sizeof id.seed, 0) != (ssize_t) sizeof id.seed ||
        getrandom(id.machine_id, sizeof id.machine_id, 0) != (ssize_t) sizeof id.machine_id)
        return -EIO;
    (void) snprintf(id.hostname, sizeof id.hostname, "%s", sb->spec->hostname);
    (void) snprintf(id.workdir, sizeof id.workdir, "%s", sb->spec->workdir);
    id.pids = sb->spec->limits.pids;
    id.nofile = sb->spec->limits.nofile;
    id.disk_mb = (uint32_t) sb->spec->limits.disk_mb;
    id.memory_mb = (uint32_t) sb->spec->limits.memory_mb;
    for (size_t i = 0; i < sb->spec->n_mounts && i < CDN_IDENTITY_PATHS; i++) {
        id.paths[id.n_paths].kind = sb->spec->mounts[i].readonly ? CDN_PATH_BIND_RO : CDN_PATH_BIND_RW;
        (void) snprintf(id.paths[id.n_paths++].path, sizeof id.paths[0].path, "%s",
                        sb->spec->mounts[i].target);
    }
    for (size_t i = 0; i < sb->spec->protect.n && id.n_paths < CDN_IDENTITY_PATHS; i++) {
        id.paths[id.n_paths].kind = CDN_PATH_PROTECT; /* patterns: the guest expands them */
        (void) snprintf(id.paths[id.n_paths++].path, sizeof id.paths[0].path, "%s", sb->spec->protect.v[i]);
    }
    if (sb->spec->writable_system && id.n_paths < CDN_IDENTITY_PATHS) { /* room: check_binds */
        id.paths[id.n_paths].kind = CDN_PATH_SYSTEM;
        (void) snprintf(id.paths[id.n_paths++].path, sizeof id.paths[0].path, "/");
    }
    if (sb->spec->user &&
        id.n_paths < CDN_IDENTITY_PATHS) { /* the guest checks it, and gives it /workspace */
        id.paths[id.n_paths].kind = CDN_PATH_USER;
        (void) snprintf(id.paths[id.n_paths++].path, sizeof id.paths[0].path, "%s", sb->spec->user);
    }
    /* the /30 of the sandbox's veth; the host end routes and resolves */
    if (sb->netns_fd >= 0 && sb->sandbox_ip) {
        id.ip = sb->sandbox_ip;
        id.gateway = id.resolver = sb->resolver_ip;
        id.prefix = 30;
    }
    static uint8_t buf[16384];
    int n = cdn_identity_encode(buf, sizeof buf, &id);
    return n < 0 ? n : cdn_frame_send(sb->agent_fd, CDN_FRAME_IDENTITY, 0, buf, (uint32_t) n);
}

/* A guest restored from a memory checkpoint: HOLD's RESUME (frame.h), with the clock, fresh
 * randomness and the sandbox's network (a fork's guest has its parent's); its DONE is its start's
 * answer. */
static int send_resume(struct cdn_sandbox *sb)
{
    uint8_t p[CDN_HOLD_RESUME_LEN];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t t =
        (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec; /* little-endian, as frames are */
    p[0] = CDN_HOLD_RESUME;
    memcpy(p + 1, &t, sizeof t);
    if (getrandom(p + 9, CDN_IDENTITY_SEED, 0) != (ssize_t) CDN_IDENTITY_SEED)
        return -EIO;
    uint32_t net[3] = {0};
    if (sb->netns_fd >= 0 && sb->sandbox_ip)
        net[0] = sb->sandbox_ip, net[1] = net[2] = sb->resolver_ip;
    memcpy(p + 9 + CDN_IDENTITY_SEED, net, sizeof net);
    p[9 + CDN_IDENTITY_SEED + 12] = net[0] ? 30 : 0;
    return cdn_frame_send(sb->agent_fd, CDN_FRAME_HOLD, 0, p, sizeof p);
}

/* How the guest's init confines each command: the container tier's seccomp programs (the same
 * cache), and what to do on a watched denial. */
static int send_policy(struct cdn_sandbox *sb, struct cdn_error *err)
{
    char cache[4096];
    cdn_cache_dir(cache, sizeof cache);
    _cleanup_(cdn_seccomp_prog_free) struct cdn_seccomp_prog prog = {0};
    int r = cdn_seccomp_load_cached(cache, &prog, err);
    if (r < 0)
        return r;
    size_t insns = ((size_t) prog.len[0] + prog.len[1]) * 8;
    _cleanup_free_ uint8_t *buf = malloc(6 + insns);
    if (!buf)
        return cdn_error_set(err, ENOMEM, "out of memory");
    buf[0] = sb->spec->on_violation == CDN_VIOLATION_KILL ? CDN_POLICY_KILL : 0;
    buf[1] = 0;
    memcpy(buf + 2, &prog.len[0], 2); /* little-endian, as the frames are (x86-64 only) */
    memcpy(buf + 4, &prog.len[1], 2);
    memcpy(buf + 6, prog.insns, insns);
    r = cdn_frame_send(sb->agent_fd, CDN_FRAME_POLICY, 0, buf, (uint32_t) (6 + insns));
    return r < 0 ? cdn_error_set(err, -r, "send the guest its policy: %s", strerror(-r)) : 0;
}

#define QEMU_MEM_OVERHEAD_MB 512
#define QEMU_PIDS            256

static void cgroup_name(const struct cdn_sandbox *sb, char *buf, size_t size)
{
    (void) snprintf(buf, size, "vm-%s", sb->id);
}

static int qemu_cgroup(struct cdn_sandbox *sb, uint64_t guest_mb, struct cdn_error *err)
{
    char name[CDN_CGROUP_NAME_MAX];
    cgroup_name(sb, name, sizeof name);
    cdn_cgroup_init(&sb->cgroup, cdn_cgroup_detect(), name);
    struct cdn_cgroup_limits l = {.cpus = sb->spec->limits.cpus,
                                  .memory_bytes = (guest_mb + QEMU_MEM_OVERHEAD_MB) << 20,
                                  .pids = QEMU_PIDS};
    int r = sb->cgroup.ops->create(&sb->cgroup, &l, err);
    if (r < 0) {
        (void) sb->cgroup.ops->destroy(&sb->cgroup);
        sb->cgroup.ops = NULL;
        return cdn_error_prefix(err, r, "QEMU's cgroup");
    }
    struct cdn_cgroup_stats st; /* a reused directory's CPU time so far (cdn_qemu_usage) */
    if (r > 0 && sb->cgroup.ops->stats(&sb->cgroup, &st) == 0)
        sb->cpu_base = st.cpu_usec;
    return 0;
}

static int tap_bridge(void *arg)
{
    return cdn_netns_tap_bridge(*(const uint32_t *) arg);
}

/* A new connection to the unix socket fd listens on. */
static int connect_to(int fd)
{
    struct sockaddr_un sa;
    socklen_t len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *) &sa, &len) < 0)
        return -errno;
    _cleanup_close_ int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0)
        return -errno;
    if (connect(c, (struct sockaddr *) &sa, len) < 0)
        return -errno;
    return TAKE_FD(c);
}

/* A full VM's directory (<vm dir>/run/ID): QEMU's $TMPDIR, where its snapshot of the disk goes. */
static void run_dir(const struct cdn_sandbox *sb, char *buf, size_t size)
{
    (void) snprintf(buf, size, "%s/run/%s", cdn_vm_dir(), sb->id);
}

static void remove_run_dir(const struct cdn_sandbox *sb)
{
    char dir[4200];
    run_dir(sb, dir, sizeof dir);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.')
            (void) unlinkat(dirfd(d), e->d_name, 0);
    if (d) {
        closedir(d);
        (void) rmdir(dir);
    }
}

/* How old an empty vm-* cgroup must be before sweep_stale() takes it for a dead guest's: a guest's
 * QEMU joins its cgroup within milliseconds of its making. */
#define STALE_S 10

/* The vm-* cgroups under parent that have been empty for STALE_S. */
static void sweep_stale_cgroups(const struct cdn_cgroup_ops *ops, const char *parent, time_t now)
{
    char p[4400];
    _cleanup_closedir_ DIR *d = opendir(parent);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        struct stat st;
        char procs[64];
        (void) snprintf(p, sizeof p, "%s/%s/cgroup.procs", parent, e->d_name);
        if (strncmp(e->d_name, "vm-", 3) != 0 || strlen(e->d_name) >= CDN_CGROUP_NAME_MAX ||
            stat(p, &st) < 0 || now - st.st_mtime < STALE_S ||
            cdn_read_file_at(AT_FDCWD, p, procs, sizeof procs) != 0)
            continue;
        struct cdn_cgroup cg;
        cdn_cgroup_init(&cg, ops, e->d_name);
        (void) ops->destroy(&cg);
    }
}

/* The run directories (under <vm dir>/run) of guests with no cgroup under parent. */
static void sweep_stale_run_dirs(const char *parent, time_t now)
{
    char run[4200], p[4400];
    (void) snprintf(run, sizeof run, "%s/run", cdn_vm_dir());
    _cleanup_closedir_ DIR *d = opendir(run);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        struct stat st;
        (void) snprintf(p, sizeof p, "%s/vm-%s", parent, e->d_name);
        struct cdn_sandbox dead = {0};
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof dead.id || access(p, F_OK) == 0 ||
            fstatat(dirfd(d), e->d_name, &st, 0) < 0 || now - st.st_mtime < STALE_S)
            continue;
        (void) snprintf(dead.id, sizeof dead.id, "%s", e->d_name);
        remove_run_dir(&dead);
    }
}

/* What guests whose `cordon run` was killed (SIGKILL: no teardown) left behind: their cgroups, which
 * their QEMUs (ended with it) left empty, and a full VM's run directory (the disk's snapshot) with
 * no cgroup. Swept at each create: cordond's guests, and any other live one, have a QEMU in theirs. */
static void sweep_stale(void)
{
    const struct cdn_cgroup_ops *ops = cdn_cgroup_detect();
    char parent[4200];
    if (cdn_cgroup_path(parent, sizeof parent, ops->version, "pids", "") < 0)
        return;
    time_t now = time(NULL);
    sweep_stale_cgroups(ops, parent, now);
    sweep_stale_run_dirs(parent, now);
}

/* An image's root disk as an erofs (path into disk). */
int cdn_qemu_image_erofs(const struct cdn_spec *spec, unsigned how, char *disk, size_t size,
                         struct cdn_error *err)
{
    struct cdn_image img;
    int r = cdn_image_resolve(spec->image, &img, err);
    return r < 0 ? r : cdn_vm_image_disk(&img, how, disk, size, err);
}

/* What QEMU's child will need of the spec: the share's mount point, and every bind's source there
 * (its errors are the create's, with the field, not a QEMU that never starts). */
static int check_binds(const struct cdn_sandbox *sb, struct cdn_error *err)
{
    char p[4300];
    for (int i = 0; i < 2; i++) {
        (void) snprintf(p, sizeof p, "%s/%s", cdn_vm_dir(), i ? "share" : "empty");
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
            return cdn_error_set(err, errno, "create %s: %m", p);
    }
    const struct cdn_spec *spec = sb->spec;
    if (spec->n_mounts + spec->protect.n + spec->writable_system + (spec->user != NULL) > CDN_IDENTITY_PATHS)
        return cdn_error_field(err, E2BIG, spec->protect.n ? "protect" : "mounts",
                               "mounts and protect: at most %d together for tier %s", CDN_IDENTITY_PATHS,
                               sb->tier->name);
    /* IDENTITY carries each in 256 bytes: a longer one would reach the guest cut short */
    for (size_t i = 0; i < spec->protect.n; i++)
        if (strlen(spec->protect.v[i]) >= sizeof((struct cdn_identity *) 0)->paths[0].path) {
            char field[32];
            (void) snprintf(field, sizeof field, "protect[%zu]", i);
            return cdn_error_field(err, E2BIG, field, "%s: at most %zu bytes at creation for tier %s", field,
                                   sizeof((struct cdn_identity *) 0)->paths[0].path - 1, sb->tier->name);
        }
    for (size_t i = 0; i < spec->n_mounts; i++) {
        struct stat st;
        if (stat(spec->mounts[i].source, &st) < 0) {
            char field[32];
            (void) snprintf(field, sizeof field, "mounts[%zu].source", i);
            return cdn_error_field(err, errno, field, "%s: %s: %m", field, spec->mounts[i].source);
        }
    }
    return 0;
}

/* The fds a create holds for QEMU until it has its copies, and its own ends. */
struct launch {
    int agent[2]; /* [0] ours (the sandbox's agent_fd), [1] QEMU's fd 3 */
    int qmp[2];   /* a restore's QMP: [0] ours, [1] QEMU's fd 5 */
    int state;    /* a restore's state file: QEMU's fd 4 */
    int tap;      /* the sandbox's tap: QEMU's fd 6 */
    int disk;     /* a disk image file: QEMU's fd 7 */
};
#define LAUNCH_INIT                                                                                          \
    {                                                                                                        \
        .agent = {-EBADF, -EBADF}, .qmp = {-EBADF, -EBADF}, .state = -EBADF, .tap = -EBADF, .disk = -EBADF   \
    }

static void launch_close(struct launch *l)
{
    close_pairp(&l->agent);
    close_pairp(&l->qmp);
    (void) safe_close(l->state);
    (void) safe_close(l->tap);
    (void) safe_close(l->disk);
}

/* The agent's socket: a pair, or (persistent) the caller's listening socket, handed to QEMU, and
 * our connection to it. */
static int agent_socket(const struct cdn_sandbox *sb, int fds[2], struct cdn_error *err)
{
    if (!(sb->persistent && sb->listen_fd >= 0))
        return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0
                   ? cdn_error_set(err, errno, "socketpair: %m")
                   : 0;
    if ((fds[1] = fcntl(sb->listen_fd, F_DUPFD_CLOEXEC, 3)) < 0)
        return cdn_error_set(err, errno, "connect to the agent socket: %m");
    if ((fds[0] = connect_to(sb->listen_fd)) < 0)
        return cdn_error_set(err, -fds[0], "connect to the agent socket: %s", strerror(-fds[0]));
    return 0;
}

/* Everything QEMU gets that is not its command line: the fds of l, the snapshot (a restore's), the
 * sandbox's network and binds, its uid. The snapshot and the disk's tmpdir are "" / NULL when none. */
static pid_t launch(struct cdn_sandbox *sb, const struct cdn_qemu_cmd *q, struct launch *l, const char *accel,
                    const char *snapshot, const char *tmpdir, int *pidfd, struct cdn_error *err)
{
    _cleanup_close_ int userns = -EBADF;
    uid_t uid = cdn_qemu_pick_uid(accel, *snapshot ? snapshot : NULL, &userns);
    pid_t pid = cdn_qemu_spawn(q,
                               &(struct cdn_qemu_fds){.agent = l->agent[1],
                                                      .fd4 = l->state,
                                                      .fd5 = l->qmp[1],
                                                      .tap = l->tap,
                                                      .disk = l->disk,
                                                      .netns = sb->netns_fd,
                                                      .persistent = sb->persistent,
                                                      .mounts = sb->spec->mounts,
                                                      .n_mounts = sb->spec->n_mounts,
                                                      .cgroup = &sb->cgroup,
                                                      .tmpdir = tmpdir,
                                                      .uid = uid,
                                                      .idmap_userns = userns,
                                                      .idmap_dir = uid && *snapshot ? snapshot : NULL},
                               pidfd, err);
    /* QEMU's ends go now: a QEMU that dies must be seen as an EOF on ours. */
    l->agent[1] = safe_close(l->agent[1]);
    l->qmp[1] = safe_close(l->qmp[1]);
    l->tap = safe_close(l->tap);
    return pid;
}

/* The guest up to its first frame: IDENTITY and POLICY wait in the socket until its init reads
 * them, before any command. */
static int greet(struct cdn_sandbox *sb, int *qmp, struct cdn_error *err)
{
    int r = *qmp >= 0 ? cdn_qemu_restore(*qmp, sb->init_pidfd, err) : 0;
    struct vm_state *st = sb->tier_data;
    if (r == 0 && *qmp >= 0 && sb->spec->checkpoints && st) { /* for its memory checkpoints */
        st->qmp = TAKE_FD(*qmp);
        st->has_qmp = true;
    }
    *qmp = safe_close(*qmp); /* else QMP's work is done: QEMU keeps no monitor of ours */
    if (r < 0)
        return r;
    if (sb->memory_from_fd >= 0) /* set up as it was: it only learns that time went on */
        return (r = send_resume(sb)) < 0 ? cdn_error_set(err, -r, "resume the guest: %s", strerror(-r)) : 0;
    if ((r = send_identity(sb)) < 0)
        return cdn_error_set(err, -r, "send the guest its identity: %s", strerror(-r));
    return send_policy(sb, err);
}

/* What a create decides before it holds anything: the guest's assets, disk, accelerator, boot and
 * shape. */
struct plan {
    struct cdn_vm_assets vm;
    char disk[4400];    /* "" for none */
    const char *format; /* a disk image file's */
    const char *accel;
    enum cdn_qemu_boot boot;
    uint64_t mem_mb;
    int smp;
    char snapshot[4096]; /* a restore's template directory, else "" */
};

/* The part of a plan made once and cached (how: CDN_VM_*): the assets, the root disk, the shape and
 * the snapshot. */
static int plan_assets(const struct cdn_spec *spec, const struct cdn_qemu_tier *t, unsigned how,
                       struct plan *p, struct cdn_error *err)
{
    int r = cdn_vm_prepare(&p->vm, how, err);
    p->disk[0] = p->snapshot[0] = 0;
    p->format = NULL;
    if (r < 0 || (r = t->root_disk(spec, how, p->disk, sizeof p->disk, &p->format, err)) < 0)
        return r;
    p->accel = cdn_qemu_pick_accel(&p->vm);
    const char *boot = getenv("CORDON_VM_BOOT");
    p->boot = !t->snapshots || (boot && strcmp(boot, "cold") == 0) ? CDN_QEMU_COLD : CDN_QEMU_RESTORE;
    /* The guest gets the limit and what its kernel, init and page cache need besides (a full VM's
     * system too); its commands' cgroup gets the limit, as a container's cgroup does (identity
     * memory_mb). */
    p->mem_mb = spec->limits.memory_mb + t->overhead_mb;
    p->smp = (int) ceil(spec->limits.cpus);
    if (p->boot == CDN_QEMU_RESTORE &&
        (r = cdn_qemu_snapshot_dir(t, &p->vm, p->accel, p->mem_mb, p->smp, *p->disk ? p->disk : NULL, how,
                                   p->snapshot, sizeof p->snapshot, err)) < 0)
        return r == -EAGAIN && (how & CDN_VM_LOOK)
                   ? r
                   : cdn_error_prefix(err, r, "the microvm snapshot (CORDON_VM_BOOT=cold boots without one)");
    return 0;
}

int cdn_qemu_prepare(const struct cdn_spec *spec, const struct cdn_qemu_tier *t, bool build,
                     struct cdn_error *err)
{
    static struct plan p; /* big; one caller at a time (cordond's loop, or its child) */
    int r = plan_assets(spec, t, build ? CDN_VM_PROGRESS : CDN_VM_LOOK, &p, err);
    return r == -EAGAIN && !build ? 0 : r < 0 ? r : 1;
}

static int plan(struct cdn_sandbox *sb, const struct cdn_qemu_tier *t, struct plan *p, struct cdn_error *err)
{
    int r = plan_assets(sb->spec, t, CDN_VM_PROGRESS, p, err);
    if (r < 0 || (r = check_binds(sb, err)) < 0 || (r = cdn_tier_hold_image(sb, err)) < 0)
        return r;
    struct vm_state *st = vm_state(sb);
    if (!st)
        return cdn_error_set(err, ENOMEM, "out of memory");
    (void) snprintf(st->accel, sizeof st->accel, "%s", p->accel);
    return 0;
}

/* A checkpointable guest of cordond's: its QMP listens at sb->qmp_socket (one host at a time, as
 * its agent's port), for the memory checkpoints a restarted cordond takes too. */
static bool qmp_listens(const struct cdn_sandbox *sb)
{
    return sb->qmp_socket && sb->spec->checkpoints && sb->persistent;
}

static int qmp_listen(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path)
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    (void) unlink(path);
    if (bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(fd, 1) < 0)
        return -errno;
    return TAKE_FD(fd);
}

/* The fds QEMU gets (struct launch). */
static int open_fds(struct cdn_sandbox *sb, const struct plan *p, struct launch *l, struct cdn_error *err)
{
    char path[4300];
    int r;
    if (sb->memory_from_fd >= 0 && p->boot != CDN_QEMU_RESTORE)
        return cdn_error_field(err, EOPNOTSUPP, "checkpoint",
                               "checkpoint: a memory checkpoint restores into a guest of the template's "
                               "shape, not into one booted cold (CORDON_VM_BOOT=cold)");
    if (sb->memory_from_fd >= 0) {
        if ((l->state = fcntl(sb->memory_from_fd, F_DUPFD_CLOEXEC, 3)) < 0)
            return cdn_error_set(err, errno, "the memory checkpoint: %m");
    } else if (p->boot == CDN_QEMU_RESTORE) {
        (void) snprintf(path, sizeof path, "%s/state", p->snapshot);
        if ((l->state = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            return cdn_error_set(err, errno, "open %s: %m", path);
    }
    vm_state(sb)->restored = p->boot == CDN_QEMU_RESTORE; /* made by plan() */
    if ((r = agent_socket(sb, l->agent, err)) < 0)
        return r;
    if (p->boot == CDN_QEMU_RESTORE && qmp_listens(sb)) {
        if ((l->qmp[1] = qmp_listen(sb->qmp_socket)) < 0)
            return cdn_error_set(err, -l->qmp[1], "QMP's socket %s: %s", sb->qmp_socket,
                                 strerror(-l->qmp[1]));
        if ((l->qmp[0] = connect_to(l->qmp[1])) < 0)
            return cdn_error_set(err, -l->qmp[0], "connect to QMP: %s", strerror(-l->qmp[0]));
    } else if (p->boot == CDN_QEMU_RESTORE && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, l->qmp) < 0)
        return cdn_error_set(err, errno, "socketpair: %m");
    /* The sandbox's network: a tap bridged to its veth, in its namespace. */
    if (sb->netns_fd >= 0 && sb->sandbox_ip) {
        struct cdn_netns ns = {.fd = sb->netns_fd};
        if ((l->tap = cdn_netns_run(&ns, tap_bridge, &sb->sandbox_ip)) < 0)
            return cdn_error_set(err, -l->tap, "the guest's tap in the sandbox's network namespace: %s",
                                 strerror(-l->tap));
    }
    /* A disk image file: opened here (read-only: QEMU's snapshot takes the writes). */
    if (p->format && (l->disk = open(p->disk, O_RDONLY | O_CLOEXEC)) < 0)
        return cdn_error_field(err, errno, "image", "image: '%s': %m", p->disk);
    return 0;
}

int cdn_qemu_create(struct cdn_sandbox *sb, const struct cdn_qemu_tier *t, struct cdn_error *err)
{
    sweep_stale();
    struct plan p;
    _cleanup_(launch_close) struct launch l = LAUNCH_INIT;
    int r = plan(sb, t, &p, err);
    if (r < 0 || (r = open_fds(sb, &p, &l, err)) < 0)
        return r;
    /* QEMU's cgroup: its vCPUs' share of the CPU, the guest's memory and QEMU's own (TCG's code
     * cache, device state), a bound on its threads. A disk image's QEMU gets the sandbox's run
     * directory as its $TMPDIR. */
    char tmpdir[4200];
    run_dir(sb, tmpdir, sizeof tmpdir);
    if ((r = qemu_cgroup(sb, p.mem_mb, err)) < 0 ||
        (p.format && cdn_mkdir_p(tmpdir, 0700) < 0 &&
         (r = cdn_error_set(err, errno, "create %s: %m", tmpdir)))) {
        if (sb->cgroup.ops)
            (void) cdn_qemu_destroy(sb);
        return r;
    }
    struct cdn_qemu_disk d = {.path = *p.disk ? p.disk : NULL, .format = p.format};
    struct cdn_qemu_cmd q = {0};
    cdn_qemu_cmd_build(&q,
                       &(struct cdn_qemu_opts){.vm = &p.vm,
                                               .accel = p.accel,
                                               .mem_mb = p.mem_mb,
                                               .smp = p.smp,
                                               .boot = p.boot,
                                               .memdir = p.snapshot,
                                               .listening = sb->persistent && sb->listen_fd >= 0,
                                               .qmp_listening = p.boot == CDN_QEMU_RESTORE && qmp_listens(sb),
                                               .tap = l.tap >= 0,
                                               .binds = sb->spec->n_mounts > 0,
                                               .pci = t->pci,
                                               .initramfs = t->initramfs(&p.vm, &d),
                                               .append = t->append,
                                               .disk = d});
    int pidfd = -EBADF;
    pid_t pid = launch(sb, &q, &l, p.accel, p.snapshot, p.format ? tmpdir : NULL, &pidfd, err);
    if (pid < 0) {
        (void) cdn_qemu_destroy(sb); /* its cgroup: nothing is left behind */
        return (int) pid;
    }
    sb->agent_fd = TAKE_FD(l.agent[0]);
    sb->init_pid = pid;
    sb->init_pidfd = pidfd;
    /* No setup child. A persistent guest's caller (cordond) waits for its answers to IDENTITY
     * and POLICY; for another, a pipe already at EOF says "running". */
    int sfd[2];
    if (!sb->persistent && pipe2(sfd, O_CLOEXEC) == 0) {
        (void) close(sfd[1]);
        sb->setup_fd = sfd[0];
    }
    if (sb->on_spawned && (r = sb->on_spawned(sb, sb->on_spawned_arg)) < 0)
        r = cdn_error_set(err, -r, "record the sandbox: %s", strerror(-r));
    if (r >= 0)
        r = greet(sb, &l.qmp[0], err);
    if (r < 0)
        (void) cdn_qemu_destroy(sb);
    return r < 0 ? r : 0;
}

int cdn_qemu_kill(struct cdn_sandbox *sb, int sig)
{
    if (sb->init_pidfd < 0)
        return -ESRCH;
    /* Signals for the command cannot reach inside the guest this way: the
     * agent forwards them; here only the end of the whole guest is asked for. */
    return RET_NERRNO(
        (int) syscall(SYS_pidfd_send_signal, sb->init_pidfd, sig == SIGKILL ? SIGKILL : SIGTERM, NULL, 0));
}

/* What the guest last reported (USAGE frames, cdn_qemu_frame): its commands' cgroup. */
int cdn_qemu_usage(struct cdn_sandbox *sb, struct cdn_usage *ret)
{
    const struct vm_state *st = sb->tier_data;
    struct cdn_cgroup_stats host = {0}; /* QEMU's: the guest's kernel and commands */
    bool known = sb->cgroup.ops && sb->cgroup.ops->stats(&sb->cgroup, &host) == 0;
    *ret = st ? (struct cdn_usage){.memory_peak_bytes = st->memory_peak,
                                   .oom_kills = st->oom_kills,
                                   .pids_max_hits = st->pids_max_hits}
              : (struct cdn_usage){0};
    if (known) {
        ret->cpu_usec = host.cpu_usec - (host.cpu_usec >= sb->cpu_base ? sb->cpu_base : 0);
        ret->cpu_known = host.cpu_known;
        ret->memory_bytes = host.memory_bytes;
        ret->memory_known = true;
    }
    if (st && st->now_known) {
        ret->pids = st->pids, ret->pids_known = true;
        ret->disk_used_bytes = st->disk_used, ret->disk_size_bytes = st->disk_size, ret->disk_known = true;
    }
    return 0;
}

/* A VM's cpus are its QEMU's cgroup quota; its memory (the guest's RAM, fixed at boot) and pids
 * (the guest kernel's) are not the host's to change. */
int cdn_qemu_set_limits(struct cdn_sandbox *sb, const struct cdn_limits *l, unsigned which,
                        struct cdn_error *err)
{
    if (which & (CDN_CGROUP_SET_MEMORY | CDN_CGROUP_SET_PIDS))
        return cdn_error_field(err, EOPNOTSUPP,
                               which & CDN_CGROUP_SET_MEMORY ? "limits.memory_mb" : "limits.pids",
                               "%s: fixed at creation on tier %s (the guest's own)",
                               which & CDN_CGROUP_SET_MEMORY ? "limits.memory_mb" : "limits.pids",
                               cdn_tier_to_string(sb->spec->tier));
    if (!sb->cgroup.ops)
        return cdn_error_set(err, ENODEV, "QEMU has no cgroup");
    struct cdn_cgroup_limits c = {.cpus = l->cpus};
    return sb->cgroup.ops->set_limits(&sb->cgroup, &c, CDN_CGROUP_SET_CPUS, err);
}

/* The guest's disk is the guest's: full as it last reported. */
int cdn_qemu_disk_full(struct cdn_sandbox *sb, bool *ret)
{
    const struct vm_state *st = sb->tier_data;
    *ret = st && st->disk_full;
    return 0;
}

/* A guest's USAGE frame (proto/frame.h), in the host process that owns the sandbox: the guest's
 * word, so only ever taken as growth. */
int cdn_qemu_frame(struct cdn_sandbox *sb, uint16_t type, const uint8_t *p, size_t len)
{
    if (type != CDN_FRAME_USAGE)
        return 0;
    struct cdn_usage_msg u;
    int r = cdn_usage_decode(p, len, &u);
    if (r < 0)
        return r;
    struct vm_state *st = vm_state(sb);
    if (!st)
        return -ENOMEM;
    /* Counters only grow (a guest could claim less to hide an OOM it had; never more than it had). */
    if (u.oom_kills > st->oom_kills)
        st->oom_kills = u.oom_kills;
    if (u.pids_max_hits > st->pids_max_hits)
        st->pids_max_hits = u.pids_max_hits;
    if (u.memory_peak_bytes > st->memory_peak)
        st->memory_peak = u.memory_peak_bytes;
    st->disk_full = u.disk_full;
    st->now_known = u.now_known; /* the guest's word (a hostile guest's too): shown, never enforced */
    st->pids = u.pids, st->disk_used = u.disk_used_bytes, st->disk_size = u.disk_size_bytes;
    return 1;
}

/* What runs the guest, and how it started. */
void cdn_qemu_describe(const struct cdn_sandbox *sb, struct json_t *o, enum cdn_describe_view view)
{
    const struct vm_state *st = sb->tier_data;
    if (!st || !st->accel[0])
        return;
    if (view == CDN_DESCRIBE_API)
        json_object_set_new(
            o, "vm", json_pack("{s:s, s:s}", "accel", st->accel, "boot", st->restored ? "snapshot" : "cold"));
    else if (view == CDN_DESCRIBE_RECORD) /* a VM's: its QEMU is init_pid, and no slot */
        json_object_set_new(o, "vm", json_pack("{s:s, s:b}", "accel", st->accel, "restored", st->restored));
    else
        json_object_set_new(o, "accel", json_string(st->accel));
}

int cdn_qemu_restore_state(struct cdn_sandbox *sb, const struct json_t *record)
{
    const char *accel = "";
    int restored = 0;
    if (json_unpack((json_t *) record, "{s?{s:s, s:b}}", "vm", "accel", &accel, "restored", &restored) < 0)
        return -EBADMSG;
    struct vm_state *st = vm_state(sb);
    if (!st)
        return -ENOMEM;
    (void) snprintf(st->accel, sizeof st->accel, "%s", accel);
    st->restored = restored;
    return 0;
}

void cdn_qemu_release(struct cdn_sandbox *sb)
{
    free(sb->tier_data);
    sb->tier_data = NULL;
}

int cdn_qemu_destroy(struct cdn_sandbox *sb)
{
    if (sb->init_pidfd >= 0) {
        (void) cdn_qemu_kill(sb, SIGKILL);
        /* Through the pidfd: an adopted QEMU is not our child, and its pid may be reused once it is
         * gone; then the pidfd's readiness says it has ended. */
        siginfo_t si;
        int w;
        while ((w = waitid(P_PIDFD, (id_t) sb->init_pidfd, &si, WEXITED | __WALL)) < 0 && errno == EINTR)
            ;
        if (w < 0 && errno == ECHILD) {
            (void) cdn_qemu_poll_in(sb->init_pidfd, 5000);
        }
    }
    sb->init_pid = 0;
    sb->init_pidfd = safe_close(sb->init_pidfd);
    sb->agent_fd = safe_close(sb->agent_fd);
    sb->setup_fd = safe_close(sb->setup_fd);
    struct vm_state *st = sb->tier_data;
    if (st && st->has_qmp) {
        st->qmp = safe_close(st->qmp);
        st->has_qmp = false;
    }
    if (sb->cgroup.ops) { /* whatever QEMU left in it (nothing, normally), then the cgroup */
        (void) sb->cgroup.ops->kill_all(&sb->cgroup);
        (void) sb->cgroup.ops->destroy(&sb->cgroup);
        sb->cgroup.ops = NULL;
        sb->cgroup.dirfd = safe_close(sb->cgroup.dirfd);
    }
    remove_run_dir(sb); /* a full VM's snapshot of its disk */
    return 0;
}

int cdn_qemu_save_memory(struct cdn_sandbox *sb, int out, struct cdn_error *err)
{
    struct vm_state *st = sb->tier_data;
    if (st && st->has_qmp && out < 0)
        return 0; /* asked whether it can */
    if (!st || !st->has_qmp)
        return cdn_error_field(err, EOPNOTSUPP, "checkpoints",
                               "sandbox %s: its QEMU has no monitor of cordond's (a guest booted cold): it "
                               "keeps no memory checkpoints",
                               sb->id);
    return cdn_qemu_save(st->qmp, out, err);
}

/* A persistent guest of an earlier cordond: its QEMU, by pid (the caller checked its start time). */
int cdn_qemu_adopt(struct cdn_sandbox *sb, struct cdn_error *err)
{
    int fd = (int) syscall(SYS_pidfd_open, sb->init_pid, 0);
    if (fd < 0)
        return cdn_error_set(err, errno, "QEMU (pid %d): %m", (int) sb->init_pid);
    sb->init_pidfd = fd;
    char name[CDN_CGROUP_NAME_MAX];
    cgroup_name(sb, name, sizeof name);
    cdn_cgroup_init(&sb->cgroup, cdn_cgroup_detect(), name); /* destroy() removes it */
    struct vm_state *st = vm_state(sb);
    if (!st)
        return cdn_error_set(err, ENOMEM, "out of memory");
    if (!st->accel[0]) /* the record says; else as it was chosen */
        (void) snprintf(st->accel, sizeof st->accel, "%s", cdn_qemu_pick_accel(NULL));
    /* Its QMP again, for its memory checkpoints (a QEMU of an older cordond has none listening). */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (sb->qmp_socket && sb->spec->checkpoints && strlen(sb->qmp_socket) < sizeof sa.sun_path) {
        strcpy(sa.sun_path, sb->qmp_socket);
        _cleanup_close_ int q = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct cdn_error qe = {0};
        if (q >= 0 && connect(q, (struct sockaddr *) &sa, sizeof sa) == 0 && cdn_qemu_qmp_open(q, &qe) == 0 &&
            cdn_qemu_resume_paused(q) == 0) {
            st->qmp = TAKE_FD(q);
            st->has_qmp = true;
        }
    }
    return 0;
}

void cdn_qemu_detach(struct cdn_sandbox *sb)
{
    (void) cdn_qemu_destroy(sb); /* QEMU is gone or goes at once: nothing to leave to the background */
}

/* A QEMU of an earlier cordond that is gone (or not ours): its cgroup, and anything still in it. */
void cdn_qemu_forget(struct cdn_sandbox *sb)
{
    char name[CDN_CGROUP_NAME_MAX];
    cgroup_name(sb, name, sizeof name);
    cdn_cgroup_init(&sb->cgroup, cdn_cgroup_detect(), name);
    sb->init_pidfd = safe_close(sb->init_pidfd);
    sb->init_pid = 0;
    (void) cdn_qemu_destroy(sb);
}

const struct cdn_tier_escape cdn_qemu_by_design[] = {
    {"uid_map_root", "uid 0 in a VM guest is the guest kernel's root, not the host's (docs/microvm.md)"},
    {"gid_map_root", "uid 0 in a VM guest is the guest kernel's root, not the host's (docs/microvm.md)"},
    {NULL, NULL},
};
