/* cordond's HTTP API (DESIGN §4): routing, sandboxes, events, health, metrics.
 * Exec and files are in api-exec.c.
 *
 * Runs in the loop. Clients are trusted as far as the socket lets them in
 * (unix socket mode 0600: root; TCP: the bearer token); their requests are
 * still hostile input: every body is parsed with jansson, every field
 * checked, and every error is a JSON body naming the field and the reason. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/keyvalq_struct.h>

#include "api.h"
#include "e2b.h"
#include "images.h"
#include "record.h"
#include "trajectory.h"
#include "update-args.h"
#include "core/json-util.h"
#include "tiers/tier.h"

/* A client following a sandbox: its events, or (tick set) its usage every interval. */
struct follower {
    struct evhttp_request *req;
    struct box *box;
    struct event *tick;
    LIST_ENTRY(follower) link;
};

void cdn_api_send_line(struct evhttp_request *req, json_t *body)
{
    _cleanup_free_ char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    _cleanup_evbuffer_ struct evbuffer *chunk = s ? evbuffer_new() : NULL;
    if (!chunk)
        return;
    evbuffer_add(chunk, s, strlen(s));
    evbuffer_add(chunk, "\n", 1);
    evhttp_send_reply_chunk(req, chunk);
}

/* One NDJSON line to a follower (body taken). */
static void follower_line(struct follower *f, json_t *body)
{
    cdn_api_send_line(f->req, body);
}

/* ---- replies ---- */

void cdn_api_reply_json(struct evhttp_request *req, int status, json_t *body)
{
    _cleanup_evbuffer_ struct evbuffer *buf = evbuffer_new();
    _cleanup_free_ char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!buf || !s) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    evbuffer_add(buf, s, strlen(s));
    evbuffer_add(buf, "\n", 1);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    if (status >= 400)
        cdn_daemon->http_errors++;
    evhttp_send_reply(req, status, status < 300 ? "OK" : status < 500 ? "Bad Request" : "Error", buf);
}

json_t *cdn_api_error_json(const char *code, const char *field, const char *msg)
{
    /* message and field may quote the client's bytes, cut anywhere: never let them break the JSON */
    json_t *e = json_pack("{s:s, s:o}", "code", code, "message",
                          cdn_json_lossy_string((const uint8_t *) msg, strlen(msg)));
    if (e && field && field[0])
        json_object_set_new(e, "field", cdn_json_lossy_string((const uint8_t *) field, strlen(field)));
    return json_pack("{s:o}", "error", e);
}

void cdn_api_reply_error(struct evhttp_request *req, int status, const char *code, const char *field,
                         const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    (void) vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cdn_api_reply_json(req, status, cdn_api_error_json(code, field, msg));
}

void cdn_api_reply_cdn_error(struct evhttp_request *req, int status, const char *code,
                             const struct cdn_error *e)
{
    cdn_api_reply_error(req, status, code, e->field, "%s", e->msg);
}

void cdn_api_stream_timeout(struct evhttp_request *req)
{
    /* A stream may be quiet for as long as its command: the 300 s request
     * timeout must not cut it (and kill the command). A day, not forever. */
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    if (conn)
        evhttp_connection_set_timeout(conn, 24 * 3600);
}

/* ---- request helpers ---- */

static char *body_string(struct evhttp_request *req, size_t *ret_len)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    evbuffer_copyout(in, s, n);
    s[n] = 0;
    *ret_len = n;
    return s;
}

/* The request's body as JSON; NULL when it is empty or does not parse. */
static json_t *body_json(struct evhttp_request *req)
{
    size_t n;
    _cleanup_free_ char *body = body_string(req, &n);
    return body && n ? json_loadb(body, n, 0, NULL) : NULL;
}

/* Label filter "k=v" from ?label=…; several labels must all match. */
static bool labels_match(const struct box *b, const struct evkeyvalq *q)
{
    for (const struct evkeyval *kv = q->tqh_first; kv; kv = kv->next.tqe_next) {
        if (strcmp(kv->key, "label") != 0)
            continue;
        bool found = false;
        for (size_t i = 0; i < b->spec.labels.n && !found; i++)
            found = strcmp(b->spec.labels.v[i], kv->value) == 0;
        if (!found)
            return false;
    }
    return true;
}

/* How a create ended, as the API answers it. */
static void create_answered(void *arg, struct box *b, enum cdn_box_created how, const struct cdn_error *err)
{
    struct evhttp_request *req = arg;
    switch (how) {
    case CDN_BOX_CREATED:
        cdn_api_reply_json(req, 201, cdn_box_to_json(b));
        break;
    case CDN_BOX_STOPPING:
        cdn_api_reply_cdn_error(req, 503, "stopping", err);
        break;
    case CDN_BOX_TOO_MANY:
        cdn_api_reply_cdn_error(req, 429, "too_many_sandboxes", err);
        break;
    case CDN_BOX_INVALID_SPEC:
        cdn_api_reply_cdn_error(req, 400, "invalid_spec", err);
        break;
    case CDN_BOX_FAILED:
        cdn_api_reply_cdn_error(req, 500, "sandbox_failed", err);
        break;
    }
}

/* ---- routes ---- */

static void route_create(struct evhttp_request *req)
{
    size_t n;
    _cleanup_free_ char *body = body_string(req, &n);
    struct cdn_spec spec;
    struct cdn_error err = {0};
    if (!body || cdn_spec_init(&spec) < 0) {
        cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
        return;
    }
    int r = n ? cdn_spec_from_json(&spec, body, n, &err) : 0;
    if (r >= 0)
        r = cdn_spec_validate(&spec, &err);
    if (r >= 0)
        r = cdn_bind_policy_check(&cdn_daemon->bind_policy, &spec, &err);
    if (r >= 0) /* a client's image path is a host path too (pool specs are the operator's) */
        r = cdn_bind_policy_check_image(&cdn_daemon->bind_policy, &spec, &err);
    if (r >= 0) /* and so is an OCI layout's or archive's (oci:DIR, docker-archive:FILE) */
        r = cdn_images_check_source(spec.image, "image", &err);
    if (r < 0) {
        cdn_spec_free(&spec);
        if (!err.field[0]) /* the body as a whole: not JSON, not an object */
            (void) snprintf(err.field, sizeof err.field, "body");
        cdn_api_reply_cdn_error(req, 400, "invalid_spec", &err);
        return;
    }
    struct box *b;
    /* Only with a trajectory: a walk of every box would make each create cost more with each one. */
    for (b = spec.trajectory ? LIST_FIRST(&cdn_daemon->boxes) : NULL; b; b = LIST_NEXT(b, link))
        if (b->spec.trajectory && strcmp(b->spec.trajectory, spec.trajectory) == 0 &&
            b->state != BOX_EXITED && !b->dying) {
            cdn_api_reply_error(req, 409, "trajectory_in_use", "trajectory",
                                "trajectory '%s' is sandbox %s's: one sandbox records a trajectory at a time",
                                spec.trajectory, b->sb.id);
            cdn_spec_free(&spec);
            return;
        }
    cdn_box_create(&spec, (struct cdn_box_waiter){.done = create_answered, .arg = req});
}

/* POST /v1/sandboxes/attach (cordon-runtime, docs/runtime.md): a container an OCI runtime made on this
 * host, supervised from now on. Its body names host processes and paths: only root's unix socket
 * takes it, never TCP. */
