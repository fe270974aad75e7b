/* OCI image layout directories (image-spec image-layout.md): `oci-layout` ({"imageLayoutVersion":
 * "1.0.0"}), `index.json` and `blobs/<alg>/<hex>`. The reference `oci:DIR[:TAG]` names one.
 *
 * The directory's path is the operator's, but its content is not: it may come from a sandbox's
 * workspace or a downloaded archive. Every file in it is opened beneath the directory with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS), must be a regular file, and
 * is read with a bound; manifests, indexes and configs are read into memory once and verified
 * against their digests there (no re-read after the check). Layers are not hashed here: the store
 * verifies them while it copies them (cdn_oci_layout_open_blob's fd is read once). Runs on the host
 * as root. */
#pragma once

#include <stddef.h>

#include "oci/manifest.h"
#include "shared/error.h"

struct cdn_oci_layout;

/* One image chosen from a layout (or, later, any source): its verified documents and what they say. */
struct cdn_oci_image {
    char manifest_digest[CDN_DIGEST_MAX];
    char *manifest_json; /* the manifest's bytes, verbatim and verified (for the store) */
    size_t manifest_len;
    char *config_json; /* the config's bytes, verbatim and verified */
    size_t config_len;
    struct cdn_oci_manifest manifest; /* layers[i] is the blob whose unpacked tar has config.diff_ids[i] */
    struct cdn_oci_config config;     /* checked: one diff_id per layer, runs on the platform asked for */
};
void cdn_oci_image_free(struct cdn_oci_image *img);

/* Open the layout at dir and read its oci-layout and index.json. -ENOENT/-ENOTDIR for a missing
 * layout, -EINVAL for a malformed one, -ELOOP for a symlink inside it; err names "image". */
int cdn_oci_layout_open(const char *dir, struct cdn_oci_layout **ret, struct cdn_error *err);
void cdn_oci_layout_free(struct cdn_oci_layout *l);
static inline void cdn_oci_layout_freep(struct cdn_oci_layout **l)
{
    if (*l)
        cdn_oci_layout_free(*l);
}
#define _cleanup_oci_layout_ _cleanup_(cdn_oci_layout_freep)

/* Choose the image: the index.json entries whose org.opencontainers.image.ref.name is tag (tag ""
 * or NULL: all of them, which must be one image or one per platform), then nested indexes down to
 * the entry for `want` (cdn_oci_platform_host() normally). Reads and verifies the manifest and the
 * config, checks the config against the manifest. -ENOENT no such tag, -ENOEXEC no entry for the
 * platform, -EBADMSG a digest or size mismatch, plus cdn_oci_manifest_parse's errors. *ret is
 * written only on success; free it with cdn_oci_image_free. */
int cdn_oci_layout_resolve(struct cdn_oci_layout *l, const char *tag, const struct cdn_oci_platform *want,
                           struct cdn_oci_image *ret, struct cdn_error *err);

/* Open the blob d names (blobs/<alg>/<hex>), read-only, close-on-exec; it must be a regular file of
 * d->size bytes. NOT hashed: the caller verifies the digest as it reads the fd once. The fd is the
 * caller's. */
int cdn_oci_layout_open_blob(struct cdn_oci_layout *l, const struct cdn_oci_desc *d, int *ret_fd,
                             struct cdn_error *err);

/* Read the blob d names into memory (at most CDN_OCI_JSON_MAX bytes) and verify its digest and
 * size there. *ret is malloc'd and NUL-terminated (not counted in *ret_len). */
int cdn_oci_layout_read_blob(struct cdn_oci_layout *l, const struct cdn_oci_desc *d, char **ret,
                             size_t *ret_len, struct cdn_error *err);
