/* libcordon: the C client (cordon.h). HTTP through libcurl (unix sockets
 * and TCP alike), JSON through jansson. Runs in the caller's process; it
 * trusts the daemon's answers no further than their JSON parses. */
#include "cordon.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shared/base64.h"

#define DEFAULT_SOCKET "/run/cordon/cordond.sock"

struct cordon_client {
    CURL *curl;
    char *socket_path; /* NULL for TCP */
    char *base_url;    /* "http://cordond" for the socket */
    char *auth;        /* "Authorization: Bearer …" or NULL */
    struct cordon_error err;
};

struct buf {
    char *p;
    size_t len, cap;
    /* streaming exec: lines are handed out as they complete (2xx answers only) */
    void (*on_line)(const char *line, size_t len, void *arg);
    void *arg;
    CURL *h;
    /* a download to a file descriptor (2xx answers only; an error's body is kept as usual) */
    int fd;
    uint64_t max, got;
    bool over; /* more than max came: the transfer was stopped */
};

static void set_error(cordon_client *c, long status, const char *code, const char *field, const char *fmt,
                      ...) __attribute__((format(printf, 5, 6)));
static void set_error(cordon_client *c, long status, const char *code, const char *field, const char *fmt,
                      ...)
{
    va_list ap;
    c->err.status = status;
    (void) snprintf(c->err.code, sizeof c->err.code, "%s", code);
    (void) snprintf(c->err.field, sizeof c->err.field, "%s", field ? field : "");
    va_start(ap, fmt);
    (void) vsnprintf(c->err.message, sizeof c->err.message, fmt, ap);
    va_end(ap);
}

const struct cordon_error *cordon_last_error(const cordon_client *c)
{
    return &c->err;
}

static cordon_client *client_new(void)
{
    static bool inited;
    if (!inited) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
            return NULL;
        inited = true;
    }
    cordon_client *c = calloc(1, sizeof *c);
    if (c && !(c->curl = curl_easy_init())) {
        free(c);
        c = NULL;
    }
    return c;
}

cordon_client *cordon_client_new(const char *socket_path)
{
    if (!socket_path)
        socket_path = getenv("CORDON_SOCKET");
    if (!socket_path || !socket_path[0])
        socket_path = DEFAULT_SOCKET;
    cordon_client *c = client_new();
    if (c && (!(c->socket_path = strdup(socket_path)) || !(c->base_url = strdup("http://cordond")))) {
        cordon_client_free(c);
        return NULL;
    }
    return c;
}

cordon_client *cordon_client_new_tcp(const char *url, const char *token)
{
    cordon_client *c = client_new();
    if (!c)
        return NULL;
    if (!(c->base_url = strdup(url)) ||
        (token && asprintf(&c->auth, "Authorization: Bearer %s", token) < 0)) {
        c->auth = NULL;
        cordon_client_free(c);
        return NULL;
    }
    size_t n = strlen(c->base_url);
    if (n && c->base_url[n - 1] == '/')
        c->base_url[n - 1] = 0;
    return c;
}

void cordon_client_free(cordon_client *c)
{
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    free(c->socket_path);
    free(c->base_url);
    free(c->auth);
    free(c);
}

/* A download's bytes straight to its fd: nothing of the file is held here. */
static size_t to_fd(struct buf *b, const char *p, size_t len)
{
    if (b->max && b->got + len > b->max) {
        b->over = true;
        return 0; /* curl stops the transfer */
    }
    for (size_t done = 0; done < len;) {
        ssize_t w = write(b->fd, p + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return 0;
        done += (size_t) w;
    }
    b->got += len;
    return len;
}

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    struct buf *b = arg;
    size_t len = size * n;
    long status = 0;
    if (b->fd > 0 || b->on_line)
        curl_easy_getinfo(b->h, CURLINFO_RESPONSE_CODE, &status);
    if (b->fd > 0 && status < 300)
        return to_fd(b, p, len);
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + len + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q)
            return 0; /* curl fails the transfer */
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->len, p, len);
    b->len += len;
    b->p[b->len] = 0;
    while (b->on_line && status < 300) { /* NDJSON: hand out complete lines */
        char *nl = memchr(b->p, '\n', b->len);
        if (!nl)
            break;
        size_t l = (size_t) (nl - b->p);
        *nl = 0;
        b->on_line(b->p, l, b->arg);
        memmove(b->p, nl + 1, b->len - l - 1);
        b->len -= l + 1;
        b->p[b->len] = 0;
    }
    return len;
}