static void route_attach(struct evhttp_request *req, bool tcp)
{
    if (tcp)
        return cdn_api_reply_error(req, 403, "forbidden", NULL,
                                   "attach names host processes: only cordond's unix socket takes it");
    size_t n;
    _cleanup_free_ char *body = body_string(req, &n);
    json_error_t je;
    _cleanup_json_ json_t *o = body ? json_loadb(body, n, JSON_REJECT_DUPLICATES, &je) : NULL;
    int pid = 0, slot = -1;
    json_int_t start = 0;
    const char *cgroup = NULL, *socket = NULL;
    json_t *js = NULL;
    json_int_t ids_from = 0, ids_count = 0;
    if (!o || json_unpack_ex(o, &je, JSON_STRICT, "{s:i, s:I, s:i, s?s, s:s, s:o, s?I, s?I}", "init_pid",
                             &pid, "init_start", &start, "slot", &slot, "cgroup", &cgroup, "socket", &socket,
                             "spec", &js, "ids_from", &ids_from, "ids_count", &ids_count) < 0)
        return cdn_api_reply_error(req, 400, "invalid_request", "body",
                                   "body: {init_pid, init_start, slot, cgroup?, socket, spec, ids_from?, "
                                   "ids_count?}: %s",
                                   o ? je.text : "not JSON");
    if (ids_from < 0 || ids_from >= (1 << 30) || ids_count < 0 || ids_count > 65536 ||
        (ids_from > 0) != (ids_count > 0))
        return cdn_api_reply_error(req, 400, "invalid_request", "ids_from",
                                   "ids_from, ids_count: a range of at most 65536 host ids below 2^30");
    if (pid <= 1 || start <= 0 || slot < 0)
        return cdn_api_reply_error(req, 400, "invalid_request", "init_pid",
                                   "init_pid, init_start and slot: a running init's");
    if (socket[0] != '/' || strlen(socket) >= 108)
        return cdn_api_reply_error(req, 400, "invalid_request", "socket",
                                   "socket: an absolute path under 108 bytes");
    if (cgroup && (cgroup[0] != '/' || strstr(cgroup, "..") || strlen(cgroup) >= CDN_CGROUP_NAME_MAX))
        return cdn_api_reply_error(req, 400, "invalid_request", "cgroup",
                                   "cgroup: an absolute path without '..'");
    _cleanup_free_ char *text = json_dumps(js, JSON_COMPACT);
    struct cdn_spec spec;
    struct cdn_error err = {0};
    if (!text || cdn_spec_init(&spec) < 0)
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    /* The runtime's own, checked as its bundle was (as a record's is on adoption): not a client's
     * spec, whose checks assume what cordond makes (a workdir below /, its own root). */
    int r = cdn_spec_from_json(&spec, text, strlen(text), &err);
    if (r >= 0 && spec.tier != CDN_TIER_CONTAINER)
        r = cdn_error_field(&err, EINVAL, "tier", "tier: only container-tier sandboxes are attached");
    if (r < 0) {
        cdn_spec_free(&spec);
        return cdn_api_reply_cdn_error(req, 400, "invalid_spec", &err);
    }
    struct box *b = cdn_box_attach(&(struct cdn_box_attach){.init_pid = pid,
                                                            .init_start = (uint64_t) start,
                                                            .slot = slot,
                                                            .cgroup = cgroup,
                                                            .socket = socket,
                                                            .ids_from = (uint32_t) ids_from,
                                                            .ids_count = (uint32_t) ids_count},
                                   &spec, &err);
    if (!b)
        return cdn_api_reply_cdn_error(req, err.field[0] ? 400 : 503, "attach_failed", &err);
    cdn_api_reply_json(req, 201, cdn_box_to_json(b));
}

/* GET /v1/trajectories/{id}: the steps of a trajectory (trajectory.h); its id may hold '/'. */
static void route_trajectory(struct evhttp_request *req, const char *id)
{
    struct cdn_error err = {0};
    struct evkeyvalq q;
    TAILQ_INIT(&q);
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    if (query && evhttp_parse_query_str(query, &q) < 0)
        return cdn_api_reply_error(req, 400, "invalid_query", NULL, "the query string does not parse");
    /* Paged: ?from=K (the first step, default 0) &limit=N (1 to CDN_TRAJ_PAGE_STEPS_MAX steps). */
    uint64_t from = 0, limit = CDN_TRAJ_PAGE_STEPS;
    static const char *const names[] = {"from", "limit"};
    for (int i = 0; i < 2; i++) {
        const char *v = evhttp_find_header(&q, names[i]);
        char *end;
        errno = 0;
        unsigned long long n = v ? strtoull(v, &end, 10) : 0;
        if (v && (!isdigit((unsigned char) *v) || *end || errno || n > INT64_MAX ||
                  (i == 1 && (n < 1 || n > CDN_TRAJ_PAGE_STEPS_MAX)))) {
            evhttp_clear_headers(&q);
            return cdn_api_reply_error(req, 400, "invalid_argument", names[i],
                                       i ? "limit: a number of steps, 1 to %u" : "from: a step's index",
                                       CDN_TRAJ_PAGE_STEPS_MAX);
        }
        if (v)
            *(i ? &limit : &from) = n;
    }
    evhttp_clear_headers(&q);
    json_t *o = cdn_traj_json(id, from, limit, &err);
    if (!o)
        return cdn_api_reply_cdn_error(req,
                                       err.errnum == EINVAL   ? 400
                                       : err.errnum == ENOENT ? 404
                                                              : 500,
                                       err.errnum == EINVAL   ? "invalid_argument"
                                       : err.errnum == ENOENT ? "trajectory_not_found"
                                                              : "internal",
                                       &err);
    cdn_api_reply_json(req, 200, o);
}

/* PATCH /v1/sandboxes/{id}/network: {"mode": "allowlist"|"open", "allow": [...]}
 * replaces the sandbox's egress policy (a missing "allow" is the empty list). */
static void api_network(struct evhttp_request *req, struct box *b)
{
    json_t *o = body_json(req);
    if (!json_is_object(o)) {
        json_decref(o);
        return cdn_api_reply_error(req, 400, "invalid_network", "body",
                                   "body: expected a JSON object {\"mode\": …, \"allow\": […]}");
    }
    _cleanup_json_ json_t *wrap = json_pack("{s:o}", "network", o);
    _cleanup_free_ char *text = wrap ? json_dumps(wrap, JSON_COMPACT) : NULL;
    struct cdn_spec tmp;
    struct cdn_error err = {0};
    if (!text || cdn_spec_init(&tmp) < 0)
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    tmp.net_mode = b->spec.net_mode;
    int r = cdn_spec_from_json(&tmp, text, strlen(text), &err);
    if (r >= 0 && !cdn_api_box_usable(req, b)) {
        cdn_spec_free(&tmp);
        return;
    }
    if (r >= 0)
        r = cdn_egress_set(b, tmp.net_mode, &tmp.net_allow, &err);
    cdn_spec_free(&tmp);
    if (r < 0)
        return cdn_api_reply_cdn_error(req, 400, "invalid_network", &err);
    json_t *allow = json_array();
    for (size_t i = 0; allow && i < b->spec.net_allow.n; i++)
        json_array_append_new(allow, json_string(b->spec.net_allow.v[i]));
    cdn_api_reply_json(req, 200,
                       json_pack("{s:s, s:s, s:o, s:I}", "id", b->sb.id, "mode",
                                 cdn_net_mode_to_string(b->spec.net_mode), "allow", allow, "generation",
                                 (json_int_t) b->egress->generation));
}

/* POST …/monitor/text {"text": "…"}: free text about the sandbox (an agent's
 * message) matched against the monitor's text rules; answers the matches. */
static void api_monitor_text(struct evhttp_request *req, struct box *b)
{
    _cleanup_json_ json_t *o = body_json(req);
    json_t *t = json_object_get(o, "text");
    if (!json_is_object(o) || !json_is_string(t) || json_object_size(o) != 1)
        return cdn_api_reply_error(req, 400, "invalid_argument", "text", "body: expected {\"text\": \"…\"}");
    json_t *matches = cdn_monitor_match(b, 2, json_string_value(t), json_string_length(t));
    cdn_api_reply_json(req, 200,
                       json_pack("{s:s, s:o}", "id", b->sb.id, "alerts", matches ? matches : json_array()));
}

static void api_violations(struct evhttp_request *req, struct box *b)
{
    json_t *v = cdn_box_violations_json(b);
    if (v)
        json_object_set_new(v, "id", json_string(b->sb.id));
    cdn_api_reply_json(req, 200, v);
}

