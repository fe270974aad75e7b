/* cordon-init as the first process of a VM guest (the microvm and vm tiers):
 * no host set up its world, so it does: the kernel's filesystems, the
 * modules from the initramfs, and the agent's virtio-serial port, which
 * becomes fd 3 — from there on it is the same agent as in a container.
 *
 * A full VM (tier vm) boots its image's own init: the first process mounts the
 * image's disk as the root, puts a copy of itself and a systemd unit in /run and
 * hands over to /sbin/init, which starts that copy as the agent (agent mode:
 * not PID 1, CORDON_VM_AGENT in its environment). The agent keeps the guest's
 * system as it is: it becomes pid 1 of a pid namespace of its own and makes the
 * commands' view (limits, masks, binds, the read-only root) in a mount
 * namespace of its own. */
#include <arpa/inet.h>
#include <dirent.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/ioctl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <glob.h>
#include <signal.h>
#include <grp.h>
#include <linux/capability.h>
#include <sys/fanotify.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <linux/stat.h> /* struct statx: musl's headers have none */
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "init.h"
#include "init-vm-internal.h"
#include "confine/proc-mask.h"
#include "monitor/watch.h"
#include "supervise/policy.h"
#include "shared/fd-util.h"
#include "shared/macro.h"
#include "shared/sysdirs.h"

/* <linux/random.h>, which the musl build of init has no copy of. */
#ifndef RNDADDENTROPY
#define RNDADDENTROPY _IOW('R', 0x03, int[2])
#endif
#ifndef RNDRESEEDCRNG
#define RNDRESEEDCRNG _IO('R', 0x07)
#endif

static bool vm_guest_mode;
static bool agent_mode; /* started by the image's init (tier vm), not the guest's first process */

/* In a container the host hands init fd 3; in a VM guest nothing does. */
bool cdn_vm_guest(void)
{
    if (fcntl(AGENT_FD, F_GETFD) >= 0)
        return false;
    agent_mode = getpid() != 1 && getenv("CORDON_VM_AGENT") != NULL;
    (void) unsetenv("CORDON_VM_AGENT");
    return vm_guest_mode = getpid() == 1 || agent_mode;
}

/* The modules of a directory of the initramfs (vmprep.c): /.modules (every guest's, at boot),
 * /.modules/net (the network's: at boot for a template, else when the identity has a network) or
 * /.modules/disk (a root disk's: vm_image_root). Each file is removed once loaded (out of the
 * commands' root, and of memory). */
static void load_modules(int dirfd)
{
    /* 0.ko, 1.ko, …: in the order the initramfs was built with. */
    for (int i = 0; i < 64; i++) {
        char p[16];
        (void) snprintf(p, sizeof p, "%d.ko", i);
        _cleanup_close_ int fd = openat(dirfd, p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            break;
        (void) syscall(SYS_finit_module, fd, "", 0);
        (void) unlinkat(dirfd, p, 0);
    }
}

static void load_modules_at(const char *dir)
{
    _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0)
        load_modules(fd);
}

/* The network's modules while not loaded (a cold boot's, until its identity says whether it has a
 * network: 20 ms of a boot under TCG); -1 once loaded or dropped. */
static int net_modules = -1;

static void vm_net_modules(bool load)
{
    if (net_modules < 0)
        return;
    if (load)
        load_modules(net_modules);
    for (int i = 0; i < 64; i++) { /* not loaded: out of sight all the same */
        char p[16];
        (void) snprintf(p, sizeof p, "%d.ko", i);
        if (unlinkat(net_modules, p, 0) < 0)
            break;
    }
    (void) close(net_modules);
    net_modules = -1;
    (void) rmdir("/.modules/net"); /* a host image's; an image's root has no such path */
    (void) rmdir("/.modules");
}

/* Whether the port p (vport0p1, …) is the one the host named cordon.agent. */
static bool agent_port(const char *p)
{
    char path[300], name[64] = "";
    (void) snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", p);
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, name, sizeof name - 1) : -1;
    return n > 0 && strncmp(name, "cordon.agent", 12) == 0;
}

/* Into found: the device of the port named cordon.agent ("" while there is none). */
static void find_port(char *found, size_t size)
{
    found[0] = 0;
    if (agent_port("vport0p1")) {
        (void) snprintf(found, size, "/dev/vport0p1");
        return;
    }
    _cleanup_closedir_ DIR *d = opendir("/sys/class/virtio-ports");
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.' && agent_port(de->d_name))
            (void) snprintf(found, size, "/dev/%s", de->d_name);
}

/* The port the host named cordon.agent: vport0p1 (the only port of the one device, numbered from
 * 1), else whichever has the name. */
static int open_port(void)
{
    for (int tries = 0; tries < 800; tries++) { /* devices appear as their drivers probe: up to 4 s */
        char found[300];
        find_port(found, sizeof found);
        if (found[0]) {
            int fd = open(found, O_RDWR | O_CLOEXEC | O_NOCTTY);
            if (fd >= 0)
                return fd;
        }
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

/* ifr.ifr_name's flags |= IFF_UP; s: any AF_INET socket. */
static int link_up(int s, const char *name)
{
    struct ifreq ifr = {0};
    (void) snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        return -errno;
    ifr.ifr_flags |= IFF_UP;
    return ioctl(s, SIOCSIFFLAGS, &ifr) < 0 ? -errno : 0;
}

static void put_addr(struct sockaddr *sa, uint32_t ip)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(ip)};
    memcpy(sa, &sin, sizeof sin);
}

static int write_file(const char *path, const char *text)
{
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, text, strlen(text));
    return n == (ssize_t) strlen(text) ? 0 : -EIO;
}

/* The network IDENTITY (or a RESUME) set: a fork's guest comes back with its parent's. */
static uint32_t net_ip, net_gateway, net_resolver;

/* eth0's address, its link up, the default route through the host end. */
static int eth0_config(const struct cdn_identity *id)
{
    _cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -errno;
    struct ifreq ifr = {0};
    (void) snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "eth0");
    put_addr(&ifr.ifr_addr, id->ip);
    int r = ioctl(s, SIOCSIFADDR, &ifr) < 0 ? -errno : 0;
    put_addr(&ifr.ifr_netmask, id->prefix ? ~0u << (32 - id->prefix) : 0);
    if (r == 0 && ioctl(s, SIOCSIFNETMASK, &ifr) < 0)
        r = -errno;
    if (r == 0)
        r = link_up(s, "eth0");
    struct rtentry rt = {.rt_flags = RTF_UP | RTF_GATEWAY};
    put_addr(&rt.rt_dst, 0);
    put_addr(&rt.rt_genmask, 0);
    put_addr(&rt.rt_gateway, id->gateway);
    if (r == 0 && net_gateway) { /* a RESUME's: the old route goes (if the address change has not) */
        put_addr(&rt.rt_gateway, net_gateway);
        (void) ioctl(s, SIOCDELRT, &rt);
        put_addr(&rt.rt_gateway, id->gateway);
    }
    if (r == 0 && ioctl(s, SIOCADDRT, &rt) < 0 && errno != EEXIST)
        r = -errno;
    if (r == 0)
        net_ip = id->ip, net_gateway = id->gateway;
    return r;
}

