/* cordond's E2B-compatible surface (docs/e2b.md): what an unmodified E2B SDK
 * calls, as one more thin layer over the sandboxes of /v1 (DESIGN §9) — its
 * control plane (POST /v2/sandboxes, …/connect, /sandboxes/{id}[/timeout],
 * the list) and its sandbox daemon ("envd": routes named by the
 * E2b-Sandbox-Id header). Served on cordond's own listeners; runs in the loop.
 *
 * Credentials on the TCP listener: the control plane's X-API-KEY is cordond's
 * token (a bearer token works too); envd's X-Access-Token is the sandbox's
 * own, HMAC-SHA256(token, "envd:" id), handed out as envdAccessToken: it
 * reaches that sandbox alone, and a restarted cordond derives it again.
 *
 * Trusted: the operator's requests (whoever holds the token). Their bodies
 * are still parsed as hostile: bounded, every field checked, an error naming
 * it. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/keyvalq_struct.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "api.h"
#include "core/json-util.h"
#include "e2b.h"
#include "proto/connect.h"
#include "shared/base64.h"
#include "shared/parse-util.h"

#define E2B_ENVD_VERSION    "0.6.4" /* the newest the SDK (2.x) tells apart: every feature on */
#define E2B_TIMEOUT_DEFAULT 300     /* s: E2B's lifetime when a create names none */
#define E2B_TEMPLATE_LABEL  "e2b.template"
#define E2B_HOME            "/home/user"
#define E2B_USER            "user" /* the host image's uid 1000, whose home E2B_HOME is */

/* ---- credentials ---- */

void cdn_e2b_access_token(const char *id, char out[65])
{
    uint8_t mac[32];
    unsigned len = 0;
    char msg[96];
    int n = snprintf(msg, sizeof msg, "envd:%s", id);
    const char *key = cdn_daemon->token;
    if (!HMAC(EVP_sha256(), key, (int) strlen(key), (const uint8_t *) msg, (size_t) n, mac, &len) ||
        len != 32)
        memset(mac, 0, sizeof mac), len = 0; /* never equal to a token that is checked: see below */
    for (unsigned i = 0; i < 32; i++)
        (void) snprintf(out + 2 * i, 3, "%02x", mac[i]);
    if (!len)
        out[0] = 0;
}

static bool same_secret(const char *given, const char *want)
{
    size_t n = strlen(want);
    if (!given || !n || strlen(given) != n)
        return false;
    unsigned diff = 0; /* constant time: a secret */
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned) (given[i] ^ want[i]);
    return diff == 0;
}

bool cdn_e2b_authorized(const char *api_key, const char *access_token, const char *sandbox_id)
{
    if (same_secret(api_key, cdn_daemon->token))
        return true;
    if (!access_token || !sandbox_id || strlen(sandbox_id) > 64)
        return false;
    char want[65];
    cdn_e2b_access_token(sandbox_id, want);
    return same_secret(access_token, want);
}

/* ---- answers ---- */

/* E2B's error body, {"code": status, "message"}: the SDK reads both (a kill's 404 by its code). */
void cdn_e2b_reply_error(struct evhttp_request *req, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    (void) vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cdn_api_reply_json(req, status, json_pack("{s:i, s:s}", "code", status, "message", msg));
}

/* An empty 2xx: 204 (the SDK parses a body it is given as JSON). */
static void reply_empty(struct evhttp_request *req)
{
    evhttp_send_reply(req, 204, "No Content", NULL);
}

static double now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void iso_time(double unix_s, char out[40])
{
    time_t t = (time_t) unix_s;
    struct tm tm;
    (void) gmtime_r(&t, &tm);
    int ms = (int) ((unix_s - (double) t) * 1e3);
    (void) snprintf(out, 40, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                    tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                    ms < 0     ? 0
                    : ms > 999 ? 999
                               : ms);
}

static const char *label_of(const struct box *b, const char *key)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i < b->spec.labels.n; i++)
        if (strncmp(b->spec.labels.v[i], key, kl) == 0 && b->spec.labels.v[i][kl] == '=')
            return b->spec.labels.v[i] + kl + 1;
    return NULL;
}

/* Its labels but cordon's own (e2b.*): the sandbox's metadata. */
static json_t *metadata_json(const struct box *b)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i < b->spec.labels.n; i++) {
        const char *kv = b->spec.labels.v[i], *eq = strchr(kv, '=');
        if (!eq || strncmp(kv, "e2b.", 4) == 0)
            continue;
        char key[160];
        (void) snprintf(key, sizeof key, "%.*s", (int) (eq - kv), kv);
        json_object_set_new(o, key, json_string(eq + 1));
    }
    return o;
}

