/* Host side of the agent protocol over a bufferevent (agent-conn.c): frames
 * out, frames in, each incoming frame routed to the request that owns its
 * channel — and checked against what that request can receive now.
 *
 * The peer is a sandbox's init. For the VM tiers that is the guest's init,
 * which a guest that got root in its own kernel controls: every frame is
 * hostile input. A request says which frame types are valid on its channel
 * (accepts, a mask of AGENT_FRAME bits); a frame outside it, a last frame
 * (EXIT, ERROR, DONE) whose payload does not decode, or a header that does
 * not decode is a protocol violation: the connection is closed (every request
 * then ends, see failure()), and whoever owns the connection is told (on_close). */
#pragma once

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "proto/frame.h"

#define AGENT_FRAME(type) (1u << (type))
/* What init sends on a channel: an exec (and a pooled guest's first command), a file operation that
 * streams (READ, LIST), one that does not, a QUIESCE, a CALL. */
#define AGENT_EXEC_FRAMES                                                                                    \
    (AGENT_FRAME(CDN_FRAME_STDOUT) | AGENT_FRAME(CDN_FRAME_STDERR) | AGENT_FRAME(CDN_FRAME_EXIT) |           \
     AGENT_FRAME(CDN_FRAME_ERROR))
#define AGENT_FILE_DATA_FRAMES (AGENT_FRAME(CDN_FRAME_DATA) | AGENT_FILE_FRAMES)
/* A file operation's VIOLATION: init refused an agent's symlink into a protected path (api-files.c) */
#define AGENT_FILE_FRAMES                                                                                    \
    (AGENT_FRAME(CDN_FRAME_DONE) | AGENT_FRAME(CDN_FRAME_ERROR) | AGENT_FRAME(CDN_FRAME_VIOLATION))
#define AGENT_QUIESCE_FRAMES AGENT_FRAME(CDN_FRAME_DONE)
#define AGENT_CALL_FRAMES    (AGENT_FRAME(CDN_FRAME_RESULT) | AGENT_FRAME(CDN_FRAME_ERROR))

/* One request in flight on an agent connection (an exec, a file op, a call,
 * a quiesce). Each frame for its channel that accepts admits goes to on_frame;
 * the last one (EXIT/ERROR/DONE/RESULT), or the connection's end (type 0,
 * payload NULL), is followed by nothing: the request is off the connection
 * (listed false) before on_frame is called with it. */
struct agent_req {
    uint32_t channel;
    uint32_t accepts; /* AGENT_FRAME bits */
    bool listed;      /* registered on a connection (cdn_agent_conn_add), not ended yet */
    void (*on_frame)(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len);
    LIST_ENTRY(agent_req) link;
};

struct agent_conn {
    struct bufferevent *bev;
    uint32_t next_channel;
    LIST_HEAD(, agent_req) reqs;
    /* init hung up, spoke garbage or broke the protocol (then failure says how) */
    void (*on_close)(struct agent_conn *c, void *arg);
    /* A frame on channel 0 from init (a VM guest's VIOLATION); p is valid during the call. The
     * callee checks it and calls cdn_agent_conn_fail() for one init never sends. */
    void (*on_event)(struct agent_conn *c, uint16_t type, const uint8_t *p, uint32_t len, void *arg);
    void *arg;
    char failure[192];   /* the protocol violation that closed it; empty otherwise */
    bool holding, held;  /* cdn_agent_conn_hold() waits for init's HOLD; it came */
    uint32_t hold_nonce; /* the HOLD's, which init's answer carries */
};

int cdn_agent_conn_open(struct agent_conn *c, struct event_base *base, int fd);
void cdn_agent_conn_close(struct agent_conn *c); /* ends every request with type 0 */
/* Register r under a new channel, admitting the frame types of accepts; returns the channel. */
uint32_t cdn_agent_conn_add(struct agent_conn *c, struct agent_req *r, uint32_t accepts);
/* Take r off the connection (no-op when it is not listed any more): later frames on its
 * channel are dropped as a departed request's. */
void cdn_agent_conn_remove(struct agent_conn *c, struct agent_req *r);
int cdn_agent_conn_send(struct agent_conn *c, uint16_t type, uint16_t flags, uint32_t channel, const void *p,
                        uint32_t len);
/* The same, with fd (SCM_RIGHTS) on its first byte, on channel 0: only when nothing waits to be
 * written (-EAGAIN: try again later). A socket connection only. */
int cdn_agent_conn_send_fd(struct agent_conn *c, uint16_t type, const void *p, uint32_t len, int fd);
/* Ask init to hold (CDN_FRAME_HOLD, a VM guest's, before QEMU saves it) and wait up to timeout_ms
 * for its answer, delivering what comes before it (16 MiB at most): 0, or -errno (-EPIPE: the
 * connection closed; -ETIMEDOUT; -EMSGSIZE: too much came instead). Nothing of ours after the HOLD
 * is written meanwhile. The caller lets go (CDN_HOLD_OFF), whatever this returned. */
int cdn_agent_conn_hold(struct agent_conn *c, int timeout_ms);
/* Stop/resume reading frames from init (a slow streaming client: init then
 * stops reading its commands' output, and they block). */
void cdn_agent_conn_pause(struct agent_conn *c, bool pause);
/* A protocol violation (fmt says which): the connection is closed as described above. */
void cdn_agent_conn_fail(struct agent_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Why the connection was closed for a protocol violation, or NULL (it is open, or init hung up). */
const char *cdn_agent_conn_failure(const struct agent_conn *c);
/* The frame type's name ("EXIT", "RESULT", …; "type N" for an unknown one). */
const char *cdn_agent_frame_name(uint16_t type);