/* The image root's upper layer (a tmpfs, O_PATH), kept past the disk's setup: where init's own
 * files of the root are (/etc/resolv.conf), for a RESUME to rewrite. */
static int upper_keep = -1;

/* /etc/resolv.conf of a resumed guest whose resolver changed. The root is read-only by now; the
 * file is init's, in the overlay's upper layer (written there at IDENTITY), rewritten in place
 * through the layer, whose path no command can reach or change (/etc is the read-only root's). */
static int rewrite_resolv_conf(const char *conf)
{
    if (upper_keep < 0)
        return -EOPNOTSUPP;
    _cleanup_close_ int f =
        openat(upper_keep, "u/etc/resolv.conf", O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
    if (f < 0)
        return -errno;
    return write(f, conf, strlen(conf)) == (ssize_t) strlen(conf) ? 0 : -EIO;
}

/* eth0 as the container tier's eth0 is: the sandbox's address on its /30, the host end as the
 * default route and the resolver, no IPv6. */
static int vm_network(const struct cdn_identity *id)
{
    vm_net_modules(true);
    int r = eth0_config(id);
    if (r < 0)
        return r;
    char conf[64];
    (void) snprintf(conf, sizeof conf, "nameserver %u.%u.%u.%u\n", id->resolver >> 24,
                    (id->resolver >> 16) & 255, (id->resolver >> 8) & 255, id->resolver & 255);
    bool resumed = net_resolver != 0;
    if (resumed && net_resolver == id->resolver)
        return 0;
    net_resolver = id->resolver;
    if (resumed)
        return rewrite_resolv_conf(conf);
    struct stat st; /* an image's may be a link into a resolver's /run: ours replaces it */
    if (lstat("/etc/resolv.conf", &st) == 0 && S_ISLNK(st.st_mode))
        (void) unlink("/etc/resolv.conf");
    return write_file("/etc/resolv.conf", conf);
}

static int vm_cgroup_base(void);
static int vm_harden(void);
static int vm_disk_base(void);
static int make_path(const char *path, bool dir);

/* Whether the kernel's command line has word (with its leading space). */
static bool cmdline_has(const char *word)
{
    static char cmdline[1024];
    if (!cmdline[0]) {
        _cleanup_close_ int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, cmdline, sizeof cmdline - 1) : -1;
        cmdline[n > 0 ? n : 0] = 0;
    }
    return strstr(cmdline, word) != NULL;
}

static bool image_root; /* an image's root disk is the root (else the host's /usr comes over 9p) */
static bool full_vm;    /* tier vm (cordon.tier=vm): q35, the image's own init */
/* A microvm's image root (erofs under an overlay): its upper tmpfs, kept open across switch_root to
 * be sized to disk_mb at identity; commands write the image's own directories there in place. */
static int image_upper_fd = -1;
static bool image_in_place;       /* such a root: its system directories are made read-only, not all of it */
static const char *step = "boot"; /* what cdn_vm_setup or cdn_vm_identity was doing (cdn_vm_failed_step) */

/* The kernel's filesystems moved into /.root, which becomes the root. */
static int switch_root(void)
{
    static const char *const moved[] = {"/proc", "/sys", "/dev", "/tmp"};
    for (size_t i = 0; i < sizeof moved / sizeof moved[0]; i++) {
        char p[64];
        (void) snprintf(p, sizeof p, "/.root%s", moved[i]);
        if ((mkdir(p, 0755) < 0 && errno != EEXIST) || mount(moved[i], p, NULL, MS_MOVE, NULL) < 0)
            return -errno;
    }
    if (chdir("/.root") < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 || chdir("/") < 0)
        return -errno;
    return 0;
}

/* An image's guest (cordon.root=erofs on the kernel's command line): the disk (/dev/vda, erofs)
 * becomes the root, under an overlay whose upper layer is a small tmpfs for what init itself
 * writes there (mount points, /etc/machine-id, /etc/resolv.conf), read-only to commands once the
 * identity is set. The kernel's filesystems move along; the initramfs is left behind, out of reach
 * (switch_root: rootfs cannot be pivoted away). */
static int vm_image_root(void)
{
    if (!cmdline_has(" cordon.root=erofs"))
        return 0;
    image_root = true;
    load_modules_at("/.modules/disk");
    const unsigned long fl = MS_NOSUID | MS_NODEV;
    if (mkdir("/.lower", 0755) < 0 || mkdir("/.upper", 0755) < 0 || mkdir("/.root", 0755) < 0 ||
        mount("/dev/vda", "/.lower", "erofs", MS_RDONLY | fl, NULL) < 0 ||
        /* A full VM's system writes its logs and state there too. */
        mount("tmpfs", "/.upper", "tmpfs", fl, full_vm ? "size=256m,mode=0755" : "size=1024m,mode=0755") <
            0 ||
        mkdir("/.upper/u", 0755) < 0 || mkdir("/.upper/w", 0755) < 0 ||
        mount("overlay", "/.root", "overlay", fl, "lowerdir=/.lower,upperdir=/.upper/u,workdir=/.upper/w") <
            0)
        return -errno;
    if (!full_vm) {
        image_in_place = true;
        int fd = open("/.upper", O_PATH | O_DIRECTORY | O_CLOEXEC);
        image_upper_fd = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 20) : -1;
        if (fd >= 0)
            (void) close(fd);
        if (image_upper_fd < 0)
            return -errno;
    }
    return switch_root();
}

/* The full VM's image disk (cordon.root=disk): an ext4 filesystem on /dev/vda or on the first of its
 * partitions that holds an init, mounted read-write (what the guest writes goes to QEMU's snapshot
 * of the disk: the image file never changes) and made the root. */
static int vm_disk_root(void)
{
    if (!cmdline_has(" cordon.root=disk"))
        return 0;
    image_root = true;
    load_modules_at("/.modules/disk");
    if (mkdir("/.root", 0755) < 0)
        return -errno;
    for (int part = 0; part < 16; part++) {
        char dev[32];
        (void) snprintf(dev, sizeof dev, part ? "/dev/vda%d" : "/dev/vda", part);
        if (mount(dev, "/.root", "ext4", MS_NOSUID, NULL) < 0)
            continue;
        if (access("/.root/sbin/init", X_OK) == 0 || access("/.root/usr/sbin/init", X_OK) == 0 ||
            access("/.root/bin/sh", X_OK) == 0)
            return switch_root();
        (void) umount("/.root");
    }
    return -ENOENT;
}

