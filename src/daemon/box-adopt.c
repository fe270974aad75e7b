/* cordond's sandboxes after a restart, and an OCI runtime's containers (registry.h): a box for a
 * sandbox that runs already, from its record (cdn_box_adopt_all) or from cordon-runtime's attach
 * (cdn_box_attach); ended ones kept for their retention; and what a stop leaves running. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "box-internal.h"
#include "confine/slot.h"
#include "core/json-util.h"
#include "record.h"
#include "shared/fd-util.h"
#include "tiers/tier.h"

/* ---- restarts ---- */

static bool is_sibling(const struct cdn_spec *spec)
{
    size_t n = strlen(SIBLING_LABEL);
    for (size_t i = 0; i < spec->labels.n; i++)
        if (strncmp(spec->labels.v[i], SIBLING_LABEL, n) == 0 && spec->labels.v[i][n] == '=')
            return true;
    return false;
}

/* A live init that is ours (pid and start time match: a pooled one, or one we could not connect
 * to) is killed, and its whole pid namespace waited for; never a stranger that reuses the pid. */
static void kill_if_ours(pid_t pid, uint64_t start)
{
    _cleanup_close_ int fd = (int) syscall(SYS_pidfd_open, pid, 0);
    if (fd >= 0 && cdn_record_start_time(pid) == start &&
        syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) == 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        (void) poll(&p, 1, 5000);
    }
}

/* A box for the running sandbox rec describes (a restart's adoption, a runtime's attach): its
 * fields, not yet its sandbox (take_sandbox). NULL, with *ret_r: out of memory (-ENOMEM) or not a
 * sandbox record (-EBADMSG); rec's spec is taken either way. */
static struct box *box_from_record(struct record *rec, const json_t *rec_json, int *ret_r)
{
    struct box *b = calloc(1, sizeof *b);
    *ret_r = -ENOMEM;
    if (!b || !(b->events = evbuffer_new())) {
        free(b);
        cdn_spec_free(&rec->spec);
        return NULL;
    }
    b->spec = rec->spec;
    rec->spec = (struct cdn_spec){0};
    box_hold(b); /* adopted past the budget too: its sandbox exists already */
    box_init(b);
    (void) snprintf(b->sb.id, sizeof b->sb.id, "%s", rec->id);
    cdn_record_path(b->sb.id, "qmp", b->qmp_socket, sizeof b->qmp_socket);
    b->sb.qmp_socket = b->qmp_socket;
    b->sb.tier = cdn_tier_lookup(b->spec.tier);
    /* What the tier wrote into the record (a VM's: what runs the guest, how it started). */
    if (b->sb.tier && b->sb.tier->restore && b->sb.tier->restore(&b->sb, rec_json) < 0) {
        box_free(b);
        *ret_r = -EBADMSG;
        return NULL;
    }
    b->sb.persistent = true;
    b->sb.slot = rec->slot;
    b->sb.init_pid = rec->init_pid;
    b->created_unix = rec->created_unix;
    b->sb.oom_base = rec->oom_base, b->sb.cpu_base = rec->cpu_base;
    b->init_start = rec->init_start;
    b->state = BOX_RUNNING;
    b->netns = (struct cdn_netns) CDN_NETNS_INIT;
    /* A runtime's container (cdn_box_attach): its cgroup is the engine's */
    (void) snprintf(b->cgroup_name, sizeof b->cgroup_name, "%s", rec->cgroup);
    b->sb.cgroup_name = b->cgroup_name[0] ? b->cgroup_name : NULL;
    b->attached = rec->attached;
    b->sb.root_ids_from = rec->ids_from;
    b->sb.root_ids_count = rec->ids_count;
    *ret_r = 0;
    return b;
}

/* The running sandbox of b's record: its init (the same process: its start time), slot lock, agent
 * connection and network lease. 0, or -errno with err. */
