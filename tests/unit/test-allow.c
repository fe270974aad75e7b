#include "core/allow.h"
#include "tap.h"

#include <errno.h>
#include <stdlib.h>

/* Parse a NULL-terminated list of entries. */
static int parse(const char *const *entries, struct cdn_allowlist *l, struct cdn_error *err)
{
    struct cdn_strv sv = {(char **) entries, 0};
    while (entries[sv.n])
        sv.n++;
    *err = (struct cdn_error){0};
    return cdn_allowlist_parse(&sv, l, err);
}

static int parse_one(const char *entry, struct cdn_allowlist *l, struct cdn_error *err)
{
    const char *v[] = {entry, NULL};
    return parse(v, l, err);
}

TEST(parse_kinds_and_ports)
{
    const char *v[] = {"pypi.org:443",          "*.GitHub.com", "10.1.2.3",
                       "10.1.2.3/24:8000-8100", "Example.COM.", NULL};
    struct cdn_allowlist l;
    struct cdn_error err;
    CHECK_EQ_INT(parse(v, &l, &err), 0);
    CHECK_EQ_INT(l.n, 5);
    CHECK_EQ_INT(l.v[0].kind, CDN_ALLOW_NAME);
    CHECK_STREQ(l.v[0].name, "pypi.org");
    CHECK(!l.v[0].default_ports);
    CHECK_EQ_INT(l.v[0].port_lo, 443);
    CHECK_EQ_INT(l.v[0].port_hi, 443);
    CHECK_EQ_INT(l.v[1].kind, CDN_ALLOW_GLOB);
    CHECK_STREQ(l.v[1].name, "github.com");
    CHECK(l.v[1].default_ports);
    CHECK_EQ_INT(l.v[2].kind, CDN_ALLOW_CIDR);
    CHECK_EQ_INT(l.v[2].net, 0x0a010203);
    CHECK_EQ_INT(l.v[2].mask, 0xffffffff);
    CHECK_EQ_INT(l.v[3].net, 0x0a010200); /* masked */
    CHECK_EQ_INT(l.v[3].mask, 0xffffff00);
    CHECK_EQ_INT(l.v[3].port_lo, 8000);
    CHECK_EQ_INT(l.v[3].port_hi, 8100);
    CHECK_STREQ(l.v[4].name, "example.com");
    cdn_allowlist_free(&l);
    CHECK(l.v == NULL && l.n == 0);
    cdn_allowlist_free(&l); /* twice is fine */
    cdn_allowlist_free(NULL);
}

TEST(parse_empty_list)
{
    const char *v[] = {NULL};
    struct cdn_allowlist l;
    struct cdn_error err;
    CHECK_EQ_INT(parse(v, &l, &err), 0);
    CHECK_EQ_INT(l.n, 0);
    CHECK(!cdn_allowlist_match_name(&l, "example.com", 0));
    CHECK(!cdn_allowlist_match_ip(&l, 0x08080808, 0));
    cdn_allowlist_free(&l);
    CHECK_EQ_INT(cdn_allowlist_parse(NULL, &l, &err), 0);
    CHECK_EQ_INT(l.n, 0);
}

TEST(parse_edge_entries_accepted)
{
    static const char *ok[] = {
        "a",
        "_dmarc.example.com",
        "x-y.example.com:1",
        "example.com:65535",
        "example.com:1-65535",
        "example.com:80-80",
        "0.0.0.0/0",
        "255.255.255.255/32",
        "1.2.3.4/0:22",
        "*.com",
        "*.example.com.:443",
        "xn--bcher-kva.example",
        "0x.example.com",
        "123.example.com",
        "a1",
    };
    for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
        struct cdn_allowlist l;
        struct cdn_error err;
        int r = parse_one(ok[i], &l, &err);
        if (r != 0)
            printf("# %s: %s\n", ok[i], err.msg);
        CHECK_EQ_INT(r, 0);
        if (r == 0)
            cdn_allowlist_free(&l);
    }
}

