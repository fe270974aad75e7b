/* cordon-init as the first process of a VM guest (the microvm and vm tiers):
 * no host set up its world, so it does: the kernel's filesystems, the
 * modules from the initramfs, and the agent's virtio-serial port, which
 * becomes fd 3 — from there on it is the same agent as in a container. */
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
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "init.h"

/* <linux/random.h>, which the musl build of init has no copy of. */
#ifndef RNDADDENTROPY
#define RNDADDENTROPY _IOW('R', 0x03, int[2])
#endif
#ifndef RNDRESEEDCRNG
#define RNDRESEEDCRNG _IO('R', 0x07)
#endif

static bool vm_guest_mode;

/* In a container the host hands init fd 3; in a VM guest nothing does. */
bool vm_guest(void)
{
    return vm_guest_mode = getpid() == 1 && fcntl(AGENT_FD, F_GETFD) < 0;
}

static void load_modules(void)
{
    /* 0.ko, 1.ko, …: in the order the initramfs was built with (vmprep.c). */
    for (int i = 0; i < 64; i++) {
        char p[64];
        (void) snprintf(p, sizeof p, "/lib/modules/%d.ko", i);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            break;
        (void) syscall(SYS_finit_module, fd, "", 0);
        (void) close(fd);
    }
}

/* The port the host named cordon.agent; the first port when names are not there (yet). */
static int open_port(void)
{
    for (int tries = 0; tries < 400; tries++) { /* devices appear as their drivers probe: up to 4 s */
        DIR *d = opendir("/sys/class/virtio-ports");
        struct dirent *de;
        char found[300] = "";
        while (d && (de = readdir(d))) {
            char p[300], name[64] = "";
            if (de->d_name[0] == '.')
                continue;
            (void) snprintf(p, sizeof p, "/sys/class/virtio-ports/%s/name", de->d_name);
            int fd = open(p, O_RDONLY | O_CLOEXEC);
            ssize_t n = fd >= 0 ? read(fd, name, sizeof name - 1) : -1;
            if (fd >= 0)
                (void) close(fd);
            if (n > 0 && strncmp(name, "cordon.agent", 12) == 0)
                (void) snprintf(found, sizeof found, "/dev/%s", de->d_name);
        }
        if (d)
            closedir(d);
        if (found[0]) {
            int fd = open(found, O_RDWR | O_CLOEXEC | O_NOCTTY);
            if (fd >= 0)
                return fd;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
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
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, text, strlen(text));
    int r = n == (ssize_t) strlen(text) ? 0 : -EIO;
    (void) close(fd);
    return r;
}

/* eth0 as the container tier's eth0 is: the sandbox's address on its /30, the host end as the
 * default route and the resolver, no IPv6. */
static int vm_network(const struct cdn_identity *id)
{
    (void) write_file("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1\n");
    (void) write_file("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1\n");
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
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
    if (r == 0 && ioctl(s, SIOCADDRT, &rt) < 0)
        r = -errno;
    (void) close(s);
    if (r < 0)
        return r;
    char conf[64];
    (void) snprintf(conf, sizeof conf, "nameserver %u.%u.%u.%u\n", id->resolver >> 24,
                    (id->resolver >> 16) & 255, (id->resolver >> 8) & 255, id->resolver & 255);
    return write_file("/etc/resolv.conf", conf);
}

int vm_setup(void)
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
    load_modules();
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s >= 0) {
        (void) link_up(s, "lo");
        (void) close(s);
    }
    int port = open_port();
    if (port < 0)
        return -1;
    if (port != AGENT_FD && (dup2(port, AGENT_FD) < 0 || close(port) < 0))
        return -1;
    return 0;
}

void vm_poweroff(void)
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
        n += id->paths[i].kind != CDN_PATH_PROTECT;
    if (!n)
        return 0;
    if (make_path(share, true) < 0 ||
        mount("binds", share, "9p", MS_NOSUID | MS_NODEV, "trans=virtio,version=9p2000.L,msize=262144") < 0)
        return -errno;
    for (unsigned i = 0, b = 0; i < id->n_paths && r == 0; i++) {
        if (id->paths[i].kind == CDN_PATH_PROTECT)
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

int vm_identity(const struct cdn_identity *id)
{
    if (!vm_guest_mode)
        return -EPERM; /* a container's init has no business with these */
    struct timespec ts = {.tv_sec = (time_t) (id->time_ns / 1000000000u),
                          .tv_nsec = (long) (id->time_ns % 1000000000u)};
    if (clock_settime(CLOCK_REALTIME, &ts) < 0)
        return -errno;
    /* Mixed into the pool (credited), then the CRNG reseeded from it at once:
     * without the reseed, siblings from one snapshot would keep producing the
     * same bytes until the kernel's next scheduled reseed. */
    struct {
        int entropy_count, buf_size; /* struct rand_pool_info */
        uint8_t bytes[CDN_IDENTITY_SEED];
    } e = {.entropy_count = CDN_IDENTITY_SEED * 8, .buf_size = CDN_IDENTITY_SEED};
    memcpy(e.bytes, id->seed, CDN_IDENTITY_SEED);
    int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ioctl(fd, RNDADDENTROPY, &e) < 0 || ioctl(fd, RNDRESEEDCRNG) < 0) {
        int r = -errno;
        if (fd >= 0)
            (void) close(fd);
        return r;
    }
    (void) close(fd);
    char hex[34];
    for (int i = 0; i < 16; i++)
        (void) snprintf(hex + 2 * i, 3, "%02x", id->machine_id[i]);
    hex[32] = '\n';
    hex[33] = 0;
    (void) mkdir("/etc", 0755);
    fd = open("/etc/machine-id", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
    if (fd < 0 || write(fd, hex, 33) != 33) {
        int r = -errno;
        if (fd >= 0)
            (void) close(fd);
        return r;
    }
    (void) close(fd);
    if (sethostname(id->hostname, strlen(id->hostname)) < 0)
        return -errno;
    if (id->ip) {
        int r = vm_network(id);
        if (r < 0)
            return r;
    }
    vm_mount_image(); /* before the binds, which may lie beneath /usr */
    int r = vm_binds(id);
    if (r < 0)
        return r;
    /* The workdir, as a container's overlay has it: made, with its parents. */
    char dir[sizeof id->workdir];
    (void) snprintf(dir, sizeof dir, "%s", id->workdir);
    for (char *s = dir + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return -errno;
            if (!(*s = c))
                break;
        }
    }
    return 0;
}

void vm_mount_image(void)
{
    static bool done;
    if (!vm_guest_mode || done)
        return;
    done = true;
    /* The host image's /usr (9p, read-only); without the share the guest has busybox only. */
    (void) mount("usr", "/usr", "9p", MS_RDONLY | MS_NOSUID | MS_NODEV,
                 "trans=virtio,version=9p2000.L,cache=loose,msize=262144");
}
