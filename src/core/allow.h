/* The egress allowlist (DESIGN §2, §7) and the checks on destinations.
 *
 * Entries (spec field network.allow, CLI --net allow=…):
 *   NAME[:PORTS]        exact DNS name, e.g. "pypi.org:443"
 *   *.SUFFIX[:PORTS]    any name strictly below SUFFIX, e.g. "*.github.com"
 *   A.B.C.D[/N][:PORTS] one IPv4 address or a CIDR block, e.g. "10.1.2.3/32:80"
 * PORTS is one port "P" or a range "LO-HI" (1..65535); without it: 80 and 443.
 * Names compare case-insensitively and without a trailing dot. Pure C: no
 * I/O, no allocation beyond the list itself. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/strv.h"
#include "shared/error.h"

enum cdn_allow_kind { CDN_ALLOW_NAME, CDN_ALLOW_GLOB, CDN_ALLOW_CIDR };

struct cdn_allow_entry {
    enum cdn_allow_kind kind;
    char name[256];     /* NAME, or SUFFIX of a glob: lower case, no trailing dot */
    uint32_t net, mask; /* CIDR, host byte order; net already masked */
    uint16_t port_lo, port_hi;
    bool default_ports; /* no PORTS given: 80 and 443 */
};

struct cdn_allowlist {
    struct cdn_allow_entry *v;
    size_t n;
};

/* Parse every entry; on a bad one: -EINVAL, err->field "network.allow[I]" and
 * a message that quotes the entry and says what is wrong. */
int cdn_allowlist_parse(const struct cdn_strv *entries, struct cdn_allowlist *ret, struct cdn_error *err);
void cdn_allowlist_free(struct cdn_allowlist *l);

/* Does e admit port? port 0 means "any port" (a DNS question names no port). */
bool cdn_allow_entry_port(const struct cdn_allow_entry *e, uint16_t port);
/* Does a NAME or GLOB entry admit name on port (0 = any)? */
bool cdn_allowlist_match_name(const struct cdn_allowlist *l, const char *name, uint16_t port);
/* Does a CIDR entry cover addr (host byte order) on port (0 = any)? */
bool cdn_allowlist_match_ip(const struct cdn_allowlist *l, uint32_t addr, uint16_t port);

/* May an entry open addr on port (0 = any)? A CIDR entry must cover it, and
 * when addr is reserved (below) the entry must lie wholly inside addr's
 * reserved block; loopback, this-network, multicast, broadcast, 240/4,
 * 192.0.0/24 and 168.63.129.16 are never opened. The proxy adds the host's own
 * addresses and the sandbox network, which nothing opens either. */
bool cdn_allowlist_admits_ip(const struct cdn_allowlist *l, uint32_t addr, uint16_t port);

/* Addresses refused unless a CIDR entry names them: "this-network" 0/8,
 * "loopback" 127/8, "private" 10/8 172.16/12 192.168/16, "shared" 100.64/10,
 * "link-local" 169.254/16 (cloud metadata), "reserved" 192.0.0/24 240/4,
 * "multicast" 224/4, "broadcast". The reason, or NULL for a public address. */
const char *cdn_ip_reserved(uint32_t addr);

/* A DNS name we accept at all: 1..253 chars, labels 1..63 of [A-Za-z0-9_-],
 * not starting or ending with '-', optional single trailing dot. */
bool cdn_dns_name_valid(const char *name);
/* Copy name lower-cased, trailing dot removed, into out (256 bytes). false if invalid. */
bool cdn_dns_name_normalize(const char *name, char out[256]);

/* Canonical dotted-quad IPv4 only: four decimal octets 0..255 without leading
 * zeros, nothing else ("10.1", "0x7f.1", "010.0.0.1" are refused). Host byte
 * order into *ret; false if s is not one. */
bool cdn_ipv4_parse(const char *s, uint32_t *ret);
/* Is the last label of s all digits or "0x" + hex digits: a name a resolver
 * (inet_aton) would read as an address? Such names must be canonical IPv4. */
bool cdn_name_looks_numeric(const char *s);
/* Strict port: n bytes of s, 1..5 decimal digits, 1..65535; false otherwise. */
bool cdn_port_parse(const char *s, size_t n, uint16_t *ret);
