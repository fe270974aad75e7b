/* E2B's files (docs/e2b.md): the filesystem.Filesystem service (Connect
 * protocol, JSON codec: Stat, ListDir, MakeDir, Move, Remove unary; WatchDir
 * a stream) and envd's GET|POST /files, each a view of cordond's own file
 * operations (api-files.c, struct cdn_file_view): the same frames to the
 * sandbox's init, the same limits, and a symlink into a protected path
 * counted for the sandbox as on /v1. A request that takes several operations
 * (a multi-file upload, ListDir deeper than 1, MakeDir's check first) runs
 * them one after another on the same request.
 *
 * Relative paths are the sandbox's working directory's (/home/user for a
 * sandbox E2B made), as envd takes them against the user's home. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <event2/keyvalq_struct.h>

#include "api.h"
#include "archive-body.h"
#include "core/json-util.h"
#include "e2b.h"
#include "file-args.h"
#include "multipart.h"
#include "proto/connect.h"
#include "shared/base64.h"
#include "shared/user.h"

#define LIST_ENTRIES 10000 /* entries of one ListDir, every level together */
#define LIST_DEPTH   32

enum call_kind { K_STAT, K_LIST, K_MAKEDIR, K_MOVE, K_REMOVE, K_WATCH, K_READ, K_WRITE };

struct fs_call {
    struct evhttp_request *req;
    struct box *box;
    enum call_kind kind;
    int op;          /* the operation under way */
    bool handed_on;  /* done() started the next operation: release leaves the call alone */
    char path[4096]; /* the request's */
    char to[4096];   /* Move's destination */
    char user[256];  /* who the operations run as ("": the sandbox's root) */
    bool no_owners;  /* the sandbox's init is older than entries' owners: asked without them */
    /* the operation under way, to ask again without owners (its paths are c's own) */
    const char *step_path, *step_to;
    uint32_t step_mode;
    bool step_nofollow, step_recursive;
    /* ListDir: the directories still to list (each with its level), the entries so far */
    char **dirs;
    unsigned *levels;
    size_t head, n_dirs, dirs_cap; /* dirs[head..n_dirs) still to list */
    unsigned depth, level;
    char dir[4096]; /* the one being listed */
    json_t *entries;
    /* POST /files: the files, written one after the other */
    struct evbuffer **bodies;
    char (*names)[4096];
    size_t n_files, next;
    json_t *written;
};

static void fs_call_free(struct fs_call *c)
{
    if (!c)
        return;
    for (size_t i = c->head; i < c->n_dirs; i++)
        free(c->dirs[i]);
    free(c->dirs);
    free(c->levels);
    json_decref(c->entries);
    for (size_t i = 0; i < c->n_files; i++)
        if (c->bodies[i])
            evbuffer_free(c->bodies[i]);
    free(c->bodies);
    free(c->names);
    json_decref(c->written);
    free(c);
}

/* ---- paths and entries ---- */

/* p as envd takes it: "~" and "~/…" the home, relative ones against it. */
static int resolve(const char *home, const char *p, char out[4096])
{
    if (p[0] == '~' && (p[1] == 0 || p[1] == '/'))
        p += 1 + (p[1] == '/');
    int n =
        p[0] == '/' ? snprintf(out, 4096, "%s", p) : snprintf(out, 4096, "%s%s%s", home, p[0] ? "/" : "", p);
    return n < 0 || n >= 4096 ? -ENAMETOOLONG : 0;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s && s[1] ? s + 1 : path;
}

static const char *file_type(const char *t)
{
    return strcmp(t, "dir") == 0       ? "FILE_TYPE_DIRECTORY"
           : strcmp(t, "file") == 0    ? "FILE_TYPE_FILE"
           : strcmp(t, "symlink") == 0 ? "FILE_TYPE_SYMLINK"
                                       : "FILE_TYPE_UNSPECIFIED";
}

