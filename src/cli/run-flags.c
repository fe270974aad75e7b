#include "run-flags.h"
#include "shared/parse-util.h"
#include "shared/user.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*flag_fn)(struct cdn_run_opts *o, const char *arg, struct cdn_error *err);

struct flag {
    const char *name;
    bool has_arg;
    flag_fn fn;
    const char *field; /* spec field it sets */
    const char *arg;   /* the value's name in --help, "" for switches */
    const char *help;
};

static int size_mb(const char *flag, const char *field, const char *arg, uint64_t *ret, struct cdn_error *err)
{
    uint64_t bytes;
    int r = cdn_parse_size(arg, &bytes);
    if (r < 0)
        return cdn_error_field(err, EINVAL, field, "%s '%s': not a size (use e.g. 512M, 2G)", flag, arg);
    *ret = (bytes + (1 << 20) - 1) >> 20;
    return 0;
}

static int f_memory(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    return size_mb("--memory", "limits.memory_mb", a, &o->spec.limits.memory_mb, e);
}
static int f_disk(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    return size_mb("--disk", "limits.disk_mb", a, &o->spec.limits.disk_mb, e);
}
static int f_cpus(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    if (cdn_parse_cpus(a, &o->spec.limits.cpus) < 0)
        return cdn_error_field(e, EINVAL, "limits.cpus", "--cpus '%s': not a CPU count in (0, 1024]", a);
    return 0;
}
static int f_pids(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    if (cdn_parse_u64(a, &o->spec.limits.pids) < 0)
        return cdn_error_field(e, EINVAL, "limits.pids", "--pids '%s': not a whole number", a);
    return 0;
}
static int f_nofile(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    if (cdn_parse_u64(a, &o->spec.limits.nofile) < 0)
        return cdn_error_field(e, EINVAL, "limits.nofile", "--nofile '%s': not a whole number", a);
    return 0;
}
static int f_ptys(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    if (cdn_parse_u64(a, &o->spec.limits.ptys) < 0)
        return cdn_error_field(e, EINVAL, "limits.ptys", "--ptys '%s': not a whole number", a);
    return 0;
}
static int f_timeout(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    if (cdn_parse_duration(a, &o->spec.limits.timeout_ms) < 0)
        return cdn_error_field(e, EINVAL, "limits.timeout_s",
                               "--timeout '%s': not a duration (use e.g. 30s, 5m)", a);
    return 0;
}
static int f_idle_timeout(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    if (cdn_parse_duration(a, &o->spec.limits.idle_timeout_ms) < 0)
        return cdn_error_field(e, EINVAL, "limits.idle_timeout_s",
                               "--idle-timeout '%s': not a duration (use e.g. 30s, 5m)", a);
    return 0;
}
static int set_str(char **dst, const char *a)
{
    char *c = strdup(a);
    if (!c)
        return -ENOMEM;
    free(*dst);
    *dst = c;
    return 0;
}
static int f_tier(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    int t = cdn_tier_from_string(a);
    if (t < 0)
        return cdn_error_field(e, EINVAL, "tier", "--tier '%s': not one of process, container, microvm, vm",
                               a);
    o->spec.tier = (enum cdn_tier) t;
    return 0;
}
static int f_image(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    (void) e;
    /* Not host, not a directory: an OCI reference, which the full build resolves (cli.h). */
    o->image_oci = strcmp(a, "host") != 0 && a[0] != '/';
    o->needs_full |= o->image_oci;
    return set_str(&o->spec.image, a);
}
static int f_pull(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    if (strcmp(a, "missing") != 0 && strcmp(a, "always") != 0 && strcmp(a, "never") != 0)
        return cdn_error_field(e, EINVAL, "pull", "--pull '%s': not one of missing, always, never", a);
    o->pull = a;
    o->spec.pull = (enum cdn_pull_policy) cdn_pull_policy_from_string(a); /* cordon create sends it */
    o->needs_full = true;
    return 0;
}
static int f_workdir(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    (void) e;
    o->workdir_given = true;
    return set_str(&o->spec.workdir, a);
}
static int f_user(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    if (cdn_user_check(a, e) < 0)
        return -EINVAL;
    return set_str(&o->spec.user, a);
}
static int f_trajectory(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    if (!cdn_trajectory_id_valid(a))
        return cdn_error_field(e, EINVAL, "trajectory",
                               "--trajectory: segments of letters, digits, '.', '_' or '-' joined by '/'");
    return set_str(&o->spec.trajectory, a);
}
static int f_hostname(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    (void) e;
    return set_str(&o->spec.hostname, a);
}
static int f_net(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    if (strcmp(a, "none") == 0 || strcmp(a, "open") == 0) {
        o->spec.net_mode = a[0] == 'n' ? CDN_NET_NONE : CDN_NET_OPEN;
        return 0;
    }
    if (strncmp(a, "allow=", 6) != 0 || !a[6])
        return cdn_error_field(e, EINVAL, "network.mode",
                               "--net '%s': expected none, open or allow=HOST[:PORT][,…]", a);
    o->spec.net_mode = CDN_NET_ALLOWLIST;
    _cleanup_free_ char *copy = strdup(a + 6);
    if (!copy)
        return -ENOMEM;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int r = cdn_strv_push(&o->spec.net_allow, tok);
        if (r < 0)
            return cdn_error_field(e, -r, "network.allow", "--net: too many allow entries");
    }
    return 0;
}
static int f_bind(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    /* Like `docker run -v $PWD/x:…`, a relative source is taken from the current directory. */
    if (a[0] == '/' || a[0] == ':')
        return cdn_spec_parse_bind(&o->spec, a, e);
    char cwd[4096], abs[8300];
    if (!getcwd(cwd, sizeof cwd))
        return cdn_error_field(e, errno, "mounts", "--bind '%s': cannot resolve the current directory: %m",
                               a);
    (void) snprintf(abs, sizeof abs, "%s/%s", strcmp(cwd, "/") ? cwd : "", a);
    return cdn_spec_parse_bind(&o->spec, abs, e);
}
static int f_env(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    return cdn_spec_parse_env(&o->spec, a, e);
}
static int f_checkpoints(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    (void) a, (void) e;
    o->spec.checkpoints = true;
    return 0;
}
static int f_checkpoint_every_step(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    (void) a, (void) e;
    o->spec.checkpoints = o->spec.checkpoint_every_step = true;
    return 0;
}
static int f_from_checkpoint(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    if (!cdn_checkpoint_id_valid(a))
        return cdn_error_field(e, EINVAL, "checkpoint",
                               "--from-checkpoint '%s': not a checkpoint's id (ck-<16 hex>)", a);
    return set_str(&o->spec.checkpoint, a);
}
static int f_label(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    return cdn_spec_parse_label(&o->spec, a, e);
}
static int f_protect(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    if (a[0] != '/')
        return cdn_error_field(e, EINVAL, "protect", "--protect '%s': must be an absolute path or glob", a);
    return cdn_strv_push(&o->spec.protect, a);
}
static int f_on_violation(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    int v = cdn_on_violation_from_string(a);
    if (v < 0)
        return cdn_error_field(e, EINVAL, "on_violation", "--on-violation '%s': not one of log, deny, kill",
                               a);
    o->spec.on_violation = (enum cdn_on_violation) v;
    return 0;
}
static int f_disk_kind(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    int v = cdn_disk_kind_from_string(a);
    if (v < 0)
        return cdn_error_field(e, EINVAL, "disk", "--disk-kind '%s': not one of disk, memory", a);
    o->spec.disk = (enum cdn_disk_kind) v;
    return 0;
}
static int f_read_only(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    (void) a, (void) e;
    o->spec.read_only_root = true;
    return 0;
}
static int f_writable_system(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    (void) a, (void) e;
    o->spec.writable_system = true;
    return 0;
}
static int f_watch_writes(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    (void) a, (void) e;
    o->spec.watch_writes = true;
    return 0;
}
static int f_bind_allow(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    if (o->no_command)
        return cdn_error_field(e, EINVAL, "",
                               "--bind-allow: the daemon's configuration decides (bind-allow in "
                               "cordond.conf)");
    if (o->n_bind_allow >= ELEMENTSOF(o->bind_allow))
        return cdn_error_field(e, E2BIG, "", "--bind-allow: at most %d", CDN_BIND_RULES_MAX);
    o->bind_allow[o->n_bind_allow++] = a;
    return 0;
}
static int f_json(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
    (void) a, (void) e;
    o->json = true;
    return 0;
}
static int f_spec(struct cdn_run_opts *o, const char *a, struct cdn_error *e)
{
#if CDN_LEAN
    (void) a, (void) e;
    o->needs_full = true; /* no JSON parser here: cordon-full reads the spec */
    return 0;
#else
    FILE *f = fopen(a, "re");
    if (!f)
        return cdn_error_field(e, errno, "", "--spec '%s': %m", a);
    char *buf = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&buf, &cap, '\0', f);
    fclose(f);
    int r = n < 0 ? cdn_error_field(e, EINVAL, "", "--spec '%s': cannot read", a)
                  : cdn_spec_from_json(&o->spec, buf, (size_t) n, e);
    free(buf);
    return r;
