#include "net/sniff.h"
#include "shared/macro.h"
#include "tap.h"

#include <stdbool.h>
#include <stdlib.h>

/* ---- HTTP ---------------------------------------------------------------- */

static int http(const char *s, struct cdn_http_head *h)
{
    *h = (struct cdn_http_head){0};
    return cdn_sniff_http((const uint8_t *) s, strlen(s), h);
}

/* Every proper prefix of a complete head must ask for more, never decide. */
static void check_http_prefixes(const char *s)
{
    struct cdn_http_head h;
    size_t n = strlen(s);
    for (size_t k = 0; k < n; k++) {
        int r = cdn_sniff_http((const uint8_t *) s, k, &h);
        if (r != CDN_SNIFF_MORE) {
            printf("# prefix %zu of \"%.40s\": %d\n", k, s, r);
            CHECK(0);
            return;
        }
    }
}

TEST(http_host_header)
{
    struct cdn_http_head h;
    const char *s = "GET /index.html HTTP/1.1\r\nUser-Agent: x\r\nHost: Example.COM\r\nAccept: */*\r\n\r\n";
    CHECK_EQ_INT(http(s, &h), CDN_SNIFF_OK);
    CHECK_STREQ(h.method, "GET");
    CHECK_STREQ(h.host, "example.com");
    CHECK_EQ_INT(h.port, 0);
    CHECK_EQ_INT(h.connect, 0);
    CHECK_EQ_INT(h.absolute, 0);
    CHECK_EQ_INT(h.head_len, strlen(s));
    check_http_prefixes(s);
}

TEST(http_host_variants)
{
    static const struct {
        const char *head, *host;
        int port;
    } ok[] = {
        {"GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", "example.com", 8080},
        {"GET / HTTP/1.1\r\nhOsT: example.com.\r\n\r\n", "example.com", 0},
        {"GET / HTTP/1.1\r\nHOST:example.com\r\n\r\n", "example.com", 0},
        {"GET / HTTP/1.1\r\nHost: \t example.com:443 \t \r\n\r\n", "example.com", 443},
        {"GET / HTTP/1.1\r\nHost: 93.184.216.34:80\r\n\r\n", "93.184.216.34", 80},
        {"POST /x?y=1 HTTP/1.1\r\nContent-Length: 0\r\nHost: api.example\r\nX-Empty:\r\n\r\n", "api.example",
         0},
        {"OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n", "example.com", 0},
        {"GET / HTTP/1.1\r\nHost: _svc.example.com:65535\r\n\r\n", "_svc.example.com", 65535},
        {"GET / HTTP/1.1\r\nX-Bin: \x80\xff\r\nHost: x.org\r\n\r\n", "x.org", 0},
    };
    for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
        struct cdn_http_head h;
        int r = http(ok[i].head, &h);
        if (r != CDN_SNIFF_OK)
            printf("# case %zu: %d\n", i, r);
        CHECK_EQ_INT(r, CDN_SNIFF_OK);
        CHECK_STREQ(h.host, ok[i].host);
        CHECK_EQ_INT(h.port, ok[i].port);
        CHECK_EQ_INT(h.head_len, strlen(ok[i].head));
        check_http_prefixes(ok[i].head);
    }
}