/* E2B's EntryInfo: name, type, path, size (a string: protobuf's int64), mode, permissions as ls
 * shows them, owner and group (their names in the sandbox, init-files.c; stolen, NULL: ""),
 * modifiedTime (RFC 3339). */
static json_t *entry_info(const char *path, const char *type, uint64_t size, uint32_t mode, int64_t mtime,
                          const char *target, json_t *owner, json_t *group)
{
    char perms[11], when[32], sz[24];
    perms[0] = type[0] == 'd' ? 'd' : type[0] == 's' ? 'l' : '-';
    static const char rwx[] = "rwxrwxrwx";
    for (int i = 0; i < 9; i++)
        perms[1 + i] = mode & (0400u >> i) ? rwx[i] : '-';
    perms[10] = 0;
    time_t t = (time_t) mtime;
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm))
        (void) snprintf(when, sizeof when, "1970-01-01T00:00:00Z");
    (void) snprintf(sz, sizeof sz, "%llu", (unsigned long long) size);
    json_t *o = json_pack(
        "{s:o, s:s, s:o, s:s, s:i, s:s, s:o, s:o, s:s}", "name",
        cdn_json_lossy_string((const uint8_t *) base_name(path), strlen(base_name(path))), "type",
        file_type(type), "path", cdn_json_lossy_string((const uint8_t *) path, strlen(path)), "size", sz,
        "mode", (int) (mode & 07777), "permissions", perms, "owner", owner ? owner : json_string(""), "group",
        group ? group : json_string(""), "modifiedTime", when);
    if (o && target && target[0])
        json_object_set_new(o, "symlinkTarget",
                            cdn_json_lossy_string((const uint8_t *) target, strlen(target)));
    return o;
}

static json_t *stat_entry(const char *path, const struct cdn_file_stat *st)
{
    const char *type = S_ISDIR(st->mode)   ? "dir"
                       : S_ISREG(st->mode) ? "file"
                       : S_ISLNK(st->mode) ? "symlink"
                                           : "";
    json_t *owner = st->owner ? cdn_json_lossy_string((const uint8_t *) st->owner, strlen(st->owner)) : NULL,
           *group = st->group ? cdn_json_lossy_string((const uint8_t *) st->group, strlen(st->group)) : NULL;
    return entry_info(path, type, st->size, st->mode, st->mtime, S_ISLNK(st->mode) ? st->name : NULL, owner,
                      group);
}

/* ---- answers ---- */

static const char *rpc_code(int status, int errnum)
{
    if (errnum == EEXIST)
        return "already_exists";
    switch (status) {
    case 400:
        return "invalid_argument";
    case 403:
        return "permission_denied";
    case 404:
        return "not_found";
    case 409:
        return "failed_precondition"; /* not empty */
    case 413:
    case 507:
        return "resource_exhausted";
    case 502:
        return "unavailable";
    default:
        return "internal";
    }
}

static int rpc_status(const char *code)
{
    return strcmp(code, "invalid_argument") == 0      ? 400
           : strcmp(code, "permission_denied") == 0   ? 403
           : strcmp(code, "not_found") == 0           ? 404
           : strcmp(code, "already_exists") == 0      ? 409
           : strcmp(code, "failed_precondition") == 0 ? 400
           : strcmp(code, "resource_exhausted") == 0  ? 429
           : strcmp(code, "unavailable") == 0         ? 503
                                                      : 500;
}

static void call_error(struct fs_call *c, int status, int errnum, const char *msg)
{
    if (c->kind == K_READ || c->kind == K_WRITE)
        return cdn_e2b_reply_error(c->req, status, "%s", msg);
    const char *code = rpc_code(status, errnum);
    if (c->kind == K_WATCH)
        return cdn_e2b_stream_refuse(c->req, code, "%s", msg);
    cdn_e2b_unary_error(c->req, rpc_status(code), code, msg);
}

/* ---- the operations ---- */

