/* cordond: background processes — POST …/exec with "background": true, and
 * …/processes[/{pid}[/output|stdin|signal|resize|wait]] (docs/cordond.md).
 * Runs in the loop.
 *
 * A background process is an exec whose channel outlives the request that
 * started it: init runs it as any command (output as STDOUT/STDERR frames,
 * input as STDIN frames, SIGNAL and RESIZE) and says its pid once it runs
 * (CDN_EXEC_PID → STARTED), which is when the request is answered. cordond
 * keeps what it printed in a ring per process (the newest PROC_RING bytes;
 * what fell out is counted, never blocks the process), its exit status, and
 * who follows or waits for it. Any client may come back for it by pid: the
 * one that started it may have gone (reconnect = GET …/output?since=N). A
 * cordond restart loses the records: the channel ends with the connection,
 * and what init runs goes on unreported (docs/cordond.md, "Restarts").
 *
 * Trusted: the operator's requests. Not trusted: init's frames (the pid and
 * output are the sandbox's words: bounded, and encoded as JSON strings
 * lossily or in base64). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/keyvalq_struct.h>

#include "api.h"
#include "core/json-util.h"
#include "exec-args.h"
#include "shared/base64.h"

#define PROC_RING     (1u << 20) /* output kept per process */
#define PROC_MAX      64         /* records per sandbox, running or exited */
#define FOLLOW_BEHIND (4u << 20) /* a follower this far behind is cut (it may come back with since) */
#define STDIN_PIECE   (256u << 10)
#define CHUNK_MIN     (4u << 10) /* a chunk's room at least */
#define SINKS_MAX     8          /* E2B streams of one process */
#define INPUT_MAX     (1u << 20) /* an E2B SendInput, and what may wait for init when one comes */

struct chunk {
    uint64_t pos; /* of its first byte, counting both streams since the start */
    uint8_t stream;
    uint32_t len, cap; /* small frames of one stream share a chunk: few, whatever the frames */
    TAILQ_ENTRY(chunk) link;
    uint8_t data[];
};

struct proc_client { /* a follower of its output, or a waiter for its end */
    struct bproc *p;
    struct evhttp_request *req;
    bool follow, b64;
    struct event *timeout, *closed_ev; /* a waiter's: its time is up; its client hung up */
    LIST_ENTRY(proc_client) link;
};

struct bproc {
    struct agent_req areq; /* first: the agent connection hands it back */
    struct box *box;
    struct evhttp_request *start_req; /* answered once it runs */
    struct evhttp_request *stdin_req; /* a stdin write, answered once init has taken it (WINDOW) */
    struct evbuffer *stdin_left;      /* … what of it is still to go, a piece after each WINDOW */
    bool stdin_eof;                   /* … and whether stdin closes after it */
    struct event *stdin_closed_ev;    /* … its client hanging up */
    uint64_t stdin_bytes;
    uint32_t pid;
    bool running, started, timed_out, pty, stdin_open, forget;
    int exit_code, signal;
    char end_why[96]; /* not an exit: the sandbox ended, init refused it */
    char cmd[128];
    json_t *argv;
    bool argv_trunc;
    double started_unix, ended_unix;
    struct timespec t0;
    TAILQ_HEAD(chunks, chunk) out;
    uint64_t kept, next_pos; /* bytes in out; the position after the last */
    struct event *timer;
    LIST_HEAD(, proc_client) clients;
    LIST_HEAD(, cdn_proc_sink) sinks; /* E2B's streams of it (e2b-process.c) */
    LIST_ENTRY(bproc) link;
};

static double now_unix(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double) t.tv_sec + (double) t.tv_nsec / 1e9;
}

static json_t *info_json(const struct bproc *p)
{
    json_t *o =
        json_pack("{s:I, s:s, s:O?, s:b, s:b, s:f}", "pid", (json_int_t) p->pid, "cmd", p->cmd, "argv",
                  p->argv, "running", p->running, "pty", p->pty, "started_at", p->started_unix);
    if (!o)
        return NULL;
    if (!p->running) {
        json_object_set_new(o, "exit_code", p->end_why[0] ? json_null() : json_integer(p->exit_code));
        json_object_set_new(o, "signal", p->signal ? json_integer(p->signal) : json_null());
        json_object_set_new(o, "timed_out", json_boolean(p->timed_out));
        json_object_set_new(o, "ended_at", json_real(p->ended_unix));
        if (p->end_why[0])
            json_object_set_new(o, "error", json_string(p->end_why));
    }
    json_object_set_new(o, "stdin_open", json_boolean(p->stdin_open));
    json_object_set_new(o, "output_next", json_integer((json_int_t) p->next_pos));
    return o;
}

static json_t *base64_json(const uint8_t *d, size_t n)
{
    _cleanup_free_ char *s = malloc(cdn_base64_len(n) + 1);
    if (!s)
        return json_null();
    cdn_base64_encode(d, n, s);
    return json_string(s);
}

