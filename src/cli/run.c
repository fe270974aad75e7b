/* `cordon run`: one sandbox, one command, no daemon. Runs on the host as
 * root; stdin/stdout/stderr are handed to the command as they are. */
#include "run.h"
#include "cli.h"
#include "run-flags.h"
#include "proto/frame.h"
#include "shared/fd-util.h"
#include "core/paths.h"
#include "confine/seccomp-policy.h"
#include "supervise/session.h"
#include "tiers/tier.h"

#if !CDN_LEAN
#include "oci/resolve.h"
#endif

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXEC_CHANNEL 1

static const int forwarded[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT};

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) (t.tv_sec - t0->tv_sec) * 1e3 + (double) (t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* The run's session (session.h): supervising from init's start until it is reaped or the session
 * killed it; kill mode ends the whole sandbox. No record beyond the counts (--json prints them). */
static enum cdn_session_phase run_phase(struct cdn_session *s)
{
    return s->killed || s->sb->init_pid <= 0 ? CDN_SESSION_ENDED : CDN_SESSION_RUNNING;
}

static int run_kill(struct cdn_session *s, enum cdn_vk kind)
{
    (void) kind;
    return s->sb->tier->kill(s->sb, SIGKILL);
}

static const struct cdn_session_ops session_ops = {.phase = run_phase, .kill = run_kill};

/* Encode the EXEC frame up front: a command too large for one frame is
 * refused before any sandbox exists. Returns the payload length. */
static int encode_exec(const struct cdn_spec *spec, char *const *argv, bool pipes, uint8_t **ret,
                       struct cdn_error *err)
{
    _cleanup_(cdn_strv_free) struct cdn_strv envv = {0};
    if (cdn_exec_env(spec, getenv("TERM"), NULL, &envv) < 0)
        return cdn_error_set(err, ENOMEM, "out of memory");
    char *const *env = envv.v;
    size_t need = CDN_EXEC_FIXED + strlen(spec->workdir) + 1 +
                  (spec->user ? strlen(spec->user) + 1 : 0); /* sized exactly: no 1 MiB allocation per run */
    for (size_t i = 0; argv[i]; i++)
        need += strlen(argv[i]) + 1;
    for (size_t i = 0; env[i]; i++)
        need += strlen(env[i]) + 1;
    size_t size = need < CDN_FRAME_MAX ? need : CDN_FRAME_MAX;
    _cleanup_free_ uint8_t *buf = malloc(size);
    if (!buf)
        return cdn_error_set(err, ENOMEM, "out of memory");
    int n = cdn_exec_encode(
        buf, size,
        &(struct cdn_exec_args){/* A guest cannot share our stdio: its output comes as frames (read_agent). */
                                .flags = CDN_EXEC_SHUTDOWN_ON_EXIT | (pipes ? CDN_EXEC_PIPES : 0),
                                .cwd = spec->workdir,
                                .argv = argv,
                                .envp = env,
                                .user = spec->user});
    if (n == -ENOBUFS)
        return cdn_error_field(err, E2BIG, "cmd",
                               "the command, its arguments and environment exceed %u KiB (or %d entries)",
                               CDN_FRAME_MAX / 1024, CDN_EXEC_MAX_ARGS);
    if (n < 0)
        return cdn_error_field(err, -n, "cmd", "cannot encode the command: %s", strerror(-n));
    *ret = TAKE_PTR(buf);
    return n;
}

/* Host side of the agent socket: frames come from cordon-init inside the
 * sandbox (which sandbox processes cannot write to: fd 3 is init's alone), and
 * are still decoded as untrusted input. */
static void read_agent(struct cdn_sandbox *sb, struct outcome *o, struct pollfd *pfd)
{
    static uint8_t buf[CDN_FRAME_MAX];
    struct cdn_frame_header h;
    int n = cdn_frame_recv(sb->agent_fd, &h, buf, sizeof buf);
    if (n < 0) {
        pfd->fd = -1; /* init gone (or garbage): the pidfd tells the rest */
        return;
    }
    if ((h.type == CDN_FRAME_STDOUT || h.type == CDN_FRAME_STDERR) && n > 0) /* a guest's output */
        (void) cdn_write_all(h.type == CDN_FRAME_STDOUT ? 1 : 2, buf, (size_t) n);
    else if (h.type == CDN_FRAME_EXIT && cdn_exit_decode(buf, (size_t) n, &o->exit) == 0)
        o->have_exit = true;
    else if (h.channel == 0 && sb->tier->frame && sb->tier->frame(sb, h.type, buf, (size_t) n) != 0)
        return;                                                 /* the tier's own (a guest's USAGE) */
    else if (h.type == CDN_FRAME_VIOLATION && h.channel == 0) { /* a guest's watched denial */
        (void) cdn_session_guest_violation(&o->session, buf, (uint32_t) n);
    } else if (h.type == CDN_FRAME_ERROR) {
        int e;
        const char *msg;
        if (cdn_errmsg_decode(buf, (size_t) n, &e, &msg) == 0) {
            o->exec_failed = true;
            cdn_error_set(&o->error, e, "%s", msg);
        }
    }
}

/* The setup child's error pipe: a whole struct cdn_error if setup failed
 * before exec'ing init, EOF (CLOEXEC) once init runs. Strings are re-terminated. */
static void read_setup(struct cdn_sandbox *sb, struct outcome *o, struct pollfd *pfd)
{
    ssize_t n = cdn_read_full(sb->setup_fd, &o->error, sizeof o->error);
    if (n == (ssize_t) sizeof o->error) {
        o->error.msg[sizeof o->error.msg - 1] = 0;
        o->error.field[sizeof o->error.field - 1] = 0;
        o->setup_failed = true;
    }
    pfd->fd = -1; /* EOF: cordon-init is running */
}

/* The seccomp listener's notifications: the session decides and answers (session.h). */
static void supervise_syscalls(struct outcome *o, struct pollfd *pfd)
{
    if (!(pfd->revents & POLLIN)) { /* HUP: no process left under the filter */
        (void) safe_close(pfd->fd);
        pfd->fd = -1;
        return;
    }
    (void) cdn_session_seccomp(&o->session, pfd->fd);
}

/* Opens of the marked mounts (fanotify.h): the session decides, we answer. */
static void supervise_files(struct outcome *o, struct pollfd *pfd)
{
    struct cdn_fanotify_event ev[16];
    int n = cdn_fanotify_read(pfd->fd, ev, ELEMENTSOF(ev));
    for (int i = 0; i < n; i++) {
        enum cdn_answer a = cdn_session_file_open(&o->session, &ev[i]);
        if (a != CDN_ANSWER_HOLD)
            (void) cdn_fanotify_answer(pfd->fd, &ev[i], a == CDN_ANSWER_CONTINUE);
    }
}

/* Refused egress attempts, passed on by the egress thread (run-egress.c): counted here, on the
 * thread that counts every other violation. */
static void count_egress(struct outcome *o, uint64_t n)
{
    while (n-- > 0)
        (void) cdn_session_violation(&o->session, CDN_VK_EGRESS, NULL);
}

/* Once init runs, before the command does: mark what the monitor guards.
 * Without marks a protected path would be readable, so that failing ends the run. */
static void mark_files(struct cdn_sandbox *sb, struct outcome *o, int group, struct pollfd *pfd)
{
    struct cdn_error e = {0};
    if (group >= 0 && cdn_session_mark(&o->session, group, &e) == 0) {
        pfd->fd = group;
        return;
    }
    if (sb->spec->protect.n == 0)
        return; /* only the kernel files' records are lost */
    o->setup_failed = true;
    o->error = e;
    if (group < 0)
        cdn_error_field(&o->error, EPERM, "protect", "protect: no fanotify group (needs root)");
    (void) sb->tier->kill(sb, SIGKILL);
}

/* Poll until init has exited and been reaped. The command's EXEC frame is
 * sent here when deferred (exec != NULL): after the monitor's marks. */
static int supervise(struct cdn_sandbox *sb, int sfd, struct outcome *o, const struct timespec *t0,
                     const uint8_t *exec, int exec_len, int group, int egress_fd)
{
    struct pollfd pfd[7] = {
        {.fd = sb->init_pidfd, .events = POLLIN},
        {.fd = sb->agent_fd, .events = POLLIN},
        {.fd = sb->setup_fd, .events = POLLIN},
        {.fd = sfd, .events = POLLIN},
        {.fd = -1, .events = POLLIN}, /* the seccomp listener, once init runs */
        {.fd = -1, .events = POLLIN}, /* the fanotify group, once marked */
        {.fd = egress_fd, .events = POLLIN},
    };
    uint64_t timeout = sb->spec->limits.timeout_ms;
    for (;;) {
        int wait_ms = -1;
        if (timeout && !o->timed_out) {
            double left = (double) timeout - ms_since(t0);
            wait_ms = left <= 0 ? 0 : (int) left + 1;
        }
        int r = poll(pfd, ELEMENTSOF(pfd), wait_ms);
        if (r < 0 && errno != EINTR)
            break;
        if (r == 0 && timeout && !o->timed_out && ms_since(t0) >= (double) timeout) {
            o->timed_out = true;
            (void) sb->tier->kill(sb, SIGKILL);
            continue;
        }
        if (pfd[2].revents) {
            read_setup(sb, o, &pfd[2]);
            if (!o->setup_failed && sb->tier->monitor_fd && (pfd[4].fd = sb->tier->monitor_fd(sb)) < 0)
                pfd[4].fd = -1; /* no supervisor: a watched syscall would wait; end rather than hang */
            if (!o->setup_failed && !sb->tier->guest_supervises) /* a VM guest guards its own */
                mark_files(sb, o, group, &pfd[5]);
            if (exec && !o->setup_failed)
                (void) cdn_frame_send(sb->agent_fd, CDN_FRAME_EXEC, EXEC_CHANNEL, exec, (uint32_t) exec_len);
        }
        if (pfd[5].revents)
            supervise_files(o, &pfd[5]);
        if (pfd[4].revents)
            supervise_syscalls(o, &pfd[4]);
        uint64_t refused;
        if (pfd[6].revents && read(egress_fd, &refused, sizeof refused) == (ssize_t) sizeof refused)
            count_egress(o, refused);
        if (pfd[1].revents)
            read_agent(sb, o, &pfd[1]);
        if (o->have_exit && pfd[2].fd < 0)
            break; /* the command's status is in; init is ending the sandbox on its own */
        if (pfd[3].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t) sizeof si)
                (void) sb->tier->kill(sb, (int) si.ssi_signo);
        }
        if (pfd[0].revents & POLLIN) {
            int status;
            if (pfd[1].fd >= 0) /* drain frames written just before init exited */
                while (poll(&pfd[1], 1, 0) == 1 && pfd[1].fd >= 0)
                    read_agent(sb, o, &pfd[1]);
            if (pfd[2].fd >= 0)
                read_setup(sb, o, &pfd[2]);
            while (wait4(sb->init_pid, &status, __WALL, &o->ru) < 0 && errno == EINTR)
                ;
            sb->init_pid = 0;
            break;
        }
    }
    return 0;
}

