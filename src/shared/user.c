/* shared/user.h: a command's user from the sandbox's /etc/passwd and /etc/group. Runs in the container
 * tier's setup child (the spec's user, at create) and in cordon-init (each command's), both inside the
 * sandbox; trusts nothing it reads: the files are the agent's to rewrite between any two commands. */
#include "user.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shared/fd-util.h"
#include "shared/macro.h"

struct span {
    const char *p;
    size_t n;
};

static bool span_is(struct span s, const char *str)
{
    size_t n = strlen(str);
    return s.n == n && memcmp(s.p, str, n) == 0;
}

/* Decimal, no sign, no leading junk; -EINVAL or -ERANGE (over max, or over CDN_USER_ID_MAX). */
static int parse_id(struct span s, uint32_t max, uint32_t *ret)
{
    uint64_t v = 0;
    if (s.n == 0 || s.n > 10)
        return s.n == 0 ? -EINVAL : -ERANGE;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] < '0' || s.p[i] > '9')
            return -EINVAL;
        v = v * 10 + (uint64_t) (s.p[i] - '0');
    }
    if (v > CDN_USER_ID_MAX || v > max)
        return -ERANGE;
    *ret = (uint32_t) v;
    return 0;
}

static bool all_digits(struct span s)
{
    for (size_t i = 0; i < s.n; i++)
        if (s.p[i] < '0' || s.p[i] > '9')
            return false;
    return s.n > 0;
}

static bool valid_name(struct span s)
{
    if (s.n == 0 || s.p[0] == '-')
        return false;
    for (size_t i = 0; i < s.n; i++) {
        char c = s.p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '.' || c == '-'))
            return false;
    }
    return true;
}

/* spec → user part and group part (.p NULL when absent). */
static int split_spec(const char *spec, struct span *ret_user, struct span *ret_group, struct cdn_error *err)
{
    if (!spec || !spec[0] || strlen(spec) > CDN_USER_SPEC_MAX)
        return cdn_error_field(err, EINVAL, "user", "user: expected name, uid, name:group or uid:gid");
    const char *colon = strchr(spec, ':');
    struct span u = {spec, colon ? (size_t) (colon - spec) : strlen(spec)}, g = {NULL, 0};
    if (colon)
        g = (struct span){colon + 1, strlen(colon + 1)};
    if (!valid_name(u) || (colon && !valid_name(g)))
        return cdn_error_field(err, EINVAL, "user", "user: '%s' is not name, uid, name:group or uid:gid",
                               spec);
    uint32_t id;
    if ((all_digits(u) && parse_id(u, CDN_USER_ID_MAX, &id) < 0) ||
        (colon && all_digits(g) && parse_id(g, CDN_USER_ID_MAX, &id) < 0))
        return cdn_error_field(err, ERANGE, "user", "user: '%s': ids go from 0 to %u", spec, CDN_USER_ID_MAX);
    *ret_user = u;
    *ret_group = g;
    return 0;
}

int cdn_user_check(const char *spec, struct cdn_error *err)
{
    struct span u, g;
    return split_spec(spec, &u, &g, err);
}

int cdn_user_numeric(const char *spec)
{
    struct span u, g;
    if (split_spec(spec, &u, &g, NULL) < 0)
        return -EINVAL;
    return all_digits(u) && (!g.p || all_digits(g));
}

/* The next line of buf at *off, without its newline; -E2BIG past CDN_USER_LINE_MAX; 0 at the end. */
static int next_line(const char *buf, size_t len, size_t *off, struct span *ret)
{
    if (!buf || *off >= len)
        return 0;
    const char *start = buf + *off, *nl = memchr(start, '\n', len - *off);
    size_t n = nl ? (size_t) (nl - start) : len - *off;
    if (n > CDN_USER_LINE_MAX)
        return -E2BIG;
    *off += n + (nl ? 1 : 0);
    *ret = (struct span){start, n};
    return 1;
}

/* Split a line at ':' into at most max fields; returns how many. */
static size_t split_fields(struct span line, struct span *f, size_t max)
{
    size_t k = 0;
    const char *p = line.p, *end = line.p + line.n;
    while (k < max) {
        const char *c = memchr(p, ':', (size_t) (end - p));
        f[k++] = (struct span){p, c ? (size_t) (c - p) : (size_t) (end - p)};
        if (!c)
            break;
        p = c + 1;
    }
    return k;
}

static int too_long(const char *file, struct cdn_error *err)
{
    return cdn_error_field(err, E2BIG, "user", "user: /etc/%s has a line over %u bytes", file,
                           CDN_USER_LINE_MAX);
}

