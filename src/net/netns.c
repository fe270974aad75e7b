/* Network namespaces and veth pairs over rtnetlink (libmnl). See netns.h. */
#include "net/netns.h"
#include "shared/fd-util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <libmnl/libmnl.h>
#include <net/if.h> /* before the linux/ headers: they step aside for it */
#include <linux/if_link.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* One request, one ACK. */
static int nl_talk(struct mnl_socket *nl, struct nlmsghdr *nlh)
{
    static uint32_t seq;
    nlh->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
    nlh->nlmsg_seq = ++seq;
    if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
        return -errno;
    char buf[8192];
    ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof buf);
    if (n < 0)
        return -errno;
    int r = mnl_cb_run(buf, (size_t) n, seq, mnl_socket_get_portid(nl), NULL, NULL);
    return r < 0 ? -errno : 0;
}

static struct mnl_socket *nl_open(void)
{
    struct mnl_socket *nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
    if (nl && mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
        int e = errno;
        mnl_socket_close(nl);
        errno = e;
        return NULL;
    }
    return nl;
}

/* Link ifindex up, into master (a bridge) when master is not 0. */
static int set_master_up(struct mnl_socket *nl, unsigned ifindex, unsigned master)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = RTM_NEWLINK;
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof *ifi);
    ifi->ifi_family = AF_UNSPEC;
    ifi->ifi_index = (int) ifindex;
    ifi->ifi_flags = ifi->ifi_change = IFF_UP;
    if (master)
        mnl_attr_put_u32(nlh, IFLA_MASTER, master);
    return nl_talk(nl, nlh);
}

static int link_up(struct mnl_socket *nl, unsigned ifindex)
{
    return set_master_up(nl, ifindex, 0);
}

static int add_addr(struct mnl_socket *nl, unsigned ifindex, uint32_t ip, unsigned prefix)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = RTM_NEWADDR;
    nlh->nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
    struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof *ifa);
    ifa->ifa_family = AF_INET;
    ifa->ifa_prefixlen = (unsigned char) prefix;
    ifa->ifa_scope = RT_SCOPE_UNIVERSE;
    ifa->ifa_index = ifindex;
    uint32_t be = htonl(ip);
    mnl_attr_put_u32(nlh, IFA_LOCAL, be);
    mnl_attr_put_u32(nlh, IFA_ADDRESS, be);
    return nl_talk(nl, nlh);
}

static int add_default_route(struct mnl_socket *nl, unsigned ifindex, uint32_t gw)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = RTM_NEWROUTE;
    nlh->nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
    struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof *rtm);
    rtm->rtm_family = AF_INET;
    rtm->rtm_table = RT_TABLE_MAIN;
    rtm->rtm_protocol = RTPROT_BOOT;
    rtm->rtm_scope = RT_SCOPE_UNIVERSE;
    rtm->rtm_type = RTN_UNICAST;
    mnl_attr_put_u32(nlh, RTA_GATEWAY, htonl(gw));
    mnl_attr_put_u32(nlh, RTA_OIF, ifindex);
    return nl_talk(nl, nlh);
}

/* eth0 here, its peer `peer` in the namespace peer_ns_fd. */
/* An RTM_NEWLINK request that creates the link `name` (its IFLA_LINKINFO follows). */
static struct nlmsghdr *new_link_msg(char *buf, const char *name)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = RTM_NEWLINK;
    nlh->nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof *ifi);
    ifi->ifi_family = AF_UNSPEC;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
    return nlh;
}

static int add_veth(struct mnl_socket *nl, const char *name, const char *peer, int peer_ns_fd)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = new_link_msg(buf, name);
    struct nlattr *info = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
    mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "veth");
    struct nlattr *data = mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
    struct nlattr *p = mnl_attr_nest_start(nlh, VETH_INFO_PEER);
    /* The peer's attributes follow an ifinfomsg of their own. */
    struct ifinfomsg *pi = (struct ifinfomsg *) ((char *) nlh + nlh->nlmsg_len);
    memset(pi, 0, MNL_ALIGN(sizeof *pi));
    nlh->nlmsg_len += MNL_ALIGN(sizeof *pi);
    pi->ifi_family = AF_UNSPEC;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, peer);
    mnl_attr_put_u32(nlh, IFLA_NET_NS_FD, (uint32_t) peer_ns_fd);
    mnl_attr_nest_end(nlh, p);
    mnl_attr_nest_end(nlh, data);
    mnl_attr_nest_end(nlh, info);
    return nl_talk(nl, nlh);
}

