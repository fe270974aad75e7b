/* QEMU's jail (qemu.h): its own uid, pid, IPC, mount and network namespaces, a root holding only
 * what it opens, no capability but overriding file modes. The parent half runs in the host process
 * that owns the sandbox, as root; the child half (spawn's child) becomes QEMU and trusts nothing
 * the guest can reach. */
#include "qemu.h"
#include "core/bind-policy.h"
#include "core/paths.h"
#include "image/image.h"
#include "shared/fd-util.h"
#include "shared/mount-util.h"
#include "shared/macro.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* A guest's QEMU runs as a uid of its own, drawn from 2^24 below the container tier's (slot.h), and
 * holds no capability. A restored guest's sees the template's directory through an idmapped mount
 * (cdn_qemu_pick_uid()): QEMU 7.2 opens the RAM file read-write even to map it copy-on-write. Only the
 * QEMU that makes a template stays uid 0 in its jail. */
#define QEMU_UID_BASE 0x3f000000u

static uid_t qemu_uid(void)
{
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t) sizeof r)
        r = (uint32_t)
            getpid(); /* never once booted (blocking); the uid only has to be unlikely to be taken */
    return (uid_t) (QEMU_UID_BASE + (r & 0xffffffu));
}

/* Whether QEMU can run under accel as a uid of its own: TCG needs nothing of root's; KVM needs
 * /dev/kvm's group (a group other than root's, with read-write access). */
static bool uid_can_run(const char *accel)
{
    struct stat kvm;
    return strcmp(accel, "kvm") != 0 ||
           (stat("/dev/kvm", &kvm) == 0 && kvm.st_gid != 0 && (kvm.st_mode & 0060) == 0060);
}

/* A user namespace whose uid and gid 0 are uid outside: the idmapping of a restored guest's view of
 * its template (an idmapped mount shows root's files as uid's). Made by a child that only waits
 * while its maps are written. An fd of it, or -errno. */
static int idmap_userns(uid_t uid)
{
    struct clone_args ca = {.flags = CLONE_NEWUSER, .exit_signal = SIGCHLD};
    pid_t pid = (pid_t) syscall(SYS_clone3, &ca, sizeof ca);
    if (pid == 0) {
        for (;;)
            pause();
    }
    if (pid < 0)
        return -errno;
    char path[64], map[64];
    int r = 0, fd = -1;
    (void) snprintf(map, sizeof map, "0 %u 1\n", (unsigned) uid);
    const char *files[][2] = {{"uid_map", map}, {"setgroups", "deny"}, {"gid_map", map}};
    for (size_t i = 0; r >= 0 && i < 3; i++) {
        (void) snprintf(path, sizeof path, "/proc/%d/%s", (int) pid, files[i][0]);
        r = cdn_write_file_at(AT_FDCWD, path, files[i][1]);
    }
    if (r >= 0) {
        (void) snprintf(path, sizeof path, "/proc/%d/ns/user", (int) pid);
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            r = -errno;
    }
    (void) kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return r < 0 ? r : fd;
}

/* dir bound at root + dir through an idmapped mount (userns's mapping). 0 or -errno. */
static int bind_idmapped(const char *root, const char *dir, int userns)
{
    char t[4300];
    (void) snprintf(t, sizeof t, "%s%s", root, dir);
    int r = cdn_mkdir_p(t, 0755);
    if (r < 0)
        return r;
    _cleanup_close_ int tree = cdn_idmapped_tree(dir, userns, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    if (tree < 0)
        return tree;
    return syscall(SYS_move_mount, tree, "", AT_FDCWD, t, MOVE_MOUNT_F_EMPTY_PATH) < 0 ? -errno : 0;
}

/* In QEMU's child, in its jail: root no more (the run directory, its $TMPDIR, becomes the uid's;
 * /dev/kvm's group is kept, unless it is root's). */
static int drop_root(const struct cdn_qemu_fds *f)
{
    struct stat kvm;
    gid_t groups[1];
    int n = 0;
    if (stat("/dev/kvm", &kvm) == 0 && kvm.st_gid != 0)
        groups[n++] = kvm.st_gid;
    if ((f->tmpdir && chown(f->tmpdir, f->uid, f->uid) < 0) || setgroups((size_t) n, groups) < 0 ||
        setresgid(f->uid, f->uid, f->uid) < 0 || setresuid(f->uid, f->uid, f->uid) < 0)
        return -errno;
    return 0;
}

/* In QEMU's own mount namespace (the child, before exec): a tmpfs on the share directory whose
 * entry i is mount i's source, bound there (read-only ones made so). 0 or -errno. */
static int bind_share(const struct cdn_mount *m, size_t n)
{
    char share[4200], p[4300];
    (void) snprintf(share, sizeof share, "%s/share", cdn_vm_dir());
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("tmpfs", share, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") < 0)
        return -errno;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        char from[64];
        (void) snprintf(p, sizeof p, "%s/%zu", share, i);
        /* Resolved and judged by the host (core/bind-policy.h): bound through an fd opened without
         * following symlinks, so a path changed since cannot redirect the bind. */
        _cleanup_close_ int src = cdn_bind_source_open(m[i].source);
        if (src < 0 || fstat(src, &st) < 0)
            return src < 0 ? src : -errno;
        (void) snprintf(from, sizeof from, "/proc/self/fd/%d", src);
        int fd = S_ISDIR(st.st_mode) ? mkdir(p, 0755) : open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            return -errno;
        if (!S_ISDIR(st.st_mode))
            (void) close(fd);
        if (mount(from, p, NULL, MS_BIND | MS_REC, NULL) < 0 ||
            (m[i].readonly && mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID, NULL) < 0))
            return -errno;
    }
    return 0;
}

