/* JSON <-> spec. Decoding walks the document against tables of known fields,
 * so an unknown or mistyped field is reported by its dotted name. */
#include "spec.h"
#include "json-util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static int get_uint(json_t *v, const char *field, uint64_t *ret, struct cdn_error *err)
{
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *ret = (uint64_t) json_integer_value(v);
        return 0;
    }
    if (json_is_real(v) && json_real_value(v) >= 0 && json_real_value(v) < 9e15 &&
        floor(json_real_value(v)) == json_real_value(v)) {
        *ret = (uint64_t) json_real_value(v);
        return 0;
    }
    return cdn_error_field(err, EINVAL, field, "%s: must be a non-negative integer", field);
}

static int get_string(json_t *v, const char *field, const char **ret, struct cdn_error *err)
{
    if (!json_is_string(v))
        return cdn_error_field(err, EINVAL, field, "%s: must be a string", field);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return cdn_error_field(err, EINVAL, field, "%s: must not contain NUL", field);
    *ret = json_string_value(v);
    return 0;
}

static int set_string(char **dst, json_t *v, const char *field, struct cdn_error *err)
{
    const char *s = NULL;
    int r = get_string(v, field, &s, err);
    if (r < 0)
        return r;
    char *copy = strdup(s);
    if (!copy)
        return -ENOMEM;
    free(*dst);
    *dst = copy;
    return 0;
}

static int decode_limits(struct cdn_spec *spec, json_t *obj, struct cdn_error *err)
{
    if (!json_is_object(obj))
        return cdn_error_field(err, EINVAL, "limits", "limits: must be an object");
    struct cdn_limits *l = &spec->limits;
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        char field[48];
        (void) snprintf(field, sizeof field, "limits.%.30s", key);
        int r = 0;
        if (strcmp(key, "cpus") == 0) {
            if (!json_is_number(v) || !(json_number_value(v) > 0 && json_number_value(v) <= 1024))
                return cdn_error_field(err, ERANGE, field, "%s: must be a number in (0, 1024]", field);
            l->cpus = json_number_value(v);
        } else if (strcmp(key, "memory_mb") == 0)
            r = get_uint(v, field, &l->memory_mb, err);
        else if (strcmp(key, "pids") == 0)
            r = get_uint(v, field, &l->pids, err);
        else if (strcmp(key, "disk_mb") == 0)
            r = get_uint(v, field, &l->disk_mb, err);
        else if (strcmp(key, "nofile") == 0)
            r = get_uint(v, field, &l->nofile, err);
        else if (strcmp(key, "ptys") == 0)
            r = get_uint(v, field, &l->ptys, err);
        else if (strcmp(key, "timeout_s") == 0 || strcmp(key, "idle_timeout_s") == 0) {
            if (!json_is_number(v) || json_number_value(v) < 0 ||
                json_number_value(v) > CDN_TIMEOUT_MS_MAX / 1000)
                return cdn_error_field(err, ERANGE, field, "%s: must be a number of seconds in [0, 604800]",
                                       field);
            *(key[0] == 't' ? &l->timeout_ms : &l->idle_timeout_ms) =
                (uint64_t) llround(json_number_value(v) * 1000);
        } else
            return cdn_error_field(err, EINVAL, field, "%s: unknown field", field);
        if (r < 0)
            return r;
    }
    return 0;
}

static int decode_string_list(struct cdn_strv *l, json_t *arr, const char *name, struct cdn_error *err)
{
    if (!json_is_array(arr))
        return cdn_error_field(err, EINVAL, name, "%s: must be an array of strings", name);
    size_t i;
    json_t *v;
    cdn_strv_free(l);
    json_array_foreach(arr, i, v)
    {
        char field[48];
        const char *s = NULL;
        (void) snprintf(field, sizeof field, "%.30s[%zu]", name, i);
        int r = get_string(v, field, &s, err);
        if (r < 0)
            return r;
        r = cdn_strv_push(l, s);
        if (r == -E2BIG)
            return cdn_error_field(err, E2BIG, name, "%s: more than %d entries", name, CDN_MAX_LIST);
        if (r < 0)
            return r;
    }
    return 0;
}

