/* The DNS budget of a sandbox (issue 18, item 14): how many new names, and
 * how many bytes of them, it may have resolved upstream per window when the
 * names are its own choice — under a wildcard entry (*.SUFFIX) or in open
 * mode. A tunnel over DNS must put what it carries into new names; ordinary
 * work asks for a few fixed hosts. The long-name and rate alerts of the DNS
 * stub miss a tunnel that keeps its labels short and its pace slow; this
 * counts what it cannot avoid: new names and their length.
 *
 * Counted per window of window_s seconds (fixed windows), O(1) per name and
 * in a fixed table per sandbox: a name is new if it was not resolved earlier
 * in the window; its bytes are those of the labels below the suffix that
 * admitted it (the wildcard's SUFFIX; in open mode, all but the last two
 * labels, which a tunnel's own domain takes). Names on an exact entry are not
 * counted: they carry nothing the sandbox chose. Crossing the budget raises an
 * alert ("dns-budget", with the counts), again each time the counts double in
 * the window; with refuse set, names beyond it are refused (REFUSED, an
 * egress violation "dns-budget") until the window ends — names already
 * resolved in the window still are.
 *
 * Pure C over the sandbox's state; the DNS stub and the proxy (which resolves
 * explicit proxy requests) call it before a name goes upstream. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "shared/error.h"

struct cdn_egress_box;
struct cdn_egress_ops;

struct cdn_dns_budget_cfg {
    unsigned names;    /* new names per window; 0: no budget */
    unsigned bytes;    /* bytes of them below their suffix per window */
    unsigned window_s; /* the window */
    bool refuse;       /* beyond the budget: refuse (a violation), not only alert */
};

#define CDN_DNS_BUDGET_NAMES_MAX 256 /* the table holds twice this */
#define CDN_DNS_BUDGET_SLOTS     512
#define CDN_DNS_BUDGET_DEFAULT                                                                               \
    (struct cdn_dns_budget_cfg)                                                                              \
    {                                                                                                        \
        .names = 64, .bytes = 512, .window_s = 60, .refuse = false                                           \
    }

/* A sandbox's counts (in struct cdn_egress_box; zeroed is a fresh start). */
struct cdn_dns_budget {
    uint64_t window_ms;    /* start of the window */
    uint32_t epoch;        /* slots of other epochs are empty: a new window clears in O(1) */
    unsigned names, bytes; /* new names asked in the window (refused ones too), their chosen bytes */
    unsigned used;         /* slots taken */
    unsigned alert_names, alert_bytes;    /* the counts at which the next alert is due */
    uint64_t slots[CDN_DNS_BUDGET_SLOTS]; /* epoch << 32 | name hash */
};

/* "off" or a comma list of names=N (1..256), bytes=N (1..1048576), window=DURATION (1 s..1 day),
 * action=alert|refuse; what is not given keeps its default. -EINVAL and a message naming the item. */
int cdn_dns_budget_parse(const char *s, struct cdn_dns_budget_cfg *ret, struct cdn_error *err);

/* name (normalised) is about to be resolved upstream for b: count it. false
 * if it must be refused (over the budget with refuse set); alerts go to
 * ops->flag. cfg NULL or names 0: always true. */
bool cdn_dns_budget_charge(struct cdn_egress_box *b, const struct cdn_egress_ops *ops, const char *name,
                           uint64_t now_ms);
