/* The container tier's syscall policy, compiled once with libseccomp and
 * cached as raw BPF (see seccomp.c). Shared with the unit tests, which check
 * the lists, and with the monitor, which will route the "watched" denials to
 * its supervisor. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/error.h"

enum cdn_sc_kind {
    CDN_SC_DENY_WATCHED, /* an escape attempt: EPERM, and a violation once the monitor lands */
    CDN_SC_DENY_QUIET,   /* harmless or legacy: plain EPERM */
};

struct cdn_sc_denial {
    const char *name;
    enum cdn_sc_kind kind;
};

extern const char *const cdn_seccomp_allowed[];
extern const size_t cdn_seccomp_n_allowed;
extern const struct cdn_sc_denial cdn_seccomp_denied[];
extern const size_t cdn_seccomp_n_denied;

/* In the writes variant of the policy: allowed, but reported to the supervisor (user notification, answered
 * CONTINUE or, for a violation, EPERM): calls that write or replace a path,
 * for the monitor's "system-write" and protected-path records (the kernel
 * itself refuses them there: landlock, read-only binds). open and openat are
 * reported only with a write flag (O_WRONLY, O_RDWR, O_CREAT, O_TRUNC).
 * Whether a notification is one of these, not a watched denial: by number. */
extern const char *const cdn_seccomp_reported[];
extern const size_t cdn_seccomp_n_reported;
bool cdn_seccomp_is_reported(int nr);
/* inotify_add_watch, which (with the monitor) goes to the supervisor in every variant: it adds
 * the watch for the caller unless the path is a protected one (src/monitor/watch.h). */
bool cdn_seccomp_is_watch(int nr);
/* The compiled policy: two raw BPF programs back to back (the allowlist, then
 * the ioctl denials), ready for seccomp(SECCOMP_SET_MODE_FILTER). The cache
 * file holds the two u16 lengths followed by the instructions. */
struct cdn_seccomp_prog {
    uint16_t len[2]; /* instructions in each program */
    void *insns;     /* struct sock_filter[len[0] + len[1]], malloc'd */
};

/* Load the filter from the cache under cache_dir, compiling and storing it on
 * a miss (atomic rename, so concurrent runs are safe). Host-side, before clone. */
int cdn_seccomp_load_cached(const char *cache_dir, struct cdn_seccomp_prog *ret, struct cdn_error *err);
/* The same for a policy variant: with writes, the reported path writes (see
 * cdn_seccomp_reported) go to the supervisor; spec protect / watch_writes. */
int cdn_seccomp_load_variant(const char *cache_dir, bool writes, struct cdn_seccomp_prog *ret,
                             struct cdn_error *err);
/* Whether the cache under cache_dir holds this policy's BPF (the lean build,
 * which cannot compile, asks before it starts; see src/cli/cli.h). */
bool cdn_seccomp_cache_present(const char *cache_dir);
/* Compile with libseccomp into ret (used on a cache miss and by tests).
 * seccomp-compile.c; the lean build has a stub that fails with ENOPKG. */
int cdn_seccomp_compile(struct cdn_seccomp_prog *ret, struct cdn_error *err);
int cdn_seccomp_compile_variant(struct cdn_seccomp_prog *ret, bool writes, struct cdn_error *err);
/* Install in the calling thread; needs no_new_privs. Async-signal-safe
 * (pre-exec child). Returns the listener of the watched denials (a new fd,
 * CLOEXEC) for the supervisor, or -errno. */
int cdn_seccomp_install(const struct cdn_seccomp_prog *prog);
/* A further filter (an engine bundle's, sandbox.h seccomp_extra): insns is struct sock_filter[len];
 * len 0 installs nothing. The kernel runs every filter and the strictest answer wins; of equal ones,
 * the newest filter's: install this one before cdn_seccomp_install, with no_new_privs set or
 * CAP_SYS_ADMIN held. 0 or -errno. */
int cdn_seccomp_install_extra(const void *insns, uint16_t len);

/* The supervisor's side: one pending notification from listener, answered
 * EPERM; *ev says what was attempted (pid in the caller's pid namespace view
 * of the supervisor). -ENOENT if the caller went away first. */
struct cdn_seccomp_event {
    uint64_t id;
    int pid;
    int nr;
    uint32_t arch;
    uint64_t args[6];
};
int cdn_seccomp_notify_eperm(int listener, struct cdn_seccomp_event *ev);
/* The same in two steps, for a supervisor that may kill the caller before it
 * gets its answer (on_violation kill): the caller never runs on. Between the
 * two the caller waits in the call: what the supervisor wants to know of it
 * (cdn_read_cmdline) is read then, and only when it will be used — a
 * sandbox decides how many notifications it makes. */
int cdn_seccomp_notify_recv(int listener, struct cdn_seccomp_event *ev);
int cdn_seccomp_notify_deny(int listener, const struct cdn_seccomp_event *ev);
/* Answer a reported call (cdn_seccomp_is_reported): let it run; the kernel decides. */
int cdn_seccomp_notify_continue(int listener, const struct cdn_seccomp_event *ev);
void cdn_seccomp_prog_free(struct cdn_seccomp_prog *p);
/* Whether the watched denials go to the supervisor (the default) or stay a
 * plain EPERM in the filter: CORDON_MONITOR=off, for measuring what the
 * monitor costs (bench/run-monitor); no violations, no kill then. */
bool cdn_seccomp_monitor_enabled(void);
/* A digest of the policy tables: changes whenever the policy does (names the cache file). */
uint64_t cdn_seccomp_policy_hash(void);
