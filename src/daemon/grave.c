/* What a rollback leaves behind (box.c cdn_box_respawn), ended beside the new init rather than
 * before it: the old init with everything in its pid namespace, and the old writable layer's mount.
 *
 * A container's old processes are all killed and its init taken out of its box into a grave: it
 * keeps its slot (lock, cgroup) until its pidfd reports its end; it is then reaped, and the tier's
 * destroy() empties the cgroup and releases the slot, which is kept for the next sandbox. The new
 * init takes another slot, so nothing waits for the old pid namespace's teardown (~3 ms of unmounts
 * and RCU grace periods here). A cordond that dies with a grave open leaves a killed init and a free
 * slot's cgroup: the next one's sweep_slots() removes it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/queue.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "registry.h"
#include "confine/slot.h"
#include "shared/fd-util.h"
#include "tiers/tier.h"

struct grave {
    struct cdn_sandbox sb; /* its init, slot and cgroup; spec NULL (the box may go first) */
    struct event *ev;      /* init's pidfd: its end */
    LIST_ENTRY(grave) link;
};

static LIST_HEAD(, grave) graves = LIST_HEAD_INITIALIZER(graves);

static void bury(struct grave *g)
{
    const int slot = g->sb.slot;
    const bool kept = g->sb.keep_cgroup;
    LIST_REMOVE(g, link);
    if (g->ev)
        event_free(g->ev);
    /* Reaped through the pidfd (init may not be cordond's child after a restart): destroy() must
     * not wait on a pid number. What is left in the cgroup it kills. */
    siginfo_t si;
    (void) waitid(P_PIDFD, (id_t) g->sb.init_pidfd, &si, WEXITED | WNOHANG | __WALL);
    g->sb.init_pid = 0;
    (void) g->sb.tier->destroy(&g->sb);
    if (kept && slot >= 0)
        cdn_box_keep_slot(slot);
    free(g);
}

static void on_end(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    bury(arg);
}

int cdn_grave_add(struct cdn_sandbox *sb)
{
    if (!sb->tier->end_beside || sb->init_pidfd < 0)
        return -EOPNOTSUPP;
    struct grave *g = calloc(1, sizeof *g);
    if (!g)
        return -ENOMEM;
    g->ev = event_new(cdn_daemon->base, sb->init_pidfd, EV_READ, on_end, g);
    if (!g->ev || event_add(g->ev, NULL) < 0) {
        if (g->ev)
            event_free(g->ev);
        free(g);
        return -ENOMEM;
    }
    g->sb = *sb;
    /* The box's own, which the grave never touches. */
    g->sb.spec = NULL;
    g->sb.tier_data = g->sb.on_spawned_arg = NULL;
    g->sb.qmp_socket = NULL;
    g->sb.image_fd = g->sb.netns_fd = g->sb.fanotify_fd = g->sb.listen_fd = g->sb.stdio_fd = -EBADF;
    LIST_INSERT_HEAD(&graves, g, link);
    /* Every process at once, not only init (the rest would run on until init's end reached them,
     * unguarded: the box's guard and monitor are gone). */
    (void) sb->tier->kill(&g->sb, SIGKILL);
    if (g->sb.cgroup.ops)
        (void) g->sb.cgroup.ops->kill_all(&g->sb.cgroup);
    /* What is the grave's now leaves sb; the rest (its netns, image hold, fanotify) stays the box's. */
    sb->init_pid = 0;
    sb->init_pidfd = sb->agent_fd = sb->setup_fd = sb->slot_fd = sb->reaper_fd = -EBADF;
    sb->slot_held = false;
    sb->cgroup.ops = NULL;
    sb->cgroup.dirfd = -EBADF;
    sb->slot = -1;
    return 0;
}

void cdn_grave_flush(void)
{
    /* Each killed init's end, 2 s at most for all: one stuck (a process in D state) is left to the
     * next cordond's sweep_slots(), its slot not kept. */
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += 2;
    while (!LIST_EMPTY(&graves)) {
        struct grave *g = LIST_FIRST(&graves);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = (long) (until.tv_sec - now.tv_sec) * 1000 + (until.tv_nsec - now.tv_nsec) / 1000000;
        struct pollfd p = {.fd = g->sb.init_pidfd, .events = POLLIN};
        if (ms > 0 && poll(&p, 1, (int) ms) == 1) {
            bury(g);
            continue;
        }
        LIST_REMOVE(g, link);
        event_free(g->ev);
        g->sb.init_pidfd = safe_close(g->sb.init_pidfd);
        cdn_slot_let_go(&g->sb);
        g->sb.cgroup.dirfd = safe_close(g->sb.cgroup.dirfd);
        free(g);
    }
}

/* ---- the closer: one thread, for good, that closes the fds it is sent (closer[1]) ---- */

static int closer[2] = {-1, -1};

static void *closer_main(void *arg)
{
    (void) arg;
    for (;;) {
        int fd;
        ssize_t n = read(closer[0], &fd, sizeof fd);
        if (n == (ssize_t) sizeof fd) {
            cdn_layer_discard(fd);
            (void) close(fd);
        } else if (n == 0 || (n < 0 && errno != EINTR))
            return NULL;
    }
}

/* A layer's mount (root: a directory of it) that nobody reads again, shut down and closed by the
 * closer: its shutdown (~1 ms) and the unmount its close makes are paid while the caller goes on.
 * One thread made once and never ended, which only reads, shuts down and closes: no thread is born
 * or ends beside the children cordond clones (whose libc, or a sanitizer's, could find a lock held),
 * and none holds a lock. */
void cdn_grave_layer(int fd)
{
    static bool started;
    if (fd < 0)
        return;
    if (!started) {
        started = true;
        pthread_attr_t attr;
        pthread_t t;
        bool ok = pipe2(closer, O_CLOEXEC) == 0 && pthread_attr_init(&attr) == 0;
        if (ok) {
            ok = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
                 pthread_create(&t, &attr, closer_main, NULL) == 0;
            (void) pthread_attr_destroy(&attr);
        }
        if (ok)
            (void) fcntl(closer[1], F_SETFL, O_NONBLOCK); /* full: closed here, below */
        else
            closer[0] = safe_close(closer[0]), closer[1] = safe_close(closer[1]);
    }
    if (closer[1] < 0 || write(closer[1], &fd, sizeof fd) != (ssize_t) sizeof fd)
        (void) close(fd);
}
