/* Host side of the agent protocol on a bufferevent: frames out, frames in,
 * each incoming frame routed to the request that owns its channel.
 *
 * Runs in cordond's loop. The peer is cordon-init inside a sandbox: it is
 * ours, but the sandbox around it is not, so every frame is decoded as
 * hostile input; a frame that does not decode ends the connection. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

static uint8_t payload[CDN_FRAME_MAX];

static void end_all(struct agent_conn *c)
{
    while (!LIST_EMPTY(&c->reqs)) {
        struct agent_req *r = LIST_FIRST(&c->reqs);
        LIST_REMOVE(r, link);
        r->on_frame(r, 0, NULL, 0);
    }
}

static void hang_up(struct agent_conn *c)
{
    if (c->bev) {
        bufferevent_free(c->bev);
        c->bev = NULL;
    }
    end_all(c);
    if (c->on_close)
        c->on_close(c, c->arg);
}

static struct agent_req *find(struct agent_conn *c, uint32_t channel)
{
    struct agent_req *r;
    LIST_FOREACH(r, &c->reqs, link)
    if (r->channel == channel)
        return r;
    return NULL;
}

static bool is_last(uint16_t type)
{
    return type == CDN_FRAME_EXIT || type == CDN_FRAME_ERROR || type == CDN_FRAME_DONE ||
           type == CDN_FRAME_RESULT;
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct agent_conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    for (;;) {
        uint8_t hdr[CDN_FRAME_HEADER];
        struct cdn_frame_header h;
        if (evbuffer_copyout(in, hdr, sizeof hdr) < (ev_ssize_t) sizeof hdr)
            return;
        if (cdn_frame_header_decode(hdr, &h) < 0) {
            hang_up(c);
            return;
        }
        if (evbuffer_get_length(in) < CDN_FRAME_HEADER + (size_t) h.length)
            return;
        (void) evbuffer_drain(in, CDN_FRAME_HEADER);
        if (h.length)
            (void) evbuffer_remove(in, payload, h.length);
        struct agent_req *r = find(c, h.channel);
        if (!r && h.channel == 0 && c->on_event) {
            c->on_event(c, h.type, payload, h.length, c->arg); /* may close c */
            if (!c->bev)
                return;
            continue;
        }
        if (!r)
            continue; /* a request we gave up on (its client left), or channel 0 */
        if (is_last(h.type))
            LIST_REMOVE(r, link);
        r->on_frame(r, h.type, payload, h.length); /* may free r, or close c */
        if (!c->bev)
            return;
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    (void) bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        hang_up(arg);
}

int agent_conn_open(struct agent_conn *c, struct event_base *base, int fd)
{
    /* Channels are numbered from a random start. A VM guest's port is one stream across hosts: a
     * guest that did not see the last host hang up (the reconnection came first) still runs that
     * host's commands on their channels, and their frames arrive here. Numbered from 1 again, the
     * first exec would clash with them (EEXIST) and could be sent their output. */
    uint32_t start = 1;
    if (getrandom(&start, sizeof start, GRND_NONBLOCK) != (ssize_t) sizeof start)
        start = (uint32_t) getpid() << 16 ^ (uint32_t) time(NULL); /* the pool not yet seeded: early boot */
    *c = (struct agent_conn){
        .next_channel = start, .on_close = c->on_close, .on_event = c->on_event, .arg = c->arg};
    LIST_INIT(&c->reqs);
    if (evutil_make_socket_nonblocking(fd) < 0)
        return -errno;
    c->bev = bufferevent_socket_new(base, fd, 0); /* fd stays owned by the sandbox */
    if (!c->bev)
        return -ENOMEM;
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    return bufferevent_enable(c->bev, EV_READ) < 0 ? -EIO : 0;
}

void agent_conn_close(struct agent_conn *c)
{
    c->on_close = NULL;
    hang_up(c);
}

uint32_t agent_conn_add(struct agent_conn *c, struct agent_req *r)
{
    do
        r->channel = c->next_channel++;
    while (r->channel == 0 || find(c, r->channel));
    LIST_INSERT_HEAD(&c->reqs, r, link);
    return r->channel;
}

void agent_conn_remove(struct agent_conn *c, struct agent_req *r)
{
    (void) c;
    LIST_REMOVE(r, link);
}

int agent_conn_send(struct agent_conn *c, uint16_t type, uint16_t flags, uint32_t channel, const void *p,
                    uint32_t len)
{
    if (!c->bev)
        return -ENOTCONN;
    uint8_t hdr[CDN_FRAME_HEADER];
    cdn_frame_header_encode(
        hdr, &(struct cdn_frame_header){.type = type, .flags = flags, .channel = channel, .length = len});
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (evbuffer_add(out, hdr, sizeof hdr) < 0 || (len && evbuffer_add(out, p, len) < 0))
        return -ENOMEM;
    return 0;
}

void agent_conn_pause(struct agent_conn *c, bool pause)
{
    if (!c->bev)
        return;
    if (pause) {
        bufferevent_disable(c->bev, EV_READ);
        return;
    }
    bufferevent_enable(c->bev, EV_READ);
    /* Frames already read before the pause: from the loop, not from here
     * (we may be inside on_read, whose payload buffer must not be reused). */
    if (evbuffer_get_length(bufferevent_get_input(c->bev)) >= CDN_FRAME_HEADER)
        bufferevent_trigger(c->bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}
