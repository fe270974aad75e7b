#include "shared/user.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char passwd[] = "root:x:0:0:root:/root:/bin/sh\n"
                             "app:x:1000:1000:App:/home/app:/bin/sh\n"
                             "bad:x:-1:0::/:/bin/sh\n"
                             "big:x:70000:0::/:/bin/sh\n"
                             "short:x\n"
                             "nohome:x:1001:1001\n";
static const char group[] = "root:x:0:\n"
                            "app:x:1000:\n"
                            "dev:x:2000:app,other\n"
                            "ops:x:2001:other,app\n"
                            "huge:x:99999:app\n";

static const struct cdn_user_db db = {passwd, sizeof passwd - 1, group, sizeof group - 1};

TEST(syntax)
{
    const char *good[] = {"app", "1000", "app:dev", "1000:1000", "a.b-c_d", "0", NULL};
    const char *bad[] = {"",          ":",     "app:",    ":dev", "-app", "a b",
                         "app:dev:x", "99999", "0:65536", "a/b",  NULL};
    for (int i = 0; good[i]; i++)
        CHECK_EQ_INT(cdn_user_check(good[i], NULL), 0);
    for (int i = 0; bad[i]; i++) {
        struct cdn_error err = {0};
        CHECK(cdn_user_check(bad[i], &err) < 0);
        CHECK_STREQ(err.field, "user");
    }
    CHECK_EQ_INT(cdn_user_numeric("1000:1000"), 1);
    CHECK_EQ_INT(cdn_user_numeric("1000"), 1);
    CHECK_EQ_INT(cdn_user_numeric("app:1"), 0);
}

TEST(by_name)
{
    struct cdn_user u;
    CHECK_EQ_INT(cdn_user_resolve("app", &db, 65535, &u, NULL), 0);
    CHECK_EQ_INT(u.uid, 1000);
    CHECK_EQ_INT(u.gid, 1000);
    CHECK_STREQ(u.home, "/home/app");
    CHECK_EQ_INT(u.n_groups, 3); /* 1000, dev, ops; huge is outside the ids */
    CHECK_EQ_INT(u.groups[0], 1000);
    CHECK_EQ_INT(u.groups[1], 2000);
    CHECK_EQ_INT(u.groups[2], 2001);
    CHECK_EQ_INT(cdn_user_resolve("app:dev", &db, 65535, &u, NULL), 0);
    CHECK_EQ_INT(u.gid, 2000);
    CHECK_EQ_INT(u.groups[0], 2000);
    CHECK_EQ_INT(cdn_user_resolve("nohome", &db, 65535, &u, NULL), 0);
    CHECK_STREQ(u.home, "");
}

TEST(numeric)
{
    struct cdn_user u;
    CHECK_EQ_INT(cdn_user_resolve("1000", &db, 65535, &u, NULL), 0);
    CHECK_EQ_INT(u.gid, 1000);
    CHECK_STREQ(u.home, "/home/app");
    CHECK_EQ_INT(cdn_user_resolve("1234:5", &db, 65535, &u, NULL), 0);
    CHECK_EQ_INT(u.uid, 1234);
    CHECK_EQ_INT(u.gid, 5);
    CHECK_EQ_INT(u.n_groups, 1);
    CHECK_EQ_INT(cdn_user_resolve("1234", &db, 65535, &u, NULL), 0);
    CHECK_EQ_INT(u.gid, 0); /* Docker's rule: no entry, no group given */
    struct cdn_user_db none = {0};
    CHECK_EQ_INT(cdn_user_resolve("7:7", &none, 65535, &u, NULL), 0);
    CHECK_EQ_INT(u.uid, 7);
    CHECK_EQ_INT(cdn_user_resolve("2000", &db, 999, &u, NULL), -ERANGE);
}

TEST(refused)
{
    struct cdn_user u = {.uid = 42};
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_user_resolve("nobody", &db, 65535, &u, &err), -ENOENT);
    CHECK_STREQ(err.field, "user");
    CHECK(strstr(err.msg, "nobody") != NULL);
    CHECK_EQ_INT(u.uid, 42); /* untouched on failure */
    CHECK_EQ_INT(cdn_user_resolve("bad", &db, 65535, &u, NULL), -EINVAL);
    CHECK_EQ_INT(cdn_user_resolve("big", &db, 65535, &u, NULL), -ERANGE);
    CHECK_EQ_INT(cdn_user_resolve("app", &db, 999, &u, NULL), -ERANGE);
    CHECK_EQ_INT(cdn_user_resolve("app:nogroup", &db, 65535, &u, NULL), -ENOENT);
    CHECK_EQ_INT(cdn_user_resolve("short", &db, 65535, &u, NULL), -ENOENT);
}

