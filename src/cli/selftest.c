/* `cordon selftest`: the red-team probes of tests/security, shipped (docs/security.md). Runs on the host as
 * root, in the initial namespaces, like `cordon run`.
 *
 * For each tier asked for (every tier this host can run, by default) it lays host-side bait — a 0600 canary
 * file under a fresh /tmp directory, a TCP listener on 127.0.0.1 and an abstract unix socket that never
 * accept, this process's pid — then runs cordon-probe inside `cordon run` with the operator's flags or spec
 * and reads its verdicts (the PROBE/SUMMARY contract of tests/security/README.md). Everything the probe
 * prints is the sandbox's output, so it is parsed as hostile: bounded, line by line, checked against the
 * contract. A probe that escaped by the tier's or the spec's design (a process-tier sandbox has no user
 * namespace; a sandbox with a network has an interface) is reported as expected and says why; any other
 * escape makes the exit status 1. --baseline runs the probe with no sandbox (private pid and mount namespaces
 * only, so its pid-1 targets are itself and its scratch mounts stay private): the control, which must report
 * escapes. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <linux/sched.h> /* struct clone_args */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include "cli.h"
#include "core/paths.h"
#include "core/spec.h"
#include "run-flags.h"
#include "shared/fd-util.h"
#include "shared/macro.h"
#include "tiers/tier.h"

#define OUT_MAX    (8u << 20) /* bytes of the probe's stdout and stderr kept */
#define MIN_PROBES 30
#define MAX_TIERS  8

/* The bounds the suite gives a sandbox unless the operator's flags or spec say otherwise: each resource
 * probe tries well above them (tests/security/README.md), so it is contained only if the limit holds.
 * The other limits keep the spec's defaults. */
static void suite_limits(struct cdn_limits *l)
{
    l->memory_mb = 256;
    l->pids = 128;
    l->disk_mb = 64;
    l->timeout_ms = 300000;
    l->nofile = 1024;
}

struct bait {
    char dir[64], canary[96], text[64], port[8], abstract[48], pid[16];
    int tcp, unix_fd;
};

struct probe_line {
    char category[32], name[64], verdict[16], detail[160];
    const char *expected; /* why an escape is by design, or NULL */
};

struct tier_result {
    const char *tier;
    int status; /* the run's exit status */
    struct probe_line *lines;
    size_t n;
    bool summary, partial;
    unsigned contained, escaped, expected;
    char error[256];
};

static void bait_free(struct bait *b)
{
    if (b->tcp >= 0)
        (void) close(b->tcp);
    if (b->unix_fd >= 0)
        (void) close(b->unix_fd);
    if (b->dir[0]) {
        char p[160];
        (void) unlink(b->canary);
        for (int t = 0; t < MAX_TIERS; t++) {
            (void) snprintf(p, sizeof p, "%s/spec-%d.json", b->dir, t);
            (void) unlink(p);
        }
        (void) snprintf(p, sizeof p, "%s/disk", b->dir);
        (void) rmdir(p);
        (void) rmdir(b->dir);
    }
}

static void hex(char *out, size_t bytes)
{
    unsigned char r[32];
    if (bytes > sizeof r || getrandom(r, bytes, 0) != (ssize_t) bytes)
        memset(r, 0x5a, sizeof r); /* never: getrandom of 32 bytes does not fail once booted */
    for (size_t i = 0; i < bytes; i++)
        (void) sprintf(out + 2 * i, "%02x", r[i]);
}

