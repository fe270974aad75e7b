/* Both sniffers run in the egress proxy on the first bytes a sandbox sends:
 * attacker-controlled input. Every length is checked against what the buffer
 * holds before it is used, nothing is allocated, and the only copy is into
 * fixed-size stack buffers whose bounds are checked first. */
#include "sniff.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "core/allow.h"

#define TLS_RECORD_MAX    16384 /* plaintext record limit (RFC 8446 §5.1) */
#define TLS_HANDSHAKE_MAX 16384 /* the most of a ClientHello we reassemble */

/* A DNS name or a canonical dotted-quad; a name that reads as a number but is
 * not canonical ("10.1", "0x7f.1") is refused rather than left to a resolver. */
static bool host_normalize(const char *h, char out[256])
{
    if (cdn_name_looks_numeric(h)) {
        uint32_t a;
        size_t len = strlen(h);
        if (!cdn_ipv4_parse(h, &a))
            return false;
        memcpy(out, h, len + 1);
        return true;
    }
    return cdn_dns_name_normalize(h, out);
}

/* ---- HTTP/1.x ------------------------------------------------------------ */

static bool is_tchar(uint8_t c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != 0 && strchr("!#$%&'*+-.^_`|~", c));
}

struct line {
    const uint8_t *p;
    size_t n;
};

/* The line at *pos without its CRLF: 1, or 0 if no LF yet, or -1 if the LF
 * is bare (servers disagree on whether it ends a line: refused). */
static int next_line(const uint8_t *p, size_t n, size_t *pos, struct line *ret)
{
    const uint8_t *lf = memchr(p + *pos, '\n', n - *pos);
    if (!lf)
        return 0;
    size_t end = (size_t) (lf - p);
    if (end == *pos || p[end - 1] != '\r')
        return -1;
    ret->p = p + *pos;
    ret->n = end - 1 - *pos;
    *pos = end + 1;
    return 1;
}

/* "host[:port]" (n bytes, not NUL-terminated). An IPv6 literal, userinfo, an
 * empty or non-numeric port and anything that is not a valid host all fail. */
static bool parse_authority(const uint8_t *s, size_t n, bool need_port, char host[256], uint16_t *ret_port)
{
    if (n == 0 || s[0] == '[')
        return false;
    const uint8_t *colon = memchr(s, ':', n);
    size_t hn = colon ? (size_t) (colon - s) : n;
    uint16_t port = 0;
    if (colon && !cdn_port_parse((const char *) colon + 1, n - hn - 1, &port))
        return false;
    if ((need_port && !colon) || hn == 0 || hn > 254 || memchr(s, 0, hn))
        return false;
    char buf[256];
    memcpy(buf, s, hn);
    buf[hn] = 0;
    if (!host_normalize(buf, host))
        return false;
    *ret_port = port;
    return true;
}

/* The method token and its SP. NOT as soon as a byte cannot belong to one, so
 * a TLS record or binary junk is told apart after a byte or two. */
static int sniff_method(const uint8_t *p, size_t n, char method[16])
{
    for (size_t i = 0; i < n && i < 16; i++) {
        if (p[i] == ' ' && i > 0) {
            memcpy(method, p, i);
            method[i] = 0;
            return CDN_SNIFF_OK;
        }
        if (!is_tchar(p[i]))
            return CDN_SNIFF_NOT;
    }
    return n < 16 ? CDN_SNIFF_MORE : CDN_SNIFF_NOT;
}

struct http_state {
    struct cdn_http_head h;
    bool have_authority; /* CONNECT or absolute URI: h.host/h.port come from it */
    bool have_host_hdr;
    char host_hdr[256];
    uint16_t host_hdr_port;
    int minor; /* HTTP/1.minor */
    bool have_length, have_te;
};

static bool visible(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x21 || p[i] > 0x7e)
            return false;
    return n > 0;
}

