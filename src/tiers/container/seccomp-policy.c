/* The syscall lists. Modelled on the allowlist of Docker's default profile
 * (everything not listed is denied with EPERM), then tightened: ptrace and
 * cross-process memory access, the mount family, namespace creation, io_uring,
 * userfaultfd, bpf, perf_event_open, the key store, handle-based opens, module
 * and kexec loading, reboot, swap, clock setting, NUMA policy, and 32-bit
 * syscall ABIs (any non-native arch kills the process). Arguments of clone,
 * socket, ioctl and personality are filtered in seccomp.c. */
#include "seccomp-policy.h"

const char *const cdn_seccomp_allowed[] = {
    "accept", "accept4", "access", "adjtimex", "alarm", "arch_prctl", "bind", "brk", "cachestat",
    "capget", "capset", "chdir", "chmod", "chown", "clock_getres", "clock_gettime",
    "clock_nanosleep", "close", "close_range", "connect", "copy_file_range", "creat", "dup", "dup2",
    "dup3", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2", "epoll_wait",
    "eventfd", "eventfd2", "execve", "execveat", "exit", "exit_group", "faccessat", "faccessat2",
    "fadvise64", "fallocate", "fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown", "fchownat", "fcntl",
    "fdatasync", "fgetxattr", "flistxattr", "flock", "fork", "fremovexattr", "fsetxattr", "fstat",
    "fstatfs", "fsync", "ftruncate", "futex", "futex_requeue", "futex_wait", "futex_waitv", "futex_wake",
    "futimesat", "get_robust_list", "get_thread_area", "getcpu", "getcwd", "getdents", "getdents64",
    "getegid", "geteuid", "getgid", "getgroups", "getitimer", "getpeername", "getpgid", "getpgrp",
    "getpid", "getppid", "getpriority", "getrandom", "getresgid", "getresuid", "getrlimit", "getrusage",
    "getsid", "getsockname", "getsockopt", "gettid", "gettimeofday", "getuid", "getxattr",
    "inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch", "io_cancel", "io_destroy",
    "io_getevents", "io_pgetevents", "io_setup", "io_submit", "ioprio_get", "ioprio_set", "kill",
    "landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "lchown", "lgetxattr",
    "link", "linkat", "listen", "listxattr", "llistxattr", "lremovexattr", "lseek", "lsetxattr", "lstat",
    "madvise", "map_shadow_stack", "membarrier", "memfd_create", "mincore", "mkdir", "mkdirat", "mknod",
    "mknodat", "mlock", "mlock2", "mlockall", "mmap", "mprotect", "mq_getsetattr", "mq_notify",
    "mq_open", "mq_timedreceive", "mq_timedsend", "mq_unlink", "mremap", "mseal", "msgctl", "msgget",
    "msgrcv", "msgsnd", "msync", "munlock", "munlockall", "munmap", "name_to_handle_at", "nanosleep",
    "newfstatat", "open", "openat", "openat2", "pause", "pidfd_open", "pidfd_send_signal", "pipe",
    "pipe2", "pkey_alloc", "pkey_free", "pkey_mprotect", "poll", "ppoll", "prctl", "pread64", "preadv",
    "preadv2", "prlimit64", "process_mrelease", "pselect6", "pwrite64", "pwritev", "pwritev2", "read",
    "readahead", "readlink", "readlinkat", "readv", "recvfrom", "recvmmsg", "recvmsg", "remap_file_pages",
    "removexattr", "rename", "renameat", "renameat2", "restart_syscall", "rmdir", "rseq", "rt_sigaction",
    "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend",
    "rt_sigtimedwait", "rt_tgsigqueueinfo", "sched_get_priority_max", "sched_get_priority_min",
    "sched_getaffinity", "sched_getattr", "sched_getparam", "sched_getscheduler", "sched_rr_get_interval",
    "sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield",
    "seccomp", "select", "semctl", "semget", "semop", "semtimedop", "sendfile", "sendmmsg", "sendmsg",
    "sendto", "set_robust_list", "set_thread_area", "set_tid_address", "setfsgid", "setfsuid", "setgid",
    "setgroups", "setitimer", "setpgid", "setpriority", "setregid", "setresgid", "setresuid", "setreuid",
    "setrlimit", "setsid", "setsockopt", "setuid", "setxattr", "shmat", "shmctl", "shmdt", "shmget",
    "shutdown", "sigaltstack", "signalfd", "signalfd4", "socketpair", "splice", "stat", "statfs", "statx",
    "symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "sysinfo", "tee", "tgkill", "time",
    "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime", "timer_settime",
    "timerfd_create", "timerfd_gettime", "timerfd_settime", "times", "tkill", "truncate", "umask",
    "uname", "unlink", "unlinkat", "utime", "utimensat", "utimes", "vfork", "wait4", "waitid", "write",
    "writev",
};
const size_t cdn_seccomp_n_allowed = sizeof cdn_seccomp_allowed / sizeof cdn_seccomp_allowed[0];

