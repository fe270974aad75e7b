/* confine/privileges.h: what a sandbox's processes may hold — rlimits, capabilities, uid. Runs in the
 * process being confined (a container's setup child, a process-tier worker, a VM guest's agent for its
 * commands), before it execs what it confines. */
#include "privileges.h"

#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shared/macro.h"

int cdn_set_rlimits(uint64_t nofile, uint64_t disk_mb, struct cdn_error *err)
{
    const struct {
        int res;
        rlim_t v;
        const char *name;
    } lim[] = {
        {RLIMIT_NOFILE, nofile, "limits.nofile"},
        {RLIMIT_CORE, 0, "core"},
        /* One MiB above the disk size: inside the writable layer ENOSPC comes first (a clear
         * error, not SIGXFSZ); on read-write binds it still bounds any single file. */
        {RLIMIT_FSIZE, (rlim_t) (disk_mb + 1) << 20, "limits.disk_mb"},
    };
    for (size_t i = 0; i < ELEMENTSOF(lim); i++) {
        struct rlimit cur, want = {lim[i].v, lim[i].v};
        /* Never raise above what we were given (no CAP_SYS_RESOURCE needed). */
        if (getrlimit(lim[i].res, &cur) == 0 && cur.rlim_max != RLIM_INFINITY && cur.rlim_max < want.rlim_max)
            want.rlim_cur = want.rlim_max = cur.rlim_max;
        if (setrlimit(lim[i].res, &want) < 0)
            return cdn_error_field(err, errno, lim[i].name, "setrlimit %s: %m", lim[i].name);
    }
    return 0;
}

int cdn_drop_capabilities(uint32_t uid, struct cdn_error *err)
{
    return cdn_drop_capabilities_saved(uid, uid, err);
}

int cdn_drop_capabilities_saved(uint32_t uid, uint32_t saved_uid, struct cdn_error *err)
{
    /* Root (of a userns) keeps no capability across exec: lock that in first (needs CAP_SETPCAP, so
     * before dropping it). Another uid loses them all at setresuid. */
    unsigned long bits =
        SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
        SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED |
        (uid ? 0 : SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED);
    if (prctl(PR_SET_SECUREBITS, bits) < 0)
        return cdn_error_set(err, errno, "set securebits: %m");
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
            if (errno == EINVAL)
                break; /* past the kernel's last capability */
            return cdn_error_set(err, errno, "drop capability %d from the bounding set: %m", cap);
        }
    if (uid && (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, saved_uid) < 0))
        return cdn_error_set(err, errno, "become uid %u: %m", uid);
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return cdn_error_set(err, errno, "clear ambient capabilities: %m");
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct data[2] = {{0}};
    if (syscall(SYS_capset, &h, data) < 0)
        return cdn_error_set(err, errno, "capset: %m");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return cdn_error_set(err, errno, "no_new_privs: %m");
    return 0;
}

int cdn_drop_capabilities_keep(uint64_t keep, struct cdn_error *err)
{
    /* The ambient set is raised before SECBIT_NO_CAP_AMBIENT_RAISE locks it, so that bit comes last;
     * CAP_SETPCAP (in keep) is what sets it. */
    unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                         SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED;
    if (!(keep & (1ULL << CAP_SETPCAP)))
        return cdn_error_set(err, EINVAL, "capabilities to keep: CAP_SETPCAP is needed");
    if (prctl(PR_SET_SECUREBITS, bits) < 0)
        return cdn_error_set(err, errno, "set securebits: %m");
    for (int cap = 0; cap <= 63; cap++)
        if (!(keep & (1ULL << cap)) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
            if (errno == EINVAL)
                break;
            return cdn_error_set(err, errno, "drop capability %d from the bounding set: %m", cap);
        }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
        return cdn_error_set(err, errno, "clear ambient capabilities: %m");
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct data[2] = {{0}};
    for (int i = 0; i < 2; i++)
        data[i].permitted = data[i].effective = data[i].inheritable = (uint32_t) (keep >> (32 * i));
    if (syscall(SYS_capset, &h, data) < 0)
        return cdn_error_set(err, errno, "capset: %m");
    for (int cap = 0; cap <= 63; cap++)
        if ((keep & (1ULL << cap)) && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) < 0)
            return cdn_error_set(err, errno, "raise ambient capability %d: %m", cap);
    bits |= SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    if (prctl(PR_SET_SECUREBITS, bits) < 0)
        return cdn_error_set(err, errno, "lock securebits: %m");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return cdn_error_set(err, errno, "no_new_privs: %m");
    return 0;
}
