/* cordond's side of the OCI image store (oci/store.h): pulls and prunes, which take seconds to
 * minutes, run in forked children while the loop keeps serving; one child per reference at a time,
 * shared by every request and every create that waits for it; what the live sandboxes use.
 *
 * A job's child writes NDJSON to a pipe that the loop reads: progress lines, then one last line,
 * {"status": "done", …} or {"status": "error", "error": {"code", "message", "field"}, "errno"}.
 * Knows nothing of HTTP: api-images.c answers requests from the waiters' callbacks. */
#pragma once

#include <jansson.h>
#include <stddef.h>

#include "oci/digest.h"
#include "oci/ref.h"
#include "registry.h"

struct image_waiter {
    /* A progress line (NDJSON, its newline included); NULL: not wanted. */
    void (*line)(void *arg, const char *line, size_t len);
    /* The job's last line, parsed (borrowed: valid during the call). Called once. */
    void (*done)(void *arg, json_t *result);
    void *arg;
};

/* Pull canon (a canonical OCI reference, cdn_images_canonical) into the store, or join the pull of
 * it that runs; w hears how it goes. A late joiner gets the "resolved" line first, if there was one. */
int cdn_images_pull(const char *canon, struct image_waiter w, struct cdn_error *err);
/* Remove what no image record or ref and no live sandbox references (one prune at a time: a second
 * request joins the running one). Its last line: {"status": "done", "freed_bytes", "store_size"}. */
int cdn_images_prune(struct image_waiter w, struct cdn_error *err);
/* The microvm tier's disks of OCI images that no reference of the store names any more, removed
 * (skipped while a disk is being made: never waits for one). */
struct cdn_store;
void cdn_images_prune_disks(struct cdn_store *s);
/* At start: the store's size for /metrics, measured by a child. */
void cdn_images_start(void);
/* At stop: every child killed (the store sweeps their leftovers), every waiter told "stopping". */
void cdn_images_stop(void);

/* name as a canonical OCI reference in out; -EINVAL with err naming field if it is none. */
int cdn_images_canonical(const char *name, const char *field, char out[CDN_IMAGE_REF_MAX],
                         struct cdn_error *err);
/* A client's reference that names a host file or directory (oci:, oci-archive:, docker-archive:)
 * must pass the bind policy (bind_allow) as a read-only source would: 0, or the refusal naming field. */
int cdn_images_check_source(const char *name, const char *field, struct cdn_error *err);
/* The manifest digest a canonical reference points at in the store; -ENOENT if none. */
int cdn_images_lookup(const char *canon, char manifest[CDN_DIGEST_MAX], struct cdn_error *err);
/* The listed sandboxes that run on manifest (deleted ones, killed, no more): how many, and the id of
 * one in first_id (may be NULL). */
unsigned cdn_images_users(const char *manifest, char first_id[64]);

/* The create path (box.c's cdn_box_create): an OCI image is made present per spec->pull (a pull
 * shared with whoever else waits for it), its config applied under the spec (Env, WorkingDir
 * unless spec->workdir_given), then cdn_box_create_resolved. Other images go straight there. */
void cdn_images_prepare_create(struct cdn_spec *spec, struct cdn_box_waiter w);

/* A create whose tier must first make something once (tier.h prepare: a guest's kernel, image disk,
 * snapshot, which take seconds to minutes) waits for a child that makes it, shared by the creates
 * that need the same, then goes on in cdn_box_create_prepared: true, spec taken (w is answered
 * either way). false: nothing to make, spec untouched. */
bool cdn_images_prepare_tier(struct cdn_spec *spec, struct cdn_box_waiter w, const char *manifest);
/* The same for anyone (a warm pool's refill): 1 nothing to make; 0 a child makes it, w.done hears
 * how it went ({"status": "done"} or an error line); -errno with err. spec is only read. */
int cdn_images_prepare(const struct cdn_spec *spec, struct image_waiter w, struct cdn_error *err);