/* The passwd entry of name (by_uid false) or of *uid (by_uid true): 1 found, 0 not, < 0 error. */
static int find_passwd(const struct cdn_user_db *db, struct span name, bool by_uid, uint32_t id_max,
                       struct cdn_user *u, char *ret_name, size_t name_size, struct cdn_error *err)
{
    size_t off = 0;
    struct span line;
    int r;
    while ((r = next_line(db->passwd, db->passwd_len, &off, &line)) > 0) {
        struct span f[7] = {{0}};
        size_t n = split_fields(line, f, 7);
        uint32_t uid, gid;
        if (n < 4)
            continue;
        bool match = by_uid ? parse_id(f[2], CDN_USER_ID_MAX, &uid) == 0 && uid == u->uid
                            : f[0].n == name.n && memcmp(f[0].p, name.p, name.n) == 0;
        if (!match)
            continue;
        if (!by_uid && (r = parse_id(f[2], id_max, &uid)) < 0)
            return cdn_error_field(err, -r, "user", "user: the uid of '%.*s' in /etc/passwd is %s",
                                   (int) name.n, name.p,
                                   r == -ERANGE ? "outside the sandbox's ids" : "not a number");
        if ((r = parse_id(f[3], id_max, &gid)) < 0)
            return cdn_error_field(err, -r, "user", "user: the gid of uid %u in /etc/passwd is %s", uid,
                                   r == -ERANGE ? "outside the sandbox's ids" : "not a number");
        u->uid = uid;
        u->gid = gid;
        u->home[0] = 0;
        if (n >= 6 && f[5].n > 0 && f[5].n < sizeof u->home && f[5].p[0] == '/' &&
            !memchr(f[5].p, 0, f[5].n)) {
            memcpy(u->home, f[5].p, f[5].n);
            u->home[f[5].n] = 0;
        }
        if (f[0].n < name_size && valid_name(f[0])) {
            memcpy(ret_name, f[0].p, f[0].n);
            ret_name[f[0].n] = 0;
        }
        return 1;
    }
    return r < 0 ? too_long("passwd", err) : 0;
}

static int find_group(const struct cdn_user_db *db, struct span name, uint32_t id_max, uint32_t *ret_gid,
                      struct cdn_error *err)
{
    size_t off = 0;
    struct span line;
    int r;
    while ((r = next_line(db->group, db->group_len, &off, &line)) > 0) {
        struct span f[4] = {{0}};
        if (split_fields(line, f, 4) < 3 || !(f[0].n == name.n && memcmp(f[0].p, name.p, name.n) == 0))
            continue;
        if ((r = parse_id(f[2], id_max, ret_gid)) < 0)
            return cdn_error_field(err, -r, "user", "user: the gid of group '%.*s' in /etc/group is %s",
                                   (int) name.n, name.p,
                                   r == -ERANGE ? "outside the sandbox's ids" : "not a number");
        return 1;
    }
    return r < 0 ? too_long("group", err) : 0;
}

static bool member_of(struct span members, const char *name)
{
    const char *p = members.p, *end = members.p + members.n;
    while (p < end) {
        const char *c = memchr(p, ',', (size_t) (end - p));
        struct span m = {p, c ? (size_t) (c - p) : (size_t) (end - p)};
        if (span_is(m, name))
            return true;
        p = c ? c + 1 : end;
    }
    return false;
}

static int add_group(struct cdn_user *u, uint32_t gid, struct cdn_error *err)
{
    for (uint32_t i = 0; i < u->n_groups; i++)
        if (u->groups[i] == gid)
            return 0;
    if (u->n_groups >= CDN_USER_MAX_GROUPS)
        return cdn_error_field(err, E2BIG, "user", "user: more than %u groups in /etc/group",
                               CDN_USER_MAX_GROUPS);
    u->groups[u->n_groups++] = gid;
    return 0;
}

/* The primary gid, then every group of /etc/group that lists name (a gid outside the sandbox's
 * ids cannot be held: such an entry is skipped). */
static int supplementary(const struct cdn_user_db *db, const char *name, uint32_t id_max, struct cdn_user *u,
                         struct cdn_error *err)
{
    u->n_groups = 0;
    int r = add_group(u, u->gid, err);
    size_t off = 0;
    struct span line;
    while (r >= 0 && name[0] && (r = next_line(db->group, db->group_len, &off, &line)) > 0) {
        struct span f[4] = {{0}};
        uint32_t gid;
        if (split_fields(line, f, 4) == 4 && member_of(f[3], name) && parse_id(f[2], id_max, &gid) == 0)
            r = add_group(u, gid, err);
    }
    if (r == -E2BIG && err && !err->errnum)
        return too_long("group", err);
    return r < 0 ? r : 0;
}

