/* Fuzz the setup child's args as cordon-setup reads them (tiers/container/setup-args.c). The bytes
 * come from cordon's own host side, never from a sandbox; still, whatever they are, the reader gives
 * args whose lists are as long as they say and whose fds are places to fill (0) or none, or an
 * error with nothing kept. */
#include "tiers/container/container-internal.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct cdn_setup_unpacked u;
    if (cdn_setup_args_unpack(data, size, &u) < 0)
        return 0;
    const struct cdn_setup_args *a = &u.args;
    if (!a->spec->hostname || !a->spec->workdir || !a->image || !a->scratch ||
        a->spec->n_mounts > CDN_MAX_MOUNTS)
        abort();
    /* the image's strings end within their arrays, its layers within theirs (rootfs.c reads them) */
    const struct cdn_image *img = a->image;
    if (img->n_layers > CDN_IMAGE_LAYERS_MAX || strnlen(img->lower, sizeof img->lower) == sizeof img->lower ||
        strnlen(img->dev, sizeof img->dev) == sizeof img->dev)
        abort();
    for (size_t i = 0; i < img->n_layers; i++)
        if (strnlen(img->layers[i], sizeof img->layers[i]) == sizeof img->layers[i])
            abort();
    for (size_t i = 0; i < a->spec->n_mounts; i++)
        if (!a->spec->mounts[i].source || !a->spec->mounts[i].target)
            abort();
    for (size_t i = 0; i < a->spec->protect.n; i++)
        if (!a->spec->protect.v[i])
            abort();
    int *fds[CDN_SETUP_FDS];
    cdn_setup_args_fds(&u.args, fds);
    for (size_t i = 0; i < CDN_SETUP_FDS; i++)
        if (*fds[i] != 0 && *fds[i] >= 0)
            abort();
    cdn_setup_args_free(&u);
    return 0;
}
