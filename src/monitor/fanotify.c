/* fanotify for protected paths and masked kernel files (fanotify.h). */
#include "fanotify.h"
#include "core/protect.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <linux/stat.h> /* struct statx: musl (the lean CLI) has no statx() */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The file masks of the container tier (rootfs.c); directories are masked by
 * an empty read-only directory, which has nothing to open. */
static const char *const kernel_files[] = {
    "/proc/kcore",       "/proc/kallsyms",      "/proc/keys",        "/proc/timer_list",
    "/proc/sched_debug", "/proc/latency_stats", "/proc/timer_stats", "/proc/sysrq-trigger",
};

#define PROTECT_MASK (FAN_OPEN_PERM | FAN_OPEN_EXEC_PERM | FAN_ONDIR)

int cdn_fanotify_open(void)
{
    int fd =
        fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK, O_RDONLY | O_LARGEFILE | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

static int add(struct cdn_fanotify_marks *m, int mnt_id, enum cdn_guard_kind kind, const char *path);

int cdn_fanotify_marks_add(struct cdn_fanotify_marks *m, int mnt_id, enum cdn_guard_kind kind,
                           const char *path)
{
    return add(m, mnt_id, kind, path);
}

static int add(struct cdn_fanotify_marks *m, int mnt_id, enum cdn_guard_kind kind, const char *path)
{
    if (cdn_fanotify_marks_find(m, mnt_id))
        return 0;
    char *copy = path ? strdup(path) : NULL;
    if (path && !copy)
        return -ENOMEM;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        struct cdn_fanotify_mark *v = realloc(m->v, cap * sizeof *v);
        if (!v) {
            free(copy);
            return -ENOMEM;
        }
        m->v = v, m->cap = cap;
    }
    m->v[m->n++] = (struct cdn_fanotify_mark){mnt_id, kind, copy};
    return 0;
}

const struct cdn_fanotify_mark *cdn_fanotify_marks_find(const struct cdn_fanotify_marks *m, int mnt_id)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i].mnt_id == mnt_id)
            return &m->v[i];
    return NULL;
}

void cdn_fanotify_marks_free(struct cdn_fanotify_marks *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->v[i].path);
    free(m->v);
    *m = (struct cdn_fanotify_marks){0};
}

/* The mount id of fd, and whether fd is the root of that mount. */
static int mount_of(int fd, int *mnt_id, bool *root)
{
    uint64_t id;
    int r = cdn_mount_of(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, &id, root);
    if (r == 0)
        *mnt_id = (int) id;
    return r;
}

static int mark_fd(int group, int fd, uint64_t mask)
{
    char p[64];
    (void) snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    return fanotify_mark(group, FAN_MARK_ADD | FAN_MARK_MOUNT, mask, AT_FDCWD, p) < 0 ? -errno : 0;
}

/* The root of init_pid (O_PATH), or -errno with err set. */
static int open_root(pid_t init_pid, struct cdn_error *err)
{
    char p[64];
    (void) snprintf(p, sizeof p, "/proc/%d/root", (int) init_pid);
    int fd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
    return fd < 0 ? cdn_error_set(err, errno, "open %s: %m", p) : fd;
}

static int open_beneath(int rootfd, const char *path)
{
    struct open_how how = {.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS};
    int fd = (int) syscall(SYS_openat2, rootfd, path, &how, sizeof how);
    return fd < 0 ? -errno : fd;
}

struct mark_ctx {
    int group;
    struct cdn_fanotify_marks *out;
    struct cdn_error *err;
};

static int mark_protected(void *ud, const char *path, int fd)
{
    struct mark_ctx *c = ud;
    int id = -1;
    bool root = false;
    int r = mount_of(fd, &id, &root);
    if (r < 0)
        return cdn_error_set(c->err, r, "protect %s: statx: %s", path, strerror(-r));
    if (!root)
        return cdn_error_set(c->err, EINVAL, "protect %s: not bound on itself in the sandbox", path);
    if ((r = mark_fd(c->group, fd, PROTECT_MASK)) < 0)
        return cdn_error_set(c->err, r, "protect %s: fanotify_mark: %s", path, strerror(-r));
    if ((r = add(c->out, id, CDN_MARK_PROTECT, path)) < 0)
        return cdn_error_set(c->err, r, "protect %s: out of memory", path);
    return 0;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
    char *w = s;
    for (char *r = s; *r;) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' &&
            r[3] <= '7') {
            *w++ = (char) ((r[1] - '0') << 6 | (r[2] - '0') << 3 | (r[3] - '0'));
            r += 4;
        } else
            *w++ = *r++;
    }
    *w = 0;
}

