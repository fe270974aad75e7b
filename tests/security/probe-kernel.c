/*
 * Kernel control probes: the sysctl and sysfs knobs that make the host kernel run a program of our choice
 * (core_pattern, modprobe, uevent_helper, a cgroup v1 release_agent), the masked /proc files, and the
 * syscalls that load code into or reboot the kernel. Files are opened for write and closed, never written.
 * Syscalls are given arguments the kernel rejects right after its permission check (bad module image, invalid
 * reboot magic, invalid kexec flags, nonexistent swap file), so a permitted call fails with
 * EINVAL/ENOENT/EBADF: still "escaped".
 */
#include "probe.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/klog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/swap.h>
#include <sys/syscall.h>
#include <time.h>

#define NONEXISTENT "/nonexistent-cordon-probe/file"

/* read-only /proc/sys or sysfs (EROFS), owned by the host's root (EACCES), masked or absent (ENOENT) */
#define KNOB_DENIALS EROFS, EACCES, EPERM, ENOENT

/* core_pattern, modprobe, sysrq-trigger, uevent_helper: contained iff open(O_WRONLY) fails with KNOB_DENIALS
 */
PROBE_FN(sysctl_core_pattern_write)
{
    PROBE_JUDGE_OPEN(res, "/proc/sys/kernel/core_pattern", O_WRONLY, KNOB_DENIALS);
}

PROBE_FN(sysctl_modprobe_write)
{
    PROBE_JUDGE_OPEN(res, "/proc/sys/kernel/modprobe", O_WRONLY, KNOB_DENIALS);
}

PROBE_FN(sysrq_trigger_write)
{
    PROBE_JUDGE_OPEN(res, "/proc/sysrq-trigger", O_WRONLY, KNOB_DENIALS);
}

PROBE_FN(uevent_helper_write)
{
    PROBE_JUDGE_OPEN(res, "/sys/kernel/uevent_helper", O_WRONLY, KNOB_DENIALS);
}

/*
 * The /proc files the OCI defaults mask (kernel memory, keys, timers). Per file: contained iff the open fails
 * with EACCES/EPERM/ENOENT (the monitor refuses it) or what opens is not procfs's (a bind mask: /dev/null, an
 * empty file); escaped when the real file opens. Nothing is read.
 */
PROBE_FN(proc_masked_read)
{
    static const char *const paths[] = {"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
                                        "/proc/latency_stats"};

    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        _cleanup_close_ int fd = open(paths[i], O_RDONLY | O_CLOEXEC | O_NOCTTY);
        struct stat st;
        struct statfs fs;

        if (fd < 0)
            PROBE_JUDGE(res, paths[i], -1, errno, EACCES, EPERM, ENOENT);
        else if ((fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) ||
                 (fstatfs(fd, &fs) == 0 && fs.f_type != 0x9fa0))
            probe_contained(res, "%s:masked", paths[i]); /* 0x9fa0: PROC_SUPER_MAGIC */
        else
            probe_escaped(res, "%s:readable", paths[i]);
    }
}

/* module_*: contained iff EPERM (no CAP_SYS_MODULE, seccomp) or ENOSYS (no module support) */
PROBE_FN(module_init)
{
    long r = syscall(SYS_init_module, NULL, 0UL, "");
    int err = errno;

    PROBE_JUDGE(res, "init_module(empty-image)", r, err, EPERM, ENOSYS);
}

PROBE_FN(module_finit)
{
    long r = syscall(SYS_finit_module, -1, "", 0);
    int err = errno;

    PROBE_JUDGE(res, "finit_module(fd=-1)", r, err, EPERM, ENOSYS);
}

PROBE_FN(module_delete)
{
    long r = syscall(SYS_delete_module, "cordon_probe_no_such_module", O_NONBLOCK);
    int err = errno;

    PROBE_JUDGE(res, "delete_module(no-such)", r, err, EPERM, ENOSYS);
}

