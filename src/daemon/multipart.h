/* A multipart/form-data body (RFC 7578) as E2B's SDK uploads files with it:
 * one part per file, its Content-Disposition naming the path as filename. The
 * bytes are a client's: parsing is bounded and every part checked, an error
 * says which and why. */
#pragma once

#include <stddef.h>

#define CDN_MULTIPART_PARTS 256 /* parts of one body */
#define CDN_MULTIPART_NAME  4096

struct cdn_multipart_part {
    char name[64];                     /* the form field's ("file") */
    char filename[CDN_MULTIPART_NAME]; /* decoded: %22 %0D %0A, as the HTML spec's */
    size_t off, len;                   /* its bytes within the body */
};

/* The boundary of a Content-Type "multipart/form-data; boundary=B" (quoted or not, 1–70 bytes) into
 * out: 0, or -EINVAL. */
int cdn_multipart_boundary(const char *content_type, char out[71]);
/* The parts of body (up to max, into parts): 0 with *n set, or -EINVAL (malformed) / -E2BIG (more
 * than max parts, a name too long) with msg saying why. */
int cdn_multipart_parse(const unsigned char *body, size_t len, const char *boundary,
                        struct cdn_multipart_part *parts, size_t max, size_t *n, char *msg, size_t size);
