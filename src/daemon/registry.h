/* cordond's sandbox registry: the boxes, their pools, records, egress, file-access guard, events
 * and violations (DESIGN §1, §4). It knows nothing of HTTP: the API (api.h) asks it for boxes and
 * hears of them through a listener (struct cdn_box_listener).
 *
 * One process, one libevent loop, no threads. The loop owns every sandbox
 * ("box"), every agent connection and every HTTP request; nothing here
 * blocks on a sandbox: frames to and from cordon-init go through bufferevents,
 * and a request that waits for a sandbox (create, exec, files) is answered
 * from the callback that completes it. */
#pragma once

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "proto/frame.h"
#include "agent-conn.h"
#include "core/bind-policy.h"
#include "core/sandbox.h"
#include "monitor/fanotify.h"
#include "core/spec.h"
#include "net/egress.h"
#include "net/netns.h"
#include "oci/digest.h"
#include "shared/error.h"
#include "supervise/session.h"

struct box;

/* ---- configuration (cordond.c; file format in docs/cordond.md) ---- */
/* cordond's writable_pool (docs/disk.md): off (the default) gives each container layer an ext4 of its
 * own; auto uses the pool where the kernel and btrfs-progs allow it, else as off; btrfs fails the start
 * without it. */
enum cdn_pool_mode { CDN_POOL_OFF, CDN_POOL_AUTO, CDN_POOL_BTRFS };

struct daemon_config {
    char socket_path[256];
    char listen[128];     /* HOST:PORT for TCP, empty = none */
    char token_file[256]; /* bearer token for TCP, required with listen */
    char state_dir[256];
    char sandbox_dir[256];     /* records and agent sockets of live sandboxes (record.c) */
    bool stop_sandboxes;       /* on SIGTERM end them too; default: leave them for the next cordond */
    uint64_t max_body_bytes;   /* request bodies (file uploads included) */
    uint64_t max_output_bytes; /* per stream of a buffered exec; more is dropped and flagged */
    uint64_t max_read_bytes;   /* a file download without max_bytes: a longer file gets 413 */
    unsigned max_sandboxes;
    unsigned retention_s; /* an ended sandbox's record (state, events, violations) is kept this long */
    char pools[8][300];   /* "SIZE[:SPECFILE]" each, see pool.c */
    unsigned n_pools;
    char e2b_templates[16][300]; /* "NAME:SPECFILE" each, see e2b.c */
    unsigned n_e2b_templates;
    char dns_upstream[64];   /* IP[:PORT] the DNS stub and the proxy resolve with; empty = /etc/resolv.conf */
    unsigned net_pool;       /* prepared network namespaces kept for sandboxes with network */
    unsigned writable_stock; /* container writable layers on disk made ahead, per size (docs/disk.md) */
    uint64_t checkpoint_store_bytes;  /* a new checkpoint store's size (0: the state filesystem's) */
    enum cdn_pool_mode writable_pool; /* container layers as subvolumes of one btrfs (docs/disk.md) */
    uint64_t writable_pool_bytes;     /* a new pool's size (0: the state filesystem's) */
    unsigned every_step_keep;         /* a sandbox's "every_step" checkpoints kept, the newest (0: all) */
    uint64_t audit_rotate;            /* egress.log is rotated past this size */
    unsigned audit_rate;              /* audit lines per sandbox and second (0: no limit) */
    char monitor_rules[256];          /* rule file (src/monitor/rules.h); empty: the shipped default */
    unsigned agent_timeout_s; /* how long a sandbox's agent has to end what it was asked to (api-exec.c) */
    unsigned auth_timeout_s;  /* TCP: a client's first header block, token included, within this */
    unsigned max_unauthenticated; /* TCP: connections not authenticated yet; a new one evicts the oldest */
    unsigned max_connections;     /* TCP: connections open at once, authenticated or not */
    char bind_allow[CDN_BIND_RULES_MAX][256]; /* "DIR[:ro]" each (core/bind-policy.h); none: "/" */
    unsigned n_bind_allow;
    struct cdn_dns_budget_cfg dns_budget; /* new self-chosen names per sandbox (net/dns-budget.h) */
    /* Image pulls (images.c): host[:port] and PEM file lists, comma-separated, added to the
     * environment's (CORDON_INSECURE_REGISTRIES, …: oci/resolve.h); the store's cap in bytes after
     * which a pull prunes what nothing references (0: none). */
    char insecure_registries[1024];
    char registry_ca_files[2048];
    char registry_mirrors[1024];
    uint64_t image_store_max;
};

