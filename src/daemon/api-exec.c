/* cordond's exec route: an HTTP request becomes one agent request (a channel
 * on the box's agent connection), and the frames that come back become the
 * reply — buffered into one JSON body, or streamed as NDJSON. (The file
 * routes are in api-files.c.)
 *
 * Runs in the loop. Output is bounded: a buffered exec keeps at most
 * max_output_bytes per stream and says it truncated; a streamed one passes
 * chunks on as they come. A client that goes away mid-exec gets its command
 * killed; the request object is finished either way (libevent keeps an
 * orphaned request until it is answered, then frees it). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "exec-args.h"
#include "core/json-util.h"
#include "oci/digest.h"
#include "trajectory.h"
#include "tiers/tier.h"
#include "confine/landlock.h"
#include "shared/sysdirs.h"
#include "shared/base64.h"

#define STDIN_CHUNK (256u << 10)

struct call {
    struct agent_req areq; /* first: the agent connection hands this back */
    struct box *box;
    struct evhttp_request *req;
    bool stream, b64, started, timed_out, client_gone;
    bool departed;                    /* its client left (client_gone, or a buffered one's EV_CLOSED) */
    bool gave_up, quiesce_unanswered; /* give_up(): the agent did not end it in time */
    struct evbuffer *out, *err;
    bool out_trunc, err_trunc;
    struct timespec t0;
    struct event *timer;
    uint8_t tail[2][4]; /* streamed text: an unfinished UTF-8 character, per stream, for the next chunk */
    uint8_t tail_len[2];
    char cmd[128]; /* argv[0] of an exec, for the event log */
    json_t *argv;  /* its argv, bounded (argv_json), for the event log */
    bool argv_trunc;
    /* A verifier step: the sandbox is quiesced before it (its args wait in
     * pending) and after it (its last frame waits in last*). */
    bool verifier;
    bool verifier_step; /* … and stays so once the sandbox is the agent's again */
    /* Refused before it ran: the answer (status, code, message) instead of a frame's. */
    int fail_status;
    const char *fail_code;
    char fail_msg[400];
    /* A clean sibling's step (api-sibling.c): box is the sibling, owner the sandbox it verifies
     * (its events, alerts and exec count); done(done_arg) once the reply has gone. */
    struct box *owner;
    void (*done)(void *arg);
    void *done_arg;
    struct exec_args *pending;
    uint16_t last_type;
    uint8_t *last;
    uint32_t last_len;
    struct event *closed_ev; /* buffered exec: the client hanging up before the answer (EV_CLOSED) */
    /* How long the agent gets to end what it was asked to end (a QUIESCE; the command of a client
     * that left): past it the request is given up (give_up), whatever the agent does. */
    struct event *deadline_ev;
    /* A trajectory's step (trajectory.h): recorded before its answer goes; a streamed one's output
     * is kept in out/err too, within max_output_bytes, for the log. */
    struct traj_step traj;
};

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) (t.tv_sec - t0->tv_sec) * 1e3 + (double) (t.tv_nsec - t0->tv_nsec) / 1e6;
}

json_t *cdn_api_bytes_json(const uint8_t *p, size_t n, bool b64)
{
    if (!b64)
        return cdn_json_lossy_string(p, n);
    _cleanup_free_ char *s = malloc(cdn_base64_len(n) + 1);
    if (!s)
        return json_null();
    cdn_base64_encode(p, n, s);
    return json_string(s);
}

static json_t *bytes_json(const struct call *c, const uint8_t *p, size_t n)
{
    return cdn_api_bytes_json(p, n, c->b64);
}

static void call_done(struct call *c);

static void call_free(struct call *c)
{
    cdn_agent_conn_remove(&c->box->agent, &c->areq);
    cdn_box_touch(c->box); /* its idle time counts from the command's end … */
    if (c->owner)
        cdn_box_touch(c->owner); /* … and a sibling step's sandbox's too */
    if (c->pending) {
        cdn_exec_args_free(c->pending);
        free(c->pending);
    }
    free(c->last);
    json_decref(c->argv);
    cdn_traj_abort(&c->traj); /* one that ended without an EXIT: not a step */
    call_done(c);
    if (c->closed_ev)
        event_free(c->closed_ev);
    if (c->deadline_ev)
        event_free(c->deadline_ev);
    if (c->timer)
        event_free(c->timer);
    if (c->out)
        evbuffer_free(c->out);
    if (c->err)
        evbuffer_free(c->err);
    free(c);
}

/* The event log's copy of an exec's argv: the agent chooses it, so at most ARGV_MAX_ARGS arguments
 * and ARGV_MAX_BYTES bytes in all (an argument is cut where the budget ends); *cut says whether
 * anything was left out. Invalid UTF-8 is replaced, as in every event. */
#define ARGV_MAX_ARGS  64
#define ARGV_MAX_BYTES 2048

