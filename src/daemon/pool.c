/* Warm pools (DESIGN §6): sandboxes made ahead of time for the configured
 * specs, so that a create that matches is a hand-over, not a build.
 *
 * A pool is a spec and a target size. Its sandboxes are ordinary boxes that
 * wait, running and idle, outside the API's list. A create request matches a
 * pool when its spec has the same shape: everything but labels, env (used at
 * each exec, not at build) and the lifetime (which starts at hand-over).
 * Refilling makes one sandbox at a time, as an event of the lowest priority,
 * so it runs only when no request is waiting: a burst of creates is served
 * from the pool first and the pool fills again in the gaps. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "images.h"
#include "registry.h"
#include "core/json-util.h"
#include "shared/macro.h"

#define MAX_POOLS 8

struct pool {
    char *shape; /* canonical JSON of the spec without labels, env and lifetime */
    struct cdn_spec spec;
    unsigned target, ready, filling, failures;
    bool preparing; /* its tier's make-once assets are being made (images.h cdn_images_prepare) */
    LIST_HEAD(, box) boxes;
    struct event *refill;
};

static struct pool pools[MAX_POOLS];
static unsigned n_pools;

/* The part of a spec that a built sandbox is made of. */
static char *shape_of(const struct cdn_spec *spec)
{
    _cleanup_free_ char *s = cdn_spec_to_json(spec);
    _cleanup_json_ json_t *o = s ? json_loads(s, 0, NULL) : NULL;
    if (!o)
        return NULL;
    json_object_del(o, "labels");
    json_object_del(o, "env");
    json_object_del(o, "pull");       /* what a create does first, not what it makes */
    json_object_del(o, "trajectory"); /* the client's, as its labels: a handed-over box takes it */
    json_object_del(json_object_get(o, "limits"), "timeout_s");
    json_object_del(json_object_get(o, "limits"), "idle_timeout_s");
    return json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
}

/* A pool's spec file (the operator's), into spec. */
static int load_spec_file(const char *path, struct cdn_spec *spec, struct cdn_error *err)
{
    _cleanup_fclose_ FILE *f = fopen(path, "re");
    _cleanup_free_ char *buf = NULL;
    size_t cap = 0;
    ssize_t len = f ? getdelim(&buf, &cap, '\0', f) : -1;
    if (len < 0)
        return cdn_error_set(err, errno ? errno : EIO, "pool spec %s: %m", path);
    return cdn_spec_from_json(spec, buf, (size_t) len, err);
}

int cdn_pool_configure(const char *arg, struct cdn_error *err)
{
    if (n_pools >= MAX_POOLS)
        return cdn_error_set(err, E2BIG, "pool: at most %d pools", MAX_POOLS);
    char *end;
    unsigned long n = strtoul(arg, &end, 10);
    if (end == arg || n > 1024 || (*end && *end != ':'))
        return cdn_error_set(err, EINVAL, "pool '%s': expected SIZE (0-1024) or SIZE:SPECFILE", arg);
    struct pool *p = &pools[n_pools];
    *p = (struct pool){.target = (unsigned) n};
    LIST_INIT(&p->boxes);
    if (cdn_spec_init(&p->spec) < 0)
        return cdn_error_set(err, ENOMEM, "out of memory");
    int r = *end == ':' ? load_spec_file(end + 1, &p->spec, err) : 0;
    if (r >= 0)
        r = cdn_spec_validate(&p->spec, err);
    if (r >= 0 && p->spec.trajectory)
        r = cdn_error_field(
            err, EINVAL, "trajectory",
            "trajectory: a pool's sandboxes record none (a create's trajectory goes to the sandbox "
            "it is handed)");
    if (r >= 0 &&
        p->spec.checkpoint) /* a create from a checkpoint makes its sandbox: its files are not a shape */
        r = cdn_error_field(err, EINVAL, "checkpoint", "checkpoint: a pool's sandboxes start from the image");
    if (r >= 0)
        r = cdn_bind_policy_check(&cdn_daemon->bind_policy, &p->spec, err);
    if (r >= 0 && !(p->shape = shape_of(&p->spec)))
        r = cdn_error_set(err, ENOMEM, "out of memory");
    if (r < 0) {
        cdn_spec_free(&p->spec);
        return r;
    }
    n_pools++;
    return 0;
}

