/* cordond: a verifier step in a clean sibling — POST …/exec with
 * "verifier": {"mode": "sibling", "copy": [paths]} (docs/events.md).
 *
 * An in-place step runs in the sandbox the agent had: whatever the agent left there (a HOME,
 * site-packages, a conftest.py beside the repository, a .git/config) is there for it. Here the
 * step runs in a fresh sandbox of the same spec (image, tier, limits, network, protected
 * paths), into which only the named paths are copied from the agent's sandbox; the read-write
 * binds of the spec are the agent's too, so the sibling has only their protected parts, bound
 * read-only. In order, all in the loop:
 *
 *   1. the agent's sandbox is quiesced (every process ended, other execs 409; its fanotify group goes on
 *      refusing every open of a protected path) and its protected paths checked to be where
 *      they were (cdn_box_fanotify_check_moved, and cdn_sibling_spec() for the binds' host paths);
 *   2. the sibling is made (cdn_box_spawn) and started;
 *   3. `tar --create` of the named paths runs in the agent's sandbox as a plain command, leaving
 *      out the protected paths; its output is relayed, as it comes, into a file of the sibling
 *      (FILE write; the agent's connection is paused while the sibling's is behind);
 *   4. the agent's sandbox is quiesced again and is the agent's once more; in the sibling,
 *      `tar --extract` unpacks the named paths from the file, which is then removed;
 *   5. the verifier's command runs in the sibling as an in-place step would (cdn_api_exec_begin),
 *      its events and violations counted on the agent's sandbox; then the sibling is deleted.
 *
 * What crosses: the bytes of the archive. The tar that made it ran in the agent's sandbox and
 * is trusted for nothing (a loader the agent controls may have run in it); the sibling's own tar
 * (the image's) unpacks only the named paths. Trusted: the request (the operator's); the host
 * paths of the spec's binds. Not trusted: everything the two inits send. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "exec-args.h"

#define ARCHIVE     "/tmp/.cordon-sibling-copy.tar"
#define RELAY_HIGH  (4u << 20) /* the sibling's connection this far behind: the agent's waits */
#define RELAY_LOW   (1u << 20)
#define TAR_ERR_MAX 2048

struct sibling_step {
    struct box *orig, *sib;
    struct evhttp_request *req; /* the client's, until answered or handed to the exec */
    bool client_gone;
    struct event *closed_ev; /* a buffered client hanging up while the sibling is prepared */
    struct exec_args args;   /* the verifier's command */
    /* One request at a time on each side. The agent's sandbox: QUIESCE, the tar that packs,
     * the QUIESCE that gives it back. The sibling: the archive's FILE write, the tar that
     * unpacks, the archive's removal. */
    struct agent_req oreq, sreq;
    enum { O_QUIESCING, O_PACKING, O_PACKED, O_RELEASING, O_FREE } ostate;
    enum { S_STARTING, S_WRITING, S_EXTRACTING, S_REMOVING, S_READY, S_RUNNING } sstate;
    bool oreq_on, sreq_on, sib_ready, failed, paused;
    /* A failure's answer, given once the agent's sandbox is the agent's again (as an in-place
     * step's result is): the client's next exec must not meet the step's lock. */
    int fail_status;
    const char *fail_code, *fail_field;
    char fail_msg[1024];
    int depth; /* callbacks of this step on the stack: it is freed only outside all of them */
    struct evbuffer *tar_err;
    uint64_t bytes;
    struct event *throttle_ev;
};

static struct sibling_step *of_oreq(struct agent_req *r)
{
    return (struct sibling_step *) (void *) ((char *) r - offsetof(struct sibling_step, oreq));
}

static struct sibling_step *of_sreq(struct agent_req *r)
{
    return (struct sibling_step *) (void *) ((char *) r - offsetof(struct sibling_step, sreq));
}

/* ---- frames out ---- */

/* tar, as a plain command (never with the verifier's access: in the agent's sandbox it is no
 * more to be trusted than anything else there), with the step's environment and a system PATH. */
