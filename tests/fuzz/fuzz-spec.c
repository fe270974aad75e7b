/* Fuzz the JSON spec decoder and validator (the API's create body). */
#include "core/spec.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cdn_spec s;
    struct cdn_error err;
    if (cdn_spec_init(&s) < 0)
        return 0;
    if (cdn_spec_from_json(&s, (const char *) data, size, &err) == 0 && cdn_spec_validate(&s, &err) == 0) {
        char *out = cdn_spec_to_json(&s);
        /* what we accept, we must be able to read back */
        struct cdn_spec t;
        if (out && cdn_spec_init(&t) == 0) {
            if (cdn_spec_from_json(&t, out, strlen(out), &err) != 0)
                abort();
            cdn_spec_free(&t);
        }
        free(out);
    }
    cdn_spec_free(&s);
    return 0;
}
