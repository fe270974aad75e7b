/* The microvm and vm tiers (DESIGN §5).
 *
 * microvm: a QEMU `-M microvm` guest — no PCI, no firmware, virtio-mmio
 * devices — booting the Debian kernel of vmprep.h through PVH, with
 * cordon-init as the guest's first process speaking the agent protocol over a
 * virtio-serial port whose host end is our socket; started from a snapshot of
 * a booted guest, restored copy-on-write.
 *
 * vm: a QEMU q35 machine (PCI, firmware) with the image's disk, writable
 * through QEMU's snapshot of it, booting the image's own init, which starts
 * cordon-init as the agent (init-vm.c); cold boots only. The same devices,
 * network, agent protocol and limits otherwise. */
#include "tiers/tier.h"
#include "agent/frame.h"
#include "core/bind-policy.h"
#include "core/paths.h"
#include "image/image.h"
#include "vmprep.h"
#include "net/netns.h"
#include "tiers/container/seccomp-policy.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define QEMU       CDN_QEMU
#define QEMU_AGENT 3 /* the fd QEMU gets our socket on */

static int probe_kvm(const struct cdn_vm_assets *vm);

/* KVM where a guest runs under it, else TCG. $CORDON_VM_ACCEL=kvm|tcg decides; else KVM is tried
 * where /dev/kvm is there and the CPU does VMX/SVM ($CORDON_VM_ACCEL=probe: tried whatever the
 * CPU says): a cold boot under KVM must answer a PING. The answer is kept for this host boot in
 * <vm dir>/accel. vm NULL: never try, the kept answer or TCG (an adopted guest of an old record). */
static const char *pick_accel(const struct cdn_vm_assets *vm)
{
    const char *env = getenv("CORDON_VM_ACCEL");
    if (env && (strcmp(env, "kvm") == 0 || strcmp(env, "tcg") == 0))
        return env;
    bool force = env && strcmp(env, "probe") == 0;
    if (access("/dev/kvm", R_OK | W_OK) < 0 || (!force && !cdn_vm_cpu_virt()))
        return "tcg";
    char boot[64] = "", path[4200], have[128] = "", want[128];
    (void) cdn_read_file_at(AT_FDCWD, "/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    boot[strcspn(boot, "\n")] = 0;
    (void) snprintf(path, sizeof path, "%s/accel", cdn_vm_dir());
    (void) cdn_read_file_at(AT_FDCWD, path, have, sizeof have);
    for (int i = 0; i < 2; i++) {
        (void) snprintf(want, sizeof want, "%s %s\n", boot, i ? "tcg" : "kvm");
        if (!force && strcmp(have, want) == 0)
            return i ? "tcg" : "kvm";
    }
    if (!vm)
        return "tcg";
    int r = probe_kvm(vm);
    if (r < 0)
        fprintf(stderr, "cordon: vm: a guest did not come up under KVM (%s): using TCG on this host\n",
                strerror(-r));
    (void) snprintf(want, sizeof want, "%s %s\n", boot, r < 0 ? "tcg" : "kvm");
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0)
        (void) cdn_write_all(fd, want, strlen(want));
    return r < 0 ? "tcg" : "kvm";
}

/* The guest must not calibrate its TSC under TCG (1 boot in 8 hangs doing
 * so): tell it the host's frequency. */
static long tsc_khz(void)
{
    static char buf[1 << 16];
    if (cdn_read_file_at(AT_FDCWD, "/proc/cpuinfo", buf, sizeof buf) <= 0)
        return 0;
    const char *m = strstr(buf, "cpu MHz");
    const char *colon = m ? strchr(m, ':') : NULL;
    return colon ? (long) (atof(colon + 1) * 1000.0) : 0;
}

/* The guest's CPU: the host's under KVM. Under TCG QEMU's "max" without ERMS and FSRM: with them the
 * kernel copies and clears memory by REP MOVSB/STOSB, which TCG runs one byte per step; without, by
 * REP MOVSQ/STOSQ (REP_GOOD), eight bytes a step. A cold boot reached its init a fifth sooner and
 * loaded its modules 30 % faster (bench/run-microvm's page). */
static const char *cpu_model(const char *accel)
{
    return strcmp(accel, "kvm") == 0 ? "host" : "max,-erms,-fsrm";
}

#define VM_MEM_OVERHEAD_MB  64
#define VM_FULL_OVERHEAD_MB 256

/* The guest's devices; a change here must change it (the snapshots are then made again). */
#define DEVICES "serial(2 ports),net,9p-usr,9p-binds"

/* fds of QEMU: 3 our agent socket; 4 the QMP socket (a template) or the state to restore from;
 * 5 the QMP socket (a restore); 6 the tap; 7 a disk image file. */
#define QEMU_FD4  4
#define QEMU_TAP  6
#define QEMU_DISK 7 /* a full VM's disk image file, opened by us: QEMU may be of a uid that cannot */

struct qemu_cmd {
    char *argv[64];
    int argc;
    char buf[20][4200];
    int nbuf;
    /* What QEMU opens by path, bound into its jail at the same place (jail()); rw: writable there. */
    const char *paths[8];
    bool rw[8];
    int npaths;
};

static void need(struct qemu_cmd *q, const char *path, bool rw)
{
    if (q->npaths < 8) {
        q->rw[q->npaths] = rw;
        q->paths[q->npaths++] = path;
    }
}

static void add(struct qemu_cmd *q, const char *a)
{
    if (q->argc < 63)
        q->argv[q->argc++] = (char *) a;
    q->argv[q->argc] = NULL;
}

static const char *fmt(struct qemu_cmd *q, const char *f, ...) __attribute__((format(printf, 2, 3)));
static const char *fmt(struct qemu_cmd *q, const char *f, ...)
{
    if (q->nbuf >= 20) /* one buffer per argument: sized for every fmt() of build_cmd */
        abort();
    char *b = q->buf[q->nbuf++];
    va_list ap;
    va_start(ap, f);
    (void) vsnprintf(b, sizeof q->buf[0], f, ap);
    va_end(ap);
    return b;
}

