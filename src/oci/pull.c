/* Pulling images into the store (pull.h). Runs on the host as root; everything read from a registry
 * or a layout is checked (digests by the store and the registry client, documents by manifest.c)
 * before it is used. */
#include "oci/pull.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oci/archive.h"
#include "oci/layout.h"
#include "oci/manifest.h"
#include "shared/fd-util.h"

struct pull {
    struct cdn_store *s;
    const struct cdn_pull_options *o;
    struct cdn_registry *reg; /* a registry's image, or */
    const char *repository;
    struct cdn_oci_layout *layout; /* a layout's (an archive's, unpacked into archive_dir) */
    char archive_dir[4200];
    const struct cdn_oci_image *img;
    pthread_mutex_t lock; /* what follows, and the progress callback */
    size_t next;
    int status;
    struct cdn_error err;
};

static void emit(struct pull *p, struct cdn_pull_event ev)
{
    if (!p->o || !p->o->progress)
        return;
    ev.n_layers = p->img->manifest.n_layers;
    pthread_mutex_lock(&p->lock);
    p->o->progress(p->o->progress_data, &ev);
    pthread_mutex_unlock(&p->lock);
}

struct fetch_progress {
    struct pull *p;
    size_t layer;
};

static void on_bytes(void *data, uint64_t done, uint64_t total)
{
    struct fetch_progress *f = data;
    emit(f->p, (struct cdn_pull_event){.phase = CDN_PULL_FETCH,
                                       .layer = f->layer,
                                       .digest = f->p->img->manifest.layers[f->layer].digest,
                                       .done = done,
                                       .total = total});
}

/* Copy a layout's blob into the writer's file (the store verifies it on commit). */
static int copy_layout_blob(struct pull *p, size_t i, int out, struct cdn_error *err)
{
    const struct cdn_oci_desc *d = &p->img->manifest.layers[i];
    _cleanup_close_ int in = -EBADF;
    int r = cdn_oci_layout_open_blob(p->layout, d, &in, err);
    if (r < 0)
        return r;
    char buf[1 << 16];
    uint64_t done = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return cdn_error_set(err, errno, "image: read layer %s: %m", d->digest);
        if (n == 0)
            return 0;
        if (cdn_write_all(out, buf, (size_t) n) < 0)
            return cdn_error_set(err, errno, "image: store layer %s: %m", d->digest);
        done += (uint64_t) n;
        on_bytes(&(struct fetch_progress){p, i}, done, d->size);
    }
}

/* One layer: reused if the store has its diff_id unpacked; else its blob fetched (unless stored),
 * verified, and unpacked. */
static int pull_layer(struct pull *p, size_t i, struct cdn_error *err)
{
    const struct cdn_oci_desc *d = &p->img->manifest.layers[i];
    const char *diff_id = p->img->config.diff_ids[i];
    struct cdn_pull_event ev = {.layer = i, .digest = d->digest, .done = d->size, .total = d->size};
    if (cdn_store_layer_has(p->s, diff_id, NULL) == 1) {
        ev.phase = CDN_PULL_CACHED;
        emit(p, ev);
        return 0;
    }
    int r = cdn_store_blob_has(p->s, d->digest);
    if (r < 0)
        return cdn_error_field(err, -r, "image", "image: layer %zu: bad digest '%s'", i, d->digest);
    if (r == 0) {
        struct cdn_blob_writer w;
        if ((r = cdn_store_blob_begin(p->s, &w, err)) < 0)
            return r;
        struct fetch_progress fp = {p, i};
        r = p->reg
                ? cdn_registry_get_blob(p->reg, p->repository, d->digest, d->size, w.fd, on_bytes, &fp, err)
                : copy_layout_blob(p, i, w.fd, err);
        if (r < 0) {
            cdn_store_blob_abort(p->s, &w);
            return r;
        }
        if ((r = cdn_store_blob_commit(p->s, &w, d->digest, d->size, err)) < 0)
            return r;
    }
    if ((r = cdn_store_layer_ensure(p->s, d->digest, diff_id, NULL, NULL, NULL, err)) < 0)
        return cdn_error_prefix(err, r, "image: layer %zu (%s)", i, d->digest);
    ev.phase = CDN_PULL_UNPACKED;
    emit(p, ev);
    return 0;
}

static void *layer_worker(void *data)
{
    struct pull *p = data;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        size_t i = p->next++;
        bool stop = p->status < 0 || i >= p->img->manifest.n_layers;
        pthread_mutex_unlock(&p->lock);
        if (stop)
            return NULL;
        struct cdn_error e = {0};
        int r = pull_layer(p, i, &e);
        if (r < 0) {
            pthread_mutex_lock(&p->lock);
            if (p->status == 0)
                p->status = r, p->err = e;
            pthread_mutex_unlock(&p->lock);
        }
    }
}

