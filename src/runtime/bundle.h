/* An OCI bundle's config.json (runtime spec 1.x) as cordon-runtime runs it (docs/runtime.md).
 *
 * The config is the engine's (podman's, containerd's): trusted for what it asks, never for more than
 * cordon grants. What maps onto a sandbox goes into .spec (its root as a directory image, hostname,
 * env, cwd, user, limits, binds, network mode, cordon's annotations); what the runtime makes itself
 * stays here (args, rlimits, the namespace it joins, the cgroup path, the kernel's file systems, masks,
 * sysctls, hooks). What cordon does not grant is refused with the JSON path named (host namespaces,
 * id mappings, devices beyond the safe set, mounts of block devices, unsafe sysctls), or reduced and
 * said in .notes (capabilities: commands hold none; no_new_privs: always). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/spec.h"
#include "shared/error.h"
#include "shared/strv.h"

#define CDN_BUNDLE_RLIMITS_MAX 16
#define CDN_BUNDLE_MOUNTS_MAX  64
#define CDN_BUNDLE_HOOKS_MAX   32

struct cdn_bundle_rlimit {
    int resource; /* RLIMIT_* */
    uint64_t soft, hard;
};

/* A mount of a kernel file system the runtime makes (sandbox.h cdn_fs_mount: tmpfs, sysfs, mqueue,
 * cgroup); binds go to spec.mounts, and cordon's own proc, devpts and /dev are not repeated here. */
struct cdn_bundle_mount {
    char *destination;
    char *type;
    struct cdn_strv options;
    unsigned index; /* in the bundle's mounts */
};

enum cdn_bundle_hook_kind {
    CDN_HOOK_PRESTART,
    CDN_HOOK_CREATE_RUNTIME,
    CDN_HOOK_CREATE_CONTAINER,
    CDN_HOOK_START_CONTAINER,
    CDN_HOOK_POSTSTART,
    CDN_HOOK_POSTSTOP,
    _CDN_HOOK_MAX
};

struct cdn_bundle_hook {
    enum cdn_bundle_hook_kind kind;
    char *path;
    struct cdn_strv args, env;
    int timeout_s; /* 0: none */
};

struct cdn_bundle {
    struct cdn_spec spec; /* image: the root's absolute path; user: "uid:gid" */
    struct cdn_strv args;
    struct cdn_strv env; /* process.env, verbatim */
    bool terminal;
    uint32_t uid, gid;
    struct cdn_bundle_rlimit rlimits[CDN_BUNDLE_RLIMITS_MAX];
    size_t n_rlimits;
    char *netns_path; /* the network namespace to join (CNI's); NULL: a new one */
    /* linux.uidMappings/gidMappings: the engine's range, whose ids the root's files have on disk
     * (sandbox.h root_ids_from); 0: none */
    uint32_t spec_ids_from, spec_ids_count;
    char *cgroups_path; /* linux.cgroupsPath; NULL: the runtime's default */
    bool cpu_limited;   /* linux.resources.cpu set a quota (spec.limits.cpus); else the host's CPUs */
    struct cdn_bundle_mount mounts[CDN_BUNDLE_MOUNTS_MAX];
    size_t n_mounts;
    struct cdn_strv masked, readonly; /* linux.maskedPaths, linux.readonlyPaths */
    struct cdn_strv sysctls;     /* "key=value", each one the runtime sets in the container's namespaces */
    struct cdn_strv annotations; /* "key=value" */
    struct cdn_bundle_hook hooks[CDN_BUNDLE_HOOKS_MAX];
    size_t n_hooks;
    void *seccomp_insns;   /* linux.seccomp compiled (oci-seccomp.h), stacked on cordon's own; NULL: none */
    uint16_t seccomp_len;  /* its instructions */
    struct cdn_strv notes; /* what was reduced, one line each, for the log */
};

/* Parse config.json (json, len bytes) of the bundle in directory bundle_dir (absolute: a relative
 * root.path is taken from it). 0, or -errno with err naming the JSON path (field) and why. ret is
 * initialised either way; cdn_bundle_free() releases it. */
int cdn_bundle_parse(const char *json, size_t len, const char *bundle_dir, struct cdn_bundle *ret,
                     struct cdn_error *err);
void cdn_bundle_free(struct cdn_bundle *b);