void cdn_mounts_free(struct cdn_mount_info *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].mp);
    free(v);
}

int cdn_mounts_read(pid_t pid, struct cdn_mount_info **ret, size_t *ret_n)
{
    char p[64];
    (void) snprintf(p, sizeof p, "/proc/%d/mountinfo", (int) pid);
    _cleanup_fclose_ FILE *f = fopen(p, "re");
    if (!f)
        return -errno;
    struct cdn_mount_info *v = NULL;
    size_t n = 0, cap = 0;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        int id, parent;
        char mp[4096], opts[256];
        if (sscanf(line, "%d %d %*s %*s %4095s %255s", &id, &parent, mp, opts) != 4)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            struct cdn_mount_info *nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                cdn_mounts_free(v, n);
                return -ENOMEM;
            }
            v = nv;
        }
        unescape(mp);
        v[n] = (struct cdn_mount_info){.id = id,
                                       .parent = parent,
                                       .mp = strdup(mp),
                                       .ro = strncmp(opts, "ro", 2) == 0 && (opts[2] == ',' || !opts[2])};
        if (!v[n++].mp) {
            cdn_mounts_free(v, n);
            return -ENOMEM;
        }
    }
    *ret = v;
    *ret_n = n;
    return 0;
}

/* Every mount beneath a protected one gets the same mark: opens through it do
 * not pass the protected mount. */
static int mark_submounts(int group, pid_t init_pid, int rootfd, struct cdn_fanotify_marks *out, size_t first,
                          struct cdn_error *err)
{
    struct cdn_mount_info *v = NULL;
    size_t n = 0;
    int r = cdn_mounts_read(init_pid, &v, &n);
    if (r < 0)
        return cdn_error_set(err, -r, "read the mounts of init %d: %s", (int) init_pid, strerror(-r));
    /* Until nothing changes: a mount is guarded when its parent is. */
    for (bool more = true; more;) {
        more = false;
        for (size_t i = 0; r == 0 && i < n; i++) {
            const struct cdn_fanotify_mark *pm = cdn_fanotify_marks_find(out, v[i].parent);
            if (!pm || pm - out->v < (ptrdiff_t) first || pm->kind != CDN_MARK_PROTECT ||
                cdn_fanotify_marks_find(out, v[i].id))
                continue;
            int fd = open_beneath(rootfd, v[i].mp);
            int id = -1;
            bool root = false;
            if (fd >= 0 && mount_of(fd, &id, &root) == 0 && id == v[i].id && root) {
                if ((r = mark_fd(group, fd, PROTECT_MASK)) == 0)
                    r = add(out, v[i].id, CDN_MARK_PROTECT, NULL);
                more = true;
            } else if (fd >= 0 && root) { /* covered by a mount stacked on it: the walk goes on */
                r = add(out, v[i].id, CDN_MARK_PROTECT, NULL);
                more = true;
            }
            if (fd >= 0)
                (void) close(fd);
            if (r < 0)
                (void) cdn_error_set(err, r, "protect the mount on %s: %s", v[i].mp, strerror(-r));
        }
    }
    cdn_mounts_free(v, n);
    return r;
}

int cdn_fanotify_mark_mounts(int group, pid_t init_pid, const struct cdn_protect_mount *m, size_t n_m,
                             struct cdn_fanotify_marks *out, struct cdn_error *err)
{
    _cleanup_close_ int rootfd = open_root(init_pid, err);
    if (rootfd < 0)
        return rootfd;
    size_t first = out->n;
    for (size_t i = 0; i < n_m; i++) {
        _cleanup_close_ int fd = open_beneath(rootfd, m[i].path);
        int id = -1;
        bool root = false, covered = false;
        if (fd < 0 || mount_of(fd, &id, &root) < 0 || id != m[i].mnt_id || !root) {
            /* a later bind of the same change, above it, copied it: marked with what lies beneath that */
            for (size_t k = i + 1; k < n_m && !covered; k++) {
                size_t l = strlen(m[k].path);
                covered = strncmp(m[i].path, m[k].path, l) == 0 && (m[i].path[l] == '/' || !m[i].path[l]);
            }
            if (covered)
                continue;
            return cdn_error_set(err, ESTALE, "protect %s: not the mount bound there a moment ago",
                                 m[i].path);
        }
        int r = mark_fd(group, fd, PROTECT_MASK);
        if (r < 0 || (r = add(out, id, CDN_MARK_PROTECT, m[i].path)) < 0)
            return cdn_error_set(err, -r, "protect %s: fanotify_mark: %s", m[i].path, strerror(-r));
    }
    return out->n > first ? mark_submounts(group, init_pid, rootfd, out, first, err) : 0;
}

