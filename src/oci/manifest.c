/* Manifests and indexes (manifest.h). Runs on the host as root over bytes a registry, a layout or an
 * archive sent: nothing here trusts them. Digests are only checked for form here; that the bytes
 * match the digest they were fetched by is the fetcher's job (cdn_digest_verify_fd, the registry
 * client). A document must be unambiguous (a manifest with "manifests", or an index with "layers",
 * is refused), since the same bytes read as the other kind by another tool would run another image. */
#include "oci/manifest.h"
#include "oci/manifest-json.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define MT_SCHEMA1        "application/vnd.docker.distribution.manifest.v1+json"
#define MT_SCHEMA1_SIGNED "application/vnd.docker.distribution.manifest.v1+prettyjws"
#define MT_OCI_CONFIG     "application/vnd.oci.image.config.v1+json"
#define MT_DOCKER_CONFIG  "application/vnd.docker.container.image.v1+json"

static const struct {
    const char *type;
    enum cdn_oci_compression compression;
} layer_types[] = {
    {"application/vnd.oci.image.layer.v1.tar", CDN_OCI_TAR},
    {"application/vnd.oci.image.layer.v1.tar+gzip", CDN_OCI_GZIP},
    {"application/vnd.oci.image.layer.v1.tar+zstd", CDN_OCI_ZSTD},
    {"application/vnd.docker.image.rootfs.diff.tar.gzip", CDN_OCI_GZIP},
};

int cdn_oci_json_load(const void *json, size_t len, const char *what, json_t **ret, struct cdn_error *err)
{
    if (len > CDN_OCI_JSON_MAX)
        return cdn_error_field(err, E2BIG, what, "%s: %zu bytes, more than the %u cordon reads", what, len,
                               CDN_OCI_JSON_MAX);
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        for (char *c = jerr.text; *c; c++) /* jansson quotes the input near the error */
            if ((unsigned char) *c < 0x20 || *c == 0x7f)
                *c = '?';
        return cdn_error_field(err, EINVAL, what, "%s: not valid JSON (line %d: %s)", what, jerr.line,
                               jerr.text);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return cdn_error_field(err, EINVAL, what, "%s: not a JSON object", what);
    }
    *ret = root;
    return 0;
}

