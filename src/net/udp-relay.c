/* The UDP relay of `open` mode: see udp-relay.h. */
#include "net/udp-relay.h"
#include "net/netns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

struct flow {
    struct cdn_udp_relay *r;
    LIST_ENTRY(flow) link;
    struct cdn_egress_box *box;
    uint32_t src, dst; /* sandbox address, original destination (host byte order) */
    uint16_t sport, dport;
    int fd; /* connected to dst; -1 for a refused flow (remembered to audit it once) */
    struct event *ev;
    uint64_t t0_ms, last_ms, bytes_up, bytes_down;
    char reason[64]; /* refused: why */
};

struct cdn_udp_relay {
    struct event_base *base;
    int fd;
    uint16_t port;
    struct event *ev, *sweep;
    struct mnl_socket *ct; /* conntrack: where a redirected datagram was going */
    const struct cdn_egress_ops *ops;
    LIST_HEAD(, flow) flows;
    unsigned n;
};

static void flow_end(struct flow *f, const char *reason)
{
    struct cdn_udp_relay *r = f->r;
    struct cdn_audit a = {
        .proto = "udp",
        .dst_ip = f->dst,
        .dst_port = f->dport,
        .name = cdn_pins_name_of(f->box->pins, f->dst, cdn_now_ms()),
        .via = NULL,
        .allowed = f->fd >= 0,
        .reason = f->fd >= 0 ? reason : f->reason,
        .bytes_up = f->bytes_up,
        .bytes_down = f->bytes_down,
        .duration_ms = (double) (cdn_now_ms() - f->t0_ms),
    };
    if (a.name)
        a.via = "dns";
    r->ops->audit(r->ops->arg, f->box, &a);
    if (f->ev)
        event_free(f->ev);
    if (f->fd >= 0)
        (void) close(f->fd);
    if (f->box->udp_flows)
        f->box->udp_flows--;
    LIST_REMOVE(f, link);
    r->n--;
    free(f);
}

/* The original destination of a datagram the redirect sent to us from
 * (src, sport): conntrack's reply tuple is (host_ip:our port → src:sport). */
static int orig_dst(struct cdn_udp_relay *r, const struct cdn_egress_box *b, uint16_t sport, uint32_t *dst,
                    uint16_t *dport)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET;
    nlh->nlmsg_flags = NLM_F_REQUEST;
    static uint32_t seq;
    nlh->nlmsg_seq = ++seq;
    struct nfgenmsg *g = mnl_nlmsg_put_extra_header(nlh, sizeof *g);
    g->nfgen_family = AF_INET;
    g->version = NFNETLINK_V0;
    struct nlattr *t = mnl_attr_nest_start(nlh, CTA_TUPLE_REPLY);
    struct nlattr *ip = mnl_attr_nest_start(nlh, CTA_TUPLE_IP);
    mnl_attr_put_u32(nlh, CTA_IP_V4_SRC, htonl(b->host_ip));
    mnl_attr_put_u32(nlh, CTA_IP_V4_DST, htonl(b->sandbox_ip));
    mnl_attr_nest_end(nlh, ip);
    struct nlattr *pr = mnl_attr_nest_start(nlh, CTA_TUPLE_PROTO);
    mnl_attr_put_u8(nlh, CTA_PROTO_NUM, IPPROTO_UDP);
    mnl_attr_put_u16(nlh, CTA_PROTO_SRC_PORT, htons(r->port));
    mnl_attr_put_u16(nlh, CTA_PROTO_DST_PORT, htons(sport));
    mnl_attr_nest_end(nlh, pr);
    mnl_attr_nest_end(nlh, t);
    if (mnl_socket_sendto(r->ct, nlh, nlh->nlmsg_len) < 0)
        return -errno;
    ssize_t n = mnl_socket_recvfrom(r->ct, buf, sizeof buf);
    if (n < (ssize_t) sizeof(struct nlmsghdr))
        return -EIO;
    nlh = (struct nlmsghdr *) buf;
    if (!mnl_nlmsg_ok(nlh, (int) n) || nlh->nlmsg_seq != seq || nlh->nlmsg_type == NLMSG_ERROR)
        return -ENOENT;
    /* CTA_TUPLE_ORIG → CTA_TUPLE_IP → CTA_IP_V4_DST, CTA_TUPLE_PROTO → CTA_PROTO_DST_PORT */
    struct nlattr *a, *b2, *c;
    bool got_ip = false, got_port = false;
    mnl_attr_for_each(a, nlh, sizeof(struct nfgenmsg))
    {
        if (mnl_attr_get_type(a) != CTA_TUPLE_ORIG || mnl_attr_validate(a, MNL_TYPE_NESTED) < 0)
            continue;
        mnl_attr_for_each_nested(b2, a)
        {
            if (mnl_attr_validate(b2, MNL_TYPE_NESTED) < 0)
                continue;
            mnl_attr_for_each_nested(c, b2)
            {
                if (mnl_attr_get_type(b2) == CTA_TUPLE_IP && mnl_attr_get_type(c) == CTA_IP_V4_DST &&
                    mnl_attr_validate(c, MNL_TYPE_U32) == 0) {
                    *dst = ntohl(mnl_attr_get_u32(c));
                    got_ip = true;
                }
                if (mnl_attr_get_type(b2) == CTA_TUPLE_PROTO && mnl_attr_get_type(c) == CTA_PROTO_DST_PORT &&
                    mnl_attr_validate(c, MNL_TYPE_U16) == 0) {
                    *dport = ntohs(mnl_attr_get_u16(c));
                    got_port = true;
                }
            }
        }
    }
    return got_ip && got_port ? 0 : -ENOENT;
}

