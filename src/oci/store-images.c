/* Image records, references and prune of the image store (store.h). Runs on the host as root;
 * the records and refs are the store's own (root-only) files, but they are still parsed with
 * bounds and checked digests, so a damaged file is an error, never a path outside the store. */
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "oci/store-internal.h"
#include "shared/fd-util.h"

#define RECORD_MAX (4u << 20)

void cdn_image_record_done(struct cdn_image_record *r)
{
    free(r->diff_ids);
    free(r->blobs);
    r->diff_ids = r->blobs = NULL;
    r->n_layers = 0;
}

#define _cleanup_json_ _cleanup_(json_decrefp)

static int record_check(const struct cdn_image_record *r, struct cdn_error *err)
{
    int q;
    if ((q = cdn_digest_check(r->manifest, "image.manifest", err)) < 0 ||
        (q = cdn_digest_check(r->config, "image.config", err)) < 0)
        return q;
    if (r->n_layers > CDN_STORE_MAX_LAYERS)
        return cdn_error_field(err, EINVAL, "image.layers", "image.layers: %zu layers, more than %d",
                               r->n_layers, CDN_STORE_MAX_LAYERS);
    for (size_t i = 0; i < r->n_layers; i++)
        if ((q = cdn_digest_check(r->diff_ids[i], "image.layers.diff_id", err)) < 0 ||
            (q = cdn_digest_check(r->blobs[i], "image.layers.blob", err)) < 0)
            return q;
    return 0;
}

static void record_path(const char *manifest, char *buf, size_t size)
{
    snprintf(buf, size, "images/%.6s/%s.json", manifest, cdn_digest_hex(manifest));
}

int cdn_store_image_put(struct cdn_store *s, const struct cdn_image_record *r, struct cdn_error *err)
{
    int q = record_check(r, err);
    if (q < 0)
        return q;
    _cleanup_json_ json_t *layers = json_array();
    for (size_t i = 0; layers && i < r->n_layers; i++)
        json_array_append_new(layers, json_pack("{s:s,s:s}", "diff_id", r->diff_ids[i], "blob", r->blobs[i]));
    _cleanup_json_ json_t *j = json_pack(
        "{s:s,s:s,s:O,s:{s:s,s:s,s:s},s:I,s:I}", "manifest", r->manifest, "config", r->config, "layers",
        layers, "platform", "os", r->os, "architecture", r->arch, "variant", r->variant, "created",
        (json_int_t) (r->created ? r->created : time(NULL)), "size", (json_int_t) r->size);
    _cleanup_free_ char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (!text)
        return cdn_error_set(err, ENOMEM, "image store: out of memory");
    char p[256];
    record_path(r->manifest, p, sizeof p);
    return cdn_store_write_atomic(s, p, text, err);
}

static int copy_str(json_t *j, const char *key, char *out, size_t size)
{
    const char *v = json_string_value(json_object_get(j, key));
    if (!v || strlen(v) >= size)
        return -EINVAL;
    memcpy(out, v, strlen(v) + 1);
    return 0;
}

static int record_from_json(json_t *j, struct cdn_image_record *r, struct cdn_error *err)
{
    json_t *layers = json_object_get(j, "layers"), *plat = json_object_get(j, "platform");
    if (copy_str(j, "manifest", r->manifest, sizeof r->manifest) < 0 ||
        copy_str(j, "config", r->config, sizeof r->config) < 0 || !json_is_array(layers) ||
        !json_is_object(plat) || copy_str(plat, "os", r->os, sizeof r->os) < 0 ||
        copy_str(plat, "architecture", r->arch, sizeof r->arch) < 0 ||
        copy_str(plat, "variant", r->variant, sizeof r->variant) < 0 ||
        json_array_size(layers) > CDN_STORE_MAX_LAYERS)
        return cdn_error_field(err, EBADMSG, "image", "image record: missing or oversized fields");
    r->n_layers = json_array_size(layers);
    r->diff_ids = calloc(r->n_layers + 1, sizeof(*r->diff_ids));
    r->blobs = calloc(r->n_layers + 1, sizeof(*r->blobs));
    if (!r->diff_ids || !r->blobs)
        return cdn_error_set(err, ENOMEM, "image store: out of memory");
    for (size_t i = 0; i < r->n_layers; i++) {
        json_t *l = json_array_get(layers, i);
        if (copy_str(l, "diff_id", r->diff_ids[i], CDN_DIGEST_MAX) < 0 ||
            copy_str(l, "blob", r->blobs[i], CDN_DIGEST_MAX) < 0)
            return cdn_error_field(err, EBADMSG, "image", "image record: layer %zu is incomplete", i);
    }
    r->created = json_integer_value(json_object_get(j, "created"));
    r->size = (uint64_t) json_integer_value(json_object_get(j, "size"));
    return record_check(r, err);
}