static const struct cdn_file_view view;

/* The next operation of c: op on path (to: a move's). On failure it is answered, and the caller's
 * release frees c (handed_on stays false). */
static void step(struct fs_call *c, int op, const char *path, const char *to, uint32_t mode,
                 struct evbuffer *body, bool nofollow, bool recursive)
{
    struct file_args a = {.nofollow = nofollow, .recursive = recursive, .owners = !c->no_owners};
    c->step_path = path, c->step_to = to, c->step_mode = mode;
    c->step_nofollow = nofollow, c->step_recursive = recursive;
    (void) snprintf(a.path, sizeof a.path, "%s", path);
    (void) snprintf(a.user, sizeof a.user, "%s", c->user);
    (void) snprintf(a.to, sizeof a.to, "%s", to ? to : "");
    c->op = op;
    int r = cdn_api_file_start(c->req, c->box, op, mode, &a, &view, c, body);
    if (r == 0) {
        c->handed_on = true;
        return;
    }
    call_error(c, r == -ENOBUFS ? 400 : 500, 0,
               r == -ENOBUFS  ? "path: too long"
               : r == -ENOMEM ? "out of memory"
                              : "cannot reach the sandbox's agent");
}

static bool list_next(struct fs_call *c)
{
    if (c->head == c->n_dirs)
        return false;
    char *d = c->dirs[c->head];
    c->level = c->levels[c->head++];
    (void) snprintf(c->dir, sizeof c->dir, "%s", d);
    free(d);
    step(c, CDN_FILE_LIST, c->dir, NULL, 0, NULL, false, false);
    return true;
}

static int list_push(struct fs_call *c, const char *dir, unsigned level)
{
    if (c->n_dirs == c->dirs_cap) {
        size_t cap = c->dirs_cap ? c->dirs_cap * 2 : 16;
        char **d = realloc(c->dirs, cap * sizeof *d);
        if (d)
            c->dirs = d;
        unsigned *l = d ? realloc(c->levels, cap * sizeof *l) : NULL;
        if (!l)
            return -ENOMEM;
        c->levels = l;
        c->dirs_cap = cap;
    }
    if (!(c->dirs[c->n_dirs] = strdup(dir)))
        return -ENOMEM;
    c->levels[c->n_dirs++] = level;
    return 0;
}

static void list_done(struct fs_call *c, json_t *entries)
{
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *b64 = json_string_value(json_object_get(e, "name_b64"));
        char path[4096], raw[4100];
        long k = b64 && strlen(b64) < cdn_base64_len(sizeof raw - 4)
                     ? cdn_base64_decode(b64, strlen(b64), (uint8_t *) raw)
                     : -1;
        if (k > 0 && !memchr(raw, 0, (size_t) k)) { /* the exact bytes, for the next level's path */
            raw[k] = 0;
            name = raw;
        }
        if (!name || !type || json_array_size(c->entries) >= LIST_ENTRIES ||
            snprintf(path, sizeof path, "%s%s%s", c->dir, strcmp(c->dir, "/") ? "/" : "", name) >=
                (int) sizeof path)
            continue;
        json_array_append_new(
            c->entries,
            entry_info(path, type, (uint64_t) json_integer_value(json_object_get(e, "size")),
                       (uint32_t) json_integer_value(json_object_get(e, "mode")),
                       json_integer_value(json_object_get(e, "mtime")), NULL,
                       json_incref(json_object_get(e, "owner")), json_incref(json_object_get(e, "group"))));
        if (strcmp(type, "dir") == 0 && c->level + 1 < c->depth && list_push(c, path, c->level + 1) < 0)
            return call_error(c, 500, 0, "out of memory");
    }
    if (!list_next(c))
        cdn_api_reply_json(c->req, 200, json_pack("{s:O}", "entries", c->entries));
}

