/* The tier table (src/tiers/tier.h) and what the VM tiers share (src/tiers/qemu/): the table is
 * found by value and by name, its capabilities agree with each other, a guest's USAGE report only
 * ever grows the counters, and each machine's command line has its own bus, initramfs and kernel
 * arguments. */
#include "proto/frame.h"
#include "core/spec.h"
#include "tap.h"
#include "tiers/qemu/qemu.h"
#include "tiers/tier.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

TEST(table_finds_every_tier)
{
    size_t n = 0;
    for (const struct cdn_tier_ops *const *t = cdn_tiers; *t; t++, n++) {
        CHECK(cdn_tier_lookup((*t)->tier) == *t);
        CHECK(cdn_tier_by_name((*t)->name) == *t);
        CHECK_STREQ(cdn_tier_to_string((*t)->tier), (*t)->name);
        CHECK((*t)->create && (*t)->kill && (*t)->usage && (*t)->destroy && (*t)->detach && (*t)->adopt);
        /* A guest that answers its start supervises itself and takes frames of its own. */
        if ((*t)->start_answers)
            CHECK((*t)->guest_supervises && (*t)->frame);
        for (const struct cdn_tier_escape *e = (*t)->by_design; e && e->probe; e++)
            CHECK(e->why && *e->why);
    }
    CHECK_EQ_INT(n, _CDN_TIER_MAX);
    CHECK(cdn_tier_by_name("none") == NULL);
    /* The order metrics list them in. */
    CHECK_STREQ(cdn_tiers[0]->name, "process");
    CHECK_STREQ(cdn_tiers[1]->name, "container");
}

TEST(guest_usage_only_grows)
{
    struct cdn_sandbox sb;
    struct cdn_spec spec;
    CHECK_EQ_INT(cdn_spec_init(&spec), 0);
    cdn_sandbox_init(&sb, &spec);
    sb.tier = &cdn_microvm_tier;
    uint8_t buf[256];
    struct cdn_usage u;
    bool full = true;
    CHECK_EQ_INT(sb.tier->usage(&sb, &u), 0); /* nothing reported yet */
    CHECK_EQ_INT(u.oom_kills, 0);
    CHECK_EQ_INT(sb.tier->disk_full(&sb, &full), 0);
    CHECK(!full);
    int n =
        cdn_usage_encode(buf, sizeof buf,
                         &(struct cdn_usage_msg){
                             .memory_peak_bytes = 1000, .oom_kills = 2, .pids_max_hits = 3, .disk_full = 1});
    CHECK(n > 0);
    CHECK_EQ_INT(sb.tier->frame(&sb, CDN_FRAME_USAGE, buf, (size_t) n), 1);
    /* A guest that claims less hides nothing: the counters stay; the disk is as it says now. */
    n = cdn_usage_encode(buf, sizeof buf, &(struct cdn_usage_msg){.memory_peak_bytes = 10});
    CHECK_EQ_INT(sb.tier->frame(&sb, CDN_FRAME_USAGE, buf, (size_t) n), 1);
    CHECK_EQ_INT(sb.tier->usage(&sb, &u), 0);
    CHECK_EQ_INT(u.memory_peak_bytes, 1000);
    CHECK_EQ_INT(u.oom_kills, 2);
    CHECK_EQ_INT(u.pids_max_hits, 3);
    CHECK_EQ_INT(sb.tier->disk_full(&sb, &full), 0);
    CHECK(!full);
    CHECK(sb.tier->frame(&sb, CDN_FRAME_USAGE, buf, 1) < 0);                 /* does not decode */
    CHECK_EQ_INT(sb.tier->frame(&sb, CDN_FRAME_STDOUT, buf, (size_t) n), 0); /* not the tier's */
    cdn_tier_release(&sb);
    CHECK(sb.tier_data == NULL);
    cdn_spec_free(&spec);
}

/* The argument after the first one equal to opt, or NULL. */
static const char *arg_after(const struct cdn_qemu_cmd *q, const char *opt)
{
    for (int i = 0; i + 1 < q->argc; i++)
        if (strcmp(q->argv[i], opt) == 0)
            return q->argv[i + 1];
    return NULL;
}

static bool has_arg(const struct cdn_qemu_cmd *q, const char *a)
{
    for (int i = 0; i < q->argc; i++)
        if (strcmp(q->argv[i], a) == 0)
            return true;
    return false;
}

TEST(qemu_machines_differ_where_they_should)
{
    struct cdn_vm_assets vm = {
        .kernel = "/k/vmlinux", .initramfs = "/k/i.cpio", .initramfs_vm = "/k/vm.cpio"};
    struct cdn_qemu_cmd *q = calloc(1, sizeof *q);
    CHECK(q != NULL);
    if (!q)
        return;
    cdn_qemu_cmd_build(q, &(struct cdn_qemu_opts){.vm = &vm,
                                                  .accel = "tcg",
                                                  .mem_mb = 576,
                                                  .smp = 1,
                                                  .boot = CDN_QEMU_RESTORE,
                                                  .memdir = "/snap",
                                                  .initramfs = vm.initramfs,
                                                  .append = ""});
    CHECK(strncmp(arg_after(q, "-M"), "microvm,", 8) == 0);
    CHECK(strstr(arg_after(q, "-M"), "memory-backend=ram") != NULL);
    CHECK_STREQ(arg_after(q, "-initrd"), "/k/i.cpio");
    CHECK_STREQ(arg_after(q, "-incoming"), "defer");
    CHECK(has_arg(q, "virtio-serial-device,max_ports=2"));
    CHECK(strstr(arg_after(q, "-append"), "cordon.tier") == NULL);
    bool memdir_rw = false;
    for (int i = 0; i < q->npaths; i++)
        memdir_rw |= strcmp(q->paths[i], "/snap") == 0 && q->rw[i];
    CHECK(memdir_rw); /* QEMU 7.2 opens the RAM file read-write */
    memset(q, 0, sizeof *q);
    cdn_qemu_cmd_build(q, &(struct cdn_qemu_opts){.vm = &vm,
                                                  .accel = "tcg",
                                                  .mem_mb = 768,
                                                  .smp = 2,
                                                  .boot = CDN_QEMU_COLD,
                                                  .pci = true,
                                                  .initramfs = vm.initramfs_vm,
                                                  .append = " cordon.tier=vm net.ifnames=0",
                                                  .disk = {.path = "/d.qcow2", .format = "qcow2"}});
    CHECK(strncmp(arg_after(q, "-M"), "q35,", 4) == 0);
    CHECK_STREQ(arg_after(q, "-initrd"), "/k/vm.cpio");
    CHECK(has_arg(q, "virtio-serial-pci,max_ports=2"));
    CHECK(has_arg(q, "virtio-blk-pci,drive=root"));
    CHECK_STREQ(arg_after(q, "-add-fd"), "fd=7,set=1");
    CHECK(!has_arg(q, "-incoming"));
    const char *append = arg_after(q, "-append");
    CHECK(append && strstr(append, " cordon.root=disk") && strstr(append, " cordon.tier=vm net.ifnames=0"));
    CHECK(q->argv[q->argc] == NULL);
    free(q);
}
