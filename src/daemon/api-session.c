/* cordond: shell sessions — …/sessions[/{sid}[/run|interrupt]] (docs/cordond.md).
 * Runs in the loop.
 *
 * A session is one shell that stays alive between commands, so that `cd`,
 * `export` and functions carry over. It runs as a command of the sandbox
 * with a control channel (CDN_EXEC_CONTROL, init-exec.c): the shell reads
 * each command line from its fd 3 and writes "B seq" before running it and
 * "E seq status" after, to its fd 4. init sends what the shell wrote to fd 4
 * only once the output written before it has gone, and acknowledges each
 * record on fd 3; the shell waits for the acknowledgement of "B" before it
 * runs the command. So the output between B and E is the command's, with no
 * prompt to look for and nothing to find in the output itself. Output
 * outside a command (a job left in the background) is counted and dropped.
 *
 * A command is written as one line: every byte but [A-Za-z0-9,./_-] as
 * \0ooo, which the shell's printf %b turns back. After each command the shell
 * saves its state (exported variables, functions, aliases, the working
 * directory) in a file of its own in the sandbox: when a command cannot be
 * interrupted (SIGINT to the shell's process group, then, after
 * INTERRUPT_GRACE_S, SIGKILL to its whole tree) or the shell exits (`exit 3`),
 * a new shell starts from that file and the session goes on.
 *
 * Trusted: the operator's requests. Not trusted: the shell and everything it
 * runs (the sandbox's): a command may write records itself (through
 * /proc/<shell>/fd), which falsifies its session's results, as an alias it
 * defines can, and nothing else; records are parsed strictly, bounded, and
 * only the one expected is taken. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "api.h"
#include "core/json-util.h"
#include "exec-args.h"

#define SESSION_MAX       16 /* per sandbox */
#define INTERRUPT_GRACE_S 2  /* after SIGINT, before the shell is killed and started again */
#define RECORD_MAX        64 /* "E <seq> <status>" and no more */

/* The shell's loop. $1: its state file; $2: "fresh" (a new session) or "restore" (started again).
 * bash and POSIX sh (dash) alike, with no fork per command in either. The command is written to a
 * file of its own and sourced (`.`), in the shell itself: what it changes stays, `declare` is as
 * global as on a prompt, and SIGINT's trap returns from it (130), which ends the whole command line
 * and leaves the shell as it was. Where that file cannot be written (no writable /tmp), eval runs
 * it; SIGINT then ends its current step only, and a command that goes on is killed (the grace). */
static const char bootstrap[] =
    "trap '' TSTP TTIN TTOU; trap '[ -z \"$__cdn_busy\" ] || return 130' INT\n"
    "__cdn_st=$1; __cdn_busy=\n"
    "if [ \"$2\" = restore ] && [ -n \"$3\" ]; then cd -- \"$3\" 2>/dev/null; fi\n"
    "if [ \"$2\" = restore ] && [ -r \"$__cdn_st\" ]; then . \"$__cdn_st\" >/dev/null 2>&1; fi\n"
    "if [ -n \"${__cdn_cwd+x}\" ]; then cd -- \"$__cdn_cwd\" 2>/dev/null; unset __cdn_cwd; fi\n"
    "__cdn_um=$(umask); umask 077\n"
    /* Emptied for a new session; a restored one keeps its state until its next command saves it. */
    "if [ \"$2\" = fresh ]; then : >\"$__cdn_st\"; fi 2>/dev/null\n"
    "if { : >>\"$__cdn_st\" && : >\"$__cdn_st.in\" && : >\"$__cdn_st.cmd\"; } 2>/dev/null; then __cdn_f=1; "
    "else __cdn_f=; fi\n"
    "umask \"$__cdn_um\"\n"
    "while IFS= read -r __cdn_l <&3; do\n"
    "  if [ -z \"$__cdn_l\" ]; then continue; fi\n"
    "  __cdn_seq=${__cdn_l%% *}; __cdn_l=${__cdn_l#* }\n"
    "  __cdn_in=${__cdn_l%% *}; __cdn_l=${__cdn_l#* }\n"
    "  if [ -n \"$__cdn_f\" ]; then printf %b \"$__cdn_l\" >\"$__cdn_st.cmd\"\n"
    "  elif [ -n \"$BASH_VERSION\" ]; then printf -v __cdn_c %b \"$__cdn_l\"\n"
    "  else __cdn_c=$(printf %bx \"$__cdn_l\"); __cdn_c=${__cdn_c%x}; fi\n"
    "  __cdn_i=/dev/null\n"
    "  if [ \"$__cdn_in\" != - ]; then __cdn_i=$__cdn_st.in; printf %b \"${__cdn_in#=}\" >\"$__cdn_i\"; fi\n"
    "  printf 'B %s\\n' \"$__cdn_seq\" >&4; IFS= read -r __cdn_a <&3\n"
    "  __cdn_busy=1\n"
    "  if [ -n \"$__cdn_f\" ]; then . \"$__cdn_st.cmd\" 3<&- 4>&- <\"$__cdn_i\"\n"
    "  else eval \"$__cdn_c\" 3<&- 4>&- <\"$__cdn_i\"; fi\n"
    "  __cdn_rc=$?; __cdn_busy=\n"
    /* Set again: bash leaves a trap that returned from a command marked as running, and runs it no
     * more (the next interrupt of a loop in the shell would not end it). */
    "  trap '[ -z \"$__cdn_busy\" ] || return 130' INT\n"
    "  printf 'E %s %d\\n' \"$__cdn_seq\" \"$__cdn_rc\" >&4; IFS= read -r __cdn_a <&3\n"
    "  if [ -n \"$BASH_VERSION\" ]; then\n"
    "    { declare -px; declare -f; alias -p; printf 'cd -- %q\\n' \"$PWD\"; } >\"$__cdn_st\" 2>/dev/null\n"
    "  else (export __cdn_cwd=\"$PWD\"; export -p) >\"$__cdn_st\" 2>/dev/null; fi\n"
    "done\n";

