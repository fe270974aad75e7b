/* Fuzz the call request body of cordond's API (src/daemon/call-args.c):
 * JSON from any client that can reach the socket, made into a CALL frame. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"
#include "daemon/call-args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t out[CDN_FRAME_MAX];
    size_t n = 0;
    struct cdn_error e = {0};
    struct cdn_call_step st;
    int r = cdn_call_args_parse((const char *) data, size, out, sizeof out, &n, &st, true, &e);
    if (r == 0 && (n < CDN_CALL_FIXED || n > sizeof out || !st.request))
        abort(); /* a payload that does not fit its own frame, or a step with no request */
    if (r == 0)
        json_decref(st.request);
    return 0;
}
