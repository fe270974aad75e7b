/* Content digests of OCI blobs and layers: "sha256:<64 hex>" or "sha512:<128 hex>"
 * (image-spec descriptor.md). Every blob a registry, an OCI layout or an archive hands
 * cordon is hostile until its digest matches: these are the only checks. Runs on the
 * host; libcrypto (OpenSSL) does the hashing. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "shared/error.h"
#include "shared/macro.h"

#define CDN_DIGEST_MAX 136 /* "sha512:" + 128 hex digits + NUL */

/* 0 if s is a digest cordon can verify (sha256 or sha512, lowercase hex of the right
 * length); -EINVAL naming field otherwise. */
int cdn_digest_check(const char *s, const char *field, struct cdn_error *err);
/* The hex part of a checked digest (after the colon). */
const char *cdn_digest_hex(const char *digest);

/* A running hash; algo is "sha256", "sha512" or a digest whose algorithm to use. */
struct cdn_hasher;
int cdn_hasher_new(const char *algo, struct cdn_hasher **ret);
void cdn_hasher_update(struct cdn_hasher *h, const void *buf, size_t n);
/* The digest of what was fed so far, as "algo:hex"; the hasher can go on after it. */
void cdn_hasher_digest(struct cdn_hasher *h, char out[CDN_DIGEST_MAX]);
uint64_t cdn_hasher_bytes(const struct cdn_hasher *h);
void cdn_hasher_free(struct cdn_hasher *h);
static inline void cdn_hasher_freep(struct cdn_hasher **h)
{
    if (*h)
        cdn_hasher_free(*h);
}
#define _cleanup_hasher_ _cleanup_(cdn_hasher_freep)

/* Hash fd from its current offset to its end. */
int cdn_digest_fd(int fd, const char *algo, char out[CDN_DIGEST_MAX], uint64_t *size, struct cdn_error *err);
/* 0 if fd's content (from offset 0) has digest `expected` and, when size is not UINT64_MAX,
 * that many bytes; -EBADMSG with both digests in the message if not. */
int cdn_digest_verify_fd(int fd, const char *expected, uint64_t size, struct cdn_error *err);
