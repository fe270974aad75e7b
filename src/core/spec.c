/* Sandbox spec: defaults, JSON decoding with field-naming errors, validation. */
#include "spec.h"
#include "protect.h"
#include "core/allow.h"
#include "shared/user.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const tier_names[_CDN_TIER_MAX] = {"process", "container", "microvm", "vm"};
static const char *const net_names[_CDN_NET_MAX] = {"none", "allowlist", "open"};
static const char *const violation_names[_CDN_VIOLATION_MAX] = {"log", "deny", "kill"};
static const char *const disk_names[_CDN_DISK_MAX] = {"disk", "memory"};
static const char *const pull_names[_CDN_PULL_MAX] = {"missing", "always", "never"};

static int lookup(const char *const *names, int n, const char *s)
{
    for (int i = 0; s && i < n; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -EINVAL;
}

const char *cdn_tier_to_string(enum cdn_tier t)
{
    return (unsigned) t < _CDN_TIER_MAX ? tier_names[t] : NULL;
}
int cdn_tier_from_string(const char *s)
{
    return lookup(tier_names, _CDN_TIER_MAX, s);
}
const char *cdn_net_mode_to_string(enum cdn_net_mode m)
{
    return (unsigned) m < _CDN_NET_MAX ? net_names[m] : NULL;
}
int cdn_net_mode_from_string(const char *s)
{
    return lookup(net_names, _CDN_NET_MAX, s);
}
const char *cdn_on_violation_to_string(enum cdn_on_violation v)
{
    return (unsigned) v < _CDN_VIOLATION_MAX ? violation_names[v] : NULL;
}
int cdn_on_violation_from_string(const char *s)
{
    return lookup(violation_names, _CDN_VIOLATION_MAX, s);
}

const char *cdn_disk_kind_to_string(enum cdn_disk_kind k)
{
    return (unsigned) k < _CDN_DISK_MAX ? disk_names[k] : NULL;
}
int cdn_disk_kind_from_string(const char *s)
{
    return lookup(disk_names, _CDN_DISK_MAX, s);
}

const char *cdn_pull_policy_to_string(enum cdn_pull_policy p)
{
    return (unsigned) p < _CDN_PULL_MAX ? pull_names[p] : NULL;
}
int cdn_pull_policy_from_string(const char *s)
{
    return lookup(pull_names, _CDN_PULL_MAX, s);
}

/* Set "K=V" in l, replacing an earlier K. */
static int env_put(struct cdn_strv *l, const char *kv)
{
    size_t klen = strcspn(kv, "=") + 1;
    for (size_t i = 0; i < l->n; i++)
        if (strncmp(l->v[i], kv, klen) == 0) {
            char *copy = strdup(kv);
            if (!copy)
                return -ENOMEM;
            free(l->v[i]);
            l->v[i] = copy;
            return 0;
        }
    return cdn_strv_push(l, kv);
}

/* What a verifier step does not take from the spec (it names them for the agent's phase, and
 * they may point at what the agent wrote): variables that load code into a shell, a dynamic
 * linker, an interpreter or git, and HOME and PATH, which init makes for the step. Prefixes end
 * in '_' or are whole words ("PYTHON" takes PYTHONPATH, PYTHONSTARTUP, …). */
static bool verifier_drops(const char *kv)
{
    static const char *const prefixes[] = {
        "LD_",   "PYTHON",     "GIT_",      "PERL5", "PERLLIB",         "RUBY",
        "NODE_", "GCONV_PATH", "BASH_ENV",  "ENV=",  "BASH_FUNC_",      "HOME=",
        "PATH=", "SHELLOPTS=", "BASHOPTS=", "PS4=",  "PROMPT_COMMAND=", "IFS="};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (strncmp(kv, prefixes[i], strlen(prefixes[i])) == 0)
            return true;
    return false;
}

/* What a verifier step always gets (unless the request sets it): no user site for Python, no
 * bytecode written where the agent reads it later, git without the global or system config and
 * with the hooks a repository's own config could name switched off (command-line scope, which
 * wins over the repository's). */
static const char *const verifier_base[] = {
    "LANG=C.UTF-8",
    "PYTHONNOUSERSITE=1",
    "PYTHONDONTWRITEBYTECODE=1",
    "GIT_CONFIG_NOSYSTEM=1",
    "GIT_CONFIG_GLOBAL=/dev/null",
    "GIT_CONFIG_COUNT=3",
    "GIT_CONFIG_KEY_0=core.fsmonitor",
    "GIT_CONFIG_VALUE_0=false",
    "GIT_CONFIG_KEY_1=core.hooksPath",
    "GIT_CONFIG_VALUE_1=/dev/null",
    "GIT_CONFIG_KEY_2=core.pager",
    "GIT_CONFIG_VALUE_2=cat",
};

int cdn_exec_env(const struct cdn_spec *spec, const char *term, char *const *extra, struct cdn_strv *ret)
{
    return cdn_exec_env_for(spec, term, extra, false, ret);
}

int cdn_exec_env_for(const struct cdn_spec *spec, const char *term, char *const *extra, bool verifier,
                     struct cdn_strv *ret)
{
    return cdn_exec_env_as(spec, term, extra, verifier, verifier ? NULL : spec->user, ret);
}

int cdn_exec_env_as(const struct cdn_spec *spec, const char *term, char *const *extra, bool verifier,
                    const char *user, struct cdn_strv *ret)
{
    static const char *const agent_base[] = {
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"};
    const char *const *base = verifier ? verifier_base : agent_base;
    size_t n_base =
        verifier ? sizeof verifier_base / sizeof *verifier_base : sizeof agent_base / sizeof *agent_base;
    struct cdn_strv l = {0};
    char buf[320];
    int r = 0;
    for (size_t i = 0; r >= 0 && i < n_base; i++)
        if (!user || strncmp(base[i], "HOME=", 5) != 0) /* init gives the user's own (init-exec.c) */
            r = env_put(&l, base[i]);
    if (r >= 0 && term && strlen(term) < 200) {
        (void) snprintf(buf, sizeof buf, "TERM=%s", term);
        r = env_put(&l, buf);
    }
    (void) snprintf(buf, sizeof buf, "HOSTNAME=%s", spec->hostname);
    if (r >= 0)
        r = env_put(&l, buf);
    for (size_t i = 0; r >= 0 && i < spec->env.n; i++)
        if (!verifier || !verifier_drops(spec->env.v[i]))
            r = env_put(&l, spec->env.v[i]);
    for (size_t i = 0; r >= 0 && extra && extra[i]; i++)
        r = env_put(&l, extra[i]);
    if (r < 0) {
        cdn_strv_free(&l);
        return r;
    }
    *ret = l;
    return 0;
}

static int replace_str(char **dst, const char *s)
{
    char *copy = strdup(s);
    if (!copy)
        return -ENOMEM;
    free(*dst);
    *dst = copy;
    return 0;
}

int cdn_spec_init(struct cdn_spec *spec)
{
    *spec = (struct cdn_spec){
        .tier = CDN_TIER_CONTAINER,
        .limits = {.cpus = 1.0,
                   .memory_mb = 512,
                   .pids = 256,
                   .disk_mb = 1024,
                   .timeout_ms = 600000,
                   .nofile = 1024,
                   .ptys = 64},
        .net_mode = CDN_NET_NONE,
        .on_violation = CDN_VIOLATION_LOG,
        .disk = CDN_DISK_DISK,
    };
    if (replace_str(&spec->image, "host") < 0 || replace_str(&spec->workdir, "/workspace") < 0 ||
        replace_str(&spec->hostname, "cordon") < 0) {
        cdn_spec_free(spec);
        return -ENOMEM;
    }
    return 0;
}

bool cdn_trajectory_id_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > CDN_TRAJECTORY_ID_MAX)
        return false;
    for (const char *s = id;;) {
        size_t k = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-");
        if (k == 0 || k > 64 || (k == 1 && s[0] == '.') || (k == 2 && s[0] == '.' && s[1] == '.') ||
            (k == 11 && strncmp(s, "steps.jsonl", 11) == 0) || /* a log's own names (daemon/trajectory.c) */
            (k == 17 && strncmp(s, "rolled_back.jsonl", 17) == 0))
            return false;
        if (s[k] == 0)
            return true;
        if (s[k] != '/')
            return false;
        s += k + 1;
    }
}

