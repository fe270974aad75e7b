/* A command's user, Docker's way: "name", "uid", "name:group", "uid:gid", names looked up in the
 * sandbox's own /etc/passwd and /etc/group (never the host's). Everything in those files is the
 * sandbox's and so hostile: the parser is bounded (CDN_USER_FILE_MAX bytes, CDN_USER_LINE_MAX per
 * line, CDN_USER_MAX_GROUPS groups, ids 0..id_max) and fuzzed (tests/fuzz/fuzz-user.c).
 * Errors name the field "user". */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "shared/error.h"

#define CDN_USER_FILE_MAX   (16u << 20)
#define CDN_USER_LINE_MAX   4096u
#define CDN_USER_MAX_GROUPS 64u
#define CDN_USER_ID_MAX     65535u
#define CDN_USER_SPEC_MAX   255u

struct cdn_user {
    uint32_t uid, gid;
    uint32_t n_groups; /* supplementary groups, the primary gid first */
    uint32_t groups[CDN_USER_MAX_GROUPS];
    char home[256]; /* the passwd entry's home, "" when the uid has none */
};

/* The contents of /etc/passwd and /etc/group; NULL (or len 0) for a file that is not there. */
struct cdn_user_db {
    const char *passwd;
    size_t passwd_len;
    const char *group;
    size_t group_len;
};

/* Syntax alone ("name", "uid", "name:group", "uid:gid"; names [A-Za-z0-9_.-], not starting with '-';
 * numbers <= CDN_USER_ID_MAX): what the daemon checks before any file is read. -EINVAL. */
int cdn_user_check(const char *spec, struct cdn_error *err);

/* Whether spec is numeric only ("uid" or "uid:gid"): resolved without reading any file. */
int cdn_user_numeric(const char *spec);

/* Resolve spec against db, every id <= id_max (the sandbox's uid_map range). A numeric uid without a
 * passwd entry gets gid 0 unless spec names a group, and no home (Docker's rule). Errors: -EINVAL
 * (syntax, a malformed entry that spec needs), -ENOENT (unknown name), -ERANGE (id over id_max),
 * -E2BIG (a line over CDN_USER_LINE_MAX, more than CDN_USER_MAX_GROUPS groups). */
int cdn_user_resolve(const char *spec, const struct cdn_user_db *db, uint32_t id_max, struct cdn_user *ret,
                     struct cdn_error *err);

/* Read root_fd's etc/passwd or etc/group (name: "passwd" or "group") into *ret (malloc'd, NUL-terminated,
 * *ret = NULL and 0 when the file does not exist). openat2 with RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS
 * and O_NONBLOCK: a symlink cannot leave root_fd, a FIFO does not block; anything but a regular file,
 * a file on procfs or sysfs, or one over CDN_USER_FILE_MAX is refused (-EPERM, -EFBIG). */
int cdn_user_read_file(int root_fd, const char *name, char **ret, size_t *ret_len, struct cdn_error *err);

/* Both files of root_fd, then cdn_user_resolve (a numeric spec reads none). */
int cdn_user_resolve_at(int root_fd, const char *spec, uint32_t id_max, struct cdn_user *ret,
                        struct cdn_error *err);

/* The names of ids in the text of a passwd or group file (len bytes; NULL: none), for entries'
 * owners: the first field of the first line whose third field is the id. Bounded for a hostile file:
 * its first CDN_USER_NAMES_MAX entries, names under 33 bytes, lines within CDN_USER_LINE_MAX (the
 * rest are not known: a caller shows the number). Parse: 0 or -ENOMEM; find: NULL when not known. */
#define CDN_USER_NAMES_MAX 4096u
struct cdn_user_name {
    uint32_t id, line;
    char name[33];
};
struct cdn_user_names {
    size_t n;
    struct cdn_user_name *v; /* sorted by id, one each */
};
int cdn_user_names_parse(const char *file, size_t len, struct cdn_user_names *ret);
const char *cdn_user_names_find(const struct cdn_user_names *n, uint32_t id);
void cdn_user_names_free(struct cdn_user_names *n);

/* The highest id mapped from 0 on without a gap in a uid_map/gid_map text ("0 base count" lines);
 * -EINVAL when 0 is not mapped. */
int cdn_user_map_max(const char *map, uint32_t *ret_max);
