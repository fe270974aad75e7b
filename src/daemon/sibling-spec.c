/* cordond: the spec of a verifier's clean sibling (api-sibling.c) — the sandbox's own, but for
 * its read-write binds, which the agent wrote: of those the sibling gets only the protected
 * parts, bound read-only.
 *
 * Runs in the loop, on host paths the operator gave (the binds' sources), inside directories the
 * agent may write: every path is opened beneath its bind's source without following a symlink,
 * and must be the very object protected when the sandbox was made (recorded then), so that
 * neither a symlink nor a directory moved in on the host (by another sandbox that binds it too)
 * ends up in the sibling as a protected path. */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/json-util.h"
#include "core/protect.h"
#include "registry.h"
#include "shared/fd-util.h"

/* rel (beneath the bind source rootfd; "" for the source itself) without a symlink. */
static int open_plain(int rootfd, const char *rel)
{
    if (!rel[0])
        return fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
    struct open_how how = {.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
    int fd = (int) syscall(SYS_openat2, rootfd, rel[0] == '/' ? rel + 1 : rel, &how, sizeof how);
    return fd < 0 ? -errno : fd;
}

static int add_source(struct box *b, const struct cdn_mount *m, const char *rel, int rootfd)
{
    struct protected_src *v = realloc(b->psrc, (b->n_psrc + 1) * sizeof *v);
    if (!v)
        return -ENOMEM;
    b->psrc = v;
    struct protected_src *p = &v[b->n_psrc];
    *p = (struct protected_src){.mount = (size_t) (m - b->spec.mounts)};
    if (!(p->rel = strdup(rel)))
        return -ENOMEM;
    b->n_psrc++;
    /* Reached only through a symlink (the operator's): no identity, the step refuses it. */
    _cleanup_close_ int fd = open_plain(rootfd, rel);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0)
        p->dev = st.st_dev, p->ino = st.st_ino, p->plain = true;
    return 0;
}

struct expand_ctx {
    struct box *b;
    const struct cdn_mount *m;
    int rootfd;
};

static int expanded(void *ud, const char *path, int fd)
{
    (void) fd;
    struct expand_ctx *c = ud;
    return add_source(c->b, c->m, path[1] ? path : "", c->rootfd);
}

/* Up to max components of path, in place (path is cut); returns how many. */
static size_t split(char *path, char **comp, size_t max)
{
    size_t n = 0;
    char *save = NULL;
    for (char *c = strtok_r(path, "/", &save); c && n < max; c = strtok_r(NULL, "/", &save))
        comp[n++] = c;
    return n;
}

