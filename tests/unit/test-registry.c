/* The registry client's parts that need no network: WWW-Authenticate challenges (hostile input),
 * the auth file and the options. The wire is tested against a real registry by
 * tests/integration/test_registry_client.py. */
#include "oci/registry-internal.h"
#include "tap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TEST(challenge_bearer_with_quoted_commas)
{
    struct reg_challenge c;
    CHECK_EQ_INT(
        reg_challenge_parse("Bearer realm=\"https://auth.example/token\",service=\"registry.example\","
                            "scope=\"repository:a/b:pull,push\"",
                            &c),
        0);
    CHECK_STREQ(c.scheme, "Bearer");
    CHECK_STREQ(c.realm, "https://auth.example/token");
    CHECK_STREQ(c.service, "registry.example");
    CHECK_STREQ(c.scope, "repository:a/b:pull,push");
    CHECK_STREQ(c.error, "");
    CHECK_EQ_INT(reg_challenge_parse("Bearer realm=\"r\",error=\"insufficient_scope\",scope=\"x\"", &c), 0);
    CHECK_STREQ(c.error, "insufficient_scope");
}

TEST(challenge_basic_tokens_escapes_and_spacing)
{
    struct reg_challenge c;
    CHECK_EQ_INT(reg_challenge_parse("  Basic realm=plain", &c), 0);
    CHECK_STREQ(c.scheme, "Basic");
    CHECK_STREQ(c.realm, "plain");
    CHECK_EQ_INT(reg_challenge_parse("Bearer Realm = \"a\\\"b\" ,  SERVICE=s , unknown=\"z\"", &c), 0);
    CHECK_STREQ(c.realm, "a\"b");
    CHECK_STREQ(c.service, "s");
    /* an unterminated quote ends at the end of the header */
    CHECK_EQ_INT(reg_challenge_parse("Bearer realm=\"open", &c), 0);
    CHECK_STREQ(c.realm, "open");
}

TEST(challenge_bad_or_oversized)
{
    struct reg_challenge c;
    CHECK_EQ_INT(reg_challenge_parse("", &c), -EINVAL);
    CHECK_EQ_INT(reg_challenge_parse("   ", &c), -EINVAL);
    CHECK_EQ_INT(reg_challenge_parse("AVeryLongSchemeNameIndeed realm=x", &c), -EINVAL);
    char big[3000] = "Bearer service=\"";
    memset(big + strlen(big), 'a', 2000);
    CHECK_EQ_INT(reg_challenge_parse(big, &c), -E2BIG);
}

static char *write_temp(const char *content)
{
    static char path[] = "/tmp/cordon-test-auth-XXXXXX";
    strcpy(path, "/tmp/cordon-test-auth-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, content, strlen(content)) != (ssize_t) strlen(content))
        abort();
    close(fd);
    return path;
}

TEST(auth_file_keys_are_normalised)
{
    /* "cordon:pa:ss" and Docker Hub's legacy key */
    char *p = write_temp("{\"auths\": {\"https://reg.example:5000/v1/\": {\"auth\": \"Y29yZG9uOnBhOnNz\"},"
                         "\"https://index.docker.io/v1/\": {\"auth\": \"aHViOmh1YnB3\"}}}");
    const char *mirrors[] = {"docker.io", NULL};
    struct cdn_registry_options o = {.auth_file = p, .mirrors = mirrors};
    struct cdn_registry *r = NULL;
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_registry_new("reg.example:5000", &o, &r, &err), 0);
    CHECK_EQ_INT((int) r->n_eps, 2);
    CHECK(r->eps[0].mirror && r->eps[0].have_creds);
    CHECK_STREQ(r->eps[0].user, "hub");
    CHECK_STREQ(r->eps[0].base, "https://registry-1.docker.io");
    CHECK(!r->eps[1].mirror && r->eps[1].have_creds);
    CHECK_STREQ(r->eps[1].user, "cordon");
    CHECK_STREQ(r->eps[1].pass, "pa:ss");
    CHECK_STREQ(r->eps[1].base, "https://reg.example:5000");
    cdn_registry_free(r);
    unlink(p);
}

TEST(auth_file_errors_and_helpers)
{
    struct cdn_registry *r = NULL;
    struct cdn_error err = {0};
    char *p = write_temp("{\"auths\": {\"h\": {\"auth\": \"bm8tY29sb24=\"}}}"); /* "no-colon" */
    struct cdn_registry_options o = {.auth_file = p};
    CHECK_EQ_INT(cdn_registry_new("h", &o, &r, &err), -EINVAL);
    CHECK_STREQ(err.field, "auth_file");
    unlink(p);
    p = write_temp("{\"auths\": ");
    CHECK_EQ_INT(cdn_registry_new("h", &o, &r, &err), -EINVAL);
    unlink(p);
    p = write_temp("{\"credHelpers\": {\"h\": \"secretservice\"}}");
    CHECK_EQ_INT(cdn_registry_new("h", &o, &r, &err), 0);
    CHECK(r->eps[0].cred_helper && !r->eps[0].have_creds);
    cdn_registry_free(r);
    unlink(p);
    o.auth_file = "/nonexistent/auth.json"; /* named explicitly: must exist */
    CHECK_EQ_INT(cdn_registry_new("h", &o, &r, &err), -ENOENT);
    /* not named, none in the environment: anonymous */
    setenv("REGISTRY_AUTH_FILE", "/nonexistent/auth.json", 1);
    CHECK_EQ_INT(cdn_registry_new("h", NULL, &r, &err), 0);
    CHECK(!r->eps[0].have_creds);
    cdn_registry_free(r);
    unsetenv("REGISTRY_AUTH_FILE");
}

TEST(options_are_checked)
{
    struct cdn_registry *r = NULL;
    struct cdn_error err = {0};
    setenv("HOME", "/nonexistent", 1);
    CHECK_EQ_INT(cdn_registry_new("bad host/x", NULL, &r, &err), -EINVAL);
    CHECK_STREQ(err.field, "registry");
    const char *mirrors[] = {"m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", NULL};
    struct cdn_registry_options o = {.mirrors = mirrors};
    CHECK_EQ_INT(cdn_registry_new("h", &o, &r, &err), -E2BIG);
    CHECK_STREQ(err.field, "mirrors");
    const char *cas[] = {"/dev/null", NULL};
    struct cdn_registry_options o2 = {.ca_files = cas};
    CHECK_EQ_INT(cdn_registry_new("h", &o2, &r, &err), -EINVAL);
    CHECK_STREQ(err.field, "ca_files");
    const char *insecure[] = {"h:5000", NULL};
    struct cdn_registry_options o3 = {.insecure = insecure};
    CHECK_EQ_INT(cdn_registry_new("h:5000", &o3, &r, &err), 0);
    CHECK_STREQ(r->eps[0].base, "http://h:5000");
    /* names that would change the URL's path are refused before any request */
    struct cdn_registry_manifest m = {0};
    CHECK_EQ_INT(cdn_registry_get_manifest(r, "../etc", "v1", NULL, &m, &err), -EINVAL);
    CHECK_STREQ(err.field, "repository");
    CHECK_EQ_INT(cdn_registry_get_manifest(r, "a/b", "v1/../../x", NULL, &m, &err), -EINVAL);
    CHECK_STREQ(err.field, "reference");
    CHECK_EQ_INT(cdn_registry_get_manifest(r, "a/b", "sha256:abc", NULL, &m, &err), -EINVAL);
    CHECK_EQ_INT(cdn_registry_get_blob(r, "a/b", "md5:00", 1, 0, NULL, NULL, &err), -EINVAL);
    cdn_registry_free(r);
}
