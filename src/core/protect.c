/* Expansion of protected-path patterns beneath a root (protect.h). libc
 * only: it runs in the setup child and in the lean CLI's build too. */
#include "protect.h"
#include "shared/mount-util.h"
#include "shared/strv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/openat2.h>
#include <linux/stat.h> /* struct statx: musl's headers have none */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PATTERN_MAX 1024

static bool has_wildcard(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] == '*' || s[i] == '?' || s[i] == '[')
            return true;
    return false;
}

int cdn_protect_pattern_check(const char *p, size_t idx, struct cdn_error *err)
{
    char field[32];
    (void) snprintf(field, sizeof field, "protect[%zu]", idx);
    size_t len = strlen(p);
    if (p[0] != '/' || len > PATTERN_MAX)
        return cdn_error_field(err, EINVAL, field, "%s: '%s' must be an absolute path of at most %d bytes",
                               field, p, PATTERN_MAX);
    if (strcmp(p, "/") == 0 || strcmp(p, "/**") == 0)
        return cdn_error_field(err, EINVAL, field, "%s: the whole root cannot be protected", field);
    if (len >= 3 && strcmp(p + len - 3, "/**") == 0)
        len -= 3;
    for (const char *c = p + 1; c < p + len;) {
        size_t n = strcspn(c, "/");
        if (c + n > p + len)
            n = (size_t) (p + len - c);
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return cdn_error_field(err, EINVAL, field, "%s: '%s': empty, '.' or '..' component", field, p);
        if (memmem(c, n, "**", 2))
            return cdn_error_field(err, EINVAL, field, "%s: '%s': '**' only as a trailing '/**'", field, p);
        c += n + 1;
    }
    return 0;
}

static int open_beneath(int rootfd, const char *path, int flags)
{
    struct open_how how = {.flags = (uint64_t) (flags | O_CLOEXEC),
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    int fd = (int) syscall(SYS_openat2, rootfd, path, &how, sizeof how);
    return fd < 0 ? -errno : fd;
}

struct walk {
    int rootfd;
    cdn_protect_fn fn;
    void *ud;
    int found;
};

/* prefix: the path matched so far ("" for the root); rest: what is left of
 * the pattern, without its leading slash. */
static int walk(struct walk *w, const char *prefix, const char *rest)
{
    char path[PATTERN_MAX + 512];
    while (*rest) {
        size_t n = strcspn(rest, "/");
        if (has_wildcard(rest, n))
            break;
        size_t have = strlen(prefix);
        if (have + 1 + n >= sizeof path)
            return -ENAMETOOLONG;
        if (prefix != path)
            memcpy(path, prefix, have + 1);
        path[have] = '/';
        memcpy(path + have + 1, rest, n);
        path[have + 1 + n] = 0;
        prefix = path;
        rest += n + (rest[n] == '/');
    }
    if (!*rest) {
        int fd = open_beneath(w->rootfd, prefix[0] ? prefix : "/", O_PATH);
        if (fd == -ENOENT || fd == -ENOTDIR)
            return 0;
        if (fd < 0)
            return fd;
        if (++w->found > CDN_PROTECT_MATCH_MAX) {
            (void) close(fd);
            return -E2BIG;
        }
        int r = w->fn(w->ud, prefix[0] ? prefix : "/", fd);
        (void) close(fd);
        return r < 0 ? r : 0;
    }
    size_t n = strcspn(rest, "/");
    char comp[PATTERN_MAX + 1];
    memcpy(comp, rest, n);
    comp[n] = 0;
    const char *after = rest + n + (rest[n] == '/');
    int dfd = open_beneath(w->rootfd, prefix[0] ? prefix : "/", O_RDONLY | O_DIRECTORY);
    if (dfd == -ENOENT || dfd == -ENOTDIR)
        return 0;
    if (dfd < 0)
        return dfd;
    DIR *d = fdopendir(dfd);
    if (!d) {
        int r = -errno;
        (void) close(dfd);
        return r;
    }
    char base[PATTERN_MAX + 512];
    (void) snprintf(base, sizeof base, "%s", prefix);
    int r = 0;
    for (struct dirent *de; r >= 0 && (de = readdir(d));) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            fnmatch(comp, de->d_name, FNM_PERIOD) != 0)
            continue;
        char next[PATTERN_MAX + 512];
        if ((size_t) snprintf(next, sizeof next, "%s/%s", base, de->d_name) >= sizeof next)
            r = -ENAMETOOLONG;
        else
            r = walk(w, next, after);
    }
    closedir(d);
    return r;
}

