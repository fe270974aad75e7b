/* cgroup v1 driver: one directory per controller (cpu, memory, pids), each
 * named <root>/<ctrl>/cordon/<name>. Works on pure v1 and on the hybrid layout. */
#include "cgroup.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *const controllers[] = {"cpu", "memory", "pids"};
#define N_CTRL (sizeof controllers / sizeof controllers[0])

/* Where CPU time is counted: cpuacct co-mounted with cpu ("cpu,cpuacct": the cpu directory has
 * cpuacct.usage), a cpuacct hierarchy of its own (then a fourth directory per cgroup, optional:
 * nothing fails without it), or none (no CPU time). */
enum cpuacct { CPUACCT_NONE, CPUACCT_IN_CPU, CPUACCT_OWN };

static enum cpuacct cpuacct(void)
{
    static int known = -1;
    if (known < 0) {
        char p[512];
        (void) snprintf(p, sizeof p, "%s/cpu/cpuacct.usage", cdn_cgroup_root());
        if (access(p, F_OK) == 0)
            known = CPUACCT_IN_CPU;
        else {
            (void) snprintf(p, sizeof p, "%s/cpuacct/cpuacct.usage", cdn_cgroup_root());
            known = access(p, F_OK) == 0 ? CPUACCT_OWN : CPUACCT_NONE;
        }
    }
    return (enum cpuacct) known;
}

static int knob(const struct cdn_cgroup *cg, const char *ctrl, const char *file, char *buf, size_t size)
{
    char dir[512];
    int r = cdn_cgroup_path(dir, sizeof dir, CDN_CGROUP_V1, ctrl, cg->name);
    if (r < 0)
        return r;
    int n = snprintf(buf, size, "%s/%s", dir, file);
    return n < 0 || (size_t) n >= size ? -ENAMETOOLONG : 0;
}

static int write_knob(const struct cdn_cgroup *cg, const char *ctrl, const char *file, const char *value)
{
    char p[600];
    int r = knob(cg, ctrl, file, p, sizeof p);
    return r < 0 ? r : cdn_write_file_at(AT_FDCWD, p, value);
}

/* A write of a CPU bandwidth knob makes the kernel check the bandwidth of every task group of the
 * host (tg_set_cfs_bandwidth): a cost that grows with the number of live sandboxes. It is skipped
 * when the knob already says value (a new cgroup's period, a kept cgroup reused with the same
 * limit). */
static int write_knob_changed(const struct cdn_cgroup *cg, const char *ctrl, const char *file,
                              const char *value)
{
    char p[600], buf[64];
    int r = knob(cg, ctrl, file, p, sizeof p);
    if (r < 0)
        return r;
    ssize_t n = cdn_read_file_at(AT_FDCWD, p, buf, sizeof buf);
    if (n > 0 && buf[n - 1] == '\n')
        buf[n - 1] = 0;
    if (n > 0 && strcmp(buf, value) == 0)
        return 0;
    return cdn_write_file_at(AT_FDCWD, p, value);
}

static int set_memory(struct cdn_cgroup *cg, uint64_t bytes, struct cdn_error *err)
{
    char v[32];
    (void) snprintf(v, sizeof v, "%" PRIu64, bytes);
    /* memsw (memory+swap) must stay >= the memory limit, so the order of the
     * two writes depends on the direction of the change; try both. */
    int r = write_knob(cg, "memory", "memory.limit_in_bytes", v);
    int s = write_knob(cg, "memory", "memory.memsw.limit_in_bytes", v);
    if (r == -EINVAL)
        r = write_knob(cg, "memory", "memory.limit_in_bytes", v);
    if (r < 0)
        return cdn_error_field(err, r, "limits.memory_mb", "cgroup v1: set memory.limit_in_bytes=%s: %s", v,
                               strerror(-r));
    if (s < 0 && s != -ENOENT) /* ENOENT: kernel without swap accounting, and then no swap to limit */
        return cdn_error_field(err, s, "limits.memory_mb", "cgroup v1: set memory.memsw.limit_in_bytes: %s",
                               strerror(-s));
    (void) write_knob(cg, "memory", "memory.swappiness", "0");
    return 0;
}