static void flow_reply(evutil_socket_t fd, short what, void *arg)
{
    (void) what;
    struct flow *f = arg;
    struct cdn_udp_relay *r = f->r;
    uint8_t buf[65536];
    for (int i = 0; i < 64; i++) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0)
            return; /* EAGAIN, or an ICMP error for a connected socket: the sandbox sees nothing */
        struct sockaddr_in to = {
            .sin_family = AF_INET, .sin_port = htons(f->sport), .sin_addr.s_addr = htonl(f->src)};
        /* From our port to the sandbox: conntrack turns the source back into dst:dport. */
        if (sendto(r->fd, buf, (size_t) n, MSG_DONTWAIT, (struct sockaddr *) &to, sizeof to) == n)
            f->bytes_down += (uint64_t) n;
        f->last_ms = cdn_now_ms();
    }
}

static struct flow *flow_find(struct cdn_udp_relay *r, uint32_t src, uint16_t sport, uint32_t dst,
                              uint16_t dport)
{
    struct flow *f;
    LIST_FOREACH(f, &r->flows, link)
    if (f->src == src && f->sport == sport && f->dst == dst && f->dport == dport)
        return f;
    return NULL;
}

static const char *refusal(const struct cdn_egress_box *b, uint32_t dst, uint16_t dport)
{
    if (b->mode != CDN_NET_OPEN)
        return "not-open";
    const char *reason;
    return cdn_egress_decide_ip(b, dst, dport, &reason) > 0 ? NULL : reason;
}

static struct flow *flow_new(struct cdn_udp_relay *r, struct cdn_egress_box *b, uint32_t src, uint16_t sport,
                             uint32_t dst, uint16_t dport)
{
    if (b->udp_flows >= CDN_UDP_MAX_FLOWS)
        return NULL;
    struct flow *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    *f = (struct flow){.r = r, .box = b, .src = src, .dst = dst, .sport = sport, .dport = dport, .fd = -1};
    f->t0_ms = f->last_ms = cdn_now_ms();
    LIST_INSERT_HEAD(&r->flows, f, link);
    r->n++;
    b->udp_flows++;
    const char *why = refusal(b, dst, dport);
    if (why) {
        (void) snprintf(f->reason, sizeof f->reason, "%s", why);
        return f;
    }
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(dport), .sin_addr.s_addr = htonl(dst)};
    f->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (f->fd < 0 || connect(f->fd, (struct sockaddr *) &sin, sizeof sin) < 0 ||
        !(f->ev = event_new(r->base, f->fd, EV_READ | EV_PERSIST, flow_reply, f)) ||
        event_add(f->ev, NULL) < 0) {
        if (f->fd >= 0)
            (void) close(f->fd);
        f->fd = -1;
        (void) snprintf(f->reason, sizeof f->reason, "relay-error");
    }
    return f;
}

