/* SPDX-License-Identifier: see repository LICENSE */
/* The setup child's arguments as bytes (container-internal.h cdn_setup_args_pack): what cordon-setup
 * reads, since it runs in a process of its own rather than in a copy of its parent's memory.
 *
 * Fields in a fixed order: integers as 8 little-endian bytes, strings and byte strings as their
 * length (8 bytes; ~0 for NULL) and their bytes, lists as their count and their items. Only the
 * fields the setup child reads are there (of the spec: what setup.c, rootfs.c and engine-bundle.c
 * read of it); the others are zero on the other side. The bytes come from cordon itself, never
 * from a sandbox; the reader still checks every length against what is left. */
#include "container-internal.h"
#include "confine/seccomp-policy.h"
#include "shared/fd-util.h"

#include <errno.h>
#include <linux/filter.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define ARGS_MAGIC 0x63646e7375703032ULL /* "cdnsup02" */
#define NONE       UINT64_MAX

struct out {
    uint8_t *p;
    size_t len, cap;
    bool failed;
};

static void put(struct out *o, const void *data, size_t n)
{
    if (o->failed)
        return;
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + n)
            cap *= 2;
        uint8_t *p = realloc(o->p, cap);
        if (!p) {
            o->failed = true;
            return;
        }
        o->p = p, o->cap = cap;
    }
    memcpy(o->p + o->len, data, n);
    o->len += n;
}

static void put_u64(struct out *o, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t) (v >> (8 * i));
    put(o, b, sizeof b);
}

static void put_bytes(struct out *o, const void *data, size_t n)
{
    put_u64(o, data ? n : NONE);
    if (data)
        put(o, data, n);
}

static void put_str(struct out *o, const char *s)
{
    put_bytes(o, s, s ? strlen(s) : 0);
}

static void put_strv(struct out *o, char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    put_u64(o, v ? n : NONE);
    for (size_t i = 0; i < n; i++)
        put_str(o, v[i]);
}

static size_t prog_size(const struct cdn_seccomp_prog *p)
{
    return ((size_t) p->len[0] + p->len[1]) * sizeof(struct sock_filter);
}

uint64_t cdn_sigset_to_mask(const sigset_t *set)
{
    uint64_t mask = 0;
    for (int sig = 1; sig <= 64 && sig < NSIG; sig++)
        if (sigismember(set, sig) == 1)
            mask |= 1ULL << (sig - 1);
    return mask;
}

void cdn_sigset_from_mask(uint64_t mask, sigset_t *set)
{
    sigemptyset(set);
    for (int sig = 1; sig <= 64 && sig < NSIG; sig++)
        if (mask & (1ULL << (sig - 1)))
            (void) sigaddset(set, sig);
}

void cdn_setup_args_fds(struct cdn_setup_args *a, int *ret[CDN_SETUP_FDS])
{
    int *const fds[CDN_SETUP_FDS] = {&a->agent_fd,    &a->init_fd,   &a->err_fd,        &a->go_fd,
                                     &a->stdio_fd,    &a->listen_fd, &a->slot_fd,       &a->fanotify_fd,
                                     &a->writable_fd, &a->netns_fd,  &a->into_cgroup_fd};
    memcpy(ret, fds, sizeof fds);
}