static int send_exec(struct agent_conn *ac, struct agent_req *r, const struct box *b, char **argv)
{
    _cleanup_(cdn_strv_free) struct cdn_strv env = {0};
    char *extra[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/", NULL};
    if (cdn_exec_env_for(&b->spec, NULL, extra, true, &env) < 0)
        return -ENOMEM;
    static uint8_t buf[CDN_FRAME_MAX];
    int n = cdn_exec_encode(
        buf, sizeof buf,
        &(struct cdn_exec_args){.flags = CDN_EXEC_PIPES, .cwd = "/", .argv = argv, .envp = env.v});
    if (n < 0)
        return n;
    cdn_agent_conn_add(ac, r, AGENT_EXEC_FRAMES);
    int e = cdn_agent_conn_send(ac, CDN_FRAME_EXEC, 0, r->channel, buf, (uint32_t) n);
    if (e < 0)
        cdn_agent_conn_remove(ac, r);
    return e;
}

static int send_plain(struct agent_conn *ac, struct agent_req *r, uint32_t accepts, uint16_t type,
                      uint16_t flags, const void *p, uint32_t len)
{
    cdn_agent_conn_add(ac, r, accepts);
    int e = cdn_agent_conn_send(ac, type, flags, r->channel, p, len);
    if (e < 0)
        cdn_agent_conn_remove(ac, r);
    return e;
}

static int send_file(struct sibling_step *s, uint32_t op, uint16_t flags)
{
    uint8_t buf[512];
    int n = cdn_file_encode(buf, sizeof buf, op, 0600, ARCHIVE, NULL, 0);
    return n < 0 ? n
                 : send_plain(&s->sib->agent, &s->sreq, AGENT_FILE_FRAMES, CDN_FRAME_FILE, flags, buf,
                              (uint32_t) n);
}

/* ---- the end of a step ---- */

static void maybe_free(struct sibling_step *s)
{
    if (s->depth || s->req || s->sib || s->oreq_on || s->sreq_on || (s->orig && s->ostate != O_FREE))
        return;
    if (s->orig)
        s->orig->step = NULL;
    if (s->closed_ev)
        event_free(s->closed_ev);
    if (s->throttle_ev)
        event_free(s->throttle_ev);
    evbuffer_free(s->tar_err);
    cdn_exec_args_free(&s->args);
    free(s);
}

static void resume_orig(struct sibling_step *s)
{
    if (s->paused && s->orig)
        cdn_agent_conn_pause(&s->orig->agent, false);
    s->paused = false;
    if (s->throttle_ev)
        evtimer_del(s->throttle_ev);
}

/* The agent's sandbox is the agent's again: quiesced once more (the tar and anything it left
 * are ended), then its other execs are let through. */
static void release_orig(struct sibling_step *s)
{
    struct box *o = s->orig;
    resume_orig(s);
    if (!o || s->ostate == O_RELEASING || s->ostate == O_FREE)
        return;
    if (s->oreq_on) /* the first QUIESCE or the tar: what comes of it no longer matters */
        cdn_agent_conn_remove(&o->agent, &s->oreq);
    s->oreq_on = false;
    if (o->state == BOX_RUNNING &&
        send_plain(&o->agent, &s->oreq, AGENT_QUIESCE_FRAMES, CDN_FRAME_QUIESCE, 0, NULL, 0) == 0) {
        s->oreq_on = true;
        o->verifier = VERIFIER_ENDING;
        s->ostate = O_RELEASING;
        return;
    }
    o->verifier = VERIFIER_NONE;
    s->ostate = O_FREE;
}

static void forget_client(struct sibling_step *s)
{
    if (s->closed_ev) {
        event_free(s->closed_ev);
        s->closed_ev = NULL;
    }
    struct evhttp_connection *conn = s->client_gone ? NULL : evhttp_request_get_connection(s->req);
    if (conn)
        evhttp_connection_set_closecb(conn, NULL, NULL);
}

static void settle(struct sibling_step *s);

/* Tear down what is left: the sibling, the agent's sandbox's lock. */
static void end(struct sibling_step *s)
{
    s->depth++;
    if (s->sreq_on && s->sib)
        cdn_agent_conn_remove(&s->sib->agent, &s->sreq);
    s->sreq_on = false;
    if (s->sib) {
        struct box *sib = s->sib;
        s->sib = NULL;
        sib->step = NULL;
        sib->verifies = NULL;
        cdn_box_delete(sib, "its verifier step ended");
    }
    release_orig(s);
    s->depth--;
    settle(s);
    maybe_free(s);
}

static void fail(struct sibling_step *s, int status, const char *code, const char *field, const char *fmt,
                 ...) __attribute__((format(printf, 5, 6)));
static void fail(struct sibling_step *s, int status, const char *code, const char *field, const char *fmt,
                 ...)
{
    if (s->failed)
        return;
    s->failed = true;
    s->fail_status = status;
    s->fail_code = code;
    s->fail_field = field;
    va_list ap;
    va_start(ap, fmt);
    (void) vsnprintf(s->fail_msg, sizeof s->fail_msg, fmt, ap);
    va_end(ap);
    end(s);
}

static void copy_failed(struct sibling_step *s, const char *why)
{
    char list[1024] = "";
    for (size_t i = 0; i < s->args.copy.n; i++)
        (void) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                        s->args.copy.v[i]);
    size_t n = evbuffer_get_length(s->tar_err);
    fail(s, 400, "copy_failed", "verifier.copy", "copying %s into the sibling failed: %s%s%.*s", list, why,
         n ? ": " : "", (int) n, n ? (const char *) evbuffer_pullup(s->tar_err, -1) : "");
}

