/* Shared between the host side (container.c) and the setup child (setup.c,
 * rootfs.c) of the container tier. */
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/statfs.h>

#include "proto/fds.h"
#include "core/cgroup.h"
#include "core/sandbox.h"
#include "core/spec.h"
#include "image/image.h"
#include "confine/privileges.h"
#include "confine/proc-mask.h"
#include "confine/seccomp-policy.h"
#include "shared/error.h"

struct cdn_sandbox;

/* A root in place (cdn_sandbox.root_in_place) is an engine's container: its binds (podman's
 * /etc/hosts, volumes) are under directories only host root can search, so the host clones each and
 * sends it to the setup child ('b' and the mount's fd, one per spec mount, after 'm'). */
#define CDN_IN_PLACE_BINDS_MAX 128

struct cdn_setup_args {
    const struct cdn_spec *spec;
    const struct cdn_image *image;
    const struct cdn_seccomp_prog *seccomp;
    const char *scratch; /* host directory the writable layer goes on (in the sandbox's own mount ns) */
    int go_fd;  /* socket: 'm' once the id maps are written (with the idmapped image root), then 'c' once the
                   cgroup is ready */
    int err_fd; /* write end, CLOEXEC: a struct cdn_error if setup fails; EOF when init is exec'd */
    int agent_fd;    /* the sandbox end of the agent socket; becomes fd 3 of cordon-init */
    int init_fd;     /* the cordon-init executable */
    int stdio_fd;    /* becomes fds 0-2 of init when >= 0 (cordond: /dev/null); else they are inherited */
    bool persistent; /* no parent-death signal; listen_fd and slot_fd go to init (sandbox.h) */
    int listen_fd, slot_fd;
    int fanotify_fd;                 /* >= 0: becomes init's fd 10 */
    const struct cdn_cgroup *cgroup; /* v1: to join with attach_self(); NULL when born inside it (v2) */
    bool netns_given;                /* born in a prepared network namespace: do not make one */
    uint32_t resolver_ip;            /* for /etc/resolv.conf; 0 = leave the image's */
    int writable_fd;                 /* >= 0: the writable layer's detached mount (writable.c); else tmpfs */
    bool root_in_place;              /* the image's directory is the root, written in place (sandbox.h) */
    const struct rlimit *rlimits;    /* lowered rlimits, or NULL (sandbox.h) */
    char *const *sysctls, *const *masked_paths, *const *readonly_paths; /* the engine's (sandbox.h) */
    const struct cdn_fs_mount *fs_mounts;
    size_t n_fs_mounts;
    const void *seccomp_extra; /* sandbox.h */
    uint16_t seccomp_extra_len;
    bool restored; /* that layer is a checkpoint's: its upper/ is what a sandbox wrote (rootfs.c trusts none
                      of it) */
    /* For cordon-setup, which makes the setup child (setup-main.c): the slot's uid that owns the
     * child's user namespace; the cgroup v2 directory it is born in (CLONE_INTO_CGROUP) or -EBADF; a
     * network namespace given to be born in, or -EBADF; the host's blocked signals (bit n-1: signal
     * n), the setup child's too. */
    uint32_t uid_base;
    int into_cgroup_fd, netns_fd;
    uint64_t sigmask;
};

/* The setup child is made by cordon-setup (setup-main.c), a small program each process that makes
 * container sandboxes starts once, rather than by that process forking itself (issue 25: a fork of
 * cordond copied its page tables, ~1 ms of a create with thousands of sandboxes alive). A request
 * is one message on a SOCK_SEQPACKET socket (cordon-setup's fd 3): the byte 'r' and fds, the args'
 * (cdn_setup_args_fds: those >= 0, in that order) and last a memfd of the args packed
 * (cdn_setup_args_pack: an engine's bundle may make them megabytes, more than one message takes);
 * the answer is one message, a struct cdn_setup_answer and, when pid > 0, the setup child's pidfd.
 * The setup child is the requester's own (CLONE_PARENT). argv[1] is the requester's pid. */
#define CDN_SETUP_ARGS_MAX (64 << 20)
#define CDN_SETUP_FDS      11
struct cdn_setup_answer {
    int32_t pid; /* > 0: the setup child; else err says why */
    struct cdn_error err;
};
/* A signal set as the args carry it (bit n-1: signal n, up to 64), and back. */
uint64_t cdn_sigset_to_mask(const sigset_t *set);
void cdn_sigset_from_mask(uint64_t mask, sigset_t *set);
/* The args' fds, in the order a request carries them: pointers into a. */
void cdn_setup_args_fds(struct cdn_setup_args *a, int *ret[CDN_SETUP_FDS]);
/* The args as bytes (setup-args.c): *ret (malloc'd) and *ret_len, 0; or -ENOMEM. */
int cdn_setup_args_pack(const struct cdn_setup_args *a, void **ret, size_t *ret_len);
/* Read back, into u (its pointers into memory of its own, until cdn_setup_args_free). Each fd that
 * the request carries is 0 (the requester had it), the others -EBADF. 0, or -EINVAL for bytes that
 * are not such args. */
