/* config.json of an OCI bundle (runtime spec 1.x): bundle.h says what becomes of each part.
 * Runs in cordon-runtime, as root on the host; the config is the engine's, and what it asks beyond
 * what cordon grants is refused (the JSON path named) or reduced (a note). Unknown fields are left
 * alone, as runc does: engines add their own. */
#include "runtime/bundle.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "confine/slot.h"
#include "core/json-util.h"
#include "runtime/oci-seccomp.h"
#include "shared/macro.h"

#define MIB (1024ULL * 1024)

/* A refusal: fmt (a literal, checked here) takes the field's name, then what. */
#define bad(err, field, fmt, what)                                                                           \
    cdn_error_field(err, EINVAL, field, fmt, field, (const char *) (what) ? (const char *) (what) : "")

/* A reduction, said in b->notes: fmt takes what. */
#define note(b, fmt, what)                                                                                   \
    ({                                                                                                       \
        char line_[512];                                                                                     \
        (void) snprintf(line_, sizeof line_, fmt, what);                                                     \
        cdn_strv_push(&(b)->notes, line_);                                                                   \
    })

/* The config's integers are read as reals (JSON_DECODE_INT_AS_REAL): podman writes an unlimited
 * rlimit as 2^64-1, which jansson's integers (int64) refuse. Exact up to 2^53, well past any limit
 * but an unlimited one. integer(): a whole number within int64, or absent (*ret = 0); false for
 * anything else. */
static bool integer(const json_t *j, int64_t *ret)
{
    *ret = 0;
    if (!j)
        return true;
    double d = json_number_value(j);
    if (!json_is_number(j) || d >= 9.2e18 || d <= -9.2e18 || d != (double) (int64_t) d)
        return false;
    *ret = (int64_t) d;
    return true;
}

/* An rlimit's value: a whole number; -1, or 2^63 and above, for unlimited. */
static bool rlim_value(const json_t *j, uint64_t *ret)
{
    double d = json_number_value(j);
    if (!json_is_number(j) || (d < 0 && d != -1))
        return false;
    if (d < 0 || d >= 9.2e18) {
        *ret = RLIM_INFINITY;
        return true;
    }
    if (d != (double) (uint64_t) d)
        return false;
    *ret = (uint64_t) d;
    return true;
}

/* A JSON array of strings into l; path names it in errors. absolute: each an absolute path. */
static int strings(const json_t *a, const char *path, bool absolute, struct cdn_strv *l,
                   struct cdn_error *err)
{
    if (!a)
        return 0;
    if (!json_is_array(a))
        return bad(err, path, "%s: must be an array of strings%s", NULL);
    size_t i;
    const json_t *v;
    json_array_foreach(a, i, v)
    {
        char field[96];
        (void) snprintf(field, sizeof field, "%s[%zu]", path, i);
        const char *s = json_string_value(v);
        if (!s || strlen(s) >= 4096)
            return bad(err, field, "%s: must be a string (under 4096 bytes)%s", NULL);
        if (absolute && !cdn_path_is_safe_absolute(s))
            return bad(err, field, "%s: '%s' must be an absolute path without '.' or '..'", s);
        int r = cdn_strv_push(l, s);
        if (r < 0)
            return r == -E2BIG ? bad(err, field, "%s: too many%s", NULL) : r;
    }
    return 0;
}

/* A JSON object of strings into l as "key=value". */
static int pairs(const json_t *o, const char *path, struct cdn_strv *l, struct cdn_error *err)
{
    if (!o)
        return 0;
    if (!json_is_object(o))
        return bad(err, path, "%s: must be an object of strings%s", NULL);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *) o, k, v)
    {
        char field[160];
        (void) snprintf(field, sizeof field, "%s.%.100s", path, k);
        const char *s = json_string_value(v);
        if (!s || !*k || strchr(k, '=') || strlen(k) + strlen(s) >= 4096)
            return bad(err, field, "%s: must be a string (key without '=', under 4096 bytes)%s", NULL);
        char *kv = NULL;
        if (asprintf(&kv, "%s=%s", k, s) < 0)
            return -ENOMEM;
        int r = cdn_strv_push(l, kv);
        free(kv);
        if (r < 0)
            return r == -E2BIG ? bad(err, field, "%s: too many%s", NULL) : r;
    }
    return 0;
}

