/* Plain HTTP through the egress proxy: every request of a connection is read
 * and judged, not only the first (issue 18, item 13). A client may pipeline
 * requests or keep the connection alive, and an upstream may ignore the
 * "Connection: close" the proxy adds: each later request head must name the
 * host the first one did, or another name that a new connection to the same
 * address would be admitted for; anything else ends the connection with a
 * reset before the head reaches the upstream.
 *
 * Runs on the owner's event loop (cordond, or the loop thread of `cordon
 * run`). The bytes come from the sandbox and are hostile: they reach the
 * upstream only once cdn_http_stream_next() (sniff.c) has said what they are,
 * and a stream that could be framed two ways (request smuggling) is refused
 * there.
 *
 * The same holds inside a CONNECT tunnel to a name on the list, whose
 * first bytes are read as a transparent connection's are: a TLS ClientHello
 * must name the CONNECT target, plain HTTP is read request by request, and
 * any other protocol (no HTTP method and space in its first 16 bytes, not TLS)
 * passes as it is. */
#include <string.h>
#include <strings.h>

#include "net/proxy-internal.h"

#define TUNNEL_SNIFF_MAX (CDN_SNIFF_HTTP_MAX + 1024) /* a ClientHello (16 KiB) in records, or a head */

/* Hop-by-hop fields the proxy drops: the connection's fate is ours to say
 * (close), and an Upgrade (h2c, WebSocket) would turn the rest of the stream
 * into frames that this reading cannot follow. */
static bool hop_header(const char *line, size_t n)
{
    static const char *const drop[] = {
        "connection:", "proxy-connection:", "keep-alive:", "upgrade:", "http2-settings:", NULL};
    for (size_t i = 0; drop[i]; i++) {
        size_t k = strlen(drop[i]);
        if (n >= k && strncasecmp(line, drop[i], k) == 0)
            return true;
    }
    return false;
}

/* Copy the head (len bytes at p, lines ending in CRLF: sniff.c refuses any
 * other) to out without hop-by-hop headers and with "Connection: close"
 * before the empty line. */
static void rewrite_head(const char *p, size_t len, struct evbuffer *out)
{
    const char *end = p + len, *line = p;
    bool first = true;
    while (line < end) {
        const char *nl = memchr(line, '\n', (size_t) (end - line));
        size_t n = nl ? (size_t) (nl - line + 1) : (size_t) (end - line);
        size_t body = n - (n && line[n - 1] == '\n') - (n > 1 && line[n - 2] == '\r');
        if (!first && body == 0) { /* the empty line */
            (void) evbuffer_add(out, "Connection: close\r\n\r\n", 21);
            return;
        }
        if (first || !hop_header(line, body))
            (void) evbuffer_add(out, line, n);
        first = false;
        line += n;
    }
}

/* One audit record for a later request whose name is not the connection's
 * (name NULL: a head that could not be read). */
static void audit_request(struct pconn *c, const char *name, const char *via, bool allowed,
                          const char *reason)
{
    struct cdn_proxy *px = c->px;
    struct cdn_egress_box *b = px->ops->lookup(px->ops->arg, c->src);
    if (!b)
        return;
    struct cdn_audit a = {
        .proto = "tcp",
        .dst_ip = c->up_ip ? c->up_ip : c->dst_ip,
        .dst_port = c->up_port ? c->up_port : c->dst_port,
        .name = name && name[0] ? name : NULL,
        .via = name && name[0] ? via : NULL,
        .allowed = allowed,
        .reason = reason,
    };
    px->ops->audit(px->ops->arg, b, &a);
}

/* The proxy resolved c->name itself (CONNECT, absolute URI) and connected
 * there: another name on that connection goes to an address nobody resolved
 * for it. */
static const char *other_name(const struct pconn *c, const struct cdn_egress_box *b, const char *name)
{
    bool listed = b->mode == CDN_NET_OPEN || cdn_allowlist_match_name(&b->allow, name, c->up_port);
    return listed ? "ip-mismatch" : "not-allowlisted";
}

/* The verdict on a request after the first (or on any in a tunnel): true to
 * pass it; *reason says why (for a record) or why not. */
static bool judge_request(const struct pconn *c, const struct cdn_egress_box *b,
                          const struct cdn_http_head *h, const char **reason)
{
    *reason = "bad-http";
    if (h->connect) /* a tunnel asked for in the middle of a request stream: no client does that */
        return false;
    uint16_t port = c->absolute ? (h->port ? h->port : 80) : c->dst_port;
    if (strcmp(h->host, c->name) == 0 && (!c->absolute || port == c->up_port)) {
        *reason = c->allow_reason;
        return true; /* what the connection was admitted for (a PATCH rechecks it) */
    }
    if (c->absolute || c->connect_req) {
        *reason = other_name(c, b, h->host);
        return false;
    }
    return cdn_proxy_decide_named(b, h->host, c->dst_ip, c->dst_port, b->mode != CDN_NET_OPEN, reason);
}

