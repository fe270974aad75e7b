/* Which host paths a spec's binds may take (mounts[i].source): cordond's bind-allow and
 * `cordon run --bind-allow`, docs/spec.md "Bind sources".
 *
 * Runs in the process that validates a spec (cordond for the API, `cordon run`), in the host's
 * namespaces. The spec comes from a client that may be remote (TCP): a source is resolved
 * (realpath) before it is judged, and the resolved path replaces it in the spec, so that the tier
 * binds exactly what was judged — it opens the source with RESOLVE_NO_SYMLINKS
 * (cdn_bind_source_open), and a symlink swapped in after the check is refused, not followed.
 *
 * A source is accepted when
 *   - it is at or beneath an allowed directory (bind-allow; by default "/"), and
 *   - it neither contains a refused directory (cordon's state, run and VM directories, the
 *     daemon's sockets, records and token, the host's /proc, /sys, /dev) nor lies beneath one —
 *     unless the allowed directory it falls under is itself at or beneath that refused one (the
 *     operator named that very place: bind-allow = /dev/shm/data), and
 *   - it is not on a kernel filesystem (proc, sysfs, nsfs), wherever mounted, and
 *   - it is bound read-only if its allowed directory says ":ro". */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "shared/error.h"
#include "spec.h"

#define CDN_BIND_RULES_MAX 64

struct cdn_bind_policy {
    char *allow[CDN_BIND_RULES_MAX]; /* resolved; none given = "/" read-write */
    bool allow_ro[CDN_BIND_RULES_MAX];
    size_t n_allow;
    char *deny[CDN_BIND_RULES_MAX]; /* resolved where they exist, else as given */
    size_t n_deny;
};

/* The refusals every policy starts with: /proc, /sys, /dev, and cdn_state_dir(), cdn_run_dir(),
 * cdn_vm_dir() (with their compiled-in defaults). 0 or -ENOMEM. */
int cdn_bind_policy_init(struct cdn_bind_policy *p);
void cdn_bind_policy_free(struct cdn_bind_policy *p);
/* An allowed directory, "DIR" or "DIR:ro" (absolute; it must exist). -EINVAL, -ENOENT, -E2BIG. */
int cdn_bind_policy_allow(struct cdn_bind_policy *p, const char *arg, struct cdn_error *err);
/* One more refused path (absolute; it need not exist). -EINVAL, -E2BIG, -ENOMEM. */
int cdn_bind_policy_deny(struct cdn_bind_policy *p, const char *path);
/* Resolve and judge every mounts[i].source of spec, replacing it by its resolved path. On refusal
 * err names "mounts[i].source" and why. -ENOENT (and the like: no such source), -EACCES, -EPERM
 * (refused), -ENOMEM. */
int cdn_bind_policy_check(const struct cdn_bind_policy *p, struct cdn_spec *spec, struct cdn_error *err);

/* The same judgement for an image given as a host path (spec.image absolute: a root directory, or a
 * VM tier's disk file), read-only, field "image": a remote client must not make "/" or cordon's
 * state a sandbox's root. cordond applies it; `cordon run` (root on this host) does not. */
int cdn_bind_policy_check_image(const struct cdn_bind_policy *p, struct cdn_spec *spec,
                                struct cdn_error *err);

/* The same judgement, read-only, for another host path a client names (an OCI layout or archive of
 * an image reference): 0, or the refusal naming field. path itself is not changed. */
int cdn_bind_policy_check_path(const struct cdn_bind_policy *p, const char *path, const char *field,
                               struct cdn_error *err);

/* For the tiers: open a source the policy resolved (O_PATH, no symlink anywhere on the way, so a
 * component swapped for a symlink since the check fails with ELOOP). An fd or -errno. */
int cdn_bind_source_open(const char *source);
