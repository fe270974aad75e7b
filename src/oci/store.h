/* The content-addressed image store under <state>/images/store (root, 0700):
 *
 *     blobs/<algo>/<hex>             verified blobs (manifests, configs, compressed layers)
 *     layers/sha256/<diff_id hex>/   one unpacked layer, keyed by diff_id (stored once however it was
 *                                    compressed); made in tmp/ and renamed into place
 *     diffids/<algo>/<blob hex>      the diff_id a layer blob unpacked to (so a caller without one reuses it)
 *     images/sha256/<manifest hex>.json   an image record (struct cdn_image_record)
 *     refs/<escaped reference>       "<manifest digest>\n<reference>\n", rename-written
 *     tmp/                           work in progress; swept by the first opener (no other holds the store)
 *     locks/                         flock files: "store" (shared by every opener), "gc", one per layer blob
 *
 * Runs on the host as root inside cordond or the CLI. Blobs come from registries and image files and
 * are hostile until their digest matches; layers are unpacked by layer.c under its rules. The store
 * itself is trusted: only root writes it. Functions return 0 or a negative errno with err set. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oci/digest.h"
#include "oci/layer.h"
#include "shared/error.h"

#define CDN_STORE_MAX_LAYERS 128
#define CDN_STORE_REF_MAX    700 /* a canonical reference: registry/repository:tag@digest */

struct cdn_store;

/* Open (creating what is missing) <state_dir>/images/store. The first opener of an idle store
 * removes what tmp/ holds: work a killed process left. */
int cdn_store_open(const char *state_dir, struct cdn_store **ret, struct cdn_error *err);
void cdn_store_free(struct cdn_store *s);
static inline void cdn_store_freep(struct cdn_store **s)
{
    if (*s)
        cdn_store_free(*s);
}
#define _cleanup_store_ _cleanup_(cdn_store_freep)
const char *cdn_store_path(const struct cdn_store *s);

/* Blobs. begin: a new empty file in tmp/, its fd (O_RDWR) in w->fd for the caller to write.
 * commit: verify its content against digest (and size unless UINT64_MAX; -EBADMSG if wrong), fsync,
 * rename it to blobs/; the temporary is gone afterwards whatever happened, and w->fd closed.
 * abort: drop it. put: begin + write + commit of bytes in memory. */
struct cdn_blob_writer {
    int fd;
    char name[40];
};
int cdn_store_blob_begin(struct cdn_store *s, struct cdn_blob_writer *w, struct cdn_error *err);
int cdn_store_blob_commit(struct cdn_store *s, struct cdn_blob_writer *w, const char *digest, uint64_t size,
                          struct cdn_error *err);
void cdn_store_blob_abort(struct cdn_store *s, struct cdn_blob_writer *w);
int cdn_store_blob_put(struct cdn_store *s, const void *buf, size_t len, const char *digest,
                       struct cdn_error *err);
/* 1 if the blob is stored, 0 if not, -EINVAL for a bad digest. */
int cdn_store_blob_has(struct cdn_store *s, const char *digest);
/* A read-only fd of the blob (the caller closes it); -ENOENT if it is not stored. */
int cdn_store_blob_open(struct cdn_store *s, const char *digest, struct cdn_error *err);

/* Make sure the layer in blob `blob_digest` (stored) is unpacked; its directory comes back in
 * path_out and its diff_id in ret_diff_id (either may be NULL). expected_diff_id, when neither NULL
 * nor "", is what the image config says: a layer whose tar hashes otherwise is -EBADMSG, and nothing
 * of it stays. Two callers for one blob (threads or processes) do the work once: the second waits
 * on locks/<blob hex> and finds the result. Two blobs with one diff_id share one directory.
 * Returns 1 if this call unpacked the blob (the result may have joined the same layer another blob
 * made), 0 if an earlier unpack is reused. */
int cdn_store_layer_ensure(struct cdn_store *s, const char *blob_digest, const char *expected_diff_id,
                           const struct cdn_layer_limits *limits, char ret_diff_id[CDN_DIGEST_MAX],
                           char path_out[4096], struct cdn_error *err);
/* 1 if the layer with this diff_id is unpacked (path_out, may be NULL, gets its directory), 0 if not. */
int cdn_store_layer_has(struct cdn_store *s, const char *diff_id, char path_out[4096]);