/* Host-side bait. Listeners never accept: a connection that completes in the backlog is already an escape. */
static int bait_make(struct bait *b)
{
    *b = (struct bait){.tcp = -1, .unix_fd = -1};
    (void) snprintf(b->dir, sizeof b->dir, "/tmp/cordon-selftest-XXXXXX");
    if (!mkdtemp(b->dir)) {
        b->dir[0] = 0;
        return -errno;
    }
    char tag[33];
    hex(tag, 16);
    (void) snprintf(b->text, sizeof b->text, "cordon-canary-%s", tag);
    (void) snprintf(b->canary, sizeof b->canary, "%s/canary", b->dir);
    _cleanup_close_ int fd = open(b->canary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || dprintf(fd, "%s\n", b->text) < 0)
        return -errno;
    char disk[96];
    (void) snprintf(disk, sizeof disk, "%s/disk", b->dir);
    if (mkdir(disk, 0700) < 0)
        return -errno;
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof in;
    b->tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (b->tcp < 0 || bind(b->tcp, (struct sockaddr *) &in, sizeof in) < 0 || listen(b->tcp, 64) < 0 ||
        getsockname(b->tcp, (struct sockaddr *) &in, &len) < 0)
        return -errno;
    (void) snprintf(b->port, sizeof b->port, "%u", ntohs(in.sin_port));
    hex(tag, 8);
    (void) snprintf(b->abstract, sizeof b->abstract, "cordon-selftest-%s", tag);
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    memcpy(un.sun_path + 1, b->abstract, strlen(b->abstract));
    b->unix_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (b->unix_fd < 0 ||
        bind(b->unix_fd, (struct sockaddr *) &un,
             (socklen_t) (offsetof(struct sockaddr_un, sun_path) + 1 + strlen(b->abstract))) < 0 ||
        listen(b->unix_fd, 64) < 0)
        return -errno;
    (void) snprintf(b->pid, sizeof b->pid, "%d", (int) getpid());
    return 0;
}

/* cordon-probe: $CORDON_PROBE, else installed beside cordon (libexec), else in a build tree. */
static int find_probe(char *out, size_t size)
{
    const char *env = getenv("CORDON_PROBE");
    if (env && *env) {
        (void) snprintf(out, size, "%s", env);
        return access(out, X_OK) == 0 ? 0 : -errno;
    }
    if (cdn_libexec_path("cordon-probe", out, (unsigned) size) == 0)
        return 0;
    return cdn_libexec_path("tests/security/cordon-probe", out, (unsigned) size);
}

/* ---- running the probe and reading its verdicts ---- */

/* Read both pipes to their end (bounded), then wait for pid. Returns its exit status (128+N on signal N). */
static int collect(pid_t pid, int outfd, int errfd, char *out, size_t *outlen, char *err, size_t *errlen)
{
    struct pollfd p[2] = {{.fd = outfd, .events = POLLIN}, {.fd = errfd, .events = POLLIN}};
    char *bufs[2] = {out, err};
    size_t *lens[2] = {outlen, errlen};
    int open_fds = 2;
    while (open_fds > 0) {
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !p[i].revents)
                continue;
            char scratch[16384];
            size_t room = OUT_MAX - *lens[i];
            ssize_t n = read(p[i].fd, room ? bufs[i] + *lens[i] : scratch, room ? room : sizeof scratch);
            if (n > 0 && room)
                *lens[i] += (size_t) n;
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
                (void) close(p[i].fd);
                p[i].fd = -1;
                open_fds--;
            }
        }
    }
    out[*outlen] = err[*errlen] = 0;
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -errno;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The child of a baseline run: pid 1 of a new pid namespace with a private mount namespace and its own
 * /proc, then the probe, as root with everything else of the host's. */
static _Noreturn void baseline_child(const char *probe, char *const *envp)
{
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
        dprintf(2, "cordon selftest: baseline: private /proc: %m\n");
        _exit(125);
    }
    char *const argv[] = {(char *) probe, NULL};
    execve(probe, argv, envp);
    dprintf(2, "cordon selftest: exec %s: %m\n", probe);
    _exit(125);
}

