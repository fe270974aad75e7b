/* Layer application (src/oci/layer.c) over tars built here. Runs as root (as CI does): mknod,
 * chown and trusted.* xattrs are part of what is checked; without root it skips. */
#include "oci-tar.h"
#include "oci/layer.h"
#include "tap.h"

#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>

/* v2 file capability: cap_net_raw (bit 13) permitted, effective flag set */
static const char CAP_V2[20] = {0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00,
                                0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};

static char base[64];

static bool setup(void)
{
    if (geteuid() != 0) {
        tap_skip("needs root (mknod, chown, trusted.* xattrs)");
        return false;
    }
    snprintf(base, sizeof base, "/tmp/cordon-test-layer-XXXXXX");
    return mkdtemp(base) != NULL;
}

static void teardown(void)
{
    CHECK_EQ_INT(cdn_layer_rm_rf_at(AT_FDCWD, base), 0);
}

/* Apply blob into base/name (made empty); returns cdn_layer_apply's result. */
static int apply(int blob, const char *name, char diff_id[CDN_DIGEST_MAX], struct cdn_layer_stats *st,
                 struct cdn_error *err)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", base, name);
    mkdir(p, 0755);
    int dfd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r = cdn_layer_apply(blob, dfd, NULL, diff_id, st, err);
    close(dfd);
    return r;
}

static const char *at(const char *rel)
{
    static char p[4][256];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", base, rel);
    return p[i];
}

