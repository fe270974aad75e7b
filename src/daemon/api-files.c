/* cordond's file routes: PUT|GET|DELETE …/files, GET …/ls, GET …/stat,
 * POST …/mkdir, …/move and …/chmod. Each is one FILE request on a channel of the box's agent
 * connection; the frames that come back become the reply (a download streams).
 *
 * Runs in the loop. The client is trusted as far as the socket lets it in;
 * init's frames are hostile input (a VM guest's init is the guest's). A
 * download is paced by a window: init sends only what this reply has room
 * for, and WINDOW grants more as the client takes it, so a slow client holds
 * up its own download and nothing else of the sandbox. Its size is capped
 * (max_read, or the request's max_bytes) by init, and again here; a client
 * that leaves cancels it (CANCEL). A request whose path an agent's symlink
 * led into a protected path is refused by init, which says so (VIOLATION):
 * that counts, once the reply is out. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include "api.h"
#include "file-args.h"
#include "shared/base64.h"
#include "oci/digest.h"
#include "trajectory.h"

#define UPLOAD_CHUNK (512u << 10)
#define LIST_MAX     10000      /* entries of one ls answer */
#define READ_WINDOW  (2u << 20) /* a download's bytes granted to init or waiting for its client */
#define GRANT_MIN    (256u << 10)
#define UPLOAD_AHEAD (1u << 20) /* an upload's bytes queued for init at a time */
#define KEEPALIVE_S  30         /* a view's watch: within a client's idle limits */

struct file_call {
    struct agent_req areq; /* first: the agent connection hands this back */
    struct box *box;
    struct evhttp_request *req;
    int op;
    char path[4096];
    char to[4096];    /* a move's destination */
    bool started;     /* a download's 200 went out */
    bool client_gone; /* its client left: nothing more is sent to it (the request still needs ending) */
    bool replied;     /* the request is ended (libevent frees it): req may not be touched */
    bool cancelled;   /* CANCEL sent: only the last frame is awaited */
    bool breach;      /* init sent more than granted or than the cap */
    bool truncated;   /* LIST: entries past LIST_MAX dropped */
    bool owners;      /* STAT, LIST: entries carry their owners (CDN_FILE_OWNERS) */
    uint64_t max_bytes, received, inflight; /* download: its cap, bytes so far, granted and not yet here */
    json_t *entries;                        /* LIST: collected until DONE */
    json_t *violation;                      /* a SYMLINK violation init reported for it */
    struct event *closed_ev;                /* its client hanging up (EV_CLOSED) */
    struct event *deadline_ev;              /* its client left: init has agent_timeout to end it */
    struct evbuffer_cb_entry *upload_cb;    /* an upload's rest waits for room in init's queue */
    bool uploading;                         /* in upload_more: its own adds do not call it again */
    const struct cdn_file_view *view;       /* another surface's answers (NULL: /v1's) */
    void *view_arg;
    struct evbuffer *body;      /* a write's bytes when not the request's own */
    struct event *keepalive_ev; /* a view's watch */
    struct traj_step traj;      /* a write that is a trajectory's step: recorded before its answer */
};

static json_t *stat_json(const char *path, const struct cdn_file_stat *st);

static void forget_client(struct file_call *fc)
{
    if (fc->closed_ev) {
        event_free(fc->closed_ev);
        fc->closed_ev = NULL;
    }
    struct evhttp_connection *conn =
        fc->client_gone || fc->replied ? NULL : evhttp_request_get_connection(fc->req);
    if (conn)
        evhttp_connection_set_closecb(conn, NULL, NULL);
}

static void cancel(struct file_call *fc)
{
    if (!fc->cancelled)
        (void) cdn_agent_conn_send(&fc->box->agent, CDN_FRAME_CANCEL, 0, fc->areq.channel, NULL, 0);
    fc->cancelled = true;
}

static void finish(struct file_call *fc, uint16_t type, const uint8_t *p, uint32_t len);

/* init did not end a request whose client left within agent_timeout: its channel is dropped (a
 * late frame finds nobody) and the request ended, which frees it and what it holds (an upload's
 * body) even though nobody reads the answer. */
