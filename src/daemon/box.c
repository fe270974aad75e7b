/* cordond's sandboxes ("boxes"): create, watch, time out, delete (adopt: box-adopt.c).
 *
 * A box wraps the tier's struct cdn_sandbox with what the daemon adds: the
 * agent connection, its state, its event log and lifetime timer. Creating
 * one is the tier's create (synchronous, a few ms) and then waiting, in the
 * loop, for the setup child's report: EOF means cordon-init runs, and the
 * pending POST is answered 201; a struct cdn_error means setup failed.
 *
 * Boxes are persistent sandboxes (sandbox.h): they outlive cordond. Each has
 * a record and a listening socket in the sandbox directory (record.c), so a
 * restarted cordond adopts them; what it cannot adopt it cleans up.
 * Deleting is asynchronous: init is killed, the box leaves the API at once,
 * and when init's pidfd reports its exit (every process of the sandbox is
 * gone then) the tier removes the cgroup and the record goes. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "box-internal.h"
#include "registry.h"
#include "api.h"
#include "core/json-util.h"
#include "confine/slot.h"
#include "core/paths.h"
#include "images.h"
#include "record.h"
#include "shared/fd-util.h"
#include "tiers/tier.h"

static const char *const state_names[_BOX_STATE_MAX] = {"starting", "running", "exited"};

const char *cdn_box_state_name(enum box_state s)
{
    return state_names[s];
}

double box_now_unix(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double) t.tv_sec + (double) t.tv_nsec / 1e9;
}

/* ---- the seccomp supervisor: watched denials become violations ---- */

static void monitor_stop(struct box *b)
{
    if (!b->monitor_ev)
        return;
    int fd = event_get_fd(b->monitor_ev);
    event_free(b->monitor_ev);
    b->monitor_ev = NULL;
    (void) close(fd);
}

/* At most 16 notifications of listener fd per call (the loop serves every other event between two
 * calls), and what they cost is charged to the box's budget (box-events.c), which stops the events when
 * spent. The session (supervise/session.h) decides and answers each. false: fd hung up (nothing that
 * it supervises can call any more). */
static bool serve_listener(struct box *b, int fd)
{
    uint64_t t0 = cdn_box_supervise_start();
    for (int i = 0; i < 16 && !b->budget.paused; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 0) <= 0)
            break;
        if (!(p.revents & POLLIN))
            return false;
        int r = cdn_session_seccomp(&b->session, fd);
        if (r == -ENOENT)
            continue;
        if (r < 0)
            break;
        if (b->state != BOX_RUNNING)
            return true; /* killed on it */
    }
    cdn_box_supervised(b, t0);
    return true;
}

static void on_monitor(evutil_socket_t fd, short what, void *arg)
{
    (void) what;
    if (!serve_listener(arg, fd))
        monitor_stop(arg);
}

struct box_listener {
    struct box *b;
    struct event *ev;
    LIST_ENTRY(box_listener) link;
};

static void listener_free(struct box_listener *l)
{
    LIST_REMOVE(l, link);
    int fd = event_get_fd(l->ev);
    event_free(l->ev);
    (void) close(fd);
    free(l);
}

static void on_exec_monitor(evutil_socket_t fd, short what, void *arg)
{
    (void) what;
    struct box_listener *l = arg;
    if (!serve_listener(l->b, fd))
        listener_free(l);
}

void cdn_box_listeners_pause(struct box *b, bool pause)
{
    struct box_listener *l;
    LIST_FOREACH(l, &b->listeners, link)
    (void) (pause ? event_del(l->ev) : event_add(l->ev, NULL));
}

static void listeners_stop(struct box *b)
{
    while (!LIST_EMPTY(&b->listeners))
        listener_free(LIST_FIRST(&b->listeners));
}

/* Whether pid is in the box's sandbox: its pid namespace is init's (it was born there). */
static bool in_sandbox(const struct box *b, pid_t pid)
{
    char a[64], c[64];
    struct stat sa, sc;
    (void) snprintf(a, sizeof a, "/proc/%d/ns/pid", (int) pid);
    (void) snprintf(c, sizeof c, "/proc/%d/ns/pid", (int) b->sb.init_pid);
    return stat(a, &sa) == 0 && stat(c, &sc) == 0 && sa.st_ino == sc.st_ino && sa.st_dev == sc.st_dev;
}

int cdn_box_take_listener(struct box *b, pid_t pid, int fd, struct cdn_error *err)
{
    _cleanup_close_ int pidfd = (int) syscall(SYS_pidfd_open, pid, 0); /* pinned before it is checked */
    if (pidfd < 0 || b->state != BOX_RUNNING || !in_sandbox(b, pid))
        return cdn_error_field(err, ESRCH, "pid", "pid: %d is not a process of sandbox %s", (int) pid,
                               b->sb.id);
    _cleanup_close_ int got = (int) syscall(SYS_pidfd_getfd, pidfd, fd, 0);
    if (got < 0)
        return cdn_error_field(err, pidfd < 0 ? -pidfd : errno, "fd", "fd: %d of process %d: %m", fd,
                               (int) pid);
    char link[64], what[64] = {0};
    (void) snprintf(link, sizeof link, "/proc/self/fd/%d", got);
    if (readlink(link, what, sizeof what - 1) < 0 || strcmp(what, "anon_inode:seccomp notify") != 0)
        return cdn_error_field(err, EINVAL, "fd", "fd: %d of process %d is not a seccomp listener", fd,
                               (int) pid);
    struct box_listener *l = calloc(1, sizeof *l);
    if (!l || !(l->ev = event_new(cdn_daemon->base, got, EV_READ | EV_PERSIST, on_exec_monitor, l))) {
        free(l);
        return cdn_error_set(err, ENOMEM, "out of memory");
    }
    l->b = b;
    if (!b->budget.paused && event_add(l->ev, NULL) < 0) {
        event_free(l->ev);
        free(l);
        return cdn_error_set(err, ENOMEM, "out of memory");
    }
    TAKE_FD(got); /* listener_free() closes it */
    LIST_INSERT_HEAD(&b->listeners, l, link);
    return 0;
}

/* Once init runs: supervise its watched denials. Without it they would block. */
void box_monitor_start(struct box *b)
{
    if (b->monitor_ev || !b->sb.tier->monitor_fd)
        return;
    _cleanup_close_ int fd = b->sb.tier->monitor_fd(&b->sb);
    if (fd < 0) {
        fprintf(stderr, "cordond: sandbox %s: no seccomp listener: %s\n", b->sb.id, strerror(-fd));
        return;
    }
    b->monitor_ev = event_new(cdn_daemon->base, fd, EV_READ | EV_PERSIST, on_monitor, b);
    if (!b->monitor_ev || event_add(b->monitor_ev, NULL) < 0) {
        if (b->monitor_ev)
            event_free(b->monitor_ev);
        b->monitor_ev = NULL;
        return;
    }
    TAKE_FD(fd); /* monitor_stop() closes it */
}

/* A new cgroup (a create's, a rollback's), reused or not, counts OOM kills and pids-limit hits from
 * where it stands: only those from here on are the box's violations. */
void box_rebase_limits(struct box *b)
{
    struct cdn_usage u0;
    if (b->sb.tier->usage(&b->sb, &u0) == 0) {
        b->viol.oom_seen = u0.oom_kills;
        b->viol.pids_seen = b->viol.pids_base = u0.pids_max_hits;
    }
}