/* ---- host side of the agent protocol: agent-conn.h ---- */

/* ---- violations: counted by each box's session (supervise/session.h), the reward signal; what
 * cordond records of them (box-events.c) ---- */
struct violations {
    uint64_t oom_seen, pids_seen; /* cgroup counters already counted */
    uint64_t pids_base;           /* pids.events max of its (reused) cgroup at creation: usage counts on */
    bool disk_full;               /* the writable layer was full at the last look */
    /* Their events (box-events.c): written, and counted but not written since the last summary */
    uint64_t logged[_CDN_VK_MAX], suppressed[_CDN_VK_MAX];
    double tokens[_CDN_VK_MAX], refilled[_CDN_VK_MAX]; /* the sample of each kind */
    struct event *flush_ev;                            /* the next "violations_suppressed" */
};

/* What supervising a box (its seccomp notifications, fanotify events) costs the loop in the
 * current second, against its budget (box-events.c). */
struct box_budget {
    uint64_t window_ns, spent_ns; /* the second's start (monotonic), the time spent in it */
    unsigned violations;          /* counted in it */
    bool paused;                  /* over budget: its listeners are not read until resume_ev */
    struct event *resume_ev;
    int *held; /* fanotify events of the shared group refused but not answered yet */
    size_t n_held, cap_held;
};

/* The first event line of a kind (an event type, a violation kind), kept when the ring drops it. */
#define EVENTS_PINNED 40
/* cordond's fds (box.c cdn_box_fds): at start RLIMIT_NOFILE is raised to max_sandboxes of
 * CDN_FDS_TYPICAL each, and CDN_FDS_RESERVE more at most is kept for clients, execs and pulls. */
#define CDN_FDS_TYPICAL 8
#define CDN_FDS_RESERVE 4096
struct pinned_event {
    char key[32];
    uint64_t seq; /* its number in the log */
    char *line;
    size_t len;
};

/* ---- sandboxes (box.c) ---- */
enum box_state { BOX_STARTING, BOX_RUNNING, BOX_EXITED, _BOX_STATE_MAX };

/* How a create ended, for whoever asked (the API answers it over HTTP: api.c). */
enum cdn_box_created {
    CDN_BOX_CREATED,      /* running (or handed over from a pool) */
    CDN_BOX_STOPPING,     /* cordond is stopping */
    CDN_BOX_TOO_MANY,     /* the configured maximum of sandboxes exists */
    CDN_BOX_INVALID_SPEC, /* the spec cannot be run (err names the field) */
    CDN_BOX_FAILED,       /* the sandbox could not be made, or ended while starting */
};
struct box;
/* Called once, at the end of a create: b is the running box (CDN_BOX_CREATED), else NULL and err
 * says why. done NULL: nobody waits (a pooled box, a sibling). */
struct cdn_box_waiter {
    void (*done)(void *arg, struct box *b, enum cdn_box_created how, const struct cdn_error *err);
    void *arg;
};