static void write_next(struct fs_call *c)
{
    size_t i = c->next++;
    step(c, CDN_FILE_WRITE, c->names[i], NULL, 0644, c->bodies[i], false, false);
}

static void on_done(struct evhttp_request *req, void *arg, const struct cdn_file_stat *st, json_t *entries)
{
    (void) req;
    struct fs_call *c = arg;
    c->handed_on = false;
    switch (c->kind) {
    case K_STAT:
        return cdn_api_reply_json(c->req, 200, json_pack("{s:o}", "entry", stat_entry(c->path, st)));
    case K_LIST:
        if (c->op == CDN_FILE_STAT) { /* the path itself first: a directory, or refused as envd does */
            if (!S_ISDIR(st->mode))
                return call_error(c, 400, 0, "path: not a directory");
            return (void) list_next(c);
        }
        return list_done(c, entries);
    case K_MAKEDIR:
        if (c->op == CDN_FILE_STAT) /* it is there already */
            return S_ISDIR(st->mode) ? call_error(c, 409, EEXIST, "directory already exists")
                                     : call_error(c, 400, 0, "path: exists and is not a directory");
        return cdn_api_reply_json(c->req, 200, json_pack("{s:o}", "entry", stat_entry(c->path, st)));
    case K_MOVE:
        return cdn_api_reply_json(c->req, 200, json_pack("{s:o}", "entry", stat_entry(c->to, st)));
    case K_REMOVE:
        return cdn_api_reply_json(c->req, 200, json_object());
    case K_WRITE:
        json_array_append_new(
            c->written, json_pack("{s:o, s:s, s:o}", "name",
                                  cdn_json_lossy_string((const uint8_t *) base_name(c->names[c->next - 1]),
                                                        strlen(base_name(c->names[c->next - 1]))),
                                  "type", "file", "path",
                                  cdn_json_lossy_string((const uint8_t *) c->names[c->next - 1],
                                                        strlen(c->names[c->next - 1]))));
        if (c->next < c->n_files)
            return write_next(c);
        return cdn_api_reply_json(c->req, 200, json_incref(c->written));
    default:
        return;
    }
}

static void on_failed(struct evhttp_request *req, void *arg, int status, int errnum, const char *msg)
{
    (void) req;
    struct fs_call *c = arg;
    c->handed_on = false;
    bool owned = c->op == CDN_FILE_STAT || c->op == CDN_FILE_LIST || c->op == CDN_FILE_MKDIR ||
                 c->op == CDN_FILE_RENAME;
    if (errnum == EBADMSG && owned && !c->no_owners) { /* an init from before owners: again without */
        c->no_owners = true;
        return step(c, c->op, c->step_path, c->step_to, c->step_mode, NULL, c->step_nofollow,
                    c->step_recursive);
    }
    if (c->kind == K_MAKEDIR && c->op == CDN_FILE_STAT && errnum == ENOENT) /* not there: made */
        return step(c, CDN_FILE_MKDIR, c->path, NULL, 0755, NULL, false, false);
    if (c->kind == K_REMOVE && errnum == ENOENT) /* gone already, as envd's RemoveAll has it */
        return cdn_api_reply_json(c->req, 200, json_object());
    if (c->kind == K_READ && status == 404)
        return cdn_e2b_reply_error(c->req, 404, "path '%s' does not exist", c->path);
    call_error(c, status, errnum, msg);
}

static void on_watch_begin(struct evhttp_request *req, void *arg)
{
    (void) arg;
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/connect+json");
    evhttp_send_reply_start(req, 200, "OK");
}

static void add_envelope(struct evbuffer *out, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s)
        return;
    uint8_t h[CDN_CONNECT_HEADER];
    cdn_connect_header(h, 0, (uint32_t) strlen(s));
    (void) evbuffer_add(out, h, sizeof h);
    (void) evbuffer_add(out, s, strlen(s));
    free(s);
}

