/* cordon-runtime's containers: an OCI bundle run as a cordon container (tier "container"), kept
 * between the engine's separate calls of create, start, state, kill and delete.
 *
 * Runs as root on the host, called by the engine (conmon, containerd's shim), which is trusted; what
 * is inside the container is not. Each container has a directory <root>/<id> (0700, root's): its
 * state.json, written by create, and "s", the listening socket its cordon-init takes connections on
 * (the sandbox is persistent: init holds its slot lock and outlives the create that made it). Its
 * init is the create's child until create exits, then the engine's (a subreaper): the engine reaps
 * it and reads its exit status, which is its command's (CDN_EXEC_STATUS).
 *
 * Every function returns 0, or -errno with err saying why (runc's wording where the engines match
 * it: "does not exist", "container not running", "is not stopped"). */
#pragma once

#include <stdbool.h>

#include "shared/strv.h"

#include "runtime/bundle.h"
#include "shared/error.h"

/* Where what does not fail a call is said (a poststart or poststop hook that failed): main.c's log. */
extern void (*cdn_rt_warn)(const char *msg);

struct cdn_rt_create_opts {
    const char *bundle_dir;     /* absolute */
    const char *pid_file;       /* NULL: none */
    const char *console_socket; /* process.terminal: where its terminal's master goes (console.h) */
};

/* The container id under root from the parsed bundle b (its spec is adjusted and used): made, its
 * init running and waiting for start. The directory is left only when the whole create succeeded. */
int cdn_rt_create(const char *root, const char *id, struct cdn_bundle *b, const struct cdn_rt_create_opts *o,
                  struct cdn_error *err);
/* Run the bundle's process: returns once it runs (or init said why it cannot start). */
int cdn_rt_start(const char *root, const char *id, struct cdn_error *err);
/* The OCI state document of the container (malloc'd JSON text). */
int cdn_rt_state(const char *root, const char *id, char **ret_json, struct cdn_error *err);
/* Signal sig to the container's init (which passes the catchable ones to its command; SIGKILL ends
 * it), or with all to every process of its cgroup. */
int cdn_rt_kill(const char *root, const char *id, int sig, bool all, struct cdn_error *err);
/* Remove a stopped container (force: kill a running one first): its processes, cgroup and
 * directory. */
int cdn_rt_delete(const char *root, const char *id, bool force, struct cdn_error *err);
struct cdn_rt_exec_opts {
    const char *process_path;   /* --process: an OCI process object (JSON file); NULL: the fields below */
    char *const *args;          /* without --process: the command (NULL-terminated) */
    const char *cwd;            /* NULL: the bundle's */
    const struct cdn_strv *env; /* added to the bundle's */
    const char *user;           /* "uid[:gid]"; NULL: the bundle's */
    bool detach;                /* return once it runs (else wait for it, its status in *ret_status) */
    bool tty;                   /* a terminal, sent to console_socket (also when --process asks one) */
    const char *console_socket;
    const char *pid_file;
};

/* Run another process in the running container, confined as its first (tiers/container/join.h):
 * it is the caller's to reap (conmon's, the shim's). Returns 0 with *ret_status its exit status
 * (128+N for a signal) when not detached. */
int cdn_rt_exec(const char *root, const char *id, const struct cdn_rt_exec_opts *o, int *ret_status,
                struct cdn_error *err);
/* Freeze (paused) or thaw every process of the container (its cgroup's freezer). */
int cdn_rt_pause(const char *root, const char *id, bool paused, struct cdn_error *err);
/* The pids of the container's processes (its cgroup's), as a JSON array (malloc'd text). */
int cdn_rt_ps(const char *root, const char *id, char **ret_json, struct cdn_error *err);
/* New limits from an OCI linux.resources object (memory.limit, pids.limit, cpu.quota/period). */
int cdn_rt_update(const char *root, const char *id, const char *resources_json, struct cdn_error *err);
/* Whether <root>/<id> exists (a container, in any state). */
bool cdn_rt_exists(const char *root, const char *id);