/* Spawn argv (or, for a baseline, the probe in new namespaces) with stdout and stderr to pipes. */
static pid_t spawn(char *const *argv, const char *baseline_probe, char *const *envp, int *outfd, int *errfd)
{
    int o[2], e[2];
    if (pipe2(o, O_CLOEXEC) < 0)
        return -errno;
    if (pipe2(e, O_CLOEXEC) < 0) {
        int r = -errno;
        (void) close(o[0]), (void) close(o[1]);
        return r;
    }
    struct clone_args ca = {.flags = baseline_probe ? CLONE_NEWPID | CLONE_NEWNS : 0, .exit_signal = SIGCHLD};
    pid_t pid = (pid_t) syscall(SYS_clone3, &ca, sizeof ca);
    if (pid == 0) {
        if (dup2(o[1], 1) < 0 || dup2(e[1], 2) < 0)
            _exit(125);
        if (baseline_probe)
            baseline_child(baseline_probe, envp);
        execve(argv[0], argv, envp);
        dprintf(2, "cordon selftest: exec %s: %m\n", argv[0]);
        _exit(125);
    }
    int r = pid < 0 ? -errno : pid;
    (void) close(o[1]), (void) close(e[1]);
    if (r < 0) {
        (void) close(o[0]), (void) close(e[0]);
        return r;
    }
    *outfd = o[0];
    *errfd = e[0];
    return r;
}

static int parse_line(const char *line, struct probe_line *p)
{
    /* PROBE <category> <name> contained|escaped <detail> */
    int n = -1;
    *p = (struct probe_line){0};
    if (sscanf(line, "PROBE %31s %63s %15s %n", p->category, p->name, p->verdict, &n) != 3 || n < 0)
        return -EBADMSG;
    if (strcmp(p->verdict, "contained") != 0 && strcmp(p->verdict, "escaped") != 0)
        return -EBADMSG;
    (void) snprintf(p->detail, sizeof p->detail, "%s", line + n);
    for (char *c = p->detail; *c; c++)
        if ((unsigned char) *c < 0x20 || *c == 0x7f)
            *c = '?';
    return 0;
}

/* Read the probe's stdout into r (the contract of tests/security/README.md). */
static int parse_output(char *out, struct tier_result *r)
{
    unsigned s_probes = 0, s_contained = 0, s_escaped = 0;
    for (char *save = NULL, *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "SUMMARY ", 8) == 0) {
            if (r->summary || sscanf(line, "SUMMARY probes=%u contained=%u escaped=%u", &s_probes,
                                     &s_contained, &s_escaped) != 3)
                return -EBADMSG;
            r->summary = true;
            continue;
        }
        if (strncmp(line, "PROBE ", 6) != 0)
            continue;
        struct probe_line *l = realloc(r->lines, (r->n + 1) * sizeof *l);
        if (!l)
            return -ENOMEM;
        r->lines = l;
        if (parse_line(line, &r->lines[r->n]) < 0)
            return -EBADMSG;
        for (size_t i = 0; i < r->n; i++)
            if (strcmp(r->lines[i].name, r->lines[r->n].name) == 0)
                return -EBADMSG;
        r->n++;
    }
    if (r->summary) {
        unsigned esc = 0;
        for (size_t i = 0; i < r->n; i++)
            esc += strcmp(r->lines[i].verdict, "escaped") == 0;
        if (s_probes != r->n || s_escaped != esc || s_contained != r->n - esc)
            return -EBADMSG;
    }
    return 0;
}

/* ---- what is an escape by design ---- */

