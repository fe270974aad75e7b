/* The registry client (registry.h): endpoints (mirrors, then the registry), the v2 ping, requests
 * that answer auth challenges, manifests and blobs. Runs on the host; see registry.h for what is
 * trusted. The wire: registry-http.c; credentials and tokens: registry-auth.c. */
#include <errno.h>
#include <inttypes.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "oci/registry-internal.h"
#include "shared/strv.h"

const char *const cdn_registry_manifest_types[] = {
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    NULL,
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    (void) curl_global_init(CURL_GLOBAL_DEFAULT);
}

static bool valid_host(const char *h)
{
    size_t n = strlen(h);
    return n > 0 && n < 256 &&
           strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") == n &&
           h[0] != '-' && h[0] != '.';
}

/* Names that go into a URL path: the distribution spec's repository and reference alphabets. */
static bool valid_path_part(const char *s, const char *alphabet, size_t max)
{
    size_t n = strlen(s);
    return n > 0 && n <= max && strspn(s, alphabet) == n && !strstr(s, "..") && s[0] != '/';
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *userptr)
{
    (void) h;
    (void) access;
    pthread_mutex_lock(&((struct cdn_registry *) userptr)->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *userptr)
{
    (void) h;
    pthread_mutex_unlock(&((struct cdn_registry *) userptr)->share_locks[data]);
}

static int add_endpoint(struct cdn_registry *r, const char *host, bool mirror, struct cdn_error *err)
{
    if (!valid_host(host))
        return cdn_error_field(err, EINVAL, mirror ? "mirrors" : "registry",
                               "%s: \"%.100s\" is not a host[:port]", mirror ? "mirrors" : "registry", host);
    if (r->n_eps >= ELEMENTSOF(r->eps))
        return cdn_error_field(err, E2BIG, "mirrors", "mirrors: at most %d", CDN_REGISTRY_MIRRORS_MAX);
    struct reg_endpoint *ep = &r->eps[r->n_eps++];
    (void) snprintf(ep->host, sizeof ep->host, "%s", host);
    ep->mirror = mirror;
    ep->plain = reg_insecure(r, host);
    /* Docker Hub's API lives elsewhere than its name (and its auth file key stays docker.io) */
    const char *api = strcmp(host, "docker.io") == 0 ? "registry-1.docker.io" : host;
    (void) snprintf(ep->base, sizeof ep->base, "%s://%s", ep->plain ? "http" : "https", api);
    return 0;
}

static int load_cas(struct cdn_registry *r, const char *const *files, struct cdn_error *err)
{
    size_t n = 0, cap = 0;
    for (const char *const *f = files; f && *f; f++) {
        FILE *fp = fopen(*f, "re");
        if (!fp)
            return cdn_error_field(err, errno, "ca_files", "ca_files: %s: %m", *f);
        size_t before = n;
        X509 *x;
        while ((x = PEM_read_X509(fp, NULL, NULL, NULL))) {
            if (n + 2 > cap) {
                cap = cap ? cap * 2 : 8;
                void **c = realloc(r->cas, cap * sizeof(*c));
                if (!c) {
                    X509_free(x);
                    (void) fclose(fp);
                    return -ENOMEM;
                }
                r->cas = c;
            }
            r->cas[n++] = x;
            r->cas[n] = NULL;
        }
        (void) fclose(fp);
        if (n == before)
            return cdn_error_field(err, EINVAL, "ca_files", "ca_files: %s: no PEM certificate in it", *f);
    }
    return 0;
}

int cdn_registry_new(const char *host, const struct cdn_registry_options *opts, struct cdn_registry **ret,
                     struct cdn_error *err)
{
    static const struct cdn_registry_options none = {0};
    if (!opts)
        opts = &none;
    (void) pthread_once(&curl_once, curl_init_once);
    struct cdn_registry *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->token_lock, NULL);
    for (size_t i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&r->share_locks[i], NULL);
    r->connect_timeout_s = opts->connect_timeout_s > 0 ? opts->connect_timeout_s : 30;
    r->stall_timeout_s = opts->stall_timeout_s > 0 ? opts->stall_timeout_s : 60;
    r->blob_attempts = opts->blob_attempts > 0 ? opts->blob_attempts : 5;
    (void) snprintf(r->host, sizeof r->host, "%s", host ? host : "");
    int rr = 0;
    for (const char *const *i = opts->insecure; i && *i && rr == 0; i++)
        rr = cdn_strv_push(&r->insecure, *i);
    for (const char *const *m = opts->mirrors; m && *m && rr == 0; m++)
        rr = add_endpoint(r, *m, true, err);
    if (rr == 0)
        rr = add_endpoint(r, r->host, false, err);
    if (rr == 0)
        rr = load_cas(r, opts->ca_files, err);
    if (rr == 0)
        rr = reg_auth_load(r, opts->auth_file, err);
    if (rr == 0 && !(r->share = curl_share_init()))
        rr = -ENOMEM;
    if (rr < 0) {
        cdn_registry_free(r);
        return rr;
    }
    (void) curl_share_setopt(r->share, CURLSHOPT_LOCKFUNC, share_lock);
    (void) curl_share_setopt(r->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
    (void) curl_share_setopt(r->share, CURLSHOPT_USERDATA, r);
    /* not the connection cache: libcurl does not support sharing it between threads */
    (void) curl_share_setopt(r->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    (void) curl_share_setopt(r->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    *ret = r;
    return 0;
}

void cdn_registry_free(struct cdn_registry *r)
{
    if (!r)
        return;
    if (r->share)
        (void) curl_share_cleanup(r->share);
    for (size_t i = 0; i < r->n_eps; i++) {
        reg_tokens_clear(&r->eps[i]);
        explicit_bzero(r->eps[i].pass, sizeof r->eps[i].pass);
    }
    for (void **c = r->cas; c && *c; c++)
        X509_free(*c);
    free(r->cas);
    cdn_strv_free(&r->insecure);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->token_lock);
    for (size_t i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&r->share_locks[i]);
    free(r);
}

void cdn_registry_manifest_done(struct cdn_registry_manifest *m)
{
    free(m->data);
    m->data = NULL;
    m->size = 0;
}

static const char *ep_name(const struct reg_endpoint *ep, char *buf, size_t size)
{
    if (ep->mirror)
        (void) snprintf(buf, size, "mirror %s", ep->host);
    else
        (void) snprintf(buf, size, "registry %s", ep->host);
    return buf;
}

static int http_error(const struct reg_endpoint *ep, const char *repo, const char *what,
                      const struct reg_req *q, struct cdn_error *err)
{
    char detail[200], name[280];
    reg_error_detail(q, detail, sizeof detail);
    int e = q->status == 404 ? ENOENT : q->status == 401 || q->status == 403 ? EACCES : EPROTO;
    return cdn_error_set(err, e, "%s, repository %s: %s: HTTP %ld%s%s", ep_name(ep, name, sizeof name), repo,
                         what, q->status, detail,
                         q->status == 401 && ep->cred_helper
                             ? " (its credentials are in a credential helper, "
                               "which cordon does not use)"
                         : q->status == 401 && !ep->have_creds ? " (no credentials for it in the auth file)"
                                                               : "");
}

/* GET /v2/ once per endpoint: is it a v2 registry, and which auth does it want. */
static int ping(struct cdn_registry *r, struct reg_endpoint *ep, CURL *h, struct cdn_error *err)
{
    pthread_mutex_lock(&r->lock);
    bool done = ep->pinged;
    pthread_mutex_unlock(&r->lock);
    if (done)
        return 0;
    char url[400], name[280];
    (void) snprintf(url, sizeof url, "%s/v2/", ep->base);
    struct reg_req q = {
        .url = url, .fd = -1, .max = 64 << 10, .bounded_time = true, .redirect_to_http = ep->plain};
    int rr = reg_perform(r, h, &q, err);
    free(q.buf);
    if (rr < 0)
        return cdn_error_prefix(err, rr, "%s%s", ep_name(ep, name, sizeof name),
                                rr == -EPROTO && !ep->plain
                                    ? " (HTTPS; plain HTTP is spoken only to registries listed as insecure)"
                                    : "");
    if (q.status != 200 && q.status != 401)
        return cdn_error_set(err, EPROTO, "%s: %s: HTTP %ld, not a v2 registry",
                             ep_name(ep, name, sizeof name), url, q.status);
    struct reg_challenge c;
    bool have = q.status == 401 && reg_challenge_parse(q.challenge, &c) == 0;
    pthread_mutex_lock(&r->lock);
    ep->pinged = true;
    if (have && strcasecmp(c.scheme, "Bearer") == 0 && c.realm[0]) {
        ep->auth = REG_AUTH_BEARER;
        memcpy(ep->realm, c.realm, sizeof ep->realm);
        memcpy(ep->service, c.service, sizeof ep->service);
    } else if (have && strcasecmp(c.scheme, "Basic") == 0)
        ep->auth = REG_AUTH_BASIC;
    pthread_mutex_unlock(&r->lock);
    return 0;
}

/* Learn from a 401: returns true when the request is worth another try. */
static bool answer_challenge(struct cdn_registry *r, struct reg_endpoint *ep, const struct reg_req *q,
                             char *scope, size_t scope_size, int *tries)
{
    struct reg_challenge c;
    if (reg_challenge_parse(q->challenge, &c) < 0 || ++*tries > 2)
        return false;
    pthread_mutex_lock(&r->lock);
    bool again = false;
    if (strcasecmp(c.scheme, "Bearer") == 0 && c.realm[0]) {
        /* a first 401, an expired token, or insufficient_scope naming the scope it wants */
        again = ep->auth != REG_AUTH_BEARER || *tries == 1 || strcmp(c.error, "insufficient_scope") == 0;
        ep->auth = REG_AUTH_BEARER;
        memcpy(ep->realm, c.realm, sizeof ep->realm);
        memcpy(ep->service, c.service, sizeof ep->service);
        if (c.scope[0] && strcmp(c.error, "insufficient_scope") == 0)
            (void) snprintf(scope, scope_size, "%s", c.scope);
    } else if (strcasecmp(c.scheme, "Basic") == 0 && ep->have_creds) {
        again = ep->auth != REG_AUTH_BASIC;
        ep->auth = REG_AUTH_BASIC;
    }
    pthread_mutex_unlock(&r->lock);
    return again;
}

/* q on endpoint ep with the auth it asks for: 0 with q->status set, or a transport error. */
static int authed(struct cdn_registry *r, struct reg_endpoint *ep, CURL *h, const char *repo,
                  struct reg_req *q, struct cdn_error *err)
{
    char scope[600];
    (void) snprintf(scope, sizeof scope, "repository:%s:pull", repo);
    int tries = 0;
    bool fresh = false;
    for (;;) {
        _cleanup_free_ char *token = NULL;
        pthread_mutex_lock(&r->lock);
        enum reg_auth auth = ep->auth;
        pthread_mutex_unlock(&r->lock);
        if (auth == REG_AUTH_BEARER) {
            int rr = reg_token_get(r, ep, h, scope, fresh, &token, err);
            if (rr < 0)
                return rr;
        }
        q->auth = auth;
        q->token = token;
        q->user = ep->have_creds ? ep->user : NULL;
        q->pass = ep->pass;
        q->redirect_to_http = ep->plain;
        int rr = reg_perform(r, h, q, err);
        if (rr < 0 || q->status != 401 || !answer_challenge(r, ep, q, scope, sizeof scope, &tries))
            return rr;
        fresh = true;
    }
}

static void join_accept(const char *const *accept, char *buf, size_t size)
{
    size_t off = 0;
    buf[0] = '\0';
    for (const char *const *a = accept; *a && off < size; a++)
        off += (size_t) snprintf(buf + off, size - off, "%s%s", off ? ", " : "", *a);
}

static int check_manifest(const struct reg_endpoint *ep, const char *repo, const char *ref,
                          const struct reg_req *q, char digest[CDN_DIGEST_MAX], struct cdn_error *err)
{
    bool by_digest = strchr(ref, ':') != NULL;
    _cleanup_hasher_ struct cdn_hasher *hs = NULL;
    if (cdn_hasher_new(by_digest ? ref : "sha256", &hs) < 0)
        return -ENOMEM;
    cdn_hasher_update(hs, q->buf, q->len);
    cdn_hasher_digest(hs, digest);
    char name[280];
    if (by_digest && strcmp(digest, ref) != 0)
        return cdn_error_set(err, EBADMSG,
                             "%s, repository %s: manifest digest mismatch: asked for %s, got %s",
                             ep_name(ep, name, sizeof name), repo, ref, digest);
    if (!by_digest && strncmp(q->docker_digest, "sha256:", 7) == 0 && strcmp(q->docker_digest, digest) != 0)
        return cdn_error_set(err, EBADMSG,
                             "%s, repository %s: manifest %s is %s, but Docker-Content-Digest says %s",
                             ep_name(ep, name, sizeof name), repo, ref, digest, q->docker_digest);
    return 0;
}

int cdn_registry_get_manifest(struct cdn_registry *r, const char *repository, const char *reference,
                              const char *const *accept, struct cdn_registry_manifest *ret,
                              struct cdn_error *err)
{
    if (!valid_path_part(repository, "abcdefghijklmnopqrstuvwxyz0123456789._-/", 255))
        return cdn_error_field(err, EINVAL, "repository", "repository \"%.100s\": not a repository name",
                               repository);
    if (strchr(reference, ':') ? cdn_digest_check(reference, "reference", err) < 0
                               : !valid_path_part(reference,
                                                  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                  "0123456789._-",
                                                  128))
        return cdn_error_field(err, EINVAL, "reference", "reference \"%.100s\": neither a tag nor a digest",
                               reference);
    char acc[1024];
    join_accept(accept ? accept : cdn_registry_manifest_types, acc, sizeof acc);
    CURL *h = reg_easy_new(r);
    if (!h)
        return -ENOMEM;
    int rr = -EIO;
    for (size_t i = 0; i < r->n_eps; i++) {
        struct reg_endpoint *ep = &r->eps[i];
        char url[1024], what[200];
        (void) snprintf(url, sizeof url, "%s/v2/%s/manifests/%s", ep->base, repository, reference);
        (void) snprintf(what, sizeof what, "manifest %s", reference);
        struct reg_req q = {
            .url = url, .accept = acc, .fd = -1, .max = CDN_REGISTRY_MANIFEST_MAX, .bounded_time = true};
        rr = ping(r, ep, h, err);
        if (rr >= 0)
            rr = authed(r, ep, h, repository, &q, err);
        if (rr >= 0 && q.status != 200)
            rr = http_error(ep, repository, what, &q, err);
        char digest[CDN_DIGEST_MAX];
        if (rr >= 0)
            rr = check_manifest(ep, repository, reference, &q, digest, err);
        if (rr >= 0) {
            memcpy(ret->digest, digest, sizeof digest);
            (void) snprintf(ret->media_type, sizeof ret->media_type, "%s", q.content_type);
            ret->size = q.len;
            ret->data = q.buf ? q.buf : calloc(1, 1);
            curl_easy_cleanup(h);
            return ret->data ? 0 : -ENOMEM;
        }
        free(q.buf);
    }
    curl_easy_cleanup(h);
    return rr;
}

static void backoff(unsigned attempt)
{
    unsigned ms = 200u << (attempt < 5 ? attempt : 5);
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long) (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* One endpoint's attempts at a blob: resumed from what out_fd holds after a drop. 0 when out_fd
 * holds size bytes (not yet verified). */
static int blob_from(struct cdn_registry *r, struct reg_endpoint *ep, CURL *h, const char *repo,
                     const char *digest, uint64_t size, int fd, cdn_registry_progress_fn progress,
                     void *userdata, struct cdn_error *err)
{
    char url[1024], what[200], range[32];
    (void) snprintf(url, sizeof url, "%s/v2/%s/blobs/%s", ep->base, repo, digest);
    (void) snprintf(what, sizeof what, "blob %s", digest);
    uint64_t have = 0;
    int rr = ping(r, ep, h, err);
    for (unsigned attempt = 0; rr >= 0 && attempt < r->blob_attempts; attempt++) {
        if (attempt > 0)
            backoff(attempt - 1);
        (void) snprintf(range, sizeof range, "%" PRIu64 "-", have);
        struct reg_req q = {.url = url,
                            .range = have > 0 ? range : NULL,
                            .fd = fd,
                            .resume_from = have,
                            .fd_off = have,
                            .fd_limit = size,
                            .progress = progress,
                            .userdata = userdata};
        rr = authed(r, ep, h, repo, &q, err);
        if (q.started || q.status == 200 || q.status == 206)
            have = q.fd_off;
        if (rr >= 0 && (q.status == 200 || q.status == 206))
            return have == size ? 0
                                : cdn_error_set(err, EPROTO,
                                                "%s: the answer ended after %" PRIu64 " of %" PRIu64 " bytes",
                                                url, have, size);
        if (rr >= 0 && q.status == 416) {
            if (have == size)
                return 0;
            have = 0; /* the range made no sense to it: start over */
            continue;
        }
        if (rr >= 0 && !reg_transient(&q))
            return http_error(ep, repo, what, &q, err);
        if (rr < 0 && !reg_transient(&q))
            return rr;
        if (rr >= 0)
            rr = http_error(ep, repo, what, &q, err); /* a 5xx: kept as the error if no attempt is left */
        rr = 0;
    }
    char name[280];
    return rr < 0 ? rr
                  : cdn_error_prefix(err, EIO, "%s, repository %s: blob %s: %u attempts failed",
                                     ep_name(ep, name, sizeof name), repo, digest, r->blob_attempts);
}

int cdn_registry_get_blob(struct cdn_registry *r, const char *repository, const char *digest, uint64_t size,
                          int out_fd, cdn_registry_progress_fn progress, void *userdata,
                          struct cdn_error *err)
{
    if (!valid_path_part(repository, "abcdefghijklmnopqrstuvwxyz0123456789._-/", 255))
        return cdn_error_field(err, EINVAL, "repository", "repository \"%.100s\": not a repository name",
                               repository);
    int rr = cdn_digest_check(digest, "digest", err);
    if (rr < 0)
        return rr;
    if (ftruncate(out_fd, 0) < 0)
        return cdn_error_set(err, errno, "blob %s: the file to write it to: %m", digest);
    CURL *h = reg_easy_new(r);
    if (!h)
        return -ENOMEM;
    for (size_t i = 0; i < r->n_eps; i++) {
        struct reg_endpoint *ep = &r->eps[i];
        rr = blob_from(r, ep, h, repository, digest, size, out_fd, progress, userdata, err);
        if (rr >= 0) {
            rr = cdn_digest_verify_fd(out_fd, digest, size, err);
            if (rr >= 0)
                break;
            char name[280];
            (void) cdn_error_prefix(err, rr, "%s, repository %s", ep_name(ep, name, sizeof name), repository);
        }
        /* nothing of a failed attempt stays for the next endpoint, or the caller */
        if (ftruncate(out_fd, 0) < 0) {
            rr = cdn_error_set(err, errno, "blob %s: emptying the file after a failed download: %m", digest);
            break;
        }
    }
    curl_easy_cleanup(h);
    if (rr >= 0 && lseek(out_fd, 0, SEEK_SET) < 0)
        rr = cdn_error_set(err, errno, "blob %s: %m", digest);
    return rr;
}
