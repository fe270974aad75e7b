/* Per-sandbox host resources that must be unique among live sandboxes: an
 * unprivileged uid/gid range and a cgroup name. A slot is owned by whoever
 * holds the flock on <run>/slots/<n>; the kernel drops it when the holder
 * dies, so a crash never strands a slot. A slot is also taken while its byte
 * of <run>/slots/held-<slot / 128> is locked (cdn_slot_hold). */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "core/cgroup.h"
#include "core/spec.h"
#include "shared/error.h"

#define CDN_UID_BASE   0x40000000u /* host uids 2^30 … 2^31-1: above any distribution's allocations */
#define CDN_UID_RANGE  65536u
#define CDN_SLOT_COUNT 16383
/* The files the holds of cdn_slot_hold are in (128 slots each): as many fds of its own, at most. */
#define CDN_SLOT_HELD_FILES 128

/* Lock a free slot, trying hint first when it is >= 0 (a slot whose cgroup
 * directories the caller kept for reuse). ret_fd holds the lock (CLOEXEC). */
int cdn_slot_acquire(const char *run_dir, int hint, int *ret_slot, int *ret_fd, struct cdn_error *err);
/* slot's lock (an fd, CLOEXEC) when it is free, from the directory <run>/slots; -EBUSY when taken. */
int cdn_slot_lock(int slots_dir, int slot);
static inline uint32_t cdn_slot_uid_base(int slot)
{
    return CDN_UID_BASE + (uint32_t) slot * CDN_UID_RANGE;
}

/* Fork the reaper: a small process that outlives us if we are killed and then
 * kills whatever is left in the cgroup and removes it. Writing "d" and closing
 * *ret_fd tells it all is clean. It shares the slot lock so the slot stays
 * taken until it is done. */
int cdn_reaper_start(const struct cdn_cgroup *cg, int slot_fd, int *ret_fd, pid_t *ret_pid);
/* Tell the reaper the sandbox was torn down cleanly and let it go. */
void cdn_reaper_release(int *fd);

/* What the tiers whose sandboxes live in host processes (container, process) share. */
struct cdn_sandbox;
struct cdn_usage;
/* sb->cgroup (initialised) made with the spec's limits; a reused directory's OOM count is
 * remembered in sb->oom_base. */
int cdn_slot_make_cgroup(struct cdn_sandbox *sb, struct cdn_error *err);
/* Accounting from sb->cgroup; -ENODEV once it is gone. */
int cdn_slot_usage(struct cdn_sandbox *sb, struct cdn_usage *ret);
/* The slot cgroup's limits (tier.h set_limits). */
int cdn_slot_set_limits(struct cdn_sandbox *sb, const struct cdn_limits *l, unsigned which,
                        struct cdn_error *err);
/* A signal to init through its pidfd. */
int cdn_slot_signal(struct cdn_sandbox *sb, int sig);
/* Kill init and reap it, close its fds, empty the cgroup (removed, or kept with keep_cgroup),
 * call release (when not NULL: what the tier made in the slot's name, while the slot is still
 * ours), release the reaper, unlock the slot. Returns the cgroup removal's error. Idempotent. */
int cdn_slot_destroy(struct cdn_sandbox *sb, void (*release)(struct cdn_sandbox *sb));
/* cordond's hold on a slot whose init keeps the lock itself (persistent: fd 8), without an fd of
 * its own per slot: the slot's byte of <run>/slots/held-<slot / 128>, locked through one open file
 * description per such file for all the slots of it this process holds (F_OFD_SETLK); sb->slot_fd is then
 * closed and sb->slot_held set. The slot stays taken after init's end, until cdn_slot_let_go. Returns 0; 1
 * when sb->slot_fd is kept instead (the byte is another sandbox's of this process, or another
 * description, a former cordond's, still holds it); -EINVAL when sb->slot_fd is not sb->slot's lock
 * file (nothing changed). */
int cdn_slot_hold(struct cdn_sandbox *sb);
/* The slot let go: sb->slot_fd closed, sb->slot_held's byte unlocked. */
void cdn_slot_let_go(struct cdn_sandbox *sb);
