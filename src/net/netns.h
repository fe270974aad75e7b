/* Per-sandbox network namespaces for the egress layer (DESIGN §7): `lo` and
 * one veth pair, IPv4 only. The namespace is made by the host process (root,
 * initial user namespace), so the sandbox's own root has no capability over
 * it: it cannot change addresses, routes or filters inside.
 *
 * Addresses: each sandbox leases one /30 of CDN_NET_SUBNET host-wide (a lock
 * file per /30 under CDN_NET_LEASE_DIR, held while the namespace lives):
 * .1 is the host's end (gateway and resolver), .2 the sandbox's eth0. The
 * host end is called cordon<lease>: every name with that prefix is a sandbox's (net/nft.h). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/error.h"

#define CDN_NET_SUBNET      0xC6120000u /* 198.18.0.0/15 (RFC 2544, benchmarking): rarely routed anywhere */
#define CDN_NET_SUBNET_BITS 15
#define CDN_NET_LEASES      (1u << (32 - CDN_NET_SUBNET_BITS - 2))
#define CDN_NET_LEASE_DIR   "/run/cordon-net"
#define CDN_NET_IF_PREFIX   "cordon" /* host ends of sandbox veths; nothing else may use it */

/* Is ip (host byte order) in the sandbox network? */
static inline bool cdn_net_in_sandbox_subnet(uint32_t ip)
{
    return (ip >> (32 - CDN_NET_SUBNET_BITS)) == (CDN_NET_SUBNET >> (32 - CDN_NET_SUBNET_BITS));
}

struct cdn_netns {
    int fd;                       /* the namespace; -1 when none */
    int lease;                    /* index of the /30, -1 when none */
    int lease_fd;                 /* its lock */
    uint32_t host_ip, sandbox_ip; /* host byte order */
    char host_if[16];
};

#define CDN_NETNS_INIT                                                                                       \
    {                                                                                                        \
        .fd = -1, .lease = -1, .lease_fd = -1                                                                \
    }

/* Make a namespace with lo up and, with veth, eth0 ↔ host_if configured
 * (addresses, routes, IPv6 off on both ends). Runs in the caller's thread:
 * it enters the new namespace for a moment and comes back. */
int cdn_netns_create(struct cdn_netns *ns, bool veth, struct cdn_error *err);
/* The same in an existing namespace (nsfd, e.g. a running sandbox's that had no network): a
 * lease, eth0 ↔ host_if, lo up, IPv6 off. Only where nothing of the sandbox holds CAP_NET_ADMIN
 * over that namespace (a container's commands and init hold none), as it may be the sandbox's. */
int cdn_netns_join(struct cdn_netns *ns, int nsfd, struct cdn_error *err);
/* After a restart of the owner: take lease back and open the namespace of
 * pid (a process inside it, e.g. the sandbox's init). Its flows' conntrack
 * entries still lead to the last owner's listeners (net/conntrack.h). */
int cdn_netns_adopt(struct cdn_netns *ns, int lease, pid_t pid, struct cdn_error *err);
/* Delete the veth pair (synchronously), close the namespace, free the lease. */
void cdn_netns_destroy(struct cdn_netns *ns);
/* Run fn in ns's namespace (setns there and back); returns fn's value, or -errno of setns. */
int cdn_netns_run(const struct cdn_netns *ns, int (*fn)(void *arg), void *arg);
/* For a VM guest, inside a namespace made with veth (call it through
 * cdn_netns_run): eth0 loses its address (sandbox_ip, which the guest takes)
 * and joins a new bridge br0 with a new tap device, tap0, whose fd is
 * returned (-errno on failure). The guest's frames then leave through eth0
 * as a container's packets would, to the same host end and its rules. */
int cdn_netns_tap_bridge(uint32_t sandbox_ip);
/* Is addr (host byte order) one of this host's own addresses (any interface)? */
bool cdn_host_addr_is_local(uint32_t addr);
