#include "oci/manifest.h"
#include "tap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define DA "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define DB "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define DC "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

#define LAYER(mt, d) "{\"mediaType\":\"" mt "\",\"digest\":\"" d "\",\"size\":100}"
#define OCI_GZ       "application/vnd.oci.image.layer.v1.tar+gzip"
#define OCI_CFG                                                                                              \
    "{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"" DC "\",\"size\":50}"
#define OCI_MANIFEST(layers)                                                                                 \
    "{\"schemaVersion\":2,\"mediaType\":\"" CDN_OCI_MT_MANIFEST "\",\"config\":" OCI_CFG                     \
    ",\"layers\":[" layers "]}"

static int manifest(const char *json, const char *ct, struct cdn_oci_manifest *m, struct cdn_error *err)
{
    *err = (struct cdn_error){0};
    return cdn_oci_manifest_parse(json, strlen(json), ct, m, err);
}

TEST(oci_manifest_parses)
{
    struct cdn_oci_manifest m;
    struct cdn_error err;
    const char *j =
        OCI_MANIFEST(LAYER(OCI_GZ, DA) "," LAYER("application/vnd.oci.image.layer.v1.tar+zstd", DB));
    CHECK_EQ_INT(manifest(j, NULL, &m, &err), 0);
    CHECK_STREQ(m.media_type, CDN_OCI_MT_MANIFEST);
    CHECK_STREQ(m.config.digest, DC);
    CHECK_EQ_INT(m.config.size, 50);
    CHECK_EQ_INT(m.n_layers, 2);
    CHECK_STREQ(m.layers[0].digest, DA);
    CHECK_STREQ(m.layers[1].digest, DB);
    CHECK_EQ_INT(cdn_oci_layer_compression(m.layers[0].media_type), CDN_OCI_GZIP);
    CHECK_EQ_INT(cdn_oci_layer_compression(m.layers[1].media_type), CDN_OCI_ZSTD);
    cdn_oci_manifest_free(&m);
    /* the same with the Content-Type a registry sends, parameters and all */
    CHECK_EQ_INT(manifest(j, CDN_OCI_MT_MANIFEST "; charset=utf-8", &m, &err), 0);
    cdn_oci_manifest_free(&m);
    /* a disagreeing Content-Type */
    CHECK_EQ_INT(manifest(j, CDN_OCI_MT_DOCKER_MANIFEST, &m, &err), -EINVAL);
    CHECK_STREQ(err.field, "manifest.mediaType");
}

TEST(docker_schema2_and_no_media_type)
{
    struct cdn_oci_manifest m;
    struct cdn_error err;
    const char *docker =
        "{\"schemaVersion\":2,\"mediaType\":\"" CDN_OCI_MT_DOCKER_MANIFEST "\",\"config\":"
        "{\"mediaType\":\"application/vnd.docker.container.image.v1+json\",\"digest\":\"" DC
        "\",\"size\":7},\"layers\":[" LAYER("application/vnd.docker.image.rootfs.diff.tar.gzip", DA) "]}";
    CHECK_EQ_INT(manifest(docker, CDN_OCI_MT_DOCKER_MANIFEST, &m, &err), 0);
    CHECK_STREQ(m.media_type, CDN_OCI_MT_DOCKER_MANIFEST);
    CHECK_EQ_INT(m.n_layers, 1);
    cdn_oci_manifest_free(&m);
    /* no mediaType: judged by content; a generic Content-Type is no opinion */
    const char *bare = "{\"schemaVersion\":2,\"config\":" OCI_CFG ",\"layers\":[" LAYER(OCI_GZ, DA) "]}";
    CHECK_EQ_INT(manifest(bare, "application/json", &m, &err), 0);
    CHECK_STREQ(m.media_type, CDN_OCI_MT_MANIFEST);
    cdn_oci_manifest_free(&m);
    enum cdn_oci_kind kind;
    CHECK_EQ_INT(cdn_oci_kind_of(bare, strlen(bare), NULL, &kind, &err), 0);
    CHECK_EQ_INT(kind, CDN_OCI_MANIFEST);
}

