/* /v1/images: pull (streamed as NDJSON or answered once), list, inspect, delete and prune the
 * OCI image store (docs/cordond.md). Pulls and prunes run in images.c's children; what is read
 * here (refs, records, a config blob) is a few small files of the store.
 *
 * Runs in the loop. The client is trusted as the socket lets it in; its bodies and the reference
 * in the path are still parsed with bounds, and errors name the field ("ref", "stream"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "core/json-util.h"
#include "images.h"
#include "oci/resolve.h"
#include "oci/store.h"

/* ---- pull ---- */

struct pull_req {
    struct evhttp_request *req;
    bool stream;
};

static void pull_line(void *arg, const char *line, size_t len)
{
    struct pull_req *p = arg;
    _cleanup_evbuffer_ struct evbuffer *chunk = evbuffer_new();
    if (chunk && evbuffer_add(chunk, line, len) == 0)
        evhttp_send_reply_chunk(p->req, chunk);
}

/* An error of the pull as the API says it: the request's field is "ref". */
static json_t *pull_error(json_t *result, int *status)
{
    json_t *e = json_object_get(result, "error");
    const char *code = json_string_value(json_object_get(e, "code")) ?: "pull_failed";
    const char *msg = json_string_value(json_object_get(e, "message")) ?: "the pull failed";
    int errnum = (int) json_integer_value(json_object_get(result, "errno"));
    *status = errnum == ESHUTDOWN ? 503 : errnum == ENOENT ? 404 : errnum == EINVAL ? 400 : 502;
    return cdn_api_error_json(code, "ref", msg);
}

static void pull_done(void *arg, json_t *result)
{
    struct pull_req *p = arg;
    int status = 200;
    bool ok = json_object_get(result, "error") == NULL;
    json_t *body = ok ? json_deep_copy(result) : pull_error(result, &status);
    if (!p->stream) {
        cdn_api_reply_json(p->req, status, body);
    } else {
        if (!ok && body)
            json_object_set_new(body, "status", json_string("error"));
        _cleanup_free_ char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        _cleanup_evbuffer_ struct evbuffer *chunk = evbuffer_new();
        if (chunk && s) {
            evbuffer_add_printf(chunk, "%s\n", s);
            evhttp_send_reply_chunk(p->req, chunk);
        }
        evhttp_send_reply_end(p->req);
    }
    free(p);
}

/* POST /v1/images/pull {"ref": "…", "stream": bool} */
static void route_pull(struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    json_error_t jerr;
    _cleanup_json_ json_t *o =
        n ? json_loadb((const char *) evbuffer_pullup(in, -1), n, JSON_REJECT_DUPLICATES, &jerr) : NULL;
    if (!json_is_object(o))
        return cdn_api_reply_error(req, 400, "invalid_argument", "body",
                                   "body: expected a JSON object {\"ref\": \"…\", \"stream\": false}");
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        if (strcmp(key, "ref") != 0 && strcmp(key, "stream") != 0)
            return cdn_api_reply_error(req, 400, "invalid_argument", key, "%.40s: unknown field", key);
    }
    json_t *ref = json_object_get(o, "ref"), *stream = json_object_get(o, "stream");
    if (!json_is_string(ref))
        return cdn_api_reply_error(req, 400, "invalid_ref", "ref",
                                   "ref: required, an image reference (string)");
    if (stream && !json_is_boolean(stream))
        return cdn_api_reply_error(req, 400, "invalid_argument", "stream", "stream: must be a boolean");
    char canon[CDN_IMAGE_REF_MAX];
    struct cdn_error err = {0};
    if (cdn_images_canonical(json_string_value(ref), "ref", canon, &err) < 0)
        return cdn_api_reply_cdn_error(req, 400, "invalid_ref", &err);
    if (cdn_images_check_source(json_string_value(ref), "ref", &err) < 0)
        return cdn_api_reply_cdn_error(req, err.errnum == ENOENT ? 400 : 403, "invalid_ref", &err);
    struct pull_req *p = calloc(1, sizeof *p);
    if (!p)
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    *p = (struct pull_req){.req = req, .stream = json_is_true(stream)};
    if (p->stream) { /* before joining: a running pull's "resolved" line comes at once */
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/x-ndjson");
        evhttp_send_reply_start(req, 200, "OK");
        cdn_api_stream_timeout(req);
    } else {
        cdn_api_stream_timeout(req); /* a pull may take longer than the request timeout */
    }
    struct image_waiter w = {.line = p->stream ? pull_line : NULL, .done = pull_done, .arg = p};
    if (cdn_images_pull(canon, w, &err) < 0) {
        json_t *r = json_pack("{s:s, s:{s:s, s:s}, s:i}", "status", "error", "error", "code",
                              err.errnum == ESHUTDOWN ? "stopping" : "pull_failed", "message", err.msg,
                              "errno", err.errnum);
        pull_done(p, r);
        json_decref(r);
    }
}

