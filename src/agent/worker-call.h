/* cordon-worker's runtime and calls (docs/process.md): the interpreter (worker-python.c), the
 * template that executors are cloned from (worker-template.c), and the agent's side of calls
 * (worker-call.c). */
#pragma once

#include <linux/filter.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/error.h"

/* The zygote: start the interpreter, import the common modules and the call server's code. */
int cdn_worker_python_init(struct cdn_error *err);
/* Around every clone of a process that may run Python later (the interpreter's fork hooks). */
void cdn_worker_python_before_fork(void);
void cdn_worker_python_after_fork(void);
void cdn_worker_python_after_fork_parent(void);
/* An executor, confined: the call server on fd (fresh: one call, then it exits). Never returns. */
_Noreturn void cdn_worker_python_serve(int fd, bool fresh);

/* A worker, once confined and before it reads its first frame: its directory and uid (the
 * template runs as uid + 1, worker-template.c), whether it has an interpreter. With one, the
 * template is cloned here. */
void cdn_worker_call_setup(const char *dir, uint32_t uid, bool python);

/* The template (worker-template.c). The agent holds its pid (its child, never reaped by
 * cdn_exec_reap: no exit signal) and ctl, its end of a SOCK_SEQPACKET socket. */
struct worker_template {
    pid_t pid; /* 0: none (calls fail) */
    int ctl;
};
/* In the agent: compile the executors' seccomp filter, then clone the template. */
int cdn_worker_template_start(uint32_t uid, struct worker_template *ret, struct cdn_error *err);
/* In the agent: an executor for one call (fresh) or many, whose end of its socket is sock and
 * whose directory (cwd, HOME, TMPDIR; it writes only beneath it) is dir. The template clones it
 * as the agent's child, without an exit signal: the caller reaps it (__WALL). Waits up to
 * timeout_ms for the template. Returns its pid; -EPIPE when the template is gone. */
int cdn_worker_template_spawn(struct worker_template *t, const char *dir, int sock, bool fresh,
                              int timeout_ms);
/* The template is gone or must go: closes ctl and reaps it once it has ended. */
void cdn_worker_template_stop(struct worker_template *t);

/* A raw BPF program returning EPERM for the given syscalls (worker.c, libseccomp); a libseccomp
 * filter as raw BPF, to be installed in a clone without compiling there. */
int cdn_worker_filter(const int *nrs, size_t n, struct sock_fprog *ret);
int cdn_worker_export_bpf(scmp_filter_ctx ctx, struct sock_fprog *ret);
