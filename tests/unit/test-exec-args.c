/* The exec request body (src/daemon/exec-args.c): a relative cwd is joined to
 * the sandbox's workdir, as the files API joins a relative path; an empty cwd
 * or one with a NUL byte is refused, naming "cwd"; background and keep_stdin
 * go together, never with stream or a verifier step. */
#include "daemon/exec-args.h"
#include "tap.h"

#include <errno.h>
#include <string.h>

static int parse(const char *body, const char *workdir, struct exec_args *a, struct cdn_error *e)
{
    *a = (struct exec_args){0};
    *e = (struct cdn_error){0};
    return cdn_exec_args_parse(body, strlen(body), workdir, a, e);
}

TEST(cwd_absolute_is_kept)
{
    struct exec_args a;
    struct cdn_error e;
    CHECK_EQ_INT(parse("{\"cmd\": [\"pwd\"], \"cwd\": \"/tmp\"}", "/workspace", &a, &e), 0);
    CHECK_STREQ(a.cwd, "/tmp");
    cdn_exec_args_free(&a);
}

TEST(cwd_relative_joins_the_workdir)
{
    struct exec_args a;
    struct cdn_error e;
    CHECK_EQ_INT(parse("{\"cmd\": [\"pwd\"], \"cwd\": \"src/pkg\"}", "/workspace", &a, &e), 0);
    CHECK_STREQ(a.cwd, "/workspace/src/pkg");
    cdn_exec_args_free(&a);
    CHECK_EQ_INT(parse("{\"cmd\": [\"pwd\"], \"cwd\": \".\"}", "/srv/task", &a, &e), 0);
    CHECK_STREQ(a.cwd, "/srv/task/.");
    cdn_exec_args_free(&a);
}

TEST(cwd_absent_is_null)
{
    struct exec_args a;
    struct cdn_error e;
    CHECK_EQ_INT(parse("{\"cmd\": [\"pwd\"]}", "/workspace", &a, &e), 0);
    CHECK(a.cwd == NULL);
    cdn_exec_args_free(&a);
}

TEST(cwd_refused_names_the_field)
{
    const char *bad[] = {"{\"cmd\": [\"pwd\"], \"cwd\": \"\"}", "{\"cmd\": [\"pwd\"], \"cwd\": 7}",
                         "{\"cmd\": [\"pwd\"], \"cwd\": null}", NULL};
    for (int i = 0; bad[i]; i++) {
        struct exec_args a;
        struct cdn_error e;
        CHECK_EQ_INT(parse(bad[i], "/workspace", &a, &e), -EINVAL);
        CHECK_STREQ(e.field, "cwd");
        CHECK(a.cwd == NULL);
        cdn_exec_args_free(&a);
    }
}

/* jansson refuses \u0000 itself (json_loadb without JSON_ALLOW_NUL): the body is not JSON. */
TEST(cwd_with_a_nul_is_refused)
{
    const char *bad[] = {"{\"cmd\": [\"pwd\"], \"cwd\": \"/tmp\\u0000x\"}",
                         "{\"cmd\": [\"pwd\"], \"cwd\": \"a\\u0000\"}", NULL};
    for (int i = 0; bad[i]; i++) {
        struct exec_args a;
        struct cdn_error e;
        CHECK(parse(bad[i], "/workspace", &a, &e) < 0);
        CHECK(a.cwd == NULL);
        cdn_exec_args_free(&a);
    }
}

TEST(cwd_too_long_is_refused)
{
    static char body[2 * EXEC_CWD_MAX];
    char name[EXEC_CWD_MAX];
    memset(name, 'x', sizeof name - 20);
    name[sizeof name - 20] = 0;
    (void) snprintf(body, sizeof body, "{\"cmd\": [\"pwd\"], \"cwd\": \"%s\"}", name);
    struct exec_args a;
    struct cdn_error e;
    CHECK_EQ_INT(parse(body, "/workspace", &a, &e), 0); /* 4076 + "/workspace/": 4087 bytes */
    cdn_exec_args_free(&a);
    CHECK_EQ_INT(parse(body, "/a-much-longer-workdir-than-that", &a, &e), -ENAMETOOLONG);
    CHECK_STREQ(e.field, "cwd");
    cdn_exec_args_free(&a);
}

TEST(background_and_keep_stdin)
{
    struct exec_args a;
    struct cdn_error e;
    CHECK_EQ_INT(parse("{\"cmd\": [\"cat\"], \"background\": true, \"keep_stdin\": true, \"stdin\": \"x\"}",
                       "/w", &a, &e),
                 0);
    CHECK(a.background && a.keep_stdin && a.has_stdin && a.stdin_len == 1);
    cdn_exec_args_free(&a);
    static const struct {
        const char *body, *field;
    } bad[] = {
        {"{\"cmd\": [\"cat\"], \"background\": 1}", "background"},
        {"{\"cmd\": [\"cat\"], \"keep_stdin\": true}", "keep_stdin"}, /* only for a background one */
        {"{\"cmd\": [\"cat\"], \"background\": true, \"stream\": true}", "stream"},
        {"{\"cmd\": [\"cat\"], \"background\": true, \"verifier\": true}", "background"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(parse(bad[i].body, "/w", &a, &e), -EINVAL);
        CHECK_STREQ(e.field, bad[i].field);
        cdn_exec_args_free(&a);
    }
}