enum boot { BOOT_COLD, BOOT_TEMPLATE, BOOT_RESTORE };

/* A guest's root disk: an image directory's erofs (read-only, shared), or a full VM's disk image
 * file (writable through QEMU's snapshot of it: the file never changes). */
struct vm_disk {
    const char *path;   /* NULL: none (a microvm of the host image) */
    const char *format; /* a disk image file's: "raw" or "qcow2"; NULL: an erofs */
};

/* The command line; full: tier vm (q35); memdir: where the guest's RAM file lives (template,
 * restore). */
static void build_cmd(struct qemu_cmd *q, const struct cdn_vm_assets *vm, const char *accel, uint64_t mem_mb,
                      int smp, enum boot boot, const char *memdir, bool listening, bool tap, bool binds,
                      bool full, struct vm_disk disk)
{
    /* A device's name on the machine's bus: virtio-mmio on microvm, PCI on q35. */
    const char *bus = full ? "pci" : "device";
    long khz = tsc_khz();
    /* CORDON_VM_DEBUG=1 with a cold boot: the guest kernel's console on QEMU's stderr (kept then). */
    bool console = boot == BOOT_COLD && getenv("CORDON_VM_DEBUG");
    add(q, QEMU);
    add(q, "-M");
    if (full)
        add(q, fmt(q, "q35,accel=%s,smm=off,vmport=off", accel));
    else
        add(q, fmt(q, "microvm,pit=on,rtc=on,isa-serial=%s,accel=%s%s", console ? "on" : "off", accel,
                   boot == BOOT_COLD ? "" : ",memory-backend=ram"));
    if (boot != BOOT_COLD) {
        /* Restored copy-on-write: the file is the template's RAM, never written again. */
        add(q, "-object");
        add(q, fmt(q, "memory-backend-file,id=ram,size=%lluM,mem-path=%s/mem,share=%s",
                   (unsigned long long) mem_mb, memdir, boot == BOOT_TEMPLATE ? "on" : "off"));
        /* Writable: QEMU 7.2 opens the RAM file read-write even to map it copy-on-write. */
        need(q, memdir, true);
    }
    add(q, "-cpu");
    add(q, cpu_model(accel));
    add(q, "-m");
    add(q, fmt(q, "%lluM", (unsigned long long) mem_mb));
    add(q, "-smp");
    add(q, fmt(q, "%d", smp));
    static const char *const fixed[] = {
        "-nodefaults", "-no-user-config",
        "-nographic",  "-no-reboot",
        "-sandbox",    "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
        "-kernel"};
    add(q, "-serial");
    add(q, console ? "stdio" : "none"); /* stdio: its stdout is then its stderr (spawn_qemu) */
    for (size_t i = 0; i < ELEMENTSOF(fixed); i++)
        add(q, fixed[i]);
    add(q, vm->kernel);
    need(q, vm->kernel, false);
    add(q, "-initrd");
    add(q, full ? vm->initramfs_vm : disk.path ? vm->initramfs_disk : vm->initramfs);
    need(q, q->argv[q->argc - 1], false);
    add(q, "-append");
    char tsc[48] = "";
    if (khz > 0)
        (void) snprintf(tsc, sizeof tsc, " tsc_early_khz=%ld", khz);
    /* cordon.root=erofs|disk: the guest's init makes the disk its root at boot (in the snapshot).
     * cordon.boot=template: every module at boot (a cold boot loads the network's only for a
     * network). cordon.tier=vm: the image's init takes over (net.ifnames=0: its udev keeps the name
     * eth0, which the agent sets up). */
    add(q,
        fmt(q, "%s panic=-1 reboot=t random.trust_cpu=on%s%s%s%s", console ? "console=ttyS0" : "quiet", tsc,
            disk.format ? " cordon.root=disk"
            : disk.path ? " cordon.root=erofs"
                        : "",
            boot == BOOT_TEMPLATE ? " cordon.boot=template" : "",
            full ? " cordon.tier=vm net.ifnames=0" : ""));
    /* Two ports (the agent's is 1; 0 is kept for a console): the guest's driver then sets up 4
     * virtqueues, not the 64 of the default 31 ports. */
    add(q, "-device");
    add(q, fmt(q, "virtio-serial-%s,max_ports=2", bus));
    add(q, "-chardev");
    /* listening: fd 3 is a listening socket (a persistent sandbox's): QEMU accepts one host at a
     * time on it, so a restarted cordond connects again, as to a container's init. */
    add(q, fmt(q, "socket,id=agent,fd=%d%s", QEMU_AGENT, listening ? ",server=on,wait=off" : ""));
    add(q, "-device");
    add(q, "virtserialport,chardev=agent,name=cordon.agent");
    /* The network: virtio-net on the sandbox's tap (fd 6), or on a hub with nothing else on it
     * (no network; a template always has the device, so that every restore can have one). */
    add(q, "-netdev");
    add(q, tap ? fmt(q, "tap,id=net0,fd=%d,vhost=off", QEMU_TAP) : "hubport,id=net0,hubid=0");
    add(q, "-device");
    add(q, fmt(q, "virtio-net-%s,netdev=net0,mac=52:54:00:c0:00:02%s", bus,
               full ? ",romfile=" : "")); /* no iPXE */
    /* The host image: the host's /usr, read-only, over 9p; the guest mounts it before its first
     * command (not at boot: a mounted 9p share would block the template's migration). */
    add(q, "-fsdev");
    add(q, "local,id=usr,path=/usr,security_model=none,readonly=on"); /* /usr: in every jail */
    add(q, "-device");
    add(q, fmt(q, "virtio-9p-%s,fsdev=usr,mount_tag=usr", bus));
    /* The sandbox's binds (spec mounts): one share whose i-th entry is the i-th source, bound there
     * in QEMU's own mount namespace (spawn_qemu); an empty directory when there are none. */
    add(q, "-fsdev");
    /* mapped-xattr: what the guest sets (owners, modes: setuid root) stays in xattrs, never on the
     * host's files, which QEMU (root) creates. */
    const char *share = fmt(q, "%s/%s", cdn_vm_dir(), binds ? "share" : "empty");
    add(q, fmt(q, "local,id=binds,path=%s,security_model=mapped-xattr", share));
    need(q, share, true);
    add(q, "-device");
    add(q, fmt(q, "virtio-9p-%s,fsdev=binds,mount_tag=binds", bus));
    if (disk.path) {
        /* An erofs: read-only, many guests share it, as containers share an image's lower layer. A
         * disk image: snapshot=on, the guest's writes go to a file QEMU makes in $TMPDIR (the
         * sandbox's own directory, spawn_qemu). */
        if (disk.format) { /* a file the user gave: QEMU gets it open (fd 7), as fd set 1 */
            add(q, "-add-fd");
            add(q, fmt(q, "fd=%d,set=1", QEMU_DISK));
        } else
            need(q, disk.path, false);
        add(q, "-drive");
        add(q, disk.format ? fmt(q, "file=/dev/fdset/1,if=none,id=root,format=%s,snapshot=on", disk.format)
                           : fmt(q, "file=%s,if=none,id=root,format=raw,readonly=on", disk.path));
        add(q, "-device");
        add(q, fmt(q, "virtio-blk-%s,drive=root", bus));
    }
    if (boot != BOOT_COLD) { /* QMP: fd 4 (template) or 5 (restore, whose state is fd 4) */
        add(q, "-chardev");
        add(q, fmt(q, "socket,id=qmp,fd=%d", boot == BOOT_TEMPLATE ? QEMU_FD4 : QEMU_FD4 + 1));
        add(q, "-mon");
        add(q, "chardev=qmp,mode=control");
    } else
        add(q, "-monitor"), add(q, "none");
    if (boot == BOOT_RESTORE) {
        add(q, "-incoming"); /* once x-ignore-shared is on (QMP): RAM is the file's, not the stream's */
        add(q, "defer");
    }
}

