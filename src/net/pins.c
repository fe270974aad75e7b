#include "pins.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/allow.h"
#include "net/egress.h"

/* A flat array scanned linearly: the stub pins a few hundred answers per
 * sandbox at most, and every operation stays O(capacity). */
struct pin {
    char name[256]; /* normalised */
    uint32_t addr;
    uint64_t expires_ms;
};

struct cdn_pins {
    size_t n, cap;
    struct pin v[];
};

uint64_t cdn_now_ms(void)
{
    struct timespec ts;
    (void) clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

struct cdn_pins *cdn_pins_new(size_t capacity)
{
    if (capacity == 0)
        capacity = 1;
    if (capacity > (SIZE_MAX - sizeof(struct cdn_pins)) / sizeof(struct pin))
        return NULL;
    struct cdn_pins *p = calloc(1, sizeof *p + capacity * sizeof(struct pin));
    if (!p)
        return NULL;
    p->cap = capacity;
    return p;
}

void cdn_pins_free(struct cdn_pins *p)
{
    free(p);
}

void cdn_pins_add(struct cdn_pins *p, const char *name, uint32_t addr, uint64_t expires_ms)
{
    char norm[256];
    if (!p || !name || !cdn_dns_name_normalize(name, norm))
        return;
    size_t victim = 0;
    for (size_t i = 0; i < p->n; i++) {
        struct pin *e = &p->v[i];
        if (e->addr == addr && strcmp(e->name, norm) == 0) {
            /* A shorter TTL in a later answer must not cut off a connection the earlier one allowed. */
            if (expires_ms > e->expires_ms)
                e->expires_ms = expires_ms;
            return;
        }
        if (e->expires_ms < p->v[victim].expires_ms)
            victim = i;
    }
    if (p->n < p->cap)
        victim = p->n++;
    struct pin *e = &p->v[victim];
    memcpy(e->name, norm, strlen(norm) + 1);
    e->addr = addr;
    e->expires_ms = expires_ms;
}

bool cdn_pins_check(const struct cdn_pins *p, const char *name, uint32_t addr, uint64_t now_ms)
{
    char norm[256];
    if (!p || !name || !cdn_dns_name_normalize(name, norm))
        return false;
    for (size_t i = 0; i < p->n; i++) {
        const struct pin *e = &p->v[i];
        if (e->addr == addr && e->expires_ms > now_ms && strcmp(e->name, norm) == 0)
            return true;
    }
    return false;
}

const char *cdn_pins_name_of(const struct cdn_pins *p, uint32_t addr, uint64_t now_ms)
{
    if (!p)
        return NULL;
    for (size_t i = 0; i < p->n; i++)
        if (p->v[i].addr == addr && p->v[i].expires_ms > now_ms)
            return p->v[i].name;
    return NULL;
}

size_t cdn_pins_count(const struct cdn_pins *p)
{
    return p ? p->n : 0;
}