static int del_link(struct mnl_socket *nl, const char *name)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = RTM_DELLINK;
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof *ifi);
    ifi->ifi_family = AF_UNSPEC;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
    return nl_talk(nl, nlh);
}

static int new_bridge(struct mnl_socket *nl, const char *name)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = new_link_msg(buf, name);
    struct nlattr *info = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
    mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "bridge");
    mnl_attr_nest_end(nlh, info);
    return nl_talk(nl, nlh);
}

static int del_addr(struct mnl_socket *nl, unsigned ifindex, uint32_t ip, unsigned prefix)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = RTM_DELADDR;
    struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof *ifa);
    ifa->ifa_family = AF_INET;
    ifa->ifa_prefixlen = (unsigned char) prefix;
    ifa->ifa_index = ifindex;
    mnl_attr_put_u32(nlh, IFA_LOCAL, htonl(ip));
    return nl_talk(nl, nlh);
}

int cdn_netns_tap_bridge(uint32_t sandbox_ip)
{
    struct mnl_socket *nl = nl_open();
    if (!nl)
        return -errno;
    int tap = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    struct ifreq ifr = {.ifr_flags = IFF_TAP | IFF_NO_PI};
    (void) snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "tap0");
    int r = tap < 0 || ioctl(tap, TUNSETIFF, &ifr) < 0 ? -errno : 0;
    unsigned eth = if_nametoindex("eth0"), tapi = if_nametoindex("tap0"), br = 0;
    if (r == 0 && (!eth || !tapi))
        r = -ENODEV;
    /* A guest's again (a rollback's new QEMU): the bridge is there, with eth0 on it; the new tap joins. */
    bool again = if_nametoindex("br0") != 0;
    if (r == 0 && !again && (r = new_bridge(nl, "br0")) == 0 && !(br = if_nametoindex("br0")))
        r = -ENODEV;
    if (again)
        br = if_nametoindex("br0");
    /* The address goes first (and the default route with it): the guest answers for it now. Gone
     * already when the bridge was there (an earlier attempt's), eth0 joins it all the same. */
    if (r == 0 && !again)
        r = del_addr(nl, eth, sandbox_ip, 30);
    if (r == 0)
        r = set_master_up(nl, eth, br);
    if (r == 0 && (r = set_master_up(nl, tapi, br)) == 0)
        r = link_up(nl, br);
    mnl_socket_close(nl);
    if (r < 0) {
        (void) safe_close(tap);
        return r;
    }
    return tap;
}

/* IPv6 off (no link-local address, no router solicitations); a kernel
 * without IPv6 has nothing to turn off. */
static int ipv6_off(const char *conf)
{
    char path[128];
    (void) snprintf(path, sizeof path, "/proc/sys/net/ipv6/conf/%s/disable_ipv6", conf);
    int r = cdn_write_file_at(AT_FDCWD, path, "1");
    return r == -ENOENT ? 0 : r;
}

static int host_ns_fd(void)
{
    static int fd = -1;
    if (fd < 0)
        fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    return fd;
}

static struct mnl_socket *host_nl(void)
{
    static struct mnl_socket *nl;
    if (!nl)
        nl = nl_open();
    return nl;
}

static void lease_fill(struct cdn_netns *ns, unsigned lease)
{
    ns->lease = (int) lease;
    uint32_t base = CDN_NET_SUBNET + 4 * lease;
    ns->host_ip = base + 1;
    ns->sandbox_ip = base + 2;
    (void) snprintf(ns->host_if, sizeof ns->host_if, CDN_NET_IF_PREFIX "%u", lease);
}

