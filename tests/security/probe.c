/*
 * cordon-probe: runs escape attempts and prints one line per probe:
 *
 *   PROBE <category> <name> contained|escaped <detail>
 *   SUMMARY probes=N contained=X escaped=Y
 *
 * Exit status: 0 when nothing escaped, 1 when something did, 2 on usage errors.
 * Usage: cordon-probe [--list] [name-substring...]
 *
 * Runs inside the sandbox (or, for the weakened test, as root on the host). The runner is the only process
 * that prints; each probe runs in its own forked child (own session and process group) that reports a struct
 * probe_result through a pipe. The runner is a child subreaper so it can reap whatever a probe left behind.
 */
#include "probe.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

static const struct probe_def *const probe_groups[] = {
    probe_defs_mount, probe_defs_ns,  probe_defs_dev, probe_defs_kernel, probe_defs_surface, probe_defs_net,
    probe_defs_host,  probe_defs_res, NULL,
};

/* Extra time the runner grants beyond the child's own alarm() before it kills the child's process group. */
#define RUNNER_GRACE_S 5

static void ctx_collect_fds(struct probe_ctx *ctx)
{
    struct rlimit rl;
    int max = 1024;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 65536)
        max = (int) rl.rlim_cur;
    for (int fd = 3; fd < max && ctx->n_inherited_fds < PROBE_MAX_INHERITED_FDS; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            ctx->inherited_fds[ctx->n_inherited_fds++] = fd;
}

static void ctx_init(struct probe_ctx *ctx)
{
    *ctx = (struct probe_ctx){
        .main_pid = getpid(),
        .parent_pid = getppid(),
        .canary_path = getenv("CORDON_PROBE_CANARY"),
        .canary_text = getenv("CORDON_PROBE_CANARY_TEXT"),
        .host_pid = getenv("CORDON_PROBE_HOST_PID"),
        .host_port = getenv("CORDON_PROBE_HOST_PORT"),
        .abstract_name = getenv("CORDON_PROBE_ABSTRACT"),
        .disk_dir = getenv("CORDON_PROBE_DISK_DIR"),
    };
    ctx_collect_fds(ctx);
}

static bool probe_selected(const struct probe_def *def, int argc, char **argv)
{
    if (argc <= 1)
        return true;
    for (int i = 1; i < argc; i++)
        if (strstr(def->name, argv[i]))
            return true;
    return false;
}