json_t *cdn_api_argv_json(char *const *argv, bool *cut)
{
    json_t *v = json_array();
    size_t left = ARGV_MAX_BYTES, i = 0;
    *cut = false;
    for (; v && argv[i]; i++) {
        size_t n = strlen(argv[i]);
        if (i == ARGV_MAX_ARGS || left == 0) {
            *cut = true;
            break;
        }
        if (n > left)
            n = left, *cut = true;
        left -= n;
        (void) json_array_append_new(v, cdn_json_lossy_string((const uint8_t *) argv[i], n));
    }
    return v;
}

/* Before the reply: after it libevent may free the request (and a kept-alive
 * connection must not call back into a freed call for its next request). */
static void forget_client(struct call *c)
{
    if (c->closed_ev) {
        event_free(c->closed_ev);
        c->closed_ev = NULL;
    }
    struct evhttp_connection *conn = c->client_gone ? NULL : evhttp_request_get_connection(c->req);
    if (conn)
        evhttp_connection_set_closecb(conn, NULL, NULL);
}

static void give_up(struct call *c);

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    give_up(arg);
}

/* The agent was asked to end something (a QUIESCE, a killed command): it has agent_timeout to
 * answer. One deadline per call; arming it again leaves it as it is. */
static void arm_deadline(struct call *c)
{
    if (!c->deadline_ev && !(c->deadline_ev = evtimer_new(cdn_daemon->base, on_deadline, c)))
        return;
    if (evtimer_pending(c->deadline_ev, NULL))
        return;
    struct timeval tv = {.tv_sec = (time_t) cdn_daemon->cfg.agent_timeout_s};
    (void) evtimer_add(c->deadline_ev, &tv);
}

/* The command has nobody to report to: end it. Its EXIT normally comes and finishes (frees) the
 * request; an agent that does not send it does not keep the request (and its body) for ever. */
static void kill_for_departed_client(struct call *c)
{
    c->departed = true;
    int32_t sig = SIGKILL;
    (void) cdn_agent_conn_send(&c->box->agent, CDN_FRAME_SIGNAL, 0, c->areq.channel, &sig, sizeof sig);
    arm_deadline(c);
}

static void client_gone(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    struct call *c = arg;
    call_done(c); /* its connection is going: nothing to wait for */
    c->client_gone = true;
    kill_for_departed_client(c);
}

/* ---- backpressure for streamed replies ----
 * A client that reads slower than the command writes: once more than
 * CLIENT_HIGH waits in its connection, the box's agent connection stops
 * being read (init then stops reading its commands' pipes and they block),
 * until the client has taken all but CLIENT_LOW. One paused stream pauses
 * the whole sandbox's agent connection: the price of not buffering. */
#define CLIENT_HIGH (4u << 20)
#define CLIENT_LOW  (1u << 20)

