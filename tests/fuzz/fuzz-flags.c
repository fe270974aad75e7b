/* Fuzz `cordon run` flag parsing and the unit parsers. The input is split at
 * NUL bytes into argv. */
#include "cli/run-flags.h"
#include "shared/parse-util.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *buf = malloc(size + 1);
    char *argv[256];
    int argc = 0;
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    for (char *p = buf; p <= buf + size && argc < 255; p += strlen(p) + 1)
        argv[argc++] = p;
    argv[argc] = NULL;
    uint64_t u;
    double d;
    (void) cdn_parse_size(argv[0], &u);
    (void) cdn_parse_duration(argv[0], &u);
    (void) cdn_parse_cpus(argv[0], &d);
    struct cdn_run_opts o = {0};
    struct cdn_error err;
    if (cdn_spec_init(&o.spec) == 0) {
        if (cdn_run_parse(argc, argv, &o, &err) == 0)
            (void) cdn_spec_validate(&o.spec, &err);
        cdn_spec_free(&o.spec);
    }
    free(buf);
    return 0;
}
