/* cordond's egress layer (DESIGN §7): one proxy, one DNS stub and one
 * nftables table for all sandboxes; per sandbox with network != none a
 * network namespace with a veth (net/netns.h) and its allowlist. Every
 * attempt is one JSON line in <state_dir>/egress.log (rotated) and an
 * "egress" event of the sandbox; refusals count as violations. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "registry.h"
#include "record.h"
#include "core/json-util.h"
#include "shared/fd-util.h"
#include "net/audit.h"
#include "net/conntrack.h"
#include "net/dns-stub.h"
#include "net/netns.h"
#include "net/nft.h"
#include "net/proxy.h"
#include "net/listeners.h"
#include "net/udp-relay.h"
#include "tiers/tier.h"

static struct {
    bool ready;
    char error[256];                  /* why not ready */
    struct cdn_egress_listeners ls;   /* resolver, stub, proxy, relay, table (net/listeners.h) */
    struct cdn_egress_box **by_lease; /* CDN_NET_LEASES entries */
    struct cdn_audit_log log;
    /* Warm pool of prepared namespaces (lo, veth, addresses, admitted by the
     * table): a create takes one instead of making it. Each is used once. */
    struct cdn_netns *pool;
    unsigned n_pool, pool_fails;
    struct event *refill;
    struct cdn_dns_budget_cfg budget; /* cdn_daemon->cfg's, read at start */
} eg = {.log = CDN_AUDIT_LOG_INIT};

/* A namespace with its veth admitted by the table. */
static int netns_make(struct cdn_netns *ns, struct cdn_error *err)
{
    int r = cdn_netns_create(ns, true, err);
    if (r >= 0 && (r = cdn_nft_add_if(eg.ls.table, ns->host_if, err)) < 0)
        cdn_netns_destroy(ns);
    return r;
}

static void netns_drop(struct cdn_netns *ns)
{
    if (ns->lease >= 0)
        cdn_nft_del_if(eg.ls.table, ns->host_if);
    cdn_netns_destroy(ns);
}

/* One at a time, at the loop's lowest priority: only when nothing else waits. */
static void refill(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what, (void) arg;
    if (!eg.ready || cdn_daemon->stopping || eg.n_pool >= cdn_daemon->cfg.net_pool || eg.pool_fails >= 3)
        return;
    struct cdn_error err = {0};
    if (netns_make(&eg.pool[eg.n_pool], &err) < 0) {
        if (++eg.pool_fails == 3)
            fprintf(stderr, "cordond: network namespace pool stopped refilling: %s\n", err.msg);
        return;
    }
    eg.pool_fails = 0;
    eg.n_pool++;
    if (eg.n_pool < cdn_daemon->cfg.net_pool)
        event_active(eg.refill, EV_TIMEOUT, 0);
}

static struct cdn_egress_box *lookup(void *arg, uint32_t src)
{
    (void) arg;
    uint32_t off = src - CDN_NET_SUBNET;
    if (!cdn_net_in_sandbox_subnet(src) || (off & 3) != 2)
        return NULL;
    return eg.by_lease[off / 4];
}

static void on_audit(void *arg, struct cdn_egress_box *e, const struct cdn_audit *a)
{
    (void) arg;
    struct box *b = e->owner;
    uint64_t flushed;
    bool write = cdn_audit_admit(e, cdn_now_ms(), cdn_daemon->cfg.audit_rate, &flushed);
    _cleanup_json_ json_t *labels = cdn_strv_to_json_map(&b->spec.labels);
    if (flushed) {
        json_t *s = cdn_audit_suppressed_fields(flushed);
        cdn_audit_log_write(&eg.log, b->sb.id, labels, s);
        cdn_box_event(b, "egress", s);
    }
    json_t *f = cdn_audit_fields(a);
    if (f && write) {
        cdn_audit_log_write(&eg.log, b->sb.id, labels, f);
        cdn_box_event(b, "egress", json_incref(f));
    }
    /* Counted whether written or not; last, since kill mode may end the sandbox here. */
    if (cdn_audit_is_violation(a))
        cdn_box_violation(b, CDN_VK_EGRESS, f ? f : json_object());
    else
        json_decref(f);
}

static void on_flag(void *arg, struct cdn_egress_box *e, const char *what, const char *detail, json_t *fields)
{
    (void) arg;
    cdn_monitor_alert_with(e->owner, what, "medium", "dns", detail, strlen(detail), fields);
}

static const struct cdn_egress_ops ops = {
    .lookup = lookup, .audit = on_audit, .flag = on_flag, .dns_budget = &eg.budget};

/* The table's name: stable for a state directory and socket, so a restarted
 * cordond replaces the table its predecessor left, and two cordonds never
 * touch each other's. */
