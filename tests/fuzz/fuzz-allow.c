/* Fuzz the egress allowlist: one entry per input line (as a spec's
 * network.allow would hold them), then matching and pinning with names and
 * addresses taken from the same input. */
#include "core/allow.h"
#include "net/pins.h"
#include "lines.h"

#include <stdlib.h>
#include <string.h>

#define MAX_ENTRIES 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *lines[MAX_ENTRIES + 1] = {0};
    struct cdn_strv sv = {lines, fuzz_split_lines(data, size, lines, MAX_ENTRIES)};

    struct cdn_allowlist l = {0};
    struct cdn_error err = {0};
    if (cdn_allowlist_parse(&sv, &l, &err) == 0) {
        for (size_t i = 0; i < l.n; i++) {
            const struct cdn_allow_entry *e = &l.v[i];
            if ((e->net & ~e->mask) != 0 ||
                (!e->default_ports && (e->port_lo == 0 || e->port_lo > e->port_hi)))
                abort();
            if (e->kind != CDN_ALLOW_CIDR && !cdn_dns_name_valid(e->name))
                abort();
        }
        static const char *names[] = {"example.com", "a.example.com", "EXAMPLE.COM.", "pypi.org", "x"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            (void) cdn_allowlist_match_name(&l, names[i], 443);
        static const uint32_t ips[] = {0x0a000001u, 0xa9fea9feu, 0x08080808u, 0xffffffffu, 0};
        for (size_t i = 0; i < sizeof ips / sizeof ips[0]; i++)
            (void) cdn_allowlist_match_ip(&l, ips[i], 80);
    } else if (err.errnum == 0 || !err.msg[0] || strchr(err.msg, '\n'))
        abort();

    struct cdn_pins *p = cdn_pins_new(8);
    for (size_t i = 0; i < sv.n; i++) {
        char norm[256];
        uint32_t a = 0;
        (void) cdn_dns_name_normalize(lines[i], norm);
        (void) cdn_ipv4_parse(lines[i], &a);
        (void) cdn_ip_reserved(a);
        (void) cdn_allowlist_match_name(&l, lines[i], 0);
        cdn_pins_add(p, lines[i], a, i);
        (void) cdn_pins_check(p, lines[i], a, 1);
        (void) cdn_pins_name_of(p, a, 0);
    }
    cdn_pins_free(p);
    cdn_allowlist_free(&l);
    for (size_t i = 0; i < sv.n; i++)
        free(lines[i]);
    return 0;
}
