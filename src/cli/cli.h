/* The cordon CLI's commands, and the hand-over from the lean build to the full one.
 *
 * Where musl-gcc is available, the installed `cordon` is a static musl build
 * without jansson and libseccomp (CDN_LEAN): glibc's start-up probes the CPU
 * with cpuid, which traps to the hypervisor on nested VMs and costs ~1 ms per
 * exec, a quarter of a whole `cordon run`. Anything that needs either library
 * (--json, --spec, a seccomp policy not compiled yet, other commands) is
 * handed to the full glibc build, `cordon-full`, by exec with the same argv. */
#pragma once

#include <stdbool.h>

#ifndef CDN_LEAN
#define CDN_LEAN 0
#endif

int cdn_cli_run(int argc, char *const *argv);
int cdn_cli_image(int argc, char *const *argv);
/* cordon image pull|ls|inspect|rm|prune (image-oci.c, full build only); -1: not one of those. */
int cdn_cli_image_oci(int argc, char *const *argv);
/* cordon vm prepare (image.c, full build only) */
int cdn_cli_vm(int argc, char *const *argv);
/* Client commands (client.c, full build only: libcordon). */
int cdn_cli_create(int argc, char *const *argv);
int cdn_cli_exec(int argc, char *const *argv);
int cdn_cli_kill(int argc, char *const *argv);
int cdn_cli_update(int argc, char *const *argv);
int cdn_cli_stats(int argc, char *const *argv);
int cdn_cli_ls(int argc, char *const *argv);
int cdn_cli_inspect(int argc, char *const *argv);
int cdn_cli_events(int argc, char *const *argv);
int cdn_cli_trajectory(int argc, char *const *argv);
int cdn_cli_checkpoint(int argc, char *const *argv);
int cdn_cli_fork(int argc, char *const *argv);
int cdn_cli_rollback(int argc, char *const *argv);
/* cordon cp, mv, chmod (cp.c, full build only). */
int cdn_cli_cp(int argc, char *const *argv);
int cdn_cli_mv(int argc, char *const *argv);
int cdn_cli_chmod(int argc, char *const *argv);
/* cordon ps, logs, signal, wait: background processes (proc.c, full build only). */
int cdn_cli_ps(int argc, char *const *argv);
int cdn_cli_logs(int argc, char *const *argv);
int cdn_cli_signal(int argc, char *const *argv);
int cdn_cli_wait(int argc, char *const *argv);
/* cordon exec -i / -t (attach.c, full build only): cmd as a background process we talk to; body holds
 * the exec's other fields (env, cwd, user, timeout_s). Returns its exit status, or 125. */
struct json_t;
int cdn_cli_exec_attached(const char *id, const char *const *cmd, struct json_t *body, bool in, bool tty);
/* cordon port-forward: a local port to a sandbox's (portfwd.c, full build only). */
int cdn_cli_port_forward(int argc, char *const *argv);
/* cordon session: shell sessions (session.c, full build only). */
int cdn_cli_session(int argc, char *const *argv);
/* cordon selftest: the escape probes against this host (selftest.c, full build only). */
int cdn_cli_selftest(int argc, char *const *argv);

/* Replace this process with cordon-full, same argv and environment. Returns
 * only on failure, after printing why, with the exit status to use (125). */
int cdn_cli_exec_full(void);
