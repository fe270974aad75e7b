#include "slot.h"
#include "core/paths.h"
#include "core/sandbox.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* A slot's byte is in one of several files, <run>/slots/held-<slot / HELD_PER_FILE>: the kernel
 * walks a file's whole list of locks at each lock and test, which one file for all would make
 * linear in the live sandboxes (0.4 ms a create with 5,000). */
#define HELD_PER_FILE 128
#define HELD_FILES    CDN_SLOT_HELD_FILES
_Static_assert(HELD_FILES == (CDN_SLOT_COUNT + HELD_PER_FILE - 1) / HELD_PER_FILE, "held files");

static void held_name(char *buf, size_t size, int slot)
{
    (void) snprintf(buf, size, "held-%d", slot / HELD_PER_FILE);
}

/* The byte of its held file that is slot's, for fcntl. */
static struct flock held_range(int slot, short type)
{
    return (struct flock){.l_type = type, .l_whence = SEEK_SET, .l_start = slot % HELD_PER_FILE, .l_len = 1};
}

/* Whether any open file description holds slot's byte (this process's too: another description's
 * lock conflicts whoever holds it): 1, 0, or -errno. */
static int held_anywhere(int slots_dir, int slot)
{
    char name[32];
    held_name(name, sizeof name, slot);
    _cleanup_close_ int fd = openat(slots_dir, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    struct flock l = held_range(slot, F_WRLCK);
    if (fd < 0 || fcntl(fd, F_OFD_GETLK, &l) < 0)
        return -errno;
    return l.l_type != F_UNLCK;
}

int cdn_slot_lock(int slots_dir, int slot)
{
    char name[16];
    (void) snprintf(name, sizeof name, "%d", slot);
    int fd = openat(slots_dir, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    /* Under the file's lock nobody else can take the byte (cdn_slot_hold takes it with the lock). */
    int r = flock(fd, LOCK_EX | LOCK_NB) < 0 ? -EBUSY : held_anywhere(slots_dir, slot);
    if (r == 0)
        return fd;
    (void) close(fd);
    return r > 0 ? -EBUSY : r;
}

int cdn_slot_acquire(const char *run_dir, int hint, int *ret_slot, int *ret_fd, struct cdn_error *err)
{
    char dir[4096];
    (void) snprintf(dir, sizeof dir, "%s/slots", run_dir);
    _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        int r = cdn_mkdir_p(dir, 0700);
        if (r < 0)
            return cdn_error_set(err, r, "mkdir %s: %s", dir, strerror(-r));
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
            return cdn_error_set(err, errno, "open %s: %m", dir);
    }
    uint32_t start = 0;
    if (getrandom(&start, sizeof start, GRND_NONBLOCK) != (ssize_t) sizeof start)
        start = (uint32_t) getpid(); /* the pool not yet seeded: any start will do */
    for (int i = hint >= 0 && hint < CDN_SLOT_COUNT ? -1 : 0; i < CDN_SLOT_COUNT; i++) {
        int slot = i < 0 ? hint : (int) ((start + (uint32_t) i) % CDN_SLOT_COUNT);
        int fd = cdn_slot_lock(dfd, slot);
        if (fd >= 0) {
            *ret_slot = slot;
            *ret_fd = fd;
            return 0;
        }
        if (fd != -EBUSY)
            return cdn_error_set(err, -fd, "slot lock %s/%d: %s", dir, slot, strerror(-fd));
    }
    return cdn_error_set(err, EBUSY, "all %d sandbox slots are in use", CDN_SLOT_COUNT);
}

/* The reaper: runs in a forked copy of the creating process, in its own
 * session so that a signal to the caller's process group does not take it
 * down too. It holds only the pipe and the slot lock. */
static void reaper_main(const struct cdn_cgroup *cg, int pipe_fd, int slot_fd) __attribute__((noreturn));
static void reaper_main(const struct cdn_cgroup *cg, int pipe_fd, int slot_fd)
{
    sigset_t all;
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    (void) sigprocmask(SIG_SETMASK, &all, NULL);
    (void) setsid();
    /* Keep pipe_fd and slot_fd: move them to 3 and 4, close the rest. */
    int p = fcntl(pipe_fd, F_DUPFD_CLOEXEC, 100), s = fcntl(slot_fd, F_DUPFD_CLOEXEC, 100);
    if (p < 0 || s < 0 || dup2(p, 3) < 0 || dup2(s, 4) < 0)
        _exit(1);
    (void) syscall(SYS_close_range, 5, ~0U, 0);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        (void) dup2(null, 0), (void) dup2(null, 1), (void) dup2(null, 2);
        if (null > 2)
            (void) close(null);
    }
    char c = 0;
    ssize_t n;
    do
        n = read(3, &c, 1);
    while (n < 0 && errno == EINTR);
    if (n == 1 && c == 'd')
        _exit(0);
    /* Our creator died without cleaning up. */
    struct cdn_cgroup copy = *cg;
    copy.dirfd = -EBADF; /* closed above; the v2 driver reopens by path */
    for (int i = 0; i < 50 && copy.ops->kill_all(&copy) > 0; i++)
        usleep(10000);
    (void) copy.ops->destroy(&copy);
    _exit(0);
}

