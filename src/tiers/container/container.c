/* The container tier, host side: runs in the creating process (root in the
 * initial namespaces). Owns the slot, the cgroup, the reaper and the init
 * process; hands the agent socket to the caller.
 *
 * create(): slot → reaper → cgroup → clone3 into fresh namespaces → id maps,
 * cgroup membership → "go". The child (setup.c) builds the root and execs
 * cordon-init; a setup failure comes back on sb->setup_fd. */
#include "container-internal.h"
#include "core/paths.h"
#include "confine/slot.h"
#include "tiers/tier.h"
#include "shared/fd-util.h"
#include "shared/mount-util.h"
#include "core/protect.h"
#include "monitor/fanotify.h"
#include "monitor/writes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <ftw.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* Prepared once per process: the seccomp program and the init binary. */
static struct {
    bool ready;
    struct cdn_seccomp_prog seccomp;
    struct cdn_seccomp_prog seccomp_writes; /* the variant with reported writes, loaded when first needed */
    int init_fd;
    const struct cdn_cgroup_ops *cgroup_ops;
} prep = {.init_fd = -EBADF};

static int prepare(struct cdn_error *err)
{
    if (prep.ready)
        return 0;
    if (geteuid() != 0)
        return cdn_error_set(err, EPERM,
                             "the container tier needs root: it maps a host uid range and makes cgroups");
    char path[4096];
    if (cdn_init_path(path, sizeof path) < 0)
        return cdn_error_set(err, ENOENT, "cordon-init not found (set CORDON_INIT or install cordon)");
    prep.init_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (prep.init_fd < 0)
        return cdn_error_set(err, errno, "open %s: %m", path);
    char cache[4096];
    cdn_cache_dir(cache, sizeof cache);
    int r = cdn_seccomp_load_cached(cache, &prep.seccomp, err);
    if (r < 0)
        return r;
    prep.cgroup_ops = cdn_cgroup_detect();
    prep.ready = true;
    return 0;
}

static int write_id_maps(pid_t pid, uint32_t base, uint32_t count, struct cdn_error *err)
{
    char path[64], map[64];
    (void) snprintf(map, sizeof map, "0 %u %u\n", base, count);
    const char *files[] = {"uid_map", "gid_map"};
    for (size_t i = 0; i < ELEMENTSOF(files); i++) {
        (void) snprintf(path, sizeof path, "/proc/%d/%s", (int) pid, files[i]);
        int r = cdn_write_file_at(AT_FDCWD, path, map);
        if (r < 0)
            return cdn_error_set(err, r, "write %s: %s", path, strerror(-r));
    }
    return 0;
}

/* The image's root as the sandbox sees it: an idmapped mount of its directory through the sandbox's
 * own user namespace, so that a file the image gives to uid 0 (or 1000) is the sandbox's root's (or
 * its uid 1000's) and copy-up, git and package managers work on it in place. mount_setattr() with
 * MOUNT_ATTR_IDMAP needs CAP_SYS_ADMIN in the initial user namespace, so the host makes it; the
 * setup child moves it into its own mount namespace under the overlay and detaches it once the
 * overlay holds it. Returns the detached mount's fd; a file system that cannot be idmapped gives
 * -EINVAL and the sandbox keeps the image's files as nobody's (the fallback of rootfs.c). The host
 * image is never idmapped: its skeleton is cordon's, and /usr is the host's own. */
/* The idmapping of the root's files owned from 0 on disk: the sandbox's user namespace. An fd, or
 * -errno. */
