/* A sandbox's supervision session (session.h). Runs in the supervising host process (cordond,
 * `cordon run`), as root in the initial namespaces, on its owner's loop thread. Everything it
 * reads of the sandbox — notifications, the paths and command lines of callers, fanotify events,
 * a guest's VIOLATION frames — is the sandbox's and hostile: it is counted and answered, never
 * trusted for more than which rule applies. The fds (listener, fanotify group) are the owner's. */
#include "supervise/session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <time.h>
#include <unistd.h>

#include "proto/frame.h"
#include "monitor/watch.h"
#include "monitor/writes.h"
#include "shared/fd-util.h"

static double now_unix(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double) t.tv_sec + (double) t.tv_nsec / 1e9;
}

void cdn_session_init(struct cdn_session *s, struct cdn_sandbox *sb, const struct cdn_session_ops *ops,
                      void *arg)
{
    *s = (struct cdn_session){.sb = sb, .ops = ops, .arg = arg};
}

void cdn_session_free(struct cdn_session *s)
{
    cdn_fanotify_marks_free(&s->marks);
    for (size_t i = 0; i < s->n_held; i++)
        (void) close(s->held[i]);
    free(s->held);
    s->held = NULL;
    s->n_held = s->cap_held = 0;
}

enum cdn_session_phase cdn_session_phase(struct cdn_session *s)
{
    if (s->ops && s->ops->phase)
        return s->ops->phase(s);
    return s->killed ? CDN_SESSION_ENDED : CDN_SESSION_RUNNING;
}

static bool supervising(struct cdn_session *s)
{
    enum cdn_session_phase p = cdn_session_phase(s);
    return p == CDN_SESSION_RUNNING || p == CDN_SESSION_VERIFIER;
}

static bool wants_detail(struct cdn_session *s, enum cdn_vk kind)
{
    return s->ops && s->ops->wants_detail && s->ops->wants_detail(s, kind);
}

bool cdn_session_violation(struct cdn_session *s, enum cdn_vk kind, const struct cdn_violation_detail *d)
{
    double now = now_unix();
    s->counts[kind]++;
    if (!s->first)
        s->first = now;
    s->last = now;
    if (s->ops && s->ops->counted)
        s->ops->counted(s, kind, d);
    /* One kill, at the first violation while the sandbox runs; the owner's state then says why. */
    if (s->sb->spec->on_violation == CDN_VIOLATION_KILL && !s->killed && supervising(s) && s->ops &&
        s->ops->kill && s->ops->kill(s, kind) == 0)
        s->killed = true;
    return supervising(s);
}

/* The answer to a violating attempt (policy.h), now that it has been counted. */
static enum cdn_answer answer_for(struct cdn_session *s, enum cdn_attempt a)
{
    return cdn_violation_answer(s->sb->spec->on_violation, a, !supervising(s));
}

/* ---- the seccomp listener ---- */

/* A reported path write (seccomp-policy.h): a violation when it aims at a protected or a system
 * path (one record per call), else nothing; the kernel refuses those itself (read-only binds,
 * Landlock), and deny and kill modes also answer EPERM. init's own writes are the operator's (the
 * files API: what it is asked is the operator's, and an agent's symlink on its way is judged and
 * counted by init itself): never a violation, as init's opens are not (cdn_session_file_open).
 * Seen counted before: a files.write to a protected path gave a "protect" violation of
 * cmd "cordon-init" (test_harness.py test_the_operators_file_requests_are_never_violations). */
static void on_reported(struct cdn_session *s, int fd, const struct cdn_seccomp_event *ev)
{
    struct cdn_write_attempt w;
    enum cdn_vk kind = _CDN_VK_MAX;
    int i = 0;
    if (supervising(s) && ev->pid != s->sb->init_pid && cdn_write_attempt_read(ev, &w) == 0)
        for (; i < w.n && kind == _CDN_VK_MAX; i++)
            kind = cdn_write_is_protected(&w, i, &s->sb->spec->protect)             ? CDN_VK_PROTECT
                   : cdn_path_is_system(w.path[i]) && !s->sb->spec->writable_system ? CDN_VK_SYSTEM_WRITE
                                                                                    : _CDN_VK_MAX;
    enum cdn_answer a = supervising(s) ? CDN_ANSWER_CONTINUE : CDN_ANSWER_HOLD;
    if (kind != _CDN_VK_MAX) {
        char cmd[256];
        struct cdn_violation_detail d = {.pid = ev->pid, .cmd = cmd, .path = w.path[i - 1], .op = w.op};
        bool detail = wants_detail(s, kind);
        if (detail) /* read while the caller waits: only for a record */
            cdn_read_cmdline(ev->pid, cmd, sizeof cmd);
        (void) cdn_session_violation(s, kind, detail ? &d : NULL);
        a = answer_for(s, CDN_ATTEMPT_WRITE);
    }
    if (a == CDN_ANSWER_DENY)
        (void) cdn_seccomp_notify_deny(fd, ev);
    else if (a == CDN_ANSWER_CONTINUE)
        (void) cdn_seccomp_notify_continue(fd, ev);
}

