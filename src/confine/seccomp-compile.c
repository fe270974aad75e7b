/* Compile the policy of seccomp-policy.c to BPF with libseccomp.
 *
 * Only the full build links this (and libseccomp): the lean static cordon
 * reads the BPF that this wrote into the cache, see seccomp.c. */
#include "seccomp-policy.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shared/fd-util.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
/* Namespace-creating clone flags. CLONE_NEWTIME shares its bit with the exit
 * signal in clone(2) and is only honoured by clone3, which is ENOSYS here. */
#define NS_FLAGS                                                                                             \
    ((uint64_t) (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |   \
                 CLONE_NEWCGROUP))

static void ctx_releasep(scmp_filter_ctx *ctx)
{
    if (*ctx)
        seccomp_release(*ctx);
}

static bool is_reported_name(const char *name)
{
    for (size_t i = 0; i < cdn_seccomp_n_reported; i++)
        if (strcmp(cdn_seccomp_reported[i], name) == 0)
            return true;
    return false;
}

static int add_allowed(scmp_filter_ctx ctx, bool writes, struct cdn_error *err)
{
    bool monitor = writes && cdn_seccomp_monitor_enabled();
    for (size_t i = 0; i < cdn_seccomp_n_allowed; i++) {
        int nr = seccomp_syscall_resolve_name(cdn_seccomp_allowed[i]);
        if (nr == __NR_SCMP_ERROR)
            continue; /* not on this arch */
        if (monitor && is_reported_name(cdn_seccomp_allowed[i]))
            continue; /* add_reported(): an unconditional ALLOW would override its rules */
        if (cdn_seccomp_monitor_enabled() && cdn_seccomp_is_watch(nr))
            continue; /* add_watched(): the supervisor adds the watch (src/monitor/watch.h) */
        int r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
        if (r < 0)
            return cdn_error_set(err, r, "seccomp: allow %s: %s", cdn_seccomp_allowed[i], strerror(-r));
    }
    return 0;
}

static int add_filtered(scmp_filter_ctx ctx, struct cdn_error *err)
{
    int r = 0;
    /* clone without namespace flags; clone3 says ENOSYS so libc falls back to clone. */
    r |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, NS_FLAGS, 0));
    r |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    /* sockets: unix, TCP/UDP over IPv4/6, and rtnetlink (glibc's getaddrinfo
     * asks it which address families are configured). No raw, packet or other netlink. */
    r |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
    const int inet[] = {AF_INET, AF_INET6}, types[] = {SOCK_STREAM, SOCK_DGRAM};
    for (size_t f = 0; f < 2; f++)
        for (size_t t = 0; t < 2; t++)
            r |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 2, SCMP_A0(SCMP_CMP_EQ, inet[f]),
                                  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, types[t]));
    r |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 2, SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
                          SCMP_A2(SCMP_CMP_EQ, NETLINK_ROUTE));
    /* personality: only the values Docker's profile admits (query, PER_LINUX, ADDR_NO_RANDOMIZE…). */
    const uint64_t personas[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};
    for (size_t i = 0; i < ELEMENTSOF(personas); i++)
        r |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(personality), 1,
                              SCMP_A0(SCMP_CMP_EQ, personas[i]));
    if (r)
        return cdn_error_set(err, EINVAL, "seccomp: adding argument filters failed");
    return 0;
}

/* The watched denials go to the supervisor (SECCOMP_RET_USER_NOTIF), which
 * answers EPERM and records a violation; the quiet ones stay with the default
 * action (EPERM, no record). Also watched: clone with a namespace flag, and
 * raw and packet sockets. */
static int add_watched(scmp_filter_ctx ctx, struct cdn_error *err)
{
    int r = 0;
    for (size_t i = 0; i < cdn_seccomp_n_denied; i++) {
        if (cdn_seccomp_denied[i].kind != CDN_SC_DENY_WATCHED)
            continue;
        int nr = seccomp_syscall_resolve_name(cdn_seccomp_denied[i].name);
        if (nr == __NR_SCMP_ERROR)
            continue; /* not on this arch */
        if ((r = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, nr, 0)) < 0)
            return cdn_error_set(err, r, "seccomp: watch %s: %s", cdn_seccomp_denied[i].name, strerror(-r));
    }
    static const uint64_t ns_flags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                                        CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};
    for (size_t i = 0; i < ELEMENTSOF(ns_flags); i++)
        r |= seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(clone), 1,
                              SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
    r |= seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, AF_PACKET));
    /* Not a denial: the supervisor makes the watch itself, or refuses one on a protected path. */
    r |= seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(inotify_add_watch), 0);
    const int inet[] = {AF_INET, AF_INET6};
    for (size_t f = 0; f < 2; f++)
        r |= seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(socket), 2, SCMP_A0(SCMP_CMP_EQ, inet[f]),
                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW));
    return r ? cdn_error_set(err, EINVAL, "seccomp: adding watched rules failed") : 0;
}

/* The reported path writes (seccomp-policy.h) go to the supervisor, which
 * records those aimed at system or protected paths and lets every one run
 * (the kernel refuses them there). open/openat only with a write flag: the
 * read-only opens, by far the most, stay in the filter. */
