/* cordon-runtime's reading of config.json (src/runtime/bundle.c): what a podman or containerd bundle
 * asks becomes a sandbox spec; what cordon does not grant is refused naming the JSON path, or reduced
 * with a note. */
#include "runtime/bundle.h"
#include "runtime/layers.h"
#include "tap.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* What podman 4.3 writes for `run --network none --memory 256m --pids-limit 100 --cpus 0.5`, trimmed. */
static const char *const PODMAN =
    "{\"ociVersion\": \"1.0.2-dev\","
    " \"process\": {\"user\": {\"uid\": 1000, \"gid\": 1000, \"additionalGids\": [10]},"
    "   \"args\": [\"sh\", \"-c\", \"exit 3\"], \"env\": [\"PATH=/usr/bin:/bin\", \"TERM=xterm\"],"
    "   \"cwd\": \"/work\", \"terminal\": true,"
    "   \"capabilities\": {\"bounding\": [\"CAP_CHOWN\", \"CAP_NET_BIND_SERVICE\"], \"effective\": "
    "[\"CAP_CHOWN\"]},"
    "   \"rlimits\": [{\"type\": \"RLIMIT_NOFILE\", \"hard\": 1024, \"soft\": 1024},"
    "                 {\"type\": \"RLIMIT_NPROC\", \"hard\": 1024, \"soft\": 512}],"
    "   \"noNewPrivileges\": false, \"oomScoreAdj\": 0},"
    " \"root\": {\"path\": \"rootfs\"}, \"hostname\": \"c1\","
    " \"mounts\": [{\"destination\": \"/proc\", \"type\": \"proc\", \"source\": \"proc\","
    "               \"options\": [\"nosuid\", \"noexec\", \"nodev\"]},"
    "              {\"destination\": \"/dev\", \"type\": \"tmpfs\", \"source\": \"tmpfs\", \"options\": "
    "[\"nosuid\"]},"
    "              {\"destination\": \"/dev/pts\", \"type\": \"devpts\", \"source\": \"devpts\"},"
    "              {\"destination\": \"/sys\", \"type\": \"sysfs\", \"source\": \"sysfs\", \"options\": "
    "[\"ro\"]},"
    "              {\"destination\": \"/etc/hosts\", \"type\": \"bind\", \"source\": \"/var/lib/c/hosts\","
    "               \"options\": [\"bind\", \"rprivate\", \"ro\"]},"
    "              {\"destination\": \"/data\", \"source\": \"data\", \"options\": [\"rbind\"]}],"
    " \"hooks\": {\"poststop\": [{\"path\": \"/usr/bin/true\", \"args\": [\"true\"], \"timeout\": 5}]},"
    " \"annotations\": {\"io.cordon.network.allow\": \"pypi.org:443, files.pythonhosted.org:443\","
    "   \"io.cordon.protect\": \"/srv/answers/**\", \"io.cordon.on-violation\": \"kill\", \"org.x\": \"y\"},"
    " \"linux\": {\"sysctl\": {\"net.ipv4.ping_group_range\": \"0 0\"},"
    "   \"resources\": {\"memory\": {\"limit\": 268435456}, \"pids\": {\"limit\": 100},"
    "     \"cpu\": {\"quota\": 50000, \"period\": 100000}},"
    "   \"cgroupsPath\": \"/libpod_parent/libpod-0123\","
    "   \"namespaces\": [{\"type\": \"pid\"}, {\"type\": \"network\", \"path\": \"/run/netns/cni-1\"},"
    "     {\"type\": \"ipc\"}, {\"type\": \"uts\"}, {\"type\": \"mount\"}, {\"type\": \"cgroup\"}],"
    "   \"seccomp\": {\"defaultAction\": \"SCMP_ACT_ERRNO\"},"
    "   \"maskedPaths\": [\"/proc/acpi\", \"/proc/kcore\"], \"readonlyPaths\": [\"/proc/sys\"]}}";

static int parse(const char *json, struct cdn_bundle *b, struct cdn_error *err)
{
    *err = (struct cdn_error){0};
    return cdn_bundle_parse(json, strlen(json), "/run/b", b, err);
}