/* ---- list and inspect ---- */

/* Every reference of the store, grouped by the image (manifest) it names. */
struct by_image {
    json_t *refs; /* manifest → [ref, …] */
};

static int note_ref(const char *ref, const char *manifest, void *data)
{
    struct by_image *bi = data;
    json_t *a = json_object_get(bi->refs, manifest);
    if (!a && json_object_set_new(bi->refs, manifest, a = json_array()) < 0)
        return -ENOMEM;
    return json_array_append_new(a, json_string(ref)) < 0 ? -ENOMEM : 0;
}

static json_t *image_json(const struct cdn_image_record *rec, json_t *refs)
{
    char platform[100];
    (void) snprintf(platform, sizeof platform, "%s/%s%s%s", rec->os, rec->arch, rec->variant[0] ? "/" : "",
                    rec->variant);
    char first[64] = "";
    unsigned users = cdn_images_users(rec->manifest, first);
    return json_pack("{s:o, s:s, s:I, s:I, s:I, s:s, s:I}", "refs", refs ? json_incref(refs) : json_array(),
                     "digest", rec->manifest, "size", (json_int_t) rec->size, "layers",
                     (json_int_t) rec->n_layers, "created", (json_int_t) rec->created, "platform", platform,
                     "in_use", (json_int_t) users);
}

struct listing {
    struct by_image bi;
    json_t *images;
};

static int list_one(const struct cdn_image_record *rec, void *data)
{
    struct listing *l = data;
    return json_array_append_new(l->images, image_json(rec, json_object_get(l->bi.refs, rec->manifest))) < 0
               ? -ENOMEM
               : 0;
}

static void route_list(struct evhttp_request *req)
{
    struct cdn_error err = {0};
    _cleanup_store_ struct cdn_store *s = NULL;
    struct listing l = {.bi.refs = json_object(), .images = json_array()};
    int r = l.bi.refs && l.images ? cdn_store_open(cdn_daemon->cfg.state_dir, &s, &err) : -ENOMEM;
    if (r >= 0)
        r = cdn_store_ref_list(s, note_ref, &l.bi, &err);
    if (r >= 0)
        r = cdn_store_image_list(s, list_one, &l, &err);
    json_decref(l.bi.refs);
    if (r < 0) {
        json_decref(l.images);
        return cdn_api_reply_error(req, 500, "store_failed", NULL, "%s", err.msg[0] ? err.msg : strerror(-r));
    }
    cdn_api_reply_json(req, 200, json_pack("{s:o}", "images", l.images));
}

static json_t *strv_json(const struct cdn_strv *v)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < v->n; i++)
        (void) json_array_append_new(a, json_string(v->v[i]));
    return a;
}