TEST(files_dirs_links_owners_modes_xattrs)
{
    if (!setup())
        return;
    int blob =
        TAR({.name = "./", .type = AE_IFDIR, .perm = 0755}, {.name = "./usr/", .type = AE_IFDIR},
            {.name = "./usr/bin/", .type = AE_IFDIR}, {.name = "./usr/bin/su", .perm = 04755, .data = "#!su"},
            {.name = "./usr/bin/sg", .perm = 02755, .data = "#!sg"},
            {.name = "./tmp", .type = AE_IFDIR, .perm = 01777},
            {.name = "./home/u/notes", .perm = 0600, .uid = 1000, .gid = 1000, .data = "mine"},
            {.name = "./usr/bin/ping",
             .data = "#!ping",
             .xattr = {{"security.capability", CAP_V2},
                       {"user.note", "kept"},
                       {"trusted.overlay.redirect", "/x"},
                       {"security.selinux", "system_u:object_r:bin_t"}},
             .xattr_len = {sizeof CAP_V2}},
            {.name = "./etc/passwd-link", .type = AE_IFLNK, .link = "/etc/passwd"},
            {.name = "./usr/bin/su-again", .hardlink = "./usr/bin/su"},
            {.name = "./run/fifo", .type = AE_IFIFO, .perm = 0620},
            {.name = "./sparse", .sparse_size = 1 << 24, .data = "head"});
    char want[CDN_DIGEST_MAX], diff_id[CDN_DIGEST_MAX];
    CHECK_EQ_INT(cdn_digest_fd(blob, "sha256", want, NULL, NULL), 0);
    lseek(blob, 0, SEEK_SET);
    struct cdn_error err = {0};
    struct cdn_layer_stats st;
    CHECK_EQ_INT(apply(blob, "l", diff_id, &st, &err), 0);
    CHECK_STREQ(err.msg, "");
    CHECK_STREQ(diff_id, want); /* the diff_id is the sha256 of the whole tar, padding included */
    CHECK_EQ_INT(st.tar_bytes, lseek(blob, 0, SEEK_END));
    CHECK_EQ_INT(st.files, 5);
    CHECK_EQ_INT(st.hardlinks, 1);
    CHECK_EQ_INT(st.symlinks, 1);
    CHECK_EQ_INT(st.fifos, 1);
    CHECK(st.xattrs_dropped >= 2); /* pax carries each twice: LIBARCHIVE.xattr and SCHILY.xattr */

    struct stat s;
    CHECK_EQ_INT(lstat(at("l/usr/bin/su"), &s), 0);
    CHECK_EQ_INT(s.st_mode & 07777, 04755);
    CHECK_EQ_INT(s.st_nlink, 2);
    CHECK_EQ_INT(s.st_mtime, 1600000000);
    CHECK_EQ_INT(lstat(at("l/usr/bin/sg"), &s), 0);
    CHECK_EQ_INT(s.st_mode & 07777, 02755);
    CHECK_EQ_INT(lstat(at("l/tmp"), &s), 0);
    CHECK_EQ_INT(s.st_mode & 07777, 01777);
    CHECK_EQ_INT(s.st_mtime, 1600000000); /* directory times are set after their children */
    CHECK_EQ_INT(lstat(at("l/home/u/notes"), &s), 0);
    CHECK_EQ_INT(s.st_uid, 1000);
    CHECK_EQ_INT(s.st_gid, 1000);
    CHECK_EQ_INT(s.st_mode & 07777, 0600);
    CHECK_EQ_INT(lstat(at("l/home/u"), &s), 0); /* made for the entry, as tar does */
    CHECK_EQ_INT(s.st_uid, 0);
    CHECK_EQ_INT(s.st_mode & 07777, 0755);

    char buf[64];
    CHECK_EQ_INT(lgetxattr(at("l/usr/bin/ping"), "security.capability", buf, sizeof buf), sizeof CAP_V2);
    CHECK(memcmp(buf, CAP_V2, sizeof CAP_V2) == 0);
    CHECK_EQ_INT(lgetxattr(at("l/usr/bin/ping"), "user.note", buf, sizeof buf), 4);
    CHECK_EQ_INT(lgetxattr(at("l/usr/bin/ping"), "trusted.overlay.redirect", buf, sizeof buf), -1);
    CHECK_EQ_INT(lgetxattr(at("l/usr/bin/ping"), "security.selinux", buf, sizeof buf), -1);

    CHECK_EQ_INT(lstat(at("l/etc/passwd-link"), &s), 0);
    CHECK(S_ISLNK(s.st_mode));
    ssize_t n = readlink(at("l/etc/passwd-link"), buf, sizeof buf - 1);
    CHECK_EQ_INT(n, 11);
    buf[n > 0 ? n : 0] = '\0';
    CHECK_STREQ(buf, "/etc/passwd");
    CHECK_EQ_INT(lstat(at("l/run/fifo"), &s), 0);
    CHECK(S_ISFIFO(s.st_mode));
    CHECK_EQ_INT(s.st_mode & 07777, 0620);
    CHECK_EQ_INT(lstat(at("l/sparse"), &s), 0);
    CHECK_EQ_INT(s.st_size, 1 << 24);
    CHECK(s.st_blocks * 512 < (1 << 20)); /* the hole stayed a hole */
    close(blob);
    teardown();
}

