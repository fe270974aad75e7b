/* E2B's process service (process.Process over the Connect protocol, JSON
 * codec; docs/e2b.md) as a view of cordond's background processes
 * (api-proc.c): Start and Connect stream a process's events as envelopes
 * (proto/connect.h), List, SendInput, CloseStdin, SendSignal and Update are
 * unary. A process outlives the stream that started it (the SDK's disconnect
 * and reconnect); the stream's deadline (Connect-Timeout-Ms) ends both. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "core/json-util.h"
#include "e2b.h"
#include "exec-args.h"
#include "proto/connect.h"
#include "shared/base64.h"

#define KEEPALIVE_S   30         /* within the SDK's 50 s ping interval and its client's 300 s idle limit */
#define STREAM_BEHIND (8u << 20) /* a client this far behind loses its stream (the process goes on) */

struct stream {
    struct cdn_proc_sink sink; /* first */
    struct evhttp_request *req;
    struct box *box;
    struct event *keepalive, *deadline;
    uint32_t pid; /* once started */
    bool started;
    bool kills; /* Start's: its deadline kills the process (Connect's only ends the stream) */
};

static void stream_free(struct stream *st)
{
    cdn_api_proc_detach(&st->sink);
    if (st->keepalive)
        event_free(st->keepalive);
    if (st->deadline)
        event_free(st->deadline);
    struct evhttp_connection *conn = st->req ? evhttp_request_get_connection(st->req) : NULL;
    if (conn)
        evhttp_connection_set_closecb(conn, NULL, NULL);
    free(st);
}

/* The end-stream envelope ({} or an error), and the stream is over: freed before the reply ends
 * (ending it may free the connection, whose close callback must find nothing). */
static void stream_finish(struct stream *st, const char *code, const char *msg)
{
    struct evhttp_request *req = st->req;
    cdn_e2b_envelope(req, CDN_CONNECT_END_STREAM, code ? cdn_e2b_connect_error(code, msg) : json_object());
    stream_free(st);
    evhttp_send_reply_end(req);
}

static void event_out(struct stream *st, json_t *ev)
{
    cdn_e2b_envelope(st->req, 0, json_pack("{s:o}", "event", ev));
}

static void on_start(struct cdn_proc_sink *s, uint32_t pid)
{
    struct stream *st = (struct stream *) s;
    st->started = true;
    st->pid = pid;
    event_out(st, json_pack("{s:{s:I}}", "start", "pid", (json_int_t) pid));
}

static size_t backlog(struct evhttp_request *req)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

static void on_output(struct cdn_proc_sink *s, uint8_t stream, bool pty, const uint8_t *d, size_t n)
{
    struct stream *st = (struct stream *) s;
    if (backlog(st->req) > STREAM_BEHIND)
        return stream_finish(st, "resource_exhausted",
                             "the client fell too far behind the output: Connect to the process again");
    _cleanup_free_ char *b64 = malloc(cdn_base64_len(n) + 1);
    if (!b64)
        return;
    cdn_base64_encode(d, n, b64);
    event_out(st, json_pack("{s:{s:s}}", "data", pty ? "pty" : stream == 2 ? "stderr" : "stdout", b64));
}

static void on_end(struct cdn_proc_sink *s, bool started, int exit_code, int sig, const char *why)
{
    struct stream *st = (struct stream *) s;
    if (!started)
        return stream_finish(st, "invalid_argument", why ? why : "the process did not start");
    if (why && !sig) /* not an exit of its own: the sandbox ended, its record went */
        return stream_finish(st, "unavailable", why);
    char status[64];
    if (sig)
        (void) snprintf(status, sizeof status, "signal: %s", sig == SIGKILL ? "killed" : strsignal(sig));
    else
        (void) snprintf(status, sizeof status, "exit status %d", exit_code);
    json_t *end =
        json_pack("{s:i, s:b, s:s}", "exitCode", sig ? -1 : exit_code, "exited", !sig, "status", status);
    if (end && (sig || exit_code))
        json_object_set_new(end, "error", json_string(status));
    event_out(st, json_pack("{s:o}", "end", end));
    stream_finish(st, NULL, NULL);
}

static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct stream *st = arg;
    if (st->started) /* the start event is always the first */
        event_out(st, json_pack("{s:{}}", "keepalive"));
}