/* The image a path's reference names: its canonical form and record; answered (404, 400) if none. */
static bool find_image(struct evhttp_request *req, const char *name, struct cdn_store **s,
                       char canon[CDN_IMAGE_REF_MAX], struct cdn_image_record *rec)
{
    struct cdn_error err = {0};
    char manifest[CDN_DIGEST_MAX];
    if (cdn_images_canonical(name, "ref", canon, &err) < 0) {
        cdn_api_reply_cdn_error(req, 400, "invalid_ref", &err);
        return false;
    }
    int r = cdn_store_open(cdn_daemon->cfg.state_dir, s, &err);
    if (r >= 0 && (r = cdn_store_ref_get(*s, canon, manifest, &err)) >= 0)
        r = cdn_store_image_get(*s, manifest, rec, &err);
    if (r == -ENOENT)
        cdn_api_reply_error(req, 404, "image_not_found", "ref", "image %s is not in the store", canon);
    else if (r < 0)
        cdn_api_reply_error(req, 500, "store_failed", "ref", "%s", err.msg);
    return r >= 0;
}

static void route_inspect(struct evhttp_request *req, const char *name)
{
    _cleanup_store_ struct cdn_store *s = NULL;
    char canon[CDN_IMAGE_REF_MAX];
    struct cdn_image_record rec = {0};
    if (!find_image(req, name, &s, canon, &rec))
        return;
    struct by_image bi = {.refs = json_object()};
    struct cdn_oci_config c = {0};
    struct cdn_error err = {0};
    if (bi.refs)
        (void) cdn_store_ref_list(s, note_ref, &bi, NULL);
    json_t *o = image_json(&rec, json_object_get(bi.refs, rec.manifest));
    json_decref(bi.refs);
    json_t *layers = json_array();
    for (size_t i = 0; layers && i < rec.n_layers; i++)
        (void) json_array_append_new(
            layers, json_pack("{s:s, s:s}", "diff_id", rec.diff_ids[i], "blob", rec.blobs[i]));
    if (o) {
        json_object_set_new(o, "ref", json_string(canon));
        json_object_set_new(o, "config_digest", json_string(rec.config));
        json_object_set_new(o, "layers", layers ? layers : json_array());
    } else {
        json_decref(layers);
    }
    cdn_image_record_done(&rec);
    if (o && cdn_oci_ensure(canon, CDN_PULL_NEVER, NULL, &c, &err) >= 0)
        json_object_set_new(o, "config",
                            json_pack("{s:o, s:o, s:o, s:s?, s:s?}", "Env", strv_json(&c.env), "Entrypoint",
                                      strv_json(&c.entrypoint), "Cmd", strv_json(&c.cmd), "WorkingDir",
                                      c.workdir, "User", c.user));
    cdn_oci_config_free(&c);
    cdn_api_reply_json(req, o ? 200 : 500, o ? o : cdn_api_error_json("internal", NULL, "out of memory"));
}

/* ---- delete and prune ---- */

struct ref_count {
    const char *manifest;
    unsigned n;
};

static int count_refs(const char *ref, const char *manifest, void *data)
{
    (void) ref;
    struct ref_count *c = data;
    c->n += strcmp(manifest, c->manifest) == 0;
    return 0;
}

/* The reference goes; the image record with its last reference (prune frees the bytes). Refused
 * while a sandbox runs on the image: its layers are its root. */