/* What create and connect answer (E2B's Sandbox). */
static json_t *sandbox_json(const struct box *b)
{
    char token[65];
    cdn_e2b_access_token(b->sb.id, token);
    const char *tpl = label_of(b, E2B_TEMPLATE_LABEL);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:n, s:n}", "sandboxID", b->sb.id, "templateID",
                     tpl ? tpl : "base", "clientID", "cordon", "envdVersion", E2B_ENVD_VERSION,
                     "envdAccessToken", token, "domain", "trafficAccessToken");
}

/* GET /sandboxes/{id} and an entry of the list (E2B's SandboxDetail, ListedSandbox). */
static json_t *detail_json(const struct box *b)
{
    char started[40], ends[40];
    iso_time(b->created_unix, started);
    double end = b->paused && b->pause_left_ms
                     ? now_unix() + (double) b->pause_left_ms / 1e3 /* if resumed now */
                 : b->spec.limits.timeout_ms ? b->created_unix + (double) b->spec.limits.timeout_ms / 1e3
                                             : b->created_unix + 7 * 86400.0; /* none: as far as a spec's */
    iso_time(end, ends);
    const char *tpl = label_of(b, E2B_TEMPLATE_LABEL);
    return json_pack("{s:s, s:s, s:s, s:i, s:I, s:I, s:s, s:s, s:s, s:s, s:o, s:b}", "sandboxID", b->sb.id,
                     "templateID", tpl ? tpl : "base", "clientID", "cordon", "cpuCount",
                     (int) ceil(b->spec.limits.cpus), "memoryMB", (json_int_t) b->spec.limits.memory_mb,
                     "diskSizeMB", (json_int_t) b->spec.limits.disk_mb, "startedAt", started, "endAt", ends,
                     "envdVersion", E2B_ENVD_VERSION, "state", b->paused ? "paused" : "running", "metadata",
                     metadata_json(b), "allowInternetAccess", b->spec.net_mode != CDN_NET_NONE);
}

/* A running sandbox the request names, or NULL with 404 answered ({"code": 404}: the SDK's "not
 * found", a kill's false). */
static struct box *running_box(struct evhttp_request *req, const char *id)
{
    struct box *b = cdn_box_find(id);
    if (!b || b->state != BOX_RUNNING || b->dying || b->sibling) {
        cdn_e2b_reply_error(req, 404, "sandbox '%s' not found", id);
        return NULL;
    }
    return b;
}

static json_t *body_object(struct evhttp_request *req, bool empty_ok)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (!n) {
        if (!empty_ok)
            cdn_e2b_reply_error(req, 400, "body: expected a JSON object");
        return empty_ok ? json_object() : NULL;
    }
    json_error_t je;
    json_t *o =
        json_loadb((const char *) evbuffer_pullup(in, (ev_ssize_t) n), n, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        cdn_e2b_reply_error(req, 400, "body: expected a JSON object (%s)", je.text);
        return NULL;
    }
    return o;
}

/* ---- templates ---- */

#define E2B_TEMPLATES 16

/* A template of cordond's configuration: its name and its spec file's JSON, read at start. */
struct template
{
    char name[65];
    char *json;
};
static struct template templates[E2B_TEMPLATES];
static unsigned n_templates;
static char template_names[E2B_TEMPLATES * 70 + 16] = "'base'"; /* for errors */

static const struct template *template_find(const char *name)
{
    for (unsigned i = 0; i < n_templates; i++)
        if (strcmp(templates[i].name, name) == 0)
            return &templates[i];
    return NULL;
}