static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct file_call *fc = arg;
    cdn_agent_conn_remove(&fc->box->agent, &fc->areq);
    finish(fc, 0, NULL, 0);
}

/* Its client left (evhttp detached the request, or the socket reports the close): the download
 * stops in init; the request is ended when init's last frame comes, or at agent_timeout. */
static void leave(struct file_call *fc)
{
    forget_client(fc);
    fc->client_gone = true;
    cancel(fc);
    struct timeval tv = {.tv_sec = (time_t) cdn_daemon->cfg.agent_timeout_s};
    if (!fc->deadline_ev && (fc->deadline_ev = evtimer_new(cdn_daemon->base, on_deadline, fc)))
        (void) evtimer_add(fc->deadline_ev, &tv);
}

static void on_conn_close(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    leave(arg);
}

static void on_closed(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    leave(arg);
}

static struct evbuffer *body_of(struct file_call *fc)
{
    return fc->body ? fc->body : evhttp_request_get_input_buffer(fc->req);
}

static size_t client_backlog(struct file_call *fc)
{
    struct evhttp_connection *conn =
        fc->client_gone || fc->replied ? NULL : evhttp_request_get_connection(fc->req);
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

/* More for init to send, up to READ_WINDOW in flight or waiting for the client. */
static void grant(struct file_call *fc)
{
    size_t used = client_backlog(fc) + fc->inflight;
    if (fc->client_gone || fc->cancelled || used + GRANT_MIN > READ_WINDOW)
        return;
    uint32_t more = (uint32_t) (READ_WINDOW - used);
    uint8_t le[4] = {(uint8_t) more, (uint8_t) (more >> 8), (uint8_t) (more >> 16), (uint8_t) (more >> 24)};
    if (cdn_agent_conn_send(&fc->box->agent, CDN_FRAME_WINDOW, 0, fc->areq.channel, le, sizeof le) == 0)
        fc->inflight += more;
}

static void on_drained(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    grant(arg);
}

/* A download that cannot end well after its 200 went out must not look complete: the connection
 * is dropped without the final chunk (which frees the request). */
static void abort_stream(struct file_call *fc)
{
    forget_client(fc);
    fc->replied = true;
    struct evhttp_connection *conn = evhttp_request_get_connection(fc->req);
    if (conn)
        evhttp_connection_free(conn);
    else
        evhttp_send_reply_end(fc->req);
}

static void read_data(struct file_call *fc, const uint8_t *p, uint32_t len)
{
    if (fc->cancelled)
        return;
    if (len > fc->inflight || fc->received + len > fc->max_bytes) {
        /* More than granted or than the cap: init does neither, so this is not init. */
        fc->breach = true;
        cancel(fc);
        if (fc->started)
            abort_stream(fc);
        return;
    }
    fc->received += len;
    fc->inflight -= len;
    if (!fc->started) {
        evhttp_add_header(evhttp_request_get_output_headers(fc->req), "Content-Type",
                          "application/octet-stream");
        evhttp_send_reply_start(fc->req, 200, "OK");
        cdn_api_stream_timeout(fc->req);
        fc->started = true;
    }
    _cleanup_evbuffer_ struct evbuffer *b = evbuffer_new();
    if (b) {
        evbuffer_add(b, p, len);
        evhttp_send_reply_chunk_with_cb(fc->req, b, on_drained, fc);
    }
    grant(fc);
}

static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct file_call *fc = arg;
    _cleanup_evbuffer_ struct evbuffer *b = evbuffer_new();
    if (!fc->started || fc->client_gone || fc->replied || !b)
        return;
    fc->view->keepalive(fc->view_arg, b);
    if (evbuffer_get_length(b))
        evhttp_send_reply_chunk_with_cb(fc->req, b, on_drained, fc);
}

/* A watch's first bytes: the reply's start. */
static void watch_begin(struct file_call *fc)
{
    fc->started = true;
    if (fc->view) {
        fc->view->watch_begin(fc->req, fc->view_arg);
        struct timeval tv = {.tv_sec = KEEPALIVE_S};
        if (fc->view->keepalive &&
            (fc->keepalive_ev = event_new(cdn_daemon->base, -1, EV_PERSIST, on_keepalive, fc)))
            (void) event_add(fc->keepalive_ev, &tv);
    } else {
        evhttp_add_header(evhttp_request_get_output_headers(fc->req), "Content-Type", "application/x-ndjson");
        evhttp_send_reply_start(fc->req, 200, "OK");
    }
    cdn_api_stream_timeout(fc->req);
}

