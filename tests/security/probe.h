/*
 * cordon-probe: escape attempts run from INSIDE a sandbox.
 *
 * Every probe is one small function that tries one escape and says whether it was contained or escaped. The
 * runner (probe.c) forks a fresh child per probe, so a probe that succeeds (an unshare, a chroot, a setns, a
 * ptrace attach) changes only that throw-away child, never the runner or the next probe.
 *
 * Safety: the weakened test runs this binary as root on the host. Every probe must therefore be
 * non-destructive: sensitive files are opened for write but never written, dangerous syscalls are issued with
 * arguments that the kernel rejects after its permission check, every mount is made on a fresh scratch
 * directory and unmounted at once, no network traffic leaves 127.0.0.1 / abstract unix sockets, resource
 * probes are bounded and clean up after themselves.
 *
 * Verdict rule used throughout, unless a probe's comment says otherwise: "contained" means the attempt failed
 * with the denial we expect (EPERM/EACCES from a capability check or seccomp, ENOENT for a device node that
 * does not exist...). Success, or a different error that shows the call got past the permission check
 * (EINVAL, ENOENT from a later path lookup, EFAULT...), is "escaped". A probe that could not run at all
 * (missing harness env) fails closed: escaped.
 */
#pragma once

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <unistd.h>

#define PROBE_DETAIL_MAX        192
#define PROBE_MAX_INHERITED_FDS 32
#define PROBE_DEFAULT_TIMEOUT_S 15

#define _cleanup_(f)   __attribute__((cleanup(f)))
#define _unused_       __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))

enum probe_verdict {
    PROBE_CONTAINED = 0,
    PROBE_ESCAPED = 1,
};

/* Written by the probe child and sent to the runner through a pipe as raw bytes (same binary on both ends).
 */
struct probe_result {
    enum probe_verdict verdict;
    char detail[PROBE_DETAIL_MAX];
};

/*
 * What the runner learned before the first probe; every probe child gets a copy through fork(). The strings
 * point into the environment and may be NULL when the harness did not set the variable.
 */
struct probe_ctx {
    pid_t main_pid;   /* the runner itself: attacking it is not an escape */
    pid_t parent_pid; /* the runner's parent; 0 when it lives outside our pid namespace */
    int inherited_fds[PROBE_MAX_INHERITED_FDS]; /* fds > 2 open when the runner started */
    size_t n_inherited_fds;
    const char *canary_path;   /* CORDON_PROBE_CANARY: host path of a 0600 file */
    const char *canary_text;   /* CORDON_PROBE_CANARY_TEXT: its content */
    const char *host_pid;      /* CORDON_PROBE_HOST_PID: a pid that only exists on the host */
    const char *host_port;     /* CORDON_PROBE_HOST_PORT: TCP port listening on the host's 127.0.0.1 */
    const char *abstract_name; /* CORDON_PROBE_ABSTRACT: abstract unix socket bound on the host */
    const char *disk_dir;      /* CORDON_PROBE_DISK_DIR: where the disk probe writes (default /workspace) */
};

typedef void (*probe_fn)(const struct probe_ctx *ctx, struct probe_result *res);

struct probe_def {
    const char *category;
    const char *name;
    probe_fn run;
    unsigned timeout_s; /* 0: PROBE_DEFAULT_TIMEOUT_S */
};

/* Defines a probe function; the name becomes the probe's name through PROBE_ENTRY. */
#define PROBE_FN(fn) static void fn(_unused_ const struct probe_ctx *ctx, struct probe_result *res)
#define PROBE_ENTRY(cat, fn)                                                                                 \
    {                                                                                                        \
        .category = (cat), .name = #fn, .run = (fn)                                                          \
    }
#define PROBE_ENTRY_T(cat, fn, t)                                                                            \
    {                                                                                                        \
        .category = (cat), .name = #fn, .run = (fn), .timeout_s = (t)                                        \
    }

