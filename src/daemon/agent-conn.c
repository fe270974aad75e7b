/* Host side of the agent protocol on a bufferevent (agent-conn.h).
 *
 * Runs in cordond's loop. The peer is a sandbox's init: cordon-init, which
 * is ours, but for the VM tiers it runs in a kernel the guest may own. Every
 * frame is checked before anything acts on it: its header (magic, length),
 * its channel's state (the request's accepts) and, for the last frames,
 * that the payload decodes. A frame that fails is a protocol violation and
 * closes the connection; frames for channels no request holds (a request
 * given up on, an old host's command in a guest) are dropped. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent-conn.h"

static uint8_t payload[CDN_FRAME_MAX];

/* What cdn_agent_conn_hold() takes from init before its answer at most. */
#define HOLD_MAX_BYTES (16u << 20)

const char *cdn_agent_frame_name(uint16_t type)
{
    static const char *const names[] = {
        [CDN_FRAME_EXEC] = "EXEC",           [CDN_FRAME_EXIT] = "EXIT",
        [CDN_FRAME_ERROR] = "ERROR",         [CDN_FRAME_SIGNAL] = "SIGNAL",
        [CDN_FRAME_PING] = "PING",           [CDN_FRAME_PONG] = "PONG",
        [CDN_FRAME_STDOUT] = "STDOUT",       [CDN_FRAME_STDERR] = "STDERR",
        [CDN_FRAME_STDIN] = "STDIN",         [CDN_FRAME_FILE] = "FILE",
        [CDN_FRAME_DATA] = "DATA",           [CDN_FRAME_DONE] = "DONE",
        [CDN_FRAME_RESIZE] = "RESIZE",       [CDN_FRAME_QUIESCE] = "QUIESCE",
        [CDN_FRAME_IDENTITY] = "IDENTITY",   [CDN_FRAME_POLICY] = "POLICY",
        [CDN_FRAME_VIOLATION] = "VIOLATION", [CDN_FRAME_USAGE] = "USAGE",
        [CDN_FRAME_CALL] = "CALL",           [CDN_FRAME_RESULT] = "RESULT",
        [CDN_FRAME_CANCEL] = "CANCEL",       [CDN_FRAME_WINDOW] = "WINDOW",
        [CDN_FRAME_PROTECTED] = "PROTECTED", [CDN_FRAME_STARTED] = "STARTED",
        [CDN_FRAME_CONTROL] = "CONTROL",     [CDN_FRAME_TCP] = "TCP",
        [CDN_FRAME_PROTECT] = "PROTECT",     [CDN_FRAME_HOLD] = "HOLD",
    };
    static char unknown[16];
    if (type < sizeof names / sizeof names[0] && names[type])
        return names[type];
    (void) snprintf(unknown, sizeof unknown, "type %u", type);
    return unknown;
}

