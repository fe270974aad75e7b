/* cordon-init: watching a directory for changes (FILE op WATCH, the files API's …/watch).
 *
 * One inotify instance for the sandbox, created at the first watch. A watch judges its directory as
 * the files API judges any path (init-resolve.c: not through an agent's symlink into a protected
 * path, not on a kernel file system); with CDN_FILE_RECURSIVE each subdirectory is watched too, the
 * ones made later as well, none reached through a symlink, at most WATCH_DIRS. Its events go to the
 * host as DATA frames of entries in LIST's encoding (struct cdn_file_stat): mode says file or
 * directory, size the kind (enum cdn_watch_kind), mtime the rename cookie, name the path relative
 * to the watched directory. They wait in a queue of WATCH_QUEUE bytes and are sent within the
 * host's window; past the queue an OVERFLOW entry says some were lost. The watch ends with DONE
 * when its directory goes (deleted, moved), with ERROR ECANCELED on CANCEL.
 *
 * The names are the sandbox's: any bytes but NUL and '/', which the host encodes as it sees fit. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "init.h"
#include "shared/macro.h"

#define MAX_WATCHES 16
#define WATCH_DIRS  8192
#define WATCH_QUEUE (64u << 10)
#define WATCH_MASK                                                                                           \
    (IN_CREATE | IN_CLOSE_WRITE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF |     \
     IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)

struct wdir {
    int wd;
    char *rel; /* "" for the watched directory itself */
};

static struct watch {
    uint32_t channel; /* 0: free */
    bool recursive, overflow, ending;
    uint64_t window; /* bytes the host takes before its next WINDOW */
    uint8_t *queue;
    size_t qlen;
    struct wdir *dirs;
    size_t ndirs;
    char root[4096];
    bool as_user;         /* a request's user's: its later directories are watched as it too */
    struct cdn_user user; /* as_user's */
} watches[MAX_WATCHES];

static int ifd = -1;

static bool wd_in_use(int wd, const struct watch *except)
{
    for (size_t i = 0; i < MAX_WATCHES; i++)
        for (size_t k = 0; watches[i].channel && &watches[i] != except && k < watches[i].ndirs; k++)
            if (watches[i].dirs[k].wd == wd)
                return true;
    return false;
}

static void watch_free(struct watch *w)
{
    for (size_t k = 0; k < w->ndirs; k++) {
        if (!wd_in_use(w->dirs[k].wd, w))
            (void) inotify_rm_watch(ifd, w->dirs[k].wd);
        free(w->dirs[k].rel);
    }
    free(w->dirs);
    free(w->queue);
    *w = (struct watch){0};
}

static void queue_entry(struct watch *w, uint32_t kind, bool dir, uint32_t cookie, const char *name)
{
    uint8_t buf[4400];
    struct cdn_file_stat fs = {.mode = dir ? S_IFDIR : S_IFREG, .size = kind, .mtime = cookie, .name = name};
    int n = cdn_file_stat_encode(buf, sizeof buf, &fs);
    if (n < 0)
        return;
    if (w->qlen + (size_t) n > WATCH_QUEUE) {
        w->overflow = true;
        return;
    }
    memcpy(w->queue + w->qlen, buf, (size_t) n);
    w->qlen += (size_t) n;
}

/* Watch the directory rel (relative to the root; "" for it) of w, and with recursive what is below
 * it. The root comes judged (root: cdn_files_judge's target, the very directory judged, whatever
 * replaces its path since). Returns -errno for the root only; a subdirectory that cannot be
 * watched is left out. */