static int exit_status(const struct outcome *o)
{
    if (o->setup_failed || o->exec_failed)
        return EXIT_CORDON;
    if (o->timed_out)
        return EXIT_TIMEOUT;
    if (o->session.killed)
        return 128 + SIGKILL;
    if (o->have_exit)
        return o->exit.signal ? 128 + o->exit.signal : o->exit.exit_code;
    return o->usage.oom_kills ? 128 + SIGKILL : EXIT_CORDON;
}

/* What the lean build cannot do itself (cli.h). */
static bool needs_full(const struct cdn_run_opts *o)
{
    char cache[4096];
    cdn_cache_dir(cache, sizeof cache);
    return o->json || o->needs_full || o->spec.net_mode != CDN_NET_NONE || o->spec.protect.n > 0 ||
           !cdn_tier_lookup(o->spec.tier) || o->spec.watch_writes || !cdn_seccomp_cache_present(cache);
}

static void report_error(const struct cdn_error *e)
{
    if (e->field[0])
        fprintf(stderr, "cordon: %s (field: %s)\n", e->msg, e->field);
    else
        fprintf(stderr, "cordon: %s\n", e->msg);
}

static int block_signals(void)
{
    sigset_t mask;
    sigemptyset(&mask);
    for (size_t i = 0; i < ELEMENTSOF(forwarded); i++)
        sigaddset(&mask, forwarded[i]);
    sigaddset(&mask, SIGPIPE);
    if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
        return -errno;
    sigdelset(&mask, SIGPIPE);
    return RET_NERRNO(signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
}

/* Create, run, tear down. Everything that goes wrong after the flags were
 * accepted lands in *out (and so in the --json record). */
static void run_sandbox(struct cdn_sandbox *sb, const struct cdn_run_opts *o, struct outcome *out)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    _cleanup_free_ uint8_t *exec_frame = NULL;
    int exec_len = encode_exec(&o->spec, o->argv, sb->tier->exec_pipes, &exec_frame, &out->error);
    int sfd = exec_len < 0 ? -EBADF : block_signals();
#if !CDN_LEAN
    struct run_egress *egress = NULL;
    if (exec_len >= 0 && cdn_run_egress_prepare(sb, &egress, &out->error) < 0)
        exec_len = -1;
#endif
    int group = -EBADF; /* the monitor's fanotify group (fanotify.h) */
#if !CDN_LEAN
    if (!sb->tier->guest_supervises) /* a VM guest's files are the guest kernel's */
        group = cdn_fanotify_open();
    if (sb->spec->protect.n > 0)
        sb->fanotify_fd = group;
#endif
    if (exec_len < 0 || sb->tier->create(sb, &out->error) < 0) {
        (void) safe_close(group);
        out->setup_failed = true;
        out->wall_ms = ms_since(&t0);
        (void) safe_close(sfd);
#if !CDN_LEAN
        cdn_run_egress_free(egress);
#endif
        return;
    }
#if !CDN_LEAN
    if (cdn_run_egress_start(egress) < 0) {
        fprintf(stderr, "cordon: egress: cannot start its thread; the sandbox has no network\n");
        cdn_run_egress_free(egress); /* fails closed: the redirect goes with the table */
        egress = NULL;
    }
    int egress_fd = cdn_run_egress_violations_fd(egress);
#else
    int egress_fd = -EBADF;
#endif
    /* A failed send means init is gone; supervise() learns why from the pidfd and setup pipe. */
    /* With protected paths the command waits for the monitor's marks (supervise()). */
    bool defer = sb->spec->protect.n > 0;
    if (!defer)
        (void) cdn_frame_send(sb->agent_fd, CDN_FRAME_EXEC, EXEC_CHANNEL, exec_frame, (uint32_t) exec_len);
    (void) supervise(sb, sfd, out, &t0, defer ? exec_frame : NULL, exec_len, group, egress_fd);
    if (group >= 0) /* init is reaped: the held openers are gone */
        cdn_session_answer_held(&out->session, group);
    (void) safe_close(group);
#if !CDN_LEAN
    /* First: its last refusals are counted (a kill on violation acts on the sandbox, whose pidfd
     * the teardown below closes). The veth goes now; the namespace with the sandbox's last process. */
    count_egress(out, cdn_run_egress_stop(egress));
    cdn_run_egress_free(egress);
#endif
    /* Accounting is for the record, and for telling an OOM kill when no status came back. */
    if (o->json || !out->have_exit)
        (void) sb->tier->usage(sb, &out->usage);
    if (sb->init_pid > 0)
        sb->tier->detach(sb); /* normal exit: teardown continues in the background */
    else
        (void) sb->tier->destroy(sb);
    out->wall_ms = ms_since(&t0);
    (void) safe_close(sfd);
}

