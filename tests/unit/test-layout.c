/* OCI layouts built here, in a temp dir, blob by blob. */
#include "oci/layout.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DX "sha256:1111111111111111111111111111111111111111111111111111111111111111"

static char dir[64];

static void put_file(const char *rel, const void *data, size_t len)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    CHECK_EQ_INT(write(fd, data, len), (ssize_t) len);
    close(fd);
}

static void digest_of(const void *data, size_t len, char out[CDN_DIGEST_MAX])
{
    struct cdn_hasher *h = NULL;
    CHECK_EQ_INT(cdn_hasher_new("sha256", &h), 0);
    cdn_hasher_update(h, data, len);
    cdn_hasher_digest(h, out);
    cdn_hasher_free(h);
}

/* Write a blob; its digest comes back in out. */
static void put_blob(const char *data, char out[CDN_DIGEST_MAX])
{
    char rel[160];
    digest_of(data, strlen(data), out);
    snprintf(rel, sizeof rel, "blobs/sha256/%s", cdn_digest_hex(out));
    put_file(rel, data, strlen(data));
}

static void new_layout(void)
{
    snprintf(dir, sizeof dir, "/tmp/cordon-test-layout-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    char p[128];
    snprintf(p, sizeof p, "%s/blobs", dir);
    CHECK_EQ_INT(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/blobs/sha256", dir);
    CHECK_EQ_INT(mkdir(p, 0755), 0);
    put_file("oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}", 30);
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void) st, (void) type, (void) ftw;
    return remove(path);
}

static void drop_layout(void)
{
    (void) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* An image: one layer blob with content `layer`, a config for arch, a manifest. Its manifest digest
 * and size come back. */
static void put_image(const char *layer, const char *arch, const char *env, char mdigest[CDN_DIGEST_MAX],
                      size_t *msize)
{
    char ldigest[CDN_DIGEST_MAX], cdigest[CDN_DIGEST_MAX], cfg[1024], man[2048];
    put_blob(layer, ldigest);
    snprintf(cfg, sizeof cfg,
             "{\"architecture\":\"%s\",\"os\":\"linux\",\"config\":{\"Env\":[\"%s\"],\"Cmd\":[\"sh\"]},"
             "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"" DX "\"]}}",
             arch, env);
    put_blob(cfg, cdigest);
    snprintf(man, sizeof man,
             "{\"schemaVersion\":2,\"mediaType\":\"" CDN_OCI_MT_MANIFEST "\",\"config\":{\"mediaType\":"
             "\"application/vnd.oci.image.config.v1+json\",\"digest\":\"%s\",\"size\":%zu},\"layers\":[{"
             "\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"%s\",\"size\":%zu}]}",
             cdigest, strlen(cfg), ldigest, strlen(layer));
    put_blob(man, mdigest);
    *msize = strlen(man);
}

static void put_index(const char *rel, const char *entries)
{
    char j[4096];
    snprintf(j, sizeof j, "{\"schemaVersion\":2,\"manifests\":[%s]}", entries);
    put_file(rel, j, strlen(j));
}

static void entry(char *buf, size_t size, const char *mt, const char *digest, size_t dsize, const char *tag,
                  const char *arch)
{
    char ann[128] = "", plat[128] = "";
    if (tag)
        snprintf(ann, sizeof ann, ",\"annotations\":{\"org.opencontainers.image.ref.name\":\"%s\"}", tag);
    if (arch)
        snprintf(plat, sizeof plat, ",\"platform\":{\"os\":\"linux\",\"architecture\":\"%s\"}", arch);
    snprintf(buf, size, "{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%zu%s%s}", mt, digest, dsize, ann,
             plat);
}

static int resolve(const char *tag, struct cdn_oci_image *img, struct cdn_error *err)
{
    struct cdn_oci_layout *l = NULL;
    struct cdn_oci_platform host;
    cdn_oci_platform_host(&host);
    *err = (struct cdn_error){0};
    int r = cdn_oci_layout_open(dir, &l, err);
    if (r < 0)
        return r;
    r = cdn_oci_layout_resolve(l, tag, &host, img, err);
    cdn_oci_layout_free(l);
    return r;
}

static const char *host_arch(void)
{
    static struct cdn_oci_platform host;
    cdn_oci_platform_host(&host);
    return host.arch;
}

static const char *other_arch(void)
{
    return strcmp(host_arch(), "s390x") == 0 ? "amd64" : "s390x";
}

TEST(one_image_resolves_and_its_layer_opens)
{
    new_layout();
    char md[CDN_DIGEST_MAX], e[512];
    size_t ms;
    put_image("layer one", host_arch(), "A=1", md, &ms);
    entry(e, sizeof e, CDN_OCI_MT_MANIFEST, md, ms, NULL, NULL);
    put_index("index.json", e);

    struct cdn_oci_image img;
    struct cdn_error err;
    CHECK_EQ_INT(resolve(NULL, &img, &err), 0);
    CHECK_STREQ(img.manifest_digest, md);
    CHECK_EQ_INT(img.manifest_len, ms);
    CHECK_EQ_INT(img.manifest.n_layers, 1);
    CHECK_STREQ(img.config.env.v[0], "A=1");
    CHECK_STREQ(img.config.diff_ids[0], DX);

    struct cdn_oci_layout *l = NULL;
    CHECK_EQ_INT(cdn_oci_layout_open(dir, &l, &err), 0);
    int fd = -1;
    CHECK_EQ_INT(cdn_oci_layout_open_blob(l, &img.manifest.layers[0], &fd, &err), 0);
    char buf[32] = "";
    CHECK_EQ_INT(read(fd, buf, sizeof buf), 9);
    CHECK_STREQ(buf, "layer one");
    close(fd);
    /* the descriptor's size must be the file's */
    struct cdn_oci_desc wrong = img.manifest.layers[0];
    wrong.size = 10;
    CHECK_EQ_INT(cdn_oci_layout_open_blob(l, &wrong, &fd, &err), -EBADMSG);
    cdn_oci_layout_free(l);
    cdn_oci_image_free(&img);
    drop_layout();
}

TEST(tags_choose_and_a_missing_tag_is_named)
{
    new_layout();
    char m1[CDN_DIGEST_MAX], m2[CDN_DIGEST_MAX], e1[512], e2[512], both[1100];
    size_t s1, s2;
    put_image("layer one", host_arch(), "V=1", m1, &s1);
    put_image("layer two", host_arch(), "V=2", m2, &s2);
    entry(e1, sizeof e1, CDN_OCI_MT_MANIFEST, m1, s1, "v1", NULL);
    entry(e2, sizeof e2, CDN_OCI_MT_MANIFEST, m2, s2, "v2", NULL);
    snprintf(both, sizeof both, "%s,%s", e1, e2);
    put_index("index.json", both);

    struct cdn_oci_image img;
    struct cdn_error err;
    CHECK_EQ_INT(resolve("v2", &img, &err), 0);
    CHECK_STREQ(img.manifest_digest, m2);
    CHECK_STREQ(img.config.env.v[0], "V=2");
    cdn_oci_image_free(&img);
    CHECK_EQ_INT(resolve("v3", &img, &err), -ENOENT);
    CHECK(strstr(err.msg, "v1, v2") != NULL);
    CHECK_EQ_INT(resolve(NULL, &img, &err), -EINVAL);
    CHECK(strstr(err.msg, "holds 2 images") != NULL);
    drop_layout();
}

TEST(nested_index_gives_the_host_platform)
{
    new_layout();
    char mh[CDN_DIGEST_MAX], mo[CDN_DIGEST_MAX], ih[CDN_DIGEST_MAX], eh[512], eo[512], ix[2048], top[512];
    size_t sh, so;
    put_image("host layer", host_arch(), "P=host", mh, &sh);
    put_image("other layer", other_arch(), "P=other", mo, &so);
    entry(eo, sizeof eo, CDN_OCI_MT_MANIFEST, mo, so, NULL, other_arch());
    entry(eh, sizeof eh, CDN_OCI_MT_MANIFEST, mh, sh, NULL, host_arch());
    snprintf(ix, sizeof ix,
             "{\"schemaVersion\":2,\"mediaType\":\"" CDN_OCI_MT_INDEX "\",\"manifests\":[%s,%s]}", eo, eh);
    put_blob(ix, ih);
    entry(top, sizeof top, CDN_OCI_MT_INDEX, ih, strlen(ix), "multi", NULL);
    put_index("index.json", top);

    struct cdn_oci_image img;
    struct cdn_error err;
    CHECK_EQ_INT(resolve("multi", &img, &err), 0);
    CHECK_STREQ(img.manifest_digest, mh);
    CHECK_STREQ(img.config.env.v[0], "P=host");
    cdn_oci_image_free(&img);

    /* an image for another architecture only: the error says what there is */
    char e[512];
    entry(e, sizeof e, CDN_OCI_MT_MANIFEST, mo, so, NULL, NULL);
    put_index("index.json", e);
    CHECK_EQ_INT(resolve(NULL, &img, &err), -ENOEXEC);
    CHECK(strstr(err.msg, other_arch()) != NULL);
    drop_layout();
}

TEST(a_changed_blob_is_a_digest_mismatch)
{
    new_layout();
    char md[CDN_DIGEST_MAX], e[512], rel[160];
    size_t ms;
    put_image("layer", host_arch(), "A=1", md, &ms);
    entry(e, sizeof e, CDN_OCI_MT_MANIFEST, md, ms, NULL, NULL);
    put_index("index.json", e);
    /* same size, one byte changed: "layers" → "layerz" is still JSON but not the blob */
    snprintf(rel, sizeof rel, "%s/blobs/sha256/%s", dir, cdn_digest_hex(md));
    int fd = open(rel, O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    CHECK(n > 0);
    char *at = memmem(buf, (size_t) n, "\"layers\"", 8);
    CHECK(at != NULL);
    CHECK_EQ_INT(pwrite(fd, "z", 1, at - buf + 6), 1);
    close(fd);
    struct cdn_oci_image img;
    struct cdn_error err;
    CHECK_EQ_INT(resolve(NULL, &img, &err), -EBADMSG);
    CHECK(strstr(err.msg, "digest mismatch") != NULL);
    drop_layout();
}

/* The layout is untrusted (it may come from a sandbox's workspace): a blob that is a symlink to a
 * host file must not be read, even when the descriptor names that file's exact digest and size.
 * Seen failing before the check (open_beneath with .resolve = 0, i.e. a plain openat): the
 * symlinked layer opened (0 != -40) and "read through the symlink: root:secret" from the file
 * outside the layout; the image resolved through the symlinked "blobs" directory (0 != -40); and a
 * symlinked index.json was followed (-124 != -40: the manifest it pointed at was read as the index). */
TEST(symlinks_inside_a_layout_are_refused)
{
    new_layout();
    char md[CDN_DIGEST_MAX], e[512];
    size_t ms;
    put_image("layer", host_arch(), "A=1", md, &ms);
    entry(e, sizeof e, CDN_OCI_MT_MANIFEST, md, ms, NULL, NULL);
    put_index("index.json", e);

    /* a "host file" outside the layout */
    char outside[64] = "/tmp/cordon-test-outside-XXXXXX";
    int ofd = mkstemp(outside);
    CHECK(ofd >= 0);
    CHECK_EQ_INT(write(ofd, "root:secret", 11), 11);
    close(ofd);
    struct cdn_oci_desc d = {.media_type = "application/vnd.oci.image.layer.v1.tar", .size = 11};
    digest_of("root:secret", 11, d.digest);
    char link[256];
    snprintf(link, sizeof link, "%s/blobs/sha256/%s", dir, cdn_digest_hex(d.digest));
    CHECK_EQ_INT(symlink(outside, link), 0);

    struct cdn_oci_layout *l = NULL;
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_oci_layout_open(dir, &l, &err), 0);
    int fd = -EBADF;
    int r = cdn_oci_layout_open_blob(l, &d, &fd, &err);
    CHECK_EQ_INT(r, -ELOOP);
    CHECK(strstr(err.msg, "symlink") != NULL);
    if (r == 0) {
        char buf[32] = "";
        CHECK_EQ_INT(read(fd, buf, sizeof buf), 11);
        fprintf(stderr, "# read through the symlink: %s\n", buf);
        close(fd);
    }
    /* the whole blobs directory a symlink to a copy elsewhere */
    char p[128], q[128];
    snprintf(p, sizeof p, "%s/blobs", dir);
    snprintf(q, sizeof q, "%s.real-blobs", dir);
    CHECK_EQ_INT(rename(p, q), 0);
    CHECK_EQ_INT(symlink(q, p), 0);
    struct cdn_oci_image img;
    CHECK_EQ_INT(cdn_oci_layout_resolve(l, NULL, NULL, &img, &err), -ELOOP);
    cdn_oci_layout_free(l);
    /* a symlinked index.json */
    CHECK_EQ_INT(unlink(p), 0);
    CHECK_EQ_INT(rename(q, p), 0);
    snprintf(p, sizeof p, "%s/index.json", dir);
    snprintf(q, sizeof q, "%s/blobs/sha256/%s", dir, cdn_digest_hex(md));
    CHECK_EQ_INT(unlink(p), 0);
    CHECK_EQ_INT(symlink(q, p), 0);
    CHECK_EQ_INT(cdn_oci_layout_open(dir, &l, &err), -ELOOP);
    unlink(outside);
    snprintf(q, sizeof q, "%s.real-blobs", dir);
    (void) nftw(q, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    drop_layout();
}

TEST(a_fifo_blob_does_not_block)
{
    new_layout();
    put_index("index.json", "");
    struct cdn_oci_desc d = {.media_type = "application/vnd.oci.image.layer.v1.tar", .digest = DX, .size = 1};
    char p[256];
    snprintf(p, sizeof p, "%s/blobs/sha256/%s", dir, cdn_digest_hex(DX));
    CHECK_EQ_INT(mkfifo(p, 0644), 0);
    struct cdn_oci_layout *l = NULL;
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_oci_layout_open(dir, &l, &err), 0);
    int fd = -EBADF;
    CHECK_EQ_INT(cdn_oci_layout_open_blob(l, &d, &fd, &err), -EINVAL);
    CHECK(strstr(err.msg, "not a regular file") != NULL);
    /* an empty layout */
    struct cdn_oci_image img;
    CHECK_EQ_INT(cdn_oci_layout_resolve(l, NULL, NULL, &img, &err), -ENOENT);
    cdn_oci_layout_free(l);
    drop_layout();
}

TEST(layout_file_is_required)
{
    new_layout();
    put_index("index.json", "");
    struct cdn_oci_layout *l = NULL;
    struct cdn_error err = {0};
    put_file("oci-layout", "{\"imageLayoutVersion\":\"2.0.0\"}", 30);
    CHECK_EQ_INT(cdn_oci_layout_open(dir, &l, &err), -EINVAL);
    CHECK_STREQ(err.field, "image");
    char p[128];
    snprintf(p, sizeof p, "%s/oci-layout", dir);
    CHECK_EQ_INT(unlink(p), 0);
    CHECK_EQ_INT(cdn_oci_layout_open(dir, &l, &err), -ENOENT);
    drop_layout();
    CHECK_EQ_INT(cdn_oci_layout_open("/nonexistent/cordon-layout", &l, &err), -ENOENT);
}