/* What pattern names beneath the read-write bind m, recorded in b. */
static int note_pattern(struct box *b, const struct cdn_mount *m, const char *pattern)
{
    char pat[1100], tgt[4200], *pc[300], *tc[300];
    (void) snprintf(pat, sizeof pat, "%s", pattern);
    size_t pl = strlen(pat);
    if (pl >= 3 && strcmp(pat + pl - 3, "/**") == 0)
        pat[pl - 3] = 0;
    (void) snprintf(tgt, sizeof tgt, "%s", m->target);
    size_t np = split(pat, pc, 300), nt = split(tgt, tc, 300);
    for (size_t i = 0; i < nt && i < np; i++)
        if (fnmatch(pc[i], tc[i], FNM_PERIOD) != 0)
            return 0; /* not beneath this bind */
    _cleanup_close_ int rootfd = open(m->source, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return -errno;
    if (np <= nt) /* the whole bind lies within a protected path */
        return add_source(b, m, "", rootfd);
    char rel[1100] = "";
    for (size_t i = nt; i < np; i++)
        (void) snprintf(rel + strlen(rel), sizeof rel - strlen(rel), "/%s", pc[i]);
    struct expand_ctx c = {b, m, rootfd};
    int r = cdn_protect_expand(rootfd, rel, expanded, &c);
    return r == -ENOENT ? 0 : r; /* a pattern that names nothing there names it elsewhere */
}

void cdn_sibling_sources_free(struct box *b)
{
    for (size_t i = 0; i < b->n_psrc; i++)
        free(b->psrc[i].rel);
    free(b->psrc);
    b->psrc = NULL;
    b->n_psrc = 0;
    b->psrc_noted = false;
}

int cdn_sibling_sources_note(struct box *b)
{
    cdn_sibling_sources_free(b);
    int r = 0;
    for (size_t i = 0; r >= 0 && i < b->spec.n_mounts; i++)
        for (size_t k = 0; r >= 0 && !b->spec.mounts[i].readonly && k < b->spec.protect.n; k++)
            r = note_pattern(b, &b->spec.mounts[i], b->spec.protect.v[k]);
    if (r < 0) {
        cdn_sibling_sources_free(b);
        return r;
    }
    b->psrc_noted = true;
    return 0;
}

/* Each recorded protected part of a read-write bind, still the object it was, into mounts. */
static int add_protected_binds(const struct box *b, json_t *mounts, struct cdn_error *err)
{
    for (size_t i = 0; i < b->n_psrc; i++) {
        const struct protected_src *p = &b->psrc[i];
        const struct cdn_mount *m = &b->spec.mounts[p->mount];
        _cleanup_close_ int rootfd = open(m->source, O_PATH | O_DIRECTORY | O_CLOEXEC);
        _cleanup_close_ int fd = rootfd < 0 ? -errno : open_plain(rootfd, p->rel);
        struct stat st;
        if (!p->plain)
            return cdn_error_set(err, ELOOP, "protected path %s%s: its host path %s%s goes through a symlink",
                                 m->target, p->rel, m->source, p->rel);
        if (fd < 0 || fstat(fd, &st) < 0 || st.st_dev != p->dev || st.st_ino != p->ino)
            return cdn_error_set(err, ESTALE,
                                 "protected path %s%s: its host path %s%s is not what was protected when the "
                                 "sandbox was made (moved aside on the host)",
                                 m->target, p->rel, m->source, p->rel);
        char src[4200], dst[4200];
        (void) snprintf(src, sizeof src, "%s%s", m->source, p->rel);
        (void) snprintf(dst, sizeof dst, "%s%s", m->target, p->rel);
        json_array_append_new(mounts,
                              json_pack("{s:s, s:s, s:b}", "source", src, "target", dst, "readonly", 1));
    }
    return 0;
}

int cdn_sibling_spec(struct box *b, struct cdn_spec *ret, struct cdn_error *err)
{
    /* A sandbox a restarted cordond adopted has no record of creation: what is there now. */
    int r = b->psrc_noted ? 0 : cdn_sibling_sources_note(b);
    if (r < 0)
        return cdn_error_set(err, -r, "the protected parts of its read-write binds: %s", strerror(-r));
    _cleanup_free_ char *text = cdn_spec_to_json(&b->spec);
    _cleanup_json_ json_t *o = text ? json_loads(text, 0, NULL) : NULL;
    _cleanup_json_ json_t *mounts = json_array();
    json_t *labels = o ? json_object_get(o, "labels") : NULL;
    r = o && mounts && json_is_object(labels) ? 0 : cdn_error_set(err, ENOMEM, "out of memory");
    for (size_t i = 0; r == 0 && i < b->spec.n_mounts; i++) {
        const struct cdn_mount *m = &b->spec.mounts[i];
        if (m->readonly)
            json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "source", m->source, "target",
                                                    m->target, "readonly", 1));
    }
    if (r == 0)
        r = add_protected_binds(b, mounts, err);
    if (r == 0) {
        /* Its system directories stay the image's, read-only: what the grader runs is the image's,
         * whatever the agent installed in its own (and so the step's check passes there). */
        json_object_del(o, "writable_system");
        json_object_del(o, "trajectory"); /* its step is the sandbox's, recorded there */
        json_object_del(o, "checkpoint"); /* a fresh sandbox of the image, not the agent's files */
        json_object_del(o, "checkpoints");
        json_object_del(json_object_get(o, "limits"), "idle_timeout_s"); /* it runs one step, then goes */
        json_object_set(o, "mounts", mounts);
        json_object_set_new(labels, SIBLING_LABEL, json_string(b->sb.id));
        _cleanup_free_ char *s = json_dumps(o, JSON_COMPACT);
        bool made = s && cdn_spec_init(ret) == 0;
        r = !made ? cdn_error_set(err, ENOMEM, "out of memory") : cdn_spec_from_json(ret, s, strlen(s), err);
        if (r >= 0)
            r = cdn_spec_validate(ret, err);
        if (r < 0 && made)
            cdn_spec_free(ret);
    }
    return r < 0 ? r : 0;
}