static int parse_request_line(struct line l, struct http_state *st)
{
    size_t m = strlen(st->h.method); /* l.p[m] is the SP sniff_method found */
    if (l.n <= m)
        return CDN_SNIFF_BAD;
    const uint8_t *t = l.p + m + 1, *end = l.p + l.n;
    const uint8_t *sp = memchr(t, ' ', (size_t) (end - t));
    if (!sp)
        return CDN_SNIFF_BAD;
    size_t tn = (size_t) (sp - t), vn = (size_t) (end - sp - 1);
    if (!visible(t, tn) || vn != 8 || memcmp(sp + 1, "HTTP/1.", 7) != 0 || (sp[8] != '0' && sp[8] != '1'))
        return CDN_SNIFF_BAD;
    st->minor = sp[8] - '0';

    if (strcmp(st->h.method, "CONNECT") == 0) {
        st->h.connect = 1;
        st->have_authority = true;
        return parse_authority(t, tn, true, st->h.host, &st->h.port) ? CDN_SNIFF_OK : CDN_SNIFF_BAD;
    }
    if (t[0] == '/' || (tn == 1 && t[0] == '*' && strcmp(st->h.method, "OPTIONS") == 0))
        return CDN_SNIFF_OK;
    if (tn < 7 || strncasecmp((const char *) t, "http://", 7) != 0)
        return CDN_SNIFF_BAD;
    const uint8_t *a = t + 7;
    size_t an = 0;
    while (an < tn - 7 && a[an] != '/' && a[an] != '?' && a[an] != '#')
        an++;
    if (memchr(a, '@', an)) /* userinfo: "http://allowed@evil/" reads differently to different parsers */
        return CDN_SNIFF_BAD;
    st->h.absolute = 1;
    st->have_authority = true;
    return parse_authority(a, an, false, st->h.host, &st->h.port) ? CDN_SNIFF_OK : CDN_SNIFF_BAD;
}

/* Is the field name (n bytes) `want`, case-insensitively? *odd is set when it
 * is, but only once '_' is read as '-': some servers map one to the other. */
static bool field_is(const uint8_t *p, size_t n, const char *want, bool *odd)
{
    size_t k = strlen(want);
    if (n != k)
        return false;
    bool underscore = false;
    for (size_t i = 0; i < k; i++) {
        uint8_t c = p[i] >= 'A' && p[i] <= 'Z' ? (uint8_t) (p[i] - 'A' + 'a') : p[i];
        if (c == '_' && want[i] == '-')
            underscore = true;
        else if (c != (uint8_t) want[i])
            return false;
    }
    *odd = underscore;
    return true;
}

/* Content-Length: 1*DIGIT, no leading zero but "0", at most CDN_HTTP_LENGTH_MAX. */
static bool parse_length(const uint8_t *p, size_t n, uint64_t *ret)
{
    if (n == 0 || n > 16 || (n > 1 && p[0] == '0'))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (uint64_t) (p[i] - '0');
    }
    if (v > CDN_HTTP_LENGTH_MAX)
        return false;
    *ret = v;
    return true;
}

/* A field line "name: value" (obs-fold, blanks before ':' and control bytes in
 * the value refused): the name's length and the value's bounds, or false. */
static bool split_field(struct line l, size_t *ret_name, size_t *ret_vs, size_t *ret_ve)
{
    size_t i = 0;
    while (i < l.n && is_tchar(l.p[i]))
        i++;
    /* No name (this also refuses obsolete line folding) or blanks before ':'. */
    if (i == 0 || i == l.n || l.p[i] != ':')
        return false;
    size_t vs = i + 1, ve = l.n;
    while (vs < ve && (l.p[vs] == ' ' || l.p[vs] == '\t'))
        vs++;
    while (ve > vs && (l.p[ve - 1] == ' ' || l.p[ve - 1] == '\t'))
        ve--;
    for (size_t k = vs; k < ve; k++)
        if ((l.p[k] < 0x20 && l.p[k] != '\t') || l.p[k] == 0x7f)
            return false;
    *ret_name = i;
    *ret_vs = vs;
    *ret_ve = ve;
    return true;
}

