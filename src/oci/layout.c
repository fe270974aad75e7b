/* OCI image layouts (layout.h). Runs on the host as root; trusts the layout directory's path (the
 * operator named it) and nothing inside it. The layout holds its own fd (layout->dirfd); every open
 * below it goes through open_beneath(), so a symlinked blob, a symlinked "blobs" directory or a
 * "../" cannot make cordon read a host file, and a FIFO cannot make it block. */
#include "oci/layout.h"
#include "oci/manifest-json.h"
#include "shared/fd-util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LAYOUT_FILE_MAX 4096 /* oci-layout is one short JSON object */
#define NEST_MAX        4    /* index → index → … → manifest */

struct cdn_oci_layout {
    int dirfd;
    char path[4096];
    struct cdn_oci_index index; /* index.json */
};

static int open_beneath(struct cdn_oci_layout *l, const char *rel, int *ret, struct cdn_error *err)
{
    struct open_how how = {
        .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    int fd = cdn_openat2(l->dirfd, rel, &how);
    if (fd < 0 && errno == ELOOP)
        return cdn_error_field(err, ELOOP, "image",
                               "image: %.100s/%s is or passes through a symlink (a layout's files must be "
                               "regular files inside it)",
                               l->path, rel);
    if (fd < 0)
        return cdn_error_field(err, errno, "image", "image: %.100s/%s: %m", l->path, rel);
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        (void) safe_close(fd);
        return cdn_error_field(err, EINVAL, "image", "image: %.100s/%s is not a regular file", l->path, rel);
    }
    *ret = fd;
    return 0;
}

/* The whole file at fd, at most max bytes (-E2BIG past it), NUL-terminated. */
static int read_bounded(int fd, size_t max, const char *what, char **ret, size_t *ret_len,
                        struct cdn_error *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return cdn_error_field(err, errno, "image", "image: %s: %m", what);
    if ((uint64_t) st.st_size > max)
        return cdn_error_field(err, E2BIG, "image", "image: %s: larger than %zu bytes", what, max);
    size_t cap = (size_t) st.st_size;
    _cleanup_free_ char *buf = malloc(cap + 2);
    if (!buf)
        return -ENOMEM;
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, cap + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return cdn_error_field(err, errno, "image", "image: reading %s: %m", what);
        if (n == 0)
            break;
        len += (size_t) n;
        if (len > cap) /* it grew since fstat: someone is writing it */
            return cdn_error_field(err, EBUSY, "image", "image: %s changed while cordon read it", what);
    }
    buf[len] = '\0';
    *ret = TAKE_PTR(buf);
    *ret_len = len;
    return 0;
}

static int read_file(struct cdn_oci_layout *l, const char *rel, size_t max, char **ret, size_t *ret_len,
                     struct cdn_error *err)
{
    _cleanup_close_ int fd = -EBADF;
    int r = open_beneath(l, rel, &fd, err);
    if (r < 0)
        return r;
    return read_bounded(fd, max, rel, ret, ret_len, err);
}

static void blob_path(const struct cdn_oci_desc *d, char out[CDN_DIGEST_MAX + 8])
{
    /* d->digest passed cdn_digest_check: "<alg>:<lowercase hex>", no '/' or '.' */
    (void) snprintf(out, CDN_DIGEST_MAX + 8, "blobs/%.6s/%s", d->digest, cdn_digest_hex(d->digest));
}

int cdn_oci_layout_open_blob(struct cdn_oci_layout *l, const struct cdn_oci_desc *d, int *ret_fd,
                             struct cdn_error *err)
{
    char rel[CDN_DIGEST_MAX + 8];
    int r = cdn_digest_check(d->digest, "image", err);
    if (r < 0)
        return r;
    blob_path(d, rel);
    _cleanup_close_ int fd = -EBADF;
    r = open_beneath(l, rel, &fd, err);
    if (r < 0)
        return r;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return cdn_error_field(err, errno, "image", "image: %s: %m", rel);
    if ((uint64_t) st.st_size != d->size)
        return cdn_error_field(err, EBADMSG, "image",
                               "image: blob %.80s has %jd bytes, its descriptor says %ju", d->digest,
                               (intmax_t) st.st_size, (uintmax_t) d->size);
    *ret_fd = TAKE_FD(fd);
    return 0;
}