int cdn_oci_json_str(json_t *o, const char *key, bool required, char *buf, size_t size, const char *field,
                     struct cdn_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required)
            return cdn_error_field(err, EINVAL, field, "%s: missing", field);
        buf[0] = '\0';
        return 0;
    }
    if (!json_is_string(v))
        return cdn_error_field(err, EINVAL, field, "%s: not a string", field);
    if (json_string_length(v) >= size)
        return cdn_error_field(err, E2BIG, field, "%s: longer than %zu bytes", field, size - 1);
    /* these strings end up in error messages and logs: no line breaks or escapes in them */
    for (const char *c = json_string_value(v); *c; c++)
        if ((unsigned char) *c < 0x20 || *c == 0x7f)
            return cdn_error_field(err, EINVAL, field, "%s: contains a control character", field);
    memcpy(buf, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

static int parse_platform(json_t *p, const char *field, struct cdn_oci_platform *ret, struct cdn_error *err)
{
    char f[48];
    if (!p || json_is_null(p))
        return 0;
    if (!json_is_object(p))
        return cdn_error_field(err, EINVAL, field, "%s.platform: not an object", field);
    (void) snprintf(f, sizeof f, "%s.platform.os", field);
    int r = cdn_oci_json_str(p, "os", true, ret->os, sizeof ret->os, f, err);
    if (r < 0)
        return r;
    (void) snprintf(f, sizeof f, "%s.platform.architecture", field);
    r = cdn_oci_json_str(p, "architecture", true, ret->arch, sizeof ret->arch, f, err);
    if (r < 0)
        return r;
    (void) snprintf(f, sizeof f, "%s.platform.variant", field);
    return cdn_oci_json_str(p, "variant", false, ret->variant, sizeof ret->variant, f, err);
}

/* field: "manifest.layers[3]"; the errors name its members. */
static int parse_desc(json_t *o, const char *field, struct cdn_oci_desc *d, struct cdn_error *err)
{
    char f[48];
    if (!json_is_object(o))
        return cdn_error_field(err, EINVAL, field, "%s: not an object", field);
    (void) snprintf(f, sizeof f, "%s.mediaType", field);
    int r = cdn_oci_json_str(o, "mediaType", true, d->media_type, sizeof d->media_type, f, err);
    if (r < 0)
        return r;
    (void) snprintf(f, sizeof f, "%s.digest", field);
    r = cdn_oci_json_str(o, "digest", true, d->digest, sizeof d->digest, f, err);
    if (r < 0)
        return r;
    r = cdn_digest_check(d->digest, f, err);
    if (r < 0)
        return r;
    (void) snprintf(f, sizeof f, "%s.size", field);
    json_t *size = json_object_get(o, "size");
    if (!json_is_integer(size) || json_integer_value(size) < 0)
        return cdn_error_field(err, EINVAL, f, "%s: missing or not a non-negative integer", f);
    d->size = (uint64_t) json_integer_value(size);
    json_t *ann = json_object_get(o, "annotations");
    if (json_is_object(ann)) {
        (void) snprintf(f, sizeof f, "%s.annotations", field);
        r = cdn_oci_json_str(ann, "org.opencontainers.image.ref.name", false, d->ref_name, sizeof d->ref_name,
                             f, err);
        if (r < 0)
            return r;
        json_t *type = json_object_get(ann, "vnd.docker.reference.type");
        d->attestation = json_is_string(type) && strcmp(json_string_value(type), "attestation-manifest") == 0;
    }
    return parse_platform(json_object_get(o, "platform"), field, &d->platform, err);
}

static bool is_manifest_type(const char *t)
{
    return strcmp(t, CDN_OCI_MT_MANIFEST) == 0 || strcmp(t, CDN_OCI_MT_DOCKER_MANIFEST) == 0;
}

static bool is_index_type(const char *t)
{
    return strcmp(t, CDN_OCI_MT_INDEX) == 0 || strcmp(t, CDN_OCI_MT_DOCKER_LIST) == 0;
}

/* Content-Type without parameters; "" for the generic types some servers and files give JSON. */
static void content_type_of(const char *ct, char out[128])
{
    out[0] = '\0';
    if (!ct)
        return;
    ct += strspn(ct, " \t");
    size_t n = strcspn(ct, "; \t");
    if (n >= 128)
        return;
    memcpy(out, ct, n);
    out[n] = '\0';
    if (strcmp(out, "application/json") == 0 || strcmp(out, "text/plain") == 0 ||
        strcmp(out, "application/octet-stream") == 0)
        out[0] = '\0';
}

/* The document's kind and media type, from its mediaType, the Content-Type or its members. */
static int judge(json_t *root, const char *content_type, enum cdn_oci_kind *kind, char mt[128],
                 struct cdn_error *err)
{
    json_t *sv = json_object_get(root, "schemaVersion");
    if ((json_is_integer(sv) && json_integer_value(sv) == 1) || json_object_get(root, "fsLayers"))
        return cdn_error_field(err, EMEDIUMTYPE, "manifest",
                               "manifest: Docker schema 1 manifests are not supported (push the image again "
                               "with a current tool)");
    if (!json_is_integer(sv) || json_integer_value(sv) != 2)
        return cdn_error_field(err, EINVAL, "manifest.schemaVersion", "manifest.schemaVersion: must be 2");
    char body[128], ct[128];
    int r = cdn_oci_json_str(root, "mediaType", false, body, sizeof body, "manifest.mediaType", err);
    if (r < 0)
        return r;
    content_type_of(content_type, ct);
    if (body[0] && ct[0] && strcmp(body, ct) != 0)
        return cdn_error_field(err, EINVAL, "manifest.mediaType",
                               "manifest.mediaType: '%.100s' but the server sent Content-Type '%.100s'", body,
                               ct);
    bool has_manifests = json_object_get(root, "manifests") != NULL;
    bool has_layers = json_object_get(root, "layers") || json_object_get(root, "config");
    if (has_manifests && has_layers)
        return cdn_error_field(err, EINVAL, "manifest",
                               "manifest: has both 'manifests' and 'layers'/'config' (ambiguous, refused)");
    (void) snprintf(mt, 128, "%s", body[0] ? body : ct);
    if (!mt[0]) {
        if (!has_manifests && !has_layers)
            return cdn_error_field(err, EINVAL, "manifest",
                                   "manifest: no mediaType and neither 'manifests' nor 'layers'");
        (void) snprintf(mt, 128, "%s", has_manifests ? CDN_OCI_MT_INDEX : CDN_OCI_MT_MANIFEST);
    }
    if (strcmp(mt, MT_SCHEMA1) == 0 || strcmp(mt, MT_SCHEMA1_SIGNED) == 0)
        return cdn_error_field(err, EMEDIUMTYPE, "manifest",
                               "manifest: Docker schema 1 manifests are not supported");
    if (is_manifest_type(mt) && !has_manifests)
        *kind = CDN_OCI_MANIFEST;
    else if (is_index_type(mt) && !has_layers)
        *kind = CDN_OCI_INDEX;
    else
        return cdn_error_field(err, EMEDIUMTYPE, "manifest.mediaType",
                               "manifest.mediaType: '%.120s' is not an image manifest or index cordon runs",
                               mt);
    return 0;
}

int cdn_oci_kind_of(const void *json, size_t len, const char *content_type, enum cdn_oci_kind *ret,
                    struct cdn_error *err)
{
    json_t *root = NULL;
    int r = cdn_oci_json_load(json, len, "manifest", &root, err);
    if (r < 0)
        return r;
    char mt[128];
    r = judge(root, content_type, ret, mt, err);
    json_decref(root);
    return r;
}

static int check_layer_type(const struct cdn_oci_desc *d, const char *field, struct cdn_error *err)
{
    for (size_t i = 0; i < ELEMENTSOF(layer_types); i++)
        if (strcmp(d->media_type, layer_types[i].type) == 0)
            return 0;
    if (strstr(d->media_type, "nondistributable") || strstr(d->media_type, "foreign"))
        return cdn_error_field(
            err, EMEDIUMTYPE, field,
            "%s: a non-distributable (foreign) layer '%.100s': cordon fetches no layer from "
            "outside the image's source",
            field, d->media_type);
    return cdn_error_field(err, EMEDIUMTYPE, field, "%s: layer media type '%.120s' is not one cordon unpacks",
                           field, d->media_type);
}

static int parse_layers(json_t *layers, struct cdn_oci_manifest *m, struct cdn_error *err)
{
    if (!json_is_array(layers))
        return cdn_error_field(err, EINVAL, "manifest.layers", "manifest.layers: missing or not an array");
    size_t n = json_array_size(layers);
    if (n > CDN_OCI_LAYERS_MAX)
        return cdn_error_field(err, E2BIG, "manifest.layers", "manifest.layers: %zu layers, more than %d", n,
                               CDN_OCI_LAYERS_MAX);
    m->layers = calloc(n ? n : 1, sizeof(*m->layers));
    if (!m->layers)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        char f[48];
        (void) snprintf(f, sizeof f, "manifest.layers[%zu]", i);
        int r = parse_desc(json_array_get(layers, i), f, &m->layers[i], err);
        if (r < 0)
            return r;
        r = check_layer_type(&m->layers[i], f, err);
        if (r < 0)
            return r;
        m->n_layers++;
    }
    return 0;
}

