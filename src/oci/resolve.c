/* OCI references for the rest of cordon (resolve.h). */
#include "oci/resolve.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/paths.h"
#include "image/image.h"
#include "oci/ref.h"
#include "oci/store.h"
#include "shared/user.h"

bool cdn_oci_is_reference(const char *name)
{
    struct cdn_image_ref ref;
    return name && cdn_image_ref_parse(name, &ref, NULL) >= 0 && cdn_image_ref_is_oci(&ref);
}

static int parse_oci(const char *name, struct cdn_image_ref *ref, char canon[CDN_IMAGE_REF_MAX],
                     struct cdn_error *err)
{
    int r = cdn_image_ref_parse(name, ref, err);
    if (r < 0)
        return r;
    if (!cdn_image_ref_is_oci(ref))
        return cdn_error_field(err, EINVAL, "image", "image: '%s' is not an OCI reference", name);
    if (cdn_image_ref_format(ref, canon, CDN_IMAGE_REF_MAX) < 0)
        return cdn_error_field(err, ENAMETOOLONG, "image", "image: reference too long");
    return 0;
}

/* name parsed and made canonical, and the store opened. */
static int open_ref(const char *name, struct cdn_image_ref *ref, char canon[CDN_IMAGE_REF_MAX],
                    struct cdn_store **store, struct cdn_error *err)
{
    int r = parse_oci(name, ref, canon, err);
    return r < 0 ? r : cdn_store_open(cdn_state_dir(), store, err);
}

/* The stored image a reference points at, or -ENOENT. */
static int lookup(struct cdn_store *s, const char *canon, struct cdn_image_record *rec, struct cdn_error *err)
{
    char manifest[CDN_DIGEST_MAX];
    int r = cdn_store_ref_get(s, canon, manifest, err);
    if (r < 0)
        return r;
    return cdn_store_image_get(s, manifest, rec, err);
}

/* What the store holds for a reference: its manifest, its layers for the tiers (topmost first,
 * relative to the store's layers/) and its config's bytes. */
struct stored {
    char manifest[CDN_DIGEST_MAX];
    struct cdn_image image;
    char *config;
    size_t config_len;
};

static int read_stored_config(struct cdn_store *s, const char *canon, const char *digest, struct stored *ret,
                              struct cdn_error *err)
{
    _cleanup_close_ int fd = cdn_store_blob_open(s, digest, err);
    if (fd < 0)
        return fd;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size < 0 || (uint64_t) st.st_size > CDN_OCI_JSON_MAX)
        return cdn_error_field(err, EFBIG, "image", "image: %s: its stored config cannot be read", canon);
    ret->config = malloc((size_t) st.st_size + 1);
    if (!ret->config)
        return -ENOMEM;
    ssize_t n = read(fd, ret->config, (size_t) st.st_size + 1);
    if (n < 0 || n != st.st_size)
        return cdn_error_field(err, n < 0 ? errno : EIO, "image",
                               "image: %s: its stored config cannot be read", canon);
    ret->config_len = (size_t) n;
    return 0;
}

static int read_stored(const char *canon, struct stored *ret, struct cdn_error *err)
{
    _cleanup_store_ struct cdn_store *s = NULL;
    int r = cdn_store_open(cdn_state_dir(), &s, err);
    if (r < 0)
        return r;
    struct cdn_image_record rec = {0};
    if ((r = cdn_store_ref_get(s, canon, ret->manifest, err)) < 0 ||
        (r = cdn_store_image_get(s, ret->manifest, &rec, err)) < 0) {
        if (r == -ENOENT)
            return cdn_error_field(err, ENOENT, "image",
                                   "image: %s is not in the image store (cordon image pull)", canon);
        return r;
    }
    if (rec.n_layers > CDN_IMAGE_LAYERS_MAX) {
        cdn_image_record_done(&rec);
        return cdn_error_field(err, E2BIG, "image", "image: %s has %zu layers, more than %d", canon,
                               rec.n_layers, CDN_IMAGE_LAYERS_MAX);
    }
    struct cdn_image *img = &ret->image;
    (void) snprintf(img->lower, sizeof img->lower, "%s/layers", cdn_store_path(s));
    img->host = false;
    img->n_layers = rec.n_layers;
    (void) snprintf(img->digest, sizeof img->digest, "%s", ret->manifest);
    for (size_t i = 0; i < rec.n_layers && r >= 0; i++) {
        const char *diff_id = rec.diff_ids[rec.n_layers - 1 - i];
        (void) snprintf(img->layers[i], sizeof img->layers[i], "sha256/%s", cdn_digest_hex(diff_id));
        if (cdn_store_layer_has(s, diff_id, NULL) != 1)
            r = cdn_error_field(err, ENOENT, "image",
                                "image: %s: layer %s is missing from the store (pull it again)", canon,
                                diff_id);
    }
    if (r >= 0)
        r = read_stored_config(s, canon, rec.config, ret, err);
    cdn_image_record_done(&rec);
    return r < 0 ? r : 0;
}

