/* The transparent egress proxy: see proxy.h. One connection's life:
 *
 *   accept → decide on the address alone (CIDR entry, reserved, open mode)
 *          → or SNIFF the first bytes for a name → decide on the name
 *          → [RESOLVE the target of CONNECT / absolute URI]
 *          → CONNECT upstream → SPLICE both ways → audit → free.
 *
 * A refusal is audited at once; an admitted connection when it ends. */
#include "net/proxy.h"
#include "net/netns.h"
#include "net/sniff.h"
#include "shared/macro.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

enum pstate { P_SNIFF, P_RESOLVE, P_CONNECT, P_SPLICE, P_CLOSING };

struct pconn {
    struct cdn_proxy *px;
    LIST_ENTRY(pconn) link;
    enum pstate state;
    struct bufferevent *cli, *up;
    struct event *timer;
    struct evdns_request *dnsreq;
    uint32_t src;           /* the sandbox's address: the box is looked up by it each time */
    uint32_t dst_ip, up_ip; /* original destination; where we actually connect */
    uint16_t dst_port, up_port;
    char name[256];
    const char *via;
    bool http, connect_req, absolute;
    size_t head_len; /* the request head: rewritten (HTTP) or answered and dropped (CONNECT) */
    bool cli_eof, up_eof;
    bool audited;
    const char *allow_reason; /* for the record written when an admitted connection ends */
    uint64_t bytes_up, bytes_down, t0_ms;
};

struct cdn_proxy {
    struct event_base *base;
    struct evdns_base *dns;
    struct evconnlistener *lst;
    uint16_t port;
    const struct cdn_egress_ops *ops;
    LIST_HEAD(, pconn) conns;
    unsigned n;
};

static void pconn_free(struct pconn *c)
{
    if (c->dnsreq) {
        struct evdns_request *r = c->dnsreq;
        c->dnsreq = NULL;
        evdns_cancel_request(c->px->dns, r); /* its callback sees DNS_ERR_CANCEL and returns */
    }
    if (c->timer)
        event_free(c->timer);
    if (c->cli)
        bufferevent_free(c->cli);
    if (c->up)
        bufferevent_free(c->up);
    LIST_REMOVE(c, link);
    c->px->n--;
    free(c);
}

static void audit(struct pconn *c, bool allowed, const char *reason)
{
    struct cdn_proxy *px = c->px;
    if (c->audited)
        return;
    c->audited = true;
    struct cdn_egress_box *b = px->ops->lookup(px->ops->arg, c->src);
    if (!b)
        return;
    struct cdn_audit a = {
        .proto = "tcp",
        .dst_ip = c->up_ip ? c->up_ip : c->dst_ip,
        .dst_port = c->up_port ? c->up_port : c->dst_port,
        .name = c->name[0] ? c->name : NULL,
        .via = c->via,
        .allowed = allowed,
        .reason = reason,
        .bytes_up = c->bytes_up,
        .bytes_down = c->bytes_down,
        .duration_ms = (double) (cdn_now_ms() - c->t0_ms),
    };
    px->ops->audit(px->ops->arg, b, &a);
}

static void splice_write(struct bufferevent *bev, void *arg);
static void splice_event(struct bufferevent *bev, short what, void *arg);

/* End the connection after writing answer (may be NULL) to the client. */
static void close_with(struct pconn *c, const char *answer)
{
    if (c->up) {
        bufferevent_free(c->up);
        c->up = NULL;
    }
    if (c->dnsreq) {
        struct evdns_request *r = c->dnsreq;
        c->dnsreq = NULL;
        evdns_cancel_request(c->px->dns, r);
    }
    if (!answer || !c->cli) {
        pconn_free(c);
        return;
    }
    struct evbuffer *in = bufferevent_get_input(c->cli);
    (void) evbuffer_drain(in, evbuffer_get_length(in));
    (void) evbuffer_add(bufferevent_get_output(c->cli), answer, strlen(answer));
    c->state = P_CLOSING;
    c->cli_eof = c->up_eof = true;
    (void) bufferevent_disable(c->cli, EV_READ);
    bufferevent_setcb(c->cli, NULL, splice_write, splice_event, c);
    (void) bufferevent_enable(c->cli, EV_WRITE);
    struct timeval tv = {.tv_sec = 5}; /* a client that does not read its answer */
    if (c->timer)
        (void) evtimer_add(c->timer, &tv);
}