/* Why an escape of probe name is by design for this tier and spec, or NULL. */
static const char *by_design(const char *name, const struct cdn_spec *s)
{
    const struct cdn_tier_ops *t = cdn_tier_lookup(s->tier);
    for (const struct cdn_tier_escape *e = t ? t->by_design : NULL; e && e->probe; e++)
        if (strcmp(name, e->probe) == 0)
            return e->why;
    if (s->net_mode != CDN_NET_NONE &&
        (strcmp(name, "net_interfaces") == 0 || strcmp(name, "net_default_route") == 0))
        return "the spec gives the sandbox a network (its veth leads only to cordon's proxy and DNS stub)";
    if (strcmp(name, "memory_2g") == 0 && s->limits.memory_mb >= 2048)
        return "the spec's memory limit is at least the probe's 2 GiB";
    if (strcmp(name, "fork_bomb") == 0 && s->limits.pids >= 2000)
        return "the spec's pids limit is at least the probe's 2000";
    if (strcmp(name, "disk_512m") == 0 && s->limits.disk_mb >= 512)
        return "the spec's disk limit is at least the probe's 512 MiB";
    if (strcmp(name, "fd_exhaustion") == 0 && s->limits.nofile >= 100000)
        return "the spec's nofile limit is at least the probe's 100000";
    return NULL;
}

static void judge(struct tier_result *r, const struct cdn_spec *s)
{
    for (size_t i = 0; i < r->n; i++) {
        struct probe_line *l = &r->lines[i];
        if (strcmp(l->verdict, "contained") == 0) {
            r->contained++;
            continue;
        }
        l->expected = s ? by_design(l->name, s) : NULL;
        if (l->expected)
            r->expected++;
        else
            r->escaped++;
    }
}

/* ---- one run ---- */

/* Our environment with the bait's variables (the disk directory only for a baseline: inside a sandbox the
 * probe writes beneath /workspace or /tmp). The strings are static: one run at a time. */
static char **bait_env(const struct bait *b, bool baseline)
{
    extern char **environ;
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 8, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "CORDON_PROBE", 12) != 0)
            env[k++] = environ[i];
    const char *vars[][2] = {{"CORDON_PROBE_CANARY", b->canary},     {"CORDON_PROBE_CANARY_TEXT", b->text},
                             {"CORDON_PROBE_HOST_PID", b->pid},      {"CORDON_PROBE_HOST_PORT", b->port},
                             {"CORDON_PROBE_ABSTRACT", b->abstract}, {"CORDON_PROBE_DISK_DIR", b->dir}};
    static char kv[ELEMENTSOF(vars)][256];
    for (size_t i = 0; i < ELEMENTSOF(vars) && (baseline || i < 5); i++) {
        (void) snprintf(kv[i], sizeof kv[i], "%s=%s", vars[i][0], vars[i][1]);
        env[k++] = kv[i];
    }
    return env;
}

/* Where the probe is bound in a sandbox of tier t: beneath where the tier binds (/workspace for
 * the process tier), else at /probe. */
static void probe_path(const struct cdn_tier_ops *t, char *buf, size_t size)
{
    (void) snprintf(buf, size, "%s/probe", t && t->binds_under ? t->binds_under : "");
}

/* The spec of one tier's run: the suite's bounds, then the operator's flags (and --spec), then the tier,
 * the probe's bind and the bait's variables. */
static int make_spec(const struct bait *b, enum cdn_tier tier, int argc, char *const *argv, const char *probe,
                     struct cdn_spec *ret, struct cdn_error *err)
{
    struct cdn_run_opts o = {.no_command = true};
    int r = cdn_spec_init(&o.spec);
    if (r < 0)
        return cdn_error_set(err, -r, "spec: %m");
    suite_limits(&o.spec.limits);
    const char *vars[][2] = {{"CORDON_PROBE_CANARY", b->canary},
                             {"CORDON_PROBE_CANARY_TEXT", b->text},
                             {"CORDON_PROBE_HOST_PID", b->pid},
                             {"CORDON_PROBE_HOST_PORT", b->port},
                             {"CORDON_PROBE_ABSTRACT", b->abstract}};
    r = cdn_run_parse(argc, argv, &o, err);
    if (r >= 0) {
        o.spec.tier = tier;
        char inside[64];
        probe_path(cdn_tier_lookup(tier), inside, sizeof inside);
        r = cdn_spec_add_mount(&o.spec, probe, inside, true, err);
    }
    for (size_t i = 0; i < ELEMENTSOF(vars) && r >= 0; i++)
        r = cdn_spec_set_env(&o.spec, vars[i][0], vars[i][1], err);
    if (r >= 0)
        r = cdn_spec_validate(&o.spec, err);
    if (r < 0) {
        cdn_spec_free(&o.spec);
        return r;
    }
    *ret = o.spec;
    return 0;
}