int cdn_e2b_template_configure(const char *arg, struct cdn_error *err)
{
    static const char name_chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
    const char *colon = strchr(arg, ':');
    size_t n = colon ? (size_t) (colon - arg) : 0;
    if (!colon || n == 0 || n > 64 || strspn(arg, name_chars) < n || !colon[1])
        return cdn_error_set(err, EINVAL,
                             "e2b_template '%s': expected NAME:SPECFILE (a name of 1-64 letters, digits, "
                             "'.', '_', '-')",
                             arg);
    if (n_templates == E2B_TEMPLATES)
        return cdn_error_set(err, E2BIG, "e2b_template: at most %d", E2B_TEMPLATES);
    struct template *t = &templates[n_templates];
    memcpy(t->name, arg, n);
    t->name[n] = 0;
    if (template_find(t->name))
        return cdn_error_set(err, EEXIST, "e2b_template '%s': named twice", t->name);
    _cleanup_fclose_ FILE *f = fopen(colon + 1, "re");
    _cleanup_free_ char *buf = NULL;
    size_t cap = 0;
    ssize_t len = f ? getdelim(&buf, &cap, '\0', f) : -1;
    if (len < 0)
        return cdn_error_set(err, errno ? errno : EIO, "e2b_template '%s': %s: %m", t->name, colon + 1);
    struct cdn_spec spec; /* checked now, as a pool's is */
    if (cdn_spec_init(&spec) < 0)
        return cdn_error_set(err, ENOMEM, "out of memory");
    int r = cdn_spec_from_json(&spec, buf, (size_t) len, err);
    if (r >= 0)
        r = cdn_spec_validate(&spec, err);
    if (r >= 0)
        r = cdn_bind_policy_check(&cdn_daemon->bind_policy, &spec, err);
    cdn_spec_free(&spec);
    if (r < 0)
        return cdn_error_prefix(err, r, "e2b_template '%s': %s", t->name, colon + 1);
    t->json = TAKE_PTR(buf);
    n_templates++;
    template_names[0] = 0;
    for (unsigned i = 0; i < n_templates; i++)
        (void) snprintf(template_names + strlen(template_names),
                        sizeof template_names - strlen(template_names), "%s'%s'", i ? ", " : "",
                        templates[i].name);
    if (!template_find("base"))
        (void) snprintf(template_names + strlen(template_names),
                        sizeof template_names - strlen(template_names), ", 'base'");
    return 0;
}

/* A lifetime in seconds ("timeout"): 0 < s ≤ 7 days; -1 (answered) otherwise, 0 when absent. */
static int64_t timeout_of(struct evhttp_request *req, json_t *body)
{
    json_t *v = json_object_get(body, "timeout");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) <= 0 ||
        json_integer_value(v) > (json_int_t) (CDN_TIMEOUT_MS_MAX / 1000)) {
        cdn_e2b_reply_error(req, 400, "timeout: expected whole seconds from 1 to %llu",
                            (unsigned long long) (CDN_TIMEOUT_MS_MAX / 1000));
        return -1;
    }
    return json_integer_value(v);
}

/* ---- the control plane ---- */

static void created(void *arg, struct box *b, enum cdn_box_created how, const struct cdn_error *err)
{
    struct evhttp_request *req = arg;
    switch (how) {
    case CDN_BOX_CREATED:
        return cdn_api_reply_json(req, 201, sandbox_json(b));
    case CDN_BOX_STOPPING:
        return cdn_e2b_reply_error(req, 503, "cordond is stopping: %s", err->msg);
    case CDN_BOX_TOO_MANY:
        return cdn_e2b_reply_error(req, 429, "%s", err->msg);
    case CDN_BOX_INVALID_SPEC:
        return cdn_e2b_reply_error(req, 400, "%s", err->msg);
    case CDN_BOX_FAILED:
        return cdn_e2b_reply_error(req, 500, "the sandbox did not start: %s", err->msg);
    }
}

/* A string-to-string object of the body into spec's list as "K=V" (env) or labels. */
static int string_map(struct evhttp_request *req, json_t *body, const char *name, struct cdn_spec *spec,
                      bool env)
{
    json_t *m = json_object_get(body, name);
    if (!m || json_is_null(m))
        return 0;
    if (!json_is_object(m)) {
        cdn_e2b_reply_error(req, 400, "%s: expected an object of strings", name);
        return -EINVAL;
    }
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v)
    {
        struct cdn_error err = {0};
        if (!json_is_string(v)) {
            cdn_e2b_reply_error(req, 400, "%s.%.64s: expected a string", name, k);
            return -EINVAL;
        }
        if (!env && strncmp(k, "e2b.", 4) == 0) {
            cdn_e2b_reply_error(req, 400, "%s.%.64s: keys starting with 'e2b.' are cordon's own", name, k);
            return -EINVAL;
        }
        char kv[2200];
        int r = 0;
        if (env && (!*k || strchr(k, '=') ||
                    snprintf(kv, sizeof kv, "%s=%s", k, json_string_value(v)) >= (int) sizeof kv))
            r = cdn_error_set(&err, EINVAL, "%s.%.64s: a name without '=' and a value of at most 2 KiB", name,
                              k);
        else if (env)
            r = cdn_strv_push(&spec->env, kv) < 0 ? cdn_error_set(&err, E2BIG, "%s: too many", name) : 0;
        else
            r = cdn_spec_add_label(spec, k, json_string_value(v), &err);
        if (r < 0) {
            cdn_e2b_reply_error(req, 400, "%s", err.msg);
            return r;
        }
    }
    return 0;
}