void cdn_box_check_limits(struct box *b)
{
    struct cdn_usage u;
    if (b->state != BOX_RUNNING || b->sb.tier->usage(&b->sb, &u) < 0)
        return;
    if (u.oom_kills > b->viol.oom_seen) {
        uint64_t n = u.oom_kills - b->viol.oom_seen;
        b->viol.oom_seen = u.oom_kills;
        cdn_box_violation(b, CDN_VK_OOM,
                          json_pack("{s:I, s:I}", "oom_kills", (json_int_t) n, "memory_mb",
                                    (json_int_t) b->spec.limits.memory_mb));
    }
    if (b->state != BOX_RUNNING)
        return; /* killed on it */
    /* The writable layer (of limits.disk_mb): full now, and not at the last look. */
    bool full;
    if (b->sb.tier->disk_full && b->sb.tier->disk_full(&b->sb, &full) == 0) {
        if (full && !b->viol.disk_full)
            cdn_box_violation(b, CDN_VK_DISK,
                              json_pack("{s:I}", "disk_mb", (json_int_t) b->spec.limits.disk_mb));
        b->viol.disk_full = full;
        if (b->state != BOX_RUNNING)
            return;
    }
    if (u.pids_max_hits > b->viol.pids_seen) {
        uint64_t n = u.pids_max_hits - b->viol.pids_seen;
        b->viol.pids_seen = u.pids_max_hits;
        if (b->state == BOX_RUNNING)
            cdn_box_violation(b, CDN_VK_PIDS,
                              json_pack("{s:I, s:I}", "pids_limit_hits", (json_int_t) n, "pids",
                                        (json_int_t) b->spec.limits.pids));
    }
}

json_t *cdn_box_to_json(struct box *b)
{
    json_t *labels = cdn_strv_to_json_map(&b->spec.labels);
    _cleanup_free_ char *spec = cdn_spec_to_json(&b->spec);
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:f, s:o, s:I}", "id", b->sb.id, "state",
                          cdn_box_state_name(b->state), "tier", b->sb.tier->name, "image", b->spec.image,
                          "created_at", b->created_unix, "labels", labels, "execs", (json_int_t) b->execs);
    if (o && spec)
        json_object_set_new(o, "spec", json_loads(spec, 0, NULL));
    if (o && b->exit_reason[0])
        json_object_set_new(o, "exit_reason", json_string(b->exit_reason));
    if (o && b->paused)
        (void) json_object_update_new(o, json_pack("{s:b, s:f}", "paused", 1, "paused_at", b->paused_unix));
    if (o && b->ended_unix) /* kept for the retention: then 404 */
        (void) json_object_update_new(o, json_pack("{s:f, s:f}", "ended_at", b->ended_unix, "retained_until",
                                                   b->ended_unix + cdn_daemon->cfg.retention_s));
    else if (o && b->state == BOX_RUNNING && b->spec.limits.timeout_ms && !b->paused)
        json_object_set_new(o, "expires_at",
                            json_real(b->created_unix + (double) b->spec.limits.timeout_ms / 1e3));
    if (o && b->image_manifest[0])
        json_object_set_new(o, "image_digest", json_string(b->image_manifest));
    if (o && b->sb.tier->describe && !b->restored) /* a VM's: what runs the guest, and how it started */
        b->sb.tier->describe(&b->sb, o, CDN_DESCRIBE_API);
    if (o)
        json_object_set_new(o, "violations", cdn_box_violations_json(b));
    if (o && b->egress) {
        char ip[16];
        uint32_t a = b->netns.sandbox_ip;
        (void) snprintf(ip, sizeof ip, "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
        json_object_set_new(o, "network", json_pack("{s:s, s:s}", "ip", ip, "interface", b->netns.host_if));
    }
    json_t *usage = o ? cdn_box_usage_json(b) : NULL;
    if (usage)
        json_object_set_new(o, "usage", usage);
    return o;
}

/* A counter of the host's end of its veth (the sandbox's own, seen the other way round), or null. */
static json_t *veth_counter(const struct box *b, const char *name)
{
    char p[128], buf[32];
    if (!b->egress || !b->netns.host_if[0])
        return json_null();
    (void) snprintf(p, sizeof p, "/sys/class/net/%s/statistics/%s", b->netns.host_if, name);
    _cleanup_fclose_ FILE *f = fopen(p, "re");
    return f && fgets(buf, sizeof buf, f) ? json_integer((json_int_t) strtoull(buf, NULL, 10)) : json_null();
}

static json_t *known(bool k, uint64_t v)
{
    return k ? json_integer((json_int_t) v) : json_null();
}

json_t *cdn_box_usage_json(struct box *b)
{
    if (b->cleaned || b->state == BOX_STARTING || b->pool)
        return b->final_usage ? json_deep_copy(b->final_usage) : NULL;
    struct cdn_usage u = {0};
    if (b->sb.tier->usage(&b->sb, &u) < 0)
        return NULL;
    return json_pack(
        "{s:f, s:o, s:o, s:I, s:o, s:o, s:o, s:I, s:I, s:o, s:o}", "time", box_now_unix(), "cpu_ms",
        u.cpu_known ? json_real((double) u.cpu_usec / 1e3) : json_null(), "memory_bytes",
        known(u.memory_known, u.memory_bytes), "memory_peak_bytes", (json_int_t) u.memory_peak_bytes, "pids",
        known(u.pids_known, u.pids), "disk_used_bytes", known(u.disk_known, u.disk_used_bytes),
        "disk_size_bytes", known(u.disk_known, u.disk_size_bytes), "oom_kills", (json_int_t) u.oom_kills,
        "pids_limit_hits",
        (json_int_t) (u.pids_max_hits - (u.pids_max_hits >= b->viol.pids_base ? b->viol.pids_base : 0)),
        "net_rx_bytes", veth_counter(b, "tx_bytes"), "net_tx_bytes", veth_counter(b, "rx_bytes"));
}

/* The end of a create, told once to whoever waits for it (the API: its HTTP answer). */
void box_created(struct box *b, enum cdn_box_created how, const struct cdn_error *err)
{
    struct cdn_box_waiter w = b->waiter;
    b->waiter = (struct cdn_box_waiter){0};
    if (w.done)
        w.done(w.arg, how == CDN_BOX_CREATED ? b : NULL, how, err);
}

unsigned cdn_box_fds(const struct cdn_spec *spec)
{
    /* Measured (a sandbox's share of cordond's open fds, 60 at a time): 3.0 for a container (agent
     * socket, seccomp listener, init's pidfd; the setup pipe is closed once init runs, and the slot
     * is held without an fd: confine/slot.h cdn_slot_hold), 4.0 for a process-tier sandbox (its slot
     * lock), two more with an egress policy, one more with checkpoints (its
     * layer's mount). A guard (protect, watch_writes) holds a listener; a VM's QEMU its sockets and
     * pidfd. */
    unsigned n = spec->tier == CDN_TIER_CONTAINER ? 3 : 4;
    if (spec->net_mode != CDN_NET_NONE)
        n += 2;
    if (spec->checkpoints) /* and a container's standby layer: its image, mount, file, slot lock */
        n += spec->tier == CDN_TIER_CONTAINER ? 5 : 1;
    if (spec->protect.n || spec->watch_writes)
        n += 2;
    if (spec->tier == CDN_TIER_MICROVM || spec->tier == CDN_TIER_VM)
        n += 6;
    return n;
}

/* The fd budget's count (registry.h): from the box's making until its tier let go. */
void box_hold(struct box *b)
{
    b->holding = cdn_box_fds(&b->spec);
    cdn_daemon->n_holding++;
    cdn_daemon->fd_used += b->holding;
}

static void unhold(struct box *b)
{
    if (b->holding) {
        cdn_daemon->n_holding--;
        cdn_daemon->fd_used -= b->holding;
    }
    b->holding = 0;
}

