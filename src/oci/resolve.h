/* OCI images where the rest of cordon names an image (spec.image, --image): a reference resolved
 * to the store's layers for the tiers (image/image.h's resolver hook), pulled first when missing,
 * and the image config applied to a spec. Full builds only (cordond, cordon-full): jansson,
 * libcurl, libarchive. Runs on the host as root; the reference is the operator's. */
#pragma once

#include <stdbool.h>

#include "core/spec.h"
#include "image/image.h"
#include "oci/manifest.h"
#include "oci/pull.h"

/* enum cdn_pull_policy and its names: core/spec.h (a spec's "pull"). */

/* Let cdn_image_resolve() resolve OCI references through the store. */
void cdn_oci_install_resolver(void);

/* Whether name is an OCI reference (registry, oci:, oci-archive:, docker-archive:) rather than
 * "host" or a directory. */
bool cdn_oci_is_reference(const char *name);

/* What the stored image name refers to: its manifest digest, its layers for the tiers and its
 * config (cdn_oci_config_free), each left alone when NULL; -ENOENT naming "image" when it is not in
 * the store. Kept per reference while its entry in the store is the same file: one stat a call. */
int cdn_oci_stored(const char *name, char manifest[CDN_DIGEST_MAX], struct cdn_image *image,
                   struct cdn_oci_config *config, struct cdn_error *err);

/* Make sure the image name refers to is in the store: pulled when missing (or always), refused
 * when missing under "never". Its config in *config (cdn_oci_config_free) when not NULL. */
int cdn_oci_ensure(const char *name, enum cdn_pull_policy policy, const struct cdn_pull_options *o,
                   struct cdn_oci_config *config, struct cdn_error *err);

/* The image config under the spec: Env entries whose names the spec's env lacks; WorkingDir as
 * the workdir unless workdir_given; User as the spec's user when take_user (the tier runs users)
 * and the spec names none. */
int cdn_oci_apply_config(const struct cdn_oci_config *c, struct cdn_spec *spec, bool workdir_given,
                         bool take_user, struct cdn_error *err);

/* The manifest digests the store's references name, each once (cdn_strv_free): what the VM tiers'
 * image disks are kept for (tiers/qemu/vmprep.h's cdn_vm_prune_image_disks, with cdn_oci_named as
 * its keep and the list as its data). -E2BIG past CDN_STRV_MAX references. */
struct cdn_store;
int cdn_oci_named_manifests(struct cdn_store *s, struct cdn_strv *ret, struct cdn_error *err);
bool cdn_oci_named(const char *digest, void *named);

/* Registry options from the environment: CORDON_INSECURE_REGISTRIES and CORDON_REGISTRY_MIRRORS
 * (host[:port], comma-separated; the mirrors are Docker Hub's), CORDON_REGISTRY_CA_FILES (PEM files,
 * comma-separated); the auth file is $REGISTRY_AUTH_FILE or docker's (oci/registry.h). Progress on stderr
 * when it is a terminal. The lists live in *env until cdn_pull_env_free. */
struct cdn_pull_env {
    struct cdn_strv insecure, mirrors, ca_files;
};
int cdn_pull_options_from_env(struct cdn_pull_options *o, struct cdn_pull_env *env);
void cdn_pull_env_free(struct cdn_pull_env *env);

/* Progress of a pull on stderr, one line redrawn in place (for a terminal). */
void cdn_pull_progress_tty(void *data, const struct cdn_pull_event *ev);