static int pull_layers(struct pull *p, struct cdn_error *err)
{
    size_t n = p->o && p->o->parallel ? p->o->parallel : 3;
    if (n > p->img->manifest.n_layers)
        n = p->img->manifest.n_layers;
    pthread_t t[16];
    if (n > 16)
        n = 16;
    size_t started = 0;
    for (; started < n; started++)
        if (pthread_create(&t[started], NULL, layer_worker, p) != 0)
            break;
    if (started == 0 && n > 0)
        (void) layer_worker(p); /* no thread to be had: this one does it all */
    for (size_t i = 0; i < started; i++)
        (void) pthread_join(t[i], NULL);
    if (p->status < 0) {
        *err = p->err;
        return p->status;
    }
    return 0;
}

/* A registry's manifest for the host's platform: following an index to its entry. */
static int registry_manifest(struct cdn_registry *reg, const struct cdn_image_ref *ref,
                             struct cdn_oci_image *img, struct cdn_error *err)
{
    struct cdn_registry_manifest m = {0};
    int r = cdn_registry_get_manifest(reg, ref->repository, ref->digest[0] ? ref->digest : ref->tag, NULL, &m,
                                      err);
    for (int depth = 0; r >= 0; depth++) {
        enum cdn_oci_kind kind;
        if ((r = cdn_oci_kind_of(m.data, m.size, m.media_type, &kind, err)) < 0)
            break;
        if (kind == CDN_OCI_MANIFEST) {
            if ((r = cdn_oci_manifest_parse(m.data, m.size, m.media_type, &img->manifest, err)) < 0)
                break;
            memcpy(img->manifest_digest, m.digest, sizeof img->manifest_digest);
            img->manifest_json = (char *) m.data, img->manifest_len = m.size;
            return 0;
        }
        if (depth > 0) {
            r = cdn_error_field(err, EMEDIUMTYPE, "image", "image: an index inside an index (%s)", m.digest);
            break;
        }
        struct cdn_oci_index ix = {0};
        struct cdn_oci_platform host;
        const struct cdn_oci_desc *pick = NULL;
        cdn_oci_platform_host(&host);
        if ((r = cdn_oci_index_parse(m.data, m.size, m.media_type, &ix, err)) >= 0 &&
            (r = cdn_oci_index_pick(&ix, &host, &pick, err)) >= 0) {
            char digest[CDN_DIGEST_MAX];
            memcpy(digest, pick->digest, sizeof digest);
            cdn_registry_manifest_done(&m);
            r = cdn_registry_get_manifest(reg, ref->repository, digest, NULL, &m, err);
        }
        cdn_oci_index_free(&ix);
    }
    cdn_registry_manifest_done(&m);
    return r;
}

/* Its config: fetched into the store (verified there), then read back and checked. */
static int registry_config(struct pull *p, struct cdn_oci_image *img, struct cdn_error *err)
{
    const struct cdn_oci_desc *c = &img->manifest.config;
    if (c->size > CDN_OCI_JSON_MAX)
        return cdn_error_field(err, EFBIG, "image", "image: config %s is %llu bytes, over the limit of %u",
                               c->digest, (unsigned long long) c->size, CDN_OCI_JSON_MAX);
    int r;
    if (cdn_store_blob_has(p->s, c->digest) != 1) {
        struct cdn_blob_writer w;
        if ((r = cdn_store_blob_begin(p->s, &w, err)) < 0)
            return r;
        r = cdn_registry_get_blob(p->reg, p->repository, c->digest, c->size, w.fd, NULL, NULL, err);
        if (r < 0) {
            cdn_store_blob_abort(p->s, &w);
            return r;
        }
        if ((r = cdn_store_blob_commit(p->s, &w, c->digest, c->size, err)) < 0)
            return r;
    }
    _cleanup_close_ int fd = cdn_store_blob_open(p->s, c->digest, err);
    if (fd < 0)
        return fd;
    if (!(img->config_json = malloc(c->size + 1)))
        return -ENOMEM;
    ssize_t n = pread(fd, img->config_json, c->size, 0);
    if (n != (ssize_t) c->size)
        return cdn_error_set(err, n < 0 ? errno : EIO, "image: read config %s back from the store",
                             c->digest);
    img->config_json[c->size] = 0;
    img->config_len = c->size;
    struct cdn_oci_platform host;
    cdn_oci_platform_host(&host);
    if ((r = cdn_oci_config_parse(img->config_json, img->config_len, &img->config, err)) < 0)
        return r;
    return cdn_oci_config_check(&img->config, &img->manifest, &host, err);
}

