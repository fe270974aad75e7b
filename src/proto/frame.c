/* Agent frame codec. Linked into both cordon-init (static) and libcordon-core;
 * depends on libc only. Every decoder treats its input as hostile. */
#include "frame.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t) v;
    p[1] = (uint8_t) (v >> 8);
}
static uint16_t get16(const uint8_t *p)
{
    return (uint16_t) (p[0] | p[1] << 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t) v;
    p[1] = (uint8_t) (v >> 8);
    p[2] = (uint8_t) (v >> 16);
    p[3] = (uint8_t) (v >> 24);
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}
static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t) v);
    put32(p + 4, (uint32_t) (v >> 32));
}
static uint64_t get64(const uint8_t *p)
{
    return (uint64_t) get32(p) | (uint64_t) get32(p + 4) << 32;
}

void cdn_frame_header_encode(uint8_t buf[CDN_FRAME_HEADER], const struct cdn_frame_header *h)
{
    put32(buf, CDN_FRAME_MAGIC);
    buf[4] = (uint8_t) h->type;
    buf[5] = (uint8_t) (h->type >> 8);
    buf[6] = (uint8_t) h->flags;
    buf[7] = (uint8_t) (h->flags >> 8);
    put32(buf + 8, h->channel);
    put32(buf + 12, h->length);
}

int cdn_frame_header_decode(const uint8_t buf[CDN_FRAME_HEADER], struct cdn_frame_header *ret)
{
    if (get32(buf) != CDN_FRAME_MAGIC)
        return -EBADMSG;
    struct cdn_frame_header h = {
        .type = (uint16_t) (buf[4] | buf[5] << 8),
        .flags = (uint16_t) (buf[6] | buf[7] << 8),
        .channel = get32(buf + 8),
        .length = get32(buf + 12),
    };
    if (h.length > CDN_FRAME_MAX)
        return -EMSGSIZE;
    *ret = h;
    return 0;
}

static int put_str(uint8_t *buf, size_t size, size_t *off, const char *s)
{
    size_t n = strlen(s) + 1;
    if (n > size - *off)
        return -ENOBUFS;
    memcpy(buf + *off, s, n);
    *off += n;
    return 0;
}

int cdn_exec_encode(uint8_t *buf, size_t size, const struct cdn_exec_args *a)
{
    uint32_t argc = 0, envc = 0;
    while (a->argv && a->argv[argc])
        argc++;
    while (a->envp && a->envp[envc])
        envc++;
    if (argc == 0 || argc > CDN_EXEC_MAX_ARGS || envc > CDN_EXEC_MAX_ARGS || size < CDN_EXEC_FIXED)
        return argc == 0 ? -EINVAL : -ENOBUFS;
    uint32_t flags = a->user ? a->flags | CDN_EXEC_USER : a->flags & ~(uint32_t) CDN_EXEC_USER;
    if (a->user && !a->user[0])
        return -EINVAL;
    put32(buf, flags);
    put32(buf + 4, argc);
    put32(buf + 8, envc);
    put16(buf + 12, a->rows);
    put16(buf + 14, a->cols);
    size_t off = CDN_EXEC_FIXED;
    if (put_str(buf, size, &off, a->cwd ? a->cwd : "") < 0)
        return -ENOBUFS;
    for (uint32_t i = 0; i < argc; i++)
        if (put_str(buf, size, &off, a->argv[i]) < 0)
            return -ENOBUFS;
    for (uint32_t i = 0; i < envc; i++)
        if (put_str(buf, size, &off, a->envp[i]) < 0)
            return -ENOBUFS;
    if (a->user && put_str(buf, size, &off, a->user) < 0)
        return -ENOBUFS;
    return off > CDN_FRAME_MAX ? -ENOBUFS : (int) off;
}

/* Take the next NUL-terminated string at *off; -EBADMSG if it runs past len. */
static int take_str(const uint8_t *p, size_t len, size_t *off, const char **ret)
{
    if (*off >= len)
        return -EBADMSG;
    const uint8_t *nul = memchr(p + *off, 0, len - *off);
    if (!nul)
        return -EBADMSG;
    *ret = (const char *) p + *off;
    *off = (size_t) (nul - p) + 1;
    return 0;
}

