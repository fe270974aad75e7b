/* Slot locks (confine/slot.h) in a temporary run directory: cordond's hold of a slot without an fd
 * of its own keeps the slot taken after the lock file's last holder (init) is gone.
 *
 * What it catches: with the check of the held files (<run>/slots/held-K) left out of cdn_slot_lock,
 * slot_held_is_taken fails at its first -EBUSY check: the slot of a sandbox whose init has ended would
 * be given to a new sandbox (its uids and cgroup shared) while cordond still cleans the old one up. */
#include "confine/slot.h"
#include "core/sandbox.h"
#include "shared/fd-util.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char run[64];

static int slots_dir(void)
{
    static int fd = -EBADF;
    if (fd < 0) {
        (void) snprintf(run, sizeof run, "/tmp/cordon-slottest-XXXXXX");
        if (!mkdtemp(run))
            return -errno;
        (void) setenv("CORDON_RUN_DIR", run, 1);
        char dir[128];
        (void) snprintf(dir, sizeof dir, "%s/slots", run);
        (void) mkdir(dir, 0700);
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    return fd;
}

/* Whether another process finds slot taken. */
static bool taken_elsewhere(int slot)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = cdn_slot_lock(slots_dir(), slot);
        _exit(fd == -EBUSY ? 0 : 1);
    }
    int st = 0;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Whether this process may lock slot now (then let it go again). */
static bool free_here(int dir, int slot)
{
    int fd = cdn_slot_lock(dir, slot);
    if (fd >= 0)
        (void) close(fd);
    return fd >= 0;
}

TEST(slot_lock_is_exclusive)
{
    int dir = slots_dir();
    CHECK(dir >= 0);
    int a = cdn_slot_lock(dir, 7);
    CHECK(a >= 0);
    CHECK_EQ_INT(cdn_slot_lock(dir, 7), -EBUSY);
    CHECK(taken_elsewhere(7));
    (void) close(a);
    CHECK(free_here(dir, 7));
}

TEST(slot_held_is_taken)
{
    int dir = slots_dir();
    struct cdn_sandbox sb = {.slot = 11, .slot_fd = cdn_slot_lock(dir, 11)};
    CHECK(sb.slot_fd >= 0);
    /* init's copy of the lock (fd 8), which it drops when it ends */
    int init_copy = dup(sb.slot_fd);
    /* a second holder of the byte (the same init attached twice) keeps its own fd: the first one's
     * let-go must not free the slot under it */
    struct cdn_sandbox twin = {.slot = 11, .slot_fd = dup(sb.slot_fd)};
    CHECK_EQ_INT(cdn_slot_hold(&sb), 0);
    CHECK_EQ_INT(cdn_slot_hold(&twin), 1);
    CHECK(!twin.slot_held && twin.slot_fd >= 0);
    cdn_slot_let_go(&twin);
    CHECK(sb.slot_held);
    CHECK_EQ_INT(sb.slot_fd, -EBADF);
    (void) close(init_copy);
    /* No fd of the slot's file is open anywhere: the held byte alone keeps it taken, here and in
     * another process. */
    CHECK_EQ_INT(cdn_slot_lock(dir, 11), -EBUSY);
    CHECK(taken_elsewhere(11));
    /* Another slot is untouched by it. */
    CHECK(free_here(dir, 12));
    cdn_slot_let_go(&sb);
    CHECK(!sb.slot_held);
    CHECK(free_here(dir, 11));
}

/* Slots of other held files (128 to a file) are held and told apart the same way. */
TEST(slot_held_in_other_files)
{
    int dir = slots_dir();
    struct cdn_sandbox a = {.slot = 300, .slot_fd = cdn_slot_lock(dir, 300)};
    struct cdn_sandbox b = {.slot = CDN_SLOT_COUNT - 1, .slot_fd = cdn_slot_lock(dir, CDN_SLOT_COUNT - 1)};
    CHECK_EQ_INT(cdn_slot_hold(&a), 0);
    CHECK_EQ_INT(cdn_slot_hold(&b), 0);
    CHECK_EQ_INT(cdn_slot_lock(dir, 300), -EBUSY);
    CHECK_EQ_INT(cdn_slot_lock(dir, CDN_SLOT_COUNT - 1), -EBUSY);
    CHECK(taken_elsewhere(300));
    /* the same byte of the first file, and the next slot, are not held */
    CHECK(free_here(dir, 300 % 128) && free_here(dir, 301));
    cdn_slot_let_go(&a);
    cdn_slot_let_go(&b);
    CHECK(free_here(dir, 300));
}

TEST(slot_acquire_skips_held)
{
    int dir = slots_dir();
    struct cdn_sandbox sb = {.slot = 3, .slot_fd = cdn_slot_lock(dir, 3)};
    CHECK(sb.slot_fd >= 0);
    /* what an adopted init's fd 8 must be: the lock file of its record's slot */
    struct cdn_sandbox wrong = {.slot = 4, .slot_fd = sb.slot_fd};
    CHECK_EQ_INT(cdn_slot_hold(&wrong), -EINVAL);
    CHECK(!wrong.slot_held && wrong.slot_fd == sb.slot_fd);
    CHECK_EQ_INT(cdn_slot_hold(&sb), 0);
    CHECK(sb.slot_held);
    int slot = -1, fd = -EBADF;
    struct cdn_error err = {0};
    /* The hint names the held slot: another is given. */
    CHECK_EQ_INT(cdn_slot_acquire(run, 3, &slot, &fd, &err), 0);
    CHECK(slot >= 0 && slot != 3);
    (void) close(fd);
    cdn_slot_let_go(&sb);
    CHECK_EQ_INT(cdn_slot_acquire(run, 3, &slot, &fd, &err), 0);
    CHECK_EQ_INT(slot, 3);
    (void) close(fd);
    char cmd[128];
    (void) snprintf(cmd, sizeof cmd, "rm -rf %s", run);
    CHECK_EQ_INT(system(cmd), 0);
}