static size_t client_backlog(struct call *c)
{
    struct evhttp_connection *conn = c->client_gone ? NULL : evhttp_request_get_connection(c->req);
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

static void throttle_stop(struct box *b)
{
    if (!b->throttle)
        return;
    b->throttle = NULL;
    if (b->throttle_ev)
        evtimer_del(b->throttle_ev);
    cdn_agent_conn_pause(&b->agent, false);
}

void cdn_api_throttle_end(struct box *b)
{
    cdn_api_procs_free(b);
    cdn_api_sessions_free(b);
    cdn_api_ports_end(b);
    cdn_api_archives_end(b);
    throttle_stop(b);
    if (b->throttle_ev)
        event_free(b->throttle_ev);
    b->throttle_ev = NULL;
}

static void throttle_check(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct box *b = arg;
    if (!b->throttle || client_backlog(b->throttle) <= CLIENT_LOW)
        throttle_stop(b);
}

static void send_chunk(struct call *c, struct evbuffer *buf)
{
    evhttp_send_reply_chunk(c->req, buf);
    struct box *b = c->box;
    if (b->throttle || client_backlog(c) <= CLIENT_HIGH)
        return;
    if (!b->throttle_ev && !(b->throttle_ev = event_new(cdn_daemon->base, -1, EV_PERSIST, throttle_check, b)))
        return;
    struct timeval tv = {.tv_usec = 5000};
    b->throttle = c;
    cdn_agent_conn_pause(&b->agent, true);
    (void) evtimer_add(b->throttle_ev, &tv);
}

/* A call is done: if it was the one holding the box back, let go. */
static void call_done(struct call *c)
{
    if (c->box->throttle == c)
        throttle_stop(c->box);
}

/* A buffered exec's client hung up (evhttp does not read while we work on a
 * request, so only this tells): its command has nobody to answer to. */
static void on_client_closed(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    kill_for_departed_client(arg);
}

static void stream_line(struct call *c, json_t *line)
{
    _cleanup_free_ char *s = line ? json_dumps(line, JSON_COMPACT) : NULL;
    json_decref(line);
    if (!s)
        return;
    _cleanup_evbuffer_ struct evbuffer *b = evbuffer_new();
    if (b) {
        evbuffer_add(b, s, strlen(s));
        evbuffer_add(b, "\n", 1);
        send_chunk(c, b);
    }
}

/* Where a chunk must be cut so that no UTF-8 character is split: the start
 * of a multi-byte sequence in its last 3 bytes that the chunk does not finish. */
static size_t utf8_cut(const uint8_t *p, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        uint8_t b = p[n - back];
        if ((b & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back */
        size_t need = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

/* One streamed chunk of stdout (s 0) or stderr (s 1); text mode keeps an
 * unfinished character for the next chunk instead of turning it into U+FFFD.
 * len 0 flushes what is kept. */
static void stream_text(struct call *c, int s, const uint8_t *p, size_t len)
{
    const char *name = s ? "stderr" : "stdout";
    if (c->b64) {
        stream_line(c, json_pack("{s:s, s:o}", "type", name, "data_b64", bytes_json(c, p, len)));
        return;
    }
    _cleanup_free_ uint8_t *buf = malloc(c->tail_len[s] + len + 1);
    if (!buf)
        return;
    memcpy(buf, c->tail[s], c->tail_len[s]);
    if (len)
        memcpy(buf + c->tail_len[s], p, len);
    size_t n = c->tail_len[s] + len, cut = len ? utf8_cut(buf, n) : n;
    c->tail_len[s] = (uint8_t) (n - cut);
    memcpy(c->tail[s], buf + cut, n - cut);
    if (cut)
        stream_line(c, json_pack("{s:s, s:o}", "type", name, "data", cdn_json_lossy_string(buf, cut)));
}

static void record_latency(double ms)
{
    static const double bounds_ms[] = {0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 1000, 10000};
    size_t i = 0;
    while (i < sizeof bounds_ms / sizeof bounds_ms[0] && ms > bounds_ms[i])
        i++;
    cdn_daemon->exec_hist[i]++;
    cdn_daemon->exec_sum_ms += ms;
}

static int send_exec(struct call *c, struct exec_args *a);
static void exec_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len);
static void exec_finish(struct call *c, uint16_t type, const uint8_t *p, uint32_t len);

/* ---- the verifier step ----
 * Protected paths are readable by a verifier step alone: before it starts,
 * init kills every other process of the sandbox (QUIESCE), so nothing of the
 * agent's runs beside it; when it ends, whatever it left goes the same way
 * before the sandbox is the agent's again. While the box's verifier state is
 * not NONE, other execs are refused (409). */
static void refuse(struct call *c, int status, const char *code, const char *msg)
{
    c->fail_status = status;
    c->fail_code = code;
    (void) snprintf(c->fail_msg, sizeof c->fail_msg, "%s", msg);
}

static int quiesce(struct call *c)
{
    struct agent_conn *ac = &c->box->agent;
    uint32_t ch = cdn_agent_conn_add(ac, &c->areq, AGENT_QUIESCE_FRAMES);
    int r = cdn_agent_conn_send(ac, CDN_FRAME_QUIESCE, 0, ch, NULL, 0);
    if (r < 0)
        cdn_agent_conn_remove(ac, &c->areq);
    else
        arm_deadline(c);
    return r;
}

static void quiesce_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len)
{
    (void) p, (void) len;
    struct call *c = (struct call *) r;
    struct box *b = c->box;
    if (c->deadline_ev && !c->departed)
        evtimer_del(c->deadline_ev); /* answered (DONE) or over (0): no more waiting for it */
    if (type == CDN_FRAME_DONE && b->verifier == VERIFIER_STARTING) {
        struct cdn_error moved = {0};
        if (cdn_box_fanotify_check_moved(b, &moved) <
            0) { /* the step would read what is there now: not the key */
            b->verifier = VERIFIER_NONE;
            c->verifier = false;
            refuse(c, 409, "protected_path_moved", moved.msg);
            exec_finish(c, 0, NULL, 0);
            return;
        }
        b->verifier = VERIFIER_RUNNING;
        c->areq.on_frame = exec_frame;
        int e = send_exec(c, c->pending);
        cdn_exec_args_free(c->pending);
        free(c->pending);
        c->pending = NULL;
        if (e < 0) {
            b->verifier = VERIFIER_NONE;
            exec_finish(c, 0, NULL, 0);
        } else if (c->departed) { /* its client left while the sandbox was quiesced */
            kill_for_departed_client(c);
        }
        return;
    }
    /* Ended (DONE), or the sandbox went away (0): the agent has the sandbox again. A sandbox that
     * went away took the step's leftovers with it; an agent that broke the protocol did not say
     * they are gone: no result then. */
    b->verifier = VERIFIER_NONE;
    c->verifier = false;
    if (c->last_type && (type == CDN_FRAME_DONE || !cdn_agent_conn_failure(&b->agent)))
        exec_finish(c, c->last_type, c->last, c->last_len);
    else
        exec_finish(c, 0, NULL, 0);
}

/* The deadline passed (arm_deadline): the request ends now, answered 504 (its client may have
 * gone: the answer frees it all the same), and its channel is dropped — a late answer from the
 * agent finds nobody. A verifier step that was waiting for its QUIESCE gives the protected
 * paths back: they are guarded again (that state is the guard's, box-fanotify.c). */
static void give_up(struct call *c)
{
    cdn_agent_conn_remove(&c->box->agent, &c->areq);
    c->gave_up = true;
    c->quiesce_unanswered = c->areq.on_frame == quiesce_frame;
    if (c->verifier)
        c->box->verifier = VERIFIER_NONE;
    c->verifier = false;
    exec_finish(c, 0, NULL, 0);
}

/* Why the request ends without the command's EXIT or ERROR (type 0): the sandbox ended, the agent
 * broke the protocol, or it did not answer in time. */
static json_t *lost_json(struct call *c, int *status)
{
    const char *failure = cdn_agent_conn_failure(&c->box->agent);
    char msg[320];
    if (c->gave_up && c->quiesce_unanswered) {
        struct cdn_exit_msg m;
        bool after = c->last_type == CDN_FRAME_EXIT && cdn_exit_decode(c->last, c->last_len, &m) == 0;
        (void) snprintf(msg, sizeof msg,
                        "the sandbox's agent did not end its other processes within %u s %s the verifier "
                        "step%s",
                        cdn_daemon->cfg.agent_timeout_s, after ? "after" : "before",
                        after ? " (which had exited): its result is withheld" : ": it did not run");
        *status = 504;
        return cdn_api_error_json("agent_timeout", NULL, msg);
    }
    if (c->gave_up) {
        *status = 504;
        (void) snprintf(msg, sizeof msg, "the sandbox's agent did not end the command within %u s",
                        cdn_daemon->cfg.agent_timeout_s);
        return cdn_api_error_json("agent_timeout", NULL, msg);
    }
    if (failure) {
        *status = 502;
        (void) snprintf(msg, sizeof msg, "the sandbox's agent broke the protocol: %s", failure);
        return cdn_api_error_json("agent_protocol_error", NULL, msg);
    }
    *status = 500;
    return cdn_api_error_json("sandbox_gone", NULL, "the sandbox ended before the command did");
}

/* The step's line in its trajectory, before the answer goes: res with the output kept (base64, the
 * exact bytes), then res says which step it was (and, should the log fail, that it was not kept). */
static void record_step(struct call *c, json_t *res)
{
    uint64_t k = c->traj.k;
    json_t *result = json_deep_copy(res);
    if (result) {
        json_object_set_new(
            result, "stdout_b64",
            cdn_api_bytes_json(evbuffer_pullup(c->out, -1), evbuffer_get_length(c->out), true));
        json_object_set_new(
            result, "stderr_b64",
            cdn_api_bytes_json(evbuffer_pullup(c->err, -1), evbuffer_get_length(c->err), true));
        if (c->out_trunc || c->err_trunc)
            json_object_set_new(result, "truncated", json_true());
    }
    int r = result ? cdn_traj_record(c->box, &c->traj, "exec", result) : -ENOMEM;
    if (!result)
        cdn_traj_abort(&c->traj);
    json_object_set_new(res, "step", json_integer((json_int_t) k));
    if (r < 0) { /* it ran, and a re-issue of it would run it again: the client must know */
        json_object_set_new(res, "step_recorded", json_false());
        json_object_set_new(res, "step_error", json_string(strerror(-r)));
    }
}

static void exec_finish(struct call *c, uint16_t type, const uint8_t *p, uint32_t len)
{
    if (c->verifier && c->box->verifier == VERIFIER_RUNNING && c->box->state == BOX_RUNNING) {
        /* The step is over: hold its result until what it left is gone. */
        c->last_type = type ? type : CDN_FRAME_DONE;
        if (len && !(c->last = malloc(len)))
            c->last_type = CDN_FRAME_DONE; /* reported as the sandbox gone */
        else if (len)
            memcpy(c->last, p, len);
        c->last_len = c->last ? len : 0;
        c->box->verifier = VERIFIER_ENDING;
        c->areq.on_frame = quiesce_frame;
        if (quiesce(c) == 0)
            return;
        c->box->verifier = VERIFIER_NONE;
        type = c->last_type, p = c->last, len = c->last_len;
    }
    if (c->verifier)
        c->box->verifier = VERIFIER_NONE;
    double ms = ms_since(&c->t0);
    json_t *res = NULL;
    int status = 200;
    struct cdn_exit_msg m;
    int e;
    const char *msg;
    if (type == CDN_FRAME_EXIT && cdn_exit_decode(p, len, &m) == 0) {
        int code = c->timed_out ? 124 : m.signal ? 128 + m.signal : m.exit_code;
        res = json_pack("{s:i, s:o, s:b, s:f, s:f, s:f, s:I}", "exit_code", code, "signal",
                        m.signal ? json_integer(m.signal) : json_null(), "timed_out", c->timed_out,
                        "duration_ms", ms, "cpu_user_ms", (double) m.user_us / 1e3, "cpu_system_ms",
                        (double) m.sys_us / 1e3, "max_rss_kb", (json_int_t) m.maxrss_kb);
        record_latency(ms);
        struct box *owner = c->owner ? c->owner : c->box;
        owner->execs++;
        json_t *ev = json_pack("{s:o, s:O?, s:i, s:f, s:b}", "cmd",
                               cdn_json_lossy_string((const uint8_t *) c->cmd, strlen(c->cmd)), "argv",
                               c->argv, "exit_code", code, "duration_ms", ms, "timed_out", c->timed_out);
        if (ev && c->argv_trunc)
            json_object_set_new(ev, "argv_truncated", json_true());
        if (ev && c->verifier_step)
            json_object_set_new(ev, "verifier", json_string(c->owner ? "sibling" : "in_place"));
        cdn_box_event(owner, "exec", ev);
        cdn_box_check_limits(c->box); /* an OOM kill or a pids-limit hit during it is a violation */
        if (c->traj.t && res &&
            !c->departed) /* killed for a client that left: not a step (re-issued, it runs) */
            record_step(c, res);
    } else if (c->fail_code) {
        status = c->fail_status;
        res = cdn_api_error_json(c->fail_code, NULL, c->fail_msg);
    } else if (type == CDN_FRAME_ERROR && cdn_errmsg_decode(p, len, &e, &msg) == 0) {
        /* A verifier step the guest's init refused (frame.h): the sandbox's state, not the command. */
        bool refused = c->verifier_step && (e == CDN_VERIFIER_MOVED || e == CDN_VERIFIER_UNSAFE);
        status = refused ? 409 : 400;
        res = cdn_api_error_json(!refused                  ? "exec_failed"
                                 : e == CDN_VERIFIER_MOVED ? "protected_path_moved"
                                                           : "verifier_unsafe",
                                 refused                          ? NULL
                                 : strncmp(msg, "user: ", 6) == 0 ? "user" /* init-user.c, init-exec.c */
                                 : strncmp(msg, "working directory ", 18) == 0 ? "cwd" /* init-exec.c */
                                                                               : "cmd",
                                 msg);
    } else {
        res = lost_json(c, &status);
    }
    forget_client(c);
    for (int s = 0; c->stream && !c->client_gone && s < 2; s++)
        if (c->tail_len[s]) /* an unfinished character at the very end: sent as it is (U+FFFD) */
            stream_text(c, s, NULL, 0);
    if (c->stream) {
        if (res && status == 200)
            json_object_set_new(res, "type", json_string("exit"));
        else if (res)
            json_object_set_new(res, "type", json_string("error"));
        stream_line(c, res);
        evhttp_send_reply_end(c->req);
    } else if (status != 200) {
        cdn_api_reply_json(c->req, status, res);
    } else {
        const char *ko = c->b64 ? "stdout_b64" : "stdout", *ke = c->b64 ? "stderr_b64" : "stderr";
        json_object_set_new(res, ko, bytes_json(c, evbuffer_pullup(c->out, -1), evbuffer_get_length(c->out)));
        json_object_set_new(res, ke, bytes_json(c, evbuffer_pullup(c->err, -1), evbuffer_get_length(c->err)));
        if (c->out_trunc || c->err_trunc)
            json_object_set_new(res, "truncated", json_true());
        cdn_api_reply_json(c->req, 200, res);
    }
    void (*done)(void *) = c->done;
    void *done_arg = c->done_arg;
    call_free(c);
    if (done)
        done(done_arg);
}

/* The frames of an exec channel (agent-conn.c admitted only STDOUT, STDERR, EXIT, ERROR). */
static void exec_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len)
{
    struct call *c = (struct call *) r;
    if (type == CDN_FRAME_STDOUT || type == CDN_FRAME_STDERR) {
        if (len == 0)
            return; /* end of that stream: EXIT follows */
        if (c->stream) {
            if (!c->client_gone)
                stream_text(c, type == CDN_FRAME_STDOUT ? 0 : 1, p, len);
            if (!c->traj.t)
                return;
        }
        struct evbuffer *b = type == CDN_FRAME_STDOUT ? c->out : c->err;
        bool *trunc = type == CDN_FRAME_STDOUT ? &c->out_trunc : &c->err_trunc;
        size_t have = evbuffer_get_length(b), cap = cdn_daemon->cfg.max_output_bytes;
        if (have + len > cap) {
            *trunc = true;
            len = have < cap ? (uint32_t) (cap - have) : 0;
        }
        if (len)
            evbuffer_add(b, p, len);
        return;
    }
    exec_finish(c, type, p, len); /* EXIT, ERROR, or the connection's end (0) */
}

static void exec_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct call *c = arg;
    c->timed_out = true;
    int32_t sig = SIGKILL;
    (void) cdn_agent_conn_send(&c->box->agent, CDN_FRAME_SIGNAL, 0, c->areq.channel, &sig, sizeof sig);
    arm_deadline(c); /* an agent that cannot answer (a paused sandbox's) does not hold the request */
}