static void hand_over(struct sibling_step *s);

/* Once the agent's sandbox is the agent's again (or gone): a failure is answered, a sibling
 * ready with its copy gets the verifier's command. At the end of every callback. */
static void settle(struct sibling_step *s)
{
    if (!s->req || (s->orig && s->ostate != O_FREE))
        return;
    if (s->failed) {
        forget_client(s);
        cdn_api_reply_error(s->req, s->fail_status, s->fail_code, s->fail_field, "%s", s->fail_msg);
        s->req = NULL;
    } else if (s->sstate == S_READY)
        hand_over(s);
}

/* The sibling's step is over (its reply has gone): the sibling goes. */
static void step_done(void *arg)
{
    struct sibling_step *s = arg;
    s->req = NULL;
    end(s);
}

/* ---- the steps ---- */

static void client_gone(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    struct sibling_step *s = arg;
    s->client_gone = true;
    fail(s, 499, "client_gone", NULL, "the client went away");
}

static void on_client_closed(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    fail(arg, 499, "client_gone", NULL, "the client went away");
}

static void orig_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len);
static void sib_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len);

/* 3: once the agent's sandbox is quiet and the sibling runs. */
static void pack(struct sibling_step *s)
{
    if (s->ostate != O_PACKING || !s->sib_ready || s->sstate != S_STARTING)
        return;
    if (send_file(s, CDN_FILE_WRITE, CDN_FRAME_MORE) < 0)
        return fail(s, 500, "sibling_failed", NULL, "cannot reach the sibling's agent");
    s->sreq_on = true;
    s->sstate = S_WRITING;
    /* tar, in / (its working directory: not --directory=/, which opens / for reading, and the
     * process tier's landlock lets no command read /): the paths relative to it, the protected
     * ones left out (their patterns, anchored, '*' within one component as in the spec); the
     * sibling has them bound already. */
    _cleanup_(cdn_strv_free) struct cdn_strv argv = {0};
    const struct cdn_strv *protect = &s->orig->spec.protect;
    int r = 0;
    /* The exclusions' GNU options only with exclusions: busybox's tar (an image's) has the rest. */
    const char *const head[] = {"tar", "--create", "--file=-", "--anchored", "--no-wildcards-match-slash"};
    for (size_t i = 0; r == 0 && i < (protect->n ? 5 : 3); i++)
        r = cdn_strv_push(&argv, head[i]);
    for (size_t i = 0; r == 0 && i < protect->n; i++) {
        char ex[1200];
        size_t n = strlen(protect->v[i]);
        n -= n >= 3 && strcmp(protect->v[i] + n - 3, "/**") == 0 ? 3 : 0;
        (void) snprintf(ex, sizeof ex, "--exclude=%.*s", (int) n - 1, protect->v[i] + 1);
        r = cdn_strv_push(&argv, ex);
    }
    if (r == 0)
        r = cdn_strv_push(&argv, "--");
    for (size_t i = 0; r == 0 && i < s->args.copy.n; i++)
        r = cdn_strv_push(&argv, s->args.copy.v[i] + 1);
    if (r == 0)
        r = send_exec(&s->orig->agent, &s->oreq, s->orig, argv.v);
    if (r < 0)
        return fail(s, 500, "internal", NULL, "cannot start the copy in sandbox %s", s->orig->sb.id);
    s->oreq_on = true;
}

