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
#include "shared/parse-util.h"

static int bad(struct cdn_error *err, const char *field, const char *msg)
{
    return cdn_error_field(err, EINVAL, field, "%s: %s", field, msg);
}

static int one(int op, const struct evkeyval *kv, bool *seen, struct file_args *a, struct cdn_error *err)
{
    static const char *const names[] = {"path", "max_bytes", "follow"};
    int k = 0;
    while (k < 3 && strcmp(kv->key, names[k]) != 0)
        k++;
    if (k == 3 || (k == 1 && op != CDN_FILE_READ) || (k == 2 && op != CDN_FILE_STAT))
        return cdn_error_field(err, EINVAL, kv->key, "unknown parameter '%.64s' (this route takes %s)",
                               kv->key,
                               op == CDN_FILE_READ   ? "path and max_bytes"
                               : op == CDN_FILE_STAT ? "path and follow"
                                                     : "path");
    if (seen[k])
        return bad(err, names[k], "given twice");
    seen[k] = true;
    if (k == 1 && (cdn_parse_size(kv->value, &a->max_bytes) < 0 || a->max_bytes == 0))
        return bad(err, "max_bytes", "expected a positive size in bytes (e.g. 1048576 or 512M)");
    if (k == 2 && strcmp(kv->value, "true") != 0 && strcmp(kv->value, "1") != 0 &&
        strcmp(kv->value, "false") != 0 && strcmp(kv->value, "0") != 0)
        return bad(err, "follow", "expected true or false");
    if (k == 2)
        a->nofollow = kv->value[0] == 'f' || kv->value[0] == '0';
    return 0;
}

int cdn_file_args_parse(const char *query, int op, const char *workdir, struct file_args *ret,
                        struct cdn_error *err)
{
    struct evkeyvalq q;
    TAILQ_INIT(&q);
    if (!query || evhttp_parse_query_str(query, &q) < 0)
        return bad(err, "path", "the path parameter is required: ?path=P");
    if (strstr(query, "%00")) { /* decoded, it would cut the value short without a trace */
        evhttp_clear_headers(&q);
        return bad(err, "path", "the query holds a NUL byte (%00)");
    }
    struct file_args a = {0};
    bool seen[3] = {false};
    int r = 0;
    for (const struct evkeyval *kv = q.tqh_first; kv && r == 0; kv = kv->next.tqe_next)
        r = one(op, kv, seen, &a, err);
    const char *p = r == 0 ? evhttp_find_header(&q, "path") : NULL;
    if (r == 0 && (!p || !p[0]))
        r = bad(err, "path", "the path parameter is required: ?path=P");
    else if (r == 0 && (size_t) snprintf(a.path, sizeof a.path, "%s%s%s", p[0] == '/' ? "" : workdir,
                                         p[0] == '/' ? "" : "/", p) >= sizeof a.path)
        r = cdn_error_field(err, ENAMETOOLONG, "path", "path: longer than %zu bytes", sizeof a.path - 1);
    evhttp_clear_headers(&q);
    if (r == 0)
        *ret = a;
    return r;
}
