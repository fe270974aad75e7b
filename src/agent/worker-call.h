/* cordon-worker's runtime and calls (worker-call.c). */
#pragma once

#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/error.h"

/* The zygote: start the interpreter, import the common modules and the call server's code. */
int worker_python_init(struct cdn_error *err);
/* Around the zygote's clone of a worker (the interpreter's fork hooks). */
void worker_python_before_fork(void);
void worker_python_after_fork(void);
void worker_python_after_fork_parent(void);
/* A worker, once confined: its directory, for the interpreter that runs its calls. */
void worker_call_setup(const char *dir, bool python);
/* A raw BPF program returning EPERM for the given syscalls (worker.c, libseccomp). */
int cdn_worker_filter(const int *nrs, size_t n, struct sock_fprog *ret);