static void table_name(char *buf, size_t size)
{
    uint32_t h = 2166136261u;
    for (const char *p = cdn_daemon->cfg.state_dir; *p; p++)
        h = (h ^ (uint8_t) *p) * 16777619u;
    for (const char *p = cdn_daemon->cfg.socket_path; *p; p++)
        h = (h ^ (uint8_t) *p) * 16777619u;
    (void) snprintf(buf, size, "cordon_%08x", h);
}

static int start(void)
{
    char table[40];
    table_name(table, sizeof table);
    eg.budget = cdn_daemon->cfg.dns_budget;
    eg.by_lease = calloc(CDN_NET_LEASES, sizeof *eg.by_lease);
    if (!eg.by_lease) {
        (void) snprintf(eg.error, sizeof eg.error, "out of memory");
        return -ENOMEM;
    }
    struct cdn_error err = {0};
    int r = cdn_egress_listeners_start(&eg.ls, cdn_daemon->base, table, cdn_daemon->cfg.dns_upstream,
                                       "dns_upstream", &ops, &err);
    if (r < 0) {
        (void) snprintf(eg.error, sizeof eg.error, "%s", err.msg);
        return r;
    }
    char path[512];
    (void) snprintf(path, sizeof path, "%s/egress.log", cdn_daemon->cfg.state_dir);
    eg.log.max_bytes = cdn_daemon->cfg.audit_rotate;
    if (cdn_audit_log_open(&eg.log, path) < 0)
        fprintf(stderr, "cordond: audit log %s: %s (egress events still go to each sandbox's events)\n", path,
                strerror(errno));
    eg.ready = true;
    if (cdn_daemon->cfg.net_pool) {
        eg.pool = calloc(cdn_daemon->cfg.net_pool, sizeof *eg.pool);
        eg.refill = event_new(cdn_daemon->base, -1, 0, refill, NULL);
        if (eg.pool && eg.refill) {
            (void) event_priority_set(eg.refill, 2);
            event_active(eg.refill, EV_TIMEOUT, 0);
        }
    }
    return 0;
}

int cdn_egress_start(void)
{
    int r = start();
    if (r < 0)
        fprintf(stderr, "cordond: egress layer not available: %s\n", eg.error);
    return r;
}

void cdn_egress_stop(void)
{
    while (eg.n_pool)
        netns_drop(&eg.pool[--eg.n_pool]);
    if (eg.refill)
        event_free(eg.refill);
    free(eg.pool);
    cdn_egress_listeners_stop(&eg.ls);
    eg.ready = false;
    cdn_audit_log_close(&eg.log);
    free(eg.by_lease);
}

const char *cdn_egress_log_path(void)
{
    return eg.log.path;
}

static void egress_box_free(struct cdn_egress_box *e)
{
    if (!e)
        return;
    cdn_allowlist_free(&e->allow);
    cdn_pins_free(e->pins);
    free(e);
}

static void egress_box_freep(struct cdn_egress_box **e)
{
    egress_box_free(*e);
}

static int new_box(struct box *b, struct cdn_egress_box **ret, struct cdn_error *err)
{
    _cleanup_(egress_box_freep) struct cdn_egress_box *e = calloc(1, sizeof *e);
    if (!e)
        return cdn_error_set(err, ENOMEM, "out of memory");
    int r = cdn_allowlist_parse(&b->spec.net_allow, &e->allow, err);
    if (r < 0 || !(e->pins = cdn_pins_new(1024)))
        return r < 0 ? r : cdn_error_set(err, ENOMEM, "out of memory");
    *ret = TAKE_PTR(e);
    return 0;
}

static int register_box(struct box *b, struct cdn_egress_box *e, struct cdn_error *err)
{
    if (b->spec.net_mode == CDN_NET_OPEN && cdn_nft_set_open(eg.ls.table, b->netns.host_if, true, err) < 0)
        return -EIO;
    (void) snprintf(e->id, sizeof e->id, "%s", b->sb.id);
    e->sandbox_ip = b->netns.sandbox_ip;
    e->host_ip = b->netns.host_ip;
    e->mode = b->spec.net_mode;
    e->owner = b;
    eg.by_lease[b->netns.lease] = e;
    b->egress = e;
    return 0;
}

/* What the tier needs of the box's namespace: its fd, the resolver, the sandbox's address. */
static void netns_in_sandbox(struct box *b)
{
    b->sb.netns_fd = b->netns.fd;
    b->sb.resolver_ip = b->netns.host_ip;
    b->sb.sandbox_ip = b->netns.sandbox_ip;
}

