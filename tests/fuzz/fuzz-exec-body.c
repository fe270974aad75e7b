/* Fuzz the exec request body of cordond's API (src/daemon/exec-args.c):
 * JSON from any client that can reach the socket. */
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
    return 0;
}