bool cdn_checkpoint_id_valid(const char *id)
{
    return strlen(id) == CDN_CHECKPOINT_ID_LEN && strncmp(id, "ck-", 3) == 0 &&
           strspn(id + 3, "0123456789abcdef") == CDN_CHECKPOINT_ID_LEN - 3;
}

void cdn_spec_free(struct cdn_spec *spec)
{
    free(spec->image);
    free(spec->workdir);
    free(spec->hostname);
    free(spec->user);
    free(spec->trajectory);
    free(spec->checkpoint);
    for (size_t i = 0; i < spec->n_mounts; i++) {
        free(spec->mounts[i].source);
        free(spec->mounts[i].target);
    }
    free(spec->mounts);
    cdn_strv_free(&spec->net_allow);
    cdn_strv_free(&spec->protect);
    cdn_strv_free(&spec->env);
    cdn_strv_free(&spec->labels);
    *spec = (struct cdn_spec){0};
}

bool cdn_path_is_safe_absolute(const char *p)
{
    if (!p || p[0] != '/' || strlen(p) >= 4096)
        return false;
    /* No "..", "." or empty components: targets are resolved inside the new
     * root by the setup child and must not climb out of it. */
    for (const char *c = p; *c;) {
        while (*c == '/')
            c++;
        const char *e = strchrnul(c, '/');
        size_t len = (size_t) (e - c);
        if ((len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        c = e;
    }
    return strchr(p, '\n') == NULL;
}

int cdn_spec_add_mount(struct cdn_spec *spec, const char *source, const char *target, bool readonly,
                       struct cdn_error *err)
{
    char field[48];
    (void) snprintf(field, sizeof field, "mounts[%zu]", spec->n_mounts);
    if (spec->n_mounts >= CDN_MAX_MOUNTS)
        return cdn_error_field(err, E2BIG, field, "%s: at most %d mounts", field, CDN_MAX_MOUNTS);
    if (!source || source[0] != '/' || strlen(source) >= 4096)
        return cdn_error_field(err, EINVAL, field, "%s.source: must be an absolute host path", field);
    if (!cdn_path_is_safe_absolute(target) || strcmp(target, "/") == 0)
        return cdn_error_field(err, EINVAL, field,
                               "%s.target: '%s' must be an absolute path below / without '.' or '..'", field,
                               target ? target : "");
    struct cdn_mount *m = realloc(spec->mounts, (spec->n_mounts + 1) * sizeof *m);
    if (!m)
        return -ENOMEM;
    spec->mounts = m;
    m = &spec->mounts[spec->n_mounts];
    *m = (struct cdn_mount){.source = strdup(source), .target = strdup(target), .readonly = readonly};
    if (!m->source || !m->target) {
        free(m->source);
        free(m->target);
        return -ENOMEM;
    }
    spec->n_mounts++;
    return 0;
}

int cdn_spec_parse_bind(struct cdn_spec *spec, const char *arg, struct cdn_error *err)
{
    /* SRC:DST[:ro|:rw] — paths containing ':' are not expressible here (use the JSON spec). */
    char buf[8200];
    if (strlen(arg) >= sizeof buf)
        return cdn_error_field(err, ENAMETOOLONG, "mounts", "--bind: argument too long");
    strcpy(buf, arg);
    char *src = buf, *dst = strchr(buf, ':');
    if (!dst)
        return cdn_error_field(err, EINVAL, "mounts", "--bind '%s': expected SRC:DST[:ro]", arg);
    *dst++ = 0;
    bool ro = false;
    char *opt = strchr(dst, ':');
    if (opt) {
        *opt++ = 0;
        if (strcmp(opt, "ro") == 0)
            ro = true;
        else if (strcmp(opt, "rw") != 0)
            return cdn_error_field(err, EINVAL, "mounts", "--bind '%s': option '%s' is not ro or rw", arg,
                                   opt);
    }
    return cdn_spec_add_mount(spec, src, dst, ro, err);
}

static bool env_key_valid(const char *k)
{
    if (!k[0] || strlen(k) > 256)
        return false;
    for (const char *c = k; *c; c++)
        if (*c == '=' || (unsigned char) *c < 0x20)
            return false;
    return true;
}

int cdn_spec_set_env(struct cdn_spec *spec, const char *key, const char *value, struct cdn_error *err)
{
    if (!env_key_valid(key))
        return cdn_error_field(err, EINVAL, "env", "env: invalid variable name '%.64s'", key);
    if (strlen(value) > 65536)
        return cdn_error_field(err, E2BIG, "env", "env.%s: value longer than 64 KiB", key);
    size_t klen = strlen(key);
    _cleanup_free_ char *kv = malloc(klen + strlen(value) + 2);
    if (!kv)
        return -ENOMEM;
    sprintf(kv, "%s=%s", key, value);
    for (size_t i = 0; i < spec->env.n; i++)
        if (strncmp(spec->env.v[i], kv, klen + 1) == 0) {
            free(spec->env.v[i]);
            spec->env.v[i] = TAKE_PTR(kv);
            return 0;
        }
    int r = cdn_strv_push(&spec->env, kv);
    return r == -E2BIG ? cdn_error_field(err, E2BIG, "env", "env: too many variables") : r;
}

int cdn_spec_parse_env(struct cdn_spec *spec, const char *arg, struct cdn_error *err)
{
    const char *eq = strchr(arg, '=');
    if (!eq)
        return cdn_error_field(err, EINVAL, "env", "--env '%.64s': expected K=V", arg);
    char key[260];
    size_t klen = (size_t) (eq - arg);
    if (klen == 0 || klen >= sizeof key)
        return cdn_error_field(err, EINVAL, "env", "--env '%.64s': invalid variable name", arg);
    memcpy(key, arg, klen);
    key[klen] = 0;
    return cdn_spec_set_env(spec, key, eq + 1, err);
}

int cdn_spec_add_label(struct cdn_spec *spec, const char *key, const char *value, struct cdn_error *err)
{
    char field[48];
    (void) snprintf(field, sizeof field, "labels.%.30s", key);
    if (!key[0] || strchr(key, '=') || strlen(key) > 128 || strlen(value) > 1024)
        return cdn_error_field(err, EINVAL, field,
                               "%s: label keys are 1-128 chars without '=', values up to 1024", field);
    char kv[1200];
    (void) snprintf(kv, sizeof kv, "%s=%s", key, value);
    return cdn_strv_push(&spec->labels, kv);
}

int cdn_spec_parse_label(struct cdn_spec *spec, const char *arg, struct cdn_error *err)
{
    const char *eq = strchr(arg, '=');
    if (!eq)
        return cdn_error_field(err, EINVAL, "labels", "--label '%.64s': expected KEY=VALUE", arg);
    char key[130];
    size_t klen = (size_t) (eq - arg);
    if (klen >= sizeof key) /* too long for a key: let the check say so */
        klen = sizeof key - 1;
    memcpy(key, arg, klen);
    key[klen] = 0;
    return cdn_spec_add_label(spec, key, eq + 1, err);
}

int cdn_spec_validate(const struct cdn_spec *spec, struct cdn_error *err)
{
    const struct cdn_limits *l = &spec->limits;
    if (spec->tier == CDN_TIER_PROCESS) { /* no mount or network namespace (docs/process.md) */
        if (strcmp(spec->image, "host") != 0)
            return cdn_error_field(
                err, EINVAL, "image",
                "image: the process tier runs on the host image only (no mount namespace)");
        if (spec->net_mode == CDN_NET_ALLOWLIST)
            return cdn_error_field(err, EINVAL, "network",
                                   "network: the process tier has no network namespace to filter: none or "
                                   "open (use the container tier for an allowlist)");
        for (size_t i = 0; i < spec->n_mounts; i++)
            if (strncmp(spec->mounts[i].target, "/workspace", 10) != 0 ||
                (spec->mounts[i].target[10] && spec->mounts[i].target[10] != '/') ||
                strstr(spec->mounts[i].target, "/.."))
                return cdn_error_field(
                    err, EINVAL, "mounts",
                    "mounts[%zu].target: the process tier binds at or beneath /workspace only "
                    "(the rest of its root is the host's)",
                    i);
        if (strcmp(spec->workdir, "/workspace") != 0)
            return cdn_error_field(err, EINVAL, "workdir",
                                   "workdir: the process tier works in its own directory, /workspace in the "
                                   "API (docs/process.md)");
        if (spec->writable_system)
            return cdn_error_field(err, EINVAL, "writable_system",
                                   "writable_system: the process tier's system directories are the host's");
        if (spec->read_only_root)
            return cdn_error_field(err, EINVAL, "read_only_root",
                                   "read_only_root: the process tier has no root of its own (the host's is "
                                   "read-only to it already)");
    }
    if (spec->writable_system && strcmp(spec->image, "host") == 0 && spec->tier != CDN_TIER_VM)
        return cdn_error_field(
            err, EINVAL, "writable_system",
            "writable_system: the host image's system directories are the host's (its /usr "
            "read-only); use an OCI image or an image directory");
    if (!(l->cpus > 0 && l->cpus <= 1024))
        return cdn_error_field(err, ERANGE, "limits.cpus", "limits.cpus: must be in (0, 1024]");
    if (l->memory_mb < CDN_MEMORY_MB_MIN || l->memory_mb > CDN_MEMORY_MB_MAX)
        return cdn_error_field(err, ERANGE, "limits.memory_mb",
                               "limits.memory_mb: must be between %d and %llu", CDN_MEMORY_MB_MIN,
                               CDN_MEMORY_MB_MAX);
    if (l->pids < CDN_PIDS_MIN || l->pids > CDN_PIDS_MAX)
        return cdn_error_field(err, ERANGE, "limits.pids", "limits.pids: must be between %d and %u",
                               CDN_PIDS_MIN, CDN_PIDS_MAX);
    if (l->disk_mb < CDN_DISK_MB_MIN || l->disk_mb > CDN_DISK_MB_MAX)
        return cdn_error_field(err, ERANGE, "limits.disk_mb", "limits.disk_mb: must be between %d and %llu",
                               CDN_DISK_MB_MIN, CDN_DISK_MB_MAX);
    if (l->timeout_ms > CDN_TIMEOUT_MS_MAX)
        return cdn_error_field(err, ERANGE, "limits.timeout_s", "limits.timeout_s: at most 7 days");
    if (l->idle_timeout_ms > CDN_TIMEOUT_MS_MAX)
        return cdn_error_field(err, ERANGE, "limits.idle_timeout_s", "limits.idle_timeout_s: at most 7 days");
    if (l->nofile < 16 || l->nofile > 1048576)
        return cdn_error_field(err, ERANGE, "limits.nofile", "limits.nofile: must be between 16 and 1048576");
    if (l->ptys < 1 || l->ptys > CDN_PTYS_MAX)
        return cdn_error_field(err, ERANGE, "limits.ptys", "limits.ptys: must be between 1 and %u",
                               CDN_PTYS_MAX);
    if (spec->net_mode == CDN_NET_NONE && spec->net_allow.n > 0)
        return cdn_error_field(
            err, EINVAL, "network.allow",
            "network.allow: entries need network.mode 'allowlist' (or 'open'), not 'none'");
    struct cdn_allowlist allow;
    int ar = cdn_allowlist_parse(&spec->net_allow, &allow, err);
    if (ar < 0)
        return ar;
    cdn_allowlist_free(&allow);
    if (spec->protect.n > CDN_PROTECT_MAX)
        return cdn_error_field(err, E2BIG, "protect", "protect: at most %d patterns", CDN_PROTECT_MAX);
    for (size_t i = 0; i < spec->protect.n; i++) {
        int pr = cdn_protect_pattern_check(spec->protect.v[i], i, err);
        if (pr < 0)
            return pr;
    }

    if (!cdn_path_is_safe_absolute(spec->workdir) || strcmp(spec->workdir, "/") == 0)
        return cdn_error_field(err, EINVAL, "workdir", "workdir: '%s' must be an absolute path below /",
                               spec->workdir);
    if (spec->image[0] == '/' && !cdn_path_is_safe_absolute(spec->image))
        return cdn_error_field(err, EINVAL, "image", "image: '%s' is not a clean absolute path", spec->image);
    /* Anything else but host is an OCI reference, parsed where images resolve (oci/ref.h). */
    size_t il = strlen(spec->image);
    if (il == 0 || il > 4600 || strcspn(spec->image, " \t\n\r\v\f") != il)
        return cdn_error_field(
            err, EINVAL, "image",
            "image: '%.64s' is neither 'host', an absolute directory nor an image reference", spec->image);
    for (size_t i = 0; i < il; i++)
        if ((unsigned char) spec->image[i] < 0x20 || spec->image[i] == 0x7f)
            return cdn_error_field(err, EINVAL, "image", "image: a control character in the reference");
    if (spec->pull != CDN_PULL_MISSING && (strcmp(spec->image, "host") == 0 || spec->image[0] == '/'))
        return cdn_error_field(err, EINVAL, "pull", "pull: \"%s\" is for an OCI image reference, not '%.64s'",
                               cdn_pull_policy_to_string(spec->pull), spec->image);
    if (spec->user && cdn_user_check(spec->user, err) < 0)
        return -EINVAL;
    if (spec->trajectory && !cdn_trajectory_id_valid(spec->trajectory))
        return cdn_error_field(
            err, EINVAL, "trajectory",
            "trajectory: segments of letters, digits, '.', '_' or '-' (1-64 bytes, not '.' or "
            "'..') joined by '/', at most %d bytes",
            CDN_TRAJECTORY_ID_MAX);
    if (spec->checkpoint && !cdn_checkpoint_id_valid(spec->checkpoint))
        return cdn_error_field(err, EINVAL, "checkpoint",
                               "checkpoint: '%.32s' is not a checkpoint's id (ck-<16 hex>)",
                               spec->checkpoint);
    const char *ck = spec->checkpoint ? "checkpoint" : "checkpoints";
    if (spec->checkpoint_every_step && !spec->trajectory)
        return cdn_error_field(err, EINVAL, "checkpoints",
                               "checkpoints: \"" CDN_CHECKPOINT_EVERY_STEP
                               "\" checkpoints after each step of a trajectory: name one (\"trajectory\")");
    /* Tier microvm: checkpoints of the whole guest (its files live in its RAM). QEMU 7.2 cannot save
     * a guest that has a 9p share mounted: the host image's /usr and the binds come that way. */
    bool vm = spec->tier == CDN_TIER_MICROVM;
    if ((spec->checkpoints || spec->checkpoint) && spec->tier != CDN_TIER_CONTAINER && !vm)
        return cdn_error_field(err, EOPNOTSUPP, ck,
                               "%s: tier %s keeps no checkpoints (tiers container and microvm do)", ck,
                               cdn_tier_to_string(spec->tier));
    if ((spec->checkpoints || spec->checkpoint) && vm && (strcmp(spec->image, "host") == 0 || spec->n_mounts))
        return cdn_error_field(err, EOPNOTSUPP, ck,
                               "%s: tier microvm keeps checkpoints of a guest on an OCI image without "
                               "mounts only (the host image's /usr and mounts are 9p shares, which QEMU "
                               "cannot save)",
                               ck);
    if ((spec->checkpoints || spec->checkpoint) && !vm && spec->disk != CDN_DISK_DISK)
        return cdn_error_field(err, EINVAL, ck,
                               "%s: a checkpoint is of a writable layer on disk (disk \"disk\")", ck);
    size_t hl = strlen(spec->hostname);
    if (hl == 0 || hl > 63 ||
        strspn(spec->hostname, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") != hl)
        return cdn_error_field(err, EINVAL, "hostname", "hostname: must be 1-63 letters, digits, '-' or '.'");
    return 0;
}
