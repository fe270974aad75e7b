/* cordond's side of the file-access guard (src/monitor/fsguard.h): one
 * fanotify group for the masked kernel files of every sandbox, and one of its
 * own for each sandbox with protected paths, which its init holds too so
 * that the marks survive a restart (a restarted cordond takes it back).
 * Every open of a marked mount waits for our answer. */
#include "daemon.h"
#include "monitor/fsguard.h"
#include "shared/fd-util.h"
#include "tiers/tier.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int global_fd = -1;
static struct event *global_ev;
static LIST_HEAD(, box) guarded = LIST_HEAD_INITIALIZER(guarded);

/* Who may open: init (the API's file operations), processes outside the
 * sandbox, and anything while a verifier step runs alone (api-exec.c). */
static bool allowed(const struct box *b, const struct cdn_fsguard_event *ev)
{
    return ev->pid == b->sb.init_pid || b->verifier == VERIFIER_RUNNING ||
           !cdn_pid_in_sandbox(ev->pid, b->sb.init_pid);
}

/* A refusal in the shared group for a box whose budget is spent: held, its opener waiting, until
 * guard_resume (as a box's own group is not read meanwhile). Answered at once if it cannot be held. */
static bool hold(struct box *b, struct cdn_fsguard_event *ev)
{
    struct box_budget *g = &b->budget;
    if (!g->paused || b->guard_fd >= 0)
        return false;
    if (g->n_held == g->cap_held) {
        size_t cap = g->cap_held ? g->cap_held * 2 : 64;
        int *v = cap <= 65536 ? realloc(g->held, cap * sizeof *v) : NULL;
        if (!v)
            return false;
        g->held = v, g->cap_held = cap;
    }
    g->held[g->n_held++] = ev->fd;
    ev->fd = -1;
    return true;
}

static void decide(struct box *b, int group, struct cdn_fsguard_event *ev)
{
    const struct cdn_guard_mark *m = b ? cdn_guard_marks_find(&b->marks, ev->mnt_id) : NULL;
    if (!m || b->state != BOX_RUNNING || allowed(b, ev)) {
        (void) cdn_fsguard_answer(group, ev, true);
        return;
    }
    /* The violation first (kill mode kills), then the refusal. */
    enum violation_kind kind = m->kind == CDN_GUARD_PROTECT ? VIOLATION_PROTECT : VIOLATION_KERNEL;
    json_t *fields = NULL;
    if (box_violation_logged(b, kind)) { /* its details, only for an event */
        cdn_fsguard_describe(ev);
        fields = json_pack("{s:o, s:s, s:i, s:o}", "path",
                           json_lossy_string((const uint8_t *) ev->path, strlen(ev->path)), "op",
                           ev->exec ? "exec" : "open", "pid", ev->pid, "cmd",
                           json_lossy_string((const uint8_t *) ev->cmdline, strlen(ev->cmdline)));
    }
    box_violation(b, kind, fields);
    if (!hold(b, ev))
        (void) cdn_fsguard_answer(group, ev, false);
}

static struct box *owner_of(int mnt_id)
{
    struct box *b;
    LIST_FOREACH(b, &guarded, guard_link)
    if (cdn_guard_marks_find(&b->marks, mnt_id))
        return b;
    return NULL;
}

/* At most 16 events per call; each one's cost is charged to the budget of the box it is about. */
static void on_events(evutil_socket_t fd, short what, void *arg)
{
    (void) what;
    struct box *own = arg;
    struct cdn_fsguard_event ev[16];
    uint64_t t0 = box_supervise_start();
    int n = cdn_fsguard_read(fd, ev, ELEMENTSOF(ev));
    for (int i = 0; i < n; i++) {
        struct box *b = own ? own : owner_of(ev[i].mnt_id);
        decide(b, fd, &ev[i]);
        if (b && b->guarded) { /* still guarded: kill mode may have ended it */
            box_supervised(b, t0);
            t0 = box_supervise_start();
        }
    }
}

void guard_pause(struct box *b)
{
    if (b->guard_ev)
        (void) event_del(b->guard_ev);
}

static void answer_held(struct box *b)
{
    for (size_t i = 0; i < b->budget.n_held; i++) {
        struct cdn_fsguard_event ev = {.fd = b->budget.held[i]};
        (void) cdn_fsguard_answer(global_fd, &ev, false);
    }
    b->budget.n_held = 0;
}

void guard_resume(struct box *b)
{
    if (b->guard_ev)
        (void) event_add(b->guard_ev, NULL);
    answer_held(b);
}