static int add_reported(scmp_filter_ctx ctx, struct cdn_error *err)
{
    int r = 0;
    static const uint64_t wflags[] = {O_WRONLY, O_RDWR, O_CREAT, O_TRUNC};
    const uint64_t any = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC;
    for (size_t i = 0; i < cdn_seccomp_n_reported; i++) {
        const char *name = cdn_seccomp_reported[i];
        int nr = seccomp_syscall_resolve_name(name);
        if (nr == __NR_SCMP_ERROR)
            continue;
        unsigned arg = strcmp(name, "open") == 0 ? 1 : strcmp(name, "openat") == 0 ? 2 : 0;
        if (!arg) {
            r |= seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, nr, 0);
            continue;
        }
        r |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1, SCMP_CMP(arg, SCMP_CMP_MASKED_EQ, any, 0));
        for (size_t f = 0; f < ELEMENTSOF(wflags); f++)
            r |= seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, nr, 1,
                                  SCMP_CMP(arg, SCMP_CMP_MASKED_EQ, wflags[f], wflags[f]));
    }
    return r ? cdn_error_set(err, EINVAL, "seccomp: adding reported rules failed") : 0;
}

/* libseccomp lets an unconditional ALLOW of a syscall override any
 * conditional rule for it, so "every ioctl but TIOCSTI" cannot live in the
 * allowlist filter. It is a second filter whose default is ALLOW; the kernel
 * applies the stricter verdict of the two. The command is 32 bits wide (the
 * kernel truncates it), hence the masked compare. */
static int add_ioctl_denials(scmp_filter_ctx ctx, struct cdn_error *err)
{
    /* TIOCSTI, TIOCLINUX: input pushed into a terminal. The btrfs ones: a subvolume or snapshot of its
     * own, which anyone who may write a directory of a btrfs may make, would be outside the quota that
     * caps a layer of cordond's pool (tiers/container/layer-pool.c). */
    static const unsigned long denied[] = {TIOCSTI,
                                           TIOCLINUX,
                                           BTRFS_IOC_SUBVOL_CREATE,
                                           BTRFS_IOC_SUBVOL_CREATE_V2,
                                           BTRFS_IOC_SNAP_CREATE,
                                           BTRFS_IOC_SNAP_CREATE_V2};
    int r = 0;
    for (size_t i = 0; i < ELEMENTSOF(denied); i++)
        r |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, denied[i] & 0xffffffffu));
    return r ? cdn_error_set(err, EINVAL, "seccomp: adding ioctl denials failed") : 0;
}

/* Export ctx as raw BPF appended to *buf (grown), returning the instruction count. */
static int export_append(scmp_filter_ctx ctx, uint8_t **buf, size_t *size, struct cdn_error *err)
{
    _cleanup_close_ int fd = memfd_create("cordon-seccomp", MFD_CLOEXEC);
    if (fd < 0)
        return cdn_error_set(err, errno, "seccomp: memfd: %m");
    int r = seccomp_export_bpf(ctx, fd);
    if (r < 0)
        return cdn_error_set(err, r, "seccomp: export: %s", strerror(-r));
    off_t n = lseek(fd, 0, SEEK_END);
    if (n <= 0 || n % (off_t) sizeof(struct sock_filter) ||
        n / (off_t) sizeof(struct sock_filter) > BPF_MAXINSNS)
        return cdn_error_set(err, EINVAL, "seccomp: exported filter has a bad size");
    uint8_t *b = realloc(*buf, *size + (size_t) n);
    if (!b)
        return -ENOMEM;
    *buf = b;
    if (pread(fd, b + *size, (size_t) n, 0) != n)
        return cdn_error_set(err, EIO, "seccomp: reading exported filter failed");
    *size += (size_t) n;
    return (int) (n / (off_t) sizeof(struct sock_filter));
}

int cdn_seccomp_compile(struct cdn_seccomp_prog *ret, struct cdn_error *err)
{
    return cdn_seccomp_compile_variant(ret, false, err);
}

int cdn_seccomp_compile_variant(struct cdn_seccomp_prog *ret, bool writes, struct cdn_error *err)
{
    _cleanup_(ctx_releasep) scmp_filter_ctx main_ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
    _cleanup_(ctx_releasep) scmp_filter_ctx ioctl_ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!main_ctx || !ioctl_ctx)
        return cdn_error_set(err, ENOMEM, "seccomp: init failed");
    int r = seccomp_attr_set(main_ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (r < 0)
        return cdn_error_set(err, r, "seccomp: set bad-arch action: %s", strerror(-r));
    /* A binary search over syscall numbers instead of a linear chain: every
     * syscall of the sandbox pays for the filter, and so does the kernel's
     * per-syscall verdict cache that is computed when the filter is installed. */
    r = seccomp_attr_set(main_ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    if (r < 0)
        return cdn_error_set(err, r, "seccomp: enable binary-tree optimisation: %s", strerror(-r));
    if ((r = add_allowed(main_ctx, writes, err)) < 0 || (r = add_filtered(main_ctx, err)) < 0 ||
        (cdn_seccomp_monitor_enabled() &&
         ((r = add_watched(main_ctx, err)) < 0 || (writes && (r = add_reported(main_ctx, err)) < 0))) ||
        (r = add_ioctl_denials(ioctl_ctx, err)) < 0)
        return r;
    _cleanup_free_ uint8_t *buf = NULL;
    size_t size = 0;
    int n0 = export_append(main_ctx, &buf, &size, err);
    if (n0 < 0)
        return n0;
    int n1 = export_append(ioctl_ctx, &buf, &size, err);
    if (n1 < 0)
        return n1;
    *ret = (struct cdn_seccomp_prog){.len = {(uint16_t) n0, (uint16_t) n1}, .insns = TAKE_PTR(buf)};
    return 0;
}
