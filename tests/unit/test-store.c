/* The image store (src/oci/store.c, store-images.c): blobs, layers unpacked once, image records,
 * refs, prune. Runs as root (as CI does); skips otherwise. */
#include "oci-tar.h"
#include "oci/store.h"
#include "tap.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static char state[64];

static bool setup(void)
{
    if (geteuid() != 0) {
        tap_skip("needs root (the store keeps image owners and devices)");
        return false;
    }
    snprintf(state, sizeof state, "/tmp/cordon-test-store-XXXXXX");
    return mkdtemp(state) != NULL;
}

static void teardown(void)
{
    CHECK_EQ_INT(cdn_layer_rm_rf_at(AT_FDCWD, state), 0);
}

static const char *at(const char *rel)
{
    static char p[4][512];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/images/store/%s", state, rel);
    return p[i];
}

/* Entries in a store directory (".", ".." not counted); -1 if it cannot be read. */
static int count(const char *rel)
{
    DIR *d = opendir(at(rel));
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *de; (de = readdir(d));)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Store fd's content as a blob; its digest in out. */
static void put_fd(struct cdn_store *s, int fd, char out[CDN_DIGEST_MAX])
{
    CHECK_EQ_INT(cdn_digest_fd(fd, "sha256", out, NULL, NULL), 0);
    struct cdn_blob_writer w;
    CHECK_EQ_INT(cdn_store_blob_begin(s, &w, NULL), 0);
    char buf[65536];
    lseek(fd, 0, SEEK_SET);
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
        CHECK_EQ_INT(write(w.fd, buf, (size_t) n), n);
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_store_blob_commit(s, &w, out, UINT64_MAX, &err), 0);
    lseek(fd, 0, SEEK_SET);
}

TEST(blobs_are_verified_before_they_appear)
{
    if (!setup())
        return;
    _cleanup_store_ struct cdn_store *s = NULL;
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_store_open(state, &s, &err), 0);
    struct stat st;
    CHECK_EQ_INT(stat(cdn_store_path(s), &st), 0);
    CHECK_EQ_INT(st.st_mode & 07777, 0700);
    const char *abc = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    CHECK_EQ_INT(cdn_store_blob_has(s, abc), 0);
    CHECK_EQ_INT(cdn_store_blob_put(s, "abd", 3, abc, &err), -EBADMSG);
    CHECK(strstr(err.msg, "digest mismatch") != NULL);
    CHECK_EQ_INT(cdn_store_blob_has(s, abc), 0);
    CHECK_EQ_INT(count("tmp"), 0);
    CHECK_EQ_INT(cdn_store_blob_put(s, "abc", 3, abc, &err), 0);
    CHECK_EQ_INT(cdn_store_blob_has(s, abc), 1);
    int fd = cdn_store_blob_open(s, abc, &err);
    char buf[8] = "";
    CHECK(fd >= 0);
    CHECK_EQ_INT(read(fd, buf, sizeof buf), 3);
    CHECK(memcmp(buf, "abc", 3) == 0);
    close(fd);
    CHECK_EQ_INT(cdn_store_blob_has(s, "sha256:../../etc/passwd"), -EINVAL);
    CHECK_EQ_INT(count("tmp"), 0);
    teardown();
}