int cdn_exec_decode(const uint8_t *p, size_t len, struct cdn_exec_req *ret)
{
    if (len < CDN_EXEC_FIXED)
        return -EBADMSG;
    ret->flags = get32(p);
    ret->argc = get32(p + 4);
    ret->envc = get32(p + 8);
    ret->rows = get16(p + 12);
    ret->cols = get16(p + 14);
    if (ret->argc == 0 || ret->argc > CDN_EXEC_MAX_ARGS || ret->envc > CDN_EXEC_MAX_ARGS)
        return -EBADMSG;
    size_t off = CDN_EXEC_FIXED;
    if (take_str(p, len, &off, &ret->cwd) < 0)
        return -EBADMSG;
    for (uint32_t i = 0; i < ret->argc; i++)
        if (take_str(p, len, &off, &ret->argv[i]) < 0)
            return -EBADMSG;
    for (uint32_t i = 0; i < ret->envc; i++)
        if (take_str(p, len, &off, &ret->envp[i]) < 0)
            return -EBADMSG;
    ret->user = NULL;
    if ((ret->flags & CDN_EXEC_USER) && (take_str(p, len, &off, &ret->user) < 0 || !ret->user[0]))
        return -EBADMSG;
    ret->argv[ret->argc] = NULL;
    ret->envp[ret->envc] = NULL;
    return off == len ? 0 : -EBADMSG;
}

int cdn_file_encode(uint8_t *buf, size_t size, uint32_t op, uint32_t mode, const char *path, const void *data,
                    size_t data_len)
{
    size_t off = 8;
    if (size < off)
        return -ENOBUFS;
    put32(buf, op);
    put32(buf + 4, mode);
    if (put_str(buf, size, &off, path) < 0 || data_len > size - off || off + data_len > CDN_FRAME_MAX)
        return -ENOBUFS;
    if (data_len)
        memcpy(buf + off, data, data_len);
    return (int) (off + data_len);
}

int cdn_file_decode(const uint8_t *p, size_t len, struct cdn_file_req *ret)
{
    size_t off = 8;
    if (len < off + 1)
        return -EBADMSG;
    struct cdn_file_req r = {.op = get32(p) & ~CDN_FILE_AS_USER, .mode = get32(p + 4)};
    if (r.op == 0 || r.op >= _CDN_FILE_OP_MAX || r.mode > 07777 || take_str(p, len, &off, &r.path) < 0 ||
        r.path[0] == 0)
        return -EBADMSG;
    if ((get32(p) & CDN_FILE_AS_USER) && (take_str(p, len, &off, &r.user) < 0 || !r.user[0]))
        return -EBADMSG;
    bool to = r.op == CDN_FILE_RENAME || r.op == CDN_FILE_SYMLINK;
    if (r.op != CDN_FILE_WRITE && (off < len || to)) { /* the options */
        if (len - off < CDN_FILE_OPTS || (!to && len - off != CDN_FILE_OPTS))
            return -EBADMSG;
        r.opts = (struct cdn_file_opts){
            .flags = get32(p + off), .window = get32(p + off + 4), .max_bytes = get64(p + off + 8)};
        uint32_t known = r.op == CDN_FILE_RENAME  ? CDN_FILE_NOREPLACE | CDN_FILE_OWNERS
                         : to                     ? 0
                         : r.op == CDN_FILE_READ  ? CDN_FILE_NOFOLLOW | CDN_FILE_CUT
                         : r.op == CDN_FILE_WATCH ? CDN_FILE_RECURSIVE
                         : r.op == CDN_FILE_STAT || r.op == CDN_FILE_LIST || r.op == CDN_FILE_MKDIR
                             ? CDN_FILE_NOFOLLOW | CDN_FILE_OWNERS
                             : CDN_FILE_NOFOLLOW;
        if (r.opts.flags & ~known)
            return -EBADMSG;
        off += CDN_FILE_OPTS;
        if (to && (r.mode || r.opts.window || r.opts.max_bytes || take_str(p, len, &off, &r.to) < 0 ||
                   !r.to[0] || off != len))
            return -EBADMSG;
        off = len;
    }
    r.data = p + off;
    r.data_len = len - off;
    *ret = r;
    return 0;
}