struct box {
    struct cdn_sandbox sb;
    struct cdn_spec spec;
    enum box_state state;
    unsigned start_answers; /* init's DONEs while starting (tier.h start_answers) */
    char exit_reason[192];  /* why it is not running any more */
    struct agent_conn agent;
    struct agent_req warm; /* a pooled VM guest's first command (box.c: warm_start) */
    struct event *setup_ev, *pidfd_ev, *lifetime_ev, *start_ev; /* start_ev: a VM guest's answers due */
    struct cdn_box_waiter waiter;                               /* told once init runs (or setup fails) */
    uint64_t init_start;                                        /* start time of init (record.c) */
    bool dying; /* deleted: init killed, cleanup waits for its exit */
    /* Checkpoints (api-checkpoint.c): a mount of its layer's ext4, to freeze it (-1: not yet), and
     * the last checkpoint taken of it (a new one's parent). */
    int layer_mnt;
    char last_checkpoint[24];
    struct cdn_standby *standby; /* a rollback's layer made ahead (standby.c), or NULL */
    int old_layer;               /* a rollback's old layer's mount, let go once the new init runs */
    char qmp_socket[512];        /* <id>.qmp beside its record (sb.qmp_socket) */
    struct event *checkpoint_ev; /* checkpoints "every_step": the one due after a step (1 ms on) */
    char (*auto_cks)[24];        /* … and those it took, oldest first (at most every_step_keep) */
    unsigned n_auto_cks, cap_auto_cks;
    bool protect_pending; /* a VM guest changes its protected paths (api.c: guest_protect) */
    struct pool *pool;    /* while it waits in a warm pool (pool.c): not in the API's list */
    void *throttle;       /* the streaming call whose slow client paused our reading of init (api-exec.c) */
    struct event *throttle_ev;
    bool pool_ready; /* … and is running (else still starting) */
    double created_unix;
    double ended_unix;      /* when it exited (ended: box_ended); 0 while it runs */
    bool ending;            /* cordond ends it (its lifetime, its idle timeout): it ran, keep its record */
    bool paused;            /* its processes are frozen (cdn_box_pause): no request reaches it */
    double paused_unix;     /* since when */
    uint64_t pause_left_ms; /* its lifetime left when it was paused (0: none), given back by a resume */
    bool uncounted;         /* ended and kept for its retention: not one of n_boxes, one of n_ended */
    bool restored;          /* … as an earlier cordond kept it (its <id>.ended): no tier state */
    struct event *idle_ev;  /* limits.idle_timeout_ms: looks at last_request (box.c) */
    json_t *final_usage;    /* its usage as it ended (cleanup), for GET afterwards */
    struct timespec last_request; /* CLOCK_MONOTONIC of the last request on it (cdn_box_touch) */
    uint64_t execs;
    struct cdn_egress_box *egress; /* network != none (egress.c) */
    struct cdn_netns netns;
    /* Its supervision (supervise/session.h): the violation policy, the counts, the marks of the
     * file-access guard; session.killed: on_violation kill acted (exited, but kept for the client
     * to see why). */
    struct cdn_session session;
    struct violations viol;   /* what cordond records of them (box-events.c) */
    struct event *monitor_ev; /* the seccomp listener of its watched denials */
    uint64_t alerts_total, alerts_suppressed, alert_window_ms;
    struct {
        uint32_t rule; /* hash of the rule id; 0 = free */
        unsigned n;
    } alert_buckets[16]; /* alerts per rule in the current second (monitor.c) */
    bool agent_failed;   /* its agent broke the protocol (agent-conn.h): exited, kept likewise */
    /* The file-access guard (box-fanotify.c) */
    int fanotify_fd;           /* its own fanotify group (protected paths), else -1 */
    struct event *fanotify_ev; /* … and its events */
    struct event *group_ev;    /* a group made at run time, until init holds it (box-fanotify.c) */
    bool fanotify_listed;      /* in the group list (box-fanotify.c) */
    LIST_ENTRY(box) fanotify_link;
    enum { VERIFIER_NONE, VERIFIER_STARTING, VERIFIER_RUNNING, VERIFIER_ENDING } verifier; /* api-exec.c */
    /* A clean sibling's verifier step (api-sibling.c): step on both sandboxes while it lasts;
     * sibling on the fresh one, which no route lists or finds and no restart adopts; verifies
     * (while that sandbox exists) the one whose violations it counts. */
    struct sibling_step *step;
    bool sibling;
    struct box *verifies;
    /* The protected parts of its read-write binds as they were at creation (sibling-spec.c). */
    struct protected_src *psrc;
    size_t n_psrc;
    bool psrc_noted;
    unsigned holding;                    /* its fds counted in fd_used (cdn_box_fds), 0: not counted */
    bool cleaned;                        /* cleanup() ran: init reaped, tier resources released */
    char image_manifest[CDN_DIGEST_MAX]; /* its OCI image's manifest digest, else "" (images.c) */
    /* A container an OCI runtime made and attached (cdn_box_attach): its init is the engine's child,
     * its socket the runtime's; its cgroup the engine's (sb.cgroup_name), else "". */
    bool attached;
    char cgroup_name[CDN_CGROUP_NAME_MAX];
    /* The seccomp listeners of processes an OCI runtime started in it with exec (box.c
     * cdn_box_take_listener): watched beside init's, paused with it by the budget. */
    LIST_HEAD(, box_listener) listeners;
    struct evbuffer *events;             /* NDJSON lines, oldest dropped past a cap (box-events.c) */
    uint64_t events_seq, events_dropped; /* lines logged, and dropped from the ring's front */
    struct pinned_event *pinned; /* up to EVENTS_PINNED, grown as kinds come: most sandboxes log a few */
    size_t n_pinned, cap_pinned;
    struct box_budget budget;
    LIST_HEAD(, follower) followers; /* GET …/events?follow=true (api.c) */
    LIST_HEAD(, bproc) procs;        /* its background processes (api-proc.c) */
    LIST_HEAD(, arch_call) archives; /* its archives under way (api-archive.c) */
    unsigned n_procs;
    LIST_HEAD(, session) sessions; /* its shell sessions (api-session.c) */
    unsigned n_sessions, next_session;
    LIST_HEAD(, tunnel) tunnels; /* connections to its ports (api-ports.c) */
    unsigned n_tunnels;
    LIST_ENTRY(box) link;
    struct box *id_next; /* its chain in the table of listed boxes by id (box-index.c) */
    bool indexed;        /* … which holds it */
};