/* The spec as a file in the bait's directory (path), for `cordon run --spec`. */
static int write_spec(const struct bait *b, int idx, const struct cdn_spec *spec, char *path, size_t size,
                      struct cdn_error *err)
{
    _cleanup_free_ char *json = cdn_spec_to_json(spec);
    if (!json)
        return cdn_error_set(err, ENOMEM, "spec: %m");
    (void) snprintf(path, size, "%s/spec-%d.json", b->dir, idx);
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || cdn_write_all(fd, json, strlen(json)) < 0)
        return cdn_error_set(err, errno, "write %s: %m", path);
    return 0;
}

static char out_buf[OUT_MAX + 1], err_buf[OUT_MAX + 1];

/* Run the probe once (in a sandbox of spec_path, or unconfined for a baseline: spec_path NULL) and read
 * its verdicts. filters: probe-name substrings, NULL-terminated. */
static void run_one(const char *probe, const char *spec_path, const struct bait *b, char *const *filters,
                    bool partial_ok, struct tier_result *r)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    char inside[64];
    probe_path(r->tier ? cdn_tier_by_name(r->tier) : NULL, inside, sizeof inside);
    const char *argv[64] = {self, "run", "--spec", spec_path, "--", inside};
    size_t k = 6;
    if (!spec_path) {
        argv[0] = probe;
        k = 1;
    }
    for (size_t i = 0; filters[i] && k < ELEMENTSOF(argv) - 1; i++)
        argv[k++] = filters[i];
    argv[k] = NULL;
    char **env = bait_env(b, !spec_path);
    int outfd = -1, errfd = -1;
    pid_t pid = env ? spawn((char *const *) argv, spec_path ? NULL : probe, env, &outfd, &errfd) : -ENOMEM;
    free(env);
    if (pid < 0) {
        (void) snprintf(r->error, sizeof r->error, "start the probe: %s", strerror((int) -pid));
        return;
    }
    size_t outlen = 0, errlen = 0;
    r->status = collect(pid, outfd, errfd, out_buf, &outlen, err_buf, &errlen);
    int pr = parse_output(out_buf, r);
    const char *tail = errlen > 600 ? err_buf + errlen - 600 : err_buf;
    r->partial = !r->summary;
    if (pr < 0)
        (void) snprintf(r->error, sizeof r->error, "the probe's output breaks its contract (%s); stderr: %s",
                        strerror(-pr), tail);
    else if (r->partial && !(partial_ok && r->status == 137))
        (void) snprintf(r->error, sizeof r->error,
                        "the run ended (exit %d) before the probe's summary; stderr: %s", r->status, tail);
    else if (!r->partial && !filters[0] && r->n < MIN_PROBES)
        (void) snprintf(r->error, sizeof r->error, "only %zu probes ran (at least %d expected)", r->n,
                        MIN_PROBES);
}

/* ---- reporting ---- */

static void print_text(const struct tier_result *r, bool verbose)
{
    if (r->error[0]) {
        printf("tier %-9s ERROR: %s\n", r->tier, r->error);
        return;
    }
    printf("tier %-9s %zu probes: %u contained, %u expected by design, %u escaped%s\n", r->tier, r->n,
           r->contained, r->expected, r->escaped,
           r->partial ? " (on_violation kill stopped the sandbox at the first watched attempt)" : "");
    for (size_t i = 0; i < r->n; i++) {
        const struct probe_line *l = &r->lines[i];
        bool esc = strcmp(l->verdict, "escaped") == 0;
        if (esc && !l->expected)
            printf("  ESCAPED   %s/%s: %s\n", l->category, l->name, l->detail);
        else if (esc)
            printf("  expected  %s/%s: %s\n", l->category, l->name, l->expected);
        else if (verbose)
            printf("  contained %s/%s: %s\n", l->category, l->name, l->detail);
    }
}

