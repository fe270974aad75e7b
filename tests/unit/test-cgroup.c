/* The cgroup drivers' logic against a fake cgroup tree in a temp dir (the
 * drivers reuse an existing directory, so pre-made knob files stand in for
 * the kernel's). Real cgroups are exercised by the integration tests. */
#include "core/cgroup.h"
#include "shared/fd-util.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[64];

static void touch(const char *dir, const char *file, const char *content)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(content, f);
        fclose(f);
    }
}

static const char *slurp(const char *dir, const char *file)
{
    static char buf[256];
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    if (cdn_read_file_at(AT_FDCWD, p, buf, sizeof buf) < 0)
        return "(missing)";
    return buf;
}

static void fake_root(void)
{
    snprintf(root, sizeof root, "/tmp/cordon-cgtest-XXXXXX");
    if (!mkdtemp(root))
        abort();
    setenv("CORDON_CGROUP_ROOT", root, 1);
}

TEST(paths_and_quota)
{
    char p[256];
    setenv("CORDON_CGROUP_ROOT", "/sys/fs/cgroup", 1);
    CHECK_EQ_INT(cdn_cgroup_path(p, sizeof p, CDN_CGROUP_V1, "memory", "slot-3"), 0);
    CHECK_STREQ(p, "/sys/fs/cgroup/memory/cordon/slot-3");
    CHECK_EQ_INT(cdn_cgroup_path(p, sizeof p, CDN_CGROUP_V2, NULL, "slot-3"), 0);
    CHECK_STREQ(p, "/sys/fs/cgroup/cordon/slot-3");
    CHECK_EQ_INT(cdn_cgroup_path(p, 10, CDN_CGROUP_V2, NULL, "slot-3"), -ENAMETOOLONG);
    /* an engine's cgroupsPath (cordon-runtime): from the hierarchy's root, not under cordon/ */
    CHECK_EQ_INT(cdn_cgroup_path(p, sizeof p, CDN_CGROUP_V1, "pids", "/default/c1"), 0);
    CHECK_STREQ(p, "/sys/fs/cgroup/pids/default/c1");
    CHECK_EQ_INT(cdn_cgroup_path(p, sizeof p, CDN_CGROUP_V2, NULL, "/kubepods/pod1/c1"), 0);
    CHECK_STREQ(p, "/sys/fs/cgroup/kubepods/pod1/c1");
    CHECK_EQ_INT(cdn_cgroup_cpu_quota(1.0, 100000), 100000);
    CHECK_EQ_INT(cdn_cgroup_cpu_quota(0.25, 100000), 25000);
    CHECK_EQ_INT(cdn_cgroup_cpu_quota(0.001, 100000), 1000); /* kernel minimum */
    CHECK_EQ_INT(cdn_cgroup_cpu_quota(2.5, 100000), 250000);
}

TEST(keyed_values)
{
    uint64_t v = 0;
    const char *t = "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n";
    CHECK_EQ_INT(cdn_cgroup_keyed_value(t, "oom_kill", &v), 0);
    CHECK_EQ_INT(v, 4);
    CHECK_EQ_INT(cdn_cgroup_keyed_value(t, "oom", &v), -ENOENT);
    CHECK_EQ_INT(cdn_cgroup_keyed_value("max 12", "max", &v), 0);
    CHECK_EQ_INT(v, 12);
}