/* A later request is refused: its own record (a violation when the policy
 * refused it), then the connection's, and a reset for both ends. What the
 * upstream still owed the client for earlier requests is lost with it. */
static int refuse_request(struct pconn *c, const char *name, const char *via, const char *reason)
{
    audit_request(c, name, via, false, reason);
    cdn_proxy_cut(c);
    cdn_proxy_finish(c);
    return -1;
}

static int on_head(struct pconn *c, const struct cdn_http_head *h, const uint8_t *p)
{
    /* The first of a connection was judged before the upstream was reached; in a tunnel, none was. */
    if (c->rq.requests > 1 || c->connect_req) {
        struct cdn_egress_box *b = c->px->ops->lookup(c->px->ops->arg, c->src);
        const char *reason, *via = h->absolute ? "absolute-uri" : "host";
        if (!b)
            return refuse_request(c, h->host, via, "sandbox-gone");
        if (!judge_request(c, b, h, &reason))
            return refuse_request(c, h->host, via, reason);
        if (strcmp(h->host, c->name) != 0)
            audit_request(c, h->host, via, true, reason);
    }
    rewrite_head((const char *) p, h->head_len, c->dir[0].buf);
    (void) evbuffer_drain(c->pend, h->head_len);
    return 0;
}

/* Stop reading: what waits and what follows pass as they are. */
static int pass_the_rest(struct pconn *c)
{
    (void) evbuffer_add_buffer(c->dir[0].buf, c->pend);
    evbuffer_free(c->pend);
    c->pend = NULL;
    return 1;
}

/* The first bytes inside a CONNECT tunnel admitted by its name: 1 when they
 * have been read (c->pend gone if they are not HTTP), 0 for more, -1 if
 * refused (c is gone). */
static int tunnel_first(struct pconn *c)
{
    size_t avail = evbuffer_get_length(c->pend);
    size_t want = avail < TUNNEL_SNIFF_MAX ? avail : TUNNEL_SNIFF_MAX;
    const uint8_t *p = avail ? evbuffer_pullup(c->pend, (ssize_t) want) : NULL;
    struct cdn_http_head h;
    char sni[256];
    if (!p)
        return 0;
    int r = p[0] == 0x16 ? cdn_sniff_tls(p, want, sni) : cdn_sniff_http(p, want, &h);
    if (r == CDN_SNIFF_MORE && want < TUNNEL_SNIFF_MAX)
        return 0;
    c->tunnel_first = false;
    if (r == CDN_SNIFF_NOT)
        return pass_the_rest(c);
    if (p[0] != 0x16)
        return 1; /* HTTP: its requests are read like any others (a bad head ends it there) */
    if (r == CDN_SNIFF_OK && strcmp(sni, c->name) != 0) {
        struct cdn_egress_box *b = c->px->ops->lookup(c->px->ops->arg, c->src);
        return refuse_request(c, sni, "sni", b ? other_name(c, b, sni) : "sandbox-gone");
    }
    if (r != CDN_SNIFF_OK && r != CDN_SNIFF_NONE)
        return refuse_request(c, NULL, NULL, "bad-tls");
    return pass_the_rest(c); /* a ClientHello for the target itself, or without SNI */
}

int cdn_proxy_http_pump(struct pconn *c)
{
    struct evbuffer *out = c->dir[0].buf;
    int moved = 0;
    if (c->tunnel_first) {
        int r = tunnel_first(c);
        if (r <= 0 || !c->pend)
            return r;
    }
    while (evbuffer_get_length(c->pend) && evbuffer_get_length(out) < CDN_PROXY_BUF_HIGH) {
        size_t avail = evbuffer_get_length(c->pend);
        uint64_t raw = cdn_http_stream_raw(&c->rq);
        if (raw) { /* content framed by length: passed without being looked at */
            size_t k = raw < avail ? (size_t) raw : avail;
            (void) evbuffer_remove_buffer(c->pend, out, k);
            cdn_http_stream_pass(&c->rq, k);
            moved = 1;
            continue;
        }
        size_t want = avail < CDN_SNIFF_HTTP_MAX ? avail : CDN_SNIFF_HTTP_MAX;
        const uint8_t *p = evbuffer_pullup(c->pend, (ssize_t) want);
        struct cdn_http_head h;
        size_t len = 0;
        int r = p ? cdn_http_stream_next(&c->rq, p, want, &h, &len) : CDN_HTTP_BAD;
        if (r == CDN_HTTP_MORE)
            break;
        if (r == CDN_HTTP_NOHOST || r == CDN_HTTP_BAD)
            return refuse_request(c, NULL, NULL, r == CDN_HTTP_NOHOST ? "no-host" : "bad-http");
        if (r == CDN_HTTP_HEAD && on_head(c, &h, p) < 0)
            return -1;
        if (r == CDN_HTTP_PASS)
            (void) evbuffer_remove_buffer(c->pend, out, len);
        else if (r == CDN_HTTP_DROP)
            (void) evbuffer_drain(c->pend, len);
        moved = 1;
    }
    return moved;
}
