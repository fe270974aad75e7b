/* POST /v1/sandboxes/{id}/oci-start (cordon-runtime's start of an attached container, docs/runtime.md):
 * the body is the EXEC payload of the container's process (frame.h: a command whose exit is init's,
 * CDN_EXEC_STATUS), sent on cordond's own connection to init, which is the only one init keeps (a
 * second host's connection would replace it). The answer comes once the process runs (200
 * {"pid"}) or fails to (422 {"errno", "message"}: init's, which the runtime words as runc does). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "core/json-util.h"

struct pending_start {
    struct agent_req areq; /* first: the agent connection hands this back */
    struct box *box;
    struct evhttp_request *req;
};

static void client_gone(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    /* The runtime left: the process starts all the same (it is the container's), and the answer,
     * when it comes, frees the request. */
    (void) arg;
}

static void start_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len)
{
    struct pending_start *s = (struct pending_start *) r;
    struct evhttp_connection *conn = evhttp_request_get_connection(s->req);
    if (conn)
        evhttp_connection_set_closecb(conn, NULL, NULL);
    int e;
    const char *msg;
    if (type == CDN_FRAME_STARTED && len == 4)
        cdn_api_reply_json(s->req, 200,
                           json_pack("{s:I}", "pid",
                                     (json_int_t) ((uint32_t) p[0] | (uint32_t) p[1] << 8 |
                                                   (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24)));
    else if (type == CDN_FRAME_EXIT) /* it ran and ended before saying so */
        cdn_api_reply_json(s->req, 200, json_pack("{s:n}", "pid"));
    else if (type == CDN_FRAME_ERROR && cdn_errmsg_decode(p, len, &e, &msg) == 0)
        cdn_api_reply_json(s->req, 422, json_pack("{s:i, s:s}", "errno", e, "message", msg));
    else
        cdn_api_reply_error(s->req, 503, "sandbox_gone", NULL,
                            "the container's init went before its process ran");
    cdn_agent_conn_remove(&s->box->agent, &s->areq); /* what comes later on the channel is dropped */
    free(s);
}

/* POST /v1/sandboxes/{id}/oci-listener {"pid", "fd"}: the seccomp listener of a process the runtime
 * starts with exec, taken from it before it execs (cdn_box_take_listener). Root's unix socket only:
 * it names a host process. */
void cdn_api_oci_listener(struct evhttp_request *req, struct box *b)
{
    if (!b->attached)
        return cdn_api_reply_error(req, 400, "not_attached", NULL, "sandbox %s is cordond's own", b->sb.id);
    if (cdn_api_over_tcp(req))
        return cdn_api_reply_error(req, 403, "forbidden", NULL, "it names host processes: unix socket only");
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    json_error_t je;
    size_t n = evbuffer_get_length(in);
    _cleanup_json_ json_t *o = n ? json_loadb((const char *) evbuffer_pullup(in, -1), n, 0, &je) : NULL;
    int pid = 0, fd = -1;
    if (!o || json_unpack_ex(o, &je, JSON_STRICT, "{s:i, s:i}", "pid", &pid, "fd", &fd) < 0 || pid <= 1 ||
        fd < 0)
        return cdn_api_reply_error(req, 400, "invalid_request", "body", "body: {\"pid\", \"fd\"}");
    struct cdn_error err = {0};
    if (cdn_box_take_listener(b, pid, fd, &err) < 0)
        return cdn_api_reply_cdn_error(req, 400, "invalid_request", &err);
    cdn_api_reply_json(req, 200, json_pack("{s:b}", "taken", 1));
}

void cdn_api_oci_start(struct evhttp_request *req, struct box *b)
{
    if (!b->attached)
        return cdn_api_reply_error(req, 400, "not_attached", NULL,
                                   "sandbox %s is cordond's own: its processes start with exec", b->sb.id);
    if (!cdn_api_box_usable(req, b))
        return;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    const uint8_t *p = n ? evbuffer_pullup(in, -1) : NULL;
    static struct cdn_exec_req x; /* 64 KiB of pointers */
    /* Only the runtime's own kind of command: init's exit is its exit, its stdio is init's. */
    if (!p || n > CDN_FRAME_MAX || cdn_exec_decode(p, n, &x) < 0 ||
        (x.flags & (CDN_EXEC_STATUS | CDN_EXEC_SHUTDOWN_ON_EXIT | CDN_EXEC_PIPES)) !=
            (CDN_EXEC_STATUS | CDN_EXEC_SHUTDOWN_ON_EXIT))
        return cdn_api_reply_error(req, 400, "invalid_request", "body",
                                   "body: an EXEC payload with STATUS and SHUTDOWN_ON_EXIT, without PIPES");
    struct pending_start *s = calloc(1, sizeof *s);
    if (!s)
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    s->areq.on_frame = start_frame;
    s->box = b;
    s->req = req;
    uint32_t ch = cdn_agent_conn_add(&b->agent, &s->areq,
                                     AGENT_FRAME(CDN_FRAME_STARTED) | AGENT_FRAME(CDN_FRAME_EXIT) |
                                         AGENT_FRAME(CDN_FRAME_ERROR));
    if (cdn_agent_conn_send(&b->agent, CDN_FRAME_EXEC, 0, ch, p, (uint32_t) n) < 0) {
        cdn_agent_conn_remove(&b->agent, &s->areq);
        free(s);
        return cdn_api_reply_error(req, 503, "internal", NULL, "cannot reach the container's init");
    }
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), client_gone, s);
}
