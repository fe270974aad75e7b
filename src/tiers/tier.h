/* A tier is a table of operations (DESIGN §5). Every tier starts an init that
 * speaks the agent protocol on sb->agent_fd, so exec, files and signals are
 * tier-independent; the table covers what differs: building the isolation,
 * signalling, accounting, tearing it down, and what the daemon and the CLI must
 * do differently for it — said here as capabilities describing behaviour, so
 * that no code outside src/tiers asks which tier a sandbox is of. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/sandbox.h"
#include "shared/error.h"

struct json_t; /* jansson's json_t: describe() and restore() exist in the full build only */

/* Who a tier's describe() writes for. */
enum cdn_describe_view {
    CDN_DESCRIBE_API,    /* cordond's sandbox object (GET /v1/sandboxes/{id}) */
    CDN_DESCRIBE_RECORD, /* cordond's record, read back by restore() after a restart */
    CDN_DESCRIBE_RUN,    /* the record `cordon run --json` prints */
};

/* A selftest probe whose escape is the tier's design, and why (docs of the tier). */
struct cdn_tier_escape {
    const char *probe;
    const char *why;
};

struct cdn_protect_mount; /* monitor/fanotify.h */

struct cdn_tier_ops {
    const char *name;
    enum cdn_tier tier; /* the spec's value naming it */

    /* ---- capabilities ---- */
    /* The sandbox runs a kernel of its own (a VM guest): its init supervises its commands itself
     * (their seccomp listener, the fanotify group of its protected paths, a verifier step's check
     * of moved mounts) and reports VIOLATION frames on channel 0. The host marks none of its files
     * and holds no fanotify group for it. */
    bool guest_supervises;
    /* A command cannot share the host's stdio: its output comes back as frames (CDN_EXEC_PIPES). */
    bool exec_pipes;
    /* How many DONE frames init sends on channel 0 once it has set itself up (a guest's answers to
     * IDENTITY and POLICY), before the sandbox runs; an ERROR there fails the start. The start is
     * then timed ($CORDON_VM_START_TIMEOUT_S). 0: the setup pipe's EOF says it runs. */
    unsigned start_answers;
    /* A pooled sandbox runs one command before it counts as ready: its first costs more (a
     * restored guest's kernel code is translated again), and the pool pays it, not a request. */
    bool warm_exec;
    /* A persistent sandbox's record names the slot it holds (adopt() takes it back); the records
     * of the other tiers name none (-1). */
    bool slot_in_record;
    /* It runs CALL frames (warm executors, docs/process.md). */
    bool calls;
    /* Its commands may run as another user of the sandbox (spec and exec "user", shared/user.h):
     * its init holds CDN_INIT_CAPS (confine/privileges.h). */
    bool users;
    /* A rollback's new init starts in another slot while the old one ends (daemon/grave.c): the
     * old one's destroy() needs nothing but its init, slot and cgroup, and no more than the box. */
    bool end_beside;
    /* Binds target this directory or beneath it (its mount namespace has no root of its own);
     * NULL: anywhere. */
    const char *binds_under;
    /* Probes of `cordon selftest` whose escape is this tier's design, ended by {NULL}; NULL: none. */
    const struct cdn_tier_escape *by_design;