/* What a create asks for that cordon does not do: refused by name, never ignored. */
static const char *unsupported(json_t *body)
{
    static const char *const names[] = {"autoPause", "autoPauseMemory", "autoResume", "volumeMounts", "mcp",
                                        "iam"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        json_t *v = json_object_get(body, names[i]);
        if (v && !json_is_null(v) && !json_is_false(v))
            return names[i];
    }
    json_t *net = json_object_get(body, "network");
    static const char *const net_names[] = {"denyOut",         "egressProxy", "rules", "allowPublicTraffic",
                                            "maskRequestHost", "httpsPorts"};
    for (size_t i = 0; json_is_object(net) && i < sizeof net_names / sizeof net_names[0]; i++) {
        json_t *v = json_object_get(net, net_names[i]);
        if (v && !json_is_null(v) && !json_is_false(v))
            return net_names[i];
    }
    return NULL;
}

/* POST /v2/sandboxes: a sandbox of the template (cordond's e2b_template lines; "base", unless
 * one names it, is cordond's default spec working in /home/user). */
static void route_create(struct evhttp_request *req)
{
    _cleanup_json_ json_t *body = body_object(req, false);
    if (!body)
        return;
    json_t *tv = json_object_get(body, "templateID");
    const char *tpl = json_is_string(tv) ? json_string_value(tv) : tv ? NULL : "base";
    if (!tpl)
        return cdn_e2b_reply_error(req, 400, "templateID: expected a string");
    const struct template *t = template_find(tpl);
    if (!t && strcmp(tpl, "base") != 0)
        return cdn_e2b_reply_error(req, 400, "templateID '%.64s': no such template (cordond has %s)", tpl,
                                   template_names);
    const char *no = unsupported(body);
    if (no)
        return cdn_e2b_reply_error(req, 400, "%s: not supported by cordon (docs/e2b.md)", no);
    int64_t timeout = timeout_of(req, body);
    if (timeout < 0)
        return;
    struct cdn_spec spec;
    if (cdn_spec_init(&spec) < 0)
        return cdn_e2b_reply_error(req, 500, "out of memory");
    struct cdn_error err = {0};
    int r = 0;
    char *home = t ? NULL : strdup(E2B_HOME); /* E2B's working directory: paths and commands start there */
    if (t && (r = cdn_spec_from_json(&spec, t->json, strlen(t->json), &err)) < 0)
        cdn_e2b_reply_error(req, 500, "template '%s': %s", t->name, err.msg); /* it parsed at start */
    else if (!t && !home) {
        cdn_e2b_reply_error(req, 500, "out of memory");
        r = -ENOMEM;
    }
    if (home) { /* E2B's user, as envd's default: commands and file operations run as it */
        free(spec.workdir);
        spec.workdir = home;
        free(spec.user);
        if (!(spec.user = strdup(E2B_USER))) {
            cdn_e2b_reply_error(req, 500, "out of memory");
            r = -ENOMEM;
        }
    }
    /* The home, where "~" is in commands too: the user's (init sets it), else the working
     * directory, unless the template's env or the create's envVars set HOME. */
    bool has_home = spec.user || json_object_get(json_object_get(body, "envVars"), "HOME");
    for (size_t i = 0; i < spec.env.n; i++)
        has_home = has_home || strncmp(spec.env.v[i], "HOME=", 5) == 0;
    char home_env[4200];
    (void) snprintf(home_env, sizeof home_env, "HOME=%s", spec.workdir);
    if (r >= 0 && !has_home && cdn_strv_push(&spec.env, home_env) < 0) {
        cdn_e2b_reply_error(req, 500, "out of memory");
        r = -ENOMEM;
    }
    if (r >= 0)
        r = string_map(req, body, "envVars", &spec, true);
    if (r >= 0)
        r = string_map(req, body, "metadata", &spec, false);
    if (r >= 0 && (r = cdn_spec_add_label(&spec, E2B_TEMPLATE_LABEL, tpl, &err)) < 0)
        cdn_e2b_reply_error(req, 400, "%s", err.msg);
    if (timeout || !spec.limits.timeout_ms) /* the create's, else the template's, else E2B's */
        spec.limits.timeout_ms = (uint64_t) (timeout ? timeout : E2B_TIMEOUT_DEFAULT) * 1000;
    json_t *internet = json_object_get(body, "allow_internet_access");
    json_t *allow = json_object_get(json_object_get(body, "network"), "allowOut");
    if (r >= 0 && internet && !json_is_boolean(internet)) {
        cdn_e2b_reply_error(req, 400, "allow_internet_access: expected true or false");
        r = -EINVAL;
    }
    if (r >= 0 && json_is_false(internet))
        spec.net_mode = CDN_NET_NONE;
    else if (r >= 0 && json_is_true(internet))
        spec.net_mode = CDN_NET_OPEN;
    if (r >= 0 && allow && !json_is_null(allow)) { /* hosts the sandbox may reach, and no others */
        size_t i;
        json_t *h;
        if (!json_is_array(allow))
            r = -EINVAL;
        json_array_foreach(allow, i, h)
        {
            if (r >= 0 && (!json_is_string(h) || cdn_strv_push(&spec.net_allow, json_string_value(h)) < 0))
                r = -EINVAL;
        }
        if (r < 0)
            cdn_e2b_reply_error(req, 400, "network.allowOut: expected a list of host names");
        spec.net_mode = CDN_NET_ALLOWLIST;
    }
    if (r >= 0 && (r = cdn_spec_validate(&spec, &err)) < 0)
        cdn_e2b_reply_error(req, 400, "%s", err.msg);
    if (r < 0)
        return cdn_spec_free(&spec);
    cdn_box_create(&spec, (struct cdn_box_waiter){.done = created, .arg = req});
}

