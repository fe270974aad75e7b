#include "oci/digest.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ABC256 "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

TEST(check_accepts_sha256_and_sha512_only)
{
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_digest_check(ABC256, "digest", &err), 0);
    CHECK_EQ_INT(
        cdn_digest_check(
            "sha512:"
            "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd"
            "454d4423643ce80e2a9ac94fa54ca49f",
            "digest", &err),
        0);
    CHECK_EQ_INT(cdn_digest_check("md5:900150983cd24fb0d6963f7d28e17f72", "layers[0].digest", &err), -EINVAL);
    CHECK_STREQ(err.field, "layers[0].digest");
    /* uppercase, short, long, a path trick */
    CHECK_EQ_INT(cdn_digest_check("sha256:BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
                                  "d", NULL),
                 -EINVAL);
    CHECK_EQ_INT(cdn_digest_check("sha256:ba78", "d", NULL), -EINVAL);
    CHECK_EQ_INT(cdn_digest_check(ABC256 "0", "d", NULL), -EINVAL);
    CHECK_EQ_INT(cdn_digest_check(
                     "sha256:../../../../../../../../../../../../../../../../../../../etc/passwd", "d", NULL),
                 -EINVAL);
    CHECK_EQ_INT(cdn_digest_check("sha256", "d", NULL), -EINVAL);
    CHECK_EQ_INT(cdn_digest_check(NULL, "d", NULL), -EINVAL);
    CHECK_STREQ(cdn_digest_hex(ABC256), ABC256 + 7);
}

TEST(hasher_gives_known_vectors)
{
    _cleanup_hasher_ struct cdn_hasher *h = NULL;
    CHECK_EQ_INT(cdn_hasher_new("sha256", &h), 0);
    cdn_hasher_update(h, "a", 1);
    cdn_hasher_update(h, "bc", 2);
    char out[CDN_DIGEST_MAX];
    cdn_hasher_digest(h, out);
    CHECK_STREQ(out, ABC256);
    CHECK_EQ_INT(cdn_hasher_bytes(h), 3);
    struct cdn_hasher *bad = NULL;
    CHECK_EQ_INT(cdn_hasher_new("md5", &bad), -EINVAL);
}

TEST(verify_fd_refuses_a_mismatch_and_a_wrong_size)
{
    char path[] = "/tmp/cordon-test-digest-XXXXXX";
    _cleanup_close_ int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    CHECK_EQ_INT(write(fd, "abc", 3), 3);
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_digest_verify_fd(fd, ABC256, 3, &err), 0);
    CHECK_EQ_INT(cdn_digest_verify_fd(fd, ABC256, UINT64_MAX, &err), 0);
    CHECK_EQ_INT(cdn_digest_verify_fd(fd, ABC256, 4, &err), -EBADMSG);
    CHECK_EQ_INT(write(fd, "d", 1), 1);
    CHECK_EQ_INT(cdn_digest_verify_fd(fd, ABC256, UINT64_MAX, &err), -EBADMSG);
    CHECK(strstr(err.msg, "digest mismatch") != NULL);
    CHECK(strstr(err.msg, ABC256) != NULL);
}