static int add_dir(struct watch *w, const char *rel, int depth, struct file_target *root)
{
    if (w->ndirs >= WATCH_DIRS || depth > 64)
        return -ENOSPC;
    char path[8192];
    if ((size_t) snprintf(path, sizeof path, "%s%s%s", w->root, rel[0] ? "/" : "", rel) >= sizeof w->root)
        return -ENAMETOOLONG;
    _cleanup_(cdn_target_close) struct file_target own = {.fd = -EBADF};
    struct file_target *tp = root;
    const char *fs;
    if (!tp) {
        int r = cdn_target_open(path, O_NOFOLLOW | O_DIRECTORY, &own);
        if (r < 0)
            return r;
        if (!own.direct || cdn_target_check(&own, false, &fs) != REFUSE_NONE)
            return -EPERM; /* a subdirectory is never reached through a symlink */
        tp = &own;
    }
    struct file_target t = *tp;
    /* inotify takes a path (the sandbox's /proc refuses its magic links to it): the directory it
     * watches must be the one judged, which a stat of the path after it tells. A swap in between
     * (an agent's symlink, a rename) is refused. */
    int wd = inotify_add_watch(ifd, path, WATCH_MASK & ~(uint32_t) (rel[0] ? 0 : IN_DONT_FOLLOW));
    if (wd < 0)
        return -errno;
    struct stat now;
    if (stat(path, &now) < 0 || now.st_dev != t.st.st_dev || now.st_ino != t.st.st_ino) {
        if (!wd_in_use(wd, NULL))
            (void) inotify_rm_watch(ifd, wd);
        return -ESTALE;
    }
    struct wdir *v = realloc(w->dirs, (w->ndirs + 1) * sizeof *v);
    char *copy = strdup(rel);
    if (!v || !copy) {
        free(copy);
        if (v)
            w->dirs = v;
        if (!wd_in_use(wd, NULL))
            (void) inotify_rm_watch(ifd, wd);
        return -ENOMEM;
    }
    w->dirs = v;
    w->dirs[w->ndirs++] = (struct wdir){wd, copy};
    if (!w->recursive)
        return 0;
    _cleanup_close_ int dfd = cdn_target_reopen(&t, O_RDONLY | O_DIRECTORY);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d)
        return 0;
    TAKE_FD(dfd);
    for (struct dirent *de; (de = readdir(d));) {
        struct stat st;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
            continue;
        char sub[4096];
        if ((size_t) snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) < sizeof sub)
            (void) add_dir(w, sub, depth + 1, NULL);
    }
    closedir(d);
    return 0;
}

