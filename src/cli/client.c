/* The CLI's client commands (DESIGN §3): create, exec, kill, ls, inspect,
 * events — each one request or two to cordond through libcordon (cp, mv and
 * chmod: cp.c). They find the daemon at $CORDON_SOCKET or the default socket. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "core/json-util.h"
#include "core/spec.h"
#include "lib/cordon.h"
#include "run-flags.h"
#include "shared/macro.h"
#include "shared/parse-util.h"

int cdn_cli_fail(cordon_client *c, int r, const char *what)
{
    const struct cordon_error *e = cordon_last_error(c);
    if (e->message[0])
        fprintf(stderr, "cordon %s: %s%s%s%s\n", what, e->message, e->field[0] ? " (field: " : "", e->field,
                e->field[0] ? ")" : "");
    else
        fprintf(stderr, "cordon %s: %s\n", what, strerror(-r));
    return 125;
}

cordon_client *cdn_cli_connect(void)
{
    cordon_client *c = cordon_client_new(NULL);
    if (!c)
        fprintf(stderr, "cordon: out of memory\n");
    return c;
}

int cdn_cli_create(int argc, char *const *argv)
{
    struct cdn_run_opts o = {.no_command = true};
    struct cdn_error err = {0};
    if (argc > 0 && strcmp(argv[0], "--help") == 0) {
        printf("usage: cordon create [FLAGS]   (the flags of cordon run; prints the new sandbox's id)\n");
        cdn_run_usage(stdout);
        return 0;
    }
    if (cdn_spec_init(&o.spec) < 0)
        return 125;
    int r = cdn_run_parse(argc, argv, &o, &err);
    if (r >= 0)
        r = cdn_spec_validate(&o.spec, &err);
    if (r < 0) {
        fprintf(stderr, "cordon create: %s%s%s%s\n", err.msg, err.field[0] ? " (field: " : "", err.field,
                err.field[0] ? ")" : "");
        cdn_spec_free(&o.spec);
        return 125;
    }
    char *spec = cdn_spec_to_json(&o.spec);
    cdn_spec_free(&o.spec);
    if (spec && !o.workdir_given) {
        /* No --workdir: none sent, so that an image's WorkingDir applies (cordond's default otherwise). */
        json_t *root = json_loads(spec, 0, NULL);
        char *without = root && json_object_del(root, "workdir") == 0 ? json_dumps(root, JSON_COMPACT) : NULL;
        json_decref(root);
        if (without) {
            free(spec);
            spec = without;
        }
    }
    cordon_client *c = cdn_cli_connect();
    char *id = NULL;
    r = c && spec ? cordon_create(c, spec, &id) : -ENOMEM;
    free(spec);
    int ret = r < 0 ? (c ? cdn_cli_fail(c, r, "create") : 125) : (printf("%s\n", id), 0);
    free(id);
    cordon_client_free(c);
    return ret;
}

static void write_out(int stream, const uint8_t *p, size_t len, void *arg)
{
    (void) arg;
    FILE *f = stream == 1 ? stdout : stderr;
    (void) fwrite(p, 1, len, f);
    fflush(f);
}

/* cordon exec ID [--env K=V]… [--workdir DIR] [--user U] [--timeout DUR] [--verifier[=sibling] [--copy
 * PATH]…]
 *               [--] CMD [ARG…] */
