/* The egress listeners of one owner (listeners.h). Runs in the owner (cordond, `cordon run`),
 * as root in the host's network namespace, on the owner's event loop. */
#include "net/listeners.h"

#include <errno.h>
#include <string.h>

#include "net/nft.h"

static int upstream_open(struct cdn_egress_listeners *l, const char *up, const char *hint,
                         struct cdn_error *err)
{
    if (!(l->dns = evdns_base_new(l->base, 0)))
        return cdn_error_set(err, ENOMEM, "egress: resolver: out of memory");
    int r = up && *up ? evdns_base_nameserver_ip_add(l->dns, up)
                      : evdns_base_resolv_conf_parse(l->dns, DNS_OPTION_NAMESERVERS, "/etc/resolv.conf");
    if (r != 0 || evdns_base_count_nameservers(l->dns) == 0)
        return cdn_error_field(err, ENOENT, "network.mode", "egress: no upstream DNS server (%s; set %s)",
                               up && *up ? up : "none in /etc/resolv.conf", hint);
    (void) evdns_base_set_option(l->dns, "timeout:", "2");
    (void) evdns_base_set_option(l->dns, "attempts:", "2");
    return 0;
}

int cdn_egress_listeners_start(struct cdn_egress_listeners *l, struct event_base *base, const char *table,
                               const char *upstream, const char *hint, const struct cdn_egress_ops *ops,
                               struct cdn_error *err)
{
    *l = (struct cdn_egress_listeners){.base = base};
    (void) snprintf(l->table, sizeof l->table, "%s", table);
    int r = upstream_open(l, upstream, hint, err);
    if (r < 0)
        goto fail;
    errno = 0;
    if (!(l->stub = cdn_dns_stub_new(base, l->dns, 0, ops)) ||
        !(l->proxy = cdn_proxy_new(base, l->dns, 0, ops)) || !(l->relay = cdn_udp_relay_new(base, 0, ops))) {
        r = cdn_error_set(err, errno ? errno : ENOMEM, "egress: DNS stub or proxy socket: %s",
                          strerror(errno ? errno : ENOMEM));
        goto fail;
    }
    cdn_nft_sweep_runs(); /* a killed run leaves its table; its interface name may come back */
    if ((r = cdn_nft_setup(l->table, cdn_proxy_port(l->proxy), cdn_dns_stub_port(l->stub),
                           cdn_udp_relay_port(l->relay), err)) < 0)
        goto fail;
    l->table_made = true;
    return 0;
fail:
    cdn_egress_listeners_stop(l);
    return r < 0 ? r : -EIO;
}

void cdn_egress_listeners_stop(struct cdn_egress_listeners *l)
{
    if (l->table_made)
        cdn_nft_teardown(l->table);
    l->table_made = false;
    cdn_udp_relay_free(l->relay);
    cdn_proxy_free(l->proxy);
    if (l->stub)
        cdn_dns_stub_free(l->stub);
    l->relay = NULL, l->proxy = NULL, l->stub = NULL;
    /* Cancelled lookups end in their callbacks, which run from the loop: let them, before the
     * resolver goes (dns-stub.h). */
    if (l->base)
        (void) event_base_loop(l->base, EVLOOP_NONBLOCK);
    if (l->dns)
        evdns_base_free(l->dns, 0);
    l->dns = NULL;
}