/* What the HTTP layer hears of the boxes (api.h: cdn_api_box_listener; NULL in struct daemon:
 * nobody listens). */
struct cdn_box_listener {
    void (*event)(struct box *b, const char *line, size_t len); /* a new event line (NDJSON) */
    void (*ended)(struct box *b); /* it stopped, or this cordond lets go of it: no more events */
    void (*freed)(struct box *b); /* it is about to be freed */
    /* Either side of a clean sibling's verifier step (b->step, api-sibling.c): the sibling runs;
     * b has stopped or is being freed. */
    void (*step_ready)(struct box *b);
    void (*step_gone)(struct box *b, const char *reason);
};

struct daemon {
    struct event_base *base;
    const struct cdn_box_listener *listener;
    struct daemon_config cfg;
    char token[256];
    int devnull;            /* fds 0-2 of every sandbox's init */
    LIST_HEAD(, box) boxes; /* what the API sees */
    LIST_HEAD(, box) dying; /* deleted, waiting for init's exit to clean up */
    unsigned n_boxes;       /* live ones (starting, running, or exited and not yet reaped) */
    unsigned n_ended;       /* ended ones kept for retention_s: still listed, at most max_sandboxes */
    /* The fd budget (cordond.c fd_budget): the boxes whose tier may still hold fds of cordond's
     * (made, pooled, adopted, deleted and not yet cleaned up), the fds they hold by cdn_box_fds, and
     * what the sandboxes may have of RLIMIT_NOFILE (fd_limit): the rest is kept for the others. */
    unsigned n_holding;
    uint64_t fd_used, fd_budget, fd_limit, fd_standing;
    bool stopping;
    int *kept_slots; /* slots whose emptied cgroups wait for the next sandbox (box.c) */
    size_t n_kept, cap_kept;
    /* What a spec's mounts[i].source may name (cordond.c; checked by api.c, pool.c). */
    struct cdn_bind_policy bind_policy;
    /* metrics */
    uint64_t created_total, create_errors, execs_total, http_errors;
    uint64_t violations_total[_CDN_VK_MAX];
    uint64_t alerts_total;
    uint64_t exec_hist[12]; /* buckets of exec latency, see api.c */
    double exec_sum_ms;
    uint64_t pulls_total, pull_errors, pull_bytes; /* image pulls (images.c) */
    uint64_t image_store_bytes;                    /* at the last measure, when known */
    bool image_store_known;
};