/* Denials named explicitly, so that the policy documents them and the monitor
 * can tell an escape attempt from noise. Anything else not allowed is denied too. */
const struct cdn_sc_denial cdn_seccomp_denied[] = {
    {"mount", CDN_SC_DENY_WATCHED},           {"umount2", CDN_SC_DENY_WATCHED},
    {"pivot_root", CDN_SC_DENY_WATCHED},      {"chroot", CDN_SC_DENY_WATCHED},
    {"move_mount", CDN_SC_DENY_WATCHED},      {"open_tree", CDN_SC_DENY_WATCHED},
    {"fsopen", CDN_SC_DENY_WATCHED},          {"fsconfig", CDN_SC_DENY_WATCHED},
    {"fsmount", CDN_SC_DENY_WATCHED},         {"fspick", CDN_SC_DENY_WATCHED},
    {"mount_setattr", CDN_SC_DENY_WATCHED},   {"unshare", CDN_SC_DENY_WATCHED},
    {"setns", CDN_SC_DENY_WATCHED},           {"ptrace", CDN_SC_DENY_WATCHED},
    {"process_vm_readv", CDN_SC_DENY_WATCHED}, {"process_vm_writev", CDN_SC_DENY_WATCHED},
    {"pidfd_getfd", CDN_SC_DENY_WATCHED},     {"kcmp", CDN_SC_DENY_WATCHED},
    {"bpf", CDN_SC_DENY_WATCHED},             {"perf_event_open", CDN_SC_DENY_WATCHED},
    {"userfaultfd", CDN_SC_DENY_WATCHED},     {"io_uring_setup", CDN_SC_DENY_WATCHED},
    {"io_uring_enter", CDN_SC_DENY_WATCHED},  {"io_uring_register", CDN_SC_DENY_WATCHED},
    {"keyctl", CDN_SC_DENY_WATCHED},          {"add_key", CDN_SC_DENY_WATCHED},
    {"request_key", CDN_SC_DENY_WATCHED},     {"open_by_handle_at", CDN_SC_DENY_WATCHED},
    {"kexec_load", CDN_SC_DENY_WATCHED},      {"kexec_file_load", CDN_SC_DENY_WATCHED},
    {"init_module", CDN_SC_DENY_WATCHED},     {"finit_module", CDN_SC_DENY_WATCHED},
    {"delete_module", CDN_SC_DENY_WATCHED},   {"reboot", CDN_SC_DENY_WATCHED},
    {"swapon", CDN_SC_DENY_WATCHED},          {"swapoff", CDN_SC_DENY_WATCHED},
    {"settimeofday", CDN_SC_DENY_WATCHED},    {"clock_settime", CDN_SC_DENY_WATCHED},
    {"clock_adjtime", CDN_SC_DENY_WATCHED},   {"iopl", CDN_SC_DENY_WATCHED},
    {"ioperm", CDN_SC_DENY_WATCHED},          {"fanotify_init", CDN_SC_DENY_WATCHED},
    {"quotactl", CDN_SC_DENY_QUIET},          {"quotactl_fd", CDN_SC_DENY_QUIET},
    {"acct", CDN_SC_DENY_WATCHED},            {"syslog", CDN_SC_DENY_QUIET},
    {"vhangup", CDN_SC_DENY_QUIET},           {"lookup_dcookie", CDN_SC_DENY_QUIET},
    {"uselib", CDN_SC_DENY_QUIET},            {"ustat", CDN_SC_DENY_QUIET},
    {"sysfs", CDN_SC_DENY_QUIET},             {"_sysctl", CDN_SC_DENY_QUIET},
    {"personality", CDN_SC_DENY_QUIET},       {"mbind", CDN_SC_DENY_QUIET},
    {"set_mempolicy", CDN_SC_DENY_QUIET},     {"get_mempolicy", CDN_SC_DENY_QUIET},
    {"migrate_pages", CDN_SC_DENY_QUIET},     {"move_pages", CDN_SC_DENY_QUIET},
    {"nfsservctl", CDN_SC_DENY_QUIET},        {"memfd_secret", CDN_SC_DENY_QUIET},
    {"sethostname", CDN_SC_DENY_QUIET},       {"setdomainname", CDN_SC_DENY_QUIET},
    {"clone3", CDN_SC_DENY_QUIET}, /* ENOSYS in seccomp.c: its flags live in memory BPF cannot read */
};
const size_t cdn_seccomp_n_denied = sizeof cdn_seccomp_denied / sizeof cdn_seccomp_denied[0];
