/* cordon-runtime: runc's command line, as conmon (podman) and containerd's runc v2 shim call it
 * (docs/runtime.md). Runs as root on the host, called by the engine, which is trusted; the bundle's
 * process is not (it runs as a cordon container).
 *
 * Global options come before the command: --root (default /run/cordon-runtime, never runc's),
 * --log FILE and --log-format text|json (errors are logged there and also printed on stderr, as runc
 * does: containerd reads the last error of the log, conmon the stderr), --systemd-cgroup, --debug,
 * --criu PATH (taken and unused: no checkpoints through this runtime), --rootless false|auto.
 * Both --opt=value and --opt value are taken; an option this runtime does not know is an error.
 *
 * create, start, state, kill, delete, exec, pause, resume, ps and update act on a bundle run as a
 * cordon container (container.c); create refuses what cordon does not grant, naming the field. An
 * unknown id gets runc's "does not exist" (the engines match it). A terminal (process.terminal,
 * exec --tty) goes to the engine's --console-socket (console.c). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/json-util.h"
#include "runtime/bundle.h"
#include "runtime/container.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

#define DEFAULT_ROOT "/run/cordon-runtime"

static struct {
    const char *root;
    const char *log;
    bool json;
    bool systemd_cgroup;
    bool debug;
} g = {.root = DEFAULT_ROOT};

/* A line of the log (--log), in its format; nothing without --log. */
static void log_line(const char *level, const char *msg)
{
    if (!g.log)
        return;
    _cleanup_close_ int fd = open(g.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    char when[64];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    (void) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    _cleanup_free_ char *line = NULL;
    if (g.json) {
        _cleanup_json_ json_t *o = json_pack("{s:s, s:s, s:s}", "level", level, "msg", msg, "time", when);
        line = o ? json_dumps(o, JSON_COMPACT) : NULL;
    } else {
        _cleanup_json_ json_t *s = json_string(msg);
        _cleanup_free_ char *q = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
        if (q && asprintf(&line, "time=\"%s\" level=%s msg=%s", when, level, q) < 0)
            line = NULL;
    }
    if (line) {
        size_t n = strlen(line);
        line[n] = '\n'; /* written with its newline (the terminator is overwritten, not read) */
        (void) !write(fd, line, n + 1);
    }
}

/* The command failed: logged (level error) and printed on stderr; the exit status is 1. */
static int fail(const char *fmt, ...) _printf_(1, 2);
static int fail(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    (void) vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_line("error", msg);
    fprintf(stderr, "cordon-runtime: %s\n", msg);
    return 1;
}

/* ---- options: one table per command ---- */

struct opt {
    const char *name; /* long, without "--" */
    char short_name;  /* 0: none */
    bool takes_value;
    const char **value;    /* where a value goes (takes_value) */
    bool *flag;            /* where a flag goes */
    struct cdn_strv *list; /* a value that may be given again (--env): each one goes here */
};

/* Parse argv[*i…] while they are options of opts (up to a first operand or "--"). */
static int parse_opts(int argc, char **argv, int *i, const struct opt *opts, const char *cmd)
{
    for (; *i < argc; (*i)++) {
        const char *a = argv[*i];
        if (strcmp(a, "--") == 0) {
            (*i)++;
            return 0;
        }
        if (a[0] != '-' || !a[1])
            return 0;
        const char *name = a + (a[1] == '-' ? 2 : 1), *eq = strchr(name, '=');
        size_t len = eq ? (size_t) (eq - name) : strlen(name);
        const struct opt *o = opts;
        for (; o->name; o++)
            if ((strlen(o->name) == len && strncmp(o->name, name, len) == 0) ||
                (a[1] != '-' && len == 1 && o->short_name == name[0]))
                break;
        if (!o->name)
            return fail("%s: unknown option %s", cmd, a);
        if (!o->takes_value) {
            if (eq && strcmp(eq + 1, "true") != 0 && strcmp(eq + 1, "false") != 0)
                return fail("%s: option --%s takes no value", cmd, o->name);
            *o->flag = !eq || strcmp(eq + 1, "true") == 0;
            continue;
        }
        const char *v = eq ? eq + 1 : *i + 1 < argc ? argv[++*i] : NULL;
        if (!v)
            return fail("%s: option --%s needs a value", cmd, o->name);
        if (o->list && cdn_strv_push(o->list, v) < 0)
            return fail("%s: option --%s: too many", cmd, o->name);
        if (o->value)
            *o->value = v;
    }
    return 0;
}

/* runc's rule for ids: no '/', not "." or "..", not empty. */
static bool id_ok(const char *id)
{
    return id && *id && !strchr(id, '/') && strcmp(id, ".") != 0 && strcmp(id, "..") != 0 &&
           strlen(id) < 1024;
}

/* The operand ID (and the count of operands wanted): an error naming what is missing. */
static int one_id(int argc, char **argv, int i, int want, const char *cmd, const char **ret)
{
    if (argc - i < 1)
        return fail("%s: requires a container id", cmd);
    if (argc - i > want)
        return fail("%s: too many arguments (%s)", cmd, argv[i + want]);
    if (!id_ok(argv[i]))
        return fail("%s: invalid container id '%s'", cmd, argv[i]);
    *ret = argv[i];
    return 0;
}

/* A command on a container failed: err's message (runc's words where the engines match them). */
static int failed(const char *cmd, const struct cdn_error *err)
{
    if (strstr(err->msg, "does not exist") || strstr(err->msg, "container not running"))
        return fail("%s", err->msg);
    return fail("%s: %s", cmd, err->msg);
}

/* ---- commands ---- */

static int cmd_version(void)
{
    printf("cordon-runtime version %s\nspec: 1.1.0\n", CORDON_VERSION);
    return 0;
}

static int cmd_features(void)
{
    /* The runtime spec's features document: what this runtime takes, not what the bundle gets (it
     * is confined by cordon all the same). */
    static const char doc[] =
        "{\"ociVersionMin\": \"1.0.0\", \"ociVersionMax\": \"1.1.0\","
        " \"hooks\": [\"prestart\", \"createRuntime\", \"createContainer\", \"startContainer\", "
        "\"poststart\","
        "   \"poststop\"],"
        " \"mountOptions\": [\"ro\", \"rw\", \"bind\", \"rbind\", \"nosuid\", \"nodev\", \"noexec\", "
        "\"private\","
        "   \"rprivate\", \"slave\", \"rslave\", \"mode\"],"
        " \"linux\": {\"namespaces\": [\"pid\", \"network\", \"ipc\", \"uts\", \"mount\", \"cgroup\"],"
        "   \"cgroup\": {\"v1\": true, \"v2\": true, \"systemd\": false},"
        "   \"seccomp\": {\"enabled\": true}},"
        " \"annotations\": {\"io.cordon.runtime\": \"cordon\"}}";
    _cleanup_json_ json_t *o = json_loads(doc, 0, NULL);
    _cleanup_free_ char *s = o ? json_dumps(o, JSON_INDENT(4)) : NULL;
    if (!s)
        return fail("features: out of memory");
    puts(s);
    return 0;
}

/* A config.json to start from (runc spec): a shell in ./rootfs, cordon's namespaces. */
static int cmd_spec(int argc, char **argv, int i)
{
    const char *bundle = ".";
    bool rootless = false;
    const struct opt opts[] = {
        {"bundle", 'b', true, &bundle, NULL}, {"rootless", 0, false, NULL, &rootless}, {0}};
    if (parse_opts(argc, argv, &i, opts, "spec") != 0)
        return 1;
    if (rootless)
        return fail("spec: --rootless: cordon-runtime runs as root (its containers have their own user ids)");
    static const char config[] =
        "{\n"
        "    \"ociVersion\": \"1.1.0\",\n"
        "    \"process\": {\"terminal\": false, \"user\": {\"uid\": 0, \"gid\": 0}, \"args\": [\"sh\"],\n"
        "        \"env\": [\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"], \"cwd\": "
        "\"/\",\n"
        "        \"noNewPrivileges\": true},\n"
        "    \"root\": {\"path\": \"rootfs\", \"readonly\": false},\n"
        "    \"hostname\": \"cordon\",\n"
        "    \"mounts\": [\n"
        "        {\"destination\": \"/proc\", \"type\": \"proc\", \"source\": \"proc\"},\n"
        "        {\"destination\": \"/dev\", \"type\": \"tmpfs\", \"source\": \"tmpfs\", \"options\": "
        "[\"nosuid\"]},\n"
        "        {\"destination\": \"/dev/pts\", \"type\": \"devpts\", \"source\": \"devpts\"}\n"
        "    ],\n"
        "    \"linux\": {\"namespaces\": [{\"type\": \"pid\"}, {\"type\": \"network\"}, {\"type\": "
        "\"ipc\"},\n"
        "        {\"type\": \"uts\"}, {\"type\": \"mount\"}, {\"type\": \"cgroup\"}]}\n"
        "}\n";
    char path[4096];
    (void) snprintf(path, sizeof path, "%s/config.json", bundle);
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return fail("spec: %s: %s", path, errno == EEXIST ? "exists already" : strerror(errno));
    if (write(fd, config, sizeof config - 1) != (ssize_t) (sizeof config - 1))
        return fail("spec: write %s: %m", path);
    return 0;
}

