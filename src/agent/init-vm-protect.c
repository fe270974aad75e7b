/* Protected paths in a VM guest (spec "protect"), at its start (IDENTITY) and
 * changed at run time (PROTECT): init-vm.c's part that binds, marks and
 * answers. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <grp.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "init.h"
#include "init-vm-internal.h"
#include "core/protect.h"
#include "shared/fd-util.h"
#include "shared/macro.h"
#include "shared/mount-util.h"
#include "shared/strv.h"

/* ---- protected paths in a guest (spec "protect") ----
 * Each match of a pattern is bound read-only onto itself (writes, renames,
 * links, new entries: refused by the kernel), and its mount carries a
 * fanotify permission mark. The answers come from the fanotify process: a child of init
 * running as a uid of its own, which the commands (uid 0 without capabilities)
 * can neither signal nor trace. It lets init (the files API) and a verifier
 * step through and refuses every other open, reporting it to init, which
 * passes it to the host as a VIOLATION. Init itself cannot answer: its own
 * opens of a protected file would wait for it. */

#define GUARD_UID  65533
#define MAX_GUARDS 256              /* protected paths */
#define GUARD_PATH 1024             /* bytes of one, and of a pattern */
#define MAX_MARKS  (4 * MAX_GUARDS) /* mounts marked: the binds and what is mounted beneath them */
#define GUARD_MASK (FAN_OPEN_PERM | FAN_OPEN_EXEC_PERM | FAN_ONDIR)

static int fan_group = -1; /* kept by init, which alone may mark mounts (CAP_SYS_ADMIN) */
static int fan_sock = -1;  /* init's end of the socket to the fanotify process */
static pid_t guard_pid;    /* that process */
static bool verifier_on, kill_mode;

/* Each protected path, the mount bound there, and the patterns naming it (bits of patterns). */
static struct {
    char path[GUARD_PATH];
    uint64_t mnt_id;
    uint32_t pats;
} pinned[MAX_GUARDS + CDN_PROTECT_MATCH_MAX]; /* room for one pattern's matches past the cap */
static size_t n_pinned;
static char *patterns[CDN_PROTECT_LIST_MAX];
static size_t n_patterns;
static uint64_t marked[MAX_MARKS];
static size_t n_marked;

int cdn_vm_fan_sock(void)
{
    return fan_sock;
}

bool cdn_vm_verifier_on(void)
{
    return verifier_on;
}

void cdn_vm_verifier(bool on)
{
    verifier_on = on;
    if (fan_sock >= 0)
        (void) !write(fan_sock, on ? "V" : "v", 1);
}

void cdn_vm_protect_kill_mode(void)
{
    kill_mode = true;
    if (fan_sock >= 0)
        (void) !write(fan_sock, "K", 1);
}

void cdn_vm_fan_records(short revents)
{
    if (revents & POLLIN) {
        static uint8_t buf[1024];
        static struct cdn_violation_msg v;
        ssize_t k = recv(fan_sock, buf, sizeof buf, MSG_DONTWAIT);
        if (k > 0 && cdn_violation_decode(buf, (size_t) k, &v) == 0 && v.kind == CDN_VIOLATION_MSG_PROTECT)
            cdn_agent_send(CDN_FRAME_VIOLATION, 0, buf, (uint32_t) k);
        if (k != 0)
            return;
    }
    if (revents & (POLLHUP | POLLERR | POLLIN)) {
        /* The fanotify process is gone: the marks went with it, and unanswered opens are let through. Fail
         * closed: the guest ends (its host sees init's end). */
        (void) kill(-1, SIGKILL);
        cdn_vm_poweroff();
    }
}