/* The query of a list or bulk delete: label=KEY=VALUE, any number (all must match). false: the
 * answer (400) has gone. */
static bool label_query(struct evhttp_request *req, struct evkeyvalq *q)
{
    TAILQ_INIT(q);
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    if (query && evhttp_parse_query_str(query, q) < 0) {
        cdn_api_reply_error(req, 400, "invalid_query", "label", "the query string does not parse");
        return false;
    }
    for (const struct evkeyval *kv = q->tqh_first; kv; kv = kv->next.tqe_next)
        if (strcmp(kv->key, "label") != 0 || !strchr(kv->value, '=')) {
            cdn_api_reply_error(req, 400, "invalid_query", kv->key,
                                "unknown parameter or not label=KEY=VALUE: '%s'", kv->key);
            evhttp_clear_headers(q);
            return false;
        }
    return true;
}

/* DELETE /v1/sandboxes?label=K=V[&label=…]: every sandbox with all of those labels, running or
 * ended; at least one label (a DELETE of everything is not one typo away). */
static void route_delete_labelled(struct evhttp_request *req)
{
    struct evkeyvalq q;
    if (!label_query(req, &q))
        return;
    if (!q.tqh_first)
        return cdn_api_reply_error(req, 400, "invalid_query", "label",
                                   "DELETE /v1/sandboxes needs at least one label=KEY=VALUE");
    json_t *ids = json_array();
    struct box *b;
    LIST_FOREACH(b, &cdn_daemon->boxes, link)
    if (!b->sibling && labels_match(b, &q))
        json_array_append_new(ids, json_string(b->sb.id));
    evhttp_clear_headers(&q);
    size_t i;
    json_t *id;
    json_array_foreach(ids, i, id) /* found again: a delete may take others with it (a sibling) */
    {
        struct box *x = cdn_box_find(json_string_value(id));
        if (x)
            cdn_box_delete(x, "deleted by request (label)");
    }
    cdn_api_reply_json(req, 200, json_pack("{s:o}", "deleted", ids));
}

static double now_unix_api(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double) t.tv_sec + (double) t.tv_nsec / 1e9;
}

/* What a PATCH changes after the protected paths: answers the sandbox, or puts back what it changed
 * (the protected paths as protect_before, the limits as before) when its record cannot be written. */
static void update_finish(struct evhttp_request *req, struct box *b, struct update_args *a,
                          const struct cdn_limits *before, const struct cdn_strv *protect_before);
static void restore_protect(struct box *b, const struct cdn_strv *protect);
static void guest_protect(struct evhttp_request *req, struct box *b, struct update_args *a,
                          const struct cdn_limits *before, struct cdn_strv *protect_before);

/* The limits as before, as far as the kernel lets them (a PATCH refused after they changed). */
static void limits_back(struct box *b, const struct update_args *a, const struct cdn_limits *before)
{
    if (a->limits)
        (void) b->sb.tier->set_limits(&b->sb, before, a->limits, NULL);
    b->spec.limits.cpus = before->cpus, b->spec.limits.memory_mb = before->memory_mb;
    b->spec.limits.pids = before->pids;
}

/* A refused change of the protected paths: 409 protect_busy (a process holds a way past a new
 * bind), 400 (a pattern), else 500. */
static void reply_protect_error(struct evhttp_request *req, int r, const struct cdn_error *err)
{
    int st = r == -EBUSY                                                                      ? 409
             : r == -ENOENT || r == -E2BIG || r == -EINVAL || r == -EOPNOTSUPP || r == -ELOOP ? 400
                                                                                              : 500;
    cdn_api_reply_cdn_error(req, st,
                            st == 409   ? "protect_busy"
                            : st == 400 ? "invalid_argument"
                                        : "internal",
                            err);
}

/* PATCH /v1/sandboxes/{id} (update-args.h): everything is checked before anything changes;
 * answers the sandbox. */
/* A new lifetime of ms from now past 7 days after the creation (a record past that would not load
 * again after a restart): true, and 400 answered naming timeout_s. */
static bool lifetime_refused(struct evhttp_request *req, struct box *b, uint64_t ms)
{
    double age = now_unix_api() - b->created_unix;
    if (age < 0)
        age = 0;
    if (age * 1e3 + (double) ms <= (double) CDN_TIMEOUT_MS_MAX)
        return false;
    cdn_api_reply_error(req, 400, "invalid_argument", "timeout_s",
                        "timeout_s: a lifetime ends at most 7 days after the creation (%.0f s from now)",
                        (double) CDN_TIMEOUT_MS_MAX / 1e3 - age);
    return true;
}

/* POST …/pause: its processes frozen until …/resume (docs/cordond.md). */
static void api_pause(struct evhttp_request *req, struct box *b)
{
    struct cdn_error err = {0};
    if (b->state != BOX_RUNNING && !cdn_api_box_usable(req, b))
        return;
    int r = cdn_box_pause(b, &err);
    if (r < 0)
        return cdn_api_reply_error(req,
                                   r == -ENOTSUP                     ? 501
                                   : r == -ETIMEDOUT || r == -EAGAIN ? 500
                                                                     : 409,
                                   r == -EALREADY ? "sandbox_paused"
                                   : r == -EBUSY  ? "verifier_running"
                                                  : "pause_failed",
                                   NULL, "%s", err.msg);
    cdn_api_reply_json(req, 200, cdn_box_to_json(b));
}

/* POST …/resume [{"timeout_s": N}]: thawed; its lifetime N s from now, else what was left of it. */
static void api_resume(struct evhttp_request *req, struct box *b)
{
    size_t n;
    _cleanup_free_ char *body = body_string(req, &n);
    json_error_t je;
    _cleanup_json_ json_t *o = body && n ? json_loadb(body, n, 0, &je) : json_object();
    json_t *t = json_object_get(o, "timeout_s");
    if (!json_is_object(o) || json_object_size(o) > (t ? 1u : 0u))
        return cdn_api_reply_error(req, 400, "invalid_argument", "body", "expected {} or {\"timeout_s\": N}");
    if (t && (!json_is_integer(t) || json_integer_value(t) < 1 ||
              json_integer_value(t) > (json_int_t) (CDN_TIMEOUT_MS_MAX / 1000)))
        return cdn_api_reply_error(req, 400, "invalid_argument", "timeout_s",
                                   "timeout_s: expected seconds, 1 to 7 days");
    if (b->state != BOX_RUNNING && !cdn_api_box_usable(req, b))
        return;
    if (t && lifetime_refused(req, b, (uint64_t) json_integer_value(t) * 1000))
        return;
    struct cdn_error err = {0};
    int r = cdn_box_resume(b, t ? (uint64_t) json_integer_value(t) * 1000 : 0, &err);
    if (r < 0)
        return cdn_api_reply_error(req, r == -EALREADY ? 409 : 500,
                                   r == -EALREADY ? "sandbox_not_paused" : "resume_failed", NULL, "%s",
                                   err.msg);
    cdn_api_reply_json(req, 200, cdn_box_to_json(b));
}