static void route_delete(struct evhttp_request *req, const char *name)
{
    _cleanup_store_ struct cdn_store *s = NULL;
    char canon[CDN_IMAGE_REF_MAX], first[64] = "";
    struct cdn_image_record rec = {0};
    if (!find_image(req, name, &s, canon, &rec))
        return;
    char manifest[CDN_DIGEST_MAX];
    memcpy(manifest, rec.manifest, sizeof manifest);
    cdn_image_record_done(&rec);
    unsigned users = cdn_images_users(manifest, first);
    if (users)
        return cdn_api_reply_error(req, 409, "image_in_use", "ref",
                                   "image %s is in use by sandbox %s%s: delete the sandboxes first", canon,
                                   first, users > 1 ? " and others" : "");
    struct cdn_error err = {0};
    /* and while a sandbox of `cordon run` (or one cordond does not list, a pooled one) runs on it */
    _cleanup_close_ int claim = cdn_store_image_claim(s, manifest, canon, &err);
    if (claim < 0)
        return cdn_api_reply_error(req, claim == -EBUSY ? 409 : 500,
                                   claim == -EBUSY ? "image_in_use" : "store_failed", "ref", "%s", err.msg);
    struct ref_count left = {manifest, 0};
    int r = cdn_store_ref_remove(s, canon, &err);
    if (r >= 0)
        r = cdn_store_ref_list(s, count_refs, &left, &err);
    if (r >= 0 && left.n == 0)
        r = cdn_store_image_remove(s, manifest, &err);
    if (r >= 0 && left.n == 0)
        cdn_images_prune_disks(s);
    if (r < 0)
        return cdn_api_reply_error(req, 500, "store_failed", "ref", "%s", err.msg);
    cdn_api_reply_json(req, 200,
                       json_pack("{s:s, s:s, s:b, s:b}", "ref", canon, "digest", manifest, "deleted", 1,
                                 "image_removed", left.n == 0));
}

static void prune_done(void *arg, json_t *result)
{
    struct evhttp_request *req = arg;
    json_t *e = json_object_get(result, "error");
    if (e)
        return cdn_api_reply_error(req, 500, json_string_value(json_object_get(e, "code")) ?: "store_failed",
                                   NULL, "%s",
                                   json_string_value(json_object_get(e, "message")) ?: "prune failed");
    cdn_api_reply_json(req, 200,
                       json_pack("{s:O, s:O}", "freed_bytes", json_object_get(result, "freed_bytes"),
                                 "store_size", json_object_get(result, "store_size")));
}

static void route_prune(struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (n) {
        _cleanup_json_ json_t *o = json_loadb((const char *) evbuffer_pullup(in, -1), n, 0, NULL);
        if (!json_is_object(o) || json_object_size(o) != 0)
            return cdn_api_reply_error(req, 400, "invalid_argument", "body", "body: expected nothing or {}");
    }
    struct cdn_error err = {0};
    cdn_api_stream_timeout(req);
    if (cdn_images_prune((struct image_waiter){.done = prune_done, .arg = req}, &err) < 0)
        cdn_api_reply_error(req, err.errnum == ESHUTDOWN ? 503 : 500, "store_failed", NULL, "%s", err.msg);
}

/* ---- dispatch ---- */

void cdn_api_images(struct evhttp_request *req, const char *path)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    const char *rest = path + strlen("/v1/images");
    if (!rest[0] || strcmp(rest, "/") == 0) {
        if (m == EVHTTP_REQ_GET)
            return route_list(req);
        return cdn_api_reply_error(req, 405, "method_not_allowed", NULL, "/v1/images takes GET");
    }
    rest++; /* the '/' */
    if (m == EVHTTP_REQ_POST && strcmp(rest, "pull") == 0)
        return route_pull(req);
    if (m == EVHTTP_REQ_POST && strcmp(rest, "prune") == 0)
        return route_prune(req);
    /* The rest is one reference, URL-encoded ("%2F" for '/', "%3A" for ':'); plain slashes too. */
    size_t len = 0;
    _cleanup_free_ char *name = evhttp_uridecode(rest, 0, &len);
    if (!name || len != strlen(name) || !len)
        return cdn_api_reply_error(req, 400, "invalid_ref", "ref", "ref: empty or not decodable");
    if (m == EVHTTP_REQ_GET)
        return route_inspect(req, name);
    if (m == EVHTTP_REQ_DELETE)
        return route_delete(req, name);
    cdn_api_reply_error(req, 405, "method_not_allowed", NULL, "/v1/images/REF takes GET or DELETE");
}