struct run {
    struct session *s;
    struct evhttp_request *req;
    uint64_t seq;
    bool begun, b64, timed_out, interrupted, restarted, ended, killing, sigint_sent;
    struct evbuffer *out, *err;
    bool out_trunc, err_trunc;
    struct timespec t0;
    struct event *timer, *grace, *closed_ev;
};

struct session {
    struct agent_req areq; /* first: the agent connection hands it back */
    struct box *box;
    char id[16];
    char state[64];         /* its state file in the sandbox */
    struct exec_args shell; /* argv: the shell's (with the bootstrap); cwd, env, user */
    bool default_shell;     /* none was asked for: bash, else sh */
    bool alive;             /* its shell's channel is open */
    bool started;           /* STARTED came for this shell */
    struct evhttp_request *open_req;
    uint32_t pid;
    uint64_t seq, stray;
    unsigned restarts;
    char rec[RECORD_MAX + 1];
    size_t rec_len;
    bool rec_long;
    struct run *run;
    LIST_ENTRY(session) link;
};

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) (t.tv_sec - t0->tv_sec) * 1e3 + (double) (t.tv_nsec - t0->tv_nsec) / 1e6;
}

static json_t *info_json(const struct session *s)
{
    json_t *o = json_pack("{s:s, s:s, s:b, s:b, s:I, s:I}", "id", s->id, "shell", s->shell.argv.v[0], "alive",
                          s->alive, "busy", s->run != NULL, "commands", (json_int_t) s->seq, "restarts",
                          (json_int_t) s->restarts);
    if (o)
        json_object_set_new(o, "pid", s->alive && s->started ? json_integer(s->pid) : json_null());
    return o;
}

static json_t *bytes_json(bool b64, struct evbuffer *b)
{
    return cdn_api_bytes_json(evbuffer_pullup(b, -1), evbuffer_get_length(b), b64);
}

static void run_free(struct run *r)
{
    struct evhttp_connection *conn = r->req ? evhttp_request_get_connection(r->req) : NULL;
    if (conn)
        evhttp_connection_set_closecb(conn, NULL, NULL);
    r->req = NULL;
    if (r->timer)
        event_free(r->timer);
    if (r->grace)
        event_free(r->grace);
    if (r->closed_ev)
        event_free(r->closed_ev);
    if (r->out)
        evbuffer_free(r->out);
    if (r->err)
        evbuffer_free(r->err);
    r->s->run = NULL;
    free(r);
}