static void api_update(struct evhttp_request *req, struct box *b)
{
    size_t n;
    _cleanup_free_ char *body = body_string(req, &n);
    struct update_args a = {0};
    struct cdn_error err = {0};
    if (!body)
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    int r = cdn_update_args_parse(body, n, &b->spec, &a, &err);
    if (r < 0)
        return cdn_api_reply_cdn_error(req, r == -ENOMEM ? 500 : 400,
                                       r == -EBADMSG ? "invalid_json" : "invalid_argument", &err);
    /* A paused sandbox's clocks and labels change; what would reach its processes waits. */
    bool clocks_only = !a.on_violation && !a.protect && !a.limits;
    if (!(clocks_only && b->state == BOX_RUNNING) && !cdn_api_box_usable(req, b)) {
        cdn_update_args_free(&a);
        return;
    }
    const struct cdn_tier_ops *t = b->sb.tier;
    /* What the tier cannot change is refused before anything changes. A guest enforces its kill
     * mode itself, as told at its start; its init changes its protected paths. */
    if ((a.on_violation && t->guest_supervises) || (a.limits && !t->set_limits) ||
        (a.protect && !t->protect && !t->guest_supervises)) {
        cdn_update_args_free(&a);
        const char *f = a.on_violation && t->guest_supervises ? "on_violation"
                        : a.limits && !t->set_limits          ? "limits"
                                                              : "protect";
        return cdn_api_reply_error(req, 400, "invalid_argument", f, "%s: fixed at creation on tier %s", f,
                                   t->name);
    }
    if (b->protect_pending) { /* its end puts back or writes what it changed: nothing else meanwhile */
        cdn_update_args_free(&a);
        return cdn_api_reply_error(req, 409, "protect_busy", "protect",
                                   "a change of the protected paths is under way: patch again after it");
    }
    /* The spec's lifetime counts from the creation, and a spec's is at most 7 days (a record past
     * that would not load again after a restart). */
    if (a.life && a.life_ms && lifetime_refused(req, b, a.life_ms)) {
        cdn_update_args_free(&a);
        return;
    }
    _cleanup_(cdn_strv_free) struct cdn_strv protect_before = {0};
    for (size_t i = 0; a.protect && i < b->spec.protect.n; i++)
        if (cdn_strv_push(&protect_before, b->spec.protect.v[i]) < 0) {
            cdn_update_args_free(&a);
            return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
        }
    struct cdn_limits before = b->spec.limits;
    if (a.limits) { /* the one change the kernel may refuse (a memory limit it cannot reclaim down to) */
        r = t->set_limits(&b->sb, &a.new_limits, a.limits, &err);
        if (r < 0) {
            cdn_update_args_free(&a);
            /* Those set before the one refused go back, as far as the kernel lets them. */
            (void) t->set_limits(&b->sb, &before, a.limits, NULL);
            return cdn_api_reply_cdn_error(
                req, r == -EOPNOTSUPP || r == -EINVAL ? 400 : 409,
                r == -EOPNOTSUPP || r == -EINVAL ? "invalid_argument" : "limits_refused", &err);
        }
        b->spec.limits.cpus = a.new_limits.cpus;
        b->spec.limits.memory_mb = a.new_limits.memory_mb;
        b->spec.limits.pids = a.new_limits.pids;
    }
    /* A guest's init changes its protected paths: the rest waits for its answer. */
    if (a.protect && t->guest_supervises)
        return guest_protect(req, b, &a, &before, &protect_before);
    /* The protected paths after the limits (which the kernel may refuse); the limits go back when
     * they cannot change (a process of the sandbox holding a way in past a new one). */
    if (a.protect && (r = cdn_box_protect(b, &a.new_protect, &err)) < 0) {
        limits_back(b, &a, &before);
        cdn_update_args_free(&a);
        return reply_protect_error(req, r, &err);
    }
    update_finish(req, b, &a, &before, &protect_before);
}

static void update_finish(struct evhttp_request *req, struct box *b, struct update_args *a,
                          const struct cdn_limits *before, const struct cdn_strv *protect_before)
{
    int r = 0;
    if (a->on_violation)
        b->spec.on_violation = a->policy;
    if (a->limits || a->on_violation || a->protect)
        r = cdn_record_write(b);
    if (r >= 0 && a->labels) {
        struct cdn_strv old = b->spec.labels;
        b->spec.labels = a->merged_labels;
        a->merged_labels = old;
        r = cdn_record_write(b);
    }
    cdn_update_args_free(a);
    if (r >= 0 && a->life)
        r = cdn_box_set_lifetime(b, a->life_ms);
    if (r >= 0 && a->idle)
        r = cdn_box_set_idle(b, a->idle_ms);
    if (r < 0) {
        if (a->protect)
            restore_protect(b, protect_before);
        limits_back(b, a, before);
        (void) cdn_record_write(b); /* what it holds now, if it was written with the new ones */
        if (req)
            cdn_api_reply_error(req, 500, "internal", NULL, "the record could not be written: %s",
                                strerror(-r));
        return;
    }
    /* What it is now, not the body (which may be large and hostile): bounded by the spec's rules. */
    _cleanup_free_ char *spec = cdn_spec_to_json(&b->spec);
    _cleanup_json_ json_t *now = spec ? json_loads(spec, 0, NULL) : NULL;
    json_t *ev = json_object(), *lim = json_object_get(now, "limits");
    if (ev && a->life)
        json_object_set_new(ev, "timeout_s", json_real((double) a->life_ms / 1e3));
    if (ev && a->idle)
        json_object_set_new(ev, "idle_timeout_s", json_real((double) a->idle_ms / 1e3));
    if (ev && a->labels)
        json_object_set(ev, "labels", json_object_get(now, "labels"));
    if (ev && a->limits)
        json_object_set_new(ev, "limits",
                            json_pack("{s:O?, s:O?, s:O?}", "cpus", json_object_get(lim, "cpus"), "memory_mb",
                                      json_object_get(lim, "memory_mb"), "pids",
                                      json_object_get(lim, "pids")));
    if (ev && a->on_violation)
        json_object_set(ev, "on_violation", json_object_get(now, "on_violation"));
    if (ev && a->protect)
        json_object_set(ev, "protect", json_object_get(now, "protect"));
    cdn_box_event(b, "updated", ev);
    if (req)
        cdn_api_reply_json(req, 200, cdn_box_to_json(b));
}

/* ---- the protected paths of a VM guest ----
 * Its init binds and guards them (PROTECT, init-vm-protect.c); the PATCH waits for its answer, and
 * no other PATCH of the sandbox runs meanwhile. Past the agent timeout its client gets 504; the
 * change is still awaited, and what the guest answers then is what the sandbox's record says. */
struct guest_update {
    struct agent_req areq;      /* first: the agent connection hands this back */
    struct evhttp_request *req; /* NULL once answered (504): the change goes on unanswered. A
                                 * client that left is answered all the same (that frees it) */
    struct box *box;
    struct update_args a;
    struct cdn_limits before;
    struct cdn_strv protect_before;
    struct event *timer;
};

static int send_protect(struct box *b, struct agent_req *r, const struct cdn_strv *list)
{
    static uint8_t buf[4 + CDN_PROTECT_LIST_MAX * (CDN_PROTECT_PATTERN_MAX + 1)];
    int n = cdn_protect_list_encode(buf, sizeof buf, (const char *const *) list->v, list->n);
    if (n < 0)
        return n;
    uint32_t ch =
        cdn_agent_conn_add(&b->agent, r, AGENT_FRAME(CDN_FRAME_DONE) | AGENT_FRAME(CDN_FRAME_ERROR));
    int e = cdn_agent_conn_send(&b->agent, CDN_FRAME_PROTECT, 0, ch, buf, (uint32_t) n);
    if (e < 0)
        cdn_agent_conn_remove(&b->agent, r);
    return e;
}

struct guest_restore {
    struct agent_req areq; /* first */
    struct box *box;
    struct cdn_strv list;
};

/* The guest put the old list back: the record says so (else it keeps what the guest has). */
static void restored(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len)
{
    (void) p, (void) len;
    struct guest_restore *x = (struct guest_restore *) r;
    if (type == CDN_FRAME_DONE) {
        struct cdn_strv old = x->box->spec.protect;
        x->box->spec.protect = x->list;
        x->list = old;
        (void) cdn_record_write(x->box);
    }
    cdn_strv_free(&x->list);
    free(x);
}

/* The old list again, where a PATCH changed it and then failed (a guest: asked for, its answer not
 * awaited by anyone). */
static void restore_protect(struct box *b, const struct cdn_strv *protect)
{
    if (!b->sb.tier->guest_supervises) {
        (void) cdn_box_protect(b, protect, NULL);
        return;
    }
    struct guest_restore *x = calloc(1, sizeof *x);
    bool oom = !x;
    for (size_t i = 0; x && i < protect->n; i++)
        oom |= cdn_strv_push(&x->list, protect->v[i]) < 0;
    if (oom || send_protect(b, &x->areq, protect) < 0) {
        if (x)
            cdn_strv_free(&x->list);
        free(x);
        return;
    }
    x->box = b;
    x->areq.on_frame = restored;
}

