/* cordon-init internals: the connection to the host (init.c), commands
 * (init-exec.c) and file operations (init-files.c). All of it runs in PID 1
 * of the sandbox, single-threaded, inside the sandbox's confinement. */
#pragma once

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "proto/fds.h"
#include "proto/frame.h"
#include "shared/user.h"

#define AGENT_FD CDN_FD_AGENT

/* Queue one frame for the host (init.c says how the queue is bounded). A
 * failed send closes the connection (the caller carries on; the main loop
 * decides what a lost host means). */
void cdn_agent_send(uint16_t type, uint32_t channel, const void *payload, uint32_t len);
/* ERROR frame "<what>: <strerror(errnum)>" on channel. */
void cdn_agent_error(uint32_t channel, int errnum, const char *what);

/* Commands. */
void cdn_exec_start(uint32_t channel, const uint8_t *p, size_t len);
void cdn_exec_stdin(uint32_t channel, uint16_t flags, const uint8_t *p, size_t len);
void cdn_exec_resize(uint32_t channel, const uint8_t *p, size_t len);
/* CONTROL bytes for a CDN_EXEC_CONTROL command's fd 3. */
void cdn_exec_control(uint32_t channel, const uint8_t *p, size_t len);
void cdn_exec_signal(uint32_t channel, int sig);
/* A signal from the host (init.c) to every command; held for a one-shot command (cordon run's) when
 * none runs yet. */
void cdn_exec_signal_all(int sig);
/* Reap every exited child; report the commands among them. */
void cdn_exec_reap(void);
/* A VM guest's first process (init-vm.c): cdn_vm_guest() tells, cdn_vm_setup() makes
 * fd 3 the agent's port (-1 if there is none), cdn_vm_poweroff() ends the guest. */
bool cdn_vm_guest(void);
int cdn_vm_setup(void);
void cdn_vm_poweroff(void);
/* IDENTITY (a guest restored from a snapshot): clock, entropy, machine-id, hostname. */
int cdn_vm_identity(const struct cdn_identity *id);
/* A guest restored from a memory checkpoint (CDN_FRAME_HOLD's CDN_HOLD_RESUME): the host's clock,
 * fresh randomness. 0 or -errno. */
/* Freeze (on) or thaw a guest's commands around a memory checkpoint (CDN_FRAME_HOLD). */
void cdn_vm_hold_commands(bool on);
int cdn_vm_resume(uint64_t time_ns, const uint8_t seed[CDN_IDENTITY_SEED], uint32_t ip, uint32_t gateway,
                  uint32_t resolver, uint8_t prefix);
/* The protected paths of IDENTITY (init-vm.c): read-only binds, guarded opens. cdn_vm_verifier()
 * lets every open through while a verifier step runs (on) and guards again after it (off). */
int cdn_vm_protect(const struct cdn_identity *id);
void cdn_vm_verifier(bool on);
/* Before a verifier step: whether every protected path is still the mount bound there (not moved
 * aside with a parent by something outside the guest's reach): 0, or -ESTALE with the first that
 * is not in moved. Always 0 where cdn_vm_protect() guards nothing (a container's init). */
int cdn_vm_protect_check(char *moved, size_t size);
/* PROTECT (the payload): the whole new list of patterns (init-vm-protect.c). 0, or -errno with err
 * set (EBUSY: a process holds a way past a new bind; nothing changed then). */
int cdn_vm_protect_change(const uint8_t *p, size_t len, struct cdn_error *err);
/* What cdn_vm_identity() was doing when it failed ("identity: the disk", …). */
const char *cdn_vm_failed_step(void);
/* Before a guest's first command or file operation: its image (the host's /usr over 9p). */
void cdn_vm_mount_image(void);
/* POLICY (a guest): how its commands are confined; cdn_vm_confines() once one came. In a command's
 * child, cdn_vm_confine_child() confines it and sends init the seccomp listener over sock. Init polls
 * the listeners (cdn_vm_poll_add/handle): each watched denial is a VIOLATION frame. */
