/* Credentials and authentication of the registry client (registry-internal.h): the docker-style
 * auth file, WWW-Authenticate challenges (RFC 7235 syntax) and the bearer-token flow of
 * distribution's token.md. Runs on the host. Trusted: the auth file (the operator's). Hostile: the
 * challenge (it names the realm to which credentials go) and the token server's answer. Credentials
 * go to a realm over HTTPS, or over HTTP only when the realm's host:port is listed insecure. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "oci/registry-internal.h"
#include "shared/base64.h"

#define AUTH_FILE_MAX    (1u << 20)
#define TOKEN_ANSWER_MAX (1u << 20)
#define TOKEN_MAX        (64u << 10)

/* containers/image's normalizeAuthFileKey: keys may be URLs ("https://index.docker.io/v1/"). */
static void normalize_key(const char *key, char *out, size_t size)
{
    if (strncmp(key, "https://", 8) == 0)
        key += 8;
    else if (strncmp(key, "http://", 7) == 0)
        key += 7;
    size_t n = strcspn(key, "/");
    (void) snprintf(out, size, "%.*s", (int) n, key);
    if (strcmp(out, "index.docker.io") == 0 || strcmp(out, "registry-1.docker.io") == 0)
        (void) snprintf(out, size, "docker.io");
}

static int auth_file_path(const char *given, char *buf, size_t size)
{
    const char *e;
    if (given)
        return snprintf(buf, size, "%s", given) < (int) size ? 0 : -ENAMETOOLONG;
    if ((e = getenv("REGISTRY_AUTH_FILE")) && *e)
        return snprintf(buf, size, "%s", e) < (int) size ? 0 : -ENAMETOOLONG;
    if ((e = getenv("DOCKER_CONFIG")) && *e)
        return snprintf(buf, size, "%s/config.json", e) < (int) size ? 0 : -ENAMETOOLONG;
    if ((e = getenv("HOME")) && *e)
        return snprintf(buf, size, "%s/.docker/config.json", e) < (int) size ? 0 : -ENAMETOOLONG;
    return -ENOENT;
}

static int endpoint_creds(struct reg_endpoint *ep, json_t *root, const char *path, struct cdn_error *err)
{
    const char *key;
    json_t *v;
    char norm[256], want[256];
    normalize_key(ep->host, want, sizeof want);
    json_object_foreach(json_object_get(root, "auths"), key, v)
    {
        normalize_key(key, norm, sizeof norm);
        if (strcmp(norm, want) != 0)
            continue;
        const char *b64 = json_string_value(json_object_get(v, "auth"));
        if (!b64 || !*b64)
            continue; /* e.g. only an identitytoken, which cordon does not use */
        size_t n = strlen(b64);
        uint8_t dec[768];
        if (n > 1024)
            return cdn_error_field(err, EINVAL, "auth_file", "%s: auths.%s.auth is too long", path, key);
        long m = cdn_base64_decode(b64, n, dec);
        const char *colon = m > 0 ? memchr(dec, ':', (size_t) m) : NULL;
        if (!colon || memchr(dec, '\0', (size_t) m))
            return cdn_error_field(err, EINVAL, "auth_file",
                                   "%s: auths.%s.auth is not base64 of user:password", path, key);
        size_t ul = (size_t) (colon - (const char *) dec), pl = (size_t) m - ul - 1;
        if (ul >= sizeof ep->user || pl >= sizeof ep->pass)
            return cdn_error_field(err, EINVAL, "auth_file", "%s: auths.%s: user or password too long", path,
                                   key);
        memcpy(ep->user, dec, ul);
        ep->user[ul] = '\0';
        memcpy(ep->pass, colon + 1, pl);
        ep->pass[pl] = '\0';
        ep->have_creds = true;
        return 0;
    }
    if (json_object_get(json_object_get(root, "credHelpers"), want) ||
        json_string_value(json_object_get(root, "credsStore")))
        ep->cred_helper = true;
    return 0;
}

int reg_auth_load(struct cdn_registry *r, const char *auth_file, struct cdn_error *err)
{
    char path[4096];
    if (auth_file_path(auth_file, path, sizeof path) < 0)
        return auth_file ? cdn_error_field(err, ENAMETOOLONG, "auth_file", "auth_file: path too long") : 0;
    struct stat st;
    if (stat(path, &st) < 0) {
        if (errno == ENOENT && !auth_file)
            return 0; /* no file: anonymous */
        return cdn_error_field(err, errno, "auth_file", "%s: %m", path);
    }
    if (!S_ISREG(st.st_mode) || st.st_size > AUTH_FILE_MAX)
        return cdn_error_field(err, EINVAL, "auth_file", "%s: not a regular file of at most 1 MiB", path);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return cdn_error_field(err, EINVAL, "auth_file", "%s: line %d: %s", path, je.line,
                               root ? "not a JSON object" : je.text);
    }
    int ret = 0;
    for (size_t i = 0; i < r->n_eps && ret == 0; i++)
        ret = endpoint_creds(&r->eps[i], root, path, err);
    json_decref(root);
    return ret;
}