/* One table per file, each ended by an all-zero entry; probe.c runs them in this order. */
extern const struct probe_def probe_defs_mount[];
extern const struct probe_def probe_defs_ns[];
extern const struct probe_def probe_defs_dev[];
extern const struct probe_def probe_defs_kernel[];
extern const struct probe_def probe_defs_surface[];
extern const struct probe_def probe_defs_net[];
extern const struct probe_def probe_defs_host[];
extern const struct probe_def probe_defs_res[];

/*
 * Appends a note ("what:detail") to res->detail. An escaped note makes the whole probe escaped; a contained
 * note never downgrades an earlier escape.
 */
void probe_note(struct probe_result *res, enum probe_verdict verdict, const char *fmt, ...) _printf_(3, 4);
#define probe_contained(res, ...) probe_note((res), PROBE_CONTAINED, __VA_ARGS__)
#define probe_escaped(res, ...)   probe_note((res), PROBE_ESCAPED, __VA_ARGS__)

/* "EPERM", or "E123" for numbers glibc has no name for. */
const char *probe_errname(int err);

/* true when err is in the 0-terminated list */
bool probe_errno_in(int err, const int *list);
#define PROBE_ERRNO_IN(err, ...) probe_errno_in((err), (const int[]){__VA_ARGS__, 0})

/*
 * The common verdict: ret >= 0 is escaped ("allowed"), err in denials is contained, any other errno is
 * escaped as "reached-kernel" (the permission check let it through and a later argument check failed).
 * Capture ret in its own statement before calling: errno must be read right after the syscall.
 */
void probe_judge(struct probe_result *res, const char *what, long ret, int err, const int *denials);
#define PROBE_JUDGE(res, what, ret, err, ...)                                                                \
    probe_judge((res), (what), (ret), (err), (const int[]){__VA_ARGS__, 0})

/* open(path, flags), judged with the given denials; the fd is closed at once, nothing is ever read or
 * written. */
void probe_judge_open(struct probe_result *res, const char *path, int flags, const int *denials);
#define PROBE_JUDGE_OPEN(res, path, flags, ...)                                                              \
    probe_judge_open((res), (path), (flags), (const int[]){__VA_ARGS__, 0})

/* Fail closed when the harness did not pass an input the probe needs. */
void probe_untested(struct probe_result *res, const char *why);

/*
 * A fresh empty directory (mkdtemp) for mount points, device nodes and symlinks, tried under $TMPDIR, /tmp,
 * /dev/shm, the disk dir, /workspace and /var/tmp. Returns 0 or -errno of the last attempt. Remove with
 * probe_scratch_remove, which also removes the entries a probe created one level deep.
 */
int probe_scratch_make(const struct probe_ctx *ctx, char *buf, size_t len);
void probe_scratch_remove(const char *dir);

/* Reads up to len-1 bytes and NUL-terminates. Returns bytes read or -errno. */
ssize_t probe_read_file(const char *path, char *buf, size_t len);
ssize_t probe_read_fd(int fd, char *buf, size_t len);

/* One line of /proc/self/mountinfo, octal escapes decoded; the strings live in the line buffer of the
 * iteration. */
struct probe_mount {
    const char *root;   /* path inside the filesystem that is mounted here */
    const char *target; /* mount point */
    const char *fstype;
    const char *superopts; /* per-superblock options, e.g. "rw,memory" for a cgroup v1 hierarchy */
};

/*
 * Calls cb for each mount until it returns non-zero, which is then returned. Returns -errno when mountinfo
 * cannot be read, 0 after the last mount.
 */
int probe_for_each_mount(int (*cb)(const struct probe_mount *m, void *userdata), void *userdata);

/* Parses a decimal pid from the env string; 0 when absent or malformed. */
pid_t probe_parse_pid(const char *s);

static inline void probe_closep(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        (void) close(*fd);
        errno = saved;
    }
}
#define _cleanup_close_ _cleanup_(probe_closep)