static void on_watch_event(void *arg, struct evbuffer *out, int kind, const char *name, bool dir)
{
    (void) arg, (void) dir;
    static const char *const types[] = {
        [CDN_WATCH_CREATE] = "EVENT_TYPE_CREATE",    [CDN_WATCH_WRITE] = "EVENT_TYPE_WRITE",
        [CDN_WATCH_REMOVE] = "EVENT_TYPE_REMOVE",    [CDN_WATCH_RENAME_FROM] = "EVENT_TYPE_RENAME",
        [CDN_WATCH_RENAME_TO] = "EVENT_TYPE_CREATE", /* envd: the new name appears */
        [CDN_WATCH_CHMOD] = "EVENT_TYPE_CHMOD",
    };
    if (kind == CDN_WATCH_START)
        return add_envelope(out, json_pack("{s:{}}", "start"));
    if (kind < 0 || kind >= (int) (sizeof types / sizeof types[0]) || !types[kind])
        return; /* an overflow: E2B has no word for it */
    add_envelope(out,
                 json_pack("{s:{s:o, s:s}}", "filesystem", "name",
                           cdn_json_lossy_string((const uint8_t *) name, strlen(name)), "type", types[kind]));
}

static void on_watch_end(struct evhttp_request *req, void *arg)
{
    (void) arg;
    cdn_e2b_envelope(req, CDN_CONNECT_END_STREAM, json_object());
    evhttp_send_reply_end(req);
}

static void on_keepalive(void *arg, struct evbuffer *out)
{
    (void) arg;
    add_envelope(out, json_pack("{s:{}}", "keepalive"));
}

static void on_release(void *arg)
{
    struct fs_call *c = arg;
    if (c->handed_on)
        c->handed_on = false; /* the next operation holds it */
    else
        fs_call_free(c);
}

static const struct cdn_file_view view = {
    .done = on_done,
    .failed = on_failed,
    .watch_begin = on_watch_begin,
    .watch_event = on_watch_event,
    .watch_end = on_watch_end,
    .keepalive = on_keepalive,
    .release = on_release,
};

/* ---- filesystem.Filesystem ---- */

/* A call as user (NULL: the one the request's Authorization names, else the sandbox's own, as
 * envd's default user); NULL, answered, when that is no user name. */
static struct fs_call *call_new(struct evhttp_request *req, struct box *b, enum call_kind kind,
                                const char *user)
{
    _cleanup_free_ char *named = user ? NULL : cdn_e2b_request_user(req);
    const char *who = user ? user : named ? named : b->spec.user ? b->spec.user : "";
    struct cdn_error err = {0};
    if (who[0] && cdn_user_check(who, &err) < 0) {
        call_error(&(struct fs_call){.req = req, .kind = kind}, 400, EINVAL, err.msg);
        return NULL;
    }
    struct fs_call *c = calloc(1, sizeof *c);
    if (!c) {
        call_error(&(struct fs_call){.req = req, .kind = kind}, 500, 0, "out of memory");
        return NULL;
    }
    c->req = req;
    c->box = b;
    c->kind = kind;
    (void) snprintf(c->user, sizeof c->user, "%s", who);
    return c;
}

/* A string field of an RPC's request, resolved as a path into out; false (answered) when it is not. */
static bool path_field(struct fs_call *c, json_t *o, const char *field, char out[4096])
{
    json_t *v = json_object_get(o, field);
    char msg[128];
    if (!json_is_string(v) || !json_string_value(v)[0]) {
        (void) snprintf(msg, sizeof msg, "%s: expected a path", field);
        call_error(c, 400, 0, msg);
        return false;
    }
    if (resolve(c->box->spec.workdir, json_string_value(v), out) < 0) {
        (void) snprintf(msg, sizeof msg, "%s: longer than 4095 bytes", field);
        call_error(c, 400, 0, msg);
        return false;
    }
    return true;
}

