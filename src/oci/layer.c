/* Layer application (layer.h). Runs on the host as root, usually inside cordond or `cordon image
 * pull`, over an archive a registry or an image file handed us: every byte of it is hostile.
 *
 * Two libarchive readers share the pass: the outer one (format "raw", gzip/zstd filters) turns the
 * blob into the uncompressed tar; the inner one (format tar only) reads through read_through(),
 * which hashes every byte it passes on, so the diff_id costs no second read. Entries are written
 * by hand with *at() calls instead of archive_write_disk: that one works on paths relative to the
 * process's cwd, which a daemon cannot chdir for, and we need whiteout and xattr rules of our own.
 * Every parent directory is opened one component at a time with RESOLVE_BENEATH|
 * RESOLVE_NO_SYMLINKS, and every final component is created with a call that does not follow it
 * (O_CREAT|O_EXCL|O_NOFOLLOW, mkdirat, symlinkat, mknodat, linkat without AT_SYMLINK_FOLLOW), so
 * a symlink an earlier entry planted never redirects a later write. */
#include "oci/layer.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#define MAX_DEPTH     256         /* path components: bounds the fds cdn_layer_rm_rf_at holds open */
#define MAX_FIXUP_MEM (64u << 20) /* bytes of directory paths remembered for their mtimes */
#define MAX_OPAQUE    65536u
#define OPAQUE        ".wh..wh..opq"
#define WH_PREFIX     ".wh."

struct source {
    struct archive *outer;
    struct cdn_hasher *hash;
    char errmsg[160];
    char buf[65536];
};

struct fixup {
    char *path;
    struct timespec mtime;
};

struct applier {
    int dirfd;
    struct cdn_layer_limits lim;
    struct cdn_layer_stats st;
    const char *name; /* the entry being applied, as the tar says */
    struct cdn_error *err;
    char parent[CDN_LAYER_MAX_PATH + 1]; /* the cached parent directory's path, and its O_PATH fd */
    int parent_fd;
    struct fixup *fix; /* directories whose mtime is set at the end (children change it) */
    size_t n_fix, cap_fix, fix_mem;
    char **opaque; /* directories this layer made opaque, sorted */
    size_t n_opaque, cap_opaque;
};

static int fail(struct applier *ap, int errnum, const char *fmt, ...) _printf_(3, 4);
static int fail(struct applier *ap, int errnum, const char *fmt, ...)
{
    char why[200];
    va_list va;
    va_start(va, fmt);
    vsnprintf(why, sizeof why, fmt, va);
    va_end(va);
    return cdn_error_field(ap->err, errnum, "layer", "layer entry \"%.120s\": %s", ap->name ? ap->name : "",
                           why);
}

static ssize_t read_through(struct archive *a, void *data, const void **buf)
{
    (void) a;
    struct source *src = data;
    la_ssize_t n = archive_read_data(src->outer, src->buf, sizeof src->buf);
    if (n < 0) {
        snprintf(src->errmsg, sizeof src->errmsg, "%s", archive_error_string(src->outer));
        return -1;
    }
    cdn_hasher_update(src->hash, src->buf, (size_t) n);
    *buf = src->buf;
    return n;
}

/* "./a//b/" → "a/b"; "" for the root. Absolute names and ".." are refused, not cleaned: a layer
 * that has them was made to escape, and silently fixing it would hide that. */
static int normalize(struct applier *ap, const char *in, const char *what, char out[CDN_LAYER_MAX_PATH + 1])
{
    size_t len = strlen(in);
    if (len > CDN_LAYER_MAX_PATH)
        return fail(ap, EINVAL, "%s is %zu bytes, more than %u", what, len, CDN_LAYER_MAX_PATH);
    if (in[0] == '/')
        return fail(ap, EINVAL, "%s is an absolute path", what);
    size_t o = 0, depth = 0;
    for (const char *p = in; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return fail(ap, EINVAL, "%s has a \"..\" component", what);
        if (n > 255)
            return fail(ap, EINVAL, "%s has a component over 255 bytes", what);
        if (n > 0 && !(n == 1 && p[0] == '.')) {
            if (++depth > MAX_DEPTH)
                return fail(ap, EINVAL, "%s is more than %d directories deep", what, MAX_DEPTH);
            if (o)
                out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p += n;
        p += *p == '/';
    }
    out[o] = '\0';
    return 0;
}

static bool is_whiteout_node(const struct stat *st)
{
    return S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0);
}