static const struct {
    const char *name;
    int resource;
} rlimit_names[] = {
    {"RLIMIT_AS", RLIMIT_AS},
    {"RLIMIT_CORE", RLIMIT_CORE},
    {"RLIMIT_CPU", RLIMIT_CPU},
    {"RLIMIT_DATA", RLIMIT_DATA},
    {"RLIMIT_FSIZE", RLIMIT_FSIZE},
    {"RLIMIT_LOCKS", RLIMIT_LOCKS},
    {"RLIMIT_MEMLOCK", RLIMIT_MEMLOCK},
    {"RLIMIT_MSGQUEUE", RLIMIT_MSGQUEUE},
    {"RLIMIT_NICE", RLIMIT_NICE},
    {"RLIMIT_NOFILE", RLIMIT_NOFILE},
    {"RLIMIT_NPROC", RLIMIT_NPROC},
    {"RLIMIT_RSS", RLIMIT_RSS},
    {"RLIMIT_RTPRIO", RLIMIT_RTPRIO},
    {"RLIMIT_RTTIME", RLIMIT_RTTIME},
    {"RLIMIT_SIGPENDING", RLIMIT_SIGPENDING},
    {"RLIMIT_STACK", RLIMIT_STACK},
};

static int parse_rlimits(const json_t *a, struct cdn_bundle *b, struct cdn_error *err)
{
    if (!a)
        return 0;
    if (!json_is_array(a))
        return bad(err, "process.rlimits", "%s: must be an array%s", NULL);
    size_t i;
    const json_t *v;
    json_array_foreach(a, i, v)
    {
        char field[64];
        (void) snprintf(field, sizeof field, "process.rlimits[%zu]", i);
        const char *type = json_string_value(json_object_get(v, "type"));
        uint64_t s, h;
        if (!type || !rlim_value(json_object_get(v, "soft"), &s) ||
            !rlim_value(json_object_get(v, "hard"), &h))
            return bad(err, field, "%s: needs \"type\", and \"soft\" and \"hard\" as whole numbers%s", NULL);
        size_t k = 0;
        while (k < ELEMENTSOF(rlimit_names) && strcmp(rlimit_names[k].name, type) != 0)
            k++;
        if (k == ELEMENTSOF(rlimit_names))
            return bad(err, field, "%s.type: '%s' is not an RLIMIT_* this runtime knows", type);
        if (s > h)
            return bad(err, field, "%s: its soft limit is above its hard limit%s", NULL);
        if (b->n_rlimits == CDN_BUNDLE_RLIMITS_MAX)
            return bad(err, field, "%s: too many rlimits%s", NULL);
        for (size_t j = 0; j < b->n_rlimits; j++)
            if (b->rlimits[j].resource == rlimit_names[k].resource)
                return bad(err, field, "%s: %s is given twice", type);
        b->rlimits[b->n_rlimits++] =
            (struct cdn_bundle_rlimit){.resource = rlimit_names[k].resource, .soft = s, .hard = h};
    }
    return 0;
}

