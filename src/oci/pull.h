/* Bringing an image into the store (store.h): from a registry over the distribution API (v2), or
 * from an OCI image layout. The host's platform is chosen from an index; every blob is verified
 * against its digest before use; layers the store already holds (by diff_id) are not fetched again;
 * the others are fetched and unpacked in parallel. Runs on the host as root (cordond, `cordon image
 * pull`); trusts the reference and options (the operator's), nothing a registry or a layout holds. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "oci/ref.h"
#include "oci/registry.h"
#include "oci/store.h"

/* What a pull is doing, for progress on a terminal or an NDJSON stream. layer is the index (base
 * first) among n_layers; done/total are bytes of that layer's blob (fetch) or of the image. */
enum cdn_pull_phase {
    CDN_PULL_RESOLVED, /* manifest and config are in: n_layers and total (all layer bytes) known */
    CDN_PULL_FETCH,    /* a layer's bytes arriving */
    CDN_PULL_CACHED,   /* a layer the store already had */
    CDN_PULL_UNPACKED, /* a layer unpacked (or found unpacked) */
    CDN_PULL_DONE,
};
struct cdn_pull_event {
    enum cdn_pull_phase phase;
    size_t layer, n_layers;
    const char *digest; /* the layer blob's, or the manifest's for RESOLVED and DONE */
    uint64_t done, total;
};
/* Called from the pulling threads, one call at a time. */
typedef void (*cdn_pull_progress_fn)(void *data, const struct cdn_pull_event *ev);

struct cdn_pull_options {
    struct cdn_registry_options registry;
    unsigned parallel; /* layer downloads at once; 0: 3 */
    cdn_pull_progress_fn progress;
    void *progress_data;
};

/* Pull ref (REGISTRY or OCI_LAYOUT) into s and point the reference's canonical name at the image
 * pulled; its manifest digest comes back in manifest_out. Errors name "image". */
int cdn_image_pull(struct cdn_store *s, const struct cdn_image_ref *ref, const struct cdn_pull_options *o,
                   char manifest_out[CDN_DIGEST_MAX], struct cdn_error *err);