int cdn_cli_exec(int argc, char *const *argv)
{
    if (argc < 2) {
        fprintf(stderr,
                "usage: cordon exec ID [-d | -i | -t | -it] [--env K=V] [--workdir DIR] [--user U] "
                "[--timeout DUR]\n"
                "                      [--verifier[=sibling] [--copy PATH]…] [--] CMD [ARG…]\n"
                "  --verifier: a verifier step: ends the sandbox's other processes, runs alone and may\n"
                "              read its protected paths\n"
                "  --verifier=sibling --copy PATH…: the same in a fresh sandbox of the same spec that\n"
                "              gets only the PATHs from this one\n"
                "  -d, --detach: in the background: prints its pid (cordon ps, logs, signal, wait)\n"
                "  -i, --interactive: our stdin is its stdin (piped, or typed)\n"
                "  -t, --tty: on a terminal of our window's size; ours is raw meanwhile (-it: docker's)\n"
                "  --workdir DIR: absolute, or relative to the sandbox's workdir\n"
                "  --user U: name, uid, name:group or uid:gid of the sandbox's /etc/passwd\n"
                "  --step K: step K of the sandbox's trajectory: run once, answered from its log when\n"
                "            step K is recorded with the same command (docs/trajectories.md)\n");
        return 125;
    }
    const char *id = NULL; /* the first word that is not a flag: flags go before it (docker's way) or after */
    const char *env[256] = {0}, *copy[17] = {0}, *cwd = NULL, *user = NULL;
    size_t n_env = 0, n_copy = 0;
    double timeout_s = 0;
    uint64_t step = 0;
    bool verifier = false, sibling = false, detach = false, in = false, tty = false, has_step = false;
    int i = 0;
    for (; i < argc && (!id || argv[i][0] == '-'); i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            id = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "-d") == 0 || strcmp(a, "--detach") == 0) {
            detach = true;
            continue;
        }
        if (strcmp(a, "-i") == 0 || strcmp(a, "--interactive") == 0 || strcmp(a, "-t") == 0 ||
            strcmp(a, "--tty") == 0 || strcmp(a, "-it") == 0 || strcmp(a, "-ti") == 0) {
            in |= strchr(a, 'i') && strcmp(a, "-t") != 0 && strcmp(a, "--tty") != 0;
            tty |= strcmp(a, "-i") != 0 && strcmp(a, "--interactive") != 0;
            continue;
        }
        if (strcmp(a, "--verifier") == 0 || strcmp(a, "--verifier=in_place") == 0 ||
            strcmp(a, "--verifier=sibling") == 0) {
            verifier = true;
            sibling = strcmp(a, "--verifier=sibling") == 0;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "cordon exec: %s needs a value\n", a);
            return 125;
        }
        const char *v = argv[++i];
        uint64_t ms;
        if (strcmp(a, "--env") == 0 && strchr(v, '=') && n_env < ELEMENTSOF(env) - 1)
            env[n_env++] = v;
        else if (strcmp(a, "--workdir") == 0 && v[0]) /* relative: to the sandbox's workdir (cordond) */
            cwd = v;
        else if (strcmp(a, "--user") == 0 && v[0])
            user = v;
        else if (strcmp(a, "--timeout") == 0 && cdn_parse_duration(v, &ms) == 0 && ms > 0)
            timeout_s = (double) ms / 1000.0;
        else if (strcmp(a, "--copy") == 0 && n_copy < ELEMENTSOF(copy) - 1)
            copy[n_copy++] = v;
        else if (strcmp(a, "--step") == 0 && cdn_parse_u64(v, &step) == 0)
            has_step = true;
        else {
            fprintf(stderr, "cordon exec: %s '%s': unknown flag or bad value\n", a, v);
            return 125;
        }
    }
    if (!id || i >= argc) {
        fprintf(stderr, "cordon exec: %s\n", id ? "no command given" : "no sandbox id given");
        return 125;
    }
    if (sibling != (n_copy > 0)) {
        fprintf(stderr,
                "cordon exec: --verifier=sibling takes one --copy PATH or more, and --copy needs it\n");
        return 125;
    }
    if (has_step && (in || tty || detach || sibling)) {
        fprintf(stderr,
                "cordon exec: --step is for a command in the foreground, not with -i, -t, -d or a sibling\n");
        return 125;
    }
    if ((in || tty) && (detach || verifier)) {
        fprintf(stderr, "cordon exec: -i and -t are for a command in the foreground, not with %s\n",
                detach ? "-d" : "--verifier");
        return 125;
    }
    if (in || tty) {
        json_t *body = json_object(), *envo = json_object();
        for (size_t k = 0; k < n_env; k++) {
            _cleanup_free_ char *name = strndup(env[k], (size_t) (strchr(env[k], '=') - env[k]));
            json_object_set_new(envo, name, json_string(strchr(env[k], '=') + 1));
        }
        if (n_env)
            json_object_set(body, "env", envo);
        json_decref(envo);
        if (cwd)
            json_object_set_new(body, "cwd", json_string(cwd));
        if (user)
            json_object_set_new(body, "user", json_string(user));
        if (timeout_s > 0)
            json_object_set_new(body, "timeout_s", json_real(timeout_s));
        int ret = cdn_cli_exec_attached(id, (const char *const *) argv + i, body, in, tty);
        json_decref(body);
        return ret;
    }
    cordon_client *c = cdn_cli_connect();
    if (!c)
        return 125;
    struct cordon_exec_opts opts = {.env = n_env ? env : NULL,
                                    .cwd = cwd,
                                    .timeout_s = timeout_s,
                                    .verifier = verifier,
                                    .verifier_copy = sibling ? copy : NULL,
                                    .user = user};
    struct cordon_exec_result res;
    uint32_t pid = 0;
    if (has_step) { /* buffered: a replayed step's output comes whole */
        bool replayed = false;
        int r = cordon_exec_step(c, id, (const char *const *) argv + i, &opts, step, &res, &replayed);
        int ret = r < 0 ? cdn_cli_fail(c, r, "exec") : res.exit_code;
        if (r >= 0) {
            write_out(1, res.out, res.out_len, NULL);
            write_out(2, res.err, res.err_len, NULL);
            if (replayed && isatty(STDERR_FILENO))
                fprintf(stderr, "cordon: step %llu was answered from the trajectory's log\n",
                        (unsigned long long) step);
            cordon_exec_result_free(&res);
        }
        cordon_client_free(c);
        return ret;
    }
    int r = detach && verifier
                ? (fprintf(stderr, "cordon exec: a verifier step runs in the foreground\n"), -EINVAL)
            : detach
                ? cordon_start(c, id, (const char *const *) argv + i, &opts, false, &pid)
                : cordon_exec_stream(c, id, (const char *const *) argv + i, &opts, write_out, NULL, &res);
    int ret = detach && verifier ? 125
              : r < 0            ? cdn_cli_fail(c, r, "exec")
              : detach           ? (printf("%u\n", pid), 0)
                                 : res.exit_code;
    cordon_client_free(c);
    return ret;
}