static int parse_process(const json_t *p, struct cdn_bundle *b, struct cdn_error *err)
{
    if (!json_is_object(p))
        return bad(err, "process", "%s: the container's process is required%s", NULL);
    int r = strings(json_object_get(p, "args"), "process.args", false, &b->args, err);
    if (r < 0)
        return r;
    if (b->args.n == 0 || !b->args.v[0][0])
        return bad(err, "process.args", "%s: the command to run is required%s", NULL);
    if ((r = strings(json_object_get(p, "env"), "process.env", false, &b->env, err)) < 0)
        return r;
    for (size_t i = 0; i < b->env.n; i++)
        if (!strchr(b->env.v[i], '=') || b->env.v[i][0] == '=') {
            char field[48];
            (void) snprintf(field, sizeof field, "process.env[%zu]", i);
            return bad(err, field, "%s: '%s' is not KEY=VALUE", b->env.v[i]);
        }
    const char *cwd = json_string_value(json_object_get(p, "cwd"));
    if (!cwd || !cdn_path_is_safe_absolute(cwd))
        return bad(err, "process.cwd", "%s: '%s' must be an absolute path without '.' or '..'", cwd);
    free(b->spec.workdir);
    if (!(b->spec.workdir = strdup(cwd)))
        return -ENOMEM;
    b->spec.workdir_given = true;
    const json_t *u = json_object_get(p, "user");
    const json_t *uid = json_object_get(u, "uid"), *gid = json_object_get(u, "gid");
    int64_t uv, gv;
    if (!integer(uid, &uv) || !integer(gid, &gv) || uv < 0 || uv > 65535 || gv < 0 || gv > 65535)
        return bad(err, "process.user", "%s: uid and gid must be numbers of the container's 0-65535%s", NULL);
    b->uid = (uint32_t) uv;
    b->gid = (uint32_t) gv;
    char user[32];
    (void) snprintf(user, sizeof user, "%u:%u", b->uid, b->gid);
    free(b->spec.user);
    if (!(b->spec.user = strdup(user)))
        return -ENOMEM;
    if (json_array_size(json_object_get(u, "additionalGids")) > 0 &&
        (r = note(b, "process.user.additionalGids: %snot given (the process has its gid only)", "")) < 0)
        return r;
    b->terminal = json_is_true(json_object_get(p, "terminal"));
    if ((r = parse_rlimits(json_object_get(p, "rlimits"), b, err)) < 0)
        return r;
    const json_t *caps = json_object_get(p, "capabilities");
    size_t n = json_array_size(json_object_get(caps, "bounding")) +
               json_array_size(json_object_get(caps, "effective")) +
               json_array_size(json_object_get(caps, "permitted"));
    if (n &&
        (r = note(b, "process.capabilities: %snone held (a cordon container's processes hold no capability)",
                  "")) < 0)
        return r;
    const json_t *nnp = json_object_get(p, "noNewPrivileges");
    if (nnp && !json_is_true(nnp) && (r = note(b, "process.noNewPrivileges: %strue (always)", "")) < 0)
        return r;
    return 0;
}

/* Namespaces: cordon always makes its own user, pid, mount, ipc, uts (and cgroup, time) namespaces;
 * it joins a given network namespace (CNI's). Sharing the host's, or joining another's, is refused. */
static int parse_namespaces(const json_t *a, struct cdn_bundle *b, struct cdn_error *err)
{
    static const char *const types[] = {"pid", "network", "mount", "ipc", "uts", "user", "cgroup", "time"};
    bool seen[ELEMENTSOF(types)] = {false};
    if (!json_is_array(a))
        return bad(err, "linux.namespaces", "%s: must be an array%s", NULL);
    size_t i;
    const json_t *v;
    json_array_foreach(a, i, v)
    {
        char field[64];
        (void) snprintf(field, sizeof field, "linux.namespaces[%zu]", i);
        const char *type = json_string_value(json_object_get(v, "type"));
        const json_t *pj = json_object_get(v, "path");
        const char *path = json_string_value(pj);
        size_t k = 0;
        while (type && k < ELEMENTSOF(types) && strcmp(types[k], type) != 0)
            k++;
        if (!type || k == ELEMENTSOF(types))
            return bad(err, field, "%s.type: '%s' is not a namespace type", type);
        if (seen[k])
            return bad(err, field, "%s: the %s namespace is given twice", type);
        seen[k] = true;
        if (pj && (!path || !cdn_path_is_safe_absolute(path)))
            return bad(err, field, "%s.path: must be an absolute path%s", NULL);
        if (path && strcmp(type, "network") != 0)
            return bad(err, field,
                       "%s.path: joining another container's %s namespace is refused (only a network "
                       "namespace is joined)",
                       type);
        if (path && !(b->netns_path = strdup(path)))
            return -ENOMEM;
    }
    static const char *const own[] = {"pid", "mount", "ipc", "uts", "network"};
    for (size_t k = 0; k < ELEMENTSOF(own); k++) {
        size_t t = 0;
        while (strcmp(types[t], own[k]) != 0)
            t++;
        if (!seen[t])
            return bad(err, "linux.namespaces",
                       "%s: sharing the host's %s namespace is refused: a cordon container has its own",
                       own[k]);
    }
    return 0;
}

