/* Image archives: `oci-archive:FILE` (a tar of an OCI image layout) and `docker-archive:FILE`
 * (`docker save` output: manifest.json with Config, RepoTags and Layers, each a path in the tar).
 *
 * Both become an OCI image layout in a directory cordon owns, which cdn_oci_layout_open() then reads
 * like any other (so every check of layout.h applies). The archive is hostile: members are
 * extracted by name into that directory only (no absolute or ".." paths, no members that are
 * devices or FIFOs, symlinks and hard links kept only as aliases inside the archive, never
 * created), with a bound on the bytes written. Runs on the host as root; the directory's path is
 * cordon's (the store's tmp/), the archive's path is the operator's. */
#pragma once

#include <stdint.h>

#include "oci/ref.h"
#include "shared/error.h"

/* Unpack the archive ref names (kind CDN_REF_OCI_ARCHIVE or CDN_REF_DOCKER_ARCHIVE) into into_dir,
 * an existing empty directory, as an OCI image layout. A docker-archive's image is the one whose
 * RepoTags hold ref's NAME:TAG, or its only image; its layout then holds that one image (resolve
 * it with tag NULL); an oci-archive's keeps its index.json (resolve with ref->tag). max_bytes: the
 * most the archive may write (0: no bound). -E2BIG past it, -EINVAL a malformed archive or a member
 * outside it, -ENOENT no such image; errors name "image". */
int cdn_oci_archive_unpack(const struct cdn_image_ref *ref, const char *into_dir, uint64_t max_bytes,
                           struct cdn_error *err);
