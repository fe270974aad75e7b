/* The body of POST /v1/sandboxes/{id}/exec, decoded and checked field by
 * field. Hostile input: every error names its field. No libevent here, so
 * the fuzzer (tests/fuzz/fuzz-exec-body.c) links it alone. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec-args.h"
#include "core/json-util.h"
#include "shared/base64.h"
#include "shared/user.h"

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
        _cleanup_free_ char *kv = NULL;
        if (asprintf(&kv, "%s=%s", k, json_string_value(x)) < 0 || cdn_strv_push(out, kv) < 0)
            return bad(e, "env", "too many variables");
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

/* One path to copy into a sibling: absolute, literal, no '.', '..' or empty component, not the
 * whole root and not the kernel's views (they are the sibling's own). */
static int parse_copy_path(json_t *v, size_t i, struct exec_args *a, struct cdn_error *e)
{
    char field[40];
    (void) snprintf(field, sizeof field, "verifier.copy[%zu]", i);
    const char *p = json_string_value(v);
    if (!json_is_string(v) || strlen(p) != json_string_length(v) || p[0] != '/' || strlen(p) > 1024)
        return bad(e, field, "must be an absolute path of at most 1024 bytes");
    if (strcmp(p, "/") == 0)
        return bad(e, field, "cannot be the whole root: name what the verifier needs (e.g. the repository)");
    for (const char *c = p + 1; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return bad(e, field, "has an empty, '.' or '..' component");
        c += n + (c[n] == '/');
    }
    static const char *const kernel[] = {"/proc", "/sys", "/dev"};
    for (size_t k = 0; k < sizeof kernel / sizeof kernel[0]; k++) {
        size_t n = strlen(kernel[k]);
        if (strncmp(p, kernel[k], n) == 0 && (p[n] == 0 || p[n] == '/'))
            return bad(e, field, "cannot be beneath /proc, /sys or /dev (the sibling has its own)");
    }
    return cdn_strv_push(&a->copy, p) < 0 ? cdn_error_set(e, ENOMEM, "out of memory") : 0;
}

/* "verifier": true/false (in place), or {"mode": "in_place"|"sibling", "copy": [paths]}. */
static int parse_verifier(json_t *v, struct exec_args *a, struct cdn_error *e)
{
    if (json_is_boolean(v)) {
        a->verifier = json_is_true(v) ? EXEC_VERIFIER_IN_PLACE : EXEC_PLAIN;
        return 0;
    }
    if (!json_is_object(v))
        return bad(e, "verifier",
                   "must be true, false or {\"mode\": \"in_place\"|\"sibling\", \"copy\": [...]}");
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) if (strcmp(k, "mode") != 0 && strcmp(k, "copy") != 0) return cdn_error_field(
        e, EINVAL, "verifier", "verifier: unknown field '%s' (mode, copy)", k);
    json_t *mode = json_object_get(v, "mode"), *copy = json_object_get(v, "copy");
    const char *m = mode ? json_string_value(mode) : "in_place";
    if (!m || (strcmp(m, "in_place") != 0 && strcmp(m, "sibling") != 0))
        return bad(e, "verifier.mode", "must be \"in_place\" or \"sibling\"");
    a->verifier = m[0] == 's' ? EXEC_VERIFIER_SIBLING : EXEC_VERIFIER_IN_PLACE;
    if (a->verifier == EXEC_VERIFIER_IN_PLACE)
        return copy ? bad(e, "verifier.copy", "is for mode \"sibling\" only") : 0;
    if (!json_is_array(copy) || json_array_size(copy) == 0 || json_array_size(copy) > EXEC_COPY_MAX)
        return cdn_error_field(
            e, EINVAL, "verifier.copy",
            "verifier.copy: must be a non-empty array of at most %d paths (what the sibling "
            "gets from the sandbox)",
            EXEC_COPY_MAX);
    size_t i;
    json_array_foreach(copy, i, x)
    {
        int r = parse_copy_path(x, i, a, e);
        if (r < 0)
            return r;
    }
    return 0;
}