int cdn_fanotify_mounts_beneath(pid_t init_pid, const struct cdn_fanotify_marks *m,
                                const struct cdn_strv *keep, const int *ids, size_t n_ids,
                                struct cdn_fanotify_marks *out)
{
    struct cdn_mount_info *v = NULL;
    size_t n = 0;
    int r = cdn_mounts_read(init_pid, &v, &n);
    if (r < 0)
        return r;
    for (size_t k = 0; r >= 0 && k < n_ids; k++)
        if (cdn_fanotify_marks_find(m, ids[k]))
            r = add(out, ids[k], CDN_MARK_PROTECT, NULL);
    for (bool more = r >= 0; more;) { /* a mount whose parent is in out, until nothing changes */
        more = false;
        for (size_t i = 0; r >= 0 && i < n; i++)
            if (cdn_fanotify_marks_find(out, v[i].parent) && !cdn_fanotify_marks_find(out, v[i].id) &&
                cdn_fanotify_marks_find(m, v[i].id) && !cdn_path_is_protected(v[i].mp, keep))
                r = add(out, v[i].id, CDN_MARK_PROTECT, NULL), more = true;
    }
    cdn_mounts_free(v, n);
    return r;
}

int cdn_fanotify_mark_sandbox(int group, pid_t init_pid, const struct cdn_strv *protect, bool kernel,
                              struct cdn_fanotify_marks *out, struct cdn_error *err)
{
    _cleanup_close_ int rootfd = open_root(init_pid, err);
    if (rootfd < 0)
        return rootfd;
    size_t first = out->n;
    struct mark_ctx c = {group, out, err};
    for (size_t i = 0; i < protect->n; i++) {
        int r = cdn_protect_expand(rootfd, protect->v[i], mark_protected, &c);
        if (r < 0)
            return err->msg[0] ? r
                               : cdn_error_field(err, -r, "protect", "protect: '%s': %s", protect->v[i],
                                                 strerror(-r));
    }
    if (out->n > first) {
        int r = mark_submounts(group, init_pid, rootfd, out, first, err);
        if (r < 0)
            return r;
    }
    int proc_id = -1;
    bool root = false;
    _cleanup_close_ int procfd = kernel ? open_beneath(rootfd, "/proc") : -1;
    if (procfd >= 0 && mount_of(procfd, &proc_id, &root) < 0)
        proc_id = -1;
    for (size_t i = 0; kernel && proc_id >= 0 && i < ELEMENTSOF(kernel_files); i++) {
        _cleanup_close_ int fd = open_beneath(rootfd, kernel_files[i]);
        int id = -1;
        /* Only the mask's own mount: never /proc itself (that would stop every open there). */
        if (fd < 0 || mount_of(fd, &id, &root) < 0 || !root || id == proc_id)
            continue;
        int r = mark_fd(group, fd, FAN_OPEN_PERM);
        if (r < 0 || (r = add(out, id, CDN_MARK_KERNEL, NULL)) < 0)
            return cdn_error_set(err, r, "guard %s: %s", kernel_files[i], strerror(-r));
    }
    return 0;
}

int cdn_fanotify_unmark(int group, pid_t init_pid, const struct cdn_fanotify_marks *m, struct cdn_error *err)
{
    if (!m->n)
        return 0;
    _cleanup_close_ int rootfd = open_root(init_pid, err);
    if (rootfd < 0)
        return rootfd;
    struct cdn_mount_info *v = NULL;
    size_t n = 0;
    int r = cdn_mounts_read(init_pid, &v, &n);
    if (r < 0)
        return cdn_error_set(err, -r, "read the mounts of init %d: %s", (int) init_pid, strerror(-r));
    for (size_t i = 0; r >= 0 && i < n; i++) {
        if (!cdn_fanotify_marks_find(m, v[i].id))
            continue;
        _cleanup_close_ int fd = open_beneath(rootfd, v[i].mp);
        int got = -1;
        bool root = false;
        if (fd < 0 || mount_of(fd, &got, &root) < 0 || got != v[i].id || !root)
            continue; /* gone meanwhile: its mark went with it */
        char fp[64];
        (void) snprintf(fp, sizeof fp, "/proc/self/fd/%d", fd);
        if (fanotify_mark(group, FAN_MARK_REMOVE | FAN_MARK_MOUNT, PROTECT_MASK, AT_FDCWD, fp) < 0 &&
            errno != ENOENT)
            r = cdn_error_set(err, errno, "unguard %s: fanotify_mark: %m", v[i].mp);
    }
    cdn_mounts_free(v, n);
    return r;
}

