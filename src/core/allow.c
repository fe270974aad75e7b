#include "allow.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_xdigit(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char) (c - 'A' + 'a') : c;
}

static bool is_label_char(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '_';
}

/* Why name is not a DNS name we accept, or NULL if it is one. */
static const char *dns_name_problem(const char *name)
{
    size_t len = strlen(name);
    if (len > 0 && name[len - 1] == '.')
        len--;
    if (len == 0)
        return "empty name";
    if (len > 253)
        return "name longer than 253 characters";
    size_t label = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || name[i] == '.') {
            if (label == 0)
                return "empty label";
            if (label > 63)
                return "label longer than 63 characters";
            if (name[i - label] == '-' || name[i - 1] == '-')
                return "label starts or ends with '-'";
            label = 0;
            continue;
        }
        if (!is_label_char(name[i]))
            return "only letters, digits, '-', '_' and '.' are allowed in a name";
        label++;
    }
    return NULL;
}

bool cdn_dns_name_valid(const char *name)
{
    return name && !dns_name_problem(name);
}

bool cdn_dns_name_normalize(const char *name, char out[256])
{
    if (!cdn_dns_name_valid(name))
        return false;
    size_t len = strlen(name); /* ≤ 254 once valid */
    if (name[len - 1] == '.')
        len--;
    for (size_t i = 0; i < len; i++)
        out[i] = lower(name[i]);
    out[len] = 0;
    return true;
}

bool cdn_ipv4_parse(const char *s, uint32_t *ret)
{
    uint32_t addr = 0;
    for (int octet = 0; octet < 4; octet++) {
        if (octet > 0 && *s++ != '.')
            return false;
        if (!is_digit(s[0]))
            return false;
        unsigned v = 0;
        size_t digits = 0;
        for (; is_digit(s[digits]) && digits < 4; digits++)
            v = v * 10 + (unsigned) (s[digits] - '0');
        /* No leading zero: inet_aton reads "010" as octal 8. */
        if (digits > 3 || v > 255 || (digits > 1 && s[0] == '0'))
            return false;
        addr = addr << 8 | v;
        s += digits;
    }
    if (*s)
        return false;
    *ret = addr;
    return true;
}

bool cdn_name_looks_numeric(const char *s)
{
    size_t len = strlen(s);
    if (len > 0 && s[len - 1] == '.')
        len--;
    size_t start = len;
    while (start > 0 && s[start - 1] != '.')
        start--;
    if (start == len)
        return false;
    const char *l = s + start;
    size_t n = len - start;
    size_t i = 0;
    if (n >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X')) {
        for (i = 2; i < n && is_xdigit(l[i]); i++)
            ;
        return i == n;
    }
    for (; i < n && is_digit(l[i]); i++)
        ;
    return i == n;
}

bool cdn_port_parse(const char *s, size_t n, uint16_t *ret)
{
    if (n == 0 || n > 5)
        return false;
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(s[i]))
            return false;
        v = v * 10 + (unsigned) (s[i] - '0');
    }
    if (v == 0 || v > 65535)
        return false;
    *ret = (uint16_t) v;
    return true;
}

static const char *parse_ports(const char *s, struct cdn_allow_entry *e)
{
    const char *dash = strchr(s, '-');
    if (!dash) {
        if (!cdn_port_parse(s, strlen(s), &e->port_lo))
            return "port must be a number 1..65535";
        e->port_hi = e->port_lo;
        return NULL;
    }
    if (!cdn_port_parse(s, (size_t) (dash - s), &e->port_lo) ||
        !cdn_port_parse(dash + 1, strlen(dash + 1), &e->port_hi))
        return "port range must be LO-HI with both ports 1..65535";
    if (e->port_lo > e->port_hi)
        return "port range must be LO-HI with LO <= HI";
    return NULL;
}