TEST(v1_driver_writes_limits)
{
    fake_root();
    const char *ctrls[] = {"cpu", "memory", "pids"};
    char dirs[3][256];
    for (int i = 0; i < 3; i++) {
        snprintf(dirs[i], sizeof dirs[i], "%s/%s/cordon/slot-1", root, ctrls[i]);
        CHECK_EQ_INT(cdn_mkdir_p(dirs[i], 0755), 0);
        touch(dirs[i], "cgroup.procs", "");
    }
    const char *mem[] = {"memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.swappiness",
                         "memory.max_usage_in_bytes", "memory.oom_control"};
    for (int i = 0; i < 5; i++)
        touch(dirs[1], mem[i], "");
    touch(dirs[0], "cpu.cfs_period_us", "");
    touch(dirs[0], "cpu.cfs_quota_us", "");
    touch(dirs[2], "pids.max", "");
    struct cdn_cgroup cg;
    struct cdn_error err = {0};
    cdn_cgroup_init(&cg, &cdn_cgroup_v1_ops, "slot-1");
    struct cdn_cgroup_limits l = {.cpus = 0.5, .memory_bytes = 64 << 20, .pids = 32};
    CHECK_EQ_INT(cg.ops->create(&cg, &l, &err), 1); /* the pre-made directory is reused */
    CHECK_STREQ(slurp(dirs[1], "memory.limit_in_bytes"), "67108864");
    CHECK_STREQ(slurp(dirs[1], "memory.memsw.limit_in_bytes"), "67108864");
    CHECK_STREQ(slurp(dirs[0], "cpu.cfs_quota_us"), "50000");
    CHECK_STREQ(slurp(dirs[0], "cpu.cfs_period_us"), "100000");
    CHECK_STREQ(slurp(dirs[2], "pids.max"), "32");
    CHECK_EQ_INT(cg.ops->attach(&cg, 4242), 0);
    CHECK_STREQ(slurp(dirs[2], "cgroup.procs"), "4242");
    touch(dirs[1], "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
    touch(dirs[1], "memory.max_usage_in_bytes", "12345\n");
    struct cdn_cgroup_stats st;
    CHECK_EQ_INT(cg.ops->stats(&cg, &st), 0);
    CHECK_EQ_INT(st.oom_kills, 2);
    CHECK_EQ_INT(st.memory_peak_bytes, 12345);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK_EQ_INT(system(cmd), 0);
}

TEST(v2_driver_writes_limits)
{
    fake_root();
    char dir[256];
    snprintf(dir, sizeof dir, "%s/cordon/slot-2", root);
    CHECK_EQ_INT(cdn_mkdir_p(dir, 0755), 0);
    const char *files[] = {"memory.max", "memory.swap.max", "memory.peak",   "cpu.max",
                           "pids.max",   "cgroup.procs",    "memory.events", "pids.events"};
    for (int i = 0; i < 8; i++)
        touch(dir, files[i], "");
    struct cdn_cgroup cg;
    struct cdn_error err = {0};
    cdn_cgroup_init(&cg, &cdn_cgroup_v2_ops, "slot-2");
    struct cdn_cgroup_limits l = {.cpus = 1.5, .memory_bytes = 128 << 20, .pids = 100};
    CHECK_EQ_INT(cg.ops->create(&cg, &l, &err), 1); /* the pre-made directory is reused */
    CHECK(cg.dirfd >= 0);
    CHECK_STREQ(slurp(dir, "memory.max"), "134217728");
    CHECK_STREQ(slurp(dir, "memory.swap.max"), "0");
    CHECK_STREQ(slurp(dir, "cpu.max"), "150000 100000");
    CHECK_STREQ(slurp(dir, "pids.max"), "100");
    touch(dir, "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n");
    struct cdn_cgroup_stats st;
    CHECK_EQ_INT(cg.ops->stats(&cg, &st), 0);
    CHECK_EQ_INT(st.oom_kills, 1);
    close(cg.dirfd);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK_EQ_INT(system(cmd), 0);
}

TEST(v1_create_reports_field_on_failure)
{
    fake_root(); /* no controller directories at all */
    struct cdn_cgroup cg;
    struct cdn_error err = {0};
    cdn_cgroup_init(&cg, &cdn_cgroup_v1_ops, "slot-3");
    struct cdn_cgroup_limits l = {.cpus = 1, .memory_bytes = 1 << 20, .pids = 2};
    CHECK(cg.ops->create(&cg, &l, &err) < 0);
    CHECK(err.msg[0]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK_EQ_INT(system(cmd), 0);
}

/* An engine's path (cordon-runtime's cgroupsPath) is made with its parents, each of which enables
 * the controllers for its children (the fake tree stands in for the kernel's knob files). */
TEST(v2_makes_an_engine_s_path_with_its_parents)
{
    fake_root();
    char dir[256];
    /* the parents as a kubelet leaves them (the kernel makes their knob files: here, by hand) */
    snprintf(dir, sizeof dir, "%s/kubepods/pod1", root);
    CHECK_EQ_INT(cdn_mkdir_p(dir, 0755), 0);
    touch(root, "cgroup.subtree_control", "");
    touch(dir, "cgroup.subtree_control", "");
    snprintf(dir, sizeof dir, "%s/kubepods", root);
    touch(dir, "cgroup.subtree_control", "");
    struct cdn_cgroup cg;
    struct cdn_error err = {0};
    cdn_cgroup_init(&cg, &cdn_cgroup_v2_ops, "/kubepods/pod1/c1");
    struct cdn_cgroup_limits l = {.cpus = 1, .memory_bytes = 64 << 20, .pids = 10};
    /* c1's knob files are the kernel's to make: the limits fail here, after the directory is made */
    int r = cg.ops->create(&cg, &l, &err);
    snprintf(dir, sizeof dir, "%s/kubepods", root);
    CHECK_STREQ(slurp(root, "cgroup.subtree_control"), "+cpu +memory +pids");
    CHECK_STREQ(slurp(dir, "cgroup.subtree_control"), "+cpu +memory +pids");
    snprintf(dir, sizeof dir, "%s/kubepods/pod1", root);
    CHECK_STREQ(slurp(dir, "cgroup.subtree_control"), "+cpu +memory +pids");
    snprintf(dir, sizeof dir, "%s/kubepods/pod1/c1", root);
    CHECK(r >= 0 || err.msg[0]);
    struct stat st;
    CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
    if (cg.dirfd >= 0)
        close(cg.dirfd);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK_EQ_INT(system(cmd), 0);
}