static int v1_set_limits(struct cdn_cgroup *cg, const struct cdn_cgroup_limits *l, unsigned which,
                         struct cdn_error *err)
{
    char v[32];
    int r = which & CDN_CGROUP_SET_MEMORY ? set_memory(cg, l->memory_bytes, err) : 0;
    if (r < 0)
        return r;
    if (which & CDN_CGROUP_SET_CPUS) {
        (void) snprintf(v, sizeof v, "%" PRIu64, cdn_cgroup_cpu_quota(l->cpus, 100000));
        r = write_knob_changed(cg, "cpu", "cpu.cfs_period_us", "100000");
        if (r >= 0)
            r = write_knob_changed(cg, "cpu", "cpu.cfs_quota_us", v);
        if (r < 0)
            return cdn_error_field(err, r, "limits.cpus", "cgroup v1: set cpu.cfs_quota_us=%s: %s", v,
                                   strerror(-r));
    }
    if (which & CDN_CGROUP_SET_PIDS) {
        (void) snprintf(v, sizeof v, "%" PRIu64, l->pids);
        r = write_knob(cg, "pids", "pids.max", v);
        if (r < 0)
            return cdn_error_field(err, r, "limits.pids", "cgroup v1: set pids.max=%s: %s", v, strerror(-r));
    }
    return 0;
}

/* The sandbox's freezer cgroup: made on demand (at the first freeze, or at create for one that
 * keeps checkpoints); a process joins it with the others only if it exists. */
static int make_freezer(const struct cdn_cgroup *cg)
{
    char dir[512];
    int r = cdn_cgroup_path(dir, sizeof dir, CDN_CGROUP_V1, "freezer", cg->name);
    if (r < 0)
        return r;
    int m = mkdir(dir, 0755) < 0 ? errno : 0;
    if (m == ENOENT) { /* first use: the "cordon" parent */
        *strrchr(dir, '/') = 0;
        int pm = mkdir(dir, 0755) < 0 ? errno : 0;
        if (pm && pm != EEXIST)
            return pm == ENOENT ? -ENOTSUP : -pm; /* ENOENT: no freezer hierarchy mounted */
        *strchr(dir, 0) = '/';
        m = mkdir(dir, 0755) < 0 ? errno : 0;
    }
    return m && m != EEXIST ? -m : 0;
}

static bool has_freezer(const struct cdn_cgroup *cg)
{
    char dir[512];
    return cdn_cgroup_path(dir, sizeof dir, CDN_CGROUP_V1, "freezer", cg->name) == 0 &&
           access(dir, F_OK) == 0;
}

static int v1_create(struct cdn_cgroup *cg, const struct cdn_cgroup_limits *l, struct cdn_error *err)
{
    bool reused = false;
    for (size_t i = 0; i < N_CTRL; i++) {
        char p[512];
        int r = cdn_cgroup_path(p, sizeof p, CDN_CGROUP_V1, controllers[i], cg->name);
        if (r < 0)
            return cdn_error_set(err, r, "cgroup path too long");
        int m = mkdir(p, 0755) < 0 ? errno : 0;
        if (m == ENOENT) { /* first use on this host: make the "cordon" parent (or an engine's path), retry */
            *strrchr(p, '/') = 0;
            int pm = cdn_mkdir_p(p, 0755);
            if (pm < 0)
                return cdn_error_set(err, -pm, "cgroup v1: mkdir %s: %s (is the %s controller mounted?)", p,
                                     strerror(-pm), controllers[i]);
            *strchr(p, 0) = '/';
            m = mkdir(p, 0755) < 0 ? errno : 0;
        }
        if (m == EEXIST)
            reused = true;
        else if (m)
            return cdn_error_set(err, m, "cgroup v1: mkdir %s: %m", p);
    }
    if (l->freezer) {
        int r = make_freezer(cg);
        if (r < 0)
            return cdn_error_set(err, -r, "cgroup v1: the freezer cgroup: %s", strerror(-r));
    }
    if (cpuacct() == CPUACCT_OWN) { /* optional: CPU time only */
        char p[512];
        if (cdn_cgroup_path(p, sizeof p, CDN_CGROUP_V1, "cpuacct", cg->name) == 0 && mkdir(p, 0755) < 0 &&
            errno == ENOENT) {
            *strrchr(p, '/') = 0;
            (void) mkdir(p, 0755);
            *strchr(p, 0) = '/';
            (void) mkdir(p, 0755);
        }
    }
    /* A reused directory's count starts again (v2's cannot: the slot keeps a base). */
    if (cpuacct() != CPUACCT_NONE)
        (void) write_knob(cg, cpuacct() == CPUACCT_OWN ? "cpuacct" : "cpu", "cpuacct.usage", "0");
    int r = v1_set_limits(cg, l, CDN_CGROUP_SET_CPUS | CDN_CGROUP_SET_MEMORY | CDN_CGROUP_SET_PIDS, err);
    if (r < 0)
        return r;
    (void) write_knob(cg, "memory", "memory.max_usage_in_bytes", "0"); /* a reused one's watermark */
    return reused ? 1 : 0;
}