TEST(parse_rejects_with_reason)
{
    static const struct {
        const char *entry, *why;
    } bad[] = {
        {"", "empty entry"},
        {"*", "bare '*'"},
        {"*:443", "bare '*'"},
        {"*.", "bare '*'"},
        {"10.0.0.0/33", "prefix length must be 0..32"},
        {"10.0.0.0/", "prefix length must be 0..32"},
        {"10.0.0.0/08", "prefix length must be 0..32"},
        {"10.0.0.0/-1", "prefix length must be 0..32"},
        {"10.0.0.0/123", "prefix length must be 0..32"},
        {"example.com/24", "needs an IPv4 address"},
        {"example.com:0", "1..65535"},
        {"example.com:65536", "1..65535"},
        {"example.com:99999999999", "1..65535"},
        {"example.com:", "1..65535"},
        {"example.com:+80", "1..65535"},
        {"example.com:80 ", "1..65535"},
        {"example.com:http", "1..65535"},
        {"example.com:90-80", "LO <= HI"},
        {"example.com:0-80", "LO-HI"},
        {"example.com:80-", "LO-HI"},
        {"example.com:-80", "LO-HI"},
        {"example.com:1-2-3", "LO-HI"},
        {"::1", "IPv6 is not supported"},
        {"[::1]:443", "IPv6 is not supported"},
        {"fe80::1", "IPv6 is not supported"},
        {"[2001:db8::1]", "IPv6 is not supported"},
        {"10.1", "canonical IPv4"},
        {"0x7f.1", "canonical IPv4"},
        {"0x7f000001", "canonical IPv4"},
        {"2130706433", "canonical IPv4"},
        {"010.0.0.1", "canonical IPv4"},
        {"1.2.3.04", "canonical IPv4"},
        {"256.1.1.1", "canonical IPv4"},
        {"1.2.3.4.5", "canonical IPv4"},
        {"1.2.3.", "canonical IPv4"},
        {"example.123", "canonical IPv4"},
        {"*.10.0.0.1", "canonical IPv4"},
        {":443", "no name or address"},
        {"a b.com", "only letters, digits"},
        {" example.com", "only letters, digits"},
        {"exa%mple.com", "only letters, digits"},
        {"ex\xc3\xa4mple.com", "only letters, digits"},
        {"foo*.com", "'*' is only allowed"},
        {"*foo.com", "'*' is only allowed"},
        {"a.*.com", "'*' is only allowed"},
        {"*.*.com", "'*' is only allowed"},
        {"-a.com", "starts or ends with '-'"},
        {"a-.com", "starts or ends with '-'"},
        {"a..com", "empty label"},
        {".a.com", "empty label"},
        {"a.com..", "empty label"},
        {"*..com", "empty label"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com", "longer than 63"},
    };
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        struct cdn_allowlist l = {0};
        struct cdn_error err;
        int r = parse_one(bad[i].entry, &l, &err);
        CHECK_EQ_INT(r, -EINVAL);
        CHECK_EQ_INT(err.errnum, EINVAL);
        CHECK_STREQ(err.field, "network.allow[0]");
        if (!strstr(err.msg, bad[i].why) || strncmp(err.msg, "network.allow[0]: '", 19) != 0) {
            printf("# entry '%s': message \"%s\" lacks \"%s\"\n", bad[i].entry, err.msg, bad[i].why);
            CHECK(0);
        }
        CHECK(l.v == NULL); /* ret untouched on failure */
    }
}

TEST(error_names_index_and_quotes_entry)
{
    const char *v[] = {"a.com", "b.com", "10.0.0.0/33", "also-bad:0", NULL};
    struct cdn_allowlist l;
    struct cdn_error err;
    CHECK_EQ_INT(parse(v, &l, &err), -EINVAL);
    CHECK_STREQ(err.field, "network.allow[2]");
    CHECK_STREQ(err.msg, "network.allow[2]: '10.0.0.0/33': prefix length must be 0..32");
    CHECK(cdn_allowlist_parse(NULL, &l, NULL) == 0); /* a NULL err is allowed */
    const char *w[] = {"x:0", NULL};
    struct cdn_strv sv = {(char **) w, 1};
    CHECK_EQ_INT(cdn_allowlist_parse(&sv, &l, NULL), -EINVAL);
}

TEST(error_message_stays_one_line)
{
    struct cdn_allowlist l;
    struct cdn_error err;
    CHECK_EQ_INT(parse_one("evil\ninjected\r.com", &l, &err), -EINVAL);
    CHECK(!strchr(err.msg, '\n') && !strchr(err.msg, '\r'));
    CHECK(strstr(err.msg, "'evil?injected?.com'"));
    char longname[400];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CHECK_EQ_INT(parse_one(longname, &l, &err), -EINVAL);
    CHECK(strstr(err.msg, "...'"));
    CHECK(strlen(err.msg) < 200);
}