int cdn_setup_args_pack(const struct cdn_setup_args *a, void **ret, size_t *ret_len)
{
    struct out o = {0};
    const struct cdn_spec *s = a->spec;
    put_u64(&o, ARGS_MAGIC);
    /* the spec */
    put_str(&o, s->hostname);
    put_str(&o, s->workdir);
    put_str(&o, s->user);
    put_u64(&o, s->writable_system);
    put_u64(&o, s->read_only_root);
    put_u64(&o, s->checkpoints); /* its layer is mounted again (rootfs.c: no volatile overlay) */
    put_u64(&o, s->limits.disk_mb);
    put_u64(&o, s->limits.ptys);
    put_u64(&o, s->limits.nofile);
    put_u64(&o, s->n_mounts);
    for (size_t i = 0; i < s->n_mounts; i++) {
        put_str(&o, s->mounts[i].source);
        put_str(&o, s->mounts[i].target);
        put_u64(&o, s->mounts[i].readonly | (uint64_t) s->mounts[i].nonrecursive << 1 |
                        (uint64_t) s->mounts[i].noexec << 2);
    }
    put_strv(&o, s->protect.v);
    /* the rest of the args */
    put_bytes(&o, a->image, sizeof *a->image);
    put_u64(&o, a->seccomp->len[0]);
    put_u64(&o, a->seccomp->len[1]);
    put_bytes(&o, a->seccomp->insns, prog_size(a->seccomp));
    put_str(&o, a->scratch);
    put_u64(&o, a->persistent);
    put_u64(&o, a->persistent && a->listen_fd >= 0); /* setup.c gives init these when persistent only */
    put_u64(&o, a->persistent && a->slot_fd >= 0);
    put_u64(&o, a->fanotify_fd >= 0);
    put_u64(&o, a->stdio_fd >= 0);
    put_u64(&o, a->writable_fd >= 0);
    put_u64(&o, a->cgroup ? a->cgroup->ops->version : NONE);
    put_str(&o, a->cgroup ? a->cgroup->name : NULL);
    put_u64(&o, a->netns_given);
    put_u64(&o, a->resolver_ip);
    put_u64(&o, a->root_in_place);
    put_bytes(&o, a->rlimits, a->rlimits ? sizeof(struct rlimit) * RLIM_NLIMITS : 0);
    put_strv(&o, a->sysctls);
    put_strv(&o, a->masked_paths);
    put_strv(&o, a->readonly_paths);
    put_u64(&o, a->n_fs_mounts);
    for (size_t i = 0; i < a->n_fs_mounts; i++) {
        put_str(&o, a->fs_mounts[i].type);
        put_str(&o, a->fs_mounts[i].destination);
        put_strv(&o, a->fs_mounts[i].options);
        put_u64(&o, a->fs_mounts[i].index);
    }
    put_bytes(&o, a->seccomp_extra, (size_t) a->seccomp_extra_len * sizeof(struct sock_filter));
    put_u64(&o, a->restored);
    put_u64(&o, a->uid_base);
    put_u64(&o, a->into_cgroup_fd >= 0);
    put_u64(&o, a->netns_fd >= 0);
    put_u64(&o, a->sigmask);
    put_u64(&o, ARGS_MAGIC);
    if (o.failed) {
        free(o.p);
        return -ENOMEM;
    }
    *ret = o.p;
    *ret_len = o.len;
    return 0;
}

/* ---- the reader (cordon-setup) ---- */

struct in {
    const uint8_t *p;
    size_t left;
    bool bad;
};

static uint64_t get_u64(struct in *in)
{
    if (in->bad || in->left < 8) {
        in->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t) in->p[i] << (8 * i);
    in->p += 8, in->left -= 8;
    return v;
}

static bool get_flag(struct in *in)
{
    return get_u64(in) != 0;
}

/* n bytes and a NUL after them, copied; NULL for NONE (or when bad: check in->bad). */
static void *get_bytes(struct in *in, size_t *ret_n)
{
    uint64_t n = get_u64(in);
    if (in->bad || n == NONE)
        return NULL;
    if (n > in->left) {
        in->bad = true;
        return NULL;
    }
    char *p = malloc(n + 1);
    if (!p) {
        in->bad = true;
        return NULL;
    }
    memcpy(p, in->p, n);
    p[n] = 0;
    in->p += n, in->left -= n;
    if (ret_n)
        *ret_n = n;
    return p;
}

static char *get_str(struct in *in)
{
    size_t n = 0;
    char *s = get_bytes(in, &n);
    if (s && strlen(s) != n) /* a NUL inside */
        in->bad = true;
    return s;
}

