/* cordon-init: file operations (FILE frames). They run in PID 1, so inside
 * the sandbox's mount namespace, as its root and under its landlock and
 * seccomp: the host reaches exactly the files a command in the sandbox could,
 * and a symlink resolves inside the sandbox's root, never the host's. Where a
 * path leads is decided on the opened file (init-resolve.c): a symlink of the
 * agent's into a protected path is refused (a VIOLATION, then the ERROR), and
 * the contents of the kernel's file systems, devices and FIFOs are never moved.
 *
 * A write is a FILE frame carrying the first bytes and, with CDN_FRAME_MORE,
 * DATA frames with the rest; the file stays open between them. A read is
 * served a chunk at a time from the main loop (cdn_files_pump), round robin with
 * the other reads and between the loop's other work, only while the host's
 * queue has room and within the window the host granted: one big or slow
 * read never holds up the sandbox's commands or other requests. CANCEL ends
 * either early. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "init.h"
#include "shared/macro.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1 /* linux/fs.h's; a libc without renameat2 lacks it */
#endif

#define MAX_WRITES 64
#define MAX_READS  64
#define READ_CHUNK (256u << 10)
#define LIST_BATCH (64u << 10)

static struct {
    uint32_t channel; /* 0: free */
    int fd;
    char path[256];
} writes[MAX_WRITES];

static struct {
    uint32_t channel; /* 0: free */
    int fd;
    uint64_t window; /* bytes the host takes before its next WINDOW; UINT64_MAX: no limit */
    uint64_t left;   /* of max_bytes; UINT64_MAX: no limit */
    bool cut;        /* CDN_FILE_CUT: done at max_bytes, not refused past it */
    struct stat st;  /* at the open: DONE's payload */
    char path[256];
} reads[MAX_READS];

/* Owners' names for a request with CDN_FILE_OWNERS: the sandbox's /etc/passwd and /etc/group (the
 * agent's files: bounded, cdn_user_names_parse), the number where they name no one. Each file's
 * names are kept while it stays the same file, unchanged (device, inode, size, mtime, ctime): a
 * listing asks for them once per directory, and a file the agent made huge costs one read. */
static struct names_cache {
    bool valid;
    struct stat st;
    struct cdn_user_names names;
} names_cache[2]; /* passwd, group */

static bool same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static const struct cdn_user_names *names_of(int root, int k)
{
    static const struct cdn_user_names none;
    struct names_cache *c = &names_cache[k];
    const char *name = k ? "group" : "passwd";
    char path[16];
    (void) snprintf(path, sizeof path, "etc/%s", name);
    struct stat st;
    if (fstatat(root, path, &st, 0) < 0) /* in the sandbox's root: init's own */
        return &none;
    if (c->valid && same_file(&c->st, &st))
        return &c->names;
    cdn_user_names_free(&c->names);
    c->valid = false;
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    struct cdn_error e = {0};
    if (cdn_user_read_file(root, name, &text, &len, &e) < 0 || cdn_user_names_parse(text, len, &c->names) < 0)
        return &none;
    c->st = st;
    c->valid = true;
    return &c->names;
}

struct owners {
    bool on;
    const struct cdn_user_names *users, *groups;
    char user[16], group[16]; /* a number's text */
};

static void owners_load(struct owners *o, uint32_t flags)
{
    *o = (struct owners){.on = flags & CDN_FILE_OWNERS};
    _cleanup_close_ int root = o->on ? open("/", O_PATH | O_DIRECTORY | O_CLOEXEC) : -EBADF;
    if (root >= 0) {
        o->users = names_of(root, 0);
        o->groups = names_of(root, 1);
    }
}

static void owners_put(struct owners *o, const struct stat *st, struct cdn_file_stat *fs)
{
    if (!o || !o->on)
        return;
    fs->uid = st->st_uid;
    fs->gid = st->st_gid;
    fs->owner = o->users ? cdn_user_names_find(o->users, st->st_uid) : NULL;
    fs->group = o->groups ? cdn_user_names_find(o->groups, st->st_gid) : NULL;
    if (!fs->owner) {
        (void) snprintf(o->user, sizeof o->user, "%u", (unsigned) st->st_uid);
        fs->owner = o->user;
    }
    if (!fs->group) {
        (void) snprintf(o->group, sizeof o->group, "%u", (unsigned) st->st_gid);
        fs->group = o->group;
    }
}