static int parse_header(struct line l, struct http_state *st)
{
    size_t nn, vs, ve;
    bool odd = false;
    if (!split_field(l, &nn, &vs, &ve))
        return CDN_SNIFF_BAD;
    if (field_is(l.p, nn, "content-length", &odd)) {
        if (odd || st->have_length || !parse_length(l.p + vs, ve - vs, &st->h.content_length))
            return CDN_SNIFF_BAD;
        st->have_length = true;
        return CDN_SNIFF_OK;
    }
    if (field_is(l.p, nn, "transfer-encoding", &odd)) {
        if (odd || st->have_te || ve - vs != 7 || strncasecmp((const char *) l.p + vs, "chunked", 7) != 0)
            return CDN_SNIFF_BAD;
        st->have_te = true;
        return CDN_SNIFF_OK;
    }
    if (!field_is(l.p, nn, "host", &odd))
        return CDN_SNIFF_OK;
    if (st->have_host_hdr)
        return CDN_SNIFF_BAD;
    st->have_host_hdr = true;
    return parse_authority(l.p + vs, ve - vs, false, st->host_hdr, &st->host_hdr_port) ? CDN_SNIFF_OK
                                                                                       : CDN_SNIFF_BAD;
}

/* How the content is framed; false if it could be read two ways. */
static bool settle_body(struct http_state *st)
{
    static const char *const no_content[] = {"GET", "HEAD", "TRACE", "CONNECT"};
    if (st->have_te && (st->have_length || st->minor == 0))
        return false; /* RFC 9112 §6.1, §6.3: both, or chunked in 1.0, is faulty framing */
    st->h.body = st->have_te                               ? CDN_HTTP_BODY_CHUNKED
                 : st->have_length && st->h.content_length ? CDN_HTTP_BODY_LENGTH
                                                           : CDN_HTTP_BODY_NONE;
    for (size_t i = 0; st->h.body != CDN_HTTP_BODY_NONE && i < 4; i++)
        if (strcmp(st->h.method, no_content[i]) == 0)
            return false;
    return true;
}

/* The whole head is in: settle which name it is for. */
static int http_finish(struct http_state *st, struct cdn_http_head *ret)
{
    if (!settle_body(st))
        return CDN_SNIFF_BAD;
    if (st->have_authority && st->have_host_hdr) {
        /* The authority wins, and a Host naming something else is an attempt to confuse. */
        uint16_t port = st->h.port ? st->h.port : 80;
        if (strcmp(st->host_hdr, st->h.host) != 0 || (st->host_hdr_port && st->host_hdr_port != port))
            return CDN_SNIFF_BAD;
    } else if (st->have_host_hdr) {
        memcpy(st->h.host, st->host_hdr, sizeof st->h.host);
        st->h.port = st->host_hdr_port;
    }
    *ret = st->h;
    return st->have_authority || st->have_host_hdr ? CDN_SNIFF_OK : CDN_SNIFF_NONE;
}

int cdn_sniff_http(const uint8_t *p, size_t n, struct cdn_http_head *ret)
{
    struct http_state st = {0};
    int r = sniff_method(p, n, st.h.method);
    if (r != CDN_SNIFF_OK)
        return r;
    size_t limit = n < CDN_SNIFF_HTTP_MAX ? n : CDN_SNIFF_HTTP_MAX;
    size_t pos = 0;
    struct line l;
    int got = next_line(p, limit, &pos, &l);
    if (got <= 0)
        return got < 0 || limit == CDN_SNIFF_HTTP_MAX ? CDN_SNIFF_BAD : CDN_SNIFF_MORE;
    r = parse_request_line(l, &st);
    if (r != CDN_SNIFF_OK)
        return r;
    while ((got = next_line(p, limit, &pos, &l)) > 0) {
        if (l.n == 0) {
            st.h.head_len = pos;
            return http_finish(&st, ret);
        }
        r = parse_header(l, &st);
        if (r != CDN_SNIFF_OK)
            return r;
    }
    return got < 0 || limit == CDN_SNIFF_HTTP_MAX ? CDN_SNIFF_BAD : CDN_SNIFF_MORE;
}