int cdn_fanotify_check_moved(pid_t init_pid, const struct cdn_fanotify_marks *m, struct cdn_error *err)
{
    _cleanup_close_ int rootfd = open_root(init_pid, err);
    if (rootfd < 0)
        return rootfd;
    for (size_t i = 0; i < m->n; i++) {
        if (!m->v[i].path)
            continue;
        struct open_how how = {.flags = O_PATH | O_CLOEXEC,
                               .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
        _cleanup_close_ int fd = (int) syscall(SYS_openat2, rootfd, m->v[i].path, &how, sizeof how);
        int id = -1;
        bool root = false;
        /* Its bind, or one marked over it since (a pattern naming it again, or a directory above it,
         * whose bind copied it) */
        if (fd < 0 || mount_of(fd, &id, &root) < 0 || !root || !cdn_fanotify_marks_find(m, id))
            return cdn_error_set(err, ESTALE,
                                 "protected path %s is not the mount bound there when the sandbox was made: "
                                 "it was moved aside (with a parent, from outside the sandbox)",
                                 m->v[i].path);
    }
    return 0;
}

static int fd_mnt_id(int fd)
{
    char p[64], buf[512];
    (void) snprintf(p, sizeof p, "/proc/self/fdinfo/%d", fd);
    if (cdn_read_file_at(AT_FDCWD, p, buf, sizeof buf) <= 0)
        return -1;
    const char *m = strstr(buf, "mnt_id:");
    return m ? atoi(m + 7) : -1;
}

int cdn_fanotify_read(int group, struct cdn_fanotify_event *ev, size_t max)
{
    /* Whole events only: a buffer that holds max of them. */
    char buf[4096] __attribute__((aligned(__alignof__(struct fanotify_event_metadata))));
    size_t cap = max * sizeof(struct fanotify_event_metadata);
    ssize_t len = read(group, buf, cap < sizeof buf ? cap : sizeof buf);
    if (len < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -errno;
    size_t n = 0;
    for (struct fanotify_event_metadata *m = (void *) buf; FAN_EVENT_OK(m, len) && n < max;
         m = FAN_EVENT_NEXT(m, len)) {
        if (m->vers != FANOTIFY_METADATA_VERSION || m->fd < 0) {
            if (m->fd >= 0)
                (void) close(m->fd);
            continue;
        }
        struct cdn_fanotify_event *e = &ev[n++];
        *e = (struct cdn_fanotify_event){.fd = m->fd, .pid = m->pid, .exec = m->mask & FAN_OPEN_EXEC_PERM};
        e->mnt_id = fd_mnt_id(m->fd);
    }
    return (int) n;
}

void cdn_fanotify_describe(struct cdn_fanotify_event *ev)
{
    char p[64];
    (void) snprintf(p, sizeof p, "/proc/self/fd/%d", ev->fd);
    ssize_t k = readlink(p, ev->path, sizeof ev->path - 1);
    ev->path[k > 0 ? k : 0] = 0;
    cdn_read_cmdline(ev->pid, ev->cmdline, sizeof ev->cmdline);
}

int cdn_fanotify_answer(int group, struct cdn_fanotify_event *ev, bool allow)
{
    struct fanotify_response r = {.fd = ev->fd, .response = allow ? FAN_ALLOW : FAN_DENY};
    int ret = write(group, &r, sizeof r) == (ssize_t) sizeof r ? 0 : -errno;
    (void) close(ev->fd);
    ev->fd = -1;
    return ret;
}

bool cdn_pid_in_sandbox(int pid, pid_t init_pid)
{
    char a[64], b[64];
    struct stat sa, sb;
    (void) snprintf(a, sizeof a, "/proc/%d/ns/pid", pid);
    (void) snprintf(b, sizeof b, "/proc/%d/ns/pid", (int) init_pid);
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_ino == sb.st_ino && sa.st_dev == sb.st_dev;
}
