/* Parsing of a tar body for PUT …/archive (archive-body.h). Runs in cordond's
 * loop, on the operator's body, parsed as hostile all the same: read whole with
 * libarchive (tar formats only; gzip and zstd in the library, no external
 * filter programs), every entry checked before the caller writes any. */
#include "archive-body.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "shared/macro.h"

void cdn_archive_plan_free(struct archive_plan *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->ents[i].name);
        free(p->ents[i].target);
        free(p->ents[i].data);
    }
    free(p->ents);
    *p = (struct archive_plan){0};
}

/* name as it goes beneath the root: "./" and "/" in front dropped, no "..", no empty result. */
static int clean_name(const char *in, char *out, size_t size)
{
    if (in[0] == '/')
        return -EINVAL;
    size_t n = 0;
    for (const char *c = in; *c;) { /* component by component: "", "." dropped, ".." refused */
        size_t k = strcspn(c, "/");
        if (k == 2 && c[0] == '.' && c[1] == '.')
            return -EINVAL;
        if (k && !(k == 1 && c[0] == '.')) {
            if (n + (n ? 1 : 0) + k >= size)
                return -ENAMETOOLONG;
            if (n)
                out[n++] = '/';
            memcpy(out + n, c, k);
            n += k;
        }
        c += k + (c[k] == '/');
    }
    out[n] = 0;
    return n ? 0 : -ENOENT;
}

/* Reads every entry of the body before anything is written: a refused entry leaves the sandbox as
 * it was. Returns 0, or an HTTP status with msg set. */
int cdn_archive_body_parse(const uint8_t *body, size_t len, uint64_t cap, struct archive_plan *ret, char *msg,
                           size_t size)
{
    struct archive *ar = archive_read_new();
    if (!ar)
        return snprintf(msg, size, "out of memory"), 500;
    (void) archive_read_support_filter_gzip(ar); /* only these, in the library: no external programs */
    (void) archive_read_support_filter_zstd(ar);
    (void) archive_read_support_format_tar(ar);
    (void) archive_read_support_format_gnutar(ar);
    int status = 0;
    uint64_t total = 0;
    struct archive_plan plan = {0}, *a = &plan;
    if (archive_read_open_memory(ar, body, len) != ARCHIVE_OK) {
        (void) snprintf(msg, size, "the body is not a tar archive: %s", archive_error_string(ar));
        status = 400;
    }
    struct archive_entry *ent;
    _cleanup_free_ size_t *links = NULL; /* the symlink entries so far */
    size_t n_links = 0;
    int r = ARCHIVE_FATAL;
    while (status == 0 && (r = archive_read_next_header(ar, &ent)) == ARCHIVE_OK) {
        char name[4096];
        const char *raw = archive_entry_pathname(ent) ? archive_entry_pathname(ent) : "";
        int c = clean_name(raw, name, sizeof name);
        if (c == -ENOENT)
            continue; /* the root itself */
        if (c < 0) {
            (void) snprintf(msg, size, "entry '%.512s': %s", raw,
                            c == -EINVAL ? "absolute or with '..': entries go beneath path only"
                                         : "too long");
            status = 400;
            break;
        }
        for (size_t i = 0; i < n_links; i++) { /* a link the archive made is not a way in, nor written over */
            const char *l = a->ents[links[i]].name;
            size_t k = strlen(l);
            if (strncmp(name, l, k) == 0 && (name[k] == '/' || name[k] == 0)) {
                (void) snprintf(msg, size, "entry '%.512s': %s the symlink entry '%.512s'", name,
                                name[k] ? "goes through" : "has the name of", l);
                status = 400;
                break;
            }
        }
        if (status)
            break;
        if (a->n >= CDN_ARCHIVE_MAX_ENTRIES) {
            (void) snprintf(msg, size, "more than %d entries", CDN_ARCHIVE_MAX_ENTRIES);
            status = 413;
            break;
        }
        if (a->n % 1024 == 0) {
            struct archive_entry_plan *grown = realloc(a->ents, (a->n + 1024) * sizeof *grown);
            if (!grown) {
                status = 500;
                break;
            }
            a->ents = grown;
        }
        struct archive_entry_plan *e = &a->ents[a->n];
        *e = (struct archive_entry_plan){.name = strdup(name),
                                         .mode = archive_entry_perm(ent) & 07777,
                                         .type = archive_entry_filetype(ent)};
        a->n++;
        const char *hard = archive_entry_hardlink(ent);
        if (hard) { /* a copy of the file it names, which came before it */
            char hn[4096];
            struct archive_entry_plan *of = NULL;
            for (size_t i = 0; clean_name(hard, hn, sizeof hn) == 0 && i + 1 < a->n && !of; i++)
                if (a->ents[i].type == S_IFREG && strcmp(a->ents[i].name, hn) == 0)
                    of = &a->ents[i];
            if (!of) {
                (void) snprintf(msg, size,
                                "entry '%.512s': a hard link to '%.512s', which no file before it is", name,
                                hard);
                status = 400;
                break;
            }
            if (of->size > cap - total) { /* a copy counts as the bytes it takes */
                (void) snprintf(msg, size, "entry '%.512s': the archive unpacks to more than %llu bytes",
                                name, (unsigned long long) cap);
                status = 413;
                break;
            }
            total += of->size;
            e->type = S_IFREG, e->size = of->size;
            if (of->size && (e->data = malloc(of->size)))
                memcpy(e->data, of->data, of->size);
        } else if (e->type == S_IFLNK) {
            const char *t = archive_entry_symlink(ent);
            e->target = t && t[0] ? strdup(t) : NULL;
            size_t *grown = n_links % 256 == 0 ? realloc(links, (n_links + 256) * sizeof *links) : links;
            if (!grown) {
                status = 500;
                break;
            }
            links = grown;
            links[n_links++] = a->n - 1;
        } else if (e->type == S_IFREG) {
            la_int64_t sz = archive_entry_size_is_set(ent) ? archive_entry_size(ent) : -1;
            if (sz < 0 || (uint64_t) sz > cap - total) {
                (void) snprintf(msg, size,
                                "entry '%.512s': the archive unpacks to more than max_body (%llu bytes)",
                                name, (unsigned long long) cap);
                status = 413;
                break;
            }
            total += (uint64_t) sz;
            e->size = (size_t) sz;
            if (sz && (e->data = malloc((size_t) sz)) && archive_read_data(ar, e->data, e->size) != sz) {
                (void) snprintf(msg, size, "entry '%.512s': %s", name, archive_error_string(ar));
                status = 400;
                break;
            }
        } else if (e->type != S_IFDIR) {
            (void) snprintf(msg, size, "entry '%.512s': a device, FIFO or socket, which is not unpacked",
                            name);
            status = 400;
            break;
        }
        if (!e->name || (e->type == S_IFLNK && !e->target) || (e->type == S_IFREG && e->size && !e->data)) {
            (void) snprintf(msg, size, "entry '%.512s': %s", name,
                            e->type == S_IFLNK && e->name ? "a symlink to nothing" : "out of memory");
            status = e->type == S_IFLNK && e->name ? 400 : 500;
            break;
        }
    }
    if (status == 0 && r != ARCHIVE_EOF) {
        (void) snprintf(msg, size, "the body is not a whole tar archive: %s", archive_error_string(ar));
        status = 400;
    }
    archive_read_free(ar);
    if (status)
        cdn_archive_plan_free(&plan);
    else
        *ret = plan;
    return status;
}

