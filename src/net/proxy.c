/* The transparent egress proxy: see proxy.h. One connection's life:
 *
 *   accept → decide on the address alone (CIDR entry, reserved, open mode)
 *          → or SNIFF the first bytes for a name → decide on the name
 *          → [RESOLVE the target of CONNECT / absolute URI]
 *          → CONNECT upstream → SPLICE both ways → audit → free.
 *
 * A refusal is audited at once; an admitted connection when it ends. */
#include "net/proxy.h"
#include "net/proxy-internal.h"
#include "net/netns.h"
#include "net/sniff.h"
#include "shared/macro.h"

#include <arpa/inet.h>
#include <errno.h>
#include <sys/uio.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

/* A lookup's callback can run after its connection is gone (evdns runs the
 * callbacks of cancelled or already answered requests from the loop): it
 * gets this, never the connection itself. */
struct plookup {
    struct pconn *c; /* NULL once the connection no longer waits for it */
};

static void cancel_lookup(struct pconn *c)
{
    if (!c->lookup)
        return;
    struct evdns_request *r = c->dnsreq;
    c->lookup->c = NULL; /* first: the callback may run inside the cancel */
    c->lookup = NULL;
    c->dnsreq = NULL;
    if (r)
        evdns_cancel_request(c->px->dns, r);
}

