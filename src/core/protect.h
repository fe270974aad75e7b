/* Protected paths (the spec's "protect"): what a pattern names inside a
 * sandbox's root. The setup child binds each match on itself read-only; the
 * host marks the same matches for fanotify (src/monitor/fanotify.h). Both
 * expand the patterns the same way, before any sandbox process runs. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "shared/error.h"

#define CDN_PROTECT_MAX       32  /* patterns in one spec */
#define CDN_PROTECT_MATCH_MAX 256 /* paths one pattern may name */

/* One pattern: absolute, no "." or ".." components, no empty components, at
 * most 1024 bytes; "*", "?" and "[…]" match within one component (not a
 * leading dot); "**" only at the end, after a slash: the directory and
 * everything beneath it (the same as naming the directory). */
int cdn_protect_pattern_check(const char *pattern, size_t idx, struct cdn_error *err);

/* fn gets each existing path the pattern names beneath rootfd (symlinks
 * followed but never out of rootfd, as if it were "/") with an O_PATH fd of
 * it; a negative return from fn stops the walk and is returned. Returns the
 * number of matches; -ENOENT when a pattern without wildcards names nothing
 * there; -E2BIG past CDN_PROTECT_MATCH_MAX. */
typedef int (*cdn_protect_fn)(void *ud, const char *path, int fd);
int cdn_protect_expand(int rootfd, const char *pattern, cdn_protect_fn fn, void *ud);

/* Before the protected paths are bound: every parent directory of every match (below the
 * root) becomes a mount point, bound on itself read-write, so that no sandbox process can rename
 * or remove it (EBUSY) — moving a protected directory aside with its parent, then putting one of
 * its own in its place. 0, or -errno with err set; patterns that name nothing are left to the
 * binding pass. */
int cdn_protect_pin_parents(int rootfd, const char *const *patterns, size_t n, struct cdn_error *err);

/* The pattern without a trailing "/" "**" (which names the directory itself). */
void cdn_protect_pattern_stem(const char *pattern, char *out, size_t size);
/* Whether path is a match of one of the patterns, or beneath one. */
struct cdn_strv;
bool cdn_path_is_protected(const char *path, const struct cdn_strv *protect);

/* The protected paths of protect beneath rootfd (a sandbox's root, in its mount namespace): their
 * parents pinned, each match bound on itself read-only (with what is mounted beneath it). At run
 * time bound is not NULL: it hears of each new bind, and a match reached through a symlink, or
 * moved while it was bound, is refused (ELOOP). Errors name protect[i]. */
typedef void (*cdn_protect_bound_fn)(void *ud, const char *path, int mnt_id);
int cdn_protect_bind(int rootfd, const struct cdn_strv *protect, cdn_protect_bound_fn bound, void *ud,
                     struct cdn_error *err);

/* A change at run time (protect-bind.c): a reference held from before a new bind leads to the
 * mount beneath it, writable and unguarded. cdn_protect_holder_roots() lists where such a
 * reference would lie for the new patterns add (rootfd: the sandbox's root);
 * cdn_protect_find_holder() finds a process of the sandbox (read in the /proc mounted at /, not
 * pid 1, the caller nor skip) holding one there (-EBUSY, err names it); cdn_protect_check_links() a file
 * beneath a new bind at path with a hard link elsewhere (-EBUSY). */
int cdn_protect_holder_roots(int rootfd, const struct cdn_strv *add, struct cdn_strv *roots);
int cdn_protect_find_holder(const struct cdn_strv *roots, pid_t skip, struct cdn_error *err);
int cdn_protect_check_links(const char *path, struct cdn_error *err);
