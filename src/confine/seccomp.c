/* The compiled seccomp policy: cache and install.
 *
 * Compiling ~300 rules with libseccomp (seccomp-compile.c) costs
 * milliseconds, more than the rest of sandbox creation; the BPF it produces
 * depends only on the policy tables and the arch, so it is cached in the state
 * dir under a name carrying a hash of the policy, and each sandbox just reads
 * and installs it. */
#include "seccomp-policy.h"
#include "shared/fd-util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* 3: watched denials are user notifications; 5: the variant that reports path writes;
 * 6: inotify_add_watch goes to the supervisor; 7: the btrfs subvolume and snapshot ioctls are refused */
#define POLICY_VERSION 7

uint64_t cdn_seccomp_policy_hash(void)
{
    uint64_t h = 1469598103934665603ULL ^ POLICY_VERSION;
    for (size_t i = 0; i < cdn_seccomp_n_allowed; i++)
        for (const char *c = cdn_seccomp_allowed[i]; *c; c++)
            h = (h ^ (uint8_t) *c) * 1099511628211ULL;
    for (size_t i = 0; i < cdn_seccomp_n_denied; i++) {
        for (const char *c = cdn_seccomp_denied[i].name; *c; c++)
            h = (h ^ (uint8_t) *c) * 1099511628211ULL;
        h = (h ^ (uint64_t) cdn_seccomp_denied[i].kind) * 1099511628211ULL;
    }
    return h;
}

static int read_cache(const char *path, struct cdn_seccomp_prog *ret)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (st.st_uid != 0 || (st.st_mode & 022))
        return -EPERM; /* only trust a root-owned, not group/world-writable cache */
    uint16_t len[2];
    if (cdn_read_full(fd, len, sizeof len) != (ssize_t) sizeof len || len[0] == 0 || len[1] == 0 ||
        len[0] > BPF_MAXINSNS || len[1] > BPF_MAXINSNS ||
        (off_t) sizeof len + ((off_t) len[0] + len[1]) * (off_t) sizeof(struct sock_filter) != st.st_size)
        return -EINVAL;
    size_t size = ((size_t) len[0] + len[1]) * sizeof(struct sock_filter);
    _cleanup_free_ void *insns = malloc(size);
    if (!insns)
        return -ENOMEM;
    if (cdn_read_full(fd, insns, size) != (ssize_t) size)
        return -EIO;
    *ret = (struct cdn_seccomp_prog){.len = {len[0], len[1]}, .insns = TAKE_PTR(insns)};
    return 0;
}

bool cdn_seccomp_monitor_enabled(void)
{
    const char *v = getenv("CORDON_MONITOR");
    return !(v && strcmp(v, "off") == 0);
}

static void cache_path(const char *cache_dir, bool writes, char *buf, size_t size)
{
    /* The variants without the monitor (CORDON_MONITOR=off) or with the
     * reported writes are other programs. */
    uint64_t h = cdn_seccomp_policy_hash() ^ (cdn_seccomp_monitor_enabled() ? 0 : 0x6d6f6e69746f72ULL) ^
                 (writes ? 0x7772697465730000ULL : 0);
    (void) snprintf(buf, size, "%s/seccomp-%016" PRIx64 ".bpf", cache_dir, h);
}

bool cdn_seccomp_cache_present(const char *cache_dir)
{
    char path[512];
    cache_path(cache_dir, false, path, sizeof path);
    return access(path, R_OK) == 0;
}

int cdn_seccomp_load_cached(const char *cache_dir, struct cdn_seccomp_prog *ret, struct cdn_error *err)
{
    return cdn_seccomp_load_variant(cache_dir, false, ret, err);
}

