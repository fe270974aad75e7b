/* Reading the name a connection is for, from its first bytes, without
 * terminating TLS: the HTTP request head (Host, CONNECT, absolute URI) and the
 * TLS ClientHello's server_name; and, for plain HTTP, where each request of a
 * keep-alive or pipelined stream ends, so that every request head on the
 * connection is read and judged, not only the first. Pure functions over a
 * buffer that may hold a prefix only; fuzzed (tests/fuzz/fuzz-sniff-*.c,
 * fuzz-http-stream.c). */
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

enum cdn_http_body_kind {
    CDN_HTTP_BODY_NONE = 0, /* no Content-Length, no Transfer-Encoding: the request has no content */
    CDN_HTTP_BODY_LENGTH,   /* Content-Length: N */
    CDN_HTTP_BODY_CHUNKED,  /* Transfer-Encoding: chunked */
};

#define CDN_HTTP_LENGTH_MAX (1ULL << 50) /* a larger Content-Length is BAD */

struct cdn_http_head {
    char method[16];
    char host[256];  /* lower case, no port, no trailing dot; a DNS name or dotted IPv4 */
    uint16_t port;   /* from Host / the authority / the URI; 0 = none given */
    int connect;     /* "CONNECT host:port HTTP/1.x" */
    int absolute;    /* "GET http://host[:port]/… HTTP/1.x" (a proxy request) */
    size_t head_len; /* bytes up to and including the empty line */
    int body;        /* enum cdn_http_body_kind: how the request's content is framed */
    uint64_t content_length;
};

/* HTTP/1.x request head. With both an absolute URI and a Host header, the
 * URI's authority wins (RFC 9112 §3.2.2); a Host header that disagrees with
 * it is BAD. Duplicate Host headers are BAD.
 *
 * A head that two servers could read differently (request smuggling) is BAD:
 * a line ending in a bare LF or holding a bare CR, obsolete line folding,
 * blanks before a colon, a framing header spelt with '_' (Content_Length), more
 * than one Content-Length or Transfer-Encoding, both at once, a
 * Transfer-Encoding other than exactly "chunked" or in HTTP/1.0, a
 * Content-Length that is not plain decimal digits (no sign, list or leading
 * zero), content on GET, HEAD, TRACE or CONNECT (servers that ignore it read it
 * as the next request), and an HTTP version other than 1.0 and 1.1. */
int cdn_sniff_http(const uint8_t *p, size_t n, struct cdn_http_head *ret);

/* Where each request of a plain-HTTP request stream begins and ends. Fed the
 * bytes a client sends, in order, it says what the next ones are: a request
 * head (to be judged before it is passed on), content to pass as it is, CRLFs
 * between requests to drop, or that it needs more bytes. Content framed by
 * Content-Length passes without being looked at; chunked framing (chunk-size
 * lines, the CRLF after each chunk, trailers) is checked as strictly as a
 * head, so that the stream is cut where it could be read two ways. */
enum cdn_http_next {
    CDN_HTTP_MORE = 0, /* nothing can be said until more bytes come */
    CDN_HTTP_HEAD,     /* a request head of *ret_len bytes, *ret_head filled */
    CDN_HTTP_PASS,     /* *ret_len bytes of content or chunk framing: pass on */
    CDN_HTTP_DROP,     /* *ret_len bytes of CRLF before a request line: drop (RFC 9112 §2.2) */
    CDN_HTTP_NOHOST,   /* a request head naming no host */
    CDN_HTTP_BAD,      /* not HTTP, malformed or ambiguous: the stream cannot go on */
};

#define CDN_HTTP_CHUNK_LINE_MAX 1024 /* a chunk-size line (with extensions) longer than this is BAD */

struct cdn_http_stream {
    int state;         /* internal */
    uint64_t left;     /* content bytes of the body or the current chunk still to pass */
    size_t trailer;    /* trailer bytes so far */
    unsigned requests; /* heads returned so far */
};

/* What the next bytes are; p, n: what the client sent after everything
 * consumed so far (a prefix of it will do). The call consumes *ret_len bytes
 * for HEAD, PASS and DROP; MORE, NOHOST and BAD consume nothing, and after
 * NOHOST or BAD the stream is dead. */
int cdn_http_stream_next(struct cdn_http_stream *s, const uint8_t *p, size_t n,
                         struct cdn_http_head *ret_head, size_t *ret_len);
/* Content bytes that may pass now without being looked at (0 if the next
 * bytes must be read); cdn_http_stream_pass consumes k <= that many. */
uint64_t cdn_http_stream_raw(const struct cdn_http_stream *s);
void cdn_http_stream_pass(struct cdn_http_stream *s, uint64_t k);

/* TLS record(s) carrying a ClientHello: its server_name (host_name type),
 * lower case, into name (256 bytes). NONE if there is no SNI extension. */
int cdn_sniff_tls(const uint8_t *p, size_t n, char name[256]);
