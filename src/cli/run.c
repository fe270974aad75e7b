/* `cordon run`: one sandbox, one command, no daemon. Runs on the host as
 * root; stdin/stdout/stderr are handed to the command as they are. */
#include "run.h"
#include "cli.h"
#include "run-flags.h"
#include "agent/frame.h"
#include "shared/fd-util.h"
#include "core/paths.h"
#include "tiers/container/seccomp-policy.h"
#include "tiers/tier.h"
#if !CDN_LEAN
#include "monitor/fsguard.h"
#include "monitor/writes.h"
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

/* Encode the EXEC frame up front: a command too large for one frame is
 * refused before any sandbox exists. Returns the payload length. */
static int encode_exec(const struct cdn_spec *spec, char *const *argv, uint8_t **ret, struct cdn_error *err)
{
    _cleanup_(cdn_strv_free) struct cdn_strv envv = {0};
    if (cdn_exec_env(spec, getenv("TERM"), NULL, &envv) < 0)
        return cdn_error_set(err, ENOMEM, "out of memory");
    char *const *env = envv.v;
    size_t need = CDN_EXEC_FIXED + strlen(spec->workdir) + 1; /* sized exactly: no 1 MiB allocation per run */
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
        &(struct cdn_exec_args){
            /* A guest cannot share our stdio: its output comes as frames (read_agent). */
            .flags = CDN_EXEC_SHUTDOWN_ON_EXIT | (cdn_tier_is_vm(spec->tier) ? CDN_EXEC_PIPES : 0),
            .cwd = spec->workdir,
            .argv = argv,
            .envp = env});
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
#if !CDN_LEAN /* the lean build runs containers only */
    else if (h.type == CDN_FRAME_USAGE && h.channel == 0 && cdn_tier_is_vm(sb->spec->tier))
        (void) cdn_microvm_usage_frame(sb, buf, (size_t) n);