static void send_stat_owned(uint32_t channel, uint16_t type, const struct stat *st, const char *name,
                            struct owners *o)
{
    uint8_t buf[400];
    struct cdn_file_stat fs = {
        .mode = st->st_mode, .size = (uint64_t) st->st_size, .mtime = st->st_mtime, .name = name};
    owners_put(o, st, &fs);
    int n = cdn_file_stat_encode(buf, sizeof buf, &fs);
    if (n > 0)
        cdn_agent_send(type, channel, buf, (uint32_t) n);
}

static void send_stat(uint32_t channel, uint16_t type, const struct stat *st, const char *name)
{
    send_stat_owned(channel, type, st, name, NULL);
}

static void fail_why(uint32_t channel, int errnum, const char *op, const char *path, const char *why)
{
    char what[400];
    (void) snprintf(what, sizeof what, "%s '%.256s'%s%.100s%s", op, path, why ? " (" : "", why ? why : "",
                    why ? ")" : "");
    cdn_agent_error(channel, errnum, what);
}

static void fail(uint32_t channel, int errnum, const char *op, const char *path)
{
    fail_why(channel, errnum, op, path, NULL);
}

/* What t reached may not be used for op: say why. A protected path reached through a symlink
 * is the agent's attempt to have the operator read or write it for them: a violation. */
static void refuse(uint32_t channel, const char *op, const char *path, const struct file_target *t,
                   enum refusal why, const char *fs)
{
    char what[700];
    if (why == REFUSE_PROTECTED) {
        struct cdn_violation_msg v = {.kind = CDN_VIOLATION_MSG_SYMLINK};
        cdn_target_where(t, v.path, sizeof v.path);
        (void) snprintf(v.cmd, sizeof v.cmd, "%.255s", path);
        (void) snprintf(v.op, sizeof v.op, "%.15s", op);
        uint8_t buf[1024];
        int n = cdn_violation_encode(buf, sizeof buf, &v);
        if (n > 0)
            cdn_agent_send(CDN_FRAME_VIOLATION, channel, buf, (uint32_t) n);
        (void) snprintf(what, sizeof what,
                        "%s '%.256s': a symlink on the way leads into the protected path '%.256s', which the "
                        "files API does not follow",
                        op, path, v.path);
        cdn_agent_error(channel, EACCES, what);
        return;
    }
    (void) snprintf(what, sizeof what,
                    "%s '%.256s': on %s, a kernel file system the files API does not read or write", op, path,
                    fs);
    cdn_agent_error(channel, EPERM, what);
}

/* Open path (cdn_target_open) and judge it for op; on a refusal or an error, the ERROR is sent, naming
 * shown (the request's path). */
static int open_judged(uint32_t channel, const char *op, const char *path, const char *shown, int flags,
                       bool content, struct file_target *ret)
{
    int r = cdn_target_open(path, flags, ret);
    if (r < 0) {
        fail(channel, -r, op, shown);
        return r;
    }
    const char *fs = NULL;
    enum refusal why = cdn_target_check(ret, content, &fs);
    if (why != REFUSE_NONE) {
        refuse(channel, op, shown, ret, why, fs);
        cdn_target_close(ret);
        return -EACCES;
    }
    return 0;
}

/* mkdir -p of path itself (whole) or of its parents: each directory on the way opened and judged
 * as it is reached, a missing one made in its judged parent. ret: the last directory (O_PATH).
 * On failure the ERROR is sent. */