/* cordon kill --label K=V…: every sandbox with all of those labels. */
static int kill_labelled(int argc, char *const *argv)
{
    const char *labels[65];
    size_t n = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--label") != 0 || i + 1 >= argc || !strchr(argv[i + 1], '=') || n == 64) {
            fprintf(stderr, "usage: cordon kill --label K=V…  (up to 64)\n");
            return 125;
        }
        labels[n++] = argv[++i];
    }
    labels[n] = NULL;
    cordon_client *c = cdn_cli_connect();
    size_t gone = 0;
    int r = c ? cordon_delete_labelled(c, labels, &gone) : -ENOTCONN;
    int ret = !c ? 125 : r < 0 ? cdn_cli_fail(c, r, "kill") : 0;
    if (ret == 0)
        printf("%zu deleted\n", gone);
    cordon_client_free(c);
    return ret;
}

int cdn_cli_kill(int argc, char *const *argv)
{
    if (argc < 1) {
        fprintf(stderr, "usage: cordon kill ID… | cordon kill --label K=V…\n");
        return 125;
    }
    if (strcmp(argv[0], "--label") == 0)
        return kill_labelled(argc, argv);
    cordon_client *c = cdn_cli_connect();
    int ret = c ? 0 : 125;
    for (int i = 0; c && i < argc; i++) {
        int r = cordon_delete(c, argv[i]);
        if (r < 0)
            ret = cdn_cli_fail(c, r, "kill");
    }
    cordon_client_free(c);
    return ret;
}