int cdn_vm_policy(const uint8_t *p, size_t len);
bool cdn_vm_confines(void);
int cdn_vm_confine_child(int sock);
/* In a command's child (born in the guest's cgroup of commands): its rlimits, before cdn_vm_confine_child. */
int cdn_vm_set_rlimits(void);
/* The cgroup (a directory fd) a guest's commands are cloned into; -1 elsewhere. */
int cdn_vm_commands_cgroup(void);
/* QUIESCE in a guest: SIGKILL the cgroup of commands (false: there is none); whether it is empty. */
bool cdn_vm_kill_commands(void);
bool cdn_vm_commands_gone(void);
/* USAGE to the host: when the counters changed, or always (force: before a command's EXIT). */
void cdn_vm_usage_report(bool force);
void cdn_vm_add_listener(int fd);
void cdn_vm_poll_add(struct pollfd *pfd, size_t *n, size_t max);
void cdn_vm_poll_handle(const struct pollfd *pfd, size_t n);
/* A verifier step (init-verifier.c). In init, before its EXEC: refuse it (an ERROR on channel
 * already sent, -errno) if a protected path moved; else make its HOME unless the request has one.
 * In its child, once confined: HOME and PATH set (-CDN_VERIFIER_UNSAFE: refuse to run it).
 * cdn_verifier_cleanup(): once no process is left, the HOME goes with what the step left there. */
int cdn_verifier_prepare(const struct cdn_exec_req *r, uint32_t channel);
int cdn_verifier_child_env(const struct cdn_exec_req *r, const char *req_home);
void cdn_verifier_cleanup(void);
/* QUIESCE: kill everything but init; DONE on channel once all are reaped. */
void cdn_exec_quiesce(uint32_t channel);
/* Poll set: add the fds of running commands at pfd[*n…] (up to max; their
 * output only when output is true), and handle their events after poll. */
void cdn_exec_poll_add(struct pollfd *pfd, size_t *n, size_t max, bool output);
void cdn_exec_poll_handle(const struct pollfd *pfd, size_t n);
/* A new host connection: running commands keep running but are no longer
 * reported (their channels belonged to the old one). */
void cdn_exec_forget_channels(void);
/* Whether a command whose end ends the sandbox (CDN_EXEC_SHUTDOWN_ON_EXIT) has ended. */
bool cdn_exec_shutdown_due(void);
/* init's exit status once shutdown is due: the one-shot command's with CDN_EXEC_STATUS, else 0. */
int cdn_exec_shutdown_status(void);

/* Calls (the process tier's cordon-worker, worker-call.c; cordon-init has none: init-nocall.c).
 * cdn_call_start() takes a CALL frame; the poll hooks watch the interpreter that runs it;
 * cdn_call_timeout_ms() is how long poll may sleep before a call's deadline (-1: no call runs). */
void cdn_call_start(uint32_t channel, const uint8_t *p, size_t len);
void cdn_call_poll_add(struct pollfd *pfd, size_t *n, size_t max);
void cdn_call_poll_handle(const struct pollfd *pfd, size_t n);
int cdn_call_timeout_ms(void);
/* QUIESCE (before and after a verifier step): no call runs or waits past it; each ends in an error. */
void cdn_call_quiesce(void);
/* In a command's child, its environment set: what the worker adds (HOME, TMPDIR in its directory). */
void cdn_agent_exec_env(void);
/* The agent's main loop (init.c): cordon-init's main, and cordon-worker's once confined. */
int cdn_agent_main(void);
/* A command's user (init-user.c). cdn_init_caps_settle(): first thing in init. cdn_user_lookup():
 * resolve spec in the sandbox's files, in init (err names "user"). cdn_user_become(): in a command's
 * child, take u on (NULL: stay root) and clear every capability; -errno, and then it must not run. */
