/* What the VM tiers boot (DESIGN §5), prepared once and cached in the state
 * directory (<state>/vm/): the guest kernel from Debian's linux-image package
 * — unpacked, never installed into /boot — as an uncompressed vmlinux (booted
 * through PVH: no decompression in the guest, which under TCG costs seconds),
 * the modules the guest needs from the same package, and an initramfs holding
 * cordon-init as /init, busybox and those modules. */
#pragma once

#include <stdbool.h>

#include "shared/error.h"

struct cdn_vm_assets {
    char kernel[4096];         /* vmlinux */
    char initramfs[4096];      /* newc cpio */
    char initramfs_disk[4096]; /* the same and the root disk's modules: an image's guest boots it */
    char initramfs_vm[4096];   /* the same and a full VM's (tier vm): virtio over PCI, ext4 */
    char release[128];         /* the guest kernel's release, e.g. 6.1.0-57-amd64 */
};

/* Find or make the assets. progress: say each long step on stderr. The
 * kernel package comes from $CORDON_VM_KERNEL_DEB, else a linux-image-*.deb in
 * <state>/vm/, else `apt-get download` of the one linux-image-amd64 depends on. */
int cdn_vm_prepare(struct cdn_vm_assets *out, bool progress, struct cdn_error *err);

/* The root disk of an image other than "host": a read-only erofs made from the image directory
 * root once, cached in <state>/vm/images/ (path into out). Errors name "image". */
int cdn_vm_image_disk(const char *root, bool progress, char *out, size_t size, struct cdn_error *err);