static void pconn_free(struct pconn *c)
{
    cancel_lookup(c);
    if (c->box && c->box->tcp_conns)
        c->box->tcp_conns--;
    if (c->timer)
        event_free(c->timer);
    if (c->cli)
        bufferevent_free(c->cli);
    if (c->up)
        bufferevent_free(c->up);
    for (int i = 0; i < 2; i++) {
        if (c->dir[i].rev)
            event_free(c->dir[i].rev);
        if (c->dir[i].wev)
            event_free(c->dir[i].wev);
        if (c->dir[i].buf)
            evbuffer_free(c->dir[i].buf);
    }
    if (c->pend)
        evbuffer_free(c->pend);
    if (c->cli_fd >= 0)
        (void) close(c->cli_fd);
    if (c->up_fd >= 0)
        (void) close(c->up_fd);
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

/* P_CLOSING: the answer is written, then the connection goes. */
static void closing_write(struct bufferevent *bev, void *arg)
{
    (void) shutdown(bufferevent_getfd(bev), SHUT_WR);
    pconn_free(arg);
}

static void closing_event(struct bufferevent *bev, short what, void *arg)
{
    (void) bev, (void) what;
    pconn_free(arg);
}

/* End the connection after writing answer (may be NULL) to the client. */
static void close_with(struct pconn *c, const char *answer)
{
    if (c->up) {
        bufferevent_free(c->up);
        c->up = NULL;
    }
    cancel_lookup(c);
    if (!answer || !c->cli) {
        pconn_free(c);
        return;
    }
    struct evbuffer *in = bufferevent_get_input(c->cli);
    (void) evbuffer_drain(in, evbuffer_get_length(in));
    (void) evbuffer_add(bufferevent_get_output(c->cli), answer, strlen(answer));
    c->state = P_CLOSING;
    (void) bufferevent_disable(c->cli, EV_READ);
    bufferevent_setcb(c->cli, NULL, closing_write, closing_event, c);
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

static bool is_ipv4_literal(const char *s, uint32_t *ret)
{
    struct in_addr a;
    if (inet_pton(AF_INET, s, &a) != 1)
        return false;
    *ret = ntohl(a.s_addr);
    return true;
}

/* The decision for a named transparent connection to (ip, port). */
bool cdn_proxy_decide_named(const struct cdn_egress_box *b, const char *name, uint32_t ip, uint16_t port,
                            bool pinned_needed, const char **reason)
{
    int d = cdn_egress_decide_ip(b, ip, port, reason);
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

/* ---- splicing: raw events, large reads ----
 * libevent's bufferevents read 4 KiB per wakeup; a proxy moving bulk data
 * needs far more per system call. Each direction reads up to CDN_PROXY_READ
 * at a time into a buffer bounded by CDN_PROXY_BUF_HIGH (then its reader
 * pauses until the writer has drained it: backpressure), and half-closes are
 * passed on. */

void cdn_proxy_finish(struct pconn *c)
{
    audit(c, true, c->allow_reason ? c->allow_reason : "allowlist");
    pconn_free(c);
}

static void dir_flush(struct pdir *d);

/* Where a direction's reads go: for plain HTTP towards the upstream, into
 * c->pend, where they wait to be judged (proxy-http.c). */
static struct evbuffer *dir_inbuf(const struct pdir *d)
{
    return d->c->pend && d == &d->c->dir[0] ? d->c->pend : d->buf;
}

/* Bytes read but not yet written: what backpressure bounds. */
static size_t dir_queued(const struct pdir *d)
{
    size_t n = evbuffer_get_length(d->buf);
    return dir_inbuf(d) != d->buf ? n + evbuffer_get_length(d->c->pend) : n;
}

static void dir_read(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct pdir *d = arg;
    struct pconn *c = d->c;
    struct evbuffer *in = dir_inbuf(d);
    for (int k = 0; k < 4 && dir_queued(d) < CDN_PROXY_BUF_HIGH; k++) {
        struct evbuffer_iovec v[2];
        int nv = evbuffer_reserve_space(in, CDN_PROXY_READ, v, 2);
        if (nv <= 0)
            break;
        struct iovec iov[2];
        for (int i = 0; i < nv; i++)
            iov[i] = (struct iovec){.iov_base = v[i].iov_base, .iov_len = v[i].iov_len};
        ssize_t n = readv(d->in, iov, nv);
        if (n < 0) {
            (void) evbuffer_commit_space(in, v, 0);
            if (errno == EAGAIN || errno == EINTR)
                break;
            cdn_proxy_finish(c); /* a reset: nothing more can be delivered either way */
            return;
        }
        size_t left = (size_t) n;
        for (int i = 0; i < nv; i++) {
            size_t take = left < v[i].iov_len ? left : v[i].iov_len;
            v[i].iov_len = take;
            left -= take;
        }
        (void) evbuffer_commit_space(in, v, nv);
        *d->count += (uint64_t) n;
        if (n == 0) {
            d->eof = true;
            break;
        }
        if ((size_t) n < CDN_PROXY_READ)
            break;
    }
    if (in != d->buf && cdn_proxy_http_pump(c) < 0)
        return; /* a request was refused: the connection is gone */
    if (d->eof || dir_queued(d) >= CDN_PROXY_BUF_HIGH)
        (void) event_del(d->rev);
    dir_flush(d);
}

static void dir_write(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    dir_flush(arg);
}

static void dir_flush(struct pdir *d)
{
    struct pconn *c = d->c;
    for (;;) {
        while (evbuffer_get_length(d->buf)) {
            int n = evbuffer_write_atmost(d->buf, d->out, -1);
            if (n < 0) {
                if (errno == EAGAIN || errno == EINTR) {
                    (void) event_add(d->wev, NULL);
                    return;
                }
                cdn_proxy_finish(c);
                return;
            }
            if (n == 0)
                break;
        }
        if (dir_inbuf(d) == d->buf)
            break;
        int r = cdn_proxy_http_pump(c); /* room again: judge what waits */
        if (r < 0)
            return;
        if (r == 0 || !evbuffer_get_length(d->buf))
            break;
    }
    (void) event_del(d->wev);
    if (!d->eof) {
        (void) event_add(d->rev, NULL); /* drained: read again */
        return;
    }
    if (!d->shut) {
        d->shut = true;
        (void) shutdown(d->out, SHUT_WR);
    }
    if (c->dir[0].shut && c->dir[1].shut)
        cdn_proxy_finish(c);
}

/* ---- connecting upstream ---- */

/* Take the socket out of its bufferevent (which is then freed). */
static int take_fd(struct bufferevent **bev)
{
    int fd = fcntl(bufferevent_getfd(*bev), F_DUPFD_CLOEXEC, 3);
    bufferevent_free(*bev);
    *bev = NULL;
    return fd;
}

static void start_splice(struct pconn *c)
{
    c->state = P_SPLICE;
    if (c->timer) {
        event_free(c->timer);
        c->timer = NULL;
    }
    struct evbuffer *in = bufferevent_get_input(c->cli);
    struct evbuffer *to_up = evbuffer_new(), *to_cli = evbuffer_new();
    if (!to_up || !to_cli) {
        if (to_up)
            evbuffer_free(to_up);
        if (to_cli)
            evbuffer_free(to_cli);
        close_with(c, NULL);
        return;
    }
    if (c->connect_req) {
        (void) evbuffer_drain(in, c->head_len);
        (void) evbuffer_add_printf(to_cli, "HTTP/1.1 200 Connection established\r\n\r\n");
    }
    c->bytes_up += evbuffer_get_length(in);
    /* What goes through a tunnel to a name on the list is read too: it must not reach another host. */
    bool read_tunnel = c->connect_req && c->allow_reason && strcmp(c->allow_reason, "allowlist") == 0;
    if ((c->http && !c->connect_req) || read_tunnel) {
        /* Every request, the first included, is read from here (proxy-http.c). */
        c->tunnel_first = read_tunnel;
        if (!(c->pend = evbuffer_new())) {
            evbuffer_free(to_up);
            evbuffer_free(to_cli);
            close_with(c, NULL);
            return;
        }
        (void) evbuffer_add_buffer(c->pend, in);
    } else
        (void) evbuffer_add_buffer(to_up, in);
    int one = 1;
    c->cli_fd = take_fd(&c->cli);
    c->up_fd = take_fd(&c->up);
    struct pdir *up = &c->dir[0], *down = &c->dir[1];
    *up = (struct pdir){.c = c, .in = c->cli_fd, .out = c->up_fd, .buf = to_up, .count = &c->bytes_up};
    *down = (struct pdir){.c = c, .in = c->up_fd, .out = c->cli_fd, .buf = to_cli, .count = &c->bytes_down};
    for (int i = 0; i < 2; i++) {
        struct pdir *d = &c->dir[i];
        d->rev = event_new(c->px->base, d->in, EV_READ | EV_PERSIST, dir_read, d);
        d->wev = event_new(c->px->base, d->out, EV_WRITE | EV_PERSIST, dir_write, d);
    }
    if (c->cli_fd < 0 || c->up_fd < 0 || !up->rev || !up->wev || !down->rev || !down->wev) {
        cdn_proxy_finish(c);
        return;
    }
    (void) setsockopt(c->cli_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    (void) setsockopt(c->up_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (c->pend && cdn_proxy_http_pump(c) < 0)
        return;
    for (int i = 0; i < 2; i++) /* what is already buffered goes out first, then reading starts */
        (void) event_add(evbuffer_get_length(c->dir[i].buf) ? c->dir[i].wev : c->dir[i].rev, NULL);
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
    struct plookup *l = arg;
    struct pconn *c = l->c;
    free(l);
    if (!c)
        return; /* the connection is gone or no longer waits */
    c->lookup = NULL;
    c->dnsreq = NULL;
    struct cdn_egress_box *b = c->box;
    if (result != DNS_ERR_NONE || type != DNS_IPv4_A || count <= 0) {
        deny(c, "resolve-failed");
        return;
    }
    const uint32_t *a = addrs;
    const char *why = "resolve-failed", *reason;
    for (int i = 0; i < count; i++) {
        uint32_t ip = ntohl(a[i]);
        if (cdn_egress_decide_ip(b, ip, c->up_port, &reason) < 0) {
            static char buf[64];
            (void) snprintf(buf, sizeof buf, "rebinding:%s", reason + strlen("reserved:"));
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

static void sniff_event(struct bufferevent *bev, short what, void *arg);

static void decide_after_sniff(struct pconn *c, struct cdn_egress_box *b)
{
    const char *reason;
    /* The name is known: what the client sends next waits in its buffer until
     * the connection is spliced (or refused); nothing re-runs this. */
    (void) bufferevent_disable(c->cli, EV_READ);
    bufferevent_setcb(c->cli, NULL, NULL, sniff_event, c);
    if (c->connect_req || c->absolute) {
        /* An explicit proxy request: the target is what counts; we resolve it ourselves. */
        uint16_t port = c->up_port;
        uint32_t lit;
        if (is_ipv4_literal(c->name, &lit)) {
            c->up_ip = lit;
            int d = cdn_egress_decide_ip(b, lit, port, &reason);
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
        if (!cdn_dns_budget_charge(b, c->px->ops, c->name, cdn_now_ms())) {
            deny(c, "dns-budget"); /* the lookup would carry the name upstream, as the stub's would */
            return;
        }
        c->state = P_RESOLVE;
        struct plookup *l = calloc(1, sizeof *l);
        if (!l) {
            deny(c, "proxy-error");
            return;
        }
        l->c = c;
        c->lookup = l;
        c->dnsreq = evdns_base_resolve_ipv4(c->px->dns, c->name, DNS_QUERY_NO_SEARCH, resolved, l);
        if (!c->dnsreq) { /* not submitted (libevent runs no callback then) */
            c->lookup = NULL;
            free(l);
            deny(c, "resolve-failed");
        }
        return;
    }
    if (cdn_proxy_decide_named(b, c->name, c->dst_ip, c->dst_port, b->mode != CDN_NET_OPEN, &reason)) {
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
    c->cli_fd = c->up_fd = -1;
    LIST_INSERT_HEAD(&px->conns, c, link);
    px->n++;
    c->box = b;
    b->tcp_conns++;
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
    if (b->tcp_conns > CDN_PROXY_MAX_CONNS) {
        c->counted_out = true; /* not a violation: a limit */
        deny(c, "too-many-connections");
        return;
    }
    const char *reason;
    int d = cdn_egress_decide_ip(b, c->dst_ip, c->dst_port, &reason);
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

/* accept() failed (EMFILE, ENFILE, ENOBUFS…): stop accepting for a moment
 * instead of spinning on a listener that stays readable. */
static void resume_accept(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct cdn_proxy *px = arg;
    (void) evconnlistener_enable(px->lst);
}

static void accept_error(struct evconnlistener *l, void *arg)
{
    struct cdn_proxy *px = arg;
    (void) evconnlistener_disable(l);
    struct timeval tv = {.tv_usec = 100 * 1000};
    (void) evtimer_add(px->backoff, &tv);
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
    px->backoff = evtimer_new(base, resume_accept, px);
    if (!px->backoff) {
        evconnlistener_free(px->lst);
        free(px);
        errno = ENOMEM;
        return NULL;
    }
    evconnlistener_set_error_cb(px->lst, accept_error);
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
    while (!LIST_EMPTY(&p->conns)) {
        struct pconn *c = LIST_FIRST(&p->conns);
        audit(c, c->state == P_SPLICE, "owner-stopped");
        pconn_free(c);
    }
    event_free(p->backoff);
    evconnlistener_free(p->lst);
    free(p);
}

/* Is c still allowed under b's current list? */
static bool still_allowed(const struct pconn *c, const struct cdn_egress_box *b)
{
    const char *reason;
    if (c->connect_req || c->absolute) {
        if (c->up_ip && cdn_egress_decide_ip(b, c->up_ip, c->up_port, &reason) > 0)
            return true;
        return b->mode == CDN_NET_OPEN || cdn_allowlist_match_name(&b->allow, c->name, c->up_port);
    }
    int d = cdn_egress_decide_ip(b, c->dst_ip, c->dst_port, &reason);
    if (d != 0)
        return d > 0;
    /* Named connections were checked against the pins when they opened; the
     * name is what the list speaks of now. */
    return c->name[0] && cdn_allowlist_match_name(&b->allow, c->name, c->dst_port);
}

/* Close with a reset, not a FIN: a cut stream must not look complete. */
void cdn_proxy_cut(struct pconn *c)
{
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    int fds[] = {c->cli ? bufferevent_getfd(c->cli) : c->cli_fd, c->up ? bufferevent_getfd(c->up) : c->up_fd};
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            (void) setsockopt(fds[i], SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

void cdn_proxy_recheck(struct cdn_proxy *p, struct cdn_egress_box *b)
{
    struct pconn *c, *next;
    for (c = LIST_FIRST(&p->conns); c; c = next) {
        next = LIST_NEXT(c, link);
        if (c->box != b || c->state == P_SNIFF || c->state == P_CLOSING || still_allowed(c, b))
            continue;
        c->http = false; /* no answer: the connection is cut */
        cdn_proxy_cut(c);
        deny(c, "policy-change");
    }
}

void cdn_proxy_forget(struct cdn_proxy *p, struct cdn_egress_box *b)
{
    struct pconn *c, *next;
    for (c = LIST_FIRST(&p->conns); c; c = next) {
        next = LIST_NEXT(c, link);
        if (c->box != b)
            continue;
        audit(c, c->state == P_SPLICE, "sandbox-gone"); /* the box is still registered */
        pconn_free(c);
    }
}
