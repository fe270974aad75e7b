/* The call request body (docs/process.md): code, language, input, timeout_s, fresh. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "shared/error.h"

/* Parse body (len bytes) into a CALL frame's payload (proto/frame.h) in out (cap bytes), its
 * length in *ret_len. -EBADMSG: not JSON; -EINVAL/-ERANGE: a field is wrong (e names it);
 * -E2BIG: too big for a frame; -ENOMEM. */
int cdn_call_args_parse(const char *body, size_t len, uint8_t *out, size_t cap, size_t *ret_len,
                        struct cdn_error *e);