int cdn_file_set_user(uint8_t *buf, size_t size, size_t len, const char *user)
{
    size_t n = strlen(user) + 1;
    const uint8_t *nul = len > 8 ? memchr(buf + 8, 0, len - 8) : NULL;
    if (n == 1)
        return -EINVAL;
    if (!nul || (get32(buf) & CDN_FILE_AS_USER) || n > size - len || len + n > CDN_FRAME_MAX)
        return -ENOBUFS;
    size_t at = (size_t) (nul - buf) + 1;
    memmove(buf + at + n, buf + at, len - at);
    memcpy(buf + at, user, n);
    put32(buf, get32(buf) | CDN_FILE_AS_USER);
    return (int) (len + n);
}

int cdn_file_encode_opts(uint8_t *buf, size_t size, uint32_t op, uint32_t mode, const char *path,
                         const struct cdn_file_opts *o)
{
    if (op == CDN_FILE_WRITE)
        return -EINVAL;
    int n = cdn_file_encode(buf, size, op, mode, path, NULL, 0);
    if (n < 0 || (size_t) n + CDN_FILE_OPTS > size || (size_t) n + CDN_FILE_OPTS > CDN_FRAME_MAX)
        return -ENOBUFS;
    put32(buf + n, o->flags);
    put32(buf + n + 4, o->window);
    put64(buf + n + 8, o->max_bytes);
    return n + (int) CDN_FILE_OPTS;
}

int cdn_file_encode_to(uint8_t *buf, size_t size, uint32_t op, const char *from, const char *to,
                       uint32_t flags)
{
    struct cdn_file_opts o = {.flags = flags};
    if (op != CDN_FILE_RENAME && op != CDN_FILE_SYMLINK)
        return -EINVAL;
    int n = cdn_file_encode_opts(buf, size, op, 0, from, &o);
    size_t off = n < 0 ? 0 : (size_t) n;
    if (n < 0 || !to[0] || put_str(buf, size < CDN_FRAME_MAX ? size : CDN_FRAME_MAX, &off, to) < 0)
        return n < 0 ? n : -ENOBUFS;
    return (int) off;
}

int cdn_window_decode(const uint8_t *p, size_t len, uint32_t *ret_bytes)
{
    if (len != 4 || get32(p) == 0)
        return -EBADMSG;
    *ret_bytes = get32(p);
    return 0;
}

void cdn_window_encode(uint8_t buf[4], uint32_t bytes)
{
    put32(buf, bytes);
}

void cdn_tcp_open_encode(uint8_t buf[6], uint16_t port, uint32_t window)
{
    buf[0] = (uint8_t) port, buf[1] = (uint8_t) (port >> 8);
    put32(buf + 2, window);
}

int cdn_tcp_open_decode(const uint8_t *p, size_t len, uint16_t *ret_port, uint32_t *ret_window)
{
    if (len != 6)
        return -EBADMSG;
    uint16_t port = (uint16_t) (p[0] | p[1] << 8);
    uint32_t window = get32(p + 2);
    if (!port || !window)
        return -EBADMSG;
    *ret_port = port, *ret_window = window;
    return 0;
}

int cdn_protected_encode(uint8_t *buf, size_t size, const uint64_t *ids, uint32_t n)
{
    if (n > CDN_PROTECTED_MAX || size < 4 + 8 * (size_t) n)
        return -ENOBUFS;
    put32(buf, n);
    for (uint32_t i = 0; i < n; i++)
        put64(buf + 4 + 8 * (size_t) i, ids[i]);
    return (int) (4 + 8 * (size_t) n);
}

int cdn_protected_decode(const uint8_t *p, size_t len, uint64_t *ids, uint32_t *ret_n)
{
    if (len < 4 || get32(p) > CDN_PROTECTED_MAX || len != 4 + 8 * (size_t) get32(p))
        return -EBADMSG;
    uint32_t n = get32(p);
    for (uint32_t i = 0; i < n; i++)
        ids[i] = get64(p + 4 + 8 * (size_t) i);
    *ret_n = n;
    return 0;
}

