/* What runtime/container.c shares with runtime/exec.c: a container's recorded state, and the parts of
 * create that an exec repeats. Not for main.c. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "core/cgroup.h"
#include "runtime/bundle.h"
#include "shared/error.h"

/* What create recorded of a container, and what is true of it now. */
struct rt_state {
    json_t *doc; /* state.json */
    pid_t pid;
    unsigned long long starttime;
    int slot;
    bool alive;   /* init runs (not a zombie) and is the one create made */
    bool started; /* start ran */
    bool paused;  /* pause ran, resume did not */
};

void rt_state_free(struct rt_state *s);
/* The state of a container whose init runs: 0; else -errnum with err saying why (runc's words). */
int rt_load_alive(const char *root, const char *id, struct rt_state *ret, int errnum, const char *why,
                  struct cdn_error *err);
/* The container's cgroup: the engine's cgroupsPath, or its slot's. */
void rt_cgroup(const struct rt_state *s, struct cdn_cgroup *cg);
/* The bundle's rlimits as the container tier takes them (sandbox.h rlimits). */
void rt_bundle_rlimits(const struct cdn_bundle *b, struct rlimit ret[RLIM_NLIMITS]);
int rt_write_pid_file(const char *path, pid_t pid, struct cdn_error *err);
/* The startContainer hooks of s (exec.c): each inside the container, confined as an exec. */
int rt_start_hooks(const char *root, const char *id, const struct rt_state *s, struct cdn_error *err);