static void list_data(struct file_call *fc, const uint8_t *p, uint32_t len)
{
    for (uint32_t off = 0; off < len;) {
        struct cdn_file_stat st;
        int n = fc->owners ? cdn_file_stat_decode_owned(p + off, len - off, &st)
                           : cdn_file_stat_decode(p + off, len - off, &st);
        if (n <= 0)
            break;
        json_t *e = json_array_size(fc->entries) < LIST_MAX ? stat_json(NULL, &st) : NULL;
        const char *lossy = e ? json_string_value(json_object_get(e, "name")) : NULL;
        size_t nl = strlen(st.name);
        if (fc->view && lossy && (strlen(lossy) != nl || memcmp(lossy, st.name, nl))) {
            char b64[6000]; /* a view builds paths from names: the exact bytes too (names are < 4 KiB) */
            if (cdn_base64_len(nl) < sizeof b64) {
                cdn_base64_encode((const uint8_t *) st.name, nl, b64);
                json_object_set_new(e, "name_b64", json_string(b64));
            }
        }
        if (e)
            json_array_append_new(fc->entries, e);
        else
            fc->truncated = true; /* the rest is dropped: cordond's memory is not the sandbox's to fill */
        off += (uint32_t) n;
    }
}

/* A watch's entries (init-watch.c), each an NDJSON line; init sends them within the window as a
 * download's bytes. Names are the sandbox's bytes: JSON-encoded lossily, and in base64 as well when
 * they are not UTF-8. */
static void watch_data(struct file_call *fc, const uint8_t *p, uint32_t len)
{
    if (fc->cancelled)
        return;
    if (len > fc->inflight) {
        fc->breach = true;
        cancel(fc);
        if (fc->started)
            abort_stream(fc);
        return;
    }
    fc->inflight -= len;
    if (!fc->started)
        watch_begin(fc);
    static const char *const kinds[] = {"",          "start", "create",  "write", "remove", "rename_from",
                                        "rename_to", "chmod", "overflow"};
    _cleanup_evbuffer_ struct evbuffer *b = evbuffer_new();
    for (uint32_t off = 0; b && off < len;) {
        struct cdn_file_stat st;
        int n = cdn_file_stat_decode(p + off, len - off, &st);
        if (n <= 0)
            break;
        off += (uint32_t) n;
        if (st.size == 0 || st.size >= sizeof kinds / sizeof kinds[0])
            continue; /* no kind of ours: dropped */
        if (fc->view) {
            fc->view->watch_event(fc->view_arg, b, (int) st.size, st.name, S_ISDIR(st.mode));
            continue;
        }
        json_t *o = json_pack("{s:s}", "type", kinds[st.size]);
        size_t nl = strlen(st.name);
        if (o && st.size != CDN_WATCH_START && st.size != CDN_WATCH_OVERFLOW) {
            json_t *name = cdn_json_lossy_string((const uint8_t *) st.name, nl);
            json_object_set_new(o, "path", name);
            json_object_set_new(o, "dir", json_boolean(S_ISDIR(st.mode)));
            if (st.mtime && (st.size == CDN_WATCH_RENAME_FROM || st.size == CDN_WATCH_RENAME_TO))
                json_object_set_new(o, "cookie", json_integer(st.mtime));
            if (name &&
                (strlen(json_string_value(name)) != nl || memcmp(json_string_value(name), st.name, nl))) {
                char b64[6000]; /* replaced bytes: the exact name too (names are < 4 KiB) */
                if (cdn_base64_len(nl) < sizeof b64) {
                    cdn_base64_encode((const uint8_t *) st.name, nl, b64);
                    json_object_set_new(o, "path_b64", json_string(b64));
                }
            }
        }
        _cleanup_free_ char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (s) {
            evbuffer_add(b, s, strlen(s));
            evbuffer_add(b, "\n", 1);
        }
    }
    if (b && evbuffer_get_length(b))
        evhttp_send_reply_chunk_with_cb(fc->req, b, on_drained, fc);
    grant(fc);
}