/* Whether a sandbox of spec fits cordond's fds; else err says why. */
bool box_fds_left(const struct cdn_spec *spec, struct cdn_error *err)
{
    const struct daemon *d = cdn_daemon;
    if (d->fd_used + cdn_box_fds(spec) <= d->fd_budget)
        return true;
    cdn_error_set(err, EMFILE,
                  "cordond's file descriptors are spoken for: RLIMIT_NOFILE %llu, of which %llu for "
                  "sandboxes, and the %u that exist hold ~%llu (raise cordond's limit: fs.nr_open, "
                  "CAP_SYS_RESOURCE; or lower max_sandboxes)",
                  (unsigned long long) d->fd_limit, (unsigned long long) d->fd_budget, d->n_holding,
                  (unsigned long long) d->fd_used);
    return false;
}

void box_free(struct box *b)
{
    if (b->indexed) /* never left behind in the table of ids */
        box_unlist(b);
    unhold(b);
    if (b->step && cdn_daemon->listener)
        cdn_daemon->listener->step_gone(b, "cordond let it go");
    cdn_sibling_sources_free(b);
    if (cdn_daemon->listener)
        cdn_daemon->listener->freed(b);
    cdn_box_fanotify_stop(b);
    if (b->setup_ev)
        event_free(b->setup_ev);
    if (b->pidfd_ev)
        event_free(b->pidfd_ev);
    if (b->lifetime_ev)
        event_free(b->lifetime_ev);
    if (b->idle_ev)
        event_free(b->idle_ev);
    if (b->start_ev)
        event_free(b->start_ev);
    if (b->checkpoint_ev)
        event_free(b->checkpoint_ev);
    free(b->auto_cks);
    cdn_box_events_free(b);
    cdn_standby_drop(b);
    cdn_grave_layer(TAKE_FD(b->old_layer));
    b->layer_mnt = safe_close(b->layer_mnt);
    json_decref(b->final_usage);
    cdn_tier_release(&b->sb);
    cdn_spec_free(&b->spec);
    free(b);
}

static bool grow_kept(void)
{
    size_t cap = cdn_daemon->cap_kept ? cdn_daemon->cap_kept * 2 : 64;
    int *p = realloc(cdn_daemon->kept_slots, cap * sizeof *p);
    if (!p)
        return false;
    cdn_daemon->kept_slots = p;
    cdn_daemon->cap_kept = cap;
    return true;
}

void cdn_box_keep_slot(int slot)
{
    struct daemon *d = cdn_daemon;
    if (d->n_kept < d->cap_kept || grow_kept())
        d->kept_slots[d->n_kept++] = slot;
}

int cdn_box_kept_slot(void)
{
    return cdn_daemon->n_kept ? cdn_daemon->kept_slots[--cdn_daemon->n_kept] : -1;
}

void cdn_box_drop_kept_slots(void)
{
    cdn_grave_flush(); /* their slots are kept */
    while (cdn_daemon->n_kept)
        cdn_tier_drop_slot(cdn_daemon->kept_slots[--cdn_daemon->n_kept]);
    cdn_tier_sweep_slots(); /* and any whose hint was lost in a race */
}

/* init has exited (or never started): release the tier's resources. */
static void cleanup(struct box *b)
{
    if (b->state != BOX_STARTING && !b->dying && !b->final_usage) /* its last: its cgroup still counts */
        b->final_usage = cdn_box_usage_json(b);
    b->cleaned = true;
    unhold(b);
    monitor_stop(b);
    listeners_stop(b);
    cdn_box_fanotify_stop(b);
    if (b->pidfd_ev)
        event_del(b->pidfd_ev);
    /* Reap through the pidfd (init may not be our child after a restart);
     * destroy() must not wait on a pid number that may have been reused. */
    siginfo_t si;
    if (b->sb.init_pidfd >= 0) {
        /* Make sure: destroy() only empties the cgroup, and a setup child
         * that has not joined it yet would otherwise outlive the box. */
        (void) b->sb.tier->kill(&b->sb, SIGKILL);
        (void) waitid(P_PIDFD, (id_t) b->sb.init_pidfd, &si, WEXITED | WNOHANG | __WALL);
    }
    b->sb.init_pid = 0;
    int slot = b->sb.slot;
    bool kept = b->sb.keep_cgroup;
    (void) b->sb.tier->destroy(&b->sb);
    cdn_egress_detach(b);
    /* The cgroup directories stay (emptied) for the next sandbox: remember the slot. */
    if (kept && slot >= 0)
        cdn_box_keep_slot(slot);
    b->layer_mnt = safe_close(b->layer_mnt);
    cdn_standby_drop(b);
    cdn_grave_layer(TAKE_FD(b->old_layer));
    if (b->spec.checkpoints) /* its layer's name in the checkpoint store: its checkpoints stay */
        cdn_layer_forget(b->sb.id);
    cdn_layer_pool_drop(b->sb.id);
    cdn_record_remove(b->sb.id);
}

/* The box cannot be used any more; it stays as a record of what happened
 * until it is deleted. */
void cdn_box_stop(struct box *b, const char *reason)
{
    if (b->state == BOX_EXITED)
        return;
    b->state = BOX_EXITED;
    if (b->paused && b->sb.cgroup.ops) /* its processes must be able to die */
        (void) b->sb.cgroup.ops->freeze(&b->sb.cgroup, false);
    b->paused = false;
    cdn_box_violations_flush(b); /* the last count of suppressed violation events, before "exited" */
    (void) snprintf(b->exit_reason, sizeof b->exit_reason, "%s", reason);
    cdn_agent_conn_close(&b->agent); /* pending execs and file ops end with an error */
    if (b->setup_ev)
        event_del(b->setup_ev);
    /* Once init is reaped, box_ended keeps the record for the retention. */
    if (b->waiter.done) {
        struct cdn_error e = {0};
        (void) snprintf(e.msg, sizeof e.msg, "the sandbox ended while starting: %s", reason);
        box_created(b, CDN_BOX_FAILED, &e);
    }
    cdn_box_event(b, "exited", json_pack("{s:s}", "reason", reason));
    if (b->step && cdn_daemon->listener)
        cdn_daemon->listener->step_gone(b, reason);
}

static void maybe_finish_stop(void)
{
    if (cdn_daemon->stopping && LIST_EMPTY(&cdn_daemon->dying))
        event_base_loopbreak(cdn_daemon->base);
}

void cdn_box_delete(struct box *b, const char *reason)
{
    /* Not cleaned up yet: still running, or stopped (a kill on violation)
     * with its init's exit still to come. */
    bool running = !b->cleaned;
    cdn_box_stop(b, reason);
    cdn_box_event(b, "deleted", json_pack("{s:s}", "reason", reason));
    if (cdn_daemon->listener)
        cdn_daemon->listener->ended(b);
    box_unlist(b);
    if (b->uncounted)
        cdn_record_remove_ended(b->sb.id);
    if (b->pool)
        cdn_pool_box_gone(b);
    else if (b->uncounted)
        cdn_daemon->n_ended--;
    else
        cdn_daemon->n_boxes--;
    if (running && b->sb.init_pidfd >= 0 && b->sb.tier->kill(&b->sb, SIGKILL) == 0) {
        /* Killed, it runs nothing more on its image: the image is free now, not at the teardown's
         * end, so that an image removal right after the delete's answer succeeds (as after
         * `docker rm -f`). */
        b->sb.image_fd = safe_close(b->sb.image_fd);
        b->dying = true; /* on_init_exit finishes it */
        LIST_INSERT_HEAD(&cdn_daemon->dying, b, link);
        return;
    }
    if (running)
        cleanup(b);
    box_free(b);
}

