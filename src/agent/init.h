/* cordon-init internals: the connection to the host (init.c), commands
 * (init-exec.c) and file operations (init-files.c). All of it runs in PID 1
 * of the sandbox, single-threaded, inside the sandbox's confinement. */
#pragma once

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "frame.h"

#define AGENT_FD 3

/* Queue one frame for the host (init.c says how the queue is bounded). A
 * failed send closes the connection (the caller carries on; the main loop
 * decides what a lost host means). */
void agent_send(uint16_t type, uint32_t channel, const void *payload, uint32_t len);
/* ERROR frame "<what>: <strerror(errnum)>" on channel. */
void agent_error(uint32_t channel, int errnum, const char *what);

/* Commands. */
void exec_start(uint32_t channel, const uint8_t *p, size_t len);
void exec_stdin(uint32_t channel, const uint8_t *p, size_t len);
void exec_resize(uint32_t channel, const uint8_t *p, size_t len);
void exec_signal(uint32_t channel, int sig);
/* A signal from the host (init.c) to every command; held for a one-shot command (cordon run's) when
 * none runs yet. */
void exec_signal_all(int sig);
/* Reap every exited child; report the commands among them. */
void exec_reap(void);
/* A VM guest's first process (init-vm.c): vm_guest() tells, vm_setup() makes
 * fd 3 the agent's port (-1 if there is none), vm_poweroff() ends the guest. */
bool vm_guest(void);
int vm_setup(void);
void vm_poweroff(void);
/* IDENTITY (a guest restored from a snapshot): clock, entropy, machine-id, hostname. */
int vm_identity(const struct cdn_identity *id);
/* The protected paths of IDENTITY (init-vm.c): read-only binds, guarded opens. vm_verifier()
 * lets every open through while a verifier step runs (on) and guards again after it (off). */
int vm_protect(const struct cdn_identity *id);
void vm_verifier(bool on);
/* Before a verifier step: whether every protected path is still the mount bound there (not moved
 * aside with a parent by something outside the guest's reach): 0, or -ESTALE with the first that
 * is not in moved. Always 0 where vm_protect() guards nothing (a container's init). */
int vm_protect_check(char *moved, size_t size);
/* What vm_identity() was doing when it failed ("identity: the disk", …). */
const char *vm_failed_step(void);
/* Before a guest's first command or file operation: its image (the host's /usr over 9p). */
void vm_mount_image(void);
/* POLICY (a guest): how its commands are confined; vm_confines() once one came. In a command's
 * child, vm_confine_child() confines it and sends init the seccomp listener over sock. Init polls
 * the listeners (vm_poll_add/handle): each watched denial is a VIOLATION frame. */
int vm_policy(const uint8_t *p, size_t len);
bool vm_confines(void);
int vm_confine_child(int sock);
/* In a command's child (born in the guest's cgroup of commands): its rlimits, before vm_confine_child. */
int vm_set_rlimits(void);
/* The cgroup (a directory fd) a guest's commands are cloned into; -1 elsewhere. */
int vm_commands_cgroup(void);
/* QUIESCE in a guest: SIGKILL the cgroup of commands (false: there is none); whether it is empty. */
bool vm_kill_commands(void);
bool vm_commands_gone(void);
/* USAGE to the host: when the counters changed, or always (force: before a command's EXIT). */
void vm_usage_report(bool force);
void vm_add_listener(int fd);
void vm_poll_add(struct pollfd *pfd, size_t *n, size_t max);
void vm_poll_handle(const struct pollfd *pfd, size_t n);
/* A verifier step (init-verifier.c). In init, before its EXEC: refuse it (an ERROR on channel
 * already sent, -errno) if a protected path moved; else make its HOME unless the request has one.
 * In its child, once confined: HOME and PATH set (-CDN_VERIFIER_UNSAFE: refuse to run it).
 * verifier_cleanup(): once no process is left, the HOME goes with what the step left there. */