/* From an error body {"error": {...}} into c->err. */
static void parse_error(cordon_client *c, long status, const char *body)
{
    json_t *o = body ? json_loads(body, 0, NULL) : NULL;
    json_t *e = json_object_get(o, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *field = json_string_value(json_object_get(e, "field"));
    set_error(c, status, code ? code : "http_error", field, "%s", msg ? msg : (body ? body : "no body"));
    json_decref(o);
}

static int perform(cordon_client *c, const char *method, const char *path, const void *body, size_t body_len,
                   const char *content_type, struct buf *out, long *ret_status)
{
    CURL *h = c->curl;
    curl_easy_reset(h);
    char url[2048];
    if ((size_t) snprintf(url, sizeof url, "%s%s", c->base_url, path) >= sizeof url) {
        set_error(c, 0, "invalid_argument", "path", "path too long");
        return -ENAMETOOLONG;
    }
    struct curl_slist *hdrs = NULL;
    char ct[128];
    if (content_type) {
        (void) snprintf(ct, sizeof ct, "Content-Type: %s", content_type);
        hdrs = curl_slist_append(hdrs, ct);
    }
    if (c->auth)
        hdrs = curl_slist_append(hdrs, c->auth);
    hdrs = curl_slist_append(hdrs, "Expect:"); /* no 100-continue round trip */
    curl_easy_setopt(h, CURLOPT_URL, url);
    if (c->socket_path)
        curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, c->socket_path);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) body_len);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(h);
    curl_slist_free_all(hdrs);
    if (rc != CURLE_OK) {
        set_error(c, 0, "unreachable", NULL, "%s %s: %s", method, url, curl_easy_strerror(rc));
        return rc == CURLE_COULDNT_CONNECT ? -ECONNREFUSED : -EIO;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, ret_status);
    if (*ret_status >= 400) {
        parse_error(c, *ret_status, out->p);
        return -EPROTO;
    }
    return 0;
}

int cordon_request(cordon_client *c, const char *method, const char *path, const void *body, size_t body_len,
                   const char *content_type, long *ret_status, char **ret_body, size_t *ret_len)
{
    struct buf out = {0};
    long status = 0;
    int r = perform(c, method, path, body, body_len, content_type, &out, &status);
    if (ret_status)
        *ret_status = status;
    if (ret_len)
        *ret_len = out.len;
    if (ret_body && status) {
        *ret_body = out.p ? out.p : strdup("");
        out.p = NULL;
    }
    free(out.p);
    return r;
}

static int request_json(cordon_client *c, const char *method, const char *path, json_t *body, json_t **ret)
{
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    char *resp = NULL;
    size_t len = 0;
    int r = cordon_request(c, method, path, s, s ? strlen(s) : 0, s ? "application/json" : NULL, NULL, &resp,
                           &len);
    free(s);
    if (r >= 0 && ret) {
        *ret = json_loadb(resp, len, 0, NULL);
        if (!*ret) {
            set_error(c, 200, "bad_response", NULL, "the daemon's answer is not JSON");
            r = -EBADMSG;
        }
    }
    free(resp);
    return r;
}

int cordon_create(cordon_client *c, const char *spec_json, char **ret_id)
{
    char *resp = NULL;
    size_t len = 0;
    const char *body = spec_json ? spec_json : "{}";
    int r =
        cordon_request(c, "POST", "/v1/sandboxes", body, strlen(body), "application/json", NULL, &resp, &len);
    json_t *o = r >= 0 ? json_loadb(resp, len, 0, NULL) : NULL;
    free(resp);
    if (r < 0)
        return r;
    const char *id = json_string_value(json_object_get(o, "id"));
    if (!id || !(*ret_id = strdup(id))) {
        json_decref(o);
        set_error(c, 201, "bad_response", NULL, "no id in the daemon's answer");
        return -EBADMSG;
    }
    json_decref(o);
    return 0;
}

static int sandbox_path(cordon_client *c, char *buf, size_t size, const char *id, const char *rest)
{
    for (const char *p = id; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z'))) {
            set_error(c, 0, "invalid_argument", "id", "'%s' is not a sandbox id", id);
            return -EINVAL;
        }
    (void) snprintf(buf, size, "/v1/sandboxes/%s%s", id, rest);
    return 0;
}