static const char *parse_cidr(char *host, struct cdn_allow_entry *e)
{
    unsigned prefix = 32;
    char *slash = strchr(host, '/');
    if (slash) {
        *slash = 0;
        const char *d = slash + 1;
        size_t n = strlen(d);
        if (n == 0 || n > 2 || !is_digit(d[0]) || (n == 2 && (!is_digit(d[1]) || d[0] == '0')))
            return "prefix length must be 0..32";
        prefix = n == 1 ? (unsigned) (d[0] - '0') : (unsigned) ((d[0] - '0') * 10 + (d[1] - '0'));
        if (prefix > 32)
            return "prefix length must be 0..32";
    }
    uint32_t addr;
    if (slash && !cdn_name_looks_numeric(host))
        return "a prefix length /N needs an IPv4 address";
    if (!cdn_ipv4_parse(host, &addr))
        return "not a canonical IPv4 address (write A.B.C.D: four decimal octets 0..255, no leading zeros)";
    e->kind = CDN_ALLOW_CIDR;
    e->mask = prefix == 0 ? 0 : UINT32_MAX << (32 - prefix);
    e->net = addr & e->mask;
    return NULL;
}

static const char *parse_host(char *host, struct cdn_allow_entry *e)
{
    if (host[0] == 0)
        return "no name or address before the port";
    if (strcmp(host, "*") == 0 || strcmp(host, "*.") == 0)
        return "a bare '*' would allow everything; write '*.SUFFIX'";
    if (strchr(host, '/') || cdn_name_looks_numeric(host))
        return parse_cidr(host, e);
    const char *name = host;
    e->kind = CDN_ALLOW_NAME;
    if (host[0] == '*' && host[1] == '.') {
        e->kind = CDN_ALLOW_GLOB;
        name = host + 2;
    }
    if (strchr(name, '*'))
        return "'*' is only allowed as the whole first label ('*.SUFFIX')";
    const char *why = dns_name_problem(name);
    if (why)
        return why;
    (void) cdn_dns_name_normalize(name, e->name);
    return NULL;
}

/* One entry into e; the reason it is bad, or NULL. */
static const char *parse_entry(const char *s, struct cdn_allow_entry *e)
{
    char buf[300];
    size_t len = strlen(s);
    if (len == 0)
        return "empty entry";
    if (len >= sizeof buf)
        return "entry too long";
    memcpy(buf, s, len + 1);
    *e = (struct cdn_allow_entry){.default_ports = true};

    char *colon = strchr(buf, ':');
    if (buf[0] == '[' || (colon && strchr(colon + 1, ':')))
        return "IPv6 is not supported (sandboxes have IPv4 egress only)";
    if (colon) {
        *colon = 0;
        const char *why = parse_ports(colon + 1, e);
        if (why)
            return why;
        e->default_ports = false;
    }
    return parse_host(buf, e);
}

/* The entry for a message: at most 64 bytes, control bytes as '?', so the message stays one line. */
static void quote(const char *s, char out[72])
{
    size_t i = 0;
    for (; s[i] && i < 64; i++)
        out[i] = (unsigned char) s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    if (s[i]) {
        memcpy(out + i, "...", 3);
        i += 3;
    }
    out[i] = 0;
}

