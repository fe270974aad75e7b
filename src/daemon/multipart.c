/* multipart/form-data bodies (multipart.h). */
#include "multipart.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define HEADERS_MAX 8192 /* one part's header block */

static int fail(char *msg, size_t size, int e, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(char *msg, size_t size, int e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    (void) vsnprintf(msg, size, fmt, ap);
    va_end(ap);
    return e;
}

int cdn_multipart_boundary(const char *content_type, char out[71])
{
    if (!content_type || strncasecmp(content_type, "multipart/form-data", 19) != 0)
        return -EINVAL;
    const char *p = content_type + 19;
    while ((p = strchr(p, ';'))) {
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncasecmp(p, "boundary=", 9) != 0)
            continue;
        p += 9;
        bool quoted = *p == '"';
        p += quoted;
        size_t n = quoted ? strcspn(p, "\"") : strcspn(p, "; \t");
        if (n == 0 || n > 70 || (quoted && p[n] != '"'))
            return -EINVAL;
        memcpy(out, p, n);
        out[n] = 0;
        return 0;
    }
    return -EINVAL;
}

/* A parameter's value (quoted or a token) from a header's rest: its length, decoded into out, or -1
 * when absent, -2 when it does not fit. */
static int param(const char *h, size_t hl, const char *key, char *out, size_t size)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i < hl;) {
        while (i < hl && (h[i] == ';' || h[i] == ' ' || h[i] == '\t'))
            i++;
        size_t start = i;
        while (i < hl && h[i] != '=' && h[i] != ';')
            i++;
        bool match = i - start == kl && strncasecmp(h + start, key, kl) == 0 && i < hl && h[i] == '=';
        if (i < hl && h[i] == '=')
            i++;
        size_t o = 0;
        bool over = false;
        if (i < hl && h[i] == '"') {
            for (i++; i < hl && h[i] != '"'; i++) {
                char c = h[i]; /* no backslash escapes: undici (the SDK's FormData) sends '\\' as it is */
                if (c == '%' && i + 2 < hl && h[i + 1] == '2' && h[i + 2] == '2')
                    c = '"', i += 2;
                else if (c == '%' && i + 2 < hl && h[i + 1] == '0' && (h[i + 2] == 'D' || h[i + 2] == 'A'))
                    c = h[i + 2] == 'D' ? '\r' : '\n', i += 2;
                if (o + 1 < size && c)
                    out[o++] = c;
                else
                    over = true; /* too long, or a NUL: refused */
            }
            i++;
        } else
            for (; i < hl && h[i] != ';' && h[i] != ' ' && h[i] != '\t'; i++) {
                if (o + 1 < size && h[i])
                    out[o++] = h[i];
                else
                    over = true;
            }
        if (match) {
            out[o] = 0;
            return over ? -2 : (int) o;
        }
    }
    return -1;
}

/* One part's header block [h, h+hl): its Content-Disposition's name and filename. */
static int headers(const char *h, size_t hl, struct cdn_multipart_part *p, size_t k, char *msg, size_t size)
{
    bool seen = false;
    while (hl) {
        const char *eol = memmem(h, hl, "\r\n", 2);
        size_t ll = eol ? (size_t) (eol - h) : hl;
        if (ll > 20 && strncasecmp(h, "Content-Disposition:", 20) == 0) {
            const char *v = h + 20;
            size_t vl = ll - 20;
            while (vl && (*v == ' ' || *v == '\t'))
                v++, vl--;
            if (vl < 9 || strncasecmp(v, "form-data", 9) != 0)
                return fail(msg, size, -EINVAL, "part %zu: Content-Disposition is not form-data", k);
            if (param(v + 9, vl - 9, "name", p->name, sizeof p->name) < 0)
                return fail(msg, size, -EINVAL,
                            "part %zu: Content-Disposition names no field (or a long one)", k);
            int r = param(v + 9, vl - 9, "filename", p->filename, sizeof p->filename);
            if (r == -2)
                return fail(msg, size, -E2BIG,
                            "part %zu: its filename is longer than 4095 bytes or holds a NUL", k);
            if (r < 0)
                p->filename[0] = 0;
            seen = true;
        }
        h += ll + (eol ? 2 : 0);
        hl -= ll + (eol ? 2 : 0);
    }
    if (!seen)
        return fail(msg, size, -EINVAL, "part %zu: no Content-Disposition", k);
    return 0;
}

int cdn_multipart_parse(const unsigned char *body, size_t len, const char *boundary,
                        struct cdn_multipart_part *parts, size_t max, size_t *n, char *msg, size_t size)
{
    char delim[80];
    int dl = snprintf(delim, sizeof delim, "\r\n--%s", boundary);
    if (!boundary[0] || dl < 0 || (size_t) dl >= sizeof delim)
        return fail(msg, size, -EINVAL, "Content-Type: bad boundary");
    /* The first delimiter: at the start, or after a preamble and its line end. */
    size_t pos;
    if (len >= (size_t) dl - 2 && memcmp(body, delim + 2, (size_t) dl - 2) == 0)
        pos = (size_t) dl - 2;
    else {
        const unsigned char *d = memmem(body, len, delim, (size_t) dl);
        if (!d)
            return fail(msg, size, -EINVAL, "the body holds no boundary");
        pos = (size_t) (d - body) + (size_t) dl;
    }
    size_t k = 0;
    for (;;) {
        if (len - pos >= 2 && memcmp(body + pos, "--", 2) == 0)
            break; /* the close delimiter */
        while (pos < len && (body[pos] == ' ' || body[pos] == '\t'))
            pos++; /* transport padding */
        if (len - pos < 2 || memcmp(body + pos, "\r\n", 2) != 0)
            return fail(msg, size, -EINVAL, "part %zu: no line end after its boundary", k);
        pos += 2;
        if (k == max)
            return fail(msg, size, -E2BIG, "more than %zu parts", max);
        struct cdn_multipart_part *p = &parts[k];
        memset(p, 0, sizeof *p);
        size_t look = len - pos < HEADERS_MAX ? len - pos : HEADERS_MAX;
        const unsigned char *end = memmem(body + pos, look, "\r\n\r\n", 4);
        size_t hl;
        if (look >= 2 && memcmp(body + pos, "\r\n", 2) == 0)
            hl = 0; /* no headers at all */
        else if (!end)
            return fail(msg, size, -EINVAL, "part %zu: its headers do not end (within 8 KiB)", k);
        else
            hl = (size_t) (end - (body + pos));
        int r = headers((const char *) body + pos, hl, p, k, msg, size);
        if (r < 0)
            return r;
        pos += hl + (hl ? 4 : 2);
        const unsigned char *d = memmem(body + pos, len - pos, delim, (size_t) dl);
        if (!d)
            return fail(msg, size, -EINVAL, "part %zu: the body ends inside it (no closing boundary)", k);
        p->off = pos;
        p->len = (size_t) (d - (body + pos));
        pos = (size_t) (d - body) + (size_t) dl;
        k++;
    }
    *n = k;
    return 0;
}