static void on_violation(struct file_call *fc, const uint8_t *p, uint32_t len)
{
    struct cdn_violation_msg v;
    if (fc->violation || cdn_violation_decode(p, len, &v) < 0 || v.kind != CDN_VIOLATION_MSG_SYMLINK)
        return;
    static const char *const ops[] = {"",       "write", "read",  "stat",    "list", "mkdir",
                                      "remove", "move",  "chmod", "symlink", "watch"};
    fc->violation = json_pack("{s:o, s:o, s:s, s:s, s:s}", "path",
                              cdn_json_lossy_string((const uint8_t *) v.path, strlen(v.path)), "requested",
                              cdn_json_lossy_string((const uint8_t *) fc->path, strlen(fc->path)), "op",
                              ops[fc->op], "via", "symlink", "where", "files");
}

static int http_status_of(int errnum)
{
    switch (errnum) {
    case ENOENT:
    case ENOTDIR:
        return 404;
    case EACCES:
    case EPERM:
    case EROFS:
        return 403;
    case EBUSY: /* a mount point: a protected path, a bind */
        return 403;
    case EISDIR:
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP:
    case EXDEV:
        return 400;
    case EEXIST:
    case ENOTEMPTY:
        return 409;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        return 507;
    default:
        return 500;
    }
}

static void reply_failed(struct file_call *fc, uint16_t type, const uint8_t *p, uint32_t len)
{
    int e;
    const char *msg;
    if (type != CDN_FRAME_ERROR || cdn_errmsg_decode(p, len, &e, &msg) < 0) {
        const char *failure = cdn_agent_conn_failure(&fc->box->agent);
        if (failure)
            return fc->view ? fc->view->failed(fc->req, fc->view_arg, 502, 0, failure)
                            : cdn_api_reply_error(fc->req, 502, "agent_protocol_error", NULL,
                                                  "the sandbox's agent broke the protocol: %s", failure);
        return fc->view ? fc->view->failed(fc->req, fc->view_arg, 502, 0, "the sandbox ended")
                        : cdn_api_reply_error(fc->req, 500, "sandbox_gone", NULL,
                                              "the sandbox ended during the file operation");
    }
    if (fc->view)
        return fc->view->failed(fc->req, fc->view_arg,
                                fc->violation                           ? 403
                                : e == EFBIG && fc->op == CDN_FILE_READ ? 413
                                                                        : http_status_of(e),
                                fc->violation ? EACCES : e, msg);
    if (fc->violation)
        return cdn_api_reply_error(fc->req, 403, "protected_path", "path", "%s", msg);
    if (e == EFBIG && fc->op == CDN_FILE_READ)
        return cdn_api_reply_error(fc->req, 413, "file_too_large", "max_bytes",
                                   "%s; pass a larger ?max_bytes= (this read's limit: %llu bytes)", msg,
                                   (unsigned long long) fc->max_bytes);
    const char *code = e == ENOENT      ? "not_found"
                       : e == EEXIST    ? "exists"
                       : e == ENOTEMPTY ? "not_empty"
                       : e == EXDEV     ? "cross_device"
                                        : "file_error";
    const char *field = strncmp(msg, "user: ", 6) == 0  ? "user" /* init-files.c: the user of ?user= */
                        : fc->op != CDN_FILE_RENAME     ? "path"
                        : e == EEXIST || e == ENOTEMPTY ? "to"
                                                        : "from";
    cdn_api_reply_error(fc->req, http_status_of(e), code, field, "%s", msg);
}