void cdn_watch_start(uint32_t channel, const struct cdn_file_req *r, const struct cdn_user *u)
{
    struct watch *w = NULL;
    for (size_t i = 0; i < MAX_WATCHES && !w; i++)
        if (!watches[i].channel)
            w = &watches[i];
    if (!w) {
        cdn_agent_error(channel, EAGAIN, "watch: 16 watches run in this sandbox");
        return;
    }
    if (ifd < 0 && (ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0) {
        cdn_agent_error(channel, errno, "watch: inotify");
        return;
    }
    /* The root as the files API judges a path: the ERROR (and a VIOLATION) say why not. */
    _cleanup_(cdn_target_close) struct file_target t = {.fd = -EBADF};
    if (cdn_files_judge(channel, "watch", r->path, O_DIRECTORY, &t) < 0)
        return;
    *w = (struct watch){.channel = channel,
                        .recursive = r->opts.flags & CDN_FILE_RECURSIVE,
                        .window = r->opts.window ? r->opts.window : UINT64_MAX,
                        .as_user = u != NULL};
    if (u)
        w->user = *u;
    (void) snprintf(w->root, sizeof w->root, "%s", r->path);
    int e = (w->queue = malloc(WATCH_QUEUE)) ? add_dir(w, "", 0, &t) : -ENOMEM;
    if (e < 0) {
        char what[300];
        (void) snprintf(what, sizeof what, "watch '%.256s'", r->path);
        cdn_agent_error(channel, -e, what);
        watch_free(w);
        return;
    }
    queue_entry(w, CDN_WATCH_START, true, 0, "");
}

static const struct {
    uint32_t mask, kind;
} kinds[] = {{IN_CREATE, CDN_WATCH_CREATE},      {IN_CLOSE_WRITE, CDN_WATCH_WRITE},
             {IN_DELETE, CDN_WATCH_REMOVE},      {IN_MOVED_FROM, CDN_WATCH_RENAME_FROM},
             {IN_MOVED_TO, CDN_WATCH_RENAME_TO}, {IN_ATTRIB, CDN_WATCH_CHMOD}};

static void deliver(struct watch *w, size_t k, const struct inotify_event *ev)
{
    if (ev->mask & IN_IGNORED) { /* that directory's watch is gone (it went, or was unmounted) */
        if (k == 0) {            /* the root keeps its place: its end is the watch's */
            w->ending = true;
            w->dirs[0].wd = -1;
            return;
        }
        free(w->dirs[k].rel);
        w->dirs[k] = w->dirs[--w->ndirs];
        return;
    }
    if ((ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) && k == 0) {
        w->ending = true;
        return;
    }
    char name[4096];
    const char *rel = w->dirs[k].rel;
    if (!ev->len ||
        (size_t) snprintf(name, sizeof name, "%s%s%s", rel, rel[0] ? "/" : "", ev->name) >= sizeof name)
        return;
    bool dir = ev->mask & IN_ISDIR;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (ev->mask & kinds[i].mask)
            queue_entry(w, kinds[i].kind, dir, ev->cookie, name);
    /* A new directory is watched as the watch's user, as its first ones were: what it may not read
     * stays unwatched (and all of it should init fail to take the user on). */
    if (dir && w->recursive && (ev->mask & (IN_CREATE | IN_MOVED_TO)) &&
        (!w->as_user || cdn_user_fs_enter(&w->user) == 0)) {
        (void) add_dir(w, name, 0, NULL);
        cdn_user_fs_leave();
    }
}

static void read_events(void)
{
    static uint8_t buf[64 << 10] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (int rounds = 0; rounds < 16; rounds++) {
        ssize_t n = read(ifd, buf, sizeof buf);
        if (n <= 0)
            return;
        for (ssize_t off = 0; off + (ssize_t) sizeof(struct inotify_event) <= n;) {
            const struct inotify_event *ev = (const void *) (buf + off);
            off += (ssize_t) sizeof *ev + ev->len;
            for (size_t i = 0; i < MAX_WATCHES; i++) {
                struct watch *w = &watches[i];
                if (!w->channel)
                    continue;
                if (ev->mask & IN_Q_OVERFLOW) {
                    w->overflow = true;
                    continue;
                }
                for (size_t k = 0; k < w->ndirs; k++)
                    if (w->dirs[k].wd == ev->wd) {
                        deliver(w, k, ev);
                        break;
                    }
            }
        }
    }
}

void cdn_watch_poll_add(struct pollfd *pfd, size_t *n, size_t max)
{
    bool any = false;
    for (size_t i = 0; i < MAX_WATCHES && !any; i++)
        any = watches[i].channel;
    if (any && ifd >= 0 && *n < max)
        pfd[(*n)++] = (struct pollfd){.fd = ifd, .events = POLLIN};
}

void cdn_watch_poll_handle(const struct pollfd *pfd, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (pfd[i].fd == ifd && ifd >= 0 && (pfd[i].revents & POLLIN))
            read_events();
}

bool cdn_watch_pending(void)
{
    for (size_t i = 0; i < MAX_WATCHES; i++)
        if (watches[i].channel && ((watches[i].qlen && watches[i].window) || watches[i].overflow ||
                                   (watches[i].ending && !watches[i].qlen)))
            return true;
    return false;
}

/* What each watch has queued, within its window; its end once all is out. */
void cdn_watch_pump(void)
{
    for (size_t i = 0; i < MAX_WATCHES && cdn_agent_room(); i++) {
        struct watch *w = &watches[i];
        if (!w->channel)
            continue;
        if (w->overflow && w->qlen + 64 <= WATCH_QUEUE) {
            w->overflow = false;
            queue_entry(w, CDN_WATCH_OVERFLOW, false, 0, "");
        }
        size_t take = 0; /* whole entries that fit the window */
        for (struct cdn_file_stat st; take < w->qlen;) {
            int k = cdn_file_stat_decode(w->queue + take, w->qlen - take, &st);
            if (k <= 0 || take + (size_t) k > w->window)
                break;
            take += (size_t) k;
        }
        if (take) {
            cdn_agent_send(CDN_FRAME_DATA, w->channel, w->queue, (uint32_t) take);
            memmove(w->queue, w->queue + take, w->qlen - take);
            w->qlen -= take;
            if (w->window != UINT64_MAX)
                w->window -= take;
        }
        if (w->ending && !w->qlen) {
            uint8_t buf[64];
            int k = cdn_file_stat_encode(buf, sizeof buf, &(struct cdn_file_stat){.name = ""});
            if (k > 0)
                cdn_agent_send(CDN_FRAME_DONE, w->channel, buf, (uint32_t) k);
            watch_free(w);
        }
    }
}

bool cdn_watch_window(uint32_t channel, uint32_t more)
{
    for (size_t i = 0; channel && i < MAX_WATCHES; i++)
        if (watches[i].channel == channel) {
            if (watches[i].window != UINT64_MAX)
                watches[i].window += more;
            return true;
        }
    return false;
}

bool cdn_watch_cancel(uint32_t channel)
{
    for (size_t i = 0; channel && i < MAX_WATCHES; i++)
        if (watches[i].channel == channel) {
            cdn_agent_error(channel, ECANCELED, "watch");
            watch_free(&watches[i]);
            return true;
        }
    return false;
}

void cdn_watch_reset(void)
{
    for (size_t i = 0; i < MAX_WATCHES; i++)
        if (watches[i].channel)
            watch_free(&watches[i]);
}
