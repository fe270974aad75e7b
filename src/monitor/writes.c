/* Classify the reported path writes (writes.h). */
#include "writes.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shared/sysdirs.h"

bool cdn_path_normalize(const char *base, const char *rel, char *out, size_t size)
{
    char tmp[2048];
    int n =
        rel[0] == '/' ? snprintf(tmp, sizeof tmp, "%s", rel) : snprintf(tmp, sizeof tmp, "%s/%s", base, rel);
    if (n < 0 || (size_t) n >= sizeof tmp || size < 2)
        return false;
    size_t len = 0;
    out[0] = 0;
    for (char *save = NULL, *c = strtok_r(tmp, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (strcmp(c, ".") == 0)
            continue;
        if (strcmp(c, "..") == 0) {
            while (len > 0 && out[len - 1] != '/')
                len--;
            if (len > 0)
                len--;
            out[len] = 0;
            continue;
        }
        size_t k = strlen(c);
        if (len + 1 + k + 1 > size)
            return false;
        out[len++] = '/';
        memcpy(out + len, c, k + 1);
        len += k;
    }
    if (len == 0)
        memcpy(out, "/", 2);
    return true;
}

bool cdn_path_is_system(const char *path)
{
    /* Python caching bytecode next to a system module is routine, not tampering. */
    if (strstr(path, "/__pycache__/"))
        return false;
    return cdn_path_in_system(path);
}

/* Whether path is a proper parent of what pattern (without a trailing slash-star-star) names:
 * each of its components matches the pattern's component at that depth, and the pattern has more. */
static bool parent_of_pattern(const char *path, const char *pattern)
{
    char p[1024], pat[1100];
    (void) snprintf(p, sizeof p, "%s", path);
    (void) snprintf(pat, sizeof pat, "%s", pattern);
    char *ps = NULL, *qs = NULL;
    char *pc = strtok_r(p, "/", &ps), *qc = strtok_r(pat, "/", &qs);
    for (; pc && qc; pc = strtok_r(NULL, "/", &ps), qc = strtok_r(NULL, "/", &qs))
        if (fnmatch(qc, pc, FNM_PERIOD) != 0)
            return false;
    return !pc && qc && path[0] == '/' && path[1];
}

bool cdn_write_is_protected(const struct cdn_write_attempt *w, int i, const struct cdn_strv *protect)
{
    if (cdn_path_is_protected(w->path[i], protect))
        return true;
    /* Renaming or removing a parent moves what is protected out of its place (the kernel refuses:
     * the parents are mount points, rootfs.c), so the attempt is one on the protected path. */
    if (strncmp(w->op, "rename", 6) != 0 && strncmp(w->op, "unlink", 6) != 0)
        return false;
    for (size_t k = 0; k < protect->n; k++) {
        char pat[1100];
        cdn_protect_pattern_stem(protect->v[k], pat, sizeof pat);
        if (parent_of_pattern(w->path[i], pat))
            return true;
    }
    return false;
}

/* A NUL-terminated string at addr in pid's memory, page by page. */
static int read_string(int pid, uint64_t addr, char *buf, size_t size)
{
    size_t got = 0;
    while (got + 1 < size) {
        size_t page = 4096 - ((addr + got) & 4095), want = size - 1 - got < page ? size - 1 - got : page;
        struct iovec l = {buf + got, want}, r = {(void *) (uintptr_t) (addr + got), want};
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n <= 0)
            return -errno;
        char *nul = memchr(buf + got, 0, (size_t) n);
        if (nul)
            return 0;
        got += (size_t) n;
    }
    buf[size - 1] = 0;
    return -ENAMETOOLONG;
}

/* The directory a path argument is relative to: the cwd, or dirfd's. */
static int base_dir(int pid, int dirfd, char *buf, size_t size)
{
    char p[64];
    if (dirfd == AT_FDCWD)
        (void) snprintf(p, sizeof p, "/proc/%d/cwd", pid);
    else
        (void) snprintf(p, sizeof p, "/proc/%d/fd/%d", pid, dirfd);
    ssize_t n = readlink(p, buf, size - 1);
    if (n < 0)
        return -errno;
    buf[n] = 0;
    return 0;
}