/* The setup child's report on fd: a struct cdn_error if setup failed (then
 * it is the create's answer, and true is returned), EOF once init runs. */
static bool read_setup_failure(struct box *b, int fd)
{
    struct cdn_error err = {0};
    if (cdn_read_full(fd, &err, sizeof err) != (ssize_t) sizeof err)
        return false;
    err.msg[sizeof err.msg - 1] = 0;
    err.field[sizeof err.field - 1] = 0;
    cdn_daemon->create_errors++;
    if (b->step && cdn_daemon->listener) /* a verifier's sibling: its step says why */
        cdn_daemon->listener->step_gone(b, err.msg);
    if (b->pool)
        fprintf(stderr, "cordond: a pooled sandbox failed to start: %s\n", err.msg);
    box_created(b, err.field[0] ? CDN_BOX_INVALID_SPEC : CDN_BOX_FAILED, &err);
    return true;
}

static void box_started(struct box *b);
static void box_ended(struct box *b);
static void on_idle(evutil_socket_t fd, short what, void *arg);
int box_arm(struct event **ev, event_callback_fn fn, struct box *b, uint64_t ms);

static void on_setup(evutil_socket_t fd, short what, void *arg)
{
    (void) what;
    struct box *b = arg;
    event_del(b->setup_ev);
    if (read_setup_failure(b, fd)) {
        cdn_box_delete(b, "setup failed");
        return;
    }
    /* EOF: the setup pipe is CLOEXEC, so cordon-init runs. The pipe has said all it will: its fd
     * goes, one less of cordond's for each live sandbox (cdn_box_fds). */
    event_free(b->setup_ev);
    b->setup_ev = NULL;
    b->sb.setup_fd = safe_close(b->sb.setup_fd);
    /* init holds its slot's lock (fd 8): cordond's own hold needs no fd per sandbox (cdn_slot_hold). */
    if (b->sb.persistent && b->sb.tier->slot_in_record)
        (void) cdn_slot_hold(&b->sb);
    box_started(b);
}

/* init's answers on channel 0 while it sets itself up (a VM guest's to IDENTITY and POLICY,
 * tier.h start_answers): running after all of them; an ERROR (its init could not set itself up:
 * a protected path missing, …) fails the create, and the guest ends by itself. */
static void start_answer(struct box *b, uint16_t type, const uint8_t *p, uint32_t len)
{
    int e;
    const char *msg;
    if (type == CDN_FRAME_DONE) {
        if (++b->start_answers == b->sb.tier->start_answers)
            box_started(b);
        return;
    }
    if (cdn_errmsg_decode(p, len, &e, &msg) < 0) {
        cdn_agent_conn_fail(&b->agent, "an ERROR frame that does not decode on channel 0");
        return;
    }
    cdn_daemon->create_errors++;
    bool spec = strstr(msg, "protected paths") != NULL, user = strncmp(msg, "user: ", 6) == 0;
    struct cdn_error why = {0};
    (void) snprintf(why.field, sizeof why.field, "%s", spec ? "protect" : user ? "user" : "");
    (void) snprintf(why.msg, sizeof why.msg, "%s%s", spec ? "protect: " : user ? "" : "the guest: ", msg);
    spec = spec || user;
    box_created(b, spec ? CDN_BOX_INVALID_SPEC : CDN_BOX_FAILED, &why);
    cdn_box_delete(b, "the guest could not set itself up");
}

/* A pooled VM guest runs `true` once before it counts as ready. The first command of a restored
 * guest costs about 200 ms more than the next ones under TCG (its kernel's code is translated again,
 * the 9p page cache is empty): the pool pays it, not the request. Its end (EXIT or ERROR) makes the
 * guest ready; a connection that ends first takes the guest with it (cdn_pool_box_gone). */
static void warm_frame(struct agent_req *r, uint16_t type, const uint8_t *p, uint32_t len)
{
    (void) p, (void) len;
    struct box *b = (struct box *) (void *) ((char *) r - offsetof(struct box, warm));
    if ((type == CDN_FRAME_EXIT || type == CDN_FRAME_ERROR) && b->pool && !b->pool_ready)
        cdn_pool_box_ready(b);
}

static int warm_start(struct box *b)
{
    _cleanup_(cdn_strv_free) struct cdn_strv env = {0};
    char *argv[] = {"true", NULL};
    if (cdn_exec_env(&b->spec, NULL, NULL, &env) < 0)
        return -ENOMEM;
    static uint8_t buf[CDN_FRAME_MAX];
    int n = cdn_exec_encode(buf, sizeof buf,
                            &(struct cdn_exec_args){.flags = CDN_EXEC_PIPES,
                                                    .cwd = b->spec.workdir,
                                                    .argv = argv,
                                                    .envp = env.v,
                                                    .user = b->spec.user});
    if (n < 0)
        return n;
    b->warm = (struct agent_req){.on_frame = warm_frame};
    uint32_t ch = cdn_agent_conn_add(&b->agent, &b->warm, AGENT_EXEC_FRAMES);
    int r = cdn_agent_conn_send(&b->agent, CDN_FRAME_EXEC, 0, ch, buf, (uint32_t) n);
    if (r < 0)
        cdn_agent_conn_remove(&b->agent, &b->warm);
    return r;
}

static void box_started(struct box *b)
{
    b->state = BOX_RUNNING;
    cdn_grave_layer(TAKE_FD(b->old_layer));
    if (b->start_ev)
        event_del(b->start_ev);
    box_monitor_start(b);
    struct cdn_error gerr = {0};
    if (cdn_box_fanotify_start(b, &gerr) < 0) {
        if (b->spec.protect.n) { /* unguarded, a protected path would be readable */
            cdn_daemon->create_errors++;
            box_created(b, CDN_BOX_FAILED, &gerr);
            cdn_box_delete(b, "protected paths could not be guarded");
            return;
        }
        fprintf(stderr, "cordond: sandbox %s: masked kernel files unguarded: %s\n", b->sb.id, gerr.msg);
    }
    cdn_daemon->created_total++;
    cdn_box_event(b, "running", NULL);
    if (b->pool && (!b->sb.tier->warm_exec || warm_start(b) < 0))
        cdn_pool_box_ready(b);
    box_created(b, CDN_BOX_CREATED, NULL);
    if (b->step && cdn_daemon->listener)
        cdn_daemon->listener->step_ready(b);
}

/* Whether the process behind pidfd has exited (a zombie counts). Only our
 * own children can be asked; for an adopted init (not our child: ECHILD)
 * the pidfd's readiness is taken as the answer. */
static bool has_exited(int pidfd)
{
    siginfo_t si = {0};
    return waitid(P_PIDFD, (id_t) pidfd, &si, WEXITED | WNOHANG | WNOWAIT | __WALL) < 0 || si.si_pid != 0;
}