static void reply_done(struct file_call *fc, const uint8_t *p, uint32_t len)
{
    struct cdn_file_stat st = {.name = ""};
    if (!len || ((!fc->owners || cdn_file_stat_decode_owned(p, len, &st) <= 0) &&
                 cdn_file_stat_decode(p, len, &st) <= 0)) /* checked whole: agent-conn.c */
        st = (struct cdn_file_stat){.name = ""};
    if (fc->view && fc->op == CDN_FILE_WATCH) {
        if (!fc->started)
            watch_begin(fc);
        fc->view->watch_end(fc->req, fc->view_arg);
        return;
    }
    if (fc->view && fc->op != CDN_FILE_READ)
        return fc->view->done(fc->req, fc->view_arg, &st, fc->entries);
    json_t *path = cdn_json_lossy_string((const uint8_t *) fc->path, strlen(fc->path));
    switch (fc->op) {
    case CDN_FILE_WATCH: /* the directory went */
        json_decref(path);
        if (!fc->started)
            return cdn_api_reply_error(fc->req, 502, "bad_agent", NULL, "the watch ended before it began");
        evbuffer_add_printf(evhttp_request_get_output_buffer(fc->req), "{\"type\":\"gone\"}\n");
        evhttp_send_reply_chunk(fc->req, evhttp_request_get_output_buffer(fc->req));
        evhttp_send_reply_end(fc->req);
        return;
    case CDN_FILE_READ:
        json_decref(path);
        if (fc->started)
            evhttp_send_reply_end(fc->req);
        else
            evhttp_send_reply(fc->req, 200, "OK", NULL); /* an empty file */
        return;
    case CDN_FILE_LIST:
        return cdn_api_reply_json(
            fc->req, 200,
            json_pack("{s:o, s:O, s:b}", "path", path, "entries", fc->entries, "truncated", fc->truncated));
    case CDN_FILE_REMOVE:
        return cdn_api_reply_json(fc->req, 200, json_pack("{s:o, s:b}", "path", path, "removed", 1));
    case CDN_FILE_RENAME:
        json_decref(path);
        return cdn_api_reply_json(fc->req, 200, stat_json(fc->to, &st));
    default:
        json_decref(path);
        json_t *res = stat_json(fc->path, &st);
        if (fc->traj.t && res) /* the step's line first, then its answer */
            cdn_traj_record_result(fc->box, &fc->traj, "write", res);
        return cdn_api_reply_json(fc->req, 200, res);
    }
}

/* The request's last frame (or the connection's end: type 0). */
static void upload_stop(struct file_call *fc);

static void finish(struct file_call *fc, uint16_t type, const uint8_t *p, uint32_t len)
{
    upload_stop(fc);
    cdn_box_touch(fc->box); /* its idle time counts from the operation's end */
    if (!fc->replied) {
        forget_client(fc);
        if (fc->client_gone || (fc->started && (type != CDN_FRAME_DONE || fc->breach)))
            abort_stream(fc);
        else if (fc->breach && fc->view)
            fc->view->failed(fc->req, fc->view_arg, 502, 0,
                             "the sandbox's agent sent more than it was asked");
        else if (fc->breach)
            cdn_api_reply_error(fc->req, 502, "bad_agent", NULL,
                                "the sandbox's agent sent more than it was asked");
        else if (type == CDN_FRAME_DONE)
            reply_done(fc, p, len);
        else
            reply_failed(fc, type, p, len);
    }
    struct box *b = fc->box;
    json_t *violation = fc->violation;
    json_decref(fc->entries);
    if (fc->deadline_ev)
        event_free(fc->deadline_ev);
    if (fc->keepalive_ev)
        event_free(fc->keepalive_ev);
    const struct cdn_file_view *view = fc->view;
    void *view_arg = fc->view_arg;
    cdn_traj_abort(&fc->traj); /* not answered as done: not a step */
    free(fc);
    if (view && view->release)
        view->release(view_arg);
    /* Last: in kill mode it ends the sandbox, and with it every request of its connection. */
    if (violation)
        cdn_box_violation(b, CDN_VK_PROTECT, violation);
}

static void file_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len)
{
    struct file_call *fc = (struct file_call *) r;
    if (type == CDN_FRAME_DATA && fc->op == CDN_FILE_READ)
        return read_data(fc, p, len);
    if (type == CDN_FRAME_DATA && fc->op == CDN_FILE_LIST)
        return list_data(fc, p, len);
    if (type == CDN_FRAME_DATA && fc->op == CDN_FILE_WATCH)
        return watch_data(fc, p, len);
    if (type == CDN_FRAME_VIOLATION)
        return on_violation(fc, p, len);
    return finish(fc, type, p, len); /* DONE, ERROR, or the end (0): agent-conn.c admits no other */
}