static void throttle_check(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct sibling_step *s = arg;
    struct bufferevent *bev = s->sib ? s->sib->agent.bev : NULL;
    if (!bev || evbuffer_get_length(bufferevent_get_output(bev)) <= RELAY_LOW)
        resume_orig(s);
    else
        (void) evtimer_add(s->throttle_ev, &(struct timeval){.tv_usec = 5000});
}

/* A chunk of the archive, on to the sibling's file; the agent's connection waits while the
 * sibling's is far behind (init then stops reading tar's output, and tar blocks). */
static void relay(struct sibling_step *s, const uint8_t *p, uint32_t len)
{
    if (!s->sreq_on || !s->sib || !s->sib->agent.bev)
        return;
    if (cdn_agent_conn_send(&s->sib->agent, CDN_FRAME_DATA, CDN_FRAME_MORE, s->sreq.channel, p, len) < 0)
        return fail(s, 500, "sibling_failed", NULL, "cannot reach the sibling's agent");
    s->bytes += len;
    if (s->paused || evbuffer_get_length(bufferevent_get_output(s->sib->agent.bev)) <= RELAY_HIGH)
        return;
    if (!s->throttle_ev && !(s->throttle_ev = evtimer_new(cdn_daemon->base, throttle_check, s)))
        return;
    s->paused = true;
    cdn_agent_conn_pause(&s->orig->agent, true);
    (void) evtimer_add(s->throttle_ev, &(struct timeval){.tv_usec = 5000});
}

static void keep_stderr(struct sibling_step *s, const uint8_t *p, uint32_t len)
{
    size_t have = evbuffer_get_length(s->tar_err);
    if (have < TAR_ERR_MAX)
        evbuffer_add(s->tar_err, p, len < TAR_ERR_MAX - have ? len : TAR_ERR_MAX - have);
}

/* An exec's last frame: 0 when it exited 0; else *why says how it ended. */
static int exec_outcome(uint16_t type, const uint8_t *p, uint32_t len, char *why, size_t size)
{
    struct cdn_exit_msg m;
    int e;
    const char *msg;
    if (type == CDN_FRAME_EXIT && cdn_exit_decode(p, len, &m) == 0) {
        if (!m.signal && m.exit_code == 0)
            return 0;
        (void) snprintf(why, size, m.signal ? "tar was killed by signal %d" : "tar exited %d",
                        m.signal ? m.signal : m.exit_code);
    } else if (type == CDN_FRAME_ERROR && cdn_errmsg_decode(p, len, &e, &msg) == 0)
        (void) snprintf(why, size, "%s", msg);
    else
        (void) snprintf(why, size, "the sandbox ended");
    return -1;
}

/* 2: with nothing of the agent's running (no process of its can change what the spec's binds
 * name while the sibling's setup binds them), the sibling is made. */
static void make_sibling(struct sibling_step *s)
{
    struct cdn_error err = {0};
    struct cdn_spec spec;
    if (cdn_box_fanotify_check_moved(s->orig, &err) < 0)
        return fail(s, 409, "protected_path_moved", NULL, "%s", err.msg);
    int r = cdn_sibling_spec(s->orig, &spec, &err);
    if (r == -ESTALE)
        return fail(s, 409, "protected_path_moved", NULL, "%s", err.msg);
    if (r < 0)
        return fail(s, 500, "sibling_failed", NULL, "the sibling's spec: %s", err.msg);
    if (!(s->sib = cdn_box_spawn(&spec, NULL, &err)))
        return fail(s, 500, "sibling_failed", NULL, "the verifier's sibling: %s", err.msg);
    s->sib->sibling = true;
    s->sib->verifies = s->orig;
    s->sib->step = s;
}

