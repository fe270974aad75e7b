/* The DNS budget (dns-budget.h). Runs on the owner's event loop, called by the
 * DNS stub and the proxy with a name the sandbox chose: hostile input, already
 * validated as a DNS name. Nothing is allocated: the table lives in the box. */
#include "net/dns-budget.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "net/egress.h"
#include "shared/parse-util.h"

static int parse_item(const char *key, const char *v, struct cdn_dns_budget_cfg *c, struct cdn_error *err)
{
    uint64_t n;
    if (strcmp(key, "names") == 0) {
        if (cdn_parse_u64(v, &n) < 0 || n == 0 || n > CDN_DNS_BUDGET_NAMES_MAX)
            return cdn_error_set(err, EINVAL, "names=%s: a count from 1 to %d", v, CDN_DNS_BUDGET_NAMES_MAX);
        c->names = (unsigned) n;
    } else if (strcmp(key, "bytes") == 0) {
        if (cdn_parse_u64(v, &n) < 0 || n == 0 || n > (1u << 20))
            return cdn_error_set(err, EINVAL, "bytes=%s: a count from 1 to 1048576", v);
        c->bytes = (unsigned) n;
    } else if (strcmp(key, "window") == 0) {
        if (cdn_parse_duration(v, &n) < 0 || n < 1000 || n > 86400000 || n % 1000)
            return cdn_error_set(err, EINVAL, "window=%s: whole seconds from 1 s to 24 h (e.g. 60s, 10m)", v);
        c->window_s = (unsigned) (n / 1000);
    } else if (strcmp(key, "action") == 0) {
        if (strcmp(v, "alert") != 0 && strcmp(v, "refuse") != 0)
            return cdn_error_set(err, EINVAL, "action=%s: 'alert' or 'refuse'", v);
        c->refuse = strcmp(v, "refuse") == 0;
    } else
        return cdn_error_set(err, EINVAL, "'%s': unknown item (names, bytes, window, action)", key);
    return 0;
}

int cdn_dns_budget_parse(const char *s, struct cdn_dns_budget_cfg *ret, struct cdn_error *err)
{
    struct cdn_dns_budget_cfg c = CDN_DNS_BUDGET_DEFAULT;
    if (strcmp(s, "off") == 0) {
        c.names = 0;
        *ret = c;
        return 0;
    }
    char buf[256];
    if (strlen(s) >= sizeof buf || !s[0])
        return cdn_error_set(err, EINVAL, "'off' or names=N,bytes=N,window=DURATION,action=alert|refuse");
    memcpy(buf, s, strlen(s) + 1);
    for (char *rest = buf, *item; (item = strsep(&rest, ","));) {
        char *eq = strchr(item, '=');
        if (!eq)
            return cdn_error_set(err, EINVAL, "'%s': expected KEY=VALUE", item);
        *eq = 0;
        int r = parse_item(item, eq + 1, &c, err);
        if (r < 0)
            return r;
    }
    *ret = c;
    return 0;
}

/* FNV-1a with a per-process random start: a sandbox cannot choose names that
 * collide (and so count once) without knowing it. */
static uint32_t name_hash(const char *name)
{
    static uint32_t seed;
    if (!seed && (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != sizeof seed || !seed))
        seed = 2166136261u;
    uint32_t h = seed;
    for (const char *p = name; *p; p++)
        h = (h ^ (uint8_t) *p) * 16777619u;
    return h;
}

/* The slot holding name's hash h in this window, or the empty one where it
 * would go. The table never holds more than half its slots (d->used), so
 * the probe always ends. */
static unsigned slot_of(const struct cdn_dns_budget *d, uint32_t h)
{
    unsigned k = h % CDN_DNS_BUDGET_SLOTS;
    for (unsigned i = 0; i < CDN_DNS_BUDGET_SLOTS; i++, k = (k + 1) % CDN_DNS_BUDGET_SLOTS) {
        uint64_t s = d->slots[k];
        if ((uint32_t) (s >> 32) != d->epoch || ((uint32_t) s & ~1u) == h)
            break;
    }
    return k;
}

