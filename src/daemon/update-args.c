/* The body of PATCH /v1/sandboxes/{id} (update-args.h): from any client of the API. */
#include "update-args.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/cgroup.h"
#include "core/json-util.h"
#include "core/protect.h"
#include "core/spec.h"

#define SECONDS_MAX 604800 /* 7 days, as the spec's timeouts */

static int seconds(json_t *v, const char *field, uint64_t *ms, struct cdn_error *e)
{
    if (!json_is_number(v) || !(json_number_value(v) >= 0 && json_number_value(v) <= SECONDS_MAX))
        return cdn_error_field(e, ERANGE, field, "%s: must be a number of seconds in [0, %d]", field,
                               SECONDS_MAX);
    *ms = (uint64_t) llround(json_number_value(v) * 1000);
    return 0;
}

/* labels (an object: a string sets, null removes) merged into cur, checked as a spec's labels. */
static int merge_labels(json_t *patch, const struct cdn_strv *cur, struct cdn_strv *out, struct cdn_error *e)
{
    if (!json_is_object(patch))
        return cdn_error_field(e, EINVAL, "labels",
                               "labels: must be an object of strings (null removes a label)");
    if (json_object_size(patch) > CDN_STRV_MAX)
        return cdn_error_field(e, E2BIG, "labels", "labels: at most %d in a patch", CDN_STRV_MAX);
    struct cdn_spec tmp = {0};
    int r = 0;
    for (size_t i = 0; r >= 0 && i < cur->n; i++) { /* the ones it keeps */
        const char *kv = cur->v[i], *eq = strchr(kv, '=');
        char key[130];
        if (!eq || (size_t) (eq - kv) >= sizeof key)
            continue;
        (void) snprintf(key, sizeof key, "%.*s", (int) (eq - kv), kv);
        if (!json_object_get(patch, key))
            r = cdn_strv_push(&tmp.labels, kv);
    }
    const char *k;
    json_t *v;
    json_object_foreach(patch, k, v)
    {
        if (r < 0 || json_is_null(v))
            continue;
        r = json_is_string(v)
                ? cdn_spec_add_label(&tmp, k, json_string_value(v), e)
                : cdn_error_field(e, EINVAL, "labels", "labels.%.30s: must be a string, or null", k);
    }
    if (r == -ENOMEM || r == -E2BIG)
        r = cdn_error_field(e, -r, "labels", "labels: %s", r == -E2BIG ? "too many" : "out of memory");
    if (r < 0) {
        cdn_strv_free(&tmp.labels);
        return r;
    }
    *out = tmp.labels;
    return 0;
}

/* limits: any of cpus, memory_mb, pids, checked as a spec's (the others stay as they are). */
static int new_limits(json_t *v, const struct cdn_spec *cur, struct update_args *a, struct cdn_error *e)
{
    if (!json_is_object(v) || !json_object_size(v))
        return cdn_error_field(e, EINVAL, "limits", "limits: an object of cpus, memory_mb, pids");
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x)
    {
        unsigned bit = strcmp(k, "cpus") == 0        ? CDN_CGROUP_SET_CPUS
                       : strcmp(k, "memory_mb") == 0 ? CDN_CGROUP_SET_MEMORY
                       : strcmp(k, "pids") == 0      ? CDN_CGROUP_SET_PIDS
                                                     : 0;
        if (!bit)
            return cdn_error_field(e, EINVAL, "limits",
                                   "limits.%.30s: not one a running sandbox changes (cpus, memory_mb, pids; "
                                   "timeout_s is at the top)",
                                   k);
        a->limits |= bit;
    }
    _cleanup_json_ json_t *wrap = json_pack("{s:O}", "limits", v);
    _cleanup_free_ char *text = wrap ? json_dumps(wrap, JSON_COMPACT) : NULL;
    struct cdn_spec tmp;
    if (!text || cdn_spec_init(&tmp) < 0)
        return -ENOMEM;
    tmp.limits = cur->limits;
    int r = cdn_spec_from_json(&tmp, text, strlen(text), e);
    if (r >= 0)
        r = cdn_spec_validate(&tmp, e);
    a->new_limits = tmp.limits;
    cdn_spec_free(&tmp);
    return r;
}

/* protect: the whole new list of patterns, checked as a spec's. */
static int new_protect(json_t *v, struct update_args *a, struct cdn_error *e)
{
    _cleanup_json_ json_t *wrap = json_pack("{s:O}", "protect", v);
    _cleanup_free_ char *text = wrap ? json_dumps(wrap, JSON_COMPACT) : NULL;
    struct cdn_spec tmp;
    if (!text || cdn_spec_init(&tmp) < 0)
        return -ENOMEM;
    int r = cdn_spec_from_json(&tmp, text, strlen(text), e);
    if (r >= 0 && tmp.protect.n > CDN_PROTECT_MAX)
        r = cdn_error_field(e, E2BIG, "protect", "protect: at most %d patterns", CDN_PROTECT_MAX);
    for (size_t i = 0; r >= 0 && i < tmp.protect.n; i++)
        r = cdn_protect_pattern_check(tmp.protect.v[i], i, e);
    if (r >= 0) {
        a->protect = true;
        a->new_protect = tmp.protect;
        tmp.protect = (struct cdn_strv){0};
    }
    cdn_spec_free(&tmp);
    return r;
}

int cdn_update_args_parse(const char *body, size_t len, const struct cdn_spec *cur, struct update_args *ret,
                          struct cdn_error *e)
{
    _cleanup_json_ json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(o) || !json_object_size(o))
        return cdn_error_field(e, EBADMSG, "body",
                               "body: expected a JSON object with timeout_s, idle_timeout_s or labels");
    struct update_args a = {0};
    const char *k;
    json_t *v;
    int r = 0;
    json_object_foreach(o, k, v)
    {
        if (r < 0)
            break;
        if (strcmp(k, "timeout_s") == 0)
            a.life = true, r = seconds(v, k, &a.life_ms, e);
        else if (strcmp(k, "idle_timeout_s") == 0)
            a.idle = true, r = seconds(v, k, &a.idle_ms, e);
        else if (strcmp(k, "labels") == 0)
            a.labels = true, r = merge_labels(v, &cur->labels, &a.merged_labels, e);
        else if (strcmp(k, "limits") == 0)
            r = new_limits(v, cur, &a, e);
        else if (strcmp(k, "protect") == 0)
            r = new_protect(v, &a, e);
        else if (strcmp(k, "on_violation") == 0) {
            int p = json_is_string(v) ? cdn_on_violation_from_string(json_string_value(v)) : -EINVAL;
            if (p < 0)
                r = cdn_error_field(e, EINVAL, k, "on_violation: log, deny or kill");
            else
                a.on_violation = true, a.policy = (enum cdn_on_violation) p;
        } else
            r = cdn_error_field(
                e, EINVAL, k,
                "%.40s: unknown field (timeout_s, idle_timeout_s, labels, limits, on_violation, protect)", k);
    }
    if (r < 0) {
        cdn_update_args_free(&a);
        return r;
    }
    *ret = a;
    return 0;
}

void cdn_update_args_free(struct update_args *a)
{
    cdn_strv_free(&a->merged_labels);
    cdn_strv_free(&a->new_protect);
}