int cdn_protect_expand(int rootfd, const char *pattern, cdn_protect_fn fn, void *ud)
{
    char p[PATTERN_MAX + 1];
    size_t len = strlen(pattern);
    if (len > PATTERN_MAX || pattern[0] != '/')
        return -EINVAL;
    memcpy(p, pattern, len + 1);
    if (len >= 3 && strcmp(p + len - 3, "/**") == 0)
        p[len - 3] = 0;
    struct walk w = {.rootfd = rootfd, .fn = fn, .ud = ud};
    int r = walk(&w, "", p + 1);
    if (r < 0)
        return r;
    if (w.found == 0 && !has_wildcard(p, strlen(p)))
        return -ENOENT;
    return w.found;
}

/* Whether fd is the root of a mount (something is mounted on its path in the
 * parent mount: rename(2) and rmdir(2) of that path fail with EBUSY). */
static bool mount_root(int fd)
{
    struct statx stx;
    return syscall(SYS_statx, fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, 0, &stx) == 0 &&
           (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

struct pin {
    int rootfd;
    struct cdn_error *err;
};

/* Every ancestor of path below the root, outermost first, made a mount point: bound on itself
 * (with what is mounted beneath it) unless it is one already or lies on a read-only mount (no
 * rename there anyway). Bound before the protected paths themselves, so that their binds land
 * on these. */
static int pin_parents(void *ud, const char *path, int fd)
{
    (void) fd;
    struct pin *p = ud;
    char prefix[PATTERN_MAX + 512];
    for (const char *slash = strchr(path + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        size_t n = (size_t) (slash - path);
        if (n >= sizeof prefix)
            return -ENAMETOOLONG;
        memcpy(prefix, path, n);
        prefix[n] = 0;
        int dfd = open_beneath(p->rootfd, prefix, O_PATH | O_DIRECTORY);
        if (dfd < 0)
            return cdn_error_set(p->err, -dfd, "protect %s: its parent %s: %s", path, prefix, strerror(-dfd));
        struct statvfs vfs;
        int r = 0;
        if (!mount_root(dfd) && fstatvfs(dfd, &vfs) == 0 && !(vfs.f_flag & ST_RDONLY)) {
            if ((r = cdn_bind_on_itself(dfd, 0, NULL)) < 0)
                r = cdn_error_set(p->err, -r, "protect %s: pin its parent %s: %s", path, prefix,
                                  strerror(-r));
        }
        (void) close(dfd);
        if (r < 0)
            return r;
    }
    return 0;
}

int cdn_protect_pin_parents(int rootfd, const char *const *patterns, size_t n, struct cdn_error *err)
{
    struct pin p = {rootfd, err};
    for (size_t i = 0; i < n; i++) {
        int r = cdn_protect_expand(rootfd, patterns[i], pin_parents, &p);
        if (r < 0 && err->msg[0])
            return r;
        /* A pattern that names nothing (or too much) is the binding pass's to report, by field. */
    }
    return 0;
}

void cdn_protect_pattern_stem(const char *pattern, char *out, size_t size)
{
    (void) snprintf(out, size, "%s", pattern);
    size_t pl = strlen(out);
    if (pl >= 3 && strcmp(out + pl - 3, "/**") == 0)
        out[pl - 3] = 0;
}

bool cdn_path_is_protected(const char *path, const struct cdn_strv *protect)
{
    for (size_t i = 0; i < protect->n; i++) {
        char pat[1100];
        cdn_protect_pattern_stem(protect->v[i], pat, sizeof pat);
        /* the path itself, or any of its ancestors */
        char p[1024];
        (void) snprintf(p, sizeof p, "%s", path);
        for (;;) {
            if (fnmatch(pat, p, FNM_PATHNAME | FNM_PERIOD) == 0)
                return true;
            char *slash = strrchr(p, '/');
            if (!slash || slash == p)
                break;
            *slash = 0;
        }
    }
    return false;
}
