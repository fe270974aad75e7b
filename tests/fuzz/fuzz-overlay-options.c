/* Fuzz the parser of an overlay's super options (cordon-runtime, src/runtime/layers.c: the layers of
 * the root an engine mounted, read from the mount table). Whatever the options say: a refusal names
 * root.path, and what is accepted has a lowerdir, both or neither of upperdir and workdir, and no
 * value longer than its field. */
#include "runtime/layers.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *opts = malloc(size + 1);
    if (!opts)
        return 0;
    memcpy(opts, data, size);
    opts[size] = 0; /* the mount table's text: no NUL inside */
    struct cdn_rt_overlay o;
    struct cdn_error err = {0};
    int r = cdn_rt_overlay_options(opts, &o, &err);
    if (r < 0 && r != -ENOMEM && strcmp(err.field, "root.path") != 0)
        abort();
    if (r == 0 &&
        (!o.lowerdir || !*o.lowerdir || !o.upperdir != !o.workdir ||
         strlen(o.metacopy) >= sizeof o.metacopy || strlen(o.redirect_dir) >= sizeof o.redirect_dir))
        abort();
    cdn_rt_overlay_free(&o);
    free(opts);
    return 0;
}
