/* The QEMU guests of the VM tiers (DESIGN §5) — what tier microvm (src/tiers/microvm/) and tier vm
 * (src/tiers/vm/) share: the command line (cmd.c), QEMU's jail (jail.c), the accelerator and the
 * snapshot of a booted guest (snapshot.c), and the guest itself as a sandbox: its cgroup, its
 * connection, its IDENTITY and POLICY, the ops both tables point at (guest.c). Internal to
 * src/tiers: the two tiers are its only callers.
 *
 * Everything here runs in the host process that owns the sandbox (cordon run, cordond), as root,
 * except the jail's child (jail.c), which becomes QEMU. What comes back from a guest (frames on
 * the agent socket, QMP replies) is the guest's: hostile. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/sandbox.h"
#include "shared/error.h"
#include "tiers/tier.h"
#include "vmprep.h"

/* fds of QEMU: 3 our agent socket; 4 the QMP socket (a template) or the state to restore from;
 * 5 the QMP socket (a restore); 6 the tap; 7 a disk image file. */
#define CDN_QEMU_AGENT 3
#define CDN_QEMU_FD4   4
#define CDN_QEMU_TAP   6
#define CDN_QEMU_DISK  7 /* a full VM's disk image file, opened by us: QEMU may be of a uid that cannot */

/* The guest's devices; a change in cmd.c must change it (the snapshots are then made again). */
#define CDN_QEMU_DEVICES "serial(2 ports),net,9p-usr,9p-binds"

enum cdn_qemu_boot { CDN_QEMU_COLD, CDN_QEMU_TEMPLATE, CDN_QEMU_RESTORE };

/* A guest's root disk: an image directory's erofs (read-only, shared), or a full VM's disk image
 * file (writable through QEMU's snapshot of it: the file never changes). */
struct cdn_qemu_disk {
    const char *path;   /* NULL: none (a microvm of the host image) */
    const char *format; /* a disk image file's: "raw" or "qcow2"; NULL: an erofs */
};

/* What a command line is made of. */
struct cdn_qemu_opts {
    const struct cdn_vm_assets *vm;
    const char *accel; /* "kvm" or "tcg" */
    uint64_t mem_mb;
    int smp;
    enum cdn_qemu_boot boot;
    const char *memdir; /* template, restore: the directory of the guest's RAM file */
    bool listening;     /* fd 3 listens (a persistent sandbox's): QEMU accepts one host at a time */
    bool qmp_listening; /* a restore's QMP (fd 5) listens too (a checkpointable guest's) */
    bool tap;           /* fd 6 is the sandbox's tap; else the network device is on nothing */
    bool binds;         /* the spec binds paths: the share, else an empty directory */
    bool pci;           /* -M q35 (PCI, firmware: tier vm); else -M microvm (virtio-mmio) */
    const char *initramfs;
    const char *append; /* the tier's own kernel arguments, each after a space ("" for none) */
    struct cdn_qemu_disk disk;
};

/* A command line: argv points into buf. */
struct cdn_qemu_cmd {
    char *argv[64];
    int argc;
    char buf[20][4200];
    int nbuf;
    /* What QEMU opens by path, bound into its jail at the same place (jail.c); rw: writable there. */
    const char *paths[8];
    bool rw[8];
    int npaths;
};

void cdn_qemu_cmd_build(struct cdn_qemu_cmd *q, const struct cdn_qemu_opts *o);
/* The guest's CPU model under accel (part of a snapshot's key). */
const char *cdn_qemu_cpu_model(const char *accel);

/* What a QEMU child gets: its fds 3-7 (-1: none) and its network namespace. */
struct cdn_qemu_fds {
    int agent, fd4, fd5, tap, disk;
    int netns;                      /* the sandbox's (the tap's); -1: an empty one of its own */
    bool persistent;                /* outlives its caller */
    const struct cdn_mount *mounts; /* bound into the binds share */
    size_t n_mounts;
    struct cdn_cgroup *cgroup; /* QEMU's own: joined before exec */
    const char *tmpdir;        /* QEMU's $TMPDIR (a full VM's disk snapshot goes there), or NULL */
    uid_t uid;                 /* not 0: QEMU runs as this uid (and gid), not as root (cdn_qemu_pick_uid) */
    /* A restored guest's QEMU of its own uid: the template's directory (its RAM file, which QEMU 7.2
     * opens read-write) bound into the jail through an idmapped mount in which root's files are
     * that uid's (userns: a user namespace mapping 0 to it); -1 / NULL otherwise. */
    int idmap_userns;
    const char *idmap_dir;
};

/* QEMU in its jail: its pid, *pidfd set; -errno and err. The caller keeps its fds (and closes
 * QEMU's ends once this returns). */
pid_t cdn_qemu_spawn(const struct cdn_qemu_cmd *q, const struct cdn_qemu_fds *f, int *pidfd,
                     struct cdn_error *err);
/* QEMU's uid for a guest under accel: its own, unless KVM's device is root's only; 0 (root in its
 * jail) otherwise. idmap_dir (a restore's template directory), when not NULL, must be idmappable
 * to it, else 0; *ret_userns is then the idmapping's user namespace (the caller closes it). */
uid_t cdn_qemu_pick_uid(const char *accel, const char *idmap_dir, int *ret_userns);

