/* cordon session open|run|ls|interrupt|rm: a sandbox's shell sessions,
 * through cordond's …/sessions routes. A command's output is the sandbox's
 * bytes, written out as they came; its exit code becomes ours. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "core/json-util.h"
#include "shared/base64.h"
#include "shared/macro.h"
#include "shared/parse-util.h"

#define STDIN_MAX        (256u << 10) /* a session's command takes at most this on stdin (cordond's bound) */
#define SESSION_LINE_MAX (256u << 10) /* and a command line this long */

static const char usage_text[] =
    "usage: cordon session open ID [--shell SH] [--workdir DIR] [--user U] [--env K=V]…   prints its id\n"
    "       cordon session run [-i] [--timeout DUR] ID SESSION CMD…   one command line in it; exits with\n"
    "                                                                  its code (-i: our stdin is its)\n"
    "       cordon session ls ID\n"
    "       cordon session interrupt ID SESSION\n"
    "       cordon session rm ID SESSION\n";

static int request(const char *what, const char *method, const char *path, json_t *body, json_t **answer)
{
    cordon_client *c = cdn_cli_connect();
    if (!c)
        return 125;
    _cleanup_free_ char *b = body ? json_dumps(body, JSON_COMPACT) : NULL;
    char *out = NULL;
    size_t len = 0;
    int r = cordon_request(c, method, path, b, b ? strlen(b) : 0, b ? "application/json" : NULL, NULL, &out,
                           &len);
    int ret = r < 0 ? cdn_cli_fail(c, r, what) : 0;
    if (ret == 0 && answer && !(*answer = json_loadb(out, len, 0, NULL))) {
        fprintf(stderr, "cordon session %s: the daemon's answer is not JSON\n", what);
        ret = 125;
    }
    free(out);
    cordon_client_free(c);
    return ret;
}

static int session_open(int argc, char *const *argv)
{
    if (argc < 1 || argc % 2 == 0) {
        fputs(usage_text, stderr);
        return 125;
    }
    _cleanup_json_ json_t *body = json_object(), *env = json_object();
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *f = argv[i], *v = argv[i + 1], *eq = strchr(v, '=');
        if (strcmp(f, "--shell") == 0)
            json_object_set_new(body, "shell", json_string(v));
        else if (strcmp(f, "--workdir") == 0)
            json_object_set_new(body, "cwd", json_string(v));
        else if (strcmp(f, "--user") == 0)
            json_object_set_new(body, "user", json_string(v));
        else if (strcmp(f, "--env") == 0 && eq && eq != v) {
            _cleanup_free_ char *k = strndup(v, (size_t) (eq - v));
            json_object_set_new(env, k, json_string(eq + 1));
        } else {
            fprintf(stderr, "cordon session open: %s '%s': unknown flag or bad value\n", f, v);
            return 125;
        }
    }
    if (json_object_size(env))
        json_object_set(body, "env", env);
    char path[256];
    (void) snprintf(path, sizeof path, "/v1/sandboxes/%.64s/sessions", argv[0]);
    _cleanup_json_ json_t *o = NULL;
    int ret = request("open", "POST", path, body, &o);
    if (!ret)
        printf("%s\n", json_string_value(json_object_get(o, "id")));
    return ret;
}

static void write_out(FILE *f, json_t *b64)
{
    const char *s = json_string_value(b64);
    if (!s)
        return;
    size_t n = strlen(s);
    _cleanup_free_ uint8_t *d = malloc(n / 4 * 3 + 3);
    long k = d ? cdn_base64_decode(s, n, d) : -1;
    if (k > 0)
        (void) fwrite(d, 1, (size_t) k, f);
    fflush(f);
}

