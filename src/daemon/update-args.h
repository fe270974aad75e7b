/* The body of PATCH /v1/sandboxes/{id} (docs/cordond.md): a new lifetime, idle timeout, labels,
 * limits, violation policy. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/spec.h"
#include "shared/error.h"
#include "shared/strv.h"

struct update_args {
    bool life, idle, labels, on_violation, protect; /* which of them the body sets */
    uint64_t life_ms, idle_ms;                      /* from now; 0: none */
    struct cdn_strv merged_labels; /* with labels: the sandbox's labels once the patch is merged */
    unsigned limits;               /* CDN_CGROUP_SET_* bits of what "limits" sets … */
    struct cdn_limits new_limits;  /* … in the sandbox's limits (the others as they are) */
    enum cdn_on_violation policy;
    struct cdn_strv new_protect; /* with protect: the whole new list of patterns */
};

/* Parse body (len bytes; an object of timeout_s, idle_timeout_s, labels, limits {cpus, memory_mb,
 * pids}, on_violation, protect) against the sandbox's spec now. -EBADMSG: not a JSON object; -EINVAL/-ERANGE:
 * a field is wrong (e names it); -ENOMEM. Nothing is set in ret unless it returns 0. */
int cdn_update_args_parse(const char *body, size_t len, const struct cdn_spec *cur, struct update_args *ret,
                          struct cdn_error *e);
void cdn_update_args_free(struct update_args *a);