static int give(const struct stored *s, char manifest[CDN_DIGEST_MAX], struct cdn_image *image,
                struct cdn_oci_config *config, struct cdn_error *err)
{
    if (manifest)
        memcpy(manifest, s->manifest, CDN_DIGEST_MAX);
    if (image)
        *image = s->image;
    return config ? cdn_oci_config_parse(s->config, s->config_len, config, err) : 0;
}

/* cordond resolves the same few images for create after create: what the last ones resolved to is
 * kept, each entry valid while the reference's entry in the store is the same file (a pull replaces
 * it, an rm removes it; the layers and config an entry names are referenced, so prune keeps them,
 * and a record is content-addressed). A hit costs one stat instead of opening the store, reading
 * the ref, the image record and the config and a stat per layer. */
#define STORED_CACHED 8
static struct cached {
    char ref_path[4096]; /* "" when the slot is free */
    dev_t dev;
    ino_t ino;
    struct timespec mtime;
    struct stored stored;
} stored_cache[STORED_CACHED];
static size_t stored_next;
static pthread_mutex_t stored_lock = PTHREAD_MUTEX_INITIALIZER;

static bool same_file(const struct cached *c, const struct stat *st)
{
    return c->dev == st->st_dev && c->ino == st->st_ino && c->mtime.tv_sec == st->st_mtim.tv_sec &&
           c->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

int cdn_oci_stored(const char *name, char manifest[CDN_DIGEST_MAX], struct cdn_image *image,
                   struct cdn_oci_config *config, struct cdn_error *err)
{
    struct cdn_image_ref ref;
    char canon[CDN_IMAGE_REF_MAX], path[4096];
    int r = parse_oci(name, &ref, canon, err);
    if (r < 0 || (r = cdn_store_ref_path(cdn_state_dir(), canon, path, err)) < 0)
        return r;
    /* Taken before the store is read: an entry replaced in between leaves a cache entry that the
     * next stat finds stale, never a stale image under the new entry's identity. */
    struct stat st;
    bool have_st = stat(path, &st) == 0;
    pthread_mutex_lock(&stored_lock);
    for (size_t i = 0; have_st && i < STORED_CACHED; i++)
        if (strcmp(stored_cache[i].ref_path, path) == 0 && same_file(&stored_cache[i], &st)) {
            r = give(&stored_cache[i].stored, manifest, image, config, err);
            pthread_mutex_unlock(&stored_lock);
            return r;
        }
    pthread_mutex_unlock(&stored_lock);
    _cleanup_free_ struct stored *fresh = calloc(1, sizeof *fresh);
    if (!fresh)
        return -ENOMEM;
    if ((r = read_stored(canon, fresh, err)) < 0 || (r = give(fresh, manifest, image, config, err)) < 0 ||
        !have_st) {
        free(fresh->config);
        return r;
    }
    pthread_mutex_lock(&stored_lock);
    size_t slot = STORED_CACHED;
    for (size_t i = 0; i < STORED_CACHED && slot == STORED_CACHED; i++)
        if (strcmp(stored_cache[i].ref_path, path) == 0)
            slot = i;
    if (slot == STORED_CACHED)
        slot = stored_next++ % STORED_CACHED;
    struct cached *c = &stored_cache[slot];
    free(c->stored.config);
    (void) snprintf(c->ref_path, sizeof c->ref_path, "%s", path);
    c->dev = st.st_dev, c->ino = st.st_ino, c->mtime = st.st_mtim;
    c->stored = *fresh;
    pthread_mutex_unlock(&stored_lock);
    return 0;
}

static int push_manifest(const char *ref, const char *manifest, void *data)
{
    (void) ref;
    return cdn_oci_named(manifest, data) ? 0 : cdn_strv_push(data, manifest);
}

int cdn_oci_named_manifests(struct cdn_store *s, struct cdn_strv *ret, struct cdn_error *err)
{
    struct cdn_strv l = {0};
    int r = cdn_store_ref_list(s, push_manifest, &l, err);
    if (r < 0) {
        cdn_strv_free(&l);
        return err && err->errnum ? r
                                  : cdn_error_set(err, r, "image store: list references: %s", strerror(-r));
    }
    *ret = l;
    return 0;
}

bool cdn_oci_named(const char *digest, void *named)
{
    const struct cdn_strv *l = named;
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i], digest) == 0)
            return true;
    return false;
}

