/* cordon ps, logs, signal, wait: a sandbox's background processes (cordon
 * exec -d starts them), through cordond's …/processes routes. Runs as the
 * CLI's user; what a process printed is the sandbox's bytes, written out as
 * they came. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "core/json-util.h"
#include "shared/base64.h"
#include "shared/macro.h"

static int proc_path(char *buf, size_t size, const char *id, const char *pid, const char *rest)
{
    char *end = NULL;
    unsigned long n = strtoul(pid, &end, 10);
    if (!end || *end || n == 0 || pid[0] == '-' || n > 4294967295UL) {
        fprintf(stderr, "cordon: '%s' is not a pid\n", pid);
        return -EINVAL;
    }
    (void) snprintf(buf, size, "/v1/sandboxes/%.64s/processes/%lu%s", id, n, rest);
    return 0;
}

/* One request; its JSON answer into *answer (NULL: not wanted). 0, or 125 (said why). */
static int request(const char *what, const char *method, const char *path, const char *body, json_t **answer)
{
    cordon_client *c = cdn_cli_connect();
    if (!c)
        return 125;
    char *out = NULL;
    size_t len = 0;
    int r = cordon_request(c, method, path, body, body ? strlen(body) : 0, body ? "application/json" : NULL,
                           NULL, &out, &len);
    int ret = r < 0 ? cdn_cli_fail(c, r, what) : 0;
    if (ret == 0 && answer && !(*answer = json_loadb(out, len, 0, NULL))) {
        fprintf(stderr, "cordon %s: the daemon's answer is not JSON\n", what);
        ret = 125;
    }
    free(out);
    cordon_client_free(c);
    return ret;
}

/* cordon ps ID: its background processes, oldest first. */
int cdn_cli_ps(int argc, char *const *argv)
{
    if (argc != 1) {
        fprintf(stderr, "usage: cordon ps ID\n");
        return 125;
    }
    char path[256];
    (void) snprintf(path, sizeof path, "/v1/sandboxes/%.64s/processes", argv[0]);
    _cleanup_json_ json_t *o = NULL;
    int ret = request("ps", "GET", path, NULL, &o);
    if (ret)
        return ret;
    printf("%-8s %-8s %-5s %s\n", "PID", "STATE", "EXIT", "COMMAND");
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(o, "processes"), i, p)
    {
        char line[1024] = "", code[16] = "-";
        size_t n = 0, k;
        json_t *a;
        json_array_foreach(json_object_get(p, "argv"), k, a)
        {
            if (n < sizeof line - 1)
                n += (size_t) snprintf(line + n, sizeof line - n, "%s%s", k ? " " : "", json_string_value(a));
        }
        if (json_is_integer(json_object_get(p, "exit_code")))
            (void) snprintf(code, sizeof code, "%lld",
                            (long long) json_integer_value(json_object_get(p, "exit_code")));
        printf("%-8lld %-8s %-5s %s\n", (long long) json_integer_value(json_object_get(p, "pid")),
               json_is_true(json_object_get(p, "running")) ? "running" : "exited", code, line);
    }
    return 0;
}

static void write_event(json_t *ev)
{
    const char *type = json_string_value(json_object_get(ev, "type"));
    const char *b64 = json_string_value(json_object_get(ev, "data_b64"));
    if (!type || !b64 || (strcmp(type, "stdout") != 0 && strcmp(type, "stderr") != 0))
        return;
    size_t n = strlen(b64);
    _cleanup_free_ uint8_t *d = malloc(n / 4 * 3 + 3);
    long len = d ? cdn_base64_decode(b64, n, d) : -1;
    FILE *f = type[3] == 'o' ? stdout : stderr;
    if (len > 0) {
        (void) fwrite(d, 1, (size_t) len, f);
        fflush(f);
    }
}

struct follow {
    unsigned long long next; /* the position after what was written */
    bool ended;              /* its exit line came (else "cut", or the connection ended: again) */
};

