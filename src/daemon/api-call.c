/* POST /v1/sandboxes/{id}/call (the process tier, docs/process.md): code run
 * in the sandbox's warm interpreter. Body {"code": "...", "language":
 * "python", "input": any JSON, "timeout_s": N, "fresh": bool}; the answer is
 * the worker's result object {"result", "stdout", "stderr", "error",
 * "duration_ms", "timed_out"}, checked to be a JSON object before it goes out. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "call-args.h"
#include "daemon.h"

struct pending_call {
    struct agent_req areq; /* first: the agent connection hands this back */
    struct evhttp_request *req;
    bool gone;
};

static void client_gone(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    ((struct pending_call *) arg)->gone = true;
}

static void call_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len)
{
    struct pending_call *c = (struct pending_call *) r;
    if (type != CDN_FRAME_RESULT && type != CDN_FRAME_ERROR && type != 0)
        return;
    if (c->gone) {
        free(c);
        return;
    }
    struct evhttp_connection *conn = evhttp_request_get_connection(c->req);
    if (conn)
        evhttp_connection_set_closecb(conn, NULL, NULL);
    int e;
    const char *msg;
    json_t *o = type == CDN_FRAME_RESULT ? json_loadb((const char *) p, len, 0, NULL) : NULL;
    if (type == CDN_FRAME_RESULT && json_is_object(o)) {
        struct evbuffer *b = evbuffer_new();
        if (b && evbuffer_add(b, p, len) == 0) {
            evhttp_add_header(evhttp_request_get_output_headers(c->req), "Content-Type", "application/json");
            evhttp_send_reply(c->req, 200, "OK", b);
        } else
            api_reply_error(c->req, 500, "internal", NULL, "out of memory");
        if (b)
            evbuffer_free(b);
    } else if (type == CDN_FRAME_RESULT)
        api_reply_error(c->req, 502, "bad_result", NULL,
                        "the sandbox's interpreter answered with no JSON object");
    else if (type == CDN_FRAME_ERROR && cdn_errmsg_decode(p, len, &e, &msg) == 0)
        api_reply_error(c->req,
                        e == EOPNOTSUPP ? 400
                        : e == EAGAIN   ? 429
                                        : 500,
                        e == EOPNOTSUPP ? "unsupported"
                        : e == EAGAIN   ? "busy"
                                        : "call_failed",
                        NULL, "%s", msg);
    else
        api_reply_error(c->req, 500, "sandbox_gone", NULL, "the sandbox ended during the call");
    json_decref(o);
    free(c);
}

void api_call(struct evhttp_request *req, struct box *b)
{
    if (b->spec.tier != CDN_TIER_PROCESS)
        return api_reply_error(req, 400, "unsupported", "tier",
                               "call: sandbox %s is of tier %s; calls run in "
                               "tier process",
                               b->sb.id, cdn_tier_to_string(b->spec.tier));
    if (b->state != BOX_RUNNING)
        return api_reply_error(req, 409, "sandbox_not_running", NULL, "sandbox %s is %s", b->sb.id,
                               box_state_name(b->state));
    /* A verifier step runs alone (api-exec.c): a call beside it could read the protected paths. */
    if (b->verifier != VERIFIER_NONE)
        return api_reply_error(req, 409, "verifier_running", NULL,
                               "a verifier step runs in sandbox %s; calls wait for its end", b->sb.id);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    static uint8_t buf[CDN_FRAME_MAX];
    size_t n = 0;
    struct cdn_error e = {0};
    int r = call_args_parse((const char *) evbuffer_pullup(in, -1), evbuffer_get_length(in), buf, sizeof buf,
                            &n, &e);
    if (r < 0)
        return api_reply_cdn_error(req, 400, r == -EBADMSG ? "invalid_json" : "invalid_argument", &e);
    struct pending_call *c = calloc(1, sizeof *c);
    if (!c)
        return api_reply_error(req, 500, "internal", NULL, "out of memory");
    c->areq.on_frame = call_frame;
    c->req = req;
    uint32_t ch = agent_conn_add(&b->agent, &c->areq);
    if (agent_conn_send(&b->agent, CDN_FRAME_CALL, 0, ch, buf, (uint32_t) n) < 0) {
        agent_conn_remove(&b->agent, &c->areq);
        free(c);
        return api_reply_error(req, 500, "internal", NULL, "cannot reach the sandbox's agent");
    }
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), client_gone, c);
}