static void fan_loop(int fan, int sock) __attribute__((noreturn));
static void fan_loop(int fan, int sock)
{
    bool verifier = false, kill = false;
    unsigned held = 0; /* kill mode: refused opens left unanswered (their fds kept) */
    static uint8_t events[8192];
    const pid_t init = getppid(); /* 1, or a full VM's agent (not its guest's first process) */
    for (;;) {
        struct pollfd p[2] = {{.fd = fan, .events = POLLIN}, {.fd = sock, .events = POLLIN}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            _exit(1);
        if (p[1].revents) {
            char c;
            ssize_t k = read(sock, &c, 1);
            if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN))
                _exit(0); /* init is gone: so is the guest */
            if (k == 1 && (c == 'V' || c == 'v'))
                verifier = c == 'V';
            else if (k == 1 && c == 'K')
                kill = true;
        }
        if (!(p[0].revents & POLLIN))
            continue;
        ssize_t len = read(fan, events, sizeof events);
        if (len <= 0)
            continue;
        for (struct fanotify_event_metadata *m = (void *) events; FAN_EVENT_OK(m, len);
             m = FAN_EVENT_NEXT(m, len)) {
            if (m->vers != FANOTIFY_METADATA_VERSION)
                _exit(1);
            bool allow = m->pid == init || m->pid == getpid() || verifier;
            if (!allow) {
                static struct cdn_violation_msg v;
                v = (struct cdn_violation_msg){.kind = CDN_VIOLATION_MSG_PROTECT, .pid = (uint32_t) m->pid};
                char link[64];
                (void) snprintf(link, sizeof link, "/proc/self/fd/%d", m->fd);
                ssize_t pl = readlink(link, v.path, sizeof v.path - 1);
                v.path[pl > 0 ? pl : 0] = 0;
                (void) snprintf(v.op, sizeof v.op, "%s", m->mask & FAN_OPEN_EXEC_PERM ? "exec" : "open");
                cdn_vm_read_cmdline(m->pid, v.cmd, sizeof v.cmd);
                static uint8_t buf[1024];
                int n = cdn_violation_encode(buf, sizeof buf, &v);
                if (n > 0) /* never blocking: init may be waiting on this process's answer to its own open */
                    (void) send(sock, buf, (size_t) n, MSG_NOSIGNAL | MSG_DONTWAIT);
            }
            /* Kill mode: the host ends the guest on the VIOLATION; the opener waits in its open
             * until then, and neither reads the file nor runs on (the host's rule, policy.h). */
            if (!allow && kill && m->fd >= 0 && held < 1024) {
                held++;
                continue;
            }
            struct fanotify_response r = {.fd = m->fd, .response = allow ? FAN_ALLOW : FAN_DENY};
            (void) !write(fan, &r, sizeof r);
            if (m->fd >= 0)
                (void) close(m->fd);
        }
    }
}

/* The matches of one pattern into out (paths), at most max: `*?[…]` within a component, a
 * trailing "/" "**" for the directory itself (its bind covers what is under it). */
static int expand(const char *pattern, char (*out)[GUARD_PATH], size_t *n, size_t max)
{
    char pat[GUARD_PATH];
    (void) snprintf(pat, sizeof pat, "%s", pattern);
    size_t l = strlen(pat);
    if (l > 3 && strcmp(pat + l - 3, "/**") == 0)
        pat[l - 3] = 0;
    if (!strpbrk(pat, "*?[")) {
        struct stat st;
        if (lstat(pat, &st) < 0)
            return -errno; /* a literal must exist, as in a container */
        if (*n >= max)
            return -E2BIG;
        (void) snprintf(out[(*n)++], GUARD_PATH, "%s", pat);
        return 0;
    }
    glob_t g;
    int r = glob(pat, GLOB_NOSORT, NULL, &g);
    if (r == GLOB_NOMATCH)
        return 0;
    if (r != 0)
        return -EINVAL;
    for (size_t i = 0; i < g.gl_pathc && r == 0; i++) {
        if (*n >= max)
            r = -E2BIG;
        else
            (void) snprintf(out[(*n)++], GUARD_PATH, "%s", g.gl_pathv[i]);
    }
    globfree(&g);
    return r;
}

/* The mount path is on (following symlinks, as a command naming it would), and whether path is
 * that mount's root. */
static int mount_of(const char *path, uint64_t *id, bool *root)
{
    return cdn_mount_of(AT_FDCWD, path, 0, id, root);
}

/* Every parent of path below / made a mount point (bound on itself), unless it is one already or
 * read-only: renaming or removing it fails then (EBUSY), so no command can move a protected path
 * aside with its parent and put a directory of its own in its place. */