#endif
}

static const struct flag flags[] = {
    {"--spec", true, f_spec, "", "FILE", "start from a JSON spec (docs/spec.md); later flags override it"},
    {"--tier", true, f_tier, "tier", "T", "container (default), process, microvm, vm"},
    {"--image", true, f_image, "image", "I",
     "host (default), a directory holding a root filesystem, or an OCI image (registry/name:tag, oci:DIR…)"},
    {"--pull", true, f_pull, "pull", "WHEN", "pull an OCI image: missing (default), always, never"},
    {"--cpus", true, f_cpus, "limits.cpus", "N", "CPU quota, fractional allowed (default 1)"},
    {"--memory", true, f_memory, "limits.memory_mb", "SIZE", "memory limit, no swap (default 512M)"},
    {"--pids", true, f_pids, "limits.pids", "N", "process/thread limit (default 256)"},
    {"--disk", true, f_disk, "limits.disk_mb", "SIZE",
     "writable layer: root changes, workdir, /tmp (default 1G)"},
    {"--disk-kind", true, f_disk_kind, "disk", "K",
     "disk (default: a filesystem of its own, full = ENOSPC) | memory (tmpfs, charged to --memory)"},
    {"--timeout", true, f_timeout, "limits.timeout_s", "DUR",
     "kill the whole sandbox after DUR, exit 124 (default 600s)"},
    {"--idle-timeout", true, f_idle_timeout, "limits.idle_timeout_s", "DUR",
     "cordond: end the sandbox after DUR without a request (default: never)"},
    {"--nofile", true, f_nofile, "limits.nofile", "N", "open file limit (default 1024)"},
    {"--ptys", true, f_ptys, "limits.ptys", "N", "pseudo-terminals open at once (default 64)"},
    {"--net", true, f_net, "network", "MODE",
     "none (default: loopback only); open and allow=… are not built yet"},
    {"--bind", true, f_bind, "mounts", "SRC:DST[:ro]", "bind a host path into the sandbox"},
    {"--bind-allow", true, f_bind_allow, NULL, "DIR[:ro]",
     "bind sources only at or beneath DIR (repeatable; docs/spec.md \"Bind sources\")"},
    {"--env", true, f_env, "env", "K=V", "set an environment variable"},
    {"--workdir", true, f_workdir, "workdir", "DIR", "working directory, writable (default /workspace)"},
    {"--user", true, f_user, "user", "U",
     "run as name, uid, name:group or uid:gid of the sandbox's /etc/passwd (container tier; default: "
     "the image's User, else root)"},
    {"--hostname", true, f_hostname, "hostname", "NAME", "host name inside (default cordon)"},
    {"--trajectory", true, f_trajectory, "trajectory", "ID",
     "record its steps in trajectory ID (cordon create; docs/trajectories.md)"},
    {"--checkpoints", false, f_checkpoints, "checkpoints", "",
     "keep its writable layer where checkpoints can be taken (cordon create; docs/trajectories.md)"},
    {"--checkpoint-every-step", false, f_checkpoint_every_step, "checkpoints", "",
     "--checkpoints, and one taken after each step of its --trajectory (cordon create)"},
    {"--from-checkpoint", true, f_from_checkpoint, "checkpoint", "CK",
     "start with the files of checkpoint CK (cordon create)"},
    {"--label", true, f_label, "labels", "K=V", "attach a label"},
    {"--protect", true, f_protect, "protect", "GLOB",
     "path the agent may neither read nor write (repeatable; * ? [..] and a trailing /**)"},
    {"--on-violation", true, f_on_violation, "on_violation", "A",
     "log (default) | deny | kill: kill ends the sandbox at the first violation"},
    {"--watch-writes", false, f_watch_writes, "watch_writes", "",
     "record writes aimed at system paths (system_write violations); costs every file write a round trip"},
    {"--writable-system", false, f_writable_system, "writable_system", "",
     "the image's /usr, /etc, /bin, /lib… writable too (package managers); no in-place verifier"},
    {"--read-only", false, f_read_only, "read_only", "",
     "root read-only; only workdir and temp dirs writable"},
    {"--json", false, f_json, NULL, "", "print a JSON result record on stderr at the end"},
};