TEST(layers_unpack_once_by_diff_id_and_are_checked)
{
    if (!setup())
        return;
    _cleanup_store_ struct cdn_store *s = NULL;
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_store_open(state, &s, &err), 0);
    int tar = TAR({.name = "bin/", .type = AE_IFDIR}, {.name = "bin/sh", .perm = 0755, .data = "#!"});
    char diff_id[CDN_DIGEST_MAX], gz[CDN_DIGEST_MAX], zst[CDN_DIGEST_MAX], got[CDN_DIGEST_MAX], path[4096];
    CHECK_EQ_INT(cdn_digest_fd(tar, "sha256", diff_id, NULL, NULL), 0);
    int gzfd = tar_compress(tar, "gzip"), zfd = tar_compress(tar, "zstd");
    put_fd(s, gzfd, gz);
    put_fd(s, zfd, zst);
    CHECK(strcmp(gz, zst) != 0);

    /* a config that lies about the diff_id: refused, nothing kept */
    const char *wrong = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    CHECK_EQ_INT(cdn_store_layer_ensure(s, gz, wrong, NULL, got, path, &err), -EBADMSG);
    CHECK(strstr(err.msg, "the image config says") != NULL);
    CHECK_EQ_INT(count("layers/sha256"), 0);
    CHECK_EQ_INT(count("tmp"), 0);

    CHECK_EQ_INT(cdn_store_layer_ensure(s, gz, diff_id, NULL, got, path, &err), 1);
    CHECK_STREQ(got, diff_id);
    char want[4096];
    snprintf(want, sizeof want, "%s/layers/sha256/%s", cdn_store_path(s), cdn_digest_hex(diff_id));
    CHECK_STREQ(path, want);
    struct stat st;
    snprintf(want, sizeof want, "%s/bin/sh", path);
    CHECK_EQ_INT(stat(want, &st), 0);
    /* again without a diff_id: found through the blob's record, not unpacked again */
    CHECK_EQ_INT(cdn_store_layer_ensure(s, gz, "", NULL, got, path, &err), 0);
    CHECK_STREQ(got, diff_id);
    /* the zstd blob of the same tar, no diff_id given: unpacked to learn it, stored once */
    CHECK_EQ_INT(cdn_store_layer_ensure(s, zst, "", NULL, got, path, &err), 1);
    CHECK_STREQ(got, diff_id);
    CHECK_EQ_INT(count("layers/sha256"), 1);
    CHECK_EQ_INT(count("tmp"), 0);
    CHECK_EQ_INT(cdn_store_layer_has(s, diff_id, NULL), 1);
    close(tar);
    close(gzfd);
    close(zfd);
    teardown();
}

TEST(a_refused_layer_leaves_nothing)
{
    if (!setup())
        return;
    _cleanup_store_ struct cdn_store *s = NULL;
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_store_open(state, &s, &err), 0);
    char d[CDN_DIGEST_MAX], got[CDN_DIGEST_MAX];
    int bad[] = {
        TAR({.name = "etc/ok", .data = "1"}, {.name = "../../escape", .data = "x"}),
        TAR({.name = "etc/ok", .data = "1"}, {.name = "/abs", .data = "x"}),
        TAR({.name = "etc/ok", .data = "1"}, {.name = "dev/mem", .type = AE_IFCHR, .rmaj = 1, .rmin = 1})};
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        put_fd(s, bad[i], d);
        CHECK_EQ_INT(cdn_store_layer_ensure(s, d, "", NULL, got, NULL, &err), -EINVAL);
        CHECK(strstr(err.msg, "layer entry") != NULL);
        CHECK_EQ_INT(count("layers/sha256"), 0);
        CHECK_EQ_INT(count("tmp"), 0);
        close(bad[i]);
    }
    struct stat st;
    CHECK(stat(at("escape"), &st) < 0);
    CHECK(lstat("/abs", &st) < 0);
    teardown();
}

/* A layer big enough that unpacking it takes a while. */
static int big_layer(int files)
{
    int fd = memfd_create("big", MFD_CLOEXEC);
    struct archive *a = tar_open(fd);
    static char data[4096];
    memset(data, 'x', sizeof data - 1);
    for (int i = 0; i < files; i++) {
        char name[64];
        snprintf(name, sizeof name, "d%d/f%d", i % 50, i);
        tar_add(a, &(struct tar_ent){.name = name, .data = data});
    }
    archive_write_close(a);
    archive_write_free(a);
    lseek(fd, 0, SEEK_SET);
    return fd;
}

/* Seen failing without the flock on locks/<blob> (the lock call replaced by nothing): both
 * children unpacked ("unpacked == 1 (2 != 1)"), the rename only hid the duplicate work. */