/* Refuse: audit, tell an HTTP client why, close. */
static void deny(struct pconn *c, const char *reason)
{
    audit(c, false, reason);
    if (!c->http) {
        close_with(c, NULL);
        return;
    }
    char msg[512];
    (void) snprintf(msg, sizeof msg,
                    "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
                    "cordon: egress to %s denied (%s)\n",
                    c->name[0] ? c->name : "this destination", reason);
    close_with(c, msg);
}

static bool ip_in_sandbox_net(uint32_t ip)
{
    return (ip >> (32 - CDN_NET_SUBNET_BITS)) == (CDN_NET_SUBNET >> (32 - CDN_NET_SUBNET_BITS));
}

/* Why ip may not be reached without a CIDR entry naming it, or NULL. */
static const char *reserved_reason(uint32_t ip)
{
    const char *r = cdn_ip_reserved(ip);
    if (r)
        return r;
    if (ip_in_sandbox_net(ip))
        return "sandbox-network";
    if (cdn_host_addr_is_local(ip))
        return "host";
    return NULL;
}

/* The decision for an address and port, name unknown or beside the point:
 * 1 allow, 0 a name is needed, -1 deny (reason set). */
static int decide_ip(const struct cdn_egress_box *b, uint32_t ip, uint16_t port, const char **reason)
{
    if (cdn_allowlist_match_ip(&b->allow, ip, port)) {
        *reason = "allowlist:ip";
        return 1;
    }
    const char *r = reserved_reason(ip);
    if (r) {
        static char buf[64];
        (void) snprintf(buf, sizeof buf, "reserved:%s", r);
        *reason = buf;
        return -1;
    }
    if (b->mode == CDN_NET_OPEN) {
        *reason = "open";
        return 1;
    }
    return 0;
}

static bool is_ipv4_literal(const char *s, uint32_t *ret)
{
    struct in_addr a;
    if (inet_pton(AF_INET, s, &a) != 1)
        return false;
    *ret = ntohl(a.s_addr);
    return true;
}

/* The decision for a named transparent connection to (ip, port). */
static bool decide_named(const struct cdn_egress_box *b, const char *name, uint32_t ip, uint16_t port,
                         bool pinned_needed, const char **reason)
{
    int d = decide_ip(b, ip, port, reason);
    if (d != 0)
        return d > 0;
    uint32_t lit;
    if (is_ipv4_literal(name, &lit)) {
        *reason = "not-allowlisted";
        return false;
    }
    if (!cdn_allowlist_match_name(&b->allow, name, port)) {
        *reason = "not-allowlisted";
        return false;
    }
    if (pinned_needed && !cdn_pins_check(b->pins, name, ip, cdn_now_ms())) {
        *reason = "ip-mismatch";
        return false;
    }
    *reason = "allowlist";
    return true;
}

/* ---- splicing ---- */

static void splice_read(struct bufferevent *bev, void *arg);

static void finish_if_done(struct pconn *c)
{
    if (!c->cli_eof || !c->up_eof)
        return;
    if (c->cli && evbuffer_get_length(bufferevent_get_output(c->cli)))
        return; /* splice_write comes back when flushed */
    if (c->up && evbuffer_get_length(bufferevent_get_output(c->up)))
        return;
    audit(c, true, c->allow_reason ? c->allow_reason : "allowlist");
    pconn_free(c);
}

static void shut_peer_write(struct bufferevent *peer)
{
    if (peer && evbuffer_get_length(bufferevent_get_output(peer)) == 0)
        (void) shutdown(bufferevent_getfd(peer), SHUT_WR);
}