static json_t *bytes_json(uint8_t stream, uint64_t pos, const uint8_t *d, size_t n, bool b64)
{
    json_t *o = json_pack("{s:s, s:I}", "type", stream == 1 ? "stdout" : "stderr", "pos", (json_int_t) pos);
    if (o)
        json_object_set_new(o, b64 ? "data_b64" : "data",
                            b64 ? base64_json(d, n) : cdn_json_lossy_string(d, n));
    return o;
}

static json_t *chunk_json(const struct chunk *c, bool b64, uint64_t from)
{
    uint64_t skip = from > c->pos ? from - c->pos : 0;
    return bytes_json(c->stream, c->pos + skip, c->data + skip, c->len - (size_t) skip, b64);
}

static void client_free(struct proc_client *c)
{
    LIST_REMOVE(c, link);
    struct evhttp_connection *conn = evhttp_request_get_connection(c->req);
    if (conn) /* NULL: evhttp detached the request from a connection that failed */
        evhttp_connection_set_closecb(conn, NULL, NULL);
    if (c->timeout)
        event_free(c->timeout);
    if (c->closed_ev)
        event_free(c->closed_ev);
    free(c);
}

/* Its end to a follower (the exit line) or a waiter (the info). */
static void client_end(struct proc_client *c)
{
    const struct bproc *p = c->p;
    struct evhttp_request *req = c->req;
    bool follow = c->follow;
    client_free(c);
    if (!follow)
        return cdn_api_reply_json(req, 200, info_json(p));
    json_t *o = info_json(p);
    if (o)
        json_object_set_new(o, "type", json_string(p->running ? "cut" : "exit"));
    cdn_api_send_line(req, o);
    evhttp_send_reply_end(req);
}

static void stdin_answer(struct bproc *p);
static void stdin_next(struct bproc *p);

/* Its end to each sink, which is off the process from then on. */
static void sinks_end(struct bproc *p)
{
    while (!LIST_EMPTY(&p->sinks)) {
        struct cdn_proc_sink *s = LIST_FIRST(&p->sinks);
        LIST_REMOVE(s, link);
        s->p = NULL;
        s->end(s, p->started, p->exit_code, p->signal, p->end_why[0] ? p->end_why : NULL);
    }
}

static void proc_free(struct bproc *p)
{
    stdin_answer(p);
    if (p->running && !p->end_why[0])
        (void) snprintf(p->end_why, sizeof p->end_why, "its record was deleted");
    sinks_end(p);
    while (!LIST_EMPTY(&p->clients))
        client_end(LIST_FIRST(&p->clients));
    while (!TAILQ_EMPTY(&p->out)) {
        struct chunk *c = TAILQ_FIRST(&p->out);
        TAILQ_REMOVE(&p->out, c, link);
        free(c);
    }
    if (p->timer)
        event_free(p->timer);
    json_decref(p->argv);
    LIST_REMOVE(p, link);
    p->box->n_procs--;
    free(p);
}

static size_t backlog(struct evhttp_request *req)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

static void keep_output(struct bproc *p, uint8_t stream, const uint8_t *d, uint32_t len)
{
    uint64_t pos = p->next_pos;
    struct chunk *c = TAILQ_LAST(&p->out, chunks);
    if (c && c->stream == stream && c->cap - c->len >= len) { /* one more small frame of that stream */
        memcpy(c->data + c->len, d, len);
        c->len += len;
    } else {
        uint32_t cap = len > CHUNK_MIN ? len : CHUNK_MIN;
        if (!(c = malloc(sizeof *c + cap)))
            return;
        *c = (struct chunk){.pos = pos, .stream = stream, .len = len, .cap = cap};
        memcpy(c->data, d, len);
        TAILQ_INSERT_TAIL(&p->out, c, link);
        p->kept += sizeof *c + cap; /* what it takes, not what it holds: any frames are bounded */
    }
    p->next_pos += len;
    for (struct cdn_proc_sink *s = LIST_FIRST(&p->sinks), *next; s; s = next) {
        next = LIST_NEXT(s, link); /* it may leave (a client too far behind) */
        s->output(s, stream, p->pty, d, len);
    }
    while (p->kept > PROC_RING && TAILQ_FIRST(&p->out) != c) { /* the oldest go: nobody is waited for */
        struct chunk *old = TAILQ_FIRST(&p->out);
        TAILQ_REMOVE(&p->out, old, link);
        p->kept -= sizeof *old + old->cap;
        free(old);
    }
    for (struct proc_client *f = LIST_FIRST(&p->clients), *next; f; f = next) {
        next = LIST_NEXT(f, link);
        if (!f->follow)
            continue;
        if (backlog(f->req) > FOLLOW_BEHIND)
            client_end(f); /* "cut": it comes back with since= for what it missed */
        else
            cdn_api_send_line(f->req, bytes_json(stream, pos, d, len, f->b64));
    }
}