TEST(two_concurrent_ensures_unpack_once)
{
    if (!setup())
        return;
    _cleanup_store_ struct cdn_store *s = NULL;
    CHECK_EQ_INT(cdn_store_open(state, &s, NULL), 0);
    int tar = big_layer(1000);
    char d[CDN_DIGEST_MAX];
    put_fd(s, tar, d);
    int go[2];
    CHECK_EQ_INT(pipe(go), 0);
    pid_t kids[2];
    for (int i = 0; i < 2; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            char c;
            close(go[1]);
            (void) !read(go[0], &c, 1); /* both start together */
            struct cdn_store *mine = NULL;
            char got[CDN_DIGEST_MAX];
            if (cdn_store_open(state, &mine, NULL) < 0)
                _exit(10);
            int r = cdn_store_layer_ensure(mine, d, "", NULL, got, NULL, NULL);
            _exit(r < 0 ? 11 : r); /* 1: unpacked it, 0: reused the other's */
        }
    }
    close(go[0]);
    close(go[1]);
    int unpacked = 0;
    for (int i = 0; i < 2; i++) {
        int status;
        CHECK_EQ_INT(waitpid(kids[i], &status, 0), kids[i]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) <= 1);
        unpacked += WEXITSTATUS(status);
    }
    CHECK_EQ_INT(unpacked, 1);
    CHECK_EQ_INT(count("layers/sha256"), 1);
    CHECK_EQ_INT(count("tmp"), 0);
    close(tar);
    teardown();
}

TEST(a_killed_unpack_leaves_nothing_visible)
{
    if (!setup())
        return;
    _cleanup_store_ struct cdn_store *s = NULL;
    CHECK_EQ_INT(cdn_store_open(state, &s, NULL), 0);
    int tar = big_layer(3000);
    char d[CDN_DIGEST_MAX], got[CDN_DIGEST_MAX];
    put_fd(s, tar, d);
    cdn_store_free(TAKE_PTR(s)); /* the reopen below must be the store's only user to sweep */
    pid_t kid = fork();
    if (kid == 0) {
        struct cdn_store *mine = NULL;
        if (cdn_store_open(state, &mine, NULL) < 0)
            _exit(10);
        _exit(cdn_store_layer_ensure(mine, d, "", NULL, got, NULL, NULL) < 0 ? 11 : 0);
    }
    /* wait until the unpack is under way in tmp/, then SIGKILL it */
    bool seen = false;
    for (int i = 0; i < 2000 && !seen; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/images/store/tmp", state);
        DIR *dir = opendir(p);
        for (struct dirent *de; dir && (de = readdir(dir));)
            seen |= strncmp(de->d_name, "layer-", 6) == 0;
        if (dir)
            closedir(dir);
        if (!seen)
            usleep(1000);
    }
    CHECK(seen);
    kill(kid, SIGKILL);
    int status;
    CHECK_EQ_INT(waitpid(kid, &status, 0), kid);
    CHECK(WIFSIGNALED(status)); /* killed mid-unpack, not finished */
    CHECK_EQ_INT(count("layers/sha256"), 0);
    CHECK(count("tmp") >= 1);
    CHECK_EQ_INT(cdn_store_open(state, &s, NULL), 0);
    CHECK_EQ_INT(count("tmp"), 0); /* swept by the next opener */
    CHECK_EQ_INT(cdn_store_layer_ensure(s, d, "", NULL, got, NULL, NULL), 1);
    CHECK_EQ_INT(count("layers/sha256"), 1);
    close(tar);
    teardown();
}

struct seen {
    int images, refs;
    char manifest[CDN_DIGEST_MAX];
};

static int on_image(const struct cdn_image_record *r, void *data)
{
    struct seen *sn = data;
    sn->images++;
    snprintf(sn->manifest, sizeof sn->manifest, "%s", r->manifest);
    return 0;
}

static int on_ref(const char *ref, const char *manifest, void *data)
{
    (void) ref;
    (void) manifest;
    ((struct seen *) data)->refs++;
    return 0;
}