static int pin_parents(const char *path)
{
    char p[GUARD_PATH];
    for (const char *slash = strchr(path + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        (void) snprintf(p, sizeof p, "%.*s", (int) (slash - path), path);
        uint64_t id;
        bool root = false;
        struct statfs fs;
        if (mount_of(p, &id, &root) < 0 || root || statfs(p, &fs) < 0 || (fs.f_flags & ST_RDONLY))
            continue;
        if (mount(p, p, NULL, MS_BIND | MS_REC, NULL) < 0)
            return -errno;
    }
    return 0;
}

/* ---- the paths guarded ---- */

static bool beneath(const char *path, const char *top)
{
    size_t n = strlen(top);
    return strncmp(path, top, n) == 0 && (path[n] == 0 || path[n] == '/' || strcmp(top, "/") == 0);
}

bool cdn_vm_protects_anything(void)
{
    return n_pinned > 0;
}

bool cdn_vm_protected_path(const char *path)
{
    for (size_t i = 0; i < n_pinned; i++)
        if (beneath(path, pinned[i].path))
            return true;
    return false;
}

/* Each protected path still shows a mount guarded for it: its bind, or one bound over it later (a
 * pattern naming it again, or one naming a directory above it: a bind copies what lies beneath). */
int cdn_vm_protect_check(char *moved, size_t size)
{
    for (size_t i = 0; i < n_pinned; i++) {
        uint64_t id = 0;
        bool root = false, guarded = false;
        if (mount_of(pinned[i].path, &id, &root) == 0 && root)
            for (size_t k = 0; k < n_marked && !guarded; k++)
                guarded = marked[k] == id;
        if (!guarded) {
            (void) snprintf(moved, size, "%s", pinned[i].path);
            return -ESTALE;
        }
    }
    return 0;
}

/* A mount point as /proc/self/mountinfo writes it, its octal escapes ("\040" …) decoded. */
static void unescape(char *s)
{
    char *w = s;
    for (const char *r = s; *r;) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' &&
            r[3] <= '7') {
            *w++ = (char) (((r[1] - '0') << 6) | ((r[2] - '0') << 3) | (r[3] - '0'));
            r += 4;
        } else
            *w++ = *r++;
    }
    *w = 0;
}

/* An O_PATH fd of mount id at mp if mp shows that mount now (its root, reached through no symlink):
 * else -ESTALE (covered by another, or gone) or -errno. */
