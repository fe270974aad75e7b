/* cordon-init: a TCP connection to a port of the sandbox, relayed over the host connection (frame
 * TCP; cordond's …/ports/{port} for a VM guest, whose loopback only the guest reaches).
 *
 * TCP (u16 port, u32 window) opens a connection to 127.0.0.1:port from init. Connected, init answers
 * WINDOW: the bytes the host may send (RELAY_WINDOW); refused, ERROR with the errno. Then DATA goes
 * both ways, each side within what the other granted (WINDOW again as it takes them); an empty DATA
 * is that direction's end (shutdown SHUT_WR). DONE once both directions ended, or on CANCEL.
 *
 * The host's side is trusted but bounded all the same: DATA past the grant ends the relay (EPROTO).
 * The service in the sandbox is the agent's: what it sends is passed on, never parsed. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "init.h"

#define MAX_RELAYS   64
#define RELAY_WINDOW (256u << 10)
#define RELAY_CHUNK  (64u << 10)

static struct relay {
    uint32_t channel; /* 0: free */
    int fd;
    bool connected, rd_eof, wr_eof, wr_shut;
    uint64_t grant; /* bytes init may send the host before its next WINDOW */
    uint8_t *out;   /* the host's bytes the socket has not taken yet (at most RELAY_WINDOW) */
    size_t outlen;
    uint32_t taken; /* bytes the socket took since the last WINDOW to the host */
    size_t polled;  /* its index in the poll set, or SIZE_MAX */
} relays[MAX_RELAYS];

static struct relay *find(uint32_t channel)
{
    for (size_t i = 0; channel && i < MAX_RELAYS; i++)
        if (relays[i].channel == channel)
            return &relays[i];
    return NULL;
}

static void relay_free(struct relay *r)
{
    if (r->fd >= 0)
        (void) close(r->fd);
    free(r->out);
    *r = (struct relay){.fd = -1};
}

static void fail(struct relay *r, int e)
{
    cdn_agent_error(r->channel, e, "port relay");
    relay_free(r);
}

static void maybe_done(struct relay *r)
{
    if (r->rd_eof && r->wr_shut) {
        cdn_agent_send(CDN_FRAME_DONE, r->channel, NULL, 0);
        relay_free(r);
    }
}

static void grant_back(struct relay *r, bool force)
{
    if (r->taken && (force || r->taken >= RELAY_WINDOW / 4)) {
        uint8_t w[4];
        cdn_window_encode(w, r->taken);
        cdn_agent_send(CDN_FRAME_WINDOW, r->channel, w, sizeof w);
        r->taken = 0;
    }
}

/* As much of out as the socket takes; its end passed on once all went. */
static void flush(struct relay *r)
{
    while (r->outlen) {
        ssize_t n = write(r->fd, r->out, r->outlen);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0)
            return fail(r, errno ? errno : EPIPE);
        memmove(r->out, r->out + n, r->outlen - (size_t) n);
        r->outlen -= (size_t) n;
        r->taken += (uint32_t) n;
    }
    grant_back(r, r->outlen == 0);
    if (!r->outlen && r->wr_eof && !r->wr_shut) {
        (void) shutdown(r->fd, SHUT_WR);
        r->wr_shut = true;
        maybe_done(r);
    }
}

void cdn_tcp_open(uint32_t channel, const uint8_t *p, size_t len)
{
    uint16_t port;
    uint32_t window;
    if (cdn_tcp_open_decode(p, len, &port, &window) < 0 || !channel)
        return cdn_agent_error(channel, EBADMSG, "TCP: a malformed request");
    struct relay *r = NULL;
    for (size_t i = 0; !r && i < MAX_RELAYS; i++)
        if (!relays[i].channel)
            r = &relays[i];
    if (!r || find(channel))
        return cdn_agent_error(channel, r ? EEXIST : EMFILE, "TCP: too many connections to ports");
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || (connect(fd, (struct sockaddr *) &sin, sizeof sin) < 0 && errno != EINPROGRESS)) {
        int e = errno;
        if (fd >= 0)
            (void) close(fd);
        return cdn_agent_error(channel, e, "TCP: connect");
    }
    *r = (struct relay){.channel = channel, .fd = fd, .grant = window, .polled = SIZE_MAX};
}

bool cdn_tcp_data(uint32_t channel, const uint8_t *p, size_t len)
{
    struct relay *r = find(channel);
    if (!r)
        return false;
    if (!r->connected || r->wr_eof || r->outlen + len > RELAY_WINDOW) {
        fail(r, EPROTO); /* before its WINDOW, after its end, or past it */
        return true;
    }
    if (!len) {
        r->wr_eof = true;
        flush(r);
        return true;
    }
    if (!r->out && !(r->out = malloc(RELAY_WINDOW))) {
        fail(r, ENOMEM);
        return true;
    }
    memcpy(r->out + r->outlen, p, len);
    r->outlen += len;
    flush(r);
    return true;
}

bool cdn_tcp_window(uint32_t channel, uint32_t more)
{
    struct relay *r = find(channel);
    if (r)
        r->grant += more;
    return r != NULL;
}

bool cdn_tcp_cancel(uint32_t channel)
{
    struct relay *r = find(channel);
    if (!r)
        return false;
    cdn_agent_send(CDN_FRAME_DONE, channel, NULL, 0);
    relay_free(r);
    return true;
}

void cdn_tcp_reset(void)
{
    for (size_t i = 0; i < MAX_RELAYS; i++)
        if (relays[i].channel)
            relay_free(&relays[i]);
}

void cdn_tcp_poll_add(struct pollfd *pfd, size_t *n, size_t max)
{
    for (size_t i = 0; i < MAX_RELAYS; i++) {
        struct relay *r = &relays[i];
        r->polled = SIZE_MAX;
        if (!r->channel || *n >= max)
            continue;
        short ev = !r->connected || r->outlen ? POLLOUT : 0;
        if (r->connected && !r->rd_eof && r->grant && cdn_agent_room())
            ev |= POLLIN;
        if (!ev)
            continue;
        r->polled = *n;
        pfd[(*n)++] = (struct pollfd){.fd = r->fd, .events = ev};
    }
}

void cdn_tcp_poll_handle(const struct pollfd *pfd, size_t n)
{
    static uint8_t buf[RELAY_CHUNK];
    for (size_t i = 0; i < MAX_RELAYS; i++) {
        struct relay *r = &relays[i];
        if (!r->channel || r->polled >= n || !pfd[r->polled].revents)
            continue;
        short re = pfd[r->polled].revents;
        if (!r->connected) {
            int e = 0;
            socklen_t l = sizeof e;
            if (getsockopt(r->fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
                e = errno;
            if (e) {
                fail(r, e);
                continue;
            }
            r->connected = true;
            uint8_t w[4];
            cdn_window_encode(w, RELAY_WINDOW);
            cdn_agent_send(CDN_FRAME_WINDOW, r->channel, w, sizeof w);
            continue;
        }
        if ((re & POLLOUT) && r->outlen)
            flush(r);
        if (!r->channel || !(re & (POLLIN | POLLHUP | POLLERR)) || r->rd_eof || !r->grant)
            continue;
        size_t want = r->grant < sizeof buf ? (size_t) r->grant : sizeof buf;
        ssize_t k = read(r->fd, buf, want);
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (k < 0) {
            fail(r, errno);
            continue;
        }
        cdn_agent_send(CDN_FRAME_DATA, r->channel, buf, (uint32_t) k); /* empty: its end */
        r->grant -= (uint64_t) k;
        if (!k) {
            r->rd_eof = true;
            maybe_done(r);
        }
    }
}