static bool option(const json_t *opts, const char *name)
{
    size_t i;
    const json_t *v;
    json_array_foreach(opts, i, v)
    {
        const char *s = json_string_value(v);
        if (s && strcmp(s, name) == 0)
            return true;
    }
    return false;
}

static int parse_mounts(const json_t *a, const char *bundle_dir, struct cdn_bundle *b, struct cdn_error *err)
{
    static const char *const kernel[] = {"proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup", "cgroup2"};
    static const char *const places[] = {"/proc",          "/sys",          "", "/dev/pts", "/dev/mqueue",
                                         "/sys/fs/cgroup", "/sys/fs/cgroup"};
    if (!a)
        return 0;
    if (!json_is_array(a))
        return bad(err, "mounts", "%s: must be an array%s", NULL);
    size_t i;
    const json_t *m;
    json_array_foreach(a, i, m)
    {
        char field[48];
        (void) snprintf(field, sizeof field, "mounts[%zu]", i);
        const char *dst = json_string_value(json_object_get(m, "destination"));
        const char *type = json_string_value(json_object_get(m, "type"));
        const char *src = json_string_value(json_object_get(m, "source"));
        const json_t *opts = json_object_get(m, "options");
        if (!dst || !cdn_path_is_safe_absolute(dst) || strcmp(dst, "/") == 0)
            return bad(err, field,
                       "%s.destination: '%s' must be an absolute path below / without '.' or '..'", dst);
        if (opts && !json_is_array(opts))
            return bad(err, field, "%s.options: must be an array of strings%s", NULL);
        if ((type && strcmp(type, "bind") == 0) || option(opts, "bind") || option(opts, "rbind")) {
            if (!src || !*src || strlen(src) >= 4000)
                return bad(err, field, "%s.source: a bind needs its source%s", NULL);
            char abs[4200];
            (void) snprintf(abs, sizeof abs, "%s%s%s", src[0] == '/' ? "" : bundle_dir,
                            src[0] == '/' ? "" : "/", src);
            int r = cdn_spec_add_mount(&b->spec, abs, dst, option(opts, "ro"), err);
            if (r < 0) {
                (void) snprintf(err->field, sizeof err->field, "%s", field);
                return r;
            }
            struct cdn_mount *added = &b->spec.mounts[b->spec.n_mounts - 1];
            added->nonrecursive = !option(opts, "rbind");
            added->noexec = option(opts, "noexec");
            continue;
        }
        size_t k = 0;
        while (type && k < ELEMENTSOF(kernel) && strcmp(kernel[k], type) != 0)
            k++;
        if (!type || k == ELEMENTSOF(kernel))
            return bad(err, field,
                       "%s.type: '%s' is refused: a cordon container mounts binds and the kernel's own "
                       "file systems (proc, sysfs, tmpfs, devpts, mqueue, cgroup) only",
                       type);
        /* Each but tmpfs has its one place; there cordon makes its own proc, devpts and /dev. */
        if (k != 2 && strcmp(dst, places[k]) != 0)
            return cdn_error_field(err, EINVAL, field, "%s.destination: %s goes on %s only", field, type,
                                   places[k]);
        if (k == 5 || k == 6) {
            struct statfs fs;
            if (statfs("/sys/fs/cgroup", &fs) < 0 || (unsigned long) fs.f_type != CGROUP2_SUPER_MAGIC) {
                int r = note(b, "%s: no cgroup file system: the host's cgroups are v1", field);
                if (r < 0)
                    return r;
                continue;
            }
        }
        if (k == 0 || k == 3 || (k == 2 && strcmp(dst, "/dev") == 0))
            continue;
        if (b->n_mounts == CDN_BUNDLE_MOUNTS_MAX)
            return bad(err, field, "%s: too many mounts%s", NULL);
        struct cdn_bundle_mount *km = &b->mounts[b->n_mounts++];
        km->index = (unsigned) i;
        if (!(km->destination = strdup(dst)) || !(km->type = strdup(type)))
            return -ENOMEM;
        char path[64];
        (void) snprintf(path, sizeof path, "%s.options", field);
        int r = strings(opts, path, false, &km->options, err);
        if (r < 0)
            return r;
    }
    return 0;
}