int cordon_delete(cordon_client *c, const char *id)
{
    char path[128];
    int r = sandbox_path(c, path, sizeof path, id, "");
    return r < 0 ? r : request_json(c, "DELETE", path, NULL, NULL);
}

int cordon_delete_labelled(cordon_client *c, const char *const *labels, size_t *ret_n)
{
    char path[4096] = "/v1/sandboxes";
    size_t off = strlen(path);
    for (size_t i = 0; labels && labels[i] && off < sizeof path; i++) {
        char *q = curl_easy_escape(c->curl, labels[i], 0);
        if (!q)
            return -ENOMEM;
        off += (size_t) snprintf(path + off, sizeof path - off, "%clabel=%s", i ? '&' : '?', q);
        curl_free(q);
    }
    if (!labels || !labels[0] || off >= sizeof path) {
        set_error(c, 0, "invalid_argument", "label", "%s",
                  off >= sizeof path ? "too many labels" : "no label");
        return -EINVAL;
    }
    json_t *o = NULL;
    int r = request_json(c, "DELETE", path, NULL, &o);
    if (r >= 0 && ret_n)
        *ret_n = json_array_size(json_object_get(o, "deleted"));
    json_decref(o);
    return r;
}

/* A JSON body to /v1/sandboxes/{id}<rest>; *ret_json (NULL: dropped) the answer's text. */
static int sandbox_json(cordon_client *c, const char *method, const char *id, const char *rest,
                        const char *body, char **ret_json)
{
    char path[128];
    int r = sandbox_path(c, path, sizeof path, id, rest);
    if (r < 0)
        return r;
    size_t len = 0;
    char *resp = NULL;
    r = cordon_request(c, method, path, body, strlen(body), "application/json", NULL, &resp, &len);
    if (r >= 0 && ret_json)
        *ret_json = resp;
    else
        free(resp);
    return r;
}

int cordon_update(cordon_client *c, const char *id, const char *patch_json, char **ret_json)
{
    return sandbox_json(c, "PATCH", id, "", patch_json, ret_json);
}

int cordon_call(cordon_client *c, const char *id, const char *body_json, char **ret_json)
{
    return sandbox_json(c, "POST", id, "/call", body_json, ret_json);
}

/* Add v to o under k (k NULL: append to the array o); false when v is NULL
 * (a string that is not UTF-8: JSON cannot carry it, and dropping it
 * silently would run a different command). */
static bool put(json_t *o, const char *k, json_t *v)
{
    if (!v)
        return false;
    return (k ? json_object_set_new(o, k, v) : json_array_append_new(o, v)) == 0;
}

/* The exec request body; NULL (with c's error set) when it cannot be built. */
static json_t *exec_body(cordon_client *c, const char *const argv[], const struct cordon_exec_opts *o,
                         bool stream)
{
    json_t *cmd = json_array();
    bool ok = cmd != NULL;
    const char *bad = "cmd";
    for (size_t i = 0; ok && argv && argv[i]; i++)
        ok = put(cmd, NULL, json_string(argv[i]));
    json_t *b = ok ? json_pack("{s:O, s:s, s:b}", "cmd", cmd, "encoding", "base64", "stream", stream) : NULL;
    json_decref(cmd);
    ok = b != NULL;
    if (ok && o && o->env) {
        json_t *env = json_object();
        bad = "env";
        for (size_t i = 0; env && ok && o->env[i]; i++) {
            const char *eq = strchr(o->env[i], '=');
            char *key = eq ? strndup(o->env[i], (size_t) (eq - o->env[i])) : NULL;
            ok = key && put(env, key, json_string(eq + 1));
            free(key);
        }
        ok = ok && put(b, "env", env);
    }
    if (ok && o && o->cwd)
        ok = put(b, "cwd", json_string(o->cwd)), bad = "cwd";
    if (ok && o && o->user)
        ok = put(b, "user", json_string(o->user)), bad = "user";
    if (ok && o && o->timeout_s > 0)
        ok = put(b, "timeout_s", json_real(o->timeout_s)), bad = "timeout_s";
    if (ok && o && o->verifier && o->verifier_copy) {
        json_t *copy = json_array();
        for (size_t i = 0; copy && o->verifier_copy[i]; i++)
            json_array_append_new(copy, json_string(o->verifier_copy[i]));
        ok = copy && put(b, "verifier", json_pack("{s:s, s:o}", "mode", "sibling", "copy", copy)),
        bad = "verifier";
    } else if (ok && o && o->verifier)
        ok = put(b, "verifier", json_true()), bad = "verifier";
    if (ok && o && o->stdin_data) {
        char *s = malloc(cdn_base64_len(o->stdin_len) + 1);
        if (s)
            cdn_base64_encode(o->stdin_data, o->stdin_len, s);
        ok = s && put(b, "stdin_b64", json_string(s)), bad = "stdin";
        free(s);
    }
    if (!ok) {
        json_decref(b);
        set_error(c, 0, "invalid_argument", bad,
                  "%s: not valid UTF-8 (or out of memory), or an env entry without '='", bad);
        return NULL;
    }
    return b;
}

