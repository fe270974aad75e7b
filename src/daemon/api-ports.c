/* cordond: a sandbox's TCP ports, reached from the client — …/ports/{port}[/path…] (docs/cordond.md).
 * Runs in the loop.
 *
 * cordond makes the connection itself, from inside the sandbox's network namespace (the socket is
 * created there: setns for the socket() call only), to 127.0.0.1:{port}: whatever the sandbox's
 * network mode, nothing is exposed on an interface of the host, and the connection is subject to the
 * sandbox's own rules, as the agent's connections are. Two ways in:
 *
 *  - HTTP (the default): the client's request is sent on with its target cut to what follows the
 *    port ("/v1/sandboxes/ID/ports/8000/api?x=1" → "/api?x=1"), without cordond's bearer token and
 *    hop-by-hop fields, with "Connection: close" (each request its own connection upstream) unless it
 *    asks for an Upgrade (a WebSocket), and X-Forwarded-Prefix. The answer comes back as it is sent,
 *    bytes unread by cordond: a WebSocket after its 101 goes on both ways.
 *  - A raw TCP tunnel ("Upgrade: cordon-tcp"): cordond answers 101 once the sandbox accepted the
 *    connection, and bytes pass both ways (cordon port-forward, the SDK's open_port).
 *
 * The client's connection is taken from evhttp once its request has been read: its socket is
 * duplicated and evhttp's descriptor number is pointed at a spare socket, so that what evhttp does
 * when it drops the connection (shutdown, close) reaches the spare, never the client.
 *
 * Trusted: the operator's request. Not trusted: everything from the sandbox's side, which is never
 * parsed; each direction is bounded (PIPE_HIGH waiting: the other side is not read meanwhile). */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/keyvalq_struct.h>

#include "api.h"
#include "tiers/tier.h"

#define PIPE_HIGH     (1u << 20) /* bytes waiting for one side before the other is not read */
#define TUNNELS_MAX   64         /* per sandbox */
#define TUNNELS_TOTAL 1024       /* in all (they are not counted as the API's connections) */

/* What of the client's bytes go to the sandbox. RAW: all of them (a tunnel the client asked for).
 * UPGRADE: the request, then nothing until the server's answer begins with a 101 (a WebSocket),
 * then all. PLAIN: the request only. A client that reuses its connection for another request
 * (a pooling HTTP client, with the next cordond call and its bearer token) never has it reach
 * the sandbox: more bytes from it end the tunnel. */
enum tunnel_mode { TUNNEL_PLAIN, TUNNEL_UPGRADE, TUNNEL_RAW };

struct relay;

struct tunnel {
    struct box *box;
    struct relay *relay; /* a VM guest's: the sandbox's side goes through its init (below) */
    struct bufferevent *client, *up;
    struct evbuffer *pending; /* for the sandbox's side once connected: the request (RAW: what followed) */
    struct evbuffer *held;    /* UPGRADE: what followed the request, until the 101 */
    enum tunnel_mode mode;
    bool connected, client_eof, up_eof;
    bool client_passes; /* the client's bytes go on (RAW once connected; UPGRADE after the 101) */
    bool decided;       /* UPGRADE: the server's answer was looked at */
    uint16_t port;
    LIST_ENTRY(tunnel) link;
};

static unsigned tunnels_total;

static void relay_close(struct relay *r);

static void tunnel_free(struct tunnel *t)
{
    if (t->relay)
        relay_close(t->relay);
    if (t->client)
        bufferevent_free(t->client);
    if (t->up)
        bufferevent_free(t->up);
    if (t->pending)
        evbuffer_free(t->pending);
    if (t->held)
        evbuffer_free(t->held);
    LIST_REMOVE(t, link);
    t->box->n_tunnels--;
    tunnels_total--;
    free(t);
}

void cdn_api_ports_end(struct box *b)
{
    while (!LIST_EMPTY(&b->tunnels))
        tunnel_free(LIST_FIRST(&b->tunnels));
}