/* POST /v2/sandboxes/{id}/connect: a running one is there (200); a new timeout, if given. */
static void route_connect(struct evhttp_request *req, const char *id)
{
    struct box *b = running_box(req, id);
    _cleanup_json_ json_t *body = b ? body_object(req, true) : NULL;
    if (!body)
        return;
    int64_t timeout = timeout_of(req, body);
    if (timeout < 0)
        return;
    if (json_is_false(json_object_get(body, "memory")))
        return cdn_e2b_reply_error(req, 400,
                                   "memory: false (onResume 'reboot') is not supported by cordon: a "
                                   "paused sandbox keeps its memory (docs/e2b.md)");
    if (b->paused) { /* resumed, with the timeout given or E2B's (201: the SDK's "resumed") */
        struct cdn_error err = {0};
        if (cdn_box_resume(b, (uint64_t) (timeout ? timeout : E2B_TIMEOUT_DEFAULT) * 1000, &err) < 0)
            return cdn_e2b_reply_error(req, 500, "%s", err.msg);
        return cdn_api_reply_json(req, 201, sandbox_json(b));
    }
    if (timeout && cdn_box_set_lifetime(b, (uint64_t) timeout * 1000) < 0)
        return cdn_e2b_reply_error(req, 500, "the sandbox's record could not be written");
    cdn_box_touch(b);
    cdn_api_reply_json(req, 200, sandbox_json(b));
}

/* POST /sandboxes/{id}/pause: 204; 409 when it is paused already (the SDK's false). */
static void route_pause(struct evhttp_request *req, const char *id)
{
    struct box *b = running_box(req, id);
    _cleanup_json_ json_t *body = b ? body_object(req, true) : NULL;
    if (!body)
        return;
    if (json_is_false(json_object_get(body, "memory")))
        return cdn_e2b_reply_error(req, 400,
                                   "memory: false (keepMemory: false) is not supported by cordon: a "
                                   "paused sandbox keeps its memory (docs/e2b.md)");
    struct cdn_error err = {0};
    int r = cdn_box_pause(b, &err);
    if (r < 0)
        return cdn_e2b_reply_error(req,
                                   r == -EALREADY || r == -EBUSY ? 409
                                   : r == -ENOTSUP               ? 501
                                                                 : 500,
                                   "%s", err.msg);
    reply_empty(req);
}

static void route_timeout(struct evhttp_request *req, const char *id)
{
    struct box *b = running_box(req, id);
    _cleanup_json_ json_t *body = b ? body_object(req, false) : NULL;
    if (!body)
        return;
    int64_t timeout = timeout_of(req, body);
    if (timeout < 0)
        return;
    if (!timeout)
        return cdn_e2b_reply_error(req, 400, "timeout: required");
    if (cdn_box_set_lifetime(b, (uint64_t) timeout * 1000) < 0)
        return cdn_e2b_reply_error(req, 500, "the sandbox's record could not be written");
    reply_empty(req);
}

/* The list's metadata filter, as the SDK encodes it: the query value (decoded once by evhttp) is
 * form-encoded "k=v&k2=v2" whose keys and values are percent-encoded once more. */