/* The devices a cordon container has (rootfs.c mount_dev); one beyond them is refused. */
static int parse_devices(const json_t *a, struct cdn_error *err)
{
    static const char *const safe[] = {"/dev/null",    "/dev/zero", "/dev/full", "/dev/random",
                                       "/dev/urandom", "/dev/tty",  "/dev/ptmx"};
    size_t i;
    const json_t *d;
    json_array_foreach(a, i, d)
    {
        char field[48];
        (void) snprintf(field, sizeof field, "linux.devices[%zu]", i);
        const char *path = json_string_value(json_object_get(d, "path"));
        size_t k = 0;
        while (path && k < ELEMENTSOF(safe) && strcmp(safe[k], path) != 0)
            k++;
        if (!path || k == ELEMENTSOF(safe))
            return bad(err, field,
                       "%s: '%s' is refused: a cordon container has /dev/null, zero, full, random, "
                       "urandom, tty and ptmx only",
                       path);
    }
    return 0;
}

/* Sysctls of the container's own namespaces (its network, IPC, UTS): others would change the host. */
static int parse_sysctls(const json_t *o, struct cdn_bundle *b, struct cdn_error *err)
{
    static const char *const ipc[] = {"kernel.msgmax", "kernel.msgmnb",         "kernel.msgmni",
                                      "kernel.sem",    "kernel.shmall",         "kernel.shmmax",
                                      "kernel.shmmni", "kernel.shm_rmid_forced"};
    int r = pairs(o, "linux.sysctl", &b->sysctls, err);
    if (r < 0)
        return r;
    for (size_t i = 0; i < b->sysctls.n; i++) {
        const char *kv = b->sysctls.v[i];
        size_t len = strcspn(kv, "=");
        bool ok = (strncmp(kv, "net.", 4) == 0 && !strstr(kv, "..") && !memchr(kv, '/', len)) ||
                  strncmp(kv, "fs.mqueue.", 10) == 0 ||
                  (len == 15 && strncmp(kv, "kernel.hostname", len) == 0) ||
                  (len == 17 && strncmp(kv, "kernel.domainname", len) == 0);
        for (size_t k = 0; !ok && k < ELEMENTSOF(ipc); k++)
            ok = strlen(ipc[k]) == len && strncmp(kv, ipc[k], len) == 0;
        if (!ok) {
            char field[160];
            (void) snprintf(field, sizeof field, "linux.sysctl.%.*s", (int) (len < 100 ? len : 100), kv);
            return bad(err, field,
                       "%s: refused: only the container's own namespaces' sysctls (net.*, the IPC and UTS "
                       "ones, fs.mqueue.*) are set%s",
                       NULL);
        }
    }
    return 0;
}

static int parse_resources(const json_t *res, struct cdn_bundle *b, struct cdn_error *err)
{
    struct cdn_limits *l = &b->spec.limits;
    int64_t mem, pids, quota, period;
    if (!integer(json_object_get(json_object_get(res, "memory"), "limit"), &mem) ||
        !integer(json_object_get(json_object_get(res, "pids"), "limit"), &pids) ||
        !integer(json_object_get(json_object_get(res, "cpu"), "quota"), &quota) ||
        !integer(json_object_get(json_object_get(res, "cpu"), "period"), &period))
        return bad(err, "linux.resources",
                   "%s: memory.limit, pids.limit, cpu.quota and cpu.period are whole numbers%s", NULL);
    if (mem > 0) {
        uint64_t mb = ((uint64_t) mem + MIB - 1) / MIB;
        if (mb < CDN_MEMORY_MB_MIN)
            return bad(err, "linux.resources.memory.limit", "%s: below cordon's least (8 MiB)%s", NULL);
        l->memory_mb = mb < CDN_MEMORY_MB_MAX ? mb : CDN_MEMORY_MB_MAX;
    } else { /* none asked: cordon's default (spec.c), never the host's whole memory */
        int r = note(b, "linux.resources.memory.limit: none given: %s", "cordon's default applies");
        if (r < 0)
            return r;
    }
    if (pids > 0 && pids < CDN_PIDS_MIN)
        return bad(err, "linux.resources.pids.limit", "%s: at least 2 (the container's init counts)%s", NULL);
    if (pids > 0)
        l->pids = (uint64_t) pids < CDN_PIDS_MAX ? (uint64_t) pids : CDN_PIDS_MAX;
    else if (note(b, "linux.resources.pids.limit: none given: %s", "cordon's default applies") < 0)
        return -ENOMEM;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (quota > 0) {
        if (period <= 0)
            period = 100000;
        l->cpus = (double) quota / (double) period;
        if (l->cpus < 0.01)
            return bad(err, "linux.resources.cpu.quota", "%s: below 1%% of a CPU%s", NULL);
        b->cpu_limited = true;
    } else {
        l->cpus = ncpu > 0 ? (double) ncpu : 1.0;
    }
    return 0;
}

