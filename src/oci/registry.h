/* A client of one OCI distribution (v2) registry: manifests and blobs over libcurl.
 *
 * Runs on the host (in cordond or `cordon image pull`, as root). What it trusts: the options the
 * operator gives (CA files, insecure hosts, mirrors, the auth file). What it does not: everything a
 * registry, a mirror, a token server or a redirect target answers — bodies are bounded (manifests
 * 4 MiB, token answers 1 MiB), blobs are verified against their digest, credentials go only to the
 * registry's own host and to its token realm over HTTPS (or a realm listed insecure), and never follow
 * a redirect to another host. Every transfer has a connect timeout and a stall timeout: no hangs.
 *
 * No JSON of manifests is parsed here (oci/manifest.h does that): the client hands back bytes.
 * One client may be used by several threads at once (parallel blob downloads). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "oci/digest.h"
#include "shared/error.h"

#define CDN_REGISTRY_MANIFEST_MAX (4u << 20)
#define CDN_REGISTRY_MIRRORS_MAX  8

struct cdn_registry_options {
    /* docker-style auth file ({"auths": {"host[:port]": {"auth": base64("user:pass")}}}). NULL: the
     * file $REGISTRY_AUTH_FILE names, else $DOCKER_CONFIG/config.json, else ~/.docker/config.json;
     * a missing file means anonymous. */
    const char *auth_file;
    /* PEM files of CAs trusted beyond the system's (NULL-terminated; may be NULL). */
    const char *const *ca_files;
    /* "host[:port]" spoken to in plain HTTP (NULL-terminated; may be NULL); every other host gets
     * HTTPS with verified certificates. A token realm on such a host may receive credentials over HTTP. */
    const char *const *insecure;
    /* "host[:port]" mirrors of this registry, tried in order before the registry itself. */
    const char *const *mirrors;
    long connect_timeout_s; /* 0: 30 */
    long stall_timeout_s;   /* a transfer moving no byte for this long fails; 0: 60 */
    unsigned blob_attempts; /* per endpoint, resuming with HTTP ranges; 0: 5 */
};

struct cdn_registry;

/* host: "registry.example:5000" or "docker.io" (served by registry-1.docker.io). Reads the auth
 * file and the CA files now. -EINVAL naming the field ("registry", "ca_files", "mirrors",
 * "auth_file") for bad options; -ENOMEM. */
int cdn_registry_new(const char *host, const struct cdn_registry_options *opts, struct cdn_registry **ret,
                     struct cdn_error *err);
void cdn_registry_free(struct cdn_registry *r);
static inline void cdn_registry_freep(struct cdn_registry **r)
{
    if (*r)
        cdn_registry_free(*r);
}
#define _cleanup_registry_ _cleanup_(cdn_registry_freep)

struct cdn_registry_manifest {
    uint8_t *data; /* the body, verbatim (malloc'd, size bytes, NUL after the end) */
    size_t size;
    char media_type[128];        /* Content-Type without parameters, "" if none */
    char digest[CDN_DIGEST_MAX]; /* sha256 of the body, or the requested digest (verified) */
};
void cdn_registry_manifest_done(struct cdn_registry_manifest *m);

/* The default Accept list: OCI index and manifest, Docker manifest list and schema 2. */
extern const char *const cdn_registry_manifest_types[];

/* GET /v2/<repository>/manifests/<reference>. reference: a tag or a digest; by digest the body
 * must hash to it (-EBADMSG otherwise). accept: NULL-terminated media types, NULL for the default.
 * Errors name the registry, the repository and the HTTP status: -ENOENT (404), -EACCES (401/403
 * after authenticating), -EFBIG (larger than 4 MiB), -EBADMSG (digest), -EIO/-ETIMEDOUT/
 * -ECONNREFUSED (transport). On success *ret is filled and owned by the caller. */
int cdn_registry_get_manifest(struct cdn_registry *r, const char *repository, const char *reference,
                              const char *const *accept, struct cdn_registry_manifest *ret,
                              struct cdn_error *err);

/* Called as a blob arrives: bytes so far (of this blob, after resumes) and its size. */
typedef void (*cdn_registry_progress_fn)(void *userdata, uint64_t done, uint64_t total);

/* GET /v2/<repository>/blobs/<digest> into out_fd (a regular file opened read-write; truncated
 * first), resumed with `Range: bytes=N-` after a dropped connection (blob_attempts per endpoint,
 * with backoff), then verified: exactly size bytes hashing to digest. Redirects are followed
 * without credentials to other hosts. On any failure out_fd is truncated to 0 and must not be
 * used; a digest mismatch is -EBADMSG ("digest mismatch …"). Other errors as for manifests. */
int cdn_registry_get_blob(struct cdn_registry *r, const char *repository, const char *digest, uint64_t size,
                          int out_fd, cdn_registry_progress_fn progress, void *userdata,
                          struct cdn_error *err);