/* "cwd": absolute, or relative to the sandbox's workdir, as the files API takes a path
 * (file-args.c): the command and a files call of the same path agree on the file. */
static int parse_cwd(json_t *v, const char *workdir, struct exec_args *a, struct cdn_error *e)
{
    const char *p = json_string_value(v);
    if (!json_is_string(v) || !p[0] || strlen(p) != json_string_length(v))
        return bad(e, "cwd", "must be a non-empty path without NUL bytes (relative: to the workdir)");
    bool rel = p[0] != '/';
    if (rel && (!workdir || workdir[0] != '/'))
        return bad(e, "cwd", "must be an absolute path (the sandbox has no workdir)");
    if (asprintf(&a->cwd, "%s%s%s", rel ? workdir : "", rel ? "/" : "", p) < 0) {
        a->cwd = NULL;
        return cdn_error_set(e, ENOMEM, "out of memory");
    }
    if (strlen(a->cwd) >= EXEC_CWD_MAX)
        return cdn_error_field(e, ENAMETOOLONG, "cwd", "cwd: longer than %d bytes", EXEC_CWD_MAX - 1);
    return 0;
}

static int parse_object_fields(json_t *o, const char *workdir, struct exec_args *a, struct cdn_error *e)
{
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
            r = parse_cwd(v, workdir, a, e);
        else if (strcmp(k, "user") == 0)
            r = !json_is_string(v) ? bad(e, "user", "must be a string: name, uid, name:group or uid:gid")
                : cdn_user_check(json_string_value(v), e) < 0
                    ? -EINVAL
                    : ((a->user = strdup(json_string_value(v))) ? 0
                                                                : cdn_error_set(e, ENOMEM, "out of memory"));
        else if (strcmp(k, "stdin") == 0 || strcmp(k, "stdin_b64") == 0)
            r = a->has_stdin ? bad(e, k, "give stdin or stdin_b64, not both")
                             : parse_stdin(v, k[5] != 0, a, e);
        else if (strcmp(k, "timeout_s") == 0)
            r = json_is_number(v) && json_number_value(v) > 0 && json_number_value(v) <= 7 * 86400
                    ? (a->timeout_s = json_number_value(v), 0)
                    : bad(e, "timeout_s", "must be a number of seconds, > 0 and at most 604800");
        else if (strcmp(k, "verifier") == 0)
            r = parse_verifier(v, a, e);
        else if (strcmp(k, "step") == 0)
            r = json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < (1LL << 40)
                    ? (a->has_step = true, a->step = (uint64_t) json_integer_value(v), 0)
                    : bad(e, "step", "must be an integer from 0 (the trajectory's step this exec is)");
        else if (strcmp(k, "stream") == 0)
            r = json_is_boolean(v) ? (a->stream = json_is_true(v), 0)
                                   : bad(e, "stream", "must be true or false");
        else if (strcmp(k, "background") == 0)
            r = json_is_boolean(v) ? (a->background = json_is_true(v), 0)
                                   : bad(e, "background", "must be true or false");
        else if (strcmp(k, "keep_stdin") == 0)
            r = json_is_boolean(v) ? (a->keep_stdin = json_is_true(v), 0)
                                   : bad(e, "keep_stdin", "must be true or false");
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
    return 0;
}

static int parse_object(json_t *o, const char *workdir, struct exec_args *a, struct cdn_error *e)
{
    if (!json_is_object(o))
        return bad(e, "body", "must be a JSON object");
    int r = parse_object_fields(o, workdir, a, e);
    if (r < 0)
        return r;
    if (a->argv.n == 0)
        return bad(e, "cmd", "is required");
    if (a->background && a->stream)
        return bad(e, "stream", "a background process is not streamed: follow …/processes/{pid}/output");
    if (a->background && a->verifier != EXEC_PLAIN)
        return bad(e, "background", "a verifier step runs in the foreground");
    if (a->keep_stdin && !a->background)
        return bad(e, "keep_stdin", "only for a background process (write it with …/processes/{pid}/stdin)");
    if (a->has_step && (a->background || a->verifier == EXEC_VERIFIER_SIBLING || a->pty))
        return bad(e, "step",
                   "a trajectory's step is a command in the foreground, not background, pty or a "
                   "sibling verifier");
    return 0;
}