static int decode_b64(json_t *v, uint8_t **ret, size_t *ret_len)
{
    const char *s = json_string_value(v);
    size_t n = s ? strlen(s) : 0;
    uint8_t *p = malloc(n / 4 * 3 + 1);
    if (!p)
        return -ENOMEM;
    long k = s ? cdn_base64_decode(s, n, p) : 0;
    if (k < 0) {
        free(p);
        return -EBADMSG;
    }
    p[k] = 0;
    *ret = p;
    *ret_len = (size_t) k;
    return 0;
}

static void fill_result(json_t *o, struct cordon_exec_result *r)
{
    r->exit_code = (int) json_integer_value(json_object_get(o, "exit_code"));
    r->signal = (int) json_integer_value(json_object_get(o, "signal"));
    r->timed_out = json_is_true(json_object_get(o, "timed_out"));
    r->truncated = json_is_true(json_object_get(o, "truncated"));
    r->duration_ms = json_number_value(json_object_get(o, "duration_ms"));
}

static int exec_buffered(cordon_client *c, const char *id, const char *const argv[],
                         const struct cordon_exec_opts *opts, const uint64_t *step,
                         struct cordon_exec_result *ret, bool *ret_replayed)
{
    char path[128];
    int r = sandbox_path(c, path, sizeof path, id, "/exec");
    if (r < 0)
        return r;
    json_t *body = exec_body(c, argv, opts, false), *o = NULL;
    if (body && step && !put(body, "step", json_integer((json_int_t) *step))) {
        json_decref(body);
        set_error(c, 0, "invalid_argument", "step", "step: out of memory");
        return -EINVAL;
    }
    r = body ? request_json(c, "POST", path, body, &o) : -EINVAL;
    json_decref(body);
    if (r < 0)
        return r;
    struct cordon_exec_result res = {0};
    fill_result(o, &res);
    if (decode_b64(json_object_get(o, "stdout_b64"), &res.out, &res.out_len) < 0 ||
        decode_b64(json_object_get(o, "stderr_b64"), &res.err, &res.err_len) < 0) {
        cordon_exec_result_free(&res);
        json_decref(o);
        set_error(c, 200, "bad_response", NULL, "output is not base64");
        return -EBADMSG;
    }
    if (ret_replayed)
        *ret_replayed = json_is_true(json_object_get(o, "replayed"));
    json_decref(o);
    *ret = res;
    return 0;
}

int cordon_exec(cordon_client *c, const char *id, const char *const argv[],
                const struct cordon_exec_opts *opts, struct cordon_exec_result *ret)
{
    return exec_buffered(c, id, argv, opts, NULL, ret, NULL);
}

int cordon_exec_step(cordon_client *c, const char *id, const char *const argv[],
                     const struct cordon_exec_opts *opts, uint64_t step, struct cordon_exec_result *ret,
                     bool *ret_replayed)
{
    if (step >= (1ULL << 40)) {
        set_error(c, 0, "invalid_argument", "step", "step: at most 2^40 - 1");
        return -EINVAL;
    }
    return exec_buffered(c, id, argv, opts, &step, ret, ret_replayed);
}

int cordon_checkpoint(cordon_client *c, const char *id, char *ret_id, size_t size)
{
    char path[128];
    int r = sandbox_path(c, path, sizeof path, id, "/checkpoints");
    if (r < 0)
        return r;
    json_t *body = json_object(), *o = NULL;
    r = body ? request_json(c, "POST", path, body, &o) : -ENOMEM;
    json_decref(body);
    const char *ck = json_string_value(json_object_get(o, "id"));
    if (r >= 0 && (!ck || strlen(ck) >= size)) {
        set_error(c, 200, "bad_response", NULL, "no checkpoint id in the daemon's answer");
        r = -EBADMSG;
    }
    if (r >= 0)
        memcpy(ret_id, ck, strlen(ck) + 1);
    json_decref(o);
    return r;
}

