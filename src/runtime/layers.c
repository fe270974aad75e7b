/* The layers of a bundle's root when its engine mounted it as an overlay (layers.h). Runs in
 * cordon-runtime on the host as root; reads the kernel's mount table, which the engine (trusted)
 * made: the layers are checked to be directories on one mount under their common directory, since
 * only that one mount is idmapped for the container (tiers/container/root-layers.c). */
#include "runtime/layers.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shared/fd-util.h"
#include "shared/macro.h"

void cdn_rt_layers_free(struct cdn_root_layers *l)
{
    for (size_t i = 0; i < l->n_lower; i++)
        free(l->lower[i]);
    free(l->upper);
    free(l->work);
    *l = (struct cdn_root_layers){0};
}

/* The value of key= in a comma-separated option list (malloc'd), or NULL. */
static char *option(const char *opts, const char *key)
{
    size_t k = strlen(key);
    for (const char *p = opts; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t) (end - p) : strlen(p);
        if (n > k && strncmp(p, key, k) == 0 && p[k] == '=')
            return strndup(p + k + 1, n - k - 1);
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

int cdn_rt_overlay_options(const char *opts, struct cdn_rt_overlay *ret, struct cdn_error *err)
{
    *ret = (struct cdn_rt_overlay){0};
    if (strchr(opts, '\\'))
        return cdn_error_field(err, EINVAL, "root.path",
                               "root.path: an overlay whose layer paths hold escaped characters");
    ret->lowerdir = option(opts, "lowerdir");
    ret->upperdir = option(opts, "upperdir");
    ret->workdir = option(opts, "workdir");
    if (!ret->lowerdir || !*ret->lowerdir || !ret->upperdir != !ret->workdir)
        return cdn_error_field(
            err, EINVAL, "root.path",
            "root.path: an overlay without lowerdir, or with only one of upperdir and workdir");
    for (const char *p = opts; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if ((strncmp(p, "volatile", 8) == 0 && (p[8] == ',' || !p[8])) ||
            (strncmp(p, "fsync=volatile", 14) == 0 && (p[14] == ',' || !p[14]))) /* newer kernels' spelling */
            ret->volatile_upper = true;
    _cleanup_free_ char *mc = option(opts, "metacopy"), *rd = option(opts, "redirect_dir");
    if ((mc && strlen(mc) >= sizeof ret->metacopy) || (rd && strlen(rd) >= sizeof ret->redirect_dir))
        return cdn_error_field(err, EINVAL, "root.path",
                               "root.path: an overlay with an unknown metacopy or redirect_dir");
    (void) snprintf(ret->metacopy, sizeof ret->metacopy, "%s", mc ? mc : "");
    (void) snprintf(ret->redirect_dir, sizeof ret->redirect_dir, "%s", rd ? rd : "");
    if (strstr(ret->lowerdir, "::"))
        return cdn_error_field(err, EINVAL, "root.path", "root.path: an overlay with data-only layers");
    return 0;
}

void cdn_rt_overlay_free(struct cdn_rt_overlay *o)
{
    free(o->lowerdir);
    free(o->upperdir);
    free(o->workdir);
    *o = (struct cdn_rt_overlay){0};
}

/* The super options of the overlay mounted at path (the last mount there), in buf; 0 when the
 * mount there is not an overlay (or none is). */
static int super_options(const char *path, char *buf, size_t size)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -errno;
    char line[16384];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        /* id parent major:minor root mountpoint options [optional…] - fstype source super */
        char mp[4096];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1 || strcmp(mp, path) != 0)
            continue;
        const char *sep = strstr(line, " - ");
        char type[64], super[12288];
        found = 0;
        if (sep && sscanf(sep + 3, "%63s %*s %12287s", type, super) == 2 && strcmp(type, "overlay") == 0 &&
            strlen(super) < size) {
            memcpy(buf, super, strlen(super) + 1);
            found = 1;
        }
    }
    (void) fclose(f);
    return found;
}

/* A layer that cannot be resolved. Not in the words the engines map to "command not found" (podman
 * takes "no such file or directory" in a create's error for exit status 127). */
static int unresolved(const char *dir, int errnum, struct cdn_error *err)
{
    return cdn_error_field(err, errnum, "root.path", "root.path: overlay layer %s %s", dir,
                           errnum == ENOENT ? "is missing" : "cannot be resolved");
}

