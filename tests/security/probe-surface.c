/*
 * Kernel attack surface and socket probes: subsystems with a long record of local privilege escalations
 * (io_uring, eBPF, userfaultfd, keyrings, perf, fanotify) and socket families that reach past the network
 * namespace (raw and packet sockets, netlink families other than NETLINK_ROUTE, vsock to the hypervisor).
 * Each object is created and closed at once; no packet is sent and no socket is connected.
 */
#include "probe.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/netlink.h>
#include <linux/perf_event.h>
#include <linux/userfaultfd.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/socket.h>
#include <sys/syscall.h>

/* seccomp or a missing capability (EPERM/EACCES), compiled out (ENOSYS) */
#define SURFACE_DENIALS EPERM, EACCES, ENOSYS

static void judge_fd(struct probe_result *res, const char *what, long fd, int err, const int *denials)
{
    probe_judge(res, what, fd, err, denials);
    if (fd >= 0)
        (void) close((int) fd);
}
#define JUDGE_FD(res, what, fd, err, ...) judge_fd((res), (what), (fd), (err), (const int[]){__VA_ARGS__, 0})

/* A one-entry ring (freed on close). contained iff EPERM/EACCES/ENOSYS (seccomp, kernel.io_uring_disabled) */
PROBE_FN(io_uring_setup_ring)
{
    struct io_uring_params p;
    long fd;
    int err;

    memset(&p, 0, sizeof(p));
    fd = syscall(SYS_io_uring_setup, 1, &p);
    err = errno;
    JUDGE_FD(res, "io_uring_setup", fd, err, SURFACE_DENIALS);
}

static long sys_bpf(int cmd, union bpf_attr *attr)
{
    return syscall(SYS_bpf, cmd, attr, sizeof(*attr));
}

/* A 1-entry array map. contained iff EPERM/EACCES/ENOSYS (seccomp, kernel.unprivileged_bpf_disabled) */
PROBE_FN(bpf_map_create)
{
    union bpf_attr attr;
    long fd;
    int err;

    memset(&attr, 0, sizeof(attr));
    attr.map_type = BPF_MAP_TYPE_ARRAY;
    attr.key_size = 4;
    attr.value_size = 4;
    attr.max_entries = 1;
    fd = sys_bpf(BPF_MAP_CREATE, &attr);
    err = errno;
    JUDGE_FD(res, "BPF_MAP_CREATE", fd, err, SURFACE_DENIALS);
}

/* "r0 = 0; exit" as a socket filter, the one program type unprivileged bpf ever allowed. Same rule. */
PROBE_FN(bpf_prog_load)
{
    struct bpf_insn insns[2];
    union bpf_attr attr;
    long fd;
    int err;

    memset(insns, 0, sizeof(insns));
    insns[0].code = BPF_ALU64 | BPF_MOV | BPF_K; /* r0 = 0 */
    insns[1].code = BPF_JMP | BPF_EXIT;
    memset(&attr, 0, sizeof(attr));
    attr.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
    attr.insns = (uint64_t) (uintptr_t) insns;
    attr.insn_cnt = 2;
    attr.license = (uint64_t) (uintptr_t) "GPL";
    fd = sys_bpf(BPF_PROG_LOAD, &attr);
    err = errno;
    JUDGE_FD(res, "BPF_PROG_LOAD", fd, err, SURFACE_DENIALS);
}

/*
 * The syscall (with and without UFFD_USER_MODE_ONLY, which vm.unprivileged_userfaultfd=0 still permits) and
 * /dev/userfaultfd. contained iff none of the three yields an fd.
 */
PROBE_FN(userfaultfd_create)
{
    long fd = syscall(SYS_userfaultfd, O_CLOEXEC);
    int err = errno;

    JUDGE_FD(res, "syscall", fd, err, SURFACE_DENIALS);
    fd = syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
    err = errno;
    JUDGE_FD(res, "user-mode-only", fd, err, SURFACE_DENIALS, EINVAL);
    fd = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    err = errno;
    JUDGE_FD(res, "/dev/userfaultfd", fd, err, ENOENT, EACCES, EPERM, ENXIO, ENODEV);
}

/*
 * Keyrings are not namespaced. Looks up the process keyring without creating it: ENOKEY would mean the call
 * reached the kernel. contained iff EPERM/EACCES/ENOSYS
 */