static int open_mount(const char *mp, uint64_t id)
{
    struct open_how how = {.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                           .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int fd = cdn_openat2(AT_FDCWD, mp, &how);
    if (fd < 0)
        return -errno;
    uint64_t got = 0;
    bool root = false;
    if (cdn_mount_of(fd, "", AT_EMPTY_PATH, &got, &root) < 0 || got != id || !root) {
        (void) close(fd);
        return -ESTALE;
    }
    return fd;
}

/* fanotify_mark() takes no O_PATH fd: the object goes by its /proc/self/fd link, which leads to
 * exactly the mount the fd holds. */
static int mark_mount(int fd, bool add)
{
    char link[64];
    (void) snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    return fanotify_mark(fan_group, (add ? FAN_MARK_ADD : FAN_MARK_REMOVE) | FAN_MARK_MOUNT, GUARD_MASK,
                         AT_FDCWD, link) < 0
               ? -errno
               : 0;
}

/* Every mount at or beneath a protected path marked — its bind and what is mounted beneath it (a
 * bind copies those, and a copy carries no mark) — and each mount marked before but not so any
 * more unmarked; the files API learns the list (its refusals of symlinks into them). */
static int mark_all(void)
{
    static uint64_t now[MAX_MARKS];
    size_t n = 0;
    int r = 0;
    _cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -errno;
    static char line[3 * GUARD_PATH + 512], mp[3 * GUARD_PATH];
    while (r == 0 && fgets(line, sizeof line, f)) {
        unsigned long long id;
        if (sscanf(line, "%llu %*u %*s %*s %3071s", &id, mp) != 2)
            continue;
        unescape(mp);
        bool want = cdn_vm_protected_path(mp), was = false;
        for (size_t i = 0; i < n_marked && !was; i++)
            was = marked[i] == id;
        if (!want && !was)
            continue;
        _cleanup_close_ int fd = open_mount(mp, id);
        if (fd < 0)
            continue; /* covered: nothing reaches it */
        if (!want) {
            (void) mark_mount(fd, false);
            continue;
        }
        if (n == MAX_MARKS)
            r = -E2BIG;
        else if ((r = mark_mount(fd, true)) == 0)
            now[n++] = id;
    }
    if (r < 0)
        return r;
    memcpy(marked, now, n * sizeof now[0]);
    n_marked = n;
    cdn_files_protected_set(marked, (uint32_t) n);
    return 0;
}

/* The process that answers the group's permission events (fan_loop), started once: the group
 * stays init's too, to mark mounts later. */
static int start_guard(void)
{
    if (fan_sock >= 0)
        return 0;
    _cleanup_close_ int fan =
        fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC, O_RDONLY | O_LARGEFILE | O_CLOEXEC);
    if (fan < 0)
        return -errno;
    _cleanup_close_pair_ int sv[2] = {-EBADF, -EBADF};
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    int room = 4 << 20; /* the records of many refused opens while init is busy (fan_loop drops past it) */
    (void) setsockopt(sv[1], SOL_SOCKET, SO_SNDBUFFORCE, &room, sizeof room);
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        /* Nothing of init's but these two: a copy of a command's pipe or of the host's connection
         * held here would keep it from ever ending. */
        int lo = fan < sv[1] ? fan : sv[1], hi = fan < sv[1] ? sv[1] : fan;
        if ((lo > 3 && syscall(SYS_close_range, 3, lo - 1, 0) < 0) ||
            (hi > lo + 1 && syscall(SYS_close_range, lo + 1, hi - 1, 0) < 0) ||
            syscall(SYS_close_range, hi + 1, ~0U, 0) < 0 || setgroups(0, NULL) < 0 ||
            setresgid(GUARD_UID, GUARD_UID, GUARD_UID) < 0 || setresuid(GUARD_UID, GUARD_UID, GUARD_UID) < 0)
            _exit(1);
        (void) prctl(PR_SET_DUMPABLE, 0);
        fan_loop(fan, sv[1]);
    }
    /* Init's copy of the process's end goes now: it must have no other holder, so that its exit
     * reads as EOF on init's. */
    guard_pid = pid;
    fan_group = TAKE_FD(fan);
    fan_sock = TAKE_FD(sv[0]);
    if (verifier_on)
        (void) !write(fan_sock, "V", 1);
    if (kill_mode)
        (void) !write(fan_sock, "K", 1);
    return 0;
}

/* The path's pattern bits merged into an entry for the same path (two patterns naming it). */
static bool merge(const char *path, uint32_t pats, size_t from)
{
    for (size_t i = from; i < n_pinned; i++)
        if (strcmp(pinned[i].path, path) == 0) {
            pinned[i].pats |= pats;
            return true;
        }
    return false;
}

