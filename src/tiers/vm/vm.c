/* The vm tier (DESIGN §5, docs/vm.md): a QEMU q35 machine (PCI, firmware) with the image's disk,
 * writable through QEMU's snapshot of it, booting the image's own init, which starts cordon-init as
 * the agent (src/agent/init-vm.c); cold boots only. The same devices, network, agent protocol and
 * limits as tier microvm otherwise: what the two share is src/tiers/qemu/; this is what is its own:
 * its machine, its root disk, its table. Runs in the host process that owns the sandbox, as root. */
#include "tiers/qemu/qemu.h"
#include "tiers/tier.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A full VM's image given as a disk image file: its format from its first bytes — qcow2, or raw
 * holding ext4 (the whole disk) or a partition table. 0 and *format, or an error naming "image". */
static int disk_image(const char *path, const char **ret_format, struct cdn_error *err)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    uint8_t b[2048] = {0};
    if (fd < 0)
        return cdn_error_field(err, errno, "image", "image: '%s': %m", path);
    ssize_t n = pread(fd, b, sizeof b, 0);
    if (n >= 4 && memcmp(b, "QFI\xfb", 4) == 0)
        *ret_format = "qcow2";
    else if (n == (ssize_t) sizeof b &&
             ((b[1080] == 0x53 && b[1081] == 0xef) || (b[510] == 0x55 && b[511] == 0xaa)))
        *ret_format = "raw";
    else
        return cdn_error_field(
            err, EINVAL, "image",
            "image: '%s' is neither a qcow2 image nor a raw disk (ext4, or a partition table)", path);
    return 0;
}

/* The guest's root disk: a disk image file as it is, or an image directory (the host's too) as an
 * erofs. */
static int vm_root_disk(const struct cdn_spec *spec, unsigned how, char *disk, size_t size,
                        const char **ret_format, struct cdn_error *err)
{
    struct stat st;
    *ret_format = NULL;
    if (spec->image[0] == '/' && stat(spec->image, &st) == 0 && S_ISREG(st.st_mode)) {
        (void) snprintf(disk, size, "%s", spec->image);
        return disk_image(spec->image, ret_format, err);
    }
    return cdn_qemu_image_erofs(spec, how, disk, size, err);
}

/* Its own initramfs: virtio over PCI, ext4. */
static const char *vm_initramfs(const struct cdn_vm_assets *vm, const struct cdn_qemu_disk *disk)
{
    (void) disk;
    return vm->initramfs_vm;
}

static const struct cdn_qemu_tier machine = {
    .pci = true,
    .snapshots = false,
    .overhead_mb = 256, /* the image's system too */
    /* The image's init takes over; net.ifnames=0: its udev keeps the name eth0, which the agent
     * sets up. */
    .append = " cordon.tier=vm net.ifnames=0",
    .initramfs = vm_initramfs,
    .root_disk = vm_root_disk,
};

static int vm_prepare(const struct cdn_spec *spec, bool build, struct cdn_error *err)
{
    return cdn_qemu_prepare(spec, &machine, build, err);
}

static int vm_create(struct cdn_sandbox *sb, struct cdn_error *err)
{
    return cdn_qemu_create(sb, &machine, err);
}

const struct cdn_tier_ops cdn_vm_tier = {
    .name = "vm",
    .tier = CDN_TIER_VM,
    .create = vm_create,
    .prepare = vm_prepare,
    CDN_QEMU_TIER_OPS,
};