int cdn_netns_adopt(struct cdn_netns *ns, int lease, pid_t pid, struct cdn_error *err)
{
    *ns = (struct cdn_netns) CDN_NETNS_INIT;
    char path[64];
    (void) snprintf(path, sizeof path, "%s/%d", CDN_NET_LEASE_DIR, lease);
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        if (fd >= 0)
            (void) close(fd);
        return cdn_error_set(err, e, "network lease %d: %s", lease,
                             e == EWOULDBLOCK ? "held by another" : strerror(e));
    }
    ns->lease_fd = fd;
    lease_fill(ns, (unsigned) lease);
    (void) snprintf(path, sizeof path, "/proc/%d/ns/net", (int) pid);
    ns->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (ns->fd < 0 || !if_nametoindex(ns->host_if)) {
        int e = errno;
        /* Not ours to delete if the interface is missing: nothing to clean. */
        ns->lease_fd = safe_close(ns->lease_fd);
        ns->fd = safe_close(ns->fd);
        ns->lease = -1;
        return cdn_error_set(err, e, "network namespace of init %d (%s): %s", (int) pid, ns->host_if,
                             strerror(e));
    }
    return 0;
}

static int lease_take(struct cdn_netns *ns, struct cdn_error *err)
{
    if (mkdir(CDN_NET_LEASE_DIR, 0700) < 0 && errno != EEXIST)
        return cdn_error_set(err, errno, "mkdir %s: %m", CDN_NET_LEASE_DIR);
    _cleanup_close_ int dfd = open(CDN_NET_LEASE_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return cdn_error_set(err, errno, "open %s: %m", CDN_NET_LEASE_DIR);
    /* Start where the last search of this process ended: a lease just freed
     * is the last to be reused (its host end may still be going away). */
    static unsigned next;
    if (!next) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        next = (unsigned) (t.tv_nsec ^ getpid()) % CDN_NET_LEASES;
    }
    for (unsigned i = 0; i < CDN_NET_LEASES; i++) {
        unsigned lease = (next + i) % CDN_NET_LEASES;
        char name[16];
        (void) snprintf(name, sizeof name, "%u", lease);
        int fd = openat(dfd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
            return cdn_error_set(err, errno, "open lease %s/%s: %m", CDN_NET_LEASE_DIR, name);
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            next = lease + 1;
            ns->lease_fd = fd;
            lease_fill(ns, lease);
            return 0;
        }
        (void) close(fd);
    }
    return cdn_error_set(err, EBUSY, "all %u sandbox network leases are in use", CDN_NET_LEASES);
}

/* Inside the new namespace: lo, then eth0 with its peer in the host's. */
static int setup_inside(struct cdn_netns *ns, bool veth, struct cdn_error *err)
{
    struct mnl_socket *nl = nl_open();
    if (!nl)
        return cdn_error_set(err, errno, "netlink socket in the sandbox namespace: %m");
    int r = link_up(nl, 1); /* lo is always ifindex 1 in a new namespace */
    if (r < 0) {
        cdn_error_set(err, r, "bring lo up: %s", strerror(-r));
        goto out;
    }
    if ((r = ipv6_off("all")) < 0 || (r = ipv6_off("default")) < 0) {
        cdn_error_set(err, r, "turn IPv6 off in the sandbox namespace: %s", strerror(-r));
        goto out;
    }
    if (!veth)
        goto out;
    if ((r = add_veth(nl, "eth0", ns->host_if, host_ns_fd())) < 0) {
        cdn_error_set(err, r, "create veth eth0/%s: %s", ns->host_if, strerror(-r));
        goto out;
    }
    unsigned idx = if_nametoindex("eth0");
    if (!idx || (r = add_addr(nl, idx, ns->sandbox_ip, 30)) < 0 || (r = link_up(nl, idx)) < 0 ||
        (r = add_default_route(nl, idx, ns->host_ip)) < 0) {
        r = r < 0 ? r : -errno;
        cdn_error_set(err, r, "configure eth0 in the sandbox namespace: %s", strerror(-r));
    }
out:
    mnl_socket_close(nl);
    return r;
}

