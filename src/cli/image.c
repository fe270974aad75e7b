/* `cordon image`: image maintenance. Runs on the host as root. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/paths.h"
#include "image/image.h"
#include "tiers/container/seccomp-policy.h"
#if !CDN_LEAN
#include "tiers/microvm/vmprep.h"
#endif

int cdn_cli_image(int argc, char *const *argv)
{
    if (argc == 2 && strcmp(argv[0], "rebuild") == 0 && strcmp(argv[1], "host") == 0) {
        struct cdn_error err = {0};
        struct cdn_seccomp_prog prog = {0};
        char cache[4096];
        cdn_cache_dir(cache, sizeof cache);
        /* Also compile the seccomp policy into the cache, so that the first
         * `cordon run` after an install need not hand over to cordon-full. */
        if (cdn_image_build_host(true, &err) < 0 || cdn_seccomp_load_cached(cache, &prog, &err) < 0) {
            fprintf(stderr, "cordon: %s\n", err.msg);
            return 125;
        }
        cdn_seccomp_prog_free(&prog);
        return 0;
    }
    fprintf(stderr, "usage: cordon image rebuild host\n");
    return 125;
}

#if !CDN_LEAN
int cdn_cli_vm(int argc, char *const *argv)
{
    bool image = argc == 3 && strcmp(argv[1], "--image") == 0;
    if ((argc == 1 || image) && strcmp(argv[0], "prepare") == 0) {
        struct cdn_error err = {0};
        struct cdn_vm_assets vm;
        struct cdn_image img;
        char disk[4400] = "";
        if (cdn_vm_prepare(&vm, true, &err) < 0 ||
            (image && strcmp(argv[2], "host") != 0 &&
             (cdn_image_resolve(argv[2], &img, &err) < 0 ||
              cdn_vm_image_disk(img.lower, true, disk, sizeof disk, &err) < 0))) {
            fprintf(stderr, "cordon: %s\n", err.msg);
            return 125;
        }
        printf("kernel %s\n%s\n%s\n%s%s", vm.release, vm.kernel, vm.initramfs, disk, *disk ? "\n" : "");
        return 0;
    }
    fprintf(stderr, "usage: cordon vm prepare [--image host|DIR]\n");
    return 125;
}
#endif