/* The rest of an upload, a chunk at a time while init's queue holds less than UPLOAD_AHEAD: the
 * frames of the sandbox's other requests go between them, not behind all of it. */
static void upload_more(struct file_call *fc)
{
    struct evbuffer *body = body_of(fc);
    struct agent_conn *ac = &fc->box->agent;
    int r = 0;
    while (r == 0 && ac->bev && evbuffer_get_length(body) > 0 &&
           evbuffer_get_length(bufferevent_get_output(ac->bev)) < UPLOAD_AHEAD) {
        size_t k = evbuffer_get_length(body) < UPLOAD_CHUNK ? evbuffer_get_length(body) : UPLOAD_CHUNK;
        bool more = evbuffer_get_length(body) > k;
        r = cdn_agent_conn_send(ac, CDN_FRAME_DATA, more ? CDN_FRAME_MORE : 0, fc->areq.channel,
                                evbuffer_pullup(body, (ev_ssize_t) k), (uint32_t) k);
        (void) evbuffer_drain(body, k);
    }
    if ((r < 0 || evbuffer_get_length(body) == 0) && fc->upload_cb && ac->bev) {
        evbuffer_remove_cb_entry(bufferevent_get_output(ac->bev), fc->upload_cb);
        fc->upload_cb = NULL;
    }
}

static void on_agent_output(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    (void) buf;
    struct file_call *fc = arg;
    if (info->n_deleted && !fc->uploading) { /* drained: room for more (its own adds call back too) */
        fc->uploading = true;
        upload_more(fc);
        fc->uploading = false;
    }
}

static void upload_stop(struct file_call *fc)
{
    /* A closed connection freed its buffer, callbacks and all. */
    if (fc->upload_cb && fc->box->agent.bev)
        evbuffer_remove_cb_entry(bufferevent_get_output(fc->box->agent.bev), fc->upload_cb);
    fc->upload_cb = NULL;
}

static int send_request(struct file_call *fc, const struct file_args *a, uint32_t mode)
{
    struct evbuffer *body = body_of(fc);
    size_t total = fc->op == CDN_FILE_WRITE ? evbuffer_get_length(body) : 0;
    size_t first = total < UPLOAD_CHUNK ? total : UPLOAD_CHUNK;
    static uint8_t buf[CDN_FRAME_MAX];
    struct cdn_file_opts o = {
        .flags = (a->nofollow ? CDN_FILE_NOFOLLOW : 0) | (a->recursive ? CDN_FILE_RECURSIVE : 0) |
                 (fc->owners ? CDN_FILE_OWNERS : 0),
        .window = fc->op == CDN_FILE_READ || fc->op == CDN_FILE_WATCH ? READ_WINDOW : 0,
        .max_bytes = fc->op == CDN_FILE_READ ? fc->max_bytes : 0,
    };
    /* Options only where they say something: the other requests stay readable by an init from
     * before them (a sandbox adopted across an upgrade). */
    bool opts = fc->op == CDN_FILE_READ || fc->op == CDN_FILE_WATCH || o.flags;
    int n =
        fc->op == CDN_FILE_RENAME
            ? cdn_file_encode_to(buf, sizeof buf, CDN_FILE_RENAME, fc->path, fc->to,
                                 (a->noreplace ? CDN_FILE_NOREPLACE : 0) | (fc->owners ? CDN_FILE_OWNERS : 0))
        : opts ? cdn_file_encode_opts(buf, sizeof buf, (uint32_t) fc->op, mode, fc->path, &o)
               : cdn_file_encode(buf, sizeof buf, (uint32_t) fc->op, mode, fc->path,
                                 evbuffer_pullup(body, (ev_ssize_t) first), first);
    if (n >= 0 && a->user[0]) /* a request without one stays readable by an older init */
        n = cdn_file_set_user(buf, sizeof buf, (size_t) n, a->user);
    struct agent_conn *ac = &fc->box->agent;
    uint32_t ch =
        cdn_agent_conn_add(ac, &fc->areq,
                           fc->op == CDN_FILE_READ || fc->op == CDN_FILE_LIST || fc->op == CDN_FILE_WATCH
                               ? AGENT_FILE_DATA_FRAMES
                               : AGENT_FILE_FRAMES);
    fc->inflight = o.window;
    int r = n < 0 ? n
                  : cdn_agent_conn_send(ac, CDN_FRAME_FILE, total > first ? CDN_FRAME_MORE : 0, ch, buf,
                                        (uint32_t) n);
    (void) evbuffer_drain(body, first);
    if (r >= 0 && total > first &&
        !(fc->upload_cb = evbuffer_add_cb(bufferevent_get_output(ac->bev), on_agent_output, fc)))
        r = -ENOMEM;
    if (r >= 0 && total > first)
        upload_more(fc);
    if (r < 0) {
        upload_stop(fc);
        cdn_agent_conn_remove(ac, &fc->areq);
    }
    return r;
}