static int walk_dirs(uint32_t channel, const char *op, const char *path, bool whole, mode_t mode,
                     struct file_target *ret)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int) sizeof buf) {
        fail(channel, ENAMETOOLONG, op, path);
        return -ENAMETOOLONG;
    }
    _cleanup_(cdn_target_close) struct file_target cur = {.fd = -EBADF};
    int r = open_judged(channel, op, "/", path, O_DIRECTORY, false, &cur);
    for (char *s = buf + 1; r == 0 && *s;) {
        char *end = strchrnul(s, '/');
        if (!*end && !whole)
            break; /* the last component is the caller's */
        char saved = *end;
        *end = 0;
        struct file_target next;
        if (end > s && (r = cdn_target_open(buf, O_DIRECTORY, &next)) == -ENOENT) {
            if (mkdirat(cur.fd, s, mode) < 0 && errno != EEXIST)
                r = -errno;
            else
                r = cdn_target_open(buf, O_DIRECTORY, &next);
        }
        if (end > s && r < 0)
            fail_why(channel, -r, op, path, buf);
        else if (end > s) {
            const char *fs = NULL;
            enum refusal why = cdn_target_check(&next, false, &fs);
            if (why != REFUSE_NONE) {
                refuse(channel, op, path, &next, why, fs);
                cdn_target_close(&next);
                r = -EACCES;
            } else {
                cdn_target_close(&cur);
                cur = next;
            }
        }
        *end = saved;
        s = *end ? end + 1 : end;
    }
    if (r < 0)
        return r;
    *ret = cur;
    cur.fd = -EBADF; /* ret's now */
    return 0;
}

/* A write whose last component is a symlink to nothing is refused, never followed; where it
 * points is judged as reached through a symlink, so that one aimed into a protected path counts. */
static void refuse_dangling(uint32_t channel, const struct cdn_file_req *r, int parentfd, const char *base)
{
    char target[4096], dir[8400];
    ssize_t n = readlinkat(parentfd, base, target, sizeof target - 1);
    target[n > 0 ? (size_t) n : 0] = 0;
    const char *slash = strrchr(target, '/');
    int len = slash ? (int) (slash - target) : 0;
    if (target[0] == '/')
        (void) snprintf(dir, sizeof dir, "%.*s/", len, target);
    else
        (void) snprintf(dir, sizeof dir, "%.*s%.*s/", (int) (base - r->path), r->path, len, target);
    struct file_target t;
    const char *fs = NULL;
    if (n > 0 && cdn_target_open(dir, O_DIRECTORY, &t) == 0) {
        t.direct = false;
        enum refusal why = cdn_target_check(&t, false, &fs);
        if (why == REFUSE_PROTECTED)
            refuse(channel, "write", r->path, &t, why, fs);
        cdn_target_close(&t);
        if (why == REFUSE_PROTECTED)
            return;
    }
    fail_why(channel, ELOOP, "write", r->path, "a symlink to nothing: not followed to make a file");
}

/* The file of a write, made if it is missing (O_EXCL in the judged parent: never through a symlink
 * of the agent's left where it should be). On failure the ERROR is sent. */
static int open_for_write(uint32_t channel, const struct cdn_file_req *r)
{
    const char *base = strrchr(r->path, '/') + 1;
    for (int tries = 0; tries < 4; tries++) {
        struct file_target t;
        int e = cdn_target_open(r->path, 0, &t);
        if (e == 0) {
            const char *fs = NULL;
            enum refusal why = cdn_target_check(&t, true, &fs);
            int fd = why != REFUSE_NONE       ? -EACCES
                     : !S_ISREG(t.st.st_mode) ? -EINVAL
                                              : cdn_target_reopen(&t, O_WRONLY | O_NONBLOCK);
            if (why != REFUSE_NONE)
                refuse(channel, "write", r->path, &t, why, fs);
            else if (fd == -EINVAL)
                fail_why(channel, S_ISDIR(t.st.st_mode) ? EISDIR : EINVAL, "write", r->path,
                         S_ISDIR(t.st.st_mode) ? NULL : "not a regular file");
            else if (fd < 0)
                fail(channel, -fd, "write", r->path);
            cdn_target_close(&t);
            return fd;
        }
        if (e != -ENOENT || !*base) {
            fail(channel, !*base ? EISDIR : -e, "write", r->path);
            return e < 0 ? e : -EISDIR;
        }
        _cleanup_(cdn_target_close) struct file_target parent = {.fd = -EBADF};
        if ((e = walk_dirs(channel, "write", r->path, false, 0755, &parent)) < 0)
            return e;
        const char *fs = NULL;
        if (cdn_target_check(&parent, true, &fs) == REFUSE_KERNEL_FS) {
            refuse(channel, "write", r->path, &parent, REFUSE_KERNEL_FS, fs);
            return -EPERM;
        }
        int fd = openat(parent.fd, base,
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY,
                        r->mode ? r->mode : 0644);
        e = fd < 0 ? -errno : 0;
        struct stat lst;
        bool dangling =
            e == -EEXIST && fstatat(parent.fd, base, &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode);
        if (dangling)
            refuse_dangling(channel, r, parent.fd, base);
        else if (fd < 0 && e != -EEXIST)
            fail(channel, -e, "write", r->path);
        if (fd >= 0 || e != -EEXIST || dangling)
            return fd >= 0 ? fd : e;
        /* made by someone else meanwhile: look again */
    }
    fail_why(channel, EAGAIN, "write", r->path, "the path kept changing");
    return -EAGAIN;
}