/* dir's real path, relative to base (which it must be under, on base's mount). */
static int relative(const char *dir, const char *base, dev_t dev, char **ret, struct cdn_error *err)
{
    char real[4096];
    struct stat st;
    size_t n = strlen(base);
    if (!realpath(dir, real) || stat(real, &st) < 0)
        return unresolved(dir, errno, err);
    if (strncmp(real, base, n) != 0 || real[n] != '/' || !S_ISDIR(st.st_mode) || st.st_dev != dev)
        return cdn_error_field(err, EXDEV, "root.path",
                               "root.path: overlay layer %s is not a directory of %s's file system", dir,
                               base);
    return (*ret = strdup(real + n + 1)) ? 0 : -ENOMEM;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void) st, (void) ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT ? -1 : 0;
}

/* The new overlay's own work directory, beside the upper: the engine's is in use by its mount, and
 * one a volatile mount used can never be mounted again (the kernel's incompat/volatile mark). Made
 * empty at each create; the engine removes it with the layer's directory. */
static int own_workdir(struct cdn_root_layers *l, struct cdn_error *err)
{
    const char *slash = strrchr(l->upper, '/');
    int n = slash ? (int) (slash - l->upper) + 1 : 0; /* the upper's parent, with its '/' */
    if (asprintf(&l->work, "%.*s%s", n, l->upper, CDN_ROOT_WORKDIR) < 0) {
        l->work = NULL;
        return -ENOMEM;
    }
    char path[8400];
    (void) snprintf(path, sizeof path, "%s/%s", l->base, l->work);
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
        return cdn_error_field(err, errno, "root.path", "root.path: empty %s: %m", path);
    if (mkdir(path, 0700) < 0)
        return cdn_error_field(err, errno, "root.path", "root.path: mkdir %s: %m", path);
    return 0;
}

/* The longest directory all of a, b share. */
static void common_dir(char *a, const char *b)
{
    size_t i = 0, cut = 0;
    for (; a[i] && a[i] == b[i]; i++)
        if (a[i] == '/')
            cut = i;
    if (!a[i] && (b[i] == '/' || !b[i]))
        return;
    if (!b[i] && a[i] == '/')
        cut = i;
    a[cut ? cut : 1] = 0;
}

/* A layer path of the mount's options, absolute: containers/storage gives them relative to its
 * overlay home (the parent of <id>/merged, the root) when absolute ones would not fit the page
 * mount(2) takes. */
static char *absolute(const char *d, const char *home)
{
    char *out = NULL;
    return asprintf(&out, "%s%s%s", d[0] == '/' ? "" : home, d[0] == '/' ? "" : "/", d) < 0 ? NULL : out;
}