int cdn_vm_protect(const struct cdn_identity *id)
{
    static char paths[MAX_GUARDS][GUARD_PATH];
    static uint32_t pats[MAX_GUARDS];
    size_t n = 0;
    int r = 0;
    for (unsigned i = 0; i < id->n_paths && r == 0; i++) {
        if (id->paths[i].kind != CDN_PATH_PROTECT)
            continue;
        if (n_patterns == CDN_PROTECT_LIST_MAX || !(patterns[n_patterns] = strdup(id->paths[i].path)))
            return -E2BIG;
        size_t from = n;
        r = expand(id->paths[i].path, paths, &n, MAX_GUARDS);
        for (size_t k = from; k < n; k++)
            pats[k] = 1u << n_patterns;
        n_patterns++;
    }
    if (r < 0 || n == 0)
        return r;
    if ((r = start_guard()) < 0)
        return r;
    struct stat st;
    for (size_t i = 0; i < n && r == 0; i++) /* the parents first: the protected binds land on them */
        if (lstat(paths[i], &st) == 0 && !S_ISLNK(st.st_mode))
            r = pin_parents(paths[i]);
    for (size_t i = 0; i < n && r == 0; i++) {
        /* A symlink is not followed: the bind goes onto the link's own path only if it is not one. */
        if (lstat(paths[i], &st) < 0 || S_ISLNK(st.st_mode) || merge(paths[i], pats[i], 0))
            continue;
        /* read-only with what is mounted beneath it: a copy of a mount there is no less protected */
        _cleanup_close_ int fd = open(paths[i], O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            r = -errno;
        else if ((r = cdn_bind_on_itself(fd, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                                         &pinned[n_pinned].mnt_id)) == 0) {
            (void) snprintf(pinned[n_pinned].path, sizeof pinned[n_pinned].path, "%s", paths[i]);
            pinned[n_pinned++].pats = pats[i];
        }
    }
    return r < 0 ? r : mark_all();
}

/* ---- changed at run time (PROTECT) ---- */

struct fresh {
    uint32_t pats;
};

static void on_bound(void *ud, const char *path, int mnt_id)
{
    const struct fresh *f = ud;
    (void) snprintf(pinned[n_pinned].path, sizeof pinned[n_pinned].path, "%s", path);
    pinned[n_pinned].mnt_id = (uint64_t) mnt_id;
    pinned[n_pinned++].pats = f->pats;
}

/* A path no longer protected: its bind stays (a mount point: still not to be moved aside) and is
 * writable again, unless what it is mounted on is read-only (a read-only root), or a later bind
 * covers it (that one decides). */
static void release(size_t i)
{
    _cleanup_close_ int fd = open_mount(pinned[i].path, pinned[i].mnt_id);
    char parent[GUARD_PATH];
    (void) snprintf(parent, sizeof parent, "%s", pinned[i].path);
    char *slash = strrchr(parent, '/');
    if (fd < 0 || !slash)
        return;
    slash[slash == parent] = 0; /* "/a" → "/" */
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                           .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    _cleanup_close_ int pfd = cdn_openat2(AT_FDCWD, parent, &how);
    struct statfs fs;
    if (pfd < 0 || fstatfs(pfd, &fs) < 0 || (fs.f_flags & ST_RDONLY))
        return;
    struct mount_attr rw = {.attr_clr = MOUNT_ATTR_RDONLY};
    (void) syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &rw, sizeof rw);
}

/* cdn_protect_bind() names the one pattern it had protect[0]: the list's index instead. */
static void renumber(struct cdn_error *err, size_t idx)
{
    char field[32], msg[sizeof err->msg];
    (void) snprintf(field, sizeof field, "protect[%zu]", idx);
    if (strncmp(err->msg, "protect[0]", 10) == 0) {
        (void) snprintf(msg, sizeof msg, "%s%s", field, err->msg + 10);
        (void) snprintf(err->msg, sizeof err->msg, "%s", msg);
    }
    (void) snprintf(err->field, sizeof err->field, "%s", field);
}