/* cordon update ID [--timeout DUR] [--idle-timeout DUR] [--label K=V | --label K-]… */
int cdn_cli_update(int argc, char *const *argv)
{
    static const char usage[] =
        "usage: cordon update ID [--timeout DUR] [--idle-timeout DUR] [--label K=V | --label K-]…\n"
        "                        [--cpus N] [--memory SIZE] [--pids N] [--on-violation log|deny|kill]\n"
        "                        [--network allowlist|open [--allow ENTRY]…] [--protect PATTERN]… "
        "[--no-protect]\n";
    _cleanup_json_ json_t *patch = json_object(), *labels = json_object(), *limits = json_object(),
                          *allow = json_array();
    const char *network = NULL;
    json_t *protect = NULL; /* the whole new list, when given */
    if (argc < 2 || argv[0][0] == '-' || !patch || !labels || !limits || !allow) {
        fputs(usage, stderr);
        return 125;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-protect") == 0) {
            json_object_set_new(patch, "protect", json_array());
            continue;
        }
        const char *f = argv[i], *v = i + 1 < argc ? argv[++i] : NULL;
        uint64_t ms;
        size_t n = v ? strlen(v) : 0;
        if (v && (strcmp(f, "--timeout") == 0 || strcmp(f, "--idle-timeout") == 0)) {
            if (cdn_parse_duration(v, &ms) < 0) {
                fprintf(stderr, "cordon update: %s '%s': not a duration (use e.g. 30s, 5m; 0: none)\n", f, v);
                return 125;
            }
            json_object_set_new(patch, f[2] == 't' ? "timeout_s" : "idle_timeout_s",
                                json_real((double) ms / 1e3));
        } else if (v && (strcmp(f, "--cpus") == 0 || strcmp(f, "--pids") == 0)) {
            char *end = NULL;
            double x = strtod(v, &end);
            if (!end || *end || !(x > 0)) {
                fprintf(stderr, "cordon update: %s '%s': not a positive number\n", f, v);
                return 125;
            }
            json_object_set_new(limits, f + 2, f[2] == 'c' ? json_real(x) : json_integer((json_int_t) x));
        } else if (v && strcmp(f, "--memory") == 0) {
            uint64_t bytes;
            if (cdn_parse_size(v, &bytes) < 0) {
                fprintf(stderr, "cordon update: --memory '%s': not a size (use e.g. 512M, 2G)\n", v);
                return 125;
            }
            json_object_set_new(limits, "memory_mb", json_integer((json_int_t) (bytes >> 20)));
        } else if (v && strcmp(f, "--on-violation") == 0) {
            json_object_set_new(patch, "on_violation", json_string(v));
        } else if (v && strcmp(f, "--network") == 0) {
            network = v;
        } else if (v && strcmp(f, "--allow") == 0) {
            json_array_append_new(allow, json_string(v));
        } else if (v && strcmp(f, "--protect") == 0) {
            if (!(protect = json_object_get(patch, "protect")))
                json_object_set_new(patch, "protect", protect = json_array());
            json_array_append_new(protect, json_string(v));
        } else if (v && strcmp(f, "--label") == 0 && strchr(v, '=')) {
            char key[130];
            (void) snprintf(key, sizeof key, "%.*s", (int) (strchr(v, '=') - v), v);
            json_object_set_new(labels, key, json_string(strchr(v, '=') + 1));
        } else if (v && strcmp(f, "--label") == 0 && n > 1 && v[n - 1] == '-') {
            char key[130];
            (void) snprintf(key, sizeof key, "%.*s", (int) (n - 1), v);
            json_object_set_new(labels, key, json_null());
        } else {
            fputs(usage, stderr);
            return 125;
        }
    }
    if (json_object_size(labels))
        json_object_set(patch, "labels", labels);
    if (json_object_size(limits))
        json_object_set(patch, "limits", limits);
    if (json_array_size(allow) && !network) {
        fputs("cordon update: --allow needs --network allowlist|open\n", stderr);
        return 125;
    }
    _cleanup_free_ char *body = json_dumps(patch, JSON_COMPACT);
    cordon_client *c = body ? cdn_cli_connect() : NULL;
    char *resp = NULL;
    int r = 0, ret = c ? 0 : 125;
    /* The network first (PATCH …/network): a phase change that opens it is in force before the
     * rest is answered. A network alone changes nothing else. */
    if (c && network) {
        _cleanup_json_ json_t *net = json_pack("{s:s, s:O}", "mode", network, "allow", allow);
        _cleanup_free_ char *nbody = net ? json_dumps(net, JSON_COMPACT) : NULL;
        char path[256];
        size_t len = 0;
        (void) snprintf(path, sizeof path, "/v1/sandboxes/%s/network", argv[0]);
        r = nbody ? cordon_request(c, "PATCH", path, nbody, strlen(nbody), "application/json", NULL, &resp,
                                   &len)
                  : -ENOMEM;
        ret = r < 0 ? cdn_cli_fail(c, r, "update") : 0;
        while (len && resp[len - 1] == '\n')
            len--;
        if (ret == 0)
            printf("%.*s\n", (int) len, resp);
        free(resp);
        resp = NULL;
    }
    if (c && ret == 0 && (!network || json_object_size(patch))) {
        r = cordon_update(c, argv[0], body, &resp);
        ret = r < 0 ? cdn_cli_fail(c, r, "update") : 0;
        if (ret == 0)
            printf("%s%s", resp, resp[0] && resp[strlen(resp) - 1] == '\n' ? "" : "\n");
    }
    free(resp);
    cordon_client_free(c);
    return ret;
}