int cdn_protect_list_encode(uint8_t *buf, size_t size, const char *const *v, size_t n)
{
    size_t off = 4;
    if (n > CDN_PROTECT_LIST_MAX || size < off)
        return -ENOBUFS;
    put32(buf, (uint32_t) n);
    for (size_t i = 0; i < n; i++)
        if (!v[i][0] || strlen(v[i]) > CDN_PROTECT_PATTERN_MAX || put_str(buf, size, &off, v[i]) < 0)
            return -ENOBUFS;
    return (int) off;
}

int cdn_protect_list_decode(const uint8_t *p, size_t len, const char **v, size_t *ret_n)
{
    if (len < 4 || get32(p) > CDN_PROTECT_LIST_MAX)
        return -EBADMSG;
    size_t n = get32(p), off = 4;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *nul = memchr(p + off, 0, len - off);
        size_t l = nul ? (size_t) (nul - (p + off)) : 0;
        if (!nul || l == 0 || l > CDN_PROTECT_PATTERN_MAX)
            return -EBADMSG;
        v[i] = (const char *) p + off;
        off += l + 1;
    }
    if (off != len)
        return -EBADMSG;
    *ret_n = n;
    return 0;
}

#define STAT_FIXED 20

int cdn_file_stat_encode(uint8_t *buf, size_t size, const struct cdn_file_stat *st)
{
    size_t off = STAT_FIXED;
    if (size < off)
        return -ENOBUFS;
    put32(buf, st->mode);
    put64(buf + 4, st->size);
    put64(buf + 12, (uint64_t) st->mtime);
    if (put_str(buf, size, &off, st->name ? st->name : "") < 0)
        return -ENOBUFS;
    if (st->owner) {
        if (size - off < 8)
            return -ENOBUFS;
        put32(buf + off, st->uid);
        put32(buf + off + 4, st->gid);
        off += 8;
        if (put_str(buf, size, &off, st->owner) < 0 ||
            put_str(buf, size, &off, st->group ? st->group : "") < 0)
            return -ENOBUFS;
    }
    return (int) off;
}

int cdn_file_stat_decode(const uint8_t *p, size_t len, struct cdn_file_stat *ret)
{
    size_t off = STAT_FIXED;
    if (len < off + 1)
        return -EBADMSG;
    struct cdn_file_stat st = {.mode = get32(p), .size = get64(p + 4), .mtime = (int64_t) get64(p + 12)};
    if (take_str(p, len, &off, &st.name) < 0)
        return -EBADMSG;
    *ret = st;
    return (int) off;
}

int cdn_file_stat_decode_owned(const uint8_t *p, size_t len, struct cdn_file_stat *ret)
{
    struct cdn_file_stat st;
    int n = cdn_file_stat_decode(p, len, &st);
    size_t off = n < 0 ? 0 : (size_t) n;
    if (n < 0 || len - off < 8)
        return -EBADMSG;
    st.uid = get32(p + off);
    st.gid = get32(p + off + 4);
    off += 8;
    if (take_str(p, len, &off, &st.owner) < 0 || take_str(p, len, &off, &st.group) < 0)
        return -EBADMSG;
    *ret = st;
    return (int) off;
}

int cdn_exit_encode(uint8_t *buf, size_t size, const struct cdn_exit_msg *m)
{
    if (size < 32)
        return -ENOBUFS;
    put32(buf, (uint32_t) m->exit_code);
    put32(buf + 4, (uint32_t) m->signal);
    put64(buf + 8, m->user_us);
    put64(buf + 16, m->sys_us);
    put64(buf + 24, m->maxrss_kb);
    return 32;
}

