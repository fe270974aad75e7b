/* Base64 (RFC 4648, standard alphabet, padded), for bytes in JSON bodies. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Encoded length of n bytes, without the NUL. */
size_t cdn_base64_len(size_t n);
/* Writes cdn_base64_len(n) characters and a NUL into out. */
void cdn_base64_encode(const uint8_t *in, size_t n, char *out);
/* Decodes s (len characters; padding required, no whitespace) into out,
 * which must hold len / 4 * 3 bytes. Returns the byte count or -EINVAL. */
long cdn_base64_decode(const char *s, size_t len, uint8_t *out);