struct cdn_setup_unpacked {
    struct cdn_setup_args args;
    struct cdn_spec spec;
    struct cdn_seccomp_prog seccomp;
    struct cdn_cgroup cgroup;
};
int cdn_setup_args_unpack(const void *buf, size_t len, struct cdn_setup_unpacked *u);
void cdn_setup_args_free(struct cdn_setup_unpacked *u);
/* A setup child for args, from this process's cordon-setup (spawner.c), started when it is not (or
 * no more): the child's pid and *ret_pidfd, or -errno with err. Sets args->sigmask.
 *
 * One cordon-setup per process, asked by one thread at a time: a request and its answer are two
 * messages on one socket, with nothing to tell two askers' answers apart (cordond, `cordon run` and
 * cordon-runtime each ask from their main thread only). cordon-setup is a snapshot of the process at
 * its first request: rlimits, umask, cwd, stdio, ignored signals and environment, which these
 * processes set before. Its capabilities are those its exec gives root (the bounding set, not the
 * asker's permitted set), and an LSM that changes labels on exec would label it so; both hold for
 * the setup child, which drops to what setup.c gives the sandbox anyway. */
pid_t cdn_spawner_request(struct cdn_setup_args *args, struct cdn_error *err, int *ret_pidfd);

/* A new writable layer of disk_mb, named name, its first directory read (writable.c): its detached
 * mount's fd, or -errno with err. The layer maker (layer-maker.c) makes the stock's so; fork starts
 * it and returns its socket, or -errno. */
int cdn_layer_new_warm(uint64_t disk_mb, const char *name, struct cdn_error *err);
int cdn_layer_maker_fork(void);
/* The maker's answer to a request (a uint64_t disk_mb): one message, 'L' with the layer's mount fd, or
 * 'E' and why not. */
struct cdn_layer_answer {
    char kind;
    struct cdn_error err;
};

/* The setup child: cordon-setup's child, made with clone3 in the new user, pid, mount, net, ipc,
 * uts and time namespaces (pid 1 there); it puts its fds in place (proto/fds.h), closes the rest and
 * ends by exec'ing cordon-init. Never returns; reports failure through err_fd and exits 1. */
_noreturn_ void cdn_container_setup(const struct cdn_setup_args *a);

/* The sysctls an engine's bundle sets (engine-bundle.c, cdn_sandbox.sysctls): "key=value" each, written
 * under /proc/sys in the calling process's own namespaces. The host writes the net.* ones into a
 * network namespace it was given (owned by the host's user namespace, so the sandbox's root cannot),
 * the setup child writes the others, and the net.* ones too in a namespace of its own. id_base: the
 * host's, for the gids of net.ipv4.ping_group_range (the sandbox's uid_base); 0 in the setup child,
 * whose user namespace maps them itself. 0, or -errno
 * with err naming linux.sysctl.<key>. */
enum cdn_engine_sysctls { CDN_SYSCTLS_ALL, CDN_SYSCTLS_NET, CDN_SYSCTLS_NOT_NET };
int cdn_engine_sysctls(char *const *kv, enum cdn_engine_sysctls which, uint32_t id_base,
                       struct cdn_error *err);
/* Whether the engine's bundle mounts a file system of type (sandbox.h fs_mounts). */
bool cdn_engine_wants(const struct cdn_fs_mount *m, size_t n, const char *type);
/* A sysfs of the network namespace this process is in, as a detached read-only mount (the host makes
 * it for a namespace it gave, which the sandbox's root may not mount sysfs of): its fd, or -errno. */
int cdn_engine_sysfs(void);
/* The bundle's cgroup file systems (sandbox.h fs_mounts), in the setup child once it has its cgroup
 * namespace and its root: cgroup2, read-only, on a cgroup v2 host; none on v1. */
int cdn_engine_cgroup(const struct cdn_setup_args *a, struct cdn_error *err);
/* The bundle's read-only, then masked paths (cdn_sandbox.readonly_paths, masked_paths), in the setup
 * child once the root is pivoted: a read-only bind of each path on itself; an empty read-only tmpfs
 * on a masked directory, /dev/null on a masked file. A path the root lacks, or a symlink, is left. */
int cdn_engine_paths(char *const *readonly, char *const *masked, struct cdn_error *err);

/* The writable layer on disk (writable.c). Host side, root in the initial namespaces: a detached
 * mount of a fresh filesystem of spec->limits.disk_mb whose root belongs to uid_base, on a loop
 * device named "cordon-slot-<slot>"; returns its
 * fd (CLOEXEC), or a negative errno with err naming the field "disk". Nothing of it outlives the
 * last holder of the mount. */
int cdn_writable_make(struct cdn_sandbox *sb, struct cdn_error *err);
/* A free loop device bound to file_fd (LO_FLAGS_AUTOCLEAR and flags), named name (LOOP_GET_STATUS64,
 * for leak checks and operators); its number in *ret_nr; returns its fd. */
int cdn_loop_attach(int file_fd, const char *name, uint32_t flags, int *ret_nr, struct cdn_error *err);
/* A user namespace whose uid and gid maps take count ids from `from` to `to` (an idmapping: files
 * owned on disk by from+i are to+i through it); its fd, or -errno. */
