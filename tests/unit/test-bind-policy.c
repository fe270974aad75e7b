/* Bind sources (core/bind-policy.h): what the default policy refuses, what bind-allow adds and
 * takes away, and that a source is judged (and kept) as resolved. */
#include "core/bind-policy.h"
#include "tap.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char scratch[64]; /* a directory of this test's, /tmp/cordon-bp-XXXXXX */

static void make_scratch(void)
{
    if (!scratch[0]) {
        (void) snprintf(scratch, sizeof scratch, "/tmp/cordon-bp-XXXXXX");
        if (!mkdtemp(scratch))
            abort();
    }
}

/* Judge one bind of source under p; the error's errno (0: accepted). *out: the source kept. */
static int judge(const struct cdn_bind_policy *p, const char *source, bool readonly, char *out, size_t size,
                 struct cdn_error *err)
{
    struct cdn_spec s;
    *err = (struct cdn_error){0};
    if (cdn_spec_init(&s) < 0 || cdn_spec_add_mount(&s, source, "/data", readonly, err) < 0)
        abort();
    int r = cdn_bind_policy_check(p, &s, err);
    if (out)
        (void) snprintf(out, size, "%s", s.mounts[0].source);
    cdn_spec_free(&s);
    return -r;
}

static void path(char *buf, size_t size, const char *leaf)
{
    make_scratch();
    (void) snprintf(buf, size, "%s/%s", scratch, leaf);
}

TEST(default_refuses_kernel_and_cordon_dirs)
{
    struct cdn_bind_policy p;
    struct cdn_error err;
    CHECK_EQ_INT(cdn_bind_policy_init(&p), 0);
    const char *refused[] = {"/",           "/proc",    "/proc/self", "/sys",
                             "/sys/fs",     "/dev",     "/dev/shm",   "/var/lib/cordon",
                             "/run/cordon", "/var/lib", "/run",       "/tmp/../proc"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        if (access(refused[i], F_OK) < 0)
            continue; /* a host without it: ENOENT says so, not the policy */
        CHECK_EQ_INT(judge(&p, refused[i], true, NULL, 0, &err), EACCES);
        CHECK_STREQ(err.field, "mounts[0].source");
    }
    char d[128], kept[256];
    path(d, sizeof d, "data");
    CHECK(mkdir(d, 0755) == 0);
    CHECK_EQ_INT(judge(&p, d, false, kept, sizeof kept, &err), 0);
    CHECK_STREQ(kept, d);
    CHECK_EQ_INT(judge(&p, "/no/such/source", false, NULL, 0, &err), ENOENT);
    CHECK_STREQ(err.field, "mounts[0].source");
    cdn_bind_policy_free(&p);
}

TEST(symlinks_and_dotdot_are_resolved_first)
{
    struct cdn_bind_policy p;
    struct cdn_error err;
    char link[128], kept[256], dotted[160], d[128];
    CHECK_EQ_INT(cdn_bind_policy_init(&p), 0);
    path(link, sizeof link, "to-proc");
    CHECK(symlink("/proc/self", link) == 0);
    CHECK_EQ_INT(judge(&p, link, true, NULL, 0, &err), EACCES);
    CHECK(strstr(err.msg, "/proc") != NULL);
    path(d, sizeof d, "plain");
    CHECK(mkdir(d, 0755) == 0);
    (void) snprintf(dotted, sizeof dotted, "%s/../%s/plain", scratch, strrchr(scratch, '/') + 1);
    CHECK_EQ_INT(judge(&p, dotted, true, kept, sizeof kept, &err), 0);
    CHECK_STREQ(kept, d); /* the resolved path replaces what was asked: the tier binds what was judged */
    cdn_bind_policy_free(&p);
}

