/* Bind sources: see bind-policy.h for where this runs and what it trusts. */
#include "bind-policy.h"
#include "paths.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef NSFS_MAGIC
#define NSFS_MAGIC 0x6e736673
#endif

/* Resolved when it exists; else as given, without trailing slashes. */
static char *resolve_or_keep(const char *path)
{
    char *r = realpath(path, NULL);
    if (r || errno == ENOMEM)
        return r;
    char *copy = strdup(path);
    for (size_t n = copy ? strlen(copy) : 0; n > 1 && copy[n - 1] == '/'; n--)
        copy[n - 1] = 0;
    return copy;
}

int cdn_bind_policy_deny(struct cdn_bind_policy *p, const char *path)
{
    if (!path || path[0] != '/')
        return -EINVAL;
    if (p->n_deny >= CDN_BIND_RULES_MAX)
        return -E2BIG;
    char *r = resolve_or_keep(path);
    if (!r)
        return -ENOMEM;
    p->deny[p->n_deny++] = r;
    return 0;
}

int cdn_bind_policy_init(struct cdn_bind_policy *p)
{
    *p = (struct cdn_bind_policy){0};
    const char *fixed[] = {"/proc", "/sys", "/dev", "/var/lib/cordon", "/run/cordon"};
    const char *dirs[] = {cdn_state_dir(), cdn_run_dir(), cdn_vm_dir()};
    int r = 0;
    for (size_t i = 0; r >= 0 && i < ELEMENTSOF(fixed); i++)
        r = cdn_bind_policy_deny(p, fixed[i]);
    for (size_t i = 0; r >= 0 && i < ELEMENTSOF(dirs); i++)
        r = cdn_bind_policy_deny(p, dirs[i]);
    if (r < 0)
        cdn_bind_policy_free(p);
    return r;
}

void cdn_bind_policy_free(struct cdn_bind_policy *p)
{
    for (size_t i = 0; i < p->n_allow; i++)
        free(p->allow[i]);
    for (size_t i = 0; i < p->n_deny; i++)
        free(p->deny[i]);
    *p = (struct cdn_bind_policy){0};
}

int cdn_bind_policy_allow(struct cdn_bind_policy *p, const char *arg, struct cdn_error *err)
{
    char path[PATH_MAX];
    size_t n = strlen(arg);
    bool ro = n > 3 && strcmp(arg + n - 3, ":ro") == 0;
    if (ro)
        n -= 3;
    if (arg[0] != '/' || n >= sizeof path)
        return cdn_error_set(err, EINVAL, "bind-allow '%s': expected an absolute DIR or DIR:ro", arg);
    if (p->n_allow >= CDN_BIND_RULES_MAX)
        return cdn_error_set(err, E2BIG, "bind-allow: at most %d entries", CDN_BIND_RULES_MAX);
    memcpy(path, arg, n);
    path[n] = 0;
    char *r = realpath(path, NULL);
    if (!r)
        return cdn_error_set(err, errno, "bind-allow '%s': %m", path);
    p->allow[p->n_allow] = r;
    p->allow_ro[p->n_allow++] = ro;
    return 0;
}

/* path at or beneath dir (both resolved). */
static bool beneath(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    if (n == 1)
        return true; /* "/" */
    return strncmp(path, dir, n) == 0 && (path[n] == 0 || path[n] == '/');
}

/* The most specific allowed directory over path; -1 if none. "/" read-write when none is configured. */
static ssize_t allowed_by(const struct cdn_bind_policy *p, const char *path)
{
    ssize_t best = -1;
    for (size_t i = 0; i < p->n_allow; i++)
        if (beneath(path, p->allow[i]) && (best < 0 || strlen(p->allow[i]) > strlen(p->allow[best])))
            best = (ssize_t) i;
    return best;
}

static const char *kernel_fs(const char *path)
{
    struct statfs st;
    if (statfs(path, &st) < 0)
        return NULL; /* the tier's own open reports it */
    switch ((unsigned long) st.f_type) {
    case PROC_SUPER_MAGIC:
        return "proc";
    case SYSFS_MAGIC:
        return "sysfs";
    case NSFS_MAGIC:
        return "nsfs";
    default:
        return NULL;
    }
}