static void do_write(uint32_t channel, uint16_t flags, const struct cdn_file_req *r)
{
    size_t slot = MAX_WRITES;
    for (size_t i = 0; i < MAX_WRITES; i++)
        if (writes[i].channel == channel || (slot == MAX_WRITES && writes[i].channel == 0))
            slot = i;
    if (slot == MAX_WRITES || writes[slot].channel == channel) {
        fail(channel, slot == MAX_WRITES ? EAGAIN : EEXIST, "write", r->path);
        return;
    }
    _cleanup_close_ int fd = open_for_write(channel, r);
    if (fd < 0)
        return;
    /* Non-blocking until here: a fifo planted at the path must not stall init (only regular files
     * get this far). */
    if (ftruncate(fd, 0) < 0 || fcntl(fd, F_SETFL, O_WRONLY) < 0) {
        fail(channel, errno, "write", r->path);
        return;
    }
    writes[slot].channel = channel;
    writes[slot].fd = TAKE_FD(fd);
    (void) snprintf(writes[slot].path, sizeof writes[slot].path, "%s", r->path);
    cdn_files_data(channel, flags, r->data, r->data_len);
}

void cdn_files_data(uint32_t channel, uint16_t flags, const uint8_t *p, size_t len)
{
    if (cdn_tcp_data(channel, p, len))
        return;
    size_t i = 0;
    while (i < MAX_WRITES && writes[i].channel != channel)
        i++;
    if (i == MAX_WRITES || channel == 0)
        return; /* a write that already failed: the host had its ERROR */
    while (len > 0) {
        ssize_t n = write(writes[i].fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fail(channel, n < 0 ? errno : EIO, "write", writes[i].path);
            (void) close(writes[i].fd);
            writes[i].channel = 0;
            return;
        }
        p += n, len -= (size_t) n;
    }
    if (flags & CDN_FRAME_MORE)
        return;
    struct stat st;
    if (fstat(writes[i].fd, &st) < 0 || close(writes[i].fd) < 0)
        fail(channel, errno, "write", writes[i].path);
    else
        send_stat(channel, CDN_FRAME_DONE, &st, "");
    writes[i].channel = 0;
}

static void do_read(uint32_t channel, const struct cdn_file_req *r)
{
    size_t slot = MAX_READS;
    for (size_t i = 0; i < MAX_READS; i++)
        if (reads[i].channel == channel || (slot == MAX_READS && reads[i].channel == 0))
            slot = i;
    if (slot == MAX_READS || reads[slot].channel == channel) {
        fail(channel, slot == MAX_READS ? EAGAIN : EEXIST, "read", r->path);
        return;
    }
    _cleanup_(cdn_target_close) struct file_target t = {.fd = -EBADF};
    if (open_judged(channel, "read", r->path, r->path, 0, true, &t) < 0)
        return;
    int fd = -EINVAL;
    char what[400];
    if (!S_ISREG(t.st.st_mode)) /* a fifo or device could block init or never end */
        fail_why(channel, S_ISDIR(t.st.st_mode) ? EISDIR : EINVAL, "read", r->path,
                 S_ISDIR(t.st.st_mode) ? NULL : "not a regular file");
    else if (r->opts.max_bytes && !(r->opts.flags & CDN_FILE_CUT) &&
             (uint64_t) t.st.st_size > r->opts.max_bytes) {
        (void) snprintf(what, sizeof what,
                        "read '%.256s': %" PRIu64 " bytes, more than max_bytes (%" PRIu64 ")", r->path,
                        (uint64_t) t.st.st_size, r->opts.max_bytes);
        cdn_agent_error(channel, EFBIG, what);
    } else if ((fd = cdn_target_reopen(&t, O_RDONLY | O_NONBLOCK)) < 0)
        fail(channel, -fd, "read", r->path);
    if (fd >= 0) {
        reads[slot].channel = channel;
        reads[slot].fd = fd;
        reads[slot].window = r->opts.window ? r->opts.window : UINT64_MAX;
        reads[slot].left =
            r->opts.max_bytes || (r->opts.flags & CDN_FILE_CUT) ? r->opts.max_bytes : UINT64_MAX;
        reads[slot].cut = r->opts.flags & CDN_FILE_CUT;
        reads[slot].st = t.st;
        (void) snprintf(reads[slot].path, sizeof reads[slot].path, "%s", r->path);
    }
}

