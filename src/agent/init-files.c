/* cordon-init: file operations (FILE frames). They run in PID 1, so inside
 * the sandbox's mount namespace, as its root and under its landlock and
 * seccomp: the host reaches exactly the files a command in the sandbox could,
 * and a symlink resolves inside the sandbox's root, never the host's.
 *
 * A write is a FILE frame carrying the first bytes and, with CDN_FRAME_MORE,
 * DATA frames with the rest; the file stays open between them. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "init.h"

#define MAX_WRITES 64
#define READ_CHUNK (256u << 10)
#define LIST_BATCH (64u << 10)

static struct {
    uint32_t channel; /* 0: free */
    int fd;
    char path[256];
} writes[MAX_WRITES];

static void send_stat(uint32_t channel, uint16_t type, const struct stat *st, const char *name)
{
    uint8_t buf[300];
    struct cdn_file_stat fs = {
        .mode = st->st_mode, .size = (uint64_t) st->st_size, .mtime = st->st_mtime, .name = name};
    int n = cdn_file_stat_encode(buf, sizeof buf, &fs);
    if (n > 0)
        agent_send(type, channel, buf, (uint32_t) n);
}

static void fail(uint32_t channel, int errnum, const char *op, const char *path)
{
    char what[320];
    (void) snprintf(what, sizeof what, "%s '%.256s'", op, path);
    agent_error(channel, errnum, what);
}

/* mkdir -p of path itself (whole == true) or of its parent directories. */
static int make_dirs(const char *path, mode_t mode, bool whole)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int) sizeof buf)
        return -ENAMETOOLONG;
    for (char *s = buf + 1;; s++) {
        bool end = *s == 0;
        if (*s != '/' && !end)
            continue;
        if (end && !whole)
            break;
        *s = 0;
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
            return -errno;
        if (end)
            break;
        *s = '/';
    }
    return 0;
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
    int e = make_dirs(r->path, 0755, false);
    /* Non-blocking open: a fifo planted at the path must not stall init; only regular files are written. */
    int fd = e < 0 ? e
                   : open(r->path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY,
                          r->mode ? r->mode : 0644);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || ftruncate(fd, 0) < 0 ||
                    fcntl(fd, F_SETFL, O_WRONLY) < 0)) {
        int err = fd >= 0 && fstat(fd, &st) == 0 && !S_ISREG(st.st_mode) ? EINVAL : errno;
        (void) close(fd);
        fail(channel, err, "write", r->path);
        return;
    }
    if (fd < 0) {
        fail(channel, e < 0 ? -e : errno, "write", r->path);
        return;
    }
    writes[slot].channel = channel;
    writes[slot].fd = fd;
    (void) snprintf(writes[slot].path, sizeof writes[slot].path, "%s", r->path);
    files_data(channel, flags, r->data, r->data_len);
}

void files_data(uint32_t channel, uint16_t flags, const uint8_t *p, size_t len)
{
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

static void do_read(uint32_t channel, const char *path)
{
    static uint8_t buf[READ_CHUNK];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        fail(channel, errno, "read", path);
        if (fd >= 0)
            (void) close(fd);
        return;
    }
    if (!S_ISREG(st.st_mode)) { /* a fifo or device could block init or never end */
        (void) close(fd);
        fail(channel, S_ISDIR(st.st_mode) ? EISDIR : EINVAL, "read", path);
        return;
    }
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fail(channel, errno, "read", path);
            (void) close(fd);
            return;
        }
        if (n == 0)
            break;
        agent_send(CDN_FRAME_DATA, channel, buf, (uint32_t) n);
        explicit_bzero(buf, (size_t) n); /* a protected file's bytes are not kept in init's memory */
    }
    (void) close(fd);
    send_stat(channel, CDN_FRAME_DONE, &st, "");
}

static void do_list(uint32_t channel, const char *path)
{
    static uint8_t buf[LIST_BATCH];
    DIR *d = opendir(path);
    struct stat st;
    if (!d || fstat(dirfd(d), &st) < 0) {
        fail(channel, errno, "list", path);
        if (d)
            closedir(d);
        return;
    }
    size_t off = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        struct stat es;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            fstatat(dirfd(d), de->d_name, &es, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        struct cdn_file_stat fs = {
            .mode = es.st_mode, .size = (uint64_t) es.st_size, .mtime = es.st_mtime, .name = de->d_name};
        int n = cdn_file_stat_encode(buf + off, sizeof buf - off, &fs);
        if (n < 0) { /* batch full */
            agent_send(CDN_FRAME_DATA, channel, buf, (uint32_t) off);
            off = 0;
            n = cdn_file_stat_encode(buf, sizeof buf, &fs);
        }
        off += (size_t) n;
    }
    closedir(d);
    if (off)
        agent_send(CDN_FRAME_DATA, channel, buf, (uint32_t) off);
    send_stat(channel, CDN_FRAME_DONE, &st, "");
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void) st, (void) ftw;
    return (type == FTW_DP ? rmdir(path) : unlink(path)) < 0 ? -1 : 0;
}

static void do_remove(uint32_t channel, const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0) {
        fail(channel, errno, "remove", path);
        return;
    }
    int r = S_ISDIR(st.st_mode) ? nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) : unlink(path);
    if (r < 0)
        fail(channel, errno, "remove", path);
    else
        agent_send(CDN_FRAME_DONE, channel, NULL, 0);
}

void files_request(uint32_t channel, uint16_t flags, const uint8_t *p, size_t len)
{
    struct cdn_file_req r;
    if (cdn_file_decode(p, len, &r) < 0) {
        agent_error(channel, EBADMSG, "file request");
        return;
    }
    if (r.path[0] != '/') {
        fail(channel, EINVAL, "relative path", r.path);
        return;
    }
    struct stat st;
    int e;
    switch (r.op) {
    case CDN_FILE_WRITE:
        do_write(channel, flags, &r);
        break;
    case CDN_FILE_READ:
        do_read(channel, r.path);
        break;
    case CDN_FILE_LIST:
        do_list(channel, r.path);
        break;
    case CDN_FILE_REMOVE:
        do_remove(channel, r.path);
        break;
    case CDN_FILE_MKDIR:
        if ((e = make_dirs(r.path, r.mode ? r.mode : 0755, true)) < 0)
            fail(channel, -e, "mkdir", r.path);
        else if (stat(r.path, &st) < 0)
            fail(channel, errno, "mkdir", r.path);
        else
            send_stat(channel, CDN_FRAME_DONE, &st, "");
        break;
    case CDN_FILE_STAT:
        if (stat(r.path, &st) < 0)
            fail(channel, errno, "stat", r.path);
        else
            send_stat(channel, CDN_FRAME_DONE, &st, "");
        break;
    }
}

void files_reset(void)
{
    for (size_t i = 0; i < MAX_WRITES; i++)
        if (writes[i].channel) {
            (void) close(writes[i].fd);
            writes[i].channel = 0;
        }
}