int cdn_store_image_get(struct cdn_store *s, const char *manifest, struct cdn_image_record *ret,
                        struct cdn_error *err)
{
    int q = cdn_digest_check(manifest, "image", err);
    if (q < 0)
        return q;
    char p[256];
    record_path(manifest, p, sizeof p);
    _cleanup_close_ int fd = openat(cdn_store_root_fd(s), p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return cdn_error_field(err, errno, "image", "image %s: %s", manifest,
                               errno == ENOENT ? "not in the store" : strerror(errno));
    if (st.st_size > RECORD_MAX)
        return cdn_error_field(err, EFBIG, "image", "image record %s: over 4 MiB", manifest);
    json_error_t jerr;
    _cleanup_json_ json_t *j = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(j))
        return cdn_error_field(err, EBADMSG, "image", "image record %s: %s", manifest, jerr.text);
    struct cdn_image_record r = {0};
    q = record_from_json(j, &r, err);
    if (q >= 0 && strcmp(r.manifest, manifest) != 0)
        q = cdn_error_field(err, EBADMSG, "image", "image record %s names %s", manifest, r.manifest);
    if (q < 0) {
        cdn_image_record_done(&r);
        return q;
    }
    *ret = r;
    return 0;
}

/* Calls fn(digest) for each "<hex><suffix>" under dir/<algo>/. */
static int each_digest(struct cdn_store *s, const char *dir, const char *suffix,
                       int (*fn)(struct cdn_store *s, const char *digest, void *data), void *data)
{
    static const char *const algos[] = {"sha256", "sha512"};
    for (size_t a = 0; a < ELEMENTSOF(algos); a++) {
        char p[64];
        snprintf(p, sizeof p, "%s/%s", dir, algos[a]);
        int fd = openat(cdn_store_root_fd(s), p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *d = fd < 0 ? NULL : fdopendir(fd);
        if (!d) {
            safe_close(fd);
            continue;
        }
        _cleanup_closedir_ DIR *dd = d;
        for (struct dirent *de; (de = readdir(dd));) {
            size_t n = strlen(de->d_name), sl = strlen(suffix);
            char digest[CDN_DIGEST_MAX];
            if (n < sl || strcmp(de->d_name + n - sl, suffix) != 0 || n - sl > 128)
                continue;
            snprintf(digest, sizeof digest, "%s:%.*s", algos[a], (int) (n - sl), de->d_name);
            if (cdn_digest_check(digest, "digest", NULL) < 0)
                continue;
            int q = fn(s, digest, data);
            if (q < 0)
                return q;
        }
    }
    return 0;
}

struct list_ctx {
    int (*fn)(const struct cdn_image_record *r, void *data);
    void *data;
    struct cdn_error *err;
};

static int list_one(struct cdn_store *s, const char *digest, void *data)
{
    struct list_ctx *c = data;
    struct cdn_image_record r = {0};
    if (cdn_store_image_get(s, digest, &r, c->err) < 0)
        return 0; /* removed meanwhile or damaged: not an image to list */
    int q = c->fn(&r, c->data);
    cdn_image_record_done(&r);
    return q;
}

int cdn_store_image_list(struct cdn_store *s, int (*fn)(const struct cdn_image_record *r, void *data),
                         void *data, struct cdn_error *err)
{
    struct cdn_error ignored;
    struct list_ctx c = {fn, data, &ignored};
    int q = each_digest(s, "images", ".json", list_one, &c);
    if (q < 0)
        return cdn_error_set(err, q, "image store: listing images: %m");
    return 0;
}

/* refs/<name>: the reference with every byte outside [A-Za-z0-9_.-] (and a leading '.') as %XX,
 * so "docker.io/library/python:3.12" is one file name; long ones by their sha256. */
static int ref_name(const char *ref, char out[256], struct cdn_error *err)
{
    size_t len = strlen(ref);
    if (!len || len > CDN_STORE_REF_MAX || strpbrk(ref, "\n\r"))
        return cdn_error_field(err, EINVAL, "image", "image reference: empty, over %d bytes or multi-line",
                               CDN_STORE_REF_MAX);
    size_t o = 0;
    for (size_t i = 0; i < len && o < 250; i++) {
        unsigned char c = (unsigned char) ref[i];
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                     c == '-' || (c == '.' && i > 0);
        o += (size_t) snprintf(out + o, 256 - o, plain ? "%c" : "%%%02X", c);
    }
    if (o >= 250) {
        struct cdn_hasher *h = NULL;
        if (cdn_hasher_new("sha256", &h) < 0)
            return cdn_error_set(err, ENOMEM, "image store: out of memory");
        cdn_hasher_update(h, ref, len);
        char d[CDN_DIGEST_MAX];
        cdn_hasher_digest(h, d);
        cdn_hasher_free(h);
        snprintf(out, 256, "long-%s", cdn_digest_hex(d));
    }
    return 0;
}

int cdn_store_ref_set(struct cdn_store *s, const char *ref, const char *manifest, struct cdn_error *err)
{
    char name[256], p[300];
    int q = ref_name(ref, name, err);
    if (q < 0 || (q = cdn_digest_check(manifest, "image.manifest", err)) < 0)
        return q;
    _cleanup_free_ char *text = NULL;
    if (asprintf(&text, "%s\n%s\n", manifest, ref) < 0)
        return cdn_error_set(err, ENOMEM, "image store: out of memory");
    snprintf(p, sizeof p, "refs/%s", name);
    return cdn_store_write_atomic(s, p, text, err);
}

/* A refs/ file's content: "<digest>\n<reference>\n". */
static int ref_read(struct cdn_store *s, const char *name, char manifest[CDN_DIGEST_MAX],
                    char ref[CDN_STORE_REF_MAX + 1])
{
    char p[300], buf[CDN_DIGEST_MAX + CDN_STORE_REF_MAX + 4];
    snprintf(p, sizeof p, "refs/%s", name);
    ssize_t n = cdn_read_file_at(cdn_store_root_fd(s), p, buf, sizeof buf);
    if (n < 0)
        return (int) n;
    char *nl = strchr(buf, '\n');
    if (!nl)
        return -EBADMSG;
    *nl = '\0';
    char *r = nl + 1;
    r[strcspn(r, "\n")] = '\0';
    if (cdn_digest_check(buf, "digest", NULL) < 0 || !r[0])
        return -EBADMSG;
    snprintf(manifest, CDN_DIGEST_MAX, "%s", buf);
    snprintf(ref, CDN_STORE_REF_MAX + 1, "%s", r);
    return 0;
}

int cdn_store_ref_get(struct cdn_store *s, const char *ref, char manifest[CDN_DIGEST_MAX],
                      struct cdn_error *err)
{
    char name[256], stored[CDN_STORE_REF_MAX + 1];
    int q = ref_name(ref, name, err);
    if (q < 0)
        return q;
    q = ref_read(s, name, manifest, stored);
    if (q == -ENOENT)
        return cdn_error_field(err, ENOENT, "image", "image %s: not in the store", ref);
    if (q < 0 || strcmp(stored, ref) != 0)
        return cdn_error_field(err, EBADMSG, "image", "image store: the entry of %s is damaged", ref);
    return 0;
}

int cdn_store_ref_path(const char *state_dir, const char *ref, char out[4096], struct cdn_error *err)
{
    char name[256];
    int q = ref_name(ref, name, err);
    if (q < 0)
        return q;
    if ((size_t) snprintf(out, 4096, "%s/images/store/refs/%s", state_dir, name) >= 4096)
        return cdn_error_set(err, ENAMETOOLONG, "image store: state directory path too long");
    return 0;
}

int cdn_store_ref_remove(struct cdn_store *s, const char *ref, struct cdn_error *err)
{
    char name[256], p[300];
    int q = ref_name(ref, name, err);
    if (q < 0)
        return q;
    snprintf(p, sizeof p, "refs/%s", name);
    if (unlinkat(cdn_store_root_fd(s), p, 0) < 0)
        return cdn_error_field(err, errno, "image", "image %s: %s", ref,
                               errno == ENOENT ? "not in the store" : strerror(errno));
    return 0;
}

int cdn_store_ref_list(struct cdn_store *s, int (*fn)(const char *ref, const char *manifest, void *data),
                       void *data, struct cdn_error *err)
{
    int fd = openat(cdn_store_root_fd(s), "refs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        safe_close(fd);
        return cdn_error_set(err, errno, "image store: listing refs: %m");
    }
    _cleanup_closedir_ DIR *dir = d;
    for (struct dirent *de; (de = readdir(dir));) {
        char manifest[CDN_DIGEST_MAX], ref[CDN_STORE_REF_MAX + 1];
        if (de->d_name[0] == '.' || ref_read(s, de->d_name, manifest, ref) < 0)
            continue;
        int q = fn(ref, manifest, data);
        if (q < 0)
            return q;
    }
    return 0;
}

struct rm_ctx {
    struct cdn_store *s;
    const char *manifest;
};

static int unref_one(const char *ref, const char *manifest, void *data)
{
    struct rm_ctx *c = data;
    if (strcmp(manifest, c->manifest) == 0)
        (void) cdn_store_ref_remove(c->s, ref, NULL);
    return 0;
}

static void use_lock_path(const char *manifest, char *buf, size_t size)
{
    snprintf(buf, size, "locks/use-%s", cdn_digest_hex(manifest));
}

int cdn_store_image_remove(struct cdn_store *s, const char *manifest, struct cdn_error *err)
{
    int q = cdn_digest_check(manifest, "image", err);
    if (q < 0)
        return q;
    struct rm_ctx c = {s, manifest};
    q = cdn_store_ref_list(s, unref_one, &c, err);
    if (q < 0)
        return q;
    char p[256];
    record_path(manifest, p, sizeof p);
    if (unlinkat(cdn_store_root_fd(s), p, 0) < 0)
        return cdn_error_field(err, errno, "image", "image %s: %s", manifest,
                               errno == ENOENT ? "not in the store" : strerror(errno));
    /* A sandbox waiting for its hold meanwhile finds its lock file gone and the record with it. */
    use_lock_path(manifest, p, sizeof p);
    (void) unlinkat(cdn_store_root_fd(s), p, 0);
    return 0;
}

static int flock_nointr(int fd, int op)
{
    while (flock(fd, op) < 0)
        if (errno != EINTR)
            return -errno;
    return 0;
}

int cdn_store_image_hold(const char *state_dir, const char *manifest, struct cdn_error *err)
{
    int q = cdn_digest_check(manifest, "image", err);
    if (q < 0)
        return q;
    char store[4096], lock[256], rec[256];
    if ((size_t) snprintf(store, sizeof store, "%s/images/store", state_dir) >= sizeof store)
        return cdn_error_set(err, ENAMETOOLONG, "image store: state directory path too long");
    _cleanup_close_ int root = open(store, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return cdn_error_field(err, errno, "image", "image %s: open %s: %m", manifest, store);
    use_lock_path(manifest, lock, sizeof lock);
    record_path(manifest, rec, sizeof rec);
    /* A removal unlinks the lock file while it holds it: a hold taken on that file is on nothing
     * (the next claim makes a new one), so it is taken again on the file the name has now. */
    for (int attempt = 0; attempt < 16; attempt++) {
        _cleanup_close_ int fd = openat(root, lock, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 || (q = flock_nointr(fd, LOCK_SH)) < 0)
            return cdn_error_field(err, fd < 0 ? errno : -q, "image", "image %s: lock %s: %s", manifest, lock,
                                   strerror(fd < 0 ? errno : -q));
        struct stat held, named;
        if (fstat(fd, &held) < 0 || fstatat(root, lock, &named, AT_SYMLINK_NOFOLLOW) < 0 ||
            held.st_ino != named.st_ino || held.st_dev != named.st_dev)
            continue;
        if (faccessat(root, rec, F_OK, 0) < 0)
            return cdn_error_field(err, ENOENT, "image", "image %s was removed from the store", manifest);
        return TAKE_FD(fd);
    }
    return cdn_error_field(err, EAGAIN, "image", "image %s: its lock kept changing", manifest);
}

int cdn_store_image_claim(struct cdn_store *s, const char *manifest, const char *ref, struct cdn_error *err)
{
    int q = cdn_digest_check(manifest, "image", err);
    if (q < 0)
        return q;
    char lock[256];
    use_lock_path(manifest, lock, sizeof lock);
    _cleanup_close_ int fd =
        openat(cdn_store_root_fd(s), lock, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return cdn_error_field(err, errno, "ref", "image %s: lock %s: %m", ref, lock);
    if ((q = flock_nointr(fd, LOCK_EX | LOCK_NB)) == -EWOULDBLOCK)
        return cdn_error_field(err, EBUSY, "ref",
                               "image %s is in use by a running sandbox: delete the sandboxes first", ref);
    if (q < 0)
        return cdn_error_field(err, -q, "ref", "image %s: lock %s: %s", ref, lock, strerror(-q));
    return TAKE_FD(fd);
}

/* What prune keeps: every digest an image record or ref names, sorted for bsearch. */
struct keep {
    char (*d)[CDN_DIGEST_MAX];
    size_t n, cap;
    struct cdn_error *err;
    bool (*in_use)(const char *kind, const char *digest, void *data);
    void *data;
    uint64_t freed;
};

static int keep_add(struct keep *k, const char *digest)
{
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 64;
        void *d = realloc(k->d, cap * sizeof(*k->d));
        if (!d)
            return -ENOMEM;
        k->d = d;
        k->cap = cap;
    }
    snprintf(k->d[k->n++], CDN_DIGEST_MAX, "%s", digest);
    return 0;
}

static int keep_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

static bool kept(struct keep *k, const char *digest)
{
    return k->n && bsearch(digest, k->d, k->n, sizeof(*k->d), keep_cmp);
}

/* A record that cannot be read stops the prune: its layers must not go as unreferenced. */
static int keep_record(struct cdn_store *s, const char *manifest, void *data)
{
    struct keep *k = data;
    struct cdn_image_record r = {0};
    int q = cdn_store_image_get(s, manifest, &r, k->err);
    if (q < 0)
        return q;
    q = keep_add(k, r.manifest) < 0 || keep_add(k, r.config) < 0 ? -ENOMEM : 0;
    for (size_t i = 0; q == 0 && i < r.n_layers; i++)
        if (keep_add(k, r.diff_ids[i]) < 0 || keep_add(k, r.blobs[i]) < 0)
            q = -ENOMEM;
    cdn_image_record_done(&r);
    return q;
}

static int keep_ref(const char *ref, const char *manifest, void *data)
{
    (void) ref;
    return keep_add(data, manifest);
}

static int prune_blob(struct cdn_store *s, const char *digest, void *data)
{
    struct keep *k = data;
    if (kept(k, digest) || (k->in_use && k->in_use("blob", digest, k->data)))
        return 0;
    char p[256];
    snprintf(p, sizeof p, "blobs/%.6s/%s", digest, cdn_digest_hex(digest));
    cdn_store_du_at(cdn_store_root_fd(s), p, &k->freed);
    if (unlinkat(cdn_store_root_fd(s), p, 0) < 0 && errno != ENOENT)
        return cdn_error_set(k->err, errno, "image store: removing blob %s: %m", digest);
    snprintf(p, sizeof p, "diffids/%.6s/%s", digest, cdn_digest_hex(digest));
    (void) unlinkat(cdn_store_root_fd(s), p, 0);
    return 0;
}

static int prune_layer(struct cdn_store *s, const char *diff_id, void *data)
{
    struct keep *k = data;
    if (kept(k, diff_id) || (k->in_use && k->in_use("layer", diff_id, k->data)))
        return 0;
    char p[256];
    snprintf(p, sizeof p, "layers/%.6s/%s", diff_id, cdn_digest_hex(diff_id));
    cdn_store_du_at(cdn_store_root_fd(s), p, &k->freed);
    int q = cdn_layer_rm_rf_at(cdn_store_root_fd(s), p);
    if (q < 0)
        return cdn_error_set(k->err, q, "image store: removing layer %s: %m", diff_id);
    return 0;
}

int cdn_store_prune(struct cdn_store *s, bool (*in_use)(const char *kind, const char *digest, void *data),
                    void *data, uint64_t *freed, struct cdn_error *err)
{
    _cleanup_close_ int gc = cdn_store_gc_lock(s, true, err);
    if (gc < 0)
        return gc;
    struct keep k = {.err = err, .in_use = in_use, .data = data};
    int q = each_digest(s, "images", ".json", keep_record, &k);
    if (q >= 0)
        q = cdn_store_ref_list(s, keep_ref, &k, err);
    if (q >= 0) {
        if (k.n)
            qsort(k.d, k.n, sizeof(*k.d), keep_cmp);
        q = each_digest(s, "blobs", "", prune_blob, &k);
    }
    if (q >= 0)
        q = each_digest(s, "layers", "", prune_layer, &k);
    free(k.d);
    if (q < 0)
        return err && err->errnum ? q : cdn_error_set(err, q, "image store: prune: %m");
    if (freed)
        *freed = k.freed;
    return 0;
}