static int root_userns(pid_t pid)
{
    char path[64];
    (void) snprintf(path, sizeof path, "/proc/%d/ns/user", (int) pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

static int idmapped_lower(const struct cdn_sandbox *sb, pid_t pid, const struct cdn_image *image,
                          bool writable)
{
    if (image->host)
        return -EOPNOTSUPP;
    /* Files of the engine's range for the container (sandbox.h root_ids_from): the sandbox's own ids
     * already, no idmap. */
    _cleanup_close_ int userns = sb->root_ids_from ? -EBADF : root_userns(pid);
    if (!sb->root_ids_from && userns < 0)
        return userns;
    return cdn_idmapped_tree(image->lower, userns, (writable ? 0 : MOUNT_ATTR_RDONLY) | MOUNT_ATTR_NODEV);
}

/* 'm' to the setup child, with the idmapped image root when there is one. */
static int send_go_maps(int sock, int lower_fd)
{
    return cdn_send_byte_fd(sock, 'm', lower_fd, MSG_NOSIGNAL) < 0 ? -1 : 0;
}

/* The go pipe broke: the setup child has died. Its own report, if it wrote
 * one, says why far better than EPIPE does. */
static int child_failed(int rep_fd, int errnum, struct cdn_error *err)
{
    struct cdn_error child = {0};
    if (cdn_read_full(rep_fd, &child, sizeof child) == (ssize_t) sizeof child && child.errnum) {
        child.msg[sizeof child.msg - 1] = child.field[sizeof child.field - 1] = 0;
        *err = child;
        return -child.errnum;
    }
    return cdn_error_set(err, errnum, "the sandbox's setup process ended early: %m");
}

static int start_reaper(struct cdn_sandbox *sb, struct cdn_error *err)
{
    if (sb->persistent)
        return 0; /* init holds the slot; whoever adopts it cleans up (cordond) */
    int r = cdn_reaper_start(&sb->cgroup, sb->slot_fd, &sb->reaper_fd, &sb->reaper_pid);
    return r < 0 ? cdn_error_set(err, r, "start reaper: %s", strerror(-r)) : 0;
}

/* A bind of a root in place (container-internal.h): cloned here, as host root, with its flags. */
static int send_bind(int sock, const struct cdn_mount *m, size_t i, struct cdn_error *err)
{
    char field[32];
    (void) snprintf(field, sizeof field, "mounts[%zu]", i);
    _cleanup_close_ int tree =
        (int) syscall(SYS_open_tree, AT_FDCWD, m->source,
                      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (m->nonrecursive ? 0 : AT_RECURSIVE));
    if (tree < 0)
        return cdn_error_field(err, errno, field, "%s.source '%s': %m", field, m->source);
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                          (m->readonly ? MOUNT_ATTR_RDONLY : 0) |
                                          (m->noexec ? MOUNT_ATTR_NOEXEC : 0)};
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) < 0)
        return cdn_error_field(err, errno, field, "%s '%s': set its flags: %m", field, m->source);
    if (cdn_send_byte_fd(sock, 'b', tree, MSG_NOSIGNAL) < 0)
        return cdn_error_set(err, errno, "send the bind of %s to the setup child: %m", m->source);
    return 0;
}

/* Work runs in parallel where it can: the child makes its network namespace
 * (the costliest namespace, ~0.4 ms) and builds its root once its ids are
 * mapped, while this process forks the reaper and makes the cgroup.
 * cgroup v2 can place the child at birth (CLONE_INTO_CGROUP), so there the
 * reaper and the cgroup come before clone3. On failure the caller's destroy() undoes it all. */