void cdn_e2b_filesystem(struct evhttp_request *req, struct box *b, const char *method)
{
    static const struct {
        const char *name;
        enum call_kind kind;
    } methods[] = {{"Stat", K_STAT}, {"ListDir", K_LIST},  {"MakeDir", K_MAKEDIR},
                   {"Move", K_MOVE}, {"Remove", K_REMOVE}, {"WatchDir", K_WATCH}};
    size_t m = 0;
    while (m < sizeof methods / sizeof methods[0] && strcmp(methods[m].name, method) != 0)
        m++;
    if (evhttp_request_get_command(req) != EVHTTP_REQ_POST)
        return cdn_e2b_unary_error(req, 405, "unimplemented", "Connect RPCs are POSTs");
    if (m == sizeof methods / sizeof methods[0])
        return cdn_e2b_unary_error(
            req, 404, "unimplemented",
            strncmp(method, "CreateWatcher", 13) == 0 || strcmp(method, "GetWatcherEvents") == 0 ||
                    strcmp(method, "RemoveWatcher") == 0
                ? "filesystem.Filesystem: the polling watchers are not supported by cordon "
                  "(use WatchDir)"
                : "filesystem.Filesystem: no such method");
    enum call_kind kind = methods[m].kind;
    char why[400];
    json_error_t je;
    _cleanup_json_ json_t *o = NULL;
    if (kind == K_WATCH) {
        if (!(o = cdn_e2b_stream_request(req, why, sizeof why)))
            return cdn_e2b_stream_refuse(req, "invalid_argument", "%s", why);
    } else {
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(in);
        o = n ? json_loadb((const char *) evbuffer_pullup(in, (ev_ssize_t) n), n, JSON_REJECT_DUPLICATES, &je)
              : json_object();
        if (!json_is_object(o))
            return cdn_e2b_unary_error(req, 400, "invalid_argument", "the request: expected a JSON object");
    }
    struct fs_call *c = call_new(req, b, kind, NULL);
    if (!c)
        return;
    if (!path_field(c, o, kind == K_MOVE ? "source" : "path", c->path) ||
        (kind == K_MOVE && !path_field(c, o, "destination", c->to)))
        return fs_call_free(c);
    json_t *depth = json_object_get(o, "depth");
    switch (kind) {
    case K_STAT:
        step(c, CDN_FILE_STAT, c->path, NULL, 0, NULL, true, false);
        break;
    case K_LIST:
        if (json_is_null(depth))
            depth = NULL;
        if (depth && (!json_is_integer(depth) || json_integer_value(depth) < 0 ||
                      json_integer_value(depth) > LIST_DEPTH)) {
            call_error(c, 400, 0, "depth: expected 1 to 32");
            break;
        }
        c->depth = depth && json_integer_value(depth) ? (unsigned) json_integer_value(depth) : 1;
        if (!(c->entries = json_array()) || list_push(c, c->path, 0) < 0) {
            call_error(c, 500, 0, "out of memory");
            break;
        }
        step(c, CDN_FILE_STAT, c->path, NULL, 0, NULL, false, false);
        break;
    case K_MAKEDIR:
        step(c, CDN_FILE_STAT, c->path, NULL, 0, NULL, true, false);
        break;
    case K_MOVE:
        step(c, CDN_FILE_RENAME, c->path, c->to, 0, NULL, false, false);
        break;
    case K_REMOVE:
        step(c, CDN_FILE_REMOVE, c->path, NULL, 0, NULL, false, false);
        break;
    case K_WATCH:
        if (json_is_true(json_object_get(o, "includeEntry"))) {
            call_error(c, 400, 0, "includeEntry: not supported by cordon (docs/e2b.md)");
            break;
        }
        step(c, CDN_FILE_WATCH, c->path, NULL, 0, NULL, false, json_is_true(json_object_get(o, "recursive")));
        break;
    default:
        break;
    }
    if (!c->handed_on)
        fs_call_free(c);
    else
        c->handed_on = false; /* from now on release frees it */
}