/* The image's own init (a full VM's) is systemd: it is handed the guest (vm_hand_over). With another
 * init, cordon-init stays the first process, as in a microvm. */
static bool image_init_is_systemd(void)
{
    char target[256];
    ssize_t n = readlink("/sbin/init", target, sizeof target - 1);
    if (n <= 0)
        return false;
    target[n] = 0;
    return strstr(target, "systemd") != NULL;
}

/* What systemd starts as the agent: this binary's copy in /run, at once (sysinit.target, without
 * the default dependencies), with the environment that says agent mode (cdn_vm_guest). */
static const char agent_unit[] = "[Unit]\n"
                                 "Description=cordon agent: the host's commands, files and events\n"
                                 "DefaultDependencies=no\n"
                                 "[Service]\n"
                                 "Environment=CORDON_VM_AGENT=1\n"
                                 "ExecStart=/run/cordon/init\n"
                                 "StandardError=journal+console\n"
                                 "KillMode=process\n";

/* A full VM's first process, in the image's root: /run (a tmpfs, which systemd keeps as it finds it)
 * with the agent's binary (self: the initramfs's /init, opened before the root changed) and its unit,
 * then the image's init in our place. Returns only on failure. */
static int vm_hand_over(int self)
{
    static const char wants[] = "/run/systemd/system/sysinit.target.wants";
    if ((mkdir("/run", 0755) < 0 && errno != EEXIST) ||
        mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=20%") < 0 ||
        mkdir("/run/cordon", 0700) < 0 || make_path(wants, true) < 0)
        return -errno;
    /* An image without /etc/machine-id would be systemd's "first boot", which applies every unit's
     * preset (7 s of a host image's boot under TCG); with an empty one it only makes up an id. */
    int mid = open("/etc/machine-id", O_WRONLY | O_CREAT | O_CLOEXEC, 0444);
    if (mid >= 0)
        (void) close(mid);
    int out = open("/run/cordon/init", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
    if (out < 0)
        return -errno;
    char buf[65536];
    ssize_t n; /* 0 at the end: copied whole (else a read's error, or a write's short count) */
    while ((n = read(self, buf, sizeof buf)) > 0 && write(out, buf, (size_t) n) == n)
        ;
    (void) close(out);
    if (n != 0 || write_file("/run/systemd/system/cordon-agent.service", agent_unit) < 0 ||
        symlink("../cordon-agent.service", "/run/systemd/system/sysinit.target.wants/cordon-agent.service") <
            0)
        return -errno ? -errno : -EIO;
    char *const argv[] = {"/sbin/init", NULL};
    (void) execv(argv[0], argv);
    return -errno;
}

/* What the guest's first process does at boot (in the snapshot, for a microvm). */
static int vm_boot(void)
{
    (void) mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    (void) mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    (void) mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
    (void) mkdir("/dev/pts", 0755);
    (void) mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666");
    (void) mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    int con = open("/dev/console", O_RDWR | O_NOCTTY);
    for (int i = 0; con >= 0 && i < 3; i++)
        if (fcntl(i, F_GETFD) < 0)
            (void) dup2(con, i);
    if (con > 2)
        (void) close(con);
    full_vm = cmdline_has(" cordon.tier=vm");
    load_modules_at("/.modules");
    if (full_vm) /* virtio over PCI (its devices appear now, for the drivers loaded above), ext4 */
        load_modules_at("/.modules/vm");
    /* Above the fds init's protocol fixes (3, the agent's port, is still free here). */
    int nm = open("/.modules/net", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (nm >= 0) {
        net_modules = fcntl(nm, F_DUPFD_CLOEXEC, 20);
        (void) close(nm);
    }
    /* A template: every restore may have a network. A full VM: its agent comes after the
     * initramfs is gone. */
    if (cmdline_has(" cordon.boot=template") || full_vm)
        vm_net_modules(true);
    int self = -1;
    if (full_vm) {
        int fd = open("/init", O_RDONLY | O_CLOEXEC);
        self = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 20) : -1;
        if (fd >= 0)
            (void) close(fd);
    }
    if (vm_image_root() < 0 || vm_disk_root() < 0)
        return -1;
    if (!image_root)
        (void) unlink("/init");                       /* only boot needed it: out of the commands' root */
    if (full_vm && !cmdline_has(" cordon.root=disk")) /* the host image's own /usr, for its init */
        (void) mount("usr", "/usr", "9p", MS_RDONLY | MS_NOSUID | MS_NODEV,
                     "trans=virtio,version=9p2000.L,cache=loose,msize=262144");
    if (full_vm && image_init_is_systemd()) {
        int r = vm_hand_over(self);
        fprintf(stderr, "cordon-init: hand the guest to /sbin/init: %s\n", strerror(-r));
        return -1;
    }
    if (self >= 0)
        (void) close(self);
    return 0;
}

/* The agent started by a full VM's init. The guest's system is left as it is; the agent and its
 * commands live in namespaces of their own:
 * - a mount namespace, a slave of the system's (it receives the system's later mounts and passes
 *   none of its own back), where what commands see is made;
 * - a pid namespace whose first process is the agent, as a microvm's init is: commands cannot end
 *   it (a signal to pid 1 from within its namespace is dropped unless pid 1 handles it, SIGKILL
 *   always) and see none of the system's processes.
 * The process the system started stays outside and waits: when the agent is gone it powers the
 * guest off (reboot() in a child pid namespace ends that namespace, not the machine). */
static int vm_agent_setup(void)
{
    full_vm = image_root = true;
    step = "the agent's namespaces";
    if (unshare(CLONE_NEWNS | CLONE_NEWPID) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid > 0) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        cdn_vm_poweroff();
        _exit(0);
    }
    /* Its own /proc (its namespace's processes only), over whatever the system mounted beneath the
     * old one (binfmt_misc); /sys bound on itself without what the system mounted beneath it (the
     * cgroup tree, debugfs; a second mount of sysfs on its own mount point is refused). Both are
     * masked and made read-only by vm_harden, as a microvm's are. */
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
        mount("/sys", "/sys", NULL, MS_BIND, NULL) < 0)
        return -1;
    return 0;
}

int cdn_vm_setup(void)
{
    if ((agent_mode ? vm_agent_setup() : vm_boot()) < 0)
        return -1;
    /* What every guest has alike is done here, before the snapshot (each costs tens of ms under
     * TCG): no IPv6 (as a container's namespace; before lo is up, which then gets no ::1); allocations
     * not refused for the guest's size (a host has more than the limit: the cgroup's limit decides,
     * by its OOM killer, as in a container); the commands' cgroup; /proc, /sys and /dev as a
     * container sees them. */
    (void) write_file("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1\n");
    (void) write_file("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1\n");
    (void) write_file("/proc/sys/vm/overcommit_memory", "1\n");
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s >= 0) {
        (void) link_up(s, "lo");
        (void) close(s);
    }
    step = "the agent's port (virtio-serial cordon.agent)";
    int port = open_port();
    if (port < 0)
        return -1;
    if (port != AGENT_FD && (dup2(port, AGENT_FD) < 0 || close(port) < 0))
        return -1;
    int r;
    if ((step = "the commands' cgroup", r = vm_cgroup_base()) < 0 ||
        (step = "/proc, /sys and /dev", r = vm_harden()) < 0 || (step = "the disk", r = vm_disk_base()) < 0) {
        errno = -r;
        return -1;
    }
    step = "identity";
    return 0;
}