int cdn_exit_decode(const uint8_t *p, size_t len, struct cdn_exit_msg *ret)
{
    if (len != 32)
        return -EBADMSG;
    ret->exit_code = (int32_t) get32(p);
    ret->signal = (int32_t) get32(p + 4);
    ret->user_us = get64(p + 8);
    ret->sys_us = get64(p + 16);
    ret->maxrss_kb = get64(p + 24);
    if (ret->signal < 0 || ret->signal > 64 || ret->exit_code < 0 || ret->exit_code > 255)
        return -EBADMSG;
    return 0;
}

int cdn_errmsg_encode(uint8_t *buf, size_t size, int errnum, const char *msg)
{
    size_t off = 4;
    if (size < 5)
        return -ENOBUFS;
    put32(buf, (uint32_t) errnum);
    if (put_str(buf, size, &off, msg) < 0)
        return -ENOBUFS;
    return (int) off;
}

int cdn_errmsg_decode(const uint8_t *p, size_t len, int *ret_errno, const char **ret_msg)
{
    size_t off = 4;
    if (len < 5)
        return -EBADMSG;
    int e = (int32_t) get32(p);
    if (e <= 0 || e > 4095 || take_str(p, len, &off, ret_msg) < 0 || off != len)
        return -EBADMSG;
    *ret_errno = e;
    return 0;
}

int cdn_frame_send(int fd, uint16_t type, uint32_t channel, const void *payload, uint32_t len)
{
    uint8_t hdr[CDN_FRAME_HEADER];
    cdn_frame_header_encode(hdr, &(struct cdn_frame_header){.type = type, .channel = channel, .length = len});
    struct iovec iov[2] = {{hdr, sizeof hdr}, {(void *) payload, len}};
    size_t total = sizeof hdr + len, done = 0;
    while (done < total) {
        ssize_t n = writev(fd, iov, 2);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        done += (size_t) n;
        for (int i = 0; i < 2 && n > 0; i++) {
            size_t k = (size_t) n < iov[i].iov_len ? (size_t) n : iov[i].iov_len;
            iov[i].iov_base = (char *) iov[i].iov_base + k;
            iov[i].iov_len -= k;
            n -= (ssize_t) k;
        }
    }
    return 0;
}

static int read_exact(int fd, uint8_t *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -ECONNRESET;
        got += (size_t) n;
    }
    return 0;
}

int cdn_frame_recv(int fd, struct cdn_frame_header *h, uint8_t *buf, size_t size)
{
    uint8_t hdr[CDN_FRAME_HEADER];
    int r = read_exact(fd, hdr, sizeof hdr);
    if (r < 0)
        return r;
    r = cdn_frame_header_decode(hdr, h);
    if (r < 0)
        return r;
    if (h->length > size)
        return -EMSGSIZE;
    r = read_exact(fd, buf, h->length);
    return r < 0 ? r : (int) h->length;
}

#define IDENTITY_FIXED (8 + CDN_IDENTITY_SEED + 16 + 13 + 16)

int cdn_identity_encode(uint8_t *buf, size_t size, const struct cdn_identity *id)
{
    size_t hl = strnlen(id->hostname, sizeof id->hostname), wl = strnlen(id->workdir, sizeof id->workdir);
    size_t n = IDENTITY_FIXED + hl + 1 + wl + 1;
    if (hl == 0 || hl >= sizeof id->hostname || wl == 0 || wl >= sizeof id->workdir ||
        id->workdir[0] != '/' || id->prefix > 30 || n > size)
        return -ENOBUFS;
    uint8_t *p = buf;
    put64(p, id->time_ns);
    memcpy(p + 8, id->seed, CDN_IDENTITY_SEED);
    memcpy(p + 8 + CDN_IDENTITY_SEED, id->machine_id, 16);
    p += 8 + CDN_IDENTITY_SEED + 16;
    put32(p, id->ip);
    put32(p + 4, id->gateway);
    put32(p + 8, id->resolver);
    p[12] = id->prefix;
    put32(p + 13, id->pids);
    put32(p + 17, id->nofile);
    put32(p + 21, id->disk_mb);
    put32(p + 25, id->memory_mb);
    memcpy(buf + IDENTITY_FIXED, id->hostname, hl + 1);
    memcpy(buf + IDENTITY_FIXED + hl + 1, id->workdir, wl + 1);
    if (id->n_paths > CDN_IDENTITY_PATHS || n + 1 > size)
        return -ENOBUFS;
    buf[n++] = (uint8_t) id->n_paths;
    for (unsigned i = 0; i < id->n_paths; i++) {
        size_t pl = strnlen(id->paths[i].path, sizeof id->paths[i].path);
        uint8_t k = id->paths[i].kind;
        bool user = k == CDN_PATH_USER;
        if (k < CDN_PATH_BIND_RW || k > CDN_PATH_USER ||
            (user ? !pl || memchr(id->paths[i].path, '/', pl) : id->paths[i].path[0] != '/') ||
            pl >= sizeof id->paths[i].path || n + 2 + pl > size)
            return -ENOBUFS;
        buf[n++] = k;
        memcpy(buf + n, id->paths[i].path, pl + 1);
        n += pl + 1;
    }
    return (int) n;
}