TEST(http_connect)
{
    struct cdn_http_head h;
    const char *s = "CONNECT Example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n";
    CHECK_EQ_INT(http(s, &h), CDN_SNIFF_OK);
    CHECK_STREQ(h.method, "CONNECT");
    CHECK_STREQ(h.host, "example.com");
    CHECK_EQ_INT(h.port, 443);
    CHECK_EQ_INT(h.connect, 1);
    CHECK_EQ_INT(h.absolute, 0);
    check_http_prefixes(s);
    CHECK_EQ_INT(http("CONNECT example.com:443 HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_OK);
    CHECK_EQ_INT(http("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n", &h), CDN_SNIFF_OK);
    CHECK_EQ_INT(http("CONNECT 10.0.0.1:22 HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_OK);
    CHECK_STREQ(h.host, "10.0.0.1");
    CHECK_EQ_INT(h.port, 22);
    CHECK_EQ_INT(http("CONNECT example.com HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_BAD); /* port required */
    CHECK_EQ_INT(http("CONNECT example.com: HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_BAD);
    CHECK_EQ_INT(http("CONNECT /x HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_BAD);
    CHECK_EQ_INT(http("CONNECT example.com:443 HTTP/1.1\r\nHost: evil.com:443\r\n\r\n", &h), CDN_SNIFF_BAD);
    CHECK_EQ_INT(http("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:8443\r\n\r\n", &h),
                 CDN_SNIFF_BAD);
    CHECK_EQ_INT(http("CONNECT [::1]:443 HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_BAD);
}

TEST(http_absolute_uri)
{
    struct cdn_http_head h;
    const char *s = "GET http://Example.com:8080/path?q=1 HTTP/1.1\r\nHost: example.com:8080\r\n\r\n";
    CHECK_EQ_INT(http(s, &h), CDN_SNIFF_OK);
    CHECK_STREQ(h.host, "example.com");
    CHECK_EQ_INT(h.port, 8080);
    CHECK_EQ_INT(h.absolute, 1);
    CHECK_EQ_INT(h.connect, 0);
    check_http_prefixes(s);
    CHECK_EQ_INT(http("GET HTTP://example.com HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_OK);
    CHECK_STREQ(h.host, "example.com");
    CHECK_EQ_INT(h.port, 0);
    CHECK_EQ_INT(http("GET http://example.com?x HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_OK);
    CHECK_EQ_INT(http("GET http://example.com/ HTTP/1.1\r\nHost: example.com:80\r\n\r\n", &h), CDN_SNIFF_OK);
    CHECK_EQ_INT(http("GET http://example.com/ HTTP/1.1\r\nHost: EXAMPLE.com.\r\n\r\n", &h), CDN_SNIFF_OK);
    /* The URI's authority wins; a Host that names something else is BAD. */
    CHECK_EQ_INT(http("GET http://example.com/ HTTP/1.1\r\nHost: evil.com\r\n\r\n", &h), CDN_SNIFF_BAD);
    CHECK_EQ_INT(http("GET http://example.com/ HTTP/1.1\r\nHost: example.com:81\r\n\r\n", &h), CDN_SNIFF_BAD);
    CHECK_EQ_INT(http("GET http://example.com:81/ HTTP/1.1\r\nHost: example.com:80\r\n\r\n", &h),
                 CDN_SNIFF_BAD);
    CHECK_EQ_INT(http("GET http://allowed.com@evil.com/ HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_BAD);
    CHECK_EQ_INT(http("GET http://a:b@evil.com/ HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_BAD);
    CHECK_EQ_INT(http("GET http:///x HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_BAD);
    CHECK_EQ_INT(http("GET http:// HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_BAD);
    CHECK_EQ_INT(http("GET http://[::1]/ HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_BAD);
    CHECK_EQ_INT(http("GET https://example.com/ HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_BAD);
    CHECK_EQ_INT(http("GET ftp://example.com/ HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_BAD);
    CHECK_EQ_INT(http("GET example.com:80 HTTP/1.1\r\n\r\n", &h),
                 CDN_SNIFF_BAD); /* authority-form needs CONNECT */
}

TEST(http_no_host)
{
    struct cdn_http_head h;
    const char *s = "GET / HTTP/1.0\r\nAccept: */*\r\n\r\n";
    CHECK_EQ_INT(http(s, &h), CDN_SNIFF_NONE);
    CHECK_STREQ(h.method, "GET");
    CHECK_STREQ(h.host, "");
    CHECK_EQ_INT(h.head_len, strlen(s));
    CHECK_EQ_INT(http("GET / HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_NONE);
    check_http_prefixes(s);
}

TEST(http_head_len_excludes_body)
{
    struct cdn_http_head h;
    const char *s = "POST /up HTTP/1.1\r\nHost: a.com\r\nContent-Length: 5\r\n\r\nhello";
    CHECK_EQ_INT(http(s, &h), CDN_SNIFF_OK);
    CHECK_EQ_INT(h.head_len, strlen(s) - 5);
    /* A body that looks like headers changes nothing. */
    CHECK_EQ_INT(http("GET / HTTP/1.1\r\nHost: a.com\r\n\r\nHost: b.com\r\n\r\n", &h), CDN_SNIFF_OK);
    CHECK_STREQ(h.host, "a.com");
}

TEST(http_bad)
{
    static const char *bad[] = {
        "GET / HTTP/1.1\r\nHost: a.com\r\nHost: a.com\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.com\r\nhost: b.com\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: 10.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: 0x7f.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: 2130706433\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: 010.0.0.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a b.com\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a..com\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: \r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.com:\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.com:0\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.com:65536\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.com:+80\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.com:80x\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.com:80:80\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.com:000080\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: user@a.com\r\n\r\n",
        "GET / HTTP/1.1\r\nHost : a.com\r\n\r\n",      /* blank before ':' */
        "GET / HTTP/1.1\r\nHost: a.com\r\n x\r\n\r\n", /* obsolete folding */
        "GET / HTTP/1.1\r\nX-A: a\x01b\r\nHost: a.com\r\n\r\n",
        "GET / HTTP/1.1\r\nX-A: a\rb\r\nHost: a.com\r\n\r\n",
        "GET / HTTP/1.1\r\nNoColon\r\n\r\n",
        "GET / HTTP/1.1\r\n: empty-name\r\n\r\n",
        "GET / HTTP/2.0\r\nHost: a.com\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "GET / HTTP/1.1x\r\nHost: a.com\r\n\r\n",
        "GET / http/1.1\r\nHost: a.com\r\n\r\n",
        "GET  / HTTP/1.1\r\nHost: a.com\r\n\r\n",
        "GET / HTTP/1.1 \r\nHost: a.com\r\n\r\n",
        "GET /\x01 HTTP/1.1\r\nHost: a.com\r\n\r\n",
        "GET / \r\n\r\n",
        "GET /\r\n\r\n",
        "GET * HTTP/1.1\r\nHost: a.com\r\n\r\n", /* asterisk-form is for OPTIONS only */
        "GET / HTTP/1.2\r\nHost: a.com\r\n\r\n",
        /* Request smuggling: heads that two servers could frame differently. */
        "GET / HTTP/1.0\nHost: a.b.example\n\n",       /* bare LF */
        "GET / HTTP/1.1\r\nHost: a.com\nX: y\r\n\r\n", /* bare LF inside the head */
        "GET / HTTP/1.1\r\nHost: a.com\r\n\n",         /* bare LF ends it */
        "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: 3, 3\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: +3\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: 03\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: 0x10\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: \r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: 99999999999999999\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length : 3\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nContent_Length: 3\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer_Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: xchunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: identity\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding:\x0b chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n x\r\n\r\n",
        "POST / HTTP/1.0\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.com\r\nContent-Length: 5\r\n\r\n", /* content on GET (CL.0) */
        "HEAD / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n",
        "CONNECT a.com:443 HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
    };
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        struct cdn_http_head h;
        int r = http(bad[i], &h);
        if (r != CDN_SNIFF_BAD)
            printf("# case %zu \"%.40s\": %d\n", i, bad[i], r);
        CHECK_EQ_INT(r, CDN_SNIFF_BAD);
    }
}

TEST(http_body_framing)
{
    struct cdn_http_head h;
    CHECK_EQ_INT(http("POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: 12\r\n\r\n", &h), CDN_SNIFF_OK);
    CHECK_EQ_INT(h.body, CDN_HTTP_BODY_LENGTH);
    CHECK(h.content_length == 12);
    CHECK_EQ_INT(http("PUT / HTTP/1.1\r\nHost: a.com\r\ntransfer-encoding: Chunked\r\n\r\n", &h),
                 CDN_SNIFF_OK);
    CHECK_EQ_INT(h.body, CDN_HTTP_BODY_CHUNKED);
    CHECK_EQ_INT(http("GET / HTTP/1.1\r\nHost: a.com\r\nContent-Length: 0\r\n\r\n", &h), CDN_SNIFF_OK);
    CHECK_EQ_INT(h.body, CDN_HTTP_BODY_NONE);
    CHECK_EQ_INT(http("GET / HTTP/1.1\r\nHost: a.com\r\n\r\n", &h), CDN_SNIFF_OK);
    CHECK_EQ_INT(h.body, CDN_HTTP_BODY_NONE);
}

/* Feed a whole stream; returns the kinds seen as letters (H head, P pass,
 * D drop, M more at the end, N no host, B bad) and the hosts of the heads. */
static void stream(const char *s, size_t n, char *kinds, char *hosts)
{
    struct cdn_http_stream st = {0};
    size_t off = 0, k = 0;
    hosts[0] = 0;
    for (;;) {
        struct cdn_http_head h;
        size_t len = 0;
        int r = cdn_http_stream_next(&st, (const uint8_t *) s + off, n - off, &h, &len);
        kinds[k] = "MHPDNB"[r];
        kinds[k + 1] = 0;
        k += k < 62; /* a long stream: the last verdict stays in the last place */
        if (r == CDN_HTTP_HEAD) {
            strcat(hosts, h.host);
            strcat(hosts, " ");
        }
        if (r != CDN_HTTP_HEAD && r != CDN_HTTP_PASS && r != CDN_HTTP_DROP)
            break;
        off += len;
    }
}

TEST(http_stream_pipelined_and_keepalive)
{
    char kinds[64], hosts[256];
    const char *s = "GET / HTTP/1.1\r\nHost: a.com\r\n\r\n"
                    "POST /x HTTP/1.1\r\nHost: b.com\r\nContent-Length: 34\r\n\r\n"
                    "GET / HTTP/1.1\r\nHost: evil.com\r\n\r\n" /* content: never read as a head */
                    "\r\n"
                    "PUT /y HTTP/1.1\r\nHost: c.com\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "5;ext=1\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n"
                    "GET / HTTP/1.1\r\nHost: d.com\r\n\r\n";
    stream(s, strlen(s), kinds, hosts);
    CHECK_STREQ(hosts, "a.com b.com c.com d.com ");
    CHECK_STREQ(kinds, "HHPDHPPPPPPHM");
    /* Byte by byte: the same verdicts, never a head that the whole stream did not have. */
    struct cdn_http_stream st = {0};
    size_t off = 0, avail = 0, heads = 0;
    while (off < strlen(s)) {
        struct cdn_http_head h;
        size_t len;
        int r = cdn_http_stream_next(&st, (const uint8_t *) s + off, avail - off, &h, &len);
        if (r == CDN_HTTP_MORE) {
            avail++;
            continue;
        }
        CHECK(r == CDN_HTTP_HEAD || r == CDN_HTTP_PASS || r == CDN_HTTP_DROP);
        if (r == CDN_HTTP_BAD)
            break;
        heads += r == CDN_HTTP_HEAD;
        off += len;
    }
    CHECK_EQ_INT(heads, 4);
}

TEST(http_stream_refuses_what_could_be_read_two_ways)
{
    static const char *bad[] = {
        /* a second head with another smuggling trick */
        "GET / HTTP/1.1\r\nHost: a.com\r\n\r\nGET / HTTP/1.1\nHost: evil.com\n\n",
        "GET / HTTP/1.1\r\nHost: a.com\r\n\r\n\nGET / HTTP/1.1\r\nHost: evil.com\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.com\r\n\r\n\rGET / HTTP/1.1\r\nHost: evil.com\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.com\r\n\r\nGARBAGE\x01\r\n\r\n",
        /* chunk framing */
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n\r\nhello\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n5;a\nb\r\nhello\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n5;a\rb\r\nhello\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffff\r\nx",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nHost: evil.com\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nContent-Length: 9\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n x\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: y\n\r\n",
    };
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        char kinds[64], hosts[256];
        stream(bad[i], strlen(bad[i]), kinds, hosts);
        size_t k = strlen(kinds);
        if (kinds[k - 1] != 'B' || strstr(hosts, "evil"))
            printf("# case %zu: %s (%s)\n", i, kinds, hosts);
        CHECK(kinds[k - 1] == 'B');
        CHECK(!strstr(hosts, "evil"));
    }
    /* A chunk-size line that never ends, and trailers that never end. */
    char *big = malloc(40000);
    strcpy(big, "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n5;");
    memset(big + strlen(big), 'x', 2000);
    big[strlen("POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n5;") + 2000] = 0;
    char kinds[64], hosts[256];
    stream(big, strlen(big), kinds, hosts);
    CHECK_STREQ(kinds, "HB");
    strcpy(big, "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n");
    for (int i = 0; i < 2000; i++)
        strcat(big, "X-T: 0123456789\r\n");
    stream(big, strlen(big), kinds, hosts);
    CHECK(kinds[strlen(kinds) - 1] == 'B');
    free(big);
}

TEST(http_stream_raw_content_passes_unread)
{
    struct cdn_http_stream st = {0};
    struct cdn_http_head h;
    size_t len;
    const char *head = "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: 100000\r\n\r\n";
    CHECK_EQ_INT(cdn_http_stream_next(&st, (const uint8_t *) head, strlen(head), &h, &len), CDN_HTTP_HEAD);
    CHECK(cdn_http_stream_raw(&st) == 100000);
    cdn_http_stream_pass(&st, 99999);
    CHECK(cdn_http_stream_raw(&st) == 1);
    cdn_http_stream_pass(&st, 1);
    CHECK(cdn_http_stream_raw(&st) == 0);
    const char *next = "GET / HTTP/1.1\r\nHost: b.com\r\n\r\n";
    CHECK_EQ_INT(cdn_http_stream_next(&st, (const uint8_t *) next, strlen(next), &h, &len), CDN_HTTP_HEAD);
    CHECK_STREQ(h.host, "b.com");
    CHECK_EQ_INT(st.requests, 2);
}

TEST(http_not_http)
{
    struct cdn_http_head h;
    static const uint8_t tls[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01};
    CHECK_EQ_INT(cdn_sniff_http(tls, 1, &h), CDN_SNIFF_NOT); /* decided on the first byte */
    CHECK_EQ_INT(cdn_sniff_http(tls, sizeof tls, &h), CDN_SNIFF_NOT);
    static const uint8_t bin[] = {0x00, 0xff, 0x13, 0x37};
    CHECK_EQ_INT(cdn_sniff_http(bin, 1, &h), CDN_SNIFF_NOT);
    CHECK_EQ_INT(http("SSH-2.0-OpenSSH_9.6p1 Ubuntu\r\n", &h), CDN_SNIFF_NOT);
    CHECK_EQ_INT(cdn_sniff_http((const uint8_t *) "GE\0T / HTTP/1.1\r\n\r\n", 20, &h), CDN_SNIFF_NOT);
    CHECK_EQ_INT(http("G\xc3\xa9T / HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_NOT);
    CHECK_EQ_INT(http(" GET / HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_NOT);
    CHECK_EQ_INT(http("\r\nGET / HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_NOT);
    CHECK_EQ_INT(http("VERYLONGMETHODNAME / HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_NOT);
    CHECK_EQ_INT(http("ABCDEFGHIJKLMNO / HTTP/1.1\r\n\r\n", &h), CDN_SNIFF_NONE); /* 15 is the most */
    CHECK_EQ_INT(http("GET", &h), CDN_SNIFF_MORE);
    CHECK_EQ_INT(http("", &h), CDN_SNIFF_MORE);
}

TEST(http_size_bound)
{
    struct cdn_http_head h;
    size_t n = CDN_SNIFF_HTTP_MAX + 100;
    char *s = malloc(n + 1);
    const char *start = "GET / HTTP/1.1\r\nHost: a.com\r\nX-Pad: ";
    memset(s, 'x', n);
    memcpy(s, start, strlen(start));
    s[n] = 0;
    /* Incomplete and still short: more; incomplete at the limit: bad. */
    CHECK_EQ_INT(cdn_sniff_http((uint8_t *) s, CDN_SNIFF_HTTP_MAX - 1, &h), CDN_SNIFF_MORE);
    CHECK_EQ_INT(cdn_sniff_http((uint8_t *) s, CDN_SNIFF_HTTP_MAX, &h), CDN_SNIFF_BAD);
    CHECK_EQ_INT(cdn_sniff_http((uint8_t *) s, n, &h), CDN_SNIFF_BAD);
    /* Complete, but longer than the limit: bad. */
    memcpy(s + n - 4, "\r\n\r\n", 4);
    CHECK_EQ_INT(cdn_sniff_http((uint8_t *) s, n, &h), CDN_SNIFF_BAD);
    /* Exactly the limit: fine. */
    memcpy(s + CDN_SNIFF_HTTP_MAX - 4, "\r\n\r\n", 4);
    CHECK_EQ_INT(cdn_sniff_http((uint8_t *) s, n, &h), CDN_SNIFF_OK);
    CHECK_EQ_INT(h.head_len, CDN_SNIFF_HTTP_MAX);
    /* No line end at all. */
    memset(s, 'A', 8);
    memset(s + 8, '/', n - 8);
    s[7] = ' ';
    CHECK_EQ_INT(cdn_sniff_http((uint8_t *) s, n, &h), CDN_SNIFF_BAD);
    free(s);
}

TEST(http_rejects_tls)
{
    char name[256];
    CHECK_EQ_INT(cdn_sniff_tls((const uint8_t *) "GET / HTTP/1.1\r\n", 16, name), CDN_SNIFF_NOT);
    CHECK_EQ_INT(cdn_sniff_tls((const uint8_t *) "G", 1, name), CDN_SNIFF_NOT);
}

/* ---- TLS ----------------------------------------------------------------- */

struct buf {
    uint8_t b[40000];
    size_t n;
};

static void put8(struct buf *b, unsigned v)
{
    b->b[b->n++] = (uint8_t) v;
}
static void put16(struct buf *b, unsigned v)
{
    put8(b, v >> 8);
    put8(b, v & 0xff);
}
static void put24(struct buf *b, unsigned v)
{
    put8(b, v >> 16);
    put16(b, v & 0xffff);
}
static void putn(struct buf *b, const void *p, size_t n)
{
    memcpy(b->b + b->n, p, n);
    b->n += n;
}

/* server_name extension with one host_name (len bytes of name). */
static void ext_sni(struct buf *b, const char *name, size_t len)
{
    put16(b, 0);       /* server_name */
    put16(b, len + 5); /* extension length */
    put16(b, len + 3); /* server_name_list length */
    put8(b, 0);        /* host_name */
    put16(b, len);
    putn(b, name, len);
}

static void ext_other(struct buf *b, unsigned type, size_t len)
{
    put16(b, type);
    put16(b, len);
    for (size_t i = 0; i < len; i++)
        put8(b, (unsigned) i);
}

/* A TLS 1.3-shaped ClientHello handshake message around an extensions block
 * (exts NULL: no extensions block at all). */
static void handshake(struct buf *hs, const struct buf *exts)
{
    struct buf body = {.n = 0};
    put16(&body, 0x0303);
    for (int i = 0; i < 32; i++)
        put8(&body, 0xa0 + i); /* random */
    put8(&body, 32);
    for (int i = 0; i < 32; i++)
        put8(&body, i); /* legacy_session_id */
    put16(&body, 6);
    put16(&body, 0x1301);
    put16(&body, 0x1302);
    put16(&body, 0xc02f);
    put8(&body, 1);
    put8(&body, 0); /* null compression */
    if (exts) {
        put16(&body, exts->n);
        putn(&body, exts->b, exts->n);
    }
    hs->n = 0;
    put8(hs, 1); /* client_hello */
    put24(hs, body.n);
    putn(hs, body.b, body.n);
}

/* Wrap a handshake in records of at most chunk bytes each. */
static void records(struct buf *out, const struct buf *hs, size_t chunk)
{
    out->n = 0;
    for (size_t off = 0; off < hs->n; off += chunk) {
        size_t len = hs->n - off < chunk ? hs->n - off : chunk;
        put8(out, 22);
        put16(out, 0x0301);
        put16(out, len);
        putn(out, hs->b + off, len);
    }
}

/* A usual hello for name, in records of chunk bytes; returns offsets of interest. */
struct hello_offsets {
    size_t ext_block, sni_ext, sni_list, sni_name;
};

static struct hello_offsets hello(struct buf *out, const char *name, size_t chunk)
{
    static struct buf exts, hs;
    exts.n = 0;
    ext_other(&exts, 0x002b, 3); /* supported_versions */
    ext_other(&exts, 0x000a, 8); /* supported_groups */
    size_t sni = exts.n;
    if (name)
        ext_sni(&exts, name, strlen(name));
    ext_other(&exts, 0x0010, 14); /* ALPN */
    handshake(&hs, &exts);
    records(out, &hs, chunk);
    /* Offsets in the single-record layout: 5 record + 4 handshake + 2+32+1+32+2+6+1+1 body. */
    size_t eb = 5 + 4 + 77;
    return (struct hello_offsets){eb, eb + 2 + sni, eb + 2 + sni + 4, eb + 2 + sni + 7};
}

static int tls(const struct buf *b, char name[256])
{
    strcpy(name, "unset");
    return cdn_sniff_tls(b->b, b->n, name);
}

static void check_tls_prefixes(const struct buf *b)
{
    char name[256];
    for (size_t k = 0; k < b->n; k++) {
        int r = cdn_sniff_tls(b->b, k, name);
        if (r != CDN_SNIFF_MORE) {
            printf("# prefix %zu of %zu: %d\n", k, b->n, r);
            CHECK(0);
            return;
        }
    }
}

TEST(tls_single_record)
{
    static struct buf b;
    char name[256];
    hello(&b, "Example.COM", 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_OK);
    CHECK_STREQ(name, "example.com");
    check_tls_prefixes(&b);
    hello(&b, "www.example.com.", 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_OK);
    CHECK_STREQ(name, "www.example.com");
    hello(&b, "93.184.216.34", 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_OK);
    CHECK_STREQ(name, "93.184.216.34");
    /* Bytes after the hello (e.g. early data) do not matter. */
    hello(&b, "a.example", 1 << 14);
    putn(&b, "\x17\x03\x03\x00\x01x", 6);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_OK);
    CHECK_STREQ(name, "a.example");
}

TEST(tls_split_records)
{
    static struct buf b;
    char name[256];
    static const size_t chunks[] = {60, 100, 7, 3, 2, 1};
    for (size_t i = 0; i < ELEMENTSOF(chunks); i++) {
        hello(&b, "split.example.org", chunks[i]);
        int r = tls(&b, name);
        if (r != CDN_SNIFF_OK)
            printf("# chunk %zu: %d\n", chunks[i], r);
        CHECK_EQ_INT(r, CDN_SNIFF_OK);
        CHECK_STREQ(name, "split.example.org");
        check_tls_prefixes(&b);
    }
}

TEST(tls_large_hello)
{
    static struct buf exts, hs, b;
    char name[256];
    exts.n = 0;
    ext_other(&exts, 0x0015, 12000); /* padding */
    ext_sni(&exts, "big.example", 11);
    handshake(&hs, &exts);
    records(&b, &hs, 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_OK);
    CHECK_STREQ(name, "big.example");
    records(&b, &hs, 5000); /* three records */
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_OK);
    check_tls_prefixes(&b);
    /* A handshake longer than the 16 KiB we reassemble. */
    exts.n = 0;
    ext_other(&exts, 0x0015, 16400);
    ext_sni(&exts, "big.example", 11);
    handshake(&hs, &exts);
    records(&b, &hs, 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
}

TEST(tls_no_sni)
{
    static struct buf exts, hs, b;
    char name[256];
    hello(&b, NULL, 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_NONE);
    CHECK_STREQ(name, "unset");
    check_tls_prefixes(&b);
    handshake(&hs, NULL); /* no extensions block */
    records(&b, &hs, 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_NONE);
    exts.n = 0; /* an empty extensions block */
    handshake(&hs, &exts);
    records(&b, &hs, 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_NONE);
    /* server_name with only a non-host_name entry */
    exts.n = 0;
    put16(&exts, 0);
    put16(&exts, 2 + 3 + 4);
    put16(&exts, 3 + 4);
    put8(&exts, 7);
    put16(&exts, 4);
    putn(&exts, "abcd", 4);
    handshake(&hs, &exts);
    records(&b, &hs, 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_NONE);
}

TEST(tls_not_tls)
{
    char name[256];
    static const uint8_t http[] = "GET / HTTP/1.1\r\n";
    CHECK_EQ_INT(cdn_sniff_tls(http, sizeof http - 1, name), CDN_SNIFF_NOT);
    static const uint8_t v2[] = {0x16, 0x02, 0x00};
    CHECK_EQ_INT(cdn_sniff_tls(v2, 2, name), CDN_SNIFF_NOT);
    static const uint8_t alert[] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28};
    CHECK_EQ_INT(cdn_sniff_tls(alert, sizeof alert, name), CDN_SNIFF_NOT);
    static const uint8_t sslv2[] = {0x80, 0x2e, 0x01, 0x03, 0x01};
    CHECK_EQ_INT(cdn_sniff_tls(sslv2, sizeof sslv2, name), CDN_SNIFF_NOT);
    CHECK_EQ_INT(cdn_sniff_tls(v2, 0, name), CDN_SNIFF_MORE);
    CHECK_EQ_INT(cdn_sniff_tls(v2, 1, name), CDN_SNIFF_MORE);
}

/* Overwrite a 16-bit big-endian field. */
static void set16(struct buf *b, size_t off, unsigned v)
{
    b->b[off] = (uint8_t) (v >> 8);
    b->b[off + 1] = (uint8_t) v;
}

static unsigned get16(const struct buf *b, size_t off)
{
    return (unsigned) b->b[off] << 8 | b->b[off + 1];
}

TEST(tls_corrupted_lengths)
{
    static struct buf b;
    char name[256];
    struct hello_offsets o = hello(&b, "example.com", 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_OK);
    const size_t fields[] = {o.ext_block, o.sni_ext + 2, o.sni_list, o.sni_name};
    for (size_t i = 0; i < ELEMENTSOF(fields); i++)
        for (int d = -2; d <= 2; d++) {
            if (d == 0)
                continue;
            hello(&b, "example.com", 1 << 14);
            set16(&b, fields[i], get16(&b, fields[i]) + (unsigned) d);
            int r = tls(&b, name);
            if (r != CDN_SNIFF_BAD)
                printf("# field at %zu %+d: %d\n", fields[i], d, r);
            CHECK_EQ_INT(r, CDN_SNIFF_BAD);
        }
    /* Lengths pointing far past the end. */
    static const size_t far[] = {0, 1, 2};
    for (size_t i = 0; i < ELEMENTSOF(far); i++) {
        hello(&b, "example.com", 1 << 14);
        set16(&b, fields[far[i]], 0xffff);
        CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
    }
    /* Handshake length shorter than the body: the extensions no longer add up. */
    hello(&b, "example.com", 1 << 14);
    b.b[8] -= 1;
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
    /* Handshake length longer than what came: wait for more. */
    hello(&b, "example.com", 1 << 14);
    b.b[8] += 1;
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_MORE);
    /* Record length 0 or above 2^14. */
    hello(&b, "example.com", 1 << 14);
    set16(&b, 3, 0);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
    set16(&b, 3, 16385);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
    /* Session id longer than 32. */
    hello(&b, "example.com", 1 << 14);
    b.b[5 + 4 + 34] = 33;
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
    /* Odd or empty cipher suites; no compression method. */
    hello(&b, "example.com", 1 << 14);
    set16(&b, 5 + 4 + 35 + 32, 5);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
    set16(&b, 5 + 4 + 35 + 32, 0);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
    hello(&b, "example.com", 1 << 14);
    b.b[5 + 4 + 35 + 32 + 2 + 6] = 0;
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
    /* Not a ClientHello, or a legacy version that is not 3.x. */
    hello(&b, "example.com", 1 << 14);
    b.b[5] = 2;
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
    hello(&b, "example.com", 1 << 14);
    b.b[9] = 2;
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
    /* A second record that is not a handshake. */
    hello(&b, "example.com", 20);
    b.b[25] = 21;
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
    hello(&b, "example.com", 20);
    b.b[26] = 2;
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
}

TEST(tls_bad_names)
{
    static struct buf b;
    char name[256];
    static const char *bad[] = {"exa mple.com", "a..b",  "-a.com", "10.1",   "0x7f.1",
                                "a/b",          "[::1]", "",       "a.com\n"};
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        hello(&b, bad[i], 1 << 14);
        CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
        CHECK_STREQ(name, "unset");
    }
    /* An embedded NUL: "allowed.com\0.evil" must not read as allowed.com. */
    static struct buf exts, hs;
    exts.n = 0;
    ext_sni(&exts, "allowed.com\0.evil", 17);
    handshake(&hs, &exts);
    records(&b, &hs, 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
    /* A name longer than 253 characters. */
    char longname[300];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    for (size_t i = 50; i < sizeof longname; i += 50)
        longname[i] = '.';
    hello(&b, longname, 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
}

TEST(tls_duplicates)
{
    static struct buf exts, hs, b;
    char name[256];
    /* Two server_name extensions. */
    exts.n = 0;
    ext_sni(&exts, "a.com", 5);
    ext_sni(&exts, "b.com", 5);
    handshake(&hs, &exts);
    records(&b, &hs, 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
    /* Two host_names in one list. */
    exts.n = 0;
    put16(&exts, 0);
    put16(&exts, 2 + 8 + 8);
    put16(&exts, 8 + 8);
    put8(&exts, 0);
    put16(&exts, 5);
    putn(&exts, "a.com", 5);
    put8(&exts, 0);
    put16(&exts, 5);
    putn(&exts, "b.com", 5);
    handshake(&hs, &exts);
    records(&b, &hs, 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
    /* An empty server_name extension (what servers send back). */
    exts.n = 0;
    ext_other(&exts, 0, 0);
    handshake(&hs, &exts);
    records(&b, &hs, 1 << 14);
    CHECK_EQ_INT(tls(&b, name), CDN_SNIFF_BAD);
}

TEST(tls_every_byte_flipped_is_safe)
{
    /* Memory safety under ASan, and no name out of anything but the name bytes. */
    static struct buf b, orig;
    char name[256];
    struct hello_offsets o = hello(&orig, "flip.example", 40);
    (void) o;
    for (size_t i = 0; i < orig.n; i++)
        for (unsigned x = 1; x < 256; x <<= 1) {
            b = orig;
            b.b[i] ^= (uint8_t) x;
            int r = tls(&b, name);
            CHECK(r >= CDN_SNIFF_BAD && r <= CDN_SNIFF_NONE);
            if (r == CDN_SNIFF_OK)
                CHECK(strlen(name) == 12);
        }
}
