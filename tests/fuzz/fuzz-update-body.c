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
    static struct cdn_spec spec;
    static bool ready;
    if (!ready && (cdn_spec_init(&spec) < 0 || cdn_spec_add_label(&spec, "job", "j1", NULL) < 0 ||
                   cdn_spec_add_label(&spec, "phase", "agent", NULL) < 0))
        abort();
    ready = true;
    struct update_args u;
    struct cdn_error e = {0};
    if (cdn_update_args_parse((const char *) data, size, &spec, &u, &e) == 0) {
        if (u.life_ms > 604800000ULL || u.idle_ms > 604800000ULL || (!u.labels && u.merged_labels.n))
            abort(); /* past the bound it checks, or labels it was not asked for */
        if (u.limits && !(u.new_limits.cpus > 0 && u.new_limits.cpus <= 1024 && u.new_limits.memory_mb >= 8 &&
                          u.new_limits.pids >= 2 && u.new_limits.disk_mb == spec.limits.disk_mb))
            abort(); /* limits out of the spec's ranges */
        for (size_t i = 0; i < u.merged_labels.n; i++)
            if (!strchr(u.merged_labels.v[i], '='))
                abort(); /* every label is K=V */
        cdn_update_args_free(&u);
    } else if (!e.field[0])
        abort(); /* every refusal names what is wrong */
    return 0;
}
