/* One sandbox as the host sees it, whatever its tier. Owned by the process
 * that created it (cordon run, later cordond). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/resource.h>
#include <time.h>

#include "core/cgroup.h"
#include "core/spec.h"

#define CDN_ID_LEN 12

struct cdn_tier_ops;

/* An overlay an engine mounted as a container's root (podman's, containerd's): its layers, each a
 * directory under base (all on base's mount), given relative to it; lower top first. Overlay
 * cannot be idmapped itself, its layers can (cdn_sandbox.root_layers). */
#define CDN_ROOT_LAYERS_MAX 128
/* A kernel file system an engine's bundle mounts (cordon-runtime; tiers/container/rootfs.c): tmpfs
 * anywhere, sysfs at /sys (read-only), mqueue at /dev/mqueue, cgroup at /sys/fs/cgroup (cgroup v2
 * hosts, read-only). proc, devpts and /dev's tmpfs are cordon's own and not repeated. options: the
 * bundle's (flags and tmpfs's size=, mode=, nr_inodes=, uid=, gid=; others are left). index: its
 * place in the bundle's mounts, for errors. */
struct cdn_fs_mount {
    const char *type, *destination;
    char *const *options;
    unsigned index;
};
struct cdn_root_layers {
    char base[4096];
    char *lower[CDN_ROOT_LAYERS_MAX];
    size_t n_lower;
    char *upper, *work; /* NULL: none (a read-only overlay) */
    /* The engine's options that the upper's contents depend on, given again (an upper written as
     * "volatile" refuses a mount without it): its flag, and metacopy= and redirect_dir= ("": none). */
    bool volatile_upper;
    char metacopy[8], redirect_dir[16];
    /* The engine idmapped the lower layers itself (containers/storage's <id>/mapped/N, a container
     * with its own id range): their files are owned from 0 on disk, the upper's from the range. */
    bool lowers_from_zero;
};

/* A checkpointable writable layer made ahead of a create (a rollback's standby): the root of its
 * mount (detached), its unnamed image in the checkpoint store, and the slot whose ids own it (held:
 * slot_fd is its lock). Owned by whoever holds it; cdn_layer_ready_drop() lets it all go. */
struct cdn_layer_ready {
    int mnt;
    int file;
    int slot;
    int slot_fd;
};

struct cdn_sandbox {
    char id[CDN_ID_LEN + 1];
    const struct cdn_spec *spec; /* borrowed; outlives the sandbox */
    const struct cdn_tier_ops *tier;

