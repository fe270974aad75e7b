/* The egress layer's view of one sandbox and of its owner (cordond or the
 * one-shot CLI): what the proxy and the DNS stub look up by the source address
 * of a packet, and where they report each attempt (DESIGN §7). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/spec.h"
#include "core/allow.h"
#include "net/dns-budget.h"
#include "net/pins.h"

struct cdn_egress_box {
    char id[64];
    uint32_t sandbox_ip; /* host byte order: the sandbox's end of its veth */
    uint32_t host_ip;    /* the host's end (the sandbox's gateway and resolver) */
    enum cdn_net_mode mode;
    struct cdn_allowlist allow; /* replaced as a whole by PATCH …/network */
    struct cdn_pins *pins;
    uint64_t generation;   /* bumped at each allowlist change */
    void *owner;           /* the owner's object (cordond: struct box) */
    unsigned tcp_conns;    /* proxied connections open (proxy.c) */
    unsigned udp_flows;    /* relayed UDP flows (udp-relay.c, open mode) */
    unsigned dns_inflight; /* questions waiting for the upstream (dns-stub.c) */
    /* audit rate limit (audit.c) */
    uint64_t audit_window_ms;
    unsigned audit_in_window;
    uint64_t audit_suppressed;
    /* DNS tunnelling heuristics (dns-stub.c) */
    uint64_t dns_window_start_ms;
    unsigned dns_in_window;
    bool dns_flagged;
    struct cdn_dns_budget dns_budget; /* new names of its own choosing (dns-budget.c) */
};

/* One attempt, as written to the audit log (one JSON line) and as an egress event. */
struct cdn_audit {
    const char *proto; /* "tcp", "dns" */
    uint32_t dst_ip;   /* host byte order; 0 if none (a DNS query that was refused) */
    uint16_t dst_port;
    const char *name; /* Host / SNI / CONNECT target / query name, or NULL */
    const char *via;  /* how the name was learnt: "sni", "host", "connect", "absolute-uri", "dns", NULL */
    bool allowed;
    const char
        *reason; /* short, machine-readable: "allowlist", "not-allowlisted", "reserved:link-local", … */
    uint64_t bytes_up, bytes_down;
    double duration_ms;
    const char *qtype;   /* DNS: "A", "AAAA", …  */
    const char *answers; /* DNS: comma list of the addresses answered, or NULL */
};

struct cdn_egress_ops {
    /* The sandbox whose veth address is src (host byte order), or NULL. */
    struct cdn_egress_box *(*lookup)(void *arg, uint32_t src);
    void (*audit)(void *arg, struct cdn_egress_box *b, const struct cdn_audit *a);
    /* Something worth an alert that is not one attempt (e.g. DNS tunnelling
     * suspected); fields (borrowed, may be NULL): counts to put in the event. */
    void (*flag)(void *arg, struct cdn_egress_box *b, const char *what, const char *detail, json_t *fields);
    void *arg;
    const struct cdn_dns_budget_cfg *dns_budget; /* the owner's; NULL: no budget */
};

uint64_t cdn_now_ms(void); /* CLOCK_MONOTONIC in ms (pins' clock) */

/* The decision on reaching ip:port from b by address alone (net/egress.c):
 * 1 allowed (*reason "allowlist:ip" or "open"), -1 refused (*reason
 * "reserved:WHY", in a static buffer), 0 a name is needed (allowlist mode).
 * The sandbox network and the host's own addresses are never opened; other
 * reserved ranges only by a CIDR entry inside them (cdn_allowlist_admits_ip). */
int cdn_egress_decide_ip(const struct cdn_egress_box *b, uint32_t ip, uint16_t port, const char **reason);
