/* oci-archive and docker-archive: tars written here with libarchive, unpacked into a temp dir, then
 * read as an OCI layout. */
#include "oci/archive.h"
#include "oci/layout.h"
#include "tap.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tarpath[64], into[64];

struct member {
    const char *name;
    const char *data;    /* a regular file's content */
    const char *symlink; /* or a symlink's target */
};

static void write_tar(const struct member *m, size_t n)
{
    snprintf(tarpath, sizeof tarpath, "/tmp/cordon-test-archive-XXXXXX");
    int fd = mkstemp(tarpath);
    CHECK(fd >= 0);
    close(fd);
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    CHECK_EQ_INT(archive_write_open_filename(a, tarpath), ARCHIVE_OK);
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, m[i].name);
        archive_entry_set_perm(e, 0644);
        if (m[i].symlink) {
            archive_entry_set_filetype(e, AE_IFLNK);
            archive_entry_set_symlink(e, m[i].symlink);
        } else {
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_size(e, (la_int64_t) strlen(m[i].data));
        }
        CHECK_EQ_INT(archive_write_header(a, e), ARCHIVE_OK);
        if (!m[i].symlink)
            CHECK_EQ_INT(archive_write_data(a, m[i].data, strlen(m[i].data)), (la_ssize_t) strlen(m[i].data));
        archive_entry_free(e);
    }
    archive_write_close(a);
    archive_write_free(a);
    snprintf(into, sizeof into, "/tmp/cordon-test-into-XXXXXX");
    CHECK(mkdtemp(into) != NULL);
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void) st, (void) type, (void) ftw;
    return remove(path);
}

