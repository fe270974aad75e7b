/* One HTTP transfer of the registry client (registry-internal.h) over a libcurl easy handle.
 * Runs on the host; the answer is hostile: headers are copied into bounded buffers, bodies are
 * bounded (memory) or written only up to the blob's size (fd), error bodies are kept to 2 KiB, and a
 * transfer that stalls or cannot connect fails on its own timeout. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "oci/registry-internal.h"

static void copy_value(char *dst, size_t size, const char *v, size_t n)
{
    while (n > 0 && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (n >= size)
        n = size - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

static bool header_is(const char *line, size_t n, const char *name, const char **value, size_t *vn)
{
    size_t l = strlen(name);
    if (n <= l || strncasecmp(line, name, l) != 0 || line[l] != ':')
        return false;
    const char *v = line + l + 1;
    while (v < line + n && (*v == ' ' || *v == '\t'))
        v++;
    *value = v;
    *vn = (size_t) (line + n - v);
    return true;
}

/* Headers of every answer arrive here, those of followed redirects too: a status line starts a new set. */
static size_t on_header(char *line, size_t sz, size_t nitems, void *userdata)
{
    struct reg_req *q = userdata;
    size_t n = sz * nitems;
    const char *v;
    size_t vn;
    if (n > 5 && strncmp(line, "HTTP/", 5) == 0) {
        q->content_type[0] = q->docker_digest[0] = q->content_range[0] = q->challenge[0] = '\0';
        const char *sp = memchr(line, ' ', n);
        q->hdr_status = sp ? strtol(sp + 1, NULL, 10) : 0;
    } else if (header_is(line, n, "Content-Type", &v, &vn)) {
        const char *semi = memchr(v, ';', vn);
        copy_value(q->content_type, sizeof q->content_type, v, semi ? (size_t) (semi - v) : vn);
    } else if (header_is(line, n, "Docker-Content-Digest", &v, &vn)) {
        copy_value(q->docker_digest, sizeof q->docker_digest, v, vn);
    } else if (header_is(line, n, "Content-Range", &v, &vn)) {
        copy_value(q->content_range, sizeof q->content_range, v, vn);
    } else if (header_is(line, n, "WWW-Authenticate", &v, &vn)) {
        /* several challenges: Bearer wins over Basic */
        if (!q->challenge[0] ||
            (strncasecmp(q->challenge, "Bearer", 6) != 0 && strncasecmp(v, "Bearer", 6) == 0))
            copy_value(q->challenge, sizeof q->challenge, v, vn);
    } else if (header_is(line, n, "Content-Length", &v, &vn) && q->fd < 0 && q->hdr_status / 100 == 2) {
        if (strtoull(v, NULL, 10) > q->max) {
            q->too_big = true; /* refused before a byte of the body */
            return 0;
        }
    }
    return n;
}

/* The first body byte of a blob's answer: where it goes. 200 starts over; 206 must continue exactly
 * where the file ends (Content-Range "bytes START-END/SIZE"). */
static bool start_blob_body(struct reg_req *q)
{
    if (q->status == 200) {
        q->fd_off = 0;
        if (ftruncate(q->fd, 0) < 0) {
            q->fd_errno = errno;
            return false;
        }
        return true;
    }
    uint64_t a, b, total;
    if (sscanf(q->content_range, "bytes %" SCNu64 "-%" SCNu64 "/%" SCNu64, &a, &b, &total) != 3 ||
        a != q->resume_from || total != q->fd_limit || b < a) {
        q->bad_range = true;
        return false;
    }
    q->fd_off = a;
    return true;
}