/* The write's end: its watchers go; answered, unless its client left (req NULL). */
static void stdin_done(struct bproc *p)
{
    if (p->stdin_left)
        evbuffer_free(p->stdin_left);
    p->stdin_left = NULL;
    if (p->stdin_closed_ev)
        event_free(p->stdin_closed_ev);
    p->stdin_closed_ev = NULL;
}

static void stdin_answer(struct bproc *p)
{
    struct evhttp_request *req = p->stdin_req;
    p->stdin_req = NULL;
    stdin_done(p);
    if (!req)
        return;
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    if (conn)
        evhttp_connection_set_closecb(conn, NULL, NULL);
    cdn_api_reply_json(req, 200,
                       json_pack("{s:I, s:I, s:b}", "pid", (json_int_t) p->pid, "bytes",
                                 (json_int_t) p->stdin_bytes, "stdin_open", p->stdin_open));
}

static void ended(struct bproc *p)
{
    p->running = p->stdin_open = false;
    stdin_answer(p); /* what init had not passed on went with the process */
    p->ended_unix = now_unix();
    if (p->timer) {
        event_free(p->timer);
        p->timer = NULL;
    }
    while (!LIST_EMPTY(&p->clients))
        client_end(LIST_FIRST(&p->clients));
    sinks_end(p);
    if (p->forget)
        proc_free(p);
}

static void answer_start(struct bproc *p, int status, const char *code, const char *field, const char *msg)
{
    struct evhttp_request *req = p->start_req;
    p->start_req = NULL;
    if (!req)
        return;
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    if (conn)
        evhttp_connection_set_closecb(conn, NULL, NULL);
    if (status == 200)
        cdn_api_reply_json(req, 200, info_json(p));
    else
        cdn_api_reply_json(req, status, cdn_api_error_json(code, field, msg));
}

static void proc_frame(struct agent_req *r, uint16_t type, const uint8_t *d, uint32_t len)
{
    struct bproc *p = (struct bproc *) r;
    if (type == CDN_FRAME_STARTED && !p->started && len == 4) {
        p->started = true;
        p->pid = (uint32_t) d[0] | (uint32_t) d[1] << 8 | (uint32_t) d[2] << 16 | (uint32_t) d[3] << 24;
        struct cdn_proc_sink *s;
        LIST_FOREACH(s, &p->sinks, link)
        s->start(s, p->pid);
        return answer_start(p, 200, NULL, NULL, NULL);
    }
    if (!p->started && type != CDN_FRAME_ERROR && type != 0) {
        /* An init from before STARTED (a sandbox adopted across an upgrade): no pid to address it by. */
        int32_t sig = SIGKILL;
        (void) cdn_agent_conn_send(&p->box->agent, CDN_FRAME_SIGNAL, 0, p->areq.channel, &sig, sizeof sig);
        answer_start(p, 501, "agent_too_old", "background",
                     "this sandbox's agent predates background processes: recreate the sandbox");
        p->started = true;
        p->forget = true;
    }
    if (type == CDN_FRAME_WINDOW) { /* init took the last piece of stdin: the next may go */
        uint32_t room;
        if (cdn_window_decode(d, len, &room) == 0 && p->stdin_left)
            stdin_next(p);
        return;
    }
    if ((type == CDN_FRAME_STDOUT || type == CDN_FRAME_STDERR || type == CDN_FRAME_STARTED) && p->running) {
        if (len && type != CDN_FRAME_STARTED)
            keep_output(p, type == CDN_FRAME_STDOUT ? 1 : 2, d, len);
        return;
    }
    struct cdn_exit_msg m;
    int e;
    const char *msg;
    if (type == CDN_FRAME_EXIT && cdn_exit_decode(d, len, &m) == 0) {
        p->signal = m.signal;
        p->exit_code = p->timed_out ? 124 : m.signal ? 128 + m.signal : m.exit_code;
        double ms = (double) (now_unix() - p->started_unix) * 1e3;
        p->box->execs++;
        json_t *ev = json_pack("{s:s, s:O?, s:i, s:f, s:b, s:b, s:I}", "cmd", p->cmd, "argv", p->argv,
                               "exit_code", p->exit_code, "duration_ms", ms, "timed_out", p->timed_out,
                               "background", 1, "pid", (json_int_t) p->pid);
        if (ev && p->argv_trunc)
            json_object_set_new(ev, "argv_truncated", json_true());
        cdn_box_event(p->box, "exec", ev);
        cdn_box_check_limits(p->box);
    } else if (type == CDN_FRAME_ERROR && cdn_errmsg_decode(d, len, &e, &msg) == 0) {
        (void) snprintf(p->end_why, sizeof p->end_why, "%.95s", msg);
        if (!p->started) { /* it never ran: the request says so, and no record is kept */
            p->forget = true;
            answer_start(p, 400, "exec_failed",
                         strncmp(msg, "user: ", 6) == 0                ? "user"
                         : strncmp(msg, "working directory ", 18) == 0 ? "cwd"
                                                                       : "cmd",
                         msg);
        }
    } else {
        (void) snprintf(p->end_why, sizeof p->end_why, "the sandbox ended");
        if (!p->started) {
            p->forget = true;
            answer_start(p, 500, "sandbox_gone", NULL, "the sandbox ended before the process started");
        }
    }
    ended(p);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct bproc *p = arg;
    p->timed_out = true;
    int32_t sig = SIGKILL;
    (void) cdn_agent_conn_send(&p->box->agent, CDN_FRAME_SIGNAL, 0, p->areq.channel, &sig, sizeof sig);
}