static int get_json(cordon_client *c, const char *path, json_t **ret, const char *what)
{
    char *body = NULL;
    size_t len = 0;
    int r = cordon_request(c, "GET", path, NULL, 0, NULL, NULL, &body, &len);
    *ret = r >= 0 ? json_loadb(body, len, 0, NULL) : NULL;
    free(body);
    if (r < 0)
        return cdn_cli_fail(c, r, what);
    if (!*ret) {
        fprintf(stderr, "cordon %s: the daemon's answer is not JSON\n", what);
        return 125;
    }
    return 0;
}

/* cordon ls [--label K=V]… */
int cdn_cli_ls(int argc, char *const *argv)
{
    char path[2048] = "/v1/sandboxes";
    size_t off = strlen(path);
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--label") != 0 || i + 1 >= argc || !strchr(argv[i + 1], '=')) {
            fprintf(stderr, "usage: cordon ls [--label K=V]…\n");
            return 125;
        }
        off +=
            (size_t) snprintf(path + off, sizeof path - off, "%clabel=%s", off == 13 ? '?' : '&', argv[++i]);
        if (off >= sizeof path) {
            fprintf(stderr, "cordon ls: too many labels\n");
            return 125;
        }
    }
    cordon_client *c = cdn_cli_connect();
    json_t *o = NULL;
    int ret = c ? get_json(c, path, &o, "ls") : 125;
    if (ret == 0) {
        printf("%-14s %-9s %-10s %8s  %s\n", "ID", "STATE", "TIER", "AGE", "LABELS");
        size_t i;
        json_t *sb;
        double now = (double) time(NULL);
        json_array_foreach(json_object_get(o, "sandboxes"), i, sb)
        {
            char labels[512] = "";
            size_t lo = 0;
            const char *k;
            json_t *v;
            json_object_foreach(json_object_get(sb, "labels"), k, v) lo +=
                (size_t) snprintf(labels + lo, lo < sizeof labels ? sizeof labels - lo : 0, "%s%s=%s",
                                  lo ? "," : "", k, json_string_value(v));
            double age = now - json_number_value(json_object_get(sb, "created_at"));
            printf("%-14s %-9s %-10s %7.0fs  %s\n", json_string_value(json_object_get(sb, "id")),
                   json_string_value(json_object_get(sb, "state")),
                   json_string_value(json_object_get(sb, "tier")), age < 0 ? 0 : age, labels);
        }
    }
    json_decref(o);
    cordon_client_free(c);
    return ret;
}

