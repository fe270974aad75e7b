/* cordond's side of the file-access guard (src/monitor/fanotify.h): one
 * fanotify group for the masked kernel files of every sandbox, and one of its
 * own for each sandbox with protected paths, which its init holds too so
 * that the marks survive a restart (a restarted cordond takes it back).
 * Every open of a marked mount waits for our answer; the box's session
 * (supervise/session.h) decides it. */
#include "registry.h"
#include "monitor/fanotify.h"
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

int cdn_box_fanotify_adopt(struct box *b, struct cdn_error *err)
{
    b->fanotify_fd = -1;
    if (!b->sb.tier->fanotify_fd)
        return 0; /* its init holds none (a VM guest's guard is its own, and lives on in it) */
    if (b->spec.protect.n) {
        int fd = b->sb.tier->fanotify_fd(&b->sb);
        if (fd < 0)
            return cdn_error_set(err, -fd, "take back the fanotify group of its protected paths: %s",
                                 strerror(-fd));
        b->fanotify_fd = fd;
    }
    /* Marking again in the same group changes nothing; it tells us the mounts. */
    return cdn_box_fanotify_start(b, err);
}

int cdn_box_fanotify_check_moved(struct box *b, struct cdn_error *err)
{
    if (b->sb.tier->guest_supervises || b->sb.init_pid <= 0)
        return 0; /* a guest checks its own, at the step's EXEC (init-verifier.c) */
    return cdn_fanotify_check_moved(b->sb.init_pid, &b->session.marks, err);
}

void cdn_box_fanotify_stop(struct box *b)
{
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