PROBE_FN(keyctl_keyring)
{
    long r = syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_PROCESS_KEYRING, 0);
    int err = errno;

    PROBE_JUDGE(res, "keyctl", r, err, SURFACE_DENIALS);
}

/* A key in the per-process keyring, which dies with this child. contained iff EPERM/EACCES/ENOSYS */
PROBE_FN(add_key_process)
{
    long r = syscall(SYS_add_key, "user", "cordon-probe", "x", 1UL, KEY_SPEC_PROCESS_KEYRING);
    int err = errno;

    PROBE_JUDGE(res, "add_key", r, err, SURFACE_DENIALS);
}

/*
 * A disabled software counter on ourselves, user space only. contained iff EPERM/EACCES/ENOSYS, or
 * ENOENT/ENODEV (no perf support)
 */
PROBE_FN(perf_event_sw)
{
    struct perf_event_attr attr;
    long fd;
    int err;

    memset(&attr, 0, sizeof(attr));
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.disabled = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    err = errno;
    JUDGE_FD(res, "perf_event_open", fd, err, SURFACE_DENIALS, ENOENT, ENODEV);
}

/* A notification group (no marks). contained iff EPERM/EACCES/ENOSYS */
PROBE_FN(fanotify_create)
{
    int fd = fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC, O_RDONLY);
    int err = errno;

    JUDGE_FD(res, "fanotify_init", fd, err, SURFACE_DENIALS);
}

/* family not compiled in or refused by seccomp/capability */
#define SOCKET_DENIALS EPERM, EACCES, EAFNOSUPPORT, EPROTONOSUPPORT, ESOCKTNOSUPPORT

static void judge_socket(struct probe_result *res, const char *what, int domain, int type, int proto)
{
    int fd = socket(domain, type | SOCK_CLOEXEC, proto);
    int err = errno;

    JUDGE_FD(res, what, fd, err, SOCKET_DENIALS);
}

/*
 * socket_raw_ip, socket_packet: need CAP_NET_RAW. IPPROTO_RAW is send-only and packet protocol 0 receives
 * nothing until bound. contained iff EPERM/EACCES/EAFNOSUPPORT/EPROTONOSUPPORT/ESOCKTNOSUPPORT
 */
PROBE_FN(socket_raw_ip)
{
    judge_socket(res, "AF_INET/SOCK_RAW", AF_INET, SOCK_RAW, IPPROTO_RAW);
}

PROBE_FN(socket_packet)
{
    judge_socket(res, "AF_PACKET", AF_PACKET, SOCK_RAW, 0);
}

/*
 * netlink_*: only NETLINK_ROUTE is needed inside a sandbox; audit, uevents and socket diagnostics expose host
 * state. Same rule as above: the socket must not even be created.
 */
PROBE_FN(netlink_audit)
{
    judge_socket(res, "NETLINK_AUDIT", AF_NETLINK, SOCK_RAW, NETLINK_AUDIT);
}

PROBE_FN(netlink_kobject_uevent)
{
    judge_socket(res, "NETLINK_KOBJECT_UEVENT", AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT);
}

PROBE_FN(netlink_sock_diag)
{
    judge_socket(res, "NETLINK_SOCK_DIAG", AF_NETLINK, SOCK_RAW, NETLINK_SOCK_DIAG);
}

/* vsock is not confined by the network namespace: on a VM host it talks to the hypervisor. Same rule. */
PROBE_FN(socket_vsock)
{
    judge_socket(res, "AF_VSOCK", AF_VSOCK, SOCK_STREAM, 0);
}

const struct probe_def probe_defs_surface[] = {
    PROBE_ENTRY("attack-surface", io_uring_setup_ring),
    PROBE_ENTRY("attack-surface", bpf_map_create),
    PROBE_ENTRY("attack-surface", bpf_prog_load),
    PROBE_ENTRY("attack-surface", userfaultfd_create),
    PROBE_ENTRY("attack-surface", keyctl_keyring),
    PROBE_ENTRY("attack-surface", add_key_process),
    PROBE_ENTRY("attack-surface", perf_event_sw),
    PROBE_ENTRY("attack-surface", fanotify_create),
    PROBE_ENTRY("sockets", socket_raw_ip),
    PROBE_ENTRY("sockets", socket_packet),
    PROBE_ENTRY("sockets", netlink_audit),
    PROBE_ENTRY("sockets", netlink_kobject_uevent),
    PROBE_ENTRY("sockets", netlink_sock_diag),
    PROBE_ENTRY("sockets", socket_vsock),
    {0},
};