int cdn_oci_layout_read_blob(struct cdn_oci_layout *l, const struct cdn_oci_desc *d, char **ret,
                             size_t *ret_len, struct cdn_error *err)
{
    if (d->size > CDN_OCI_JSON_MAX)
        return cdn_error_field(err, E2BIG, "image", "image: blob %.80s: %ju bytes, more than cordon reads",
                               d->digest, (uintmax_t) d->size);
    _cleanup_close_ int fd = -EBADF;
    int r = cdn_oci_layout_open_blob(l, d, &fd, err);
    if (r < 0)
        return r;
    _cleanup_free_ char *buf = NULL;
    size_t len;
    r = read_bounded(fd, CDN_OCI_JSON_MAX, d->digest, &buf, &len, err);
    if (r < 0)
        return r;
    /* hash the bytes we parse, not the file: it may change after this read */
    _cleanup_hasher_ struct cdn_hasher *h = NULL;
    if (cdn_hasher_new(d->digest, &h) < 0)
        return -ENOMEM;
    cdn_hasher_update(h, buf, len);
    char got[CDN_DIGEST_MAX];
    cdn_hasher_digest(h, got);
    if (len != d->size || strcmp(got, d->digest) != 0)
        return cdn_error_field(err, EBADMSG, "image",
                               "image: digest mismatch: expected %.80s, the blob is %.80s", d->digest, got);
    *ret = TAKE_PTR(buf);
    *ret_len = len;
    return 0;
}

static int check_layout_file(struct cdn_oci_layout *l, struct cdn_error *err)
{
    _cleanup_free_ char *buf = NULL;
    size_t len;
    int r = read_file(l, "oci-layout", LAYOUT_FILE_MAX, &buf, &len, err);
    if (r < 0)
        return r;
    json_t *root = NULL;
    r = cdn_oci_json_load(buf, len, "oci-layout", &root, err);
    if (r < 0)
        return cdn_error_field(err, r, "image", "image: %.100s/oci-layout is not JSON", l->path);
    char version[32];
    r = cdn_oci_json_str(root, "imageLayoutVersion", true, version, sizeof version, "oci-layout", err);
    json_decref(root);
    if (r < 0 || strcmp(version, "1.0.0") != 0)
        return cdn_error_field(err, EINVAL, "image",
                               "image: %.100s/oci-layout: imageLayoutVersion is not 1.0.0", l->path);
    return 0;
}

int cdn_oci_layout_open(const char *dir, struct cdn_oci_layout **ret, struct cdn_error *err)
{
    struct cdn_oci_layout *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    _cleanup_oci_layout_ struct cdn_oci_layout *owned = l;
    l->dirfd = -EBADF;
    (void) snprintf(l->path, sizeof l->path, "%s", dir);
    l->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (l->dirfd < 0)
        return cdn_error_field(err, errno, "image", "image: OCI layout %.150s: %m", dir);
    int r = check_layout_file(l, err);
    if (r < 0)
        return r;
    _cleanup_free_ char *buf = NULL;
    size_t len;
    r = read_file(l, "index.json", CDN_OCI_JSON_MAX, &buf, &len, err);
    if (r < 0)
        return r;
    r = cdn_oci_index_parse(buf, len, NULL, &l->index, err);
    if (r < 0)
        return cdn_error_prefix(err, r, "image: %.100s/index.json", dir);
    *ret = TAKE_PTR(owned);
    return 0;
}

void cdn_oci_layout_free(struct cdn_oci_layout *l)
{
    (void) safe_close(l->dirfd);
    cdn_oci_index_free(&l->index);
    free(l);
}

void cdn_oci_image_free(struct cdn_oci_image *img)
{
    free(img->manifest_json);
    free(img->config_json);
    cdn_oci_manifest_free(&img->manifest);
    cdn_oci_config_free(&img->config);
    *img = (struct cdn_oci_image){0};
}

static void list_tags(const struct cdn_oci_index *ix, char *buf, size_t size)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < ix->n_manifests && off < size; i++) {
        int n = snprintf(buf + off, size - off, "%s%s", off ? ", " : "",
                         ix->manifests[i].ref_name[0] ? ix->manifests[i].ref_name : "(untagged)");
        if (n < 0)
            break;
        off += (size_t) n;
    }
}