static struct call *call_new(struct evhttp_request *req, struct box *b,
                             void (*on_frame)(struct agent_req *, uint16_t, const uint8_t *, uint32_t))
{
    struct call *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->areq.on_frame = on_frame;
    c->box = b;
    c->req = req;
    clock_gettime(CLOCK_MONOTONIC, &c->t0);
    return c;
}

bool cdn_api_box_usable(struct evhttp_request *req, struct box *b)
{
    if (b->state == BOX_RUNNING && b->paused) {
        cdn_api_reply_error(req, 409, "sandbox_paused", NULL,
                            "sandbox %s is paused: POST /v1/sandboxes/%s/resume first", b->sb.id, b->sb.id);
        return false;
    }
    if (b->state == BOX_RUNNING)
        return true;
    if (b->state != BOX_EXITED) {
        cdn_api_reply_error(req, 409, "sandbox_not_running", NULL, "sandbox %s is %s", b->sb.id,
                            cdn_box_state_name(b->state));
        return false;
    }
    /* Gone for good (410), with why; its record (GET, events, violations) stays for the retention. */
    char msg[256];
    (void) snprintf(msg, sizeof msg, "sandbox %s ended: %s", b->sb.id, b->exit_reason);
    json_t *e = cdn_api_error_json("sandbox_ended", NULL, msg);
    json_object_set_new(json_object_get(e, "error"), "exit_reason", json_string(b->exit_reason));
    cdn_api_reply_json(req, 410, e);
    return false;
}