/* The stream's deadline: a Start's process is killed (as E2B's timeoutMs does), and the stream
 * ends so; a Connect's process goes on. */
static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct stream *st = arg;
    if (st->kills) /* started or not: by its channel */
        (void) cdn_api_proc_sink_signal(&st->sink, SIGKILL);
    stream_finish(st, "deadline_exceeded",
                  st->kills ? "the command's timeout passed: it was killed" : "the stream's timeout passed");
}

static void on_client_gone(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    struct stream *st = arg;
    struct evhttp_request *req = st->req;
    st->req = NULL;
    stream_free(st); /* the process goes on */
    if (!evhttp_request_get_connection(req))
        evhttp_send_reply_end(req);
}

static struct stream *stream_new(struct evhttp_request *req, struct box *b, bool kills)
{
    struct stream *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->req = req;
    st->box = b;
    st->kills = kills;
    st->sink = (struct cdn_proc_sink){.start = on_start, .output = on_output, .end = on_end};
    const struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *ms = evhttp_find_header(h, "Connect-Timeout-Ms");
    char *endp = NULL;
    unsigned long long t = ms ? strtoull(ms, &endp, 10) : 0;
    struct timeval ka = {.tv_sec = KEEPALIVE_S};
    if (!(st->keepalive = event_new(cdn_daemon->base, -1, EV_PERSIST, on_keepalive, st)) ||
        event_add(st->keepalive, &ka) < 0) {
        stream_free(st);
        return NULL;
    }
    if (t > 0 && endp && !*endp && t <= 7ULL * 86400 * 1000) {
        struct timeval tv = {.tv_sec = (time_t) (t / 1000), .tv_usec = (suseconds_t) (t % 1000) * 1000};
        if ((st->deadline = evtimer_new(cdn_daemon->base, on_deadline, st)))
            (void) evtimer_add(st->deadline, &tv);
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/connect+json");
    evhttp_send_reply_start(req, 200, "OK");
    cdn_api_stream_timeout(req);
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), on_client_gone, st);
    return st;
}

/* Start: {"process": {"cmd", "args", "envs", "cwd"}, "pty": {"size": {"cols", "rows"}}, "stdin"}. */
static void rpc_start(struct evhttp_request *req, struct box *b)
{
    char why[400];
    _cleanup_json_ json_t *o = cdn_e2b_stream_request(req, why, sizeof why);
    if (!o)
        return cdn_e2b_stream_refuse(req, "invalid_argument", "%s", why);
    json_t *proc = json_object_get(o, "process"), *cmd = json_object_get(proc, "cmd");
    json_t *args = json_object_get(proc, "args"), *size = json_object_get(json_object_get(o, "pty"), "size");
    if (!json_is_string(cmd) || (args && !json_is_array(args)))
        return cdn_e2b_stream_refuse(req, "invalid_argument",
                                     "process.cmd: expected a string, process.args a list");
    if (json_object_get(o, "tag"))
        return cdn_e2b_stream_refuse(req, "invalid_argument", "tag: not supported by cordon (docs/e2b.md)");
    /* As cordon's own exec body, checked by its parser. */
    _cleanup_json_ json_t *x = json_pack("{s:[O], s:b, s:b}", "cmd", cmd, "background", 1, "keep_stdin",
                                         json_is_true(json_object_get(o, "stdin")));
    size_t i;
    json_t *v;
    json_array_foreach(args, i, v) json_array_append(json_object_get(x, "cmd"), v);
    if (json_object_get(proc, "envs"))
        json_object_set(x, "env", json_object_get(proc, "envs"));
    if (json_object_get(proc, "cwd"))
        json_object_set(x, "cwd", json_object_get(proc, "cwd"));
    if (size)
        json_object_set_new(x, "pty",
                            json_pack("{s:O?, s:O?}", "rows", json_object_get(size, "rows"), "cols",
                                      json_object_get(size, "cols")));
    _cleanup_free_ char *user = cdn_e2b_request_user(req);
    if (user)
        json_object_set_new(x, "user", json_string(user));
    _cleanup_free_ char *body = json_dumps(x, JSON_COMPACT);
    struct exec_args a = {0};
    struct cdn_error err = {0};
    if (!body || cdn_exec_args_parse(body, strlen(body), b->spec.workdir, &a, &err) < 0) {
        cdn_exec_args_free(&a);
        return cdn_e2b_stream_refuse(req, "invalid_argument", "%s", body ? err.msg : "out of memory");
    }
    /* Its own deadline too, a second after the stream's: the process is killed at its time even
     * when its client went away first (a background command with timeoutMs). */
    const char *ms = evhttp_find_header(evhttp_request_get_input_headers(req), "Connect-Timeout-Ms");
    char *endp = NULL;
    unsigned long long t = ms ? strtoull(ms, &endp, 10) : 0;
    if (t > 0 && endp && !*endp && t <= 7ULL * 86400 * 1000)
        a.timeout_s = (double) t / 1e3 + 1;
    struct stream *st = stream_new(req, b, true);
    if (!st) {
        cdn_exec_args_free(&a);
        return cdn_e2b_stream_refuse(req, "internal", "out of memory");
    }
    int r = cdn_api_proc_spawn(b, &a, &st->sink, why, sizeof why);
    cdn_exec_args_free(&a);
    if (r < 0)
        stream_finish(st,
                      r == -EAGAIN   ? "resource_exhausted"
                      : r == -EINVAL ? "invalid_argument"
                                     : "internal",
                      why);
}

