/*
 * Outbound probes: is there any way off the box? Interfaces and routes are only inspected (getifaddrs,
 * /proc/net/route), never used: no packet is ever sent to an address other than 127.0.0.1. The harness
 * listens on the host's loopback and on a host abstract unix socket; reaching either means the network
 * namespace leaks.
 */
#include "probe.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#define CONNECT_TIMEOUT_MS 2000

/* contained iff no interface other than loopback carries an IPv4 or IPv6 address */
PROBE_FN(net_interfaces)
{
    struct ifaddrs *ifa, *i;
    unsigned lo = 0;

    if (getifaddrs(&ifa) < 0) {
        probe_untested(res, probe_errname(errno));
        return;
    }
    for (i = ifa; i; i = i->ifa_next) {
        if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
            continue;
        if (i->ifa_flags & IFF_LOOPBACK)
            lo++;
        else
            probe_escaped(res, "%s:%s", i->ifa_name, i->ifa_addr->sa_family == AF_INET ? "inet" : "inet6");
    }
    freeifaddrs(ifa);
    if (res->verdict == PROBE_CONTAINED)
        probe_contained(res, "only-loopback(%u-addrs)", lo);
}

#define RTF_UP_FLAG     0x0001
#define RTF_REJECT_FLAG 0x0200

/* "Iface Destination Gateway Flags RefCnt Use Metric Mask ...": a usable 0.0.0.0/0 entry is a default route
 */
static void scan_ipv4_routes(struct probe_result *res, FILE *f)
{
    char line[512], ifname[64];
    unsigned long dest, gw, mask;
    unsigned flags;

    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "%63s %lx %lx %x %*d %*d %*d %lx", ifname, &dest, &gw, &flags, &mask) == 5 &&
            dest == 0 && mask == 0 && (flags & RTF_UP_FLAG))
            probe_escaped(res, "ipv4-default-via-%s", ifname);
}

/* "dest plen src plen next-hop metric refcnt use flags iface": ::/0, up and not a reject route */
static void scan_ipv6_routes(struct probe_result *res, FILE *f)
{
    char line[512], dest[33], ifname[64];
    unsigned plen, flags;

    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "%32s %x %*s %*x %*s %*x %*x %*x %x %63s", dest, &plen, &flags, ifname) == 4 &&
            plen == 0 && strspn(dest, "0") == 32 && (flags & RTF_UP_FLAG) && !(flags & RTF_REJECT_FLAG))
            probe_escaped(res, "ipv6-default-via-%s", ifname);
}

/*
 * contained iff /proc/net/route has no default route and /proc/net/ipv6_route (when present) none either. An
 * unreadable IPv4 table fails closed; a missing IPv6 table just means no IPv6.
 */
PROBE_FN(net_default_route)
{
    FILE *f = fopen("/proc/net/route", "re");

    if (!f) {
        probe_untested(res, "/proc/net/route-unreadable");
        return;
    }
    scan_ipv4_routes(res, f);
    (void) fclose(f);
    f = fopen("/proc/net/ipv6_route", "re");
    if (f) {
        scan_ipv6_routes(res, f);
        (void) fclose(f);
    }
    if (res->verdict == PROBE_CONTAINED)
        probe_contained(res, "no-default-route");
}

/* Non-blocking connect with a timeout. Returns 0 when connected, else an errno value. */
static int connect_timeout(int fd, const struct sockaddr *sa, socklen_t len)
{
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t elen = sizeof(err);

    if (connect(fd, sa, len) == 0)
        return 0;
    if (errno != EINPROGRESS)
        return errno;
    if (poll(&pfd, 1, CONNECT_TIMEOUT_MS) <= 0)
        return ETIMEDOUT;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
        return errno;
    return err;
}

/* Connection attempts that fail for any of these reasons reached nothing. */
#define UNREACHED ECONNREFUSED, ENETUNREACH, EHOSTUNREACH, ETIMEDOUT, EPERM, EACCES, ENOENT, EAFNOSUPPORT

