/* Fuzz the multipart/form-data parser (src/daemon/multipart.c) of E2B's
 * POST /files: the input's first line is the Content-Type, the rest the body.
 * Every part it accepts lies within the body, its names terminated. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/multipart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size < 512 ? size : 512);
    if (!nl)
        return 0;
    char type[513];
    memcpy(type, data, (size_t) (nl - data));
    type[nl - data] = 0;
    char boundary[71];
    if (cdn_multipart_boundary(type, boundary) < 0)
        return 0;
    if (!boundary[0] || strlen(boundary) > 70)
        __builtin_trap();
    const uint8_t *body = nl + 1;
    size_t len = size - (size_t) (body - data), n = 99;
    struct cdn_multipart_part *parts = calloc(8, sizeof *parts);
    char msg[300];
    msg[0] = 0;
    int r = cdn_multipart_parse(body, len, boundary, parts, 8, &n, msg, sizeof msg);
    if (r < 0 && (!msg[0] || !memchr(msg, 0, sizeof msg)))
        __builtin_trap(); /* refused: with the reason */
    if (r == 0) {
        if (n > 8)
            __builtin_trap();
        for (size_t i = 0; i < n; i++)
            if (parts[i].off > len || parts[i].len > len - parts[i].off ||
                !memchr(parts[i].filename, 0, sizeof parts[i].filename) ||
                !memchr(parts[i].name, 0, sizeof parts[i].name))
                __builtin_trap();
    }
    free(parts);
    return 0;
}
