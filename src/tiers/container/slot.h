/* Per-sandbox host resources that must be unique among live sandboxes: an
 * unprivileged uid/gid range and a cgroup name. A slot is owned by whoever
 * holds the flock on <run>/slots/<n>; the kernel drops it when the holder
 * dies, so a crash never strands a slot. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "core/cgroup.h"
#include "shared/error.h"

#define CDN_UID_BASE   0x40000000u /* host uids 2^30 … 2^31-1: above any distribution's allocations */
#define CDN_UID_RANGE  65536u
#define CDN_SLOT_COUNT 16383

/* Lock a free slot, trying hint first when it is >= 0 (a slot whose cgroup
 * directories the caller kept for reuse). ret_fd holds the lock (CLOEXEC). */
int cdn_slot_acquire(const char *run_dir, int hint, int *ret_slot, int *ret_fd, struct cdn_error *err);
static inline uint32_t cdn_slot_uid_base(int slot)
{
    return CDN_UID_BASE + (uint32_t) slot * CDN_UID_RANGE;
}

/* Fork the guard: a small process that outlives us if we are killed and then
 * kills whatever is left in the cgroup and removes it. Writing "d" and closing
 * *ret_fd tells it all is clean. It shares the slot lock so the slot stays
 * taken until it is done. */
int cdn_guard_start(const struct cdn_cgroup *cg, int slot_fd, int *ret_fd, pid_t *ret_pid);
/* Tell the guard the sandbox was torn down cleanly and let it go. */
void cdn_guard_release(int *fd);
