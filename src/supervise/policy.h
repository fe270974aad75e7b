/* The violation policy: what counts, and how a supervisor answers the caller it stopped on an
 * attempt that was a violation. Pure and libc-only: cordond and `cordon run` (session.h) and a
 * VM guest's init (src/agent/init-vm.c, a separate static binary) decide with the same rule. */
#pragma once

#include <stdbool.h>

#include "core/spec.h"

/* A violation kind: what a sandbox did (docs/events.md, "violations"); the order is the counters' and the
 * names'. (frame.h has the VIOLATION frame's own kinds.) */
enum cdn_vk {
    CDN_VK_EGRESS,       /* a refused connection or name (src/net/) */
    CDN_VK_SYSCALL,      /* a watched syscall (seccomp user notification) */
    CDN_VK_OOM,          /* an OOM kill in its cgroup */
    CDN_VK_PIDS,         /* a hit of its pids limit */
    CDN_VK_DISK,         /* its writable layer full */
    CDN_VK_PROTECT,      /* an open, watch or write of a protected path */
    CDN_VK_KERNEL,       /* an open of a masked kernel file */
    CDN_VK_SYSTEM_WRITE, /* a write, rename, link… of a path beneath /usr, /bin, /etc… */
    _CDN_VK_MAX
};

static inline const char *cdn_vk_name(enum cdn_vk k)
{
    static const char *const names[_CDN_VK_MAX] = {"egress", "syscall", "oom",    "pids",
                                                   "disk",   "protect", "kernel", "system_write"};
    return (unsigned) k < _CDN_VK_MAX ? names[k] : "?";
}

/* How the attempt reached the supervisor. */
enum cdn_attempt {
    CDN_ATTEMPT_CALL, /* a call the policy refuses: a watched syscall, an inotify watch on a protected path */
    CDN_ATTEMPT_WRITE, /* a reported write (seccomp-policy.h): the kernel refuses it on its own */
    CDN_ATTEMPT_OPEN,  /* an open of a marked mount (fanotify): refused in every mode, held when ending */
};

enum cdn_answer {
    CDN_ANSWER_DENY,     /* EPERM */
    CDN_ANSWER_CONTINUE, /* the call goes on; the kernel decides */
    CDN_ANSWER_HOLD,     /* no answer: the caller waits in the call until the kill takes it */
};

/* The answer to a violating attempt under mode (spec on_violation). ending: the sandbox is being
 * killed for it (a host: its kill went out; a guest: kill mode, which its host carries out on the
 * VIOLATION frame). A caller held then never runs on after its attempt, not even for the moment
 * the kill takes; an open held is answered (refused) only once its opener is gone, before its
 * fanotify group closes (session.h cdn_session_file_open). `log` lets a reported write go to the
 * kernel, which refuses it itself; a refused call stays refused. */
static inline enum cdn_answer cdn_violation_answer(enum cdn_on_violation mode, enum cdn_attempt a,
                                                   bool ending)
{
    if (ending)
        return CDN_ANSWER_HOLD;
    if (a == CDN_ATTEMPT_WRITE && mode == CDN_VIOLATION_LOG)
        return CDN_ANSWER_CONTINUE;
    return CDN_ANSWER_DENY;
}