static int add_path(const struct cdn_seccomp_event *ev, struct cdn_write_attempt *out, int dirfd,
                    uint64_t addr)
{
    char rel[1024], base[1024] = "/";
    int r = read_string(ev->pid, addr, rel, sizeof rel);
    if (r < 0)
        return r;
    if (rel[0] != '/' && (r = base_dir(ev->pid, dirfd, base, sizeof base)) < 0)
        return r;
    if (!cdn_path_normalize(base, rel, out->path[out->n], sizeof out->path[0]))
        return -ENAMETOOLONG;
    out->n++;
    return 0;
}

int cdn_write_attempt_read(const struct cdn_seccomp_event *ev, struct cdn_write_attempt *out)
{
    const uint64_t *a = ev->args;
    out->n = 0;
    out->op = "?";
    int r = 0;
    switch (ev->nr) {
#ifdef __NR_open
    case __NR_open:
        out->op = "open";
        return add_path(ev, out, AT_FDCWD, a[0]);
#endif
#ifdef __NR_creat
    case __NR_creat:
        out->op = "creat";
        return add_path(ev, out, AT_FDCWD, a[0]);
#endif
#ifdef __NR_unlink
    case __NR_unlink:
        out->op = "unlink";
        return add_path(ev, out, AT_FDCWD, a[0]);
#endif
#ifdef __NR_chmod
    case __NR_chmod:
        out->op = "chmod";
        return add_path(ev, out, AT_FDCWD, a[0]);
#endif
#ifdef __NR_rename
    case __NR_rename:
        out->op = "rename";
        if ((r = add_path(ev, out, AT_FDCWD, a[0])) < 0)
            return r;
        return add_path(ev, out, AT_FDCWD, a[1]);
#endif
#ifdef __NR_link
    case __NR_link:
        out->op = "link";
        return add_path(ev, out, AT_FDCWD, a[1]);
#endif
#ifdef __NR_symlink
    case __NR_symlink:
        out->op = "symlink";
        return add_path(ev, out, AT_FDCWD, a[1]);
#endif
#ifdef __NR_fchmodat2
    case __NR_fchmodat2:
        out->op = "fchmodat2";
        return add_path(ev, out, (int) a[0], a[1]);
#endif
    case __NR_truncate:
        out->op = "truncate";
        return add_path(ev, out, AT_FDCWD, a[0]);
    case __NR_openat:
        out->op = "openat";
        return add_path(ev, out, (int) a[0], a[1]);
    case __NR_openat2: {
        struct open_how how = {0};
        struct iovec l = {&how, sizeof how}, rv = {(void *) (uintptr_t) a[2], sizeof how};
        if (a[3] < sizeof how || process_vm_readv(ev->pid, &l, 1, &rv, 1, 0) != (ssize_t) sizeof how)
            return -EFAULT;
        if (!(how.flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)))
            return 0; /* a read: nothing written */
        out->op = "openat2";
        return add_path(ev, out, (int) a[0], a[1]);
    }
    case __NR_unlinkat:
        out->op = "unlinkat";
        return add_path(ev, out, (int) a[0], a[1]);
    case __NR_fchmodat:
        out->op = "fchmodat";
        return add_path(ev, out, (int) a[0], a[1]);
    case __NR_renameat:
    case __NR_renameat2:
        out->op = ev->nr == __NR_renameat ? "renameat" : "renameat2";
        if ((r = add_path(ev, out, (int) a[0], a[1])) < 0)
            return r;
        return add_path(ev, out, (int) a[2], a[3]);
    case __NR_linkat:
        out->op = "linkat";
        return add_path(ev, out, (int) a[2], a[3]);
    case __NR_symlinkat:
        out->op = "symlinkat";
        return add_path(ev, out, (int) a[1], a[2]);
    default:
        return 0;
    }
}
