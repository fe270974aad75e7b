/* The call request body (call-args.h). */
#include <errno.h>
#include <jansson.h>
#include <string.h>

#include "proto/frame.h"
#include "call-args.h"
#include "core/json-util.h"

static int parse(json_t *body, json_t **code_input, double *timeout_s, bool *fresh, struct cdn_call_step *st,
                 struct cdn_error *e)
{
    if (!json_is_object(body))
        return cdn_error_field(e, EINVAL, "body", "body: expected a JSON object");
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        if (strcmp(k, "code") && strcmp(k, "language") && strcmp(k, "input") && strcmp(k, "timeout_s") &&
            strcmp(k, "fresh") && strcmp(k, "step"))
            return cdn_error_field(e, EINVAL, k, "%s: unknown field", k);
    }
    json_t *step = json_object_get(body, "step");
    if (step && (!json_is_integer(step) || json_integer_value(step) < 0))
        return cdn_error_field(e, EINVAL, "step", "step: the step's index in the trajectory, 0 or more");
    if (st) {
        st->has_step = step != NULL;
        st->step = step ? (uint64_t) json_integer_value(step) : 0;
    }
    json_t *code = json_object_get(body, "code"), *lang = json_object_get(body, "language");
    json_t *t = json_object_get(body, "timeout_s"), *f = json_object_get(body, "fresh");
    if (!json_is_string(code))
        return cdn_error_field(e, EINVAL, "code", "code: required, a string of Python");
    if (lang && (!json_is_string(lang) || strcmp(json_string_value(lang), "python") != 0))
        return cdn_error_field(e, EINVAL, "language", "language: only \"python\" runs in calls");
    if (t && (!json_is_number(t) || !(json_number_value(t) > 0 && json_number_value(t) <= 86400)))
        return cdn_error_field(e, ERANGE, "timeout_s", "timeout_s: a number of seconds in (0, 86400]");
    if (f && !json_is_boolean(f))
        return cdn_error_field(e, EINVAL, "fresh", "fresh: true or false");
    *timeout_s = t ? json_number_value(t) : 0;
    *fresh = f && json_is_true(f);
    *code_input =
        json_pack("{s:O, s:O}", "code", code, "input", json_object_get(body, "input") ?: json_null());
    return *code_input ? 0 : cdn_error_set(e, ENOMEM, "out of memory");
}

int cdn_call_args_parse(const char *body, size_t len, uint8_t *out, size_t cap, size_t *ret_len,
                        struct cdn_call_step *st, bool want_request, struct cdn_error *e)
{
    json_error_t je;
    _cleanup_json_ json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return cdn_error_field(e, EBADMSG, "body", "body: %s", je.text);
    _cleanup_json_ json_t *ci = NULL;
    double timeout_s = 0;
    bool fresh = false;
    if (st)
        *st = (struct cdn_call_step){0};
    int r = parse(o, &ci, &timeout_s, &fresh, st, e);
    if (r < 0)
        return r;
    uint32_t hdr[2] = {(uint32_t) (timeout_s * 1000 + 0.5), fresh ? CDN_CALL_FRESH : 0};
    if (timeout_s > 0 && hdr[0] == 0)
        hdr[0] = 1;
    if (cap < CDN_CALL_FIXED + 2)
        return cdn_error_field(e, E2BIG, "code", "code and input exceed a frame");
    memcpy(out, hdr, sizeof hdr);
    size_t n = json_dumpb(ci, (char *) out + CDN_CALL_FIXED, cap - CDN_CALL_FIXED, JSON_COMPACT);
    if (n == 0 || n > cap - CDN_CALL_FIXED)
        return cdn_error_field(e, E2BIG, "code", "code and input exceed 1 MiB");
    if (st && want_request &&
        !(st->request = json_pack("{s:O, s:s, s:O, s:f, s:b}", "code", json_object_get(ci, "code"),
                                  "language", "python", "input", json_object_get(ci, "input"), "timeout_s",
                                  timeout_s, "fresh", fresh)))
        return cdn_error_set(e, ENOMEM, "out of memory");
    *ret_len = CDN_CALL_FIXED + n;
    return 0;
}