static void on_line(const char *line, size_t len, void *arg)
{
    struct follow *f = arg;
    _cleanup_json_ json_t *ev = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(ev, "type"));
    const char *b64 = json_string_value(json_object_get(ev, "data_b64"));
    if (type && strcmp(type, "exit") == 0)
        f->ended = true;
    if (b64 && json_is_integer(json_object_get(ev, "pos"))) {
        size_t n = strlen(b64), pad = (n >= 1 && b64[n - 1] == '=') + (n >= 2 && b64[n - 2] == '=');
        f->next = (unsigned long long) json_integer_value(json_object_get(ev, "pos")) + n / 4 * 3 - pad;
    }
    write_event(ev);
}

/* cordon logs [-f] ID PID: what it printed (the newest 1 MiB kept), then with -f what it prints until
 * it ends. */
int cdn_cli_logs(int argc, char *const *argv)
{
    bool follow = argc == 3 && (strcmp(argv[0], "-f") == 0 || strcmp(argv[0], "--follow") == 0);
    if (follow)
        argc--, argv++;
    char path[256];
    if (argc != 2) {
        fprintf(stderr, "usage: cordon logs [-f] ID PID\n");
        return 125;
    }
    if (proc_path(path, sizeof path, argv[0], argv[1], "/output?encoding=base64") < 0)
        return 125;
    if (!follow) {
        _cleanup_json_ json_t *o = NULL;
        int ret = request("logs", "GET", path, NULL, &o);
        size_t i;
        json_t *ev;
        json_array_foreach(json_object_get(o, "output"), i, ev)
        {
            write_event(ev);
        }
        return ret;
    }
    cordon_client *c = cdn_cli_connect();
    struct follow f = {0};
    int r = c ? 0 : -ENOMEM;
    for (int round = 0; r >= 0 && !f.ended && round < 1000; round++) { /* cut (a slow reader): on from next */
        char again[320];
        (void) snprintf(again, sizeof again, "%s&follow=true&since=%llu", path, f.next);
        r = cordon_request_lines(c, "GET", again, on_line, &f);
    }
    int ret = !c ? 125 : r < 0 ? cdn_cli_fail(c, r, "logs") : 0;
    cordon_client_free(c);
    return ret;
}

/* cordon signal ID PID SIGNAL: a number or a name (TERM, SIGINT, …). */
int cdn_cli_signal(int argc, char *const *argv)
{
    char path[256], body[96];
    if (argc != 3) {
        fprintf(stderr, "usage: cordon signal ID PID SIGNAL   (SIGNAL: a number, or a name such as TERM)\n");
        return 125;
    }
    if (proc_path(path, sizeof path, argv[0], argv[1], "/signal") < 0)
        return 125;
    char *end = NULL, name[33] = "";
    long n = strtol(argv[2], &end, 10);
    for (size_t i = 0; argv[2][i] && i < sizeof name - 1; i++) /* term, sigterm: as TERM, SIGTERM */
        name[i] = (char) (argv[2][i] >= 'a' && argv[2][i] <= 'z' ? argv[2][i] - 'a' + 'A' : argv[2][i]);
    bool word =
        strlen(argv[2]) < sizeof name && strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == strlen(name);
    if (end && !*end && end != argv[2])
        (void) snprintf(body, sizeof body, "{\"signal\": %ld}", n);
    else
        (void) snprintf(body, sizeof body, "{\"signal\": \"%s\"}", word ? name : "?");
    return request("signal", "POST", path, body, NULL);
}

/* cordon wait ID PID: until it ends; prints its exit code (as docker wait does). */
int cdn_cli_wait(int argc, char *const *argv)
{
    char path[256];
    if (argc != 2) {
        fprintf(stderr, "usage: cordon wait ID PID\n");
        return 125;
    }
    if (proc_path(path, sizeof path, argv[0], argv[1], "/wait?timeout_s=240") < 0)
        return 125;
    for (;;) { /* each request within cordond's idle limit for a connection */
        _cleanup_json_ json_t *o = NULL;
        int ret = request("wait", "GET", path, NULL, &o);
        if (ret)
            return ret;
        if (json_is_true(json_object_get(o, "running")))
            continue;
        json_t *code = json_object_get(o, "exit_code");
        if (json_is_integer(code))
            printf("%lld\n", (long long) json_integer_value(code));
        else
            printf("%s\n", json_string_value(json_object_get(o, "error"))
                               ? json_string_value(json_object_get(o, "error"))
                               : "ended");
        return 0;
    }
}
