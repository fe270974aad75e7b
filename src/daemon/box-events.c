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
#include <errno.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "registry.h"
#include "tiers/tier.h"
#include "core/json-util.h"

#define EVENTS_MAX             (256u << 10)      /* per box; the oldest lines go first */
#define VIOLATION_EVENTS_FIRST 10                /* of each kind: always written */
#define VIOLATION_EVENTS_RATE  10.0              /* of each kind and second, after those: sampled */
#define SUPERVISE_BUDGET_NS    (100u * 1000000u) /* of the loop's time per box and second */
#define SUPERVISE_VIOLATIONS   200               /* per box and second, before its listeners pause */

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
    if (b->n_pinned == b->cap_pinned) {
        /* Grown rather than a fixed array in each box: 2 KiB a sandbox that cordond's every fork
         * copies (docs/performance.md). */
        size_t cap = b->cap_pinned ? b->cap_pinned * 2 : 4;
        if (cap > EVENTS_PINNED)
            cap = EVENTS_PINNED;
        struct pinned_event *grown = reallocarray(b->pinned, cap, sizeof *grown);
        if (!grown)
            return;
        b->pinned = grown;
        b->cap_pinned = cap;
    }
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
    _cleanup_json_ json_t *ev =
        json_pack("{s:f, s:s, s:s}", "time", now_unix(), "sandbox", b->sb.id, "type", type);
    if (ev && fields)
        (void) json_object_update(ev, fields);
    json_decref(fields);
    _cleanup_free_ char *line = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
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
    if (cdn_daemon->listener)
        cdn_daemon->listener->event(b, line, n + 1);
}

void cdn_box_event(struct box *b, const char *type, json_t *fields)
{
    log_event(b, type, type, fields);
}

void cdn_box_events_write(struct box *b, struct evbuffer *out)
{
    /* Lines are numbered from 0 as they come; the ring holds those from events_dropped on. */
    for (size_t i = 0; i < b->n_pinned; i++)
        if (b->pinned[i].seq < b->events_dropped)
            (void) evbuffer_add(out, b->pinned[i].line, b->pinned[i].len);
    if (b->events_dropped) {
        _cleanup_json_ json_t *m =
            json_pack("{s:f, s:s, s:s, s:I}", "time", now_unix(), "sandbox", b->sb.id, "type",
                      "events_dropped", "dropped", (json_int_t) b->events_dropped);
        _cleanup_free_ char *s = m ? json_dumps(m, JSON_COMPACT) : NULL;
        if (s)
            (void) evbuffer_add_printf(out, "%s\n", s);
    }
    (void) evbuffer_add_buffer_reference(out, b->events);
}

/* ---- violations ---- */

json_t *cdn_box_violations_json(const struct box *b)
{
    json_t *counts = json_object();
    for (int k = 0; counts && k < _CDN_VK_MAX; k++)
        json_object_set_new(counts, cdn_vk_name(k), json_integer((json_int_t) b->session.counts[k]));
    return json_pack("{s:o, s:o, s:o}", "counts", counts ? counts : json_object(), "first",
                     b->session.first ? json_real(b->session.first) : json_null(), "last",
                     b->session.last ? json_real(b->session.last) : json_null());
}

/* Whether the next violation of kind gets an event; take: it does now (the sample is spent). */
static bool sample(struct box *b, enum cdn_vk kind, bool take)
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

bool cdn_box_violation_logged(struct box *b, enum cdn_vk kind)
{
    if (b->sibling) /* counted and logged on the sandbox it verifies */
        return b->verifies && cdn_box_violation_logged(b->verifies, kind);
    return sample(b, kind, false);
}

void cdn_box_violations_flush(struct box *b)
{
    json_t *counts = NULL;
    for (int k = 0; k < _CDN_VK_MAX; k++) {
        if (!b->viol.suppressed[k])
            continue;
        if (!counts && !(counts = json_object()))
            return;
        json_object_set_new(counts, cdn_vk_name(k), json_integer((json_int_t) b->viol.suppressed[k]));
        b->viol.suppressed[k] = 0;
    }
    if (b->viol.flush_ev)
        evtimer_del(b->viol.flush_ev);
    if (counts)
        cdn_box_event(b, "violations_suppressed", json_pack("{s:o}", "suppressed", counts));
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    cdn_box_violations_flush(arg);
}

void cdn_box_violation(struct box *b, enum cdn_vk kind, json_t *fields)
{
    (void) cdn_session_violation(&b->session, kind, &(struct cdn_violation_detail){.extra = fields});
}

/* ---- the box's session (supervise/session.h): cordond's side of its policy ---- */

static enum cdn_session_phase session_phase(struct cdn_session *s)
{
    const struct box *b = s->arg;
    if (b->state != BOX_RUNNING)
        return b->state == BOX_STARTING ? CDN_SESSION_STARTING : CDN_SESSION_ENDED;
    return b->verifier == VERIFIER_RUNNING ? CDN_SESSION_VERIFIER : CDN_SESSION_RUNNING;
}

/* Kill mode: the state says why; init's exit then cleans up. A verifier's sibling goes with the
 * sandbox it verifies, whose own session kills that one (session_counted). */
static int session_kill(struct cdn_session *s, enum cdn_vk kind)
{
    struct box *b = s->arg;
    if (b->sibling && !b->verifies)
        return -ESRCH; /* nothing left to go with */
    char reason[64] = "killed on violation";
    if (!b->sibling)
        (void) snprintf(reason, sizeof reason, "killed on violation: %s", cdn_vk_name(kind));
    cdn_box_stop(b, reason);
    (void) b->sb.tier->kill(&b->sb, SIGKILL);
    return 0;
}

