#include "oci/ref.h"
#include "tap.h"

#include <errno.h>
#include <string.h>

#define D256 "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

/* Parse s, check its canonical form, and that the canonical form parses to the same thing. */
static void check_canonical(const char *s, enum cdn_ref_kind kind, const char *want)
{
    struct cdn_image_ref r, again;
    struct cdn_error err = {0};
    char buf[CDN_IMAGE_REF_MAX], buf2[CDN_IMAGE_REF_MAX];
    int k = cdn_image_ref_parse(s, &r, &err);
    CHECK_EQ_INT(k, 0);
    if (k < 0) {
        fprintf(stderr, "# %s: %s\n", s, err.msg);
        return;
    }
    CHECK_EQ_INT(r.kind, kind);
    CHECK(cdn_image_ref_format(&r, buf, sizeof buf) > 0);
    CHECK_STREQ(buf, want);
    CHECK_EQ_INT(cdn_image_ref_parse(buf, &again, &err), 0);
    CHECK(cdn_image_ref_format(&again, buf2, sizeof buf2) > 0);
    CHECK_STREQ(buf2, want);
}

static void check_refused(const char *s, const char *why)
{
    struct cdn_image_ref r;
    struct cdn_error err = {0};
    int k = cdn_image_ref_parse(s, &r, &err);
    CHECK(k == -EINVAL || k == -ENAMETOOLONG);
    CHECK_STREQ(err.field, "image");
    if (why && !strstr(err.msg, why)) {
        fprintf(stderr, "# '%s': message '%s' lacks '%s'\n", s, err.msg, why);
        CHECK(!"message names the reason");
    }
}

TEST(short_names_follow_docker)
{
    check_canonical("python:3.12", CDN_REF_REGISTRY, "docker.io/library/python:3.12");
    check_canonical("python", CDN_REF_REGISTRY, "docker.io/library/python:latest");
    check_canonical("user/repo", CDN_REF_REGISTRY, "docker.io/user/repo:latest");
    check_canonical("docker.io/python", CDN_REF_REGISTRY, "docker.io/library/python:latest");
    check_canonical("index.docker.io/user/repo:1", CDN_REF_REGISTRY, "docker.io/user/repo:1");
    check_canonical("docker://python:3.12-slim", CDN_REF_REGISTRY, "docker.io/library/python:3.12-slim");
    struct cdn_image_ref r;
    CHECK_EQ_INT(cdn_image_ref_parse("python:3.12", &r, NULL), 0);
    CHECK_STREQ(r.registry, "docker.io");
    CHECK_STREQ(r.repository, "library/python");
    CHECK_STREQ(r.tag, "3.12");
    CHECK_STREQ(r.digest, "");
    CHECK_STREQ(cdn_image_ref_api_host(&r), "registry-1.docker.io");
    CHECK(cdn_image_ref_is_oci(&r));
}

TEST(registries_by_dot_port_or_localhost)
{
    check_canonical("registry.example:5000/team/task:tag", CDN_REF_REGISTRY,
                    "registry.example:5000/team/task:tag");
    check_canonical("localhost:5000/x", CDN_REF_REGISTRY, "localhost:5000/x:latest");
    check_canonical("localhost/x", CDN_REF_REGISTRY, "localhost/x:latest");
    check_canonical("127.0.0.1:5000/a/b/c:v1.2", CDN_REF_REGISTRY, "127.0.0.1:5000/a/b/c:v1.2");
    check_canonical("[::1]:5000/x:1", CDN_REF_REGISTRY, "[::1]:5000/x:1");
    check_canonical("ghcr.io/o/r", CDN_REF_REGISTRY, "ghcr.io/o/r:latest");
    /* "team" has no dot: a docker.io user, not a registry */
    check_canonical("team/task:1", CDN_REF_REGISTRY, "docker.io/team/task:1");
    struct cdn_image_ref r;
    CHECK_EQ_INT(cdn_image_ref_parse("localhost:5000/x", &r, NULL), 0);
    CHECK_STREQ(r.registry, "localhost:5000");
    CHECK_STREQ(r.repository, "x");
    CHECK_STREQ(cdn_image_ref_api_host(&r), "localhost:5000");
}

TEST(digests_pin)
{
    check_canonical("name@" D256, CDN_REF_REGISTRY, "docker.io/library/name@" D256);
    check_canonical("name:tag@" D256, CDN_REF_REGISTRY, "docker.io/library/name:tag@" D256);
    check_canonical("r.io:1/a/b@" D256, CDN_REF_REGISTRY, "r.io:1/a/b@" D256);
    struct cdn_image_ref r;
    CHECK_EQ_INT(cdn_image_ref_parse("name@" D256, &r, NULL), 0);
    CHECK_STREQ(r.tag, "");
    CHECK_STREQ(r.digest, D256);
    check_refused("name@sha256:abc", "digest");
    check_refused("name@md5:900150983cd24fb0d6963f7d28e17f72", "digest");
    check_refused("name@SHA256:BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD", "digest");
}

