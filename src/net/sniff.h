/* Reading the name a connection is for, from its first bytes, without
 * terminating TLS: the HTTP request head (Host, CONNECT, absolute URI) and the
 * TLS ClientHello's server_name. Pure functions over a buffer that may hold a
 * prefix only; fuzzed (tests/fuzz/fuzz-sniff-*.c). */
#pragma once

#include <stddef.h>
#include <stdint.h>

enum cdn_sniff_result {
    CDN_SNIFF_MORE = 0, /* a valid prefix: read more (the caller bounds how much) */
    CDN_SNIFF_OK = 1,   /* found */
    CDN_SNIFF_NONE = 2, /* this protocol, but it names no host (no Host header, no SNI) */
    CDN_SNIFF_NOT = -1, /* not this protocol */
    CDN_SNIFF_BAD = -2, /* this protocol, malformed (or the name is not a valid DNS name / IPv4) */
};

#define CDN_SNIFF_HTTP_MAX 16384 /* a request head longer than this is BAD */

struct cdn_http_head {
    char method[16];
    char host[256];  /* lower case, no port, no trailing dot; a DNS name or dotted IPv4 */
    uint16_t port;   /* from Host / the authority / the URI; 0 = none given */
    int connect;     /* "CONNECT host:port HTTP/1.x" */
    int absolute;    /* "GET http://host[:port]/… HTTP/1.x" (a proxy request) */
    size_t head_len; /* bytes up to and including the empty line */
};

/* HTTP/1.x request head. With both an absolute URI and a Host header, the
 * URI's authority wins (RFC 9112 §3.2.2); a Host header that disagrees with
 * it is BAD. Duplicate Host headers are BAD. */
int cdn_sniff_http(const uint8_t *p, size_t n, struct cdn_http_head *ret);

/* TLS record(s) carrying a ClientHello: its server_name (host_name type),
 * lower case, into name (256 bytes). NONE if there is no SNI extension. */
int cdn_sniff_tls(const uint8_t *p, size_t n, char name[256]);