/* ---- GET|POST /files ---- */

/* ?path= and ?username= (who reads or writes; NULL, as an absent path: not given). False
 * (answered) for anything else. */
static bool files_query(struct evhttp_request *req, char **path, char **user)
{
    const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    struct evkeyvalq kv;
    TAILQ_INIT(&kv);
    *path = *user = NULL;
    if (q && (evhttp_parse_query_str(q, &kv) < 0 || strstr(q, "%00"))) {
        evhttp_clear_headers(&kv);
        cdn_e2b_reply_error(req, 400, "the query: malformed");
        return false;
    }
    for (struct evkeyval *e = kv.tqh_first; e; e = e->next.tqe_next) {
        bool is_path = strcmp(e->key, "path") == 0, is_user = strcmp(e->key, "username") == 0;
        bool twice = (is_path && *path) || (is_user && *user);
        if (!twice && (is_path || is_user) && e->value[0])
            *(is_path ? path : user) = strdup(e->value);
        else if (twice || !is_user) {
            cdn_e2b_reply_error(req, 400,
                                twice ? "%.64s: given twice"
                                      : "%.64s: unknown parameter (this route takes path, username)",
                                e->key);
            evhttp_clear_headers(&kv);
            free(*path);
            free(*user);
            *path = *user = NULL;
            return false;
        }
    }
    evhttp_clear_headers(&kv);
    return true;
}

static void free_bytes(const void *data, size_t len, void *arg)
{
    (void) len, (void) arg;
    free((void *) data);
}

static bool metadata_header(struct evhttp_request *req)
{
    const struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    for (const struct evkeyval *e = h->tqh_first; e; e = e->next.tqe_next)
        if (strncasecmp(e->key, "X-Metadata-", 11) == 0)
            return true;
    return false;
}

