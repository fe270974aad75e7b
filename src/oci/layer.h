/* Apply one OCI layer blob (a tar, gzip- or zstd-compressed or not) to an empty directory, the
 * way overlayfs wants to see it as one lower layer. Runs on the host as root over a hostile
 * archive: every name is created with *at() calls beneath the layer's directory, never through
 * a symlink, and anything that could leave the directory or create a device is refused. */
#pragma once

#include <stdint.h>

#include "oci/digest.h"
#include "shared/error.h"

/* Bounds on one layer; 0 in a field means the default below (max_bytes: no cap). */
struct cdn_layer_limits {
    uint64_t max_bytes;   /* sum of the regular files' sizes (apparent, holes included) */
    uint64_t max_entries; /* default 1,000,000 */
};
#define CDN_LAYER_MAX_ENTRIES  1000000u
#define CDN_LAYER_MAX_PATH     4095u    /* an entry's name or link target, bytes */
#define CDN_LAYER_MAX_XATTRS   64u      /* per entry */
#define CDN_LAYER_MAX_XATTR_SZ 65536u   /* one value (the kernel's XATTR_SIZE_MAX) */
#define CDN_LAYER_MAX_TRAILER  1048576u /* uncompressed bytes after the tar's end-of-archive */

/* What one apply did (all counts). tar_bytes is the size of the uncompressed tar. */
struct cdn_layer_stats {
    uint64_t entries, files, dirs, symlinks, hardlinks, fifos;
    uint64_t whiteouts, opaque_dirs;
    uint64_t file_bytes;     /* regular files' sizes */
    uint64_t tar_bytes;      /* the uncompressed stream the diff_id is the sha256 of */
    uint64_t xattrs_dropped; /* trusted.*, security.* but capability, system.*, *.overlay.* */
};

/* Apply the layer read from blob_fd (from its current offset) into the empty directory dirfd.
 * Filters: gzip and zstd, sniffed from the bytes (not the media type); none other (libarchive's
 * "all" would run external programs on hostile input). In the same pass the sha256 of the
 * uncompressed tar, trailing padding included, comes back in diff_id ("sha256:<hex>").
 *
 * OCI whiteouts: ".wh.NAME" becomes a 0/0 character device NAME (an overlay whiteout; a NAME this
 * layer itself holds is kept, the spec's "whiteouts apply to lower layers"), ".wh..wh..opq" sets
 * trusted.overlay.opaque and user.overlay.opaque = "y" on its directory (whiteouts under an opaque
 * directory are dropped: the kernel would list them). Kept: regular files (holes of sparse files
 * stay holes), directories, symlinks (targets are data), hard links to earlier entries of this
 * layer, fifos, numeric ownership, modes with setuid/setgid/sticky, mtimes, user.* and
 * security.capability xattrs. Dropped (counted in xattrs_dropped): every other xattr.
 *
 * Refused with -EINVAL (or -EFBIG for limits, -EEXIST for a type clash with an earlier entry) and
 * a message naming the entry: absolute names, ".." components, names or link targets over
 * CDN_LAYER_MAX_PATH, a parent path through a symlink or a non-directory, hard links to what this
 * layer does not hold, char/block devices and sockets, xattrs over the limits, too many entries or
 * bytes, data after the archive's end beyond CDN_LAYER_MAX_TRAILER. -EBADMSG: not a tar or corrupt.
 * On failure dirfd holds a partial tree: the caller unpacks into a scratch directory and removes it.
 * limits and stats may be NULL. */
int cdn_layer_apply(int blob_fd, int dirfd, const struct cdn_layer_limits *limits,
                    char diff_id[CDN_DIGEST_MAX], struct cdn_layer_stats *stats, struct cdn_error *err);

/* Remove the tree at dirfd/name (name itself included) without following any symlink in it;
 * dirfd/name may be a non-directory. 0 if it is gone (or was never there). */
int cdn_layer_rm_rf_at(int dirfd, const char *name);
