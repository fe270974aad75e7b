/* Fuzz target: a Connect stream as a client sends it (proto/connect.h): envelopes back to back,
 * each payload parsed as the JSON it must be. */
#include "proto/connect.h"

#include <jansson.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cdn_connect_envelope e;
    size_t off = 0;
    for (int n; off < size && (n = cdn_connect_decode(data + off, size - off, &e)) > 0; off += (size_t) n) {
        if (e.data != data + off + CDN_CONNECT_HEADER || (size_t) n != CDN_CONNECT_HEADER + e.len ||
            (e.flags & ~CDN_CONNECT_END_STREAM))
            __builtin_trap();
        uint8_t h[CDN_CONNECT_HEADER];
        cdn_connect_header(h, e.flags, e.len);
        if (memcmp(h, data + off, CDN_CONNECT_HEADER) != 0)
            __builtin_trap();
        json_error_t err;
        json_t *j = json_loadb((const char *) e.data, e.len, JSON_REJECT_DUPLICATES, &err);
        json_decref(j);
    }
    return 0;
}