extern struct daemon *cdn_daemon;

/* Start a sandbox for spec (moved into the box); w is told how it ended, once (now, when its OCI
 * image is pulled (images.h), or when init runs or fails). The registry knows nothing of HTTP: the
 * API turns that into its answer. */
void cdn_box_create(struct cdn_spec *spec, struct cdn_box_waiter w);
/* The same once the image is there: image_manifest the OCI image's manifest digest, or NULL. */
void cdn_box_create_resolved(struct cdn_spec *spec, struct cdn_box_waiter w, const char *image_manifest);
/* And once what its tier makes once is there (images.h cdn_images_prepare_tier). */
void cdn_box_create_prepared(struct cdn_spec *spec, struct cdn_box_waiter w, const char *image_manifest);
/* Make a sandbox for spec (moved in) and put it in the API's list or, with
 * pool set, in that pool. Not running yet: its setup report comes later
 * (its waiter, or cdn_pool_box_ready). NULL with err on failure. */
struct box *cdn_box_spawn(struct cdn_spec *spec, struct pool *pool, struct cdn_error *err);
/* A pooled box handed to a client: spec replaces its labels, env and lifetime. */
void cdn_box_hand_over(struct box *b, struct cdn_spec *spec);

/* ---- warm pools (pool.c) ---- */
/* From the configuration: "SIZE" (the default spec) or "SIZE:SPECFILE". */
int cdn_pool_configure(const char *arg, struct cdn_error *err);
void cdn_pool_start(void);
/* A ready pooled box whose shape matches spec, out of its pool; or NULL. */
struct box *cdn_pool_take(const struct cdn_spec *spec);
void cdn_pool_box_add(struct pool *p, struct box *b); /* a new one, still starting */
void cdn_pool_box_ready(struct box *b);
/* It failed or died in the pool: it has been taken out; refill later. */
void cdn_pool_box_gone(struct box *b);
unsigned cdn_pool_ready_total(void);
/* At stop: every pooled box is deleted. */
void cdn_pool_drain(void);

/* Take over the sandboxes a previous cordond left (their records); clean up
 * those that cannot be taken over. Returns how many were adopted. */
int cdn_box_adopt_all(void);
/* A container an OCI runtime made (cordon-runtime's create; docs/runtime.md), attached: supervised as
 * a box (its violations, events, egress and metrics are cordond's) while its init stays the engine's
 * child. spec is taken. The box, or NULL with err; nothing of the container is touched on failure
 * before it is listed. */
struct cdn_box_attach {
    pid_t init_pid;
    uint64_t init_start; /* its start time (clock ticks since boot, /proc/PID/stat) */
    int slot;
    const char *cgroup;           /* the engine's cgroup path; NULL: the slot's */
    const char *socket;           /* where its init listens */
    uint32_t ids_from, ids_count; /* the engine's id range for it, if it has one (sandbox.h root_ids_from) */
};
struct box *cdn_box_attach(const struct cdn_box_attach *a, struct cdn_spec *spec, struct cdn_error *err);
/* An attached container's exec (cordon-runtime): the seccomp listener fd holds in process pid, which
 * must be one of the container's and waits, not yet exec'd, for this to return. Taken (pidfd_getfd)
 * and watched as init's is. 0, or -errno with err naming the field. */
int cdn_box_take_listener(struct box *b, pid_t pid, int fd, struct cdn_error *err);
/* Stop or go on reading those listeners (the supervision budget, box-events.c). */
void cdn_box_listeners_pause(struct box *b, bool pause);
/* At stop: forget every box without ending it (its init waits for the next
 * cordond), or end them all when configured so. */