static void cleanup(void)
{
    unlink(tarpath);
    (void) nftw(into, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void digest_of(const char *data, char out[CDN_DIGEST_MAX])
{
    struct cdn_hasher *h = NULL;
    CHECK_EQ_INT(cdn_hasher_new("sha256", &h), 0);
    cdn_hasher_update(h, data, strlen(data));
    cdn_hasher_digest(h, out);
    cdn_hasher_free(h);
}

/* kind: "oci-archive" or "docker-archive"; sel: what follows FILE ("" or ":NAME:TAG"). */
static int unpack(const char *kind, const char *sel, uint64_t max, struct cdn_error *err)
{
    char s[256];
    struct cdn_image_ref r;
    snprintf(s, sizeof s, "%s:%s%s", kind, tarpath, sel);
    *err = (struct cdn_error){0};
    CHECK_EQ_INT(cdn_image_ref_parse(s, &r, err), 0);
    return cdn_oci_archive_unpack(&r, into, max, err);
}

static int resolve(const char *tag, struct cdn_oci_image *img, struct cdn_error *err)
{
    struct cdn_oci_layout *l = NULL;
    int r = cdn_oci_layout_open(into, &l, err);
    if (r < 0)
        return r;
    r = cdn_oci_layout_resolve(l, tag, NULL, img, err);
    cdn_oci_layout_free(l);
    return r;
}

/* docker save of an image with the same layer twice: the second is a symlink to the first. */
static void docker_save(const char *extra_name, const char *extra_link)
{
    static char cfg[512], man[512], d[CDN_DIGEST_MAX];
    digest_of("LAYER", d);
    snprintf(
        cfg, sizeof cfg,
        "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Cmd\":[\"sh\"]},\"rootfs\":{\"type\":"
        "\"layers\",\"diff_ids\":[\"%s\",\"%s\"]}}",
        d, d);
    snprintf(man, sizeof man,
             "[{\"Config\":\"abc.json\",\"RepoTags\":[\"team/task:1\"],\"Layers\":[\"l1/layer.tar\",\"./l2/"
             "layer.tar\"]}]");
    struct member m[] = {
        {"manifest.json", man, NULL},    {"abc.json", cfg, NULL},
        {"l1/layer.tar", "LAYER", NULL}, {"l2/layer.tar", NULL, "../l1/layer.tar"},
        {"repositories", "{}", NULL},    {extra_name ? extra_name : "l3/VERSION", "1.0", extra_link},
    };
    write_tar(m, ELEMENTSOF(m));
}

TEST(docker_archive_becomes_a_layout)
{
    struct cdn_error err;
    struct cdn_oci_image img;
    docker_save(NULL, NULL);
    CHECK_EQ_INT(unpack("docker-archive", "", 0, &err), 0);
    if (err.msg[0])
        fprintf(stderr, "# %s\n", err.msg);
    CHECK_EQ_INT(resolve(NULL, &img, &err), 0);
    CHECK_EQ_INT(img.manifest.n_layers, 2);
    CHECK_STREQ(img.manifest.layers[0].digest, img.config.diff_ids[0]);
    CHECK_EQ_INT(img.manifest.layers[1].size, 5);
    CHECK_STREQ(img.config.cmd.v[0], "sh");
    struct cdn_oci_layout *l = NULL;
    CHECK_EQ_INT(cdn_oci_layout_open(into, &l, &err), 0);
    int fd = -1;
    CHECK_EQ_INT(cdn_oci_layout_open_blob(l, &img.manifest.layers[1], &fd, &err), 0);
    char buf[8] = "";
    CHECK_EQ_INT(read(fd, buf, sizeof buf), 5);
    CHECK_STREQ(buf, "LAYER");
    close(fd);
    cdn_oci_layout_free(l);
    cdn_oci_image_free(&img);
    cleanup();
    /* chosen by NAME:TAG, or not there */
    docker_save(NULL, NULL);
    CHECK_EQ_INT(unpack("docker-archive", ":team/task:1", 0, &err), 0);
    cleanup();
    docker_save(NULL, NULL);
    CHECK_EQ_INT(unpack("docker-archive", ":team/task:2", 0, &err), -ENOENT);
    CHECK(strstr(err.msg, "docker.io/team/task:2") != NULL);
    cleanup();
}

TEST(archive_members_stay_inside)
{
    struct cdn_error err;
    docker_save("../escape", NULL);
    CHECK_EQ_INT(unpack("docker-archive", "", 0, &err), -EINVAL);
    CHECK(strstr(err.msg, "../escape") != NULL);
    cleanup();
    docker_save("/etc/cron.d/x", NULL);
    CHECK_EQ_INT(unpack("docker-archive", "", 0, &err), -EINVAL);
    cleanup();
    docker_save("l4/layer.tar", "/etc/shadow");
    CHECK_EQ_INT(unpack("docker-archive", "", 0, &err), -EINVAL);
    CHECK(strstr(err.msg, "leaves the archive") != NULL);
    cleanup();
    docker_save("l4/layer.tar", "../../../etc/shadow");
    CHECK_EQ_INT(unpack("docker-archive", "", 0, &err), -EINVAL);
    cleanup();
    /* more bytes than allowed */
    docker_save(NULL, NULL);
    CHECK_EQ_INT(unpack("docker-archive", "", 16, &err), -E2BIG);
    cleanup();
}

TEST(oci_archive_unpacks_only_the_layout)
{
    char ld[CDN_DIGEST_MAX], cd[CDN_DIGEST_MAX], md[CDN_DIGEST_MAX], cfg[512], man[1024], idx[512];
    char lname[128], cname[128], mname[128];
    digest_of("LAYER", ld);
    snprintf(cfg, sizeof cfg,
             "{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"%"
             "s\"]}}",
             ld);
    digest_of(cfg, cd);
    snprintf(man, sizeof man,
             "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\","
             "\"digest\":\"%s\",\"size\":%zu},\"layers\":[{\"mediaType\":\"application/"
             "vnd.oci.image.layer.v1.tar\","
             "\"digest\":\"%s\",\"size\":5}]}",
             cd, strlen(cfg), ld);
    digest_of(man, md);
    snprintf(idx, sizeof idx,
             "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" CDN_OCI_MT_MANIFEST
             "\",\"digest\":\"%s\","
             "\"size\":%zu,\"annotations\":{\"org.opencontainers.image.ref.name\":\"v1\"}}]}",
             md, strlen(man));
    snprintf(lname, sizeof lname, "blobs/sha256/%s", cdn_digest_hex(ld));
    snprintf(cname, sizeof cname, "./blobs/sha256/%s", cdn_digest_hex(cd));
    snprintf(mname, sizeof mname, "blobs/sha256/%s", cdn_digest_hex(md));
    struct member m[] = {
        {"oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}", NULL},
        {"index.json", idx, NULL},
        {lname, "LAYER", NULL},
        {cname, cfg, NULL},
        {mname, man, NULL},
        {"notes/README", "ignored", NULL},
    };
    write_tar(m, ELEMENTSOF(m));
    struct cdn_error err;
    struct cdn_oci_image img;
    CHECK_EQ_INT(unpack("oci-archive", ":v1", 0, &err), 0);
    CHECK_EQ_INT(resolve("v1", &img, &err), 0);
    CHECK_STREQ(img.manifest_digest, md);
    cdn_oci_image_free(&img);
    char p[128];
    snprintf(p, sizeof p, "%s/notes", into);
    CHECK(access(p, F_OK) < 0);
    cleanup();

    /* a blob that is a symlink in the archive: refused */
    m[2].data = NULL;
    m[2].symlink = "/etc/passwd";
    write_tar(m, ELEMENTSOF(m));
    CHECK_EQ_INT(unpack("oci-archive", "", 0, &err), -EINVAL);
    CHECK(strstr(err.msg, "not a regular file") != NULL);
    cleanup();
    /* not a tar */
    snprintf(tarpath, sizeof tarpath, "/tmp/cordon-test-archive-XXXXXX");
    int fd = mkstemp(tarpath);
    CHECK_EQ_INT(write(fd, "this is not a tar archive at all, just text", 43), 43);
    close(fd);
    snprintf(into, sizeof into, "/tmp/cordon-test-into-XXXXXX");
    CHECK(mkdtemp(into) != NULL);
    CHECK_EQ_INT(unpack("oci-archive", "", 0, &err), -EINVAL);
    CHECK_STREQ(err.field, "image");
    /* no such file */
    unlink(tarpath);
    CHECK_EQ_INT(unpack("docker-archive", "", 0, &err), -ENOENT);
    cleanup();
}
