/* Fuzz the body of PATCH /v1/sandboxes/{id} (src/daemon/update-args.c): JSON from any client that
 * can reach the socket, merged into a sandbox's labels. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/update-args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char a[] = "job=j1", b[] = "phase=agent";
    char *v[] = {a, b, NULL};
    const struct cdn_strv labels = {.v = v, .n = 2};
    struct update_args u;
    struct cdn_error e = {0};
    if (cdn_update_args_parse((const char *) data, size, &labels, &u, &e) == 0) {
        if (u.life_ms > 604800000ULL || u.idle_ms > 604800000ULL || (!u.labels && u.merged_labels.n))
            abort(); /* past the bound it checks, or labels it was not asked for */
        for (size_t i = 0; i < u.merged_labels.n; i++)
            if (!strchr(u.merged_labels.v[i], '='))
                abort(); /* every label is K=V */
        cdn_update_args_free(&u);
    } else if (!e.field[0])
        abort(); /* every refusal names what is wrong */
    return 0;
}
