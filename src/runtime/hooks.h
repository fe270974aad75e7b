/* An engine's hooks (OCI runtime spec "hooks", docs/runtime.md). create keeps them in state.json;
 * prestart and createRuntime run at create, poststart after start, poststop after delete, each in the
 * runtime's namespaces (the host's, as root: the engine's configuration is trusted). startContainer
 * runs inside the container as its commands do (container.c). createContainer is refused by the
 * bundle parser: it would run a host program as host root in the container's namespaces. */
#pragma once

#include <jansson.h>

#include "runtime/bundle.h"
#include "shared/error.h"

/* b's hooks as state.json keeps them: {"<kind>": [{"path", "args", "env", "timeout"}]}. NULL: none
 * or out of memory. */
json_t *cdn_rt_hooks_json(const struct cdn_bundle *b);

/* Run the hooks of kind ("poststart"…) of hooks (cdn_rt_hooks_json) in order, each with state (the
 * container's OCI state, JSON) on its stdin and cordon-runtime's stdout and stderr. The first that
 * fails (exits non-zero, is killed, runs past its timeout: then killed) ends the run: -errno with err
 * naming hooks.<kind>[i]. */
int cdn_rt_hooks_run(const json_t *hooks, const char *kind, const char *state, struct cdn_error *err);

/* Wait for a hook's process pid (the caller's child) at most timeout seconds (0: no bound), killing
 * it past that. 0 if it exited 0; else -errno with err naming field and how it ended. */
int cdn_rt_wait_hook(pid_t pid, int timeout, const char *field, struct cdn_error *err);

/* The container's OCI state as hooks read it. NULL: out of memory. */
char *cdn_rt_hook_state(const char *id, const char *status, pid_t pid, const json_t *doc);
