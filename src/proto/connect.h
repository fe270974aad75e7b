/* The Connect protocol's envelopes (its streaming RPCs over HTTP/1.1, as the
 * E2B SDK speaks them to a sandbox's daemon): each message of a stream is
 *   u8 flags | u32 length, big-endian | payload[length]
 * and a stream ends with one envelope flagged END_STREAM whose payload is a
 * JSON object (empty, or {"error": {"code", "message"}}). Bytes from a client
 * are hostile: decoding is bounded, and a compressed envelope is refused (no
 * compression is offered). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define CDN_CONNECT_COMPRESSED 0x01u
#define CDN_CONNECT_END_STREAM 0x02u
#define CDN_CONNECT_HEADER     5u
#define CDN_CONNECT_MAX        (4u << 20) /* payload bytes of one envelope */

struct cdn_connect_envelope {
    uint8_t flags;
    const uint8_t *data; /* into the decoded buffer */
    uint32_t len;
};

/* The envelope at the start of buf[0..n): its whole size (> 0) with *out filled, 0 when buf holds
 * only part of it, -EBADMSG for flags other than END_STREAM, -ENOTSUP for a compressed one,
 * -E2BIG past CDN_CONNECT_MAX. */
int cdn_connect_decode(const uint8_t *buf, size_t n, struct cdn_connect_envelope *out);
/* The 5 bytes that precede a payload of len bytes. */
void cdn_connect_header(uint8_t out[CDN_CONNECT_HEADER], uint8_t flags, uint32_t len);