static void orig_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len)
{
    struct sibling_step *s = of_oreq(r);
    bool last = type == 0 || type == CDN_FRAME_EXIT || type == CDN_FRAME_ERROR || type == CDN_FRAME_DONE;
    if (last)
        s->oreq_on = false;
    s->depth++;
    char why[600];
    switch (s->ostate) {
    case O_QUIESCING: /* 1: everything of the agent's has ended */
        if (type == CDN_FRAME_DONE) {
            /* The lock stays VERIFIER_STARTING: nothing in the agent's sandbox ever reads a protected
             * path in this mode, so its fanotify group goes on refusing (the tar leaves them out). */
            s->ostate = O_PACKING;
            make_sibling(s);
        } else if (last)
            fail(s, 500, "sandbox_gone", NULL, "the sandbox ended before its verifier step began");
        break;
    case O_PACKING:
        if (type == CDN_FRAME_STDOUT && len)
            relay(s, p, len);
        else if (type == CDN_FRAME_STDERR)
            keep_stderr(s, p, len);
        else if (last && exec_outcome(type, p, len, why, sizeof why) < 0)
            copy_failed(s, why);
        else if (last) { /* the whole archive is on its way: the file ends with an empty DATA */
            s->ostate = O_PACKED;
            if (s->sreq_on &&
                cdn_agent_conn_send(&s->sib->agent, CDN_FRAME_DATA, 0, s->sreq.channel, NULL, 0) < 0)
                fail(s, 500, "sibling_failed", NULL, "cannot reach the sibling's agent");
        }
        break;
    case O_RELEASING:
        if (last) {
            s->ostate = O_FREE;
            if (s->orig)
                s->orig->verifier = VERIFIER_NONE;
        }
        break;
    default:
        break;
    }
    s->depth--;
    settle(s);
    maybe_free(s);
}

static void start_exec(struct sibling_step *s, char **argv)
{
    if (send_exec(&s->sib->agent, &s->sreq, s->sib, argv) < 0)
        return fail(s, 500, "sibling_failed", NULL, "cannot reach the sibling's agent");
    s->sreq_on = true;
}

/* 5: the verifier's command, in the sibling, answering the client. */
static void hand_over(struct sibling_step *s)
{
    if (!s->orig)
        return fail(s, 409, "sandbox_not_running", NULL, "the sandbox ended during its verifier step");
    s->sstate = S_RUNNING;
    cdn_box_event(s->orig, "verifier",
                  json_pack("{s:s, s:s, s:I}", "mode", "sibling", "sibling", s->sib->sb.id, "copied_bytes",
                            (json_int_t) s->bytes));
    forget_client(s);
    struct evhttp_request *req = s->req;
    s->req = NULL;
    /* Owned by the exec from here: it answers, then step_done() ends the step. */
    cdn_api_exec_begin(req, s->sib, &s->args, s->orig, step_done, s);
}

static void sib_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len)
{
    struct sibling_step *s = of_sreq(r);
    bool last = type == 0 || type == CDN_FRAME_EXIT || type == CDN_FRAME_ERROR || type == CDN_FRAME_DONE;
    if (last)
        s->sreq_on = false;
    s->depth++;
    char why[600];
    switch (s->sstate) {
    case S_WRITING: /* the archive is in the sibling */
        if (type == CDN_FRAME_DONE && s->ostate == O_PACKED) {
            s->sstate = S_EXTRACTING;
            release_orig(s);
            /* Only the named paths: an archive that the agent's code made (it ran in tar's process
             * there) cannot put anything elsewhere in the sibling. */
            _cleanup_(cdn_strv_free) struct cdn_strv argv = {0};
            const char *const head[] = {"tar", "--extract", "--file=" ARCHIVE, "--no-same-owner", "--"};
            int e = 0;
            for (size_t i = 0; e == 0 && i < sizeof head / sizeof head[0]; i++)
                e = cdn_strv_push(&argv, head[i]);
            for (size_t i = 0; e == 0 && i < s->args.copy.n; i++)
                e = cdn_strv_push(&argv, s->args.copy.v[i] + 1);
            if (e == 0)
                start_exec(s, argv.v);
            else
                fail(s, 500, "internal", NULL, "out of memory");
        } else if (last)
            copy_failed(s, exec_outcome(type, p, len, why, sizeof why) < 0 ? why : "the file ended early");
        break;
    case S_EXTRACTING:
        if (type == CDN_FRAME_STDERR)
            keep_stderr(s, p, len);
        else if (last && exec_outcome(type, p, len, why, sizeof why) < 0)
            copy_failed(s, why);
        else if (last) {
            s->sstate = S_REMOVING;
            if (send_file(s, CDN_FILE_REMOVE, 0) < 0)
                fail(s, 500, "sibling_failed", NULL, "cannot reach the sibling's agent");
            else
                s->sreq_on = true;
        }
        break;
    case S_REMOVING:
        if (type == CDN_FRAME_DONE)
            s->sstate = S_READY;
        else if (last)
            fail(s, 500, "sibling_failed", NULL, "the copy's archive could not be removed from the sibling");
        break;
    default:
        break;
    }
    s->depth--;
    settle(s);
    maybe_free(s);
}