static void splice_read(struct bufferevent *bev, void *arg)
{
    struct pconn *c = arg;
    bool from_cli = bev == c->cli;
    struct bufferevent *peer = from_cli ? c->up : c->cli;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t n = evbuffer_get_length(in);
    if (!peer) {
        (void) evbuffer_drain(in, n);
        return;
    }
    (void) evbuffer_add_buffer(bufferevent_get_output(peer), in);
    if (from_cli)
        c->bytes_up += n;
    else
        c->bytes_down += n;
    if (evbuffer_get_length(bufferevent_get_output(peer)) >= CDN_PROXY_BUF_HIGH)
        (void) bufferevent_disable(bev, EV_READ); /* splice_write on peer resumes it */
}

static void splice_write(struct bufferevent *bev, void *arg)
{
    struct pconn *c = arg;
    bool to_cli = bev == c->cli;
    struct bufferevent *src = to_cli ? c->up : c->cli;
    bool src_eof = to_cli ? c->up_eof : c->cli_eof;
    if (src && !src_eof && evbuffer_get_length(bufferevent_get_output(bev)) < CDN_PROXY_BUF_HIGH / 2)
        (void) bufferevent_enable(src, EV_READ);
    if (src_eof)
        shut_peer_write(bev);
    finish_if_done(c);
}

static void splice_event(struct bufferevent *bev, short what, void *arg)
{
    struct pconn *c = arg;
    bool is_cli = bev == c->cli;
    if (what & BEV_EVENT_ERROR) {
        /* A reset on either side ends both: nothing more can be delivered. */
        c->cli_eof = c->up_eof = true;
        if (c->cli)
            (void) evbuffer_drain(bufferevent_get_output(c->cli), SIZE_MAX);
        if (c->up)
            (void) evbuffer_drain(bufferevent_get_output(c->up), SIZE_MAX);
        finish_if_done(c);
        return;
    }
    if (what & BEV_EVENT_EOF) {
        if (is_cli)
            c->cli_eof = true;
        else
            c->up_eof = true;
        (void) bufferevent_disable(bev, EV_READ);
        shut_peer_write(is_cli ? c->up : c->cli);
        finish_if_done(c);
    }
}

/* ---- HTTP head rewrite: one request per connection ---- */

static bool hop_header(const char *line, size_t n)
{
    static const char *const drop[] = {"connection:", "proxy-connection:", "keep-alive:", NULL};
    for (size_t i = 0; drop[i]; i++) {
        size_t k = strlen(drop[i]);
        if (n >= k && strncasecmp(line, drop[i], k) == 0)
            return true;
    }
    return false;
}

/* Copy the head (head_len bytes at p) to out without hop-by-hop headers and
 * with "Connection: close" before the empty line. */
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

/* ---- connecting upstream ---- */

static void start_splice(struct pconn *c)
{
    c->state = P_SPLICE;
    if (c->timer) {
        event_free(c->timer);
        c->timer = NULL;
    }
    struct evbuffer *in = bufferevent_get_input(c->cli);
    if (c->connect_req) {
        (void) evbuffer_drain(in, c->head_len);
        (void) evbuffer_add_printf(bufferevent_get_output(c->cli),
                                   "HTTP/1.1 200 Connection established\r\n\r\n");
    } else if (c->http) {
        const char *head = (const char *) evbuffer_pullup(in, (ssize_t) c->head_len);
        if (head)
            rewrite_head(head, c->head_len, bufferevent_get_output(c->up));
        c->bytes_up += c->head_len;
        (void) evbuffer_drain(in, c->head_len);
    }
    bufferevent_setcb(c->cli, splice_read, splice_write, splice_event, c);
    bufferevent_setcb(c->up, splice_read, splice_write, splice_event, c);
    (void) bufferevent_enable(c->cli, EV_READ | EV_WRITE);
    (void) bufferevent_enable(c->up, EV_READ | EV_WRITE);
    if (evbuffer_get_length(in))
        splice_read(c->cli, c);
}