static void start_client_gone(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    struct bproc *p = arg;
    /* The process goes on: it is the point of it. Only its answer has nobody to go to. */
    if (p->start_req && !evhttp_request_get_connection(p->start_req))
        evhttp_send_reply_end(p->start_req);
    p->start_req = NULL;
}

/* Room for one more record: the oldest that ended goes, if all 64 are not running. */
static bool make_room(struct box *b)
{
    if (b->n_procs < PROC_MAX)
        return true;
    struct bproc *p, *oldest = NULL;
    LIST_FOREACH(p, &b->procs, link)
    if (!p->running && !p->forget)
        oldest = p; /* inserted at the head: the last one seen is the oldest */
    if (oldest)
        proc_free(oldest);
    return b->n_procs < PROC_MAX;
}

/* A background process of a, sent to init (its STARTED comes later), or NULL with *status, *code,
 * *field and msg saying why not. */
static struct bproc *spawn(struct box *b, struct exec_args *a, int *status, const char **code,
                           const char **field, char *msg, size_t size)
{
    *field = NULL;
    if (!make_room(b)) {
        *status = 429, *code = "too_many_processes", *field = "background";
        (void) snprintf(msg, size, "%d background processes run in this sandbox: end or delete one first",
                        PROC_MAX);
        return NULL;
    }
    struct bproc *p = calloc(1, sizeof *p);
    if (!p) {
        *status = 500, *code = "internal";
        (void) snprintf(msg, size, "out of memory");
        return NULL;
    }
    p->areq.on_frame = proc_frame;
    p->box = b;
    p->running = true;
    p->pty = a->pty;
    p->stdin_open = a->keep_stdin || a->pty;
    p->started_unix = now_unix();
    TAILQ_INIT(&p->out);
    LIST_INIT(&p->clients);
    LIST_INIT(&p->sinks);
    (void) snprintf(p->cmd, sizeof p->cmd, "%s", a->argv.v[0]);
    p->argv = cdn_api_argv_json(a->argv.v, &p->argv_trunc);
    char line[4096]; /* the whole command line, for the monitor's exec rules, as a foreground exec's */
    size_t n = 0;
    for (size_t i = 0; a->argv.v[i] && n < sizeof line - 1; i++)
        n += (size_t) snprintf(line + n, sizeof line - n, "%s%s", i ? " " : "", a->argv.v[i]);
    json_decref(cdn_monitor_match(b, 1, line, n < sizeof line ? n : sizeof line - 1));
    uint32_t flags = CDN_EXEC_PID | (p->stdin_open ? CDN_EXEC_STDIN : 0);
    int r = cdn_api_exec_send(b, &p->areq, a, false, flags);
    if (r < 0) {
        json_decref(p->argv);
        free(p);
        *status = r == -ENOBUFS ? 400 : 500, *code = r == -ENOBUFS ? "invalid_argument" : "internal";
        *field = r == -ENOBUFS ? "cmd" : NULL;
        (void) snprintf(msg, size, "%s",
                        r == -ENOBUFS ? "cmd and env exceed 1 MiB" : "cannot reach the sandbox's agent");
        return NULL;
    }
    LIST_INSERT_HEAD(&b->procs, p, link);
    b->n_procs++;
    cdn_daemon->execs_total++;
    if (a->timeout_s > 0 && (p->timer = evtimer_new(cdn_daemon->base, on_timeout, p))) {
        struct timeval tv = {.tv_sec = (time_t) a->timeout_s,
                             .tv_usec =
                                 (suseconds_t) ((a->timeout_s - (double) (time_t) a->timeout_s) * 1e6)};
        evtimer_add(p->timer, &tv);
    }
    return p;
}

void cdn_api_proc_start(struct evhttp_request *req, struct box *b, struct exec_args *a)
{
    int status;
    const char *code, *field;
    char msg[160];
    struct bproc *p = spawn(b, a, &status, &code, &field, msg, sizeof msg);
    if (!p)
        return cdn_api_reply_error(req, status, code, field, "%s", msg);
    p->start_req = req;
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), start_client_gone, p);
}