void cdn_vm_poweroff(void)
{
    sync();
    (void) reboot(RB_POWER_OFF);
}

/* mkdir -p of path's parents, and path itself as a directory (dir) or an empty file. */
static int make_path(const char *path, bool dir)
{
    char p[256];
    (void) snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            bool last = !c;
            if (last && !dir) {
                int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
                if (fd < 0)
                    return -errno;
                (void) close(fd);
            } else if (mkdir(p, 0755) < 0 && errno != EEXIST)
                return -errno;
            if (last)
                break;
            *s = c;
        }
    }
    return 0;
}

/* The spec's mounts: the host's binds share, entry i bound at the i-th bind path. */
static int vm_binds(const struct cdn_identity *id)
{
    static const char share[] = "/run/cordon-binds";
    unsigned n = 0;
    int r = 0;
    for (unsigned i = 0; i < id->n_paths; i++)
        n += id->paths[i].kind == CDN_PATH_BIND_RW || id->paths[i].kind == CDN_PATH_BIND_RO;
    if (!n)
        return 0;
    if (make_path(share, true) < 0 ||
        mount("binds", share, "9p", MS_NOSUID | MS_NODEV, "trans=virtio,version=9p2000.L,msize=262144") < 0)
        return -errno;
    for (unsigned i = 0, b = 0; i < id->n_paths && r == 0; i++) {
        if (id->paths[i].kind != CDN_PATH_BIND_RW && id->paths[i].kind != CDN_PATH_BIND_RO)
            continue;
        char src[64];
        struct stat st;
        (void) snprintf(src, sizeof src, "%s/%u", share, b++);
        if (stat(src, &st) < 0 || make_path(id->paths[i].path, S_ISDIR(st.st_mode)) < 0 ||
            mount(src, id->paths[i].path, NULL, MS_BIND, NULL) < 0 ||
            (id->paths[i].kind == CDN_PATH_BIND_RO &&
             mount(NULL, id->paths[i].path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID, NULL) < 0))
            r = -errno;
    }
    (void) umount2(share, MNT_DETACH); /* the binds stay; the share itself is out of sight */
    (void) rmdir(share);
    return r;
}

/* ---- limits: a cgroup of the guest's commands, a disk of disk_mb for what they write ---- */

static int cg_fd = -1;              /* the commands' cgroup (its mount detached: no path leads there) */
static int cg_events[2] = {-1, -1}; /* its memory.events and pids.events, polled for changes */
static uint32_t limit_nofile, limit_disk_mb;
static struct cdn_usage_msg last_usage;
static bool usage_sent;

static int write_at(int dirfd, const char *name, const char *text)
{
    _cleanup_close_ int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, text, strlen(text));
    return n == (ssize_t) strlen(text) ? 0 : -errno;
}

static uint64_t meminfo_total(void)
{
    char buf[256] = "";
    _cleanup_close_ int fd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    unsigned long long kb = 0;
    return n > 0 && sscanf(buf, "MemTotal: %llu kB", &kb) == 1 ? (uint64_t) kb << 10 : 0;
}

/* cgroup v2 of the commands: pids.max = the spec's pids, memory.max = the spec's memory (the
 * guest has more: tiers/qemu/guest.c), at most the guest's memory less what its kernel and init keep. Mounted
 * aside, opened, detached: commands (uid 0, no capabilities) find no path to raise their own limits. */