static int session_run(int argc, char *const *argv)
{
    bool in = false;
    double timeout_s = 0;
    int i = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        uint64_t ms;
        if (strcmp(argv[i], "-i") == 0)
            in = true;
        else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc &&
                 cdn_parse_duration(argv[i + 1], &ms) == 0 && ms > 0)
            timeout_s = (double) ms / 1000.0, i++;
        else {
            fprintf(stderr, "cordon session run: %s: unknown flag or bad value\n", argv[i]);
            return 125;
        }
    }
    if (argc - i < 3) {
        fputs(usage_text, stderr);
        return 125;
    }
    const char *id = argv[i], *sid = argv[i + 1];
    _cleanup_free_ char *line = calloc(1, SESSION_LINE_MAX + 1);
    size_t n = 0;
    for (int k = i + 2; line && k < argc; k++) {
        int w = snprintf(line + n, SESSION_LINE_MAX + 1 - n, "%s%s", k > i + 2 ? " " : "", argv[k]);
        if (w < 0 || (size_t) w > SESSION_LINE_MAX - n) {
            fprintf(stderr, "cordon session run: the command is longer than %u bytes\n", SESSION_LINE_MAX);
            return 125;
        }
        n += (size_t) w;
    }
    if (!line)
        return 125;
    _cleanup_json_ json_t *body = json_pack("{s:s, s:s}", "cmd", line, "encoding", "base64");
    if (timeout_s > 0)
        json_object_set_new(body, "timeout_s", json_real(timeout_s));
    if (in) {
        _cleanup_free_ uint8_t *buf = malloc(STDIN_MAX + 1);
        size_t got = 0;
        ssize_t r = 1;
        while (buf && got <= STDIN_MAX && (r = read(0, buf + got, STDIN_MAX + 1 - got)) > 0)
            got += (size_t) r;
        if (!buf || r < 0 || got > STDIN_MAX) {
            fprintf(stderr, "cordon session run: stdin: %s\n",
                    !buf    ? "out of memory"
                    : r < 0 ? strerror(errno)
                            : "more than 256 KiB");
            return 125;
        }
        _cleanup_free_ char *enc = malloc(cdn_base64_len(got) + 1);
        if (!enc)
            return 125;
        cdn_base64_encode(buf, got, enc);
        json_object_set_new(body, "stdin_b64", json_string(enc));
    }
    char path[256];
    (void) snprintf(path, sizeof path, "/v1/sandboxes/%.64s/sessions/%.15s/run", id, sid);
    _cleanup_json_ json_t *o = NULL;
    int ret = request("run", "POST", path, body, &o);
    if (ret)
        return ret;
    write_out(stdout, json_object_get(o, "stdout_b64"));
    write_out(stderr, json_object_get(o, "stderr_b64"));
    if (json_is_true(json_object_get(o, "timed_out")))
        fprintf(stderr, "cordon session run: timed out after %g s (interrupted; the session goes on)\n",
                timeout_s);
    if (json_is_true(json_object_get(o, "restarted")))
        fprintf(stderr, "cordon session run: the session's shell was started again\n");
    if (json_is_true(json_object_get(o, "session_ended")))
        fprintf(stderr, "cordon session run: the command ended the session's shell\n");
    return (int) json_integer_value(json_object_get(o, "exit_code")) & 0xff;
}

static int session_ls(int argc, char *const *argv)
{
    if (argc != 1) {
        fputs(usage_text, stderr);
        return 125;
    }
    char path[256];
    (void) snprintf(path, sizeof path, "/v1/sandboxes/%.64s/sessions", argv[0]);
    _cleanup_json_ json_t *o = NULL;
    int ret = request("ls", "GET", path, NULL, &o);
    if (ret)
        return ret;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(o, "sessions"), i, s)
    {
        printf("%s %s %s commands=%lld restarts=%lld\n", json_string_value(json_object_get(s, "id")),
               json_string_value(json_object_get(s, "shell")),
               json_is_true(json_object_get(s, "busy")) ? "busy" : "idle",
               (long long) json_integer_value(json_object_get(s, "commands")),
               (long long) json_integer_value(json_object_get(s, "restarts")));
    }
    return 0;
}

int cdn_cli_session(int argc, char *const *argv)
{
    const char *sub = argc > 0 ? argv[0] : "";
    if (strcmp(sub, "open") == 0)
        return session_open(argc - 1, argv + 1);
    if (strcmp(sub, "run") == 0)
        return session_run(argc - 1, argv + 1);
    if (strcmp(sub, "ls") == 0)
        return session_ls(argc - 1, argv + 1);
    if ((strcmp(sub, "rm") == 0 || strcmp(sub, "interrupt") == 0) && argc == 3) {
        char path[256];
        bool rm = sub[0] == 'r';
        (void) snprintf(path, sizeof path, "/v1/sandboxes/%.64s/sessions/%.15s%s", argv[1], argv[2],
                        rm ? "" : "/interrupt");
        return request(sub, rm ? "DELETE" : "POST", path, NULL, NULL);
    }
    fputs(usage_text, stderr);
    return 125;
}