/* cordon WHAT ID: GET /v1/sandboxes/ID<rest>, printed as indented JSON. */
static int show_json(int argc, char *const *argv, const char *what, const char *rest)
{
    if (argc != 1) {
        fprintf(stderr, "usage: cordon %s ID\n", what);
        return 125;
    }
    char path[256];
    (void) snprintf(path, sizeof path, "/v1/sandboxes/%.64s%s", argv[0], rest);
    cordon_client *c = cdn_cli_connect();
    json_t *o = NULL;
    int ret = c ? get_json(c, path, &o, what) : 125;
    if (ret == 0) {
        _cleanup_free_ char *s = json_dumps(o, JSON_INDENT(2));
        printf("%s\n", s ? s : "{}");
    }
    json_decref(o);
    cordon_client_free(c);
    return ret;
}

int cdn_cli_inspect(int argc, char *const *argv)
{
    return show_json(argc, argv, "inspect", "");
}

/* cordon stats ID: what it uses now (GET …/usage). */
int cdn_cli_stats(int argc, char *const *argv)
{
    return show_json(argc, argv, "stats", "/usage");
}

/* cordon events ID [--follow]: NDJSON lines as the daemon sends them. */
int cdn_cli_events(int argc, char *const *argv)
{
    bool follow = argc == 2 && strcmp(argv[1], "--follow") == 0;
    if (argc < 1 || argc > 2 || (argc == 2 && !follow)) {
        fprintf(stderr, "usage: cordon events ID [--follow]\n");
        return 125;
    }
    char path[256];
    (void) snprintf(path, sizeof path, "/v1/sandboxes/%.64s/events%s", argv[0], follow ? "?follow=true" : "");
    cordon_client *c = cdn_cli_connect();
    char *body = NULL;
    size_t len = 0;
    int r = c ? cordon_request(c, "GET", path, NULL, 0, NULL, NULL, &body, &len) : -ENOMEM;
    int ret = r < 0 ? (c ? cdn_cli_fail(c, r, "events") : 125) : 0;
    if (ret == 0)
        (void) fwrite(body, 1, len, stdout);
    free(body);
    cordon_client_free(c);
    return ret;
}

static void print_steps(json_t *steps, bool export)
{
    size_t i;
    json_t *s;
    json_array_foreach(steps, i, s)
    {
        if (export) {
            _cleanup_free_ char *line = json_dumps(s, JSON_COMPACT);
            if (line)
                printf("%s\n", line);
            continue;
        }
        json_t *res = json_object_get(s, "result"), *req = json_object_get(s, "request");
        bool write = json_object_get(req, "path") != NULL; /* a file write's: its path, not a command */
        _cleanup_free_ char *cmd = write ? strdup(json_string_value(json_object_get(req, "path")) ?: "")
                                         : json_dumps(json_object_get(req, "argv"), JSON_COMPACT);
        _cleanup_free_ char *viol = json_object_size(json_object_get(s, "violations"))
                                        ? json_dumps(json_object_get(s, "violations"), JSON_COMPACT)
                                        : NULL;
        printf("%4lld  %-5s exit %-3lld %8.1f ms  %s%s%s\n",
               (long long) json_integer_value(json_object_get(s, "step")),
               json_string_value(json_object_get(s, "kind")) ?: "?",
               (long long) json_integer_value(json_object_get(res, "exit_code")),
               json_number_value(json_object_get(s, "wall_ms")), cmd ? cmd : "", viol ? "  violations " : "",
               viol ? viol : "");
    }
}