/* At boot (in the snapshot): the cgroup, mounted aside, its controllers enabled (the slow part). */
static int vm_cgroup_base(void)
{
    static const char mnt[] = "/run/cordon-cg";
    if (make_path(mnt, true) < 0 ||
        mount("cgroup2", mnt, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        return -errno;
    int root = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = root < 0 ? -errno : 0;
    if (r == 0)
        r = write_at(root, "cgroup.subtree_control", "+pids +memory");
    if (r == 0 && mkdirat(root, "cmds", 0755) < 0 && errno != EEXIST)
        r = -errno;
    if (r == 0 && (cg_fd = openat(root, "cmds", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        r = -errno;
    if (r == 0) {
        cg_events[0] = openat(cg_fd, "memory.events", O_RDONLY | O_CLOEXEC);
        cg_events[1] = openat(cg_fd, "pids.events", O_RDONLY | O_CLOEXEC);
        (void) write_at(cg_fd, "memory.oom.group", "0");
    }
    if (root >= 0)
        (void) close(root);
    (void) umount2(mnt, MNT_DETACH);
    (void) rmdir(mnt);
    return r;
}

/* At IDENTITY: the spec's limits on it. */
static int vm_cgroup(uint32_t pids, uint32_t memory_mb)
{
    if (cg_fd < 0)
        return -ENOENT;
    char v[32];
    uint64_t total = meminfo_total(), keep = 24u << 20;
    (void) snprintf(v, sizeof v, "%u", pids ? pids : 256);
    int r = write_at(cg_fd, "pids.max", v);
    uint64_t max = (uint64_t) memory_mb << 20;
    if (!max || (total && max > total - keep)) /* never more than the guest can give */
        max = total > 2 * keep ? total - keep : total / 2;
    (void) snprintf(v, sizeof v, "%llu", (unsigned long long) max);
    if (r == 0 && max)
        r = write_at(cg_fd, "memory.max", v);
    return r;
}

/* The directories a command may write, as a container's (src/tiers/container/rootfs.c): each a
 * directory of one tmpfs of disk_mb, bound in place; everything else of the root read-only. The
 * tmpfs and the binds of the fixed directories are made at boot (in the snapshot: a dozen calls,
 * each costing a restore a millisecond or two under TCG); the identity sizes it and adds the
 * workdir's. */
static const char disk[] = "/.cordon-disk"; /* not under one of the directories: /run is covered */
static const char *const disk_dirs[] = {"/tmp", "/var/tmp", "/root", "/home", "/run"};

static int vm_disk_base(void)
{
    char src[64];
    if (image_upper_fd >= 0) /* the image's own directories, written in place (vm_image_disk) */
        return 0;
    if (make_path(disk, true) < 0 ||
        mount("tmpfs", disk, "tmpfs", MS_NOSUID | MS_NODEV, "size=1024m,mode=0755") < 0)
        return -errno;
    for (size_t i = 0; i < sizeof disk_dirs / sizeof disk_dirs[0]; i++) {
        (void) snprintf(src, sizeof src, "%s/%zu", disk, i);
        if (mkdir(src, i < 2 ? 01777 : 0755) < 0 || (i < 2 && chmod(src, 01777) < 0) ||
            make_path(disk_dirs[i], true) < 0 || mount(src, disk_dirs[i], NULL, MS_BIND, NULL) < 0)
            return -errno;
    }
    return 0;
}

/* An image root's disk: the overlay's upper tmpfs sized to disk_mb; the writable directories and
 * the workdir are the image's own where it has them (an SWE task's /testbed keeps its files), made
 * in the upper layer where it has not. */
static int vm_image_disk(const char *workdir, uint32_t disk_mb)
{
    char opt[64], fdp[64];
    (void) snprintf(opt, sizeof opt, "size=%um,mode=0755", disk_mb ? disk_mb : 1024);
    (void) snprintf(fdp, sizeof fdp, "/proc/self/fd/%d", image_upper_fd);
    if (mount(NULL, fdp, NULL, MS_REMOUNT | MS_NOSUID | MS_NODEV, opt) < 0)
        return -errno;
    upper_keep = image_upper_fd; /* kept (rewrite_resolv_conf) */
    image_upper_fd = -1;
    for (size_t i = 0; i < sizeof disk_dirs / sizeof disk_dirs[0]; i++) {
        struct stat st;
        if (lstat(disk_dirs[i], &st) == 0)
            continue;
        if (make_path(disk_dirs[i], true) < 0 || (i < 2 && chmod(disk_dirs[i], 01777) < 0))
            return -errno;
    }
    return make_path(workdir, true) < 0 ? -errno : 0;
}

/* An image root as landlock keeps a container's: writable beneath every top-level directory but the
 * system ones (and the workdir wherever it is), nothing else. Each such directory becomes a mount of
 * its own (bound on itself), so that the root's read-only remount that follows leaves them writable. */
static int vm_image_writable_tops(const char *workdir, bool writable_system)
{
    DIR *d = opendir("/");
    if (!d)
        return -errno;
    int r = 0;
    for (struct dirent *de; r == 0 && (de = readdir(d));) {
        char p[300];
        if (de->d_type != DT_DIR || de->d_name[0] == '.' || cdn_read_only_top(de->d_name, writable_system))
            continue;
        (void) snprintf(p, sizeof p, "/%s", de->d_name);
        if (mount(p, p, NULL, MS_BIND | MS_REC, NULL) < 0)
            r = -errno;
    }
    closedir(d);
    char top[256];
    size_t n = strcspn(workdir + 1, "/");
    (void) snprintf(top, sizeof top, "%.*s", (int) n, workdir + 1);
    if (r == 0 && cdn_read_only_top(top, writable_system) &&
        mount(workdir, workdir, NULL, MS_BIND | MS_REC, NULL) < 0)
        r = -errno;
    return r;
}

static int vm_disk(const char *workdir, uint32_t disk_mb)
{
    char opt[64], src[64];
    if (image_upper_fd >= 0)
        return vm_image_disk(workdir, disk_mb);
    (void) snprintf(opt, sizeof opt, "size=%um", disk_mb ? disk_mb : 1024);
    if (mount(NULL, disk, NULL, MS_REMOUNT | MS_NOSUID | MS_NODEV, opt) < 0)
        return -errno;
    int r = 0;
    if (strcmp(workdir, "/tmp") != 0 && strcmp(workdir, "/run") != 0) {
        (void) snprintf(src, sizeof src, "%s/w", disk);
        if (mkdir(src, 0755) < 0 || make_path(workdir, true) < 0 ||
            mount(src, workdir, NULL, MS_BIND, NULL) < 0)
            r = -errno;
    }
    (void) umount2(disk, MNT_DETACH); /* the binds keep the tmpfs; its own path goes */
    (void) rmdir(disk);
    return r;
}

int cdn_vm_set_rlimits(void)
{
    if (limit_nofile) {
        struct rlimit l = {limit_nofile, limit_nofile};
        if (setrlimit(RLIMIT_NOFILE, &l) < 0)
            return -errno;
    }
    struct rlimit core = {0, 0};
    (void) setrlimit(RLIMIT_CORE, &core);
    if (limit_disk_mb) {
        struct rlimit fsize = {(rlim_t) (limit_disk_mb + 1) << 20, (rlim_t) (limit_disk_mb + 1) << 20};
        (void) setrlimit(RLIMIT_FSIZE, &fsize);
    }
    return 0;
}

int cdn_vm_commands_cgroup(void)
{
    return cg_fd;
}

bool cdn_vm_kill_commands(void)
{
    return cg_fd >= 0 && write_at(cg_fd, "cgroup.kill", "1") == 0;
}

void cdn_vm_freeze_commands(bool on)
{
    if (cg_fd < 0 || write_at(cg_fd, "cgroup.freeze", on ? "1" : "0") < 0 || !on)
        return;
    /* Frozen when each has left user space; one waiting in the kernel (an open the guard holds in
     * kill mode) never reports so, and traps the moment it would return: not waited for long. */
    for (int i = 0; i < 100; i++) {
        char buf[256] = "";
        _cleanup_close_ int fd = openat(cg_fd, "cgroup.events", O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (n <= 0 || strstr(buf, "frozen 1"))
            return;
        (void) usleep(2000);
    }
}

void cdn_vm_hold_commands(bool on)
{
    if (vm_guest_mode)
        cdn_vm_freeze_commands(on);
}

bool cdn_vm_commands_gone(void)
{
    char buf[256] = "";
    _cleanup_close_ int fd = cg_fd >= 0 ? openat(cg_fd, "cgroup.events", O_RDONLY | O_CLOEXEC) : -EBADF;
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    return n > 0 && strstr(buf, "populated 0") != NULL;
}

static uint64_t event_count(int fd, const char *key)
{
    char buf[512] = "";
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    size_t kl = strlen(key);
    for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, key, kl) == 0 && l[kl] == ' ')
            return strtoull(l + kl + 1, NULL, 10);
    return 0;
}

/* The commands' cgroup's memory.peak (0 when it cannot be read). */
static uint64_t memory_peak(void)
{
    char buf[32] = "";
    _cleanup_close_ int fd = openat(cg_fd, "memory.peak", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    return n > 0 ? strtoull(buf, NULL, 10) : 0;
}

void cdn_vm_usage_report(bool force)
{
    if (cg_fd < 0)
        return;
    struct cdn_usage_msg u = {.oom_kills = event_count(cg_events[0], "oom_kill"),
                              .pids_max_hits = event_count(cg_events[1], "max")};
    u.memory_peak_bytes = memory_peak();
    struct statfs fs;
    bool fs_known = statfs("/tmp", &fs) == 0;
    u.disk_full = fs_known && fs.f_bavail == 0;
    char buf[32] = "";
    _cleanup_close_ int pfd = openat(cg_fd, "pids.current", O_RDONLY | O_CLOEXEC);
    ssize_t n = pfd >= 0 ? read(pfd, buf, sizeof buf - 1) : -1;
    u.now_known = true;
    u.pids = n > 0 ? strtoull(buf, NULL, 10) : 0;
    u.disk_size_bytes = fs_known ? (uint64_t) fs.f_blocks * (uint64_t) fs.f_frsize : 0;
    u.disk_used_bytes = fs_known ? (uint64_t) (fs.f_blocks - fs.f_bfree) * (uint64_t) fs.f_frsize : 0;
    if (!force && usage_sent && u.oom_kills == last_usage.oom_kills &&
        u.pids_max_hits == last_usage.pids_max_hits && u.disk_full == last_usage.disk_full)
        return;
    last_usage = u;
    usage_sent = true;
    uint8_t b[64];
    int len = cdn_usage_encode(b, sizeof b, &u);
    if (len > 0)
        cdn_agent_send(CDN_FRAME_USAGE, 0, b, (uint32_t) len);
}

/* The guest's kernel interfaces as a container sees the host's (OCI defaults, rootfs.c): masked
 * /proc files, /proc/sys and friends read-only, /sys read-only, and a /dev of the usual nodes only
 * (no devtmpfs: /dev/userfaultfd, /dev/mem and the disks are not there). Init has set up what it
 * needed of them; its commands have no capability to undo any of it. */
static int vm_harden(void)
{
    static const struct {
        const char *name;
        unsigned major, minor;
    } nodes[] = {{"null", 1, 3},   {"zero", 1, 5},    {"full", 1, 7},
                 {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};
    static const char mask[] = "/run/cordon-mask", dev[] = "/run/cordon-dev";
    (void) mkdir("/run", 0755);
    int fd = open(mask, O_WRONLY | O_CREAT | O_CLOEXEC, 0444);
    if (fd < 0)
        return -errno;
    (void) close(fd);
    struct cdn_error err = {0};
    int r = cdn_proc_mask("", mask, NULL, &err); /* a guest's own kernel: tmpfs masks cost no host memory */
    if (r < 0)
        return r;
    /* The whole sysfs read-only (an agent's: its own mount of it, vm_agent_setup). */
    if (mount(NULL, "/sys", NULL,
              (agent_mode ? MS_BIND : 0) | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              NULL) < 0)
        return -errno;
    /* The new /dev, made aside and moved over devtmpfs. */
    char p[64];
    if (make_path(dev, true) < 0 ||
        mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k") < 0)
        return -errno;
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
        (void) snprintf(p, sizeof p, "%s/%s", dev, nodes[i].name);
        if (mknod(p, S_IFCHR | 0666, makedev(nodes[i].major, nodes[i].minor)) < 0)
            return -errno;
    }
    static const char *const links[][2] = {{"ptmx", "pts/ptmx"},
                                           {"fd", "/proc/self/fd"},
                                           {"stdin", "/proc/self/fd/0"},
                                           {"stdout", "/proc/self/fd/1"},
                                           {"stderr", "/proc/self/fd/2"}};
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        (void) snprintf(p, sizeof p, "%s/%s", dev, links[i][0]);
        if (symlink(links[i][1], p) < 0)
            return -errno;
    }
    (void) snprintf(p, sizeof p, "%s/pts", dev);
    if (mkdir(p, 0755) < 0 ||
        mount("devpts", p, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620") < 0)
        return -errno;
    (void) snprintf(p, sizeof p, "%s/shm", dev);
    if (mkdir(p, 01777) < 0 || mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0)
        return -errno;
    if (umount2("/dev/pts", MNT_DETACH) < 0 || mount(dev, "/dev", NULL, MS_MOVE, NULL) < 0)
        return -errno;
    /* No path to either is left (/run is the commands'): the masks keep their file. */
    (void) unlink(mask);
    (void) rmdir(dev);
    return 0;
}

const char *cdn_vm_failed_step(void)
{
    return step;
}

/* The identity's seed mixed into the pool (credited), then the CRNG reseeded from it at once:
 * without the reseed, siblings from one snapshot would keep producing the same bytes until the
 * kernel's next scheduled reseed. */
static int seed_random(const uint8_t seed[CDN_IDENTITY_SEED])
{
    struct {
        int entropy_count, buf_size; /* struct rand_pool_info */
        uint8_t bytes[CDN_IDENTITY_SEED];
    } e = {.entropy_count = CDN_IDENTITY_SEED * 8, .buf_size = CDN_IDENTITY_SEED};
    memcpy(e.bytes, seed, CDN_IDENTITY_SEED);
    _cleanup_close_ int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ioctl(fd, RNDADDENTROPY, &e) < 0 || ioctl(fd, RNDRESEEDCRNG) < 0)
        return -errno;
    return 0;
}

/* /etc/machine-id: the identity's, as hex. */
static int write_machine_id(const struct cdn_identity *id)
{
    char hex[34];
    for (int i = 0; i < 16; i++)
        (void) snprintf(hex + 2 * i, 3, "%02x", id->machine_id[i]);
    hex[32] = '\n';
    hex[33] = 0;
    if (agent_mode) /* systemd may have bound its own over it, read-only: ours goes to the file */
        (void) umount2("/etc/machine-id", MNT_DETACH);
    _cleanup_close_ int fd = open("/etc/machine-id", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
    if (fd < 0 || write(fd, hex, 33) != 33)
        return -errno;
    return 0;
}

/* The spec's user (CDN_PATH_USER): one of the guest's /etc/passwd, or the start fails naming it (as
 * a container's does); the workdir cordon made (/workspace, or the user's home), still empty and
 * root's, becomes the user's. */
static int vm_user(const struct cdn_identity *id)
{
    static char why[320];
    for (unsigned i = 0; i < id->n_paths; i++) {
        if (id->paths[i].kind != CDN_PATH_USER)
            continue;
        struct cdn_user u;
        struct cdn_error e = {0};
        int r = cdn_user_lookup(id->paths[i].path, &u, &e);
        if (r < 0) {
            (void) snprintf(why, sizeof why, "%s", e.msg);
            step = why;
            return r;
        }
        if (u.uid == 0 || (strcmp(id->workdir, "/workspace") != 0 && strcmp(id->workdir, u.home) != 0))
            return 0;
        _cleanup_close_ int fd = open(id->workdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || st.st_uid != 0)
            return 0;
        _cleanup_closedir_ DIR *d = fdopendir(fd);
        if (!d)
            return 0;
        fd = -EBADF; /* d's */
        bool empty = true;
        for (struct dirent *de; empty && (de = readdir(d));)
            empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
        step = "identity: give the workdir to the user";
        return empty && fchown(dirfd(d), u.uid, u.gid) < 0 ? -errno : 0;
    }
    return 0;
}

int cdn_vm_resume(uint64_t time_ns, const uint8_t seed[CDN_IDENTITY_SEED], uint32_t ip, uint32_t gateway,
                  uint32_t resolver, uint8_t prefix)
{
    if (!vm_guest_mode)
        return -EPERM;
    struct timespec ts = {.tv_sec = (time_t) (time_ns / 1000000000u),
                          .tv_nsec = (long) (time_ns % 1000000000u)};
    if (clock_settime(CLOCK_REALTIME, &ts) < 0)
        return -errno;
    int r = seed_random(seed);
    if (r < 0 || !ip || (ip == net_ip && gateway == net_gateway && resolver == net_resolver))
        return r; /* no network, or the same sandbox's (a rollback) */
    if (prefix > 30 || !net_ip)
        return -EINVAL; /* a guest saved without a network has no device set up for one */
    struct cdn_identity id = {.ip = ip, .gateway = gateway, .resolver = resolver, .prefix = prefix};
    return vm_network(&id);
}

int cdn_vm_identity(const struct cdn_identity *id)
{
    if (!vm_guest_mode)
        return -EPERM; /* a container's init has no business with these */
    step = "identity: the clock and the random seed";
    struct timespec ts = {.tv_sec = (time_t) (id->time_ns / 1000000000u),
                          .tv_nsec = (long) (id->time_ns % 1000000000u)};
    if (clock_settime(CLOCK_REALTIME, &ts) < 0)
        return -errno;
    int r = seed_random(id->seed);
    if (r < 0)
        return r;
    (void) mkdir("/etc", 0755);
    step = "identity: the machine id";
    if ((r = write_machine_id(id)) < 0)
        return r;
    if (sethostname(id->hostname, strlen(id->hostname)) < 0)
        return -errno;
    step = "identity: the network";
    if (!id->ip)
        vm_net_modules(false);
    if (id->ip && (r = vm_network(id)) < 0)
        return r;
    cdn_vm_mount_image(); /* before the binds, which may lie beneath /usr */
    limit_nofile = id->nofile;
    limit_disk_mb = id->disk_mb;
    /* The disk first: a bind may lie beneath one of its directories (a bind onto the workdir). */
    step = "identity: the cgroup of commands";
    r = vm_cgroup(id->pids, id->memory_mb);
    if (r < 0 || (step = "identity: the disk", r = vm_disk(id->workdir, id->disk_mb)) < 0 ||
        (step = "identity: the binds", r = vm_binds(id)) < 0 ||
        (step = "identity: the user", r = vm_user(id)) < 0 ||
        (step = "identity: the protected paths", r = cdn_vm_protect(id)) < 0)
        return r;
    step = "identity: the read-only root";
    bool writable_system = false;
    for (unsigned i = 0; i < id->n_paths; i++)
        writable_system |= id->paths[i].kind == CDN_PATH_SYSTEM;
    if (image_in_place && (r = vm_image_writable_tops(id->workdir, writable_system)) < 0)
        return r;
    /* The rest of the root (the initramfs, or the system directories of an image root) read-only,
     * as a container's image is to its commands. */
    return mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0 ? -errno : 0;
}

void cdn_vm_mount_image(void)
{
    static bool done;
    if (!vm_guest_mode || done)
        return;
    done = true;
    if (image_root)
        return; /* the image's own /usr */
    /* The host image's /usr (9p, read-only), under the host image's skeleton (the initramfs). */
    (void) mount("usr", "/usr", "9p", MS_RDONLY | MS_NOSUID | MS_NODEV,
                 "trans=virtio,version=9p2000.L,cache=loose,msize=262144");
}

/* ---- confinement of a guest's commands (POLICY) and their watched denials ---- */

#define MAX_LISTENERS 256

static struct sock_filter filters[2 * 4096];
static uint16_t filter_len[2];
static uint8_t policy_flags;
static int listeners[MAX_LISTENERS];
static size_t n_listeners;
static size_t polled_base, polled_n;

int cdn_vm_policy(const uint8_t *p, size_t len)
{
    struct cdn_policy pol;
    if (!vm_guest_mode)
        return -EPERM;
    if (cdn_policy_decode(p, len, &pol) < 0)
        return -EBADMSG;
    memcpy(filters, pol.insns, ((size_t) pol.len[0] + pol.len[1]) * sizeof filters[0]); /* aligned here */
    filter_len[0] = pol.len[0];
    filter_len[1] = pol.len[1];
    policy_flags = pol.flags;
    if (policy_flags & CDN_POLICY_KILL) /* its opens are held in kill mode */
        cdn_vm_protect_kill_mode();
    return 0;
}

bool cdn_vm_guest_mode(void)
{
    return vm_guest_mode;
}

bool cdn_vm_confines(void)
{
    return filter_len[0] > 0;
}

int cdn_vm_confine_child(int sock)
{
    /* As the container tier's setup does for its init (setup.c): root keeps no capability across
     * exec, none is left to raise, and no exec can gain privileges. */
    if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                                     SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) < 0)
        return -errno;
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno == EINVAL)
            break;
    (void) prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct data[2] = {{0}};
    if (syscall(SYS_capset, &h, data) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    struct sock_fprog second = {.len = filter_len[1], .filter = filters + filter_len[0]};
    struct sock_fprog first = {.len = filter_len[0], .filter = filters};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &second) < 0)
        return -errno;
    _cleanup_close_ int lfd =
        (int) syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &first);
    if (lfd < 0)
        return -errno;
    /* The listener goes to init (the command must never hold it: it could answer for itself). */
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } c = {0};
    char tag = 'L';
    struct iovec iov = {&tag, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.b, .msg_controllen = sizeof c.b};
    struct cmsghdr *ch = CMSG_FIRSTHDR(&m);
    ch->cmsg_level = SOL_SOCKET;
    ch->cmsg_type = SCM_RIGHTS;
    ch->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(ch), &lfd, sizeof lfd);
    return sendmsg(sock, &m, MSG_NOSIGNAL) == 1 ? 0 : -errno;
}