static int take_sandbox(struct box *b, const struct record *rec, struct cdn_error *err)
{
    int r = -ESRCH;
    if (rec->pooled)
        (void) snprintf(err->msg, sizeof err->msg, "it was in a warm pool");
    else if (b->sb.tier && cdn_record_start_time(rec->init_pid) == rec->init_start &&
             b->sb.tier->adopt(&b->sb, err) >= 0 &&
             cdn_record_start_time(rec->init_pid) ==
                 rec->init_start) /* checked again: the pidfd pins the process now */
        r = b->sb.agent_fd = cdn_record_connect(rec->id);
    /* A pause is this cordond's, not the record's: one paused when the last cordond went runs on
     * (its cgroup is the tier's once adopt() has run). */
    if (b->sb.cgroup.ops && b->sb.cgroup.ops->freeze)
        (void) b->sb.cgroup.ops->freeze(&b->sb.cgroup, false);
    if (r >= 0 && b->spec.net_mode != CDN_NET_NONE && (r = cdn_egress_adopt(b, rec->net_lease, err)) < 0)
        b->sb.agent_fd = safe_close(b->sb.agent_fd);
    return r < 0 ? r : 0;
}

static void adopt_one(const char *id, const char *path)
{
    struct record rec;
    struct cdn_error err = {0};
    if (cdn_record_load(path, &rec, &err) < 0) {
        fprintf(stderr, "cordond: %s; removing it\n", err.msg);
        cdn_record_remove(id);
        return;
    }
    _cleanup_json_ json_t *rec_json = TAKE_PTR(rec.json);
    int r;
    struct box *b = box_from_record(&rec, rec_json, &r);
    if (!b) {
        if (r == -EBADMSG) {
            fprintf(stderr, "cordond: %s: not a sandbox record; removing it\n", path);
            cdn_record_remove(id);
        }
        return;
    }
    r = take_sandbox(b, &rec, &err);
    if (r >= 0) {
        box_list(b);
        cdn_daemon->n_boxes++;
        /* Its image is held again; one removed while no cordond ran is this sandbox's loss only. */
        struct cdn_error held = {0};
        if (cdn_tier_hold_image(&b->sb, &held) < 0)
            fprintf(stderr, "cordond: sandbox %s: %s\n", id, held.msg);
        if (box_watch(b) >= 0) {
            if (b->spec.checkpoints && b->sb.tier->save_memory) { /* a guest the last one held, let go */
                uint8_t off = CDN_HOLD_OFF;
                (void) cdn_agent_conn_send(&b->agent, CDN_FRAME_HOLD, 0, 0, &off, 1);
            }
            if (is_sibling(&b->spec)) { /* its step ended with the last cordond: nobody wants it */
                cdn_box_delete(b, "a verifier's sibling left by the last cordond");
                return;
            }
            /* What its cgroup counted so far the last cordond saw (or an earlier tenant's): the
             * violations count on from here, not again (in kill mode that would end it). */
            struct cdn_usage u0;
            if (b->sb.tier->usage(&b->sb, &u0) == 0)
                b->viol.oom_seen = u0.oom_kills, b->viol.pids_seen = u0.pids_max_hits;
            box_monitor_start(b);
            if (cdn_box_fanotify_adopt(b, &err) < 0 && b->spec.protect.n) {
                fprintf(stderr, "cordond: sandbox %s: %s; ending it\n", id, err.msg);
                cdn_box_delete(b, "protected paths could not be guarded after a restart");
                return;
            }
            cdn_box_event(b, "adopted", json_pack("{s:i}", "init_pid", (int) rec.init_pid));
            return;
        }
        cdn_box_delete(b, "could not be watched after a restart");
        return;
    }
    /* init is gone (or is not ours): kill what may be left in its slot, free it */
    fprintf(stderr, "cordond: sandbox %s could not be adopted (%s); cleaning up\n", id,
            err.msg[0] ? err.msg : "init is gone");
    if (b->sb.tier) {
        kill_if_ours(rec.init_pid, rec.init_start);
        b->sb.agent_fd = safe_close(b->sb.agent_fd);
        b->sb.init_pidfd = safe_close(b->sb.init_pidfd);
        cdn_slot_let_go(&b->sb); /* adopt() may have taken it (its byte, confine/slot.h) */
        /* Its cgroup, under the slot's lock: if another sandbox took the slot
         * while no cordond ran, the cgroup is that one's and stays. */
        if (b->sb.tier->drop_slot && rec.slot >= 0)
            b->sb.tier->drop_slot(rec.slot);
        if (b->sb.tier->forget)
            b->sb.tier->forget(&b->sb);
    }
    cdn_record_remove(id);
    box_free(b);
}