int cdn_user_resolve(const char *spec, const struct cdn_user_db *db, uint32_t id_max, struct cdn_user *ret,
                     struct cdn_error *err)
{
    struct span us, gs;
    int r = split_spec(spec, &us, &gs, err);
    if (r < 0)
        return r;
    struct cdn_user u = {0};
    char name[64] = "";
    if (all_digits(us)) {
        if (parse_id(us, id_max, &u.uid) < 0)
            return cdn_error_field(err, ERANGE, "user", "user: uid %.*s is outside the sandbox's ids (0-%u)",
                                   (int) us.n, us.p, id_max);
        r = find_passwd(db, us, true, id_max, &u, name, sizeof name, err);
        if (r == 0)
            u.gid = 0;
    } else {
        r = find_passwd(db, us, false, id_max, &u, name, sizeof name, err);
        if (r == 0)
            return cdn_error_field(err, ENOENT, "user", "user: no user '%.*s' in the sandbox's /etc/passwd",
                                   (int) us.n, us.p);
    }
    if (r < 0)
        return r;
    if (gs.p && all_digits(gs)) {
        if (parse_id(gs, id_max, &u.gid) < 0)
            return cdn_error_field(err, ERANGE, "user", "user: gid %.*s is outside the sandbox's ids (0-%u)",
                                   (int) gs.n, gs.p, id_max);
    } else if (gs.p) {
        r = find_group(db, gs, id_max, &u.gid, err);
        if (r == 0)
            return cdn_error_field(err, ENOENT, "user", "user: no group '%.*s' in the sandbox's /etc/group",
                                   (int) gs.n, gs.p);
        if (r < 0)
            return r;
    }
    if ((r = supplementary(db, name, id_max, &u, err)) < 0)
        return r;
    *ret = u;
    return 0;
}