int cdn_reaper_start(const struct cdn_cgroup *cg, int slot_fd, int *ret_fd, pid_t *ret_pid)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        (void) close(p[0]);
        (void) close(p[1]);
        return -e;
    }
    if (pid == 0) {
        (void) close(p[1]);
        reaper_main(cg, p[0], slot_fd);
    }
    (void) close(p[0]);
    *ret_fd = p[1];
    *ret_pid = pid;
    return 0;
}

void cdn_reaper_release(int *fd)
{
    if (*fd >= 0)
        (void) !write(*fd, "d", 1);
    *fd = safe_close(*fd);
}

/* This process's open file descriptions of the held files (opened as needed, kept; +1: 0 is none),
 * and the bytes it holds: a byte is one sandbox's, never two (two holders of one byte would share
 * one lock, and the first to let go would free the slot under the other). */
static int held_fds[HELD_FILES];
static uint8_t held_bits[(CDN_SLOT_COUNT + 7) / 8];

/* Whether fd is slot's lock file (what adopt takes from an init is checked, not trusted). */
static bool is_slot_file(int fd, int slot)
{
    char path[4200];
    struct stat a, b;
    (void) snprintf(path, sizeof path, "%s/slots/%d", cdn_run_dir(), slot);
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int cdn_slot_hold(struct cdn_sandbox *sb)
{
    const int s = sb->slot;
    if (sb->slot_held)
        return 0;
    if (sb->slot_fd < 0 || s < 0 || s >= CDN_SLOT_COUNT || !is_slot_file(sb->slot_fd, s))
        return -EINVAL;
    if (held_bits[s / 8] & (1u << (s % 8)))
        return 1;
    int *held = &held_fds[s / HELD_PER_FILE];
    if (*held <= 0) {
        char path[4200], name[32];
        held_name(name, sizeof name, s);
        (void) snprintf(path, sizeof path, "%s/slots/%s", cdn_run_dir(), name);
        *held = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600) + 1;
    }
    struct flock l = held_range(s, F_WRLCK);
    if (*held <= 0 || fcntl(*held - 1, F_OFD_SETLK, &l) < 0)
        return 1; /* kept as it was: its own fd (another cordond's description still holds the byte) */
    held_bits[s / 8] |= (uint8_t) (1u << (s % 8));
    sb->slot_held = true;
    sb->slot_fd = safe_close(sb->slot_fd);
    return 0;
}

void cdn_slot_let_go(struct cdn_sandbox *sb)
{
    sb->slot_fd = safe_close(sb->slot_fd);
    if (!sb->slot_held)
        return;
    struct flock l = held_range(sb->slot, F_UNLCK);
    (void) fcntl(held_fds[sb->slot / HELD_PER_FILE] - 1, F_OFD_SETLK, &l);
    held_bits[sb->slot / 8] &= (uint8_t) ~(1u << (sb->slot % 8));
    sb->slot_held = false;
}