/* cordon's annotations: its own features per container. An io.cordon.* key it does not know is an
 * error (a typo would otherwise leave a container without the guard asked for). */
static int parse_annotations(const json_t *o, struct cdn_bundle *b, struct cdn_error *err)
{
    int r = pairs(o, "annotations", &b->annotations, err);
    if (r < 0)
        return r;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *) o, k, v)
    {
        if (strncmp(k, "io.cordon.", 10) != 0)
            continue;
        char field[160];
        (void) snprintf(field, sizeof field, "annotations.%.100s", k);
        const char *s = json_string_value(v);
        if (strcmp(k, "io.cordon.on-violation") == 0) {
            int ov = cdn_on_violation_from_string(s);
            if (ov < 0)
                return bad(err, field, "%s: '%s' is not log, deny or kill", s);
            b->spec.on_violation = (enum cdn_on_violation) ov;
            continue;
        }
        if (strcmp(k, "io.cordon.disk-mb") == 0) { /* the largest file it may write (RLIMIT_FSIZE) */
            char *end;
            unsigned long long mb = s ? strtoull(s, &end, 10) : 0;
            if (!s || !*s || *end || mb < CDN_DISK_MB_MIN || mb > CDN_DISK_MB_MAX)
                return bad(err, field, "%s: '%s' is not a number of MiB within cordon's disk limits", s);
            b->spec.limits.disk_mb = mb;
            continue;
        }
        struct cdn_strv *into = strcmp(k, "io.cordon.network.allow") == 0 ? &b->spec.net_allow
                                : strcmp(k, "io.cordon.protect") == 0     ? &b->spec.protect
                                                                          : NULL;
        if (!into)
            return bad(err, field,
                       "%s: not one of cordon's annotations (io.cordon.network.allow, io.cordon.protect, "
                       "io.cordon.on-violation, io.cordon.disk-mb)%s",
                       NULL);
        _cleanup_free_ char *list = strdup(s);
        if (!list)
            return -ENOMEM;
        char *save = NULL;
        for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            while (*t == ' ')
                t++;
            if (*t && (r = cdn_strv_push(into, t)) < 0)
                return r == -E2BIG ? bad(err, field, "%s: too many entries%s", NULL) : r;
        }
        if (into == &b->spec.net_allow)
            b->spec.net_mode = CDN_NET_ALLOWLIST;
    }
    return 0;
}

static int parse_hooks(const json_t *o, struct cdn_bundle *b, struct cdn_error *err)
{
    static const char *const kinds[_CDN_HOOK_MAX] = {"prestart",       "createRuntime", "createContainer",
                                                     "startContainer", "poststart",     "poststop"};
    if (!o)
        return 0;
    if (!json_is_object(o))
        return bad(err, "hooks", "%s: must be an object%s", NULL);
    for (size_t k = 0; k < _CDN_HOOK_MAX; k++) {
        const json_t *a = json_object_get(o, kinds[k]);
        size_t i;
        const json_t *h;
        if (a && !json_is_array(a))
            return bad(err, "hooks", "%s: each kind must be an array (%s)", kinds[k]);
        json_array_foreach(a, i, h)
        {
            char field[64];
            (void) snprintf(field, sizeof field, "hooks.%s[%zu]", kinds[k], i);
            const char *path = json_string_value(json_object_get(h, "path"));
            if (!path || !cdn_path_is_safe_absolute(path))
                return bad(err, field, "%s.path: '%s' must be an absolute path", path);
            if (k == CDN_HOOK_CREATE_CONTAINER)
                return bad(err, field,
                           "%s: refused: it would run a host program as the host's root in the container's "
                           "namespaces (createRuntime runs on the host, startContainer inside, confined)%s",
                           NULL);
            if (b->n_hooks == CDN_BUNDLE_HOOKS_MAX)
                return bad(err, field, "%s: too many hooks%s", NULL);
            struct cdn_bundle_hook *hk = &b->hooks[b->n_hooks++];
            hk->kind = (enum cdn_bundle_hook_kind) k;
            if (!(hk->path = strdup(path)))
                return -ENOMEM;
            char sub[80];
            (void) snprintf(sub, sizeof sub, "%s.args", field);
            int r = strings(json_object_get(h, "args"), sub, false, &hk->args, err);
            (void) snprintf(sub, sizeof sub, "%s.env", field);
            if (r < 0 || (r = strings(json_object_get(h, "env"), sub, false, &hk->env, err)) < 0)
                return r;
            int64_t t;
            if (!integer(json_object_get(h, "timeout"), &t) || t < 0 || t > 3600)
                return bad(err, field, "%s.timeout: 0-3600 seconds%s", NULL);
            hk->timeout_s = (int) t;
        }
    }
    return 0;
}