    /* ---- operations ---- */
    /* Whether this host can run the tier now; -errno, with err saying what is missing (a VM tier's
     * guest not prepared). NULL: always. */
    int (*ready)(struct cdn_error *err);
    /* Build the sandbox and start its init. On success sb->agent_fd,
     * sb->init_pid/init_pidfd and sb->setup_fd are set; on failure nothing is left behind. */
    int (*create)(struct cdn_sandbox *sb, struct cdn_error *err);
    /* Optional: what a create of spec needs that is made once and cached (a guest's kernel and
     * initramfs, its image's disk, its snapshot). build false only looks: 1 all there, 0 something
     * is still to be made. build true makes what is missing (seconds to minutes: cordond runs it in
     * a child, so that its loop never waits for it), then 1. -errno, err set, when it cannot. */
    int (*prepare)(const struct cdn_spec *spec, bool build, struct cdn_error *err);
    /* Deliver a signal to the sandbox's init (SIGKILL ends the sandbox). */
    int (*kill)(struct cdn_sandbox *sb, int sig);
    /* Resource accounting; valid until destroy. */
    int (*usage)(struct cdn_sandbox *sb, struct cdn_usage *ret);
    /* Change limits of the running sandbox: which of l's cpus, memory_mb, pids (CDN_CGROUP_SET_*
     * bits). One the tier cannot change is refused naming its field. */
    int (*set_limits)(struct cdn_sandbox *sb, const struct cdn_limits *l, unsigned which,
                      struct cdn_error *err);
    /* Whether the sandbox's writable space is full now (its tmpfs, its overlay's upper layer, a
     * guest's disk as it last reported). -errno: not known (init gone). */
    int (*disk_full)(struct cdn_sandbox *sb, bool *ret);
    /* Kill whatever is left, wait for it, release every kernel object. Idempotent. The tier's
     * private data (sb->tier_data) stays, for describe(), until release(). */
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
    /* What a crashed cordond left of this tier's slots (kept cgroup directories, a
     * sandbox's directory) for every slot nobody holds; slots in use are left alone. */
    void (*sweep_slots)(void);
    /* What is left of a sandbox of an earlier process whose init is gone or
     * not its own (sb->id from its record), for tiers without slots. */
    void (*forget)(struct cdn_sandbox *sb);
    /* Once init runs: a new fd of the seccomp listener of the sandbox's
     * watched denials (cdn_seccomp_notify_eperm), for the caller to
     * supervise; -errno. NULL: the tier has none. */
    int (*monitor_fd)(struct cdn_sandbox *sb);
    /* A copy of the fanotify group init holds (sandbox.h fanotify_fd), for a
     * restarted cordond; -errno (EBADF: it holds none). NULL: its init holds none. */
    int (*fanotify_fd)(struct cdn_sandbox *sb);
    /* A sandbox made with network "none" was given one at run time (cordond's egress.c joined its
     * namespace; sb->resolver_ip is set): point its resolver there. -errno with err saying why
     * not (the network works; names resolve through any address on port 53). NULL: the tier
     * cannot be given a network later. */
    int (*network_given)(struct cdn_sandbox *sb, struct cdn_error *err);
    /* Change the protected paths of the running sandbox: bind add's patterns read-only (their
     * parents pinned) and say which mounts that made (*ret, malloc'd, *ret_n of them), release the
     * mounts release[] (ids of binds made for paths no longer protected). Nothing changes on
     * failure; -EBUSY when a process of the sandbox holds a way in past a new bind (err names it).
     * hook(hook_arg) runs every few ms meanwhile (the caller answers the fanotify events the work
     * may cause). The host's marks are the caller's. NULL: fixed at creation. */
    int (*protect)(struct cdn_sandbox *sb, const struct cdn_strv *add, const int *release, size_t n_release,
                   struct cdn_protect_mount **ret, size_t *ret_n, void (*hook)(void *), void *hook_arg,
                   struct cdn_error *err);
    /* A frame init sent on channel 0 that only this tier knows (a guest's USAGE report). Runs in
     * the host process that owns the sandbox; the payload is the sandbox's: hostile. 1: the tier's,
     * taken (its accounting may have changed); 0: not one of the tier's; -errno: the tier's, and
     * it does not decode. */
    int (*frame)(struct cdn_sandbox *sb, uint16_t type, const uint8_t *p, size_t len);
    /* What the tier adds to an object describing the sandbox (view says whose); valid after
     * destroy, until release(). */
    void (*describe)(const struct cdn_sandbox *sb, struct json_t *o, enum cdn_describe_view view);
    /* A memory checkpoint (tier microvm, spec "checkpoints"): the guest paused, its whole state
     * (RAM, devices) written to out, the guest let run on. The caller holds the guest's agent (its
     * stream is at a frame's end: CDN_FRAME_HOLD); out -1: only whether it could (0 or err). NULL:
     * none. */
    int (*save_memory)(struct cdn_sandbox *sb, int out, struct cdn_error *err);
    /* Read back what describe(CDN_DESCRIBE_RECORD) wrote into a record (before adopt()).
     * -EBADMSG: it is not what the tier writes. */
    int (*restore)(struct cdn_sandbox *sb, const struct json_t *record);
    /* Free sb->tier_data, once the sandbox's owner lets go of the sandbox (after destroy). */
    void (*release)(struct cdn_sandbox *sb);
};

extern const struct cdn_tier_ops cdn_container_tier;
extern const struct cdn_tier_ops cdn_process_tier; /* full build only (cordon-worker embeds Python) */
extern const struct cdn_tier_ops cdn_microvm_tier; /* full build only (libarchive, liblzma) */
extern const struct cdn_tier_ops cdn_vm_tier;      /* full build only */

/* Every tier of this build, NULL-terminated, in the order metrics list them. */
extern const struct cdn_tier_ops *const cdn_tiers[];

/* NULL: a tier this build has not (the lean CLI runs containers only). */
const struct cdn_tier_ops *cdn_tier_lookup(enum cdn_tier tier);
/* What a spec asks that tier t cannot do (its "user"): -EOPNOTSUPP with err naming the field. */
int cdn_tier_check_spec(const struct cdn_tier_ops *t, const struct cdn_spec *spec, struct cdn_error *err);
/* The same for one command's user (an exec's "user"); NULL passes. */
int cdn_tier_check_user(const struct cdn_tier_ops *t, const char *user, struct cdn_error *err);
/* The tier of this build named name, or NULL. */
const struct cdn_tier_ops *cdn_tier_by_name(const char *name);
/* drop_slot() of every tier that keeps slots. */
void cdn_tier_drop_slot(int slot);
/* sweep_slots() of every tier. */
void cdn_tier_sweep_slots(void);
/* The container tier's stock of writable layers made ahead (tiers/container/writable.c), for a
 * long-lived process (cordond): up to target ready layers of each of the last few disk_mb sizes
 * asked for, first_mb's from the start. A create takes one when there is one (and calls wanted(),
 * which should arrange a cdn_writable_stock_fill soon); else it makes its own as without a stock.
 * Fill makes one layer: 1 when it did, 0 when the stock is full, a negative errno with err. */
