#include "tap.h"

#include <stdlib.h>

static struct tap_test *head, **tail = &head;
static int failed_here, skipped_here;
static char skip_reason[256];

void tap_register(struct tap_test *t)
{
    *tail = t;
    tail = &t->next;
}

void tap_fail(const char *file, int line, const char *expr)
{
    printf("# %s:%d: check failed: %s\n", file, line, expr);
    failed_here = 1;
}

void tap_skip(const char *why)
{
    skipped_here = 1;
    snprintf(skip_reason, sizeof skip_reason, "%s", why);
}

int main(void)
{
    int n = 0, failed = 0, skipped = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (struct tap_test *t = head; t; t = t->next) {
        failed_here = skipped_here = 0;
        t->fn();
        n++;
        if (skipped_here && !failed_here) {
            printf("ok %d - %s # SKIP %s\n", n, t->name, skip_reason);
            skipped++;
        } else if (failed_here) {
            printf("not ok %d - %s\n", n, t->name);
            failed++;
        } else
            printf("ok %d - %s\n", n, t->name);
    }
    printf("1..%d\n", n);
    if (failed)
        return 1;
    return n > 0 && skipped == n ? 77 : 0;
}
