/* The host-side filter of the egress layer (DESIGN §7), one nftables table per
 * owner (a cordond, or a one-shot `cordon run`), through libnftables:
 *
 *   from a sandbox's veth (set "ifs"): UDP 53 → the DNS stub, all TCP → the
 *   proxy (redirected: the proxy reads the original destination), other UDP →
 *   the UDP relay for sandboxes in open mode (set "open_ifs"), everything
 *   else dropped (UDP incl. QUIC in allowlist mode, ICMP, raw IP, forwarding);
 *   the listeners' ports are closed to every other interface.
 *
 * Fails closed: a veth is only usable once its name is in the set, and a
 * sandbox's packets never reach anything but the two listeners.
 *
 * The owner's table lives as long as the owner's process (nft.c says how):
 * every call here goes through the process's one libnftables context. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "shared/error.h"

#define CDN_NFT_FAILCLOSED "cordon_failclosed" /* inet table, host-wide, kept for good */
#define CDN_NFT_LEGACY     "cordon_guard"      /* its name before 0.2: removed when met */

/* Create (or replace, after a crash) the table `name` for these ports, and
 * (re)install the fail-closed table. */
int cdn_nft_setup(const char *name, uint16_t proxy_port, uint16_t dns_port, uint16_t udp_port,
                  struct cdn_error *err);
/* open mode: the interface's UDP (but DNS) goes to the UDP relay (net/udp-relay.h), or no longer. */
int cdn_nft_set_open(const char *name, const char *ifname, bool open, struct cdn_error *err);
int cdn_nft_add_if(const char *name, const char *ifname, struct cdn_error *err);
/* Best effort: the interface may be gone already (the set keeps no dangling state for a name). */
void cdn_nft_del_if(const char *name, const char *ifname);
void cdn_nft_teardown(const char *name);
/* Remove the tables of one-shot runs (cordon_run_<pid>) whose process is gone. */
void cdn_nft_sweep_runs(void);
