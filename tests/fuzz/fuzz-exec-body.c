/* Fuzz the exec request body of cordond's API (src/daemon/exec-args.c), and
 * the bodies of a session's open and run that share its parser: JSON from any
 * client that can reach the socket. */
#include <stddef.h>
#include <stdint.h>

#include "daemon/exec-args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct exec_args a = {0};
    struct cdn_error e = {0};
    (void) cdn_exec_args_parse((const char *) data, size, "/workspace", &a, &e);
    cdn_exec_args_free(&a);
    for (int run = 0; run < 2; run++) {
        struct exec_args s = {0};
        (void) cdn_session_args_parse((const char *) data, size, "/workspace", run, &s, &e);
        cdn_exec_args_free(&s);
    }
    return 0;
}
