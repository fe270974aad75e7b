/* The transparent egress proxy (DESIGN §7). Every TCP connection out of a
 * sandbox is redirected here (net/nft.h); the proxy reads the original
 * destination, and — unless a CIDR entry admits that address outright — the
 * name the connection is for: the TLS ClientHello's SNI (TLS is not
 * terminated) or the HTTP Host header, or the target of an explicit proxy
 * request (CONNECT host:port, GET http://host/…). It then
 *   refuses destinations in reserved ranges (loopback, link-local incl. cloud
 *     metadata, private, the host's own addresses) unless a CIDR entry names them,
 *   refuses names off the allowlist (for that port),
 *   refuses a transparent connection whose destination address the DNS stub
 *     did not give out for that name (an allowed SNI sent to another IP),
 * and otherwise splices the bytes through, with backpressure. Plain HTTP is
 * made one request per connection (Connection: close), so a second request
 * cannot name another host. One audit record per connection, at its end. */
#pragma once

#include <event2/dns.h>
#include <event2/event.h>
#include <stdint.h>

#include "net/egress.h"

struct cdn_proxy;

/* Listen on TCP 0.0.0.0:port (0 = any); NULL with errno. dns resolves the
 * targets of explicit proxy requests. */
struct cdn_proxy *cdn_proxy_new(struct event_base *base, struct evdns_base *dns, uint16_t port,
                                const struct cdn_egress_ops *ops);
uint16_t cdn_proxy_port(const struct cdn_proxy *p);
void cdn_proxy_free(struct cdn_proxy *p);
/* b's allowlist changed: cut the connections it no longer allows (before the
 * caller returns to the loop, so no instant is more open than either list). */
void cdn_proxy_recheck(struct cdn_proxy *p, struct cdn_egress_box *b);
/* b is going: end its connections (audited as "sandbox-gone"). */
void cdn_proxy_forget(struct cdn_proxy *p, struct cdn_egress_box *b);
unsigned cdn_proxy_connections(const struct cdn_proxy *p);

#define CDN_PROXY_SNIFF_TIMEOUT_S   10 /* for the first bytes that name the destination */
#define CDN_PROXY_CONNECT_TIMEOUT_S 10
#define CDN_PROXY_BUF_HIGH          (256u << 10) /* per direction, then the reader pauses */
#define CDN_PROXY_MAX_CONNS         256          /* per sandbox, open or being judged */
#define CDN_PROXY_READ              (64u << 10)  /* bytes per read(2) while splicing */