static int spawn(struct cdn_sandbox *sb, const struct cdn_image *image, const char *scratch, int writable_fd,
                 struct cdn_error *err)
{
    _cleanup_close_pair_ int agent[2] = {-EBADF, -EBADF}, go[2] = {-EBADF, -EBADF}, rep[2] = {-EBADF, -EBADF};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, agent) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, go) < 0 || pipe2(rep, O_CLOEXEC) < 0)
        return cdn_error_set(err, errno, "socketpair/pipe: %m");
    const bool v2 = sb->cgroup.ops->version == CDN_CGROUP_V2;
    int r;
    /* Protected paths, or asked for: the policy that reports path writes (seccomp-policy.h). */
    const bool writes = sb->spec->protect.n > 0 || sb->spec->watch_writes;
    if (writes && !prep.seccomp_writes.insns) {
        char cache[4096];
        cdn_cache_dir(cache, sizeof cache);
        if ((r = cdn_seccomp_load_variant(cache, true, &prep.seccomp_writes, err)) < 0)
            return r;
    }
    if (v2 && ((r = start_reaper(sb, err)) < 0 || (r = cdn_slot_make_cgroup(sb, err)) < 0))
        return r;
    struct cdn_setup_args args = {
        .spec = sb->spec,
        .image = image,
        .seccomp = writes ? &prep.seccomp_writes : &prep.seccomp,
        .scratch = scratch,
        .go_fd = go[0],
        .err_fd = rep[1],
        .agent_fd = agent[1],
        .init_fd = prep.init_fd,
        .stdio_fd = sb->stdio_fd,
        .persistent = sb->persistent,
        .listen_fd = sb->persistent ? sb->listen_fd : -EBADF,
        .slot_fd = sb->persistent ? sb->slot_fd : -EBADF,
        .fanotify_fd = sb->fanotify_fd,
        .cgroup = v2 ? NULL : &sb->cgroup,
        .netns_given = sb->netns_fd >= 0,
        .resolver_ip = sb->resolver_ip,
        .writable_fd = writable_fd,
        .root_in_place = sb->root_in_place,
        .rlimits = sb->rlimits,
        .sysctls = sb->sysctls,
        .masked_paths = sb->masked_paths,
        .readonly_paths = sb->readonly_paths,
        .fs_mounts = sb->fs_mounts,
        .n_fs_mounts = sb->n_fs_mounts,
        .seccomp_extra = sb->seccomp_extra,
        .seccomp_extra_len = sb->seccomp_extra_len,
        .restored = sb->layer_from_fd >= 0,
        .uid_base = sb->uid_base,
        .into_cgroup_fd = v2 ? sb->cgroup.dirfd : -EBADF,
        .netns_fd = sb->netns_fd,
    };
    /* A prepared network namespace (owned by the host's user namespace, so the sandbox's root has no
     * power over it), where the child is born (cordon-setup enters it): the host sets its sysctls
     * and mounts its sysfs from inside. */
    _cleanup_close_ int host_net = -EBADF, sysfs = -EBADF;
    if (sb->netns_fd >= 0) {
        host_net = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        if (host_net < 0 || setns(sb->netns_fd, CLONE_NEWNET) < 0)
            return cdn_error_set(err, errno, "enter the sandbox's network namespace: %m");
        r = cdn_engine_sysctls(sb->sysctls, CDN_SYSCTLS_NET, sb->uid_base, err);
        if (r >= 0 && cdn_engine_wants(sb->fs_mounts, sb->n_fs_mounts, "sysfs") &&
            (sysfs = cdn_engine_sysfs()) < 0)
            r = cdn_error_field(err, -sysfs, "mounts", "mounts: sysfs of the network namespace: %s",
                                strerror(-sysfs));
        if (setns(host_net, CLONE_NEWNET) < 0)
            abort(); /* never go on in the sandbox's namespace */
        if (r < 0)
            return r;
    }
    int pidfd = -EBADF;
    pid_t pid = cdn_spawner_request(&args, err, &pidfd);
    if (pid < 0)
        return pid;
    /* The child's ends: closed here so that its death reads as EOF on ours. */
    agent[1] = safe_close(agent[1]);
    go[0] = safe_close(go[0]);
    rep[1] = safe_close(rep[1]);
    sb->init_pid = pid;
    sb->init_pidfd = pidfd;
    /* The child builds its root as soon as it has its ids ('m'); meanwhile, for
     * v1, the reaper is forked and the cgroup made here, and the child joins it
     * itself (cdn_cgroup_ops.attach_self) once told it is ready ('c'). The reaper
     * comes first: a cgroup must never exist without someone to remove it. */
    if ((r = write_id_maps(pid, sb->uid_base, sb->root_ids_from ? sb->root_ids_count : CDN_UID_RANGE, err)) <
        0)
        return r;
    const bool in_place_rw = sb->root_in_place && !sb->spec->read_only_root;
    /* Layers owned from 0 on disk are idmapped through the sandbox's user namespace; with the engine's
     * range as the sandbox's (sandbox.h root_ids_from) the upper is not, nor are lowers the engine
     * shifted itself; lowers it idmapped itself are owned from 0 (lowers_from_zero). */
    const struct cdn_root_layers *rl = sb->root_layers;
    const bool from_zero = rl && (!sb->root_ids_from || rl->lowers_from_zero);
    _cleanup_close_ int userns = rl && !sb->root_ids_from ? root_userns(pid) : -EBADF;
    _cleanup_close_ int lower_userns = rl && sb->root_ids_from && from_zero ? root_userns(pid) : -EBADF;
    if ((rl && !sb->root_ids_from && userns < 0) ||
        (rl && sb->root_ids_from && from_zero && lower_userns < 0))
        return cdn_error_field(err, ENOENT, "root.path", "root.path: the sandbox's user namespace is gone");
    _cleanup_close_ int lower = sb->root_layers ? cdn_root_layers_mount(userns, lower_userns, sb->uid_base,
                                                                        sb->root_layers, in_place_rw, err)
                                                : idmapped_lower(sb, pid, image, in_place_rw);
    if (sb->root_layers && lower < 0)
        return lower;
    if (send_go_maps(go[1], lower) < 0)
        return child_failed(rep[0], errno, err);
    for (size_t i = 0; sb->root_in_place && i < sb->spec->n_mounts; i++)
        if ((r = send_bind(go[1], &sb->spec->mounts[i], i, err)) < 0)
            return r;
    if (sysfs >= 0 && cdn_send_byte_fd(go[1], 's', sysfs, MSG_NOSIGNAL) < 0)
        return child_failed(rep[0], errno, err);
    lower = safe_close(lower);
    sysfs = safe_close(sysfs);
    if (!v2 && ((r = start_reaper(sb, err)) < 0 || (r = cdn_slot_make_cgroup(sb, err)) < 0 ||
                (r = sb->cgroup.ops->delegate_self(&sb->cgroup, sb->uid_base, sb->uid_base)) < 0))
        return err->msg[0] ? r : cdn_error_set(err, r, "delegate cgroup: %s", strerror(-r));
    if (sb->on_spawned && (r = sb->on_spawned(sb, sb->on_spawned_arg)) < 0)
        return cdn_error_set(err, r, "record the sandbox: %s", strerror(-r));
    if (send(go[1], "c", 1, MSG_NOSIGNAL) != 1)
        return child_failed(rep[0], errno, err);
    sb->agent_fd = TAKE_FD(agent[0]);
    sb->setup_fd = TAKE_FD(rep[0]);
    return 0;
}