static int decode_network(struct cdn_spec *spec, json_t *obj, struct cdn_error *err)
{
    if (!json_is_object(obj))
        return cdn_error_field(err, EINVAL, "network", "network: must be an object");
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        if (strcmp(key, "mode") == 0) {
            const char *s = NULL;
            int r = get_string(v, "network.mode", &s, err);
            if (r < 0)
                return r;
            int m = cdn_net_mode_from_string(s);
            if (m < 0)
                return cdn_error_field(err, EINVAL, "network.mode",
                                       "network.mode: '%.32s' is not none, allowlist or open", s);
            spec->net_mode = (enum cdn_net_mode) m;
        } else if (strcmp(key, "allow") == 0) {
            int r = decode_string_list(&spec->net_allow, v, "network.allow", err);
            if (r < 0)
                return r;
        } else
            return cdn_error_field(err, EINVAL, "network", "network.%.30s: unknown field", key);
    }
    return 0;
}

static int decode_mounts(struct cdn_spec *spec, json_t *arr, struct cdn_error *err)
{
    if (!json_is_array(arr))
        return cdn_error_field(err, EINVAL, "mounts", "mounts: must be an array of objects");
    size_t i;
    json_t *m;
    json_array_foreach(arr, i, m)
    {
        char field[48];
        (void) snprintf(field, sizeof field, "mounts[%zu]", i);
        if (!json_is_object(m))
            return cdn_error_field(err, EINVAL, field, "%s: must be an object", field);
        const char *src = NULL, *dst = NULL, *key;
        bool ro = false;
        json_t *v;
        json_object_foreach(m, key, v)
        {
            int r = 0;
            if (strcmp(key, "source") == 0)
                r = get_string(v, field, &src, err);
            else if (strcmp(key, "target") == 0)
                r = get_string(v, field, &dst, err);
            else if (strcmp(key, "readonly") == 0) {
                if (!json_is_boolean(v))
                    return cdn_error_field(err, EINVAL, field, "%s.readonly: must be a boolean", field);
                ro = json_is_true(v);
            } else
                return cdn_error_field(err, EINVAL, field, "%s.%.20s: unknown field", field, key);
            if (r < 0)
                return r;
        }
        if (!src || !dst)
            return cdn_error_field(err, EINVAL, field, "%s: needs source and target", field);
        int r = cdn_spec_add_mount(spec, src, dst, ro, err);
        if (r < 0)
            return r;
    }
    return 0;
}

static int decode_map(struct cdn_spec *spec, json_t *obj, const char *name, struct cdn_error *err)
{
    if (!json_is_object(obj))
        return cdn_error_field(err, EINVAL, name, "%s: must be an object of strings", name);
    bool is_env = strcmp(name, "env") == 0;
    if (!is_env)
        cdn_strv_free(&spec->labels);
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        char field[48];
        const char *s = NULL;
        (void) snprintf(field, sizeof field, "%s.%.30s", name, key);
        int r = get_string(v, field, &s, err);
        if (r < 0)
            return r;
        r = is_env ? cdn_spec_set_env(spec, key, s, err) : cdn_spec_add_label(spec, key, s, err);
        if (r < 0)
            return r;
    }
    return 0;
}

static int decode_enum(json_t *v, const char *field, int (*from)(const char *), int *ret,
                       struct cdn_error *err)
{
    const char *s = NULL;
    int r = get_string(v, field, &s, err);
    if (r < 0)
        return r;
    r = from(s);
    if (r < 0)
        return cdn_error_field(err, EINVAL, field, "%s: unknown value '%.32s'", field, s);
    *ret = r;
    return 0;
}