static int record_image(struct pull *p, const struct cdn_image_ref *ref, struct cdn_error *err)
{
    const struct cdn_oci_image *img = p->img;
    const size_t n = img->manifest.n_layers;
    struct cdn_image_record rec = {.n_layers = n};
    memcpy(rec.manifest, img->manifest_digest, sizeof rec.manifest);
    memcpy(rec.config, img->manifest.config.digest, sizeof rec.config);
    memcpy(rec.os, img->config.platform.os, sizeof rec.os);
    memcpy(rec.arch, img->config.platform.arch, sizeof rec.arch);
    memcpy(rec.variant, img->config.platform.variant, sizeof rec.variant);
    rec.size = img->manifest_len + img->manifest.config.size;
    rec.diff_ids = calloc(n ? n : 1, sizeof *rec.diff_ids);
    rec.blobs = calloc(n ? n : 1, sizeof *rec.blobs);
    int r = -ENOMEM;
    if (rec.diff_ids && rec.blobs) {
        for (size_t i = 0; i < n; i++) {
            memcpy(rec.diff_ids[i], img->config.diff_ids[i], CDN_DIGEST_MAX);
            memcpy(rec.blobs[i], img->manifest.layers[i].digest, CDN_DIGEST_MAX);
            rec.size += img->manifest.layers[i].size;
        }
        r = cdn_store_image_put(p->s, &rec, err);
    }
    cdn_image_record_done(&rec);
    char name[CDN_IMAGE_REF_MAX];
    if (r >= 0 && cdn_image_ref_format(ref, name, sizeof name) < 0)
        r = cdn_error_field(err, ENAMETOOLONG, "image", "image: reference too long");
    return r < 0 ? r : cdn_store_ref_set(p->s, name, img->manifest_digest, err);
}

static int source_image(struct pull *p, const struct cdn_image_ref *ref, struct cdn_oci_image *img,
                        struct cdn_error *err)
{
    int r;
    const char *dir = ref->path;
    if (ref->kind == CDN_REF_OCI_ARCHIVE || ref->kind == CDN_REF_DOCKER_ARCHIVE) {
        /* Unpacked into the store's tmp/ (root only; swept if this process dies), read as a layout. */
        (void) snprintf(p->archive_dir, sizeof p->archive_dir, "%s/tmp/archive-XXXXXX", cdn_store_path(p->s));
        if (!mkdtemp(p->archive_dir)) {
            p->archive_dir[0] = 0;
            return cdn_error_set(err, errno, "image: a directory to unpack the archive in: %m");
        }
        if ((r = cdn_oci_archive_unpack(ref, p->archive_dir, 0, err)) < 0)
            return r;
        dir = p->archive_dir;
    }
    if (ref->kind == CDN_REF_OCI_LAYOUT || dir != ref->path) {
        struct cdn_oci_platform host;
        cdn_oci_platform_host(&host);
        const char *tag = ref->kind == CDN_REF_DOCKER_ARCHIVE ? NULL : ref->tag;
        if ((r = cdn_oci_layout_open(dir, &p->layout, err)) < 0 ||
            (r = cdn_oci_layout_resolve(p->layout, tag, &host, img, err)) < 0)
            return r;
        return cdn_store_blob_put(p->s, img->config_json, img->config_len, img->manifest.config.digest, err);
    }
    if (ref->kind != CDN_REF_REGISTRY)
        return cdn_error_field(err, EOPNOTSUPP, "image", "image: %s references cannot be pulled yet",
                               cdn_image_ref_kind_name(ref->kind));
    if ((r = cdn_registry_new(ref->registry, p->o ? &p->o->registry : NULL, &p->reg, err)) < 0)
        return r;
    p->repository = ref->repository;
    if ((r = registry_manifest(p->reg, ref, img, err)) < 0)
        return r;
    return registry_config(p, img, err);
}

int cdn_image_pull(struct cdn_store *s, const struct cdn_image_ref *ref, const struct cdn_pull_options *o,
                   char manifest_out[CDN_DIGEST_MAX], struct cdn_error *err)
{
    struct cdn_oci_image img = {0};
    struct pull p = {.s = s, .o = o, .img = &img};
    pthread_mutex_init(&p.lock, NULL);
    /* Held shared from the first blob to the ref: a prune cannot take what is about to be referenced. */
    _cleanup_close_ int gc = cdn_store_gc_lock(s, false, err);
    int r = gc < 0 ? gc : source_image(&p, ref, &img, err);
    if (r >= 0)
        r = cdn_store_blob_put(s, img.manifest_json, img.manifest_len, img.manifest_digest, err);
    if (r >= 0) {
        uint64_t total = 0;
        for (size_t i = 0; i < img.manifest.n_layers; i++)
            total += img.manifest.layers[i].size;
        emit(&p, (struct cdn_pull_event){
                     .phase = CDN_PULL_RESOLVED, .digest = img.manifest_digest, .total = total});
        r = pull_layers(&p, err);
    }
    if (r >= 0 && (r = record_image(&p, ref, err)) >= 0) {
        memcpy(manifest_out, img.manifest_digest, CDN_DIGEST_MAX);
        emit(&p, (struct cdn_pull_event){.phase = CDN_PULL_DONE, .digest = img.manifest_digest});
    }
    if (p.reg)
        cdn_registry_free(p.reg);
    if (p.layout)
        cdn_oci_layout_free(p.layout);
    if (p.archive_dir[0]) {
        char *slash = strrchr(p.archive_dir, '/');
        *slash = 0;
        _cleanup_close_ int tmp = open(p.archive_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (tmp >= 0)
            (void) cdn_layer_rm_rf_at(tmp, slash + 1);
    }
    cdn_oci_image_free(&img);
    pthread_mutex_destroy(&p.lock);
    return r;
}