static size_t on_body(char *data, size_t sz, size_t nitems, void *userdata)
{
    struct reg_req *q = userdata;
    size_t n = sz * nitems;
    if (q->status / 100 != 2) {
        size_t room = sizeof q->errbody - 1 - q->errlen;
        size_t take = n < room ? n : room;
        memcpy(q->errbody + q->errlen, data, take);
        q->errlen += take;
        q->errbody[q->errlen] = '\0';
        return n;
    }
    if (q->fd < 0) {
        if (n > q->max - q->len) {
            q->too_big = true;
            return 0;
        }
        if (q->len + n + 1 > q->cap) {
            size_t cap = q->cap ? q->cap : 16384;
            while (cap < q->len + n + 1)
                cap *= 2;
            uint8_t *b = realloc(q->buf, cap);
            if (!b) {
                q->fd_errno = ENOMEM;
                return 0;
            }
            q->buf = b;
            q->cap = cap;
        }
        memcpy(q->buf + q->len, data, n);
        q->len += n;
        q->buf[q->len] = '\0';
        return n;
    }
    if (!q->started) {
        q->started = true;
        if (!start_blob_body(q))
            return 0;
    }
    if (n > q->fd_limit - q->fd_off) {
        q->too_big = true; /* more than the descriptor's size: never past it */
        return 0;
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(q->fd, data + done, n - done, (off_t) (q->fd_off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            q->fd_errno = w < 0 ? errno : EIO;
            return 0;
        }
        done += (size_t) w;
    }
    q->fd_off += n;
    if (q->progress)
        q->progress(q->userdata, q->fd_off, q->fd_limit);
    return n;
}

/* The status is known before the first body byte: libcurl has parsed the status line. */
static size_t on_body_entry(char *data, size_t sz, size_t nitems, void *userdata)
{
    struct reg_req *q = userdata;
    q->status = q->hdr_status;
    return on_body(data, sz, nitems, userdata);
}

/* The operator's CA files, added to the store libcurl filled with the system's CAs. */
static CURLcode add_cas(CURL *h, void *sslctx, void *userdata)
{
    (void) h;
    struct cdn_registry *r = userdata;
    X509_STORE *store = SSL_CTX_get_cert_store(sslctx);
    for (void **c = r->cas; c && *c; c++)
        (void) X509_STORE_add_cert(store, *c); /* a duplicate of a system CA is not an error */
    return CURLE_OK;
}

CURL *reg_easy_new(struct cdn_registry *r)
{
    CURL *h = curl_easy_init();
    if (!h)
        return NULL;
    (void) curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    (void) curl_easy_setopt(h, CURLOPT_SHARE, r->share);
    (void) curl_easy_setopt(h, CURLOPT_USERAGENT, "cordon/" CORDON_VERSION);
    (void) curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    (void) curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, r->connect_timeout_s);
    (void) curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    (void) curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, r->stall_timeout_s);
    (void) curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
    (void) curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    (void) curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (r->cas && r->cas[0]) {
        (void) curl_easy_setopt(h, CURLOPT_SSL_CTX_FUNCTION, add_cas);
        (void) curl_easy_setopt(h, CURLOPT_SSL_CTX_DATA, r);
    }
    return h;
}

void reg_req_reset(struct reg_req *q)
{
    q->status = q->hdr_status = 0;
    q->started = q->too_big = q->bad_range = false;
    q->fd_errno = 0;
    q->code = CURLE_OK;
    q->len = 0;
    q->content_type[0] = q->docker_digest[0] = q->content_range[0] = q->challenge[0] = '\0';
    q->errbody[0] = '\0';
    q->errlen = 0;
    q->curl_error[0] = '\0';
}

static int errno_of(CURLcode c)
{
    switch (c) {
    case CURLE_COULDNT_CONNECT:
        return ECONNREFUSED;
    case CURLE_OPERATION_TIMEDOUT:
        return ETIMEDOUT;
    case CURLE_COULDNT_RESOLVE_HOST:
        return EHOSTUNREACH;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
        return EPROTO;
    case CURLE_TOO_MANY_REDIRECTS:
        return ELOOP;
    default:
        return EIO;
    }
}