int cordon_rollback(cordon_client *c, const char *id, const char *checkpoint)
{
    char path[128];
    int r = sandbox_path(c, path, sizeof path, id, "/rollback");
    if (r < 0)
        return r;
    json_t *body = json_pack("{s:s}", "checkpoint", checkpoint ? checkpoint : ""), *o = NULL;
    r = body ? request_json(c, "POST", path, body, &o) : -ENOMEM;
    json_decref(body);
    json_decref(o);
    return r;
}

int cordon_fork(cordon_client *c, const char *id, const char *checkpoint, unsigned n, char (*ret_ids)[16])
{
    char path[128];
    int r = sandbox_path(c, path, sizeof path, id, "/fork");
    if (r < 0)
        return r;
    json_t *body = json_pack("{s:I}", "count", (json_int_t) n), *o = NULL;
    if (body && checkpoint && json_object_set_new(body, "checkpoint", json_string(checkpoint)) < 0) {
        json_decref(body);
        body = NULL;
    }
    r = body ? request_json(c, "POST", path, body, &o) : -ENOMEM;
    json_decref(body);
    json_t *list = json_object_get(o, "sandboxes");
    if (r >= 0 && json_array_size(list) != n) {
        set_error(c, 200, "bad_response", NULL, "the daemon's answer does not list %u sandboxes", n);
        r = -EBADMSG;
    }
    for (unsigned i = 0; r >= 0 && i < n; i++) {
        const char *s = json_string_value(json_object_get(json_array_get(list, i), "id"));
        if (!s || strlen(s) >= 16) {
            set_error(c, 200, "bad_response", NULL, "a sandbox without an id in the daemon's answer");
            r = -EBADMSG;
            break;
        }
        memcpy(ret_ids[i], s, strlen(s) + 1);
    }
    json_decref(o);
    return r;
}

int cordon_start(cordon_client *c, const char *id, const char *const argv[],
                 const struct cordon_exec_opts *opts, bool keep_stdin, uint32_t *ret_pid)
{
    char path[128];
    int r = sandbox_path(c, path, sizeof path, id, "/exec");
    if (r < 0)
        return r;
    json_t *body = exec_body(c, argv, opts, false), *o = NULL;
    if (body &&
        (json_object_del(body, "stream") < 0 || json_object_set_new(body, "background", json_true()) < 0 ||
         (keep_stdin && json_object_set_new(body, "keep_stdin", json_true()) < 0))) {
        json_decref(body);
        body = NULL;
    }
    r = body ? request_json(c, "POST", path, body, &o) : -EINVAL;
    json_decref(body);
    json_int_t pid = json_integer_value(json_object_get(o, "pid"));
    json_decref(o);
    if (r >= 0 && (pid <= 0 || pid > UINT32_MAX)) {
        set_error(c, 200, "bad_response", NULL, "no pid in the daemon's answer");
        return -EBADMSG;
    }
    if (r >= 0 && ret_pid)
        *ret_pid = (uint32_t) pid;
    return r;
}

void cordon_exec_result_free(struct cordon_exec_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

struct stream_ctx {
    void (*on_output)(int stream, const uint8_t *p, size_t len, void *arg);
    void *arg;
    struct cordon_exec_result *res;
    bool ended;
    struct cordon_error err;
};

static void on_line(const char *line, size_t len, void *arg)
{
    struct stream_ctx *s = arg;
    json_t *o = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(o, "type"));
    if (type && (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0)) {
        uint8_t *p;
        size_t n;
        if (decode_b64(json_object_get(o, "data_b64"), &p, &n) == 0) {
            if (s->on_output)
                s->on_output(type[3] == 'o' ? 1 : 2, p, n, s->arg);
            free(p);
        }
    } else if (type && strcmp(type, "exit") == 0) {
        fill_result(o, s->res);
        s->ended = true;
    } else if (type && strcmp(type, "error") == 0) {
        json_t *e = json_object_get(o, "error");
        const char *code = json_string_value(json_object_get(e, "code"));
        const char *msg = json_string_value(json_object_get(e, "message"));
        const char *field = json_string_value(json_object_get(e, "field"));
        (void) snprintf(s->err.code, sizeof s->err.code, "%s", code ? code : "error");
        (void) snprintf(s->err.message, sizeof s->err.message, "%s", msg ? msg : "");
        (void) snprintf(s->err.field, sizeof s->err.field, "%s", field ? field : "");
        s->err.status = 200;
    }
    json_decref(o);
}