static int decode_field(struct cdn_spec *spec, const char *key, json_t *v, struct cdn_error *err)
{
    int e = 0;
    if (strcmp(key, "tier") == 0) {
        int r = decode_enum(v, "tier", cdn_tier_from_string, &e, err);
        if (r >= 0)
            spec->tier = (enum cdn_tier) e;
        return r;
    }
    if (strcmp(key, "on_violation") == 0) {
        int r = decode_enum(v, "on_violation", cdn_on_violation_from_string, &e, err);
        if (r >= 0)
            spec->on_violation = (enum cdn_on_violation) e;
        return r;
    }
    if (strcmp(key, "disk") == 0) {
        int r = decode_enum(v, "disk", cdn_disk_kind_from_string, &e, err);
        if (r < 0)
            return cdn_error_field(err, EINVAL, "disk",
                                   "disk: must be \"disk\" (a filesystem of its own) or "
                                   "\"memory\" (tmpfs), not %.40s",
                                   json_is_string(v) ? json_string_value(v) : "a non-string");
        spec->disk = (enum cdn_disk_kind) e;
        return 0;
    }
    if (strcmp(key, "pull") == 0) {
        int r = decode_enum(v, "pull", cdn_pull_policy_from_string, &e, err);
        if (r < 0)
            return cdn_error_field(
                err, EINVAL, "pull",
                "pull: must be \"missing\" (the default), \"always\" or \"never\", not %.40s",
                json_is_string(v) ? json_string_value(v) : "a non-string");
        spec->pull = (enum cdn_pull_policy) e;
        return 0;
    }
    if (strcmp(key, "image") == 0)
        return set_string(&spec->image, v, "image", err);
    if (strcmp(key, "workdir") == 0) {
        spec->workdir_given = true;
        return set_string(&spec->workdir, v, "workdir", err);
    }
    if (strcmp(key, "hostname") == 0)
        return set_string(&spec->hostname, v, "hostname", err);
    if (strcmp(key, "user") == 0)
        return set_string(&spec->user, v, "user", err);
    if (strcmp(key, "trajectory") == 0)
        return set_string(&spec->trajectory, v, "trajectory", err);
    if (strcmp(key, "checkpoint") == 0 || strcmp(key, "checkpoints") == 0) {
        /* "checkpoints": a boolean or "every_step"; "checkpoint": a checkpoint's id or "every_step" */
        if (json_is_string(v) && strcmp(json_string_value(v), CDN_CHECKPOINT_EVERY_STEP) == 0) {
            spec->checkpoints = spec->checkpoint_every_step = true;
            return 0;
        }
        if (key[10] == 0)
            return set_string(&spec->checkpoint, v, "checkpoint", err);
        if (!json_is_boolean(v))
            return cdn_error_field(err, EINVAL, "checkpoints",
                                   "checkpoints: true, false or \"" CDN_CHECKPOINT_EVERY_STEP "\"");
        spec->checkpoints = json_is_true(v);
        spec->checkpoint_every_step = false;
        return 0;
    }
    if (strcmp(key, "read_only") == 0) {
        if (!json_is_boolean(v))
            return cdn_error_field(err, EINVAL, "read_only", "read_only: must be a boolean");
        spec->read_only_root = json_is_true(v);
        return 0;
    }
    if (strcmp(key, "writable_system") == 0) {
        if (!json_is_boolean(v))
            return cdn_error_field(err, EINVAL, "writable_system", "writable_system: must be a boolean");
        spec->writable_system = json_is_true(v);
        return 0;
    }
    if (strcmp(key, "watch_writes") == 0) {
        if (!json_is_boolean(v))
            return cdn_error_field(err, EINVAL, "watch_writes", "watch_writes: must be a boolean");
        spec->watch_writes = json_is_true(v);
        return 0;
    }
    if (strcmp(key, "limits") == 0)
        return decode_limits(spec, v, err);
    if (strcmp(key, "network") == 0)
        return decode_network(spec, v, err);
    if (strcmp(key, "mounts") == 0)
        return decode_mounts(spec, v, err);
    if (strcmp(key, "protect") == 0)
        return decode_string_list(&spec->protect, v, "protect", err);
    if (strcmp(key, "env") == 0 || strcmp(key, "labels") == 0)
        return decode_map(spec, v, key, err);
    return cdn_error_field(err, EINVAL, key, "%.40s: unknown field", key);
}

