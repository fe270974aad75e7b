/* The content-addressed image store (store.h). Runs on the host as root in cordond or the CLI;
 * several processes may share one store, so everything that appears under blobs/, layers/,
 * images/ and refs/ is made aside in tmp/ and renamed into place (a reader sees all or nothing),
 * and work that two pulls could both start is serialised by flock on locks/<blob>. The store's
 * own files are trusted (root-only); the blobs it verifies and the layers it unpacks are not. */
#include "oci/store.h"
#include "oci/store-internal.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "shared/fd-util.h"

struct cdn_store {
    int root;
    int lock_fd; /* locks/store, held shared while open: the tmp/ sweep needs it exclusive */
    char path[4096];
};

static const char *const DIRS[] = {"blobs",         "blobs/sha256",  "blobs/sha512",   "layers",
                                   "layers/sha256", "diffids",       "diffids/sha256", "diffids/sha512",
                                   "images",        "images/sha256", "images/sha512",  "refs",
                                   "tmp",           "locks"};

static void random_name(const char *prefix, char *buf, size_t size)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != sizeof r)
        r = (uint64_t) getpid() << 32 ^ (uint64_t) time(NULL);
    snprintf(buf, size, "%s-%016" PRIx64, prefix, r);
}

/* Remove what tmp/ holds, as the store's only user (a killed pull's blob or half a layer). */
static void sweep_tmp(int root)
{
    int fd = openat(root, "tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        safe_close(fd);
        return;
    }
    _cleanup_closedir_ DIR *dir = d;
    for (struct dirent *de; (de = readdir(dir));)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            (void) cdn_layer_rm_rf_at(dirfd(dir), de->d_name);
}

static int flock_retry(int fd, int op)
{
    while (flock(fd, op) < 0)
        if (errno != EINTR)
            return -errno;
    return 0;
}