static void on_init_exit(evutil_socket_t fd, short what, void *arg)
{
    (void) what;
    struct box *b = arg;
    if (!has_exited(fd)) { /* not the exit: wait on */
        (void) event_add(b->pidfd_ev, NULL);
        return;
    }
    if (b->dying) {
        box_unlist(b);
        cleanup(b);
        box_free(b);
        maybe_finish_stop();
        return;
    }
    /* A verifier's sibling is forgotten at its end, whatever ended it (api-sibling.c). */
    bool started =
        b->state == BOX_RUNNING || ((b->session.killed || b->ending) && !b->sibling) || b->agent_failed;
    char reason[sizeof b->exit_reason] = "init exited";
    /* Dying while starting, it may have said why on the setup pipe, which
     * this event can overtake: that report is the answer to the create. */
    if (!started && b->sb.setup_fd >= 0 && read_setup_failure(b, b->sb.setup_fd)) {
        (void) snprintf(reason, sizeof reason, "setup failed");
    } else {
        struct cdn_usage u = {0};
        (void) b->sb.tier->usage(&b->sb, &u);
        if (u.oom_kills)
            (void) snprintf(reason, sizeof reason, "init exited: out of memory");
    }
    cdn_box_stop(b, reason);
    cleanup(b);
    if (b->pool || !started) { /* nobody knows its id (or it was pooled): forget it now */
        box_unlist(b);
        if (b->pool)
            cdn_pool_box_gone(b);
        else
            cdn_daemon->n_boxes--;
        cdn_box_event(b, "deleted", json_pack("{s:s}", "reason", reason));
        if (cdn_daemon->listener)
            cdn_daemon->listener->ended(b);
        box_free(b);
        return;
    }
    box_ended(b);
}

static void on_agent_close(struct agent_conn *c, void *arg)
{
    struct box *b = arg;
    const char *failure = cdn_agent_conn_failure(c);
    /* init broke the protocol: it is not the cordon-init we started (a VM guest whose kernel the
     * agent owns). Nothing it says can be trusted any more: the box fails, with the reason. */
    if (failure && b->state != BOX_EXITED) {
        char reason[sizeof b->exit_reason];
        (void) snprintf(reason, sizeof reason, "agent protocol violation: %s", failure);
        cdn_box_event(b, "agent_error", json_pack("{s:s}", "reason", failure));
        fprintf(stderr, "cordond: sandbox %s: its agent broke the protocol (%s): ending it\n", b->sb.id,
                failure);
        if (b->state == BOX_STARTING)
            cdn_daemon->create_errors++;
        else
            b->agent_failed = true; /* kept, exited, for the client to see why */
        cdn_box_stop(b, reason);
        (void) b->sb.tier->kill(&b->sb, SIGKILL);
        return;
    }
    /* init hung up: it is ending, or it is not ours any more. Either way the
     * box cannot be used; the pidfd event tells the exit when it comes. */
    if (b->state != BOX_EXITED)
        b->sb.tier->kill(&b->sb, SIGKILL);
}

/* A VM guest's watched denial (its init supervises the seccomp listeners of its commands): a
 * syscall violation, as the container tier's listener reports one (on_monitor). In kill mode the
 * guest left the call unanswered, and cdn_box_violation ends the guest. */
static void on_agent_event(struct agent_conn *c, uint16_t type, const uint8_t *p, uint32_t len, void *arg)
{
    struct box *b = arg;
    const struct cdn_tier_ops *t = b->sb.tier;
    bool answering = t->start_answers && b->state == BOX_STARTING;
    /* Commands a restarted cordond forgot (cdn_exec_forget_channels) report on channel 0; init says
     * ERROR there before it closes the connection over a frame of ours it could not decode. */
    if (type == CDN_FRAME_STDOUT || type == CDN_FRAME_STDERR || type == CDN_FRAME_EXIT ||
        (type == CDN_FRAME_ERROR && !answering))
        return;
    if (answering && (type == CDN_FRAME_DONE || type == CDN_FRAME_ERROR)) {
        start_answer(b, type, p, len);
        return;
    }
    /* The tier's own (a guest's USAGE: its accounting changed: an OOM, a pids hit, a full disk). */
    int r = t->frame ? t->frame(&b->sb, type, p, len) : 0;
    if (r < 0)
        cdn_agent_conn_fail(c, "a %s frame that does not decode", cdn_agent_frame_name(type));
    if (r > 0)
        cdn_box_check_limits(b);
    if (r != 0)
        return;
    /* A container's or a worker's agent sends none of the rest. */
    if (!t->guest_supervises || type != CDN_FRAME_VIOLATION) {
        cdn_agent_conn_fail(c, "a %s frame on channel 0%s", cdn_agent_frame_name(type),
                            b->state == BOX_STARTING ? " while starting" : "");
        return;
    }
    if (cdn_session_guest_violation(&b->session, p, len) < 0)
        cdn_agent_conn_fail(c, "a VIOLATION frame that does not decode or is not the sandbox's");
}

static void on_lifetime(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct box *b = arg;
    cdn_box_event(b, "timeout", json_pack("{s:I}", "timeout_ms", (json_int_t) b->spec.limits.timeout_ms));
    /* A verifier's sibling (nobody reads its record), one still starting (its create fails: nobody
     * has its id), or one stopped whose init never went (it would hold its record for ever). */
    if (b->sibling || b->state != BOX_RUNNING)
        cdn_box_delete(b, "lifetime (limits.timeout_s) reached");
    else
        cdn_box_end(b, "lifetime (limits.timeout_s) reached");
}

int box_arm(struct event **ev, event_callback_fn fn, struct box *b, uint64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t) (ms / 1000), .tv_usec = (suseconds_t) (ms % 1000) * 1000};
    if (!*ev && !(*ev = evtimer_new(cdn_daemon->base, fn, b)))
        return -ENOMEM;
    return evtimer_add(*ev, &tv) < 0 ? -ENOMEM : 0;
}

void cdn_box_touch(struct box *b)
{
    clock_gettime(CLOCK_MONOTONIC, &b->last_request);
}

/* limits.idle_timeout_ms without a request: a request in flight (an exec, a call, a file
 * operation: the agent connection's) keeps it busy, and its end touches it (api-exec.c). */
static void on_idle(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct box *b = arg;
    uint64_t idle = b->spec.limits.idle_timeout_ms;
    if (b->state == BOX_STARTING && idle) /* a slow start (a VM's boot) is not idleness */
        (void) box_arm(&b->idle_ev, on_idle, b, idle);
    if (b->state != BOX_RUNNING || !idle)
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t since = (int64_t) (now.tv_sec - b->last_request.tv_sec) * 1000 +
                    (now.tv_nsec - b->last_request.tv_nsec) / 1000000;
    /* busy: a request on its agent, or a verifier step (a sibling's runs on the sibling's agent) */
    bool busy = !LIST_EMPTY(&b->agent.reqs) || b->step || b->verifier != VERIFIER_NONE;
    uint64_t wait = busy ? idle : since >= 0 && (uint64_t) since < idle ? idle - (uint64_t) since : 0;
    if (wait) {
        (void) box_arm(&b->idle_ev, on_idle, b, wait);
        return;
    }
    cdn_box_event(b, "idle", json_pack("{s:I}", "idle_timeout_ms", (json_int_t) idle));
    if (b->sibling) /* a verifier's: nobody reads its record */
        cdn_box_delete(b, "idle (limits.idle_timeout_s) reached");
    else
        cdn_box_end(b, "idle (limits.idle_timeout_s) reached");
}

int cdn_box_set_idle(struct box *b, uint64_t ms)
{
    b->spec.limits.idle_timeout_ms = ms;
    cdn_box_touch(b);
    if (!ms) {
        if (b->idle_ev)
            evtimer_del(b->idle_ev);
    } else if (!b->paused && box_arm(&b->idle_ev, on_idle, b, ms) < 0)
        return -ENOMEM;
    return cdn_record_write(b);
}