TEST(a_podman_bundle_becomes_a_sandbox_spec)
{
    struct cdn_bundle b;
    struct cdn_error err;
    CHECK_EQ_INT(parse(PODMAN, &b, &err), 0);
    CHECK_STREQ(b.spec.image, "/run/b/rootfs");
    CHECK_EQ_INT(b.args.n, 3);
    CHECK_STREQ(b.args.v[2], "exit 3");
    CHECK_EQ_INT(b.env.n, 2);
    CHECK_STREQ(b.spec.workdir, "/work");
    CHECK_STREQ(b.spec.user, "1000:1000");
    CHECK(b.terminal);
    CHECK_STREQ(b.spec.hostname, "c1");
    CHECK_EQ_INT(b.n_rlimits, 2);
    CHECK_EQ_INT(b.rlimits[1].resource, RLIMIT_NPROC);
    CHECK_EQ_INT(b.rlimits[1].soft, 512);
    CHECK_STREQ(b.netns_path, "/run/netns/cni-1");
    CHECK_STREQ(b.cgroups_path, "/libpod_parent/libpod-0123");
    CHECK_EQ_INT(b.spec.limits.memory_mb, 256);
    CHECK_EQ_INT(b.spec.limits.pids, 100);
    CHECK(b.cpu_limited && b.spec.limits.cpus == 0.5);
    /* the kernel's file systems are the runtime's to make (proc, devpts and /dev are cordon's own);
     * the binds are the spec's */
    CHECK_EQ_INT(b.n_mounts, 1);
    CHECK_STREQ(b.mounts[0].type, "sysfs");
    CHECK_EQ_INT(b.mounts[0].index, 3);
    CHECK_EQ_INT(b.spec.n_mounts, 2);
    CHECK_STREQ(b.spec.mounts[0].source, "/var/lib/c/hosts");
    CHECK(b.spec.mounts[0].readonly);
    CHECK_STREQ(b.spec.mounts[1].source, "/run/b/data");
    CHECK(!b.spec.mounts[1].readonly);
    CHECK_EQ_INT(b.n_hooks, 1);
    CHECK_EQ_INT(b.hooks[0].kind, CDN_HOOK_POSTSTOP);
    CHECK_EQ_INT(b.hooks[0].timeout_s, 5);
    CHECK_EQ_INT(b.sysctls.n, 1);
    CHECK(b.seccomp_insns != NULL && b.seccomp_len > 0);
    CHECK_EQ_INT(b.masked.n, 2);
    /* cordon's annotations turn on its features */
    CHECK_EQ_INT(b.spec.net_mode, CDN_NET_ALLOWLIST);
    CHECK_EQ_INT(b.spec.net_allow.n, 2);
    CHECK_STREQ(b.spec.net_allow.v[1], "files.pythonhosted.org:443");
    CHECK_STREQ(b.spec.protect.v[0], "/srv/answers/**");
    CHECK_EQ_INT(b.spec.on_violation, CDN_VIOLATION_KILL);
    /* reduced, and said: capabilities, no_new_privs, extra groups */
    CHECK_EQ_INT(b.notes.n, 3);
    CHECK(strstr(b.notes.v[1], "process.capabilities") != NULL);
    CHECK(strstr(b.notes.v[2], "noNewPrivileges") != NULL);
    cdn_bundle_free(&b);
}

/* Memory and pids not asked: cordon's defaults (spec.c), said in the notes, never the host's whole
 * memory (the fork bomb and 2 GiB probes would get through); CPUs: the host's. */
TEST(limits_not_asked_are_cordons_defaults)
{
    struct cdn_bundle b;
    struct cdn_error err;
    CHECK_EQ_INT(parse("{\"ociVersion\": \"1.1.0\", \"root\": {\"path\": \"/r\", \"readonly\": true},"
                       " \"process\": {\"args\": [\"true\"], \"cwd\": \"/\"},"
                       " \"linux\": {\"namespaces\": [{\"type\": \"pid\"}, {\"type\": \"network\"},"
                       "   {\"type\": \"ipc\"}, {\"type\": \"uts\"}, {\"type\": \"mount\"}]}}",
                       &b, &err),
                 0);
    CHECK_EQ_INT(b.spec.limits.memory_mb, 512);
    CHECK_EQ_INT(b.spec.limits.pids, 256);
    CHECK(!b.cpu_limited && b.spec.limits.cpus == (double) sysconf(_SC_NPROCESSORS_ONLN));
    CHECK(b.spec.read_only_root && !b.spec.writable_system);
    CHECK(b.netns_path == NULL);
    CHECK_STREQ(b.spec.user, "0:0");
    CHECK_EQ_INT(b.notes.n, 2);
    CHECK(strstr(b.notes.v[0], "memory.limit: none given") != NULL);
    CHECK(strstr(b.notes.v[1], "pids.limit: none given") != NULL);
    cdn_bundle_free(&b);
}

