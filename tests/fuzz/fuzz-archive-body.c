/* Fuzz the body of PUT …/archive (src/daemon/archive-body.c): a tar from any
 * client that can reach the socket, plain or compressed; and the same bytes as
 * a gzip'd upload of E2B's POST /files. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/archive-body.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct archive_plan p;
    char msg[1200];
    msg[0] = 0;
    uint8_t *raw = NULL; /* the same bytes as E2B's gzip'd upload (cdn_gunzip_body) */
    size_t raw_len = 0;
    int g = cdn_gunzip_body(data, size, 1 << 20, &raw, &raw_len, msg, sizeof msg);
    if ((g != 0 && ((g != 400 && g != 413 && g != 500) || !msg[0] || raw)) ||
        (g == 0 && raw_len > (1u << 20)))
        __builtin_trap();
    free(raw);
    msg[0] = 0;
    int status = cdn_archive_body_parse(data, size, 1 << 20, &p, msg, sizeof msg);
    if (status != 0) {
        if ((status != 400 && status != 413 && status != 500) || !msg[0] || !memchr(msg, 0, sizeof msg))
            __builtin_trap(); /* refused: an HTTP status and the reason */
        return 0;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < p.n; i++) { /* accepted: every name beneath the destination */
        const struct archive_entry_plan *e = &p.ents[i];
        size_t n = strlen(e->name);
        if (n == 0 || e->name[0] == '/' || strcmp(e->name, "..") == 0 || strncmp(e->name, "../", 3) == 0 ||
            strstr(e->name, "/../") || (n >= 3 && strcmp(e->name + n - 3, "/..") == 0) || e->mode > 07777 ||
            strstr(e->name, "//") || strstr(e->name, "/./") || strncmp(e->name, "./", 2) == 0 ||
            e->name[n - 1] == '/' || strcmp(e->name, ".") == 0 ||
            (e->type != S_IFREG && e->type != S_IFDIR && e->type != S_IFLNK) ||
            (e->type == S_IFLNK && (!e->target || !e->target[0])) || (e->size && !e->data))
            __builtin_trap();
        total += e->size;
    }
    if (total > (1u << 20)) /* within the cap, copies of hard links included */
        __builtin_trap();
    cdn_archive_plan_free(&p);
    return 0;
}