int cdn_box_set_lifetime(struct box *b, uint64_t ms)
{
    /* A spec's lifetime ends at most 7 days after the creation (a record past that would not load
     * again after a restart): a later end is cut to it (the API refuses one asked for). */
    double from = b->paused ? b->paused_unix : box_now_unix();
    double age_ms = from > b->created_unix ? (from - b->created_unix) * 1e3 : 0;
    if (ms && age_ms + (double) ms > (double) CDN_TIMEOUT_MS_MAX)
        ms = age_ms < (double) CDN_TIMEOUT_MS_MAX ? (uint64_t) ((double) CDN_TIMEOUT_MS_MAX - age_ms) : 1;
    if (b->paused) { /* from its resume on */
        b->pause_left_ms = ms;
        double age = b->paused_unix - b->created_unix;
        b->spec.limits.timeout_ms = ms ? (uint64_t) (age > 0 ? age * 1e3 : 0) + ms : 0;
        return cdn_record_write(b);
    }
    if (!ms) {
        b->spec.limits.timeout_ms = 0;
        if (b->lifetime_ev)
            evtimer_del(b->lifetime_ev);
    } else {
        /* The spec's lifetime counts from the creation (a restarted cordond takes what is left). */
        double age = box_now_unix() - b->created_unix; /* a clock stepped back: 0 */
        b->spec.limits.timeout_ms = (uint64_t) (age > 0 ? age * 1e3 : 0) + ms;
        if (box_arm(&b->lifetime_ev, on_lifetime, b, ms) < 0)
            return -ENOMEM;
    }
    return cdn_record_write(b);
}

int cdn_box_pause(struct box *b, struct cdn_error *err)
{
    const struct cdn_cgroup_ops *ops = b->sb.cgroup.ops;
    if (b->state != BOX_RUNNING || b->dying || b->pool || b->sibling)
        return cdn_error_set(err, EINVAL, "only a running sandbox can be paused");
    if (b->paused)
        return cdn_error_set(err, EALREADY, "the sandbox is paused already");
    if (b->step || b->verifier != VERIFIER_NONE)
        return cdn_error_set(err, EBUSY, "a verifier step runs in the sandbox: pause it after the step");
    if (!ops || !ops->freeze)
        return cdn_error_set(err, ENOTSUP, "this sandbox's tier cannot be paused");
    int r = ops->freeze(&b->sb.cgroup, true);
    if (r < 0) {
        (void) ops->freeze(&b->sb.cgroup, false);
        return cdn_error_set(err, -r, "its processes could not be frozen: %s",
                             r == -ENOTSUP ? "no cgroup freezer on this host" : strerror(-r));
    }
    b->paused = true;
    b->paused_unix = box_now_unix();
    b->pause_left_ms = 0;
    if (b->spec.limits.timeout_ms) { /* its lifetime stops while it is paused */
        double left = b->created_unix + (double) b->spec.limits.timeout_ms / 1e3 - b->paused_unix;
        b->pause_left_ms = left > 0.001 ? (uint64_t) (left * 1e3) : 1;
        if (b->lifetime_ev)
            evtimer_del(b->lifetime_ev);
    }
    if (b->idle_ev)
        evtimer_del(b->idle_ev);
    cdn_box_event(b, "paused", json_object());
    return 0;
}

int cdn_box_resume(struct box *b, uint64_t lifetime_ms, struct cdn_error *err)
{
    if (b->state != BOX_RUNNING || b->dying || !b->paused)
        return cdn_error_set(err, EALREADY, "the sandbox is not paused");
    int r = b->sb.cgroup.ops->freeze(&b->sb.cgroup, false);
    if (r < 0)
        return cdn_error_set(err, -r, "its processes could not be thawed: %s", strerror(-r));
    b->paused = false;
    double paused_s = box_now_unix() - b->paused_unix;
    uint64_t ms = lifetime_ms ? lifetime_ms : b->pause_left_ms;
    if (ms && cdn_box_set_lifetime(b, ms) < 0)
        return cdn_error_set(err, ENOMEM, "out of memory");
    cdn_box_touch(b);
    if (b->spec.limits.idle_timeout_ms)
        (void) box_arm(&b->idle_ev, on_idle, b, b->spec.limits.idle_timeout_ms);
    cdn_box_event(b, "resumed",
                  json_pack("{s:I}", "paused_ms", (json_int_t) (paused_s > 0 ? paused_s * 1e3 : 0)));
    return 0;
}

void box_on_retention(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    cdn_box_delete(arg, "its retention ended");
}

/* It ended and init is reaped (its resources are released): the record stays, listed as exited,
 * for retention_s, since its events and violations are what a reward reads after the end; then
 * it goes. At most max_sandboxes are kept so: past that the oldest goes first. b may be gone when
 * this returns. */
static void box_ended(struct box *b)
{
    b->ended_unix = box_now_unix();
    b->sb.image_fd = safe_close(b->sb.image_fd); /* it runs nothing on its image any more */
    if (b->idle_ev)
        evtimer_del(b->idle_ev);
    if (b->lifetime_ev) { /* the retention's timer takes its place */
        event_free(b->lifetime_ev);
        b->lifetime_ev = NULL;
    }
    if (cdn_daemon->listener) /* its followers: nothing more happens to it */
        cdn_daemon->listener->ended(b);
    if (!b->uncounted) {
        b->uncounted = true;
        cdn_daemon->n_boxes--;
        cdn_daemon->n_ended++;
    }
    unsigned keep = cdn_daemon->cfg.retention_s;
    if (!keep || box_arm(&b->lifetime_ev, box_on_retention, b, (uint64_t) keep * 1000) < 0) {
        cdn_box_delete(b, keep ? "out of memory for its retention" : "ended (retention 0)");
        return;
    }
    /* On disk too, for a cordond that starts within the retention (restore_ended). */
    struct evbuffer *ev = b->pool || b->sibling ? NULL : evbuffer_new(); /* a client's only */
    if (ev) {
        cdn_box_events_write(b, ev);
        size_t len = evbuffer_get_length(ev);
        const char *text = len ? (const char *) evbuffer_pullup(ev, -1) : "";
        if (text && cdn_record_write_ended(b, text, len) < 0)
            fprintf(stderr, "cordond: sandbox %s: its end not written down (a restart forgets it)\n",
                    b->sb.id);
        evbuffer_free(ev);
    }
    while (cdn_daemon->n_ended > cdn_daemon->cfg.max_sandboxes) {
        struct box *x, *oldest = NULL;
        LIST_FOREACH(x, &cdn_daemon->boxes, link)
        if (x->uncounted && (!oldest || x->ended_unix < oldest->ended_unix))
            oldest = x;
        if (!oldest)
            break;
        cdn_box_delete(oldest, "more than max_sandboxes ended sandboxes are kept");
    }
}

void cdn_box_end(struct box *b, const char *reason)
{
    if (b->state == BOX_EXITED)
        return;
    b->ending = true;
    cdn_box_stop(b, reason);
    if (b->sb.init_pidfd >= 0 && b->sb.tier->kill(&b->sb, SIGKILL) == 0)
        return; /* on_init_exit reaps it, then box_ended */
    if (!b->cleaned)
        cleanup(b);
    box_ended(b);
}

/* A VM guest that has not answered its IDENTITY and POLICY in time (a guest that hangs booting or
 * restoring) fails the create rather than hold it until its lifetime ends. */
static void on_start_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct box *b = arg;
    if (b->state != BOX_STARTING)
        return;
    cdn_daemon->create_errors++;
    cdn_box_delete(b, "the guest did not answer within its start timeout ($CORDON_VM_START_TIMEOUT_S)");
}

/* Events of a box: setup report (new boxes only), init's exit, the agent
 * connection, the lifetime timer (what is left of it for an adopted box), a VM guest's start timer. */
