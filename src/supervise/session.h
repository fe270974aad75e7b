/* A sandbox's supervision session: one per sandbox, in the host process that supervises it
 * (cordond: one per box; `cordon run`: one for the run). It owns the violation policy and its
 * counters — every violation of every kind is counted, and kill mode acted on, here and only here —
 * the decisions on its seccomp listener's notifications and on its fanotify events, and the marks
 * of its guarded mounts.
 *
 * The session is driven by its owner's event loop: the owner reads the listeners when they are
 * ready (cordond on its libevent base, with its budget; `cordon run` in its poll loop, which the
 * lean musl build has too) and hands each event here. Every call must come from that one thread;
 * a helper thread (the egress loop of `cordon run`) passes its violations to it.
 *
 * What the session does not own is reported through ops: killing the sandbox, and what the owner
 * records of each violation (cordond: events, samples, metrics; `cordon run`: nothing more). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "confine/seccomp-policy.h"
#include "core/sandbox.h"
#include "monitor/fanotify.h"
#include "supervise/policy.h"

/* Where the owner is with the sandbox. Only RUNNING and VERIFIER supervise: before, nothing of
 * the sandbox runs under the listeners; after (killed, stopped, deleted) its processes are going,
 * so opens are let through uncounted and nothing is answered any more (see cdn_violation_answer). */
enum cdn_session_phase {
    CDN_SESSION_STARTING,
    CDN_SESSION_RUNNING,
    CDN_SESSION_VERIFIER, /* running, and a verifier step runs alone: protected paths are open to it */
    CDN_SESSION_ENDED,
};

/* What a violation was, for the owner's record. Fields not known are 0/NULL. */
struct cdn_violation_detail {
    int pid;               /* the caller, as the supervisor sees it */
    const char *cmd;       /* its command line, read while it waited */
    const char *path, *op; /* protect, kernel, system_write: the path and what was done to it */
    bool syscall;          /* syscall: nr, arch and args are set */
    int nr;
    uint32_t arch;
    const uint64_t *args; /* 6 */
    bool guest;           /* reported by a VM guest's init */
    void *extra;          /* the owner's (cordond: an event's JSON fields), owned by ops->counted */
};

struct cdn_session;
struct cdn_session_ops {
    /* Where the owner is (NULL: running until the session kills it). */
    enum cdn_session_phase (*phase)(struct cdn_session *s);
    /* Kill mode, at the first violation while running: end the sandbox; 0 when it is ending. */
    int (*kill)(struct cdn_session *s, enum cdn_vk kind);
    /* Whether the owner records the details of the next violation of kind (reading the caller's
     * command line and path costs: a sandbox chooses how many violations it makes). NULL: never. */
    bool (*wants_detail)(struct cdn_session *s, enum cdn_vk kind);
    /* A violation was counted; d is NULL unless wants_detail said yes or the caller had details
     * anyway. Called before the kill. NULL: nothing to record. */
    void (*counted)(struct cdn_session *s, enum cdn_vk kind, const struct cdn_violation_detail *d);
};

struct cdn_session {
    struct cdn_sandbox *sb; /* borrowed: its spec (protect, on_violation) and init */
    const struct cdn_session_ops *ops;
    void *arg;                       /* the owner's */
    uint64_t counts[_CDN_VK_MAX];    /* exact: the reward signal */
    double first, last;              /* unix time of the first and the last violation; 0 = none */
    bool killed;                     /* kill mode acted */
    struct cdn_fanotify_marks marks; /* the mounts marked for it (cdn_session_mark) */
    /* Opens held unanswered since the kill went out (their events' fds): see cdn_session_file_open. */
    int *held;
    size_t n_held, cap_held;
};

void cdn_session_init(struct cdn_session *s, struct cdn_sandbox *sb, const struct cdn_session_ops *ops,
                      void *arg);
/* The marks, and the fds of held opens (the owner answers them first: cdn_session_answer_held); the
 * counts stay readable. Accepts a session never initialised past zero. */
void cdn_session_free(struct cdn_session *s);
enum cdn_session_phase cdn_session_phase(struct cdn_session *s);

/* Count a violation of kind (d: its details, or NULL), tell the owner, and in kill mode end the
 * sandbox while it runs. Returns whether its caller may still be answered (false: hold it). */
bool cdn_session_violation(struct cdn_session *s, enum cdn_vk kind, const struct cdn_violation_detail *d);

/* One notification of the sandbox's seccomp listener (fd, owned by the caller): received, decided
 * and answered (or, the sandbox ending for it, left unanswered). -ENOENT: the caller went away;
 * other -errno: nothing to read. */
int cdn_session_seccomp(struct cdn_session *s, int fd);

/* Mark, in group, the sandbox's protected paths and masked kernel files (fanotify.h), once its
 * init runs and before any command does. -errno, err says why. */
int cdn_session_mark(struct cdn_session *s, int group, struct cdn_error *err);
/* Whether the session marked mnt_id (the owner of an event of a group shared by sandboxes). */
bool cdn_session_marked(const struct cdn_session *s, int mnt_id);
/* The fanotify decision on one open of a mount marked for this session. CONTINUE: it may go on;
 * DENY: refused, a violation (counted here), the caller answers (fanotify.h cdn_fanotify_answer);
 * HOLD: the session has killed the sandbox, for this open or an earlier one: the event is kept
 * here unanswered (ev->fd taken), so that its opener neither reads the file nor runs on after it
 * — it waits in the open until the kill takes it. The group must answer the held events
 * (cdn_session_answer_held) before it is closed: the kernel lets the pending ones through then. */
enum cdn_answer cdn_session_file_open(struct cdn_session *s, struct cdn_fanotify_event *ev);
/* Refuse the held opens in group (their openers are gone or going) and forget them. */
void cdn_session_answer_held(struct cdn_session *s, int group);

/* A VIOLATION frame from a VM guest's init (channel 0): counted as the host's own would be.
 * -EPROTO if it does not decode or is not a sandbox's violation (the guest broke the protocol). */
int cdn_session_guest_violation(struct cdn_session *s, const uint8_t *p, uint32_t len);