void cdn_box_release_all(void);
/* At the end: remove the cgroup directories kept for reuse. */
void cdn_box_drop_kept_slots(void);
/* The slot's emptied cgroup is kept for the next sandbox; one of those taken off the list (-1: none). */
void cdn_box_keep_slot(int slot);
int cdn_box_kept_slot(void);
/* Whether a rollback of b must keep its slot (uid range): its read-write binds hold files of those
 * ids, which a bind does not map onto another slot's. Its old init is then waited for, and it has
 * no standby layer. */
bool cdn_box_keeps_slot(const struct box *b);
/* standby.c: after a checkpoint ck of b (tier container) that a client asked for or rolled back to,
 * the layer a rollback to it makes is made ahead, in 2 ms (the one of another checkpoint dropped). */
void cdn_standby_want(struct box *b, const char *ck);
/* For a rollback of b to ck: the layer made ahead for it (sandbox.h layer_ready), or NULL. */
struct cdn_layer_ready *cdn_standby_take(struct box *b, const char *ck);
/* A standby not made yet waits (a fork of b is under way: its 8 creates would pay for it), and goes
 * on, 2 ms later. */
void cdn_standby_wait(struct box *b);
void cdn_standby_go(struct box *b);
/* b's standby, made or not, let go (its slot released); checkpoint ck's, which is being deleted. */
void cdn_standby_drop(struct box *b);
void cdn_standby_forget(const char *ck);
/* grave.c: sb's init (a rollback's old one) is killed and moves, with its slot and cgroup, into a
 * grave that destroys it once its pidfd reports its end; sb keeps the rest (slot -1, no init).
 * -EOPNOTSUPP: its tier ends no init beside another (the caller destroys it); -ENOMEM. */
int cdn_grave_add(struct cdn_sandbox *sb);
/* Every grave destroyed now (cordond's end). */
void cdn_grave_flush(void);
/* fd, the root of a writable layer's mount whose files nobody reads again (a rollback's old one,
 * every process that wrote it killed), shut down and closed by a thread of its own, or here. */
void cdn_grave_layer(int fd);
struct box *cdn_box_find(const char *id);
/* Tear down (asynchronously) and forget. reason goes to the event log. */
void cdn_box_delete(struct box *b, const char *reason);
/* The box cannot be used any more (reason goes to the log and its state); init is killed by the caller. */
void cdn_box_stop(struct box *b, const char *reason);
/* cordond ends a running box (reason to its log and state): killed, its record kept for retention. */
void cdn_box_end(struct box *b, const char *reason);
/* Rollback (api-checkpoint.c): b's processes all end and a new init starts on a writable layer cloned
 * from layer_fd (a checkpoint's image, whose files keep the ids of slot base base; borrowed for the
 * call), or (memory_fd, a microvm guest's saved state, borrowed) the guest is restored from it; the box keeps
 * its id, spec, network, record, events and counts. w is told as a create's waiter once it runs (or fails:
 * then the sandbox is deleted). -errno and err: refused or failed (failed: b is deleted already, unless
 * -EBUSY). */
int cdn_box_respawn(struct box *b, int layer_fd, uint32_t base, int memory_fd, struct cdn_box_waiter w,
                    struct cdn_error *err);
/* Whether cdn_box_respawn would take b now: 0, or -EBUSY and err (paused, starting, dying, in a pool,
 * a sibling, or in a verifier step). Asked before anything else changes (its trajectory). */
