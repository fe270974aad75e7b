/* Fuzz the OCI/Docker metadata parsers: the input is parsed as a manifest, an index (then a platform
 * is picked from it) and an image config, as a registry or a layout would hand them over. What is
 * accepted must hold the bounds and checked digests the rest of cordon relies on. */
#include "oci/manifest.h"

#include <stdlib.h>
#include <string.h>

static void check_desc(const struct cdn_oci_desc *d)
{
    if (cdn_digest_check(d->digest, "d", NULL) < 0 || strnlen(d->media_type, sizeof d->media_type) == 0)
        abort();
}

static void fuzz_index(const uint8_t *data, size_t size, const char *ct)
{
    struct cdn_oci_index ix;
    struct cdn_error err = {0};
    if (cdn_oci_index_parse(data, size, ct, &ix, &err) < 0) {
        if (!err.msg[0])
            abort();
        return;
    }
    if (ix.n_manifests > CDN_OCI_INDEX_MAX)
        abort();
    for (size_t i = 0; i < ix.n_manifests; i++)
        check_desc(&ix.manifests[i]);
    static const struct cdn_oci_platform want[] = {
        {"linux", "amd64", ""}, {"linux", "arm", "v7"}, {"linux", "arm64", ""}, {"", "", ""}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct cdn_oci_desc *d = NULL;
        if (cdn_oci_index_pick(&ix, &want[i], &d, &err) == 0 &&
            (d < ix.manifests || d >= ix.manifests + ix.n_manifests))
            abort();
    }
    cdn_oci_index_free(&ix);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cdn_error err = {0};
    struct cdn_oci_manifest m = {0};
    enum cdn_oci_kind kind;
    (void) cdn_oci_kind_of(data, size, NULL, &kind, &err);
    int mr = cdn_oci_manifest_parse(data, size, NULL, &m, &err);
    if (mr == 0) {
        if (m.n_layers > CDN_OCI_LAYERS_MAX)
            abort();
        check_desc(&m.config);
        for (size_t i = 0; i < m.n_layers; i++)
            check_desc(&m.layers[i]);
    } else if (!err.msg[0] || strchr(err.msg, '\n'))
        abort();
    fuzz_index(data, size, NULL);
    fuzz_index(data, size, CDN_OCI_MT_DOCKER_LIST "; charset=utf-8");

    struct cdn_oci_config c;
    err = (struct cdn_error){0};
    if (cdn_oci_config_parse(data, size, &c, &err) == 0) {
        if (c.n_diff_ids > CDN_OCI_LAYERS_MAX || (c.workdir && c.workdir[0] != '/'))
            abort();
        for (size_t i = 0; i < c.n_diff_ids; i++)
            if (cdn_digest_check(c.diff_ids[i], "d", NULL) < 0)
                abort();
        if (mr == 0)
            (void) cdn_oci_config_check(&c, &m, NULL, &err);
        cdn_oci_config_free(&c);
    } else if (!err.msg[0])
        abort();
    cdn_oci_manifest_free(&m);
    return 0;
}
