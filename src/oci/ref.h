/* Image references: what spec.image, `--image`, the API and the SDK name an image by.
 *
 *   host                                 the host's /usr on a skeleton (as before)
 *   /abs/dir                             a directory holding a root filesystem (tier vm: a disk file)
 *   registry.example:5000/team/task:tag  a registry image (distribution reference grammar)
 *   python:3.12                          short name: docker.io/library/python:3.12
 *   name@sha256:<hex>, name:tag@sha256:<hex>   pinned by manifest digest
 *   oci:DIR[:TAG]                        an OCI image layout directory
 *   oci-archive:FILE[:TAG]               a tar of an OCI image layout
 *   docker-archive:FILE[:NAME[:TAG]]     `docker save` output
 *   docker://REF                         the same as REF (skopeo's spelling)
 *
 * The string comes from the operator (trusted), but it is parsed before anything else looks at it,
 * so every field is bounded and checked here; errors name the field "image". Pure parsing: no
 * file system or network access. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "oci/digest.h"
#include "shared/error.h"

enum cdn_ref_kind {
    CDN_REF_HOST,
    CDN_REF_DIR,
    CDN_REF_REGISTRY,
    CDN_REF_OCI_LAYOUT,
    CDN_REF_OCI_ARCHIVE,
    CDN_REF_DOCKER_ARCHIVE,
};

struct cdn_image_ref {
    enum cdn_ref_kind kind;
    /* REGISTRY (and DOCKER_ARCHIVE when a NAME picks one of the archive's RepoTags) */
    char registry[256];   /* "docker.io", "127.0.0.1:5000", "[::1]:5000" */
    char repository[256]; /* "library/python": lowercase path components */
    /* REGISTRY: "" when only a digest is given, "latest" when neither; OCI_*: the layout's
     * org.opencontainers.image.ref.name or "" (the only image) */
    char tag[129];               /* a tag is up to 128 characters */
    char digest[CDN_DIGEST_MAX]; /* REGISTRY: "" or a checked digest */
    char path[4096];             /* DIR, OCI_*, DOCKER_ARCHIVE: an absolute path */
};

/* Longest canonical form (cdn_image_ref_format) and longest accepted input, NUL included. */
#define CDN_IMAGE_REF_MAX 4608

/* Parse s into *ret (written only on success). -EINVAL with err->field "image" and the reason;
 * -ENAMETOOLONG for an over-long string or part. Paths must be absolute: a relative path has no
 * meaning to cordond, so the CLI makes them absolute first. */
int cdn_image_ref_parse(const char *s, struct cdn_image_ref *ret, struct cdn_error *err);

/* The canonical, fully qualified form ("docker.io/library/python:3.12", "oci:/srv/l:v1");
 * parsing it again gives the same ref. Returns its length, or -ENOBUFS if size is too small
 * (CDN_IMAGE_REF_MAX always suffices). */
int cdn_image_ref_format(const struct cdn_image_ref *r, char *buf, size_t size);

/* "host", "dir", "registry", "oci", "oci-archive", "docker-archive". */
const char *cdn_image_ref_kind_name(enum cdn_ref_kind kind);

/* The host that serves the registry's API: "registry-1.docker.io" for docker.io, else registry. */
const char *cdn_image_ref_api_host(const struct cdn_image_ref *r);

/* Whether the reference names an OCI image (registry, layout or archive) rather than the host or a
 * directory. */
bool cdn_image_ref_is_oci(const struct cdn_image_ref *r);