static int container_destroy(struct cdn_sandbox *sb);

static int container_create(struct cdn_sandbox *sb, struct cdn_error *err)
{
    int r = prepare(err);
    if (r < 0)
        return r;
    if (sb->root_in_place && sb->spec->n_mounts > CDN_IN_PLACE_BINDS_MAX)
        return cdn_error_field(err, E2BIG, "mounts", "mounts: more than %d binds", CDN_IN_PLACE_BINDS_MAX);
    struct cdn_image image;
    if ((r = cdn_image_resolve(sb->spec->image, &image, err)) < 0 ||
        (sb->image_fd < 0 && (r = cdn_image_hold(&image, &sb->image_fd, err)) < 0))
        return r;
    char scratch[4096];
    (void) snprintf(scratch, sizeof scratch, "%s/mnt", cdn_run_dir());
    if (access(scratch, F_OK) < 0 && (r = cdn_mkdir_p(scratch, 0755)) < 0)
        return cdn_error_set(err, r, "mkdir %s: %s", scratch, strerror(-r));
    /* A layer made ahead comes with its slot (the owner of its files). */
    struct cdn_layer_ready *ready = sb->layer_ready;
    if (ready && ready->mnt >= 0 && ready->slot_fd >= 0) {
        sb->slot = ready->slot;
        sb->slot_fd = TAKE_FD(ready->slot_fd);
    } else if ((r = cdn_slot_acquire(cdn_run_dir(), sb->slot_hint, &sb->slot, &sb->slot_fd, err)) < 0) {
        return r;
    }
    /* The engine's range for the container (sandbox.h root_ids_from), else the slot's */
    sb->uid_base = sb->root_ids_from ? sb->root_ids_from : cdn_slot_uid_base(sb->slot);
    char name[32];
    (void) snprintf(name, sizeof name, "slot-%d", sb->slot);
    cdn_cgroup_init(&sb->cgroup, prep.cgroup_ops, sb->cgroup_name ? sb->cgroup_name : name);
    /* A stale cgroup of this slot (its owner and reaper both died) is emptied and reused. */
    if (!sb->cgroup_name && sb->cgroup.ops->kill_all(&sb->cgroup) > 0)
        (void) sb->cgroup.ops->destroy(&sb->cgroup);
    /* The writable layer on disk: the child takes its copy of the mount at clone, ours goes here. */
    _cleanup_close_ int writable = -EBADF;
    if (sb->spec->disk == CDN_DISK_DISK && !sb->root_in_place &&
        (r = writable = cdn_writable_make(sb, err)) < 0) {
        (void) container_destroy(sb);
        return r;
    }
    if ((r = spawn(sb, &image, scratch, writable, err)) < 0)
        (void) container_destroy(sb);
    return r;
}

static int container_kill(struct cdn_sandbox *sb, int sig)
{
    return cdn_slot_signal(sb, sig);
}

/* The cgroup's counts, and its root's filesystem: the overlay answers for its upper layer (the
 * writable layer on disk, or the tmpfs of disk "memory"). */
static int container_usage(struct cdn_sandbox *sb, struct cdn_usage *ret)
{
    int r = cdn_slot_usage(sb, ret);
    char root[64];
    struct statfs fs;
    struct cdn_pool_usage pool;
    (void) snprintf(root, sizeof root, "/proc/%d/root/", (int) sb->init_pid);
    if (r == 0 && cdn_layer_pool_usage(sb->id, true, &pool) == 0) { /* statfs would tell the pool's */
        ret->disk_used_bytes = pool.used;
        ret->disk_size_bytes = pool.cap;
        ret->disk_known = true;
    } else if (r == 0 && sb->init_pid > 0 && statfs(root, &fs) == 0) {
        ret->disk_used_bytes = (uint64_t) (fs.f_blocks - fs.f_bfree) * (uint64_t) fs.f_bsize;
        ret->disk_size_bytes = (uint64_t) fs.f_blocks * (uint64_t) fs.f_bsize;
        ret->disk_known = true;
    }
    return r;
}

static int container_destroy(struct cdn_sandbox *sb)
{
    return cdn_slot_destroy(sb, NULL);
}