TEST(refusals_name_the_field)
{
    struct cdn_oci_manifest m;
    struct cdn_error err;
    CHECK_EQ_INT(
        manifest(OCI_MANIFEST(LAYER("application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", DA)),
                 NULL, &m, &err),
        -EMEDIUMTYPE);
    CHECK_STREQ(err.field, "manifest.layers[0]");
    CHECK(strstr(err.msg, "non-distributable") != NULL);
    CHECK_EQ_INT(manifest(OCI_MANIFEST(LAYER(OCI_GZ, DA) "," LAYER(
                              "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", DB)),
                          NULL, &m, &err),
                 -EMEDIUMTYPE);
    CHECK_STREQ(err.field, "manifest.layers[1]");
    CHECK_EQ_INT(manifest(OCI_MANIFEST(LAYER("text/plain", DA)), NULL, &m, &err), -EMEDIUMTYPE);
    /* a media type that would put a line break into the error message and the logs. Seen failing
     * before the check: -EMEDIUMTYPE (-124 != -22) with the line break in the message. */
    CHECK_EQ_INT(manifest(OCI_MANIFEST(LAYER("x\\nforged: line", DA)), NULL, &m, &err), -EINVAL);
    CHECK(strstr(err.msg, "control character") != NULL);
    CHECK(strchr(err.msg, '\n') == NULL);
    CHECK_EQ_INT(manifest(OCI_MANIFEST(LAYER(OCI_GZ, "sha256:abc")), NULL, &m, &err), -EINVAL);
    CHECK_STREQ(err.field, "manifest.layers[0].digest");
    CHECK_EQ_INT(manifest(OCI_MANIFEST("{\"mediaType\":\"" OCI_GZ "\",\"digest\":\"" DA "\",\"size\":-1}"),
                          NULL, &m, &err),
                 -EINVAL);
    CHECK_STREQ(err.field, "manifest.layers[0].size");
    CHECK_EQ_INT(manifest("{\"schemaVersion\":1,\"fsLayers\":[]}", NULL, &m, &err), -EMEDIUMTYPE);
    CHECK(strstr(err.msg, "schema 1") != NULL);
    CHECK_EQ_INT(manifest("[1]", NULL, &m, &err), -EINVAL);
    CHECK_EQ_INT(manifest("{\"schemaVersion\":2", NULL, &m, &err), -EINVAL);
    /* duplicate keys could be read differently by another parser */
    CHECK_EQ_INT(manifest("{\"schemaVersion\":2,\"schemaVersion\":2,\"config\":" OCI_CFG ",\"layers\":[]}",
                          NULL, &m, &err),
                 -EINVAL);
    /* a manifest that is also an index: ambiguous */
    CHECK_EQ_INT(manifest("{\"schemaVersion\":2,\"config\":" OCI_CFG ",\"layers\":[],\"manifests\":[]}", NULL,
                          &m, &err),
                 -EINVAL);
    CHECK(strstr(err.msg, "ambiguous") != NULL);
    /* an artifact, a non-image config */
    CHECK_EQ_INT(manifest("{\"schemaVersion\":2,\"artifactType\":\"x/y\",\"config\":" OCI_CFG
                          ",\"layers\":[]}",
                          NULL, &m, &err),
                 -EMEDIUMTYPE);
    CHECK_EQ_INT(
        manifest("{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/vnd.cncf.helm.config.v1+"
                 "json\",\"digest\":\"" DC "\",\"size\":1},\"layers\":[]}",
                 NULL, &m, &err),
        -EMEDIUMTYPE);
    CHECK_STREQ(err.field, "manifest.config.mediaType");
    /* an index where a manifest is expected */
    CHECK_EQ_INT(manifest("{\"schemaVersion\":2,\"manifests\":[]}", NULL, &m, &err), -EMEDIUMTYPE);
}