int cdn_gunzip_body(const uint8_t *body, size_t len, uint64_t cap, uint8_t **out, size_t *out_len, char *msg,
                    size_t size)
{
    /* zlib itself, not libarchive: its raw reader unpacks a gzip'd file inside the body again (a
     * .gz uploaded gzip'd would be stored unpacked) and refuses an empty one. */
    z_stream z = {0};
    msg[0] = 0;
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        return snprintf(msg, size, "out of memory"), 500;
    uint8_t *data = NULL;
    size_t n = 0, room = 0;
    int status = 0;
    z.next_in = (Bytef *) body;
    z.avail_in = 0;
    size_t fed = 0;
    bool ended = false;
    for (;;) {
        if (z.avail_in == 0 && fed < len) { /* zlib counts in uInt: the body in pieces */
            size_t k = len - fed < (1u << 30) ? len - fed : (1u << 30);
            z.next_in = (Bytef *) body + fed;
            z.avail_in = (uInt) k;
            fed += k;
        }
        if (n == room) {
            size_t more = room ? room * 2 : 64u << 10;
            if (more > cap + 1)
                more = (size_t) cap + 1;
            uint8_t *d = more > room ? realloc(data, more) : NULL;
            if (!d) {
                status = more > room ? 500 : 413;
                (void) snprintf(msg, size,
                                status == 500 ? "out of memory" : "the body unpacks to more than %llu bytes",
                                (unsigned long long) cap);
                break;
            }
            data = d, room = more;
        }
        z.next_out = data + n;
        z.avail_out = (uInt) (room - n < (1u << 30) ? room - n : (1u << 30));
        uInt before = z.avail_out;
        int r = inflate(&z, Z_NO_FLUSH);
        n += before - z.avail_out;
        if (r == Z_STREAM_END) {
            ended = true;
            if (z.avail_in == 0 && fed == len)
                break;
            if (inflateReset(&z) != Z_OK) { /* another gzip member follows (gzip a b > c) */
                status = 500;
                break;
            }
            ended = false;
        } else if (r == Z_BUF_ERROR && z.avail_in == 0 && fed == len) {
            break; /* the input ended inside a member: told below */
        } else if (r != Z_OK && r != Z_BUF_ERROR) {
            (void) snprintf(msg, size, "the body is not gzip'd, or is corrupt: %s",
                            z.msg ? z.msg : "bad data");
            status = 400;
            break;
        }
    }
    if (!status && !ended) {
        (void) snprintf(msg, size, "the gzip'd body ends before its data does");
        status = 400;
    }
    if (status == 500 && !msg[0])
        (void) snprintf(msg, size, "out of memory");
    inflateEnd(&z);
    if (status) {
        free(data);
        return status;
    }
    *out = data;
    *out_len = n;
    return 0;
}
