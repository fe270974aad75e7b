/* Root filesystems for sandboxes. "host" is a skeleton built once in the state
 * dir (minimal /etc, symlinks for the merged-/usr layout) onto which the
 * host's /usr is bind-mounted read-only at sandbox creation; any other image
 * is an absolute directory holding a root filesystem. Runs on the host as root. */
#pragma once

#include <stdbool.h>

#include "shared/error.h"

#define CDN_IMAGE_LAYERS_MAX 128
struct cdn_image {
    char lower[4096]; /* the image's root directory; with layers, the directory they are under */
    size_t n_layers;  /* 0: lower is the root; else an OCI image's layer directories, */
    char layers[CDN_IMAGE_LAYERS_MAX][80]; /* relative to lower, topmost first */
    char digest[136]; /* an OCI image's manifest digest ("sha256:…"), what its content is known by; else "" */
    bool host;        /* bind the host's /usr (and any non-symlink /bin, /lib…) on top */
    char dev[4096];   /* a prepared /dev tree to bind, or "" to assemble /dev node by node */
};

/* Resolve spec.image; builds the host skeleton on first use. Errors name "image". Names other than
 * "host" and an absolute directory go to cdn_image_resolve_oci. */
int cdn_image_resolve(const char *name, struct cdn_image *ret, struct cdn_error *err);
/* OCI references (registry images, oci:, …) through the image store: set by the builds that have it
 * (oci/resolve.h: cordond, cordon-full); NULL in the lean CLI, which hands such images over. */
extern int (*cdn_image_resolve_oci)(const char *name, struct cdn_image *ret, struct cdn_error *err);
/* A sandbox on an OCI image holds it for its life (oci/store.h cdn_store_image_hold), so that no
 * `image rm` takes its root's layers away: *ret_fd gets the fd to keep, or -EBADF for an image that
 * is not in the store (host, a directory). The hook is set with cdn_image_resolve_oci. */
int cdn_image_hold(const struct cdn_image *img, int *ret_fd, struct cdn_error *err);
extern int (*cdn_image_hold_oci)(const char *manifest, struct cdn_error *err);
/* (Re)build the host skeleton under <state>/images/host; progress goes to stderr when verbose. */
int cdn_image_build_host(bool verbose, struct cdn_error *err);
/* Host top-level directories that the host image takes from the host when they are real directories. */
extern const char *const cdn_image_host_dirs[];

/* `cordon image build`: a Debian root filesystem made by debootstrap. */
struct cdn_image_build {
    const char *dir;     /* where the root goes (must not exist yet) */
    const char *suite;   /* "bookworm" unless set */
    const char *mirror;  /* "http://deb.debian.org/debian" unless set */
    const char *include; /* more packages, comma-separated, or NULL */
    const char *disk;    /* also a raw ext4 disk of it here (tier vm), or NULL */
    unsigned disk_mb;    /* its size; 0: what the root holds and 1 GiB more */
};
/* Build it (minbase with systemd and udev: the image's own init for tier vm); debootstrap's and
 * mkfs.ext4's progress on stderr. Errors name the option. */
int cdn_image_debootstrap(const struct cdn_image_build *b, struct cdn_error *err);
