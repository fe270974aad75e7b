/* The QEMU command line of a VM tier's guest (qemu.h). */
#include "qemu.h"
#include "core/paths.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The guest must not calibrate its TSC under TCG (1 boot in 8 hangs doing
 * so): tell it the host's frequency. */
static long tsc_khz(void)
{
    static char buf[1 << 16];
    if (cdn_read_file_at(AT_FDCWD, "/proc/cpuinfo", buf, sizeof buf) <= 0)
        return 0;
    const char *m = strstr(buf, "cpu MHz");
    const char *colon = m ? strchr(m, ':') : NULL;
    return colon ? (long) (atof(colon + 1) * 1000.0) : 0;
}

/* The guest's CPU: the host's under KVM. Under TCG QEMU's "max" without ERMS and FSRM: with them the
 * kernel copies and clears memory by REP MOVSB/STOSB, which TCG runs one byte per step; without, by
 * REP MOVSQ/STOSQ (REP_GOOD), eight bytes a step. A cold boot reached its init a fifth sooner and
 * loaded its modules 30 % faster (bench/run-microvm's page). */
const char *cdn_qemu_cpu_model(const char *accel)
{
    return strcmp(accel, "kvm") == 0 ? "host" : "max,-erms,-fsrm";
}

static void need(struct cdn_qemu_cmd *q, const char *path, bool rw)
{
    if (q->npaths < 8) {
        q->rw[q->npaths] = rw;
        q->paths[q->npaths++] = path;
    }
}

static void add(struct cdn_qemu_cmd *q, const char *a)
{
    if (q->argc < 63)
        q->argv[q->argc++] = (char *) a;
    q->argv[q->argc] = NULL;
}

static const char *fmt(struct cdn_qemu_cmd *q, const char *f, ...) __attribute__((format(printf, 2, 3)));
static const char *fmt(struct cdn_qemu_cmd *q, const char *f, ...)
{
    if (q->nbuf >= 20) /* one buffer per argument: sized for every fmt() of cdn_qemu_cmd_build */
        abort();
    char *b = q->buf[q->nbuf++];
    va_list ap;
    va_start(ap, f);
    (void) vsnprintf(b, sizeof q->buf[0], f, ap);
    va_end(ap);
    return b;
}

/* The machine: its type, RAM (a template's or restore's: a file), CPUs. */
static void machine(struct cdn_qemu_cmd *q, const struct cdn_qemu_opts *o, bool console)
{
    add(q, "-M");
    if (o->pci)
        add(q, fmt(q, "q35,accel=%s,smm=off,vmport=off", o->accel));
    else
        add(q, fmt(q, "microvm,pit=on,rtc=on,isa-serial=%s,accel=%s%s", console ? "on" : "off", o->accel,
                   o->boot == CDN_QEMU_COLD ? "" : ",memory-backend=ram"));
    if (o->boot != CDN_QEMU_COLD) {
        /* Restored copy-on-write: the file is the template's RAM, never written again. */
        add(q, "-object");
        add(q, fmt(q, "memory-backend-file,id=ram,size=%lluM,mem-path=%s/mem,share=%s",
                   (unsigned long long) o->mem_mb, o->memdir, o->boot == CDN_QEMU_TEMPLATE ? "on" : "off"));
        /* Writable: QEMU 7.2 opens the RAM file read-write even to map it copy-on-write. */
        need(q, o->memdir, true);
    }
    add(q, "-cpu");
    add(q, cdn_qemu_cpu_model(o->accel));
    add(q, "-m");
    add(q, fmt(q, "%lluM", (unsigned long long) o->mem_mb));
    add(q, "-smp");
    add(q, fmt(q, "%d", o->smp));
}

/* The kernel, the initramfs and the kernel's command line. */
static void kernel(struct cdn_qemu_cmd *q, const struct cdn_qemu_opts *o, bool console)
{
    add(q, o->vm->kernel);
    need(q, o->vm->kernel, false);
    add(q, "-initrd");
    add(q, o->initramfs);
    need(q, o->initramfs, false);
    add(q, "-append");
    char tsc[48] = "";
    long khz = tsc_khz();
    if (khz > 0)
        (void) snprintf(tsc, sizeof tsc, " tsc_early_khz=%ld", khz);
    /* cordon.root=erofs|disk: the guest's init makes the disk its root at boot (in the snapshot).
     * cordon.boot=template: every module at boot (a cold boot loads the network's only for a
     * network). The tier's own after them (tier vm: cordon.tier=vm, the image's init takes over). */
    add(q,
        fmt(q, "%s panic=-1 reboot=t random.trust_cpu=on%s%s%s%s", console ? "console=ttyS0" : "quiet", tsc,
            o->disk.format ? " cordon.root=disk"
            : o->disk.path ? " cordon.root=erofs"
                           : "",
            o->boot == CDN_QEMU_TEMPLATE ? " cordon.boot=template" : "", o->append));
}

/* The agent's port, the network, and the two 9p shares. bus: a device's name on the machine's bus
 * (virtio-mmio on microvm, PCI on q35). */
