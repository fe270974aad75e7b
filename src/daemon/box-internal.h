/* What box.c shares with box-adopt.c (sandboxes a restarted cordond takes back, and an OCI runtime's
 * containers it attaches): the parts of a box's life both make. Not for the rest of the daemon. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#include "registry.h"

double box_now_unix(void);
/* The fields of a new box (calloc'd, its spec in place): no fds yet, its sandbox and session. */
void box_init(struct box *b);
/* Its hold on cordond's fds (cdn_box_fds); whether a spec's sandbox fits them (else err says why). */
void box_hold(struct box *b);
bool box_fds_left(const struct cdn_spec *spec, struct cdn_error *err);
/* Its events (init's exit, the agent connection, its timers), armed. 0 or -ENOMEM. */
int box_watch(struct box *b);
/* Its seccomp listener watched (the tier's monitor_fd), if it has one. */
void box_monitor_start(struct box *b);
/* OOM kills and pids-limit hits count from where its cgroup stands now. */
void box_rebase_limits(struct box *b);
/* Its waiter told how its create ended. */
void box_created(struct box *b, enum cdn_box_created how, const struct cdn_error *err);
/* A one-shot timer of ms for b. 0 or -ENOMEM. */
int box_arm(struct event **ev, event_callback_fn fn, struct box *b, uint64_t ms);
/* An ended box's retention is over: it goes. */
void box_on_retention(evutil_socket_t fd, short what, void *arg);
/* Onto cdn_daemon->boxes, where cdn_box_find finds it by id (box-index.c); off any list. */
void box_list(struct box *b);
void box_unlist(struct box *b);
/* Everything of b (its sandbox must be let go or cleaned up first). */
void box_free(struct box *b);
