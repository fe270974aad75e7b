/* Image references (ref.h). Runs wherever a reference is read (CLI, cordond); the string is the
 * operator's, but nothing downstream re-checks it, so every part is validated here against the
 * distribution reference grammar (distribution/reference, "reference.go"):
 *   reference := name [":" tag] ["@" digest]; name := [domain "/"] path;
 *   domain := host [":" port]; path := component ("/" component)*;
 *   component := [a-z0-9]+ (separator [a-z0-9]+)*; separator := [_.] | "__" | "-"+;
 *   tag := [A-Za-z0-9_][A-Za-z0-9._-]{0,127}; a name is at most 255 characters.
 * Short names follow Docker's normalisation (normalize.go): the first component is a registry only if
 * it has a "." or ":" or is "localhost" (or has uppercase letters); otherwise docker.io, and a single
 * component there gets "library/". */
#include "oci/ref.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define NAME_MAX_LEN 255
#define DOCKER_HUB   "docker.io"

static bool is_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_alnum(char c)
{
    return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

static int bad(struct cdn_error *err, int errnum, const char *s, const char *why)
{
    return cdn_error_field(err, errnum, "image", "image: '%.96s%s': %s", s, strlen(s) > 96 ? "…" : "", why);
}

/* One path component: runs of [a-z0-9] joined by ".", "_", "__" or "-"+. */
static bool component_ok(const char *c, size_t n)
{
    size_t i = 0;
    for (;;) {
        size_t start = i;
        while (i < n && is_lower_alnum(c[i]))
            i++;
        if (i == start)
            return false;
        if (i == n)
            return true;
        if (c[i] == '.')
            i++;
        else if (c[i] == '_')
            i += (i + 1 < n && c[i + 1] == '_') ? 2 : 1;
        else if (c[i] == '-')
            while (i < n && c[i] == '-')
                i++;
        else
            return false;
    }
}

static const char *check_path(const char *p)
{
    if (!*p)
        return "the repository name is empty";
    for (const char *c = p; *c; c++)
        if (*c >= 'A' && *c <= 'Z')
            return "repository names must be lowercase";
    for (const char *c = p;;) {
        const char *slash = strchr(c, '/');
        size_t n = slash ? (size_t) (slash - c) : strlen(c);
        if (!component_ok(c, n))
            return "a repository path component is not [a-z0-9] runs joined by '.', '_', '__' or '-'";
        if (!slash)
            return NULL;
        c = slash + 1;
    }
}

static bool domain_label_ok(const char *c, size_t n)
{
    if (n == 0 || !is_alnum(c[0]) || !is_alnum(c[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(c[i]) && c[i] != '-')
            return false;
    return true;
}

/* host [":" port]; host is a DNS name, an IPv4 address (a DNS name by this grammar) or [IPv6]. */
static const char *check_domain(const char *d)
{
    const char *port = NULL;
    size_t hostlen;
    if (d[0] == '[') {
        const char *close = strchr(d, ']');
        if (!close)
            return "the registry's IPv6 address lacks its ']'";
        char addr[64];
        struct in6_addr a6;
        size_t n = (size_t) (close - d - 1);
        if (n == 0 || n >= sizeof addr)
            return "the registry's IPv6 address is not valid";
        memcpy(addr, d + 1, n);
        addr[n] = '\0';
        if (inet_pton(AF_INET6, addr, &a6) != 1)
            return "the registry's IPv6 address is not valid";
        if (close[1] != '\0' && close[1] != ':')
            return "the registry's IPv6 address is followed by something other than ':PORT'";
        port = close[1] ? close + 2 : NULL;
    } else {
        const char *colon = strchr(d, ':');
        hostlen = colon ? (size_t) (colon - d) : strlen(d);
        port = colon ? colon + 1 : NULL;
        for (const char *c = d; c < d + hostlen;) {
            const char *dot = memchr(c, '.', (size_t) (d + hostlen - c));
            size_t n = dot ? (size_t) (dot - c) : (size_t) (d + hostlen - c);
            if (!domain_label_ok(c, n))
                return "the registry host is not a DNS name, an IPv4 address or [IPv6]";
            c += n + (dot ? 1 : 0);
            if (dot && c == d + hostlen)
                return "the registry host ends with '.'";
        }
        if (hostlen == 0)
            return "the registry host is empty";
    }
    if (port) {
        size_t n = strspn(port, "0123456789");
        if (n == 0 || n > 5 || port[n] != '\0' || atoi(port) < 1 || atoi(port) > 65535)
            return "the registry port is not a number from 1 to 65535";
    }
    return NULL;
}

static bool tag_ok(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > 128 || !(is_alnum(t[0]) || t[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!is_alnum(t[i]) && !strchr("_.-", t[i]))
            return false;
    return true;
}

/* A layout's org.opencontainers.image.ref.name (image-spec annotations.md): alphanumerics joined by
 * -._:@+/ — wider than a tag, since tools put whole references there. */
static bool layout_tag_ok(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > 127 || !is_alnum(t[0]))
        return false;
    return strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._:@+/") == n;
}

static bool is_hex64(const char *s)
{
    return strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

/* name [":" tag] ["@" digest] → registry, repository, tag, digest. allow_digest: false inside a
 * docker-archive reference (an archive has tags, not manifest digests). */
static int parse_named(const char *s, bool allow_digest, struct cdn_image_ref *r, struct cdn_error *err)
{
    char name[NAME_MAX_LEN + 1 + 128 + 1];
    const char *at = strchr(s, '@');
    size_t namelen = at ? (size_t) (at - s) : strlen(s);
    if (at) {
        if (!allow_digest)
            return bad(err, EINVAL, s, "a docker-archive reference names a tag, not a digest");
        if (cdn_digest_check(at + 1, "image", NULL) < 0)
            return bad(err, EINVAL, s,
                       "the part after '@' is not a sha256:<64 hex> or sha512:<128 hex> digest");
        (void) snprintf(r->digest, sizeof r->digest, "%s", at + 1);
    }
    if (namelen >= sizeof name)
        return bad(err, ENAMETOOLONG, s, "the name is longer than 255 characters");
    memcpy(name, s, namelen);
    name[namelen] = '\0';

    char *slash = strrchr(name, '/');
    char *colon = strrchr(slash ? slash : name, ':');
    if (colon) {
        *colon = '\0';
        if (!tag_ok(colon + 1))
            return bad(err, EINVAL, s, "the tag is not [A-Za-z0-9_][A-Za-z0-9._-]{0,127}");
        (void) snprintf(r->tag, sizeof r->tag, "%s", colon + 1);
    } else if (!r->digest[0])
        (void) snprintf(r->tag, sizeof r->tag, "latest");

    const char *path = name;
    char *first = strchr(name, '/');
    if (first) {
        *first = '\0';
        bool upper = strpbrk(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != NULL;
        if (strpbrk(name, ".:") || strcmp(name, "localhost") == 0 || upper) {
            const char *why = check_domain(name);
            if (why)
                return bad(err, EINVAL, s, why);
            (void) snprintf(r->registry, sizeof r->registry, "%s",
                            strcmp(name, "index.docker.io") == 0 ? DOCKER_HUB : name);
            path = first + 1;
        } else
            *first = '/';
    }
    if (!r->registry[0]) {
        if (is_hex64(path))
            return bad(err, EINVAL, s,
                       "a 64-digit hex name is an image id, not a reference (use name@sha256:…)");
        (void) snprintf(r->registry, sizeof r->registry, DOCKER_HUB);
    }
    const char *why = check_path(path);
    if (why)
        return bad(err, EINVAL, s, why);
    bool library = strcmp(r->registry, DOCKER_HUB) == 0 && !strchr(path, '/');
    int n = snprintf(r->repository, sizeof r->repository, "%s%s", library ? "library/" : "", path);
    if (n < 0 || (size_t) n >= sizeof r->repository || strlen(r->registry) + 1 + (size_t) n > NAME_MAX_LEN)
        return bad(err, ENAMETOOLONG, s, "the name is longer than 255 characters");
    return 0;
}

static int parse_path(const char *s, const char *p, size_t n, struct cdn_image_ref *r, struct cdn_error *err)
{
    if (n == 0)
        return bad(err, EINVAL, s, "the path is empty");
    if (p[0] != '/')
        return bad(err, EINVAL, s, "the path must be absolute");
    if (n >= sizeof r->path)
        return bad(err, ENAMETOOLONG, s, "the path is longer than 4095 bytes");
    memcpy(r->path, p, n);
    r->path[n] = '\0';
    return 0;
}

/* oci:DIR[:TAG], oci-archive:FILE[:TAG], docker-archive:FILE[:NAME[:TAG]]; the path ends at the first
 * ':' (as skopeo reads them), so it cannot hold one. */
static int parse_transport(const char *s, const char *rest, struct cdn_image_ref *r, struct cdn_error *err)
{
    const char *colon = strchr(rest, ':');
    int k = parse_path(s, rest, colon ? (size_t) (colon - rest) : strlen(rest), r, err);
    if (k < 0 || !colon)
        return k;
    const char *sel = colon + 1;
    if (r->kind == CDN_REF_DOCKER_ARCHIVE) {
        if (!*sel)
            return bad(err, EINVAL, s, "nothing after the archive's ':' (give NAME[:TAG] or no ':')");
        return parse_named(sel, false, r, err);
    }
    if (!layout_tag_ok(sel))
        return bad(err, EINVAL, s, "the tag after the path is not a valid org.opencontainers.image.ref.name");
    (void) snprintf(r->tag, sizeof r->tag, "%s", sel);
    return 0;
}

static const struct {
    const char *prefix;
    enum cdn_ref_kind kind;
} transports[] = {
    {"oci:", CDN_REF_OCI_LAYOUT},
    {"oci-archive:", CDN_REF_OCI_ARCHIVE},
    {"docker-archive:", CDN_REF_DOCKER_ARCHIVE},
};

/* skopeo's other transports: named so that "dir:/x" gets a clear refusal, not a grammar error. */
static const char *const unsupported[] = {
    "dir:", "containers-storage:", "docker-daemon:", "ostree:", "sif:", "tarball:"};

int cdn_image_ref_parse(const char *s, struct cdn_image_ref *ret, struct cdn_error *err)
{
    struct cdn_image_ref r = {0};
    if (!s || !*s)
        return cdn_error_field(err, EINVAL, "image", "image: empty reference");
    if (strnlen(s, CDN_IMAGE_REF_MAX) >= CDN_IMAGE_REF_MAX)
        return bad(err, ENAMETOOLONG, s, "longer than any image reference");
    for (const char *c = s; *c; c++)
        if ((unsigned char) *c < 0x20 || *c == 0x7f)
            return cdn_error_field(err, EINVAL, "image", "image: the reference contains a control character");
    int k = 0;
    if (strcmp(s, "host") == 0)
        r.kind = CDN_REF_HOST;
    else if (s[0] == '/') {
        r.kind = CDN_REF_DIR;
        /* an overlay lowerdir cannot hold these (image.c refused them before references existed) */
        if (strpbrk(s, ",:\\"))
            return bad(err, EINVAL, s, "a directory image's path cannot contain ',', ':' or '\\'");
        k = parse_path(s, s, strlen(s), &r, err);
    } else if (strncmp(s, "docker://", 9) == 0) {
        r.kind = CDN_REF_REGISTRY;
        k = parse_named(s + 9, true, &r, err);
    } else {
        for (size_t i = 0; i < ELEMENTSOF(unsupported); i++)
            if (strncmp(s, unsupported[i], strlen(unsupported[i])) == 0)
                return bad(err, EINVAL, s,
                           "this transport is not supported (use oci:, oci-archive:, "
                           "docker-archive: or a registry reference)");
        r.kind = CDN_REF_REGISTRY;
        for (size_t i = 0; i < ELEMENTSOF(transports); i++)
            if (strncmp(s, transports[i].prefix, strlen(transports[i].prefix)) == 0) {
                r.kind = transports[i].kind;
                k = parse_transport(s, s + strlen(transports[i].prefix), &r, err);
                break;
            }
        if (r.kind == CDN_REF_REGISTRY)
            k = parse_named(s, true, &r, err);
    }
    if (k < 0)
        return k;
    *ret = r;
    return 0;
}

int cdn_image_ref_format(const struct cdn_image_ref *r, char *buf, size_t size)
{
    int n;
    switch (r->kind) {
    case CDN_REF_HOST:
        n = snprintf(buf, size, "host");
        break;
    case CDN_REF_DIR:
        n = snprintf(buf, size, "%s", r->path);
        break;
    case CDN_REF_REGISTRY:
        n = snprintf(buf, size, "%s/%s%s%s%s%s", r->registry, r->repository, r->tag[0] ? ":" : "", r->tag,
                     r->digest[0] ? "@" : "", r->digest);
        break;
    case CDN_REF_DOCKER_ARCHIVE:
        n = snprintf(buf, size, "docker-archive:%s%s%s%s%s%s%s", r->path, r->repository[0] ? ":" : "",
                     r->registry, r->repository[0] ? "/" : "", r->repository, r->tag[0] ? ":" : "", r->tag);
        break;
    default:
        n = snprintf(buf, size, "%s%s%s%s", r->kind == CDN_REF_OCI_LAYOUT ? "oci:" : "oci-archive:", r->path,
                     r->tag[0] ? ":" : "", r->tag);
        break;
    }
    if (n < 0 || (size_t) n >= size)
        return -ENOBUFS;
    return n;
}

const char *cdn_image_ref_kind_name(enum cdn_ref_kind kind)
{
    static const char *const names[] = {
        [CDN_REF_HOST] = "host",
        [CDN_REF_DIR] = "dir",
        [CDN_REF_REGISTRY] = "registry",
        [CDN_REF_OCI_LAYOUT] = "oci",
        [CDN_REF_OCI_ARCHIVE] = "oci-archive",
        [CDN_REF_DOCKER_ARCHIVE] = "docker-archive",
    };
    return (unsigned) kind < ELEMENTSOF(names) ? names[kind] : "?";
}

const char *cdn_image_ref_api_host(const struct cdn_image_ref *r)
{
    return strcmp(r->registry, DOCKER_HUB) == 0 ? "registry-1.docker.io" : r->registry;
}

bool cdn_image_ref_is_oci(const struct cdn_image_ref *r)
{
    return r->kind != CDN_REF_HOST && r->kind != CDN_REF_DIR;
}