/* What a QEMU child gets: its fds 3-7 (-1: none) and its network namespace. */
struct qemu_fds {
    int agent, fd4, fd5, tap, disk;
    int netns;                      /* the sandbox's (the tap's); -1: an empty one of its own */
    bool persistent;                /* outlives its caller */
    const struct cdn_mount *mounts; /* bound into the binds share */
    size_t n_mounts;
    struct cdn_cgroup *cgroup; /* QEMU's own: joined before exec */
    const char *tmpdir;        /* QEMU's $TMPDIR (a full VM's disk snapshot goes there), or NULL */
    uid_t uid;                 /* not 0: QEMU runs as this uid (and gid), not as root (qemu_uid()) */
    /* A restored guest's QEMU of its own uid: the template's directory (its RAM file, which QEMU 7.2
     * opens read-write) bound into the jail through an idmapped mount in which root's files are
     * that uid's (userns: a user namespace mapping 0 to it); -1 / NULL otherwise. */
    int idmap_userns;
    const char *idmap_dir;
};

/* A guest's QEMU runs as a uid of its own, drawn from 2^24 below the container tier's (slot.h), and
 * holds no capability. A restored guest's sees the template's directory through an idmapped mount
 * (idmap_userns()): QEMU 7.2 opens the RAM file read-write even to map it copy-on-write. Only the
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

/* A detached copy of dir's mount, idmapped by userns: an fd of it, or -errno (the kernel or the
 * filesystem cannot idmap). */
static int idmapped_tree(const char *dir, int userns)
{
    int tree = (int) syscall(SYS_open_tree, AT_FDCWD, dir, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0)
        return -errno;
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                              .userns_fd = (uint64_t) userns};
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) {
        int e = errno;
        (void) close(tree);
        return -e;
    }
    return tree;
}

/* dir bound at root + dir through an idmapped mount (userns's mapping). 0 or -errno. */
static int bind_idmapped(const char *root, const char *dir, int userns)
{
    char t[4300];
    (void) snprintf(t, sizeof t, "%s%s", root, dir);
    int r = cdn_mkdir_p(t, 0755);
    if (r < 0)
        return r;
    int tree = idmapped_tree(dir, userns);
    if (tree < 0)
        return tree;
    r = syscall(SYS_move_mount, tree, "", AT_FDCWD, t, MOVE_MOUNT_F_EMPTY_PATH) < 0 ? -errno : 0;
    (void) close(tree);
    return r;
}

/* In QEMU's child, in its jail: root no more (the run directory, its $TMPDIR, becomes the uid's;
 * /dev/kvm's group is kept, unless it is root's). */
static int drop_root(const struct qemu_fds *f)
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
static int jail(const struct qemu_cmd *q, const char *qemu, const struct qemu_fds *f)
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

static pid_t spawn_qemu(const struct qemu_cmd *q, const struct qemu_fds *f, int *pidfd, struct cdn_error *err)
{
    char qemu[4200];
    if (cdn_vm_find_qemu(qemu, sizeof qemu) < 0)
        return cdn_error_set(err, ENOENT, QEMU " not found in PATH (install Debian's qemu-system-x86)");
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
        int tmp[5], top = QEMU_AGENT;
        for (int i = 0; i < 5; i++) /* above 3-7 first, so that no dup2 overwrites a source */
            if ((tmp[i] = src[i] >= 0 ? fcntl(src[i], F_DUPFD, 10) : -1) < 0 && src[i] >= 0)
                _exit(127);
        for (int i = 0; i < 5; i++)
            if (tmp[i] < 0)
                (void) close(QEMU_AGENT + i); /* whatever the caller had there */
            else if (dup2(tmp[i], QEMU_AGENT + i) < 0)
                _exit(127);
            else
                top = QEMU_AGENT + i;
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

/* ---- the snapshot: one booted guest per (memory, vCPUs, accelerator) ---- */

/* poll() of one fd for POLLIN, resumed after signals (cordond's SIGCHLD when another sandbox's QEMU
 * ends interrupted a restore's QMP exchange, which then failed) until timeout_ms in all. */
static int poll_in(int fd, int timeout_ms)
{
    struct timespec t0, t;
    (void) clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        (void) clock_gettime(CLOCK_MONOTONIC, &t);
        long left = timeout_ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, left > 0 ? (int) left : 0);
        if (r >= 0 || errno != EINTR)
            return r;
    }
}