int guard_global_start(void)
{
    global_fd = cdn_fsguard_open();
    if (global_fd < 0) {
        fprintf(stderr, "cordond: no fanotify group (%s): reads of masked kernel files are not recorded\n",
                strerror(-global_fd));
        return global_fd;
    }
    global_ev = event_new(cordond->base, global_fd, EV_READ | EV_PERSIST, on_events, NULL);
    if (!global_ev || event_add(global_ev, NULL) < 0) {
        guard_global_stop();
        return -ENOMEM;
    }
    return 0;
}

void guard_global_stop(void)
{
    if (global_ev)
        event_free(global_ev);
    global_ev = NULL;
    global_fd = safe_close(global_fd);
}

int guard_prepare(struct box *b, struct cdn_error *err)
{
    b->guard_fd = -1;
    if (b->spec.protect.n == 0 || cdn_tier_is_vm(b->spec.tier))
        return 0; /* a VM guest guards its own (its init's guard, src/agent/init-vm.c) */
    int fd = cdn_fsguard_open();
    if (fd < 0)
        return cdn_error_field(err, -fd, "protect", "protect: no fanotify group for it: %s%s", strerror(-fd),
                               fd == -EMFILE ? " (see fs.fanotify.max_user_groups)" : "");
    b->guard_fd = b->sb.fsguard_fd = fd;
    return 0;
}

/* Tell init which mounts are protected: its files API refuses to follow an agent's symlink into
 * one (src/agent/init-resolve.c). Sent before any request can be, so it is in force for all. */
static void tell_init(struct box *b)
{
    static uint64_t ids[CDN_PROTECTED_MAX];
    uint32_t n = 0;
    for (size_t i = 0; i < b->marks.n && n < CDN_PROTECTED_MAX; i++)
        if (b->marks.v[i].kind == CDN_GUARD_PROTECT)
            ids[n++] = (uint64_t) b->marks.v[i].mnt_id;
    static uint8_t buf[4 + 8 * CDN_PROTECTED_MAX];
    int len = cdn_protected_encode(buf, sizeof buf, ids, n);
    if (len > 0)
        (void) agent_conn_send(&b->agent, CDN_FRAME_PROTECTED, 0, 0, buf, (uint32_t) len);
}

int guard_start(struct box *b, struct cdn_error *err)
{
    if (cdn_tier_is_vm(b->spec.tier))
        return 0; /* a VM's files are the guest kernel's: nothing of the host to mark */
    int group = b->guard_fd >= 0 ? b->guard_fd : global_fd;
    if (group < 0)
        return b->spec.protect.n ? cdn_error_field(err, EBADF, "protect", "protect: no fanotify group") : 0;
    int r = cdn_fsguard_mark_sandbox(group, b->sb.init_pid, &b->spec.protect, true, &b->marks, err);
    if (r < 0)
        return r;
    if (b->spec.protect.n)
        tell_init(b);
    if (b->guard_fd >= 0) {
        b->guard_ev = event_new(cordond->base, b->guard_fd, EV_READ | EV_PERSIST, on_events, b);
        if (!b->guard_ev || event_add(b->guard_ev, NULL) < 0)
            return cdn_error_set(err, ENOMEM, "watch the fanotify group");
    }
    if (!b->guarded)
        LIST_INSERT_HEAD(&guarded, b, guard_link);
    b->guarded = true;
    return 0;
}

int guard_adopt(struct box *b, struct cdn_error *err)
{
    b->guard_fd = -1;
    if (b->spec.tier != CDN_TIER_CONTAINER)
        return 0; /* a VM guest's guard is its own, and lives on in it */
    if (b->spec.protect.n) {
        int fd = b->sb.tier->fsguard_fd ? b->sb.tier->fsguard_fd(&b->sb) : -EOPNOTSUPP;
        if (fd < 0)
            return cdn_error_set(err, -fd, "take back the fanotify group of its protected paths: %s",
                                 strerror(-fd));
        b->guard_fd = fd;
    }
    /* Marking again in the same group changes nothing; it tells us the mounts. */
    return guard_start(b, err);
}

int guard_check_moved(struct box *b, struct cdn_error *err)
{
    if (cdn_tier_is_vm(b->spec.tier) || b->sb.init_pid <= 0)
        return 0; /* a guest checks its own, at the step's EXEC (init-verifier.c) */
    return cdn_fsguard_check_moved(b->sb.init_pid, &b->marks, err);
}

void guard_stop(struct box *b)
{
    answer_held(b);
    free(b->budget.held);
    b->budget.held = NULL;
    b->budget.cap_held = 0;
    if (b->guarded)
        LIST_REMOVE(b, guard_link);
    b->guarded = false;
    if (b->guard_ev)
        event_free(b->guard_ev);
    b->guard_ev = NULL;
    b->guard_fd = safe_close(b->guard_fd);
    b->sb.fsguard_fd = -EBADF;
    cdn_guard_marks_free(&b->marks);
}