static bool metadata_matches(const struct box *b, const char *filter)
{
    if (!filter || !*filter)
        return true;
    _cleanup_free_ char *copy = strdup(filter);
    char *save = NULL;
    for (char *pair = copy ? strtok_r(copy, "&", &save) : NULL; pair; pair = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(pair, '=');
        if (!eq)
            return false;
        *eq = 0;
        _cleanup_free_ char *k1 = evhttp_uridecode(pair, 1, NULL), *v1 = evhttp_uridecode(eq + 1, 1, NULL);
        _cleanup_free_ char *k = k1 ? evhttp_uridecode(k1, 0, NULL) : NULL;
        _cleanup_free_ char *v = v1 ? evhttp_uridecode(v1, 0, NULL) : NULL;
        const char *have = k && strncmp(k, "e2b.", 4) != 0 ? label_of(b, k) : NULL;
        if (!v || !have || strcmp(have, v) != 0)
            return false;
    }
    return copy != NULL;
}

/* GET /v2/sandboxes[?metadata=…&state=running,paused&limit=N]: one page, the whole list. */
static void route_list(struct evhttp_request *req)
{
    struct evkeyvalq q;
    if (evhttp_parse_query_str(evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req)) ?: "", &q) < 0)
        return cdn_e2b_reply_error(req, 400, "query: malformed");
    const char *state = evhttp_find_header(&q, "state"), *meta = evhttp_find_header(&q, "metadata");
    bool running = !state || strstr(state, "running"), paused = !state || strstr(state, "paused");
    json_t *arr = json_array();
    struct box *b;
    LIST_FOREACH(b, &cdn_daemon->boxes, link)
    if ((b->paused ? paused : running) && b->state == BOX_RUNNING && !b->dying && !b->sibling &&
        metadata_matches(b, meta))
        json_array_append_new(arr, detail_json(b));
    evhttp_clear_headers(&q);
    cdn_api_reply_json(req, 200, arr);
}

static double usage_number(json_t *u, const char *key)
{
    json_t *v = json_object_get(u, key);
    return json_is_number(v) ? json_number_value(v) : 0;
}

/* GET /sandboxes/{id}/metrics[?start=&end=] (getMetrics): one sample, now, of cordon's usage
 * (docs/cordond.md): cpuUsedPct the average since the sandbox started (its CPU time over its age
 * and its CPUs), memory its charge against its limit, disk its writable layer. cordon keeps no
 * history: a window (unix seconds) that does not hold now has no sample. */
static void route_metrics(struct evhttp_request *req, const char *id)
{
    struct box *b = running_box(req, id);
    if (!b)
        return;
    struct evkeyvalq q;
    if (evhttp_parse_query_str(evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req)) ?: "", &q) < 0)
        return cdn_e2b_reply_error(req, 400, "query: malformed");
    double now = now_unix(), bound[2] = {0, 1e18};
    for (const struct evkeyval *kv = q.tqh_first; kv; kv = kv->next.tqe_next) {
        int k = strcmp(kv->key, "start") == 0 ? 0 : strcmp(kv->key, "end") == 0 ? 1 : -1;
        uint64_t v;
        if (k < 0 || cdn_parse_u64(kv->value, &v) < 0 || v > (1ULL << 40)) {
            cdn_e2b_reply_error(req, 400, "%.32s: %s", kv->key,
                                k < 0 ? "unknown parameter (this route takes start, end)"
                                      : "expected unix seconds");
            return evhttp_clear_headers(&q);
        }
        bound[k] = (double) v;
    }
    evhttp_clear_headers(&q);
    json_t *arr = json_array();
    if (!arr)
        return cdn_e2b_reply_error(req, 500, "out of memory");
    if (now >= bound[0] && now < bound[1] + 1) {
        _cleanup_json_ json_t *u = cdn_box_usage_json(b);
        double age_ms = (now - b->created_unix) * 1e3,
               cpus = b->spec.limits.cpus > 0 ? b->spec.limits.cpus : 1;
        double pct = age_ms > 0 ? usage_number(u, "cpu_ms") / (age_ms * cpus) * 100 : 0;
        char when[40];
        iso_time(now, when);
        json_array_append_new(arr, json_pack("{s:s, s:I, s:f, s:i, s:I, s:I, s:I, s:I, s:I}", "timestamp",
                                             when, "timestampUnix", (json_int_t) now, "cpuUsedPct",
                                             pct > 100 ? 100.0 : pct, "cpuCount", (int) ceil(cpus), "memUsed",
                                             (json_int_t) usage_number(u, "memory_bytes"), "memTotal",
                                             (json_int_t) b->spec.limits.memory_mb << 20, "memCache",
                                             (json_int_t) 0, "diskUsed",
                                             (json_int_t) usage_number(u, "disk_used_bytes"), "diskTotal",
                                             (json_int_t) usage_number(u, "disk_size_bytes")));
    }
    cdn_api_reply_json(req, 200, arr);
}

