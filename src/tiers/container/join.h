/* A process started inside a running container-tier sandbox from the host, beside its init rather
 * than by it (join.c): what `cordon-runtime exec` needs, whose caller (conmon, containerd's shim)
 * must be the process's reaper and read its exit status itself. */
#pragma once

#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "core/spec.h"
#include "shared/error.h"

struct cdn_container_join {
    pid_t init_pid;              /* the sandbox's init: its namespaces are joined */
    const char *cgroup_name;     /* the sandbox's cgroup (cdn_cgroup name, "slot-N") */
    const struct cdn_spec *spec; /* what confines it: Landlock (writable_system, mounts, workdir), rlimits */
    char *const *argv;           /* argv[0] searched in envp's PATH */
    char *const *envp;
    const char *cwd;
    uint32_t uid, gid; /* the sandbox's ids */
    int tty_fd;        /* >= 0: a terminal's slave, its stdio and the controlling terminal of its session */
    const struct rlimit *rlimits; /* RLIM_NLIMITS, lowering cordon's (sandbox.h rlimits), or NULL */
    const void *seccomp_extra;    /* a filter stacked on cordon's (sandbox.h seccomp_extra), or NULL */
    uint16_t seccomp_extra_len;
    /* Set: the process hands its seccomp listener to a supervisor before it execs (cordon-runtime to
     * cordond): hand(pid, fd, arg) is called with its pid and the number the listener has in it,
     * which the supervisor takes (pidfd_getfd) meanwhile; then the process closes it and execs. A
     * negative return fails the join. NULL: the listener goes at exec. */
    int (*hand)(pid_t pid, int fd, void *arg, struct cdn_error *err);
    void *hand_arg;
};

/* Run j->argv in the sandbox: in its cgroup and all its namespaces, as j->uid:gid, confined as the
 * sandbox's commands are (no capability, no_new_privs, cordon's seccomp filter, its Landlock
 * ruleset, its rlimits), with the caller's stdio. Returns the process's pid (in the caller's pid
 * namespace) once it has exec'd. It is a grandchild whose parent has exited: the nearest subreaper
 * above the caller (or the caller, if it is one) reaps it. -errno with err on failure (-ENOENT: the
 * program is not there; -EACCES: it cannot be executed). Runs as root on the host. */
int cdn_container_join(const struct cdn_container_join *j, struct cdn_error *err);