/* The run's answer: its result (err_code NULL), or the error err_code (status, why); then it is gone. */
static void run_answer(struct run *r, int code, int status, const char *err_code, const char *why)
{
    struct session *s = r->s;
    double ms = ms_since(&r->t0);
    if (r->timed_out)
        code = 124;
    json_t *res;
    if (err_code) {
        res = cdn_api_error_json(err_code, NULL, why);
    } else {
        status = 200;
        res = json_pack("{s:s, s:i, s:o, s:o, s:b, s:b, s:b, s:b, s:f}", "session", s->id, "exit_code", code,
                        r->b64 ? "stdout_b64" : "stdout", bytes_json(r->b64, r->out),
                        r->b64 ? "stderr_b64" : "stderr", bytes_json(r->b64, r->err), "timed_out",
                        r->timed_out, "interrupted", r->interrupted, "restarted", r->restarted,
                        "session_ended", r->ended, "duration_ms", ms);
        if (res && (r->out_trunc || r->err_trunc))
            json_object_set_new(res, "truncated", json_true());
        s->box->execs++;
        json_t *ev = json_pack("{s:s, s:i, s:f, s:b, s:b, s:I}", "session", s->id, "exit_code", code,
                               "duration_ms", ms, "timed_out", r->timed_out, "interrupted", r->interrupted,
                               "seq", (json_int_t) r->seq);
        cdn_box_event(s->box, "session_run", ev);
        cdn_box_touch(s->box);
    }
    struct box *b = s->box;
    struct evhttp_request *req = r->req;
    run_free(r);
    if (req && evhttp_request_get_connection(req))
        cdn_api_reply_json(req, status, res);
    else {
        json_decref(res);
        if (req)
            evhttp_send_reply_end(req); /* detached from a dead connection: this frees it */
    }
    /* Last, with the run gone and answered: in kill mode a limit hit ends the sandbox now, and with
     * it this session's channel (shell_ended, sessions_free). */
    if (!err_code)
        cdn_box_check_limits(b);
}

static int start_shell(struct session *s, bool fresh);

static void send_signal(struct session *s, int32_t sig)
{
    if (s->alive)
        (void) cdn_agent_conn_send(&s->box->agent, CDN_FRAME_SIGNAL, 0, s->areq.channel, &sig, sizeof sig);
}

static void on_grace(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct run *r = arg;
    /* SIGINT did not end it (a loop in the shell itself, a command that ignores it): the shell and
     * everything below it go; a new shell starts from the state saved after the last command. */
    r->killing = true;
    send_signal(r->s, SIGKILL);
}

/* SIGINT to the shell's process group (the shell traps it and goes on; its command is interrupted),
 * then SIGKILL for the whole tree if the command has not ended within the grace. */
static void interrupt(struct run *r)
{
    r->interrupted = true;
    /* Before "B" the shell is still reading the command's line, which SIGINT would cut: record()
     * sends it once the command began. The grace runs from now either way. */
    if (r->begun && !r->sigint_sent) {
        r->sigint_sent = true;
        send_signal(r->s, SIGINT);
    }
    if (!r->grace && (r->grace = evtimer_new(cdn_daemon->base, on_grace, r))) {
        struct timeval tv = {.tv_sec = INTERRUPT_GRACE_S};
        evtimer_add(r->grace, &tv);
    }
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct run *r = arg;
    r->timed_out = true;
    interrupt(r);
}

static void run_client_gone(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    struct run *r = arg;
    /* Nobody waits for the command: it is interrupted, the session stays. */
    if (r->closed_ev) {
        event_free(r->closed_ev);
        r->closed_ev = NULL;
    }
    /* Detached from the dying connection, ending it frees it; still on it, the connection's free
     * (run_client_closed) frees it after this callback. Either way it is not ours any more. */
    if (r->req && !evhttp_request_get_connection(r->req))
        evhttp_send_reply_end(r->req);
    r->req = NULL;
    interrupt(r);
}

static void run_client_closed(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct run *r = arg;
    struct evhttp_connection *conn = r->req ? evhttp_request_get_connection(r->req) : NULL;
    if (conn)
        evhttp_connection_free(conn); /* its close callback (run_client_gone) interrupts the command */
    else
        run_client_gone(NULL, r);
}