int cordon_exec_stream(cordon_client *c, const char *id, const char *const argv[],
                       const struct cordon_exec_opts *opts,
                       void (*on_output)(int stream, const uint8_t *p, size_t len, void *arg), void *arg,
                       struct cordon_exec_result *ret)
{
    char path[128];
    int r = sandbox_path(c, path, sizeof path, id, "/exec");
    if (r < 0)
        return r;
    json_t *body = exec_body(c, argv, opts, true);
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s)
        return body ? -ENOMEM : -EINVAL;
    struct cordon_exec_result res = {0};
    struct stream_ctx ctx = {.on_output = on_output, .arg = arg, .res = &res};
    struct buf out = {.on_line = on_line, .arg = &ctx, .h = c->curl};
    long status = 0;
    r = perform(c, "POST", path, s, strlen(s), "application/json", &out, &status);
    free(s);
    free(out.p);
    if (r < 0)
        return r;
    if (ctx.err.status) {
        c->err = ctx.err;
        return -EPROTO;
    }
    if (!ctx.ended) {
        set_error(c, status, "bad_response", NULL, "the stream ended without an exit");
        return -EBADMSG;
    }
    *ret = res;
    return 0;
}

int cordon_request_lines(cordon_client *c, const char *method, const char *path,
                         void (*each)(const char *line, size_t len, void *arg), void *arg)
{
    struct buf out = {.on_line = each, .arg = arg, .h = c->curl};
    long status = 0;
    int r = perform(c, method, path, NULL, 0, NULL, &out, &status);
    if (r >= 0 && out.len) /* a last line without its newline */
        each(out.p, out.len, arg);
    free(out.p);
    return r;
}

/* /v1/sandboxes/{id}<route>?<k1>=<v1>[&<k2>=<v2>], each value escaped. */
static int query_path(cordon_client *c, char *buf, size_t size, const char *id, const char *route,
                      const char *k1, const char *v1, const char *k2, const char *v2)
{
    char *q1 = curl_easy_escape(c->curl, v1, 0), *q2 = k2 ? curl_easy_escape(c->curl, v2, 0) : NULL;
    char rest[1800];
    int r = !q1 || (k2 && !q2) ? -ENOMEM
            : (size_t) snprintf(rest, sizeof rest, "%s?%s=%s%s%s%s%s", route, k1, q1, k2 ? "&" : "",
                                k2 ? k2 : "", k2 ? "=" : "", k2 ? q2 : "") < sizeof rest
                ? 0
                : -ENAMETOOLONG;
    curl_free(q1);
    curl_free(q2);
    if (r == -ENAMETOOLONG)
        set_error(c, 0, "invalid_argument", k1, "%s too long", k1);
    return r < 0 ? r : sandbox_path(c, buf, size, id, rest);
}

static int file_path(cordon_client *c, char *buf, size_t size, const char *id, const char *path)
{
    return query_path(c, buf, size, id, "/files", "path", path, NULL, NULL);
}

int cordon_file_stat(cordon_client *c, const char *id, const char *path, struct cordon_file_info *ret)
{
    char p[2048];
    json_t *o = NULL;
    int r = query_path(c, p, sizeof p, id, "/stat", "path", path, NULL, NULL);
    if (r >= 0)
        r = request_json(c, "GET", p, NULL, &o);
    const char *type = json_string_value(json_object_get(o, "type"));
    if (r >= 0 && !type) {
        set_error(c, 200, "bad_response", NULL, "no type in the daemon's answer");
        r = -EBADMSG;
    }
    if (r >= 0) {
        *ret = (struct cordon_file_info){
            .size = (uint64_t) json_integer_value(json_object_get(o, "size")),
            .mode = (uint32_t) json_integer_value(json_object_get(o, "mode")),
            .mtime = (int64_t) json_integer_value(json_object_get(o, "mtime")),
        };
        (void) snprintf(ret->type, sizeof ret->type, "%s", type);
    }
    json_decref(o);
    return r;
}