/* A call that never reached the agent (file_call()'s error paths). */
static void file_call_freep(struct file_call **p)
{
    if (*p) {
        json_decref((*p)->entries);
        free(*p);
    }
}

static int file_start(struct evhttp_request *req, struct box *b, int op, uint32_t mode,
                      const struct file_args *a, const struct cdn_file_view *view, void *arg,
                      struct evbuffer *body, struct traj_step *step);

int cdn_api_file_start(struct evhttp_request *req, struct box *b, int op, uint32_t mode,
                       const struct file_args *a, const struct cdn_file_view *view, void *arg,
                       struct evbuffer *body)
{
    return file_start(req, b, op, mode, a, view, arg, body, NULL);
}

/* step: a trajectory's step, the call's once it is sent (else the caller's still). */
static int file_start(struct evhttp_request *req, struct box *b, int op, uint32_t mode,
                      const struct file_args *a, const struct cdn_file_view *view, void *arg,
                      struct evbuffer *body, struct traj_step *step)
{
    _cleanup_(file_call_freep) struct file_call *fc = calloc(1, sizeof *fc);
    if (!fc || (op == CDN_FILE_LIST && !(fc->entries = json_array())))
        return -ENOMEM;
    fc->areq.on_frame = file_frame;
    fc->box = b;
    fc->req = req;
    fc->op = op;
    fc->view = view;
    fc->view_arg = arg;
    fc->body = body;
    fc->max_bytes = a->max_bytes ? a->max_bytes : cdn_daemon->cfg.max_read_bytes;
    fc->owners = a->owners && (op == CDN_FILE_STAT || op == CDN_FILE_LIST || op == CDN_FILE_MKDIR ||
                               op == CDN_FILE_RENAME);
    (void) snprintf(fc->path, sizeof fc->path, "%s", a->path);
    (void) snprintf(fc->to, sizeof fc->to, "%s", a->to);
    int r = send_request(fc, a, op == CDN_FILE_CHMOD ? a->mode : mode);
    if (r < 0)
        return r;
    struct file_call *sent = TAKE_PTR(fc); /* the agent's frames finish() it */
    if (step) {
        sent->traj = *step;
        *step = (struct traj_step){0};
    }
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    evhttp_connection_set_closecb(conn, on_conn_close, sent);
    /* evhttp does not read while a request is being answered: only the socket tells a hang-up
     * before a download's first bytes, or before any other operation's answer. */
    struct bufferevent *bev = evhttp_connection_get_bufferevent(conn);
    if (bev &&
        (sent->closed_ev = event_new(cdn_daemon->base, bufferevent_getfd(bev), EV_CLOSED, on_closed, sent)))
        (void) event_add(sent->closed_ev, NULL);
    return 0;
}

/* What makes a write the same step again: its path, its bytes (their digest and length), its user. */
static json_t *write_request_json(struct evhttp_request *req, const struct file_args *a)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    char digest[CDN_DIGEST_MAX] = "";
    _cleanup_hasher_ struct cdn_hasher *h = NULL;
    if (cdn_hasher_new("sha256", &h) < 0)
        return NULL;
    cdn_hasher_update(h, n ? evbuffer_pullup(in, (ev_ssize_t) n) : (const uint8_t *) "", n);
    cdn_hasher_digest(h, digest);
    return json_pack("{s:s, s:s, s:I, s:s?}", "path", a->path, "sha256", digest, "bytes", (json_int_t) n,
                     "user", a->user[0] ? a->user : NULL);
}

