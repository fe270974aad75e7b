/* A box's event log and its violations (docs/events.md): what one sandbox may cost the daemon.
 *
 * Runs in the loop. A sandbox decides how many violations it makes — a ptrace loop makes tens of
 * thousands a second — so nothing done per violation may grow with them: each is counted exactly
 * (the reward signal), but written as an event only while the kind's sample allows it (the first
 * VIOLATION_EVENTS_FIRST of each kind, then VIOLATION_EVENTS_RATE a second, marked "sampled"); the
 * others are summed in one "violations_suppressed" event a second. And the work of supervising a
 * box (its seccomp notifications, its fanotify events) has a budget per second of wall time: past
 * it, its listeners are not read until the second is over, and its callers wait in the kernel —
 * so that a flooding sandbox slows itself, not the daemon or the others.
 *
 * The log is a ring of NDJSON lines (EVENTS_MAX bytes, the oldest dropped first); the first line
 * of each event type, and of each violation kind, is kept aside when the ring drops it, so that a
 * flood cannot push the first protect violation out of the log. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "tiers/tier.h"

#define EVENTS_MAX             (256u << 10)      /* per box; the oldest lines go first */
#define VIOLATION_EVENTS_FIRST 10                /* of each kind: always written */
#define VIOLATION_EVENTS_RATE  10.0              /* of each kind and second, after those: sampled */
#define SUPERVISE_BUDGET_NS    (100u * 1000000u) /* of the loop's time per box and second */
#define SUPERVISE_VIOLATIONS   200               /* per box and second, before its listeners pause */

const char *const violation_names[_VIOLATION_MAX] = {"egress", "syscall", "oom",    "pids",
                                                     "disk",   "protect", "kernel", "system_write"};

static double now_unix(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double) t.tv_sec + (double) t.tv_nsec / 1e9;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t) t.tv_sec * 1000000000u + (uint64_t) t.tv_nsec;
}

/* ---- the log ---- */

/* The first line of its kind (key): kept aside for when the ring drops it. */
static void pin(struct box *b, const char *key, const char *line, size_t len)
{
    for (size_t i = 0; i < b->n_pinned; i++)
        if (strcmp(b->pinned[i].key, key) == 0)
            return;
    if (b->n_pinned == EVENTS_PINNED)
        return;
    struct pinned_event *p = &b->pinned[b->n_pinned];
    if (!(p->line = malloc(len)))
        return;
    memcpy(p->line, line, len);
    p->len = len;
    p->seq = b->events_seq;
    (void) snprintf(p->key, sizeof p->key, "%s", key);
    b->n_pinned++;
}

static void log_event(struct box *b, const char *type, const char *key, json_t *fields)
{
    json_t *ev = json_pack("{s:f, s:s, s:s}", "time", now_unix(), "sandbox", b->sb.id, "type", type);
    if (ev && fields)
        (void) json_object_update(ev, fields);
    json_decref(fields);
    char *line = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
    json_decref(ev);
    if (!line)
        return;
    size_t n = strlen(line);
    line[n] = '\n'; /* replaces the NUL; the length below says where it ends */
    pin(b, key, line, n + 1);
    b->events_seq++;
    (void) evbuffer_add(b->events, line, n + 1);
    while (evbuffer_get_length(b->events) > EVENTS_MAX) {
        struct evbuffer_ptr nl = evbuffer_search(b->events, "\n", 1, NULL);
        if (nl.pos < 0)
            break;
        (void) evbuffer_drain(b->events, (size_t) nl.pos + 1);
        b->events_dropped++;
    }
    api_events_push(b, line, n + 1);
    free(line);
}

void box_event(struct box *b, const char *type, json_t *fields)
{
    log_event(b, type, type, fields);
}

void box_events_write(struct box *b, struct evbuffer *out)
{
    /* Lines are numbered from 0 as they come; the ring holds those from events_dropped on. */
    for (size_t i = 0; i < b->n_pinned; i++)
        if (b->pinned[i].seq < b->events_dropped)
            (void) evbuffer_add(out, b->pinned[i].line, b->pinned[i].len);
    if (b->events_dropped) {
        json_t *m = json_pack("{s:f, s:s, s:s, s:I}", "time", now_unix(), "sandbox", b->sb.id, "type",
                              "events_dropped", "dropped", (json_int_t) b->events_dropped);
        char *s = m ? json_dumps(m, JSON_COMPACT) : NULL;
        json_decref(m);
        if (s) {
            (void) evbuffer_add_printf(out, "%s\n", s);
            free(s);
        }
    }
    (void) evbuffer_add_buffer_reference(out, b->events);
}

/* ---- violations ---- */

json_t *box_violations_json(const struct box *b)
{
    json_t *counts = json_object();
    for (int k = 0; counts && k < _VIOLATION_MAX; k++)
        json_object_set_new(counts, violation_names[k], json_integer((json_int_t) b->viol.counts[k]));
    return json_pack("{s:o, s:o, s:o}", "counts", counts ? counts : json_object(), "first",
                     b->viol.first ? json_real(b->viol.first) : json_null(), "last",
                     b->viol.last ? json_real(b->viol.last) : json_null());
}

