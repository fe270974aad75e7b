/* cgroup v2 driver: <root>/cordon/<name>, controllers enabled once in the
 * parent's subtree_control; the sandbox is born inside it (CLONE_INTO_CGROUP). */
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

static int write_knob(const struct cdn_cgroup *cg, const char *file, const char *value)
{
    return cdn_write_file_at(cg->dirfd, file, value);
}

static int ensure_parent(struct cdn_error *err)
{
    char p[512];
    (void) snprintf(p, sizeof p, "%s/cordon", cdn_cgroup_root());
    if (mkdir(p, 0755) < 0 && errno != EEXIST)
        return cdn_error_set(err, errno, "cgroup v2: mkdir %s: %m", p);
    (void) snprintf(p, sizeof p, "%s/cgroup.subtree_control", cdn_cgroup_root());
    (void) cdn_write_file_at(AT_FDCWD, p, "+cpu +memory +pids");
    (void) snprintf(p, sizeof p, "%s/cordon/cgroup.subtree_control", cdn_cgroup_root());
    int r = cdn_write_file_at(AT_FDCWD, p, "+cpu +memory +pids");
    if (r < 0)
        return cdn_error_set(err, r, "cgroup v2: enable cpu, memory, pids in %s: %s", p, strerror(-r));
    return 0;
}

/* An engine's path (a name from the root: cordon-runtime's cgroupsPath): each ancestor made, with
 * the controllers enabled for its children, from the root down. */
static int ensure_path_parents(const char *name, struct cdn_error *err)
{
    char p[512], ctl[560];
    const char *root = cdn_cgroup_root();
    for (const char *s = strchr(name + 1, '/'); s; s = strchr(s + 1, '/')) {
        (void) snprintf(p, sizeof p, "%s%.*s", root, (int) (s - name), name);
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
            return cdn_error_set(err, errno, "cgroup v2: mkdir %s: %m", p);
    }
    (void) snprintf(ctl, sizeof ctl, "%s/cgroup.subtree_control", root);
    (void) cdn_write_file_at(AT_FDCWD, ctl, "+cpu +memory +pids");
    for (const char *s = strchr(name + 1, '/'); s; s = strchr(s + 1, '/')) {
        (void) snprintf(ctl, sizeof ctl, "%s%.*s/cgroup.subtree_control", root, (int) (s - name), name);
        int r = cdn_write_file_at(AT_FDCWD, ctl, "+cpu +memory +pids");
        if (r < 0)
            return cdn_error_set(err, r, "cgroup v2: enable cpu, memory, pids in %s: %s", ctl, strerror(-r));
    }
    return 0;
}

static int v2_set_limits(struct cdn_cgroup *cg, const struct cdn_cgroup_limits *l, unsigned which,
                         struct cdn_error *err)
{
    char v[64];
    int r;
    if (which & CDN_CGROUP_SET_MEMORY) {
        (void) snprintf(v, sizeof v, "%" PRIu64, l->memory_bytes);
        if ((r = write_knob(cg, "memory.max", v)) < 0)
            return cdn_error_field(err, r, "limits.memory_mb", "cgroup v2: memory.max=%s: %s", v,
                                   strerror(-r));
    }
    if (which & CDN_CGROUP_SET_CPUS) {
        (void) snprintf(v, sizeof v, "%" PRIu64 " 100000", cdn_cgroup_cpu_quota(l->cpus, 100000));
        if ((r = write_knob(cg, "cpu.max", v)) < 0)
            return cdn_error_field(err, r, "limits.cpus", "cgroup v2: cpu.max=%s: %s", v, strerror(-r));
    }
    if (which & CDN_CGROUP_SET_PIDS) {
        (void) snprintf(v, sizeof v, "%" PRIu64, l->pids);
        if ((r = write_knob(cg, "pids.max", v)) < 0)
            return cdn_error_field(err, r, "limits.pids", "cgroup v2: pids.max=%s: %s", v, strerror(-r));
    }
    return 0;
}