int cdn_spec_from_json(struct cdn_spec *spec, const char *json, size_t len, struct cdn_error *err)
{
    json_error_t jerr;
    _cleanup_json_ json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return cdn_error_field(err, EINVAL, "", "spec: invalid JSON at line %d column %d: %.120s", jerr.line,
                               jerr.column, jerr.text);
    if (!json_is_object(root))
        return cdn_error_field(err, EINVAL, "", "spec: must be a JSON object");
    /* "checkpoint": "every_step" is "checkpoints": "every_step": with a "checkpoints" too, which
     * one won would be the keys' order. */
    const char *ck = json_string_value(json_object_get(root, "checkpoint"));
    if (ck && strcmp(ck, CDN_CHECKPOINT_EVERY_STEP) == 0 && json_object_get(root, "checkpoints"))
        return cdn_error_field(err, EINVAL, "checkpoint",
                               "checkpoint: \"" CDN_CHECKPOINT_EVERY_STEP
                               "\" is checkpoints \"" CDN_CHECKPOINT_EVERY_STEP "\": give one of the two");
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        int r = decode_field(spec, key, v, err);
        if (r < 0)
            return r;
    }
    return 0;
}

json_t *cdn_strv_to_json_map(const struct cdn_strv *l)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i < l->n; i++) {
        const char *eq = strchr(l->v[i], '=');
        if (!eq)
            continue;
        char key[300];
        (void) snprintf(key, sizeof key, "%.*s", (int) (eq - l->v[i]), l->v[i]);
        json_object_set_new(o, key, json_string(eq + 1));
    }
    return o;
}

static json_t *strv_to_json_array(const struct cdn_strv *l)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < l->n; i++)
        json_array_append_new(a, json_string(l->v[i]));
    return a;
}

char *cdn_spec_to_json(const struct cdn_spec *spec)
{
    const struct cdn_limits *l = &spec->limits;
    json_t *mounts = json_array();
    for (size_t i = 0; mounts && i < spec->n_mounts; i++)
        json_array_append_new(mounts,
                              json_pack("{s:s, s:s, s:b}", "source", spec->mounts[i].source, "target",
                                        spec->mounts[i].target, "readonly", spec->mounts[i].readonly));
    _cleanup_json_ json_t *root = json_pack(
        "{s:s, s:s, s:{s:f, s:I, s:I, s:I, s:f, s:I}, s:{s:s, s:o}, s:o, s:o, s:o, s:o, s:s, s:s, s:b, s:b, "
        "s:s}",
        "tier", cdn_tier_to_string(spec->tier), "image", spec->image, "limits", "cpus", l->cpus, "memory_mb",
        (json_int_t) l->memory_mb, "pids", (json_int_t) l->pids, "disk_mb", (json_int_t) l->disk_mb,
        "timeout_s", (double) l->timeout_ms / 1000.0, "nofile", (json_int_t) l->nofile, "network", "mode",
        cdn_net_mode_to_string(spec->net_mode), "allow", strv_to_json_array(&spec->net_allow), "mounts",
        mounts, "protect", strv_to_json_array(&spec->protect), "env", cdn_strv_to_json_map(&spec->env),
        "labels", cdn_strv_to_json_map(&spec->labels), "workdir", spec->workdir, "hostname", spec->hostname,
        "read_only", spec->read_only_root, "watch_writes", spec->watch_writes, "on_violation",
        cdn_on_violation_to_string(spec->on_violation));
    if (root &&
        (json_object_set_new(json_object_get(root, "limits"), "ptys", json_integer((json_int_t) l->ptys)) ||
         (l->idle_timeout_ms && json_object_set_new(json_object_get(root, "limits"), "idle_timeout_s",
                                                    json_real((double) l->idle_timeout_ms / 1000.0))) ||
         json_object_set_new(root, "disk", json_string(cdn_disk_kind_to_string(spec->disk))) ||
         (spec->user && json_object_set_new(root, "user", json_string(spec->user))) ||
         (spec->trajectory && json_object_set_new(root, "trajectory", json_string(spec->trajectory))) ||
         (spec->checkpoints &&
          json_object_set_new(root, "checkpoints",
                              spec->checkpoint_every_step ? json_string(CDN_CHECKPOINT_EVERY_STEP)
                                                          : json_true())) ||
         (spec->checkpoint && json_object_set_new(root, "checkpoint", json_string(spec->checkpoint))) ||
         (spec->writable_system && json_object_set_new(root, "writable_system", json_true())) ||
         (spec->pull != CDN_PULL_MISSING &&
          json_object_set_new(root, "pull", json_string(cdn_pull_policy_to_string(spec->pull))))))
        return NULL;
    return root ? json_dumps(root, JSON_COMPACT) : NULL;
}
