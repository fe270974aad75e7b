/* cordond: a directory of a sandbox as one tar stream, either way —
 * PUT …/archive?path=DIR (the body a tar, gzip'd or not, unpacked beneath
 * DIR) and GET …/archive?path=DIR (DIR's tree as a pax tar). Runs in the loop.
 *
 * Neither side has a tar of its own in the sandbox: cordond reads and writes
 * the archive with libarchive and moves each entry with the files API's own
 * requests to init (MKDIR, WRITE, SYMLINK; LIST, READ, STAT), one at a time on
 * the box's agent connection, so that every path is judged by init as any
 * files request is (an agent's symlink into a protected path: refused, a
 * violation; a kernel file system's contents: never moved). Nothing in the
 * sandbox runs for it: a tar binary the agent replaced in the image never sees
 * the operator's files.
 *
 * Trusted: the request (the operator's archive, parsed as hostile all the
 * same: names beneath DIR only, bounded). Not trusted: init's frames (a VM
 * guest's init is the guest's): listed names are checked, sizes bounded, a
 * download's reads paced by a window and capped to the listed size. A
 * download streams: each entry's header goes out before its bytes, so an
 * entry that changed while it was read is padded or cut to its listed size,
 * as tar does; a refusal that counts (a protected path) ends the stream
 * without its last chunk. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include "api.h"
#include "archive-body.h"
#include "file-args.h"

#define MAX_ENTRIES    CDN_ARCHIVE_MAX_ENTRIES
#define MAX_DEPTH      256
#define CHUNK          (512u << 10)
#define UPLOAD_AHEAD   (1u << 20)  /* a file's bytes queued for init at a time */
#define READ_WINDOW    (1u << 20)  /* a download's bytes granted to init */
#define OUT_HIGH       (2u << 20)  /* the client this far behind: the download waits */
#define MAX_NAME_BYTES (64u << 20) /* of a download's listed names, all told */

struct down_entry {
    char *rel; /* relative to the root */
    uint32_t mode;
    uint64_t size;
    int64_t mtime;
};

struct arch_call {
    struct agent_req areq; /* first: the agent connection hands it back */
    struct box *box;
    struct evhttp_request *req;
    char root[4096];
    char cur[8192]; /* the entry in flight, relative */
    char user[256]; /* ?user=: every entry's operation as this user ("": the sandbox's root) */
    bool upload, client_gone, replied, started, busy, cancelled, waiting;
    json_t *violation;
    struct event *closed_ev;
    /* upload */
    struct archive_plan plan;
    size_t next;
    uint64_t bytes;
    const uint8_t *rest; /* the file's bytes not yet queued */
    size_t rest_len;
    struct evbuffer_cb_entry *upload_cb;
    /* download */
    struct archive *ar;
    struct evbuffer *out;
    struct down_entry *ents_d;     /* the tree, breadth first: every directory before what is in it */
    size_t n_d, cap_d, scan, emit; /* the next to list (a directory), the next to archive */
    bool listed;                   /* scanning done: archiving */
    uint64_t total, max_bytes, want, got, inflight;
    uint16_t op;
    int list_err;               /* a listing dropped: why */
    uint64_t name_bytes;        /* of the listed names: bounded as the entries are */
    struct event *later;        /* its end, outside evhttp's close callback */
    struct event *deadline;     /* its client left: init has agent_timeout to end what is in flight */
    LIST_ENTRY(arch_call) link; /* on its box's archives: ended when the box goes */
};

static const char *const op_names[] = {
    [CDN_FILE_WRITE] = "write", [CDN_FILE_READ] = "read",   [CDN_FILE_STAT] = "stat",
    [CDN_FILE_LIST] = "list",   [CDN_FILE_MKDIR] = "mkdir", [CDN_FILE_SYMLINK] = "symlink"};

static void call_free(struct arch_call *a)
{
    cdn_archive_plan_free(&a->plan);
    for (size_t i = 0; i < a->n_d; i++)
        free(a->ents_d[i].rel);
    free(a->ents_d);
    LIST_REMOVE(a, link);
    if (a->later)
        event_free(a->later);
    if (a->deadline)
        event_free(a->deadline);
    if (a->ar)
        archive_write_free(a->ar);
    if (a->out)
        evbuffer_free(a->out);
    if (a->closed_ev)
        event_free(a->closed_ev);
    json_decref(a->violation);
    free(a);
}