static int v2_create(struct cdn_cgroup *cg, const struct cdn_cgroup_limits *l, struct cdn_error *err)
{
    char p[512];
    int r = cdn_cgroup_path(p, sizeof p, CDN_CGROUP_V2, NULL, cg->name);
    if (r < 0)
        return cdn_error_set(err, r, "cgroup path too long");
    /* An engine's path: its parents made or not, each must enable the controllers for its children. */
    if (cg->name[0] == '/' && (r = ensure_path_parents(cg->name, err)) < 0)
        return r;
    int m = mkdir(p, 0755) < 0 ? errno : 0;
    if (m == ENOENT) { /* first use on this host */
        r = ensure_parent(err);
        if (r < 0)
            return r;
        m = mkdir(p, 0755) < 0 ? errno : 0;
    }
    bool reused = m == EEXIST;
    if (m && !reused)
        return cdn_error_set(err, m, "cgroup v2: mkdir %s: %m", p);
    cg->dirfd = safe_close(cg->dirfd);
    cg->dirfd = open(p, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    if (cg->dirfd < 0)
        return cdn_error_set(err, errno, "cgroup v2: open %s: %m", p);
    if ((r = v2_set_limits(cg, l, CDN_CGROUP_SET_CPUS | CDN_CGROUP_SET_MEMORY | CDN_CGROUP_SET_PIDS, err)) <
        0)
        return r;
    (void) write_knob(cg, "memory.swap.max", "0"); /* absent without swap accounting */
    (void) write_knob(cg, "memory.peak", "0");     /* reset the watermark where the kernel allows it */
    return reused ? 1 : 0;
}

static int v2_attach(struct cdn_cgroup *cg, pid_t pid)
{
    char v[24];
    (void) snprintf(v, sizeof v, "%d", (int) pid);
    return write_knob(cg, "cgroup.procs", v);
}

static uint64_t read_keyed(struct cdn_cgroup *cg, const char *file, const char *key)
{
    char buf[2048];
    uint64_t v = 0;
    if (cdn_read_file_at(cg->dirfd, file, buf, sizeof buf) < 0)
        return 0;
    if (key)
        (void) cdn_cgroup_keyed_value(buf, key, &v);
    else
        v = strtoull(buf, NULL, 10);
    return v;
}

static int v2_stats(struct cdn_cgroup *cg, struct cdn_cgroup_stats *ret)
{
    *ret = (struct cdn_cgroup_stats){
        .memory_peak_bytes = read_keyed(cg, "memory.peak", NULL),
        .oom_kills = read_keyed(cg, "memory.events", "oom_kill"),
        .pids_max_hits = read_keyed(cg, "pids.events", "max"),
        .memory_bytes = read_keyed(cg, "memory.current", NULL),
        .pids = read_keyed(cg, "pids.current", NULL),
        .cpu_usec = read_keyed(cg, "cpu.stat", "usage_usec"),
        .cpu_known = true, /* cpu.stat's usage_usec is in every cgroup */
    };
    return 0;
}

/* The cgroup's directory fd, opened again where it was closed (e.g. in the reaper, which closed
 * every inherited fd). */
static int open_dir(struct cdn_cgroup *cg)
{
    if (cg->dirfd >= 0)
        return 0;
    char p[512];
    if (cdn_cgroup_path(p, sizeof p, CDN_CGROUP_V2, NULL, cg->name) < 0)
        return -ENAMETOOLONG;
    cg->dirfd = open(p, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    return cg->dirfd < 0 ? -errno : 0;
}

static int v2_freeze(struct cdn_cgroup *cg, bool frozen)
{
    int r = open_dir(cg);
    if (r < 0 || (r = write_knob(cg, "cgroup.freeze", frozen ? "1" : "0")) < 0 || !frozen)
        return r;
    for (int i = 0; i < 500; i++) { /* the kernel freezes each task at its next return to user space */
        char buf[256];
        if (cdn_read_file_at(cg->dirfd, "cgroup.events", buf, sizeof buf) >= 0 && strstr(buf, "frozen 1"))
            return 0;
        (void) nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    return -ETIMEDOUT;
}

static int v2_kill_all(struct cdn_cgroup *cg)
{
    if (open_dir(cg) < 0)
        return 0;
    int n = 0;
    if (write_knob(cg, "cgroup.kill", "1") == 0)
        n = 1;
    _cleanup_free_ char *procs = n ? NULL : cdn_cgroup_read_procs(cg->dirfd, "cgroup.procs");
    if (procs)
        n = cdn_cgroup_kill_listed(procs);
    (void) write_knob(cg, "cgroup.freeze",
                      "0"); /* a frozen task dies of SIGKILL on v2; thawed all the same */
    return n;
}

static int v2_destroy(struct cdn_cgroup *cg)
{
    char p[512];
    cg->dirfd = safe_close(cg->dirfd);
    if (cdn_cgroup_path(p, sizeof p, CDN_CGROUP_V2, NULL, cg->name) < 0)
        return -ENAMETOOLONG;
    return cdn_cgroup_rmdir(p);
}

const struct cdn_cgroup_ops cdn_cgroup_v2_ops = {
    .version = CDN_CGROUP_V2,
    .create = v2_create,
    .attach = v2_attach,
    .stats = v2_stats,
    .set_limits = v2_set_limits,
    .freeze = v2_freeze,
    .kill_all = v2_kill_all,
    .destroy = v2_destroy,
};