/* One QMP command over fd (a blocking socket); the reply's "return" is not looked at beyond success. */
static int qmp(int fd, const char *json, char *reply, size_t size)
{
    if (json && cdn_write_all(fd, json, strlen(json)) < 0)
        return -errno;
    size_t n = 0;
    for (;;) { /* lines until one with "return" or "error" (events come in between) */
        if (poll_in(fd, 60000) <= 0)
            return -ETIMEDOUT;
        ssize_t k = read(fd, reply + n, size - 1 - n);
        if (k <= 0)
            return -EPIPE;
        n += (size_t) k;
        reply[n] = 0;
        char *nl;
        while ((nl = strchr(reply, '\n'))) {
            *nl = 0;
            /* reply now holds one line: the answer (or greeting) ends the wait, an event is skipped */
            if (strstr(reply, "\"error\""))
                return -EIO;
            if (strstr(reply, "\"return\"") || strstr(reply, "\"QMP\""))
                return 0;
            n -= (size_t) (nl + 1 - reply);
            memmove(reply, nl + 1, n + 1);
        }
        if (n >= size - 1)
            n = 0;
    }
}

/* QMP's getfd: the command with fd attached (SCM_RIGHTS), so that `migrate` can name it. */
static int qmp_getfd(int qmpfd, int fd, const char *name, char *reply, size_t size)
{
    char cmd[128];
    int n = snprintf(cmd, sizeof cmd, "{\"execute\":\"getfd\",\"arguments\":{\"fdname\":\"%s\"}}\n", name);
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } c = {0};
    struct iovec iov = {cmd, (size_t) n};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.b, .msg_controllen = sizeof c.b};
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &fd, sizeof fd);
    if (sendmsg(qmpfd, &m, MSG_NOSIGNAL) != n)
        return -errno;
    return qmp(qmpfd, NULL, reply, size);
}

/* Wait for init's PONG on the agent socket (what init says first, its USAGE, goes by). */
static int wait_pong(int agent, int timeout_ms)
{
    static uint8_t buf[CDN_FRAME_MAX];
    if (cdn_frame_send(agent, CDN_FRAME_PING, 1, "ready", 5) < 0)
        return -EPIPE;
    for (int frames = 0; frames < 16; frames++) {
        if (poll_in(agent, timeout_ms) <= 0)
            return -ETIMEDOUT;
        struct cdn_frame_header h;
        int n = cdn_frame_recv(agent, &h, buf, sizeof buf);
        if (n < 0)
            return n;
        if (h.type == CDN_FRAME_PONG)
            return 0;
    }
    return -EPROTO;
}

/* A cold boot under KVM, which must answer a PING within 20 s. 0 or -errno. */
static int probe_kvm(const struct cdn_vm_assets *vm)
{
    int ag[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ag) < 0)
        return -errno;
    struct qemu_cmd q = {0};
    build_cmd(&q, vm, "kvm", 128, 1, BOOT_COLD, NULL, false, false, false, false, (struct vm_disk){0});
    int pidfd = -1;
    pid_t pid = spawn_qemu(
        &q, &(struct qemu_fds){.agent = ag[1], .fd4 = -1, .fd5 = -1, .tap = -1, .disk = -1, .netns = -1},
        &pidfd, NULL);
    (void) close(ag[1]);
    int r = pid < 0 ? (int) pid : wait_pong(ag[0], 20000);
    if (pid > 0) {
        (void) kill(pid, SIGKILL);
        (void) waitpid(pid, NULL, 0);
    }
    (void) close(ag[0]);
    (void) safe_close(pidfd);
    return r;
}

static int make_template(const struct cdn_vm_assets *vm, const char *accel, uint64_t mem_mb, int smp,
                         const char *disk, const char *dir, struct cdn_error *err)
{
    fprintf(stderr, "cordon: vm: booting a guest to snapshot (%llu MiB, %d vCPU, %s) …\n",
            (unsigned long long) mem_mb, smp, accel);
    char state[4300];
    (void) snprintf(state, sizeof state, "%s/state.tmp", dir);
    _cleanup_close_ int sfd = open(state, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int ag[2] = {-1, -1}, qm[2] = {-1, -1};
    if (sfd < 0)
        return cdn_error_set(err, errno, "create %s: %m", state);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ag) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, qm) < 0)
        return cdn_error_set(err, errno, "socketpair: %m");
    struct qemu_cmd q = {0};
    build_cmd(&q, vm, accel, mem_mb, smp, BOOT_TEMPLATE, dir, false, false, false, false,
              (struct vm_disk){.path = disk});
    /* QMP on fd 4; the state file goes to QEMU through QMP's getfd, for migrate's "fd:state". */
    int pidfd = -1;
    pid_t pid = spawn_qemu(
        &q, &(struct qemu_fds){.agent = ag[1], .fd4 = qm[1], .fd5 = -1, .tap = -1, .disk = -1, .netns = -1},
        &pidfd, err);
    (void) close(ag[1]), (void) close(qm[1]);
    int r = pid < 0 ? (int) pid : 0;
    char reply[8192];
    if (r == 0 && (r = wait_pong(ag[0], 120000)) < 0)
        r = cdn_error_set(err, -r, "the template guest did not come up: %s", strerror(-r));
    if (r == 0 && ((r = qmp(qm[0], NULL, reply, sizeof reply)) < 0 ||
                   (r = qmp(qm[0], "{\"execute\":\"qmp_capabilities\"}\n", reply, sizeof reply)) < 0 ||
                   (r = qmp(qm[0],
                            "{\"execute\":\"migrate-set-capabilities\",\"arguments\":{\"capabilities\":"
                            "[{\"capability\":\"x-ignore-shared\",\"state\":true}]}}\n",
                            reply, sizeof reply)) < 0 ||
                   (r = qmp_getfd(qm[0], sfd, "state", reply, sizeof reply)) < 0 ||
                   (r = qmp(qm[0], "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"fd:state\"}}\n", reply,
                            sizeof reply)) < 0))
        r = cdn_error_set(err, -r, "QMP: %s", reply);
    for (int i = 0; r == 0; i++) { /* until the state is out */
        if ((r = qmp(qm[0], "{\"execute\":\"query-migrate\"}\n", reply, sizeof reply)) < 0)
            r = cdn_error_set(err, -r, "QMP query-migrate: %s", reply);
        else if (strstr(reply, "\"completed\""))
            break;
        else if (strstr(reply, "\"failed\"") || i > 6000)
            r = cdn_error_set(err, EIO, "saving the template's state failed: %s", reply);
        else
            (void) usleep(10000);
    }
    if (pid > 0) {
        if (r == 0)
            (void) qmp(qm[0], "{\"execute\":\"quit\"}\n", reply, sizeof reply);
        else
            (void) kill(pid, SIGKILL);
        (void) waitpid(pid, NULL, 0);
    }
    (void) close(ag[0]), (void) close(qm[0]), (void) safe_close(pidfd);
    char final[4300];
    (void) snprintf(final, sizeof final, "%s/state", dir);
    if (r == 0 && (fsync(sfd) < 0 || rename(state, final) < 0))
        r = cdn_error_set(err, errno, "keep the template's state: %m");
    if (r < 0)
        (void) unlink(state);
    return r;
}