/* A container whose system directories landlock keeps read-only (CDN_EXEC_SYSTEM_RO): no
 * writable_system, no read-write bind into them, and a kernel with Landlock (setup.c applies it
 * whenever the kernel has it). */
static bool system_read_only(const struct box *b)
{
    const struct cdn_spec *spec = &b->spec;
    if (spec->tier != CDN_TIER_CONTAINER || spec->writable_system || cdn_landlock_abi() <= 0)
        return false;
    for (size_t i = 0; i < spec->n_mounts; i++)
        if (!spec->mounts[i].readonly && cdn_path_in_system(spec->mounts[i].target))
            return false;
    return true;
}

static int send_exec(struct call *c, struct exec_args *a)
{
    return cdn_api_exec_send(c->box, &c->areq, a, c->verifier, 0);
}

int cdn_api_exec_send(struct box *b, struct agent_req *req, const struct exec_args *a, bool verifier,
                      uint32_t more_flags)
{
    _cleanup_(cdn_strv_free) struct cdn_strv env = {0};
    char *const *extra = a->env.n ? a->env.v : NULL;
    /* The request's user, else the spec's; a verifier step is the operator's and takes only its
     * own (root without one: init refuses it any other, init-exec.c). */
    const char *user = a->user ? a->user : verifier ? NULL : b->spec.user;
    if (cdn_exec_env_as(&b->spec, a->pty ? "xterm" : NULL, extra, verifier, user, &env) < 0)
        return -ENOMEM;
    uint32_t flags = CDN_EXEC_PIPES | (a->has_stdin || a->keep_stdin ? CDN_EXEC_STDIN : 0) |
                     (a->pty ? CDN_EXEC_PTY : 0) | (verifier ? CDN_EXEC_VERIFIER : 0) |
                     (a->timeout_s > 0 ? CDN_EXEC_TREE : 0) |
                     (verifier && system_read_only(b) ? CDN_EXEC_SYSTEM_RO : 0) | more_flags;
    static uint8_t buf[CDN_FRAME_MAX];
    int n = cdn_exec_encode(buf, sizeof buf,
                            &(struct cdn_exec_args){.flags = flags,
                                                    .rows = a->rows,
                                                    .cols = a->cols,
                                                    .cwd = a->cwd ? a->cwd : b->spec.workdir,
                                                    .argv = a->argv.v,
                                                    .envp = env.v,
                                                    .user = user});
    if (n < 0)
        return n;
    struct agent_conn *ac = &b->agent;
    uint32_t ch = cdn_agent_conn_add(
        ac, req,
        AGENT_EXEC_FRAMES |
            (more_flags & CDN_EXEC_PID ? AGENT_FRAME(CDN_FRAME_STARTED) | AGENT_FRAME(CDN_FRAME_WINDOW) : 0) |
            (more_flags & CDN_EXEC_CONTROL ? AGENT_FRAME(CDN_FRAME_CONTROL) : 0));
    int r = cdn_agent_conn_send(ac, CDN_FRAME_EXEC, 0, ch, buf, (uint32_t) n);
    for (long off = 0; r >= 0 && a->has_stdin && off < a->stdin_len; off += STDIN_CHUNK) {
        long k = a->stdin_len - off < (long) STDIN_CHUNK ? a->stdin_len - off : (long) STDIN_CHUNK;
        r = cdn_agent_conn_send(ac, CDN_FRAME_STDIN, 0, ch, a->stdin_data + off, (uint32_t) k);
    }
    if (r >= 0 && a->has_stdin && !a->keep_stdin)
        r = cdn_agent_conn_send(ac, CDN_FRAME_STDIN, 0, ch, NULL, 0);
    if (r < 0)
        cdn_agent_conn_remove(ac, req);
    return r;
}