#endif
    else if (h.type == CDN_FRAME_VIOLATION && h.channel == 0) { /* a guest's watched denial */
        struct cdn_violation_msg v;
        if (cdn_violation_decode(buf, (size_t) n, &v) < 0)
            return;
        if (v.kind == CDN_VIOLATION_MSG_PROTECT)
            o->violations_protect++;
        else
            o->violations_syscall++;
        if (sb->spec->on_violation == CDN_VIOLATION_KILL && !o->violation_killed &&
            sb->tier->kill(sb, SIGKILL) == 0)
            o->violation_killed = true; /* the guest left the call unanswered: it never runs on */
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

/* A watched denial (seccomp user notification): EPERM, and a violation. */
static void supervise_syscalls(struct cdn_sandbox *sb, struct outcome *o, struct pollfd *pfd)
{
    if (!(pfd->revents & POLLIN)) { /* HUP: no process left under the filter */
        (void) safe_close(pfd->fd);
        pfd->fd = -1;
        return;
    }
    struct cdn_seccomp_event ev;
    if (cdn_seccomp_notify_recv(pfd->fd, &ev) < 0)
        return;
    if (cdn_seccomp_is_watch(ev.nr)) {
        /* No harness opens a protected path during a run (no files API, no verifier step): a
         * watch there tells nothing, and the kernel makes it. */
        (void) cdn_seccomp_notify_continue(pfd->fd, &ev);
        return;
    }
    if (cdn_seccomp_is_reported(ev.nr)) {
        bool violation = false;
#if !CDN_LEAN /* the lean build keeps no record: it lets them run, the kernel refuses them there */
        struct cdn_write_attempt w;
        for (int i = 0; cdn_write_attempt_read(&ev, &w) == 0 && i < w.n && !violation; i++) {
            if (cdn_write_is_protected(&w, i, &sb->spec->protect))
                violation = true, o->violations_protect++;
            else if (cdn_path_is_system(w.path[i]))
                violation = true, o->violations_system_write++;
        }
        if (violation && sb->spec->on_violation == CDN_VIOLATION_KILL) {
            if (!o->violation_killed && sb->tier->kill(sb, SIGKILL) == 0)
                o->violation_killed = true;
            if (o->violation_killed)
                return; /* no answer: the caller waits until the kill takes it (as below) */
        }
#endif
        if (violation && sb->spec->on_violation != CDN_VIOLATION_LOG)
            (void) cdn_seccomp_notify_deny(pfd->fd, &ev);
        else
            (void) cdn_seccomp_notify_continue(pfd->fd, &ev);
        return;
    }
    o->violations_syscall++;
    if (sb->spec->on_violation == CDN_VIOLATION_KILL) {
        if (!o->violation_killed && sb->tier->kill(sb, SIGKILL) == 0)
            o->violation_killed = true;
        /* No answer at all: the caller stays in its wait until the end of
         * the pid namespace takes it. Answering EPERM after the kill would
         * let it run on for the moment the kill takes to reach it. */
        if (o->violation_killed)
            return;
    }
    (void) cdn_seccomp_notify_deny(pfd->fd, &ev);
}

#if !CDN_LEAN
/* Opens of the marked mounts (fsguard.h): a sandbox process is refused and
 * that is a violation; init and host processes pass. */
static void supervise_files(struct cdn_sandbox *sb, struct outcome *o, const struct cdn_guard_marks *marks,
                            struct pollfd *pfd)
{
    struct cdn_fsguard_event ev[16];
    int n = cdn_fsguard_read(pfd->fd, ev, ELEMENTSOF(ev));
    for (int i = 0; i < n; i++) {
        const struct cdn_guard_mark *m = cdn_guard_marks_find(marks, ev[i].mnt_id);
        bool allow = !m || ev[i].pid == sb->init_pid || !cdn_pid_in_sandbox(ev[i].pid, sb->init_pid);
        if (!allow) {
            if (m->kind == CDN_GUARD_PROTECT)
                o->violations_protect++;
            else
                o->violations_kernel++;
            if (sb->spec->on_violation == CDN_VIOLATION_KILL && !o->violation_killed) {
                o->violation_killed = true;
                (void) sb->tier->kill(sb, SIGKILL);
            }
        }
        (void) cdn_fsguard_answer(pfd->fd, &ev[i], allow);
    }
}

/* Once init runs, before the command does: mark what the monitor guards.
 * Without marks a protected path would be readable, so that failing ends the run. */
static void guard_files(struct cdn_sandbox *sb, struct outcome *o, int group, struct cdn_guard_marks *marks,
                        struct pollfd *pfd)
{
    struct cdn_error e = {0};
    if (group >= 0 &&
        cdn_fsguard_mark_sandbox(group, sb->init_pid, &sb->spec->protect, true, marks, &e) == 0) {
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
#endif

/* Poll until init has exited and been reaped. The command's EXEC frame is
 * sent here when deferred (exec != NULL): after the monitor's marks. */
static int supervise(struct cdn_sandbox *sb, int sfd, struct outcome *o, const struct timespec *t0,
                     const uint8_t *exec, int exec_len, int group)
{
#if !CDN_LEAN
    struct cdn_guard_marks marks = {0};
#else
    (void) group;
#endif
    struct pollfd pfd[6] = {
        {.fd = sb->init_pidfd, .events = POLLIN},
        {.fd = sb->agent_fd, .events = POLLIN},
        {.fd = sb->setup_fd, .events = POLLIN},
        {.fd = sfd, .events = POLLIN},
        {.fd = -1, .events = POLLIN}, /* the seccomp listener, once init runs */
        {.fd = -1, .events = POLLIN}, /* the fanotify group, once marked */
    };
    uint64_t timeout = sb->spec->limits.timeout_ms;
    for (;;) {
        int wait_ms = -1;
        if (timeout && !o->timed_out) {
            double left = (double) timeout - ms_since(t0);
            wait_ms = left <= 0 ? 0 : (int) left + 1;
        }
        int r = poll(pfd, 6, wait_ms);
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
#if !CDN_LEAN
            if (!o->setup_failed && !cdn_tier_is_vm(sb->spec->tier)) /* a VM guest guards its own */
                guard_files(sb, o, group, &marks, &pfd[5]);
#endif
            if (exec && !o->setup_failed)
                (void) cdn_frame_send(sb->agent_fd, CDN_FRAME_EXEC, EXEC_CHANNEL, exec, (uint32_t) exec_len);
        }
#if !CDN_LEAN
        if (pfd[5].revents)
            supervise_files(sb, o, &marks, &pfd[5]);
#endif
        if (pfd[4].revents)
            supervise_syscalls(sb, o, &pfd[4]);
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
#if !CDN_LEAN
    cdn_guard_marks_free(&marks);
#endif
    return 0;
}

static int exit_status(const struct outcome *o)
{
    if (o->setup_failed || o->exec_failed)
        return EXIT_CORDON;
    if (o->timed_out)
        return EXIT_TIMEOUT;
    if (o->violation_killed)
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
           o->spec.tier != CDN_TIER_CONTAINER || o->spec.watch_writes || !cdn_seccomp_cache_present(cache);
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
    int exec_len = encode_exec(&o->spec, o->argv, &exec_frame, &out->error);
    int sfd = exec_len < 0 ? -EBADF : block_signals();
#if !CDN_LEAN
    struct run_egress *egress = NULL;
    if (exec_len >= 0 && cdn_run_egress_prepare(sb, out, &egress, &out->error) < 0)
        exec_len = -1;
#endif
    int group = -EBADF; /* the monitor's fanotify group (fsguard.h) */
#if !CDN_LEAN
    if (!cdn_tier_is_vm(sb->spec->tier)) /* a VM guest's files are the guest kernel's */
        group = cdn_fsguard_open();
    if (sb->spec->protect.n > 0)
        sb->fsguard_fd = group;
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
#endif
    /* A failed send means init is gone; supervise() learns why from the pidfd and setup pipe. */
    /* With protected paths the command waits for the monitor's marks (supervise()). */
    bool defer = sb->spec->protect.n > 0;
    if (!defer)
        (void) cdn_frame_send(sb->agent_fd, CDN_FRAME_EXEC, EXEC_CHANNEL, exec_frame, (uint32_t) exec_len);
    (void) supervise(sb, sfd, out, &t0, defer ? exec_frame : NULL, exec_len, group);
    (void) safe_close(group);
#if !CDN_LEAN
    /* First: its thread may still act on the sandbox (a kill on violation),
     * whose pidfd the teardown below closes. The veth goes now; the
     * namespace with the sandbox's last process. */
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
    if (r >= 0)
        r = cdn_spec_validate(&o.spec, &err);
    if (r >= 0)
        r = check_binds(&o, &err);
    if (r < 0) {
        report_error(&err);
        cdn_spec_free(&o.spec);
        return EXIT_CORDON;
    }
    struct cdn_sandbox sb;
    struct outcome out = {0};
    cdn_sandbox_init(&sb, &o.spec);
    sb.tier = cdn_tier_lookup(o.spec.tier);
    run_sandbox(&sb, &o, &out);
    int status = exit_status(&out);
    if (out.setup_failed || out.exec_failed)
        report_error(&out.error);
    else if (out.violation_killed)
        fprintf(stderr, "cordon: the sandbox was killed on a violation (--on-violation kill)\n");
    else if (!out.have_exit && !out.timed_out)
        fprintf(stderr, "cordon: the sandbox ended without reporting an exit status%s\n",
                out.usage.oom_kills ? " (out of memory)" : "");
#if !CDN_LEAN
    if (o.json)
        cdn_run_print_record(&sb, &out, status);
#endif
    cdn_spec_free(&o.spec);
    return status;
}
