/* cordond's side of the monitor's rules (src/monitor/rules.h): the rule set
 * (monitor_rules = FILE, else the shipped default), matched against every
 * exec's command line and against text posted to
 * POST /v1/sandboxes/{id}/monitor/text; each match is an "alert" event, at
 * most ALERT_RATE a second per sandbox (the rest are counted and reported
 * in one alert when the next second starts). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "registry.h"
#include "shared/macro.h"
#include "monitor/rules.h"

#define ALERT_RATE 20 /* per rule, sandbox and second */
#define EXCERPT    120

static struct cdn_rules *rules;

int cdn_monitor_load_rules(const char *path, struct cdn_error *err)
{
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    _cleanup_fclose_ FILE *f = path && path[0] ? fopen(path, "re") : NULL;
    if (path && path[0] && !f)
        return cdn_error_field(err, errno, "monitor_rules", "monitor_rules: %s: %m", path);
    if (f) {
        text = malloc(1 << 20);
        len = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
        if (!text)
            return cdn_error_set(err, ENOMEM, "out of memory");
    }
    struct cdn_rules *r =
        text ? cdn_rules_load_json(text, len, err)
             : cdn_rules_load_json(cdn_rules_default_json, strlen(cdn_rules_default_json), err);
    if (!r)
        return -EINVAL;
    cdn_rules_free(rules);
    rules = r;
    return 0;
}

void cdn_monitor_free(void)
{
    cdn_rules_free(rules);
    rules = NULL;
}

size_t cdn_monitor_rule_count(void)
{
    return cdn_rules_count(rules);
}

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t) t.tv_sec * 1000 + (uint64_t) t.tv_nsec / 1000000;
}

void cdn_monitor_alert(struct box *b, const char *rule, const char *severity, const char *source,
                       const char *detail, size_t detail_len)
{
    cdn_monitor_alert_with(b, rule, severity, source, detail, detail_len, NULL);
}

void cdn_monitor_alert_with(struct box *b, const char *rule, const char *severity, const char *source,
                            const char *detail, size_t detail_len, json_t *fields)
{
    uint64_t now = now_ms();
    if (now - b->alert_window_ms >= 1000) {
        if (b->alerts_suppressed)
            cdn_box_event(b, "alert",
                          json_pack("{s:s, s:s, s:s, s:I}", "rule", "alerts-suppressed", "severity", "low",
                                    "source", "monitor", "suppressed", (json_int_t) b->alerts_suppressed));
        b->alerts_suppressed = 0;
        b->alert_window_ms = now;
        memset(b->alert_buckets, 0, sizeof b->alert_buckets);
    }
    b->alerts_total++;
    cdn_daemon->alerts_total++;
    uint32_t h = 2166136261u;
    for (const char *p = rule; *p; p++)
        h = (h ^ (uint8_t) *p) * 16777619u;
    h |= 1; /* never 0, the free mark */
    size_t i = 0, n = sizeof b->alert_buckets / sizeof b->alert_buckets[0];
    while (i < n - 1 && b->alert_buckets[i].rule && b->alert_buckets[i].rule != h)
        i++; /* the last bucket is shared by whatever does not fit */
    b->alert_buckets[i].rule = h;
    if (b->alert_buckets[i].n >= ALERT_RATE) {
        b->alerts_suppressed++;
        return;
    }
    b->alert_buckets[i].n++;
    json_t *ev = json_pack("{s:s, s:s, s:s}", "rule", rule, "severity", severity, "source", source);
    if (ev && detail)
        json_object_set_new(
            ev, "excerpt",
            cdn_json_lossy_string((const uint8_t *) detail, detail_len < EXCERPT ? detail_len : EXCERPT));
    if (ev && fields)
        (void) json_object_update_missing(ev, fields);
    cdn_box_event(b, "alert", ev);
}

struct match_ctx {
    struct box *b;
    const char *source, *subject;
    size_t len;
    json_t *list;
};

static void on_match(const struct cdn_rule_match *m, void *arg)
{
    struct match_ctx *c = arg;
    /* The excerpt: the match with a little context before it. */
    size_t from = m->start > 20 ? m->start - 20 : 0, to = m->end;
    if (to - from > EXCERPT)
        to = from + EXCERPT;
    cdn_monitor_alert(c->b, m->id, m->severity, c->source, c->subject + from, to - from);
    if (c->list)
        json_array_append_new(c->list, json_pack("{s:s, s:s, s:s}", "rule", m->id, "severity", m->severity,
                                                 "description", m->description));
}

json_t *cdn_monitor_match(struct box *b, int source, const char *subject, size_t len)
{
    struct match_ctx c = {.b = b,
                          .source = source == CDN_RULE_EXEC ? "exec" : "text",
                          .subject = subject,
                          .len = len,
                          .list = json_array()};
    (void) cdn_rules_match(rules, source, subject, len, on_match, &c);
    return c.list;
}