/* A process selector: {"pid": N}. 0 (answered) when it is not one. */
static uint32_t selector_pid(json_t *sel)
{
    json_t *pid = json_object_get(sel, "pid");
    if (!json_is_integer(pid) || json_integer_value(pid) <= 0 || json_integer_value(pid) > UINT32_MAX)
        return 0;
    return (uint32_t) json_integer_value(pid);
}

static void rpc_connect(struct evhttp_request *req, struct box *b)
{
    char why[400];
    _cleanup_json_ json_t *o = cdn_e2b_stream_request(req, why, sizeof why);
    if (!o)
        return cdn_e2b_stream_refuse(req, "invalid_argument", "%s", why);
    uint32_t pid = selector_pid(json_object_get(o, "process"));
    if (!pid)
        return cdn_e2b_stream_refuse(req, "invalid_argument",
                                     "process: expected {\"pid\": N} (tags: not supported)");
    struct stream *st = stream_new(req, b, false);
    if (!st)
        return cdn_e2b_stream_refuse(req, "internal", "out of memory");
    int r = cdn_api_proc_attach(b, pid, &st->sink);
    if (r < 0)
        stream_finish(st, r == -EMFILE ? "resource_exhausted" : "not_found",
                      r == -EMFILE ? "8 streams follow that process already"
                                   : "no running process with that pid");
}

/* ---- unary ---- */

static int proc_errno_status(int r, const char **code)
{
    bool pre = r == -EPIPE || r == -ENOTTY || r == -EBUSY;
    *code = r == -ENOENT   ? "not_found"
            : r == -EAGAIN ? "resource_exhausted"
            : pre          ? "failed_precondition"
                           : "internal";
    return r == -ENOENT ? 404 : r == -EAGAIN ? 429 : pre ? 400 : 500;
}