int cdn_seccomp_load_variant(const char *cache_dir, bool writes, struct cdn_seccomp_prog *ret,
                             struct cdn_error *err)
{
    char path[512], tmp[560];
    cache_path(cache_dir, writes, path, sizeof path);
    if (read_cache(path, ret) == 0)
        return 0;
    struct cdn_seccomp_prog p;
    int r = cdn_seccomp_compile_variant(&p, writes, err);
    if (r < 0)
        return r;
    /* Best effort: a read-only state dir costs speed, not correctness. */
    (void) cdn_mkdir_p(cache_dir, 0755);
    (void) snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int) getpid());
    _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (cdn_write_all(fd, p.len, sizeof p.len) == 0 &&
            cdn_write_all(fd, p.insns, ((size_t) p.len[0] + p.len[1]) * sizeof(struct sock_filter)) == 0)
            (void) rename(tmp, path);
        else
            (void) unlink(tmp);
    }
    *ret = p;
    return 0;
}

int cdn_seccomp_install(const struct cdn_seccomp_prog *prog)
{
    struct sock_filter *insns = prog->insns;
    /* The ioctl filter first: once the allowlist is in, seccomp(2) itself must stay allowed (it is). */
    struct sock_fprog second = {.len = prog->len[1], .filter = insns + prog->len[0]};
    struct sock_fprog first = {.len = prog->len[0], .filter = insns};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &second) < 0)
        return -errno;
    /* The allowlist holds the watched rules: its listener goes to the supervisor. */
    return RET_NERRNO(
        (int) syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &first));
}

int cdn_seccomp_install_extra(const void *insns, uint16_t len)
{
    struct sock_fprog p = {.len = len, .filter = (struct sock_filter *) insns};
    return len ? RET_NERRNO((int) syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &p)) : 0;
}

/* The kernel's structures may grow: their sizes, asked once. */
static int notif_sizes(struct seccomp_notif_sizes *sz)
{
    static struct seccomp_notif_sizes cached;
    if (!cached.seccomp_notif && syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &cached) < 0)
        return -errno;
    *sz = cached;
    return 0;
}

int cdn_seccomp_notify_recv(int listener, struct cdn_seccomp_event *ev)
{
    struct seccomp_notif_sizes sz = {0};
    union {
        struct seccomp_notif n;
        uint8_t raw[512];
    } req;
    int r = notif_sizes(&sz);
    if (r < 0)
        return r;
    if (sz.seccomp_notif > sizeof req)
        return -EOVERFLOW;
    memset(&req, 0, sz.seccomp_notif);
    if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) < 0)
        return -errno; /* ENOENT: the caller died meanwhile */
    *ev = (struct cdn_seccomp_event){
        .id = req.n.id, .pid = (int) req.n.pid, .nr = req.n.data.nr, .arch = req.n.data.arch};
    memcpy(ev->args, req.n.data.args, sizeof ev->args);
    return 0;
}

int cdn_seccomp_notify_deny(int listener, const struct cdn_seccomp_event *ev)
{
    struct seccomp_notif_sizes sz = {0};
    union {
        struct seccomp_notif_resp r;
        uint8_t raw[128];
    } resp;
    int r = notif_sizes(&sz);
    if (r < 0)
        return r;
    if (sz.seccomp_notif_resp > sizeof resp)
        return -EOVERFLOW;
    memset(&resp, 0, sz.seccomp_notif_resp);
    resp.r.id = ev->id;
    resp.r.error = -EPERM;
    if (ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

int cdn_seccomp_notify_eperm(int listener, struct cdn_seccomp_event *ev)
{
    int r = cdn_seccomp_notify_recv(listener, ev);
    return r < 0 ? r : cdn_seccomp_notify_deny(listener, ev);
}

void cdn_seccomp_prog_free(struct cdn_seccomp_prog *p)
{
    free(p->insns);
    p->insns = NULL;
    p->len[0] = p->len[1] = 0;
}

int cdn_seccomp_notify_continue(int listener, const struct cdn_seccomp_event *ev)
{
    struct seccomp_notif_resp resp = {.id = ev->id, .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE};
    return ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp) < 0 && errno != ENOENT ? -errno : 0;
}