/* A short answer straight to the client's socket, then the tunnel goes. */
static void fail(struct tunnel *t, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(struct tunnel *t, int status, const char *code, const char *fmt, ...)
{
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    (void) vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *body = cdn_api_error_json(code, "port", msg);
    _cleanup_free_ char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status,
                     status == 502   ? "Bad Gateway"
                     : status == 429 ? "Too Many Requests"
                                     : "Error",
                     s ? strlen(s) + 1 : 1);
    int fd = bufferevent_getfd(t->client);
    if (n > 0)
        (void) send(fd, head, (size_t) n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (s)
        (void) send(fd, s, strlen(s), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void) send(fd, "\n", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    tunnel_free(t);
}

static void pass(struct bufferevent *from, struct bufferevent *to)
{
    (void) evbuffer_add_buffer(bufferevent_get_output(to), bufferevent_get_input(from));
    if (evbuffer_get_length(bufferevent_get_output(to)) >= PIPE_HIGH)
        bufferevent_disable(from, EV_READ); /* until to has taken most of it (on_drained) */
}

/* A raw tunnel: both ways ended and passed on. HTTP: the server's answer ended (it closed) and
 * reached the client. Either way the tunnel goes; a half-close is passed on meanwhile. */
static void maybe_done(struct tunnel *t)
{
    bool client_out = evbuffer_get_length(bufferevent_get_output(t->client)) > 0;
    bool up_out = t->up && evbuffer_get_length(bufferevent_get_output(t->up)) > 0;
    if (t->up_eof && !client_out && (t->mode != TUNNEL_RAW || (t->client_eof && !up_out)))
        return tunnel_free(t);
    if (t->up_eof && !client_out)
        (void) shutdown(bufferevent_getfd(t->client), SHUT_WR); /* its end, passed on */
    if (t->client_eof && !up_out && t->client_passes)
        (void) shutdown(bufferevent_getfd(t->up), SHUT_WR);
}

/* UPGRADE: the server's answer's first bytes say whether the client's may follow. */
static bool decide(struct tunnel *t)
{
    struct evbuffer *in = bufferevent_get_input(t->up);
    if (evbuffer_get_length(in) < 12 && !t->up_eof)
        return false; /* not enough to tell yet */
    const char *head = (const char *) evbuffer_pullup(in, 12);
    t->decided = true;
    if (head && (memcmp(head, "HTTP/1.1 101", 12) == 0 || memcmp(head, "HTTP/1.0 101", 12) == 0)) {
        t->client_passes = true;
        (void) evbuffer_add_buffer(bufferevent_get_output(t->up), t->held);
        bufferevent_enable(t->client, EV_READ);
    }
    return true;
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct tunnel *t = arg;
    if (bev == t->client && !t->client_passes) {
        if (t->mode == TUNNEL_PLAIN || t->decided)
            return tunnel_free(t); /* another request on this connection: never the sandbox's to see */
        (void) bufferevent_disable(bev, EV_READ); /* read on once the sandbox's side is there */
        return;
    }
    if (bev == t->up && t->mode == TUNNEL_UPGRADE && !t->decided && !decide(t))
        return;
    pass(bev, bev == t->client ? t->up : t->client);
}

static void on_drained(struct bufferevent *bev, void *arg)
{
    struct tunnel *t = arg;
    struct bufferevent *other = bev == t->client ? t->up : t->client;
    bool other_eof = bev == t->client ? t->up_eof : t->client_eof;
    if (other && !other_eof && (other == t->up ? t->connected : t->client_passes || t->mode != TUNNEL_RAW))
        bufferevent_enable(other, EV_READ);
    maybe_done(t);
}

static void connected(struct tunnel *t);

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct tunnel *t = arg;
    if (bev == t->up && (what & BEV_EVENT_CONNECTED))
        return connected(t);
    if (bev == t->up && !t->connected) {
        int e = evutil_socket_geterror(bufferevent_getfd(bev));
        return fail(t, 502, "port_unreachable", "nothing accepts connections on port %u in sandbox %s: %s",
                    t->port, t->box->sb.id, strerror(e ? e : ECONNREFUSED));
    }
    if (what & BEV_EVENT_ERROR)
        return tunnel_free(t); /* a reset either way: the other side's connection goes too */
    if (what & BEV_EVENT_EOF) {
        if (bev == t->up) {
            t->up_eof = true;
            if (t->mode == TUNNEL_UPGRADE && !t->decided)
                (void) decide(t);
            pass(t->up, t->client);
        } else {
            t->client_eof = true;
            if (t->client_passes)
                pass(t->client, t->up);
        }
        bufferevent_disable(bev, EV_READ);
        maybe_done(t);
    }
}

/* The sandbox accepted the connection: what waited goes, both sides are read. */
static void connected(struct tunnel *t)
{
    t->connected = true;
    if (t->mode == TUNNEL_RAW) {
        evbuffer_add_printf(bufferevent_get_output(t->client), "HTTP/1.1 101 Switching Protocols\r\nUpgrade: "
                                                               "cordon-tcp\r\nConnection: Upgrade\r\n\r\n");
        t->client_passes = true;
    }
    (void) evbuffer_add_buffer(bufferevent_get_output(t->up), t->pending);
    bufferevent_enable(t->up, EV_READ | EV_WRITE);
    /* PLAIN reads the client only to see it go or send more (which ends the tunnel) */
    if (!t->client_eof)
        bufferevent_enable(t->client, t->mode == TUNNEL_UPGRADE ? EV_WRITE : EV_READ | EV_WRITE);
    cdn_box_touch(t->box);
    /* What a raw client sent, and its end, while the sandbox's side was still connecting (a guest's
     * relay takes a while): seen lost before, the echo of a short write with its FIN came back empty. */
    if (t->client_passes && evbuffer_get_length(bufferevent_get_input(t->client)))
        pass(t->client, t->up);
    if (t->client_eof)
        maybe_done(t);
}

/* ---- a VM guest's side: relayed by its init (frame TCP, src/agent/init-tcp.c) ----
 *
 * The tunnel's sandbox side is one end of a socket pair; the relay moves the other end's bytes to
 * and from init as DATA frames on the relay's channel, each way within the other side's WINDOW.
 * The guest is hostile: a frame it may not send ends the agent connection (agent-conn.h), DATA past
 * what was granted ends the relay, and nothing it sends is parsed. */
#define RELAY_WINDOW (256u << 10)
#define RELAY_CHUNK  (64u << 10)

struct relay {
    struct box *box;
    struct tunnel *tunnel; /* until the tunnel goes */
    struct agent_req req;
    struct bufferevent *bev; /* our end of the pair */
    uint64_t may_send;       /* bytes the guest takes before its next WINDOW */
    uint64_t granted;        /* bytes the guest may still send us */
    size_t queued;           /* bytes it sent that the pair has not taken yet (granted back as it does) */
    bool open, guest_eof, local_eof, local_said; /* local_said: its end went to the guest */
    bool ended; /* the guest ended the relay (DONE, ERROR): it goes once the pair took what came before */
};

static void relay_free(struct relay *r)
{
    if (r->tunnel)
        r->tunnel->relay = NULL;
    cdn_agent_conn_remove(&r->box->agent, &r->req);
    if (r->bev)
        bufferevent_free(r->bev);
    free(r);
}

/* The tunnel went (or the relay must): the guest is told to close, and the relay goes. */
static void relay_close(struct relay *r)
{
    r->tunnel = NULL;
    if (r->req.listed)
        (void) cdn_agent_conn_send(&r->box->agent, CDN_FRAME_CANCEL, 0, r->req.channel, NULL, 0);
    relay_free(r);
}

/* Bytes of ours the guest may have, as its window allows. */
static void relay_send(struct relay *r)
{
    struct evbuffer *in = bufferevent_get_input(r->bev);
    static uint8_t buf[RELAY_CHUNK];
    while (r->may_send && evbuffer_get_length(in)) {
        size_t n = evbuffer_remove(in, buf, r->may_send < sizeof buf ? (size_t) r->may_send : sizeof buf);
        if (cdn_agent_conn_send(&r->box->agent, CDN_FRAME_DATA, 0, r->req.channel, buf, (uint32_t) n) < 0)
            return relay_close(r);
        r->may_send -= n;
    }
    if (r->local_eof && !r->local_said && !evbuffer_get_length(in)) {
        (void) cdn_agent_conn_send(&r->box->agent, CDN_FRAME_DATA, 0, r->req.channel, NULL, 0);
        r->local_said = true;
    }
    if (r->may_send && !r->local_eof)
        bufferevent_enable(r->bev, EV_READ);
    else
        bufferevent_disable(r->bev, EV_READ);
}

static void relay_read(struct bufferevent *bev, void *arg)
{
    (void) bev;
    relay_send(arg);
}

/* The pair took some of the guest's bytes: that much more it may send. Its end follows them. */
static void relay_drained(struct bufferevent *bev, void *arg)
{
    struct relay *r = arg;
    size_t left = evbuffer_get_length(bufferevent_get_output(bev));
    if (r->queued > left) {
        uint32_t more = (uint32_t) (r->queued - left);
        uint8_t w[4];
        cdn_window_encode(w, more);
        if (cdn_agent_conn_send(&r->box->agent, CDN_FRAME_WINDOW, 0, r->req.channel, w, sizeof w) == 0)
            r->granted += more;
        r->queued = left;
    }
    if (!left && r->ended)
        return relay_free(r); /* the tunnel sees the pair close */
    if (!left && r->guest_eof)
        (void) shutdown(bufferevent_getfd(bev), SHUT_WR);
}

static void relay_event(struct bufferevent *bev, short what, void *arg)
{
    struct relay *r = arg;
    if (what & BEV_EVENT_ERROR)
        return relay_close(r);  /* the tunnel's end is gone */
    if (what & BEV_EVENT_EOF) { /* the tunnel's client ended its side */
        bufferevent_disable(bev, EV_READ);
        r->local_eof = true;
        relay_send(r);
    }
}

static void relay_frame(struct agent_req *req, uint16_t type, const uint8_t *p, uint32_t len)
{
    struct relay *r = (struct relay *) ((char *) req - offsetof(struct relay, req));
    struct tunnel *t = r->tunnel;
    uint32_t more;
    int e;
    const char *msg;
    switch (type) {
    case CDN_FRAME_WINDOW:
        if (cdn_window_decode(p, len, &more) < 0)
            return relay_close(r);
        r->may_send += more;
        if (!r->open) { /* the first: connected */
            r->open = true;
            if (t)
                connected(t);
        }
        return relay_send(r);
    case CDN_FRAME_DATA:
        if (!r->open || len > r->granted || r->guest_eof)
            return relay_close(r); /* before its WINDOW, past what it was granted, after its end */
        if (!len) {
            r->guest_eof = true;
            return relay_drained(r->bev, r);
        }
        r->granted -= len;
        r->queued += len;
        if (bufferevent_write(r->bev, p, len) < 0)
            return relay_close(r);
        return;
    case CDN_FRAME_ERROR:
        if (!r->open && t && cdn_errmsg_decode(p, len, &e, &msg) == 0) {
            r->tunnel = NULL, t->relay = NULL;
            relay_free(r);
            return fail(t, 502, "port_unreachable",
                        "nothing accepts connections on port %u in sandbox %s: %s", t->port, t->box->sb.id,
                        strerror(e ? e : ECONNREFUSED));
        }
        __attribute__((fallthrough)); /* its end, after what it sent */
    case CDN_FRAME_DONE:
        r->ended = true;
        bufferevent_disable(r->bev, EV_READ);
        return relay_drained(r->bev, r);
    default: /* the connection's end (type 0) */
        return relay_free(r);
    }
}

/* The tunnel's sandbox side for a VM guest: a socket pair whose other end the relay takes. */
static int guest_socket(struct box *b, uint16_t port, struct relay **ret, struct cdn_error *err)
{
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) < 0)
        return cdn_error_set(err, errno, "socketpair: %m");
    struct relay *r = calloc(1, sizeof *r);
    if (!r || !(r->bev = bufferevent_socket_new(cdn_daemon->base, sp[1], BEV_OPT_CLOSE_ON_FREE))) {
        free(r);
        (void) close(sp[0]);
        (void) close(sp[1]);
        return cdn_error_set(err, ENOMEM, "out of memory");
    }
    r->box = b;
    r->granted = RELAY_WINDOW;
    r->req.on_frame = relay_frame;
    bufferevent_setcb(r->bev, relay_read, relay_drained, relay_event, r);
    (void) cdn_agent_conn_add(&b->agent, &r->req,
                              AGENT_FRAME(CDN_FRAME_WINDOW) | AGENT_FRAME(CDN_FRAME_DATA) |
                                  AGENT_FRAME(CDN_FRAME_DONE) | AGENT_FRAME(CDN_FRAME_ERROR));
    uint8_t open[6];
    cdn_tcp_open_encode(open, port, RELAY_WINDOW);
    if (cdn_agent_conn_send(&b->agent, CDN_FRAME_TCP, 0, r->req.channel, open, sizeof open) < 0) {
        relay_free(r);
        (void) close(sp[0]);
        return cdn_error_set(err, ENOTCONN, "the sandbox's init is not connected");
    }
    bufferevent_disable(r->bev, EV_READ); /* until the guest's first WINDOW */
    *ret = r;
    return sp[0];
}