/* …/sandboxes/{id}[/rest]: the id, and what follows it (or ""). */
static bool split_id(const char *after, char id[64], const char **rest)
{
    size_t n = strcspn(after, "/");
    if (!n || n >= 64)
        return false;
    memcpy(id, after, n);
    id[n] = 0;
    *rest = after + n;
    return true;
}

static void control_plane(struct evhttp_request *req, const char *path)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    char id[64];
    const char *rest = "";
    if (strcmp(path, "/v2/sandboxes") == 0 || strcmp(path, "/sandboxes") == 0) {
        if (m == EVHTTP_REQ_POST && path[1] == 'v')
            return route_create(req);
        if (m == EVHTTP_REQ_GET)
            return route_list(req);
        return cdn_e2b_reply_error(req, 405, "%s: not with this method", path);
    }
    const char *after = strncmp(path, "/v2/sandboxes/", 14) == 0 ? path + 14 : path + 11; /* "/sandboxes/" */
    if (!split_id(after, id, &rest))
        return cdn_e2b_reply_error(req, 404, "no route for %s", path);
    bool v2 = path[1] == 'v';
    if (v2 && strcmp(rest, "/connect") == 0 && m == EVHTTP_REQ_POST)
        return route_connect(req, id);
    if (!v2 && !*rest && m == EVHTTP_REQ_DELETE) {
        struct box *b = running_box(req, id);
        if (b) {
            cdn_box_delete(b, "deleted by request (E2B kill)");
            reply_empty(req);
        }
        return;
    }
    if (!v2 && !*rest && m == EVHTTP_REQ_GET) {
        struct box *b = running_box(req, id);
        return b ? cdn_api_reply_json(req, 200, detail_json(b)) : (void) 0;
    }
    if (!v2 && strcmp(rest, "/timeout") == 0 && m == EVHTTP_REQ_POST)
        return route_timeout(req, id);
    if (!v2 && strcmp(rest, "/pause") == 0 && m == EVHTTP_REQ_POST)
        return route_pause(req, id);
    if (!v2 && strcmp(rest, "/resume") == 0 && m == EVHTTP_REQ_POST) /* the older SDKs' resume */
        return route_connect(req, id);
    if (!v2 && strcmp(rest, "/metrics") == 0 && m == EVHTTP_REQ_GET)
        return route_metrics(req, id);
    if (!v2 &&
        (strcmp(rest, "/network") == 0 || strcmp(rest, "/fork") == 0 || strcmp(rest, "/snapshots") == 0)) {
        if (running_box(req, id))
            cdn_e2b_reply_error(req, 501, "%s: not supported by cordon yet (docs/e2b.md)", rest + 1);
        return;
    }
    cdn_e2b_reply_error(req, 404, "no route for %s", path);
}

/* ---- the Connect protocol (envd's RPCs) ---- */

void cdn_e2b_envelope(struct evhttp_request *req, uint8_t flags, json_t *o)
{
    _cleanup_free_ char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    _cleanup_evbuffer_ struct evbuffer *b = evbuffer_new();
    if (!s || !b)
        return;
    uint8_t h[CDN_CONNECT_HEADER];
    cdn_connect_header(h, flags, (uint32_t) strlen(s));
    (void) evbuffer_add(b, h, sizeof h);
    (void) evbuffer_add(b, s, strlen(s));
    evhttp_send_reply_chunk(req, b);
}

json_t *cdn_e2b_connect_error(const char *code, const char *msg)
{
    return json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg);
}

/* A stream answered by its end alone (a Connect stream's errors come as 200 and an end). */
void cdn_e2b_stream_refuse(struct evhttp_request *req, const char *code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    (void) vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/connect+json");
    evhttp_send_reply_start(req, 200, "OK");
    cdn_e2b_envelope(req, CDN_CONNECT_END_STREAM, cdn_e2b_connect_error(code, msg));
    evhttp_send_reply_end(req);
}

