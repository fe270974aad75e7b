/* Fuzz the HTTP request-head sniffer of the egress proxy: the first bytes a
 * (possibly hostile) sandbox sends on a TCP connection. Beyond memory safety,
 * check that the answer only settles once: a prefix of the input gives MORE
 * or the same answer as the whole. */
#include "core/allow.h"
#include "net/sniff.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cdn_http_head h;
    int r = cdn_sniff_http(data, size, &h);
    if (r == CDN_SNIFF_OK || r == CDN_SNIFF_NONE) {
        if (h.head_len == 0 || h.head_len > size || h.head_len > CDN_SNIFF_HTTP_MAX)
            abort();
        if (strnlen(h.method, sizeof h.method) == 0 || strnlen(h.host, sizeof h.host) == sizeof h.host)
            abort();
        uint32_t a;
        if (r == CDN_SNIFF_OK && !cdn_dns_name_valid(h.host) && !cdn_ipv4_parse(h.host, &a))
            abort();
        if (r == CDN_SNIFF_NONE && h.host[0])
            abort();
        if (cdn_sniff_http(data, h.head_len - 1, &h) != CDN_SNIFF_MORE)
            abort();
    }
    size_t prefixes[] = {size / 2, size > 0 ? size - 1 : 0};
    for (size_t i = 0; i < 2; i++) {
        int rp = cdn_sniff_http(data, prefixes[i], &h);
        if (rp != CDN_SNIFF_MORE && rp != r)
            abort();
    }
    return 0;
}