/* A TCP socket in the sandbox's network namespace (its init's): created there, used from here. Never
 * one in cordond's own namespace (a tier that has none of its own: the process tier). */
static int sandbox_socket(struct box *b, struct cdn_error *err)
{
    _cleanup_close_ int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    struct stat own, there;
    if (self < 0 || fstat(self, &own) < 0)
        return cdn_error_set(err, errno, "cordond's network namespace: %m");
    if (b->sb.init_pidfd < 0 || setns(b->sb.init_pidfd, CLONE_NEWNET) < 0)
        return cdn_error_set(err, errno, "enter the sandbox's network namespace: %m");
    int fd = -1, e = 0;
    _cleanup_close_ int ns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (ns >= 0 && fstat(ns, &there) == 0 && (there.st_ino != own.st_ino || there.st_dev != own.st_dev))
        fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    else
        e = ns < 0 ? errno : EXDEV;
    if (fd < 0 && !e)
        e = errno;
    if (setns(self, CLONE_NEWNET) < 0)
        abort(); /* never go on in the sandbox's namespace */
    if (fd < 0)
        return cdn_error_field(err, e, "port", "%s",
                               e == EXDEV
                                   ? "tier process has no network namespace of its own: its ports are the "
                                     "host's, which cordond does not reach for it"
                                   : strerror(e));
    return fd;
}

