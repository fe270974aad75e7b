/* Fuzz inputs as lines: each a malloc'd NUL-terminated string (an embedded
 * NUL cuts it short; a last "\n" ends the last one). Returns how many. */
#pragma once

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline size_t fuzz_split_lines(const uint8_t *data, size_t size, char **lines, size_t max)
{
    size_t n = 0;
    for (size_t off = 0; off < size && n < max;) {
        const uint8_t *nl = memchr(data + off, '\n', size - off);
        size_t len = nl ? (size_t) (nl - (data + off)) : size - off;
        char *s = malloc(len + 1);
        if (!s)
            break;
        memcpy(s, data + off, len);
        s[len] = 0;
        lines[n++] = s;
        off += len + 1;
    }
    return n;
}