static int read_bounded(int fd, const char *name, char **ret, size_t *ret_len, struct cdn_error *err)
{
    size_t cap = 64u << 10, len = 0;
    _cleanup_free_ char *buf = malloc(cap + 1);
    if (!buf)
        return -ENOMEM;
    for (;;) {
        if (len == cap) {
            if (cap > CDN_USER_FILE_MAX)
                return cdn_error_field(err, EFBIG, "user", "user: /etc/%s is over %u MiB", name,
                                       CDN_USER_FILE_MAX >> 20);
            cap = cap * 2 > CDN_USER_FILE_MAX ? CDN_USER_FILE_MAX + 1 : cap * 2;
            char *n = realloc(buf, cap + 1);
            if (!n)
                return -ENOMEM;
            buf = n;
        }
        ssize_t k = read(fd, buf + len, cap - len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return cdn_error_field(err, errno, "user", "user: read /etc/%s: %m", name);
        if (k == 0)
            break;
        len += (size_t) k;
    }
    if (len > CDN_USER_FILE_MAX)
        return cdn_error_field(err, EFBIG, "user", "user: /etc/%s is over %u MiB", name,
                               CDN_USER_FILE_MAX >> 20);
    buf[len] = 0;
    *ret = TAKE_PTR(buf);
    *ret_len = len;
    return 0;
}

int cdn_user_read_file(int root_fd, const char *name, char **ret, size_t *ret_len, struct cdn_error *err)
{
    char path[32];
    (void) snprintf(path, sizeof path, "etc/%s", name);
    /* RESOLVE_IN_ROOT: "..", absolute symlinks and the like stay beneath the sandbox's root;
     * RESOLVE_NO_MAGICLINKS: no /proc/self/fd/N jump out of it; O_NONBLOCK: a FIFO opens at once. */
    struct open_how how = {.flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    _cleanup_close_ int fd = cdn_openat2(root_fd, path, &how);
    if (fd < 0 && errno == ENOENT) {
        *ret = NULL;
        *ret_len = 0;
        return 0;
    }
    if (fd < 0)
        return cdn_error_field(err, errno, "user", "user: open the sandbox's /etc/%s: %m", name);
    struct stat st;
    struct statfs fs;
    if (fstat(fd, &st) < 0 || fstatfs(fd, &fs) < 0)
        return cdn_error_field(err, errno, "user", "user: stat the sandbox's /etc/%s: %m", name);
    if (!S_ISREG(st.st_mode))
        return cdn_error_field(err, EPERM, "user", "user: the sandbox's /etc/%s is not a regular file", name);
    if (fs.f_type == PROC_SUPER_MAGIC || fs.f_type == SYSFS_MAGIC)
        return cdn_error_field(err, EPERM, "user", "user: the sandbox's /etc/%s is on procfs or sysfs", name);
    if (st.st_size > (off_t) CDN_USER_FILE_MAX)
        return cdn_error_field(err, EFBIG, "user", "user: /etc/%s is over %u MiB", name,
                               CDN_USER_FILE_MAX >> 20);
    /* A regular file: reads do not block; clear O_NONBLOCK anyway for file systems that honour it. */
    (void) fcntl(fd, F_SETFL, 0);
    return read_bounded(fd, name, ret, ret_len, err);
}

int cdn_user_resolve_at(int root_fd, const char *spec, uint32_t id_max, struct cdn_user *ret,
                        struct cdn_error *err)
{
    _cleanup_free_ char *passwd = NULL, *group = NULL;
    struct cdn_user_db db = {0};
    int numeric = cdn_user_numeric(spec);
    if (numeric < 0)
        return cdn_user_check(spec, err);
    int r = cdn_user_read_file(root_fd, "passwd", &passwd, &db.passwd_len, err);
    if (r >= 0)
        r = cdn_user_read_file(root_fd, "group", &group, &db.group_len, err);
    if (r < 0 && !numeric)
        return r;
    if (r < 0) {
        /* Numeric ids are exact and need no file: a hostile /etc/passwd costs them the home and the
         * supplementary groups, not the command. */
        free(TAKE_PTR(passwd));
        free(TAKE_PTR(group));
        db.passwd_len = db.group_len = 0;
        if (err)
            *err = (struct cdn_error){0};
    }
    db.passwd = passwd;
    db.group = group;
    return cdn_user_resolve(spec, &db, id_max, ret, err);
}

int cdn_user_map_max(const char *map, uint32_t *ret_max)
{
    unsigned long inside, outside, count;
    const char *p = map;
    while (p && *p) {
        if (sscanf(p, "%lu %lu %lu", &inside, &outside, &count) == 3 && inside == 0 && count > 0) {
            *ret_max = count - 1 > CDN_USER_ID_MAX ? CDN_USER_ID_MAX : (uint32_t) (count - 1);
            return 0;
        }
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    return -EINVAL;
}

static int by_id(const void *a, const void *b)
{
    const struct cdn_user_name *x = a, *y = b;
    return x->id != y->id ? (x->id < y->id ? -1 : 1) : (x->line > y->line) - (x->line < y->line);
}

int cdn_user_names_parse(const char *file, size_t len, struct cdn_user_names *ret)
{
    struct cdn_user_names n = {0};
    size_t off = 0, cap = 0;
    struct span line;
    for (uint32_t k = 0; n.n < CDN_USER_NAMES_MAX && next_line(file, len, &off, &line) > 0; k++) {
        struct span f[3] = {{0}};
        uint32_t id;
        if (split_fields(line, f, 3) < 3 || parse_id(f[2], CDN_USER_ID_MAX, &id) < 0 || !f[0].n ||
            f[0].n >= sizeof n.v[0].name || memchr(f[0].p, 0, f[0].n)) /* a NUL would cut it short */
            continue;
        if (n.n == cap) {
            cap = cap ? cap * 2 : 64;
            struct cdn_user_name *v = realloc(n.v, cap * sizeof *v);
            if (!v) {
                free(n.v);
                return -ENOMEM;
            }
            n.v = v;
        }
        n.v[n.n] = (struct cdn_user_name){.id = id, .line = k};
        memcpy(n.v[n.n].name, f[0].p, f[0].n);
        n.v[n.n++].name[f[0].n] = 0;
    }
    if (n.n)
        qsort(n.v, n.n, sizeof *n.v, by_id);
    size_t w = 0; /* the first line of each id */
    for (size_t i = 0; i < n.n; i++)
        if (!w || n.v[w - 1].id != n.v[i].id)
            n.v[w++] = n.v[i];
    n.n = w;
    *ret = n;
    return 0;
}

const char *cdn_user_names_find(const struct cdn_user_names *n, uint32_t id)
{
    size_t lo = 0, hi = n->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (n->v[mid].id == id)
            return n->v[mid].name;
        if (n->v[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

void cdn_user_names_free(struct cdn_user_names *n)
{
    free(n->v);
    *n = (struct cdn_user_names){0};
}