/*
 * kexec_load with an unknown flag bit, too many segments and a NULL segment list: three reasons for
 * EINVAL/EFAULT after the CAP_SYS_BOOT check; nr_segments != 0, so it can never mean "unload". contained iff
 * EPERM/ENOSYS
 */
PROBE_FN(kexec_load_invalid)
{
    long r = syscall(SYS_kexec_load, 0UL, 1000UL, NULL, 0x8000UL);
    int err = errno;

    PROBE_JUDGE(res, "kexec_load", r, err, EPERM, ENOSYS);
}

/* Bad fds and an unknown flag (never KEXEC_FILE_UNLOAD). contained iff EPERM/ENOSYS */
PROBE_FN(kexec_file_load_invalid)
{
    long r = syscall(SYS_kexec_file_load, -1, -1, 0UL, NULL, 0x80000000UL);
    int err = errno;

    PROBE_JUDGE(res, "kexec_file_load", r, err, EPERM, ENOSYS);
}

/* Both magic numbers and the command are wrong: EINVAL right after the CAP_SYS_BOOT check. contained iff
 * EPERM */
PROBE_FN(reboot_invalid_magic)
{
    long r = syscall(SYS_reboot, 0x0badc0de, 0x0badc0de, 0x0badc0deU, NULL);
    int err = errno;

    PROBE_JUDGE(res, "reboot(bad-magic)", r, err, EPERM);
}

/* contained iff EPERM (CAP_SYS_ADMIN is checked before the path) */
PROBE_FN(swapon_nonexistent)
{
    int r = swapon(NONEXISTENT, 0);
    int err = errno;

    PROBE_JUDGE(res, "swapon", r, err, EPERM);
}

/*
 * CLOCK_MONOTONIC cannot be set at all: the kernel answers EINVAL to everyone, so only a seccomp filter can
 * make this EPERM. contained iff EPERM (the filter stopped the clock_settime family); EINVAL means it reached
 * the kernel. CLOCK_REALTIME is never touched.
 */
PROBE_FN(clock_settime_monotonic)
{
    struct timespec ts;
    int r, err;

    (void) clock_gettime(CLOCK_MONOTONIC, &ts);
    r = clock_settime(CLOCK_MONOTONIC, &ts);
    err = errno;
    PROBE_JUDGE(res, "clock_settime(MONOTONIC)", r, err, EPERM);
}

/* A 65-byte name is EINVAL right after the CAP_SYS_ADMIN check; the hostname never changes. contained iff
 * EPERM */
PROBE_FN(sethostname_invalid)
{
    char name[65];
    int r, err;

    memset(name, 'x', sizeof(name));
    r = sethostname(name, sizeof(name));
    err = errno;
    PROBE_JUDGE(res, "sethostname(len=65)", r, err, EPERM);
}

/* I/O privilege level 3 gives raw port access. contained iff EPERM/ENOSYS */
PROBE_FN(iopl_raise)
{
#ifdef SYS_iopl
    long r = syscall(SYS_iopl, 3);
    int err = errno;

    PROBE_JUDGE(res, "iopl(3)", r, err, EPERM, ENOSYS);
#else
    probe_contained(res, "no-iopl-on-this-arch");
#endif
}

/* Process accounting to a nonexistent file: ENOENT after the CAP_SYS_PACCT check. contained iff EPERM/ENOSYS
 */
PROBE_FN(acct_nonexistent)
{
    int r = acct(NONEXISTENT);
    int err = errno;

    PROBE_JUDGE(res, "acct", r, err, EPERM, ENOSYS);
}

/* The host kernel log. contained iff syslog(READ_ALL) fails with EPERM and /dev/kmsg cannot be opened */
PROBE_FN(syslog_read)
{
    char buf[64];
    int r = klogctl(3 /* SYSLOG_ACTION_READ_ALL */, buf, sizeof(buf));
    int err = errno;

    PROBE_JUDGE(res, "syslog", r, err, EPERM);
    PROBE_JUDGE_OPEN(res, "/dev/kmsg", O_RDONLY | O_NONBLOCK, ENOENT, EACCES, EPERM);
}