static void forget_client(struct arch_call *a)
{
    if (a->closed_ev) {
        event_free(a->closed_ev);
        a->closed_ev = NULL;
    }
    struct evhttp_connection *conn =
        a->client_gone || a->replied ? NULL : evhttp_request_get_connection(a->req);
    if (conn)
        evhttp_connection_set_closecb(conn, NULL, NULL);
}

static void upload_stop(struct arch_call *a)
{
    if (a->upload_cb && a->box->agent.bev)
        evbuffer_remove_cb_entry(bufferevent_get_output(a->box->agent.bev), a->upload_cb);
    a->upload_cb = NULL;
}

/* The end, once nothing is in flight: the answer if there is still one to give, then the
 * violation (last: in kill mode it ends the sandbox). */
static void end(struct arch_call *a, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void end(struct arch_call *a, int status, const char *code, const char *fmt, ...)
{
    upload_stop(a);
    cdn_box_touch(a->box);
    forget_client(a);
    char msg[1200] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        (void) vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    if (a->replied)
        ;
    else if (a->client_gone || (a->started && status != 200)) {
        /* cut short: no last chunk, so that no client takes it for whole (this frees the request) */
        struct evhttp_connection *conn = evhttp_request_get_connection(a->req);
        if (conn)
            evhttp_connection_free(conn);
        else
            evhttp_send_reply_end(a->req);
    } else if (a->started)
        evhttp_send_reply_end(a->req);
    else if (status == 200)
        cdn_api_reply_json(a->req, 200,
                           json_pack("{s:o, s:I, s:I}", "path",
                                     cdn_json_lossy_string((const uint8_t *) a->root, strlen(a->root)),
                                     "entries", (json_int_t) a->plan.n, "bytes", (json_int_t) a->bytes));
    else
        cdn_api_reply_error(a->req, status, code, strcmp(code, "file_too_large") == 0 ? "max_bytes" : "path",
                            "%s", msg);
    a->replied = true;
    struct box *b = a->box;
    json_t *v = a->violation;
    a->violation = NULL;
    call_free(a);
    if (v)
        cdn_box_violation(b, CDN_VK_PROTECT, v);
}

/* An ERROR (or the connection's end) of the entry in flight, said as the answer. */
static void end_failed(struct arch_call *a, uint16_t type, const uint8_t *p, uint32_t len)
{
    int e = 0;
    const char *msg = "";
    if (type != CDN_FRAME_ERROR || cdn_errmsg_decode(p, len, &e, &msg) < 0) {
        const char *failure = cdn_agent_conn_failure(&a->box->agent);
        return failure ? end(a, 502, "agent_protocol_error", "the sandbox's agent broke the protocol: %s",
                             failure)
                       : end(a, 500, "sandbox_gone", "the sandbox ended during the archive");
    }
    if (a->violation)
        return end(a, 403, "protected_path", "%s", msg);
    int status = e == ENOENT || e == ENOTDIR                ? 404
                 : e == EACCES || e == EPERM || e == EROFS  ? 403
                 : e == ENOSPC || e == EDQUOT || e == EFBIG ? 507
                 : e == EISDIR || e == EINVAL || e == ELOOP ? 400
                                                            : 500;
    end(a, status, e == ENOENT ? "not_found" : "file_error", "entry '%.1024s': %s", a->cur[0] ? a->cur : ".",
        msg);
}

static void on_violation(struct arch_call *a, const uint8_t *p, uint32_t len)
{
    struct cdn_violation_msg v;
    if (a->violation || cdn_violation_decode(p, len, &v) < 0 || v.kind != CDN_VIOLATION_MSG_SYMLINK)
        return;
    char requested[4096 + 8192 + 2];
    (void) snprintf(requested, sizeof requested, "%s%s%s", a->root, a->cur[0] ? "/" : "", a->cur);
    a->violation = json_pack("{s:o, s:o, s:s, s:s, s:s}", "path",
                             cdn_json_lossy_string((const uint8_t *) v.path, strlen(v.path)), "requested",
                             cdn_json_lossy_string((const uint8_t *) requested, strlen(requested)), "op",
                             op_names[a->op], "via", "symlink", "where", "archive");
}

/* One files request for the entry a->cur (root itself when empty) on a fresh channel. */
static int send_op(struct arch_call *a, uint16_t op, uint32_t mode, const struct cdn_file_opts *o,
                   const char *to, const void *data, size_t data_len, bool more)
{
    static uint8_t buf[CDN_FRAME_MAX];
    char path[4096 + 8192 + 2];
    size_t n_root = strlen(a->root);
    bool slash = a->cur[0] && n_root && a->root[n_root - 1] != '/';
    if ((size_t) snprintf(path, sizeof path, "%s%s%s", a->root, slash ? "/" : "", a->cur) >= 4096)
        return -ENAMETOOLONG;
    int n = to  ? cdn_file_encode_to(buf, sizeof buf, op, path, to, 0)
            : o ? cdn_file_encode_opts(buf, sizeof buf, op, mode, path, o)
                : cdn_file_encode(buf, sizeof buf, op, mode, path, data, data_len);
    if (n >= 0 && a->user[0])
        n = cdn_file_set_user(buf, sizeof buf, (size_t) n, a->user);
    if (n < 0)
        return n;
    a->op = op;
    uint32_t ch = cdn_agent_conn_add(&a->box->agent, &a->areq,
                                     op == CDN_FILE_READ || op == CDN_FILE_LIST ? AGENT_FILE_DATA_FRAMES
                                                                                : AGENT_FILE_FRAMES);
    int r =
        cdn_agent_conn_send(&a->box->agent, CDN_FRAME_FILE, more ? CDN_FRAME_MORE : 0, ch, buf, (uint32_t) n);
    if (r < 0)
        cdn_agent_conn_remove(&a->box->agent, &a->areq);
    a->busy = r >= 0;
    return r;
}

/* ---------------------------------------------------------------- upload */

/* The rest of a file, a chunk at a time while init's queue holds less than UPLOAD_AHEAD. */
static void upload_more(struct arch_call *a)
{
    struct agent_conn *ac = &a->box->agent;
    int r = 0;
    while (r == 0 && ac->bev && a->rest_len > 0 &&
           evbuffer_get_length(bufferevent_get_output(ac->bev)) < UPLOAD_AHEAD) {
        size_t k = a->rest_len < CHUNK ? a->rest_len : CHUNK;
        r = cdn_agent_conn_send(ac, CDN_FRAME_DATA, a->rest_len > k ? CDN_FRAME_MORE : 0, a->areq.channel,
                                a->rest, (uint32_t) k);
        a->rest += k, a->rest_len -= k;
    }
    if (r < 0 || a->rest_len == 0)
        upload_stop(a);
}

static void on_agent_output(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    (void) buf;
    struct arch_call *a = arg;
    static bool in; /* its own sends call back too */
    if (info->n_deleted && !in) {
        in = true;
        upload_more(a);
        in = false;
    }
}

static void up_next(struct arch_call *a)
{
    if (a->client_gone || a->next >= a->plan.n)
        return end(a, 200, NULL, NULL);
    const struct archive_entry_plan *e = &a->plan.ents[a->next++];
    (void) snprintf(a->cur, sizeof a->cur, "%s", e->name);
    int r;
    if (e->type == S_IFDIR)
        r = send_op(a, CDN_FILE_MKDIR, e->mode, NULL, NULL, NULL, 0, false);
    else if (e->type == S_IFLNK)
        r = send_op(a, CDN_FILE_SYMLINK, 0, NULL, e->target, NULL, 0, false);
    else {
        size_t first = e->size < CHUNK ? e->size : CHUNK;
        a->rest = e->data + first, a->rest_len = e->size - first;
        a->bytes += e->size;
        r = send_op(a, CDN_FILE_WRITE, e->mode, NULL, NULL, e->data, first, a->rest_len > 0);
        if (r >= 0 && a->rest_len &&
            !(a->upload_cb = evbuffer_add_cb(bufferevent_get_output(a->box->agent.bev), on_agent_output, a)))
            (void) cdn_agent_conn_send(&a->box->agent, CDN_FRAME_CANCEL, 0, a->areq.channel, NULL, 0);
        else if (r >= 0 && a->rest_len)
            upload_more(a);
    }
    if (r >= 0)
        return; /* init answers (or the connection's end does) */
    end(a, r == -ENAMETOOLONG ? 400 : 500, "file_error", "entry '%.1024s': %s", a->cur,
        r == -ENAMETOOLONG ? "the path is too long" : "cannot reach the sandbox's agent");
}

/* ---------------------------------------------------------------- download */

static la_ssize_t to_out(struct archive *ar, void *arg, const void *p, size_t len)
{
    (void) ar;
    struct arch_call *a = arg;
    return evbuffer_add(a->out, p, len) == 0 ? (la_ssize_t) len : -1;
}

static size_t client_backlog(struct arch_call *a)
{
    struct evhttp_connection *conn =
        a->client_gone || a->replied ? NULL : evhttp_request_get_connection(a->req);
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

static void down_next(struct arch_call *a);

static void on_drained(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    struct arch_call *a = arg;
    if (a->waiting && client_backlog(a) < OUT_HIGH) {
        a->waiting = false;
        down_next(a);
    } else if (a->busy && a->op == CDN_FILE_READ && !a->cancelled && a->inflight < READ_WINDOW / 2 &&
               client_backlog(a) < OUT_HIGH) {
        uint32_t more = READ_WINDOW - (uint32_t) a->inflight;
        uint8_t le[4] = {(uint8_t) more, (uint8_t) (more >> 8), (uint8_t) (more >> 16),
                         (uint8_t) (more >> 24)};
        if (cdn_agent_conn_send(&a->box->agent, CDN_FRAME_WINDOW, 0, a->areq.channel, le, sizeof le) == 0)
            a->inflight += more;
    }
}

static void flush(struct arch_call *a)
{
    if (a->client_gone || a->replied || evbuffer_get_length(a->out) == 0)
        return;
    if (!a->started) {
        evhttp_add_header(evhttp_request_get_output_headers(a->req), "Content-Type", "application/x-tar");
        evhttp_send_reply_start(a->req, 200, "OK");
        cdn_api_stream_timeout(a->req);
        a->started = true;
    }
    evhttp_send_reply_chunk_with_cb(a->req, a->out, on_drained, a);
}

static int header(struct arch_call *a, const struct down_entry *d, const char *link)
{
    struct archive_entry *e = archive_entry_new();
    if (!e)
        return -ENOMEM;
    archive_entry_set_pathname(e, d->rel);
    archive_entry_set_mode(e, d->mode);
    archive_entry_set_size(e, S_ISREG(d->mode) ? (la_int64_t) d->size : 0);
    archive_entry_set_mtime(e, d->mtime, 0);
    if (link)
        archive_entry_set_symlink(e, link);
    int r = archive_write_header(a->ar, e);
    archive_entry_free(e);
    return r == ARCHIVE_OK ? 0 : -EIO;
}

/* LIST's entries, appended to the tree. */
static int add_listed(struct arch_call *a, const uint8_t *p, uint32_t len)
{
    for (uint32_t off = 0; off < len;) {
        struct cdn_file_stat st;
        int n = cdn_file_stat_decode(p + off, len - off, &st);
        if (n <= 0)
            return -EBADMSG;
        off += (uint32_t) n;
        if (!st.name[0] || strchr(st.name, '/') || strcmp(st.name, ".") == 0 || strcmp(st.name, "..") == 0)
            continue; /* no entry of a directory: a hostile init's */
        if (a->n_d >= MAX_ENTRIES)
            return -E2BIG;
        if (a->n_d == a->cap_d) {
            size_t cap = a->cap_d ? a->cap_d * 2 : 256;
            struct down_entry *grown = realloc(a->ents_d, cap * sizeof *grown);
            if (!grown)
                return -ENOMEM;
            a->ents_d = grown, a->cap_d = cap;
        }
        char rel[8192];
        size_t n_rel = (size_t) snprintf(rel, sizeof rel, "%s%s%s", a->cur, a->cur[0] ? "/" : "", st.name);
        if (n_rel >= 4096)
            return -ENAMETOOLONG;
        if ((a->name_bytes += n_rel) > MAX_NAME_BYTES)
            return -E2BIG;
        a->ents_d[a->n_d] =
            (struct down_entry){.rel = strdup(rel), .mode = st.mode, .size = st.size, .mtime = st.mtime};
        if (!a->ents_d[a->n_d++].rel)
            return -ENOMEM;
    }
    return 0;
}

static void down_frame(struct arch_call *a, uint16_t type, const uint8_t *p, uint32_t len)
{
    if (type == CDN_FRAME_DATA && a->op == CDN_FILE_LIST) {
        int r = add_listed(a, p, len);
        if (r < 0 && !a->cancelled) {
            a->cancelled = true; /* the rest of the listing is dropped: its DONE or ERROR ends it */
            (void) cdn_agent_conn_send(&a->box->agent, CDN_FRAME_CANCEL, 0, a->areq.channel, NULL, 0);
            a->list_err = r;
        }
        return;
    }
    if (type == CDN_FRAME_DATA) { /* READ: within the window and the listed size, or it is not init */
        if (len > a->inflight || a->got + len > a->want) {
            cdn_agent_conn_fail(&a->box->agent, "a file read sent more than it was granted or listed");
            return;
        }
        a->inflight -= len;
        if (archive_write_data(a->ar, p, len) < 0 && !a->cancelled) { /* no memory: the read stops */
            a->cancelled = true;
            (void) cdn_agent_conn_send(&a->box->agent, CDN_FRAME_CANCEL, 0, a->areq.channel, NULL, 0);
        }
        a->got += len;
        flush(a);
        on_drained(NULL, a);
        return;
    }
    a->busy = false;
    bool last = type == CDN_FRAME_DONE || type == CDN_FRAME_ERROR;
    if (!last || a->violation)
        return end_failed(a, type, p, len);
    if (a->op == CDN_FILE_LIST && a->list_err)
        return a->list_err == -E2BIG
                   ? end(a, 413, "too_many_entries", "more than %d entries (or 64 MiB of names)", MAX_ENTRIES)
               : a->list_err == -EBADMSG
                   ? end(a, 502, "agent_protocol_error",
                         "the sandbox's agent sent a listing that does not decode")
                   : end(a, 500, "file_error", "listing '%.1024s': %s", a->cur, strerror(-a->list_err));
    if (a->op == CDN_FILE_LIST && type == CDN_FRAME_ERROR && !a->cur[0])
        return end_failed(a, type, p, len); /* the root itself; a directory below may go meanwhile */
    if (a->op == CDN_FILE_STAT && type == CDN_FRAME_DONE) {
        struct cdn_file_stat st;
        struct down_entry d = {.rel = a->cur, .mode = S_IFLNK | 0777};
        if (cdn_file_stat_decode(p, len, &st) > 0 && S_ISLNK(st.mode) && st.name[0])
            (void) header(a, &d, st.name);
    }
    flush(a);
    down_next(a);
}

static int depth_of(const char *rel)
{
    int depth = 1;
    for (const char *c = rel; (c = strchr(c, '/')); c++)
        depth++;
    return depth;
}

/* First every directory is listed (nothing goes out yet: a tree over max_bytes is refused whole,
 * with 413); then each entry is archived in turn. */
static void down_next(struct arch_call *a)
{
    while (!a->busy && !a->listed) {
        if (a->client_gone)
            return end(a, 499, "client_gone", NULL);
        while (a->scan < a->n_d &&
               !(S_ISDIR(a->ents_d[a->scan].mode) && depth_of(a->ents_d[a->scan].rel) < MAX_DEPTH))
            a->scan++;
        if (a->scan == a->n_d) {
            a->listed = true;
            break;
        }
        (void) snprintf(a->cur, sizeof a->cur, "%s", a->ents_d[a->scan++].rel);
        if (send_op(a, CDN_FILE_LIST, 0, NULL, NULL, NULL, 0, false) < 0)
            return end(a, 500, "file_error", "cannot reach the sandbox's agent");
        return;
    }
    if (a->busy)
        return;
    if (a->emit == 0 && a->total == 0) {
        for (size_t i = 0; i < a->n_d; i++) /* sizes are init's words: no sum may wrap */
            if (S_ISREG(a->ents_d[i].mode) && a->ents_d[i].size > a->max_bytes - a->total)
                return end(a, 413, "file_too_large",
                           "the files under '%.1024s' hold more than max_bytes (%llu)", a->root,
                           (unsigned long long) a->max_bytes);
            else if (S_ISREG(a->ents_d[i].mode))
                a->total += a->ents_d[i].size;
    }
    while (!a->busy) {
        if (a->client_gone)
            return end(a, 499, "client_gone", NULL);
        if (client_backlog(a) >= OUT_HIGH) {
            a->waiting = true; /* on_drained goes on */
            return;
        }
        if (a->got < a->want) { /* a file that shrank or failed while read: its listed size all the same */
            static const uint8_t zeros[64 << 10];
            size_t k = a->want - a->got < sizeof zeros ? (size_t) (a->want - a->got) : sizeof zeros;
            if (archive_write_data(a->ar, zeros, k) < 0)
                return end(a, 500, "internal", "out of memory");
            a->got += k;
            flush(a);
            continue;
        }
        if (a->emit == a->n_d) {
            (void) archive_write_close(a->ar);
            flush(a);
            return end(a, 200, NULL, NULL);
        }
        struct down_entry d = a->ents_d[a->emit++];
        (void) snprintf(a->cur, sizeof a->cur, "%s", d.rel);
        int r = 0;
        a->want = a->got = 0;
        if (S_ISDIR(d.mode)) {
            r = header(a, &d, NULL);
        } else if (S_ISREG(d.mode)) {
            a->want = d.size, a->inflight = READ_WINDOW;
            /* CUT: a file that grew since it was listed is read up to its listed size */
            struct cdn_file_opts o = {.flags = CDN_FILE_CUT, .window = READ_WINDOW, .max_bytes = d.size};
            if ((r = header(a, &d, NULL)) == 0 && d.size)
                r = send_op(a, CDN_FILE_READ, 0, &o, NULL, NULL, 0, false);
        } else if (S_ISLNK(d.mode)) {
            struct cdn_file_opts o = {.flags = CDN_FILE_NOFOLLOW};
            r = send_op(a, CDN_FILE_STAT, 0, &o, NULL, NULL, 0, false);
        } /* else: a device, FIFO or socket: left out */
        flush(a);
        if (r < 0)
            return end(a, 500, "file_error", "entry '%.1024s': cannot archive it (%s)", a->cur, strerror(-r));
    }
}

/* ---------------------------------------------------------------- both */

static void arch_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len)
{
    struct arch_call *a = (struct arch_call *) r;
    if (type == CDN_FRAME_VIOLATION)
        return on_violation(a, p, len);
    if (!a->upload)
        return down_frame(a, type, p, len);
    a->busy = false;
    upload_stop(a);
    if (type != CDN_FRAME_DONE || a->violation)
        return end_failed(a, type, p, len);
    up_next(a);
}

static void end_later(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    end(arg, 499, "client_gone", NULL);
}

/* init did not end what was in flight within agent_timeout of the client's leaving: its channel is
 * dropped (a late frame finds nobody) and the call ends. */
static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct arch_call *a = arg;
    cdn_agent_conn_remove(&a->box->agent, &a->areq);
    end(a, 499, "client_gone", NULL);
}