/* linux.uidMappings and gidMappings: the range the engine gave the container (podman --uidmap,
 * --userns=auto; a pod's hostUsers: false), whose ids the root's files have on disk. The container's
 * user namespace stays cordon's own (its slot's range, never shared); the root's files are idmapped
 * from the engine's range onto it. One range each, from the container's 0, the same for uids and
 * gids, never the host's root nor cordon's own ranges. */
static int parse_mappings(const json_t *lx, struct cdn_bundle *b, struct cdn_error *err)
{
    const json_t *u = json_object_get(lx, "uidMappings"), *g = json_object_get(lx, "gidMappings");
    if (!json_array_size(u) && !json_array_size(g))
        return 0;
    int64_t v[2][3];
    const json_t *m[2] = {u, g};
    static const char *const names[2] = {"linux.uidMappings", "linux.gidMappings"};
    for (int k = 0; k < 2; k++) {
        const json_t *e = json_array_get(m[k], 0);
        if (json_array_size(m[k]) != 1 || !integer(json_object_get(e, "containerID"), &v[k][0]) ||
            !integer(json_object_get(e, "hostID"), &v[k][1]) ||
            !integer(json_object_get(e, "size"), &v[k][2]))
            return bad(err, names[k], "%s: one range, {containerID, hostID, size}, for uids and for gids%s",
                       NULL);
        if (v[k][0] != 0 || v[k][1] <= 0 || v[k][2] <= 0 || v[k][2] > (int64_t) CDN_UID_RANGE ||
            v[k][1] + v[k][2] > (int64_t) CDN_UID_BASE)
            return bad(err, names[k],
                       "%s: from the container's 0, at most 65536 ids, on host ids above 0 and below "
                       "cordon's own (2^30)%s",
                       NULL);
    }
    if (v[0][1] != v[1][1] || v[0][2] != v[1][2])
        return bad(err, "linux.gidMappings", "%s: the same range as linux.uidMappings%s", NULL);
    b->spec_ids_from = (uint32_t) v[0][1];
    b->spec_ids_count = (uint32_t) v[0][2];
    return 0;
}

static int parse_linux(const json_t *lx, struct cdn_bundle *b, struct cdn_error *err)
{
    if (!json_is_object(lx))
        return bad(err, "linux", "%s: required (namespaces, resources…)%s", NULL);
    int r = parse_namespaces(json_object_get(lx, "namespaces"), b, err);
    if (r < 0)
        return r;
    if ((r = parse_mappings(lx, b, err)) < 0 ||
        (r = parse_devices(json_object_get(lx, "devices"), err)) < 0 ||
        (r = parse_sysctls(json_object_get(lx, "sysctl"), b, err)) < 0 ||
        (r = parse_resources(json_object_get(lx, "resources"), b, err)) < 0 ||
        (r = strings(json_object_get(lx, "maskedPaths"), "linux.maskedPaths", true, &b->masked, err)) < 0 ||
        (r = strings(json_object_get(lx, "readonlyPaths"), "linux.readonlyPaths", true, &b->readonly, err)) <
            0)
        return r;
    const json_t *cg = json_object_get(lx, "cgroupsPath");
    const char *cgp = json_string_value(cg);
    if (cg && (!cgp || strlen(cgp) >= 512 || strstr(cgp, "..")))
        return bad(err, "linux.cgroupsPath", "%s: a path under 512 bytes without '..'%s", NULL);
    if (cgp && *cgp && !(b->cgroups_path = strdup(cgp)))
        return -ENOMEM;
    const json_t *sc = json_object_get(lx, "seccomp");
    if (sc) {
        if (!json_is_object(sc) || !json_is_string(json_object_get(sc, "defaultAction")))
            return bad(err, "linux.seccomp", "%s: an object with its defaultAction%s", NULL);
        if ((r = cdn_oci_seccomp_compile(sc, &b->seccomp_insns, &b->seccomp_len, err)) < 0)
            return r;
    }
    return 0;
}