/* image.h's hook. */
static int resolve_oci(const char *name, struct cdn_image *ret, struct cdn_error *err)
{
    return cdn_oci_stored(name, NULL, ret, NULL, err);
}

static int hold_oci(const char *manifest, struct cdn_error *err)
{
    return cdn_store_image_hold(cdn_state_dir(), manifest, err);
}

void cdn_oci_install_resolver(void)
{
    cdn_image_resolve_oci = resolve_oci;
    cdn_image_hold_oci = hold_oci;
}

int cdn_oci_ensure(const char *name, enum cdn_pull_policy policy, const struct cdn_pull_options *o,
                   struct cdn_oci_config *config, struct cdn_error *err)
{
    struct cdn_image_ref ref;
    char canon[CDN_IMAGE_REF_MAX];
    _cleanup_store_ struct cdn_store *s = NULL;
    int r = open_ref(name, &ref, canon, &s, err);
    if (r < 0)
        return r;
    struct cdn_image_record rec = {0};
    bool have = policy != CDN_PULL_ALWAYS && lookup(s, canon, &rec, NULL) >= 0;
    cdn_image_record_done(&rec);
    if (!have && policy == CDN_PULL_NEVER)
        return cdn_error_field(err, ENOENT, "image",
                               "image: %s is not in the image store and pull is \"never\"", canon);
    char manifest[CDN_DIGEST_MAX];
    struct cdn_pull_options po = o ? *o : (struct cdn_pull_options){0};
    if (strcmp(ref.registry, "docker.io") != 0)
        po.registry.mirrors = NULL; /* mirrors are Docker Hub's (cdn_pull_options_from_env) */
    if (!have && (r = cdn_image_pull(s, &ref, &po, manifest, err)) < 0) {
        if (!err || strstr(err->msg, canon))
            return r;
        (void) cdn_error_prefix(err, r, "image %s", canon);
        (void) snprintf(err->field, sizeof err->field, "image");
        return r;
    }
    return config ? cdn_oci_stored(canon, NULL, NULL, config, err) : 0;
}

static bool env_has(const struct cdn_strv *env, const char *kv)
{
    size_t n = strcspn(kv, "=");
    for (size_t i = 0; i < env->n; i++)
        if (strncmp(env->v[i], kv, n) == 0 && env->v[i][n] == '=')
            return true;
    return false;
}

