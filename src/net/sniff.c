/* Both sniffers run in the egress proxy on the first bytes a sandbox sends:
 * attacker-controlled input. Every length is checked against what the buffer
 * holds before it is used, nothing is allocated, and the only copy is into
 * fixed-size stack buffers whose bounds are checked first. */
#include "sniff.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "net/allow.h"

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

/* The line at *pos without its LF and one CR before it; false if no LF yet. */
static bool next_line(const uint8_t *p, size_t n, size_t *pos, struct line *ret)
{
    const uint8_t *lf = memchr(p + *pos, '\n', n - *pos);
    if (!lf)
        return false;
    size_t end = (size_t) (lf - p);
    ret->p = p + *pos;
    ret->n = end - *pos;
    if (ret->n > 0 && ret->p[ret->n - 1] == '\r')
        ret->n--;
    *pos = end + 1;
    return true;
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
    const uint8_t *t = l.p + m + 1, *end = l.p + l.n;
    const uint8_t *sp = memchr(t, ' ', (size_t) (end - t));
    if (!sp)
        return CDN_SNIFF_BAD;
    size_t tn = (size_t) (sp - t), vn = (size_t) (end - sp - 1);
    if (!visible(t, tn) || vn != 8 || memcmp(sp + 1, "HTTP/1.", 7) != 0 || sp[8] < '0' || sp[8] > '9')
        return CDN_SNIFF_BAD;

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

static int parse_header(struct line l, struct http_state *st)
{
    size_t i = 0;
    while (i < l.n && is_tchar(l.p[i]))
        i++;
    /* No name (this also refuses obsolete line folding) or blanks before ':'. */
    if (i == 0 || i == l.n || l.p[i] != ':')
        return CDN_SNIFF_BAD;
    bool is_host = i == 4 && strncasecmp((const char *) l.p, "host", 4) == 0;
    size_t vs = i + 1, ve = l.n;
    while (vs < ve && (l.p[vs] == ' ' || l.p[vs] == '\t'))
        vs++;
    while (ve > vs && (l.p[ve - 1] == ' ' || l.p[ve - 1] == '\t'))
        ve--;
    for (size_t k = vs; k < ve; k++)
        if ((l.p[k] < 0x20 && l.p[k] != '\t') || l.p[k] == 0x7f)
            return CDN_SNIFF_BAD;
    if (!is_host)
        return CDN_SNIFF_OK;
    if (st->have_host_hdr)
        return CDN_SNIFF_BAD;
    st->have_host_hdr = true;
    return parse_authority(l.p + vs, ve - vs, false, st->host_hdr, &st->host_hdr_port) ? CDN_SNIFF_OK
                                                                                       : CDN_SNIFF_BAD;
}

/* The whole head is in: settle which name it is for. */
static int http_finish(struct http_state *st, struct cdn_http_head *ret)
{
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
    if (!next_line(p, limit, &pos, &l))
        return limit == CDN_SNIFF_HTTP_MAX ? CDN_SNIFF_BAD : CDN_SNIFF_MORE;
    r = parse_request_line(l, &st);
    if (r != CDN_SNIFF_OK)
        return r;
    while (next_line(p, limit, &pos, &l)) {
        if (l.n == 0) {
            st.h.head_len = pos;
            return http_finish(&st, ret);
        }
        r = parse_header(l, &st);
        if (r != CDN_SNIFF_OK)
            return r;
    }
    return limit == CDN_SNIFF_HTTP_MAX ? CDN_SNIFF_BAD : CDN_SNIFF_MORE;
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
