/* The DNS stub (DESIGN §7), on libevent's evdns: every sandbox's UDP port 53
 * is redirected here. It answers A questions for allowlisted names by
 * resolving them upstream, drops answers that point at reserved addresses
 * (DNS rebinding) unless a CIDR entry names them, pins what it answered
 * (net/pins.h), answers AAAA with no records (no IPv6 inside), and refuses
 * everything else (REFUSED). Every question is audited. Long names and high
 * question rates are flagged as possible tunnelling, and so are names of the
 * sandbox's own choosing beyond its budget (net/dns-budget.h), which may also
 * be refused. */
#pragma once

#include <event2/dns.h>
#include <event2/event.h>
#include <stdint.h>

#include "net/egress.h"

struct cdn_dns_stub;

/* Listen on UDP 0.0.0.0:port (0 = any free port), resolving through upstream
 * (an evdns_base the caller configured, e.g. from /etc/resolv.conf or a
 * configured server). NULL with errno on failure. */
struct cdn_dns_stub *cdn_dns_stub_new(struct event_base *base, struct evdns_base *upstream, uint16_t port,
                                      const struct cdn_egress_ops *ops);
uint16_t cdn_dns_stub_port(const struct cdn_dns_stub *s);
/* Accepts NULL. Questions still waiting for upstream are audited ("shutdown",
 * through ops->lookup, so the boxes should still be there), their clients get
 * no answer, and their lookups are cancelled. libevent runs a cancelled
 * lookup's callback later from the loop, and that callback frees what is left:
 * free the stub before upstream, and let the loop run once more
 * (EVLOOP_NONBLOCK) before event_base_free, or that memory leaks. */
void cdn_dns_stub_free(struct cdn_dns_stub *s);

/* Tunnelling heuristics. */
#define CDN_DNS_LONG_NAME    100  /* a name this long (or a label of 50+) is flagged */
#define CDN_DNS_RATE_WINDOW  1000 /* ms */
#define CDN_DNS_RATE_MAX     50   /* questions per window */
#define CDN_DNS_PIN_MIN_S    300  /* pins live at least this long, whatever the TTL */
#define CDN_DNS_INFLIGHT_MAX 32   /* questions of one sandbox waiting for the upstream; more are REFUSED */