int box_watch(struct box *b)
{
    struct event_base *base = cdn_daemon->base;
    if (b->sb.setup_fd >= 0) {
        b->setup_ev = event_new(base, b->sb.setup_fd, EV_READ | EV_PERSIST, on_setup, b);
        if (!b->setup_ev || event_add(b->setup_ev, NULL) < 0)
            return -ENOMEM;
    }
    b->pidfd_ev = event_new(base, b->sb.init_pidfd, EV_READ, on_init_exit, b);
    if (!b->pidfd_ev || event_add(b->pidfd_ev, NULL) < 0)
        return -ENOMEM;
    b->agent.on_close = on_agent_close;
    b->agent.on_event = on_agent_event;
    b->agent.arg = b;
    int r = cdn_agent_conn_open(&b->agent, base, b->sb.agent_fd);
    if (r < 0)
        return r;
    if (b->state == BOX_STARTING && b->sb.tier->start_answers) {
        const char *env = getenv("CORDON_VM_START_TIMEOUT_S");
        struct timeval tv = {.tv_sec = env && atoi(env) > 0 ? atoi(env) : 60};
        b->start_ev = evtimer_new(base, on_start_timeout, b);
        if (!b->start_ev || evtimer_add(b->start_ev, &tv) < 0)
            return -ENOMEM;
    }
    if (b->spec.limits.timeout_ms && !b->pool) {
        double left_ms = (double) b->spec.limits.timeout_ms - (box_now_unix() - b->created_unix) * 1e3;
        if (left_ms < 0)
            left_ms = 0;
        struct timeval tv = {.tv_sec = (time_t) (left_ms / 1000),
                             .tv_usec = (suseconds_t) ((uint64_t) left_ms % 1000) * 1000};
        b->lifetime_ev = evtimer_new(base, on_lifetime, b);
        if (!b->lifetime_ev || evtimer_add(b->lifetime_ev, &tv) < 0)
            return -ENOMEM;
    }
    cdn_box_touch(b); /* an adopted box's idle time starts again with this cordond */
    if (b->spec.limits.idle_timeout_ms && !b->pool &&
        box_arm(&b->idle_ev, on_idle, b, b->spec.limits.idle_timeout_ms) < 0)
        return -ENOMEM;
    return 0;
}

/* The tier's on_spawned hook: the record goes to disk before the sandbox
 * may start, so a crash at any point leaves nothing a restart cannot find. */
static int spawned(struct cdn_sandbox *sb, void *arg)
{
    struct box *b = arg;
    (void) sb;
    b->init_start = cdn_record_start_time(b->sb.init_pid);
    return cdn_record_write(b);
}

void box_init(struct box *b)
{
    b->fanotify_fd = -1;
    b->layer_mnt = -1;
    b->old_layer = -1;
    LIST_INIT(&b->followers);
    LIST_INIT(&b->listeners);
    cdn_sandbox_init(&b->sb, &b->spec);
    cdn_session_init(&b->session, &b->sb, &cdn_box_session_ops, b);
}