/* One control record of the shell: "B <seq>" or "E <seq> <status>", for the run in progress only. */
static void record(struct session *s, const char *line)
{
    struct run *r = s->run;
    unsigned long long seq;
    int rc, n = 0;
    if (!r)
        return;
    if (line[0] == 'B' && sscanf(line, "B %llu%n", &seq, &n) == 1 && !line[n] && seq == r->seq && !r->begun) {
        r->begun = true;
        if (r->interrupted) /* asked for before it began */
            interrupt(r);
    } else if (line[0] == 'E' && sscanf(line, "E %llu %d%n", &seq, &rc, &n) == 2 && !line[n] &&
               seq == r->seq && r->begun)
        run_answer(r, rc, 0, NULL, NULL);
}

static void control_bytes(struct session *s, const uint8_t *p, uint32_t len)
{
    for (uint32_t i = 0; i < len; i++) {
        if (p[i] != '\n') {
            if (s->rec_len < RECORD_MAX)
                s->rec[s->rec_len++] = (char) p[i];
            else
                s->rec_long = true;
            continue;
        }
        s->rec[s->rec_len] = 0;
        if (!s->rec_long && strlen(s->rec) == s->rec_len)
            record(s, s->rec);
        s->rec_len = 0;
        s->rec_long = false;
    }
}

static void keep_output(struct run *r, bool err, const uint8_t *p, uint32_t len)
{
    struct evbuffer *b = err ? r->err : r->out;
    bool *trunc = err ? &r->err_trunc : &r->out_trunc;
    size_t have = evbuffer_get_length(b), cap = cdn_daemon->cfg.max_output_bytes;
    if (have + len > cap) {
        *trunc = true;
        len = have < cap ? (uint32_t) (cap - have) : 0;
    }
    if (len)
        evbuffer_add(b, p, len);
}

static void open_answer(struct session *s, int status, json_t *body)
{
    struct evhttp_request *req = s->open_req;
    s->open_req = NULL;
    struct evhttp_connection *conn = req ? evhttp_request_get_connection(req) : NULL;
    if (conn)
        evhttp_connection_set_closecb(conn, NULL, NULL);
    if (req)
        cdn_api_reply_json(req, status, body);
    else
        json_decref(body);
}

static void session_free(struct session *s)
{
    cdn_agent_conn_remove(&s->box->agent, &s->areq);
    if (s->run)
        run_answer(s->run, 0, 409, "session_deleted", "the session was deleted while its command ran");
    if (s->open_req)
        open_answer(s, 500,
                    cdn_api_error_json("sandbox_gone", NULL, "the sandbox ended before the shell started"));
    cdn_exec_args_free(&s->shell);
    LIST_REMOVE(s, link);
    s->box->n_sessions--;
    free(s);
}

/* The shell's channel ended (EXIT, ERROR, or the sandbox's end: type 0). */
static void shell_ended(struct session *s, uint16_t type, const uint8_t *p, uint32_t len)
{
    s->alive = false;
    int e = 0;
    const char *msg = "the sandbox ended";
    struct cdn_exit_msg m = {0};
    bool exited = type == CDN_FRAME_EXIT && cdn_exit_decode(p, len, &m) == 0;
    if (type == CDN_FRAME_ERROR && cdn_errmsg_decode(p, len, &e, &msg) < 0)
        msg = "the shell could not start";
    if (!s->started && type == CDN_FRAME_ERROR) {
        /* It did not start: the default shell falls back to sh; anything else is the request's error. */
        if (s->default_shell && e == ENOENT && strcmp(s->shell.argv.v[0], "bash") == 0) {
            free(s->shell.argv.v[0]);
            s->shell.argv.v[0] = strdup("sh");
            if (s->shell.argv.v[0] && start_shell(s, s->open_req != NULL) == 0)
                return;
        }
        if (s->open_req) {
            open_answer(s, 400,
                        cdn_api_error_json("exec_failed",
                                           strncmp(msg, "user: ", 6) == 0                ? "user"
                                           : strncmp(msg, "working directory ", 18) == 0 ? "cwd"
                                                                                         : "shell",
                                           msg));
            return session_free(s);
        }
    }
    if (s->open_req) {
        open_answer(s, 500, cdn_api_error_json("sandbox_gone", NULL, msg));
        return session_free(s);
    }
    struct run *r = s->run;
    if (!r)
        return; /* it starts again with the next command */
    if (type == 0)
        return run_answer(r, 0, 500, "sandbox_gone", "the sandbox ended while the command ran");
    if (type == CDN_FRAME_ERROR && !s->started)
        return run_answer(r, 0, 500, "shell_failed", msg); /* its new shell could not start */
    int code = exited ? (m.signal ? 128 + m.signal : m.exit_code) : 130;
    if (r->killing) { /* we ended it: a new shell takes the session on from its saved state */
        r->restarted = true;
        code = 130;
        if (start_shell(s, false) < 0)
            r->ended = true;
    } else
        r->ended = true; /* it exited (`exit 3`), or something in the sandbox ended it */
    run_answer(r, code, 0, NULL, NULL);
}