/* The bundle's config.json, read and checked: what cordon does not grant is refused naming its
 * field; what it reduces is logged (level warning), never printed (a create's stderr is the
 * container's log under conmon). */
static int read_bundle(const char *dir, struct cdn_bundle *b, char abs[4096])
{
    char path[4200];
    if (!realpath(dir, abs))
        return fail("create: bundle %s: %m", dir);
    (void) snprintf(path, sizeof path, "%s/config.json", abs);
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return fail("create: %s: %m", path);
    if (st.st_size > (4 << 20))
        return fail("create: %s: larger than 4 MiB", path);
    _cleanup_free_ char *json = malloc((size_t) st.st_size + 1);
    ssize_t n = json ? read(fd, json, (size_t) st.st_size) : -1;
    if (n != st.st_size)
        return fail("create: read %s: %s", path, n < 0 ? strerror(errno) : "short read");
    struct cdn_error err = {0};
    if (cdn_bundle_parse(json, (size_t) n, abs, b, &err) < 0)
        return fail("create: config.json: %s", err.msg);
    for (size_t i = 0; i < b->notes.n; i++)
        log_line("warning", b->notes.v[i]);
    return 0;
}

static int cmd_create(int argc, char **argv, int i)
{
    const char *bundle = ".", *pid_file = NULL, *console = NULL, *preserve = NULL;
    bool no_pivot = false, no_keyring = false;
    const struct opt opts[] = {{"bundle", 'b', true, &bundle, NULL},
                               {"pid-file", 0, true, &pid_file, NULL},
                               {"console-socket", 0, true, &console, NULL},
                               {"preserve-fds", 0, true, &preserve, NULL},
                               {"no-pivot", 0, false, NULL, &no_pivot},
                               {"no-new-keyring", 0, false, NULL, &no_keyring},
                               {0}};
    const char *id;
    if (parse_opts(argc, argv, &i, opts, "create") != 0 || one_id(argc, argv, i, 1, "create", &id) != 0)
        return 1;
    if (preserve && strcmp(preserve, "0") != 0)
        return fail("create: --preserve-fds: a cordon container is given no descriptors beyond its stdio");
    if (g.systemd_cgroup)
        return fail(
            "create: --systemd-cgroup: cordon-runtime manages cgroupfs paths (podman: --cgroup-manager "
            "cgroupfs)");
    if (no_pivot)
        log_line("warning", "create: --no-pivot: taken, and the root is pivoted all the same");
    if (cdn_rt_exists(g.root, id))
        return fail("container with id exists: %s", id);
    struct cdn_bundle b;
    char abs[4096];
    int r = read_bundle(bundle, &b, abs);
    if (r == 0 && b.terminal != (console != NULL))
        r = fail(b.terminal ? "create: process.terminal: a terminal needs --console-socket"
                            : "create: --console-socket: given for a process without a terminal");
    struct cdn_error err = {0};
    if (r == 0 && cdn_rt_create(g.root, id, &b,
                                &(struct cdn_rt_create_opts){
                                    .bundle_dir = abs, .pid_file = pid_file, .console_socket = console},
                                &err) < 0) {
        /* The field, unless the message starts with it already. */
        bool named = !err.field[0] || strncmp(err.msg, err.field, strlen(err.field)) == 0;
        r = fail("create: %s%s%s", named ? "" : err.field, named ? "" : ": ", err.msg);
    }
    cdn_bundle_free(&b);
    return r;
}