/* ---- HTTP/1.x request streams --------------------------------------------- */

enum { S_HEAD = 0, S_DATA, S_CHUNK_SIZE, S_CHUNK_DATA, S_CHUNK_END, S_TRAILER, S_DEAD };

static int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* "1*HEXDIG [ ';' ext ] CRLF" with no blanks and no control bytes in ext. */
static bool parse_chunk_size(struct line l, uint64_t *ret)
{
    size_t i = 0;
    uint64_t v = 0;
    for (; i < l.n && hexval(l.p[i]) >= 0; i++) {
        if (i >= 12) /* 2^48: far beyond any real chunk, and no overflow */
            return false;
        v = v << 4 | (uint64_t) hexval(l.p[i]);
    }
    if (i == 0 || (i < l.n && l.p[i] != ';'))
        return false;
    for (; i < l.n; i++)
        if (l.p[i] < 0x20 || l.p[i] == 0x7f)
            return false;
    *ret = v;
    return true;
}

/* A trailer field: a field line as in a head; none of the names that decide
 * framing or routing, which a server could merge into the head. */
static bool trailer_ok(struct line l)
{
    static const char *const banned[] = {"host", "content-length", "transfer-encoding"};
    size_t nn, vs, ve;
    bool odd;
    if (!split_field(l, &nn, &vs, &ve))
        return false;
    for (size_t i = 0; i < 3; i++)
        if (field_is(l.p, nn, banned[i], &odd))
            return false;
    return true;
}

/* The next line of chunk framing: 1 with it, 0 for more, -1 if bad (a bare
 * LF, or no LF within max bytes). */
static int framing_line(const uint8_t *p, size_t n, size_t max, struct line *l, size_t *used)
{
    size_t pos = 0, lim = n < max ? n : max;
    int r = next_line(p, lim, &pos, l);
    if (r == 0)
        return n >= max ? -1 : 0;
    *used = pos;
    return r;
}

static int stream_head(struct cdn_http_stream *s, const uint8_t *p, size_t n, struct cdn_http_head *ret_head,
                       size_t *ret_len)
{
    size_t crlf = 0;
    while (crlf + 1 < n && p[crlf] == '\r' && p[crlf + 1] == '\n')
        crlf += 2;
    if (crlf) {
        *ret_len = crlf;
        return CDN_HTTP_DROP;
    }
    if (n == 1 && p[0] == '\r')
        return CDN_HTTP_MORE;
    struct cdn_http_head h;
    int r = cdn_sniff_http(p, n, &h);
    if (r == CDN_SNIFF_MORE)
        return CDN_HTTP_MORE;
    if (r != CDN_SNIFF_OK) {
        s->state = S_DEAD;
        return r == CDN_SNIFF_NONE ? CDN_HTTP_NOHOST : CDN_HTTP_BAD;
    }
    s->requests++;
    s->state = h.body == CDN_HTTP_BODY_CHUNKED  ? S_CHUNK_SIZE
               : h.body == CDN_HTTP_BODY_LENGTH ? S_DATA
                                                : S_HEAD;
    s->left = h.body == CDN_HTTP_BODY_LENGTH ? h.content_length : 0;
    s->trailer = 0;
    *ret_head = h;
    *ret_len = h.head_len;
    return CDN_HTTP_HEAD;
}

