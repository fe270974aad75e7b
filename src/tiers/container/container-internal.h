/* Shared between the host side (container.c) and the setup child (setup.c,
 * rootfs.c) of the container tier. */
#pragma once

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
    int unshare_from; /* >= 0: cloned with CLONE_FILES; the child's fds are below this (fd-window.c) */
};

/* The window of low fds the setup child's fds go through (fd-window.c), when the process reserved one
 * (cdn_container_fd_window). place: dup each of the n fds >= 0 into the window, in order, and point
 * it there; returns the args' unshare_from, -1 without a window (fds untouched), or -errno. unshare:
 * the child's first call. release: once the child has a table of its own (or none: child <= 0),
 * the window holds placeholders again. */
#define CDN_FD_WINDOW 9

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
int cdn_fd_window_place(int *const fds[], size_t n);
int cdn_fd_window_unshare(int from);
void cdn_fd_window_release(pid_t child);

/* The setup child: runs right after clone3 in the new user, pid, mount, net,
 * ipc, uts and time namespaces (pid 1 there) and ends by exec'ing cordon-init.
 * Never returns; reports failure through err_fd and exits 1. */
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
/* Whether the writable layer on disk, of statfs fs, is full: ext4 refuses a large write with
 * ENOSPC while up to ~1 MiB is still free, so "full" is less than 1 MiB left, not nothing. */
bool cdn_writable_full(const struct statfs *fs);
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
