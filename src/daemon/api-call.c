/* POST /v1/sandboxes/{id}/call (the process tier, docs/process.md): code run
 * in the sandbox's warm interpreter. Body {"code": "...", "language":
 * "python", "input": any JSON, "timeout_s": N, "fresh": bool, "step": k}; the
 * answer is the worker's result object {"result", "stdout", "stderr", "error",
 * "duration_ms", "timed_out"}, checked to be a JSON object before it goes out.
 * In a sandbox that records a trajectory, a call is a step (kind "call"), as
 * an exec is: recorded before its answer, answered from the log when re-issued
 * (docs/trajectories.md). */
#include <errno.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "call-args.h"
#include "api.h"
#include "core/json-util.h"
#include "tiers/tier.h"
#include "trajectory.h"

struct pending_call {
    struct agent_req areq; /* first: the agent connection hands this back */
    struct box *box;
    struct evhttp_request *req;
    bool gone;
    struct event *deadline_ev; /* its client left: the agent has agent_timeout to answer */
    struct traj_step traj;     /* its step: recorded at its RESULT, else let go */
};

static void call_free(struct pending_call *c)
{
    cdn_traj_abort(&c->traj);
    cdn_agent_conn_remove(&c->box->agent, &c->areq);
    cdn_box_touch(c->box); /* its idle time counts from the call's end */
    if (c->deadline_ev)
        event_free(c->deadline_ev);
    free(c);
}

/* Its client left, and the agent did not answer in time: the channel is dropped (a late RESULT
 * finds nobody) and the request answered, which is what frees a request whose connection is gone. */
static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct pending_call *c = arg;
    cdn_api_reply_error(c->req, 504, "agent_timeout", NULL,
                        "the call did not end within %u s of its client leaving",
                        cdn_daemon->cfg.agent_timeout_s);
    call_free(c);
}

static void client_gone(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    struct pending_call *c = arg;
    c->gone = true;
    struct timeval tv = {.tv_sec = (time_t) cdn_daemon->cfg.agent_timeout_s};
    if ((c->deadline_ev = evtimer_new(cdn_daemon->base, on_deadline, c)))
        (void) evtimer_add(c->deadline_ev, &tv);
}

/* The frames of a call's channel (agent-conn.c admitted only RESULT and ERROR), or its end (0). */
/* What cordond says of a call beside its result: a call's code can write its own answer on the
 * channel, with these in it; they are dropped (true: there were some). */
static bool drop_step_fields(json_t *o)
{
    static const char *const ours[] = {"step", "replayed", "step_recorded", "step_error"};
    bool had = false;
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        had |= json_object_del(o, ours[i]) == 0;
    return had;
}

static void call_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len)
{
    struct pending_call *c = (struct pending_call *) r;
    struct evhttp_connection *conn = c->gone ? NULL : evhttp_request_get_connection(c->req);
    if (conn)
        evhttp_connection_set_closecb(conn, NULL, NULL);
    /* Answered even when its client is gone: that frees the request. */
    int e;
    const char *msg;
    _cleanup_json_ json_t *o = type == CDN_FRAME_RESULT ? json_loadb((const char *) p, len, 0, NULL) : NULL;
    bool forged = json_is_object(o) && drop_step_fields(o);
    if (type == CDN_FRAME_RESULT && json_is_object(o) && (c->traj.t || forged)) {
        if (c->traj.t) /* the step's line, then the answer */
            cdn_traj_record_result(c->box, &c->traj, "call", o);
        cdn_api_reply_json(c->req, 200, json_incref(o));
    } else if (type == CDN_FRAME_RESULT && json_is_object(o)) { /* as it came */
        _cleanup_evbuffer_ struct evbuffer *b = evbuffer_new();
        if (b && evbuffer_add(b, p, len) == 0) {
            evhttp_add_header(evhttp_request_get_output_headers(c->req), "Content-Type", "application/json");
            evhttp_send_reply(c->req, 200, "OK", b);
        } else
            cdn_api_reply_error(c->req, 500, "internal", NULL, "out of memory");
    } else if (type == CDN_FRAME_RESULT)
        cdn_api_reply_error(c->req, 502, "bad_result", NULL,
                            "the sandbox's interpreter answered with no JSON object");
    else if (type == CDN_FRAME_ERROR && cdn_errmsg_decode(p, len, &e, &msg) == 0)
        cdn_api_reply_error(c->req,
                            e == EOPNOTSUPP ? 400
                            : e == EAGAIN   ? 429
                                            : 500,
                            e == EOPNOTSUPP ? "unsupported"
                            : e == EAGAIN   ? "busy"
                                            : "call_failed",
                            NULL, "%s", msg);
    else if (cdn_agent_conn_failure(&c->box->agent))
        cdn_api_reply_error(c->req, 502, "agent_protocol_error", NULL,
                            "the sandbox's agent broke the protocol: %s",
                            cdn_agent_conn_failure(&c->box->agent));
    else
        cdn_api_reply_error(c->req, 500, "sandbox_gone", NULL, "the sandbox ended during the call");
    call_free(c);
}

void cdn_api_call(struct evhttp_request *req, struct box *b)
{
    if (!b->sb.tier->calls)
        return cdn_api_reply_error(req, 400, "unsupported", "tier",
                                   "call: sandbox %s is of tier %s; calls run in "
                                   "tier process",
                                   b->sb.id, cdn_tier_to_string(b->spec.tier));
    if (!cdn_api_box_usable(req, b))
        return;
    /* A verifier step runs alone: while it does, every open of a protected path is let through. */
    if (b->verifier != VERIFIER_NONE)
        return cdn_api_reply_error(req, 409, "verifier_running", NULL,
                                   "a verifier step runs in sandbox %s; calls wait for its end", b->sb.id);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    static uint8_t buf[CDN_FRAME_MAX];
    size_t n = 0;
    struct cdn_error e = {0};
    struct cdn_call_step st;
    int r = cdn_call_args_parse((const char *) evbuffer_pullup(in, -1), evbuffer_get_length(in), buf,
                                sizeof buf, &n, &st, b->spec.trajectory != NULL, &e);
    if (r < 0)
        return cdn_api_reply_cdn_error(req, 400, r == -EBADMSG ? "invalid_json" : "invalid_argument", &e);
    /* A step of its trajectory: a re-issued one is answered from the log, and nothing runs. */
    struct traj_step step;
    json_t *recorded;
    int t = cdn_api_traj_begin(req, b, "call", st.request, st.has_step, st.step, "invalid_argument", &step,
                               &recorded);
    if (t < 0)
        return;
    if (t == TRAJ_REPLAY)
        return cdn_api_traj_replay(req, recorded);
    struct pending_call *c = calloc(1, sizeof *c);
    if (!c) {
        cdn_traj_abort(&step);
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    }
    c->traj = step;
    c->areq.on_frame = call_frame;
    c->box = b;
    c->req = req;
    uint32_t ch = cdn_agent_conn_add(&b->agent, &c->areq, AGENT_CALL_FRAMES);
    if (cdn_agent_conn_send(&b->agent, CDN_FRAME_CALL, 0, ch, buf, (uint32_t) n) < 0) {
        call_free(c);
        return cdn_api_reply_error(req, 500, "internal", NULL, "cannot reach the sandbox's agent");
    }
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), client_gone, c);
}