static void read_end(size_t i)
{
    (void) close(reads[i].fd);
    reads[i].channel = 0;
}

/* One chunk of read i. */
static void read_chunk(size_t i)
{
    static uint8_t buf[READ_CHUNK];
    uint64_t want = reads[i].window < READ_CHUNK ? reads[i].window : READ_CHUNK;
    if (reads[i].left != UINT64_MAX &&
        reads[i].left < want) /* one byte past the limit tells a file that grew */
        want = reads[i].left + (reads[i].cut ? 0 : 1);
    ssize_t n = 0;
    do
        n = want ? read(reads[i].fd, buf, (size_t) want) : 0; /* cut at the limit: done */
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        fail(reads[i].channel, errno, "read", reads[i].path);
        read_end(i);
    } else if (n == 0) {
        send_stat(reads[i].channel, CDN_FRAME_DONE, &reads[i].st, "");
        read_end(i);
    } else if (reads[i].left != UINT64_MAX && (uint64_t) n > reads[i].left) {
        char what[400];
        (void) snprintf(what, sizeof what, "read '%.256s': it grew past max_bytes while it was read",
                        reads[i].path);
        cdn_agent_error(reads[i].channel, EFBIG, what);
        read_end(i);
    } else {
        cdn_agent_send(CDN_FRAME_DATA, reads[i].channel, buf, (uint32_t) n);
        explicit_bzero(buf, (size_t) n); /* a protected file's bytes must not linger in init's memory */
        if (reads[i].window != UINT64_MAX)
            reads[i].window -= (uint64_t) n;
        if (reads[i].left != UINT64_MAX)
            reads[i].left -= (uint64_t) n;
    }
}

bool cdn_files_pending(void)
{
    for (size_t i = 0; i < MAX_READS; i++)
        if (reads[i].channel && reads[i].window)
            return true;
    return false;
}

void cdn_files_pump(void)
{
    static size_t next; /* round robin: each read in turn gets the first chance */
    for (size_t k = 0; k < MAX_READS && cdn_agent_room(); k++) {
        size_t i = (next + k) % MAX_READS;
        if (reads[i].channel && reads[i].window)
            read_chunk(i);
    }
    next = (next + 1) % MAX_READS;
}

void cdn_files_window(uint32_t channel, const uint8_t *p, size_t len)
{
    uint32_t more;
    if (cdn_window_decode(p, len, &more) < 0 || cdn_watch_window(channel, more) ||
        cdn_tcp_window(channel, more))
        return;
    for (size_t i = 0; i < MAX_READS; i++)
        if (channel && reads[i].channel == channel && reads[i].window != UINT64_MAX)
            reads[i].window += more; /* at most 2^32 per frame: no overflow before 2^32 frames */
}

void cdn_files_cancel(uint32_t channel)
{
    if (cdn_watch_cancel(channel) || cdn_tcp_cancel(channel))
        return;
    for (size_t i = 0; channel && i < MAX_READS; i++)
        if (reads[i].channel == channel) {
            fail(channel, ECANCELED, "read", reads[i].path);
            read_end(i);
        }
    for (size_t i = 0; channel && i < MAX_WRITES; i++)
        if (writes[i].channel == channel) {
            fail(channel, ECANCELED, "write", writes[i].path);
            (void) close(writes[i].fd);
            writes[i].channel = 0;
        }
}

