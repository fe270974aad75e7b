/* POST /v1/sandboxes/{id}/call (the process tier, docs/process.md): code run
 * in the sandbox's warm interpreter. Body {"code": "...", "language":
 * "python", "input": any JSON, "timeout_s": N, "fresh": bool}; the answer is
 * the worker's result object {"result", "stdout", "stderr", "error",
 * "duration_ms", "timed_out"}, checked to be a JSON object before it goes out. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agent/worker-call.h"
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

static int parse(json_t *body, json_t **code_input, double *timeout_s, bool *fresh, struct cdn_error *e)
{
    if (!json_is_object(body))
        return cdn_error_field(e, EINVAL, "body", "body: expected a JSON object");
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        if (strcmp(k, "code") && strcmp(k, "language") && strcmp(k, "input") && strcmp(k, "timeout_s") &&
            strcmp(k, "fresh"))
            return cdn_error_field(e, EINVAL, k, "%s: unknown field", k);
    }
    json_t *code = json_object_get(body, "code"), *lang = json_object_get(body, "language");
    json_t *t = json_object_get(body, "timeout_s"), *f = json_object_get(body, "fresh");
    if (!json_is_string(code))
        return cdn_error_field(e, EINVAL, "code", "code: required, a string of Python");
    if (lang && (!json_is_string(lang) || strcmp(json_string_value(lang), "python") != 0))
        return cdn_error_field(e, EINVAL, "language", "language: only \"python\" runs in calls");
    if (t && (!json_is_number(t) || !(json_number_value(t) > 0 && json_number_value(t) <= 86400)))
        return cdn_error_field(e, ERANGE, "timeout_s", "timeout_s: a number of seconds in (0, 86400]");
    if (f && !json_is_boolean(f))
        return cdn_error_field(e, EINVAL, "fresh", "fresh: true or false");
    *timeout_s = t ? json_number_value(t) : 0;
    *fresh = f && json_is_true(f);
    *code_input =
        json_pack("{s:O, s:O}", "code", code, "input", json_object_get(body, "input") ?: json_null());
    return *code_input ? 0 : cdn_error_set(e, ENOMEM, "out of memory");
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
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    json_error_t je;
    json_t *body = json_loadb((const char *) evbuffer_pullup(in, -1), evbuffer_get_length(in), 0, &je);
    if (!body)
        return api_reply_error(req, 400, "invalid_json", "body", "body: %s", je.text);
    json_t *ci = NULL;
    double timeout_s = 0;
    bool fresh = false;
    struct cdn_error e = {0};
    int r = parse(body, &ci, &timeout_s, &fresh, &e);
    json_decref(body);
    if (r < 0)
        return api_reply_cdn_error(req, 400, "invalid_argument", &e);
    static uint8_t buf[CDN_FRAME_MAX];
    uint32_t hdr[2] = {(uint32_t) (timeout_s * 1000 + 0.5), fresh ? CDN_CALL_FRESH : 0};
    if (timeout_s > 0 && hdr[0] == 0)
        hdr[0] = 1;
    memcpy(buf, hdr, sizeof hdr);
    size_t n = json_dumpb(ci, (char *) buf + CDN_CALL_FIXED, sizeof buf - CDN_CALL_FIXED, JSON_COMPACT);
    json_decref(ci);
    if (n == 0 || n > sizeof buf - CDN_CALL_FIXED)
        return api_reply_error(req, 400, "invalid_argument", "code", "code and input exceed 1 MiB");
    struct pending_call *c = calloc(1, sizeof *c);
    if (!c)
        return api_reply_error(req, 500, "internal", NULL, "out of memory");
    c->areq.on_frame = call_frame;
    c->req = req;
    uint32_t ch = agent_conn_add(&b->agent, &c->areq);
    if (agent_conn_send(&b->agent, CDN_FRAME_CALL, 0, ch, buf, (uint32_t) (CDN_CALL_FIXED + n)) < 0) {
        agent_conn_remove(&b->agent, &c->areq);
        free(c);
        return api_reply_error(req, 500, "internal", NULL, "cannot reach the sandbox's agent");
    }
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), client_gone, c);
}