static void up_event(struct bufferevent *bev, short what, void *arg)
{
    (void) bev;
    struct pconn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        start_splice(c);
        return;
    }
    audit(c, true, "connect-failed");
    close_with(c, c->http ? "HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n" : NULL);
}

static void connect_up(struct pconn *c, uint32_t ip, uint16_t port)
{
    c->up_ip = ip;
    c->up_port = port;
    c->state = P_CONNECT;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(ip)};
    c->up = bufferevent_socket_new(c->px->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!c->up) {
        deny(c, "proxy-error");
        return;
    }
    bufferevent_setcb(c->up, NULL, NULL, up_event, c);
    (void) bufferevent_disable(c->cli, EV_READ); /* the first bytes wait in its buffer */
    if (bufferevent_socket_connect(c->up, (struct sockaddr *) &sin, sizeof sin) < 0)
        up_event(c->up, BEV_EVENT_ERROR, c);
}

static void resolved(int result, char type, int count, int ttl, void *addrs, void *arg)
{
    (void) ttl;
    if (result == DNS_ERR_CANCEL)
        return; /* the connection is gone */
    struct pconn *c = arg;
    c->dnsreq = NULL;
    struct cdn_egress_box *b = c->px->ops->lookup(c->px->ops->arg, c->src);
    if (!b) {
        pconn_free(c);
        return;
    }
    if (result != DNS_ERR_NONE || type != DNS_IPv4_A || count <= 0) {
        deny(c, "resolve-failed");
        return;
    }
    const uint32_t *a = addrs;
    const char *why = "resolve-failed";
    for (int i = 0; i < count; i++) {
        uint32_t ip = ntohl(a[i]);
        const char *r = reserved_reason(ip);
        if (r && !cdn_allowlist_match_ip(&b->allow, ip, c->up_port)) {
            static char buf[64];
            (void) snprintf(buf, sizeof buf, "rebinding:%s", r);
            why = buf;
            c->up_ip = ip;
            continue;
        }
        c->allow_reason = b->mode == CDN_NET_OPEN ? "open" : "allowlist";
        connect_up(c, ip, c->up_port);
        return;
    }
    deny(c, why);
}

/* ---- sniffing ---- */

static void decide_after_sniff(struct pconn *c, struct cdn_egress_box *b)
{
    const char *reason;
    if (c->connect_req || c->absolute) {
        /* An explicit proxy request: the target is what counts; we resolve it ourselves. */
        uint16_t port = c->up_port;
        uint32_t lit;
        if (is_ipv4_literal(c->name, &lit)) {
            c->up_ip = lit;
            int d = decide_ip(b, lit, port, &reason);
            if (d > 0) {
                c->allow_reason = reason;
                connect_up(c, lit, port);
            } else
                deny(c, d < 0 ? reason : "not-allowlisted");
            return;
        }
        if (b->mode != CDN_NET_OPEN && !cdn_allowlist_match_name(&b->allow, c->name, port)) {
            deny(c, "not-allowlisted");
            return;
        }
        c->state = P_RESOLVE;
        c->dnsreq = evdns_base_resolve_ipv4(c->px->dns, c->name, DNS_QUERY_NO_SEARCH, resolved, c);
        if (!c->dnsreq)
            deny(c, "resolve-failed");
        return;
    }
    if (decide_named(b, c->name, c->dst_ip, c->dst_port, b->mode != CDN_NET_OPEN, &reason)) {
        c->allow_reason = reason;
        connect_up(c, c->dst_ip, c->dst_port);
    } else
        deny(c, reason);
}