static int parse_manifest_root(json_t *root, struct cdn_oci_manifest *m, struct cdn_error *err)
{
    if (json_object_get(root, "artifactType"))
        return cdn_error_field(err, EMEDIUMTYPE, "manifest.artifactType",
                               "manifest.artifactType: an OCI artifact, not a container image");
    int r = parse_desc(json_object_get(root, "config"), "manifest.config", &m->config, err);
    if (r < 0)
        return r;
    if (strcmp(m->config.media_type, MT_OCI_CONFIG) != 0 &&
        strcmp(m->config.media_type, MT_DOCKER_CONFIG) != 0)
        return cdn_error_field(err, EMEDIUMTYPE, "manifest.config.mediaType",
                               "manifest.config.mediaType: '%.120s' is not a container image config",
                               m->config.media_type);
    if (m->config.size > CDN_OCI_JSON_MAX)
        return cdn_error_field(err, E2BIG, "manifest.config.size",
                               "manifest.config.size: more than the %u bytes cordon reads", CDN_OCI_JSON_MAX);
    return parse_layers(json_object_get(root, "layers"), m, err);
}

int cdn_oci_manifest_parse(const void *json, size_t len, const char *content_type,
                           struct cdn_oci_manifest *ret, struct cdn_error *err)
{
    json_t *root = NULL;
    int r = cdn_oci_json_load(json, len, "manifest", &root, err);
    if (r < 0)
        return r;
    struct cdn_oci_manifest m = {0};
    enum cdn_oci_kind kind;
    r = judge(root, content_type, &kind, m.media_type, err);
    if (r >= 0 && kind != CDN_OCI_MANIFEST)
        r = cdn_error_field(err, EMEDIUMTYPE, "manifest",
                            "manifest: an index where an image manifest was expected");
    if (r >= 0)
        r = parse_manifest_root(root, &m, err);
    json_decref(root);
    if (r < 0) {
        cdn_oci_manifest_free(&m);
        return r;
    }
    *ret = m;
    return 0;
}

