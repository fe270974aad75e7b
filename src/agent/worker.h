/* cordon-worker: the process tier's zygote and its workers (docs/process.md).
 *
 * The host (src/tiers/process/process.c) starts one zygote per runtime: a
 * cordon-worker that has loaded the runtime (a Python interpreter with the
 * common modules imported, or nothing for "shell") and waits on fd 3, a
 * SOCK_SEQPACKET socket, for spawn requests. Each request makes one worker:
 * a clone of the zygote born as the host's child (CLONE_PARENT), which
 * confines itself (cgroup, rlimits, landlock, no capabilities, its sandbox's
 * uid, no_new_privs, seccomp) and then is the sandbox's agent, speaking the
 * protocol of src/proto/frame.h on the socket it was given. */
#pragma once

#include <stdint.h>

#define CDN_WORKER_MAGIC 0x4b524f57u /* "WORK" */

enum cdn_worker_flags {
    CDN_WORKER_NET = 1u << 0,    /* network sockets allowed (network.mode open) */
    CDN_WORKER_WRITES = 1u << 1, /* the seccomp variant that reports path writes */
    CDN_WORKER_STDIO = 1u << 2,  /* a third fd comes: the worker's fds 0-2 */
};

/* One spawn request; SCM_RIGHTS carries the sandbox end of the agent socket,
 * the write end of the setup error pipe (a struct cdn_error on failure, EOF
 * once the worker is the agent) and, with CDN_WORKER_STDIO, its stdio. */
struct cdn_worker_req {
    uint32_t magic;
    uint32_t flags;
    uint32_t uid;        /* the sandbox's */
    int32_t host_pid;    /* the worker is born its child; it dies with it */
    uint64_t nofile;     /* RLIMIT_NOFILE */
    uint64_t disk_mb;    /* limits.disk_mb: RLIMIT_FSIZE just above it */
    char cgroup[64];     /* the cgroup's name (cdn_cgroup_init) */
    char dir[256];       /* the sandbox's directory: work/, tmp/, call/ beneath it */
    uint32_t n_mounts;   /* binds that follow the struct */
    uint32_t mounts_len; /* their bytes */
    uint32_t n_protect;  /* protected paths' patterns that follow them, each NUL-terminated */
    uint32_t protect_len;
};

/* After the struct, n_mounts binds (the spec's mounts, at or beneath /workspace): u8 readonly,
 * source\0, target\0 each; then n_protect patterns (the spec's protect). The whole message is at
 * most CDN_WORKER_MSG_MAX bytes. */
#define CDN_WORKER_MSG_MAX (128u << 10)

/* The answer: the worker's pid, or -errno. */
struct cdn_worker_reply {
    int32_t pid;
};