static void do_list(uint32_t channel, const char *path, uint32_t flags)
{
    static uint8_t buf[LIST_BATCH];
    _cleanup_(cdn_target_close) struct file_target t = {.fd = -EBADF};
    if (open_judged(channel, "list", path, path, O_DIRECTORY, false, &t) < 0)
        return;
    struct owners o;
    owners_load(&o, flags);
    _cleanup_close_ int fd = cdn_target_reopen(&t, O_RDONLY | O_DIRECTORY);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        fail(channel, fd < 0 ? -fd : errno, "list", path);
        return;
    }
    TAKE_FD(fd); /* d's now, closed before the answer goes */
    size_t off = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        struct stat es;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            fstatat(dirfd(d), de->d_name, &es, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        struct cdn_file_stat fs = {
            .mode = es.st_mode, .size = (uint64_t) es.st_size, .mtime = es.st_mtime, .name = de->d_name};
        owners_put(&o, &es, &fs);
        int n = cdn_file_stat_encode(buf + off, sizeof buf - off, &fs);
        if (n < 0) { /* batch full */
            cdn_agent_send(CDN_FRAME_DATA, channel, buf, (uint32_t) off);
            off = 0;
            n = cdn_file_stat_encode(buf, sizeof buf, &fs);
        }
        off += (size_t) n;
    }
    closedir(d);
    if (off)
        cdn_agent_send(CDN_FRAME_DATA, channel, buf, (uint32_t) off);
    send_stat_owned(channel, CDN_FRAME_DONE, &t.st, "", &o);
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void) st, (void) ftw;
    return (type == FTW_DP ? rmdir(path) : unlink(path)) < 0 ? -1 : 0;
}

/* The last component is removed itself, never followed; the directory it is in is judged. */
static void do_remove(uint32_t channel, const char *path)
{
    const char *base = strrchr(path, '/') + 1;
    char dir[4096];
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        fail_why(channel, EINVAL, "remove", path, "names no entry");
        return;
    }
    (void) snprintf(dir, sizeof dir, "%.*s", (int) (base - path), path);
    _cleanup_(cdn_target_close) struct file_target parent = {.fd = -EBADF};
    if (open_judged(channel, "remove", dir, path, O_DIRECTORY, false, &parent) < 0)
        return;
    struct stat st;
    char at[4200];
    /* The judged directory anchors the walk, whatever its path's components become meanwhile. */
    (void) snprintf(at, sizeof at, "/proc/self/fd/%d/%s", parent.fd, base);
    int r = fstatat(parent.fd, base, &st, AT_SYMLINK_NOFOLLOW);
    if (r == 0)
        r = S_ISDIR(st.st_mode) ? nftw(at, remove_one, 16, FTW_DEPTH | FTW_PHYS)
                                : unlinkat(parent.fd, base, 0);
    if (r < 0)
        fail(channel, errno, "remove", path);
    else
        cdn_agent_send(CDN_FRAME_DONE, channel, NULL, 0);
}

/* The directory that holds path's last component, opened and judged (content: a kernel file
 * system's entries are not moved); *ret_base: that component, never followed. */
static int open_parent(uint32_t channel, const char *op, const char *path, struct file_target *ret,
                       const char **ret_base)
{
    const char *base = strrchr(path, '/') + 1;
    char dir[4096];
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        fail_why(channel, EINVAL, op, path, "names no entry");
        return -EINVAL;
    }
    if ((size_t) (base - path) >= sizeof dir) {
        fail(channel, ENAMETOOLONG, op, path);
        return -ENAMETOOLONG;
    }
    (void) snprintf(dir, sizeof dir, "%.*s", (int) (base - path), path);
    *ret_base = base;
    return open_judged(channel, op, dir, path, O_DIRECTORY, true, ret);
}

/* renameat2 on two judged directories: what the agent does to either path's components meanwhile
 * changes nothing, and the entries themselves are moved, never followed. A file system without
 * RENAME_NOREPLACE gets a look first (a race only with the sandbox's own writes). */