static void refill(evutil_socket_t fd, short what, void *arg);

static void schedule(struct pool *p)
{
    if (!cdn_daemon->stopping && p->refill && p->ready + p->filling < p->target)
        event_active(p->refill, EV_TIMEOUT, 0);
}

static void prepared(void *arg, json_t *result)
{
    struct pool *p = arg;
    p->preparing = false;
    json_t *e = json_object_get(result, "error");
    if (e) {
        p->failures++;
        fprintf(stderr, "cordond: pool: %s\n", json_string_value(json_object_get(e, "message")) ?: "?");
    }
    schedule(p);
}

static void refill(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct pool *p = arg;
    if (cdn_daemon->stopping || p->preparing || p->ready + p->filling >= p->target)
        return;
    if (p->failures >= 3) { /* a spec that cannot start must not spin */
        fprintf(stderr, "cordond: pool '%s' stopped refilling after 3 failures\n", p->shape);
        return;
    }
    struct cdn_error err = {0};
    /* What its tier makes once (a guest's snapshot, its image's disk) is made by a child, not here:
     * the loop keeps serving meanwhile, and the refill goes on when it is there. */
    int r = cdn_images_prepare(&p->spec, (struct image_waiter){.done = prepared, .arg = p}, &err);
    if (r <= 0) {
        p->preparing = r == 0;
        if (r < 0) {
            p->failures++;
            fprintf(stderr, "cordond: pool: %s\n", err.msg);
            schedule(p);
        }
        return;
    }
    struct cdn_spec spec;
    _cleanup_free_ char *json = cdn_spec_to_json(&p->spec);
    if (!json || cdn_spec_init(&spec) < 0)
        return;
    if (cdn_spec_from_json(&spec, json, strlen(json), &err) < 0) {
        cdn_spec_free(&spec);
        return;
    }
    if (!cdn_box_spawn(&spec, p, &err)) {
        p->failures++;
        fprintf(stderr, "cordond: pool: %s\n", err.msg);
        schedule(p);
    }
}

void cdn_pool_box_add(struct pool *p, struct box *b)
{
    LIST_INSERT_HEAD(&p->boxes, b, link);
    p->filling++; /* cdn_pool_box_ready or cdn_pool_box_gone follows */
}

void cdn_pool_start(void)
{
    for (unsigned i = 0; i < n_pools; i++) {
        struct pool *p = &pools[i];
        p->refill = event_new(cdn_daemon->base, -1, 0, refill, p);
        if (p->refill)
            (void) event_priority_set(p->refill, 2); /* the lowest: only when nothing else waits */
        schedule(p);
    }
}

struct box *cdn_pool_take(const struct cdn_spec *spec)
{
    if (!n_pools)
        return NULL;
    _cleanup_free_ char *shape = shape_of(spec);
    struct box *found = NULL;
    for (unsigned i = 0; shape && i < n_pools && !found; i++) {
        struct pool *p = &pools[i];
        if (strcmp(p->shape, shape) != 0)
            continue;
        struct box *b;
        LIST_FOREACH(b, &p->boxes, link)
        if (b->pool_ready) { /* running, and (a VM guest) warmed */
            found = b;
            break;
        }
        if (found) {
            LIST_REMOVE(found, link);
            found->pool_ready = false;
            p->ready--;
            schedule(p);
        }
    }
    return found;
}

void cdn_pool_box_ready(struct box *b)
{
    b->pool->filling--;
    b->pool->ready++;
    b->pool->failures = 0;
    b->pool_ready = true;
    schedule(b->pool);
}

void cdn_pool_box_gone(struct box *b)
{
    struct pool *p = b->pool;
    if (b->pool_ready) {
        p->ready--;
    } else {
        p->filling--;
        p->failures++; /* it never started */
    }
    b->pool = NULL;
    schedule(p);
}

unsigned cdn_pool_ready_total(void)
{
    unsigned n = 0;
    for (unsigned i = 0; i < n_pools; i++)
        n += pools[i].ready;
    return n;
}

void cdn_pool_drain(void)
{
    for (unsigned i = 0; i < n_pools; i++)
        while (!LIST_EMPTY(&pools[i].boxes))
            cdn_box_delete(LIST_FIRST(&pools[i].boxes), "cordond stopped: warm pool emptied");
}
