/* Fuzz the image reference parser: one reference per input line. What parses must format to a
 * canonical form that parses to the same canonical form; what fails must say why, naming "image". */
#include "lines.h"
#include "oci/ref.h"

#include <stdlib.h>
#include <string.h>

#define MAX_LINES 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *lines[MAX_LINES] = {0};
    size_t n = fuzz_split_lines(data, size, lines, MAX_LINES);
    for (size_t i = 0; i < n; i++) {
        struct cdn_image_ref r, again;
        struct cdn_error err = {0};
        static char buf[CDN_IMAGE_REF_MAX], buf2[CDN_IMAGE_REF_MAX];
        if (cdn_image_ref_parse(lines[i], &r, &err) < 0) {
            if (err.errnum == 0 || !err.msg[0] || strcmp(err.field, "image") != 0 || strchr(err.msg, '\n'))
                abort();
            continue;
        }
        if (cdn_image_ref_format(&r, buf, sizeof buf) < 0)
            abort();
        if (cdn_image_ref_parse(buf, &again, &err) < 0)
            abort();
        if (cdn_image_ref_format(&again, buf2, sizeof buf2) < 0 || strcmp(buf, buf2) != 0)
            abort();
        if (r.kind == CDN_REF_REGISTRY &&
            (!r.registry[0] || !r.repository[0] || (!r.tag[0] && !r.digest[0]) ||
             (r.digest[0] && cdn_digest_check(r.digest, "image", NULL) < 0)))
            abort();
        (void) cdn_image_ref_api_host(&r);
    }
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    return 0;
}