void cdn_sibling_box_ready(struct box *b)
{
    struct sibling_step *s = b->step;
    if (!s || s->sib != b)
        return;
    s->depth++;
    s->sib_ready = true;
    pack(s);
    s->depth--;
    settle(s);
    maybe_free(s);
}

void cdn_sibling_box_gone(struct box *b, const char *reason)
{
    struct sibling_step *s = b->step;
    b->step = NULL;
    if (!s)
        return;
    s->depth++;
    if (b == s->sib) { /* it ended by itself (its init died, its lifetime ran out) */
        s->sib = NULL;
        s->sreq_on = false; /* its connection is closed: nothing more comes */
        b->verifies = NULL;
        if (s->sstate != S_RUNNING) /* else the exec ends with it, and says so */
            fail(s, 500, "sibling_failed", NULL, "the verifier's sibling ended: %s", reason);
    } else if (b == s->orig) {
        s->orig = NULL;
        s->oreq_on = false;
        s->ostate = O_FREE;
        if (s->sib)
            s->sib->verifies = NULL;
        fail(s, 409, "sandbox_not_running", NULL, "the sandbox ended during its verifier step: %s", reason);
        end(s); /* a running step (its client is the exec's) has not failed: its sibling goes too */
    }
    s->depth--;
    settle(s);
    maybe_free(s);
}

void cdn_api_sibling_start(struct evhttp_request *req, struct box *b, struct exec_args *args)
{
    struct sibling_step *s = calloc(1, sizeof *s);
    if (!s || !(s->tar_err = evbuffer_new())) {
        free(s);
        cdn_exec_args_free(args);
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    }
    s->args = *args;
    *args = (struct exec_args){0};
    s->orig = b;
    s->req = req;
    b->step = s;
    b->verifier = VERIFIER_STARTING; /* other execs: 409 until the copy is made */
    s->depth++;
    s->oreq.on_frame = orig_frame;
    s->sreq.on_frame = sib_frame;
    if (cdn_daemon->n_boxes >= cdn_daemon->cfg.max_sandboxes) /* the sibling is one more */
        fail(s, 429, "too_many_sandboxes", NULL,
             "%u sandboxes exist, the configured maximum: no room for a sibling", cdn_daemon->n_boxes);
    else if (send_plain(&b->agent, &s->oreq, AGENT_QUIESCE_FRAMES, CDN_FRAME_QUIESCE, 0, NULL, 0) < 0)
        fail(s, 500, "internal", NULL, "cannot reach the sandbox's agent");
    else
        s->oreq_on = true;
    if (s->req) { /* still preparing: a client that goes away ends it */
        struct evhttp_connection *conn = evhttp_request_get_connection(req);
        evhttp_connection_set_closecb(conn, client_gone, s);
        struct bufferevent *bev = evhttp_connection_get_bufferevent(conn);
        if (bev && (s->closed_ev =
                        event_new(cdn_daemon->base, bufferevent_getfd(bev), EV_CLOSED, on_client_closed, s)))
            (void) event_add(s->closed_ev, NULL);
    }
    s->depth--;
    settle(s);
    maybe_free(s);
}