TEST(dns_name_rules)
{
    char label63[64], name253[254], name254[255], out[256];
    memset(label63, 'a', 63);
    label63[63] = 0;
    /* 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253 */
    snprintf(name253, sizeof name253, "%s.%s.%s.%.61s", label63, label63, label63, label63);
    CHECK_EQ_INT(strlen(name253), 253);
    snprintf(name254, sizeof name254, "%s.%s.%s.%.62s", label63, label63, label63, label63);
    CHECK(cdn_dns_name_valid(label63));
    CHECK(cdn_dns_name_valid(name253));
    CHECK(!cdn_dns_name_valid(name254));
    char dotted[256];
    snprintf(dotted, sizeof dotted, "%s.", name253);
    CHECK(cdn_dns_name_valid(dotted));
    CHECK(cdn_dns_name_normalize(dotted, out));
    CHECK_STREQ(out, name253);
    CHECK(!cdn_dns_name_valid(""));
    CHECK(!cdn_dns_name_valid("."));
    CHECK(!cdn_dns_name_valid("a.."));
    CHECK(!cdn_dns_name_valid(NULL));
    CHECK(!cdn_dns_name_valid("a.b-"));
    CHECK(!cdn_dns_name_valid("a/b"));
    CHECK(cdn_dns_name_valid("_srv._tcp.Example.com."));
    CHECK(cdn_dns_name_normalize("WWW.Example.COM.", out));
    CHECK_STREQ(out, "www.example.com");
    strcpy(out, "untouched");
    CHECK(!cdn_dns_name_normalize("bad name", out));
    CHECK_STREQ(out, "untouched");
}

TEST(ipv4_strict_parse)
{
    uint32_t a = 0;
    CHECK(cdn_ipv4_parse("1.2.3.4", &a) && a == 0x01020304);
    CHECK(cdn_ipv4_parse("0.0.0.0", &a) && a == 0);
    CHECK(cdn_ipv4_parse("255.255.255.255", &a) && a == 0xffffffff);
    static const char *bad[] = {"",         "1.2.3",      "1.2.3.4.",  "1.2.3.4 ", " 1.2.3.4",
                                "01.2.3.4", "1.2.3.256",  "1.2.3.0x1", "1..3.4",   "1.2.3.4/32",
                                "1.2.3.-4", "1.2.3.1000", "a.b.c.d"};
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        a = 42;
        CHECK(!cdn_ipv4_parse(bad[i], &a));
        CHECK_EQ_INT(a, 42);
    }
    CHECK(cdn_name_looks_numeric("10.1"));
    CHECK(cdn_name_looks_numeric("0x7f.1"));
    CHECK(cdn_name_looks_numeric("0X7F"));
    CHECK(cdn_name_looks_numeric("1.2.3.4."));
    CHECK(cdn_name_looks_numeric("example.0x"));
    CHECK(!cdn_name_looks_numeric("example.com"));
    CHECK(!cdn_name_looks_numeric("1.2.3.com"));
    CHECK(!cdn_name_looks_numeric("1e10"));
    CHECK(!cdn_name_looks_numeric(""));
    CHECK(!cdn_name_looks_numeric("a."));
}

TEST(glob_matches_strictly_below)
{
    struct cdn_allowlist l;
    struct cdn_error err;
    CHECK_EQ_INT(parse_one("*.example.com", &l, &err), 0);
    CHECK(cdn_allowlist_match_name(&l, "a.example.com", 443));
    CHECK(cdn_allowlist_match_name(&l, "a.b.example.com", 80));
    CHECK(cdn_allowlist_match_name(&l, "A.Example.COM.", 0));
    CHECK(!cdn_allowlist_match_name(&l, "example.com", 443));
    CHECK(!cdn_allowlist_match_name(&l, "example.com.", 443));
    CHECK(!cdn_allowlist_match_name(&l, "badexample.com", 443));
    CHECK(!cdn_allowlist_match_name(&l, "a.badexample.com", 443));
    CHECK(!cdn_allowlist_match_name(&l, "example.com.evil.org", 443));
    CHECK(!cdn_allowlist_match_name(&l, ".example.com", 443));
    CHECK(!cdn_allowlist_match_name(&l, "a.example.co", 443));
    CHECK(!cdn_allowlist_match_name(&l, "a.example.com", 8080)); /* default ports only */
    CHECK(!cdn_allowlist_match_name(&l, "a b.example.com", 443));
    CHECK(!cdn_allowlist_match_name(&l, NULL, 443));
    CHECK(!cdn_allowlist_match_ip(&l, 0x5db8d822, 0)); /* a glob is not a CIDR */
    cdn_allowlist_free(&l);
}