static void guest_update_end(struct guest_update *g)
{
    if (g->timer)
        event_free(g->timer);
    g->box->protect_pending = false;
    cdn_update_args_free(&g->a);
    cdn_strv_free(&g->protect_before);
    free(g);
}

static void guest_protect_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len)
{
    struct guest_update *g = (struct guest_update *) r;
    struct box *b = g->box;
    struct cdn_error err = {0};
    int e = EIO;
    const char *msg = NULL;
    if (type == CDN_FRAME_DONE) {
        _cleanup_(cdn_strv_free) struct cdn_strv now = {0};
        bool oom = false;
        for (size_t i = 0; i < g->a.new_protect.n; i++)
            oom |= cdn_strv_push(&now, g->a.new_protect.v[i]) < 0;
        if (!oom) {
            cdn_strv_free(&b->spec.protect);
            b->spec.protect = now;
            now = (struct cdn_strv){0};
            update_finish(g->req, b, &g->a, &g->before, &g->protect_before);
            return guest_update_end(g);
        }
        restore_protect(b, &g->protect_before);
        (void) cdn_error_set(&err, ENOMEM, "out of memory");
    } else if (type == CDN_FRAME_ERROR && cdn_errmsg_decode(p, len, &e, &msg) == 0 && e > 0) {
        /* init's message names the pattern: "protect[i]: …" */
        size_t fl = strncmp(msg, "protect", 7) == 0 ? strcspn(msg, ":") : 0;
        (void) cdn_error_field(&err, e, "", "%s", msg);
        (void) snprintf(err.field, sizeof err.field, "%.*s", (int) (fl < sizeof err.field ? fl : 0), msg);
    } else {
        e = type ? EIO : ESRCH;
        (void) cdn_error_set(&err, e, type ? "the guest's agent answered %s" : "the sandbox ended first",
                             cdn_agent_frame_name(type));
    }
    if (type) /* else the sandbox is going: nothing of it to put back */
        limits_back(b, &g->a, &g->before);
    if (g->req)
        reply_protect_error(g->req, -e, &err);
    guest_update_end(g);
}

static void guest_protect_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct guest_update *g = arg;
    cdn_api_reply_error(g->req, 504, "agent_timeout", NULL,
                        "the sandbox's agent did not change its protected paths within %u s: it still may "
                        "(the sandbox's protect says when it did)",
                        cdn_daemon->cfg.agent_timeout_s);
    g->req = NULL;
}

static void guest_protect(struct evhttp_request *req, struct box *b, struct update_args *a,
                          const struct cdn_limits *before, struct cdn_strv *protect_before)
{
    struct guest_update *g = calloc(1, sizeof *g);
    if (!g) {
        limits_back(b, a, before);
        cdn_update_args_free(a);
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    }
    *g = (struct guest_update){
        .req = req, .box = b, .a = *a, .before = *before, .protect_before = *protect_before};
    *protect_before = (struct cdn_strv){0}; /* both g's now */
    g->areq.on_frame = guest_protect_frame;
    struct timeval tv = {.tv_sec = cdn_daemon->cfg.agent_timeout_s};
    if (!(g->timer = evtimer_new(cdn_daemon->base, guest_protect_timeout, g)) ||
        evtimer_add(g->timer, &tv) < 0 || send_protect(b, &g->areq, &a->new_protect) < 0) {
        limits_back(b, a, before);
        g->req = NULL;
        guest_update_end(g);
        return cdn_api_reply_error(req, 500, "internal", NULL, "cannot reach the sandbox's agent");
    }
    b->protect_pending = true;
}

static void route_list(struct evhttp_request *req)
{
    struct evkeyvalq q;
    if (!label_query(req, &q))
        return;
    json_t *arr = json_array();
    struct box *b;
    LIST_FOREACH(b, &cdn_daemon->boxes, link)
    if (!b->sibling && labels_match(b, &q))
        json_array_append_new(arr, cdn_box_to_json(b));
    evhttp_clear_headers(&q);
    cdn_api_reply_json(req, 200, json_pack("{s:o}", "sandboxes", arr));
}

static void route_health(struct evhttp_request *req)
{
    cdn_api_reply_json(req, 200,
                       json_pack("{s:s, s:s, s:i, s:s, s:{s:I, s:I, s:I, s:I, s:i}}", "status", "ok",
                                 "version", CORDON_VERSION, "sandboxes", (int) cdn_daemon->n_boxes,
                                 "writable_layers", cdn_layer_pool_fd() >= 0 ? "pool" : "ext4", "fds",
                                 "limit", (json_int_t) cdn_daemon->fd_limit, "standing",
                                 (json_int_t) cdn_daemon->fd_standing, "budget",
                                 (json_int_t) cdn_daemon->fd_budget, "used", (json_int_t) cdn_daemon->fd_used,
                                 "holding", (int) cdn_daemon->n_holding));
}