/* contained iff connecting to 127.0.0.1:$CORDON_PROBE_HOST_PORT fails (refused, unreachable, timeout, denied)
 */
PROBE_FN(net_host_loopback_tcp)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    _cleanup_close_ int fd = -EBADF;
    long port = ctx->host_port ? strtol(ctx->host_port, NULL, 10) : 0;
    int err;

    if (port <= 0 || port > 65535) {
        probe_untested(res, "CORDON_PROBE_HOST_PORT-unset");
        return;
    }
    sa.sin_port = htons((uint16_t) port);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        PROBE_JUDGE(res, "socket", -1, errno, UNREACHED);
        return;
    }
    err = connect_timeout(fd, (const struct sockaddr *) &sa, sizeof(sa));
    PROBE_JUDGE(res, "127.0.0.1", err ? -1 : 0, err, UNREACHED);
}

/* Abstract unix names are scoped by network namespace. contained iff connecting to @$CORDON_PROBE_ABSTRACT
 * fails */
PROBE_FN(net_host_abstract_unix)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    _cleanup_close_ int fd = -EBADF;
    size_t n = ctx->abstract_name ? strlen(ctx->abstract_name) : 0;
    int err;

    if (n == 0 || n >= sizeof(sa.sun_path) - 1) {
        probe_untested(res, "CORDON_PROBE_ABSTRACT-unset");
        return;
    }
    memcpy(sa.sun_path + 1, ctx->abstract_name, n);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        PROBE_JUDGE(res, "socket", -1, errno, UNREACHED);
        return;
    }
    err = connect_timeout(fd, (const struct sockaddr *) &sa,
                          (socklen_t) (offsetof(struct sockaddr_un, sun_path) + 1 + n));
    PROBE_JUDGE(res, "abstract", err ? -1 : 0, err, UNREACHED);
}

static void judge_unix_path(struct probe_result *res, const char *path, unsigned *absent)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    _cleanup_close_ int fd = -EBADF;
    int err;

    if (!path || !*path || strlen(path) >= sizeof(sa.sun_path))
        return;
    memcpy(sa.sun_path, path, strlen(path));
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    err = connect_timeout(fd, (const struct sockaddr *) &sa, sizeof(sa));
    if (err == 0)
        probe_escaped(res, "%s:connected", path);
    else if (PROBE_ERRNO_IN(err, ENOENT, ENOTDIR))
        (*absent)++;
    else
        probe_contained(res, "%s:%s", path, probe_errname(err));
}

/*
 * Well-known control sockets of container engines, systemd and D-Bus, and $CORDON_SOCKET (cordond itself).
 * Connected and closed, nothing sent. contained iff none connects.
 */
PROBE_FN(net_host_control_sockets)
{
    static const char *const paths[] = {
        "/var/run/docker.sock",         "/run/docker.sock",        "/run/containerd/containerd.sock",
        "/run/crio/crio.sock",          "/run/podman/podman.sock", "/run/cordon/cordond.sock",
        "/var/run/cordon/cordond.sock", "/run/systemd/private",    "/run/dbus/system_bus_socket",
    };
    unsigned absent = 0;

    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        judge_unix_path(res, paths[i], &absent);
    judge_unix_path(res, getenv("CORDON_SOCKET"), &absent);
    if (res->verdict == PROBE_CONTAINED)
        probe_contained(res, "%u-absent", absent);
}

const struct probe_def probe_defs_net[] = {
    PROBE_ENTRY("outbound", net_interfaces),           PROBE_ENTRY("outbound", net_default_route),
    PROBE_ENTRY("outbound", net_host_loopback_tcp),    PROBE_ENTRY("outbound", net_host_abstract_unix),
    PROBE_ENTRY("outbound", net_host_control_sockets), {0},
};