TEST(whiteouts_and_opaque_dirs)
{
    if (!setup())
        return;
    int blob = TAR({.name = "etc/.wh.gone"}, {.name = "opq/", .type = AE_IFDIR}, {.name = "opq/.wh.early"},
                   {.name = "opq/.wh..wh..opq"}, {.name = "opq/keep", .data = "k"}, {.name = "opq/.wh.late"},
                   {.name = "opq/sub/.wh.deep"}, {.name = "same", .data = "stays"}, {.name = ".wh.same"},
                   {.name = ".wh.later"}, {.name = "later", .data = "replaces the whiteout"},
                   {.name = "new/.wh..wh..opq"}, {.name = ".wh..wh.plnk/1234.5"});
    char diff_id[CDN_DIGEST_MAX];
    struct cdn_error err = {0};
    struct cdn_layer_stats st;
    CHECK_EQ_INT(apply(blob, "l", diff_id, &st, &err), 0);
    CHECK_STREQ(err.msg, "");
    struct stat s;
    CHECK_EQ_INT(lstat(at("l/etc/gone"), &s), 0);
    CHECK(S_ISCHR(s.st_mode) && s.st_rdev == makedev(0, 0));
    CHECK(lstat(at("l/etc/.wh.gone"), &s) < 0);
    char v[4];
    CHECK_EQ_INT(lgetxattr(at("l/opq"), "trusted.overlay.opaque", v, sizeof v), 1);
    CHECK_EQ_INT(v[0], 'y');
    CHECK_EQ_INT(lgetxattr(at("l/opq"), "user.overlay.opaque", v, sizeof v), 1);
    CHECK_EQ_INT(lgetxattr(at("l/new"), "user.overlay.opaque", v, sizeof v), 1);
    CHECK(lstat(at("l/opq/early"), &s) < 0); /* removed by the marker: it would be listed */
    CHECK(lstat(at("l/opq/late"), &s) < 0);
    CHECK(lstat(at("l/opq/sub/deep"), &s) < 0);
    CHECK_EQ_INT(lstat(at("l/opq/sub"), &s), 0);
    CHECK_EQ_INT(lstat(at("l/opq/keep"), &s), 0);
    CHECK_EQ_INT(lstat(at("l/same"), &s), 0);
    CHECK(S_ISREG(s.st_mode));
    CHECK_EQ_INT(lstat(at("l/later"), &s), 0);
    CHECK(S_ISREG(s.st_mode));
    CHECK(lstat(at("l/.wh..wh.plnk"), &s) < 0);
    CHECK_EQ_INT(st.whiteouts, 3); /* made: early and later were replaced afterwards */
    CHECK_EQ_INT(st.opaque_dirs, 2);
    close(blob);
    teardown();
}

/* In a private mount namespace: overlay lower layers made by cdn_layer_apply show what the
 * image means — a deleted file gone, an opaque directory hiding the lower one's children. */
static int check_merged(const char *opts)
{
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return 2;
    if (mount("overlay", at("m"), "overlay", MS_RDONLY, opts) < 0)
        return errno == EINVAL ? 3 : 2;
    struct stat s;
    int bad = 0;
    bad |= lstat(at("m/etc/gone"), &s) == 0;
    bad |= lstat(at("m/etc/kept"), &s) != 0;
    bad |= lstat(at("m/opq/old"), &s) == 0;
    bad |= lstat(at("m/opq/new"), &s) != 0;
    bad |= lstat(at("m/bin/tool"), &s) != 0;
    return bad;
}

TEST(several_layers_merge_in_overlayfs)
{
    if (!setup())
        return;
    int l1 = TAR({.name = "etc/gone", .data = "1"}, {.name = "etc/kept", .data = "1"},
                 {.name = "opq/old", .data = "1"});
    int l2 = TAR({.name = "etc/.wh.gone"}, {.name = "opq/.wh..wh..opq"}, {.name = "opq/new", .data = "2"});
    int l3 = TAR({.name = "bin/tool", .perm = 0755, .data = "3"});
    char d[CDN_DIGEST_MAX];
    CHECK_EQ_INT(apply(l1, "l1", d, NULL, NULL), 0);
    CHECK_EQ_INT(apply(l2, "l2", d, NULL, NULL), 0);
    CHECK_EQ_INT(apply(l3, "l3", d, NULL, NULL), 0);
    mkdir(at("m"), 0755);
    const char *modes[] = {"", ",userxattr"};
    for (size_t i = 0; i < 2; i++) {
        char opts[512];
        snprintf(opts, sizeof opts, "lowerdir=%s:%s:%s%s", at("l3"), at("l2"), at("l1"), modes[i]);
        pid_t pid = fork();
        if (pid == 0)
            _exit(check_merged(opts));
        int status;
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status));
        if (WEXITSTATUS(status) == 3 && i == 1)
            continue; /* a kernel without userxattr in the initial namespace */
        CHECK_EQ_INT(WEXITSTATUS(status), 0);
    }
    close(l1);
    close(l2);
    close(l3);
    teardown();
}