/* An attach that failed before the box was listed: what it took of the sandbox is let go, nothing of
 * the sandbox is touched (the runtime ends its create with the error). */
static struct box *attach_failed(struct box *b, const char *id)
{
    b->sb.init_pidfd = safe_close(b->sb.init_pidfd);
    cdn_slot_let_go(&b->sb);
    b->sb.agent_fd = safe_close(b->sb.agent_fd);
    cdn_record_remove(id);
    box_free(b);
    return NULL;
}

struct box *cdn_box_attach(const struct cdn_box_attach *a, struct cdn_spec *spec, struct cdn_error *err)
{
    struct record rec = {.slot = a->slot,
                         .ids_from = a->ids_from,
                         .ids_count = a->ids_count,
                         .init_pid = a->init_pid,
                         .init_start = a->init_start,
                         .created_unix = box_now_unix(),
                         .net_lease = -1,
                         .attached = true,
                         .spec = *spec};
    *spec = (struct cdn_spec){0};
    cdn_sandbox_new_id(rec.id);
    (void) snprintf(rec.cgroup, sizeof rec.cgroup, "%s", a->cgroup ? a->cgroup : "");
    /* The allowlist goes on once the box holds the sandbox (its namespace gets cordon's network). */
    enum cdn_net_mode want = rec.spec.net_mode;
    struct cdn_strv allow = rec.spec.net_allow;
    rec.spec.net_mode = CDN_NET_NONE;
    rec.spec.net_allow = (struct cdn_strv){0};
    if (!box_fds_left(&rec.spec, err)) {
        cdn_strv_free(&allow);
        cdn_spec_free(&rec.spec);
        return NULL;
    }
    /* Its init listens where the runtime put it: the record's socket leads there. */
    char link[512];
    cdn_record_path(rec.id, "sock", link, sizeof link);
    if (symlink(a->socket, link) < 0) {
        cdn_strv_free(&allow);
        cdn_spec_free(&rec.spec);
        return cdn_error_field(err, errno, "socket", "socket: %m"), NULL;
    }
    int r;
    struct box *b = box_from_record(&rec, NULL, &r);
    if (!b) {
        cdn_strv_free(&allow);
        (void) unlink(link);
        return cdn_error_set(err, -r, "out of memory"), NULL;
    }
    if ((r = take_sandbox(b, &rec, err)) < 0) {
        cdn_strv_free(&allow);
        if (!err->msg[0])
            cdn_error_field(err, -r, "init_pid", "init_pid: %d is not the running init of a cordon container",
                            (int) a->init_pid);
        return attach_failed(b, rec.id);
    }
    box_list(b);
    cdn_daemon->n_boxes++;
    const char *fail = NULL;
    if (box_watch(b) < 0)
        fail = "could not be watched";
    if (!fail) {
        box_rebase_limits(b);
        box_monitor_start(b);
    }
    if (!fail && b->spec.protect.n && cdn_box_fanotify_adopt(b, err) < 0)
        fail = "its protected paths could not be guarded";
    if (!fail && want != CDN_NET_NONE && cdn_egress_set(b, want, &allow, err) < 0)
        fail = "its network could not be given";
    else if (want == CDN_NET_NONE || fail)
        cdn_strv_free(&allow);
    if (!fail && cdn_record_write(b) < 0)
        fail = "its record could not be written";
    if (fail) {
        if (!err->msg[0])
            cdn_error_set(err, EIO, "the container %s", fail);
        cdn_box_delete(b, fail);
        return NULL;
    }
    cdn_box_event(b, "attached", json_pack("{s:i}", "init_pid", (int) a->init_pid));
    return b;
}

static int adopted;

static void adopt_counted(const char *id, const char *path)
{
    unsigned before = cdn_daemon->n_boxes;
    adopt_one(id, path);
    adopted += cdn_daemon->n_boxes > before;
}

/* An ended sandbox an earlier cordond kept (cdn_record_write_ended), for the rest of its retention:
 * listed, its GET, events and violations answered as before, 410 for what needs it running. */