static int change(const uint8_t *p, size_t len, struct cdn_error *err)
{
    const char *want[CDN_PROTECT_LIST_MAX];
    char *copies[CDN_PROTECT_LIST_MAX] = {0};
    size_t n_want = 0;
    int old_of[CDN_PROTECT_LIST_MAX]; /* each wanted pattern's index in patterns, or -1: a new one */
    if (!cdn_vm_guest_mode())
        return cdn_error_set(err, EPERM, "protect: not a VM guest");
    if (cdn_protect_list_decode(p, len, want, &n_want) < 0)
        return cdn_error_set(err, EBADMSG, "protect: a malformed list");
    _cleanup_(cdn_strv_free) struct cdn_strv add = {0}, roots = {0};
    _cleanup_close_ int rootfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    int r = rootfd < 0 ? cdn_error_set(err, errno, "protect: open /: %m") : 0;
    for (size_t i = 0; r >= 0 && i < n_want; i++) {
        old_of[i] = -1;
        for (size_t k = 0; k < n_patterns && old_of[i] < 0; k++)
            if (strcmp(want[i], patterns[k]) == 0)
                old_of[i] = (int) k;
        if (!(copies[i] = strdup(want[i])) || (old_of[i] < 0 && cdn_strv_push(&add, want[i]) < 0))
            r = cdn_error_set(err, ENOMEM, "out of memory");
    }
    if (r >= 0 && cdn_protect_holder_roots(rootfd, &add, &roots) < 0)
        r = cdn_error_set(err, ENOMEM, "out of memory");
    if (r >= 0 && add.n && (r = start_guard()) < 0)
        r = cdn_error_set(err, -r, "protect: start the guard: %s", strerror(-r));
    /* The new patterns: bound read-only and guarded while the old ones still are. */
    const size_t from = n_pinned;
    for (size_t i = 0; r >= 0 && i < n_want; i++) {
        if (old_of[i] >= 0)
            continue;
        struct cdn_strv one = {.v = (char *[]){copies[i], NULL}, .n = 1};
        struct fresh f = {.pats = 1u << i};
        if ((r = cdn_protect_bind(rootfd, &one, on_bound, &f, err)) < 0)
            renumber(err, i);
        else if (n_pinned > MAX_GUARDS)
            r = cdn_error_field(err, E2BIG, "protect", "protect: at most %d protected paths in a VM guest",
                                MAX_GUARDS);
    }
    if (r >= 0 && n_pinned > from && (r = mark_all()) < 0)
        r = cdn_error_set(err, -r, "protect: guard the new paths: %s", strerror(-r));
    /* Marked first, then looked for: a descriptor opened before the marks is seen here, and none
     * opened after them passes unguarded. */
    if (r >= 0 && add.n)
        r = cdn_protect_find_holder(&roots, guard_pid, err);
    for (size_t i = from; r >= 0 && i < n_pinned; i++)
        r = cdn_protect_check_links(pinned[i].path, err);
    if (r < 0) {
        for (size_t i = n_pinned; i-- > from;)
            (void) umount2(pinned[i].path, MNT_DETACH | UMOUNT_NOFOLLOW);
        n_pinned = from;
        (void) mark_all();
        for (size_t i = 0; i < n_want; i++)
            free(copies[i]);
        return r;
    }
    /* The old entries' patterns by their new numbers; a path no pattern names any more released,
     * unless it lies at or beneath a path still protected (a bind there, stacked or around it,
     * would be made writable under it). */
    static uint32_t now[MAX_GUARDS + CDN_PROTECT_MATCH_MAX];
    for (size_t i = 0; i < n_pinned; i++) {
        now[i] = i >= from ? pinned[i].pats : 0;
        for (size_t k = 0; i < from && k < n_want; k++)
            if (old_of[k] >= 0 && (pinned[i].pats & (1u << old_of[k])))
                now[i] |= 1u << k;
    }
    for (size_t i = 0; i < n_pinned; i++) {
        bool covered = false;
        for (size_t k = 0; !now[i] && k < n_pinned && !covered; k++)
            covered = now[k] && beneath(pinned[i].path, pinned[k].path);
        if (!now[i] && !covered)
            release(i);
    }
    size_t kept = 0;
    for (size_t i = 0; i < n_pinned; i++)
        if (now[i]) {
            pinned[kept] = pinned[i];
            pinned[kept++].pats = now[i];
        }
    n_pinned = kept;
    (void) mark_all(); /* the released unmarked; failing, they stay guarded (not less) */
    for (size_t k = 0; k < n_patterns; k++)
        free(patterns[k]);
    memcpy(patterns, copies, n_want * sizeof copies[0]);
    n_patterns = n_want;
    return 0;
}

/* The guest's commands frozen throughout: none passes a descriptor from a process not looked at yet
 * to one looked at already, nor opens anything while the binds and marks are made. (One sent
 * before, still in a socket, is not seen: docs/events.md.) */
int cdn_vm_protect_change(const uint8_t *p, size_t len, struct cdn_error *err)
{
    cdn_vm_freeze_commands(true);
    int r = change(p, len, err);
    cdn_vm_freeze_commands(false);
    return r;
}