static int split_absolute(const struct cdn_rt_overlay *o, struct cdn_root_layers *ret, struct cdn_error *err)
{
    char real[4096];
    char *dirs[CDN_ROOT_LAYERS_MAX + 2];
    size_t n = 0;
    _cleanup_free_ char *lower = strdup(o->lowerdir);
    if (!lower)
        return -ENOMEM;
    for (char *save = NULL, *d = strtok_r(lower, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        if (n == CDN_ROOT_LAYERS_MAX)
            return cdn_error_field(err, E2BIG, "root.path", "root.path: an overlay of more than %d layers",
                                   CDN_ROOT_LAYERS_MAX);
        dirs[n++] = d;
    }
    ret->base[0] = 0;
    for (size_t i = 0; i < n + (o->upperdir ? 2 : 0); i++) {
        const char *d = i < n ? dirs[i] : i == n ? o->upperdir : o->workdir;
        if (!realpath(d, real))
            return unresolved(d, errno, err);
        char *slash = strrchr(real, '/'); /* its parent: a layer is never the base itself */
        if (slash)
            *(slash == real ? slash + 1 : slash) = 0;
        if (!ret->base[0])
            memcpy(ret->base, real, strlen(real) + 1);
        else
            common_dir(ret->base, real);
    }
    struct stat st;
    if (stat(ret->base, &st) < 0)
        return cdn_error_field(err, errno, "root.path", "root.path: %s: %m", ret->base);
    int r = 0;
    for (size_t i = 0; r >= 0 && i < n; i++)
        if ((r = relative(dirs[i], ret->base, st.st_dev, &ret->lower[i], err)) >= 0)
            ret->n_lower = i + 1;
    if (r >= 0 && o->upperdir && (r = relative(o->upperdir, ret->base, st.st_dev, &ret->upper, err)) >= 0)
        r = own_workdir(ret, err);
    return r;
}

/* A layer that was one of containers/storage's idmapped views (a container with its own id range, on
 * a kernel with idmapped mounts): <home>/<id>/mapped/<n>/<rest> is <home>/<rest> seen through an
 * idmapped mount it took away once its overlay held the layers. *ret: that path; NULL if a is not one. */
static int unmapped(const char *a, const char *home, char **ret)
{
    size_t hl = strlen(home);
    const char *m = strncmp(a, home, hl) == 0 && a[hl] == '/' ? strstr(a + hl + 1, "/mapped/") : NULL;
    const char *slash = m ? strchr(a + hl + 1, '/') : NULL;
    size_t digits = m ? strspn(m + 8, "0123456789") : 0;
    *ret = NULL;
    if (!m || slash != m || !digits || m[8 + digits] != '/' || access(a, F_OK) == 0)
        return 0;
    return asprintf(ret, "%s/%s", home, m + 8 + digits + 1) < 0 ? (*ret = NULL, -ENOMEM) : 1;
}

/* o's layer paths made absolute against home (absolute()), and the engine's idmapped views of them
 * undone (unmapped()). */
static int absolute_options(const struct cdn_rt_overlay *o, const char *home, struct cdn_rt_overlay *ret)
{
    _cleanup_free_ char *lower = strdup(o->lowerdir);
    size_t cap = strlen(o->lowerdir) * 2 + 4096, n = 0;
    if (!lower || !(ret->lowerdir = calloc(1, cap)))
        return -ENOMEM;
    for (char *save = NULL, *d = strtok_r(lower, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        _cleanup_free_ char *a = absolute(d, home), *real = NULL;
        int u = a ? unmapped(a, home, &real) : -ENOMEM;
        if (u < 0)
            return u;
        if (u > 0) {
            free(a);
            a = TAKE_PTR(real);
            ret->lowers_from_zero = true;
        }
        if (!a || n + strlen(a) + 2 > cap)
            return -ENOMEM;
        n += (size_t) snprintf(ret->lowerdir + n, cap - n, "%s%s", n ? ":" : "", a);
    }
    if (o->upperdir &&
        (!(ret->upperdir = absolute(o->upperdir, home)) || !(ret->workdir = absolute(o->workdir, home))))
        return -ENOMEM;
    return 0;
}

static int split_layers(const struct cdn_rt_overlay *given, const char *home, struct cdn_root_layers *ret,
                        struct cdn_error *err)
{
    struct cdn_rt_overlay abs = {0};
    int r = absolute_options(given, home, &abs);
    if (r >= 0)
        r = split_absolute(&abs, ret, err);
    ret->lowers_from_zero = abs.lowers_from_zero;
    cdn_rt_overlay_free(&abs);
    return r;
}

int cdn_rt_root_layers(const char *root, struct cdn_root_layers *ret, struct cdn_error *err)
{
    *ret = (struct cdn_root_layers){0};
    char real[4096];
    if (!realpath(root, real))
        return unresolved(root, errno, err);
    static char super[12288];
    char home[4096]; /* containers/storage's overlay home: the parent of <id>/merged */
    (void) snprintf(home, sizeof home, "%s", real);
    for (int k = 0; k < 2; k++) {
        char *slash = strrchr(home, '/');
        if (slash)
            *(slash == home ? slash + 1 : slash) = 0;
    }
    int r = super_options(real, super, sizeof super);
    if (r <= 0)
        return r < 0 ? cdn_error_set(err, -r, "read /proc/self/mountinfo: %s", strerror(-r)) : 0;
    struct cdn_rt_overlay o;
    r = cdn_rt_overlay_options(super, &o, err);
    if (r >= 0)
        r = split_layers(&o, home, ret, err);
    ret->volatile_upper = o.volatile_upper;
    memcpy(ret->metacopy, o.metacopy, sizeof o.metacopy);
    memcpy(ret->redirect_dir, o.redirect_dir, sizeof o.redirect_dir);
    cdn_rt_overlay_free(&o);
    if (r < 0) {
        cdn_rt_layers_free(ret);
        return r;
    }
    return 1;
}
