#include "shared/base64.h"
#include "tap.h"

#include <errno.h>
#include <string.h>

TEST(rfc4648_vectors)
{
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (size_t i = 0; i < 7; i++) {
        char out[16];
        uint8_t back[16];
        size_t n = strlen(plain[i]);
        CHECK_EQ_INT(cdn_base64_len(n), strlen(enc[i]));
        cdn_base64_encode((const uint8_t *) plain[i], n, out);
        CHECK_STREQ(out, enc[i]);
        CHECK_EQ_INT(cdn_base64_decode(enc[i], strlen(enc[i]), back), (long) n);
        CHECK(memcmp(back, plain[i], n) == 0);
    }
}

TEST(all_byte_values_roundtrip)
{
    uint8_t in[256], back[258];
    char out[400];
    for (int i = 0; i < 256; i++)
        in[i] = (uint8_t) i;
    cdn_base64_encode(in, sizeof in, out);
    CHECK_EQ_INT(cdn_base64_decode(out, strlen(out), back), 256);
    CHECK(memcmp(in, back, 256) == 0);
}

TEST(rejects_bad_input)
{
    uint8_t out[16];
    const char *bad[] = {"Zg=", "Z===", "Zg=a", "Zm9v!A==", "=Zm9", "Zg==Zg==", "Zm 9v"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_EQ_INT(cdn_base64_decode(bad[i], strlen(bad[i]), out), -EINVAL);
}
