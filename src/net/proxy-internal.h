/* The egress proxy's connection, shared by proxy.c (accepting, sniffing,
 * deciding, splicing) and proxy-http.c (plain HTTP: every request of a
 * connection judged). Not a public interface: only these two files include
 * it. Everything here runs on the owner's event loop (cordond, or the loop
 * thread of `cordon run`); every byte from the sandbox is hostile. */
#pragma once

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "net/egress.h"
#include "net/proxy.h"
#include "net/sniff.h"

enum pstate { P_SNIFF, P_RESOLVE, P_CONNECT, P_SPLICE, P_CLOSING };

struct pconn {
    struct cdn_proxy *px;
    LIST_ENTRY(pconn) link;
    enum pstate state;
    struct bufferevent *cli, *up;
    struct event *timer;
    struct evdns_request *dnsreq;
    struct plookup *lookup; /* the lookup in flight, which outlives us if we go first */
    int cli_fd, up_fd;      /* in P_SPLICE: the sockets, out of their bufferevents */
    struct pdir {
        struct pconn *c;
        int in, out;
        struct evbuffer *buf; /* read from in, not yet written to out */
        struct event *rev, *wev;
        bool eof, shut;
        uint64_t *count;
    } dir[2];                   /* [0] sandbox → upstream, [1] upstream → sandbox */
    struct cdn_egress_box *box; /* counted in box->tcp_conns; valid while we live (cdn_proxy_forget) */
    uint32_t src;               /* the sandbox's address: the box is looked up by it each time */
    uint32_t dst_ip, up_ip;     /* original destination; where we actually connect */
    uint16_t dst_port, up_port;
    char name[256];
    const char *via;
    bool http, connect_req, absolute;
    size_t head_len; /* the request head: rewritten (HTTP) or answered and dropped (CONNECT) */
    bool audited;
    bool counted_out;         /* refused for a limit, not for the policy */
    const char *allow_reason; /* for the record written when an admitted connection ends */
    uint64_t bytes_up, bytes_down, t0_ms;
    /* Plain HTTP (proxy-http.c): the sandbox's bytes wait in pend until the
     * request stream says what they are; only then do they reach dir[0].buf. */
    struct evbuffer *pend;
    struct cdn_http_stream rq;
    /* A CONNECT tunnel admitted by its name: its first bytes are read
     * (tunnel_first) and, if they are plain HTTP, every request in it. */
    bool tunnel_first;
};

struct cdn_proxy {
    struct event_base *base;
    struct evdns_base *dns;
    struct evconnlistener *lst;
    uint16_t port;
    const struct cdn_egress_ops *ops;
    LIST_HEAD(, pconn) conns;
    unsigned n;
    struct event *backoff;
};

/* proxy.c */
/* The decision for a named transparent connection to (ip, port). */
bool cdn_proxy_decide_named(const struct cdn_egress_box *b, const char *name, uint32_t ip, uint16_t port,
                            bool pinned_needed, const char **reason);
/* An admitted connection ends: its audit record, then it is freed. */
void cdn_proxy_finish(struct pconn *c);
/* Make the close a TCP reset on both sides: a cut stream must not look complete. */
void cdn_proxy_cut(struct pconn *c);

/* proxy-http.c */
/* Judge and pass on what c->pend holds, as far as it can be read and the
 * upstream buffer has room: 1 if something moved, 0 if not, -1 if the
 * connection was refused and freed (c is gone). */
int cdn_proxy_http_pump(struct pconn *c);