/* A count that cannot be more than what is left (each item takes 8 bytes at least). */
static size_t get_count(struct in *in)
{
    uint64_t n = get_u64(in);
    if (n == NONE)
        return SIZE_MAX;
    if (n > in->left / 8)
        in->bad = true;
    return in->bad ? 0 : (size_t) n;
}

static char **get_strv(struct in *in, size_t *ret_n)
{
    size_t n = get_count(in);
    if (n == SIZE_MAX || in->bad)
        return NULL;
    char **v = calloc(n + 1, sizeof *v);
    if (!v) {
        in->bad = true;
        return NULL;
    }
    for (size_t i = 0; i < n && !in->bad; i++)
        if (!(v[i] = get_str(in)))
            in->bad = true;
    if (ret_n)
        *ret_n = n;
    return v;
}

/* Whether a present field holds exactly size bytes. */
static void *get_sized(struct in *in, size_t size)
{
    size_t n = 0;
    void *p = get_bytes(in, &n);
    if (p && n != size)
        in->bad = true;
    return p;
}

static void get_spec(struct in *in, struct cdn_spec *s)
{
    s->hostname = get_str(in);
    s->workdir = get_str(in);
    s->user = get_str(in);
    s->writable_system = get_flag(in);
    s->read_only_root = get_flag(in);
    s->checkpoints = get_flag(in);
    s->limits.disk_mb = get_u64(in);
    s->limits.ptys = get_u64(in);
    s->limits.nofile = get_u64(in);
    s->n_mounts = get_count(in);
    if (s->n_mounts == SIZE_MAX || s->n_mounts > CDN_MAX_MOUNTS)
        in->bad = true;
    if (!in->bad && s->n_mounts && !(s->mounts = calloc(s->n_mounts, sizeof *s->mounts)))
        in->bad = true;
    for (size_t i = 0; !in->bad && i < s->n_mounts; i++) {
        struct cdn_mount *m = &s->mounts[i];
        m->source = get_str(in);
        m->target = get_str(in);
        uint64_t f = get_u64(in);
        m->readonly = f & 1, m->nonrecursive = f & 2, m->noexec = f & 4;
        if (!m->source || !m->target)
            in->bad = true;
    }
    s->protect.v = get_strv(in, &s->protect.n);
    if (!s->hostname || !s->workdir)
        in->bad = true;
}

static void get_fs_mounts(struct in *in, struct cdn_setup_args *a)
{
    size_t n = get_count(in);
    if (n == SIZE_MAX)
        in->bad = true;
    struct cdn_fs_mount *m = in->bad || !n ? NULL : calloc(n, sizeof *m);
    if (n && !m)
        in->bad = true;
    for (size_t i = 0; !in->bad && i < n; i++) {
        m[i].type = get_str(in);
        m[i].destination = get_str(in);
        m[i].options = get_strv(in, NULL);
        m[i].index = (unsigned) get_u64(in);
        if (!m[i].type || !m[i].destination)
            in->bad = true;
    }
    a->fs_mounts = m;
    a->n_fs_mounts = m ? n : 0; /* all of them, filled or not, for cdn_setup_args_free */
}

/* Whether an image's strings end within their arrays and its layers within theirs. */
static bool image_sound(const struct cdn_image *img)
{
    if (img->n_layers > CDN_IMAGE_LAYERS_MAX || !memchr(img->lower, 0, sizeof img->lower) ||
        !memchr(img->dev, 0, sizeof img->dev) || !memchr(img->digest, 0, sizeof img->digest))
        return false;
    for (size_t i = 0; i < img->n_layers; i++)
        if (!memchr(img->layers[i], 0, sizeof img->layers[i]))
            return false;
    return true;
}