void cdn_vm_add_listener(int fd)
{
    if (n_listeners < MAX_LISTENERS && fcntl(fd, F_SETFD, FD_CLOEXEC) == 0)
        listeners[n_listeners++] = fd;
    else
        (void) close(fd); /* its callers' watched calls then fail (ENOSYS): denied, not recorded */
}

void cdn_vm_poll_add(struct pollfd *pfd, size_t *n, size_t max)
{
    if (cdn_vm_fan_sock() >= 0 && *n + 3 < max) /* the fanotify process's records of refused opens */
        pfd[(*n)++] = (struct pollfd){.fd = cdn_vm_fan_sock(), .events = POLLIN};
    for (int i = 0; i < 2 && *n + 2 < max; i++) /* a change of a cgroup events file: POLLPRI */
        pfd[(*n)++] = (struct pollfd){.fd = cg_events[i], .events = POLLPRI};
    polled_base = *n;
    polled_n = 0;
    for (size_t i = 0; i < n_listeners && *n < max; i++, polled_n++)
        pfd[(*n)++] = (struct pollfd){.fd = listeners[i], .events = POLLIN};
}

void cdn_vm_read_cmdline(int pid, char *buf, size_t size)
{
    char p[64];
    (void) snprintf(p, sizeof p, "/proc/%d/cmdline", pid);
    _cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
    ssize_t k = fd >= 0 ? read(fd, buf, size - 1) : -1;
    for (ssize_t i = 0; i < k; i++)
        if ((unsigned char) buf[i] < 32)
            buf[i] = ' ';
    while (k > 0 && buf[k - 1] == ' ')
        k--;
    buf[k > 0 ? k : 0] = 0;
}

