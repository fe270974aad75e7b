/* A NULL-terminated, counted list of strings (argv, env, the spec's lists), owned by its holder. */
#pragma once

#include <stddef.h>

struct cdn_strv {
    char **v; /* NULL-terminated; NULL while empty */
    size_t n;
};

#define CDN_STRV_MAX 1024 /* entries: more is -E2BIG (a spec's lists are bounded by it) */

/* Append a copy of s. 0, -E2BIG past CDN_STRV_MAX, -ENOMEM. */
int cdn_strv_push(struct cdn_strv *l, const char *s);
/* Free every string and the array; l is empty after (NULL-safe for an empty list). */
void cdn_strv_free(struct cdn_strv *l);