/* ---- the same records for E2B's process service (e2b-process.c) ---- */

int cdn_api_proc_spawn(struct box *b, struct exec_args *a, struct cdn_proc_sink *s, char *msg, size_t size)
{
    int status;
    const char *code, *field;
    struct bproc *p = spawn(b, a, &status, &code, &field, msg, size);
    if (!p)
        return status == 429 ? -EAGAIN : status == 400 ? -EINVAL : -EIO;
    s->p = p;
    LIST_INSERT_HEAD(&p->sinks, s, link);
    return 0;
}

static struct bproc *running_proc(struct box *b, uint32_t pid)
{
    struct bproc *p;
    LIST_FOREACH(p, &b->procs, link)
    if (p->pid == pid && p->started && p->running && !p->forget)
        return p;
    return NULL;
}

int cdn_api_proc_attach(struct box *b, uint32_t pid, struct cdn_proc_sink *s)
{
    struct bproc *p = running_proc(b, pid);
    if (!p)
        return -ENOENT;
    unsigned n = 0;
    struct cdn_proc_sink *o;
    LIST_FOREACH(o, &p->sinks, link)
    n++;
    if (n >= SINKS_MAX) /* each may be STREAM_BEHIND behind: bounded */
        return -EMFILE;
    s->p = p;
    LIST_INSERT_HEAD(&p->sinks, s, link);
    s->start(s, p->pid);
    return 0;
}

void cdn_api_proc_detach(struct cdn_proc_sink *s)
{
    if (s->p)
        LIST_REMOVE(s, link);
    s->p = NULL;
}

int cdn_api_proc_sink_signal(struct cdn_proc_sink *s, int sig)
{
    int32_t v = sig;
    if (!s->p || !s->p->running)
        return -ESRCH;
    return cdn_agent_conn_send(&s->p->box->agent, CDN_FRAME_SIGNAL, 0, s->p->areq.channel, &v, sizeof v);
}

int cdn_api_proc_signal(struct box *b, uint32_t pid, int sig)
{
    struct bproc *p = running_proc(b, pid);
    int32_t s = sig;
    if (!p)
        return -ENOENT;
    return cdn_agent_conn_send(&b->agent, CDN_FRAME_SIGNAL, 0, p->areq.channel, &s, sizeof s);
}

int cdn_api_proc_input(struct box *b, uint32_t pid, const uint8_t *d, size_t n, bool eof)
{
    struct bproc *p = running_proc(b, pid);
    if (!p)
        return -ENOENT;
    if (!p->stdin_open)
        return -EPIPE;
    if (p->stdin_req) /* a paced write of the /v1 API's is under way: one writer at a time */
        return -EBUSY;
    /* Not paced as /v1's writes are (one piece per WINDOW): bounded by what waits for init instead,
     * so that a stalled init never makes cordond hold more. */
    struct bufferevent *bev = b->agent.bev;
    if (n > INPUT_MAX || (bev && evbuffer_get_length(bufferevent_get_output(bev)) > INPUT_MAX))
        return -EAGAIN;
    for (size_t off = 0; off < n;) {
        size_t k = n - off < STDIN_PIECE ? n - off : STDIN_PIECE;
        int r = cdn_agent_conn_send(&b->agent, CDN_FRAME_STDIN, 0, p->areq.channel, d + off, (uint32_t) k);
        if (r < 0)
            return r;
        off += k;
    }
    if (eof) {
        p->stdin_open = false;
        return cdn_agent_conn_send(&b->agent, CDN_FRAME_STDIN, 0, p->areq.channel, NULL, 0);
    }
    return 0;
}

int cdn_api_proc_resize(struct box *b, uint32_t pid, uint16_t rows, uint16_t cols)
{
    struct bproc *p = running_proc(b, pid);
    if (!p)
        return -ENOENT;
    if (!p->pty)
        return -ENOTTY;
    uint16_t rc[2] = {rows, cols};
    return cdn_agent_conn_send(&b->agent, CDN_FRAME_RESIZE, 0, p->areq.channel, rc, sizeof rc);
}

json_t *cdn_api_proc_list(struct box *b)
{
    json_t *list = json_array();
    struct bproc *p;
    LIST_FOREACH(p, &b->procs, link)
    if (list && !p->forget && p->started && p->running)
        json_array_insert_new(
            list, 0,
            json_pack("{s:I, s:O?, s:b}", "pid", (json_int_t) p->pid, "argv", p->argv, "pty", p->pty));
    return list;
}

void cdn_api_procs_free(struct box *b)
{
    while (!LIST_EMPTY(&b->procs)) {
        struct bproc *p = LIST_FIRST(&b->procs);
        cdn_agent_conn_remove(&b->agent, &p->areq);
        answer_start(p, 500, "sandbox_gone", NULL, "the sandbox ended before the process started");
        proc_free(p);
    }
}

