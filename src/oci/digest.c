/* Digests of OCI content (digest.h). Runs on the host over untrusted bytes: nothing
 * here parses them, it only hashes. */
#include "oci/digest.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct cdn_hasher {
    EVP_MD_CTX *ctx;
    char algo[8];
    uint64_t bytes;
};

static const EVP_MD *md_of(const char *algo, size_t *hexlen)
{
    if (strncmp(algo, "sha256", 6) == 0 && (algo[6] == '\0' || algo[6] == ':')) {
        *hexlen = 64;
        return EVP_sha256();
    }
    if (strncmp(algo, "sha512", 6) == 0 && (algo[6] == '\0' || algo[6] == ':')) {
        *hexlen = 128;
        return EVP_sha512();
    }
    return NULL;
}

int cdn_digest_check(const char *s, const char *field, struct cdn_error *err)
{
    size_t hexlen;
    if (!s || !md_of(s, &hexlen) || s[6] != ':')
        return cdn_error_field(err, EINVAL, field, "%s: not a sha256 or sha512 digest", field);
    const char *hex = s + 7;
    if (strlen(hex) != hexlen || strspn(hex, "0123456789abcdef") != hexlen)
        return cdn_error_field(err, EINVAL, field, "%s: a %.6s digest has %zu lowercase hex digits", field, s,
                               hexlen);
    return 0;
}

const char *cdn_digest_hex(const char *digest)
{
    const char *c = strchr(digest, ':');
    return c ? c + 1 : digest;
}

int cdn_hasher_new(const char *algo, struct cdn_hasher **ret)
{
    size_t hexlen;
    const EVP_MD *md = md_of(algo, &hexlen);
    if (!md)
        return -EINVAL;
    struct cdn_hasher *h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || EVP_DigestInit_ex(h->ctx, md, NULL) != 1) {
        cdn_hasher_free(h);
        return -ENOMEM;
    }
    memcpy(h->algo, algo, 6);
    *ret = h;
    return 0;
}

void cdn_hasher_update(struct cdn_hasher *h, const void *buf, size_t n)
{
    EVP_DigestUpdate(h->ctx, buf, n);
    h->bytes += n;
}

void cdn_hasher_digest(struct cdn_hasher *h, char out[CDN_DIGEST_MAX])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    EVP_MD_CTX *copy = EVP_MD_CTX_new();
    if (!copy || EVP_MD_CTX_copy_ex(copy, h->ctx) != 1 || EVP_DigestFinal_ex(copy, md, &n) != 1)
        n = 0; /* out of memory: an empty digest matches nothing */
    EVP_MD_CTX_free(copy);
    int off = snprintf(out, CDN_DIGEST_MAX, "%s:", h->algo);
    for (unsigned i = 0; i < n && off + 2 < CDN_DIGEST_MAX; i++)
        off += snprintf(out + off, (size_t) (CDN_DIGEST_MAX - off), "%02x", md[i]);
}

uint64_t cdn_hasher_bytes(const struct cdn_hasher *h)
{
    return h->bytes;
}

void cdn_hasher_free(struct cdn_hasher *h)
{
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

int cdn_digest_fd(int fd, const char *algo, char out[CDN_DIGEST_MAX], uint64_t *size, struct cdn_error *err)
{
    _cleanup_hasher_ struct cdn_hasher *h = NULL;
    if (cdn_hasher_new(algo, &h) < 0)
        return cdn_error_set(err, EINVAL, "%s: not a digest algorithm cordon knows", algo);
    char buf[65536];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return cdn_error_set(err, errno, "reading a blob to hash it: %m");
        if (n == 0)
            break;
        cdn_hasher_update(h, buf, (size_t) n);
    }
    cdn_hasher_digest(h, out);
    if (size)
        *size = h->bytes;
    return 0;
}

int cdn_digest_verify_fd(int fd, const char *expected, uint64_t size, struct cdn_error *err)
{
    int r = cdn_digest_check(expected, "digest", err);
    if (r < 0)
        return r;
    if (lseek(fd, 0, SEEK_SET) < 0)
        return cdn_error_set(err, errno, "rewinding a blob to verify it: %m");
    char got[CDN_DIGEST_MAX];
    uint64_t n;
    r = cdn_digest_fd(fd, expected, got, &n, err);
    if (r < 0)
        return r;
    if (size != UINT64_MAX && n != size)
        return cdn_error_set(err, EBADMSG, "blob %s: %" PRIu64 " bytes where its descriptor says %" PRIu64,
                             expected, n, size);
    if (strcmp(got, expected) != 0)
        return cdn_error_set(err, EBADMSG, "digest mismatch: expected %s, the content is %s", expected, got);
    return 0;
}
