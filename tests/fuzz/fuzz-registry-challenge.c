/* Fuzz the registry client's WWW-Authenticate parser (src/oci/registry-auth.c): a registry's
 * challenge names the realm credentials go to, so it is hostile input. The input is one header
 * value; whatever it parses to must be NUL-terminated within its fields. */
#include "oci/registry-internal.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char header[4096];
    if (size >= sizeof header)
        size = sizeof header - 1;
    memcpy(header, data, size);
    header[size] = '\0';
    struct reg_challenge c;
    int r = reg_challenge_parse(header, &c);
    if (r != 0 && r != -EINVAL && r != -E2BIG)
        abort();
    if (memchr(c.scheme, '\0', sizeof c.scheme) == NULL || memchr(c.realm, '\0', sizeof c.realm) == NULL ||
        memchr(c.service, '\0', sizeof c.service) == NULL || memchr(c.scope, '\0', sizeof c.scope) == NULL ||
        memchr(c.error, '\0', sizeof c.error) == NULL)
        abort();
    if (r == 0 && c.scheme[0] == '\0')
        abort();
    return 0;
}