static void exec_begin(struct evhttp_request *req, struct box *b, struct exec_args *args, struct box *owner,
                       void (*done)(void *arg), void *done_arg, struct traj_step *step);

/* What makes an exec the same step again (trajectory.h): its command line, environment, directory,
 * user, stdin (its digest), timeout and whether it is a verifier step; not how its answer is sent. */
static json_t *exec_request_json(const struct box *b, const struct exec_args *a)
{
    json_t *argv = json_array(), *env = json_object();
    for (size_t i = 0; argv && i < a->argv.n; i++)
        json_array_append_new(argv,
                              cdn_json_lossy_string((const uint8_t *) a->argv.v[i], strlen(a->argv.v[i])));
    for (size_t i = 0; env && i < a->env.n; i++) {
        const char *eq = strchr(a->env.v[i], '=');
        _cleanup_free_ char *k = eq ? strndup(a->env.v[i], (size_t) (eq - a->env.v[i])) : NULL;
        if (k)
            json_object_set_new(env, k, cdn_json_lossy_string((const uint8_t *) eq + 1, strlen(eq + 1)));
    }
    char digest[CDN_DIGEST_MAX] = "";
    _cleanup_hasher_ struct cdn_hasher *h = NULL;
    if (a->has_stdin && cdn_hasher_new("sha256", &h) == 0) {
        cdn_hasher_update(h, a->stdin_data, (size_t) a->stdin_len);
        cdn_hasher_digest(h, digest);
    }
    return json_pack("{s:o, s:o, s:s, s:s?, s:s?, s:f, s:b}", "argv", argv ? argv : json_array(), "env",
                     env ? env : json_object(), "cwd", a->cwd ? a->cwd : b->spec.workdir, "user", a->user,
                     "stdin_sha256", a->has_stdin ? digest : NULL, "timeout_s", a->timeout_s, "verifier",
                     a->verifier != EXEC_PLAIN);
}

