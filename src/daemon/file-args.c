/* Parsing of the files routes' query (file-args.h). Runs in cordond's loop;
 * the query is a client's, trusted as far as the socket lets it in and still
 * parsed as hostile input: every parameter named, checked, and used once. */
#include "file-args.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "proto/frame.h"
#include "shared/user.h"
#include "shared/parse-util.h"

static int bad(struct cdn_error *err, const char *field, const char *msg)
{
    return cdn_error_field(err, EINVAL, field, "%s: %s", field, msg);
}

/* Each parameter and the routes (ops) that take it. */
static const struct {
    const char *name;
    uint32_t ops; /* 1u << op */
} params[] = {
    {"path", ~(1u << CDN_FILE_RENAME)},
    {"max_bytes", 1u << CDN_FILE_READ},
    {"follow", 1u << CDN_FILE_STAT},
    {"from", 1u << CDN_FILE_RENAME},
    {"to", 1u << CDN_FILE_RENAME},
    {"overwrite", 1u << CDN_FILE_RENAME},
    {"mode", 1u << CDN_FILE_CHMOD},
    {"recursive", 1u << CDN_FILE_WATCH},
    {"user", ~0u},
    {"step", 1u << CDN_FILE_WRITE},
};
enum {
    P_PATH,
    P_MAX_BYTES,
    P_FOLLOW,
    P_FROM,
    P_TO,
    P_OVERWRITE,
    P_MODE,
    P_RECURSIVE,
    P_USER,
    P_STEP,
    N_PARAMS
};

static int boolean(const char *field, const char *v, bool *ret, struct cdn_error *err)
{
    if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
        *ret = true;
    else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
        *ret = false;
    else
        return bad(err, field, "expected true or false");
    return 0;
}

/* chmod's octal: 755, 0755 or 0o755; at most 07777. */
static int octal(const char *v, uint32_t *ret, struct cdn_error *err)
{
    const char *d = strncmp(v, "0o", 2) == 0 ? v + 2 : v;
    uint32_t m = 0;
    size_t n = 0;
    for (; d[n] >= '0' && d[n] <= '7' && m <= 07777; n++)
        m = m * 8 + (uint32_t) (d[n] - '0');
    if (n == 0 || d[n] || m > 07777)
        return bad(err, "mode", "expected permission bits in octal, at most 7777 (e.g. 755 or 0o644)");
    *ret = m;
    return 0;
}

static int one(int op, const struct evkeyval *kv, bool *seen, struct file_args *a, struct cdn_error *err)
{
    int k = 0;
    while (k < N_PARAMS && strcmp(kv->key, params[k].name) != 0)
        k++;
    if (k == N_PARAMS || !(params[k].ops & (1u << op))) {
        char takes[80] = "";
        for (int i = 0; i < N_PARAMS; i++)
            if (params[i].ops & (1u << op))
                (void) snprintf(takes + strlen(takes), sizeof takes - strlen(takes), "%s%s",
                                takes[0] ? ", " : "", params[i].name);
        return cdn_error_field(err, EINVAL, kv->key, "unknown parameter '%.64s' (this route takes %s)",
                               kv->key, takes);
    }
    if (seen[k])
        return bad(err, params[k].name, "given twice");
    seen[k] = true;
    bool follow = true, overwrite = true;
    switch (k) {
    case P_MAX_BYTES:
        if (cdn_parse_size(kv->value, &a->max_bytes) < 0 || a->max_bytes == 0)
            return bad(err, "max_bytes", "expected a positive size in bytes (e.g. 1048576 or 512M)");
        return 0;
    case P_FOLLOW:
        if (boolean("follow", kv->value, &follow, err) < 0)
            return -EINVAL;
        a->nofollow = !follow;
        return 0;
    case P_OVERWRITE:
        if (boolean("overwrite", kv->value, &overwrite, err) < 0)
            return -EINVAL;
        a->noreplace = !overwrite;
        return 0;
    case P_MODE:
        return octal(kv->value, &a->mode, err);
    case P_RECURSIVE:
        return boolean("recursive", kv->value, &a->recursive, err);
    case P_STEP:
        if (cdn_parse_u64(kv->value, &a->step) < 0 || a->step >= (1ULL << 40))
            return bad(err, "step", "expected an integer from 0 (the trajectory's step this write is)");
        a->has_step = true;
        return 0;
    case P_USER: /* resolved by init in the sandbox's own files, as a command's user */
        if (cdn_user_check(kv->value, err) < 0)
            return -EINVAL;
        (void) snprintf(a->user, sizeof a->user, "%s", kv->value);
        return 0;
    default:
        return 0; /* the paths: below */
    }
}

/* A path parameter, made absolute against workdir. */
static int take_path(const struct evkeyvalq *q, const char *name, const char *workdir, char *buf, size_t size,
                     struct cdn_error *err)
{
    const char *p = evhttp_find_header(q, name);
    if (!p || !p[0])
        return cdn_error_field(err, EINVAL, name, "%s: the %s parameter is required: ?%s=P", name, name,
                               name);
    if ((size_t) snprintf(buf, size, "%s%s%s", p[0] == '/' ? "" : workdir, p[0] == '/' ? "" : "/", p) >= size)
        return cdn_error_field(err, ENAMETOOLONG, name, "%s: longer than %zu bytes", name, size - 1);
    return 0;
}

int cdn_file_args_parse(const char *query, int op, const char *workdir, struct file_args *ret,
                        struct cdn_error *err)
{
    struct evkeyvalq q;
    TAILQ_INIT(&q);
    const char *first = op == CDN_FILE_RENAME ? "from" : "path";
    if (!query || evhttp_parse_query_str(query, &q) < 0)
        return cdn_error_field(err, EINVAL, first, "%s: the %s parameter is required: ?%s=P", first, first,
                               first);
    if (strstr(query, "%00")) { /* decoded, it would cut the value short without a trace */
        evhttp_clear_headers(&q);
        return bad(err, first, "the query holds a NUL byte (%00)");
    }
    struct file_args a = {0};
    bool seen[N_PARAMS] = {false};
    int r = 0;
    for (const struct evkeyval *kv = q.tqh_first; kv && r == 0; kv = kv->next.tqe_next)
        r = one(op, kv, seen, &a, err);
    if (r == 0 && op == CDN_FILE_RENAME) {
        r = take_path(&q, "from", workdir, a.path, sizeof a.path, err);
        if (r == 0)
            r = take_path(&q, "to", workdir, a.to, sizeof a.to, err);
        for (size_t n = strlen(a.path); r == 0 && n > 1 && a.path[n - 1] == '/'; n--)
            a.path[n - 1] = 0; /* "dir/" is dir, as mv takes it */
        /* "to" naming a directory by its slash: the entry goes into it, as mv does */
        const char *base = r == 0 ? strrchr(a.path, '/') + 1 : "";
        size_t n = r == 0 ? strlen(a.to) : 0;
        if (r == 0 && a.to[n - 1] == '/' && n + strlen(base) >= sizeof a.to)
            r = cdn_error_field(err, ENAMETOOLONG, "to", "to: longer than %zu bytes", sizeof a.to - 1);
        else if (r == 0 && a.to[n - 1] == '/')
            memcpy(a.to + n, base, strlen(base) + 1);
    } else if (r == 0)
        r = take_path(&q, "path", workdir, a.path, sizeof a.path, err);
    if (r == 0 && op == CDN_FILE_CHMOD && !seen[P_MODE])
        r = bad(err, "mode", "the mode parameter is required: ?mode=755");
    evhttp_clear_headers(&q);
    if (r == 0)
        *ret = a;
    return r;
}