int cdn_identity_decode(const uint8_t *p, size_t len, struct cdn_identity *id)
{
    if (len < IDENTITY_FIXED + 5)
        return -EBADMSG;
    const uint8_t *h = p + IDENTITY_FIXED, *end = p + len;
    const uint8_t *nul = memchr(h, 0, (size_t) (end - h));
    const uint8_t *w = nul ? nul + 1 : NULL;
    const uint8_t *wnul = w && w < end ? memchr(w, 0, (size_t) (end - w)) : NULL;
    if (!wnul)
        return -EBADMSG;
    size_t hl = (size_t) (nul - h), wl = (size_t) (wnul - w);
    if (hl == 0 || hl >= sizeof id->hostname || wl == 0 || wl >= sizeof id->workdir || w[0] != '/')
        return -EBADMSG;
    const uint8_t *q = p + 8 + CDN_IDENTITY_SEED + 16;
    if (q[12] > 30)
        return -EBADMSG;
    const uint8_t *c = wnul + 1;
    if (c >= end || *c > CDN_IDENTITY_PATHS)
        return -EBADMSG;
    id->n_paths = *c++;
    for (unsigned i = 0; i < id->n_paths; i++) {
        if (c >= end) /* fewer paths than it said */
            return -EBADMSG;
        const uint8_t *pn = c + 1 < end ? memchr(c + 1, 0, (size_t) (end - c - 1)) : NULL;
        bool user = *c == CDN_PATH_USER;
        if (!pn || *c < CDN_PATH_BIND_RW || *c > CDN_PATH_USER ||
            (user ? pn == c + 1 || memchr(c + 1, '/', (size_t) (pn - c - 1)) : c[1] != '/') ||
            (size_t) (pn - c - 1) >= sizeof id->paths[i].path)
            return -EBADMSG;
        id->paths[i].kind = *c;
        memcpy(id->paths[i].path, c + 1, (size_t) (pn - c));
        c = pn + 1;
    }
    if (c != end)
        return -EBADMSG;
    id->time_ns = get64(p);
    memcpy(id->seed, p + 8, CDN_IDENTITY_SEED);
    memcpy(id->machine_id, p + 8 + CDN_IDENTITY_SEED, 16);
    id->ip = get32(q);
    id->gateway = get32(q + 4);
    id->resolver = get32(q + 8);
    id->prefix = q[12];
    id->pids = get32(q + 13);
    id->nofile = get32(q + 17);
    id->disk_mb = get32(q + 21);
    id->memory_mb = get32(q + 25);
    memcpy(id->hostname, h, hl + 1);
    memcpy(id->workdir, w, wl + 1);
    return 0;
}

int cdn_policy_decode(const uint8_t *p, size_t len, struct cdn_policy *ret)
{
    if (len < 6 || p[0] & ~CDN_POLICY_KILL || p[1])
        return -EBADMSG;
    uint16_t a = get16(p + 2), b = get16(p + 4);
    if (a == 0 || b == 0 || a > 4096 || b > 4096 || len != 6 + ((size_t) a + b) * 8)
        return -EBADMSG;
    *ret = (struct cdn_policy){.flags = p[0], .len = {a, b}, .insns = p + 6};
    return 0;
}