static int open_beneath(int dirfd, const char *path, int flags)
{
    struct open_how how = {
        .flags = (uint64_t) (flags | O_CLOEXEC | O_NOFOLLOW),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    int fd = (int) syscall(SYS_openat2, dirfd, path[0] ? path : ".", &how, sizeof how);
    return fd < 0 ? -errno : fd;
}

/* One component of a parent path: open it, making it (root-owned 0755, as tar does for a
 * directory it was not given) when missing; a whiteout this layer put there gives way to it. */
static int step_into(struct applier *ap, int cur, const char *comp)
{
    for (int tries = 0; tries < 3; tries++) {
        int fd = open_beneath(cur, comp, O_PATH | O_DIRECTORY);
        if (fd >= 0)
            return fd;
        struct stat st;
        if (fd == -ENOENT) {
            /* fchmodat: 0755 whatever the umask; comp is the directory this thread just made */
            if (mkdirat(cur, comp, 0755) < 0 ? errno != EEXIST : fchmodat(cur, comp, 0755, 0) < 0)
                return fail(ap, errno, "creating its parent directory %s: %m", comp);
        } else if (fd == -ENOTDIR && fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                   is_whiteout_node(&st)) {
            if (unlinkat(cur, comp, 0) < 0)
                return fail(ap, errno, "replacing the whiteout %s: %m", comp);
        } else if (fd == -ELOOP || fd == -EXDEV)
            return fail(ap, EINVAL, "its parent path goes through the symlink %s", comp);
        else if (fd == -ENOTDIR && fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
            return fail(ap, EINVAL, "its parent path goes through the symlink %s", comp);
        else if (fd == -ENOTDIR)
            return fail(ap, EINVAL, "its parent path goes through the non-directory %s", comp);
        else
            return fail(ap, -fd, "opening its parent directory %s: %s", comp, strerror(-fd));
    }
    return fail(ap, EIO, "its parent directory %s keeps changing", comp);
}

/* The O_PATH fd of directory `path` inside the layer (borrowed: the cache owns it). Entries of a
 * tar come grouped by directory, so one cached parent saves most walks. */
static int open_parent(struct applier *ap, const char *path)
{
    if (ap->parent_fd >= 0 && strcmp(ap->parent, path) == 0)
        return ap->parent_fd;
    ap->parent_fd = safe_close(ap->parent_fd);
    int cur = open_beneath(ap->dirfd, "", O_PATH | O_DIRECTORY);
    if (cur < 0)
        return fail(ap, -cur, "opening the layer directory: %s", strerror(-cur));
    char buf[CDN_LAYER_MAX_PATH + 1];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        int next = step_into(ap, cur, c);
        safe_close(cur);
        if (next < 0)
            return next;
        cur = next;
    }
    snprintf(ap->parent, sizeof ap->parent, "%s", path);
    ap->parent_fd = cur;
    return cur;
}

/* Split "a/b/c" into the parent's fd ("a/b") and base ("c"). */
static int locate(struct applier *ap, char *path, const char **base)
{
    char *slash = strrchr(path, '/');
    if (!slash) {
        *base = path;
        return open_parent(ap, "");
    }
    *slash = '\0';
    int fd = open_parent(ap, path);
    *slash = '/';
    *base = slash + 1;
    return fd;
}

/* Make room for a new entry at parent/base: a whiteout or a non-directory an earlier entry made
 * is replaced (the last entry wins, as tar does); a directory stays for a directory and clashes
 * with anything else. Returns 1 if an existing directory is to be reused. */
static int make_room(struct applier *ap, int parent, const char *base, bool want_dir)
{
    struct stat st;
    if (fstatat(parent, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : fail(ap, errno, "stat: %m");
    if (S_ISDIR(st.st_mode)) {
        if (want_dir)
            return 1;
        return fail(ap, EEXIST, "an earlier entry made this path a directory");
    }
    if (want_dir && !is_whiteout_node(&st))
        return fail(ap, EEXIST, "an earlier entry made this path a non-directory");
    if (unlinkat(parent, base, 0) < 0)
        return fail(ap, errno, "replacing an earlier entry: %m");
    return 0;
}

static bool xattr_kept(const char *name)
{
    if (strncmp(name, "user.", 5) == 0)
        return strncmp(name, "user.overlay.", 13) != 0; /* only the opaque marker sets those */
    return strcmp(name, "security.capability") == 0;
}

/* After chown (which clears security.capability) and chmod. */
static int set_xattrs(struct applier *ap, struct archive_entry *e, int fd)
{
    const char *name;
    const void *value;
    size_t size, n = 0;
    archive_entry_xattr_reset(e);
    while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
        if (++n > CDN_LAYER_MAX_XATTRS)
            return fail(ap, EFBIG, "more than %u xattrs", CDN_LAYER_MAX_XATTRS);
        if (strlen(name) > 255 || size > CDN_LAYER_MAX_XATTR_SZ)
            return fail(ap, EFBIG, "xattr %.60s: name or value over the kernel's limits", name);
        if (fd < 0 || !xattr_kept(name)) {
            ap->st.xattrs_dropped++;
            continue;
        }
        if (fsetxattr(fd, name, value, size, 0) < 0)
            return fail(ap, errno, "setting xattr %.60s: %m", name);
    }
    return 0;
}

static int check_ids(struct applier *ap, struct archive_entry *e)
{
    la_int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
    if (uid < 0 || uid >= UINT32_MAX || gid < 0 || gid >= UINT32_MAX)
        return fail(ap, EINVAL, "owner %lld:%lld is not a valid uid:gid", (long long) uid, (long long) gid);
    return 0;
}

/* Owner, mode (after chown, which clears setuid/setgid), xattrs, on an fd of the entry itself. */
static int set_meta_fd(struct applier *ap, struct archive_entry *e, int fd)
{
    if (fchown(fd, (uid_t) archive_entry_uid(e), (gid_t) archive_entry_gid(e)) < 0)
        return fail(ap, errno, "chown: %m");
    if (fchmod(fd, archive_entry_perm(e) & 07777) < 0)
        return fail(ap, errno, "chmod: %m");
    return set_xattrs(ap, e, fd);
}

static struct timespec mtime_of(struct archive_entry *e)
{
    return (struct timespec){.tv_sec = archive_entry_mtime(e), .tv_nsec = archive_entry_mtime_nsec(e)};
}

static int add_fixup(struct applier *ap, const char *path, struct timespec mtime)
{
    if (ap->n_fix == ap->cap_fix) {
        size_t cap = ap->cap_fix ? ap->cap_fix * 2 : 64;
        struct fixup *f = realloc(ap->fix, cap * sizeof(*f));
        if (!f)
            return fail(ap, ENOMEM, "out of memory");
        ap->fix = f;
        ap->cap_fix = cap;
    }
    ap->fix_mem += strlen(path) + 1 + sizeof(struct fixup);
    if (ap->fix_mem > MAX_FIXUP_MEM)
        return fail(ap, EFBIG, "its directories' paths exceed %u MiB", MAX_FIXUP_MEM >> 20);
    char *p = strdup(path);
    if (!p)
        return fail(ap, ENOMEM, "out of memory");
    ap->fix[ap->n_fix++] = (struct fixup){p, mtime};
    return 0;
}

static int apply_dir(struct applier *ap, struct archive_entry *e, char *path)
{
    const char *base = ".";
    int parent = path[0] ? locate(ap, path, &base) : open_parent(ap, "");
    if (parent < 0)
        return parent;
    if (path[0]) {
        int r = make_room(ap, parent, base, true);
        if (r < 0)
            return r;
        if (r == 0 && mkdirat(parent, base, 0700) < 0)
            return fail(ap, errno, "mkdir: %m");
    }
    _cleanup_close_ int fd = openat(parent, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return fail(ap, errno, "opening the new directory: %m");
    int r = set_meta_fd(ap, e, fd);
    if (r < 0)
        return r;
    ap->st.dirs++;
    return add_fixup(ap, path, mtime_of(e));
}

static int write_data(struct applier *ap, struct archive *in, int fd)
{
    for (;;) {
        const void *buf;
        size_t size;
        la_int64_t off;
        int r = archive_read_data_block(in, &buf, &size, &off);
        if (r == ARCHIVE_EOF)
            return 0;
        if (r < ARCHIVE_WARN)
            return fail(ap, EBADMSG, "reading its data: %s", archive_error_string(in));
        for (size_t done = 0; done < size;) {
            ssize_t n = pwrite(fd, (const char *) buf + done, size - done, (off_t) (off + (la_int64_t) done));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                return fail(ap, errno, "writing: %m");
            done += (size_t) n;
        }
    }
}

static int apply_file(struct applier *ap, struct archive *in, struct archive_entry *e, char *path)
{
    la_int64_t size = archive_entry_size(e);
    if (size < 0)
        return fail(ap, EINVAL, "negative size");
    ap->st.file_bytes += (uint64_t) size;
    if (ap->lim.max_bytes && ap->st.file_bytes > ap->lim.max_bytes)
        return fail(ap, EFBIG, "the layer's files exceed the cap of %llu bytes",
                    (unsigned long long) ap->lim.max_bytes);
    const char *base;
    int parent = locate(ap, path, &base);
    if (parent < 0)
        return parent;
    int r = make_room(ap, parent, base, false);
    if (r < 0)
        return r;
    _cleanup_close_ int fd = openat(parent, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return fail(ap, errno, "creating the file: %m");
    r = write_data(ap, in, fd);
    if (r < 0)
        return r;
    if (ftruncate(fd, (off_t) size) < 0) /* a sparse file's trailing hole */
        return fail(ap, errno, "truncating: %m");
    r = set_meta_fd(ap, e, fd);
    if (r < 0)
        return r;
    struct timespec ts[2] = {mtime_of(e), mtime_of(e)};
    if (futimens(fd, ts) < 0)
        return fail(ap, errno, "setting mtime: %m");
    ap->st.files++;
    return 0;
}

/* Owner and times of a node we hold no fd of (symlink, fifo, whiteout): neither call follows base. */
static int set_meta_at(struct applier *ap, struct archive_entry *e, int parent, const char *base)
{
    if (fchownat(parent, base, (uid_t) archive_entry_uid(e), (gid_t) archive_entry_gid(e),
                 AT_SYMLINK_NOFOLLOW) < 0)
        return fail(ap, errno, "chown: %m");
    struct timespec ts[2] = {mtime_of(e), mtime_of(e)};
    if (utimensat(parent, base, ts, AT_SYMLINK_NOFOLLOW) < 0)
        return fail(ap, errno, "setting mtime: %m");
    return set_xattrs(ap, e, -1); /* user.* is not allowed on these; count what is dropped */
}

static int apply_symlink(struct applier *ap, struct archive_entry *e, char *path)
{
    const char *target = archive_entry_symlink(e);
    if (!target || !target[0] || strlen(target) > CDN_LAYER_MAX_PATH)
        return fail(ap, EINVAL, "a symlink target that is empty or over %u bytes", CDN_LAYER_MAX_PATH);
    const char *base;
    int parent = locate(ap, path, &base);
    if (parent < 0)
        return parent;
    int r = make_room(ap, parent, base, false);
    if (r < 0)
        return r;
    if (symlinkat(target, parent, base) < 0)
        return fail(ap, errno, "symlink: %m");
    ap->st.symlinks++;
    return set_meta_at(ap, e, parent, base);
}

static int apply_fifo(struct applier *ap, struct archive_entry *e, char *path)
{
    const char *base;
    int parent = locate(ap, path, &base);
    if (parent < 0)
        return parent;
    int r = make_room(ap, parent, base, false);
    if (r < 0)
        return r;
    if (mknodat(parent, base, S_IFIFO | 0600, 0) < 0)
        return fail(ap, errno, "mkfifo: %m");
    r = set_meta_at(ap, e, parent, base);
    if (r < 0)
        return r;
    /* fchmodat follows a final symlink, but base is the fifo we just made in a directory
     * only this thread writes to. */
    if (fchmodat(parent, base, archive_entry_perm(e) & 07777, 0) < 0)
        return fail(ap, errno, "chmod: %m");
    ap->st.fifos++;
    return 0;
}

/* A hard link may name only what this layer already holds (the spec's "may fail" for lower
 * layers): a link to a lower layer's file cannot exist in a directory of its own. */
static int apply_hardlink(struct applier *ap, const char *link, char *path)
{
    char tpath[CDN_LAYER_MAX_PATH + 1];
    int r = normalize(ap, link, "its hard link target", tpath);
    if (r < 0)
        return r;
    if (!tpath[0] || strcmp(tpath, path) == 0)
        return fail(ap, EINVAL, "a hard link to itself or to the layer's root");
    const char *tbase;
    int tparent = locate(ap, tpath, &tbase);
    if (tparent < 0)
        return tparent;
    _cleanup_close_ int tfd = dup(tparent); /* the cache moves on when we locate path */
    struct stat st;
    if (tfd < 0 || fstatat(tfd, tbase, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return fail(ap, EINVAL, "hard link to %.100s, which this layer does not hold", link);
    if (S_ISDIR(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
        return fail(ap, EINVAL, "hard link to %.100s, a directory or a whiteout", link);
    const char *base;
    int parent = locate(ap, path, &base);
    if (parent < 0)
        return parent;
    r = make_room(ap, parent, base, false);
    if (r < 0)
        return r;
    if (linkat(tfd, tbase, parent, base, 0) < 0)
        return fail(ap, errno, "link: %m");
    ap->st.hardlinks++;
    return 0;
}

static int cmp_path(const void *a, const void *b)
{
    return strcmp(*(char *const *) a, *(char *const *) b);
}

static bool is_opaque(struct applier *ap, const char *dir)
{
    return ap->n_opaque && bsearch(&dir, ap->opaque, ap->n_opaque, sizeof(char *), cmp_path);
}

/* dir or one of its ancestors is opaque in this layer: lower layers show nothing below it. */
static bool under_opaque(struct applier *ap, const char *dir)
{
    if (!ap->n_opaque)
        return false;
    char buf[CDN_LAYER_MAX_PATH + 1];
    snprintf(buf, sizeof buf, "%s", dir);
    for (;;) {
        if (is_opaque(ap, buf))
            return true;
        if (!buf[0])
            return false;
        char *slash = strrchr(buf, '/');
        *(slash ? slash : buf) = '\0';
    }
}

/* Plain whiteouts under an opaque directory would show in its listing (overlayfs lists a
 * directory it does not merge as is), so the marker removes those made before it. */
static int drop_whiteouts_in(struct applier *ap, int dfd)
{
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        safe_close(fd);
        return fail(ap, errno, "listing the opaque directory: %m");
    }
    _cleanup_closedir_ DIR *dir = d;
    for (struct dirent *de; (de = readdir(dir));) {
        struct stat st;
        if (de->d_type == DT_CHR && fstatat(dirfd(dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            is_whiteout_node(&st) && unlinkat(dirfd(dir), de->d_name, 0) < 0)
            return fail(ap, errno, "removing the whiteout %.60s: %m", de->d_name);
    }
    return 0;
}

static int apply_opaque(struct applier *ap, char *dirpath)
{
    if (is_opaque(ap, dirpath))
        return 0;
    int parent = open_parent(ap, dirpath);
    if (parent < 0)
        return parent;
    _cleanup_close_ int fd = openat(parent, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return fail(ap, errno, "opening its directory: %m");
    if (fsetxattr(fd, "trusted.overlay.opaque", "y", 1, 0) < 0 ||
        fsetxattr(fd, "user.overlay.opaque", "y", 1, 0) < 0)
        return fail(ap, errno, "marking the directory opaque: %m");
    int r = drop_whiteouts_in(ap, fd);
    if (r < 0)
        return r;
    if (ap->n_opaque >= MAX_OPAQUE)
        return fail(ap, EFBIG, "more than %u opaque directories", MAX_OPAQUE);
    if (ap->n_opaque == ap->cap_opaque) {
        size_t cap = ap->cap_opaque ? ap->cap_opaque * 2 : 16;
        char **o = realloc(ap->opaque, cap * sizeof(*o));
        if (!o)
            return fail(ap, ENOMEM, "out of memory");
        ap->opaque = o;
        ap->cap_opaque = cap;
    }
    char *copy = strdup(dirpath);
    if (!copy)
        return fail(ap, ENOMEM, "out of memory");
    size_t i = ap->n_opaque; /* insertion keeps the array sorted for is_opaque's bsearch */
    while (i > 0 && strcmp(ap->opaque[i - 1], copy) > 0) {
        ap->opaque[i] = ap->opaque[i - 1];
        i--;
    }
    ap->opaque[i] = copy;
    ap->n_opaque++;
    ap->st.opaque_dirs++;
    return 0;
}

/* ".wh.NAME" in DIR: NAME is deleted from the layers below. An entry this layer holds at NAME
 * stays (whiteouts apply to lower layers only), and so does a later one (it replaces the node). */
static int apply_whiteout(struct applier *ap, struct archive_entry *e, char *path, char *base)
{
    char *dir = path;
    if (base == path)
        dir = "";
    else
        base[-1] = '\0';
    if (strcmp(base, OPAQUE) == 0)
        return apply_opaque(ap, dir);
    if (strncmp(base, WH_PREFIX WH_PREFIX, 8) == 0)
        return fail(ap, EINVAL, "a whiteout of a name that starts with .wh.");
    const char *name = base + STRLEN(WH_PREFIX);
    if (!name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return fail(ap, EINVAL, "a whiteout without a name, or of . or ..");
    int parent = open_parent(ap, dir); /* the entry implies its directory, opaque or not */
    if (parent < 0 || under_opaque(ap, dir))
        return parent < 0 ? parent : 0;
    struct stat st;
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return 0;
    if (mknodat(parent, name, S_IFCHR | 0, makedev(0, 0)) < 0)
        return fail(ap, errno, "making the whiteout: %m");
    ap->st.whiteouts++;
    if (fchownat(parent, name, (uid_t) archive_entry_uid(e), (gid_t) archive_entry_gid(e),
                 AT_SYMLINK_NOFOLLOW) < 0)
        return fail(ap, errno, "chown of the whiteout: %m");
    return 0;
}

static int apply_entry(struct applier *ap, struct archive *in, struct archive_entry *e)
{
    char path[CDN_LAYER_MAX_PATH + 1];
    int r = normalize(ap, ap->name, "its name", path);
    if (r < 0)
        return r;
    r = check_ids(ap, e);
    if (r < 0)
        return r;
    if (strncmp(path, WH_PREFIX WH_PREFIX, 8) == 0 && strcmp(path, OPAQUE) != 0)
        return 0; /* aufs bookkeeping at the root (.wh..wh.plnk/, .wh..wh.aufs): not content */
    char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strncmp(base, WH_PREFIX, STRLEN(WH_PREFIX)) == 0)
        return apply_whiteout(ap, e, path, base);
    const char *link = archive_entry_hardlink(e);
    if (!path[0] && (link || archive_entry_filetype(e) != AE_IFDIR))
        return fail(ap, EINVAL, "the layer's root is not a directory");
    if (link)
        return apply_hardlink(ap, link, path);
    switch (archive_entry_filetype(e)) {
    case AE_IFDIR:
        return apply_dir(ap, e, path);
    case AE_IFREG:
        return apply_file(ap, in, e, path);
    case AE_IFLNK:
        return apply_symlink(ap, e, path);
    case AE_IFIFO:
        return apply_fifo(ap, e, path);
    case AE_IFCHR:
    case AE_IFBLK:
        return fail(ap, EINVAL, "a device node (%s %u:%u) is refused in a layer",
                    archive_entry_filetype(e) == AE_IFCHR ? "char" : "block",
                    (unsigned) archive_entry_rdevmajor(e), (unsigned) archive_entry_rdevminor(e));
    default:
        return fail(ap, EINVAL, "a file type (0%o) a layer may not hold",
                    (unsigned) archive_entry_filetype(e));
    }
}

/* Directory mtimes last: creating their children changed them. */
static int apply_fixups(struct applier *ap)
{
    for (size_t i = ap->n_fix; i-- > 0;) {
        ap->name = ap->fix[i].path;
        _cleanup_close_ int fd = open_beneath(ap->dirfd, ap->fix[i].path, O_RDONLY | O_DIRECTORY);
        if (fd < 0)
            return fail(ap, -fd, "reopening the directory: %s", strerror(-fd));
        struct timespec ts[2] = {ap->fix[i].mtime, ap->fix[i].mtime};
        if (futimens(fd, ts) < 0)
            return fail(ap, errno, "setting mtime: %m");
    }
    return 0;
}

static void applier_done(struct applier *ap)
{
    safe_close(ap->parent_fd);
    for (size_t i = 0; i < ap->n_fix; i++)
        free(ap->fix[i].path);
    free(ap->fix);
    for (size_t i = 0; i < ap->n_opaque; i++)
        free(ap->opaque[i]);
    free(ap->opaque);
}

static int apply_entries(struct applier *ap, struct archive *in, struct source *src)
{
    for (;;) {
        struct archive_entry *e;
        ap->name = NULL;
        int r = archive_read_next_header(in, &e);
        if (r == ARCHIVE_EOF)
            return ap->st.entries
                       ? 0
                       : cdn_error_field(ap->err, EBADMSG, "layer", "layer: a tar without entries");
        if (r < ARCHIVE_WARN)
            return cdn_error_field(ap->err, EBADMSG, "layer", "layer: not a valid tar after %llu entries: %s",
                                   (unsigned long long) ap->st.entries,
                                   src->errmsg[0] ? src->errmsg : archive_error_string(in));
        ap->name = archive_entry_pathname(e);
        if (!ap->name)
            return fail(ap, EINVAL, "a name that cannot be read");
        if (++ap->st.entries > ap->lim.max_entries)
            return fail(ap, EFBIG, "more than %llu entries", (unsigned long long) ap->lim.max_entries);
        r = apply_entry(ap, in, e);
        if (r < 0)
            return r;
    }
}

static void archive_freep(struct archive **a)
{
    if (*a)
        archive_read_free(*a);
}

static int open_outer(int blob_fd, struct archive **ret, struct cdn_error *err)
{
    _cleanup_(archive_freep) struct archive *a = archive_read_new();
    if (!a)
        return cdn_error_set(err, ENOMEM, "layer: out of memory");
    /* Only the two compressions OCI names, built in (ARCHIVE_WARN would mean an external program). */
    if (archive_read_support_filter_gzip(a) != ARCHIVE_OK ||
        archive_read_support_filter_zstd(a) != ARCHIVE_OK || archive_read_support_format_raw(a) != ARCHIVE_OK)
        return cdn_error_set(err, ENOTSUP, "layer: libarchive lacks built-in gzip or zstd");
    if (archive_read_open_fd(a, blob_fd, 65536) != ARCHIVE_OK) /* an empty blob ends here */
        return cdn_error_field(err, EBADMSG, "layer", "layer: not a tar, gzip or zstd stream (%s)",
                               archive_error_string(a));
    struct archive_entry *e;
    int r = archive_read_next_header(a, &e);
    if (r == ARCHIVE_EOF)
        return cdn_error_field(err, EBADMSG, "layer", "layer: the blob is empty");
    if (r < ARCHIVE_WARN)
        return cdn_error_field(err, EBADMSG, "layer", "layer: %s", archive_error_string(a));
    *ret = TAKE_PTR(a);
    return 0;
}

/* The bytes after the tar's end count toward the diff_id; bounded, since a few KiB of zeros
 * compress into almost nothing and would otherwise be a free CPU sink. */
static int drain(struct source *src, uint64_t *tail, struct cdn_error *err)
{
    for (;;) {
        la_ssize_t n = archive_read_data(src->outer, src->buf, sizeof src->buf);
        if (n < 0)
            return cdn_error_field(err, EBADMSG, "layer", "layer: %s", archive_error_string(src->outer));
        if (n == 0)
            return 0;
        cdn_hasher_update(src->hash, src->buf, (size_t) n);
        *tail += (uint64_t) n;
        if (*tail > CDN_LAYER_MAX_TRAILER)
            return cdn_error_field(err, EFBIG, "layer", "layer: more than %u bytes after the tar's end",
                                   CDN_LAYER_MAX_TRAILER);
    }
}

int cdn_layer_apply(int blob_fd, int dirfd, const struct cdn_layer_limits *limits,
                    char diff_id[CDN_DIGEST_MAX], struct cdn_layer_stats *stats, struct cdn_error *err)
{
    _cleanup_free_ struct source *src = calloc(1, sizeof(*src));
    _cleanup_hasher_ struct cdn_hasher *hash = NULL;
    if (!src || cdn_hasher_new("sha256", &hash) < 0)
        return cdn_error_set(err, ENOMEM, "layer: out of memory");
    src->hash = hash;
    _cleanup_(archive_freep) struct archive *outer = NULL;
    int r = open_outer(blob_fd, &outer, err);
    if (r < 0)
        return r;
    src->outer = outer;
    _cleanup_(archive_freep) struct archive *in = archive_read_new();
    if (!in || archive_read_support_format_tar(in) != ARCHIVE_OK)
        return cdn_error_set(err, ENOMEM, "layer: out of memory");
    if (archive_read_open(in, src, NULL, read_through, NULL) != ARCHIVE_OK)
        return cdn_error_field(err, EBADMSG, "layer", "layer: not a valid tar (%s)",
                               src->errmsg[0] ? src->errmsg : archive_error_string(in));
    struct applier ap = {.dirfd = dirfd, .err = err, .parent_fd = -EBADF};
    if (limits)
        ap.lim = *limits;
    if (!ap.lim.max_entries)
        ap.lim.max_entries = CDN_LAYER_MAX_ENTRIES;
    r = apply_entries(&ap, in, src);
    if (r >= 0)
        r = apply_fixups(&ap);
    applier_done(&ap);
    if (r < 0)
        return r;
    uint64_t tail = 0;
    r = drain(src, &tail, err);
    if (r < 0)
        return r;
    ap.st.tar_bytes = cdn_hasher_bytes(hash);
    cdn_hasher_digest(hash, diff_id);
    if (stats)
        *stats = ap.st;
    return 0;
}

int cdn_layer_rm_rf_at(int at_fd, const char *name)
{
    if (unlinkat(at_fd, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR)
        return -errno;
    int fd = openat(at_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        safe_close(fd);
        return -errno;
    }
    _cleanup_closedir_ DIR *dir = d;
    int r = 0;
    for (struct dirent *de; (de = readdir(dir));) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        int q = cdn_layer_rm_rf_at(dirfd(dir), de->d_name);
        if (q < 0 && r == 0)
            r = q;
    }
    if (unlinkat(at_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
        r = -errno;
    return r;
}