/* The snapshot directory for this shape, made (under a lock) when missing or stale. */
static int snapshot_dir(const struct cdn_vm_assets *vm, const char *accel, uint64_t mem_mb, int smp,
                        const char *disk, char *dir, size_t size, struct cdn_error *err)
{
    struct stat st;
    const char *initramfs = disk ? vm->initramfs_disk : vm->initramfs;
    if (stat(initramfs, &st) < 0)
        return cdn_error_set(err, errno, "%s: %m", initramfs);
    /* One template per image too: an image's guest has its disk, mounted as its root at boot. */
    const char *img = disk ? strrchr(disk, '/') + 1 : NULL;
    char key[4800];
    (void) snprintf(key, sizeof key,
                    "%s initramfs %lld.%09ld mem %llu smp %d accel %s cpu %s devices " DEVICES " disk %s\n",
                    vm->release, (long long) st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                    (unsigned long long) mem_mb, smp, accel, cpu_model(accel), disk ? disk : "none");
    (void) snprintf(dir, size, "%s/snap-%llum-%d-%s%s%.*s", cdn_vm_dir(), (unsigned long long) mem_mb, smp,
                    accel, img ? "-" : "", img ? (int) strcspn(img, ".") : 0, img ? img : "");
    if (cdn_mkdir_p(dir, 0700) < 0)
        return cdn_error_set(err, errno, "create %s: %m", dir);
    char p[4300], have[4800] = "";
    (void) snprintf(p, sizeof p, "%s/lock", dir);
    _cleanup_close_ int lock = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock < 0 || flock(lock, LOCK_EX) < 0)
        return cdn_error_set(err, errno, "lock %s: %m", p);
    (void) snprintf(p, sizeof p, "%s/key", dir);
    (void) cdn_read_file_at(AT_FDCWD, p, have, sizeof have);
    if (strcmp(have, key) == 0)
        return 0;
    (void) unlink(p);
    int r = make_template(vm, accel, mem_mb, smp, disk, dir, err);
    if (r < 0)
        return r;
    _cleanup_close_ int kfd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (kfd < 0 || cdn_write_all(kfd, key, strlen(key)) < 0)
        return cdn_error_set(err, errno, "write %s: %m", p);
    return 0;
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

/* How the guest's init confines each command: the container tier's seccomp programs (the same
 * cache), and what to do on a watched denial. */
static int send_policy(struct cdn_sandbox *sb, struct cdn_error *err)
{
    char cache[4096];
    cdn_cache_dir(cache, sizeof cache);
    struct cdn_seccomp_prog prog;
    int r = cdn_seccomp_load_cached(cache, &prog, err);
    if (r < 0)
        return r;
    size_t insns = ((size_t) prog.len[0] + prog.len[1]) * 8;
    uint8_t *buf = malloc(6 + insns);
    if (!buf) {
        cdn_seccomp_prog_free(&prog);
        return cdn_error_set(err, ENOMEM, "out of memory");
    }
    buf[0] = sb->spec->on_violation == CDN_VIOLATION_KILL ? CDN_POLICY_KILL : 0;
    buf[1] = 0;
    memcpy(buf + 2, &prog.len[0], 2); /* little-endian, as the frames are (x86-64 only) */
    memcpy(buf + 4, &prog.len[1], 2);
    memcpy(buf + 6, prog.insns, insns);
    r = cdn_frame_send(sb->agent_fd, CDN_FRAME_POLICY, 0, buf, (uint32_t) (6 + insns));
    free(buf);
    cdn_seccomp_prog_free(&prog);
    return r < 0 ? cdn_error_set(err, -r, "send the guest its policy: %s", strerror(-r)) : 0;
}

static int microvm_destroy(struct cdn_sandbox *sb);

/* How a QEMU that stopped answering ended, for an error message ("" while it runs on). */
static const char *qemu_end(int pidfd)
{
    static char buf[64];
    siginfo_t si = {0};
    buf[0] = 0;
    if (poll_in(pidfd, 1000) == 1 && waitid(P_PIDFD, (id_t) pidfd, &si, WEXITED | WNOWAIT) == 0 && si.si_pid)
        (void) snprintf(buf, sizeof buf,
                        si.si_code == CLD_EXITED ? "; QEMU exited %d" : "; QEMU killed by signal %d",
                        si.si_status);
    return buf;
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
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0)
        return -errno;
    if (connect(c, (struct sockaddr *) &sa, len) < 0) {
        int r = -errno;
        (void) close(c);
        return r;
    }
    return c;
}

