/* cordon-init: the user a command runs as (CDN_EXEC_USER), and the capabilities that takes.
 *
 * A container's init is exec'd with CDN_INIT_CAPS ambient (setup.c, confine/privileges.h); nothing
 * else of the sandbox holds a capability. cdn_init_caps_settle() runs first thing in init: the
 * ambient and inheritable sets go (a command inherits nothing by exec), CAP_KILL stays effective
 * (init signals commands of any uid: timeouts, SIGNAL, QUIESCE) and the rest permitted only.
 * cdn_user_become() runs in each command's forked child, before its exec: it takes the user on
 * (setgroups, setresgid, setresuid), then clears every set — bounding, ambient, permitted,
 * effective, inheritable — and checks that they are empty, or the command does not run. Where init
 * holds none of them (the process tier's worker) both do nothing and a command with a user is
 * refused. A VM guest's init is the guest's root: there the ids change first, and
 * cdn_vm_confine_child takes every capability (become_in_guest). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <stdio.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "init.h"
#include "shared/fd-util.h"

#define CAP_BIT(c) (1ULL << (c))
#define INIT_CAPS  (CAP_BIT(CAP_SETUID) | CAP_BIT(CAP_SETGID) | CAP_BIT(CAP_SETPCAP) | CAP_BIT(CAP_KILL))

static bool holds_caps;
static bool guest; /* a VM guest's init: the guest's root, every capability (cdn_user_guest) */

void cdn_user_guest(void)
{
    guest = true;
}

static int caps_get(uint64_t *ret_p, uint64_t *ret_e, uint64_t *ret_i)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2] = {{0}};
    if (syscall(SYS_capget, &h, d) < 0)
        return -errno;
    *ret_p = d[0].permitted | (uint64_t) d[1].permitted << 32;
    *ret_e = d[0].effective | (uint64_t) d[1].effective << 32;
    *ret_i = d[0].inheritable | (uint64_t) d[1].inheritable << 32;
    return 0;
}

static int caps_set(uint64_t p, uint64_t e)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2] = {{0}};
    for (int i = 0; i < 2; i++) {
        d[i].permitted = (uint32_t) (p >> (32 * i));
        d[i].effective = (uint32_t) (e >> (32 * i));
    }
    return syscall(SYS_capset, &h, d) < 0 ? -errno : 0;
}

void cdn_init_caps_settle(void)
{
    uint64_t p = 0, e = 0, i = 0;
    /* Not cdn_vm_guest(): that asks once, before the guest's setup opens the agent's port. */
    if (caps_get(&p, &e, &i) < 0 || (p & INIT_CAPS) != INIT_CAPS)
        return;
    (void) prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    holds_caps = caps_set(INIT_CAPS, CAP_BIT(CAP_KILL)) == 0;
}

/* The highest id of the sandbox's uid and gid maps (both must map it). */
static int id_max(uint32_t *ret)
{
    const char *files[] = {"/proc/self/uid_map", "/proc/self/gid_map"};
    uint32_t max = CDN_USER_ID_MAX;
    for (size_t k = 0; k < 2; k++) {
        char buf[512];
        _cleanup_close_ int fd = open(files[k], O_RDONLY | O_CLOEXEC);
        ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
        uint32_t m;
        if (n <= 0)
            return -EIO;
        buf[n] = 0;
        if (cdn_user_map_max(buf, &m) < 0)
            return -EINVAL;
        max = m < max ? m : max;
    }
    *ret = max;
    return 0;
}

int cdn_user_lookup(const char *spec, struct cdn_user *ret, struct cdn_error *err)
{
    uint32_t max;
    if (!holds_caps && !guest)
        return cdn_error_field(err, EOPNOTSUPP, "user", "user: this sandbox's init cannot change users");
    int r = id_max(&max);
    if (r < 0)
        return cdn_error_field(err, -r, "user", "user: read the sandbox's id maps: %s", strerror(-r));
    _cleanup_close_ int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return cdn_error_field(err, errno, "user", "user: open the sandbox's root: %m");
    return cdn_user_resolve_at(root, spec, max, ret, err);
}

/* Every set empty: what cdn_user_become promises before the exec. */
static bool caps_empty(void)
{
    uint64_t p = 0, e = 0, i = 0;
    if (caps_get(&p, &e, &i) < 0 || p || e || i)
        return false;
    for (int cap = 0; cap <= 63; cap++) {
        int b = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
        if (b < 0)
            break; /* past the kernel's last capability */
        if (b > 0 || prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) != 0)
            return false;
    }
    return true;
}

/* In a guest: the ids change with every capability kept (SECBIT_NO_SETUID_FIXUP), since
 * cdn_vm_confine_child, next, needs CAP_SETPCAP to drop them all and lock that; a command that is
 * not confined drops them here. */
static int become_in_guest(const struct cdn_user *u)
{
    if (!u)
        return 0;
    if (prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP) < 0 || setgroups(u->n_groups, u->groups) < 0 ||
        setresgid(u->gid, u->gid, u->gid) < 0 || setresuid(u->uid, u->uid, u->uid) < 0)
        return -errno;
    if (cdn_vm_confines())
        return 0;
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno == EINVAL)
            break;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 || caps_set(0, 0) < 0)
        return -errno;
    return caps_empty() ? 0 : -EPERM;
}

