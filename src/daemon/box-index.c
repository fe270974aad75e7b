/* SPDX-License-Identifier: see repository LICENSE */
/* The listed boxes (cdn_daemon->boxes) by id. Every request on a sandbox finds its box by the id in
 * its path: a walk of the list made that cost grow with the number of live sandboxes (2.5% of
 * cordond's CPU in a profile of creates with 3,000 alive, and more for execs), a table of chains
 * keeps it constant. It grows (doubling) so that chains stay short on average. */
#include "box-internal.h"

#include <stdlib.h>
#include <string.h>

static struct box *first[1024];
static struct box **table = first;
static size_t cap = 1024, n; /* cap: a power of two */

static size_t slot_of(const char *id)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *) id; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return (size_t) h & (cap - 1);
}

static void put(struct box *b)
{
    size_t s = slot_of(b->sb.id);
    b->id_next = table[s];
    table[s] = b;
}

/* Twice the chains; when memory is short the table stays as it is (its chains only get longer). */
static void grow(void)
{
    size_t old = cap;
    struct box **t = calloc(cap * 2, sizeof *t), **prev = table;
    if (!t)
        return;
    table = t, cap *= 2;
    for (size_t i = 0; i < old; i++)
        for (struct box *b = prev[i], *next; b; b = next) {
            next = b->id_next;
            put(b);
        }
    if (prev != first)
        free(prev);
}

void box_list(struct box *b)
{
    LIST_INSERT_HEAD(&cdn_daemon->boxes, b, link);
    if (n >= cap)
        grow();
    put(b);
    b->indexed = true;
    n++;
}

/* From whichever list it is on (listed, dying, a pool's), and from the table if it is there. */
void box_unlist(struct box *b)
{
    LIST_REMOVE(b, link);
    if (!b->indexed)
        return;
    for (struct box **p = &table[slot_of(b->sb.id)]; *p; p = &(*p)->id_next)
        if (*p == b) {
            *p = b->id_next;
            break;
        }
    b->indexed = false;
    b->id_next = NULL;
    n--;
}

struct box *cdn_box_find(const char *id)
{
    for (struct box *b = table[slot_of(id)]; b; b = b->id_next)
        if (!b->sibling && strcmp(b->sb.id, id) == 0)
            return b;
    return NULL;
}