/* A full VM's image given as a disk image file: its format from its first bytes — qcow2, or raw
 * holding ext4 (the whole disk) or a partition table. 0 and *format, or an error naming "image". */
static int disk_image(const char *path, const char **format, struct cdn_error *err)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    uint8_t b[2048] = {0};
    if (fd < 0)
        return cdn_error_field(err, errno, "image", "image: '%s': %m", path);
    ssize_t n = pread(fd, b, sizeof b, 0);
    if (n >= 4 && memcmp(b, "QFI\xfb", 4) == 0)
        *format = "qcow2";
    else if (n == (ssize_t) sizeof b &&
             ((b[1080] == 0x53 && b[1081] == 0xef) || (b[510] == 0x55 && b[511] == 0xaa)))
        *format = "raw";
    else
        return cdn_error_field(
            err, EINVAL, "image",
            "image: '%s' is neither a qcow2 image nor a raw disk (ext4, or a partition table)", path);
    return 0;
}

/* The guest's root disk (path into disk): a microvm's image other than the host's, as an erofs; a
 * full VM's disk image file as it is, or its image directory (the host's too) as an erofs. */
static int root_disk(const struct cdn_spec *spec, char *disk, size_t size, const char **format,
                     struct cdn_error *err)
{
    struct stat st;
    bool full = spec->tier == CDN_TIER_VM;
    *format = NULL;
    if (full && spec->image[0] == '/' && stat(spec->image, &st) == 0 && S_ISREG(st.st_mode)) {
        (void) snprintf(disk, size, "%s", spec->image);
        return disk_image(spec->image, format, err);
    }
    if (!full && strcmp(spec->image, "host") == 0)
        return 0;
    struct cdn_image img;
    int r = cdn_image_resolve(spec->image, &img, err);
    return r < 0 ? r : cdn_vm_image_disk(img.lower, true, disk, size, err);
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

/* What guests whose `cordon run` was killed (SIGKILL: no teardown) left behind: their cgroups, which
 * their QEMUs (ended with it) left empty, and a full VM's run directory (the disk's snapshot) with
 * no cgroup. Swept at each create: cordond's guests, and any other live one, have a QEMU in theirs. */
static void sweep_stale(void)
{
    const struct cdn_cgroup_ops *ops = cdn_cgroup_detect();
    char parent[4200], p[4400];
    if (cdn_cgroup_path(parent, sizeof parent, ops->version, "pids", "") < 0)
        return;
    time_t now = time(NULL);
    DIR *d = opendir(parent);
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
    if (d)
        closedir(d);
    char run[4200];
    (void) snprintf(run, sizeof run, "%s/run", cdn_vm_dir());
    d = opendir(run);
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
    if (d)
        closedir(d);
}

static int microvm_create(struct cdn_sandbox *sb, struct cdn_error *err)
{
    const bool full = sb->spec->tier == CDN_TIER_VM;
    sweep_stale();
    struct cdn_vm_assets vm;
    int r = cdn_vm_prepare(&vm, true, err);
    if (r < 0)
        return r;
    /* What QEMU's child will need: the share's mount point, and every source there (its errors are
     * the create's, with the field, not a QEMU that never starts). */
    char p[4300];
    for (int i = 0; i < 2; i++) {
        (void) snprintf(p, sizeof p, "%s/%s", cdn_vm_dir(), i ? "share" : "empty");
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
            return cdn_error_set(err, errno, "create %s: %m", p);
    }
    if (sb->spec->n_mounts + sb->spec->protect.n > CDN_IDENTITY_PATHS)
        return cdn_error_field(err, E2BIG, sb->spec->protect.n ? "protect" : "mounts",
                               "mounts and protect: at most %d together for tier %s", CDN_IDENTITY_PATHS,
                               cdn_tier_to_string(sb->spec->tier));
    for (size_t i = 0; i < sb->spec->n_mounts; i++) {
        struct stat st;
        if (stat(sb->spec->mounts[i].source, &st) < 0) {
            char field[32];
            (void) snprintf(field, sizeof field, "mounts[%zu].source", i);
            return cdn_error_field(err, errno, field, "%s: %s: %m", field, sb->spec->mounts[i].source);
        }
    }
    char disk[4400] = "";
    const char *format;
    if ((r = root_disk(sb->spec, disk, sizeof disk, &format, err)) < 0)
        return r;
    const char *accel = pick_accel(&vm);
    (void) snprintf(sb->accel, sizeof sb->accel, "%s", accel);
    const char *how = getenv("CORDON_VM_BOOT");
    enum boot boot = full || (how && strcmp(how, "cold") == 0) ? BOOT_COLD : BOOT_RESTORE;
    /* The guest gets the limit and what its kernel, init and page cache need besides (a full VM's
     * system too); its commands' cgroup gets the limit, as a container's cgroup does (identity
     * memory_mb). */
    uint64_t mem = sb->spec->limits.memory_mb + (full ? VM_FULL_OVERHEAD_MB : VM_MEM_OVERHEAD_MB);
    int smp = (int) ceil(sb->spec->limits.cpus);
    char dir[4096] = "";
    _cleanup_close_ int state = -1;
    if (boot == BOOT_RESTORE) {
        if ((r = snapshot_dir(&vm, accel, mem, smp, *disk ? disk : NULL, dir, sizeof dir, err)) < 0)
            return cdn_error_prefix(err, r, "the microvm snapshot (CORDON_VM_BOOT=cold boots without one)");
        (void) snprintf(p, sizeof p, "%s/state", dir);
        if ((state = open(p, O_RDONLY | O_CLOEXEC)) < 0)
            return cdn_error_set(err, errno, "open %s: %m", p);
    }
    sb->vm_restored = boot == BOOT_RESTORE;
    /* The agent's socket: a pair, or (persistent) the caller's listening socket, handed to QEMU,
     * and our connection to it. */
    int sp[2] = {-1, -1}, qm[2] = {-1, -1};
    bool listening = sb->persistent && sb->listen_fd >= 0;
    if (listening) {
        if ((sp[1] = fcntl(sb->listen_fd, F_DUPFD_CLOEXEC, 3)) < 0 ||
            (sp[0] = connect_to(sb->listen_fd)) < 0) {
            r = sp[0] < 0 && sp[1] >= 0 ? sp[0] : -errno;
            (void) safe_close(sp[1]);
            return cdn_error_set(err, -r, "connect to the agent socket: %s", strerror(-r));
        }
    } else if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
        return cdn_error_set(err, errno, "socketpair: %m");
    if (boot == BOOT_RESTORE && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, qm) < 0) {
        (void) close(sp[0]), (void) close(sp[1]);
        return cdn_error_set(err, errno, "socketpair: %m");
    }
    /* The sandbox's network: a tap bridged to its veth, in its namespace. */
    int tap = -1;
    if (sb->netns_fd >= 0 && sb->sandbox_ip) {
        struct cdn_netns ns = {.fd = sb->netns_fd};
        if ((tap = cdn_netns_run(&ns, tap_bridge, &sb->sandbox_ip)) < 0) {
            (void) close(sp[0]), (void) close(sp[1]), (void) safe_close(qm[0]), (void) safe_close(qm[1]);
            return cdn_error_set(err, -tap, "the guest's tap in the sandbox's network namespace: %s",
                                 strerror(-tap));
        }
    }
    /* QEMU's cgroup: its vCPUs' share of the CPU, the guest's memory and QEMU's own (TCG's code
     * cache, device state), a bound on its threads. */
    char tmpdir[4200];
    run_dir(sb, tmpdir, sizeof tmpdir);
    /* A disk image file: opened here (read-only: QEMU's snapshot takes the writes), handed to QEMU. */
    _cleanup_close_ int diskfd = format ? open(disk, O_RDONLY | O_CLOEXEC) : -1;
    if (format && diskfd < 0) {
        (void) close(sp[0]), (void) close(sp[1]), (void) safe_close(qm[0]), (void) safe_close(qm[1]);
        (void) safe_close(tap);
        return cdn_error_field(err, errno, "image", "image: '%s': %m", disk);
    }
    if ((r = qemu_cgroup(sb, mem, err)) < 0 || (format && cdn_mkdir_p(tmpdir, 0700) < 0 &&
                                                (r = cdn_error_set(err, errno, "create %s: %m", tmpdir)))) {
        (void) close(sp[0]), (void) close(sp[1]), (void) safe_close(qm[0]), (void) safe_close(qm[1]);
        (void) safe_close(tap);
        if (sb->cgroup.ops)
            (void) microvm_destroy(sb);
        return r;
    }
    struct qemu_cmd q = {0};
    build_cmd(&q, &vm, accel, mem, smp, boot, dir, listening, tap >= 0, sb->spec->n_mounts > 0, full,
              (struct vm_disk){.path = *disk ? disk : NULL, .format = format});
    /* QEMU's uid: its own, unless KVM's device is root's only; for a restore, as long as the
     * template's directory can be idmapped to it (else root in the jail, as before). */
    uid_t quid = uid_can_run(accel) ? qemu_uid() : 0;
    _cleanup_close_ int userns = -1;
    if (quid && boot == BOOT_RESTORE) {
        int tree = (userns = idmap_userns(quid)) < 0 ? -1 : idmapped_tree(dir, userns);
        if (tree < 0)
            quid = 0;
        else
            (void) close(tree);
    }
    int pidfd = -1;
    pid_t pid = spawn_qemu(&q,
                           &(struct qemu_fds){.agent = sp[1],
                                              .fd4 = state,
                                              .fd5 = qm[1],
                                              .tap = tap,
                                              .disk = diskfd,
                                              .netns = sb->netns_fd,
                                              .persistent = sb->persistent,
                                              .mounts = sb->spec->mounts,
                                              .n_mounts = sb->spec->n_mounts,
                                              .cgroup = &sb->cgroup,
                                              .tmpdir = format ? tmpdir : NULL,
                                              .uid = quid,
                                              .idmap_userns = userns,
                                              .idmap_dir = quid && boot == BOOT_RESTORE ? dir : NULL},
                           &pidfd, err);
    (void) close(sp[1]);
    (void) safe_close(qm[1]);
    (void) safe_close(tap);
    if (pid < 0) {
        (void) close(sp[0]);
        (void) safe_close(qm[0]);
        (void) microvm_destroy(sb); /* its cgroup: nothing is left behind */
        return (int) pid;
    }
    sb->agent_fd = sp[0];
    sb->init_pid = pid;
    sb->init_pidfd = pidfd;
    /* No setup child. A persistent guest's caller (cordond) waits for its answers to IDENTITY
     * and POLICY; for another, a pipe already at EOF says "running". */
    int sfd[2];
    if (!sb->persistent && pipe2(sfd, O_CLOEXEC) == 0) {
        (void) close(sfd[1]);
        sb->setup_fd = sfd[0];
    }
    if (sb->on_spawned && (r = sb->on_spawned(sb, sb->on_spawned_arg)) < 0) {
        (void) safe_close(qm[0]);
        (void) microvm_destroy(sb);
        return cdn_error_set(err, -r, "record the sandbox: %s", strerror(-r));
    }
    if (boot == BOOT_RESTORE) {
        /* Load the state; the guest resumes by itself when it is in. */
        char reply[4096];
        if ((r = qmp(qm[0], NULL, reply, sizeof reply)) < 0 ||
            (r = qmp(qm[0], "{\"execute\":\"qmp_capabilities\"}\n", reply, sizeof reply)) < 0 ||
            (r = qmp(qm[0],
                     "{\"execute\":\"migrate-set-capabilities\",\"arguments\":{\"capabilities\":"
                     "[{\"capability\":\"x-ignore-shared\",\"state\":true}]}}\n",
                     reply, sizeof reply)) < 0 ||
            (r = qmp(qm[0], "{\"execute\":\"migrate-incoming\",\"arguments\":{\"uri\":\"fd:4\"}}\n", reply,
                     sizeof reply)) < 0)
            r = cdn_error_set(err, -r, "restore the snapshot (QMP: %s): %s%s", strerror(-r), reply,
                              qemu_end(pidfd));
        (void) close(qm[0]);
        if (r < 0) {
            (void) microvm_destroy(sb);
            return r;
        }
    }
    /* Waits in the socket until the guest's init reads it, before any command. */
    if ((r = send_identity(sb)) < 0) {
        (void) microvm_destroy(sb);
        return cdn_error_set(err, -r, "send the guest its identity: %s", strerror(-r));
    }
    if ((r = send_policy(sb, err)) < 0) {
        (void) microvm_destroy(sb);
        return r;
    }
    return 0;
}