static void container_detach(struct cdn_sandbox *sb)
{
    /* Kill init (the namespace dies with it) and leave the waiting, the
     * cgroup removal and the slot to the reaper: the caller can go on at once. */
    (void) container_kill(sb, SIGKILL);
    sb->init_pid = 0;
    sb->init_pidfd = safe_close(sb->init_pidfd);
    sb->agent_fd = safe_close(sb->agent_fd);
    sb->setup_fd = safe_close(sb->setup_fd);
    sb->reaper_fd = safe_close(sb->reaper_fd); /* EOF without "done": the reaper cleans up */
    cdn_slot_let_go(sb);
    sb->cgroup.ops = NULL;
}

static int container_adopt(struct cdn_sandbox *sb, struct cdn_error *err)
{
    int r = prepare(err);
    if (r < 0)
        return r;
    if (sb->slot < 0)
        return cdn_error_set(err, EINVAL, "adopt: no slot");
    sb->uid_base = sb->root_ids_from ? sb->root_ids_from : cdn_slot_uid_base(sb->slot);
    char name[32];
    (void) snprintf(name, sizeof name, "slot-%d", sb->slot);
    cdn_cgroup_init(&sb->cgroup, prep.cgroup_ops, sb->cgroup_name ? sb->cgroup_name : name);
    int fd = (int) syscall(SYS_pidfd_open, sb->init_pid, 0);
    if (fd < 0) {
        r = cdn_error_set(err, errno, "adopt: init %d: %m", (int) sb->init_pid);
        sb->init_pid = 0;
        return r;
    }
    sb->init_pidfd = fd;
    /* Share init's slot lock (fd 8, the same open file description): the
     * slot must stay taken until our cleanup after init's death is done. */
    sb->slot_fd = (int) syscall(SYS_pidfd_getfd, fd, 8, 0);
    if (sb->slot_fd < 0)
        return cdn_error_set(err, errno, "adopt: the slot lock of init %d: %m", (int) sb->init_pid);
    if (cdn_slot_hold(sb) < 0)
        return cdn_error_set(err, EINVAL, "adopt: fd 8 of init %d is not the lock of slot %d",
                             (int) sb->init_pid, sb->slot);
    return 0;
}

static void container_drop_slot(int slot)
{
    struct cdn_error err = {0};
    if (prepare(&err) < 0)
        return;
    char path[4096];
    (void) snprintf(path, sizeof path, "%s/slots", cdn_run_dir());
    _cleanup_close_ int dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    _cleanup_close_ int fd = dir < 0 ? -EBADF : cdn_slot_lock(dir, slot);
    if (fd < 0)
        return; /* taken: its owner reuses or removes the cgroup */
    struct cdn_cgroup cg;
    char name[32];
    (void) snprintf(name, sizeof name, "slot-%d", slot);
    cdn_cgroup_init(&cg, prep.cgroup_ops, name);
    (void) cg.ops->kill_all(&cg);
    (void) cg.ops->destroy(&cg);
}

static void container_sweep_slots(void)
{
    struct cdn_error err = {0};
    if (prepare(&err) < 0)
        return;
    /* Every v1 controller, not one for all: a creator killed half-way
     * through making a slot's cgroup leaves it in some controllers only. */
    static const char *const ctrls[] = {"pids", "memory", "cpu"};
    static uint8_t seen[(CDN_SLOT_COUNT + 7) / 8];
    memset(seen, 0, sizeof seen);
    size_t n = prep.cgroup_ops->version == CDN_CGROUP_V2 ? 1 : ELEMENTSOF(ctrls);
    for (size_t c = 0; c < n; c++) {
        char dir[512];
        int r = cdn_cgroup_path(dir, sizeof dir, prep.cgroup_ops->version, ctrls[c], "");
        DIR *d = r < 0 ? NULL : opendir(dir);
        if (!d)
            continue;
        struct dirent *de;
        while ((de = readdir(d))) {
            int slot;
            char tail;
            if (sscanf(de->d_name, "slot-%d%c", &slot, &tail) != 1 || slot < 0 || slot >= CDN_SLOT_COUNT ||
                (seen[slot / 8] & (1u << (slot % 8))))
                continue;
            seen[slot / 8] |= (uint8_t) (1u << (slot % 8));
            container_drop_slot(slot);
        }
        closedir(d);
    }
}

static int container_monitor_fd(struct cdn_sandbox *sb)
{
    if (sb->init_pidfd < 0)
        return -ESRCH;
    int fd = (int) syscall(SYS_pidfd_getfd, sb->init_pidfd, CDN_FD_MONITOR, 0);
    return fd < 0 ? -errno : fd;
}