int cdn_slot_make_cgroup(struct cdn_sandbox *sb, struct cdn_error *err)
{
    struct cdn_cgroup_limits lim = {
        .cpus = sb->spec->limits.cpus,
        .memory_bytes = sb->spec->limits.memory_mb << 20,
        .pids = sb->spec->limits.pids,
        .freezer = sb->spec->checkpoints,
    };
    int r = sb->cgroup.ops->create(&sb->cgroup, &lim, err);
    if (r < 0)
        return r;
    /* A reused directory keeps its counts: remember where they stood. A new one's start at 0 (sb may
     * be a rollback's, whose last cgroup was another slot's). */
    struct cdn_cgroup_stats st;
    sb->oom_base = sb->cpu_base = 0;
    if (r > 0 && sb->cgroup.ops->stats(&sb->cgroup, &st) == 0)
        sb->oom_base = st.oom_kills, sb->cpu_base = st.cpu_usec;
    return 0;
}

int cdn_slot_usage(struct cdn_sandbox *sb, struct cdn_usage *ret)
{
    struct cdn_cgroup_stats st = {0};
    if (!sb->cgroup.ops)
        return -ENODEV;
    int r = sb->cgroup.ops->stats(&sb->cgroup, &st);
    if (r < 0)
        return r;
    *ret = (struct cdn_usage){
        .memory_peak_bytes = st.memory_peak_bytes,
        .oom_kills = st.oom_kills - (st.oom_kills >= sb->oom_base ? sb->oom_base : 0),
        .pids_max_hits = st.pids_max_hits,
        .cpu_usec = st.cpu_usec - (st.cpu_usec >= sb->cpu_base ? sb->cpu_base : 0),
        .memory_bytes = st.memory_bytes,
        .pids = st.pids,
        .cpu_known = st.cpu_known,
        .memory_known = true,
        .pids_known = true,
    };
    return 0;
}

int cdn_slot_set_limits(struct cdn_sandbox *sb, const struct cdn_limits *l, unsigned which,
                        struct cdn_error *err)
{
    if (!sb->cgroup.ops)
        return cdn_error_set(err, ENODEV, "the sandbox has no cgroup");
    struct cdn_cgroup_limits c = {.cpus = l->cpus, .memory_bytes = l->memory_mb << 20, .pids = l->pids};
    return sb->cgroup.ops->set_limits(&sb->cgroup, &c, which, err);
}

int cdn_slot_signal(struct cdn_sandbox *sb, int sig)
{
    if (sb->init_pidfd < 0)
        return -ESRCH;
    return RET_NERRNO((int) syscall(SYS_pidfd_send_signal, sb->init_pidfd, sig, NULL, 0));
}

int cdn_slot_destroy(struct cdn_sandbox *sb, void (*release)(struct cdn_sandbox *sb))
{
    int ret = 0;
    if (sb->init_pid > 0) {
        /* A container's init is pid 1 of its namespace: the kernel reports its exit only after every
         * process in it is gone. A worker's are ended with the cgroup, below. */
        (void) cdn_slot_signal(sb, SIGKILL);
        while (waitpid(sb->init_pid, NULL, __WALL) < 0 && errno == EINTR)
            ;
        sb->init_pid = 0;
    }
    sb->init_pidfd = safe_close(sb->init_pidfd);
    sb->agent_fd = safe_close(sb->agent_fd);
    sb->setup_fd = safe_close(sb->setup_fd);
    if (sb->cgroup.ops) {
        (void) sb->cgroup.ops->kill_all(&sb->cgroup);
        /* Kept: emptied, for the next sandbox of this slot (DESIGN §6). */
        ret = sb->keep_cgroup ? 0 : sb->cgroup.ops->destroy(&sb->cgroup);
        sb->cgroup.ops = NULL;
    }
    sb->cgroup.dirfd = safe_close(sb->cgroup.dirfd); /* v2's, kept or not */
    if (release && (sb->slot_fd >= 0 || sb->slot_held))
        release(sb);
    if (ret == 0)
        cdn_reaper_release(&sb->reaper_fd);
    else
        sb->reaper_fd = safe_close(sb->reaper_fd); /* the reaper retries from its side */
    cdn_slot_let_go(sb);
    return ret;
}