    int agent_fd; /* host end of the agent socket (frames of src/proto/frame.h) */
    pid_t init_pid;
    int init_pidfd;
    int setup_fd; /* reports a setup failure from the pre-exec child; EOF once init runs */
    int stdio_fd; /* set by the caller before create: init's fds 0-2 (-EBADF: the caller's own) */
    /* Set by the caller before create. A persistent sandbox outlives its
     * creator (cordond restarts): no reaper and no parent-death signal; its
     * init holds the slot lock itself and accepts a new host connection on
     * listen_fd (a listening unix socket) whenever the old one is gone. */
    bool persistent;
    int listen_fd;
    /* Called by create once init's pid and the slot are known and before the
     * sandbox may start: a persistent sandbox's record is written here, so
     * that no crash can leave a sandbox that no record names. < 0 fails create. */
    int (*on_spawned)(struct cdn_sandbox *sb, void *arg);
    void *on_spawned_arg;
    /* Reuse of cgroup directories (cordond): slot_hint, when >= 0, is the slot
     * to try first at create; keep_cgroup makes destroy empty the cgroup but
     * leave its directories for the next sandbox of that slot. */
    int slot_hint;
    bool keep_cgroup;
    /* Egress (src/net/): when >= 0, the network namespace the sandbox joins
     * (made and configured by the caller; else a fresh one with only lo), and
     * the resolver its /etc/resolv.conf names (host byte order, 0 = none). */
    int netns_fd;
    uint32_t resolver_ip;
    uint32_t sandbox_ip; /* its address there, for a tier whose guest takes it (the VM tiers); 0 = none */
    /* The monitor's fanotify group (src/monitor/fanotify.h), when >= 0: init
     * keeps a copy (fd 10) so that the marks on a sandbox's protected paths,
     * and the opens waiting for an answer, outlive a restarting cordond. */
    int fanotify_fd;
    /* Set by the caller before create (container tier): a checkpoint's layer image to start from
     * (a reflink copy of it becomes the writable layer), and the base of the slot whose ids its
     * files keep on disk; -EBADF: a fresh layer. Borrowed. */
    int layer_from_fd;
    uint32_t layer_from_base;
    /* Set by the caller before create (container tier), with layer_from_fd: the same layer made ahead
     * (cdn_layer_ready_make), which create takes (its fields then -EBADF) with its slot. NULL: none. */
    struct cdn_layer_ready *layer_ready;
    /* Set by the caller before create (container tier): the image is a directory whose files are the
     * container's own (an OCI bundle's root, cordon-runtime): it becomes the root itself, idmapped
     * through the sandbox's user namespace and writable unless spec.read_only_root, with no layer
     * over it and nothing of cordon's made in it (no writable directories, no resolv.conf). */
    bool root_in_place;
    /* Set by the caller before create (container tier): the cgroup's name instead of the slot's "slot-N",
     * a path from the hierarchies' roots ("/a/b": cordon-runtime's cgroupsPath), made with its parents
     * and never taken for a stale one of the slot's. NULL: the slot's. Borrowed. */
    const char *cgroup_name;
    /* Set by the caller before create (container tier): RLIM_NLIMITS rlimits for init and what it
     * starts, each only ever lowering cordon's (clamped to them; an entry with soft > hard is left as
     * cordon sets it). NULL: cordon's. Borrowed. */
    const struct rlimit *rlimits;
    /* Set by the caller before create (container tier, cordon-runtime): an engine bundle's sysctls
     * ("key=value", only of the sandbox's own namespaces: the caller checks), and the paths it masks
     * and makes read-only on top of cordon's own. NULL-terminated; NULL: none. Borrowed. */
    char *const *sysctls;
    char *const *masked_paths;
    char *const *readonly_paths;
    /* Set by the caller before create (container tier, cordon-runtime): the bundle's kernel file
     * systems, mounted in order once proc and /dev are, before the binds. Borrowed. */
    const struct cdn_fs_mount *fs_mounts;
    size_t n_fs_mounts;
    /* Set by the caller before create (container tier, cordon-runtime): a seccomp filter (struct
     * sock_filter[seccomp_extra_len]) stacked on cordon's for init and all it starts, so that they
     * get what both allow. NULL: none. Borrowed. */
    const void *seccomp_extra;
    uint16_t seccomp_extra_len;
    /* With root_in_place (cordon-runtime, a bundle's linux.uidMappings): the engine's range of host
     * ids for the container (root_ids_count from root_ids_from), whose ids its root's files have on
     * disk, is the sandbox's own in place of its slot's: its root's files need no idmap (but lower
     * layers the engine idmapped itself, cdn_root_layers.lowers_from_zero). 0: the slot's. */
    uint32_t root_ids_from, root_ids_count;
    /* With root_in_place, when that directory is an engine's overlay: its layers, idmapped each, under
     * a new overlay that is the root (tiers/container/root-layers.c). NULL: the directory itself is
     * idmapped. Borrowed. */
    const struct cdn_root_layers *root_layers;
    /* Set by the caller before create (tier microvm): a memory checkpoint's saved guest to restore
     * (cdn_tier_ops.save_memory), which then starts as it was then; -EBADF: a new guest. Borrowed. */
    int memory_from_fd;
    /* Set by the caller before create and adopt (cordond): where a checkpointable guest's QMP
     * listens (QEMU's), so that a restarted cordond reaches it again; NULL: a pair of sockets. */
    const char *qmp_socket;
    /* The tier's own state (its accelerator, a guest's last usage report, …), owned by the tier:
     * made by create or restore/adopt, kept after destroy for describe(), freed by release()
     * (tiers/tier.h). NULL for tiers without any. */
    void *tier_data;

    /* host resources held for the sandbox's lifetime */
    int slot;       /* index of the uid range and cgroup name */
    int slot_fd;    /* flock'd lock file: the slot is ours while this is open */
    bool slot_held; /* or its byte of <run>/slots/held is ours (confine/slot.h cdn_slot_hold) */
    uint32_t uid_base;
    struct cdn_cgroup cgroup;
    uint64_t oom_base; /* oom_kill count of a reused cgroup at creation */
    uint64_t cpu_base; /* … and its CPU time (µs; v2 cannot reset it) */
    int reaper_fd;     /* write end of the reaper pipe: EOF without "done" = clean up */
    int image_fd;      /* its OCI image's hold (image.h cdn_image_hold), until release; or -EBADF */
    pid_t reaper_pid;
    struct timespec created;
};

struct cdn_usage {
    uint64_t memory_peak_bytes;
    uint64_t oom_kills;
    uint64_t pids_max_hits;
    /* Now (cdn_tier_ops.usage): what a known_* flag says is known. A VM's cpu and memory are its
     * QEMU's on the host (the guest's kernel and commands); its pids and disk are the guest's. */
    uint64_t cpu_usec, memory_bytes, pids, disk_used_bytes, disk_size_bytes;
    bool cpu_known, memory_known, pids_known, disk_known;
};

/* Fill id with 12 random hex digits. */
void cdn_sandbox_new_id(char id[CDN_ID_LEN + 1]);
void cdn_sandbox_init(struct cdn_sandbox *sb, const struct cdn_spec *spec);