/* Chunk framing: a size line, the CRLF after a chunk, a trailer line. */
static int stream_framing(struct cdn_http_stream *s, const uint8_t *p, size_t n, size_t *ret_len)
{
    struct line l;
    size_t used = 0;
    int r;
    switch (s->state) {
    case S_CHUNK_SIZE:
        r = framing_line(p, n, CDN_HTTP_CHUNK_LINE_MAX, &l, &used);
        if (r > 0 && !parse_chunk_size(l, &s->left))
            r = -1;
        if (r > 0)
            s->state = s->left ? S_CHUNK_DATA : S_TRAILER;
        break;
    case S_CHUNK_END:
        r = n >= 2 ? (p[0] == '\r' && p[1] == '\n' ? 1 : -1) : n == 1 && p[0] != '\r' ? -1 : 0;
        used = 2;
        if (r > 0)
            s->state = S_CHUNK_SIZE;
        break;
    default: /* S_TRAILER */
        r = framing_line(p, n, CDN_SNIFF_HTTP_MAX - s->trailer, &l, &used);
        if (r > 0 && l.n > 0 && !trailer_ok(l))
            r = -1;
        if (r > 0) {
            s->trailer += used;
            s->state = l.n == 0 ? S_HEAD : S_TRAILER;
        }
        break;
    }
    if (r < 0) {
        s->state = S_DEAD;
        return CDN_HTTP_BAD;
    }
    if (r == 0)
        return CDN_HTTP_MORE;
    *ret_len = used;
    return CDN_HTTP_PASS;
}

uint64_t cdn_http_stream_raw(const struct cdn_http_stream *s)
{
    return s->state == S_DATA || s->state == S_CHUNK_DATA ? s->left : 0;
}

void cdn_http_stream_pass(struct cdn_http_stream *s, uint64_t k)
{
    if (k > cdn_http_stream_raw(s))
        k = cdn_http_stream_raw(s);
    s->left -= k;
    if (s->left == 0 && s->state == S_DATA)
        s->state = S_HEAD;
    else if (s->left == 0 && s->state == S_CHUNK_DATA)
        s->state = S_CHUNK_END;
}

int cdn_http_stream_next(struct cdn_http_stream *s, const uint8_t *p, size_t n,
                         struct cdn_http_head *ret_head, size_t *ret_len)
{
    if (s->state == S_DEAD)
        return CDN_HTTP_BAD;
    if (n == 0)
        return CDN_HTTP_MORE;
    uint64_t raw = cdn_http_stream_raw(s);
    if (raw) {
        size_t k = raw < n ? (size_t) raw : n;
        cdn_http_stream_pass(s, k);
        *ret_len = k;
        return CDN_HTTP_PASS;
    }
    if (s->state == S_HEAD)
        return stream_head(s, p, n, ret_head, ret_len);
    return stream_framing(s, p, n, ret_len);
}

/* ---- TLS ClientHello ----------------------------------------------------- */

/* A bounds-checked reader over bytes already known to be in memory. */
struct rd {
    const uint8_t *p;
    size_t n, off;
};

static bool rd_u8(struct rd *r, size_t *v)
{
    if (r->n - r->off < 1)
        return false;
    *v = r->p[r->off++];
    return true;
}

static bool rd_u16(struct rd *r, size_t *v)
{
    if (r->n - r->off < 2)
        return false;
    *v = (size_t) r->p[r->off] << 8 | r->p[r->off + 1];
    r->off += 2;
    return true;
}

/* The next len bytes as their own reader. */
static bool rd_sub(struct rd *r, size_t len, struct rd *sub)
{
    if (r->n - r->off < len)
        return false;
    *sub = (struct rd){r->p + r->off, len, 0};
    r->off += len;
    return true;
}

static bool rd_skip(struct rd *r, size_t len)
{
    struct rd ignored;
    return rd_sub(r, len, &ignored);
}

/* server_name extension body (RFC 6066 §3): OK with the host_name in out,
 * NONE if the list holds no host_name, BAD on any inconsistency. */
static int parse_sni(struct rd *e, char out[256])
{
    size_t list_len;
    bool found = false;
    if (!rd_u16(e, &list_len) || list_len == 0 || list_len != e->n - e->off)
        return CDN_SNIFF_BAD;
    while (e->off < e->n) {
        size_t type, len;
        struct rd nm;
        if (!rd_u8(e, &type) || !rd_u16(e, &len) || !rd_sub(e, len, &nm))
            return CDN_SNIFF_BAD;
        if (type != 0)
            continue;
        /* Two host_names: the proxy and the upstream server could each pick another. */
        if (found || len == 0 || len > 254 || memchr(nm.p, 0, len))
            return CDN_SNIFF_BAD;
        char buf[256];
        memcpy(buf, nm.p, len);
        buf[len] = 0;
        if (!host_normalize(buf, out))
            return CDN_SNIFF_BAD;
        found = true;
    }
    return found ? CDN_SNIFF_OK : CDN_SNIFF_NONE;
}