void cdn_writable_stock_enable(unsigned target, uint64_t first_mb, void (*wanted)(void));
int cdn_writable_stock_fill(struct cdn_error *err);
/* Helper processes that make the stock's layers (tiers/container/layer-maker.c), so that this one
 * does not wait on their disk I/O: start forks CDN_LAYER_MAKERS of them (early: each keeps nothing of
 * this process but its socket) and puts the sockets' fds in fds, which the caller watches; it returns
 * how many. From then on a fill only asks them. answer, when fd is readable: 1 a layer was stocked,
 * 0 nothing to do, -1 with err the helper could not make one (that size is left until a create asks
 * for it again), -EPIPE with err the helper is gone (stop watching fd; with none left, fills make
 * layers here again). */
#define CDN_LAYER_MAKERS 3
size_t cdn_writable_maker_start(int *fds);
int cdn_writable_maker_answer(int fd, struct cdn_error *err);
unsigned cdn_writable_stock_ready(void);
void cdn_writable_stock_drop(void);
/* The stock handed over to `cordon run` (writable.c): one request answered on a connection accepted
 * on "<API socket>.layers" (closed by the caller); true if a layer went. A process that never enabled
 * a stock asks the cordond at $CORDON_SOCKET (or the default socket) first, and makes its own without
 * an answer. */
bool cdn_writable_stock_serve(int conn);
/* The checkpoint store (tiers/container/layer-store.c), made and mounted on first use (cordond
 * only): its root's fd (borrowed), or a negative errno with err naming the field "checkpoints".
 * cdn_layer_store_fd: the same once it is open, else -1. */
int cdn_layer_store(struct cdn_error *err);
/* The size of a store made from now on (bytes; 0: the state filesystem's, at least 1 GiB). */
void cdn_layer_store_size(uint64_t bytes);
int cdn_layer_store_fd(void);
/* A layer image's marks (writable.c): the base of the slot whose ids its files keep on disk, and
 * the loop device it is bound to now (-ENOENT: none). */
int cdn_layer_uid_base(int file, uint32_t *ret);
int cdn_layer_set_uid_base(int file, uint32_t base);
int cdn_layer_loop(int file);
/* The writable layer pool (tiers/container/layer-pool.c, cordond's writable_pool): open
 * makes and mounts it (size bytes for a new one; 0: the state file system's) and takes its directory
 * of sandbox_dir (each cordond of a state directory has its own, which only it sweeps); from then on the
 * container tier makes its layers there (but a checkpointable sandbox's, which the checkpoint store
 * keeps). 0, or a negative errno with err naming "writable_pool". drop destroys sandbox id's layer
 * there, if it has one (its sandbox has ended); sweep destroys every layer whose sandbox is not
 * live(id). */
#define CDN_LAYER_POOL_FILE "pool.btrfs" /* the pool's image, in the state directory */
int cdn_layer_pool_open(uint64_t size, const char *sandbox_dir, struct cdn_error *err);
void cdn_layer_pool_drop(const char *id);
void cdn_layer_pool_sweep(bool (*live)(const char *id));
/* The pool's directory of this cordond once open, else -1. */
int cdn_layer_pool_fd(void);
/* Drop the name of sandbox id's checkpointable layer (its blocks go with its last user). */
void cdn_layer_forget(const char *id);
/* The ext4 of a layer nobody will read again (a rollback's old one, its writers killed), through
 * root (a directory of it), shut down without a journal flush: what is dirty in it is dropped, not
 * written back, and its unmount is quick. */
void cdn_layer_discard(int root);
/* A layer as a create from the checkpoint image from_fd (its files' ids: slot base from_base) of
 * disk_mb would make it, made now (~4 ms: the clone, its loop device, ext4's mount) in a slot taken
 * now (slot_hint first), for sandbox.h layer_ready. -errno, err naming the field. */
int cdn_layer_ready_make(int from_fd, uint32_t from_base, uint64_t disk_mb, int slot_hint,
                         struct cdn_layer_ready *ret, struct cdn_error *err);
/* What is left of r closed (its slot released); r's fds -EBADF, its slot -1. */
void cdn_layer_ready_drop(struct cdn_layer_ready *r);
/* The tier's release(), if any; sb->tier may be NULL (never created). */
void cdn_tier_release(struct cdn_sandbox *sb);
/* Take the hold on sb's image (image.h cdn_image_hold) if it is one of the store's and sb has none
 * yet: the VM tiers' creates and an adopted sandbox. Released by cdn_tier_release. */
int cdn_tier_hold_image(struct cdn_sandbox *sb, struct cdn_error *err);