int cordon_file_move(cordon_client *c, const char *id, const char *from, const char *to, bool overwrite)
{
    char p[4096];
    int r = query_path(c, p, sizeof p, id, "/move", "from", from, "to", to);
    size_t n = r < 0 ? 0 : strlen(p);
    if (r >= 0 && !overwrite)
        (void) snprintf(p + n, sizeof p - n, "&overwrite=false");
    return r < 0 ? r : request_json(c, "POST", p, NULL, NULL);
}

int cordon_file_chmod(cordon_client *c, const char *id, const char *path, unsigned mode)
{
    char p[2048], m[16];
    if (mode > 07777) {
        set_error(c, 0, "invalid_argument", "mode", "mode %o: more than the permission bits (7777)", mode);
        return -EINVAL;
    }
    (void) snprintf(m, sizeof m, "%o", mode);
    int r = query_path(c, p, sizeof p, id, "/chmod", "path", path, "mode", m);
    return r < 0 ? r : request_json(c, "POST", p, NULL, NULL);
}

int cordon_file_write(cordon_client *c, const char *id, const char *path, const void *data, size_t len)
{
    char p[2048];
    int r = file_path(c, p, sizeof p, id, path);
    return r < 0 ? r
                 : cordon_request(c, "PUT", p, data ? data : "", len, "application/octet-stream", NULL, NULL,
                                  NULL);
}

static int read_fd(cordon_client *c, const char *id, const char *route, const char *path, int fd,
                   uint64_t max_bytes, uint64_t *ret_len);

int cordon_file_read_fd(cordon_client *c, const char *id, const char *path, int fd, uint64_t max_bytes,
                        uint64_t *ret_len)
{
    return read_fd(c, id, "/files", path, fd, max_bytes, ret_len);
}

int cordon_archive_get_fd(cordon_client *c, const char *id, const char *path, int fd, uint64_t max_bytes)
{
    return read_fd(c, id, "/archive", path, fd, max_bytes, NULL);
}

int cordon_archive_put(cordon_client *c, const char *id, const char *path, const void *tar, size_t len)
{
    char p[2048];
    int r = query_path(c, p, sizeof p, id, "/archive", "path", path, NULL, NULL);
    return r < 0 ? r
                 : cordon_request(c, "PUT", p, tar ? tar : "", len, "application/x-tar", NULL, NULL, NULL);
}

static int read_fd(cordon_client *c, const char *id, const char *route, const char *path, int fd,
                   uint64_t max_bytes, uint64_t *ret_len)
{
    char p[2048];
    int r = query_path(c, p, sizeof p, id, route, "path", path, NULL, NULL);
    size_t n = r < 0 ? 0 : strlen(p);
    if (r >= 0 && max_bytes &&
        (size_t) snprintf(p + n, sizeof p - n, "&max_bytes=%llu", (unsigned long long) max_bytes) >=
            sizeof p - n) {
        set_error(c, 0, "invalid_argument", "path", "path too long");
        r = -ENAMETOOLONG;
    }
    if (r < 0)
        return r;
    if (fd <= 0) {
        set_error(c, 0, "invalid_argument", "fd", "fd must be an open descriptor above 0");
        return -EBADF;
    }
    struct buf out = {.fd = fd, .max = max_bytes, .h = c->curl};
    long status = 0;
    r = perform(c, "GET", p, NULL, 0, NULL, &out, &status);
    free(out.p);
    if (out.over) { /* the daemon's own cap says so first; this is the client's word on it */
        set_error(c, 413, "file_too_large", "max_bytes", "%s: more than max_bytes (%llu)", path,
                  (unsigned long long) max_bytes);
        return -EFBIG;
    }
    if (r >= 0 && ret_len)
        *ret_len = out.got;
    return r;
}

int cordon_file_read(cordon_client *c, const char *id, const char *path, uint8_t **ret_data, size_t *ret_len)
{
    char p[2048];
    int r = file_path(c, p, sizeof p, id, path);
    char *body = NULL;
    if (r >= 0)
        r = cordon_request(c, "GET", p, NULL, 0, NULL, NULL, &body, ret_len);
    if (r < 0) {
        free(body);
        return r;
    }
    *ret_data = (uint8_t *) body;
    return 0;
}