/* A new namespace (join < 0), or the one of join (an fd of it). */
static int make(struct cdn_netns *ns, bool veth, int join, struct cdn_error *err)
{
    *ns = (struct cdn_netns) CDN_NETNS_INIT;
    int hostfd = host_ns_fd();
    if (hostfd < 0)
        return cdn_error_set(err, errno, "open the host's network namespace: %m");
    int r;
    if (veth && (r = lease_take(ns, err)) < 0)
        return r;
    if (join >= 0 ? setns(join, CLONE_NEWNET) < 0 : unshare(CLONE_NEWNET) < 0) {
        r = cdn_error_set(err, errno, "%s network namespace: %m",
                          join >= 0 ? "enter the sandbox's" : "unshare");
        goto fail;
    }
    ns->fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    r = ns->fd < 0 ? cdn_error_set(err, errno, "open the new network namespace: %m")
                   : setup_inside(ns, veth, err);
    if (setns(hostfd, CLONE_NEWNET) < 0) /* cannot happen for root; never stay in the wrong one */
        abort();
    if (r < 0 || !veth)
        goto done;
    struct mnl_socket *nl = host_nl();
    unsigned idx = if_nametoindex(ns->host_if);
    char conf[32];
    (void) snprintf(conf, sizeof conf, "%s", ns->host_if);
    if (!nl || !idx || (r = ipv6_off(conf)) < 0 || (r = add_addr(nl, idx, ns->host_ip, 30)) < 0 ||
        (r = link_up(nl, idx)) < 0) {
        r = r < 0 ? r : -errno;
        cdn_error_set(err, r, "configure %s on the host: %s", ns->host_if, strerror(-r));
    }
done:
    if (r >= 0)
        return 0;
fail:
    cdn_netns_destroy(ns);
    return r;
}

int cdn_netns_create(struct cdn_netns *ns, bool veth, struct cdn_error *err)
{
    return make(ns, veth, -EBADF, err);
}

int cdn_netns_join(struct cdn_netns *ns, int nsfd, struct cdn_error *err)
{
    if (nsfd < 0)
        return cdn_error_set(err, EBADF, "no network namespace to join");
    return make(ns, true, nsfd, err);
}

void cdn_netns_destroy(struct cdn_netns *ns)
{
    if (ns->lease >= 0 && host_nl())
        (void) del_link(host_nl(), ns->host_if); /* both ends go, now rather than with the namespace */
    ns->fd = safe_close(ns->fd);
    ns->lease_fd = safe_close(ns->lease_fd);
    ns->lease = -1;
}

int cdn_netns_run(const struct cdn_netns *ns, int (*fn)(void *arg), void *arg)
{
    int hostfd = host_ns_fd();
    if (hostfd < 0 || ns->fd < 0)
        return -EBADF;
    if (setns(ns->fd, CLONE_NEWNET) < 0)
        return -errno;
    int r = fn(arg);
    if (setns(hostfd, CLONE_NEWNET) < 0)
        abort();
    return r;
}

/* The host's addresses, read at most once a second: getifaddrs() dumps every
 * link, and each sandbox adds one. The sandboxes' own host ends (the sandbox
 * network) are refused separately and left out. */
bool cdn_host_addr_is_local(uint32_t addr)
{
    static uint32_t *addrs;
    static size_t n, cap;
    static struct timespec read_at;
    static bool valid;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!valid || now.tv_sec != read_at.tv_sec) {
        struct ifaddrs *ifa;
        if (getifaddrs(&ifa) < 0)
            return true; /* cannot tell: fail closed */
        n = 0;
        valid = true;
        for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
                continue;
            uint32_t a = ntohl(((struct sockaddr_in *) i->ifa_addr)->sin_addr.s_addr);
            if (cdn_net_in_sandbox_subnet(a))
                continue;
            if (n == cap) {
                uint32_t *p = realloc(addrs, (cap ? cap * 2 : 16) * sizeof *p);
                if (!p) {
                    valid = false;
                    break;
                }
                addrs = p;
                cap = cap ? cap * 2 : 16;
            }
            addrs[n++] = a;
        }
        freeifaddrs(ifa);
        read_at = now;
        if (!valid)
            return true;
    }
    for (size_t i = 0; i < n; i++)
        if (addrs[i] == addr)
            return true;
    return false;
}