/* Bytes of name that the sandbox chose; -1 if none (an exact entry names it). */
static int chosen_bytes(const struct cdn_egress_box *b, const char *name)
{
    size_t n = strlen(name), suffix = n;
    bool glob = false;
    for (size_t i = 0; i < b->allow.n; i++) {
        const struct cdn_allow_entry *e = &b->allow.v[i];
        size_t s = strlen(e->name);
        if (e->kind == CDN_ALLOW_NAME && strcmp(e->name, name) == 0)
            return -1;
        if (e->kind == CDN_ALLOW_GLOB && n > s + 1 && name[n - s - 1] == '.' &&
            strcmp(name + n - s, e->name) == 0 && (!glob || s < suffix)) {
            glob = true;
            suffix = s; /* the shortest: the most of the name counted */
        }
    }
    if (glob)
        return (int) (n - suffix - 1);
    int dots = 0; /* open mode: below the last two labels */
    for (size_t i = n; i-- > 0;)
        if (name[i] == '.' && ++dots == 2)
            return (int) i;
    return 0;
}

static void alert(struct cdn_egress_box *b, const struct cdn_egress_ops *ops,
                  const struct cdn_dns_budget_cfg *c, const char *name)
{
    struct cdn_dns_budget *d = &b->dns_budget;
    char detail[256];
    (void) snprintf(
        detail, sizeof detail,
        "%u new names, %u bytes below their suffix in %u s (budget %u names, %u bytes); last: %.80s",
        d->names, d->bytes, c->window_s, c->names, c->bytes, name);
    json_t *f = json_pack("{s:I, s:I, s:I, s:I, s:I, s:s}", "names", (json_int_t) d->names, "bytes",
                          (json_int_t) d->bytes, "window_s", (json_int_t) c->window_s, "budget_names",
                          (json_int_t) c->names, "budget_bytes", (json_int_t) c->bytes, "action",
                          c->refuse ? "refuse" : "alert");
    if (ops->flag)
        ops->flag(ops->arg, b, "dns-budget", detail, f);
    json_decref(f);
}

bool cdn_dns_budget_charge(struct cdn_egress_box *b, const struct cdn_egress_ops *ops, const char *name,
                           uint64_t now_ms)
{
    const struct cdn_dns_budget_cfg *c = ops->dns_budget;
    struct cdn_dns_budget *d = &b->dns_budget;
    int bytes = c && c->names ? chosen_bytes(b, name) : -1;
    if (bytes < 0)
        return true;
    if (!d->epoch || now_ms < d->window_ms || now_ms - d->window_ms >= (uint64_t) c->window_s * 1000) {
        d->epoch++; /* every slot now reads as empty */
        d->window_ms = now_ms;
        d->names = d->bytes = d->used = 0;
        d->alert_names = c->names + 1;
        d->alert_bytes = c->bytes + 1;
    }
    uint32_t h = name_hash(name) & ~1u; /* the low bit of a slot: refused */
    unsigned k = slot_of(d, h);
    uint64_t s = d->slots[k];
    if ((uint32_t) (s >> 32) == d->epoch)
        return !(s & 1); /* asked before in the window: nothing new, the same answer */
    bool refuse = c->refuse && (d->names >= c->names || d->bytes + (unsigned) bytes > c->bytes);
    if (d->used < CDN_DNS_BUDGET_SLOTS / 2) {
        d->slots[k] = (uint64_t) d->epoch << 32 | h | refuse;
        d->used++;
    }           /* else counted again if asked again: only far beyond the budget */
    d->names++; /* what was asked, refused or not: the alert says so */
    d->bytes += (unsigned) bytes;
    if (d->names >= d->alert_names || d->bytes >= d->alert_bytes) {
        alert(b, ops, c, name);
        while (d->alert_names <= d->names)
            d->alert_names *= 2;
        while (d->alert_bytes <= d->bytes)
            d->alert_bytes *= 2;
    }
    return !refuse;
}