/* The files of a POST's body, as (path, bytes) into c; false (answered) when it is malformed. */
static bool upload_files(struct fs_call *c, const char *qpath)
{
    struct evhttp_request *req = c->req;
    const struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *type = evhttp_find_header(h, "Content-Type"),
               *enc = evhttp_find_header(h, "Content-Encoding");
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    char boundary[71];
    bool multipart = cdn_multipart_boundary(type, boundary) == 0;
    if (type && !multipart && strncasecmp(type, "multipart/", 10) == 0) {
        cdn_e2b_reply_error(req, 400, "Content-Type: a multipart body needs its boundary");
        return false;
    }
    if (enc && strcasecmp(enc, "identity") != 0 && (strcasecmp(enc, "gzip") != 0 || multipart)) {
        cdn_e2b_reply_error(req, 400, "Content-Encoding '%.32s': only gzip, of an octet-stream body", enc);
        return false;
    }
    size_t max = multipart ? CDN_MULTIPART_PARTS : 1;
    c->bodies = calloc(max, sizeof *c->bodies);
    c->names = calloc(max, sizeof *c->names);
    _cleanup_free_ struct cdn_multipart_part *parts = multipart ? calloc(max, sizeof *parts) : NULL;
    if (!c->bodies || !c->names || (multipart && !parts) || !(c->written = json_array())) {
        cdn_e2b_reply_error(req, 500, "out of memory");
        return false;
    }
    if (!multipart) {
        if (!qpath) {
            cdn_e2b_reply_error(req, 400, "path: required for an octet-stream upload");
            return false;
        }
        if (!(c->bodies[0] = evbuffer_new())) {
            cdn_e2b_reply_error(req, 500, "out of memory");
            return false;
        }
        c->n_files = 1;
        (void) snprintf(c->names[0], sizeof c->names[0], "%s", c->path);
        if (!enc || strcasecmp(enc, "gzip") != 0) {
            evbuffer_add_buffer(c->bodies[0], in);
            return true;
        }
        size_t n = evbuffer_get_length(in), out_len = 0;
        uint8_t *out = NULL;
        char msg[300];
        int st = cdn_gunzip_body(n ? evbuffer_pullup(in, (ev_ssize_t) n) : (const uint8_t *) "", n,
                                 cdn_daemon->cfg.max_body_bytes, &out, &out_len, msg, sizeof msg);
        if (st) {
            cdn_e2b_reply_error(req, st, "%s", msg);
            return false;
        }
        (void) evbuffer_drain(in, n); /* the packed bytes go at once */
        /* the unpacked ones are handed over, not copied (freed with the buffer) */
        if (!out_len)
            free(out);
        else if (evbuffer_add_reference(c->bodies[0], out, out_len, free_bytes, NULL) < 0) {
            free(out);
            cdn_e2b_reply_error(req, 500, "out of memory");
            return false;
        }
        return true;
    }
    size_t n = evbuffer_get_length(in), k = 0;
    const uint8_t *body = n ? evbuffer_pullup(in, (ev_ssize_t) n) : (const uint8_t *) "";
    char msg[300];
    int r = cdn_multipart_parse(body, n, boundary, parts, max, &k, msg, sizeof msg);
    if (r < 0) {
        cdn_e2b_reply_error(req, 400, "the multipart body: %s", msg);
        return false;
    }
    if (k == 0 || (qpath && k > 1)) {
        cdn_e2b_reply_error(req, 400,
                            k ? "path: given, with more than one file in the body (each part's filename "
                                "names its path)"
                              : "the multipart body holds no file");
        return false;
    }
    size_t taken = 0; /* each file's bytes moved out of the body, not copied */
    for (size_t i = 0; i < k; i++) {
        const char *p = qpath ? c->path : parts[i].filename;
        if (!p[0]) {
            cdn_e2b_reply_error(req, 400, "part %zu: no filename (the file's path) and no ?path=", i);
            return false;
        }
        if (resolve(c->box->spec.workdir, p, c->names[i]) < 0) {
            cdn_e2b_reply_error(req, 400, "part %zu: its path is longer than 4095 bytes", i);
            return false;
        }
        c->n_files = i + 1;
        if (!(c->bodies[i] = evbuffer_new()) || evbuffer_drain(in, parts[i].off - taken) < 0 ||
            evbuffer_remove_buffer(in, c->bodies[i], parts[i].len) != (int) parts[i].len) {
            cdn_e2b_reply_error(req, 500, "out of memory");
            return false;
        }
        taken = parts[i].off + parts[i].len;
    }
    return true;
}

void cdn_e2b_files(struct evhttp_request *req, struct box *b)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    if (m != EVHTTP_REQ_GET && m != EVHTTP_REQ_POST)
        return cdn_e2b_reply_error(req, 405, "/files: GET or POST");
    _cleanup_free_ char *qpath = NULL, *quser = NULL;
    if (!files_query(req, &qpath, &quser))
        return;
    if (m == EVHTTP_REQ_POST && metadata_header(req))
        return cdn_e2b_reply_error(req, 400,
                                   "X-Metadata-*: file metadata is not supported by cordon (docs/e2b.md)");
    struct fs_call *c = call_new(req, b, m == EVHTTP_REQ_GET ? K_READ : K_WRITE, quser);
    if (!c)
        return;
    if (qpath && resolve(b->spec.workdir, qpath, c->path) < 0) {
        fs_call_free(c);
        return cdn_e2b_reply_error(req, 400, "path: longer than 4095 bytes");
    }
    if (m == EVHTTP_REQ_GET) {
        if (!qpath) {
            fs_call_free(c);
            return cdn_e2b_reply_error(req, 400, "path: required");
        }
        step(c, CDN_FILE_READ, c->path, NULL, 0, NULL, false, false);
    } else if (upload_files(c, qpath))
        write_next(c);
    if (!c->handed_on)
        fs_call_free(c);
    else
        c->handed_on = false;
}