static void check_refused(int blob, const char *what)
{
    char d[CDN_DIGEST_MAX];
    struct cdn_error err = {0};
    int r = apply(blob, "l", d, NULL, &err);
    CHECK(r < 0);
    CHECK(strstr(err.msg, what) != NULL);
    if (!strstr(err.msg, what))
        printf("# got: %s\n", err.msg);
    close(blob);
    CHECK_EQ_INT(cdn_layer_rm_rf_at(AT_FDCWD, at("l")), 0);
}

TEST(escapes_devices_and_bad_names_are_refused)
{
    if (!setup())
        return;
    struct stat s;
    check_refused(TAR({.name = "ok", .data = "x"}, {.name = "../escaped", .data = "x"}),
                  "\"../escaped\": its name has a \"..\" component");
    CHECK(lstat(at("escaped"), &s) < 0);
    check_refused(TAR({.name = "a/../../escaped2", .data = "x"}), "\"..\" component");
    check_refused(TAR({.name = "/etc/cordon-test-abs", .data = "x"}), "absolute path");
    CHECK(lstat("/etc/cordon-test-abs", &s) < 0);
    check_refused(TAR({.name = "dev/null", .type = AE_IFCHR, .rmaj = 1, .rmin = 3}),
                  "\"dev/null\": a device node (char 1:3)");
    check_refused(TAR({.name = "dev/sda", .type = AE_IFBLK, .rmaj = 8}), "device node (block 8:0)");
    check_refused(TAR({.name = "x", .hardlink = "../../etc/shadow"}), "\"..\" component");
    check_refused(TAR({.name = "x", .hardlink = "not-here"}), "which this layer does not hold");
    check_refused(TAR({.name = "d/.wh..."}), "a whiteout without a name, or of . or ..");
    check_refused(TAR({.name = "./", .type = AE_IFLNK, .link = "/"}), "the layer's root is not a directory");
    check_refused(TAR({.name = "d", .type = AE_IFDIR}, {.name = "d", .data = "x"}),
                  "made this path a directory");
    char big[5000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    static char bigval[70000];
    check_refused(
        TAR({.name = "f", .data = "x", .xattr = {{"user.big", bigval}}, .xattr_len = {sizeof bigval}}),
        "xattr user.big: name or value over the kernel's limits");
    check_refused(TAR({.name = big, .data = "x"}), "more than 4095");
    /* a pax header over libarchive's 1 MiB cap is refused before anything holds it */
    char *huge = malloc(2u << 20);
    memset(huge, 'a', (2u << 20) - 1);
    huge[(2u << 20) - 1] = '\0';
    check_refused(TAR({.name = huge, .data = "x"}), "Special header too large");
    free(huge);
    teardown();
}

/* The classic: entry 1 is a symlink to a directory outside the layer, entry 2 writes through it.
 * Seen failing before the fix: with open_beneath() replaced by a plain openat() (following
 * symlinks, no RESOLVE_BENEATH), apply returned 0 and the write landed in base/outside/pwned. */
TEST(a_symlink_never_redirects_a_later_write)
{
    if (!setup())
        return;
    mkdir(at("outside"), 0755);
    struct stat s;
    check_refused(
        TAR({.name = "a", .type = AE_IFLNK, .link = at("outside")}, {.name = "a/pwned", .data = "x"}),
        "\"a/pwned\": its parent path goes through the symlink a");
    CHECK(lstat(at("outside/pwned"), &s) < 0);
    check_refused(
        TAR({.name = "b", .type = AE_IFLNK, .link = "../outside"}, {.name = "b/c/pwned", .data = "x"}),
        "goes through the symlink b");
    CHECK(lstat(at("outside/c"), &s) < 0);
    /* the final component: a file entry over an earlier symlink replaces the link, not its target */
    int blob = TAR({.name = "f", .type = AE_IFLNK, .link = "../outside/f"}, {.name = "f", .data = "x"});
    char d[CDN_DIGEST_MAX];
    CHECK_EQ_INT(apply(blob, "l", d, NULL, NULL), 0);
    CHECK(lstat(at("outside/f"), &s) < 0);
    CHECK_EQ_INT(lstat(at("l/f"), &s), 0);
    CHECK(S_ISREG(s.st_mode));
    close(blob);
    CHECK_EQ_INT(cdn_layer_rm_rf_at(AT_FDCWD, at("l")), 0);
    check_refused(
        TAR({.name = "s", .type = AE_IFLNK, .link = at("outside")}, {.name = "h", .hardlink = "s/x"}),
        "goes through the symlink s");
    teardown();
}

TEST(gzip_and_zstd_layers_give_the_uncompressed_diff_id)
{
    if (!setup())
        return;
    int tar = TAR({.name = "a", .data = "hello"}, {.name = "b/c", .data = "world"});
    char want[CDN_DIGEST_MAX], got[CDN_DIGEST_MAX];
    CHECK_EQ_INT(cdn_digest_fd(tar, "sha256", want, NULL, NULL), 0);
    lseek(tar, 0, SEEK_SET);
    const char *filters[] = {"gzip", "zstd"};
    const unsigned char magic[2][4] = {{0x1f, 0x8b}, {0x28, 0xb5, 0x2f, 0xfd}};
    for (size_t i = 0; i < 2; i++) {
        int z = tar_compress(tar, filters[i]);
        CHECK(z >= 0);
        unsigned char head[4];
        CHECK_EQ_INT(pread(z, head, 4, 0), 4);
        CHECK(memcmp(head, magic[i], i ? 4 : 2) == 0); /* really compressed */
        struct cdn_error err = {0};
        CHECK_EQ_INT(apply(z, "l", got, NULL, &err), 0);
        CHECK_STREQ(got, want);
        struct stat s;
        CHECK_EQ_INT(lstat(at("l/b/c"), &s), 0);
        CHECK_EQ_INT(s.st_size, 5);
        close(z);
        CHECK_EQ_INT(cdn_layer_rm_rf_at(AT_FDCWD, at("l")), 0);
    }
    close(tar);
    teardown();
}

TEST(garbage_empty_and_limits)
{
    if (!setup())
        return;
    int fd = memfd_create("junk", MFD_CLOEXEC);
    check_refused(dup(fd), "not a tar, gzip or zstd stream");
    CHECK_EQ_INT(write(fd, "this is not a tar at all, not even close", 40), 40);
    lseek(fd, 0, SEEK_SET);
    check_refused(fd, "not a valid tar");

    /* a tar followed by 2 MiB of zeros (a few KiB gzipped): the diff_id would hash it all */
    int tar = TAR({.name = "a", .data = "1"});
    lseek(tar, 0, SEEK_END);
    static char zeros[2u << 20];
    CHECK_EQ_INT(write(tar, zeros, sizeof zeros), sizeof zeros);
    lseek(tar, 0, SEEK_SET);
    int z = tar_compress(tar, "gzip");
    close(tar);
    check_refused(z, "bytes after the tar's end");

    int blob = TAR({.name = "a", .data = "1"}, {.name = "b", .data = "2"}, {.name = "c", .data = "3"});
    struct cdn_layer_limits lim = {.max_entries = 2};
    char d[CDN_DIGEST_MAX];
    struct cdn_error err = {0};
    mkdir(at("l"), 0755);
    int dfd = open(at("l"), O_RDONLY | O_DIRECTORY);
    CHECK_EQ_INT(cdn_layer_apply(blob, dfd, &lim, d, NULL, &err), -EFBIG);
    CHECK(strstr(err.msg, "more than 2 entries") != NULL);
    lseek(blob, 0, SEEK_SET);
    lim = (struct cdn_layer_limits){.max_bytes = 2};
    CHECK_EQ_INT(cdn_layer_apply(blob, dfd, &lim, d, NULL, &err), -EFBIG);
    CHECK(strstr(err.msg, "exceed the cap of 2 bytes") != NULL);
    close(dfd);
    close(blob);
    teardown();
}
