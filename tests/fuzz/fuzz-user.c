/* Fuzz the user parser: the first line is the user spec, the rest is /etc/passwd up to a line "--",
 * then /etc/group. Whatever the files say, a resolved user has ids within the bound, at most
 * CDN_USER_MAX_GROUPS groups with the primary gid first, and a home that is "" or absolute; a failure
 * names the field "user". The reverse lookup of a few uids holds its bounds too. */
#include "shared/user.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *) data, *end = p + size;
    const char *nl = memchr(p, '\n', size);
    size_t spec_len = nl ? (size_t) (nl - p) : size;
    char *spec = strndup(p, spec_len);
    if (!spec)
        return 0;
    const char *files = nl ? nl + 1 : end;
    const char *sep = NULL;
    for (const char *q = files; q + 3 <= end; q++)
        if (memcmp(q, "--\n", 3) == 0 && (q == files || q[-1] == '\n')) {
            sep = q;
            break;
        }
    struct cdn_user_db db = {files, sep ? (size_t) (sep - files) : (size_t) (end - files),
                             sep ? sep + 3 : NULL, sep ? (size_t) (end - sep - 3) : 0};
    uint32_t id_max = size % 2 ? 65535 : 999;
    struct cdn_user u;
    struct cdn_error err = {0};
    if (cdn_user_resolve(spec, &db, id_max, &u, &err) == 0) {
        if (u.uid > id_max || u.gid > id_max || u.n_groups == 0 || u.n_groups > CDN_USER_MAX_GROUPS ||
            u.groups[0] != u.gid || (u.home[0] && u.home[0] != '/') ||
            memchr(u.home, 0, sizeof u.home) == NULL)
            abort();
        for (uint32_t i = 0; i < u.n_groups; i++)
            if (u.groups[i] > id_max)
                abort();
    } else if (err.errnum == 0 || strcmp(err.field, "user") != 0 || !err.msg[0]) {
        abort();
    }
    /* The names of ids (entries' owners, init-files.c): sorted, one per id, each non-empty,
     * NUL-terminated, without ':' or a newline, found again by its id. */
    struct cdn_user_names names;
    if (cdn_user_names_parse(db.passwd, db.passwd_len, &names) == 0) {
        for (size_t i = 0; i < names.n; i++) {
            const char *nm = names.v[i].name;
            if ((i && names.v[i - 1].id >= names.v[i].id) || !memchr(nm, 0, sizeof names.v[i].name) ||
                !nm[0] || strpbrk(nm, ":\n") || cdn_user_names_find(&names, names.v[i].id) != nm)
                abort();
        }
        if (names.n > CDN_USER_NAMES_MAX)
            abort();
        cdn_user_names_free(&names);
    }
    free(spec);
    return 0;
}