/* Its client left: what is in flight is cancelled (a download) or let finish (an upload's
 * entry); then it ends. A download waiting for its client ends now, outside evhttp's callback. */
static void leave(struct arch_call *a)
{
    if (a->client_gone)
        return;
    forget_client(a);
    a->client_gone = true;
    if (a->busy && !a->cancelled && !a->upload) {
        a->cancelled = true;
        (void) cdn_agent_conn_send(&a->box->agent, CDN_FRAME_CANCEL, 0, a->areq.channel, NULL, 0);
    }
    struct timeval now = {0}, tv = {.tv_sec = (time_t) cdn_daemon->cfg.agent_timeout_s};
    if (!a->busy && a->waiting && (a->later = evtimer_new(cdn_daemon->base, end_later, a)))
        (void) evtimer_add(a->later, &now);
    else if (a->busy && (a->deadline = evtimer_new(cdn_daemon->base, on_deadline, a)))
        (void) evtimer_add(a->deadline, &tv);
}

void cdn_api_archives_end(struct box *b)
{
    while (!LIST_EMPTY(&b->archives)) {
        struct arch_call *a = LIST_FIRST(&b->archives);
        cdn_agent_conn_remove(&b->agent, &a->areq);
        json_decref(a->violation); /* the box goes: nothing more is counted on it */
        a->violation = NULL;
        end(a, 500, "sandbox_gone", "the sandbox ended during the archive");
    }
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

void cdn_api_archive(struct evhttp_request *req, struct box *b)
{
    struct file_args args;
    struct cdn_error err = {0};
    if (!cdn_api_box_usable(req, b))
        return;
    bool upload = evhttp_request_get_command(req) == EVHTTP_REQ_PUT;
    if (cdn_file_args_parse(evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req)),
                            upload ? CDN_FILE_WRITE : CDN_FILE_READ, b->spec.workdir, &args, &err) < 0)
        return cdn_api_reply_cdn_error(req, 400, "invalid_query", &err);
    if (args.has_step)
        return cdn_api_reply_error(req, 400, "invalid_query", "step",
                                   "step: an archive is not a trajectory's step (PUT …/files is)");
    struct arch_call *a = calloc(1, sizeof *a);
    if (!a)
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    a->areq.on_frame = arch_frame;
    a->box = b, a->req = req, a->upload = upload;
    LIST_INSERT_HEAD(&b->archives, a, link);
    a->max_bytes = args.max_bytes ? args.max_bytes : cdn_daemon->cfg.max_read_bytes;
    (void) snprintf(a->root, sizeof a->root, "%s", args.path);
    (void) snprintf(a->user, sizeof a->user, "%s", args.user);
    int r;
    if (upload) {
        char msg[1200];
        struct evbuffer *body = evhttp_request_get_input_buffer(req);
        size_t len = evbuffer_get_length(body);
        int status = cdn_archive_body_parse(evbuffer_pullup(body, (ev_ssize_t) len), len,
                                            cdn_daemon->cfg.max_body_bytes, &a->plan, msg, sizeof msg);
        (void) evbuffer_drain(body, len);
        if (status) {
            call_free(a);
            return cdn_api_reply_error(req, status, status == 413 ? "too_large" : "invalid_archive", "body",
                                       "%s", msg);
        }
        r = send_op(a, CDN_FILE_MKDIR, 0755, NULL, NULL, NULL, 0, false); /* the root, then each entry */
    } else {
        a->out = evbuffer_new();
        a->ar = archive_write_new();
        r = !a->out || !a->ar ? -ENOMEM : 0;
        if (r == 0 && (archive_write_set_format_pax_restricted(a->ar) != ARCHIVE_OK ||
                       archive_write_set_bytes_per_block(a->ar, 0) != ARCHIVE_OK ||
                       archive_write_open2(a->ar, a, NULL, to_out, NULL, NULL) != ARCHIVE_OK))
            r = -EIO;
        if (r == 0)
            r = send_op(a, CDN_FILE_LIST, 0, NULL, NULL, NULL, 0, false); /* the root: its entries */
    }
    if (r < 0) {
        call_free(a);
        return cdn_api_reply_error(req, r == -ENAMETOOLONG ? 400 : 500, "file_error", "path", "%s",
                                   r == -ENAMETOOLONG ? "path is too long"
                                                      : "cannot reach the sandbox's agent");
    }
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    evhttp_connection_set_closecb(conn, on_conn_close, a);
    struct bufferevent *bev = evhttp_connection_get_bufferevent(conn);
    if (bev && (a->closed_ev = event_new(cdn_daemon->base, bufferevent_getfd(bev), EV_CLOSED, on_closed, a)))
        (void) event_add(a->closed_ev, NULL);
}
