/* What a sandbox's processes may hold: rlimits, capabilities, uid (privileges.c). Called by the
 * process being confined, on itself. */
#pragma once

#include <linux/capability.h>
#include <stdint.h>

#include "shared/error.h"

/* rlimits of a sandbox's processes: open files, no core dumps, file size one MiB above the disk
 * (ENOSPC comes first inside the writable layer); never above the hard limits we were given. */
int cdn_set_rlimits(uint64_t nofile, uint64_t disk_mb, struct cdn_error *err);

/* No capability (bounding set, ambient, effective), securebits locked, no_new_privs; with uid != 0
 * the process also becomes uid (and gid uid, no groups) on the way. */
int cdn_drop_capabilities(uint32_t uid, struct cdn_error *err);
/* The capabilities a container's cordon-init is exec'd with (ambient): CAP_SETUID and CAP_SETGID for
 * its commands' user (shared/user.h), CAP_SETPCAP to empty a command's bounding set, CAP_KILL to
 * signal commands of other uids. init keeps them permitted only (CAP_KILL effective); each
 * command's child uses and then clears them all (src/agent/init-user.c). */
#define CDN_INIT_CAPS                                                                                        \
    ((1ULL << CAP_SETUID) | (1ULL << CAP_SETGID) | (1ULL << CAP_SETPCAP) | (1ULL << CAP_KILL))
/* As cdn_drop_capabilities(0, err), but the caps of keep stay in the bounding set and become
 * permitted, inheritable and ambient: the next exec (of a uid 0 with SECBIT_NOROOT) holds them. */
int cdn_drop_capabilities_keep(uint64_t keep, struct cdn_error *err);
/* The same, with saved_uid as the saved set-user-ID (the process tier's worker: worker-template.c). */
int cdn_drop_capabilities_saved(uint32_t uid, uint32_t saved_uid, struct cdn_error *err);