static bool session_wants_detail(struct cdn_session *s, enum cdn_vk kind)
{
    return cdn_box_violation_logged(s->arg, kind);
}

static json_t *lossy(const char *s)
{
    return cdn_json_lossy_string((const uint8_t *) s, strlen(s));
}

/* A violation's event fields: the owner's own (d->extra, taken), or made from what the session
 * read of its caller. */
static json_t *detail_json(const struct cdn_violation_detail *d)
{
    if (d->extra)
        return d->extra;
    json_t *f = NULL;
    if (d->syscall) {
        _cleanup_free_ char *name = seccomp_syscall_resolve_num_arch(d->arch, d->nr);
        json_t *args = json_array();
        for (int k = 0; args && k < 6; k++)
            json_array_append_new(args, json_integer((json_int_t) d->args[k]));
        f = json_pack("{s:s, s:i, s:i, s:o, s:o}", "syscall", name ? name : "?", "nr", d->nr, "pid", d->pid,
                      "cmd", lossy(d->cmd), "args", args ? args : json_array());
    } else if (d->path) {
        f = json_pack("{s:o, s:o, s:i, s:o}", "path", lossy(d->path), "op", lossy(d->op), "pid", d->pid,
                      "cmd", lossy(d->cmd));
    }
    if (f && d->guest)
        json_object_set_new(f, "where", json_string("guest"));
    return f;
}

/* Counted by the session: the metrics, the box's budget, and its event (sampled). */
static void session_counted(struct cdn_session *s, enum cdn_vk kind, const struct cdn_violation_detail *d)
{
    struct box *b = s->arg;
    if (b->sibling) {
        /* A verifier's sibling (api-sibling.c): the sandbox it verifies counts it, and its policy
         * decides. */
        if (b->verifies)
            (void) cdn_session_violation(&b->verifies->session, kind, d);
        else if (d)
            json_decref(d->extra);
        return;
    }
    _cleanup_json_ json_t *fields = d ? detail_json(d) : NULL;
    cdn_daemon->violations_total[kind]++;
    b->budget.violations++;
    bool sampled = b->viol.logged[kind] >= VIOLATION_EVENTS_FIRST;
    if (sample(b, kind, true)) {
        json_t *ev = json_pack("{s:s}", "kind", cdn_vk_name(kind));
        if (ev && fields)
            (void) json_object_update(ev, fields);
        if (ev && sampled)
            json_object_set_new(ev, "sampled", json_true());
        char key[32];
        (void) snprintf(key, sizeof key, "violation:%s", cdn_vk_name(kind));
        log_event(b, "violation", key, ev);
    } else {
        b->viol.suppressed[kind]++;
        struct timeval tv = {.tv_sec = 1};
        if (!b->viol.flush_ev)
            b->viol.flush_ev = evtimer_new(cdn_daemon->base, on_flush, b);
        if (b->viol.flush_ev && !evtimer_pending(b->viol.flush_ev, NULL))
            (void) evtimer_add(b->viol.flush_ev, &tv);
    }
}

const struct cdn_session_ops cdn_box_session_ops = {.phase = session_phase,
                                                    .kill = session_kill,
                                                    .wants_detail = session_wants_detail,
                                                    .counted = session_counted};

/* ---- the supervision budget ---- */

static void resume(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct box *b = arg;
    b->budget.paused = false;
    if (b->monitor_ev)
        (void) event_add(b->monitor_ev, NULL);
    cdn_box_listeners_pause(b, false);
    cdn_box_fanotify_resume(b);
}

void cdn_box_supervised(struct box *b, uint64_t t0_ns)
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
    if (!g->resume_ev && !(g->resume_ev = evtimer_new(cdn_daemon->base, resume, b)))
        return;
    uint64_t left_us = (g->window_ns + 1000000000u - now) / 1000;
    struct timeval tv = {.tv_sec = (time_t) (left_us / 1000000),
                         .tv_usec = (suseconds_t) (left_us % 1000000)};
    if (evtimer_add(g->resume_ev, &tv) < 0)
        return;
    g->paused = true;
    if (b->monitor_ev)
        (void) event_del(b->monitor_ev);
    cdn_box_listeners_pause(b, true);
    cdn_box_fanotify_pause(b);
}

uint64_t cdn_box_supervise_start(void)
{
    return now_ns();
}

void cdn_box_events_free(struct box *b)
{
    for (size_t i = 0; i < b->n_pinned; i++)
        free(b->pinned[i].line);
    free(b->pinned);
    b->pinned = NULL;
    b->n_pinned = b->cap_pinned = 0;
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

/* Length of the valid UTF-8 sequence at p (n bytes available), 0 if invalid:
 * no overlong forms, no surrogates, nothing past U+10FFFF. */
static size_t utf8_seq(const uint8_t *p, size_t n)
{
    uint8_t c = p[0];
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (size_t k = 1; k < len; k++) {
        if ((p[k] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (p[k] & 0x3F);
    }
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

json_t *cdn_json_lossy_string(const uint8_t *p, size_t n)
{
    json_t *j = json_stringn((const char *) p, n);
    if (j)
        return j;
    /* Not UTF-8: rebuild with U+FFFD for each byte that does not start a valid sequence. */
    _cleanup_free_ char *out = malloc(n * 3 + 1);
    if (!out)
        return json_null();
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq(p + i, n - i);
        if (len) {
            memcpy(out + o, p + i, len);
            o += len, i += len;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3, i++;
        }
    }
    j = json_stringn(out, o);
    return j ? j : json_null();
}