/* Prometheus text exposition. */
static void route_metrics(struct evhttp_request *req)
{
    static const double bounds_ms[] = {0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 1000, 10000};
    _cleanup_evbuffer_ struct evbuffer *b = evbuffer_new();
    evbuffer_add_printf(
        b, "# HELP cordon_sandboxes Sandboxes by state and tier.\n# TYPE cordon_sandboxes gauge\n");
    struct box *x;
    for (const struct cdn_tier_ops *const *t = cdn_tiers; *t; t++) {
        unsigned by_state[_BOX_STATE_MAX] = {0};
        LIST_FOREACH(x, &cdn_daemon->boxes, link)
        by_state[x->state] += *t == x->sb.tier; /* grouped by table entry */
        for (int s = 0; s < _BOX_STATE_MAX; s++)
            evbuffer_add_printf(b, "cordon_sandboxes{state=\"%s\",tier=\"%s\"} %u\n", cdn_box_state_name(s),
                                (*t)->name, by_state[s]);
    }
    unsigned dying = 0;
    LIST_FOREACH(x, &cdn_daemon->dying, link)
    dying++;
    evbuffer_add_printf(
        b,
        "# HELP cordon_sandboxes_tearing_down Deleted sandboxes whose teardown has not finished.\n"
        "# TYPE cordon_sandboxes_tearing_down gauge\ncordon_sandboxes_tearing_down %u\n"
        "# HELP cordon_fd_budget The fds of cordond's RLIMIT_NOFILE its sandboxes may hold (past it: 429).\n"
        "# TYPE cordon_fd_budget gauge\ncordon_fd_budget %llu\n"
        "# HELP cordon_fd_budget_used What the sandboxes holding fds (made, pooled, tearing down) take.\n"
        "# TYPE cordon_fd_budget_used gauge\ncordon_fd_budget_used %llu\n",
        dying, (unsigned long long) cdn_daemon->fd_budget, (unsigned long long) cdn_daemon->fd_used);
    evbuffer_add_printf(b,
                        "# HELP cordon_sandboxes_created_total Sandboxes that reached running.\n"
                        "# TYPE cordon_sandboxes_created_total counter\ncordon_sandboxes_created_total %llu\n"
                        "# HELP cordon_sandbox_create_errors_total Creations that failed.\n"
                        "# TYPE cordon_sandbox_create_errors_total counter\n"
                        "cordon_sandbox_create_errors_total %llu\n"
                        "# HELP cordon_http_errors_total Requests answered with a 4xx or 5xx status.\n"
                        "# TYPE cordon_http_errors_total counter\ncordon_http_errors_total %llu\n"
                        "# HELP cordon_execs_total Execs started.\n"
                        "# TYPE cordon_execs_total counter\ncordon_execs_total %llu\n"
                        "# HELP cordon_pool_size Prepared sandboxes waiting in warm pools.\n"
                        "# TYPE cordon_pool_size gauge\ncordon_pool_size %u\n"
                        "# HELP cordon_exec_duration_ms Exec round trips, request to exit.\n"
                        "# TYPE cordon_exec_duration_ms histogram\n",
                        (unsigned long long) cdn_daemon->created_total,
                        (unsigned long long) cdn_daemon->create_errors,
                        (unsigned long long) cdn_daemon->http_errors,
                        (unsigned long long) cdn_daemon->execs_total, cdn_pool_ready_total());
    uint64_t cum = 0;
    for (size_t i = 0; i < sizeof bounds_ms / sizeof bounds_ms[0]; i++) {
        cum += cdn_daemon->exec_hist[i];
        evbuffer_add_printf(b, "cordon_exec_duration_ms_bucket{le=\"%g\"} %llu\n", bounds_ms[i],
                            (unsigned long long) cum);
    }
    cum += cdn_daemon->exec_hist[11];
    evbuffer_add_printf(b,
                        "cordon_exec_duration_ms_bucket{le=\"+Inf\"} %llu\ncordon_exec_duration_ms_sum %.3f\n"
                        "cordon_exec_duration_ms_count %llu\n",
                        (unsigned long long) cum, cdn_daemon->exec_sum_ms, (unsigned long long) cum);
    evbuffer_add_printf(b,
                        "# HELP cordon_violations_total Violations recorded, by kind (the reward signal).\n"
                        "# TYPE cordon_violations_total counter\n");
    for (int k = 0; k < _CDN_VK_MAX; k++)
        evbuffer_add_printf(b, "cordon_violations_total{kind=\"%s\"} %llu\n", cdn_vk_name(k),
                            (unsigned long long) cdn_daemon->violations_total[k]);
    evbuffer_add_printf(b,
                        "# HELP cordon_http_unauthenticated_connections TCP connections whose first request "
                        "has not shown the token yet.\n# TYPE cordon_http_unauthenticated_connections gauge\n"
                        "cordon_http_unauthenticated_connections %u\n"
                        "# HELP cordon_http_tcp_connections TCP connections open.\n"
                        "# TYPE cordon_http_tcp_connections gauge\ncordon_http_tcp_connections %u\n",
                        cdn_api_tcp_unauthenticated(), cdn_api_tcp_connections());
    evbuffer_add_printf(b,
                        "# HELP cordon_alerts_total Alerts of the monitor's rules and the DNS heuristics.\n"
                        "# TYPE cordon_alerts_total counter\ncordon_alerts_total %llu\n",
                        (unsigned long long) cdn_daemon->alerts_total);
    evbuffer_add_printf(b,
                        "# HELP cordon_image_pulls_total Image pulls that ended, by result.\n"
                        "# TYPE cordon_image_pulls_total counter\n"
                        "cordon_image_pulls_total{result=\"done\"} %llu\n"
                        "cordon_image_pulls_total{result=\"failed\"} %llu\n"
                        "# HELP cordon_image_pull_bytes_total Layer bytes fetched by pulls.\n"
                        "# TYPE cordon_image_pull_bytes_total counter\ncordon_image_pull_bytes_total %llu\n",
                        (unsigned long long) cdn_daemon->pulls_total,
                        (unsigned long long) cdn_daemon->pull_errors,
                        (unsigned long long) cdn_daemon->pull_bytes);
    if (cdn_daemon->image_store_known) /* measured by a child after each pull and prune, and at start */
        evbuffer_add_printf(b,
                            "# HELP cordon_image_store_bytes Bytes the image store takes on disk.\n"
                            "# TYPE cordon_image_store_bytes gauge\ncordon_image_store_bytes %llu\n",
                            (unsigned long long) cdn_daemon->image_store_bytes);
    /* What the live sandboxes use, summed: no label per sandbox (their number would be unbounded). */
    static const char *const sums[][3] = {
        {"cpu_ms", "cordon_sandboxes_cpu_seconds", "CPU time of the running sandboxes (the known ones)"},
        {"memory_bytes", "cordon_sandboxes_memory_bytes", "Memory the running sandboxes are charged now"},
        {"pids", "cordon_sandboxes_pids", "Tasks in the running sandboxes now"},
        {"disk_used_bytes", "cordon_sandboxes_disk_used_bytes", "Bytes used on the running sandboxes' disks"},
        {"net_rx_bytes", "cordon_sandboxes_network_received_bytes", "Bytes the running sandboxes received"},
        {"net_tx_bytes", "cordon_sandboxes_network_sent_bytes", "Bytes the running sandboxes sent"},
    };
    double total[ELEMENTSOF(sums)] = {0};
    LIST_FOREACH(x, &cdn_daemon->boxes, link)
    {
        if (x->state != BOX_RUNNING)
            continue;
        _cleanup_json_ json_t *u = cdn_box_usage_json(x);
        for (size_t i = 0; u && i < ELEMENTSOF(sums); i++)
            total[i] += json_number_value(json_object_get(u, sums[i][0])); /* null: 0 */
    }
    for (size_t i = 0; i < ELEMENTSOF(sums); i++)
        evbuffer_add_printf(b, "# HELP %s %s.\n# TYPE %s gauge\n%s %.17g\n", sums[i][1], sums[i][2],
                            sums[i][1], sums[i][1], i == 0 ? total[i] / 1e3 : total[i]);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain; version=0.0.4");
    evhttp_send_reply(req, 200, "OK", b);
}

/* ---- events ---- */

static void follower_gone(struct evhttp_connection *conn, void *arg)
{
    (void) conn;
    struct follower *f = arg;
    LIST_REMOVE(f, link);
    /* libevent detached the request from the dying connection: ending it frees it */
    if (!evhttp_request_get_connection(f->req))
        evhttp_send_reply_end(f->req);
    if (f->tick)
        event_free(f->tick);
    free(f);
}

void cdn_api_events_push(struct box *b, const char *line, size_t len)
{
    struct follower *f;
    LIST_FOREACH(f, &b->followers, link)
    {
        if (f->tick) /* a usage follower */
            continue;
        _cleanup_evbuffer_ struct evbuffer *chunk = evbuffer_new();
        if (!chunk)
            continue;
        evbuffer_add(chunk, line, len);
        evhttp_send_reply_chunk(f->req, chunk);
    }
}

void cdn_api_events_end(struct box *b)
{
    while (!LIST_EMPTY(&b->followers)) {
        struct follower *f = LIST_FIRST(&b->followers);
        LIST_REMOVE(f, link);
        if (f->tick) { /* its last line: the usage as the sandbox ended, when it is known */
            event_free(f->tick);
            json_t *u = cdn_box_usage_json(b);
            if (u)
                follower_line(f, u);
        }
        evhttp_connection_set_closecb(evhttp_request_get_connection(f->req), NULL, NULL);
        evhttp_send_reply_end(f->req);
        free(f);
    }
}

void cdn_api_events(struct evhttp_request *req, struct box *b)
{
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    struct evkeyvalq q;
    TAILQ_INIT(&q);
    if (query && evhttp_parse_query_str(query, &q) < 0) {
        cdn_api_reply_error(req, 400, "invalid_query", NULL, "the query string does not parse");
        return;
    }
    const char *fv = evhttp_find_header(&q, "follow");
    bool follow = fv && (strcmp(fv, "true") == 0 || strcmp(fv, "1") == 0);
    bool bad = fv && !follow && strcmp(fv, "false") != 0 && strcmp(fv, "0") != 0;
    evhttp_clear_headers(&q);
    if (bad) {
        cdn_api_reply_error(req, 400, "invalid_query", "follow", "follow must be true or false");
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/x-ndjson");
    if (!follow || b->ended_unix) { /* a copy: evhttp_send_reply drains the buffer it is given; an ended
                                       sandbox's log is whole (nothing more comes): as if not followed */
        _cleanup_evbuffer_ struct evbuffer *copy = evbuffer_new();
        if (copy)
            cdn_box_events_write(b, copy);
        evhttp_send_reply(req, 200, "OK", copy);
        return;
    }
    struct follower *f = calloc(1, sizeof *f);
    if (!f) {
        cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
        return;
    }
    *f = (struct follower){.req = req, .box = b};
    evhttp_send_reply_start(req, 200, "OK");
    cdn_api_stream_timeout(req);
    _cleanup_evbuffer_ struct evbuffer *copy = evbuffer_new();
    if (copy) {
        cdn_box_events_write(b, copy);
        evhttp_send_reply_chunk(req, copy);
    }
    LIST_INSERT_HEAD(&b->followers, f, link);
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), follower_gone, f);
}

