/* The microvm tier (DESIGN §5, docs/microvm.md): a QEMU `-M microvm` guest — no PCI, no firmware,
 * virtio-mmio devices — booting the Debian kernel of qemu/vmprep.h through PVH, with cordon-init as
 * the guest's first process speaking the agent protocol over a virtio-serial port whose host end is
 * our socket; started from a snapshot of a booted guest, restored copy-on-write. What it shares with
 * tier vm (the command line, QEMU's jail, the snapshot, the guest's connection) is src/tiers/qemu/;
 * this is what is its own: its machine, its root disk, its table. Runs in the host process that
 * owns the sandbox, as root. */
#include "tiers/qemu/qemu.h"
#include "tiers/tier.h"

#include <string.h>

/* The host image's guest has no disk (the host's /usr comes over 9p); another image's has an erofs
 * of it, mounted as its root at boot. */
static int microvm_root_disk(const struct cdn_spec *spec, unsigned how, char *disk, size_t size,
                             const char **ret_format, struct cdn_error *err)
{
    *ret_format = NULL;
    if (strcmp(spec->image, "host") == 0)
        return 0;
    return cdn_qemu_image_erofs(spec, how, disk, size, err);
}

/* With a root disk, the initramfs that holds its modules. */
static const char *microvm_initramfs(const struct cdn_vm_assets *vm, const struct cdn_qemu_disk *disk)
{
    return disk->path ? vm->initramfs_disk : vm->initramfs;
}

static const struct cdn_qemu_tier machine = {
    .pci = false,
    .snapshots = true,
    .overhead_mb = 64,
    .append = "",
    .initramfs = microvm_initramfs,
    .root_disk = microvm_root_disk,
};

static int microvm_prepare(const struct cdn_spec *spec, bool build, struct cdn_error *err)
{
    return cdn_qemu_prepare(spec, &machine, build, err);
}

static int microvm_create(struct cdn_sandbox *sb, struct cdn_error *err)
{
    return cdn_qemu_create(sb, &machine, err);
}

const struct cdn_tier_ops cdn_microvm_tier = {
    .name = "microvm",
    .tier = CDN_TIER_MICROVM,
    .create = microvm_create,
    .prepare = microvm_prepare,
    CDN_QEMU_TIER_OPS,
};