static void on_datagram(evutil_socket_t fd, short what, void *arg)
{
    (void) what;
    struct cdn_udp_relay *r = arg;
    uint8_t buf[65536];
    for (int i = 0; i < 64; i++) {
        struct sockaddr_in from;
        socklen_t flen = sizeof from;
        ssize_t n = recvfrom(fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *) &from, &flen);
        if (n < 0)
            return;
        uint32_t src = ntohl(from.sin_addr.s_addr);
        uint16_t sport = ntohs(from.sin_port), dport = 0;
        uint32_t dst = 0;
        struct cdn_egress_box *b = r->ops->lookup(r->ops->arg, src);
        if (!b || orig_dst(r, b, sport, &dst, &dport) < 0)
            continue; /* not from a sandbox we know, or not redirected */
        struct flow *f = flow_find(r, src, sport, dst, dport);
        if (!f && !(f = flow_new(r, b, src, sport, dst, dport)))
            continue; /* over the limit: dropped */
        f->last_ms = cdn_now_ms();
        if (f->fd < 0)
            continue; /* refused: audited once, when the flow is forgotten */
        if (send(f->fd, buf, (size_t) n, MSG_DONTWAIT) == n)
            f->bytes_up += (uint64_t) n;
    }
}

static void sweep(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct cdn_udp_relay *r = arg;
    uint64_t now = cdn_now_ms();
    struct flow *f, *next;
    for (f = LIST_FIRST(&r->flows); f; f = next) {
        next = LIST_NEXT(f, link);
        if (now - f->last_ms >= CDN_UDP_IDLE_MS)
            flow_end(f, "idle");
    }
}

struct cdn_udp_relay *cdn_udp_relay_new(struct event_base *base, uint16_t port,
                                        const struct cdn_egress_ops *ops)
{
    struct cdn_udp_relay *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->base = base;
    r->ops = ops;
    r->fd = -1;
    LIST_INIT(&r->flows);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = INADDR_ANY};
    socklen_t len = sizeof sin;
    struct timeval tv = {.tv_sec = 1};
    r->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (r->fd < 0 || bind(r->fd, (struct sockaddr *) &sin, sizeof sin) < 0 ||
        getsockname(r->fd, (struct sockaddr *) &sin, &len) < 0 ||
        !(r->ct = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC)) ||
        mnl_socket_bind(r->ct, 0, MNL_SOCKET_AUTOPID) < 0 ||
        !(r->ev = event_new(base, r->fd, EV_READ | EV_PERSIST, on_datagram, r)) ||
        event_add(r->ev, NULL) < 0 || !(r->sweep = event_new(base, -1, EV_PERSIST, sweep, r)) ||
        event_add(r->sweep, &tv) < 0) {
        int e = errno ? errno : ENOMEM;
        cdn_udp_relay_free(r);
        errno = e;
        return NULL;
    }
    r->port = ntohs(sin.sin_port);
    return r;
}

uint16_t cdn_udp_relay_port(const struct cdn_udp_relay *r)
{
    return r->port;
}

void cdn_udp_relay_forget(struct cdn_udp_relay *r, struct cdn_egress_box *b, const char *reason)
{
    struct flow *f, *next;
    for (f = LIST_FIRST(&r->flows); f; f = next) {
        next = LIST_NEXT(f, link);
        if (f->box == b)
            flow_end(f, reason);
    }
}

void cdn_udp_relay_free(struct cdn_udp_relay *r)
{
    if (!r)
        return;
    while (!LIST_EMPTY(&r->flows))
        flow_end(LIST_FIRST(&r->flows), "owner-stopped");
    if (r->ev)
        event_free(r->ev);
    if (r->sweep)
        event_free(r->sweep);
    if (r->ct)
        mnl_socket_close(r->ct);
    if (r->fd >= 0)
        (void) close(r->fd);
    free(r);
}