static const char *parse_value(const char *p, char *out, size_t size, bool *overflow)
{
    size_t n = 0;
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++) {
            if (*p == '\\' && p[1])
                p++;
            if (n + 1 < size)
                out[n++] = *p;
            else
                *overflow = true;
        }
        if (*p == '"')
            p++;
    } else {
        for (; *p && *p != ',' && *p != ' ' && *p != '\t'; p++) {
            if (n + 1 < size)
                out[n++] = *p;
            else
                *overflow = true;
        }
    }
    out[n] = '\0';
    return p;
}

int reg_challenge_parse(const char *s, struct reg_challenge *c)
{
    memset(c, 0, sizeof *c);
    s += strspn(s, " \t");
    size_t n = strcspn(s, " \t");
    if (n == 0 || n >= sizeof c->scheme)
        return -EINVAL;
    memcpy(c->scheme, s, n);
    bool overflow = false;
    for (const char *p = s + n; *p;) {
        p += strspn(p, " \t,");
        size_t k = strcspn(p, "= \t,");
        if (k == 0)
            break;
        const char *name = p;
        p += k;
        p += strspn(p, " \t");
        if (*p != '=')
            continue;
        p++;
        p += strspn(p, " \t");
        char tmp[1024];
        p = parse_value(p, tmp, sizeof tmp, &overflow);
        struct {
            const char *name;
            char *dst;
            size_t size;
        } fields[] = {{"realm", c->realm, sizeof c->realm},
                      {"service", c->service, sizeof c->service},
                      {"scope", c->scope, sizeof c->scope},
                      {"error", c->error, sizeof c->error}};
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
            if (strlen(fields[i].name) == k && strncasecmp(name, fields[i].name, k) == 0) {
                if (strlen(tmp) >= fields[i].size)
                    overflow = true;
                (void) snprintf(fields[i].dst, fields[i].size, "%s", tmp);
            }
    }
    return overflow ? -E2BIG : 0;
}

bool reg_insecure(const struct cdn_registry *r, const char *hostport)
{
    for (char **i = r->insecure.v; i && *i; i++)
        if (strcasecmp(*i, hostport) == 0)
            return true;
    return false;
}

void reg_tokens_clear(struct reg_endpoint *ep)
{
    for (size_t i = 0; i < REG_TOKENS_MAX; i++) {
        free(ep->tokens[i].token);
        ep->tokens[i].token = NULL;
    }
}