TEST(name_matches_exactly)
{
    struct cdn_allowlist l;
    struct cdn_error err;
    CHECK_EQ_INT(parse_one("PyPI.org.", &l, &err), 0);
    CHECK(cdn_allowlist_match_name(&l, "pypi.org", 443));
    CHECK(cdn_allowlist_match_name(&l, "PYPI.ORG.", 80));
    CHECK(!cdn_allowlist_match_name(&l, "www.pypi.org", 443));
    CHECK(!cdn_allowlist_match_name(&l, "pypi.org.evil", 443));
    CHECK(!cdn_allowlist_match_name(&l, "ypi.org", 443));
    CHECK(!cdn_allowlist_match_name(&l, "pypi.org..", 443));
    cdn_allowlist_free(&l);
    CHECK(!cdn_allowlist_match_name(NULL, "pypi.org", 443));
}

TEST(port_rules)
{
    const char *v[] = {"a.com", "b.com:22", "c.com:8000-8100", NULL};
    struct cdn_allowlist l;
    struct cdn_error err;
    CHECK_EQ_INT(parse(v, &l, &err), 0);
    CHECK(cdn_allowlist_match_name(&l, "a.com", 80));
    CHECK(cdn_allowlist_match_name(&l, "a.com", 443));
    CHECK(cdn_allowlist_match_name(&l, "a.com", 0));
    CHECK(!cdn_allowlist_match_name(&l, "a.com", 22));
    CHECK(!cdn_allowlist_match_name(&l, "a.com", 8080));
    CHECK(cdn_allowlist_match_name(&l, "b.com", 22));
    CHECK(cdn_allowlist_match_name(&l, "b.com", 0));
    CHECK(!cdn_allowlist_match_name(&l, "b.com", 443));
    CHECK(!cdn_allowlist_match_name(&l, "b.com", 80));
    CHECK(cdn_allowlist_match_name(&l, "c.com", 8000));
    CHECK(cdn_allowlist_match_name(&l, "c.com", 8100));
    CHECK(cdn_allowlist_match_name(&l, "c.com", 8050));
    CHECK(!cdn_allowlist_match_name(&l, "c.com", 7999));
    CHECK(!cdn_allowlist_match_name(&l, "c.com", 8101));
    CHECK(!cdn_allowlist_match_name(&l, "c.com", 443));
    CHECK(cdn_allow_entry_port(&l.v[0], 443));
    CHECK(!cdn_allow_entry_port(&l.v[1], 65535));
    cdn_allowlist_free(&l);
}

TEST(cidr_matching)
{
    const char *v[] = {"10.1.2.3/24", "192.168.7.7:5432", "169.254.169.254/32:80", NULL};
    struct cdn_allowlist l;
    struct cdn_error err;
    CHECK_EQ_INT(parse(v, &l, &err), 0);
    CHECK(cdn_allowlist_match_ip(&l, 0x0a010200, 443));
    CHECK(cdn_allowlist_match_ip(&l, 0x0a0102ff, 80));
    CHECK(!cdn_allowlist_match_ip(&l, 0x0a010300, 80));
    CHECK(!cdn_allowlist_match_ip(&l, 0x0a0102ff, 22));
    CHECK(cdn_allowlist_match_ip(&l, 0xc0a80707, 5432));
    CHECK(!cdn_allowlist_match_ip(&l, 0xc0a80708, 5432));
    CHECK(!cdn_allowlist_match_ip(&l, 0xc0a80707, 443));
    CHECK(cdn_allowlist_match_ip(&l, 0xa9fea9fe, 80));
    CHECK(!cdn_allowlist_match_ip(&l, 0xa9fea9fe, 443));
    CHECK(cdn_allowlist_match_ip(&l, 0xa9fea9fe, 0));
    CHECK(!cdn_allowlist_match_name(&l, "10.1.2.3", 80)); /* a CIDR is not a name */
    cdn_allowlist_free(&l);

    CHECK_EQ_INT(parse_one("0.0.0.0/0:443", &l, &err), 0);
    CHECK_EQ_INT(l.v[0].mask, 0);
    CHECK(cdn_allowlist_match_ip(&l, 0, 443));
    CHECK(cdn_allowlist_match_ip(&l, 0xffffffff, 443));
    CHECK(!cdn_allowlist_match_ip(&l, 0x08080808, 80));
    cdn_allowlist_free(&l);
    CHECK(!cdn_allowlist_match_ip(NULL, 1, 1));
}