/* The client's socket, out of evhttp's hands (see the top); what it sent after the request into
 * rest. -errno, with the request still evhttp's to answer; -ECONNABORTED: it is gone (not answered). */
static void drop_conn(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    evhttp_connection_free(arg);
}

static int take_client(struct evhttp_request *req, struct evbuffer *rest)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    int fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0)
        return -ENOTCONN;
    /* What can fail, first: nothing of the connection changed yet. */
    int ours = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (ours < 0)
        return -errno;
    int spare = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (spare < 0) {
        int e = errno;
        (void) close(ours);
        return -e;
    }
    bufferevent_disable(bev, EV_READ | EV_WRITE); /* off the loop's watch before the number changes */
    (void) evbuffer_add_buffer(rest, bufferevent_get_input(bev));
    int r = dup3(spare, fd, O_CLOEXEC) < 0 ? -ECONNABORTED : ours;
    (void) close(spare);
    if (r < 0)
        (void) close(ours); /* evhttp's own socket, disabled: it goes with the connection below */
    /* After this request's callback: evhttp frees the connection and the request (drop_conn). */
    if (event_base_once(cdn_daemon->base, -1, EV_TIMEOUT, drop_conn, conn, &(struct timeval){0}) < 0)
        evhttp_connection_free(conn); /* cannot happen short of memory; the request is not used again */
    return r;
}