#if !CDN_LEAN
/* An OCI image: in the store (pulled per --pull), its config under the flags' spec, its Entrypoint
 * and Cmd as the command when none was given (kept in *cmd). */
static int prepare_oci_image(struct cdn_run_opts *o, struct cdn_strv *cmd, struct cdn_error *err)
{
    struct cdn_pull_env e = {0};
    struct cdn_pull_options po;
    struct cdn_oci_config c = {0};
    int r = cdn_pull_options_from_env(&po, &e);
    if (r >= 0)
        r = cdn_oci_ensure(o->spec.image, o->pull ? cdn_pull_policy_from_string(o->pull) : CDN_PULL_MISSING,
                           &po, &c, err);
    cdn_pull_env_free(&e);
    if (r >= 0)
        r = cdn_oci_apply_config(&c, &o->spec, o->workdir_given,
                                 cdn_tier_lookup(o->spec.tier) && cdn_tier_lookup(o->spec.tier)->users, err);
    for (size_t i = 0; r >= 0 && !o->argv && i < c.entrypoint.n + c.cmd.n; i++)
        r = cdn_strv_push(cmd, i < c.entrypoint.n ? c.entrypoint.v[i] : c.cmd.v[i - c.entrypoint.n]);
    cdn_oci_config_free(&c);
    if (r >= 0 && !o->argv) {
        if (cmd->n == 0)
            return cdn_error_field(err, EINVAL, "image",
                                   "image: %s has neither Entrypoint nor Cmd: give a command", o->spec.image);
        o->argv = cmd->v;
    }
    return r == -ENOMEM ? cdn_error_set(err, ENOMEM, "out of memory") : r;
}
#endif