int cdn_egress_attach(struct box *b, struct cdn_error *err)
{
    if (b->spec.net_mode == CDN_NET_NONE)
        return 0;
    if (!eg.ready)
        return cdn_error_field(err, EOPNOTSUPP, "network.mode",
                               "network.mode: the egress layer is not running: %s", eg.error);
    _cleanup_(egress_box_freep) struct cdn_egress_box *e = NULL;
    int r = new_box(b, &e, err);
    if (r < 0)
        return r;
    if (eg.n_pool) {
        b->netns = eg.pool[--eg.n_pool];
        event_active(eg.refill, EV_TIMEOUT, 0);
    } else if ((r = netns_make(&b->netns, err)) < 0)
        return r;
    if ((r = register_box(b, e, err)) < 0) {
        netns_drop(&b->netns);
        return r;
    }
    TAKE_PTR(e); /* b->egress now */
    netns_in_sandbox(b);
    return 0;
}

/* A source that is an adopted sandbox's address: before the pool is filled and the API is
 * up, every lease this cordond holds is an adopted one. */
static bool adopted_source(uint32_t ip, void *arg)
{
    (void) arg;
    if (!cdn_net_in_sandbox_subnet(ip) || (ip & 3) != 2)
        return false;
    struct cdn_egress_box *e = eg.by_lease[(ip - CDN_NET_SUBNET) / 4];
    return e && e->sandbox_ip == ip;
}

int cdn_egress_forget_old_flows(void)
{
    bool any = false;
    for (unsigned i = 0; eg.ready && !any && i < CDN_NET_LEASES; i++)
        any = eg.by_lease[i] != NULL;
    return any ? cdn_conntrack_forget(adopted_source, NULL) : 0;
}

int cdn_egress_adopt(struct box *b, int lease, struct cdn_error *err)
{
    if (!eg.ready)
        return cdn_error_set(err, EOPNOTSUPP, "its network needs the egress layer, which is not running: %s",
                             eg.error);
    if (lease < 0 || (unsigned) lease >= CDN_NET_LEASES)
        return cdn_error_set(err, EINVAL, "its record names no network lease");
    _cleanup_(egress_box_freep) struct cdn_egress_box *e = NULL;
    int r = new_box(b, &e, err);
    if (r < 0)
        return r;
    if ((r = cdn_netns_adopt(&b->netns, lease, b->sb.init_pid, err)) < 0 ||
        (r = cdn_nft_add_if(eg.ls.table, b->netns.host_if, err)) < 0 || (r = register_box(b, e, err)) < 0) {
        cdn_nft_del_if(eg.ls.table, b->netns.host_if);
        cdn_netns_destroy(&b->netns);
        return r;
    }
    TAKE_PTR(e); /* b->egress now */
    return 0;
}

void cdn_egress_release(struct box *b)
{
    struct cdn_egress_box *e = b->egress;
    if (!e)
        return;
    cdn_proxy_forget(eg.ls.proxy, e);
    cdn_udp_relay_forget(eg.ls.relay, e, "owner-stopped");
    eg.by_lease[b->netns.lease] = NULL;
    /* The veth stays, and so does the lease file; the lock goes with our fd
     * and the next cordond takes it (cdn_netns_adopt). */
    b->netns.fd = safe_close(b->netns.fd);
    b->netns.lease_fd = safe_close(b->netns.lease_fd);
    b->netns.lease = -1;
    egress_box_free(e);
    b->egress = NULL;
}

void cdn_egress_detach(struct box *b)
{
    struct cdn_egress_box *e = b->egress;
    if (!e)
        return;
    cdn_proxy_forget(eg.ls.proxy, e);
    cdn_udp_relay_forget(eg.ls.relay, e, "sandbox-gone");
    eg.by_lease[b->netns.lease] = NULL;
    netns_drop(&b->netns);
    b->sb.netns_fd = -EBADF;
    egress_box_free(e);
    b->egress = NULL;
}

/* Is fd the host's own network namespace (where cordond runs)? An fd that cannot be read counts
 * as the host's: nothing is added to it then. */
static bool is_host_netns(int fd)
{
    struct stat a, h;
    return fstat(fd, &a) < 0 || stat("/proc/self/ns/net", &h) < 0 ||
           (a.st_dev == h.st_dev && a.st_ino == h.st_ino);
}

/* A container created with network 'none' gets one now: its own namespace (made by its setup, so
 * owned by its user namespace, in which no process of it holds CAP_NET_ADMIN: confine/privileges.h)
 * gains eth0 and the host end a lease, as a prepared namespace has. The VM tiers booted without a
 * NIC; the process tier has no namespace of its own. */