int cdn_box_respawn_check(const struct box *b, struct cdn_error *err);
/* The fds of cordond's a sandbox of spec holds, by the budget's count (registry.h, box.c). */
unsigned cdn_box_fds(const struct cdn_spec *spec);
/* A request on b: its idle timeout counts from now. */
void cdn_box_touch(struct box *b);
/* A new lifetime of ms from now (0: none) or idle timeout (0: none); the record follows. */
int cdn_box_set_lifetime(struct box *b, uint64_t ms);
int cdn_box_set_idle(struct box *b, uint64_t ms);
/* Pause a running box: every process of it frozen (its cgroup; a VM guest's QEMU with it), its
 * lifetime and idle clocks stopped. Resume thaws it; its lifetime is then lifetime_ms from now, or
 * (0) what was left of it. 0, or -errno with err saying why (-EALREADY: paused already, or not
 * paused; -EBUSY: a verifier step runs; -ENOTSUP: no freezer). A box that ends is thawed. */
int cdn_box_pause(struct box *b, struct cdn_error *err);
int cdn_box_resume(struct box *b, uint64_t lifetime_ms, struct cdn_error *err);
const char *cdn_box_state_name(enum box_state s);

/* ---- a box's events and violations (box-events.c) ---- */
/* Append an event (NDJSON line: time, sandbox, type, then fields, stolen) to
 * the box's log and push it to followers. */
void cdn_box_event(struct box *b, const char *type, json_t *fields);
/* The log as GET …/events gives it: the first line of each kind the ring dropped, how many it
 * dropped, then the ring. */
void cdn_box_events_write(struct box *b, struct evbuffer *out);
void cdn_box_events_free(struct box *b);
/* The policy side of a box's session (box-events.c): its phase from state and verifier, kill mode
 * through cdn_box_stop, its events (sampled) and metrics; a verifier's sibling forwards to its sandbox. */
extern const struct cdn_session_ops cdn_box_session_ops;
/* Record a violation found by cordond itself (limits, egress, the files API) through the box's
 * session: counted, a "violation" event (kind, then fields, stolen; NULL when
 * cdn_box_violation_logged said no) if its kind's sample allows it, and with on_violation "kill"
 * the sandbox ends at once. */
void cdn_box_violation(struct box *b, enum cdn_vk kind, json_t *fields);
/* Whether the next violation of kind will be written as an event: its details are worth reading
 * (a command line, a path) only then. */
bool cdn_box_violation_logged(struct box *b, enum cdn_vk kind);
/* A "violations_suppressed" event for the ones counted but not written (also once a second). */
void cdn_box_violations_flush(struct box *b);
/* A batch of a box's supervision work began at cdn_box_supervise_start(): charged to its budget, which
 * pauses its listeners (cdn_box_fanotify_pause) when spent, until the second is over
 * (cdn_box_fanotify_resume). */
uint64_t cdn_box_supervise_start(void);
void cdn_box_supervised(struct box *b, uint64_t t0_ns);
/* The cgroup's OOM kills and pids-limit hits since the last look become violations. */
void cdn_box_check_limits(struct box *b);
/* {"counts": {kind: n, …}, "first": t|null, "last": t|null} */
json_t *cdn_box_violations_json(const struct box *b);
/* JSON of the box for GET, caller frees (json_decref). */
json_t *cdn_box_to_json(struct box *b);
/* What it uses now (docs/cordond.md "usage"), or at its end once it ended; NULL while it starts. */
json_t *cdn_box_usage_json(struct box *b);

/* ---- egress (egress.c, DESIGN §7) ---- */
/* Proxy, DNS stub, nftables table. A failure leaves cordond up, refusing
 * network modes other than none with the reason. */
int cdn_egress_start(void);
void cdn_egress_stop(void);
/* Before the tier's create: the box's network namespace, veth and allowlist. */
int cdn_egress_attach(struct box *b, struct cdn_error *err);
/* After init's end. */
void cdn_egress_detach(struct box *b);
/* At stop, for a sandbox left running: forget it here (its connections end,
 * audited) but leave its namespace and veth to the next cordond. */
void cdn_egress_release(struct box *b);
/* After a restart: take back the namespace (lease) of a sandbox whose init
 * was adopted; its allowlist comes from its spec, its DNS pins start empty
 * (names are answered again as they are asked), its old connections are gone. */
int cdn_egress_adopt(struct box *b, int lease, struct cdn_error *err);
/* Once every sandbox is adopted: the kernel forgets their flows' NAT to the
 * last cordond's listeners (net/conntrack.h). Returns how many flows, or -errno. */