void cdn_oci_manifest_free(struct cdn_oci_manifest *m)
{
    free(m->layers);
    m->layers = NULL;
    m->n_layers = 0;
}

static int parse_entries(json_t *arr, struct cdn_oci_index *ix, struct cdn_error *err)
{
    if (!json_is_array(arr))
        return cdn_error_field(err, EINVAL, "index.manifests", "index.manifests: not an array");
    size_t n = json_array_size(arr);
    if (n > CDN_OCI_INDEX_MAX)
        return cdn_error_field(err, E2BIG, "index.manifests", "index.manifests: %zu entries, more than %d", n,
                               CDN_OCI_INDEX_MAX);
    ix->manifests = calloc(n ? n : 1, sizeof(*ix->manifests));
    if (!ix->manifests)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        char f[48];
        struct cdn_oci_desc *d = &ix->manifests[ix->n_manifests];
        (void) snprintf(f, sizeof f, "index.manifests[%zu]", i);
        int r = parse_desc(json_array_get(arr, i), f, d, err);
        if (r < 0)
            return r;
        if (!is_manifest_type(d->media_type) && !is_index_type(d->media_type))
            continue; /* artifacts, signatures: nothing to run */
        if (d->size > CDN_OCI_JSON_MAX)
            return cdn_error_field(err, E2BIG, f, "%s.size: more than the %u bytes cordon reads", f,
                                   CDN_OCI_JSON_MAX);
        ix->n_manifests++;
    }
    return 0;
}

int cdn_oci_index_parse(const void *json, size_t len, const char *content_type, struct cdn_oci_index *ret,
                        struct cdn_error *err)
{
    json_t *root = NULL;
    int r = cdn_oci_json_load(json, len, "index", &root, err);
    if (r < 0)
        return r;
    struct cdn_oci_index ix = {0};
    enum cdn_oci_kind kind;
    r = judge(root, content_type, &kind, ix.media_type, err);
    if (r >= 0 && kind != CDN_OCI_INDEX)
        r = cdn_error_field(err, EMEDIUMTYPE, "index",
                            "index: an image manifest where an index was expected");
    if (r >= 0)
        r = parse_entries(json_object_get(root, "manifests"), &ix, err);
    json_decref(root);
    if (r < 0) {
        cdn_oci_index_free(&ix);
        return r;
    }
    *ret = ix;
    return 0;
}

void cdn_oci_index_free(struct cdn_oci_index *ix)
{
    free(ix->manifests);
    ix->manifests = NULL;
    ix->n_manifests = 0;
}

enum cdn_oci_compression cdn_oci_layer_compression(const char *media_type)
{
    for (size_t i = 0; i < ELEMENTSOF(layer_types); i++)
        if (strcmp(media_type, layer_types[i].type) == 0)
            return layer_types[i].compression;
    return CDN_OCI_TAR;
}
