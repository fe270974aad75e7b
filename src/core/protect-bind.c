/* Binding protected paths and, at run time, what could lead past a new bind
 * (protect.h). libc only: it runs in a container's setup child, in cordond's
 * child in a sandbox's mount namespace and in a VM guest's init. */
#include "protect.h"
#include "shared/fd-util.h"
#include "shared/mount-util.h"
#include "shared/strv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Protected paths: each match bound on itself (with what is mounted beneath
 * it) and made read-only, so that nothing in the sandbox can write, replace,
 * rename, unlink or link it (a mount point is busy, a bind is a separate
 * mount for link()); reads are the host's to refuse (fanotify.h). Their parents
 * are mount points first (cdn_protect_pin_parents), so that none can be moved
 * aside with a protected path in it. */
struct protect_ctx {
    int rootfd;
    cdn_protect_bound_fn bound;
    void *ud;
    struct cdn_error *err;
};

static int protect_one(void *ud, const char *path, int fd)
{
    struct protect_ctx *c = ud;
    if (c->bound) { /* at run time the agent's symlinks are there: none may steer a bind */
        struct open_how how = {.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                               .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
        _cleanup_close_ int direct = (int) syscall(SYS_openat2, c->rootfd, path, &how, sizeof how);
        struct stat a, b;
        if (direct < 0 || fstat(direct, &a) < 0 || fstat(fd, &b) < 0 || a.st_dev != b.st_dev ||
            a.st_ino != b.st_ino)
            return cdn_error_set(c->err, ELOOP,
                                 "protect %s: reached through a symlink (not followed at run time)", path);
    }
    /* Read-only before it lands, its id taken from the copy: the path is not looked up again. */
    uint64_t id = 0;
    int r = cdn_bind_on_itself(fd, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, &id);
    if (r < 0)
        return cdn_error_set(c->err, -r, "protect %s: bind: %s", path, strerror(-r));
    if (!c->bound)
        return 0;
    /* At run time the agent may have renamed the match meanwhile (swapped it with a symlink): the bind
     * went with it, and path is not what is protected. The change fails (the bind stays where it
     * went, read-only). */
    struct open_how how = {.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    _cleanup_close_ int nfd = (int) syscall(SYS_openat2, c->rootfd, path, &how, sizeof how);
    uint64_t now = 0;
    bool root = false;
    if (nfd < 0 || cdn_mount_of(nfd, "", AT_EMPTY_PATH, &now, &root) < 0 || now != id || !root)
        return cdn_error_set(c->err, ELOOP, "protect %s: moved while it was being protected", path);
    c->bound(c->ud, path, (int) id);
    return 0;
}

int cdn_protect_bind(int rootfd, const struct cdn_strv *protect, cdn_protect_bound_fn bound, void *ud,
                     struct cdn_error *err)
{
    struct protect_ctx c = {rootfd, bound, ud, err};
    int pr = cdn_protect_pin_parents(rootfd, (const char *const *) protect->v, protect->n, err);
    if (pr < 0)
        return pr;
    for (size_t i = 0; i < protect->n; i++) {
        const char *pat = protect->v[i];
        int r = cdn_protect_expand(rootfd, pat, protect_one, &c);
        if (r >= 0)
            continue;
        char field[32];
        (void) snprintf(field, sizeof field, "protect[%zu]", i);
        if (err->msg[0]) { /* protect_one said why: of which pattern */
            char msg[sizeof err->msg];
            (void) snprintf(msg, sizeof msg, "%s", err->msg);
            return cdn_error_field(err, -r, field, "%s: %s", field, msg);
        }
        if (r == -ENOENT)
            return cdn_error_field(err, ENOENT, field, "%s: '%s' does not exist in the sandbox", field, pat);
        if (r == -E2BIG)
            return cdn_error_field(err, E2BIG, field, "%s: '%s' names more than %d paths", field, pat,
                                   CDN_PROTECT_MATCH_MAX);
        return cdn_error_field(err, -r, field, "%s: '%s': %s", field, pat, strerror(-r));
    }
    return 0;
}

/* ---- at run time: what a change must not leave a way past ---- */

/* Where a reference held from before the change would lead past it: beneath each new pattern, and
 * beneath the highest ancestor of its literal part that is not a mount point yet (the binds of
 * cdn_protect_pin_parents land on a new mount there, and a working directory or descriptor in the
 * mount beneath it still reaches the match unguarded). A pattern with a wildcard before its last
 * component: its whole literal part. */
int cdn_protect_holder_roots(int rootfd, const struct cdn_strv *add, struct cdn_strv *roots)
{
    for (size_t i = 0; i < add->n; i++) {
        const char *p = add->v[i];
        if (cdn_strv_push(roots, p) < 0)
            return -ENOMEM;
        char lit[1100];
        size_t wild = strcspn(p, "*?["), cut = wild;
        while (cut > 0 && p[cut - 1] != '/')
            cut--; /* the literal directories before the first wildcard */
        (void) snprintf(lit, sizeof lit, "%.*s", (int) (p[wild] ? cut : strlen(p)), p);
        if (p[wild] && strchr(p + wild, '/') && cdn_strv_push(roots, cut > 1 ? lit : "/") < 0)
            return -ENOMEM;
        for (char *c = lit + 1; (c = strchr(c, '/')); c++) { /* "/a", "/a/b", … above the match */
            *c = 0;
            struct open_how how = {.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                                   .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
            _cleanup_close_ int fd = cdn_openat2(rootfd, lit, &how);
            uint64_t id;
            bool root = true;
            if (fd >= 0)
                (void) cdn_mount_of(fd, "", AT_EMPTY_PATH, &id, &root);
            if (!root) { /* pinned now: everything beneath it */
                if (cdn_strv_push(roots, lit) < 0)
                    return -ENOMEM;
                break;
            }
            *c = '/';
        }
    }
    return 0;
}

static bool held_beneath(const char *target, const struct cdn_strv *roots)
{
    if (target[0] != '/')
        return false;
    for (size_t i = 0; i < roots->n; i++) {
        size_t l = strlen(roots->v[i]);
        if (strcmp(roots->v[i], "/") == 0 ||
            (strncmp(target, roots->v[i], l) == 0 && (target[l] == 0 || target[l] == '/')))
            return true;
    }
    return cdn_path_is_protected(target, roots); /* the patterns' own wildcards */
}

/* A thread of the sandbox (not its init) that holds something beneath roots: its working directory
 * or root there, a descriptor, a mapping. Such a reference leads to the mount as it was before the
 * bind, writable and unguarded. Read in the sandbox's own /proc, from its root (so that the paths
 * are the sandbox's), thread by thread (a thread may have files and directory of its own). 0, or
 * -EBUSY with err naming it. A descriptor in flight in a socket is not seen (docs/events.md). */
int cdn_protect_find_holder(const struct cdn_strv *roots, pid_t skip, struct cdn_error *err)
{
    _cleanup_closedir_ DIR *procs = opendir("/proc");
    if (!procs)
        return cdn_error_set(err, errno, "open the sandbox's /proc: %m");
    char p[160], target[1024];
    for (struct dirent *de; (de = readdir(procs));) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 1 || pid == (long) getpid() || (skip > 0 && pid == (long) skip))
            continue;
        (void) snprintf(p, sizeof p, "/proc/%ld/task", pid);
        _cleanup_closedir_ DIR *tasks = opendir(p);
        for (struct dirent *te; tasks && (te = readdir(tasks));) {
            if (te->d_name[0] == '.')
                continue;
            static const char *const links[] = {"cwd", "root"};
            for (size_t i = 0; i < ELEMENTSOF(links); i++) {
                (void) snprintf(p, sizeof p, "/proc/%ld/task/%s/%s", pid, te->d_name, links[i]);
                ssize_t n = readlink(p, target, sizeof target - 1);
                if (n > 0 && (target[n] = 0, held_beneath(target, roots)))
                    return cdn_error_set(err, EBUSY, "pid %ld has its %s in %s", pid, links[i], target);
            }
            (void) snprintf(p, sizeof p, "/proc/%ld/task/%s/fd", pid, te->d_name);
            _cleanup_closedir_ DIR *fds = opendir(p);
            for (struct dirent *fe; fds && (fe = readdir(fds));) {
                if (fe->d_name[0] == '.')
                    continue;
                (void) snprintf(p, sizeof p, "/proc/%ld/task/%s/fd/%s", pid, te->d_name, fe->d_name);
                ssize_t n = readlink(p, target, sizeof target - 1);
                if (n > 0 && (target[n] = 0, held_beneath(target, roots)))
                    return cdn_error_set(err, EBUSY, "pid %ld holds %s open (fd %s)", pid, target,
                                         fe->d_name);
            }
        }
        (void) snprintf(p, sizeof p, "/proc/%ld/maps", pid);
        _cleanup_fclose_ FILE *maps = fopen(p, "re");
        char line[1400];
        while (maps && fgets(line, sizeof line, maps)) {
            char *path = strchr(line, '/');
            if (!path)
                continue;
            path[strcspn(path, "\n")] = 0;
            if (held_beneath(path, roots))
                return cdn_error_set(err, EBUSY, "pid %ld maps %s", pid, path);
        }
    }
    return 0;
}

/* A file beneath a new bind with another name (a hard link made before the change): that name is
 * on the mount beneath, writable and unguarded. */
static __thread struct cdn_error *link_err;
static int check_links(const char *path, const struct stat *st, int type, struct FTW *f)
{
    (void) f;
    if (type == FTW_F && S_ISREG(st->st_mode) && st->st_nlink > 1)
        return cdn_error_set(link_err, EBUSY, "%s has %ju names: a hard link to it lies outside", path,
                             (uintmax_t) st->st_nlink);
    return 0;
}

int cdn_protect_check_links(const char *path, struct cdn_error *err)
{
    link_err = err;
    if (nftw(path, check_links, 32, FTW_PHYS | FTW_MOUNT) != 0)
        return err->errnum ? -err->errnum : cdn_error_set(err, errno, "walk %s: %m", path);
    return 0;
}
