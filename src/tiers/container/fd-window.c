/* SPDX-License-Identifier: see repository LICENSE */
/* The setup child's fds, placed low (issue 25).
 *
 * A clone copies its parent's whole fd table, and the setup child then closes all but its own. With
 * thousands of live sandboxes cordond holds tens of thousands of fds, and that copy and those
 * closes (filp_close of each: dnotify_flush, locks_remove_posix, fput) were the largest part of a
 * create that grew with the number of live sandboxes: ~1.9 ms of it with 3,000 alive.
 *
 * So a long-lived process reserves a window of low fds at its start (cdn_container_fd_window). A
 * create puts the child's fds there and clones with CLONE_FILES: the child shares the table, and
 * its first call, close_range(above the window, ~0, CLOSE_RANGE_UNSHARE), gives it a table of its
 * own holding only the fds below that (the kernel copies just those; nothing of the parent's is
 * closed). The parent waits until the child has its own table (kcmp) and fills the window with
 * placeholders again, before anything waits for EOF on the child's ends. The child runs only
 * cordon's own code until then: nothing of the sandbox's can reach the shared table. */
#include "container-internal.h"
#include "shared/fd-util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/kcmp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int window[CDN_FD_WINDOW];
static int placeholder = -1;
static int top = -1; /* the highest fd of the window; -1: none */

int cdn_container_fd_window(void)
{
    if (top >= 0)
        return 0;
    /* Both calls the scheme needs: close_range's unshare (Linux 5.9) and kcmp (CONFIG_KCMP). */
    if (syscall(SYS_close_range, ~0U, ~0U, CLOSE_RANGE_UNSHARE) < 0)
        return -errno;
    pid_t me = getpid();
    if (syscall(SYS_kcmp, me, me, KCMP_FILES, 0, 0) != 0)
        return errno ? -errno : -ENOTSUP;
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0)
        return -errno;
    int hi = null;
    for (int i = 0; i < CDN_FD_WINDOW; i++) {
        window[i] = fcntl(null, F_DUPFD_CLOEXEC, 0);
        if (window[i] < 0) {
            int e = -errno;
            while (i-- > 0)
                (void) close(window[i]);
            (void) close(null);
            return e;
        }
        hi = window[i] > hi ? window[i] : hi;
    }
    placeholder = null;
    top = hi;
    return 0;
}

int cdn_fd_window_place(int *const fds[], size_t n)
{
    if (top < 0 || n > CDN_FD_WINDOW)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (*fds[i] >= 0) {
            if (dup3(*fds[i], window[i], O_CLOEXEC) < 0)
                return -errno;
            *fds[i] = window[i];
        }
    return top + 1;
}

int cdn_fd_window_unshare(int from)
{
    return from < 0 ? 0
                    : RET_NERRNO((int) syscall(SYS_close_range, (unsigned) from, ~0U, CLOSE_RANGE_UNSHARE));
}

void cdn_fd_window_release(pid_t child)
{
    if (top < 0)
        return;
    /* The child's first call unshares: it has, unless it has not run yet. At most a second; past
     * it the window is emptied anyway, and a child that unshares later finds no fds of its own
     * there and fails its setup (nothing of the parent's is exposed by that). */
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t me = getpid();
    long same = 1;
    while (child > 0 && (same = syscall(SYS_kcmp, me, child, KCMP_FILES, 0, 0)) == 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 1)
            break;
        sched_yield();
    }
    for (int i = 0; i < CDN_FD_WINDOW; i++)
        (void) dup3(placeholder, window[i], O_CLOEXEC);
    /* kcmp refused (not ESRCH: the child is gone): it cannot tell when a child has its own table, so
     * later creates copy the table as without a window. */
    if (child > 0 && same < 0 && errno != ESRCH)
        top = -1;
}