/* The bind sources `cordon run` accepts: the core's refusals, and --bind-allow's directories. The
 * sources are resolved here, as cordond does for the API (core/bind-policy.h). */
static int check_binds(struct cdn_run_opts *o, struct cdn_error *err)
{
    if (o->spec.n_mounts == 0)
        return 0;
    struct cdn_bind_policy p;
    int r = cdn_bind_policy_init(&p);
    if (r < 0)
        return cdn_error_set(err, r, "out of memory");
    for (size_t i = 0; r >= 0 && i < o->n_bind_allow; i++)
        r = cdn_bind_policy_allow(&p, o->bind_allow[i], err);
    if (r >= 0 && (r = cdn_bind_policy_check(&p, &o->spec, err)) < 0 && err->msg[0])
        (void) cdn_error_prefix(err, r, "--bind");
    cdn_bind_policy_free(&p);
    return r;
}

int cdn_cli_run(int argc, char *const *argv)
{
    struct cdn_run_opts o = {0};
    struct cdn_error err = {0};
    if (argc > 0 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        printf("usage: cordon run [FLAGS] [--] CMD [ARG…]\n");
        cdn_run_usage(stdout);
        return 0;
    }
    if (cdn_spec_init(&o.spec) < 0)
        return EXIT_CORDON;
    int r = cdn_run_parse(argc, argv, &o, &err);
    if (CDN_LEAN && r >= 0 && needs_full(&o)) {
        cdn_spec_free(&o.spec);
        return cdn_cli_exec_full();
    }
#if !CDN_LEAN
    _cleanup_(cdn_strv_free) struct cdn_strv image_cmd = {0};
    if (r >= 0 && o.image_oci)
        r = prepare_oci_image(&o, &image_cmd, &err);
#endif
    if (r >= 0)
        r = cdn_spec_validate(&o.spec, &err);
    if (r >= 0 && o.spec.limits.idle_timeout_ms) /* one command: never idle while it runs */
        r = cdn_error_field(&err, EINVAL, "limits.idle_timeout_s",
                            "--idle-timeout: for cordond's sandboxes (cordon create), not a one-shot run");
    if (r >= 0 && o.spec.trajectory) /* its steps are cordond's to record */
        r = cdn_error_field(&err, EINVAL, "trajectory",
                            "--trajectory: for cordond's sandboxes (cordon create), not a one-shot run");
    if (r >= 0 && (o.spec.checkpoints || o.spec.checkpoint)) /* the checkpoint store is cordond's */
        r = cdn_error_field(
            &err, EINVAL, o.spec.checkpoint ? "checkpoint" : "checkpoints",
            "--checkpoints, --from-checkpoint: for cordond's sandboxes (cordon create), not a "
            "one-shot run");
    if (r >= 0)
        r = check_binds(&o, &err);
    if (r >= 0 && cdn_tier_lookup(o.spec.tier))
        r = cdn_tier_check_spec(cdn_tier_lookup(o.spec.tier), &o.spec, &err);
    if (r < 0) {
        report_error(&err);
        cdn_spec_free(&o.spec);
        return EXIT_CORDON;
    }
    struct cdn_sandbox sb;
    struct outcome out = {0};
    cdn_sandbox_init(&sb, &o.spec);
    sb.tier = cdn_tier_lookup(o.spec.tier);
    cdn_session_init(&out.session, &sb, &session_ops, NULL);
    run_sandbox(&sb, &o, &out);
    int status = exit_status(&out);
    if (out.setup_failed || out.exec_failed)
        report_error(&out.error);
    else if (out.session.killed)
        fprintf(stderr, "cordon: the sandbox was killed on a violation (--on-violation kill)\n");
    else if (!out.have_exit && !out.timed_out)
        fprintf(stderr, "cordon: the sandbox ended without reporting an exit status%s\n",
                out.usage.oom_kills ? " (out of memory)" : "");
#if !CDN_LEAN
    if (o.json)
        cdn_run_print_record(&sb, &out, status);
#endif
    cdn_session_free(&out.session);
    cdn_tier_release(&sb);
    cdn_spec_free(&o.spec);
    return status;
}