/* The index.json entry for tag (or the only image), then by platform if several remain. */
static int pick_top(struct cdn_oci_layout *l, const char *tag, const struct cdn_oci_platform *want,
                    struct cdn_oci_desc *ret, struct cdn_error *err)
{
    const struct cdn_oci_index *top = &l->index;
    struct cdn_oci_index sub = {.manifests =
                                    calloc(top->n_manifests ? top->n_manifests : 1, sizeof(*sub.manifests))};
    _cleanup_free_ struct cdn_oci_desc *owned = sub.manifests;
    if (!sub.manifests)
        return -ENOMEM;
    for (size_t i = 0; i < top->n_manifests; i++)
        if (!tag || !*tag || strcmp(top->manifests[i].ref_name, tag) == 0)
            sub.manifests[sub.n_manifests++] = top->manifests[i];
    char tags[160];
    list_tags(top, tags, sizeof tags);
    if (sub.n_manifests == 0 && tag && *tag)
        return cdn_error_field(err, ENOENT, "image", "image: no image tagged '%.64s' in %.80s (it has: %s)",
                               tag, l->path, top->n_manifests ? tags : "nothing");
    if (sub.n_manifests == 0)
        return cdn_error_field(err, ENOENT, "image", "image: the OCI layout %.100s holds no image", l->path);
    if (sub.n_manifests == 1) {
        *ret = sub.manifests[0];
        return 0;
    }
    const struct cdn_oci_desc *d;
    int r = cdn_oci_index_pick(&sub, want, &d, err);
    if (r == -ENOEXEC && (!tag || !*tag))
        return cdn_error_field(err, EINVAL, "image",
                               "image: the OCI layout %.80s holds %zu images; name one as oci:DIR:TAG (%s)",
                               l->path, sub.n_manifests, tags);
    if (r < 0)
        return r;
    *ret = *d;
    return 0;
}

/* Follow nested indexes from d down to an image manifest for want. */
static int follow_indexes(struct cdn_oci_layout *l, const struct cdn_oci_platform *want,
                          struct cdn_oci_desc *d, struct cdn_error *err)
{
    for (int depth = 0;; depth++) {
        if (strcmp(d->media_type, CDN_OCI_MT_INDEX) != 0 &&
            strcmp(d->media_type, CDN_OCI_MT_DOCKER_LIST) != 0)
            return 0;
        if (depth == NEST_MAX)
            return cdn_error_field(err, ELOOP, "image", "image: indexes nested more than %d deep", NEST_MAX);
        _cleanup_free_ char *buf = NULL;
        size_t len;
        int r = cdn_oci_layout_read_blob(l, d, &buf, &len, err);
        if (r < 0)
            return r;
        struct cdn_oci_index ix;
        r = cdn_oci_index_parse(buf, len, d->media_type, &ix, err);
        if (r < 0)
            return r;
        const struct cdn_oci_desc *pick;
        r = cdn_oci_index_pick(&ix, want, &pick, err);
        if (r >= 0)
            *d = *pick;
        cdn_oci_index_free(&ix);
        if (r < 0)
            return r;
    }
}

static int load_image(struct cdn_oci_layout *l, const struct cdn_oci_desc *d,
                      const struct cdn_oci_platform *want, struct cdn_oci_image *img, struct cdn_error *err)
{
    (void) snprintf(img->manifest_digest, sizeof img->manifest_digest, "%s", d->digest);
    int r = cdn_oci_layout_read_blob(l, d, &img->manifest_json, &img->manifest_len, err);
    if (r < 0)
        return r;
    r = cdn_oci_manifest_parse(img->manifest_json, img->manifest_len, d->media_type, &img->manifest, err);
    if (r < 0)
        return r;
    r = cdn_oci_layout_read_blob(l, &img->manifest.config, &img->config_json, &img->config_len, err);
    if (r < 0)
        return r;
    r = cdn_oci_config_parse(img->config_json, img->config_len, &img->config, err);
    if (r < 0)
        return r;
    return cdn_oci_config_check(&img->config, &img->manifest, want, err);
}

int cdn_oci_layout_resolve(struct cdn_oci_layout *l, const char *tag, const struct cdn_oci_platform *want,
                           struct cdn_oci_image *ret, struct cdn_error *err)
{
    struct cdn_oci_desc d;
    int r = pick_top(l, tag, want, &d, err);
    if (r >= 0)
        r = follow_indexes(l, want, &d, err);
    if (r < 0)
        return r;
    struct cdn_oci_image img = {0};
    r = load_image(l, &d, want, &img, err);
    if (r < 0) {
        cdn_oci_image_free(&img);
        return r;
    }
    *ret = img;
    return 0;
}