static void sniff_read(struct bufferevent *bev, void *arg)
{
    struct pconn *c = arg;
    struct cdn_egress_box *b = c->px->ops->lookup(c->px->ops->arg, c->src);
    if (!b) {
        pconn_free(c);
        return;
    }
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t n = evbuffer_get_length(in);
    const uint8_t *p = evbuffer_pullup(in, -1);
    if (!p)
        return;
    int r;
    if (p[0] == 0x16) {
        r = cdn_sniff_tls(p, n, c->name);
        c->via = "sni";
        if (r == CDN_SNIFF_MORE)
            return;
        if (r != CDN_SNIFF_OK) {
            c->name[0] = 0;
            deny(c, r == CDN_SNIFF_NONE ? "no-sni" : "bad-tls");
            return;
        }
    } else {
        struct cdn_http_head h;
        r = cdn_sniff_http(p, n, &h);
        if (r == CDN_SNIFF_MORE)
            return;
        if (r == CDN_SNIFF_NOT) {
            c->via = NULL;
            deny(c, "no-name");
            return;
        }
        c->http = true;
        if (r != CDN_SNIFF_OK) {
            deny(c, r == CDN_SNIFF_NONE ? "no-host" : "bad-http");
            return;
        }
        (void) snprintf(c->name, sizeof c->name, "%s", h.host);
        c->head_len = h.head_len;
        c->connect_req = h.connect;
        c->absolute = h.absolute;
        c->via = h.connect ? "connect" : h.absolute ? "absolute-uri" : "host";
        if (h.connect || h.absolute)
            c->up_port = h.port ? h.port : 80;
        /* A Host naming another port than the connection's: what is judged is
         * the port really reached, c->dst_port. */
    }
    decide_after_sniff(c, b);
}

static void sniff_event(struct bufferevent *bev, short what, void *arg)
{
    (void) bev;
    struct pconn *c = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        c->http = false; /* nobody to answer */
        deny(c, "closed-before-name");
    }
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct pconn *c = arg;
    if (c->state == P_SNIFF)
        deny(c, "no-name-timeout");
    else if (c->state == P_RESOLVE)
        deny(c, "resolve-timeout");
    else if (c->state == P_CONNECT)
        up_event(c->up, BEV_EVENT_ERROR, c);
    else if (c->state == P_CLOSING)
        pconn_free(c);
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void) l;
    struct cdn_proxy *px = arg;
    struct sockaddr_in dst;
    socklen_t dlen = sizeof dst;
    struct cdn_egress_box *b = NULL;
    if (sa->sa_family != AF_INET || salen < (int) sizeof(struct sockaddr_in) ||
        getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dlen) < 0 ||
        !(b = px->ops->lookup(px->ops->arg, ntohl(((struct sockaddr_in *) sa)->sin_addr.s_addr)))) {
        (void) close(fd); /* not from a sandbox we know, or not redirected */
        return;
    }
    struct pconn *c = calloc(1, sizeof *c);
    if (!c) {
        (void) close(fd);
        return;
    }
    c->px = px;
    LIST_INSERT_HEAD(&px->conns, c, link);
    px->n++;
    c->src = b->sandbox_ip;
    c->dst_ip = ntohl(dst.sin_addr.s_addr);
    c->dst_port = ntohs(dst.sin_port);
    c->t0_ms = cdn_now_ms();
    c->cli = bufferevent_socket_new(px->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->timer = evtimer_new(px->base, timer_cb, c);
    if (!c->cli || !c->timer) {
        if (!c->cli)
            (void) close(fd);
        pconn_free(c);
        return;
    }
    const char *reason;
    int d = decide_ip(b, c->dst_ip, c->dst_port, &reason);
    if (d < 0) {
        deny(c, reason);
        return;
    }
    struct timeval tv = {.tv_sec = d > 0 ? CDN_PROXY_CONNECT_TIMEOUT_S : CDN_PROXY_SNIFF_TIMEOUT_S};
    (void) evtimer_add(c->timer, &tv);
    if (d > 0) {
        const char *known = cdn_pins_name_of(b->pins, c->dst_ip, cdn_now_ms());
        if (known) {
            (void) snprintf(c->name, sizeof c->name, "%s", known);
            c->via = "dns";
        }
        c->allow_reason = reason;
        connect_up(c, c->dst_ip, c->dst_port);
        return;
    }
    c->state = P_SNIFF;
    bufferevent_setcb(c->cli, sniff_read, NULL, sniff_event, c);
    bufferevent_setwatermark(c->cli, EV_READ, 0, CDN_SNIFF_HTTP_MAX + 64);
    (void) bufferevent_enable(c->cli, EV_READ);
}

