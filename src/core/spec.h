/* The sandbox spec (DESIGN §2): what a caller asks for, validated.
 *
 * A spec is built from defaults, then from JSON (API) or CLI flags; both
 * paths reject unknown fields and out-of-range values with a struct cdn_error
 * whose .field names the offending field. The struct owns all its strings;
 * cdn_spec_free() releases them. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "shared/error.h"
#include "shared/strv.h"

enum cdn_tier { CDN_TIER_PROCESS, CDN_TIER_CONTAINER, CDN_TIER_MICROVM, CDN_TIER_VM, _CDN_TIER_MAX };
enum cdn_net_mode { CDN_NET_NONE, CDN_NET_ALLOWLIST, CDN_NET_OPEN, _CDN_NET_MAX };
enum cdn_on_violation { CDN_VIOLATION_LOG, CDN_VIOLATION_DENY, CDN_VIOLATION_KILL, _CDN_VIOLATION_MAX };
/* Where the container tier's writable layer lives: a filesystem of its own on the host's disk (the
 * default), or a tmpfs charged to the memory limit ("memory"). */
enum cdn_disk_kind { CDN_DISK_DISK, CDN_DISK_MEMORY, _CDN_DISK_MAX };
/* When an OCI image (spec.image) is pulled before a create: when the store lacks it (the default),
 * every time (a tag may have moved), or never (a missing image is an error naming "image"). */
enum cdn_pull_policy { CDN_PULL_MISSING, CDN_PULL_ALWAYS, CDN_PULL_NEVER, _CDN_PULL_MAX };

struct cdn_mount {
    char *source; /* absolute host path */
    char *target; /* absolute path inside the sandbox */
    bool readonly;
    /* An engine's bind (cordon-runtime, a root in place): "bind" rather than "rbind" leaves out what
     * is mounted beneath the source; noexec as asked. cordon's own binds are recursive. */
    bool nonrecursive, noexec;
};

struct cdn_limits {
    double cpus;        /* CPUs, > 0 */
    uint64_t memory_mb; /* hard limit, swap 0 */
    uint64_t pids;
    uint64_t disk_mb;         /* writable layer (root upper, /workspace, /tmp) */
    uint64_t timeout_ms;      /* 0 = none */
    uint64_t idle_timeout_ms; /* 0 = none: cordond ends it after this long without a request */
    uint64_t nofile;
    uint64_t ptys; /* pseudo-terminals open at once (the container's devpts max=) */
};

struct cdn_spec {
    enum cdn_tier tier;
    char *image; /* "host" or an absolute directory */
    struct cdn_limits limits;
    enum cdn_net_mode net_mode;
    struct cdn_strv net_allow;
    struct cdn_mount *mounts;
    size_t n_mounts;
    struct cdn_strv protect;
    struct cdn_strv env;    /* "K=V" */
    struct cdn_strv labels; /* "k=v" */
    char *workdir;
    char *hostname;
    /* Every command's user unless its exec names one: "name", "uid", "name:group", "uid:gid",
     * resolved in the sandbox's own /etc/passwd (shared/user.h); NULL: root of the sandbox, or the
     * image's config User where the tier takes one. */
    char *user;
    /* The trajectory its steps are recorded in (docs/trajectories.md): segments of [A-Za-z0-9._-]
     * (1-64 bytes, not "." or "..") joined by '/', at most CDN_TRAJECTORY_ID_MAX bytes; NULL: none. */
    char *trajectory;
    /* Checkpoints (docs/trajectories.md, container tier, disk "disk"): its writable layer lives in the
     * checkpoint store so that POST …/checkpoints can take one; checkpoint names the one to start
     * from (its files; "ck-" and 16 hex digits), and implies checkpoints. every_step ("checkpoints":
     * "every_step", or the spelling "checkpoint": "every_step"): also one after each step of
     * its trajectory that ran (not a replayed one), taken once the step's answer is out. */
    bool checkpoints;
    bool checkpoint_every_step;
    char *checkpoint;
    bool read_only_root;
    /* The image's system directories (/usr, /etc, /bin, /lib*, /boot…) writable to commands too, as
     * package managers need (apt, pip into a python image's /usr/local): no system_write violations
     * for them, and an in-place verifier step is refused (verifier_unsafe: the sibling mode starts from
     * the image). Not /proc, /sys, /dev; not the host image's /usr (the host's, read-only). */
    bool writable_system;
    /* Record write attempts on system paths (system_write violations): the
     * policy variant that reports path writes, which costs ordinary writes a
     * round trip to the supervisor; always on with protect (docs/events.md). */
    bool watch_writes;
    enum cdn_on_violation on_violation;
    enum cdn_disk_kind disk;
    /* What a create does about an OCI image that is not stored ("pull"); not part of the sandbox's
     * shape, so cdn_spec_to_json writes it only when it is not the default. */
    enum cdn_pull_policy pull;
    bool workdir_given; /* "workdir" was in the JSON: an image's WorkingDir does not replace it */
};

