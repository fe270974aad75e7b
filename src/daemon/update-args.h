/* The body of PATCH /v1/sandboxes/{id} (docs/cordond.md): a new lifetime, idle timeout, labels. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/error.h"
#include "shared/strv.h"

struct update_args {
    bool life, idle, labels;       /* which of them the body sets */
    uint64_t life_ms, idle_ms;     /* from now; 0: none */
    struct cdn_strv merged_labels; /* with labels: the sandbox's labels once the patch is merged */
};

/* Parse body (len bytes; an object of timeout_s, idle_timeout_s, labels) against the sandbox's
 * labels now ("K=V" each). -EBADMSG: not a JSON object; -EINVAL/-ERANGE: a field is wrong (e names
 * it); -ENOMEM. Nothing is set in ret unless it returns 0. */
int cdn_update_args_parse(const char *body, size_t len, const struct cdn_strv *labels,
                          struct update_args *ret, struct cdn_error *e);
void cdn_update_args_free(struct update_args *a);
