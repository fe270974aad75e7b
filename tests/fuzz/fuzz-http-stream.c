/* Fuzz the egress proxy's reading of a plain-HTTP request stream (keep-alive
 * and pipelined requests; sniff.h): the bytes a (possibly hostile) sandbox
 * sends on a connection after its first request. Beyond memory safety, check
 * that the verdicts do not depend on how the bytes arrive: the stream fed
 * whole and fed in pieces (sizes taken from the input itself) must find the
 * same heads at the same offsets and stop at the same place for the same
 * reason — a difference would be a request the proxy sees one way and a
 * server, reading other segments, another. */
#include "core/allow.h"
#include "net/sniff.h"

#include <stdlib.h>
#include <string.h>

#define MAX_EVENTS 256

struct run {
    size_t head_at[MAX_EVENTS];
    char host[MAX_EVENTS][256];
    size_t heads;
    size_t end;  /* bytes consumed when it stopped */
    int verdict; /* how it stopped: MORE (all consumed or waiting), NOHOST or BAD */
};

static void check_head(const struct cdn_http_head *h, size_t len, size_t avail)
{
    uint32_t a;
    if (len == 0 || len != h->head_len || len > avail || len > CDN_SNIFF_HTTP_MAX)
        abort();
    if (!h->host[0] || (!cdn_dns_name_valid(h->host) && !cdn_ipv4_parse(h->host, &a)))
        abort();
    if (h->body == CDN_HTTP_BODY_LENGTH &&
        (h->content_length == 0 || h->content_length > CDN_HTTP_LENGTH_MAX))
        abort();
}

/* Feed data[0..size) in pieces: step(i) gives the size of the i-th piece
 * (0: everything at once). */
static void feed(const uint8_t *data, size_t size, size_t piece, struct run *out)
{
    struct cdn_http_stream s = {0};
    size_t off = 0, avail = piece ? 0 : size;
    memset(out, 0, sizeof *out);
    for (;;) {
        struct cdn_http_head h;
        size_t len = 0;
        int r = cdn_http_stream_next(&s, data + off, avail - off, &h, &len);
        if (r == CDN_HTTP_MORE) {
            if (avail == size)
                break;
            avail = avail + piece < size ? avail + piece : size;
            continue;
        }
        if (r == CDN_HTTP_NOHOST || r == CDN_HTTP_BAD) {
            out->verdict = r;
            break;
        }
        if (len == 0 || len > avail - off)
            abort();
        if (r == CDN_HTTP_HEAD) {
            check_head(&h, len, avail - off);
            if (out->heads < MAX_EVENTS) {
                out->head_at[out->heads] = off;
                memcpy(out->host[out->heads], h.host, sizeof h.host);
            }
            out->heads++;
        }
        off += len;
    }
    out->end = off;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct run whole, split;
    feed(data, size, 0, &whole);
    size_t pieces[] = {1, 7, size > 0 ? data[0] % 64 + 1 : 3};
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        feed(data, size, pieces[i], &split);
        if (split.heads != whole.heads || split.end != whole.end || split.verdict != whole.verdict)
            abort();
        for (size_t k = 0; k < whole.heads && k < MAX_EVENTS; k++)
            if (split.head_at[k] != whole.head_at[k] || strcmp(split.host[k], whole.host[k]) != 0)
                abort();
    }
    return 0;
}