TEST(bounds)
{
    struct cdn_user u;
    size_t n = CDN_USER_LINE_MAX + 100;
    char *line = malloc(n + 32);
    memset(line, 'a', n);
    memcpy(line + n, ":x:1:1::/:\n", 12);
    struct cdn_user_db long_line = {line, strlen(line), NULL, 0};
    CHECK_EQ_INT(cdn_user_resolve("app", &long_line, 65535, &u, NULL), -E2BIG);
    free(line);
    /* 100 groups naming app: more than CDN_USER_MAX_GROUPS. */
    char *g = malloc(100 * 32);
    size_t off = 0;
    for (int i = 0; i < 100; i++)
        off += (size_t) sprintf(g + off, "g%d:x:%d:app\n", i, 3000 + i);
    struct cdn_user_db many = {passwd, sizeof passwd - 1, g, off};
    CHECK_EQ_INT(cdn_user_resolve("app", &many, 65535, &u, NULL), -E2BIG);
    free(g);
}

TEST(names)
{
    struct cdn_user_names n;
    CHECK_EQ_INT(cdn_user_names_parse(passwd, sizeof passwd - 1, &n), 0);
    CHECK_STREQ(cdn_user_names_find(&n, 1000), "app");
    CHECK_STREQ(cdn_user_names_find(&n, 0), "root");
    CHECK_STREQ(cdn_user_names_find(&n, 1001), "nohome");
    CHECK(cdn_user_names_find(&n, 4242) == NULL);
    CHECK(cdn_user_names_find(&n, 70000) == NULL); /* past the ids: "big" is no one's name */
    cdn_user_names_free(&n);
    CHECK_EQ_INT(cdn_user_names_parse(group, sizeof group - 1, &n), 0);
    CHECK_STREQ(cdn_user_names_find(&n, 2001), "ops");
    cdn_user_names_free(&n);
    CHECK_EQ_INT(cdn_user_names_parse(NULL, 0, &n), 0);
    CHECK(n.n == 0 && cdn_user_names_find(&n, 0) == NULL);
    static const char odd[] = ":x:7:7\n"                                  /* no name: skipped */
                              "a-name-of-thirty-three-bytes-long:x:7:7\n" /* too long: skipped */
                              "seven:x:7:7\nlater:x:7:7\nsix:x:6:6\n";    /* the first of an id */
    CHECK_EQ_INT(cdn_user_names_parse(odd, sizeof odd - 1, &n), 0);
    CHECK_STREQ(cdn_user_names_find(&n, 7), "seven");
    CHECK_STREQ(cdn_user_names_find(&n, 6), "six");
    CHECK_EQ_INT(n.n, 2);
    cdn_user_names_free(&n);
}

TEST(map_max)
{
    uint32_t m;
    CHECK_EQ_INT(cdn_user_map_max("         0     100000      65536\n", &m), 0);
    CHECK_EQ_INT(m, 65535);
    CHECK_EQ_INT(cdn_user_map_max("0 1000 1\n", &m), 0);
    CHECK_EQ_INT(m, 0);
    CHECK(cdn_user_map_max("1 1000 1\n", &m) < 0);
}

TEST(read_file_refuses)
{
    char dir[] = "/tmp/test-user-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int root = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    CHECK(root >= 0);
    CHECK_EQ_INT(mkdirat(root, "etc", 0755), 0);
    char *buf = NULL;
    size_t len = 1;
    CHECK_EQ_INT(cdn_user_read_file(root, "passwd", &buf, &len, NULL), 0); /* absent: empty */
    CHECK(buf == NULL && len == 0);
    CHECK_EQ_INT(mkfifoat(root, "etc/passwd", 0644), 0); /* must not block */
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_user_read_file(root, "passwd", &buf, &len, &err), -EPERM);
    CHECK_EQ_INT(unlinkat(root, "etc/passwd", 0), 0);
    CHECK_EQ_INT(symlinkat("/proc/self/environ", root, "etc/passwd"), 0); /* stays in root: ENOENT there */
    CHECK_EQ_INT(cdn_user_read_file(root, "passwd", &buf, &len, NULL), 0);
    CHECK(buf == NULL);
    CHECK_EQ_INT(unlinkat(root, "etc/passwd", 0), 0);
    CHECK_EQ_INT(symlinkat("../../../../etc/hostname", root, "etc/passwd"), 0);
    CHECK_EQ_INT(cdn_user_read_file(root, "passwd", &buf, &len, NULL), 0);
    CHECK(buf == NULL);
    CHECK_EQ_INT(unlinkat(root, "etc/passwd", 0), 0);
    int fd = openat(root, "etc/passwd", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    CHECK_EQ_INT(ftruncate(fd, (off_t) CDN_USER_FILE_MAX + 1), 0);
    close(fd);
    CHECK_EQ_INT(cdn_user_read_file(root, "passwd", &buf, &len, NULL), -EFBIG);
    CHECK_EQ_INT(unlinkat(root, "etc/passwd", 0), 0);
    fd = openat(root, "etc/passwd", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    CHECK(write(fd, passwd, sizeof passwd - 1) == (ssize_t) sizeof passwd - 1);
    close(fd);
    struct cdn_user u;
    CHECK_EQ_INT(cdn_user_resolve_at(root, "app", 65535, &u, NULL), 0);
    CHECK_EQ_INT(u.uid, 1000);
    (void) unlinkat(root, "etc/passwd", 0);
    (void) unlinkat(root, "etc", AT_REMOVEDIR);
    close(root);
    (void) rmdir(dir);
}