static void end_all(struct agent_conn *c)
{
    while (!LIST_EMPTY(&c->reqs)) {
        struct agent_req *r = LIST_FIRST(&c->reqs);
        LIST_REMOVE(r, link);
        r->listed = false;
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

void cdn_agent_conn_fail(struct agent_conn *c, const char *fmt, ...)
{
    if (!c->bev)
        return; /* closed already: the first reason stands */
    va_list ap;
    va_start(ap, fmt);
    (void) vsnprintf(c->failure, sizeof c->failure, fmt, ap);
    va_end(ap);
    hang_up(c);
}

const char *cdn_agent_conn_failure(const struct agent_conn *c)
{
    return c->failure[0] ? c->failure : NULL;
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

/* The payload of a last frame, which ends a request with what it says: whether it decodes.
 * DONE carries nothing or one struct cdn_file_stat (with its owner or without), exactly. */
static bool last_payload_ok(uint16_t type, const uint8_t *p, uint32_t len)
{
    struct cdn_exit_msg m;
    struct cdn_file_stat st;
    int e;
    const char *msg;
    switch (type) {
    case CDN_FRAME_EXIT:
        return cdn_exit_decode(p, len, &m) == 0;
    case CDN_FRAME_ERROR:
        return cdn_errmsg_decode(p, len, &e, &msg) == 0;
    case CDN_FRAME_DONE:
        return len == 0 || cdn_file_stat_decode(p, len, &st) == (int) len ||
               cdn_file_stat_decode_owned(p, len, &st) == (int) len;
    default:
        return true; /* RESULT: the caller checks its JSON */
    }
}

/* One whole frame from init (header decoded, payload in the static buffer). Returns false when
 * the connection is gone. */
static bool deliver(struct agent_conn *c, const struct cdn_frame_header *h)
{
    if (h->channel == 0 && h->type == CDN_FRAME_HOLD) { /* init holds: cdn_agent_conn_hold() waits for it */
        if (h->length != CDN_HOLD_ON_LEN || payload[0] != CDN_HOLD_ON) {
            cdn_agent_conn_fail(c, "a HOLD frame that is no answer to one");
            return false;
        }
        /* Another nonce: the late answer to a hold given up on (let go since), dropped. */
        c->held = c->holding && memcmp(payload + 1, &c->hold_nonce, sizeof c->hold_nonce) == 0;
        return true;
    }
    struct agent_req *r = find(c, h->channel);
    if (!r) {
        if (h->channel == 0 && c->on_event)
            c->on_event(c, h->type, payload, h->length, c->arg); /* may close c */
        return c->bev != NULL; /* else: a request we gave up on (its client left), or an old host's */
    }
    if (h->type >= 32 || !(r->accepts & AGENT_FRAME(h->type))) {
        cdn_agent_conn_fail(c, "a %s frame on channel %u, which expects none now",
                            cdn_agent_frame_name(h->type), h->channel);
        return false;
    }
    if (is_last(h->type) && !last_payload_ok(h->type, payload, h->length)) {
        cdn_agent_conn_fail(c, "a %s frame on channel %u whose payload (%u bytes) does not decode",
                            cdn_agent_frame_name(h->type), h->channel, h->length);
        return false;
    }
    if (is_last(h->type)) {
        LIST_REMOVE(r, link);
        r->listed = false;
    }
    r->on_frame(r, h->type, payload, h->length); /* may free r, or close c */
    return c->bev != NULL;
}

/* Every whole frame of in, delivered. */
static void parse(struct agent_conn *c, struct evbuffer *in)
{
    for (;;) {
        uint8_t hdr[CDN_FRAME_HEADER];
        struct cdn_frame_header h;
        if (evbuffer_copyout(in, hdr, sizeof hdr) < (ev_ssize_t) sizeof hdr)
            return;
        int r = cdn_frame_header_decode(hdr, &h);
        if (r < 0) {
            cdn_agent_conn_fail(c, "a frame header that does not decode (%s)", strerror(-r));
            return;
        }
        if (evbuffer_get_length(in) < CDN_FRAME_HEADER + (size_t) h.length)
            return;
        (void) evbuffer_drain(in, CDN_FRAME_HEADER);
        if (h.length)
            (void) evbuffer_remove(in, payload, h.length);
        if (!deliver(c, &h) || (c->holding && c->held))
            return; /* held: what follows waits for the loop */
    }
}

static void on_read(struct bufferevent *bev, void *arg)
{
    parse(arg, bufferevent_get_input(bev));
}

int cdn_agent_conn_hold(struct agent_conn *c, int timeout_ms)
{
    uint8_t on[CDN_HOLD_ON_LEN] = {CDN_HOLD_ON};
    if (getrandom(&c->hold_nonce, sizeof c->hold_nonce, GRND_NONBLOCK) != (ssize_t) sizeof c->hold_nonce)
        c->hold_nonce++;
    memcpy(on + 1, &c->hold_nonce, sizeof c->hold_nonce);
    int r = cdn_agent_conn_send(c, CDN_FRAME_HOLD, 0, 0, on, sizeof on);
    if (r < 0)
        return r;
    int fd = bufferevent_getfd(c->bev);
    struct evbuffer *out = bufferevent_get_output(c->bev), *in = bufferevent_get_input(c->bev);
    /* Our frames up to the HOLD's end, no further: one cut by the save would be half in the guest. */
    size_t unsent = evbuffer_get_length(out), taken = 0;
    struct timespec t0, t;
    (void) clock_gettime(CLOCK_MONOTONIC, &t0);
    c->holding = true;
    c->held = false;
    /* Our frames out, init's in (delivered as the loop would: they are the requests' own), until
     * its answer. Its end, or a protocol violation, closes c as in the loop. */
    while (c->bev && !c->held) {
        (void) clock_gettime(CLOCK_MONOTONIC, &t);
        long left = timeout_ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        struct pollfd p = {.fd = fd, .events = POLLIN | (unsent ? POLLOUT : 0)};
        int n = left > 0 ? poll(&p, 1, (int) left) : 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r = n < 0 ? -errno : -ETIMEDOUT;
            break;
        }
        /* The bufferevent's own buffers: it freezes the ends it alone moves (its input's end, its
         * output's start), as its own reads and writes here. */
        if (p.revents & POLLOUT) {
            (void) evbuffer_unfreeze(out, 1);
            int k = evbuffer_write_atmost(out, fd, (ev_ssize_t) unsent);
            (void) evbuffer_freeze(out, 1);
            if (k < 0 && errno != EAGAIN && errno != EINTR) {
                hang_up(c);
                break;
            }
            unsent -= k > 0 ? (size_t) k : 0;
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            (void) evbuffer_unfreeze(in, 0);
            int k = evbuffer_read(in, fd, 65536);
            (void) evbuffer_freeze(in, 0);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
                hang_up(c);
                break;
            }
            /* What comes before the answer is delivered past any pause of the connection (a slow
             * client's): bounded, a guest that floods instead of answering is given up on. */
            taken += k > 0 ? (size_t) k : 0;
            parse(c, in);
            if (!c->held && taken > HOLD_MAX_BYTES) {
                r = -EMSGSIZE;
                break;
            }
        }
    }
    c->holding = false;
    if (c->bev && evbuffer_get_length(in) >= CDN_FRAME_HEADER) /* after the answer: from the loop */
        bufferevent_trigger(c->bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
    r = !c->bev ? -EPIPE : c->held ? 0 : r;
    c->held = false;
    return r;
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    (void) bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        hang_up(arg);
}

int cdn_agent_conn_open(struct agent_conn *c, struct event_base *base, int fd)
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

void cdn_agent_conn_close(struct agent_conn *c)
{
    c->on_close = NULL;
    hang_up(c);
}

uint32_t cdn_agent_conn_add(struct agent_conn *c, struct agent_req *r, uint32_t accepts)
{
    do
        r->channel = c->next_channel++;
    while (r->channel == 0 || find(c, r->channel));
    r->accepts = accepts;
    r->listed = true;
    LIST_INSERT_HEAD(&c->reqs, r, link);
    return r->channel;
}

void cdn_agent_conn_remove(struct agent_conn *c, struct agent_req *r)
{
    (void) c;
    if (!r->listed)
        return;
    LIST_REMOVE(r, link);
    r->listed = false;
}

int cdn_agent_conn_send_fd(struct agent_conn *c, uint16_t type, const void *p, uint32_t len, int fd)
{
    if (!c->bev)
        return -ENOTCONN;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (evbuffer_get_length(out) > 0)
        return -EAGAIN; /* the descriptor must come with the first byte of a frame, in order */
    uint8_t frame[CDN_FRAME_HEADER + 4096];
    if (len > sizeof frame - CDN_FRAME_HEADER)
        return -EMSGSIZE;
    cdn_frame_header_encode(frame, &(struct cdn_frame_header){.type = type, .length = len});
    if (len)
        memcpy(frame + CDN_FRAME_HEADER, p, len);
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } ctl = {0};
    struct iovec iov = {frame, CDN_FRAME_HEADER + len};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &fd, sizeof fd);
    ssize_t n = sendmsg(bufferevent_getfd(c->bev), &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    /* The rest of a frame the socket took in part goes after it, as any frame does. */
    if ((size_t) n < iov.iov_len && evbuffer_add(out, frame + n, iov.iov_len - (size_t) n) < 0)
        return -ENOMEM;
    return 0;
}

int cdn_agent_conn_send(struct agent_conn *c, uint16_t type, uint16_t flags, uint32_t channel, const void *p,
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

void cdn_agent_conn_pause(struct agent_conn *c, bool pause)
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