static json_t *tier_json(const struct tier_result *r)
{
    json_t *probes = json_array();
    for (size_t i = 0; i < r->n; i++) {
        const struct probe_line *l = &r->lines[i];
        (void) json_array_append_new(probes, json_pack("{s:s, s:s, s:s, s:s, s:o}", "category", l->category,
                                                       "name", l->name, "verdict", l->verdict, "detail",
                                                       l->detail, "expected",
                                                       l->expected ? json_string(l->expected) : json_null()));
    }
    return json_pack("{s:s, s:i, s:b, s:I, s:I, s:I, s:o, s:o}", "tier", r->tier, "exit_status", r->status,
                     "partial", r->partial, "contained", (json_int_t) r->contained, "expected",
                     (json_int_t) r->expected, "escaped", (json_int_t) r->escaped, "error",
                     r->error[0] ? json_string(r->error) : json_null(), "probes", probes);
}

/* ---- the command ---- */

struct selftest_opts {
    const char *tiers[MAX_TIERS];
    size_t ntiers;
    char *filters[32];
    size_t nfilters;
    char *run_argv[128]; /* the flags for `cordon run` (the spec) */
    int run_argc;
    bool json, verbose, baseline;
};

static int usage(FILE *f, int status)
{
    fprintf(
        f,
        "usage: cordon selftest [--tier T]… [--probe NAME]… [--json] [-v] [--baseline] [RUN FLAGS]\n"
        "  runs cordon's escape probes in a sandbox of each tier (default: every tier this host can run)\n"
        "  with the flags of `cordon run` (e.g. --spec FILE, --net, --on-violation) or the suite's bounds;\n"
        "  exit 0: nothing escaped, 1: something escaped, 125: the selftest itself failed.\n"
        "  --baseline: the control, the probes as root with no sandbox: exit 0 when they report escapes.\n");
    return status;
}

static int parse_opts(int argc, char *const *argv, struct selftest_opts *o)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0)
            return usage(stdout, 0) - 1;
        if (strcmp(a, "--json") == 0)
            o->json = true;
        else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0)
            o->verbose = true;
        else if (strcmp(a, "--baseline") == 0)
            o->baseline = true;
        else if (strcmp(a, "--tier") == 0 && v && o->ntiers < MAX_TIERS && cdn_tier_from_string(v) >= 0)
            o->tiers[o->ntiers++] = argv[++i];
        else if (strcmp(a, "--tier") == 0) {
            fprintf(stderr, "cordon selftest: --tier '%s': container, process, microvm or vm\n", v ? v : "");
            return -EINVAL;
        } else if (strcmp(a, "--probe") == 0 && v && o->nfilters < ELEMENTSOF(o->filters) - 1)
            o->filters[o->nfilters++] = argv[++i];
        else if (strcmp(a, "--probe") == 0) {
            fprintf(stderr, "cordon selftest: --probe: a probe name or part of one (at most 31)\n");
            return -EINVAL;
        } else if (o->run_argc < (int) ELEMENTSOF(o->run_argv) - 1)
            o->run_argv[o->run_argc++] = argv[i];
        else
            return -E2BIG;
    }
    return 0;
}

/* Every tier of this build this host can run now (a VM tier once its guest is prepared). */
static void default_tiers(struct selftest_opts *o)
{
    for (const struct cdn_tier_ops *const *t = cdn_tiers; *t && o->ntiers < MAX_TIERS; t++) {
        struct cdn_error err = {0};
        if ((*t)->ready && (*t)->ready(&err) < 0)
            fprintf(stderr, "cordon selftest: tier %s not run: %s\n", (*t)->name, err.msg);
        else
            o->tiers[o->ntiers++] = (*t)->name;
    }
}