int cdn_userns_mapping(uint32_t from, uint32_t to, uint32_t count);
/* Whether /dev/loop<nr> is bound to the file of st. */
bool cdn_loop_backs(int nr, const struct stat *st);
/* fstype on /dev/loop<nr>, as a detached mount with attrs (MOUNT_ATTR_*): its fd. Errors name field
 * and say what it is. */
int cdn_loop_mount(int nr, const char *fstype, unsigned attrs, const char *field, const char *what,
                   struct cdn_error *err);
/* The loop device (its number) bound to the file of st, or -1. */
int cdn_loop_of(const struct stat *st);
/* A file system image of the state directory (layer-store.c): its size, want bytes (at least least),
 * or with want 0 the state file system's (at least 1 GiB); and made at path, sparse, by argv (a mkfs
 * of Debian's package pkg whose last argument, before the NULL, is replaced by the image's path),
 * whole or not at all. Errors name field. */
uint64_t cdn_fs_image_size(uint64_t want, uint64_t least);
int cdn_fs_image_make(const char *path, uint64_t size, char **argv, const char *pkg, const char *field,
                      struct cdn_error *err);
/* Whether the writable layer on disk, of statfs fs, is full: ext4 refuses a large write with
 * ENOSPC while up to ~1 MiB is still free, so "full" is less than 1 MiB left, not nothing. */
bool cdn_writable_full(const struct statfs *fs);
/* ext4 refuses a large write with ENOSPC while up to ~1 MiB is still free (seen: 0.6-0.9 MiB after dd
 * bs=1M, whatever the size), and a pool's layer with EDQUOT as one would cross the cap: below this
 * much left a layer counts as full. */
#define CDN_WRITABLE_FULL_MARGIN (1ULL << 20)
/* The layer pool (layer-pool.c): its root's fd once open, else -1; a layer there for sb (a detached
 * bind of the subvolume named sb->id, capped at disk_mb, its root the slot's), or a negative errno
 * with err naming "disk"; and the bytes of the layer of id (-ENOENT: id has none), from its quota
 * group as btrfs has it now (sysfs; without reserved_too, used is the charged bytes, two reads
 * fewer for the check at each exec's end):
 *   charged  what its extents hold. Simple quotas charge an extent once it is written back, and free
 *            one at the commit after its file's end (~30 s): it lags writes, and deletes. At the cap
 *            btrfs commits before it refuses a write (EDQUOT), so there it is current: the disk
 *            violation reads this, never counting a layer full that deletes have emptied.
 *   used     charged, and what is reserved for writes not on disk yet: live for writes (usage),
 *            never more than the cap. */
struct cdn_pool_usage {
    uint64_t charged, used, cap;
};
int cdn_layer_pool_make(const struct cdn_sandbox *sb, struct cdn_error *err);
int cdn_layer_pool_usage(const char *id, bool reserved_too, struct cdn_pool_usage *ret);
/* Setup child: move the mount fd onto scratch (in its own mount namespace); closes fd. */
int cdn_writable_attach(int fd, const char *scratch, struct cdn_error *err);

/* The root of a container whose engine mounted it as an overlay (root-layers.c): a new overlay of
 * the same layers, each idmapped through userns (the sandbox's, or one from the engine's ids onto
 * its own; lower_userns >= 0: the lower layers' own, sandbox.h lowers_from_zero), read-only unless
 * writable. Its
 * detached mount's fd, or -errno with err naming root.path. Host side, root in the initial
 * namespaces. */
struct cdn_root_layers;
int cdn_root_layers_mount(int userns, int lower_userns, uint32_t uid_base, const struct cdn_root_layers *l,
                          bool writable, struct cdn_error *err);

/* RLIM_NLIMITS rlimits (sandbox.h rlimits) on the calling process, each only lowering its own
 * (setup.c). 0, or -errno with err naming process.rlimits. */
int cdn_container_lower_rlimits(const struct rlimit *want, struct cdn_error *err);

/* The sandbox's Landlock ruleset (setup.c), on the calling process, once it is in the sandbox's mount
 * namespace: what a container's commands may write. 0, or -errno with err. */
int cdn_container_landlock(const struct cdn_spec *spec, struct cdn_error *err);

/* Build the sandbox's root under a->scratch (rootfs.c); bind_fds: the binds the host cloned (a
 * root in place), or NULL: the child opens the sources itself; sysfs_fd: the sysfs the host made of a
 * network namespace it gave (cdn_engine_sysfs), or -1: the child mounts its own. Then pivot into it. lower_fd
 * is the image's root as a detached mount idmapped through the sandbox's user namespace, or -1 (then the
 * image's files are nobody's inside, and the writable directories are made for the sandbox). */
int cdn_rootfs_prepare(const struct cdn_setup_args *a, int lower_fd, const int *bind_fds, int sysfs_fd,
                       struct cdn_error *err);
int cdn_rootfs_pivot(const struct cdn_setup_args *a, struct cdn_error *err);