static void set_auth(CURL *h, const struct reg_req *q)
{
    (void) curl_easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_NONE);
    (void) curl_easy_setopt(h, CURLOPT_USERNAME, NULL);
    (void) curl_easy_setopt(h, CURLOPT_PASSWORD, NULL);
    (void) curl_easy_setopt(h, CURLOPT_XOAUTH2_BEARER, NULL);
    /* libcurl's own auth options (never a custom Authorization header): libcurl drops them when a
     * redirect leaves the host (CURLOPT_UNRESTRICTED_AUTH stays 0). */
    if (q->auth == REG_AUTH_BASIC && q->user) {
        (void) curl_easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
        (void) curl_easy_setopt(h, CURLOPT_USERNAME, q->user);
        (void) curl_easy_setopt(h, CURLOPT_PASSWORD, q->pass);
    } else if (q->auth == REG_AUTH_BEARER && q->token) {
        (void) curl_easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
        (void) curl_easy_setopt(h, CURLOPT_XOAUTH2_BEARER, q->token);
    }
}

int reg_perform(struct cdn_registry *r, CURL *h, struct reg_req *q, struct cdn_error *err)
{
    (void) r;
    reg_req_reset(q);
    struct curl_slist *hdrs = NULL;
    char accept[2048];
    if (q->accept) {
        (void) snprintf(accept, sizeof accept, "Accept: %s", q->accept);
        hdrs = curl_slist_append(hdrs, accept);
        if (!hdrs)
            return cdn_error_set(err, ENOMEM, "%s: out of memory", q->url);
    }
    (void) curl_easy_setopt(h, CURLOPT_URL, q->url);
    (void) curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    (void) curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    (void) curl_easy_setopt(h, CURLOPT_RANGE, q->range);
    (void) curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    (void) curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, q->redirect_to_http ? "http,https" : "https");
    (void) curl_easy_setopt(h, CURLOPT_TIMEOUT, q->bounded_time ? 120L : 0L);
    (void) curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    (void) curl_easy_setopt(h, CURLOPT_HEADERDATA, q);
    (void) curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body_entry);
    (void) curl_easy_setopt(h, CURLOPT_WRITEDATA, q);
    (void) curl_easy_setopt(h, CURLOPT_ERRORBUFFER, q->curl_error);
    set_auth(h, q);
    q->code = curl_easy_perform(h);
    curl_slist_free_all(hdrs);
    (void) curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    (void) curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    long status = 0;
    (void) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    q->status = status;
    if (q->code == CURLE_OK)
        return 0;
    if (q->too_big)
        return cdn_error_set(err, EFBIG, "%s: the answer is larger than %s", q->url,
                             q->fd < 0 ? "cordon accepts" : "the blob's size");
    if (q->bad_range)
        return cdn_error_set(err, EPROTO,
                             "%s: a resumed answer with Content-Range \"%s\" (wanted bytes %" PRIu64 "-)",
                             q->url, q->content_range, q->resume_from);
    if (q->fd_errno)
        return cdn_error_set(err, q->fd_errno, "%s: writing the answer: %m", q->url);
    return cdn_error_set(err, errno_of(q->code), "%s: %s", q->url,
                         q->curl_error[0] ? q->curl_error : curl_easy_strerror(q->code));
}

bool reg_transient(const struct reg_req *q)
{
    if (q->too_big || q->bad_range || q->fd_errno)
        return false;
    switch (q->code) {
    case CURLE_OK:
        return q->status == 408 || q->status == 429 || q->status / 100 == 5;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_COULDNT_CONNECT:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    default:
        return false;
    }
}

void reg_error_detail(const struct reg_req *q, char *buf, size_t size)
{
    buf[0] = '\0';
    if (!q->errlen)
        return;
    json_t *j = json_loadb(q->errbody, q->errlen, 0, NULL);
    json_t *e0 = json_array_get(json_object_get(j, "errors"), 0);
    const char *code = json_string_value(json_object_get(e0, "code"));
    const char *msg = json_string_value(json_object_get(e0, "message"));
    if (code || msg)
        (void) snprintf(buf, size, " (%.40s%s%.120s)", code ? code : "", code && msg ? ": " : "",
                        msg ? msg : "");
    json_decref(j);
}