/* ---------------------------------------------------------------- the routes */

static void client_gone(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    struct proc_client *c = arg;
    struct evhttp_request *req = c->req;
    client_free(c);
    if (!evhttp_request_get_connection(req)) /* detached from the dying connection: ending it frees it */
        evhttp_send_reply_end(req);
}

static void waiter_closed(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct proc_client *c = arg;
    struct evhttp_connection *conn = evhttp_request_get_connection(c->req);
    if (conn)
        evhttp_connection_free(conn); /* its close callback (client_gone) frees c; evhttp the request */
    else
        client_gone(NULL, c);
}

static void wait_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    client_end(arg); /* the info as it is: still running */
}

static int query_flag(struct evkeyvalq *q, const char *name, bool *ret, struct evhttp_request *req)
{
    const char *v = evhttp_find_header(q, name);
    if (!v)
        return 0;
    if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0 || strcmp(v, "false") == 0 || strcmp(v, "0") == 0) {
        *ret = v[0] == 't' || v[0] == '1';
        return 0;
    }
    cdn_api_reply_error(req, 400, "invalid_query", name, "%s: expected true or false", name);
    return -EINVAL;
}

static void route_output(struct evhttp_request *req, struct bproc *p, struct evkeyvalq *q, bool wait)
{
    bool follow = false, b64 = false;
    const char *enc = evhttp_find_header(q, "encoding"), *since_s = evhttp_find_header(q, "since"),
               *tmo = evhttp_find_header(q, "timeout_s");
    char *end = NULL, *tend = NULL;
    uint64_t since = since_s ? strtoull(since_s, &end, 10) : 0;
    double timeout = tmo ? strtod(tmo, &tend) : 0;
    if (query_flag(q, "follow", &follow, req) < 0)
        return;
    if (enc && strcmp(enc, "base64") != 0 && strcmp(enc, "utf8") != 0)
        return cdn_api_reply_error(req, 400, "invalid_query", "encoding", "encoding: utf8 or base64");
    if (since_s && (!end || *end || since_s[0] == '-'))
        return cdn_api_reply_error(req, 400, "invalid_query", "since", "since: a position (output_next)");
    if (tmo && (!tend || *tend || !(timeout > 0 && timeout <= 86400)))
        return cdn_api_reply_error(req, 400, "invalid_query", "timeout_s",
                                   "timeout_s: seconds, > 0, at most 86400");
    b64 = enc && enc[0] == 'b';
    if (wait && !p->running)
        return cdn_api_reply_json(req, 200, info_json(p));
    if (!wait && !follow) {
        json_t *o = info_json(p), *out = json_array();
        const struct chunk *c;
        uint64_t first = TAILQ_EMPTY(&p->out) ? p->next_pos : TAILQ_FIRST(&p->out)->pos;
        TAILQ_FOREACH(c, &p->out, link)
        if (c->pos + c->len > since)
            json_array_append_new(out, chunk_json(c, b64, since));
        json_object_set_new(o, "output", out);
        json_object_set_new(o, "dropped", json_boolean(since < first));
        return cdn_api_reply_json(req, 200, o);
    }
    struct proc_client *cl = calloc(1, sizeof *cl);
    if (!cl)
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    *cl = (struct proc_client){.p = p, .req = req, .follow = !wait, .b64 = b64};
    if (!wait) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/x-ndjson");
        evhttp_send_reply_start(req, 200, "OK");
        cdn_api_stream_timeout(req);
        uint64_t first = TAILQ_EMPTY(&p->out) ? p->next_pos : TAILQ_FIRST(&p->out)->pos;
        if (since < first)
            cdn_api_send_line(req, json_pack("{s:s, s:I, s:I}", "type", "dropped", "from", (json_int_t) since,
                                             "to", (json_int_t) first));
        const struct chunk *c;
        TAILQ_FOREACH(c, &p->out, link)
        if (c->pos + c->len > since)
            cdn_api_send_line(req, chunk_json(c, b64, since));
    }
    LIST_INSERT_HEAD(&p->clients, cl, link);
    if (!p->running)
        return client_end(cl); /* its whole output, then its exit */
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), client_gone, cl);
    /* evhttp does not read a connection whose request waits for its answer: only the socket says that
     * a waiter's client hung up. */
    struct bufferevent *bev = evhttp_connection_get_bufferevent(evhttp_request_get_connection(req));
    if (wait && bev &&
        (cl->closed_ev = event_new(cdn_daemon->base, bufferevent_getfd(bev), EV_CLOSED, waiter_closed, cl)))
        (void) event_add(cl->closed_ev, NULL);
    if (wait && timeout > 0 && (cl->timeout = evtimer_new(cdn_daemon->base, wait_timeout, cl))) {
        struct timeval tv = {.tv_sec = (time_t) timeout,
                             .tv_usec = (suseconds_t) ((timeout - (double) (time_t) timeout) * 1e6)};
        evtimer_add(cl->timeout, &tv);
    }
}