int cdn_allowlist_parse(const struct cdn_strv *entries, struct cdn_allowlist *ret, struct cdn_error *err)
{
    struct cdn_allowlist l = {0};
    size_t n = entries ? entries->n : 0;
    if (n > 0) {
        l.v = calloc(n, sizeof *l.v);
        if (!l.v)
            return cdn_error_field(err, ENOMEM, "network.allow", "network.allow: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const char *why = parse_entry(entries->v[i], &l.v[i]);
        if (why) {
            char field[48], q[72];
            snprintf(field, sizeof field, "network.allow[%zu]", i);
            quote(entries->v[i], q);
            free(l.v);
            return cdn_error_field(err, EINVAL, field, "%s: '%s': %s", field, q, why);
        }
    }
    l.n = n;
    *ret = l;
    return 0;
}

void cdn_allowlist_free(struct cdn_allowlist *l)
{
    if (!l)
        return;
    free(l->v);
    *l = (struct cdn_allowlist){0};
}

bool cdn_allow_entry_port(const struct cdn_allow_entry *e, uint16_t port)
{
    if (port == 0)
        return true;
    if (e->default_ports)
        return port == 80 || port == 443;
    return port >= e->port_lo && port <= e->port_hi;
}

/* Is name (normalised) strictly below suffix: "a.example.com" vs "example.com"? */
static bool below(const char *name, const char *suffix)
{
    size_t n = strlen(name), s = strlen(suffix);
    return n > s + 1 && name[n - s - 1] == '.' && memcmp(name + n - s, suffix, s) == 0;
}

bool cdn_allowlist_match_name(const struct cdn_allowlist *l, const char *name, uint16_t port)
{
    char norm[256];
    if (!l || !name || !cdn_dns_name_normalize(name, norm))
        return false;
    for (size_t i = 0; i < l->n; i++) {
        const struct cdn_allow_entry *e = &l->v[i];
        bool hit = (e->kind == CDN_ALLOW_NAME && strcmp(norm, e->name) == 0) ||
                   (e->kind == CDN_ALLOW_GLOB && below(norm, e->name));
        if (hit && cdn_allow_entry_port(e, port))
            return true;
    }
    return false;
}

bool cdn_allowlist_match_ip(const struct cdn_allowlist *l, uint32_t addr, uint16_t port)
{
    if (!l)
        return false;
    for (size_t i = 0; i < l->n; i++) {
        const struct cdn_allow_entry *e = &l->v[i];
        if (e->kind == CDN_ALLOW_CIDR && (addr & e->mask) == e->net && cdn_allow_entry_port(e, port))
            return true;
    }
    return false;
}

static const struct {
    uint32_t net;
    unsigned prefix;
    const char *why;
    bool openable; /* a CIDR entry inside the block may open (part of) it */
} reserved_ranges[] = {
    {0xffffffffu, 32, "broadcast", false},      /* before 240/4, which holds it */
    {0xa83f8110u, 32, "cloud-metadata", false}, /* 168.63.129.16, Azure's host endpoint */
    {0x00000000u, 8, "this-network", false},    {0x7f000000u, 8, "loopback", false},
    {0x0a000000u, 8, "private", true},          {0xac100000u, 12, "private", true},
    {0xc0a80000u, 16, "private", true},         {0x64400000u, 10, "shared", true},
    {0xa9fe0000u, 16, "link-local", true},      {0xc0000000u, 24, "reserved", false},
    {0xf0000000u, 4, "reserved", false},        {0xe0000000u, 4, "multicast", false},
};

bool cdn_allowlist_admits_ip(const struct cdn_allowlist *l, uint32_t addr, uint16_t port)
{
    if (!l)
        return false;
    uint32_t bmask = 0, bnet = 0;
    for (size_t i = 0; i < ELEMENTSOF(reserved_ranges); i++) {
        uint32_t mask = UINT32_MAX << (32 - reserved_ranges[i].prefix);
        if ((addr & mask) == reserved_ranges[i].net) {
            if (!reserved_ranges[i].openable)
                return false;
            bmask = mask;
            bnet = reserved_ranges[i].net;
            break;
        }
    }
    for (size_t i = 0; i < l->n; i++) {
        const struct cdn_allow_entry *e = &l->v[i];
        if (e->kind != CDN_ALLOW_CIDR || (addr & e->mask) != e->net || !cdn_allow_entry_port(e, port))
            continue;
        /* In a reserved block only an entry that lies wholly inside it opens it:
         * 0.0.0.0/0 means "the internet", not the metadata endpoint. */
        if (bmask && !((e->mask & bmask) == bmask && (e->net & bmask) == bnet))
            continue;
        return true;
    }
    return false;
}

const char *cdn_ip_reserved(uint32_t addr)
{
    static const struct {
        uint32_t net;
        unsigned prefix;
        const char *why;
    } ranges[] = {
        {0xffffffffu, 32, "broadcast"}, /* before 240/4, which holds it */
        {0xa83f8110u, 32, "cloud-metadata"}, {0x00000000u, 8, "this-network"}, {0x7f000000u, 8, "loopback"},
        {0x0a000000u, 8, "private"},         {0xac100000u, 12, "private"},     {0xc0a80000u, 16, "private"},
        {0x64400000u, 10, "shared"},         {0xa9fe0000u, 16, "link-local"},  {0xc0000000u, 24, "reserved"},
        {0xf0000000u, 4, "reserved"},        {0xe0000000u, 4, "multicast"},
    };
    for (size_t i = 0; i < ELEMENTSOF(ranges); i++) {
        uint32_t mask = UINT32_MAX << (32 - ranges[i].prefix);
        if ((addr & mask) == ranges[i].net)
            return ranges[i].why;
    }
    return NULL;
}