static int container_fanotify_fd(struct cdn_sandbox *sb)
{
    if (sb->init_pidfd < 0)
        return -ESRCH;
    int fd = (int) syscall(SYS_pidfd_getfd, sb->init_pidfd, CDN_FD_FANOTIFY, 0);
    if (fd < 0)
        return -errno;
    /* A group, not the place init keeps for one (init.c): EBADF as if it held none. */
    char p[64], what[64];
    (void) snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(p, what, sizeof what - 1);
    if (n <= 0 || (what[n] = 0, strcmp(what, "anon_inode:[fanotify]") != 0)) {
        (void) close(fd);
        return -EBADF;
    }
    return fd;
}

/* The writable layer (of limits.disk_mb, on disk or a tmpfs) under its overlay, seen through init's
 * root: the overlay's statfs is its upper layer's. */
static int container_disk_full(struct cdn_sandbox *sb, bool *ret)
{
    char root[64];
    struct statfs fs;
    struct cdn_pool_usage pool;
    if (sb->init_pid <= 0)
        return -ESRCH;
    if (cdn_layer_pool_usage(sb->id, false, &pool) == 0) {
        *ret = pool.cap && pool.charged + CDN_WRITABLE_FULL_MARGIN >= pool.cap;
        return 0;
    }
    (void) snprintf(root, sizeof root, "/proc/%d/root/", (int) sb->init_pid);
    if (statfs(root, &fs) < 0)
        return -errno;
    *ret = sb->spec->disk == CDN_DISK_DISK ? cdn_writable_full(&fs) : fs.f_bavail == 0;
    return 0;
}

/* Network given at run time (egress.c): a read-only file naming the new resolver is bound over
 * the sandbox's /etc/resolv.conf, as at a create with a network (rootfs.c), by a child that enters
 * its mount namespace. The agent owns that path by now: only a regular file reached without a
 * symlink, and not a mount already, is covered (a symlink it planted could otherwise steer the
 * bind over a file a verifier reads); err says why it was left. 2 s at most. */
static int network_given_bind(const struct cdn_sandbox *sb, int fd);

static int network_given_child(const struct cdn_sandbox *sb, const char *text)
{
    char dir[4200], name[64];
    (void) snprintf(dir, sizeof dir, "%s/mnt", cdn_run_dir());
    (void) snprintf(name, sizeof name, "resolv-%d.conf", (int) getpid());
    int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    int fd = dfd < 0 ? -1 : openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || cdn_write_all(fd, text, strlen(text)) < 0)
        return errno;
    int e = network_given_bind(sb, fd);
    (void) unlinkat(dfd, name, 0); /* after the bind (a file unlinked first cannot be bound): it holds it */
    return e;
}

