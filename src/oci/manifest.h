/* OCI and Docker image metadata: manifests, indexes (manifest lists) and image configs, parsed
 * from the bytes a registry, a layout or an archive hands cordon (hostile until proven otherwise).
 *
 * Accepted documents (image-spec manifest.md, image-index.md, config.md; Docker's
 * "Image Manifest V2, Schema 2"):
 *   application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json
 *   application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json
 * A document without mediaType is judged by its content (manifests[] → index; config + layers →
 * manifest). Schema 1 manifests, artifacts and non-image configs are refused with a clear error.
 * Layers: application/vnd.oci.image.layer.v1.tar[+gzip|+zstd] and
 * application/vnd.docker.image.rootfs.diff.tar.gzip; non-distributable (foreign) layers are refused.
 *
 * Bounds: JSON ≤ CDN_OCI_JSON_MAX bytes, ≤ CDN_OCI_LAYERS_MAX layers, ≤ CDN_OCI_INDEX_MAX index
 * entries, lists in a config ≤ CDN_STRV_MAX entries. Errors are -EINVAL (malformed), -E2BIG (over a
 * bound), -EMEDIUMTYPE (a kind of document cordon does not run), -ENOEXEC (no entry for this
 * platform), -ENOMEM; err names the field ("manifest.layers[3].digest"). Pure parsing: no I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oci/digest.h"
#include "shared/error.h"
#include "shared/strv.h"

#define CDN_OCI_JSON_MAX   (4u << 20) /* manifests, indexes, configs (containers/image's caps) */
#define CDN_OCI_LAYERS_MAX 128
#define CDN_OCI_INDEX_MAX  1024

#define CDN_OCI_MT_MANIFEST        "application/vnd.oci.image.manifest.v1+json"
#define CDN_OCI_MT_INDEX           "application/vnd.oci.image.index.v1+json"
#define CDN_OCI_MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define CDN_OCI_MT_DOCKER_LIST     "application/vnd.docker.distribution.manifest.list.v2+json"
/* The Accept header of a manifest request: every type parsed here. */
#define CDN_OCI_MANIFEST_ACCEPT                                                                              \
    CDN_OCI_MT_INDEX ", " CDN_OCI_MT_MANIFEST ", " CDN_OCI_MT_DOCKER_LIST ", " CDN_OCI_MT_DOCKER_MANIFEST

/* A platform in Go's names: os "linux", arch "amd64"/"arm64"/"arm"/…, variant "v7" or "". */
struct cdn_oci_platform {
    char os[32];
    char arch[32];
    char variant[16];
};

/* A content descriptor (an index entry, a manifest's config or layer). */
struct cdn_oci_desc {
    char media_type[128];
    char digest[CDN_DIGEST_MAX]; /* checked by cdn_digest_check */
    uint64_t size;
    struct cdn_oci_platform platform; /* index entries; all "" when the entry names none */
    bool attestation;                 /* index entries: a buildx attestation (never run) */
    char ref_name[128];               /* org.opencontainers.image.ref.name, or "" */
};

enum cdn_oci_kind {
    CDN_OCI_MANIFEST, /* an image manifest (OCI or Docker schema 2) */
    CDN_OCI_INDEX,    /* an index / manifest list */
};

enum cdn_oci_compression {
    CDN_OCI_TAR,
    CDN_OCI_GZIP,
    CDN_OCI_ZSTD,
};

struct cdn_oci_manifest {
    char media_type[128]; /* as judged (the body's, or by content) */
    struct cdn_oci_desc config;
    struct cdn_oci_desc *layers; /* base first; each layer's media type is an accepted one */
    size_t n_layers;
};

struct cdn_oci_index {
    char media_type[128];
    struct cdn_oci_desc *manifests; /* entries whose type is neither manifest nor index are dropped */
    size_t n_manifests;
};

struct cdn_oci_config {
    struct cdn_oci_platform platform; /* os, architecture, variant */
    struct cdn_strv env;              /* "K=V" entries */
    struct cdn_strv entrypoint;
    struct cdn_strv cmd;
    char *workdir; /* absolute, or NULL */
    char *user;    /* as the image says ("uid", "user:group", …), or NULL */
    char (*diff_ids)[CDN_DIGEST_MAX];
    size_t n_diff_ids;
};

/* What kind of document json is. content_type: the Content-Type a registry sent (parameters
 * ignored; generic JSON types ignored) or NULL; when both it and the body's mediaType are given,
 * they must agree. */
int cdn_oci_kind_of(const void *json, size_t len, const char *content_type, enum cdn_oci_kind *ret,
                    struct cdn_error *err);

/* Parse an image manifest. -EMEDIUMTYPE if json is an index (use cdn_oci_kind_of first). *ret is
 * written only on success; free it with cdn_oci_manifest_free. */
int cdn_oci_manifest_parse(const void *json, size_t len, const char *content_type,
                           struct cdn_oci_manifest *ret, struct cdn_error *err);
void cdn_oci_manifest_free(struct cdn_oci_manifest *m);

/* Parse an index / manifest list. -EMEDIUMTYPE if json is a manifest. */
int cdn_oci_index_parse(const void *json, size_t len, const char *content_type, struct cdn_oci_index *ret,
                        struct cdn_error *err);
void cdn_oci_index_free(struct cdn_oci_index *ix);

/* The platform cordon runs images for: linux + this build's architecture in Go's names. */
void cdn_oci_platform_host(struct cdn_oci_platform *ret);
/* Normalise aliases in place (x86_64 → amd64, aarch64 → arm64 with variant "", armhf → arm v7, …). */
void cdn_oci_platform_normalize(struct cdn_oci_platform *p);
/* How well an image for `have` runs on `want`: 0 = not at all, higher = better (an exact variant beats
 * an older arm variant). */
int cdn_oci_platform_rank(const struct cdn_oci_platform *want, const struct cdn_oci_platform *have);

/* The entry of ix to run on `want` (attestations and unknown/unknown skipped; an entry without a
 * platform only when it is the only candidate). -ENOEXEC listing the index's platforms if none fits. */
int cdn_oci_index_pick(const struct cdn_oci_index *ix, const struct cdn_oci_platform *want,
                       const struct cdn_oci_desc **ret, struct cdn_error *err);

/* Parse an image config (application/vnd.oci.image.config.v1+json or Docker's). Free with
 * cdn_oci_config_free. */
int cdn_oci_config_parse(const void *json, size_t len, struct cdn_oci_config *ret, struct cdn_error *err);
void cdn_oci_config_free(struct cdn_oci_config *c);

/* The config belongs to the manifest: one diff_id per layer; and, when want is not NULL, its
 * platform runs on want (-ENOEXEC otherwise). */
int cdn_oci_config_check(const struct cdn_oci_config *c, const struct cdn_oci_manifest *m,
                         const struct cdn_oci_platform *want, struct cdn_error *err);

/* A layer's compression by its media type (one accepted by cdn_oci_manifest_parse). */
enum cdn_oci_compression cdn_oci_layer_compression(const char *media_type);