static int microvm_kill(struct cdn_sandbox *sb, int sig)
{
    if (sb->init_pidfd < 0)
        return -ESRCH;
    /* Signals for the command cannot reach inside the guest this way: the
     * agent forwards them; here only the end of the whole guest is asked for. */
    return RET_NERRNO(
        (int) syscall(SYS_pidfd_send_signal, sb->init_pidfd, sig == SIGKILL ? SIGKILL : SIGTERM, NULL, 0));
}

/* What the guest last reported (USAGE frames, cdn_microvm_usage_frame): its commands' cgroup. */
static int microvm_usage(struct cdn_sandbox *sb, struct cdn_usage *ret)
{
    *ret = (struct cdn_usage){.memory_peak_bytes = sb->vm_memory_peak,
                              .oom_kills = sb->vm_oom_kills,
                              .pids_max_hits = sb->vm_pids_max_hits};
    return 0;
}

int cdn_microvm_usage_frame(struct cdn_sandbox *sb, const uint8_t *p, size_t len)
{
    struct cdn_usage_msg u;
    int r = cdn_usage_decode(p, len, &u);
    if (r < 0)
        return r;
    /* Counters only grow (a guest could claim less to hide an OOM it had; never more than it had). */
    if (u.oom_kills > sb->vm_oom_kills)
        sb->vm_oom_kills = u.oom_kills;
    if (u.pids_max_hits > sb->vm_pids_max_hits)
        sb->vm_pids_max_hits = u.pids_max_hits;
    if (u.memory_peak_bytes > sb->vm_memory_peak)
        sb->vm_memory_peak = u.memory_peak_bytes;
    sb->vm_disk_full = u.disk_full;
    return 0;
}