static void usage_tick(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct follower *f = arg;
    json_t *u = cdn_box_usage_json(f->box);
    if (u)
        follower_line(f, u);
}

/* GET /v1/sandboxes/{id}/usage[?follow=true[&interval_s=S]]: what it uses now (once it ended:
 * at its end); followed, a line every interval_s (default 1, 0.1-3600) until it ends. */
static void api_usage(struct evhttp_request *req, struct box *b)
{
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    struct evkeyvalq q;
    TAILQ_INIT(&q);
    if (query && evhttp_parse_query_str(query, &q) < 0)
        return cdn_api_reply_error(req, 400, "invalid_query", NULL, "the query string does not parse");
    const char *fv = evhttp_find_header(&q, "follow"), *iv = evhttp_find_header(&q, "interval_s");
    bool follow = fv && (strcmp(fv, "true") == 0 || strcmp(fv, "1") == 0);
    char *end = NULL;
    double interval = iv ? strtod(iv, &end) : 1.0;
    const char *bad = fv && !follow && strcmp(fv, "false") != 0 && strcmp(fv, "0") != 0 ? "follow"
                      : iv && (!end || *end || !(interval >= 0.1 && interval <= 3600))  ? "interval_s"
                                                                                        : NULL;
    char unknown[64]; /* a copy: the query's strings go with it */
    for (const struct evkeyval *kv = q.tqh_first; kv && !bad; kv = kv->next.tqe_next)
        if (strcmp(kv->key, "follow") != 0 && strcmp(kv->key, "interval_s") != 0)
            bad = unknown, (void) snprintf(unknown, sizeof unknown, "%s", kv->key);
    evhttp_clear_headers(&q);
    if (bad)
        return cdn_api_reply_error(req, 400, "invalid_query", bad,
                                   "%s: follow=true|false, interval_s=0.1-3600, nothing else", bad);
    json_t *now = cdn_box_usage_json(b);
    if (!now) { /* starting (409), ended with nothing known of its end (410), or not readable */
        if (cdn_api_box_usable(req, b))
            cdn_api_reply_error(req, 500, "internal", NULL, "its usage cannot be read");
        return;
    }
    if (!follow || b->state != BOX_RUNNING) /* an ended one: its last usage, once */
        return cdn_api_reply_json(req, 200, now);
    struct follower *f = calloc(1, sizeof *f);
    struct timeval tv = {.tv_sec = (time_t) interval,
                         .tv_usec = (suseconds_t) ((interval - (time_t) interval) * 1e6)};
    if (!f || !(f->tick = event_new(cdn_daemon->base, -1, EV_PERSIST, usage_tick, f)) ||
        evtimer_add(f->tick, &tv) < 0) {
        if (f && f->tick)
            event_free(f->tick);
        free(f);
        json_decref(now);
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    }
    f->req = req, f->box = b;
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/x-ndjson");
    evhttp_send_reply_start(req, 200, "OK");
    cdn_api_stream_timeout(req);
    follower_line(f, now);
    LIST_INSERT_HEAD(&b->followers, f, link);
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), follower_gone, f);
}

/* ---- dispatch ---- */

static bool authorized(struct evhttp_request *req, bool tcp)
{
    if (!tcp)
        return true; /* the unix socket's mode is the access control */
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    char want[300];
    (void) snprintf(want, sizeof want, "Bearer %s", cdn_daemon->token);
    size_t n = strlen(want);
    if (!h || strlen(h) != n)
        return false;
    unsigned diff = 0; /* constant time: the token is a secret */
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned) (h[i] ^ want[i]);
    return diff == 0;
}

/* Whether the request route() serves now came over TCP (routes are answered or handed on within it). */
static bool serving_tcp;

bool cdn_api_over_tcp(struct evhttp_request *req)
{
    (void) req;
    return serving_tcp;
}

