/* inotify_add_watch(2) made by the supervisor for a sandbox process (seccomp user
 * notification), so that no watch lands on a protected path.
 *
 * inotify needs no open: a watch on a protected directory would tell its owner the names the
 * harness reads there (the files API) and when, and the fanotify guard never sees it. Letting
 * the call go on after a look at its path would race a symlink swapped in between; so the
 * supervisor resolves the path itself (in the caller's root, from its working directory),
 * decides on the object it holds, and adds the watch to the caller's own inotify instance
 * (pidfd_getfd) on that very object: what was checked is what is watched.
 *
 * Libc and kernel headers only: cordond and cordon run (container, process tiers) and a VM
 * guest's cordon-init (its commands' listeners) share it. The caller of cdn_watch_add() runs
 * it with the caller's credentials for file access (the host: its fs uid and gid; a guest's
 * init: without its capabilities), so that a watch needs what the kernel would ask. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cdn_watch {
    int ifd;               /* the caller's inotify instance, our copy */
    int ofd;               /* the object to watch, O_PATH */
    uint32_t mask;         /* the caller's, less IN_DONT_FOLLOW (already applied) */
    uint64_t mnt_id;       /* of ofd */
    uint32_t fsuid, fsgid; /* the caller's, for file access */
    char path[1024];       /* ofd's path as the sandbox sees it */
};

/* For the notification id from pid (args: the syscall's): resolve into w. 0, or the -errno
 * the call is to fail with (-ENOENT: the caller went away meanwhile, among others). On success
 * cdn_watch_close() releases w. */
int cdn_watch_open(int listener, uint64_t id, int pid, const uint64_t args[6], struct cdn_watch *w);
/* Add the watch: the wd, or -errno. */
int cdn_watch_add(struct cdn_watch *w);
void cdn_watch_close(struct cdn_watch *w);
/* Answer notification id: the syscall returns val (error 0) or fails with error (> 0); or
 * (cont) goes on in the kernel as if never stopped. */
int cdn_watch_answer(int listener, uint64_t id, int64_t val, int error, bool cont);