/* poll() of fd for POLLIN, resumed after signals until timeout_ms in all. */
int cdn_qemu_poll_in(int fd, int timeout_ms);
/* The accelerator for a guest (snapshot.c): "kvm" or "tcg". vm NULL: never try KVM. */
const char *cdn_qemu_pick_accel(const struct cdn_vm_assets *vm);

/* What differs between the two tiers' guests, for cdn_qemu_create(). */
struct cdn_qemu_tier {
    bool pci;             /* cdn_qemu_opts.pci */
    bool snapshots;       /* restored from a snapshot of a booted guest, unless CORDON_VM_BOOT=cold */
    uint64_t overhead_mb; /* the guest's memory besides the limit (its kernel, init, page cache) */
    const char *append;   /* cdn_qemu_opts.append */
    const char *(*initramfs)(const struct cdn_vm_assets *vm, const struct cdn_qemu_disk *disk);
    /* The guest's root disk: its path into disk ("" for none) and, for a disk image file,
     * *ret_format; how: vmprep.h's CDN_VM_*. Errors name "image". */
    int (*root_disk)(const struct cdn_spec *spec, unsigned how, char *disk, size_t size,
                     const char **ret_format, struct cdn_error *err);
};

/* The snapshot directory of t's guests of this shape (made, under a lock, when missing or stale;
 * how: vmprep.h's CDN_VM_*). */
int cdn_qemu_snapshot_dir(const struct cdn_qemu_tier *t, const struct cdn_vm_assets *vm, const char *accel,
                          uint64_t mem_mb, int smp, const char *disk, unsigned how, char *dir, size_t size,
                          struct cdn_error *err);
/* A running guest's state (RAM and devices) into out, over its QMP socket (qm): paused meanwhile. */
int cdn_qemu_save(int qm, int out, struct cdn_error *err);
/* A guest found paused (its cordond killed while saving it): let run. 0 or -errno. */
int cdn_qemu_resume_paused(int qm);
int cdn_qemu_save_memory(struct cdn_sandbox *sb, int out, struct cdn_error *err);
/* A new QMP connection's greeting read and its capabilities negotiated (a restarted cordond's). */
int cdn_qemu_qmp_open(int qm, struct cdn_error *err);
/* Load a snapshot's state into a QEMU started with CDN_QEMU_RESTORE, over its QMP socket. */
int cdn_qemu_restore(int qmp, int pidfd, struct cdn_error *err);

/* An image's root disk as an erofs (path into disk; how: CDN_VM_*). Errors name "image". */
int cdn_qemu_image_erofs(const struct cdn_spec *spec, unsigned how, char *disk, size_t size,
                         struct cdn_error *err);
/* The tier op prepare (tier.h) of t's guests. */
int cdn_qemu_prepare(const struct cdn_spec *spec, const struct cdn_qemu_tier *t, bool build,
                     struct cdn_error *err);

/* The ops both tiers' tables hold (guest.c). */
int cdn_qemu_create(struct cdn_sandbox *sb, const struct cdn_qemu_tier *t, struct cdn_error *err);
int cdn_qemu_ready(struct cdn_error *err);
int cdn_qemu_kill(struct cdn_sandbox *sb, int sig);
int cdn_qemu_usage(struct cdn_sandbox *sb, struct cdn_usage *ret);
int cdn_qemu_set_limits(struct cdn_sandbox *sb, const struct cdn_limits *l, unsigned which,
                        struct cdn_error *err);
int cdn_qemu_disk_full(struct cdn_sandbox *sb, bool *ret);
int cdn_qemu_destroy(struct cdn_sandbox *sb);
void cdn_qemu_detach(struct cdn_sandbox *sb);
int cdn_qemu_adopt(struct cdn_sandbox *sb, struct cdn_error *err);
void cdn_qemu_forget(struct cdn_sandbox *sb);
int cdn_qemu_frame(struct cdn_sandbox *sb, uint16_t type, const uint8_t *p, size_t len);
void cdn_qemu_describe(const struct cdn_sandbox *sb, struct json_t *o, enum cdn_describe_view view);
int cdn_qemu_restore_state(struct cdn_sandbox *sb, const struct json_t *record);
void cdn_qemu_release(struct cdn_sandbox *sb);
/* selftest probes whose escape is a guest's design (tier.h by_design). */
extern const struct cdn_tier_escape cdn_qemu_by_design[];

/* What both tiers' tables say alike: a guest that supervises itself, its commands' output in frames,
 * running after IDENTITY and POLICY are answered, a warm command before a pooled guest is ready, and
 * the ops above. Each table adds its name, its enum and its create. */
#define CDN_QEMU_TIER_OPS                                                                                    \
    .guest_supervises = true, .exec_pipes = true, .start_answers = 2, .warm_exec = true, .users = true,      \
    .by_design = cdn_qemu_by_design, .ready = cdn_qemu_ready, .kill = cdn_qemu_kill,                         \
    .usage = cdn_qemu_usage, .set_limits = cdn_qemu_set_limits, .disk_full = cdn_qemu_disk_full,             \
    .destroy = cdn_qemu_destroy, .detach = cdn_qemu_detach, .adopt = cdn_qemu_adopt,                         \
    .forget = cdn_qemu_forget, .frame = cdn_qemu_frame, .describe = cdn_qemu_describe,                       \
    .restore = cdn_qemu_restore_state, .release = cdn_qemu_release, .save_memory = cdn_qemu_save_memory
