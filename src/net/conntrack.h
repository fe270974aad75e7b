/* The kernel's connection tracking table, over ctnetlink (libmnl).
 *
 * Why the egress layer touches it: the table's NAT redirects a sandbox's flow
 * to its owner's DNS stub, proxy or UDP relay port, and the kernel decides
 * that once, on a flow's first packet, then keeps the choice while the flow
 * lives (30 s after its last UDP packet, days for an established TCP one). A
 * restarted cordond that adopts a sandbox listens on other ports: the old
 * entries would keep steering the sandbox's flows to dead ports, where the
 * table drops them, for as long as the sandbox keeps sending (a resolver that
 * asks from one socket never recovers). Forgetting them makes each flow's
 * next packet a first packet again, redirected to the new listeners.
 *
 * Not done when a lease is taken: listing the table walks all of its hash
 * buckets (about 6 ms with 262,144 of them), too much for every namespace. A
 * freed lease's old flows could only mislead a new sandbox that drew the same
 * lease (one of 32,768, from a random start per process) and the same source
 * port within the entries' lifetime. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* Delete every IPv4 conntrack entry, in the caller's network namespace, whose
 * original source address (host byte order) match() accepts. One listing of
 * the table, then one delete per entry; an entry that expired in between is
 * not an error. Returns how many were deleted, or -errno (-EPROTONOSUPPORT
 * when the kernel has no ctnetlink: then it has no NAT to mislead either).
 * Runs in the owner's thread, as root of the host's user namespace. */
int cdn_conntrack_forget(bool (*match)(uint32_t src, void *arg), void *arg);
