/* The body of PUT …/archive (docs/cordond.md): a tar, plain, gzip'd or
 * zstd'd, read whole into a plan of entries before anything is written. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CDN_ARCHIVE_MAX_ENTRIES 100000

struct archive_entry_plan {
    char *name;    /* relative to the destination: no "/" in front, no "..", not empty */
    mode_t type;   /* S_IFREG, S_IFDIR or S_IFLNK (a hard link: a copy of its file) */
    uint32_t mode; /* permission bits */
    char *target;  /* a symlink's (not empty) */
    uint8_t *data; /* a file's */
    size_t size;
};

struct archive_plan {
    struct archive_entry_plan *ents;
    size_t n;
};

/* 0 and *ret filled (free it with cdn_archive_plan_free), or an HTTP status (400: not a tar, or an
 * entry refused; 413: over cap unpacked or over CDN_ARCHIVE_MAX_ENTRIES; 500: no memory) with msg
 * naming the entry and why. cap bounds the files' bytes unpacked. */
int cdn_archive_body_parse(const uint8_t *body, size_t len, uint64_t cap, struct archive_plan *ret, char *msg,
                           size_t size);
void cdn_archive_plan_free(struct archive_plan *p);
/* A gzip'd body (Content-Encoding: gzip) unpacked: 0 with *out (malloc'd, NULL when empty) and
 * *out_len, or an HTTP status (400: not gzip or corrupt, 413: over cap bytes, 500) with msg. */
int cdn_gunzip_body(const uint8_t *body, size_t len, uint64_t cap, uint8_t **out, size_t *out_len, char *msg,
                    size_t size);
