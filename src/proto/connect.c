/* Connect envelopes (connect.h). */
#include "connect.h"

#include <errno.h>

int cdn_connect_decode(const uint8_t *buf, size_t n, struct cdn_connect_envelope *out)
{
    if (n < CDN_CONNECT_HEADER)
        return 0;
    uint8_t flags = buf[0];
    uint32_t len = (uint32_t) buf[1] << 24 | (uint32_t) buf[2] << 16 | (uint32_t) buf[3] << 8 | buf[4];
    if (flags & CDN_CONNECT_COMPRESSED)
        return -ENOTSUP;
    if (flags & ~CDN_CONNECT_END_STREAM)
        return -EBADMSG;
    if (len > CDN_CONNECT_MAX)
        return -E2BIG;
    if (n - CDN_CONNECT_HEADER < len)
        return 0;
    *out = (struct cdn_connect_envelope){.flags = flags, .data = buf + CDN_CONNECT_HEADER, .len = len};
    return (int) (CDN_CONNECT_HEADER + len);
}

void cdn_connect_header(uint8_t out[CDN_CONNECT_HEADER], uint8_t flags, uint32_t len)
{
    out[0] = flags;
    out[1] = (uint8_t) (len >> 24);
    out[2] = (uint8_t) (len >> 16);
    out[3] = (uint8_t) (len >> 8);
    out[4] = (uint8_t) len;
}