/* May credentials go to this realm? HTTPS, or plain HTTP to a host:port listed insecure. */
static int realm_check(struct cdn_registry *r, const char *realm, bool *creds_ok)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL;
    int ret = -EINVAL;
    if (u && curl_url_set(u, CURLUPART_URL, realm, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        (void) curl_url_get(u, CURLUPART_PORT, &port, 0);
        char hp[300];
        (void) snprintf(hp, sizeof hp, "%s%s%s", host, port ? ":" : "", port ? port : "");
        if (strcmp(scheme, "https") == 0) {
            *creds_ok = true;
            ret = 0;
        } else if (strcmp(scheme, "http") == 0) {
            *creds_ok = reg_insecure(r, hp);
            ret = 0;
        }
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return ret;
}

static int token_url(CURL *h, const char *realm, const char *service, const char *scope, char *buf,
                     size_t size)
{
    char *s = curl_easy_escape(h, service, 0), *sc = curl_easy_escape(h, scope, 0);
    int n = -1;
    if (s && sc)
        n = snprintf(buf, size, "%s%s%s%s%sscope=%s", realm, strchr(realm, '?') ? "&" : "?",
                     service[0] ? "service=" : "", service[0] ? s : "", service[0] ? "&" : "", sc);
    curl_free(s);
    curl_free(sc);
    return n >= 0 && (size_t) n < size ? 0 : -ENAMETOOLONG;
}

static int token_parse(const struct reg_req *q, char **ret, long *expires_in)
{
    json_t *j = json_loadb((const char *) q->buf, q->len, 0, NULL);
    const char *t = json_string_value(json_object_get(j, "token"));
    if (!t || !*t)
        t = json_string_value(json_object_get(j, "access_token"));
    json_t *e = json_object_get(j, "expires_in");
    *expires_in = json_is_integer(e) && json_integer_value(e) > 60 ? (long) json_integer_value(e) : 60;
    int r = -EBADMSG;
    /* a token goes into an HTTP header: printable ASCII only */
    if (t && *t && strlen(t) < TOKEN_MAX &&
        strspn(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                  "0123456789-._~+/=") == strlen(t)) {
        *ret = strdup(t);
        r = *ret ? 0 : -ENOMEM;
    }
    json_decref(j);
    return r;
}

static int token_fetch(struct cdn_registry *r, struct reg_endpoint *ep, CURL *h, const char *realm,
                       const char *service, const char *scope, char **ret, long *expires_in,
                       struct cdn_error *err)
{
    bool creds_ok = false;
    if (strncmp(realm, "http", 4) != 0 || realm_check(r, realm, &creds_ok) < 0)
        return cdn_error_set(err, EPROTO, "registry %s: the token realm \"%.200s\" is not an http(s) URL",
                             ep->host, realm);
    char url[4096];
    if (token_url(h, realm, service, scope, url, sizeof url) < 0)
        return cdn_error_set(err, ENAMETOOLONG, "registry %s: token URL too long", ep->host);
    struct reg_req q = {.url = url, .fd = -1, .max = TOKEN_ANSWER_MAX, .bounded_time = true};
    q.redirect_to_http = creds_ok && strncmp(realm, "http:", 5) == 0;
    if (ep->have_creds && creds_ok) {
        q.auth = REG_AUTH_BASIC;
        q.user = ep->user;
        q.pass = ep->pass;
    }
    int rr = reg_perform(r, h, &q, err);
    if (rr >= 0 && q.status != 200) {
        char detail[200];
        reg_error_detail(&q, detail, sizeof detail);
        rr = cdn_error_set(
            err, q.status == 401 || q.status == 403 ? EACCES : EPROTO,
            "registry %s: token server %.200s: HTTP %ld%s%s", ep->host, realm, q.status, detail,
            ep->have_creds && !creds_ok ? " (credentials go to an http realm only if it is insecure)" : "");
    } else if (rr >= 0 && token_parse(&q, ret, expires_in) < 0)
        rr = cdn_error_set(err, EBADMSG, "registry %s: token server %.200s: no usable token in its answer",
                           ep->host, realm);
    free(q.buf);
    return rr;
}

static int token_get(struct cdn_registry *r, struct reg_endpoint *ep, CURL *h, const char *scope, bool fresh,
                     char **ret, struct cdn_error *err)
{
    char realm[sizeof ep->realm], service[sizeof ep->service];
    time_t now = time(NULL);
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < REG_TOKENS_MAX; i++) {
        struct reg_token *t = &ep->tokens[i];
        if (!t->token || strcmp(t->scope, scope) != 0)
            continue;
        if (!fresh && t->expires > now + 5) {
            *ret = strdup(t->token);
            pthread_mutex_unlock(&r->lock);
            return *ret ? 0 : -ENOMEM;
        }
        free(t->token);
        t->token = NULL;
    }
    memcpy(realm, ep->realm, sizeof realm);
    memcpy(service, ep->service, sizeof service);
    pthread_mutex_unlock(&r->lock);

    char *tok = NULL;
    long expires_in = 60;
    int rr = token_fetch(r, ep, h, realm, service, scope, &tok, &expires_in, err);
    if (rr < 0)
        return rr;
    char *copy = strdup(tok);
    if (!copy) {
        free(tok);
        return -ENOMEM;
    }
    pthread_mutex_lock(&r->lock);
    struct reg_token *t = &ep->tokens[ep->next_token++ % REG_TOKENS_MAX];
    free(t->token);
    t->token = copy;
    t->expires = now + expires_in;
    (void) snprintf(t->scope, sizeof t->scope, "%s", scope);
    pthread_mutex_unlock(&r->lock);
    *ret = tok;
    return 0;
}

int reg_token_get(struct cdn_registry *r, struct reg_endpoint *ep, CURL *h, const char *scope, bool fresh,
                  char **ret, struct cdn_error *err)
{
    pthread_mutex_lock(&r->token_lock);
    int rr = token_get(r, ep, h, scope, fresh, ret, err);
    pthread_mutex_unlock(&r->token_lock);
    return rr;
}