TEST(transports_and_paths)
{
    check_canonical("host", CDN_REF_HOST, "host");
    check_canonical("/srv/images/root", CDN_REF_DIR, "/srv/images/root");
    check_canonical("oci:/srv/layout", CDN_REF_OCI_LAYOUT, "oci:/srv/layout");
    check_canonical("oci:/srv/layout:v1.0", CDN_REF_OCI_LAYOUT, "oci:/srv/layout:v1.0");
    check_canonical("oci-archive:/tmp/img.tar:latest", CDN_REF_OCI_ARCHIVE,
                    "oci-archive:/tmp/img.tar:latest");
    check_canonical("docker-archive:/tmp/save.tar", CDN_REF_DOCKER_ARCHIVE, "docker-archive:/tmp/save.tar");
    check_canonical("docker-archive:/tmp/save.tar:python:3", CDN_REF_DOCKER_ARCHIVE,
                    "docker-archive:/tmp/save.tar:docker.io/library/python:3");
    struct cdn_image_ref r;
    CHECK_EQ_INT(cdn_image_ref_parse("oci:/srv/layout:v1", &r, NULL), 0);
    CHECK_STREQ(r.path, "/srv/layout");
    CHECK_STREQ(r.tag, "v1");
    CHECK(cdn_image_ref_is_oci(&r));
    CHECK_EQ_INT(cdn_image_ref_parse("/srv/root", &r, NULL), 0);
    CHECK(!cdn_image_ref_is_oci(&r));
    CHECK_STREQ(cdn_image_ref_kind_name(CDN_REF_DOCKER_ARCHIVE), "docker-archive");
    check_refused("oci:relative/dir", "absolute");
    check_refused("oci:", "empty");
    check_refused("oci:/srv/l:", "ref.name");
    check_refused("oci:/srv/l:-bad", "ref.name");
    check_refused("docker-archive:/t.tar:x@" D256, "tag, not a digest");
    check_refused("/srv/a,b", "','");
    check_refused("/srv/a:b", "','");
    check_refused("dir:/srv/x", "transport is not supported");
    check_refused("containers-storage:x", "transport is not supported");
}

TEST(grammar_refusals_name_the_reason)
{
    check_refused("", NULL);
    check_refused("Python:3", "lowercase");
    check_refused("r.io/Team/x", "lowercase");
    check_refused("a//b", "component");
    check_refused("a/-b", "component");
    check_refused("a/b_", "component");
    check_refused("a/b___c", "component");
    check_refused("python:", "tag");
    check_refused("python:.x", "tag");
    check_refused("python:a/b", "port"); /* "python:a" is a registry by its colon */
    check_refused("r.io:0/x", "port");
    check_refused("r.io:99999/x", "port");
    check_refused("r.io:5x/x", "port");
    check_refused("-r.io/x", "registry host");
    check_refused("r..io/x", "registry host");
    check_refused("[::zz]:5/x", "IPv6");
    check_refused("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "image id");
    check_refused("python:3\nimage: forged log line", "control character");
    /* separators: ok forms */
    check_canonical("a/b__c/d-e--f/g.h", CDN_REF_REGISTRY, "docker.io/a/b__c/d-e--f/g.h:latest");
}

TEST(lengths_are_bounded)
{
    char s[CDN_IMAGE_REF_MAX + 16];
    /* a tag of 128 is fine, 129 is not */
    memset(s, 0, sizeof s);
    strcpy(s, "x:");
    memset(s + 2, 't', 128);
    char want[200];
    (void) snprintf(want, sizeof want, "docker.io/library/%s", s);
    check_canonical(s, CDN_REF_REGISTRY, want);
    struct cdn_image_ref r;
    CHECK_EQ_INT(cdn_image_ref_parse(s, &r, NULL), 0);
    CHECK_EQ_INT(strlen(r.tag), 128);
    s[2 + 128] = 't';
    check_refused(s, "tag");
    /* a name of more than 255 */
    memset(s, 0, sizeof s);
    memset(s, 'a', 250);
    memcpy(s + 250, "/bbbbbbbbbb", 11);
    check_refused(s, "255");
    /* the whole string */
    memset(s, 0, sizeof s);
    s[0] = '/';
    memset(s + 1, 'a', CDN_IMAGE_REF_MAX + 8);
    check_refused(s, "longer");
    /* format: a small buffer */
    char small[8];
    CHECK_EQ_INT(cdn_image_ref_parse("python", &r, NULL), 0);
    CHECK_EQ_INT(cdn_image_ref_format(&r, small, sizeof small), -ENOBUFS);
}