static void restore_ended(const char *id, const char *path)
{
    _cleanup_json_ json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
    json_t *spec = json_object_get(o, "spec"), *viol = json_object_get(o, "violations");
    double ended = json_number_value(json_object_get(o, "ended_at"));
    double left = ended + cdn_daemon->cfg.retention_s - box_now_unix();
    const char *events = json_string_value(json_object_get(o, "events"));
    const char *reason = json_string_value(json_object_get(o, "exit_reason"));
    _cleanup_free_ char *spec_text = spec ? json_dumps(spec, JSON_COMPACT) : NULL;
    struct box *b = calloc(1, sizeof *b);
    struct cdn_error err = {0};
    if (!b || !(b->events = evbuffer_new()) || cdn_spec_init(&b->spec) < 0) {
        if (b && b->events)
            evbuffer_free(b->events);
        free(b);
        return;
    }
    bool ok = o && spec_text && events && reason && ended > 0 && left > 0 &&
              strcmp(json_string_value(json_object_get(o, "id")) ?: "", id) == 0 &&
              cdn_spec_from_json(&b->spec, spec_text, strlen(spec_text), &err) >= 0 &&
              cdn_tier_lookup(b->spec.tier) && cdn_daemon->n_ended < cdn_daemon->cfg.max_sandboxes;
    if (!ok) { /* past its retention, or not what a cordond wrote */
        cdn_record_remove_ended(id);
        cdn_spec_free(&b->spec);
        evbuffer_free(b->events);
        free(b);
        return;
    }
    box_init(b);
    (void) snprintf(b->sb.id, sizeof b->sb.id, "%s", id);
    b->sb.tier = cdn_tier_lookup(b->spec.tier);
    b->state = BOX_EXITED;
    b->cleaned = b->uncounted = b->restored = true;
    b->created_unix = json_number_value(json_object_get(o, "created_at"));
    b->ended_unix = ended;
    b->execs = (uint64_t) json_integer_value(json_object_get(o, "execs"));
    (void) snprintf(b->exit_reason, sizeof b->exit_reason, "%s", reason);
    json_t *usage = json_object_get(o, "usage");
    b->final_usage = json_is_object(usage) ? json_incref(usage) : NULL;
    json_t *counts = json_object_get(viol, "counts");
    for (int k = 0; k < _CDN_VK_MAX; k++)
        b->session.counts[k] = (uint64_t) json_integer_value(json_object_get(counts, cdn_vk_name(k)));
    b->session.first = json_number_value(json_object_get(viol, "first"));
    b->session.last = json_number_value(json_object_get(viol, "last"));
    (void) evbuffer_add(b->events, events, strlen(events));
    box_list(b);
    cdn_daemon->n_ended++;
    if (box_arm(&b->lifetime_ev, box_on_retention, b, (uint64_t) (left * 1000) + 1) < 0)
        cdn_box_delete(b, "out of memory for its retention");
}

int cdn_box_adopt_all(void)
{
    adopted = 0;
    (void) cdn_record_scan(adopt_counted);
    (void) cdn_record_scan_ended(restore_ended);
    return adopted;
}

void cdn_box_release_all(void)
{
    while (!LIST_EMPTY(&cdn_daemon->boxes)) {
        struct box *b = LIST_FIRST(&cdn_daemon->boxes);
        /* An OCI runtime's container is the engine's to end: it is left as on a restart. */
        if (cdn_daemon->cfg.stop_sandboxes && !b->attached) {
            cdn_box_delete(b, "cordond stopped");
            continue;
        }
        /* Left running for the next cordond: only our side goes. */
        if (b->waiter.done) {
            struct cdn_error e = {0};
            (void) snprintf(e.msg, sizeof e.msg, "cordond is stopping");
            box_created(b, CDN_BOX_STOPPING, &e);
        }
        b->agent.on_close = NULL;
        cdn_agent_conn_close(&b->agent);
        if (cdn_daemon->listener)
            cdn_daemon->listener->ended(b);
        box_unlist(b);
        if (b->uncounted)
            cdn_daemon->n_ended--;
        else
            cdn_daemon->n_boxes--;
        b->sb.agent_fd = safe_close(b->sb.agent_fd);
        b->sb.init_pidfd = safe_close(b->sb.init_pidfd);
        b->sb.setup_fd = safe_close(b->sb.setup_fd);
        cdn_egress_release(b);
        box_free(b);
    }
}
