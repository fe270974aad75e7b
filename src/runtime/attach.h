/* cordon-runtime's containers under cordond (docs/runtime.md). When cordond answers on its socket
 * ($CORDON_SOCKET, else /run/cordon/cordond.sock), create attaches the container to it
 * (POST /v1/sandboxes/attach): cordond supervises it as one of its own sandboxes (its seccomp
 * monitor, protected paths, egress allowlist, violations, events, audit log and /metrics), labelled
 * oci.container-id, while its init stays the engine's child. delete lets it go. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "core/spec.h"
#include "shared/error.h"

#define CDN_RT_BOX_ID_MAX 64

/* Whether cordond listens on its socket (a connect: no request). */
bool cdn_rt_cordond_present(void);

struct cdn_rt_attach {
    const char *container_id;
    const struct cdn_spec *spec;
    pid_t init_pid;
    unsigned long long init_start;
    int slot;
    const char *cgroup;           /* the engine's, or NULL */
    const char *socket;           /* where init listens */
    uint32_t ids_from, ids_count; /* the engine's id range (sandbox.h root_ids_from), or 0 */
};
/* Attach; the sandbox's id in cordond in ret_id. 0, or -errno with err (cordond's error, its field). */
int cdn_rt_attach(const struct cdn_rt_attach *a, char ret_id[CDN_RT_BOX_ID_MAX], struct cdn_error *err);
/* Start the container's process (payload: its EXEC, CDN_EXEC_STATUS) through cordond, which holds the
 * only connection init keeps: 0 once it runs, or -errno with err as runc words it. */
int cdn_rt_attached_start(const char *id, const void *payload, size_t len, struct cdn_error *err);
/* An exec's process pid holds its seccomp listener at fd, waiting: cordond takes it (so that its watched
 * calls are counted as init's are). 0, or -errno with err. */
int cdn_rt_hand_listener(const char *id, pid_t pid, int fd, struct cdn_error *err);
/* Let cordond end and forget the sandbox id (gone already: nothing). */
void cdn_rt_detach(const char *id);
