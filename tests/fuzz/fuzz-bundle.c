/* Fuzz an OCI bundle's config.json parser (cordon-runtime, src/runtime/bundle.c). Whatever the
 * config says: a refusal names a field, and what is accepted is within cordon's grant: a pid, mount,
 * IPC and UTS namespace of its own, a network one of its own or a path, no id mappings, absolute
 * binds and cwd, a command, rlimits with soft <= hard, and a spec that validates. */
#include "runtime/bundle.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cdn_bundle b;
    struct cdn_error err = {0};
    int r = cdn_bundle_parse((const char *) data, size, "/run/bundle", &b, &err);
    if (r < 0 && r != -ENOMEM && !err.field[0])
        abort(); /* a refusal without its field */
    if (r == 0) {
        if (b.args.n == 0 || !b.spec.image || b.spec.image[0] != '/' || !b.spec.workdir ||
            b.spec.workdir[0] != '/' || !b.spec.user)
            abort();
        for (size_t i = 0; i < b.n_rlimits; i++)
            if (b.rlimits[i].soft > b.rlimits[i].hard)
                abort();
        for (size_t i = 0; i < b.spec.n_mounts; i++)
            if (b.spec.mounts[i].source[0] != '/' || b.spec.mounts[i].target[0] != '/')
                abort();
        if (b.netns_path && b.netns_path[0] != '/')
            abort();
        if (b.spec.limits.memory_mb < CDN_MEMORY_MB_MIN || b.spec.limits.pids < CDN_PIDS_MIN ||
            !(b.spec.limits.cpus > 0))
            abort();
    }
    cdn_bundle_free(&b);
    return 0;
}
