/* Image archives (archive.h). Runs on the host as root. Trusts into_dir (cordon made it, empty, in
 * its own 0700 tree) and the archive's path (the operator's); trusts nothing inside the archive.
 * Members are written only as regular files under into_dir through fds opened O_NOFOLLOW: cordon
 * itself creates every directory there and never a symlink, so nothing a member names can lead out.
 * A docker-archive is then rewritten into an OCI layout whose blobs are named by the digests the
 * image's own config gives (layers by diff_id: docker save writes them uncompressed), so the layout
 * reader and the store verify every byte against them. */
#include "oci/archive.h"
#include "oci/manifest-json.h"
#include "oci/manifest.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shared/fd-util.h"

#define NAME_LEN      256
#define DEPTH_MAX     6
#define MEMBERS_MAX   100000
#define ALIASES_MAX   1024
#define ALIAS_HOPS    8
#define MT_LAYER_TAR  "application/vnd.oci.image.layer.v1.tar"
#define MT_OCI_CONFIG "application/vnd.oci.image.config.v1+json"

struct alias {
    char name[NAME_LEN];
    char target[NAME_LEN];
};

struct extract {
    int dirfd;
    bool oci_only; /* oci-archive: only the layout's own files */
    uint64_t written, max;
    struct alias *aliases;
    size_t n_aliases;
};

static int bad_member(struct cdn_error *err, int errnum, const char *name, const char *why)
{
    /* the name is the archive's: no control characters reach a message or a log line */
    char shown[101];
    size_t i = 0;
    for (; name[i] && i < sizeof shown - 1; i++)
        shown[i] = (unsigned char) name[i] < 0x20 || name[i] == 0x7f ? '?' : name[i];
    shown[i] = '\0';
    return cdn_error_field(err, errnum, "image", "image: archive member '%s': %s", shown, why);
}

/* Lexically normalise path (relative to the archive's root) into out: no "", ".", ".." left, at
 * most DEPTH_MAX components of [A-Za-z0-9._-]. -EINVAL if it leaves the root or is not that. */
static int normalize(const char *path, char out[NAME_LEN])
{
    char comps[DEPTH_MAX * 2][NAME_LEN];
    size_t n = 0;
    if (path[0] == '/')
        return -EINVAL;
    for (const char *c = path; *c;) {
        size_t len = strcspn(c, "/");
        if (len >= NAME_LEN)
            return -ENAMETOOLONG;
        if (len == 2 && c[0] == '.' && c[1] == '.') {
            if (n == 0)
                return -EINVAL;
            n--;
        } else if (len > 0 && !(len == 1 && c[0] == '.')) {
            if (n == ELEMENTSOF(comps) ||
                strspn(c, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") < len)
                return -EINVAL;
            memcpy(comps[n], c, len);
            comps[n++][len] = '\0';
        }
        c += len + (c[len] == '/');
    }
    if (n == 0 || n > DEPTH_MAX)
        return -EINVAL;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        int k = snprintf(out + off, NAME_LEN - off, "%s%s", i ? "/" : "", comps[i]);
        if (k < 0 || (size_t) k >= NAME_LEN - off)
            return -ENAMETOOLONG;
        off += (size_t) k;
    }
    return 0;
}

/* "blobs/<alg>/<hex>", "index.json", "oci-layout": what an OCI layout is made of. */
static bool layout_member(const char *name)
{
    if (strcmp(name, "index.json") == 0 || strcmp(name, "oci-layout") == 0)
        return true;
    if (strncmp(name, "blobs/", 6) != 0)
        return false;
    char digest[CDN_DIGEST_MAX + 8];
    (void) snprintf(digest, sizeof digest, "%s", name + 6);
    char *slash = strchr(digest, '/');
    if (!slash)
        return false;
    *slash = ':';
    return cdn_digest_check(digest, "image", NULL) == 0;
}

/* The directory for rel's parent under dirfd, made as needed; *leaf points into rel. */
static int open_parent(int dirfd, const char *rel, int *ret, const char **leaf)
{
    char buf[NAME_LEN];
    (void) snprintf(buf, sizeof buf, "%s", rel);
    _cleanup_close_ int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
    if (cur < 0)
        return -errno;
    char *c = buf;
    for (char *slash; (slash = strchr(c, '/'));) {
        *slash = '\0';
        if (mkdirat(cur, c, 0700) < 0 && errno != EEXIST)
            return -errno;
        int next = openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0)
            return -errno;
        (void) safe_close(cur);
        cur = next;
        c = slash + 1;
    }
    *leaf = rel + (c - buf);
    *ret = TAKE_FD(cur);
    return 0;
}

