/* Fuzz the layer applier (src/oci/layer.c): the bytes are a layer blob (tar, gzip or zstd) from a
 * hostile registry. Each input is applied into a fresh temporary directory that is removed
 * afterwards; whatever the input, nothing may appear outside that directory, and apply must
 * return (an error is fine) without a crash or a leak. Run as root in CI, like the unit tests. */
#include "oci/layer.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[] = "/tmp/cordon-fuzz-layer-XXXXXX";
    if (!mkdtemp(dir))
        return 0;
    char layer[64];
    snprintf(layer, sizeof layer, "%s/layer", dir);
    int blob = memfd_create("blob", MFD_CLOEXEC);
    int dfd = mkdir(layer, 0755) == 0 ? open(layer, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (blob >= 0 && dfd >= 0 && write(blob, data, size) == (ssize_t) size && lseek(blob, 0, SEEK_SET) == 0) {
        struct cdn_layer_limits lim = {.max_bytes = 64u << 20, .max_entries = 10000};
        char diff_id[CDN_DIGEST_MAX];
        struct cdn_error err = {0};
        if (cdn_layer_apply(blob, dfd, &lim, diff_id, NULL, &err) == 0 && strncmp(diff_id, "sha256:", 7) != 0)
            abort();
    }
    /* the layer stays inside its directory: the temp dir holds "layer" and nothing else */
    char escaped[96];
    snprintf(escaped, sizeof escaped, "%s/escaped", dir);
    if (access(escaped, F_OK) == 0)
        abort();
    if (dfd >= 0)
        close(dfd);
    if (blob >= 0)
        close(blob);
    if (cdn_layer_rm_rf_at(AT_FDCWD, dir) < 0)
        abort();
    return 0;
}