struct cdn_proxy *cdn_proxy_new(struct event_base *base, struct evdns_base *dns, uint16_t port,
                                const struct cdn_egress_ops *ops)
{
    struct cdn_proxy *px = calloc(1, sizeof *px);
    if (!px)
        return NULL;
    px->base = base;
    px->dns = dns;
    px->ops = ops;
    LIST_INIT(&px->conns);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = INADDR_ANY};
    px->lst = evconnlistener_new_bind(base, accept_cb, px,
                                      LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE, 1024,
                                      (struct sockaddr *) &sin, sizeof sin);
    if (!px->lst) {
        int e = errno;
        free(px);
        errno = e ? e : EADDRINUSE;
        return NULL;
    }
    struct sockaddr_in got;
    socklen_t len = sizeof got;
    if (getsockname(evconnlistener_get_fd(px->lst), (struct sockaddr *) &got, &len) == 0)
        px->port = ntohs(got.sin_port);
    return px;
}

uint16_t cdn_proxy_port(const struct cdn_proxy *p)
{
    return p->port;
}

unsigned cdn_proxy_connections(const struct cdn_proxy *p)
{
    return p->n;
}

void cdn_proxy_free(struct cdn_proxy *p)
{
    if (!p)
        return;
    while (!LIST_EMPTY(&p->conns))
        pconn_free(LIST_FIRST(&p->conns));
    evconnlistener_free(p->lst);
    free(p);
}

/* Is c still allowed under b's current list? */
static bool still_allowed(const struct pconn *c, const struct cdn_egress_box *b)
{
    const char *reason;
    if (c->connect_req || c->absolute) {
        if (c->up_ip && decide_ip(b, c->up_ip, c->up_port, &reason) > 0)
            return true;
        return b->mode == CDN_NET_OPEN || cdn_allowlist_match_name(&b->allow, c->name, c->up_port);
    }
    int d = decide_ip(b, c->dst_ip, c->dst_port, &reason);
    if (d != 0)
        return d > 0;
    /* Named connections were checked against the pins when they opened; the
     * name is what the list speaks of now. */
    return c->name[0] && cdn_allowlist_match_name(&b->allow, c->name, c->dst_port);
}

/* Close with a reset, not a FIN: a cut stream must not look complete. */
static void set_reset_on_close(struct bufferevent *bev)
{
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    if (bev && bufferevent_getfd(bev) >= 0)
        (void) setsockopt(bufferevent_getfd(bev), SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

void cdn_proxy_recheck(struct cdn_proxy *p, struct cdn_egress_box *b)
{
    struct pconn *c, *next;
    for (c = LIST_FIRST(&p->conns); c; c = next) {
        next = LIST_NEXT(c, link);
        if (c->src != b->sandbox_ip || c->state == P_SNIFF || c->state == P_CLOSING || still_allowed(c, b))
            continue;
        c->http = false; /* no answer: the connection is cut */
        set_reset_on_close(c->cli);
        set_reset_on_close(c->up);
        deny(c, "policy-change");
    }
}

void cdn_proxy_forget(struct cdn_proxy *p, struct cdn_egress_box *b)
{
    struct pconn *c, *next;
    for (c = LIST_FIRST(&p->conns); c; c = next) {
        next = LIST_NEXT(c, link);
        if (c->src == b->sandbox_ip)
            pconn_free(c); /* the box is gone: nothing to audit to */
    }
}
