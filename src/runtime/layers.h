/* The layers of a bundle's root that its engine mounted as an overlay (podman's merged directory,
 * containerd's rootfs): the container tier mounts a new overlay of them, each idmapped for the
 * container, because an overlay cannot be idmapped itself (tiers/container/root-layers.c). */
#pragma once

#include "core/sandbox.h"
#include "shared/error.h"

/* The new overlay's work directory, made beside the engine's upper (layers.c own_workdir). */
#define CDN_ROOT_WORKDIR "cordon-work"

/* An overlay's layer options, as its mount's super options give them. */
struct cdn_rt_overlay {
    char *lowerdir; /* "a:b:c", top first */
    char *upperdir, *workdir;
    bool volatile_upper;
    char metacopy[8], redirect_dir[16]; /* "": not given */
    bool lowers_from_zero;              /* sandbox.h cdn_root_layers */
};

/* Parse a super options string ("rw,lowerdir=…,upperdir=…,workdir=…,…"): 0, or -errno with err
 * naming root.path (no lowerdir, only one of upper and work, escaped characters, data-only layers).
 * ret is set either way; cdn_rt_overlay_free() releases it. */
int cdn_rt_overlay_options(const char *opts, struct cdn_rt_overlay *ret, struct cdn_error *err);
void cdn_rt_overlay_free(struct cdn_rt_overlay *o);

/* The layers of the overlay mounted at root: 1 with ret filled (each layer a directory on the mount
 * of their common directory ret->base, given relative to it), 0 when root is not an overlay's mount
 * point, or -errno with err naming root.path. cdn_rt_layers_free() releases ret. */
int cdn_rt_root_layers(const char *root, struct cdn_root_layers *ret, struct cdn_error *err);
void cdn_rt_layers_free(struct cdn_root_layers *l);
