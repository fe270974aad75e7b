/* `cordon image`: image maintenance. Runs on the host as root. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/paths.h"
#include "image/image.h"
#include "confine/seccomp-policy.h"
#if !CDN_LEAN
#include <jansson.h>

#include "tiers/qemu/vmprep.h"
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
#if !CDN_LEAN
    int oci = cdn_cli_image_oci(argc, argv);
    if (oci >= 0)
        return oci;
    if (argc >= 2 && strcmp(argv[0], "build") == 0) {
        struct cdn_image_build b = {.dir = argv[1]};
        struct cdn_error err = {0};
        for (int i = 2; i < argc; i++) {
            const char *v = i + 1 < argc ? argv[i + 1] : NULL;
            if (!v)
                goto usage;
            if (strcmp(argv[i], "--suite") == 0)
                b.suite = v;
            else if (strcmp(argv[i], "--mirror") == 0)
                b.mirror = v;
            else if (strcmp(argv[i], "--include") == 0)
                b.include = v;
            else if (strcmp(argv[i], "--disk") == 0)
                b.disk = v;
            else if (strcmp(argv[i], "--disk-size") == 0) {
                char *end;
                unsigned long mb = strtoul(v, &end, 10);
                if (*end || !mb || mb > (1ul << 24)) {
                    fprintf(stderr, "cordon: --disk-size '%s': a size in MiB, 1 to 16777216\n", v);
                    return 125;
                }
                b.disk_mb = (unsigned) mb;
            } else
                goto usage;
            i++;
        }
        if (cdn_image_debootstrap(&b, &err) < 0) {
            fprintf(stderr, "cordon: %s\n", err.msg);
            return 125;
        }
        return 0;
    }
usage:
#endif
    fprintf(stderr, "usage: cordon image rebuild host\n"
#if !CDN_LEAN
                    "       cordon image build DIR [--suite S] [--mirror URL] [--include PKG,…] [--disk FILE "
                    "[--disk-size MIB]]\n"
                    "       cordon image pull REF…   (registry/name:tag, name@sha256:…, oci:DIR[:TAG])\n"
                    "       cordon image ls [--json] | inspect REF | rm REF… | prune\n"
#endif
    );
    return 125;
}

#if !CDN_LEAN
/* `cordon vm status [--json]`: what is prepared, preparing nothing. Exit 0 when both VM tiers can
 * boot here, 1 when something is missing (each named), 125 on cordon's own error. */
static int vm_status(bool as_json)
{
    struct cdn_error err = {0};
    struct cdn_vm_status st;
    if (cdn_vm_status(&st, &err) < 0) {
        fprintf(stderr, "cordon: %s\n", err.msg);
        return 125;
    }
    const char *missing[3];
    size_t n = 0;
    if (!*st.qemu)
        missing[n++] = CDN_QEMU " is not in PATH (install Debian's qemu-system-x86)";
    if (!st.kernel_ready)
        missing[n++] = "the guest kernel is not prepared (run cordon vm prepare)";
    else if (!st.initramfs_ready)
        missing[n++] = "the initramfs is missing or older than cordon-init (run cordon vm prepare)";
    if (as_json) {
        json_t *m = json_array();
        for (size_t i = 0; i < n; i++)
            (void) json_array_append_new(m, json_string(missing[i]));
        json_t *o = json_pack("{s:b, s:o, s:s, s:o, s:b, s:o, s:b, s:s, s:s, s:o}", "ready", n == 0, "qemu",
                              *st.qemu ? json_string(st.qemu) : json_null(), "dir", cdn_vm_dir(), "release",
                              st.kernel_ready ? json_string(st.assets.release) : json_null(), "kernel_ready",
                              st.kernel_ready, "kernel", json_string(st.assets.kernel), "initramfs_ready",
                              st.initramfs_ready, "initramfs", st.assets.initramfs, "accel_possible",
                              st.hw_virt ? "kvm" : "tcg", "missing", m);
        if (!o || json_dumpf(o, stdout, JSON_COMPACT) < 0) {
            json_decref(o);
            fprintf(stderr, "cordon: vm status: out of memory\n");
            return 125;
        }
        json_decref(o);
        putchar('\n');
    } else {
        printf("qemu       %s\nkernel     %s\ninitramfs  %s\naccel      %s\n",
               *st.qemu ? st.qemu : "not found", st.kernel_ready ? st.assets.release : "not prepared",
               st.initramfs_ready ? "current" : "not prepared", st.hw_virt ? "kvm (or tcg)" : "tcg only");
        for (size_t i = 0; i < n; i++)
            printf("missing    %s\n", missing[i]);
    }
    return n ? 1 : 0;
}

int cdn_cli_vm(int argc, char *const *argv)
{
    if (argc >= 1 && strcmp(argv[0], "status") == 0 &&
        (argc == 1 || (argc == 2 && strcmp(argv[1], "--json") == 0)))
        return vm_status(argc == 2);
    bool image = argc == 3 && strcmp(argv[1], "--image") == 0;
    if ((argc == 1 || image) && strcmp(argv[0], "prepare") == 0) {
        struct cdn_error err = {0};
        struct cdn_vm_assets vm;
        struct cdn_image img;
        char disk[4400] = "";
        if (cdn_vm_prepare(&vm, CDN_VM_PROGRESS, &err) < 0 ||
            (image && strcmp(argv[2], "host") != 0 &&
             (cdn_image_resolve(argv[2], &img, &err) < 0 ||
              cdn_vm_image_disk(&img, CDN_VM_PROGRESS, disk, sizeof disk, &err) < 0))) {
            fprintf(stderr, "cordon: %s\n", err.msg);
            return 125;
        }
        printf("kernel %s\n%s\n%s\n%s%s", vm.release, vm.kernel, vm.initramfs, disk, *disk ? "\n" : "");
        return 0;
    }
    fprintf(stderr, "usage: cordon vm prepare [--image host|DIR|REF]\n       cordon vm status [--json]\n");
    return 125;
}
#endif