static int network_given_bind(const struct cdn_sandbox *sb, int fd)
{
    int e, tree = (int) syscall(SYS_open_tree, fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
    e = errno;
    struct mount_attr ro = {.attr_set =
                                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC};
    if (tree < 0 || syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &ro, sizeof ro) < 0)
        return tree < 0 ? e : errno;
    if (setns(sb->init_pidfd, CLONE_NEWNS) < 0)
        return errno;
    struct open_how how = {.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                           .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int target = cdn_openat2(AT_FDCWD, "/etc/resolv.conf", &how);
    if (target < 0 && errno == ENOENT) { /* an image without one: made as the sandbox's root */
        how = (struct open_how){.flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                .mode = 0644,
                                .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
        (void) setfsgid(sb->uid_base);
        (void) setfsuid(sb->uid_base);
        target = cdn_openat2(AT_FDCWD, "/etc/resolv.conf", &how);
        e = errno;
        (void) setfsuid(0);
        (void) setfsgid(0);
        errno = e;
    }
    struct stat st;
    uint64_t id;
    bool root = false;
    if (target < 0)
        return errno;
    if (fstat(target, &st) < 0 || (e = -cdn_mount_of(target, "", AT_EMPTY_PATH, &id, &root)) > 0)
        return e ? e : errno;
    if (!S_ISREG(st.st_mode))
        return S_ISLNK(st.st_mode) ? ELOOP : EINVAL;
    if (root)
        return EBUSY;
    return syscall(SYS_move_mount, tree, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) <
                   0
               ? errno
               : 0;
}

static int container_network_given(struct cdn_sandbox *sb, struct cdn_error *err)
{
    char text[128];
    uint32_t ip = sb->resolver_ip;
    (void) snprintf(text, sizeof text, "nameserver %u.%u.%u.%u\noptions timeout:2 attempts:2\n", ip >> 24,
                    (ip >> 16) & 255, (ip >> 8) & 255, ip & 255);
    if (sb->init_pidfd < 0)
        return cdn_error_set(err, ESRCH, "its init is gone");
    pid_t pid = fork();
    if (pid < 0)
        return cdn_error_set(err, errno, "fork: %m");
    if (pid == 0)
        _exit(network_given_child(sb, text) & 255);
    _cleanup_close_ int pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    int k;
    while ((k = pidfd < 0 ? -1 : poll(&p, 1, 2000)) < 0 && errno == EINTR)
        ;
    if (k != 1)
        (void) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    char left[4200]; /* its file, whatever became of the child */
    (void) snprintf(left, sizeof left, "%s/mnt/resolv-%d.conf", cdn_run_dir(), (int) pid);
    (void) unlink(left);
    int e = WIFEXITED(status) ? WEXITSTATUS(status) : ETIMEDOUT;
    if (e == 0)
        return 0;
    return cdn_error_set(err, e, "/etc/resolv.conf left as it was: %s",
                         e == ELOOP    ? "a symlink"
                         : e == EINVAL ? "not a regular file"
                         : e == EBUSY  ? "a mount point"
                                       : strerror(e));
}

/* ---- protected paths changed at run time ---- */

struct bound {
    struct cdn_protect_mount *v;
    size_t n, cap;
    bool oom;
};

static void on_bound(void *ud, const char *path, int mnt_id)
{
    struct bound *b = ud;
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 16;
        struct cdn_protect_mount *v = realloc(b->v, cap * sizeof *v);
        if (!v) {
            b->oom = true;
            return;
        }
        b->v = v, b->cap = cap;
    }
    b->v[b->n].mnt_id = mnt_id;
    (void) snprintf(b->v[b->n++].path, sizeof b->v[0].path, "%s", path);
}

/* Released: the bind of a path no longer protected stays (a mount point, so it still cannot be
 * moved aside) and takes the mode of the mount it covers again. By mount id (the host's record),
 * never by a path the agent could have pointed elsewhere since. */
static int release(int rootfd, const int *ids, size_t n_ids, struct cdn_error *err)
{
    if (!n_ids)
        return 0;
    struct cdn_mount_info *m = NULL;
    size_t n = 0;
    int r = cdn_mounts_read(1, &m, &n); /* the sandbox's /proc: its init */
    if (r < 0)
        return cdn_error_set(err, -r, "read the sandbox's mounts: %s", strerror(-r));
    for (size_t i = 0; r >= 0 && i < n; i++) {
        bool wanted = false, covered_ro = false;
        for (size_t k = 0; k < n_ids; k++)
            wanted |= ids[k] == m[i].id;
        for (size_t j = 0; wanted && j < n; j++)
            covered_ro |= m[j].id == m[i].parent && m[j].ro;
        if (!wanted || covered_ro)
            continue; /* read-only beneath: it stays so */
        struct open_how how = {.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                               .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
        _cleanup_close_ int fd = cdn_openat2(rootfd, m[i].mp, &how);
        uint64_t id;
        bool root = false;
        if (fd < 0 || cdn_mount_of(fd, "", AT_EMPTY_PATH, &id, &root) < 0 || (int) id != m[i].id || !root)
            continue; /* gone, or covered */
        struct mount_attr rw = {.attr_clr = MOUNT_ATTR_RDONLY};
        if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &rw, sizeof rw) < 0)
            r = cdn_error_set(err, errno, "release %s: %m", m[i].mp);
    }
    cdn_mounts_free(m, n);
    return r;
}

/* In the sandbox's mount namespace: add's matches bound read-only (cdn_protect_bind, each new bind
 * recorded in b), then the mounts of release released. If a pattern fails or a process holds a way
 * in (cdn_protect_find_holder, cdn_protect_check_links), every bind made here is undone and nothing
 * released. */
static int protect_child(const struct cdn_sandbox *sb, const struct cdn_strv *add, const int *rel,
                         size_t n_rel, struct bound *b, struct cdn_error *err)
{
    if (setns(sb->init_pidfd, CLONE_NEWNS) < 0)
        return cdn_error_set(err, errno, "enter the sandbox's mount namespace: %m");
    _cleanup_close_ int rootfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return cdn_error_set(err, errno, "open the sandbox's root: %m");
    _cleanup_(cdn_strv_free) struct cdn_strv roots = {0};
    int r =
        cdn_protect_holder_roots(rootfd, add, &roots) < 0 ? cdn_error_set(err, ENOMEM, "out of memory") : 0;
    if (r >= 0 && add->n)
        r = cdn_protect_bind(rootfd, add, on_bound, b, err);
    if (r >= 0 && b->oom)
        r = cdn_error_set(err, ENOMEM, "out of memory");
    if (r >= 0 && add->n)
        r = cdn_protect_find_holder(&roots, 0, err);
    for (size_t i = 0; r >= 0 && i < b->n; i++)
        r = cdn_protect_check_links(b->v[i].path, err);
    if (r < 0) {
        for (size_t i = b->n; i-- > 0;)
            (void) umount2(b->v[i].path, MNT_DETACH | UMOUNT_NOFOLLOW);
        b->n = 0;
        return r;
    }
    return release(rootfd, rel, n_rel, err);
}

