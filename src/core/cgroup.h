/* cgroup limits behind one ops table: cgroup v2 (unified) and v1 (one
 * hierarchy per controller, including the "hybrid" layout where a cgroup2
 * mount at /sys/fs/cgroup/unified holds no controllers).
 *
 * Runs in the host (root) process that manages the sandbox. A cgroup is named
 * by a relative name under the "cordon" parent in each hierarchy. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/error.h"

struct cdn_cgroup_limits {
    double cpus;
    uint64_t memory_bytes;
    uint64_t pids;
    /* create, v1: the sandbox will be frozen often (checkpoints), so its freezer cgroup is made now
     * and its processes join it with the others, instead of being moved in at every freeze. */
    bool freezer;
};

struct cdn_cgroup_stats {
    uint64_t memory_peak_bytes;
    uint64_t oom_kills;
    uint64_t pids_max_hits; /* times the pids limit refused a fork, when the kernel counts it */
    uint64_t memory_bytes;  /* charged now */
    uint64_t pids;          /* tasks now */
    uint64_t cpu_usec;      /* CPU time used, since the directory was made (v1: since create) */
    bool cpu_known;         /* v1 without a cpuacct hierarchy has no CPU time */
};

enum cdn_cgroup_version { CDN_CGROUP_V1 = 1, CDN_CGROUP_V2 = 2 };

#define CDN_CGROUP_SET_CPUS   1u
#define CDN_CGROUP_SET_MEMORY 2u
#define CDN_CGROUP_SET_PIDS   4u

#define CDN_CGROUP_NAME_MAX 400

struct cdn_cgroup {
    const struct cdn_cgroup_ops *ops;
    char name[CDN_CGROUP_NAME_MAX];
    int dirfd; /* v2: the cgroup directory (for CLONE_INTO_CGROUP); v1: -EBADF */
};

struct cdn_cgroup_ops {
    enum cdn_cgroup_version version;
    /* Make the cgroup (reusing an existing directory of that name) and apply limits.
     * Returns 0 for a new directory, 1 for a reused one. */
    int (*create)(struct cdn_cgroup *cg, const struct cdn_cgroup_limits *l, struct cdn_error *err);
    /* Move another process in through cgroup.procs. cordon run does not: a v1
     * sandbox joins by attach_self(), a v2 one is born inside (CLONE_INTO_CGROUP). */
    int (*attach)(struct cdn_cgroup *cg, pid_t pid);
    /* v1 only (NULL for v2): let host uid `uid` move itself in (chown the "tasks"
     * files), then attach_self() run by that process does it. A thread moving
     * itself by writing "0" to "tasks" skips the global threadgroup lock whose
     * RCU grace period makes a cgroup.procs write take up to ~10 ms. */
    int (*delegate_self)(struct cdn_cgroup *cg, uid_t uid, gid_t gid);
    int (*attach_self)(const struct cdn_cgroup *cg);
    int (*stats)(struct cdn_cgroup *cg, struct cdn_cgroup_stats *ret);
    /* Change the limits of a live cgroup (which: CDN_CGROUP_SET_* bits); nothing is reset. A
     * memory limit under what it holds: v1 refuses (EBUSY) what it cannot reclaim, v2 reclaims and
     * OOM-kills. err names the spec field. */
    int (*set_limits)(struct cdn_cgroup *cg, const struct cdn_cgroup_limits *l, unsigned which,
                      struct cdn_error *err);
    /* Freeze every process in it (frozen: they run nothing until thawed, a fork included) or thaw
     * them: 0, or -errno (-ENOTSUP: no freezer on this host, -ETIMEDOUT: still freezing). v2:
     * cgroup.freeze; v1: a freezer cgroup of the same name, made at the first freeze, which its
     * processes are moved into. Thawing one never frozen does nothing. */
    int (*freeze)(struct cdn_cgroup *cg, bool frozen);
    /* SIGKILL every process in it, and thaw it (a frozen v1 process dies only then); returns how
     * many were signalled. */
    int (*kill_all)(struct cdn_cgroup *cg);
    /* rmdir, retrying while the kernel still counts exiting tasks. Missing is fine. */
    int (*destroy)(struct cdn_cgroup *cg);
};

extern const struct cdn_cgroup_ops cdn_cgroup_v1_ops;
extern const struct cdn_cgroup_ops cdn_cgroup_v2_ops;

/* Root of the cgroup filesystem; tests point it elsewhere (CORDON_CGROUP_ROOT). */
const char *cdn_cgroup_root(void);
/* Pick the driver for this host: v2 when the root is a cgroup2 mount with the
 * memory controller available, v1 otherwise. */
const struct cdn_cgroup_ops *cdn_cgroup_detect(void);
/* Build the per-controller path "<root>/<ctrl>/cordon/<name>" (v1) or
 * "<root>/cordon/<name>" (v2; ctrl ignored); a name that starts with '/' is a path from the
 * hierarchy's root instead ("<root>/<ctrl><name>": an engine's cgroupsPath, cordon-runtime).
 * Returns -ENAMETOOLONG when it does not fit. */
int cdn_cgroup_path(char *buf, size_t size, enum cdn_cgroup_version v, const char *ctrl, const char *name);
/* v1 cpu.cfs_quota_us / v2 cpu.max quota for a CPU count at the given period. */
uint64_t cdn_cgroup_cpu_quota(double cpus, uint64_t period_us);
/* Parse "key value" lines (memory.events, memory.oom_control, pids.events) for one key. */
int cdn_cgroup_keyed_value(const char *text, const char *key, uint64_t *ret);

void cdn_cgroup_init(struct cdn_cgroup *cg, const struct cdn_cgroup_ops *ops, const char *name);
/* A cgroup.procs (or tasks) file whole, however many processes it lists: malloc'd and
 * NUL-terminated, every entry ended by its newline; NULL with errno set (EFBIG past 64 MiB). A
 * fixed buffer would cut the last pid short, and a prefix of a pid is someone else's. */
char *cdn_cgroup_read_procs(int dirfd, const char *path);
/* rmdir a cgroup directory, waiting (up to ~1 s) while exiting tasks still count. */
int cdn_cgroup_rmdir(const char *path);
/* SIGKILL every pid listed in the text of a cgroup.procs file; returns how many were signalled. */
int cdn_cgroup_kill_listed(const char *procs);
