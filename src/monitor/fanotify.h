/* The file-access guard of the monitor: fanotify permission events on the
 * mounts of a sandbox's protected paths and masked kernel files. The host
 * (cordond, cordon run) holds a fanotify group, marks those mounts once the
 * sandbox's init runs and before any command does, and answers each open:
 * a sandbox process is refused (EPERM) and that is a violation; init (file
 * operations of the API) and, in cordond, a verifier step are let through.
 *
 * Marks are per mount, so every path to a protected file — symlinks,
 * /proc/self/root, /proc/PID/cwd, /proc/PID/fd of another process, a hard link
 * (which cannot cross a mount) — goes through the marked mount. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/spec.h"
#include "shared/error.h"

enum cdn_guard_kind {
    CDN_MARK_PROTECT, /* a protected path, or a mount beneath one */
    CDN_MARK_KERNEL,  /* a masked kernel file (/proc/kcore, /proc/kallsyms, …) */
};

struct cdn_fanotify_mark {
    int mnt_id;
    enum cdn_guard_kind kind;
    char *path; /* a match of a protect pattern (owned), as the sandbox sees it; NULL for the rest */
};

struct cdn_fanotify_marks {
    struct cdn_fanotify_mark *v;
    size_t n, cap;
};

/* A new group: permission events, non-blocking, close-on-exec. -errno. */
int cdn_fanotify_open(void);

/* Mark the sandbox whose init is init_pid in group: the mounts of its
 * protected paths (each match of each pattern, and every mount beneath one)
 * and, with kernel, its masked kernel files. Appends what it marked to out.
 * A match that is not a mount of its own (its setup did not bind it) is an
 * error: marking its parent mount would guard far more than asked. */
int cdn_fanotify_mark_sandbox(int group, pid_t init_pid, const struct cdn_strv *protect, bool kernel,
                              struct cdn_fanotify_marks *out, struct cdn_error *err);
/* The mounts of pid's mount namespace (its /proc/PID/mountinfo; pid 1 from inside a sandbox's): id,
 * parent id, mount point (unescaped), read-only. cdn_mounts_free() the array. -errno. */
struct cdn_mount_info {
    int id, parent;
    bool ro;
    char *mp;
};
int cdn_mounts_read(pid_t pid, struct cdn_mount_info **ret, size_t *ret_n);
void cdn_mounts_free(struct cdn_mount_info *v, size_t n);
/* A mount bound for a protected path while the sandbox runs (tier.h protect), as the sandbox sees it. */
struct cdn_protect_mount {
    int mnt_id;
    char path[256];
};
/* Mark those mounts (each still the one at its path: else -ESTALE) and every mount beneath them, as
 * cdn_fanotify_mark_sandbox does, without expanding a pattern again. Appends to out. */
int cdn_fanotify_mark_mounts(int group, pid_t init_pid, const struct cdn_protect_mount *m, size_t n_m,
                             struct cdn_fanotify_marks *out, struct cdn_error *err);
/* The marks of m that are ids[] or mounts beneath one of them (the sandbox's mounts now), into out,
 * but for a mount whose mount point keep's patterns still protect (a protected path's bind that a
 * bind of ids[] copied), and what lies beneath it. -errno. */
int cdn_fanotify_mounts_beneath(pid_t init_pid, const struct cdn_fanotify_marks *m,
                                const struct cdn_strv *keep, const int *ids, size_t n_ids,
                                struct cdn_fanotify_marks *out);
/* Remove from group the marks of the mounts in m (as the sandbox of init_pid has them now; one
 * that is gone has lost its mark with it). */
int cdn_fanotify_unmark(int group, pid_t init_pid, const struct cdn_fanotify_marks *m, struct cdn_error *err);
/* Append one (nothing if mnt_id is in m already; path copied). -ENOMEM. */
int cdn_fanotify_marks_add(struct cdn_fanotify_marks *m, int mnt_id, enum cdn_guard_kind kind,
                           const char *path);
const struct cdn_fanotify_mark *cdn_fanotify_marks_find(const struct cdn_fanotify_marks *m, int mnt_id);
void cdn_fanotify_marks_free(struct cdn_fanotify_marks *m);
/* Whether each protected path marked for the sandbox of init_pid still leads (as a command would
 * follow it) to the root of the mount marked for it: 0, or -ESTALE naming the first that does not
 * in err (moved aside with a parent from outside the sandbox, which cannot rename them itself). */
int cdn_fanotify_check_moved(pid_t init_pid, const struct cdn_fanotify_marks *m, struct cdn_error *err);

/* One permission event: the opener is blocked until it is answered. path (as
 * the opener's root sees it) and cmdline are filled by cdn_fanotify_describe(),
 * while it waits, for a caller that records it. */
struct cdn_fanotify_event {
    int fd; /* the file being opened, ours until the answer */
    int pid;
    int mnt_id;
    bool exec; /* opened to execute */
    char path[1024];
    char cmdline[256];
};

/* Read pending events into ev[0..max); returns how many (0: none), -errno. */
int cdn_fanotify_read(int group, struct cdn_fanotify_event *ev, size_t max);
/* The path and command line of ev, read while its opener waits. */
void cdn_fanotify_describe(struct cdn_fanotify_event *ev);
/* Answer (allow or refuse with EPERM) and close ev->fd. */
int cdn_fanotify_answer(int group, struct cdn_fanotify_event *ev, bool allow);
/* Whether pid lives in the pid namespace of init_pid (a sandbox process). */
bool cdn_pid_in_sandbox(int pid, pid_t init_pid);