static void session_frame(struct agent_req *ar, uint16_t type, const uint8_t *p, uint32_t len)
{
    struct session *s = (struct session *) ar;
    if (type == CDN_FRAME_STARTED) {
        if (len != 4 || s->started)
            return;
        s->started = true;
        s->pid = (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
        if (s->open_req)
            open_answer(s, 201, info_json(s));
        return;
    }
    if (type == CDN_FRAME_STDOUT || type == CDN_FRAME_STDERR) {
        if (s->run && s->run->begun)
            keep_output(s->run, type == CDN_FRAME_STDERR, p, len);
        else
            s->stray += len;
        return;
    }
    if (type == CDN_FRAME_CONTROL)
        return control_bytes(s, p, len);
    if (type == CDN_FRAME_EXIT || type == CDN_FRAME_ERROR || type == 0)
        shell_ended(s, type, p, len); /* its last frame: the channel is off the connection */
    /* anything else agent-conn.c admits (WINDOW: no stdin here) says nothing to a session */
}

/* Start the session's shell (fresh: a new session; else it takes the saved state on). */
static int start_shell(struct session *s, bool fresh)
{
    struct cdn_strv *v = &s->shell.argv;
    const char *sh = v->v[0], *base = strrchr(sh, '/') ? strrchr(sh, '/') + 1 : sh;
    bool bash = strcmp(base, "bash") == 0;
    /* argv: shell [--noprofile --norc] -c BOOTSTRAP cordon-session STATE fresh|restore CWD */
    while (v->n > 1)
        free(v->v[--v->n]), v->v[v->n] = NULL;
    if ((bash && (cdn_strv_push(v, "--noprofile") < 0 || cdn_strv_push(v, "--norc") < 0)) ||
        cdn_strv_push(v, "-c") < 0 || cdn_strv_push(v, bootstrap) < 0 ||
        cdn_strv_push(v, "cordon-session") < 0 || cdn_strv_push(v, s->state) < 0 ||
        cdn_strv_push(v, fresh ? "fresh" : "restore") < 0 ||
        cdn_strv_push(v, s->shell.cwd ? s->shell.cwd : "") < 0)
        return -ENOMEM;
    s->started = false;
    s->rec_len = 0;
    s->rec_long = false;
    cdn_agent_conn_remove(&s->box->agent, &s->areq); /* a channel of its old shell never stays */
    /* Started again: in / (the session's directory may be gone), then where the state says. */
    char *cwd = s->shell.cwd;
    if (!fresh)
        s->shell.cwd = (char *) "/";
    int r = cdn_api_exec_send(s->box, &s->areq, &s->shell, false,
                              CDN_EXEC_PID | CDN_EXEC_CONTROL | CDN_EXEC_TREE);
    s->shell.cwd = cwd;
    if (r < 0)
        return r;
    s->alive = true;
    if (!fresh)
        s->restarts++;
    return 0;
}

static struct session *find(struct box *b, const char *id)
{
    struct session *s;
    LIST_FOREACH(s, &b->sessions, link)
    if (strcmp(s->id, id) == 0)
        return s;
    return NULL;
}

static void open_client_gone(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    struct session *s = arg;
    /* The session stays (GET …/sessions finds it); only the answer has nobody to go to. */
    if (s->open_req && !evhttp_request_get_connection(s->open_req))
        evhttp_send_reply_end(s->open_req);
    s->open_req = NULL;
}

static void route_open(struct evhttp_request *req, struct box *b)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    struct cdn_error err = {0};
    struct exec_args a = {0};
    int r = cdn_session_args_parse((const char *) evbuffer_pullup(in, -1), evbuffer_get_length(in),
                                   b->spec.workdir, false, &a, &err);
    if (r < 0) {
        cdn_exec_args_free(&a);
        return cdn_api_reply_cdn_error(req, r == -ENOMEM ? 500 : 400, "invalid_argument", &err);
    }
    if (b->n_sessions >= SESSION_MAX) {
        cdn_exec_args_free(&a);
        return cdn_api_reply_error(req, 429, "too_many_sessions", NULL,
                                   "%d sessions are open in this sandbox: delete one first", SESSION_MAX);
    }
    struct session *s = calloc(1, sizeof *s);
    if (!s) {
        cdn_exec_args_free(&a);
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    }
    s->shell = a;
    s->default_shell = a.argv.n == 0;
    if (s->default_shell && cdn_strv_push(&s->shell.argv, "bash") < 0) {
        cdn_exec_args_free(&s->shell);
        free(s);
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    }
    s->areq.on_frame = session_frame;
    s->box = b;
    (void) snprintf(s->id, sizeof s->id, "s%u", ++b->next_session);
    uint8_t rnd[8] = {0};
    (void) !getrandom(rnd, sizeof rnd, 0);
    (void) snprintf(s->state, sizeof s->state, "/tmp/.cordon-session-%02x%02x%02x%02x%02x%02x%02x%02x",
                    rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    s->open_req = req;
    LIST_INSERT_HEAD(&b->sessions, s, link);
    b->n_sessions++;
    if (start_shell(s, true) < 0) {
        s->open_req = NULL;
        session_free(s);
        return cdn_api_reply_error(req, 500, "internal", NULL, "cannot reach the sandbox's agent");
    }
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), open_client_gone, s);
}

