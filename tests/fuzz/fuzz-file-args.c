/* Fuzz the query of cordond's file routes (src/daemon/file-args.c): the
 * query string of any client that can reach the socket. The first byte picks
 * the route (enum cdn_file_op), the rest is the query. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"
#include "daemon/file-args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *q = malloc(size); /* the query, NUL-terminated as evhttp hands it over */
    if (!q)
        return 0;
    memcpy(q, data + 1, size - 1);
    q[size - 1] = 0;
    static struct file_args a;
    struct cdn_error e = {0};
    int op = 1 + data[0] % (_CDN_FILE_OP_MAX - 1);
    if (cdn_file_args_parse(q, op, "/workspace", &a, &e) == 0 &&
        (a.path[0] != '/' || memchr(a.path, 0, sizeof a.path) == NULL ||
         (a.max_bytes && op != CDN_FILE_READ) || (a.nofollow && op != CDN_FILE_STAT) ||
         (a.noreplace && op != CDN_FILE_RENAME) || a.mode > 07777 || (a.mode && op != CDN_FILE_CHMOD) ||
         (a.recursive && op != CDN_FILE_WATCH) || (op == CDN_FILE_RENAME) != (a.to[0] == '/') ||
         memchr(a.to, 0, sizeof a.to) == NULL))
        __builtin_trap(); /* accepted: an absolute path, and only the route's own parameters */
    else if (e.msg[0] && !memchr(e.msg, 0, sizeof e.msg))
        __builtin_trap();
    free(q);
    return 0;
}