/* An entry opens a reserved address only from inside its block: before,
 * 0.0.0.0/0 also opened loopback and the metadata endpoint. */
TEST(admits_ip_keeps_reserved_blocks_closed)
{
    const char *v[] = {"0.0.0.0/0:1-65535", NULL};
    struct cdn_allowlist l;
    struct cdn_error err;
    CHECK_EQ_INT(parse(v, &l, &err), 0);
    CHECK(cdn_allowlist_admits_ip(&l, 0x08080808, 53));  /* 8.8.8.8: public */
    CHECK(!cdn_allowlist_admits_ip(&l, 0x7f000001, 80)); /* loopback */
    CHECK(!cdn_allowlist_admits_ip(&l, 0xa9fea9fe, 80)); /* metadata */
    CHECK(!cdn_allowlist_admits_ip(&l, 0x0a000001, 80)); /* 10/8 */
    CHECK(!cdn_allowlist_admits_ip(&l, 0xa83f8110, 80)); /* 168.63.129.16 */
    cdn_allowlist_free(&l);
    const char *w[] = {"10.0.0.0/8:80", "169.254.169.254/32:80", "127.0.0.1/32:80", "168.63.129.16:80", NULL};
    CHECK_EQ_INT(parse(w, &l, &err), 0);
    CHECK(cdn_allowlist_admits_ip(&l, 0x0a000001, 80));
    CHECK(cdn_allowlist_admits_ip(&l, 0xa9fea9fe, 80));
    CHECK(!cdn_allowlist_admits_ip(&l, 0xa9fea9fd, 80));
    CHECK(!cdn_allowlist_admits_ip(&l, 0x7f000001, 80)); /* never */
    CHECK(!cdn_allowlist_admits_ip(&l, 0xa83f8110, 80)); /* never */
    cdn_allowlist_free(&l);
    const char *x[] = {"8.0.0.0/5:80", NULL}; /* covers 10/8 but is wider than it */
    CHECK_EQ_INT(parse(x, &l, &err), 0);
    CHECK(!cdn_allowlist_admits_ip(&l, 0x0a000001, 80));
    CHECK(cdn_allowlist_admits_ip(&l, 0x08080808, 80));
    cdn_allowlist_free(&l);
}

TEST(reserved_ranges)
{
    static const struct {
        const char *ip, *why;
    } cases[] = {
        {"0.0.0.0", "this-network"},
        {"0.255.255.255", "this-network"},
        {"127.0.0.1", "loopback"},
        {"127.255.255.254", "loopback"},
        {"10.0.0.1", "private"},
        {"10.255.255.255", "private"},
        {"172.16.0.1", "private"},
        {"172.31.255.255", "private"},
        {"172.32.0.1", NULL},
        {"172.15.255.255", NULL},
        {"192.168.1.1", "private"},
        {"192.169.0.1", NULL},
        {"100.64.0.1", "shared"},
        {"100.127.255.255", "shared"},
        {"100.128.0.1", NULL},
        {"100.63.255.255", NULL},
        {"169.254.169.254", "link-local"},
        {"169.254.0.1", "link-local"},
        {"169.255.0.1", NULL},
        {"192.0.0.8", "reserved"},
        {"192.0.1.1", NULL},
        {"240.0.0.1", "reserved"},
        {"254.1.2.3", "reserved"},
        {"224.0.0.1", "multicast"},
        {"239.255.255.250", "multicast"},
        {"255.255.255.255", "broadcast"},
        {"8.8.8.8", NULL},
        {"1.1.1.1", NULL},
        {"93.184.216.34", NULL},
        {"223.255.255.255", NULL},
        {"11.0.0.1", NULL},
        {"126.255.255.255", NULL},
        {"128.0.0.1", NULL},
    };
    for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
        uint32_t a;
        CHECK(cdn_ipv4_parse(cases[i].ip, &a));
        const char *why = cdn_ip_reserved(a);
        if (cases[i].why ? !why || strcmp(why, cases[i].why) != 0 : why != NULL) {
            printf("# %s: got %s, want %s\n", cases[i].ip, why ? why : "public",
                   cases[i].why ? cases[i].why : "public");
            CHECK(0);
        }
    }
}
