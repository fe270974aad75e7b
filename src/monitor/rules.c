/* The monitor's rules: see rules.h. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "monitor/rules.h"

#include <errno.h>
#include <jansson.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

struct rule {
    char *id, *severity, *description;
    unsigned on;
    pcre2_code *re;
};

struct cdn_rules {
    struct rule *v;
    size_t n;
    pcre2_match_context *mctx;
    pcre2_match_data *md;
};

#define MATCH_LIMIT 100000 /* steps of the matcher per rule and subject: no catastrophic backtracking */
#define DEPTH_LIMIT 5000

static void rule_free(struct rule *r)
{
    free(r->id);
    free(r->severity);
    free(r->description);
    pcre2_code_free(r->re);
}

void cdn_rules_free(struct cdn_rules *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        rule_free(&r->v[i]);
    free(r->v);
    pcre2_match_data_free(r->md);
    pcre2_match_context_free(r->mctx);
    free(r);
}

size_t cdn_rules_count(const struct cdn_rules *r)
{
    return r ? r->n : 0;
}

static int parse_rule(json_t *o, size_t i, struct rule *ret, struct cdn_error *err)
{
    char f[48];
    (void) snprintf(f, sizeof f, "rules[%zu]", i);
    if (!json_is_object(o))
        return cdn_error_field(err, EINVAL, f, "%s: must be an object", f);
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        if (strcmp(key, "id") && strcmp(key, "severity") && strcmp(key, "on") && strcmp(key, "pattern") &&
            strcmp(key, "description"))
            return cdn_error_field(err, EINVAL, f, "%s.%.32s: unknown field", f, key);
    }
    const char *id = json_string_value(json_object_get(o, "id"));
    const char *sev = json_string_value(json_object_get(o, "severity"));
    const char *pat = json_string_value(json_object_get(o, "pattern"));
    const char *desc = json_string_value(json_object_get(o, "description"));
    if (!id || !*id || strlen(id) > 64)
        return cdn_error_field(err, EINVAL, f, "%s.id: a string of 1 to 64 characters is required", f);
    static const char *const sevs[] = {"low", "medium", "high", "critical"};
    bool sev_ok = false;
    for (size_t k = 0; sev && k < 4; k++)
        sev_ok |= strcmp(sev, sevs[k]) == 0;
    if (!sev_ok)
        return cdn_error_field(err, EINVAL, f, "%s.severity: must be low, medium, high or critical", f);
    if (!pat || !*pat)
        return cdn_error_field(err, EINVAL, f, "%s.pattern: a non-empty string is required", f);
    unsigned on = 0;
    json_t *srcs = json_object_get(o, "on"), *s;
    size_t k;
    if (!json_is_array(srcs) || json_array_size(srcs) == 0)
        return cdn_error_field(err, EINVAL, f, "%s.on: a list of \"exec\" and/or \"text\" is required", f);
    json_array_foreach(srcs, k, s)
    {
        const char *name = json_string_value(s);
        if (name && strcmp(name, "exec") == 0)
            on |= CDN_RULE_EXEC;
        else if (name && strcmp(name, "text") == 0)
            on |= CDN_RULE_TEXT;
        else
            return cdn_error_field(err, EINVAL, f, "%s.on[%zu]: must be \"exec\" or \"text\"", f, k);
    }
    int ecode;
    PCRE2_SIZE eoff;
    /* Byte mode, not UTF: an invalid byte in the subject must not stop a
     * ".*" (a way to slip a command past a rule); patterns are ASCII. */
    pcre2_code *re = pcre2_compile((PCRE2_SPTR) pat, PCRE2_ZERO_TERMINATED, 0, &ecode, &eoff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[128];
        (void) pcre2_get_error_message(ecode, msg, sizeof msg);
        return cdn_error_field(err, EINVAL, f, "%s.pattern: %s at offset %zu", f, (const char *) msg,
                               (size_t) eoff);
    }
    (void) pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* faster where available; plain matching otherwise */
    *ret = (struct rule){.id = strdup(id),
                         .severity = strdup(sev),
                         .description = strdup(desc ? desc : ""),
                         .on = on,
                         .re = re};
    if (!ret->id || !ret->severity || !ret->description) {
        rule_free(ret);
        return cdn_error_set(err, ENOMEM, "out of memory");
    }
    return 0;
}

struct cdn_rules *cdn_rules_load_json(const char *json, size_t len, struct cdn_error *err)
{
    json_error_t je;
    json_t *doc = json_loadb(json, len, 0, &je);
    json_t *list = doc ? json_object_get(doc, "rules") : NULL;
    if (!json_is_array(list)) {
        if (doc)
            cdn_error_field(err, EINVAL, "rules", "rules: the file must be an object with a \"rules\" list");
        else
            cdn_error_field(err, EINVAL, "rules", "rules: not JSON: %s (line %d)", je.text, je.line);
        json_decref(doc);
        return NULL;
    }
    struct cdn_rules *r = calloc(1, sizeof *r);
    size_t n = json_array_size(list);
    if (!r || !(r->v = calloc(n ? n : 1, sizeof *r->v)) || !(r->mctx = pcre2_match_context_create(NULL)) ||
        !(r->md = pcre2_match_data_create(4, NULL))) {
        cdn_error_set(err, ENOMEM, "out of memory");
        cdn_rules_free(r);
        json_decref(doc);
        return NULL;
    }
    (void) pcre2_set_match_limit(r->mctx, MATCH_LIMIT);
    (void) pcre2_set_depth_limit(r->mctx, DEPTH_LIMIT);
    for (size_t i = 0; i < n; i++) {
        if (parse_rule(json_array_get(list, i), i, &r->v[i], err) < 0) {
            cdn_rules_free(r);
            json_decref(doc);
            return NULL;
        }
        r->n++;
        for (size_t j = 0; j < i; j++)
            if (strcmp(r->v[j].id, r->v[i].id) == 0) {
                cdn_error_field(err, EINVAL, "rules", "rules[%zu].id: '%s' is used twice", i, r->v[i].id);
                cdn_rules_free(r);
                json_decref(doc);
                return NULL;
            }
    }
    json_decref(doc);
    return r;
}

size_t cdn_rules_match(const struct cdn_rules *r, enum cdn_rule_source source, const char *subject,
                       size_t len, void (*fn)(const struct cdn_rule_match *m, void *arg), void *arg)
{
    size_t hits = 0;
    for (size_t i = 0; r && i < r->n; i++) {
        const struct rule *ru = &r->v[i];
        if (!(ru->on & source))
            continue;
        int rc = pcre2_match(ru->re, (PCRE2_SPTR) subject, len, 0, 0, r->md, r->mctx);
        if (rc < 0)
            continue; /* no match, or a limit hit: no alert from an unfinished match */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r->md);
        struct cdn_rule_match m = {.id = ru->id,
                                   .severity = ru->severity,
                                   .description = ru->description,
                                   .start = ov[0],
                                   .end = ov[1]};
        hits++;
        if (fn)
            fn(&m, arg);
    }
    return hits;
}