/* A command as one line of the shell's fd 3 (the bootstrap's format). */
static void escape(struct evbuffer *line, const uint8_t *p, size_t n)
{
    static const char keep[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789,./_-";
    for (size_t i = 0; i < n; i++) {
        if (p[i] && strchr(keep, p[i]))
            evbuffer_add(line, &p[i], 1);
        else
            evbuffer_add_printf(line, "\\0%03o", p[i]);
    }
}

static void route_run(struct evhttp_request *req, struct session *s)
{
    struct box *b = s->box;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    struct cdn_error err = {0};
    _cleanup_(cdn_exec_args_free) struct exec_args a = {0};
    int r = cdn_session_args_parse((const char *) evbuffer_pullup(in, -1), evbuffer_get_length(in),
                                   b->spec.workdir, true, &a, &err);
    if (r < 0)
        return cdn_api_reply_cdn_error(req, r == -ENOMEM ? 500 : 400, "invalid_argument", &err);
    if (s->run)
        return cdn_api_reply_error(req, 409, "session_busy", NULL,
                                   "session %s runs a command: wait for it, or interrupt it", s->id);
    if (b->verifier != VERIFIER_NONE)
        return cdn_api_reply_error(req, 409, "verifier_running", NULL,
                                   "a verifier step runs in this sandbox: nothing else runs beside it");
    bool restarted = false;
    if (!s->alive) { /* it exited, or was killed, since its last command */
        if (start_shell(s, false) < 0)
            return cdn_api_reply_error(req, 500, "internal", NULL, "cannot reach the sandbox's agent");
        restarted = true;
    }
    struct run *run = calloc(1, sizeof *run);
    if (!run || !(run->out = evbuffer_new()) || !(run->err = evbuffer_new())) {
        if (run && run->out)
            evbuffer_free(run->out);
        free(run);
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    }
    run->s = s;
    run->req = req;
    run->seq = ++s->seq;
    run->b64 = a.b64;
    run->restarted = restarted;
    clock_gettime(CLOCK_MONOTONIC, &run->t0);
    s->run = run;
    _cleanup_evbuffer_ struct evbuffer *line = evbuffer_new();
    if (!line)
        return run_answer(run, 0, 500, "internal", "out of memory");
    evbuffer_add_printf(line, "%llu ", (unsigned long long) run->seq);
    if (a.has_stdin) {
        evbuffer_add(line, "=", 1);
        escape(line, a.stdin_data, (size_t) a.stdin_len);
    } else
        evbuffer_add(line, "-", 1);
    evbuffer_add(line, " ", 1);
    escape(line, (const uint8_t *) a.argv.v[0], strlen(a.argv.v[0]));
    evbuffer_add(line, "\n", 1);
    for (r = 0; r >= 0 && evbuffer_get_length(line) > 0;) {
        size_t k = evbuffer_get_length(line) < CDN_FRAME_MAX ? evbuffer_get_length(line) : CDN_FRAME_MAX;
        r = cdn_agent_conn_send(&b->agent, CDN_FRAME_CONTROL, 0, s->areq.channel,
                                evbuffer_pullup(line, (ev_ssize_t) k), (uint32_t) k);
        (void) evbuffer_drain(line, k);
    }
    if (r < 0)
        return run_answer(run, 0, 500, "internal", "cannot reach the sandbox's agent");
    cdn_daemon->execs_total++;
    json_decref(cdn_monitor_match(b, 1, a.argv.v[0], strlen(a.argv.v[0]))); /* its exec rules, as an exec's */
    if (a.timeout_s > 0 && (run->timer = evtimer_new(cdn_daemon->base, on_timeout, run))) {
        struct timeval tv = {.tv_sec = (time_t) a.timeout_s,
                             .tv_usec = (suseconds_t) ((a.timeout_s - (double) (time_t) a.timeout_s) * 1e6)};
        evtimer_add(run->timer, &tv);
    }
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    evhttp_connection_set_closecb(conn, run_client_gone, run);
    /* evhttp does not read a connection whose request waits for its answer: only the socket says
     * that the client hung up. */
    struct bufferevent *bev = evhttp_connection_get_bufferevent(conn);
    if (bev && (run->closed_ev =
                    event_new(cdn_daemon->base, bufferevent_getfd(bev), EV_CLOSED, run_client_closed, run)))
        (void) event_add(run->closed_ev, NULL);
}

void cdn_api_sessions(struct evhttp_request *req, struct box *b, const char *sub)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    if (!*sub) {
        if (m == EVHTTP_REQ_POST)
            return route_open(req, b);
        if (m != EVHTTP_REQ_GET)
            return cdn_api_reply_error(req, 405, "method_not_allowed", NULL, "…/sessions takes GET or POST");
        json_t *list = json_array();
        struct session *s;
        LIST_FOREACH(s, &b->sessions, link)
        if (!s->open_req)
            json_array_insert_new(list, 0, info_json(s)); /* oldest first */
        return cdn_api_reply_json(req, 200, json_pack("{s:s, s:o}", "id", b->sb.id, "sessions", list));
    }
    char id[16];
    int n = 0;
    if (sscanf(sub, "%15[a-z0-9]%n", id, &n) != 1 || (sub[n] && sub[n] != '/'))
        return cdn_api_reply_error(req, 404, "not_found", NULL, "no route for …/sessions/%.64s", sub);
    const char *action = sub[n] ? sub + n + 1 : "";
    struct session *s = find(b, id);
    if (!s || s->open_req)
        return cdn_api_reply_error(req, 404, "session_not_found", "session", "no session '%s' in sandbox %s",
                                   id, b->sb.id);
    if (!*action && m == EVHTTP_REQ_GET)
        return cdn_api_reply_json(req, 200, info_json(s));
    if (!*action && m == EVHTTP_REQ_DELETE) {
        json_t *o = info_json(s);
        send_signal(s, SIGKILL); /* the shell and all it started */
        session_free(s);
        return cdn_api_reply_json(req, 200, o);
    }
    if (strcmp(action, "run") == 0 && m == EVHTTP_REQ_POST)
        return route_run(req, s);
    if (strcmp(action, "interrupt") == 0 && m == EVHTTP_REQ_POST) {
        bool busy = s->run != NULL;
        if (busy)
            interrupt(s->run);
        return cdn_api_reply_json(req, 200, json_pack("{s:s, s:b}", "session", s->id, "interrupted", busy));
    }
    bool known = !*action || strcmp(action, "run") == 0 || strcmp(action, "interrupt") == 0;
    cdn_api_reply_error(req, known ? 405 : 404, known ? "method_not_allowed" : "not_found", NULL,
                        "no route for …/sessions/%.64s with this method", sub);
}

void cdn_api_sessions_free(struct box *b)
{
    while (!LIST_EMPTY(&b->sessions))
        session_free(LIST_FIRST(&b->sessions));
}