static void file_call(struct evhttp_request *req, struct box *b, int op, uint32_t mode)
{
    struct file_args a;
    struct cdn_error err = {0};
    if (!cdn_api_box_usable(req, b))
        return;
    if (cdn_file_args_parse(evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req)), op, b->spec.workdir, &a,
                            &err) < 0)
        return cdn_api_reply_cdn_error(req, 400, "invalid_query", &err);
    struct traj_step step;
    json_t *recorded;
    int t = cdn_api_traj_begin(
        req, b, "write", op == CDN_FILE_WRITE && b->spec.trajectory ? write_request_json(req, &a) : NULL,
        a.has_step, a.step, "invalid_query", &step, &recorded);
    if (t < 0)
        return;
    if (t == TRAJ_REPLAY) /* its answer again; nothing is written */
        return cdn_api_traj_replay(req, recorded);
    int r = file_start(req, b, op, mode, &a, NULL, NULL, NULL, &step);
    cdn_traj_abort(&step); /* still here: it was not sent */
    if (r < 0)
        cdn_api_reply_error(req, r == -ENOBUFS ? 400 : 500, "file_error", "path", "%s",
                            r == -ENOBUFS  ? "path is too long"
                            : r == -ENOMEM ? "out of memory"
                                           : "cannot reach the sandbox's agent");
}

static json_t *stat_json(const char *path, const struct cdn_file_stat *st)
{
    const char *type = S_ISDIR(st->mode)   ? "dir"
                       : S_ISREG(st->mode) ? "file"
                       : S_ISLNK(st->mode) ? "symlink"
                                           : "other";
    json_t *o = json_pack("{s:s, s:I, s:i, s:I}", "type", type, "size", (json_int_t) st->size, "mode",
                          (int) (st->mode & 07777), "mtime", (json_int_t) st->mtime);
    if (o && path) {
        json_object_set_new(o, "path", cdn_json_lossy_string((const uint8_t *) path, strlen(path)));
        if (S_ISLNK(st->mode) && st->name && st->name[0]) /* stat with follow=false: where it points */
            json_object_set_new(o, "target",
                                cdn_json_lossy_string((const uint8_t *) st->name, strlen(st->name)));
    } else if (o)
        json_object_set_new(o, "name", cdn_json_lossy_string((const uint8_t *) st->name, strlen(st->name)));
    if (o && st->owner) { /* CDN_FILE_OWNERS: the names are the sandbox's bytes */
        json_object_set_new(o, "uid", json_integer(st->uid));
        json_object_set_new(o, "gid", json_integer(st->gid));
        json_object_set_new(o, "owner",
                            cdn_json_lossy_string((const uint8_t *) st->owner, strlen(st->owner)));
        json_object_set_new(o, "group",
                            cdn_json_lossy_string((const uint8_t *) st->group, strlen(st->group)));
    }
    return o;
}

void cdn_api_files(struct evhttp_request *req, struct box *b)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    file_call(req, b,
              m == EVHTTP_REQ_PUT   ? CDN_FILE_WRITE
              : m == EVHTTP_REQ_GET ? CDN_FILE_READ
                                    : CDN_FILE_REMOVE,
              0);
}

void cdn_api_ls(struct evhttp_request *req, struct box *b)
{
    file_call(req, b, CDN_FILE_LIST, 0);
}

void cdn_api_stat(struct evhttp_request *req, struct box *b)
{
    file_call(req, b, CDN_FILE_STAT, 0);
}

void cdn_api_mkdir(struct evhttp_request *req, struct box *b)
{
    file_call(req, b, CDN_FILE_MKDIR, 0755);
}

void cdn_api_move(struct evhttp_request *req, struct box *b)
{
    file_call(req, b, CDN_FILE_RENAME, 0);
}

void cdn_api_watch(struct evhttp_request *req, struct box *b)
{
    file_call(req, b, CDN_FILE_WATCH, 0);
}

void cdn_api_chmod(struct evhttp_request *req, struct box *b)
{
    file_call(req, b, CDN_FILE_CHMOD, 0);
}