#define VIOLATION_FIXED (13 + 6 * 8)

int cdn_violation_encode(uint8_t *buf, size_t size, const struct cdn_violation_msg *m)
{
    size_t cl = strnlen(m->cmd, sizeof m->cmd), pl = strnlen(m->path, sizeof m->path),
           ol = strnlen(m->op, sizeof m->op);
    size_t n = VIOLATION_FIXED + cl + 1 + pl + 1 + ol + 1;
    if (m->kind < CDN_VIOLATION_MSG_SYSCALL || m->kind > CDN_VIOLATION_MSG_SYMLINK || cl >= sizeof m->cmd ||
        pl >= sizeof m->path || ol >= sizeof m->op || n > size)
        return -ENOBUFS;
    buf[0] = m->kind;
    put32(buf + 1, m->nr);
    put32(buf + 5, m->arch);
    put32(buf + 9, m->pid);
    for (int i = 0; i < 6; i++)
        put64(buf + 13 + 8 * i, m->args[i]);
    uint8_t *p = buf + VIOLATION_FIXED;
    memcpy(p, m->cmd, cl + 1);
    memcpy(p + cl + 1, m->path, pl + 1);
    memcpy(p + cl + 1 + pl + 1, m->op, ol + 1);
    return (int) n;
}

/* One NUL-terminated string of at most size - 1 bytes at *p (before end) into dst; advances *p. */
static int take_string(const uint8_t **p, const uint8_t *end, char *dst, size_t size)
{
    const uint8_t *nul = *p < end ? memchr(*p, 0, (size_t) (end - *p)) : NULL;
    if (!nul || (size_t) (nul - *p) >= size)
        return -EBADMSG;
    memcpy(dst, *p, (size_t) (nul - *p) + 1);
    *p = nul + 1;
    return 0;
}

int cdn_violation_decode(const uint8_t *p, size_t len, struct cdn_violation_msg *ret)
{
    if (len < VIOLATION_FIXED + 3 || p[0] < CDN_VIOLATION_MSG_SYSCALL || p[0] > CDN_VIOLATION_MSG_SYMLINK)
        return -EBADMSG;
    const uint8_t *s = p + VIOLATION_FIXED, *end = p + len;
    if (take_string(&s, end, ret->cmd, sizeof ret->cmd) < 0 ||
        take_string(&s, end, ret->path, sizeof ret->path) < 0 ||
        take_string(&s, end, ret->op, sizeof ret->op) < 0 || s != end)
        return -EBADMSG;
    ret->kind = p[0];
    ret->nr = get32(p + 1);
    ret->arch = get32(p + 5);
    ret->pid = get32(p + 9);
    for (int i = 0; i < 6; i++)
        ret->args[i] = get64(p + 13 + 8 * i);
    return 0;
}

int cdn_usage_encode(uint8_t *buf, size_t size, const struct cdn_usage_msg *u)
{
    if (size < 49)
        return -ENOBUFS;
    put64(buf, u->memory_peak_bytes);
    put64(buf + 8, u->oom_kills);
    put64(buf + 16, u->pids_max_hits);
    buf[24] = u->disk_full ? 1 : 0;
    put64(buf + 25, u->pids);
    put64(buf + 33, u->disk_used_bytes);
    put64(buf + 41, u->disk_size_bytes);
    return 49;
}

int cdn_usage_decode(const uint8_t *p, size_t len, struct cdn_usage_msg *ret)
{
    if ((len != 25 && len != 49) || p[24] > 1)
        return -EBADMSG;
    *ret = (struct cdn_usage_msg){.memory_peak_bytes = get64(p),
                                  .oom_kills = get64(p + 8),
                                  .pids_max_hits = get64(p + 16),
                                  .disk_full = p[24],
                                  .now_known = len == 49,
                                  .pids = len == 49 ? get64(p + 25) : 0,
                                  .disk_used_bytes = len == 49 ? get64(p + 33) : 0,
                                  .disk_size_bytes = len == 49 ? get64(p + 41) : 0};
    if (ret->disk_used_bytes > ret->disk_size_bytes)
        return -EBADMSG;
    return 0;
}
