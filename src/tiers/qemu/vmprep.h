/* What the VM tiers boot (DESIGN §5), prepared once and cached in the state
 * directory (<state>/vm/): the guest kernel from Debian's linux-image package
 * — unpacked, never installed into /boot — as an uncompressed vmlinux (booted
 * through PVH: no decompression in the guest, which under TCG costs seconds),
 * the modules the guest needs from the same package, and an initramfs holding
 * cordon-init as /init, busybox and those modules. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "shared/error.h"

struct cdn_vm_assets {
    char kernel[4096];         /* vmlinux */
    char initramfs[4096];      /* newc cpio */
    char initramfs_disk[4096]; /* the same and the root disk's modules: an image's guest boots it */
    char initramfs_vm[4096];   /* the same and a full VM's (tier vm): virtio over PCI, ext4 */
    char release[128];         /* the guest kernel's release, e.g. 6.1.0-57-amd64 */
};

/* How the make-once steps (the assets, an image's disk, qemu.h's snapshots) go: CDN_VM_PROGRESS says
 * each long step on stderr; CDN_VM_LOOK makes nothing, never waits for a lock, and returns -EAGAIN
 * where something is still to be made (err is then not set). */
enum { CDN_VM_PROGRESS = 1 << 0, CDN_VM_LOOK = 1 << 1 };

/* Find or make the assets (how: CDN_VM_*). The
 * kernel package comes from $CORDON_VM_KERNEL_DEB, else a linux-image-*.deb in
 * <state>/vm/, else `apt-get download` of the one linux-image-amd64 depends on. */
int cdn_vm_prepare(struct cdn_vm_assets *out, unsigned how, struct cdn_error *err);

#define CDN_QEMU "qemu-system-x86_64"

/* QEMU's binary, found in PATH (a jailed QEMU holds it at the same path): 0, or -ENOENT. */
int cdn_vm_find_qemu(char *out, size_t size);
/* Whether the CPU does VMX/SVM itself (a nested host without them, like PVM, has a /dev/kvm whose
 * guests die: tried once, QEMU hung in the host's kernel for minutes, beyond SIGKILL). */
bool cdn_vm_cpu_virt(void);

/* What is prepared, without preparing anything (`cordon vm status`): the one answer to "can the VM
 * tiers boot here", for users and for the tests. */
struct cdn_vm_status {
    char qemu[4096];             /* QEMU's binary, "" when it is not in PATH */
    bool hw_virt;                /* /dev/kvm and the CPU's own VMX/SVM: KVM may run guests (else TCG) */
    struct cdn_vm_assets assets; /* where they are (release: "" unless kernel_ready) */
    bool kernel_ready;           /* the guest kernel is unpacked (its stamp is written last) */
    bool initramfs_ready;        /* the initramfs images are there and current for this cordon-init */
};
/* -errno only when cordon itself is incomplete (no cordon-init, no host image). */
int cdn_vm_status(struct cdn_vm_status *out, struct cdn_error *err);

/* The root disk of an image other than "host" (image/image.h's resolution of it): a read-only erofs
 * made once and cached in <vm>/images/ (path into out): of the image directory, or of an OCI
 * image's layers merged (whiteouts applied, owners as the image says), named by its manifest digest.
 * Made aside and renamed under the images' lock: a killed build leaves nothing half-visible, two
 * creates at once make it once. how: CDN_VM_*. Errors name "image". (image-disk.c) */
struct cdn_image;
int cdn_vm_image_disk(const struct cdn_image *img, unsigned how, char *out, size_t size,
                      struct cdn_error *err);
/* An OCI image's disk's name (no ".erofs") from its manifest digest "ALGO:HEX" ("oci-ALGO-HEX"), and
 * the digest back from a file name "oci-ALGO-HEX.erofs". -EINVAL for anything else (a digest that is
 * not lowercase ALGO:HEX: the name is a path component). */
int cdn_vm_oci_disk_name(const char *digest, char *name, size_t size);
int cdn_vm_oci_disk_digest(const char *file, char *digest, size_t size);
/* Remove the OCI images' disks (and their guests' templates) whose manifest digest keep refuses:
 * `cordon image rm|prune` pass what the store's references still name; and what killed builds left
 * (NAME.erofs.tmp, NAME.work) of any image. Skipped (0) while a disk is
 * being made, so that it never waits minutes for one. 0 or -errno. */
int cdn_vm_prune_image_disks(bool (*keep)(const char *digest, void *data), void *data, struct cdn_error *err);