int cdn_setup_args_unpack(const void *buf, size_t len, struct cdn_setup_unpacked *u)
{
    struct in in = {.p = buf, .left = len};
    struct cdn_setup_args *a = &u->args;
    *a = (struct cdn_setup_args){.spec = &u->spec, .seccomp = &u->seccomp};
    if (get_u64(&in) != ARGS_MAGIC)
        return -EINVAL;
    get_spec(&in, &u->spec);
    a->image = get_sized(&in, sizeof *a->image);
    if (a->image && !image_sound(a->image))
        in.bad = true;
    u->seccomp.len[0] = (uint16_t) get_u64(&in);
    u->seccomp.len[1] = (uint16_t) get_u64(&in);
    u->seccomp.insns = get_sized(&in, prog_size(&u->seccomp));
    a->scratch = get_str(&in);
    a->persistent = get_flag(&in);
    a->listen_fd = get_flag(&in) ? 0 : -EBADF;
    a->slot_fd = get_flag(&in) ? 0 : -EBADF;
    a->fanotify_fd = get_flag(&in) ? 0 : -EBADF;
    a->stdio_fd = get_flag(&in) ? 0 : -EBADF;
    a->writable_fd = get_flag(&in) ? 0 : -EBADF;
    uint64_t version = get_u64(&in);
    char *cgroup = get_str(&in);
    if (version != NONE) {
        const struct cdn_cgroup_ops *ops = version == CDN_CGROUP_V1   ? &cdn_cgroup_v1_ops
                                           : version == CDN_CGROUP_V2 ? &cdn_cgroup_v2_ops
                                                                      : NULL;
        if (!ops || !cgroup || strlen(cgroup) >= sizeof u->cgroup.name)
            in.bad = true;
        else {
            cdn_cgroup_init(&u->cgroup, ops, cgroup);
            a->cgroup = &u->cgroup;
        }
    }
    free(cgroup);
    a->netns_given = get_flag(&in);
    a->resolver_ip = (uint32_t) get_u64(&in);
    a->root_in_place = get_flag(&in);
    a->rlimits = get_sized(&in, sizeof(struct rlimit) * RLIM_NLIMITS);
    a->sysctls = get_strv(&in, NULL);
    a->masked_paths = get_strv(&in, NULL);
    a->readonly_paths = get_strv(&in, NULL);
    get_fs_mounts(&in, a);
    size_t extra = 0;
    a->seccomp_extra = get_bytes(&in, &extra);
    a->seccomp_extra_len = (uint16_t) (extra / sizeof(struct sock_filter));
    if (extra % sizeof(struct sock_filter) || extra / sizeof(struct sock_filter) > UINT16_MAX)
        in.bad = true;
    a->restored = get_flag(&in);
    a->uid_base = (uint32_t) get_u64(&in);
    a->into_cgroup_fd = get_flag(&in) ? 0 : -EBADF;
    a->netns_fd = get_flag(&in) ? 0 : -EBADF;
    a->sigmask = get_u64(&in);
    if (get_u64(&in) != ARGS_MAGIC || in.left || !a->image || !u->seccomp.insns || !a->scratch)
        in.bad = true;
    a->go_fd = a->err_fd = a->agent_fd = a->init_fd = 0;
    if (in.bad) {
        cdn_setup_args_free(u);
        return -EINVAL;
    }
    return 0;
}

static void free_strv(char *const *v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free((void *) v);
}

void cdn_setup_args_free(struct cdn_setup_unpacked *u)
{
    struct cdn_spec *s = &u->spec;
    struct cdn_setup_args *a = &u->args;
    free(s->hostname), free(s->workdir), free(s->user);
    for (size_t i = 0; s->mounts && i < s->n_mounts; i++)
        free(s->mounts[i].source), free(s->mounts[i].target);
    free(s->mounts);
    free_strv(s->protect.v);
    free((void *) a->image);
    free(u->seccomp.insns);
    free((void *) a->scratch);
    free((void *) a->rlimits);
    free_strv(a->sysctls), free_strv(a->masked_paths), free_strv(a->readonly_paths);
    for (size_t i = 0; a->fs_mounts && i < a->n_fs_mounts; i++) {
        free((void *) a->fs_mounts[i].type), free((void *) a->fs_mounts[i].destination);
        free_strv(a->fs_mounts[i].options);
    }
    free((void *) a->fs_mounts);
    free((void *) a->seccomp_extra);
    memset(u, 0, sizeof *u);
}