/* Options that attach to an existing v1 hierarchy: its superopts without rw/ro, if they are plain
 * controllers. */
static int pick_v1_opts(const struct probe_mount *m, void *userdata)
{
    char *opts = userdata;

    if (strcmp(m->fstype, "cgroup") != 0 || strchr(m->superopts, '='))
        return 0;
    if (strncmp(m->superopts, "rw,", 3) != 0 && strncmp(m->superopts, "ro,", 3) != 0)
        return 0;
    (void) snprintf(opts, 128, "%s", m->superopts + 3);
    return 1;
}

static int open_release_agents(const struct probe_mount *m, void *userdata)
{
    struct probe_result *res = userdata;
    char path[PATH_MAX];

    if (strcmp(m->fstype, "cgroup") != 0)
        return 0;
    (void) snprintf(path, sizeof(path), "%s/release_agent", m->target);
    PROBE_JUDGE_OPEN(res, path, O_WRONLY, KNOB_DENIALS);
    return 0;
}

/* Mount a v1 hierarchy (an existing one when possible) on scratch, look for its release_agent, detach it. */
static void mount_v1_hierarchy(const struct probe_ctx *ctx, struct probe_result *res)
{
    char dir[PATH_MAX], agent[PATH_MAX + 16], opts[128] = "none,name=cordon-probe";
    int r, err;

    if (probe_scratch_make(ctx, dir, sizeof(dir)) < 0) {
        probe_contained(res, "mount:no-scratch-dir");
        return;
    }
    (void) probe_for_each_mount(pick_v1_opts, opts);
    r = mount("cgroup", dir, "cgroup", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts);
    err = errno;
    PROBE_JUDGE(res, "mount-cgroup-v1", r, err, EPERM, EACCES);
    if (r == 0) {
        (void) snprintf(agent, sizeof(agent), "%s/release_agent", dir);
        PROBE_JUDGE_OPEN(res, agent, O_WRONLY, KNOB_DENIALS);
        if (umount2(dir, MNT_DETACH) < 0)
            probe_escaped(res, "umount:%s", probe_errname(errno));
    }
    probe_scratch_remove(dir);
}

/*
 * CVE-2022-0492: the root of a cgroup v1 hierarchy has a release_agent the kernel runs as host root.
 * contained iff no visible v1 hierarchy has a release_agent we can open for write (EROFS/EACCES/EPERM/ENOENT)
 * and mounting a v1 hierarchy fails with EPERM/EACCES.
 */
PROBE_FN(cgroup_release_agent)
{
    int r = probe_for_each_mount(open_release_agents, res);

    if (r < 0)
        probe_contained(res, "mountinfo:%s", probe_errname(-r));
    mount_v1_hierarchy(ctx, res);
}

const struct probe_def probe_defs_kernel[] = {
    PROBE_ENTRY("kernel", sysctl_core_pattern_write),
    PROBE_ENTRY("kernel", sysctl_modprobe_write),
    PROBE_ENTRY("kernel", sysrq_trigger_write),
    PROBE_ENTRY("kernel", uevent_helper_write),
    PROBE_ENTRY("kernel", proc_masked_read),
    PROBE_ENTRY("kernel", module_init),
    PROBE_ENTRY("kernel", module_finit),
    PROBE_ENTRY("kernel", module_delete),
    PROBE_ENTRY("kernel", kexec_load_invalid),
    PROBE_ENTRY("kernel", kexec_file_load_invalid),
    PROBE_ENTRY("kernel", reboot_invalid_magic),
    PROBE_ENTRY("kernel", swapon_nonexistent),
    PROBE_ENTRY("kernel", clock_settime_monotonic),
    PROBE_ENTRY("kernel", sethostname_invalid),
    PROBE_ENTRY("kernel", iopl_raise),
    PROBE_ENTRY("kernel", acct_nonexistent),
    PROBE_ENTRY("kernel", syslog_read),
    PROBE_ENTRY("kernel", cgroup_release_agent),
    {0},
};