struct box *cdn_box_spawn(struct cdn_spec *spec, struct pool *pool, struct cdn_error *err)
{
    if (!box_fds_left(spec, err)) {
        cdn_spec_free(spec);
        return NULL;
    }
    struct box *b = calloc(1, sizeof *b);
    if (!b || !(b->events = evbuffer_new())) {
        free(b);
        cdn_spec_free(spec);
        cdn_error_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    b->spec = *spec;
    *spec = (struct cdn_spec){0};
    box_hold(b);
    b->pool = pool;
    box_init(b);
    cdn_record_path(b->sb.id, "qmp", b->qmp_socket, sizeof b->qmp_socket);
    b->sb.qmp_socket = b->qmp_socket;
    b->sb.stdio_fd = cdn_daemon->devnull;
    b->sb.tier = cdn_tier_lookup(b->spec.tier);
    b->created_unix = box_now_unix();
    b->sb.persistent = true;
    b->sb.on_spawned = spawned;
    b->sb.on_spawned_arg = b;
    b->sb.listen_fd = cdn_record_listen(b->sb.id);
    b->netns = (struct cdn_netns) CDN_NETNS_INIT;
    if (!b->sb.tier) {
        cdn_error_field(err, EOPNOTSUPP, "tier", "tier '%s' is not built yet",
                        cdn_tier_to_string(b->spec.tier));
    } else if (cdn_tier_check_spec(b->sb.tier, &b->spec, err) < 0) {
        /* err says why */
    } else if (b->sb.listen_fd < 0) {
        cdn_error_set(err, -b->sb.listen_fd, "agent socket in %s: %s", cdn_daemon->cfg.sandbox_dir,
                      strerror(-b->sb.listen_fd));
    } else if (cdn_checkpoint_prepare(b, err) < 0 || cdn_egress_attach(b, err) < 0 ||
               cdn_box_fanotify_prepare(b, err) < 0) {
        /* err says why */
    } else if ((b->sb.slot_hint = cdn_box_kept_slot()), b->sb.tier->create(&b->sb, err) >= 0) {
        b->sb.layer_from_fd = safe_close(b->sb.layer_from_fd);
        b->sb.memory_from_fd = safe_close(b->sb.memory_from_fd);
        b->sb.keep_cgroup = true; /* from now on its cgroup is worth keeping */
        /* What a verifier's sibling will bind of its read-write binds, before the agent runs. */
        if (b->spec.protect.n && b->spec.n_mounts)
            (void) cdn_sibling_sources_note(b);
        box_rebase_limits(b);
        /* The hint's lock can be busy for a moment (a just-cloned setup child
         * holds copies of our fds until it closes them): keep it for later. */
        if (b->sb.slot_hint >= 0 && b->sb.slot_hint != b->sb.slot)
            cdn_box_keep_slot(b->sb.slot_hint);
        /* init holds the listening socket now. The slot lock is held by both:
         * by init so that a restart cannot lose it, by us so that the slot
         * stays ours until cleanup() has removed its cgroup. */
        b->sb.listen_fd = safe_close(b->sb.listen_fd);
        if (pool) {
            cdn_pool_box_add(pool, b);
        } else {
            box_list(b);
            cdn_daemon->n_boxes++;
        }
        cdn_box_event(b, "created", json_pack("{s:s}", "tier", b->sb.tier->name));
        int r = box_watch(b);
        if (r < 0) {
            cdn_error_set(err, -r, "recording or watching the sandbox: %s", strerror(-r));
            cdn_box_delete(b, "internal error");
            return NULL;
        }
        return b;
    }
    /* err says why; the tier left nothing behind */
    b->sb.layer_from_fd = safe_close(b->sb.layer_from_fd);
    b->sb.memory_from_fd = safe_close(b->sb.memory_from_fd);
    if (b->spec.checkpoints)
        cdn_layer_forget(b->sb.id);
    cdn_layer_pool_drop(b->sb.id);
    cdn_egress_detach(b);
    b->sb.listen_fd = safe_close(b->sb.listen_fd);
    cdn_record_remove(b->sb.id);
    cdn_daemon->create_errors++;
    box_free(b);
    return NULL;
}

void cdn_box_hand_over(struct box *b, struct cdn_spec *spec)
{
    /* Same shape (pool.c compared it); what differs is the client's: labels,
     * env (used at each exec), the lifetime, which starts now. */
    cdn_spec_free(&b->spec);
    b->spec = *spec;
    *spec = (struct cdn_spec){0};
    b->pool = NULL;
    b->created_unix = box_now_unix();
    box_list(b);
    cdn_daemon->n_boxes++;
    (void) cdn_record_write(b);
    cdn_box_event(b, "handed_over", json_pack("{s:b}", "pooled", 1));
    if (b->spec.limits.timeout_ms) {
        struct timeval tv = {.tv_sec = (time_t) (b->spec.limits.timeout_ms / 1000),
                             .tv_usec = (suseconds_t) (b->spec.limits.timeout_ms % 1000) * 1000};
        b->lifetime_ev = evtimer_new(cdn_daemon->base, on_lifetime, b);
        if (b->lifetime_ev)
            (void) evtimer_add(b->lifetime_ev, &tv);
    }
    cdn_box_touch(b);
    if (b->spec.limits.idle_timeout_ms)
        (void) box_arm(&b->idle_ev, on_idle, b, b->spec.limits.idle_timeout_ms);
}

/* Refused now, before any pull: cordond stops, or the maximum of sandboxes exists. */
static bool create_refused(struct cdn_spec *spec, struct cdn_box_waiter w)
{
    struct cdn_error err = {0};
    enum cdn_box_created how;
    if (cdn_daemon->stopping) {
        (void) snprintf(err.msg, sizeof err.msg, "cordond is stopping");
        how = CDN_BOX_STOPPING;
    } else if (cdn_daemon->n_boxes >= cdn_daemon->cfg.max_sandboxes) {
        (void) snprintf(err.msg, sizeof err.msg, "%u sandboxes exist, the configured maximum",
                        cdn_daemon->n_boxes);
        how = CDN_BOX_TOO_MANY;
    } else if (!box_fds_left(spec, &err)) {
        how = CDN_BOX_TOO_MANY;
    } else {
        return false;
    }
    cdn_spec_free(spec);
    w.done(w.arg, NULL, how, &err);
    return true;
}

void cdn_box_create(struct cdn_spec *spec, struct cdn_box_waiter w)
{
    if (!create_refused(spec, w))
        cdn_images_prepare_create(spec, w);
}

void cdn_box_create_resolved(struct cdn_spec *spec, struct cdn_box_waiter w, const char *image_manifest)
{
    if (create_refused(spec, w)) /* again: a pull may have taken a while */
        return;
    struct box *b = cdn_pool_take(spec);
    if (b) {
        cdn_box_hand_over(b, spec);
        (void) snprintf(b->image_manifest, sizeof b->image_manifest, "%s", image_manifest ?: "");
        w.done(w.arg, b, CDN_BOX_CREATED, NULL);
        return;
    }
    if (!cdn_images_prepare_tier(spec, w, image_manifest))
        cdn_box_create_prepared(spec, w, image_manifest);
}

void cdn_box_create_prepared(struct cdn_spec *spec, struct cdn_box_waiter w, const char *image_manifest)
{
    struct cdn_error err = {0};
    if (create_refused(spec, w)) /* again: the preparation may have taken a while */
        return;
    struct box *b = cdn_box_spawn(spec, NULL, &err);
    if (b) {
        (void) snprintf(b->image_manifest, sizeof b->image_manifest, "%s", image_manifest ?: "");
        b->waiter = w; /* told by on_setup */
        return;
    }
    w.done(w.arg, NULL, err.field[0] ? CDN_BOX_INVALID_SPEC : CDN_BOX_FAILED, &err);
}

/* ---- rollback: a new init in place ---- */

bool cdn_box_keeps_slot(const struct box *b)
{
    for (size_t i = 0; i < b->spec.n_mounts; i++)
        if (!b->spec.mounts[i].readonly)
            return true;
    return false;
}

int cdn_box_respawn_check(const struct box *b, struct cdn_error *err)
{
    if (b->state != BOX_RUNNING || b->dying || b->paused || b->pool || b->sibling || b->step)
        return cdn_error_set(err, EBUSY, "sandbox %s is not running%s", b->sb.id,
                             b->paused ? " (paused: resume it first)" : "");
    return 0;
}

int cdn_box_respawn(struct box *b, int layer_fd, uint32_t base, int memory_fd, struct cdn_box_waiter w,
                    struct cdn_error *err)
{
    int r = cdn_box_respawn_check(b, err);
    if (r < 0) {
        b->sb.layer_ready = NULL;
        return r;
    }
    /* What ran in the old one ends as if the sandbox had died: its requests, processes, sessions,
     * forwarded ports and archives (their clients are told), its monitor and guard. */
    if (cdn_daemon->listener)
        cdn_daemon->listener->freed(b);
    cdn_agent_conn_close(&b->agent);
    monitor_stop(b);
    listeners_stop(b);
    cdn_box_fanotify_stop(b);
    if (b->setup_ev)
        event_free(b->setup_ev);
    if (b->pidfd_ev)
        event_free(b->pidfd_ev);
    if (b->lifetime_ev) /* box_watch() arms it again with what is left of it */
        event_free(b->lifetime_ev);
    if (b->start_ev) /* a guest's start timer: box_watch() makes a new one */
        event_free(b->start_ev);
    b->setup_ev = b->pidfd_ev = b->lifetime_ev = b->start_ev = NULL;
    /* The old layer stays mounted by cordond until the new init runs: the old init's end then only
     * ends processes, where it also unmounted the layer (~9 ms), and its shutdown and unmount are a
     * thread's (cdn_grave_layer), once the new init runs. */
    const int old_layer = cdn_checkpoint_layer_mount(b);
    b->layer_mnt = -1;
    /* The old init and everything in it: killed, and ended beside the new init in a grave (its slot
     * with it: the new one takes another); or else waited for, its slot's cgroup emptied (a guest's;
     * one whose read-write binds hold files of its slot's ids, which its next init must have). */
    int slot = b->sb.slot;
    const bool beside = !cdn_box_keeps_slot(b) && cdn_grave_add(&b->sb) == 0;
    if (!beside) {
        (void) b->sb.tier->kill(&b->sb, SIGKILL);
        (void) b->sb.tier->destroy(&b->sb);
    }
    cdn_layer_forget(b->sb.id);
    b->sb.slot = -1;
    b->sb.slot_hint = beside ? cdn_box_kept_slot() : slot;
    slot = b->sb.slot_hint;
    b->sb.keep_cgroup = false;
    b->state = BOX_STARTING;
    /* A guest restored with its memory was set up: its one answer is to HOLD's RESUME. */
    b->start_answers = memory_fd >= 0 ? b->sb.tier->start_answers - 1 : 0;
    cdn_box_event(b, "rollback", NULL);
    if ((b->sb.listen_fd = cdn_record_listen(b->sb.id)) < 0) {
        r = cdn_error_set(err, -b->sb.listen_fd, "agent socket: %s", strerror(-b->sb.listen_fd));
    } else if (cdn_box_fanotify_prepare(b, err) < 0) {
        r = -EIO;
    } else {
        b->sb.layer_from_fd = layer_fd;
        b->sb.layer_from_base = base;
        b->sb.memory_from_fd = memory_fd;
        r = b->sb.tier->create(&b->sb, err);
        b->sb.layer_from_fd = b->sb.memory_from_fd = -EBADF;
    }
    b->sb.layer_ready = NULL; /* the standby's: what create did not take stays its own */
    b->sb.listen_fd = safe_close(b->sb.listen_fd);
    /* Its shutdown and unmount (the closer's) would slow the new init's setup by ~3 ms here: they
     * wait until it runs. */
    b->old_layer = old_layer;
    if (b->sb.slot != slot && slot >= 0) /* the hint's cgroup is still worth keeping */
        cdn_box_keep_slot(slot);
    if (r >= 0) {
        b->sb.keep_cgroup = true;
        box_rebase_limits(b);
        b->waiter = w;
        if ((r = box_watch(b)) < 0)
            cdn_error_set(err, -r, "watching the sandbox: %s", strerror(-r));
    }
    if (r < 0) { /* it has no init any more: it ends, with the reason */
        char reason[sizeof b->exit_reason];
        (void) snprintf(reason, sizeof reason, "rollback failed: %s", err->msg);
        b->waiter = (struct cdn_box_waiter){0};
        cdn_box_delete(b, reason);
        return r;
    }
    return 0;
}