void cdn_init_caps_settle(void);
void cdn_user_guest(void); /* a VM guest's init, instead of cdn_init_caps_settle() */
int cdn_user_lookup(const char *spec, struct cdn_user *ret, struct cdn_error *err);
int cdn_user_become(const struct cdn_user *u);
/* A file operation as u (FILE frames with a user): init's file system ids and groups become u's and
 * no capability is effective while u is not root, until cdn_user_fs_leave() gives init its own back
 * (or ends init: it cannot go on as another). -EOPNOTSUPP where init cannot change users (the process
 * tier), -EPERM. */
int cdn_user_fs_enter(const struct cdn_user *u);
void cdn_user_fs_leave(void);

/* Whether the host's queue has room for more (a read's next chunk). */
bool cdn_agent_room(void);

/* File operations: a FILE frame, and the DATA frames of a write that follow it. */
void cdn_files_request(uint32_t channel, uint16_t flags, const uint8_t *p, size_t len);
void cdn_files_data(uint32_t channel, uint16_t flags, const uint8_t *p, size_t len);
/* WINDOW and CANCEL frames of a read or a write in progress. */
void cdn_files_window(uint32_t channel, const uint8_t *p, size_t len);
void cdn_files_cancel(uint32_t channel);
/* Reads in progress: whether one may send now, and the next chunk of each that may. */
bool cdn_files_pending(void);
void cdn_files_pump(void);
/* The connection ended: drop reads and writes in progress. */
void cdn_files_reset(void);
/* path opened and judged for op as the files API does (O_DIRECTORY in flags: it must be one), content
 * not wanted; on a refusal the ERROR (and VIOLATION) are sent and -errno returned. */
struct file_target;
int cdn_files_judge(uint32_t channel, const char *op, const char *path, int flags, struct file_target *ret);
/* Watches (init-watch.c): FILE WATCH starts one; the poll hooks read inotify; pending/pump send what
 * each has queued within its window; window/cancel take the host's frames (false: not a watch's). */
struct cdn_file_req;
void cdn_watch_start(uint32_t channel, const struct cdn_file_req *r, const struct cdn_user *u);
void cdn_watch_poll_add(struct pollfd *pfd, size_t *n, size_t max);
void cdn_watch_poll_handle(const struct pollfd *pfd, size_t n);
bool cdn_watch_pending(void);
void cdn_watch_pump(void);
bool cdn_watch_window(uint32_t channel, uint32_t more);
bool cdn_watch_cancel(uint32_t channel);
void cdn_watch_reset(void);

/* A connection to a port of the sandbox, relayed (init-tcp.c, frame TCP). data/window/cancel:
 * false when channel is not a relay's. */
void cdn_tcp_open(uint32_t channel, const uint8_t *p, size_t len);
bool cdn_tcp_data(uint32_t channel, const uint8_t *p, size_t len);
bool cdn_tcp_window(uint32_t channel, uint32_t more);
bool cdn_tcp_cancel(uint32_t channel);
void cdn_tcp_reset(void);
void cdn_tcp_poll_add(struct pollfd *pfd, size_t *n, size_t max);
void cdn_tcp_poll_handle(const struct pollfd *pfd, size_t n);

/* Where a path of the files API leads (init-resolve.c). The PROTECTED frame's mounts, or (a VM
 * guest) the mounts of its protected paths, as its init guards them. */
void cdn_files_protected(const uint8_t *p, size_t len);
void cdn_files_protected_set(const uint64_t *ids, uint32_t n);
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
int cdn_target_open(const char *path, int flags, struct file_target *ret);
void cdn_target_close(struct file_target *t);
/* Whether the API may use what t reached; content: its bytes, not only its metadata.
 * REFUSE_KERNEL_FS sets *ret_fs to the file system's name. */
enum refusal cdn_target_check(const struct file_target *t, bool content, const char **ret_fs);
/* A real open of the very file t holds (flags: O_RDONLY, O_WRONLY, …); -errno. */
int cdn_target_reopen(const struct file_target *t, int flags);
/* The path of what t reached, as the sandbox sees it (for messages). */
void cdn_target_where(const struct file_target *t, char *buf, size_t size);