static void rpc_unary(struct evhttp_request *req, struct box *b, const char *method)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    json_error_t je;
    _cleanup_json_ json_t *o =
        n ? json_loadb((const char *) evbuffer_pullup(in, (ev_ssize_t) n), n, JSON_REJECT_DUPLICATES, &je)
          : json_object();
    if (!json_is_object(o))
        return cdn_e2b_unary_error(req, 400, "invalid_argument", "the request: expected a JSON object");
    if (strcmp(method, "List") == 0) {
        _cleanup_json_ json_t *list = cdn_api_proc_list(b);
        json_t *out = json_array(), *p;
        size_t i;
        json_array_foreach(list, i, p)
        {
            json_t *argv = json_object_get(p, "argv"), *args = json_array();
            for (size_t k = 1; k < json_array_size(argv); k++)
                json_array_append(args, json_array_get(argv, k));
            json_array_append_new(out, json_pack("{s:{s:O?, s:o, s:{}}, s:O}", "config", "cmd",
                                                 json_array_get(argv, 0), "args", args, "envs", "pid",
                                                 json_object_get(p, "pid")));
        }
        return cdn_api_reply_json(req, 200, json_pack("{s:o}", "processes", out));
    }
    uint32_t pid = selector_pid(json_object_get(o, "process"));
    if (!pid)
        return cdn_e2b_unary_error(req, 400, "invalid_argument",
                                   "process: expected {\"pid\": N} (tags: not supported)");
    int r;
    if (strcmp(method, "SendSignal") == 0) {
        json_t *s = json_object_get(o, "signal");
        const char *name = json_string_value(s);
        int sig =
            name && strcmp(name, "SIGNAL_SIGKILL") == 0   ? SIGKILL
            : name && strcmp(name, "SIGNAL_SIGTERM") == 0 ? SIGTERM
            : json_is_integer(s) && (json_integer_value(s) == SIGKILL || json_integer_value(s) == SIGTERM)
                ? (int) json_integer_value(s)
                : 0;
        if (!sig)
            return cdn_e2b_unary_error(req, 400, "invalid_argument",
                                       "signal: expected SIGNAL_SIGKILL or SIGNAL_SIGTERM");
        r = cdn_api_proc_signal(b, pid, sig);
    } else if (strcmp(method, "SendInput") == 0 || strcmp(method, "CloseStdin") == 0) {
        json_t *input = json_object_get(o, "input");
        const char *data = json_string_value(json_object_get(input, "stdin"));
        if (!data)
            data = json_string_value(json_object_get(input, "pty"));
        bool close = method[0] == 'C';
        if (!close && !data)
            return cdn_e2b_unary_error(req, 400, "invalid_argument",
                                       "input: expected {\"stdin\" or \"pty\": base64}");
        size_t len = data ? strlen(data) : 0;
        _cleanup_free_ uint8_t *bytes = malloc(len / 4 * 3 + 3);
        long k = data && bytes ? cdn_base64_decode(data, len, bytes) : 0;
        if (k < 0)
            return cdn_e2b_unary_error(req, 400, "invalid_argument", "input: not base64");
        r = cdn_api_proc_input(b, pid, bytes, (size_t) k, close);
    } else if (strcmp(method, "Update") == 0) {
        json_t *size = json_object_get(json_object_get(o, "pty"), "size");
        json_t *rows = json_object_get(size, "rows"), *cols = json_object_get(size, "cols");
        if (!json_is_integer(rows) || !json_is_integer(cols) || json_integer_value(rows) < 1 ||
            json_integer_value(rows) > 999 || json_integer_value(cols) < 1 || json_integer_value(cols) > 999)
            return cdn_e2b_unary_error(req, 400, "invalid_argument",
                                       "pty.size: expected rows and cols, 1-999");
        r = cdn_api_proc_resize(b, pid, (uint16_t) json_integer_value(rows),
                                (uint16_t) json_integer_value(cols));
    } else
        return cdn_e2b_unary_error(req, 404, "unimplemented", "process.Process: no such method");
    if (r < 0) {
        const char *code;
        int st = proc_errno_status(r, &code);
        return cdn_e2b_unary_error(req, st, code,
                                   r == -ENOENT   ? "no running process with that pid"
                                   : r == -EPIPE  ? "its stdin is closed (start it with stdin: true)"
                                   : r == -ENOTTY ? "it has no terminal"
                                   : r == -EBUSY  ? "another write to its stdin is under way"
                                   : r == -EAGAIN
                                       ? "over 1 MiB of input, or as much waits for the process: send less"
                                       : "cannot reach the sandbox's agent");
    }
    cdn_api_reply_json(req, 200, json_object());
}

void cdn_e2b_process(struct evhttp_request *req, struct box *b, const char *method)
{
    if (evhttp_request_get_command(req) != EVHTTP_REQ_POST)
        return cdn_e2b_unary_error(req, 405, "unimplemented", "Connect RPCs are POSTs");
    if (strcmp(method, "Start") == 0)
        return rpc_start(req, b);
    if (strcmp(method, "Connect") == 0)
        return rpc_connect(req, b);
    if (strcmp(method, "StreamInput") == 0)
        return cdn_e2b_unary_error(req, 501, "unimplemented",
                                   "StreamInput: not supported by cordon (use SendInput)");
    rpc_unary(req, b, method);
}