/* The host's rule for a violating call (supervise/policy.h): a guest is told only whether its host
 * kills (POLICY's CDN_POLICY_KILL), and for a refused call `log` and `deny` agree. Held in kill
 * mode: the host ends the guest on the VIOLATION frame, and the caller never runs on. */
static enum cdn_answer answer_violation(void)
{
    bool kill = policy_flags & CDN_POLICY_KILL;
    return cdn_violation_answer(kill ? CDN_VIOLATION_KILL : CDN_VIOLATION_DENY, CDN_ATTEMPT_CALL, kill);
}

/* inotify_add_watch by a command (src/monitor/watch.h): made by init on the object it resolved,
 * without init's capabilities (the command has none), or refused on a protected path (a
 * VIOLATION: the watch would tell the names the harness reads there). Without protected paths,
 * or while a verifier step runs, the kernel makes it. */
static void guest_watch(int fd, const struct seccomp_notif *n)
{
    struct cdn_watch w;
    if (!cdn_vm_protects_anything() || cdn_vm_verifier_on()) {
        (void) cdn_watch_answer(fd, n->id, 0, 0, true);
        return;
    }
    int r = cdn_watch_open(fd, n->id, (int) n->pid, (const uint64_t *) n->data.args, &w);
    if (r < 0) {
        (void) cdn_watch_answer(fd, n->id, 0, -r, false);
        return;
    }
    if (cdn_vm_protected_path(w.path)) {
        static struct cdn_violation_msg v;
        v = (struct cdn_violation_msg){.kind = CDN_VIOLATION_MSG_PROTECT, .pid = n->pid};
        (void) snprintf(v.path, sizeof v.path, "%.255s", w.path);
        (void) snprintf(v.op, sizeof v.op, "inotify");
        cdn_vm_read_cmdline((int) n->pid, v.cmd, sizeof v.cmd);
        static uint8_t buf[1024];
        int k = cdn_violation_encode(buf, sizeof buf, &v);
        if (k > 0)
            cdn_agent_send(CDN_FRAME_VIOLATION, 0, buf, (uint32_t) k);
        if (answer_violation() == CDN_ANSWER_DENY)
            (void) cdn_watch_answer(fd, n->id, 0, EPERM, false);
    } else {
        struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
        struct __user_cap_data_struct caps[2], none[2];
        r = (int) syscall(SYS_capget, &h, caps);
        memcpy(none, caps, sizeof none);
        none[0].effective = none[1].effective = 0;
        if (r == 0 && syscall(SYS_capset, &h, none) == 0) {
            r = cdn_watch_add(&w);
            (void) syscall(SYS_capset, &h, caps);
        } else
            r = -EPERM;
        (void) cdn_watch_answer(fd, n->id, r < 0 ? 0 : r, r < 0 ? -r : 0, false);
    }
    cdn_watch_close(&w);
}