int cdn_egress_forget_old_flows(void);
/* PATCH …/network: replace mode and list (allow moved in on success). */
int cdn_egress_set(struct box *b, enum cdn_net_mode mode, struct cdn_strv *allow, struct cdn_error *err);
const char *cdn_egress_log_path(void);

/* ---- the file-access guard (box-fanotify.c) ---- */
int cdn_box_fanotify_global_start(void);
void cdn_box_fanotify_global_stop(void);
/* Before the tier's create: a sandbox with protected paths gets its own group. */
int cdn_box_fanotify_prepare(struct box *b, struct cdn_error *err);
/* Once init runs, before any command: mark its mounts. */
int cdn_box_fanotify_start(struct box *b, struct cdn_error *err);
/* After a restart: take the group back from init (protected paths) and mark again. */
int cdn_box_fanotify_adopt(struct box *b, struct cdn_error *err);
/* Before a verifier step: -ESTALE (err says which) if a protected path is not its mount any more. */
int cdn_box_fanotify_check_moved(struct box *b, struct cdn_error *err);
/* PATCH "protect": the sandbox's protected paths become want (patterns, checked): the tier binds
 * the new ones and releases the dropped (tier.h protect), then they are marked and unmarked, and
 * init told. A group made for it goes to init to hold (across a restart of ours). Nothing changes
 * on failure; -EBUSY: a process of the sandbox holds something beneath a new one (err names it). */
int cdn_box_protect(struct box *b, const struct cdn_strv *want, struct cdn_error *err);
void cdn_box_fanotify_stop(struct box *b);
/* Its supervision budget is spent (box-events.c): its own group is not read, and its refusals from
 * the shared group are held (their openers wait) until cdn_box_fanotify_resume. */
void cdn_box_fanotify_pause(struct box *b);
void cdn_box_fanotify_resume(struct box *b);

/* ---- a clean sibling's verifier step (api-sibling.c, sibling-spec.c) ---- */
/* A protected path beneath a read-write bind: where on the host, and what it was at creation. */
struct protected_src {
    size_t mount; /* index in spec.mounts */
    char *rel;    /* beneath its source ("" for all of it) */
    dev_t dev;
    ino_t ino;
    bool plain; /* reached without a symlink (else no identity: a step refuses it) */
};
/* At creation: record them (0 or -errno). */
int cdn_sibling_sources_note(struct box *b);
void cdn_sibling_sources_free(struct box *b);
/* The sibling's spec: b's, its read-write binds replaced by the recorded protected parts (each
 * checked to be the same object: -ESTALE if not), labelled SIBLING_LABEL. */
int cdn_sibling_spec(struct box *b, struct cdn_spec *ret, struct cdn_error *err);
/* The label a sibling's spec carries (its value: the id of the sandbox it verifies). */
#define SIBLING_LABEL "cordon.sibling_of"

/* ---- the monitor's rules (monitor.c) ---- */
int cdn_monitor_load_rules(const char *path, struct cdn_error *err);
void cdn_monitor_free(void);
size_t cdn_monitor_rule_count(void);
/* An "alert" event for b (rate-limited per sandbox). */
void cdn_monitor_alert(struct box *b, const char *rule, const char *severity, const char *source,
                       const char *detail, size_t detail_len);
/* The same with fields of its own (borrowed; may be NULL) added to the event. */
void cdn_monitor_alert_with(struct box *b, const char *rule, const char *severity, const char *source,
                            const char *detail, size_t detail_len, json_t *fields);
/* Match subject against the rules of source (1 exec, 2 text); alerts for the
 * matches; returns a JSON list of them [{rule, severity, description}]. */
json_t *cdn_monitor_match(struct box *b, int source, const char *subject, size_t len);

/* A JSON string of bytes that may not be UTF-8: invalid sequences become U+FFFD. */
json_t *cdn_json_lossy_string(const uint8_t *p, size_t n);
