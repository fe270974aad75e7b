/* Decisions on a destination address that the proxy and the UDP relay share
 * (egress.h). */
#include "net/egress.h"
#include "net/netns.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

int cdn_egress_decide_ip(const struct cdn_egress_box *b, uint32_t ip, uint16_t port, const char **reason)
{
    /* The sandbox network and the host's own addresses (even one in a
     * private range an entry names): nothing opens them. */
    bool sandbox = cdn_net_in_sandbox_subnet(ip), never = sandbox || cdn_host_addr_is_local(ip);
    const char *r = cdn_ip_reserved(ip);
    if (!r && never)
        r = sandbox ? "sandbox-network" : "host";
    if (!never && cdn_allowlist_admits_ip(&b->allow, ip, port)) {
        *reason = "allowlist:ip";
        return 1;
    }
    if (r) {
        static char buf[64];
        (void) snprintf(buf, sizeof buf, "reserved:%s", r);
        *reason = buf;
        return -1;
    }
    if (b->mode == CDN_NET_OPEN) {
        *reason = "open";
        return 1;
    }
    return 0;
}