static void stdin_client_gone(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    struct bproc *p = arg;
    /* Detached from the dying connection, ending it frees it; still on it, the connection's free
     * does. What of it did not go yet is dropped: the next writer may write. */
    if (p->stdin_req && !evhttp_request_get_connection(p->stdin_req))
        evhttp_send_reply_end(p->stdin_req);
    p->stdin_req = NULL;
    stdin_done(p);
}

static void stdin_client_closed(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct bproc *p = arg;
    struct evhttp_connection *conn = p->stdin_req ? evhttp_request_get_connection(p->stdin_req) : NULL;
    if (conn)
        evhttp_connection_free(conn); /* its close callback (stdin_client_gone) ends the write */
    else
        stdin_client_gone(NULL, p);
}

/* The next piece of the write in progress (CDN_FRAME_SYNC: init answers WINDOW once it has passed all
 * but CDN_STDIN_LOW of its input on), or its end: stdin closed if asked, and the answer. */
static void stdin_next(struct bproc *p)
{
    struct evbuffer *left = p->stdin_left;
    size_t k = evbuffer_get_length(left) < STDIN_PIECE ? evbuffer_get_length(left) : STDIN_PIECE;
    int r = 0;
    if (k) {
        r = cdn_agent_conn_send(&p->box->agent, CDN_FRAME_STDIN, CDN_FRAME_SYNC, p->areq.channel,
                                evbuffer_pullup(left, (ev_ssize_t) k), (uint32_t) k);
        (void) evbuffer_drain(left, k);
        if (r >= 0)
            return;
    }
    if (r >= 0 && p->stdin_eof) {
        (void) cdn_agent_conn_send(&p->box->agent, CDN_FRAME_STDIN, 0, p->areq.channel, NULL, 0);
        p->stdin_open = false;
    }
    stdin_answer(p);
}

/* The body goes to its stdin; the answer comes once init has passed it on but CDN_STDIN_LOW (its
 * WINDOW to the last piece, CDN_FRAME_SYNC), so a writer never runs ahead of a slow reader by more:
 * one write at a time per process. */
static void route_stdin(struct evhttp_request *req, struct bproc *p, struct evkeyvalq *q)
{
    bool eof = false;
    if (query_flag(q, "eof", &eof, req) < 0)
        return;
    if (!p->running || !p->stdin_open)
        return cdn_api_reply_error(req, 409, p->running ? "stdin_closed" : "process_ended", "stdin",
                                   p->running ? "its stdin is closed (start it with keep_stdin or a pty)"
                                              : "the process has ended");
    if (p->stdin_req)
        return cdn_api_reply_error(req, 409, "stdin_busy", "stdin",
                                   "another write to its stdin waits for the process to read: one at a time");
    struct evbuffer *body = evhttp_request_get_input_buffer(req);
    if (!(p->stdin_left = evbuffer_new()))
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    p->stdin_bytes = evbuffer_get_length(body);
    (void) evbuffer_add_buffer(p->stdin_left, body);
    p->stdin_eof = eof;
    p->stdin_req = req;
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    evhttp_connection_set_closecb(conn, stdin_client_gone, p);
    /* evhttp does not read a connection whose request waits for its answer: only the socket says
     * that the writer hung up. */
    struct bufferevent *bev = evhttp_connection_get_bufferevent(conn);
    if (bev && (p->stdin_closed_ev =
                    event_new(cdn_daemon->base, bufferevent_getfd(bev), EV_CLOSED, stdin_client_closed, p)))
        (void) event_add(p->stdin_closed_ev, NULL);
    stdin_next(p);
}

static int signal_of(json_t *v)
{
    static const struct {
        const char *name;
        int sig;
    } names[] = {{"HUP", SIGHUP},    {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
                 {"USR1", SIGUSR1},  {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"CONT", SIGCONT},
                 {"STOP", SIGSTOP},  {"TSTP", SIGTSTP}, {"ALRM", SIGALRM}, {"PIPE", SIGPIPE},
                 {"WINCH", SIGWINCH}};
    if (json_is_integer(v))
        return json_integer_value(v) >= 1 && json_integer_value(v) <= 64 ? (int) json_integer_value(v) : -1;
    const char *s = json_string_value(v);
    if (s && strncmp(s, "SIG", 3) == 0)
        s += 3;
    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0)
            return names[i].sig;
    return -1;
}