/* cordon trajectory show|export ID: its steps (GET /v1/trajectories/{id}), a line each for people,
 * or as JSONL (a step's whole record a line) for a training pipeline. */
int cdn_cli_trajectory(int argc, char *const *argv)
{
    bool show = argc == 2 && strcmp(argv[0], "show") == 0,
         export = argc == 2 && strcmp(argv[0], "export") == 0;
    if ((!show && !export) || !cdn_trajectory_id_valid(argv[1])) {
        fprintf(stderr, "usage: cordon trajectory show|export ID\n"
                        "  show: a line a step (step, kind, exit code, time, command, violations)\n"
                        "  export: every step's record as JSONL (docs/trajectories.md)\n");
        return 125;
    }
    cordon_client *c = cdn_cli_connect();
    json_t *o = NULL;
    int ret = c ? 0 : 125;
    /* Page after page (?from=K): cordond answers at most a thousand steps at a time. */
    for (uint64_t from = 0; ret == 0;) {
        char path[300];
        (void) snprintf(path, sizeof path, "/v1/trajectories/%s?from=%llu", argv[1],
                        (unsigned long long) from);
        _cleanup_free_ char *body = NULL;
        size_t len = 0;
        int r = cordon_request(c, "GET", path, NULL, 0, NULL, NULL, &body, &len);
        if (r < 0) {
            ret = cdn_cli_fail(c, r, "trajectory");
            break;
        }
        json_decref(o);
        o = json_loadb(body, len, 0, NULL);
        json_t *steps = json_object_get(o, "steps");
        if (!json_is_array(steps)) {
            fprintf(stderr, "cordon trajectory: cordond's answer is not a trajectory\n");
            ret = 125;
            break;
        }
        print_steps(steps, export);
        if (!json_is_true(json_object_get(o, "more")) || !json_array_size(steps))
            break;
        from += json_array_size(steps);
    }
    if (show && ret == 0)
        printf("next step %lld%s%s\n", (long long) json_integer_value(json_object_get(o, "next_step")),
               json_string_value(json_object_get(o, "sandbox")) ? ", sandbox " : "",
               json_string_value(json_object_get(o, "sandbox")) ?: "");
    json_decref(o);
    cordon_client_free(c);
    return ret;
}

/* cordon checkpoint ID | checkpoint ls [ID] | checkpoint rm CK…: take one (its id printed), list them
 * (a line each: id, sandbox, trajectory step, time), delete them. */