static int give_network(struct box *b, char **resolv, struct cdn_error *err)
{
    if (!b->sb.tier->network_given)
        return cdn_error_field(
            err, EOPNOTSUPP, "mode",
            "mode: a %s sandbox created with network 'none' cannot get a network later (%s); "
            "create it with 'allowlist' and an empty list, which denies everything until "
            "changed",
            cdn_tier_to_string(b->spec.tier),
            b->spec.tier == CDN_TIER_PROCESS ? "it shares the host's network stack, filtered "
                                               "by its seccomp policy from the start"
                                             : "its guest was booted without a network device");
    if (!eg.ready)
        return cdn_error_field(err, EOPNOTSUPP, "mode", "mode: the egress layer is not running: %s",
                               eg.error);
    char path[64];
    (void) snprintf(path, sizeof path, "/proc/%d/ns/net", (int) b->sb.init_pid);
    _cleanup_close_ int nsfd = b->sb.init_pid > 0 ? open(path, O_RDONLY | O_CLOEXEC) : -EBADF;
    /* Still init (its pidfd alive after the open), and never the host's namespace. */
    if (nsfd < 0 || b->sb.init_pidfd < 0 ||
        syscall(SYS_pidfd_send_signal, b->sb.init_pidfd, 0, NULL, 0) < 0 || is_host_netns(nsfd))
        return cdn_error_set(err, ESRCH, "the sandbox's network namespace: its init is gone");
    _cleanup_(egress_box_freep) struct cdn_egress_box *e = NULL;
    int r = new_box(b, &e, err);
    if (r < 0)
        return r;
    if ((r = cdn_netns_join(&b->netns, nsfd, err)) < 0)
        return r;
    if ((r = cdn_nft_add_if(eg.ls.table, b->netns.host_if, err)) < 0 || (r = register_box(b, e, err)) < 0) {
        netns_drop(&b->netns);
        return r;
    }
    TAKE_PTR(e); /* b->egress now */
    netns_in_sandbox(b);
    struct cdn_error why = {0};
    *resolv = b->sb.tier->network_given(&b->sb, &why) < 0 ? strdup(why.msg) : NULL;
    return 0;
}

int cdn_egress_set(struct box *b, enum cdn_net_mode mode, struct cdn_strv *allow, struct cdn_error *err)
{
    if (mode == CDN_NET_NONE)
        return cdn_error_field(err, EINVAL, "mode",
                               "mode: 'none' cannot be set at run time; use 'allowlist' with an empty list");
    _cleanup_(cdn_allowlist_free) struct cdn_allowlist l = {0};
    int r = cdn_allowlist_parse(allow, &l, err);
    if (r < 0)
        return r;
    bool given = !b->egress;
    _cleanup_free_ char *resolv = NULL; /* why its resolv.conf was left as it was */
    if (given) {
        /* Made with an empty list (register_box reads the mode): the new one is set below. */
        enum cdn_net_mode was = b->spec.net_mode;
        struct cdn_strv none = b->spec.net_allow;
        b->spec.net_allow = (struct cdn_strv){0};
        b->spec.net_mode = CDN_NET_ALLOWLIST;
        r = give_network(b, &resolv, err);
        b->spec.net_allow = none;
        if (r < 0) {
            b->spec.net_mode = was;
            return r;
        }
    }
    struct cdn_egress_box *e = b->egress;
    /* UDP opens before the list changes only if the new mode is open; it
     * closes (and its flows end) right after, if the new mode is not. */
    if (mode == CDN_NET_OPEN && e->mode != CDN_NET_OPEN &&
        (r = cdn_nft_set_open(eg.ls.table, b->netns.host_if, true, err)) < 0) {
        if (given) /* it has a network now (the empty list): a restarted cordond must know its lease */
            (void) cdn_record_write(b);
        return r;
    }
    bool closing_udp = mode != CDN_NET_OPEN && e->mode == CDN_NET_OPEN;
    /* One step of the loop: the new list takes effect and the connections it
     * forbids are cut before anything else runs. */
    cdn_allowlist_free(&e->allow);
    e->allow = l;
    l = (struct cdn_allowlist){0}; /* e's now */
    e->mode = mode;
    e->generation++;
    cdn_strv_free(&b->spec.net_allow);
    b->spec.net_allow = *allow;
    *allow = (struct cdn_strv){0};
    b->spec.net_mode = mode;
    cdn_proxy_recheck(eg.ls.proxy, e);
    if (closing_udp) {
        (void) cdn_nft_set_open(eg.ls.table, b->netns.host_if, false, NULL);
        cdn_udp_relay_forget(eg.ls.relay, e, "policy-change");
    }
    (void) cdn_record_write(b); /* the new policy is what a restarted cordond restores */
    cdn_box_event(b, "network",
                  json_pack("{s:s, s:I, s:b, s:s*}", "mode", cdn_net_mode_to_string(mode), "generation",
                            (json_int_t) e->generation, "given", given, "resolv_conf", resolv));
    return 0;
}