static void do_rename(uint32_t channel, const struct cdn_file_req *r)
{
    _cleanup_(cdn_target_close) struct file_target from = {.fd = -EBADF};
    _cleanup_(cdn_target_close) struct file_target to = {.fd = -EBADF};
    const char *base, *tobase = strrchr(r->to, '/') + 1;
    if (r->to[0] != '/' || !*tobase || strcmp(tobase, ".") == 0 || strcmp(tobase, "..") == 0) {
        fail_why(channel, EINVAL, "move", r->to, "names no entry");
        return;
    }
    if (open_parent(channel, "move", r->path, &from, &base) < 0)
        return;
    struct stat st;
    if (fstatat(from.fd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return fail(channel, errno, "move", r->path);
    if (walk_dirs(channel, "move", r->to, false, 0755, &to) < 0)
        return;
    const char *fs = NULL;
    if (cdn_target_check(&to, true, &fs) == REFUSE_KERNEL_FS)
        return refuse(channel, "move", r->to, &to, REFUSE_KERNEL_FS, fs);
    bool noreplace = r->opts.flags & CDN_FILE_NOREPLACE;
    long e = syscall(SYS_renameat2, from.fd, base, to.fd, tobase, noreplace ? RENAME_NOREPLACE : 0);
    if (e < 0 && errno == EINVAL && noreplace) {
        if (fstatat(to.fd, tobase, &st, AT_SYMLINK_NOFOLLOW) == 0)
            errno = EEXIST;
        else
            e = renameat(from.fd, base, to.fd, tobase);
    }
    if (e < 0 && errno == EXDEV)
        return fail_why(channel, EXDEV, "move", r->path, "the destination is on another file system");
    if (e < 0 && errno == EBUSY)
        return fail_why(channel, EBUSY, "move", r->path,
                        "a mount point (a protected path or a bind): not moved");
    if (e < 0)
        return fail_why(channel, errno, "move", r->path, errno == EEXIST ? r->to : NULL);
    if (fstatat(to.fd, tobase, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return fail(channel, errno, "move", r->to);
    struct owners o;
    owners_load(&o, r->opts.flags);
    send_stat_owned(channel, CDN_FRAME_DONE, &st, "", &o);
}

/* A symlink made in the judged parent (made too, as a write's), replacing a file or a link there:
 * what it points to is a name, never opened here. */
static void do_symlink(uint32_t channel, const struct cdn_file_req *r)
{
    _cleanup_(cdn_target_close) struct file_target parent = {.fd = -EBADF};
    const char *base = strrchr(r->path, '/') + 1;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return fail_why(channel, EINVAL, "symlink", r->path, "names no entry");
    if (walk_dirs(channel, "symlink", r->path, false, 0755, &parent) < 0)
        return;
    const char *fs = NULL;
    if (cdn_target_check(&parent, true, &fs) == REFUSE_KERNEL_FS)
        return refuse(channel, "symlink", r->path, &parent, REFUSE_KERNEL_FS, fs);
    struct stat st;
    int e = symlinkat(r->to, parent.fd, base);
    if (e < 0 && errno == EEXIST && fstatat(parent.fd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        !S_ISDIR(st.st_mode)) {
        /* made aside, then renamed over what was there: never a moment without either */
        char tmp[64];
        (void) snprintf(tmp, sizeof tmp, ".cordon-symlink-%u", channel);
        (void) unlinkat(parent.fd, tmp, 0);
        e = symlinkat(r->to, parent.fd, tmp) < 0 ? -1 : renameat(parent.fd, tmp, parent.fd, base);
        if (e < 0) {
            int saved = errno;
            (void) unlinkat(parent.fd, tmp, 0);
            errno = saved;
        }
    }
    if (e < 0 || fstatat(parent.fd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return fail(channel, errno, "symlink", r->path);
    send_stat(channel, CDN_FRAME_DONE, &st, "");
}

/* The judged file's bits, through its /proc/self/fd link (the anchor do_remove uses): a
 * symlink of the agent's is followed as chmod(1) follows it, and judged like any. */
static void do_chmod(uint32_t channel, const struct cdn_file_req *r)
{
    _cleanup_(cdn_target_close) struct file_target t = {.fd = -EBADF};
    if (open_judged(channel, "chmod", r->path, r->path, 0, true, &t) < 0)
        return;
    char at[64];
    (void) snprintf(at, sizeof at, "/proc/self/fd/%d", t.fd);
    struct stat st;
    if (chmod(at, (mode_t) r->mode) < 0 || fstat(t.fd, &st) < 0)
        return fail(channel, errno, "chmod", r->path);
    send_stat(channel, CDN_FRAME_DONE, &st, "");
}

static void do_stat(uint32_t channel, const struct cdn_file_req *r)
{
    _cleanup_(cdn_target_close) struct file_target t = {.fd = -EBADF};
    bool nofollow = r->opts.flags & CDN_FILE_NOFOLLOW;
    if (open_judged(channel, "stat", r->path, r->path, nofollow ? O_NOFOLLOW : 0, false, &t) < 0)
        return;
    char link[256] = "";
    if (S_ISLNK(t.st.st_mode)) { /* its target, as a name: what it would lead to */
        ssize_t n = readlinkat(t.fd, "", link, sizeof link - 1);
        link[n > 0 ? (size_t) n : 0] = 0;
    }
    struct owners o;
    owners_load(&o, r->opts.flags);
    send_stat_owned(channel, CDN_FRAME_DONE, &t.st, link, &o);
}

static void dispatch(uint32_t channel, uint16_t flags, const struct cdn_file_req *rq,
                     const struct cdn_user *u);

void cdn_files_request(uint32_t channel, uint16_t flags, const uint8_t *p, size_t len)
{
    struct cdn_file_req r;
    if (cdn_file_decode(p, len, &r) < 0) {
        cdn_agent_error(channel, EBADMSG, "file request");
        return;
    }
    if (r.path[0] != '/') {
        fail(channel, EINVAL, "relative path", r.path);
        return;
    }
    if (!r.user)
        return dispatch(channel, flags, &r, NULL);
    /* As the user the request names, resolved in the sandbox's own files as a command's is: only
     * the operation itself (its opens, makes, moves) runs with the user's ids; a read or write it
     * opened goes on through its descriptor. */
    struct cdn_user u;
    struct cdn_error e = {0};
    int res = cdn_user_lookup(r.user, &u, &e);
    if (res < 0 || (res = cdn_user_fs_enter(&u)) < 0) {
        if (!e.msg[0])
            (void) snprintf(e.msg, sizeof e.msg, "user: take on '%.64s' for a file operation: %s", r.user,
                            strerror(-res));
        cdn_agent_error(channel, EINVAL, e.msg); /* the request's: "user: …" names its field */
        return;
    }
    dispatch(channel, flags, &r, &u);
    cdn_user_fs_leave();
}

/* u: the request's user, whom init is now (cdn_user_fs_enter), or NULL. */
static void dispatch(uint32_t channel, uint16_t flags, const struct cdn_file_req *rq,
                     const struct cdn_user *u)
{
    struct cdn_file_req r = *rq;
    struct file_target t;
    switch (r.op) {
    case CDN_FILE_WRITE:
        do_write(channel, flags, &r);
        break;
    case CDN_FILE_READ:
        do_read(channel, &r);
        break;
    case CDN_FILE_LIST:
        do_list(channel, r.path, r.opts.flags);
        break;
    case CDN_FILE_REMOVE:
        do_remove(channel, r.path);
        break;
    case CDN_FILE_MKDIR:
        if (walk_dirs(channel, "mkdir", r.path, true, r.mode ? r.mode : 0755, &t) == 0) {
            struct owners o;
            owners_load(&o, r.opts.flags);
            send_stat_owned(channel, CDN_FRAME_DONE, &t.st, "", &o);
            cdn_target_close(&t);
        }
        break;
    case CDN_FILE_STAT:
        do_stat(channel, &r);
        break;
    case CDN_FILE_RENAME:
        do_rename(channel, &r);
        break;
    case CDN_FILE_CHMOD:
        do_chmod(channel, &r);
        break;
    case CDN_FILE_SYMLINK:
        do_symlink(channel, &r);
        break;
    case CDN_FILE_WATCH:
        cdn_watch_start(channel, &r, u);
        break;
    }
}

int cdn_files_judge(uint32_t channel, const char *op, const char *path, int flags, struct file_target *ret)
{
    return open_judged(channel, op, path, path, flags, false, ret);
}

void cdn_files_reset(void)
{
    cdn_watch_reset();
    cdn_tcp_reset();
    for (size_t i = 0; i < MAX_WRITES; i++)
        if (writes[i].channel) {
            (void) close(writes[i].fd);
            writes[i].channel = 0;
        }
    for (size_t i = 0; i < MAX_READS; i++)
        if (reads[i].channel)
            read_end(i);
}
