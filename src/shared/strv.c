/* shared/strv.h */
#include "strv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int cdn_strv_push(struct cdn_strv *l, const char *s)
{
    if (l->n >= CDN_STRV_MAX)
        return -E2BIG;
    char *copy = strdup(s);
    char **v = realloc(l->v, (l->n + 2) * sizeof(char *));
    if (!copy || !v) {
        free(copy);
        if (v)
            l->v = v;
        return -ENOMEM;
    }
    v[l->n++] = copy;
    v[l->n] = NULL;
    l->v = v;
    return 0;
}

void cdn_strv_free(struct cdn_strv *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}