/* inotify_add_watch by a sandbox process (watch.h): made here, on the object resolved here, or
 * refused on a protected path (a violation: the watch would tell the names the harness reads
 * there). A sandbox without protected paths, or a verifier step (everything is open to it), lets
 * the kernel do it. */
static void on_watch(struct cdn_session *s, int fd, const struct cdn_seccomp_event *ev)
{
    /* init's own watch is the operator's (the files API's …/watch, init-watch.c): it judged the path
     * itself, and what the operator does is never a violation. */
    if (!s->sb->spec->protect.n || cdn_session_phase(s) == CDN_SESSION_VERIFIER ||
        ev->pid == s->sb->init_pid) {
        (void) cdn_watch_answer(fd, ev->id, 0, 0, true);
        return;
    }
    struct cdn_watch w;
    int r = cdn_watch_open(fd, ev->id, ev->pid, ev->args, &w);
    if (r < 0) {
        (void) cdn_watch_answer(fd, ev->id, 0, -r, false);
        return;
    }
    const struct cdn_fanotify_mark *m = cdn_fanotify_marks_find(&s->marks, (int) w.mnt_id);
    if (m && m->kind == CDN_MARK_PROTECT) {
        char cmd[256];
        bool detail = wants_detail(s, CDN_VK_PROTECT);
        if (detail)
            cdn_read_cmdline(ev->pid, cmd, sizeof cmd);
        struct cdn_violation_detail d = {.pid = ev->pid, .cmd = cmd, .path = w.path, .op = "inotify"};
        (void) cdn_session_violation(s, CDN_VK_PROTECT, detail ? &d : NULL);
        if (answer_for(s, CDN_ATTEMPT_CALL) == CDN_ANSWER_DENY)
            (void) cdn_watch_answer(fd, ev->id, 0, EPERM, false);
    } else {
        /* With the caller's file credentials: a watch needs read permission on the object. */
        (void) setfsgid(w.fsgid);
        (void) setfsuid(w.fsuid);
        r = cdn_watch_add(&w);
        (void) setfsuid(0);
        (void) setfsgid(0);
        (void) cdn_watch_answer(fd, ev->id, r < 0 ? 0 : r, r < 0 ? -r : 0, false);
    }
    cdn_watch_close(&w);
}

/* A watched denial: a syscall violation, then EPERM — or, killed on it, no answer at all: the
 * caller stays in its wait until the end of the pid namespace takes it (an EPERM after the kill
 * would let it run on for the moment the kill takes to reach it). */
static void on_denied(struct cdn_session *s, int fd, const struct cdn_seccomp_event *ev)
{
    char cmd[256];
    bool detail = wants_detail(s, CDN_VK_SYSCALL);
    if (detail) /* the caller waits in the call meanwhile */
        cdn_read_cmdline(ev->pid, cmd, sizeof cmd);
    struct cdn_violation_detail d = {
        .pid = ev->pid, .cmd = cmd, .syscall = true, .nr = ev->nr, .arch = ev->arch, .args = ev->args};
    (void) cdn_session_violation(s, CDN_VK_SYSCALL, detail ? &d : NULL);
    if (answer_for(s, CDN_ATTEMPT_CALL) == CDN_ANSWER_DENY)
        (void) cdn_seccomp_notify_deny(fd, ev);
}

int cdn_session_seccomp(struct cdn_session *s, int fd)
{
    struct cdn_seccomp_event ev;
    int r = cdn_seccomp_notify_recv(fd, &ev);
    if (r < 0)
        return r;
    if (cdn_seccomp_is_reported(ev.nr))
        on_reported(s, fd, &ev);
    else if (cdn_seccomp_is_watch(ev.nr))
        on_watch(s, fd, &ev);
    else
        on_denied(s, fd, &ev);
    return 0;
}

/* ---- the fanotify guard ---- */