TEST(bounds)
{
    struct cdn_oci_manifest m;
    struct cdn_error err;
    /* 129 layers */
    size_t cap = 200 * 129 + 1024;
    char *j = malloc(cap);
    CHECK(j != NULL);
    int off = snprintf(j, cap, "{\"schemaVersion\":2,\"config\":" OCI_CFG ",\"layers\":[");
    for (int i = 0; i < 129; i++)
        off += snprintf(j + off, cap - (size_t) off, "%s" LAYER(OCI_GZ, DA), i ? "," : "");
    snprintf(j + off, cap - (size_t) off, "]}");
    CHECK_EQ_INT(manifest(j, NULL, &m, &err), -E2BIG);
    CHECK_STREQ(err.field, "manifest.layers");
    free(j);
    /* more than 4 MiB of JSON is not even parsed */
    size_t big = CDN_OCI_JSON_MAX + 1;
    j = malloc(big);
    CHECK(j != NULL);
    memset(j, ' ', big);
    j[0] = '{';
    j[big - 1] = '}';
    CHECK_EQ_INT(cdn_oci_manifest_parse(j, big, NULL, &m, &err), -E2BIG);
    free(j);
}

#define ENTRY(d, os, arch, variant)                                                                          \
    "{\"mediaType\":\"" CDN_OCI_MT_MANIFEST "\",\"digest\":\"" d                                             \
    "\",\"size\":500,\"platform\":{\"os\":\"" os "\",\"architecture\":\"" arch "\"" variant "}}"
#define ATTEST(d)                                                                                            \
    "{\"mediaType\":\"" CDN_OCI_MT_MANIFEST "\",\"digest\":\"" d                                             \
    "\",\"size\":5,\"platform\":{\"os\":\"unknown\","                                                        \
    "\"architecture\":\"unknown\"},\"annotations\":{\"vnd.docker.reference.type\":\"attestation-manifest\"}" \
    "}"

static int index_of(const char *json, struct cdn_oci_index *ix, struct cdn_error *err)
{
    *err = (struct cdn_error){0};
    return cdn_oci_index_parse(json, strlen(json), NULL, ix, err);
}

TEST(index_picks_the_host_platform)
{
    struct cdn_oci_index ix;
    struct cdn_error err;
    const char *j = "{\"schemaVersion\":2,\"mediaType\":\"" CDN_OCI_MT_DOCKER_LIST
                    "\",\"manifests\":[" ATTEST(DC) "," ENTRY(
                        DA, "linux", "arm64", ",\"variant\":\"v8\"") "," ENTRY(DB, "linux", "amd64", "") "]}";
    CHECK_EQ_INT(index_of(j, &ix, &err), 0);
    CHECK_EQ_INT(ix.n_manifests, 3);
    CHECK(ix.manifests[0].attestation);
    const struct cdn_oci_desc *d;
    struct cdn_oci_platform amd = {.os = "linux", .arch = "amd64"}, arm64 = {.os = "linux", .arch = "arm64"};
    CHECK_EQ_INT(cdn_oci_index_pick(&ix, &amd, &d, &err), 0);
    CHECK_STREQ(d->digest, DB);
    CHECK_EQ_INT(cdn_oci_index_pick(&ix, &arm64, &d, &err), 0);
    CHECK_STREQ(d->digest, DA);
    struct cdn_oci_platform s390 = {.os = "linux", .arch = "s390x"};
    CHECK_EQ_INT(cdn_oci_index_pick(&ix, &s390, &d, &err), -ENOEXEC);
    CHECK_STREQ(err.field, "image");
    CHECK(strstr(err.msg, "linux/arm64/v8, linux/amd64") != NULL);
    CHECK(strstr(err.msg, "unknown") == NULL);
    cdn_oci_index_free(&ix);
    /* the host has some platform, and it is linux */
    struct cdn_oci_platform host;
    cdn_oci_platform_host(&host);
    CHECK_STREQ(host.os, "linux");
    CHECK(host.arch[0] != '\0');
}