/* One watched denial: to the host as a VIOLATION, then EPERM (or, to be killed, no answer). */
static void notification(int fd)
{
    static struct seccomp_notif_sizes sz;
    union {
        struct seccomp_notif n;
        uint8_t raw[512];
    } req;
    union {
        struct seccomp_notif_resp r;
        uint8_t raw[128];
    } resp;
    if (!sz.seccomp_notif && syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz) < 0)
        return;
    if (sz.seccomp_notif > sizeof req || sz.seccomp_notif_resp > sizeof resp)
        return;
    memset(&req, 0, sz.seccomp_notif);
    if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, &req) < 0)
        return;
    if (req.n.data.nr == __NR_inotify_add_watch) {
        guest_watch(fd, &req.n);
        return;
    }
    static struct cdn_violation_msg v;
    v = (struct cdn_violation_msg){.kind = CDN_VIOLATION_MSG_SYSCALL,
                                   .nr = (uint32_t) req.n.data.nr,
                                   .arch = req.n.data.arch,
                                   .pid = req.n.pid};
    memcpy(v.args, req.n.data.args, sizeof v.args);
    cdn_vm_read_cmdline((int) req.n.pid, v.cmd, sizeof v.cmd);
    static uint8_t buf[1024];
    int n = cdn_violation_encode(buf, sizeof buf, &v);
    if (n > 0)
        cdn_agent_send(CDN_FRAME_VIOLATION, 0, buf, (uint32_t) n);
    if (answer_violation() == CDN_ANSWER_HOLD)
        return; /* the host ends the guest; the caller never runs on */
    memset(&resp, 0, sz.seccomp_notif_resp);
    resp.r.id = req.n.id;
    resp.r.error = -EPERM;
    (void) ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, &resp);
}

void cdn_vm_poll_handle(const struct pollfd *pfd, size_t n)
{
    for (size_t i = 0; i < n && i < polled_base; i++)
        if (cdn_vm_fan_sock() >= 0 && pfd[i].fd == cdn_vm_fan_sock() && pfd[i].revents)
            cdn_vm_fan_records(pfd[i].revents);
    for (size_t i = 0; i < n && i < polled_base; i++)
        if ((pfd[i].fd == cg_events[0] || pfd[i].fd == cg_events[1]) && pfd[i].fd >= 0 &&
            (pfd[i].revents & (POLLPRI | POLLERR)))
            cdn_vm_usage_report(false);
    for (size_t i = polled_n; i-- > 0;) { /* backwards: a closed listener is swapped with the last */
        if (polled_base + i >= n)
            continue;
        const struct pollfd *p = &pfd[polled_base + i];
        if (p->fd != listeners[i])
            continue;
        if (p->revents & POLLIN)
            notification(p->fd);
        else if (p->revents & (POLLHUP | POLLERR | POLLNVAL)) { /* no process is left under it */
            (void) close(listeners[i]);
            listeners[i] = listeners[--n_listeners];
        }
    }
}