int cdn_bundle_parse(const char *json, size_t len, const char *bundle_dir, struct cdn_bundle *ret,
                     struct cdn_error *err)
{
    *ret = (struct cdn_bundle){0};
    int r = cdn_spec_init(&ret->spec);
    if (r < 0)
        return r;
    if (!bundle_dir || bundle_dir[0] != '/' || strlen(bundle_dir) >= 4000)
        return bad(err, "bundle", "%s: '%s' must be an absolute directory", bundle_dir);
    json_error_t jerr;
    _cleanup_json_ json_t *c = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &jerr);
    if (!json_is_object(c))
        return cdn_error_field(err, EINVAL, "config.json", "not a JSON object (%s, line %d)",
                               c ? "not an object" : jerr.text, jerr.line);
    const char *v = json_string_value(json_object_get(c, "ociVersion"));
    if (!v || strncmp(v, "1.", 2) != 0)
        return bad(err, "ociVersion", "%s: '%s' is not a runtime spec 1.x", v);
    const json_t *root = json_object_get(c, "root");
    const char *path = json_string_value(json_object_get(root, "path"));
    if (!path || !*path || strlen(path) >= 4000 || strstr(path, ".."))
        return bad(err, "root.path", "%s: '%s' must name the root file system (without '..')", path);
    char abs[8200];
    (void) snprintf(abs, sizeof abs, "%s%s%s", path[0] == '/' ? "" : bundle_dir, path[0] == '/' ? "" : "/",
                    path);
    free(ret->spec.image);
    if (!(ret->spec.image = strdup(abs)))
        return -ENOMEM;
    ret->spec.read_only_root = json_is_true(json_object_get(root, "readonly"));
    ret->spec.writable_system = !ret->spec.read_only_root; /* the container's root is its own to change */
    const char *host = json_string_value(json_object_get(c, "hostname"));
    if (host) {
        free(ret->spec.hostname);
        if (!(ret->spec.hostname = strdup(host)))
            return -ENOMEM;
    }
    if ((r = parse_process(json_object_get(c, "process"), ret, err)) < 0 ||
        (r = parse_linux(json_object_get(c, "linux"), ret, err)) < 0 ||
        (r = parse_mounts(json_object_get(c, "mounts"), bundle_dir, ret, err)) < 0 ||
        (r = parse_hooks(json_object_get(c, "hooks"), ret, err)) < 0 ||
        (r = parse_annotations(json_object_get(c, "annotations"), ret, err)) < 0)
        return r;
    return 0;
}

void cdn_bundle_free(struct cdn_bundle *b)
{
    cdn_spec_free(&b->spec);
    cdn_strv_free(&b->args);
    cdn_strv_free(&b->env);
    free(b->netns_path);
    free(b->cgroups_path);
    for (size_t i = 0; i < b->n_mounts; i++) {
        free(b->mounts[i].destination);
        free(b->mounts[i].type);
        cdn_strv_free(&b->mounts[i].options);
    }
    for (size_t i = 0; i < b->n_hooks; i++) {
        free(b->hooks[i].path);
        cdn_strv_free(&b->hooks[i].args);
        cdn_strv_free(&b->hooks[i].env);
    }
    cdn_strv_free(&b->masked);
    cdn_strv_free(&b->readonly);
    cdn_strv_free(&b->sysctls);
    cdn_strv_free(&b->annotations);
    cdn_strv_free(&b->notes);
    free(b->seccomp_insns);
    *b = (struct cdn_bundle){0};
}