int cdn_cli_checkpoint(int argc, char *const *argv)
{
    static const char usage[] =
        "usage: cordon checkpoint ID           take a checkpoint of its files (prints its id)\n"
        "       cordon checkpoint ls [ID]      the checkpoints (of sandbox ID)\n"
        "       cordon checkpoint rm CK…       delete checkpoints\n";
    bool ls = argc >= 1 && argc <= 2 && strcmp(argv[0], "ls") == 0,
         rm = argc >= 2 && strcmp(argv[0], "rm") == 0;
    if (!ls && !rm && (argc != 1 || argv[0][0] == '-')) {
        fputs(usage, stderr);
        return 125;
    }
    cordon_client *c = cdn_cli_connect();
    if (!c)
        return 125;
    int ret = 0;
    if (ls) {
        char path[128];
        (void) snprintf(path, sizeof path, "/v1/checkpoints%s%.64s", argc == 2 ? "?sandbox=" : "",
                        argc == 2 ? argv[1] : "");
        char *body = NULL;
        size_t len = 0;
        int r = cordon_request(c, "GET", path, NULL, 0, NULL, NULL, &body, &len);
        ret = r < 0 ? cdn_cli_fail(c, r, "checkpoint ls") : 0;
        _cleanup_json_ json_t *o = ret == 0 ? json_loadb(body, len, 0, NULL) : NULL;
        size_t i;
        json_t *ck;
        json_array_foreach(json_object_get(o, "checkpoints"), i, ck)
        {
            time_t t = (time_t) json_number_value(json_object_get(ck, "created"));
            char when[32];
            (void) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
            const char *traj = json_string_value(json_object_get(ck, "trajectory"));
            printf("%s  %s  %s", json_string_value(json_object_get(ck, "id")) ?: "?",
                   json_string_value(json_object_get(ck, "sandbox")) ?: "?", when);
            if (traj)
                printf("  %s@%lld", traj, (long long) json_integer_value(json_object_get(ck, "step")));
            printf("\n");
        }
        free(body);
    } else if (rm) {
        for (int i = 1; i < argc; i++) {
            char path[128];
            if (!cdn_checkpoint_id_valid(argv[i])) {
                fprintf(stderr, "cordon checkpoint rm: '%s' is not a checkpoint's id\n", argv[i]);
                ret = 125;
                continue;
            }
            (void) snprintf(path, sizeof path, "/v1/checkpoints/%s", argv[i]);
            int r = cordon_request(c, "DELETE", path, NULL, 0, NULL, NULL, NULL, NULL);
            if (r < 0)
                ret = cdn_cli_fail(c, r, "checkpoint rm");
        }
    } else {
        char ck[32];
        int r = cordon_checkpoint(c, argv[0], ck, sizeof ck);
        ret = r < 0 ? cdn_cli_fail(c, r, "checkpoint") : (printf("%s\n", ck), 0);
    }
    cordon_client_free(c);
    return ret;
}

/* cordon rollback ID CK: the sandbox's files become the checkpoint's, its processes end. */
int cdn_cli_rollback(int argc, char *const *argv)
{
    if (argc != 2 || argv[0][0] == '-' || !cdn_checkpoint_id_valid(argv[1])) {
        fprintf(stderr, "usage: cordon rollback ID CK\n");
        return 125;
    }
    cordon_client *c = cdn_cli_connect();
    int r = c ? cordon_rollback(c, argv[0], argv[1]) : -ENOMEM;
    int ret = r < 0 ? (c ? cdn_cli_fail(c, r, "rollback") : 125) : 0;
    cordon_client_free(c);
    return ret;
}

/* cordon fork ID [-n N] [--checkpoint CK]: N new sandboxes from a checkpoint of ID (one taken now
 * without --checkpoint); their ids, a line each. */
int cdn_cli_fork(int argc, char *const *argv)
{
    static const char usage[] = "usage: cordon fork ID [-n N] [--checkpoint CK]\n";
    const char *ck = NULL;
    unsigned n = 1;
    if (argc < 1 || argv[0][0] == '-') {
        fputs(usage, stderr);
        return 125;
    }
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (strcmp(argv[i], "-n") == 0 && v &&
            (n = (unsigned) strtoul(v, &end, 10), !*end && n >= 1 && n <= 64)) {
            i++;
        } else if (strcmp(argv[i], "--checkpoint") == 0 && v) {
            ck = v;
            i++;
        } else {
            fprintf(stderr, "cordon fork: '%s': %s", argv[i], usage);
            return 125;
        }
    }
    cordon_client *c = cdn_cli_connect();
    char(*ids)[16] = calloc(n, sizeof *ids);
    int ret = 125;
    if (c && ids) {
        int r = cordon_fork(c, argv[0], ck, n, ids);
        ret = r < 0 ? cdn_cli_fail(c, r, "fork") : 0;
        for (unsigned i = 0; ret == 0 && i < n; i++)
            printf("%s\n", ids[i]);
    }
    free(ids);
    cordon_client_free(c);
    return ret;
}
