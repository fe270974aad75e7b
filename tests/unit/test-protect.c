/* Protected-path patterns (src/core/protect.h) and the monitor's lexical
 * view of write targets (src/monitor/writes.h). The expansion runs against a
 * scratch tree whose symlinks point outside it: they must resolve inside. */
#include "core/protect.h"
#include "monitor/writes.h"
#include "tap.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TEST(pattern_check)
{
    struct cdn_error e = {0};
    CHECK_EQ_INT(cdn_protect_pattern_check("/workspace/answers/**", 0, &e), 0);
    CHECK_EQ_INT(cdn_protect_pattern_check("/w/t*/[ab]?.py", 0, &e), 0);
    const char *bad[] = {"rel", "/", "/**", "/a/**/b", "/a//b", "/a/./b", "/a/../b", "/a/b**"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e = (struct cdn_error){0};
        CHECK(cdn_protect_pattern_check(bad[i], 3, &e) < 0);
        CHECK_STREQ(e.field, "protect[3]");
    }
}

struct found {
    char paths[16][256];
    int n;
};

static int collect(void *ud, const char *path, int fd)
{
    struct found *f = ud;
    CHECK(fd >= 0);
    if (f->n < 16)
        (void) snprintf(f->paths[f->n++], sizeof f->paths[0], "%s", path);
    return 0;
}

static bool has(const struct found *f, const char *p)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->paths[i], p) == 0)
            return true;
    return false;
}

TEST(expand_beneath_a_root)
{
    char dir[] = "/tmp/cordon-protect-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char p[512];
    const char *dirs[] = {"w", "w/tests", "w/tests2", "w/.hidden", "etc"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        (void) snprintf(p, sizeof p, "%s/%s", dir, dirs[i]);
        CHECK_EQ_INT(mkdir(p, 0755), 0);
    }
    (void) snprintf(p, sizeof p, "%s/w/key", dir);
    close(open(p, O_CREAT | O_WRONLY, 0644));
    (void) snprintf(p, sizeof p, "%s/etc/inside", dir);
    close(open(p, O_CREAT | O_WRONLY, 0644));
    /* an absolute symlink: resolved inside the root, never the host's /etc */
    (void) snprintf(p, sizeof p, "%s/w/link", dir);
    CHECK_EQ_INT(symlink("/etc", p), 0);
    int root = open(dir, O_PATH | O_DIRECTORY);
    CHECK(root >= 0);

    struct found f = {0};
    CHECK_EQ_INT(cdn_protect_expand(root, "/w/key", collect, &f), 1);
    CHECK(has(&f, "/w/key"));
    f = (struct found){0};
    CHECK_EQ_INT(cdn_protect_expand(root, "/w/test*/**", collect, &f), 2);
    CHECK(has(&f, "/w/tests") && has(&f, "/w/tests2"));
    f = (struct found){0};
    CHECK_EQ_INT(cdn_protect_expand(root, "/w/*", collect, &f),
                 4); /* not .hidden: a leading dot is not matched */
    CHECK(!has(&f, "/w/.hidden"));
    f = (struct found){0};
    CHECK_EQ_INT(cdn_protect_expand(root, "/w/link/inside", collect, &f), 1);
    f = (struct found){0};
    CHECK_EQ_INT(cdn_protect_expand(root, "/w/link/passwd", collect, &f),
                 -ENOENT); /* the host's /etc/passwd is not seen */
    CHECK_EQ_INT(cdn_protect_expand(root, "/w/nothing*", collect, &f), 0);      /* a glob may match nothing */
    CHECK_EQ_INT(cdn_protect_expand(root, "/w/missing", collect, &f), -ENOENT); /* a plain path must exist */
    close(root);
    char cmd[600];
    (void) snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ_INT(system(cmd), 0);
}

TEST(lexical_write_targets)
{
    char out[256];
    CHECK(cdn_path_normalize("/work", "../usr/./bin//x", out, sizeof out));
    CHECK_STREQ(out, "/usr/bin/x");
    CHECK(cdn_path_normalize("/", "../../..", out, sizeof out));
    CHECK_STREQ(out, "/");
    CHECK(cdn_path_normalize("/tmp", "/etc/passwd", out, sizeof out));
    CHECK_STREQ(out, "/etc/passwd");
    CHECK(cdn_path_is_system("/bin/sh") && cdn_path_is_system("/etc") && cdn_path_is_system("/usr/lib/x.so"));
    CHECK(!cdn_path_is_system("/tmp/x") && !cdn_path_is_system("/usrx/y") &&
          !cdn_path_is_system("/workspace"));
    CHECK(!cdn_path_is_system("/usr/lib/python3/__pycache__/m.pyc"));
    char *pats[] = {"/workspace/answer.key", "/workspace/tests/**", "/w/*.secret", NULL};
    struct cdn_strv protect = {pats, 3};
    CHECK(cdn_path_is_protected("/workspace/answer.key", &protect));
    CHECK(cdn_path_is_protected("/workspace/tests/sub/t.py", &protect));
    CHECK(cdn_path_is_protected("/workspace/tests", &protect));
    CHECK(cdn_path_is_protected("/w/a.secret", &protect));
    CHECK(!cdn_path_is_protected("/w/.b.secret", &protect));
    CHECK(!cdn_path_is_protected("/workspace/tests2/x", &protect));
    CHECK(!cdn_path_is_protected("/workspace/solution.py", &protect));
}

TEST(renaming_a_parent_is_an_attempt_on_what_it_holds)
{
    char *pats[] = {"/workspace/repo/tests/**", "/w/*/key", NULL};
    struct cdn_strv protect = {pats, 2};
    struct cdn_write_attempt w = {.op = "renameat2", .n = 2};
    const char *const parents[] = {"/workspace/repo", "/workspace", "/w", "/w/x"};
    for (size_t i = 0; i < sizeof parents / sizeof parents[0]; i++) {
        (void) snprintf(w.path[0], sizeof w.path[0], "%s", parents[i]);
        (void) snprintf(w.path[1], sizeof w.path[1], "/workspace/.orig");
        CHECK(cdn_write_is_protected(&w, 0, &protect));
        CHECK(!cdn_write_is_protected(&w, 1, &protect));
    }
    (void) snprintf(w.path[0], sizeof w.path[0], "/workspace/repo/solution.py");
    CHECK(!cdn_write_is_protected(&w, 0, &protect));
    (void) snprintf(w.path[0], sizeof w.path[0], "/w/.x"); /* '*' does not match a leading dot */
    CHECK(!cdn_write_is_protected(&w, 0, &protect));
    (void) snprintf(w.path[0], sizeof w.path[0], "/");
    CHECK(!cdn_write_is_protected(&w, 0, &protect));
    w.op = "unlinkat";
    (void) snprintf(w.path[0], sizeof w.path[0], "/workspace/repo");
    CHECK(cdn_write_is_protected(&w, 0, &protect));
    w.op = "openat"; /* creating a file in a parent moves nothing */
    CHECK(!cdn_write_is_protected(&w, 0, &protect));
    (void) snprintf(w.path[0], sizeof w.path[0], "/workspace/repo/tests/x");
    CHECK(cdn_write_is_protected(&w, 0, &protect));
}
