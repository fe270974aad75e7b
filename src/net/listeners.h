/* The egress layer of one owner (cordond, or one `cordon run`): the upstream resolver, the DNS
 * stub, the proxy and the UDP relay on its event loop, and the nftables table that sends its
 * sandboxes' traffic to them (DESIGN §7). Both owners start and stop them here; what differs
 * (cordond's namespace pool and lookup by lease, the run's one sandbox) stays theirs. */
#pragma once

#include <event2/dns.h>
#include <event2/event.h>
#include <stdbool.h>

#include "net/dns-stub.h"
#include "net/egress.h"
#include "net/proxy.h"
#include "net/udp-relay.h"
#include "shared/error.h"

struct cdn_egress_listeners {
    struct event_base *base; /* the owner's */
    struct evdns_base *dns;  /* the upstream resolver */
    struct cdn_dns_stub *stub;
    struct cdn_proxy *proxy;
    struct cdn_udp_relay *relay;
    char table[40];
    bool table_made;
};

/* Start on base: upstream ("IP[:PORT]", or NULL/"" for /etc/resolv.conf's; hint says how the owner
 * sets it, for the error), then the listeners (ops: the owner's, outliving them), then the table
 * (its runs' left-over tables swept first). On failure, whatever was started is stopped; -errno,
 * err says why. */
int cdn_egress_listeners_start(struct cdn_egress_listeners *l, struct event_base *base, const char *table,
                               const char *upstream, const char *hint, const struct cdn_egress_ops *ops,
                               struct cdn_error *err);
/* The table goes first (the sandboxes' traffic is dropped from then on), then the listeners; the
 * lookups they cancel end on base (run once, without blocking) before the resolver goes.
 * Accepts a zeroed or already stopped l. */
void cdn_egress_listeners_stop(struct cdn_egress_listeners *l);