/* ClientHello body (RFC 8446 §4.1.2, RFC 5246 §7.4.1.2), exactly n bytes. */
static int parse_hello(const uint8_t *b, size_t n, char name[256])
{
    struct rd r = {b, n, 0};
    size_t major, sid, cs, comp, ext_len;
    if (!rd_u8(&r, &major) || major != 3 || !rd_skip(&r, 1 + 32))
        return CDN_SNIFF_BAD;
    if (!rd_u8(&r, &sid) || sid > 32 || !rd_skip(&r, sid))
        return CDN_SNIFF_BAD;
    if (!rd_u16(&r, &cs) || cs < 2 || cs % 2 != 0 || !rd_skip(&r, cs))
        return CDN_SNIFF_BAD;
    if (!rd_u8(&r, &comp) || comp < 1 || !rd_skip(&r, comp))
        return CDN_SNIFF_BAD;
    if (r.off == r.n)
        return CDN_SNIFF_NONE; /* no extensions at all (pre-TLS 1.2 clients) */
    if (!rd_u16(&r, &ext_len) || ext_len != r.n - r.off)
        return CDN_SNIFF_BAD;

    char host[256];
    int found = CDN_SNIFF_NONE;
    bool seen = false;
    while (r.off < r.n) {
        size_t type, len;
        struct rd e;
        if (!rd_u16(&r, &type) || !rd_u16(&r, &len) || !rd_sub(&r, len, &e))
            return CDN_SNIFF_BAD;
        if (type != 0)
            continue;
        if (seen) /* each extension at most once (RFC 8446 §4.2) */
            return CDN_SNIFF_BAD;
        seen = true;
        found = parse_sni(&e, host);
        if (found == CDN_SNIFF_BAD)
            return CDN_SNIFF_BAD;
    }
    if (found == CDN_SNIFF_OK)
        memcpy(name, host, strlen(host) + 1);
    return found;
}

int cdn_sniff_tls(const uint8_t *p, size_t n, char name[256])
{
    /* The handshake may span records: reassemble it, up to its own length. */
    uint8_t hs[TLS_HANDSHAKE_MAX];
    size_t hs_len = 0, need = 0, off = 0;
    for (;;) {
        size_t left = n - off;
        if (left == 0)
            return CDN_SNIFF_MORE;
        if (p[off] != 22) /* handshake */
            return off == 0 ? CDN_SNIFF_NOT : CDN_SNIFF_BAD;
        if (left >= 2 && p[off + 1] != 3)
            return off == 0 ? CDN_SNIFF_NOT : CDN_SNIFF_BAD;
        if (left < 5)
            return CDN_SNIFF_MORE;
        size_t rlen = (size_t) p[off + 3] << 8 | p[off + 4];
        if (rlen == 0 || rlen > TLS_RECORD_MAX)
            return CDN_SNIFF_BAD;
        size_t avail = rlen < left - 5 ? rlen : left - 5;
        size_t want = (need ? need : sizeof hs) - hs_len;
        size_t take = avail < want ? avail : want;
        memcpy(hs + hs_len, p + off + 5, take);
        hs_len += take;
        if (hs_len >= 1 && hs[0] != 1) /* client_hello */
            return CDN_SNIFF_BAD;
        if (need == 0 && hs_len >= 4) {
            size_t mlen = (size_t) hs[1] << 16 | (size_t) hs[2] << 8 | hs[3];
            if (mlen > sizeof hs - 4)
                return CDN_SNIFF_BAD;
            need = mlen + 4;
        }
        if (need && hs_len >= need)
            return parse_hello(hs + 4, need - 4, name);
        if (avail < rlen)
            return CDN_SNIFF_MORE;
        off += 5 + rlen;
    }
}
