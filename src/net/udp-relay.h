/* The UDP relay of `open` mode (DESIGN §7): a sandbox with network "open"
 * gets its UDP (other than DNS, which goes to the stub) redirected here; the
 * relay learns each datagram's original destination from conntrack, refuses
 * reserved destinations like the proxy does, and relays the flow through a
 * host socket of its own — so the host never forwards a sandbox's packets
 * and every flow is audited (one record when it ends: idle, or the sandbox
 * or its owner going). In "allowlist" mode UDP is never redirected here: it
 * is dropped. */
#pragma once

#include <event2/event.h>
#include <stdint.h>

#include "net/egress.h"

struct cdn_udp_relay;

/* Listen on UDP 0.0.0.0:port (0 = any free port). NULL with errno. */
struct cdn_udp_relay *cdn_udp_relay_new(struct event_base *base, uint16_t port,
                                        const struct cdn_egress_ops *ops);
uint16_t cdn_udp_relay_port(const struct cdn_udp_relay *r);
/* End b's flows (audited with reason), e.g. when it goes or leaves open mode. */
void cdn_udp_relay_forget(struct cdn_udp_relay *r, struct cdn_egress_box *b, const char *reason);
void cdn_udp_relay_free(struct cdn_udp_relay *r);

#define CDN_UDP_MAX_FLOWS 256   /* per sandbox; datagrams of further flows are dropped */
#define CDN_UDP_IDLE_MS   30000 /* a flow without datagrams this long ends */