static bool hop_by_hop(const char *k)
{
    static const char *const names[] = {
        "authorization", "connection",        "keep-alive",     "proxy-connection", "te",
        "trailer",       "transfer-encoding", "content-length", "upgrade",          "proxy-authorization"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(k, names[i]) == 0)
            return true;
    return false;
}

/* The request as the sandbox's server gets it. target: what follows the port in the client's. */
static int request_head(struct evhttp_request *req, const char *target, const char *prefix,
                        struct evbuffer *out)
{
    static const struct {
        enum evhttp_cmd_type m;
        const char *name;
    } methods[] = {{EVHTTP_REQ_GET, "GET"},       {EVHTTP_REQ_POST, "POST"},
                   {EVHTTP_REQ_HEAD, "HEAD"},     {EVHTTP_REQ_PUT, "PUT"},
                   {EVHTTP_REQ_DELETE, "DELETE"}, {EVHTTP_REQ_OPTIONS, "OPTIONS"},
                   {EVHTTP_REQ_TRACE, "TRACE"},   {EVHTTP_REQ_PATCH, "PATCH"}};
    const char *m = NULL;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (methods[i].m == evhttp_request_get_command(req))
            m = methods[i].name;
    if (!m)
        return -EINVAL;
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *upgrade = evhttp_find_header(h, "Upgrade");
    struct evbuffer *body = evhttp_request_get_input_buffer(req);
    evbuffer_add_printf(out, "%s %s HTTP/1.1\r\n", m, target);
    for (struct evkeyval *kv = TAILQ_FIRST(h); kv; kv = TAILQ_NEXT(kv, next))
        if (!hop_by_hop(kv->key) && strcasecmp(kv->key, "x-forwarded-prefix") != 0)
            evbuffer_add_printf(out, "%s: %s\r\n", kv->key, kv->value);
    if (upgrade)
        evbuffer_add_printf(out, "Connection: Upgrade\r\nUpgrade: %s\r\n", upgrade);
    else
        evbuffer_add_printf(out, "Connection: close\r\n");
    if (evbuffer_get_length(body) || m[0] == 'P')
        evbuffer_add_printf(out, "Content-Length: %zu\r\n", evbuffer_get_length(body));
    evbuffer_add_printf(out, "X-Forwarded-Prefix: %s\r\n\r\n", prefix);
    (void) evbuffer_add_buffer(out, body);
    return 0;
}