/* A file's text (path "-": stdin), at most 1 MiB; NULL with errno. */
static char *read_text(const char *path)
{
    _cleanup_close_ int fd = strcmp(path, "-") == 0 ? dup(0) : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 1 << 20, n = 0;
    _cleanup_free_ char *buf = malloc(cap + 1);
    for (ssize_t k; buf && (k = read(fd, buf + n, cap - n)) != 0;) {
        if (k < 0 && errno != EINTR)
            return NULL;
        n += k > 0 ? (size_t) k : 0;
        if (n == cap) {
            errno = EFBIG;
            return NULL;
        }
    }
    if (buf)
        buf[n] = 0;
    return TAKE_PTR(buf);
}

/* runc's signal names: KILL, SIGKILL or 9. */
static int parse_signal(const char *s)
{
    static const struct {
        const char *name;
        int sig;
    } names[] = {{"HUP", SIGHUP},   {"INT", SIGINT},     {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
                 {"USR1", SIGUSR1}, {"USR2", SIGUSR2},   {"TERM", SIGTERM}, {"CONT", SIGCONT},
                 {"STOP", SIGSTOP}, {"WINCH", SIGWINCH}, {"ALRM", SIGALRM}, {"PIPE", SIGPIPE},
                 {"ABRT", SIGABRT}};
    char *end;
    long n = strtol(s, &end, 10);
    if (*s && !*end)
        return n > 0 && n < NSIG ? (int) n : -1;
    if (strncmp(s, "SIG", 3) == 0)
        s += 3;
    for (size_t i = 0; i < ELEMENTSOF(names); i++)
        if (strcmp(s, names[i].name) == 0)
            return names[i].sig;
    return -1;
}

static int cmd_kill(int argc, char **argv, int i)
{
    bool all = false;
    const struct opt opts[] = {{"all", 'a', false, NULL, &all}, {0}};
    const char *id;
    if (parse_opts(argc, argv, &i, opts, "kill") != 0 || one_id(argc, argv, i, 2, "kill", &id) != 0)
        return 1;
    int sig = i + 1 < argc ? parse_signal(argv[i + 1]) : SIGTERM;
    if (sig < 0)
        return fail("kill: unknown signal '%s'", argv[i + 1]);
    struct cdn_error err = {0};
    return cdn_rt_kill(g.root, id, sig, all, &err) < 0 ? failed("kill", &err) : 0;
}

static int cmd_simple(const char *cmd, int argc, char **argv, int i)
{
    bool force = false;
    const struct opt delete_opts[] = {{"force", 'f', false, NULL, &force}, {0}}, none[] = {{0}};
    const char *id;
    if (parse_opts(argc, argv, &i, strcmp(cmd, "delete") == 0 ? delete_opts : none, cmd) != 0 ||
        one_id(argc, argv, i, 1, cmd, &id) != 0)
        return 1;
    struct cdn_error err = {0};
    if (strcmp(cmd, "start") == 0)
        return cdn_rt_start(g.root, id, &err) < 0 ? failed("start", &err) : 0;
    if (strcmp(cmd, "delete") == 0) {
        if (force && !cdn_rt_exists(g.root, id))
            return 0; /* as runc's: nothing to remove is no error with --force */
        return cdn_rt_delete(g.root, id, force, &err) < 0 ? failed("delete", &err) : 0;
    }
    _cleanup_free_ char *json = NULL;
    if (cdn_rt_state(g.root, id, &json, &err) < 0)
        return failed("state", &err);
    puts(json);
    return 0;
}

/* pause, resume, ps, update. */
static int cmd_cgroup(const char *cmd, int argc, char **argv, int i)
{
    const char *format = "table", *resources = NULL;
    const struct opt ps_opts[] = {{"format", 'f', true, &format, NULL, NULL}, {0}};
    const struct opt update_opts[] = {{"resources", 'r', true, &resources, NULL, NULL}, {0}};
    const struct opt none[] = {{0}};
    const struct opt *opts = strcmp(cmd, "ps") == 0       ? ps_opts
                             : strcmp(cmd, "update") == 0 ? update_opts
                                                          : none;
    const char *id;
    if (parse_opts(argc, argv, &i, opts, cmd) != 0 || one_id(argc, argv, i, 1, cmd, &id) != 0)
        return 1;
    struct cdn_error err = {0};
    if (strcmp(cmd, "pause") == 0 || strcmp(cmd, "resume") == 0)
        return cdn_rt_pause(g.root, id, cmd[0] == 'p', &err) < 0 ? failed(cmd, &err) : 0;
    if (strcmp(cmd, "ps") == 0) {
        if (strcmp(format, "json") != 0 && strcmp(format, "table") != 0)
            return fail("ps: --format: '%s' is not table or json", format);
        _cleanup_free_ char *json = NULL;
        if (cdn_rt_ps(g.root, id, &json, &err) < 0)
            return failed(cmd, &err);
        if (format[0] == 'j') {
            puts(json);
            return 0;
        }
        _cleanup_json_ json_t *a = json_loads(json, 0, NULL);
        size_t k;
        json_t *v;
        puts("PID");
        json_array_foreach(a, k, v) printf("%lld\n", (long long) json_integer_value(v));
        return 0;
    }
    if (!resources)
        return fail("update: --resources FILE (or - for stdin) is needed: the other flags are not taken");
    _cleanup_free_ char *text = read_text(resources);
    if (!text)
        return fail("update: --resources %s: %m", resources);
    return cdn_rt_update(g.root, id, text, &err) < 0 ? failed(cmd, &err) : 0;
}

static const char *const cgroup_cmds[] = {"pause", "resume", "ps", "update", NULL};

/* exec as conmon and containerd's shim call it: --process FILE --detach --pid-file FILE ID; or the
 * command after ID, with --cwd, --env (repeated), --user. */
static int cmd_exec(int argc, char **argv, int i)
{
    const char *process = NULL, *pid_file = NULL, *console = NULL, *cwd = NULL, *user = NULL,
               *preserve = NULL;
    const char *ignored = NULL;
    bool detach = false, tty = false, nnp = false;
    _cleanup_(cdn_strv_free) struct cdn_strv env = {0}, caps = {0};
    const struct opt opts[] = {{"process", 'p', true, &process, NULL, NULL},
                               {"pid-file", 0, true, &pid_file, NULL, NULL},
                               {"console-socket", 0, true, &console, NULL, NULL},
                               {"cwd", 0, true, &cwd, NULL, NULL},
                               {"env", 'e', true, NULL, NULL, &env},
                               {"user", 'u', true, &user, NULL, NULL},
                               {"cap", 'c', true, NULL, NULL, &caps},
                               {"preserve-fds", 0, true, &preserve, NULL, NULL},
                               {"process-label", 0, true, &ignored, NULL, NULL},
                               {"apparmor", 0, true, &ignored, NULL, NULL},
                               {"no-new-privs", 0, false, NULL, &nnp, NULL},
                               {"detach", 'd', false, NULL, &detach, NULL},
                               {"tty", 't', false, NULL, &tty, NULL},
                               {0}};
    const char *id;
    if (parse_opts(argc, argv, &i, opts, "exec") != 0 || one_id(argc, argv, i, argc, "exec", &id) != 0)
        return 1;
    if (tty != (console != NULL))
        return fail(tty ? "exec: --tty needs --console-socket" : "exec: --console-socket without --tty");
    if (caps.n)
        return fail("exec: --cap: a cordon container's processes hold no capability");
    if (preserve && strcmp(preserve, "0") != 0)
        return fail("exec: --preserve-fds: a cordon container is given no descriptors beyond its stdio");
    if (!process && argc - i < 2)
        return fail("exec: a command, or --process, is needed");
    struct cdn_error err = {0};
    int status = 0;
    struct cdn_rt_exec_opts o = {.process_path = process,
                                 .args = process ? NULL : argv + i + 1,
                                 .cwd = cwd,
                                 .env = &env,
                                 .user = user,
                                 .detach = detach,
                                 .tty = tty,
                                 .console_socket = console,
                                 .pid_file = pid_file};
    if (cdn_rt_exec(g.root, id, &o, &status, &err) < 0)
        return failed("exec", &err);
    return detach ? 0 : status;
}

static void usage(FILE *f)
{
    fputs("usage: cordon-runtime [--root DIR] [--log FILE] [--log-format text|json] COMMAND [OPTIONS] ID\n"
          "commands: create start state kill delete exec ps pause resume update features spec\n"
          "          (runc's command line: docs/runtime.md)\n",
          f);
}

static void warn_line(const char *msg)
{
    fprintf(stderr, "cordon-runtime: warning: %s\n", msg);
    log_line("warning", msg);
}

int main(int argc, char **argv)
{
    cdn_rt_warn = warn_line;
    const char *format = "text", *criu = NULL, *rootless = NULL;
    bool version = false, help = false;
    const struct opt globals[] = {
        {"root", 0, true, &g.root, NULL},
        {"log", 0, true, &g.log, NULL},
        {"log-format", 0, true, &format, NULL},
        {"systemd-cgroup", 0, false, NULL, &g.systemd_cgroup},
        {"debug", 0, false, NULL, &g.debug},
        {"version", 'v', false, NULL, &version},
        {"help", 'h', false, NULL, &help},
        {"criu", 0, true, &criu, NULL}, /* the shim's, when set: no checkpoints through this runtime */
        {"rootless", 0, true, &rootless, NULL},
        {0}};
    int i = 1;
    if (parse_opts(argc, argv, &i, globals, "cordon-runtime") != 0)
        return 1;
    if (strcmp(format, "text") != 0 && strcmp(format, "json") != 0)
        return fail("--log-format: '%s' is not text or json", format);
    g.json = strcmp(format, "json") == 0;
    if (rootless && strcmp(rootless, "false") != 0 && strcmp(rootless, "auto") != 0)
        return fail("--rootless: '%s': cordon-runtime runs as root (its containers have their own user ids)",
                    rootless);
    if (!g.root[0] || g.root[0] != '/')
        return fail("--root: '%s' must be an absolute path", g.root);
    if (g.log) /* containerd reads the last error of this file: it must exist even when there is none */
        (void) close(open(g.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (version)
        return cmd_version();
    if (help || i >= argc) {
        usage(help ? stdout : stderr);
        return help ? 0 : 1;
    }
    const char *cmd = argv[i++];
    if (strcmp(cmd, "version") == 0)
        return cmd_version();
    if (strcmp(cmd, "features") == 0)
        return cmd_features();
    if (strcmp(cmd, "spec") == 0)
        return cmd_spec(argc, argv, i);
    if (strcmp(cmd, "create") == 0)
        return cmd_create(argc, argv, i);
    if (strcmp(cmd, "kill") == 0)
        return cmd_kill(argc, argv, i);
    if (strcmp(cmd, "exec") == 0)
        return cmd_exec(argc, argv, i);
    if (strcmp(cmd, "start") == 0 || strcmp(cmd, "state") == 0 || strcmp(cmd, "delete") == 0)
        return cmd_simple(cmd, argc, argv, i);
    for (size_t k = 0; cgroup_cmds[k]; k++)
        if (strcmp(cmd, cgroup_cmds[k]) == 0)
            return cmd_cgroup(cmd, argc, argv, i);
    if (strcmp(cmd, "run") == 0 || strcmp(cmd, "checkpoint") == 0 || strcmp(cmd, "restore") == 0 ||
        strcmp(cmd, "events") == 0 || strcmp(cmd, "list") == 0)
        return fail("%s: not a command of cordon-runtime (the engines call create and start)", cmd);
    return fail("unknown command '%s'", cmd);
}
