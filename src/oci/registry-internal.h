/* Shared between the files of the registry client (registry.c: endpoints, manifests, blobs;
 * registry-http.c: one libcurl transfer; registry-auth.c: credentials, challenges, tokens).
 * Not a public interface. */
#pragma once

#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include "oci/registry.h"
#include "shared/strv.h"

enum reg_auth { REG_AUTH_NONE, REG_AUTH_BASIC, REG_AUTH_BEARER };

#define REG_TOKENS_MAX 8

struct reg_token {
    char scope[320];
    char *token;
    time_t expires;
};

/* One place the registry's content is served from: a mirror, or the registry itself (last). */
struct reg_endpoint {
    char host[256]; /* "host[:port]" as configured; also the auth file's key */
    char base[300]; /* "https://host[:port]" (docker.io: registry-1.docker.io) */
    bool plain;     /* listed insecure: plain HTTP */
    bool mirror;
    bool pinged;
    enum reg_auth auth; /* what the registry asked for (ping or a 401) */
    char realm[1024];
    char service[256];
    bool have_creds;
    bool cred_helper; /* the auth file names a credential helper for this host, which is not supported */
    char user[256];
    char pass[256];
    struct reg_token tokens[REG_TOKENS_MAX];
    unsigned next_token;
};

struct cdn_registry {
    char host[256];
    struct reg_endpoint eps[CDN_REGISTRY_MIRRORS_MAX + 1];
    size_t n_eps;
    struct cdn_strv insecure; /* "host[:port]" spoken to in plain HTTP */
    void **cas;               /* X509 *, NULL-terminated */
    long connect_timeout_s, stall_timeout_s;
    unsigned blob_attempts;
    pthread_mutex_t lock;       /* endpoints' learned state and tokens */
    pthread_mutex_t token_lock; /* held while a token is fetched: parallel pulls share one */
    CURLSH *share;
    pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
};

/* One GET, its body going to memory (bounded) or to an fd (from an offset, bounded). */
struct reg_req {
    const char *url;
    const char *accept;
    const char *range; /* "N-" or NULL */
    enum reg_auth auth;
    const char *user, *pass, *token;
    bool redirect_to_http; /* may a redirect leave HTTPS (only when the endpoint is plain itself) */
    bool bounded_time;     /* small answers: a total time limit too */
    /* memory sink (fd < 0) */
    uint8_t *buf;
    size_t len, cap, max;
    /* fd sink */
    int fd;
    uint64_t resume_from, fd_off, fd_limit;
    cdn_registry_progress_fn progress;
    void *userdata;
    /* what came back */
    long status, hdr_status;
    bool started, too_big, bad_range;
    int fd_errno;
    CURLcode code;
    char content_type[128];
    char docker_digest[CDN_DIGEST_MAX];
    char content_range[128];
    char challenge[2048];
    char errbody[2048];
    size_t errlen;
    char curl_error[CURL_ERROR_SIZE];
};

struct reg_challenge {
    char scheme[16];
    char realm[1024];
    char service[256];
    char scope[512];
    char error[64];
};

/* registry-http.c */
CURL *reg_easy_new(struct cdn_registry *r);
/* Perform q on h. 0 when an HTTP answer came (any status, in q->status); a negative errno with
 * err set (naming url) when the transfer failed; q->code keeps libcurl's code. */
int reg_perform(struct cdn_registry *r, CURL *h, struct reg_req *q, struct cdn_error *err);
void reg_req_reset(struct reg_req *q);
bool reg_transient(const struct reg_req *q);
/* "CODE: message" of a registry's JSON error body, or "" */
void reg_error_detail(const struct reg_req *q, char *buf, size_t size);

/* registry-auth.c */
int reg_auth_load(struct cdn_registry *r, const char *auth_file, struct cdn_error *err);
int reg_challenge_parse(const char *header, struct reg_challenge *c);
bool reg_insecure(const struct cdn_registry *r, const char *hostport);
/* A bearer token for scope (cached unless fresh), malloc'd into *ret. Lock not held by the caller. */
int reg_token_get(struct cdn_registry *r, struct reg_endpoint *ep, CURL *h, const char *scope, bool fresh,
                  char **ret, struct cdn_error *err);
void reg_tokens_clear(struct reg_endpoint *ep);