void cdn_run_usage(FILE *f)
{
    for (size_t i = 0; i < ELEMENTSOF(flags); i++)
        fprintf(f, "  %-15s %-13s %s\n", flags[i].name, flags[i].arg, flags[i].help);
}

static const struct flag *find_flag(const char *arg, const char **ret_value)
{
    for (size_t i = 0; i < ELEMENTSOF(flags); i++) {
        size_t n = strlen(flags[i].name);
        if (strncmp(arg, flags[i].name, n) != 0)
            continue;
        if (arg[n] == 0) {
            *ret_value = NULL;
            return &flags[i];
        }
        if (arg[n] == '=' && flags[i].has_arg) {
            *ret_value = arg + n + 1;
            return &flags[i];
        }
    }
    return NULL;
}

int cdn_run_parse(int argc, char *const *argv, struct cdn_run_opts *opts, struct cdn_error *err)
{
    int i = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-')
            break; /* the command starts here */
        const char *value;
        const struct flag *f = find_flag(a, &value);
        if (!f)
            return cdn_error_field(err, EINVAL, "", "unknown flag '%s' (see cordon run --help)", a);
        if (f->has_arg && !value) {
            if (i + 1 >= argc)
                return cdn_error_field(err, EINVAL, f->field ? f->field : "", "%s needs a value", f->name);
            value = argv[++i];
        }
        int r = f->fn(opts, value ? value : "", err);
        if (r == -ENOMEM)
            return cdn_error_set(err, ENOMEM, "out of memory");
        if (r < 0)
            return r;
    }
    if (opts->no_command)
        return i < argc
                   ? cdn_error_field(err, EINVAL, "", "unexpected argument '%s': only flags here", argv[i])
                   : 0;
    if (i >= argc && opts->image_oci)
        return 0; /* the image's Entrypoint and Cmd (run.c) */
    if (i >= argc)
        return cdn_error_field(err, EINVAL, "", "no command given (cordon run [FLAGS] -- CMD [ARG…])");
    opts->argv = argv + i;
    return 0;
}
