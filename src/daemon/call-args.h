/* The call request body (docs/process.md): code, language, input, timeout_s, fresh, step. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/error.h"

/* A call as a step of its sandbox's trajectory (docs/trajectories.md). */
struct cdn_call_step {
    bool has_step; /* "step": k given */
    uint64_t step;
    json_t *request; /* what the step records, every field with its value (owned; NULL: not asked) */
};

/* Parse body (len bytes) into a CALL frame's payload (proto/frame.h) in out (cap bytes), its
 * length in *ret_len; st (may be NULL): its step, and with want_request its request. -EBADMSG: not
 * JSON; -EINVAL/-ERANGE: a field is wrong (e names it); -E2BIG: too big for a frame; -ENOMEM. */
int cdn_call_args_parse(const char *body, size_t len, uint8_t *out, size_t cap, size_t *ret_len,
                        struct cdn_call_step *st, bool want_request, struct cdn_error *e);