TEST(allowlist_restricts_and_extends)
{
    struct cdn_bind_policy p;
    struct cdn_error err;
    char a[128], b[128], deep[160];
    path(a, sizeof a, "allowed");
    path(b, sizeof b, "other");
    CHECK(mkdir(a, 0755) == 0 && mkdir(b, 0755) == 0);
    (void) snprintf(deep, sizeof deep, "%s/sub", a);
    CHECK(mkdir(deep, 0755) == 0);
    CHECK_EQ_INT(cdn_bind_policy_init(&p), 0);
    CHECK_EQ_INT(cdn_bind_policy_allow(&p, a, &err), 0);
    CHECK_EQ_INT(judge(&p, a, false, NULL, 0, &err), 0);
    CHECK_EQ_INT(judge(&p, deep, false, NULL, 0, &err), 0);
    CHECK_EQ_INT(judge(&p, b, false, NULL, 0, &err), EACCES);
    CHECK(strstr(err.msg, "bind-allow") != NULL);
    /* Naming a place beneath a refused directory allows that place, and only it. */
    CHECK_EQ_INT(cdn_bind_policy_allow(&p, "/dev/shm", &err), 0);
    CHECK_EQ_INT(judge(&p, "/dev/shm", false, NULL, 0, &err), 0);
    CHECK_EQ_INT(judge(&p, "/dev/null", false, NULL, 0, &err), EACCES);
    /* A kernel filesystem is never bound, even where allowed. */
    CHECK_EQ_INT(cdn_bind_policy_allow(&p, "/proc", &err), 0);
    CHECK_EQ_INT(judge(&p, "/proc/self", true, NULL, 0, &err), EACCES);
    CHECK(strstr(err.msg, "proc filesystem") != NULL);
    CHECK_EQ_INT(cdn_bind_policy_allow(&p, "relative", &err), -EINVAL);
    CHECK_EQ_INT(cdn_bind_policy_allow(&p, "/no/such/dir", &err), -ENOENT);
    cdn_bind_policy_free(&p);
}

TEST(read_only_entries)
{
    struct cdn_bind_policy p;
    struct cdn_error err;
    char a[128], arg[160];
    path(a, sizeof a, "ro");
    CHECK(mkdir(a, 0755) == 0);
    (void) snprintf(arg, sizeof arg, "%s:ro", a);
    CHECK_EQ_INT(cdn_bind_policy_init(&p), 0);
    CHECK_EQ_INT(cdn_bind_policy_allow(&p, arg, &err), 0);
    CHECK_EQ_INT(judge(&p, a, true, NULL, 0, &err), 0);
    CHECK_EQ_INT(judge(&p, a, false, NULL, 0, &err), EACCES);
    CHECK(strstr(err.msg, "read-only") != NULL);
    cdn_bind_policy_free(&p);
}

TEST(extra_refusals_and_the_opener)
{
    struct cdn_bind_policy p;
    struct cdn_error err;
    char own[128], parent[128], link[128];
    path(own, sizeof own, "state/sandboxes");
    path(parent, sizeof parent, "state");
    CHECK(mkdir(parent, 0755) == 0 && mkdir(own, 0700) == 0);
    CHECK_EQ_INT(cdn_bind_policy_init(&p), 0);
    CHECK_EQ_INT(cdn_bind_policy_deny(&p, own), 0);
    CHECK_EQ_INT(judge(&p, parent, true, NULL, 0, &err), EACCES); /* contains it */
    CHECK_EQ_INT(judge(&p, own, true, NULL, 0, &err), EACCES);
    cdn_bind_policy_free(&p);
    /* The tiers' opener follows no symlink anywhere on the way. */
    int fd = cdn_bind_source_open(parent);
    CHECK(fd >= 0);
    if (fd >= 0)
        (void) close(fd);
    path(link, sizeof link, "state-link");
    CHECK(symlink(parent, link) == 0);
    CHECK_EQ_INT(cdn_bind_source_open(link), -ELOOP);
    char via[200];
    (void) snprintf(via, sizeof via, "%s/sandboxes", link);
    CHECK_EQ_INT(cdn_bind_source_open(via), -ELOOP);
}

static int remove_one(const char *p, const struct stat *st, int type, struct FTW *ftw)
{
    (void) st, (void) type, (void) ftw;
    return remove(p);
}

TEST(zz_cleanup)
{
    if (scratch[0])
        CHECK(nftw(scratch, remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0);
}