int cdn_session_mark(struct cdn_session *s, int group, struct cdn_error *err)
{
    return cdn_fanotify_mark_sandbox(group, s->sb->init_pid, &s->sb->spec->protect, true, &s->marks, err);
}

bool cdn_session_marked(const struct cdn_session *s, int mnt_id)
{
    return cdn_fanotify_marks_find(&s->marks, mnt_id) != NULL;
}

/* An open of a sandbox process once the kill is out: kept unanswered (at most 4096; beyond,
 * refused). false: not kept, answer it. */
static bool hold_open(struct cdn_session *s, struct cdn_fanotify_event *ev)
{
    if (s->n_held == s->cap_held) {
        size_t cap = s->cap_held ? s->cap_held * 2 : 16;
        int *v = cap <= 4096 ? realloc(s->held, cap * sizeof *v) : NULL;
        if (!v)
            return false;
        s->held = v, s->cap_held = cap;
    }
    s->held[s->n_held++] = ev->fd;
    ev->fd = -1;
    return true;
}

/* Who may open a marked mount: init (the API's file operations), processes outside the sandbox,
 * anything while a verifier step runs alone (cordond's api-exec.c), and anything before the
 * sandbox runs (nothing of it runs yet) or after it ended without a kill of ours. Once the kill
 * is out, a sandbox process's open is held: a kill is not instant (init must be scheduled to die,
 * then the kernel ends the rest), and a refusal or a pass would let a second reader, or the
 * violator's next command, run in that moment. Seen before the hold: with `--on-violation kill`,
 * `cat key; echo after` printed "after" under load (test_protect.py test_cordon_run_protect), and
 * an open after the kill was let through (test-session.c file_open_decision). */
enum cdn_answer cdn_session_file_open(struct cdn_session *s, struct cdn_fanotify_event *ev)
{
    const struct cdn_fanotify_mark *m = cdn_fanotify_marks_find(&s->marks, ev->mnt_id);
    pid_t init = s->sb->init_pid;
    if (!m || ev->pid == init)
        return CDN_ANSWER_CONTINUE;
    /* Its init may be gone already (it is killed first): the mark says the opener is the sandbox's. */
    if (s->killed)
        return hold_open(s, ev) ? CDN_ANSWER_HOLD : CDN_ANSWER_DENY;
    if (cdn_session_phase(s) != CDN_SESSION_RUNNING || !cdn_pid_in_sandbox(ev->pid, init))
        return CDN_ANSWER_CONTINUE;
    enum cdn_vk kind = m->kind == CDN_MARK_PROTECT ? CDN_VK_PROTECT : CDN_VK_KERNEL;
    bool detail = wants_detail(s, kind);
    if (detail)
        cdn_fanotify_describe(ev);
    struct cdn_violation_detail d = {
        .pid = ev->pid, .cmd = ev->cmdline, .path = ev->path, .op = ev->exec ? "exec" : "open"};
    (void) cdn_session_violation(s, kind, detail ? &d : NULL);
    return answer_for(s, CDN_ATTEMPT_OPEN) == CDN_ANSWER_HOLD && hold_open(s, ev) ? CDN_ANSWER_HOLD
                                                                                  : CDN_ANSWER_DENY;
}

void cdn_session_answer_held(struct cdn_session *s, int group)
{
    for (size_t i = 0; i < s->n_held; i++) {
        struct cdn_fanotify_event ev = {.fd = s->held[i]};
        (void) cdn_fanotify_answer(group, &ev, false);
    }
    s->n_held = 0;
}

/* ---- a VM guest's reports ---- */

int cdn_session_guest_violation(struct cdn_session *s, const uint8_t *p, uint32_t len)
{
    struct cdn_violation_msg v;
    /* a SYMLINK comes on its file request's channel, never here */
    if (cdn_violation_decode(p, len, &v) < 0 || v.kind == CDN_VIOLATION_MSG_SYMLINK)
        return -EPROTO;
    bool protect = v.kind == CDN_VIOLATION_MSG_PROTECT; /* the guest's fanotify process refused an open */
    enum cdn_vk kind = protect ? CDN_VK_PROTECT : CDN_VK_SYSCALL;
    struct cdn_violation_detail d = {.pid = (int) v.pid, .cmd = v.cmd, .guest = true};
    if (protect)
        d.path = v.path, d.op = v.op;
    else
        d.syscall = true, d.nr = (int) v.nr, d.arch = v.arch, d.args = v.args;
    /* In kill mode the guest left the call unanswered; the kill ends the guest. */
    (void) cdn_session_violation(s, kind, wants_detail(s, kind) ? &d : NULL);
    return 0;
}