static bool keep_marked(const char *kind, const char *digest, void *data)
{
    return strcmp(kind, "layer") == 0 && strcmp(digest, data) == 0;
}

TEST(records_refs_remove_and_prune)
{
    if (!setup())
        return;
    _cleanup_store_ struct cdn_store *s = NULL;
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_store_open(state, &s, &err), 0);
    int t1 = TAR({.name = "a", .data = "1"}), t2 = TAR({.name = "b", .data = "2"}),
        t3 = TAR({.name = "c", .data = "3"});
    char b1[CDN_DIGEST_MAX], b2[CDN_DIGEST_MAX], b3[CDN_DIGEST_MAX];
    char l1[CDN_DIGEST_MAX], l2[CDN_DIGEST_MAX], l3[CDN_DIGEST_MAX];
    put_fd(s, t1, b1);
    put_fd(s, t2, b2);
    put_fd(s, t3, b3);
    CHECK_EQ_INT(cdn_store_layer_ensure(s, b1, "", NULL, l1, NULL, &err), 1);
    CHECK_EQ_INT(cdn_store_layer_ensure(s, b2, "", NULL, l2, NULL, &err), 1);
    CHECK_EQ_INT(cdn_store_layer_ensure(s, b3, "", NULL, l3, NULL, &err), 1);
    const char *cfg = "{}", *man = "{\"schemaVersion\":2}";
    char cfgd[CDN_DIGEST_MAX], mand[CDN_DIGEST_MAX];
    struct cdn_hasher *h = NULL;
    cdn_hasher_new("sha256", &h);
    cdn_hasher_update(h, cfg, strlen(cfg));
    cdn_hasher_digest(h, cfgd);
    cdn_hasher_free(h);
    cdn_hasher_new("sha256", &h);
    cdn_hasher_update(h, man, strlen(man));
    cdn_hasher_digest(h, mand);
    cdn_hasher_free(h);
    CHECK_EQ_INT(cdn_store_blob_put(s, cfg, strlen(cfg), cfgd, &err), 0);
    CHECK_EQ_INT(cdn_store_blob_put(s, man, strlen(man), mand, &err), 0);

    char diff_ids[2][CDN_DIGEST_MAX], blobs[2][CDN_DIGEST_MAX];
    strcpy(diff_ids[0], l1);
    strcpy(diff_ids[1], l2);
    strcpy(blobs[0], b1);
    strcpy(blobs[1], b2);
    struct cdn_image_record rec = {
        .n_layers = 2, .diff_ids = diff_ids, .blobs = blobs, .os = "linux", .arch = "amd64", .size = 1234};
    strcpy(rec.manifest, mand);
    strcpy(rec.config, cfgd);
    CHECK_EQ_INT(cdn_store_image_put(s, &rec, &err), 0);
    CHECK_EQ_INT(cdn_store_ref_set(s, "127.0.0.1:5000/team/task:1", mand, &err), 0);
    CHECK_EQ_INT(cdn_store_ref_set(s, ".hidden/../x@sha256:00", mand, &err), 0);

    struct cdn_image_record back = {0};
    CHECK_EQ_INT(cdn_store_image_get(s, mand, &back, &err), 0);
    CHECK_EQ_INT(back.n_layers, 2);
    CHECK_STREQ(back.diff_ids[1], l2);
    CHECK_STREQ(back.blobs[0], b1);
    CHECK_STREQ(back.arch, "amd64");
    CHECK_EQ_INT(back.size, 1234);
    CHECK(back.created > 0);
    cdn_image_record_done(&back);
    char got[CDN_DIGEST_MAX];
    CHECK_EQ_INT(cdn_store_ref_get(s, "127.0.0.1:5000/team/task:1", got, &err), 0);
    CHECK_STREQ(got, mand);
    CHECK_EQ_INT(cdn_store_ref_get(s, "127.0.0.1:5000/team/task:2", got, &err), -ENOENT);
    struct seen sn = {0};
    CHECK_EQ_INT(cdn_store_image_list(s, on_image, &sn, &err), 0);
    CHECK_EQ_INT(cdn_store_ref_list(s, on_ref, &sn, &err), 0);
    CHECK_EQ_INT(sn.images, 1);
    CHECK_EQ_INT(sn.refs, 2);
    CHECK_EQ_INT(count("refs"), 2); /* escaped: no "..", no subdirectory */

    /* prune: layer 3 and blob 3 are nobody's; l2 is only kept by the in-use hook later */
    uint64_t before, after, freed;
    CHECK_EQ_INT(cdn_store_size(s, &before, &err), 0);
    CHECK_EQ_INT(cdn_store_prune(s, NULL, NULL, &freed, &err), 0);
    CHECK_EQ_INT(cdn_store_size(s, &after, &err), 0);
    CHECK(freed > 0 && after < before);
    CHECK_EQ_INT(cdn_store_layer_has(s, l3, NULL), 0);
    CHECK_EQ_INT(cdn_store_blob_has(s, b3), 0);
    CHECK_EQ_INT(cdn_store_layer_has(s, l1, NULL), 1);
    CHECK_EQ_INT(cdn_store_blob_has(s, mand), 1);

    /* a damaged record stops the prune: its layers must not look unreferenced */
    char rec_path[600], saved[4096];
    snprintf(rec_path, sizeof rec_path, "images/sha256/%s.json", cdn_digest_hex(mand));
    FILE *f = fopen(at(rec_path), "r+");
    CHECK(f != NULL);
    size_t len = fread(saved, 1, sizeof saved, f);
    rewind(f);
    fputs("[not json", f);
    fclose(f);
    CHECK_EQ_INT(cdn_store_prune(s, NULL, NULL, NULL, &err), -EBADMSG);
    CHECK_EQ_INT(cdn_store_layer_has(s, l1, NULL), 1);
    f = fopen(at(rec_path), "w");
    CHECK_EQ_INT(fwrite(saved, 1, len, f), len);
    fclose(f);

    /* holds and claims: a held image cannot be claimed (its removal is refused); held twice, it
     * is claimable only once both let go; a claim makes a new hold wait, and a hold after the
     * removal finds the image gone. Without the claim's check, the second CHECK below fails. */
    int h1 = cdn_store_image_hold(state, mand, &err), h2 = cdn_store_image_hold(state, mand, &err);
    CHECK(h1 >= 0 && h2 >= 0);
    CHECK_EQ_INT(cdn_store_image_claim(s, mand, "task:1", &err), -EBUSY);
    CHECK(strstr(err.msg, "task:1 is in use") != NULL && strcmp(err.field, "ref") == 0);
    close(h1);
    CHECK_EQ_INT(cdn_store_image_claim(s, mand, "task:1", &err), -EBUSY);
    close(h2);
    int claim = cdn_store_image_claim(s, mand, "task:1", &err);
    CHECK(claim >= 0);
    CHECK_EQ_INT(cdn_store_image_remove(s, mand, &err), 0);
    close(claim);
    CHECK_EQ_INT(cdn_store_image_hold(state, mand, &err), -ENOENT);
    CHECK(strstr(err.msg, "was removed") != NULL);
    CHECK_EQ_INT(count("refs"), 0);
    CHECK_EQ_INT(cdn_store_image_get(s, mand, &back, &err), -ENOENT);
    CHECK_EQ_INT(cdn_store_prune(s, keep_marked, l2, NULL, &err), 0);
    CHECK_EQ_INT(cdn_store_layer_has(s, l1, NULL), 0);
    CHECK_EQ_INT(cdn_store_layer_has(s, l2, NULL), 1); /* a sandbox uses it */
    CHECK_EQ_INT(cdn_store_blob_has(s, b1), 0);
    CHECK_EQ_INT(cdn_store_blob_has(s, mand), 0);
    close(t1);
    close(t2);
    close(t3);
    teardown();
}