static void route(struct evhttp_request *req, void *arg)
{
    bool tcp = arg != NULL;
    serving_tcp = tcp;
    const char *e2b = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    if (e2b && cdn_e2b_path(e2b)) /* its own credentials (e2b.c) */
        return cdn_e2b_route(req, e2b, tcp);
    if (!authorized(req, tcp)) {
        cdn_api_reply_error(req, 401, "unauthorized", NULL, "missing or wrong bearer token");
        return;
    }
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    if (!path)
        path = "/";
    char id[64], rest[64];
    int n = 0;
    if (strcmp(path, "/v1/health") == 0 && m == EVHTTP_REQ_GET)
        return route_health(req);
    if (strcmp(path, "/metrics") == 0 && m == EVHTTP_REQ_GET)
        return route_metrics(req);
    if (strncmp(path, "/v1/images", 10) == 0 && (path[10] == '\0' || path[10] == '/'))
        return cdn_api_images(req, path);
    if (strcmp(path, "/v1/checkpoints") == 0 || strncmp(path, "/v1/checkpoints/", 16) == 0)
        return cdn_api_checkpoint_route(req, path[15] ? path + 16 : "");
    if (strncmp(path, "/v1/trajectories/", 17) == 0) {
        size_t pl = strlen(path);
        if (m == EVHTTP_REQ_POST && pl > 17 + 7 && strcmp(path + pl - 7, "/resume") == 0) {
            char tid[CDN_TRAJECTORY_ID_MAX + 1];
            if (pl - 17 - 7 > CDN_TRAJECTORY_ID_MAX)
                return cdn_api_reply_error(req, 400, "invalid_request", "id",
                                           "a trajectory's id is at most %d bytes", CDN_TRAJECTORY_ID_MAX);
            (void) snprintf(tid, sizeof tid, "%.*s", (int) (pl - 17 - 7), path + 17);
            return cdn_api_traj_resume(req, tid);
        }
        if (m != EVHTTP_REQ_GET)
            return cdn_api_reply_error(req, 405, "method_not_allowed", NULL, "%.64s takes GET", path);
        return route_trajectory(req, path + 17);
    }
    if (strcmp(path, "/v1/sandboxes/attach") == 0) {
        if (m != EVHTTP_REQ_POST)
            return cdn_api_reply_error(req, 405, "method_not_allowed", NULL, "%s takes POST", path);
        return route_attach(req, tcp);
    }
    if (strcmp(path, "/v1/sandboxes") == 0) {
        if (m == EVHTTP_REQ_POST)
            return route_create(req);
        if (m == EVHTTP_REQ_GET)
            return route_list(req);
        if (m == EVHTTP_REQ_DELETE)
            return route_delete_labelled(req);
        return cdn_api_reply_error(req, 405, "method_not_allowed", NULL, "%s takes GET, POST or DELETE",
                                   path);
    }
    rest[0] = 0;
    /* …/ports/{port}/anything: the path after the port is the sandbox server's, of any length */
    if (sscanf(path, "/v1/sandboxes/%63[^/]%n", id, &n) == 1 && strncmp(path + n, "/ports/", 7) == 0) {
        struct box *pb = cdn_box_find(id);
        if (!pb)
            return cdn_api_reply_error(req, 404, "sandbox_not_found", "id", "no sandbox '%s'", id);
        if (!cdn_api_box_usable(req, pb))
            return;
        cdn_box_touch(pb);
        return cdn_api_ports(req, pb, path + n + 7);
    }
    /* rest: one segment, "monitor/text", or "processes/…" */
    if (sscanf(path, "/v1/sandboxes/%63[^/]%n", id, &n) != 1 ||
        (path[n] && sscanf(path + n, "/%63s", rest) != 1) ||
        (path[n] && strlen(path + n) != strlen(rest) + 1) ||
        (strchr(rest, '/') && strcmp(rest, "monitor/text") != 0 && strncmp(rest, "processes/", 10) != 0 &&
         strncmp(rest, "sessions/", 9) != 0))
        return cdn_api_reply_error(req, 404, "not_found", NULL, "no route for %s", path);
    struct box *b = cdn_box_find(id);
    if (!b)
        return cdn_api_reply_error(req, 404, "sandbox_not_found", "id", "no sandbox '%s'", id);
    /* Its idle timeout counts requests that use it; looking at it (GET of it, its events, its
     * violations) is not using it. */
    if (m != EVHTTP_REQ_GET || (rest[0] && strcmp(rest, "events") != 0 && strcmp(rest, "violations") != 0 &&
                                strcmp(rest, "usage") != 0))
        cdn_box_touch(b);
    static const struct {
        const char *rest;
        enum evhttp_cmd_type m;
        void (*fn)(struct evhttp_request *, struct box *);
    } sub[] = {
        {"exec", EVHTTP_REQ_POST, cdn_api_exec},
        {"call", EVHTTP_REQ_POST, cdn_api_call},
        {"oci-start", EVHTTP_REQ_POST, cdn_api_oci_start},
        {"oci-listener", EVHTTP_REQ_POST, cdn_api_oci_listener},
        {"files", EVHTTP_REQ_PUT, cdn_api_files},
        {"files", EVHTTP_REQ_GET, cdn_api_files},
        {"files", EVHTTP_REQ_DELETE, cdn_api_files},
        {"ls", EVHTTP_REQ_GET, cdn_api_ls},
        {"events", EVHTTP_REQ_GET, cdn_api_events},
        {"stat", EVHTTP_REQ_GET, cdn_api_stat},
        {"mkdir", EVHTTP_REQ_POST, cdn_api_mkdir},
        {"network", EVHTTP_REQ_PATCH, api_network},
        {"violations", EVHTTP_REQ_GET, api_violations},
        {"monitor/text", EVHTTP_REQ_POST, api_monitor_text},
        {"usage", EVHTTP_REQ_GET, api_usage},
        {"move", EVHTTP_REQ_POST, cdn_api_move},
        {"chmod", EVHTTP_REQ_POST, cdn_api_chmod},
        {"archive", EVHTTP_REQ_PUT, cdn_api_archive},
        {"archive", EVHTTP_REQ_GET, cdn_api_archive},
        {"watch", EVHTTP_REQ_GET, cdn_api_watch},
        {"pause", EVHTTP_REQ_POST, api_pause},
        {"resume", EVHTTP_REQ_POST, api_resume},
        {"checkpoints", EVHTTP_REQ_POST, cdn_api_checkpoints},
        {"checkpoints", EVHTTP_REQ_GET, cdn_api_checkpoints},
        {"fork", EVHTTP_REQ_POST, cdn_api_fork},
        {"rollback", EVHTTP_REQ_POST, cdn_api_rollback},
    };
    if (!rest[0]) {
        if (m == EVHTTP_REQ_GET)
            return cdn_api_reply_json(req, 200, cdn_box_to_json(b));
        if (m == EVHTTP_REQ_DELETE) {
            cdn_box_delete(b, "deleted by request");
            return cdn_api_reply_json(req, 200, json_pack("{s:s, s:b}", "id", id, "deleted", 1));
        }
        if (m == EVHTTP_REQ_PATCH)
            return api_update(req, b);
        return cdn_api_reply_error(req, 405, "method_not_allowed", NULL, "%s takes GET, PATCH or DELETE",
                                   path);
    }
    if (strcmp(rest, "processes") == 0 || strncmp(rest, "processes/", 10) == 0) {
        if (m != EVHTTP_REQ_GET && !cdn_api_box_usable(req, b))
            return;
        return cdn_api_procs(req, b, rest[9] ? rest + 10 : "");
    }
    if (strcmp(rest, "sessions") == 0 || strncmp(rest, "sessions/", 9) == 0) {
        if (m != EVHTTP_REQ_GET && !cdn_api_box_usable(req, b))
            return;
        return cdn_api_sessions(req, b, rest[8] ? rest + 9 : "");
    }
    bool known = false; /* the route exists, with other methods: 405 */
    for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++) {
        if (strcmp(rest, sub[i].rest) != 0)
            continue;
        if (m == sub[i].m)
            return sub[i].fn(req, b);
        known = true;
    }
    cdn_api_reply_error(req, known ? 405 : 404, known ? "method_not_allowed" : "not_found", NULL,
                        "no route for %s with this method", path);
}

static struct evhttp *new_http(bool tcp)
{
    struct evhttp *h = evhttp_new(cdn_daemon->base);
    if (!h)
        return NULL;
    evhttp_set_max_body_size(h, (ev_ssize_t) cdn_daemon->cfg.max_body_bytes);
    evhttp_set_max_headers_size(h, 64 << 10);
    evhttp_set_timeout(h, 300); /* a client that stops mid-request is dropped */
    evhttp_set_allowed_methods(h, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                      EVHTTP_REQ_PATCH);
    evhttp_set_gencb(h, route, tcp ? (void *) 1 : NULL);
    if (tcp)
        cdn_api_tcp_gate(h);
    return h;
}

static int listen_unix(const char *path)
{
    /* Bound and listening under a temporary name, then renamed into place: a client that sees the
     * socket appear can connect at once (bound at its final name, it would exist before listen()). */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) + 5 >= sizeof sa.sun_path)
        return -ENAMETOOLONG;
    (void) snprintf(sa.sun_path, sizeof sa.sun_path, "%s.new", path);
    _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    (void) unlink(sa.sun_path);
    mode_t old = umask(0177);
    int r = bind(fd, (struct sockaddr *) &sa, sizeof sa);
    umask(old);
    /* rename() replaces a stale socket of a previous run; cordond.c made sure none is live */
    if (r < 0 || chmod(sa.sun_path, 0600) < 0 || listen(fd, 1024) < 0 || rename(sa.sun_path, path) < 0) {
        r = -errno;
        (void) unlink(sa.sun_path);
        return r;
    }
    return TAKE_FD(fd);
}

int cdn_api_start(void)
{
    /* TCP first: the unix socket appearing is what tells waiting clients (and
     * the tests) that everything listens. */
    if (cdn_daemon->cfg.listen[0]) {
        char host[128];
        (void) snprintf(host, sizeof host, "%s", cdn_daemon->cfg.listen);
        char *colon = strrchr(host, ':');
        int port = colon ? atoi(colon + 1) : 0;
        if (!colon || port <= 0 || port > 65535) {
            fprintf(stderr, "cordond: --listen '%s': expected HOST:PORT\n", cdn_daemon->cfg.listen);
            return -1;
        }
        *colon = 0;
        struct evhttp *t = new_http(true);
        if (!t || !evhttp_bind_socket_with_handle(t, host, (uint16_t) port)) {
            fprintf(stderr, "cordond: listen on %s: %s\n", cdn_daemon->cfg.listen, strerror(errno));
            return -1;
        }
    }
    struct evhttp *h = new_http(false);
    int fd = listen_unix(cdn_daemon->cfg.socket_path);
    if (!h || fd < 0 || !evhttp_accept_socket_with_handle(h, fd)) {
        fprintf(stderr, "cordond: listen on %s: %s\n", cdn_daemon->cfg.socket_path,
                strerror(fd < 0 ? -fd : EIO));
        return -1;
    }
    return 0;
}

const struct cdn_box_listener cdn_api_box_listener = {
    .event = cdn_api_events_push,
    .ended = cdn_api_events_end,
    .freed = cdn_api_throttle_end,
    .step_ready = cdn_sibling_box_ready,
    .step_gone = cdn_sibling_box_gone,
};