static void route_control(struct evhttp_request *req, struct bproc *p, bool resize)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    _cleanup_json_ json_t *o =
        json_loadb((const char *) evbuffer_pullup(in, -1), evbuffer_get_length(in), 0, NULL);
    json_t *rows = json_object_get(o, "rows"), *cols = json_object_get(o, "cols");
    int sig = resize ? 0 : signal_of(json_object_get(o, "signal"));
    if (resize &&
        (!json_is_integer(rows) || !json_is_integer(cols) || json_integer_value(rows) < 1 ||
         json_integer_value(rows) > 999 || json_integer_value(cols) < 1 || json_integer_value(cols) > 999))
        return cdn_api_reply_error(req, 400, "invalid_argument", "rows",
                                   "body: expected {\"rows\": 1-999, \"cols\": 1-999}");
    if (sig < 0)
        return cdn_api_reply_error(req, 400, "invalid_argument", "signal",
                                   "body: expected {\"signal\": 1-64 or a name such as \"SIGTERM\"}");
    if (!p->running)
        return cdn_api_reply_error(req, 409, "process_ended", NULL, "the process has ended");
    if (resize && !p->pty)
        return cdn_api_reply_error(req, 409, "no_terminal", "pty", "the process has no terminal");
    int r;
    if (resize) {
        uint16_t rc[2] = {(uint16_t) json_integer_value(rows), (uint16_t) json_integer_value(cols)};
        r = cdn_agent_conn_send(&p->box->agent, CDN_FRAME_RESIZE, 0, p->areq.channel, rc, sizeof rc);
    } else {
        int32_t s = sig;
        r = cdn_agent_conn_send(&p->box->agent, CDN_FRAME_SIGNAL, 0, p->areq.channel, &s, sizeof s);
    }
    if (r < 0)
        return cdn_api_reply_error(req, 500, "internal", NULL, "cannot reach the sandbox's agent");
    cdn_api_reply_json(req, 200, info_json(p));
}

void cdn_api_procs(struct evhttp_request *req, struct box *b, const char *sub)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    if (!*sub) {
        if (m != EVHTTP_REQ_GET)
            return cdn_api_reply_error(req, 405, "method_not_allowed", NULL, "…/processes takes GET");
        json_t *list = json_array();
        struct bproc *p;
        LIST_FOREACH(p, &b->procs, link)
        if (!p->forget && p->started)
            json_array_insert_new(list, 0, info_json(p)); /* oldest first */
        return cdn_api_reply_json(req, 200, json_pack("{s:s, s:o}", "id", b->sb.id, "processes", list));
    }
    char *end = NULL;
    unsigned long pid = strtoul(sub, &end, 10);
    const char *action = end && *end == '/' ? end + 1 : "";
    if (!end || end == sub || (*end && *end != '/') || pid == 0 || pid > UINT32_MAX)
        return cdn_api_reply_error(req, 404, "not_found", NULL, "no route for …/processes/%.64s", sub);
    struct bproc *p;
    LIST_FOREACH(p, &b->procs, link)
    if (p->pid == pid && p->started && !p->forget)
        break;
    if (!p)
        return cdn_api_reply_error(req, 404, "process_not_found", "pid",
                                   "no background process %lu in sandbox %s (or its record was deleted)", pid,
                                   b->sb.id);
    struct evkeyvalq q;
    TAILQ_INIT(&q);
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    if (query && evhttp_parse_query_str(query, &q) < 0)
        return cdn_api_reply_error(req, 400, "invalid_query", NULL, "the query string does not parse");
    static const struct {
        const char *action;
        enum evhttp_cmd_type m;
    } routes[] = {{"", EVHTTP_REQ_GET},       {"", EVHTTP_REQ_DELETE},    {"output", EVHTTP_REQ_GET},
                  {"wait", EVHTTP_REQ_GET},   {"stdin", EVHTTP_REQ_POST}, {"signal", EVHTTP_REQ_POST},
                  {"resize", EVHTTP_REQ_POST}};
    size_t i = 0;
    bool known = false;
    for (; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(action, routes[i].action) == 0 && (known = true) && m == routes[i].m)
            break;
    if (i == sizeof routes / sizeof routes[0]) {
        evhttp_clear_headers(&q);
        return cdn_api_reply_error(req, known ? 405 : 404, known ? "method_not_allowed" : "not_found", NULL,
                                   "no route for …/processes/%.64s with this method", sub);
    }
    if (i == 0)
        cdn_api_reply_json(req, 200, info_json(p));
    else if (i == 1) { /* ended: forgotten now; running: killed, forgotten at its end */
        json_t *o = info_json(p);
        if (p->running) {
            int32_t sig = SIGKILL;
            (void) cdn_agent_conn_send(&b->agent, CDN_FRAME_SIGNAL, 0, p->areq.channel, &sig, sizeof sig);
            p->forget = true;
        } else
            proc_free(p);
        cdn_api_reply_json(req, 200, o);
    } else if (i == 2 || i == 3)
        route_output(req, p, &q, i == 3);
    else if (i == 4)
        route_stdin(req, p, &q);
    else
        route_control(req, p, i == 6);
    evhttp_clear_headers(&q);
}