static int v1_attach(struct cdn_cgroup *cg, pid_t pid)
{
    char v[24];
    (void) snprintf(v, sizeof v, "%d", (int) pid);
    for (size_t i = 0; i < N_CTRL; i++) {
        int r = write_knob(cg, controllers[i], "cgroup.procs", v);
        if (r < 0)
            return r;
    }
    if (cpuacct() == CPUACCT_OWN)
        (void) write_knob(cg, "cpuacct", "cgroup.procs", v);
    if (has_freezer(cg))
        (void) write_knob(cg, "freezer", "cgroup.procs", v); /* else a freeze moves it */
    return 0;
}

static int v1_delegate_self(struct cdn_cgroup *cg, uid_t uid, gid_t gid)
{
    for (size_t i = 0; i < N_CTRL; i++) {
        char p[600];
        int r = knob(cg, controllers[i], "tasks", p, sizeof p);
        if (r < 0)
            return r;
        if (chown(p, uid, gid) < 0)
            return -errno;
    }
    char p[600];
    if (cpuacct() == CPUACCT_OWN && knob(cg, "cpuacct", "tasks", p, sizeof p) == 0)
        (void) !chown(p, uid, gid);
    if (has_freezer(cg) && knob(cg, "freezer", "tasks", p, sizeof p) == 0)
        (void) !chown(p, uid, gid);
    return 0;
}

/* Runs in the sandbox's setup child (single-threaded, uid `uid` of
 * delegate_self), before it leaves the host's view of the cgroup tree. */
static int v1_attach_self(const struct cdn_cgroup *cg)
{
    for (size_t i = 0; i < N_CTRL; i++) {
        int r = write_knob(cg, controllers[i], "tasks", "0");
        if (r < 0)
            return r;
    }
    if (cpuacct() == CPUACCT_OWN)
        (void) write_knob(cg, "cpuacct", "tasks", "0");
    if (has_freezer(cg))
        (void) write_knob(cg, "freezer", "tasks", "0"); /* else a freeze moves it */
    return 0;
}

static uint64_t read_u64(struct cdn_cgroup *cg, const char *ctrl, const char *file, const char *key)
{
    char p[600], buf[2048];
    uint64_t v = 0;
    if (knob(cg, ctrl, file, p, sizeof p) < 0 || cdn_read_file_at(AT_FDCWD, p, buf, sizeof buf) < 0)
        return 0;
    if (key)
        (void) cdn_cgroup_keyed_value(buf, key, &v);
    else
        v = strtoull(buf, NULL, 10);
    return v;
}

static int v1_stats(struct cdn_cgroup *cg, struct cdn_cgroup_stats *ret)
{
    *ret = (struct cdn_cgroup_stats){
        .memory_peak_bytes = read_u64(cg, "memory", "memory.max_usage_in_bytes", NULL),
        .oom_kills = read_u64(cg, "memory", "memory.oom_control", "oom_kill"),
        .pids_max_hits = read_u64(cg, "pids", "pids.events", "max"),
        .memory_bytes = read_u64(cg, "memory", "memory.usage_in_bytes", NULL),
        .pids = read_u64(cg, "pids", "pids.current", NULL),
        .cpu_usec =
            cpuacct() == CPUACCT_NONE
                ? 0
                : read_u64(cg, cpuacct() == CPUACCT_OWN ? "cpuacct" : "cpu", "cpuacct.usage", NULL) / 1000,
        .cpu_known = cpuacct() != CPUACCT_NONE,
    };
    return 0;
}

/* Whether the n bytes at w are a line of have. */
static bool listed(const char *have, const char *w, size_t n)
{
    for (const char *h = have; *h;) {
        size_t m = strcspn(h, "\n");
        if (m == n && memcmp(h, w, n) == 0)
            return true;
        h += m + (h[m] == '\n');
    }
    return false;
}

/* Whether each pid listed in `want` is listed in `have` (cgroup.procs contents). */
static bool all_listed(const char *want, const char *have)
{
    for (const char *w = want; *w;) {
        size_t n = strcspn(w, "\n");
        if (n && !listed(have, w, n))
            return false;
        w += n + (w[n] == '\n');
    }
    return true;
}

/* v1 has no freezer among the sandbox's controllers: a freezer cgroup of the same name is made at
 * the first freeze, and every process of the sandbox (its pids cgroup's) moved into it; one that
 * forks meanwhile has its child moved the next time round, until none is left outside. Only those
 * not in it yet are moved: a move takes the kernel's cgroup migration lock, whose every write
 * waits for an RCU grace period (milliseconds), even for a process already there; and the children
 * of one in it are born in it, so a sandbox once frozen has nothing to move the next time (a
 * checkpoint's freeze went from 6–30 ms to under 1 ms). */
