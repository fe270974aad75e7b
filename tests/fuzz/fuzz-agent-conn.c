/* Fuzz the host side of the agent protocol (src/daemon/agent-conn.c) as a state machine: the input
 * is what a hostile init writes on its agent socket. Five requests are in flight, one of each kind
 * cordond makes (an exec, a streaming file read, a plain file op, a quiesce, a call); the channel
 * field of every frame header in the input picks one of them, channel 0 or a channel nobody holds
 * (its low three bits), so that the fuzzer reaches every state.
 *
 * Invariants: a request is handed only the frame types it accepts; after its last frame (or the
 * connection's end) it gets nothing more; every request ends exactly once by the time the
 * connection has closed (the input ends with EOF); a violation closes the connection and says why;
 * a handler that calls cdn_agent_conn_fail() from inside its own frame (cordond's LIST does) is safe. */
#include "daemon/agent-conn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct probe {
    struct agent_req r; /* first: handed back as the request */
    int ends;
    bool list; /* fails the connection on a DATA that does not decode, as cordond's LIST does */
    struct agent_conn *conn;
};

static void on_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len)
{
    struct probe *pr = (struct probe *) r;
    if (pr->ends)
        __builtin_trap(); /* a frame after the request ended */
    if (type == 0 || type == CDN_FRAME_EXIT || type == CDN_FRAME_ERROR || type == CDN_FRAME_DONE ||
        type == CDN_FRAME_RESULT) {
        if (r->listed)
            __builtin_trap(); /* a last frame while still listed */
        pr->ends++;
        return;
    }
    if (type >= 32 || !(r->accepts & AGENT_FRAME(type)))
        __builtin_trap(); /* a frame the request does not accept */
    struct cdn_file_stat st;
    if (pr->list && type == CDN_FRAME_DATA && len && cdn_file_stat_decode(p, len, &st) < 0)
        cdn_agent_conn_fail(pr->conn, "a LIST entry that does not decode");
}

static int events, closes;

static void on_event(struct agent_conn *c, uint16_t type, const uint8_t *p, uint32_t len, void *arg)
{
    (void) p, (void) len, (void) arg;
    events++;
    if (type == CDN_FRAME_PONG) /* as cordond does for a frame init never sends on channel 0 */
        cdn_agent_conn_fail(c, "a PONG on channel 0");
}

static void on_close(struct agent_conn *c, void *arg)
{
    (void) arg;
    if (c->bev)
        __builtin_trap();
    closes++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t masks[] = {AGENT_EXEC_FRAMES, AGENT_FILE_DATA_FRAMES, AGENT_FILE_FRAMES,
                                     AGENT_QUIESCE_FRAMES, AGENT_CALL_FRAMES};
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return 0;
    struct event_base *base = event_base_new();
    struct agent_conn c = {.on_close = on_close, .on_event = on_event};
    struct probe pr[5] = {0};
    events = closes = 0;
    if (!base || cdn_agent_conn_open(&c, base, sv[0]) < 0)
        __builtin_trap();
    uint32_t channels[8] = {0};
    for (size_t i = 0; i < 5; i++) {
        pr[i].conn = &c;
        pr[i].list = i == 1;
        pr[i].r.on_frame = on_frame;
        channels[i + 1] = cdn_agent_conn_add(&c, &pr[i].r, masks[i]);
    }
    channels[6] = channels[7] = channels[5] + 1000; /* nobody's */
    /* The input with each decodable header's channel mapped, written as the loop reads it. */
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    for (size_t off = 0; off + CDN_FRAME_HEADER <= size;) {
        struct cdn_frame_header h;
        if (cdn_frame_header_decode(buf + off, &h) < 0)
            break; /* the rest is garbage: it closes the connection */
        h.channel = channels[h.channel & 7];
        cdn_frame_header_encode(buf + off, &h);
        off += CDN_FRAME_HEADER + h.length;
    }
    (void) evutil_make_socket_nonblocking(sv[1]);
    size_t sent = 0;
    bool eof = false;
    for (int rounds = 0; c.bev && rounds < 100000; rounds++) {
        while (sent < size) {
            ssize_t n = write(sv[1], buf + sent, size - sent);
            if (n <= 0)
                break;
            sent += (size_t) n;
        }
        if (sent == size && !eof) {
            (void) shutdown(sv[1], SHUT_WR);
            eof = true;
        }
        (void) event_base_loop(base, EVLOOP_NONBLOCK);
    }
    if (c.bev)
        __builtin_trap(); /* EOF must close it */
    for (size_t i = 0; i < 5; i++)
        if (pr[i].ends != 1 || pr[i].r.listed)
            __builtin_trap(); /* every request ends exactly once */
    if (closes != 1 || (c.failure[0] && !cdn_agent_conn_failure(&c)))
        __builtin_trap();
    free(buf);
    (void) close(sv[0]);
    (void) close(sv[1]);
    event_base_free(base);
    return 0;
}