/* Each refused with the JSON path of what it asked: one change from PODMAN each. */
TEST(what_cordon_does_not_grant_is_refused_naming_the_field)
{
    static const struct {
        const char *from, *to, *field;
    } cases[] = {
        {"{\"type\": \"pid\"}, ", "", "linux.namespaces"}, /* the host's pid namespace */
        {"{\"type\": \"network\", \"path\": \"/run/netns/cni-1\"},", "", "linux.namespaces"},
        {"{\"type\": \"ipc\"}", "{\"type\": \"ipc\", \"path\": \"/proc/1/ns/ipc\"}", "linux.namespaces[2]"},
        {"\"cgroupsPath\"",
         "\"uidMappings\": [{\"containerID\": 0, \"hostID\": 0, \"size\": 65536}], \"cgroupsPath\"",
         "linux.uidMappings"},
        {"\"cgroupsPath\"",
         "\"devices\": [{\"path\": \"/dev/mem\", \"type\": \"c\", \"major\": 1, \"minor\": 1}], "
         "\"cgroupsPath\"",
         "linux.devices[0]"},
        {"\"net.ipv4.ping_group_range\"", "\"kernel.panic\"", "linux.sysctl.kernel.panic"},
        {"\"net.ipv4.ping_group_range\"", "\"kernel.hostnamex\"", "linux.sysctl.kernel.hostnamex"},
        {"\"type\": \"sysfs\", \"source\": \"sysfs\"", "\"type\": \"ext4\", \"source\": \"/dev/sda1\"",
         "mounts[3]"},
        {"\"/sys\", \"type\": \"sysfs\"", "\"/proc/x\", \"type\": \"sysfs\"", "mounts[3]"},
        {"\"/dev/pts\", \"type\": \"devpts\"", "\"/tmp/pts\", \"type\": \"devpts\"", "mounts[2]"},
        {"\"org.x\"", "\"io.cordon.protected\"", "annotations.io.cordon.protected"},
        {"\"kill\"", "\"maybe\"", "annotations.io.cordon.on-violation"},
        {"\"1.0.2-dev\"", "\"0.5\"", "ociVersion"},
        {"\"args\": [\"sh\", \"-c\", \"exit 3\"]", "\"args\": []", "process.args"},
        {"\"cwd\": \"/work\"", "\"cwd\": \"work\"", "process.cwd"},
        {"\"soft\": 512", "\"soft\": 2048", "process.rlimits[1]"},
        {"RLIMIT_NPROC", "RLIMIT_NOPE", "process.rlimits[1]"},
        {"\"uid\": 1000,", "\"uid\": 70000,", "process.user"},
        {"\"/etc/hosts\"", "\"/etc/../hosts\"", "mounts[4]"},
        {"\"limit\": 100", "\"limit\": 1", "linux.resources.pids.limit"},
        {"\"path\": \"rootfs\"", "\"path\": \"../x\"", "root.path"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[8192];
        const char *at = strstr(PODMAN, cases[i].from);
        CHECK(at != NULL);
        if (!at)
            continue;
        (void) snprintf(json, sizeof json, "%.*s%s%s", (int) (at - PODMAN), PODMAN, cases[i].to,
                        at + strlen(cases[i].from));
        struct cdn_bundle b;
        struct cdn_error err;
        int r = parse(json, &b, &err);
        CHECK(r < 0);
        CHECK_STREQ(err.field, cases[i].field);
        if (r >= 0 || strcmp(err.field, cases[i].field) != 0)
            fprintf(stderr, "# case %zu: %d %s: %s\n", i, r, err.field, err.msg);
        cdn_bundle_free(&b);
    }
}

/* An engine's id range for the container (podman --uidmap): taken as the sandbox's (sandbox.h). */
TEST(an_id_range_is_taken)
{
    static const char map[] = "\"uidMappings\": [{\"containerID\": 0, \"hostID\": 300000, \"size\": 65536}], "
                              "\"gidMappings\": [{\"containerID\": 0, \"hostID\": 300000, \"size\": 65536}], "
                              "\"cgroupsPath\"";
    char json[8192];
    const char *at = strstr(PODMAN, "\"cgroupsPath\"");
    (void) snprintf(json, sizeof json, "%.*s%s%s", (int) (at - PODMAN), PODMAN, map,
                    at + strlen("\"cgroupsPath\""));
    struct cdn_bundle b;
    struct cdn_error err;
    CHECK_EQ_INT(parse(json, &b, &err), 0);
    CHECK_EQ_INT(b.spec_ids_from, 300000);
    CHECK_EQ_INT(b.spec_ids_count, 65536);
    cdn_bundle_free(&b);
}

/* podman writes an unlimited rlimit (--ulimit memlock=-1:-1) as 2^64-1, beyond jansson's integers. */
TEST(an_unlimited_rlimit_as_podman_writes_it)
{
    char json[8192];
    const char *at = strstr(PODMAN, "\"hard\": 1024, \"soft\": 512");
    CHECK(at != NULL);
    (void) snprintf(json, sizeof json, "%.*s\"hard\": 18446744073709551615, \"soft\": -1%s",
                    (int) (at - PODMAN), PODMAN, at + strlen("\"hard\": 1024, \"soft\": 512"));
    struct cdn_bundle b;
    struct cdn_error err;
    CHECK_EQ_INT(parse(json, &b, &err), 0);
    CHECK(b.rlimits[1].soft == RLIM_INFINITY && b.rlimits[1].hard == RLIM_INFINITY);
    CHECK_EQ_INT(b.rlimits[0].hard, 1024);
    cdn_bundle_free(&b);
    /* a fraction, or a negative other than -1, is not a limit */
    (void) snprintf(json, sizeof json, "%.*s\"hard\": 1.5, \"soft\": 1%s", (int) (at - PODMAN), PODMAN,
                    at + strlen("\"hard\": 1024, \"soft\": 512"));
    CHECK(parse(json, &b, &err) < 0);
    CHECK_STREQ(err.field, "process.rlimits[1]");
    cdn_bundle_free(&b);
    (void) snprintf(json, sizeof json, "%.*s\"hard\": 5, \"soft\": -2%s", (int) (at - PODMAN), PODMAN,
                    at + strlen("\"hard\": 1024, \"soft\": 512"));
    CHECK(parse(json, &b, &err) < 0);
    CHECK_STREQ(err.field, "process.rlimits[1]");
    cdn_bundle_free(&b);
}

TEST(not_json_is_refused)
{
    struct cdn_bundle b;
    struct cdn_error err;
    CHECK(parse("[1]", &b, &err) < 0);
    CHECK_STREQ(err.field, "config.json");
    cdn_bundle_free(&b);
    CHECK(parse("{\"ociVersion\": \"1.0.0\", \"ociVersion\": \"1.0.0\"}", &b, &err) < 0);
    CHECK_STREQ(err.field, "config.json");
    cdn_bundle_free(&b);
}

/* The layers of the root an engine mounted (layers.c): podman's options as the mount table gives
 * them (the newer kernels' fsync=volatile included), and what is refused, naming root.path. */
TEST(overlay_options_are_read_as_the_mount_table_gives_them)
{
    struct cdn_rt_overlay o;
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_rt_overlay_options("rw,lowerdir=/s/l/A:/s/l/B,upperdir=/s/c/diff,workdir=/s/c/work,"
                                        "uuid=on,fsync=volatile,redirect_dir=on",
                                        &o, &err),
                 0);
    CHECK_STREQ(o.lowerdir, "/s/l/A:/s/l/B");
    CHECK_STREQ(o.upperdir, "/s/c/diff");
    CHECK_STREQ(o.workdir, "/s/c/work");
    CHECK(o.volatile_upper);
    CHECK_STREQ(o.redirect_dir, "on");
    CHECK_STREQ(o.metacopy, "");
    cdn_rt_overlay_free(&o);
    static const char *const refused[] = {"rw,upperdir=/u,workdir=/w", "rw,lowerdir=/l,upperdir=/u",
                                          "rw,lowerdir=/a\\054b", "rw,lowerdir=/l::/d"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        err = (struct cdn_error){0};
        CHECK(cdn_rt_overlay_options(refused[i], &o, &err) < 0);
        CHECK_STREQ(err.field, "root.path");
        cdn_rt_overlay_free(&o);
    }
}