/* What the child sends: an int, then that many cdn_protect_mount, or -1 then a cdn_error. */
static int container_protect(struct cdn_sandbox *sb, const struct cdn_strv *add, const int *rel, size_t n_rel,
                             struct cdn_protect_mount **ret, size_t *ret_n, void (*hook)(void *),
                             void *hook_arg, struct cdn_error *err)
{
    *ret = NULL, *ret_n = 0;
    if (sb->init_pidfd < 0)
        return cdn_error_set(err, ESRCH, "its init is gone");
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return cdn_error_set(err, errno, "pipe: %m");
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        (void) close(pipefd[0]);
        (void) close(pipefd[1]);
        return cdn_error_set(err, e, "fork: %m");
    }
    if (pid == 0) {
        struct cdn_error e = {0};
        struct bound b = {0};
        int r = protect_child(sb, add, rel, n_rel, &b, &e), n = r < 0 ? -1 : (int) b.n;
        bool ok = cdn_write_all(pipefd[1], &n, sizeof n) == 0 &&
                  (r < 0 ? cdn_write_all(pipefd[1], &e, sizeof e)
                         : cdn_write_all(pipefd[1], b.v, b.n * sizeof *b.v)) == 0;
        _exit(ok ? 0 : 1);
    }
    (void) close(pipefd[1]);
    /* Read all of it while waiting: the child's walk may open a directory the host guards, whose
     * permission event the caller answers in hook (else the two would wait on each other). */
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int r = 0;
    for (;;) {
        struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
        int k = poll(&pfd, 1, 10);
        if (hook)
            hook(hook_arg);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 30) {
            (void) kill(pid, SIGKILL);
            r = cdn_error_set(err, ETIMEDOUT, "changing the protected paths took over 30 s");
            break;
        }
        if (k <= 0)
            continue;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap = cap ? cap * 2 : 65536);
            if (!nb) {
                (void) kill(pid, SIGKILL);
                r = cdn_error_set(err, ENOMEM, "out of memory");
                break;
            }
            buf = nb;
        }
        ssize_t got = read(pipefd[0], buf + len, cap - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        len += (size_t) got;
    }
    (void) close(pipefd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int n = 0;
    if (r >= 0 && (len < sizeof n || !WIFEXITED(status) || WEXITSTATUS(status) != 0))
        r = cdn_error_set(err, EIO, "the child that changes the protected paths failed (status %d)", status);
    if (r >= 0)
        memcpy(&n, buf, sizeof n);
    if (r >= 0 && n < 0) {
        struct cdn_error e = {0};
        if (len != sizeof n + sizeof e)
            r = cdn_error_set(err, EIO, "the child that changes the protected paths said nothing");
        else {
            memcpy(&e, buf + sizeof n, sizeof e);
            e.msg[sizeof e.msg - 1] = 0, e.field[sizeof e.field - 1] = 0;
            *err = e;
            r = -(e.errnum ? e.errnum : EIO);
        }
    } else if (r >= 0 && len != sizeof n + (size_t) n * sizeof **ret) {
        r = cdn_error_set(err, EIO, "the child that changes the protected paths said too little");
    } else if (r >= 0 && n > 0) {
        *ret = malloc((size_t) n * sizeof **ret);
        if (!*ret)
            r = cdn_error_set(err, ENOMEM, "out of memory");
        else {
            memcpy(*ret, buf + sizeof n, (size_t) n * sizeof **ret);
            *ret_n = (size_t) n;
        }
    }
    free(buf);
    return r;
}

const struct cdn_tier_ops cdn_container_tier = {
    .name = "container",
    .tier = CDN_TIER_CONTAINER,
    .slot_in_record = true,
    .end_beside = true,
    .users = true,
    .create = container_create,
    .kill = container_kill,
    .usage = container_usage,
    .set_limits = cdn_slot_set_limits,
    .disk_full = container_disk_full,
    .destroy = container_destroy,
    .detach = container_detach,
    .adopt = container_adopt,
    .drop_slot = container_drop_slot,
    .sweep_slots = container_sweep_slots,
    .monitor_fd = container_monitor_fd,
    .fanotify_fd = container_fanotify_fd,
    .network_given = container_network_given,
    .protect = container_protect,
};