/* What cordon needs to run an image, stored as images/sha256/<manifest hex>.json. */
struct cdn_image_record {
    char manifest[CDN_DIGEST_MAX];
    char config[CDN_DIGEST_MAX];
    size_t n_layers;
    char (*diff_ids)[CDN_DIGEST_MAX]; /* n_layers, bottom first */
    char (*blobs)[CDN_DIGEST_MAX];    /* the layer blobs they came from, same order */
    char os[32], arch[32], variant[16];
    int64_t created; /* unix seconds the record was written (0: now, on put) */
    uint64_t size;   /* bytes of the image's blobs (manifest, config, layers) */
};
void cdn_image_record_done(struct cdn_image_record *r); /* frees the arrays */
int cdn_store_image_put(struct cdn_store *s, const struct cdn_image_record *r, struct cdn_error *err);
/* -ENOENT if there is no such record; the caller frees with cdn_image_record_done. */
int cdn_store_image_get(struct cdn_store *s, const char *manifest, struct cdn_image_record *ret,
                        struct cdn_error *err);
/* Calls fn for every readable record (the record is freed after fn returns; a damaged one is
 * skipped); stops at fn's first negative result and returns it. */
int cdn_store_image_list(struct cdn_store *s, int (*fn)(const struct cdn_image_record *r, void *data),
                         void *data, struct cdn_error *err);
/* Remove the record and every ref that points at it (blobs and layers stay for prune), and its use
 * lock (below): the caller holds its claim. */
int cdn_store_image_remove(struct cdn_store *s, const char *manifest, struct cdn_error *err);

/* Users. A sandbox running on an image holds it for its whole life: a shared flock on
 * locks/use-<manifest hex>, an fd in whichever process owns the sandbox (cordon run, cordond: each
 * of its sandboxes, pooled ones too). Whoever removes a reference or the record claims the image
 * first (the flock exclusive, without waiting), so no process, however it started the sandbox, has
 * its root's layers taken away, and a sandbox that starts meanwhile waits for the removal and then
 * finds the image gone.
 * hold: taken once the image resolved; the record must still be there once held, else -ENOENT
 * (field "image"). Does not open the store. Returns the fd to keep.
 * claim: the fd to keep while removing, or -EBUSY (field "ref") while any sandbox holds the image. */
int cdn_store_image_hold(const char *state_dir, const char *manifest, struct cdn_error *err);
int cdn_store_image_claim(struct cdn_store *s, const char *manifest, const char *ref, struct cdn_error *err);

/* References (canonical strings, ocimeta's cdn_image_ref_format) → manifest digests. */
int cdn_store_ref_set(struct cdn_store *s, const char *ref, const char *manifest, struct cdn_error *err);
/* -ENOENT if the reference is not stored. */
/* The file that holds ref's entry in the store under state_dir, without opening the store (a cache
 * of what a reference resolves to stays valid while this file is the same one). */
int cdn_store_ref_path(const char *state_dir, const char *ref, char out[4096], struct cdn_error *err);
int cdn_store_ref_get(struct cdn_store *s, const char *ref, char manifest[CDN_DIGEST_MAX],
                      struct cdn_error *err);
int cdn_store_ref_remove(struct cdn_store *s, const char *ref, struct cdn_error *err);
int cdn_store_ref_list(struct cdn_store *s, int (*fn)(const char *ref, const char *manifest, void *data),
                       void *data, struct cdn_error *err);

/* A pull holds the gc lock shared from its first blob to its image record so that a prune (which
 * takes it exclusive) never removes what is about to be referenced. Returns an fd to close. */
int cdn_store_gc_lock(struct cdn_store *s, bool exclusive, struct cdn_error *err);

/* Remove blobs and layers that no image record references and that in_use (may be NULL; the
 * daemon says "a sandbox runs on it") does not keep; kind is "blob" or "layer", digest the blob
 * digest or diff_id. Takes the gc lock exclusively. Freed bytes (du-style) in *freed if not NULL. */
int cdn_store_prune(struct cdn_store *s, bool (*in_use)(const char *kind, const char *digest, void *data),
                    void *data, uint64_t *freed, struct cdn_error *err);

/* Bytes the store takes on disk (allocated blocks; hard-linked inodes counted once). */
int cdn_store_size(struct cdn_store *s, uint64_t *ret, struct cdn_error *err);
