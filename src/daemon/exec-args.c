/* The body of POST /v1/sandboxes/{id}/exec, decoded and checked field by
 * field. Hostile input: every error names its field. No libevent here, so
 * the fuzzer (tests/fuzz/fuzz-exec-body.c) links it alone. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec-args.h"
#include "shared/base64.h"

static int bad(struct cdn_error *e, const char *field, const char *msg)
{
    return cdn_error_field(e, EINVAL, field, "%s: %s", field, msg);
}

static int parse_strings(json_t *v, const char *field, struct cdn_strv *out, struct cdn_error *e)
{
    if (!json_is_array(v) || json_array_size(v) == 0)
        return bad(e, field, "must be a non-empty array of strings");
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x)
    {
        if (!json_is_string(x) || strlen(json_string_value(x)) != json_string_length(x))
            return bad(e, field, "every element must be a string without NUL bytes");
        if (cdn_strv_push(out, json_string_value(x)) < 0)
            return bad(e, field, "too many elements");
    }
    return 0;
}

static int parse_env(json_t *v, struct cdn_strv *out, struct cdn_error *e)
{
    if (!json_is_object(v))
        return bad(e, "env", "must be an object of strings");
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x)
    {
        if (!json_is_string(x) || !k[0] || strchr(k, '=') ||
            strlen(json_string_value(x)) != json_string_length(x))
            return bad(e, "env", "keys must be names without '=', values strings without NUL bytes");
        char *kv = NULL;
        if (asprintf(&kv, "%s=%s", k, json_string_value(x)) < 0 || cdn_strv_push(out, kv) < 0) {
            free(kv);
            return bad(e, "env", "too many variables");
        }
        free(kv);
    }
    return 0;
}

static int parse_stdin(json_t *v, bool b64, struct exec_args *a, struct cdn_error *e)
{
    if (!json_is_string(v))
        return bad(e, b64 ? "stdin_b64" : "stdin", "must be a string");
    size_t n = json_string_length(v);
    a->stdin_data = malloc(n + 1);
    if (!a->stdin_data)
        return cdn_error_set(e, ENOMEM, "out of memory");
    if (b64) {
        a->stdin_len = cdn_base64_decode(json_string_value(v), n, a->stdin_data);
        if (a->stdin_len < 0)
            return bad(e, "stdin_b64", "is not valid base64");
    } else {
        memcpy(a->stdin_data, json_string_value(v), n);
        a->stdin_len = (long) n;
    }
    if (a->stdin_len > (long) EXEC_STDIN_MAX)
        return cdn_error_field(e, E2BIG, b64 ? "stdin_b64" : "stdin",
                               "%s: more than %u MiB; cordon-init buffers at most that for a command",
                               b64 ? "stdin_b64" : "stdin", EXEC_STDIN_MAX >> 20);
    a->has_stdin = true;
    return 0;
}

static int parse_object(json_t *o, struct exec_args *a, struct cdn_error *e)
{
    if (!json_is_object(o))
        return bad(e, "body", "must be a JSON object");
    const char *k;
    json_t *v;
    int r = 0;
    json_object_foreach(o, k, v)
    {
        if (strcmp(k, "cmd") == 0)
            r = parse_strings(v, "cmd", &a->argv, e);
        else if (strcmp(k, "env") == 0)
            r = parse_env(v, &a->env, e);
        else if (strcmp(k, "cwd") == 0)
            r = json_is_string(v) && json_string_value(v)[0] == '/'
                    ? ((a->cwd = strdup(json_string_value(v))) ? 0
                                                               : cdn_error_set(e, ENOMEM, "out of memory"))
                    : bad(e, "cwd", "must be an absolute path");
        else if (strcmp(k, "stdin") == 0 || strcmp(k, "stdin_b64") == 0)
            r = a->has_stdin ? bad(e, k, "give stdin or stdin_b64, not both")
                             : parse_stdin(v, k[5] != 0, a, e);
        else if (strcmp(k, "timeout_s") == 0)
            r = json_is_number(v) && json_number_value(v) > 0 && json_number_value(v) <= 7 * 86400
                    ? (a->timeout_s = json_number_value(v), 0)
                    : bad(e, "timeout_s", "must be a number of seconds, > 0 and at most 604800");
        else if (strcmp(k, "verifier") == 0)
            r = json_is_boolean(v) ? (a->verifier = json_is_true(v), 0)
                                   : bad(e, "verifier", "must be true or false");
        else if (strcmp(k, "stream") == 0)
            r = json_is_boolean(v) ? (a->stream = json_is_true(v), 0)
                                   : bad(e, "stream", "must be true or false");
        else if (strcmp(k, "encoding") == 0)
            r = json_is_string(v) && (strcmp(json_string_value(v), "utf8") == 0 ||
                                      strcmp(json_string_value(v), "base64") == 0)
                    ? (a->b64 = strcmp(json_string_value(v), "base64") == 0, 0)
                    : bad(e, "encoding", "must be \"utf8\" or \"base64\"");
        else if (strcmp(k, "pty") == 0) {
            json_t *rows = json_object_get(v, "rows"), *cols = json_object_get(v, "cols");
            r = json_is_object(v) && json_object_size(v) == 2 && json_is_integer(rows) &&
                        json_is_integer(cols) && json_integer_value(rows) > 0 &&
                        json_integer_value(rows) < 1000 && json_integer_value(cols) > 0 &&
                        json_integer_value(cols) < 1000
                    ? (a->pty = true, a->rows = (uint16_t) json_integer_value(rows),
                       a->cols = (uint16_t) json_integer_value(cols), 0)
                    : bad(e, "pty", "must be {\"rows\": 1-999, \"cols\": 1-999}");
        } else
            r = cdn_error_field(e, EINVAL, k, "unknown field '%s'", k);
        if (r < 0)
            return r;
    }
    if (a->argv.n == 0)
        return bad(e, "cmd", "is required");
    return 0;
}

void exec_args_free(struct exec_args *a)
{
    cdn_strv_free(&a->argv);
    cdn_strv_free(&a->env);
    free(a->stdin_data);
    free(a->cwd);
}

int exec_args_parse(const char *body, size_t len, struct exec_args *a, struct cdn_error *e)
{
    json_error_t jerr;
    json_t *o = json_loadb(body, len, 0, &jerr);
    if (!o)
        return cdn_error_field(e, EBADMSG, "body", "body: not JSON: %s (line %d, column %d)", jerr.text,
                               jerr.line, jerr.column);
    int r = parse_object(o, a, e);
    json_decref(o);
    return r;
}
