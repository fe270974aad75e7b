/* Shared between the host side (container.c) and the setup child (setup.c,
 * rootfs.c) of the container tier. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "core/cgroup.h"
#include "core/spec.h"
#include "image/image.h"
#include "seccomp-policy.h"
#include "shared/error.h"

#define CDN_FD_MONITOR 9  /* init's copy of the seccomp listener (setup.c, init.c) */
#define CDN_FD_FSGUARD 10 /* init's copy of the fanotify group, for protected paths (sandbox.h) */

struct cdn_setup_args {
    const struct cdn_spec *spec;
    const struct cdn_image *image;
    const struct cdn_seccomp_prog *seccomp;
    const char *scratch; /* host directory the sandbox's scratch tmpfs is mounted on (in its own mount ns) */
    int go_fd;           /* read end: 'm' once the id maps are written, then 'c' once the cgroup is ready */
    int err_fd;          /* write end, CLOEXEC: a struct cdn_error if setup fails; EOF when init is exec'd */
    int agent_fd;        /* the sandbox end of the agent socket; becomes fd 3 of cordon-init */
    int init_fd;         /* the cordon-init executable */
    int stdio_fd;        /* becomes fds 0-2 of init when >= 0 (cordond: /dev/null); else they are inherited */
    bool persistent;     /* no parent-death signal; listen_fd and slot_fd go to init (sandbox.h) */
    int listen_fd, slot_fd;
    int fsguard_fd;                  /* >= 0: becomes init's fd 10 */
    const struct cdn_cgroup *cgroup; /* v1: to join with attach_self(); NULL when born inside it (v2) */
    bool netns_given;                /* born in a prepared network namespace: do not make one */
    uint32_t resolver_ip;            /* for /etc/resolv.conf; 0 = leave the image's */
};

/* The setup child: runs right after clone3 in the new user, pid, mount, net,
 * ipc, uts and time namespaces (pid 1 there) and ends by exec'ing cordon-init.
 * Never returns; reports failure through err_fd and exits 1. */
_noreturn_ void cdn_container_setup(const struct cdn_setup_args *a);

/* rlimits of a sandbox's processes: open files, no core dumps, file size one MiB above the disk
 * (ENOSPC comes first inside the writable layer); never above the hard limits we were given. */
int cdn_set_rlimits(uint64_t nofile, uint64_t disk_mb, struct cdn_error *err);

/* No capability (bounding set, ambient, effective), securebits locked, no_new_privs; with uid != 0
 * the process also becomes uid (and gid uid, no groups) on the way. */
int cdn_drop_capabilities(uint32_t uid, struct cdn_error *err);
/* The same, with saved_uid as the saved set-user-ID (the process tier's worker: worker-template.c). */
int cdn_drop_capabilities_saved(uint32_t uid, uint32_t saved_uid, struct cdn_error *err);

/* The OCI masks on the /proc at root + "/proc" (rootfs.c): masked files get mask (an empty
 * regular file) bound read-only on them, masked directories an empty tmpfs, and /proc/sys and
 * the like are read-only. The process tier's worker uses it too (root ""). */
int cdn_proc_mask(const char *root, const char *mask, struct cdn_error *err);

/* Build the sandbox's root under a->scratch (rootfs.c); then pivot into it. */
int cdn_rootfs_prepare(const struct cdn_setup_args *a, struct cdn_error *err);
int cdn_rootfs_pivot(const struct cdn_setup_args *a, struct cdn_error *err);