/* Limits of accepted values; documented in docs/spec.md. */
#define CDN_MEMORY_MB_MIN     8
#define CDN_MEMORY_MB_MAX     (1024ULL * 1024)
#define CDN_PIDS_MIN          2
#define CDN_PIDS_MAX          (1u << 22)
#define CDN_DISK_MB_MIN       1
#define CDN_DISK_MB_MAX       (1024ULL * 1024)
#define CDN_TIMEOUT_MS_MAX    (7ULL * 24 * 3600 * 1000)
#define CDN_PTYS_MAX          (1u << 20) /* the kernel's NR_UNIX98_PTY_MAX */
#define CDN_MAX_MOUNTS        64
#define CDN_TRAJECTORY_ID_MAX 200
#define CDN_MAX_LIST          CDN_STRV_MAX

/* Whether id is a trajectory's id (the syntax of spec.trajectory). */
bool cdn_trajectory_id_valid(const char *id);
#define CDN_CHECKPOINT_EVERY_STEP "every_step" /* the policy's name in "checkpoints" and "checkpoint" */
/* Whether id is a checkpoint's id: "ck-" and 16 lowercase hex digits. */
#define CDN_CHECKPOINT_ID_LEN 19
bool cdn_checkpoint_id_valid(const char *id);

const char *cdn_tier_to_string(enum cdn_tier t);
int cdn_tier_from_string(const char *s);
const char *cdn_net_mode_to_string(enum cdn_net_mode m);
int cdn_net_mode_from_string(const char *s);
const char *cdn_on_violation_to_string(enum cdn_on_violation v);
int cdn_on_violation_from_string(const char *s);
const char *cdn_disk_kind_to_string(enum cdn_disk_kind k);
int cdn_disk_kind_from_string(const char *s);
const char *cdn_pull_policy_to_string(enum cdn_pull_policy p);
int cdn_pull_policy_from_string(const char *s);

/* Fill with the safe defaults of DESIGN §2. Returns -ENOMEM only. */
int cdn_spec_init(struct cdn_spec *spec);
void cdn_spec_free(struct cdn_spec *spec);

/* Merge a JSON document (object) into spec. Unknown fields → -EINVAL naming the field. */
int cdn_spec_from_json(struct cdn_spec *spec, const char *json, size_t len, struct cdn_error *err);
/* Serialise to a malloc'd JSON string (compact). NULL on OOM. */
char *cdn_spec_to_json(const struct cdn_spec *spec);
/* "K=V" entries (env, labels) as a JSON object (a jansson json_t *, new
 * reference; declared opaquely so that this header needs no jansson). */
struct json_t;
struct json_t *cdn_strv_to_json_map(const struct cdn_strv *l);
/* Checks that need the whole spec (and what this build supports). */
int cdn_spec_validate(const struct cdn_spec *spec, struct cdn_error *err);

/* Helpers also used by the CLI flag table. */
int cdn_spec_add_mount(struct cdn_spec *spec, const char *source, const char *target, bool readonly,
                       struct cdn_error *err);
int cdn_spec_parse_bind(struct cdn_spec *spec, const char *arg, struct cdn_error *err);
int cdn_spec_set_env(struct cdn_spec *spec, const char *key, const char *value, struct cdn_error *err);
int cdn_spec_parse_env(struct cdn_spec *spec, const char *arg, struct cdn_error *err);
/* One label: keys of 1-128 bytes without '=', values up to 1024 ("labels" in JSON, --label K=V);
 * field names the label ("labels.KEY") in err. */
int cdn_spec_add_label(struct cdn_spec *spec, const char *key, const char *value, struct cdn_error *err);
int cdn_spec_parse_label(struct cdn_spec *spec, const char *arg, struct cdn_error *err);
/* The environment of a command in a sandbox of spec, into ret (owned, freed
 * with cdn_strv_free): a sane base (PATH, HOME, LANG), TERM=term unless NULL,
 * HOSTNAME, the spec's env, then extra ("K=V", NULL-terminated, may be NULL);
 * a later K replaces an earlier one. -ENOMEM or -E2BIG. */
int cdn_exec_env(const struct cdn_spec *spec, const char *term, char *const *extra, struct cdn_strv *ret);
/* The same, or with verifier that of a verifier step: no PATH or HOME (init makes them), none of
 * the spec's variables that make a shell, the dynamic linker, an interpreter or git load code,
 * and switches that keep Python and git from reading the agent's files (docs/events.md); the
 * request's own (extra) as always, last. */
/* The same for a command that runs as user (NULL: root): the base HOME=/root is left out, and init
 * sets the user's passwd home when neither the spec nor extra sets HOME. */
int cdn_exec_env_as(const struct cdn_spec *spec, const char *term, char *const *extra, bool verifier,
                    const char *user, struct cdn_strv *ret);
int cdn_exec_env_for(const struct cdn_spec *spec, const char *term, char *const *extra, bool verifier,
                     struct cdn_strv *ret);
/* Absolute, normalised-enough path check used for targets, workdir, images. */
bool cdn_path_is_safe_absolute(const char *p);