int verifier_prepare(const struct cdn_exec_req *r, uint32_t channel);
int verifier_child_env(const struct cdn_exec_req *r, const char *req_home);
void verifier_cleanup(void);
/* QUIESCE: kill everything but init; DONE on channel once all are reaped. */
void exec_quiesce(uint32_t channel);
/* Poll set: add the fds of running commands at pfd[*n…] (up to max; their
 * output only when output is true), and handle their events after poll. */
void exec_poll_add(struct pollfd *pfd, size_t *n, size_t max, bool output);
void exec_poll_handle(const struct pollfd *pfd, size_t n);
/* A new host connection: running commands keep running but are no longer
 * reported (their channels belonged to the old one). */
void exec_forget_channels(void);
/* Whether a command whose end ends the sandbox (CDN_EXEC_SHUTDOWN_ON_EXIT) has ended. */
bool exec_shutdown_due(void);

/* Calls (the process tier's cordon-worker, worker-call.c; cordon-init has none: init-nocall.c).
 * call_start() takes a CALL frame; the poll hooks watch the interpreter that runs it;
 * call_timeout_ms() is how long poll may sleep before a call's deadline (-1: no call runs). */
void call_start(uint32_t channel, const uint8_t *p, size_t len);
void call_poll_add(struct pollfd *pfd, size_t *n, size_t max);
void call_poll_handle(const struct pollfd *pfd, size_t n);
int call_timeout_ms(void);
/* QUIESCE (before and after a verifier step): no call runs or waits past it; each ends in an error. */
void call_quiesce(void);
/* In a command's child, its environment set: what the worker adds (HOME, TMPDIR in its directory). */
void agent_exec_env(void);
/* The agent's main loop (init.c): cordon-init's main, and cordon-worker's once confined. */
int agent_main(void);

/* Whether the host's queue has room for more (a read's next chunk). */
bool agent_room(void);

/* File operations: a FILE frame, and the DATA frames of a write that follow it. */
void files_request(uint32_t channel, uint16_t flags, const uint8_t *p, size_t len);
void files_data(uint32_t channel, uint16_t flags, const uint8_t *p, size_t len);
/* WINDOW and CANCEL frames of a read or a write in progress. */
void files_window(uint32_t channel, const uint8_t *p, size_t len);
void files_cancel(uint32_t channel);
/* Reads in progress: whether one may send now, and the next chunk of each that may. */
bool files_pending(void);
void files_pump(void);
/* The connection ended: drop reads and writes in progress. */
void files_reset(void);

/* Where a path of the files API leads (init-resolve.c). The PROTECTED frame's mounts, or (a VM
 * guest) the mount of a path its init bound read-only as a protected path. */
void files_protected(const uint8_t *p, size_t len);
int files_protect_mount(const char *path);
struct file_target {
    int fd;           /* O_PATH */
    bool direct;      /* reached without following a symlink */
    bool mnt_unknown; /* the kernel gave no mount id */
    uint64_t mnt_id;
    struct stat st;
};
enum refusal {
    REFUSE_NONE,
    REFUSE_PROTECTED, /* a protected path, reached through a symlink */
    REFUSE_KERNEL_FS, /* on proc, sysfs, …: only with content */
};
/* path (absolute) opened O_PATH beneath the root; flags: O_NOFOLLOW, O_DIRECTORY. -errno. */
int target_open(const char *path, int flags, struct file_target *ret);
void target_close(struct file_target *t);
/* Whether the API may use what t reached; content: its bytes, not only its metadata.
 * REFUSE_KERNEL_FS sets *ret_fs to the file system's name. */
enum refusal target_check(const struct file_target *t, bool content, const char **ret_fs);
/* A real open of the very file t holds (flags: O_RDONLY, O_WRONLY, …); -errno. */
int target_reopen(const struct file_target *t, int flags);
/* The path of what t reached, as the sandbox sees it (for messages). */
void target_where(const struct file_target *t, char *buf, size_t size);
