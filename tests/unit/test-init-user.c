/* cordon-init's file operations as a user (src/agent/init-user.c, cdn_user_fs_enter/leave), as a
 * VM guest's init runs them: root with every capability. For the operation the file system ids and
 * groups are the user's and no capability is effective (a guest keeps its capabilities across id
 * changes, so CAP_DAC_OVERRIDE would otherwise let the user's write into a root-only directory);
 * afterwards init is itself again, with its parent-death signal and dumpable flag, which the kernel
 * resets at any change of fsuid. What this catches: before the fix the parent-death signal was 0
 * after one operation as a user (a container's init no longer died with its parent), and the guest's
 * user could write where only root may. Needs root (CI runs as root); skipped otherwise. */
#include "agent/init.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* What init-user.c needs of the rest of init, for a guest that confines nothing. */
bool cdn_vm_confines(void)
{
    return false;
}
void cdn_vm_poweroff(void)
{
    abort();
}
int cdn_vm_confine_child(int sock)
{
    (void) sock;
    return 0;
}

static uint64_t effective(void)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2] = {{0}};
    if (syscall(SYS_capget, &h, d) < 0)
        return ~0ULL;
    return d[0].effective | (uint64_t) d[1].effective << 32;
}

TEST(a_file_operation_as_a_user_and_back)
{
    if (geteuid() != 0)
        return tap_skip("needs root");
    char dir[] = "/tmp/test-init-user-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char closed[64], open_dir[64], path[128];
    (void) snprintf(closed, sizeof closed, "%s/root-only", dir);
    (void) snprintf(open_dir, sizeof open_dir, "%s/users", dir);
    CHECK(mkdir(closed, 0700) == 0 && mkdir(open_dir, 0700) == 0 && chmod(open_dir, 01777) == 0 &&
          chmod(dir, 0755) == 0);
    cdn_user_guest();
    CHECK(prctl(PR_SET_PDEATHSIG, SIGUSR1, 0, 0, 0) == 0);
    CHECK(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0);
    uint64_t before = effective();
    struct cdn_user u = {.uid = 4321, .gid = 4322, .n_groups = 1, .groups = {4322}};

    CHECK_EQ_INT(cdn_user_fs_enter(&u), 0);
    CHECK_EQ_INT(setfsuid((uid_t) -1), 4321);
    CHECK_EQ_INT(setfsgid((gid_t) -1), 4322);
    CHECK(effective() == 0);
    (void) snprintf(path, sizeof path, "%s/x", closed);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    CHECK(fd < 0 && errno == EACCES); /* not with CAP_DAC_OVERRIDE still effective */
    (void) snprintf(path, sizeof path, "%s/mine", open_dir);
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0 && st.st_uid == 4321 && st.st_gid == 4322);
    if (fd >= 0)
        close(fd);
    CHECK_EQ_INT(cdn_user_fs_enter(&u), -EBUSY); /* one at a time */
    cdn_user_fs_leave();

    int sig = 0;
    CHECK(prctl(PR_GET_PDEATHSIG, &sig, 0, 0, 0) == 0 && sig == SIGUSR1);
    CHECK_EQ_INT(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0), 0);
    CHECK_EQ_INT(setfsuid((uid_t) -1), 0);
    CHECK_EQ_INT(setfsgid((gid_t) -1), 0);
    CHECK(effective() == before);
    (void) snprintf(path, sizeof path, "%s/x", closed);
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644); /* root's again */
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    cdn_user_fs_leave(); /* a second leave does nothing */
    CHECK_EQ_INT(setfsuid((uid_t) -1), 0);
    (void) prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
    char cmd[128];
    (void) snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}