/* Whether the next violation of kind gets an event; take: it does now (the sample is spent). */
static bool sample(struct box *b, enum violation_kind kind, bool take)
{
    struct violations *v = &b->viol;
    if (v->logged[kind] < VIOLATION_EVENTS_FIRST) {
        v->logged[kind] += take;
        return true;
    }
    double now = (double) now_ns() / 1e9;
    if (!v->refilled[kind]) /* the first sampled one: the bucket starts empty */
        v->refilled[kind] = now;
    double tokens = v->tokens[kind] + (now - v->refilled[kind]) * VIOLATION_EVENTS_RATE;
    if (tokens > VIOLATION_EVENTS_RATE)
        tokens = VIOLATION_EVENTS_RATE;
    if (take) {
        v->tokens[kind] = tokens >= 1 ? tokens - 1 : tokens;
        v->refilled[kind] = now;
        v->logged[kind] += tokens >= 1;
    }
    return tokens >= 1;
}

bool box_violation_logged(struct box *b, enum violation_kind kind)
{
    if (b->sibling) /* counted and logged on the sandbox it verifies */
        return b->verifies && box_violation_logged(b->verifies, kind);
    return sample(b, kind, false);
}

void box_violations_flush(struct box *b)
{
    json_t *counts = NULL;
    for (int k = 0; k < _VIOLATION_MAX; k++) {
        if (!b->viol.suppressed[k])
            continue;
        if (!counts && !(counts = json_object()))
            return;
        json_object_set_new(counts, violation_names[k], json_integer((json_int_t) b->viol.suppressed[k]));
        b->viol.suppressed[k] = 0;
    }
    if (b->viol.flush_ev)
        evtimer_del(b->viol.flush_ev);
    if (counts)
        box_event(b, "violations_suppressed", json_pack("{s:o}", "suppressed", counts));
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    box_violations_flush(arg);
}

void box_violation(struct box *b, enum violation_kind kind, json_t *fields)
{
    if (b->sibling) {
        /* A verifier's sibling (api-sibling.c): the sandbox it verifies counts it, and its policy
         * decides; the sibling goes with it in kill mode. */
        struct box *o = b->verifies;
        bool kill = o && o->spec.on_violation == CDN_VIOLATION_KILL;
        if (o)
            box_violation(o, kind, fields);
        else
            json_decref(fields);
        if (kill && b->state == BOX_RUNNING) {
            box_stop(b, "killed on violation");
            (void) b->sb.tier->kill(&b->sb, SIGKILL);
        }
        return;
    }
    double now = now_unix();
    b->viol.counts[kind]++;
    if (!b->viol.first)
        b->viol.first = now;
    b->viol.last = now;
    cordond->violations_total[kind]++;
    b->budget.violations++;
    bool sampled = b->viol.logged[kind] >= VIOLATION_EVENTS_FIRST;
    if (sample(b, kind, true)) {
        json_t *ev = json_pack("{s:s}", "kind", violation_names[kind]);
        if (ev && fields)
            (void) json_object_update(ev, fields);
        if (ev && sampled)
            json_object_set_new(ev, "sampled", json_true());
        char key[32];
        (void) snprintf(key, sizeof key, "violation:%s", violation_names[kind]);
        log_event(b, "violation", key, ev);
    } else {
        b->viol.suppressed[kind]++;
        struct timeval tv = {.tv_sec = 1};
        if (!b->viol.flush_ev)
            b->viol.flush_ev = evtimer_new(cordond->base, on_flush, b);
        if (b->viol.flush_ev && !evtimer_pending(b->viol.flush_ev, NULL))
            (void) evtimer_add(b->viol.flush_ev, &tv);
    }
    json_decref(fields);
    if (b->spec.on_violation == CDN_VIOLATION_KILL && b->state == BOX_RUNNING) {
        char reason[64];
        (void) snprintf(reason, sizeof reason, "killed on violation: %s", violation_names[kind]);
        b->violation_killed = true;
        box_stop(b, reason); /* the state says why; init's exit then cleans up */
        (void) b->sb.tier->kill(&b->sb, SIGKILL);
    }
}

/* ---- the supervision budget ---- */

static void resume(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct box *b = arg;
    b->budget.paused = false;
    if (b->monitor_ev)
        (void) event_add(b->monitor_ev, NULL);
    guard_resume(b);
}

void box_supervised(struct box *b, uint64_t t0_ns)
{
    struct box_budget *g = &b->budget;
    uint64_t now = now_ns();
    if (now - g->window_ns >= 1000000000u) {
        g->window_ns = now;
        g->spent_ns = 0;
        g->violations = 0;
    }
    g->spent_ns += now - t0_ns;
    if (g->paused || (g->spent_ns < SUPERVISE_BUDGET_NS && g->violations < SUPERVISE_VIOLATIONS))
        return;
    if (!g->resume_ev && !(g->resume_ev = evtimer_new(cordond->base, resume, b)))
        return;
    uint64_t left_us = (g->window_ns + 1000000000u - now) / 1000;
    struct timeval tv = {.tv_sec = (time_t) (left_us / 1000000),
                         .tv_usec = (suseconds_t) (left_us % 1000000)};
    if (evtimer_add(g->resume_ev, &tv) < 0)
        return;
    g->paused = true;
    if (b->monitor_ev)
        (void) event_del(b->monitor_ev);
    guard_pause(b);
}

uint64_t box_supervise_start(void)
{
    return now_ns();
}

void box_events_free(struct box *b)
{
    for (size_t i = 0; i < b->n_pinned; i++)
        free(b->pinned[i].line);
    b->n_pinned = 0;
    if (b->viol.flush_ev)
        event_free(b->viol.flush_ev);
    b->viol.flush_ev = NULL;
    if (b->budget.resume_ev)
        event_free(b->budget.resume_ev);
    b->budget.resume_ev = NULL;
    if (b->events)
        evbuffer_free(b->events);
    b->events = NULL;
}