int cdn_oci_apply_config(const struct cdn_oci_config *c, struct cdn_spec *spec, bool workdir_given,
                         bool take_user, struct cdn_error *err)
{
    if (take_user && !spec->user && c->user && c->user[0]) {
        if (cdn_user_check(c->user, NULL) < 0)
            return cdn_error_field(err, EINVAL, "user",
                                   "user: the image's User '%.64s' is not name, uid, "
                                   "name:group or uid:gid",
                                   c->user);
        if (!(spec->user = strdup(c->user)))
            return -ENOMEM;
    }
    for (size_t i = 0; i < c->env.n; i++) {
        const char *kv = c->env.v[i];
        if (!strchr(kv, '=') || env_has(&spec->env, kv))
            continue;
        if (cdn_strv_push(&spec->env, kv) < 0)
            return cdn_error_field(err, E2BIG, "env", "env: with the image's, more than %d entries",
                                   CDN_MAX_LIST);
    }
    if (!workdir_given && c->workdir && strcmp(c->workdir, "/") != 0) {
        char *w = strdup(c->workdir);
        if (!w)
            return -ENOMEM;
        free(spec->workdir);
        spec->workdir = w;
    }
    return 0;
}

static int split_env(const char *name, struct cdn_strv *ret)
{
    const char *v = getenv(name);
    while (v && *v) {
        size_t n = strcspn(v, ",");
        if (n > 0) {
            _cleanup_free_ char *item = strndup(v, n);
            if (!item || cdn_strv_push(ret, item) < 0)
                return -ENOMEM;
        }
        v += n + (v[n] == ',');
    }
    return 0;
}

int cdn_pull_options_from_env(struct cdn_pull_options *o, struct cdn_pull_env *env)
{
    if (split_env("CORDON_INSECURE_REGISTRIES", &env->insecure) < 0 ||
        split_env("CORDON_REGISTRY_MIRRORS", &env->mirrors) < 0 ||
        split_env("CORDON_REGISTRY_CA_FILES", &env->ca_files) < 0)
        return -ENOMEM;
    *o = (struct cdn_pull_options){
        .registry = {.insecure = (const char *const *) env->insecure.v,
                     .mirrors = (const char *const *) env->mirrors.v,
                     .ca_files = (const char *const *) env->ca_files.v},
        .progress = isatty(STDERR_FILENO) ? cdn_pull_progress_tty : NULL,
    };
    return 0;
}

void cdn_pull_env_free(struct cdn_pull_env *env)
{
    cdn_strv_free(&env->insecure);
    cdn_strv_free(&env->mirrors);
    cdn_strv_free(&env->ca_files);
}

static void human(char *buf, size_t size, uint64_t n)
{
    if (n >= 1u << 20)
        (void) snprintf(buf, size, "%.1f MiB", (double) n / (1u << 20));
    else
        (void) snprintf(buf, size, "%.1f KiB", (double) n / 1024);
}

/* One line: layers done of all, bytes of all. Keeps its own sums (called one event at a time). */
void cdn_pull_progress_tty(void *data, const struct cdn_pull_event *ev)
{
    static uint64_t per[CDN_OCI_LAYERS_MAX], total;
    static size_t layers_done;
    (void) data;
    if (ev->phase == CDN_PULL_RESOLVED) {
        memset(per, 0, sizeof per);
        total = ev->total, layers_done = 0;
        fprintf(stderr, "cordon: pulling %s: %zu layers\n", ev->digest, ev->n_layers);
        return;
    }
    if (ev->layer < CDN_OCI_LAYERS_MAX && ev->phase != CDN_PULL_DONE)
        per[ev->layer] = ev->done;
    if (ev->phase == CDN_PULL_UNPACKED || ev->phase == CDN_PULL_CACHED)
        layers_done++;
    uint64_t sum = 0;
    for (size_t i = 0; i < CDN_OCI_LAYERS_MAX; i++)
        sum += per[i];
    char a[32], b[32];
    human(a, sizeof a, sum), human(b, sizeof b, total);
    if (ev->phase == CDN_PULL_DONE)
        fprintf(stderr, "\rcordon: pulled %s (%s)%20s\n", ev->digest, b, "");
    else
        fprintf(stderr, "\rcordon: layer %zu/%zu: %s of %s%s", layers_done, ev->n_layers, a, b,
                ev->phase == CDN_PULL_CACHED ? " (cached)" : "         ");
}
