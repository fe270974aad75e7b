/* A tier is a table of operations (DESIGN §5). Every tier starts an init that
 * speaks the agent protocol on sb->agent_fd, so exec, files and signals are
 * tier-independent; the table only covers what differs: building the
 * isolation, signalling, accounting and tearing it down. */
#pragma once

#include "core/sandbox.h"
#include "shared/error.h"

struct cdn_tier_ops {
    const char *name;
    /* Build the sandbox and start its init. On success sb->agent_fd,
     * sb->init_pid/init_pidfd and sb->setup_fd are set; on failure nothing is left behind. */
    int (*create)(struct cdn_sandbox *sb, struct cdn_error *err);
    /* Deliver a signal to the sandbox's init (SIGKILL ends the sandbox). */
    int (*kill)(struct cdn_sandbox *sb, int sig);
    /* Resource accounting; valid until destroy. */
    int (*usage)(struct cdn_sandbox *sb, struct cdn_usage *ret);
    /* Kill whatever is left, wait for it, release every kernel object. Idempotent. */
    int (*destroy)(struct cdn_sandbox *sb);
    /* Like destroy, but without waiting: the sandbox is killed and its kernel
     * objects are released in the background (DESIGN §6, asynchronous teardown). */
    void (*detach)(struct cdn_sandbox *sb);
    /* Take over a persistent sandbox made by an earlier process (cordond
     * before a restart): sb->slot and sb->init_pid come from its record.
     * Opens the pidfd and the cgroup; no agent connection (the caller
     * connects to the sandbox's listening socket). -ESRCH: init is gone;
     * then destroy() still cleans up what is left of the slot. */
    int (*adopt)(struct cdn_sandbox *sb, struct cdn_error *err);
    /* Remove what keep_cgroup left of a slot, if the slot is free (else its
     * new owner has it). For the end of cordond. */
    void (*drop_slot)(int slot);
    /* drop_slot() for every slot that has cgroup directories (a crashed
     * cordond's kept ones); slots in use are left alone. */
    void (*sweep_slots)(void);
    /* What is left of a sandbox of an earlier process whose init is gone or
     * not its own (sb->id from its record), for tiers without slots. */
    void (*forget)(struct cdn_sandbox *sb);
    /* Once init runs: a new fd of the seccomp listener of the sandbox's
     * watched denials (cdn_seccomp_notify_eperm), for the caller to
     * supervise; -errno. NULL: the tier has none. */
    int (*monitor_fd)(struct cdn_sandbox *sb);
    /* A copy of the fanotify group init holds (sandbox.h fsguard_fd), for a
     * restarted cordond; -errno (EBADF: it holds none). */
    int (*fsguard_fd)(struct cdn_sandbox *sb);
};

extern const struct cdn_tier_ops cdn_container_tier;
extern const struct cdn_tier_ops cdn_process_tier; /* full build only (cordon-worker embeds Python) */
extern const struct cdn_tier_ops cdn_microvm_tier; /* full build only (libarchive, liblzma) */
extern const struct cdn_tier_ops cdn_vm_tier;      /* the same code: full build only */

const struct cdn_tier_ops *cdn_tier_lookup(enum cdn_tier tier);
/* A VM guest's USAGE frame (agent/frame.h): kept in sb for the microvm tier's usage(). */
int cdn_microvm_usage_frame(struct cdn_sandbox *sb, const uint8_t *p, size_t len);