TEST(arm_variants_fall_back_to_older_ones)
{
    struct cdn_oci_index ix;
    struct cdn_error err;
    const char *j =
        "{\"schemaVersion\":2,\"manifests\":[" ENTRY(DA, "linux", "arm", ",\"variant\":\"v6\"") "," ENTRY(
            DB, "linux", "arm", ",\"variant\":\"v7\"") "," ENTRY(DC, "linux", "arm",
                                                                 ",\"variant\":\"v5\"") "]}";
    CHECK_EQ_INT(index_of(j, &ix, &err), 0);
    const struct cdn_oci_desc *d;
    struct cdn_oci_platform v7 = {.os = "linux", .arch = "arm", .variant = "v7"};
    struct cdn_oci_platform v6 = {.os = "linux", .arch = "arm", .variant = "v6"};
    CHECK_EQ_INT(cdn_oci_index_pick(&ix, &v7, &d, &err), 0);
    CHECK_STREQ(d->digest, DB);
    CHECK_EQ_INT(cdn_oci_index_pick(&ix, &v6, &d, &err), 0);
    CHECK_STREQ(d->digest, DA);
    cdn_oci_index_free(&ix);
    /* v7 host, only v5 and v6: v6 is the closer */
    j = "{\"schemaVersion\":2,\"manifests\":[" ENTRY(DC, "linux", "arm", ",\"variant\":\"v5\"") "," ENTRY(
        DA, "linux", "arm", ",\"variant\":\"v6\"") "]}";
    CHECK_EQ_INT(index_of(j, &ix, &err), 0);
    CHECK_EQ_INT(cdn_oci_index_pick(&ix, &v7, &d, &err), 0);
    CHECK_STREQ(d->digest, DA);
    cdn_oci_index_free(&ix);
    /* aliases */
    struct cdn_oci_platform p = {.os = "linux", .arch = "aarch64", .variant = "v8"};
    cdn_oci_platform_normalize(&p);
    CHECK_STREQ(p.arch, "arm64");
    CHECK_STREQ(p.variant, "");
    struct cdn_oci_platform x = {.os = "linux", .arch = "x86_64"}, amd = {.os = "linux", .arch = "amd64"};
    CHECK(cdn_oci_platform_rank(&amd, &x) > 0);
    struct cdn_oci_platform v3 = {.os = "linux", .arch = "amd64", .variant = "v3"};
    CHECK_EQ_INT(cdn_oci_platform_rank(&amd, &v3), 0);
}

TEST(index_entries_without_platform_and_odd_types)
{
    struct cdn_oci_index ix;
    struct cdn_error err;
    const struct cdn_oci_desc *d;
    struct cdn_oci_platform amd = {.os = "linux", .arch = "amd64"};
    /* one bare entry (a layout's index.json) is picked; a signature artifact is dropped */
    const char *j =
        "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" CDN_OCI_MT_MANIFEST "\",\"digest\":\"" DA
        "\",\"size\":3,\"annotations\":{\"org.opencontainers.image.ref.name\":\"v1\"}},"
        "{\"mediaType\":\"application/vnd.dev.cosign.simplesigning.v1+json\",\"digest\":\"" DB
        "\",\"size\":3}]}";
    CHECK_EQ_INT(index_of(j, &ix, &err), 0);
    CHECK_EQ_INT(ix.n_manifests, 1);
    CHECK_STREQ(ix.manifests[0].ref_name, "v1");
    CHECK_EQ_INT(cdn_oci_index_pick(&ix, &amd, &d, &err), 0);
    CHECK_STREQ(d->digest, DA);
    cdn_oci_index_free(&ix);
    /* an index judged by content; an index with layers is ambiguous */
    enum cdn_oci_kind kind;
    const char *bare = "{\"schemaVersion\":2,\"manifests\":[]}";
    CHECK_EQ_INT(cdn_oci_kind_of(bare, strlen(bare), NULL, &kind, &err), 0);
    CHECK_EQ_INT(kind, CDN_OCI_INDEX);
    CHECK_EQ_INT(index_of("{\"schemaVersion\":2,\"manifests\":[],\"layers\":[]}", &ix, &err), -EINVAL);
    CHECK_EQ_INT(index_of("{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" CDN_OCI_MT_MANIFEST
                          "\",\"digest\":\"" DA "\",\"size\":99999999}]}",
                          &ix, &err),
                 -E2BIG);
    CHECK_STREQ(err.field, "index.manifests[0]");
}

static const char config_json[] =
    "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[\"PATH=/usr/bin\",\"LANG=C.UTF-8\"],"
    "\"WorkingDir\":\"/testbed\",\"User\":\"1000:1000\",\"Entrypoint\":[\"/bin/sh\",\"-c\"],\"Cmd\":[\"echo "
    "hi\"]},"
    "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"" DA "\",\"" DB "\"]},\"history\":[]}";