/* A file operation as a user (cdn_user_fs_enter/leave): the ids and groups that decide its
 * permission checks and own what it makes become the user's, and no capability is effective, so
 * it can do what the user could and no more (a guest's init would keep CAP_DAC_OVERRIDE and the
 * rest across the id change: SECBIT_NO_SETUID_FIXUP). A change of fsuid or fsgid also goes through
 * the kernel's commit_creds, which clears the parent-death signal and sets the dumpable flag to
 * fs.suid_dumpable: both are put back, and a parent that died meanwhile ends init as that signal
 * would have. */
#define ID_CAPS (CAP_BIT(CAP_SETUID) | CAP_BIT(CAP_SETGID))

static struct {
    bool on;
    uint64_t p, e;
    int n_groups;
    gid_t groups[CDN_USER_MAX_GROUPS];
    uid_t fsuid;
    gid_t fsgid;
    int dumpable, pdeathsig;
    pid_t ppid;
} fs_saved;

int cdn_user_fs_enter(const struct cdn_user *u)
{
    uint64_t i;
    if (fs_saved.on)
        return -EBUSY;
    if (!holds_caps && !guest)
        return -EOPNOTSUPP;
    if (caps_get(&fs_saved.p, &fs_saved.e, &i) < 0 || (fs_saved.p & ID_CAPS) != ID_CAPS)
        return -EPERM;
    fs_saved.n_groups = getgroups(CDN_USER_MAX_GROUPS, fs_saved.groups);
    fs_saved.fsuid = (uid_t) setfsuid((uid_t) -1);
    fs_saved.fsgid = (gid_t) setfsgid((gid_t) -1);
    fs_saved.dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
    fs_saved.pdeathsig = 0;
    fs_saved.ppid = getppid();
    if (fs_saved.n_groups < 0 || prctl(PR_GET_PDEATHSIG, &fs_saved.pdeathsig, 0, 0, 0) < 0 ||
        caps_set(fs_saved.p, fs_saved.e | ID_CAPS) < 0)
        return -EPERM;
    fs_saved.on = true;
    /* setfsuid and setfsgid answer the old id whether or not they changed it: asking again with
     * -1 tells. */
    if (setgroups(u->n_groups, u->groups) < 0 ||
        (setfsgid(u->gid), (uint32_t) setfsgid((gid_t) -1) != u->gid) ||
        (setfsuid(u->uid), (uint32_t) setfsuid((uid_t) -1) != u->uid) ||
        caps_set(fs_saved.p, u->uid ? 0 : fs_saved.e) < 0) {
        cdn_user_fs_leave();
        return -EPERM;
    }
    return 0;
}

void cdn_user_fs_leave(void)
{
    if (!fs_saved.on)
        return;
    const char *why = NULL;
    if (caps_set(fs_saved.p, fs_saved.e | ID_CAPS) < 0 ||
        (setfsuid(fs_saved.fsuid), setfsuid((uid_t) -1) != (int) fs_saved.fsuid) ||
        (setfsgid(fs_saved.fsgid), setfsgid((gid_t) -1) != (int) fs_saved.fsgid) ||
        setgroups((size_t) fs_saved.n_groups, fs_saved.groups) < 0 || caps_set(fs_saved.p, fs_saved.e) < 0 ||
        prctl(PR_SET_DUMPABLE, fs_saved.dumpable == 1, 0, 0, 0) < 0 ||
        (fs_saved.pdeathsig > 0 && prctl(PR_SET_PDEATHSIG, fs_saved.pdeathsig, 0, 0, 0) < 0))
        why = "cordon-init: cannot take its own ids back after a file operation\n";
    else if (fs_saved.pdeathsig > 0 && getppid() != fs_saved.ppid)
        why = "cordon-init: its parent died during a file operation\n";
    if (why) { /* init cannot go on as another, nor outlive its parent: the sandbox ends */
        (void) !write(STDERR_FILENO, why, strlen(why));
        if (guest)
            cdn_vm_poweroff();
        _exit(70);
    }
    fs_saved.on = false;
}

int cdn_user_become(const struct cdn_user *u)
{
    if (guest)
        return become_in_guest(u);
    if (!holds_caps)
        return u ? -EOPNOTSUPP : 0;
    if (caps_set(INIT_CAPS, INIT_CAPS) < 0)
        return -errno;
    /* SECBIT_NO_SETUID_FIXUP (locked by setup.c) keeps the sets across setresuid: they are
     * cleared below, by hand, for root and non-root alike. */
    if (u && (setgroups(u->n_groups, u->groups) < 0 || setresgid(u->gid, u->gid, u->gid) < 0 ||
              setresuid(u->uid, u->uid, u->uid) < 0))
        return -errno;
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
            if (errno == EINVAL)
                break;
            return -errno;
        }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 || caps_set(0, 0) < 0)
        return -errno;
    return caps_empty() ? 0 : -EPERM;
}