static int microvm_destroy(struct cdn_sandbox *sb)
{
    if (sb->init_pidfd >= 0) {
        (void) microvm_kill(sb, SIGKILL);
        /* Through the pidfd: an adopted QEMU is not our child, and its pid may be reused once it is
         * gone; then the pidfd's readiness says it has ended. */
        siginfo_t si;
        int w;
        while ((w = waitid(P_PIDFD, (id_t) sb->init_pidfd, &si, WEXITED | __WALL)) < 0 && errno == EINTR)
            ;
        if (w < 0 && errno == ECHILD) {
            (void) poll_in(sb->init_pidfd, 5000);
        }
    }
    sb->init_pid = 0;
    sb->init_pidfd = safe_close(sb->init_pidfd);
    sb->agent_fd = safe_close(sb->agent_fd);
    sb->setup_fd = safe_close(sb->setup_fd);
    if (sb->cgroup.ops) { /* whatever QEMU left in it (nothing, normally), then the cgroup */
        (void) sb->cgroup.ops->kill_all(&sb->cgroup);
        (void) sb->cgroup.ops->destroy(&sb->cgroup);
        sb->cgroup.ops = NULL;
        sb->cgroup.dirfd = safe_close(sb->cgroup.dirfd);
    }
    remove_run_dir(sb); /* a full VM's snapshot of its disk */
    return 0;
}

/* A persistent guest of an earlier cordond: its QEMU, by pid (the caller checked its start time). */
static int microvm_adopt(struct cdn_sandbox *sb, struct cdn_error *err)
{
    int fd = (int) syscall(SYS_pidfd_open, sb->init_pid, 0);
    if (fd < 0)
        return cdn_error_set(err, errno, "QEMU (pid %d): %m", (int) sb->init_pid);
    sb->init_pidfd = fd;
    char name[CDN_CGROUP_NAME_MAX];
    cgroup_name(sb, name, sizeof name);
    cdn_cgroup_init(&sb->cgroup, cdn_cgroup_detect(), name); /* destroy() removes it */
    if (!sb->accel[0])                                       /* the record says; else as it was chosen */
        (void) snprintf(sb->accel, sizeof sb->accel, "%s", pick_accel(NULL));
    return 0;
}

static void microvm_detach(struct cdn_sandbox *sb)
{
    (void) microvm_destroy(sb); /* QEMU is gone or goes at once: nothing to leave to the background */
}

/* A QEMU of an earlier cordond that is gone (or not ours): its cgroup, and anything still in it. */
static void microvm_forget(struct cdn_sandbox *sb)
{
    char name[CDN_CGROUP_NAME_MAX];
    cgroup_name(sb, name, sizeof name);
    cdn_cgroup_init(&sb->cgroup, cdn_cgroup_detect(), name);
    sb->init_pidfd = safe_close(sb->init_pidfd);
    sb->init_pid = 0;
    (void) microvm_destroy(sb);
}

/* The two tiers are one code: microvm_create builds the machine the spec's tier names. */
#define VM_TIER_OPS(tier_name)                                                                               \
    {                                                                                                        \
        .name = tier_name, .create = microvm_create, .kill = microvm_kill, .usage = microvm_usage,           \
        .destroy = microvm_destroy, .detach = microvm_detach, .adopt = microvm_adopt,                        \
        .forget = microvm_forget,                                                                            \
    }

const struct cdn_tier_ops cdn_microvm_tier = VM_TIER_OPS("microvm");
const struct cdn_tier_ops cdn_vm_tier = VM_TIER_OPS("vm");