/* path bound at root + path (its parents made), read-only unless rw. 0 or -errno. */
static int bind_into(const char *root, const char *path, bool rw)
{
    char t[4300];
    struct stat st;
    if (stat(path, &st) < 0)
        return -errno;
    (void) snprintf(t, sizeof t, "%s%s", root, path);
    char *slash = strrchr(t, '/');
    *slash = 0;
    int r = cdn_mkdir_p(t, 0755);
    *slash = '/';
    if (r < 0)
        return r;
    int fd = S_ISDIR(st.st_mode) ? mkdir(t, 0755) : open(t, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        (void) close(fd);
    if (mount(path, t, NULL, MS_BIND | MS_REC, NULL) < 0 ||
        (!rw && mount(NULL, t, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID, NULL) < 0))
        return -errno;
    return 0;
}

/* QEMU's root, as Firecracker's jailer makes one for its VMM: a tmpfs holding only what QEMU opens —
 * its binary, /usr (its libraries and firmware; the host image's 9p share), the merged-/usr links,
 * the dynamic linker's cache, five device nodes and /dev/kvm, its own /proc (its pid namespace holds
 * only itself), and the command's paths at their own places, all read-only but the RAM file's
 * directory, the binds' share and the disk snapshot's directory. Pivoted into; the host's root is
 * detached. In QEMU's child, in its own mount namespace. */
static int jail(const struct cdn_qemu_cmd *q, const char *qemu, const struct cdn_qemu_fds *f)
{
    const char *tmpdir = f->tmpdir;
    char root[4200], p[4300];
    (void) snprintf(root, sizeof root, "%s/jail", cdn_vm_dir());
    /* Nothing of the jail propagates to the host's mount namespace. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 || (mkdir(root, 0700) < 0 && errno != EEXIST) ||
        mount("tmpfs", root, "tmpfs", MS_NOSUID, "mode=0755,size=1m") < 0)
        return -errno;
    int r = bind_into(root, "/usr", false);
    if (r == 0 && strncmp(qemu, "/usr/", 5) != 0)
        r = bind_into(root, qemu, false);
    if (r == 0 && access("/etc/ld.so.cache", R_OK) == 0)
        r = bind_into(root, "/etc/ld.so.cache", false);
    for (size_t i = 0; r == 0 && cdn_image_host_dirs[i]; i++) { /* /bin → usr/bin, or the directory */
        char target[256], from[64];
        (void) snprintf(from, sizeof from, "/%s", cdn_image_host_dirs[i]);
        ssize_t n = readlink(from, target, sizeof target - 1);
        (void) snprintf(p, sizeof p, "%s%s", root, from);
        if (n > 0) {
            target[n] = 0;
            r = symlink(target, p) < 0 ? -errno : 0;
        } else if (access(from, F_OK) == 0)
            r = bind_into(root, from, false);
    }
    static const char *const devs[] = {"/dev/null",   "/dev/zero",    "/dev/full",
                                       "/dev/random", "/dev/urandom", "/dev/kvm"};
    for (size_t i = 0; r == 0 && i < ELEMENTSOF(devs); i++)
        if (access(devs[i], F_OK) == 0)
            r = bind_into(root, devs[i], true);
    for (int i = 0; r == 0 && i < q->npaths; i++)
        r = f->idmap_dir && strcmp(q->paths[i], f->idmap_dir) == 0
                ? bind_idmapped(root, q->paths[i], f->idmap_userns)
                : bind_into(root, q->paths[i], q->rw[i]);
    if (r == 0 && tmpdir)
        r = bind_into(root, tmpdir, true);
    if (r < 0)
        return r;
    (void) snprintf(p, sizeof p, "%s/proc", root);
    if (mkdir(p, 0555) < 0 || mount("proc", p, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        return -errno;
    (void) snprintf(p, sizeof p, "%s/.old", root);
    if (mkdir(p, 0700) < 0 || syscall(SYS_pivot_root, root, p) < 0 || chdir("/") < 0 ||
        umount2("/.old", MNT_DETACH) < 0 || rmdir("/.old") < 0)
        return -errno;
    /* No capability but overriding file modes (the binds' sources are the host's users' files, as
     * they were to a QEMU of full root): no mounts, no signals or ptrace beyond its pid namespace, no
     * open_by_handle_at out of the jail, no raw network, no module loading. */
    for (int cap = 0; cap <= 63; cap++)
        if (cap != CAP_DAC_OVERRIDE && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno == EINVAL)
            break;
    (void) prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    return 0;
}

pid_t cdn_qemu_spawn(const struct cdn_qemu_cmd *q, const struct cdn_qemu_fds *f, int *pidfd,
                     struct cdn_error *err)
{
    char qemu[4200];
    if (cdn_vm_find_qemu(qemu, sizeof qemu) < 0)
        return cdn_error_set(err, ENOENT, CDN_QEMU " not found in PATH (install Debian's qemu-system-x86)");
    /* Ours, for the child to tell whether we are still there once it has dropped root (which clears
     * its parent-death signal; its own pid namespace has no getppid() for it to look at). */
    _cleanup_close_ int self = f->persistent ? -1 : (int) syscall(SYS_pidfd_open, getpid(), 0);
    /* Its own pid namespace (it sees, signals and traces only itself) and IPC namespace. */
    struct clone_args ca = {.flags = CLONE_PIDFD | CLONE_NEWPID | CLONE_NEWIPC,
                            .pidfd = (uint64_t) (uintptr_t) pidfd,
                            .exit_signal = SIGCHLD};
    pid_t pid = (pid_t) syscall(SYS_clone3, &ca, sizeof ca);
    if (pid < 0)
        return cdn_error_set(err, errno, "fork for QEMU: %m");
    if (pid == 0) {
        /* Into its cgroup before anything runs (attach: one write of our pid per hierarchy). */
        if (f->cgroup && f->cgroup->ops->attach(f->cgroup, getpid()) < 0)
            _exit(127);
        if (f->persistent) /* it outlives its caller (a restarting cordond), out of its session */
            (void) setsid();
        else /* the guest goes with its caller */
            (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* QEMU's own sockets see only the sandbox's network (or none): the tap's namespace. Its
         * mounts are its own: the binds it shares with the guest are made there. */
        if (f->netns >= 0 ? setns(f->netns, CLONE_NEWNET) < 0 : unshare(CLONE_NEWNET) < 0)
            _exit(127);
        if (unshare(CLONE_NEWNS) < 0 || (f->n_mounts && bind_share(f->mounts, f->n_mounts) < 0) ||
            jail(q, qemu, f) < 0 || (f->uid && drop_root(f) < 0))
            _exit(127);
        if (!f->persistent && f->uid) { /* again (dropping root cleared it), unless we are gone already */
            struct pollfd gone = {.fd = self, .events = POLLIN};
            if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || self < 0 || poll(&gone, 1, 0) != 0)
                _exit(127);
        }
        (void) close(self);
        int devnull = open("/dev/null", O_RDWR); /* above 3-7, which are set below */
        if (devnull >= 0 && devnull < 10)
            devnull = fcntl(devnull, F_DUPFD, 10);
        const int src[5] = {f->agent, f->fd4, f->fd5, f->tap, f->disk};
        int tmp[5], top = CDN_QEMU_AGENT;
        for (int i = 0; i < 5; i++) /* above 3-7 first, so that no dup2 overwrites a source */
            if ((tmp[i] = src[i] >= 0 ? fcntl(src[i], F_DUPFD, 10) : -1) < 0 && src[i] >= 0)
                _exit(127);
        for (int i = 0; i < 5; i++)
            if (tmp[i] < 0)
                (void) close(CDN_QEMU_AGENT + i); /* whatever the caller had there */
            else if (dup2(tmp[i], CDN_QEMU_AGENT + i) < 0)
                _exit(127);
            else
                top = CDN_QEMU_AGENT + i;
        bool debug = getenv("CORDON_VM_DEBUG") != NULL;
        if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(debug ? 2 : devnull, 1) < 0)
            _exit(127);
        if (!debug)
            (void) dup2(devnull, 2);
        if (f->tmpdir)
            (void) setenv("TMPDIR", f->tmpdir, 1);
        (void) syscall(SYS_close_range, top + 1, ~0U, 0);
        /* Our blocked signals (a caller that reads them from a signalfd) are not QEMU's: with them,
         * a SIGTERM would stay pending in it for ever. */
        sigset_t none;
        sigemptyset(&none);
        (void) sigprocmask(SIG_SETMASK, &none, NULL);
        execv(qemu, q->argv);
        fprintf(stderr, "cordon: exec %s: %m\n", qemu);
        _exit(127);
    }
    return pid;
}

uid_t cdn_qemu_pick_uid(const char *accel, const char *idmap_dir, int *ret_userns)
{
    *ret_userns = -EBADF;
    uid_t uid = uid_can_run(accel) ? qemu_uid() : 0;
    if (!uid || !idmap_dir)
        return uid;
    /* A restore: as long as the template's directory can be idmapped to it (else root in the
     * jail, as before). */
    _cleanup_close_ int userns = idmap_userns(uid);
    _cleanup_close_ int tree =
        userns < 0 ? -EBADF : cdn_idmapped_tree(idmap_dir, userns, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    if (tree < 0)
        return 0;
    *ret_userns = TAKE_FD(userns);
    return uid;
}