static int create_at(int dirfd, const char *rel, bool replace, int *ret)
{
    _cleanup_close_ int parent = -EBADF;
    const char *leaf;
    int r = open_parent(dirfd, rel, &parent, &leaf);
    if (r < 0)
        return r;
    if (replace && unlinkat(parent, leaf, 0) < 0 && errno != ENOENT)
        return -errno;
    int fd = openat(parent, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    *ret = fd;
    return 0;
}

static int write_member(struct archive *a, struct extract *x, const char *name, struct cdn_error *err)
{
    _cleanup_close_ int fd = -EBADF;
    int r = create_at(x->dirfd, name, false, &fd);
    if (r == -EEXIST)
        return bad_member(err, EINVAL, name, "appears twice");
    if (r < 0)
        return bad_member(err, -r, name, "cannot be written");
    char buf[65536];
    for (;;) {
        la_ssize_t n = archive_read_data(a, buf, sizeof buf);
        if (n < 0)
            return bad_member(err, EIO, name, archive_error_string(a) ?: "read error");
        if (n == 0)
            return 0;
        x->written += (uint64_t) n;
        if (x->max && x->written > x->max)
            return cdn_error_field(err, E2BIG, "image", "image: the archive holds more than %ju bytes",
                                   (uintmax_t) x->max);
        r = cdn_write_all(fd, buf, (size_t) n);
        if (r < 0)
            return cdn_error_field(err, -r, "image", "image: writing %.100s: %m", name);
    }
}

/* A symlink or hard link member: an alias of another member (docker save links repeated layers). */
static int add_alias(struct extract *x, struct archive_entry *e, const char *name, struct cdn_error *err)
{
    const char *hard = archive_entry_hardlink(e), *sym = archive_entry_symlink(e);
    char joined[2 * NAME_LEN], target[NAME_LEN];
    if (hard)
        (void) snprintf(joined, sizeof joined, "%s", hard);
    else {
        const char *slash = strrchr(name, '/');
        (void) snprintf(joined, sizeof joined, "%.*s%s%s", slash ? (int) (slash - name) : 0, name,
                        slash ? "/" : "", sym ? sym : "");
    }
    if (!hard && (!sym || sym[0] == '/'))
        return bad_member(err, EINVAL, name, "a link that leaves the archive");
    if (normalize(joined, target) < 0)
        return bad_member(err, EINVAL, name, "a link that leaves the archive");
    if (x->n_aliases == ALIASES_MAX)
        return bad_member(err, E2BIG, name, "too many links");
    struct alias *al = &x->aliases[x->n_aliases++];
    (void) snprintf(al->name, sizeof al->name, "%s", name);
    (void) snprintf(al->target, sizeof al->target, "%s", target);
    return 0;
}

static int extract_entry(struct archive *a, struct archive_entry *e, struct extract *x, struct cdn_error *err)
{
    const char *raw = archive_entry_pathname(e);
    char name[NAME_LEN];
    if (!raw)
        return cdn_error_field(err, EINVAL, "image", "image: an archive member without a name");
    int r = normalize(raw, name);
    mode_t type = archive_entry_filetype(e);
    if (r < 0 && (strcmp(raw, ".") == 0 || strcmp(raw, "./") == 0) && type == AE_IFDIR)
        return 0;
    if (r < 0)
        return bad_member(err, EINVAL, raw, "not a plain relative path inside the archive");
    if (x->oci_only && !layout_member(name))
        return 0;
    if (type == AE_IFDIR)
        return 0;
    if (type == AE_IFREG && !archive_entry_hardlink(e))
        return write_member(a, x, name, err);
    if (!x->oci_only && (type == AE_IFLNK || archive_entry_hardlink(e)))
        return add_alias(x, e, name, err);
    return bad_member(err, EINVAL, name, "not a regular file");
}

static int extract(const char *file, struct extract *x, struct cdn_error *err)
{
    struct archive *a = archive_read_new();
    if (!a)
        return -ENOMEM;
    (void) archive_read_support_format_tar(a);
    (void) archive_read_support_filter_all(a);
    int r = 0;
    if (archive_read_open_filename(a, file, 65536) != ARCHIVE_OK) {
        /* a missing or unreadable file keeps its errno; anything else is not an archive cordon reads */
        int e = archive_errno(a);
        r = cdn_error_field(err, e == ENOENT || e == EACCES || e == EISDIR ? e : EINVAL, "image",
                            "image: %.100s: %s", file, archive_error_string(a) ?: "cannot open");
    }
    struct archive_entry *e;
    for (size_t n = 0; r >= 0;) {
        int h = archive_read_next_header(a, &e);
        if (h == ARCHIVE_EOF)
            break;
        if (h != ARCHIVE_OK && h != ARCHIVE_WARN) {
            r = cdn_error_field(err, EINVAL, "image", "image: %.100s: not a tar archive cordon reads (%s)",
                                file, archive_error_string(a) ?: "?");
            break;
        }
        if (++n > MEMBERS_MAX) {
            r = cdn_error_field(err, E2BIG, "image", "image: %.100s: more than %d members", file,
                                MEMBERS_MAX);
            break;
        }
        r = extract_entry(a, e, x, err);
    }
    archive_read_free(a);
    return r;
}

/* The member name an alias chain ends at. */
static const char *unalias(const struct extract *x, const char *name)
{
    for (int hop = 0; hop < ALIAS_HOPS; hop++) {
        size_t i = 0;
        while (i < x->n_aliases && strcmp(x->aliases[i].name, name) != 0)
            i++;
        if (i == x->n_aliases)
            return name;
        name = x->aliases[i].target;
    }
    return name;
}

static int read_member(int dirfd, const char *name, char **ret, size_t *ret_len, struct cdn_error *err)
{
    _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return bad_member(err, errno, name, "missing");
    if (!S_ISREG(st.st_mode) || (uint64_t) st.st_size > CDN_OCI_JSON_MAX)
        return bad_member(err, E2BIG, name, "not a regular file of at most 4 MiB");
    _cleanup_free_ char *buf = malloc((size_t) st.st_size + 1);
    if (!buf)
        return -ENOMEM;
    ssize_t n = cdn_read_full(fd, buf, (size_t) st.st_size);
    if (n < 0 || (size_t) n != (size_t) st.st_size)
        return bad_member(err, EIO, name, "short read");
    buf[n] = '\0';
    *ret = TAKE_PTR(buf);
    *ret_len = (size_t) n;
    return 0;
}

static int write_blob(int dirfd, const char *rel, const char *data, size_t len, struct cdn_error *err)
{
    _cleanup_close_ int fd = -EBADF;
    int r = create_at(dirfd, rel, true, &fd);
    if (r >= 0)
        r = cdn_write_all(fd, data, len);
    if (r < 0)
        return cdn_error_field(err, -r, "image", "image: writing %s: %s", rel, strerror(-r));
    return 0;
}

static void blob_name(const char *digest, char out[CDN_DIGEST_MAX + 8])
{
    (void) snprintf(out, CDN_DIGEST_MAX + 8, "blobs/%.6s/%s", digest, cdn_digest_hex(digest));
}

static bool tags_match(json_t *tags, const struct cdn_image_ref *want)
{
    size_t i;
    json_t *t;
    json_array_foreach(tags, i, t)
    {
        struct cdn_image_ref r;
        if (json_is_string(t) && cdn_image_ref_parse(json_string_value(t), &r, NULL) == 0 &&
            r.kind == CDN_REF_REGISTRY && strcmp(r.registry, want->registry) == 0 &&
            strcmp(r.repository, want->repository) == 0 && strcmp(r.tag, want->tag) == 0)
            return true;
    }
    return false;
}

/* The manifest.json entry for ref's NAME:TAG, or the only one. */
static int pick_entry(json_t *arr, const struct cdn_image_ref *ref, json_t **ret, struct cdn_error *err)
{
    size_t n = json_array_size(arr);
    if (!json_is_array(arr) || n == 0 || n > CDN_OCI_INDEX_MAX)
        return cdn_error_field(err, EINVAL, "image",
                               "image: the archive's manifest.json is not a list of images");
    if (!ref->repository[0]) {
        if (n != 1)
            return cdn_error_field(
                err, EINVAL, "image",
                "image: the archive holds %zu images; name one as docker-archive:FILE:NAME:TAG", n);
        *ret = json_array_get(arr, 0);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *tags = json_object_get(json_array_get(arr, i), "RepoTags");
        if (json_is_array(tags) && tags_match(tags, ref)) {
            *ret = json_array_get(arr, i);
            return 0;
        }
    }
    return cdn_error_field(err, ENOENT, "image", "image: no image tagged %.100s/%.80s:%s in the archive",
                           ref->registry, ref->repository, ref->tag);
}

/* Layer i: its member renamed to blobs/<alg>/<diff_id hex>, its descriptor appended to layers. */
static int move_layer(struct extract *x, json_t *path, const char *diff_id, json_t *layers,
                      struct cdn_error *err)
{
    char name[NAME_LEN], dst[CDN_DIGEST_MAX + 8];
    if (!json_is_string(path) || normalize(json_string_value(path), name) < 0)
        return cdn_error_field(err, EINVAL, "image",
                               "image: manifest.json: a layer path is not inside the archive");
    const char *src = unalias(x, name);
    blob_name(diff_id, dst);
    struct stat st;
    if (strcmp(src, dst) != 0 && fstatat(x->dirfd, dst, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        _cleanup_close_ int parent = -EBADF;
        const char *leaf;
        int r = open_parent(x->dirfd, dst, &parent, &leaf);
        if (r < 0 || renameat(x->dirfd, src, parent, leaf) < 0)
            return bad_member(err, r < 0 ? -r : errno, src, "missing (a layer manifest.json names)");
    }
    if (fstatat(x->dirfd, dst, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
        return bad_member(err, EINVAL, dst, "not a regular file");
    json_t *d = json_pack("{s:s, s:s, s:I}", "mediaType", MT_LAYER_TAR, "digest", diff_id, "size",
                          (json_int_t) st.st_size);
    if (!d || json_array_append_new(layers, d) < 0)
        return -ENOMEM;
    return 0;
}

static int write_json_blob(int dirfd, json_t *doc, char digest[CDN_DIGEST_MAX], size_t *size,
                           struct cdn_error *err)
{
    _cleanup_free_ char *s = json_dumps(doc, JSON_COMPACT);
    if (!s)
        return -ENOMEM;
    _cleanup_hasher_ struct cdn_hasher *h = NULL;
    if (cdn_hasher_new("sha256", &h) < 0)
        return -ENOMEM;
    cdn_hasher_update(h, s, strlen(s));
    cdn_hasher_digest(h, digest);
    *size = strlen(s);
    char rel[CDN_DIGEST_MAX + 8];
    blob_name(digest, rel);
    return write_blob(dirfd, rel, s, *size, err);
}

/* The config blob and the layers (renamed in place), then a manifest, index.json and oci-layout. */
static int write_layout(struct extract *x, json_t *entry, const char *cfg, size_t cfg_len,
                        const struct cdn_oci_config *c, struct cdn_error *err)
{
    json_t *paths = json_object_get(entry, "Layers");
    if (!json_is_array(paths) || json_array_size(paths) != c->n_diff_ids)
        return cdn_error_field(err, EINVAL, "image",
                               "image: manifest.json's Layers do not match the config's %zu diff_ids",
                               c->n_diff_ids);
    char cdigest[CDN_DIGEST_MAX], rel[CDN_DIGEST_MAX + 8], mdigest[CDN_DIGEST_MAX];
    _cleanup_hasher_ struct cdn_hasher *h = NULL;
    if (cdn_hasher_new("sha256", &h) < 0)
        return -ENOMEM;
    cdn_hasher_update(h, cfg, cfg_len);
    cdn_hasher_digest(h, cdigest);
    json_t *layers = json_array();
    json_t *man = json_pack("{s:i, s:s, s:{s:s, s:s, s:I}, s:o}", "schemaVersion", 2, "mediaType",
                            CDN_OCI_MT_MANIFEST, "config", "mediaType", MT_OCI_CONFIG, "digest", cdigest,
                            "size", (json_int_t) cfg_len, "layers", layers);
    if (!man)
        return -ENOMEM;
    int r = 0;
    for (size_t i = 0; r >= 0 && i < c->n_diff_ids; i++)
        r = move_layer(x, json_array_get(paths, i), c->diff_ids[i], layers, err);
    blob_name(cdigest, rel);
    if (r >= 0)
        r = write_blob(x->dirfd, rel, cfg, cfg_len, err);
    size_t msize = 0;
    if (r >= 0)
        r = write_json_blob(x->dirfd, man, mdigest, &msize, err);
    json_decref(man);
    if (r < 0)
        return r;
    json_t *index = json_pack("{s:i, s:s, s:[{s:s, s:s, s:I}]}", "schemaVersion", 2, "mediaType",
                              CDN_OCI_MT_INDEX, "manifests", "mediaType", CDN_OCI_MT_MANIFEST, "digest",
                              mdigest, "size", (json_int_t) msize);
    _cleanup_free_ char *s = index ? json_dumps(index, JSON_COMPACT) : NULL;
    json_decref(index);
    if (!s)
        return -ENOMEM;
    r = write_blob(x->dirfd, "index.json", s, strlen(s), err);
    if (r >= 0)
        r = write_blob(x->dirfd, "oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}", 30, err);
    return r;
}

static int docker_to_layout(const struct cdn_image_ref *ref, struct extract *x, struct cdn_error *err)
{
    _cleanup_free_ char *buf = NULL, *cfg = NULL;
    size_t len, cfg_len;
    int r = read_member(x->dirfd, "manifest.json", &buf, &len, err);
    if (r < 0)
        return r;
    json_error_t jerr;
    json_t *arr = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!arr)
        return cdn_error_field(err, EINVAL, "image", "image: the archive's manifest.json is not JSON (%s)",
                               jerr.text);
    json_t *entry = NULL;
    char name[NAME_LEN];
    r = pick_entry(arr, ref, &entry, err);
    json_t *config = r >= 0 ? json_object_get(entry, "Config") : NULL;
    if (r >= 0 && (!json_is_string(config) || normalize(json_string_value(config), name) < 0))
        r = cdn_error_field(err, EINVAL, "image",
                            "image: manifest.json: Config is not a path inside the archive");
    if (r >= 0)
        r = read_member(x->dirfd, unalias(x, name), &cfg, &cfg_len, err);
    struct cdn_oci_config c = {0};
    if (r >= 0)
        r = cdn_oci_config_parse(cfg, cfg_len, &c, err);
    if (r >= 0)
        r = write_layout(x, entry, cfg, cfg_len, &c, err);
    cdn_oci_config_free(&c);
    json_decref(arr);
    return r;
}

int cdn_oci_archive_unpack(const struct cdn_image_ref *ref, const char *into_dir, uint64_t max_bytes,
                           struct cdn_error *err)
{
    if (ref->kind != CDN_REF_OCI_ARCHIVE && ref->kind != CDN_REF_DOCKER_ARCHIVE)
        return cdn_error_field(err, EINVAL, "image", "image: not an archive reference");
    _cleanup_close_ int dirfd = open(into_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        return cdn_error_field(err, errno, "image", "image: %.100s: %m", into_dir);
    _cleanup_free_ struct alias *aliases = calloc(ALIASES_MAX, sizeof(*aliases));
    if (!aliases)
        return -ENOMEM;
    struct extract x = {
        .dirfd = dirfd, .oci_only = ref->kind == CDN_REF_OCI_ARCHIVE, .max = max_bytes, .aliases = aliases};
    int r = extract(ref->path, &x, err);
    if (r < 0 || ref->kind == CDN_REF_OCI_ARCHIVE)
        return r;
    return docker_to_layout(ref, &x, err);
}