static void devices(struct cdn_qemu_cmd *q, const struct cdn_qemu_opts *o, const char *bus)
{
    /* Two ports (the agent's is 1; 0 is kept for a console): the guest's driver then sets up 4
     * virtqueues, not the 64 of the default 31 ports. */
    add(q, "-device");
    add(q, fmt(q, "virtio-serial-%s,max_ports=2", bus));
    add(q, "-chardev");
    /* listening: fd 3 is a listening socket (a persistent sandbox's): QEMU accepts one host at a
     * time on it, so a restarted cordond connects again, as to a container's init. */
    add(q, fmt(q, "socket,id=agent,fd=%d%s", CDN_QEMU_AGENT, o->listening ? ",server=on,wait=off" : ""));
    add(q, "-device");
    add(q, "virtserialport,chardev=agent,name=cordon.agent");
    /* The network: virtio-net on the sandbox's tap (fd 6), or on a hub with nothing else on it
     * (no network; a template always has the device, so that every restore can have one). */
    add(q, "-netdev");
    add(q, o->tap ? fmt(q, "tap,id=net0,fd=%d,vhost=off", CDN_QEMU_TAP) : "hubport,id=net0,hubid=0");
    add(q, "-device");
    add(q, fmt(q, "virtio-net-%s,netdev=net0,mac=52:54:00:c0:00:02%s", bus,
               o->pci ? ",romfile=" : "")); /* no iPXE */
    /* The host image: the host's /usr, read-only, over 9p; the guest mounts it before its first
     * command (not at boot: a mounted 9p share would block the template's migration). */
    add(q, "-fsdev");
    add(q, "local,id=usr,path=/usr,security_model=none,readonly=on"); /* /usr: in every jail */
    add(q, "-device");
    add(q, fmt(q, "virtio-9p-%s,fsdev=usr,mount_tag=usr", bus));
    /* The sandbox's binds (spec mounts): one share whose i-th entry is the i-th source, bound there
     * in QEMU's own mount namespace (jail.c); an empty directory when there are none. */
    add(q, "-fsdev");
    /* mapped-xattr: what the guest sets (owners, modes: setuid root) stays in xattrs, never on the
     * host's files, which QEMU (root) creates. */
    const char *share = fmt(q, "%s/%s", cdn_vm_dir(), o->binds ? "share" : "empty");
    add(q, fmt(q, "local,id=binds,path=%s,security_model=mapped-xattr", share));
    need(q, share, true);
    add(q, "-device");
    add(q, fmt(q, "virtio-9p-%s,fsdev=binds,mount_tag=binds", bus));
}

/* The root disk. An erofs: read-only, many guests share it, as containers share an image's lower
 * layer. A disk image: snapshot=on, the guest's writes go to a file QEMU makes in $TMPDIR (the
 * sandbox's own directory, jail.c). */
static void disk(struct cdn_qemu_cmd *q, const struct cdn_qemu_disk *d, const char *bus)
{
    if (d->format) { /* a file the user gave: QEMU gets it open (fd 7), as fd set 1 */
        add(q, "-add-fd");
        add(q, fmt(q, "fd=%d,set=1", CDN_QEMU_DISK));
    } else
        need(q, d->path, false);
    add(q, "-drive");
    add(q, d->format ? fmt(q, "file=/dev/fdset/1,if=none,id=root,format=%s,snapshot=on", d->format)
                     : fmt(q, "file=%s,if=none,id=root,format=raw,readonly=on", d->path));
    add(q, "-device");
    add(q, fmt(q, "virtio-blk-%s,drive=root", bus));
}

void cdn_qemu_cmd_build(struct cdn_qemu_cmd *q, const struct cdn_qemu_opts *o)
{
    const char *bus = o->pci ? "pci" : "device";
    /* CORDON_VM_DEBUG=1 with a cold boot: the guest kernel's console on QEMU's stderr (kept then). */
    bool console = o->boot == CDN_QEMU_COLD && getenv("CORDON_VM_DEBUG");
    add(q, CDN_QEMU);
    machine(q, o, console);
    static const char *const fixed[] = {
        "-nodefaults", "-no-user-config",
        "-nographic",  "-no-reboot",
        "-sandbox",    "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
        "-kernel"};
    add(q, "-serial");
    add(q, console ? "stdio" : "none"); /* stdio: its stdout is then its stderr (jail.c) */
    for (size_t i = 0; i < ELEMENTSOF(fixed); i++)
        add(q, fixed[i]);
    kernel(q, o, console);
    devices(q, o, bus);
    if (o->disk.path)
        disk(q, &o->disk, bus);
    if (o->boot != CDN_QEMU_COLD) { /* QMP: fd 4 (template) or 5 (restore, whose state is fd 4) */
        add(q, "-chardev");
        add(q, fmt(q, "socket,id=qmp,fd=%d%s", o->boot == CDN_QEMU_TEMPLATE ? CDN_QEMU_FD4 : CDN_QEMU_FD4 + 1,
                   o->qmp_listening ? ",server=on,wait=off" : ""));
        add(q, "-mon");
        add(q, "chardev=qmp,mode=control");
        /* A saved guest does not say whether it ran: a memory checkpoint is saved paused (a live
         * save of a guest that dirties its RAM faster than it goes out would never end), and the
         * guest restored from it runs at once, as from the template. */
        add(q, "-global");
        add(q, "migration.store-global-state=off");
    } else
        add(q, "-monitor"), add(q, "none");
    if (o->boot == CDN_QEMU_RESTORE) {
        add(q, "-incoming"); /* once x-ignore-shared is on (QMP): RAM is the file's, not the stream's */
        add(q, "defer");
    }
}