#define HIDDEN "kept from sandboxes (cordon's own, or the host kernel's)"

/* src: the resolved source; shown: how to name it in a message (the spec's, and the resolved one
 * when they differ). */
static int judge(const struct cdn_bind_policy *p, const char *src, const char *shown, bool readonly,
                 const char *field, struct cdn_error *err)
{
    ssize_t a = allowed_by(p, src);
    const char *dir = p->n_allow == 0 ? "/" : a >= 0 ? p->allow[a] : NULL;
    if (!dir)
        return cdn_error_field(err, EACCES, field, "%s: %s is not at or beneath a directory bind-allow names",
                               field, shown);
    for (size_t i = 0; i < p->n_deny; i++) {
        const char *d = p->deny[i];
        if (beneath(d, src) && strcmp(d, src) != 0)
            return cdn_error_field(err, EACCES, field, "%s: %s contains %s, " HIDDEN, field, shown, d);
        if (beneath(src, d) && !beneath(dir, d))
            return cdn_error_field(err, EACCES, field,
                                   "%s: %s %s %s, " HIDDEN "; only a bind-allow entry there allows it", field,
                                   shown, strcmp(src, d) == 0 ? "is" : "lies beneath", d);
    }
    const char *fs = kernel_fs(src);
    if (fs)
        return cdn_error_field(err, EACCES, field, "%s: %s is on a %s filesystem, which is never bound",
                               field, shown, fs);
    if (!readonly && a >= 0 && p->allow_ro[a])
        return cdn_error_field(err, EACCES, field, "%s: %s may be bound read-only only (bind-allow %s:ro)",
                               field, shown, dir);
    return 0;
}

int cdn_bind_policy_check(const struct cdn_bind_policy *p, struct cdn_spec *spec, struct cdn_error *err)
{
    for (size_t i = 0; i < spec->n_mounts; i++) {
        struct cdn_mount *m = &spec->mounts[i];
        char field[48];
        (void) snprintf(field, sizeof field, "mounts[%zu].source", i);
        char *src = realpath(m->source, NULL);
        if (!src)
            return errno == ENOMEM ? -ENOMEM
                                   : cdn_error_field(err, errno, field, "%s: '%s': %m", field, m->source);
        char shown[300];
        if (strcmp(src, m->source) == 0)
            (void) snprintf(shown, sizeof shown, "'%.200s'", src);
        else
            (void) snprintf(shown, sizeof shown, "'%.120s' (%.120s)", m->source, src);
        int r = judge(p, src, shown, m->readonly, field, err);
        if (r < 0) {
            free(src);
            return r;
        }
        free(m->source);
        m->source = src;
    }
    return 0;
}

int cdn_bind_policy_check_image(const struct cdn_bind_policy *p, struct cdn_spec *spec, struct cdn_error *err)
{
    if (!spec->image || spec->image[0] != '/')
        return 0; /* "host", or a name the image store resolves */
    char *src = realpath(spec->image, NULL);
    if (!src)
        return errno == ENOMEM ? -ENOMEM
                               : cdn_error_field(err, errno, "image", "image: '%s': %m", spec->image);
    char shown[300];
    (void) snprintf(shown, sizeof shown, "'%.200s'", spec->image);
    int r = judge(p, src, shown, true, "image", err);
    if (r < 0) {
        free(src);
        return r;
    }
    free(spec->image);
    spec->image = src;
    return 0;
}

int cdn_bind_policy_check_path(const struct cdn_bind_policy *p, const char *path, const char *field,
                               struct cdn_error *err)
{
    _cleanup_free_ char *src = realpath(path, NULL);
    if (!src)
        return errno == ENOMEM ? -ENOMEM
                               : cdn_error_field(err, errno, field, "%s: '%.200s': %m", field, path);
    char shown[300];
    (void) snprintf(shown, sizeof shown, "'%.200s'", path);
    return judge(p, src, shown, true, field, err);
}

int cdn_bind_source_open(const char *source)
{
    struct open_how how = {.flags = O_PATH | O_CLOEXEC,
                           .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int fd = (int) syscall(SYS_openat2, AT_FDCWD, source, &how, sizeof how);
    return fd < 0 ? -errno : fd;
}