void cdn_api_ports(struct evhttp_request *req, struct box *b, const char *sub)
{
    char *end = NULL;
    unsigned long port = strtoul(sub, &end, 10);
    if (!end || end == sub || (*end && *end != '/') || port == 0 || port > 65535 || sub[0] == '0')
        return cdn_api_reply_error(req, 400, "invalid_argument", "port", "port: a TCP port, 1-65535");
    const struct cdn_tier_ops *tier = b->sb.tier;
    if (b->n_tunnels >= TUNNELS_MAX || tunnels_total >= TUNNELS_TOTAL)
        return cdn_api_reply_error(
            req, 429, "too_many_connections", "port",
            "%d connections to ports are open in this sandbox, %u in all (at most %d, %d)", b->n_tunnels,
            tunnels_total, TUNNELS_MAX, TUNNELS_TOTAL);
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *upgrade = evhttp_find_header(h, "Upgrade");
    bool raw = upgrade && strcasecmp(upgrade, "cordon-tcp") == 0;
    /* The target after the port, as the client sent it (still URL-encoded), query included. */
    const char *uri = evhttp_request_get_uri(req), *at = NULL;
    char seg[16];
    (void) snprintf(seg, sizeof seg, "/ports/%lu", port);
    for (const char *p = strstr(uri, seg); p && !at; p = strstr(p + 1, seg)) /* the route's own: the first */
        if (p[strlen(seg)] == '/' || p[strlen(seg)] == '?' || !p[strlen(seg)])
            at = p + strlen(seg);
    char prefix[128];
    (void) snprintf(prefix, sizeof prefix, "/v1/sandboxes/%s/ports/%lu", b->sb.id, port);
    _cleanup_free_ char *target = NULL;
    if (!at || asprintf(&target, "%s%s", at[0] == '/' ? "" : "/", at) < 0)
        return cdn_api_reply_error(req, 400, "invalid_argument", "port",
                                   "the request's target does not parse");
    struct cdn_error err = {0};
    struct relay *relay = NULL; /* a VM guest's connections go through its init */
    int up =
        tier->guest_supervises ? guest_socket(b, (uint16_t) port, &relay, &err) : sandbox_socket(b, &err);
    if (up < 0)
        return cdn_api_reply_cdn_error(req, up == -EXDEV ? 501 : 500,
                                       up == -EXDEV ? "not_supported" : "internal", &err);
    struct tunnel *t = calloc(1, sizeof *t);
    if (!t || !(t->pending = evbuffer_new()) || (!raw && request_head(req, target, prefix, t->pending) < 0)) {
        if (relay)
            relay_close(relay);
        (void) close(up);
        if (t && t->pending)
            evbuffer_free(t->pending);
        free(t);
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory, or a method not passed on");
    }
    struct evbuffer *rest = evbuffer_new(), *held = evbuffer_new();
    int client = rest && held ? take_client(req, rest) : -ENOMEM;
    if (client < 0) {
        if (relay)
            relay_close(relay);
        (void) close(up);
        if (rest)
            evbuffer_free(rest);
        if (held)
            evbuffer_free(held);
        evbuffer_free(t->pending);
        free(t);
        if (client != -ECONNABORTED) /* still evhttp's: answered */
            cdn_api_reply_error(req, 503, "unavailable", "port", "cannot take the connection over: %s",
                                strerror(-client));
        return;
    }
    enum tunnel_mode mode = raw ? TUNNEL_RAW : upgrade ? TUNNEL_UPGRADE : TUNNEL_PLAIN;
    if (mode == TUNNEL_RAW) /* what a raw client sent before the 101 is its stream's start */
        (void) evbuffer_add_buffer(t->pending, rest);
    else if (mode == TUNNEL_UPGRADE) /* a WebSocket's first frames, once the server said 101 */
        (void) evbuffer_add_buffer(held, rest);
    evbuffer_free(rest); /* PLAIN: another request of the client's, never passed on */
    *t =
        (struct tunnel){.box = b, .pending = t->pending, .held = held, .mode = mode, .port = (uint16_t) port};
    tunnels_total++;
    t->client = bufferevent_socket_new(cdn_daemon->base, client, BEV_OPT_CLOSE_ON_FREE);
    t->up = bufferevent_socket_new(cdn_daemon->base, up, BEV_OPT_CLOSE_ON_FREE);
    LIST_INSERT_HEAD(&b->tunnels, t, link);
    b->n_tunnels++;
    t->relay = relay;
    if (relay)
        relay->tunnel = t;
    if (!t->client || !t->up) {
        if (!t->client)
            (void) close(client);
        if (!t->up)
            (void) close(up);
        return tunnel_free(t);
    }
    bufferevent_setcb(t->client, on_read, on_drained, on_event, t);
    bufferevent_setcb(t->up, on_read, on_drained, on_event, t);
    bufferevent_setwatermark(t->client, EV_WRITE, PIPE_HIGH / 4, 0);
    bufferevent_setwatermark(t->up, EV_WRITE, PIPE_HIGH / 4, 0);
    if (relay)
        return; /* connected when the guest's init says so (relay_frame) */
    struct sockaddr_in sin = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t) port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bufferevent_socket_connect(t->up, (struct sockaddr *) &sin, sizeof sin) < 0)
        return fail(t, 502, "port_unreachable", "cannot connect to port %lu in sandbox %s", port, b->sb.id);
}
