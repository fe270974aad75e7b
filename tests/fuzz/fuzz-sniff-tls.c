/* Fuzz the TLS ClientHello server_name sniffer of the egress proxy: record
 * layer, handshake reassembly and extension walk over hostile bytes. A prefix
 * of the input must give MORE or the same answer as the whole. */
#include "core/allow.h"
#include "net/sniff.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char name[256];
    int r = cdn_sniff_tls(data, size, name);
    if (r == CDN_SNIFF_OK) {
        uint32_t a;
        if (strnlen(name, sizeof name) == sizeof name ||
            (!cdn_dns_name_valid(name) && !cdn_ipv4_parse(name, &a)))
            abort();
    }
    size_t prefixes[] = {size / 2, size > 0 ? size - 1 : 0};
    for (size_t i = 0; i < 2; i++) {
        int rp = cdn_sniff_tls(data, prefixes[i], name);
        if (rp != CDN_SNIFF_MORE && rp != r)
            abort();
    }
    return 0;
}
