/* The microvm tier (DESIGN §5): a QEMU `-M microvm` guest — no PCI, no
 * firmware, virtio-mmio devices — booting the Debian kernel of vmprep.h
 * through PVH, with cordon-init as the guest's first process speaking the
 * agent protocol over a virtio-serial port whose host end is our socket.
 *
 * So far: cold boot from `cordon run`, under KVM where hardware
 * virtualisation is there, else QEMU's TCG. Still to come (issue 6): the
 * sandbox's network namespace and tap, the image as a block device, snapshot
 * restore, QEMU confined in its own uid, cgroup and chroot, cordond. */
#include "tiers/tier.h"
#include "vmprep.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define QEMU       "qemu-system-x86_64"
#define QEMU_AGENT 3 /* the fd QEMU gets our socket on */

/* KVM only where it can work: /dev/kvm there and the CPU doing VMX/SVM itself
 * (a nested host without them, like PVM, has /dev/kvm whose guests die). */
static const char *pick_accel(void)
{
    const char *env = getenv("CORDON_VM_ACCEL");
    if (env && (strcmp(env, "kvm") == 0 || strcmp(env, "tcg") == 0))
        return env;
    if (access("/dev/kvm", R_OK | W_OK) < 0)
        return "tcg";
    static char buf[1 << 16];
    ssize_t n = cdn_read_file_at(AT_FDCWD, "/proc/cpuinfo", buf, sizeof buf);
    return n > 0 && (strstr(buf, " vmx") || strstr(buf, " svm")) ? "kvm" : "tcg";
}

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

static int microvm_create(struct cdn_sandbox *sb, struct cdn_error *err)
{
    struct cdn_vm_assets vm;
    int r = cdn_vm_prepare(&vm, true, err);
    if (r < 0)
        return r;
    const char *accel = pick_accel();
    (void) snprintf(sb->accel, sizeof sb->accel, "%s", accel);
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
        return cdn_error_set(err, errno, "socketpair: %m");
    char machine[128], mem[32], smp[32], append[512], chardev[64];
    (void) snprintf(machine, sizeof machine, "microvm,pit=on,rtc=on,isa-serial=off,accel=%s", accel);
    (void) snprintf(mem, sizeof mem, "%lluM", (unsigned long long) sb->spec->limits.memory_mb);
    (void) snprintf(smp, sizeof smp, "%d", (int) ceil(sb->spec->limits.cpus));
    long khz = tsc_khz();
    int an = snprintf(append, sizeof append, "quiet panic=-1 reboot=t random.trust_cpu=on");
    if (khz > 0)
        (void) snprintf(append + an, sizeof append - (size_t) an, " tsc_early_khz=%ld", khz);
    (void) snprintf(chardev, sizeof chardev, "socket,id=agent,fd=%d", QEMU_AGENT);
    char *const argv[] = {QEMU,
                          "-M",
                          machine,
                          "-cpu",
                          strcmp(accel, "kvm") == 0 ? "host" : "max",
                          "-m",
                          mem,
                          "-smp",
                          smp,
                          "-nodefaults",
                          "-no-user-config",
                          "-nographic",
                          "-no-reboot",
                          "-serial",
                          "none",
                          "-monitor",
                          "none",
                          "-sandbox",
                          "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
                          "-kernel",
                          vm.kernel,
                          "-initrd",
                          vm.initramfs,
                          "-append",
                          append,
                          "-device",
                          "virtio-serial-device",
                          "-chardev",
                          chardev,
                          "-device",
                          "virtserialport,chardev=agent,name=cordon.agent",
                          NULL};
    int pidfd = -1;
    struct clone_args ca = {
        .flags = CLONE_PIDFD, .pidfd = (uint64_t) (uintptr_t) &pidfd, .exit_signal = SIGCHLD};
    pid_t pid = (pid_t) syscall(SYS_clone3, &ca, sizeof ca);
    if (pid < 0) {
        r = cdn_error_set(err, errno, "fork for QEMU: %m");
        (void) close(sp[0]), (void) close(sp[1]);
        return r;
    }
    if (pid == 0) {
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL); /* a one-shot run: the guest goes with its caller */
        int devnull = open("/dev/null", O_RDWR);
        if (dup2(sp[1], QEMU_AGENT) < 0 || (devnull >= 0 && (dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0)))
            _exit(127);
        if (!getenv("CORDON_VM_DEBUG") && devnull >= 0)
            (void) dup2(devnull, 2);
        (void) syscall(SYS_close_range, QEMU_AGENT + 1, ~0U, 0);
        execvp(QEMU, argv);
        fprintf(stderr, "cordon: exec %s: %m (install qemu-system-x86)\n", QEMU);
        _exit(127);
    }
    (void) close(sp[1]);
    sb->agent_fd = sp[0];
    sb->init_pid = pid;
    sb->init_pidfd = pidfd;
    sb->setup_fd = -1; /* no setup child: the guest's init says nothing until the agent speaks */
    return 0;
}

static int microvm_kill(struct cdn_sandbox *sb, int sig)
{
    if (sb->init_pidfd < 0)
        return -ESRCH;
    /* Signals for the command cannot reach inside the guest this way: the
     * agent forwards them; here only the end of the whole guest is asked for. */
    return RET_NERRNO(
        (int) syscall(SYS_pidfd_send_signal, sb->init_pidfd, sig == SIGKILL ? SIGKILL : SIGTERM, NULL, 0));
}

static int microvm_usage(struct cdn_sandbox *sb, struct cdn_usage *ret)
{
    (void) sb;
    *ret = (struct cdn_usage){0};
    return 0;
}

static int microvm_destroy(struct cdn_sandbox *sb)
{
    if (sb->init_pid > 0) {
        (void) microvm_kill(sb, SIGKILL);
        while (waitpid(sb->init_pid, NULL, 0) < 0 && errno == EINTR)
            ;
        sb->init_pid = 0;
    }
    sb->init_pidfd = safe_close(sb->init_pidfd);
    sb->agent_fd = safe_close(sb->agent_fd);
    return 0;
}

static void microvm_detach(struct cdn_sandbox *sb)
{
    (void) microvm_destroy(sb); /* QEMU is gone or goes at once: nothing to leave to the background */
}

const struct cdn_tier_ops cdn_microvm_tier = {
    .name = "microvm",
    .create = microvm_create,
    .kill = microvm_kill,
    .usage = microvm_usage,
    .destroy = microvm_destroy,
    .detach = microvm_detach,
};