/* The one envelope of a streaming request's body, as JSON; NULL with why set. */
json_t *cdn_e2b_stream_request(struct evhttp_request *req, char *why, size_t size)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    const uint8_t *b = n ? evbuffer_pullup(in, (ev_ssize_t) n) : NULL;
    struct cdn_connect_envelope e;
    int k = b ? cdn_connect_decode(b, n, &e) : 0;
    if (k <= 0 || (size_t) k != n || e.flags) {
        (void) snprintf(why, size, "the request: expected one Connect envelope (%s)",
                        k < 0                      ? strerror(-k)
                        : (size_t) k != n && k > 0 ? "bytes after it"
                                                   : "incomplete");
        return NULL;
    }
    json_error_t je;
    json_t *o = json_loadb((const char *) e.data, e.len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        (void) snprintf(why, size, "the request: expected a JSON object (%s)", je.text);
        return NULL;
    }
    return o;
}

/* The user an E2B request names ("Authorization: Basic base64(user:)"), or NULL: then the sandbox's
 * own (its spec's; "user" for the base template). */
char *cdn_e2b_request_user(struct evhttp_request *req)
{
    const char *a = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (!a || strncmp(a, "Basic ", 6) != 0 || strlen(a + 6) > 400)
        return NULL;
    uint8_t out[320];
    long n = cdn_base64_decode(a + 6, strlen(a + 6), out);
    if (n <= 0)
        return NULL;
    uint8_t *colon = memchr(out, ':', (size_t) n);
    size_t len = colon ? (size_t) (colon - out) : (size_t) n;
    if (!len)
        return NULL;
    return strndup((const char *) out, len);
}

void cdn_e2b_unary_error(struct evhttp_request *req, int status, const char *code, const char *msg)
{
    cdn_api_reply_json(req, status, json_pack("{s:s, s:s}", "code", code, "message", msg));
}

/* ---- envd ---- */

static void envd(struct evhttp_request *req, const char *path, const char *id)
{
    struct box *b = cdn_box_find(id);
    bool running = b && b->state == BOX_RUNNING && !b->dying && !b->sibling && !b->paused;
    if (strcmp(path, "/health") == 0 && evhttp_request_get_command(req) == EVHTTP_REQ_GET) {
        if (running)
            return reply_empty(req);
        /* 502: the SDK's "not running any more" */
        return cdn_e2b_reply_error(req, 502, "sandbox '%s' is not running", id);
    }
    if (!running)
        return cdn_e2b_reply_error(req, 502, "sandbox '%s' is %s", id,
                                   b && b->paused ? "paused: resume it with Sandbox.connect" : "not running");
    cdn_box_touch(b);
    if (strncmp(path, "/process.Process/", 17) == 0)
        return cdn_e2b_process(req, b, path + 17);
    if (strncmp(path, "/filesystem.Filesystem/", 23) == 0)
        return cdn_e2b_filesystem(req, b, path + 23);
    if (strcmp(path, "/files") == 0)
        return cdn_e2b_files(req, b);
    cdn_e2b_reply_error(req, 501, "%s: not supported by cordon yet (docs/e2b.md)", path);
}

bool cdn_e2b_path(const char *path)
{
    return strcmp(path, "/v2/sandboxes") == 0 || strncmp(path, "/v2/sandboxes/", 14) == 0 ||
           strcmp(path, "/sandboxes") == 0 || strncmp(path, "/sandboxes/", 11) == 0 ||
           strncmp(path, "/process.Process/", 17) == 0 || strncmp(path, "/filesystem.Filesystem/", 23) == 0 ||
           strcmp(path, "/files") == 0 || strcmp(path, "/health") == 0;
}

void cdn_e2b_route(struct evhttp_request *req, const char *path, bool tcp)
{
    const struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *id = evhttp_find_header(h, "E2b-Sandbox-Id");
    /* by path alone: a sandbox's token never reaches the control plane, whatever else is sent */
    bool to_envd = strncmp(path, "/process.", 9) == 0 || strncmp(path, "/filesystem.", 12) == 0 ||
                   strcmp(path, "/files") == 0 || strcmp(path, "/health") == 0;
    if (tcp) {
        const char *auth = evhttp_find_header(h, "Authorization"), *key = evhttp_find_header(h, "X-API-KEY");
        char bearer[300];
        (void) snprintf(bearer, sizeof bearer, "Bearer %s", cdn_daemon->token);
        bool ok = same_secret(auth, bearer) ||
                  cdn_e2b_authorized(key, to_envd ? evhttp_find_header(h, "X-Access-Token") : NULL, id);
        if (!ok)
            return cdn_e2b_reply_error(req, 401, "missing or wrong API key or access token");
    }
    if (!to_envd)
        return control_plane(req, path);
    if (!id)
        return cdn_e2b_reply_error(req, 400, "E2b-Sandbox-Id: required by %s", path);
    envd(req, path, id);
}