int cdn_store_open(const char *state_dir, struct cdn_store **ret, struct cdn_error *err)
{
    _cleanup_free_ struct cdn_store *s = calloc(1, sizeof(*s));
    if (!s)
        return cdn_error_set(err, ENOMEM, "image store: out of memory");
    s->root = s->lock_fd = -EBADF;
    char images[4096];
    snprintf(images, sizeof images, "%s/images", state_dir);
    if ((size_t) snprintf(s->path, sizeof s->path, "%s/store", images) >= sizeof s->path - 200)
        return cdn_error_set(err, ENAMETOOLONG, "image store: state directory path too long");
    int r = cdn_mkdir_p(images, 0755);
    if (r < 0 || (mkdir(s->path, 0700) < 0 && errno != EEXIST))
        return cdn_error_set(err, r < 0 ? r : errno, "image store %s: %m", s->path);
    s->root = open(s->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (s->root < 0 || fchmod(s->root, 0700) < 0) {
        r = cdn_error_set(err, errno, "image store %s: %m", s->path);
        safe_close(s->root);
        return r;
    }
    for (size_t i = 0; i < ELEMENTSOF(DIRS); i++)
        if (mkdirat(s->root, DIRS[i], 0700) < 0 && errno != EEXIST) {
            r = cdn_error_set(err, errno, "image store %s/%s: %m", s->path, DIRS[i]);
            safe_close(s->root);
            return r;
        }
    s->lock_fd = openat(s->root, "locks/store", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (s->lock_fd < 0) {
        r = cdn_error_set(err, errno, "image store lock: %m");
        safe_close(s->root);
        return r;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) == 0)
        sweep_tmp(s->root); /* nobody else has the store open: what tmp/ holds is orphaned */
    (void) flock_retry(s->lock_fd, LOCK_SH);
    *ret = TAKE_PTR(s);
    return 0;
}

void cdn_store_free(struct cdn_store *s)
{
    safe_close(s->lock_fd);
    safe_close(s->root);
    free(s);
}

const char *cdn_store_path(const struct cdn_store *s)
{
    return s->path;
}

/* dir/<algo>/<hex><suffix> for a checked digest. */
static void digest_path(const char *dir, const char *digest, const char *suffix, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%.6s/%s%s", dir, digest, cdn_digest_hex(digest), suffix);
}

/* Write content to tmp/ and rename it to relpath: readers see the old file or the new one. */
static int write_atomic(struct cdn_store *s, const char *relpath, const char *content, struct cdn_error *err)
{
    char name[40], tmp[64];
    random_name("file", name, sizeof name);
    snprintf(tmp, sizeof tmp, "tmp/%s", name);
    _cleanup_close_ int fd = openat(s->root, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return cdn_error_set(err, errno, "image store: writing %s: %m", relpath);
    int r = cdn_write_all(fd, content, strlen(content));
    if (r >= 0 && fsync(fd) < 0)
        r = -errno;
    if (r >= 0 && renameat(s->root, tmp, s->root, relpath) < 0)
        r = -errno;
    if (r < 0) {
        (void) unlinkat(s->root, tmp, 0);
        return cdn_error_set(err, r, "image store: writing %s: %m", relpath);
    }
    return 0;
}

int cdn_store_blob_begin(struct cdn_store *s, struct cdn_blob_writer *w, struct cdn_error *err)
{
    random_name("blob", w->name, sizeof w->name);
    char tmp[64];
    snprintf(tmp, sizeof tmp, "tmp/%s", w->name);
    w->fd = openat(s->root, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (w->fd < 0)
        return cdn_error_set(err, errno, "image store: a new blob in tmp/: %m");
    return 0;
}

void cdn_store_blob_abort(struct cdn_store *s, struct cdn_blob_writer *w)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, "tmp/%s", w->name);
    (void) unlinkat(s->root, tmp, 0);
    w->fd = safe_close(w->fd);
}

int cdn_store_blob_commit(struct cdn_store *s, struct cdn_blob_writer *w, const char *digest, uint64_t size,
                          struct cdn_error *err)
{
    char tmp[64], dst[256];
    snprintf(tmp, sizeof tmp, "tmp/%s", w->name);
    int r = cdn_digest_verify_fd(w->fd, digest, size, err);
    if (r >= 0 && fsync(w->fd) < 0)
        r = cdn_error_set(err, errno, "image store: syncing blob %s: %m", digest);
    if (r >= 0) {
        digest_path("blobs", digest, "", dst, sizeof dst);
        if (renameat(s->root, tmp, s->root, dst) < 0)
            r = cdn_error_set(err, errno, "image store: storing blob %s: %m", digest);
    }
    if (r < 0)
        (void) unlinkat(s->root, tmp, 0);
    w->fd = safe_close(w->fd);
    return r;
}

int cdn_store_blob_put(struct cdn_store *s, const void *buf, size_t len, const char *digest,
                       struct cdn_error *err)
{
    struct cdn_blob_writer w;
    int r = cdn_store_blob_begin(s, &w, err);
    if (r < 0)
        return r;
    r = cdn_write_all(w.fd, buf, len);
    if (r < 0) {
        cdn_store_blob_abort(s, &w);
        return cdn_error_set(err, r, "image store: writing blob %s: %m", digest);
    }
    return cdn_store_blob_commit(s, &w, digest, len, err);
}

int cdn_store_blob_has(struct cdn_store *s, const char *digest)
{
    if (cdn_digest_check(digest, "digest", NULL) < 0)
        return -EINVAL;
    char p[256];
    struct stat st;
    digest_path("blobs", digest, "", p, sizeof p);
    return fstatat(s->root, p, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

int cdn_store_blob_open(struct cdn_store *s, const char *digest, struct cdn_error *err)
{
    int r = cdn_digest_check(digest, "digest", err);
    if (r < 0)
        return r;
    char p[256];
    digest_path("blobs", digest, "", p, sizeof p);
    int fd = openat(s->root, p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return cdn_error_set(err, errno, "image store: blob %s: %m", digest);
    return fd;
}

int cdn_store_layer_has(struct cdn_store *s, const char *diff_id, char path_out[4096])
{
    if (cdn_digest_check(diff_id, "diff_id", NULL) < 0 || strncmp(diff_id, "sha256:", 7) != 0)
        return 0;
    char p[256];
    struct stat st;
    snprintf(p, sizeof p, "layers/sha256/%s", cdn_digest_hex(diff_id));
    if (fstatat(s->root, p, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
        return 0;
    if (path_out)
        snprintf(path_out, 4096, "%s/%s", s->path, p);
    return 1;
}

/* The diff_id an earlier unpack of this blob gave, or "". */
static void known_diff_id(struct cdn_store *s, const char *blob, char out[CDN_DIGEST_MAX])
{
    char p[256], buf[CDN_DIGEST_MAX + 2];
    digest_path("diffids", blob, "", p, sizeof p);
    out[0] = '\0';
    ssize_t n = cdn_read_file_at(s->root, p, buf, sizeof buf);
    if (n > 0) {
        buf[strcspn(buf, "\n")] = '\0';
        if (cdn_digest_check(buf, "diff_id", NULL) == 0)
            snprintf(out, CDN_DIGEST_MAX, "%s", buf);
    }
}

/* Unpack blob into tmp/, check its diff_id, rename into layers/ (unless another blob with this
 * diff_id was there first: then ours is dropped). Caller holds the blob's lock. */
static int unpack(struct cdn_store *s, const char *blob, const char *expected,
                  const struct cdn_layer_limits *limits, char got[CDN_DIGEST_MAX], struct cdn_error *err)
{
    char name[40], tmp[64], dst[256];
    random_name("layer", name, sizeof name);
    snprintf(tmp, sizeof tmp, "tmp/%s", name);
    if (mkdirat(s->root, tmp, 0755) < 0)
        return cdn_error_set(err, errno, "image store: a layer directory in tmp/: %m");
    _cleanup_close_ int dfd = openat(s->root, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    _cleanup_close_ int bfd = cdn_store_blob_open(s, blob, err);
    int r = bfd;
    if (r >= 0 && (dfd < 0 || fchmod(dfd, 0755) < 0))
        r = cdn_error_set(err, errno, "image store: a layer directory in tmp/: %m");
    if (r >= 0)
        r = cdn_layer_apply(bfd, dfd, limits, got, NULL, err);
    if (r >= 0 && expected && expected[0] && strcmp(got, expected) != 0)
        r = cdn_error_field(err, EBADMSG, "layer", "layer %s: its tar hashes to %s, the image config says %s",
                            blob, got, expected);
    if (r >= 0 && syncfs(dfd) < 0)
        r = cdn_error_set(err, errno, "image store: syncing layer %s: %m", blob);
    if (r >= 0) {
        snprintf(dst, sizeof dst, "layers/sha256/%s", cdn_digest_hex(got));
        if (renameat(s->root, tmp, s->root, dst) == 0)
            return 0;
        if (errno != EEXIST && errno != ENOTEMPTY)
            r = cdn_error_set(err, errno, "image store: publishing layer %s: %m", got);
        /* else: another blob with this diff_id got there first; the content is the same */
    }
    (void) cdn_layer_rm_rf_at(s->root, tmp);
    return r;
}

int cdn_store_layer_ensure(struct cdn_store *s, const char *blob_digest, const char *expected_diff_id,
                           const struct cdn_layer_limits *limits, char ret_diff_id[CDN_DIGEST_MAX],
                           char path_out[4096], struct cdn_error *err)
{
    int r = cdn_digest_check(blob_digest, "layer.digest", err);
    if (r < 0)
        return r;
    bool want = expected_diff_id && expected_diff_id[0];
    if (want && (r = cdn_digest_check(expected_diff_id, "diff_id", err)) < 0)
        return r;
    if (want && strncmp(expected_diff_id, "sha256:", 7) != 0)
        return cdn_error_field(err, EINVAL, "diff_id", "diff_id %s: layers are hashed with sha256",
                               expected_diff_id);
    char diff_id[CDN_DIGEST_MAX] = "", lock[256];
    int unpacked = 0;
    if (!want || !cdn_store_layer_has(s, expected_diff_id, NULL)) {
        snprintf(lock, sizeof lock, "locks/%.6s-%s", blob_digest, cdn_digest_hex(blob_digest));
        _cleanup_close_ int lfd = openat(s->root, lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (lfd < 0 || (r = flock_retry(lfd, LOCK_EX)) < 0)
            return cdn_error_set(err, lfd < 0 ? errno : r, "image store: locking layer %s: %m", blob_digest);
        known_diff_id(s, blob_digest, diff_id);
        if (want && diff_id[0] && strcmp(diff_id, expected_diff_id) != 0)
            return cdn_error_field(err, EBADMSG, "layer",
                                   "layer %s: its tar hashes to %s, the image config says %s", blob_digest,
                                   diff_id, expected_diff_id);
        if (want && cdn_store_layer_has(s, expected_diff_id, NULL))
            snprintf(diff_id, sizeof diff_id, "%s", expected_diff_id);
        if (!diff_id[0] || !cdn_store_layer_has(s, diff_id, NULL)) {
            r = unpack(s, blob_digest, expected_diff_id, limits, diff_id, err);
            if (r < 0)
                return r;
            unpacked = 1;
        }
        char map[256], line[CDN_DIGEST_MAX + 1];
        digest_path("diffids", blob_digest, "", map, sizeof map);
        snprintf(line, sizeof line, "%s\n", diff_id);
        r = write_atomic(s, map, line, err);
        if (r < 0)
            return r;
    } else
        snprintf(diff_id, sizeof diff_id, "%s", expected_diff_id);
    if (ret_diff_id)
        snprintf(ret_diff_id, CDN_DIGEST_MAX, "%s", diff_id);
    if (path_out)
        (void) cdn_store_layer_has(s, diff_id, path_out);
    return unpacked;
}

int cdn_store_gc_lock(struct cdn_store *s, bool exclusive, struct cdn_error *err)
{
    _cleanup_close_ int fd = openat(s->root, "locks/gc", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    int r = fd < 0 ? -errno : flock_retry(fd, exclusive ? LOCK_EX : LOCK_SH);
    if (r < 0)
        return cdn_error_set(err, r, "image store: gc lock: %m");
    return TAKE_FD(fd);
}

/* Allocated bytes under dfd/name, each inode's share by its link count (so hard links within the
 * store add up to the inode once). */
static void du_at(int dfd, const char *name, uint64_t *sum)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return;
    *sum += (uint64_t) st.st_blocks * 512 / (st.st_nlink && !S_ISDIR(st.st_mode) ? st.st_nlink : 1);
    if (!S_ISDIR(st.st_mode))
        return;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        safe_close(fd);
        return;
    }
    _cleanup_closedir_ DIR *dir = d;
    for (struct dirent *de; (de = readdir(dir));)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            du_at(dirfd(dir), de->d_name, sum);
}

int cdn_store_size(struct cdn_store *s, uint64_t *ret, struct cdn_error *err)
{
    (void) err;
    uint64_t sum = 0;
    du_at(s->root, ".", &sum);
    *ret = sum;
    return 0;
}

int cdn_store_root_fd(struct cdn_store *s)
{
    return s->root;
}

int cdn_store_write_atomic(struct cdn_store *s, const char *relpath, const char *content,
                           struct cdn_error *err)
{
    return write_atomic(s, relpath, content, err);
}

void cdn_store_du_at(int dfd, const char *name, uint64_t *sum)
{
    du_at(dfd, name, sum);
}