/* The control: without a sandbox the probes must report escapes in these areas, else they cannot tell. */
static bool baseline_detects(const struct tier_result *r)
{
    static const char *const need[] = {"mount_tmpfs", "unshare_user", "canary_direct", "no_new_privs",
                                       "capabilities"};
    size_t seen = 0;
    for (size_t i = 0; i < ELEMENTSOF(need); i++)
        for (size_t j = 0; j < r->n; j++)
            if (strcmp(r->lines[j].name, need[i]) == 0 && strcmp(r->lines[j].verdict, "escaped") == 0)
                seen++;
    return seen == ELEMENTSOF(need);
}

int cdn_cli_selftest(int argc, char *const *argv)
{
    struct selftest_opts o = {0};
    int r = parse_opts(argc, argv, &o);
    if (r < 0)
        return r == -1 ? 0 : 125;
    char probe[4096];
    if (find_probe(probe, sizeof probe) < 0) {
        fprintf(stderr, "cordon selftest: cordon-probe not found (set CORDON_PROBE, or reinstall cordon)\n");
        return 125;
    }
    struct bait b;
    if ((r = bait_make(&b)) < 0) {
        fprintf(stderr, "cordon selftest: host-side bait: %s\n", strerror(-r));
        bait_free(&b);
        return 125;
    }
    if (!o.baseline && !o.ntiers)
        default_tiers(&o);
    struct tier_result res[MAX_TIERS] = {0};
    size_t nres = o.baseline ? 1 : o.ntiers;
    int status = 0;
    json_t *all = json_array();
    for (size_t t = 0; t < nres; t++) {
        struct tier_result *tr = &res[t];
        struct cdn_spec spec;
        struct cdn_error err = {0};
        char path[160];
        tr->tier = o.baseline ? "none" : o.tiers[t];
        if (o.baseline)
            run_one(probe, NULL, &b, o.filters, false, tr);
        else if (make_spec(&b, (enum cdn_tier) cdn_tier_from_string(tr->tier), o.run_argc, o.run_argv, probe,
                           &spec, &err) < 0)
            (void) snprintf(tr->error, sizeof tr->error, "%s%s%s%s", err.msg, err.field[0] ? " (field: " : "",
                            err.field, err.field[0] ? ")" : "");
        else {
            if (write_spec(&b, (int) t, &spec, path, sizeof path, &err) < 0)
                (void) snprintf(tr->error, sizeof tr->error, "%s", err.msg);
            else {
                run_one(probe, path, &b, o.filters, spec.on_violation == CDN_VIOLATION_KILL, tr);
                judge(tr, &spec);
            }
            cdn_spec_free(&spec);
        }
        if (o.baseline && !tr->error[0]) {
            judge(tr, NULL);
            if (!baseline_detects(tr) && !o.filters[0])
                (void) snprintf(tr->error, sizeof tr->error,
                                "without a sandbox the probes did not report the escapes they look for: they "
                                "cannot tell on this host");
        }
        if (o.json)
            (void) json_array_append_new(all, tier_json(tr));
        else
            print_text(tr, o.verbose || o.baseline);
        if (tr->error[0])
            status = 125;
        else if (tr->escaped && !o.baseline && status == 0)
            status = 1;
        free(tr->lines);
        fflush(stdout);
    }
    if (o.json) {
        json_t *top = json_pack("{s:b, s:b, s:o}", "baseline", o.baseline, "ok", status == 0, "tiers", all);
        (void) json_dumpf(top, stdout, JSON_COMPACT);
        putchar('\n');
        json_decref(top);
    } else {
        json_decref(all);
        printf(status == 0
                   ? (o.baseline ? "result: the probes report escapes without a sandbox (the control works)\n"
                                 : "result: every probe contained\n")
               : status == 1 ? "result: ESCAPED (see above)\n"
                             : "result: the selftest could not run (see above)\n");
    }
    bait_free(&b);
    return status;
}