/* Runs in the forked probe child: never returns, never touches stdio. */
static _Noreturn void child_run(const struct probe_ctx *ctx, const struct probe_def *def, int out_fd)
{
    struct probe_result res = {.verdict = PROBE_CONTAINED};
    unsigned timeout = def->timeout_s ? def->timeout_s : PROBE_DEFAULT_TIMEOUT_S;
    const char *p = (const char *) &res;
    size_t left = sizeof(res);
    sigset_t none;

    /* Whatever mask or dispositions the harness passed down, the alarm must be able to end a hung probe. */
    (void) sigemptyset(&none);
    (void) sigprocmask(SIG_SETMASK, &none, NULL);
    (void) signal(SIGALRM, SIG_DFL);
    (void) signal(SIGPIPE, SIG_IGN);
    (void) setsid();
    (void) alarm(timeout);
    def->run(ctx, &res);
    while (left > 0) {
        ssize_t n = write(out_fd, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        p += n;
        left -= (size_t) n;
    }
    _exit(0);
}

/* Waits for a whole result until the deadline; returns true when one arrived. */
static bool read_result(int fd, unsigned timeout_s, struct probe_result *res)
{
    char *p = (char *) res;
    size_t got = 0;
    time_t deadline = time(NULL) + (time_t) timeout_s;

    while (got < sizeof(*res)) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        time_t left = deadline - time(NULL);
        ssize_t n;

        if (left <= 0 || poll(&pfd, 1, (int) left * 1000) == 0)
            return false;
        n = read(fd, p + got, sizeof(*res) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        got += (size_t) n;
    }
    return true;
}

/* Kills the probe's process group and reaps it and any orphan reparented to us (we are a subreaper). */
static int reap_probe(pid_t pid)
{
    int status = 0;

    (void) kill(-pid, SIGKILL);
    (void) kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    for (int i = 0; i < 200; i++) {
        pid_t r = waitpid(-1, NULL, WNOHANG);
        if (r < 0 && errno == ECHILD)
            break;
        if (r == 0)
            (void) nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    return status;
}

static void run_probe(const struct probe_ctx *ctx, const struct probe_def *def, struct probe_result *res)
{
    unsigned timeout = (def->timeout_s ? def->timeout_s : PROBE_DEFAULT_TIMEOUT_S) + RUNNER_GRACE_S;
    int pfd[2];
    pid_t pid;
    bool got;
    int status;

    *res = (struct probe_result){.verdict = PROBE_ESCAPED};
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        probe_escaped(res, "untested:pipe:%s", probe_errname(errno));
        return;
    }
    (void) fflush(stdout);
    pid = fork();
    if (pid < 0) {
        probe_escaped(res, "untested:fork:%s", probe_errname(errno));
        (void) close(pfd[0]);
        (void) close(pfd[1]);
        return;
    }
    if (pid == 0) {
        (void) close(pfd[0]);
        child_run(ctx, def, pfd[1]);
    }
    (void) close(pfd[1]);
    got = read_result(pfd[0], timeout, res);
    (void) close(pfd[0]);
    status = reap_probe(pid);
    if (got)
        return;
    /* Fail closed: a probe that hung or crashed proved nothing. */
    *res = (struct probe_result){.verdict = PROBE_ESCAPED};
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        probe_escaped(res, "untested:timeout");
    else if (WIFSIGNALED(status))
        probe_escaped(res, "untested:died:signal-%d", WTERMSIG(status));
    else
        probe_escaped(res, "untested:no-result:exit=%d", WEXITSTATUS(status));
}

/* The detail goes on one line after the verdict: no control characters, never empty. */
static void print_line(const struct probe_def *def, struct probe_result *res)
{
    res->detail[sizeof(res->detail) - 1] = '\0';
    for (char *c = res->detail; *c; c++)
        if ((unsigned char) *c < 0x20 || *c == 0x7f)
            *c = '?';
    printf("PROBE %s %s %s %s\n", def->category, def->name,
           res->verdict == PROBE_ESCAPED ? "escaped" : "contained", res->detail[0] ? res->detail : "-");
    (void) fflush(stdout);
}

static void list_probes(void)
{
    for (size_t g = 0; probe_groups[g]; g++)
        for (const struct probe_def *d = probe_groups[g]; d->name; d++)
            printf("%s %s\n", d->category, d->name);
}

static int usage(FILE *f, int status)
{
    fprintf(f, "usage: cordon-probe [--list] [name-substring...]\n"
               "  Runs sandbox escape probes; prints PROBE/SUMMARY lines; exit 1 if any escaped.\n");
    return status;
}

int main(int argc, char **argv)
{
    struct probe_ctx ctx;
    unsigned n = 0, escaped = 0;

    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        list_probes();
        return 0;
    }
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
        return usage(stdout, 0);
    ctx_init(&ctx);
    /* waitpid() must see our children even if the caller left SIGCHLD ignored. */
    (void) signal(SIGCHLD, SIG_DFL);
    (void) prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    for (size_t g = 0; probe_groups[g]; g++)
        for (const struct probe_def *d = probe_groups[g]; d->name; d++) {
            struct probe_result res;

            if (!probe_selected(d, argc, argv))
                continue;
            run_probe(&ctx, d, &res);
            print_line(d, &res);
            n++;
            escaped += res.verdict == PROBE_ESCAPED;
        }
    if (n == 0) {
        fprintf(stderr, "cordon-probe: no probe matches the given names\n");
        return usage(stderr, 2);
    }
    printf("SUMMARY probes=%u contained=%u escaped=%u\n", n, n - escaped, escaped);
    return escaped == 0 ? 0 : 1;
}