void cdn_exec_args_free(struct exec_args *a)
{
    cdn_strv_free(&a->argv);
    cdn_strv_free(&a->env);
    cdn_strv_free(&a->copy);
    free(a->stdin_data);
    a->stdin_data = NULL;
    free(a->cwd);
    a->cwd = NULL;
    free(a->user);
    a->user = NULL; /* a second call frees nothing: a cleanup variable may hold what a callee freed */
}

int cdn_exec_args_parse(const char *body, size_t len, const char *workdir, struct exec_args *a,
                        struct cdn_error *e)
{
    json_error_t jerr;
    _cleanup_json_ json_t *o = json_loadb(body, len, 0, &jerr);
    if (!o)
        return cdn_error_field(e, EBADMSG, "body", "body: not JSON: %s (line %d, column %d)", jerr.text,
                               jerr.line, jerr.column);
    return parse_object(o, workdir, a, e);
}

static int parse_text(json_t *v, const char *field, size_t max, struct exec_args *a, struct cdn_error *e)
{
    const char *t = json_string_value(v);
    if (!json_is_string(v) || !t[0] || strlen(t) != json_string_length(v))
        return bad(e, field, "must be a non-empty string without NUL bytes");
    if (json_string_length(v) > max)
        return cdn_error_field(e, E2BIG, field, "%s: longer than %zu bytes", field, max);
    return cdn_strv_push(&a->argv, t) < 0 ? cdn_error_set(e, ENOMEM, "out of memory") : 0;
}

int cdn_session_args_parse(const char *body, size_t len, const char *workdir, bool run, struct exec_args *a,
                           struct cdn_error *e)
{
    json_error_t jerr;
    _cleanup_json_ json_t *o = len ? json_loadb(body, len, 0, &jerr) : json_object();
    if (!o)
        return cdn_error_field(e, EBADMSG, "body", "body: not JSON: %s (line %d, column %d)", jerr.text,
                               jerr.line, jerr.column);
    if (!json_is_object(o))
        return bad(e, "body", "must be a JSON object");
    static const char *const open_fields[] = {"shell", "cwd", "env", "user", NULL};
    static const char *const run_fields[] = {"cmd", "timeout_s", "stdin", "stdin_b64", "encoding", NULL};
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        bool known = false;
        for (const char *const *f = run ? run_fields : open_fields; *f && !known; f++)
            known = strcmp(k, *f) == 0;
        if (!known)
            return cdn_error_field(e, EINVAL, k, "unknown field '%s'%s", k,
                                   run ? "" : " (a session takes shell, cwd, env and user)");
    }
    json_t *shell = json_object_get(o, "shell"), *cmd = json_object_get(o, "cmd");
    if (shell) {
        int r = parse_text(shell, "shell", SESSION_SHELL_MAX, a, e);
        if (r < 0)
            return r;
        if (strpbrk(a->argv.v[0], " \t\n"))
            return bad(e, "shell", "a name in PATH or an absolute path, without blanks");
        json_object_del(o, "shell");
    }
    if (cmd) {
        int r = parse_text(cmd, "cmd", SESSION_CMD_MAX, a, e);
        if (r < 0)
            return r;
        json_object_del(o, "cmd");
    } else if (run)
        return bad(e, "cmd", "is required (a shell command line)");
    /* What is left is the exec body's (cwd, env, user; timeout_s, stdin, encoding): its checks. */
    int r = parse_object_fields(o, workdir, a, e);
    if (r < 0)
        return r;
    if (a->has_stdin && a->stdin_len > (long) SESSION_STDIN_MAX)
        return cdn_error_field(e, E2BIG, json_object_get(o, "stdin_b64") ? "stdin_b64" : "stdin",
                               "stdin: more than %u KiB for one command of a session",
                               SESSION_STDIN_MAX >> 10);
    return 0;
}