TEST(config_parses_what_cordon_runs_with)
{
    struct cdn_oci_config c;
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_oci_config_parse(config_json, strlen(config_json), &c, &err), 0);
    CHECK_STREQ(c.platform.arch, "amd64");
    CHECK_EQ_INT(c.env.n, 2);
    CHECK_STREQ(c.env.v[1], "LANG=C.UTF-8");
    CHECK_STREQ(c.workdir, "/testbed");
    CHECK_STREQ(c.user, "1000:1000");
    CHECK_EQ_INT(c.entrypoint.n, 2);
    CHECK_STREQ(c.cmd.v[0], "echo hi");
    CHECK_EQ_INT(c.n_diff_ids, 2);
    CHECK_STREQ(c.diff_ids[1], DB);
    /* one diff_id per layer */
    struct cdn_oci_manifest m;
    CHECK_EQ_INT(manifest(OCI_MANIFEST(LAYER(OCI_GZ, DA) "," LAYER(OCI_GZ, DB)), NULL, &m, &err), 0);
    struct cdn_oci_platform amd = {.os = "linux", .arch = "amd64"}, arm = {.os = "linux", .arch = "arm64"};
    CHECK_EQ_INT(cdn_oci_config_check(&c, &m, &amd, &err), 0);
    CHECK_EQ_INT(cdn_oci_config_check(&c, &m, &arm, &err), -ENOEXEC);
    CHECK(strstr(err.msg, "built for linux/amd64") != NULL);
    cdn_oci_manifest_free(&m);
    CHECK_EQ_INT(manifest(OCI_MANIFEST(LAYER(OCI_GZ, DA)), NULL, &m, &err), 0);
    CHECK_EQ_INT(cdn_oci_config_check(&c, &m, NULL, &err), -EINVAL);
    CHECK_STREQ(err.field, "config.rootfs.diff_ids");
    cdn_oci_manifest_free(&m);
    cdn_oci_config_free(&c);
}

static int config(const char *json, struct cdn_oci_config *c, struct cdn_error *err)
{
    *err = (struct cdn_error){0};
    int r = cdn_oci_config_parse(json, strlen(json), c, err);
    if (r == 0)
        cdn_oci_config_free(c);
    return r;
}

TEST(config_refusals)
{
    struct cdn_oci_config c;
    struct cdn_error err;
    const char *rootfs = "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}";
    char j[512];
    snprintf(j, sizeof j, "{\"config\":{\"Env\":[\"NOEQUALS\"]},%s}", rootfs);
    CHECK_EQ_INT(config(j, &c, &err), -EINVAL);
    CHECK_STREQ(err.field, "config.config.Env");
    snprintf(j, sizeof j, "{\"config\":{\"Cmd\":\"sh\"},%s}", rootfs);
    CHECK_EQ_INT(config(j, &c, &err), -EINVAL);
    CHECK_STREQ(err.field, "config.config.Cmd");
    snprintf(j, sizeof j, "{\"config\":{\"Entrypoint\":[1]},%s}", rootfs);
    CHECK_EQ_INT(config(j, &c, &err), -EINVAL);
    CHECK_EQ_INT(config("{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:x\"]}}", &c, &err), -EINVAL);
    CHECK_STREQ(err.field, "config.rootfs.diff_ids[0]");
    CHECK_EQ_INT(config("{\"rootfs\":{\"type\":\"other\",\"diff_ids\":[]}}", &c, &err), -EINVAL);
    CHECK_EQ_INT(config("{\"config\":null}", &c, &err), -EINVAL);
    CHECK_STREQ(err.field, "config.rootfs");
    /* null lists and a relative WorkingDir are fine */
    snprintf(j, sizeof j, "{\"config\":{\"Env\":null,\"Cmd\":null,\"WorkingDir\":\"src\"},%s}", rootfs);
    CHECK_EQ_INT(cdn_oci_config_parse(j, strlen(j), &c, &err), 0);
    CHECK_STREQ(c.workdir, "/src");
    CHECK_EQ_INT(c.env.n, 0);
    CHECK(c.user == NULL);
    cdn_oci_config_free(&c);
}