/* One recorded output (base64 in the log) as bytes; NULL with *n 0 for none. */
static uint8_t *recorded_bytes(json_t *res, const char *key, size_t *n)
{
    const char *s = json_string_value(json_object_get(res, key));
    size_t len = s ? strlen(s) : 0;
    uint8_t *out = len ? malloc(len / 4 * 3 + 3) : NULL;
    long k = out ? cdn_base64_decode(s, len, out) : 0;
    *n = k > 0 ? (size_t) k : 0;
    return out;
}

/* A recorded step answered again (trajectory.h), as this request asks for it: buffered or
 * streamed, text or base64; "replayed": true. Nothing runs. */
static void replay(struct evhttp_request *req, struct box *box, const struct exec_args *a, json_t *recorded)
{
    _cleanup_json_ json_t *line = recorded;
    cdn_box_touch(box); /* a request like any: the idle clock starts again */
    json_t *res = json_deep_copy(json_object_get(line, "result"));
    if (!res)
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    size_t no = 0, ne = 0;
    _cleanup_free_ uint8_t *out = recorded_bytes(res, "stdout_b64", &no);
    _cleanup_free_ uint8_t *err = recorded_bytes(res, "stderr_b64", &ne);
    json_object_del(res, "stdout_b64");
    json_object_del(res, "stderr_b64");
    json_object_set(res, "step", json_object_get(line, "step"));
    json_object_set_new(res, "replayed", json_true());
    const char *ko = a->b64 ? "stdout_b64" : "stdout", *ke = a->b64 ? "stderr_b64" : "stderr";
    if (!a->stream) {
        json_object_set_new(res, ko, cdn_api_bytes_json(out ? out : (const uint8_t *) "", no, a->b64));
        json_object_set_new(res, ke, cdn_api_bytes_json(err ? err : (const uint8_t *) "", ne, a->b64));
        return cdn_api_reply_json(req, 200, res);
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/x-ndjson");
    _cleanup_evbuffer_ struct evbuffer *b = evbuffer_new();
    json_t *lines[3] = {no ? json_pack("{s:s, s:o}", "type", "stdout", a->b64 ? "data_b64" : "data",
                                       cdn_api_bytes_json(out, no, a->b64))
                           : NULL,
                        ne ? json_pack("{s:s, s:o}", "type", "stderr", a->b64 ? "data_b64" : "data",
                                       cdn_api_bytes_json(err, ne, a->b64))
                           : NULL,
                        res};
    json_object_set_new(res, "type", json_string("exit"));
    for (int i = 0; i < 3; i++) {
        _cleanup_free_ char *s = lines[i] ? json_dumps(lines[i], JSON_COMPACT) : NULL;
        json_decref(lines[i]);
        if (s && b) {
            evbuffer_add(b, s, strlen(s));
            evbuffer_add(b, "\n", 1);
        }
    }
    evhttp_send_reply(req, 200, "OK", b);
}

void cdn_api_exec(struct evhttp_request *req, struct box *b)
{
    if (!cdn_api_box_usable(req, b))
        return;
    if (b->verifier != VERIFIER_NONE)
        return cdn_api_reply_error(req, 409, "verifier_running", NULL,
                                   "a verifier step runs in sandbox %s; other commands wait for its end",
                                   b->sb.id);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    _cleanup_(cdn_exec_args_free) struct exec_args a = {0}; /* moved out by what starts the exec */
    struct cdn_error e = {0};
    int r = cdn_exec_args_parse((const char *) evbuffer_pullup(in, -1), evbuffer_get_length(in),
                                b->spec.workdir, &a, &e);
    if (r < 0)
        return cdn_api_reply_cdn_error(req, 400, r == -EBADMSG ? "invalid_json" : "invalid_argument", &e);
    if (cdn_tier_check_user(b->sb.tier, a.user, &e) < 0)
        return cdn_api_reply_cdn_error(req, 400, "invalid_argument", &e);
    if (a.verifier == EXEC_VERIFIER_SIBLING)
        return cdn_api_sibling_start(req, b, &a);
    if (a.background)
        return cdn_api_proc_start(req, b, &a);
    struct traj_step step;
    json_t *recorded;
    /* a terminal's session is not a step */
    int t = cdn_api_traj_begin(req, b, "exec", b->spec.trajectory && !a.pty ? exec_request_json(b, &a) : NULL,
                               a.has_step, a.step, "invalid_argument", &step, &recorded);
    if (t == TRAJ_REPLAY)
        return replay(req, b, &a, recorded);
    if (t == TRAJ_RUN)
        exec_begin(req, b, &a, NULL, NULL, NULL, &step);
}

void cdn_api_exec_begin(struct evhttp_request *req, struct box *b, struct exec_args *args, struct box *owner,
                        void (*done)(void *arg), void *done_arg)
{
    exec_begin(req, b, args, owner, done, done_arg, NULL);
}

static void exec_begin(struct evhttp_request *req, struct box *b, struct exec_args *args, struct box *owner,
                       void (*done)(void *arg), void *done_arg, struct traj_step *step)
{
    _cleanup_(cdn_exec_args_free) struct exec_args a = *args;
    *args = (struct exec_args){0};
    int r = 0;
    struct call *c = call_new(req, b, exec_frame);
    if (c && step) {
        c->traj = *step; /* the call's now: recorded at its EXIT, else let go with it */
        *step = (struct traj_step){0};
    }
    if (step)
        cdn_traj_abort(step); /* no call to hand it to */
    if (c) {
        c->stream = a.stream;
        c->b64 = a.b64;
        c->owner = owner;
        (void) snprintf(c->cmd, sizeof c->cmd, "%s", a.argv.v[0]);
        c->argv = cdn_api_argv_json(a.argv.v, &c->argv_trunc);
        /* The whole command line, for the monitor's exec rules. */
        char line[4096];
        size_t len = 0;
        for (size_t i = 0; a.argv.v[i] && len < sizeof line - 1; i++)
            len += (size_t) snprintf(line + len, sizeof line - len, "%s%s", i ? " " : "", a.argv.v[i]);
        json_decref(cdn_monitor_match(owner ? owner : b, 1, line, len < sizeof line ? len : sizeof line - 1));
        c->out = evbuffer_new();
        c->err = evbuffer_new();
    }
    if (c && c->out && c->err &&
        a.verifier != EXEC_PLAIN) { /* the command is sent once the sandbox is quiet (quiesce_frame) */
        c->verifier = c->verifier_step = true;
        c->pending = malloc(sizeof *c->pending);
        if (c->pending) {
            *c->pending = a;
            a = (struct exec_args){0};
            c->areq.on_frame = quiesce_frame;
            b->verifier = VERIFIER_STARTING;
            if ((r = quiesce(c)) < 0)
                b->verifier = VERIFIER_NONE;
        } else
            r = -ENOMEM;
    }
    if (!c || !c->out || !c->err || (!c->verifier && (r = send_exec(c, &a)) < 0) || r < 0) {
        if (c)
            call_free(c);
        cdn_api_reply_error(req, r == -ENOBUFS ? 400 : 500, r == -ENOBUFS ? "invalid_argument" : "internal",
                            r == -ENOBUFS ? "cmd" : NULL, "%s",
                            r == -ENOBUFS ? "cmd and env exceed 1 MiB" : "cannot reach the sandbox's agent");
        if (done)
            done(done_arg);
        return;
    }
    c->done = done;
    c->done_arg = done_arg;
    if (a.timeout_s > 0) {
        struct timeval tv = {.tv_sec = (time_t) a.timeout_s,
                             .tv_usec = (suseconds_t) ((a.timeout_s - (double) (time_t) a.timeout_s) * 1e6)};
        c->timer = evtimer_new(cdn_daemon->base, exec_timeout, c);
        if (c->timer)
            evtimer_add(c->timer, &tv);
    }
    cdn_daemon->execs_total++;
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), client_gone, c);
    struct bufferevent *bev = evhttp_connection_get_bufferevent(evhttp_request_get_connection(req));
    if (!c->stream && bev &&
        (c->closed_ev = event_new(cdn_daemon->base, bufferevent_getfd(bev), EV_CLOSED, on_client_closed, c)))
        (void) event_add(c->closed_ev, NULL);
    if (c->stream) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/x-ndjson");
        evhttp_send_reply_start(req, 200, "OK");
        cdn_api_stream_timeout(req);
        c->started = true;
    }
}
