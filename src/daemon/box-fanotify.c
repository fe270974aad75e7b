/* cordond's side of the file-access guard (src/monitor/fanotify.h): one
 * fanotify group for the masked kernel files of every sandbox, and one of its
 * own for each sandbox with protected paths, which its init holds too so
 * that the marks survive a restart (a restarted cordond takes it back).
 * Every open of a marked mount waits for our answer; the box's session
 * (supervise/session.h) decides it. */
#include "registry.h"
#include "monitor/fanotify.h"
#include "monitor/writes.h"
#include "shared/fd-util.h"
#include "tiers/tier.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int global_fd = -1;
static struct event *global_ev;
static LIST_HEAD(, box) guarded = LIST_HEAD_INITIALIZER(guarded);

/* A refusal in the shared group for a box whose budget is spent: held, its opener waiting, until
 * cdn_box_fanotify_resume (as a box's own group is not read meanwhile). Answered at once if it cannot be
 * held. */
static bool hold(struct box *b, struct cdn_fanotify_event *ev)
{
    struct box_budget *g = &b->budget;
    if (!g->paused || b->fanotify_fd >= 0)
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

/* The box's session decides (and counts: kill mode kills), then the refusal is answered or held. */
static void decide(struct box *b, int group, struct cdn_fanotify_event *ev)
{
    enum cdn_answer a = b ? cdn_session_file_open(&b->session, ev) : CDN_ANSWER_CONTINUE;
    if (a == CDN_ANSWER_HOLD) /* the session keeps it until the box's group stops */
        return;
    bool allow = a == CDN_ANSWER_CONTINUE;
    if (allow || !hold(b, ev))
        (void) cdn_fanotify_answer(group, ev, allow);
}

static struct box *owner_of(int mnt_id)
{
    struct box *b;
    LIST_FOREACH(b, &guarded, fanotify_link)
    if (cdn_session_marked(&b->session, mnt_id))
        return b;
    return NULL;
}

/* At most 16 events per call; each one's cost is charged to the budget of the box it is about. */
static void on_events(evutil_socket_t fd, short what, void *arg)
{
    (void) what;
    struct box *own = arg;
    struct cdn_fanotify_event ev[16];
    uint64_t t0 = cdn_box_supervise_start();
    int n = cdn_fanotify_read(fd, ev, ELEMENTSOF(ev));
    for (int i = 0; i < n; i++) {
        struct box *b = own ? own : owner_of(ev[i].mnt_id);
        decide(b, fd, &ev[i]);
        if (b && b->fanotify_listed) { /* still guarded: kill mode may have ended it */
            cdn_box_supervised(b, t0);
            t0 = cdn_box_supervise_start();
        }
    }
}

void cdn_box_fanotify_pause(struct box *b)
{
    if (b->fanotify_ev)
        (void) event_del(b->fanotify_ev);
}

static void answer_held(struct box *b)
{
    for (size_t i = 0; i < b->budget.n_held; i++) {
        struct cdn_fanotify_event ev = {.fd = b->budget.held[i]};
        (void) cdn_fanotify_answer(global_fd, &ev, false);
    }
    b->budget.n_held = 0;
}

void cdn_box_fanotify_resume(struct box *b)
{
    if (b->fanotify_ev)
        (void) event_add(b->fanotify_ev, NULL);
    answer_held(b);
}

int cdn_box_fanotify_global_start(void)
{
    global_fd = cdn_fanotify_open();
    if (global_fd < 0) {
        fprintf(stderr, "cordond: no fanotify group (%s): reads of masked kernel files are not recorded\n",
                strerror(-global_fd));
        return global_fd;
    }
    global_ev = event_new(cdn_daemon->base, global_fd, EV_READ | EV_PERSIST, on_events, NULL);
    if (!global_ev || event_add(global_ev, NULL) < 0) {
        cdn_box_fanotify_global_stop();
        return -ENOMEM;
    }
    return 0;
}

void cdn_box_fanotify_global_stop(void)
{
    if (global_ev)
        event_free(global_ev);
    global_ev = NULL;
    global_fd = safe_close(global_fd);
}

int cdn_box_fanotify_prepare(struct box *b, struct cdn_error *err)
{
    b->fanotify_fd = -1;
    if (b->spec.protect.n == 0 || b->sb.tier->guest_supervises)
        return 0; /* a VM guest guards its own (its init's guard, src/agent/init-vm.c) */
    int fd = cdn_fanotify_open();
    if (fd < 0)
        return cdn_error_field(err, -fd, "protect", "protect: no fanotify group for it: %s%s", strerror(-fd),
                               fd == -EMFILE ? " (see fs.fanotify.max_user_groups)" : "");
    b->fanotify_fd = b->sb.fanotify_fd = fd;
    return 0;
}

/* Tell init which mounts are protected: its files API refuses to follow an agent's symlink into
 * one (src/agent/init-resolve.c). Sent before any request can be, so it is in force for all. */
static void tell_init(struct box *b)
{
    static uint64_t ids[CDN_PROTECTED_MAX];
    uint32_t n = 0;
    const struct cdn_fanotify_marks *m = &b->session.marks;
    for (size_t i = 0; i < m->n && n < CDN_PROTECTED_MAX; i++)
        if (m->v[i].kind == CDN_MARK_PROTECT)
            ids[n++] = (uint64_t) m->v[i].mnt_id;
    static uint8_t buf[4 + 8 * CDN_PROTECTED_MAX];
    int len = cdn_protected_encode(buf, sizeof buf, ids, n);
    if (len > 0)
        (void) cdn_agent_conn_send(&b->agent, CDN_FRAME_PROTECTED, 0, 0, buf, (uint32_t) len);
}

int cdn_box_fanotify_start(struct box *b, struct cdn_error *err)
{
    if (b->sb.tier->guest_supervises)
        return 0; /* a VM's files are the guest kernel's: nothing of the host to mark */
    int group = b->fanotify_fd >= 0 ? b->fanotify_fd : global_fd;
    if (group < 0)
        return b->spec.protect.n ? cdn_error_field(err, EBADF, "protect", "protect: no fanotify group") : 0;
    int r = cdn_session_mark(&b->session, group, err);
    if (r < 0)
        return r;
    if (b->spec.protect.n)
        tell_init(b);
    if (b->fanotify_fd >= 0) {
        b->fanotify_ev = event_new(cdn_daemon->base, b->fanotify_fd, EV_READ | EV_PERSIST, on_events, b);
        if (!b->fanotify_ev || event_add(b->fanotify_ev, NULL) < 0)
            return cdn_error_set(err, ENOMEM, "watch the fanotify group");
    }
    if (!b->fanotify_listed)
        LIST_INSERT_HEAD(&guarded, b, fanotify_link);
    b->fanotify_listed = true;
    return 0;
}

static int own_group(struct box *b, bool watch, struct cdn_error *err);
static void give_group(evutil_socket_t fd, short what, void *arg);

int cdn_box_fanotify_adopt(struct box *b, struct cdn_error *err)
{
    b->fanotify_fd = -1;
    if (!b->sb.tier->fanotify_fd)
        return 0; /* its init holds none (a VM guest's guard is its own, and lives on in it) */
    /* Taken back whenever init holds one: also with no protected path left (a PATCH to []), whose
     * marks of kernel files would otherwise wait for an answer from nobody. */
    int fd = b->sb.tier->fanotify_fd(&b->sb);
    if (fd == -EBADF && b->spec.protect.n) {
        /* Paths protected at run time whose group never reached init (the last cordond ended
         * first): a new one, marked below, and handed to init. */
        int r = own_group(b, false, err);
        if (r < 0 || (r = cdn_box_fanotify_start(b, err)) < 0)
            return r;
        give_group(-1, 0, b);
        return 0;
    }
    if (fd < 0 && fd != -EBADF && b->spec.protect.n)
        return cdn_error_set(err, -fd, "take back the fanotify group of its protected paths: %s",
                             strerror(-fd));
    b->fanotify_fd = fd >= 0 ? fd : -1;
    /* Marking again in the same group changes nothing; it tells us the mounts. */
    return cdn_box_fanotify_start(b, err);
}

int cdn_box_fanotify_check_moved(struct box *b, struct cdn_error *err)
{
    if (b->sb.tier->guest_supervises || b->sb.init_pid <= 0)
        return 0; /* a guest checks its own, at the step's EXEC (init-verifier.c) */
    return cdn_fanotify_check_moved(b->sb.init_pid, &b->session.marks, err);
}

/* Every entry of a that b has not. */
static int strv_minus(const struct cdn_strv *a, const struct cdn_strv *b, struct cdn_strv *out)
{
    for (size_t i = 0; i < a->n; i++) {
        bool in = false;
        for (size_t k = 0; !in && k < b->n; k++)
            in = strcmp(a->v[i], b->v[k]) == 0;
        if (!in && cdn_strv_push(out, a->v[i]) < 0)
            return -ENOMEM;
    }
    return 0;
}

/* Hand the box's group to init (SCM_RIGHTS with a PROTECTED frame), once nothing else waits to be
 * written to it; every 20 ms until then. Until it does, a restart of ours would lose the marks. */
static void give_group(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct box *b = arg;
    uint8_t buf[4 + 8 * CDN_PROTECTED_MAX];
    uint64_t ids[CDN_PROTECTED_MAX];
    uint32_t n = 0;
    const struct cdn_fanotify_marks *m = &b->session.marks;
    for (size_t i = 0; i < m->n && n < CDN_PROTECTED_MAX; i++)
        if (m->v[i].kind == CDN_MARK_PROTECT)
            ids[n++] = (uint64_t) m->v[i].mnt_id;
    int len = cdn_protected_encode(buf, sizeof buf, ids, n);
    int r = len > 0
                ? cdn_agent_conn_send_fd(&b->agent, CDN_FRAME_PROTECTED, buf, (uint32_t) len, b->fanotify_fd)
                : -EINVAL;
    if (r == -EAGAIN) {
        (void) event_add(b->group_ev, &(struct timeval){0, 20000});
        return;
    }
    if (r < 0)
        fprintf(stderr, "cordond: %s: hand the fanotify group to init: %s\n", b->sb.id, strerror(-r));
    event_free(b->group_ev);
    b->group_ev = NULL;
}

/* A group of the box's own, made now; with watch, watched as one made at the start (else
 * cdn_box_fanotify_start does). */
static int own_group(struct box *b, bool watch, struct cdn_error *err)
{
    int fd = cdn_fanotify_open();
    if (fd < 0)
        return cdn_error_field(err, -fd, "protect", "protect: no fanotify group for it: %s%s", strerror(-fd),
                               fd == -EMFILE ? " (see fs.fanotify.max_user_groups)" : "");
    b->fanotify_ev = watch ? event_new(cdn_daemon->base, fd, EV_READ | EV_PERSIST, on_events, b) : NULL;
    b->group_ev = event_new(cdn_daemon->base, -1, 0, give_group, b);
    if ((watch && !b->fanotify_ev) || !b->group_ev || (watch && event_add(b->fanotify_ev, NULL) < 0)) {
        if (b->fanotify_ev)
            event_free(b->fanotify_ev);
        if (b->group_ev)
            event_free(b->group_ev);
        b->fanotify_ev = b->group_ev = NULL;
        (void) close(fd);
        return cdn_error_set(err, ENOMEM, "watch the fanotify group");
    }
    b->fanotify_fd = b->sb.fanotify_fd = fd;
    if (watch && !b->fanotify_listed)
        LIST_INSERT_HEAD(&guarded, b, fanotify_link);
    b->fanotify_listed = b->fanotify_listed || watch;
    return 0;
}

/* While the tier changes the mounts: the opens its work causes on guarded mounts are answered
 * (the worker is no sandbox process: let through), as the loop would. */
static void answer_meanwhile(void *arg)
{
    struct box *b = arg;
    if (b->fanotify_fd >= 0)
        on_events(b->fanotify_fd, EV_READ, b);
    if (global_fd >= 0)
        on_events(global_fd, EV_READ, NULL);
}

int cdn_box_protect(struct box *b, const struct cdn_strv *want, struct cdn_error *err)
{
    struct cdn_error ignored = {0};
    if (!err)
        err = &ignored;
    const struct cdn_tier_ops *t = b->sb.tier;
    _cleanup_(cdn_strv_free) struct cdn_strv add = {0}, drop = {0}, copy = {0};
    if (strv_minus(want, &b->spec.protect, &add) < 0 || strv_minus(&b->spec.protect, want, &drop) < 0 ||
        strv_minus(want, &drop, &copy) < 0)
        return cdn_error_set(err, ENOMEM, "out of memory");
    if (!add.n && !drop.n)
        return 0;
    if (!t->protect)
        return cdn_error_field(err, EOPNOTSUPP, "protect", "protect: fixed at creation on tier %s", t->name);
    /* Released: the binds marked for a match of a dropped pattern that no kept one names, and what is
     * mounted beneath them (by mount id: the record of what was bound, not a path again). */
    const struct cdn_fanotify_marks *old = &b->session.marks;
    _cleanup_free_ int *rel = calloc(old->n + 1, sizeof *rel);
    size_t n_rel = 0;
    if (!rel)
        return cdn_error_set(err, ENOMEM, "out of memory");
    for (size_t i = 0; i < old->n; i++)
        if (old->v[i].kind == CDN_MARK_PROTECT && old->v[i].path &&
            cdn_path_is_protected(old->v[i].path, &drop) && !cdn_path_is_protected(old->v[i].path, want))
            rel[n_rel++] = old->v[i].mnt_id;
    struct cdn_fanotify_marks stale = {0};
    int r = n_rel ? cdn_fanotify_mounts_beneath(b->sb.init_pid, old, want, rel, n_rel, &stale) : 0;
    if (r < 0) {
        cdn_fanotify_marks_free(&stale);
        return cdn_error_set(err, -r, "the sandbox's mounts: %s", strerror(-r));
    }
    bool made = false;
    if (add.n && b->fanotify_fd < 0) {
        if ((r = own_group(b, true, err)) < 0) {
            cdn_fanotify_marks_free(&stale);
            return r;
        }
        made = true;
    }
    _cleanup_free_ struct cdn_protect_mount *bound = NULL;
    size_t n_bound = 0;
    r = t->protect(&b->sb, &add, rel, n_rel, &bound, &n_bound, answer_meanwhile, b, err);
    if (r < 0) { /* protect[k] of the patterns added is protect[i] of the body */
        char *end;
        size_t k = strncmp(err->field, "protect[", 8) == 0 ? strtoul(err->field + 8, &end, 10) : add.n;
        const char *rest = strstr(err->msg, "]: ");
        for (size_t i = 0; k < add.n && rest && i < want->n; i++)
            if (strcmp(want->v[i], add.v[k]) == 0) {
                char msg[sizeof err->msg];
                (void) snprintf(msg, sizeof msg, "protect[%zu]%s", i, rest + 1);
                (void) snprintf(err->field, sizeof err->field, "protect[%zu]", i);
                (void) snprintf(err->msg, sizeof err->msg, "%s", msg);
                break;
            }
        cdn_fanotify_marks_free(&stale);
        goto undo_group;
    }
    /* The new binds marked (and what lies beneath them) before the released ones are unmarked. A
     * failure here leaves the binds read-only and the marks made: refused, not undone (rare: the
     * mount table read once more). */
    struct cdn_fanotify_marks fresh = {0};
    r = n_bound ? cdn_fanotify_mark_mounts(b->fanotify_fd, b->sb.init_pid, bound, n_bound, &fresh, err) : 0;
    for (size_t i = 0; r >= 0 && i < old->n; i++)
        if (!cdn_fanotify_marks_find(&stale, old->v[i].mnt_id))
            r = cdn_fanotify_marks_add(&fresh, old->v[i].mnt_id, old->v[i].kind, old->v[i].path);
    if (r >= 0 && stale.n && b->fanotify_fd >= 0)
        r = cdn_fanotify_unmark(b->fanotify_fd, b->sb.init_pid, &stale, err);
    cdn_fanotify_marks_free(&stale);
    if (r < 0) {
        cdn_fanotify_marks_free(&fresh);
        return r;
    }
    cdn_fanotify_marks_free(&b->session.marks);
    b->session.marks = fresh;
    cdn_strv_free(&b->spec.protect);
    b->spec.protect = copy;
    copy = (struct cdn_strv){0};
    tell_init(b);
    if (made)
        give_group(-1, 0, b);
    return 0;
undo_group:
    if (made) {
        if (b->fanotify_ev)
            event_free(b->fanotify_ev);
        if (b->group_ev)
            event_free(b->group_ev);
        b->fanotify_ev = b->group_ev = NULL;
        b->fanotify_fd = safe_close(b->fanotify_fd);
        b->sb.fanotify_fd = -EBADF;
    }
    return r;
}

void cdn_box_fanotify_stop(struct box *b)
{
    if (b->group_ev)
        event_free(b->group_ev);
    b->group_ev = NULL;
    answer_held(b);
    cdn_session_answer_held(&b->session, b->fanotify_fd >= 0 ? b->fanotify_fd : global_fd);
    free(b->budget.held);
    b->budget.held = NULL;
    b->budget.cap_held = 0;
    if (b->fanotify_listed)
        LIST_REMOVE(b, fanotify_link);
    b->fanotify_listed = false;
    if (b->fanotify_ev)
        event_free(b->fanotify_ev);
    b->fanotify_ev = NULL;
    b->fanotify_fd = safe_close(b->fanotify_fd);
    b->sb.fanotify_fd = -EBADF;
    cdn_session_free(&b->session); /* its marks and held opens; the counts stay */
}