static char *read_procs(const struct cdn_cgroup *cg, const char *ctrl)
{
    char p[600];
    if (knob(cg, ctrl, "cgroup.procs", p, sizeof p) < 0) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    return cdn_cgroup_read_procs(AT_FDCWD, p);
}

static int v1_freeze(struct cdn_cgroup *cg, bool frozen)
{
    char p[600];
    int r;
    if (!frozen)
        return !has_freezer(cg) ? 0 : write_knob(cg, "freezer", "freezer.state", "THAWED");
    if ((r = make_freezer(cg)) < 0)
        return r;
    for (int round = 0; round < 50; round++) {
        _cleanup_free_ char *want = read_procs(cg, "pids");
        _cleanup_free_ char *in = want ? read_procs(cg, "freezer") : NULL;
        if (!in)
            return -errno;
        for (const char *w = want; *w;) { /* into the freezer cgroup (one that exited meanwhile: ESRCH) */
            size_t n = strcspn(w, "\n");
            char pid[24];
            if (n && n < sizeof pid && !listed(in, w, n)) {
                memcpy(pid, w, n);
                pid[n] = 0;
                (void) write_knob(cg, "freezer", "cgroup.procs", pid);
            }
            w += n + (w[n] == '\n');
        }
        if ((r = write_knob(cg, "freezer", "freezer.state", "FROZEN")) < 0)
            return r;
        /* Each task freezes at its next return to user space, mostly within microseconds: asked
         * again after 20 µs, doubling up to 1 ms, for about half a second in all. */
        char state[32] = "";
        long nap = 20000, slept = 0;
        while (strncmp(state, "FROZEN", 6) != 0 && slept < 500000000) {
            if (knob(cg, "freezer", "freezer.state", p, sizeof p) < 0 ||
                cdn_read_file_at(AT_FDCWD, p, state, sizeof state) < 0)
                break;
            if (strncmp(state, "FROZEN", 6) != 0) {
                (void) nanosleep(&(struct timespec){.tv_nsec = nap}, NULL);
                slept += nap;
                nap = nap < 500000 ? nap * 2 : 1000000;
            }
        }
        if (strncmp(state, "FROZEN", 6) != 0)
            return -ETIMEDOUT;
        _cleanup_free_ char *now = read_procs(cg, "pids");
        _cleanup_free_ char *have = now ? read_procs(cg, "freezer") : NULL;
        if (!have)
            return -EIO;
        if (all_listed(now, have))
            return 0;
    }
    return -EAGAIN;
}

static int v1_kill_all(struct cdn_cgroup *cg)
{
    char p[600];
    _cleanup_free_ char *procs = read_procs(cg, "pids");
    if (!procs)
        return 0;
    int n = cdn_cgroup_kill_listed(procs);
    if (knob(cg, "freezer", "freezer.state", p, sizeof p) == 0 && access(p, F_OK) == 0)
        (void) write_knob(cg, "freezer", "freezer.state", "THAWED"); /* a frozen task dies only thawed */
    return n;
}

static int v1_destroy(struct cdn_cgroup *cg)
{
    int ret = 0;
    for (size_t i = 0; i < N_CTRL; i++) {
        char p[512];
        if (cdn_cgroup_path(p, sizeof p, CDN_CGROUP_V1, controllers[i], cg->name) < 0)
            continue;
        int r = cdn_cgroup_rmdir(p);
        if (r < 0 && ret == 0)
            ret = r;
    }
    char p[512];
    if (cpuacct() == CPUACCT_OWN && cdn_cgroup_path(p, sizeof p, CDN_CGROUP_V1, "cpuacct", cg->name) == 0)
        (void) cdn_cgroup_rmdir(p);
    if (cdn_cgroup_path(p, sizeof p, CDN_CGROUP_V1, "freezer", cg->name) == 0 && access(p, F_OK) == 0)
        (void) cdn_cgroup_rmdir(p); /* made by a freeze */
    return ret;
}

const struct cdn_cgroup_ops cdn_cgroup_v1_ops = {
    .version = CDN_CGROUP_V1,
    .create = v1_create,
    .attach = v1_attach,
    .delegate_self = v1_delegate_self,
    .attach_self = v1_attach_self,
    .stats = v1_stats,
    .set_limits = v1_set_limits,
    .freeze = v1_freeze,
    .kill_all = v1_kill_all,
    .destroy = v1_destroy,
};
